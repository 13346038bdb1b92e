//===- WeightOnlyNumericsTest.cpp - int8/int4 weight-only quantization ----===//
//
// llmc-precision weight-only=int8|int4 checked in the reference executor:
// the packing layout on a hand-worked case, and the quantized graph against
// the original on fresh random inputs within the bound the quantization step
// implies. For y[m, n] = sum_k x[m, k] w[n, k] with groups g of 128 along K
// and scales s_g = max_{k in g} |w[n, k]| / Q (Q = 127 or 7), every weight
// moves by at most s_g / 2 (round to nearest), so
//   |y_q[m, n] - y[m, n]| <= sum_g s_g / 2 * sum_{k in g} |x[m, k]|
// plus float32 accumulation error (<= 1e-5 * sum_k |x| |w| here, K <= 512).
//
//===----------------------------------------------------------------------===//

#include "ReferenceTestUtils.h"

#include "LLM/Transforms/Passes.h"
#include "llmc/InitAllPasses.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <cmath>

using namespace mlir;
using namespace llmc::reference;

namespace {

class WeightOnlyTest : public llmc::reference::testing::ReferenceTest {
protected:
  WeightOnlyTest() {
    static bool registered = [] {
      llmc::registerAllPasses();
      return true;
    }();
    (void)registered;
  }

  OwningOpRef<ModuleOp> quantized(const std::string &src, const std::string &scheme,
                                  bool fullPipeline) {
    OwningOpRef<ModuleOp> m = parseSourceString<ModuleOp>(src, &ctx);
    if (!m) {
      ADD_FAILURE() << "cannot parse:\n" << src;
      return nullptr;
    }
    std::string pipeline =
        fullPipeline ? "llmc-pipeline{form-kernels=1 pad-all=1 weight-only=" + scheme + "}"
                     : "func.func(llmc-precision{weight-only=" + scheme + "})";
    PassManager pm(&ctx);
    std::string err;
    llvm::raw_string_ostream es(err);
    if (failed(parsePassPipeline(pipeline, pm, es)) || failed(pm.run(*m))) {
      ADD_FAILURE() << "pipeline " << pipeline << " failed: " << err;
      return nullptr;
    }
    return m;
  }

  static func::FuncOp first(ModuleOp m) {
    for (auto fn : m.getOps<func::FuncOp>())
      return fn;
    return nullptr;
  }

  /// y = x @ w^T (transposed = true: w is [N, K]) or x @ w (w is [K, N]),
  /// in f32; quantized with `scheme` vs unquantized, per-output bound.
  void checkLinear(int64_t m, int64_t k, int64_t n, bool transposed,
                   const std::string &scheme, bool fullPipeline) {
    std::string w = transposed ? "tensor<" + std::to_string(n) + "x" + std::to_string(k) + "xf32>"
                               : "tensor<" + std::to_string(k) + "x" + std::to_string(n) + "xf32>";
    std::string x = "tensor<" + std::to_string(m) + "x" + std::to_string(k) + "xf32>";
    std::string y = "tensor<" + std::to_string(m) + "x" + std::to_string(n) + "xf32>";
    std::string src = "func.func @f(%x: " + x + ", %w: " + w + ") -> " + y +
                      " {\n  %y = llm.matmul %x, %w" +
                      (transposed ? " {transpose_rhs}" : "") + " : " + x + ", " +
                      w + " -> " + y + "\n  return %y : " + y + "\n}\n";
    OwningOpRef<ModuleOp> orig = parseSourceString<ModuleOp>(src, &ctx);
    OwningOpRef<ModuleOp> q = quantized(src, scheme, fullPipeline);
    ASSERT_TRUE(orig && q);
    int quantizeOps = 0;
    q->walk([&](llmc::llm::QuantizeWeightOp) { ++quantizeOps; });
    ASSERT_EQ(quantizeOps, 1) << "the weight was not quantized";

    HostTensor xs = rand(f32(), {m, k}), ws = rand(f32(), transposed ? std::vector<int64_t>{n, k}
                                                                       : std::vector<int64_t>{k, n},
                                               0.1);
    auto ref = Evaluate(first(*orig), {xs, ws});
    auto got = Evaluate(first(*q), {xs, ws});
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_TRUE(got.ok()) << got.status();
    const double qmax = scheme == "int4" ? 7.0 : 127.0;
    auto W = [&](int64_t nn, int64_t kk) {
      return transposed ? ws.data[nn * k + kk] : ws.data[kk * n + nn];
    };
    double maxErr = 0, maxRatio = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double bound = 0, mag = 0;
        for (int64_t g = 0; g < k / 128; ++g) {
          double amax = 0, sx = 0;
          for (int64_t kk = g * 128; kk < (g + 1) * 128; ++kk) {
            amax = std::max(amax, std::fabs(W(j, kk)));
            sx += std::fabs(xs.data[i * k + kk]);
            mag += std::fabs(xs.data[i * k + kk] * W(j, kk));
          }
          bound += amax / qmax / 2 * sx;
        }
        bound = bound * (1 + 1e-6) + 1e-5 * mag;
        double a = (*got)[0].data[i * n + j], b = (*ref)[0].data[i * n + j];
        ASSERT_TRUE(std::isfinite(a)) << "output (" << i << ", " << j << ")";
        double err = std::fabs(a - b);
        EXPECT_LE(err, bound) << scheme << " output (" << i << ", " << j << ")";
        maxErr = std::max(maxErr, err);
        maxRatio = std::max(maxRatio, err / bound);
      }
    // The quantization must actually perturb the result (a test that cannot
    // fail otherwise), and the bound must not be vacuous.
    EXPECT_GT(maxErr, 0.0);
    EXPECT_GT(maxRatio, 0.01) << "bound far from the observed error";
  }
};

// One row, groups of 2: scales max|w| / 7, round half to even, element 2j in
// the low nibble of byte j, and the dequantized values q * s.
TEST_F(WeightOnlyTest, Int4PackingLayoutByHand) {
  auto out = run(R"(
func.func @f(%w: tensor<1x4xf32>) -> (tensor<1x2xi8>, tensor<1x2xf32>, tensor<1x4xf32>) {
  %q, %s = llm.quantize_weight %w {bits = 4 : i64, group_size = 2 : i64} : tensor<1x4xf32> -> tensor<1x2xi8>, tensor<1x2xf32>
  %d = llm.dequantize_weight %q, %s {bits = 4 : i64, group_size = 2 : i64} : tensor<1x2xi8>, tensor<1x2xf32> -> tensor<1x4xf32>
  return %q, %s, %d : tensor<1x2xi8>, tensor<1x2xf32>, tensor<1x4xf32>
})",
                 {HostTensor{f32(), {1, 4}, {3.5, -1.75, 0.25, 3.5}}});
  ASSERT_EQ(out.size(), 3u);
  // Exact ties on purpose: group 0: s = 3.5 / 7 = 0.5, q = (7, rint(-3.5) =
  // -4); group 1: s = 0.5, q = (rint(0.5) = 0, 7).
  EXPECT_EQ(out[1].data[0], 0.5);
  EXPECT_EQ(out[1].data[1], 0.5);
  EXPECT_EQ(out[0].data[0], static_cast<double>(static_cast<int8_t>(0xC7)));
  EXPECT_EQ(out[0].data[1], static_cast<double>(static_cast<int8_t>(0x70)));
  EXPECT_EQ(out[2].data[0], 3.5);
  EXPECT_EQ(out[2].data[1], -2.0);
  EXPECT_EQ(out[2].data[2], 0.0);
  EXPECT_EQ(out[2].data[3], 3.5);
}

// int8 round trip: every weight within half a step of its original, an
// all-zero group gives scale 0 and zeros (no division by zero).
TEST_F(WeightOnlyTest, Int8RoundTripWithinHalfStep) {
  HostTensor w = rand(f32(), {5, 256}, 0.1);
  for (int k = 128; k < 256; ++k)
    w.data[2 * 256 + k] = 0.0;
  auto out = run(R"(
func.func @f(%w: tensor<5x256xf32>) -> (tensor<5x2xf32>, tensor<5x256xbf16>, tensor<5x256xf32>) {
  %q, %s = llm.quantize_weight %w {bits = 8 : i64, group_size = 128 : i64} : tensor<5x256xf32> -> tensor<5x256xi8>, tensor<5x2xf32>
  %d = llm.dequantize_weight %q, %s {bits = 8 : i64, group_size = 128 : i64} : tensor<5x256xi8>, tensor<5x2xf32> -> tensor<5x256xbf16>
  %e = llm.dequantize_weight %q, %s {bits = 8 : i64, group_size = 128 : i64} : tensor<5x256xi8>, tensor<5x2xf32> -> tensor<5x256xf32>
  return %s, %d, %e : tensor<5x2xf32>, tensor<5x256xbf16>, tensor<5x256xf32>
})",
                 {w});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].data[2 * 2 + 1], 0.0);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t k = 0; k < 256; ++k) {
      double s = out[0].data[r * 2 + k / 128], orig = w.data[r * 256 + k];
      double amax = 0;
      for (int64_t j = k / 128 * 128; j < k / 128 * 128 + 128; ++j)
        amax = std::max(amax, std::fabs(w.data[r * 256 + j]));
      EXPECT_NEAR(s, amax / 127, amax * 1e-7);
      EXPECT_LE(std::fabs(out[2].data[r * 256 + k] - orig), s / 2 * (1 + 1e-6));
      // bf16 result: additionally one bf16 rounding (relative 2^-9).
      EXPECT_LE(std::fabs(out[1].data[r * 256 + k] - orig),
                s / 2 * (1 + 1e-6) + std::fabs(orig) * 0.0040);
    }
}

TEST_F(WeightOnlyTest, Int4LinearNKWithinBound) { checkLinear(3, 384, 40, true, "int4", false); }
TEST_F(WeightOnlyTest, Int8LinearNKWithinBound) { checkLinear(3, 384, 40, true, "int8", false); }
TEST_F(WeightOnlyTest, Int4LinearKNWithinBound) { checkLinear(2, 256, 33, false, "int4", false); }
TEST_F(WeightOnlyTest, Int4ThroughPipelineWithinBound) { checkLinear(5, 512, 24, true, "int4", true); }
TEST_F(WeightOnlyTest, Int8ThroughPipelineWithinBound) { checkLinear(1, 256, 17, false, "int8", true); }

// The full pipeline (pad, fuse, plan memory) on a quantized graph computes
// what the quantized graph computes (reference before vs after).
TEST_F(WeightOnlyTest, PipelinePreservesQuantizedSemantics) {
  const std::string src = R"(
func.func @f(%x: tensor<4x256xf32>, %w: tensor<48x256xf32>, %b: tensor<48xf32>) -> tensor<4x48xf32> {
  %y = llm.matmul %x, %w bias %b {transpose_rhs} : tensor<4x256xf32>, tensor<48x256xf32>, tensor<48xf32> -> tensor<4x48xf32>
  %r = llm.silu %y : tensor<4x48xf32>
  return %r : tensor<4x48xf32>
})";
  OwningOpRef<ModuleOp> precisionOnly = quantized(src, "int4", false);
  OwningOpRef<ModuleOp> full = quantized(src, "int4", true);
  ASSERT_TRUE(precisionOnly && full);
  HostTensor x = rand(f32(), {4, 256}), w = rand(f32(), {48, 256}, 0.1),
             b = rand(f32(), {48}, 0.1);
  auto a = Evaluate(first(*precisionOnly), {x, w, b});
  auto c = Evaluate(first(*full), {x, w, b});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_LE(RelativeError((*c)[0], (*a)[0]), 1e-6);
}

} // namespace
