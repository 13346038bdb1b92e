//===- IndexPut.cpp - slices written or added at indices (index_put) ------===//
//
// base viewed as [outer, rows, inner], source as [outer, count, inner],
// indices [count]. Two kernels:
//  - copy (index_copy, the KV-cache write): one thread per kVec elements of
//    the source, written to its indexed row; a source-sized launch, so a
//    decode step that writes one token touches one row per head.
//  - add (index_add / index_put accumulate, the embedding backward): each
//    block owns a range of rows of one outer slice and walks all indices in
//    order, adding each source row that lands in its range. No atomics and
//    a fixed order per element, so the result is deterministic. 16-bit
//    bases sum in an fp32 scratch row per touched row (the slot of its first
//    source row) and round once; fp32 bases add in place in that order.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {
constexpr int kCopyThreads = 256;
constexpr int kAddThreads = 256;
constexpr int kAddTargetBlocks = 1056;  // ~8 blocks per SM on a 132-SM H200
constexpr int64_t kMaxRowElems = int64_t(1) << 30;

absl::Status CheckConfig(const IndexPutConfig &c) {
  if (c.index != ScalarType::i32 && c.index != ScalarType::i64)
    return Invalid("index_put: index must be i32 or i64");
  if (c.inner < 1) return Invalid("index_put: inner must be >= 1");
  if (c.zero_base && !c.accumulate) return Invalid("index_put: zero_base is for accumulate");
  if (c.inner > kMaxRowElems)
    return Unsupported("index_put: slices of " + std::to_string(c.inner) + " elements; at most 2^30 are supported");
  if (c.accumulate && c.dtype != ScalarType::f32 && c.dtype != ScalarType::bf16 && c.dtype != ScalarType::f16)
    return Unsupported(std::string("index_put: accumulate into ") + ScalarTypeTag(c.dtype) +
                       " (f32, bf16 and f16 are supported)");
  return absl::OkStatus();
}

int Vec(const IndexPutConfig &c) { return VecWidth(c.inner, ScalarSize(c.dtype)); }

bool NeedsScratch(const IndexPutConfig &c) { return c.accumulate && c.dtype != ScalarType::f32; }

std::string Header(const IndexPutConfig &c) {
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n"
      << "typedef " << CTypeName(c.index) << " IdxT;\n"
      << "static constexpr long long kInner = " << c.inner << "LL;\n"
      << "static constexpr int kVec = " << Vec(c) << ";\n"
      << "static constexpr long long kRowVec = kInner / kVec;\n";
  return cfg.str();
}

// The index of source row n, wrapped from [-rows, 0), or -1 when outside
// [-rows, rows).
const char *kWrapIndex = R"CUDA(
static __device__ __forceinline__ long long llmc_wrap_index(IdxT v, long long rows) {
  long long r = (long long)v;
  if (r < 0) r += rows;
  return (r < 0 || r >= rows) ? -1 : r;
}
)CUDA";
} // namespace

int64_t IndexAddRowsPerBlock(int64_t outer, int64_t rows) {
  rows = std::max<int64_t>(rows, 1);
  const int64_t want_blocks = std::clamp<int64_t>(CeilDiv(kAddTargetBlocks, std::max<int64_t>(outer, 1)), 1, rows);
  const int64_t per = CeilDiv(rows, want_blocks);
  return std::min<int64_t>(per, kIndexAddMaxRowsPerBlock);
}

int64_t IndexPutScratchBytes(const IndexPutConfig &c, int64_t outer, int64_t count) {
  return NeedsScratch(c) ? int64_t{4} * std::max<int64_t>(outer, 1) * std::max<int64_t>(count, 1) * c.inner : 0;
}

absl::StatusOr<KernelCode> EmitIndexPut(const IndexPutConfig &c) {
  if (absl::Status st = CheckConfig(c); !st.ok()) return st;
  KernelCode kc;
  kc.name = std::string(c.accumulate ? (c.zero_base ? "llmc_index_add_zero_" : "llmc_index_add_")
                                     : "llmc_index_copy_") +
            ScalarTypeTag(c.dtype) + "_" + ScalarTypeTag(c.index) + "_i" + std::to_string(c.inner);
  std::ostringstream b;
  b << kWrapIndex;
  if (!c.accumulate) {
    b << "static constexpr int kThreads = " << kCopyThreads << ";\n"
      << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << kc.name
      << "(\n    T* __restrict__ out, const T* __restrict__ src, const IdxT* __restrict__ indices,\n"
         "    long long outer, long long rows, long long count) {\n";
    b << R"CUDA(  typedef LlmcVec<T, kVec> V;
  const long long work = count * kRowVec;  // vectors per outer slice
  for (long long o = blockIdx.y; o < outer; o += gridDim.y) {
    for (long long e = (long long)blockIdx.x * kThreads + threadIdx.x; e < work;
         e += (long long)gridDim.x * kThreads) {
      const long long n = e / kRowVec, c = e - n * kRowVec;
      const long long r = llmc_wrap_index(indices[n], rows);
      if (r < 0) continue;  // out of range: nothing written
      reinterpret_cast<V*>(out)[(o * rows + r) * kRowVec + c] =
          reinterpret_cast<const V*>(src)[(o * count + n) * kRowVec + c];
    }
  }
}
)CUDA";
  } else {
    b << "static constexpr int kThreads = " << kAddThreads << ";\n"
      << "static constexpr int kMaxOwned = " << kIndexAddMaxRowsPerBlock << ";\n"
      << "static constexpr int kUnroll = 4;\n"
      << "static constexpr bool kScratch = " << (NeedsScratch(c) ? "true" : "false") << ";\n"
      << "static constexpr bool kZeroBase = " << (c.zero_base ? "true" : "false") << ";\n"
      << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << kc.name
      << "(\n    T* out, const T* base, const T* __restrict__ src, const IdxT* __restrict__ indices,\n"
         "    float* __restrict__ scratch, long long outer, long long rows, long long count,\n"
         "    long long rows_per_block) {\n";
    b << R"CUDA(  typedef LlmcVec<T, kVec> V;
  V zero;
#pragma unroll
  for (int e = 0; e < kVec; ++e) zero.v[e] = fromF<T>(0.0f);
  // s_slot[r]: the source row whose scratch row (or, for fp32, the output
  // row itself) holds row r0 + r's sum so far; -1 while untouched.
  __shared__ int s_slot[kMaxOwned];
  __shared__ int s_scan[2][kThreads];
  __shared__ int s_n[kThreads];    // this chunk's matches, in index order
  __shared__ int s_row[kThreads];  // their owned row
  __shared__ unsigned char s_first[kThreads];
  const long long r0 = (long long)blockIdx.x * rows_per_block;
  const long long r1 = r0 + rows_per_block < rows ? r0 + rows_per_block : rows;
  const int owned = r0 < r1 ? (int)(r1 - r0) : 0;
  const int t = threadIdx.x;
  for (long long o = blockIdx.y; o < outer; o += gridDim.y) {
    for (int r = t; r < owned; r += kThreads) s_slot[r] = -1;
    __syncthreads();
    for (long long chunk = 0; chunk < count; chunk += kThreads) {
      const long long n = chunk + t;
      int mine = -1;
      if (n < count) {
        const long long r = llmc_wrap_index(indices[n], rows);
        if (r >= r0 && r < r1) mine = (int)(r - r0);
      }
      // Inclusive scan of the match flags (Hillis-Steele): the matches keep
      // their index order.
      int cur = 0;
      s_scan[0][t] = mine >= 0;
      __syncthreads();
      for (int off = 1; off < kThreads; off <<= 1) {
        const int v = s_scan[cur][t] + (t >= off ? s_scan[cur][t - off] : 0);
        s_scan[cur ^ 1][t] = v;
        cur ^= 1;
        __syncthreads();
      }
      const int matches = s_scan[cur][kThreads - 1];
      if (mine >= 0) {
        s_n[s_scan[cur][t] - 1] = (int)t;
        s_row[s_scan[cur][t] - 1] = mine;
      }
      __syncthreads();
      if (t == 0)
        for (int k = 0; k < matches; ++k) {
          const int r = s_row[k];
          s_first[k] = s_slot[r] < 0;
          if (s_slot[r] < 0) s_slot[r] = (int)(chunk + s_n[k]);
        }
      __syncthreads();
      // Every thread keeps the same columns in every row: no barrier is
      // needed between the rows' updates.
      for (int k = 0; k < matches; ++k) {
        const long long sn = chunk + s_n[k];
        const long long r = r0 + s_row[k];
        const V* from = reinterpret_cast<const V*>(src) + (o * count + sn) * kRowVec;
        // kUnroll vectors per thread in flight: a match is a dependent
        // read-modify-write of one row, latency-bound without them.
        if (kScratch) {
          typedef LlmcVec<float, kVec> A;
          A* acc = reinterpret_cast<A*>(scratch + (o * count + s_slot[s_row[k]]) * kInner);
          const bool first = s_first[k];
          for (long long c0 = t; c0 < kRowVec; c0 += (long long)kThreads * kUnroll) {
            V v[kUnroll];
            A a[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
              const long long c = c0 + (long long)u * kThreads;
              if (c < kRowVec) {
                v[u] = from[c];
                if (!first) a[u] = acc[c];
              }
            }
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
              const long long c = c0 + (long long)u * kThreads;
              if (c >= kRowVec) continue;
#pragma unroll
              for (int e = 0; e < kVec; ++e) a[u].v[e] = first ? toF(v[u].v[e]) : a[u].v[e] + toF(v[u].v[e]);
              acc[c] = a[u];
            }
          }
        } else {
          V* to = reinterpret_cast<V*>(out) + (o * rows + r) * kRowVec;
          const V* b = reinterpret_cast<const V*>(base) + (o * rows + r) * kRowVec;
          const bool first = s_first[k];
          for (long long c0 = t; c0 < kRowVec; c0 += (long long)kThreads * kUnroll) {
            V v[kUnroll], w[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
              const long long c = c0 + (long long)u * kThreads;
              if (c < kRowVec) {
                v[u] = from[c];
                w[u] = first ? (kZeroBase ? zero : b[c]) : to[c];
              }
            }
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
              const long long c = c0 + (long long)u * kThreads;
              if (c >= kRowVec) continue;
#pragma unroll
              for (int e = 0; e < kVec; ++e) w[u].v[e] = fromF<T>(toF(w[u].v[e]) + toF(v[u].v[e]));
              to[c] = w[u];
            }
          }
        }
      }
      __syncthreads();
    }
    // Rows without a match are the base's (nothing to do in place); 16-bit
    // rows with one get base + their fp32 sum, rounded once.
    for (int r = 0; r < owned; ++r) {
      const int slot = s_slot[r];
      if (slot >= 0 && !kScratch) continue;
      if (slot < 0 && out == base && !kZeroBase) continue;
      V* to = reinterpret_cast<V*>(out) + (o * rows + r0 + r) * kRowVec;
      const V* b = reinterpret_cast<const V*>(base) + (o * rows + r0 + r) * kRowVec;
      if (slot < 0) {
        for (long long c = t; c < kRowVec; c += kThreads) to[c] = kZeroBase ? zero : b[c];
        continue;
      }
      const LlmcVec<float, kVec>* acc = reinterpret_cast<const LlmcVec<float, kVec>*>(scratch + (o * count + slot) * kInner);
      for (long long c = t; c < kRowVec; c += kThreads) {
        V w = kZeroBase ? zero : b[c];
        const LlmcVec<float, kVec> a = acc[c];
#pragma unroll
        for (int e = 0; e < kVec; ++e) w.v[e] = fromF<T>(toF(w.v[e]) + a.v[e]);
        to[c] = w;
      }
    }
    __syncthreads();
  }
}
)CUDA";
  }
  const char *what = c.accumulate
                         ? "// llmc index_add: out = base; out[o, idx[n], :] += src[o, n, :] in the order of n\n"
                           "// (deterministic; 16-bit sums in fp32, rounded once). Bad index: skipped.\n"
                         : "// llmc index_copy: out[o, idx[n], :] = src[o, n, :] (out already holds base).\n"
                           "// Bad index: skipped.\n";
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble(what, Header(c), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> IndexPutLaunch(const IndexPutConfig &c, int64_t outer, int64_t rows, int64_t count) {
  if (absl::Status st = CheckConfig(c); !st.ok()) return st;
  const int64_t gy = std::clamp<int64_t>(outer, 1, 65535);
  if (!c.accumulate) {
    const int64_t work = std::max<int64_t>(count * (c.inner / Vec(c)), 1);
    const int64_t gx = std::min<int64_t>(CeilDiv(work, kCopyThreads), CeilDiv(4096, gy));
    return Dims(std::max<int64_t>(gx, 1), gy, 1, kCopyThreads);
  }
  if (count > int64_t{2147483647})
    return Unsupported("index_put: accumulate with " + std::to_string(count) + " indices; at most 2^31 - 1");
  const int64_t per = IndexAddRowsPerBlock(outer, rows);
  return Dims(CeilDiv(std::max<int64_t>(rows, 1), per), gy, 1, kAddThreads);
}

} // namespace llmc::cuda
