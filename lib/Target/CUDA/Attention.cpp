//===- Attention.cpp - FlashAttention-2 prefill ----------------------------===//
//
// Two kernels (flash-decoding for short queries is in Decode.cpp):
//  * EmitAttention, tensor-core path: FlashAttention-2 forward (Dao 2023,
//    arXiv:2307.08691) with mma.sync.m16n8k16 (bf16/f16 in, fp32 accumulate),
//    ldmatrix fragment loads, cp.async tile loads overlapping QK^T with the V
//    load and PV with the next K load, online softmax in registers.
//  * EmitAttention, simple path: one warp per query row, fp32 CUDA-core math,
//    online softmax (Milakov & Gimelshein 2018); f32 inputs and any head dim.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {

// Tiling of the tensor-core kernel, derived from an AttentionTile.
struct FaGeom {
  int block_m, block_n, warps, threads, m_tiles, stages;
  bool q_in_regs, qtile_fastest;
  int64_t stride;  // smem row stride in elements
  int64_t smem_bytes;
  int64_t accum_regs;  // fp32 O + S (+ Q fragments) per thread
};

FaGeom Geom(const AttentionConfig &c) {
  const AttentionTile t = ResolvedAttentionTile(c);
  const int64_t d = c.head_dim;
  FaGeom g;
  g.block_m = t.block_m;
  g.block_n = t.block_n;
  g.warps = t.warps;
  g.threads = 32 * t.warps;
  g.m_tiles = t.warps > 0 ? t.block_m / (16 * t.warps) : 0;
  g.stages = t.stages;
  g.qtile_fastest = t.qtile_fastest;
  // Q fragments stay in registers when they and O fit (one m16 tile, d <= 128).
  g.q_in_regs = g.m_tiles * d <= 128;
  g.stride = d + 8;  // +16 bytes per row: the 8 rows of an ldmatrix hit distinct banks
  const int64_t kv_rows = 2 * int64_t{t.stages} * t.block_n;
  // Register Q is staged through the K/V buffers, so they must hold block_m rows.
  const int64_t rows = g.q_in_regs ? std::max<int64_t>(kv_rows, t.block_m) : kv_rows + t.block_m;
  g.smem_bytes = rows * g.stride * 2;
  g.accum_regs = int64_t{g.m_tiles} * (d / 2 + t.block_n / 2) + (g.q_in_regs ? g.m_tiles * d / 4 : 0);
  return g;
}

constexpr int64_t kMaxSmemBytes = 227 * 1024;  // sm_90 opt-in limit per block
constexpr int64_t kMaxAccumRegs = 192;         // above this ptxas spills (255-register cap)

std::string MaskTag(const AttentionConfig &c) {
  return c.has_mask ? std::string("_mask") + ScalarTypeTag(c.mask) : "";
}

// Common argument list of both prefill kernels. Varlen: seq_q and seq_kv
// are each sequence's (locals of the body); the arguments are the bounds.
std::string AttentionSignature(const std::string &name, int threads, bool varlen = false) {
  std::ostringstream s;
  s << "extern \"C\" __global__ void __launch_bounds__(" << threads << ") " << name << "(\n"
    << "    T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k,\n"
       "    const T* __restrict__ v, const MaskT* __restrict__ mask,\n"
    << (varlen ? "    long long batch, long long seq_q_max, long long seq_kv_max, int heads_q, int heads_kv,\n"
               : "    long long batch, long long seq_q, long long seq_kv, int heads_q, int heads_kv,\n")
    << "    float scale, long long mask_stride_b, long long mask_stride_h,\n"
       "    long long mask_stride_q"
    << (varlen ? ",\n    const CuQT* __restrict__ cu_seqlens_q, const CuKT* __restrict__ cu_seqlens_k"
               : "")
    << ") {\n";
  return s.str();
}

// The varlen variant of a kernel body (AttentionConfig::varlen): batch b is
// sequence b of the packed rows, its own seq_q / seq_kv, rows offset by
// cu_seqlens (`flash`: the FlashAttention-2 body, which also offsets a Q
// base; the simple body indexes Q by row only).
absl::StatusOr<std::string> VarlenVariant(const AttentionConfig &c, std::string body, bool flash) {
  if (!c.varlen) return body;
  const std::string seqs =
      "  // Sequence b of the packed rows (cu_seqlens; FlashAttention's varlen API).\n"
      "  const int64_t q_off = (int64_t)cu_seqlens_q[b], k_off = (int64_t)cu_seqlens_k[b];\n"
      "  const int64_t seq_q = (int64_t)cu_seqlens_q[b + 1] - q_off;\n"
      "  const int64_t seq_kv = (int64_t)cu_seqlens_k[b + 1] - k_off;\n"
      "  const int hk = h / (heads_q / heads_kv);";
  if (flash)
    return SourceVariant(body, "attention varlen",
                         {{"  const int hk = h / (heads_q / heads_kv);", seqs},
                          {"(b * seq_q * heads_q + h)", "(q_off * heads_q + h)"},
                          {"(b * seq_kv * heads_kv + hk)", "(k_off * heads_kv + hk)"},
                          {"((b * seq_q + row) * heads_q + h)", "((q_off + row) * heads_q + h)"}});
  return SourceVariant(body, "attention varlen",
                       {{"  const int hk = h / (heads_q / heads_kv);", seqs},
                        {"(b * seq_kv * heads_kv + hk)", "(k_off * heads_kv + hk)"},
                        {"((b * seq_q + row) * heads_q + h)", "((q_off + row) * heads_q + h)"}});
}

std::string VarlenTag(const AttentionConfig &c) {
  return c.varlen ? std::string("_varlen_") + ScalarTypeTag(c.cu_seqlens_q_type) +
                        ScalarTypeTag(c.cu_seqlens_k_type)
                  : "";
}

std::string VarlenTypes(const AttentionConfig &c) {
  return c.varlen ? std::string("typedef ") + CTypeName(c.cu_seqlens_q_type) + " CuQT;\n" +
                        "typedef " + CTypeName(c.cu_seqlens_k_type) + " CuKT;\n"
                  : "";
}

// The HND variant of a kernel body: key/value [B, Hkv, Skv, D], row stride D.
absl::StatusOr<std::string> KvHndVariant(const AttentionConfig &c, const char *body,
                                         const std::string &kp, const std::string &vp) {
  if (!c.kv_hnd) return std::string(body);
  const std::string base = "(b * seq_kv * heads_kv + hk) * (int64_t)kHeadDim;";
  const std::string hnd = "(b * heads_kv + hk) * seq_kv * (int64_t)kHeadDim;  // HND";
  return SourceVariant(body, "attention kv_hnd",
                       {{"const int64_t kv_row_stride = (int64_t)heads_kv * kHeadDim;",
                         "const int64_t kv_row_stride = kHeadDim;  // HND [B, Hkv, Skv, D]"},
                        {kp + base, kp + hnd},
                        {vp + base, vp + hnd}});
}

std::string KvLayoutTag(const AttentionConfig &c) { return c.kv_hnd ? "_hnd" : ""; }

} // namespace

AttentionTile DefaultAttentionTile(int64_t head_dim) {
  AttentionTile t;
  t.block_m = 64;
  t.block_n = head_dim <= 128 ? 64 : 32;
  t.warps = 4;
  t.stages = 2;
  // Batch*head-fastest grid ("_gh"): the H200 sweep of 2026-11-29
  // (bench/attn_sweep.sh, causal bf16 D=128) measured 178.9 vs 173.6 TFLOP/s
  // at B=4 S=2048, 201.2 vs 191.6 at B=1 S=8192 and 181.1 vs 172.1 for GQA
  // 32/8 against the q-tile-fastest order; no other tile was faster.
  t.qtile_fastest = false;
  return t;
}

AttentionTile ResolvedAttentionTile(const AttentionConfig &cfg) {
  return cfg.tile.block_m == 0 ? DefaultAttentionTile(cfg.head_dim) : cfg.tile;
}

std::string AttentionTileName(const AttentionTile &t) {
  std::ostringstream s;
  s << "bm" << t.block_m << "_bn" << t.block_n << "_w" << t.warps << "_s" << t.stages
    << (t.qtile_fastest ? "" : "_gh");
  return s.str();
}

bool ParseAttentionTile(const std::string &text, AttentionTile *tile, std::string *error) {
  AttentionTile t;
  // Strictly bm<digits>_bn<digits>_w<digits>_s<digits>[_gh], each number at
  // most 4 digits (no sign, no spaces, no overflow).
  int fields[4] = {0, 0, 0, 0};
  const char *prefixes[4] = {"bm", "_bn", "_w", "_s"};
  size_t pos = 0;
  bool ok = true;
  for (int f = 0; f < 4 && ok; ++f) {
    const std::string p = prefixes[f];
    ok = text.compare(pos, p.size(), p) == 0;
    pos += p.size();
    size_t digits = 0;
    while (ok && pos < text.size() && digits < 5 && text[pos] >= '0' && text[pos] <= '9') {
      fields[f] = fields[f] * 10 + (text[pos] - '0');
      ++pos;
      ++digits;
    }
    ok = ok && digits >= 1 && digits <= 4;
  }
  const int bm = fields[0], bn = fields[1], w = fields[2], st = fields[3];
  const std::string rest = ok ? text.substr(pos) : "";
  if (!ok || (rest != "" && rest != "_gh")) {
    if (error)
      *error = "attention tile '" + text + "': expected bm<M>_bn<N>_w<warps>_s<stages>[_gh], e.g. bm128_bn64_w4_s2";
    return false;
  }
  t.block_m = bm;
  t.block_n = bn;
  t.warps = w;
  t.stages = st;
  t.qtile_fastest = rest.empty();
  *tile = t;
  return true;
}

bool AttentionTileSupported(const AttentionConfig &cfg, std::string *why) {
  const AttentionTile t = ResolvedAttentionTile(cfg);
  auto no = [&](const std::string &m) {
    if (why) *why = "attention tile " + AttentionTileName(t) + " with head dim " + std::to_string(cfg.head_dim) + ": " + m;
    return false;
  };
  if (t.block_m != 64 && t.block_m != 128) return no("block_m must be 64 or 128");
  if (t.block_n != 32 && t.block_n != 64 && t.block_n != 128) return no("block_n must be 32, 64 or 128");
  if (t.warps != 4 && t.warps != 8) return no("warps must be 4 or 8");
  if (t.block_m % (16 * t.warps) != 0 || t.block_m / (16 * t.warps) > 2)
    return no("block_m / warps must be 16 or 32 query rows per warp");
  if (t.stages != 1 && t.stages != 2) return no("stages must be 1 or 2");
  const FaGeom g = Geom(cfg);
  if (g.smem_bytes > kMaxSmemBytes)
    return no("needs " + std::to_string(g.smem_bytes) + " bytes of shared memory (> " + std::to_string(kMaxSmemBytes) + ")");
  if (g.accum_regs > kMaxAccumRegs)
    return no("needs " + std::to_string(g.accum_regs) + " fp32 accumulator registers per thread (> " +
              std::to_string(kMaxAccumRegs) + ", would spill)");
  return true;
}

int64_t AttentionSmemBytes(const AttentionConfig &cfg) { return Geom(cfg).smem_bytes; }

//===----------------------------------------------------------------------===//
// Tensor-core FlashAttention-2
//===----------------------------------------------------------------------===//

const char *const detail::kFlashPtxHelpers = R"CUDA(
// ---- PTX wrappers (sm_80+) ----
LLMC_DEV uint32_t smemAddr(const void* p) {  // generic -> shared window address
  uint32_t r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}
// 16-byte async copy global -> shared; src_bytes = 0 zero-fills (tail rows).
LLMC_DEV void cpAsync16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
LLMC_DEV void cpAsyncCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
LLMC_DEV void cpAsyncWaitAll() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
// Four 8x8 b16 matrices; lane l supplies the row address of matrix l/8, row l%8.
// Thread l receives, from each matrix i, elements (row l/4, cols 2*(l%4), +1).
LLMC_DEV void ldmatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// Same, transposed: thread l receives (rows 2*(l%4), +1, col l/4).
LLMC_DEV void ldmatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// D(16x8, f32) += A(16x16, row) * B(16x8, col).
// Fragments (g = lane/4, c = 2*(lane%4)):
//   A: a[0]=(g, c..c+1) a[1]=(g+8, c..) a[2]=(g, c+8..) a[3]=(g+8, c+8..)
//   B: b[0]=(k=c..c+1, n=g) b[1]=(k=c+8..c+9, n=g)
//   D: d[0..1]=(g, c..c+1) d[2..3]=(g+8, c..c+1)
LLMC_DEV void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32." LLMC_MMA_TYPE "." LLMC_MMA_TYPE ".f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Pack two floats into a b16x2 register: `lo` in the low half (lower column).
LLMC_DEV uint32_t pack2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn." LLMC_MMA_TYPE "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
)CUDA";

namespace {

constexpr const char *kFaBody = R"CUDA(
  // ---------------------------------------------------------------------
  // CTA = (query tile, head, batch). Warp w owns the query rows
  // q0 + kRowsPerWarp*w + 16*mt + {g, g+8} for mt < kMTiles.
  // smem: stage st holds K at tile 2*st and V at tile 2*st+1 ([kBlockN][kStride]
  // each); Q [kBlockM][kStride] follows, or is staged through them (kQInRegs).
  // ---------------------------------------------------------------------
  extern __shared__ __align__(16) uint16_t smem[];
  constexpr int kTileElems = kBlockN * kStride;
  constexpr int kRowsPerWarp = 16 * kMTiles;
  uint16_t* sQ = kQInRegs ? smem : smem + 2 * kStages * kTileElems;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c2 = 2 * (lane & 3);  // fragment row / column pair
  int64_t b, qblk, nqblk;
  int h;
  if (kQTileFastest) {  // grid (q tiles, Hq, B): neighbouring CTAs share K/V in L2
    qblk = blockIdx.x;
    nqblk = gridDim.x;
    h = (int)blockIdx.y;
    b = blockIdx.z;
  } else {              // grid (B*Hq, q tiles)
    b = (int64_t)blockIdx.x / heads_q;
    h = (int)((int64_t)blockIdx.x % heads_q);
    qblk = blockIdx.y;
    nqblk = gridDim.y;
  }
  const int hk = h / (heads_q / heads_kv);      // GQA: kv head of this q head
  const int64_t qtile = kCausal ? nqblk - 1 - qblk : qblk;  // causal: longest tiles first
  const int64_t q0 = qtile * kBlockM;
  if (q0 >= seq_q) return;
  const int64_t diag = seq_kv - seq_q;          // causal: key j visible to row i iff j <= i + diag
  const float scale_log2 = scale * LLMC_LOG2E;  // softmax in the exp2 domain

  const int64_t q_row_stride = (int64_t)heads_q * kHeadDim;
  const int64_t kv_row_stride = (int64_t)heads_kv * kHeadDim;
  const T* qg = q + (b * seq_q * heads_q + h) * (int64_t)kHeadDim;
  const T* kg = k + (b * seq_kv * heads_kv + hk) * (int64_t)kHeadDim;
  const T* vg = v + (b * seq_kv * heads_kv + hk) * (int64_t)kHeadDim;

  // Copy `rows` rows starting at global row r0 (limit = valid rows) into s.
  // Rows past `limit` are zero-filled. One pointer per thread, bumped per step.
  auto loadTile = [&](uint16_t* s, const T* src, int64_t row_stride, int64_t r0, int64_t limit, int rows) {
    constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks
    if (kThreads % kChunksPerRow == 0) {  // each thread keeps one column chunk
      constexpr int kRowsPerStep = kThreads / kChunksPerRow;
      const int cc = tid % kChunksPerRow;
      int r = tid / kChunksPerRow;
      const T* gp = src + (r0 + r) * row_stride + cc * 8;
      uint32_t sp = smemAddr(s + r * kStride + cc * 8);
      for (; r < rows; r += kRowsPerStep) {
        const bool valid = r0 + r < limit;
        cpAsync16(sp, valid ? gp : src, valid ? 16 : 0);
        gp += kRowsPerStep * row_stride;
        sp += kRowsPerStep * kStride * 2;
      }
    } else {
      for (int i = tid; i < rows * kChunksPerRow; i += kThreads) {
        const int r = i / kChunksPerRow, cc = i % kChunksPerRow;
        const bool valid = r0 + r < limit;
        const T* gp = valid ? src + (r0 + r) * row_stride + cc * 8 : src;
        cpAsync16(smemAddr(s + r * kStride + cc * 8), gp, valid ? 16 : 0);
      }
    }
  };

  // Key range for this query tile (exclusive end); causal tiles stop at the diagonal.
  int64_t kv_end = seq_kv;
  if (kCausal) {
    const int64_t last_row = (q0 + kBlockM < seq_q ? q0 + kBlockM : seq_q) - 1;
    kv_end = last_row + diag + 1 < seq_kv ? last_row + diag + 1 : seq_kv;
  }
  const int num_tiles = kv_end > 0 ? (int)((kv_end + kBlockN - 1) / kBlockN) : 0;
  const int64_t w0 = q0 + warp * kRowsPerWarp;  // first query row of this warp

  // ---- Q: global -> smem -> (registers) ----
  uint32_t qf[kQInRegs ? kMTiles : 1][kQInRegs ? kHeadDim / 16 : 1][4];
  loadTile(sQ, qg, q_row_stride, q0, seq_q, kBlockM);
  cpAsyncCommit();
  if (kQInRegs) {
    cpAsyncWaitAll();
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        const int row = warp * kRowsPerWarp + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int col = ks * 16 + (lane >> 4) * 8;
        ldmatrixX4(qf[kQInRegs ? mt : 0][kQInRegs ? ks : 0], smemAddr(sQ + row * kStride + col));
      }
    __syncthreads();  // sQ aliases the K/V buffers: everyone has its Q fragments before K lands
  }
  if (num_tiles > 0) {
    loadTile(smem, kg, kv_row_stride, 0, seq_kv, kBlockN);
    if (kStages == 2) loadTile(smem + kTileElems, vg, kv_row_stride, 0, seq_kv, kBlockN);
  }
  cpAsyncCommit();

  // ---- per-thread state: rows (g) and (g+8) of each of this warp's m16 tiles ----
  float o[kMTiles][kHeadDim / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kHeadDim / 8; ++nt) o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.0f;
  float m_run[kMTiles][2], l_run[kMTiles][2];  // running max (log2 domain), sum (this thread's columns)
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    m_run[mt][0] = m_run[mt][1] = -LLMC_INF;
    l_run[mt][0] = l_run[mt][1] = 0.0f;
  }

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int64_t kv0 = (int64_t)tile * kBlockN;
    const int st = kStages == 2 ? (tile & 1) : 0;
    const uint16_t* sK = smem + 2 * st * kTileElems;
    const uint16_t* sV = sK + kTileElems;
    cpAsyncWaitAll();
    // stages 2: K/V[tile] visible and all warps done with tile-1 (its buffers are free);
    // stages 1: K[tile] visible and all warps done with V[tile-1].
    __syncthreads();
    if (kStages == 2) {
      if (tile + 1 < num_tiles) {
        uint16_t* nK = smem + 2 * (st ^ 1) * kTileElems;
        loadTile(nK, kg, kv_row_stride, kv0 + kBlockN, seq_kv, kBlockN);
        loadTile(nK + kTileElems, vg, kv_row_stride, kv0 + kBlockN, seq_kv, kBlockN);
      }
    } else {
      loadTile(smem + kTileElems, vg, kv_row_stride, kv0, seq_kv, kBlockN);
    }
    cpAsyncCommit();

    // Warp-uniform: this warp has rows and (causal) some key of the tile reaches one of them.
    const bool active = w0 < seq_q && (!kCausal || kv0 <= w0 + kRowsPerWarp - 1 + diag);
    float s[kMTiles][kBlockN / 8][4];
    if (active) {
      // ---- S = Q K^T (kRowsPerWarp x kBlockN per warp); a K fragment feeds kMTiles MMAs ----
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kBlockN / 8; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        uint32_t a[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          if (kQInRegs) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a[mt][i] = qf[kQInRegs ? mt : 0][kQInRegs ? ks : 0][i];
          } else {
            const int row = warp * kRowsPerWarp + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int col = ks * 16 + (lane >> 4) * 8;
            ldmatrixX4(a[mt], smemAddr(sQ + row * kStride + col));
          }
        }
#pragma unroll
        for (int np = 0; np < kBlockN / 16; ++np) {  // two 8-key n-tiles per ldmatrix.x4
          uint32_t bk[4];
          const int key = np * 16 + (lane & 7) + (lane >> 4) * 8;
          const int col = ks * 16 + ((lane >> 3) & 1) * 8;
          ldmatrixX4(bk, smemAddr(sK + key * kStride + col));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma16816(s[mt][2 * np], a[mt], bk[0], bk[1]);
            mma16816(s[mt][2 * np + 1], a[mt], bk[2], bk[3]);
          }
        }
      }

      // ---- scale (+mask); masking only on tiles that reach past the diagonal or the end ----
      const bool need_mask = kHasMask || kv0 + kBlockN > seq_kv ||
                             (kCausal && kv0 + kBlockN - 1 > w0 + diag);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float t = s[mt][nt][e] * scale_log2;
            if (need_mask) {
              const int64_t row = w0 + mt * 16 + g + (e >> 1) * 8;
              const int64_t key = kv0 + nt * 8 + c2 + (e & 1);
              bool visible = key < seq_kv && row < seq_q;
              if (kCausal) visible = visible && key <= row + diag;
              if (kHasMask && visible)
                t += toF(mask[b * mask_stride_b + h * mask_stride_h + row * mask_stride_q + key]) * LLMC_LOG2E;
              if (!visible) t = -LLMC_INF;
            }
            s[mt][nt][e] = t;
          }
      // ---- online softmax ----
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = -LLMC_INF;
#pragma unroll
          for (int nt = 0; nt < kBlockN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
          // the 4 threads of a quad hold the same row
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m_run[mt][r], mx);
          const float m_use = m_new == -LLMC_INF ? 0.0f : m_new;  // fully masked so far: keep 0s
          const float alpha = exp2f(m_run[mt][r] - m_use);       // exp2(-inf) = 0 on the first tile
          float sum = 0.0f;
#pragma unroll
          for (int nt = 0; nt < kBlockN / 8; ++nt) {
            s[mt][nt][2 * r] = exp2f(s[mt][nt][2 * r] - m_use);
            s[mt][nt][2 * r + 1] = exp2f(s[mt][nt][2 * r + 1] - m_use);
            sum += s[mt][nt][2 * r] + s[mt][nt][2 * r + 1];
          }
          l_run[mt][r] = l_run[mt][r] * alpha + sum;
          m_run[mt][r] = m_new;
#pragma unroll
          for (int nt = 0; nt < kHeadDim / 8; ++nt) {
            o[mt][nt][2 * r] *= alpha;
            o[mt][nt][2 * r + 1] *= alpha;
          }
        }
    }

    if (kStages == 1) {
      cpAsyncWaitAll();
      __syncthreads();  // V[tile] visible; all warps done with K[tile]
      if (tile + 1 < num_tiles) loadTile(smem, kg, kv_row_stride, kv0 + kBlockN, seq_kv, kBlockN);
      cpAsyncCommit();
    }

    if (active) {
      // ---- O += P V: the S accumulator layout is the A-fragment layout; a V fragment feeds kMTiles MMAs ----
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t a[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          a[mt][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          a[mt][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          a[mt][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          a[mt][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < kHeadDim / 16; ++dp) {  // two 8-wide d n-tiles per ldmatrix.x4.trans
          uint32_t bv[4];
          const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          const int col = dp * 16 + (lane >> 4) * 8;
          ldmatrixX4Trans(bv, smemAddr(sV + key * kStride + col));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma16816(o[mt][2 * dp], a[mt], bv[0], bv[1]);
            mma16816(o[mt][2 * dp + 1], a[mt], bv[2], bv[3]);
          }
        }
      }
    }
  }
  cpAsyncWaitAll();

  // ---- finalize: O / l (row sum over the quad); rows with no visible key -> 0 ----
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const int64_t row = w0 + mt * 16 + g + r * 8;
      if (row < seq_q) {
        T* op = out + ((b * seq_q + row) * heads_q + h) * (int64_t)kHeadDim;
#pragma unroll
        for (int nt = 0; nt < kHeadDim / 8; ++nt) {
          struct __align__(4) Pair { T x, y; } pr;
          pr.x = fromF<T>(o[mt][nt][2 * r] * inv);
          pr.y = fromF<T>(o[mt][nt][2 * r + 1] * inv);
          *reinterpret_cast<Pair*>(op + nt * 8 + c2) = pr;
        }
      }
    }
}
)CUDA";

absl::StatusOr<KernelCode> EmitFlashAttention(const AttentionConfig &c) {
  const int64_t d = c.head_dim;
  std::string why;
  if (!AttentionTileSupported(c, &why)) return Invalid(why);
  const FaGeom geo = Geom(c);
  const AttentionTile tile = ResolvedAttentionTile(c);
  KernelCode kc;
  kc.name = std::string("llmc_flash_attn_") + ScalarTypeTag(c.dtype) + "_d" + std::to_string(d) +
            (c.causal ? "_causal" : "") + MaskTag(c) + KvLayoutTag(c) + (c.write_lse ? "_lse" : "") +
            VarlenTag(c) + "_" + AttentionTileName(tile);
  std::ostringstream hdr;
  hdr << "// llmc FlashAttention-2 forward (Dao 2023, arXiv:2307.08691), tensor cores.\n"
         "// q [B,Sq,Hq,D], k/v [B,Skv,Hkv,D], out [B,Sq,Hq,D]; GQA kv head = h / (Hq/Hkv).\n"
         "// CTA: kBlockM query rows (kWarps warps x kMTiles m16 tiles) against kBlockN-key\n"
         "// tiles; mma.sync m16n8k16, ldmatrix (.trans for V) fragments, cp.async loads\n"
         "// (kStages 2: K/V double-buffered; 1: V[j] overlaps QK^T, K[j+1] overlaps PV),\n"
         "// online softmax (exp2 domain) in fp32 registers, masking only on diagonal/tail\n"
         "// tiles. Causal: bottom-right aligned (key j visible to query i iff\n"
         "// j <= i + Skv - Sq), longest query tiles first. Rows with no visible key -> 0.\n"
         "// Requires 16-byte aligned q/k/v/out; dynamic smem = kSmemBytes.\n";
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n"
      << "typedef " << (c.has_mask ? CTypeName(c.mask) : "float") << " MaskT;\n"
      << "#define LLMC_MMA_TYPE \"" << (c.dtype == ScalarType::bf16 ? "bf16" : "f16") << "\"\n"
      << "static constexpr int kHeadDim = " << d << ";\n"
      << "static constexpr int kBlockM = " << geo.block_m << ";\n"
      << "static constexpr int kBlockN = " << geo.block_n << ";\n"
      << "static constexpr int kWarps = " << geo.warps << ";\n"
      << "static constexpr int kThreads = " << geo.threads << ";\n"
      << "static constexpr int kMTiles = " << geo.m_tiles << ";  // m16 tiles per warp\n"
      << "static constexpr int kStages = " << geo.stages << ";\n"
      << "static constexpr int kStride = kHeadDim + 8;  // smem row stride (elements), conflict-free\n"
      << "static constexpr bool kQInRegs = " << (geo.q_in_regs ? "true" : "false") << ";\n"
      << "static constexpr bool kQTileFastest = " << (geo.qtile_fastest ? "true" : "false") << ";\n"
      << "static constexpr bool kCausal = " << (c.causal ? "true" : "false") << ";\n"
      << "static constexpr bool kHasMask = " << (c.has_mask ? "true" : "false") << ";\n"
      << "static constexpr int kSmemBytes = " << geo.smem_bytes << ";\n"
      << VarlenTypes(c);
  LLMC_ASSIGN_OR_RETURN(std::string fa, KvHndVariant(c, kFaBody, "const T* kg = k + ", "const T* vg = v + "));
  LLMC_ASSIGN_OR_RETURN(fa, VarlenVariant(c, fa, /*flash=*/true));
  std::string signature = AttentionSignature(kc.name, geo.threads, c.varlen);
  if (c.write_lse) {
    // The statistics variant: one more argument, lse [B, Hq, Sq] f32 in the
    // natural log (+inf for a row with no visible key), and O written only
    // when out is not null.
    LLMC_ASSIGN_OR_RETURN(
        fa, SourceVariant(fa, "attention write_lse",
                          {{"      if (row < seq_q) {\n",
                            "      if (row < seq_q && (lane & 3) == 0)  // natural log; no visible key -> +inf\n"
                            "        lse[(b * heads_q + h) * seq_q + row] =\n"
                            "            l > 0.0f ? (m_run[mt][r] + log2f(l)) * 0.6931471805599453f : LLMC_INF;\n"
                            "      if (row < seq_q && out != nullptr) {\n"},
                           {"    if (active) {\n      // ---- O += P V",
                            "    if (active && out != nullptr) {  // statistics only: no P V\n      // ---- O += P V"}}));
    LLMC_ASSIGN_OR_RETURN(
        signature, SourceVariant(signature, "attention write_lse signature",
                                 {{"long long mask_stride_q) {",
                                   "long long mask_stride_q, float* __restrict__ lse) {"}}));
  }
  std::string body = kFlashPtxHelpers;
  body += "\n" + signature + fa;
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble(hdr.str(), cfg.str(), body));
  return kc;
}

//===----------------------------------------------------------------------===//
// Simple attention: one warp per query row (f32, any head dim)
//===----------------------------------------------------------------------===//

constexpr int kSimpleRowsPerBlock = 4;

constexpr const char *kSimpleBody = R"CUDA(
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / heads_q;
  const int h = (int)(bh % heads_q);
  const int hk = h / (heads_q / heads_kv);
  const int64_t row = (int64_t)blockIdx.y * kRowsPerBlock + warp;
  if (row >= seq_q) return;  // warp-uniform; no block barriers below
  const int64_t diag = seq_kv - seq_q;
  const float scale_log2 = scale * LLMC_LOG2E;

  // lane owns dims d = lane + 32*i
  float qv[kPerLane], acc[kPerLane];
  const T* qp = q + ((b * seq_q + row) * heads_q + h) * (int64_t)kHeadDim;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < kHeadDim ? toF(qp[d]) * scale_log2 : 0.0f;
    acc[i] = 0.0f;
  }
  int64_t kv_end = seq_kv;
  if (kCausal) kv_end = row + diag + 1 < seq_kv ? row + diag + 1 : seq_kv;
  float m_run = -LLMC_INF, l_run = 0.0f;
  const int64_t kv_row_stride = (int64_t)heads_kv * kHeadDim;
  const T* kp = k + (b * seq_kv * heads_kv + hk) * (int64_t)kHeadDim;
  const T* vp = v + (b * seq_kv * heads_kv + hk) * (int64_t)kHeadDim;
  for (int64_t j = 0; j < kv_end; ++j) {
    float part = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < kHeadDim) part += qv[i] * toF(kp[j * kv_row_stride + d]);
    }
    float t = warpSum(part);
    if (kHasMask) t += toF(mask[b * mask_stride_b + h * mask_stride_h + row * mask_stride_q + j]) * LLMC_LOG2E;
    if (t == -LLMC_INF) continue;  // masked key contributes nothing (warp-uniform)
    const float m_new = fmaxf(m_run, t);
    const float alpha = exp2f(m_run - m_new);  // m_run = -inf -> 0
    const float p = exp2f(t - m_new);
    l_run = l_run * alpha + p;
    m_run = m_new;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      const float vv = d < kHeadDim ? toF(vp[j * kv_row_stride + d]) : 0.0f;
      acc[i] = acc[i] * alpha + p * vv;
    }
  }
  const float inv = l_run > 0.0f ? 1.0f / l_run : 0.0f;  // no visible key -> 0
  T* op = out + ((b * seq_q + row) * heads_q + h) * (int64_t)kHeadDim;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < kHeadDim) op[d] = fromF<T>(acc[i] * inv);
  }
}
)CUDA";

absl::StatusOr<KernelCode> EmitSimpleAttention(const AttentionConfig &c) {
  const int64_t d = c.head_dim;
  KernelCode kc;
  kc.name = std::string("llmc_attn_simple_") + ScalarTypeTag(c.dtype) + "_d" + std::to_string(d) +
            (c.causal ? "_causal" : "") + MaskTag(c) + KvLayoutTag(c) + VarlenTag(c);
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n"
      << "typedef " << (c.has_mask ? CTypeName(c.mask) : "float") << " MaskT;\n"
      << "static constexpr int kHeadDim = " << d << ";\n"
      << "static constexpr int kPerLane = " << CeilDiv(d, 32) << ";  // dims per lane (d = lane + 32*i)\n"
      << "static constexpr int kRowsPerBlock = " << kSimpleRowsPerBlock << ";\n"
      << "static constexpr bool kCausal = " << (c.causal ? "true" : "false") << ";\n"
      << "static constexpr bool kHasMask = " << (c.has_mask ? "true" : "false") << ";\n"
      << VarlenTypes(c);
  LLMC_ASSIGN_OR_RETURN(std::string simple, KvHndVariant(c, kSimpleBody, "const T* kp = k + ", "const T* vp = v + "));
  LLMC_ASSIGN_OR_RETURN(simple, VarlenVariant(c, simple, /*flash=*/false));
  std::string body = "\n" + AttentionSignature(kc.name, 32 * kSimpleRowsPerBlock, c.varlen) + simple;
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble(
      "// llmc attention, simple path: one warp per query row, fp32 CUDA-core math, online\n"
      "// softmax (Milakov & Gimelshein 2018) in the exp2 domain. Same layouts and semantics as\n"
      "// the FlashAttention-2 kernel (GQA, bottom-right causal, additive mask, fully masked\n"
      "// rows -> 0). Used for f32 and head dims the tensor-core kernel does not cover.\n",
      cfg.str(), body));
  return kc;
}

} // namespace

bool AttentionUsesTensorCores(const AttentionConfig &c) {
  return !c.force_simple && (c.dtype == ScalarType::bf16 || c.dtype == ScalarType::f16) &&
         c.head_dim % 16 == 0 && c.head_dim >= 16 && c.head_dim <= 256;
}

absl::StatusOr<KernelCode> EmitAttention(const AttentionConfig &c) {
  if (c.dtype != ScalarType::bf16 && c.dtype != ScalarType::f16 && c.dtype != ScalarType::f32)
    return Invalid("attention: dtype must be bf16, f16 or f32");
  if (c.write_lse && !AttentionUsesTensorCores(c))
    return Unsupported("attention: write_lse needs the tensor-core kernel (bf16/f16, head dim a "
                       "multiple of 16 in 16..256)");
  if (c.head_dim < 1 || c.head_dim > 1024) return Invalid("attention: head_dim must be 1..1024");
  if (c.has_mask && !IsFloatType(c.mask)) return Invalid("attention: mask must be a float type");
  if (c.varlen) {
    for (ScalarType t : {c.cu_seqlens_q_type, c.cu_seqlens_k_type})
      if (t != ScalarType::i32 && t != ScalarType::i64)
        return Invalid("attention: varlen cu_seqlens must be i32 or i64");
    if (c.has_mask || c.kv_hnd || c.write_lse)
      return Invalid("attention: varlen takes no mask, HND key/value or statistics");
  }
  return AttentionUsesTensorCores(c) ? EmitFlashAttention(c) : EmitSimpleAttention(c);
}

absl::StatusOr<LaunchDims> AttentionLaunch(const AttentionConfig &c, int64_t batch, int64_t seq_q, int64_t heads_q) {
  const int64_t bh = std::max<int64_t>(batch * heads_q, 1);
  if (AttentionUsesTensorCores(c)) {
    const FaGeom g = Geom(c);
    const int64_t qtiles = CeilDiv(std::max<int64_t>(seq_q, 1), g.block_m);
    if (!g.qtile_fastest) return Dims(bh, qtiles, 1, g.threads, g.smem_bytes);
    if (heads_q > 65535 || batch > 65535)
      return Unsupported("attention: grid (q tiles, heads, batch) needs heads and batch <= 65535; "
                         "use qtile_fastest = false");
    return Dims(qtiles, std::max<int64_t>(heads_q, 1), std::max<int64_t>(batch, 1), g.threads, g.smem_bytes);
  }
  return Dims(bh, CeilDiv(std::max<int64_t>(seq_q, 1), kSimpleRowsPerBlock), 1, 32 * kSimpleRowsPerBlock);
}

} // namespace llmc::cuda
