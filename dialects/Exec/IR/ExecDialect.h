//===- ExecDialect.h - the exec dialect -------------------------*- C++ -*-===//
//
// Declares the `exec` dialect: buffers, kernel launches, GEMMs, copies and
// collectives, the last IR before rt::Executable. See ExecDialect.td and
// docs/Dialects/ExecDialect.md.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_EXEC_IR_EXECDIALECT_H
#define LLMC_DIALECT_EXEC_IR_EXECDIALECT_H

#include "mlir/IR/Dialect.h"

#include "Exec/IR/ExecDialect.h.inc"

#endif // LLMC_DIALECT_EXEC_IR_EXECDIALECT_H
