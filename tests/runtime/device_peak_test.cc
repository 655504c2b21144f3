// Tests of the GPU peak table: lookups by the names cudaGetDeviceProperties reports, names that
// must not match a neighbour (A10 vs A100, L4 vs L40), precisions without tensor cores, the CPU
// backend, and the --peak-tflops override.
#include "runtime/device_peak.h"

#include <string>

#include <gtest/gtest.h>

namespace strata {
namespace {

DeviceDescription gpu(std::string name, int compute_capability) {
  DeviceDescription d;
  d.name = std::move(name);
  d.compute_capability = compute_capability;
  d.pci_bus_id = "0000:17:00.0";
  return d;
}

struct Lookup {
  const char* name;  // as cudaGetDeviceProperties reports it
  int compute_capability;
  PeakPrecision precision;
  double tflops;
};

// Whole words match, so a name that is a prefix of another (A10 / A100, L4 / L40 / L40S) finds
// its own row. GeForce cards run fp16/bf16 with fp32 accumulation at half their fp16-accumulate
// rate; the RTX pro cards of the same chips (A6000, 6000 Ada) at full rate.
constexpr Lookup kLookups[] = {
    {"NVIDIA H200", 90, PeakPrecision::bf16, 989.4},
    {"NVIDIA H100 80GB HBM3", 90, PeakPrecision::bf16, 989.4},
    {"NVIDIA H100 80GB HBM3", 90, PeakPrecision::tf32, 494.7},
    {"NVIDIA H100 80GB HBM3", 90, PeakPrecision::fp32, 66.9},
    {"NVIDIA H100 PCIe", 90, PeakPrecision::fp16, 756.0},
    {"NVIDIA H100 NVL", 90, PeakPrecision::bf16, 835.5},
    {"NVIDIA H200 NVL", 90, PeakPrecision::bf16, 835.5},
    {"NVIDIA H800", 90, PeakPrecision::bf16, 989.4},
    {"NVIDIA H800 PCIe", 90, PeakPrecision::bf16, 756.0},
    {"NVIDIA A100-SXM4-80GB", 80, PeakPrecision::bf16, 312.0},
    {"NVIDIA A100-SXM4-40GB", 80, PeakPrecision::tf32, 156.0},
    {"NVIDIA A100-PCIE-40GB", 80, PeakPrecision::bf16, 312.0},
    {"NVIDIA A100 80GB PCIe", 80, PeakPrecision::fp16, 312.0},
    {"NVIDIA A10", 86, PeakPrecision::bf16, 125.0},
    {"NVIDIA L4", 89, PeakPrecision::bf16, 121.0},
    {"NVIDIA L40", 89, PeakPrecision::bf16, 181.05},
    {"NVIDIA L40S", 89, PeakPrecision::bf16, 362.05},
    {"Tesla V100-SXM2-16GB", 70, PeakPrecision::fp16, 125.0},
    {"Tesla V100-PCIE-32GB", 70, PeakPrecision::fp16, 112.0},
    {"Tesla V100S-PCIE-32GB", 70, PeakPrecision::fp16, 130.0},
    {"Tesla T4", 75, PeakPrecision::fp16, 65.0},
    {"Tesla T4", 75, PeakPrecision::fp32, 8.1},
    {"NVIDIA GeForce RTX 3090", 86, PeakPrecision::bf16, 71.0},
    {"NVIDIA GeForce RTX 4090", 89, PeakPrecision::bf16, 165.2},
    {"NVIDIA GeForce RTX 4090", 89, PeakPrecision::tf32, 82.6},
    {"NVIDIA GeForce RTX 5090", 120, PeakPrecision::fp16, 209.5},
    {"NVIDIA RTX A6000", 86, PeakPrecision::bf16, 154.8},
    {"NVIDIA RTX 6000 Ada Generation", 89, PeakPrecision::bf16, 364.2},
};

TEST(DevicePeakTest, GpusByTheirDeviceNames) {
  for (const Lookup& l : kLookups) {
    std::string reason;
    const std::optional<DevicePeak> peak = device_peak(gpu(l.name, l.compute_capability), l.precision, 0, &reason);
    ASSERT_TRUE(peak.has_value()) << l.name << ": " << reason;
    EXPECT_DOUBLE_EQ(peak->tflops, l.tflops) << l.name << " " << peak_precision_name(l.precision);
  }
}

TEST(DevicePeakTest, TheRowAndSourceAreNamed) {
  const std::optional<DevicePeak> p = device_peak(gpu("NVIDIA H100 80GB HBM3", 90), PeakPrecision::bf16);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->gpu, "H100 SXM");
  EXPECT_NE(p->source.find("H100"), std::string::npos) << p->source;
}

// The reason device_peak gives for `device` having no peak (a failure if it has one).
std::string no_peak_reason(const DeviceDescription& device, PeakPrecision precision) {
  std::string reason;
  EXPECT_FALSE(device_peak(device, precision, 0, &reason).has_value()) << device.name;
  return reason;
}

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

TEST(DevicePeakTest, VariantsWithOtherPeaksAreUnknownRatherThanWrong) {
  for (const char* other : {"NVIDIA A10G", "NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 4090 Laptop GPU",
                            "NVIDIA GeForce RTX 3090 Ti", "Quadro RTX 6000", "Tesla V100-SXM3-32GB"}) {
    expect_has(no_peak_reason(gpu(other, 86), PeakPrecision::bf16), other);
  }
}

TEST(DevicePeakTest, UnknownGpuGivesAReasonNamingItAndTheFlag) {
  const std::string reason = no_peak_reason(gpu("NVIDIA B200", 100), PeakPrecision::bf16);
  for (const char* part : {"'NVIDIA B200'", "sm_100", "--peak-tflops", "bf16"}) expect_has(reason, part);
  // No reason pointer: still nullopt, nothing written anywhere.
  EXPECT_FALSE(device_peak(gpu("NVIDIA B200", 100), PeakPrecision::bf16).has_value());
}

TEST(DevicePeakTest, MigInstancesAreNotTheWholeGpu) {
  expect_has(no_peak_reason(gpu("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 90), PeakPrecision::bf16), "MIG instance");
}

TEST(DevicePeakTest, PrecisionWithoutTensorCoresHasNoPeak) {
  const std::string reason = no_peak_reason(gpu("Tesla V100-SXM2-32GB", 70), PeakPrecision::bf16);
  for (const char* part : {"V100", "no bf16 tensor cores", "sm_70", "--peak-tflops"}) expect_has(reason, part);
  expect_has(no_peak_reason(gpu("Tesla T4", 75), PeakPrecision::tf32), "no tf32 tensor cores");
}

TEST(DevicePeakTest, CpuBackendHasNoPeak) {
  DeviceDescription cpu;
  cpu.name = "CPU (host memory)";
  const std::string reason = no_peak_reason(cpu, PeakPrecision::fp32);
  for (const char* part : {"CPU (host memory)", "--peak-tflops"}) expect_has(reason, part);
}

TEST(DevicePeakTest, OverrideWinsForAnyDevice) {
  for (const DeviceDescription& d : {gpu("NVIDIA H200", 90), gpu("NVIDIA B200", 100), gpu("Tesla T4", 75)}) {
    const std::optional<DevicePeak> p = device_peak(d, PeakPrecision::bf16, 123.5);
    ASSERT_TRUE(p.has_value()) << d.name;
    EXPECT_DOUBLE_EQ(p->tflops, 123.5);
    EXPECT_EQ(p->source, "--peak-tflops");
    EXPECT_EQ(p->gpu, "");
  }
  DeviceDescription cpu;
  cpu.name = "CPU (host memory)";
  ASSERT_TRUE(device_peak(cpu, PeakPrecision::fp32, 2.0).has_value());
  // 0 and negatives are "no override": the table answers.
  EXPECT_DOUBLE_EQ(device_peak(gpu("NVIDIA H200", 90), PeakPrecision::bf16, 0)->tflops, 989.4);
  EXPECT_DOUBLE_EQ(device_peak(gpu("NVIDIA H200", 90), PeakPrecision::bf16, -5)->tflops, 989.4);
}

TEST(PeakPrecisionTest, FromTheTrainingDtype) {
  EXPECT_EQ(*peak_precision_for(DType::f32, false), PeakPrecision::fp32);
  EXPECT_EQ(*peak_precision_for(DType::f32, true), PeakPrecision::tf32);
  EXPECT_EQ(*peak_precision_for(DType::bf16, true), PeakPrecision::bf16);  // tf32 is about fp32 GEMMs
  EXPECT_EQ(*peak_precision_for(DType::f16, false), PeakPrecision::fp16);
  const StatusOr<PeakPrecision> bad = peak_precision_for(DType::i32, false);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), Code::invalid_argument);
  EXPECT_NE(bad.status().message().find("i32"), std::string::npos) << bad.status().message();
  EXPECT_EQ(peak_precision_name(PeakPrecision::tf32), "tf32");
}

}  // namespace
}  // namespace strata
