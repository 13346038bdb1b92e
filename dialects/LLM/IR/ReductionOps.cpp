//===- ReductionOps.cpp - llm reductions and normalizations ---------------===//
//
// Result types and verifiers of llm.reduce_{sum,mean,max,min}, and the
// verifiers of llm.softmax, llm.rms_norm and llm.layer_norm.
//
//===----------------------------------------------------------------------===//

#include "LLM/IR/LLMOps.h"
#include "LLMOpsHelpers.h"

#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

using namespace mlir;
using namespace llmc::llm;
using namespace llmc::llm::detail;

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

LogicalResult ArgMaxOp::inferReturnTypes(MLIRContext *ctx,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  if (!adaptor.getDimAttr())
    return emitOptionalError(loc, "'llm.argmax' requires the dim attribute");
  auto inOr = rankedOperand(loc, "llm.argmax", "input", adaptor.getInput());
  if (failed(inOr))
    return failure();
  auto in = *inOr;
  int64_t dim = adaptor.getDim();
  if (in.getRank() == 0 || dim < 0 || dim >= in.getRank())
    return emitOptionalError(loc, "'llm.argmax' dim ", dim,
                             " is out of range for an input of rank ",
                             in.getRank());
  if (in.getDimSize(dim) == 0)
    return emitOptionalError(loc, "'llm.argmax' over dimension ", dim,
                             " of size 0 (no element to pick)");
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < in.getRank(); ++i) {
    if (i != dim)
      shape.push_back(in.getDimSize(i));
    else if (adaptor.getKeepdim())
      shape.push_back(1);
  }
  results.push_back(RankedTensorType::get(shape, IntegerType::get(ctx, 64)));
  return success();
}

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
// CumsumOp
//===----------------------------------------------------------------------===//

LogicalResult CumsumOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  int64_t dim = static_cast<int64_t>(getDim());
  if (dim < 0 || dim >= in.getRank())
    return emitOpError() << "dim " << dim << " is out of range for rank "
                         << in.getRank();
  if (failed(verifyCompatibleShape(in.getShape(), out.getShape())))
    return emitOpError() << "result shape " << shapeStr(out.getShape())
                         << " differs from the input's "
                         << shapeStr(in.getShape());
  Type it = in.getElementType(), ot = out.getElementType();
  if (isa<FloatType>(it)) {
    if (ot != it)
      return emitOpError() << "a " << typeStr(it) << " input gives a "
                           << typeStr(it) << " result, found " << typeStr(ot);
    if (isa<Float8E4M3FNType, Float8E5M2Type>(it))
      return emitOpError() << "input of " << typeStr(it)
                           << " (f32, f16, bf16 and integers are supported)";
    return success();
  }
  if (ot.isInteger(1) || ot.isInteger(8) || isa<Float8E4M3FNType, Float8E5M2Type>(ot))
    return emitOpError() << "an integer or boolean input gives an i64, i32 or "
                            "float (not fp8) result, found "
                         << typeStr(ot);
  return success();
}

//===----------------------------------------------------------------------===//
// DropoutMaskOp
//===----------------------------------------------------------------------===//

LogicalResult DropoutMaskOp::verify() {
  auto seed = cast<RankedTensorType>(getSeed().getType());
  if (seed.getRank() != 0)
    return emitOpError() << "seed must be a scalar (rank 0) i64, found "
                         << typeStr(seed);
  double p = getP().convertToDouble();
  if (!(p >= 0.0 && p <= 1.0))
    return emitOpError() << "p must be in [0, 1], found " << p;
  // The kernel takes the stream as a 32-bit launch argument.
  if (static_cast<int64_t>(getStream()) < 0 || getStream() > uint64_t{0x7FFFFFFF})
    return emitOpError() << "stream must be in [0, 2^31), found "
                         << static_cast<int64_t>(getStream());
  return success();
}
