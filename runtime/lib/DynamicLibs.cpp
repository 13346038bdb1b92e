#include "llmc/runtime/DynamicLibs.h"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/match.h"
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

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The canonical form of an existing path, else "".
std::string Canonical(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (!real) return "";
  std::string out = real;
  std::free(real);
  return out;
}

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void AppendUnique(const std::string& s, std::vector<std::string>* out) {
  if (!s.empty() && std::find(out->begin(), out->end(), s) == out->end())
    out->push_back(s);
}

// Adds the canonical form of every existing match of `pattern` (sorted).
void AddGlob(const std::string& pattern, std::vector<std::string>* out) {
  glob_t g;
  std::memset(&g, 0, sizeof(g));
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i)
      AppendUnique(Canonical(g.gl_pathv[i]), out);
  ::globfree(&g);
}

// A library's packages in <site-packages>/nvidia: CUDA 13's wheels put all
// toolkit libraries in cu13/, CUDA 12's one package per library; NCCL and
// cuDNN have their own.
std::vector<std::string> WheelPackages(const std::string& soname) {
  if (absl::StartsWith(soname, "libnvrtc")) return {"cu13", "cuda_nvrtc"};
  if (absl::StartsWith(soname, "libcublas")) return {"cu13", "cublas"};
  if (absl::StartsWith(soname, "libcudart")) return {"cu13", "cuda_runtime"};
  if (absl::StartsWith(soname, "libnccl")) return {"nccl"};
  if (absl::StartsWith(soname, "libcudnn")) return {"cudnn"};
  return {"cu13"};
}

}  // namespace

const char* ConfiguredPythonSitePackages() {
#ifdef LLMC_PYTHON_SITE_PACKAGES
  return LLMC_PYTHON_SITE_PACKAGES;
#else
  return "";
#endif
}

std::vector<std::string> LoadedCudaLibraryDirs() {
  std::vector<std::string> dirs;
  for (const char* so : {"libcudart.so.13", "libcublasLt.so.13", "libnvrtc.so.13"}) {
    // RTLD_NOLOAD: only a copy that is loaded already; the handle adds a
    // reference that dlclose drops again.
    void* handle = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
    if (!handle) continue;
    struct link_map* map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name)
      AppendUnique(Dirname(Canonical(map->l_name)), &dirs);
    dlclose(handle);
  }
  return dirs;
}

std::vector<std::string> NvidiaWheelRoots() {
  std::vector<std::string> roots;
  auto add_root = [&](const std::string& dir) {
    if (!dir.empty() && IsDirectory(dir)) AppendUnique(Canonical(dir), &roots);
  };
  // 1. <site-packages>/nvidia/<package>/lib of an already loaded library.
  for (const std::string& dir : LoadedCudaLibraryDirs()) {
    std::string root = Dirname(Dirname(dir));
    if (absl::EndsWith(dir, "/lib") && absl::EndsWith(root, "/nvidia")) add_root(root);
  }
  // 2. The llmc wheel's site-packages: this code is in llmc/lib/libllmc.so
  //    or a tool, llmc/bin/llmc-*.
  Dl_info self;
  if (dladdr(reinterpret_cast<void*>(&NvidiaWheelRoots), &self) != 0 && self.dli_fname) {
    std::string dir = Dirname(Canonical(self.dli_fname));
    if (!dir.empty()) add_root(Dirname(Dirname(dir)) + "/nvidia");
  }
  // 3. The active virtual or conda environment.
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* env = std::getenv(var); env && *env)
      AddGlob(absl::StrCat(env, "/lib/python3*/site-packages/nvidia"), &roots);
  // 4. The Python the build was configured with.
  if (*ConfiguredPythonSitePackages())
    add_root(absl::StrCat(ConfiguredPythonSitePackages(), "/nvidia"));
  // 5. pip install --user; 6. the system's Python.
  if (const char* home = std::getenv("HOME"); home && *home)
    AddGlob(absl::StrCat(home, "/.local/lib/python3*/site-packages/nvidia"), &roots);
  for (const char* prefix : {"/usr/local/lib", "/usr/lib"})
    for (const char* site : {"dist-packages", "site-packages"})
      AddGlob(absl::StrCat(prefix, "/python3*/", site, "/nvidia"), &roots);
  return roots;
}

std::vector<std::string> CudaLibraryCandidates(
    const std::string& soname, const std::vector<std::string>& loaded_dirs,
    const std::vector<std::string>& wheel_roots) {
  std::vector<std::string> out;
  AppendUnique(soname, &out);
  std::vector<const char*> homes = {"CUDA_HOME", "CUDA_PATH"};
  if (absl::StartsWith(soname, "libcudnn"))
    homes.insert(homes.begin(), {"CUDNN_HOME", "CUDNN_PATH"});
  for (const char* var : homes)
    if (const char* home = std::getenv(var); home && *home) {
      AppendUnique(absl::StrCat(home, "/lib64/", soname), &out);
      AppendUnique(absl::StrCat(home, "/lib/", soname), &out);
    }
  for (const char* dir : {"/usr/local/cuda/lib64", "/usr/local/cuda/lib",
                          "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                          "/usr/lib64"})
    AppendUnique(absl::StrCat(dir, "/", soname), &out);
  for (const std::string& dir : loaded_dirs)
    AppendUnique(absl::StrCat(dir, "/", soname), &out);
  for (const std::string& root : wheel_roots)
    for (const std::string& package : WheelPackages(soname)) {
      std::string dir = absl::StrCat(root, "/", package, "/lib");
      if (IsDirectory(dir)) AppendUnique(absl::StrCat(dir, "/", soname), &out);
    }
  return out;
}

std::vector<std::string> CudaLibraryCandidates(const std::string& soname) {
  return CudaLibraryCandidates(soname, LoadedCudaLibraryDirs(), NvidiaWheelRoots());
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
                                       CudaLibraryCandidates("libnvrtc.so.13"),
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
                           CudaLibraryCandidates("libcublasLt.so.13"),
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
                           CudaLibraryCandidates("libnccl.so.2"),
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
