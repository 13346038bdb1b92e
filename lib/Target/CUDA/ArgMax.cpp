//===- ArgMax.cpp - index of the row maximum (greedy sampling) ------------===//
//
// x [rows, n] -> out [rows] (i64): one block per row. Each thread scans its
// strided vectors in index order keeping (value, index) of the first
// maximum; warps and then the block combine pairs, a NaN counting as larger
// than any number and ties going to the smaller index, so the result is
// torch.argmax's whatever the thread count.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {
int ArgMaxThreads(const ArgMaxConfig &c) {
  const int64_t nvec = c.n / VecWidth(c.n, ScalarSize(c.in));
  return static_cast<int>(std::clamp<int64_t>(RoundUp(nvec, 32), 32, 256));
}
} // namespace

absl::StatusOr<KernelCode> EmitArgMax(const ArgMaxConfig &c) {
  if (!IsFloatType(c.in) || c.in == ScalarType::f8e4m3 || c.in == ScalarType::f8e5m2)
    return Unsupported(std::string("argmax: input ") + ScalarTypeTag(c.in) + " (f32, bf16 and f16 are supported)");
  if (c.n < 1) return Invalid("argmax: n must be >= 1");
  if (c.n > int64_t{2147483647})
    return Unsupported("argmax: rows of " + std::to_string(c.n) + " elements; at most 2^31 - 1");
  const int vec = VecWidth(c.n, ScalarSize(c.in));
  KernelCode kc;
  kc.name = std::string("llmc_argmax_") + ScalarTypeTag(c.in) + "_n" + std::to_string(c.n);
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.in) << " InT;\n"
      << "static constexpr int kN = " << c.n << ";\n"
      << "static constexpr int kVec = " << vec << ";\n"
      << "static constexpr int kNumVec = kN / kVec;\n"
      << "static constexpr int kThreads = " << ArgMaxThreads(c) << ";\n";
  std::ostringstream b;
  b << R"CUDA(
// (b, ib) replaces (a, ia): a NaN beats any number, the smaller index wins
// ties (and between NaNs); index -1 is "nothing yet".
static __device__ __forceinline__ bool llmc_argmax_better(float a, int ia, float b, int ib) {
  if (ib < 0) return false;
  if (ia < 0) return true;
  const bool an = a != a, bn = b != b;
  if (an) return bn && ib < ia;
  if (bn) return true;
  return b > a || (b == a && ib < ia);
}
)CUDA";
  b << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << kc.name
    << "(\n    long long* __restrict__ out, const InT* __restrict__ x, long long rows) {\n";
  b << R"CUDA(  typedef LlmcVec<InT, kVec> InV;
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  const long long row = blockIdx.x;
  if (row >= rows) return;
  const InV* xr = reinterpret_cast<const InV*>(x + row * (long long)kN);
  float bv = 0.0f;
  int bi = -1;
  for (int vi = threadIdx.x; vi < kNumVec; vi += kThreads) {
    const InV xv = xr[vi];
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float v = toF(xv.v[e]);
      if (llmc_argmax_better(bv, bi, v, vi * kVec + e)) { bv = v; bi = vi * kVec + e; }
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, bv, o);
    const int i = __shfl_xor_sync(0xffffffffu, bi, o);
    if (llmc_argmax_better(bv, bi, v, i)) { bv = v; bi = i; }
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) { s_v[warp] = bv; s_i[warp] = bi; }
  __syncthreads();
  if (warp == 0) {
    bv = lane < kThreads / 32 ? s_v[lane] : 0.0f;
    bi = lane < kThreads / 32 ? s_i[lane] : -1;
    for (int o = 16; o > 0; o >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, bv, o);
      const int i = __shfl_xor_sync(0xffffffffu, bi, o);
      if (llmc_argmax_better(bv, bi, v, i)) { bv = v; bi = i; }
    }
    if (lane == 0) out[row] = bi;
  }
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble("// llmc argmax over the last dim (torch.argmax: first maximum, NaN largest).\n",
                                            cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> ArgMaxLaunch(const ArgMaxConfig &c, int64_t rows) {
  return Dims(std::max<int64_t>(rows, 1), 1, 1, ArgMaxThreads(c));
}

} // namespace llmc::cuda
