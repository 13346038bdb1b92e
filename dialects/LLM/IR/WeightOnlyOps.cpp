//===- WeightOnlyOps.cpp - llm.quantize_weight / llm.dequantize_weight ----===//
//
// Verifiers of the weight-only quantization ops (layouts in LLMOps.td).
//
//===----------------------------------------------------------------------===//

#include "LLM/IR/LLMOps.h"

#include "mlir/IR/TypeUtilities.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace llmc::llm;

namespace {

std::string dimsStr(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "[";
  for (auto [i, d] : llvm::enumerate(shape))
    os << (i ? ", " : "") << (ShapedType::isDynamic(d) ? "?" : std::to_string(d));
  os << "]";
  return s;
}

/// Checks bits/group_size and the [N, K] weight shape; sets the expected
/// packed and scales shapes.
LogicalResult verifyScheme(Operation *op, int64_t bits, int64_t group,
                           ArrayRef<int64_t> weight,
                           SmallVectorImpl<int64_t> &packed,
                           SmallVectorImpl<int64_t> &scales) {
  if (bits != 4 && bits != 8)
    return op->emitOpError() << "bits must be 4 or 8, found " << bits;
  if (group < 2 || group % 2 != 0)
    return op->emitOpError() << "group_size must be a positive even number, found "
                             << group;
  if (weight.size() != 2)
    return op->emitOpError() << "expects a rank-2 [N, K] weight, found rank "
                             << weight.size();
  int64_t n = weight[0], k = weight[1];
  if (!ShapedType::isDynamic(k) && k % group != 0)
    return op->emitOpError()
           << "K = " << k << " is not a multiple of group_size = " << group
           << " (pad the weight along K first; llmc-precision leaves such "
              "matmuls unquantized)";
  auto div = [&](int64_t d, int64_t by) {
    return ShapedType::isDynamic(d) ? d : d / by;
  };
  packed.assign({n, div(k, bits == 4 ? 2 : 1)});
  scales.assign({n, div(k, group)});
  return success();
}

LogicalResult checkShape(Operation *op, StringRef what, ArrayRef<int64_t> found,
                         ArrayRef<int64_t> expected) {
  if (failed(verifyCompatibleShape(found, expected)))
    return op->emitOpError() << what << " has shape " << dimsStr(found)
                             << ", expected " << dimsStr(expected);
  return success();
}

} // namespace

LogicalResult QuantizeWeightOp::verify() {
  SmallVector<int64_t> packed, scales;
  if (failed(verifyScheme(*this, getBits(), getGroupSize(),
                          getWeight().getType().getShape(), packed, scales)))
    return failure();
  if (failed(checkShape(*this, "packed result", getPacked().getType().getShape(),
                        packed)) ||
      failed(checkShape(*this, "scales result", getScales().getType().getShape(),
                        scales)))
    return failure();
  return success();
}

LogicalResult DequantizeWeightOp::verify() {
  SmallVector<int64_t> packed, scales;
  if (failed(verifyScheme(*this, getBits(), getGroupSize(),
                          getResult().getType().getShape(), packed, scales)))
    return failure();
  if (failed(checkShape(*this, "packed operand",
                        getPacked().getType().getShape(), packed)) ||
      failed(checkShape(*this, "scales operand",
                        getScales().getType().getShape(), scales)))
    return failure();
  return success();
}
