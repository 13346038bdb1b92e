//===- LLMOps.cpp - llm dialect operations -------------------------------===//
//
// Verifiers, result type inference, folders and canonicalizations of the
// `llm` ops. Messages are lowercase and say expected vs found. This file:
// the helpers the ops share (LLMOpsHelpers.h), the tensor-size rules of
// every op, llm.constant and the generated op definitions;
// the op families are in their own files (see LLMOpsHelpers.h).
//
//===----------------------------------------------------------------------===//

#include "LLM/IR/LLMOps.h"
#include "LLMOpsHelpers.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace llmc::llm;

#include "LLM/IR/LLMEnums.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace llmc::llm::detail {

bool dimsCompatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (i)
      s += ", ";
    s += ShapedType::isDynamic(d) ? "?" : std::to_string(d);
  }
  return s + "]";
}

std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

/// Checks that `from` broadcasts NumPy-style (right-aligned) to `to`.
LogicalResult verifyBroadcastable(Operation *op, StringRef name,
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
FailureOr<RankedTensorType> rankedOperand(std::optional<Location> loc,
                                          StringRef op, StringRef name,
                                          Value v) {
  if (auto t = dyn_cast<RankedTensorType>(v.getType()))
    return t;
  (void)emitOptionalError(loc, "'", op, "' ", name,
                          " must be a ranked tensor, found ", typeStr(v.getType()));
  return failure();
}

bool isScalarInt(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t && t.getRank() == 0;
}

} // namespace llmc::llm::detail

using namespace llmc::llm::detail;

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

#define GET_OP_CLASSES
#include "LLM/IR/LLMOps.cpp.inc"
