//===- Passes.h - exec dialect passes ---------------------------*- C++ -*-===//

#ifndef LLMC_DIALECT_EXEC_TRANSFORMS_PASSES_H
#define LLMC_DIALECT_EXEC_TRANSFORMS_PASSES_H

#include "Exec/IR/ExecOps.h"
#include "mlir/Pass/Pass.h"

namespace llmc::exec {

#define GEN_PASS_DECL
#include "Exec/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "Exec/Transforms/Passes.h.inc"

} // namespace llmc::exec

#endif // LLMC_DIALECT_EXEC_TRANSFORMS_PASSES_H
