//===- ReferenceTest.cpp - sanity of the CPU references and fp8 encoder ----===//
#include "CpuReference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace llmc::ref;

// The software fp8 path (sm_80) must be RNE + satfinite and round-trip every
// finite code.
TEST(Fp8Software, E4M3RoundTripAndRounding) {
  for (int c = 0; c < 256; ++c) {
    const float f = FromE4M3(static_cast<uint8_t>(c));
    if (std::isnan(f)) {
      EXPECT_EQ(ToE4M3(f) & 0x7f, 0x7f);
      continue;
    }
    if (c == 0x80) {  // -0
      EXPECT_EQ(ToE4M3(f), 0x80);
      continue;
    }
    EXPECT_EQ(ToE4M3(f), c) << c;
    // Halfway to the next code rounds to the even code.
    const int next = c + 1;
    if ((c & 0x7f) < 0x7e) {
      const float g = FromE4M3(static_cast<uint8_t>(next));
      const float mid = 0.5f * (f + g);
      const int even = (c & 1) == 0 ? c : next;
      EXPECT_EQ(ToE4M3(mid), even) << c;
    }
  }
  EXPECT_EQ(ToE4M3(448.0f), 0x7e);
  EXPECT_EQ(ToE4M3(1e9f), 0x7e);     // saturate
  EXPECT_EQ(ToE4M3(-INFINITY), 0xfe);
  EXPECT_EQ(ToE4M3(470.0f), 0x7e);
  EXPECT_FLOAT_EQ(FromE4M3(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(ToE4M3(std::ldexp(1.0f, -10)), 0x00);  // tie to even (0)
  EXPECT_EQ(ToE4M3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 * 2^-9 -> 2 (even)
}

TEST(Fp8Software, E5M2RoundTrip) {
  for (int c = 0; c < 256; ++c) {
    const float f = FromE5M2(static_cast<uint8_t>(c));
    if (std::isnan(f) || std::isinf(f) || c == 0x80) continue;
    EXPECT_EQ(ToE5M2(f), c) << c;
  }
  EXPECT_EQ(ToE5M2(57344.0f), 0x7b);
  EXPECT_EQ(ToE5M2(INFINITY), 0x7b);  // satfinite
  EXPECT_EQ(ToE5M2(1e30f), 0x7b);
}

TEST(Bf16, RoundNearestEven) {
  EXPECT_EQ(ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(ToBf16(FromBits(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(ToBf16(FromBits(0x3f818000u)), 0x3f82);
  EXPECT_EQ(RoundBf16(33554433.0f), 33554432.0f);    // 2^25 + 1 not representable
}

TEST(Reference, RMSNormOfConstantRowIsWeight) {
  const int64_t n = 200;
  std::vector<float> x(n, 3.0f), w(n), out;
  for (int64_t j = 0; j < n; ++j) w[j] = 0.01f * j;
  NormRef(false, x, nullptr, &w, nullptr, 1, n, 0.0f, [](float v) { return v; }, &out, nullptr);
  for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(out[j], w[j], 1e-6);
}

TEST(Reference, LayerNormZeroMeanUnitVar) {
  const int64_t n = 4096;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(5.0f, 300.0f);
  std::vector<float> x(n), out, res_out, r(n, 0.0f);
  for (auto &v : x) v = nd(rng);
  NormRef(true, x, &r, nullptr, nullptr, 1, n, 1e-5f, [](float v) { return v; }, &out, &res_out);
  double m = 0, s = 0;
  for (float v : out) m += v;
  for (float v : out) s += v * v;
  EXPECT_NEAR(m / n, 0.0, 1e-5);
  EXPECT_NEAR(s / n, 1.0, 1e-4);
  EXPECT_EQ(res_out, x);
}

TEST(Reference, SoftmaxAllMaskedIsNaN) {
  std::vector<float> x = {1, 2, 3, -INFINITY, -INFINITY, -INFINITY};
  auto y = SoftmaxRef(x, nullptr, 2, 3, 1, 1.0f);
  EXPECT_NEAR(y[0] + y[1] + y[2], 1.0, 1e-6);
  EXPECT_TRUE(std::isnan(y[3]));
  std::vector<float> mask = {0, -INFINITY, 0};
  y = SoftmaxRef(x, &mask, 1, 3, 1, 2.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_NEAR(y[2] / y[0], std::exp(4.0), 1e-3);
}

TEST(Reference, RoPEIdentityAtPositionZeroAndNormPreserving) {
  const int64_t B = 2, S = 3, H = 2, D = 80;
  std::vector<float> x(B * S * H * D);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  for (auto &v : x) v = nd(rng);
  for (bool inter : {false, true}) {
    auto y = RoPERef(x, B, S, H, D, D, inter, 10000.0f, {0, 299});
    for (int64_t j = 0; j < H * D; ++j) EXPECT_FLOAT_EQ(y[j], x[j]);  // b=0, s=0
    for (int64_t t = 0; t < B * S * H; ++t) {
      double n0 = 0, n1 = 0;
      for (int64_t d = 0; d < D; ++d) {
        n0 += x[t * D + d] * x[t * D + d];
        n1 += y[t * D + d] * y[t * D + d];
      }
      EXPECT_NEAR(n0, n1, 1e-3 * n0);
    }
  }
  // half-split: pair (0, D/2) at position 1 rotates by angle 1 (inv_freq_0 = 1)
  std::vector<float> e(2 * D, 0.0f);
  e[D + 0] = 1.0f;  // token at position 1
  auto y = RoPERef(e, 1, 2, 1, D, D, false, 10000.0f, {});
  EXPECT_NEAR(y[D + 0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[D + D / 2], std::sin(1.0), 1e-6);
}

TEST(Reference, AttentionCausalAndGQA) {
  const int64_t B = 1, S = 4, Hq = 6, Hkv = 2, D = 8;
  std::vector<float> q(B * S * Hq * D), k(B * S * Hkv * D), v(B * S * Hkv * D);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (auto *t : {&q, &k, &v})
    for (auto &x : *t) x = nd(rng);
  auto o = AttentionRef(q, k, v, nullptr, B, S, S, S, Hq, Hkv, D, true, 0.35f);
  // Row 0 sees only key 0: output = v[0] of the kv head h / 3.
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t d = 0; d < D; ++d) EXPECT_NEAR(o[h * D + d], v[(h / 3) * D + d], 1e-6);
  // Decode-style: 1 query against 4 keys, causal with bottom-right alignment sees all.
  std::vector<float> q1(q.begin(), q.begin() + Hq * D);
  auto a = AttentionRef(q1, k, v, nullptr, 1, 1, S, S, Hq, Hkv, D, true, 0.35f);
  auto b = AttentionRef(q1, k, v, nullptr, 1, 1, S, S, Hq, Hkv, D, false, 0.35f);
  EXPECT_EQ(a, b);
}

TEST(Reference, LongSumsAccumulateInWideTypes) {
  std::vector<float> x(1 << 20, 0.5f);
  auto y = RowReduceRef(x, 1, x.size(), Reduce::mean);
  EXPECT_FLOAT_EQ(y[0], 0.5f);
  x[7] = NAN;
  y = RowReduceRef(x, 1, x.size(), Reduce::max);
  EXPECT_TRUE(std::isnan(y[0]));
}
