#include "llmc/runtime/KernelCompiler.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/Hash.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {
namespace {

bool FileExists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

absl::Status MakeDirs(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        return absl::PermissionDeniedError(
            absl::StrCat("cannot create directory ", cur, ": ", strerror(errno)));
    }
    if (i < dir.size()) cur.push_back(dir[i]);
  }
  return absl::OkStatus();
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The first directory that holds CUDA's device headers.
std::string FindCudaInclude() {
  std::vector<std::string> cands;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (!Env(var).empty()) cands.push_back(Env(var) + "/include");
  cands.push_back("/usr/local/cuda/include");
  // NVIDIA pip wheels: site-packages/nvidia/{cuda_runtime,cu13,...}/include.
  std::vector<std::string> prefixes;
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (!Env(var).empty()) prefixes.push_back(Env(var));
  if (!Env("HOME").empty()) prefixes.push_back(Env("HOME") + "/.local");
  prefixes.push_back("/usr/local");
  prefixes.push_back("/usr");
  for (const std::string& prefix : prefixes) {
    for (const char* site : {"site-packages", "dist-packages"}) {
      std::string pattern =
          absl::StrCat(prefix, "/lib/python3*/", site, "/nvidia/*/include");
      glob_t g;
      if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; ++i) cands.push_back(g.gl_pathv[i]);
      }
      ::globfree(&g);
    }
  }
  for (const std::string& c : cands)
    if (FileExists(c + "/cuda_fp16.h") || FileExists(c + "/cuda_runtime.h"))
      return c;
  return "";
}

// Disk entry layout (little endian):
//   [0,8)    magic "LLMCKRN\0"
//   [8,12)   uint32 format version
//   [12,16)  uint32 flags (bit 0: payload is PTX)
//   [16,24)  uint64 payload size
//   [24,56)  SHA-256 of payload
//   [56,120) hex cache key
//   [120,..) payload
constexpr char kMagic[8] = {'L', 'L', 'M', 'C', 'K', 'R', 'N', '\0'};
constexpr uint32_t kDiskFormatVersion = 1;
constexpr size_t kHeaderSize = 120;

std::string EncodeEntry(const CompiledKernel& k) {
  std::string out(kHeaderSize, '\0');
  std::memcpy(&out[0], kMagic, 8);
  uint32_t flags = k.is_ptx ? 1 : 0;
  uint64_t size = k.binary.size();
  std::memcpy(&out[8], &kDiskFormatVersion, 4);
  std::memcpy(&out[12], &flags, 4);
  std::memcpy(&out[16], &size, 8);
  Sha256 h;
  h.Update(k.binary);
  auto digest = h.Finish();
  std::memcpy(&out[24], digest.data(), 32);
  std::memcpy(&out[56], k.key.data(), std::min<size_t>(64, k.key.size()));
  out += k.binary;
  return out;
}

// Returns the reason the entry is invalid, or "" when it is valid.
std::string DecodeEntry(const std::string& data, const std::string& key,
                        CompiledKernel* k) {
  if (data.size() < kHeaderSize) return "truncated header";
  if (std::memcmp(data.data(), kMagic, 8) != 0) return "bad magic";
  uint32_t version, flags;
  uint64_t size;
  std::memcpy(&version, &data[8], 4);
  std::memcpy(&flags, &data[12], 4);
  std::memcpy(&size, &data[16], 8);
  if (version != kDiskFormatVersion) return "format version mismatch";
  if (data.compare(56, 64, key) != 0) return "key mismatch";
  if (data.size() - kHeaderSize != size) return "payload size mismatch";
  k->binary = data.substr(kHeaderSize);
  Sha256 h;
  h.Update(k->binary);
  auto digest = h.Finish();
  if (std::memcmp(digest.data(), &data[24], 32) != 0) return "checksum mismatch";
  k->is_ptx = flags & 1;
  return "";
}

}  // namespace

std::string DefaultCacheDir() {
  if (!Env("LLMC_CACHE_DIR").empty()) return Env("LLMC_CACHE_DIR");
  if (!Env("XDG_CACHE_HOME").empty()) return Env("XDG_CACHE_HOME") + "/llmc";
  if (!Env("HOME").empty()) return Env("HOME") + "/.cache/llmc";
  return "/tmp/llmc-cache";
}

absl::Status AtomicWriteFile(const std::string& path, const std::string& data) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  LLMC_RT_RETURN_IF_ERROR(MakeDirs(dir));
  std::random_device rd;
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", rd(), rd());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", tmp, ": ", strerror(errno)));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string err = strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::DataLossError(absl::StrCat("write to ", tmp, " failed: ", err));
    }
    done += n;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat("fsync/close of ", tmp, " failed"));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = strerror(errno);
    ::unlink(tmp.c_str());
    return absl::DataLossError(
        absl::StrCat("rename ", tmp, " -> ", path, " failed: ", err));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return ss.str();
}

KernelCompiler::KernelCompiler(KernelCompilerOptions options)
    : options_(std::move(options)) {
  cache_dir_ = (options_.cache_dir.empty() ? DefaultCacheDir()
                                            : options_.cache_dir) +
               "/kernels";
  include_dirs_ = options_.include_dirs;
  if (options_.auto_cuda_include) {
    std::string cuda = FindCudaInclude();
    if (!cuda.empty()) include_dirs_.push_back(cuda);
  }
}

absl::StatusOr<int> KernelCompiler::NvrtcVersion() {
  LLMC_RT_ASSIGN_OR_RETURN(const Nvrtc* nv, Nvrtc::Get());
  int major = 0, minor = 0;
  LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(*nv, nvrtcVersion, &major, &minor));
  return major * 1000 + minor * 10;
}

absl::StatusOr<std::string> KernelCompiler::CacheKey(const KernelSource& src) {
  LLMC_RT_ASSIGN_OR_RETURN(int version, NvrtcVersion());
  Sha256 h;
  h.UpdateField("llmc-kernel-v1");
  h.UpdateField(absl::StrCat(version));
  h.UpdateField(src.name);
  h.UpdateField(src.arch);
  h.UpdateField(src.source);
  h.UpdateField(absl::StrCat(src.options.size()));
  for (const auto& o : src.options) h.UpdateField(o);
  h.UpdateField(absl::StrCat(src.headers.size()));
  for (const auto& [name, text] : src.headers) {
    h.UpdateField(name);
    h.UpdateField(text);
  }
  for (const auto& dir : include_dirs_) h.UpdateField(dir);
  auto d = h.Finish();
  return ToHex(d.data(), d.size());
}

std::string KernelCompiler::CachePath(const std::string& key) const {
  return absl::StrCat(cache_dir_, "/", key.substr(0, 2), "/", key, ".bin");
}

absl::StatusOr<CompiledKernel> KernelCompiler::Compile(const KernelSource& src) {
  if (src.name.empty())
    return absl::InvalidArgumentError("kernel source has an empty entry name");
  LLMC_RT_ASSIGN_OR_RETURN(std::string key, CacheKey(src));
  {
    absl::MutexLock lock(&mu_);
    auto it = memory_.find(key);
    if (it != memory_.end()) {
      ++memory_hits_;
      return it->second;
    }
  }
  absl::StatusOr<CompiledKernel> result = absl::NotFoundError("");
  if (options_.use_disk_cache) result = ReadDisk(key, src);
  if (result.ok()) {
    ++disk_hits_;
  } else {
    result = CompileUncached(src, key);
    if (!result.ok()) return result.status();
    ++compiles_;
    if (options_.use_disk_cache) WriteDisk(*result);
  }
  absl::MutexLock lock(&mu_);
  memory_.emplace(key, *result);
  return result;
}

absl::StatusOr<CompiledKernel> KernelCompiler::ReadDisk(
    const std::string& key, const KernelSource& src) {
  std::string path = CachePath(key);
  auto data = ReadFile(path);
  if (!data.ok()) return data.status();
  CompiledKernel k;
  std::string why = DecodeEntry(*data, key, &k);
  if (!why.empty()) {
    ++corrupt_;
    ::unlink(path.c_str());
    return absl::DataLossError(absl::StrCat("cache entry ", path, ": ", why));
  }
  k.name = src.name;
  k.arch = src.arch;
  k.key = key;
  return k;
}

void KernelCompiler::WriteDisk(const CompiledKernel& kernel) {
  // Best effort: a read-only or full cache directory must not fail compiles.
  (void)AtomicWriteFile(CachePath(kernel.key), EncodeEntry(kernel));
}

absl::StatusOr<CompiledKernel> KernelCompiler::CompileUncached(
    const KernelSource& src, const std::string& key) {
  LLMC_RT_ASSIGN_OR_RETURN(const Nvrtc* nv, Nvrtc::Get());
  bool want_ptx = absl::StartsWith(src.arch, "compute_");
  if (!want_ptx && !absl::StartsWith(src.arch, "sm_"))
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", src.name, "': arch must be sm_XX[a] or compute_XX, got '",
        src.arch, "'"));
  std::vector<const char*> header_texts, header_names;
  for (const auto& [name, text] : src.headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(text.c_str());
  }
  nvrtcProgram prog = nullptr;
  std::string file = src.name + ".cu";
  LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(
      *nv, nvrtcCreateProgram, &prog, src.source.c_str(), file.c_str(),
      static_cast<int>(header_names.size()), header_texts.data(),
      header_names.data()));
  struct Destroy {
    const Nvrtc* nv;
    nvrtcProgram* p;
    ~Destroy() { nv->nvrtcDestroyProgram(p); }
  } destroy{nv, &prog};

  std::vector<std::string> opts = {"-std=c++17",
                                   "--gpu-architecture=" + src.arch,
                                   "-default-device"};
  for (const auto& dir : include_dirs_) opts.push_back("-I" + dir);
  for (const auto& o : src.options) opts.push_back(o);
  std::vector<const char*> copts;
  for (const auto& o : opts) copts.push_back(o.c_str());
  nvrtcResult rc = nv->nvrtcCompileProgram(prog, static_cast<int>(copts.size()),
                                           copts.data());
  size_t log_size = 0;
  std::string log;
  if (nv->nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS &&
      log_size > 1) {
    log.resize(log_size);
    nv->nvrtcGetProgramLog(prog, log.data());
    log.resize(log_size - 1);
  }
  if (rc != NVRTC_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NVRTC failed to compile kernel '", src.name, "' for ", src.arch, " (",
        nv->nvrtcGetErrorString(rc), "):\n", log));
  }
  CompiledKernel k{src.name, src.arch, "", want_ptx, key};
  size_t size = 0;
  if (want_ptx) {
    LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(*nv, nvrtcGetPTXSize, prog, &size));
    k.binary.resize(size);
    LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(*nv, nvrtcGetPTX, prog, k.binary.data()));
    while (!k.binary.empty() && k.binary.back() == '\0') k.binary.pop_back();
  } else {
    LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(*nv, nvrtcGetCUBINSize, prog, &size));
    k.binary.resize(size);
    LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(*nv, nvrtcGetCUBIN, prog, k.binary.data()));
  }
  std::string needle = want_ptx ? ".entry " + src.name + "("
                                : std::string(1, '\0') + src.name + '\0';
  if (k.binary.find(needle) == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", src.name, "' compiled but its entry symbol is missing; "
        "declare it extern \"C\" __global__"));
  }
  return k;
}

absl::StatusOr<std::vector<CompiledKernel>> KernelCompiler::CompileAll(
    const std::vector<KernelSource>& sources) {
  std::vector<absl::StatusOr<CompiledKernel>> results(
      sources.size(), absl::UnknownError("not compiled"));
  int threads = options_.max_threads > 0
                    ? options_.max_threads
                    : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<int>(threads, static_cast<int>(sources.size()));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < sources.size(); i = next++)
      results[i] = Compile(sources[i]);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  std::vector<CompiledKernel> out;
  out.reserve(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    if (!results[i].ok())
      return Annotate(results[i].status(),
                      absl::StrCat("kernel '", sources[i].name, "'"));
    out.push_back(*std::move(results[i]));
  }
  return out;
}

void KernelCompiler::ClearMemoryCache() {
  absl::MutexLock lock(&mu_);
  memory_.clear();
}

KernelCompilerStats KernelCompiler::stats() const {
  return {memory_hits_.load(), disk_hits_.load(), compiles_.load(),
          corrupt_.load()};
}

}  // namespace llmc::rt
