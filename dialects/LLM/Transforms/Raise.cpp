//===- Raise.cpp - recognize decomposed ops as llm ops --------------------===//
//
// The torch.compile plugin imports ATen graphs op by op, so a Hugging Face
// LlamaRMSNorm arrives as cast/pow/reduce_mean/add/rsqrt/mul/cast/mul. This
// pass recognizes such chains and rewrites them to the one llm op that codegen
// lowers to a single fused kernel (and fuses with a preceding residual add).
//
//===----------------------------------------------------------------------===//

#include "LLM/Transforms/Passes.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>
#include <optional>

namespace llmc::llm {
#define GEN_PASS_DEF_RAISEPASS
#include "LLM/Transforms/Passes.h.inc"
} // namespace llmc::llm

using namespace mlir;
using namespace llmc::llm;

namespace {

RankedTensorType tensorOf(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}

/// `v` with one llm.broadcast looked through (the importer broadcasts every
/// operand of a binary op to the result's shape).
Value throughBroadcast(Value v) {
  if (auto b = v.getDefiningOp<BroadcastOp>())
    return b.getInput();
  return v;
}

/// The value of a float splat constant, possibly broadcast.
std::optional<double> splatValue(Value v) {
  Attribute attr;
  if (!matchPattern(throughBroadcast(v), m_Constant(&attr)))
    return std::nullopt;
  auto splat = dyn_cast<SplatElementsAttr>(attr);
  if (!splat || !isa<FloatType>(splat.getElementType()))
    return std::nullopt;
  return splat.getSplatValue<APFloat>().convertToDouble();
}

bool isSplat(Value v, double expected) {
  std::optional<double> s = splatValue(v);
  return s && *s == expected;
}

/// a and b are the same value, or the same cast of one value (`x.float()`
/// written twice imports as two casts; canonicalize does not merge them).
bool sameValue(Value a, Value b) {
  if (a == b)
    return true;
  auto ca = a.getDefiningOp<CastOp>(), cb = b.getDefiningOp<CastOp>();
  return ca && cb && ca.getInput() == cb.getInput() &&
         a.getType() == b.getType();
}

/// Each value of a matched chain must be used only by the next op of the
/// chain: otherwise the decomposed ops stay alive for their other users and
/// raising would add a fused norm on top of them instead of replacing them.
bool singleUse(Value v) { return v.hasOneUse(); }

/// The pieces of x / sqrt(mean(x^2) + eps) (an f32 value, [..., H]).
struct Normalized {
  Value xf; // the input of the square and of the normalization (f32)
  double eps = 0;
};

// add(mean, eps) or add(eps, mean) => (mean, eps); mean = reduce_mean(sq)
// over the last dim with keepdim; sq = pow(xf, 2) or mul(xf, xf).
// Returns xf and eps.
std::optional<std::pair<Value, double>> matchMeanSquarePlusEps(Value v) {
  auto add = v.getDefiningOp<AddOp>();
  if (!add || !singleUse(add.getResult()))
    return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    Value meanV = add->getOperand(i), epsV = add->getOperand(1 - i);
    std::optional<double> eps = splatValue(epsV);
    if (!eps || !std::isfinite(*eps) || *eps < 0)
      continue;
    auto mean = meanV.getDefiningOp<ReduceMeanOp>();
    if (!mean || !mean.getKeepdim() || !singleUse(mean.getResult()))
      continue;
    RankedTensorType sqType = tensorOf(mean.getInput());
    if (!sqType || sqType.getRank() < 1 || mean.getDims().size() != 1 ||
        mean.getDims()[0] != sqType.getRank() - 1)
      continue;
    Value sq = mean.getInput();
    if (!singleUse(sq))
      continue;
    Value xf;
    if (auto pow = sq.getDefiningOp<PowOp>()) {
      if (isSplat(pow.getRhs(), 2.0))
        xf = pow.getLhs();
    } else if (auto mul = sq.getDefiningOp<MulOp>()) {
      if (sameValue(mul.getLhs(), mul.getRhs()))
        xf = mul.getLhs();
    }
    if (!xf)
      continue;
    return std::make_pair(xf, *eps);
  }
  return std::nullopt;
}

/// rsqrt(v) or div(1, sqrt(v)) => v.
Value matchRsqrt(Value r) {
  if (!singleUse(r))
    return {};
  if (auto rs = r.getDefiningOp<RsqrtOp>())
    return rs.getInput();
  if (auto div = r.getDefiningOp<DivOp>()) {
    auto sq = div.getRhs().getDefiningOp<SqrtOp>();
    if (sq && isSplat(div.getLhs(), 1.0) && singleUse(sq.getResult()))
      return sq.getInput();
  }
  return {};
}

/// `bv` is broadcast(s) or s, used once, with s used once: returns s.
Value singleUseThroughBroadcast(Value bv) {
  if (!singleUse(bv))
    return {};
  Value s = throughBroadcast(bv);
  if (s != bv && !singleUse(s))
    return {};
  return s;
}

// mul(xf, broadcast(rsqrt(v))), mul(broadcast(rsqrt(v)), xf),
// mul(xf, broadcast(div(1, sqrt(v)))) or div(xf, broadcast(sqrt(v))), with
// v = mean(xf^2, last dim, keepdim) + eps and the same xf in the square and
// the normalization => Normalized{xf, eps}.
std::optional<Normalized> matchNormalized(Value m) {
  if (!singleUse(m))
    return std::nullopt;
  SmallVector<std::pair<Value, Value>> candidates; // (xf, v)
  if (auto mul = m.getDefiningOp<MulOp>()) {
    for (int i = 0; i < 2; ++i) {
      Value s = singleUseThroughBroadcast(mul->getOperand(1 - i));
      if (!s)
        continue;
      if (Value v = matchRsqrt(s))
        candidates.push_back({mul->getOperand(i), v});
    }
  } else if (auto div = m.getDefiningOp<DivOp>()) {
    Value s = singleUseThroughBroadcast(div.getRhs());
    if (s)
      if (auto sq = s.getDefiningOp<SqrtOp>())
        candidates.push_back({div.getLhs(), sq.getInput()});
  }
  for (auto [xf, v] : candidates) {
    auto inner = matchMeanSquarePlusEps(v);
    if (!inner || !sameValue(inner->first, xf))
      continue;
    return Normalized{xf, inner->second};
  }
  return std::nullopt;
}

// mul(broadcast(w), cast(normalize(x))) => rms_norm(x, w), and every operand
// order / the forms without casts (see the pass description).
struct RaiseRMSNorm : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp root,
                                PatternRewriter &rewriter) const override {
    RankedTensorType type = root.getResult().getType();
    if (type.getRank() < 1)
      return rewriter.notifyMatchFailure(root, "rank-0 result");
    // llm.rms_norm takes floats only (an i32 w * cast(normalized) is not one).
    if (!isa<FloatType>(type.getElementType()))
      return rewriter.notifyMatchFailure(root, "not a float result");
    int64_t hidden = type.getDimSize(type.getRank() - 1);
    if (ShapedType::isDynamic(hidden))
      return rewriter.notifyMatchFailure(root, "dynamic last dimension");
    for (int i = 0; i < 2; ++i) {
      Value weightSide = root->getOperand(i), normSide = root->getOperand(1 - i);
      // The weight: a rank-1 [H] value of the result's element type,
      // broadcast over the leading dimensions (or the result itself is [H]).
      Value w = throughBroadcast(weightSide);
      RankedTensorType wType = tensorOf(w);
      if (!wType || wType.getRank() != 1 || wType.getDimSize(0) != hidden ||
          wType.getElementType() != type.getElementType())
        continue;
      // The normalized value, optionally cast from f32 to the result type.
      Value m = normSide;
      if (auto cast = normSide.getDefiningOp<CastOp>()) {
        if (!singleUse(normSide))
          continue;
        m = cast.getInput();
      }
      RankedTensorType mType = tensorOf(m);
      if (!mType || !mType.getElementType().isF32())
        continue;
      std::optional<Normalized> n = matchNormalized(m);
      if (!n || !tensorOf(n->xf).getElementType().isF32())
        continue;
      // Exact up to rounding: x has the result's type, f32 throughout or
      // bf16/f16 cast to f32 (and the normalized value cast back).
      Value x = n->xf;
      if (x.getType() != type) {
        auto cast = x.getDefiningOp<CastOp>();
        if (!cast || cast.getInput().getType() != type)
          continue;
        x = cast.getInput();
      }
      rewriter.replaceOpWithNewOp<RMSNormOp>(root, type, x, w,
                                             rewriter.getF64FloatAttr(n->eps));
      return success();
    }
    return rewriter.notifyMatchFailure(root, "not a decomposed RMSNorm");
  }
};

// attention(q, transpose(k, [0, 2, 1, 3]), transpose(v, [0, 2, 1, 3])) =>
// attention(q, k, v) {kv_hnd}: the kernels read key/value [B, H, S, D] (a
// PyTorch SDPA input, a gpt-fast KV cache) in place instead of a transposed
// copy. Transposes of transposes fold first, so a projection's
// [B, S, H, D] output keeps the NHD form.
struct FoldKvTransposeIntoAttention : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getKvHnd())
      return rewriter.notifyMatchFailure(op, "already kv_hnd");
    auto swap = [](Value v) -> TransposeOp {
      auto t = v.getDefiningOp<TransposeOp>();
      return t && t.getPermutation() == ArrayRef<int64_t>{0, 2, 1, 3} ? t : TransposeOp();
    };
    // Not through a transpose of a transpose: that is the NHD tensor itself
    // once the transposes fold (the greedy driver may visit this first).
    auto headsFirst = [&](Value v) -> Value {
      TransposeOp t = swap(v);
      return t && !swap(t.getInput()) ? t.getInput() : Value();
    };
    Value k = headsFirst(op.getKey()), v = headsFirst(op.getValue());
    if (!k || !v)
      return rewriter.notifyMatchFailure(op, "key and value are not both "
                                             "[0, 2, 1, 3] transposes");
    rewriter.modifyOpInPlace(op, [&] {
      op.getKeyMutable().assign(k);
      op.getValueMutable().assign(v);
      op.setKvHnd(true);
    });
    return success();
  }
};

// cast(rms_norm(cast(x : T -> f32), w) : f32 -> T) => rms_norm(x, w) : T
// for T = bf16/f16 (gpt-fast's and HF's RMSNorm with the weight multiply in
// f32): the kernel computes in fp32 from the exactly widened x either way
// and rounds once to T, so one row kernel replaces three launches.
struct FoldCastsIntoRMSNorm : OpRewritePattern<CastOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(CastOp back,
                                PatternRewriter &rewriter) const override {
    auto norm = back.getInput().getDefiningOp<RMSNormOp>();
    if (!norm || !norm.getResult().hasOneUse())
      return rewriter.notifyMatchFailure(back, "not a cast of a single-use rms_norm");
    auto widen = norm.getInput().getDefiningOp<CastOp>();
    auto resultType = cast<RankedTensorType>(back.getResult().getType());
    Type low = resultType.getElementType();
    if (!widen || widen.getInput().getType() != resultType ||
        !norm.getResult().getType().getElementType().isF32() ||
        !(low.isBF16() || low.isF16()))
      return rewriter.notifyMatchFailure(back, "not cast(rms_norm(cast(x : T -> f32)) -> T)");
    rewriter.replaceOpWithNewOp<RMSNormOp>(back, resultType, widen.getInput(),
                                           norm.getWeight(), norm.getEpsAttr());
    return success();
  }
};

/// transpose(ew(a, b, ...), P) => ew(transpose(a, P), transpose(b, P), ...)
/// for an elementwise op whose only use is the transpose and a P that keeps
/// the innermost dimension (e.g. [B, H, S, D] <-> [B, S, H, D]). The
/// operands' transposes fold into transposes they read (the backward's
/// `transpose(add(dk_tangent, transpose(dk)))` around attention becomes
/// `add(transpose(dk_tangent), dk)`) or are strided reads of the fused
/// kernel, which keeps its 16-byte vector path when the innermost stride is
/// 1: one kernel writes the transposed layout instead of an elementwise
/// kernel and a transpose kernel. Run after the raise patterns, which match
/// the transposes as imported.
struct SinkTransposeIntoElementwise : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(TransposeOp tr, PatternRewriter &rewriter) const override {
    ArrayRef<int64_t> perm = tr.getPermutation();
    const int64_t rank = static_cast<int64_t>(perm.size());
    if (rank < 2 || perm.back() != rank - 1)
      return rewriter.notifyMatchFailure(tr, "moves the innermost dimension");
    Operation *ew = tr.getInput().getDefiningOp();
    if (!ew || !isElementwise(ew) || ew->getNumResults() != 1 || !tr.getInput().hasOneUse() ||
        ew->getNumOperands() == 0)
      return rewriter.notifyMatchFailure(tr, "not the only use of an elementwise op");
    auto outType = tr.getResult().getType();
    // Every check before anything is created: a pattern that fails must not
    // have changed the IR (the greedy driver would not converge).
    for (Value v : ew->getOperands()) {
      auto t = dyn_cast<RankedTensorType>(v.getType());
      if (!t || t.getShape() != tensorOf(tr.getInput()).getShape())
        return rewriter.notifyMatchFailure(tr, "an operand of another shape");
    }
    SmallVector<Value> operands;
    for (Value v : ew->getOperands()) {
      auto t = cast<RankedTensorType>(v.getType()).clone(outType.getShape());
      // A splat constant stays a splat (an immediate of the fused kernel and
      // what the x+0 / x*1 folders look for), not a transposed stored tensor.
      Attribute splat;
      if (matchPattern(v, m_Constant(&splat)) && isa<SplatElementsAttr>(splat)) {
        operands.push_back(ConstantOp::create(rewriter, tr.getLoc(), t,
                                              cast<SplatElementsAttr>(splat).resizeSplat(t)));
        continue;
      }
      operands.push_back(TransposeOp::create(rewriter, tr.getLoc(), t, v, perm));
    }
    OperationState state(ew->getLoc(), ew->getName(), operands, TypeRange{outType},
                         ew->getAttrs());
    rewriter.replaceOp(tr, rewriter.create(state)->getResults());
    return success();
  }
};

struct RaisePass : llmc::llm::impl::RaisePassBase<RaisePass> {
  using RaisePassBase::RaisePassBase;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateRaisePatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns)))) {
      getOperation().emitError()
          << "llmc-raise: the RMSNorm/RoPE/attention rewrites did not converge on @"
          << getOperation().getSymName()
          << " (a pattern changed the IR and then failed; please report it "
             "with this function's IR)";
      return signalPassFailure();
    }
    RewritePatternSet sink(&getContext());
    sink.add<SinkTransposeIntoElementwise>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(sink)))) {
      getOperation().emitError() << "llmc-raise: sinking transposes into elementwise ops did "
                                    "not converge on @"
                                 << getOperation().getSymName();
      return signalPassFailure();
    }
  }
};

} // namespace

void llmc::llm::populateRaisePatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseRMSNorm, FoldCastsIntoRMSNorm, FoldKvTransposeIntoAttention>(
      patterns.getContext());
  populateRaiseRoPEPatterns(patterns);
}
