// KernelCompiler: CUDA C++ source -> cubin (or PTX) through NVRTC, with an
// in-memory cache, a persistent on-disk cache and parallel batch compilation.
#ifndef LLMC_RUNTIME_KERNELCOMPILER_H
#define LLMC_RUNTIME_KERNELCOMPILER_H

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace llmc::rt {

/// One kernel to compile.
struct KernelSource {
  /// Entry symbol; the source must declare it `extern "C" __global__`.
  std::string name;
  /// CUDA C++ source text.
  std::string source;
  /// Extra NVRTC options (e.g. "-use_fast_math"), appended after ours.
  std::vector<std::string> options;
  /// "sm_90", "sm_90a", "sm_80": cubin. "compute_90" etc.: PTX.
  std::string arch = "sm_90";
  /// Headers handed to NVRTC in memory: include name -> contents. They take
  /// precedence over files on disk and are part of the cache key.
  std::map<std::string, std::string> headers;
};

/// Result of a compilation.
struct CompiledKernel {
  std::string name;
  std::string arch;
  /// Cubin (ELF) bytes, or NUL-free PTX text when `is_ptx`.
  std::string binary;
  bool is_ptx = false;
  /// Hex SHA-256 cache key.
  std::string key;
};

struct KernelCompilerOptions {
  /// On-disk cache directory; empty = $LLMC_CACHE_DIR, else
  /// $XDG_CACHE_HOME/llmc, else ~/.cache/llmc (a "kernels" subdir is used).
  std::string cache_dir;
  bool use_disk_cache = true;
  /// Threads for CompileAll; 0 = std::thread::hardware_concurrency().
  int max_threads = 0;
  /// Extra -I directories (searched before the auto-detected CUDA include).
  std::vector<std::string> include_dirs;
  /// Search $CUDA_HOME, $CUDA_PATH, /usr/local/cuda and the NVIDIA pip
  /// wheels (NvidiaWheelRoots() in DynamicLibs.h) for headers.
  bool auto_cuda_include = true;
};

struct KernelCompilerStats {
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t compiles = 0;
  /// Disk entries found corrupt or truncated, or not a regular file (a
  /// directory, a FIFO, a symbolic link), removed and recompiled.
  int64_t corrupt_entries = 0;
};

/// Thread-safe. Errors: InvalidArgument for a compile error (message holds the
/// NVRTC log), FailedPrecondition if libnvrtc cannot be loaded. Disk-cache I/O
/// failures never fail a compilation (the cache is best effort).
class KernelCompiler {
 public:
  explicit KernelCompiler(KernelCompilerOptions options = {});

  absl::StatusOr<CompiledKernel> Compile(const KernelSource& source);
  /// Compiles independent kernels in parallel; results are in input order.
  /// Every kernel is attempted; the first failure (by index) is returned,
  /// prefixed with the kernel name.
  absl::StatusOr<std::vector<CompiledKernel>> CompileAll(
      const std::vector<KernelSource>& sources);

  /// Cache key (hex SHA-256 of source, headers, options, arch, NVRTC
  /// version and include dirs).
  absl::StatusOr<std::string> CacheKey(const KernelSource& source);
  /// Path of the disk entry for `key` (may not exist).
  std::string CachePath(const std::string& key) const;
  const std::string& cache_dir() const { return cache_dir_; }

  void ClearMemoryCache();
  KernelCompilerStats stats() const;
  /// NVRTC version as major*1000+minor*10 (e.g. 13000); error if no NVRTC.
  static absl::StatusOr<int> NvrtcVersion();
  /// -I directories that will be passed to NVRTC.
  const std::vector<std::string>& include_dirs() const { return include_dirs_; }

 private:
  absl::StatusOr<CompiledKernel> CompileUncached(const KernelSource& source,
                                                 const std::string& key);
  absl::StatusOr<CompiledKernel> ReadDisk(const std::string& key,
                                          const KernelSource& source);
  void WriteDisk(const CompiledKernel& kernel);

  KernelCompilerOptions options_;
  std::string cache_dir_;
  std::vector<std::string> include_dirs_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, CompiledKernel> memory_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> memory_hits_{0}, disk_hits_{0}, compiles_{0},
      corrupt_{0};
};

/// Whether `arch` is one NVRTC takes: sm_<NN> (cubin) or compute_<NN> (PTX)
/// with two to four digits and no leading zero, optionally with an 'a'
/// suffix from 90 on or an 'f' suffix from 100 on ("sm_90a", "sm_100f",
/// "compute_90").
bool IsValidArch(const std::string& arch);

/// What IsValidArch takes, for error messages ("expected " + kArchSpelling).
inline constexpr const char* kArchSpelling =
    "sm_<NN> or compute_<NN>, optionally with an 'a' suffix from sm_90 on or an "
    "'f' suffix from sm_100 on (sm_90a, sm_80, sm_100f, compute_90)";

/// Default cache root ($LLMC_CACHE_DIR, $XDG_CACHE_HOME/llmc, ~/.cache/llmc).
std::string DefaultCacheDir();

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_KERNELCOMPILER_H
