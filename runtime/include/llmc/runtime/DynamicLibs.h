// Dynamic symbol tables for the NVIDIA libraries the runtime uses.
//
// llmc never links a CUDA library. libcuda, libnvrtc, libcublasLt and libnccl
// are dlopen'ed on first use (modelled on IREE hal/drivers/cuda/
// dynamic_symbols.h); the CUDA headers are included for types only. Each
// library can be pointed at an explicit file with an environment variable:
//   LLMC_LIBCUDA, LLMC_LIBNVRTC, LLMC_LIBCUBLASLT, LLMC_LIBNCCL (and
//   LLMC_LIBCUDNN, CudnnAttention.h);
// else NVRTC, cuBLASLt, NCCL and cuDNN are searched in a CUDA toolkit and in
// the NVIDIA pip wheels (CudaLibraryCandidates below), libcuda in the
// driver's directories.
// Every vendor result code is turned into an absl::Status naming the call
// and the library's error string.
#ifndef LLMC_RUNTIME_DYNAMICLIBS_H
#define LLMC_RUNTIME_DYNAMICLIBS_H

#include <cublasLt.h>
#include <cuda.h>
#include <nccl.h>
#include <nvrtc.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llmc::rt {

/// An open shared library (dlopen handle); closed on destruction.
class DynamicLibrary {
 public:
  /// Opens the first loadable of: the file named by env var `env_var` (if set,
  /// and then only that file), else each of `candidates` in order (bare
  /// sonames go through the normal loader search). `purpose` says what needs
  /// the library, for the error message. Fails with FailedPreconditionError
  /// naming the library, its purpose, the paths tried and `env_var`.
  static absl::StatusOr<std::unique_ptr<DynamicLibrary>> Open(
      const std::string& display_name, const std::string& env_var,
      const std::vector<std::string>& candidates, const std::string& purpose);
  ~DynamicLibrary();
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  /// Looks up `symbol`; NotFoundError naming library and symbol if absent.
  absl::StatusOr<void*> Symbol(const char* symbol) const;
  /// Path that was actually loaded.
  const std::string& path() const { return path_; }

 private:
  DynamicLibrary(void* handle, std::string name, std::string path)
      : handle_(handle), name_(std::move(name)), path_(std::move(path)) {}
  void* handle_;
  std::string name_;
  std::string path_;
};

// Where the NVIDIA libraries are searched. A CUDA toolkit keeps them in
// <toolkit>/lib64; the NVIDIA pip wheels (those torch depends on) in
// <site-packages>/nvidia/<package>/lib: cu13 for CUDA 13's libraries
// (nvidia-cuda-runtime, -cuda-nvrtc, -cublas), nccl and cudnn for
// nvidia-nccl-cu13 and nvidia-cudnn-cu13, and one package per library in the
// CUDA 12 wheels (cuda_runtime, cuda_nvrtc, cublas).

/// The site-packages directory of the Python the build was configured with
/// (sysconfig purelib, recorded by runtime/CMakeLists.txt as
/// LLMC_PYTHON_SITE_PACKAGES); "" when CMake found no Python.
const char* ConfiguredPythonSitePackages();

/// Canonical directories of the CUDA libraries this process has loaded
/// already (e.g. torch's), probed with dlopen(RTLD_NOLOAD) in the order
/// libcudart.so.13, libcublasLt.so.13, libnvrtc.so.13; no duplicates.
std::vector<std::string> LoadedCudaLibraryDirs();

/// Existing <site-packages>/nvidia directories of NVIDIA pip wheels,
/// canonical and without duplicates, in order:
///  1. those holding a library of LoadedCudaLibraryDirs() (its dir/../..);
///  2. the site-packages holding this code (the llmc wheel's layout:
///     llmc/lib/libllmc.so or llmc/bin/llmc-*, so <dir>/../../nvidia);
///  3. $VIRTUAL_ENV, then $CONDA_PREFIX: lib/python3*/site-packages/nvidia;
///  4. ConfiguredPythonSitePackages()/nvidia;
///  5. $HOME/.local/lib/python3*/site-packages/nvidia (pip install --user);
///  6. /usr/local/lib/python3*/{dist,site}-packages/nvidia,
///     /usr/lib/python3*/{dist,site}-packages/nvidia.
std::vector<std::string> NvidiaWheelRoots();

/// The files tried for the NVIDIA library `soname` (libnvrtc.so.13,
/// libcublasLt.so.13, libnccl.so.2, libcudnn.so.9, ...) when its LLMC_LIB*
/// variable is unset, in order, without duplicates:
///  1. the bare soname: the loader's search (a copy already loaded, e.g. by
///     torch; LD_LIBRARY_PATH; the ldconfig cache);
///  2. $CUDNN_HOME and $CUDNN_PATH (libcudnn only), $CUDA_HOME, $CUDA_PATH:
///     each's lib64/ then lib/;
///  3. /usr/local/cuda/lib64/, /usr/local/cuda/lib/;
///  4. /usr/lib/x86_64-linux-gnu/, /usr/lib/aarch64-linux-gnu/, /usr/lib64/;
///  5. each of `loaded_dirs`;
///  6. for each of `wheel_roots`, <root>/<package>/lib/ for the library's
///     wheel packages (cu13 and then the CUDA 12 package, or nccl, cudnn)
///     where that directory exists.
std::vector<std::string> CudaLibraryCandidates(
    const std::string& soname, const std::vector<std::string>& loaded_dirs,
    const std::vector<std::string>& wheel_roots);
/// The same with this process's LoadedCudaLibraryDirs() and
/// NvidiaWheelRoots(); what NVRTC, cuBLASLt, NCCL and cuDNN are loaded from.
std::vector<std::string> CudaLibraryCandidates(const std::string& soname);

// X-macro lists of the entry points we use. Names go through cuda.h's
// versioning macros (cuMemAlloc -> cuMemAlloc_v2, cuGraphInstantiate ->
// cuGraphInstantiateWithFlags, ...) so the dlsym'ed name matches the header's
// prototype.
#define LLMC_CUDA_DRIVER_SYMBOLS(X)                                            \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount)           \
  X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)               \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)  \
  X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuModuleLoadData)                   \
  X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel)                   \
  X(cuFuncSetAttribute) X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo)             \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyHtoDAsync)         \
  X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD8Async)   \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)                  \
  X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize)                      \
  X(cuEventElapsedTime) X(cuEventDestroy) X(cuEventQuery) X(cuStreamQuery)     \
  X(cuStreamWaitEvent) X(cuStreamBeginCapture)                                 \
  X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch)                 \
  X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuGetErrorString)                  \
  X(cuGetErrorName)

// Entry points used when the driver has them (null otherwise; callers fall
// back). cuGraphExecUpdate resolves to cuGraphExecUpdate_v2 (CUDA 12+:
// CUgraphExecUpdateResultInfo*).
#define LLMC_CUDA_DRIVER_OPTIONAL_SYMBOLS(X)                                   \
  X(cuGraphExecUpdate) X(cuStreamIsCapturing) X(cuLaunchKernelEx)

#define LLMC_NVRTC_SYMBOLS(X)                                                  \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram)                 \
  X(nvrtcCompileProgram) X(nvrtcDestroyProgram) X(nvrtcGetProgramLogSize)      \
  X(nvrtcGetProgramLog) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN)                  \
  X(nvrtcGetPTXSize) X(nvrtcGetPTX)

#define LLMC_CUBLASLT_SYMBOLS(X)                                               \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion)                   \
  X(cublasLtGetStatusString) X(cublasLtMatmulDescCreate)                       \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulDescDestroy)               \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutSetAttribute)            \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate)             \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulPreferenceDestroy)   \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

#define LLMC_NCCL_SYMBOLS(X)                                                   \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclAllReduce)    \
  X(ncclAllGather) X(ncclReduceScatter) X(ncclCommDestroy)                     \
  X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclGroupStart)             \
  X(ncclGroupEnd) X(ncclCommInitRankConfig) X(ncclCommAbort)                   \
  X(ncclCommFinalize) X(ncclCommCount) X(ncclCommUserRank) X(ncclGetLastError)

#define LLMC_RT_DECLARE_SYMBOL(name) decltype(&::name) name = nullptr;

/// CUDA driver API (libcuda.so.1).
struct CudaDriver {
  LLMC_CUDA_DRIVER_SYMBOLS(LLMC_RT_DECLARE_SYMBOL)
  LLMC_CUDA_DRIVER_OPTIONAL_SYMBOLS(LLMC_RT_DECLARE_SYMBOL)
  std::unique_ptr<DynamicLibrary> library;

  /// Loads a fresh table (honours LLMC_LIBCUDA now). Does not call cuInit.
  static absl::StatusOr<std::unique_ptr<CudaDriver>> Load();
  /// Process-wide table, loaded once; a failure is remembered.
  static absl::StatusOr<const CudaDriver*> Get();
  /// OK for CUDA_SUCCESS, else a Status "<call> failed: CUDA_ERROR_X (text)".
  /// Out-of-memory maps to ResourceExhausted, no device / no driver to
  /// FailedPrecondition, invalid values to InvalidArgument, others Internal.
  absl::Status Check(CUresult result, const char* call) const;
};

/// NVRTC (libnvrtc.so.13).
struct Nvrtc {
  LLMC_NVRTC_SYMBOLS(LLMC_RT_DECLARE_SYMBOL)
  std::unique_ptr<DynamicLibrary> library;
  static absl::StatusOr<std::unique_ptr<Nvrtc>> Load();
  static absl::StatusOr<const Nvrtc*> Get();
  absl::Status Check(nvrtcResult result, const char* call) const;
};

/// cuBLASLt (libcublasLt.so.13).
struct CublasLt {
  LLMC_CUBLASLT_SYMBOLS(LLMC_RT_DECLARE_SYMBOL)
  std::unique_ptr<DynamicLibrary> library;
  static absl::StatusOr<std::unique_ptr<CublasLt>> Load();
  static absl::StatusOr<const CublasLt*> Get();
  absl::Status Check(cublasStatus_t status, const char* call) const;
};

/// NCCL (libnccl.so.2).
struct Nccl {
  LLMC_NCCL_SYMBOLS(LLMC_RT_DECLARE_SYMBOL)
  std::unique_ptr<DynamicLibrary> library;
  static absl::StatusOr<std::unique_ptr<Nccl>> Load();
  static absl::StatusOr<const Nccl*> Get();
  absl::Status Check(ncclResult_t result, const char* call) const;
};

#undef LLMC_RT_DECLARE_SYMBOL

/// Calls `table.fn(args...)` and converts the result to a Status naming `fn`.
/// Example: LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(*cu, cuInit, 0));
#define LLMC_VENDOR_CALL(table, fn, ...) (table).Check((table).fn(__VA_ARGS__), #fn)

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_DYNAMICLIBS_H
