//===- CompilerInternal.h - what Compiler.cpp shares with the C API -*- C++ -*-===//

#ifndef LLMC_LIB_CAPI_COMPILERINTERNAL_H
#define LLMC_LIB_CAPI_COMPILERINTERNAL_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include "absl/status/statusor.h"

#include <memory>
#include <string_view>

namespace llmc {

/// A context with every llmc dialect loaded, diagnostics without the op
/// dump (they go into status messages).
std::unique_ptr<mlir::MLIRContext> makeCompilerContext();

/// Parses `text` into `ctx` (kept in `module`) and finds `function` (empty:
/// the first). InvalidArgument with every diagnostic for malformed MLIR, or
/// naming the functions found for an unknown name. Must be called with the
/// context's lock held.
absl::StatusOr<mlir::func::FuncOp> parseFunction(mlir::MLIRContext *ctx, std::string_view text,
                                                 std::string_view function,
                                                 mlir::OwningOpRef<mlir::ModuleOp> &module);

} // namespace llmc

#endif // LLMC_LIB_CAPI_COMPILERINTERNAL_H
