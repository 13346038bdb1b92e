#include "llmc/runtime/DynamicLibs.h"
#include "../ScopedEnv.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace llmc::rt {
namespace {

using llmc::test::ScopedEnv;
namespace fs = std::filesystem;

// A fresh directory under the test's temp dir, canonical (as the wheel
// search returns its directories).
std::string FreshDir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) /
                 (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return fs::canonical(dir).string();
}

// Makes <prefix>/lib/<python>/site-packages/nvidia/<package>/lib for each
// package; returns the nvidia directory.
std::string MakeWheelTree(const std::string& prefix, const std::string& python,
                          const std::vector<std::string>& packages) {
  std::string root = prefix + "/lib/" + python + "/site-packages/nvidia";
  fs::create_directories(root);
  for (const std::string& p : packages) fs::create_directories(root + "/" + p + "/lib");
  return root;
}

ptrdiff_t IndexOf(const std::vector<std::string>& v, const std::string& s) {
  auto it = std::find(v.begin(), v.end(), s);
  return it == v.end() ? -1 : it - v.begin();
}

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

TEST(CudaLibraryCandidatesTest, ExactOrder) {
  std::string tmp = FreshDir("llmc_candidates");
  // A CUDA 13 wheel tree (cu13/) that also has a CUDA 12 style package, and
  // one with only the CUDA 12 style package; `other` has neither.
  std::string a = MakeWheelTree(tmp + "/a", "python3.11", {"cu13", "cuda_nvrtc", "cudnn"});
  std::string b = MakeWheelTree(tmp + "/b", "python3.12", {"cuda_nvrtc"});
  std::string other = MakeWheelTree(tmp + "/c", "python3.12", {"nccl"});
  ScopedEnv home("CUDA_HOME", "/opt/cuda-x");
  ScopedEnv path("CUDA_PATH", "/opt/cuda-x");  // same as CUDA_HOME: not repeated
  ScopedEnv cudnn_home("CUDNN_HOME", "/opt/cudnn-x");
  ScopedEnv cudnn_path("CUDNN_PATH", nullptr);
  const std::string so = "libnvrtc.so.13";
  std::vector<std::string> expected = {
      so,
      "/opt/cuda-x/lib64/" + so,
      "/opt/cuda-x/lib/" + so,
      "/usr/local/cuda/lib64/" + so,
      "/usr/local/cuda/lib/" + so,
      "/usr/lib/x86_64-linux-gnu/" + so,
      "/usr/lib/aarch64-linux-gnu/" + so,
      "/usr/lib64/" + so,
      "/opt/loaded/lib/" + so,
      a + "/cu13/lib/" + so,
      a + "/cuda_nvrtc/lib/" + so,
      b + "/cuda_nvrtc/lib/" + so,
  };
  EXPECT_EQ(CudaLibraryCandidates(so, {"/opt/loaded/lib"}, {a, b, other}), expected);

  const std::string dnn = "libcudnn.so.9";
  std::vector<std::string> expected_dnn = {
      dnn,
      "/opt/cudnn-x/lib64/" + dnn,
      "/opt/cudnn-x/lib/" + dnn,
      "/opt/cuda-x/lib64/" + dnn,
      "/opt/cuda-x/lib/" + dnn,
      "/usr/local/cuda/lib64/" + dnn,
      "/usr/local/cuda/lib/" + dnn,
      "/usr/lib/x86_64-linux-gnu/" + dnn,
      "/usr/lib/aarch64-linux-gnu/" + dnn,
      "/usr/lib64/" + dnn,
      a + "/cudnn/lib/" + dnn,
  };
  EXPECT_EQ(CudaLibraryCandidates(dnn, {}, {a, b, other}), expected_dnn);

  std::vector<std::string> nccl = CudaLibraryCandidates("libnccl.so.2", {}, {a, b, other});
  ASSERT_FALSE(nccl.empty());
  EXPECT_EQ(nccl.back(), other + "/nccl/lib/libnccl.so.2");
  EXPECT_EQ(IndexOf(nccl, "/opt/cudnn-x/lib64/libnccl.so.2"), -1);  // CUDNN_HOME is cuDNN's
  fs::remove_all(tmp);
}

TEST(CudaLibraryCandidatesTest, WheelRootsOrder) {
  std::string tmp = FreshDir("llmc_wheel_roots");
  std::string venv = MakeWheelTree(tmp + "/venv", "python3.11", {"cu13"});
  std::string conda = MakeWheelTree(tmp + "/conda", "python3.12", {"cu13"});
  std::string user = MakeWheelTree(tmp + "/home/.local", "python3.10", {"cu13"});
  ScopedEnv v("VIRTUAL_ENV", (tmp + "/venv").c_str());
  ScopedEnv c("CONDA_PREFIX", (tmp + "/conda").c_str());
  ScopedEnv h("HOME", (tmp + "/home").c_str());
  std::vector<std::string> roots = NvidiaWheelRoots();
  for (const std::string& r : roots) EXPECT_EQ(std::count(roots.begin(), roots.end(), r), 1) << r;
  // Roots of already loaded libraries come first; in a fresh process (ctest
  // runs each test alone) none is loaded and the virtual env is first.
  ptrdiff_t iv = IndexOf(roots, venv), ic = IndexOf(roots, conda), iu = IndexOf(roots, user);
  ASSERT_GE(iv, 0);
  if (LoadedCudaLibraryDirs().empty()) {
    EXPECT_EQ(iv, 0);
  }
  EXPECT_EQ(ic, iv + 1);
  EXPECT_GT(iu, ic);
  // The configuring Python's site-packages sits between the conda env and
  // the user site (unless a loaded library put it first already).
  std::string site = ConfiguredPythonSitePackages();
  std::error_code ec;
  if (!site.empty() && fs::is_directory(site + "/nvidia", ec)) {
    ptrdiff_t is = IndexOf(roots, fs::canonical(site + "/nvidia").string());
    ASSERT_GE(is, 0);
    if (is > iv) {
      EXPECT_EQ(is, ic + 1);
    }
    EXPECT_LT(is, iu);
  }
  fs::remove_all(tmp);
}

// The torch wheel's NVRTC (nvidia-cuda-nvrtc, in the site-packages of the
// Python the build was configured with) is among the candidates when no
// toolkit is configured, and it loads without a GPU. This machine's loader
// also finds a toolkit's libnvrtc by soname, so the toolkit entries are
// dropped to stand for a machine without one.
TEST(CudaLibraryCandidatesTest, FindsTheWheelNvrtcWithoutAToolkit) {
  std::string site = ConfiguredPythonSitePackages();
  std::error_code ec;
  std::string wheel_lib = site + "/nvidia/cu13/lib/libnvrtc.so.13";
  if (site.empty() || !fs::exists(wheel_lib, ec))
    GTEST_SKIP() << "no nvidia-cuda-nvrtc wheel in the configured Python's site-packages ("
                 << site << ")";
  wheel_lib = fs::canonical(wheel_lib).string();
  ScopedEnv unset("LLMC_LIBNVRTC", nullptr);
  ScopedEnv home("CUDA_HOME", "/nonexistent/cuda");
  ScopedEnv path("CUDA_PATH", nullptr);
  ScopedEnv v("VIRTUAL_ENV", nullptr);
  ScopedEnv c("CONDA_PREFIX", nullptr);
  void* toolkit_copy = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_NOLOAD);
  if (toolkit_copy) dlclose(toolkit_copy);

  std::vector<std::string> all = CudaLibraryCandidates("libnvrtc.so.13");
  EXPECT_GE(IndexOf(all, wheel_lib), 0);
  std::vector<std::string> no_toolkit;
  for (const std::string& p : all)
    if (p.find('/') != std::string::npos && p.rfind("/nonexistent/", 0) != 0 &&
        p.rfind("/usr/local/cuda", 0) != 0 && p.rfind("/usr/lib", 0) != 0)
      no_toolkit.push_back(p);
  ASSERT_FALSE(no_toolkit.empty());
  if (!toolkit_copy) {
    EXPECT_EQ(no_toolkit.front(), wheel_lib);  // nothing loaded yet: first wheel root
  }
  auto lib = DynamicLibrary::Open("libnvrtc.so.13", "LLMC_LIBNVRTC", no_toolkit,
                                  "the wheel search test");
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_EQ((*lib)->path(), no_toolkit.front());
  auto version = (*lib)->Symbol("nvrtcVersion");
  ASSERT_TRUE(version.ok()) << version.status();
  int major = 0, minor = 0;
  ASSERT_EQ(reinterpret_cast<decltype(&::nvrtcVersion)>(*version)(&major, &minor), NVRTC_SUCCESS);
  EXPECT_EQ(major, 13);

  // Once that copy is loaded (and no other was before it), it is what the
  // other libraries are searched next to: cuDNN from the same nvidia/ tree.
  if (!toolkit_copy) {
    std::string dir = wheel_lib.substr(0, wheel_lib.rfind('/'));
    std::vector<std::string> loaded = LoadedCudaLibraryDirs();
    EXPECT_NE(std::find(loaded.begin(), loaded.end(), dir), loaded.end());
    std::string root = fs::path(dir).parent_path().parent_path().string();
    std::vector<std::string> roots = NvidiaWheelRoots();
    ASSERT_FALSE(roots.empty());
    EXPECT_EQ(roots.front(), root);
    if (fs::is_directory(root + "/cudnn/lib", ec)) {
      EXPECT_GE(IndexOf(CudaLibraryCandidates("libcudnn.so.9"),
                        root + "/cudnn/lib/libcudnn.so.9"), 0);
    }
  }
}

TEST(CudaLibraryCandidatesTest, ErrorNamesEveryPathTried) {
  ScopedEnv unset("LLMC_LIBNVRTC", nullptr);
  auto lib = DynamicLibrary::Open("libnvrtc.so.13", "LLMC_LIBNVRTC",
                                  {"/nonexistent/a/libnvrtc.so.13", "/nonexistent/b/libnvrtc.so.13"},
                                  "the error test");
  ASSERT_FALSE(lib.ok());
  std::string msg(lib.status().message());
  EXPECT_NE(msg.find("/nonexistent/a/libnvrtc.so.13, /nonexistent/b/libnvrtc.so.13"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("set LLMC_LIBNVRTC="), std::string::npos) << msg;
}

}  // namespace
}  // namespace llmc::rt
