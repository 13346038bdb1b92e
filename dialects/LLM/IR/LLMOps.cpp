//===- LLMOps.cpp - llm dialect operations -------------------------------===//
//
// Verifiers, result type inference, folders and canonicalizations of the
// `llm` ops. Messages are lowercase and say expected vs found.
//
//===----------------------------------------------------------------------===//

#include "LLM/IR/LLMOps.h"

#include "mlir/Dialect/CommonFolders.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace llmc::llm;

#include "LLM/IR/LLMEnums.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static bool dimsCompatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

static std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (i)
      s += ", ";
    s += ShapedType::isDynamic(d) ? "?" : std::to_string(d);
  }
  return s + "]";
}

static std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

/// True if `value` is a constant whose every element equals `expected`,
/// possibly broadcast (`llm.broadcast` of a splat, as needed for dynamic
/// shapes).
static bool isSplatConstant(Value value, double expected) {
  if (auto bcast = value.getDefiningOp<BroadcastOp>())
    value = bcast.getInput();
  Attribute attr;
  if (!matchPattern(value, m_Constant(&attr)))
    return false;
  auto splat = dyn_cast<SplatElementsAttr>(attr);
  if (!splat)
    return false;
  Type elementType = splat.getElementType();
  if (isa<FloatType>(elementType))
    return splat.getSplatValue<APFloat>().convertToDouble() == expected;
  if (isa<IntegerType>(elementType))
    return splat.getSplatValue<APInt>().getSExtValue() ==
           static_cast<int64_t>(expected);
  return false;
}

/// Checks that `from` broadcasts NumPy-style (right-aligned) to `to`.
static LogicalResult verifyBroadcastable(Operation *op, StringRef name,
                                         ArrayRef<int64_t> from,
                                         ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return op->emitOpError() << name << " of rank " << from.size()
                             << " cannot broadcast to rank " << to.size();
  size_t lead = to.size() - from.size();
  for (auto [i, d] : llvm::enumerate(from)) {
    int64_t target = to[lead + i];
    if (d != 1 && !dimsCompatible(d, target))
      return op->emitOpError()
             << name << " of shape " << shapeStr(from)
             << " does not broadcast to " << shapeStr(to) << ": dimension "
             << i << " is " << d << ", expected 1 or " << target;
  }
  return success();
}

/// The ranked tensor type of an operand during type inference, which the
/// custom parser runs before the operand type constraints are verified.
static FailureOr<RankedTensorType> rankedOperand(std::optional<Location> loc,
                                                 StringRef op, StringRef name,
                                                 Value v) {
  if (auto t = dyn_cast<RankedTensorType>(v.getType()))
    return t;
  (void)emitOptionalError(loc, "'", op, "' ", name,
                          " must be a ranked tensor, found ", typeStr(v.getType()));
  return failure();
}

static bool isScalarInt(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t && t.getRank() == 0;
}

//===----------------------------------------------------------------------===//
// Tensor sizes and element types (every op)
//===----------------------------------------------------------------------===//

std::optional<int64_t> llmc::llm::checkedExtent(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (ShapedType::isDynamic(d) || d == 0)
      continue;
    if (d < 0 || llvm::MulOverflow(n, d, n))
      return std::nullopt;
  }
  return n;
}

std::optional<int64_t> llmc::llm::checkedNumElements(ShapedType type) {
  if (!type || !type.hasRank())
    return std::nullopt;
  std::optional<int64_t> extent = checkedExtent(type.getShape());
  if (!extent)
    return std::nullopt;
  return llvm::is_contained(type.getShape(), 0) ? 0 : *extent;
}

LogicalResult
llmc::llm::verifyTensorSize(function_ref<InFlightDiagnostic()> emitError,
                            StringRef what, Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t)
    return success();
  for (auto [i, d] : llvm::enumerate(t.getShape()))
    if (!ShapedType::isDynamic(d) && d > kMaxTensorElements)
      return emitError() << what << " has type '" << typeStr(t)
                         << "' whose dimension " << i << " is " << d
                         << ", more than the supported 2^40 ("
                         << kMaxTensorElements << ")";
  std::optional<int64_t> extent = checkedExtent(t.getShape());
  if (extent && *extent <= kMaxTensorElements)
    return success();
  std::string count = extent ? std::to_string(*extent) : "over 2^63";
  InFlightDiagnostic d = emitError();
  d << what << " has type '" << typeStr(t) << "'";
  if (llvm::is_contained(t.getShape(), 0))
    d << " whose non-empty dimensions multiply to " << count;
  else if (t.hasStaticShape())
    d << " with " << count << " elements";
  else
    d << " with " << count << " elements in its static dimensions alone";
  d << ", more than the supported 2^40 (" << kMaxTensorElements << ")";
  return d;
}

bool llmc::llm::isSupportedElementType(Type type) {
  if (auto it = dyn_cast<IntegerType>(type))
    return it.isSignless() && llvm::is_contained({1u, 8u, 32u, 64u},
                                                 it.getWidth());
  return type.isF32() || type.isF16() || type.isBF16() ||
         isa<Float8E4M3FNType, Float8E5M2Type>(type);
}

std::optional<std::string>
llmc::llm::checkReducedDims(ArrayRef<int64_t> shape, ArrayRef<int64_t> dims) {
  for (int64_t d : dims)
    if (d >= 0 && d < static_cast<int64_t>(shape.size()) && shape[d] == 0)
      return "reduces dimension " + std::to_string(d) + " of the input " +
             shapeStr(shape) +
             ", which is empty; reduced dimensions must have size >= 1";
  return std::nullopt;
}

std::optional<std::string> llmc::llm::checkContractionSize(int64_t k) {
  if (k == 0)
    return std::string("contraction size K is 0; a matmul needs K >= 1");
  return std::nullopt;
}

std::optional<std::string> llmc::llm::checkAttentionHeadDim(int64_t d) {
  if (!ShapedType::isDynamic(d) && (d < 1 || d > kMaxAttentionHeadDim))
    return "head dimension D = " + std::to_string(d) +
           " is outside the supported range [1, " +
           std::to_string(kMaxAttentionHeadDim) + "]";
  return std::nullopt;
}

LogicalResult llmc::llm::verifyBoundedTensors(Operation *op) {
  auto emit = [&] { return op->emitOpError(); };
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (failed(verifyTensorSize(emit, "operand #" + std::to_string(i),
                                v.getType())))
      return failure();
  for (auto [i, v] : llvm::enumerate(op->getResults()))
    if (failed(verifyTensorSize(emit, "result #" + std::to_string(i),
                                v.getType())))
      return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// ConstantOp
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// Elementwise folders
//===----------------------------------------------------------------------===//

// add(x, 0) => x ; add(0, x) => x
OpFoldResult AddOp::fold(FoldAdaptor) {
  if (isSplatConstant(getRhs(), 0.0))
    return getLhs();
  if (isSplatConstant(getLhs(), 0.0))
    return getRhs();
  return {};
}

// sub(x, 0) => x
OpFoldResult SubOp::fold(FoldAdaptor) {
  if (isSplatConstant(getRhs(), 0.0))
    return getLhs();
  return {};
}

// mul(x, 1) => x ; mul(1, x) => x
OpFoldResult MulOp::fold(FoldAdaptor) {
  if (isSplatConstant(getRhs(), 1.0))
    return getLhs();
  if (isSplatConstant(getLhs(), 1.0))
    return getRhs();
  return {};
}

// div(x, 1) => x
OpFoldResult DivOp::fold(FoldAdaptor) {
  if (isSplatConstant(getRhs(), 1.0))
    return getLhs();
  return {};
}

// neg(neg(x)) => x
OpFoldResult NegOp::fold(FoldAdaptor) {
  if (auto inner = getInput().getDefiningOp<NegOp>())
    return inner.getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// CompareOp
//===----------------------------------------------------------------------===//

LogicalResult CompareOp::inferReturnTypes(MLIRContext *context,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &results) {
  auto lhsOr = rankedOperand(loc, "llm.compare", "lhs", adaptor.getLhs());
  if (failed(lhsOr))
    return failure();
  auto lhs = *lhsOr;
  results.push_back(
      RankedTensorType::get(lhs.getShape(), IntegerType::get(context, 1)));
  return success();
}

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
// Reductions
//===----------------------------------------------------------------------===//

template <typename AdaptorT>
static LogicalResult inferReduce(StringRef name, std::optional<Location> loc,
                                 AdaptorT adaptor,
                                 SmallVectorImpl<Type> &results) {
  if (!adaptor.getDimsAttr())
    return emitOptionalError(loc, "'llm.", name,
                             "' requires the dims attribute");
  auto inOr = rankedOperand(loc, (llvm::Twine("llm.") + name).str(), "input", adaptor.getInput());
  if (failed(inOr))
    return failure();
  auto in = *inOr;
  ArrayRef<int64_t> dims = adaptor.getDims();
  if (dims.empty())
    return emitOptionalError(loc, "'llm.", name,
                             "' expects at least one dimension to reduce");
  for (auto [i, d] : llvm::enumerate(dims)) {
    if (d < 0 || d >= in.getRank())
      return emitOptionalError(loc, "'llm.", name, "' dimension ", d,
                               " is out of range for rank ", in.getRank());
    if (i > 0 && dims[i - 1] >= d)
      return emitOptionalError(loc, "'llm.", name, "' dimensions ",
                               shapeStr(dims),
                               " must be sorted and unique");
  }
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < in.getRank(); ++i) {
    if (llvm::is_contained(dims, i)) {
      if (adaptor.getKeepdim())
        shape.push_back(1);
      continue;
    }
    shape.push_back(in.getDimSize(i));
  }
  results.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

#define LLM_REDUCE_INFER(OP, NAME)                                             \
  LogicalResult OP::inferReturnTypes(MLIRContext *,                            \
                                     std::optional<Location> loc,              \
                                     Adaptor adaptor,                          \
                                     SmallVectorImpl<Type> &results) {         \
    return inferReduce(NAME, loc, adaptor, results);                           \
  }
LLM_REDUCE_INFER(ReduceSumOp, "reduce_sum")
LLM_REDUCE_INFER(ReduceMeanOp, "reduce_mean")
LLM_REDUCE_INFER(ReduceMaxOp, "reduce_max")
LLM_REDUCE_INFER(ReduceMinOp, "reduce_min")
#undef LLM_REDUCE_INFER

#define LLM_REDUCE_VERIFY(OP)                                                  \
  LogicalResult OP::verify() {                                                 \
    if (std::optional<std::string> error =                                     \
            checkReducedDims(getInput().getType().getShape(), getDims()))      \
      return emitOpError() << *error;                                          \
    return success();                                                          \
  }
LLM_REDUCE_VERIFY(ReduceSumOp)
LLM_REDUCE_VERIFY(ReduceMeanOp)
LLM_REDUCE_VERIFY(ReduceMaxOp)
LLM_REDUCE_VERIFY(ReduceMinOp)
#undef LLM_REDUCE_VERIFY

//===----------------------------------------------------------------------===//
// Softmax and norms
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::verify() {
  auto in = getInput().getType();
  if (in.getRank() < 1)
    return emitOpError() << "input must have rank >= 1, found rank 0";
  if (auto scale = getScale(); scale && !(scale->convertToDouble() > 0.0))
    return emitOpError() << "scale must be > 0, found "
                         << scale->convertToDouble();
  if (Value mask = getMask())
    return verifyBroadcastable(
        *this, "mask", cast<RankedTensorType>(mask.getType()).getShape(),
        in.getShape());
  return success();
}

static LogicalResult verifyNormParam(Operation *op, StringRef name,
                                     RankedTensorType input, Value param) {
  auto t = cast<RankedTensorType>(param.getType());
  int64_t hidden = input.getDimSize(input.getRank() - 1);
  if (t.getRank() != 1 || !dimsCompatible(t.getDimSize(0), hidden))
    return op->emitOpError()
           << name << " must have shape [" << hidden
           << "] (the input's last dimension), found " << shapeStr(t.getShape());
  return success();
}

static LogicalResult verifyEps(Operation *op, double eps) {
  if (!(eps >= 0.0))
    return op->emitOpError() << "eps must be >= 0, found " << eps;
  return success();
}

LogicalResult RMSNormOp::verify() {
  auto in = getInput().getType();
  if (in.getRank() < 1)
    return emitOpError() << "input must have rank >= 1, found rank 0";
  if (failed(verifyEps(*this, getEps().convertToDouble())))
    return failure();
  return verifyNormParam(*this, "weight", in, getWeight());
}

LogicalResult LayerNormOp::verify() {
  auto in = getInput().getType();
  if (in.getRank() < 1)
    return emitOpError() << "input must have rank >= 1, found rank 0";
  if (failed(verifyEps(*this, getEps().convertToDouble())) ||
      failed(verifyNormParam(*this, "weight", in, getWeight())))
    return failure();
  if (Value bias = getBias())
    return verifyNormParam(*this, "bias", in, bias);
  return success();
}

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
  return success();
}

//===----------------------------------------------------------------------===//
// AttentionOp / KVCacheAppendOp
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() {
  auto q = getQuery().getType();
  auto k = getKey().getType();
  auto v = getValue().getType();
  for (auto [name, t] : {std::pair<StringRef, RankedTensorType>{"query", q},
                         {"key", k},
                         {"value", v}})
    if (t.getRank() != 4)
      return emitOpError() << name << " must be [B, S, H, D] (rank 4), found "
                           << shapeStr(t.getShape());
  if (q.getElementType() != k.getElementType() ||
      q.getElementType() != v.getElementType())
    return emitOpError() << "query, key and value must share an element type, "
                            "found "
                         << typeStr(q.getElementType()) << ", "
                         << typeStr(k.getElementType()) << " and "
                         << typeStr(v.getElementType());
  if (failed(verifyCompatibleShape(k.getShape(), v.getShape())))
    return emitOpError() << "key " << shapeStr(k.getShape())
                         << " and value " << shapeStr(v.getShape())
                         << " must have the same shape";
  if (!dimsCompatible(q.getDimSize(0), k.getDimSize(0)))
    return emitOpError() << "batch sizes differ: query " << q.getDimSize(0)
                         << ", key " << k.getDimSize(0);
  if (!dimsCompatible(q.getDimSize(3), k.getDimSize(3)))
    return emitOpError() << "head dimensions differ: query " << q.getDimSize(3)
                         << ", key " << k.getDimSize(3);
  if (std::optional<std::string> error = checkAttentionHeadDim(
          q.isDynamicDim(3) ? k.getDimSize(3) : q.getDimSize(3)))
    return emitOpError() << *error;
  int64_t hq = q.getDimSize(2), hkv = k.getDimSize(2);
  if (!ShapedType::isDynamic(hq) && !ShapedType::isDynamic(hkv) &&
      (hkv == 0 || hq % hkv != 0))
    return emitOpError() << "query heads (" << hq
                         << ") must be a multiple of key/value heads (" << hkv
                         << ") for grouped-query attention";
  if (auto scale = getScale(); scale && !(scale->convertToDouble() > 0.0))
    return emitOpError() << "scale must be > 0, found "
                         << scale->convertToDouble();
  if (Value mask = getMask()) {
    SmallVector<int64_t> scores = {q.getDimSize(0), hq, q.getDimSize(1),
                                   k.getDimSize(1)};
    if (failed(verifyBroadcastable(
            *this, "mask", cast<RankedTensorType>(mask.getType()).getShape(),
            scores)))
      return failure();
  }
  if (Value kvLen = getKvLen(); kvLen && !isScalarInt(kvLen.getType()))
    return emitOpError() << "kv_len must be a scalar (rank 0), found "
                         << typeStr(kvLen.getType());
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

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

LogicalResult AllReduceOp::verify() {
  if (getGroupSize() < 1)
    return emitOpError() << "group_size must be >= 1, found " << getGroupSize();
  return success();
}

LogicalResult AllGatherOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  if (!(adaptor.getDimAttr() && adaptor.getGroupSizeAttr()))
    return emitOptionalError(loc, "'llm.all_gather' requires the dim and group_size attribute(s)");
  auto inOr = rankedOperand(loc, "llm.all_gather", "input", adaptor.getInput());
  if (failed(inOr))
    return failure();
  auto in = *inOr;
  int64_t dim = adaptor.getDim(), group = adaptor.getGroupSize();
  if (group < 1)
    return emitOptionalError(loc, "'llm.all_gather' group_size must be >= 1, "
                                  "found ",
                             group);
  if (dim < 0 || dim >= in.getRank())
    return emitOptionalError(loc, "'llm.all_gather' dim ", dim,
                             " is out of range for rank ", in.getRank());
  SmallVector<int64_t> shape(in.getShape());
  if (!ShapedType::isDynamic(shape[dim]) &&
      (llvm::MulOverflow(shape[dim], group, shape[dim]) ||
       shape[dim] > kMaxTensorElements))
    return emitOptionalError(loc, "'llm.all_gather' result dimension ", dim,
                             " (", in.getDimSize(dim), " x group_size ", group,
                             ") is more than the supported 2^40 (",
                             kMaxTensorElements, ")");
  results.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

LogicalResult ReduceScatterOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  if (!(adaptor.getDimAttr() && adaptor.getGroupSizeAttr()))
    return emitOptionalError(loc, "'llm.reduce_scatter' requires the dim and group_size attribute(s)");
  auto inOr = rankedOperand(loc, "llm.reduce_scatter", "input", adaptor.getInput());
  if (failed(inOr))
    return failure();
  auto in = *inOr;
  int64_t dim = adaptor.getDim(), group = adaptor.getGroupSize();
  if (group < 1)
    return emitOptionalError(loc, "'llm.reduce_scatter' group_size must be "
                                  ">= 1, found ",
                             group);
  if (dim < 0 || dim >= in.getRank())
    return emitOptionalError(loc, "'llm.reduce_scatter' dim ", dim,
                             " is out of range for rank ", in.getRank());
  SmallVector<int64_t> shape(in.getShape());
  if (!ShapedType::isDynamic(shape[dim])) {
    if (shape[dim] % group != 0)
      return emitOptionalError(loc, "'llm.reduce_scatter' dimension ", dim,
                               " of size ", shape[dim],
                               " does not divide by group_size ", group);
    shape[dim] /= group;
  }
  results.push_back(RankedTensorType::get(shape, in.getElementType()));
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
// FusionOp
//===----------------------------------------------------------------------===//

LogicalResult FusionOp::verify() {
  StringRef kind = getKind();
  if (!llvm::is_contained({"elementwise", "residual_norm", "gemm_epilogue",
                           "rope_attention"},
                          kind))
    return emitOpError() << "kind must be elementwise, residual_norm, "
                            "gemm_epilogue or rope_attention, found '"
                         << kind << "'";
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError() << "region has " << body.getNumArguments()
                         << " arguments but the op has " << getInputs().size()
                         << " inputs";
  for (auto [i, arg, in] : llvm::enumerate(body.getArguments(), getInputs()))
    if (arg.getType() != in.getType())
      return emitOpError() << "region argument #" << i << " has type "
                           << arg.getType() << " but input #" << i
                           << " has type " << in.getType();
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError() << "region must end in llm.yield";
  if (yield.getValues().size() != getNumResults())
    return emitOpError() << "yields " << yield.getValues().size()
                         << " values but has " << getNumResults()
                         << " results";
  for (auto [i, v, r] : llvm::enumerate(yield.getValues(), getResults()))
    if (v.getType() != r.getType())
      return emitOpError() << "yielded value #" << i << " has type "
                           << v.getType() << " but result #" << i
                           << " has type " << r.getType();
  for (Operation &op : body.without_terminator())
    if (!isa<LLMDialect>(op.getDialect()) || isa<FusionOp>(op))
      return op.emitOpError()
             << "cannot be inside an llm.fusion region (only llm ops "
                "other than llm.fusion are)";
  return success();
}

#define GET_OP_CLASSES
#include "LLM/IR/LLMOps.cpp.inc"
