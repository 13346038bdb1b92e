//===- DType.h - MLIR element types <-> runtime dtypes ----------*- C++ -*-===//
//
// The one mapping between MLIR element types and rt::DType (the runtime's
// element types, runtime/include/llmc/runtime/Executable.h), used by the
// lowering, the exec <-> rt::Executable translations and the tools. The
// kernel generators' cuda::ScalarType is reached from rt::DType by
// kernelScalarType (lib/Compiler/KernelPlan.h).
//
//   f32 <-> f32      f16 <-> f16      bf16 <-> bf16
//   f8E4M3FN <-> f8e4m3               f8E5M2 <-> f8e5m2
//   i1 <-> i1 (stored as one byte)    i8, i32, i64 <-> i8, i32, i64
//
// Integers of any signedness map (llm values are signless).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_SUPPORT_DTYPE_H
#define LLMC_SUPPORT_DTYPE_H

#include "llmc/runtime/Executable.h"

#include "absl/status/statusor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Types.h"

namespace llmc {

/// The runtime dtype of an MLIR element type; InvalidArgument "unsupported
/// element type T (expected f32, f16, bf16, f8E4M3FN, f8E5M2, i1, i8, i32
/// or i64)" for any other type.
absl::StatusOr<rt::DType> toRuntimeDType(mlir::Type type);

/// The MLIR element type of a runtime dtype (signless integers).
mlir::Type toMlirType(mlir::MLIRContext *ctx, rt::DType dtype);

} // namespace llmc

#endif // LLMC_SUPPORT_DTYPE_H
