// Backend factory and names, and the CUDA queries on a machine without a usable GPU: make_backend
// asks for cuda and gets `unavailable` with the reason cuda_available() gives.
#include "runtime/backend.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(Backend, NamesOfKindsAndStreams) {
  EXPECT_EQ(backend_kind_name(BackendKind::cpu), "cpu");
  EXPECT_EQ(backend_kind_name(BackendKind::cuda), "cuda");
  EXPECT_EQ(stream_name(Stream::compute), "compute");
  EXPECT_EQ(stream_name(Stream::h2d), "h2d");
  EXPECT_EQ(stream_name(Stream::d2h), "d2h");
  EXPECT_EQ(stream_name(Stream::comm), "comm");
}

TEST(Backend, MakesACpuBackendWithTheBudgetAsked) {
  BackendOptions options;
  options.memory_budget = 32ull << 20;
  StatusOr<std::unique_ptr<Backend>> b = make_backend(options);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ((*b)->kind(), BackendKind::cpu);
  EXPECT_EQ((*b)->memory().capacity, 32ull << 20);
}

TEST(Backend, CudaWithoutAUsableGpuIsUnavailableWithTheReason) {
  std::string why;
  if (cuda_available(&why)) GTEST_SKIP() << "a CUDA device is visible; backend_gpu_test covers it";
  ASSERT_FALSE(why.empty());
  BackendOptions options;
  options.kind = BackendKind::cuda;
  StatusOr<std::unique_ptr<Backend>> b = make_backend(options);
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), Code::unavailable);
  EXPECT_NE(b.status().message().find(why), std::string::npos) << b.status().to_string();
  EXPECT_NE(b.status().message().find("cpu backend"), std::string::npos) << b.status().to_string();

  std::string list_why;
  EXPECT_TRUE(list_cuda_devices(&list_why).empty());
  EXPECT_EQ(list_why, why);
}

TEST(Backend, CudaLibraryVersionsMatchTheBuild) {
  auto versions = cuda_library_versions();
#ifdef STRATA_HAVE_CUDA
  ASSERT_EQ(versions.size(), 4u);
  EXPECT_EQ(versions[0].first, "CUDA runtime");
  EXPECT_NE(versions[0].second.find('.'), std::string::npos) << versions[0].second;
  EXPECT_EQ(versions[1].first, "CUDA driver");
  EXPECT_EQ(versions[2].first, "cuBLAS");
  EXPECT_EQ(versions[3].first, "NCCL");
  EXPECT_NE(versions[3].second, "unknown");
  std::string why;
  if (!cuda_available(&why) && why.find("no CUDA driver") != std::string::npos) {
    EXPECT_EQ(versions[1].second, "none");
  }
#else
  EXPECT_TRUE(versions.empty());
  std::string why;
  EXPECT_FALSE(cuda_available(&why));
  EXPECT_NE(why.find("built without CUDA"), std::string::npos) << why;
#endif
}

}  // namespace
}  // namespace strata
