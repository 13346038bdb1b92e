//===- Cumsum.cpp - inclusive prefix sum along the last dimension ---------===//
//
// x [rows, n] -> out [rows, n]: one block per row. Thread t sums its run of
// kChunk consecutive elements, the block scans the run totals in shared
// memory (Hillis & Steele 1986: log2(kThreads) steps, any accumulator type,
// no 64-bit shuffles), and each thread rewrites its run from its exclusive
// prefix. Floats accumulate in fp32, integers and booleans in int64
// (exact). Rows are short where graphs use it (mask bookkeeping over a
// sequence), so the per-thread runs are not coalesced; a long-row
// decoupled look-back scan is not needed there.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {
int CumsumThreads(const CumsumConfig &c) {
  return static_cast<int>(std::clamp<int64_t>(RoundUp(CeilDiv(c.n, 4), 32), 32, 256));
}
} // namespace

absl::StatusOr<KernelCode> EmitCumsum(const CumsumConfig &c) {
  const bool floatIn = IsFloatType(c.in);
  if (c.in == ScalarType::f8e4m3 || c.in == ScalarType::f8e5m2)
    return Unsupported(std::string("cumsum: input ") + ScalarTypeTag(c.in) +
                       " (f32, bf16, f16 and integers are supported)");
  if (floatIn && c.out != c.in)
    return Invalid(std::string("cumsum: a ") + ScalarTypeTag(c.in) + " input gives " +
                   ScalarTypeTag(c.in) + ", not " + ScalarTypeTag(c.out));
  if (c.out == ScalarType::i1 || c.out == ScalarType::i8 || c.out == ScalarType::f8e4m3 ||
      c.out == ScalarType::f8e5m2)
    return Unsupported(std::string("cumsum: result ") + ScalarTypeTag(c.out) +
                       " (f32, bf16, f16, i32 and i64 are supported)");
  if (c.n < 1) return Invalid("cumsum: n must be >= 1");
  if (c.n > int64_t{2147483647})
    return Unsupported("cumsum: rows of " + std::to_string(c.n) + " elements; at most 2^31 - 1");
  const int threads = CumsumThreads(c);
  KernelCode kc;
  kc.name = std::string("llmc_cumsum_") + ScalarTypeTag(c.in) + "_" + ScalarTypeTag(c.out) +
            "_n" + std::to_string(c.n);
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.in) << " InT;\n"
      << "typedef " << CTypeName(c.out) << " OutT;\n"
      << "typedef " << (floatIn ? "float" : "long long") << " AccT;\n"
      << "static constexpr long long kN = " << c.n << "LL;\n"
      << "static constexpr int kThreads = " << threads << ";\n"
      << "static constexpr long long kChunk = (kN + kThreads - 1) / kThreads;\n";
  const char *load = floatIn ? "toF(xr[i])" : "(AccT)toI(xr[i])";
  const char *store = floatIn ? "fromF<OutT>(run)" : "fromI<OutT>((int64_t)run)";
  std::ostringstream b;
  b << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << kc.name
    << "(\n    OutT* __restrict__ out, const InT* __restrict__ x, long long rows) {\n";
  b << "  __shared__ AccT s_run[kThreads];\n"
    << "  const long long row = blockIdx.x;\n"
    << "  if (row >= rows) return;\n"
    << "  const InT* xr = x + row * (long long)kN;\n"
    << "  OutT* yr = out + row * (long long)kN;\n"
    << "  // 64-bit positions: kChunk * kThreads may pass 2^31 for long rows.\n"
    << "  const long long begin = (long long)threadIdx.x * kChunk;\n"
    << "  const long long end = begin + kChunk < kN ? begin + kChunk : kN;\n"
    << "  AccT local = 0;\n"
    << "  for (long long i = begin; i < end; ++i) local += " << load << ";\n"
    << "  s_run[threadIdx.x] = local;\n"
    << "  __syncthreads();\n"
    << "  // Inclusive scan of the run totals.\n"
    << "  for (int o = 1; o < kThreads; o <<= 1) {\n"
    << "    const AccT add = (int)threadIdx.x >= o ? s_run[threadIdx.x - o] : (AccT)0;\n"
    << "    __syncthreads();\n"
    << "    s_run[threadIdx.x] += add;\n"
    << "    __syncthreads();\n"
    << "  }\n"
    << "  AccT run = threadIdx.x > 0 ? s_run[threadIdx.x - 1] : (AccT)0;\n"
    << "  for (long long i = begin; i < end; ++i) {\n"
    << "    run += " << load << ";\n"
    << "    yr[i] = " << store << ";\n"
    << "  }\n"
    << "}\n";
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble("// llmc cumsum over the last dim (torch.cumsum).\n",
                                            cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> CumsumLaunch(const CumsumConfig &c, int64_t rows) {
  return Dims(std::max<int64_t>(rows, 1), 1, 1, CumsumThreads(c));
}

} // namespace llmc::cuda
