//===- LLMDialect.h - the llm dialect ---------------------------*- C++ -*-===//
//
// Declares the `llm` dialect: transformer graph ops on ranked tensors. See
// LLMDialect.td for the op set and docs/Dialects/LLMDialect.md for the
// reference generated from it.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_LLM_IR_LLMDIALECT_H
#define LLMC_DIALECT_LLM_IR_LLMDIALECT_H

#include "mlir/IR/Dialect.h"

#include "LLM/IR/LLMDialect.h.inc"

#endif // LLMC_DIALECT_LLM_IR_LLMDIALECT_H
