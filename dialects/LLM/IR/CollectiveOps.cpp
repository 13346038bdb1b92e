//===- CollectiveOps.cpp - llm collectives --------------------------------===//
//
// Verifier of llm.all_reduce and result types of llm.all_gather and
// llm.reduce_scatter (tensor parallelism).
//
//===----------------------------------------------------------------------===//

#include "LLM/IR/LLMOps.h"
#include "LLMOpsHelpers.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace llmc::llm;
using namespace llmc::llm::detail;

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
