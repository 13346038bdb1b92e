//===- TransformerOps.cpp - llm transformer ops ---------------------------===//
//
// Verifiers of llm.rope, llm.matmul (and its result shape,
// matmulResultShape), llm.attention and llm.kv_cache_append.
//
//===----------------------------------------------------------------------===//

#include "LLM/IR/LLMOps.h"
#include "LLMOpsHelpers.h"

#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/SmallVector.h"

using namespace mlir;
using namespace llmc::llm;
using namespace llmc::llm::detail;

//===----------------------------------------------------------------------===//
// RoPEOp
//===----------------------------------------------------------------------===//

LogicalResult RoPEOp::verify() {
  auto in = getInput().getType();
  if (in.getRank() != 4)
    return emitOpError() << "input must be [B, S, H, D] (rank 4), found "
                         << shapeStr(in.getShape());
  int64_t d = in.getDimSize(3);
  if (!ShapedType::isDynamic(d) && d % 2 != 0)
    return emitOpError() << "head dimension must be even, found " << d;
  if (!(getTheta().convertToDouble() > 0.0))
    return emitOpError() << "theta must be > 0, found "
                         << getTheta().convertToDouble();
  if (Value offset = getOffset()) {
    auto t = cast<RankedTensorType>(offset.getType());
    bool perBatch =
        t.getRank() == 1 && dimsCompatible(t.getDimSize(0), in.getDimSize(0));
    if (t.getRank() != 0 && !perBatch)
      return emitOpError() << "offset must be a scalar or have shape ["
                           << in.getDimSize(0) << "] (one per batch), found "
                           << shapeStr(t.getShape());
  }
  Value cos = getCos(), sin = getSin();
  if (!cos && !sin)
    return success();
  // Table form.
  if (!cos || !sin)
    return emitOpError() << "cos and sin tables must be given together, found "
                         << (cos ? "cos" : "sin") << " only";
  if (getOffset())
    return emitOpError() << "offset cannot be combined with cos/sin tables "
                            "(the tables already hold the positions)";
  if (getTheta().convertToDouble() != 10000.0)
    return emitOpError() << "theta is not used with cos/sin tables: expected "
                            "the default (10000), found "
                         << getTheta().convertToDouble();
  if (cos.getType() != sin.getType())
    return emitOpError() << "sin must have the same type as cos, found "
                         << sin.getType() << " and " << cos.getType();
  auto t = cast<RankedTensorType>(cos.getType());
  if (t.getRank() != 2 && t.getRank() != 3)
    return emitOpError() << "cos must be [S, D] or [Bt, S, D] (rank 2 or 3), "
                            "found "
                         << shapeStr(t.getShape());
  int64_t lead = t.getRank() - 2;
  if (!dimsCompatible(t.getDimSize(lead), in.getDimSize(1)))
    return emitOpError() << "cos must have the input's sequence length "
                         << in.getDimSize(1) << " in dimension " << lead
                         << ", found " << shapeStr(t.getShape());
  if (!dimsCompatible(t.getDimSize(lead + 1), d))
    return emitOpError() << "cos must hold the full head dimension " << d
                         << " per position (as HF passes it), found "
                         << shapeStr(t.getShape());
  if (lead == 1 && t.getDimSize(0) != 1 &&
      !dimsCompatible(t.getDimSize(0), in.getDimSize(0)))
    return emitOpError() << "cos batch dimension must be 1 or the input's "
                         << in.getDimSize(0) << ", found "
                         << shapeStr(t.getShape());
  return success();
}

//===----------------------------------------------------------------------===//
// MatmulOp
//===----------------------------------------------------------------------===//

static bool isFp8(Type t) { return isa<Float8E4M3FNType, Float8E5M2Type>(t); }

std::optional<SmallVector<int64_t>>
llmc::llm::matmulResultShape(RankedTensorType lhs, RankedTensorType rhs,
                             bool transposeLhs, bool transposeRhs) {
  int64_t lr = lhs.getRank(), rr = rhs.getRank();
  if (lr < 2 || rr < 2)
    return std::nullopt;
  // Batch dimensions broadcast NumPy-style.
  ArrayRef<int64_t> lb = lhs.getShape().drop_back(2);
  ArrayRef<int64_t> rb = rhs.getShape().drop_back(2);
  size_t nb = std::max(lb.size(), rb.size());
  SmallVector<int64_t> shape;
  for (size_t i = 0; i < nb; ++i) {
    int64_t a = i + lb.size() >= nb ? lb[i + lb.size() - nb] : 1;
    int64_t b = i + rb.size() >= nb ? rb[i + rb.size() - nb] : 1;
    if (a != 1 && b != 1 && !dimsCompatible(a, b))
      return std::nullopt;
    shape.push_back(a == 1 ? b : a);
  }
  shape.push_back(lhs.getDimSize(lr - (transposeLhs ? 1 : 2)));
  shape.push_back(rhs.getDimSize(rr - (transposeRhs ? 2 : 1)));
  return shape;
}

LogicalResult MatmulOp::verify() {
  auto lhs = getLhs().getType();
  auto rhs = getRhs().getType();
  auto res = getResult().getType();
  if (lhs.getRank() < 2 || rhs.getRank() < 2)
    return emitOpError() << "operands must have rank >= 2, found lhs "
                         << shapeStr(lhs.getShape()) << " and rhs "
                         << shapeStr(rhs.getShape());
  Type le = lhs.getElementType(), re = rhs.getElementType();
  if (le != re && !(isFp8(le) && isFp8(re)))
    return emitOpError() << "lhs element type " << typeStr(le)
                         << " differs from rhs element type " << typeStr(re);
  Type oe = res.getElementType();
  if (isa<FloatType>(le) && !isa<FloatType>(oe))
    return emitOpError() << "float operands need a float result, found "
                         << typeStr(oe);
  if (isFp8(le) && isFp8(oe))
    return emitOpError() << "fp8 operands need an f32, f16 or bf16 result, "
                            "found "
                         << typeStr(oe);
  int64_t lr = lhs.getRank(), rr = rhs.getRank();
  int64_t kl = lhs.getDimSize(lr - (getTransposeLhs() ? 2 : 1));
  int64_t kr = rhs.getDimSize(rr - (getTransposeRhs() ? 1 : 2));
  int64_t n = rhs.getDimSize(rr - (getTransposeRhs() ? 2 : 1));
  if (!dimsCompatible(kl, kr))
    return emitOpError() << "contraction sizes differ: lhs K = " << kl
                         << ", rhs K = " << kr;
  if (std::optional<std::string> error =
          checkContractionSize(ShapedType::isDynamic(kl) ? kr : kl))
    return emitOpError() << *error;
  std::optional<SmallVector<int64_t>> expectedOr =
      matmulResultShape(lhs, rhs, getTransposeLhs(), getTransposeRhs());
  if (!expectedOr)
    return emitOpError() << "batch dimensions "
                         << shapeStr(lhs.getShape().drop_back(2)) << " and "
                         << shapeStr(rhs.getShape().drop_back(2))
                         << " do not broadcast";
  SmallVector<int64_t> expected = std::move(*expectedOr);
  if (failed(verifyCompatibleShape(expected, res.getShape())))
    return emitOpError() << "result shape " << shapeStr(res.getShape())
                         << " differs from the expected "
                         << shapeStr(expected);
  if (Value bias = getBias()) {
    auto bt = cast<RankedTensorType>(bias.getType());
    if (bt.getRank() != 1 || !dimsCompatible(bt.getDimSize(0), n))
      return emitOpError() << "bias must have shape [" << n
                           << "] (N), found " << shapeStr(bt.getShape());
  }
  // The custom syntax gives both scales or neither; the generic form may not.
  if (static_cast<bool>(getScaleLhs()) != static_cast<bool>(getScaleRhs()))
    return emitOpError() << "has an " << (getScaleLhs() ? "lhs" : "rhs")
                         << " scale but no " << (getScaleLhs() ? "rhs" : "lhs")
                         << " scale; fp8 scales come in pairs";
  if (getScaleLhs() && !(isFp8(le) && isFp8(re)))
    return emitOpError() << "scales dequantize fp8 operands, found "
                         << typeStr(le) << " and " << typeStr(re);
  return success();
}

//===----------------------------------------------------------------------===//
// AttentionOp / KVCacheAppendOp
//===----------------------------------------------------------------------===//

/// The checks `llm.attention` and its training ops share: rank-4 query
/// [B, Sq, Hq, D] and key [B, Skv, Hkv, D] (NHD; [B, Hkv, Skv, D] with
/// kvHnd) of one element type, Hkv dividing Hq (GQA), a head dimension in
/// llmc's range, a positive scale and a mask that broadcasts to the scores
/// [B, Hq, Sq, Skv].
static LogicalResult verifyQueryKey(Operation *op, RankedTensorType q,
                                    RankedTensorType k, Value mask,
                                    std::optional<APFloat> scale, bool kvHnd) {
  for (auto [name, t] : {std::pair<StringRef, RankedTensorType>{"query", q},
                         {"key", k}})
    if (t.getRank() != 4)
      return op->emitOpError()
             << name << " must be "
             << (kvHnd && name != "query" ? "[B, H, S, D]" : "[B, S, H, D]")
             << " (rank 4), found " << shapeStr(t.getShape());
  if (q.getElementType() != k.getElementType())
    return op->emitOpError()
           << "query and key must share an element type, found "
           << typeStr(q.getElementType()) << " and "
           << typeStr(k.getElementType());
  if (!dimsCompatible(q.getDimSize(0), k.getDimSize(0)))
    return op->emitOpError() << "batch sizes differ: query " << q.getDimSize(0)
                             << ", key " << k.getDimSize(0);
  if (!dimsCompatible(q.getDimSize(3), k.getDimSize(3)))
    return op->emitOpError() << "head dimensions differ: query "
                             << q.getDimSize(3) << ", key " << k.getDimSize(3);
  if (std::optional<std::string> error = checkAttentionHeadDim(
          q.isDynamicDim(3) ? k.getDimSize(3) : q.getDimSize(3)))
    return op->emitOpError() << *error;
  const unsigned seqDim = kvHnd ? 2 : 1, headsDim = kvHnd ? 1 : 2;
  int64_t hq = q.getDimSize(2), hkv = k.getDimSize(headsDim);
  if (hkv == 0)
    return op->emitOpError() << "expected at least one key/value head, found 0"
                             << (kvHnd ? " (key dimension 1 with kv_hnd)" : "");
  if (!ShapedType::isDynamic(hq) && !ShapedType::isDynamic(hkv) && hq % hkv != 0)
    return op->emitOpError()
           << "query heads (" << hq << ") must be a multiple of key/value heads ("
           << hkv << ") for grouped-query attention"
           << (kvHnd ? " (key dimension 1 with kv_hnd)" : "");
  if (scale && !(scale->convertToDouble() > 0.0))
    return op->emitOpError() << "scale must be > 0, found "
                             << scale->convertToDouble();
  if (mask) {
    SmallVector<int64_t> scores = {q.getDimSize(0), hq, q.getDimSize(1),
                                   k.getDimSize(seqDim)};
    if (failed(verifyBroadcastable(
            op, "mask", cast<RankedTensorType>(mask.getType()).getShape(),
            scores)))
      return failure();
  }
  return success();
}

/// `what` (rank 4) has the shape and element type of `like`.
static LogicalResult verifySameTensor(Operation *op, StringRef what,
                                      RankedTensorType t, StringRef likeName,
                                      RankedTensorType like) {
  if (t.getElementType() != like.getElementType())
    return op->emitOpError() << what << " must have " << likeName
                             << "'s element type "
                             << typeStr(like.getElementType()) << ", found "
                             << typeStr(t.getElementType());
  if (failed(verifyCompatibleShape(t.getShape(), like.getShape())))
    return op->emitOpError() << likeName << " " << shapeStr(like.getShape())
                             << " and " << what << " " << shapeStr(t.getShape())
                             << " must have the same shape";
  return success();
}

/// `lse` is f32 [B, Hq, Sq] for query `q` [B, Sq, Hq, D].
static LogicalResult verifyLogSumExp(Operation *op, StringRef what,
                                     RankedTensorType lse, RankedTensorType q) {
  SmallVector<int64_t> want = {q.getDimSize(0), q.getDimSize(2),
                               q.getDimSize(1)};
  if (lse.getRank() != 3 ||
      failed(verifyCompatibleShape(lse.getShape(), want)))
    return op->emitOpError() << what << " must be [B, Hq, Sq] = "
                             << shapeStr(want) << " for query "
                             << shapeStr(q.getShape()) << ", found "
                             << shapeStr(lse.getShape());
  return success();
}

LogicalResult AttentionOp::verify() {
  auto q = getQuery().getType();
  auto k = getKey().getType();
  auto v = getValue().getType();
  if (failed(verifyQueryKey(*this, q, k, getMask(), getScale(), getKvHnd())) ||
      failed(verifySameTensor(*this, "value", v, "key", k)))
    return failure();
  if (Value kvLen = getKvLen(); kvLen && !isScalarInt(kvLen.getType()))
    return emitOpError() << "kv_len must be a scalar (rank 0), found "
                         << typeStr(kvLen.getType());
  return success();
}

LogicalResult AttentionLogSumExpOp::verify() {
  auto q = getQuery().getType();
  if (failed(verifyQueryKey(*this, q, getKey().getType(), getMask(), getScale(),
                            /*kvHnd=*/false)))
    return failure();
  return verifyLogSumExp(*this, "result", getType(), q);
}

LogicalResult AttentionBackwardOp::verify() {
  auto q = getQuery().getType();
  auto k = getKey().getType();
  if (failed(verifyQueryKey(*this, q, k, getMask(), getScale(),
                            /*kvHnd=*/false)) ||
      failed(verifySameTensor(*this, "value", getValue().getType(), "key", k)) ||
      failed(verifySameTensor(*this, "output", getOutput().getType(), "query",
                              q)) ||
      failed(verifySameTensor(*this, "grad_output", getGradOutput().getType(),
                              "query", q)))
    return failure();
  return verifyLogSumExp(*this, "logsumexp", getLogsumexp().getType(), q);
}

/// Query [T, Hq, D] and key (or key pages, `headsDim` the heads' dimension
/// and the last the head dimension) of one element type, GQA, a head
/// dimension in llmc's range and a positive scale.
static LogicalResult verifyPackedQueryKey(Operation *op, RankedTensorType q,
                                          StringRef keyName, RankedTensorType k,
                                          unsigned headsDim,
                                          std::optional<APFloat> scale) {
  if (q.getRank() != 3)
    return op->emitOpError() << "query must be [T, Hq, D] (rank 3), found "
                             << shapeStr(q.getShape());
  if (q.getElementType() != k.getElementType())
    return op->emitOpError() << "query and " << keyName
                             << " must share an element type, found "
                             << typeStr(q.getElementType()) << " and "
                             << typeStr(k.getElementType());
  int64_t dk = k.getDimSize(k.getRank() - 1);
  if (!dimsCompatible(q.getDimSize(2), dk))
    return op->emitOpError() << "head dimensions differ: query " << q.getDimSize(2)
                             << ", " << keyName << " " << dk;
  if (std::optional<std::string> error =
          checkAttentionHeadDim(q.isDynamicDim(2) ? dk : q.getDimSize(2)))
    return op->emitOpError() << *error;
  int64_t hq = q.getDimSize(1), hkv = k.getDimSize(headsDim);
  if (hkv == 0)
    return op->emitOpError() << "expected at least one key/value head, found 0";
  if (!ShapedType::isDynamic(hq) && !ShapedType::isDynamic(hkv) && hq % hkv != 0)
    return op->emitOpError() << "query heads (" << hq
                             << ") must be a multiple of key/value heads (" << hkv
                             << ") for grouped-query attention";
  if (scale && !(scale->convertToDouble() > 0.0))
    return op->emitOpError() << "scale must be > 0, found " << scale->convertToDouble();
  return success();
}

LogicalResult VarlenAttentionOp::verify() {
  auto q = getQuery().getType(), k = getKey().getType();
  auto cuq = getCuSeqlensQ().getType(), cuk = getCuSeqlensK().getType();
  if (k.getRank() != 3)
    return emitOpError() << "key must be [Tk, Hkv, D] (rank 3), found "
                         << shapeStr(k.getShape());
  if (failed(verifySameTensor(*this, "value", getValue().getType(), "key", k)) ||
      failed(verifyPackedQueryKey(*this, q, "key", k, 1, getScale())))
    return failure();
  if (cuq.getRank() != 1 || cuk.getRank() != 1 ||
      !dimsCompatible(cuq.getDimSize(0), cuk.getDimSize(0)) ||
      cuq.getDimSize(0) == 0)
    return emitOpError() << "cu_seqlens_q and cu_seqlens_k must both be [B + 1], found "
                         << shapeStr(cuq.getShape()) << " and " << shapeStr(cuk.getShape());
  return success();
}

/// Pages [P, page_size, Hkv, D] (`name` in messages) with page_size >= 1,
/// and a block table [B, max_pages], cu_seqlens_q [B + 1] and seq_lens [B]
/// describing the same B sequences: the operands `llm.paged_attention` and
/// `llm.paged_kv_append` share.
static LogicalResult verifyPagedLayout(Operation *op, StringRef name, RankedTensorType pages,
                                       RankedTensorType bt, RankedTensorType cu,
                                       RankedTensorType lens) {
  if (pages.getRank() != 4)
    return op->emitOpError() << name << " must be [P, page_size, Hkv, D] (rank 4), found "
                             << shapeStr(pages.getShape());
  if (pages.getDimSize(1) == 0)
    return op->emitOpError() << "page_size (" << name << " dimension 1) must be at least 1";
  if (bt.getRank() != 2 || cu.getRank() != 1 || lens.getRank() != 1)
    return op->emitOpError() << "block_table must be [B, max_pages], cu_seqlens_q [B + 1] and "
                                "seq_lens [B], found "
                             << shapeStr(bt.getShape()) << ", " << shapeStr(cu.getShape())
                             << " and " << shapeStr(lens.getShape());
  int64_t b = bt.getDimSize(0);
  if (!dimsCompatible(lens.getDimSize(0), b) ||
      (!ShapedType::isDynamic(b) && !ShapedType::isDynamic(cu.getDimSize(0)) &&
       cu.getDimSize(0) != b + 1))
    return op->emitOpError() << "block_table " << shapeStr(bt.getShape()) << ", cu_seqlens_q "
                             << shapeStr(cu.getShape()) << " and seq_lens "
                             << shapeStr(lens.getShape())
                             << " must describe the same B sequences ([B, max_pages], [B + 1], "
                                "[B])";
  return success();
}

/// A per-KV-head scale of an fp8 KV cache: [Hkv] f32 of pages [P,
/// page_size, Hkv, D].
static LogicalResult verifyKvScale(Operation *op, StringRef name, Value scale,
                                   RankedTensorType pages) {
  auto t = cast<RankedTensorType>(scale.getType());
  if (t.getRank() != 1 || !dimsCompatible(t.getDimSize(0), pages.getDimSize(2)))
    return op->emitOpError() << name << " must be [Hkv] (one f32 per KV head) of the pages "
                             << shapeStr(pages.getShape()) << ", found "
                             << shapeStr(t.getShape());
  return success();
}

LogicalResult PagedAttentionOp::verify() {
  auto q = getQuery().getType(), kp = getKeyPages().getType();
  if (failed(verifyPagedLayout(*this, "key_pages", kp, getBlockTable().getType(),
                               getCuSeqlensQ().getType(), getSeqLens().getType())) ||
      failed(verifySameTensor(*this, "value_pages", getValuePages().getType(), "key_pages",
                              kp)))
    return failure();
  if (isFp8(kp.getElementType())) {
    if (isFp8(q.getElementType()))
      return emitOpError() << "query must be f32, f16 or bf16 (the fp8 pages are read into "
                              "it), found "
                           << typeStr(q.getElementType());
    if (!getKeyScale() || !getValueScale())
      return emitOpError() << "fp8 pages (" << typeStr(kp.getElementType())
                           << ") need scales(key_scale, value_scale), one f32 per KV head";
    if (failed(verifyKvScale(*this, "key_scale", getKeyScale(), kp)) ||
        failed(verifyKvScale(*this, "value_scale", getValueScale(), kp)))
      return failure();
    // The rest as for pages of the query's type.
    kp = kp.clone(q.getElementType());
  } else if (getKeyScale() || getValueScale()) {
    return emitOpError() << "scales are for fp8 pages only; the pages are "
                         << typeStr(kp.getElementType());
  }
  return verifyPackedQueryKey(*this, q, "key_pages", kp, 2, getScale());
}

LogicalResult PagedKVAppendOp::verify() {
  auto pages = getPages().getType(), update = getUpdate().getType();
  if (failed(verifyPagedLayout(*this, "pages", pages, getBlockTable().getType(),
                               getCuSeqlensQ().getType(), getSeqLens().getType())))
    return failure();
  if (update.getRank() != 3)
    return emitOpError() << "update must be [T, Hkv, D] (rank 3), found "
                         << shapeStr(update.getShape());
  if (isFp8(pages.getElementType()) && !isFp8(update.getElementType())) {
    if (!getScale())
      return emitOpError() << "a " << typeStr(update.getElementType()) << " update into "
                           << typeStr(pages.getElementType())
                           << " pages needs a scale (one f32 per KV head)";
    if (failed(verifyKvScale(*this, "scale", getScale(), pages)))
      return failure();
  } else if (update.getElementType() != pages.getElementType()) {
    return emitOpError() << "update element type " << typeStr(update.getElementType())
                         << " differs from the pages' " << typeStr(pages.getElementType());
  } else if (getScale()) {
    return emitOpError() << "a scale is for a float update into fp8 pages only; update and "
                            "pages are both "
                         << typeStr(pages.getElementType());
  }
  for (int i : {1, 2})
    if (!dimsCompatible(update.getDimSize(i), pages.getDimSize(i + 1)))
      return emitOpError() << "update " << shapeStr(update.getShape())
                           << " must be [T, Hkv, D] of the pages "
                           << shapeStr(pages.getShape()) << " ([P, page_size, Hkv, D])";
  return success();
}

LogicalResult KVCacheAppendOp::verify() {
  auto cache = getCache().getType();
  auto update = getUpdate().getType();
  if (cache.getRank() != 4 || update.getRank() != 4)
    return emitOpError() << "cache and update must be [B, S, H, D], found "
                         << shapeStr(cache.getShape()) << " and "
                         << shapeStr(update.getShape());
  if (cache.getElementType() != update.getElementType())
    return emitOpError() << "update element type "
                         << typeStr(update.getElementType())
                         << " differs from the cache's "
                         << typeStr(cache.getElementType());
  for (int i : {0, 2, 3})
    if (!dimsCompatible(cache.getDimSize(i), update.getDimSize(i)))
      return emitOpError() << "update " << shapeStr(update.getShape())
                           << " does not match cache "
                           << shapeStr(cache.getShape()) << " in dimension "
                           << i;
  int64_t smax = cache.getDimSize(1), snew = update.getDimSize(1);
  if (!ShapedType::isDynamic(smax) && !ShapedType::isDynamic(snew) &&
      snew > smax)
    return emitOpError() << "update has " << snew
                         << " rows, more than the cache's " << smax;
  if (!isScalarInt(getPosition().getType()))
    return emitOpError() << "position must be a scalar (rank 0), found "
                         << typeStr(getPosition().getType());
  return success();
}
