//===- Precision.cpp - low-precision GEMMs and attention ------------------===//
//
// bf16/fp16: casts at the boundary of matmul and attention. fp8: per-tensor
// current scaling of matmul operands (the recipe of Transformer Engine's
// "current scaling"), e4m3 for activations and weights and, in the HYBRID
// format, e5m2 for gradients; written with llm ops so that the reference
// executor validates it.
//
//===----------------------------------------------------------------------===//

#include "LLM/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/DenseMap.h"

namespace llmc::llm {
#define GEN_PASS_DEF_PRECISIONPASS
#include "LLM/Transforms/Passes.h.inc"
} // namespace llmc::llm

using namespace mlir;
using namespace llmc::llm;

namespace {

RankedTensorType withElement(Value v, Type element) {
  return cast<RankedTensorType>(v.getType()).clone(element);
}

Type elementOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

/// Whether `mm` is an outer product (static K = 1), which every policy leaves
/// as written: Hugging Face's RoPE angles, inverse frequencies [.., D/2, 1] x
/// positions [.., 1, S] in float32 with autocast off. It has no contraction
/// for tensor cores to speed up, and its rounded operand is not averaged:
/// positions above 256 round in bf16 (above 16 in e4m3), which turns the
/// cos/sin tables into noise.
bool isOuterProduct(MatmulOp mm) {
  auto lhs = cast<RankedTensorType>(mm.getLhs().getType());
  auto rhs = cast<RankedTensorType>(mm.getRhs().getType());
  // K as either operand declares it (the other may leave it dynamic).
  return lhs.getDimSize(lhs.getRank() - (mm.getTransposeLhs() ? 2 : 1)) == 1 ||
         rhs.getDimSize(rhs.getRank() - (mm.getTransposeRhs() ? 1 : 2)) == 1;
}

/// The shape in which a per-tensor amax reads `t` (the same elements in
/// row-major order), or none for `t`'s own: a row kernel takes one thread
/// block per row, then one block reduces the row maxima. So:
/// - a small tensor (at most kMaxOneRow elements) is one row: one launch;
/// - rows of at least kMinRow elements are kept (a producer's row kernel,
///   e.g. a norm's, can then find the row maxima as it writes the rows);
/// - shorter rows (attention's [.., H, D] layout, D = 64..256) are viewed as
///   rows of their trailing dimensions (H x D), as the GEMM reading them
///   through a reshape does: rows of 128 had fallen into an elementwise
///   kernel writing |x| out, then a row kernel per 128 elements;
/// - else (a rank-1 tensor, tiny trailing dimensions) rows of 4096 to 512
///   elements that divide the count, at least kMinRows of them.
/// Static, non-empty shapes only.
std::optional<SmallVector<int64_t>> amaxView(RankedTensorType t) {
  constexpr int64_t kMinRow = 512, kMinRows = 128, kMaxOneRow = 1 << 16;
  if (!t.hasStaticShape() || t.getNumElements() == 0)
    return std::nullopt;
  int64_t n = t.getNumElements(), rank = t.getRank();
  if (n <= kMaxOneRow)
    return rank == 1 ? std::nullopt : std::optional(SmallVector<int64_t>{n});
  if (rank >= 2 && t.getShape().back() >= kMinRow)
    return std::nullopt;
  int64_t split = rank, row = 1;
  while (split > 0 && row < kMinRow)
    row *= t.getDimSize(--split);
  // The last dimension is shorter than kMinRow here, so the row spans at
  // least two dimensions.
  if (split > 0 && n / row >= kMinRows)
    return SmallVector<int64_t>{n / row, row};
  for (int64_t r : {4096, 2048, 1024, 512})
    if (n % r == 0 && n / r >= kMinRows)
      return SmallVector<int64_t>{n / r, r};
  return std::nullopt;
}

class Rewriter {
public:
  explicit Rewriter(func::FuncOp fn) : fn(fn), b(fn.getContext()) {}

  /// One cast of `v` to `element`, placed right after v's definition so that
  /// every later user can share it.
  Value castTo(Value v, Type element) {
    if (elementOf(v) == element)
      return v;
    auto key = std::make_pair(v, element);
    if (Value c = casts.lookup(key))
      return c;
    OpBuilder::InsertionGuard g(b);
    setAfterDef(v);
    Value c = CastOp::create(b, v.getLoc(), withElement(v, element), v);
    casts[key] = c;
    return c;
  }

  /// fp8 quantization of `x` to `fp8` (f8E4M3FN or f8E5M2): (cast(x * (1 / s))
  /// to fp8, s) with s = max(reduce_max(abs(x)), 1e-12) / m, m the format's
  /// largest finite value (448 for e4m3, 57344 for e5m2). Per tensor (s
  /// rank-0, tensorScale) when `kAxis` < 0, else one scale per row along
  /// axis `kAxis` (the reduction keeps that axis with size 1; static shapes
  /// only).
  std::pair<Value, Value> quantizeFp8(Value x, FloatType fp8, int64_t kAxis) {
    auto key = std::make_tuple(x, Type(fp8), kAxis);
    if (auto it = quantized.find(key); it != quantized.end())
      return it->second;
    if (kAxis < 0) {
      Value scale = tensorScale(x, fp8);
      OpBuilder::InsertionGuard g(b);
      setAfterDefs(x, scale);
      Value q = scaledCast(x, scale, fp8);
      quantized[key] = {q, scale};
      return {q, scale};
    }
    // Row scaling reads x in f32 for its abs and max (one row kernel).
    Type f32 = b.getF32Type();
    Value xf = castTo(x, f32);
    OpBuilder::InsertionGuard g(b);
    setAfterDef(xf);
    Location loc = x.getLoc();
    auto t = cast<RankedTensorType>(x.getType()).clone(f32);
    SmallVector<int64_t> shape(t.getShape());
    shape[kAxis] = 1;
    RankedTensorType scaleT = t.clone(shape);
    Value absx = AbsOp::create(b, loc, t, xf);
    Value amax = ReduceMaxOp::create(b, loc, scaleT, absx, ArrayRef<int64_t>{kAxis},
                                     /*keepdim=*/true);
    Value scale = scaleOfAmax(amax, fp8);
    Value scaled = MulOp::create(b, loc, t, xf, BroadcastOp::create(b, loc, t, reciprocal(scale)));
    Value q = CastOp::create(b, loc, t.clone(fp8), scaled);
    quantized[key] = {q, scale};
    return {q, scale};
  }

  /// The per-tensor fp8 scale of `x` (rank-0 f32, see quantizeFp8): one
  /// per (scaleSource(x), fp8), however x is viewed and cast, placed after
  /// that source's definition.
  Value tensorScale(Value x, FloatType fp8) {
    x = scaleSource(x);
    auto key = std::make_pair(x, Type(fp8));
    if (Value s = scales.lookup(key))
      return s;
    OpBuilder::InsertionGuard g(b);
    setAfterDef(x);
    Location loc = x.getLoc();
    // Abs and max in x's own type (both exact), first per row (of the last
    // dimension, or of the view amaxView picks; one row kernel reads x
    // once, abs fused), then over the row maxima as one row (a row kernel
    // that also computes the scale); only the rank-0 result is widened to
    // f32 (x itself only inside the scaling cast's kernel, scaledCast). No
    // f32 copy of x or of abs(x) is written.
    auto xt = cast<RankedTensorType>(x.getType());
    Type xe = xt.getElementType();
    SmallVector<int64_t> dims = llvm::to_vector(llvm::seq<int64_t>(0, xt.getRank()));
    Value xv = x;
    if (std::optional<SmallVector<int64_t>> view = amaxView(xt)) {
      xt = RankedTensorType::get(*view, xe);
      xv = ReshapeOp::create(b, loc, xt, x);
      dims.assign(llvm::to_vector(llvm::seq<int64_t>(0, xt.getRank())));
    }
    Value absx = AbsOp::create(b, loc, xt, xv);
    if (xt.getRank() >= 2) {
      ArrayRef<int64_t> lead = xt.getShape().drop_back();
      absx = ReduceMaxOp::create(b, loc, RankedTensorType::get(lead, xe), absx,
                                 ArrayRef<int64_t>{xt.getRank() - 1}, /*keepdim=*/false);
      dims.pop_back();
      if (lead.size() > 1 && xt.hasStaticShape()) {
        absx = ReshapeOp::create(
            b, loc, RankedTensorType::get({ShapedType::getNumElements(lead)}, xe), absx);
        dims = {0};
      }
    }
    RankedTensorType scaleT = RankedTensorType::get({}, b.getF32Type());
    Value amax = ReduceMaxOp::create(b, loc, RankedTensorType::get({}, xe), absx, dims,
                                     /*keepdim=*/false);
    if (xe != scaleT.getElementType())
      amax = CastOp::create(b, loc, scaleT, amax);
    Value scale = scaleOfAmax(amax, fp8);
    scales[key] = scale;
    return scale;
  }

  /// max(amax, 1e-12) / m (f32, amax's shape), m the largest finite `fp8`.
  Value scaleOfAmax(Value amax, FloatType fp8) {
    Location loc = amax.getLoc();
    auto scaleT = cast<RankedTensorType>(amax.getType());
    Value floor = ConstantOp::create(
        b, loc, scaleT, DenseElementsAttr::get(scaleT, b.getF32FloatAttr(1e-12f)));
    float largest = static_cast<float>(
        llvm::APFloat::getLargest(fp8.getFloatSemantics()).convertToDouble());
    Value maxFp8 = ConstantOp::create(
        b, loc, scaleT, DenseElementsAttr::get(scaleT, b.getF32FloatAttr(largest)));
    Value clamped = MaximumOp::create(b, loc, scaleT, amax, floor);
    return DivOp::create(b, loc, scaleT, clamped, maxFp8);
  }

  /// cast(f32(v) * (1 / scale)) to `fp8` at the insertion point, `scale`
  /// rank-0. v is widened only here, so that the widening joins the scaling
  /// cast's kernel and no f32 copy of v is written (a cast placed at v's
  /// definition joined v's producer kernel as one more output, twice v's
  /// bytes).
  Value scaledCast(Value v, Value scale, FloatType fp8) {
    Location loc = v.getLoc();
    auto t = cast<RankedTensorType>(v.getType()).clone(b.getF32Type());
    Value vf = elementOf(v) == t.getElementType() ? v : CastOp::create(b, loc, t, v).getResult();
    Value scaled = MulOp::create(b, loc, t, vf, BroadcastOp::create(b, loc, t, reciprocal(scale)));
    return CastOp::create(b, loc, t.clone(fp8), scaled);
  }

  /// 1 / s (f32, s's shape: the scale, rank-0 or one per row). Quantization
  /// multiplies by the reciprocal of the scale, as torchao's float8 recipe
  /// does (x * (m / amax)), where dividing by the scale cost an IEEE
  /// division per element. The result can differ from x / s only in the
  /// last f32 bit, below fp8's rounding. Computed from the scale and a
  /// constant only, so a parameter's quantization stays parameter-only work
  /// (llmc-hoist-parameter-work).
  Value reciprocal(Value s) {
    Location loc = s.getLoc();
    auto t = cast<RankedTensorType>(s.getType());
    Value one = ConstantOp::create(b, loc, t, DenseElementsAttr::get(t, b.getF32FloatAttr(1.0f)));
    return DivOp::create(b, loc, t, one, s);
  }

  /// The per-tensor fp8 quantization of `x` with its last two dimensions
  /// swapped, dense: a GEMM operand stored the other way round from
  /// cuBLASLt's fp8 "TN" layout (K contiguous in both operands) is cast
  /// straight into it, one kernel reading x through the transpose (the
  /// lowering's tiled elementwise form), where casting x and then copying
  /// the fp8 result transposed took two. Same scale as x's own
  /// quantization; placed before `user`.
  std::pair<Value, Value> quantizeTransposed(Value x, FloatType fp8, Operation *user) {
    auto key = std::make_pair(x, Type(fp8));
    if (auto it = transposed.find(key); it != transposed.end())
      return it->second;
    Value scale = tensorScale(x, fp8);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(user);
    auto t = cast<RankedTensorType>(x.getType());
    int64_t r = t.getRank();
    SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, r));
    std::swap(perm[r - 1], perm[r - 2]);
    SmallVector<int64_t> shape(t.getShape());
    std::swap(shape[r - 1], shape[r - 2]);
    Value xt = TransposeOp::create(b, x.getLoc(), t.clone(shape), x, perm);
    std::pair<Value, Value> q = {scaledCast(xt, scale, fp8), scale};
    transposed[key] = q;
    return q;
  }

  /// The value whose per-tensor scale is `x`'s: x, or the source of the
  /// static, non-empty reshapes and transposes x is a view of (a scale does
  /// not depend on how the elements are viewed): a gradient read as
  /// [B, S, D], as [B*S, D] and transposed by the GEMMs of one linear layer
  /// is reduced once.
  static Value scaleSource(Value x) { return viewSource<ReshapeOp, TransposeOp>(x); }

  /// The source of the chain of static, non-empty `Views` that `x` is.
  template <typename... Views>
  static Value viewSource(Value x) {
    auto staticNonEmpty = [](Value v) {
      auto t = cast<RankedTensorType>(v.getType());
      return t.hasStaticShape() && t.getNumElements() > 0;
    };
    Value root = x;
    if (staticNonEmpty(x))
      while (Operation *def = root.getDefiningOp()) {
        if (!isa<Views...>(def) || !staticNonEmpty(def->getOperand(0)))
          break;
        root = def->getOperand(0);
      }
    return root;
  }

  /// quantizeFp8 of a matmul operand. A per-tensor scale does not depend on
  /// how the elements are viewed, so an operand that is a reshape of another
  /// value is quantized as that value and the fp8 result reshaped: a
  /// gradient read as [B, S, D] by one GEMM and as [B*S, D] by another (the
  /// input and weight gradients of a linear layer) is reduced and cast once,
  /// not twice.
  std::pair<Value, Value> quantizeOperand(Value x, FloatType fp8, int64_t kAxis,
                                          MatmulOp user) {
    // Through static, non-empty reshapes only (viewSource): a dynamic
    // source may not be reshaped to any type (at most one unknown
    // dimension), an empty one is skipped like an empty operand.
    Value root = kAxis < 0 ? viewSource<ReshapeOp>(x) : x;
    auto [q, s] = quantizeFp8(root, fp8, kAxis);
    if (root == x)
      return {q, s};
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(user);
    return {ReshapeOp::create(b, x.getLoc(), withElement(x, fp8), q), s};
  }

  // matmul(x: f32, w: f32) -> f32 => matmul(cast(x) : bf16, cast(w) : bf16) -> f32
  void lowMatmul(MatmulOp mm, Type low) {
    mm.getLhsMutable().assign(castTo(mm.getLhs(), low));
    mm.getRhsMutable().assign(castTo(mm.getRhs(), low));
  }

  // attention(q, k, v : f32) => cast(attention(cast(q), cast(k), cast(v)) : bf16) : f32
  void lowAttention(AttentionOp attn, Type low) {
    Type orig = elementOf(attn.getResult());
    attn.getQueryMutable().assign(castTo(attn.getQuery(), low));
    attn.getKeyMutable().assign(castTo(attn.getKey(), low));
    attn.getValueMutable().assign(castTo(attn.getValue(), low));
    Value r = attn.getResult();
    r.setType(withElement(r, low));
    b.setInsertionPointAfter(attn);
    Value back = CastOp::create(b, attn.getLoc(), withElement(r, orig), r);
    r.replaceAllUsesExcept(back, back.getDefiningOp());
  }

  // attention_logsumexp / attention_backward(q, k, [v, o, do] : f32) =>
  // the op on cast(...) : low, its gradients cast back to f32; the
  // statistics (f32) and the mask keep their types.
  void lowAttentionTraining(Operation *op, Type low) {
    unsigned tensors = isa<AttentionBackwardOp>(op) ? 5 : 2;
    for (unsigned i = 0; i < tensors; ++i)
      op->setOperand(i, castTo(op->getOperand(i), low));
    if (!isa<AttentionBackwardOp>(op))
      return;
    b.setInsertionPointAfter(op);
    for (Value r : op->getResults()) {
      Type orig = elementOf(r);
      r.setType(withElement(r, low));
      Value back = CastOp::create(b, op->getLoc(), withElement(r, orig), r);
      r.replaceAllUsesExcept(back, back.getDefiningOp());
    }
  }

  // matmul(a, b) => cast(matmul(q(a), q(b)) scales(s_a, s_b) bias : bf16),
  // or with row scales cast(matmul(q(a), q(b)) * s_a * s_b + bias : bf16),
  // with each operand's fp8 type: e4m3, or e5m2 for a gradient under the
  // HYBRID format. cuBLASLt has no e5m2 x e5m2 GEMM, so when both operands
  // are gradients the RHS is e4m3 (`lhsGrad`, `rhsGrad`: whether each
  // operand was a gradient before the pass rewrote anything). With `rows`,
  // s_a is one scale per row m
  // of the LHS ([..., M, 1]) and s_b one per column n of the RHS
  // ([..., 1, N]), each over its K values; an operand of dynamic shape keeps
  // one scale per tensor.
  void fp8Matmul(MatmulOp mm, bool lhsGrad, bool rhsGrad, bool rows) {
    FloatType e4m3 = b.getType<Float8E4M3FNType>();
    FloatType e5m2 = b.getType<Float8E5M2Type>();
    rhsGrad = rhsGrad && !lhsGrad;
    // The K axis of an operand as stored: LHS [.., M, K] ([.., K, M]
    // transposed), RHS [.., K, N] ([.., N, K] transposed); -1: per tensor.
    auto kAxisOf = [&](Value v, bool lhs) -> int64_t {
      auto t = cast<RankedTensorType>(v.getType());
      if (!rows || !t.hasStaticShape())
        return -1;
      int64_t r = t.getRank();
      bool transposed = lhs ? mm.getTransposeLhs() : mm.getTransposeRhs();
      return lhs == transposed ? r - 2 : r - 1;
    };
    int64_t kA = kAxisOf(mm.getLhs(), true), kB = kAxisOf(mm.getRhs(), false);
    // Per-tensor scales: each operand is cast into cuBLASLt's fp8 layout
    // (LHS [.., M, K], RHS [.., N, K]), a transposed one by the cast itself.
    bool ta = mm.getTransposeLhs(), tb = mm.getTransposeRhs();
    bool perTensor = kA < 0 && kB < 0;
    FloatType fa = lhsGrad ? e5m2 : e4m3, fb = rhsGrad ? e5m2 : e4m3;
    auto [qa, sa] = perTensor && ta ? quantizeTransposed(mm.getLhs(), fa, mm)
                                    : quantizeOperand(mm.getLhs(), fa, kA, mm);
    auto [qb, sb] = perTensor && !tb ? quantizeTransposed(mm.getRhs(), fb, mm)
                                     : quantizeOperand(mm.getRhs(), fb, kB, mm);
    Type f32 = b.getF32Type();
    Location loc = mm.getLoc();
    b.setInsertionPoint(mm);
    auto resT = cast<RankedTensorType>(mm.getResult().getType());
    auto resF32 = resT.clone(f32);
    auto finish = [&](Value out) {
      if (resT.getElementType() != b.getBF16Type())
        out = CastOp::create(b, loc, resT, out);
      mm.getResult().replaceAllUsesWith(out);
      mm.erase();
    };
    if (kA < 0 && kB < 0) {
      // Per-tensor scales scale the accumulator inside the GEMM (cuBLASLt's
      // A/B scale pointers), which writes bf16 directly.
      finish(MatmulOp::create(b, loc, resT.clone(b.getBF16Type()), qa, qb, mm.getBias(), sa,
                              sb, /*transposeLhs=*/false, /*transposeRhs=*/true));
      return;
    }
    Value prod = MatmulOp::create(b, loc, resF32, qa, qb, Value(),
                                  mm.getTransposeLhs(), mm.getTransposeRhs());
    // Row scales as the result's rows ([.., M, 1]) and columns ([.., 1, N]):
    // a scale reduced along the other axis is reshaped (a size-1 swap).
    auto oriented = [&](Value s, int64_t kAxis, bool lhs) -> Value {
      if (kAxis < 0)
        return s;
      auto st = cast<RankedTensorType>(s.getType());
      int64_t r = st.getRank();
      if ((kAxis == r - 1) == lhs)
        return s;
      SmallVector<int64_t> shape(st.getShape());
      std::swap(shape[r - 1], shape[r - 2]);
      return ReshapeOp::create(b, loc, st.clone(shape), s);
    };
    Value rowScale = BroadcastOp::create(b, loc, resF32, oriented(sa, kA, true));
    Value colScale = BroadcastOp::create(b, loc, resF32, oriented(sb, kB, false));
    Value y = MulOp::create(b, loc, resF32, MulOp::create(b, loc, resF32, prod, rowScale),
                            colScale);
    if (Value bias = mm.getBias()) {
      Value bf = castTo(bias, f32);
      b.setInsertionPoint(mm);
      Value biasB = BroadcastOp::create(b, loc, resF32, bf);
      y = AddOp::create(b, loc, resF32, y, biasB);
    }
    finish(CastOp::create(b, loc, resT.clone(b.getBF16Type()), y));
  }

private:
  /// After the definitions of `v` and of `w` (of one block; block
  /// arguments come first).
  void setAfterDefs(Value v, Value w) {
    Operation *dv = v.getDefiningOp(), *dw = w.getDefiningOp();
    setAfterDef(!dv || (dw && dv->isBeforeInBlock(dw)) ? w : v);
  }

  void setAfterDef(Value v) {
    if (Operation *def = v.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
  }

  func::FuncOp fn;
  OpBuilder b;
  llvm::DenseMap<std::pair<Value, Type>, Value> casts;
  llvm::DenseMap<std::tuple<Value, Type, int64_t>, std::pair<Value, Value>>
      quantized;
  llvm::DenseMap<std::pair<Value, Type>, Value> scales; // tensorScale
  llvm::DenseMap<std::pair<Value, Type>, std::pair<Value, Value>> transposed;
};

/// The values computed from a function argument marked `llm.gradient` (the
/// argument itself included): the gradients of a backward graph.
llvm::DenseSet<Value> gradientValues(func::FuncOp fn) {
  llvm::DenseSet<Value> gradients;
  for (BlockArgument arg : fn.getArguments())
    if (fn.getArgAttr(arg.getArgNumber(), kGradientAttr))
      gradients.insert(arg);
  if (gradients.empty())
    return gradients;
  // Operands are defined before their users (the body is in SSA order), so
  // one walk in order reaches every value computed from a gradient.
  fn.walk([&](Operation *op) {
    if (llvm::any_of(op->getOperands(),
                     [&](Value v) { return gradients.contains(v); }))
      for (Value r : op->getResults())
        gradients.insert(r);
  });
  return gradients;
}

} // namespace

std::optional<PrecisionPolicy>
llmc::llm::parsePrecisionPolicy(llvm::StringRef name, std::string &error) {
  for (PrecisionPolicy p : {PrecisionPolicy::fp32, PrecisionPolicy::bf16,
                            PrecisionPolicy::fp16, PrecisionPolicy::fp8})
    if (name == stringifyPrecisionPolicy(p))
      return p;
  error = "expected fp32, bf16, fp16 or fp8, found '" + name.str() + "'";
  return std::nullopt;
}

llvm::StringRef llmc::llm::stringifyPrecisionPolicy(PrecisionPolicy policy) {
  switch (policy) {
  case PrecisionPolicy::fp32: return "fp32";
  case PrecisionPolicy::bf16: return "bf16";
  case PrecisionPolicy::fp16: return "fp16";
  case PrecisionPolicy::fp8: return "fp8";
  }
  llvm_unreachable("unknown precision policy");
}

std::optional<WeightOnlyMode>
llmc::llm::parseWeightOnlyMode(llvm::StringRef name, std::string &error) {
  for (WeightOnlyMode m :
       {WeightOnlyMode::none, WeightOnlyMode::int8, WeightOnlyMode::int4})
    if (name == stringifyWeightOnlyMode(m))
      return m;
  error = "expected none, int8 or int4, found '" + name.str() + "'";
  return std::nullopt;
}

llvm::StringRef llmc::llm::stringifyWeightOnlyMode(WeightOnlyMode mode) {
  switch (mode) {
  case WeightOnlyMode::none: return "none";
  case WeightOnlyMode::int8: return "int8";
  case WeightOnlyMode::int4: return "int4";
  }
  llvm_unreachable("unknown weight-only mode");
}

std::optional<Fp8Scaling> llmc::llm::parseFp8Scaling(llvm::StringRef name,
                                                    std::string &error) {
  for (Fp8Scaling s : {Fp8Scaling::tensor, Fp8Scaling::row})
    if (name == stringifyFp8Scaling(s))
      return s;
  error = "expected tensor or row, found '" + name.str() + "'";
  return std::nullopt;
}

llvm::StringRef llmc::llm::stringifyFp8Scaling(Fp8Scaling scaling) {
  return scaling == Fp8Scaling::row ? "row" : "tensor";
}

int llmc::llm::weightOnlyBits(WeightOnlyMode mode) {
  return mode == WeightOnlyMode::int8 ? 8 : mode == WeightOnlyMode::int4 ? 4 : 0;
}

namespace {

struct PrecisionPass : llmc::llm::impl::PrecisionPassBase<PrecisionPass> {
  using PrecisionPassBase::PrecisionPassBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    std::string error;
    if (!parseWeightOnlyMode(weightOnly, error)) {
      fn.emitOpError() << "weight-only: " << error;
      return signalPassFailure();
    }
    if (weightOnly != "none" && policy == "fp8") {
      fn.emitOpError() << "weight-only=" << weightOnly
                       << " cannot be combined with policy=fp8 (expected "
                          "fp32, bf16 or fp16 activations)";
      return signalPassFailure();
    }
    if (!parsePrecisionPolicy(policy, error)) {
      fn.emitOpError() << "policy: " << error;
      return signalPassFailure();
    }
    if (!parseFp8Scaling(fp8Scaling, error)) {
      fn.emitOpError() << "fp8-scaling: " << error;
      return signalPassFailure();
    }
    if (fp8Scaling != "tensor" && policy != "fp8") {
      fn.emitOpError() << "fp8-scaling=" << fp8Scaling
                       << " needs policy=fp8, found policy=" << policy;
      return signalPassFailure();
    }
    if (fp8Gradients != "e5m2" && fp8Gradients != "e4m3") {
      fn.emitOpError() << "fp8-gradients: expected e5m2 or e4m3, found '"
                       << fp8Gradients << "'";
      return signalPassFailure();
    }
    if (fp8Gradients != "e5m2" && policy != "fp8") {
      fn.emitOpError() << "fp8-gradients=" << fp8Gradients
                       << " needs policy=fp8, found policy=" << policy;
      return signalPassFailure();
    }
    if (fn.isExternal())
      return;
    // Weight-only quantization after the policy's casts: it quantizes the
    // (already low-precision) weight a matmul reads.
    auto quantizeWeights = [&] {
      if (weightOnly != "none" &&
          failed(quantizeLinearWeights(fn, weightOnly == "int4" ? 4 : 8)))
        signalPassFailure();
    };
    if (policy == "fp32")
      return quantizeWeights();
    MLIRContext *ctx = fn.getContext();
    Type low = policy == "fp16" ? Type(Float16Type::get(ctx))
                                : Type(BFloat16Type::get(ctx));
    SmallVector<Operation *> targets;
    fn.walk([&](Operation *op) {
      if (isa<MatmulOp, AttentionOp, AttentionLogSumExpOp, AttentionBackwardOp>(op))
        targets.push_back(op);
    });
    Rewriter rw(fn);
    // Which operands of each matmul are gradients, decided on the function
    // as written: a rewritten matmul's result is a new value, which the set
    // would not know (a matmul reading another's result directly).
    llvm::DenseMap<Operation *, std::pair<bool, bool>> gradientOperands;
    if (policy == "fp8" && fp8Gradients == "e5m2") {
      llvm::DenseSet<Value> gradients = gradientValues(fn);
      for (Operation *op : targets)
        if (auto mm = dyn_cast<MatmulOp>(op))
          gradientOperands[op] = {gradients.contains(mm.getLhs()),
                                  gradients.contains(mm.getRhs())};
    }
    for (Operation *op : targets) {
      if (auto attn = dyn_cast<AttentionOp>(op)) {
        if (elementOf(attn.getQuery()).isF32())
          rw.lowAttention(attn, low);
        continue;
      }
      // Attention's training ops take the attention's type (bf16 under the
      // fp8 policy too: the scores and probabilities stay out of fp8, as
      // the forward's kernel keeps them).
      if (isa<AttentionLogSumExpOp, AttentionBackwardOp>(op)) {
        if (elementOf(op->getOperand(0)).isF32())
          rw.lowAttentionTraining(op, low);
        continue;
      }
      auto mm = cast<MatmulOp>(op);
      if (isOuterProduct(mm))
        continue;
      Type e = elementOf(mm.getLhs());
      if (policy == "fp8") {
        // An empty product (M or N = 0) computes nothing: it keeps its
        // types (a per-tensor amax over no element would be invalid).
        auto empty = [](Value v) {
          return llvm::is_contained(cast<RankedTensorType>(v.getType()).getShape(), 0);
        };
        if (empty(mm.getLhs()) || empty(mm.getRhs()) || empty(mm.getResult()))
          continue;
        if (isa<Float32Type, Float16Type, BFloat16Type>(e))
          rw.fp8Matmul(mm, gradientOperands.lookup(op).first,
                       gradientOperands.lookup(op).second, fp8Scaling == "row");
        continue;
      }
      if (e.isF32())
        rw.lowMatmul(mm, low);
    }
    quantizeWeights();
    // Drop cast pairs that are lossless (the cast canonicalization).
    RewritePatternSet patterns(ctx);
    CastOp::getCanonicalizationPatterns(patterns, ctx);
    if (failed(applyPatternsGreedily(fn, std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace
