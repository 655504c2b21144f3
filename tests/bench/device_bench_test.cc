// Tests of `strata bench device`'s pieces: the model's GEMM shapes (against model/net/flops.h's count),
// the option checks, and one small real run on the CPU backend (every GEMM checked and timed in
// fp32, bf16 and fp16, TF32 skipped with the reason, the copy rate) with its JSON shape.
#include "bench/device_bench.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "model/net/flops.h"

namespace strata::bench {
namespace {

TEST(DeviceBenchShapes, Gpt2MergesTheC2CGemmsAndMatchesTheFlopCount) {
  StatusOr<model::ModelConfig> m = model::model_preset("gpt2-124m");
  ASSERT_TRUE(m.is_ok());
  const std::vector<GemmShape> s = model_gemm_shapes(*m, 1024);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].name, "q, k, v, attn proj");
  EXPECT_EQ(s[0].N, 1024);
  EXPECT_EQ(s[0].C, 768);
  EXPECT_EQ(s[0].OC, 768);
  EXPECT_EQ(s[0].count, 48);
  EXPECT_TRUE(s[0].bias);
  EXPECT_EQ(s[1].name, "mlp in");
  EXPECT_EQ(s[1].OC, 3072);
  EXPECT_EQ(s[2].name, "mlp out");
  EXPECT_EQ(s[2].C, 3072);
  EXPECT_EQ(s[2].OC, 768);
  EXPECT_EQ(s[3].name, "head");
  EXPECT_EQ(s[3].OC, 50257);
  EXPECT_EQ(s[3].count, 1);
  EXPECT_FALSE(s[3].bias);
  double flops = 0;
  for (const GemmShape& g : s) flops += g.flops() * static_cast<double>(g.count);
  EXPECT_DOUBLE_EQ(flops, static_cast<double>(model::token_flops(*m, 1024).matmul) * 1024);
}

TEST(DeviceBenchShapes, LlamaHasGqaKvAndTheFusedGateUp) {
  StatusOr<model::ModelConfig> m = model::model_preset("llama-1b");
  ASSERT_TRUE(m.is_ok());
  const std::vector<GemmShape> s = model_gemm_shapes(*m, 64);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0].name, "q, attn proj");
  EXPECT_EQ(s[0].count, 2 * m->n_layer);
  EXPECT_EQ(s[1].name, "k, v");
  EXPECT_EQ(s[1].OC, m->kv_dim());
  EXPECT_EQ(s[1].count, 2 * m->n_layer);
  EXPECT_FALSE(s[1].bias);
  EXPECT_EQ(s[2].name, "mlp in");
  EXPECT_EQ(s[2].OC, 2 * m->ffn_hidden);
  EXPECT_EQ(s[4].name, "head");
  EXPECT_EQ(s[4].OC, m->vocab);
  double flops = 0;
  for (const GemmShape& g : s) flops += g.flops() * static_cast<double>(g.count);
  EXPECT_DOUBLE_EQ(flops, static_cast<double>(model::token_flops(*m, 64).matmul) * 64);
}

TEST(DeviceBench, RefusesBadOptions) {
  DeviceBenchOptions o;
  o.preset = "gpt2-9000";
  StatusOr<DeviceBenchReport> r = run_device_bench(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_NE(r.status().message().find("gpt2-124m"), std::string::npos) << "should list the presets: "
                                                                         << r.status().message();
  o = DeviceBenchOptions{};
  o.repeat = 0;
  EXPECT_EQ(run_device_bench(o).status().code(), Code::invalid_argument);
  o = DeviceBenchOptions{};
  o.copy_bytes = 100;
  EXPECT_EQ(run_device_bench(o).status().code(), Code::invalid_argument);
  o = DeviceBenchOptions{};
  o.precisions.clear();
  EXPECT_EQ(run_device_bench(o).status().code(), Code::invalid_argument);
}

TEST(DeviceBench, SmallCpuRunChecksTimesAndSkipsTf32) {
  DeviceBenchOptions o;
  o.preset = "gpt2-tiny";
  o.micro_batch = 2;
  o.seq = 16;
  o.square = 64;
  o.copy_bytes = 1 << 20;
  o.repeat = 2;
  StatusOr<DeviceBenchReport> r = run_device_bench(o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->backend, "cpu");
  EXPECT_EQ(r->model, "gpt2-tiny");
  EXPECT_EQ(r->micro_batch * r->seq, 32);
  ASSERT_EQ(r->gemms.size(), 3u * 5u);  // fp32, bf16, fp16 x (4 model shapes + square)
  for (const GemmResult& g : r->gemms) {
    EXPECT_NE(g.precision, PeakPrecision::tf32);
    EXPECT_EQ(g.ops_per_run, 1);  // the CPU default: one op per run
    EXPECT_GT(g.tflops.median, 0.0) << g.shape.name;
    EXPECT_LE(g.tflops.min, g.tflops.max);
    EXPECT_LT(g.tflops.max, 100.0) << "100 TFLOP/s on a CPU is a timing bug";
    EXPECT_LE(g.max_error, g.precision == PeakPrecision::fp32 ? 1e-5 : 8e-3) << g.shape.name;
  }
  EXPECT_EQ(r->gemms.back().shape.name, "square");
  EXPECT_EQ(r->gemms.back().shape.N, 64);
  ASSERT_EQ(r->precisions.size(), 4u);
  EXPECT_EQ(r->precisions[1].precision, PeakPrecision::tf32);
  EXPECT_FALSE(r->precisions[1].ran);
  EXPECT_NE(r->precisions[1].skipped.find("CPU backend"), std::string::npos);
  for (const PrecisionSummary& s : r->precisions) {
    if (!s.ran) continue;
    ASSERT_TRUE(s.model_tflops.has_value());
    ASSERT_TRUE(s.square_tflops.has_value());
    EXPECT_GT(*s.model_tflops, 0.0);
    EXPECT_FALSE(s.peak.has_value());  // no peak for a CPU
    EXPECT_FALSE(s.no_peak.empty());
  }
  EXPECT_EQ(r->copy_bytes, 1u << 20);
  EXPECT_GT(r->copy_gbps.median, 0.0);

  nlohmann::json j = nlohmann::json::parse(device_bench_json(*r));
  for (const char* key : {"backend", "device", "model", "micro_batch", "seq", "repeat", "gemm_path", "gemms",
                          "precisions", "copy", "notes"})
    EXPECT_TRUE(j.contains(key)) << key;
  ASSERT_EQ(j["gemms"].size(), 15u);
  for (const auto& g : j["gemms"])
    for (const char* key : {"name", "N", "C", "OC", "count", "precision", "ops_per_run", "tflops", "min_tflops",
                            "max_tflops", "max_error"})
      EXPECT_TRUE(g.contains(key)) << key;
  ASSERT_EQ(j["precisions"].size(), 4u);
  EXPECT_EQ(j["precisions"][1]["precision"], "tf32");
  EXPECT_FALSE(j["precisions"][1]["ran"].get<bool>());
  EXPECT_TRUE(j["precisions"][0]["peak_tflops"].is_null());
  EXPECT_GT(j["precisions"][0]["model_tflops"].get<double>(), 0.0);
  EXPECT_GT(j["copy"]["gbps"].get<double>(), 0.0);
}

TEST(DeviceBench, APeakOverrideGivesAFraction) {
  DeviceBenchOptions o;
  o.preset = "llama-tiny";
  o.micro_batch = 1;
  o.seq = 8;
  o.square = -1;  // none
  o.copy_bytes = 64 << 10;
  o.repeat = 1;
  o.precisions = {PeakPrecision::fp32};
  o.peak_tflops_override = 1.0;
  StatusOr<DeviceBenchReport> r = run_device_bench(o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->precisions.size(), 1u);
  ASSERT_TRUE(r->precisions[0].peak.has_value());
  EXPECT_EQ(r->precisions[0].peak->tflops, 1.0);
  EXPECT_FALSE(r->precisions[0].square_tflops.has_value());
  for (const GemmResult& g : r->gemms) EXPECT_NE(g.shape.name, "square");
  nlohmann::json j = nlohmann::json::parse(device_bench_json(*r));
  EXPECT_GT(j["precisions"][0]["model_fraction_of_peak"].get<double>(), 0.0);
}

}  // namespace
}  // namespace strata::bench
