//===- NvrtcHelper.cpp - minimal dlopen'ed NVRTC (test-only) --------------===//
#include "NvrtcHelper.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace llmc::test {
namespace {
using nvrtcProgram = void *;
using CreateFn = int (*)(nvrtcProgram *, const char *, const char *, int,
                         const char *const *, const char *const *);
using CompileFn = int (*)(nvrtcProgram, int, const char *const *);
using SizeFn = int (*)(nvrtcProgram, size_t *);
using GetFn = int (*)(nvrtcProgram, char *);
using DestroyFn = int (*)(nvrtcProgram *);

struct Nvrtc {
  void *handle = nullptr;
  CreateFn create = nullptr;
  CompileFn compile = nullptr;
  SizeFn log_size = nullptr;
  GetFn get_log = nullptr;
  SizeFn cubin_size = nullptr;
  SizeFn ptx_size = nullptr;
  GetFn get_ptx = nullptr;
  DestroyFn destroy = nullptr;
};

const Nvrtc &Get() {
  static Nvrtc n;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char *home = std::getenv("CUDA_HOME"))
      candidates.push_back(std::string(home) + "/lib64/libnvrtc.so.13");
    candidates.push_back(std::string(LLMC_TEST_CUDA_HOME) + "/lib64/libnvrtc.so.13");
    candidates.push_back("libnvrtc.so.13");
    for (const auto &c : candidates) {
      n.handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (n.handle) break;
    }
    if (!n.handle) return;
    n.create = reinterpret_cast<CreateFn>(dlsym(n.handle, "nvrtcCreateProgram"));
    n.compile = reinterpret_cast<CompileFn>(dlsym(n.handle, "nvrtcCompileProgram"));
    n.log_size = reinterpret_cast<SizeFn>(dlsym(n.handle, "nvrtcGetProgramLogSize"));
    n.get_log = reinterpret_cast<GetFn>(dlsym(n.handle, "nvrtcGetProgramLog"));
    n.cubin_size = reinterpret_cast<SizeFn>(dlsym(n.handle, "nvrtcGetCUBINSize"));
    n.ptx_size = reinterpret_cast<SizeFn>(dlsym(n.handle, "nvrtcGetPTXSize"));
    n.get_ptx = reinterpret_cast<GetFn>(dlsym(n.handle, "nvrtcGetPTX"));
    n.destroy = reinterpret_cast<DestroyFn>(dlsym(n.handle, "nvrtcDestroyProgram"));
    if (!n.create || !n.compile || !n.log_size || !n.get_log || !n.cubin_size || !n.ptx_size ||
        !n.get_ptx || !n.destroy)
      n.handle = nullptr;
  });
  return n;
}

bool NvrtcCompileImpl(const std::string &source, const std::string &name,
                      const std::string &arch, const std::vector<std::string> &extra_options,
                      std::string *log, size_t *cubin_size, std::string *ptx);
} // namespace

bool NvrtcAvailable() { return Get().handle != nullptr; }

bool NvrtcCompile(const std::string &source, const std::string &name,
                  const std::string &arch, std::string *log,
                  size_t *cubin_size) {
  return NvrtcCompileWithOptions(source, name, arch, {}, log, cubin_size);
}

bool NvrtcCompileWithOptions(const std::string &source, const std::string &name,
                             const std::string &arch,
                             const std::vector<std::string> &extra_options,
                             std::string *log, size_t *cubin_size) {
  return NvrtcCompileImpl(source, name, arch, extra_options, log, cubin_size, nullptr);
}

bool NvrtcPtx(const std::string &source, const std::string &name, const std::string &arch,
              std::string *ptx, std::string *log) {
  return NvrtcCompileImpl(source, name, arch, {}, log, nullptr, ptx);
}

namespace {
bool NvrtcCompileImpl(const std::string &source, const std::string &name,
                      const std::string &arch, const std::vector<std::string> &extra_options,
                      std::string *log, size_t *cubin_size, std::string *ptx) {
  const Nvrtc &n = Get();
  if (!n.handle) {
    if (log) *log = "libnvrtc not found";
    return false;
  }
  nvrtcProgram prog = nullptr;
  if (n.create(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr) != 0) {
    if (log) *log = "nvrtcCreateProgram failed";
    return false;
  }
  const std::string arch_opt = "--gpu-architecture=" + arch;
  std::vector<const char *> opts = {arch_opt.c_str(), "-std=c++17"};
  for (const auto &o : extra_options) opts.push_back(o.c_str());
  int rc = n.compile(prog, static_cast<int>(opts.size()), opts.data());
  size_t ls = 0;
  n.log_size(prog, &ls);
  std::string l(ls, '\0');
  if (ls) n.get_log(prog, l.data());
  if (log) *log = l;
  if (rc == 0 && cubin_size) n.cubin_size(prog, cubin_size);
  if (rc == 0 && ptx) {
    size_t ps = 0;
    rc = n.ptx_size(prog, &ps);
    ptx->assign(ps, '\0');
    if (rc == 0 && ps) rc = n.get_ptx(prog, ptx->data());
  }
  n.destroy(&prog);
  return rc == 0;
}
} // namespace
} // namespace llmc::test
