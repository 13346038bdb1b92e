//===- ElementwiseOps.cpp - llm elementwise ops ---------------------------===//
//
// Folders of the elementwise arithmetic ops (identities such as
// add(x, 0) => x) and the result type of llm.compare.
//
//===----------------------------------------------------------------------===//

#include "LLM/IR/LLMOps.h"
#include "LLMOpsHelpers.h"

#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace llmc::llm;
using namespace llmc::llm::detail;

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
