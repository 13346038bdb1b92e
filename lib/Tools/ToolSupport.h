//===- ToolSupport.h - shared front end of llmc's command-line tools -*- C++ -*-===//

#ifndef LLMC_LIB_TOOLS_TOOLSUPPORT_H
#define LLMC_LIB_TOOLS_TOOLSUPPORT_H

#include "llmc/Compiler/LowerToExecutable.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/ArrayRef.h"

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace mlir {
class MLIRContext;
}

namespace llmc::tools {

/// A context with every dialect llmc uses loaded, printing one-line
/// diagnostics (not the whole function), without threads.
std::unique_ptr<mlir::MLIRContext> makeContext();

/// The function named `name` in `module`, or the first one when `name` is
/// empty. Sets `error` ("no function named 'f' (the module has: a, b)") and
/// returns null when there is none.
mlir::func::FuncOp findFunction(mlir::ModuleOp module, llvm::StringRef name,
                                std::string &error);

/// `--emit=exec` of llmc-compile and llmc-run: lowers `fn` (after its
/// pipeline) to execution-level IR with its arena planned, in a context of
/// its own with MLIR's pass-manager flags applied, and prints it on stdout.
/// The error message (lowering, or writing stdout) when it fails, else "".
std::string printExecIR(mlir::func::FuncOp fn, const llmc::LowerOptions &options);

/// Parses `--shape NAME=N` bindings. Sets `error` naming the malformed entry,
/// or both entries of a name bound twice.
std::optional<std::map<std::string, int64_t>>
parseShapeBindings(llvm::ArrayRef<std::string> entries, std::string &error);

} // namespace llmc::tools

#endif // LLMC_LIB_TOOLS_TOOLSUPPORT_H
