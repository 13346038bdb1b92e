//===- Common.h - shared by the exec <-> rt::Executable translations ------===//

#ifndef LLMC_LIB_TARGET_EXECUTABLE_COMMON_H
#define LLMC_LIB_TARGET_EXECUTABLE_COMMON_H

#include "llmc/Support/DType.h"
#include "llmc/Support/Describe.h"
#include "llmc/runtime/Executable.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

namespace llmc::exec_translation {

/// The MLIR element type of a runtime dtype (llmc/Support/DType.h).
inline mlir::Type toType(mlir::MLIRContext *ctx, rt::DType t) {
  return toMlirType(ctx, t);
}

/// The runtime dtype of an MLIR element type; nullopt for any other type
/// (llmc/Support/DType.h).
inline std::optional<rt::DType> toDType(mlir::Type t) {
  absl::StatusOr<rt::DType> d = toRuntimeDType(t);
  return d.ok() ? std::optional<rt::DType>(*d) : std::nullopt;
}

/// "'exec.gemm' at loc(...)" (llmc/Support/Describe.h).
inline std::string describe(mlir::Operation *op) { return describeOp(op); }

} // namespace llmc::exec_translation

#endif // LLMC_LIB_TARGET_EXECUTABLE_COMMON_H
