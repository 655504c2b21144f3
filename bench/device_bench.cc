// `strata bench device` (see device_bench.h): checked, then timed, GEMMs at a model's forward
// shapes and one square shape per precision, and the device-to-device copy rate.
#include "bench/device_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/half.h"
#include "model/net/transformer.h"
#include "runtime/units.h"

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

DType dtype_of(PeakPrecision p) {
  switch (p) {
    case PeakPrecision::bf16:
      return DType::bf16;
    case PeakPrecision::fp16:
      return DType::f16;
    default:
      return DType::f32;
  }
}

// The largest error, relative to sum |inp * weight| + |bias|, a correct GEMM in `p` can show:
// fp32 accumulation over C terms; TF32 rounds inputs to 11 significant bits; bf16 / fp16 round
// the output to 8 / 11 bits (their inputs are already in the format, and the reference uses them).
double tolerance(PeakPrecision p) {
  switch (p) {
    case PeakPrecision::fp32:
      return 1e-4;
    case PeakPrecision::tf32:
      return 4e-3;
    case PeakPrecision::bf16:
      return 8e-3;
    case PeakPrecision::fp16:
      return 2e-3;
  }
  return 0;
}

// `values` rounded to the tensor format of `p` (what the device holds), and those bytes.
struct Encoded {
  std::vector<float> rounded;
  std::vector<std::byte> bytes;
};

Encoded encode(const std::vector<float>& values, PeakPrecision p) {
  Encoded e;
  e.rounded.resize(values.size());
  const DType dt = dtype_of(p);
  e.bytes.resize(values.size() * dtype_size(dt));
  for (size_t i = 0; i < values.size(); i++) {
    if (dt == DType::f32) {
      e.rounded[i] = values[i];
      std::memcpy(e.bytes.data() + 4 * i, &values[i], 4);
      continue;
    }
    const uint16_t h = dt == DType::bf16 ? kernels::float_to_bf16(values[i]) : kernels::float_to_fp16(values[i]);
    e.rounded[i] = dt == DType::bf16 ? kernels::bf16_to_float(h) : kernels::fp16_to_float(h);
    std::memcpy(e.bytes.data() + 2 * i, &h, 2);
  }
  return e;
}

float decode(const std::byte* p, DType dt) {
  if (dt == DType::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dt == DType::bf16 ? kernels::bf16_to_float(h) : kernels::fp16_to_float(h);
}

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Device buffers sized for the largest shape at fp32 width, shared by every shape and precision.
struct GemmBuffers {
  void* inp = nullptr;
  void* weight = nullptr;
  void* bias = nullptr;
  void* out = nullptr;
};

// Host inputs (fp32) and their device copies in the current precision.
struct GemmInputs {
  std::vector<float> inp, weight, bias;        // random in [-1, 1]
  Encoded inp_dev, weight_dev, bias_dev;       // as the device holds them
};

// Runs the GEMM once and compares sampled outputs (rows 0 and N-1, 8 columns each) with a float64
// dot product of the values the device holds. Returns the worst relative error.
StatusOr<double> check_gemm(Backend& be, const GemmBuffers& b, const GemmInputs& in, const GemmShape& s,
                            PeakPrecision p) {
  const DType dt = dtype_of(p);
  const size_t es = dtype_size(dt);
  STRATA_RETURN_IF_ERROR(
      be.ops().matmul_forward(dt, b.out, b.inp, b.weight, s.bias ? b.bias : nullptr, s.N, s.C, s.OC,
                              s.out_stride));
  std::vector<std::byte> row(static_cast<size_t>(s.OC) * es);
  double worst = 0;
  for (int64_t r : {int64_t{0}, s.N - 1}) {
    STRATA_RETURN_IF_ERROR(be.copy_to_host(row.data(), static_cast<std::byte*>(b.out) + r * s.out_row() * es,
                                           row.size(),
                                           Stream::compute));
    STRATA_RETURN_IF_ERROR(be.synchronize(Stream::compute));
    for (int k = 0; k < 8; k++) {
      const int64_t j = k * (s.OC - 1) / 7;
      double ref = 0, scale = 0;
      for (int64_t c = 0; c < s.C; c++) {
        const double prod = static_cast<double>(in.inp_dev.rounded[r * s.C + c]) * in.weight_dev.rounded[j * s.C + c];
        ref += prod;
        scale += std::fabs(prod);
      }
      if (s.bias) {
        ref += in.bias_dev.rounded[j];
        scale += std::fabs(in.bias_dev.rounded[j]);
      }
      const double got = decode(row.data() + j * es, dt);
      const double err = std::fabs(got - ref) / std::max(scale, 1e-30);
      if (!(err <= tolerance(p)))
        return error(Code::internal,
                     "bench device: {} GEMM {} ({} x {} -> {}) is wrong at out[{}, {}]: {} where float64 gives {} "
                     "(error {:.2e} of sum |a*b|, allowed {:.0e})",
                     peak_precision_name(p), s.name, s.N, s.C, s.OC, r, j, got, ref, err, tolerance(p));
      worst = std::max(worst, err);
    }
  }
  return worst;
}

// Times `op` (queued on the compute stream): one calibration run, then `repeat` runs of
// ops_per_run ops each; returns seconds per op of each run.
StatusOr<std::vector<double>> time_op(Backend& be, const std::function<Status()>& op, int repeat, double min_seconds,
                                      int* ops_per_run) {
  STRATA_RETURN_IF_ERROR(be.synchronize_all());
  Clock::time_point t0 = Clock::now();
  STRATA_RETURN_IF_ERROR(op());
  STRATA_RETURN_IF_ERROR(be.synchronize(Stream::compute));
  const double one = std::max(seconds_since(t0), 1e-7);
  *ops_per_run = min_seconds > 0 ? static_cast<int>(std::clamp(std::ceil(min_seconds / one), 1.0, 10000.0)) : 1;
  std::vector<double> per_op;
  for (int run = 0; run < repeat; run++) {
    t0 = Clock::now();
    for (int i = 0; i < *ops_per_run; i++) STRATA_RETURN_IF_ERROR(op());
    STRATA_RETURN_IF_ERROR(be.synchronize(Stream::compute));
    per_op.push_back(seconds_since(t0) / *ops_per_run);
  }
  return per_op;
}

void merge_shape(std::vector<GemmShape>& shapes, GemmShape s) {
  for (GemmShape& t : shapes)
    if (t.N == s.N && t.C == s.C && t.OC == s.OC && t.bias == s.bias && t.out_stride == s.out_stride) {
      t.name += ", " + s.name;
      t.count += s.count;
      return;
    }
  shapes.push_back(std::move(s));
}

}  // namespace

std::vector<GemmShape> model_gemm_shapes(const model::ModelConfig& m, int64_t tokens) {
  const bool bias = m.arch == model::Arch::gpt2;
  const int64_t L = m.n_layer, C = m.dim, KV = m.kv_dim();
  std::vector<GemmShape> shapes;
  merge_shape(shapes, {"q", tokens, C, C, bias, L});
  merge_shape(shapes, {"k", tokens, C, KV, bias, L});
  merge_shape(shapes, {"v", tokens, C, KV, bias, L});
  merge_shape(shapes, {"attn proj", tokens, C, C, bias, L});
  merge_shape(shapes, {"mlp in", tokens, C, m.fc_rows(), bias, L});
  merge_shape(shapes, {"mlp out", tokens, m.ffn_hidden, C, bias, L});
  merge_shape(shapes, {"head", tokens, C, m.vocab, false, 1, model::padded_vocab(m.vocab)});
  return shapes;
}

StatusOr<DeviceBenchReport> run_device_bench(const DeviceBenchOptions& o) {
  if (o.repeat < 1) return error(Code::invalid_argument, "--repeat must be >= 1 (got {})", o.repeat);
  if (o.micro_batch < 0 || o.seq < 0)
    return error(Code::invalid_argument, "--micro-batch {} and --seq {} must be >= 1", o.micro_batch, o.seq);
  if (o.square > 65536) return error(Code::invalid_argument, "--square {}: at most 65536", o.square);
  if (o.copy_bytes != 0 && o.copy_bytes < 4096)
    return error(Code::invalid_argument, "--copy-size {}: at least 4 KiB", format_size(o.copy_bytes));
  if (o.precisions.empty()) return Status(Code::invalid_argument, "bench device needs at least one precision");
  StatusOr<model::ModelConfig> preset = model::model_preset(o.preset);
  if (!preset.is_ok()) return Status(Code::invalid_argument, preset.status().message());
  const model::ModelConfig& mc = *preset;
  const bool cuda = o.backend == BackendKind::cuda;

  DeviceBenchReport r;
  r.backend = std::string(backend_kind_name(o.backend));
  r.model = mc.name;
  r.micro_batch = o.micro_batch > 0 ? o.micro_batch : cuda ? 16 : 1;
  r.seq = o.seq > 0 ? o.seq : cuda ? 1024 : 128;
  r.repeat = o.repeat;
  const int64_t square = o.square != 0 ? o.square : cuda ? 8192 : 1024;
  r.copy_bytes = o.copy_bytes > 0 ? (o.copy_bytes + 255) / 256 * 256 : cuda ? (1ull << 30) : (64ull << 20);
  const double min_seconds = o.min_seconds_per_run >= 0 ? o.min_seconds_per_run : cuda ? 0.05 : 0;
  r.gemm_path = cuda ? "ComputeOps::matmul_forward: cuBLAS (fp32 accumulation) on the compute stream"
                     : "ComputeOps::matmul_forward: OpenBLAS sgemm on the compute stream's thread";
  if (!cuda)
    r.notes.push_back("CPU backend: bf16/fp16 GEMMs widen their operands to fp32 scratch and round the output back "
                      "(runtime/cpu_widened_args.h); their figures include those conversions");

  std::vector<GemmShape> shapes = model_gemm_shapes(mc, r.micro_batch * r.seq);
  if (square > 0) shapes.push_back({"square", square, square, square, false, 1});
  int64_t max_in = 0, max_w = 0, max_out = 0, max_oc = 0;
  for (const GemmShape& s : shapes) {
    max_in = std::max(max_in, s.N * s.C);
    max_w = std::max(max_w, s.OC * s.C);
    max_out = std::max(max_out, s.N * s.out_row());
    max_oc = std::max(max_oc, s.OC);
  }
  GemmInputs in;  // filled once a backend exists: a missing GPU is said before seconds of random numbers

  // Precisions in two groups: one backend without TF32, one with (a BackendOptions choice).
  std::vector<PeakPrecision> plain, tf32;
  for (PeakPrecision p : o.precisions) {
    if (std::find(plain.begin(), plain.end(), p) != plain.end() || std::find(tf32.begin(), tf32.end(), p) != tf32.end())
      continue;
    PrecisionSummary summary;
    summary.precision = p;
    if (p == PeakPrecision::tf32 && !cuda) {
      summary.skipped = "CPU backend: fp32 GEMMs are full fp32 in OpenBLAS; TF32 is a tensor-core format";
    } else {
      summary.ran = true;
      (p == PeakPrecision::tf32 ? tf32 : plain).push_back(p);
    }
    r.precisions.push_back(summary);
  }
  size_t ran = 0;
  for (const PrecisionSummary& s : r.precisions) ran += s.ran ? 1 : 0;
  const size_t total = ran * shapes.size() + 1;
  size_t done = 0;
  const uint64_t gemm_bytes = 4 * static_cast<uint64_t>(max_in + max_w + max_out + max_oc) + 4 * 256;

  auto run_group = [&](bool with_tf32, const std::vector<PeakPrecision>& precisions, bool with_copy) -> Status {
    BackendOptions bo;
    bo.kind = o.backend;
    bo.device_index = o.device_index;
    bo.tf32 = with_tf32;
    bo.memory_budget = gemm_bytes + (with_copy ? 2 * r.copy_bytes + 512 : 0) + (16ull << 20);
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, make_backend(bo));
    if (r.device.empty()) r.device = be->device().name;
    if (in.inp.empty()) {
      in.inp = random_values(static_cast<size_t>(max_in), 1);
      in.weight = random_values(static_cast<size_t>(max_w), 2);
      in.bias = random_values(static_cast<size_t>(max_oc), 3);
    }
    GemmBuffers b;
    STRATA_ASSIGN_OR_RETURN(b.inp, be->allocate(4 * static_cast<uint64_t>(max_in), "bench device inp"));
    STRATA_ASSIGN_OR_RETURN(b.weight, be->allocate(4 * static_cast<uint64_t>(max_w), "bench device weight"));
    STRATA_ASSIGN_OR_RETURN(b.bias, be->allocate(4 * static_cast<uint64_t>(max_oc), "bench device bias"));
    STRATA_ASSIGN_OR_RETURN(b.out, be->allocate(4 * static_cast<uint64_t>(max_out), "bench device out"));
    for (PeakPrecision p : precisions) {
      const DType dt = dtype_of(p);
      in.inp_dev = encode(in.inp, p);
      in.weight_dev = encode(in.weight, p);
      in.bias_dev = encode(in.bias, p);
      STRATA_RETURN_IF_ERROR(be->copy_to_device(b.inp, in.inp_dev.bytes.data(), in.inp_dev.bytes.size(), Stream::h2d));
      STRATA_RETURN_IF_ERROR(
          be->copy_to_device(b.weight, in.weight_dev.bytes.data(), in.weight_dev.bytes.size(), Stream::h2d));
      STRATA_RETURN_IF_ERROR(
          be->copy_to_device(b.bias, in.bias_dev.bytes.data(), in.bias_dev.bytes.size(), Stream::h2d));
      STRATA_RETURN_IF_ERROR(be->synchronize(Stream::h2d));
      for (const GemmShape& s : shapes) {
        const std::string what = fmt::format("{} {} ({} x {} -> {})", peak_precision_name(p), s.name, s.N, s.C, s.OC);
        if (o.progress) o.progress(done, total, what);
        GemmResult g;
        g.shape = s;
        g.precision = p;
        StatusOr<double> err = check_gemm(*be, b, in, s, p);
        if (!err.is_ok()) return err.status();
        g.max_error = *err;
        auto gemm = [&] {
          return be->ops().matmul_forward(dt, b.out, b.inp, b.weight, s.bias ? b.bias : nullptr, s.N, s.C, s.OC,
                                          s.out_stride);
        };
        StatusOr<std::vector<double>> per_op = time_op(*be, gemm, o.repeat, min_seconds, &g.ops_per_run);
        if (!per_op.is_ok()) return per_op.status().with_context("bench device: " + what);
        std::vector<double> tflops;
        for (double t : *per_op) tflops.push_back(s.flops() / t / 1e12);
        g.tflops = spread(tflops);
        r.gemms.push_back(g);
        done++;
      }
    }
    if (!with_copy) return Status::ok();
    // Device-to-device: the source filled from a 16 MiB host pattern, one copy checked at three
    // places, then timed.
    if (o.progress) o.progress(done, total, fmt::format("device-to-device copy {}", format_size(r.copy_bytes)));
    void* src = nullptr;
    void* dst = nullptr;
    STRATA_ASSIGN_OR_RETURN(src, be->allocate(r.copy_bytes, "bench device copy source"));
    STRATA_ASSIGN_OR_RETURN(dst, be->allocate(r.copy_bytes, "bench device copy destination"));
    const uint64_t block = std::min<uint64_t>(r.copy_bytes, 16ull << 20);
    std::vector<std::byte> pattern(block), back(block);
    for (uint64_t i = 0; i < block; i++) pattern[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
    for (uint64_t off = 0; off < r.copy_bytes; off += block)
      STRATA_RETURN_IF_ERROR(be->copy_to_device(static_cast<std::byte*>(src) + off, pattern.data(),
                                                std::min(block, r.copy_bytes - off), Stream::h2d));
    STRATA_RETURN_IF_ERROR(be->synchronize(Stream::h2d));
    STRATA_RETURN_IF_ERROR(be->copy_on_device(dst, src, r.copy_bytes, Stream::compute));
    STRATA_RETURN_IF_ERROR(be->synchronize(Stream::compute));
    for (uint64_t off : {uint64_t{0}, (r.copy_bytes / 2) / block * block, (r.copy_bytes - 1) / block * block}) {
      const uint64_t n = std::min(block, r.copy_bytes - off);
      STRATA_RETURN_IF_ERROR(be->copy_to_host(back.data(), static_cast<std::byte*>(dst) + off, n, Stream::d2h));
      STRATA_RETURN_IF_ERROR(be->synchronize(Stream::d2h));
      if (std::memcmp(back.data(), pattern.data(), n) != 0)
        return error(Code::internal, "bench device: the device-to-device copy differs at offset {}", off);
    }
    StatusOr<std::vector<double>> per_op =
        time_op(*be, [&] { return be->copy_on_device(dst, src, r.copy_bytes, Stream::compute); }, o.repeat,
                min_seconds, &r.copies_per_run);
    if (!per_op.is_ok()) return per_op.status().with_context("bench device: device-to-device copy");
    std::vector<double> gbps;
    for (double t : *per_op) gbps.push_back(2.0 * static_cast<double>(r.copy_bytes) / t / 1e9);
    r.copy_gbps = spread(gbps);
    done++;
    return be->synchronize_all();
  };
  // The copy runs on the first backend made (the plain group when it has precisions).
  STRATA_RETURN_IF_ERROR(run_group(false, plain, true));
  if (!tf32.empty()) STRATA_RETURN_IF_ERROR(run_group(true, tf32, false));
  if (o.progress) o.progress(total, total, "done");

  DeviceDescription desc;
  desc.name = r.device;
  if (cuda) {
    std::vector<DeviceDescription> devices = list_cuda_devices();
    if (o.device_index < static_cast<int>(devices.size())) desc = devices[o.device_index];
  }
  for (PrecisionSummary& s : r.precisions) {
    if (!s.ran) continue;
    double flops = 0, seconds = 0;
    for (const GemmResult& g : r.gemms) {
      if (g.precision != s.precision) continue;
      if (g.shape.name == "square") {
        s.square_tflops = g.tflops.median;
        continue;
      }
      flops += g.shape.flops() * static_cast<double>(g.shape.count);
      seconds += g.shape.flops() / (g.tflops.median * 1e12) * static_cast<double>(g.shape.count);
    }
    if (seconds > 0) s.model_tflops = flops / seconds / 1e12;
    s.peak = device_peak(desc, s.precision, o.peak_tflops_override, &s.no_peak);
  }
  return r;
}

std::string device_bench_table(const DeviceBenchReport& r) {
  std::string out = fmt::format("bench device: {} backend, {}\n", r.backend, r.device);
  out += fmt::format("GEMMs: {}; {} forward shapes at {} x {} = {} tokens; TFLOP/s = 2 N C OC / time, the median of "
                     "{} runs\n",
                     r.gemm_path, r.model, r.micro_batch, r.seq, r.micro_batch * r.seq, r.repeat);
  for (const std::string& n : r.notes) out += fmt::format("note: {}\n", n);
  out += fmt::format("{:<9} {:<28} {:>6} {:>6} {:>6} {:>4} | {:>5} {:>9} {:>17} | {:>8}\n", "precision", "GEMM", "N",
                     "C", "OC", "x", "ops", "TFLOP/s", "min-max", "max err");
  for (const GemmResult& g : r.gemms)
    out += fmt::format("{:<9} {:<28} {:>6} {:>6} {:>6} {:>4} | {:>5} {:>9.3f} {:>17} | {:>8.1e}\n",
                       peak_precision_name(g.precision), g.shape.name, g.shape.N, g.shape.C, g.shape.OC, g.shape.count,
                       g.ops_per_run, g.tflops.median, fmt::format("{:.3f}-{:.3f}", g.tflops.min, g.tflops.max),
                       g.max_error);
  out += fmt::format("\nCeilings ({} forward GEMMs: their total FLOPs over their total time, x counts):\n", r.model);
  out += fmt::format("{:<9} | {:>11} {:>11} | {:>11} {:>9} {:>9} | {}\n", "precision", "model TF/s", "square TF/s",
                     "peak TF/s", "model/pk", "square/pk", "peak source");
  for (const PrecisionSummary& s : r.precisions) {
    if (!s.ran) {
      out += fmt::format("{:<9} | skipped: {}\n", peak_precision_name(s.precision), s.skipped);
      continue;
    }
    auto num = [](std::optional<double> v) { return v ? fmt::format("{:.3f}", *v) : std::string("-"); };
    auto pct = [&](std::optional<double> v) {
      return v && s.peak ? fmt::format("{:.1f}%", 100.0 * *v / s.peak->tflops) : std::string("-");
    };
    out += fmt::format("{:<9} | {:>11} {:>11} | {:>11} {:>9} {:>9} | {}\n", peak_precision_name(s.precision),
                       num(s.model_tflops), num(s.square_tflops), s.peak ? fmt::format("{:.1f}", s.peak->tflops) : "-",
                       pct(s.model_tflops), pct(s.square_tflops),
                       s.peak ? fmt::format("{} ({})", s.peak->gpu, s.peak->source) : "no peak: " + s.no_peak);
  }
  if (r.copies_per_run > 0)
    out += fmt::format("\ndevice-to-device copy (Backend::copy_on_device), {} x {} per run: {:.2f} GB/s "
                       "({:.2f}-{:.2f}), bytes read + written\n",
                       format_size(r.copy_bytes), r.copies_per_run, r.copy_gbps.median, r.copy_gbps.min,
                       r.copy_gbps.max);
  return out;
}

std::string device_bench_json(const DeviceBenchReport& r) {
  nlohmann::json j;
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["model"] = r.model;
  j["micro_batch"] = r.micro_batch;
  j["seq"] = r.seq;
  j["repeat"] = r.repeat;
  j["gemm_path"] = r.gemm_path;
  j["notes"] = r.notes;
  j["gemms"] = nlohmann::json::array();
  for (const GemmResult& g : r.gemms)
    j["gemms"].push_back({{"name", g.shape.name},
                          {"N", g.shape.N},
                          {"C", g.shape.C},
                          {"OC", g.shape.OC},
                          {"bias", g.shape.bias},
                          {"count", g.shape.count},
                          {"precision", peak_precision_name(g.precision)},
                          {"ops_per_run", g.ops_per_run},
                          {"tflops", g.tflops.median},
                          {"min_tflops", g.tflops.min},
                          {"max_tflops", g.tflops.max},
                          {"max_error", g.max_error}});
  j["precisions"] = nlohmann::json::array();
  for (const PrecisionSummary& s : r.precisions) {
    nlohmann::json q{{"precision", peak_precision_name(s.precision)}, {"ran", s.ran}, {"skipped", s.skipped}};
    q["model_tflops"] = s.model_tflops ? nlohmann::json(*s.model_tflops) : nlohmann::json(nullptr);
    q["square_tflops"] = s.square_tflops ? nlohmann::json(*s.square_tflops) : nlohmann::json(nullptr);
    if (s.peak) {
      q["peak_tflops"] = s.peak->tflops;
      q["peak_source"] = s.peak->gpu + " (" + s.peak->source + ")";
      if (s.model_tflops) q["model_fraction_of_peak"] = *s.model_tflops / s.peak->tflops;
      if (s.square_tflops) q["square_fraction_of_peak"] = *s.square_tflops / s.peak->tflops;
    } else {
      q["peak_tflops"] = nullptr;
      q["no_peak"] = s.ran ? s.no_peak : "";
    }
    j["precisions"].push_back(q);
  }
  j["copy"] = {{"bytes", r.copy_bytes},
               {"copies_per_run", r.copies_per_run},
               {"gbps", r.copy_gbps.median},
               {"min_gbps", r.copy_gbps.min},
               {"max_gbps", r.copy_gbps.max}};
  return j.dump(2);
}

std::string device_bench_csv(const DeviceBenchReport& r) {
  std::string out = "precision,name,N,C,OC,count,ops_per_run,tflops,min_tflops,max_tflops,max_error\n";
  for (const GemmResult& g : r.gemms)
    out += fmt::format("{},\"{}\",{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.3e}\n", peak_precision_name(g.precision),
                       g.shape.name, g.shape.N, g.shape.C, g.shape.OC, g.shape.count, g.ops_per_run, g.tflops.median,
                       g.tflops.min, g.tflops.max, g.max_error);
  return out;
}

}  // namespace strata::bench
