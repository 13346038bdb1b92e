//===- Gemv.cpp - skinny matmul (decode GEMV) generator -------------------===//
//
// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for a handful of rows m: the
// shape of every projection in a decode step, where the weight read (N*K
// elements) is the whole cost and cuBLASLt's GEMM tiles leave bandwidth on
// the table. One warp per output column n streams the weight row w[n, :]
// with 16-byte loads (several in flight per lane), multiplies it against
// every x row (x is tiny and stays in L1/L2), and reduces the M partial sums
// with warp shuffles. fp32 accumulation.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {
constexpr int kGemvWarps = 8; // output columns per block
constexpr int kGemvUnroll = 4; // 16-byte weight loads in flight per lane
} // namespace

bool GemvSupported(const GemvConfig &c) {
  return (c.dtype == ScalarType::bf16 || c.dtype == ScalarType::f16) &&
         c.m >= 1 && c.m <= kGemvMaxRows && c.k >= 8 && c.k % 8 == 0 && c.n >= 1;
}

KernelCode EmitGemv(const GemvConfig &c) {
  if (!GemvSupported(c)) Fail("gemv: unsupported configuration");
  KernelCode kc;
  kc.name = std::string("llmc_gemv_") + ScalarTypeTag(c.dtype) + "_" + ScalarTypeTag(c.out) +
            "_m" + std::to_string(c.m) + "_k" + std::to_string(c.k) + (c.has_bias ? "_bias" : "");
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n"
      << "typedef " << CTypeName(c.out) << " OutT;\n"
      << "static constexpr int kM = " << c.m << ";      // rows of x (tokens)\n"
      << "static constexpr long long kK = " << c.k << "LL; // contraction length\n"
      << "static constexpr int kVec = 8;       // elements per 16-byte load\n"
      << "static constexpr int kWarps = " << kGemvWarps << ";\n"
      << "static constexpr int kUnroll = " << kGemvUnroll << ";\n"
      << "static constexpr bool kBias = " << (c.has_bias ? "true" : "false") << ";\n";
  std::ostringstream b;
  b << "\nextern \"C\" __global__ void __launch_bounds__(kWarps * 32) " << kc.name << R"CUDA((
    OutT* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w,
    const T* __restrict__ bias, long long n_cols) {
  typedef LlmcVec<T, kVec> V;
  const int lane = threadIdx.x & 31;
  const long long n = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (n >= n_cols) return;
  const V* wrow = reinterpret_cast<const V*>(w + n * kK);
  const V* xv = reinterpret_cast<const V*>(x);
  constexpr long long kChunks = kK / kVec;  // 16-byte chunks per row
  float acc[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) acc[m] = 0.f;
  long long c = lane;
  // Main loop: kUnroll independent weight loads per lane in flight.
  for (; c + 32 * (kUnroll - 1) < kChunks; c += 32 * kUnroll) {
    V wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = wrow[c + 32 * u];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        const V xm = xv[m * kChunks + c + 32 * u];
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[m] += toF(wv[u].v[e]) * toF(xm.v[e]);
      }
    }
  }
  for (; c < kChunks; c += 32) {  // tail
    const V wv = wrow[c];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const V xm = xv[m * kChunks + c];
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[m] += toF(wv.v[e]) * toF(xm.v[e]);
    }
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
  kc.source = Assemble("// llmc skinny matmul (decode GEMV): y[m,n] = sum_k x[m,k] * w[n,k] (+ bias[n]),\n"
                       "// w row-major [N, K] (nn.Linear layout); one warp per output column,\n"
                       "// 16-byte weight loads, fp32 accumulation.\n",
                       cfg.str(), b.str());
  return kc;
}

LaunchDims GemvLaunch(const GemvConfig &c) {
  return Dims(CeilDiv(c.n, kGemvWarps), 1, 1, kGemvWarps * 32);
}

} // namespace llmc::cuda
