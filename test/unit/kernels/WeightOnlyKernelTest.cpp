//===- WeightOnlyKernelTest.cpp - int8/int4 weight-only kernels ------------===//
//
// The quantize / dequantize / fused dequantizing GEMV generators: compiled by
// NVRTC for sm_90 and sm_80 (skips without libnvrtc), and run on the CPU
// emulator (emu/CudaEmu.h; skips without a host compiler) against a CPU
// reference of the scheme in WeightOnly.h on odd shapes.
//
//===----------------------------------------------------------------------===//

#include "GeneratorStatus.h"
#include "CpuReference.h"
#include "EmuSupport.h"
#include "NvrtcHelper.h"
#include "llmc/Target/CUDA/WeightOnly.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

using namespace llmc::cuda;
using namespace llmc::test;
using llmc::ref::FromBf16;
using llmc::ref::ToBf16;

namespace {

// CPU reference of the scheme (WeightOnly.h), float32 arithmetic.
void QuantizeRef(const std::vector<float> &w, int64_t n, int64_t k, int bits, int64_t group,
                 std::vector<int8_t> *packed, std::vector<float> *scales) {
  const float qmax = bits == 4 ? 7.0f : 127.0f;
  packed->assign(bits == 4 ? n * k / 2 : n * k, 0);
  scales->assign(n * (k / group), 0.f);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < k / group; ++g) {
      float amax = 0.f;
      for (int64_t j = g * group; j < (g + 1) * group; ++j)
        amax = std::fmax(amax, std::fabs(w[r * k + j]));
      const float s = amax / qmax;
      (*scales)[r * (k / group) + g] = s;
      for (int64_t j = g * group; j < (g + 1) * group; ++j) {
        const float v = s > 0.f ? std::nearbyint(w[r * k + j] / s) : 0.f;
        const int q = static_cast<int>(std::fmin(std::fmax(v, -qmax), qmax));
        if (bits == 8) {
          (*packed)[r * k + j] = static_cast<int8_t>(q);
        } else {
          int8_t &byte = (*packed)[(r * k + j) / 2];
          byte = static_cast<int8_t>(j % 2 ? (byte & 0x0F) | ((q & 0xF) << 4)
                                           : (byte & 0xF0) | (q & 0xF));
        }
      }
    }
}
int Unpack(const std::vector<int8_t> &packed, int64_t idx, int bits) {
  if (bits == 8) return packed[idx];
  const int nib = (static_cast<uint8_t>(packed[idx / 2]) >> (idx % 2 ? 4 : 0)) & 0xF;
  return nib >= 8 ? nib - 16 : nib;
}

std::vector<float> RandBf16(size_t count, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(count);
  for (auto &x : v) x = FromBf16(ToBf16(nd(rng)));
  return v;
}
std::vector<uint16_t> Bits(const std::vector<float> &v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = ToBf16(v[i]);
  return r;
}

const char *kQuantStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, int8_t* packed, float* scales, const T* w, long long n, long long k) {
  emu::Launch(g, b, 0, [&] { KERNEL(packed, scales, w, n, k); });
}
)";
const char *kDequantStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, T* out, const int8_t* packed, const float* scales, long long n, long long k) {
  emu::Launch(g, b, 0, [&] { KERNEL(out, packed, scales, n, k); });
}
)";
const char *kGemvStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, OutT* y, const T* x, const int8_t* packed, const float* scales,
                          const T* bias, long long n) {
  emu::Launch(g, b, 0, [&] { KERNEL(y, x, packed, scales, bias, n); });
}
)";

// Quantize + dequantize kernels vs the CPU reference: bit-exact.
void RunQuantRoundTrip(int bits, int64_t n, int64_t k) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  WeightQuantConfig cfg;
  cfg.bits = bits;
  cfg.group = 128;
  cfg.dtype = ScalarType::bf16;
  std::vector<float> w = RandBf16(n * k, 7 + bits, 0.05f);
  for (int64_t j = 0; j < 128; ++j) w[j] = 0.f;  // an all-zero group: scale 0
  std::vector<uint16_t> wb = Bits(w);
  std::vector<int8_t> refPacked;
  std::vector<float> refScales;
  QuantizeRef(w, n, k, bits, 128, &refPacked, &refScales);

  using QFn = void (*)(Dim3, Dim3, int8_t *, float *, const void *, long long, long long);
  const KernelCode qk = Unwrap(EmitQuantizeWeight(cfg));
  auto q = reinterpret_cast<QFn>(BuildEmu(qk, kQuantStub));
  ASSERT_NE(q, nullptr);
  std::vector<int8_t> packed(refPacked.size(), 99);
  std::vector<float> scales(refScales.size(), -1.f);
  const LaunchDims qd = Unwrap(QuantizeWeightLaunch(cfg, n, k));
  q(G(qd), B(qd), packed.data(), scales.data(), wb.data(), n, k);
  for (size_t i = 0; i < scales.size(); ++i) ASSERT_EQ(scales[i], refScales[i]) << "scale " << i;
  for (size_t i = 0; i < packed.size(); ++i) ASSERT_EQ(packed[i], refPacked[i]) << "byte " << i;

  using DFn = void (*)(Dim3, Dim3, void *, const int8_t *, const float *, long long, long long);
  const KernelCode dk = Unwrap(EmitDequantizeWeight(cfg));
  auto d = reinterpret_cast<DFn>(BuildEmu(dk, kDequantStub));
  ASSERT_NE(d, nullptr);
  std::vector<uint16_t> out(n * k, 0xFFFF);
  const LaunchDims dd = Unwrap(DequantizeWeightLaunch(cfg, n, k));
  d(G(dd), B(dd), out.data(), packed.data(), scales.data(), n, k);
  for (int64_t i = 0; i < n * k; ++i) {
    const float expect = static_cast<float>(Unpack(refPacked, i, bits)) * refScales[i / 128];
    ASSERT_EQ(out[i], ToBf16(expect)) << "element " << i;
    // Within half a quantization step of the original weight (+ bf16 rounding).
    ASSERT_LE(std::fabs(FromBf16(out[i]) - w[i]),
              refScales[i / 128] * 0.5f * 1.0001f + std::fabs(w[i]) * 0.004f);
  }
}

// Fused GEMV vs a float64 CPU reference on the dequantized weight.
void RunQuantGemv(int bits, int64_t m, int64_t k, int64_t n, bool bias) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  QuantGemvConfig cfg;
  cfg.bits = bits;
  cfg.group = 128;
  cfg.m = m;
  cfg.k = k;
  cfg.n = n;
  cfg.dtype = ScalarType::bf16;
  cfg.out = ScalarType::f32;
  cfg.has_bias = bias;
  ASSERT_TRUE(QuantGemvSupported(cfg));
  std::vector<float> w = RandBf16(n * k, 3, 0.05f), x = RandBf16(m * k, 4, 1.f),
                     b = RandBf16(n, 5, 0.1f);
  std::vector<int8_t> packed;
  std::vector<float> scales;
  QuantizeRef(w, n, k, bits, 128, &packed, &scales);
  std::vector<uint16_t> xb = Bits(x), bb = Bits(b);
  const KernelCode kc = Unwrap(EmitQuantGemv(cfg));
  using Fn = void (*)(Dim3, Dim3, float *, const void *, const int8_t *, const float *,
                      const void *, long long);
  auto fn = reinterpret_cast<Fn>(BuildEmu(kc, kGemvStub));
  ASSERT_NE(fn, nullptr);
  std::vector<float> y(m * n, std::nanf(""));
  const LaunchDims ld = Unwrap(QuantGemvLaunch(cfg));
  fn(G(ld), B(ld), y.data(), xb.data(), packed.data(), scales.data(), bias ? bb.data() : nullptr, n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias ? b[j] : 0.0, mag = bias ? std::fabs(b[j]) : 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double wq = static_cast<double>(Unpack(packed, j * k + kk, bits)) *
                          scales[j * (k / 128) + kk / 128];
        acc += x[i * k + kk] * wq;
        mag += std::fabs(x[i * k + kk] * wq);
      }
      const float got = y[i * n + j];
      ASSERT_TRUE(std::isfinite(got)) << "y[" << i << ", " << j << "]";
      EXPECT_NEAR(got, acc, 1e-5 * mag + 1e-6) << "y[" << i << ", " << j << "]";
    }
}

TEST(WeightOnlyEmu, Int4QuantizeDequantizeBitExact) { RunQuantRoundTrip(4, 5, 384); }
TEST(WeightOnlyEmu, Int8QuantizeDequantizeBitExact) { RunQuantRoundTrip(8, 3, 256); }
// K = 384 with int4: 12 chunks per row (tail loop only); K = 4608: main loop + tail.
TEST(WeightOnlyEmu, Int4GemvOddShapes) { RunQuantGemv(4, 3, 384, 37, true); }
TEST(WeightOnlyEmu, Int4GemvMainLoopAndTail) { RunQuantGemv(4, 1, 4608, 9, false); }
TEST(WeightOnlyEmu, Int8GemvOddShapes) { RunQuantGemv(8, 8, 2176, 11, true); }

TEST(WeightOnlyKernels, RejectsUnsupported) {
  QuantGemvConfig g;
  g.k = 200;
  EXPECT_FALSE(QuantGemvSupported(g));
  g.k = 256;
  g.m = 9;
  EXPECT_FALSE(QuantGemvSupported(g));
  WeightQuantConfig q;
  q.bits = 3;
  EXPECT_FALSE(WeightQuantSupported(q));
  q.bits = 4;
  q.group = 96;
  EXPECT_FALSE(WeightQuantSupported(q));
}

TEST(WeightOnlyKernels, NvrtcCompilesForSm90AndSm80) {
  if (!llmc::test::NvrtcAvailable()) GTEST_SKIP() << "libnvrtc not found";
  std::vector<KernelCode> kernels;
  for (int bits : {4, 8}) {
    for (ScalarType t : {ScalarType::f32, ScalarType::f16, ScalarType::bf16}) {
      WeightQuantConfig q;
      q.bits = bits;
      q.dtype = t;
      kernels.push_back(Unwrap(EmitQuantizeWeight(q)));
      kernels.push_back(Unwrap(EmitDequantizeWeight(q)));
    }
    for (ScalarType x : {ScalarType::bf16, ScalarType::f16})
      for (int64_t m : {1, 8}) {
        QuantGemvConfig g;
        g.bits = bits;
        g.dtype = x;
        g.out = m == 1 ? x : ScalarType::f32;
        g.m = m;
        g.k = 11008;
        g.n = 4096;
        g.has_bias = m == 8;
        kernels.push_back(Unwrap(EmitQuantGemv(g)));
      }
  }
  for (const char *arch : {"sm_90", "sm_80"})
    for (const KernelCode &k : kernels) {
      std::string log;
      EXPECT_TRUE(llmc::test::NvrtcCompile(k.source, k.name, arch, &log))
          << k.name << " for " << arch << ":\n" << log;
    }
}

} // namespace
