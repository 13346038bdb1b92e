//===- EmuAttentionBackwardTest.cpp - FlashAttention-2 backward on the emulator ===//
//
// The training forward (EmitAttention with write_lse) and the three
// backward kernels (EmitAttentionBackward) run on the CPU emulator on bf16
// inputs and are compared with a float64 reference of softmax attention and
// its gradients on the same (bf16-rounded) values: lse within 1e-5 relative,
// dQ, dK, dV within bf16's 1e-2 relative L2 error. GQA groups 1/2/3, causal
// (bottom-right, Sq != Skv) and not, partial tiles, rows that see no key.
//
//===----------------------------------------------------------------------===//

#include "CpuReference.h"
#include "EmuSupport.h"
#include "GeneratorStatus.h"
#include "llmc/Target/CUDA/KernelLibrary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

using namespace llmc::cuda;
using namespace llmc::test;
using llmc::ref::FromBf16;
using llmc::ref::FromF16;
using llmc::ref::ToBf16;
using llmc::ref::ToF16;

namespace {

const char *kFwdStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, T* out, const T* q, const T* k, const T* v,
                          long long B, long long Sq, long long Skv, int Hq, int Hkv, float scale,
                          float* lse) {
  emu::Launch(g, b, smem, [&] { KERNEL(out, q, k, v, nullptr, B, Sq, Skv, Hq, Hkv, scale, 0, 0, 0, lse); });
}
)";
const char *kPrepStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, float* dsum, float* dq_acc, const T* out,
                          const T* dout, long long rows, long long Sq, int Hq) {
  emu::Launch(g, b, smem, [&] { KERNEL(dsum, dq_acc, out, dout, rows, Sq, Hq); });
}
)";
const char *kMainStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, T* dk, T* dv, float* dq_acc, const T* q,
                          const T* k, const T* v, const T* dout, const float* lse, const float* dsum,
                          long long B, long long Sq, long long Skv, int Hq, int Hkv, float scale) {
  emu::Launch(g, b, smem, [&] { KERNEL(dk, dv, dq_acc, q, k, v, dout, lse, dsum, B, Sq, Skv, Hq, Hkv, scale); });
}
)";
const char *kDqStub = R"(
extern "C" void emu_entry(dim3 g, dim3 b, unsigned smem, T* dq, const float* dq_acc, long long n,
                          float scale) {
  emu::Launch(g, b, smem, [&] { KERNEL(dq, dq_acc, n, scale); });
}
)";

struct BwdCase {
  int64_t d, batch, sq, skv, hq, hkv;
  bool causal;
  // The backward's lse of (b 0, h 0, row 1) set to -inf (no visible key in
  // the op's other convention): that row contributes no gradient.
  bool neg_inf_lse = false;
  bool f16 = false;  // f16 instead of bf16 (the kernels' other mma type)
};

// The 16-bit storage (bf16, or f16 when `f16`) of v; rounds v in place too.
std::vector<uint16_t> Round16(std::vector<float> &v, bool f16) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    r[i] = f16 ? ToF16(v[i]) : ToBf16(v[i]);
    v[i] = f16 ? FromF16(r[i]) : FromBf16(r[i]);
  }
  return r;
}

std::vector<float> From16(const std::vector<uint16_t> &v, bool f16) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = f16 ? FromF16(v[i]) : FromBf16(v[i]);
  return r;
}

double RelL2(const std::vector<float> &got, const std::vector<double> &want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

void RunBackward(const BwdCase &c) {
  if (!HaveCompiler()) GTEST_SKIP() << "no host C++ compiler for the emulator";
  const int64_t B = c.batch, Sq = c.sq, Skv = c.skv, Hq = c.hq, Hkv = c.hkv, D = c.d;
  const int64_t grp = Hq / Hkv, diag = Skv - Sq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  auto q = Randn(B * Sq * Hq * D, 11), k = Randn(B * Skv * Hkv * D, 12), v = Randn(B * Skv * Hkv * D, 13),
       dout = Randn(B * Sq * Hq * D, 14);
  auto qb = Round16(q, c.f16), kb = Round16(k, c.f16), vb = Round16(v, c.f16), dob = Round16(dout, c.f16);
  const ScalarType dtype = c.f16 ? ScalarType::f16 : ScalarType::bf16;
  auto qi = [&](int64_t b, int64_t i, int64_t h) { return ((b * Sq + i) * Hq + h) * D; };
  auto ki = [&](int64_t b, int64_t j, int64_t h) { return ((b * Skv + j) * Hkv + h) * D; };
  auto visible = [&](int64_t i, int64_t j) { return !c.causal || j <= i + diag; };

  // ---- training forward (write_lse) on the emulator ----
  AttentionConfig fc;
  fc.dtype = dtype;
  fc.head_dim = D;
  fc.causal = c.causal;
  fc.write_lse = true;
  const KernelCode fk = Unwrap(EmitAttention(fc));
  using FwdFn = void (*)(Dim3, Dim3, unsigned, void *, const void *, const void *, const void *, long long,
                         long long, long long, int, int, float, float *);
  auto fwd = reinterpret_cast<FwdFn>(BuildEmu(fk, kFwdStub));
  ASSERT_NE(fwd, nullptr);
  std::vector<uint16_t> ob(q.size());
  std::vector<float> lse(B * Hq * Sq, -1.0f);
  const LaunchDims fd = Unwrap(AttentionLaunch(fc, B, Sq, Hq));
  fwd(G(fd), llmc::test::B(fd), fd.smem, ob.data(), qb.data(), kb.data(), vb.data(), B, Sq, Skv, Hq, Hkv, scale,
      lse.data());
  const std::vector<float> o = From16(ob, c.f16);
  // The statistics alone, as llm.attention_logsumexp lowers (out = null, the
  // key standing in for the value): the same lse, bit for bit.
  std::vector<float> lse_only(lse.size(), -1.0f);
  fwd(G(fd), llmc::test::B(fd), fd.smem, nullptr, qb.data(), kb.data(), kb.data(), B, Sq, Skv, Hq, Hkv, scale,
      lse_only.data());
  for (size_t i = 0; i < lse.size(); ++i)
    ASSERT_EQ(std::memcmp(&lse[i], &lse_only[i], 4), 0) << fk.name << " lse-only row " << i << ": "
                                                       << lse_only[i] << " vs " << lse[i];

  // ---- float64 reference: P, lse, then the gradients (O as the kernel rounded it) ----
  std::vector<double> rdq(q.size(), 0.0), rdk(k.size(), 0.0), rdv(v.size(), 0.0);
  std::vector<double> p(Skv);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / grp;
      for (int64_t i = 0; i < Sq; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < Skv; ++j) {
          double s = 0;
          for (int64_t e = 0; e < D; ++e) s += (double)q[qi(b, i, h) + e] * k[ki(b, j, hk) + e];
          p[j] = visible(i, j) ? s * scale : -INFINITY;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < Skv; ++j) sum += p[j] == -INFINITY ? 0.0 : std::exp(p[j] - mx);
        const double want_lse = sum > 0 ? mx + std::log(sum) : INFINITY;
        const float got_lse = lse[(b * Hq + h) * Sq + i];
        if (std::isinf(want_lse))
          EXPECT_TRUE(std::isinf(got_lse) && got_lse > 0) << fk.name << " lse row " << i << ": " << got_lse;
        else
          EXPECT_NEAR(got_lse, want_lse, 1e-5 * std::max(1.0, std::fabs(want_lse))) << fk.name << " lse row " << i;
        if (sum == 0 || (c.neg_inf_lse && b == 0 && h == 0 && i == 1)) continue;
        double dsum = 0;
        for (int64_t e = 0; e < D; ++e) dsum += (double)dout[qi(b, i, h) + e] * o[qi(b, i, h) + e];
        for (int64_t j = 0; j < Skv; ++j) {
          const double pj = p[j] == -INFINITY ? 0.0 : std::exp(p[j] - mx) / sum;
          if (pj == 0) continue;
          double dp = 0;
          for (int64_t e = 0; e < D; ++e) dp += (double)dout[qi(b, i, h) + e] * v[ki(b, j, hk) + e];
          const double ds = pj * (dp - dsum);
          for (int64_t e = 0; e < D; ++e) {
            rdv[ki(b, j, hk) + e] += pj * dout[qi(b, i, h) + e];
            rdq[qi(b, i, h) + e] += scale * ds * k[ki(b, j, hk) + e];
            rdk[ki(b, j, hk) + e] += scale * ds * q[qi(b, i, h) + e];
          }
        }
      }
    }

  // ---- the three backward kernels ----
  AttentionBackwardConfig bc;
  bc.dtype = dtype;
  bc.head_dim = D;
  bc.causal = c.causal;
  const AttentionBackwardKernels bk = Unwrap(EmitAttentionBackward(bc));
  using PrepFn = void (*)(Dim3, Dim3, unsigned, float *, float *, const void *, const void *, long long,
                          long long, int);
  using MainFn = void (*)(Dim3, Dim3, unsigned, void *, void *, float *, const void *, const void *,
                          const void *, const void *, const float *, const float *, long long, long long,
                          long long, int, int, float);
  using DqFn = void (*)(Dim3, Dim3, unsigned, void *, const float *, long long, float);
  auto prep = reinterpret_cast<PrepFn>(BuildEmu(bk.prep, kPrepStub));
  auto mainK = reinterpret_cast<MainFn>(BuildEmu(bk.main, kMainStub));
  auto dqk = reinterpret_cast<DqFn>(BuildEmu(bk.dq, kDqStub));
  ASSERT_TRUE(prep && mainK && dqk);
  if (c.neg_inf_lse) lse[1] = -INFINITY;
  std::vector<float> dsum(B * Hq * Sq, -7.0f), dq_acc(q.size(), 123.0f);  // garbage: prep must set them
  std::vector<uint16_t> dqb(q.size()), dkb(k.size()), dvb(v.size());
  const LaunchDims pd = Unwrap(AttentionBackwardPrepLaunch(B, Sq, Hq));
  prep(G(pd), llmc::test::B(pd), pd.smem, dsum.data(), dq_acc.data(), ob.data(), dob.data(), B * Sq * Hq, Sq, Hq);
  const LaunchDims md = Unwrap(AttentionBackwardLaunch(bc, B, Skv, Hkv));
  EXPECT_EQ(md.smem, AttentionBackwardSmemBytes(bc));
  mainK(G(md), llmc::test::B(md), md.smem, dkb.data(), dvb.data(), dq_acc.data(), qb.data(), kb.data(), vb.data(),
       dob.data(), lse.data(), dsum.data(), B, Sq, Skv, Hq, Hkv, scale);
  const LaunchDims dd = Unwrap(AttentionBackwardDqLaunch((int64_t)q.size()));
  dqk(G(dd), llmc::test::B(dd), dd.smem, dqb.data(), dq_acc.data(), (long long)q.size(), scale);

  const auto dq = From16(dqb, c.f16), dk = From16(dkb, c.f16), dv = From16(dvb, c.f16);
  for (const auto *t : {&dq, &dk, &dv})
    for (float x : *t) ASSERT_TRUE(std::isfinite(x)) << bk.main.name;
  EXPECT_LT(RelL2(dq, rdq), 1e-2) << bk.main.name << " dq";
  EXPECT_LT(RelL2(dk, rdk), 1e-2) << bk.main.name << " dk";
  EXPECT_LT(RelL2(dv, rdv), 1e-2) << bk.main.name << " dv";
}

// {d, batch, sq, skv, hq, hkv, causal}
TEST(EmuAttentionBackward, D64CausalGqa2PartialTiles) { RunBackward({64, 1, 70, 70, 2, 1, true}); }
TEST(EmuAttentionBackward, D128NonCausalSqNeSkv) { RunBackward({128, 1, 17, 70, 2, 2, false}); }
// Sq > Skv causal: the first Sq - Skv rows see no key (lse +inf, no gradient).
TEST(EmuAttentionBackward, D32CausalRowsWithoutKeysGqa3) { RunBackward({32, 2, 40, 23, 3, 1, true}); }
TEST(EmuAttentionBackward, D64CausalSqLtSkv) { RunBackward({64, 1, 9, 130, 1, 1, true}); }
TEST(EmuAttentionBackward, D64NegInfLogSumExpRowHasNoGradient) { RunBackward({64, 1, 20, 20, 2, 1, false, true}); }
TEST(EmuAttentionBackward, D64F16CausalGqa2) { RunBackward({64, 1, 70, 70, 2, 1, true, false, true}); }

TEST(AttentionBackward, SupportedShapesAndErrors) {
  AttentionBackwardConfig c;
  std::string why;
  c.head_dim = 80;
  EXPECT_TRUE(AttentionBackwardSupported(c, &why)) << why;
  c.head_dim = 256;
  EXPECT_FALSE(AttentionBackwardSupported(c, &why));
  EXPECT_NE(why.find("16..128"), std::string::npos) << why;
  c.head_dim = 72;
  EXPECT_FALSE(EmitAttentionBackward(c).ok());
  c.head_dim = 64;
  c.dtype = ScalarType::f32;
  EXPECT_FALSE(AttentionBackwardSupported(c, &why));
  EXPECT_NE(why.find("bf16 or f16"), std::string::npos) << why;
  AttentionConfig f;
  f.dtype = ScalarType::f32;
  f.write_lse = true;
  EXPECT_FALSE(EmitAttention(f).ok());
  // Short-sequence fine-tuning at a large batch: B * Hkv on grid x (up to
  // 2^31 - 1), key tiles on y.
  c.dtype = ScalarType::bf16;
  const LaunchDims big = Unwrap(AttentionBackwardLaunch(c, 8192, 64, 8));
  EXPECT_EQ(big.grid[0], 8192u * 8u);
  EXPECT_EQ(big.grid[1], 1u);
}

} // namespace
