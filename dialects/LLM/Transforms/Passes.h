//===- Passes.h - llm dialect passes ----------------------------*- C++ -*-===//

#ifndef LLMC_DIALECT_LLM_TRANSFORMS_PASSES_H
#define LLMC_DIALECT_LLM_TRANSFORMS_PASSES_H

#include "LLM/IR/LLMOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

#include <map>
#include <string>

namespace llmc::llm {

#define GEN_PASS_DECL
#include "LLM/Transforms/Passes.h.inc"

/// Name of dimension `dim` of argument `arg` if it is dynamic: the entry of
/// the argument's `llm.dim_names` attribute, or "arg<arg>.<dim>".
std::string dynamicDimName(mlir::func::FuncOp fn, unsigned arg, unsigned dim);

/// Rewrites `fn` to static shapes: every dynamic argument dimension takes its
/// value from `bindings` (by dynamicDimName) and result shapes are recomputed
/// op by op. Emits a diagnostic on `fn` (unbound or unused name, a binding
/// that contradicts the IR, a shape no rule determines) and fails.
mlir::LogicalResult
specializeShapes(mlir::func::FuncOp fn,
                 const std::map<std::string, int64_t> &bindings);

#define GEN_PASS_REGISTRATION
#include "LLM/Transforms/Passes.h.inc"

} // namespace llmc::llm

#endif // LLMC_DIALECT_LLM_TRANSFORMS_PASSES_H
