//===- KernelLibraryTest.cpp - NVRTC compile + launch geometry tests -------===//
//
// Every generator is compiled with NVRTC for sm_90 and sm_80 (to cubin, so
// ptxas runs too) over a grid of configurations. No GPU is needed.
// Set LLMC_KERNEL_DUMP_DIR to write every generated source to that folder.
//
//===----------------------------------------------------------------------===//

#include "GeneratorStatus.h"
#include "NvrtcHelper.h"
#include "../../../lib/Target/CUDA/Internal.h"
#include "llmc/Target/CUDA/KernelLibrary.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <utility>

using namespace llmc::cuda;
using llmc::test::Unwrap;

namespace {

void Dump(const KernelCode &k) {
  if (const char *dir = std::getenv("LLMC_KERNEL_DUMP_DIR"))
    std::ofstream(std::string(dir) + "/" + k.name + ".cu") << k.source;
}

// Compiles for sm_90 and sm_80 and checks the entry name appears once.
void ExpectCompiles(const KernelCode &k) {
  Dump(k);
  ASSERT_FALSE(k.name.empty());
  const std::string entry = "extern \"C\" __global__";
  size_t count = 0;
  for (size_t p = k.source.find(entry); p != std::string::npos; p = k.source.find(entry, p + 1)) ++count;
  EXPECT_EQ(count, 1u) << k.name;
  EXPECT_NE(k.source.find(k.name + "("), std::string::npos) << k.name;
  if (!llmc::test::NvrtcAvailable()) GTEST_SKIP() << "libnvrtc not available";
  for (const char *arch : {"sm_90", "sm_80"}) {
    std::string log;
    size_t cubin = 0;
    const bool ok = llmc::test::NvrtcCompile(k.source, k.name, arch, &log, &cubin);
    EXPECT_TRUE(ok) << k.name << " (" << arch << "):\n" << log;
    if (ok) {
      EXPECT_GT(cubin, 0u);
    }
  }
}

const ScalarType kFloatTypes[] = {ScalarType::f32, ScalarType::f16, ScalarType::bf16};

} // namespace

// The tiled transpose: a bit-exact copy of each fp8 and 16-bit type (the fp8
// GEMM relayouts), and the converting form fp8 to bf16.
TEST(Transpose, Compiles) {
  const ScalarType e4 = ScalarType::f8e4m3, e5 = ScalarType::f8e5m2, bf = ScalarType::bf16;
  const std::pair<ScalarType, ScalarType> pairs[] = {
      {e4, e4}, {e5, e5}, {bf, bf}, {ScalarType::f16, ScalarType::f16}, {e4, bf}, {e5, bf}};
  for (const auto &[in, out] : pairs) {
    TransposeConfig cfg;
    cfg.in = in;
    cfg.out = out;
    ExpectCompiles(Unwrap(EmitTranspose(cfg)));
  }
}

// The tiled elementwise form: the quantizing casts of transposed fp8 GEMM
// operands (bf16, f16, f32 in; e4m3, e5m2 out; a scalar scale), one with a
// contiguous input and a second output, for sm_90 and sm_80 and the fp8
// targets sm_90a and sm_89 (hardware fp8 conversions).
TEST(ElementwiseTiled, Compiles) {
  for (ScalarType in : kFloatTypes)
    for (ScalarType q : {ScalarType::f8e4m3, ScalarType::f8e5m2})
      for (bool second : {false, true}) {
        ElementwiseProgram p;
        p.inputs = {{in, InputLayout::kTransposed}, {ScalarType::f32, InputLayout::kScalar}};
        p.nodes = {{EwOp::cast, {-1}, ScalarType::f32},
                   {EwOp::div, {0, -2}, ScalarType::f32},
                   {EwOp::cast, {1}, q}};
        p.outputs = {{2, q}};
        if (second) {
          p.inputs.push_back({ScalarType::bf16, InputLayout::kContiguous});
          p.nodes.push_back({EwOp::add, {0, -3}, ScalarType::bf16});
          p.outputs.push_back({3, ScalarType::bf16});
        }
        const KernelCode k = Unwrap(EmitElementwise(p));
        ExpectCompiles(k);
        if (!llmc::test::NvrtcAvailable()) continue;
        for (const char *arch : {"sm_90a", "sm_89"}) {
          std::string log;
          size_t cubin = 0;
          EXPECT_TRUE(llmc::test::NvrtcCompile(k.source, k.name, arch, &log, &cubin))
              << k.name << " (" << arch << "):\n" << log;
        }
      }
}

//===----------------------------------------------------------------------===//
// Preamble / types
//===----------------------------------------------------------------------===//

TEST(Preamble, CompilesAllConversions) {
  KernelCode k;
  k.name = "llmc_test_preamble";
  k.source = std::string(Preamble()) + R"CUDA(
extern "C" __global__ void llmc_test_preamble(float* out, const bf16* a, const f16* b,
                                             const fp8e4m3* c, const fp8e5m2* d, bf16* oa, f16* ob,
                                             fp8e4m3* oc, fp8e5m2* od, int64_t* oi, uint8_t* ou) {
  __shared__ float scratch[32];
  const int i = threadIdx.x;
  float v = toF(a[i]) + toF(b[i]) + toF(c[i]) + toF(d[i]);
  oa[i] = fromF<bf16>(v); ob[i] = fromF<f16>(v); oc[i] = fromF<fp8e4m3>(v); od[i] = fromF<fp8e5m2>(v);
  oi[i] = fromF<int64_t>(v); ou[i] = fromF<uint8_t>(v);
  out[i] = blockSum(v, scratch) + blockMax(v, scratch) + warpMaxNan(v) + llmc_maxf(v, 1.0f);
}
)CUDA";
  ExpectCompiles(k);
}

TEST(ScalarTypes, Names) {
  EXPECT_STREQ(CTypeName(ScalarType::bf16), "bf16");
  EXPECT_STREQ(CTypeName(ScalarType::i1), "uint8_t");
  EXPECT_STREQ(CTypeName(ScalarType::i64), "int64_t");
  EXPECT_EQ(ScalarSize(ScalarType::i1), 1);
  EXPECT_EQ(ScalarSize(ScalarType::f8e4m3), 1);
  EXPECT_EQ(ScalarSize(ScalarType::i64), 8);
  EXPECT_TRUE(IsIntType(ScalarType::i1));
  EXPECT_TRUE(IsFloatType(ScalarType::f8e5m2));
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

namespace {
ElementwiseProgram SwiGLU(ScalarType t) {
  ElementwiseProgram p;
  p.inputs = {{t, InputLayout::kContiguous}, {t, InputLayout::kContiguous}};
  p.nodes = {{EwOp::silu, {-1}, ScalarType::f32}, {EwOp::mul, {0, -2}, ScalarType::f32}};
  p.outputs = {{1, t}};
  return p;
}
} // namespace

TEST(Elementwise, SwiGLUAllTypes) {
  for (ScalarType t : kFloatTypes) ExpectCompiles(Unwrap(EmitElementwise(SwiGLU(t))));
}

TEST(Elementwise, EveryOpAndLayout) {
  const InputLayout layouts[] = {InputLayout::kContiguous, InputLayout::kScalar, InputLayout::kRowBroadcast,
                                 InputLayout::kStrided};
  for (InputLayout lay : layouts) {
    ElementwiseProgram p;
    p.inputs = {{ScalarType::bf16, InputLayout::kContiguous}, {ScalarType::f32, lay}, {ScalarType::i64, lay}};
    const ScalarType F = ScalarType::f32;
    p.nodes = {
        {EwOp::add, {-1, -2}, F},       // 0
        {EwOp::sub, {0, -2}, F},        // 1
        {EwOp::mul, {1, 0}, F},         // 2
        {EwOp::div, {2, -2}, F},        // 3
        {EwOp::neg, {3}, F},            // 4
        {EwOp::abs, {4}, F},            // 5
        {EwOp::exp, {5}, F},            // 6
        {EwOp::log, {6}, F},            // 7
        {EwOp::tanh, {7}, F},           // 8
        {EwOp::sqrt, {5}, F},           // 9
        {EwOp::rsqrt, {6}, F},          // 10
        {EwOp::pow, {9, 10}, F},        // 11
        {EwOp::maximum, {11, 8}, F},    // 12
        {EwOp::minimum, {12, 0}, F},    // 13
        {EwOp::silu, {13}, F},          // 14
        {EwOp::gelu_erf, {14}, F},      // 15
        {EwOp::gelu_tanh, {15}, F},     // 16
        {EwOp::relu, {16}, F},          // 17
        {EwOp::sigmoid, {17}, F},       // 18
        {EwOp::compare, {18, -2}, ScalarType::i1, 0, CmpPredicate::lt},  // 19
        {EwOp::constant, {}, F, 0.5},   // 20
        {EwOp::select, {19, 18, 20}, F},  // 21
        {EwOp::cast, {21}, ScalarType::bf16},  // 22
        {EwOp::add, {-3, -3}, ScalarType::i64},  // 23 integer math
        {EwOp::div, {23, -3}, ScalarType::i64},  // 24
        {EwOp::cast, {24}, ScalarType::i32},     // 25
        {EwOp::maximum, {25, -3}, ScalarType::i64},  // 26
        {EwOp::compare, {26, 22}, ScalarType::i1, 0, CmpPredicate::ge},  // 27
        {EwOp::constant, {}, ScalarType::i64, 7},  // 28
        {EwOp::cast, {22}, ScalarType::f8e4m3},    // 29
        {EwOp::cast, {29}, ScalarType::f8e5m2},    // 30
    };
    p.outputs = {{22, ScalarType::bf16}, {27, ScalarType::i1}, {26, ScalarType::i64}, {30, ScalarType::f8e4m3},
                 {28, ScalarType::i32}};
    SCOPED_TRACE(static_cast<int>(lay));
    ExpectCompiles(Unwrap(EmitElementwise(p)));
  }
}

TEST(Elementwise, DeterministicNamesAndSources) {
  auto a = Unwrap(EmitElementwise(SwiGLU(ScalarType::bf16)));
  auto b = Unwrap(EmitElementwise(SwiGLU(ScalarType::bf16)));
  auto c = Unwrap(EmitElementwise(SwiGLU(ScalarType::f16)));
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.source, b.source);
  EXPECT_NE(a.name, c.name);
}

TEST(Elementwise, LaunchAndShape) {
  auto p = SwiGLU(ScalarType::bf16);
  LaunchDims d = Unwrap(ElementwiseLaunch(p, 1000));  // 8 elements per thread -> 125 threads
  EXPECT_EQ(d.block[0], 256u);
  EXPECT_EQ(d.grid[0], 1u);
  d = Unwrap(ElementwiseLaunch(p, int64_t{1} << 30));
  EXPECT_EQ(d.grid[0], unsigned(kAssumedNumSMs * 16));  // grid-stride cap
  EXPECT_EQ(d.smem, 0u);
  EXPECT_FALSE(ElementwiseNeedsShape(p));

  ElementwiseProgram q = p;
  q.inputs[1].layout = InputLayout::kStrided;
  EXPECT_TRUE(ElementwiseNeedsShape(q));
  auto shape = Unwrap(PackElementwiseShape(q, {4, 3, 5}, {{}, {0, 5, 1}}));
  ASSERT_EQ(shape.size(), 1u + 8u + 16u);
  EXPECT_EQ(shape[0], 3);
  EXPECT_EQ(shape[1], 4);
  EXPECT_EQ(shape[3], 5);
  EXPECT_EQ(shape[4], 1);  // unused dims = 1
  EXPECT_EQ(shape[9 + 8 + 0], 0);
  EXPECT_EQ(shape[9 + 8 + 1], 5);
  EXPECT_EQ(shape[9 + 8 + 2], 1);
  // scalar path: one element per thread
  d = Unwrap(ElementwiseLaunch(q, 1000));
  EXPECT_EQ(d.grid[0], 4u);
}

//===----------------------------------------------------------------------===//
// Norms
//===----------------------------------------------------------------------===//

TEST(RMSNorm, CompileGrid) {
  for (ScalarType t : kFloatTypes)
    for (int64_t h : {64, 200, 1000, 1024, 4096, 5120, 8192, 16384})
      for (bool res : {false, true}) {
        RMSNormConfig c;
        c.in = c.out = c.weight = t;
        c.hidden = h;
        c.fused_residual = res;
        ExpectCompiles(Unwrap(EmitRMSNorm(c)));
      }
  RMSNormConfig c;
  c.in = ScalarType::bf16;
  c.weight = ScalarType::f32;
  c.out = ScalarType::f8e4m3;
  c.round_before_weight = true;
  ExpectCompiles(Unwrap(EmitRMSNorm(c)));
}

TEST(RMSNorm, Launch) {
  RMSNormConfig c;
  c.in = ScalarType::bf16;
  c.hidden = 4096;  // 512 vectors of 8 -> 128 threads x 4 chunks
  LaunchDims d = Unwrap(RMSNormLaunch(c, 16384));
  EXPECT_EQ(d.block[0], 128u);
  EXPECT_EQ(d.grid[0], 16384u);
  c.hidden = 200;   // 25 vectors of 8 -> warp per row, 4 rows per block
  d = Unwrap(RMSNormLaunch(c, 21));
  EXPECT_EQ(d.block[0], 128u);
  EXPECT_EQ(d.grid[0], 6u);
  c.hidden = 1001;  // odd: scalar, 1001 vectors -> block per row, 256 threads
  d = Unwrap(RMSNormLaunch(c, 3));
  EXPECT_EQ(d.block[0], 256u);
  EXPECT_EQ(d.grid[0], 3u);
  auto k = Unwrap(EmitRMSNorm(c));
  EXPECT_NE(k.source.find("kVec = 1;"), std::string::npos);
}

TEST(RMSNorm, ArgumentOrderDocumented) {
  RMSNormConfig c;
  c.fused_residual = true;
  auto k = Unwrap(EmitRMSNorm(c));
  const size_t o = k.source.find("OutT* __restrict__ out");
  const size_t ro = k.source.find("InT* residual_out");
  const size_t x = k.source.find("const InT* x");
  const size_t r = k.source.find("const InT* residual,");
  const size_t w = k.source.find("const WT* __restrict__ weight");
  const size_t rows = k.source.find("long long rows");
  ASSERT_NE(o, std::string::npos);
  EXPECT_LT(o, ro);
  EXPECT_LT(ro, x);
  EXPECT_LT(x, r);
  EXPECT_LT(r, w);
  EXPECT_LT(w, rows);
}

TEST(LayerNorm, CompileGrid) {
  for (ScalarType t : kFloatTypes)
    for (int64_t h : {200, 768, 4096})
      for (int flags = 0; flags < 8; ++flags) {
        LayerNormConfig c;
        c.in = c.out = c.weight = t;
        c.hidden = h;
        c.has_weight = flags & 1;
        c.has_bias = flags & 2;
        c.fused_residual = flags & 4;
        ExpectCompiles(Unwrap(EmitLayerNorm(c)));
      }
  LayerNormConfig c;
  EXPECT_EQ(Unwrap(LayerNormLaunch(c, 7)).grid[0], 7u);
}

// The compile-time constant kChunks (vectors per thread kept in registers,
// every loop over them unrolled) of a row kernel; -1 when there is none.
long long ChunksOf(const KernelCode &k) {
  const std::string key = "kChunks = ";
  const size_t at = k.source.find(key);
  return at == std::string::npos ? -1 : std::atoll(k.source.c_str() + at + key.size());
}

// NVRTC's time grew with the row width: the norms kept a thread's share of
// the row in registers, kChunks = width / 1024 / vector width, every loop
// over it unrolled (2^20 columns: 3.4 s; 2^22: over 2 minutes; 2^31: never
// finished). Up to 65536 columns the register kernel is unchanged; beyond,
// the row is streamed: no kChunks, source no longer than the register
// kernel's, 64-bit row indices.
TEST(RMSNorm, LongRowsAreStreamedNotUnrolled) {
  RMSNormConfig reg;
  reg.hidden = 65536;  // 8192 vectors of bf16: 8 per thread, in registers
  EXPECT_EQ(ChunksOf(Unwrap(EmitRMSNorm(reg))), 8);
  const size_t reg_size = Unwrap(EmitRMSNorm(reg)).source.size();
  for (ScalarType t : kFloatTypes)
    for (int64_t h : {int64_t{65544}, int64_t{1} << 20, int64_t{1} << 22, int64_t{1} << 31,
                      int64_t{1} << 40})
      for (bool res : {false, true}) {
        RMSNormConfig c;
        c.in = c.out = c.weight = t;
        c.hidden = h;
        c.fused_residual = res;
        const KernelCode k = Unwrap(EmitRMSNorm(c));
        EXPECT_EQ(ChunksOf(k), -1) << k.name;
        EXPECT_EQ(k.source.find("v[kChunks]"), std::string::npos) << k.name;
        EXPECT_NE(k.source.find("kN = " + std::to_string(h) + "LL;"), std::string::npos) << k.name;
        EXPECT_LE(k.source.size(), reg_size + 512) << k.name;
        EXPECT_EQ(Unwrap(RMSNormLaunch(c, 3)).block[0], 1024u);
        if (h == int64_t{1} << 31) ExpectCompiles(k);
      }
}

TEST(LayerNorm, LongRowsAreStreamedNotUnrolled) {
  for (int64_t h : {int64_t{66000}, int64_t{1} << 22, int64_t{1} << 31})
    for (int flags = 0; flags < 8; ++flags) {
      LayerNormConfig c;
      c.in = c.out = c.weight = ScalarType::f32;
      c.hidden = h;
      c.has_weight = flags & 1;
      c.has_bias = flags & 2;
      c.fused_residual = flags & 4;
      const KernelCode k = Unwrap(EmitLayerNorm(c));
      EXPECT_EQ(ChunksOf(k), -1) << k.name;
      EXPECT_NE(k.source.find("pass 2: biased variance"), std::string::npos) << k.name;
      if (h == int64_t{1} << 31 && flags == 7) ExpectCompiles(k);
    }
}

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

TEST(Softmax, CompileGrid) {
  for (ScalarType t : kFloatTypes)
    for (int64_t n : {1, 7, 127, 1024, 1025, 4096, 32000, 50257, 131072})
      for (bool mask : {false, true}) {
        SoftmaxConfig c;
        c.in = c.out = t;
        c.n = n;
        c.has_mask = mask;
        c.mask = ScalarType::bf16;
        ExpectCompiles(Unwrap(EmitSoftmax(c)));
      }
}

// Rows of 2^30 elements or more index with 64-bit integers: an int kN of
// 2^31 silently wrapped (and `int vi` loops over its vectors overflowed).
TEST(Softmax, WideRowsIndexWith64Bits) {
  for (int64_t n : {int64_t{1} << 31, (int64_t{1} << 40) + 8})
    for (bool mask : {false, true}) {
      SoftmaxConfig c;
      c.in = c.out = ScalarType::bf16;
      c.n = n;
      c.has_mask = mask;
      const KernelCode k = Unwrap(EmitSoftmax(c));
      EXPECT_NE(k.source.find("long long kN = " + std::to_string(n) + "LL;"), std::string::npos) << k.name;
      EXPECT_NE(k.source.find("long long kNumVec"), std::string::npos) << k.name;
      EXPECT_EQ(k.source.find("int vi"), std::string::npos) << k.name;
      EXPECT_EQ(k.source.find("int j,"), std::string::npos) << k.name;
      if (n == int64_t{1} << 31) ExpectCompiles(k);
    }
  SoftmaxConfig narrow;
  narrow.n = (int64_t{1} << 30) - 8;  // still int
  EXPECT_NE(Unwrap(EmitSoftmax(narrow)).source.find("static constexpr int kN = "), std::string::npos);
}

TEST(Softmax, Launch) {
  SoftmaxConfig c;
  c.in = ScalarType::bf16;
  c.n = 1024;  // warp per row
  LaunchDims d = Unwrap(SoftmaxLaunch(c, 10));
  EXPECT_EQ(d.block[0], 128u);
  EXPECT_EQ(d.grid[0], 3u);
  c.n = 4096;  // block per row in registers
  d = Unwrap(SoftmaxLaunch(c, 10));
  EXPECT_EQ(d.grid[0], 10u);
  EXPECT_EQ(d.block[0], 128u);
  c.n = 131072;  // online path: 1024 threads
  d = Unwrap(SoftmaxLaunch(c, 2));
  EXPECT_EQ(d.block[0], 1024u);
  EXPECT_NE(Unwrap(EmitSoftmax(c)).source.find("Milakov"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// RoPE
//===----------------------------------------------------------------------===//

TEST(RoPE, CompileGrid) {
  const PositionSource srcs[] = {PositionSource::kNone, PositionSource::kScalarI32, PositionSource::kScalarI64,
                                 PositionSource::kPerBatchI32, PositionSource::kPerBatchI64};
  for (ScalarType t : kFloatTypes)
    for (int64_t d : {64, 80, 96, 128, 256})
      for (bool inter : {false, true})
        for (int si = 0; si < 5; si += 2) {
          RoPEConfig c;
          c.dtype = t;
          c.head_dim = d;
          c.num_heads = 9;
          c.interleaved = inter;
          c.offset = srcs[(si + d / 16 + inter) % 5];
          ExpectCompiles(Unwrap(EmitRoPE(c)));
        }
  RoPEConfig c;
  c.rotary_dim = 32;  // partial rotary (GPT-NeoX style)
  c.theta = 500000.0f;
  ExpectCompiles(Unwrap(EmitRoPE(c)));
}

TEST(RoPE, Launch) {
  RoPEConfig c;  // H=32, D=128 -> 64 pairs x 4 head groups
  LaunchDims d = Unwrap(RoPELaunch(c, 3, 129));
  EXPECT_EQ(d.grid[0], 3u * 129u);
  EXPECT_EQ(d.block[0], 256u);
  c.head_dim = 80;
  c.num_heads = 2;  // 40 pairs x 2 head groups = 80 -> 96
  d = Unwrap(RoPELaunch(c, 1, 1));
  EXPECT_EQ(d.block[0], 96u);
}

TEST(RoPETable, CompileGrid) {
  for (ScalarType t : kFloatTypes)
    for (ScalarType tab : kFloatTypes)
      for (int64_t d : {64, 128})
        for (bool inter : {false, true}) {
          RoPETableConfig c;
          c.dtype = t;
          c.table = tab;
          c.head_dim = d;
          c.num_heads = d == 64 ? 32 : 9;
          c.interleaved = inter;
          ExpectCompiles(Unwrap(EmitRoPETable(c)));
          // The RoPE + KV-cache write variant.
          c.cache_write = true;
          c.index = inter ? ScalarType::i32 : ScalarType::i64;
          ExpectCompiles(Unwrap(EmitRoPETable(c)));
          // With q (GQA: 4x the heads) and v in the same launch.
          c.q_heads = 4 * c.num_heads;
          c.v_write = true;
          ExpectCompiles(Unwrap(EmitRoPETable(c)));
          c.q_heads = 0;
          c.v_write = false;
        }
}

TEST(RoPETable, NameEncodesTheVariantAndLaunch) {
  RoPETableConfig c;  // bf16 x, f32 tables, H=32, D=128, half_split
  KernelCode k = Unwrap(EmitRoPETable(c));
  EXPECT_EQ(k.name, "llmc_rope_table_bf16_tabf32_h32_d128_half");
  c.interleaved = true;
  c.table = ScalarType::bf16;
  EXPECT_EQ(Unwrap(EmitRoPETable(c)).name, "llmc_rope_table_bf16_tabbf16_h32_d128_interleaved");
  LaunchDims d = Unwrap(RoPETableLaunch(c, 4, 2048));  // one block per token
  EXPECT_EQ(d.grid[0], 4u * 2048u);
  EXPECT_EQ(d.block[0], 256u);                 // 64 pairs x 4 head groups
  c.cache_write = true;
  EXPECT_EQ(Unwrap(EmitRoPETable(c)).name,
            "llmc_rope_table_bf16_tabbf16_h32_d128_interleaved_cachewrite_i64");
  EXPECT_TRUE(RoPETableSupported(c));
  c.index = ScalarType::f32;
  EXPECT_FALSE(RoPETableSupported(c));
  EXPECT_EQ(EmitRoPETable(c).status().message(),
            "llmc::cuda kernel generator: rope table: cache write indices must be i32 or i64");
  c.index = ScalarType::i64;
  c.cache_write = false;
  c.v_write = true;
  EXPECT_EQ(EmitRoPETable(c).status().message(),
            "llmc::cuda kernel generator: rope table: q and v parts need a cache write");
  c.v_write = false;
  c.head_dim = 7;
  absl::StatusOr<KernelCode> odd = EmitRoPETable(c);
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(odd.status().message(), "llmc::cuda kernel generator: rope table: bad head_dim / num_heads");
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

TEST(Attention, FlashCompileGrid) {
  for (ScalarType t : {ScalarType::bf16, ScalarType::f16})
    for (int64_t d : {64, 80, 96, 128, 256})
      for (bool causal : {false, true})
        for (bool mask : {false, true}) {
          AttentionConfig c;
          c.dtype = t;
          c.head_dim = d;
          c.causal = causal;
          c.has_mask = mask;
          c.mask = mask && d == 64 ? ScalarType::bf16 : ScalarType::f32;
          ASSERT_TRUE(AttentionUsesTensorCores(c));
          auto k = Unwrap(EmitAttention(c));
          EXPECT_NE(k.source.find("mma.sync.aligned.m16n8k16"), std::string::npos);
          ExpectCompiles(k);
        }
}

TEST(Attention, SimpleCompileGrid) {
  for (ScalarType t : kFloatTypes)
    for (int64_t d : {40, 64, 72, 80, 96, 128, 256, 300})
      for (bool causal : {false, true}) {
        AttentionConfig c;
        c.dtype = t;
        c.head_dim = d;
        c.causal = causal;
        c.has_mask = d == 80;
        c.force_simple = true;
        ASSERT_FALSE(AttentionUsesTensorCores(c));
        ExpectCompiles(Unwrap(EmitAttention(c)));
      }
}

TEST(Attention, Launch) {
  AttentionConfig c;
  c.head_dim = 128;
  // Library default: 64 x 64 tiles, 4 warps, K/V double-buffered, grid
  // (B*Hq, q tiles): the fastest order in the H200 sweep.
  EXPECT_EQ(AttentionTileName(ResolvedAttentionTile(c)), "bm64_bn64_w4_s2_gh");
  LaunchDims d = Unwrap(AttentionLaunch(c, 4, 2048, 32));
  EXPECT_EQ(d.grid[0], 128u);
  EXPECT_EQ(d.grid[1], 32u);
  EXPECT_EQ(d.grid[2], 1u);
  EXPECT_EQ(d.block[0], 128u);
  EXPECT_EQ(d.smem, 4u * 64u * 136u * 2u);  // 2 stages of K and V tiles, Q via registers
  ASSERT_TRUE(ParseAttentionTile("bm128_bn64_w4_s2", &c.tile, nullptr));
  d = Unwrap(AttentionLaunch(c, 4, 2048, 32));
  EXPECT_EQ(d.grid[0], 16u);  // (q tiles, Hq, B)
  EXPECT_EQ(d.block[0], 128u);
  EXPECT_EQ(d.smem, (4u * 64u + 128u) * 136u * 2u);  // 32 rows per warp: Q stays in smem
  ASSERT_TRUE(ParseAttentionTile("bm128_bn32_w8_s1_gh", &c.tile, nullptr));
  d = Unwrap(AttentionLaunch(c, 4, 2049, 32));
  EXPECT_EQ(d.grid[0], 128u);  // (B*Hq, q tiles)
  EXPECT_EQ(d.grid[1], 17u);
  EXPECT_EQ(d.grid[2], 1u);
  EXPECT_EQ(d.block[0], 256u);
  EXPECT_EQ(d.smem, 128u * 136u * 2u);  // Q (128 rows) staged through the 64-row K/V buffers
  c.tile = AttentionTile{};
  c.head_dim = 256;
  d = Unwrap(AttentionLaunch(c, 1, 129, 8));
  EXPECT_EQ(d.grid[0], 8u);  // (B*Hq, q tiles)
  EXPECT_EQ(d.grid[1], 3u);
  EXPECT_EQ(d.smem, (64u + 4u * 32u) * 264u * 2u);  // needs the >48 KiB opt-in
  c.dtype = ScalarType::f32;
  d = Unwrap(AttentionLaunch(c, 1, 7, 9));
  EXPECT_EQ(d.grid[0], 9u);
  EXPECT_EQ(d.grid[1], 2u);
  EXPECT_EQ(d.smem, 0u);
  c.dtype = ScalarType::bf16;
  c.head_dim = 72;
  EXPECT_FALSE(AttentionUsesTensorCores(c));
}

TEST(Attention, TileNames) {
  AttentionTile t;
  std::string err;
  ASSERT_TRUE(ParseAttentionTile("bm128_bn32_w8_s1", &t, &err)) << err;
  EXPECT_EQ(t.block_m, 128);
  EXPECT_EQ(t.block_n, 32);
  EXPECT_EQ(t.warps, 8);
  EXPECT_EQ(t.stages, 1);
  EXPECT_TRUE(t.qtile_fastest);
  EXPECT_EQ(AttentionTileName(t), "bm128_bn32_w8_s1");
  ASSERT_TRUE(ParseAttentionTile("bm64_bn128_w4_s2_gh", &t, &err)) << err;
  EXPECT_FALSE(t.qtile_fastest);
  EXPECT_EQ(AttentionTileName(t), "bm64_bn128_w4_s2_gh");
  for (const char *bad : {"", "bm128", "bm128_bn64_w4", "bm128_bn64_w4_s2_x", "128_64_4_2", "bm128_bn64_w4_s2gh"}) {
    err.clear();
    EXPECT_FALSE(ParseAttentionTile(bad, &t, &err)) << bad;
    EXPECT_NE(err.find("expected bm<M>_bn<N>_w<warps>_s<stages>"), std::string::npos) << bad;
  }
}

// The tilings the tensor-core kernel accepts, per head dim.
std::vector<AttentionTile> SupportedTiles(int64_t d) {
  std::vector<AttentionTile> r;
  AttentionConfig c;
  c.head_dim = d;
  for (int bm : {64, 128})
    for (int bn : {32, 64, 128})
      for (int w : {4, 8})
        for (int st : {1, 2}) {
          c.tile = AttentionTile{bm, bn, w, st, true};
          if (AttentionTileSupported(c, nullptr)) r.push_back(c.tile);
        }
  return r;
}

TEST(Attention, TileSupport) {
  AttentionConfig c;
  std::string why;
  c.head_dim = 128;
  c.tile = AttentionTile{64, 64, 8, 2, true};  // 8 rows per warp
  EXPECT_FALSE(AttentionTileSupported(c, &why));
  EXPECT_NE(why.find("16 or 32 query rows per warp"), std::string::npos) << why;
  c.tile = AttentionTile{128, 128, 4, 2, true};  // O 2x64 + S 2x64 fp32 per thread
  EXPECT_FALSE(AttentionTileSupported(c, &why));
  EXPECT_NE(why.find("accumulator registers"), std::string::npos) << why;
  c.tile = AttentionTile{128, 64, 4, 2, true};  // FlashAttention-2's sm80/sm90 choice
  EXPECT_TRUE(AttentionTileSupported(c, &why)) << why;
  c.tile = AttentionTile{96, 64, 4, 2, true};
  EXPECT_FALSE(AttentionTileSupported(c, &why));
  c.head_dim = 256;
  c.tile = AttentionTile{64, 128, 4, 2, true};  // 4 x 128 x 264 x 2 + Q
  EXPECT_FALSE(AttentionTileSupported(c, &why));
  EXPECT_NE(why.find("shared memory"), std::string::npos) << why;
  for (int64_t d : {64, 80, 96, 128, 256}) {
    c.head_dim = d;
    c.tile = AttentionTile{};
    EXPECT_TRUE(AttentionTileSupported(c, &why)) << why;
    EXPECT_GE(SupportedTiles(d).size(), d == 256 ? 5u : 12u) << d;
  }
}

// ptxas -v figures for one kernel.
struct PtxasInfo {
  int registers = -1, spill_stores = -1, spill_loads = -1, stack = -1;
};
PtxasInfo Ptxas(const KernelCode &k, const std::string &arch, std::string *log) {
  PtxasInfo p;
  size_t cubin = 0;
  if (!llmc::test::NvrtcCompileWithOptions(k.source, k.name, arch, {"--ptxas-options=-v"}, log, &cubin))
    return p;
  std::smatch m;
  if (std::regex_search(*log, m, std::regex(R"(Used (\d+) registers)"))) p.registers = std::stoi(m[1]);
  if (std::regex_search(*log, m, std::regex(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)"))) {
    p.stack = std::stoi(m[1]);
    p.spill_stores = std::stoi(m[2]);
    p.spill_loads = std::stoi(m[3]);
  }
  return p;
}

// Tiles that must not spill: the library default of every head dim, and the
// tiles bench/attn_sweep.sh offers for d = 64 and 128 except bm128_bn64_w4_s2
// (FlashAttention-2's choice; ptxas 13.0 spills 8-12 bytes at 255 registers).
bool MustNotSpill(int64_t d, const AttentionTile &t) {
  if (t == DefaultAttentionTile(d)) return true;
  if (d != 64 && d != 128) return false;
  for (const char *name : {"bm64_bn64_w4_s1", "bm64_bn64_w4_s2", "bm64_bn32_w4_s2", "bm64_bn128_w4_s2",
                           "bm128_bn32_w8_s2", "bm128_bn64_w8_s1", "bm128_bn64_w8_s2", "bm128_bn128_w8_s2"}) {
    AttentionTile n;
    if (ParseAttentionTile(name, &n, nullptr) && n == t) return true;
  }
  return d == 128 && AttentionTileName(t) == "bm128_bn32_w4_s1";
}

// Every supported tiling, every tensor-core head dim: compiles for sm_90a
// (ptxas -v) and, masked f16, for sm_80; no register spills where MustNotSpill.
// Prints the register table (LLMC_ATTN_PTXAS_TABLE=1 for all rows).
TEST(Attention, AllTilesCompileWithoutSpills) {
  if (!llmc::test::NvrtcAvailable()) GTEST_SKIP() << "libnvrtc not available";
  const bool all_rows = std::getenv("LLMC_ATTN_PTXAS_TABLE") != nullptr;
  for (int64_t d : {64, 80, 96, 128, 256})
    for (const AttentionTile &t : SupportedTiles(d)) {
      AttentionConfig c;
      c.head_dim = d;
      c.causal = true;
      c.tile = t;
      const KernelCode k = Unwrap(EmitAttention(c));
      Dump(k);
      std::string log;
      const PtxasInfo p = Ptxas(k, "sm_90a", &log);
      ASSERT_GT(p.registers, 0) << k.name << ":\n" << log;
      ASSERT_GE(p.spill_stores, 0) << k.name << ": no spill figures in the ptxas log:\n" << log;
      if (MustNotSpill(d, t)) {
        EXPECT_EQ(p.spill_stores, 0) << k.name;
        EXPECT_EQ(p.spill_loads, 0) << k.name;
      }
      if (all_rows || t == DefaultAttentionTile(d))
        std::printf("ptxas sm_90a d=%-3lld %-20s %3d registers, %d bytes stack, %d/%d bytes spill stores/loads\n",
                    (long long)d, AttentionTileName(t).c_str(), p.registers, p.stack, p.spill_stores, p.spill_loads);
      c.dtype = ScalarType::f16;
      c.has_mask = true;
      c.causal = false;
      const KernelCode k80 = Unwrap(EmitAttention(c));
      std::string log80;
      EXPECT_TRUE(llmc::test::NvrtcCompile(k80.source, k80.name, "sm_80", &log80)) << k80.name << ":\n" << log80;
    }
}

// The training forward (write_lse) and the FlashAttention-2 backward
// kernels: compile for sm_90a and sm_80 (bf16 and f16, causal and not) for
// every supported head dim; the main kernel's ptxas figures are printed
// (spills are reported, not failed: d = 128 keeps dK, dV, S and dP in
// registers).
TEST(AttentionBackward, CompilesForSm90aAndSm80) {
  if (!llmc::test::NvrtcAvailable()) GTEST_SKIP() << "libnvrtc not available";
  for (int64_t d : {32, 64, 80, 128})
    for (ScalarType t : {ScalarType::bf16, ScalarType::f16}) {
      AttentionBackwardConfig c;
      c.dtype = t;
      c.head_dim = d;
      c.causal = t == ScalarType::bf16;
      const AttentionBackwardKernels k = Unwrap(EmitAttentionBackward(c));
      AttentionConfig f;
      f.dtype = t;
      f.head_dim = d;
      f.causal = c.causal;
      f.write_lse = true;
      const KernelCode fk = Unwrap(EmitAttention(f));
      for (const KernelCode *kc : {&k.prep, &k.main, &k.dq, &fk}) {
        Dump(*kc);
        for (const char *arch : {"sm_90a", "sm_80"}) {
          std::string log;
          if (kc == &k.main && std::string(arch) == "sm_90a") {
            const PtxasInfo p = Ptxas(*kc, arch, &log);
            ASSERT_GT(p.registers, 0) << kc->name << ":\n" << log;
            std::printf("ptxas sm_90a %-40s %3d registers, %d/%d bytes spill stores/loads\n",
                        kc->name.c_str(), p.registers, p.spill_stores, p.spill_loads);
            continue;
          }
          EXPECT_TRUE(llmc::test::NvrtcCompile(kc->source, kc->name, arch, &log)) << kc->name << " " << arch
                                                                                  << ":\n" << log;
        }
      }
    }
}

//===----------------------------------------------------------------------===//
// KV append, gather, reductions
//===----------------------------------------------------------------------===//

TEST(KvAppend, CompileGridAndLaunch) {
  for (ScalarType t : {ScalarType::bf16, ScalarType::f32, ScalarType::f8e4m3})
    for (int64_t d : {80, 128})
      for (PositionSource s : {PositionSource::kNone, PositionSource::kScalarI32, PositionSource::kPerBatchI64}) {
        KvAppendConfig c;
        c.dtype = t;
        c.head_dim = d;
        c.heads_kv = 3;
        c.pos = s;
        ExpectCompiles(Unwrap(EmitKvAppend(c)));
      }
  KvAppendConfig c;  // 8 x 128 bf16 = 128 vectors per token
  LaunchDims d = Unwrap(KvAppendLaunch(c, 4, 1));
  EXPECT_EQ(d.grid[0], 1u);
  EXPECT_EQ(d.grid[1], 4u);
  d = Unwrap(KvAppendLaunch(c, 1, 2048));
  EXPECT_EQ(d.grid[0], 1024u);
}

TEST(Gather, CompileGridAndLaunch) {
  for (ScalarType t : {ScalarType::bf16, ScalarType::f32, ScalarType::i64})
    for (ScalarType i : {ScalarType::i32, ScalarType::i64})
      for (int64_t d : {200, 4096, 4097}) {
        GatherConfig c;
        c.dtype = t;
        c.index = i;
        c.dim = d;
        ExpectCompiles(Unwrap(EmitGather(c)));
      }
  GatherConfig c;
  LaunchDims d = Unwrap(GatherLaunch(c, 77));
  EXPECT_EQ(d.grid[0], 77u);
  EXPECT_EQ(d.block[0], 256u);
  c.dim = 200;  // 25 vectors -> 32 threads
  EXPECT_EQ(Unwrap(GatherLaunch(c, 1)).block[0], 32u);
}

TEST(IndexPut, CompileGridAndLaunch) {
  for (ScalarType t : {ScalarType::bf16, ScalarType::f16, ScalarType::f32, ScalarType::i64})
    for (ScalarType i : {ScalarType::i32, ScalarType::i64})
      for (int64_t inner : {5, 128, 4096})
        for (bool acc : {false, true})
          for (bool zero : {false, true}) {
            if ((zero && !acc) || (acc && t == ScalarType::i64)) continue;
            IndexPutConfig c;
            c.dtype = t;
            c.index = i;
            c.inner = inner;
            c.accumulate = acc;
            c.zero_base = zero;
            ExpectCompiles(Unwrap(EmitIndexPut(c)));
          }
  // Unsupported forms are errors, not kernels.
  IndexPutConfig bad;
  bad.dtype = ScalarType::i64;
  bad.accumulate = true;
  EXPECT_FALSE(EmitIndexPut(bad).ok());
  bad = IndexPutConfig();
  bad.zero_base = true;
  EXPECT_FALSE(EmitIndexPut(bad).ok());
  // Copy: one row per (outer, index) pair; add: blocks own row ranges.
  IndexPutConfig c;  // bf16, 128 per row: 16 vectors per row
  LaunchDims d = Unwrap(IndexPutLaunch(c, 32, 2048, 1));
  EXPECT_EQ(d.grid[0], 1u);
  EXPECT_EQ(d.grid[1], 32u);
  c.accumulate = true;
  c.inner = 4096;
  d = Unwrap(IndexPutLaunch(c, 1, 32000, 16384));
  EXPECT_EQ(d.grid[0], static_cast<unsigned>((32000 + IndexAddRowsPerBlock(1, 32000) - 1) /
                                             IndexAddRowsPerBlock(1, 32000)));
  EXPECT_LE(IndexAddRowsPerBlock(1, 1 << 30), kIndexAddMaxRowsPerBlock);
  EXPECT_EQ(IndexPutScratchBytes(c, 1, 16384), int64_t{4} * 16384 * 4096);
}

TEST(Cumsum, CompileGridAndLaunch) {
  const std::pair<ScalarType, ScalarType> types[] = {
      {ScalarType::i1, ScalarType::i64}, {ScalarType::i64, ScalarType::i64},
      {ScalarType::i32, ScalarType::i32}, {ScalarType::i64, ScalarType::f32},
      {ScalarType::f32, ScalarType::f32}, {ScalarType::bf16, ScalarType::bf16},
      {ScalarType::f16, ScalarType::f16}};
  for (auto [in, out] : types)
    for (int64_t n : {int64_t{1}, int64_t{9}, int64_t{2048}, int64_t{4099}}) {
      CumsumConfig c;
      c.in = in;
      c.out = out;
      c.n = n;
      ExpectCompiles(Unwrap(EmitCumsum(c)));
    }
  {
    // Rows near 2^31: the per-thread runs and positions are 64-bit (an
    // int kChunk overflowed to a negative value and wrote nothing).
    CumsumConfig big;
    big.n = 2147483647;
    KernelCode k = Unwrap(EmitCumsum(big));
    EXPECT_NE(k.source.find("static constexpr long long kChunk"), std::string::npos);
    ExpectCompiles(k);
  }
  CumsumConfig c;
  c.in = ScalarType::bf16;
  c.out = ScalarType::f32;  // a float input keeps its type
  EXPECT_EQ(EmitCumsum(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.in = ScalarType::f8e4m3;
  c.out = ScalarType::f8e4m3;
  EXPECT_EQ(EmitCumsum(c).status().code(), absl::StatusCode::kUnimplemented);
  c.in = ScalarType::i1;
  c.out = ScalarType::i1;
  EXPECT_EQ(EmitCumsum(c).status().code(), absl::StatusCode::kUnimplemented);
  c.out = ScalarType::i64;
  c.n = 0;
  EXPECT_EQ(EmitCumsum(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.n = 9;
  EXPECT_EQ(Unwrap(CumsumLaunch(c, 3)).grid[0], 3u);
  EXPECT_EQ(Unwrap(CumsumLaunch(c, 3)).block[0], 32u);
  c.n = 100000;
  EXPECT_EQ(Unwrap(CumsumLaunch(c, 3)).block[0], 256u);
}

TEST(DropoutMask, CompileGridAndLaunch) {
  ExpectCompiles(Unwrap(EmitDropoutMask()));
  EXPECT_EQ(Unwrap(DropoutMaskLaunch(0)).grid[0], 1u);
  EXPECT_EQ(Unwrap(DropoutMaskLaunch(1000)).grid[0], 4u);
  EXPECT_EQ(Unwrap(DropoutMaskLaunch(int64_t{1} << 40)).grid[0], 65535u);  // grid-stride
  EXPECT_EQ(DropoutMaskLaunch(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ArgMax, CompileGridAndLaunch) {
  for (ScalarType t : {ScalarType::bf16, ScalarType::f16, ScalarType::f32})
    for (int64_t n : {1, 7, 4096, 32000, 50257}) {
      ArgMaxConfig c;
      c.in = t;
      c.n = n;
      ExpectCompiles(Unwrap(EmitArgMax(c)));
    }
  ArgMaxConfig c;
  c.in = ScalarType::i32;
  EXPECT_FALSE(EmitArgMax(c).ok());
  c.in = ScalarType::f32;
  LaunchDims d = Unwrap(ArgMaxLaunch(c, 4));
  EXPECT_EQ(d.grid[0], 4u);
  EXPECT_EQ(d.block[0], 256u);
  c.n = 7;
  EXPECT_EQ(Unwrap(ArgMaxLaunch(c, 4)).block[0], 32u);
}

TEST(Reduce, CompileGridAndLaunch) {
  for (ScalarType t : {ScalarType::bf16, ScalarType::f32, ScalarType::f16, ScalarType::i32})
    for (ReduceKind k : {ReduceKind::sum, ReduceKind::mean, ReduceKind::max, ReduceKind::min}) {
      for (int64_t n : {1, 200, 4096, 50257}) {
        RowReduceConfig c;
        c.in = t;
        c.kind = k;
        c.n = n;
        ExpectCompiles(Unwrap(EmitRowReduce(c)));
      }
      FullReduceConfig f;
      f.in = t;
      f.kind = k;
      auto fk = Unwrap(EmitFullReduce(f));
      ExpectCompiles(fk.stage1);
      ExpectCompiles(fk.stage2);
      for (int vec : {1, 16 / ScalarSize(t)}) {
        ColumnReduceConfig col;
        col.in = t;
        col.kind = k;
        col.vec = vec;
        auto ck = Unwrap(EmitColumnReduce(col));
        ExpectCompiles(ck.partial);
        if (vec == 1) ExpectCompiles(ck.combine);
      }
    }
  EXPECT_EQ(FullReduceNumPartials(1), 1);
  EXPECT_EQ(FullReduceNumPartials(int64_t{1} << 25), 1024);
  EXPECT_EQ(FullReduceNumPartials(4096 * 10), 10);
  FullReduceConfig f;
  EXPECT_EQ(Unwrap(FullReduceStage1Launch(f, int64_t{1} << 28)).grid[0], 1024u);
  EXPECT_EQ(Unwrap(FullReduceStage2Launch(f, 5)).block[0], 1024u);
  RowReduceConfig r;
  r.n = 4096;  // 512 vectors -> warp per row
  EXPECT_EQ(Unwrap(RowReduceLaunch(r, 9)).grid[0], 3u);
  // RMSNorm weight gradient of [4, 512, 4096] bf16: 8 columns per thread,
  // 16 column blocks; splits keep at least 64 rows, so 32 splits of 64 rows
  // bring it to 512 blocks.
  EXPECT_EQ(ColumnReduceVecWidth(ScalarType::bf16, 4096), 8);
  EXPECT_EQ(ColumnReduceVecWidth(ScalarType::f32, 4096), 4);
  EXPECT_EQ(ColumnReduceVecWidth(ScalarType::bf16, 45), 1);
  EXPECT_EQ(ColumnReduceNumSplits(1, 2048, 4096, 8), 32);
  EXPECT_EQ(ColumnReduceRowsPerSplit(2048, 32), 64);
  ColumnReduceConfig col;
  col.in = ScalarType::bf16;
  col.vec = 8;
  LaunchDims p = Unwrap(ColumnReducePartialLaunch(col, 1, 4096, 32));
  EXPECT_EQ(p.grid[0], 16u);
  EXPECT_EQ(p.grid[1], 32u);
  EXPECT_EQ(p.block[0], 256u);
  EXPECT_EQ(ColumnReduceWorkspaceBytes(1, 4096, 32), 32 * 4096 * 4);
  EXPECT_EQ(Unwrap(ColumnReduceCombineLaunch(col, 3, 1000)).grid[0], 12u);
  // Scalar loads: 128 column blocks, 5 splits.
  EXPECT_EQ(ColumnReduceNumSplits(1, 2048, 4096, 1), 5);
  // Enough column blocks already, or too few rows to split: one split and no
  // workspace.
  EXPECT_EQ(ColumnReduceNumSplits(64, 4096, 4096, 1), 1);
  EXPECT_EQ(ColumnReduceNumSplits(1, 100, 64, 1), 1);
  EXPECT_EQ(ColumnReduceWorkspaceBytes(1, 64, 1), 0);
  EXPECT_EQ(ColumnReduceNumSplits(1, int64_t{1} << 20, 32, 1), 64);
  // A vec that does not divide inner, or too wide, is refused.
  EXPECT_FALSE(ColumnReducePartialLaunch(col, 1, 4092, 1).ok());
  col.vec = 16;
  EXPECT_FALSE(EmitColumnReduce(col).ok());
}

TEST(Reduce, WideRowsIndexWith64Bits) {
  RowReduceConfig c;
  c.in = ScalarType::f32;
  c.n = int64_t{1} << 31;
  const KernelCode k = Unwrap(EmitRowReduce(c));
  EXPECT_NE(k.source.find("long long kN = 2147483648LL;"), std::string::npos);
  EXPECT_EQ(k.source.find("int vi"), std::string::npos);
  ExpectCompiles(k);
  c.n = 4096;
  EXPECT_NE(Unwrap(EmitRowReduce(c)).source.find("static constexpr int kN = 4096;"), std::string::npos);
}

namespace {
/// The RMSNorm backward's dx (gw = bf16(g * w); dx = gw * rstd + sum(gw * x)
/// * -0.5 * rstd^3 / n * 2x) with g, x of type `t`, as one fused row kernel.
RowFusedProgram RowFusedRmsNormBackward(ScalarType t, int64_t n) {
  const ScalarType F = ScalarType::f32, BF = ScalarType::bf16;
  RowFusedProgram p;
  p.n = n;
  p.inputs = {{t, RowInputLayout::kDense}, {BF, RowInputLayout::kColumn}, {F, RowInputLayout::kRow},
              {t, RowInputLayout::kDense}};
  p.reductions = {{ReduceKind::sum, 3, F}};
  EwNode k{EwOp::constant, {}, F};
  k.constant = -0.5 / static_cast<double>(n);
  p.nodes = {{EwOp::mul, {-1, -2}, BF}, {EwOp::cast, {0}, F},  {EwOp::mul, {1, -3}, F},
             {EwOp::mul, {1, -4}, F},   k,                     {EwOp::mul, {-5, 4}, F},
             {EwOp::mul, {-3, -3}, F},  {EwOp::mul, {6, -3}, F}, {EwOp::mul, {5, 7}, F},
             {EwOp::add, {-4, -4}, F},  {EwOp::mul, {8, 9}, F},  {EwOp::add, {2, 10}, F}};
  p.outputs = {{11, t, false}, {-5, F, true}};
  return p;
}
} // namespace

// Fused row kernels: the register-resident vector form (n = 4096 and 2048:
// a multiple of 256 vectors, within the register budget), the streaming
// vector form (n = 4100 f32: 1025 vectors of 4; scalar for 16-bit types),
// scalar-only forms (n = 102), several
// passes, every reduction kind, integer values, the elementwise helpers,
// 64-bit columns.
TEST(RowFused, CompileGridAndLaunch) {
  for (ScalarType t : kFloatTypes)
    for (int64_t n : {4096, 2048, 4100, 102}) {
      const KernelCode k = Unwrap(EmitRowFused(RowFusedRmsNormBackward(t, n)));
      EXPECT_EQ(k.source.find("// register-resident row") != std::string::npos, n == 4096 || n == 2048)
          << k.name << " n=" << n;
      ExpectCompiles(k);
    }
  // Register-resident: 256 threads whenever the vectors are a multiple of
  // 256 (f32 at n = 2048: 512 vectors, 2 each); else the smallest block
  // that gives each thread at most 4 vectors (n = 4100 f32: 1025 vectors).
  EXPECT_EQ(Unwrap(RowFusedLaunch(RowFusedRmsNormBackward(ScalarType::f32, 2048), 3)).block[0], 256u);
  EXPECT_EQ(Unwrap(RowFusedLaunch(RowFusedRmsNormBackward(ScalarType::bf16, 2048), 3)).block[0], 256u);
  EXPECT_EQ(Unwrap(RowFusedLaunch(RowFusedRmsNormBackward(ScalarType::f32, 256), 3)).block[0], 64u);
  EXPECT_EQ(Unwrap(RowFusedLaunch(RowFusedRmsNormBackward(ScalarType::f32, 4100), 3)).block[0], 256u);
  EXPECT_EQ(Unwrap(RowFusedLaunch(RowFusedRmsNormBackward(ScalarType::f32, 4100), 100000)).grid[0],
            static_cast<unsigned>(kAssumedNumSMs * 8));
  const ScalarType F = ScalarType::f32;
  {
    // Softmax (two passes) with its max as a per-row bf16 output, a mean
    // and min of silu(x) as per-row outputs, and an integer count of x > m/2
    // broadcast to every column.
    RowFusedProgram p;
    p.n = 32000;
    p.inputs = {{ScalarType::bf16, RowInputLayout::kDense}, {ScalarType::i32, RowInputLayout::kScalar}};
    p.reductions = {{ReduceKind::max, -1, F},
                    {ReduceKind::sum, 1, F},
                    {ReduceKind::mean, 3, ScalarType::bf16},
                    {ReduceKind::min, 3, F},
                    {ReduceKind::sum, 7, ScalarType::i64}};
    EwNode half{EwOp::constant, {}, F};
    half.constant = 0.5;
    EwNode gt{EwOp::compare, {-1, 5}, ScalarType::i1};
    gt.pred = CmpPredicate::gt;
    p.nodes = {{EwOp::sub, {-1, -3}, F},                // 0: x - m
               {EwOp::exp, {0}, F},                     // 1: e (summed: s)
               {EwOp::div, {1, -4}, ScalarType::bf16},  // 2: e / s
               {EwOp::silu, {-1}, F},                   // 3 (mean and min)
               half,                                    // 4
               {EwOp::mul, {-3, 4}, F},                 // 5: m / 2, per row
               gt,                                      // 6: x > m / 2
               {EwOp::mul, {6, -2}, ScalarType::i64}};  // 7: (x > m / 2) * in1 (summed)
    p.outputs = {{2, ScalarType::bf16, false}, {-3, ScalarType::bf16, true}, {-5, F, true},
                 {-6, F, true},                {-7, ScalarType::i32, false}};
    const KernelCode k = Unwrap(EmitRowFused(p));
    EXPECT_NE(k.source.find("pass 2"), std::string::npos);
    EXPECT_TRUE(WaitsForGridDependency(k.source));
    ExpectCompiles(k);
    const LaunchDims d = Unwrap(RowFusedLaunch(p, 100000));
    EXPECT_EQ(d.block[0], 256u);
    EXPECT_EQ(d.grid[0], static_cast<unsigned>(kAssumedNumSMs * 8));
  }
  for (int64_t n : {2048, 4100, 8192, 6144, 37}) {
    // Column sums (a norm's weight gradient) of the RMSNorm backward's g*x:
    // register-resident at 2048 and 8192 (32 columns a thread), streaming
    // at 4100 and, with f32 rows too wide to keep, 6144; the scalar path
    // only at 37. The accumulators are indexed by constants on every path,
    // so they stay in registers: ptxas reports no stack frame.
    RowFusedProgram p = RowFusedRmsNormBackward(n == 6144 ? ScalarType::f32 : ScalarType::bf16, n);
    p.column_sums = {{0}, {3}};
    const KernelCode k = Unwrap(EmitRowFused(p));
    EXPECT_EQ(k.source.find("// register-resident row") != std::string::npos, n == 2048 || n == 8192) << k.name;
    EXPECT_NE(k.source.find("float* __restrict__ partials1,"), std::string::npos) << k.name;
    ExpectCompiles(k);
    if (llmc::test::NvrtcAvailable()) {
      std::string log;
      const PtxasInfo info = Ptxas(k, "sm_90a", &log);
      EXPECT_EQ(info.stack, 0) << k.name << " n=" << n << "\n" << log;
      EXPECT_EQ(info.spill_stores, 0) << k.name << " n=" << n << "\n" << log;
    }
    // A partial row per block: 8 blocks of 256 threads an SM (32 of 32 at n = 37).
    EXPECT_EQ(Unwrap(RowFusedColumnPartialBytes(p, 100000)), int64_t{kAssumedNumSMs} * (n == 37 ? 32 : 8) * n * 4);
  }
  {
    // Rows of 2^31 elements index their columns with 64 bits.
    RowFusedProgram p;
    p.n = int64_t{1} << 31;
    p.inputs = {{F, RowInputLayout::kDense}};
    p.reductions = {{ReduceKind::sum, -1, F}};
    p.outputs = {{-2, F, true}};
    const KernelCode k = Unwrap(EmitRowFused(p));
    EXPECT_NE(k.source.find("static constexpr long long kN = 2147483648LL;"), std::string::npos);
    EXPECT_NE(k.source.find("typedef long long ColT;"), std::string::npos);
    ExpectCompiles(k);
  }
  // One block per row below the grid cap; 32 threads for short rows.
  const RowFusedProgram small = RowFusedRmsNormBackward(ScalarType::bf16, 100);
  const LaunchDims d = Unwrap(RowFusedLaunch(small, 7));
  EXPECT_EQ(d.grid[0], 7u);
  EXPECT_EQ(d.block[0], 32u);
  EXPECT_EQ(Unwrap(RowFusedLaunch(small, 0)).grid[0], 1u);
  EXPECT_EQ(Unwrap(RowFusedLaunch(RowFusedRmsNormBackward(ScalarType::f32, 4096), 3)).block[0], 256u);
}

// Kernels that index a token's heads or a gathered row with 32-bit integers
// refuse sizes those would overflow (`int kDim = 2147483648` wrapped, and
// kHeads * kHeadDim overflowed in int) instead of emitting wrong code.
TEST(IntIndexedKernels, RefuseRowsBeyond2p30) {
  // The refusal's message, and that it is Unimplemented (a well-formed
  // configuration beyond the kernel's 32-bit indices).
  auto message = [](const auto &result) {
    if (result.ok()) return std::string("(no error)");
    EXPECT_EQ(result.status().code(), absl::StatusCode::kUnimplemented) << result.status();
    return std::string(result.status().message());
  };
  GatherConfig g;
  g.dim = int64_t{1} << 31;
  EXPECT_EQ(message(EmitGather(g)),
            "llmc::cuda kernel generator: gather: rows of 2147483648 elements; at most 2^30 (1073741824) are "
            "supported");
  g.dim = int64_t{1} << 30;
  EXPECT_NE(Unwrap(EmitGather(g)).source.find("kDim = 1073741824;"), std::string::npos);
  RoPEConfig r;
  r.num_heads = 65536;
  r.head_dim = 32768;
  EXPECT_EQ(message(EmitRoPE(r)),
            "llmc::cuda kernel generator: rope: 65536 heads of 32768 elements per token; at most 2^30 "
            "(1073741824) elements are supported");
  RoPETableConfig t;
  t.num_heads = 1;
  t.head_dim = int64_t{1} << 31;
  EXPECT_NE(message(EmitRoPETable(t)).find("rope table: 1 heads of 2147483648 elements"),
            std::string::npos);
  KvAppendConfig k;
  k.heads_kv = int64_t{1} << 20;
  k.head_dim = int64_t{1} << 20;
  EXPECT_NE(message(EmitKvAppend(k)).find("kv append: 1048576 heads of 1048576 elements"),
            std::string::npos);
  // A grid CUDA cannot launch names its size and the limits.
  GatherConfig many;
  EXPECT_EQ(message(GatherLaunch(many, int64_t{1} << 31)),
            "llmc::cuda kernel generator: launch grid too large: 2147483648 x 1 x 1 blocks (CUDA allows at "
            "most 2147483647 x 65535 x 65535)");
}

// The safety net under every generator: a `static constexpr int` literal
// that does not fit int (it would wrap in the kernel) is refused.
TEST(IntIndexedKernels, AssembleRefusesIntConstantsThatWrap) {
  using llmc::cuda::detail::Assemble;
  absl::StatusOr<std::string> wraps = Assemble("", "static constexpr int kN = 2147483648;\n", "");
  EXPECT_EQ(wraps.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(wraps.status().message(),
            "llmc::cuda kernel generator: constant kN = 2147483648 does not fit the kernel's 32-bit int");
  wraps = Assemble("", "", "static constexpr int kRow = 99999999999999999999;\n");
  EXPECT_EQ(wraps.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(wraps.status().message(), "llmc::cuda kernel generator: constant kRow = 99999999999999999999 "
                                      "does not fit the kernel's 32-bit int");
  EXPECT_TRUE(Assemble("", "static constexpr int kN = 2147483647;\nstatic constexpr int kV = kN / 8;\n"
                           "static constexpr long long kM = 2147483648LL;\n",
                       "extern \"C\" __global__ void k() {}\n")
                  .ok());
}

// Programmatic dependent launch: every entry waits for the previous launch
// before anything else, unless the kernel places the wait itself; the
// runtime launches a kernel with overlap only when WaitsForGridDependency.
TEST(GridDependency, EveryEntryWaitsFirst) {
  using llmc::cuda::detail::Assemble;
  absl::StatusOr<std::string> src =
      Assemble("", "", "extern \"C\" __global__ void k(float* y) {\n  y[0] = 1.f;\n}\n");
  ASSERT_TRUE(src.ok()) << src.status();
  const size_t body = src->find("void k(float* y) {");
  ASSERT_NE(body, std::string::npos);
  EXPECT_EQ(src->substr(body, 120).find("void k(float* y) {\n  llmcGridDependencyWait();"), 0u)
      << src->substr(body, 200);
  EXPECT_LT(src->find("llmcLaunchDependents();", body), src->find("y[0] = 1.f;"));
  EXPECT_TRUE(WaitsForGridDependency(*src));

  // A kernel that waits itself keeps its own placement.
  const std::string own = "extern \"C\" __global__ void k(float* y) {\n  float a = 2.f;\n"
                          "  llmcGridDependencyWait();\n  y[0] = a;\n}\n";
  src = Assemble("", "", own);
  ASSERT_TRUE(src.ok());
  EXPECT_EQ(src->substr(src->size() - own.size()), own);
  EXPECT_TRUE(WaitsForGridDependency(*src));

  // A comment that names the call is not a wait.
  src = Assemble("", "", "// calls llmcGridDependencyWait(); first\n"
                         "extern \"C\" __global__ void k(float* y) { /* llmcGridDependencyWait(); */ y[0] = 1.f; }\n");
  ASSERT_TRUE(src.ok());
  EXPECT_NE(src->find("void k(float* y) {\n  llmcGridDependencyWait();"), std::string::npos) << *src;
  EXPECT_FALSE(WaitsForGridDependency(std::string(Preamble()) +
                                      "// llmcGridDependencyWait();\nextern \"C\" __global__ void k() {}\n"));

  // No entry: an internal error, never a kernel that does not wait.
  EXPECT_EQ(Assemble("", "", "LLMC_DEV float f() { return 1.f; }\n").status().code(),
            absl::StatusCode::kInternal);
  // Text that is not an llmc kernel (the preamble's definition alone does not count).
  EXPECT_FALSE(WaitsForGridDependency("extern \"C\" __global__ void k() { llmcGridDependencyWait(); }"));
  EXPECT_FALSE(WaitsForGridDependency(std::string(Preamble()) +
                                      "extern \"C\" __global__ void k() {}\n"));
}

// The decode GEMV starts its first weight lines into L2 before the wait and
// reads x (the previous launch's output) and the weights only after it.
TEST(GridDependency, GemvPrefetchesWeightsBeforeTheWait) {
  GemvConfig c;
  c.dtype = ScalarType::bf16;
  c.out = ScalarType::bf16;
  c.m = 1;
  c.k = 4096;
  c.n = 4096;
  absl::StatusOr<KernelCode> k = EmitGemv(c);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(WaitsForGridDependency(k->source));
  const std::string &s = k->source;
  const size_t from = Preamble().size();
  const size_t prefetch = s.find("llmcPrefetchL2(", from);
  const size_t wait = s.find("llmcGridDependencyWait();", from);
  const size_t firstLoad = s.find("wv[r][u] = ", from);
  ASSERT_NE(prefetch, std::string::npos);
  ASSERT_NE(wait, std::string::npos);
  ASSERT_NE(firstLoad, std::string::npos);
  EXPECT_LT(prefetch, wait);
  EXPECT_LT(wait, firstLoad);
  EXPECT_EQ(s.find("llmcGridDependencyWait();", wait + 1), std::string::npos) << "one wait";
}

TEST(Names, DistinctAcrossConfigs) {
  std::set<std::string> names;
  for (int64_t h : {200, 4096})
    for (bool r : {false, true}) {
      RMSNormConfig c;
      c.hidden = h;
      c.fused_residual = r;
      EXPECT_TRUE(names.insert(Unwrap(EmitRMSNorm(c)).name).second);
    }
  RMSNormConfig c;
  c.eps = 1e-5f;
  EXPECT_TRUE(names.insert(Unwrap(EmitRMSNorm(c)).name).second);
  EXPECT_EQ(Unwrap(EmitRMSNorm(c)).source, Unwrap(EmitRMSNorm(c)).source);
}
