// Transformer (transformer.h): allocation, then the forward and backward passes, top to bottom.
// Notation: B batch, T sequence, N = B * T rows, C dim, NH / NKV query / kv heads, HS head size,
// KV = NKV * HS, H MLP width, FC rows of the first MLP weight (GPT-2 H, LLaMA 2H [gate | up]),
// V vocabulary (Vp = padded_vocab(V), the logits' row stride), L layers. Every op is queued on the backend's compute stream; backward ops
// accumulate, so each scratch gradient is zeroed right before use. Loading and init live in
// transformer_io.cc.
#include "model/net/transformer.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "offload/resident_weights.h"

namespace strata::model {
namespace {

constexpr uint64_t kBufferAlign = 256;  // bytes, as the arena aligns blocks

// Hands out consecutive 256-byte aligned ranges of one block: working-precision tensors of
// `esize`-byte elements and fp32 statistics. With a null base it only counts.
class Carver {
 public:
  Carver(std::byte* base, uint64_t esize) : base_(base), esize_(esize) {}
  std::byte* tensor(uint64_t elements) { return take(elements * esize_); }
  float* stats(uint64_t floats) { return reinterpret_cast<float*>(take(floats * sizeof(float))); }
  std::byte* take(uint64_t bytes) {
    const uint64_t at = used_;
    used_ += (bytes + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
    return base_ != nullptr ? base_ + at : nullptr;
  }
  uint64_t used() const { return used_; }

 private:
  std::byte* base_;
  uint64_t esize_;
  uint64_t used_ = 0;
};

// Carves every activation and scratch gradient for N = B * T rows from `base` (null: count only)
// and returns the bytes used. Identical order for any N, so the block sized for the largest N
// holds every smaller one.
uint64_t carve(const ModelConfig& c, bool checkpoint, uint64_t esize, int64_t B, int64_t T, std::byte* base,
               Activations& a, ActivationGrads& d) {
  const uint64_t N = uint64_t(B) * uint64_t(T), C = c.dim, KV = c.kv_dim(), NH = c.n_head;
  const uint64_t H = c.ffn_hidden, FC = c.fc_rows(), V = c.vocab, L = c.n_layer;
  const bool gpt2 = c.arch == Arch::gpt2;
  Carver k(base, esize);
  a.residual = k.tensor((L + 1) * N * C);
  a.layers.assign(checkpoint ? 1 : L, {});
  for (auto& la : a.layers) {
    la.ln1 = k.tensor(N * C);
    la.ln1_mean = gpt2 ? k.stats(N) : nullptr;
    la.ln1_rstd = k.stats(N);
    la.qkv = k.tensor(N * (C + 2 * KV));
    la.q = la.qkv;
    la.k = la.qkv != nullptr ? la.qkv + C * esize : nullptr;
    la.v = la.qkv != nullptr ? la.qkv + (C + KV) * esize : nullptr;
    la.att = k.tensor(N * C);
    la.att_lse = k.stats(N * NH);
    la.att_proj = k.tensor(N * C);
    la.res1 = k.tensor(N * C);
    la.ln2 = k.tensor(N * C);
    la.ln2_mean = gpt2 ? k.stats(N) : nullptr;
    la.ln2_rstd = k.stats(N);
    la.fc = k.tensor(N * FC);
    la.fc_act = k.tensor(N * H);
    la.fc_proj = k.tensor(N * C);
  }
  a.lnf = k.tensor(N * C);
  a.lnf_mean = gpt2 ? k.stats(N) : nullptr;
  a.lnf_rstd = k.stats(N);
  a.logits = k.tensor(N * uint64_t(padded_vocab(int64_t(V))));  // (N, Vp): aligned rows, see padded_vocab
  a.ce_lse = k.stats(N);
  a.ce_losses = k.stats(N);
  a.loss = reinterpret_cast<kernels::CrossEntropyResult*>(k.take(sizeof(kernels::CrossEntropyResult)));
  d.dres = k.tensor(N * C);
  d.dln = k.tensor(N * C);
  d.datt = k.tensor(N * C);
  d.dqkv = k.tensor(N * (C + 2 * KV));
  d.dq = d.dqkv;
  d.dk = d.dqkv != nullptr ? d.dqkv + C * esize : nullptr;
  d.dv = d.dqkv != nullptr ? d.dqkv + (C + KV) * esize : nullptr;
  d.dfc = k.tensor(N * FC);
  d.dfc_act = k.tensor(N * H);
  return k.used();
}

// Layer-major (TransformerOptions::micro_batches = K > 1): micro-batches 1 .. K - 1 each keep a
// residual stream (L + 1, N, C) and a d residual (N, C) of their own (micro-batch 0 uses the
// activation block's), and a tied table's head contributions of micro-batches 1 .. K - 1 wait in
// copies of its chunks (Transformer::step_layer_major). With a null base it only counts. Sizes
// for the largest (B, T).
uint64_t carve_layer_major(const ModelConfig& c, const TransformerOptions& o, const ParamLayout& layout,
                           std::byte* base, std::vector<std::byte*>* residual, std::vector<std::byte*>* dres,
                           std::vector<std::byte*>* stash) {
  Carver k(base, dtype_size(o.dtype));
  const uint64_t N = uint64_t(o.batch) * uint64_t(o.seq_len > 0 ? o.seq_len : c.max_seq), C = c.dim;
  const uint64_t extra = o.micro_batches > 1 ? uint64_t(o.micro_batches) - 1 : 0;
  for (uint64_t m = 0; m < extra; ++m) {
    std::byte* r = k.tensor((uint64_t(c.n_layer) + 1) * N * C);
    std::byte* d = k.tensor(N * C);
    if (residual != nullptr) residual->push_back(r);
    if (dres != nullptr) dres->push_back(d);
  }
  if (c.tied_head)
    for (uint64_t m = 0; m < extra; ++m)
      for (size_t t = 0; t < layout.embedding_chunks(); ++t) {
        std::byte* p = k.take(layout.chunks[t].bytes);
        if (stash != nullptr) stash->push_back(p);
      }
  return k.used();
}

}  // namespace

// ---- creation ------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Transformer>> Transformer::create(Backend& backend, const ModelConfig& config,
                                                           const TransformerOptions& options, ChunkSources sources) {
  TransformerOptions o = options;
  if (o.dtype != DType::f32 && o.dtype != DType::bf16 && o.dtype != DType::f16) {
    return error(Code::invalid_argument, "transformer '{}': working precision {} is not one of fp32, bf16, fp16",
                 config.name, dtype_name(o.dtype));
  }
  STRATA_ASSIGN_OR_RETURN(ParamLayout layout, build_param_layout(config, dtype_size(o.dtype)));
  STRATA_ASSIGN_OR_RETURN(ParamLayout master_layout, build_param_layout(config, sizeof(float)));
  if (o.seq_len == 0) o.seq_len = config.max_seq;
  if (o.batch < 1 || o.seq_len < 1 || o.seq_len > config.max_seq) {
    return error(Code::invalid_argument,
                 "transformer '{}': batch {} and seq_len {} must be >= 1 and seq_len <= max_seq {}", config.name,
                 o.batch, o.seq_len, config.max_seq);
  }
  if (o.micro_batches < 1 || (o.micro_batches > 1 && !o.checkpoint_layers))
    return error(Code::invalid_argument, "transformer '{}': {} micro-batches per layer-major step; more than 1 needs "
                 "checkpoint_layers (each micro-batch keeps only its layer inputs)", config.name, o.micro_batches);
  if (WeightSource* w = sources.weights) {
    bool same = w->chunk_count() == layout.chunks.size();
    for (size_t c = 0; same && c < layout.chunks.size(); ++c) same = w->chunk_bytes(c) == layout.chunks[c].bytes;
    if (!same)
      return error(Code::invalid_argument, "transformer '{}': the weight source's {} chunks do not match the {} {} "
                   "chunks of the model's layout", config.name, w->chunk_count(), layout.chunks.size(),
                   dtype_name(o.dtype));
  }
  std::unique_ptr<Transformer> model(
      new Transformer(backend, config, std::move(layout), std::move(master_layout), o));
  STRATA_RETURN_IF_ERROR(model->allocate_all(sources));
  return model;
}

uint64_t Transformer::activation_bytes(const ModelConfig& config, const TransformerOptions& options) {
  Activations a;
  ActivationGrads d;
  const int64_t T = options.seq_len > 0 ? options.seq_len : config.max_seq;
  const uint64_t one =
      carve(config, options.checkpoint_layers, dtype_size(options.dtype), options.batch, T, nullptr, a, d);
  if (options.micro_batches <= 1) return one;
  StatusOr<std::shared_ptr<const ParamLayout>> layout = shared_param_layout(config, dtype_size(options.dtype));
  if (!layout.is_ok()) return one;  // create() refuses this config anyway
  // A block of its own, aligned as the arena aligns blocks.
  const uint64_t extra = carve_layer_major(config, options, **layout, nullptr, nullptr, nullptr, nullptr);
  return one + (extra + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
}

Transformer::Transformer(Backend& backend, ModelConfig config, ParamLayout layout, ParamLayout master_layout,
                         TransformerOptions options)
    : backend_(backend),
      ops_(backend.ops()),
      config_(std::move(config)),
      layout_(std::move(layout)),
      master_layout_(std::move(master_layout)),
      options_(options),
      esize_(layout_.element_bytes),
      embedding_chunks_(layout_.embedding_chunks()),
      head_chunks_(layout_.head_chunks()),
      layer_chunks_(layout_.layer_chunks()) {}

Transformer::~Transformer() {
  Status s = backend_.synchronize_all();
  if (!s.is_ok()) spdlog::warn("transformer '{}': releasing memory after a failed stream: {}", config_.name, s);
  for (void* block : blocks_) {
    s = backend_.release(block);
    if (!s.is_ok()) spdlog::warn("transformer '{}': {}", config_.name, s);
  }
}

// The weight source (the given one, or every chunk resident), the model's own device gradients
// (options.device_grads), then one block for all activations at (batch, seq_len).
Status Transformer::allocate_all(ChunkSources sources) {
  chunk_params_.assign(layout_.chunks.size(), {});
  for (const ParamSpec& p : layout_.params) chunk_params_[p.chunk].push_back(&p);
  std::vector<uint64_t> chunk_bytes;
  std::vector<std::string> chunk_names;
  for (const ChunkSpec& c : layout_.chunks) {
    chunk_bytes.push_back(c.bytes);
    chunk_names.push_back(c.name);
  }
  weights_ = sources.weights;
  if (weights_ == nullptr) {
    PinnedPool* pinned = sources.pinned;
    if (pinned == nullptr) {
      STRATA_ASSIGN_OR_RETURN(own_pinned_, PinnedPool::create({}));
      pinned = own_pinned_.get();
    }
    STRATA_ASSIGN_OR_RETURN(own_weights_,
                            ResidentWeights::create(backend_, *pinned, chunk_bytes, chunk_names, config_.name));
    weights_ = own_weights_.get();
  }
  if (options_.device_grads) {
    STRATA_ASSIGN_OR_RETURN(device_grads_, DeviceGrads::create(backend_, options_.dtype, chunk_bytes, chunk_names, config_.name));
    grad_sink_ = device_grads_.get();
  }
  const uint64_t act_bytes = carve(config_, options_.checkpoint_layers, esize_, options_.batch, options_.seq_len,
                                   nullptr, acts_, dacts_);
  STRATA_ASSIGN_OR_RETURN(void* block, backend_.allocate(act_bytes,
                                                          fmt::format("{} activations (B={}, T={})", config_.name,
                                                                      options_.batch, options_.seq_len)));
  blocks_.push_back(block);
  act_block_ = static_cast<std::byte*>(block);
  carve_activations(options_.batch, options_.seq_len);
  if (options_.micro_batches > 1) {
    const uint64_t extra = carve_layer_major(config_, options_, layout_, nullptr, nullptr, nullptr, nullptr);
    const std::string tag = fmt::format("{} layer-major micro-batches (K={}, B={}, T={})", config_.name,
                                        options_.micro_batches, options_.batch, options_.seq_len);
    STRATA_ASSIGN_OR_RETURN(void* mb, backend_.allocate(extra, tag));
    blocks_.push_back(mb);
    carve_layer_major(config_, options_, layout_, static_cast<std::byte*>(mb), &mb_residual_, &mb_dres_, &tied_stash_);
  }
  return Status::ok();
}

void Transformer::carve_activations(int64_t B, int64_t T) {
  carve(config_, options_.checkpoint_layers, esize_, B, T, act_block_, acts_, dacts_);
  B_ = B;
  T_ = T;
}

Status Transformer::set_grad_sink(GradSink* sink) {
  if (sink == nullptr && device_grads_ == nullptr)
    return error(Code::failed_precondition, "transformer '{}': created without device gradients, so it needs a "
                 "gradient sink", config_.name);
  grad_sink_ = sink != nullptr ? sink : device_grads_.get();
  return Status::ok();
}

Status Transformer::zero_grad() {
  if (grad_sink_ == nullptr)
    return error(Code::failed_precondition, "transformer '{}': no gradient sink (created with device_grads = false "
                 "and none set)", config_.name);
  if (optimizer_ != nullptr && optimizer_->pending())
    return error(Code::failed_precondition, "transformer '{}': zero_grad while the optimizer's update is pending "
                 "(it still reads the last step's gradient); finish_update first", config_.name);
  return grad_sink_->begin_step();
}

LayerParams Transformer::bind_layer_chunk(size_t c, std::byte* base) const {
  LayerParams out;
  for (const ParamSpec* p : chunk_params_[c]) param_field(out, LayerField(p->field)) = base + p->field_offset;
  return out;
}

void Transformer::bind_globals(GlobalParams& out, size_t chunk, std::byte* base) const {
  for (const ParamSpec* p : chunk_params_[chunk]) param_field(out, GlobalField(p->field)) = base + p->field_offset;
}

StatusOr<std::byte*> Transformer::acquire_chunk(size_t c) {
  if (optimizer_ != nullptr) STRATA_RETURN_IF_ERROR(optimizer_->prepare(c));
  return weights_->acquire(c);
}

Status Transformer::traced(std::string_view what, int64_t index, const std::function<Status()>& work) {
  if (trace_ == nullptr) return work();
  return trace_->stream_span(backend_, Stream::compute, "compute",
                             index >= 0 ? fmt::format("{} {}", what, index) : std::string(what), work);
}

std::vector<uint32_t> Transformer::gradient_releases() const {
  return gradient_releases(config_, layout_.chunks.size());
}

std::vector<uint32_t> Transformer::gradient_releases(const ModelConfig& config, size_t chunk_count) {
  std::vector<uint32_t> releases(chunk_count, 1);
  if (config.tied_head)  // backward: each table tile's head contribution, then its embedding's (tile k is chunk k)
    for (size_t k = 0; k < size_t(vocab_tiles(config)); ++k) releases[k] = 2;
  return releases;
}

StatusOr<std::byte*> Transformer::acquire_head_table(size_t k, std::byte* first) {
  if (!config_.tied_head && k == 0) return first;
  return acquire_chunk(head_table_chunk(k));
}

Status Transformer::release_head_table(size_t k) {
  if (!config_.tied_head && k == 0) return Status::ok();
  return weights_->release(head_table_chunk(k));
}

// ---- forward -------------------------------------------------------------------------------------

Status Transformer::forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T) {
  return forward_pass(inputs, targets, B, T, std::nullopt);
}

Status Transformer::forward_with_loss_gradient(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                                               int64_t counted_targets, float grad_scale) {
  STRATA_RETURN_IF_ERROR(check_counted_targets(counted_targets, B * T));
  return forward_pass(inputs, targets, B, T, dloss_of(counted_targets, grad_scale, B * T));
}

Status Transformer::forward_pass(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                                 std::optional<float> dloss) {
  if (B < 1 || T < 1 || B > options_.batch || T > options_.seq_len) {
    return error(Code::invalid_argument,
                 "transformer '{}': forward on B={} T={} but buffers were sized for B<={} T<={}; create the model "
                 "with a larger TransformerOptions batch / seq_len",
                 config_.name, B, T, options_.batch, options_.seq_len);
  }
  carve_activations(B, T);
  inputs_ = inputs;
  targets_ = targets;

  STRATA_RETURN_IF_ERROR(for_embedding_tiles([&](size_t k, const GlobalParams& emb, const GlobalParams& first) {
    return embedding_forward_tile(k, emb, first);
  }));
  for (int l = 0; l < config_.n_layer; ++l) {
    if (layer_chunks_ > 1) {
      STRATA_RETURN_IF_ERROR(tiled_layer_forward(l));
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(std::byte* w, acquire_chunk(layer_chunk(l)));
    STRATA_RETURN_IF_ERROR(traced("forward layer", l, [&] { return layer_forward(bind_layer(l, w), l); }));
    STRATA_RETURN_IF_ERROR(weights_->release(layer_chunk(l)));
  }
  STRATA_ASSIGN_OR_RETURN(std::byte* head, acquire_chunk(head_chunk()));
  STRATA_RETURN_IF_ERROR(head_forward(head, dloss));
  return weights_->release(head_chunk());
}

// Embedding, one vocabulary tile at a time: GPT-2 adds learned positions (in the first tile,
// held while the others pass); LLaMA's positions enter through RoPE.
Status Transformer::for_embedding_tiles(const EmbeddingTileWork& work) {
  GlobalParams first;
  STRATA_ASSIGN_OR_RETURN(std::byte* first_chunk, acquire_chunk(embedding_chunk()));
  bind_globals(first, embedding_chunk(), first_chunk);
  for (size_t k = 0; k < embedding_chunks_; ++k) {
    GlobalParams emb = first;
    if (k > 0) {
      STRATA_ASSIGN_OR_RETURN(std::byte* w, acquire_chunk(k));
      bind_globals(emb, k, w);
    }
    STRATA_RETURN_IF_ERROR(work(k, emb, first));
    if (k > 0) STRATA_RETURN_IF_ERROR(weights_->release(k));
  }
  return weights_->release(embedding_chunk());
}

Status Transformer::embedding_forward_tile(size_t k, const GlobalParams& emb, const GlobalParams& first) {
  const ChunkSpec& tile = layout_.chunks[k];
  const int64_t N = B_ * T_, C = config_.dim;
  return traced("forward embedding", embedding_chunks_ > 1 ? int64_t(k) : -1, [&] {
    if (config_.arch == Arch::gpt2)
      return ops_.encoder_forward(options_.dtype, residual(0), inputs_, emb.wte, first.wpe, B_, T_, C, tile.rows,
                                  tile.row_begin);
    return ops_.token_embedding_forward(options_.dtype, residual(0), inputs_, emb.wte, N, C, tile.rows,
                                        tile.row_begin);
  });
}

// Final norm, head (tied to wte or lm_head) one table tile at a time into its columns of the
// logits, then the fused cross-entropy -> mean loss on the device (and, given dloss, its gradient
// over the logits in the same pass).
Status Transformer::head_forward(std::byte* head, std::optional<float> dloss) {
  dlogits_dloss_.reset();
  const int64_t N = B_ * T_, V = config_.vocab;
  GlobalParams g;
  bind_globals(g, head_chunk(), head);
  const size_t tiles = size_t(vocab_tiles(config_));
  const int64_t Vp = logits_stride();
  for (size_t k = 0; k < tiles; ++k) {
    STRATA_ASSIGN_OR_RETURN(std::byte* base, acquire_head_table(k, head));
    GlobalParams t;
    bind_globals(t, head_table_chunk(k), base);
    const std::byte* table = config_.tied_head ? t.wte : t.lm_head;
    STRATA_RETURN_IF_ERROR(traced(k == 0 ? "forward head" : "forward head tile", k == 0 ? -1 : int64_t(k), [&]() -> Status {
      if (k == 0)
        STRATA_RETURN_IF_ERROR(
            norm_forward(acts_.lnf, acts_.lnf_mean, acts_.lnf_rstd, residual(config_.n_layer), g.lnf_w, g.lnf_b));
      STRATA_RETURN_IF_ERROR(head_table_forward(head_table_chunk(k), table));
      if (k + 1 < tiles) return Status::ok();
      if (!dloss) {
        return ops_.crossentropy_forward(options_.dtype, acts_.ce_lse, acts_.ce_losses, acts_.loss, acts_.logits,
                                         targets_, N, V, Vp);
      }
      STRATA_RETURN_IF_ERROR(ops_.crossentropy_forward_backward_inplace(
          options_.dtype, acts_.ce_lse, acts_.ce_losses, acts_.loss, acts_.logits, targets_, *dloss, N, V, Vp));
      dlogits_dloss_ = dloss;
      return Status::ok();
    }));
    STRATA_RETURN_IF_ERROR(release_head_table(k));
  }
  return Status::ok();
}

// x = residual[l] -> residual[l + 1]:  res1 = x + attn(norm1(x));  out = res1 + mlp(norm2(res1)).
// `write_output` false in the backward's recomputation (residual[l + 1] already holds it).
Status Transformer::layer_forward(const LayerParams& p, int l, bool write_output) {
  const LayerActivations& a = layer_acts(l);
  STRATA_RETURN_IF_ERROR(attention_half_forward(p, l));
  STRATA_RETURN_IF_ERROR(mlp_forward(p, a));
  if (!write_output) return Status::ok();
  return ops_.residual_forward(options_.dtype, residual(l + 1), a.res1, a.fc_proj, B_ * T_ * config_.dim);
}

Status Transformer::attention_half_forward(const LayerParams& p, int l) {
  const LayerActivations& a = layer_acts(l);
  const std::byte* x = residual(l);
  STRATA_RETURN_IF_ERROR(norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1_w, p.ln1_b));
  STRATA_RETURN_IF_ERROR(attention_forward(p, a));
  STRATA_RETURN_IF_ERROR(ops_.residual_forward(options_.dtype, a.res1, x, a.att_proj, B_ * T_ * config_.dim));
  return norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res1, p.ln2_w, p.ln2_b);
}

// The tiled layer's forward: the attention half, the first weight's tiles into fc, the
// activation, the second weight's tiles into fc_proj, the residual add.
Status Transformer::tiled_layer_forward(int l) {
  const LayerActivations& a = layer_acts(l);
  STRATA_ASSIGN_OR_RETURN(std::byte* w, acquire_chunk(layer_chunk(l)));
  STRATA_RETURN_IF_ERROR(traced("forward layer", l, [&] { return attention_half_forward(bind_layer(l, w), l); }));
  STRATA_RETURN_IF_ERROR(weights_->release(layer_chunk(l)));
  STRATA_RETURN_IF_ERROR(tiled_mlp_forward(l, "forward", /*second=*/true));
  return traced("forward layer residual", l, [&] {
    return ops_.residual_forward(options_.dtype, residual(l + 1), a.res1, a.fc_proj, B_ * T_ * config_.dim);
  });
}

// ln1 -> qkv (N, C + 2 KV) = one GEMM with the fused weight [Wq; Wk; Wv] -> [RoPE on q and k, in
// place] -> causal attention over q, k, v, column blocks of qkv's rows -> out projection.
Status Transformer::attention_forward(const LayerParams& p, const LayerActivations& a) {
  const int64_t N = B_ * T_, C = config_.dim, KV = config_.kv_dim(), HS = config_.head_dim();
  const int64_t NH = config_.n_head, NKV = config_.n_kv_head, QKV = C + 2 * KV;
  STRATA_RETURN_IF_ERROR(ops_.matmul_forward(options_.dtype, a.qkv, a.ln1, p.qkv_w, p.qkv_b, N, C, QKV));
  if (config_.arch == Arch::llama) {
    STRATA_RETURN_IF_ERROR(ops_.rope_forward(options_.dtype, a.q, a.q, B_, T_, NH, HS, config_.rope_theta, 0, QKV));
    STRATA_RETURN_IF_ERROR(ops_.rope_forward(options_.dtype, a.k, a.k, B_, T_, NKV, HS, config_.rope_theta, 0, QKV));
  }
  STRATA_RETURN_IF_ERROR(
      ops_.attention_forward(options_.dtype, a.att, a.att_lse, a.q, a.k, a.v, B_, T_, NH, NKV, HS, QKV));
  return ops_.matmul_forward(options_.dtype, a.att_proj, a.att, p.attn_proj_w, p.attn_proj_b, N, C, C);
}

// ln2 -> fc -> GELU (GPT-2) or SwiGLU over [gate | up] (LLaMA) -> projection back to C.
// The MLP's tiles forward, each acquired, used and released: the first weight's into fc, the
// activation after its last, then (second) the second weight's into fc_proj. Spans "<what> layer
// <l> mlp in|out tile <k>".
Status Transformer::tiled_mlp_forward(int l, std::string_view what, bool second) {
  const LayerActivations& a = layer_acts(l);
  const int64_t tiles = mlp_tiles(config_);
  for (const bool in : {true, false}) {
    if (!in && !second) break;
    for (int64_t k = 0; k < tiles; ++k) {
      const size_t c = in ? mlp_in_chunk(l, k) : mlp_out_chunk(l, k);
      const ChunkSpec& tile = layout_.chunks[c];
      STRATA_ASSIGN_OR_RETURN(std::byte* t, acquire_chunk(c));
      const LayerParams p = bind_layer_chunk(c, t);
      const TileRows r{tile.row_begin, tile.row_begin + tile.rows};
      STRATA_RETURN_IF_ERROR(traced(fmt::format("{} layer {} mlp {} tile", what, l, in ? "in" : "out"), k, [&]() -> Status {
        if (!in) return mlp_out_forward(p, a, r);
        STRATA_RETURN_IF_ERROR(mlp_in_forward(p, a, r));
        return k + 1 < tiles ? Status::ok() : mlp_activation_forward(a);
      }));
      STRATA_RETURN_IF_ERROR(weights_->release(c));
    }
  }
  return Status::ok();
}

Status Transformer::mlp_forward(const LayerParams& p, const LayerActivations& a) {
  const int64_t N = B_ * T_, C = config_.dim, H = config_.ffn_hidden, FC = config_.fc_rows();
  if (config_.arch == Arch::gpt2) {  // the projection and its GELU in one op (one pass where fused)
    STRATA_RETURN_IF_ERROR(ops_.matmul_forward_gelu(options_.dtype, a.fc_act, a.fc, a.ln2, p.fc_w, p.fc_b, N, C, FC));
  } else {
    STRATA_RETURN_IF_ERROR(ops_.matmul_forward(options_.dtype, a.fc, a.ln2, p.fc_w, p.fc_b, N, C, FC));
    STRATA_RETURN_IF_ERROR(mlp_activation_forward(a));
  }
  return ops_.matmul_forward(options_.dtype, a.fc_proj, a.fc_act, p.fc_proj_w, p.fc_proj_b, N, H, C);
}

Status Transformer::mlp_activation_forward(const LayerActivations& a) {
  const int64_t N = B_ * T_, H = config_.ffn_hidden;
  if (config_.arch == Arch::gpt2) return ops_.gelu_forward(options_.dtype, a.fc_act, a.fc, N * H);
  return ops_.swiglu_forward(options_.dtype, a.fc_act, a.fc, N, H);
}

// Hidden units r: GPT-2 fc columns r (row stride H); LLaMA the gate's and the up's columns r of
// fc = [gate | up] (row stride 2H), from the tile's [gate rows r | up rows r].
Status Transformer::mlp_in_forward(const LayerParams& p, const LayerActivations& a, TileRows r) {
  const int64_t N = B_ * T_, C = config_.dim, H = config_.ffn_hidden, FC = config_.fc_rows(), h = r.rows();
  if (config_.arch == Arch::gpt2)
    return ops_.matmul_forward(options_.dtype, at(a.fc, r.begin), a.ln2, p.fc_w, p.fc_b, N, C, h, FC);
  STRATA_RETURN_IF_ERROR(ops_.matmul_forward(options_.dtype, at(a.fc, r.begin), a.ln2, p.fc_w, nullptr, N, C, h, FC));
  return ops_.matmul_forward(options_.dtype, at(a.fc, H + r.begin), a.ln2, at(p.fc_w, h * C), nullptr, N, C, h, FC);
}

// Output rows r: fc_proj's columns r (row stride C).
Status Transformer::mlp_out_forward(const LayerParams& p, const LayerActivations& a, TileRows r) {
  const int64_t N = B_ * T_, C = config_.dim, H = config_.ffn_hidden;
  return ops_.matmul_forward(options_.dtype, at(a.fc_proj, r.begin), a.fc_act, p.fc_proj_w, p.fc_proj_b, N, H,
                             r.rows(), C);
}

// LayerNorm (GPT-2, mean saved) or RMSNorm (LLaMA) over rows of (N, C).
Status Transformer::norm_forward(std::byte* out, float* mean, float* rstd, const std::byte* inp,
                                 const std::byte* w, const std::byte* b) {
  const int64_t N = B_ * T_, C = config_.dim;
  if (config_.arch == Arch::gpt2) return ops_.layernorm_forward(options_.dtype, out, mean, rstd, inp, w, b, N, C, config_.norm_eps);
  return ops_.rmsnorm_forward(options_.dtype, out, rstd, inp, w, N, C, config_.norm_eps);
}

// ---- backward ------------------------------------------------------------------------------------

Status Transformer::check_counted_targets(int64_t counted_targets, int64_t rows) const {
  if (counted_targets >= 0 && counted_targets <= rows) return Status::ok();
  return error(Code::invalid_argument, "transformer '{}': counted_targets {} outside [0, B*T = {}]", config_.name,
               counted_targets, rows);
}

float Transformer::dloss_of(int64_t counted_targets, float grad_scale, int64_t rows) {
  return grad_scale / float(counted_targets > 0 ? counted_targets : rows);
}

Status Transformer::backward(int64_t counted_targets, float grad_scale) {
  if (inputs_ == nullptr) {
    return error(Code::failed_precondition, "transformer '{}': backward() before any forward()", config_.name);
  }
  STRATA_RETURN_IF_ERROR(check_counted_targets(counted_targets, B_ * T_));
  if (grad_sink_ == nullptr)
    return error(Code::failed_precondition, "transformer '{}': backward() without a gradient sink", config_.name);
  const float dloss = dloss_of(counted_targets, grad_scale);
  if (dlogits_dloss_ && *dlogits_dloss_ != dloss) {
    return error(Code::failed_precondition,
                 "transformer '{}': backward(counted_targets {}, grad_scale {}) gives a loss gradient of {} per "
                 "target, but the forward wrote {} over the logits; pass forward_with_loss_gradient the same "
                 "counted_targets and grad_scale",
                 config_.name, counted_targets, grad_scale, dloss, *dlogits_dloss_);
  }
  GradSink& sink = *grad_sink_;
  STRATA_ASSIGN_OR_RETURN(std::byte* head, acquire_chunk(head_chunk()));
  STRATA_RETURN_IF_ERROR(head_backward(head, dloss, sink, /*stash=*/nullptr));
  STRATA_RETURN_IF_ERROR(weights_->release(head_chunk()));
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    if (layer_chunks_ > 1) {
      STRATA_RETURN_IF_ERROR(tiled_layer_backward(l, sink, options_.checkpoint_layers && l != config_.n_layer - 1));
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(std::byte* w, acquire_chunk(layer_chunk(l)));
    // Checkpointing: rebuild layer l's internals from its saved input (the last layer's are still
    // in the shared buffers from the forward).
    STRATA_RETURN_IF_ERROR(layer_backward_step(l, w, sink, options_.checkpoint_layers && l != config_.n_layer - 1));
    STRATA_RETURN_IF_ERROR(weights_->release(layer_chunk(l)));
  }
  return embedding_backward_tiles(sink);
}

// Loss -> logits (in place) -> head (tied: the gradient lands in wte's) -> final norm. dres is
// d loss / d residual stream from here down. The tied embedding's gradient gets two
// contributions per backward: this one, and the embedding's at the end.
Status Transformer::head_backward(std::byte* head, float dloss, GradSink& sink, std::byte* const* stash) {
  const int64_t N = B_ * T_, C = config_.dim, V = config_.vocab, L = config_.n_layer;
  const int64_t Vp = logits_stride();  // dlogits keep the logits' padded rows
  if (!dlogits_dloss_) {  // else the forward wrote them (for this dloss: backward() checked)
    STRATA_RETURN_IF_ERROR(
        ops_.crossentropy_backward_inplace(options_.dtype, acts_.logits, acts_.ce_lse, targets_, dloss, N, V, Vp));
  }
  dlogits_dloss_.reset();
  const std::byte* dlogits = acts_.logits;
  GlobalParams p, g;
  bind_globals(p, head_chunk(), head);
  STRATA_ASSIGN_OR_RETURN(std::byte* head_grads, sink.acquire(head_chunk()));
  bind_globals(g, head_chunk(), head_grads);
  const size_t tiles = size_t(vocab_tiles(config_));
  for (size_t k = 0; k < tiles; ++k) {
    const size_t c = head_table_chunk(k);
    const bool own = !config_.tied_head && k == 0;  // the head's first chunk, held already
    const bool stashed = stash != nullptr && !own;
    STRATA_ASSIGN_OR_RETURN(std::byte* base, acquire_head_table(k, head));
    std::byte* grads = head_grads;
    if (stashed) {
      grads = stash[k];  // zeroed as the sink's buffer is
      STRATA_RETURN_IF_ERROR(backend_.fill_zero(grads, layout_.chunks[c].bytes));
    } else if (!own) {
      STRATA_ASSIGN_OR_RETURN(grads, sink.acquire(c));
    }
    GlobalParams t, dt;
    bind_globals(t, c, base);
    bind_globals(dt, c, grads);
    const std::byte* table = config_.tied_head ? t.wte : t.lm_head;
    std::byte* dtable = config_.tied_head ? dt.wte : dt.lm_head;
    STRATA_RETURN_IF_ERROR(traced(k == 0 ? "backward head" : "backward head tile", k == 0 ? -1 : int64_t(k), [&]() -> Status {
      if (k == 0) STRATA_RETURN_IF_ERROR(backend_.fill_zero(dacts_.dres, bytes(N * C)));  // the norm adds into it
      STRATA_RETURN_IF_ERROR(head_table_backward(c, table, dtable, dlogits, /*first=*/k == 0));
      if (k + 1 < tiles) return Status::ok();
      return norm_backward(dacts_.dres, g.lnf_w, g.lnf_b, dacts_.dln, residual(L), p.lnf_w, acts_.lnf_mean,
                           acts_.lnf_rstd);
    }));
    STRATA_RETURN_IF_ERROR(release_head_table(k));
    // The tied embedding's tiles get a second contribution, the embedding's, at the end.
    if (!own && !stashed) STRATA_RETURN_IF_ERROR(sink.release(c, /*last=*/!config_.tied_head));
  }
  return sink.release(head_chunk(), /*last=*/true);
}

Status Transformer::layer_backward_step(int l, std::byte* w, GradSink& sink, bool recompute) {
  STRATA_ASSIGN_OR_RETURN(std::byte* gw, sink.acquire(layer_chunk(l)));
  const LayerParams lp = bind_layer(l, w);
  STRATA_RETURN_IF_ERROR(traced("backward layer", l, [&]() -> Status {
    if (recompute) STRATA_RETURN_IF_ERROR(layer_forward(lp, l, /*write_output=*/false));
    return layer_backward(lp, bind_layer(l, gw), l);
  }));
  return sink.release(layer_chunk(l), /*last=*/true);
}

// The embedding's backward needs no weights, only its gradient chunks, a tile at a time
// (GPT-2's positions, in the first, once).
Status Transformer::embedding_backward_tiles(GradSink& sink) {
  const int64_t N = B_ * T_, C = config_.dim;
  for (size_t k = 0; k < embedding_chunks_; ++k) {
    const ChunkSpec& tile = layout_.chunks[k];
    GlobalParams ge;
    STRATA_ASSIGN_OR_RETURN(std::byte* emb_grads, sink.acquire(k));
    bind_globals(ge, k, emb_grads);
    STRATA_RETURN_IF_ERROR(traced("backward embedding", embedding_chunks_ > 1 ? int64_t(k) : -1, [&] {
      if (config_.arch == Arch::gpt2)
        return ops_.encoder_backward(options_.dtype, ge.wte, k == 0 ? ge.wpe : nullptr, dacts_.dres, inputs_, B_, T_,
                                     C, tile.rows, tile.row_begin);
      return ops_.token_embedding_backward(options_.dtype, ge.wte, dacts_.dres, inputs_, N, C, tile.rows,
                                           tile.row_begin);
    }));
    STRATA_RETURN_IF_ERROR(sink.release(k, /*last=*/true));
  }
  return Status::ok();
}

Status Transformer::head_table_forward(size_t c, const std::byte* table) {
  const ChunkSpec& tile = layout_.chunks[c];
  const int64_t N = B_ * T_, C = config_.dim;
  const int64_t block = options_.dtype == DType::f32 ? kVocabTileBlock : tile.rows;
  for (int64_t r = 0; r < tile.rows; r += block) {
    STRATA_RETURN_IF_ERROR(ops_.matmul_forward(options_.dtype, at(acts_.logits, tile.row_begin + r), acts_.lnf,
                                               at(table, r * C), nullptr, N, C, std::min(block, tile.rows - r),
                                               logits_stride()));
  }
  return Status::ok();
}

Status Transformer::head_table_backward(size_t c, const std::byte* table, std::byte* dtable, const std::byte* dlogits,
                                        bool first) {
  const ChunkSpec& tile = layout_.chunks[c];
  const int64_t N = B_ * T_, C = config_.dim;
  const int64_t block = options_.dtype == DType::f32 ? kVocabTileBlock : tile.rows;
  for (int64_t r = 0; r < tile.rows; r += block) {
    const int64_t rows = std::min(block, tile.rows - r);
    // dln: the first GEMM of the first tile writes it, the rest add; each block's table rows are
    // written once into the sink's zeroed chunk.
    const GradStore dln_store = first && r == 0 ? GradStore::overwrite : GradStore::add;
    STRATA_RETURN_IF_ERROR(ops_.matmul_backward(options_.dtype, dacts_.dln, at(dtable, r * C), nullptr,
                                                at(dlogits, tile.row_begin + r), acts_.lnf, at(table, r * C), N, C,
                                                rows, logits_stride(), dln_store, GradStore::overwrite));
  }
  return Status::ok();
}

// dres = d out on entry, d x on return. The residual adds pass dres through unchanged, so each
// branch reads dres as its output gradient and its norm accumulates its input gradient into dres.
Status Transformer::layer_backward(const LayerParams& p, const LayerParams& g, int l) {
  STRATA_RETURN_IF_ERROR(mlp_backward(p, g, layer_acts(l)));  // dres -> dln = d ln2
  return attention_half_backward(p, g, l);
}

// dln = d ln2 on entry (dres = d out); dres = d x on return.
Status Transformer::attention_half_backward(const LayerParams& p, const LayerParams& g, int l) {
  const LayerActivations& a = layer_acts(l);
  STRATA_RETURN_IF_ERROR(
      norm_backward(dacts_.dres, g.ln2_w, g.ln2_b, dacts_.dln, a.res1, p.ln2_w, a.ln2_mean, a.ln2_rstd));
  STRATA_RETURN_IF_ERROR(attention_backward(p, g, a));  // dres -> dln = d ln1
  return norm_backward(dacts_.dres, g.ln1_w, g.ln1_b, dacts_.dln, residual(l), p.ln1_w, a.ln1_mean, a.ln1_rstd);
}

// The tiled layer's backward: the layer's chunk held throughout (checkpointing: its attention
// half and the first weight's tiles recompute fc and fc_act), the second weight's tiles last to
// first into dfc_act, the activation's backward, the first weight's tiles last to first into
// dln, then the attention half with the layer's own gradient chunk.
Status Transformer::tiled_layer_backward(int l, GradSink& sink, bool recompute) {
  const LayerActivations& a = layer_acts(l);
  const ActivationGrads& d = dacts_;
  const int64_t N = B_ * T_, C = config_.dim, H = config_.ffn_hidden;
  const int64_t tiles = mlp_tiles(config_);
  STRATA_ASSIGN_OR_RETURN(std::byte* w, acquire_chunk(layer_chunk(l)));
  const LayerParams lp = bind_layer(l, w);
  if (recompute) {
    STRATA_RETURN_IF_ERROR(traced("recompute layer", l, [&] { return attention_half_forward(lp, l); }));
    STRATA_RETURN_IF_ERROR(tiled_mlp_forward(l, "recompute", /*second=*/false));
  }
  for (const bool out : {true, false}) {
    for (int64_t k = tiles - 1; k >= 0; --k) {
      const size_t c = out ? mlp_out_chunk(l, k) : mlp_in_chunk(l, k);
      const ChunkSpec& tile = layout_.chunks[c];
      STRATA_ASSIGN_OR_RETURN(std::byte* t, acquire_chunk(c));
      STRATA_ASSIGN_OR_RETURN(std::byte* gt, sink.acquire(c));
      const LayerParams p = bind_layer_chunk(c, t), g = bind_layer_chunk(c, gt);
      const TileRows r{tile.row_begin, tile.row_begin + tile.rows};
      STRATA_RETURN_IF_ERROR(traced(fmt::format("backward layer {} mlp {} tile", l, out ? "out" : "in"), k, [&]() -> Status {
        if (out) {
          if (k == tiles - 1) STRATA_RETURN_IF_ERROR(backend_.fill_zero(d.dfc_act, bytes(N * H)));
          STRATA_RETURN_IF_ERROR(mlp_out_backward(p, g, a, r));
          return k > 0 ? Status::ok() : mlp_activation_backward(a);
        }
        if (k == tiles - 1) STRATA_RETURN_IF_ERROR(backend_.fill_zero(d.dln, bytes(N * C)));
        return mlp_in_backward(p, g, a, r);
      }));
      STRATA_RETURN_IF_ERROR(weights_->release(c));
      STRATA_RETURN_IF_ERROR(sink.release(c, /*last=*/true));
    }
  }
  STRATA_ASSIGN_OR_RETURN(std::byte* gw, sink.acquire(layer_chunk(l)));
  STRATA_RETURN_IF_ERROR(traced("backward layer", l, [&] { return attention_half_backward(lp, bind_layer(l, gw), l); }));
  STRATA_RETURN_IF_ERROR(weights_->release(layer_chunk(l)));
  return sink.release(layer_chunk(l), /*last=*/true);
}

// Every gradient here gets its first (and only) contribution, so each is overwritten, not added
// to: dfc_act, dfc and dln need no zero fill, and the weight and bias gradients land in the
// sink's zeroed chunk (GradSink::acquire) rounded once, with no fp32 pass on the GPU.
Status Transformer::mlp_backward(const LayerParams& p, const LayerParams& g, const LayerActivations& a) {
  const int64_t N = B_ * T_, C = config_.dim, H = config_.ffn_hidden, FC = config_.fc_rows();
  const ActivationGrads& d = dacts_;
  constexpr GradStore kSet = GradStore::overwrite;
  if (config_.arch == Arch::gpt2) {  // dfc through the GELU in one op (one rounding where fused)
    STRATA_RETURN_IF_ERROR(ops_.matmul_backward(options_.dtype, nullptr, g.fc_proj_w, g.fc_proj_b, d.dres, a.fc_act,
                                                nullptr, N, H, C, 0, kSet, kSet));
    STRATA_RETURN_IF_ERROR(
        ops_.matmul_backward_input_gelu(options_.dtype, d.dfc, d.dfc_act, d.dres, p.fc_proj_w, a.fc, N, H, C));
  } else {
    STRATA_RETURN_IF_ERROR(ops_.matmul_backward(options_.dtype, d.dfc_act, g.fc_proj_w, g.fc_proj_b, d.dres,
                                                a.fc_act, p.fc_proj_w, N, H, C, 0, kSet, kSet));
    STRATA_RETURN_IF_ERROR(mlp_activation_backward(a));
  }
  return ops_.matmul_backward(options_.dtype, d.dln, g.fc_w, g.fc_b, d.dfc, a.ln2, p.fc_w, N, C, FC, 0, kSet, kSet);
}

// dfc = d fc from dfc_act, written whole (every element of (N, FC) is overwritten).
Status Transformer::mlp_activation_backward(const LayerActivations& a) {
  const int64_t N = B_ * T_, H = config_.ffn_hidden;
  const ActivationGrads& d = dacts_;
  if (config_.arch == Arch::gpt2)
    return ops_.gelu_backward(options_.dtype, d.dfc, a.fc, d.dfc_act, N * H, GradStore::overwrite);
  return ops_.swiglu_backward(options_.dtype, d.dfc, a.fc, d.dfc_act, N, H, GradStore::overwrite);
}

// dfc_act (N, H) += d fc_proj's columns r @ the tile; the tile's rows of dW (and db) +=.
Status Transformer::mlp_out_backward(const LayerParams& p, const LayerParams& g, const LayerActivations& a, TileRows r) {
  const int64_t N = B_ * T_, C = config_.dim, H = config_.ffn_hidden;
  return ops_.matmul_backward(options_.dtype, dacts_.dfc_act, g.fc_proj_w, g.fc_proj_b, at(dacts_.dres, r.begin),
                              a.fc_act, p.fc_proj_w, N, H, r.rows(), C);
}

// dln (N, C) += d fc's columns r (GPT-2; LLaMA the gate's and the up's) @ the tile's rows.
Status Transformer::mlp_in_backward(const LayerParams& p, const LayerParams& g, const LayerActivations& a, TileRows r) {
  const int64_t N = B_ * T_, C = config_.dim, H = config_.ffn_hidden, FC = config_.fc_rows(), h = r.rows();
  const ActivationGrads& d = dacts_;
  if (config_.arch == Arch::gpt2)
    return ops_.matmul_backward(options_.dtype, d.dln, g.fc_w, g.fc_b, at(d.dfc, r.begin), a.ln2, p.fc_w, N, C, h, FC);
  STRATA_RETURN_IF_ERROR(
      ops_.matmul_backward(options_.dtype, d.dln, g.fc_w, nullptr, at(d.dfc, r.begin), a.ln2, p.fc_w, N, C, h, FC));
  return ops_.matmul_backward(options_.dtype, d.dln, at(g.fc_w, h * C), nullptr, at(d.dfc, H + r.begin), a.ln2,
                              at(p.fc_w, h * C), N, C, h, FC);
}

Status Transformer::attention_backward(const LayerParams& p, const LayerParams& g, const LayerActivations& a) {
  const int64_t N = B_ * T_, C = config_.dim, KV = config_.kv_dim(), HS = config_.head_dim();
  const int64_t NH = config_.n_head, NKV = config_.n_kv_head, QKV = C + 2 * KV;
  const ActivationGrads& d = dacts_;
  constexpr GradStore kSet = GradStore::overwrite;
  // Attention adds into dq, dk, dv: dqkv starts at zero. datt and dln are written by their GEMM, and
  // every weight and bias gradient (each written once into the sink's zeroed chunk) is overwritten.
  STRATA_RETURN_IF_ERROR(backend_.fill_zero(d.dqkv, bytes(N * QKV)));
  STRATA_RETURN_IF_ERROR(ops_.matmul_backward(options_.dtype, d.datt, g.attn_proj_w, g.attn_proj_b, d.dres, a.att,
                                              p.attn_proj_w, N, C, C, 0, kSet, kSet));
  STRATA_RETURN_IF_ERROR(ops_.attention_backward(options_.dtype, d.dq, d.dk, d.dv, d.datt, a.q, a.k, a.v, a.att,
                                                 a.att_lse, B_, T_, NH, NKV, HS, QKV));
  // LLaMA's q and k were rotated: attention's gradients are the rotated ones, RoPE's backward turns
  // them (in place) into the projection's output gradients.
  if (config_.arch == Arch::llama) {
    STRATA_RETURN_IF_ERROR(ops_.rope_backward(options_.dtype, d.dq, d.dq, B_, T_, NH, HS, config_.rope_theta, 0, QKV));
    STRATA_RETURN_IF_ERROR(ops_.rope_backward(options_.dtype, d.dk, d.dk, B_, T_, NKV, HS, config_.rope_theta, 0, QKV));
  }
  // dln = dq @ Wq + dk @ Wk + dv @ Wv: the three column blocks of dqkv against the row blocks of the
  // fused weight, formed in fp32 and rounded once (CUDA: one GEMM over K = C + 2 KV straight into
  // dln; the CPU backend adds term by term, its bits those of three projections). Then the fused
  // weight's gradient dqkv^T @ ln1 and the bias's (GPT-2), one GEMM.
  const InputGradTerm terms[] = {{d.dq, p.qkv_w, C, QKV}, {d.dk, at(p.qkv_w, C * C), KV, QKV},
                                 {d.dv, at(p.qkv_w, (C + KV) * C), KV, QKV}};
  STRATA_RETURN_IF_ERROR(ops_.matmul_backward_input_sum(options_.dtype, d.dln, terms, N, C, kSet));
  return ops_.matmul_backward(options_.dtype, nullptr, g.qkv_w, g.qkv_b, d.dqkv, a.ln1, p.qkv_w, N, C, QKV, 0, kSet,
                              kSet);
}

Status Transformer::norm_backward(std::byte* dinp, std::byte* dw, std::byte* db, const std::byte* dout,
                                  const std::byte* inp, const std::byte* w, const float* mean, const float* rstd) {
  const int64_t N = B_ * T_, C = config_.dim;
  if (config_.arch == Arch::gpt2) return ops_.layernorm_backward(options_.dtype, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  return ops_.rmsnorm_backward(options_.dtype, dinp, dw, dout, inp, w, rstd, N, C);
}

}  // namespace strata::model
