// Transformer (transformer.h): getting parameters in and out — Hugging Face safetensors loading
// (with GPT-2's Conv1D transposition), GPT-2 style random initialisation, and host read-back of
// one parameter or the loss. Load and init produce one chunk at a time in fp32 (one buffer of the
// largest chunk, never the whole model), round it to a 16-bit working precision per tensor and
// move it in one copy; what produced it stays as the trainer's exact fp32 source.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "kernels/cpu/half.h"
#include "model/hf/hf_weights.h"
#include "model/net/transformer.h"
#include "runtime/splitmix64.h"

namespace strata::model {
namespace {

// Deterministic normal samples (splitmix64 + Box-Muller): identical on every platform, unlike
// std::normal_distribution. Sample k uses outputs 2k and 2k + 1 of the stream.
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : bits_(seed) {}
  float next(float stddev) {
    const double u1 = (double(bits_.next() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = double(bits_.next() >> 11) * 0x1.0p-53;
    return float(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
  // Skips n samples, as n calls of next() would.
  void discard(uint64_t n) { bits_.discard(2 * n); }

 private:
  SplitMix64 bits_;
};

// Elements per task when a tensor is generated or rounded: ~1 ms of Box-Muller, enough to pay for
// a task, small enough to spread one layer's matrices over every core.
constexpr uint64_t kRangeElements = uint64_t{1} << 16;

// GPT-2 initialisation of chunk c of `masters` into `out` (chunk bytes / 4 floats, padding zero).
// Tensor i is the stream NormalRng(seed * 0x100000001B3 + i) whatever the chunking and tiling
// (a tile starts at its first row's sample); each range of a tensor skips to its first sample, so the parallel fill equals one sequential loop bit for bit.
void init_chunk(const ParamLayout& masters, int64_t n_layer, uint64_t seed, size_t c, float* out) {
  std::fill_n(out, masters.chunks[c].bytes / sizeof(float), 0.f);
  const float residual_std = 0.02f / std::sqrt(2.0f * float(n_layer));
  struct Range {
    size_t param;
    uint64_t begin, end;
  };
  std::vector<Range> ranges;
  for (size_t i = 0; i < masters.params.size(); ++i) {
    const ParamSpec& p = masters.params[i];
    if (size_t(p.chunk) != c) continue;
    if (p.shape.size() == 1) {
      // Norm gains start at 1, biases (GPT-2) at 0 (already).
      const bool gain = p.layer >= 0 ? (p.field == int(LayerField::ln1_w) || p.field == int(LayerField::ln2_w))
                                     : p.field == int(GlobalField::lnf_w);
      if (gain) std::fill_n(out + p.offset / sizeof(float), p.elements, 1.f);
      continue;
    }
    for (uint64_t b = 0; b < p.elements; b += kRangeElements) ranges.push_back({i, b, std::min(b + kRangeElements, p.elements)});
  }
  tbb::parallel_for(size_t{0}, ranges.size(), [&](size_t r) {
    const Range& range = ranges[r];
    const ParamSpec& p = masters.params[range.param];
    const bool residual_proj = p.layer >= 0 && (p.field == int(LayerField::attn_proj_w) || p.field == int(LayerField::fc_proj_w));
    const float stddev = residual_proj ? residual_std : 0.02f;
    NormalRng rng(seed * 0x100000001B3ull + uint64_t(p.tensor));  // one stream per tensor: independent of chunking
    rng.discard(p.tensor_offset() + range.begin);                     // and of tiling
    float* dst = out + p.offset / sizeof(float);
    for (uint64_t e = range.begin; e < range.end; ++e) dst[e] = rng.next(stddev);
  });
}

// Tile `p`'s rows (strata's layout) of a tensor the HF file stores transposed, from the whole
// file tensor `hf` (in, out): row r of the tile is column row_begin + r of the file's tensor.
void tile_from_hf_transposed(const ParamSpec& p, const float* hf, float* dst) {
  const uint64_t out_rows = uint64_t(p.shape[0]), in = uint64_t(p.shape[1]), rows = p.elements / in;
  tbb::parallel_for(uint64_t{0}, rows, [&](uint64_t r) {
    const uint64_t column = uint64_t(p.row_begin) + r;
    for (uint64_t k = 0; k < in; ++k) dst[r * in + k] = hf[k * out_rows + column];
  });
}

// Chunk c of `masters` from the HF tensors `find` gives by name (padding zero), one tensor
// converted at a time. The tensors were checked (present, shape, dtype) before. A tile of a
// tensor the file stores transposed (GPT-2's MLP tiles) converts the whole tensor for its columns.
// Elements [first, first + values.size()) of the file's tensor `ref` as read: invalid_argument
// naming the file, the tensor and the first non-finite element (a run from such weights skips
// every update: refused before the first step).
Status check_finite(const HfTensorRef& ref, const std::vector<float>& values, uint64_t first) {
  const auto bad = std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
  if (bad == values.end()) return Status::ok();
  return error(Code::invalid_argument,
               "{}: tensor '{}' element {} is {}: the weights are not finite (a diverged or damaged model), and "
               "training from them would skip every update; pass finite weights (re-download or re-export them)",
               ref.file->path(), ref.tensor->name, first + uint64_t(bad - values.begin()), *bad);
}

template <typename Find>
Status read_hf_chunk(const ParamLayout& masters, size_t c, const Find& find, float* out) {
  std::fill_n(out, masters.chunks[c].bytes / sizeof(float), 0.f);
  for (const ParamSpec& p : masters.params) {
    if (size_t(p.chunk) != c) continue;
    const HfTensorRef ref = find(p.name);
    if (!p.whole() && p.hf_transposed) {  // a tile's rows are columns of the file's tensor
      STRATA_ASSIGN_OR_RETURN(std::vector<float> values, hf_tensor_as_f32(ref));
      STRATA_RETURN_IF_ERROR(check_finite(ref, values, 0));
      tile_from_hf_transposed(p, values.data(), out + p.offset / sizeof(float));
      continue;
    }
    if (!p.whole()) {  // a tile: its rows are contiguous in the file too
      STRATA_ASSIGN_OR_RETURN(std::vector<float> values, hf_tensor_as_f32(ref, p.tensor_offset(), p.elements));
      STRATA_RETURN_IF_ERROR(check_finite(ref, values, p.tensor_offset()));
      std::copy(values.begin(), values.end(), out + p.offset / sizeof(float));
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(std::vector<float> values, hf_tensor_as_f32(ref));
    STRATA_RETURN_IF_ERROR(check_finite(ref, values, 0));
    from_hf_layout(p, values.data(), out + p.offset / sizeof(float));
  }
  return Status::ok();
}

// Tensor `name` of one safetensors file; a GPT-2 name "transformer.X" also finds "X" (absent in
// OpenAI's own GPT-2 files). Null tensor when absent.
HfTensorRef find_in_file(const SafetensorsFile& file, std::string_view name) {
  constexpr std::string_view kGpt2Prefix = "transformer.";
  const SafetensorsTensor* t = file.find(name);
  if (t == nullptr && name.starts_with(kGpt2Prefix)) t = file.find(name.substr(kGpt2Prefix.size()));
  return {&file, t};
}

std::vector<uint64_t> as_u64(const std::vector<int64_t>& shape) { return {shape.begin(), shape.end()}; }

}  // namespace

// Each chunk produced into one fp32 buffer, then through the weight source's update buffer: fp32
// copied, 16-bit rounded per tensor (padding zero), then committed; returns once every chunk
// reached its home.
Status Transformer::write_chunks(const Fp32ChunkSource& produce) {
  uint64_t largest = 0;
  for (const ChunkSpec& chunk : master_layout_.chunks) largest = std::max(largest, chunk.bytes);
  std::vector<float> host(largest / sizeof(float));
  for (size_t c = 0; c < master_layout_.chunks.size(); ++c) {
    STRATA_RETURN_IF_ERROR(produce(c, host.data()));
    STRATA_RETURN_IF_ERROR(write_chunk(c, host.data()));
  }
  return weights_->flush();
}

Status Transformer::write_chunk(size_t c, const float* host) {
  STRATA_ASSIGN_OR_RETURN(std::byte* staged, weights_->update_buffer(c));
  if (options_.dtype == DType::f32) {
    std::memcpy(staged, host, layout_.chunks[c].bytes);
  } else {
    const kernels::FloatFormat format = float_format_of(options_.dtype, "weights").value();
    uint64_t zeroed = 0;  // the padding before each tensor (and after the last) is zeroed, the tensors written once
    for (const ParamSpec* p : chunk_params_[c]) {
      if (p->offset < zeroed) {  // not in offset order: zero the whole chunk first (never for a built layout)
        std::memset(staged, 0, layout_.chunks[c].bytes);
        zeroed = layout_.chunks[c].bytes;
        break;
      }
      std::memset(staged + zeroed, 0, p->offset - zeroed);
      zeroed = p->offset + p->elements * esize_;
    }
    if (zeroed < layout_.chunks[c].bytes) std::memset(staged + zeroed, 0, layout_.chunks[c].bytes - zeroed);
    for (const ParamSpec* p : chunk_params_[c]) {
      const float* src = host + master_layout_.params[p - layout_.params.data()].offset / sizeof(float);
      auto* dst = reinterpret_cast<uint16_t*>(staged + p->offset);
      tbb::parallel_for(tbb::blocked_range<uint64_t>(0, p->elements, kRangeElements),
                        [&](const tbb::blocked_range<uint64_t>& r) {
                          for (uint64_t e = r.begin(); e < r.end(); ++e) dst[e] = kernels::float_to_half(format, src[e]);
                        });
    }
  }
  STRATA_RETURN_IF_ERROR(weights_->commit_update(c));
  elements_written_.fetch_add(master_layout_.chunks[c].bytes / sizeof(float), std::memory_order_relaxed);
  return Status::ok();
}

Transformer::Fp32ChunkSource Transformer::take_fp32_source() { return std::exchange(fp32_source_, nullptr); }

Status Transformer::load_hf_safetensors(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
  return load_hf_safetensors(file);
}

Status Transformer::load_hf_safetensors(const SafetensorsFile& file) {
  fp32_source_ = nullptr;
  init_pending_.clear();
  for (const auto& p : master_layout_.params) {  // every tensor checked before the first chunk is written
    const SafetensorsTensor* t = find_in_file(file, p.name).tensor;
    if (t == nullptr) {
      return error(Code::not_found, "{}: no tensor '{}', which model '{}' ({}) needs; is it a checkpoint of this model?",
                   file.path(), p.name, config_.name, arch_name(config_.arch));
    }
    const std::vector<uint64_t> want = as_u64(p.hf_shape());
    if (t->shape != want) {
      return error(Code::invalid_argument, "{}: tensor '{}' has shape [{}] but model '{}' needs [{}]", file.path(),
                   p.name, fmt::join(t->shape, ", "), config_.name, fmt::join(want, ", "));
    }
    if (t->dtype != SafeDType::f32 && t->dtype != SafeDType::bf16 && t->dtype != SafeDType::f16) {
      return error(Code::invalid_argument, "{}: tensor '{}' is {}; the model loads F32, BF16 or F16", file.path(),
                   t->name, safe_dtype_name(t->dtype));
    }
  }
  const auto read = [this](const SafetensorsFile& f, size_t c, float* out) {
    return read_hf_chunk(master_layout_, c, [&](std::string_view name) { return find_in_file(f, name); }, out);
  };
  STRATA_RETURN_IF_ERROR(write_chunks([&](size_t c, float* out) { return read(file, c, out); }));
  if (options_.dtype != DType::f32) {
    // A copy shares the mapping (SafetensorsFile holds it by shared_ptr): the file stays mapped
    // until the source is dropped, whatever the caller does with `file`.
    auto held = std::make_shared<const SafetensorsFile>(file);
    fp32_source_ = [read, held](size_t c, float* out) { return read(*held, c, out); };
  }
  return Status::ok();
}

Status Transformer::load_hf_weights(const HfWeights& weights) {
  STRATA_RETURN_IF_ERROR(weights.check_layout(master_layout_, config_.name));
  fp32_source_ = nullptr;
  init_pending_.clear();
  const auto read = [this](const HfWeights& w, size_t c, float* out) {
    return read_hf_chunk(master_layout_, c, [&](std::string_view name) { return w.find(name); }, out);
  };
  STRATA_RETURN_IF_ERROR(write_chunks([&](size_t c, float* out) { return read(weights, c, out); }));
  if (options_.dtype != DType::f32) {
    auto held = std::make_shared<const HfWeights>(weights);  // its files share their mappings
    fp32_source_ = [read, held](size_t c, float* out) { return read(*held, c, out); };
  }
  return Status::ok();
}

Status Transformer::init(uint64_t seed) {
  fp32_source_ = nullptr;
  init_pending_.clear();
  Fp32ChunkSource generate = [this, seed](size_t c, float* out) {
    init_chunk(master_layout_, config_.n_layer, seed, c, out);
    return Status::ok();
  };
  STRATA_RETURN_IF_ERROR(write_chunks(generate));
  if (options_.dtype != DType::f32) fp32_source_ = std::move(generate);  // regenerates: nothing stored
  return Status::ok();
}

Status Transformer::begin_init(uint64_t seed) {
  if (options_.dtype == DType::f32) return init(seed);
  init_pending_.assign(master_layout_.chunks.size(), 1);
  init_seed_ = seed;
  fp32_source_ = [this](size_t c, float* out) { return init_once(c, out); };
  return Status::ok();
}

// Chunk c's initial fp32 values into `out`, and (the first time since begin_init) its weights
// from them, rounded.
Status Transformer::init_once(size_t c, float* out) {
  init_chunk(master_layout_, config_.n_layer, init_seed_, c, out);
  if (c >= init_pending_.size() || init_pending_[c] == 0) return Status::ok();
  STRATA_RETURN_IF_ERROR(write_chunk(c, out));
  init_pending_[c] = 0;
  return Status::ok();
}

Status Transformer::finish_init() {
  if (init_pending_.empty()) return Status::ok();
  std::vector<float> host;
  for (size_t c = 0; c < init_pending_.size(); ++c) {
    if (init_pending_[c] == 0) continue;
    host.resize(master_layout_.chunks[c].bytes / sizeof(float));
    STRATA_RETURN_IF_ERROR(init_once(c, host.data()));
  }
  init_pending_.clear();
  return weights_->flush();
}

StatusOr<kernels::CrossEntropyResult> Transformer::read_loss() {
  kernels::CrossEntropyResult result;
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(&result, acts_.loss, sizeof(result), Stream::d2h));
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::d2h));
  return result;
}

StatusOr<std::vector<float>> Transformer::copy_parameter_to_host(std::string_view hf_name, ParamState state) {
  const ParamSpec* first = layout_.find(hf_name);
  if (first == nullptr) {
    return error(Code::not_found, "model '{}' has no parameter '{}' (Hugging Face names, e.g. '{}')", config_.name,
                 hf_name, layout_.params.front().name);
  }
  const bool grads = state == ParamState::gradients;  // the fp32 sums of the backward passes since zero_grad
  if (grads && (grad_sink_ == nullptr || grad_sink_ != device_grads_.get()))
    return error(Code::failed_precondition, "model '{}': its gradients are not on the device (they stream to the "
                 "trainer's host accumulators)", config_.name);
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::compute));
  std::vector<float> values(first->tensor_elements());
  for (const ParamSpec& p : layout_.params) {  // the tensor, or each of its tiles
    if (p.name != hf_name) continue;
    float* out = values.data() + p.tensor_offset();
    if (grads) {
      STRATA_ASSIGN_OR_RETURN(const float* acc, device_grads_->widened(p.chunk));
      STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::compute));
      STRATA_RETURN_IF_ERROR(backend_.copy_to_host(out, acc + p.offset / esize_,
                                                   p.elements * sizeof(float), Stream::d2h));
      STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::d2h));
      continue;
    }
    std::vector<std::byte> chunk(layout_.chunks[p.chunk].bytes);
    STRATA_RETURN_IF_ERROR(weights_->read(p.chunk, chunk.data()));
    if (options_.dtype == DType::f32) {
      std::memcpy(out, chunk.data() + p.offset, bytes(int64_t(p.elements)));
      continue;
    }
    const kernels::FloatFormat format = float_format_of(options_.dtype, "weights").value();
    const auto* halves = reinterpret_cast<const uint16_t*>(chunk.data() + p.offset);
    for (uint64_t e = 0; e < p.elements; ++e) out[e] = kernels::half_to_float(format, halves[e]);
  }
  if (!first->hf_transposed) return values;
  ParamSpec whole = *first;  // to_hf_layout converts p.elements: the whole tensor's, not a tile's
  whole.row_begin = 0;
  whole.elements = whole.tensor_elements();
  return to_hf_layout(whole, values.data());
}

}  // namespace strata::model
