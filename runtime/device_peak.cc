// The GPU peak table and its name matching (device_peak.h).
#include "runtime/device_peak.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <vector>

#include <fmt/format.h>

namespace strata {
namespace {

// One GPU. `words`: every one must be a word of the (upper-cased) device name; `optional`: words
// the name may also have. Any other word (after the ignored ones) means a different GPU. Figures
// are dense TFLOP/s: fp32 on CUDA cores, tf32 / fp16 / bf16 on tensor cores with fp32
// accumulation; 0 = no tensor cores for that precision.
struct PeakRow {
  std::string_view gpu;
  std::string_view words;
  std::string_view optional;
  double fp32, tf32, fp16, bf16;
  std::string_view source;
};

// Datasheets give sparse tensor figures ("989 TFLOPS*"); the dense figure is half. Where a
// whitepaper gives the dense figure to more digits, that is the one used. Consistency check used
// for every row: dense fp16 = tensor cores x boost clock x FLOP per core per clock (A100: 1024;
// Hopper: 2048; GA102/Ada/GB202: 256 with fp32 accumulation on data-center and RTX pro cards,
// 128 on GeForce and on the L40).
constexpr PeakRow kPeaks[] = {
    // Hopper. NVIDIA H100 Tensor Core GPU Architecture whitepaper (dense column) for SXM5:
    // 66.9 fp32, 494.7 tf32, 989.4 fp16/bf16; PCIe 51.2, 378, 756 (its datasheet: 51, 756*, 1,513*).
    {"H100 SXM", "H100", "SXM SXM5", 66.9, 494.7, 989.4, 989.4, "NVIDIA H100 whitepaper (SXM5)"},
    {"H100 PCIe", "H100 PCIE", "", 51.2, 378.0, 756.0, 756.0, "NVIDIA H100 whitepaper (PCIe)"},
    {"H100 NVL", "H100 NVL", "", 60.0, 417.5, 835.5, 835.5, "NVIDIA H100 NVL datasheet (835* tf32, 1,671* bf16)"},
    // NVIDIA H200 datasheet: SXM 67 fp32, 989* tf32, 1,979* bf16 (the H100 SXM's GH100 at the same
    // clocks); NVL 60, 835*, 1,671*.
    {"H200", "H200", "SXM SXM5", 66.9, 494.7, 989.4, 989.4, "NVIDIA H200 datasheet (SXM)"},
    {"H200 NVL", "H200 NVL", "", 60.0, 417.5, 835.5, 835.5, "NVIDIA H200 datasheet (NVL)"},
    // NVIDIA H800 datasheet: SXM 67 / 989* / 1,979*; PCIe 51 / 756* / 1,513* (H100 rates, less NVLink).
    {"H800 SXM", "H800", "SXM SXM5", 66.9, 494.7, 989.4, 989.4, "NVIDIA H800 datasheet (SXM)"},
    {"H800 PCIe", "H800 PCIE", "", 51.2, 378.0, 756.0, 756.0, "NVIDIA H800 datasheet (PCIe)"},
    // NVIDIA A100 datasheet, 40 and 80 GB, SXM4 and PCIe alike: 19.5 fp32, 156 tf32, 312 bf16/fp16.
    {"A100", "A100", "SXM SXM4 PCIE", 19.5, 156.0, 312.0, 312.0, "NVIDIA A100 datasheet"},
    // NVIDIA A10 datasheet: 31.2 fp32, 62.5 | 125* tf32, 125 | 250* bf16/fp16.
    {"A10", "A10", "", 31.2, 62.5, 125.0, 125.0, "NVIDIA A10 datasheet"},
    // NVIDIA L4 datasheet: 30.3 fp32, 120* tf32, 242* bf16/fp16.
    {"L4", "L4", "", 30.3, 60.0, 121.0, 121.0, "NVIDIA L4 datasheet"},
    // NVIDIA L40 datasheet: 90.5 fp32, 90.5 | 181* tf32, 181.05 | 362.1* bf16/fp16.
    {"L40", "L40", "", 90.5, 90.5, 181.05, 181.05, "NVIDIA L40 datasheet"},
    // NVIDIA L40S datasheet: 91.6 fp32, 183 | 366* tf32, 362.05 | 733* bf16/fp16.
    {"L40S", "L40S", "", 91.6, 183.0, 362.05, 362.05, "NVIDIA L40S datasheet"},
    // NVIDIA Ampere GA102 GPU Architecture whitepaper, appendix A (GeForce RTX 3090): 35.6 fp32,
    // 35.6 tf32, 71 fp16/bf16 with fp32 accumulate (142 with fp16 accumulate).
    {"RTX 3090", "RTX 3090", "", 35.6, 35.6, 71.0, 71.0, "NVIDIA GA102 whitepaper, appendix A"},
    // Same whitepaper, appendix C (RTX A6000): 38.7 fp32, 77.4 tf32, 154.8 fp16/bf16 with fp32
    // accumulate (the A40 datasheet's 149.7 at its lower clock agrees).
    {"RTX A6000", "RTX A6000", "", 38.7, 77.4, 154.8, 154.8, "NVIDIA GA102 whitepaper, appendix C"},
    // NVIDIA Ada GPU Architecture whitepaper, appendix A: GeForce RTX 4090 82.6 fp32, 82.6 tf32,
    // 165.2 fp16/bf16 with fp32 accumulate (330.3 with fp16 accumulate); RTX 6000 Ada 91.1 fp32,
    // 182.1 tf32, 364.2 fp16/bf16 (its datasheet's 1,457* fp8 is 4 x 364.2).
    {"RTX 4090", "RTX 4090", "", 82.6, 82.6, 165.2, 165.2, "NVIDIA Ada whitepaper, appendix A"},
    {"RTX 6000 Ada", "RTX 6000 ADA", "", 91.1, 182.1, 364.2, 364.2, "NVIDIA Ada whitepaper"},
    // NVIDIA RTX Blackwell GPU Architecture whitepaper, appendix A (GeForce RTX 5090): 104.8 fp32,
    // 104.8 tf32, 209.5 fp16/bf16 with fp32 accumulate (419 with fp16 accumulate).
    {"RTX 5090", "RTX 5090", "", 104.8, 104.8, 209.5, 209.5, "NVIDIA RTX Blackwell whitepaper, appendix A"},
    // Volta and Turing: fp16 tensor cores only (fp32 accumulation at full rate), no tf32 or bf16.
    // NVIDIA V100 datasheet: SXM2 15.7 fp32, 125 tensor; PCIe 14, 112; V100S PCIe 16.4, 130.
    {"V100 SXM2", "V100", "SXM2", 15.7, 0, 125.0, 0, "NVIDIA V100 datasheet (SXM2)"},
    {"V100 PCIe", "V100 PCIE", "", 14.0, 0, 112.0, 0, "NVIDIA V100 datasheet (PCIe)"},
    {"V100S PCIe", "V100S PCIE", "", 16.4, 0, 130.0, 0, "NVIDIA V100S datasheet"},
    // NVIDIA T4 datasheet: 8.1 fp32, 65 mixed precision (fp16 in, fp32 accumulate).
    {"T4", "T4", "", 8.1, 0, 65.0, 0, "NVIDIA T4 datasheet"},
};

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

// Brand words and memory descriptions that do not change the chip: "NVIDIA", "80GB", "HBM3E".
bool ignored_word(const std::string& w) {
  if (w == "NVIDIA" || w == "GEFORCE" || w == "TESLA" || w == "GENERATION") return true;
  if (w.rfind("HBM", 0) == 0) return true;
  const size_t digits = w.find_first_not_of("0123456789");
  return digits > 0 && digits != std::string::npos && w.substr(digits) == "GB";
}

bool contains(const std::vector<std::string>& words, const std::string& w) {
  return std::find(words.begin(), words.end(), w) != words.end();
}

bool row_matches(const PeakRow& row, const std::vector<std::string>& name_words) {
  const std::vector<std::string> required = split_words(row.words);
  const std::vector<std::string> optional = split_words(row.optional);
  for (const std::string& w : required) {
    if (!contains(name_words, w)) return false;
  }
  return std::all_of(name_words.begin(), name_words.end(), [&](const std::string& w) {
    return ignored_word(w) || contains(required, w) || contains(optional, w);
  });
}

double row_tflops(const PeakRow& row, PeakPrecision precision) {
  switch (precision) {
    case PeakPrecision::fp32: return row.fp32;
    case PeakPrecision::tf32: return row.tf32;
    case PeakPrecision::fp16: return row.fp16;
    case PeakPrecision::bf16: return row.bf16;
  }
  return 0;
}

std::string sm_text(int compute_capability) {
  return compute_capability > 0 ? fmt::format(" (sm_{})", compute_capability) : "";
}

}  // namespace

std::string_view peak_precision_name(PeakPrecision precision) {
  switch (precision) {
    case PeakPrecision::fp32: return "fp32";
    case PeakPrecision::tf32: return "tf32";
    case PeakPrecision::fp16: return "fp16";
    case PeakPrecision::bf16: return "bf16";
  }
  return "?";
}

StatusOr<PeakPrecision> peak_precision_for(DType dtype, bool tf32) {
  switch (dtype) {
    case DType::f32: return tf32 ? PeakPrecision::tf32 : PeakPrecision::fp32;
    case DType::f16: return PeakPrecision::fp16;
    case DType::bf16: return PeakPrecision::bf16;
    default:
      return error(Code::invalid_argument, "no GEMM peak for dtype {}: training computes in fp32, fp16 or bf16",
                   dtype_name(dtype));
  }
}

std::optional<DevicePeak> device_peak(const DeviceDescription& device, PeakPrecision precision,
                                      double peak_tflops_override, std::string* reason) {
  auto fail = [&](std::string why) -> std::optional<DevicePeak> {
    if (reason != nullptr) *reason = std::move(why);
    return std::nullopt;
  };
  if (peak_tflops_override > 0) return DevicePeak{peak_tflops_override, "", "--peak-tflops"};
  if (device.compute_capability == 0) {
    return fail(fmt::format("no peak TFLOP/s for '{}': MFU is measured against a GPU's tensor-core peak; "
                            "pass --peak-tflops to compare against a figure of your own",
                            device.name));
  }
  const std::vector<std::string> name_words = split_words(device.name);
  const auto row = std::find_if(std::begin(kPeaks), std::end(kPeaks),
                                [&](const PeakRow& r) { return row_matches(r, name_words); });
  if (row == std::end(kPeaks)) {
    const bool mig = contains(name_words, "MIG");
    return fail(fmt::format("no peak TFLOP/s known for GPU '{}'{}{}; pass --peak-tflops with its dense {} "
                            "TFLOP/s to get MFU",
                            device.name, sm_text(device.compute_capability),
                            mig ? " (a MIG instance has a fraction of the whole GPU's peak)" : "",
                            peak_precision_name(precision)));
  }
  const double tflops = row_tflops(*row, precision);
  if (tflops <= 0) {
    return fail(fmt::format("{}{} has no {} tensor cores, so it has no {} peak; train in fp16 or pass "
                            "--peak-tflops to get MFU",
                            row->gpu, sm_text(device.compute_capability), peak_precision_name(precision),
                            peak_precision_name(precision)));
  }
  return DevicePeak{tflops, std::string(row->gpu), std::string(row->source)};
}

}  // namespace strata
