// Test support for the kernels/cuda GEMM tests: a GemmContext with its own cuBLAS and cuBLASLt
// handles, plan cache and workspaces, sized by the test (a small product workspace makes the
// tiling of accumulating GEMMs run at small shapes; no cuBLASLt exercises the biased-forward
// fallback). Header-only; compiled only with STRATA_HAVE_CUDA. Not the runtime's owner
// (runtime/cuda/cuda_compute_ops is).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>

#include "kernels/cuda/gemm.cuh"

namespace strata::kernels::cuda::testing {

struct GemmTestOptions {
  size_t product_floats = kGemmProductFloats;
  bool use_lt = true;  // false: ctx.lt = null, the biased forward takes the product-tile path
};

class TestGemmContext {
 public:
  explicit TestGemmContext(GemmTestOptions options = {}) {
    EXPECT_EQ(cublasCreate(&ctx_.cublas), CUBLAS_STATUS_SUCCESS);
    if (options.use_lt) {
      EXPECT_EQ(cublasLtCreate(&ctx_.lt), CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(cudaMalloc(&ctx_.lt_workspace, kGemmLtWorkspaceBytes), cudaSuccess);
      ctx_.lt_workspace_bytes = kGemmLtWorkspaceBytes;
      plans_ = std::make_unique<LtPlanCache>();
      ctx_.plans = plans_.get();
    }
    EXPECT_EQ(cudaMalloc(&ctx_.product, options.product_floats * sizeof(float)), cudaSuccess);
    ctx_.product_floats = options.product_floats;
  }
  TestGemmContext(const TestGemmContext&) = delete;
  TestGemmContext& operator=(const TestGemmContext&) = delete;
  ~TestGemmContext() {
    cudaDeviceSynchronize();
    plans_.reset();
    if (ctx_.lt != nullptr) cublasLtDestroy(ctx_.lt);
    if (ctx_.cublas != nullptr) cublasDestroy(ctx_.cublas);
    cudaFree(ctx_.lt_workspace);
    cudaFree(ctx_.product);
  }
  const GemmContext& ctx() const { return ctx_; }
  cublasHandle_t cublas() const { return ctx_.cublas; }

 private:
  GemmContext ctx_;
  std::unique_ptr<LtPlanCache> plans_;
};

}  // namespace strata::kernels::cuda::testing
