// The Trainer (model/train/trainer.h) on the CUDA backend: the golden 10-step AdamW loss trajectory
// (tests/data/golden, PyTorch in float64) in fp32 (TF32 off), bf16, and fp16 with loss scale
// 1024, through the same fixture as the CPU trainer tests (trainer_fixture.h). Each test prints
// its worst error. Label gpu: every test skips, with the reason, without a CUDA device.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/model/trainer_fixture.h"

namespace strata::model {
namespace {

using testing::check_golden_trajectory;
using testing::CudaParamTest;
using testing::Golden;
using testing::golden_rule;
using testing::make_run;
using testing::open_golden;
using testing::precision_case_name;
using testing::PrecisionCase;
using testing::test_backend;
using testing::tiny_models_in;
using testing::TrainRun;

// Trajectory tolerances, relative per loss.
// - fp32: 5e-6. The CPU's 1e-6 (trainer_test.cc) sat 12x over its measured 8e-8 / 5e-8. On CUDA
//   every forward and backward sums in other orders (cuBLAS, the kernels' warp reductions) in the
//   same fp32, ~1e-7 per op as on the CPU, and Adam stays on the CPU; ten updates at lr 1e-3 can
//   pass a one-ulp difference in a gradient on through Adam's normalisation (an element whose
//   gradient is near round-off moves by +-lr either way), which perturbs the loss only at second
//   order. 5e-6 allows that drift to be several times the CPU's and still fails a wrong rule:
//   beta2 0.999 instead of 0.95 moves the second loss by 6e-5 (12x the bound) and the last by 1e-3.
// - bf16 5e-4, fp16 1e-4: the CPU's (trainer_precision_test.cc; measured there bf16 6.5e-5 /
//   1.7e-4, fp16 1.2e-5 / 1.9e-5). The CUDA ops form every value in fp32 from the same 16-bit
//   inputs and round it as the CPU does, so almost every rounded tensor equals the CPU's
//   (model_golden_gpu_test.cc argues it), and the masters and Adam are the same CPU code.
double trajectory_tolerance(DType dtype) {
  return dtype == DType::bf16 ? 5e-4 : dtype == DType::f16 ? 1e-4 : 5e-6;
}

class CudaTrainerGoldenTest : public CudaParamTest<PrecisionCase> {};

TEST_P(CudaTrainerGoldenTest, TenAdamWStepsFollowTheTorchTrajectory) {
  const PrecisionCase& c = GetParam();
  const double tolerance = trajectory_tolerance(c.dtype);
  const Golden g = open_golden(c.preset);
  TrainRun r = make_run(c.preset, g, golden_rule(c.dtype), /*seed=*/0, test_backend(BackendKind::cuda));
  ASSERT_EQ(r.backend->kind(), BackendKind::cuda);
  EXPECT_EQ(r.pinned->kind(), PinnedKind::cuda_host);
  const double worst = check_golden_trajectory(r, g, tolerance);
  if (c.dtype == DType::f16) {
    ASSERT_NE(r.trainer->loss_scaler(), nullptr);
    EXPECT_EQ(r.trainer->loss_scaler()->state().skipped_steps, 0u) << "1024 must not overflow on this problem";
  }
  std::printf("cuda %s %s: worst relative trajectory error %.3g (tolerance %.0e)\n", c.preset.c_str(),
              std::string(dtype_name(c.dtype)).c_str(), worst, tolerance);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaTrainerGoldenTest,
                         ::testing::ValuesIn(tiny_models_in({DType::f32, DType::bf16, DType::f16})),
                         precision_case_name);

}  // namespace
}  // namespace strata::model
