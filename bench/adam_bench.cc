// `strata bench adam`: buffers spread by parallel first touch, a correctness check against the
// scalar kernel on a slice, the timed Adam steps and the Adam-pattern ceiling on the same buffers
// and threads, and the torch peer run through python3.
#include "bench/adam_bench.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "bench/bench_util.h"
#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/stream_ceiling.h"
#include "runtime/thread_pool.h"
#include "runtime/units.h"

namespace strata::bench {

namespace {

using kernels::FloatFormat;

constexpr size_t kBlockElems = 64 * 1024;  // the driver's default parallel block
constexpr size_t kCheckElems = 65536 + 77; // the slice checked against the scalar kernel

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Bytes = std::unique_ptr<uint8_t[], FreeDeleter>;

// 2 MiB-aligned and advised MADV_HUGEPAGE, as the pinned pool's slabs that hold the optimizer's
// buffers under offload (runtime/pinned_pool.h), so the bench streams the kind of memory the step
// does (on 4 KiB pages each stream takes a TLB miss every 4 KiB; on the 2-vCPU dev VM that cost
// was within noise). Not touched here: the first write decides which node's memory backs a page.
// Without transparent huge pages the advice fails and 4 KiB pages stay.
StatusOr<Bytes> allocate(size_t bytes) {
  constexpr size_t kHugePage = 2 << 20;
  const size_t rounded = std::max<size_t>((bytes + kHugePage - 1) / kHugePage * kHugePage, kHugePage);
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr)
    return error(Code::out_of_memory, "bench adam needs {} of memory for its buffers; pass a smaller --params",
                 format_size(rounded));
  if (madvise(p, rounded, MADV_HUGEPAGE) != 0)
    spdlog::debug("bench adam: transparent huge pages not available ({}); 4 KiB pages", std::strerror(errno));
  return Bytes(static_cast<uint8_t*>(p));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double bytes_per_param(AdamStates states, FloatFormat grad, kernels::CopyOut copy) {
  const double state = states == AdamStates::f32 ? 24.0 : 8.0 + 4.0 + 16.0 / kernels::kAdam8bitBlock;
  return state + static_cast<double>(kernels::float_format_size(grad)) + static_cast<double>(kernels::copy_out_size(copy));
}

// Every buffer of one case, for `params` elements, written first by the pool's threads.
struct CaseBuffers {
  Bytes param, m, v, m_code, v_code, m_scale, v_scale, grad, copy;  // unused ones: one page
  size_t n = 0;
  AdamStates states = AdamStates::f32;

  Status allocate_all(size_t params, AdamStates state_format) {
    n = params;
    states = state_format;
    const size_t blocks = kernels::adam8bit_blocks(n);
    const bool q8 = states == AdamStates::q8;
    STRATA_ASSIGN_OR_RETURN(param, allocate(4 * n));
    STRATA_ASSIGN_OR_RETURN(grad, allocate(4 * n));
    STRATA_ASSIGN_OR_RETURN(copy, allocate(2 * n));
    STRATA_ASSIGN_OR_RETURN(m, allocate(q8 ? 0 : 4 * n));
    STRATA_ASSIGN_OR_RETURN(v, allocate(q8 ? 0 : 4 * n));
    STRATA_ASSIGN_OR_RETURN(m_code, allocate(q8 ? n : 0));
    STRATA_ASSIGN_OR_RETURN(v_code, allocate(q8 ? n : 0));
    STRATA_ASSIGN_OR_RETURN(m_scale, allocate(q8 ? 4 * blocks : 0));
    STRATA_ASSIGN_OR_RETURN(v_scale, allocate(q8 ? 4 * blocks : 0));
    return Status::ok();
  }

  // Parallel first touch by the same blocks the step uses: weights in [-1, 1), zero states, and
  // small finite gradients in `grad_format`.
  void fill(ThreadPool& pool, FloatFormat grad_format) {
    const size_t blocks = (n + kBlockElems - 1) / kBlockElems;
    pool.parallel_for(blocks, 1, [&](size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; ++b) {
        const size_t begin = b * kBlockElems, end = std::min(n, begin + kBlockElems);
        auto* p = reinterpret_cast<float*>(param.get());
        for (size_t i = begin; i < end; ++i) {
          const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
          p[i] = static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
          const float g = static_cast<float>((h >> 4) & 0xffff) * (1e-3f / 65536.0f) - 5e-4f;
          if (grad_format == FloatFormat::f32) {
            reinterpret_cast<float*>(grad.get())[i] = g;
          } else {
            reinterpret_cast<uint16_t*>(grad.get())[i] =
                grad_format == FloatFormat::bf16 ? kernels::float_to_bf16(g) : kernels::float_to_fp16(g);
          }
        }
        std::memset(copy.get() + 2 * begin, 0, 2 * (end - begin));
        if (states == AdamStates::f32) {
          std::memset(m.get() + 4 * begin, 0, 4 * (end - begin));
          std::memset(v.get() + 4 * begin, 0, 4 * (end - begin));
        } else {
          std::memset(m_code.get() + begin, 0, end - begin);
          std::memset(v_code.get() + begin, 0, end - begin);
          const size_t s0 = begin / kernels::kAdam8bitBlock, s1 = kernels::adam8bit_blocks(end);
          std::memset(m_scale.get() + 4 * s0, 0, 4 * (s1 - s0));
          std::memset(v_scale.get() + 4 * s0, 0, 4 * (s1 - s0));
        }
      }
    });
  }

  // `count` tensors over the buffers, each a whole number of 8-bit blocks except the last.
  std::vector<CpuAdamTensor> tensors(size_t count, FloatFormat grad_format) const {
    const size_t per = std::max<size_t>(kernels::kAdam8bitBlock,
                                        (n / count + kernels::kAdam8bitBlock - 1) / kernels::kAdam8bitBlock *
                                            kernels::kAdam8bitBlock);
    const size_t grad_size = kernels::float_format_size(grad_format);
    std::vector<CpuAdamTensor> out;
    for (size_t begin = 0; begin < n; begin += per) {
      CpuAdamTensor t;
      t.n = std::min(per, n - begin);
      t.param = reinterpret_cast<float*>(param.get()) + begin;
      t.grad = grad.get() + grad_size * begin;
      t.copy_out = copy.get() + 2 * begin;
      if (states == AdamStates::f32) {
        t.m = reinterpret_cast<float*>(m.get()) + begin;
        t.v = reinterpret_cast<float*>(v.get()) + begin;
      } else {
        t.m_code = reinterpret_cast<int8_t*>(m_code.get()) + begin;
        t.v_code = v_code.get() + begin;
        t.m_scale = reinterpret_cast<float*>(m_scale.get()) + begin / kernels::kAdam8bitBlock;
        t.v_scale = reinterpret_cast<float*>(v_scale.get()) + begin / kernels::kAdam8bitBlock;
      }
      out.push_back(t);
    }
    return out;
  }
};

// Copies the first `k` elements of `t`'s buffers into owned storage (a slice to check on).
struct SliceCopy {
  SliceCopy(const CpuAdamTensor& t, size_t k, const CpuAdamOptions& o)
      : param(t.param, t.param + k), grad(static_cast<const uint8_t*>(t.grad),
                                           static_cast<const uint8_t*>(t.grad) + k * kernels::float_format_size(o.formats.grad)),
        copy(2 * k), n(k) {
    if (o.states == AdamStates::f32) {
      m.assign(t.m, t.m + k);
      v.assign(t.v, t.v + k);
    } else {
      m_code.assign(t.m_code, t.m_code + k);
      v_code.assign(t.v_code, t.v_code + k);
      m_scale.assign(t.m_scale, t.m_scale + kernels::adam8bit_blocks(k));
      v_scale.assign(t.v_scale, t.v_scale + kernels::adam8bit_blocks(k));
    }
  }
  CpuAdamTensor tensor() {
    return {param.data(), m.data(), v.data(), m_code.data(), v_code.data(), m_scale.data(), v_scale.data(),
            grad.data(), copy.data(), n};
  }
  bool operator==(const SliceCopy& o) const {
    return param == o.param && m == o.m && v == o.v && m_code == o.m_code && v_code == o.v_code &&
           m_scale == o.m_scale && v_scale == o.v_scale && copy == o.copy;
  }
  std::vector<float> param, m, v;
  std::vector<int8_t> m_code;
  std::vector<uint8_t> v_code;
  std::vector<float> m_scale, v_scale;
  std::vector<uint8_t> grad, copy;
  size_t n;
};

// Two steps on a slice with the scalar kernel and with the benchmarked level: must be identical.
Status check_against_scalar(const CpuAdamTensor& first, const CpuAdamOptions& o) {
  const size_t k = std::min(first.n, kCheckElems);
  SliceCopy ref(first, k, o), got(first, k, o);
  CpuAdamOptions scalar = o;
  scalar.simd = kernels::SimdLevel::scalar;
  for (int64_t step = 1; step <= 2; ++step) {
    scalar.hyper.step = step;
    CpuAdamOptions fast = o;
    fast.hyper.step = step;
    const CpuAdamTensor r = ref.tensor(), g = got.tensor();
    STRATA_RETURN_IF_ERROR(cpu_adam_step(nullptr, {&r, 1}, scalar).status());
    STRATA_RETURN_IF_ERROR(cpu_adam_step(nullptr, {&g, 1}, fast).status());
  }
  if (!(ref == got))
    return error(Code::internal, "bench adam: the {} kernel differs from the scalar reference on a {}-element "
                 "slice; this is a bug in strata (run strata_kernels_tests)",
                 kernels::simd_level_name(kernels::runnable_simd_level(o.simd)), k);
  return Status::ok();
}

// The Adam-pattern ceiling over the same tensors, blocks and threads.
void ceiling_step(ThreadPool& pool, const std::vector<CpuAdamTensor>& tensors, const CpuAdamOptions& o) {
  std::vector<kernels::CeilingSpan> spans;
  const size_t grad_size = kernels::float_format_size(o.formats.grad);
  for (const CpuAdamTensor& t : tensors) {
    for (size_t b = 0; b < t.n; b += kBlockElems) {
      const bool q8 = o.states == AdamStates::q8;
      kernels::CeilingSpan s;
      s.n = std::min(kBlockElems, t.n - b);
      s.param = t.param + b;
      s.m = q8 ? static_cast<void*>(t.m_code + b) : static_cast<void*>(t.m + b);
      s.v = q8 ? static_cast<void*>(t.v_code + b) : static_cast<void*>(t.v + b);
      s.grad = static_cast<const uint8_t*>(t.grad) + grad_size * b;
      s.copy_out = static_cast<uint8_t*>(t.copy_out) + 2 * b;
      spans.push_back(s);
    }
  }
  pool.parallel_for(spans.size(), 1, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) kernels::stream_ceiling(o.formats, o.states == AdamStates::q8, spans[i], o.simd);
  });
}

// One state format's buffers, tensors, options and timings in the current case.
struct StateRun {
  AdamStates states{};
  CaseBuffers buffers;
  std::vector<CpuAdamTensor> tensors;
  CpuAdamOptions opt;
  std::vector<double> adam_s, ceiling_s;  // one sample per round
};

// Median over rounds of a[i] / b[i] (paired samples of two state formats).
double median_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return median(r);
}

std::string variant_name(AdamStates states, FloatFormat grad, kernels::CopyOut copy) {
  return fmt::format("adamw{} grad={} copy={}", states == AdamStates::q8 ? "8bit" : "", kernels::float_format_name(grad),
                     kernels::copy_out_name(copy));
}

// Runs bench/peers/torch_adam.py for one tensor count; appends its JSON lines to `out`.
Status run_torch_peer(const AdamBenchOptions& o, size_t tensors, int threads, std::vector<TorchPeerResult>& out) {
  const std::string cmd = fmt::format("'{}' '{}/torch_adam.py' --params {} --tensors {} --threads {} --repeat {} 2>/dev/null",
                                      o.python, STRATA_BENCH_PEERS_DIR, o.params, tensors, threads, std::max(1, o.repeat / 2));
  Status ran = run_command_lines(cmd, [&](std::string_view line) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("params_per_s")) return;
    TorchPeerResult r{j.value("optimizer", ""), j.value("impl", ""), j.value("torch", ""), tensors,
                      j.value("params_per_s", 0.0)};
    if (o.progress) o.progress(fmt::format("  torch {} {} {} tensors={}: {}/s", r.version, r.optimizer, r.impl, tensors,
                                           format_count(r.params_per_s)));
    out.push_back(std::move(r));
  });
  return ran.with_context("bench adam: the torch peer");
}

}  // namespace

StatusOr<AdamBenchReport> run_adam_bench(const AdamBenchOptions& o) {
  if (o.params == 0 || o.repeat < 1 || o.tensor_counts.empty() || o.grads.empty() || o.states.empty())
    return error(Code::invalid_argument, "bench adam needs --params > 0, --repeat >= 1 and at least one tensor "
                 "count, gradient format and state format");
  for (size_t t : o.tensor_counts)
    if (t == 0 || t > o.params)
      return error(Code::invalid_argument, "bench adam: --tensors {} must be between 1 and --params ({})", t, o.params);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ThreadPool> pool,
                          ThreadPool::create(ThreadPoolOptions{.threads = o.threads, .numa_node = -1, .pin = true,
                                                               .name = "bench-adam"}));
  AdamBenchReport report;
  report.threads = pool->concurrency();
  report.repeat = o.repeat;
  report.simd = std::string(kernels::simd_level_name(kernels::runnable_simd_level(o.simd)));
  // Every state format of a (gradient, tensor count) case is timed in turn within each round: a shift
  // of the machine's memory bandwidth during the run (a shared VM host's moved between ~55 and
  // ~90 GB/s within minutes) then hits them alike, and the 8-bit/fp32 ratio is the median of the
  // rounds' ratios.
  std::vector<StateRun> runs(o.states.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].states = o.states[i];
    STRATA_RETURN_IF_ERROR(runs[i].buffers.allocate_all(o.params, o.states[i]));
  }
  int64_t step = 0;
  const auto adam_step = [&](StateRun& r) -> Status {
    r.opt.hyper.step = ++step;
    return pool->run([&] { return cpu_adam_step(pool.get(), r.tensors, r.opt).status(); });
  };
  const auto ceiling = [&](StateRun& r) -> Status {
    pool->run([&] { ceiling_step(*pool, r.tensors, r.opt); });
    return Status::ok();
  };
  // One warm-up call per state format, then `repeat` rounds of one timed call each.
  const auto time_rounds = [&](const auto& call, std::vector<double> StateRun::*samples) -> Status {
    for (StateRun& r : runs) STRATA_RETURN_IF_ERROR(call(r));
    for (int round = 0; round < o.repeat; ++round) {
      for (StateRun& r : runs) {
        const auto t0 = std::chrono::steady_clock::now();
        STRATA_RETURN_IF_ERROR(call(r));
        (r.*samples).push_back(seconds_since(t0));
      }
    }
    return Status::ok();
  };
  for (FloatFormat grad : o.grads) {
    for (size_t count : o.tensor_counts) {
      for (StateRun& r : runs) {
        r.buffers.fill(*pool, grad);
        r.tensors = r.buffers.tensors(count, grad);
        r.opt = CpuAdamOptions{};
        r.opt.states = r.states;
        r.opt.formats = kernels::AdamFormats{grad, o.copy};
        r.opt.simd = o.simd;
        r.opt.hyper.weight_decay = 0.01f;
        r.adam_s.clear();
        r.ceiling_s.clear();
        STRATA_RETURN_IF_ERROR(check_against_scalar(r.tensors.front(), r.opt));
      }
      STRATA_RETURN_IF_ERROR(time_rounds(adam_step, &StateRun::adam_s));
      // Last: the ceiling's adds leave meaningless values behind (the next case fills again).
      STRATA_RETURN_IF_ERROR(time_rounds(ceiling, &StateRun::ceiling_s));
      const auto f32 = std::find_if(runs.begin(), runs.end(), [](const StateRun& r) { return r.states == AdamStates::f32; });
      for (const StateRun& r : runs) {
        AdamBenchCase c;
        c.variant = variant_name(r.states, grad, o.copy);
        c.states = r.states;
        c.grad = grad;
        c.tensors = r.tensors.size();
        c.params = o.params;
        c.bytes_per_param = bytes_per_param(r.states, grad, o.copy);
        c.seconds = median(r.adam_s);
        c.params_per_s = static_cast<double>(o.params) / c.seconds;
        c.ceiling_params_per_s = static_cast<double>(o.params) / median(r.ceiling_s);
        if (r.states == AdamStates::q8 && f32 != runs.end()) {
          c.vs_fp32_states = median_ratio(f32->adam_s, r.adam_s);
          c.ceiling_vs_fp32_states = median_ratio(f32->ceiling_s, r.ceiling_s);
        }
        if (o.progress)
          o.progress(fmt::format("  {} tensors={}: {}/s, {}, {:.0f}% of the Adam-pattern ceiling", c.variant, c.tensors,
                                 format_count(c.params_per_s), format_rate(c.params_per_s * c.bytes_per_param),
                                 100.0 * c.params_per_s / c.ceiling_params_per_s));
        report.cases.push_back(std::move(c));
      }
    }
  }

  if (!o.torch) {
    report.torch_note = "torch peer not requested";
  } else if (std::system(fmt::format("'{}' -c 'import torch' >/dev/null 2>&1", o.python).c_str()) != 0) {
    report.torch_note = fmt::format("torch peer skipped: `{} -c \"import torch\"` failed (install torch for that "
                                    "interpreter, or pass --python)", o.python);
  } else {
    report.torch_note = fmt::format("torch peer run with {}", o.python);
    for (size_t count : o.tensor_counts) STRATA_RETURN_IF_ERROR(run_torch_peer(o, count, report.threads, report.torch));
  }
  for (AdamBenchCase& c : report.cases) {
    for (const TorchPeerResult& t : report.torch) {
      if (t.optimizer != "AdamW" || t.tensors != c.tensors) continue;
      if (!c.torch_params_per_s || t.params_per_s > *c.torch_params_per_s) {
        c.torch_params_per_s = t.params_per_s;
        c.torch_impl = fmt::format("AdamW {} (torch {})", t.impl, t.version);
      }
    }
  }
  return report;
}

std::string adam_bench_table(const AdamBenchReport& r) {
  std::string out = fmt::format("CPU Adam, {} threads, {} kernels; GB/s counts the bytes each step must move per "
                                "parameter (B/p)\n", r.threads, r.simd);
  out += fmt::format("{:<34} {:>7} {:>11} {:>5} {:>10} {:>11} {:>8} {:>11}\n", "variant", "tensors", "params/s", "B/p",
                     "GB/s", "ceiling/s", "%ceil", "vs torch");
  for (const AdamBenchCase& c : r.cases) {
    out += fmt::format("{:<34} {:>7} {:>11} {:>5.1f} {:>10.2f} {:>11} {:>7.1f}% {:>11}\n", c.variant, c.tensors,
                       format_count(c.params_per_s), c.bytes_per_param, c.params_per_s * c.bytes_per_param / 1e9,
                       format_count(c.ceiling_params_per_s), 100.0 * c.params_per_s / c.ceiling_params_per_s,
                       c.torch_params_per_s ? fmt::format("{:.2f}x", c.params_per_s / *c.torch_params_per_s) : "-");
  }
  for (const AdamBenchCase& c : r.cases) {
    if (c.vs_fp32_states)
      out += fmt::format("8-bit states vs fp32 states, grad={} tensors={}: {:.2f}x the params/s ({:.2f}x the "
                         "ceiling's; medians of {} interleaved rounds)\n", kernels::float_format_name(c.grad),
                         c.tensors, *c.vs_fp32_states, c.ceiling_vs_fp32_states.value_or(0.0), r.repeat);
  }
  for (const TorchPeerResult& t : r.torch)
    out += fmt::format("torch {} {:<6} {:<9} tensors={:<4} {}/s\n", t.version, t.optimizer, t.impl, t.tensors,
                       format_count(t.params_per_s));
  out += r.torch_note + "\n";
  return out;
}

std::string adam_bench_json(const AdamBenchReport& r) {
  nlohmann::json cases = nlohmann::json::array();
  for (const AdamBenchCase& c : r.cases) {
    nlohmann::json j = {{"variant", c.variant},
                        {"states", adam_states_name(c.states)},
                        {"grad", kernels::float_format_name(c.grad)},
                        {"tensors", c.tensors},
                        {"params", c.params},
                        {"threads", r.threads},
                        {"simd", r.simd},
                        {"bytes_per_param", c.bytes_per_param},
                        {"seconds", c.seconds},
                        {"params_per_s", c.params_per_s},
                        {"gb_per_s", c.params_per_s * c.bytes_per_param / 1e9},
                        {"ceiling_params_per_s", c.ceiling_params_per_s},
                        {"fraction_of_ceiling", c.params_per_s / c.ceiling_params_per_s}};
    if (c.vs_fp32_states) {
      j["vs_fp32_states"] = *c.vs_fp32_states;
      j["ceiling_vs_fp32_states"] = c.ceiling_vs_fp32_states.value_or(0.0);
    }
    if (c.torch_params_per_s) {
      j["torch_params_per_s"] = *c.torch_params_per_s;
      j["torch_impl"] = c.torch_impl;
      nlohmann::json all = nlohmann::json::array();
      for (const TorchPeerResult& t : r.torch)
        if (t.tensors == c.tensors)
          all.push_back({{"optimizer", t.optimizer}, {"impl", t.impl}, {"torch", t.version},
                         {"params_per_s", t.params_per_s}});
      j["torch_all"] = std::move(all);
    } else {
      j["torch_note"] = r.torch_note;
    }
    cases.push_back(std::move(j));
  }
  return cases.dump(2);
}

}  // namespace strata::bench
