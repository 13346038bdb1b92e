//===- WeightOnly.cpp - int8/int4 weight-only quantization kernels --------===//
//
// Generators for the quantize / dequantize kernels and the fused
// dequantizing decode GEMV (scheme and layouts in WeightOnly.h).
//
//===----------------------------------------------------------------------===//

#include "llmc/Target/CUDA/WeightOnly.h"

#include "Internal.h"

#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {
constexpr int kQuantWarps = 8;   // groups per block (quantize)
constexpr int kDequantThreads = 256;
constexpr int kQGemvWarps = 8;   // output columns per block
constexpr int kQGemvUnroll = 4;  // 16-byte weight loads in flight per lane

bool isFloat(ScalarType t) {
  return t == ScalarType::f32 || t == ScalarType::f16 || t == ScalarType::bf16;
}

// Signed element j (0-based) of a 32-bit word of packed weights.
const char *kUnpack = R"CUDA(
template <int kBits> LLMC_DEV int unpackQ(uint32_t word, int j) {
  if (kBits == 4) return ((int)(word << (28 - 4 * j))) >> 28;   // element 2i: low nibble
  return ((int)(word << (24 - 8 * j))) >> 24;
}
)CUDA";
} // namespace

bool WeightQuantSupported(const WeightQuantConfig &c) {
  return (c.bits == 4 || c.bits == 8) && c.group >= 64 && c.group % 64 == 0 &&
         isFloat(c.dtype);
}

absl::StatusOr<KernelCode> EmitQuantizeWeight(const WeightQuantConfig &c) {
  if (!WeightQuantSupported(c)) return Invalid("quantize_weight: unsupported configuration");
  KernelCode kc;
  kc.name = "llmc_quantize_weight_i" + std::to_string(c.bits) + "_g" +
            std::to_string(c.group) + "_" + ScalarTypeTag(c.dtype);
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n"
      << "static constexpr int kBits = " << c.bits << ";\n"
      << "static constexpr int kGroup = " << c.group << ";\n"
      << "static constexpr float kQmax = " << (c.bits == 4 ? "7.0f" : "127.0f") << ";\n"
      << "static constexpr int kWarps = " << kQuantWarps << ";\n";
  std::ostringstream b;
  b << "\nextern \"C\" __global__ void __launch_bounds__(kWarps * 32) " << kc.name << R"CUDA((
    int8_t* __restrict__ packed, float* __restrict__ scales, const T* __restrict__ w,
    long long n, long long k) {
  const int lane = threadIdx.x & 31;
  const long long groups_per_row = k / kGroup;
  const long long g = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (g >= n * groups_per_row) return;
  const long long row = g / groups_per_row, gi = g % groups_per_row;
  const T* src = w + row * k + gi * kGroup;
  float amax = 0.f;
  for (int p = lane; p < kGroup / 2; p += 32)
    amax = fmaxf(amax, fmaxf(fabsf(toF(src[2 * p])), fabsf(toF(src[2 * p + 1]))));
  amax = warpMax(amax);
  const float scale = amax / kQmax;  // IEEE division (no fast math)
  if (lane == 0) scales[g] = scale;
  for (int p = lane; p < kGroup / 2; p += 32) {
    int q[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float v = scale > 0.f ? rintf(toF(src[2 * p + e]) / scale) : 0.f;
      q[e] = (int)fminf(fmaxf(v, -kQmax), kQmax);
    }
    if (kBits == 4) {
      packed[row * (k / 2) + gi * (kGroup / 2) + p] = (int8_t)((q[0] & 0xF) | ((q[1] & 0xF) << 4));
    } else {
      packed[row * k + gi * kGroup + 2 * p] = (int8_t)q[0];
      packed[row * k + gi * kGroup + 2 * p + 1] = (int8_t)q[1];
    }
  }
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(
      kc.source, Assemble("// llmc weight-only quantization: symmetric absmax per group along K,\n"
                          "// scale = max|w| / Q, q = rint(w / scale); one warp per group.\n",
                          cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> QuantizeWeightLaunch(const WeightQuantConfig &c, int64_t n, int64_t k) {
  return Dims(CeilDiv(n * (k / c.group), kQuantWarps), 1, 1, kQuantWarps * 32);
}

absl::StatusOr<KernelCode> EmitDequantizeWeight(const WeightQuantConfig &c) {
  if (!WeightQuantSupported(c)) return Invalid("dequantize_weight: unsupported configuration");
  KernelCode kc;
  kc.name = "llmc_dequantize_weight_i" + std::to_string(c.bits) + "_g" +
            std::to_string(c.group) + "_" + ScalarTypeTag(c.dtype);
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n"
      << "static constexpr int kBits = " << c.bits << ";\n"
      << "static constexpr int kGroup = " << c.group << ";\n";
  std::ostringstream b;
  b << kUnpack << "\nextern \"C\" __global__ void __launch_bounds__(" << kDequantThreads << ") "
    << kc.name << R"CUDA((
    T* __restrict__ out, const int8_t* __restrict__ packed, const float* __restrict__ scales,
    long long n, long long k) {
  // Thread t writes elements 8t .. 8t + 7 (k % 8 == 0: one row, one group).
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n * k / 8) return;
  const long long e0 = t * 8, row = e0 / k, col = e0 % k;
  const float s = scales[row * (k / kGroup) + col / kGroup];
  uint32_t words[2];
  if (kBits == 4) {
    words[0] = *reinterpret_cast<const uint32_t*>(packed + row * (k / 2) + col / 2);
  } else {
    const LlmcVec<uint32_t, 2> v = *reinterpret_cast<const LlmcVec<uint32_t, 2>*>(packed + e0);
    words[0] = v.v[0];
    words[1] = v.v[1];
  }
  LlmcVec<T, 8> o;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int q = kBits == 4 ? unpackQ<4>(words[0], e) : unpackQ<8>(words[e / 4], e % 4);
    o.v[e] = fromF<T>((float)q * s);
  }
  *reinterpret_cast<LlmcVec<T, 8>*>(out + e0) = o;
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(
      kc.source, Assemble("// llmc weight-only dequantization: out = T(q * scale), 8 per thread.\n",
                          cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> DequantizeWeightLaunch(const WeightQuantConfig &c, int64_t n, int64_t k) {
  return Dims(CeilDiv(n * k / 8, kDequantThreads), 1, 1, kDequantThreads);
}

bool QuantGemvSupported(const QuantGemvConfig &c) {
  const int perChunk = c.bits == 4 ? 32 : 16;  // weights per 16-byte load
  return (c.bits == 4 || c.bits == 8) &&
         (c.dtype == ScalarType::bf16 || c.dtype == ScalarType::f16) &&
         isFloat(c.out) && c.m >= 1 && c.m <= kGemvMaxRows && c.group >= perChunk &&
         c.group % perChunk == 0 && c.k >= c.group && c.k % c.group == 0 && c.n >= 1;
}

absl::StatusOr<KernelCode> EmitQuantGemv(const QuantGemvConfig &c) {
  if (!QuantGemvSupported(c)) return Invalid("quantized gemv: unsupported configuration");
  KernelCode kc;
  kc.name = "llmc_qgemv_i" + std::to_string(c.bits) + "_g" + std::to_string(c.group) + "_" +
            ScalarTypeTag(c.dtype) + "_" + ScalarTypeTag(c.out) + "_m" + std::to_string(c.m) +
            "_k" + std::to_string(c.k) + (c.has_bias ? "_bias" : "");
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n"
      << "typedef " << CTypeName(c.out) << " OutT;\n"
      << "static constexpr int kBits = " << c.bits << ";\n"
      << "static constexpr int kGroup = " << c.group << ";\n"
      << "static constexpr int kM = " << c.m << ";      // rows of x (tokens)\n"
      << "static constexpr long long kK = " << c.k << "LL; // contraction length\n"
      << "static constexpr int kPerChunk = " << (c.bits == 4 ? 32 : 16)
      << ";  // weights per 16-byte load\n"
      << "static constexpr int kWarps = " << kQGemvWarps << ";\n"
      << "static constexpr int kUnroll = " << kQGemvUnroll << ";\n"
      << "static constexpr bool kBias = " << (c.has_bias ? "true" : "false") << ";\n";
  std::ostringstream b;
  b << kUnpack << R"CUDA(
// partial[m] = sum over the chunk's weights of q * x[m, k0 + e]; acc += s * partial.
LLMC_DEV void qgemvChunk(const LlmcVec<uint32_t, 4>& wv, float s, const T* __restrict__ x,
                         long long k0, float* acc) {
  typedef LlmcVec<T, 8> V;
  float q[kPerChunk];
#pragma unroll
  for (int e = 0; e < kPerChunk; ++e) {
    constexpr int kPerWord = 32 / kBits;
    q[e] = (float)unpackQ<kBits>(wv.v[e / kPerWord], e % kPerWord);
  }
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    const V* xv = reinterpret_cast<const V*>(x + m * kK + k0);
    float partial = 0.f;
#pragma unroll
    for (int j = 0; j < kPerChunk / 8; ++j) {
      const V xm = xv[j];
#pragma unroll
      for (int e = 0; e < 8; ++e) partial += q[j * 8 + e] * toF(xm.v[e]);
    }
    acc[m] += s * partial;
  }
}
)CUDA";
  b << "\nextern \"C\" __global__ void __launch_bounds__(kWarps * 32) " << kc.name << R"CUDA((
    OutT* __restrict__ y, const T* __restrict__ x, const int8_t* __restrict__ packed,
    const float* __restrict__ scales, const T* __restrict__ bias, long long n_cols) {
  typedef LlmcVec<uint32_t, 4> W;
  const int lane = threadIdx.x & 31;
  const long long n = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (n >= n_cols) return;
  constexpr long long kChunks = kK / kPerChunk;  // 16-byte chunks per row
  const W* wrow = reinterpret_cast<const W*>(packed + n * (kK * kBits / 8));
  const float* srow = scales + n * (kK / kGroup);
  float acc[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) acc[m] = 0.f;
  long long c = lane;
  // Main loop: kUnroll independent weight loads per lane in flight.
  for (; c + 32 * (kUnroll - 1) < kChunks; c += 32 * kUnroll) {
    W wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = wrow[c + 32 * u];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long k0 = (c + 32 * u) * kPerChunk;
      qgemvChunk(wv[u], srow[k0 / kGroup], x, k0, acc);
    }
  }
  for (; c < kChunks; c += 32) {  // tail
    const long long k0 = c * kPerChunk;
    qgemvChunk(wrow[c], srow[k0 / kGroup], x, k0, acc);
  }
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    const float s = warpSum(acc[m]);
    if (lane == 0) {
      const float bv = kBias ? toF(bias[n]) : 0.f;
      y[(long long)m * n_cols + n] = fromF<OutT>(s + bv);
    }
  }
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(
      kc.source, Assemble("// llmc weight-only decode GEMV: y[m,n] = sum_k x[m,k] * q[n,k] * s[n,k/G] (+ bias[n]),\n"
                          "// packed int4/int8 rows read with 16-byte loads, one warp per output column,\n"
                          "// fp32 accumulation.\n",
                          cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> QuantGemvLaunch(const QuantGemvConfig &c) {
  return Dims(CeilDiv(c.n, kQGemvWarps), 1, 1, kQGemvWarps * 32);
}

} // namespace llmc::cuda
