#include "llmc/runtime/DynamicLibs.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {

absl::StatusOr<std::unique_ptr<DynamicLibrary>> DynamicLibrary::Open(
    const std::string& display_name, const std::string& env_var,
    const std::vector<std::string>& candidates, const std::string& purpose) {
  std::vector<std::string> tried;
  std::vector<std::string> paths;
  const char* env = std::getenv(env_var.c_str());
  if (env && *env) {
    paths.push_back(env);
  } else {
    paths = candidates;
  }
  std::string last_error;
  for (const std::string& p : paths) {
    dlerror();
    void* handle = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      return std::unique_ptr<DynamicLibrary>(
          new DynamicLibrary(handle, display_name, p));
    }
    const char* err = dlerror();
    last_error = err ? err : "unknown dlopen error";
    tried.push_back(p);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot load ", display_name, " (needed for ", purpose, "); tried ",
      absl::StrJoin(tried, ", "), " (last error: ", last_error, "); set ",
      env_var, "=/path/to/", display_name, env && *env ? " to a valid file" : "",
      " to choose the library explicitly"));
}

DynamicLibrary::~DynamicLibrary() {
  // Vendor libraries register atexit handlers and TLS destructors; unloading
  // them before process exit is a classic source of crashes, so we keep them.
}

absl::StatusOr<void*> DynamicLibrary::Symbol(const char* symbol) const {
  dlerror();
  void* sym = dlsym(handle_, symbol);
  if (!sym) {
    return absl::NotFoundError(absl::StrCat("symbol ", symbol, " not found in ",
                                            name_, " (", path_,
                                            "); the library is too old?"));
  }
  return sym;
}

namespace {

#define LLMC_STR2(x) #x
#define LLMC_STR(x) LLMC_STR2(x)
// LLMC_STR expands the cuda.h version macros first, so cuMemAlloc resolves to
// "cuMemAlloc_v2".
#define LLMC_RT_RESOLVE(name)                                                  \
  {                                                                            \
    LLMC_RT_ASSIGN_OR_RETURN(void* sym, t->library->Symbol(LLMC_STR(name)));   \
    t->name = reinterpret_cast<decltype(t->name)>(sym);                        \
  }

// An entry point the caller can do without: null when absent.
#define LLMC_RT_RESOLVE_OPTIONAL(name)                                         \
  {                                                                            \
    absl::StatusOr<void*> sym = t->library->Symbol(LLMC_STR(name));            \
    t->name = sym.ok() ? reinterpret_cast<decltype(t->name)>(*sym) : nullptr;  \
  }

std::vector<std::string> CudaToolkitCandidates(const std::string& soname) {
  std::vector<std::string> out = {soname};
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* home = std::getenv(var); home && *home) {
      out.push_back(absl::StrCat(home, "/lib64/", soname));
      out.push_back(absl::StrCat(home, "/lib/", soname));
    }
  }
  out.push_back("/usr/local/cuda/lib64/" + soname);
  out.push_back("/usr/local/cuda/lib/" + soname);
  return out;
}

template <typename T>
absl::StatusOr<const T*> GetSingleton() {
  static absl::StatusOr<std::unique_ptr<T>>* loaded =
      new absl::StatusOr<std::unique_ptr<T>>(T::Load());
  if (!loaded->ok()) return loaded->status();
  return loaded->value().get();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaDriver>> CudaDriver::Load() {
  auto t = std::make_unique<CudaDriver>();
  LLMC_RT_ASSIGN_OR_RETURN(
      t->library,
      DynamicLibrary::Open("libcuda.so.1", "LLMC_LIBCUDA",
                           {"libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                            "/usr/local/nvidia/lib64/libcuda.so.1"},
                           "running kernels on the GPU (NVIDIA driver)"));
  LLMC_CUDA_DRIVER_SYMBOLS(LLMC_RT_RESOLVE)
  LLMC_CUDA_DRIVER_OPTIONAL_SYMBOLS(LLMC_RT_RESOLVE_OPTIONAL)
  return t;
}
absl::StatusOr<const CudaDriver*> CudaDriver::Get() {
  return GetSingleton<CudaDriver>();
}

absl::Status CudaDriver::Check(CUresult result, const char* call) const {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName) cuGetErrorName(result, &name);
  if (cuGetErrorString) cuGetErrorString(result, &text);
  std::string msg = absl::StrCat(call, " failed: ",
                                 name ? name : absl::StrCat("CUresult ", result),
                                 " (", text ? text : "no description", ")");
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(msg);
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
      return absl::FailedPreconditionError(msg);
    case CUDA_ERROR_INVALID_VALUE:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::StatusOr<std::unique_ptr<Nvrtc>> Nvrtc::Load() {
  auto t = std::make_unique<Nvrtc>();
  LLMC_RT_ASSIGN_OR_RETURN(
      t->library, DynamicLibrary::Open("libnvrtc.so.13", "LLMC_LIBNVRTC",
                                       CudaToolkitCandidates("libnvrtc.so.13"),
                                       "compiling generated CUDA kernels (NVRTC)"));
  LLMC_NVRTC_SYMBOLS(LLMC_RT_RESOLVE)
  return t;
}
absl::StatusOr<const Nvrtc*> Nvrtc::Get() { return GetSingleton<Nvrtc>(); }

absl::Status Nvrtc::Check(nvrtcResult result, const char* call) const {
  if (result == NVRTC_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(call, " failed: ", nvrtcGetErrorString(result));
  if (result == NVRTC_ERROR_OUT_OF_MEMORY)
    return absl::ResourceExhaustedError(msg);
  if (result == NVRTC_ERROR_COMPILATION || result == NVRTC_ERROR_INVALID_OPTION)
    return absl::InvalidArgumentError(msg);
  return absl::InternalError(msg);
}

absl::StatusOr<std::unique_ptr<CublasLt>> CublasLt::Load() {
  auto t = std::make_unique<CublasLt>();
  LLMC_RT_ASSIGN_OR_RETURN(
      t->library,
      DynamicLibrary::Open("libcublasLt.so.13", "LLMC_LIBCUBLASLT",
                           CudaToolkitCandidates("libcublasLt.so.13"),
                           "matrix multiplications (cuBLASLt)"));
  LLMC_CUBLASLT_SYMBOLS(LLMC_RT_RESOLVE)
  return t;
}
absl::StatusOr<const CublasLt*> CublasLt::Get() {
  return GetSingleton<CublasLt>();
}

absl::Status CublasLt::Check(cublasStatus_t status, const char* call) const {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(call, " failed: ",
                                 cublasLtGetStatusString(status), " (",
                                 static_cast<int>(status), ")");
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(msg);
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::InvalidArgumentError(msg);
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::UnimplementedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::StatusOr<std::unique_ptr<Nccl>> Nccl::Load() {
  auto t = std::make_unique<Nccl>();
  LLMC_RT_ASSIGN_OR_RETURN(
      t->library,
      DynamicLibrary::Open("libnccl.so.2", "LLMC_LIBNCCL",
                           CudaToolkitCandidates("libnccl.so.2"),
                           "multi-GPU collectives (NCCL)"));
  LLMC_NCCL_SYMBOLS(LLMC_RT_RESOLVE)
  return t;
}
absl::StatusOr<const Nccl*> Nccl::Get() { return GetSingleton<Nccl>(); }

absl::Status Nccl::Check(ncclResult_t result, const char* call) const {
  if (result == ncclSuccess) return absl::OkStatus();
  // ncclGetLastError(NULL) holds the calling thread's detailed message
  // ("NCCL WARN ..." text), far more useful than the result code alone.
  const char* detail = ncclGetLastError ? ncclGetLastError(nullptr) : nullptr;
  std::string msg =
      absl::StrCat(call, " failed: ", ncclGetErrorString(result),
                   detail && *detail ? absl::StrCat(" (", detail, ")") : "");
  if (result == ncclInvalidArgument || result == ncclInvalidUsage)
    return absl::InvalidArgumentError(msg);
  return absl::InternalError(msg);
}

}  // namespace llmc::rt
