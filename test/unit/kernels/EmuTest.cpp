//===- EmuTest.cpp - run generated kernels on the CPU emulator -------------===//
//
// Compiles the generated kernel (without the device preamble) as host C++
// against emu/CudaEmu.h with the system C++ compiler, loads it, runs it on
// small shapes and compares with CpuReference.h. Skips when no compiler is
// found (set LLMC_EMU_CXX to choose one).
//
//===----------------------------------------------------------------------===//

#include "GeneratorStatus.h"
#include "CpuReference.h"
#include "EmuSupport.h"
#include "NvrtcHelper.h"
#include "llmc/Target/CUDA/KernelLibrary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <random>

using namespace llmc::cuda;
using namespace llmc::test;
using llmc::ref::FromBf16;
using llmc::ref::ToBf16;

namespace {

std::vector<uint16_t> ToBf16Vec(std::vector<float> &v) {  // rounds v in place too
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    r[i] = ToBf16(v[i]);
    v[i] = FromBf16(r[i]);
  }
  return r;
}

const char *kAttnStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, T* out, const T* q, const T* k, const T* v,
                          const MaskT* mask, long long B, long long Sq, long long Skv, int Hq, int Hkv,
                          float scale, long long msb, long long msh, long long msq) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, q, k, v, mask, B, Sq, Skv, Hq, Hkv, scale, msb, msh, msq); });
}
)";

struct AttnCase {
  int64_t d, batch, sq, skv, hq, hkv;
  bool causal, mask;
  bool simple;
  const char *tile = nullptr;  // AttentionTileName form; nullptr = library default
  bool hnd = false;            // k/v [B, Hkv, Skv, D]
};

// [B, S, H, D] -> [B, H, S, D].
std::vector<float> ToHnd(const std::vector<float> &x, int64_t b, int64_t s, int64_t h, int64_t d) {
  std::vector<float> y(x.size());
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < s; ++j)
      for (int64_t k = 0; k < h; ++k)
        for (int64_t e = 0; e < d; ++e) y[((i * h + k) * s + j) * d + e] = x[((i * s + j) * h + k) * d + e];
  return y;
}

void RunAttention(const AttnCase &c) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  AttentionConfig cfg;
  cfg.dtype = c.simple ? ScalarType::f32 : ScalarType::bf16;
  cfg.head_dim = c.d;
  cfg.causal = c.causal;
  cfg.has_mask = c.mask;
  cfg.mask = ScalarType::f32;
  cfg.kv_hnd = c.hnd;
  if (c.tile) {
    std::string err;
    ASSERT_TRUE(ParseAttentionTile(c.tile, &cfg.tile, &err)) << err;
    ASSERT_TRUE(AttentionTileSupported(cfg, &err)) << err;
  }
  const KernelCode k = Unwrap(EmitAttention(cfg));
  ASSERT_EQ(AttentionUsesTensorCores(cfg), !c.simple);
  using Fn = void (*)(Dim3, Dim3, unsigned, void *, const void *, const void *, const void *, const float *,
                      long long, long long, long long, int, int, float, long long, long long, long long);
  auto fn = reinterpret_cast<Fn>(BuildEmu(k, kAttnStub));
  ASSERT_NE(fn, nullptr);
  auto q = Randn(c.batch * c.sq * c.hq * c.d, 1), kk = Randn(c.batch * c.skv * c.hkv * c.d, 2),
       v = Randn(c.batch * c.skv * c.hkv * c.d, 3);
  // mask [B, 1, Sq, Skv] broadcast over heads; some -inf, incl. a fully masked row 1
  std::vector<float> mask;
  if (c.mask) {
    mask = Randn(c.batch * c.sq * c.skv, 4);
    for (int64_t i = 0; i < (int64_t)mask.size(); i += 7) mask[i] = -INFINITY;
    for (int64_t j = 0; j < c.skv; ++j) mask[1 * c.skv + j] = -INFINITY;
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  const LaunchDims ld = Unwrap(AttentionLaunch(cfg, c.batch, c.sq, c.hq));
  std::vector<float> out(q.size());
  // The kernel's key/value (HND when asked); the reference reads NHD kk, v.
  std::vector<float> kin = c.hnd ? ToHnd(kk, c.batch, c.skv, c.hkv, c.d) : kk,
                     vin = c.hnd ? ToHnd(v, c.batch, c.skv, c.hkv, c.d) : v;
  if (c.simple) {
    fn(G(ld), B(ld), ld.smem, out.data(), q.data(), kin.data(), vin.data(), c.mask ? mask.data() : nullptr,
       c.batch, c.sq, c.skv, c.hq, c.hkv, scale, c.sq * c.skv, 0, c.skv);
  } else {
    auto qb = ToBf16Vec(q), kb = ToBf16Vec(kin), vb = ToBf16Vec(vin);
    std::vector<uint16_t> ob(q.size());
    fn(G(ld), B(ld), ld.smem, ob.data(), qb.data(), kb.data(), vb.data(), c.mask ? mask.data() : nullptr, c.batch,
       c.sq, c.skv, c.hq, c.hkv, scale, c.sq * c.skv, 0, c.skv);
    for (size_t i = 0; i < ob.size(); ++i) out[i] = FromBf16(ob[i]);
  }
  const auto ref = llmc::ref::AttentionRef(q, kk, v, c.mask ? &mask : nullptr, c.batch, c.sq, c.skv, c.skv, c.hq,
                                           c.hkv, c.d, c.causal, scale, c.sq * c.skv, 0, c.skv);
  const double tol = c.simple ? 1e-5 : 2e-2;
  double max_err = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out[i])) << k.name << " element " << i;
    max_err = std::max(max_err, std::fabs((double)out[i] - ref[i]));
  }
  EXPECT_LT(max_err, tol) << k.name;
}

} // namespace

TEST(Emu, FlashAttentionD80GqaCausal) { RunAttention({80, 1, 70, 130, 3, 1, true, false, false}); }
TEST(Emu, FlashAttentionD64MaskSqGtSkv) { RunAttention({64, 2, 67, 20, 2, 2, true, true, false}); }
TEST(Emu, FlashAttentionD128NonCausal) { RunAttention({128, 1, 17, 70, 2, 1, false, false, false}); }
TEST(Emu, FlashAttentionD256Causal) { RunAttention({256, 1, 40, 40, 1, 1, true, false, false}); }
// Tilings: each (block_m, warps) pair, block_n 32/64/128, both pipelines and grid
// orders, over head dims 64..256, causal and not, GQA groups 1/3/4 (3 is not a
// power of two), query lengths 1, 7, 127, 129, 300 (partial tiles at both ends,
// Sq != Skv so the causal diagonal is offset).
struct TileCase {
  const char *tile;
  AttnCase shape;
};
class EmuTile : public ::testing::TestWithParam<TileCase> {};
TEST_P(EmuTile, MatchesReference) {
  AttnCase c = GetParam().shape;
  c.tile = GetParam().tile;
  RunAttention(c);
}
INSTANTIATE_TEST_SUITE_P(
    Flash, EmuTile,
    ::testing::Values(
        TileCase{"bm64_bn64_w4_s1_gh", {128, 1, 129, 129, 2, 2, true, false, false}},
        TileCase{"bm64_bn64_w4_s2", {128, 1, 129, 140, 3, 1, true, false, false}},
        TileCase{"bm64_bn32_w4_s2", {64, 2, 7, 7, 4, 1, true, false, false}},
        TileCase{"bm64_bn128_w4_s2", {96, 1, 127, 300, 2, 2, false, false, false}},
        TileCase{"bm64_bn128_w4_s1", {64, 1, 300, 300, 2, 1, true, false, false}},
        TileCase{"bm128_bn64_w4_s2", {128, 1, 300, 300, 6, 2, true, false, false}},
        TileCase{"bm128_bn64_w4_s1", {80, 1, 129, 129, 3, 3, true, false, false}},
        TileCase{"bm128_bn32_w4_s2_gh", {128, 1, 127, 200, 4, 1, false, false, false}},
        TileCase{"bm128_bn64_w8_s2", {128, 1, 300, 300, 2, 1, true, false, false}},
        TileCase{"bm128_bn128_w8_s2", {64, 1, 129, 129, 4, 4, true, false, false}},
        TileCase{"bm128_bn128_w8_s1", {128, 1, 1, 129, 3, 1, true, false, false}},
        TileCase{"bm128_bn32_w8_s1_gh", {96, 1, 7, 300, 2, 1, true, false, false}},
        TileCase{"bm128_bn64_w8_s2", {256, 1, 129, 129, 1, 1, true, false, false}},
        TileCase{"bm64_bn64_w4_s1", {256, 1, 70, 130, 2, 1, false, false, false}},
        TileCase{"bm128_bn64_w4_s2", {64, 2, 67, 20, 2, 2, true, true, false}},
        TileCase{"bm128_bn64_w8_s1", {128, 1, 130, 130, 2, 2, false, true, false}}),
    [](const ::testing::TestParamInfo<TileCase> &i) {
      const AttnCase &c = i.param.shape;
      return std::string(i.param.tile) + "_d" + std::to_string(c.d) + "_sq" + std::to_string(c.sq) + "_skv" +
             std::to_string(c.skv) + "_g" + std::to_string(c.hq / c.hkv) + (c.causal ? "_causal" : "") +
             (c.mask ? "_mask" : "");
    });

TEST(Emu, SimpleAttentionF32D96) { RunAttention({96, 1, 7, 7, 9, 3, true, false, true}); }
TEST(Emu, SimpleAttentionF32D80Mask) { RunAttention({80, 2, 5, 9, 4, 2, false, true, true}); }
// Key/value in HND layout [B, Hkv, Skv, D] (kv_hnd): a gpt-fast prefill over
// its cache (Sq < Skv, mask, GQA) on both kernels and both pipelines.
TEST(Emu, FlashAttentionHndMaskGqa) {
  RunAttention({128, 2, 67, 130, 4, 2, false, true, false, nullptr, true});
}
TEST(Emu, FlashAttentionHndCausalOneStage) {
  RunAttention({64, 1, 129, 129, 3, 1, true, false, false, "bm64_bn64_w4_s1", true});
}
TEST(Emu, SimpleAttentionF32HndMask) { RunAttention({80, 2, 5, 9, 4, 2, false, true, true, nullptr, true}); }

TEST(Emu, RMSNormResidualAndSoftmax) {
  if (!HaveCompiler()) GTEST_SKIP();
  {
    RMSNormConfig cfg;
    cfg.in = cfg.weight = cfg.out = ScalarType::f32;
    cfg.hidden = 1001;  // scalar path, block per row
    cfg.fused_residual = true;
    cfg.eps = 1e-5f;
    auto k = Unwrap(EmitRMSNorm(cfg));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* out, float* ro, const float* x,
                          const float* r, const float* w, long long rows) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, ro, x, r, w, rows); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, float *, float *, const float *, const float *, const float *,
                        long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t rows = 3, n = 1001;
    auto x = Randn(rows * n, 8, 300.0f), r = Randn(rows * n, 9), w = Randn(n, 10);
    std::vector<float> out(rows * n), ro(rows * n), ref_out, ref_ro;
    LaunchDims d = Unwrap(RMSNormLaunch(cfg, rows));
    fn(G(d), B(d), d.smem, out.data(), ro.data(), x.data(), r.data(), w.data(), rows);
    llmc::ref::NormRef(false, x, &r, &w, nullptr, rows, n, 1e-5f, [](float v) { return v; }, &ref_out, &ref_ro);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], ref_out[i], 1e-4 * (1 + std::fabs(ref_out[i]))) << i;
      ASSERT_EQ(ro[i], ref_ro[i]) << i;
    }
  }
  for (int64_t n : {100, 3000}) {
    SoftmaxConfig cfg;
    cfg.in = cfg.out = ScalarType::f32;
    cfg.n = n;
    cfg.has_mask = true;
    auto k = Unwrap(EmitSoftmax(cfg));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* out, const float* x, const float* m,
                          float scale, long long rows, long long mrows) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, x, m, scale, rows, mrows); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, float *, const float *, const float *, float, long long, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t rows = 5, mrows = 2;
    auto x = Randn(rows * n, 11, 3.0f), m = Randn(mrows * n, 12);
    for (int64_t j = 0; j < n; ++j) x[2 * n + j] = -INFINITY;  // row 2 all -inf -> NaN
    m[5] = -INFINITY;
    std::vector<float> out(rows * n);
    LaunchDims d = Unwrap(SoftmaxLaunch(cfg, rows));
    fn(G(d), B(d), d.smem, out.data(), x.data(), m.data(), 0.7f, rows, mrows);
    auto ref = llmc::ref::SoftmaxRef(x, &m, rows, n, mrows, 0.7f);
    for (size_t i = 0; i < out.size(); ++i) {
      if (std::isnan(ref[i])) {
        ASSERT_TRUE(std::isnan(out[i])) << i;
      } else {
        ASSERT_NEAR(out[i], ref[i], 1e-6 + 1e-5 * ref[i]) << "n=" << n << " i=" << i;
      }
    }
  }
}

// Rows above 65536 elements are too long for registers: the norm kernels
// stream them (a loop per pass, re-reading the row) instead of unrolling a
// register array of the row width. Same results as the reference, and the
// fused residual sum written exactly.
TEST(Emu, StreamedNormsOfLongRows) {
  if (!HaveCompiler()) GTEST_SKIP();
  for (int64_t n : {70000, 65537}) {  // 16-byte vectors of bf16; odd: scalar
    RMSNormConfig cfg;
    cfg.in = cfg.weight = cfg.out = ScalarType::bf16;
    cfg.hidden = n;
    cfg.fused_residual = true;
    cfg.eps = 1e-5f;
    auto k = Unwrap(EmitRMSNorm(cfg));
    ASSERT_NE(k.source.find("streamed"), std::string::npos) << k.name;
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, bf16* out, bf16* ro, const bf16* x,
                          const bf16* r, const bf16* w, long long rows) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, ro, x, r, w, rows); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, uint16_t *, uint16_t *, const uint16_t *, const uint16_t *,
                        const uint16_t *, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t rows = 2;
    auto x = Randn(rows * n, 30, 3.0f), r = Randn(rows * n, 31), w = Randn(n, 32);
    auto xb = ToBf16Vec(x), rb = ToBf16Vec(r), wb = ToBf16Vec(w);
    std::vector<uint16_t> out(rows * n), ro(rows * n);
    LaunchDims d = Unwrap(RMSNormLaunch(cfg, rows));
    EXPECT_EQ(d.block[0], 1024u);
    EXPECT_EQ(d.grid[0], 2u);
    fn(G(d), B(d), d.smem, out.data(), ro.data(), xb.data(), rb.data(), wb.data(), rows);
    std::vector<float> ref_out, ref_ro;
    llmc::ref::NormRef(false, x, &r, &w, nullptr, rows, n, 1e-5f,
                       [](float v) { return FromBf16(ToBf16(v)); }, &ref_out, &ref_ro);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(FromBf16(ro[i]), ref_ro[i]) << "n=" << n << " i=" << i;
      ASSERT_NEAR(FromBf16(out[i]), ref_out[i], 1e-2 * (1 + std::fabs(ref_out[i]))) << "n=" << n << " i=" << i;
    }
  }
  {
    LayerNormConfig cfg;
    cfg.in = cfg.weight = cfg.out = ScalarType::f32;
    cfg.hidden = 66000;  // 16500 vectors of 4: 17 per thread, streamed
    auto k = Unwrap(EmitLayerNorm(cfg));
    ASSERT_NE(k.source.find("streamed"), std::string::npos) << k.name;
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* out, const float* x, const float* w,
                          const float* bias, long long rows) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, x, w, bias, rows); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, float *, const float *, const float *, const float *, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t rows = 3, n = cfg.hidden;
    auto x = Randn(rows * n, 33, 300.0f), w = Randn(n, 34), bias = Randn(n, 35);
    for (int64_t j = 0; j < n; ++j) x[n + j] = 1e-6f;  // variance ~ 0 << eps
    std::vector<float> out(rows * n), ref;
    LaunchDims d = Unwrap(LayerNormLaunch(cfg, rows));
    fn(G(d), B(d), d.smem, out.data(), x.data(), w.data(), bias.data(), rows);
    llmc::ref::NormRef(true, x, nullptr, &w, &bias, rows, n, cfg.eps, [](float v) { return v; }, &ref, nullptr);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-3 * (1 + std::fabs(ref[i]))) << i;
  }
}

TEST(Emu, RoPEHalfAndInterleavedWithPerBatchOffset) {
  if (!HaveCompiler()) GTEST_SKIP();
  for (bool inter : {false, true}) {
    RoPEConfig cfg;
    cfg.dtype = ScalarType::f32;
    cfg.num_heads = 3;
    cfg.head_dim = 80;
    cfg.rotary_dim = 64;
    cfg.interleaved = inter;
    cfg.offset = PositionSource::kPerBatchI64;
    auto k = Unwrap(EmitRoPE(cfg));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* out, const float* x, const void* off,
                          long long B, long long S) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, x, off, B, S); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, float *, const float *, const void *, long long, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t Bt = 2, S = 5, H = 3, D = 80;
    auto x = Randn(Bt * S * H * D, 13);
    std::vector<int64_t> off = {0, 299};
    std::vector<float> out = x;  // in place
    LaunchDims d = Unwrap(RoPELaunch(cfg, Bt, S));
    fn(G(d), B(d), d.smem, out.data(), out.data(), off.data(), Bt, S);
    auto ref = llmc::ref::RoPERef(x, Bt, S, H, D, 64, inter, 10000.0f, off);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5) << i;
  }
}

// The table form of RoPE (llm.rope with cos/sin) against a float64 reference:
// x f32 or bf16, tables f32 or bf16, both pairings, head dims 64 and 128, S = 7,
// H = 5 (more heads than head groups at D = 128), tables shared by the batch
// (stride 0) or one per batch, in place and out of place.
RoPETableConfig RoPETable(ScalarType x, ScalarType table, int64_t heads, int64_t head_dim, bool interleaved) {
  RoPETableConfig cfg;
  cfg.dtype = x;
  cfg.table = table;
  cfg.num_heads = heads;
  cfg.head_dim = head_dim;
  cfg.interleaved = interleaved;
  return cfg;
}

// cos/sin tables of n angles in about [-pi, pi), as real tables hold.
void RandomTables(int64_t n, uint32_t seed, std::vector<float> *cos, std::vector<float> *sin) {
  auto ang = Randn(n, seed, 1.7f);
  cos->resize(n);
  sin->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    (*cos)[i] = std::cos(ang[i]);
    (*sin)[i] = std::sin(ang[i]);
  }
}

// The emulator entry of a plain table RoPE kernel and its type.
constexpr const char *kRoPETableStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, T* out, const T* x, const TabT* c,
                          const TabT* s, long long B, long long S, long long tbs) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, x, c, s, B, S, tbs); });
})";
using RoPETableFn = void (*)(Dim3, Dim3, unsigned, void *, const void *, const void *, const void *, long long,
                             long long, long long);

TEST(Emu, RoPETableMatchesFloat64Reference) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  const char *stub = kRoPETableStub;
  using Fn = RoPETableFn;
  const std::pair<ScalarType, ScalarType> types[] = {
      {ScalarType::f32, ScalarType::f32}, {ScalarType::bf16, ScalarType::f32}, {ScalarType::bf16, ScalarType::bf16}};
  const int64_t Bt = 2, S = 7, H = 5;
  uint32_t seed = 100;
  for (auto [xt, tt] : types)
    for (int64_t D : {64, 128})
      for (bool inter : {false, true}) {
        const RoPETableConfig cfg = RoPETable(xt, tt, H, D, inter);
        auto k = Unwrap(EmitRoPETable(cfg));
        auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
        ASSERT_NE(fn, nullptr) << k.name;
        for (bool perBatch : {false, true}) {
          const int64_t n = Bt * S * H * D, tn = (perBatch ? Bt : 1) * S * D;
          auto x = Randn(n, seed++);
          std::vector<float> c, sn;
          RandomTables(tn, seed++, &c, &sn);
          const bool bfx = xt == ScalarType::bf16, bft = tt == ScalarType::bf16;
          // Device-side storage; the float copies become the rounded values.
          std::vector<uint16_t> xb, cb, sb;
          if (bfx) xb = ToBf16Vec(x);
          if (bft) {
            cb = ToBf16Vec(c);
            sb = ToBf16Vec(sn);
          }
          const int64_t stride = perBatch ? S * D : 0;
          auto ref = llmc::ref::RoPETableRef(x, c, sn, Bt, S, H, D, stride, inter);
          const bool inPlace = perBatch;  // out aliases x in half of the runs
          std::vector<float> outF(n, NAN), xF = x;
          std::vector<uint16_t> outB(n, 0x7fc0), xB = xb;  // NaN: an unwritten element fails
          void *out = bfx ? (void *)(inPlace ? xB.data() : outB.data()) : (void *)(inPlace ? xF.data() : outF.data());
          const void *xin = bfx ? (const void *)xB.data() : (const void *)xF.data();
          const void *cp = bft ? (const void *)cb.data() : (const void *)c.data();
          const void *sp = bft ? (const void *)sb.data() : (const void *)sn.data();
          LaunchDims d = Unwrap(RoPETableLaunch(cfg, Bt, S));
          fn(G(d), B(d), d.smem, out, xin, cp, sp, Bt, S, stride);
          double num = 0, den = 0;
          for (int64_t i = 0; i < n; ++i) {
            const float got = bfx ? FromBf16(static_cast<const uint16_t *>(out)[i]) : static_cast<const float *>(out)[i];
            ASSERT_TRUE(std::isfinite(got)) << k.name << " element " << i;
            num += (got - ref[i]) * (got - ref[i]);
            den += ref[i] * ref[i];
          }
          const double rel = std::sqrt(num / den), tol = bfx ? 1e-2 : 1e-5;
          EXPECT_LT(rel, tol) << k.name << (perBatch ? " per-batch tables" : " shared tables")
                              << (inPlace ? ", in place" : "");
          // Rounded once to bf16: each element is off by at most the unit
          // roundoff 2^-9 of its value (plus fp32 noise), so the relative L2
          // stays below 2^-9 ~ 1.95e-3.
          if (bfx) {
            EXPECT_LT(rel, 2.5e-3) << k.name;
          }
        }
      }
}

// The plain half-split table form's vector path (16-byte loads of x and of
// the tables, aligned pointers) gives the scalar path's bits: the same
// kernel on buffers one element off alignment takes the scalar loop. f32
// and bf16 x with f32 and bf16 tables, D = 64 and 128, H = 5, per-batch
// tables. The interleaved form has no vector path.
TEST(Emu, RoPETableVectorPathMatchesScalarBits) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  const char *stub = kRoPETableStub;
  using Fn = RoPETableFn;
  EXPECT_EQ(Unwrap(EmitRoPETable(RoPETable(ScalarType::bf16, ScalarType::bf16, 5, 128, true))).source.find(
                "Vector path"),
            std::string::npos);
  const std::pair<ScalarType, ScalarType> types[] = {
      {ScalarType::f32, ScalarType::f32}, {ScalarType::bf16, ScalarType::f32}, {ScalarType::bf16, ScalarType::bf16}};
  const int64_t Bt = 2, S = 7, H = 5;
  for (auto [xt, tt] : types)
    for (int64_t D : {64, 128}) {
      const RoPETableConfig cfg = RoPETable(xt, tt, H, D, false);
      auto k = Unwrap(EmitRoPETable(cfg));
      EXPECT_NE(k.source.find("Vector path"), std::string::npos) << k.name;
      auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
      ASSERT_NE(fn, nullptr) << k.name;
      const int xs = ScalarSize(xt), ts = ScalarSize(tt);
      const int64_t n = Bt * S * H * D, tn = Bt * S * D;
      std::vector<float> x = Randn(n, 201), c, sn;
      RandomTables(tn, 202, &c, &sn);
      // Byte images of x and the tables in their types.
      auto image = [](const std::vector<float> &v, int size) {
        std::vector<uint8_t> b(v.size() * size);
        for (size_t i = 0; i < v.size(); ++i) {
          if (size == 4) std::memcpy(&b[i * 4], &v[i], 4);
          else {
            const uint16_t h = ToBf16(v[i]);
            std::memcpy(&b[i * 2], &h, 2);
          }
        }
        return b;
      };
      const std::vector<uint8_t> xi = image(x, xs), ci = image(c, ts), si = image(sn, ts);
      std::vector<uint8_t> outs[2];
      for (int off : {0, 1}) {  // elements off 16-byte alignment
        // 16-byte aligned storage, the data from element `off` on.
        struct alignas(16) Chunk { uint8_t b[16]; };
        std::vector<Chunk> xbuf(n * xs / 16 + 2), cbuf(tn * ts / 16 + 2), sbuf(tn * ts / 16 + 2),
            obuf(n * xs / 16 + 2);
        uint8_t *xp = reinterpret_cast<uint8_t *>(xbuf.data()) + off * xs;
        uint8_t *cp = reinterpret_cast<uint8_t *>(cbuf.data()) + off * ts;
        uint8_t *sp = reinterpret_cast<uint8_t *>(sbuf.data()) + off * ts;
        uint8_t *op = reinterpret_cast<uint8_t *>(obuf.data()) + off * xs;
        std::memcpy(xp, xi.data(), xi.size());
        std::memcpy(cp, ci.data(), ci.size());
        std::memcpy(sp, si.data(), si.size());
        const LaunchDims d = Unwrap(RoPETableLaunch(cfg, Bt, S));
        fn(G(d), B(d), d.smem, op, xp, cp, sp, Bt, S, S * D);
        outs[off].assign(op, op + n * xs);
      }
      EXPECT_EQ(outs[0], outs[1]) << k.name;
      // And the values are RoPE's (the float64 reference on the stored inputs).
      std::vector<float> xr(n), cr(tn), sr(tn);
      for (int64_t i = 0; i < n; ++i) xr[i] = xs == 4 ? x[i] : FromBf16(ToBf16(x[i]));
      for (int64_t i = 0; i < tn; ++i) {
        cr[i] = ts == 4 ? c[i] : FromBf16(ToBf16(c[i]));
        sr[i] = ts == 4 ? sn[i] : FromBf16(ToBf16(sn[i]));
      }
      const auto ref = llmc::ref::RoPETableRef(xr, cr, sr, Bt, S, H, D, S * D, false);
      double num = 0, den = 0;
      for (int64_t i = 0; i < n; ++i) {
        float got;
        if (xs == 4) std::memcpy(&got, &outs[0][i * 4], 4);
        else {
          uint16_t h;
          std::memcpy(&h, &outs[0][i * 2], 2);
          got = FromBf16(h);
        }
        num += (got - ref[i]) * (got - ref[i]);
        den += ref[i] * ref[i];
      }
      EXPECT_LT(std::sqrt(num / den), xs == 4 ? 1e-6 : 2.5e-3) << k.name;
    }
}

// RoPE written straight into a KV cache (cache_write): a prefill of S = 3
// tokens for B = 2 into [B, H, R, D] (HND, gpt-fast / HF static cache) and
// [B, R, H, D] (NHD) caches at rows given by an index tensor with a negative
// and an out-of-range entry. Every indexed row equals RoPE's float64
// reference (rounded once to bf16), every other cache element keeps its
// bytes.
TEST(Emu, RoPETableCacheWriteScattersIntoTheCache) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, T* out, const T* x, const TabT* c,
                          const TabT* s, long long B, long long S, long long tbs, const IdxT* idx,
                          long long rows, long long ob, long long orow, long long oh) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, x, c, s, B, S, tbs, idx, rows, ob, orow, oh); });
})";
  using Fn = void (*)(Dim3, Dim3, unsigned, void *, const void *, const void *, const void *, long long,
                      long long, long long, const void *, long long, long long, long long, long long);
  const int64_t Bn = 2, S = 4, H = 3, D = 64, R = 9;
  // Token s goes to cache row want_row[s]: -2 is row R - 2; 9 is outside
  // [0, R) and is not written.
  const std::vector<int32_t> idx32 = {5, -2, 9, 0};
  const std::vector<int64_t> idx64(idx32.begin(), idx32.end());
  const int64_t want_row[] = {5, R - 2, -1, 0};
  uint32_t seed = 500;
  for (ScalarType it : {ScalarType::i32, ScalarType::i64})
    for (bool inter : {false, true})
      for (bool hnd : {true, false}) {
        RoPETableConfig cfg = RoPETable(ScalarType::bf16, ScalarType::f32, H, D, inter);
        cfg.cache_write = true;
        cfg.index = it;
        auto k = Unwrap(EmitRoPETable(cfg));
        auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
        ASSERT_NE(fn, nullptr) << k.name;
        auto x = Randn(Bn * S * H * D, seed++);
        std::vector<float> c, sn;
        RandomTables(S * D, seed++, &c, &sn);
        auto xb = ToBf16Vec(x);
        auto ref = llmc::ref::RoPETableRef(x, c, sn, Bn, S, H, D, 0, inter);
        auto cacheF = Randn(Bn * R * H * D, seed++);
        auto cache = ToBf16Vec(cacheF);
        const auto before = cache;
        // Strides of (b, row, h) in the cache.
        const int64_t ob = R * H * D, orow = hnd ? D : H * D, oh = hnd ? R * D : D;
        LaunchDims d = Unwrap(RoPETableLaunch(cfg, Bn, S));
        const void *idx = it == ScalarType::i32 ? (const void *)idx32.data() : (const void *)idx64.data();
        fn(G(d), B(d), d.smem, cache.data(), xb.data(), c.data(), sn.data(), Bn, S, 0, idx, R, ob, orow, oh);
        std::vector<bool> written(cache.size(), false);
        double num = 0, den = 0;
        for (int64_t b = 0; b < Bn; ++b)
          for (int64_t s = 0; s < S; ++s)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t e = 0; e < D; ++e) {
                if (want_row[s] < 0) continue;
                const int64_t at = b * ob + want_row[s] * orow + h * oh + e;
                const double want = ref[((b * S + s) * H + h) * D + e];
                const float got = FromBf16(cache[at]);
                ASSERT_TRUE(std::isfinite(got)) << k.name << " token " << s << " head " << h;
                num += (got - want) * (got - want);
                den += want * want;
                written[at] = true;
              }
        EXPECT_LT(std::sqrt(num / den), 2.5e-3) << k.name << (hnd ? " HND" : " NHD");
        for (size_t i = 0; i < cache.size(); ++i)
          if (!written[i]) ASSERT_EQ(cache[i], before[i]) << k.name << " element " << i << " was written";
      }
}

// q, k and v of a decode or prefill step in one launch (cache_write with
// q_heads and v_write): q (GQA: 2x k's heads) rotated into a dense output
// whatever the index, k rotated into its cache and v copied into its cache
// at the rows of the index tensor; an out-of-range index leaves both caches'
// rows alone but still writes q.
TEST(Emu, RoPETableCacheWriteWithQAndV) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, T* kc, const T* k, const TabT* c,
                          const TabT* s, long long B, long long S, const IdxT* idx, long long rows,
                          long long ob, long long orow, long long oh, T* qo, const T* q, T* vc,
                          const T* v) {
  emu::Launch(g, b, smem, [&] { KERNEL(kc, k, c, s, B, S, 0, idx, rows, ob, orow, oh, qo, q, vc, v); });
})";
  using Fn = void (*)(Dim3, Dim3, unsigned, void *, const void *, const void *, const void *, long long,
                      long long, const void *, long long, long long, long long, long long, void *,
                      const void *, void *, const void *);
  const int64_t Bn = 2, S = 3, H = 2, Hq = 4, D = 64, R = 7;
  const std::vector<int64_t> idx = {4, 9, -1};  // 9: not written; -1: row R - 1
  const int64_t want_row[] = {4, -1, R - 1};
  RoPETableConfig cfg = RoPETable(ScalarType::bf16, ScalarType::f32, H, D, false);
  cfg.cache_write = true;
  cfg.q_heads = Hq;
  cfg.v_write = true;
  auto kern = Unwrap(EmitRoPETable(cfg));
  EXPECT_EQ(kern.name, "llmc_rope_table_bf16_tabf32_h2_d64_half_cachewrite_i64_q4_v");
  auto fn = reinterpret_cast<Fn>(BuildEmu(kern, stub));
  ASSERT_NE(fn, nullptr) << kern.name;
  auto k = Randn(Bn * S * H * D, 900), q = Randn(Bn * S * Hq * D, 901), v = Randn(Bn * S * H * D, 902);
  std::vector<float> c, sn;
  RandomTables(S * D, 903, &c, &sn);
  auto kb = ToBf16Vec(k), qb = ToBf16Vec(q), vb = ToBf16Vec(v);
  auto kref = llmc::ref::RoPETableRef(k, c, sn, Bn, S, H, D, 0, false);
  auto qref = llmc::ref::RoPETableRef(q, c, sn, Bn, S, Hq, D, 0, false);
  auto kcF = Randn(Bn * H * R * D, 904), vcF = Randn(Bn * H * R * D, 905);
  auto kc = ToBf16Vec(kcF), vc = ToBf16Vec(vcF);
  const auto kc0 = kc, vc0 = vc;
  std::vector<uint16_t> qo(qb.size(), 0x7fc0);  // NaN: an unwritten element fails
  const int64_t ob = H * R * D, orow = D, oh = R * D;  // [B, H, R, D] caches
  LaunchDims d = Unwrap(RoPETableLaunch(cfg, Bn, S));
  EXPECT_EQ(d.grid[1], 3u);
  fn(G(d), B(d), d.smem, kc.data(), kb.data(), c.data(), sn.data(), Bn, S, idx.data(), R, ob, orow, oh,
     qo.data(), qb.data(), vc.data(), vb.data());
  double num = 0, den = 0;
  for (size_t i = 0; i < qo.size(); ++i) {
    const float got = FromBf16(qo[i]);
    ASSERT_TRUE(std::isfinite(got)) << "q element " << i;
    num += (got - qref[i]) * (got - qref[i]);
    den += qref[i] * qref[i];
  }
  EXPECT_LT(std::sqrt(num / den), 2.5e-3) << "q";
  std::vector<bool> written(kc.size(), false);
  num = den = 0;
  for (int64_t b = 0; b < Bn; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t e = 0; e < D; ++e) {
          if (want_row[s] < 0) continue;
          const int64_t at = b * ob + want_row[s] * orow + h * oh + e;
          const int64_t src = ((b * S + s) * H + h) * D + e;
          const float got = FromBf16(kc[at]);
          num += (got - kref[src]) * (got - kref[src]);
          den += kref[src] * kref[src];
          ASSERT_EQ(vc[at], vb[src]) << "v copied bit for bit: b " << b << " s " << s << " h " << h;
          written[at] = true;
        }
  EXPECT_LT(std::sqrt(num / den), 2.5e-3) << "k";
  for (size_t i = 0; i < kc.size(); ++i)
    if (!written[i]) {
      ASSERT_EQ(kc[i], kc0[i]) << "k cache element " << i << " was written";
      ASSERT_EQ(vc[i], vc0[i]) << "v cache element " << i << " was written";
    }
}

TEST(Emu, ElementwiseBroadcastAndVectorPaths) {
  if (!HaveCompiler()) GTEST_SKIP();
  // out0 = silu(a) * b (+ row bias c) as bf16, out1 = (a > c) as i1
  for (InputLayout lay : {InputLayout::kContiguous, InputLayout::kRowBroadcast, InputLayout::kStrided}) {
    ElementwiseProgram p;
    p.inputs = {{ScalarType::f32, InputLayout::kContiguous}, {ScalarType::f32, InputLayout::kScalar},
                {ScalarType::f32, lay}};
    p.nodes = {{EwOp::silu, {-1}, ScalarType::f32},
               {EwOp::mul, {0, -2}, ScalarType::f32},
               {EwOp::add, {1, -3}, ScalarType::f32},
               {EwOp::compare, {-1, -3}, ScalarType::i1, 0, CmpPredicate::gt}};
    p.outputs = {{2, ScalarType::bf16}, {3, ScalarType::i1}};
    auto k = Unwrap(EmitElementwise(p));
    const bool shape = ElementwiseNeedsShape(p);
    std::string stub = shape ? R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, bf16* o0, uint8_t* o1, const float* a,
                          const float* s, const float* c, long long n, const EwShape* sh) {
  emu::Launch(g, b, smem, [&] { KERNEL(o0, o1, a, s, c, n, *sh); });
})"
                             : R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, bf16* o0, uint8_t* o1, const float* a,
                          const float* s, const float* c, long long n, const void*) {
  emu::Launch(g, b, smem, [&] { KERNEL(o0, o1, a, s, c, n); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, uint16_t *, uint8_t *, const float *, const float *, const float *,
                        long long, const void *);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t M = 7, N = 37, n = M * N;  // odd sizes: vector body + scalar tail
    auto a = Randn(n, 14);
    std::vector<float> s = {1.5f};
    auto c = Randn(lay == InputLayout::kContiguous ? n : N, 15);
    std::vector<uint16_t> o0(n);
    std::vector<uint8_t> o1(n);
    std::vector<int64_t> packed;
    if (shape) packed = Unwrap(PackElementwiseShape(p, {M, N}, {{}, {}, {0, 1}}));
    LaunchDims d = Unwrap(ElementwiseLaunch(p, n));
    d.grid[0] = 2;  // exercise the grid-stride loop
    fn(G(d), B(d), d.smem, o0.data(), o1.data(), a.data(), s.data(), c.data(), n, packed.data());
    for (int64_t i = 0; i < n; ++i) {
      const float cv = c[lay == InputLayout::kContiguous ? i : i % N];
      const float want = a[i] / (1.0f + std::exp(-a[i])) * 1.5f + cv;
      ASSERT_EQ(o0[i], ToBf16(want)) << i;  // allow no ulp difference except exp rounding
      ASSERT_EQ(o1[i], a[i] > cv ? 1 : 0) << i;
    }
  }
}

// An output that stores a cast node of its own type (bf16, f16, e4m3,
// e5m2) converts the value before the node's rounding once (fromF(nK_u)),
// where it rounded, widened and rounded again: the same bits, checked on
// the values where rounding twice could differ (NaN of either sign, +-inf,
// saturation at and past each format's largest value, ties, subnormals,
// -0), and the rounded node still feeds later math (out4 = f32(bf16(x)) + 1).
TEST(Emu, ElementwiseNarrowCastOutputsStoreOnce) {
  if (!HaveCompiler()) GTEST_SKIP();
  const ScalarType F = ScalarType::f32;
  ElementwiseProgram p;
  p.inputs = {{F, InputLayout::kContiguous}};
  p.nodes = {{EwOp::cast, {-1}, ScalarType::bf16},    // 0
             {EwOp::cast, {-1}, ScalarType::f16},     // 1
             {EwOp::cast, {-1}, ScalarType::f8e4m3},  // 2
             {EwOp::cast, {-1}, ScalarType::f8e5m2},  // 3
             {EwOp::add, {0, -2}, F}};                // 4: bf16(x) + 1
  p.inputs.push_back({F, InputLayout::kScalar});
  p.outputs = {{0, ScalarType::bf16}, {1, ScalarType::f16}, {2, ScalarType::f8e4m3},
               {3, ScalarType::f8e5m2}, {4, F}};
  const KernelCode k = Unwrap(EmitElementwise(p));
  for (const char *store : {"r0 = fromF<bf16>(n0_u)", "r1 = fromF<f16>(n1_u)",
                            "r2 = fromF<fp8e4m3>(n2_u)", "r3 = fromF<fp8e5m2>(n3_u)",
                            "r4 = fromF<float>(n4)"})
    EXPECT_NE(k.source.find(store), std::string::npos) << store << "\n" << k.source;
  const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, bf16* o0, f16* o1, fp8e4m3* o2, fp8e5m2* o3, float* o4,
                          const float* x, const float* one, long long n) {
  emu::Launch(g, b, 0, [&] { KERNEL(o0, o1, o2, o3, o4, x, one, n); });
})";
  using Fn = void (*)(Dim3, Dim3, void *, void *, void *, void *, float *, const float *,
                      const float *, long long);
  auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
  ASSERT_NE(fn, nullptr);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {std::nanf(""), -std::nanf(""), inf, -inf, 448.f, 464.f, 480.f,
                          -500.f, 57344.f, 61440.f, 1e6f, 65504.f, 65520.f, 3.4e38f,
                          0.f, -0.f, 1e-40f, -3e-39f, 0.0009765625f, 0.00146484375f,
                          1.0078125f, 1.00390625f, -2.5f, 1.5f};
  for (float v : Randn(41, 77, 300.f)) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  const float one = 1.0f;
  std::vector<uint16_t> o0(n), o1(n);
  std::vector<uint8_t> o2(n), o3(n);
  std::vector<float> o4(n);
  const LaunchDims d = Unwrap(ElementwiseLaunch(p, n));
  fn(G(d), B(d), o0.data(), o1.data(), o2.data(), o3.data(), o4.data(), x.data(), &one, n);
  for (int64_t i = 0; i < n; ++i) {
    SCOPED_TRACE("x = " + std::to_string(x[i]));
    const uint16_t b = ToBf16(x[i]);
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(FromBf16(o0[i])));
      EXPECT_EQ(o1[i] & 0x7c00u, 0x7c00u);
      EXPECT_NE(o1[i] & 0x03ffu, 0u);
      EXPECT_EQ(o2[i] & 0x7fu, 0x7fu);
      EXPECT_EQ(o3[i] & 0x7fu, 0x7fu);
      EXPECT_TRUE(std::isnan(o4[i]));
      continue;
    }
    EXPECT_EQ(o0[i], b);
    EXPECT_EQ(o1[i], llmc::ref::ToF16(x[i]));
    EXPECT_EQ(o2[i], llmc::ref::ToE4M3(x[i]));
    EXPECT_EQ(o3[i], llmc::ref::ToE5M2(x[i]));
    EXPECT_EQ(o4[i], FromBf16(b) + 1.0f);
  }
  // The same store for a non-cast node rounded at its definition
  // (round_every_node: a bf16 add) and for a cast from an integer.
  ElementwiseProgram add;
  add.inputs = {{F, InputLayout::kContiguous}, {F, InputLayout::kContiguous}};
  add.nodes = {{EwOp::add, {-1, -2}, ScalarType::bf16}};
  add.outputs = {{0, ScalarType::bf16}};
  ASSERT_TRUE(add.round_every_node);
  ElementwiseProgram fromInt;
  fromInt.inputs = {{ScalarType::i32, InputLayout::kContiguous}, {F, InputLayout::kContiguous}};
  fromInt.nodes = {{EwOp::cast, {-1}, ScalarType::bf16}};
  fromInt.outputs = {{0, ScalarType::bf16}};
  const std::vector<int32_t> ints = {0, 1, -1, 257, -257, 65535, 16777217, -2147483647 - 1, 2147483647};
  for (int form = 0; form < 2; ++form) {
    const ElementwiseProgram &q = form == 0 ? add : fromInt;
    const KernelCode kq = Unwrap(EmitElementwise(q));
    EXPECT_NE(kq.source.find("r0 = fromF<bf16>(n0_u)"), std::string::npos) << kq.source;
    const char *stub2 = R"(
extern "C" void emu_entry(dim3 g, dim3 b, bf16* o, const void* a, const float* c, long long n) {
  emu::Launch(g, b, 0, [&] { KERNEL(o, (const IN0*)a, c, n); });
})";
    std::string src2 = std::string("#define IN0 ") + (form == 0 ? "float" : "int32_t") + "\n" + stub2;
    using Fn2 = void (*)(Dim3, Dim3, void *, const void *, const float *, long long);
    auto fn2 = reinterpret_cast<Fn2>(BuildEmu(kq, src2.c_str()));
    ASSERT_NE(fn2, nullptr);
    const int64_t m = form == 0 ? n : static_cast<int64_t>(ints.size());
    const std::vector<float> y = Randn(m, 78, 3.f);
    std::vector<uint16_t> o(m);
    const LaunchDims dq = Unwrap(ElementwiseLaunch(q, m));
    fn2(G(dq), B(dq), o.data(), form == 0 ? static_cast<const void *>(x.data()) : ints.data(),
        y.data(), m);
    for (int64_t i = 0; i < m; ++i) {
      const float want = form == 0 ? x[i] + y[i] : static_cast<float>(ints[i]);
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(FromBf16(o[i]))) << i;
      else
        EXPECT_EQ(o[i], ToBf16(want)) << "form " << form << " at " << i;
    }
  }
}

// A transpose that keeps the innermost dimension ([B, S, H, D] -> [B, H, S, D],
// the attention head split and merge) takes the strided-rows vector path when
// rows and outer strides are multiples of kVec (also with an outer stride of
// 0, a broadcast over heads, and with the key dim read with stride 0: one
// value per row, repeated), and the scalar path when not (a row of 12 bf16
// elements); with a row-broadcast f32 bias and a bf16 output (kVec 4) too.
// Each variant runs with the 32-bit index math and, with
// LLMC_EW_INDEX32_LIMIT defined to 0, the 64-bit one. Bit-exact; which path
// ran is recorded by a flag the test adds to the kernel's vector block.
TEST(Emu, ElementwiseStridedRowsVectorPath) {
  if (!HaveCompiler()) GTEST_SKIP();
  for (int variant = 0; variant < 10; ++variant) {
    const bool idx64 = variant >= 5;
    const int v = variant % 5;
    const bool bias = v == 1, short_rows = v == 2, bcast_last = v == 3, bcast_heads = v == 4;
    const bool want_vector = !short_rows;
    const int64_t Bn = 2, S = 8, H = 4, D = short_rows ? 12 : 64, n = Bn * S * H * D;
    ElementwiseProgram p;
    p.inputs = {{ScalarType::bf16, InputLayout::kStrided}};
    if (bias) {
      p.inputs.push_back({ScalarType::f32, InputLayout::kRowBroadcast});
      p.nodes = {{EwOp::add, {-1, -2}, ScalarType::f32}};
    } else {
      p.nodes = {{EwOp::cast, {-1}, ScalarType::bf16}};
    }
    p.outputs = {{0, ScalarType::bf16}};
    KernelCode k = Unwrap(EmitElementwise(p));
    const std::string marker = "// ===== end of llmc preamble =====\n";
    const size_t m = k.source.find(marker), hit = k.source.find("scalar_begin = numel;");
    ASSERT_NE(m, std::string::npos);
    ASSERT_NE(hit, std::string::npos) << "no strided-rows vector block";
    k.source.replace(hit, std::strlen("scalar_begin = numel;"), "scalar_begin = numel; emu_vec_hit = 1;");
    k.source.insert(m + marker.size(), std::string("static int emu_vec_hit = 0;\n") +
                                           (idx64 ? "#define LLMC_EW_INDEX32_LIMIT 0\n" : ""));
    const std::string stub = bias ? R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, bf16* o, const bf16* x, const float* c,
                          long long n, const EwShape* sh, int* hit) {
  emu::Launch(g, b, smem, [&] { KERNEL(o, x, c, n, *sh); });
  *hit = emu_vec_hit;
})"
                                  : R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, bf16* o, const bf16* x, const float*,
                          long long n, const EwShape* sh, int* hit) {
  emu::Launch(g, b, smem, [&] { KERNEL(o, x, n, *sh); });
  *hit = emu_vec_hit;
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, uint16_t *, const uint16_t *, const float *, long long,
                        const void *, int *);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    auto xf = Randn(n, 21);
    auto x = ToBf16Vec(xf);
    auto c = Randn(D, 22);
    // Output [B, H, S, D] reads input [B, S, H, D]: strides (S*H*D, D, H*D, 1);
    // bcast_last reads element d = 0 of every row (stride 0); bcast_heads
    // reads head 0 for every h (stride 0 over H).
    std::vector<int64_t> strides = {S * H * D, bcast_heads ? 0 : D, H * D, bcast_last ? 0 : 1};
    std::vector<std::vector<int64_t>> in_strides = {strides};
    if (bias) in_strides.push_back({});
    std::vector<int64_t> packed = Unwrap(PackElementwiseShape(p, {Bn, H, S, D}, in_strides));
    LaunchDims d = Unwrap(ElementwiseLaunch(p, n));
    d.grid[0] = 1;  // 256 threads: each loops over several vectors
    std::vector<uint16_t> o(n, 0xffff);
    int vec_hit = -1;
    fn(G(d), B(d), d.smem, o.data(), x.data(), c.data(), n, packed.data(), &vec_hit);
    EXPECT_EQ(vec_hit, want_vector ? 1 : 0) << "variant " << variant;
    for (int64_t b = 0; b < Bn; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t s2 = 0; s2 < S; ++s2)
          for (int64_t e = 0; e < D; ++e) {
            const int64_t at = ((b * H + h) * S + s2) * D + e;
            const int64_t src = ((b * S + s2) * H + (bcast_heads ? 0 : h)) * D + (bcast_last ? 0 : e);
            const uint16_t want = bias ? ToBf16(xf[src] + c[e]) : x[src];
            ASSERT_EQ(o[at], want) << "variant " << variant << " element " << at;
          }
  }
}

// The tiled form: the quantizing cast of a transposed GEMM operand into
// cuBLASLt's fp8 layout, e4m3(float(x^T) / s), with a second output
// bf16(x^T + c) from a contiguous input c: x bf16 [batch, cols, rows] read
// as [batch, rows, cols], s an f32 scalar. Against the host (e4m3 saturating
// round-to-nearest-even, bf16 round-to-nearest-even) element for element,
// on partial tiles and rows whose length is no multiple of 4 (element
// stores) and on full aligned tiles (4-element stores), with nothing
// written past the outputs. The same program with kStrided in place of
// kTransposed gives the same bytes.
TEST(Emu, ElementwiseTransposedTiles) {
  if (!HaveCompiler()) GTEST_SKIP();
  struct Case { int64_t batch, rows, cols; };
  // Rows of 70 read element by element, of 128 and 72 in 16-byte vectors
  // (72: the second row tile partial, element by element).
  for (const Case c : {Case{2, 70, 67}, Case{1, 128, 192}, Case{2, 72, 67}, Case{3, 5, 2}}) {
    const ScalarType F = ScalarType::f32, BF = ScalarType::bf16, E4 = ScalarType::f8e4m3;
    const int64_t n = c.batch * c.rows * c.cols;
    std::vector<uint8_t> outs[2][2];  // [tiled, strided][e4m3, bf16]
    std::vector<float> xf = Randn(n, 31, 40.f), cf = Randn(n, 32);
    const std::vector<uint16_t> x = ToBf16Vec(xf), cv = ToBf16Vec(cf);
    const float scale = 0.0625f;
    for (int form = 0; form < 2; ++form) {
      ElementwiseProgram p;
      p.inputs = {{BF, form == 0 ? InputLayout::kTransposed : InputLayout::kStrided},
                  {F, InputLayout::kScalar},
                  {BF, InputLayout::kContiguous}};
      p.nodes = {{EwOp::cast, {-1}, F},     // 0: float(x^T)
                 {EwOp::div, {0, -2}, F},   // 1: / s
                 {EwOp::cast, {1}, E4},     // 2: e4m3
                 {EwOp::add, {0, -3}, BF}}; // 3: x^T + c
      p.outputs = {{2, E4}, {3, BF}};
      EXPECT_EQ(ElementwiseTiled(p), form == 0);
      EXPECT_TRUE(ElementwiseTiledFits(p));
      const KernelCode k = Unwrap(EmitElementwise(p));
      std::vector<uint8_t> &o8 = outs[form][0], &o16 = outs[form][1];
      o8.assign(n + 64, 0xAB);
      o16.assign((n + 64) * 2, 0xAB);
      if (form == 0) {
        const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, fp8e4m3* o8, bf16* o16, const bf16* x, const float* s,
                          const bf16* c, long long n, long long rows, long long cols) {
  emu::Launch(g, b, 0, [&] { KERNEL(o8, o16, x, s, c, n, rows, cols); });
})";
        using Fn = void (*)(Dim3, Dim3, void *, void *, const void *, const float *, const void *,
                            long long, long long, long long);
        auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
        ASSERT_NE(fn, nullptr);
        EXPECT_FALSE(ElementwiseLaunch(p, n).ok());
        const LaunchDims d = Unwrap(ElementwiseTransposedLaunch(c.batch, c.rows, c.cols));
        fn(G(d), B(d), o8.data(), o16.data(), x.data(), &scale, cv.data(), n, c.rows, c.cols);
      } else {
        const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, fp8e4m3* o8, bf16* o16, const bf16* x, const float* s,
                          const bf16* c, long long n, const EwShape* sh) {
  emu::Launch(g, b, 0, [&] { KERNEL(o8, o16, x, s, c, n, *sh); });
})";
        using Fn = void (*)(Dim3, Dim3, void *, void *, const void *, const float *, const void *,
                            long long, const void *);
        auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
        ASSERT_NE(fn, nullptr);
        const std::vector<int64_t> packed = Unwrap(PackElementwiseShape(
            p, {c.batch, c.rows, c.cols}, {{c.rows * c.cols, 1, c.rows}, {}, {}}));
        const LaunchDims d = Unwrap(ElementwiseLaunch(p, n));
        fn(G(d), B(d), o8.data(), o16.data(), x.data(), &scale, cv.data(), n, packed.data());
      }
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t r = 0; r < c.rows; ++r)
          for (int64_t col = 0; col < c.cols; ++col) {
            const int64_t at = (b * c.rows + r) * c.cols + col;
            const int64_t src = (b * c.cols + col) * c.rows + r;
            const float xv = FromBf16(x[src]);
            ASSERT_EQ(o8[at], llmc::ref::ToE4M3(xv / scale)) << "form " << form << " at " << at;
            uint16_t got;
            std::memcpy(&got, &o16[at * 2], 2);
            ASSERT_EQ(got, ToBf16(xv + FromBf16(cv[at]))) << "form " << form << " at " << at;
          }
      for (int64_t i = n; i < n + 64; ++i) {
        ASSERT_EQ(o8[i], 0xAB) << "form " << form << ": wrote past the fp8 output";
        ASSERT_EQ(o16[2 * i], 0xAB) << "form " << form << ": wrote past the bf16 output";
      }
    }
    EXPECT_EQ(outs[0][0], outs[1][0]);
    EXPECT_EQ(outs[0][1], outs[1][1]);
  }
  // The tiled form takes no strided or row-broadcast input next to a
  // transposed one, and at most 48 KiB of tiles.
  ElementwiseProgram mixed;
  mixed.inputs = {{ScalarType::bf16, InputLayout::kTransposed},
                  {ScalarType::bf16, InputLayout::kRowBroadcast}};
  mixed.nodes = {{EwOp::add, {-1, -2}, ScalarType::bf16}};
  mixed.outputs = {{0, ScalarType::bf16}};
  EXPECT_FALSE(EmitElementwise(mixed).ok());
  ElementwiseProgram wide;
  for (int i = 0; i < 3; ++i) wide.inputs.push_back({ScalarType::f32, InputLayout::kTransposed});
  wide.nodes = {{EwOp::add, {-1, -2}, ScalarType::f32}, {EwOp::add, {0, -3}, ScalarType::f32}};
  wide.outputs = {{1, ScalarType::f32}};
  EXPECT_FALSE(ElementwiseTiledFits(wide));
  EXPECT_FALSE(EmitElementwise(wide).ok());
}

// The fp8 quantizing cast as the fp8 policy emits it, e4m3(x^T * s) alone
// (the other tiled tests pair it with a wider output): 581 columns (ten
// tiles, the last partial) over full aligned row tiles (vector loads), over
// 72 rows (a partial row tile read element by element) and 67 unaligned
// rows, and 40 columns (one partial tile); element for element against the
// host, saturating (|x * s| up to ~1500 against e4m3's 448), nothing
// written past the output.
TEST(Emu, ElementwiseTransposedFp8Quantize) {
  if (!HaveCompiler()) GTEST_SKIP();
  struct Case { int64_t batch, rows, cols; };
  ElementwiseProgram p;
  p.inputs = {{ScalarType::bf16, InputLayout::kTransposed}, {ScalarType::f32, InputLayout::kScalar}};
  p.nodes = {{EwOp::cast, {-1}, ScalarType::f32},
             {EwOp::mul, {0, -2}, ScalarType::f32},
             {EwOp::cast, {1}, ScalarType::f8e4m3}};
  p.outputs = {{2, ScalarType::f8e4m3}};
  const KernelCode k = Unwrap(EmitElementwise(p));
  const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, fp8e4m3* o, const bf16* x, const float* s, long long n,
                          long long rows, long long cols) {
  emu::Launch(g, b, 0, [&] { KERNEL(o, x, s, n, rows, cols); });
})";
  using Fn = void (*)(Dim3, Dim3, void *, const void *, const float *, long long, long long, long long);
  auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
  ASSERT_NE(fn, nullptr);
  for (const Case c : {Case{1, 128, 581}, Case{2, 72, 581}, Case{1, 67, 300}, Case{1, 64, 40}}) {
    const int64_t n = c.batch * c.rows * c.cols;
    std::vector<float> xf = Randn(n, 51, 300.f);
    const std::vector<uint16_t> x = ToBf16Vec(xf);
    const float inv_scale = 1.5f;
    std::vector<uint8_t> out(n + 64, 0xAB);
    const LaunchDims d = Unwrap(ElementwiseTransposedLaunch(c.batch, c.rows, c.cols));
    fn(G(d), B(d), out.data(), x.data(), &inv_scale, n, c.rows, c.cols);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t col = 0; col < c.cols; ++col) {
          const int64_t at = (b * c.rows + r) * c.cols + col;
          const float xv = FromBf16(x[(b * c.cols + col) * c.rows + r]);
          ASSERT_EQ(out[at], llmc::ref::ToE4M3(xv * inv_scale))
              << "[" << b << ", " << r << ", " << col << "] of " << c.rows << " x " << c.cols;
        }
    for (int64_t i = n; i < n + 64; ++i) ASSERT_EQ(out[i], 0xAB) << "wrote past the output";
  }
}

// The tiled form's 16-byte tile loads for every input width: f32 (4 per
// vector), bf16 (8) and e4m3 (16) inputs read transposed and widened to an
// f32 output, on a full aligned tile (vector loads) and on rows of 72 and
// 67 (a partial row tile read element by element; 67 also unaligned), with
// nothing written past the output.
TEST(Emu, ElementwiseTransposedTileLoadsOfEveryWidth) {
  if (!HaveCompiler()) GTEST_SKIP();
  struct Case { int64_t batch, rows, cols; };
  for (ScalarType in : {ScalarType::f32, ScalarType::bf16, ScalarType::f8e4m3})
    for (const Case c : {Case{1, 128, 64}, Case{2, 72, 67}, Case{1, 67, 70}}) {
      ElementwiseProgram p;
      p.inputs = {{in, InputLayout::kTransposed}};
      p.nodes = {{EwOp::cast, {-1}, ScalarType::f32}};
      p.outputs = {{0, ScalarType::f32}};
      const KernelCode k = Unwrap(EmitElementwise(p));
      // The kernel's input pointer type differs per case: the stub casts to it.
      const std::string ctype = CTypeName(in);
      const std::string stub = "\nextern \"C\" void emu_entry(dim3 g, dim3 b, float* o, const void* x, long long n,\n"
                                "                          long long rows, long long cols) {\n"
                                "  emu::Launch(g, b, 0, [&] { KERNEL(o, (const " + ctype + "*)x, n, rows, cols); });\n}";
      using Fn = void (*)(Dim3, Dim3, float *, const void *, long long, long long, long long);
      auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
      ASSERT_NE(fn, nullptr) << ctype;
      const int64_t n = c.batch * c.rows * c.cols;
      const int isz = ScalarSize(in);
      std::vector<uint8_t> x(n * isz);
      std::vector<float> values = Randn(n, 41, 4.f);
      std::mt19937 rng(43);
      for (int64_t i = 0; i < n; ++i) {
        if (in == ScalarType::f32) {
          std::memcpy(&x[i * 4], &values[i], 4);
        } else if (in == ScalarType::bf16) {
          const uint16_t h = ToBf16(values[i]);
          std::memcpy(&x[i * 2], &h, 2);
        } else {
          uint8_t v = static_cast<uint8_t>(rng());
          if ((v & 0x7f) == 0x7f) v ^= 1;  // no NaN
          x[i] = v;
        }
      }
      std::vector<float> out(n + 16, -7.f);
      const LaunchDims d = Unwrap(ElementwiseTransposedLaunch(c.batch, c.rows, c.cols));
      fn(G(d), B(d), out.data(), x.data(), n, c.rows, c.cols);
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t r = 0; r < c.rows; ++r)
          for (int64_t col = 0; col < c.cols; ++col) {
            const int64_t src = (b * c.cols + col) * c.rows + r;
            float want;
            if (in == ScalarType::f32) std::memcpy(&want, &x[src * 4], 4);
            else if (in == ScalarType::bf16) {
              uint16_t h;
              std::memcpy(&h, &x[src * 2], 2);
              want = FromBf16(h);
            } else want = llmc::ref::FromE4M3(x[src]);
            ASSERT_EQ(out[(b * c.rows + r) * c.cols + col], want)
                << ctype << " [" << b << ", " << r << ", " << col << "]";
          }
      for (int64_t i = n; i < n + 16; ++i) ASSERT_EQ(out[i], -7.f) << ctype << ": wrote past the output";
    }
}

// RMSNorm's forward and backward read the per-row inverse RMS, [R, 1] f32,
// against [R, N] rows: an input of innermost stride 0 whose row stride (1)
// is no multiple of kVec. It takes the vector path (one load per vector,
// repeated) next to a contiguous bf16 input and output, also from a pointer
// that is not 16-byte aligned (it is read one element at a time); odd R and
// N = 40 (a multiple of kVec 4, the f32 input's, but not of 16), with the
// 32-bit and the 64-bit index math. Bit-exact against the host.
TEST(Emu, ElementwiseValuePerRowVectorPath) {
  if (!HaveCompiler()) GTEST_SKIP();
  for (int variant = 0; variant < 4; ++variant) {
    const bool idx64 = variant & 1, unaligned = variant & 2;
    ElementwiseProgram p;
    p.inputs = {{ScalarType::bf16, InputLayout::kContiguous}, {ScalarType::f32, InputLayout::kStrided}};
    p.nodes = {{EwOp::mul, {-1, -2}, ScalarType::f32}, {EwOp::cast, {0}, ScalarType::bf16}};
    p.outputs = {{1, ScalarType::bf16}};
    KernelCode k = Unwrap(EmitElementwise(p));
    const std::string marker = "// ===== end of llmc preamble =====\n";
    const size_t m = k.source.find(marker), hit = k.source.find("scalar_begin = numel;");
    ASSERT_NE(m, std::string::npos);
    ASSERT_NE(hit, std::string::npos);
    k.source.replace(hit, std::strlen("scalar_begin = numel;"), "scalar_begin = numel; emu_vec_hit = 1;");
    k.source.insert(m + marker.size(), std::string("static int emu_vec_hit = 0;\n") +
                                           (idx64 ? "#define LLMC_EW_INDEX32_LIMIT 0\n" : ""));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, bf16* o, const bf16* x, const float* r,
                          long long n, const EwShape* sh, int* hit) {
  emu::Launch(g, b, smem, [&] { KERNEL(o, x, r, n, *sh); });
  *hit = emu_vec_hit;
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, uint16_t *, const uint16_t *, const float *, long long,
                        const void *, int *);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t R = 13, N = 40, n = R * N;
    auto xf = Randn(n, 31);
    auto x = ToBf16Vec(xf);
    auto rbuf = Randn(R + 1, 32);  // rows from rbuf[1] when unaligned
    const float *rp = rbuf.data() + (unaligned ? 1 : 0);
    std::vector<float> r(rp, rp + R);
    std::vector<int64_t> packed = Unwrap(PackElementwiseShape(p, {R, N}, {{}, {1, 0}}));
    LaunchDims d = Unwrap(ElementwiseLaunch(p, n));
    d.grid[0] = 1;
    std::vector<uint16_t> o(n, 0xffff);
    int vec_hit = -1;
    fn(G(d), B(d), d.smem, o.data(), x.data(), rp, n, packed.data(), &vec_hit);
    EXPECT_EQ(vec_hit, 1) << (idx64 ? "64-bit" : "32-bit") << " index math"
                          << (unaligned ? ", unaligned per-row input" : "");
    for (int64_t row = 0; row < R; ++row)
      for (int64_t e = 0; e < N; ++e)
        ASSERT_EQ(o[row * N + e], ToBf16(FromBf16(x[row * N + e]) * r[row])) << row << "," << e;
  }
}

// The strided kernels' 32-bit division by a run-time divisor (ewDiv, a
// multiply-high and a shift) equals n / d for the edge dividends (0, d - 1,
// d, 2^31 - 1, 2^32 - 1, multiples of d and their neighbours) and 256
// random ones per divisor, for divisors 1 .. 70, powers of two and their neighbours,
// the model sizes (2048, 5632, 32000) and 2^31 - 1.
TEST(Emu, ElementwiseDividerIsExact) {
  if (!HaveCompiler()) GTEST_SKIP();
  ElementwiseProgram p;
  p.inputs = {{ScalarType::f32, InputLayout::kStrided}};
  p.nodes = {{EwOp::neg, {-1}, ScalarType::f32}};
  p.outputs = {{0, ScalarType::f32}};
  KernelCode k = Unwrap(EmitElementwise(p));
  const char *stub = R"(
extern "C" void emu_entry(const unsigned* n, const unsigned* d, long long count, unsigned* q) {
  for (long long i = 0; i < count; ++i) q[i] = ewDiv(n[i], ewDivider(d[i]));
})";
  using Fn = void (*)(const unsigned *, const unsigned *, long long, unsigned *);
  auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
  ASSERT_NE(fn, nullptr);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 70; ++d) divisors.push_back(d);
  for (int b = 7; b <= 31; ++b)
    for (int64_t dd : {int64_t{-1}, int64_t{0}, int64_t{1}}) divisors.push_back(uint32_t((int64_t{1} << b) + dd));
  for (uint32_t d : {2048u, 5632u, 32000u, 2147483647u}) divisors.push_back(d);
  std::mt19937 rng(7);
  std::vector<uint32_t> ns, ds;
  for (uint32_t d : divisors) {
    for (uint64_t n : {uint64_t{0}, uint64_t{d} - 1, uint64_t{d}, uint64_t{d} + 1, uint64_t{2147483647},
                       uint64_t{4294967295}, uint64_t{4294967295} / d * d, uint64_t{4294967295} / d * d - 1}) {
      ns.push_back(uint32_t(n));
      ds.push_back(d);
    }
    for (int r = 0; r < 256; ++r) {
      ns.push_back(rng());
      ds.push_back(d);
    }
  }
  std::vector<uint32_t> q(ns.size());
  fn(ns.data(), ds.data(), static_cast<long long>(ns.size()), q.data());
  for (size_t i = 0; i < ns.size(); ++i) ASSERT_EQ(q[i], ns[i] / ds[i]) << ns[i] << " / " << ds[i];
}

// sin/cos as RoPE tables use them: f32 angles up to |x| = 1e4 radians. The
// kernel must call the accurate sinf/cosf (the __sinf/__cosf intrinsics are
// off by ~1e-3 there); compared per element with float64 sin/cos.
TEST(Emu, ElementwiseSinCosOfLargeAngles) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  ElementwiseProgram p;
  p.inputs = {{ScalarType::f32, InputLayout::kContiguous}};
  p.nodes = {{EwOp::sin, {-1}, ScalarType::f32}, {EwOp::cos, {-1}, ScalarType::f32}};
  p.outputs = {{0, ScalarType::f32}, {1, ScalarType::f32}};
  auto k = Unwrap(EmitElementwise(p));
  EXPECT_NE(k.source.find("sinf("), std::string::npos);
  EXPECT_NE(k.source.find("cosf("), std::string::npos);
  EXPECT_EQ(k.source.find("__sinf"), std::string::npos);
  EXPECT_EQ(k.source.find("__cosf"), std::string::npos);
  const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* s, float* c, const float* x, long long n) {
  emu::Launch(g, b, smem, [&] { KERNEL(s, c, x, n); });
})";
  using Fn = void (*)(Dim3, Dim3, unsigned, float *, float *, const float *, long long);
  auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
  ASSERT_NE(fn, nullptr);
  const int64_t n = 4099;  // vector body + scalar tail
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> angle(-1e4f, 1e4f);
  std::vector<float> x(n), s(n, NAN), c(n, NAN);
  for (int64_t i = 0; i < n; ++i) x[i] = i < 64 ? angle(rng) * 1e-3f : angle(rng);
  LaunchDims d = Unwrap(ElementwiseLaunch(p, n));
  fn(G(d), B(d), d.smem, s.data(), c.data(), x.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double ws = std::sin(static_cast<double>(x[i])), wc = std::cos(static_cast<double>(x[i]));
    ASSERT_LE(std::fabs(s[i] - ws), 1e-6 * std::fabs(ws)) << "sin(" << x[i] << ") at " << i;
    ASSERT_LE(std::fabs(c[i] - wc), 1e-6 * std::fabs(wc)) << "cos(" << x[i] << ") at " << i;
  }
}

// pow with a constant exponent of 1, 2 or 3 is multiplies (the decomposed
// RMSNorm's x^2 and its backward's x^1 and rstd^3), other exponents powf:
// compared with float64 pow per element, including negative bases, zeros,
// infinities and NaN (x^1 exact, x^2 correctly rounded, x^3 within 2 ulp).
TEST(Emu, ElementwisePowOfSmallIntegerExponents) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  const ScalarType F = ScalarType::f32;
  ElementwiseProgram p;
  p.inputs = {{F, InputLayout::kContiguous}};
  p.nodes = {{EwOp::constant, {}, F, 1.0}, {EwOp::constant, {}, F, 2.0}, {EwOp::constant, {}, F, 3.0},
             {EwOp::constant, {}, F, 2.5}, {EwOp::pow, {-1, 0}, F},  {EwOp::pow, {-1, 1}, F},
             {EwOp::pow, {-1, 2}, F},      {EwOp::pow, {-1, 3}, F}};
  p.outputs = {{4, F}, {5, F}, {6, F}, {7, F}};
  auto k = Unwrap(EmitElementwise(p));
  size_t pows = 0;
  for (size_t at = k.source.find("powf("); at != std::string::npos; at = k.source.find("powf(", at + 1)) {
    ++pows;
    EXPECT_EQ(k.source.substr(at, k.source.find(')', at) - at), "powf(x0, n3") << "only x^2.5 calls powf";
  }
  EXPECT_GE(pows, 1u);
  const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* o1, float* o2, float* o3, float* o4,
                          const float* x, long long n) {
  emu::Launch(g, b, smem, [&] { KERNEL(o1, o2, o3, o4, x, n); });
})";
  using Fn = void (*)(Dim3, Dim3, unsigned, float *, float *, float *, float *, const float *, long long);
  auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
  ASSERT_NE(fn, nullptr);
  std::vector<float> x = Randn(1027, 77, 3.0f);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = INFINITY, x[3] = -INFINITY, x[4] = NAN, x[5] = 1e20f, x[6] = -1e-20f;
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<std::vector<float>> o(4, std::vector<float>(n, -7.0f));
  LaunchDims d = Unwrap(ElementwiseLaunch(p, n));
  fn(G(d), B(d), d.smem, o[0].data(), o[1].data(), o[2].data(), o[3].data(), x.data(), n);
  const double exps[] = {1.0, 2.0, 3.0, 2.5};
  const double ulps[] = {0.0, 0.5, 2.0, 2.0};
  for (int e = 0; e < 4; ++e)
    for (int64_t i = 0; i < n; ++i) {
      const double want = static_cast<float>(std::pow(static_cast<double>(x[i]), exps[e]));
      const double got = o[e][i];
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << x[i] << "^" << exps[e];
        continue;
      }
      if (std::isinf(want)) {
        ASSERT_EQ(got, want) << x[i] << "^" << exps[e];
        continue;
      }
      const double ulp = std::nextafter(static_cast<float>(std::fabs(want)), INFINITY) - std::fabs(want);
      ASSERT_LE(std::fabs(got - want), ulps[e] * ulp + 1e-45) << x[i] << "^" << exps[e] << " at " << i;
    }
}

// The fast path with ElementwiseProgram::unroll = 1..4 vectors in flight per
// thread: one block, so every thread runs the unrolled loop several times,
// then single vectors, then the scalar tail.
TEST(Emu, ElementwiseUnrolledFastPath) {
  if (!HaveCompiler()) GTEST_SKIP();
  for (int u = 1; u <= 4; ++u) {
    ElementwiseProgram p;  // out = silu(a) * b, bf16 in and out (8 per vector)
    p.unroll = u;
    p.inputs = {{ScalarType::bf16, InputLayout::kContiguous}, {ScalarType::bf16, InputLayout::kContiguous}};
    p.nodes = {{EwOp::silu, {-1}, ScalarType::bf16}, {EwOp::mul, {0, -2}, ScalarType::bf16}};
    p.outputs = {{1, ScalarType::bf16}};
    auto k = Unwrap(EmitElementwise(p));
    EXPECT_EQ(k.source.find("kUnroll") != std::string::npos, u > 1) << u;
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, bf16* o, const bf16* a, const bf16* c, long long n) {
  emu::Launch(g, b, smem, [&] { KERNEL(o, a, c, n); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, uint16_t *, const uint16_t *, const uint16_t *, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t n = 256 * 8 * u * 3 + 256 * 8 + 13;  // 3 unrolled rounds, 1 single round, tail
    std::vector<uint16_t> a(n), c(n), o(n, 0xFFFF);
    auto ra = Randn(n, 21), rc = Randn(n, 22);
    for (int64_t i = 0; i < n; ++i) a[i] = ToBf16(ra[i]), c[i] = ToBf16(rc[i]);
    LaunchDims d = Unwrap(ElementwiseLaunch(p, n));
    d.grid[0] = 1;
    fn(G(d), B(d), d.smem, o.data(), a.data(), c.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float x = FromBf16(a[i]);
      const float silu = FromBf16(ToBf16(x / (1.0f + std::exp(-x))));
      ASSERT_EQ(o[i], ToBf16(silu * FromBf16(c[i]))) << "unroll " << u << " element " << i;
    }
  }
}

// An in-place update (ElementwiseProgram::outputs_alias_inputs, an
// optimizer step writing over its parameter and momentum): SGD with
// momentum, buf = 0.9 buf + g and p = p - lr * buf in bf16, run with the
// outputs pointing at the inputs gives the same bits as the same program run
// out of place, through the unrolled and single-vector fast paths and the
// scalar tail, with one and two blocks; the kernel's pointers are not
// __restrict__.
TEST(Emu, ElementwiseInPlaceUpdate) {
  if (!HaveCompiler()) GTEST_SKIP();
  for (int u : {1, 2}) {
    ElementwiseProgram p;
    p.unroll = u;
    p.outputs_alias_inputs = true;
    p.inputs = {{ScalarType::bf16, InputLayout::kContiguous},   // p
                {ScalarType::bf16, InputLayout::kContiguous},   // buf
                {ScalarType::bf16, InputLayout::kContiguous},   // g
                {ScalarType::f32, InputLayout::kScalar}};       // lr
    p.nodes = {{EwOp::constant, {}, ScalarType::f32},
               {EwOp::mul, {-2, 0}, ScalarType::bf16},
               {EwOp::add, {1, -3}, ScalarType::bf16},
               {EwOp::mul, {2, -4}, ScalarType::bf16},
               {EwOp::sub, {-1, 3}, ScalarType::bf16}};
    p.nodes[0].constant = 0.9;
    p.outputs = {{4, ScalarType::bf16}, {2, ScalarType::bf16}};
    auto k = Unwrap(EmitElementwise(p));
    const std::string entry = k.source.substr(k.source.find("extern \"C\" __global__"));
    EXPECT_EQ(entry.find("__restrict__"), std::string::npos) << entry;
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, bf16* op, bf16* ob, const bf16* p,
                          const bf16* buf, const bf16* gr, const float* lr, long long n) {
  emu::Launch(g, b, smem, [&] { KERNEL(op, ob, p, buf, gr, lr, n); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, uint16_t *, uint16_t *, const uint16_t *,
                        const uint16_t *, const uint16_t *, const float *, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t n = 256 * 8 * u * 3 + 256 * 8 + 13;  // 3 unrolled rounds, 1 single round, tail
    auto rp = Randn(n, 31), rb = Randn(n, 32), rg = Randn(n, 33);
    std::vector<uint16_t> pv(n), bv(n), gv(n);
    for (int64_t i = 0; i < n; ++i) pv[i] = ToBf16(rp[i]), bv[i] = ToBf16(rb[i]), gv[i] = ToBf16(rg[i]);
    const float lr = 0.01f;
    for (unsigned blocks : {1u, 2u}) {
      std::vector<uint16_t> wantP(n), wantB(n), p2 = pv, b2 = bv;
      LaunchDims d = Unwrap(ElementwiseLaunch(p, n));
      d.grid[0] = blocks;
      fn(G(d), B(d), d.smem, wantP.data(), wantB.data(), pv.data(), bv.data(), gv.data(), &lr, n);
      fn(G(d), B(d), d.smem, p2.data(), b2.data(), p2.data(), b2.data(), gv.data(), &lr, n);
      for (int64_t i = 0; i < n; ++i) {
        const float b1 = FromBf16(ToBf16(FromBf16(ToBf16(0.9f * FromBf16(bv[i]))) + FromBf16(gv[i])));
        ASSERT_EQ(wantB[i], ToBf16(b1)) << "unroll " << u << " element " << i;
        ASSERT_EQ(wantP[i], ToBf16(FromBf16(pv[i]) - FromBf16(ToBf16(b1 * lr)))) << i;
        ASSERT_EQ(p2[i], wantP[i]) << "in place, unroll " << u << ", " << blocks << " block(s), element " << i;
        ASSERT_EQ(b2[i], wantB[i]) << "in place, unroll " << u << ", " << blocks << " block(s), element " << i;
      }
    }
  }
}

TEST(Emu, GatherAndKvAppendErrors) {
  if (!HaveCompiler()) GTEST_SKIP();
  {
    GatherConfig cfg;
    cfg.dtype = ScalarType::f32;
    cfg.index = ScalarType::i32;
    cfg.dim = 12;
    auto k = Unwrap(EmitGather(cfg));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* out, const float* t, const int32_t* idx,
                          int* err, long long n, long long V) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, t, idx, err, n, V); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, float *, const float *, const int32_t *, int *, long long, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    auto table = Randn(5 * 12, 16);
    std::vector<int32_t> idx = {4, 0, 5, -1, 2};
    std::vector<float> out(5 * 12, 7.0f);
    int err = 0;
    LaunchDims d = Unwrap(GatherLaunch(cfg, 5));
    fn(G(d), B(d), d.smem, out.data(), table.data(), idx.data(), &err, 5, 5);
    EXPECT_EQ(err, 2);
    for (int n = 0; n < 5; ++n)
      for (int j = 0; j < 12; ++j)
        ASSERT_EQ(out[n * 12 + j], (idx[n] >= 0 && idx[n] < 5) ? table[idx[n] * 12 + j] : 0.0f);
  }
  {
    KvAppendConfig cfg;
    cfg.dtype = ScalarType::f32;
    cfg.heads_kv = 2;
    cfg.head_dim = 6;
    cfg.pos = PositionSource::kPerBatchI32;
    auto k = Unwrap(EmitKvAppend(cfg));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* kc, float* vc, const float* kn, const float* vn,
                          const void* pos, int* err, long long B, long long smax, long long snew) {
  emu::Launch(g, b, smem, [&] { KERNEL(kc, vc, kn, vn, pos, err, B, smax, snew); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, float *, float *, const float *, const float *, const void *, int *,
                        long long, long long, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t Bt = 2, Smax = 8, Snew = 3, row = 12;
    std::vector<float> kc(Bt * Smax * row, -1.0f), vc = kc;
    auto kn = Randn(Bt * Snew * row, 17), vn = Randn(Bt * Snew * row, 18);
    std::vector<int32_t> pos = {5, 6};  // batch 1 overflows (6 + 3 > 8)
    int err = 0;
    LaunchDims d = Unwrap(KvAppendLaunch(cfg, Bt, Snew));
    fn(G(d), B(d), d.smem, kc.data(), vc.data(), kn.data(), vn.data(), pos.data(), &err, Bt, Smax, Snew);
    EXPECT_EQ(err, 1);
    for (int64_t s = 0; s < Smax; ++s)
      for (int64_t j = 0; j < row; ++j) {
        const bool in = s >= 5 && s < 8;
        ASSERT_EQ(kc[s * row + j], in ? kn[(s - 5) * row + j] : -1.0f);
        ASSERT_EQ(vc[s * row + j], in ? vn[(s - 5) * row + j] : -1.0f);
        ASSERT_EQ(kc[(Smax + s) * row + j], -1.0f);  // batch 1 untouched
      }
  }
}

// llm.index_put: the copy kernel (KV-cache write) skips out-of-range
// indices and wraps negative ones; the add kernel (embedding backward) adds
// in index order over several blocks and index chunks, in place and not,
// from a zero base, and in bf16 through its fp32 scratch.
TEST(Emu, IndexPutCopyAndAdd) {
  if (!HaveCompiler()) GTEST_SKIP();
  const int64_t outer = 2, rows = 10, inner = 12;
  {
    IndexPutConfig cfg;
    cfg.dtype = ScalarType::f32;
    cfg.index = ScalarType::i64;
    cfg.inner = inner;
    auto k = Unwrap(EmitIndexPut(cfg));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* out, const float* src, const int64_t* idx,
                          long long outer, long long rows, long long count) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, src, idx, outer, rows, count); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, float *, const float *, const int64_t *, long long, long long,
                        long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    std::vector<int64_t> idx = {7, -1, 10, 2};  // 10 is out of range: skipped
    const int64_t count = 4;
    auto src = Randn(outer * count * inner, 31);
    auto out = Randn(outer * rows * inner, 32);
    const auto base = out;
    LaunchDims d = Unwrap(IndexPutLaunch(cfg, outer, rows, count));
    fn(G(d), B(d), d.smem, out.data(), src.data(), idx.data(), outer, rows, count);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < inner; ++c) {
          const int64_t n = r == 7 ? 0 : r == 9 ? 1 : r == 2 ? 3 : -1;
          ASSERT_EQ(out[(o * rows + r) * inner + c],
                    n < 0 ? base[(o * rows + r) * inner + c] : src[(o * count + n) * inner + c])
              << o << " " << r << " " << c;
        }
  }
  // Add: 300 indices (two chunks of 256) over 10 rows, duplicates and a
  // bad index included.
  const int64_t count = 300;
  std::vector<int32_t> idx(count);
  for (int64_t n = 0; n < count; ++n) idx[n] = static_cast<int32_t>((n * 7) % 13) - 3;  // [-3, 9]
  idx[5] = 10;                                                                     // out of range
  auto sum_rows = [&](const std::vector<float> &src, const std::vector<float> &base, bool round_bf16) {
    // base + the rows in index order: fp32 adds one by one (f32), or an
    // fp32 sum rounded once to bf16 after adding it to the base (bf16).
    std::vector<float> want = base;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < inner; ++c) {
          float acc = 0.0f;
          bool any = false;
          float v = base[(o * rows + r) * inner + c];
          for (int64_t n = 0; n < count; ++n) {
            const int64_t at = idx[n] < 0 ? idx[n] + rows : idx[n];
            if (at != r) continue;
            const float s = src[(o * count + n) * inner + c];
            if (round_bf16) acc = any ? acc + s : s;
            else v = v + s;
            any = true;
          }
          want[(o * rows + r) * inner + c] = round_bf16 && any ? FromBf16(ToBf16(v + acc)) : v;
        }
    return want;
  };
  const char *add_stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, void* out, const void* base, const void* src,
                          const int32_t* idx, float* scratch, long long outer, long long rows,
                          long long count, long long per) {
  emu::Launch(g, b, smem, [&] { KERNEL((T*)out, (const T*)base, (const T*)src, idx, scratch, outer, rows,
                                       count, per); });
})";
  using AddFn = void (*)(Dim3, Dim3, unsigned, void *, const void *, const void *, const int32_t *, float *,
                         long long, long long, long long, long long);
  for (bool zero : {false, true}) {
    IndexPutConfig cfg;
    cfg.dtype = ScalarType::f32;
    cfg.index = ScalarType::i32;
    cfg.inner = inner;
    cfg.accumulate = true;
    cfg.zero_base = zero;
    auto fn = reinterpret_cast<AddFn>(BuildEmu(Unwrap(EmitIndexPut(cfg)), add_stub));
    ASSERT_NE(fn, nullptr);
    auto src = Randn(outer * count * inner, 33);
    auto base = Randn(outer * rows * inner, 34);
    if (zero) std::fill(base.begin(), base.end(), 0.0f);
    const auto want = sum_rows(src, base, false);
    const int64_t per = IndexAddRowsPerBlock(outer, rows);
    LaunchDims d = Unwrap(IndexPutLaunch(cfg, outer, rows, count));
    EXPECT_GT(d.grid[0], 1u);  // several blocks own the rows
    ASSERT_EQ(IndexPutScratchBytes(cfg, outer, count), 0);
    // Out of place (the kernel writes every row) and in place.
    std::vector<float> out(base.size(), NAN);
    fn(G(d), B(d), d.smem, out.data(), zero ? out.data() : base.data(), src.data(), idx.data(), nullptr,
       outer, rows, count, per);
    EXPECT_EQ(out, want) << "zero base " << zero;
    if (!zero) {
      std::vector<float> inplace = base;
      fn(G(d), B(d), d.smem, inplace.data(), inplace.data(), src.data(), idx.data(), nullptr, outer, rows,
         count, per);
      EXPECT_EQ(inplace, want);
    }
  }
  {
    IndexPutConfig cfg;
    cfg.dtype = ScalarType::bf16;
    cfg.index = ScalarType::i32;
    cfg.inner = inner;
    cfg.accumulate = true;
    auto fn = reinterpret_cast<AddFn>(BuildEmu(Unwrap(EmitIndexPut(cfg)), add_stub));
    ASSERT_NE(fn, nullptr);
    auto src = Randn(outer * count * inner, 35), base = Randn(outer * rows * inner, 36);
    auto src16 = ToBf16Vec(src), base16 = ToBf16Vec(base);
    const auto want = sum_rows(src, base, true);
    std::vector<float> scratch(IndexPutScratchBytes(cfg, outer, count) / 4, NAN);
    ASSERT_EQ(scratch.size(), static_cast<size_t>(outer * count * inner));
    std::vector<uint16_t> out(base16.size(), 0xFFFF);
    LaunchDims d = Unwrap(IndexPutLaunch(cfg, outer, rows, count));
    fn(G(d), B(d), d.smem, out.data(), base16.data(), src16.data(), idx.data(), scratch.data(), outer, rows,
       count, IndexAddRowsPerBlock(outer, rows));
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(FromBf16(out[i]), want[i]) << i;
  }
}

// llm.argmax: the first maximum across threads and warps, NaN largest
// (the first NaN), bf16 input; rows of 4000 (several warps) and 5.
TEST(Emu, ArgMaxFirstMaximumNaNFirst) {
  if (!HaveCompiler()) GTEST_SKIP();
  const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, long long* out, const void* x, long long rows) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, (const InT*)x, rows); });
})";
  using Fn = void (*)(Dim3, Dim3, unsigned, long long *, const void *, long long);
  {
    ArgMaxConfig cfg;
    cfg.in = ScalarType::f32;
    cfg.n = 4000;
    auto fn = reinterpret_cast<Fn>(BuildEmu(Unwrap(EmitArgMax(cfg)), stub));
    ASSERT_NE(fn, nullptr);
    auto x = Randn(4 * 4000, 41);
    x[0 * 4000 + 3999] = 50.0f;                            // row 0: the last element
    x[1 * 4000 + 1234] = 50.0f, x[1 * 4000 + 77] = 50.0f;  // row 1: a tie, the first wins
    x[2 * 4000 + 2500] = NAN, x[2 * 4000 + 900] = NAN;     // row 2: the first NaN
    x[3 * 4000 + 10] = 50.0f, x[3 * 4000 + 3000] = NAN;    // row 3: a NaN beats the maximum
    std::vector<long long> out(4, -7);
    LaunchDims d = Unwrap(ArgMaxLaunch(cfg, 4));
    fn(G(d), B(d), d.smem, out.data(), x.data(), 4);
    EXPECT_EQ(out, (std::vector<long long>{3999, 77, 900, 3000}));
  }
  {
    ArgMaxConfig cfg;
    cfg.in = ScalarType::bf16;
    cfg.n = 5;
    auto fn = reinterpret_cast<Fn>(BuildEmu(Unwrap(EmitArgMax(cfg)), stub));
    ASSERT_NE(fn, nullptr);
    std::vector<float> x = {1, 9, 3, 9, 2, -1, -2, -3, -4, -0.5f};
    auto x16 = ToBf16Vec(x);
    std::vector<long long> out(2, -7);
    LaunchDims d = Unwrap(ArgMaxLaunch(cfg, 2));
    fn(G(d), B(d), d.smem, out.data(), x16.data(), 2);
    EXPECT_EQ(out, (std::vector<long long>{1, 4}));
  }
}

// llm.cumsum: runs per thread plus a block scan of the run totals; rows
// shorter than the block (n = 9: one element per thread, idle threads),
// longer than kChunk * 32 and not a multiple of the block (n = 4099),
// booleans counted exactly in int64 and floats against a float64 sum.
TEST(Emu, CumsumRowsOfAnyLength) {
  if (!HaveCompiler()) GTEST_SKIP();
  const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, void* out, const void* x, long long rows) {
  emu::Launch(g, b, smem, [&] { KERNEL((OutT*)out, (const InT*)x, rows); });
})";
  using Fn = void (*)(Dim3, Dim3, unsigned, void *, const void *, long long);
  for (int64_t n : {9, 4099}) {
    CumsumConfig cfg;
    cfg.in = ScalarType::i1;
    cfg.out = ScalarType::i64;
    cfg.n = n;
    auto fn = reinterpret_cast<Fn>(BuildEmu(Unwrap(EmitCumsum(cfg)), stub));
    ASSERT_NE(fn, nullptr);
    const int64_t rows = 3;
    std::vector<uint8_t> x(rows * n);
    std::mt19937 rng(static_cast<uint32_t>(n));
    for (auto &v : x) v = rng() % 3 == 0;
    std::vector<long long> out(rows * n, -7);
    LaunchDims d = Unwrap(CumsumLaunch(cfg, rows));
    fn(G(d), B(d), d.smem, out.data(), x.data(), rows);
    for (int64_t r = 0; r < rows; ++r) {
      long long run = 0;
      for (int64_t i = 0; i < n; ++i) {
        run += x[r * n + i];
        ASSERT_EQ(out[r * n + i], run) << "n=" << n << " row " << r << " at " << i;
      }
    }
  }
  {
    CumsumConfig cfg;
    cfg.in = ScalarType::f32;
    cfg.out = ScalarType::f32;
    cfg.n = 1001;
    auto fn = reinterpret_cast<Fn>(BuildEmu(Unwrap(EmitCumsum(cfg)), stub));
    ASSERT_NE(fn, nullptr);
    auto x = Randn(2 * 1001, 7);
    std::vector<float> out(x.size(), NAN);
    LaunchDims d = Unwrap(CumsumLaunch(cfg, 2));
    fn(G(d), B(d), d.smem, out.data(), x.data(), 2);
    for (int64_t r = 0; r < 2; ++r) {
      double run = 0.0, scale = 0.0;
      for (int64_t i = 0; i < 1001; ++i) {
        run += x[r * 1001 + i];
        scale += std::fabs(x[r * 1001 + i]);
        // fp32 accumulation in another order than the float64 sum.
        ASSERT_NEAR(out[r * 1001 + i], run, 1e-6 * scale + 1e-6) << r << " " << i;
      }
    }
  }
}

// llm.dropout_mask: Philox4x32-10, checked first against Random123's known
// answers (host copy), then the kernel's keep flags against the host's for
// two thresholds, two streams and a count that is not a block multiple.
namespace {
uint32_t HostPhiloxX(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                     uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t{0xD2511F53u} * c0, p1 = uint64_t{0xCD9E8D57u} * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1), c3 = uint32_t(p0), c0 = n0, c2 = n2;
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  return c0;
}
} // namespace

TEST(Emu, DropoutMaskIsPhilox4x32_10) {
  // Random123's kat_vectors for philox4x32_10 (first output word).
  EXPECT_EQ(HostPhiloxX(0, 0, 0, 0, 0, 0), 0x6627e8d5u);
  EXPECT_EQ(HostPhiloxX(~0u, ~0u, ~0u, ~0u, ~0u, ~0u), 0x408f276du);
  EXPECT_EQ(HostPhiloxX(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u,
                        0x299f31d0u),
            0xd16cfe09u);
  if (!HaveCompiler()) GTEST_SKIP();
  const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, uint8_t* out, const long long* seed,
                          long long n, unsigned threshold, unsigned stream) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, seed, n, threshold, stream); });
})";
  using Fn = void (*)(Dim3, Dim3, unsigned, uint8_t *, const long long *, long long, unsigned,
                      unsigned);
  auto fn = reinterpret_cast<Fn>(BuildEmu(Unwrap(EmitDropoutMask()), stub));
  ASSERT_NE(fn, nullptr);
  const long long seed = 0x0123456789abcdefLL;
  const int64_t n = 3001;
  for (double p : {0.1, 0.5})
    for (unsigned stream : {0u, 7u}) {
      const unsigned threshold = static_cast<unsigned>(std::ceil(p * 16777216.0));
      std::vector<uint8_t> out(n, 9);
      LaunchDims d = Unwrap(DropoutMaskLaunch(n));
      fn(G(d), B(d), d.smem, out.data(), &seed, n, threshold, stream);
      int64_t kept = 0;
      for (int64_t i = 0; i < n; ++i) {
        uint32_t x = HostPhiloxX(uint32_t(i), 0, stream, 0, uint32_t(uint64_t(seed)),
                                 uint32_t(uint64_t(seed) >> 32));
        ASSERT_EQ(out[i], (x >> 8) >= threshold ? 1 : 0) << "p=" << p << " stream " << stream
                                                          << " at " << i;
        kept += out[i];
      }
      // Binomial(n, 1 - p): within 5 standard deviations.
      const double mean = n * (1 - p), sd = std::sqrt(n * p * (1 - p));
      EXPECT_NEAR(double(kept), mean, 5 * sd) << "p=" << p;
    }
}

TEST(Emu, ReductionsAndLayerNorm) {
  if (!HaveCompiler()) GTEST_SKIP();
  {
    RowReduceConfig cfg;
    cfg.in = ScalarType::f32;
    cfg.kind = ReduceKind::max;
    cfg.n = 5000;  // block per row
    auto k = Unwrap(EmitRowReduce(cfg));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* out, const float* x, long long rows) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, x, rows); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, float *, const float *, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    auto x = Randn(2 * 5000, 19);
    x[5000 + 77] = NAN;
    std::vector<float> out(2);
    LaunchDims d = Unwrap(RowReduceLaunch(cfg, 2));
    fn(G(d), B(d), d.smem, out.data(), x.data(), 2);
    auto ref = llmc::ref::RowReduceRef(x, 2, 5000, llmc::ref::Reduce::max);
    EXPECT_EQ(out[0], ref[0]);
    EXPECT_TRUE(std::isnan(out[1]));
  }
  {
    FullReduceConfig cfg;
    cfg.in = ScalarType::bf16;
    cfg.kind = ReduceKind::mean;
    auto ks = Unwrap(EmitFullReduce(cfg));
    const char *s1 = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* p, const bf16* x, long long n) {
  emu::Launch(g, b, smem, [&] { KERNEL(p, x, n); });
})";
    const char *s2 = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* o, const float* p, int np, long long n) {
  emu::Launch(g, b, smem, [&] { KERNEL(o, p, np, n); });
})";
    using F1 = void (*)(Dim3, Dim3, unsigned, float *, const uint16_t *, long long);
    using F2 = void (*)(Dim3, Dim3, unsigned, float *, const float *, int, long long);
    auto f1 = reinterpret_cast<F1>(BuildEmu(ks.stage1, s1));
    auto f2 = reinterpret_cast<F2>(BuildEmu(ks.stage2, s2));
    ASSERT_TRUE(f1 && f2);
    const int64_t n = 3 * 4096 + 5;
    std::vector<uint16_t> x(n, ToBf16(0.5f));
    std::vector<float> partials(FullReduceNumPartials(n)), out(1);
    LaunchDims d1 = Unwrap(FullReduceStage1Launch(cfg, n)), d2 = Unwrap(FullReduceStage2Launch(cfg, n));
    f1(G(d1), B(d1), 0, partials.data(), x.data() + 1, n - 1);  // unaligned base: scalar path
    f2(G(d2), B(d2), 0, out.data(), partials.data(), (int)partials.size(), n - 1);
    EXPECT_FLOAT_EQ(out[0], 0.5f);
  }
  {
    LayerNormConfig cfg;
    cfg.in = cfg.out = cfg.weight = ScalarType::bf16;
    cfg.hidden = 200;  // warp per row, vectorized
    auto k = Unwrap(EmitLayerNorm(cfg));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, bf16* out, const bf16* x, const bf16* w,
                          const bf16* bias, long long rows) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, x, w, bias, rows); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *,
                        long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t rows = 5, n = 200;
    auto x = Randn(rows * n, 20, 300.0f), w = Randn(n, 21), bias = Randn(n, 22);
    for (int64_t j = 0; j < n; ++j) x[4 * n + j] = 1e-6f;  // variance ~ 0 << eps
    auto xb = ToBf16Vec(x), wb = ToBf16Vec(w), bb = ToBf16Vec(bias);
    std::vector<uint16_t> ob(rows * n);
    LaunchDims d = Unwrap(LayerNormLaunch(cfg, rows));
    fn(G(d), B(d), d.smem, ob.data(), xb.data(), wb.data(), bb.data(), rows);
    std::vector<float> ref;
    llmc::ref::NormRef(true, x, nullptr, &w, &bias, rows, n, cfg.eps, [](float v) { return v; }, &ref, nullptr);
    for (size_t i = 0; i < ob.size(); ++i) ASSERT_NEAR(FromBf16(ob[i]), ref[i], 1e-2 * (1 + std::fabs(ref[i]))) << i;
  }
}

// The kernels a training step's loss (log_softmax over a 1000-token vocabulary,
// an i64 count of labels, a rank-0 division) uses and no example exercises:
// row reductions over a non-power-of-two row, a [R, 1] -> [R, N] strided
// broadcast, and a whole-tensor i64 sum.
// x [outer, r, inner] reduced over r: bf16 in, f32 out, one split and
// several (partials + combine), columns not a multiple of 32, a NaN in
// max; against a float64 reference on fresh random inputs.
TEST(Emu, ColumnReductionsOverLeadingDims) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  const char *s1 = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* out, float* p, const bf16* x,
                          long long outer, long long r, long long inner, long long rps) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, p, x, outer, r, inner, rps); });
})";
  const char *s2 = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* out, const float* p, long long count,
                          long long r, int splits) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, p, count, r, splits); });
})";
  using F1 = void (*)(Dim3, Dim3, unsigned, float *, float *, const uint16_t *, long long, long long,
                      long long, long long);
  using F2 = void (*)(Dim3, Dim3, unsigned, float *, const float *, long long, long long, int);
  struct Case {
    int64_t outer, r, inner;
    int splits;  // 0: ColumnReduceNumSplits
    ReduceKind kind;
    bool misaligned = false;  // x 2 bytes off a 16-byte boundary: the scalar loop
  };
  for (const Case &c : {Case{1, 300, 45, 0, ReduceKind::sum}, Case{1, 300, 45, 1, ReduceKind::sum},
                        Case{3, 129, 70, 4, ReduceKind::mean}, Case{2, 77, 33, 3, ReduceKind::max},
                        Case{1, 1, 5, 0, ReduceKind::min}, Case{1, 1000, 8, 0, ReduceKind::sum},
                        Case{2, 200, 264, 0, ReduceKind::sum}, Case{2, 200, 264, 3, ReduceKind::max},
                        Case{1, 150, 520, 0, ReduceKind::mean, true}}) {
    ColumnReduceConfig cfg;
    cfg.in = ScalarType::bf16;
    cfg.kind = c.kind;
    cfg.vec = ColumnReduceVecWidth(cfg.in, c.inner);
    auto ks = Unwrap(EmitColumnReduce(cfg));
    auto f1 = reinterpret_cast<F1>(BuildEmu(ks.partial, s1));
    auto f2 = reinterpret_cast<F2>(BuildEmu(ks.combine, s2));
    ASSERT_TRUE(f1 && f2);
    const int splits = c.splits ? c.splits : ColumnReduceNumSplits(c.outer, c.r, c.inner, cfg.vec);
    std::vector<float> x = Randn(c.outer * c.r * c.inner, 31 + splits);
    const bool nan = c.kind == ReduceKind::max;
    if (nan) x[(1 * c.r + 40) * c.inner + 7] = NAN;  // column (o=1, i=7)
    std::vector<uint16_t> xv = ToBf16Vec(x);
    // A 16-byte aligned copy (the vector loads need it), or one 2 bytes off.
    std::vector<uint16_t> storage(xv.size() + 16);
    uint16_t *xp = storage.data();
    while (reinterpret_cast<uintptr_t>(xp) % 16 != 0) ++xp;
    if (c.misaligned) ++xp;
    std::copy(xv.begin(), xv.end(), xp);
    std::vector<float> out(c.outer * c.inner, -123.f);
    std::vector<float> partials(ColumnReduceWorkspaceBytes(c.outer, c.inner, splits) / 4 + 1);
    LaunchDims d1 = Unwrap(ColumnReducePartialLaunch(cfg, c.outer, c.inner, splits));
    f1(G(d1), B(d1), d1.smem, out.data(), partials.data(), xp, c.outer, c.r, c.inner,
       ColumnReduceRowsPerSplit(c.r, splits));
    if (splits > 1) {
      LaunchDims d2 = Unwrap(ColumnReduceCombineLaunch(cfg, c.outer, c.inner));
      f2(G(d2), B(d2), d2.smem, out.data(), partials.data(), c.outer * c.inner, c.r, splits);
    }
    for (int64_t o = 0; o < c.outer; ++o)
      for (int64_t i = 0; i < c.inner; ++i) {
        double ref = c.kind == ReduceKind::max ? -INFINITY : c.kind == ReduceKind::min ? INFINITY : 0.0;
        bool anyNan = false;
        for (int64_t j = 0; j < c.r; ++j) {
          double v = x[(o * c.r + j) * c.inner + i];
          anyNan |= std::isnan(v);
          ref = c.kind == ReduceKind::max ? std::max(ref, v) : c.kind == ReduceKind::min ? std::min(ref, v) : ref + v;
        }
        if (c.kind == ReduceKind::mean) ref /= double(c.r);
        const float got = out[o * c.inner + i];
        if (anyNan) {
          EXPECT_TRUE(std::isnan(got)) << o << "," << i;
          continue;
        }
        ASSERT_NEAR(got, ref, 1e-5 * (1 + std::fabs(ref)) + 1e-6 * c.r)
            << "outer " << c.outer << " r " << c.r << " inner " << c.inner << " vec " << cfg.vec << " splits "
            << splits << (c.misaligned ? " misaligned" : "") << " at "
            << o << "," << i;
      }
  }
}

TEST(Emu, LogSoftmaxPiecesOnOddRows) {
  if (!HaveCompiler()) GTEST_SKIP();
  const int64_t R = 3, N = 1000;
  auto x = Randn(R * N, 31);
  for (ReduceKind kind : {ReduceKind::sum, ReduceKind::max}) {
    RowReduceConfig cfg;
    cfg.in = ScalarType::f32;
    cfg.out = ScalarType::f32;
    cfg.kind = kind;
    cfg.n = N;
    auto k = Unwrap(EmitRowReduce(cfg));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* out, const float* x, long long rows) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, x, rows); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, float *, const float *, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    std::vector<float> out(R, -1.f);
    LaunchDims d = Unwrap(RowReduceLaunch(cfg, R));
    fn(G(d), B(d), d.smem, out.data(), x.data(), R);
    for (int64_t r = 0; r < R; ++r) {
      double want = kind == ReduceKind::sum ? 0.0 : -INFINITY;
      for (int64_t j = 0; j < N; ++j)
        want = kind == ReduceKind::sum ? want + x[r * N + j]
                                       : std::max<double>(want, x[r * N + j]);
      EXPECT_NEAR(out[r], want, 1e-4 * std::max(1.0, std::fabs(want))) << r;
    }
  }
  {
    // y = exp(x - m) with m [R, 1] broadcast along the row (strides {1, 0}).
    ElementwiseProgram p;
    p.inputs = {{ScalarType::f32, InputLayout::kContiguous},
                {ScalarType::f32, InputLayout::kStrided}};
    p.nodes = {{EwOp::sub, {-1, -2}, ScalarType::f32}, {EwOp::exp, {0}, ScalarType::f32}};
    p.outputs = {{1, ScalarType::f32}};
    auto k = Unwrap(EmitElementwise(p));
    ASSERT_TRUE(ElementwiseNeedsShape(p));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* o, const float* a, const float* m,
                          long long n, const EwShape* sh) {
  emu::Launch(g, b, smem, [&] { KERNEL(o, a, m, n, *sh); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, float *, const float *, const float *, long long,
                        const void *);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    std::vector<float> m = {0.5f, -1.25f, 2.0f};
    std::vector<float> o(R * N);
    std::vector<int64_t> packed = Unwrap(PackElementwiseShape(p, {R, N}, {{}, {1, 0}}));
    LaunchDims d = Unwrap(ElementwiseLaunch(p, R * N));
    fn(G(d), B(d), d.smem, o.data(), x.data(), m.data(), R * N, packed.data());
    for (int64_t i = 0; i < R * N; ++i)
      ASSERT_NEAR(o[i], std::exp(x[i] - m[i / N]), 1e-5f * std::exp(x[i] - m[i / N])) << i;
  }
  {
    FullReduceConfig cfg;
    cfg.in = ScalarType::i64;
    cfg.out = ScalarType::i64;
    cfg.kind = ReduceKind::sum;
    auto ks = Unwrap(EmitFullReduce(cfg));
    const char *s1 = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* p, const long long* x, long long n) {
  emu::Launch(g, b, smem, [&] { KERNEL(p, (const int64_t*)x, n); });
})";
    const char *s2 = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, long long* o, const float* p, int np, long long n) {
  emu::Launch(g, b, smem, [&] { KERNEL((int64_t*)o, p, np, n); });
})";
    using F1 = void (*)(Dim3, Dim3, unsigned, float *, const long long *, long long);
    using F2 = void (*)(Dim3, Dim3, unsigned, long long *, const float *, int, long long);
    auto f1 = reinterpret_cast<F1>(BuildEmu(ks.stage1, s1));
    auto f2 = reinterpret_cast<F2>(BuildEmu(ks.stage2, s2));
    ASSERT_TRUE(f1 && f2);
    const int64_t n = 32;  // e.g. 2 x 16 labels, some ignored
    std::vector<long long> v(n);
    long long want = 0;
    for (int64_t i = 0; i < n; ++i) want += (v[i] = (i % 3 != 0));
    std::vector<float> partials(FullReduceNumPartials(n));
    long long out = -1;
    LaunchDims d1 = Unwrap(FullReduceStage1Launch(cfg, n)), d2 = Unwrap(FullReduceStage2Launch(cfg, n));
    f1(G(d1), B(d1), 0, partials.data(), v.data(), n);
    f2(G(d2), B(d2), 0, &out, partials.data(), (int)partials.size(), n);
    EXPECT_EQ(out, want);
  }
}

// llm.pad (llmc-pad-layout's tensor-core padding) on odd shapes, every element
// size, ranks 1..4, the vectorized path and its unaligned-pointer fallback:
// the output must equal the input in the leading corner and be zero
// elsewhere, bit for bit (the output starts poisoned with 0xAB).
TEST(Emu, PadOddShapesAllElementSizes) {
  if (!HaveCompiler()) GTEST_SKIP();
  struct Case {
    ScalarType dtype;
    std::vector<int64_t> in, out;
    bool misalign;  // shift both pointers by one element
  };
  const Case cases[] = {
      {ScalarType::bf16, {33, 40}, {48, 48}, false},        // vec 8
      {ScalarType::f8e4m3, {33, 40}, {64, 64}, false},      // vec 8, fp8 GEMM operand
      {ScalarType::f8e4m3, {3, 5, 200}, {3, 32, 224}, false},
      {ScalarType::bf16, {3, 5, 7}, {4, 8, 16}, false},     // vec 1
      {ScalarType::f32, {37}, {48}, false},
      {ScalarType::f32, {2, 3, 5, 12}, {2, 4, 5, 16}, false},
      {ScalarType::i64, {5, 6}, {8, 8}, false},
      {ScalarType::bf16, {33, 40}, {48, 48}, true},         // scalar fallback
  };
  for (const Case &c : cases) {
    PadConfig cfg;
    cfg.dtype = c.dtype;
    cfg.rank = static_cast<int>(c.in.size());
    cfg.vec = PadVecWidth(c.dtype, c.in.back(), c.out.back());
    auto k = Unwrap(EmitPad(cfg));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, E* out, const E* in, long long n, const PadShape* sh) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, in, n, *sh); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, void *, const void *, long long, const void *);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr) << k.name;
    const int size = ScalarSize(c.dtype);
    int64_t nin = 1, nout = 1;
    for (int64_t d : c.in) nin *= d;
    for (int64_t d : c.out) nout *= d;
    std::mt19937 rng(41);
    const int shift = c.misalign ? size : 0;
    std::vector<uint8_t> in(nin * size + 16 + shift), out(nout * size + 16 + shift, 0xAB);
    for (auto &b : in) b = static_cast<uint8_t>(rng() | 1);  // never all-zero
    uint8_t *inp = in.data() + shift, *outp = out.data() + shift;
    // Vector buffers must start 16-byte aligned for the aligned cases.
    ASSERT_TRUE(c.misalign || reinterpret_cast<uintptr_t>(inp) % 16 == 0 || cfg.vec * size < 16);
    std::vector<int64_t> packed = Unwrap(PackPadShape(c.out, c.in));
    LaunchDims d = Unwrap(PadLaunch(cfg, nout));
    d.grid[0] = std::min(d.grid[0], 2u);  // exercise the grid-stride loop
    fn(G(d), B(d), d.smem, outp, inp, nout, packed.data());
    const int rank = cfg.rank;
    for (int64_t i = 0; i < nout; ++i) {
      int64_t rem = i, src = 0, stride = 1;
      bool inside = true;
      for (int dd = rank - 1; dd >= 0; --dd) {
        int64_t coord = rem % c.out[dd];
        rem /= c.out[dd];
        inside &= coord < c.in[dd];
        src += coord * stride;
        stride *= c.in[dd];
      }
      for (int b = 0; b < size; ++b)
        ASSERT_EQ(outp[i * size + b], inside ? inp[src * size + b] : 0)
            << k.name << " element " << i << " byte " << b;
    }
  }
}

// The tiled transpose (the fp8 GEMM operand relayout): partial tiles on both
// sides, a row stride above the row, a batch stride above the matrix; a
// bit-exact copy for one type, round-to-nearest-even through float for two.
// Bytes past the output stay untouched.
TEST(Emu, TransposePartialTilesAndConversions) {
  if (!HaveCompiler()) GTEST_SKIP();
  struct Case {
    ScalarType in, out;
    int64_t batch, rows, cols, ld, batch_stride;
  };
  const ScalarType e4 = ScalarType::f8e4m3, e5 = ScalarType::f8e5m2, bf = ScalarType::bf16,
                   f32 = ScalarType::f32;
  const Case cases[] = {
      {e4, e4, 2, 70, 100, 112, 70 * 112 + 13}, // fp8 weight-gradient operand
      // fp8 copies of full, 4-byte aligned tiles take the 4-elements-per-
      // access path; partial tiles, an odd ld or batch stride, or rows not
      // a multiple of 4 the per-element one, within one launch.
      {e4, e4, 2, 128, 192, 192, 128 * 192},
      {e5, e5, 1, 132, 100, 104, 0},
      {e4, e4, 2, 64, 64, 64, 64 * 64 + 2},
      {e5, e5, 1, 64, 128, 130, 0},
      {e4, e4, 1, 66, 64, 64, 0},
      {e5, e5, 1, 130, 64, 64, 0},
      {bf, bf, 3, 5, 129, 129, 5 * 129},
      {e4, bf, 2, 65, 33, 40, 65 * 40}, // converting (no lowering uses it yet)
      {f32, bf, 1, 64, 64, 64, 0},
  };
  for (const Case &c : cases) {
    TransposeConfig cfg;
    cfg.in = c.in;
    cfg.out = c.out;
    ASSERT_TRUE(TransposeSupported(cfg));
    const KernelCode k = Unwrap(EmitTranspose(cfg));
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, void* out, const void* in, long long rows, long long cols,
                          long long ld, long long bs) {
  emu::Launch(g, b, 0, [&] { KERNEL((OutT*)out, (const InT*)in, rows, cols, ld, bs); });
})";
    using Fn = void (*)(Dim3, Dim3, void *, const void *, long long, long long, long long, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr) << k.name;
    const int isz = ScalarSize(c.in), osz = ScalarSize(c.out);
    const int64_t span = (c.batch - 1) * c.batch_stride + (c.rows - 1) * c.ld + c.cols;
    std::mt19937 rng(7);
    std::vector<uint8_t> in(span * isz);
    const std::vector<float> values = Randn(span, 8, 3.f);
    for (int64_t i = 0; i < span; ++i) {
      if (c.in == f32) {
        std::memcpy(&in[i * 4], &values[i], 4);
      } else if (c.in == bf) {
        const uint16_t h = llmc::ref::ToBf16(values[i]);
        std::memcpy(&in[i * 2], &h, 2);
      } else {
        uint8_t v = static_cast<uint8_t>(rng());
        if ((v & 0x7f) == 0x7f) v ^= 1; // no NaN: a NaN's payload is not compared
        in[i] = v;
      }
    }
    const int64_t nout = c.batch * c.rows * c.cols;
    std::vector<uint8_t> out((nout + 64) * osz, 0xAB);
    const LaunchDims d = Unwrap(TransposeLaunch(c.batch, c.rows, c.cols));
    fn(G(d), B(d), out.data(), in.data(), c.rows, c.cols, c.ld, c.batch_stride);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t col = 0; col < c.cols; ++col) {
          const int64_t src = b * c.batch_stride + r * c.ld + col;
          const int64_t dst = (b * c.cols + col) * c.rows + r;
          std::vector<uint8_t> want(in.begin() + src * isz, in.begin() + (src + 1) * isz);
          if (c.in != c.out) {
            const float v = c.in == f32 ? values[src] : c.in == e4 ? llmc::ref::FromE4M3(in[src]) : 0.f;
            const uint16_t h = llmc::ref::ToBf16(v);
            want.assign(reinterpret_cast<const uint8_t *>(&h), reinterpret_cast<const uint8_t *>(&h) + 2);
          }
          ASSERT_EQ(0, std::memcmp(&out[dst * osz], want.data(), osz))
              << k.name << " [" << b << ", " << col << ", " << r << "]";
        }
    for (size_t i = nout * osz; i < out.size(); ++i)
      ASSERT_EQ(out[i], 0xAB) << k.name << " wrote past the output";
  }
  TransposeConfig bad;
  bad.in = ScalarType::i64;
  bad.out = bf;
  EXPECT_FALSE(TransposeSupported(bad));
  EXPECT_FALSE(EmitTranspose(bad).ok());
}

//===----------------------------------------------------------------------===//
// Fused row kernels (EmitRowFused) against float64 references
//===----------------------------------------------------------------------===//

namespace {

/// |got - want| / max(|want|, scale): the error relative to the value, or to
/// the magnitude `scale` of the terms it cancels from; infinite for a NaN.
double RelErr(double got, double want, double scale) {
  if (std::isnan(got) || std::isnan(want)) return INFINITY;
  return std::fabs(got - want) / std::max({std::fabs(want), scale, 1e-30});
}

/// The RMSNorm backward as AOTAutograd decomposes it. Inputs: g (bf16,
/// dense), w (bf16, column), rstd (f32, per row), x (`xt`, dense); outputs:
/// dx (bf16) and s = sum(gw * x) (f32, per row). `extra` more f32 dense
/// inputs z_k, each copied to a dense f32 output: they leave dx and s as they
/// are but add to the bytes a thread caches (pushing the register-resident
/// form over its budget).
RowFusedProgram RmsNormBackwardProgram(int64_t n, ScalarType xt = ScalarType::f32, int extra = 0) {
  const ScalarType F = ScalarType::f32, BF = ScalarType::bf16;
  const int g = -1, w = -2, rstd = -3, x = -4, s = -(5 + extra);  // s: reduction 0
  RowFusedProgram p;
  p.n = n;
  p.inputs = {{BF, RowInputLayout::kDense}, {BF, RowInputLayout::kColumn}, {F, RowInputLayout::kRow},
              {xt, RowInputLayout::kDense}};
  for (int k = 0; k < extra; ++k) p.inputs.push_back({F, RowInputLayout::kDense});
  p.reductions = {{ReduceKind::sum, 3, F}};
  auto cst = [&](double v) {
    EwNode c{EwOp::constant, {}, F};
    c.constant = v;
    return c;
  };
  p.nodes = {
      {EwOp::mul, {g, w}, BF},     // 0: g * w, rounded to bf16
      {EwOp::cast, {0}, F},        // 1: gw
      {EwOp::mul, {1, rstd}, F},   // 2: a = gw * rstd
      {EwOp::mul, {1, x}, F},      // 3: b = gw * x (reduced: s)
      cst(-0.5),                   // 4
      {EwOp::mul, {s, 4}, F},      // 5: s * -0.5
      cst(3.0),                    // 6
      {EwOp::pow, {rstd, 6}, F},   // 7: rstd^3
      {EwOp::mul, {5, 7}, F},      // 8: c
      cst(static_cast<double>(n)), // 9
      {EwOp::div, {8, 9}, F},      // 10: c / n
      cst(2.0),                    // 11
      {EwOp::mul, {x, 11}, F},     // 12: x * 2
      {EwOp::mul, {10, 12}, F},    // 13
      {EwOp::add, {2, 13}, F},     // 14: dx
      {EwOp::cast, {14}, BF},      // 15
  };
  p.outputs = {{15, BF, false}, {s, F, true}};
  for (int k = 0; k < extra; ++k) p.outputs.push_back({-(5 + k), F, false});
  return p;
}

constexpr const char *kResidentMarker = "// register-resident row";

struct RmsNormBackwardRun {
  std::string name;
  std::vector<uint16_t> dx;  // [rows, n]
  std::vector<float> s;      // [rows]
};

/// Runs RmsNormBackwardProgram(n, xt, extra) on 5 rows (dense pointers one
/// element off 16-byte alignment when `misalign`: the run-time scalar path;
/// the same values either way) and compares with float64.
RmsNormBackwardRun RunRmsNormBackward(int64_t n, bool misalign, ScalarType xt = ScalarType::f32, int extra = 0) {
  RmsNormBackwardRun run;
  const RowFusedProgram p = RmsNormBackwardProgram(n, xt, extra);
  const KernelCode k = Unwrap(EmitRowFused(p));
  run.name = k.name;
  EXPECT_TRUE(WaitsForGridDependency(k.source));
  const bool bfx = xt == ScalarType::bf16;
  // Every pointer through one array: outputs dx, s, z_k copies; inputs g, w,
  // rstd, x, z_k.
  std::string args = "(bf16*)a[0], (float*)a[1]";
  for (int e = 0; e < extra; ++e) args += ", (float*)a[" + std::to_string(2 + e) + "]";
  args += ", (const bf16*)a[" + std::to_string(2 + extra) + "], (const bf16*)a[" + std::to_string(3 + extra) +
          "], (const float*)a[" + std::to_string(4 + extra) + "], (const " + (bfx ? "bf16" : "float") + "*)a[" +
          std::to_string(5 + extra) + "]";
  for (int e = 0; e < extra; ++e) args += ", (const float*)a[" + std::to_string(6 + extra + e) + "]";
  const std::string stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, void** a, long long rows) {
  emu::Launch(g, b, smem, [&] { KERNEL()" + args + R"(, rows); });
})";
  using Fn = void (*)(Dim3, Dim3, unsigned, void **, long long);
  auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
  EXPECT_NE(fn, nullptr);
  if (fn == nullptr) return run;
  const int64_t rows = 5, off = misalign ? 1 : 0;
  std::vector<float> gf = Randn(rows * n, 51 + n), wf = Randn(n, 52 + n), x = Randn(rows * n, 53 + n);
  const std::vector<uint16_t> g0 = ToBf16Vec(gf), w0 = ToBf16Vec(wf);
  std::vector<uint16_t> xb0;
  if (bfx) xb0 = ToBf16Vec(x);  // x holds the bf16 values from here on
  // The device buffers: the values from element `off` on.
  auto shifted = [&](auto v) {
    v.insert(v.begin(), off, typename decltype(v)::value_type{});
    return v;
  };
  std::vector<uint16_t> g = shifted(g0), w = shifted(w0), xb = shifted(xb0);
  std::vector<float> xf = shifted(x);
  std::vector<float> rstd(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < n; ++j) ms += double(x[r * n + j]) * x[r * n + j];
    rstd[r] = static_cast<float>(1.0 / std::sqrt(ms / n + 1e-6));
  }
  std::vector<std::vector<float>> z, zout;
  for (int e = 0; e < extra; ++e) {
    z.push_back(shifted(Randn(rows * n, 70 + e)));
    zout.push_back(std::vector<float>(rows * n + off, NAN));
  }
  std::vector<uint16_t> dx(rows * n + off, 0);
  std::vector<float> s(rows, NAN);
  std::vector<void *> a = {dx.data() + off, s.data()};
  for (int e = 0; e < extra; ++e) a.push_back(zout[e].data() + off);
  a.insert(a.end(), {g.data() + off, w.data() + off, rstd.data(),
                     bfx ? static_cast<void *>(xb.data() + off) : static_cast<void *>(xf.data() + off)});
  for (int e = 0; e < extra; ++e) a.push_back(z[e].data() + off);
  LaunchDims d = Unwrap(RowFusedLaunch(p, rows));
  EXPECT_EQ(d.grid[0], 5u);
  d.grid[0] = 2;  // exercise the grid-stride loop over rows
  fn(G(d), B(d), d.smem, a.data(), rows);
  double err_dx = 0, err_s = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> gw(n);
    double ref_s = 0, mag_s = 0;
    for (int64_t j = 0; j < n; ++j) {
      gw[j] = FromBf16(ToBf16(gf[r * n + j] * wf[j]));  // exact fp32 product, rounded to bf16
      ref_s += gw[j] * x[r * n + j];
      mag_s += std::fabs(gw[j] * x[r * n + j]);
    }
    err_s = std::max(err_s, RelErr(s[r], ref_s, mag_s));
    const double c = ref_s * -0.5 * std::pow(double(rstd[r]), 3);
    for (int64_t j = 0; j < n; ++j) {
      const double a = gw[j] * rstd[r], e = c / n * (2.0 * x[r * n + j]);
      err_dx = std::max(err_dx, RelErr(FromBf16(dx[off + r * n + j]), a + e, std::fabs(a) + std::fabs(e)));
    }
  }
  EXPECT_LE(err_s, 1e-5) << k.name << " n=" << n;
  EXPECT_LE(err_dx, 1e-2) << k.name << " n=" << n;
  for (int e = 0; e < extra; ++e)
    EXPECT_EQ(0, std::memcmp(zout[e].data() + off, z[e].data() + off, rows * n * sizeof(float))) << "copy " << e;
  run.dx.assign(dx.begin() + off, dx.end());
  run.s = s;
  return run;
}

bool SameBits(const RmsNormBackwardRun &a, const RmsNormBackwardRun &b) {
  return a.dx.size() == b.dx.size() && a.s.size() == b.s.size() &&
         std::memcmp(a.dx.data(), b.dx.data(), a.dx.size() * sizeof(uint16_t)) == 0 &&
         std::memcmp(a.s.data(), b.s.data(), a.s.size() * sizeof(float)) == 0;
}

} // namespace

// dx of the RMSNorm backward in one kernel: the register-resident vector
// form (n = 2048 with f32 x: kVec = 4, 256 threads, 2 vectors each; with
// bf16 x: kVec = 8, 256 threads, 1 vector each), the streaming vector form
// (n = 100: 25 vectors, no power of two from 32 divides them), the run-time
// scalar path (pointers off alignment), and the compile-time scalar path
// (n = 102).
TEST(EmuRowFused, RmsNormBackwardMatchesFloat64) {
  if (!HaveCompiler()) GTEST_SKIP();
  const ScalarType BF = ScalarType::bf16;
  const std::string f2048 = Unwrap(EmitRowFused(RmsNormBackwardProgram(2048))).source;
  EXPECT_NE(f2048.find("static constexpr int kVec = 4;"), std::string::npos);
  EXPECT_NE(f2048.find("static constexpr int kThreads = 256;"), std::string::npos);
  EXPECT_NE(f2048.find("static constexpr int kPer = 2;"), std::string::npos);
  EXPECT_NE(f2048.find(kResidentMarker), std::string::npos);
  const std::string b2048 = Unwrap(EmitRowFused(RmsNormBackwardProgram(2048, BF))).source;
  EXPECT_NE(b2048.find("static constexpr int kVec = 8;"), std::string::npos);
  EXPECT_NE(b2048.find("static constexpr int kPer = 1;"), std::string::npos);
  EXPECT_NE(b2048.find(kResidentMarker), std::string::npos);
  const std::string f100 = Unwrap(EmitRowFused(RmsNormBackwardProgram(100))).source;
  EXPECT_NE(f100.find("static constexpr int kVec = 4;"), std::string::npos);
  EXPECT_EQ(f100.find(kResidentMarker), std::string::npos);
  const std::string f102 = Unwrap(EmitRowFused(RmsNormBackwardProgram(102))).source;
  EXPECT_NE(f102.find("static constexpr int kVec = 1;"), std::string::npos);
  EXPECT_EQ(f102.find(kResidentMarker), std::string::npos);
  // The register-resident kernel on aligned inputs and the same kernel on
  // misaligned ones (its scalar path) agree to the reference's tolerance but
  // not bitwise: the scalar path's thread t sums elements t, t + kThreads,
  // ..., the vector paths' sums elements kVec*t .. kVec*t + kVec-1, then
  // kVec*(t + kThreads) ..., a different order.
  RunRmsNormBackward(2048, false);
  RunRmsNormBackward(2048, true);
  RunRmsNormBackward(2048, false, BF);
  RunRmsNormBackward(2048, true, BF);
  RunRmsNormBackward(100, false);
  RunRmsNormBackward(100, true);
  RunRmsNormBackward(102, false);
}

// The register-resident form accumulates in the streaming vector form's
// order: at n = 4096 (1024 vectors of 4) both use 256 threads; two more
// cached f32 inputs (copied to outputs, dx and s untouched) take the
// resident form's 4 vectors per thread to 4 * 64 = 256 bytes, over its
// 192-byte budget, so that program streams. dx and s are bitwise equal.
TEST(EmuRowFused, RegisterResidentMatchesStreamingBitwise) {
  if (!HaveCompiler()) GTEST_SKIP();
  const std::string resident = Unwrap(EmitRowFused(RmsNormBackwardProgram(4096))).source;
  EXPECT_NE(resident.find(kResidentMarker), std::string::npos);
  EXPECT_NE(resident.find("static constexpr int kThreads = 256;"), std::string::npos);
  EXPECT_NE(resident.find("static constexpr int kPer = 4;"), std::string::npos);
  // One extra input: 4 * 48 = 192 bytes, still resident.
  EXPECT_NE(Unwrap(EmitRowFused(RmsNormBackwardProgram(4096, ScalarType::f32, 1))).source.find(kResidentMarker),
            std::string::npos);
  const std::string streaming = Unwrap(EmitRowFused(RmsNormBackwardProgram(4096, ScalarType::f32, 2))).source;
  EXPECT_EQ(streaming.find(kResidentMarker), std::string::npos);
  EXPECT_NE(streaming.find("static constexpr int kThreads = 256;"), std::string::npos);
  EXPECT_NE(streaming.find("static constexpr int kVec = 4;"), std::string::npos);
  const RmsNormBackwardRun a = RunRmsNormBackward(4096, false), b = RunRmsNormBackward(4096, false, ScalarType::f32, 2);
  EXPECT_NE(a.name, b.name);
  EXPECT_TRUE(SameBits(a, b)) << a.name << " vs " << b.name;
  // The resident kernel's scalar path (misaligned) sums in another order: on
  // these inputs 4 of its 5 s values differ from the aligned run's in the
  // last bits, so it is held to the float64 reference's tolerance only.
  RunRmsNormBackward(4096, true);
}

// Two passes: m = max(x) in the first, s = sum(exp(x - m)) in the second,
// y = exp(x - m) / s in the last; a NaN makes its whole row NaN. n = 2048:
// the register-resident form (256 threads, 2 vectors of 4 each), and its
// scalar path with the pointers off alignment; n = 37: scalar only.
TEST(EmuRowFused, SoftmaxTwoPassesAndNaN) {
  if (!HaveCompiler()) GTEST_SKIP();
  const ScalarType F = ScalarType::f32;
  for (int64_t n : {2048, 37}) {
    RowFusedProgram p;
    p.n = n;
    p.inputs = {{F, RowInputLayout::kDense}};
    const int x = -1, m = -2, s = -3;
    p.reductions = {{ReduceKind::max, x, F}, {ReduceKind::sum, 1, F}};  // operand of s: node 1
    p.nodes = {{EwOp::sub, {x, m}, F}, {EwOp::exp, {0}, F}, {EwOp::div, {1, s}, F}};
    p.outputs = {{2, F, false}, {m, F, true}};
    const KernelCode k = Unwrap(EmitRowFused(p));
    EXPECT_NE(k.source.find("pass 2"), std::string::npos) << k.name;
    EXPECT_EQ(k.source.find(kResidentMarker) != std::string::npos, n == 2048) << k.name;
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* y, float* m, const float* x, long long rows) {
  emu::Launch(g, b, smem, [&] { KERNEL(y, m, x, rows); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, float *, float *, const float *, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t rows = 5, nan_row = 3;
    std::vector<float> xs = Randn(rows * n, 61, 3.0f);
    xs[nan_row * n + n / 2] = NAN;
    for (int64_t off : {0, 1}) {
      if (off == 1 && n % 4 != 0) continue;  // no vector path to leave
      std::vector<float> xd(off, 0.0f), y(rows * n + off, -1.0f), mo(rows, -1.0f);
      xd.insert(xd.end(), xs.begin(), xs.end());
      const LaunchDims d = Unwrap(RowFusedLaunch(p, rows));
      fn(G(d), B(d), d.smem, y.data() + off, mo.data(), xd.data() + off, rows);
      double err = 0;
      for (int64_t r = 0; r < rows; ++r) {
        if (r == nan_row) {
          EXPECT_TRUE(std::isnan(mo[r]));
          for (int64_t j = 0; j < n; ++j)
            ASSERT_TRUE(std::isnan(y[off + r * n + j])) << "n=" << n << " column " << j;
          continue;
        }
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; ++j) mx = std::max<double>(mx, xs[r * n + j]);
        for (int64_t j = 0; j < n; ++j) sum += std::exp(xs[r * n + j] - mx);
        EXPECT_EQ(mo[r], static_cast<float>(mx)) << r;
        for (int64_t j = 0; j < n; ++j)
          err = std::max(err, RelErr(y[off + r * n + j], std::exp(xs[r * n + j] - mx) / sum, 0));
      }
      EXPECT_LE(err, 1e-5) << k.name << " n=" << n << " off=" << off;
    }
  }
}

// A value stored together with its row maximum, as the fp8 policy fuses the
// amax into the value's producer: silu(g) and silu(g) * u (bf16) stored,
// max |silu(g) * u| and sum(silu(g) * u) (f32, order-dependent) per row,
// and the column sums of silu(g) * u. None of the per-element results reads
// a reduction, so the reduction pass stores them and the kernel reads each
// row once. The same program with one more output that reads the maximum
// keeps its last pass; both kernels give the same bits for everything they
// share, and the host's math (the extra output too). n = 5632 (the 1B
// model's SwiGLU: streaming vectors), 2048 (register-resident) and 37
// (scalar); 13 rows on 3 blocks; one row with a NaN.
TEST(EmuRowFused, OutputsStoredInTheReductionPass) {
  if (!HaveCompiler()) GTEST_SKIP();
  const ScalarType F = ScalarType::f32, BF = ScalarType::bf16;
  for (int64_t n : {5632, 2048, 37}) {
    std::vector<std::vector<uint16_t>> y0s, y1s, maxes;
    std::vector<std::vector<float>> sums, partial_sets;
    for (bool last_pass : {false, true}) {
      RowFusedProgram p;
      p.n = n;
      p.inputs = {{BF, RowInputLayout::kDense}, {BF, RowInputLayout::kDense}};
      const int g = -1, u = -2, m = -3, sm = -4;
      p.reductions = {{ReduceKind::max, 2, BF}, {ReduceKind::sum, 1, F}};  // of nodes 2 and 1
      p.nodes = {{EwOp::silu, {g}, BF},      // 0
                 {EwOp::mul, {0, u}, BF},    // 1
                 {EwOp::abs, {1}, BF},       // 2
                 {EwOp::div, {1, m}, BF}};   // 3: reads the maximum
      p.outputs = {{0, BF, false}, {1, BF, false}, {m, BF, true}, {sm, F, true}};
      if (last_pass) p.outputs.push_back({3, BF, false});
      p.column_sums = {{1}};
      const KernelCode k = Unwrap(EmitRowFused(p));
      EXPECT_EQ(k.source.find("---- last pass") != std::string::npos, last_pass) << k.name;
      EXPECT_EQ(k.source.find("and the per-element outputs and column sums (they read no reduction)") !=
                    std::string::npos,
                !last_pass)
          << k.name;
      // The form each n takes.
      EXPECT_EQ(k.source.find(kResidentMarker) != std::string::npos, n == 2048) << k.name;
      EXPECT_EQ(k.source.find("static constexpr int kVec = 1;") != std::string::npos, n == 37) << k.name;
      const std::string outs = last_pass ? "(bf16*)a[0], (bf16*)a[1], (bf16*)a[2], (float*)a[7], (bf16*)a[6], (float*)a[3]"
                                         : "(bf16*)a[0], (bf16*)a[1], (bf16*)a[2], (float*)a[7], (float*)a[3]";
      const std::string stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, void** a, long long rows) {
  emu::Launch(g, b, smem, [&] { KERNEL()" + outs + R"(, (const bf16*)a[4], (const bf16*)a[5], rows); });
})";
      using Fn = void (*)(Dim3, Dim3, unsigned, void **, long long);
      auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
      ASSERT_NE(fn, nullptr) << k.name;
      const int64_t rows = 13, nan_row = 4, nan_col = n / 3;
      std::vector<float> gf = Randn(rows * n, 81, 2.f), uf = Randn(rows * n, 82, 2.f);
      gf[nan_row * n + nan_col] = NAN;
      std::vector<uint16_t> gb = ToBf16Vec(gf), ub = ToBf16Vec(uf);
      std::vector<uint16_t> y0(rows * n, 0), y1(rows * n, 0), mx(rows, 0), y3(rows * n, 0);
      std::vector<float> rsum(rows, -1.f);
      LaunchDims d = Unwrap(RowFusedLaunch(p, rows));
      d.grid[0] = 3;
      std::vector<float> partials(int64_t{d.grid[0]} * n, -1.f);
      std::vector<void *> a = {y0.data(), y1.data(), mx.data(), partials.data(), gb.data(), ub.data(), y3.data(),
                               rsum.data()};
      fn(G(d), B(d), d.smem, a.data(), rows);
      std::vector<double> colsum(n, 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        float want_max = -INFINITY;
        double want_sum = 0, mag = 0;
        std::vector<float> s1s(n);
        for (int64_t j = 0; j < n; ++j) {
          const float gv = FromBf16(gb[r * n + j]), uv = FromBf16(ub[r * n + j]);
          const float s0 = FromBf16(ToBf16(gv / (1.0f + std::exp(-gv))));
          const float s1 = FromBf16(ToBf16(s0 * uv));
          s1s[j] = s1;
          colsum[j] += s1;
          if (r == nan_row && j == nan_col) continue;
          ASSERT_EQ(y0[r * n + j], ToBf16(s0)) << n << " [" << r << ", " << j << "]";
          ASSERT_EQ(y1[r * n + j], ToBf16(s1)) << n << " [" << r << ", " << j << "]";
          want_max = std::max(want_max, std::fabs(s1));
          want_sum += s1;
          mag += std::fabs(s1);
        }
        if (r == nan_row) {
          EXPECT_TRUE(std::isnan(FromBf16(mx[r])) && std::isnan(rsum[r])) << n;
          continue;
        }
        EXPECT_EQ(mx[r], ToBf16(want_max)) << n << " row " << r;
        EXPECT_LE(RelErr(rsum[r], want_sum, mag), 1e-5) << n << " row " << r;
        if (last_pass)
          for (int64_t j = 0; j < n; ++j)
            ASSERT_EQ(y3[r * n + j], ToBf16(s1s[j] / FromBf16(mx[r]))) << n << " [" << r << ", " << j << "]";
      }
      for (int64_t j = 0; j < n; ++j) {
        double got = 0;
        for (unsigned blk = 0; blk < d.grid[0]; ++blk) got += partials[blk * n + j];
        if (j == nan_col) EXPECT_TRUE(std::isnan(got)) << n;
        else ASSERT_LE(std::fabs(got - colsum[j]), 1e-5 * (1 + std::fabs(colsum[j]))) << n << " column " << j;
      }
      y0s.push_back(y0);
      y1s.push_back(y1);
      maxes.push_back(mx);
      sums.push_back(rsum);
      partial_sets.push_back(partials);
    }
    EXPECT_EQ(y0s[0], y0s[1]) << n;
    EXPECT_EQ(y1s[0], y1s[1]) << n;
    EXPECT_EQ(maxes[0], maxes[1]) << n;
    EXPECT_EQ(0, std::memcmp(sums[0].data(), sums[1].data(), sums[0].size() * sizeof(float))) << n;
    EXPECT_EQ(0, std::memcmp(partial_sets[0].data(), partial_sets[1].data(),
                             partial_sets[0].size() * sizeof(float)))
        << n;
  }
}

// Column sums in the row kernel (a norm backward's weight gradient): per
// row y = g*w * sum(g*w) (bf16), and over the rows the column sums of g * h
// and of g * w (bf16 products). Each block writes its fp32 partial sums of
// the rows it took; their sum in block order is compared with float64 over
// the same bf16 products. n = 2048: register-resident (kVec 8, 256 threads),
// also misaligned (the scalar path); n = 200: the streaming vector form; n =
// 37: scalar only; n = 8192: resident at 256 threads, 32 columns a thread.
// 13 rows on a grid of 3 blocks: several rows per block.
TEST(EmuRowFused, ColumnSumsOverTheRows) {
  if (!HaveCompiler()) GTEST_SKIP();
  const ScalarType F = ScalarType::f32, BF = ScalarType::bf16;
  for (int64_t n : {2048, 200, 37, 8192}) {
    RowFusedProgram p;
    p.n = n;
    const int g = -1, w = -2, h = -3, s = -4;
    p.inputs = {{BF, RowInputLayout::kDense}, {BF, RowInputLayout::kColumn}, {BF, RowInputLayout::kDense}};
    p.reductions = {{ReduceKind::sum, 0, F}};
    p.nodes = {{EwOp::mul, {g, w}, BF}, {EwOp::mul, {0, s}, BF}, {EwOp::mul, {g, h}, BF}};
    p.outputs = {{1, BF, false}};
    p.column_sums = {{2}, {0}};
    const KernelCode k = Unwrap(EmitRowFused(p));
    const bool resident = k.source.find(kResidentMarker) != std::string::npos;
    EXPECT_EQ(resident, n == 2048 || n == 8192) << k.name << " n=" << n;
    EXPECT_NE(k.source.find("float cs1[kColAcc];"), std::string::npos) << k.name;
    if (n == 8192) EXPECT_NE(k.source.find("static constexpr int kColAcc = 32;"), std::string::npos) << k.source;
    const char *stub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, bf16* y, float* p0, float* p1, const bf16* gr,
                          const bf16* w, const bf16* h, long long rows) {
  emu::Launch(g, b, smem, [&] { KERNEL(y, p0, p1, gr, w, h, rows); });
})";
    using Fn = void (*)(Dim3, Dim3, unsigned, uint16_t *, float *, float *, const uint16_t *, const uint16_t *,
                        const uint16_t *, long long);
    auto fn = reinterpret_cast<Fn>(BuildEmu(k, stub));
    ASSERT_NE(fn, nullptr);
    const int64_t rows = 13;
    std::vector<float> gf = Randn(rows * n, 81 + n), wf = Randn(n, 82 + n), hf = Randn(rows * n, 83 + n);
    const std::vector<uint16_t> g0 = ToBf16Vec(gf), w0 = ToBf16Vec(wf), h0 = ToBf16Vec(hf);
    for (int64_t off : {0, 1}) {
      if (off == 1 && n != 2048) continue;
      auto shifted = [&](std::vector<uint16_t> v) {
        v.insert(v.begin(), off, uint16_t{0});
        return v;
      };
      const std::vector<uint16_t> gd = shifted(g0), wd = shifted(w0), hd = shifted(h0);
      std::vector<uint16_t> y(rows * n + off, 0);
      LaunchDims d = Unwrap(RowFusedLaunch(p, rows));
      EXPECT_EQ(d.grid[0], static_cast<unsigned>(rows));
      EXPECT_EQ(Unwrap(RowFusedColumnPartialBytes(p, rows)), rows * n * 4);
      d.grid[0] = 3;
      std::vector<float> p0(3 * n, NAN), p1(3 * n, NAN);
      fn(G(d), B(d), d.smem, y.data() + off, p0.data(), p1.data(), gd.data() + off, wd.data() + off,
         hd.data() + off, rows);
      double err_sum = 0, err_y = 0;
      for (int64_t j = 0; j < n; ++j) {
        double ref0 = 0, mag0 = 0, got0 = 0, ref1 = 0, mag1 = 0, got1 = 0;
        for (int64_t r = 0; r < rows; ++r) {
          const double v0 = llmc::ref::RoundBf16(FromBf16(g0[r * n + j]) * FromBf16(h0[r * n + j]));
          const double v1 = llmc::ref::RoundBf16(FromBf16(g0[r * n + j]) * FromBf16(w0[j]));
          ref0 += v0;
          mag0 += std::fabs(v0);
          ref1 += v1;
          mag1 += std::fabs(v1);
        }
        for (int b = 0; b < 3; ++b) {
          got0 += p0[b * n + j];
          got1 += p1[b * n + j];
        }
        err_sum = std::max({err_sum, RelErr(got0, ref0, mag0), RelErr(got1, ref1, mag1)});
      }
      for (int64_t r = 0; r < rows; ++r) {
        double srow = 0;
        for (int64_t j = 0; j < n; ++j) srow += llmc::ref::RoundBf16(FromBf16(g0[r * n + j]) * FromBf16(w0[j]));
        for (int64_t j = 0; j < n; ++j) {
          const double gw = llmc::ref::RoundBf16(FromBf16(g0[r * n + j]) * FromBf16(w0[j]));
          err_y = std::max(err_y, RelErr(FromBf16(y[off + r * n + j]), gw * srow, std::fabs(gw) * std::fabs(srow)));
        }
      }
      EXPECT_LE(err_sum, 1e-5) << k.name << " n=" << n << " off=" << off;
      EXPECT_LE(err_y, 1e-2) << k.name << " n=" << n << " off=" << off;
    }
  }
}

TEST(EmuRowFused, InvalidProgramsAreRefused) {
  const ScalarType F = ScalarType::f32;
  auto base = [&] {
    RowFusedProgram p;
    p.n = 64;
    p.inputs = {{F, RowInputLayout::kDense}};
    p.reductions = {{ReduceKind::sum, -1, F}};
    p.nodes = {{EwOp::mul, {-1, -2}, F}};  // x * sum(x)
    p.outputs = {{0, F, false}};
    return p;
  };
  auto message = [](const RowFusedProgram &p) {
    absl::StatusOr<KernelCode> k = EmitRowFused(p);
    EXPECT_FALSE(k.ok());
    if (k.ok()) return std::string("(no error)");
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << k.status();
    EXPECT_EQ(RowFusedLaunch(p, 4).status(), k.status());
    return std::string(k.status().message());
  };
  auto has = [](const std::string &msg, const char *what) {
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };
  EXPECT_TRUE(EmitRowFused(base()).ok());
  RowFusedProgram p = base();
  p.n = 0;
  has(message(p), "row fused: n must be >= 1, found 0");
  p = base();
  p.outputs.clear();
  has(message(p), "row fused: no outputs");
  p = base();
  p.nodes[0].operands = {-1, -3};
  has(message(p), "node 0 operand -3 references nothing (1 nodes, 1 inputs, 1 reductions)");
  p = base();
  p.nodes.push_back({EwOp::exp, {2}, F});
  p.nodes.push_back({EwOp::exp, {0}, F});
  has(message(p), "node 1 operand 2 must reference an earlier node");
  p = base();
  p.nodes[0].operands = {-1};
  has(message(p), "node 0 (mul) has 1 operands, expected 2");
  p = base();
  p.reductions[0].operand = 0;  // sum(x * sum(...))
  has(message(p), "reduction 0 depends on its own result");
  p = base();  // r0 = sum(x * r1), r1 = sum(x * r0)
  p.reductions = {{ReduceKind::sum, 0, F}, {ReduceKind::sum, 1, F}};
  p.nodes = {{EwOp::mul, {-1, -3}, F}, {EwOp::mul, {-1, -2}, F}};
  has(message(p), "reduction 0 depends on its own result");
  p = base();
  p.reductions[0].operand = 5;
  has(message(p), "reduction 0 operand 5 references nothing");
  p = base();
  p.outputs[0].per_row = true;
  has(message(p), "output 0 is per row but its value n0 is per element");
  p = base();
  p.outputs.push_back({-9, F, false});
  has(message(p), "output 1 value -9 references nothing");
  p = base();
  p.reductions.assign(kRowFusedMaxReductions + 1, {ReduceKind::sum, -1, F});
  has(message(p), "row fused: 9 reductions; at most 8 are supported");
  p = base();
  p.column_sums = {{7}};
  has(message(p), "column sum 0 value 7 references nothing");
  p = base();
  p.column_sums.assign(kRowFusedMaxColumnSums + 1, {0});
  has(message(p), "row fused: 5 column sums; at most 4 are supported");
  p = base();
  p.n = kRowFusedMaxColumnRow + 8;
  p.column_sums = {{0}};
  has(message(p), "column sums need rows of at most 8192 elements, found 8200");
  p = base();  // only a column sum: no outputs needed
  p.outputs.clear();
  p.column_sums = {{0}};
  EXPECT_TRUE(EmitRowFused(p).ok());
  // An integer input reduced (as fp32) is fine, as is a per-row output of a
  // reduction.
  p = base();
  p.inputs[0].type = ScalarType::i32;
  p.outputs.push_back({-2, ScalarType::i64, true});
  EXPECT_TRUE(EmitRowFused(p).ok());
}

// llm.varlen_attention (issue 19): packed sequences with as many queries as
// keys (training, prefill), fewer (a chunk after a cached prefix), more
// (causal rows that see no key give 0), none, and one longer than a query
// tile; GQA; causal and not; the tensor-core kernel (bf16) and the simple
// one (f32). Each sequence equals the float64 reference of it alone.
namespace {
const char *kVarlenStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, T* out, const T* q, const T* k, const T* v,
                          const MaskT* mask, long long B, long long Sq, long long Skv, int Hq, int Hkv,
                          float scale, long long msb, long long msh, long long msq, const CuQT* cuq,
                          const CuKT* cuk) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, q, k, v, mask, B, Sq, Skv, Hq, Hkv, scale, msb, msh, msq, cuq, cuk); });
}
)";

void RunVarlen(bool simple, bool causal, int64_t d) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  AttentionConfig cfg;
  cfg.dtype = simple ? ScalarType::f32 : ScalarType::bf16;
  cfg.head_dim = d;
  cfg.causal = causal;
  cfg.varlen = true;
  cfg.cu_seqlens_q_type = ScalarType::i32;
  cfg.cu_seqlens_k_type = ScalarType::i64;
  const KernelCode k = Unwrap(EmitAttention(cfg));
  ASSERT_EQ(AttentionUsesTensorCores(cfg), !simple);
  using Fn = void (*)(Dim3, Dim3, unsigned, void *, const void *, const void *, const void *, const float *,
                      long long, long long, long long, int, int, float, long long, long long, long long,
                      const int32_t *, const int64_t *);
  auto fn = reinterpret_cast<Fn>(BuildEmu(k, kVarlenStub));
  ASSERT_NE(fn, nullptr);
  const int64_t Hq = 6, Hkv = 2;
  const std::vector<int64_t> ns = {5, 3, 0, 4, 1, 70}, ms = {5, 7, 0, 2, 9, 70};
  std::vector<int32_t> cuq = {0};
  std::vector<int64_t> cuk = {0};
  for (size_t b = 0; b < ns.size(); ++b) {
    cuq.push_back(cuq.back() + static_cast<int32_t>(ns[b]));
    cuk.push_back(cuk.back() + ms[b]);
  }
  const int64_t T = cuq.back(), Tk = cuk.back(), Bn = static_cast<int64_t>(ns.size());
  auto q = Randn(T * Hq * d, 11), kk = Randn(Tk * Hkv * d, 12), v = Randn(Tk * Hkv * d, 13);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const LaunchDims ld = Unwrap(AttentionLaunch(cfg, Bn, T, Hq));
  std::vector<float> out(q.size(), NAN);
  if (simple) {
    fn(G(ld), B(ld), ld.smem, out.data(), q.data(), kk.data(), v.data(), nullptr, Bn, T, Tk, Hq, Hkv, scale, 0,
       0, 0, cuq.data(), cuk.data());
  } else {
    auto qb = ToBf16Vec(q), kb = ToBf16Vec(kk), vb = ToBf16Vec(v);
    std::vector<uint16_t> ob(q.size(), 0x7fc0);  // NaN: every row must be written
    fn(G(ld), B(ld), ld.smem, ob.data(), qb.data(), kb.data(), vb.data(), nullptr, Bn, T, Tk, Hq, Hkv, scale, 0,
       0, 0, cuq.data(), cuk.data());
    for (size_t i = 0; i < ob.size(); ++i) out[i] = FromBf16(ob[i]);
  }
  const double tol = simple ? 1e-5 : 2e-2;
  for (int64_t b = 0; b < Bn; ++b) {
    const int64_t n = ns[b], m = ms[b];
    if (n == 0) continue;
    std::vector<float> qs(q.begin() + cuq[b] * Hq * d, q.begin() + (cuq[b] + n) * Hq * d),
        ks(kk.begin() + cuk[b] * Hkv * d, kk.begin() + (cuk[b] + m) * Hkv * d),
        vs(v.begin() + cuk[b] * Hkv * d, v.begin() + (cuk[b] + m) * Hkv * d);
    const auto ref = llmc::ref::AttentionRef(qs, ks, vs, nullptr, 1, n, m, m, Hq, Hkv, d, causal, scale);
    double max_err = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const float got = out[cuq[b] * Hq * d + i];
      ASSERT_TRUE(std::isfinite(got)) << k.name << " sequence " << b << " element " << i;
      max_err = std::max(max_err, std::fabs((double)got - ref[i]));
    }
    EXPECT_LT(max_err, tol) << k.name << " sequence " << b;
  }
}
} // namespace

TEST(Emu, VarlenFlashAttentionCausal) { RunVarlen(false, true, 64); }
TEST(Emu, VarlenFlashAttentionNotCausal) { RunVarlen(false, false, 128); }
TEST(Emu, VarlenSimpleAttentionCausal) { RunVarlen(true, true, 80); }
TEST(Emu, VarlenAttentionConfigErrors) {
  AttentionConfig c;
  c.varlen = true;
  c.has_mask = true;
  EXPECT_EQ(EmitAttention(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.has_mask = false;
  c.cu_seqlens_k_type = ScalarType::f32;
  EXPECT_EQ(EmitAttention(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.cu_seqlens_k_type = ScalarType::i64;
  EXPECT_TRUE(EmitAttention(c).ok());
  if (llmc::test::NvrtcAvailable())
    for (const char *arch : {"sm_90a", "sm_80"}) {
      std::string log;
      EXPECT_TRUE(llmc::test::NvrtcCompileWithOptions(Unwrap(EmitAttention(c)).source, "varlen", arch, {}, &log))
          << arch << ":\n" << log;
    }
}
