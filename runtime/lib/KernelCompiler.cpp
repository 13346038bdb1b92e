#include "llmc/runtime/KernelCompiler.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/FileIO.h"
#include "llmc/runtime/Hash.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {
namespace {

bool FileExists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
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
  // NVIDIA pip wheels: <site-packages>/nvidia/{cu13,cuda_runtime,...}/include
  // in the same environments the libraries are searched in (DynamicLibs.h).
  for (const std::string& root : NvidiaWheelRoots()) {
    glob_t g;
    if (::glob((root + "/*/include").c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) cands.push_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
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

// Clears the path of a damaged disk entry so that the recompiled kernel can
// be written there: a file, FIFO, device node or symbolic link is unlinked
// (the name only, never what a link points to), an empty directory removed,
// and a non-empty directory renamed aside (to PATH.damaged.<pid>.<random>)
// rather than deleted: its contents are not llmc's.
void RemoveDamagedEntry(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    ::unlink(path.c_str());
    return;
  }
  if (::rmdir(path.c_str()) == 0) return;
  std::random_device rd;
  std::string aside = absl::StrCat(path, ".damaged.", ::getpid(), ".", rd());
  (void)::rename(path.c_str(), aside.c_str());
}

}  // namespace

bool IsValidArch(const std::string& arch) {
  size_t digits;
  if (absl::StartsWith(arch, "sm_")) digits = 3;
  else if (absl::StartsWith(arch, "compute_")) digits = 8;
  else return false;
  size_t i = digits;
  while (i < arch.size() && arch[i] >= '0' && arch[i] <= '9') ++i;
  // Two to four digits without a leading zero: every CUDA arch has at least
  // two (sm_80, sm_100); "sm_9" and "sm_090" are none, and NVRTC would
  // refuse them late.
  if (i - digits < 2 || i - digits > 4 || arch[digits] == '0') return false;
  if (i == arch.size()) return true;
  // Arch-specific ('a') targets exist from sm_90, family ('f') ones from
  // sm_100: there is no sm_80a or sm_90f.
  const int cc = std::stoi(arch.substr(digits, i - digits));
  return i + 1 == arch.size() &&
         ((arch[i] == 'a' && cc >= 90) || (arch[i] == 'f' && cc >= 100));
}

std::string DefaultCacheDir() {
  if (!Env("LLMC_CACHE_DIR").empty()) return Env("LLMC_CACHE_DIR");
  if (!Env("XDG_CACHE_HOME").empty()) return Env("XDG_CACHE_HOME") + "/llmc";
  if (!Env("HOME").empty()) return Env("HOME") + "/.cache/llmc";
  return "/tmp/llmc-cache";
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
  ReadOptions ro;
  ro.what = "kernel cache entry";
  // llmc writes entries as regular files: a symbolic link (say to
  // /dev/zero) is damage like any other, never followed.
  ro.follow_symlinks = false;
  auto data = ReadFile(path, ro);
  if (absl::IsNotFound(data.status())) return data.status();
  CompiledKernel k;
  std::string why = data.ok() ? DecodeEntry(*data, key, &k)
                              : std::string(data.status().message());
  if (!why.empty()) {
    ++corrupt_;
    // The damage may be the shard directory (kernels/<2 hex digits>) being
    // something else, e.g. a file: then the entry path cannot exist.
    std::string shard = path.substr(0, path.rfind('/'));
    struct stat st;
    if (::lstat(shard.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
      RemoveDamagedEntry(shard);
    else
      RemoveDamagedEntry(path);
    return absl::DataLossError(absl::StrCat("cache entry ", path, ": ", why));
  }
  k.name = src.name;
  k.arch = src.arch;
  k.key = key;
  return k;
}

void KernelCompiler::WriteDisk(const CompiledKernel& kernel) {
  // Best effort: a read-only or full cache directory must not fail compiles.
  // The cache directory is llmc's own, so missing levels are created.
  WriteOptions wo;
  wo.create_parent_dirs = true;
  (void)AtomicWriteFile(CachePath(kernel.key), EncodeEntry(kernel), wo);
}

absl::StatusOr<CompiledKernel> KernelCompiler::CompileUncached(
    const KernelSource& src, const std::string& key) {
  LLMC_RT_ASSIGN_OR_RETURN(const Nvrtc* nv, Nvrtc::Get());
  bool want_ptx = absl::StartsWith(src.arch, "compute_");
  if (!IsValidArch(src.arch))
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", src.name, "': arch must be ", kArchSpelling, ", got '", src.arch,
        "'"));
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
