#include "llmc/runtime/DynamicLibs.h"
#include "../ScopedEnv.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace llmc::rt {
namespace {

using llmc::test::ScopedEnv;

TEST(DynamicLibsTest, MissingDriverNamesLibraryAndEnvVar) {
  ScopedEnv env("LLMC_LIBCUDA", "/nonexistent.so");
  auto driver = CudaDriver::Load();
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().code(), absl::StatusCode::kFailedPrecondition);
  std::string msg(driver.status().message());
  EXPECT_NE(msg.find("libcuda.so.1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("LLMC_LIBCUDA"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/nonexistent.so"), std::string::npos) << msg;
}

TEST(DynamicLibsTest, MissingNcclNamesEnvVar) {
  ScopedEnv env("LLMC_LIBNCCL", "/nonexistent/libnccl.so.2");
  auto nccl = Nccl::Load();
  ASSERT_FALSE(nccl.ok());
  EXPECT_NE(nccl.status().message().find("LLMC_LIBNCCL"), std::string::npos);
  EXPECT_NE(nccl.status().message().find("collectives"), std::string::npos);
}

TEST(DynamicLibsTest, NvrtcLoadsAndReportsVersion) {
  auto nvrtc = Nvrtc::Load();
  ASSERT_TRUE(nvrtc.ok()) << nvrtc.status();
  int major = 0, minor = 0;
  ASSERT_TRUE(LLMC_VENDOR_CALL(**nvrtc, nvrtcVersion, &major, &minor).ok());
  EXPECT_GE(major, 12);
}

TEST(DynamicLibsTest, NvrtcErrorBecomesStatusNamingCall) {
  auto nvrtc = Nvrtc::Load();
  ASSERT_TRUE(nvrtc.ok()) << nvrtc.status();
  absl::Status s = (*nvrtc)->Check(NVRTC_ERROR_INVALID_OPTION, "nvrtcCompileProgram");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("nvrtcCompileProgram"), std::string::npos);
  EXPECT_NE(s.message().find("INVALID_OPTION"), std::string::npos) << s;
}

TEST(DynamicLibsTest, CublasLtLoadsWhenPresent) {
  auto lt = CublasLt::Load();
  if (!lt.ok()) GTEST_SKIP() << lt.status();
  EXPECT_GT((*lt)->cublasLtGetVersion(), 0u);
  absl::Status s = (*lt)->Check(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("cublasLtMatmul"), std::string::npos);
}

}  // namespace
}  // namespace llmc::rt
