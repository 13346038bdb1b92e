//===- DecomposeAttention.cpp - attention's training ops as matmuls -------===//
//
// llmc-decompose-attention: llm.attention_logsumexp and llm.attention_backward
// become batched matmuls over [B, Hq, Sq, Skv] scores, row reductions and
// elementwise ops that codegen fuses (FlashAttention-2's backward, Dao 2023,
// Algorithm 2, without the tiling: the scores are materialized), for the
// ops the fused kernels (lib/Target/CUDA/AttentionBackward.cpp, the
// forward's write_lse variant) do not take: f32, masks, head dims other than
// 16..128 by 16. The rewrite is exact up to the rounding of the matmul
// inputs (P and dS in the element type of the query, as in FlashAttention-2).
//
//===----------------------------------------------------------------------===//

#include "LLM/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/CSE.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cstdio>
#include <limits>
#include <numeric>

namespace llmc::llm {
#define GEN_PASS_DEF_DECOMPOSEATTENTIONPASS
#include "LLM/Transforms/Passes.h.inc"
} // namespace llmc::llm

using namespace mlir;
using namespace llmc::llm;

namespace {

/// [B, S, H, D] <-> [B, H, S, D].
constexpr std::array<int64_t, 4> kHeadsFirst = {0, 2, 1, 3};

/// Builds the decomposition of one attention training op in front of it.
class AttentionRewriter {
public:
  AttentionRewriter(Operation *op, Value query, Value key, Value mask,
                    bool causal, std::optional<APFloat> scale)
      : b(op), loc(op->getLoc()), f32(b.getF32Type()) {
    auto q = cast<RankedTensorType>(query.getType());
    auto k = cast<RankedTensorType>(key.getType());
    B = q.getDimSize(0), Sq = q.getDimSize(1), Hq = q.getDimSize(2);
    D = q.getDimSize(3), Skv = k.getDimSize(1), Hkv = k.getDimSize(2);
    element = q.getElementType();
    this->causal = causal;
    this->mask = mask;
    this->scale = scale ? scale->convertToDouble()
                        : 1.0 / std::sqrt(static_cast<double>(D));
  }

  /// Static shapes are needed for the causal index constants and the GQA
  /// reshapes; the pipeline specializes shapes before this pass.
  LogicalResult checkStatic(Operation *op) {
    for (Value v : op->getOperands())
      if (!cast<RankedTensorType>(v.getType()).hasStaticShape())
        return op->emitOpError()
               << "llmc-decompose-attention needs static shapes, found "
               << v.getType()
               << " (bind the dynamic dimensions with shape specialization)";
    return success();
  }

  /// [B, Sq, Hq, D] -> [B, Hq, Sq, D].
  Value headsFirst(Value v) {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape = {t.getDimSize(0), t.getDimSize(2),
                                  t.getDimSize(1), t.getDimSize(3)};
    return TransposeOp::create(b, loc, t.clone(shape), v, kHeadsFirst);
  }

  /// Key or value [B, Skv, Hkv, D] -> [B, Hq, Skv, D], each KV head repeated
  /// for the Hq / Hkv query heads that read it.
  Value expandKv(Value v) {
    Value t = headsFirst(v);
    if (Hkv == Hq)
      return t;
    Type et = cast<RankedTensorType>(v.getType()).getElementType();
    int64_t g = Hq / Hkv;
    Value one = ReshapeOp::create(b, loc, type({B, Hkv, 1, Skv, D}, et), t);
    Value rep = BroadcastOp::create(b, loc, type({B, Hkv, g, Skv, D}, et), one);
    return ReshapeOp::create(b, loc, type({B, Hq, Skv, D}, et), rep);
  }

  /// f32 [B, Hq, Skv, D] summed over the query heads of each KV head and
  /// returned as [B, Skv, Hkv, D] of `et`.
  Value reduceKv(Value full, Type et) {
    if (Hkv != Hq) {
      Value split =
          ReshapeOp::create(b, loc, type({B, Hkv, Hq / Hkv, Skv, D}, f32), full);
      full = ReduceSumOp::create(b, loc, type({B, Hkv, Skv, D}, f32), split,
                                 ArrayRef<int64_t>{2}, /*keepdim=*/false);
    }
    Value t = TransposeOp::create(b, loc, type({B, Skv, Hkv, D}, f32), full,
                                  kHeadsFirst);
    return castTo(t, et);
  }

  /// s = q k^T * scale + mask, -inf where `causal` hides the key: f32
  /// [B, Hq, Sq, Skv].
  Value scores(Value qT, Value kE) {
    RankedTensorType st = type({B, Hq, Sq, Skv}, f32);
    Value s = MatmulOp::create(b, loc, st, qT, kE, Value(),
                               /*transpose_lhs=*/false, /*transpose_rhs=*/true);
    s = MulOp::create(b, loc, st, s, splat(scale, st));
    if (mask)
      s = AddOp::create(b, loc, st, s,
                        BroadcastOp::create(b, loc, st, castTo(mask, f32)));
    if (causal) {
      // Key j is seen by row i iff j <= i + Skv - Sq (bottom right).
      auto i64 = b.getI64Type();
      auto iota = [&](int64_t n, int64_t offset, ArrayRef<int64_t> shape) {
        SmallVector<int64_t> values(n);
        std::iota(values.begin(), values.end(), offset);
        auto vt = RankedTensorType::get({n}, i64);
        Value c = ConstantOp::create(
            b, loc, vt, DenseElementsAttr::get(vt, ArrayRef<int64_t>(values)));
        Value r = ReshapeOp::create(b, loc, type(shape, i64), c);
        return BroadcastOp::create(b, loc, st.clone(i64), r);
      };
      Value last = iota(Sq, Skv - Sq, {1, 1, Sq, 1});
      Value key = iota(Skv, 0, {1, 1, 1, Skv});
      Value seen = CompareOp::create(b, loc, CmpPredicate::le, key, last);
      s = SelectOp::create(b, loc, st, seen, s,
                           splat(-std::numeric_limits<double>::infinity(), st));
    }
    return s;
  }

  /// [B, Hq, Sq] -> [B, Hq, Sq, Skv] (broadcast along the keys).
  Value alongKeys(Value rows) {
    Value r = ReshapeOp::create(b, loc, type({B, Hq, Sq, 1}, f32), rows);
    return BroadcastOp::create(b, loc, type({B, Hq, Sq, Skv}, f32), r);
  }

  /// `v` with -inf replaced by `with` (elementwise).
  Value replaceNegInf(Value v, double with) {
    auto t = cast<RankedTensorType>(v.getType());
    Value ninf = splat(-std::numeric_limits<double>::infinity(), t);
    Value isNinf = CompareOp::create(b, loc, CmpPredicate::eq, v, ninf);
    return SelectOp::create(b, loc, t, isNinf, splat(with, t), v);
  }

  /// lse = m + log(sum_j exp(s_ij - m)), m the row maximum; +inf where
  /// every score is -inf (m taken as 0 there, so no NaN arises on the way).
  Value logSumExp(Value s) {
    RankedTensorType rows = type({B, Hq, Sq, 1}, f32);
    Value m = ReduceMaxOp::create(b, loc, rows, s, ArrayRef<int64_t>{3},
                                  /*keepdim=*/true);
    Value none = CompareOp::create(
        b, loc, CmpPredicate::eq, m,
        splat(-std::numeric_limits<double>::infinity(), rows));
    m = SelectOp::create(b, loc, rows, none, splat(0.0, rows), m);
    RankedTensorType st = cast<RankedTensorType>(s.getType());
    Value e = ExpOp::create(
        b, loc, st,
        SubOp::create(b, loc, st, s, BroadcastOp::create(b, loc, st, m)));
    Value sum = ReduceSumOp::create(b, loc, rows, e, ArrayRef<int64_t>{3},
                                    /*keepdim=*/true);
    Value lse = AddOp::create(b, loc, rows, LogOp::create(b, loc, rows, sum), m);
    lse = SelectOp::create(b, loc, rows, none,
                           splat(std::numeric_limits<double>::infinity(), rows),
                           lse);
    return ReshapeOp::create(b, loc, type({B, Hq, Sq}, f32), lse);
  }

  /// Says what the decomposition costs in memory: `tensors` f32
  /// [B, Hq, Sq, Skv] score-sized values live at once (a remark, reaching
  /// llmc's log as info; a warning from 1 GiB on).
  void reportScores(Operation *op, int tensors) {
    double mib = double(B) * double(Hq) * double(Sq) * double(Skv) * 4.0 *
                 tensors / double(1 << 20);
    constexpr double kWarnMiB = 1024.0;
    InFlightDiagnostic d = mib >= kWarnMiB ? op->emitWarning() : op->emitRemark();
    char amount[32];
    std::snprintf(amount, sizeof(amount), "%.1f", mib);
    d << "decomposed with the attention scores materialized: about "
      << std::string(amount) << " MiB for [" << B << ", " << Hq << ", "
      << Sq << ", " << Skv
      << "] f32 scores (the fused FlashAttention-2 kernels take bf16/f16 "
         "without a mask, head dim 16..128 by 16)";
  }

  /// Whether the scores are empty (B, Hq, Sq or Skv is 0): the results are
  /// then constants, as matmuls and reductions over nothing are not ops.
  bool empty() const { return B == 0 || Hq == 0 || Sq == 0 || Skv == 0; }

  /// A constant of `t` with every element `x` (no elements is fine).
  Value filled(RankedTensorType t, double x) {
    Attribute e = isa<FloatType>(t.getElementType())
                      ? Attribute(b.getFloatAttr(t.getElementType(), x))
                      : Attribute(b.getIntegerAttr(t.getElementType(), int64_t(x)));
    return ConstantOp::create(b, loc, t, DenseElementsAttr::get(t, e));
  }

  Value castTo(Value v, Type et) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getElementType() == et)
      return v;
    return CastOp::create(b, loc, t.clone(et), v);
  }

  Value splat(double x, RankedTensorType t) {
    auto scalar = RankedTensorType::get({}, t.getElementType());
    Value c = ConstantOp::create(
        b, loc, scalar,
        DenseElementsAttr::get(scalar, b.getFloatAttr(t.getElementType(), x)));
    return BroadcastOp::create(b, loc, t, c);
  }

  RankedTensorType type(ArrayRef<int64_t> shape, Type et) {
    return RankedTensorType::get(shape, et);
  }

  OpBuilder b;
  Location loc;
  Type f32, element;
  int64_t B = 0, Sq = 0, Hq = 0, D = 0, Skv = 0, Hkv = 0;
  bool causal = false;
  Value mask;
  double scale = 1.0;
};

LogicalResult decompose(AttentionLogSumExpOp op) {
  AttentionRewriter r(op, op.getQuery(), op.getKey(), op.getMask(),
                      op.getCausal(), op.getScale());
  if (failed(r.checkStatic(op)))
    return failure();
  if (r.empty()) { // a row that sees no key: +inf
    op.getResult().replaceAllUsesWith(
        r.filled(op.getType(), std::numeric_limits<double>::infinity()));
    op.erase();
    return success();
  }
  r.reportScores(op, /*tensors=*/1);
  Value s = r.scores(r.headsFirst(op.getQuery()), r.expandKv(op.getKey()));
  op.getResult().replaceAllUsesWith(r.logSumExp(s));
  op.erase();
  return success();
}

LogicalResult decompose(AttentionBackwardOp op) {
  AttentionRewriter r(op, op.getQuery(), op.getKey(), op.getMask(),
                      op.getCausal(), op.getScale());
  if (failed(r.checkStatic(op)))
    return failure();
  if (r.empty()) { // no (query, key) pair: every gradient is 0
    for (Value g : op->getResults())
      g.replaceAllUsesWith(r.filled(cast<RankedTensorType>(g.getType()), 0.0));
    op.erase();
    return success();
  }
  r.reportScores(op, /*tensors=*/3);
  OpBuilder &b = r.b;
  Location loc = op.getLoc();
  Type f32 = r.f32, et = r.element;
  Value qT = r.headsFirst(op.getQuery());
  Value kE = r.expandKv(op.getKey());
  Value vE = r.expandKv(op.getValue());
  Value dO = r.headsFirst(op.getGradOutput());
  Value o = r.headsFirst(op.getOutput());
  RankedTensorType st = r.type({r.B, r.Hq, r.Sq, r.Skv}, f32);
  RankedTensorType qt = r.type({r.B, r.Hq, r.Sq, r.D}, f32);
  RankedTensorType kvt = r.type({r.B, r.Hq, r.Skv, r.D}, f32);
  // P = exp(s - lse); a row whose lse is -inf saw no key: lse -> +inf
  // makes its P exactly 0.
  Value s = r.scores(qT, kE);
  Value lse = r.alongKeys(r.replaceNegInf(op.getLogsumexp(),
                                          std::numeric_limits<double>::infinity()));
  Value p = ExpOp::create(b, loc, st, SubOp::create(b, loc, st, s, lse));
  // D_i = sum_d dO_id o_id; dS = P * (dO v^T - D) * scale.
  Value dof = r.castTo(dO, f32);
  Value rowDot = ReduceSumOp::create(
      b, loc, r.type({r.B, r.Hq, r.Sq}, f32),
      MulOp::create(b, loc, qt, dof, r.castTo(o, f32)), ArrayRef<int64_t>{3},
      /*keepdim=*/false);
  Value dP = MatmulOp::create(b, loc, st, dO, vE, Value(),
                              /*transpose_lhs=*/false, /*transpose_rhs=*/true);
  // Pairs with P = 0 (keys the row does not see) contribute nothing, even
  // when the key's value holds NaN or inf.
  Value unseen = CompareOp::create(b, loc, CmpPredicate::eq, p, r.splat(0.0, st));
  Value dS = SelectOp::create(
      b, loc, st, unseen, r.splat(0.0, st),
      MulOp::create(b, loc, st,
                    MulOp::create(b, loc, st, p,
                                  SubOp::create(b, loc, st, dP, r.alongKeys(rowDot))),
                    r.splat(r.scale, st)));
  // The GEMM inputs in the query's type, as FlashAttention-2 rounds P and dS.
  Value pc = r.castTo(p, et), dSc = r.castTo(dS, et);
  Value dV = MatmulOp::create(b, loc, kvt, pc, dO, Value(),
                              /*transpose_lhs=*/true, /*transpose_rhs=*/false);
  Value dK = MatmulOp::create(b, loc, kvt, dSc, qT, Value(),
                              /*transpose_lhs=*/true, /*transpose_rhs=*/false);
  Value dQ = MatmulOp::create(b, loc, qt, dSc, kE, Value(),
                              /*transpose_lhs=*/false, /*transpose_rhs=*/false);
  Value dQt = TransposeOp::create(b, loc, r.type({r.B, r.Sq, r.Hq, r.D}, f32),
                                  dQ, kHeadsFirst);
  op.getGradQuery().replaceAllUsesWith(r.castTo(dQt, et));
  op.getGradKey().replaceAllUsesWith(r.reduceKv(dK, et));
  op.getGradValue().replaceAllUsesWith(r.reduceKv(dV, et));
  op.erase();
  return success();
}

/// Whether codegen's fused kernels take `op` (the training forward with
/// statistics and the FlashAttention-2 backward): no mask, every tensor
/// operand of one element type, bf16 or f16, a head dim that is a multiple
/// of 16 in 16..128 (lib/Target/CUDA AttentionBackwardSupported).
bool fusedKernelTakes(Operation *op, Value mask, Value query) {
  if (mask)
    return false;
  Type et = cast<RankedTensorType>(query.getType()).getElementType();
  if (!et.isBF16() && !et.isF16())
    return false;
  for (Value v : op->getOperands())
    if (auto t = cast<RankedTensorType>(v.getType());
        !t.getElementType().isF32() && t.getElementType() != et)
      return false;
  for (Value v : op->getResults())
    if (auto t = cast<RankedTensorType>(v.getType());
        !t.getElementType().isF32() && t.getElementType() != et)
      return false;
  int64_t d = cast<RankedTensorType>(query.getType()).getDimSize(3);
  return !ShapedType::isDynamic(d) && d >= 16 && d <= 128 && d % 16 == 0;
}

struct DecomposeAttentionPass
    : llmc::llm::impl::DecomposeAttentionPassBase<DecomposeAttentionPass> {
  using DecomposeAttentionPassBase::DecomposeAttentionPassBase;

  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (auto o = dyn_cast<AttentionLogSumExpOp>(op)) {
        if (!fusedKernels || !fusedKernelTakes(op, o.getMask(), o.getQuery()))
          ops.push_back(op);
      } else if (auto o = dyn_cast<AttentionBackwardOp>(op)) {
        if (!fusedKernels || !fusedKernelTakes(op, o.getMask(), o.getQuery()))
          ops.push_back(op);
      }
    });
    for (Operation *op : ops) {
      LogicalResult r = llvm::TypeSwitch<Operation *, LogicalResult>(op)
                            .Case<AttentionLogSumExpOp, AttentionBackwardOp>(
                                [](auto o) { return decompose(o); });
      if (failed(r))
        return signalPassFailure();
    }
    if (ops.empty())
      return;
    // The decompositions repeat transposes, expansions and constants (and
    // a forward's statistics and its backward, in one graph, the scores):
    // canonicalize and CSE what was written.
    RewritePatternSet patterns(&getContext());
    for (RegisteredOperationName name :
         getContext().getRegisteredOperations())
      name.getCanonicalizationPatterns(patterns, &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    IRRewriter rewriter(&getContext());
    DominanceInfo dominance(getOperation());
    eliminateCommonSubExpressions(rewriter, dominance, getOperation());
  }
};

} // namespace
