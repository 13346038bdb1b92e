//===- LLMOps.h - llm dialect operations ------------------------*- C++ -*-===//
//
// C++ classes of the `llm` ops generated from LLMOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_LLM_IR_LLMOPS_H
#define LLMC_DIALECT_LLM_IR_LLMOPS_H

#include "LLM/IR/LLMDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "LLM/IR/LLMEnums.h.inc"

#define GET_OP_CLASSES
#include "LLM/IR/LLMOps.h.inc"

#include <optional>

namespace llmc::llm {

/// Result shape of `llm.matmul` for operands lhs [..., M, K] ([..., K, M]
/// when transposeLhs) and rhs [..., K, N] ([..., N, K] when transposeRhs):
/// the NumPy broadcast of the batch dimensions followed by [M, N]. nullopt
/// when an operand has rank < 2 or the batch dimensions do not broadcast.
std::optional<llvm::SmallVector<int64_t>>
matmulResultShape(mlir::RankedTensorType lhs, mlir::RankedTensorType rhs,
                  bool transposeLhs, bool transposeRhs);

} // namespace llmc::llm

#endif // LLMC_DIALECT_LLM_IR_LLMOPS_H
