//===- RefLinalg.cpp - reference: matmul, attention, RoPE -------------------===//

#include "RankState.h"

#include <tuple>

#include "absl/container/flat_hash_map.h"

namespace llmc::reference::detail {

//===----------------------------------------------------------------------===//
// Transformer ops
//===----------------------------------------------------------------------===//

absl::StatusOr<HostTensor> RankState::rope(llm::RoPEOp op) {
  const HostTensor &x = in(op, 0);
  int64_t B = x.shape[0], S = x.shape[1], H = x.shape[2], D = x.shape[3];
  if (D % 2 != 0)
    return opError(op, absl::StrCat("head dimension must be even, found ", D));
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, x.shape));
  if (out.data.empty()) // no elements: no loop over the other dimensions
    return out;
  // Positions are float64 (s + an i64 offset near 2^63 must not overflow).
  LLMC_ASSIGN_OR_RETURN(std::vector<double> offsets,
                       newBuffer(op, "the per-batch offsets", B));
  if (op.getOffset()) {
    const HostTensor &off = in(op.getOffset());
    if (off.shape.empty()) {
      std::fill(offsets.begin(), offsets.end(),
                off.data.empty() ? 0.0 : off.data[0]);
    } else if (off.shape.size() == 1 && off.shape[0] == B) {
      for (int64_t b = 0; b < B; ++b)
        offsets[b] = off.data[b];
    } else {
      return opError(op, absl::StrCat("offset must be a scalar or have shape [",
                                      B, "], found ", shapeStr(off.shape)));
    }
  }
  bool interleaved = op.getMode() == llm::RopeMode::interleaved;
  int64_t half = D / 2;
  if (op.getCos() || op.getSin()) {
    if (!op.getCos() || !op.getSin() || op.getOffset())
      return opError(op, "cos and sin tables must be given together and "
                         "without an offset");
    // Table form (HF apply_rotary_pos_emb): x * cos + rotate(x) * sin, with
    // full head-dim rows cos/sin [S, D] or [Bt, S, D], Bt in {1, B}.
    const HostTensor &cs = in(op.getCos());
    const HostTensor &sn = in(op.getSin());
    size_t rank = cs.shape.size();
    bool shapeOk = cs.shape == sn.shape && (rank == 2 || rank == 3) &&
                   cs.shape[rank - 2] == S && cs.shape[rank - 1] == D &&
                   (rank == 2 || cs.shape[0] == 1 || cs.shape[0] == B);
    if (!shapeOk)
      return opError(op, absl::StrCat("cos and sin must both be [", S, ", ", D,
                                      "] or [1 or ", B, ", ", S, ", ", D,
                                      "], found ", shapeStr(cs.shape), " and ",
                                      shapeStr(sn.shape)));
    int64_t tableBatchStride =
        rank == 3 && cs.shape[0] == B && B > 1 ? S * D : 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        const double *c = cs.data.data() + b * tableBatchStride + s * D;
        const double *n = sn.data.data() + b * tableBatchStride + s * D;
        for (int64_t h = 0; h < H; ++h) {
          const double *xr = x.data.data() + ((b * S + s) * H + h) * D;
          double *o = out.data.data() + ((b * S + s) * H + h) * D;
          for (int64_t i = 0; i < half; ++i) {
            int64_t ia = interleaved ? 2 * i : i;
            int64_t ib = interleaved ? 2 * i + 1 : i + half;
            o[ia] = xr[ia] * c[ia] - xr[ib] * n[ia];
            o[ib] = xr[ib] * c[ib] + xr[ia] * n[ib];
          }
        }
      }
    roundInPlace(out);
    return out;
  }
  double theta = op.getTheta().convertToDouble();
  LLMC_ASSIGN_OR_RETURN(std::vector<double> invFreq,
                       newBuffer(op, "the inverse frequencies", half));
  for (int64_t i = 0; i < half; ++i)
    invFreq[i] = std::pow(theta, -2.0 * static_cast<double>(i) /
                                     static_cast<double>(D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      double p = static_cast<double>(s) + offsets[b];
      for (int64_t h = 0; h < H; ++h) {
        int64_t base = ((b * S + s) * H + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          int64_t ia = interleaved ? base + 2 * i : base + i;
          int64_t ib = interleaved ? base + 2 * i + 1 : base + i + half;
          double angle = p * invFreq[i];
          double c = std::cos(angle), sn = std::sin(angle);
          double a = x.data[ia], v = x.data[ib];
          out.data[ia] = a * c - v * sn;
          out.data[ib] = a * sn + v * c;
        }
      }
    }
  roundInPlace(out);
  return out;
}

/// Dot product with four independent partial sums.
static double dot(const double *a, const double *b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += a[k] * b[k];
    s1 += a[k + 1] * b[k + 1];
    s2 += a[k + 2] * b[k + 2];
    s3 += a[k + 3] * b[k + 3];
  }
  for (; k < n; ++k)
    s0 += a[k] * b[k];
  return (s0 + s1) + (s2 + s3);
}

absl::StatusOr<HostTensor> RankState::matmul(llm::MatmulOp op) {
  const HostTensor &a = in(op, 0), &bt = in(op, 1);
  bool tl = op.getTransposeLhs(), tr = op.getTransposeRhs();
  size_t lr = a.shape.size(), rr = bt.shape.size();
  int64_t M = a.shape[lr - (tl ? 1 : 2)], K = a.shape[lr - (tl ? 2 : 1)];
  int64_t Kr = bt.shape[rr - (tr ? 1 : 2)], N = bt.shape[rr - (tr ? 2 : 1)];
  if (K != Kr)
    return opError(op, absl::StrCat("contraction sizes differ: lhs ",
                                    shapeStr(a.shape), " has K = ", K,
                                    ", rhs ", shapeStr(bt.shape), " has K = ",
                                    Kr));
  // The verifier's rule, for shapes that were dynamic there.
  if (std::optional<std::string> error = llm::checkContractionSize(K))
    return opError(op, *error);
  const HostTensor *bias = nullptr;
  if (op.getBias()) {
    bias = &in(op.getBias());
    if (bias->shape.size() != 1 || bias->shape[0] != N)
      return opError(op, absl::StrCat("bias must have shape [", N,
                                      "] (N), found ", shapeStr(bias->shape)));
  }
  // fp8 dequantization scales multiply the exact product (one f32 each).
  double scale = 1.0;
  if (op.getScaleLhs())
    scale = in(op.getScaleLhs()).data.at(0) * in(op.getScaleRhs()).data.at(0);
  // Batch dimensions broadcast NumPy-style.
  Shape lb(a.shape.begin(), a.shape.end() - 2),
      rb(bt.shape.begin(), bt.shape.end() - 2);
  size_t nb = std::max(lb.size(), rb.size());
  Shape batch(nb), ls(nb, 0), rs(nb, 0);
  Shape lbs = stridesOf(lb), rbs = stridesOf(rb);
  for (size_t i = 0; i < nb; ++i) {
    int64_t li = static_cast<int64_t>(i + lb.size()) - static_cast<int64_t>(nb);
    int64_t ri = static_cast<int64_t>(i + rb.size()) - static_cast<int64_t>(nb);
    int64_t da = li >= 0 ? lb[li] : 1, db = ri >= 0 ? rb[ri] : 1;
    if (da != 1 && db != 1 && da != db)
      return opError(op, absl::StrCat("batch dimensions ", shapeStr(lb),
                                      " and ", shapeStr(rb),
                                      " do not broadcast"));
    batch[i] = da == 1 ? db : da;
    if (li >= 0 && da != 1)
      ls[i] = lbs[li];
    if (ri >= 0 && db != 1)
      rs[i] = rbs[ri];
  }
  Shape to = batch;
  to.push_back(M);
  to.push_back(N);
  double work = double(M) * double(N) * double(K);
  for (int64_t d : batch)
    work *= double(d);
  if (absl::Status s = budget_->spend(opName(op), work); !s.ok())
    return s;
  LLMC_ASSIGN_OR_RETURN(HostTensor out,
                       newTensor(op, resultElementType(op), to));
  if (out.data.empty()) // no elements: no loop over the batch
    return out;
  // A row-major [M, K]; Bt [N, K].
  LLMC_ASSIGN_OR_RETURN(std::vector<double> A,
                       newBuffer(op, "a copy of the lhs matrix", M * K));
  LLMC_ASSIGN_OR_RETURN(std::vector<double> Bt,
                       newBuffer(op, "a copy of the rhs matrix", N * K));
  int64_t lastL = -1, lastR = -1;
  forEachIndex(batch, [&](int64_t bi, ArrayRef<int64_t> idx) {
    int64_t lo = 0, ro = 0;
    for (size_t d = 0; d < nb; ++d) {
      lo += idx[d] * ls[d];
      ro += idx[d] * rs[d];
    }
    const double *pa = a.data.data() + lo * M * K;
    const double *pb = bt.data.data() + ro * K * N;
    if (lo != lastL) {
      for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k)
          A[i * K + k] = tl ? pa[k * M + i] : pa[i * K + k];
      lastL = lo;
    }
    if (ro != lastR) {
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k)
          Bt[j * K + k] = tr ? pb[j * K + k] : pb[k * N + j];
      lastR = ro;
    }
    double *pc = out.data.data() + bi * M * N;
    constexpr int64_t kRowBlock = 16;
    for (int64_t i0 = 0; i0 < M; i0 += kRowBlock)
      for (int64_t j = 0; j < N; ++j)
        for (int64_t i = i0; i < std::min(M, i0 + kRowBlock); ++i)
          pc[i * N + j] = dot(&A[i * K], &Bt[j * K], K) * scale +
                          (bias ? bias->data[j] : 0.0);
  });
  roundInPlace(out);
  return out;
}

namespace {
/// The scores of an attention op over query [B, Sq, Hq, D] and key/value
/// [B, Skv, Hkv, D] (NHD) or [B, Hkv, Skv, D] (kvHnd): which keys a row
/// sees and s_ij = q_i . k_j * scale + mask_ij. The mask is read in place
/// through broadcast strides (0 along the dimensions it broadcasts), not
/// materialized at [B, Hq, Sq, Skv].
struct Scores {
  int64_t B = 0, Sq = 0, Hq = 0, D = 0, Skv = 0, Hkv = 0, group = 1;
  int64_t L = 0; // keys past L are not seen (kv_len)
  double scale = 1.0;
  bool causal = false, hnd = false;
  const HostTensor *q = nullptr, *k = nullptr, *mask = nullptr;
  Shape ms = Shape(4, 0);

  /// Element offset of key/value row j of KV head hk in batch b.
  int64_t kvRow(int64_t b, int64_t hk, int64_t j) const {
    return (hnd ? (b * Hkv + hk) * Skv + j : (b * Skv + j) * Hkv + hk) * D;
  }
  int64_t qRow(int64_t b, int64_t h, int64_t i) const {
    return ((b * Sq + i) * Hq + h) * D;
  }
  /// Keys j < end(i) are seen: j < L, and with `causal` j <= i + L - Sq
  /// (bottom right).
  int64_t end(int64_t i) const { return causal ? std::min(L, i + L - Sq + 1) : L; }
  /// The scores of row i (p[0, end(i))) and their maximum (NaN-aware).
  double rowScores(int64_t b, int64_t h, int64_t i, std::vector<double> &p) const {
    double mx = -kInf;
    for (int64_t j = 0, e = end(i); j < e; ++j) {
      p[j] = score(b, h, i, j);
      mx = nanMax(mx, p[j]);
    }
    return mx;
  }
  double score(int64_t b, int64_t h, int64_t i, int64_t j) const {
    double s = dot(q->data.data() + qRow(b, h, i),
                   k->data.data() + kvRow(b, h / group, j), D) *
               scale;
    if (mask)
      s += mask->data[b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]];
    return s;
  }
};

/// Checks the shapes the verifier could not (dynamic there) and fills the
/// geometry of `op`'s scores.
template <typename OpT>
absl::StatusOr<Scores> scoresOf(OpT op, const HostTensor &q, const HostTensor &k,
                                const HostTensor *mask, bool hnd) {
  Scores g;
  g.q = &q;
  g.k = &k;
  g.hnd = hnd;
  g.B = q.shape[0], g.Sq = q.shape[1], g.Hq = q.shape[2], g.D = q.shape[3];
  g.Skv = k.shape[hnd ? 2 : 1], g.Hkv = k.shape[hnd ? 1 : 2];
  if (k.shape[0] != g.B || k.shape[3] != g.D)
    return opError(op, absl::StrCat("query ", shapeStr(q.shape), " and key ",
                                    shapeStr(k.shape),
                                    " differ in batch or head dimension"));
  // The verifier's rule, for shapes that were dynamic there.
  if (std::optional<std::string> error = llm::checkAttentionHeadDim(g.D))
    return opError(op, *error);
  if (g.Hkv == 0)
    return opError(op, "expected at least one key/value head, found 0");
  if (g.Hq % g.Hkv != 0)
    return opError(op, absl::StrCat("query heads (", g.Hq,
                                    ") must be a multiple of key/value heads (",
                                    g.Hkv, ")"));
  g.group = g.Hq / g.Hkv;
  g.L = g.Skv;
  g.causal = op.getCausal();
  g.scale = op.getScale() ? op.getScale()->convertToDouble()
                          : 1.0 / std::sqrt(static_cast<double>(g.D));
  if (mask) {
    g.mask = mask;
    if (absl::Status s = checkBroadcastable(op, "mask", mask->shape,
                                            {g.B, g.Hq, g.Sq, g.Skv});
        !s.ok())
      return s;
    Shape strides = stridesOf(mask->shape);
    size_t lead = 4 - mask->shape.size();
    for (size_t d = 0; d < mask->shape.size(); ++d)
      g.ms[lead + d] = mask->shape[d] == 1 ? 0 : strides[d];
  }
  return g;
}

/// The work of the score and product matmuls: 2 * B * Hq * Sq * Skv * D
/// multiply-adds per pass over the scores.
double attentionWork(const Scores &g, double passes) {
  return passes * double(g.B) * double(g.Hq) * double(g.Sq) * double(g.Skv) *
         double(g.D);
}
} // namespace

/// oi[0..D) += softmax(p[0..end)) (scores whose maximum is `mx`) applied to
/// the value rows valueRow(j); nothing for a row with no visible key or
/// every score -inf (such a row gives zeros, as FlashAttention; NaN scores
/// propagate). `p` is overwritten.
template <typename ValueRow>
static void addSoftmaxWeighted(std::vector<double> &p, int64_t end, double mx, double *oi,
                               int64_t D, ValueRow valueRow) {
  if (end <= 0 || mx == -kInf)
    return;
  double sum = 0.0;
  for (int64_t j = 0; j < end; ++j) {
    p[j] = std::exp(p[j] - mx);
    sum += p[j];
  }
  for (int64_t j = 0; j < end; ++j) {
    const double *vj = valueRow(j);
    const double w = p[j] / sum;
    for (int64_t d = 0; d < D; ++d)
      oi[d] += w * vj[d];
  }
}

absl::StatusOr<HostTensor> RankState::attention(llm::AttentionOp op) {
  const HostTensor &q = in(op, 0), &k = in(op, 1), &v = in(op, 2);
  if (k.shape != v.shape)
    return opError(op, absl::StrCat("key ", shapeStr(k.shape), " and value ",
                                    shapeStr(v.shape),
                                    " must have the same shape"));
  LLMC_ASSIGN_OR_RETURN(
      Scores g, scoresOf(op, q, k, op.getMask() ? &in(op.getMask()) : nullptr,
                         op.getKvHnd()));
  if (op.getKvLen()) {
    g.L = scalarInt(in(op.getKvLen()));
    if (g.L < 0 || g.L > g.Skv)
      return opError(op, absl::StrCat("kv_len ", g.L, " is outside [0, ",
                                      g.Skv, "] (the key length)"));
  }
  if (absl::Status s = budget_->spend(opName(op), attentionWork(g, 2.0)); !s.ok())
    return s;
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, q.elementType, q.shape));
  if (out.data.empty()) // no elements: no loop over batch, heads, rows
    return out;
  LLMC_ASSIGN_OR_RETURN(std::vector<double> p,
                       newBuffer(op, "a row of scores", g.Skv));
  const int64_t D = g.D;
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < g.Hq; ++h) {
      int64_t hk = h / g.group;
      for (int64_t i = 0; i < g.Sq; ++i) {
        int64_t end = g.end(i);
        double mx = g.rowScores(b, h, i, p);
        double *oi = out.data.data() + g.qRow(b, h, i);
        addSoftmaxWeighted(p, end, mx, oi, D,
                           [&](int64_t j) { return v.data.data() + g.kvRow(b, hk, j); });
      }
    }
  roundInPlace(out);
  return out;
}

namespace {
/// One sequence of packed attention: its `n` query rows from row `first`,
/// the last n of its `len` positions.
struct PackedSequence {
  int64_t first, n, len;
};

/// The rows of `seq` in `out` ([T, Hq, D], zero): softmax(q k^T scale) v
/// over keys 0 .. len - 1 (causal: up to the row's position), key position
/// j of KV head hk at element keyRow(j, hk) of `k` and `v`; a row with no
/// visible key stays zero. `p` holds at least `len` scores. With
/// `kvScales` ([Hkv] key scales, then [Hkv] value scales: an fp8 KV cache)
/// the keys and values of head hk are read times their scales, which factor
/// out of the dot products and the weighted sum.
template <typename KeyRow>
void packedAttentionRows(const HostTensor &q, const HostTensor &k, const HostTensor &v,
                         HostTensor &out, int64_t Hkv, double scale, bool causal,
                         const PackedSequence &seq, KeyRow keyRow, std::vector<double> &p,
                         const double *kvScales = nullptr) {
  const int64_t Hq = q.shape[1], D = q.shape[2], group = Hq / Hkv;
  for (int64_t i = 0; i < seq.n; ++i)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      const int64_t end = causal ? std::min(seq.len, seq.len - seq.n + i + 1) : seq.len;
      const double *qi = q.data.data() + ((seq.first + i) * Hq + h) * D;
      double mx = -kInf;
      for (int64_t j = 0; j < end; ++j) {
        const double *kj = k.data.data() + keyRow(j, hk);
        double s = 0.0;
        for (int64_t d = 0; d < D; ++d)
          s += qi[d] * kj[d];
        p[j] = s * scale * (kvScales ? kvScales[hk] : 1.0);
        mx = nanMax(mx, p[j]);
      }
      double *oi = out.data.data() + ((seq.first + i) * Hq + h) * D;
      addSoftmaxWeighted(p, end, mx, oi, D,
                         [&](int64_t j) { return v.data.data() + keyRow(j, hk); });
      if (kvScales)
        for (int64_t d = 0; d < D; ++d)
          oi[d] *= kvScales[Hkv + hk];
    }
}

int64_t at(const HostTensor &t, int64_t i) { return static_cast<int64_t>(t.data[i]); }

/// The sequences of a paged op (`llm.paged_attention`, `llm.paged_kv_append`):
/// T packed new tokens, P pages of `pageSize` rows, a block table [B,
/// max_pages], cu_seqlens_q [B + 1] and seq_lens [B], checked before any
/// work: offsets from 0 to T, never decreasing, n_b <= seq_lens[b] <=
/// max_pages * pageSize, every page a sequence holds in [0, P).
absl::StatusOr<std::vector<PackedSequence>>
pagedSequences(Operation *op, int64_t T, int64_t P, int64_t pageSize, const HostTensor &table,
               const HostTensor &cu, const HostTensor &lens) {
  const int64_t B = table.shape[0], maxPages = table.shape[1];
  if (cu.shape != Shape{B + 1} || lens.shape != Shape{B})
    return opError(op, absl::StrCat("block_table ", shapeStr(table.shape), ", cu_seqlens_q ",
                                    shapeStr(cu.shape), " and seq_lens ", shapeStr(lens.shape),
                                    " must describe the same B sequences"));
  if (at(cu, 0) != 0 || at(cu, B) != T)
    return opError(op, absl::StrCat("cu_seqlens_q must run from 0 to T = ", T, ", found ",
                                    at(cu, 0), " .. ", at(cu, B)));
  std::vector<PackedSequence> seqs;
  seqs.reserve(B);
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = at(cu, b + 1) - at(cu, b), len = at(lens, b);
    if (n < 0)
      return opError(op, absl::StrCat("cu_seqlens_q decreases at sequence ", b, " (",
                                      at(cu, b), " then ", at(cu, b + 1), ")"));
    if (n > len || len > maxPages * pageSize)
      return opError(op, absl::StrCat("sequence ", b, ": ", n, " new token(s) and seq_len ",
                                      len, " (need new tokens <= seq_len <= max_pages * "
                                      "page_size = ", maxPages * pageSize, ")"));
    for (int64_t p = 0; p * pageSize < len; ++p)
      if (int64_t page = at(table, b * maxPages + p); page < 0 || page >= P)
        return opError(op, absl::StrCat("sequence ", b, " reads page ", page,
                                        " (block_table[", b, ", ", p, "]), outside [0, ", P,
                                        ")"));
    seqs.push_back({at(cu, b), n, len});
  }
  return seqs;
}
} // namespace

absl::StatusOr<HostTensor> RankState::pagedAttention(llm::PagedAttentionOp op) {
  const HostTensor &q = in(op, 0), &kp = in(op, 1), &vp = in(op, 2),
                   &table = in(op, 3), &cu = in(op, 4), &lens = in(op, 5);
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  const int64_t P = kp.shape[0], pageSize = kp.shape[1], Hkv = kp.shape[2];
  const int64_t maxPages = table.shape[1];
  if (kp.shape != vp.shape)
    return opError(op, absl::StrCat("key_pages ", shapeStr(kp.shape), " and value_pages ",
                                    shapeStr(vp.shape), " must have the same shape"));
  if (kp.shape[3] != D || Hkv == 0 || Hq % Hkv != 0 || pageSize < 1)
    return opError(op, absl::StrCat("inconsistent shapes: query ", shapeStr(q.shape),
                                    ", pages ", shapeStr(kp.shape)));
  if (std::optional<std::string> error = llm::checkAttentionHeadDim(D))
    return opError(op, *error);
  LLMC_ASSIGN_OR_RETURN(std::vector<PackedSequence> seqs,
                       pagedSequences(op, T, P, pageSize, table, cu, lens));
  // An fp8 KV cache: the pages are read times their per-KV-head scales.
  std::vector<double> kvScales;
  if (op.getKeyScale()) {
    const HostTensor &ks = in(op, 6), &vs = in(op, 7);
    if (ks.shape != Shape{Hkv} || vs.shape != Shape{Hkv})
      return opError(op, absl::StrCat("key_scale ", shapeStr(ks.shape), " and value_scale ",
                                      shapeStr(vs.shape), " must be [Hkv] = [", Hkv, "]"));
    kvScales = ks.data;
    kvScales.insert(kvScales.end(), vs.data.begin(), vs.data.end());
  }
  double work = 0;
  int64_t maxLen = 0;
  for (const PackedSequence &seq : seqs) {
    work += 2.0 * double(seq.n) * double(Hq) * double(seq.len) * double(D);
    maxLen = std::max(maxLen, seq.len);
  }
  return packedAttention(op, q, op.getScale(), work, maxLen,
                         [&](HostTensor &out, std::vector<double> &p, double scale) {
    for (size_t b = 0; b < seqs.size(); ++b) {
      // Key position j of sequence b, head hk: a row of the pages.
      auto kvRow = [&](int64_t j, int64_t hk) {
        int64_t page = at(table, b * maxPages + j / pageSize);
        return ((page * pageSize + j % pageSize) * Hkv + hk) * D;
      };
      packedAttentionRows(q, kp, vp, out, Hkv, scale, op.getCausal(), seqs[b], kvRow, p,
                          kvScales.empty() ? nullptr : kvScales.data());
    }
  });
}

absl::StatusOr<HostTensor> RankState::pagedKVAppend(llm::PagedKVAppendOp op) {
  const HostTensor &pages = in(op, 0), &upd = in(op, 1), &table = in(op, 2), &cu = in(op, 3),
                   &lens = in(op, 4);
  const int64_t P = pages.shape[0], pageSize = pages.shape[1];
  const int64_t row = pages.shape[2] * pages.shape[3], maxPages = table.shape[1];
  if (upd.shape.size() != 3 || upd.shape[1] != pages.shape[2] ||
      upd.shape[2] != pages.shape[3] || pageSize < 1)
    return opError(op, absl::StrCat("update ", shapeStr(upd.shape), " must be [T, Hkv, D] of the pages ",
                                    shapeStr(pages.shape)));
  LLMC_ASSIGN_OR_RETURN(std::vector<PackedSequence> seqs,
                       pagedSequences(op, upd.shape[0], P, pageSize, table, cu, lens));
  // The row each new token goes to, and no row written twice.
  std::vector<int64_t> slots(upd.shape[0]);
  absl::flat_hash_map<int64_t, int64_t> writer;
  for (size_t b = 0; b < seqs.size(); ++b)
    for (int64_t i = 0; i < seqs[b].n; ++i) {
      int64_t pos = seqs[b].len - seqs[b].n + i;
      int64_t slot = at(table, b * maxPages + pos / pageSize) * pageSize + pos % pageSize;
      auto [it, fresh] = writer.try_emplace(slot, b);
      if (!fresh)
        return opError(op, absl::StrCat("sequences ", it->second, " and ", b,
                                        " both write row ", slot % pageSize, " of page ",
                                        slot / pageSize,
                                        " (a shared page must be copied before a sequence "
                                        "appends to it)"));
      slots[seqs[b].first + i] = slot;
    }
  // Into fp8 pages: update / scale[h], rounded (saturating) to the pages'
  // type.
  const HostTensor *scale = op.getScale() ? &in(op, 5) : nullptr;
  const int64_t Hkv = pages.shape[2], D = pages.shape[3];
  if (scale && scale->shape != Shape{Hkv})
    return opError(op, absl::StrCat("scale ", shapeStr(scale->shape), " must be [Hkv] = [",
                                    Hkv, "]"));
  Type pageType = pages.elementType;
  // `pages` is not used below: taking it ends that reference.
  LLMC_ASSIGN_OR_RETURN(HostTensor out, takeOrCopy(op, 0));
  for (size_t t = 0; t < slots.size(); ++t) {
    if (!scale) {
      std::copy_n(upd.data.begin() + t * row, row, out.data.begin() + slots[t] * row);
      continue;
    }
    // The quotient in f32, as the append kernel, torch's `(x.float() /
    // scale).to(fp8)` and llm.div + llm.cast compute it: an f32 quotient on
    // an fp8 rounding tie must round as a tie (a float64 quotient just off
    // it would land one fp8 step away).
    for (int64_t e = 0; e < row; ++e)
      out.data[slots[t] * row + e] =
          RoundToType(static_cast<float>(upd.data[t * row + e]) /
                          static_cast<float>(scale->data[e / D]),
                      pageType);
  }
  return out;
}

absl::StatusOr<HostTensor> RankState::packedAttention(
    Operation *op, const HostTensor &q, std::optional<llvm::APFloat> scale, double work,
    int64_t maxLen,
    llvm::function_ref<void(HostTensor &, std::vector<double> &, double)> rows) {
  if (absl::Status s = budget_->spend(opName(op), work); !s.ok())
    return s;
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, q.elementType, q.shape));
  if (out.data.empty())
    return out;
  LLMC_ASSIGN_OR_RETURN(std::vector<double> p, newBuffer(op, "a row of scores", maxLen));
  rows(out, p, scale ? scale->convertToDouble()
                     : 1.0 / std::sqrt(static_cast<double>(q.shape.back())));
  roundInPlace(out);
  return out;
}

absl::StatusOr<HostTensor> RankState::varlenAttention(llm::VarlenAttentionOp op) {
  const HostTensor &q = in(op, 0), &k = in(op, 1), &v = in(op, 2), &cuq = in(op, 3),
                   &cuk = in(op, 4);
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  const int64_t Tk = k.shape[0], Hkv = k.shape[1], B = cuq.shape[0] - 1;
  if (k.shape != v.shape || k.shape[2] != D || Hkv == 0 || Hq % Hkv != 0 || B < 0 ||
      cuk.shape != cuq.shape)
    return opError(op, absl::StrCat("inconsistent shapes: query ", shapeStr(q.shape), ", key ",
                                    shapeStr(k.shape), ", value ", shapeStr(v.shape),
                                    ", cu_seqlens_q ", shapeStr(cuq.shape), ", cu_seqlens_k ",
                                    shapeStr(cuk.shape)));
  if (std::optional<std::string> error = llm::checkAttentionHeadDim(D))
    return opError(op, *error);
  double work = 0;
  for (auto [cu, name, total] : {std::tuple<const HostTensor *, const char *, int64_t>{
                                     &cuq, "cu_seqlens_q", T},
                                 {&cuk, "cu_seqlens_k", Tk}}) {
    if (at(*cu, 0) != 0 || at(*cu, B) != total)
      return opError(op, absl::StrCat(name, " must run from 0 to ", total, ", found ",
                                      at(*cu, 0), " .. ", at(*cu, B)));
    for (int64_t b = 0; b < B; ++b)
      if (at(*cu, b + 1) < at(*cu, b))
        return opError(op, absl::StrCat(name, " decreases at sequence ", b, " (", at(*cu, b),
                                        " then ", at(*cu, b + 1), ")"));
  }
  for (int64_t b = 0; b < B; ++b)
    work += 2.0 * double(at(cuq, b + 1) - at(cuq, b)) * double(Hq) *
            double(at(cuk, b + 1) - at(cuk, b)) * double(D);
  int64_t maxLen = 0;
  for (int64_t b = 0; b < B; ++b)
    maxLen = std::max(maxLen, at(cuk, b + 1) - at(cuk, b));
  return packedAttention(op, q, op.getScale(), work, maxLen,
                         [&](HostTensor &out, std::vector<double> &p, double scale) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t keys = at(cuk, b);
      auto kvRow = [&](int64_t j, int64_t hk) { return ((keys + j) * Hkv + hk) * D; };
      PackedSequence seq{at(cuq, b), at(cuq, b + 1) - at(cuq, b), at(cuk, b + 1) - keys};
      packedAttentionRows(q, k, v, out, Hkv, scale, op.getCausal(), seq, kvRow, p);
    }
  });
}

absl::StatusOr<HostTensor>
RankState::attentionLogSumExp(llm::AttentionLogSumExpOp op) {
  const HostTensor &q = in(op, 0), &k = in(op, 1);
  LLMC_ASSIGN_OR_RETURN(
      Scores g, scoresOf(op, q, k, op.getMask() ? &in(op.getMask()) : nullptr,
                         /*hnd=*/false));
  if (absl::Status s = budget_->spend(opName(op), attentionWork(g, 1.0)); !s.ok())
    return s;
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, op.getType().getElementType(),
                                                  {g.B, g.Hq, g.Sq}));
  if (out.data.empty())
    return out;
  LLMC_ASSIGN_OR_RETURN(std::vector<double> p,
                       newBuffer(op, "a row of scores", g.Skv));
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < g.Hq; ++h)
      for (int64_t i = 0; i < g.Sq; ++i) {
        int64_t end = g.end(i);
        double mx = g.rowScores(b, h, i, p);
        double &lse = out.data[(b * g.Hq + h) * g.Sq + i];
        // No visible key or every score -inf: +inf, so that exp(s - lse) is
        // 0 for the row in any backward (FlashAttention's CUDA convention;
        // log 0 = -inf would make it NaN). NaN propagates.
        if (end <= 0 || mx == -kInf) {
          lse = kInf;
          continue;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < end; ++j)
          sum += std::exp(p[j] - mx);
        lse = mx + std::log(sum);
      }
  roundInPlace(out);
  return out;
}

absl::Status RankState::attentionBackward(llm::AttentionBackwardOp op) {
  const HostTensor &q = in(op, 0), &k = in(op, 1), &v = in(op, 2),
                   &o = in(op, 3), &dO = in(op, 4), &lse = in(op, 5);
  if (k.shape != v.shape || o.shape != q.shape || dO.shape != q.shape)
    return opError(op, absl::StrCat("expected value ", shapeStr(v.shape),
                                    " shaped as key ", shapeStr(k.shape),
                                    ", output ", shapeStr(o.shape),
                                    " and grad_output ", shapeStr(dO.shape),
                                    " shaped as query ", shapeStr(q.shape)));
  LLMC_ASSIGN_OR_RETURN(
      Scores g, scoresOf(op, q, k, op.getMask() ? &in(op.getMask()) : nullptr,
                         /*hnd=*/false));
  if (lse.shape != Shape{g.B, g.Hq, g.Sq})
    return opError(op, absl::StrCat("logsumexp ", shapeStr(lse.shape),
                                    " must be [B, Hq, Sq] = ",
                                    shapeStr(Shape{g.B, g.Hq, g.Sq})));
  if (absl::Status s = budget_->spend(opName(op), attentionWork(g, 4.0)); !s.ok())
    return s;
  LLMC_ASSIGN_OR_RETURN(HostTensor dq, newTensor(op, q.elementType, q.shape,
                                                 "grad_query"));
  LLMC_ASSIGN_OR_RETURN(HostTensor dk, newTensor(op, k.elementType, k.shape,
                                                 "grad_key"));
  LLMC_ASSIGN_OR_RETURN(HostTensor dv, newTensor(op, v.elementType, v.shape,
                                                 "grad_value"));
  const int64_t D = g.D;
  for (int64_t b = 0; b < g.B && !dq.data.empty(); ++b)
    for (int64_t h = 0; h < g.Hq; ++h) {
      int64_t hk = h / g.group;
      for (int64_t i = 0; i < g.Sq; ++i) {
        double l = lse.data[(b * g.Hq + h) * g.Sq + i];
        if (std::isinf(l)) // the row saw no key (+inf; -inf also accepted): P = 0
          continue;
        const double *oi = o.data.data() + g.qRow(b, h, i);
        const double *doi = dO.data.data() + g.qRow(b, h, i);
        const double *qi = q.data.data() + g.qRow(b, h, i);
        double *dqi = dq.data.data() + g.qRow(b, h, i);
        double Di = dot(doi, oi, D);
        for (int64_t j = 0, end = g.end(i); j < end; ++j) {
          double p = std::exp(g.score(b, h, i, j) - l);
          // A key the row does not see (score -inf) contributes nothing,
          // whatever its values (NaN in an unseen value stays out).
          if (p == 0.0)
            continue;
          const double *kj = k.data.data() + g.kvRow(b, hk, j);
          const double *vj = v.data.data() + g.kvRow(b, hk, j);
          double ds = p * (dot(doi, vj, D) - Di);
          double *dkj = dk.data.data() + g.kvRow(b, hk, j);
          double *dvj = dv.data.data() + g.kvRow(b, hk, j);
          for (int64_t d = 0; d < D; ++d) {
            dqi[d] += g.scale * ds * kj[d];
            dkj[d] += g.scale * ds * qi[d];
            dvj[d] += p * doi[d];
          }
        }
      }
    }
  for (auto [result, t] : llvm::zip(op->getResults(),
                                    std::array<HostTensor *, 3>{&dq, &dk, &dv})) {
    roundInPlace(*t);
    if (absl::Status s = checkResult(op, result, *t); !s.ok())
      return s;
    store(result, Entry{std::move(*t), false});
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Weight-only quantization
//===----------------------------------------------------------------------===//

// Float32 arithmetic on purpose: these are the exact operations the CUDA
// kernels perform (IEEE division and multiplication, rint = round half to
// even), so the reference reproduces their bits.

absl::Status RankState::quantizeWeight(llm::QuantizeWeightOp op) {
  const HostTensor &w = in(op, 0);
  if (w.shape.size() != 2)
    return opError(op, absl::StrCat("expected a rank-2 weight, found shape ",
                                    shapeStr(w.shape)));
  const int64_t n = w.shape[0], k = w.shape[1];
  const int64_t bits = op.getBits(), group = op.getGroupSize();
  if (k % group != 0)
    return opError(op, absl::StrCat("K = ", k, " is not a multiple of group_size = ",
                                    group));
  const float qmax = bits == 4 ? 7.0f : 127.0f;
  const int64_t groups = k / group;
  LLMC_ASSIGN_OR_RETURN(
      HostTensor packed,
      newTensor(op, op.getPacked().getType().getElementType(),
                {n, bits == 4 ? k / 2 : k}, "the packed result"));
  LLMC_ASSIGN_OR_RETURN(HostTensor scales,
                       newTensor(op, op.getScales().getType().getElementType(),
                                 {n, groups}, "the scales result"));
  // One row of codes (counted as doubles: an upper bound).
  if (absl::Status s = reserve(op, "a row of codes", k); !s.ok())
    return s;
  std::vector<int> q(k);
  for (int64_t r = 0; r < n && k > 0; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      float amax = 0.0f;
      for (int64_t j = g * group; j < (g + 1) * group; ++j)
        amax = std::fmax(amax, std::fabs(static_cast<float>(w.data[r * k + j])));
      const float scale = amax / qmax;
      scales.data[r * groups + g] = scale;
      for (int64_t j = g * group; j < (g + 1) * group; ++j) {
        float x = static_cast<float>(w.data[r * k + j]);
        float v = scale > 0.0f ? std::nearbyint(x / scale) : 0.0f;
        q[j] = static_cast<int>(std::fmin(std::fmax(v, -qmax), qmax));
      }
    }
    if (bits == 8) {
      for (int64_t j = 0; j < k; ++j)
        packed.data[r * k + j] = q[j];
    } else {
      for (int64_t j = 0; j < k / 2; ++j) {
        int byte = (q[2 * j] & 0xF) | ((q[2 * j + 1] & 0xF) << 4);
        packed.data[r * (k / 2) + j] = static_cast<int8_t>(byte);
      }
    }
  }
  for (auto [result, t] :
       llvm::zip(op->getResults(), std::array<HostTensor *, 2>{&packed, &scales})) {
    if (absl::Status s = checkResult(op, result, *t); !s.ok())
      return s;
    store(result, Entry{std::move(*t), false});
  }
  return absl::OkStatus();
}

absl::StatusOr<HostTensor>
RankState::dequantizeWeight(llm::DequantizeWeightOp op) {
  const HostTensor &packed = in(op, 0), &scales = in(op, 1);
  const int64_t bits = op.getBits(), group = op.getGroupSize();
  if (packed.shape.size() != 2 || scales.shape.size() != 2)
    return opError(op, "expected rank-2 packed and scales operands");
  const int64_t n = packed.shape[0];
  const int64_t k = bits == 4 ? packed.shape[1] * 2 : packed.shape[1];
  if (k % group != 0 || scales.shape[0] != n || scales.shape[1] != k / group)
    return opError(op, absl::StrCat("scales of shape ", shapeStr(scales.shape),
                                    " do not match packed of shape ",
                                    shapeStr(packed.shape), " for group_size ",
                                    group));
  LLMC_ASSIGN_OR_RETURN(HostTensor out,
                       newTensor(op, resultElementType(op), {n, k}));
  for (int64_t r = 0; r < n && k > 0; ++r)
    for (int64_t j = 0; j < k; ++j) {
      int q;
      if (bits == 8) {
        q = static_cast<int>(packed.data[r * k + j]);
      } else {
        int byte = static_cast<int>(packed.data[r * (k / 2) + j / 2]) & 0xFF;
        int nib = (j % 2 ? byte >> 4 : byte) & 0xF;
        q = nib >= 8 ? nib - 16 : nib;
      }
      float v = static_cast<float>(q) *
                static_cast<float>(scales.data[r * (k / group) + j / group]);
      out.data[r * k + j] = RoundToType(v, out.elementType);
    }
  return out;
}

absl::StatusOr<HostTensor>
RankState::kvCacheAppend(llm::KVCacheAppendOp op) {
  const HostTensor &cache = in(op, 0), &upd = in(op, 1);
  int64_t pos = scalarInt(in(op, 2));
  if (cache.shape[0] != upd.shape[0] || cache.shape[2] != upd.shape[2] ||
      cache.shape[3] != upd.shape[3])
    return opError(op, absl::StrCat("update ", shapeStr(upd.shape),
                                    " does not match cache ",
                                    shapeStr(cache.shape),
                                    " in batch, heads or head dimension"));
  int64_t B = cache.shape[0], Smax = cache.shape[1], Snew = upd.shape[1];
  int64_t row = cache.shape[2] * cache.shape[3];
  // pos > Smax - Snew, not pos + Snew > Smax: the sum overflows int64 for
  // a position near 2^63, wrapping negative past the check.
  if (pos < 0 || pos > Smax - Snew)
    return absl::OutOfRangeError(absl::StrCat(
        opName(op), ": position ", pos, " + ", Snew,
        " new rows exceeds the cache length ", Smax));
  // The cache is updated in place when this is its last use (`cache` is
  // not used below: taking it ends that reference).
  LLMC_ASSIGN_OR_RETURN(HostTensor out, takeOrCopy(op, 0));
  if (Snew * row == 0)
    return out;
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(upd.data.begin() + b * Snew * row, Snew * row,
                out.data.begin() + (b * Smax + pos) * row);
  return out;
}

} // namespace llmc::reference::detail
