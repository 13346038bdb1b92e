//===- EmuSupport.cpp - run generated kernels on the CPU emulator ---------===//
#include "EmuSupport.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <regex>

namespace llmc::test {

std::string HostCompiler() {
  if (const char *c = std::getenv("LLMC_EMU_CXX")) return c;
  return "c++";
}

bool HaveCompiler() {
  static const bool ok =
      std::system((HostCompiler() + " --version > /dev/null 2>&1").c_str()) == 0;
  return ok;
}

void *BuildEmu(const cuda::KernelCode &k, const std::string &stub) {
  const std::string marker = "// ===== end of llmc preamble =====\n";
  std::string body = k.source.substr(k.source.find(marker) + marker.size());
  const size_t ptx = body.find("// ---- PTX wrappers (sm_80+) ----");
  if (ptx != std::string::npos) {
    const size_t end = body.find("extern \"C\"", ptx);
    body = body.substr(0, ptx) + "LLMC_EMU_PTX_WRAPPERS\n" + body.substr(end);
  }
  body = std::regex_replace(body, std::regex(R"(extern __shared__ __align__\(16\) (\w+) (\w+)\[\];)"),
                            "$1* $2 = reinterpret_cast<$1*>(emu::dyn_smem);");
  char dir_tmpl[] = "/tmp/llmc_emu_XXXXXX";
  const std::string dir = mkdtemp(dir_tmpl);
  const std::string src = dir + "/" + k.name + ".cpp", so = dir + "/" + k.name + ".so";
  std::ofstream(src) << "#include \"" << LLMC_TEST_SOURCE_DIR << "/emu/CudaEmu.h\"\n"
                     << body << "\n"
                     << std::regex_replace(stub, std::regex("KERNEL"), k.name);
  const std::string cmd =
      HostCompiler() + " -std=c++17 -O1 -w -shared -fPIC -pthread -o " + so + " " + src;
  const bool built = std::system(cmd.c_str()) == 0;
  void *h = built ? dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
  const char *why = built && !h ? dlerror() : nullptr;
  // The loaded library stays mapped after its file is gone: nothing of the
  // build is left in /tmp (every test run used to leave a directory).
  std::remove(src.c_str());
  std::remove(so.c_str());
  rmdir(dir.c_str());
  if (!built) {
    ADD_FAILURE() << "emulator build failed: " << cmd;
    return nullptr;
  }
  if (!h) {
    ADD_FAILURE() << why;
    return nullptr;
  }
  return dlsym(h, "emu_entry");
}

Dim3 G(const cuda::LaunchDims &d) { return {d.grid[0], d.grid[1], d.grid[2]}; }
Dim3 B(const cuda::LaunchDims &d) { return {d.block[0], d.block[1], d.block[2]}; }

std::vector<float> Randn(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto &x : v) x = nd(rng);
  return v;
}

} // namespace llmc::test
