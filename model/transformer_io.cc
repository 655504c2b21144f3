// Transformer (transformer.h): getting parameters in and out — Hugging Face safetensors loading
// (with GPT-2's Conv1D transposition), GPT-2 style random initialisation, and host read-back of
// one parameter or the loss. Each stages a whole chunk on the host (fp32, rounded to a 16-bit
// working precision per tensor) and moves it in one copy.
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "kernels/cpu/half.h"
#include "model/hf_weights.h"
#include "model/transformer.h"
#include "runtime/splitmix64.h"

namespace strata::model {
namespace {

// Deterministic normal samples (splitmix64 + Box-Muller): identical on every platform, unlike
// std::normal_distribution.
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : bits_(seed) {}
  float next(float stddev) {
    const double u1 = (double(bits_.next() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = double(bits_.next() >> 11) * 0x1.0p-53;
    return float(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }

 private:
  SplitMix64 bits_;
};

std::vector<uint64_t> as_u64(const std::vector<int64_t>& shape) { return {shape.begin(), shape.end()}; }

}  // namespace

std::vector<std::vector<float>> Transformer::zeroed_host_chunks() const {
  std::vector<std::vector<float>> host(master_layout_.chunks.size());
  for (size_t i = 0; i < host.size(); ++i) host[i].assign(master_layout_.chunks[i].bytes / sizeof(float), 0.f);
  return host;
}

// Each chunk through the weight source's update buffer: fp32 copied, 16-bit rounded per tensor
// (padding zero), then committed; returns once every chunk reached its home.
Status Transformer::write_chunks(std::vector<std::vector<float>> host_chunks) {
  const bool f32 = options_.dtype == DType::f32;
  const kernels::FloatFormat format = f32 ? kernels::FloatFormat::f32 : float_format_of(options_.dtype, "weights").value();
  for (size_t c = 0; c < host_chunks.size(); ++c) {
    STRATA_ASSIGN_OR_RETURN(std::byte* staged, weights_->update_buffer(c));
    if (f32) {
      std::memcpy(staged, host_chunks[c].data(), layout_.chunks[c].bytes);
    } else {
      std::memset(staged, 0, layout_.chunks[c].bytes);
      for (const ParamSpec* p : chunk_params_[c]) {
        const float* src = host_chunks[c].data() + master_layout_.params[p - layout_.params.data()].offset / sizeof(float);
        auto* dst = reinterpret_cast<uint16_t*>(staged + p->offset);
        for (uint64_t e = 0; e < p->elements; ++e) dst[e] = kernels::float_to_half(format, src[e]);
      }
    }
    STRATA_RETURN_IF_ERROR(weights_->commit_update(c));
  }
  STRATA_RETURN_IF_ERROR(weights_->flush());
  if (!f32) fp32_weights_ = std::move(host_chunks);
  return Status::ok();
}

std::vector<std::vector<float>> Transformer::take_fp32_weights() { return std::exchange(fp32_weights_, {}); }

Status Transformer::load_hf_safetensors(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
  return load_hf_safetensors(file);
}

Status Transformer::load_hf_safetensors(const SafetensorsFile& file) {
  std::vector<std::vector<float>> host = zeroed_host_chunks();
  for (const auto& p : master_layout_.params) {
    const SafetensorsTensor* t = file.find(p.name);
    constexpr std::string_view kGpt2Prefix = "transformer.";  // absent in OpenAI's own GPT-2 files
    if (t == nullptr && p.name.starts_with(kGpt2Prefix)) t = file.find(std::string_view(p.name).substr(kGpt2Prefix.size()));
    if (t == nullptr) {
      return error(Code::not_found, "{}: no tensor '{}', which model '{}' ({}) needs; is it a checkpoint of this model?",
                   file.path(), p.name, config_.name, arch_name(config_.arch));
    }
    const std::vector<uint64_t> want = as_u64(p.hf_shape());
    if (t->shape != want) {
      return error(Code::invalid_argument, "{}: tensor '{}' has shape [{}] but model '{}' needs [{}]", file.path(),
                   p.name, fmt::join(t->shape, ", "), config_.name, fmt::join(want, ", "));
    }
    STRATA_ASSIGN_OR_RETURN(std::vector<float> values, hf_tensor_as_f32({&file, t}));
    from_hf_layout(p, values.data(), host[p.chunk].data() + p.offset / sizeof(float));
  }
  return write_chunks(std::move(host));
}

Status Transformer::load_hf_weights(const HfWeights& weights) {
  STRATA_RETURN_IF_ERROR(weights.check_layout(master_layout_, config_.name));
  std::vector<std::vector<float>> host = zeroed_host_chunks();
  for (const auto& p : master_layout_.params) {  // one tensor converted at a time
    STRATA_ASSIGN_OR_RETURN(std::vector<float> values, hf_tensor_as_f32(weights.find(p.name)));
    from_hf_layout(p, values.data(), host[p.chunk].data() + p.offset / sizeof(float));
  }
  return write_chunks(std::move(host));
}

Status Transformer::init(uint64_t seed) {
  std::vector<std::vector<float>> host = zeroed_host_chunks();
  const float residual_std = 0.02f / std::sqrt(2.0f * float(config_.n_layer));
  for (size_t i = 0; i < master_layout_.params.size(); ++i) {
    const ParamSpec& p = master_layout_.params[i];
    float* dst = host[p.chunk].data() + p.offset / sizeof(float);
    if (p.shape.size() == 1) {
      // Norm gains start at 1, biases (GPT-2) at 0.
      const bool gain = p.layer >= 0 ? (p.slot == int(LayerSlot::ln1_w) || p.slot == int(LayerSlot::ln2_w))
                                     : p.slot == int(GlobalSlot::lnf_w);
      std::fill_n(dst, p.elements, gain ? 1.f : 0.f);
      continue;
    }
    const bool residual_proj = p.layer >= 0 && (p.slot == int(LayerSlot::attn_proj_w) || p.slot == int(LayerSlot::fc_proj_w));
    NormalRng rng(seed * 0x100000001B3ull + i);  // one stream per tensor: independent of chunking
    for (uint64_t e = 0; e < p.elements; ++e) dst[e] = rng.next(residual_proj ? residual_std : 0.02f);
  }
  return write_chunks(std::move(host));
}

StatusOr<kernels::CrossEntropyResult> Transformer::read_loss() {
  kernels::CrossEntropyResult result;
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(&result, acts_.loss, sizeof(result), Stream::d2h));
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::d2h));
  return result;
}

StatusOr<std::vector<float>> Transformer::copy_parameter_to_host(std::string_view hf_name, ParamState state) {
  const ParamSpec* p = layout_.find(hf_name);
  if (p == nullptr) {
    return error(Code::not_found, "model '{}' has no parameter '{}' (Hugging Face names, e.g. '{}')", config_.name,
                 hf_name, layout_.params.front().name);
  }
  std::vector<float> values(p->elements);
  if (state == ParamState::gradients) {  // the fp32 sums of the backward passes since zero_grad
    if (grad_sink_ == nullptr || grad_sink_ != device_grads_.get())
      return error(Code::failed_precondition, "model '{}': its gradients are not on the device (they stream to the "
                   "trainer's host accumulators)", config_.name);
    STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::compute));
    STRATA_RETURN_IF_ERROR(backend_.copy_to_host(values.data(), device_grads_->accumulated(p->chunk) + p->offset / esize_,
                                                 p->elements * sizeof(float), Stream::d2h));
    STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::d2h));
    if (!p->hf_transposed) return values;
    return to_hf_layout(*p, values.data());
  }
  std::vector<uint16_t> halves(options_.dtype == DType::f32 ? 0 : p->elements);
  void* dst = halves.empty() ? static_cast<void*>(values.data()) : halves.data();
  {
    std::vector<std::byte> chunk(layout_.chunks[p->chunk].bytes);
    STRATA_RETURN_IF_ERROR(weights_->read(p->chunk, chunk.data()));
    std::memcpy(dst, chunk.data() + p->offset, bytes(int64_t(p->elements)));
  }
  if (!halves.empty()) {
    const kernels::FloatFormat format = float_format_of(options_.dtype, "weights").value();
    for (size_t e = 0; e < halves.size(); ++e) values[e] = kernels::half_to_float(format, halves[e]);
  }
  if (!p->hf_transposed) return values;
  return to_hf_layout(*p, values.data());
}

}  // namespace strata::model
