// CPU Adam over many tensors: validation, the block plan (tensor, offset, length per block), the
// optional parallel finite check, and the parallel update over the plan.
#include "offload/cpu_adam.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <vector>

#include "runtime/thread_pool.h"

namespace strata {

namespace {

struct Block {
  size_t tensor;
  size_t begin;
  size_t n;
};

std::vector<Block> plan_blocks(std::span<const CpuAdamTensor> tensors, size_t block_elems) {
  std::vector<Block> blocks;
  for (size_t t = 0; t < tensors.size(); ++t)
    for (size_t b = 0; b < tensors[t].n; b += block_elems)
      blocks.push_back(Block{t, b, std::min(block_elems, tensors[t].n - b)});
  return blocks;
}

void for_each_block(ThreadPool* pool, size_t count, const std::function<void(size_t)>& body) {
  if (pool == nullptr) {
    for (size_t i = 0; i < count; ++i) body(i);
    return;
  }
  pool->parallel_for(count, 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) body(i);
  });
}

Status validate_tensor(const CpuAdamTensor& t, size_t index, const CpuAdamOptions& o) {
  if (t.n == 0) return Status::ok();
  const bool states_ok = o.states == AdamStates::f32
                             ? (t.m != nullptr && t.v != nullptr)
                             : (t.m_code != nullptr && t.v_code != nullptr && t.m_scale != nullptr &&
                                t.v_scale != nullptr);
  if (t.param == nullptr || t.grad == nullptr || !states_ok)
    return error(Code::invalid_argument,
                 "Adam tensor {} ({} elements) is missing its weights, gradient or {} states; "
                 "pass every buffer of the chosen state format",
                 index, t.n, adam_states_name(o.states));
  if (o.formats.copy != kernels::CopyOut::none && t.copy_out == nullptr)
    return error(Code::invalid_argument,
                 "Adam tensor {} has no copy-out buffer but the copy format is {}; pass one or use none",
                 index, kernels::copy_out_name(o.formats.copy));
  return Status::ok();
}

}  // namespace

std::string_view adam_states_name(AdamStates s) { return s == AdamStates::f32 ? "fp32" : "8bit"; }

Status validate_adam_hyper(const kernels::AdamHyper& h) {
  const auto bad = [](std::string what) { return Status(Code::invalid_argument, std::move(what)); };
  if (!(std::isfinite(h.lr) && h.lr >= 0.0f)) return bad(fmt::format("Adam learning rate {} must be finite and >= 0", h.lr));
  if (!(h.beta1 >= 0.0f && h.beta1 < 1.0f)) return bad(fmt::format("Adam beta1 {} must be in [0, 1)", h.beta1));
  if (!(h.beta2 >= 0.0f && h.beta2 < 1.0f)) return bad(fmt::format("Adam beta2 {} must be in [0, 1)", h.beta2));
  if (!(std::isfinite(h.eps) && h.eps > 0.0f)) return bad(fmt::format("Adam eps {} must be finite and > 0", h.eps));
  if (!(std::isfinite(h.weight_decay) && h.weight_decay >= 0.0f))
    return bad(fmt::format("Adam weight decay {} must be finite and >= 0", h.weight_decay));
  if (h.step < 1) return bad(fmt::format("Adam step {} must be >= 1 (steps count from 1 for bias correction)", h.step));
  if (!std::isfinite(h.grad_scale)) return bad(fmt::format("Adam gradient multiplier {} must be finite", h.grad_scale));
  return Status::ok();
}

StatusOr<CpuAdamResult> cpu_adam_step(ThreadPool* pool, std::span<const CpuAdamTensor> tensors,
                                      const CpuAdamOptions& o) {
  STRATA_RETURN_IF_ERROR(validate_adam_hyper(o.hyper));
  if (o.block_elems == 0 || o.block_elems % kernels::kAdam8bitBlock != 0)
    return error(Code::invalid_argument, "Adam block size {} elements must be a positive multiple of {}",
                 o.block_elems, kernels::kAdam8bitBlock);
  for (size_t t = 0; t < tensors.size(); ++t) STRATA_RETURN_IF_ERROR(validate_tensor(tensors[t], t, o));

  const std::vector<Block> blocks = plan_blocks(tensors, o.block_elems);
  CpuAdamResult result;
  result.simd = kernels::runnable_simd_level(o.simd);
  result.blocks = blocks.size();
  const size_t grad_size = kernels::float_format_size(o.formats.grad);
  const size_t copy_size = kernels::copy_out_size(o.formats.copy);
  const auto at = [](const void* base, size_t offset_bytes) {
    return static_cast<const uint8_t*>(base) + offset_bytes;
  };

  if (o.skip_nonfinite) {
    std::atomic<bool> finite{true};
    for_each_block(pool, blocks.size(), [&](size_t i) {
      const Block& b = blocks[i];
      if (!finite.load(std::memory_order_relaxed)) return;
      if (!kernels::grad_all_finite(at(tensors[b.tensor].grad, b.begin * grad_size), o.formats.grad, b.n, o.simd))
        finite.store(false, std::memory_order_relaxed);
    });
    if (!finite.load()) {
      result.skipped = true;
      return result;
    }
  }

  const kernels::AdamConstants c = kernels::adam_constants(o.hyper);
  for_each_block(pool, blocks.size(), [&](size_t i) {
    const Block& b = blocks[i];
    const CpuAdamTensor& t = tensors[b.tensor];
    const void* grad = at(t.grad, b.begin * grad_size);
    void* copy = t.copy_out == nullptr ? nullptr : static_cast<uint8_t*>(t.copy_out) + b.begin * copy_size;
    if (o.states == AdamStates::f32) {
      kernels::adam_update(c, o.formats, kernels::AdamSpan{t.param + b.begin, t.m + b.begin, t.v + b.begin, grad, copy, b.n},
                           o.simd);
    } else {
      const size_t scale = b.begin / kernels::kAdam8bitBlock;
      kernels::adam8bit_update(c, o.formats,
                               kernels::Adam8bitSpan{t.param + b.begin, t.m_code + b.begin, t.v_code + b.begin,
                                                     t.m_scale + scale, t.v_scale + scale, grad, copy, b.n},
                               o.simd);
    }
  });
  return result;
}

}  // namespace strata
