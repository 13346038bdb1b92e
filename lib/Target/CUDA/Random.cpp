//===- Random.cpp - dropout keep masks from Philox4x32-10 -------------------===//
//
// out[i] = (philox(key = seed, counter = (i_lo, i_hi, stream, 0)).x >> 8)
//          >= threshold, one thread per element (grid-stride). Counter-based
// (Salmon et al. 2011): no state, any element computed independently, the
// same integer arithmetic as the reference executor (RefShapes.cpp), so the
// masks agree bit for bit. One kernel for every dropout site: the stream
// and the threshold are arguments.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {
constexpr int kDropoutThreads = 256;
constexpr int64_t kDropoutMaxBlocks = 65535;
} // namespace

absl::StatusOr<KernelCode> EmitDropoutMask() {
  KernelCode kc;
  kc.name = "llmc_dropout_mask_philox";
  std::ostringstream cfg;
  cfg << "static constexpr int kThreads = " << kDropoutThreads << ";\n";
  std::ostringstream b;
  b << R"CUDA(
// Philox4x32-10's first output word for `counter` under `key`.
static __device__ __forceinline__ unsigned llmc_philox_x(unsigned c0, unsigned c1, unsigned c2,
                                                         unsigned c3, unsigned k0, unsigned k1) {
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    const unsigned hi0 = (unsigned)(p0 >> 32), lo0 = (unsigned)p0;
    const unsigned hi1 = (unsigned)(p1 >> 32), lo1 = (unsigned)p1;
    const unsigned n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c0;
}
)CUDA";
  b << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << kc.name
    << "(\n    uint8_t* __restrict__ out, const long long* __restrict__ seed, long long n,\n"
       "    unsigned threshold, unsigned stream) {\n";
  b << R"CUDA(  const unsigned long long s = (unsigned long long)seed[0];
  const unsigned k0 = (unsigned)s, k1 = (unsigned)(s >> 32);
  for (long long i = (long long)blockIdx.x * kThreads + threadIdx.x; i < n;
       i += (long long)gridDim.x * kThreads) {
    const unsigned long long c = (unsigned long long)i;
    const unsigned x = llmc_philox_x((unsigned)c, (unsigned)(c >> 32), stream, 0u, k0, k1);
    out[i] = (uint8_t)((x >> 8) >= threshold);
  }
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble("// llmc dropout keep mask (Philox4x32-10).\n",
                                            cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> DropoutMaskLaunch(int64_t n) {
  if (n < 0) return Invalid("dropout mask: n must be >= 0");
  const int64_t blocks = std::clamp<int64_t>(CeilDiv(n, kDropoutThreads), 1, kDropoutMaxBlocks);
  return Dims(blocks, 1, 1, kDropoutThreads);
}

} // namespace llmc::cuda
