//===- GemvTest.cpp - decode GEMV kernels (single, multi-output, SwiGLU) ---===//
//
// * GemvEmu.*: EmitGemv / EmitMultiGemv / EmitSwiGluGemv run on the CPU
//   emulator (emu/CudaEmu.h) against a float64 CPU reference on fresh random
//   inputs (m 1/3/8, k 64/1000/4096, n_i 1/7/1031/4096, bf16/f16 inputs,
//   f32/f16/bf16 outputs, with and without bias), and the fused kernels
//   against the single GEMV (and, for SwiGLU, the elementwise kernel's
//   rounding chain) bit for bit: fusion does not change a single result.
// * GemvKernels.CompileWithoutSpills: NVRTC + ptxas -v for sm_90a and sm_80,
//   0 spill bytes.
// Skips (with a reason) when no host compiler or no libnvrtc is found.
//
//===----------------------------------------------------------------------===//

#include "GeneratorStatus.h"
#include "CpuReference.h"
#include "EmuSupport.h"
#include "NvrtcHelper.h"
#include "llmc/Target/CUDA/KernelLibrary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <regex>
#include <sstream>

using namespace llmc::cuda;
using namespace llmc::test;
using llmc::ref::FromBf16;
using llmc::ref::FromF16;
using llmc::ref::ToBf16;
using llmc::ref::ToF16;

namespace {

// ---- host storage of bf16 / f16 / f32 values ----
size_t Size(ScalarType t) { return t == ScalarType::f32 ? 4 : 2; }
float Round(ScalarType t, float v) {
  if (t == ScalarType::bf16) return FromBf16(ToBf16(v));
  if (t == ScalarType::f16) return FromF16(ToF16(v));
  return v;
}
// A buffer of `count` elements of type t, filled with NaN bit patterns (so an
// element the kernel never writes fails the comparison).
std::vector<char> NanBuffer(ScalarType t, size_t count) {
  std::vector<char> b(count * Size(t));
  for (size_t i = 0; i < count; ++i) {
    if (t == ScalarType::f32) {
      float f = std::nanf("");
      std::memcpy(&b[i * 4], &f, 4);
    } else {
      uint16_t h = 0x7FFF;  // NaN in both bf16 and f16
      std::memcpy(&b[i * 2], &h, 2);
    }
  }
  return b;
}
float Load(ScalarType t, const std::vector<char> &b, size_t i) {
  if (t == ScalarType::f32) {
    float f;
    std::memcpy(&f, &b[i * 4], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &b[i * 2], 2);
  return t == ScalarType::bf16 ? FromBf16(h) : FromF16(h);
}
// Random values already representable in t, and their storage.
struct Tensor {
  std::vector<float> v;     // values
  std::vector<char> bytes;  // storage in t
};
Tensor Random(ScalarType t, size_t count, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  Tensor r;
  r.v.resize(count);
  r.bytes.resize(count * Size(t));
  for (size_t i = 0; i < count; ++i) {
    r.v[i] = Round(t, nd(rng));
    if (t == ScalarType::f32) {
      std::memcpy(&r.bytes[i * 4], &r.v[i], 4);
    } else {
      uint16_t h = t == ScalarType::bf16 ? ToBf16(r.v[i]) : ToF16(r.v[i]);
      std::memcpy(&r.bytes[i * 2], &h, 2);
    }
  }
  return r;
}
// Unit roundoff of the output type (the final rounding's relative error).
double Unit(ScalarType t) {
  return t == ScalarType::bf16 ? 1.0 / 256 : t == ScalarType::f16 ? 1.0 / 2048 : 0.0;
}

// float64 reference y[m, n] = x[m,:] . w[n,:] (+ bias[n]) and sum |terms|.
void Reference(const Tensor &x, const Tensor &w, const Tensor *bias, int64_t m, int64_t k,
               int64_t n, std::vector<double> *y, std::vector<double> *mag) {
  y->assign(m * n, 0.0);
  mag->assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias ? bias->v[j] : 0.0, a = bias ? std::fabs(bias->v[j]) : 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = static_cast<double>(x.v[i * k + kk]) * w.v[j * k + kk];
        acc += p;
        a += std::fabs(p);
      }
      (*y)[i * n + j] = acc;
      (*mag)[i * n + j] = a;
    }
}

// |got - ref| within the fp32 accumulation error (1e-5 of the magnitude)
// plus the final rounding to the output type; NaN never passes.
void ExpectClose(float got, double ref, double mag, ScalarType out, const std::string &what) {
  ASSERT_TRUE(std::isfinite(got)) << what;
  const double tol = 1e-5 * mag + 1e-6 + Unit(out) * (std::fabs(ref) + 1e-5 * mag);
  EXPECT_NEAR(got, ref, tol) << what;
}

const char *kGemvStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, void* y, const void* x, const void* w, const void* bias,
                          long long n) {
  emu::Launch(g, b, 0, [&] { KERNEL((OutT*)y, (const T*)x, (const T*)w, (const T*)bias, n); });
}
)";
using GemvFn = void (*)(Dim3, Dim3, void *, const void *, const void *, const void *, long long);

// The single GEMV on the emulator (the unfused kernel, for bitwise checks).
std::vector<char> RunGemv(ScalarType dtype, ScalarType out, int64_t m, int64_t k, int64_t n,
                          const Tensor &x, const Tensor &w, const Tensor *bias,
                          int unroll = kGemvUnroll) {
  GemvConfig c;
  c.dtype = dtype;
  c.out = out;
  c.m = m;
  c.k = k;
  c.n = n;
  c.has_bias = bias != nullptr;
  c.unroll = unroll;
  const KernelCode kc = Unwrap(EmitGemv(c));
  auto fn = reinterpret_cast<GemvFn>(BuildEmu(kc, kGemvStub));
  std::vector<char> y = NanBuffer(out, m * n);
  if (!fn) return y;
  const LaunchDims d = Unwrap(GemvLaunch(c));
  fn(G(d), B(d), y.data(), x.bytes.data(), w.bytes.data(), bias ? bias->bytes.data() : nullptr, n);
  return y;
}

struct MultiCase {
  ScalarType dtype;
  int64_t m, k;
  std::vector<int64_t> n;
  std::vector<ScalarType> out;
  std::vector<bool> bias;
  bool bitwise;  // also compare with the single GEMV (emulated) bit for bit
};

void RunMulti(const MultiCase &t) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  const int nout = static_cast<int>(t.n.size());
  MultiGemvConfig c;
  c.dtype = t.dtype;
  c.m = t.m;
  c.k = t.k;
  c.num_outputs = nout;
  for (int i = 0; i < nout; ++i) {
    c.out[i] = t.out[i];
    c.n[i] = t.n[i];
    c.has_bias[i] = t.bias[i];
  }
  ASSERT_TRUE(MultiGemvSupported(c));
  const KernelCode kc = Unwrap(EmitMultiGemv(c));
  // emu_entry(grid, block, x, void* args[4 * nout]) unpacks the per-output
  // (y, w, bias, n) quadruples.
  std::ostringstream stub;
  stub << "extern \"C\" void emu_entry(dim3 g, dim3 b, const void* x, void** a) {\n"
       << "  emu::Launch(g, b, 0, [&] { KERNEL((const T*)x";
  for (int i = 0; i < nout; ++i)
    stub << ", (OutT" << i << "*)a[" << 4 * i << "], (const T*)a[" << 4 * i + 1
         << "], (const T*)a[" << 4 * i + 2 << "], (long long)(intptr_t)a[" << 4 * i + 3 << "]";
  stub << "); });\n}\n";
  using Fn = void (*)(Dim3, Dim3, const void *, void **);
  auto fn = reinterpret_cast<Fn>(BuildEmu(kc, stub.str()));
  ASSERT_NE(fn, nullptr);

  const Tensor x = Random(t.dtype, t.m * t.k, 11, 1.f);
  std::vector<Tensor> w, b;
  std::vector<std::vector<char>> y;
  std::vector<void *> args;
  for (int i = 0; i < nout; ++i) {
    w.push_back(Random(t.dtype, t.n[i] * t.k, 100 + i, 0.05f));
    b.push_back(Random(t.dtype, t.n[i], 200 + i, 0.5f));
    y.push_back(NanBuffer(t.out[i], t.m * t.n[i]));
  }
  for (int i = 0; i < nout; ++i) {
    args.push_back(y[i].data());
    args.push_back(w[i].bytes.data());
    args.push_back(t.bias[i] ? b[i].bytes.data() : nullptr);
    args.push_back(reinterpret_cast<void *>(static_cast<intptr_t>(t.n[i])));
  }
  const LaunchDims d = Unwrap(MultiGemvLaunch(c));
  int64_t rows = 0;
  for (int64_t n : t.n) rows += n;
  EXPECT_EQ(static_cast<int64_t>(d.grid[0]) * (d.block[0] / 32), (rows + 7) / 8 * 8)
      << "one warp per row of every weight";
  fn(G(d), B(d), x.bytes.data(), args.data());

  for (int i = 0; i < nout; ++i) {
    std::vector<double> ref, mag;
    Reference(x, w[i], t.bias[i] ? &b[i] : nullptr, t.m, t.k, t.n[i], &ref, &mag);
    for (int64_t e = 0; e < t.m * t.n[i]; ++e) {
      ExpectClose(Load(t.out[i], y[i], e), ref[e], mag[e], t.out[i],
                  "y" + std::to_string(i) + "[" + std::to_string(e / t.n[i]) + ", " +
                      std::to_string(e % t.n[i]) + "]");
      if (::testing::Test::HasFailure()) return;
    }
    if (t.bitwise) {
      const std::vector<char> single =
          RunGemv(t.dtype, t.out[i], t.m, t.k, t.n[i], x, w[i], t.bias[i] ? &b[i] : nullptr);
      ASSERT_EQ(single.size(), y[i].size());
      EXPECT_EQ(std::memcmp(single.data(), y[i].data(), single.size()), 0)
          << "output " << i << " differs from the single GEMV's";
    }
  }
}

constexpr ScalarType bf = ScalarType::bf16, f16 = ScalarType::f16, f32 = ScalarType::f32;

// q/k/v-like: three equal weights, bf16 out, m 1; also the single GEMV bitwise.
TEST(GemvEmu, MultiThreeOutputsBitwiseEqualsSingle) {
  RunMulti({bf, 1, 64, {7, 1, 13}, {bf, bf, bf}, {false, false, false}, true});
}
// Odd row counts straddle the 8-warp blocks; per-output types and biases.
TEST(GemvEmu, MultiMixedOutputsAndBiases) {
  RunMulti({f16, 3, 1000, {7, 9, 1, 5}, {f32, f16, bf, f32}, {true, false, true, false}, true});
}
TEST(GemvEmu, MultiEightRowsF32Out) {
  RunMulti({bf, 8, 1000, {1, 7}, {f32, f32}, {true, true}, true});
}
// Decode shapes: k 4096 (main loop), a 4096-row weight and a 7-row one in
// one launch (the emulator runs a std::thread per CUDA thread: 11008 rows
// would take minutes; the geometry is the same).
TEST(GemvEmu, MultiDecodeShapes) {
  RunMulti({bf, 1, 4096, {4096, 7}, {bf, f32}, {false, true}, false});
}

// ---- SwiGLU ----
struct SwiGluCase {
  ScalarType dtype, gate, up, act, out;
  int64_t m, k, n;
  bool bias;
  bool bitwise;
};

void RunSwiGlu(const SwiGluCase &t) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  SwiGluGemvConfig c;
  c.dtype = t.dtype;
  c.gate_out = t.gate;
  c.up_out = t.up;
  c.act_out = t.act;
  c.out = t.out;
  c.m = t.m;
  c.k = t.k;
  c.n = t.n;
  c.has_bias = t.bias;
  ASSERT_TRUE(SwiGluGemvSupported(c));
  const KernelCode kc = Unwrap(EmitSwiGluGemv(c));
  const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, void* y, const void* x, const void* wg, const void* wu,
                          const void* bg, const void* bu, long long n) {
  emu::Launch(g, b, 0, [&] {
    KERNEL((OutT*)y, (const T*)x, (const T*)wg, (const T*)wu, (const T*)bg, (const T*)bu, n);
  });
}
)";
  using Fn = void (*)(Dim3, Dim3, void *, const void *, const void *, const void *, const void *,
                      const void *, long long);
  auto fn = reinterpret_cast<Fn>(BuildEmu(kc, stub));
  ASSERT_NE(fn, nullptr);
  const Tensor x = Random(t.dtype, t.m * t.k, 21, 1.f);
  const Tensor wg = Random(t.dtype, t.n * t.k, 22, 0.05f), wu = Random(t.dtype, t.n * t.k, 23, 0.05f);
  const Tensor bg = Random(t.dtype, t.n, 24, 0.5f), bu = Random(t.dtype, t.n, 25, 0.5f);
  std::vector<char> y = NanBuffer(t.out, t.m * t.n);
  const LaunchDims d = Unwrap(SwiGluGemvLaunch(c));
  fn(G(d), B(d), y.data(), x.bytes.data(), wg.bytes.data(), wu.bytes.data(),
     t.bias ? bg.bytes.data() : nullptr, t.bias ? bu.bytes.data() : nullptr, t.n);

  // float64 reference: silu(g) * u with g, u the exact products; the bound
  // covers the fp32 dot products and the roundings of g, u, silu(g) and y.
  std::vector<double> g, gmag, u, umag;
  Reference(x, wg, t.bias ? &bg : nullptr, t.m, t.k, t.n, &g, &gmag);
  Reference(x, wu, t.bias ? &bu : nullptr, t.m, t.k, t.n, &u, &umag);
  for (int64_t e = 0; e < t.m * t.n; ++e) {
    const double s = 1.0 / (1.0 + std::exp(-g[e]));
    const double ref = g[e] * s * u[e];
    // d(silu)/dg is at most 1.1 in magnitude.
    const double eg = 1e-5 * gmag[e] + 1e-6 + Unit(t.gate) * std::fabs(g[e]);
    const double eu = 1e-5 * umag[e] + 1e-6 + Unit(t.up) * std::fabs(u[e]);
    const double silu = std::fabs(g[e] * s);
    const double tol = 1.1 * eg * (std::fabs(u[e]) + eu) + (silu + 1.1 * eg) * eu +
                       Unit(t.act) * silu * (std::fabs(u[e]) + eu) +
                       Unit(t.out) * std::fabs(ref) + 1e-6 * std::fabs(ref) + 1e-7;
    const float got = Load(t.out, y, e);
    ASSERT_TRUE(std::isfinite(got)) << "y[" << e / t.n << ", " << e % t.n << "]";
    ASSERT_NEAR(got, ref, tol) << "y[" << e / t.n << ", " << e % t.n << "]";
  }
  if (!t.bitwise) return;
  // Unfused: the two single GEMVs, then the elementwise kernel's chain
  // (every node rounded to its type): y = round(round(silu(g)) * u).
  const std::vector<char> gs = RunGemv(t.dtype, t.gate, t.m, t.k, t.n, x, wg, t.bias ? &bg : nullptr);
  const std::vector<char> us = RunGemv(t.dtype, t.up, t.m, t.k, t.n, x, wu, t.bias ? &bu : nullptr);
  for (int64_t e = 0; e < t.m * t.n; ++e) {
    const float gv = Load(t.gate, gs, e), uv = Load(t.up, us, e);
    const float a = Round(t.act, gv / (1.0f + expf(-gv)));
    const float expect = Round(t.out, a * uv);
    const float got = Load(t.out, y, e);
    uint32_t eb, gb;
    std::memcpy(&eb, &expect, 4);
    std::memcpy(&gb, &got, 4);
    ASSERT_EQ(eb, gb) << "y[" << e / t.n << ", " << e % t.n << "]: fused " << got
                      << " vs unfused " << expect;
  }
}

TEST(GemvEmu, SwiGluBitwiseEqualsUnfused) { RunSwiGlu({bf, bf, bf, bf, bf, 1, 64, 7, false, true}); }
TEST(GemvEmu, SwiGluOddShapesBias) { RunSwiGlu({f16, f16, f16, f16, f16, 3, 1000, 9, true, true}); }
TEST(GemvEmu, SwiGluMixedTypes) { RunSwiGlu({bf, f32, bf, f32, f32, 8, 1000, 1, true, true}); }
TEST(GemvEmu, SwiGluDecodeShape) { RunSwiGlu({bf, bf, bf, bf, bf, 1, 4096, 1031, false, false}); }

// The unroll (16-byte loads in flight per lane) changes when loads are
// issued, not the order in which a lane adds its chunks: every unroll gives
// the default kernel's bits, with a tail (k = 136: 17 chunks) and without.
TEST(GemvEmu, UnrollIsBitwiseTheDefault) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  for (int64_t m : {1, 3})
    for (int64_t k : {136, 4096}) {
      const int64_t n = 9;
      const Tensor x = Random(bf, m * k, 21, 1.f);
      const Tensor w = Random(bf, n * k, 22, 1.f / std::sqrt(static_cast<float>(k)));
      const std::vector<char> want = RunGemv(bf, bf, m, k, n, x, w, nullptr);
      for (int unroll : {1, 2, 8, 16}) {
        const std::vector<char> got = RunGemv(bf, bf, m, k, n, x, w, nullptr, unroll);
        EXPECT_EQ(got, want) << "m " << m << " k " << k << " unroll " << unroll;
      }
    }
}

TEST(GemvKernels, RejectsUnsupported) {
  MultiGemvConfig c;
  c.num_outputs = 5;
  EXPECT_FALSE(MultiGemvSupported(c));
  c.num_outputs = 0;
  EXPECT_FALSE(MultiGemvSupported(c));
  c.num_outputs = 2;
  EXPECT_FALSE(MultiGemvSupported(c));  // weights without rows
  c.n[0] = c.n[1] = 64;
  EXPECT_TRUE(MultiGemvSupported(c));
  c.n[1] = 0;  // a grid whose warps all return before waiting
  EXPECT_FALSE(MultiGemvSupported(c));
  c.n[1] = 64;
  c.m = kGemvMaxRows + 1;
  EXPECT_FALSE(MultiGemvSupported(c));
  c.m = 1;
  c.k = 100;  // not a multiple of 8
  EXPECT_FALSE(MultiGemvSupported(c));
  c.k = 64;
  c.dtype = f32;
  EXPECT_FALSE(MultiGemvSupported(c));
  c.dtype = bf;
  c.out[1] = ScalarType::i32;
  EXPECT_FALSE(MultiGemvSupported(c));
  c.out[1] = bf;
  for (int unroll : {0, kGemvMaxUnroll + 1}) {
    c.unroll = unroll;
    EXPECT_FALSE(MultiGemvSupported(c)) << unroll;
  }
  GemvConfig g;
  g.unroll = kGemvMaxUnroll;
  EXPECT_TRUE(GemvSupported(g));
  g.unroll = 0;
  EXPECT_FALSE(GemvSupported(g));
  SwiGluGemvConfig s;
  EXPECT_TRUE(SwiGluGemvSupported(s));
  s.act_out = ScalarType::i8;
  EXPECT_FALSE(SwiGluGemvSupported(s));
  s.act_out = bf;
  s.k = 4100;
  EXPECT_FALSE(SwiGluGemvSupported(s));
  absl::StatusOr<KernelCode> refused = EmitSwiGluGemv(s);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(), "llmc::cuda kernel generator: swiglu gemv: unsupported configuration");
}

// ptxas -v: registers and spills.
struct PtxasInfo {
  int registers = -1, spill_stores = -1, spill_loads = -1;
};
PtxasInfo Ptxas(const KernelCode &k, const std::string &arch, std::string *log) {
  PtxasInfo p;
  if (!llmc::test::NvrtcCompileWithOptions(k.source, k.name, arch, {"--ptxas-options=-v"}, log))
    return p;
  std::smatch m;
  if (std::regex_search(*log, m, std::regex(R"(Used (\d+) registers)"))) p.registers = std::stoi(m[1]);
  if (std::regex_search(*log, m, std::regex(R"((\d+) bytes spill stores, (\d+) bytes spill loads)"))) {
    p.spill_stores = std::stoi(m[1]);
    p.spill_loads = std::stoi(m[2]);
  }
  return p;
}

TEST(GemvKernels, CompileWithoutSpills) {
  if (!llmc::test::NvrtcAvailable()) GTEST_SKIP() << "libnvrtc not available";
  std::vector<KernelCode> kernels;
  for (ScalarType t : {bf, f16})
    for (int64_t m : {1, 3, 8})
      for (int64_t k : {64, 4096, 11008}) {
        GemvConfig g;
        g.dtype = t;
        g.out = m == 3 ? f32 : t;
        g.m = m;
        g.k = k;
        g.has_bias = m == 8;
        kernels.push_back(Unwrap(EmitGemv(g)));
        MultiGemvConfig mc;
        mc.dtype = t;
        mc.m = m;
        mc.k = k;
        mc.num_outputs = m == 1 ? 3 : m == 3 ? 2 : 4;
        for (int i = 0; i < mc.num_outputs; ++i) {
          mc.out[i] = i == 1 ? f32 : t;
          mc.has_bias[i] = i == 2;
          mc.n[i] = 4096;
        }
        kernels.push_back(Unwrap(EmitMultiGemv(mc)));
        SwiGluGemvConfig s;
        s.dtype = s.gate_out = s.up_out = s.act_out = s.out = t;
        s.m = m;
        s.k = k;
        s.has_bias = m == 3;
        kernels.push_back(Unwrap(EmitSwiGluGemv(s)));
        // More loads in flight (--gemv-unroll) for the decode shapes.
        // m = 1 (batch-1 decode) only: at m = 8 the SwiGLU kernel's 2 x 8
        // accumulators and 2 x unroll vectors spill from unroll 8 on, and
        // at unroll 16 it spills 8 bytes on sm_80 (f16, k = 11008).
        if (k >= 4096 && m == 1)
          for (int unroll : {8, 16}) {
            g.unroll = mc.unroll = s.unroll = unroll;
            kernels.push_back(Unwrap(EmitGemv(g)));
            kernels.push_back(Unwrap(EmitMultiGemv(mc)));
            if (unroll == 8)
              kernels.push_back(Unwrap(EmitSwiGluGemv(s)));
          }
      }
  for (const char *arch : {"sm_90a", "sm_80"})
    for (const KernelCode &k : kernels) {
      std::string log;
      const PtxasInfo p = Ptxas(k, arch, &log);
      ASSERT_GT(p.registers, 0) << k.name << " (" << arch << "):\n" << log;
      EXPECT_EQ(p.spill_stores, 0) << k.name << " (" << arch << "):\n" << log;
      EXPECT_EQ(p.spill_loads, 0) << k.name << " (" << arch << "):\n" << log;
      if (std::string(arch) == "sm_90a" && k.name.find("_k4096") != std::string::npos)
        std::printf("ptxas sm_90a %-60s %3d registers\n", k.name.c_str(), p.registers);
    }
}

} // namespace
