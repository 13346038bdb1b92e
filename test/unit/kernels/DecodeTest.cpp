//===- DecodeTest.cpp - flash-decoding kernels (Decode.h) ------------------===//
//
// * Emu.FlashDecode*: the generated split + combine kernels run on the CPU
//   emulator (emu/CudaEmu.h) and are compared with the float64 attention
//   reference on fresh random inputs: head dims 64/80/96/128/256, GQA groups
//   1/3/4/8, q_len 1 and 7 (causal and not), kv_len 1/7/300/2048 inside a
//   larger cache, every kv_len source, bf16/f16/f32, empty splits; the
//   cache in HND layout; position masks (skipped tiles) and per-row masks.
// * FlashDecode.CompileWithoutSpills: NVRTC + ptxas -v for sm_90a and sm_80
//   over the configuration grid, 0 spill bytes; prints the register table.
// * FlashDecode.Geometry / Launch: layouts, split counts, workspace sizes.
// Skips (with a reason) when no host compiler or no libnvrtc is found.
//
//===----------------------------------------------------------------------===//

#include "GeneratorStatus.h"
#include "CpuReference.h"
#include "EmuSupport.h"
#include "NvrtcHelper.h"
#include "llmc/Target/CUDA/Decode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <numeric>
#include <optional>
#include <random>
#include <regex>
#include <tuple>

using namespace llmc::cuda;
using namespace llmc::test;
using llmc::ref::FromBf16;
using llmc::ref::ToBf16;

namespace {

// Storage bytes of `v` as dtype (v is rounded in place to what is stored).
std::vector<char> Pack(std::vector<float> &v, ScalarType t) {
  std::vector<char> out(v.size() * ScalarSize(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == ScalarType::f32) {
      std::memcpy(&out[i * 4], &v[i], 4);
    } else if (t == ScalarType::f8e4m3 || t == ScalarType::f8e5m2) {
      const uint8_t b = t == ScalarType::f8e4m3 ? llmc::ref::ToE4M3(v[i]) : llmc::ref::ToE5M2(v[i]);
      v[i] = t == ScalarType::f8e4m3 ? llmc::ref::FromE4M3(b) : llmc::ref::FromE5M2(b);
      out[i] = static_cast<char>(b);
    } else if (t == ScalarType::bf16) {
      const uint16_t b = ToBf16(v[i]);
      v[i] = FromBf16(b);
      std::memcpy(&out[i * 2], &b, 2);
    } else {
      const _Float16 h = static_cast<_Float16>(v[i]);
      v[i] = static_cast<float>(h);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}
float Unpack(const std::vector<char> &buf, size_t i, ScalarType t) {
  if (t == ScalarType::f8e4m3) return llmc::ref::FromE4M3(static_cast<uint8_t>(buf[i]));
  if (t == ScalarType::f8e5m2) return llmc::ref::FromE5M2(static_cast<uint8_t>(buf[i]));
  if (t == ScalarType::f32) {
    float f;
    std::memcpy(&f, &buf[i * 4], 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, &buf[i * 2], 2);
  if (t == ScalarType::bf16) return FromBf16(b);
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}

const char *kSplitStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* pa, float* pml, const T* q, const T* k,
                          const T* v, const void* lenp, long long len, long long smax, int hkv, float scale,
                          int splits) {
  emu::Launch(g, b, smem, [&] { KERNEL(pa, pml, q, k, v, lenp, len, smax, hkv, scale, splits); });
})";
const char *kMaskedSplitStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* pa, float* pml, const T* q, const T* k,
                          const T* v, const void* lenp, long long len, long long smax, int hkv, float scale,
                          int splits, const MaskT* mask, long long msb, long long msh, long long msq) {
  emu::Launch(g, b, smem, [&] { KERNEL(pa, pml, q, k, v, lenp, len, smax, hkv, scale, splits, mask, msb, msh, msq); });
})";
// DecodeConfig::fused_combine: the split kernel with the semaphores and the
// output; one entry signature for both (the mask arguments unused without).
const char *kFusedSplitStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* pa, float* pml, const T* q, const T* k,
                          const T* v, const void* lenp, long long len, long long smax, int hkv, float scale,
                          int splits, const void*, long long, long long, long long, unsigned* sem, T* out) {
  emu::Launch(g, b, smem, [&] { KERNEL(pa, pml, q, k, v, lenp, len, smax, hkv, scale, splits, sem, out); });
})";
const char *kFusedMaskedSplitStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* pa, float* pml, const T* q, const T* k,
                          const T* v, const void* lenp, long long len, long long smax, int hkv, float scale,
                          int splits, const MaskT* mask, long long msb, long long msh, long long msq,
                          unsigned* sem, T* out) {
  emu::Launch(g, b, smem, [&] {
    KERNEL(pa, pml, q, k, v, lenp, len, smax, hkv, scale, splits, mask, msb, msh, msq, sem, out);
  });
})";
const char *kCombineStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, T* out, const float* pa, const float* pml, int hkv,
                          int splits) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, pa, pml, hkv, splits); });
})";

struct DecodeCase {
  ScalarType dtype;
  int64_t d, group, q_len;
  bool causal;
  KvLenSource src;
  int64_t batch, heads_kv, smax;
  std::vector<int64_t> kv_len;  // one per batch for the per-batch sources, else one
  int splits;                   // 0: FlashDecodeNumSplits
  bool hnd = false;             // cache [B, Hkv, Smax, D]
  // 0: none; 1: gpt-fast position mask [1, 1, 1, Smax] bf16 (0 for the
  // first 2/7 of the cache, -inf after, so whole tiles are skipped); 2: f32
  // [B, Hq, Sq, Smax] random finite values with -inf holes (rows fully -inf too).
  int mask = 0;
};

std::string CaseName(const DecodeCase &c) {
  std::string s = std::string(ScalarTypeTag(c.dtype)) + "_d" + std::to_string(c.d) + "_g" + std::to_string(c.group) +
                  "_q" + std::to_string(c.q_len) + (c.causal ? "_causal" : "") + "_L";
  for (int64_t l : c.kv_len) s += std::to_string(l) + "_";
  return s + "s" + std::to_string(c.splits) + (c.hnd ? "_hnd" : "") +
         (c.mask ? "_mask" + std::to_string(c.mask) : "");
}

void RunDecode(const DecodeCase &c) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator (set LLMC_EMU_CXX)";
  DecodeConfig cfg;
  cfg.dtype = c.dtype;
  cfg.head_dim = c.d;
  cfg.group_size = c.group;
  cfg.q_len = c.q_len;
  cfg.causal = c.causal;
  cfg.kv_len = c.src;
  cfg.kv_hnd = c.hnd;
  cfg.has_mask = c.mask != 0;
  cfg.mask = c.mask == 1 ? ScalarType::bf16 : ScalarType::f32;
  ASSERT_TRUE(FlashDecodeSupported(cfg)) << CaseName(c);
  const DecodeKernels kd = Unwrap(EmitFlashDecode(cfg));
  using SplitFn = void (*)(Dim3, Dim3, unsigned, float *, float *, const void *, const void *, const void *,
                           const void *, long long, long long, int, float, int, const void *, long long,
                           long long, long long);
  using CombFn = void (*)(Dim3, Dim3, unsigned, void *, const float *, const float *, int, int);
  auto split = reinterpret_cast<SplitFn>(BuildEmu(kd.split, c.mask ? kMaskedSplitStub : kSplitStub));
  auto comb = reinterpret_cast<CombFn>(BuildEmu(kd.combine, kCombineStub));
  ASSERT_TRUE(split && comb);

  const int64_t Bt = c.batch, Hkv = c.heads_kv, Hq = Hkv * c.group, D = c.d, Smax = c.smax, Sq = c.q_len;
  const uint32_t seed = static_cast<uint32_t>(std::hash<std::string>()(CaseName(c)));
  auto q = Randn(Bt * Sq * Hq * D, seed), k = Randn(Bt * Smax * Hkv * D, seed + 1),
       v = Randn(Bt * Smax * Hkv * D, seed + 2);
  auto qs = Pack(q, c.dtype), ks = Pack(k, c.dtype), vs = Pack(v, c.dtype);
  if (c.hnd) {  // the kernel reads [B, Hkv, Smax, D]; k and v stay NHD for the reference
    auto kh = k, vh = v;
    for (int64_t b = 0; b < Bt; ++b)
      for (int64_t j = 0; j < Smax; ++j)
        for (int64_t h = 0; h < Hkv; ++h)
          for (int64_t e = 0; e < D; ++e) {
            kh[((b * Hkv + h) * Smax + j) * D + e] = k[((b * Smax + j) * Hkv + h) * D + e];
            vh[((b * Hkv + h) * Smax + j) * D + e] = v[((b * Smax + j) * Hkv + h) * D + e];
          }
    ks = Pack(kh, c.dtype);
    vs = Pack(vh, c.dtype);
  }
  // The mask: its strides (b, h, q) over a dense key dimension of Smax.
  std::vector<float> mask;
  int64_t msb = 0, msh = 0, msq = 0;
  if (c.mask == 1) {
    mask.assign(Smax, -INFINITY);
    const int64_t visible = Smax * 2 / 7 + 1;  // a decode position well inside the cache
    for (int64_t j = 0; j < visible; ++j) mask[j] = 0.0f;
  } else if (c.mask == 2) {
    mask = Randn(Bt * Hq * Sq * Smax, seed + 3);
    for (size_t i = 0; i < mask.size(); ++i)
      if (i % 7 == 3 || (i / Smax) % 5 == 4) mask[i] = -INFINITY;  // holes, and whole -inf rows
    msq = Smax, msh = Sq * Smax, msb = Hq * Sq * Smax;
  }
  std::vector<char> ms = Pack(mask, cfg.mask);
  const bool per_batch = c.src == KvLenSource::kPerBatchI32 || c.src == KvLenSource::kPerBatchI64;
  ASSERT_EQ(c.kv_len.size(), per_batch ? size_t(Bt) : size_t(1));
  std::vector<int32_t> len32(c.kv_len.begin(), c.kv_len.end());
  std::vector<int64_t> len64(c.kv_len.begin(), c.kv_len.end());
  const bool i32 = c.src == KvLenSource::kDeviceI32 || c.src == KvLenSource::kPerBatchI32;
  const void *lenp = c.src == KvLenSource::kArg ? nullptr : i32 ? (const void *)len32.data() : len64.data();
  const int splits = c.splits > 0 ? c.splits : Unwrap(FlashDecodeNumSplits(cfg, Bt, Hkv, Smax));
  auto ws = FlashDecodeWorkspaceBytes(cfg, Bt, Hkv, splits);
  // Poison the workspace: every element must be written by the split kernel.
  std::vector<float> pa(ws.first / 4, NAN), pml(ws.second / 4, NAN);
  std::vector<char> ob(q.size() * ScalarSize(c.dtype));
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const LaunchDims d1 = Unwrap(FlashDecodeSplitLaunch(cfg, Bt, Hkv, splits)), d2 = Unwrap(FlashDecodeCombineLaunch(cfg, Bt, Hkv));
  split(G(d1), B(d1), d1.smem, pa.data(), pml.data(), qs.data(), ks.data(), vs.data(), lenp,
        c.src == KvLenSource::kArg ? c.kv_len[0] : -1, Smax, Hkv, scale, splits, ms.data(), msb, msh, msq);
  comb(G(d2), B(d2), d2.smem, ob.data(), pa.data(), pml.data(), Hkv, splits);

  // Reference per batch (each with its own kv_len).
  const double tol = c.dtype == ScalarType::f32 ? 1e-5 : 1e-2;
  double max_err = 0;
  for (int64_t b = 0; b < Bt; ++b) {
    const int64_t L = c.kv_len[per_batch ? b : 0];
    std::vector<float> qb(q.begin() + b * Sq * Hq * D, q.begin() + (b + 1) * Sq * Hq * D);
    std::vector<float> kb(k.begin() + b * Smax * Hkv * D, k.begin() + (b + 1) * Smax * Hkv * D);
    std::vector<float> vb(v.begin() + b * Smax * Hkv * D, v.begin() + (b + 1) * Smax * Hkv * D);
    std::vector<float> mb;
    if (c.mask) mb.assign(mask.begin() + b * msb, mask.begin() + b * msb + (c.mask == 1 ? Smax : msb));
    const auto ref = llmc::ref::AttentionRef(qb, kb, vb, c.mask ? &mb : nullptr, 1, Sq, L, Smax, Hq, Hkv, D,
                                             c.causal, scale, 0, msh, msq);
    for (size_t i = 0; i < ref.size(); ++i) {
      const float got = Unpack(ob, b * Sq * Hq * D + i, c.dtype);
      ASSERT_TRUE(std::isfinite(got)) << CaseName(c) << " b " << b << " element " << i;
      const double err = std::fabs((double)got - ref[i]) / std::max(1.0, std::fabs((double)ref[i]));
      max_err = std::max(max_err, err);
    }
  }
  EXPECT_LT(max_err, tol) << CaseName(c) << " (" << kd.split.name << ", " << splits << " splits)";

  // The same with the combine fused into the split kernel's last block per
  // (batch, kv head): one launch, bitwise the two-launch output, nothing
  // written past it, every semaphore back to zero (the next launch's start).
  DecodeConfig fused = cfg;
  fused.fused_combine = true;
  ASSERT_TRUE(FlashDecodeSupported(fused)) << CaseName(c);
  const DecodeKernels kf = Unwrap(EmitFlashDecode(fused));
  EXPECT_TRUE(kf.combine.name.empty() && kf.combine.source.empty()) << CaseName(c);
  EXPECT_NE(kf.split.name, kd.split.name);
  using FusedFn = void (*)(Dim3, Dim3, unsigned, float *, float *, const void *, const void *, const void *,
                           const void *, long long, long long, int, float, int, const void *, long long,
                           long long, long long, unsigned *, void *);
  auto fsplit = reinterpret_cast<FusedFn>(BuildEmu(kf.split, c.mask ? kFusedMaskedSplitStub : kFusedSplitStub));
  ASSERT_TRUE(fsplit);
  std::vector<float> fpa(ws.first / 4, NAN), fpml(ws.second / 4, NAN);
  std::vector<unsigned> sem(Bt * Hkv + 1, 0u);
  sem.back() = 77u;  // past the semaphores: untouched
  std::vector<char> fob(ob.size() + 64, 0x5a);
  const LaunchDims df = Unwrap(FlashDecodeSplitLaunch(fused, Bt, Hkv, splits));
  for (int call = 0; call < 2; ++call) {  // the semaphores left by the first serve the second
    fsplit(G(df), B(df), df.smem, fpa.data(), fpml.data(), qs.data(), ks.data(), vs.data(), lenp,
           c.src == KvLenSource::kArg ? c.kv_len[0] : -1, Smax, Hkv, scale, splits, ms.data(), msb, msh, msq,
           sem.data(), fob.data());
    for (int64_t i = 0; i < Bt * Hkv; ++i) ASSERT_EQ(sem[i], 0u) << CaseName(c) << " call " << call;
    ASSERT_EQ(sem.back(), 77u) << CaseName(c);
    ASSERT_EQ(0, std::memcmp(fob.data(), ob.data(), ob.size())) << CaseName(c) << " call " << call;
    for (size_t i = ob.size(); i < fob.size(); ++i) ASSERT_EQ(fob[i], 0x5a) << CaseName(c) << ": wrote past out";
    std::fill(fob.begin(), fob.begin() + ob.size(), 0x5a);
  }
}

class EmuFlashDecode : public ::testing::TestWithParam<DecodeCase> {};
TEST_P(EmuFlashDecode, MatchesReference) { RunDecode(GetParam()); }

using S = KvLenSource;
constexpr ScalarType bf = ScalarType::bf16, f16 = ScalarType::f16, f32 = ScalarType::f32;
INSTANTIATE_TEST_SUITE_P(
    Emu, EmuFlashDecode,
    ::testing::Values(
        // LLaMA-2 shape (d 128, MHA) at kv 2048, library split count
        DecodeCase{bf, 128, 1, 1, true, S::kDeviceI32, 1, 2, 2048, {2048}, 0},
        // Mistral-style GQA group 4; kv 300 in a 320-row cache, 3 splits
        DecodeCase{bf, 128, 4, 1, true, S::kDeviceI64, 1, 2, 320, {300}, 3},
        // group 8, kv 7 with 4 splits (most splits empty)
        DecodeCase{bf, 64, 8, 1, true, S::kDeviceI32, 1, 1, 16, {7}, 4},
        // head dim 80 (not a multiple of 16 lanes x 8), group 3, q_len 7 causal, per-batch lengths
        DecodeCase{bf, 80, 3, 7, true, S::kPerBatchI32, 2, 1, 300, {300, 7}, 3},
        DecodeCase{bf, 96, 4, 7, true, S::kPerBatchI64, 2, 1, 64, {1, 64}, 2},
        // q_len 7 non-causal, kv 300
        DecodeCase{bf, 96, 1, 7, false, S::kArg, 1, 2, 300, {300}, 0},
        // head dim 256; kv 1 with q_len 7 causal: only the last query sees a key
        DecodeCase{bf, 256, 1, 7, true, S::kDeviceI64, 1, 2, 8, {1}, 1},
        DecodeCase{bf, 256, 4, 1, true, S::kArg, 1, 1, 2048, {2048}, 5},
        // group 8 x q_len 7 (56 rows: rows split over warps, 32-lane rows)
        DecodeCase{bf, 64, 8, 7, true, S::kDeviceI32, 1, 1, 300, {300}, 2},
        DecodeCase{f16, 128, 3, 7, true, S::kArg, 1, 1, 320, {300}, 0},
        DecodeCase{f16, 80, 1, 1, true, S::kArg, 1, 2, 8, {1}, 0},
        DecodeCase{f32, 128, 4, 1, true, S::kDeviceI32, 1, 2, 300, {7}, 2},
        DecodeCase{f32, 80, 3, 7, true, S::kDeviceI64, 1, 1, 300, {300}, 3},
        DecodeCase{f32, 64, 1, 1, true, S::kArg, 2, 1, 2048, {2048}, 0},
        // gpt-fast decode: cache [B, Hkv, Smax, D] read in place (HND) under a
        // position mask over the whole cache (no kv_len): masked tiles skipped.
        DecodeCase{bf, 128, 1, 1, false, S::kArg, 2, 2, 2048, {2048}, 0, true, 0},
        DecodeCase{bf, 128, 4, 1, false, S::kArg, 1, 2, 2048, {2048}, 0, true, 1},
        DecodeCase{bf, 128, 1, 1, false, S::kArg, 1, 2, 16, {16}, 2, true, 1},
        DecodeCase{bf, 64, 1, 1, false, S::kArg, 2, 3, 256, {256}, 5, true, 1},
        DecodeCase{f16, 80, 3, 7, true, S::kDeviceI64, 1, 1, 300, {300}, 3, true, 1},
        // per-row f32 masks with holes and fully masked rows, with kv_len and GQA
        DecodeCase{bf, 128, 4, 1, false, S::kDeviceI32, 2, 2, 320, {300}, 3, false, 2},
        DecodeCase{bf, 64, 4, 7, true, S::kDeviceI32, 1, 2, 300, {300}, 2, true, 2},
        DecodeCase{f32, 96, 3, 2, false, S::kArg, 1, 2, 64, {64}, 0, false, 2}),
    [](const ::testing::TestParamInfo<DecodeCase> &i) { return CaseName(i.param); });

// ptxas -v figures for one kernel.
struct PtxasInfo {
  int registers = -1, spill_stores = -1, spill_loads = -1;
};
PtxasInfo Ptxas(const KernelCode &k, const std::string &arch, std::string *log) {
  PtxasInfo p;
  if (!llmc::test::NvrtcCompileWithOptions(k.source, k.name, arch, {"--ptxas-options=-v"}, log)) return p;
  std::smatch m;
  if (std::regex_search(*log, m, std::regex(R"(Used (\d+) registers)"))) p.registers = std::stoi(m[1]);
  if (std::regex_search(*log, m, std::regex(R"((\d+) bytes spill stores, (\d+) bytes spill loads)"))) {
    p.spill_stores = std::stoi(m[1]);
    p.spill_loads = std::stoi(m[2]);
  }
  return p;
}

// A bf16 flash-decoding config of head dim d, GQA group g and q_len rows.
DecodeConfig Bf16Config(int64_t d, int64_t g, int64_t q_len) {
  DecodeConfig c;
  c.dtype = ScalarType::bf16;
  c.head_dim = d;
  c.group_size = g;
  c.q_len = q_len;
  return c;
}

} // namespace

// DecodeConfig::fused_combine: the split kernel with the combine in its
// last block compiles without spills for the decode steps' shapes (LLaMA
// MHA, GQA 4 and 8, 7 causal queries, gpt-fast's masked HND cache), for
// sm_90a and sm_80.
TEST(FlashDecode, FusedCombineCompilesWithoutSpills) {
  if (!llmc::test::NvrtcAvailable()) GTEST_SKIP() << "libnvrtc not available";
  for (auto [d, g, ql, masked] : {std::tuple<int64_t, int64_t, int64_t, bool>{128, 1, 1, false},
                                  {128, 4, 1, false}, {64, 8, 1, false}, {128, 4, 7, false},
                                  {128, 1, 1, true}, {128, 4, 1, true}}) {
    DecodeConfig c = Bf16Config(d, g, ql);
    c.kv_len = masked ? S::kArg : S::kDeviceI32;
    c.kv_hnd = c.has_mask = masked;
    c.mask = bf;
    c.fused_combine = true;
    ASSERT_TRUE(FlashDecodeSupported(c));
    const DecodeKernels k = Unwrap(EmitFlashDecode(c));
    EXPECT_TRUE(k.combine.source.empty());
    for (const char *arch : {"sm_90a", "sm_80"}) {
      std::string log;
      const PtxasInfo p = Ptxas(k.split, arch, &log);
      ASSERT_GT(p.registers, 0) << k.split.name << " (" << arch << "):\n" << log;
      EXPECT_EQ(p.spill_stores, 0) << k.split.name << " (" << arch << "):\n" << log;
      EXPECT_EQ(p.spill_loads, 0) << k.split.name << " (" << arch << "):\n" << log;
    }
  }
  // Not for a paged cache (its combine runs over packed token rows).
  DecodeConfig paged;
  paged.paged = true;
  paged.group_size = 1;
  paged.fused_combine = true;
  EXPECT_FALSE(FlashDecodeSupported(paged));
}

// Every dtype x head dim x (group, q_len) of the grid compiles for sm_90a and
// sm_80 with no spills; the register table goes to stdout.
TEST(FlashDecode, CompileWithoutSpills) {
  if (!llmc::test::NvrtcAvailable()) GTEST_SKIP() << "libnvrtc not available";
  const KvLenSource srcs[] = {S::kArg, S::kDeviceI32, S::kDeviceI64, S::kPerBatchI32, S::kPerBatchI64};
  int n = 0;
  for (ScalarType t : {bf, f16, f32})
    for (int64_t d : {64, 80, 96, 128, 256})
      for (auto [g, ql] : {std::pair<int64_t, int64_t>{1, 1}, {3, 1}, {4, 1}, {8, 1}, {4, 2}, {1, 7}, {4, 7}, {8, 8}}) {
        DecodeConfig c;
        c.dtype = t;
        c.head_dim = d;
        c.group_size = g;
        c.q_len = ql;
        c.kv_len = srcs[n++ % 5];
        if (!FlashDecodeSupported(c)) continue;
        // bf16 also as gpt-fast decodes: HND cache under a bf16 mask.
        for (int masked = 0; masked < (t == bf ? 2 : 1); ++masked) {
          c.kv_hnd = c.has_mask = masked == 1;
          c.mask = bf;
          if (!FlashDecodeSupported(c)) continue;  // masked: at most 8 rows per warp
          const DecodeKernels k = Unwrap(EmitFlashDecode(c));
          for (const char *arch : {"sm_90a", "sm_80"}) {
            // sm_80 only for bf16 (the arch changes codegen, not the layout).
            if (std::string(arch) == "sm_80" && t != bf) continue;
            for (const KernelCode *kc : {&k.split, &k.combine}) {
              std::string log;
              const PtxasInfo p = Ptxas(*kc, arch, &log);
              ASSERT_GT(p.registers, 0) << kc->name << " (" << arch << "):\n" << log;
              EXPECT_EQ(p.spill_stores, 0) << kc->name << " (" << arch << "):\n" << log;
              EXPECT_EQ(p.spill_loads, 0) << kc->name << " (" << arch << "):\n" << log;
              if (kc == &k.split && std::string(arch) == "sm_90a" && t == bf)
                std::printf("ptxas sm_90a %-64s %3d registers, smem %u B\n", kc->name.c_str(), p.registers,
                            Unwrap(FlashDecodeSplitLaunch(c, 1, 1, 1)).smem);
            }
          }
        }
      }
}

// A mask takes half the scores in flight (unroll) and at most 8 rows per
// warp: group 8 x 7 queries (14 rows per warp) falls back to
// FlashAttention-2 with a mask, not without.
TEST(FlashDecode, MaskedGeometry) {
  DecodeConfig c;
  c.head_dim = 64;
  c.group_size = 8;
  c.q_len = 7;
  EXPECT_TRUE(FlashDecodeSupported(c));
  c.has_mask = true;
  EXPECT_FALSE(FlashDecodeSupported(c));
  c.group_size = 4;
  c.q_len = 1;
  c.has_mask = false;
  const int unroll = Unwrap(FlashDecodeGeometryOf(c)).unroll;
  c.has_mask = true;
  EXPECT_EQ(Unwrap(FlashDecodeGeometryOf(c)).unroll, unroll / 2);
}

TEST(FlashDecode, Geometry) {
  DecodeConfig c;  // bf16, d 128
  c.group_size = 1;
  FlashDecodeGeometry g = Unwrap(FlashDecodeGeometryOf(c));
  // 8 lanes x 16 bytes x 2 loads per 256-byte row: 4 rows per warp load.
  EXPECT_EQ(g.lanes, 8);
  EXPECT_EQ(g.vec, 8);
  EXPECT_EQ(g.vecs_per_lane, 2);
  EXPECT_EQ(g.row_sets, 1);
  EXPECT_EQ(g.streams, 4);
  c.group_size = 4;  // 4 rows: 16 lanes per row so Q and O fit
  g = Unwrap(FlashDecodeGeometryOf(c));
  EXPECT_EQ(g.lanes, 16);
  EXPECT_EQ(g.rows_per_warp, 4);
  c.group_size = 8;  // 8 rows: split over 2 warps rather than 32-lane rows
  g = Unwrap(FlashDecodeGeometryOf(c));
  EXPECT_EQ(g.row_sets, 2);
  EXPECT_EQ(g.lanes, 16);
  for (int64_t d : {64, 80, 96, 128, 256})
    for (int64_t grp : {1, 3, 4, 8})
      for (int64_t ql : {1, 2, 7}) {
        c.head_dim = d;
        c.group_size = grp;
        c.q_len = ql;
        if (!FlashDecodeSupported(c)) continue;
        g = Unwrap(FlashDecodeGeometryOf(c));
        EXPECT_EQ(g.vec * 2 * g.vecs_per_lane * g.lanes >= d * 2, true);  // a lane group covers the row
        EXPECT_LE(g.vec * 2, 16);
        EXPECT_EQ(32 % g.lanes, 0);
        EXPECT_GE(g.rows_per_warp * g.row_sets, grp * ql);
        EXPECT_EQ(g.streams * g.row_sets, 4);
      }
  c.group_size = 64;
  c.q_len = 1;
  c.head_dim = 128;
  EXPECT_FALSE(FlashDecodeSupported(c));  // 64 x 128 > 4096
  // Inside the ranges but no register layout fits: not supported either, so
  // that llmc-select-kernel-configs never picks it and the lowering rejects
  // a flash_decode config for it before generating anything.
  c.dtype = ScalarType::bf16;
  c.head_dim = 16;
  c.group_size = 5;
  c.q_len = 13;
  EXPECT_FALSE(FlashDecodeSupported(c));
  EXPECT_EQ(FlashDecodeGeometryOf(c).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(FlashDecode, LaunchAndWorkspace) {
  DecodeConfig c;
  c.group_size = 1;  // LLaMA-2-7B: 32 heads x 128
  // B=1: 32 blocks per split; ~4 blocks per SM want 17 splits, chunk rounded to 128 keys -> 16
  EXPECT_EQ(Unwrap(FlashDecodeNumSplits(c, 1, 32, 2048)), 16);
  // B=32: 1024 blocks already fill 132 SMs several times
  EXPECT_EQ(Unwrap(FlashDecodeNumSplits(c, 32, 32, 2048)), 1);
  // short cache: at least 2 tiles (2 x 4 warps x 8 keys) per split
  EXPECT_EQ(Unwrap(FlashDecodeNumSplits(c, 1, 1, 100)), 2);
  EXPECT_EQ(Unwrap(FlashDecodeNumSplits(c, 1, 1, 1)), 1);
  c.group_size = 4;  // Mistral: 8 kv heads, group 4
  EXPECT_EQ(Unwrap(FlashDecodeNumSplits(c, 1, 8, 2048)), 32);
  LaunchDims d = Unwrap(FlashDecodeSplitLaunch(c, 2, 8, 16));
  EXPECT_EQ(d.grid[0], 16u);
  EXPECT_EQ(d.grid[1], 8u);
  EXPECT_EQ(d.grid[2], 2u);
  EXPECT_EQ(d.block[0], 128u);
  EXPECT_EQ(d.smem, 4u * 4u * (128u + 2u) * 4u);  // 4 key streams x 4 rows x (D + max, sum)
  d = Unwrap(FlashDecodeCombineLaunch(c, 2, 8));
  EXPECT_EQ(d.grid[0], 2u * 32u);
  auto ws = FlashDecodeWorkspaceBytes(c, 2, 8, 16);
  EXPECT_EQ(ws.first, 2 * 32 * 16 * 128 * 4);
  EXPECT_EQ(ws.second, 2 * 32 * 16 * 2 * 4);
}

//===----------------------------------------------------------------------===//
// Paged flash-decoding and the paged KV append (llm.paged_attention,
// llm.paged_kv_append; issue 19)
//===----------------------------------------------------------------------===//

namespace {

const char *kPagedSplitStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* pa, float* pml, const T* q, const T* k,
                          const T* v, const BtT* bt, const CuT* cu, const LenT* lens, long long max_pages,
                          long long num_pages, int hkv, float scale, int splits) {
  emu::Launch(g, b, smem, [&] { KERNEL(pa, pml, q, k, v, bt, cu, lens, max_pages, num_pages, hkv, scale, splits); });
})";
const char *kPagedAppendStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, T* pages, const T* upd, const BtT* bt, const CuT* cu,
                          const LenT* lens, int* err, long long t, long long nseq, long long max_pages,
                          long long num_pages) {
  emu::Launch(g, b, smem, [&] { KERNEL(pages, upd, bt, cu, lens, err, t, nseq, max_pages, num_pages); });
})";

// The fp8 KV cache's kernels: the split kernel's per-KV-head scales after
// num_splits, the append's scale after the update.
const char *kPagedFp8SplitStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* pa, float* pml, const T* q, const KvT* k,
                          const KvT* v, const BtT* bt, const CuT* cu, const LenT* lens, long long max_pages,
                          long long num_pages, int hkv, float scale, int splits, const float* ksc,
                          const float* vsc) {
  emu::Launch(g, b, smem, [&] {
    KERNEL(pa, pml, q, k, v, bt, cu, lens, max_pages, num_pages, hkv, scale, splits, ksc, vsc);
  });
})";
const char *kPagedFp8AppendStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, T* pages, const UpdT* upd, const float* sc,
                          const BtT* bt, const CuT* cu, const LenT* lens, int* err, long long t, long long nseq,
                          long long max_pages, long long num_pages) {
  emu::Launch(g, b, smem, [&] { KERNEL(pages, upd, sc, bt, cu, lens, err, t, nseq, max_pages, num_pages); });
})";

struct PagedCase {
  ScalarType dtype;
  int64_t d, group, query_rows;
  bool causal;
  int64_t page_size, heads_kv;
  std::vector<int64_t> lens, news;  // per sequence: keys (new tokens included), new tokens
  int splits;                       // 0: FlashDecodeNumSplits over max_pages * page_size
  std::optional<ScalarType> kv_fp8 = std::nullopt;  // an fp8 KV cache, per-KV-head scales
};

std::string PagedName(const PagedCase &c) {
  std::string s = std::string(ScalarTypeTag(c.dtype)) + (c.kv_fp8 ? std::string("_kv") + ScalarTypeTag(*c.kv_fp8) : "") +
                  "_d" + std::to_string(c.d) + "_g" +
                  std::to_string(c.group) + "_r" + std::to_string(c.query_rows) + (c.causal ? "_causal" : "") +
                  "_ps" + std::to_string(c.page_size) + "_L";
  for (size_t b = 0; b < c.lens.size(); ++b) s += std::to_string(c.lens[b]) + "n" + std::to_string(c.news[b]) + "_";
  return s + "s" + std::to_string(c.splits);
}

// Pages in a shuffled order, filled by the paged append kernel from each
// sequence's dense K/V (the earlier keys copied in, the new tokens appended
// by the kernel), then the paged split + combine against the float64
// reference of each sequence alone. Pages no sequence holds are NaN; one
// page past every table is a poisoned id (read only if the kernel strays).
// With an fp8 KV cache the pages hold x / scale[h] in fp8 (the append
// kernel quantizes the new tokens) and the reference attends over what
// they hold times the scales: the kernel is checked to its dtype's bound,
// not to fp8's.
void RunPaged(const PagedCase &c) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator (set LLMC_EMU_CXX)";
  DecodeConfig cfg;
  cfg.dtype = c.dtype;
  cfg.head_dim = c.d;
  cfg.group_size = c.group;
  cfg.q_len = c.query_rows;
  cfg.causal = c.causal;
  cfg.paged = true;
  cfg.page_size = c.page_size;
  cfg.block_table = ScalarType::i32;
  cfg.cu_seqlens = ScalarType::i64;
  cfg.seq_lens = ScalarType::i32;
  cfg.kv_fp8 = c.kv_fp8;
  const ScalarType kvType = c.kv_fp8.value_or(c.dtype);
  ASSERT_TRUE(FlashDecodeSupported(cfg)) << PagedName(c);
  const DecodeKernels kd = Unwrap(EmitFlashDecode(cfg));
  PagedKvAppendConfig ac;
  ac.dtype = kvType;
  if (c.kv_fp8) ac.quantize_from = c.dtype;
  ac.heads_kv = c.heads_kv;
  ac.head_dim = c.d;
  ac.page_size = c.page_size;
  ac.cu_seqlens = ScalarType::i64;
  const KernelCode append = Unwrap(EmitPagedKvAppend(ac));
  using SplitFn = void (*)(Dim3, Dim3, unsigned, float *, float *, const void *, const void *, const void *,
                           const int32_t *, const int64_t *, const int32_t *, long long, long long, int, float, int);
  using CombFn = void (*)(Dim3, Dim3, unsigned, void *, const float *, const float *, int, int);
  using AppendFn = void (*)(Dim3, Dim3, unsigned, void *, const void *, const int32_t *, const int64_t *,
                            const int32_t *, int *, long long, long long, long long, long long);
  using Fp8SplitFn = void (*)(Dim3, Dim3, unsigned, float *, float *, const void *, const void *, const void *,
                              const int32_t *, const int64_t *, const int32_t *, long long, long long, int, float,
                              int, const float *, const float *);
  using Fp8AppendFn = void (*)(Dim3, Dim3, unsigned, void *, const void *, const float *, const int32_t *,
                               const int64_t *, const int32_t *, int *, long long, long long, long long, long long);
  void *split = BuildEmu(kd.split, c.kv_fp8 ? kPagedFp8SplitStub : kPagedSplitStub);
  auto comb = reinterpret_cast<CombFn>(BuildEmu(kd.combine, kCombineStub));
  void *app = BuildEmu(append, c.kv_fp8 ? kPagedFp8AppendStub : kPagedAppendStub);
  ASSERT_TRUE(split && comb && app);

  const int64_t nseq = static_cast<int64_t>(c.lens.size()), Hkv = c.heads_kv, Hq = Hkv * c.group, D = c.d;
  const int64_t ps = c.page_size, row = Hkv * D;
  int64_t maxPages = 1, P = 1;  // + one spare page
  for (int64_t L : c.lens) {
    maxPages = std::max(maxPages, (L + ps - 1) / ps + 1);
    P += (L + ps - 1) / ps;
  }
  const uint32_t seed = static_cast<uint32_t>(std::hash<std::string>()(PagedName(c)));
  std::mt19937 rng(seed);
  std::vector<int32_t> order(P);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  // Block table: each sequence's pages, then P (out of range) past them.
  std::vector<int32_t> table(nseq * maxPages, static_cast<int32_t>(P));
  std::vector<int64_t> cu = {0};
  std::vector<int32_t> lens32;
  int64_t next = 0;
  for (int64_t b = 0; b < nseq; ++b) {
    for (int64_t p = 0; p * ps < c.lens[b]; ++p) table[b * maxPages + p] = order[next++];
    cu.push_back(cu.back() + c.news[b]);
    lens32.push_back(static_cast<int32_t>(c.lens[b]));
  }
  const int64_t T = cu.back();
  // fp8: one scale per KV head for K and for V (x / scale spans e4m3's and
  // e5m2's normal range for N(0, 1) data).
  std::vector<float> kScale(Hkv), vScale(Hkv);
  for (int64_t h = 0; h < Hkv; ++h) {
    kScale[h] = 0.02f * static_cast<float>(h + 1);
    vScale[h] = 0.05f / static_cast<float>(h + 1);
  }
  // What the cache holds for x (already rounded to dtype) at element e of a
  // row: x itself, or fp8(x / scale[h]) as the append kernel computes it.
  auto stored = [&](float x, int64_t e, const std::vector<float> &scale) {
    if (!c.kv_fp8) return x;
    std::vector<float> one = {x / scale[e / D]};
    Pack(one, kvType);
    return one[0];
  };
  std::vector<std::vector<float>> ks, vs;  // dense per sequence, what attention reads
  std::vector<float> kp(P * ps * row, NAN), vp = kp, kNew, vNew;
  for (int64_t b = 0; b < nseq; ++b) {
    auto kb = Randn(c.lens[b] * row, seed + 10 + b), vb = Randn(c.lens[b] * row, seed + 100 + b);
    Pack(kb, c.dtype);  // round to what is stored
    Pack(vb, c.dtype);
    const int64_t old = c.lens[b] - c.news[b];
    kNew.insert(kNew.end(), kb.begin() + old * row, kb.end());
    vNew.insert(vNew.end(), vb.begin() + old * row, vb.end());
    for (int64_t j = 0; j < c.lens[b]; ++j)
      for (int64_t e = 0; e < row; ++e) {
        const float sk = stored(kb[j * row + e], e, kScale), sv = stored(vb[j * row + e], e, vScale);
        if (j < old) {
          const int64_t slot = int64_t{table[b * maxPages + j / ps]} * ps + j % ps;
          kp[slot * row + e] = sk;
          vp[slot * row + e] = sv;
        }
        kb[j * row + e] = c.kv_fp8 ? sk * kScale[e / D] : sk;
        vb[j * row + e] = c.kv_fp8 ? sv * vScale[e / D] : sv;
      }
    ks.push_back(std::move(kb));
    vs.push_back(std::move(vb));
  }
  auto kps = Pack(kp, kvType), vps = Pack(vp, kvType), kns = Pack(kNew, c.dtype), vns = Pack(vNew, c.dtype);
  int err = 0;
  const LaunchDims da = Unwrap(PagedKvAppendLaunch(ac, T));
  if (c.kv_fp8) {
    auto fn = reinterpret_cast<Fp8AppendFn>(app);
    fn(G(da), B(da), da.smem, kps.data(), kns.data(), kScale.data(), table.data(), cu.data(), lens32.data(), &err,
       T, nseq, maxPages, P);
    fn(G(da), B(da), da.smem, vps.data(), vns.data(), vScale.data(), table.data(), cu.data(), lens32.data(), &err,
       T, nseq, maxPages, P);
  } else {
    auto fn = reinterpret_cast<AppendFn>(app);
    fn(G(da), B(da), da.smem, kps.data(), kns.data(), table.data(), cu.data(), lens32.data(), &err, T, nseq,
       maxPages, P);
    fn(G(da), B(da), da.smem, vps.data(), vns.data(), table.data(), cu.data(), lens32.data(), &err, T, nseq,
       maxPages, P);
  }
  EXPECT_EQ(err, 0);
  // The append wrote exactly the new rows.
  for (int64_t b = 0; b < nseq; ++b)
    for (int64_t j = c.lens[b] - c.news[b]; j < c.lens[b]; ++j) {
      const int64_t slot = int64_t{table[b * maxPages + j / ps]} * ps + j % ps;
      for (int64_t e = 0; e < row; ++e) {
        const float got = Unpack(kps, slot * row + e, kvType) * (c.kv_fp8 ? kScale[e / D] : 1.0f);
        ASSERT_EQ(got, ks[b][j * row + e]) << b << " " << j << " " << e;
      }
    }

  auto q = Randn(T * Hq * D, seed + 3);
  auto qs = Pack(q, c.dtype);
  const int splits = c.splits > 0 ? c.splits : Unwrap(FlashDecodeNumSplits(cfg, nseq, Hkv, maxPages * ps));
  DecodeConfig rows = cfg;
  rows.paged = false;
  rows.q_len = 1;
  auto ws = FlashDecodeWorkspaceBytes(rows, T, Hkv, splits);
  std::vector<float> pa(ws.first / 4, NAN), pml(ws.second / 4, NAN);
  std::vector<char> ob(q.size() * ScalarSize(c.dtype));
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const LaunchDims d1 = Unwrap(FlashDecodeSplitLaunch(cfg, nseq, Hkv, splits)),
                   d2 = Unwrap(FlashDecodeCombineLaunch(rows, T, Hkv));
  if (c.kv_fp8)
    reinterpret_cast<Fp8SplitFn>(split)(G(d1), B(d1), d1.smem, pa.data(), pml.data(), qs.data(), kps.data(),
                                        vps.data(), table.data(), cu.data(), lens32.data(), maxPages, P, Hkv, scale,
                                        splits, kScale.data(), vScale.data());
  else
    reinterpret_cast<SplitFn>(split)(G(d1), B(d1), d1.smem, pa.data(), pml.data(), qs.data(), kps.data(),
                                     vps.data(), table.data(), cu.data(), lens32.data(), maxPages, P, Hkv, scale,
                                     splits);
  comb(G(d2), B(d2), d2.smem, ob.data(), pa.data(), pml.data(), Hkv, splits);

  const double tol = c.dtype == ScalarType::f32 ? 1e-5 : 1e-2;
  double max_err = 0;
  for (int64_t b = 0; b < nseq; ++b) {
    const int64_t n = c.news[b], L = c.lens[b];
    if (n == 0) continue;
    std::vector<float> qb(q.begin() + cu[b] * Hq * D, q.begin() + (cu[b] + n) * Hq * D);
    const auto ref = llmc::ref::AttentionRef(qb, ks[b], vs[b], nullptr, 1, n, L, L, Hq, Hkv, D, c.causal, scale);
    for (size_t i = 0; i < ref.size(); ++i) {
      const float got = Unpack(ob, cu[b] * Hq * D + i, c.dtype);
      ASSERT_TRUE(std::isfinite(got)) << PagedName(c) << " sequence " << b << " element " << i;
      max_err = std::max(max_err, std::fabs((double)got - ref[i]) / std::max(1.0, std::fabs((double)ref[i])));
    }
  }
  EXPECT_LT(max_err, tol) << PagedName(c) << " (" << kd.split.name << ", " << splits << " splits)";
}

class EmuPagedFlashDecode : public ::testing::TestWithParam<PagedCase> {};
TEST_P(EmuPagedFlashDecode, MatchesReference) { RunPaged(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Emu, EmuPagedFlashDecode,
    ::testing::Values(
        // decode: one new token per sequence, lengths ending inside and on page boundaries
        PagedCase{bf, 128, 1, 1, true, 16, 2, {33, 1, 16, 200}, {1, 1, 1, 1}, 0},
        // GQA group 4 (Mistral), pages of 8, 3 splits (empty splits for short sequences)
        PagedCase{bf, 128, 4, 1, true, 8, 2, {300, 7, 64}, {1, 1, 1}, 3},
        // chunked prefill mixed with decode: 5 rows taken 2 at a time, a sequence with no new token
        PagedCase{bf, 64, 3, 2, true, 4, 1, {13, 9, 6, 21}, {5, 1, 0, 3}, 2},
        // speculative verification: 4 rows per sequence at once, not causal
        PagedCase{f16, 96, 2, 4, false, 16, 2, {40, 70}, {4, 4}, 0},
        PagedCase{f32, 80, 1, 1, true, 3, 1, {10, 2}, {3, 2}, 4},
        PagedCase{f32, 256, 1, 1, true, 32, 1, {100}, {1}, 0},
        // fp8 KV caches (per-KV-head scales): decode with GQA 4 over pages of 16, e4m3
        PagedCase{bf, 128, 4, 1, true, 16, 2, {33, 1, 200}, {1, 1, 1}, 0, ScalarType::f8e4m3},
        // MHA: 16 e4m3 elements per load, 4 key slots per tile; 3 splits
        PagedCase{bf, 128, 1, 1, true, 16, 2, {300, 5, 64}, {1, 1, 1}, 3, ScalarType::f8e4m3},
        // chunked prefill with e5m2 pages, f16 queries, odd head dim
        PagedCase{f16, 80, 2, 2, true, 8, 2, {13, 9, 21}, {5, 1, 3}, 2, ScalarType::f8e5m2},
        PagedCase{f32, 64, 1, 1, true, 4, 1, {10, 2}, {3, 2}, 3, ScalarType::f8e4m3}),
    [](const ::testing::TestParamInfo<PagedCase> &i) { return PagedName(i.param); });

} // namespace

// An fp8 KV cache streams like a bf16 one (issue 20: the fp8 pages read
// half the bytes but were not faster on the H200, because slots were sized
// by the queries' type: 8-byte loads, half the bytes in flight per lane, one
// conversion per element). Now, for head dim 128: one query row per warp
// (MHA) loads 16 fp8 elements per 16-byte load and keeps bf16's 64 K bytes
// per lane per tile in flight; 4 rows per warp (GQA group 4) keep more than
// half of them (the register cap of 3 blocks per SM allows 5 slots). In the
// sm_90a PTX of the MHA kernel every K/V load is 16 bytes wide and e4m3
// elements are converted two per cvt.rn.f16x2.e4m3x2.
TEST(FlashDecode, Fp8KvCacheLoadsSixteenBytesAndConvertsPairs) {
  auto tileBytes = [](const FlashDecodeGeometry &g, int esize) {
    return g.vec * g.vecs_per_lane * g.unroll * esize;
  };
  for (int64_t group : {1, 4}) {
    DecodeConfig c;
    c.dtype = bf;
    c.head_dim = 128;
    c.group_size = group;
    c.paged = true;
    c.page_size = 16;
    const FlashDecodeGeometry g16 = Unwrap(FlashDecodeGeometryOf(c));
    c.kv_fp8 = ScalarType::f8e4m3;
    const FlashDecodeGeometry g8 = Unwrap(FlashDecodeGeometryOf(c));
    SCOPED_TRACE("group " + std::to_string(group) + ": bf16 " + FlashDecodeGeometryName(g16) + ", fp8 " +
                 FlashDecodeGeometryName(g8));
    if (group == 1) {
      EXPECT_EQ(g8.vec, 16);
      EXPECT_EQ(tileBytes(g8, 1), tileBytes(g16, 2));
    } else {
      EXPECT_GT(2 * tileBytes(g8, 1), tileBytes(g16, 2));
    }
  }
  if (!llmc::test::NvrtcAvailable()) GTEST_SKIP() << "libnvrtc not available";
  DecodeConfig c;
  c.dtype = bf;
  c.head_dim = 128;
  c.group_size = 1;
  c.paged = true;
  c.page_size = 16;
  c.kv_fp8 = ScalarType::f8e4m3;
  const FlashDecodeGeometry g = Unwrap(FlashDecodeGeometryOf(c));
  const DecodeKernels k = Unwrap(EmitFlashDecode(c));
  std::string ptx, log;
  ASSERT_TRUE(llmc::test::NvrtcPtx(k.split.source, k.split.name, "compute_90a", &ptx, &log)) << log;
  auto count = [&](const std::string &re) {
    const std::regex r(re);
    return std::distance(std::sregex_iterator(ptx.begin(), ptx.end(), r), std::sregex_iterator());
  };
  // K and V of every slot: one 16-byte load each, and the Q row's 16 bf16
  // (two). Nothing narrower than 4 bytes, nor 8-byte vectors (the other
  // loads are the 4-byte page ids and lengths and the two f32 scales).
  EXPECT_EQ(count(R"(ld\.global\.nc\.v4\.u32)"),
            2 * g.unroll * g.vecs_per_lane + g.vecs_per_lane * g.vec * 2 / 16);
  EXPECT_EQ(count(R"(ld\.global(\.nc)?(\.v[24])?\.[usb](8|16)\b)"), 0) << "narrow loads";
  EXPECT_EQ(count(R"(ld\.global(\.nc)?\.(v2\.[usb]32|[usb]64|v2\.[usb]64))"), 0)
      << "8-byte loads";
  // 2 * kPer elements (K and V) per slot, two per conversion.
  EXPECT_EQ(count(R"(cvt\.rn\.f16x2\.e4m3x2)"), g.unroll * g.vec * g.vecs_per_lane);
}

// The paged kernels compile for sm_90a and sm_80 with no spills; with an
// fp8 KV cache (issue 20: the split kernel reading e4m3/e5m2 pages, the
// quantizing append) for the fp8 targets sm_90a and sm_89.
TEST(FlashDecode, PagedCompileWithoutSpills) {
  if (!llmc::test::NvrtcAvailable()) GTEST_SKIP() << "libnvrtc not available";
  const std::optional<ScalarType> none, e4m3 = ScalarType::f8e4m3, e5m2 = ScalarType::f8e5m2;
  for (auto [d, g, rows, kv] :
       {std::tuple<int64_t, int64_t, int64_t, std::optional<ScalarType>>{128, 1, 1, none},
        {128, 4, 1, none}, {128, 8, 1, none}, {64, 4, 4, none}, {256, 1, 1, none}, {128, 4, 2, none},
        {128, 1, 1, e4m3}, {128, 4, 1, e4m3}, {128, 8, 1, e5m2}, {64, 4, 4, e4m3}, {256, 1, 1, e4m3},
        // fp8 head dims with loads under 4 bytes (each still a register)
        {9, 1, 1, e4m3}, {18, 4, 1, e5m2}}) {
    DecodeConfig c = Bf16Config(d, g, rows);
    c.paged = true;
    c.page_size = 16;
    c.kv_fp8 = kv;
    ASSERT_TRUE(FlashDecodeSupported(c));
    const DecodeKernels k = Unwrap(EmitFlashDecode(c));
    PagedKvAppendConfig ac;
    ac.head_dim = d;
    if (kv) {
      ac.dtype = *kv;
      ac.quantize_from = bf;
    }
    const KernelCode append = Unwrap(EmitPagedKvAppend(ac));
    for (const char *arch : {"sm_90a", kv ? "sm_89" : "sm_80"})
      for (const KernelCode *kc : {&k.split, &k.combine, &append}) {
        std::string log;
        const PtxasInfo p = Ptxas(*kc, arch, &log);
        ASSERT_GT(p.registers, 0) << kc->name << " (" << arch << "):\n" << log;
        EXPECT_EQ(p.spill_stores, 0) << kc->name << " (" << arch << "):\n" << log;
        EXPECT_EQ(p.spill_loads, 0) << kc->name << " (" << arch << "):\n" << log;
      }
  }
  {
    // fp8 pages are a paged cache's only; the append quantizes only floats
    // into fp8.
    DecodeConfig dense;
    dense.kv_fp8 = ScalarType::f8e4m3;
    EXPECT_FALSE(FlashDecodeSupported(dense));
    PagedKvAppendConfig bad;
    bad.dtype = bf;
    bad.quantize_from = ScalarType::f32;
    EXPECT_EQ(EmitPagedKvAppend(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  // Not with a mask or an HND cache; index types i32/i64 only.
  DecodeConfig c;
  c.paged = true;
  c.has_mask = true;
  EXPECT_FALSE(FlashDecodeSupported(c));
  c.has_mask = false;
  c.block_table = ScalarType::f32;
  EXPECT_FALSE(FlashDecodeSupported(c));
  PagedKvAppendConfig ac;
  ac.seq_lens = ScalarType::i8;
  EXPECT_EQ(EmitPagedKvAppend(ac).status().code(), absl::StatusCode::kInvalidArgument);
}
