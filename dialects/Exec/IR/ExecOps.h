//===- ExecOps.h - exec dialect operations ----------------------*- C++ -*-===//
//
// C++ classes of the `exec` types, attributes and ops generated from
// ExecDialect.td / ExecOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_EXEC_IR_EXECOPS_H
#define LLMC_DIALECT_EXEC_IR_EXECOPS_H

#include "Exec/IR/ExecDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"

#include "Exec/IR/ExecEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "Exec/IR/ExecTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "Exec/IR/ExecAttrs.h.inc"

#include <optional>

namespace llmc::exec {

/// Bytes per element of an element type the runtime knows (f32, f16, bf16,
/// f8E4M3FN, f8E5M2, i1 (one byte), i8, i32, i64); nullopt for any other.
std::optional<int64_t> elementBytes(mlir::Type type);

/// Bytes of a static-shape tensor of a known element type; nullopt otherwise
/// or on overflow.
std::optional<int64_t> tensorBytes(mlir::Type type);

/// True for the ops that are one entry of the launch sequence: exec.launch,
/// exec.gemm, exec.copy, exec.collective.
bool isLaunchLike(mlir::Operation *op);

} // namespace llmc::exec

#define GET_OP_CLASSES
#include "Exec/IR/ExecOps.h.inc"

#endif // LLMC_DIALECT_EXEC_IR_EXECOPS_H
