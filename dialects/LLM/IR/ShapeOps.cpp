//===- ShapeOps.cpp - llm type and shape manipulation ops -----------------===//
//
// Verifiers, type inference, folders and canonicalizations of llm.cast,
// llm.broadcast, llm.reshape, llm.transpose, llm.slice, llm.concat,
// llm.gather and llm.pad.
//
//===----------------------------------------------------------------------===//

#include "LLM/IR/LLMOps.h"
#include "LLMOpsHelpers.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace llmc::llm;
using namespace llmc::llm::detail;

//===----------------------------------------------------------------------===//
// CastOp
//===----------------------------------------------------------------------===//

// cast(x : T -> T) => x
OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

/// True if every value of `from` is exactly representable in `to`.
static bool isExactWidening(Type from, Type to) {
  if (from == to)
    return true;
  auto ff = dyn_cast<FloatType>(from);
  auto ft = dyn_cast<FloatType>(to);
  if (ff && ft) {
    if (ft.isF32())
      return true; // every llm float type is a subset of f32
    // fp8 e4m3/e5m2 values are exact in f16 and bf16 (3 and 2 mantissa bits,
    // exponents within range: e4m3 max 448, min subnormal 2^-9; e5m2 min
    // subnormal 2^-16, which bf16 holds; f16's min subnormal is 2^-24).
    if (isa<Float8E4M3FNType>(ff) && (ft.isF16() || ft.isBF16()))
      return true;
    if (isa<Float8E5M2Type>(ff) && (ft.isF16() || ft.isBF16()))
      return true;
    return false;
  }
  auto it = dyn_cast<IntegerType>(from);
  auto ot = dyn_cast<IntegerType>(to);
  if (it && ot)
    return it.getWidth() < ot.getWidth() && it.getWidth() > 1;
  if (it && ft) // small ints are exact in wide floats
    return (ft.isF32() && it.getWidth() <= 16) ||
           ((ft.isF16() || ft.isBF16()) && it.getWidth() <= 8 &&
            it.getWidth() > 1);
  return false;
}

namespace {
// cast(cast(x : A -> B) : B -> C) => cast(x : A -> C) when A -> B is exact.
struct FoldExactCastChain : OpRewritePattern<CastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(CastOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getInput().getDefiningOp<CastOp>();
    if (!inner)
      return failure();
    Type a = inner.getInput().getType().getElementType();
    Type b = inner.getResult().getType().getElementType();
    if (!isExactWidening(a, b))
      return failure();
    if (inner.getInput().getType() == op.getResult().getType()) {
      rewriter.replaceOp(op, inner.getInput());
      return success();
    }
    rewriter.replaceOpWithNewOp<CastOp>(op, op.getResult().getType(),
                                        inner.getInput());
    return success();
  }
};
} // namespace

void CastOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                         MLIRContext *context) {
  results.add<FoldExactCastChain>(context);
}

//===----------------------------------------------------------------------===//
// BroadcastOp
//===----------------------------------------------------------------------===//

LogicalResult BroadcastOp::verify() {
  auto in = getInput().getType();
  auto out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "element type " << typeStr(in.getElementType())
                         << " of the input differs from the result's "
                         << typeStr(out.getElementType());
  return verifyBroadcastable(*this, "input", in.getShape(), out.getShape());
}

// broadcast(x : T -> T) => x
OpFoldResult BroadcastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// ReshapeOp
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = getInput().getType();
  auto out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "element type " << typeStr(in.getElementType())
                         << " of the input differs from the result's "
                         << typeStr(out.getElementType());
  // Element counts are checked (the BoundedTensors trait ran first, so they
  // exist; a count that wrapped around would make any reshape "equal").
  std::optional<int64_t> inCount = checkedNumElements(in);
  std::optional<int64_t> outCount = checkedNumElements(out);
  if (!inCount || !outCount)
    return emitOpError() << "element count of the input " << typeStr(in)
                         << " or the result " << typeStr(out)
                         << " overflows int64";
  if (in.hasStaticShape() && out.hasStaticShape()) {
    if (*inCount != *outCount)
      return emitOpError() << "input " << shapeStr(in.getShape()) << " has "
                           << *inCount << " elements but result "
                           << shapeStr(out.getShape()) << " has "
                           << *outCount;
    return success();
  }
  if (!in.hasStaticShape() && out.getNumDynamicDims() > 1)
    return emitOpError() << "result " << shapeStr(out.getShape()) << " has "
                         << out.getNumDynamicDims()
                         << " dynamic dimensions; expected at most 1 when "
                            "the input is dynamic";
  if (in.hasStaticShape() && out.getNumDynamicDims() > 0) {
    int64_t known = *outCount; // the static dimensions' product
    if (known == 0 || *inCount % known != 0)
      return emitOpError() << "input " << shapeStr(in.getShape())
                           << " cannot be reshaped to "
                           << shapeStr(out.getShape());
  }
  return success();
}

// reshape(x : T -> T) => x ; reshape(reshape(x)) => reshape(x)
OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  if (auto inner = getInput().getDefiningOp<ReshapeOp>()) {
    // Only when the chain stays verifiable: a dynamic source needs a result
    // with at most one dynamic dimension, which this op's result already is
    // unless its source was static.
    auto src = inner.getInput().getType();
    if (src.hasStaticShape() || getResult().getType().getNumDynamicDims() <= 1) {
      getInputMutable().assign(inner.getInput());
      return getResult();
    }
  }
  return {};
}

//===----------------------------------------------------------------------===//
// TransposeOp
//===----------------------------------------------------------------------===//

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  if (!(adaptor.getPermutationAttr()))
    return emitOptionalError(loc, "'llm.transpose' requires the permutation attribute(s)");
  auto inOr = rankedOperand(loc, "llm.transpose", "input", adaptor.getInput());
  if (failed(inOr))
    return failure();
  auto in = *inOr;
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  if (static_cast<int64_t>(perm.size()) != in.getRank())
    return emitOptionalError(loc, "'llm.transpose' permutation has ",
                             perm.size(), " entries, expected ", in.getRank(),
                             " (the input rank)");
  SmallVector<bool> seen(in.getRank(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank() || seen[p])
      return emitOptionalError(loc, "'llm.transpose' permutation ",
                               shapeStr(perm), " is not a permutation of [0, ",
                               in.getRank(), ")");
    seen[p] = true;
    shape.push_back(in.getDimSize(p));
  }
  results.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

// transpose(x, identity) => x ; transpose(transpose(x, p), q) => transpose(x, p∘q)
OpFoldResult TransposeOp::fold(FoldAdaptor) {
  ArrayRef<int64_t> perm = getPermutation();
  bool identity = true;
  for (auto [i, p] : llvm::enumerate(perm))
    identity &= static_cast<int64_t>(i) == p;
  if (identity)
    return getInput();
  if (auto inner = getInput().getDefiningOp<TransposeOp>()) {
    ArrayRef<int64_t> innerPerm = inner.getPermutation();
    SmallVector<int64_t> composed;
    for (int64_t p : perm)
      composed.push_back(innerPerm[p]);
    setPermutation(composed);
    getInputMutable().assign(inner.getInput());
    return getResult();
  }
  return {};
}

//===----------------------------------------------------------------------===//
// SliceOp
//===----------------------------------------------------------------------===//

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &results) {
  if (!(adaptor.getStartsAttr() && adaptor.getLimitsAttr() && adaptor.getStepsAttr()))
    return emitOptionalError(loc, "'llm.slice' requires the starts, limits and steps attribute(s)");
  auto inOr = rankedOperand(loc, "llm.slice", "input", adaptor.getInput());
  if (failed(inOr))
    return failure();
  auto in = *inOr;
  ArrayRef<int64_t> starts = adaptor.getStarts();
  ArrayRef<int64_t> limits = adaptor.getLimits();
  ArrayRef<int64_t> steps = adaptor.getSteps();
  int64_t rank = in.getRank();
  if (static_cast<int64_t>(starts.size()) != rank ||
      static_cast<int64_t>(limits.size()) != rank ||
      static_cast<int64_t>(steps.size()) != rank)
    return emitOptionalError(loc, "'llm.slice' expects ", rank,
                             " starts, limits and steps (the input rank), "
                             "found ",
                             starts.size(), ", ", limits.size(), " and ",
                             steps.size());
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i) {
    int64_t dim = in.getDimSize(i);
    if (steps[i] < 1)
      return emitOptionalError(loc, "'llm.slice' step ", steps[i],
                               " of dimension ", i, " must be >= 1");
    if (ShapedType::isDynamic(dim)) {
      if (starts[i] != 0 || limits[i] != -1 || steps[i] != 1)
        return emitOptionalError(
            loc, "'llm.slice' dynamic dimension ", i,
            " must be taken whole (start 0, limit -1, step 1)");
      shape.push_back(ShapedType::kDynamic);
      continue;
    }
    int64_t limit = limits[i] == -1 ? dim : limits[i];
    if (starts[i] < 0 || limit > dim || starts[i] > limit)
      return emitOptionalError(loc, "'llm.slice' range [", starts[i], ", ",
                               limit, ") of dimension ", i,
                               " is outside [0, ", dim, "]");
    int64_t len = limit - starts[i]; // in [0, dim]: no overflow below
    shape.push_back(len == 0 ? 0 : (len - 1) / steps[i] + 1);
  }
  results.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

// slice(x, whole) => x
OpFoldResult SliceOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType() &&
      llvm::all_of(getStarts(), [](int64_t s) { return s == 0; }) &&
      llvm::all_of(getSteps(), [](int64_t s) { return s == 1; }))
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// ConcatOp / GatherOp
//===----------------------------------------------------------------------===//

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  if (!(adaptor.getDimAttr()))
    return emitOptionalError(loc, "'llm.concat' requires the dim attribute(s)");
  auto inputs = adaptor.getInputs();
  if (inputs.empty())
    return emitOptionalError(loc, "'llm.concat' expects at least one input");
  for (auto [idx, v] : llvm::enumerate(inputs))
    if (!isa<RankedTensorType>(v.getType()))
      return emitOptionalError(loc, "'llm.concat' input ", idx,
                               " must be a ranked tensor, found ",
                               typeStr(v.getType()));
  auto first = cast<RankedTensorType>(inputs.front().getType());
  int64_t rank = first.getRank();
  int64_t dim = adaptor.getDim();
  if (dim < 0 || dim >= rank)
    return emitOptionalError(loc, "'llm.concat' dim ", dim,
                             " is out of range for rank ", rank);
  SmallVector<int64_t> shape(first.getShape());
  for (auto [idx, v] : llvm::enumerate(inputs.drop_front())) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getRank() != rank)
      return emitOptionalError(loc, "'llm.concat' input ", idx + 1,
                               " has rank ", t.getRank(), ", expected ", rank);
    for (int64_t i = 0; i < rank; ++i) {
      int64_t d = t.getDimSize(i);
      if (i == dim) {
        if (ShapedType::isDynamic(shape[i]) || ShapedType::isDynamic(d))
          shape[i] = ShapedType::kDynamic;
        else if (llvm::AddOverflow(shape[i], d, shape[i]) ||
                 shape[i] > kMaxTensorElements)
          return emitOptionalError(loc, "'llm.concat' result dimension ", dim,
                                   " is more than the supported 2^40 (",
                                   kMaxTensorElements, ") at input ", idx + 1);
      } else if (!dimsCompatible(shape[i], d)) {
        return emitOptionalError(loc, "'llm.concat' input ", idx + 1,
                                 " has size ", d, " in dimension ", i,
                                 ", expected ", shape[i]);
      } else if (ShapedType::isDynamic(shape[i])) {
        shape[i] = d;
      }
    }
  }
  results.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  if (!(adaptor.getAxisAttr()))
    return emitOptionalError(loc, "'llm.gather' requires the axis attribute(s)");
  auto tableOr = rankedOperand(loc, "llm.gather", "table", adaptor.getTable());
  auto indicesOr = rankedOperand(loc, "llm.gather", "indices", adaptor.getIndices());
  if (failed(tableOr) || failed(indicesOr))
    return failure();
  auto table = *tableOr, indices = *indicesOr;
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= table.getRank())
    return emitOptionalError(loc, "'llm.gather' axis ", axis,
                             " is out of range for a table of rank ",
                             table.getRank());
  SmallVector<int64_t> shape(table.getShape().take_front(axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, table.getShape().drop_front(axis + 1));
  results.push_back(RankedTensorType::get(shape, table.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// PadOp
//===----------------------------------------------------------------------===//

LogicalResult PadOp::verify() {
  auto in = getInput().getType();
  auto out = getResult().getType();
  ArrayRef<int64_t> high = getHigh();
  if (static_cast<int64_t>(high.size()) != in.getRank())
    return emitOpError() << "expected " << in.getRank()
                         << " high padding entries (one per dimension), found "
                         << high.size();
  if (out.getRank() != in.getRank())
    return emitOpError() << "result rank " << out.getRank()
                         << " differs from the input rank " << in.getRank();
  SmallVector<int64_t> expected;
  for (auto [i, h] : llvm::enumerate(high)) {
    if (h < 0)
      return emitOpError() << "high padding must be >= 0, found " << h
                           << " for dimension " << i;
    int64_t d = in.getDimSize(i);
    if (ShapedType::isDynamic(d) && h != 0)
      return emitOpError() << "dynamic dimension " << i
                           << " cannot be padded, found high padding " << h;
    if (h > kMaxTensorElements)
      return emitOpError() << "high padding " << h << " of dimension " << i
                           << " is more than the supported 2^40 ("
                           << kMaxTensorElements << ")";
    expected.push_back(ShapedType::isDynamic(d) ? d : d + h);
  }
  if (failed(verifyCompatibleShape(expected, out.getShape())))
    return emitOpError() << "result shape " << shapeStr(out.getShape())
                         << " differs from the expected "
                         << shapeStr(expected);
  return success();
}

// pad(x, high = 0...) => x
OpFoldResult PadOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType() &&
      llvm::all_of(getHigh(), [](int64_t h) { return h == 0; }))
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// IndexPutOp
//===----------------------------------------------------------------------===//

LogicalResult IndexPutOp::verify() {
  auto base = getBase().getType();
  auto indices = getIndices().getType();
  auto source = getSource().getType();
  int64_t rank = base.getRank();
  int64_t dim = getDim();
  if (rank == 0)
    return emitOpError() << "base must have rank >= 1, found a scalar";
  if (dim < 0 || dim >= rank)
    return emitOpError() << "dim " << dim << " is out of range for the base "
                         << shapeStr(base.getShape()) << " of rank " << rank;
  if (indices.getRank() != 1)
    return emitOpError() << "indices must be rank 1 [N], found "
                         << shapeStr(indices.getShape());
  if (source.getElementType() != base.getElementType())
    return emitOpError() << "source element type "
                         << typeStr(source.getElementType())
                         << " differs from the base's "
                         << typeStr(base.getElementType());
  if (source.getRank() != rank)
    return emitOpError() << "source " << shapeStr(source.getShape())
                         << " must have the base's rank " << rank << " (base "
                         << shapeStr(base.getShape()) << ")";
  for (int64_t i = 0; i < rank; ++i) {
    int64_t want = i == dim ? indices.getDimSize(0) : base.getDimSize(i);
    if (!dimsCompatible(source.getDimSize(i), want))
      return emitOpError() << "source " << shapeStr(source.getShape())
                           << " has size " << source.getDimSize(i)
                           << " in dimension " << i << ", expected " << want
                           << (i == dim ? " (the number of indices)"
                                        : " (the base's)");
  }
  return success();
}
