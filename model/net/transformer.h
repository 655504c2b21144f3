// Transformer: the GPT-2 / LLaMA decoder (model_config.h) on a Backend, forward and backward
// written once against ComputeOps, in the manner of llm.c's train_gpt2.c, in one working precision
// (fp32, bf16 or fp16: weights, activations and gradients; statistics and the loss stay fp32). It
// owns its activation buffers for up to (B, T), from the backend's arena, sized up front; its
// parameter chunks (laid out by param_layout.h at the precision's width) come from a WeightSource,
// its gradients go to a GradSink (offload/chunk_source.h), and a pending optimizer update lands
// through an Optimizer (offload/optimizer.h): forward and backward acquire each chunk at its layer
// boundary, after asking the optimizer to prepare it. Activation checkpointing keeps only each
// layer's input in the forward and recomputes the layer in the backward. Not an optimizer (fp32
// master weights and the update are the Optimizer's) and not an offloader: where chunks live is the
// weight source's business (ResidentWeights, the model's own by default, or a paging source).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/ops_loss.h"
#include "model/net/model_config.h"
#include "model/net/param_layout.h"
#include "model/hf/safetensors.h"
#include "offload/chunk_source.h"
#include "offload/device_grads.h"
#include "offload/optimizer.h"
#include "offload/resident_weights.h"
#include "offload/trace.h"
#include "runtime/backend.h"
#include "runtime/pinned_pool.h"

namespace strata::model {

class HfWeights;  // model/hf/hf_weights.h

// The row stride of the logits buffer (and of dlogits, written over it): V rounded up to a multiple
// of kLogitsRowAlign elements, so every row starts 16-byte aligned (128 bytes at 16-bit) and the
// head's three GEMMs run cuBLAS's vectorized tensor-core kernels instead of its "align1" ones
// (GPT-2's odd V = 50257 -> 50304: measured on an H100, 30 ms -> 8.5 ms of an 80 ms step). It is
// llm.c's padded_vocab without padding the parameters: wte / lm_head stay (V, C) and checkpoints
// are unchanged. Columns [V, Vp) of a row are never read or written by any op, so no result moves.
inline constexpr int64_t kLogitsRowAlign = 64;
constexpr int64_t padded_vocab(int64_t V) { return (V + kLogitsRowAlign - 1) / kLogitsRowAlign * kLogitsRowAlign; }

struct TransformerOptions {
  int64_t batch = 1;              // B: largest batch forward() will see
  int64_t seq_len = 0;            // T: longest sequence forward() will see; 0 = config.max_seq
  bool checkpoint_layers = true;  // keep only layer inputs; recompute each layer in backward()
  DType dtype = DType::f32;       // working precision: f32, bf16 or f16
  // Micro-batches one step_layer_major() call may run (K): every one keeps its own residual stream
  // ((L + 1, N, C): each layer's input) and its own d residual (N, C), and with a tied embedding
  // K - 1 device copies of the table's gradient chunks (the head's contribution of micro-batches
  // 1 .. K - 1, handed to the sink after the embedding's of the micro-batch before, see
  // step_layer_major). 1: forward() and backward() only (no extra memory). > 1 needs
  // checkpoint_layers.
  int64_t micro_batches = 1;
  // Keep a gradient buffer per chunk on the device (DeviceGrads) for the model's own use: needed
  // by an optimizer on the device and by callers that read gradients from the model. A trainer
  // that streams gradients to the host installs its own sink (set_grad_sink) and needs none.
  bool device_grads = true;
};

// Where the model's parameter chunks come from. Not owned; must outlive the model.
struct ChunkSources {
  WeightSource* weights = nullptr;  // null: every chunk resident on the device (the model's own)
  PinnedPool* pinned = nullptr;     // the resident source's staging; null: a small pool of its own
};

// One layer's internals for (B, T), N = B * T rows. Pointers into the activation block: std::byte*
// tensors hold working-precision elements, float* ones fp32 statistics.
struct LayerActivations {
  std::byte* ln1 = nullptr;        // (N, C) first norm output
  float* ln1_mean = nullptr;   // (N)    GPT-2 LayerNorm only
  float* ln1_rstd = nullptr;   // (N)
  std::byte* qkv = nullptr;        // (N, C + 2 KV) the fused projection's output, rows [q | k | v]
  std::byte* q = nullptr;          // (B, T, NH, HS) in qkv's rows (stride C + 2 KV). LLaMA: after RoPE
  std::byte* k = nullptr;          // (B, T, NKV, HS) in qkv's rows. LLaMA: after RoPE
  std::byte* v = nullptr;          // (B, T, NKV, HS) in qkv's rows
  std::byte* att = nullptr;        // (N, C) attention output, heads side by side
  float* att_lse = nullptr;    // (B, NH, T)
  std::byte* att_proj = nullptr;   // (N, C) after c_proj / o_proj
  std::byte* res1 = nullptr;       // (N, C) layer input + att_proj
  std::byte* ln2 = nullptr;        // (N, C)
  float* ln2_mean = nullptr;   // (N)    GPT-2 only
  float* ln2_rstd = nullptr;   // (N)
  std::byte* fc = nullptr;         // (N, FC) GPT-2 pre-GELU (H); LLaMA [gate | up] (2H)
  std::byte* fc_act = nullptr;     // (N, H) gelu(fc) / silu(gate) * up
  std::byte* fc_proj = nullptr;    // (N, C) MLP output before the residual add
};

struct Activations {
  std::byte* residual = nullptr;   // (L + 1, N, C): [l] is layer l's input, [L] the last output
  std::vector<LayerActivations> layers;  // L of them, or 1 shared when checkpointing
  std::byte* lnf = nullptr;        // (N, C) final norm output (the head's input)
  float* lnf_mean = nullptr;   // (N)    GPT-2 only
  float* lnf_rstd = nullptr;   // (N)
  std::byte* logits = nullptr;     // (N, Vp), Vp = padded_vocab(V): row n's V logits at n * Vp;
                                   // overwritten by dlogits in backward()
  float* ce_lse = nullptr;     // (N)
  float* ce_losses = nullptr;  // (N)
  kernels::CrossEntropyResult* loss = nullptr;  // one, in device memory
};

// Gradient scratch for one layer at a time (zeroed before each use).
struct ActivationGrads {
  std::byte* dres = nullptr;   // (N, C) d loss / d residual stream, carried down through the layers
  std::byte* dln = nullptr;    // (N, C) d norm output
  std::byte* datt = nullptr;   // (N, C)
  std::byte* dqkv = nullptr;   // (N, C + 2 KV) rows [dq | dk | dv], the fused projection's output gradient
  std::byte* dq = nullptr;     // (N, C) in dqkv's rows (stride C + 2 KV); LLaMA: rotated, then turned
                               // in place into the gradient before RoPE
  std::byte* dk = nullptr;     // (N, NKV*HS) in dqkv's rows; as dq
  std::byte* dv = nullptr;     // (N, NKV*HS) in dqkv's rows
  std::byte* dfc = nullptr;    // (N, FC)
  std::byte* dfc_act = nullptr;  // (N, H)
};

// Which copy of a parameter copy_parameter_to_host reads.
enum class ParamState : uint8_t { weights, gradients };

// Thread-safety: one thread drives a Transformer (its work goes to the backend's compute and h2d
// streams). Lifetime: must not outlive the backend; the destructor waits for all streams and
// returns every block it allocated.
class Transformer {
 public:
  // Validates the config and options, builds the layout and allocates every chunk and the
  // activations. Over budget: the arena's out_of_memory, its tag naming the chunk or buffer.
  // Device bytes of the activation block create() allocates for `options` (seq_len 0 = max_seq).
  static uint64_t activation_bytes(const ModelConfig& config, const TransformerOptions& options);
  // A given weight source must have the layout's chunks at its sizes (invalid_argument otherwise).
  static StatusOr<std::unique_ptr<Transformer>> create(Backend& backend, const ModelConfig& config,
                                                       const TransformerOptions& options = {},
                                                       ChunkSources sources = {});
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  // Load and init write one chunk at a time through the weight source (update_buffer, then
  // commit_update; flush at the end): host memory is one chunk's fp32 values plus, for a load,
  // one tensor converted at a time, never a copy of the model. Every tensor is checked (name,
  // shape, dtype) before the first chunk is written.
  //
  // Reads every parameter by its HF name (GPT-2 Conv1D weights transposed into (out, in); GPT-2
  // names also found without the "transformer." prefix; F32, BF16 or F16 converted to fp32, then
  // rounded to the working precision on the device).
  // not_found naming the first missing tensor; invalid_argument for a shape or dtype mismatch.
  // Tensors the layout does not use (HF mask buffers) are ignored. Returns once copied.
  Status load_hf_safetensors(const SafetensorsFile& file);
  Status load_hf_safetensors(const std::string& path);
  // The same from a Hugging Face model's files, sharded or not (check_layout's errors first).
  Status load_hf_weights(const HfWeights& weights);
  // GPT-2 initialisation, deterministic in `seed`: matrices normal(0, 0.02), residual projections
  // normal(0, 0.02 / sqrt(2L)), norm gains 1, biases 0. Each tensor is its own stream (by its
  // index), so the values do not depend on the chunking; large tensors are generated in parallel
  // (oneTBB), bit-identical to one sequential loop. Returns once copied.
  Status init(uint64_t seed);
  // init(seed) for a model whose trainer takes its fp32 source next (16-bit): the weights of each
  // chunk are written when take_fp32_source()'s source first produces it (the trainer's masters),
  // so every value is generated once instead of twice; finish_init() then writes the chunks it did
  // not produce and flushes. The weights and the source's values are init(seed)'s, bit for bit.
  // Until finish_init() returns, the weights are not all written: nothing may read or acquire
  // them, and the source is for one thread (it writes through the weight source). fp32: init(seed)
  // (its masters are read back from the weights), and finish_init() does nothing.
  Status begin_init(uint64_t seed);
  Status finish_init();
  // Parameters (master elements, padding included) written by init, load or the source of
  // begin_init so far: a progress counter, safe to read from any thread.
  uint64_t elements_written() const { return elements_written_.load(std::memory_order_relaxed); }
  // Writes chunk c's exact fp32 values in master_layout() (chunk bytes / 4 floats, padding zero)
  // to `out`. Keeps no mutable state (calls may run concurrently); must not outlive the model.
  using Fp32ChunkSource = std::function<Status(size_t chunk, float* out)>;
  // With a 16-bit working precision, the exact fp32 values of the last load or init, so a
  // trainer's fp32 master weights start exact rather than rounded: nothing is stored, each call
  // produces a chunk again. After init(seed) it regenerates the chunk from the seed; after a load
  // it converts the chunk's tensors from the files again, so it holds the files (their mappings)
  // open until the source is taken and dropped (load_hf_safetensors(path) too, which otherwise
  // closes its file on return). Moves it out; empty for fp32 (the device weights are exact: read
  // them) or once taken.
  Fp32ChunkSource take_fp32_source();

  // inputs, targets: device int32 (B, T) the caller filled (ordered before this call, e.g.
  // copy_to_device then synchronize); targets in [0, V) or -1 (ignored). Queues the forward and
  // the mean loss over counted targets into loss_result(). invalid_argument if B or T exceed
  // the options or T > max_seq.
  Status forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T);
  // forward(), with the loss's gradient for the backward that follows written over the logits in
  // the same pass (what backward() would write there first: the same bits; on CUDA the logits are
  // read once instead of twice). The next backward() must pass the same counted_targets and
  // grad_scale (failed_precondition otherwise). For a training micro-batch; evaluation keeps
  // forward(), whose logits stay logits.
  Status forward_with_loss_gradient(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                                    int64_t counted_targets, float grad_scale);
  // Queues the backward of the last forward, ACCUMULATING into the gradient sink's chunks. Each counted
  // row's loss gets gradient grad_scale / counted_targets (counted_targets 0 means B * T: no -1
  // targets). Micro-batch accumulation: pass grad_scale = 1 / micro_batches. Destroys logits().
  Status backward(int64_t counted_targets = 0, float grad_scale = 1.0f);
  // One micro-batch of a layer-major step: device inputs and targets (B, T) filled by the caller,
  // and its counted targets (0: B * T).
  struct MicroBatch {
    const int32_t* inputs = nullptr;
    const int32_t* targets = nullptr;
    int64_t B = 0, T = 0;
    int64_t counted_targets = 0;
  };
  struct LayerMajorHooks {
    std::function<Status()> before_backward;           // every forward queued, no backward yet
    std::function<Status(size_t micro_batch)> loss_ready;  // its loss is in loss_result() now
  };
  // The layer-major ("vertical") schedule of one step's K = batches.size() micro-batches (K <=
  // options().micro_batches; checkpoint_layers): each chunk is acquired ONCE per pass for all K
  // (the embedding's forward for every micro-batch, then layer 0's, ..., then per micro-batch the
  // head's forward, loss_ready, the head's backward; then each layer's recomputation and backward
  // for every micro-batch, last layer first; then the embedding's backward), so paged weights
  // cross PCIe / NVMe about twice a step whatever K (vocabulary tiles of the head's table: each
  // tile is acquired per micro-batch, as in forward()). The bits are forward() + backward() per
  // micro-batch in turn: every chunk's gradient contributions reach the sink in micro-batch order,
  // and the tied table's in that order's interleaving too (head 0, embedding 0, head 1, ...): the
  // head's contribution of micro-batch k >= 1 waits in a device copy until the embedding's of
  // micro-batch k - 1 is released (then it is copied into the sink's buffer and released).
  // The grad_scale, sink flags (set_last_micro_batch per micro-batch) and losses as backward().
  Status step_layer_major(std::span<const MicroBatch> batches, float grad_scale, const LayerMajorHooks& hooks);
  // Starts a new accumulation: the gradient sink's begin_step (DeviceGrads: zeroes every chunk).
  // failed_precondition, zeroing nothing, while the optimizer's update is pending (it still reads
  // the last step's gradient): finish_update first.
  Status zero_grad();

  // The source the weights come from; the sink gradients go to (set_grad_sink replaces it: null
  // returns to the model's own DeviceGrads, failed_precondition if it was created without).
  WeightSource& weights() { return *weights_; }
  // With a recorder, every chunk's compute (forward, recomputation + backward) is a span on its
  // "compute" track, stamped on the compute stream. Null: none (the default; costs nothing).
  void set_trace(TraceRecorder* trace) { trace_ = trace; }
  // The model's own resident weight source (every chunk a device block), or null when it was given
  // a source: the typed path to the device chunks for an optimizer that updates them in place.
  ResidentWeights* resident_weights() { return own_weights_.get(); }
  // The optimizer whose pending update lands chunk by chunk: every pass (forward, backward,
  // evaluation) calls optimizer->prepare(c) just before each acquire of chunk c, on the driving
  // thread, so an update applied lazily runs under the compute of the chunks before c. An error
  // stops the pass and is returned. Null: none (the default). Not owned: it must outlive the model
  // or be unset (null) first.
  void set_optimizer(Optimizer* optimizer) { optimizer_ = optimizer; }
  Optimizer* optimizer() { return optimizer_; }
  GradSink* grad_sink() { return grad_sink_; }
  Status set_grad_sink(GradSink* sink);
  // The model's own device gradients (null when created with device_grads = false).
  DeviceGrads* device_grads() { return device_grads_.get(); }
  // Per chunk, how many times one backward releases its gradient to the sink: 2 for the tiles of a
  // tied embedding (the head's contribution, then the embedding's), 1 for every other chunk.
  std::vector<uint32_t> gradient_releases() const;
  // The same for a model of `config` laid out in `chunk_count` chunks, without one (the planner).
  static std::vector<uint32_t> gradient_releases(const ModelConfig& config, size_t chunk_count);

  // The loss of the last forward: sum, counted rows, mean (synchronizes the compute stream).
  StatusOr<kernels::CrossEntropyResult> read_loss();
  // A parameter (or its gradient: the fp32 sum of the backward passes since zero_grad) by HF name
  // in the HF layout, widened to fp32, for tests (synchronizes). not_found for an unknown name;
  // gradients only from the model's own DeviceGrads while they are the sink (failed_precondition
  // otherwise).
  StatusOr<std::vector<float>> copy_parameter_to_host(std::string_view hf_name, ParamState state);

  const ModelConfig& config() const { return config_; }
  DType dtype() const { return options_.dtype; }
  // Device chunks: element_bytes = the working precision's width. The master layout is the same
  // parameters at fp32 (identical to layout() for fp32): where fp32 host copies live.
  const ParamLayout& layout() const { return layout_; }
  const ParamLayout& master_layout() const { return master_layout_; }
  const TransformerOptions& options() const { return options_; }
  // Chunk indices in layout(): the embedding, transformer layer l, the head (final norm, lm_head).
  // With vocabulary tiles (ModelConfig::vocab_tile) these are each table's first tile, which also
  // holds GPT-2's positions / the final norm; the other tiles follow it.
  // With MLP tiles (ModelConfig::mlp_tiles) layer l's chunk holds its attention half and its
  // MLP's tiles follow it: mlp_in_chunk(l, k) of the first weight, then mlp_out_chunk(l, k).
  size_t embedding_chunk() const { return 0; }
  size_t layer_chunk(int l) const { return embedding_chunks_ + size_t(l) * layer_chunks_; }
  size_t mlp_in_chunk(int l, int64_t k) const { return layer_chunk(l) + 1 + size_t(k); }
  size_t mlp_out_chunk(int l, int64_t k) const { return layer_chunk(l) + 1 + size_t(mlp_tiles(config_) + k); }
  size_t head_chunk() const { return layout_.chunks.size() - head_chunks_; }
  // The tensors of layer l / of the global chunks at device chunk base `base` (any slot).
  // bind_layer_chunk: those of one chunk of a layer (its own, or an MLP tile), the rest null.
  LayerParams bind_layer(int l, std::byte* base) const { return bind_layer_chunk(layer_chunk(l), base); }
  LayerParams bind_layer_chunk(size_t c, std::byte* base) const;
  void bind_globals(GlobalParams& out, size_t chunk, std::byte* base) const;
  // Device buffers of the last forward (B, T): with checkpointing off every layer's internals
  // stay valid until the next forward; with it on only the layer inputs (and the last layer).
  const Activations& activations() const { return acts_; }
  // The row stride of activations().logits in elements: padded_vocab(V).
  int64_t logits_stride() const { return padded_vocab(config_.vocab); }
  const kernels::CrossEntropyResult* loss_result() const { return acts_.loss; }

 private:
  Transformer(Backend& backend, ModelConfig config, ParamLayout layout, ParamLayout master_layout,
              TransformerOptions options);
  Status allocate_all(ChunkSources sources);
  void carve_activations(int64_t B, int64_t T);
  // `p` moved by `elements` working-precision elements.
  std::byte* at(std::byte* p, int64_t elements) const { return p + elements * esize_; }
  const std::byte* at(const std::byte* p, int64_t elements) const { return p + elements * esize_; }
  uint64_t bytes(int64_t elements) const { return uint64_t(elements) * esize_; }
  std::byte* residual(int l) const { return at(acts_.residual, int64_t(l) * B_ * T_ * config_.dim); }
  const LayerActivations& layer_acts(int l) const { return acts_.layers[options_.checkpoint_layers ? 0 : l]; }
  Status layer_forward(const LayerParams& p, int l, bool write_output = true);
  // The pieces forward() and backward() are made of, shared with step_layer_major
  // (transformer_layer_major.cc). `emb` the tile's bound table, `first` the first tile's (GPT-2's
  // positions).
  Status embedding_forward_tile(size_t k, const GlobalParams& emb, const GlobalParams& first);
  // Acquires the embedding's tiles in turn (the first held throughout) and runs `work` on each.
  using EmbeddingTileWork = std::function<Status(size_t k, const GlobalParams& emb, const GlobalParams& first)>;
  Status for_embedding_tiles(const EmbeddingTileWork& work);
  Status embedding_backward_tiles(GradSink& sink);
  // The head's forward (final norm, logits by table tile, loss) from the acquired head chunk; given
  // `dloss`, the loss's gradient too, written over the logits (head_backward then starts from it).
  Status head_forward(std::byte* head, std::optional<float> dloss = std::nullopt);
  Status forward_pass(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                      std::optional<float> dloss);
  // The loss's and the head's backward into dres, from the acquired head chunk. `stash`: null, or
  // (tied) per table tile a device buffer the tile's gradient is written to instead of the sink.
  Status head_backward(std::byte* head, float dloss, GradSink& sink, std::byte* const* stash);
  // Layer l's recomputation (checkpointing, when `recompute`) and backward with its acquired
  // weights `w`, the gradient into the sink.
  Status layer_backward_step(int l, std::byte* w, GradSink& sink, bool recompute);
  // invalid_argument unless 0 <= counted_targets <= rows (B * T).
  Status check_counted_targets(int64_t counted_targets, int64_t rows) const;
  // Each counted target's loss gradient: grad_scale / counted_targets (0: every one of `rows`).
  static float dloss_of(int64_t counted_targets, float grad_scale, int64_t rows);
  float dloss_of(int64_t counted_targets, float grad_scale) const {
    return dloss_of(counted_targets, grad_scale, B_ * T_);
  }
  // Layer-major: the activations carved for micro-batch k's (B, T), its residual stream, d
  // residual, inputs and targets.
  void use_micro_batch(const MicroBatch& mb, size_t k);
  Status layer_backward(const LayerParams& p, const LayerParams& g, int l);
  // Layer l with its MLP in tiles (mlp_tiles > 1): the attention half from the layer's chunk
  // (held through the layer's backward), then each MLP tile's chunk in turn. The forward's
  // output columns of each weight are its tiles' (the first weight's GEMMs write their hidden
  // units of fc, the second's their output columns of fc_proj); in the backward each tile adds
  // its part of the input gradients (d fc_act over the output rows, d ln2 over the hidden
  // units), so those sums are grouped by tile: a tiled run is within fp32 rounding of those
  // sums of an untiled one, not bit-identical (the weight and bias gradients are per row: same).
  Status tiled_layer_forward(int l);
  Status tiled_layer_backward(int l, GradSink& sink, bool recompute);
  Status tiled_mlp_forward(int l, std::string_view what, bool second);
  Status attention_half_forward(const LayerParams& p, int l);  // ln1, attention, res1, ln2
  Status attention_half_backward(const LayerParams& p, const LayerParams& g, int l);  // from dln = d ln2
  // One tile's part of the MLP, rows `r` of its weight (hidden units / output rows).
  Status mlp_in_forward(const LayerParams& p, const LayerActivations& a, TileRows r);
  Status mlp_out_forward(const LayerParams& p, const LayerActivations& a, TileRows r);
  Status mlp_in_backward(const LayerParams& p, const LayerParams& g, const LayerActivations& a, TileRows r);
  Status mlp_out_backward(const LayerParams& p, const LayerParams& g, const LayerActivations& a, TileRows r);
  Status mlp_activation_forward(const LayerActivations& a);   // fc -> fc_act (GELU / SwiGLU)
  Status mlp_activation_backward(const LayerActivations& a);  // dfc = d fc from dfc_act
  // The chunk of the head's table tile k (tied: the embedding's tile k).
  size_t head_table_chunk(size_t k) const { return config_.tied_head ? k : head_chunk() + k; }
  // Tile k of the head's table: its weights (acquired, or `first` for the head's own first
  // chunk), bound: tied wte, else lm_head. release_head_table gives back what it took.
  StatusOr<std::byte*> acquire_head_table(size_t k, std::byte* first);
  Status release_head_table(size_t k);
  // The logits' columns of the table tile in chunk c (forward), and the head's input gradient
  // dln (N, C) += with the tile's gradient (backward). In fp32 kVocabTileBlock vocabulary rows per
  // GEMM, tiled or not, so every GEMM has the same shape and operands for any tiling and every bit
  // is the same (a BLAS may sum an output differently in GEMMs of other widths, and dln's sum over
  // the vocabulary is grouped by GEMM); in 16-bit precisions one GEMM per tile, since each GEMM
  // rounds dln to 16 bits (a tiled run is then within those roundings of an untiled one).
  Status head_table_forward(size_t c, const std::byte* table);
  // `first`: the head's first tile, whose first GEMM writes dln (the later ones add to it).
  Status head_table_backward(size_t c, const std::byte* table, std::byte* dtable, const std::byte* dlogits,
                             bool first);
  // Queues `work` (compute ops on Stream::compute), as a span "<what> <index>" when tracing.
  Status traced(std::string_view what, int64_t index, const std::function<Status()>& work);
  Status attention_forward(const LayerParams& p, const LayerActivations& a);
  Status attention_backward(const LayerParams& p, const LayerParams& g, const LayerActivations& a);
  Status mlp_forward(const LayerParams& p, const LayerActivations& a);
  Status mlp_backward(const LayerParams& p, const LayerParams& g, const LayerActivations& a);
  Status norm_forward(std::byte* out, float* mean, float* rstd, const std::byte* inp, const std::byte* w,
                      const std::byte* b);
  Status norm_backward(std::byte* dinp, std::byte* dw, std::byte* db, const std::byte* dout, const std::byte* inp,
                       const std::byte* w, const float* mean, const float* rstd);
  // Every chunk from `produce` (fp32, master_layout()) -> the device chunks, one at a time through
  // one buffer of the largest chunk (rounded to the working precision); then `produce` is kept as
  // take_fp32_source() when that is 16-bit.
  Status write_chunks(const Fp32ChunkSource& produce);
  // Chunk c's fp32 values `host` (master layout) rounded to the working precision into the weight
  // source's update buffer, then committed.
  Status write_chunk(size_t c, const float* host);
  // The optimizer's prepare(c) (if any), then weights().acquire(c).
  StatusOr<std::byte*> acquire_chunk(size_t c);

  Backend& backend_;
  ComputeOps& ops_;
  const ModelConfig config_;
  const ParamLayout layout_;
  const ParamLayout master_layout_;
  const TransformerOptions options_;
  const uint64_t esize_;              // bytes per working-precision element
  std::vector<void*> blocks_;         // every arena block this model owns
  std::vector<std::vector<const ParamSpec*>> chunk_params_;  // per chunk, its tensors (layout_)
  const size_t embedding_chunks_;     // the embedding's tiles (1 untiled)
  const size_t head_chunks_;          // the head's chunks (1 untiled or tied)
  const size_t layer_chunks_;         // per layer: 1, or 1 + 2 * mlp_tiles
  std::unique_ptr<PinnedPool> own_pinned_;      // the resident source's staging, when not given
  std::unique_ptr<ResidentWeights> own_weights_;  // when no source was given
  WeightSource* weights_ = nullptr;
  std::unique_ptr<DeviceGrads> device_grads_;   // options.device_grads
  GradSink* grad_sink_ = nullptr;
  TraceRecorder* trace_ = nullptr;
  Optimizer* optimizer_ = nullptr;    // see set_optimizer
  Fp32ChunkSource fp32_source_;       // see take_fp32_source()
  Status init_once(size_t c, float* out);  // begin_init's source: values, and the weights once
  std::vector<uint8_t> init_pending_;  // begin_init: per chunk, its weights are still to be written
  uint64_t init_seed_ = 0;             // begin_init's
  std::atomic<uint64_t> elements_written_{0};
  std::byte* act_block_ = nullptr;    // all activations, carved per (B, T)
  Activations acts_;
  ActivationGrads dacts_;
  // Layer-major (options_.micro_batches > 1): micro-batch k >= 1's residual stream and d residual
  // (k - 1), and the tied table's stashed head contributions (micro-batch k >= 1, tile t at
  // (k - 1) * tiles + t), carved from one block.
  std::vector<std::byte*> mb_residual_, mb_dres_, tied_stash_;
  const int32_t* inputs_ = nullptr;   // of the last forward
  const int32_t* targets_ = nullptr;
  int64_t B_ = 0, T_ = 0;
  // The dloss whose gradient the last head_forward wrote over the logits (forward_with_loss_gradient,
  // layer-major); none: the logits hold logits.
  std::optional<float> dlogits_dloss_;
};

}  // namespace strata::model
