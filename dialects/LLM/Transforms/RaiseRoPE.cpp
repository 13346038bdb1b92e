//===- RaiseRoPE.cpp - decomposed HF rotary embedding -> llm.rope ---------===//
//
// Hugging Face's `apply_rotary_pos_emb` (LLaMA, Mistral, Qwen, ...) computes
//   q_embed = q * cos + rotate_half(q) * sin,
//   rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2], dim=-1)
// on q [B, H, S, D] (after the head transpose) with cos/sin [B', S, D]
// unsqueezed at the head dimension. Imported op by op that is two slices, a
// negation, a concat (spelled transpose / outer concat / transpose by the
// plugin), two broadcasts, two multiplies and an add, each a launch with
// strided reads. This pattern rewrites it to the table form of llm.rope
// (one kernel; see LLMOps.td for the semantics, which are exactly these):
//
//   add(mul(X, bcast(C)), mul(rotate_half(X), bcast(S)))     X [B, H, S, D]
//     with X = transpose(Y, [0, 2, 1, 3]), Y [B, S, H, D]
//   => transpose(llm.rope Y cos(C') sin(S') half_split, [0, 2, 1, 3])
//
// and the same on X [B, S, H, D] with the tables broadcast over dim 2
// (=> llm.rope X directly). C' and S' are the tables reshaped to [B', S, D].
// The transpose pair around the attention then cancels in canonicalization.
//
// Numerics: HF rounds q*cos, rotate_half(q)*sin and their sum to the input
// type; llm.rope computes in fp32 and rounds once (at most as far from the
// exact value as HF's result).
//
// The backward of the same function, as AOTAutograd writes it for the
// gradient G [B, H, S, D] of q_embed, is
//   G*cos + rotate_half^T(G*sin),  rotate_half^T(g) = cat(g[..., D/2:], -g[..., :D/2])
// with the transposed rotation spelled as the sum of two slice_scatter's
// into zeros (cat(0, -g_lo) + cat(g_hi, 0)). Per pair (i, i + D/2) that is
//   dq[i]       = G[i] c[i] + G[i + D/2] s[i + D/2]
//   dq[i + D/2] = G[i + D/2] c[i + D/2] - G[i] s[i]
// = llm.rope G cos(C) sin(S') with S'[i] = -S[(i + D/2) mod D]: the table
// form with the sine table's halves swapped and negated (on the [Bt, S, D]
// table, not on G; exact for any tables, not only HF's duplicated ones).
// That replaces a multiply, slices, a negation, two zero-padded concats
// (transposes and block copies) and two adds over G with one kernel.
//
//===----------------------------------------------------------------------===//

#include "LLM/Transforms/Passes.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

#include <optional>

using namespace mlir;
using namespace llmc::llm;

namespace {

RankedTensorType tensorOf(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}

/// `v` is all zeros: a float zero constant (splat), possibly sliced,
/// transposed, reshaped, broadcast or cast.
bool isZeroFill(Value v) {
  while (Operation *op = v.getDefiningOp()) {
    if (isa<SliceOp, TransposeOp, ReshapeOp, BroadcastOp, CastOp>(op)) {
      v = op->getOperand(0);
      continue;
    }
    return matchPattern(v, m_AnyZeroFloat());
  }
  return false;
}

/// The two halves of `r` = concat(a, b) along its last dimension: a direct
/// llm.concat, or the importer's spelling of an inner concat,
/// transpose(concat(transpose(a, P), transpose(b, P), dim = d), Q) where Q
/// undoes P and maps the concat dimension d to the last one. A half that is
/// zeros (isZeroFill) may be in any layout and is returned as it is.
std::optional<std::pair<Value, Value>> matchLastDimConcat(Value r) {
  RankedTensorType type = tensorOf(r);
  if (!type || type.getRank() < 1)
    return std::nullopt;
  const int64_t rank = type.getRank();
  if (auto c = r.getDefiningOp<ConcatOp>()) {
    if (c.getInputs().size() == 2 && c.getDim() == rank - 1)
      return std::make_pair(c.getInputs()[0], c.getInputs()[1]);
    return std::nullopt;
  }
  auto outer = r.getDefiningOp<TransposeOp>();
  if (!outer)
    return std::nullopt;
  auto c = outer.getInput().getDefiningOp<ConcatOp>();
  if (!c || c.getInputs().size() != 2 || !c.getResult().hasOneUse())
    return std::nullopt;
  ArrayRef<int64_t> q = outer.getPermutation();
  // r.dim(rank-1) is concat.dim(q[rank-1]): that must be the concat dim.
  if (q[rank - 1] != c.getDim())
    return std::nullopt;
  SmallVector<Value, 2> halves;
  for (Value in : c.getInputs()) {
    auto t = in.getDefiningOp<TransposeOp>();
    if (!t && isZeroFill(in)) {  // zeros in any layout (a folded transpose)
      halves.push_back(in);
      continue;
    }
    if (!t || !in.hasOneUse())
      return std::nullopt;
    // r.dim(i) = concat.dim(q[i]) = a.dim(p[q[i]]): identity needed.
    ArrayRef<int64_t> p = t.getPermutation();
    for (int64_t i = 0; i < rank; ++i)
      if (p[q[i]] != i)
        return std::nullopt;
    halves.push_back(t.getInput());
  }
  return std::make_pair(halves[0], halves[1]);
}

/// `s` is llm.slice of `x` along the last dimension from `lo` to `hi`,
/// every other dimension whole, step 1.
bool isLastDimSlice(Value s, Value x, int64_t lo, int64_t hi) {
  auto slice = s.getDefiningOp<SliceOp>();
  if (!slice || slice.getInput() != x || !s.hasOneUse())
    return false;
  RankedTensorType xt = tensorOf(x);
  const int64_t rank = xt.getRank();
  for (int64_t i = 0; i < rank; ++i) {
    int64_t size = xt.getDimSize(i);
    int64_t start = slice.getStarts()[i], limit = slice.getLimits()[i];
    if (slice.getSteps()[i] != 1)
      return false;
    if (limit == -1)
      limit = size;
    bool want = i == rank - 1 ? (start == lo && limit == hi)
                              : (start == 0 && limit == size);
    if (!want)
      return false;
  }
  return true;
}

/// `r` = rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2], dim=-1).
bool isRotateHalf(Value r, Value x) {
  RankedTensorType xt = tensorOf(x);
  if (!xt || xt.getRank() < 1 || r.getType() != x.getType())
    return false;
  int64_t d = xt.getDimSize(xt.getRank() - 1);
  if (ShapedType::isDynamic(d) || d % 2 != 0 || d < 2)
    return false;
  auto halves = matchLastDimConcat(r);
  if (!halves)
    return false;
  auto neg = halves->first.getDefiningOp<NegOp>();
  return neg && halves->first.hasOneUse() &&
         isLastDimSlice(neg.getInput(), x, d / 2, d) &&
         isLastDimSlice(halves->second, x, 0, d / 2);
}

/// A table operand of the multiply: broadcast(t) (or t itself) whose shape,
/// right-aligned to X's rank 4, is [Bt, 1, S, D] when the heads are X's dim
/// `headDim` = 1, or [Bt, S, 1, D] when they are dim 2, with Bt 1 or B.
/// Returns t.
Value matchTable(Value v, RankedTensorType xt, int headDim) {
  Value t = v;
  if (auto b = v.getDefiningOp<BroadcastOp>()) {
    if (!v.hasOneUse())
      return {};
    t = b.getInput();
  }
  RankedTensorType tt = tensorOf(t);
  if (!tt || !tt.hasStaticShape() || tt.getRank() > 4 ||
      !isa<FloatType>(tt.getElementType()))
    return {};
  SmallVector<int64_t, 4> shape(4 - tt.getRank(), 1);
  llvm::append_range(shape, tt.getShape());
  const int seqDim = headDim == 1 ? 2 : 1;
  if (shape[headDim] != 1 || shape[seqDim] != xt.getDimSize(seqDim) ||
      shape[3] != xt.getDimSize(3) ||
      (shape[0] != 1 && shape[0] != xt.getDimSize(0)))
    return {};
  return t;
}

/// The type of `t` as the [Bt, S, D] table llm.rope takes.
RankedTensorType ropeTableType(Value t, int headDim) {
  RankedTensorType tt = tensorOf(t);
  SmallVector<int64_t, 4> shape(4 - tt.getRank(), 1);
  llvm::append_range(shape, tt.getShape());
  shape.erase(shape.begin() + headDim);
  return RankedTensorType::get(shape, tt.getElementType());
}

/// `t` as the [Bt, S, D] table llm.rope takes.
Value asRopeTable(PatternRewriter &rewriter, Location loc, Value t,
                  int headDim) {
  RankedTensorType tt = tensorOf(t);
  RankedTensorType want = ropeTableType(t, headDim);
  if (tt == want)
    return t;
  return ReshapeOp::create(rewriter, loc, want, t);
}

struct RaiseRotaryEmbedding : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp root,
                                PatternRewriter &rewriter) const override {
    RankedTensorType xt = root.getResult().getType();
    if (xt.getRank() != 4 || !xt.hasStaticShape() ||
        !isa<FloatType>(xt.getElementType()))
      return rewriter.notifyMatchFailure(root, "not a static 4-d float add");
    for (int i = 0; i < 2; ++i) {
      auto cosMul = root->getOperand(i).getDefiningOp<MulOp>();
      auto sinMul = root->getOperand(1 - i).getDefiningOp<MulOp>();
      if (!cosMul || !sinMul || !cosMul.getResult().hasOneUse() ||
          !sinMul.getResult().hasOneUse())
        continue;
      for (int j = 0; j < 2; ++j) {
        Value x = cosMul->getOperand(j), c = cosMul->getOperand(1 - j);
        for (int k = 0; k < 2; ++k) {
          Value r = sinMul->getOperand(k), s = sinMul->getOperand(1 - k);
          if (x.getType() != xt || !isRotateHalf(r, x))
            continue;
          // Heads at dim 1 (q after the HF head transpose) when x is
          // transpose(y, [0, 2, 1, 3]); else heads at dim 2 (x is [B,S,H,D]).
          auto tr = x.getDefiningOp<TransposeOp>();
          bool headTranspose =
              tr && tr.getPermutation() == ArrayRef<int64_t>{0, 2, 1, 3};
          int headDim = headTranspose ? 1 : 2;
          Value cosT = matchTable(c, xt, headDim);
          Value sinT = matchTable(s, xt, headDim);
          // cos and sin of one type (e.g. not Bt = B and Bt = 1), decided
          // before creating anything: a pattern that fails must not have
          // changed the IR (the greedy driver would never converge).
          if (!cosT || !sinT ||
              ropeTableType(cosT, headDim) != ropeTableType(sinT, headDim))
            continue;
          Location loc = root.getLoc();
          Value y = headTranspose ? tr.getInput() : x;
          Value cosR = asRopeTable(rewriter, loc, cosT, headDim);
          Value sinR = asRopeTable(rewriter, loc, sinT, headDim);
          Value rope = RoPEOp::create(rewriter, loc, y.getType(), y,
                                      /*offset=*/Value(), cosR, sinR,
                                      RopeMode::half_split,
                                      APFloat(10000.0));
          if (headTranspose)
            rope = TransposeOp::create(rewriter, loc, xt, rope,
                                       ArrayRef<int64_t>{0, 2, 1, 3});
          rewriter.replaceOp(root, rope);
          return success();
        }
      }
    }
    return rewriter.notifyMatchFailure(root, "not q*cos + rotate_half(q)*sin");
  }
};


/// The m of `r` = rotate_half^T(m) = cat(m[..., D/2:], -m[..., :D/2])
/// spelled as add(cat(0, -m_lo), cat(m_hi, 0)) (AOTAutograd's
/// slice_scatter's into zeros), either operand order; null if `r` is not.
Value matchRotateHalfTransposed(Value r) {
  auto add = r.getDefiningOp<AddOp>();
  RankedTensorType rt = tensorOf(r);
  if (!add || !r.hasOneUse() || !rt || rt.getRank() < 1)
    return {};
  int64_t d = rt.getDimSize(rt.getRank() - 1);
  if (ShapedType::isDynamic(d) || d % 2 != 0 || d < 2)
    return {};
  for (int i = 0; i < 2; ++i) {
    auto negHalf = matchLastDimConcat(add->getOperand(i));
    auto hiHalf = matchLastDimConcat(add->getOperand(1 - i));
    if (!negHalf || !hiHalf || !isZeroFill(negHalf->first) ||
        !isZeroFill(hiHalf->second))
      continue;
    auto neg = negHalf->second.getDefiningOp<NegOp>();
    auto hi = hiHalf->first.getDefiningOp<SliceOp>();
    if (!neg || !hi || !negHalf->second.hasOneUse())
      continue;
    Value m = hi.getInput();
    if (m.getType() == rt && isLastDimSlice(neg.getInput(), m, 0, d / 2) &&
        isLastDimSlice(hiHalf->first, m, d / 2, d))
      return m;
  }
  return {};
}

/// -roll(t, D/2) on the last dimension of the [Bt, S, D] table `t`:
/// cat(-t[..., D/2:], -t[..., :D/2]) in the spelling the lowering takes
/// (transpose / outer concat / transpose).
Value swappedNegatedHalves(PatternRewriter &rewriter, Location loc, Value t) {
  RankedTensorType tt = tensorOf(t);
  const int64_t rank = tt.getRank(), d = tt.getDimSize(rank - 1);
  SmallVector<int64_t> toFront = {rank - 1}, toBack;
  for (int64_t i = 0; i + 1 < rank; ++i) {
    toFront.push_back(i);
    toBack.push_back(i + 1);
  }
  toBack.push_back(0);
  SmallVector<int64_t> halfShape(tt.getShape()), starts(rank, 0),
      limits(rank, -1), steps(rank, 1);
  halfShape.back() = d / 2;
  RankedTensorType half = tt.clone(halfShape);
  SmallVector<int64_t> frontShape = {d / 2};
  llvm::append_range(frontShape, ArrayRef<int64_t>(tt.getShape()).drop_back());
  SmallVector<Value, 2> parts;
  for (int64_t lo : {d / 2, int64_t{0}}) {
    starts.back() = lo;
    limits.back() = lo + d / 2;
    Value s = SliceOp::create(rewriter, loc, half, t, starts, limits, steps);
    parts.push_back(TransposeOp::create(rewriter, loc, tt.clone(frontShape), s, toFront));
  }
  SmallVector<int64_t> catShape = frontShape;
  catShape[0] = d;
  Value cat = ConcatOp::create(rewriter, loc, tt.clone(catShape), parts, /*dim=*/0);
  Value back = TransposeOp::create(rewriter, loc, tt, cat, toBack);
  return NegOp::create(rewriter, loc, tt, back);
}

/// add(mul(G, bcast(C)), rotate_half^T(mul(G, bcast(S))))
///   => llm.rope G cos(C) sin(-roll(S, D/2)) half_split (G transposed to
///      [B, S, H, D] and back when its heads are dim 1).
struct RaiseRotaryEmbeddingBackward : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp root,
                                PatternRewriter &rewriter) const override {
    RankedTensorType gt = root.getResult().getType();
    if (gt.getRank() != 4 || !gt.hasStaticShape() ||
        !isa<FloatType>(gt.getElementType()))
      return rewriter.notifyMatchFailure(root, "not a static 4-d float add");
    for (int i = 0; i < 2; ++i) {
      auto cosMul = root->getOperand(i).getDefiningOp<MulOp>();
      Value rot = root->getOperand(1 - i);
      if (!cosMul || !cosMul.getResult().hasOneUse())
        continue;
      // m = G * sin: the operand of the rotated halves' slices.
      Value m = matchRotateHalfTransposed(rot);
      auto sinMul = m ? m.getDefiningOp<MulOp>() : MulOp();
      if (!sinMul)
        continue;
      for (int j = 0; j < 2; ++j) {
        Value g = cosMul->getOperand(j), c = cosMul->getOperand(1 - j);
        for (int k = 0; k < 2; ++k) {
          if (sinMul->getOperand(k) != g || g.getType() != gt)
            continue;
          Value s = sinMul->getOperand(1 - k);
          // G is [B, H, S, D] (the gradient of q after the HF head
          // transpose; tables over dim 1) when it is transpose(y) or when
          // the tables say so; else [B, S, H, D] (tables over dim 2).
          auto tr = g.getDefiningOp<TransposeOp>();
          bool headTranspose =
              tr && tr.getPermutation() == ArrayRef<int64_t>{0, 2, 1, 3};
          int headDim = 1;
          Value cosT = matchTable(c, gt, headDim);
          Value sinT = matchTable(s, gt, headDim);
          if (!cosT || !sinT) {
            headDim = 2;
            cosT = matchTable(c, gt, headDim);
            sinT = matchTable(s, gt, headDim);
          }
          if (!cosT || !sinT ||
              ropeTableType(cosT, headDim) != ropeTableType(sinT, headDim) ||
              (headTranspose && headDim != 1))
            continue;
          Location loc = root.getLoc();
          Value cosR = asRopeTable(rewriter, loc, cosT, headDim);
          Value sinR = swappedNegatedHalves(
              rewriter, loc, asRopeTable(rewriter, loc, sinT, headDim));
          // llm.rope runs on [B, S, H, D]: G itself (tables over dim 2), the
          // transpose's input, or G transposed (the pair around it cancels
          // or fuses into the producer's kernel).
          Value y = g;
          if (headDim == 1)
            y = headTranspose
                    ? tr.getInput()
                    : TransposeOp::create(
                          rewriter, loc,
                          gt.clone({gt.getDimSize(0), gt.getDimSize(2),
                                    gt.getDimSize(1), gt.getDimSize(3)}),
                          g, ArrayRef<int64_t>{0, 2, 1, 3})
                          .getResult();
          Value rope = RoPEOp::create(rewriter, loc, y.getType(), y,
                                      /*offset=*/Value(), cosR, sinR,
                                      RopeMode::half_split,
                                      APFloat(10000.0));
          if (headDim == 1)
            rope = TransposeOp::create(rewriter, loc, gt, rope,
                                       ArrayRef<int64_t>{0, 2, 1, 3});
          rewriter.replaceOp(root, rope);
          return success();
        }
      }
    }
    return rewriter.notifyMatchFailure(
        root, "not G*cos + rotate_half^T(G*sin) (RoPE's backward)");
  }
};

} // namespace

void llmc::llm::populateRaiseRoPEPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseRotaryEmbedding, RaiseRotaryEmbeddingBackward>(
      patterns.getContext());
}
