//===- LLMInterfaces.h - what llm traits and interfaces mean ----*- C++ -*-===//
//
// The one definition of the op classes that passes and codegen reason
// about: which ops are computed pointwise (elementwise).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_LLM_IR_LLMINTERFACES_H
#define LLMC_DIALECT_LLM_IR_LLMINTERFACES_H

#include "mlir/IR/Operation.h"

namespace llmc::llm {

/// True for the `llm` ops with MLIR's Elementwise trait (add, mul, exp,
/// silu, gelu, compare, select, cast, ...): one result, computed pointwise
/// from operands of the result's shape, so a chain of them is one fused
/// elementwise kernel (llm::planFusionGroups, codegen) and a tensor-parallel
/// split of their operands splits the result the same way (llmc-shard).
/// Ops of other dialects are never elementwise here, even with the trait:
/// codegen has no kernel for them. (Shape rules that hold for any op with
/// the trait, as in llmc-specialize-shapes and the reference executor,
/// check OpTrait::Elementwise directly.)
bool isElementwise(mlir::Operation *op);

} // namespace llmc::llm

#endif // LLMC_DIALECT_LLM_IR_LLMINTERFACES_H
