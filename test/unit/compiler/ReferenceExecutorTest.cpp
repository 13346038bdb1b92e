//===- ReferenceExecutorTest.cpp - the CPU reference executor, op by op ---===//
//
// Each op is checked against an independent hand computation written here
// (never by calling the executor's own helpers) on small random inputs.
//
//===----------------------------------------------------------------------===//

#include "ReferenceTestUtils.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "llvm/ADT/APFloat.h"

using namespace mlir;
using namespace llmc::reference;
using namespace llmc::reference::testing;

namespace {

//===----------------------------------------------------------------------===//
// Rounding
//===----------------------------------------------------------------------===//

TEST_F(ReferenceTest, RoundsBF16ToNearestEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even mantissa 1.
  EXPECT_EQ(RoundToType(1.0 + 0x1p-8, bf16()), 1.0);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(RoundToType(1.0 + 3 * 0x1p-8, bf16()), 1.0 + 0x1p-6);
  // Just above the tie rounds up.
  EXPECT_EQ(RoundToType(1.0 + 0x1p-8 + 0x1p-20, bf16()), 1.0 + 0x1p-7);
  EXPECT_EQ(RoundToType(-(1.0 + 3 * 0x1p-8), bf16()), -(1.0 + 0x1p-6));
  EXPECT_TRUE(std::isinf(RoundToType(1e39, bf16())));
  EXPECT_TRUE(std::isnan(RoundToType(NAN, bf16())));
}

TEST_F(ReferenceTest, RoundsF16AndF32ToNearestEven) {
  EXPECT_EQ(RoundToType(1.0 + 0x1p-11, f16()), 1.0);
  EXPECT_EQ(RoundToType(1.0 + 3 * 0x1p-11, f16()), 1.0 + 0x1p-9);
  EXPECT_EQ(RoundToType(65504.0, f16()), 65504.0);
  EXPECT_TRUE(std::isinf(RoundToType(65520.0, f16()))); // the overflow tie
  EXPECT_EQ(RoundToType(0x1p-25, f16()), 0.0);             // tie to even 0
  EXPECT_EQ(RoundToType(3 * 0x1p-25, f16()), 0x1p-23);     // subnormal tie
  EXPECT_EQ(RoundToType(1.0 + 0x1p-24, f32()), 1.0);
  EXPECT_EQ(RoundToType(1.0 + 3 * 0x1p-24, f32()), 1.0 + 0x1p-22);
}

TEST_F(ReferenceTest, RoundsFp8WithSaturation) {
  EXPECT_EQ(RoundToType(500.0, e4m3()), 448.0);
  EXPECT_EQ(RoundToType(-1e6, e4m3()), -448.0);
  EXPECT_EQ(RoundToType(INFINITY, e4m3()), 448.0);
  EXPECT_TRUE(std::isnan(RoundToType(NAN, e4m3())));
  EXPECT_EQ(RoundToType(1.0 + 0x1p-4, e4m3()), 1.0);       // tie -> even
  EXPECT_EQ(RoundToType(1.0 + 3 * 0x1p-4, e4m3()), 1.25);  // tie -> even
  EXPECT_EQ(RoundToType(0x1p-10, e4m3()), 0.0);            // half min subnormal
  EXPECT_EQ(RoundToType(1.0 + 0x1p-3, e5m2()), 1.0);
  EXPECT_EQ(RoundToType(1.0 + 3 * 0x1p-3, e5m2()), 1.5);
  EXPECT_EQ(RoundToType(60000.0, e5m2()), 57344.0);
  // Saturating like the GPU's cvt.rn.satfinite.e5m2x2.f32, infinities too.
  EXPECT_EQ(RoundToType(70000.0, e5m2()), 57344.0);
  EXPECT_EQ(RoundToType(-INFINITY, e5m2()), -57344.0);
  EXPECT_TRUE(std::isnan(RoundToType(NAN, e5m2())));
}

TEST_F(ReferenceTest, WrapsIntegers) {
  EXPECT_EQ(RoundToType(130, i8()), -126);
  EXPECT_EQ(RoundToType(-129, i8()), 127);
  EXPECT_EQ(RoundToType(0x1p31, i32()), -0x1p31);
  EXPECT_EQ(RoundToType(-7.9, i32()), -7);
  EXPECT_EQ(RoundToType(5, i1()), 1);
  EXPECT_EQ(RoundToType(0, i1()), 0);
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST_F(ReferenceTest, AddRoundsOnceToBF16) {
  const char *src = R"mlir(
func.func @f(%a: tensor<3xbf16>, %b: tensor<3xbf16>) -> tensor<3xbf16> {
  %r = llm.add %a, %b : tensor<3xbf16>
  return %r : tensor<3xbf16>
})mlir";
  auto out = run(src, {tensor(bf16(), {3}, {1.0, 1.0, 256.0}),
                       tensor(bf16(), {3}, {0x1p-8, 3 * 0x1p-8, 1.0})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, (std::vector<double>{1.0, 1.0 + 0x1p-6, 256.0}));
}

TEST_F(ReferenceTest, UnaryOpsMatchLibm) {
  struct Case {
    const char *op;
    std::function<double(double)> fn;
    bool positive;
  };
  const double k = std::sqrt(2.0 / M_PI);
  std::vector<Case> cases = {
      {"neg", [](double x) { return -x; }, false},
      {"abs", [](double x) { return std::fabs(x); }, false},
      {"exp", [](double x) { return std::exp(x); }, false},
      {"log", [](double x) { return std::log(x); }, true},
      {"tanh", [](double x) { return std::tanh(x); }, false},
      {"sin", [](double x) { return std::sin(x); }, false},
      {"cos", [](double x) { return std::cos(x); }, false},
      {"sqrt", [](double x) { return std::sqrt(x); }, true},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); }, true},
      {"silu", [](double x) { return x / (1 + std::exp(-x)); }, false},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, false},
      {"relu", [](double x) { return x > 0 ? x : 0.0; }, false},
      {"gelu %x tanh", [&](double x) {
         return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
       }, false},
      {"gelu %x erf", [](double x) {
         return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
       }, false},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.op);
    std::string opText = c.op;
    std::string expr = opText.find("%x") != std::string::npos
                           ? "llm." + opText
                           : "llm." + opText + " %x";
    std::string src = "func.func @f(%x: tensor<4x5xf32>) -> tensor<4x5xf32> {\n"
                      "  %r = " + expr + " : tensor<4x5xf32>\n"
                      "  return %r : tensor<4x5xf32>\n}";
    HostTensor x = rand(f32(), {4, 5});
    if (c.positive)
      for (double &v : x.data)
        v = RoundToType(std::fabs(v) + 0.1, f32());
    auto out = run(src, {x});
    ASSERT_EQ(out.size(), 1u);
    for (size_t i = 0; i < x.data.size(); ++i)
      EXPECT_EQ(out[0].data[i], static_cast<double>(static_cast<float>(
                                    c.fn(x.data[i]))))
          << "at " << i << " x=" << x.data[i];
  }
}

// RoPE tables take sin/cos of position * inv_freq: angles of thousands of
// radians. The f32 results must be the float64 sin/cos of the f32 angle,
// rounded once (relative error <= 2^-24 < 1e-6), also for |x| near 1e4.
TEST_F(ReferenceTest, SinCosOfLargeAnglesMatchFloat64) {
  const char *src = R"mlir(
func.func @f(%x: tensor<512xf32>) -> (tensor<512xf32>, tensor<512xf32>) {
  %s = llm.sin %x : tensor<512xf32>
  %c = llm.cos %x : tensor<512xf32>
  return %s, %c : tensor<512xf32>, tensor<512xf32>
})mlir";
  std::uniform_real_distribution<double> angle(-1e4, 1e4);
  HostTensor x = tensor(f32(), {512}, {});
  for (int i = 0; i < 512; ++i)
    x.data.push_back(RoundToType(i < 16 ? angle(rng) * 1e-3 : angle(rng), f32()));
  auto out = run(src, {x});
  ASSERT_EQ(out.size(), 2u);
  double maxAbs = 0;
  for (int i = 0; i < 512; ++i) {
    maxAbs = std::max(maxAbs, std::fabs(x.data[i]));
    const double ws = std::sin(x.data[i]), wc = std::cos(x.data[i]);
    ASSERT_FALSE(std::isnan(out[0].data[i]) || std::isnan(out[1].data[i])) << i;
    EXPECT_LE(std::fabs(out[0].data[i] - ws), 1e-6 * std::fabs(ws))
        << "sin(" << x.data[i] << ")";
    EXPECT_LE(std::fabs(out[1].data[i] - wc), 1e-6 * std::fabs(wc))
        << "cos(" << x.data[i] << ")";
  }
  EXPECT_GT(maxAbs, 9e3);  // the large angles were exercised
}

TEST_F(ReferenceTest, BinaryOpsAndNaNPropagation) {
  const char *src = R"mlir(
func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %s = llm.sub %a, %b : tensor<4xf32>
  %m = llm.mul %a, %b : tensor<4xf32>
  %d = llm.div %a, %b : tensor<4xf32>
  %p = llm.pow %a, %b : tensor<4xf32>
  %mx = llm.maximum %a, %b : tensor<4xf32>
  %mn = llm.minimum %a, %b : tensor<4xf32>
  return %s, %m, %d, %p, %mx, %mn : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
})mlir";
  auto out = run(src, {tensor(f32(), {4}, {2, 3, NAN, 1}),
                       tensor(f32(), {4}, {0.5, -2, 1, 0})});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[0].data[0], 1.5);
  EXPECT_EQ(out[1].data[1], -6);
  EXPECT_EQ(out[2].data[1], -1.5);
  EXPECT_TRUE(std::isinf(out[2].data[3]));
  EXPECT_EQ(out[3].data[0], std::sqrt(2.0f) * 1.0);
  EXPECT_EQ(out[4].data[0], 2);
  EXPECT_EQ(out[5].data[1], -2);
  EXPECT_TRUE(std::isnan(out[4].data[2]));
  EXPECT_TRUE(std::isnan(out[5].data[2]));
}

TEST_F(ReferenceTest, IntegerDivTruncatesAndDivByZeroIsAnError) {
  const char *src = R"mlir(
func.func @f(%a: tensor<3xi32>, %b: tensor<3xi32>) -> tensor<3xi32> {
  %d = llm.div %a, %b : tensor<3xi32>
  return %d : tensor<3xi32>
})mlir";
  auto out = run(src, {tensor(i32(), {3}, {7, -7, 9}),
                       tensor(i32(), {3}, {2, 2, -4})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, (std::vector<double>{3, -3, -2}));
  absl::Status s = runStatus(src, {tensor(i32(), {3}, {7, -7, 9}),
                                   tensor(i32(), {3}, {2, 0, -4})});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("llm.div"), std::string_view::npos) << s;
}

TEST_F(ReferenceTest, CompareSelectAndCast) {
  const char *src = R"mlir(
func.func @f(%a: tensor<5xf32>, %b: tensor<5xf32>) -> (tensor<5xi1>, tensor<5xi1>, tensor<5xf32>, tensor<5xf8E4M3FN>, tensor<5xi32>, tensor<5xbf16>) {
  %lt = llm.compare lt, %a, %b : tensor<5xf32>
  %ne = llm.compare ne, %a, %b : tensor<5xf32>
  %s = llm.select %lt, %a, %b : tensor<5xi1>, tensor<5xf32>
  %c8 = llm.cast %a : tensor<5xf32> to tensor<5xf8E4M3FN>
  %ci = llm.cast %a : tensor<5xf32> to tensor<5xi32>
  %cb = llm.cast %a : tensor<5xf32> to tensor<5xbf16>
  return %lt, %ne, %s, %c8, %ci, %cb : tensor<5xi1>, tensor<5xi1>, tensor<5xf32>, tensor<5xf8E4M3FN>, tensor<5xi32>, tensor<5xbf16>
})mlir";
  double a3 = RoundToType(1.0 + 0x1p-8 + 0x1p-12, f32());
  auto out = run(src, {tensor(f32(), {5}, {1, 500, NAN, a3, -2.75}),
                       tensor(f32(), {5}, {2, 3, 1, 0, -3})});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[0].data, (std::vector<double>{1, 0, 0, 0, 0}));
  EXPECT_EQ(out[1].data, (std::vector<double>{1, 1, 1, 1, 1})); // NaN ne -> true
  EXPECT_EQ(out[2].data[0], 1);
  EXPECT_EQ(out[2].data[1], 3);
  EXPECT_EQ(out[3].data[1], 448);
  EXPECT_TRUE(std::isnan(out[3].data[2]));
  EXPECT_EQ(out[3].data[4], -2.75);
  EXPECT_EQ(out[4].data, (std::vector<double>{1, 500, 0, 1, -2}));
  EXPECT_EQ(out[5].data[3], 1.0 + 0x1p-7);
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

TEST_F(ReferenceTest, ReshapeTransposeSliceConcat) {
  const char *src = R"mlir(
func.func @f(%x: tensor<?x6xf32>) -> (tensor<?x3x2xf32>, tensor<6x?xf32>, tensor<?x2xf32>, tensor<?x12xf32>) {
  %r = llm.reshape %x : tensor<?x6xf32> to tensor<?x3x2xf32>
  %t = llm.transpose %x [1, 0] : tensor<?x6xf32>
  %s = llm.slice %x [0, 1] to [-1, 6] step [1, 3] : tensor<?x6xf32>
  %c = llm.concat %x, %x dim = 1 : tensor<?x6xf32>, tensor<?x6xf32>
  return %r, %t, %s, %c : tensor<?x3x2xf32>, tensor<6x?xf32>, tensor<?x2xf32>, tensor<?x12xf32>
})mlir";
  HostTensor x = rand(f32(), {4, 6});
  auto out = run(src, {x});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(out[0].data, x.data);
  EXPECT_EQ(out[1].shape, (std::vector<int64_t>{6, 4}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) {
      EXPECT_EQ(out[1].data[j * 4 + i], x.data[i * 6 + j]);
      EXPECT_EQ(out[3].data[i * 12 + j], x.data[i * 6 + j]);
      EXPECT_EQ(out[3].data[i * 12 + 6 + j], x.data[i * 6 + j]);
    }
  EXPECT_EQ(out[2].shape, (std::vector<int64_t>{4, 2}));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[2].data[i * 2], x.data[i * 6 + 1]);
    EXPECT_EQ(out[2].data[i * 2 + 1], x.data[i * 6 + 4]);
  }
}

TEST_F(ReferenceTest, BroadcastIncludingDynamicDimsFromTheUser) {
  const char *src = R"mlir(
func.func @f(%x: tensor<?x3xf32>, %w: tensor<3xf32>) -> (tensor<?x3xf32>, tensor<2x?x3xf32>) {
  %c = llm.constant dense<0.5> : tensor<f32>
  %h = llm.broadcast %c : tensor<f32> to tensor<?x3xf32>
  %y = llm.mul %x, %h : tensor<?x3xf32>
  %b = llm.broadcast %x : tensor<?x3xf32> to tensor<2x?x3xf32>
  return %y, %b : tensor<?x3xf32>, tensor<2x?x3xf32>
})mlir";
  HostTensor x = rand(f32(), {5, 3});
  auto out = run(src, {x, rand(f32(), {3})});
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[0].shape, (std::vector<int64_t>{5, 3}));
  for (size_t i = 0; i < x.data.size(); ++i)
    EXPECT_EQ(out[0].data[i], x.data[i] * 0.5);
  ASSERT_EQ(out[1].shape, (std::vector<int64_t>{2, 5, 3}));
  for (size_t i = 0; i < x.data.size(); ++i) {
    EXPECT_EQ(out[1].data[i], x.data[i]);
    EXPECT_EQ(out[1].data[15 + i], x.data[i]);
  }
}

TEST_F(ReferenceTest, GatherEmbeddingAndOutOfRange) {
  const char *src = R"mlir(
func.func @f(%t: tensor<5x3xf32>, %i: tensor<1x?xi64>) -> tensor<1x?x3xf32> {
  %e = llm.gather %t, %i axis = 0 : tensor<5x3xf32>, tensor<1x?xi64>
  return %e : tensor<1x?x3xf32>
})mlir";
  HostTensor t = rand(f32(), {5, 3});
  auto out = run(src, {t, tensor(i64(), {1, 3}, {4, 0, 4})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{1, 3, 3}));
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(out[0].data[j], t.data[12 + j]);
    EXPECT_EQ(out[0].data[3 + j], t.data[j]);
  }
  absl::Status s = runStatus(src, {t, tensor(i64(), {1, 2}, {1, 5})});
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("llm.gather"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("index 5"), std::string_view::npos) << s;
}

TEST_F(ReferenceTest, GatherOnInnerAxis) {
  const char *src = R"mlir(
func.func @f(%t: tensor<2x4x3xf32>, %i: tensor<2xi32>) -> tensor<2x2x3xf32> {
  %e = llm.gather %t, %i axis = 1 : tensor<2x4x3xf32>, tensor<2xi32>
  return %e : tensor<2x2x3xf32>
})mlir";
  HostTensor t = rand(f32(), {2, 4, 3});
  auto out = run(src, {t, tensor(i32(), {2}, {3, 1})});
  ASSERT_EQ(out.size(), 1u);
  for (int a = 0; a < 2; ++a)
    for (int k = 0; k < 2; ++k)
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(out[0].data[(a * 2 + k) * 3 + c],
                  t.data[(a * 4 + (k == 0 ? 3 : 1)) * 3 + c]);
}

//===----------------------------------------------------------------------===//
// Reductions and normalizations
//===----------------------------------------------------------------------===//

TEST_F(ReferenceTest, Reductions) {
  const char *src = R"mlir(
func.func @f(%x: tensor<3x4x5xf32>) -> (tensor<4xf32>, tensor<3x1x1xf32>, tensor<3x4xf32>, tensor<3x5xf32>) {
  %s = llm.reduce_sum %x [0, 2] : tensor<3x4x5xf32>
  %m = llm.reduce_mean %x [1, 2] keepdim : tensor<3x4x5xf32>
  %mx = llm.reduce_max %x [2] : tensor<3x4x5xf32>
  %mn = llm.reduce_min %x [1] : tensor<3x4x5xf32>
  return %s, %m, %mx, %mn : tensor<4xf32>, tensor<3x1x1xf32>, tensor<3x4xf32>, tensor<3x5xf32>
})mlir";
  HostTensor x = rand(f32(), {3, 4, 5});
  auto at = [&](int a, int b, int c) { return x.data[(a * 4 + b) * 5 + c]; };
  auto out = run(src, {x});
  ASSERT_EQ(out.size(), 4u);
  for (int b = 0; b < 4; ++b) {
    double s = 0;
    for (int a = 0; a < 3; ++a)
      for (int c = 0; c < 5; ++c)
        s += at(a, b, c);
    EXPECT_EQ(out[0].data[b], static_cast<double>(static_cast<float>(s)));
  }
  EXPECT_EQ(out[1].shape, (std::vector<int64_t>{3, 1, 1}));
  for (int a = 0; a < 3; ++a) {
    double s = 0;
    for (int b = 0; b < 4; ++b)
      for (int c = 0; c < 5; ++c)
        s += at(a, b, c);
    EXPECT_NEAR(out[1].data[a], s / 20, 1e-6);
    for (int b = 0; b < 4; ++b) {
      double mx = -INFINITY;
      for (int c = 0; c < 5; ++c)
        mx = std::max(mx, at(a, b, c));
      EXPECT_EQ(out[2].data[a * 4 + b], mx);
    }
    for (int c = 0; c < 5; ++c) {
      double mn = INFINITY;
      for (int b = 0; b < 4; ++b)
        mn = std::min(mn, at(a, b, c));
      EXPECT_EQ(out[3].data[a * 5 + c], mn);
    }
  }
}

TEST_F(ReferenceTest, SoftmaxWithScaleMaskAndAllMaskedRow) {
  const char *src = R"mlir(
func.func @f(%x: tensor<2x3x4xf32>, %m: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
  %p = llm.softmax %x mask %m {scale = 0.5 : f64} : tensor<2x3x4xf32>, tensor<3x4xf32>
  return %p : tensor<2x3x4xf32>
})mlir";
  HostTensor x = rand(f32(), {2, 3, 4});
  HostTensor m = rand(f32(), {3, 4});
  for (int c = 0; c < 4; ++c)
    m.data[2 * 4 + c] = -INFINITY; // row 2 fully masked
  m.data[0] = -INFINITY;           // one masked entry in row 0
  auto out = run(src, {x, m});
  ASSERT_EQ(out.size(), 1u);
  for (int b = 0; b < 2; ++b)
    for (int r = 0; r < 3; ++r) {
      double z[4], mx = -INFINITY, sum = 0;
      for (int c = 0; c < 4; ++c) {
        z[c] = x.data[(b * 3 + r) * 4 + c] * 0.5 + m.data[r * 4 + c];
        mx = std::max(mx, z[c]);
      }
      for (int c = 0; c < 4; ++c)
        sum += std::exp(z[c] - mx);
      for (int c = 0; c < 4; ++c) {
        double got = out[0].data[(b * 3 + r) * 4 + c];
        if (r == 2) {
          EXPECT_TRUE(std::isnan(got));
          continue;
        }
        EXPECT_NEAR(got, std::exp(z[c] - mx) / sum, 1e-7);
      }
      if (r == 0) {
        EXPECT_EQ(out[0].data[b * 12], 0.0);
      }
    }
}

TEST_F(ReferenceTest, RMSNormMatchesDirectLoop) {
  for (Type t : {f32(), bf16(), f16()}) {
    std::string ty = t.isF32() ? "f32" : t.isBF16() ? "bf16" : "f16";
    SCOPED_TRACE(ty);
    std::string src =
        "func.func @f(%x: tensor<2x3x64x" + ty + ">, %w: tensor<64x" + ty +
        ">) -> tensor<2x3x64x" + ty + "> {\n"
        "  %y = llm.rms_norm %x, %w {eps = 1.0e-06 : f64} : tensor<2x3x64x" +
        ty + ">, tensor<64x" + ty + ">\n"
        "  return %y : tensor<2x3x64x" + ty + ">\n}";
    HostTensor x = rand(t, {2, 3, 64}, 2.0), w = rand(t, {64});
    auto out = run(src, {x, w});
    ASSERT_EQ(out.size(), 1u);
    for (int r = 0; r < 6; ++r) {
      double ss = 0;
      for (int c = 0; c < 64; ++c)
        ss += x.data[r * 64 + c] * x.data[r * 64 + c];
      double rms = std::sqrt(ss / 64 + 1e-6);
      for (int c = 0; c < 64; ++c) {
        double want = RoundToType(x.data[r * 64 + c] / rms * w.data[c], t);
        EXPECT_EQ(out[0].data[r * 64 + c], want) << r << "," << c;
      }
    }
  }
}

TEST_F(ReferenceTest, LayerNormMatchesDirectLoop) {
  const char *src = R"mlir(
func.func @f(%x: tensor<5x48xf32>, %w: tensor<48xf32>, %b: tensor<48xf32>) -> (tensor<5x48xf32>, tensor<5x48xf32>) {
  %y = llm.layer_norm %x, %w, %b {eps = 1.0e-05 : f64} : tensor<5x48xf32>, tensor<48xf32>, tensor<48xf32>
  %z = llm.layer_norm %x, %w : tensor<5x48xf32>, tensor<48xf32>
  return %y, %z : tensor<5x48xf32>, tensor<5x48xf32>
})mlir";
  HostTensor x = rand(f32(), {5, 48}, 3.0), w = rand(f32(), {48}),
             b = rand(f32(), {48});
  for (double &v : x.data)
    v = RoundToType(v + 2.0, f32()); // a nonzero mean
  auto out = run(src, {x, w, b});
  ASSERT_EQ(out.size(), 2u);
  for (int r = 0; r < 5; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 48; ++c)
      mean += x.data[r * 48 + c] / 48;
    for (int c = 0; c < 48; ++c)
      var += (x.data[r * 48 + c] - mean) * (x.data[r * 48 + c] - mean) / 48;
    for (int c = 0; c < 48; ++c) {
      double n = (x.data[r * 48 + c] - mean) / std::sqrt(var + 1e-5);
      EXPECT_NEAR(out[0].data[r * 48 + c], n * w.data[c] + b.data[c], 1e-5);
      EXPECT_NEAR(out[1].data[r * 48 + c], n * w.data[c], 1e-5);
    }
  }
}

//===----------------------------------------------------------------------===//
// RoPE
//===----------------------------------------------------------------------===//

/// HF transformers' formulation: x * cos + rotate_half(x) * sin with
/// cos/sin = cat(freqs, freqs) (half_split), or GPT-J's pairs (interleaved).
static std::vector<double> ropeReference(const HostTensor &x,
                                         std::vector<int64_t> offsets,
                                         double theta, bool interleaved) {
  int64_t B = x.shape[0], S = x.shape[1], H = x.shape[2], D = x.shape[3];
  std::vector<double> out(x.data.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        const double *v = &x.data[((b * S + s) * H + h) * D];
        double *o = &out[((b * S + s) * H + h) * D];
        for (int64_t d = 0; d < D; ++d) {
          int64_t i = interleaved ? d / 2 : d % (D / 2);
          double ang = (s + offsets[b]) / std::pow(theta, 2.0 * i / D);
          double rot;
          if (interleaved)
            rot = d % 2 == 0 ? -v[d + 1] : v[d - 1];
          else
            rot = d < D / 2 ? -v[d + D / 2] : v[d - D / 2];
          o[d] = v[d] * std::cos(ang) + rot * std::sin(ang);
        }
      }
  return out;
}

TEST_F(ReferenceTest, RopeMatchesRotateHalf) {
  const char *src = R"mlir(
func.func @f(%x: tensor<2x?x3x8xf32>, %p: tensor<i64>, %pb: tensor<2xi32>) -> (tensor<2x?x3x8xf32>, tensor<2x?x3x8xf32>, tensor<2x?x3x8xf32>) {
  %a = llm.rope %x half_split : tensor<2x?x3x8xf32>
  %b = llm.rope %x offset %p half_split {theta = 500.0 : f64} : tensor<2x?x3x8xf32>, tensor<i64>
  %c = llm.rope %x offset %pb interleaved : tensor<2x?x3x8xf32>, tensor<2xi32>
  return %a, %b, %c : tensor<2x?x3x8xf32>, tensor<2x?x3x8xf32>, tensor<2x?x3x8xf32>
})mlir";
  HostTensor x = rand(f32(), {2, 5, 3, 8});
  auto out = run(src, {x, scalar(i64(), 299), tensor(i32(), {2}, {3, 17})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_LT(maxAbsDiff(out[0].data, ropeReference(x, {0, 0}, 1e4, false)), 1e-6);
  EXPECT_LT(maxAbsDiff(out[1].data, ropeReference(x, {299, 299}, 500, false)),
            1e-6);
  EXPECT_LT(maxAbsDiff(out[2].data, ropeReference(x, {3, 17}, 1e4, true)), 1e-6);
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

TEST_F(ReferenceTest, MatmulTransposesBatchBroadcastAndBias) {
  const char *src = R"mlir(
func.func @f(%a: tensor<2x?x6xf32>, %w: tensor<5x6xf32>, %bias: tensor<5xf32>,
             %at: tensor<2x6x3xf32>, %b: tensor<1x6x5xf32>) -> (tensor<2x?x5xf32>, tensor<2x3x5xf32>) {
  %y = llm.matmul %a, %w bias %bias {transpose_rhs} : tensor<2x?x6xf32>, tensor<5x6xf32>, tensor<5xf32> -> tensor<2x?x5xf32>
  %z = llm.matmul %at, %b {transpose_lhs} : tensor<2x6x3xf32>, tensor<1x6x5xf32> -> tensor<2x3x5xf32>
  return %y, %z : tensor<2x?x5xf32>, tensor<2x3x5xf32>
})mlir";
  HostTensor a = rand(f32(), {2, 3, 6}), w = rand(f32(), {5, 6}),
             bias = rand(f32(), {5}), at = rand(f32(), {2, 6, 3}),
             b = rand(f32(), {1, 6, 5});
  auto out = run(src, {a, w, bias, at, b});
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[0].shape, (std::vector<int64_t>{2, 3, 5}));
  for (int bb = 0; bb < 2; ++bb)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) {
        double s = bias.data[j], t = 0;
        for (int k = 0; k < 6; ++k) {
          s += a.data[(bb * 3 + i) * 6 + k] * w.data[j * 6 + k];
          t += at.data[(bb * 6 + k) * 3 + i] * b.data[k * 5 + j];
        }
        EXPECT_NEAR(out[0].data[(bb * 3 + i) * 5 + j], s, 1e-5);
        EXPECT_NEAR(out[1].data[(bb * 3 + i) * 5 + j], t, 1e-5);
      }
}

TEST_F(ReferenceTest, MatmulBF16RoundsOnceAndFp8ToF32) {
  const char *src = R"mlir(
func.func @f(%a: tensor<4x32xbf16>, %b: tensor<32x8xbf16>, %a8: tensor<4x32xf8E4M3FN>, %b8: tensor<32x8xf8E5M2>) -> (tensor<4x8xbf16>, tensor<4x8xf32>) {
  %y = llm.matmul %a, %b : tensor<4x32xbf16>, tensor<32x8xbf16> -> tensor<4x8xbf16>
  %z = llm.matmul %a8, %b8 : tensor<4x32xf8E4M3FN>, tensor<32x8xf8E5M2> -> tensor<4x8xf32>
  return %y, %z : tensor<4x8xbf16>, tensor<4x8xf32>
})mlir";
  HostTensor a = rand(bf16(), {4, 32}), b = rand(bf16(), {32, 8}),
             a8 = rand(e4m3(), {4, 32}), b8 = rand(e5m2(), {32, 8});
  auto out = run(src, {a, b, a8, b8});
  ASSERT_EQ(out.size(), 2u);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) {
      double s = 0, t = 0;
      for (int k = 0; k < 32; ++k) {
        s += a.data[i * 32 + k] * b.data[k * 8 + j];
        t += a8.data[i * 32 + k] * b8.data[k * 8 + j];
      }
      EXPECT_EQ(out[0].data[i * 8 + j], RoundToType(s, bf16()));
      EXPECT_EQ(out[1].data[i * 8 + j], RoundToType(t, f32()));
    }
}

// `scales(sa, sb)`: the exact product times sa * sb plus the bias, rounded
// once to the result type (torch._scaled_mm; what the GPU's scaling kernel
// and cuBLASLt's scale pointers compute), batched and with a bias.
TEST_F(ReferenceTest, MatmulScalesScaleTheProductBeforeTheOneRounding) {
  const char *src = R"mlir(
func.func @f(%a8: tensor<2x3x32xf8E4M3FN>, %b8: tensor<8x32xf8E5M2>, %sa: tensor<f32>, %sb: tensor<f32>,
             %bias: tensor<8xbf16>) -> (tensor<2x3x8xbf16>, tensor<2x3x8xf32>) {
  %y = llm.matmul %a8, %b8 bias %bias scales(%sa, %sb) {transpose_rhs} : tensor<2x3x32xf8E4M3FN>, tensor<8x32xf8E5M2>, tensor<8xbf16> -> tensor<2x3x8xbf16>
  %z = llm.matmul %a8, %b8 scales(%sa, %sb) {transpose_rhs} : tensor<2x3x32xf8E4M3FN>, tensor<8x32xf8E5M2> -> tensor<2x3x8xf32>
  return %y, %z : tensor<2x3x8xbf16>, tensor<2x3x8xf32>
})mlir";
  HostTensor a8 = rand(e4m3(), {2, 3, 32}), b8 = rand(e5m2(), {8, 32}),
             sa = rand(f32(), {}), sb = rand(f32(), {}), bias = rand(bf16(), {8});
  auto out = run(src, {a8, b8, sa, sb, bias});
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[0].shape, (std::vector<int64_t>{2, 3, 8}));
  const double scale = sa.data[0] * sb.data[0];
  ASSERT_NE(scale, 0.0);
  int differsFromTwoRoundings = 0;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 8; ++j) {
      double t = 0;
      for (int k = 0; k < 32; ++k)
        t += a8.data[i * 32 + k] * b8.data[j * 32 + k];
      EXPECT_EQ(out[0].data[i * 8 + j], RoundToType(t * scale + bias.data[j], bf16()));
      EXPECT_EQ(out[1].data[i * 8 + j], RoundToType(t * scale, f32()));
      differsFromTwoRoundings +=
          out[0].data[i * 8 + j] != RoundToType(RoundToType(t * scale, bf16()) + bias.data[j], bf16());
    }
  // The inputs are such that rounding the product first would differ
  // somewhere (else this test could not tell one rounding from two).
  EXPECT_GT(differsFromTwoRoundings, 0);
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// Naive attention: repeats KV heads to Hq, builds the full score matrix
/// with -inf where masked, softmaxes with the max subtracted.
static std::vector<double> naiveAttention(const HostTensor &q,
                                          const HostTensor &k,
                                          const HostTensor &v, bool causal,
                                          int64_t kvLen,
                                          const std::vector<double> *mask) {
  int64_t B = q.shape[0], Sq = q.shape[1], Hq = q.shape[2], D = q.shape[3];
  int64_t Skv = k.shape[1], Hkv = k.shape[2];
  int64_t rep = Hq / Hkv;
  // Repeat KV heads: kr[b][s][h] = k[b][s][h / rep].
  std::vector<double> kr(B * Skv * Hq * D), vr(B * Skv * Hq * D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < Skv; ++s)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t d = 0; d < D; ++d) {
          kr[((b * Skv + s) * Hq + h) * D + d] =
              k.data[((b * Skv + s) * Hkv + h / rep) * D + d];
          vr[((b * Skv + s) * Hq + h) * D + d] =
              v.data[((b * Skv + s) * Hkv + h / rep) * D + d];
        }
  std::vector<double> out(q.data.size(), 0.0);
  double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        std::vector<double> s(Skv);
        double mx = -INFINITY;
        for (int64_t j = 0; j < Skv; ++j) {
          double dotp = 0;
          for (int64_t d = 0; d < D; ++d)
            dotp += q.data[((b * Sq + i) * Hq + h) * D + d] *
                    kr[((b * Skv + j) * Hq + h) * D + d];
          s[j] = dotp * scale;
          if (mask)
            s[j] += (*mask)[((b * Hq + h) * Sq + i) * Skv + j];
          if (j >= kvLen || (causal && j > i + kvLen - Sq))
            s[j] = -INFINITY;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < Skv; ++j)
          sum += std::exp(s[j] - mx);
        for (int64_t j = 0; j < Skv; ++j) {
          double p = std::exp(s[j] - mx) / sum;
          for (int64_t d = 0; d < D; ++d)
            out[((b * Sq + i) * Hq + h) * D + d] +=
                p * vr[((b * Skv + j) * Hq + h) * D + d];
        }
      }
  return out;
}

static std::string attentionSrc(int64_t B, int64_t Sq, int64_t Skv,
                                int64_t Hq, int64_t Hkv, int64_t D,
                                const std::string &ty, bool causal,
                                bool kvLen) {
  auto t = [&](int64_t s, int64_t h) {
    return "tensor<" + std::to_string(B) + "x" + std::to_string(s) + "x" +
           std::to_string(h) + "x" + std::to_string(D) + "x" + ty + ">";
  };
  std::string q = t(Sq, Hq), kv = t(Skv, Hkv);
  std::string src = "func.func @f(%q: " + q + ", %k: " + kv + ", %v: " + kv +
                    ", %n: tensor<i64>) -> " + q + " {\n  %o = llm.attention "
                    "%q, %k, %v";
  if (kvLen)
    src += " kv_len(%n : tensor<i64>)";
  if (causal)
    src += " {causal}";
  src += " : " + q + ", " + kv + ", " + kv + "\n  return %o : " + q + "\n}";
  return src;
}

TEST_F(ReferenceTest, AttentionGQAMatchesNaiveRepeatKV) {
  struct Case {
    int64_t B, Sq, Skv, Hq, Hkv, D;
    bool causal, useKvLen;
    int64_t kvLen;
  };
  std::vector<Case> cases = {
      {2, 7, 7, 8, 1, 16, true, false, 7},     // (8,1), Sq == Skv
      {1, 7, 7, 9, 3, 20, true, false, 7},     // (9,3): group 3
      {2, 5, 5, 9, 3, 8, false, false, 5},     // non-causal
      {1, 1, 300, 8, 2, 16, true, true, 300},  // decode vs KV 300
      {2, 1, 300, 9, 3, 16, true, true, 123},  // decode, partial cache
      {1, 4, 10, 4, 4, 8, true, true, 9},      // chunked prefill, bottom right
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "Hq=" << c.Hq << " Hkv=" << c.Hkv << " Sq=" << c.Sq
                 << " Skv=" << c.Skv << " kv_len=" << c.kvLen);
    HostTensor q = rand(f32(), {c.B, c.Sq, c.Hq, c.D});
    HostTensor k = rand(f32(), {c.B, c.Skv, c.Hkv, c.D});
    HostTensor v = rand(f32(), {c.B, c.Skv, c.Hkv, c.D});
    auto out = run(attentionSrc(c.B, c.Sq, c.Skv, c.Hq, c.Hkv, c.D, "f32",
                                c.causal, c.useKvLen),
                   {q, k, v, scalar(i64(), c.kvLen)});
    ASSERT_EQ(out.size(), 1u);
    std::vector<double> want =
        naiveAttention(q, k, v, c.causal, c.kvLen, nullptr);
    EXPECT_LT(maxAbsDiff(out[0].data, want), 1e-6);
  }
}

TEST_F(ReferenceTest, AttentionWithBroadcastMaskAndBF16) {
  const char *src = R"mlir(
func.func @f(%q: tensor<2x6x4x8xbf16>, %k: tensor<2x6x2x8xbf16>, %v: tensor<2x6x2x8xbf16>, %m: tensor<2x1x1x6xbf16>) -> tensor<2x6x4x8xbf16> {
  %o = llm.attention %q, %k, %v mask(%m : tensor<2x1x1x6xbf16>) {causal} : tensor<2x6x4x8xbf16>, tensor<2x6x2x8xbf16>, tensor<2x6x2x8xbf16>
  return %o : tensor<2x6x4x8xbf16>
})mlir";
  HostTensor q = rand(bf16(), {2, 6, 4, 8}), k = rand(bf16(), {2, 6, 2, 8}),
             v = rand(bf16(), {2, 6, 2, 8}), m = rand(bf16(), {2, 1, 1, 6});
  auto out = run(src, {q, k, v, m});
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> full(2 * 4 * 6 * 6);
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 4; ++h)
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j)
          full[((b * 4 + h) * 6 + i) * 6 + j] = m.data[b * 6 + j];
  std::vector<double> want = naiveAttention(q, k, v, true, 6, &full);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(out[0].data[i], RoundToType(want[i], bf16())) << i;
}

TEST_F(ReferenceTest, AttentionKvLenOutOfRangeIsAnError) {
  absl::Status s = runStatus(attentionSrc(1, 1, 4, 2, 2, 4, "f32", true, true),
                             {rand(f32(), {1, 1, 2, 4}), rand(f32(), {1, 4, 2, 4}),
                              rand(f32(), {1, 4, 2, 4}), scalar(i64(), 5)});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("llm.attention"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("kv_len 5"), std::string_view::npos) << s;
}

//===----------------------------------------------------------------------===//
// KV cache
//===----------------------------------------------------------------------===//

TEST_F(ReferenceTest, KVCacheAppendAndOverflow) {
  const char *src = R"mlir(
func.func @f(%c: tensor<2x6x2x3xf32>, %u: tensor<2x?x2x3xf32>, %p: tensor<i32>) -> tensor<2x6x2x3xf32> {
  %r = llm.kv_cache_append %c, %u, %p : tensor<2x6x2x3xf32>, tensor<2x?x2x3xf32>, tensor<i32>
  return %r : tensor<2x6x2x3xf32>
})mlir";
  HostTensor c = rand(f32(), {2, 6, 2, 3}), u = rand(f32(), {2, 2, 2, 3});
  auto out = run(src, {c, u, scalar(i32(), 3)});
  ASSERT_EQ(out.size(), 1u);
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 6; ++s)
      for (int e = 0; e < 6; ++e) {
        double want = (s == 3 || s == 4) ? u.data[(b * 2 + s - 3) * 6 + e]
                                         : c.data[(b * 6 + s) * 6 + e];
        EXPECT_EQ(out[0].data[(b * 6 + s) * 6 + e], want);
      }
  absl::Status s = runStatus(src, {c, u, scalar(i32(), 5)});
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("llm.kv_cache_append"), std::string_view::npos)
      << s;
}

TEST_F(ReferenceTest, IndexPutCopiesAndAccumulates) {
  // Copy along dim 1 of [2, 5, 3] with a negative index; accumulate with a
  // duplicate index into bf16 (the sum is rounded once: 1 + 2^-8 + 2^-8 =
  // 1 + 2^-7 is a bf16, where rounding after each add would give 1).
  const char *src = R"mlir(
func.func @f(%b: tensor<2x5x3xf32>, %i: tensor<2xi64>, %s: tensor<2x2x3xf32>,
             %a: tensor<4xbf16>, %j: tensor<3xi32>, %t: tensor<3xbf16>)
    -> (tensor<2x5x3xf32>, tensor<4xbf16>) {
  %r = llm.index_put %b[%i], %s dim = 1 : tensor<2x5x3xf32>, tensor<2xi64>, tensor<2x2x3xf32>
  %q = llm.index_put %a[%j], %t dim = 0 {accumulate} : tensor<4xbf16>, tensor<3xi32>, tensor<3xbf16>
  return %r, %q : tensor<2x5x3xf32>, tensor<4xbf16>
})mlir";
  HostTensor b = rand(f32(), {2, 5, 3}), s = rand(f32(), {2, 2, 3});
  auto out = run(src, {b, tensor(i64(), {2}, {3, -5}), s,
                       tensor(bf16(), {4}, {2.0, 1.0, 3.0, 4.0}),
                       tensor(i32(), {3}, {1, 3, 1}),
                       tensor(bf16(), {3}, {0x1p-8, 0.5, 0x1p-8})});
  ASSERT_EQ(out.size(), 2u);
  for (int o = 0; o < 2; ++o)
    for (int r = 0; r < 5; ++r)
      for (int e = 0; e < 3; ++e) {
        double want = r == 3   ? s.data[(o * 2 + 0) * 3 + e]
                      : r == 0 ? s.data[(o * 2 + 1) * 3 + e]
                               : b.data[(o * 5 + r) * 3 + e];
        EXPECT_EQ(out[0].data[(o * 5 + r) * 3 + e], want);
      }
  EXPECT_EQ(out[1].data, (std::vector<double>{2.0, 1.0 + 0x1p-7, 3.0, 4.5}));
  absl::Status bad = runStatus(src, {b, tensor(i64(), {2}, {3, 5}), s,
                                     tensor(bf16(), {4}, {1, 2, 3, 4}),
                                     tensor(i32(), {3}, {1, 3, 1}),
                                     tensor(bf16(), {3}, {1, 1, 1})});
  EXPECT_EQ(bad.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(bad.message().find("'llm.index_put'"), std::string_view::npos) << bad;
  EXPECT_NE(bad.message().find("index 5 at position 1 of the indices is out of range [-5, 5)"),
            std::string_view::npos)
      << bad;
}

TEST_F(ReferenceTest, ArgMaxFirstMaximumAndNaN) {
  // Rows: a tie (the first wins), a NaN after the maximum (NaN wins), two
  // NaNs (the first), all -inf (index 0). Along dim 0 with keepdim too.
  const char *src = R"mlir(
func.func @f(%x: tensor<4x4xf32>) -> (tensor<4xi64>, tensor<1x4xi64>) {
  %r = llm.argmax %x dim = 1 : tensor<4x4xf32>
  %c = llm.argmax %x dim = 0 keepdim : tensor<4x4xf32>
  return %r, %c : tensor<4xi64>, tensor<1x4xi64>
})mlir";
  const double inf = std::numeric_limits<double>::infinity();
  auto out = run(src, {tensor(f32(), {4, 4},
                              {1.0, 3.0, 3.0, 2.0,        //
                               5.0, 1.0, NAN, 7.0,        //
                               0.0, NAN, 9.0, NAN,        //
                               -inf, -inf, -inf, -inf})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].data, (std::vector<double>{1, 2, 1, 0}));
  EXPECT_EQ(out[1].shape, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(out[1].data, (std::vector<double>{1, 2, 1, 2}));
}

//===----------------------------------------------------------------------===//
// Input checking and errors
//===----------------------------------------------------------------------===//

TEST_F(ReferenceTest, RejectsInputsThatDoNotMatchTheFunction) {
  const char *src = R"mlir(
func.func @f(%x: tensor<?x4xbf16>) -> tensor<?x4xbf16> {
  %y = llm.neg %x : tensor<?x4xbf16>
  return %y : tensor<?x4xbf16>
})mlir";
  absl::Status count = runStatus(src, {});
  EXPECT_NE(count.message().find("expects 1 inputs, found 0"),
            std::string_view::npos)
      << count;
  absl::Status dtype = runStatus(src, {rand(f32(), {2, 4})});
  EXPECT_NE(dtype.message().find("argument #0: expected element type bf16, "
                                 "found f32"),
            std::string_view::npos)
      << dtype;
  absl::Status shape = runStatus(src, {rand(bf16(), {2, 5})});
  EXPECT_NE(shape.message().find("expected shape [?, 4], found [2, 5]"),
            std::string_view::npos)
      << shape;
  absl::Status value =
      runStatus(src, {tensor(bf16(), {1, 4}, {1.0, 0.1, 2.0, 3.0})});
  EXPECT_NE(value.message().find("not representable in bf16"),
            std::string_view::npos)
      << value;
}

TEST_F(ReferenceTest, RuntimeShapeMismatchNamesTheOp) {
  const char *src = R"mlir(
func.func @f(%a: tensor<?x4xf32>, %b: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %y = llm.add %a, %b : tensor<?x4xf32>
  return %y : tensor<?x4xf32>
})mlir";
  absl::Status s = runStatus(src, {rand(f32(), {2, 4}), rand(f32(), {3, 4})});
  EXPECT_NE(s.message().find("'llm.add'"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("[2, 4] and [3, 4]"), std::string_view::npos) << s;
}

TEST_F(ReferenceTest, UnsupportedOpIsUnimplemented) {
  const char *src = R"mlir(
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  return %e : tensor<4xf32>
})mlir";
  absl::Status s = runStatus(src, {rand(f32(), {4})});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("tensor.empty"), std::string_view::npos) << s;
}

TEST_F(ReferenceTest, ArithConstantIsSupported) {
  const char *src = R"mlir(
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %c = arith.constant dense<[1.5, -2.0]> : tensor<2xf32>
  %y = llm.add %a, %c : tensor<2xf32>
  return %y : tensor<2xf32>
})mlir";
  auto out = run(src, {tensor(f32(), {2}, {1, 1})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, (std::vector<double>{2.5, -1.0}));
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

TEST_F(ReferenceTest, CollectivesOfOneRankAreIdentityAndLargerGroupsNeedRanks) {
  const char *one = R"mlir(
func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %r = llm.all_reduce %a sum group_size = 1 : tensor<2x3xf32>
  return %r : tensor<2x3xf32>
})mlir";
  HostTensor a = rand(f32(), {2, 3});
  auto out = run(one, {a});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, a.data);
  const char *two = R"mlir(
func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %r = llm.all_reduce %a sum group_size = 2 : tensor<2x3xf32>
  return %r : tensor<2x3xf32>
})mlir";
  absl::Status s = runStatus(two, {a});
  EXPECT_NE(s.message().find("needs 2 ranks"), std::string_view::npos) << s;
}

TEST_F(ReferenceTest, EvaluateRanksSimulatesCollectives) {
  const char *src = R"mlir(
func.func @f(%a: tensor<4x2xf32>) -> (tensor<4x2xf32>, tensor<4x4xf32>, tensor<2x2xf32>, tensor<4x2xf32>) {
  %s = llm.all_reduce %a sum group_size = 2 : tensor<4x2xf32>
  %g = llm.all_gather %a dim = 1 group_size = 2 : tensor<4x2xf32>
  %r = llm.reduce_scatter %a sum dim = 0 group_size = 2 : tensor<4x2xf32>
  %m = llm.all_reduce %a max group_size = 2 : tensor<4x2xf32>
  return %s, %g, %r, %m : tensor<4x2xf32>, tensor<4x4xf32>, tensor<2x2xf32>, tensor<4x2xf32>
})mlir";
  func::FuncOp fn = parse(src);
  ASSERT_TRUE(fn);
  HostTensor a0 = rand(f32(), {4, 2}), a1 = rand(f32(), {4, 2});
  auto r = EvaluateRanks({fn, fn}, {{a0}, {a1}});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    const auto &o = (*r)[rank];
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(o[0].data[i], RoundToType(a0.data[i] + a1.data[i], f32()));
      EXPECT_EQ(o[3].data[i], std::max(a0.data[i], a1.data[i]));
    }
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 2; ++j) {
        EXPECT_EQ(o[1].data[i * 4 + j], a0.data[i * 2 + j]);
        EXPECT_EQ(o[1].data[i * 4 + 2 + j], a1.data[i * 2 + j]);
      }
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        int src_i = rank * 2 + i;
        EXPECT_EQ(o[2].data[i * 2 + j],
                  RoundToType(a0.data[src_i * 2 + j] + a1.data[src_i * 2 + j],
                              f32()));
      }
  }
}

//===----------------------------------------------------------------------===//
// Shared case C1: low-precision norms with large and tiny rows
//===----------------------------------------------------------------------===//

/// One unit in the last place of `y` in a float type with `mantissa` explicit
/// bits and smallest normal exponent `minExp`.
static double ulp(double y, int mantissa, int minExp) {
  int e = y == 0 ? minExp : std::max(std::ilogb(y), minExp);
  return std::ldexp(1.0, e - mantissa);
}

TEST_F(ReferenceTest, C1LowPrecisionNormsAreFiniteAndWithinAnUlp) {
  for (bool isBF16 : {false, true}) {
    Type t = isBF16 ? bf16() : f16();
    std::string ty = isBF16 ? "bf16" : "f16";
    int mantissa = isBF16 ? 7 : 10, minExp = isBF16 ? -126 : -14;
    SCOPED_TRACE(ty);
    std::string x = "tensor<3x7x4096x" + ty + ">", w = "tensor<4096x" + ty + ">";
    std::string src = "func.func @f(%x: " + x + ", %w: " + w + ", %b: " + w +
                      ") -> (" + x + ", " + x + ") {\n"
                      "  %r = llm.rms_norm %x, %w {eps = 1.0e-05 : f64} : " +
                      x + ", " + w + "\n"
                      "  %l = llm.layer_norm %r, %w, %b {eps = 1.0e-05 : f64} : " +
                      x + ", " + w + ", " + w + "\n"
                      "  return %r, %l : " + x + ", " + x + "\n}";
    HostTensor in = rand(t, {3, 7, 4096});
    std::normal_distribution<double> nd;
    for (int64_t i = 7 * 4096; i < 2 * 7 * 4096; ++i)
      in.data[i] = RoundToType(300.0 * nd(rng), t); // sum of squares >> 65504
    for (int64_t i = 2 * 7 * 4096; i < 3 * 7 * 4096; ++i)
      in.data[i] = RoundToType(1e-6, t); // variance ~ eps
    HostTensor wt = rand(t, {4096}, 0.1), bt = rand(t, {4096}, 0.1);
    for (double &v : wt.data)
      v = RoundToType(1.0 + v, t);
    auto out = run(src, {in, wt, bt});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_TRUE(allFinite(out[0]));
    EXPECT_TRUE(allFinite(out[1]));
    double worstRms = 0, worstLn = 0;
    for (int64_t r = 0; r < 21; ++r) {
      const double *xr = &in.data[r * 4096];
      double ss = 0;
      for (int c = 0; c < 4096; ++c)
        ss += xr[c] * xr[c];
      double inv = 1 / std::sqrt(ss / 4096 + 1e-5);
      const double *rr = &out[0].data[r * 4096];
      double mean = 0, var = 0;
      for (int c = 0; c < 4096; ++c)
        mean += rr[c];
      mean /= 4096;
      for (int c = 0; c < 4096; ++c)
        var += (rr[c] - mean) * (rr[c] - mean);
      var /= 4096;
      for (int c = 0; c < 4096; ++c) {
        double y = xr[c] * inv * wt.data[c];
        worstRms = std::max(worstRms, std::fabs(rr[c] - y) /
                                          ulp(std::fabs(y), mantissa, minExp));
        double z = (rr[c] - mean) / std::sqrt(var + 1e-5) * wt.data[c] +
                   bt.data[c];
        worstLn = std::max(worstLn, std::fabs(out[1].data[r * 4096 + c] - z) /
                                        ulp(std::fabs(z), mantissa, minExp));
      }
    }
    EXPECT_LE(worstRms, 1.0);
    EXPECT_LE(worstLn, 1.0);
  }
}

} // namespace

namespace {

/// RoundToType's bit-level bf16 path agrees with APFloat's RNE conversion
/// over magnitudes from subnormal to overflow, including exact ties.
TEST_F(ReferenceTest, BF16FastPathMatchesAPFloat) {
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> expo(-140, 130);
  auto viaAPFloat = [](double v) {
    llvm::APFloat f(v);
    bool lost;
    f.convert(llvm::APFloat::BFloat(), llvm::APFloat::rmNearestTiesToEven,
              &lost);
    f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
              &lost);
    return f.convertToDouble();
  };
  for (int i = 0; i < 200000; ++i) {
    double v = std::ldexp(mant(rng), expo(rng)) * (i % 2 ? -1 : 1);
    if (i % 3 == 0) // an exact tie: 8 significant bits, then half an ulp
      v = std::ldexp(std::floor(std::ldexp(v, 7 - std::ilogb(v))) + 0.5,
                     std::ilogb(v) - 7);
    double want = viaAPFloat(v), got = RoundToType(v, bf16());
    ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want)))
        << "v=" << v << " got " << got << " want " << want;
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Robustness: what user IR and inputs cannot make the executor do (crash,
// abort on an allocation, compute what the CUDA backend rejects)
//===----------------------------------------------------------------------===//

namespace {

bool contains(const absl::Status &s, absl::string_view text) {
  return s.message().find(text) != absl::string_view::npos;
}

// complex<f32> reached RoundToType through the input check and crashed
// (SIGSEGV in FloatType::getFloatSemantics).
TEST_F(ReferenceTest, UnsupportedElementTypesAreErrorsNotCrashes) {
  Type c32 = ComplexType::get(f32());
  absl::Status s = runStatus(R"mlir(
func.func @f(%x: tensor<4xcomplex<f32>>) -> tensor<4xcomplex<f32>> {
  return %x : tensor<4xcomplex<f32>>
})mlir",
                             {tensor(c32, {4}, {0, 0, 0, 0})});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(contains(s, "@f argument #0 has element type complex<f32>, "
                          "which the reference executor does not support "
                          "(expected f32, f16, bf16, f8E4M3FN, f8E5M2, i1, "
                          "i8, i32 or i64)"))
      << s;
  Type index = IndexType::get(&ctx);
  s = runStatus(R"mlir(
func.func @f(%x: tensor<2xindex>) -> tensor<2xindex> {
  return %x : tensor<2xindex>
})mlir",
                {tensor(index, {2}, {0, 1})});
  EXPECT_TRUE(contains(s, "argument #0 has element type index")) << s;
  s = runStatus(R"mlir(
func.func @f(%x: tensor<2xf32>) -> tensor<2xf64> {
  %c = arith.constant dense<1.0> : tensor<2xf64>
  return %c : tensor<2xf64>
})mlir",
                {tensor(f32(), {2}, {0, 1})});
  EXPECT_TRUE(contains(s, "@f result #0 has element type f64")) << s;
  // A constant of a type outside the dialect (arith.constant takes any).
  s = runStatus(R"mlir(
func.func @f() -> tensor<2xf32> {
  %c = arith.constant dense<1.0> : tensor<2xf64>
  %r = arith.constant dense<1.0> : tensor<2xf32>
  return %r : tensor<2xf32>
})mlir",
                {});
  EXPECT_TRUE(contains(s, "'arith.constant' at ")) << s;
  EXPECT_TRUE(contains(s, "constant of element type f64, which the reference "
                          "executor does not support"))
      << s;
  // A constant that is not a tensor (the result type was cast to a ranked
  // tensor type unchecked).
  s = runStatus(R"mlir(
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = arith.constant dense<1.0> : vector<4xf32>
  return %x : tensor<4xf32>
})mlir",
                {rand(f32(), {4})});
  EXPECT_TRUE(contains(s, "'arith.constant' at ")) << s;
  EXPECT_TRUE(contains(s, "result type vector<4xf32> is not a ranked tensor"))
      << s;
  // The rounding helper itself never crashes on such a type: NaN.
  EXPECT_TRUE(std::isnan(RoundToType(1.0, c32)));
  EXPECT_TRUE(std::isnan(RoundToType(1.0, index)));
}

// Dims of 2^62 made the element count wrap to 0, so an input with no data
// passed the size check and gather, rope and matmul read past it (SIGSEGV)
// or sized a vector from it (std::length_error -> terminate).
TEST_F(ReferenceTest, InputShapesBeyondTheElementLimitAreErrors) {
  const int64_t huge = int64_t(1) << 62;
  struct Case {
    const char *src;
    std::vector<HostTensor> inputs;
  };
  std::vector<Case> cases = {
      {R"mlir(
func.func @f(%t: tensor<?x4xf32>, %i: tensor<2xi64>) -> tensor<2x4xf32> {
  %e = llm.gather %t, %i axis = 0 : tensor<?x4xf32>, tensor<2xi64>
  return %e : tensor<2x4xf32>
})mlir",
       {tensor(f32(), {huge, 4}, {}), tensor(i64(), {2}, {1, 2})}},
      {R"mlir(
func.func @f(%x: tensor<1x?x2x4xf32>) -> tensor<1x?x2x4xf32> {
  %r = llm.rope %x half_split : tensor<1x?x2x4xf32>
  return %r : tensor<1x?x2x4xf32>
})mlir",
       {tensor(f32(), {1, huge, 2, 4}, {})}},
      {R"mlir(
func.func @f(%x: tensor<?x4xf32>, %w: tensor<4x4xf32>) -> tensor<?x4xf32> {
  %y = llm.matmul %x, %w : tensor<?x4xf32>, tensor<4x4xf32> -> tensor<?x4xf32>
  return %y : tensor<?x4xf32>
})mlir",
       {tensor(f32(), {huge, 4}, {}), rand(f32(), {4, 4})}},
  };
  for (const Case &c : cases) {
    absl::Status s = runStatus(c.src, c.inputs);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(contains(s, "argument #0")) << s;
    EXPECT_TRUE(contains(s, "more than the supported 2^40")) << s;
  }
  // Below the limit but not 2^40-sized data: still the usual count check.
  absl::Status s = runStatus(cases[2].src, {tensor(f32(), {1 << 20, 4}, {}),
                                            rand(f32(), {4, 4})});
  EXPECT_TRUE(contains(s, "has 4194304 elements but the data holds 0")) << s;
}

// An intermediate of 2^40 elements (8 TiB as float64) was allocated without
// a check: std::bad_alloc, which the -fno-exceptions build turns into an
// abort of the whole process.
TEST_F(ReferenceTest, AnIntermediateBeyondTheHostBudgetIsAnErrorNotAnAbort) {
  absl::Status s = runStatus(R"mlir(
func.func @f(%x: tensor<1xf32>) -> tensor<1099511627776xf32> {
  %b = llm.broadcast %x : tensor<1xf32> to tensor<1099511627776xf32>
  return %b : tensor<1099511627776xf32>
})mlir",
                             {tensor(f32(), {1}, {1.0})});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(contains(s, "'llm.broadcast' at ")) << s;
  EXPECT_TRUE(contains(s, "result tensor<1099511627776xf32>")) << s;
  EXPECT_TRUE(contains(s, "8796093022208 bytes")) << s;
  EXPECT_TRUE(contains(s, "budget of 8589934592 bytes")) << s;
}

// position + Snew overflowed int64 and wrapped negative, so the bounds check
// passed and the copy wrote far outside the cache (SIGSEGV).
TEST_F(ReferenceTest, KVCacheAppendPositionNearInt64MaxIsOutOfRange) {
  absl::Status s = runStatus(R"mlir(
func.func @f(%c: tensor<1x1024x1x1xf32>, %u: tensor<1x1024x1x1xf32>, %p: tensor<i64>) -> tensor<1x1024x1x1xf32> {
  %r = llm.kv_cache_append %c, %u, %p : tensor<1x1024x1x1xf32>, tensor<1x1024x1x1xf32>, tensor<i64>
  return %r : tensor<1x1024x1x1xf32>
})mlir",
                             {rand(f32(), {1, 1024, 1, 1}),
                              rand(f32(), {1, 1024, 1, 1}),
                              scalar(i64(), 0x1p63 - 1024)});
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_TRUE(contains(s, "position 9223372036854774784 + 1024 new rows "
                          "exceeds the cache length 1024"))
      << s;
}

// The verifier's edge-case rules hold for unspecialized (dynamic) functions
// too, with the verifier's words: the reference gave -inf for the max of
// nothing and zeros for K = 0, and ran head dims the CUDA kernels reject.
TEST_F(ReferenceTest, EmptyReductionsKZeroAndHeadDimsFollowTheVerifier) {
  absl::Status s = runStatus(R"mlir(
func.func @f(%x: tensor<4x?xf32>) -> tensor<4xf32> {
  %m = llm.reduce_max %x [1] : tensor<4x?xf32>
  return %m : tensor<4xf32>
})mlir",
                             {tensor(f32(), {4, 0}, {})});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(contains(s, "'llm.reduce_max' at ")) << s;
  EXPECT_TRUE(contains(s, "reduces dimension 1 of the input [4, 0], which is "
                          "empty; reduced dimensions must have size >= 1"))
      << s;
  s = runStatus(R"mlir(
func.func @f(%a: tensor<4x?xf32>, %b: tensor<?x8xf32>) -> tensor<4x8xf32> {
  %y = llm.matmul %a, %b : tensor<4x?xf32>, tensor<?x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
})mlir",
                {tensor(f32(), {4, 0}, {}), tensor(f32(), {0, 8}, {})});
  EXPECT_TRUE(contains(s, "'llm.matmul' at ")) << s;
  EXPECT_TRUE(contains(s, "contraction size K is 0; a matmul needs K >= 1"))
      << s;
  s = runStatus(R"mlir(
func.func @f(%q: tensor<1x2x1x?xf32>) -> tensor<1x2x1x?xf32> {
  %o = llm.attention %q, %q, %q : tensor<1x2x1x?xf32>, tensor<1x2x1x?xf32>, tensor<1x2x1x?xf32>
  return %o : tensor<1x2x1x?xf32>
})mlir",
                {rand(f32(), {1, 2, 1, 1032})});
  EXPECT_TRUE(contains(s, "'llm.attention' at ")) << s;
  EXPECT_TRUE(contains(s, "head dimension D = 1032 is outside the supported "
                          "range [1, 1024]"))
      << s;
}

// The budget counts what is live: a value is released after its last use,
// and an op that is its operand's only remaining user (reshape,
// kv_cache_append) takes the buffer instead of copying it.
TEST_F(ReferenceTest, HostBudgetCountsLiveValuesAndIsAnOption) {
  std::string chain = R"mlir(
func.func @f(%x: tensor<65536xf32>) -> tensor<65536xf32> {
  %a = llm.neg %x : tensor<65536xf32>
  %b = llm.neg %a : tensor<65536xf32>
  %c = llm.neg %b : tensor<65536xf32>
  %d = llm.neg %c : tensor<65536xf32>
  %e = llm.neg %d : tensor<65536xf32>
  %f = llm.neg %e : tensor<65536xf32>
  %g = llm.neg %f : tensor<65536xf32>
  %h = llm.neg %g : tensor<65536xf32>
  return %h : tensor<65536xf32>
})mlir";
  const int64_t tensorBytes = 65536 * 8; // 512 KiB of float64
  func::FuncOp fn = parse(chain);
  ASSERT_TRUE(fn);
  HostTensor x = rand(f32(), {65536});
  // Two tensors live at a time (an operand and its result), not nine.
  EvaluateOptions two;
  two.max_host_bytes = 2 * tensorBytes;
  absl::StatusOr<std::vector<HostTensor>> out = Evaluate(fn, {x}, two);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].data, x.data); // eight negations
  EvaluateOptions small;
  small.max_host_bytes = 2 * tensorBytes - 1;
  absl::Status s = Evaluate(fn, {x}, small).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(contains(s, "'llm.neg' at ")) << s;
  EXPECT_TRUE(contains(s, "the result tensor<65536xf32> needs 524288 bytes"))
      << s;
  EXPECT_TRUE(contains(s, "budget of 1048575 bytes (524288 in use)")) << s;
  // The input copy itself is checked.
  EvaluateOptions tiny;
  tiny.max_host_bytes = tensorBytes - 1;
  s = Evaluate(fn, {x}, tiny).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(contains(s, "@f argument #0: the copy of tensor<65536xf32> "
                          "needs 524288 bytes"))
      << s;

  // In place: the only buffer is the input's.
  fn = parse(R"mlir(
func.func @f(%x: tensor<65536xf32>) -> tensor<256x256xf32> {
  %r = llm.reshape %x : tensor<65536xf32> to tensor<256x256xf32>
  return %r : tensor<256x256xf32>
})mlir");
  ASSERT_TRUE(fn);
  EvaluateOptions one;
  one.max_host_bytes = tensorBytes;
  out = Evaluate(fn, {x}, one);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].data, x.data);
  fn = parse(R"mlir(
func.func @f(%c: tensor<1x4096x16x1xf32>, %u: tensor<1x1x16x1xf32>, %p: tensor<i64>) -> tensor<1x4096x16x1xf32> {
  %r = llm.kv_cache_append %c, %u, %p : tensor<1x4096x16x1xf32>, tensor<1x1x16x1xf32>, tensor<i64>
  return %r : tensor<1x4096x16x1xf32>
})mlir");
  ASSERT_TRUE(fn);
  HostTensor c = rand(f32(), {1, 4096, 16, 1}), u = rand(f32(), {1, 1, 16, 1});
  EvaluateOptions cacheOnce;
  cacheOnce.max_host_bytes = tensorBytes + 16 * 8 + 8;
  out = Evaluate(fn, {c, u, scalar(i64(), 7)}, cacheOnce);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].data[7 * 16 + 3], u.data[3]);
  EXPECT_EQ((*out)[0].data[8 * 16 + 3], c.data[8 * 16 + 3]);
}

// The work budget: matmul and attention multiply-adds (MultiplyAdds), summed
// over the evaluation and checked before an op's loops run. The fuzzer found
// graphs of little memory that ran for minutes (a causal attention at 65,536
// positions, 4096^3 matmuls): each is an error naming the op now, at once.
TEST_F(ReferenceTest, WorkBudgetCountsMatmulAndAttentionMultiplyAdds) {
  func::FuncOp fn = parse(R"mlir(
func.func @f(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %v: tensor<32x4xf32>) -> tensor<8x4xf32> {
  %h = llm.matmul %x, %w : tensor<8x16xf32>, tensor<16x32xf32> -> tensor<8x32xf32>
  %y = llm.matmul %h, %v : tensor<8x32xf32>, tensor<32x4xf32> -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
})mlir");
  ASSERT_TRUE(fn);
  std::vector<double> work;
  fn.walk([&](Operation *op) { work.push_back(MultiplyAdds(op)); });
  // matmul, matmul, return (the walk visits the function last).
  ASSERT_EQ(work.size(), 4u);
  EXPECT_EQ(work[0], 8.0 * 32 * 16);
  EXPECT_EQ(work[1], 8.0 * 4 * 32);
  EXPECT_EQ(work[2], 0.0);
  std::vector<HostTensor> in = {rand(f32(), {8, 16}), rand(f32(), {16, 32}),
                                rand(f32(), {32, 4})};
  EvaluateOptions exact;
  exact.max_multiply_adds = 8.0 * 32 * 16 + 8.0 * 4 * 32;
  EXPECT_TRUE(Evaluate(fn, in, exact).ok());
  EvaluateOptions less;
  less.max_multiply_adds = exact.max_multiply_adds - 1;
  absl::Status s = Evaluate(fn, in, less).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // The second matmul is the one over: the first already spent 4096.
  EXPECT_TRUE(contains(s, "'llm.matmul' at ")) << s;
  EXPECT_TRUE(contains(s, "needs 1.02e+03 multiply-adds but 1.02e+03 are left "
                          "of the reference executor's work budget of 5.12e+03"))
      << s;

  // Attention: 2 x B x Hq x Sq x Skv x D, counted from the shapes it runs
  // (dynamic here: MultiplyAdds cannot say).
  fn = parse(R"mlir(
func.func @f(%q: tensor<1x?x2x8xf32>, %k: tensor<1x?x1x8xf32>, %v: tensor<1x?x1x8xf32>) -> tensor<1x?x2x8xf32> {
  %o = llm.attention %q, %k, %v {causal} : tensor<1x?x2x8xf32>, tensor<1x?x1x8xf32>, tensor<1x?x1x8xf32>
  return %o : tensor<1x?x2x8xf32>
})mlir");
  ASSERT_TRUE(fn);
  Operation *attn = &fn.getBody().front().front();
  EXPECT_EQ(MultiplyAdds(attn), -1.0);
  std::vector<HostTensor> qkv = {rand(f32(), {1, 64, 2, 8}), rand(f32(), {1, 64, 1, 8}),
                                 rand(f32(), {1, 64, 1, 8})};
  EvaluateOptions attnBudget;
  attnBudget.max_multiply_adds = 2.0 * 2 * 64 * 64 * 8;
  EXPECT_TRUE(Evaluate(fn, qkv, attnBudget).ok());
  attnBudget.max_multiply_adds -= 1;
  s = Evaluate(fn, qkv, attnBudget).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(contains(s, "'llm.attention' at ")) << s;
}

// Empty tensors whose other dims are large: the rope kernel sized a vector
// from the batch (2^39 int64s: abort) and matmul looped over 2^38 empty
// batch entries (minutes). An op with an empty result returns at once.
TEST_F(ReferenceTest, EmptyTensorsWithLargeDimsFinishAtOnce) {
  auto out = run(R"mlir(
func.func @f(%x: tensor<549755813888x0x1x2xf32>) -> tensor<549755813888x0x1x2xf32> {
  %r = llm.rope %x half_split : tensor<549755813888x0x1x2xf32>
  return %r : tensor<549755813888x0x1x2xf32>
})mlir",
                 {tensor(f32(), {int64_t(1) << 39, 0, 1, 2}, {})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].data.empty());
  out = run(R"mlir(
func.func @f(%a: tensor<274877906944x0x4xf32>, %w: tensor<4x4xf32>) -> tensor<274877906944x0x4xf32> {
  %c = llm.matmul %a, %w : tensor<274877906944x0x4xf32>, tensor<4x4xf32> -> tensor<274877906944x0x4xf32>
  return %c : tensor<274877906944x0x4xf32>
})mlir",
            {tensor(f32(), {int64_t(1) << 38, 0, 4}, {}), rand(f32(), {4, 4})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].data.empty());
}

} // namespace

/// Rows first .. first + n - 1 of a packed attention's [T, Hq, D] result
/// equal the dense [1, n, Hq, D] attention of sequence `b` alone.
static void expectRowsEqual(const std::vector<HostTensor> &packed, int64_t first, int64_t n,
                            const std::vector<HostTensor> &dense, size_t b) {
  ASSERT_EQ(packed.size(), 1u);
  ASSERT_EQ(dense.size(), 1u);
  const int64_t row = packed[0].shape[1] * packed[0].shape[2];
  std::vector<double> got(packed[0].data.begin() + first * row,
                          packed[0].data.begin() + (first + n) * row);
  EXPECT_LT(maxAbsDiff(got, dense[0].data), 1e-6) << "sequence " << b;
}

namespace {
/// The page row of key position j of sequence b.
int64_t slotOf(const std::vector<double> &table, int64_t b, int64_t j, int64_t pageSize,
               int64_t maxPages) {
  return static_cast<int64_t>(table[b * maxPages + j / pageSize]) * pageSize + j % pageSize;
}

/// Sequences' keys and values in a paged KV cache as a page pool would
/// leave them: pages of `pageSize` keys handed out in a shuffled order.
class PagedReferenceTest : public ReferenceTest {
protected:
  struct PagedKV {
    /// Each sequence's dense keys and values, [1, len, Hkv, D].
    std::vector<HostTensor> ks, vs;
    /// [P, pageSize, Hkv, D]: rows no sequence holds are NaN.
    HostTensor kp, vp;
    /// [B, maxPages]: pages for lens[b] keys, -1 past them.
    std::vector<double> table;
  };
  /// Random K/V of lens[b] keys per sequence; pages hold the first
  /// stored[b] of them.
  PagedKV scatterIntoPages(const std::vector<int64_t> &lens, const std::vector<int64_t> &stored,
                           int64_t Hkv, int64_t D, int64_t pageSize, int64_t P,
                           int64_t maxPages) {
    const int64_t B = static_cast<int64_t>(lens.size()), row = Hkv * D;
    std::vector<int64_t> order(P);
    for (int64_t i = 0; i < P; ++i)
      order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    PagedKV c;
    c.kp = tensor(f32(), {P, pageSize, Hkv, D}, std::vector<double>(P * pageSize * row, NAN));
    c.vp = c.kp;
    c.table.assign(B * maxPages, -1.0);
    int64_t next = 0;
    for (int64_t b = 0; b < B; ++b) {
      c.ks.push_back(rand(f32(), {1, lens[b], Hkv, D}));
      c.vs.push_back(rand(f32(), {1, lens[b], Hkv, D}));
      for (int64_t p = 0; p * pageSize < lens[b]; ++p)
        c.table[b * maxPages + p] = static_cast<double>(order[next++]);
      for (int64_t j = 0; j < stored[b]; ++j) {
        int64_t slot = slotOf(c.table, b, j, pageSize, maxPages);
        std::copy_n(c.ks[b].data.begin() + j * row, row, c.kp.data.begin() + slot * row);
        std::copy_n(c.vs[b].data.begin() + j * row, row, c.vp.data.begin() + slot * row);
      }
    }
    return c;
  }

  /// Each sequence's rows of the packed attention `packed` [T, Hq, D] (the
  /// queries `q`, sequence b's n = news[b] rows from cu[b]) against
  /// llm.attention of that sequence alone over its lens[b] dense keys and
  /// values ks[b], vs[b] [1, len, Hkv, D].
  void expectEqualsDenseAttention(const HostTensor &packed, const HostTensor &q,
                                  const std::vector<double> &cu,
                                  const std::vector<int64_t> &news,
                                  const std::vector<int64_t> &lens,
                                  const std::vector<HostTensor> &ks,
                                  const std::vector<HostTensor> &vs, bool causal) {
    const int64_t Hq = q.shape[1], D = q.shape[2], Hkv = ks[0].shape[2];
    for (size_t b = 0; b < lens.size(); ++b) {
      const int64_t n = news[b], first = static_cast<int64_t>(cu[b]);
      HostTensor qb = tensor(f32(), {1, n, Hq, D},
                             std::vector<double>(q.data.begin() + first * Hq * D,
                                                 q.data.begin() + (first + n) * Hq * D));
      auto dense = run(attentionSrc(1, n, lens[b], Hq, Hkv, D, "f32", causal, false),
                       {qb, ks[b], vs[b], scalar(i64(), lens[b])});
      expectRowsEqual({packed}, first, n, dense, b);
    }
  }
};

} // namespace

// llm.paged_attention (issue 19) against llm.attention of each sequence
// alone: three sequences (decode, chunked prefill) over pages of 4 keys put
// in a shuffled order, lengths that end inside a page, GQA, causal and not.
// Unused pages hold NaN and block-table entries past a sequence's length are
// -1: neither is read.
TEST_F(PagedReferenceTest, PagedAttentionEqualsDenseAttentionWithShuffledPages) {
  const int64_t Hq = 4, Hkv = 2, D = 8, pageSize = 4, P = 12, maxPages = 5;
  const std::vector<int64_t> lens = {7, 1, 13}, news = {3, 1, 5};
  const int64_t B = 3, T = 9;
  PagedKV c = scatterIntoPages(lens, lens, Hkv, D, pageSize, P, maxPages);
  const std::vector<HostTensor> &ks = c.ks, &vs = c.vs;
  const HostTensor &kp = c.kp, &vp = c.vp;
  const std::vector<double> &table = c.table;
  std::vector<double> cu = {0}, lensD;
  for (int64_t b = 0; b < B; ++b) {
    cu.push_back(cu.back() + static_cast<double>(news[b]));
    lensD.push_back(static_cast<double>(lens[b]));
  }
  HostTensor q = rand(f32(), {T, Hq, D});
  const std::string types = "tensor<9x4x8xf32>, tensor<12x4x2x8xf32>, tensor<12x4x2x8xf32>, "
                            "tensor<3x5xi32>, tensor<4xi32>, tensor<3xi32>";
  auto source = [&](bool causal) {
    return "func.func @f(%q: tensor<9x4x8xf32>, %kp: tensor<12x4x2x8xf32>, "
           "%vp: tensor<12x4x2x8xf32>, %bt: tensor<3x5xi32>, %cu: tensor<4xi32>, "
           "%lens: tensor<3xi32>) -> tensor<9x4x8xf32> {\n"
           "  %o = llm.paged_attention %q, %kp, %vp, %bt, %cu, %lens " +
           std::string(causal ? "{causal} " : "") + ": " + types +
           "\n  return %o : tensor<9x4x8xf32>\n}";
  };
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    auto paged = run(source(causal), {q, kp, vp, tensor(i32(), {B, maxPages}, table),
                           tensor(i32(), {B + 1}, cu), tensor(i32(), {B}, lensD)});
    ASSERT_EQ(paged.size(), 1u);
    ASSERT_TRUE(allFinite(paged[0]));
    expectEqualsDenseAttention(paged[0], q, cu, news, lens, ks, vs, causal);
  }
  // Run-time errors name the op and the sequence.
  const std::string bad = source(false);
  std::vector<double> badTable = table;
  badTable[2 * maxPages + 3] = 12;  // sequence 2's fourth page
  absl::Status st = runStatus(bad, {q, kp, vp, tensor(i32(), {B, maxPages}, badTable),
                                    tensor(i32(), {B + 1}, cu), tensor(i32(), {B}, lensD)});
  EXPECT_NE(st.message().find("sequence 2 reads page 12 (block_table[2, 3]), outside [0, 12)"),
            std::string::npos) << st;
  std::vector<double> badLens = lensD;
  badLens[0] = 2;  // 3 new tokens
  st = runStatus(bad, {q, kp, vp, tensor(i32(), {B, maxPages}, table),
                       tensor(i32(), {B + 1}, cu), tensor(i32(), {B}, badLens)});
  EXPECT_NE(st.message().find("sequence 0: 3 new token(s) and seq_len 2"), std::string::npos)
      << st;
  std::vector<double> badCu = {0, 3, 4, 8};
  st = runStatus(bad, {q, kp, vp, tensor(i32(), {B, maxPages}, table),
                       tensor(i32(), {B + 1}, badCu), tensor(i32(), {B}, lensD)});
  EXPECT_NE(st.message().find("cu_seqlens_q must run from 0 to T = 9"), std::string::npos) << st;
}

// llm.paged_kv_append then llm.paged_attention, one layer's serving step
// (issue 19): the pages hold each sequence's earlier keys; the step appends
// its new tokens' K and V (decode: 1, chunked prefill: several, one that
// crosses a page boundary, one that starts a fresh page) and attends over
// them. The attention equals llm.attention over the whole sequence, and the
// pages equal the old ones with exactly the new rows written (NaN rows
// untouched).
TEST_F(PagedReferenceTest, PagedAppendThenAttentionEqualsDenseAttention) {
  const int64_t Hq = 6, Hkv = 2, D = 8, pageSize = 4, P = 16, maxPages = 6;
  const std::vector<int64_t> lens = {9, 1, 14, 8}, news = {1, 1, 5, 4};
  const int64_t B = 4, T = 11, row = Hkv * D;
  std::vector<int64_t> stored;
  for (int64_t b = 0; b < B; ++b)
    stored.push_back(lens[b] - news[b]);
  PagedKV c = scatterIntoPages(lens, stored, Hkv, D, pageSize, P, maxPages);
  // The new tokens' K and V, packed by sequence.
  std::vector<double> cu = {0}, lensD, kNew, vNew;
  for (int64_t b = 0; b < B; ++b) {
    cu.push_back(cu.back() + static_cast<double>(news[b]));
    lensD.push_back(static_cast<double>(lens[b]));
    kNew.insert(kNew.end(), c.ks[b].data.begin() + stored[b] * row, c.ks[b].data.end());
    vNew.insert(vNew.end(), c.vs[b].data.begin() + stored[b] * row, c.vs[b].data.end());
  }
  HostTensor q = rand(f32(), {T, Hq, D});
  const std::string src =
      "func.func @f(%q: tensor<11x6x8xf32>, %k: tensor<11x2x8xf32>, %v: tensor<11x2x8xf32>, "
      "%kp: tensor<16x4x2x8xf32>, %vp: tensor<16x4x2x8xf32>, %bt: tensor<4x6xi32>, "
      "%cu: tensor<5xi32>, %lens: tensor<4xi32>) -> (tensor<11x6x8xf32>, tensor<16x4x2x8xf32>, "
      "tensor<16x4x2x8xf32>) {\n"
      "  %kp2 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens : tensor<16x4x2x8xf32>, "
      "tensor<11x2x8xf32>, tensor<4x6xi32>, tensor<5xi32>, tensor<4xi32>\n"
      "  %vp2 = llm.paged_kv_append %vp, %v, %bt, %cu, %lens : tensor<16x4x2x8xf32>, "
      "tensor<11x2x8xf32>, tensor<4x6xi32>, tensor<5xi32>, tensor<4xi32>\n"
      "  %o = llm.paged_attention %q, %kp2, %vp2, %bt, %cu, %lens {causal} : "
      "tensor<11x6x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<4x6xi32>, "
      "tensor<5xi32>, tensor<4xi32>\n"
      "  return %o, %kp2, %vp2 : tensor<11x6x8xf32>, tensor<16x4x2x8xf32>, "
      "tensor<16x4x2x8xf32>\n}";
  auto inputs = [&](const std::vector<double> &table) {
    return std::vector<HostTensor>{q, tensor(f32(), {T, Hkv, D}, kNew),
                                   tensor(f32(), {T, Hkv, D}, vNew), c.kp, c.vp,
                                   tensor(i32(), {B, maxPages}, table),
                                   tensor(i32(), {B + 1}, cu), tensor(i32(), {B}, lensD)};
  };
  auto out = run(src, inputs(c.table));
  ASSERT_EQ(out.size(), 3u);
  ASSERT_TRUE(allFinite(out[0]));
  expectEqualsDenseAttention(out[0], q, cu, news, lens, c.ks, c.vs, /*causal=*/true);
  // The pages: the old ones with the new rows written, bit for bit.
  for (auto [pages, old, dense] : {std::tuple{&out[1], &c.kp, &c.ks}, {&out[2], &c.vp, &c.vs}}) {
    std::vector<double> want = old->data;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = stored[b]; j < lens[b]; ++j)
        std::copy_n((*dense)[b].data.begin() + j * row, row,
                    want.begin() + slotOf(c.table, b, j, pageSize, maxPages) * row);
    ASSERT_EQ(pages->data.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_TRUE(std::isnan(want[i]) ? std::isnan(pages->data[i]) : pages->data[i] == want[i])
          << "element " << i;
  }
  // Two sequences appending into one shared page is an error naming both.
  std::vector<double> shared = c.table;
  shared[1 * maxPages + 0] = shared[0 * maxPages + 2];  // sequence 1's page 0 = 0's page 2
  absl::Status st = runStatus(src, inputs(shared));
  EXPECT_NE(st.message().find("sequences 0 and 1 both write row 0 of page"), std::string::npos)
      << st;
  EXPECT_NE(st.message().find("llm.paged_kv_append"), std::string::npos) << st;
}

// An fp8 KV cache (issue 20): llm.paged_kv_append quantizes the new tokens'
// f32 K/V into e4m3 pages as k / scale[h] (one scale per KV head),
// llm.paged_attention reads the pages times the scales. The attention equals
// llm.attention over what the cache holds (every key, old and new, as
// e4m3(k / scale) * scale), and the pages hold exactly e4m3(k / scale) in the
// new rows. Scales are powers of two so that the dequantized keys are exact
// f32 inputs of the dense attention.
TEST_F(PagedReferenceTest, Fp8PagedAppendThenAttentionEqualsDenseAttentionOfTheCache) {
  const int64_t Hq = 4, Hkv = 2, D = 8, pageSize = 4, P = 12, maxPages = 5;
  const std::vector<int64_t> lens = {9, 1, 6}, news = {1, 1, 4};
  const int64_t B = 3, T = 6, row = Hkv * D;
  const std::vector<double> kScale = {1.0 / 32, 1.0 / 8}, vScale = {1.0 / 64, 1.0 / 4};
  std::vector<int64_t> stored;
  for (int64_t b = 0; b < B; ++b)
    stored.push_back(lens[b] - news[b]);
  PagedKV c = scatterIntoPages(lens, stored, Hkv, D, pageSize, P, maxPages);
  // Old rows as the cache holds them, e4m3(k / scale); the dense K/V as
  // attention reads them, e4m3(k / scale) * scale.
  auto quantize = [&](double x, int64_t e, const std::vector<double> &scale) {
    return RoundToType(x / scale[e / D], e4m3());
  };
  std::vector<double> cu = {0}, lensD, kNew, vNew;
  std::vector<HostTensor> kDense, vDense;
  for (int64_t b = 0; b < B; ++b) {
    cu.push_back(cu.back() + static_cast<double>(news[b]));
    lensD.push_back(static_cast<double>(lens[b]));
    kNew.insert(kNew.end(), c.ks[b].data.begin() + stored[b] * row, c.ks[b].data.end());
    vNew.insert(vNew.end(), c.vs[b].data.begin() + stored[b] * row, c.vs[b].data.end());
    HostTensor kd = c.ks[b], vd = c.vs[b];
    for (int64_t j = 0; j < lens[b]; ++j)
      for (int64_t e = 0; e < row; ++e) {
        const double qk = quantize(c.ks[b].data[j * row + e], e, kScale),
                     qv = quantize(c.vs[b].data[j * row + e], e, vScale);
        kd.data[j * row + e] = qk * kScale[e / D];
        vd.data[j * row + e] = qv * vScale[e / D];
        if (j < stored[b]) {
          const int64_t slot = slotOf(c.table, b, j, pageSize, maxPages);
          c.kp.data[slot * row + e] = qk;
          c.vp.data[slot * row + e] = qv;
        }
      }
    kDense.push_back(std::move(kd));
    vDense.push_back(std::move(vd));
  }
  c.kp.elementType = c.vp.elementType = e4m3();
  HostTensor q = rand(f32(), {T, Hq, D});
  const std::string pages = "tensor<12x4x2x8xf8E4M3FN>";
  const std::string src =
      "func.func @f(%q: tensor<6x4x8xf32>, %k: tensor<6x2x8xf32>, %v: tensor<6x2x8xf32>, "
      "%kp: " + pages + ", %vp: " + pages + ", %bt: tensor<3x5xi32>, %cu: tensor<4xi32>, "
      "%lens: tensor<3xi32>, %ks: tensor<2xf32>, %vs: tensor<2xf32>) -> (tensor<6x4x8xf32>, " +
      pages + ", " + pages + ") {\n"
      "  %kp2 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens scale %ks : " + pages +
      ", tensor<6x2x8xf32>, tensor<3x5xi32>, tensor<4xi32>, tensor<3xi32>, tensor<2xf32>\n"
      "  %vp2 = llm.paged_kv_append %vp, %v, %bt, %cu, %lens scale %vs : " + pages +
      ", tensor<6x2x8xf32>, tensor<3x5xi32>, tensor<4xi32>, tensor<3xi32>, tensor<2xf32>\n"
      "  %o = llm.paged_attention %q, %kp2, %vp2, %bt, %cu, %lens scales(%ks, %vs) {causal} : "
      "tensor<6x4x8xf32>, " + pages + ", " + pages + ", tensor<3x5xi32>, tensor<4xi32>, "
      "tensor<3xi32>, tensor<2xf32>, tensor<2xf32>\n"
      "  return %o, %kp2, %vp2 : tensor<6x4x8xf32>, " + pages + ", " + pages + "\n}";
  auto out = run(src, {q, tensor(f32(), {T, Hkv, D}, kNew), tensor(f32(), {T, Hkv, D}, vNew),
                       c.kp, c.vp, tensor(i32(), {B, maxPages}, c.table),
                       tensor(i32(), {B + 1}, cu), tensor(i32(), {B}, lensD),
                       tensor(f32(), {Hkv}, kScale), tensor(f32(), {Hkv}, vScale)});
  ASSERT_EQ(out.size(), 3u);
  ASSERT_TRUE(allFinite(out[0]));
  expectEqualsDenseAttention(out[0], q, cu, news, lens, kDense, vDense, /*causal=*/true);
  // The new rows of the pages: exactly e4m3(k / scale).
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = stored[b]; j < lens[b]; ++j)
      for (int64_t e = 0; e < row; ++e) {
        const int64_t at = slotOf(c.table, b, j, pageSize, maxPages) * row + e;
        ASSERT_EQ(out[1].data[at], quantize(c.ks[b].data[j * row + e], e, kScale)) << b << " " << j;
        ASSERT_EQ(out[2].data[at], quantize(c.vs[b].data[j * row + e], e, vScale)) << b << " " << j;
      }
}

// The quotient update / scale[h] of an fp8 paged append is an f32 division,
// as in the append kernel, in torch's `(x.float() / scale).to(fp8)` and in
// llm.div + llm.cast. 1.5 / 0.05f is 30.0 in f32, a tie between the e5m2
// values 28 and 32 (even: 32); the float64 quotient 29.9999996 rounds to 28.
// (Found by a hostile-input review: the reference stored 28 where the
// kernel stores 32, and a serving step's logits differed by 3%.)
TEST_F(ReferenceTest, Fp8PagedAppendDividesInF32) {
  const float s = 0.05f;
  ASSERT_EQ(RoundToType(1.5 / static_cast<double>(s), e5m2()), 28.0);
  const std::vector<double> x = {1.5, 1, .5, 3, -1, .75, 2.5, 5, .3, .7, 1.1, 1.3, .9, 2, 4, 6};
  std::vector<double> update;
  for (double v : x)
    update.push_back(RoundToType(v, f32()));
  const std::string pages = "tensor<2x4x1x16xf8E5M2>";
  const std::string src =
      "func.func @f(%kp: " + pages + ", %k: tensor<1x1x16xf32>, %bt: tensor<1x1xi32>, "
      "%cu: tensor<2xi32>, %lens: tensor<1xi32>, %s: tensor<1xf32>) -> " + pages + " {\n"
      "  %kp2 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens scale %s : " + pages +
      ", tensor<1x1x16xf32>, tensor<1x1xi32>, tensor<2xi32>, tensor<1xi32>, tensor<1xf32>\n"
      "  return %kp2 : " + pages + "\n}";
  auto out = run(src, {tensor(e5m2(), {2, 4, 1, 16}, std::vector<double>(128, 0.0)),
                       tensor(f32(), {1, 1, 16}, update), tensor(i32(), {1, 1}, {1}),
                       tensor(i32(), {2}, {0, 1}), tensor(i32(), {1}, {1}),
                       tensor(f32(), {1}, {static_cast<double>(s)})});
  ASSERT_EQ(out.size(), 1u);
  const int64_t at = 1 * 4 * 16;  // page 1, slot 0
  EXPECT_EQ(out[0].data[at], 32.0);
  for (int64_t e = 0; e < 16; ++e)
    EXPECT_EQ(out[0].data[at + e],
              RoundToType(static_cast<float>(update[e]) / s, e5m2()))
        << "element " << e;
}

// A tensor of e5m2 may hold +-inf (0x7c, 0xfc), which torch's
// `x.to(torch.float8_e5m2)` produces; e4m3fn has no infinity.
TEST_F(ReferenceTest, E5m2InputsMayHoldInfinities) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::string src =
      "func.func @f(%a: tensor<3xf8E5M2>) -> tensor<3xf32> {\n"
      "  %b = llm.cast %a : tensor<3xf8E5M2> to tensor<3xf32>\n"
      "  return %b : tensor<3xf32>\n}";
  auto out = run(src, {tensor(e5m2(), {3}, {inf, -inf, 1.0})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data[0], inf);
  EXPECT_EQ(out[0].data[1], -inf);
  EXPECT_EQ(out[0].data[2], 1.0);
  mlir::func::FuncOp fn = parse(
      "func.func @g(%a: tensor<2xf8E4M3FN>) -> tensor<2xf8E4M3FN> {\n"
      "  return %a : tensor<2xf8E4M3FN>\n}");
  ASSERT_TRUE(fn);
  auto st = Evaluate(fn, {tensor(e4m3(), {2}, {inf, 1.0})});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("not representable in f8E4M3FN"), std::string::npos)
      << st.status();
}

// llm.varlen_attention (issue 19) against llm.attention of each sequence
// alone: packed sequences with as many queries as keys (training, prefill),
// fewer (a chunk after a cached prefix), more (causal rows that see no key
// give zeros) and none, GQA, causal and not.
TEST_F(ReferenceTest, VarlenAttentionEqualsPerSequenceAttention) {
  const int64_t Hq = 6, Hkv = 3, D = 8;
  const std::vector<int64_t> ns = {5, 3, 0, 4, 1}, ms = {5, 7, 0, 2, 9};
  std::vector<double> cuq = {0}, cuk = {0};
  for (size_t b = 0; b < ns.size(); ++b) {
    cuq.push_back(cuq.back() + static_cast<double>(ns[b]));
    cuk.push_back(cuk.back() + static_cast<double>(ms[b]));
  }
  const int64_t T = static_cast<int64_t>(cuq.back()), Tk = static_cast<int64_t>(cuk.back());
  const int64_t B1 = static_cast<int64_t>(cuq.size());
  ASSERT_EQ(T, 13);
  ASSERT_EQ(Tk, 23);
  HostTensor q = rand(f32(), {T, Hq, D}), k = rand(f32(), {Tk, Hkv, D}),
             v = rand(f32(), {Tk, Hkv, D});
  auto slice = [&](const HostTensor &t, int64_t from, int64_t rows, int64_t heads) {
    return tensor(f32(), {1, rows, heads, D},
                  std::vector<double>(t.data.begin() + from * heads * D,
                                      t.data.begin() + (from + rows) * heads * D));
  };
  auto source = [](bool causal) {
    return "func.func @f(%q: tensor<13x6x8xf32>, %k: tensor<23x3x8xf32>, "
           "%v: tensor<23x3x8xf32>, %cuq: tensor<6xi64>, %cuk: tensor<6xi64>) -> "
           "tensor<13x6x8xf32> {\n  %o = llm.varlen_attention %q, %k, %v, %cuq, %cuk " +
           std::string(causal ? "{causal} " : "") +
           ": tensor<13x6x8xf32>, tensor<23x3x8xf32>, tensor<23x3x8xf32>, tensor<6xi64>, "
           "tensor<6xi64>\n  return %o : tensor<13x6x8xf32>\n}";
  };
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    auto packed = run(source(causal), {q, k, v, tensor(i64(), {B1}, cuq), tensor(i64(), {B1}, cuk)});
    ASSERT_EQ(packed.size(), 1u);
    ASSERT_TRUE(allFinite(packed[0]));
    for (size_t b = 0; b < ns.size(); ++b) {
      const int64_t n = ns[b], m = ms[b], first = static_cast<int64_t>(cuq[b]);
      if (n == 0)
        continue;
      auto dense = run(attentionSrc(1, n, m, Hq, Hkv, D, "f32", causal, false),
                       {slice(q, first, n, Hq), slice(k, static_cast<int64_t>(cuk[b]), m, Hkv),
                        slice(v, static_cast<int64_t>(cuk[b]), m, Hkv), scalar(i64(), m)});
      expectRowsEqual(packed, first, n, dense, b);
    }
  }
  // Offsets that decrease are an error naming the sequence.
  std::vector<double> bad = {0, 5, 4, 8, 12, 23};
  absl::Status st = runStatus(source(false), {q, k, v, tensor(i64(), {B1}, cuq), tensor(i64(), {B1}, bad)});
  EXPECT_NE(st.message().find("cu_seqlens_k decreases at sequence 1 (5 then 4)"),
            std::string::npos) << st;
}
