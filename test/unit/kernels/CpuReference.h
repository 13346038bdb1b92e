//===- CpuReference.h - CPU references of the generated kernels' math ------===//
//
// Header-only, float64 accumulation where it matters, meant for GPU tests:
// run the generated kernel, run the reference on the same inputs (converted
// to float), compare with a per-dtype tolerance. Each function documents the
// exact formula the kernel implements. Layouts are the kernels' layouts.
//
//===----------------------------------------------------------------------===//
#ifndef LLMC_TEST_KERNELS_CPUREFERENCE_H
#define LLMC_TEST_KERNELS_CPUREFERENCE_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace llmc::ref {

// ---- storage-type rounding (round to nearest even) ----
inline uint32_t Bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float FromBits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline uint16_t ToBf16(float f) {
  uint32_t u = Bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float FromBf16(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }
inline float RoundBf16(float f) { return FromBf16(ToBf16(f)); }
// f16 through the compiler's _Float16 (round to nearest even), as the
// emulator's fromF<f16> does.
inline uint16_t ToF16(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
inline float FromF16(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

// fp8 decode (e4m3fn: bias 7, no inf, 0x7f = NaN; e5m2: bias 15, IEEE-like).
inline float FromE4M3(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int e = (v >> 3) & 0xf, m = v & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.0f + m / 8.0f, e - 7);
}
inline float FromE5M2(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int e = (v >> 2) & 0x1f, m = v & 3;
  if (e == 31) return m == 0 ? sign * INFINITY : std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -16);
  return sign * std::ldexp(1.0f + m / 4.0f, e - 15);
}
// Bit-exact CPU port of the preamble's software encoder (used below sm_89):
// RNE, satfinite (|x| > max or inf -> +-max), NaN -> 0x7f | sign.
template <int MBITS, int BIAS, uint32_t MAXCODE, uint32_t NANCODE>
inline uint8_t Fp8Encode(float f) {
  const uint32_t bits = Bits(f);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abits = bits & 0x7fffffffu;
  if (abits > 0x7f800000u) return static_cast<uint8_t>(sign | NANCODE);
  const float a = FromBits(abits);
  const float min_normal = FromBits(static_cast<uint32_t>(127 + 1 - BIAS) << 23);
  uint32_t code;
  if (a < min_normal) {
    const float inv_step = FromBits(static_cast<uint32_t>(127 + BIAS - 1 + MBITS) << 23);
    code = static_cast<uint32_t>(std::nearbyint(a * inv_step));
  } else {
    const int shift = 23 - MBITS;
    uint32_t r = abits + ((1u << (shift - 1)) - 1u) + ((abits >> shift) & 1u);
    r >>= shift;
    const uint32_t rebias = static_cast<uint32_t>(127 - BIAS) << MBITS;
    code = (r > rebias + MAXCODE || abits >= 0x7f800000u) ? MAXCODE : r - rebias;
  }
  return static_cast<uint8_t>(sign | code);
}
inline uint8_t ToE4M3(float f) { return Fp8Encode<3, 7, 0x7eu, 0x7fu>(f); }
inline uint8_t ToE5M2(float f) { return Fp8Encode<2, 15, 0x7bu, 0x7fu>(f); }

// ---- RMSNorm / LayerNorm ----
// s = round_in(x + r) when residual is given (written to residual_out);
// RMSNorm:   y = s * 1/sqrt(sum(s^2)/N + eps) * w
// LayerNorm: y = (s - mean) * 1/sqrt(sum((s-mean)^2)/N + eps) * w + b
// round_in: rounding to the input storage type (identity for f32).
template <typename RoundIn>
void NormRef(bool layer_norm, const std::vector<float> &x, const std::vector<float> *residual,
             const std::vector<float> *w, const std::vector<float> *bias, int64_t rows, int64_t n, float eps,
             RoundIn round_in, std::vector<float> *out, std::vector<float> *residual_out) {
  out->assign(rows * n, 0.0f);
  if (residual_out) residual_out->assign(rows * n, 0.0f);
  std::vector<double> s(n);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      float v = x[r * n + j];
      if (residual) v = round_in(v + (*residual)[r * n + j]);
      s[j] = v;
      if (residual_out) (*residual_out)[r * n + j] = v;
    }
    double mean = 0.0, acc = 0.0;
    if (layer_norm) {
      for (double v : s) mean += v;
      mean /= n;
    }
    for (double v : s) acc += (v - mean) * (v - mean);
    const double rstd = 1.0 / std::sqrt(acc / n + eps);
    for (int64_t j = 0; j < n; ++j) {
      double y = (s[j] - mean) * rstd;
      if (w) y *= (*w)[j];
      if (bias) y += (*bias)[j];
      (*out)[r * n + j] = static_cast<float>(y);
    }
  }
}

// ---- softmax: y = exp(z - max z) / sum, z = x*scale + mask[row % mask_rows]; all -inf -> NaN ----
inline std::vector<float> SoftmaxRef(const std::vector<float> &x, const std::vector<float> *mask, int64_t rows,
                                     int64_t n, int64_t mask_rows, float scale) {
  std::vector<float> y(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY;
    std::vector<double> z(n);
    for (int64_t j = 0; j < n; ++j) {
      z[j] = static_cast<double>(x[r * n + j]) * scale + (mask ? (*mask)[(r % mask_rows) * n + j] : 0.0);
      mx = std::fmax(mx, z[j]);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(z[j] - mx);
    for (int64_t j = 0; j < n; ++j)
      y[r * n + j] = std::isinf(mx) && mx < 0 ? NAN : static_cast<float>(std::exp(z[j] - mx) / sum);
  }
  return y;
}

// ---- RoPE on x [B, S, H, D]; offsets: nullptr, one value, or one per batch ----
// inv_freq_i = 1 / theta^(2i/R) (float32), angle = float(s + off) * inv_freq_i (float32),
// half-split pairs (i, i+R/2) or interleaved (2i, 2i+1):
// (a, b) -> (a cos - b sin, b cos + a sin); dims >= R copied.
inline std::vector<float> RoPERef(const std::vector<float> &x, int64_t B, int64_t S, int64_t H, int64_t D,
                                  int64_t R, bool interleaved, float theta, const std::vector<int64_t> &offsets) {
  std::vector<float> y = x;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t off = offsets.empty() ? 0 : offsets.size() == 1 ? offsets[0] : offsets[b];
      const float pos = static_cast<float>(s + off);
      for (int64_t i = 0; i < R / 2; ++i) {
        const float inv_freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(R));
        const float ang = pos * inv_freq;
        const double c = std::cos(static_cast<double>(ang)), sn = std::sin(static_cast<double>(ang));
        const int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + R / 2;
        for (int64_t h = 0; h < H; ++h) {
          const int64_t o = ((b * S + s) * H + h) * D;
          const double a = x[o + ia], bb = x[o + ib];
          y[o + ia] = static_cast<float>(a * c - bb * sn);
          y[o + ib] = static_cast<float>(bb * c + a * sn);
        }
      }
    }
  return y;
}

// ---- RoPE, table form (HF apply_rotary_pos_emb) on x [B, S, H, D] ----
// cos/sin: full head-dim rows, element (b, s, d) at b * table_batch_stride + s * D + d
// (stride 0: one table for every batch), broadcast over heads. float64:
//   half_split:  y[i] = x[i] c[i] - x[i+D/2] s[i] (i < D/2), y[i] = x[i] c[i] + x[i-D/2] s[i]
//   interleaved: y[2j] = x[2j] c[2j] - x[2j+1] s[2j], y[2j+1] = x[2j+1] c[2j+1] + x[2j] s[2j+1]
inline std::vector<double> RoPETableRef(const std::vector<float> &x, const std::vector<float> &cos,
                                        const std::vector<float> &sin, int64_t B, int64_t S, int64_t H,
                                        int64_t D, int64_t table_batch_stride, bool interleaved) {
  std::vector<double> y(x.size());
  const int64_t half = D / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t row = b * table_batch_stride + s * D;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t o = ((b * S + s) * H + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
          const double a = x[o + ia], bb = x[o + ib];
          y[o + ia] = a * double(cos[row + ia]) - bb * double(sin[row + ia]);
          y[o + ib] = bb * double(cos[row + ib]) + a * double(sin[row + ib]);
        }
      }
    }
  return y;
}

// ---- attention: q [B,Sq,Hq,D], k/v [B,Skv,Hkv,D] (kv_len rows used), out [B,Sq,Hq,D] ----
// o = softmax(q k^T * scale + mask) v with GQA kv head h / (Hq/Hkv); causal: key j visible to
// query i iff j <= i + kv_len - Sq; mask index b*msb + h*msh + i*msq + j. Rows with no visible
// key (or all -inf) -> 0 (the kernels' convention). `kv_stride_rows` = Skv or Smax of a cache.
inline std::vector<float> AttentionRef(const std::vector<float> &q, const std::vector<float> &k,
                                       const std::vector<float> &v, const std::vector<float> *mask, int64_t B,
                                       int64_t Sq, int64_t kv_len, int64_t kv_stride_rows, int64_t Hq, int64_t Hkv,
                                       int64_t D, bool causal, float scale, int64_t msb = 0, int64_t msh = 0,
                                       int64_t msq = 0) {
  std::vector<float> out(B * Sq * Hq * D, 0.0f);
  const int64_t group = Hq / Hkv;
  std::vector<double> sc(kv_len);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t hk = h / group;
        const float *qp = &q[((b * Sq + i) * Hq + h) * D];
        double mx = -INFINITY;
        for (int64_t j = 0; j < kv_len; ++j) {
          const float *kp = &k[((b * kv_stride_rows + j) * Hkv + hk) * D];
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qp[d]) * kp[d];
          double t = dot * scale;
          if (mask) t += (*mask)[b * msb + h * msh + i * msq + j];
          if (causal && j > i + kv_len - Sq) t = -INFINITY;
          sc[j] = t;
          mx = std::fmax(mx, t);
        }
        float *op = &out[((b * Sq + i) * Hq + h) * D];
        if (std::isinf(mx) && mx < 0) continue;  // fully masked -> 0
        double sum = 0.0;
        for (int64_t j = 0; j < kv_len; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < kv_len; ++j) acc += sc[j] * v[((b * kv_stride_rows + j) * Hkv + hk) * D + d];
          op[d] = static_cast<float>(acc / sum);
        }
      }
  return out;
}

// ---- reductions over the last dim (sum/mean/max/min; max/min propagate NaN) ----
enum class Reduce { sum, mean, max, min };
inline std::vector<float> RowReduceRef(const std::vector<float> &x, int64_t rows, int64_t n, Reduce kind) {
  std::vector<float> y(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double acc = kind == Reduce::max ? -INFINITY : kind == Reduce::min ? INFINITY : 0.0;
    bool nan = false;
    for (int64_t j = 0; j < n; ++j) {
      const double v = x[r * n + j];
      nan = nan || std::isnan(v);
      if (kind == Reduce::max) acc = std::fmax(acc, v);
      else if (kind == Reduce::min) acc = std::fmin(acc, v);
      else acc += v;
    }
    if (kind == Reduce::mean) acc /= n;
    y[r] = (nan && (kind == Reduce::max || kind == Reduce::min)) ? NAN : static_cast<float>(acc);
  }
  return y;
}

} // namespace llmc::ref

#endif
