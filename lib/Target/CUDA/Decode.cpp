//===- Decode.cpp - bandwidth-oriented split-KV flash-decoding -------------===//
//
// Flash-decoding (Dao, Haziza, Massa, Sizov 2023) for q_len 1..16 against a
// long KV cache, designed as a stream over the cache:
//  * a lane group of `lanes` lanes loads one K row and one V row with
//    coalesced vector loads (16 bytes per lane where the head dim allows), so
//    one warp instruction reads 32 / lanes whole rows;
//  * q . k is reduced with xor shuffles inside the lane group; every lane
//    group keeps its own online softmax (max, sum, O) in the exp2 domain with
//    fp32 accumulation, so the loop needs no cross-group communication;
//  * `unroll` key slots per lane per tile: all K and V loads of a tile are
//    issued before the first is used (memory-level parallelism; a register
//    double buffer was tried and needed ~224 registers for the same bytes in
//    flight, halving occupancy);
//  * all group_size * q_len query rows of a kv head live in one block (GQA:
//    K/V read once), split over warps only when Q and O would not fit in
//    registers (row_sets > 1);
//  * at the end, lane groups merge with shuffles and warps through shared
//    memory, and the block writes its unnormalized partial (acc, max, sum).
// Phase 2 merges the splits (one block per query row).
// See include/llmc/Target/CUDA/Decode.h for layouts and arguments.
//
//===----------------------------------------------------------------------===//

#include "llmc/Target/CUDA/Decode.h"

#include "Internal.h"

#include <algorithm>
#include <sstream>
#include <tuple>

namespace llmc::cuda {
using namespace detail;

namespace {
constexpr int kWarps = 4;
constexpr int kCombineThreads = 128;
// Registers per lane: fp32 Q values (and as many O values) of its rows: 16
// if the layout allows, else 32; K (and as many V) bytes of one tile: 64,
// i.e. 32 registers of loads in flight per lane, and at most 32 scores
// (unroll * rows_per_warp). ptxas then uses 128-170 registers (3-4 blocks,
// 12-16 warps per SM) and a warp has 4 KB of loads in flight per tile;
// 128 bytes per tile needed ~250 registers for group 4.
constexpr int kQoBudgets[] = {16, 32};
constexpr int kTileBytes = 64;  // K bytes per lane per tile (single buffer)
constexpr int kMaxScores = 32;

const char *KvLenTag(KvLenSource s) {
  switch (s) {
  case KvLenSource::kArg: return "lenarg";
  case KvLenSource::kDeviceI32: return "leni32";
  case KvLenSource::kDeviceI64: return "leni64";
  case KvLenSource::kPerBatchI32: return "pblen32";
  case KvLenSource::kPerBatchI64: return "pblen64";
  }
  return "?";
}

std::string KvLenExpr(KvLenSource s) {
  switch (s) {
  case KvLenSource::kArg: return "kv_len_arg";
  case KvLenSource::kDeviceI32: return "(int64_t)reinterpret_cast<const int32_t*>(kv_len_ptr)[0]";
  case KvLenSource::kDeviceI64: return "(int64_t)reinterpret_cast<const int64_t*>(kv_len_ptr)[0]";
  case KvLenSource::kPerBatchI32: return "(int64_t)reinterpret_cast<const int32_t*>(kv_len_ptr)[b]";
  case KvLenSource::kPerBatchI64: return "(int64_t)reinterpret_cast<const int64_t*>(kv_len_ptr)[b]";
  }
  return "0";
}

int64_t Rows(const DecodeConfig &c) { return c.group_size * c.q_len; }

int64_t SmemBytes(const DecodeConfig &c, const FlashDecodeGeometry &g) {
  return int64_t{g.streams} * Rows(c) * (c.head_dim + 2) * 4;
}

std::string ReplaceAll(std::string s, const std::string &from, const std::string &to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

// Device code shared by the split kernel: tile load and tile update. All
// loops have compile-time trip counts so the arrays stay in registers.
constexpr const char *kSplitHelpers = R"CUDA(
typedef LlmcVec<T, kVec> Vec;

// Loads key slots u = 0..kU-1 of one tile: key j = key0 + u * kKeysPerLoad
// (key0 already includes this lane's group), vectors i*kLanes + lg of the
// row. Keys >= j1 and vectors past the row are zero (never read).
LLMC_DEV void fdLoadTile(Vec (&kt)[kU][kNV], Vec (&vt)[kU][kNV], const T* __restrict__ kb,
                         const T* __restrict__ vb, int64_t row_stride, int64_t key0, int64_t j1, int lg) {
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int64_t j = key0 + (int64_t)u * kKeysPerLoad;
    const Vec* kr = reinterpret_cast<const Vec*>(kb + j * row_stride);
    const Vec* vr = reinterpret_cast<const Vec*>(vb + j * row_stride);
#pragma unroll
    for (int i = 0; i < kNV; ++i) {
      const int vi = i * kLanes + lg;
      if (j < j1 && (kRowVecs % kLanes == 0 || vi < kRowVecs)) {
        kt[u][i] = kr[vi];
        vt[u][i] = vr[vi];
      } else {
        kt[u][i] = Vec{};
        vt[u][i] = Vec{};
      }
    }
  }
}

// Online-softmax update of this lane group's state with one tile.
// q is pre-scaled by scale*log2(e), so scores are in log2 units.
LLMC_DEV void fdTile(const Vec (&kt)[kU][kNV], const Vec (&vt)[kU][kNV], const float (&q)[kRowsW][kPer],
                     float (&acc)[kRowsW][kPer], float (&m)[kRowsW], float (&l)[kRowsW], int64_t key0,
                     int64_t j1, int64_t causal_base, int row0) {
  float s[kU][kRowsW];
#pragma unroll
  for (int u = 0; u < kU; ++u) {
#pragma unroll
    for (int r = 0; r < kRowsW; ++r) s[u][r] = 0.0f;
#pragma unroll
    for (int i = 0; i < kNV; ++i)
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float kf = toF(kt[u][i].v[e]);
#pragma unroll
        for (int r = 0; r < kRowsW; ++r) s[u][r] += q[r][i * kVec + e] * kf;
      }
  }
  // q . k over the lane group (every lane of the group gets the full sum)
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1)
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int r = 0; r < kRowsW; ++r) s[u][r] += __shfl_xor_sync(0xffffffffu, s[u][r], o);
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int64_t j = key0 + (int64_t)u * kKeysPerLoad;
#pragma unroll
    for (int r = 0; r < kRowsW; ++r) {
      bool visible = j < j1;
      if (kCausal) visible = visible && j <= (int64_t)((row0 + r) / kGroup) + causal_base;
      if (!visible) s[u][r] = -LLMC_INF;
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsW; ++r) {
    float mx = m[r];
#pragma unroll
    for (int u = 0; u < kU; ++u) mx = fmaxf(mx, s[u][r]);
    const float mu = mx == -LLMC_INF ? 0.0f : mx;
    const float alpha = exp2f(m[r] - mu);
    m[r] = mx;
    float ls = 0.0f;
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      s[u][r] = exp2f(s[u][r] - mu);  // p
      ls += s[u][r];
    }
    l[r] = l[r] * alpha + ls;
#pragma unroll
    for (int d = 0; d < kPer; ++d) acc[r][d] *= alpha;
  }
#pragma unroll
  for (int u = 0; u < kU; ++u)
#pragma unroll
    for (int i = 0; i < kNV; ++i)
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float vf = toF(vt[u][i].v[e]);
#pragma unroll
        for (int r = 0; r < kRowsW; ++r) acc[r][i * kVec + e] += s[u][r] * vf;
      }
}
)CUDA";

// An fp8 K/V vector to fp32, four elements at a time from each 32-bit word
// of the loaded vector: e4m3 pairs through one cvt.rn.f16x2.e4m3x2 each on
// sm_89+ (PTX ISA: the upper byte becomes the upper f16), e5m2 bytes moved
// into the upper halves of f16x2 words by __byte_perm (e5m2 is the upper
// byte of an f16), then f16 -> f32. Taking the bytes one at a time (toF per
// element) made ptxas unpack every byte of a tile into its own register
// (231 registers instead of 137 for head dim 128, 4 key slots) and convert
// one element per instruction. Below sm_89, and on the CPU emulator, the
// pair conversion is computed per byte with the instruction's semantics.
constexpr const char *kFp8KvToFloat = R"CUDA(
// Two e4m3 codes (bits 0..7 and 8..15 of `pair`) as an f16x2 word: the
// first in the low half. Below sm_89 and on the emulator, the instruction's
// semantics computed per byte.
LLMC_DEV uint32_t fdE4m3x2ToF16x2(uint32_t pair) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t h2;
  asm("{.reg .b16 a;\n cvt.u16.u32 a, %1;\n cvt.rn.f16x2.e4m3x2 %0, a;}" : "=r"(h2) : "r"(pair));
  return h2;
#else
  fp8e4m3 lo, hi;
  lo.bits = (uint8_t)(pair & 0xffu);
  hi.bits = (uint8_t)((pair >> 8) & 0xffu);
  return (uint32_t)fromF<f16>(toF(lo)).bits | ((uint32_t)fromF<f16>(toF(hi)).bits << 16);
#endif
}
LLMC_DEV void fdF16x2ToF(uint32_t h2, float* f) {
  f16 lo, hi;
  lo.bits = (uint16_t)(h2 & 0xffffu);
  hi.bits = (uint16_t)(h2 >> 16);
  f[0] = toF(lo);
  f[1] = toF(hi);
}
// Elements 0..3 of word w (element 0 in its low byte).
LLMC_DEV void fdWordToF(fp8e4m3, uint32_t w, float* f) {
  fdF16x2ToF(fdE4m3x2ToF16x2(w & 0xffffu), f);
  fdF16x2ToF(fdE4m3x2ToF16x2(w >> 16), f + 2);
}
LLMC_DEV void fdWordToF(fp8e5m2, uint32_t w, float* f) {
  fdF16x2ToF(__byte_perm(w, 0u, 0x1404u), f);  // bytes 0, 1 -> bits 8..15, 24..31
  fdF16x2ToF(__byte_perm(w, 0u, 0x3424u), f + 2);
}
LLMC_DEV void fdKvToF(const KvVec& x, float (&f)[kVec]) {
  if (kVec % 4 == 0) {
    // KvVec is aligned to min(kVec, 16) bytes: its words are aligned.
    const uint32_t* w = reinterpret_cast<const uint32_t*>(x.v);
#pragma unroll
    for (int p = 0; p < kVec / 4; ++p) fdWordToF(KvT{}, w[p], &f[4 * p]);
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) f[e] = toF(x.v[e]);
  }
}
)CUDA";

constexpr const char *kSplitBody = R"CUDA(
  // Block = (split, kv head, batch). Row r = qi * kGroup + g: query qi, q head hk * kGroup + g.
  // Warp w: row set w % kRowSets (rows row0 .. row0 + kRowsW - 1), key stream w / kRowSets.
  extern __shared__ __align__(16) float dsmem[];
  float* sAcc = dsmem;                               // [kStreams][kRows][kHeadDim]
  float* sML = sAcc + kStreams * kRows * kHeadDim;   // [kStreams][kRows][2]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = lane / kLanes, lg = lane % kLanes;
  const int row0 = (warp % kRowSets) * kRowsW, stream = warp / kRowSets;
  const int split = blockIdx.x, hk = blockIdx.y;
  const int64_t b = blockIdx.z;
  const int heads_q = heads_kv * kGroup;
  int64_t L = KV_LEN_EXPR;                           // valid cache rows
  L = L < 0 ? 0 : (L > max_seq ? max_seq : L);
  const float scale_log2 = scale * LLMC_LOG2E;

  // This split's keys [j0, j1); chunk is a multiple of kTileKeys.
  int64_t chunk = (L + num_splits - 1) / num_splits;
  chunk = (chunk + kTileKeys - 1) / kTileKeys * kTileKeys;
  const int64_t j0 = (int64_t)split * chunk;
  const int64_t j1 = j0 + chunk < L ? j0 + chunk : L;
  const int64_t row_stride = (int64_t)heads_kv * kHeadDim;
  const T* kb = k + (b * max_seq * heads_kv + hk) * (int64_t)kHeadDim;
  const T* vb = v + (b * max_seq * heads_kv + hk) * (int64_t)kHeadDim;

  // Tiles of this warp: j0 + (stream + t * kStreams) * kTileKeys, t = 0 .. nt-1.
  const int64_t first = j0 + (int64_t)stream * kTileKeys;
  const int64_t tstride = (int64_t)kStreams * kTileKeys;
  const int64_t nt = j1 > first ? (j1 - first + tstride - 1) / tstride : 0;
  Vec kt[kU][kNV], vt[kU][kNV];

  float q[kRowsW][kPer], acc[kRowsW][kPer], m[kRowsW], l[kRowsW];
#pragma unroll
  for (int r = 0; r < kRowsW; ++r) {
    const int row = row0 + r;
    const int qi = row / kGroup, h = hk * kGroup + row % kGroup;
    const Vec* qr = reinterpret_cast<const Vec*>(q_in + ((b * kQLen + qi) * heads_q + h) * (int64_t)kHeadDim);
#pragma unroll
    for (int i = 0; i < kNV; ++i) {
      const int vi = i * kLanes + lg;
      Vec qv = Vec{};
      if (row < kRows && (kRowVecs % kLanes == 0 || vi < kRowVecs)) qv = qr[vi];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        q[r][i * kVec + e] = toF(qv.v[e]) * scale_log2;
        acc[r][i * kVec + e] = 0.0f;
      }
    }
    m[r] = -LLMC_INF;
    l[r] = 0.0f;
  }

  // One tile = kU key slots of kKeysPerLoad rows: all its K and V loads are
  // issued before any is used (kU * kNV * 2 vector loads in flight per lane).
  const int64_t causal_base = L - kQLen;
  for (int64_t t = 0; t < nt; ++t) {
    const int64_t key0 = first + t * tstride + grp;
    fdLoadTile(kt, vt, kb, vb, row_stride, key0, j1, lg);
    fdTile(kt, vt, q, acc, m, l, key0, j1, causal_base, row0);
  }

  // ---- merge the lane groups of the warp (xor over the group bits) ----
#pragma unroll
  for (int r = 0; r < kRowsW; ++r) {
    float mw = m[r];
#pragma unroll
    for (int o = kLanes; o < 32; o <<= 1) mw = fmaxf(mw, __shfl_xor_sync(0xffffffffu, mw, o));
    const float f = m[r] == -LLMC_INF ? 0.0f : exp2f(m[r] - mw);
    float lw = l[r] * f;
#pragma unroll
    for (int o = kLanes; o < 32; o <<= 1) lw += __shfl_xor_sync(0xffffffffu, lw, o);
#pragma unroll
    for (int d = 0; d < kPer; ++d) {
      float a = acc[r][d] * f;
#pragma unroll
      for (int o = kLanes; o < 32; o <<= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
      acc[r][d] = a;
    }
    m[r] = mw;
    l[r] = lw;
  }
  if (grp == 0) {
#pragma unroll
    for (int r = 0; r < kRowsW; ++r) {
      const int row = row0 + r;
      if (row >= kRows) break;
      float* sa = sAcc + (stream * kRows + row) * kHeadDim;
#pragma unroll
      for (int i = 0; i < kNV; ++i) {
        const int vi = i * kLanes + lg;
        if (kRowVecs % kLanes == 0 || vi < kRowVecs)
#pragma unroll
          for (int e = 0; e < kVec; ++e) sa[vi * kVec + e] = acc[r][i * kVec + e];
      }
      if (lg == 0) {
        sML[(stream * kRows + row) * 2 + 0] = m[r];
        sML[(stream * kRows + row) * 2 + 1] = l[r];
      }
    }
  }
  __syncthreads();

  // ---- merge the key streams; write partials [B, Hq, q_len, splits, D] and (max, sum) ----
  for (int i = tid; i < kRows * kHeadDim; i += kThreads) {
    const int r = i / kHeadDim, d = i % kHeadDim;
    const int qi = r / kGroup, h = hk * kGroup + r % kGroup;
    float M = -LLMC_INF;
#pragma unroll
    for (int s = 0; s < kStreams; ++s) M = fmaxf(M, sML[(s * kRows + r) * 2]);
    float a = 0.0f, S = 0.0f;
#pragma unroll
    for (int s = 0; s < kStreams; ++s) {
      const float ms = sML[(s * kRows + r) * 2];
      if (ms != -LLMC_INF) {
        const float w = exp2f(ms - M);
        a += sAcc[(s * kRows + r) * kHeadDim + d] * w;
        S += sML[(s * kRows + r) * 2 + 1] * w;
      }
    }
    const int64_t prow = ((b * heads_q + h) * kQLen + qi) * num_splits + split;
    partial_acc[prow * kHeadDim + d] = a;
    if (d == 0) {
      partial_ml[prow * 2 + 0] = M;
      partial_ml[prow * 2 + 1] = S;
    }
  }
}
)CUDA";

// Phase 2 for one query row, shared by the combine kernel and the split
// kernel's fused combine (DecodeConfig::fused_combine): its splits' partials
// are rows prow0 .. prow0 + num_splits - 1. Reads go to L2 (__ldcg): in the
// fused form other blocks of the same launch wrote them.
constexpr const char *kCombineRow = R"CUDA(
// out = sum_s w_s acc_s / sum_s w_s l_s, w_s = exp2(m_s - M); head dims
// t, t + nthreads, ... of the row.
LLMC_DEV void fdCombineRow(T* op, const float* partial_acc, const float* partial_ml, int64_t prow0,
                           int num_splits, int t, int nthreads) {
  float M = -LLMC_INF;
  for (int s = 0; s < num_splits; ++s) M = fmaxf(M, __ldcg(partial_ml + (prow0 + s) * 2));
  float S = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float ms = __ldcg(partial_ml + (prow0 + s) * 2);
    if (ms != -LLMC_INF) S += __ldcg(partial_ml + (prow0 + s) * 2 + 1) * exp2f(ms - M);
  }
  const float inv = S > 0.0f ? 1.0f / S : 0.0f;  // no visible key -> 0
  for (int d = t; d < kHeadDim; d += nthreads) {
    float a = 0.0f;
    for (int s = 0; s < num_splits; ++s) {
      const float ms = __ldcg(partial_ml + (prow0 + s) * 2);
      if (ms != -LLMC_INF) a += __ldcg(partial_acc + (prow0 + s) * kHeadDim + d) * exp2f(ms - M);
    }
    op[d] = fromF<T>(a * inv);
  }
}
)CUDA";

constexpr const char *kCombineBody = R"CUDA(
  // Block = one query row (b, h, qi).
  const int heads_q = heads_kv * kGroup;
  const int64_t qi = blockIdx.x % kQLen;
  const int64_t h = (blockIdx.x / kQLen) % heads_q;
  const int64_t b = blockIdx.x / ((int64_t)kQLen * heads_q);
  fdCombineRow(out + ((b * kQLen + qi) * heads_q + h) * (int64_t)kHeadDim, partial_acc, partial_ml,
               (int64_t)blockIdx.x * num_splits, num_splits, threadIdx.x, blockDim.x);
}
)CUDA";

// DecodeConfig::fused_combine: appended to the split kernel's body (the
// threadFenceReduction pattern of the CUDA samples). Every thread publishes
// its partials (fence) before the block counts itself on its (batch, kv
// head) semaphore; atomicInc wraps the count back to zero at the last split,
// so the semaphore is zero again for the next launch with no second store.
// The block that counts last fences (acquire), then merges every split of
// its kRows query rows with the combine kernel's fdCombineRow (bitwise the
// same output).
constexpr const char *kFusedCombineTail = R"CUDA(
  // ---- fused combine: the last split of this (batch, kv head) merges the splits ----
  __threadfence();  // this thread's partials are visible device-wide ...
  __syncthreads();  // ... and so are the whole block's, before it is counted
  __shared__ unsigned int fdLast;
  if (tid == 0) {
    const unsigned int last = (unsigned int)num_splits - 1u;
    fdLast = atomicInc(semaphores + b * heads_kv + hk, last) == last;  // wraps to 0 at the last
    __threadfence();  // the other splits' partials, published before their counts
  }
  __syncthreads();
  if (!fdLast) return;
  for (int r = 0; r < kRows; ++r) {
    const int qi = r / kGroup, h = hk * kGroup + r % kGroup;
    fdCombineRow(out + ((b * kQLen + qi) * heads_q + h) * (int64_t)kHeadDim, partial_acc, partial_ml,
                 ((b * heads_q + h) * kQLen + qi) * num_splits, num_splits, tid, kThreads);
  }
)CUDA";

// __launch_bounds__ minimum blocks per SM. Without it ptxas sometimes picks
// an occupancy step (96 or 168 registers) that spills a few bytes; with 3
// (<= 168 registers) layouts of <= 4 rows per warp (<= 2 when causal: the
// mask adds registers) compile without spills at 95-168 registers on sm_80
// and sm_90; the others are left to ptxas (up to ~220 registers). A mask
// counts as causal, and so does a paged cache whose rows are split over
// warps (group 8: 8-68 spill bytes at 168 registers; with one row set the
// page ids fit).
int MinBlocks(const FlashDecodeGeometry &g, bool causal) {
  return g.rows_per_warp <= (causal ? 2 : 4) ? 3 : 1;
}

// MinBlocks for c's kernel: causal over several query rows, a mask, or a
// paged cache with its rows split over warps count as causal.
int MinBlocksOf(const DecodeConfig &c, const FlashDecodeGeometry &g) {
  return MinBlocks(g, (c.causal && c.q_len > 1) || c.has_mask || (c.paged && g.row_sets > 1));
}

struct Candidate {
  FlashDecodeGeometry g;
  double waste = 0;
};

// The bytes of one K/V element: loads are sized by the cache's type (an fp8
// cache gets 16 elements per 16-byte load), Q and O are fp32 in registers.
int KvSize(const DecodeConfig &c) { return ScalarSize(c.kv_fp8.value_or(c.dtype)); }

// Best (vec, lanes) for rows_per_warp rows, or false. lanes <= max_lanes.
bool PickLayout(const DecodeConfig &c, int rows_per_warp, int max_lanes, int qo_budget, Candidate *out) {
  const int esize = KvSize(c);
  const int v0 = VecWidth(c.head_dim, esize);
  const int min_vec = std::max(1, std::min(v0, 4 / esize));  // >= 4-byte loads unless D forbids
  bool found = false;
  for (int vec = v0; vec >= min_vec; vec /= 2) {
    const int64_t row_vecs = c.head_dim / vec;
    for (int lanes = 1; lanes <= max_lanes; lanes *= 2) {
      const int64_t nv = CeilDiv(row_vecs, lanes);
      const int64_t per = nv * vec;
      if (rows_per_warp * per > qo_budget || per * esize > kTileBytes) continue;
      Candidate cand;
      cand.g.lanes = lanes;
      cand.g.vec = vec;
      cand.g.vecs_per_lane = static_cast<int>(nv);
      cand.waste = 1.0 - double(c.head_dim) / double(lanes * per);
      // Prefer little idle lanes (<= 1/4), then wide loads, then few lanes
      // per row (fewer shuffles: log2(lanes) per row per key slot).
      auto key = [](const Candidate &x) {
        return std::make_tuple(x.waste > 0.4, -x.g.vec, x.waste, x.g.lanes);
      };
      if (!found || key(cand) < key(*out)) *out = cand;
      found = true;
      break;  // smallest feasible lane count for this vec
    }
  }
  return found;
}
} // namespace

namespace {
/// The ranges the kernel is written for; a register layout must fit too.
bool IsIndexType(ScalarType t) { return t == ScalarType::i32 || t == ScalarType::i64; }

bool InSupportedRange(const DecodeConfig &c) {
  if (c.kv_fp8 && (!c.paged || (*c.kv_fp8 != ScalarType::f8e4m3 && *c.kv_fp8 != ScalarType::f8e5m2)))
    return false;
  return (c.dtype == ScalarType::bf16 || c.dtype == ScalarType::f16 || c.dtype == ScalarType::f32) &&
         c.head_dim >= 1 && c.head_dim <= 512 && c.group_size >= 1 && c.q_len >= 1 &&
         Rows(c) * c.head_dim <= 4096 &&
         (!c.paged || (!c.kv_hnd && !c.has_mask && !c.fused_combine && c.page_size >= 1 &&
                       IsIndexType(c.block_table) && IsIndexType(c.cu_seqlens) &&
                       IsIndexType(c.seq_lens)));
}
} // namespace

bool FlashDecodeSupported(const DecodeConfig &c) { return FlashDecodeGeometryOf(c).ok(); }

absl::StatusOr<FlashDecodeGeometry> FlashDecodeGeometryOf(const DecodeConfig &c) {
  if (!InSupportedRange(c))
    return Invalid("flash decode: unsupported config (see FlashDecodeSupported)");
  const int64_t rows = Rows(c);
  Candidate best;
  bool found = false;
  // Lane groups of 32 cost 5 shuffles per row per key; splitting the rows
  // over warps (re-reading K/V from L1/L2) is cheaper, so try that first.
  for (int max_lanes : {16, 32}) {
    for (int row_sets : {1, 2, 4}) {
      const int rw = static_cast<int>(CeilDiv(rows, row_sets));
      if (row_sets > 1 && CeilDiv(rows, row_sets / 2) == rw) continue;  // no fewer rows per warp
      for (int budget : kQoBudgets) {
        if (PickLayout(c, rw, max_lanes, budget, &best)) {
          best.g.row_sets = row_sets;
          best.g.rows_per_warp = rw;
          found = true;
          break;
        }
      }
      if (found) break;
    }
    if (found) break;
  }
  if (!found) return Unsupported("flash decode: no register layout for this config");
  FlashDecodeGeometry &g = best.g;
  // A masked block of more than 8 rows per warp (group 8 x 8 queries) spills
  // on sm_80; FlashAttention-2 serves those.
  if (c.has_mask && g.rows_per_warp > 8)
    return Unsupported("flash decode: no register layout for a mask with more than 8 query rows per warp");
  // K register bytes per lane per slot: a load narrower than 4 bytes (an
  // fp8 head dim that is no multiple of 4) still takes a whole register.
  const int load_bytes = g.vec * KvSize(c);
  const int slot_bytes = g.vecs_per_lane * (c.kv_fp8 ? std::max(load_bytes, 4) : load_bytes);
  // A mask costs registers (its pointer, strides and per-slot liveness):
  // half the scores in flight keeps its kernels spill-free.
  int max_scores = c.has_mask ? kMaxScores / 2 : kMaxScores;
  // An fp8 cache fills kTileBytes with twice the key slots of a 16-bit one,
  // and every slot costs a page id, an address and a score per row. Under
  // the 168-register cap of 3 blocks per SM, 4 rows per warp (GQA group 4,
  // head dim 128) compile without spills at 5 slots (167 registers) and
  // spill from 6; one row fits the 4 slots of 64 bytes at 137.
  if (c.kv_fp8 && g.rows_per_warp > 1 && MinBlocksOf(c, g) == 3)
    max_scores = std::min(max_scores, 20);
  g.unroll = std::clamp(std::min(kTileBytes / slot_bytes, max_scores / g.rows_per_warp), 1, 8);
  g.streams = kWarps / g.row_sets;
  g.tile_keys = g.unroll * (32 / g.lanes);
  return g;
}

std::string FlashDecodeGeometryName(const FlashDecodeGeometry &g) {
  return "l" + std::to_string(g.lanes) + "v" + std::to_string(g.vec) + "n" + std::to_string(g.vecs_per_lane) + "r" +
         std::to_string(g.row_sets) + "u" + std::to_string(g.unroll);
}

namespace {
// The split kernel's helpers and body for c's variants (HND cache, mask);
// the base text when c has neither, so existing kernels stay byte-identical.
absl::StatusOr<std::pair<std::string, std::string>> SplitSource(const DecodeConfig &c) {
  std::string helpers = kSplitHelpers, body = kSplitBody;
  if (c.paged) {
    // Key j's row is found through the block table; the queries of sequence
    // b are taken kQLen rows at a time from packed row cu_seqlens[b].
    LLMC_ASSIGN_OR_RETURN(
        helpers,
        SourceVariant(helpers, "flash-decode paged",
                      {{"typedef LlmcVec<T, kVec> Vec;\n",
                        "typedef LlmcVec<T, kVec> Vec;\n\n"
                        "// Page ids of this lane's key slots u of the tile at key0 (-1: key >= j1 or an\n"
                        "// id outside [0, num_pages), read as zeros). Loaded one tile ahead so that the\n"
                        "// K/V loads of a tile never wait for the block table.\n"
                        "LLMC_DEV void fdPages(int (&pg)[kU], const BtT* __restrict__ bt, int64_t key0, int64_t j1,\n"
                        "                      int64_t num_pages) {\n"
                        "#pragma unroll\n"
                        "  for (int u = 0; u < kU; ++u) {\n"
                        "    const int64_t j = key0 + (int64_t)u * kKeysPerLoad;\n"
                        "    const int64_t page = j < j1 ? (int64_t)bt[j / kPageSize] : -1;\n"
                        "    pg[u] = page >= 0 && page < num_pages ? (int)page : -1;\n"
                        "  }\n"
                        "}\n"},
                       {"int64_t key0, int64_t j1, int lg) {",
                        "int64_t key0, int64_t j1, int lg,\n"
                        "                         const int (&pg)[kU]) {"},
                       {"    const Vec* kr = reinterpret_cast<const Vec*>(kb + j * row_stride);\n"
                        "    const Vec* vr = reinterpret_cast<const Vec*>(vb + j * row_stride);\n",
                        "    const bool ok = pg[u] >= 0;  // key j < j1 on a valid page\n"
                        "    const int64_t pr = ok ? (int64_t)pg[u] * kPageSize + j % kPageSize : 0;\n"
                        "    const Vec* kr = reinterpret_cast<const Vec*>(kb + pr * row_stride);\n"
                        "    const Vec* vr = reinterpret_cast<const Vec*>(vb + pr * row_stride);\n"},
                       {"      if (j < j1 && (kRowVecs % kLanes == 0 || vi < kRowVecs)) {",
                        "      if (ok && (kRowVecs % kLanes == 0 || vi < kRowVecs)) {"}}));
    LLMC_ASSIGN_OR_RETURN(
        body, SourceVariant(body, "flash-decode paged",
        {{"  int64_t L = KV_LEN_EXPR;                           // valid cache rows\n",
          "  // Sequence b: n_b new tokens from packed row tok0, L keys in its pages.\n"
          "  const int64_t tok0 = (int64_t)cu_seqlens[b], nb = (int64_t)cu_seqlens[b + 1] - tok0;\n"
          "  const int64_t max_seq = max_pages * kPageSize;\n"
          "  const BtT* __restrict__ bt = block_table + b * max_pages;\n"
          "  int64_t L = (int64_t)seq_lens[b];                 // valid keys\n"},
         {"const T* kb = k + (b * max_seq * heads_kv + hk) * (int64_t)kHeadDim;",
          "const T* kb = k + (int64_t)hk * kHeadDim;  // + page row * row_stride"},
         {"const T* vb = v + (b * max_seq * heads_kv + hk) * (int64_t)kHeadDim;",
          "const T* vb = v + (int64_t)hk * kHeadDim;"},
         {"  float q[kRowsW][kPer], acc[kRowsW][kPer], m[kRowsW], l[kRowsW];\n",
          "  for (int64_t qc = 0; qc < nb; qc += kQLen) {  // kQLen query rows at a time\n"
          "  float q[kRowsW][kPer], acc[kRowsW][kPer], m[kRowsW], l[kRowsW];\n"},
         {"q_in + ((b * kQLen + qi) * heads_q + h) * (int64_t)kHeadDim);",
          "q_in + ((tok0 + qc + qi) * heads_q + h) * (int64_t)kHeadDim);"},
         {"      if (row < kRows && (kRowVecs % kLanes == 0 || vi < kRowVecs)) qv = qr[vi];",
          "      if (row < kRows && qc + qi < nb && (kRowVecs % kLanes == 0 || vi < kRowVecs)) qv = qr[vi];"},
         {"  const int64_t causal_base = L - kQLen;\n",
          "  const int64_t causal_base = L - nb + qc;  // position of this chunk's first row\n"
          "  // One row at a time: causal is an end to the keys, not a mask.\n"
          "  const int64_t j1c = kCausalRow && causal_base + 1 < j1 ? causal_base + 1 : j1;\n"},
         {"  for (int64_t t = 0; t < nt; ++t) {\n"
          "    const int64_t key0 = first + t * tstride + grp;\n"
          "    fdLoadTile(kt, vt, kb, vb, row_stride, key0, j1, lg);\n",
          "  int pg[kU];\n"
          "  fdPages(pg, bt, first + grp, j1c, num_pages);\n"
          "  for (int64_t t = 0; t < nt; ++t) {\n"
          "    const int64_t key0 = first + t * tstride + grp;\n"
          "    fdLoadTile(kt, vt, kb, vb, row_stride, key0, j1c, lg, pg);\n"
          "    fdPages(pg, bt, key0 + tstride, j1c, num_pages);  // the next tile's, while K/V load\n"},
         {"    fdTile(kt, vt, q, acc, m, l, key0, j1, causal_base, row0);",
          "    fdTile(kt, vt, q, acc, m, l, key0, j1c, causal_base, row0);"},
         {"    float M = -LLMC_INF;\n#pragma unroll\n    for (int s = 0; s < kStreams; ++s) M = ",
          "    if (qc + qi >= nb) continue;  // past this sequence's new tokens\n"
          "    float M = -LLMC_INF;\n#pragma unroll\n    for (int s = 0; s < kStreams; ++s) M = "},
         {"    const int64_t prow = ((b * heads_q + h) * kQLen + qi) * num_splits + split;",
          "    const int64_t prow = ((tok0 + qc + qi) * heads_q + h) * num_splits + split;"},
         {"      partial_ml[prow * 2 + 1] = S;\n    }\n  }\n",
          "      partial_ml[prow * 2 + 1] = S;\n    }\n  }\n"
          "  __syncthreads();  // the next chunk reuses the shared memory\n  }\n"}}));
    if (!c.kv_fp8)
      return std::make_pair(helpers, body);
    // An fp8 KV cache: K/V rows of KvT, kVec elements per load (sized by
    // KvT, see PickLayout); the key scale folds into q (scores = q . k8 *
    // k_scale[hk]), the value scale into the partial sums (linear in v).
    LLMC_ASSIGN_OR_RETURN(
        helpers,
        SourceVariant(helpers, "flash-decode fp8 kv",
                      {{"typedef LlmcVec<T, kVec> Vec;\n",
                        "typedef LlmcVec<T, kVec> Vec;\ntypedef LlmcVec<KvT, kVec> KvVec;  // fp8 K/V\n" +
                            std::string(kFp8KvToFloat)},
                       {"LLMC_DEV void fdLoadTile(Vec (&kt)[kU][kNV], Vec (&vt)[kU][kNV], const T* __restrict__ kb,\n"
                        "                         const T* __restrict__ vb,",
                        "LLMC_DEV void fdLoadTile(KvVec (&kt)[kU][kNV], KvVec (&vt)[kU][kNV], const KvT* __restrict__ kb,\n"
                        "                         const KvT* __restrict__ vb,"},
                       {"    const Vec* kr = reinterpret_cast<const Vec*>(kb + pr * row_stride);\n"
                        "    const Vec* vr = reinterpret_cast<const Vec*>(vb + pr * row_stride);\n",
                        "    const KvVec* kr = reinterpret_cast<const KvVec*>(kb + pr * row_stride);\n"
                        "    const KvVec* vr = reinterpret_cast<const KvVec*>(vb + pr * row_stride);\n"},
                       {"        kt[u][i] = Vec{};\n        vt[u][i] = Vec{};",
                        "        kt[u][i] = KvVec{};\n        vt[u][i] = KvVec{};"},
                       {"LLMC_DEV void fdTile(const Vec (&kt)[kU][kNV], const Vec (&vt)[kU][kNV],",
                        "LLMC_DEV void fdTile(const KvVec (&kt)[kU][kNV], const KvVec (&vt)[kU][kNV],"},
                       {"    for (int i = 0; i < kNV; ++i)\n"
                        "#pragma unroll\n"
                        "      for (int e = 0; e < kVec; ++e) {\n"
                        "        const float kf = toF(kt[u][i].v[e]);\n"
                        "#pragma unroll\n"
                        "        for (int r = 0; r < kRowsW; ++r) s[u][r] += q[r][i * kVec + e] * kf;\n"
                        "      }\n",
                        "    for (int i = 0; i < kNV; ++i) {\n"
                        "      float kf[kVec];\n"
                        "      fdKvToF(kt[u][i], kf);\n"
                        "#pragma unroll\n"
                        "      for (int e = 0; e < kVec; ++e)\n"
                        "#pragma unroll\n"
                        "        for (int r = 0; r < kRowsW; ++r) s[u][r] += q[r][i * kVec + e] * kf[e];\n"
                        "    }\n"},
                       {"    for (int i = 0; i < kNV; ++i)\n"
                        "#pragma unroll\n"
                        "      for (int e = 0; e < kVec; ++e) {\n"
                        "        const float vf = toF(vt[u][i].v[e]);\n"
                        "#pragma unroll\n"
                        "        for (int r = 0; r < kRowsW; ++r) acc[r][i * kVec + e] += s[u][r] * vf;\n"
                        "      }\n",
                        "    for (int i = 0; i < kNV; ++i) {\n"
                        "      float vf[kVec];\n"
                        "      fdKvToF(vt[u][i], vf);\n"
                        "#pragma unroll\n"
                        "      for (int e = 0; e < kVec; ++e)\n"
                        "#pragma unroll\n"
                        "        for (int r = 0; r < kRowsW; ++r) acc[r][i * kVec + e] += s[u][r] * vf[e];\n"
                        "    }\n"}}));
    LLMC_ASSIGN_OR_RETURN(
        body,
        SourceVariant(body, "flash-decode fp8 kv",
                      {{"const T* kb = k + (int64_t)hk * kHeadDim;", "const KvT* kb = k + (int64_t)hk * kHeadDim;"},
                       {"const T* vb = v + (int64_t)hk * kHeadDim;", "const KvT* vb = v + (int64_t)hk * kHeadDim;"},
                       {"  const float scale_log2 = scale * LLMC_LOG2E;\n",
                        "  const float scale_log2 = scale * LLMC_LOG2E * k_scale[hk];  // fp8 keys: q . k8 * k_scale\n"
                        "  const float vscale = v_scale[hk];\n"},
                       {"  Vec kt[kU][kNV], vt[kU][kNV];", "  KvVec kt[kU][kNV], vt[kU][kNV];"},
                       {"    partial_acc[prow * kHeadDim + d] = a;", "    partial_acc[prow * kHeadDim + d] = a * vscale;"}}));
    return std::make_pair(helpers, body);
  }
  if (c.kv_hnd) {
    const std::string base = "(b * max_seq * heads_kv + hk) * (int64_t)kHeadDim;";
    const std::string hnd = "(b * heads_kv + hk) * max_seq * (int64_t)kHeadDim;  // HND";
    LLMC_ASSIGN_OR_RETURN(
        body, SourceVariant(body, "flash-decode kv_hnd",
                            {{"const int64_t row_stride = (int64_t)heads_kv * kHeadDim;",
                              "const int64_t row_stride = kHeadDim;  // HND [B, Hkv, Smax, D]"},
                             {"const T* kb = k + " + base, "const T* kb = k + " + hnd},
                             {"const T* vb = v + " + base, "const T* vb = v + " + hnd}}));
  }
  if (!c.has_mask) return std::make_pair(helpers, body);
  // Mask: fdMask gives row `row`'s additive mask at key j (log2 units); a
  // key slot no row of the warp sees is not loaded, and a tile no lane sees
  // is skipped whole (warp-uniform, so the shuffles stay converged).
  LLMC_ASSIGN_OR_RETURN(
      helpers,
      SourceVariant(helpers, "flash-decode mask",
                    {{"typedef LlmcVec<T, kVec> Vec;\n",
                      "typedef LlmcVec<T, kVec> Vec;\n\n"
                      "// Row `row` (query row / kGroup, q head hk * kGroup + row % kGroup) at key j.\n"
                      "LLMC_DEV float fdMask(const MaskT* __restrict__ mb, long long msh, long long msq,\n"
                      "                      int hk, int row, int64_t j) {\n"
                      "  return toF(mb[(int64_t)(hk * kGroup + row % kGroup) * msh +\n"
                      "               (int64_t)(row / kGroup) * msq + j]) * LLMC_LOG2E;\n"
                      "}\n"},
                     {"int64_t key0, int64_t j1, int lg) {",
                      "int64_t key0, int64_t j1, int lg, const bool (&live)[kU]) {"},
                     {"if (j < j1 && (kRowVecs % kLanes == 0 || vi < kRowVecs)) {",
                      "if (j < j1 && live[u] && (kRowVecs % kLanes == 0 || vi < kRowVecs)) {"},
                     {"int64_t j1, int64_t causal_base, int row0) {",
                      "int64_t j1, int64_t causal_base, int row0,\n"
                      "                     const MaskT* __restrict__ mb, long long msh, long long msq, int hk) {"},
                     {"      if (!visible) s[u][r] = -LLMC_INF;",
                      "      if (visible && row0 + r < kRows) s[u][r] += fdMask(mb, msh, msq, hk, row0 + r, j);\n"
                      "      if (!visible) s[u][r] = -LLMC_INF;"}}));
  LLMC_ASSIGN_OR_RETURN(
      body,
      SourceVariant(body, "flash-decode mask",
                    {{"    fdLoadTile(kt, vt, kb, vb, row_stride, key0, j1, lg);\n"
                      "    fdTile(kt, vt, q, acc, m, l, key0, j1, causal_base, row0);",
                      "    bool live[kU], any = false;\n"
                      "#pragma unroll\n"
                      "    for (int u = 0; u < kU; ++u) {\n"
                      "      const int64_t j = key0 + (int64_t)u * kKeysPerLoad;\n"
                      "      live[u] = false;\n"
                      "#pragma unroll\n"
                      "      for (int r = 0; r < kRowsW; ++r)\n"
                      "        if (j < j1 && row0 + r < kRows && fdMask(mb, mask_stride_h, mask_stride_q, hk, row0 + r, j) != -LLMC_INF)\n"
                      "          live[u] = true;\n"
                      "      any = any || live[u];\n"
                      "    }\n"
                      "    if (!__any_sync(0xffffffffu, any)) continue;  // nothing visible in this warp's tile\n"
                      "    fdLoadTile(kt, vt, kb, vb, row_stride, key0, j1, lg, live);\n"
                      "    fdTile(kt, vt, q, acc, m, l, key0, j1, causal_base, row0, mb, mask_stride_h, mask_stride_q, hk);"},
                     {"  const int64_t causal_base = L - kQLen;\n",
                      "  const int64_t causal_base = L - kQLen;\n"
                      "  const MaskT* __restrict__ mb = mask + b * mask_stride_b;\n"}}));
  return std::make_pair(helpers, body);
}
} // namespace

absl::StatusOr<DecodeKernels> EmitFlashDecode(const DecodeConfig &c) {
  LLMC_ASSIGN_OR_RETURN(const FlashDecodeGeometry g, FlashDecodeGeometryOf(c));
  if (c.has_mask && !IsFloatType(c.mask))
    return Invalid("flash decode: mask must be a float type");
  // Causal masks keys per row only with several rows per sequence in a
  // block; a paged block of one row ends its keys at the row's position
  // instead (kCausalRow), which the kernel name records.
  auto causalOf = [](const DecodeConfig &x) { return x.causal && x.q_len > 1; };
  auto causalTag = [](const DecodeConfig &x) { return x.causal && (x.q_len > 1 || x.paged); };
  auto tagOf = [&](const DecodeConfig &x) {
    return std::string(ScalarTypeTag(x.dtype)) + "_d" + std::to_string(x.head_dim) + "_g" +
           std::to_string(x.group_size) + "_q" + std::to_string(x.q_len) + (causalTag(x) ? "_causal" : "") +
           (x.paged ? std::string("_paged") + std::to_string(x.page_size) + "_" +
                          ScalarTypeTag(x.block_table) + ScalarTypeTag(x.cu_seqlens) +
                          ScalarTypeTag(x.seq_lens)
                    : std::string("_") + KvLenTag(x.kv_len)) +
           (x.has_mask ? std::string("_mask") + ScalarTypeTag(x.mask) : "") + (x.kv_hnd ? "_hnd" : "") +
           (x.kv_fp8 ? std::string("_kv") + ScalarTypeTag(*x.kv_fp8) : "");
  };
  // The paged combine is the dense one over T packed rows of one query.
  DecodeConfig combined = c;
  if (c.paged) {
    combined = DecodeConfig{};
    combined.dtype = c.dtype;
    combined.head_dim = c.head_dim;
    combined.group_size = c.group_size;
    combined.q_len = 1;
    combined.causal = false;
  }
  DecodeKernels k;
  k.split.name = "llmc_flashdec_split_" + tagOf(c) + (c.fused_combine ? "_fused" : "") + "_" +
                 FlashDecodeGeometryName(g);
  k.combine.name = "llmc_flashdec_combine_" + tagOf(combined);
  auto configText = [&](const DecodeConfig &x) {
    std::ostringstream cfg;
    cfg << "typedef " << CTypeName(x.dtype) << " T;\n"
        << "static constexpr int kHeadDim = " << x.head_dim << ";\n"
        << "static constexpr int kGroup = " << x.group_size << ";   // q heads per kv head\n"
        << "static constexpr int kQLen = " << x.q_len << ";\n"
        << "static constexpr int kRows = kGroup * kQLen;  // query rows per block\n"
        << "static constexpr bool kCausal = " << (causalOf(x) ? "true" : "false") << ";\n";
    return cfg.str();
  };
  std::ostringstream scfg;
  scfg << "static constexpr int kLanes = " << g.lanes << ";  // lanes per K/V row\n"
       << "static constexpr int kVec = " << g.vec << ";  // elements per load\n"
       << "static constexpr int kNV = " << g.vecs_per_lane << ";  // loads per lane per row\n"
       << "static constexpr int kPer = kNV * kVec;  // head dims per lane\n"
       << "static constexpr int kRowVecs = kHeadDim / kVec;\n"
       << "static constexpr int kRowSets = " << g.row_sets << ";\n"
       << "static constexpr int kRowsW = " << g.rows_per_warp << ";  // query rows per warp\n"
       << "static constexpr int kU = " << g.unroll << ";  // key slots per lane per tile\n"
       << "static constexpr int kWarps = " << kWarps << ";\n"
       << "static constexpr int kThreads = kWarps * 32;\n"
       << "static constexpr int kStreams = kWarps / kRowSets;  // warps splitting the keys\n"
       << "static constexpr int kKeysPerLoad = 32 / kLanes;\n"
       << "static constexpr int kTileKeys = kU * kKeysPerLoad;\n"
       << "static constexpr int kMinBlocks = " << MinBlocksOf(c, g) << ";  // per SM (register cap 65536 / (128 * kMinBlocks))\n";
  const std::string hdr =
      "// llmc flash-decoding (split-KV; Dao, Haziza, Massa, Sizov 2023) for short queries against a\n"
      "// KV cache [B, Smax, Hkv, D] of which the first kv_len rows are valid. Phase 1: block per\n"
      "// (split, kv head, batch) handles all kGroup*kQLen query rows of the kv head (K/V read once);\n"
      "// kLanes lanes read a K/V row with coalesced vector loads, per-lane-group online softmax\n"
      "// (exp2 domain, fp32), double-buffered register tiles. Phase 2 combines the splits.\n";
  if (c.has_mask) scfg << "typedef " << CTypeName(c.mask) << " MaskT;\n";
  if (c.paged)
    scfg << "static constexpr int64_t kPageSize = " << c.page_size << ";  // keys per page\n"
         << "static constexpr bool kCausalRow = " << (c.causal && c.q_len == 1 ? "true" : "false")
         << ";  // one row: causal = keys up to its position\n"
         << "typedef " << CTypeName(c.block_table) << " BtT;\n"
         << "typedef " << CTypeName(c.cu_seqlens) << " CuT;\n"
         << "typedef " << CTypeName(c.seq_lens) << " LenT;\n";
  if (c.kv_fp8) scfg << "typedef " << CTypeName(*c.kv_fp8) << " KvT;  // fp8 K/V, scaled per kv head\n";
  LLMC_ASSIGN_OR_RETURN(auto split, SplitSource(c));
  if (c.fused_combine) {
    const size_t end = split.second.rfind('}');  // the kernel's closing brace
    split.second = split.second.substr(0, end) + kFusedCombineTail + "}\n";
  }
  std::ostringstream b1;
  b1 << split.first << (c.fused_combine ? kCombineRow : "") << "\nextern \"C\" __global__ void __launch_bounds__(kThreads, kMinBlocks) " << k.split.name
     << "(\n"
     << "    float* __restrict__ partial_acc, float* __restrict__ partial_ml, const T* __restrict__ q_in,\n"
     << (c.kv_fp8 ? "    const KvT* __restrict__ k, const KvT* __restrict__ v, "
                  : "    const T* __restrict__ k, const T* __restrict__ v, ")
     << (c.paged ? "const BtT* __restrict__ block_table,\n"
                   "    const CuT* __restrict__ cu_seqlens, const LenT* __restrict__ seq_lens, long long max_pages,\n"
                   "    long long num_pages"
                 : "const void* kv_len_ptr,\n    long long kv_len_arg, long long max_seq")
     << ", int heads_kv, float scale, int num_splits"
     << (c.kv_fp8 ? ",\n    const float* __restrict__ k_scale, const float* __restrict__ v_scale" : "")
     << (c.has_mask ? ",\n    const MaskT* __restrict__ mask, long long mask_stride_b, long long mask_stride_h,\n"
                      "    long long mask_stride_q"
                    : "")
     << (c.fused_combine ? ",\n    unsigned int* __restrict__ semaphores, T* __restrict__ out" : "")
     << ") {\n"
     << ReplaceAll(split.second, "KV_LEN_EXPR", KvLenExpr(c.kv_len));
  std::ostringstream b2;
  b2 << kCombineRow << "\nextern \"C\" __global__ void __launch_bounds__(" << kCombineThreads << ") " << k.combine.name
     << "(\n    T* __restrict__ out, const float* __restrict__ partial_acc,\n"
        "    const float* __restrict__ partial_ml, int heads_kv, int num_splits) {\n"
     << kCombineBody;
  LLMC_ASSIGN_OR_RETURN(k.split.source,
                        Assemble(hdr + (c.paged ? "// Paged KV cache (block table; packed queries).\n" : "") +
                                     "// (phase 1: split)\n",
                                 configText(c) + scfg.str(), b1.str()));
  if (c.fused_combine) {
    k.combine = KernelCode{};  // merged by the split kernel's last block
    return k;
  }
  LLMC_ASSIGN_OR_RETURN(k.combine.source,
                        Assemble(hdr + "// (phase 2: combine)\n", configText(combined), b2.str()));
  return k;
}

absl::StatusOr<int> FlashDecodeNumSplits(const DecodeConfig &c, int64_t batch, int64_t heads_kv,
                                         int64_t max_kv_len, int num_sms) {
  LLMC_ASSIGN_OR_RETURN(const FlashDecodeGeometry g, FlashDecodeGeometryOf(c));
  const int64_t blocks = std::max<int64_t>(batch * heads_kv, 1);
  // A pure stream over the cache: ~4 split blocks per SM (16 warps, each with
  // two register tiles of loads in flight) saturate HBM; more splits only add
  // combine traffic. Each warp of a split should get at least 2 tiles.
  const int64_t want = std::clamp<int64_t>(CeilDiv(int64_t{4} * num_sms, blocks), 1, 256);
  const int64_t min_chunk = int64_t{2} * g.streams * g.tile_keys;
  int64_t chunk = std::max(CeilDiv(std::max<int64_t>(max_kv_len, 1), want), min_chunk);
  chunk = RoundUp(chunk, g.tile_keys);  // as the kernel rounds it
  return static_cast<int>(std::clamp<int64_t>(CeilDiv(max_kv_len, chunk), 1, 256));
}

absl::StatusOr<LaunchDims> FlashDecodeSplitLaunch(const DecodeConfig &c, int64_t batch, int64_t heads_kv, int num_splits) {
  LLMC_ASSIGN_OR_RETURN(const FlashDecodeGeometry g, FlashDecodeGeometryOf(c));
  return Dims(std::max(num_splits, 1), heads_kv, batch, kWarps * 32, SmemBytes(c, g));
}

absl::StatusOr<LaunchDims> FlashDecodeCombineLaunch(const DecodeConfig &c, int64_t batch, int64_t heads_kv) {
  return Dims(batch * heads_kv * c.group_size * c.q_len, 1, 1, kCombineThreads);
}

std::pair<int64_t, int64_t> FlashDecodeWorkspaceBytes(const DecodeConfig &c, int64_t batch, int64_t heads_kv,
                                                      int num_splits) {
  const int64_t rows = batch * heads_kv * c.group_size * c.q_len * num_splits;
  return {rows * c.head_dim * 4, rows * 2 * 4};
}

} // namespace llmc::cuda
