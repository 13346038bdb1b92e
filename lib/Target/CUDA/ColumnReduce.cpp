//===- ColumnReduce.cpp - reductions over dimensions before the last ------===//
//
// x [outer, r, inner] -> out [outer, inner]. A warp reads 32 x kVec
// consecutive columns of a row (16-byte loads when inner allows, else one
// element per thread); 8 warps of a block take every 8th row of the block's
// row range, and the block combines their 8 accumulators in shared memory. When outer * ceil(inner / 32) blocks do not fill the GPU,
// the rows are split over grid.y and a second kernel combines the fp32
// partials in split order, so the result does not depend on scheduling.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {
constexpr int kColumns = 32;      // columns per block (one warp wide)
constexpr int kRowLanes = 8;      // warps per block, each on every 8th row
constexpr int kTargetBlocks = 528; // ~4 blocks per SM on a 132-SM H200
constexpr int kMinRowsPerSplit = 64;
constexpr int kMaxSplits = 64;
constexpr int kCombineThreads = 256;

absl::Status CheckConfig(const ColumnReduceConfig &c) {
  if (IsIntType(c.in) && c.in != ScalarType::i32 && c.in != ScalarType::i8 &&
      c.in != ScalarType::i1 && c.in != ScalarType::i64)
    return Invalid("column reduce: bad input type");
  if (c.vec < 1 || c.vec * ScalarSize(c.in) > 16 || (c.vec & (c.vec - 1)) != 0)
    return Invalid("column reduce: vec must be a power of two of at most 16 bytes");
  return absl::OkStatus();
}

int64_t ColumnBlocks(int64_t outer, int64_t inner, int vec) {
  return std::max<int64_t>(outer, 1) * CeilDiv(std::max<int64_t>(inner, 1), int64_t{kColumns} * vec);
}
} // namespace

int ColumnReduceVecWidth(ScalarType in, int64_t inner) { return VecWidth(inner, ScalarSize(in)); }

int ColumnReduceNumSplits(int64_t outer, int64_t r, int64_t inner, int vec) {
  const int64_t blocks = ColumnBlocks(outer, inner, vec);
  const int64_t want = CeilDiv(kTargetBlocks, blocks);
  const int64_t by_rows = std::max<int64_t>(r / kMinRowsPerSplit, 1);
  return static_cast<int>(std::clamp<int64_t>(std::min(want, by_rows), 1, kMaxSplits));
}

int64_t ColumnReduceRowsPerSplit(int64_t r, int splits) {
  return std::max<int64_t>(CeilDiv(std::max<int64_t>(r, 1), std::max(splits, 1)), 1);
}

int64_t ColumnReduceWorkspaceBytes(int64_t outer, int64_t inner, int splits) {
  return splits > 1 ? int64_t{4} * splits * outer * inner : 0;
}

absl::StatusOr<ColumnReduceKernels> EmitColumnReduce(const ColumnReduceConfig &c) {
  if (absl::Status st = CheckConfig(c); !st.ok()) return st;
  ColumnReduceKernels k;
  const std::string tag = std::string(KindName(c.kind)) + "_" + ScalarTypeTag(c.in) + "_" + ScalarTypeTag(c.out);
  k.partial.name = "llmc_colreduce_" + tag + "_v" + std::to_string(c.vec);
  k.combine.name = "llmc_colreduce_combine_" + tag;
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.in) << " InT;\n"
      << "typedef " << CTypeName(c.out) << " OutT;\n"
      << "static constexpr int kColumns = " << kColumns << ";\n"
      << "static constexpr int kRowLanes = " << kRowLanes << ";\n"
      << "static constexpr int kVec = " << c.vec << ";  // columns per thread (one load)\n"
      << ReduceOps(c.kind);
  const std::string hdr = std::string("// llmc column reduction (") + KindName(c.kind) +
                          ") of x [outer, r, inner] over r, fp32 accumulation:\n"
                          "// a warp per row reads 32 consecutive columns, 8 warps take every 8th row of\n"
                          "// the block's split of the rows; fp32 partials per split, combined in order.\n";
  std::ostringstream b1;
  b1 << "\nextern \"C\" __global__ void __launch_bounds__(kColumns * kRowLanes) " << k.partial.name
     << "(\n    OutT* __restrict__ out, float* __restrict__ partials, const InT* __restrict__ x,\n"
        "    long long outer, long long r, long long inner, long long rows_per_split) {\n";
  b1 << R"CUDA(  typedef LlmcVec<InT, kVec> InV;
  __shared__ float scratch[kRowLanes][kColumns * kVec + 1];
  const int tx = threadIdx.x % kColumns, ty = threadIdx.x / kColumns;
  const long long col_blocks = (inner + kColumns * kVec - 1) / (kColumns * kVec);
  const long long o = (long long)blockIdx.x / col_blocks;
  // The thread's first column; inner % kVec == 0, so its kVec columns are
  // all inside or all outside.
  const long long i = ((long long)blockIdx.x % col_blocks) * kColumns * kVec + (long long)tx * kVec;
  const long long r0 = (long long)blockIdx.y * rows_per_split;
  const long long r1 = r0 + rows_per_split < r ? r0 + rows_per_split : r;
  float acc[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) acc[e] = identity();
  if (i < inner) {
    const InT* xc = x + o * r * inner + i;
    // Rows start kVec-aligned (inner % kVec == 0) when x does.
    if ((((unsigned long long)x) & (sizeof(InV) - 1)) == 0) {
#pragma unroll 4
      for (long long j = r0 + ty; j < r1; j += kRowLanes) {
        const InV v = *reinterpret_cast<const InV*>(xc + j * inner);
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[e] = combine(acc[e], toF(v.v[e]));
      }
    } else {
      for (long long j = r0 + ty; j < r1; j += kRowLanes)
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[e] = combine(acc[e], toF(xc[j * inner + e]));
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) scratch[ty][tx * kVec + e] = acc[e];
  __syncthreads();
  // Row lane 0's threads write kColumns * kVec columns, one each per pass.
  if (ty != 0) return;
  const long long base = ((long long)blockIdx.x % col_blocks) * kColumns * kVec;
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    const int c = e * kColumns + tx;
    if (base + c >= inner) continue;
    float v = scratch[0][c];
#pragma unroll
    for (int l = 1; l < kRowLanes; ++l) v = combine(v, scratch[l][c]);
    if (gridDim.y == 1)
      out[o * inner + base + c] = fromF<OutT>(kMean ? v / (float)r : v);
    else
      partials[((long long)blockIdx.y * outer + o) * inner + base + c] = v;
  }
}
)CUDA";
  std::ostringstream b2;
  b2 << "\nextern \"C\" __global__ void __launch_bounds__(" << kCombineThreads << ") " << k.combine.name
     << "(\n    OutT* __restrict__ out, const float* __restrict__ partials, long long count,\n"
        "    long long r, int splits) {\n";
  b2 << R"CUDA(  const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= count) return;
  float v = partials[j];
  for (int s = 1; s < splits; ++s) v = combine(v, partials[(long long)s * count + j]);
  out[j] = fromF<OutT>(kMean ? v / (float)r : v);
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(k.partial.source, Assemble(hdr + "// (partial)\n", cfg.str(), b1.str()));
  LLMC_ASSIGN_OR_RETURN(k.combine.source, Assemble(hdr + "// (combine)\n", cfg.str(), b2.str()));
  return k;
}

absl::StatusOr<LaunchDims> ColumnReducePartialLaunch(const ColumnReduceConfig &c, int64_t outer,
                                                     int64_t inner, int splits) {
  if (absl::Status st = CheckConfig(c); !st.ok()) return st;
  if (inner % c.vec != 0) return Invalid("column reduce: inner must be a multiple of vec");
  return Dims(ColumnBlocks(outer, inner, c.vec), std::max(splits, 1), 1, kColumns * kRowLanes);
}

absl::StatusOr<LaunchDims> ColumnReduceCombineLaunch(const ColumnReduceConfig &c, int64_t outer,
                                                     int64_t inner) {
  if (absl::Status st = CheckConfig(c); !st.ok()) return st;
  return Dims(CeilDiv(std::max<int64_t>(outer * inner, 1), kCombineThreads), 1, 1, kCombineThreads);
}

} // namespace llmc::cuda
