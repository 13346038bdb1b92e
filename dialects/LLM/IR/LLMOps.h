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

#endif // LLMC_DIALECT_LLM_IR_LLMOPS_H
