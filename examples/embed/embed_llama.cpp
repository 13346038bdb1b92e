//===- embed_llama.cpp - embedding llmc: JIT-compile and run a LLaMA block -===//
//
//   llmc-embed-example [BLOCK.mlir] [SEQ]
//
// Compiles the LLaMA-2-7B decoder block (default: the installed
// share/llmc/examples/llama2_7b_block.mlir) for sequence length SEQ (default
// 128) through the C++ API (llmc/Compiler.h), then runs it on GPU 0 with
// random bf16 inputs: prints a checksum of the output and the median time of
// 20 runs. Without a GPU it stops after compiling ("compiled only").
//
//===----------------------------------------------------------------------===//

#include "llmc/Compiler.h"
#include "llmc/runtime/Session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace rt = llmc::rt;

namespace {

void check(const absl::Status &s, const char *what) {
  if (s.ok())
    return;
  std::fprintf(stderr, "error: %s: %s\n", what, std::string(s.message()).c_str());
  std::exit(1);
}

uint16_t toBf16(float f) { // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

float fromBf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Uniform values in [-scale, scale) as bf16 (xorshift: fast for 200M values).
std::vector<uint16_t> randomBf16(int64_t n, float scale, uint64_t seed) {
  std::vector<uint16_t> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    float u = float(x >> 40) / float(1 << 24); // [0, 1)
    v[i] = toBf16((2 * u - 1) * scale);
  }
  return v;
}

std::string defaultBlockPath() {
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe");
  return (exe.parent_path() / "../share/llmc/examples/llama2_7b_block.mlir").string();
}

} // namespace

int main(int argc, char **argv) {
  std::string path = argc > 1 ? argv[1] : defaultBlockPath();
  int64_t seq = argc > 2 ? std::atoll(argv[2]) : 128;
  std::ifstream file(path);
  if (!file) {
    std::fprintf(stderr, "error: cannot read '%s'\nusage: %s [BLOCK.mlir] [SEQ]\n",
                 path.c_str(), argv[0]);
    return 1;
  }
  std::stringstream text;
  text << file.rdbuf();

  // 1. Compile: parse, bind seq, lower, NVRTC (cached on disk across runs).
  auto compiler = llmc::Compiler::Create();
  check(compiler.status(), "compiler");
  auto t0 = std::chrono::steady_clock::now();
  auto exe = (*compiler)->Compile(text.str(), /*function=*/"", {{"seq", seq}});
  check(exe.status(), "compile");
  double compileMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - t0).count();
  std::printf("compiled %s for seq=%lld (%s): %zu kernels, %zu GEMMs in %.0f ms\n",
              path.c_str(), (long long)seq, (*compiler)->arch().c_str(),
              (*exe)->kernels.size(), (*exe)->gemms.size(), compileMs);

  // 2. Load on GPU 0.
  auto device = rt::Device::Open(0);
  if (!device.ok()) {
    std::printf("%s\ncompiled only\n", std::string(device.status().message()).c_str());
    return 0;
  }
  auto session = rt::Session::Load(*device, *exe);
  check(session.status(), "session");

  // 3. Random bf16 inputs (weights scaled by 1/sqrt(fan-in)), outputs.
  std::vector<rt::DeviceTensor> inputs, outputs;
  for (const rt::TensorSig &sig : (*exe)->inputs) {
    if (sig.dtype != rt::DType::bf16) {
      std::fprintf(stderr, "error: this example feeds bf16 inputs only\n");
      return 1;
    }
    float scale = sig.shape.size() >= 2 ? 1.f / std::sqrt(float(sig.shape.back())) : 1.f;
    auto host = randomBf16(sig.NumElements(), scale, inputs.size() + 1);
    auto dptr = (*device)->Alloc(sig.Bytes());
    check(dptr.status(), "alloc");
    check((*device)->CopyToDevice(*dptr, host.data(), sig.Bytes()), "upload");
    inputs.push_back({*dptr, sig.dtype, sig.shape});
  }
  for (const rt::TensorSig &sig : (*exe)->outputs) {
    auto dptr = (*device)->Alloc(sig.Bytes());
    check(dptr.status(), "alloc");
    outputs.push_back({*dptr, sig.dtype, sig.shape});
  }
  auto stream = (*device)->CreateStream();
  check(stream.status(), "stream");

  // 4. Run once and checksum the output.
  check((*session)->Run(inputs, outputs, *stream), "run");
  check((*device)->SynchronizeStream(*stream), "run");
  const rt::TensorSig &out = (*exe)->outputs[0];
  std::vector<uint16_t> result(out.NumElements());
  check((*device)->CopyToHost(result.data(), outputs[0].dptr, out.Bytes()), "download");
  double sum = 0;
  for (uint16_t h : result)
    sum += fromBf16(h);
  std::printf("output %s[%zu dims]: checksum %.6e\n", rt::DTypeName(out.dtype),
              out.shape.size(), sum);

  // 5. Median of 20 runs (the first run captured the CUDA graph).
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    auto start = std::chrono::steady_clock::now();
    check((*session)->Run(inputs, outputs, *stream), "run");
    check((*device)->SynchronizeStream(*stream), "run");
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("median of 20 runs: %.3f ms\n", ms[ms.size() / 2]);

  for (auto &t : inputs)
    (void)(*device)->Free(t.dptr);
  for (auto &t : outputs)
    (void)(*device)->Free(t.dptr);
  (void)(*device)->DestroyStream(*stream);
  return 0;
}
