//===- LLMOpsHelpers.h - helpers of the llm op verifiers -------*- C++ -*-===//
//
// Internal to dialects/LLM/IR: the shape and message helpers that the op
// verifiers, type inference and folders share (defined in LLMOps.cpp).
// The ops' C++ is split as LLMOps.td's sections:
//   LLMOps.cpp          tensor-size rules of every op, llm.constant,
//                       the generated op definitions
//   ElementwiseOps.cpp  elementwise folders, llm.compare
//   ShapeOps.cpp        type and shape manipulation (cast, broadcast,
//                       reshape, transpose, slice, concat, gather) and pad
//   ReductionOps.cpp    reductions, softmax and norms
//   TransformerOps.cpp  rope, matmul, attention, kv_cache_append
//   CollectiveOps.cpp   all_reduce, all_gather, reduce_scatter
//   WeightOnlyOps.cpp   quantize_weight, dequantize_weight
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_LLM_IR_LLMOPSHELPERS_H
#define LLMC_DIALECT_LLM_IR_LLMOPSHELPERS_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Types.h"
#include "mlir/IR/Value.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace llmc::llm::detail {

/// True when sizes `a` and `b` may be equal (either is dynamic, or equal).
bool dimsCompatible(int64_t a, int64_t b);

/// "[2, ?, 8]".
std::string shapeStr(llvm::ArrayRef<int64_t> shape);

/// `t` as MLIR prints it.
std::string typeStr(mlir::Type t);

/// Checks that `from` broadcasts NumPy-style (right-aligned) to `to`.
mlir::LogicalResult verifyBroadcastable(mlir::Operation *op,
                                        llvm::StringRef name,
                                        llvm::ArrayRef<int64_t> from,
                                        llvm::ArrayRef<int64_t> to);

/// The ranked tensor type of an operand during type inference, which the
/// custom parser runs before the operand type constraints are verified.
mlir::FailureOr<mlir::RankedTensorType>
rankedOperand(std::optional<mlir::Location> loc, llvm::StringRef op,
              llvm::StringRef name, mlir::Value v);

/// True for a rank-0 tensor.
bool isScalarInt(mlir::Type type);

} // namespace llmc::llm::detail

#endif // LLMC_DIALECT_LLM_IR_LLMOPSHELPERS_H
