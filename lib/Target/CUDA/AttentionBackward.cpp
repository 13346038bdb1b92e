//===- AttentionBackward.cpp - FlashAttention-2 backward -------------------===//
//
// llm.attention_backward as three kernels (Dao 2023, "FlashAttention-2",
// arXiv:2307.08691, Algorithm 2), bf16/f16 with mma.sync.m16n8k16 and fp32
// accumulation:
//  * _prep: D_i = sum_d dO[i, d] * O[i, d] (f32 [B, Hq, Sq]) and dQacc = 0
//    (f32 [B, Sq, Hq, D]); one warp per query row.
//  * main: a CTA owns kBlockN keys of one KV head. It keeps K and V of its
//    keys in shared memory and dK, dV in registers, and walks every query
//    head of the GQA group and every query tile that sees one of its keys:
//    it recomputes S^T = K Q^T and P^T = exp(scale S^T - lse) from the
//    forward's statistics, then dV += P^T dO, dP^T = V dO^T,
//    dS^T = P^T (dP^T - D), dK += dS^T Q, and dQacc += dS K (fp32 atomics,
//    dS staged through shared memory). A pair with P = 0 (masked, or no
//    visible key) contributes nothing, whatever dP is.
//  * _dq: dQ = scale * dQacc in the element type.
// The scores never reach global memory: the memory traffic is O(S D) per
// head instead of the decomposition's O(S^2).
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {

constexpr int kBwdBlockM = 64;   // query rows per tile
constexpr int kBwdBlockN = 64;   // keys per CTA (16 per warp)
constexpr int kBwdWarps = 4;
constexpr int kBwdPrepWarps = 8; // query rows per _prep block
constexpr int kBwdDqThreads = 256;

int64_t BwdSmemBytes(int64_t d) {
  const int64_t stride = d + 8;
  return (2 * kBwdBlockN + 2 * kBwdBlockM) * stride * 2 +  // K, V, Q, dO
         int64_t{kBwdBlockN} * (kBwdBlockM + 8) * 2 +      // dS^T
         2 * int64_t{kBwdBlockM} * 4;                      // lse, D
}

constexpr const char *kPrepBody = R"CUDA(
extern "C" __global__ void __launch_bounds__(32 * kPrepWarps) KERNEL_NAME(
    float* __restrict__ dsum, float* __restrict__ dq_acc, const T* __restrict__ out,
    const T* __restrict__ dout, long long rows, long long seq_q, int heads_q) {
  const long long row = (long long)blockIdx.x * kPrepWarps + (threadIdx.x >> 5);  // (b*Sq + i)*Hq + h
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // warp-uniform
  const T* o = out + row * kHeadDim;
  const T* d = dout + row * kHeadDim;
  float* acc_row = dq_acc + row * kHeadDim;
  float acc = 0.0f;
  for (int c = lane; c < kHeadDim; c += 32) {
    acc += toF(o[c]) * toF(d[c]);
    acc_row[c] = 0.0f;
  }
  acc = warpSum(acc);
  if (lane == 0) {
    const long long h = row % heads_q, bi = row / heads_q;
    dsum[((bi / seq_q) * heads_q + h) * seq_q + bi % seq_q] = acc;
  }
}
)CUDA";

constexpr const char *kDqBody = R"CUDA(
extern "C" __global__ void __launch_bounds__(kDqThreads) KERNEL_NAME(
    T* __restrict__ dq, const float* __restrict__ dq_acc, long long n, float scale) {
  for (long long i = (long long)blockIdx.x * kDqThreads + threadIdx.x; i < n;
       i += (long long)gridDim.x * kDqThreads)
    dq[i] = fromF<T>(dq_acc[i] * scale);
}
)CUDA";

constexpr const char *kMainBody = R"CUDA(
extern "C" __global__ void __launch_bounds__(kThreads) KERNEL_NAME(
    T* __restrict__ dk, T* __restrict__ dv, float* __restrict__ dq_acc,
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    const T* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ dsum,
    long long batch, long long seq_q, long long seq_kv, int heads_q, int heads_kv, float scale) {
  // smem: K, V [kBlockN][kStride]; Q, dO [kBlockM][kStride]; dS^T [kBlockN][kSStride];
  // lse (log2 domain) and D [kBlockM] f32.
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sK = smem;
  uint16_t* sV = sK + kBlockN * kStride;
  uint16_t* sQ = sV + kBlockN * kStride;
  uint16_t* sdO = sQ + kBlockM * kStride;
  uint16_t* sdS = sdO + kBlockM * kStride;
  float* sLse = reinterpret_cast<float*>(sdS + kBlockN * kSStride);
  float* sD = sLse + kBlockM;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c2 = 2 * (lane & 3);  // fragment row / column pair
  const int64_t kv0 = (int64_t)blockIdx.y * kBlockN;  // grid (B*Hkv, key tiles)
  const int64_t b = (int64_t)blockIdx.x / heads_kv;
  const int hk = (int)((int64_t)blockIdx.x % heads_kv);
  const int group = heads_q / heads_kv;
  const int64_t diag = seq_kv - seq_q;          // causal: key j visible to row i iff j <= i + diag
  const float scale_log2 = scale * LLMC_LOG2E;  // P in the exp2 domain
  const int64_t q_row_stride = (int64_t)heads_q * kHeadDim;
  const int64_t kv_row_stride = (int64_t)heads_kv * kHeadDim;
  const T* kg = k + (b * seq_kv * heads_kv + hk) * (int64_t)kHeadDim;
  const T* vg = v + (b * seq_kv * heads_kv + hk) * (int64_t)kHeadDim;

  // Copy `rows` rows from global row r0 (limit = valid rows) into s; rows
  // past `limit` are zero-filled.
  auto loadTile = [&](uint16_t* s, const T* src, int64_t row_stride, int64_t r0, int64_t limit, int rows) {
    constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks
    for (int i = tid; i < rows * kChunksPerRow; i += kThreads) {
      const int r = i / kChunksPerRow, cc = i % kChunksPerRow;
      const bool valid = r0 + r < limit;
      const T* gp = valid ? src + (r0 + r) * row_stride + cc * 8 : src;
      cpAsync16(smemAddr(s + r * kStride + cc * 8), gp, valid ? 16 : 0);
    }
  };
  loadTile(sK, kg, kv_row_stride, kv0, seq_kv, kBlockN);
  loadTile(sV, vg, kv_row_stride, kv0, seq_kv, kBlockN);
  cpAsyncCommit();

  // This warp's keys: kv0 + 16 * warp + {g, g + 8}; dK, dV rows in registers.
  float dk_acc[kHeadDim / 8][4], dv_acc[kHeadDim / 8][4];
#pragma unroll
  for (int nt = 0; nt < kHeadDim / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[nt][e] = dv_acc[nt][e] = 0.0f;

  // Causal: rows before kv0 - diag see none of these keys.
  int64_t q_begin = 0;
  if (kCausal) q_begin = kv0 - diag > 0 ? kv0 - diag : 0;
  const int64_t num_qtiles = (seq_q + kBlockM - 1) / kBlockM;
  const int64_t key_base = kv0 + warp * 16 + g;

  for (int hh = 0; hh < group; ++hh) {
    const int h = hk * group + hh;
    const T* qg = q + (b * seq_q * heads_q + h) * (int64_t)kHeadDim;
    const T* dog = dout + (b * seq_q * heads_q + h) * (int64_t)kHeadDim;
    float* dqg = dq_acc + (b * seq_q * heads_q + h) * (int64_t)kHeadDim;
    const float* lseg = lse + (b * heads_q + h) * seq_q;
    const float* dg = dsum + (b * heads_q + h) * seq_q;
    for (int64_t qt = q_begin / kBlockM; qt < num_qtiles; ++qt) {
      const int64_t q0 = qt * kBlockM;
      __syncthreads();  // everyone is done with the previous tile's Q, dO, dS^T, lse, D
      loadTile(sQ, qg, q_row_stride, q0, seq_q, kBlockM);
      loadTile(sdO, dog, q_row_stride, q0, seq_q, kBlockM);
      cpAsyncCommit();
      for (int i = tid; i < kBlockM; i += kThreads) {
        // Rows past Sq, and rows whose lse is -inf (no visible key, the op's
        // convention besides +inf): P = exp2(-inf) = 0.
        const float l = q0 + i < seq_q ? lseg[q0 + i] : LLMC_INF;
        const bool valid = q0 + i < seq_q;
        sLse[i] = l == -LLMC_INF ? LLMC_INF : l * LLMC_LOG2E;
        sD[i] = valid ? dg[q0 + i] : 0.0f;
      }
      cpAsyncWaitAll();
      __syncthreads();

      // ---- S^T = K Q^T and dP^T = V dO^T (16 keys x kBlockM rows per warp) ----
      float st[kBlockM / 8][4], dpt[kBlockM / 8][4];
#pragma unroll
      for (int nt = 0; nt < kBlockM / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) st[nt][e] = dpt[nt][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        uint32_t ak[4], av[4];
        const int row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int col = ks * 16 + (lane >> 4) * 8;
        ldmatrixX4(ak, smemAddr(sK + row * kStride + col));
        ldmatrixX4(av, smemAddr(sV + row * kStride + col));
#pragma unroll
        for (int np = 0; np < kBlockM / 16; ++np) {  // two 8-row n-tiles per ldmatrix.x4
          uint32_t bq[4], bo[4];
          const int qr = np * 16 + (lane & 7) + (lane >> 4) * 8;
          const int qc = ks * 16 + ((lane >> 3) & 1) * 8;
          ldmatrixX4(bq, smemAddr(sQ + qr * kStride + qc));
          ldmatrixX4(bo, smemAddr(sdO + qr * kStride + qc));
          mma16816(st[2 * np], ak, bq[0], bq[1]);
          mma16816(st[2 * np + 1], ak, bq[2], bq[3]);
          mma16816(dpt[2 * np], av, bo[0], bo[1]);
          mma16816(dpt[2 * np + 1], av, bo[2], bo[3]);
        }
      }
      // ---- P^T = exp2(scale_log2 S^T - lse_log2), dS^T = P^T (dP^T - D) ----
#pragma unroll
      for (int nt = 0; nt < kBlockM / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = nt * 8 + c2 + (e & 1);
          const int64_t key = key_base + (e >> 1) * 8;
          bool visible = key < seq_kv;
          if (kCausal) visible = visible && key <= q0 + qi + diag;
          const float p = visible ? exp2f(st[nt][e] * scale_log2 - sLse[qi]) : 0.0f;
          st[nt][e] = p;
          dpt[nt][e] = p == 0.0f ? 0.0f : p * (dpt[nt][e] - sD[qi]);
        }
      // ---- dV += P^T dO and dK += dS^T Q (A from registers, B via ldmatrix.trans) ----
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk) {
        uint32_t ap[4], ad[4];
        ap[0] = pack2(st[2 * kk][0], st[2 * kk][1]);
        ap[1] = pack2(st[2 * kk][2], st[2 * kk][3]);
        ap[2] = pack2(st[2 * kk + 1][0], st[2 * kk + 1][1]);
        ap[3] = pack2(st[2 * kk + 1][2], st[2 * kk + 1][3]);
        ad[0] = pack2(dpt[2 * kk][0], dpt[2 * kk][1]);
        ad[1] = pack2(dpt[2 * kk][2], dpt[2 * kk][3]);
        ad[2] = pack2(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
        ad[3] = pack2(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < kHeadDim / 16; ++dp) {
          uint32_t bo[4], bq[4];
          const int qr = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          const int col = dp * 16 + (lane >> 4) * 8;
          ldmatrixX4Trans(bo, smemAddr(sdO + qr * kStride + col));
          ldmatrixX4Trans(bq, smemAddr(sQ + qr * kStride + col));
          mma16816(dv_acc[2 * dp], ap, bo[0], bo[1]);
          mma16816(dv_acc[2 * dp + 1], ap, bo[2], bo[3]);
          mma16816(dk_acc[2 * dp], ad, bq[0], bq[1]);
          mma16816(dk_acc[2 * dp + 1], ad, bq[2], bq[3]);
        }
        // dS^T rows of this warp -> smem, element type (the operand dQ's MMA reads).
        *reinterpret_cast<uint32_t*>(sdS + (warp * 16 + g) * kSStride + kk * 16 + c2) = ad[0];
        *reinterpret_cast<uint32_t*>(sdS + (warp * 16 + g + 8) * kSStride + kk * 16 + c2) = ad[1];
        *reinterpret_cast<uint32_t*>(sdS + (warp * 16 + g) * kSStride + kk * 16 + 8 + c2) = ad[2];
        *reinterpret_cast<uint32_t*>(sdS + (warp * 16 + g + 8) * kSStride + kk * 16 + 8 + c2) = ad[3];
      }
      __syncthreads();  // dS^T complete

      // ---- dQacc[rows 16*warp.., :] += dS K: A = dS via ldmatrix.trans of dS^T ----
      float dq[kHeadDim / 8][4];
#pragma unroll
      for (int nt = 0; nt < kHeadDim / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dq[nt][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t a[4];
        const int mat = lane >> 3;  // matrix i: keys +8*(i/2), rows +8*(i%2)
        ldmatrixX4Trans(a, smemAddr(sdS + (kk * 16 + (mat >> 1) * 8 + (lane & 7)) * kSStride +
                                    warp * 16 + (mat & 1) * 8));
#pragma unroll
        for (int dp = 0; dp < kHeadDim / 16; ++dp) {
          uint32_t bk[4];
          const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          const int col = dp * 16 + (lane >> 4) * 8;
          ldmatrixX4Trans(bk, smemAddr(sK + key * kStride + col));
          mma16816(dq[2 * dp], a, bk[0], bk[1]);
          mma16816(dq[2 * dp + 1], a, bk[2], bk[3]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t row = q0 + warp * 16 + g + r * 8;
        if (row < seq_q) {
          float* dst = dqg + row * q_row_stride;
#pragma unroll
          for (int nt = 0; nt < kHeadDim / 8; ++nt) {
            atomicAdd(dst + nt * 8 + c2, dq[nt][2 * r]);
            atomicAdd(dst + nt * 8 + c2 + 1, dq[nt][2 * r + 1]);
          }
        }
      }
    }
  }

  cpAsyncWaitAll();  // K and V landed even when no query tile sees these keys
  // ---- dK = scale * dS^T Q, dV = P^T dO for this CTA's keys ----
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t key = key_base + r * 8;
    if (key < seq_kv) {
      T* kp = dk + ((b * seq_kv + key) * heads_kv + hk) * (int64_t)kHeadDim;
      T* vp = dv + ((b * seq_kv + key) * heads_kv + hk) * (int64_t)kHeadDim;
#pragma unroll
      for (int nt = 0; nt < kHeadDim / 8; ++nt) {
        struct __align__(4) Pair { T x, y; } pk, pv;
        pk.x = fromF<T>(dk_acc[nt][2 * r] * scale);
        pk.y = fromF<T>(dk_acc[nt][2 * r + 1] * scale);
        pv.x = fromF<T>(dv_acc[nt][2 * r]);
        pv.y = fromF<T>(dv_acc[nt][2 * r + 1]);
        *reinterpret_cast<Pair*>(kp + nt * 8 + c2) = pk;
        *reinterpret_cast<Pair*>(vp + nt * 8 + c2) = pv;
      }
    }
  }
}
)CUDA";

std::string Named(const char *body, const std::string &name) {
  std::string s = body;
  const std::string key = "KERNEL_NAME";
  s.replace(s.find(key), key.size(), name);
  return s;
}

} // namespace

bool AttentionBackwardSupported(const AttentionBackwardConfig &c, std::string *why) {
  auto no = [&](const std::string &m) {
    if (why) *why = m;
    return false;
  };
  if (c.dtype != ScalarType::bf16 && c.dtype != ScalarType::f16)
    return no("the fused attention backward takes bf16 or f16 (found " +
              std::string(ScalarTypeTag(c.dtype)) + ")");
  if (c.head_dim < 16 || c.head_dim > 128 || c.head_dim % 16 != 0)
    return no("the fused attention backward takes head dims that are multiples of 16 in "
              "16..128 (found " + std::to_string(c.head_dim) + ")");
  return true;
}

int64_t AttentionBackwardSmemBytes(const AttentionBackwardConfig &c) {
  return BwdSmemBytes(c.head_dim);
}

absl::StatusOr<AttentionBackwardKernels> EmitAttentionBackward(const AttentionBackwardConfig &c) {
  std::string why;
  if (!AttentionBackwardSupported(c, &why)) return Invalid(why);
  const std::string base = std::string("llmc_flash_attn_bwd_") + ScalarTypeTag(c.dtype) + "_d" +
                           std::to_string(c.head_dim) + (c.causal ? "_causal" : "");
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n"
      << "#define LLMC_MMA_TYPE \"" << (c.dtype == ScalarType::bf16 ? "bf16" : "f16") << "\"\n"
      << "static constexpr int kHeadDim = " << c.head_dim << ";\n"
      << "static constexpr int kBlockM = " << kBwdBlockM << ";  // query rows per tile\n"
      << "static constexpr int kBlockN = " << kBwdBlockN << ";  // keys per CTA\n"
      << "static constexpr int kThreads = " << 32 * kBwdWarps << ";\n"
      << "static constexpr int kStride = kHeadDim + 8;  // smem row stride (elements), conflict-free\n"
      << "static constexpr int kSStride = kBlockM + 8;  // dS^T row stride\n"
      << "static constexpr bool kCausal = " << (c.causal ? "true" : "false") << ";\n"
      << "static constexpr int kPrepWarps = " << kBwdPrepWarps << ";\n"
      << "static constexpr int kDqThreads = " << kBwdDqThreads << ";\n"
      << "static constexpr int kSmemBytes = " << BwdSmemBytes(c.head_dim) << ";\n";
  const std::string layout =
      "// q, out, dout, dq [B,Sq,Hq,D]; k, v, dk, dv [B,Skv,Hkv,D]; lse, D [B,Hq,Sq] f32 (natural\n"
      "// log); dQacc [B,Sq,Hq,D] f32. GQA: kv head = h / (Hq/Hkv). Causal: bottom-right aligned.\n";
  AttentionBackwardKernels k;
  k.prep.name = base + "_prep";
  LLMC_ASSIGN_OR_RETURN(
      k.prep.source,
      Assemble("// llmc FlashAttention-2 backward (Dao 2023, Algorithm 2), step 1 of 3: D = rowsum(dO * O)\n"
               "// in f32 and dQacc = 0; one warp per query row.\n" + layout,
               cfg.str(), Named(kPrepBody, k.prep.name)));
  k.main.name = base;
  LLMC_ASSIGN_OR_RETURN(
      k.main.source,
      Assemble("// llmc FlashAttention-2 backward (Dao 2023, arXiv:2307.08691, Algorithm 2), step 2 of 3.\n"
               "// CTA: kBlockN keys of one KV head; dK, dV in fp32 registers over every query head of\n"
               "// the GQA group and every query tile; P recomputed from the forward's logsumexp;\n"
               "// mma.sync m16n8k16 (ldmatrix, .trans for the B operands of dV, dK, dQ); dQ by fp32\n"
               "// atomics into dQacc. Requires 16-byte aligned q/k/v/dout/dk/dv; dynamic smem = kSmemBytes.\n" +
                   layout,
               cfg.str(), std::string(kFlashPtxHelpers) + Named(kMainBody, k.main.name)));
  k.dq.name = base + "_dq";
  LLMC_ASSIGN_OR_RETURN(
      k.dq.source,
      Assemble("// llmc FlashAttention-2 backward, step 3 of 3: dQ = scale * dQacc in the element type.\n" +
                   layout,
               cfg.str(), Named(kDqBody, k.dq.name)));
  return k;
}

absl::StatusOr<LaunchDims> AttentionBackwardPrepLaunch(int64_t batch, int64_t seq_q, int64_t heads_q) {
  return Dims(CeilDiv(std::max<int64_t>(batch * seq_q * heads_q, 1), kBwdPrepWarps), 1, 1,
              32 * kBwdPrepWarps);
}

absl::StatusOr<LaunchDims> AttentionBackwardLaunch(const AttentionBackwardConfig &c, int64_t batch,
                                                   int64_t seq_kv, int64_t heads_kv) {
  return Dims(std::max<int64_t>(batch * heads_kv, 1), CeilDiv(std::max<int64_t>(seq_kv, 1), kBwdBlockN),
              1, 32 * kBwdWarps, BwdSmemBytes(c.head_dim));
}

absl::StatusOr<LaunchDims> AttentionBackwardDqLaunch(int64_t n) {
  return Dims(std::min<int64_t>(CeilDiv(std::max<int64_t>(n, 1), kBwdDqThreads), 65536), 1, 1,
              kBwdDqThreads);
}

} // namespace llmc::cuda
