//===- InitAllDialects.h - register every dialect llmc uses -----*- C++ -*-===//
//
// The one registration point for dialects (as IREE's init_dialects.h and
// Triton's RegisterTritonDialects.h).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_INITALLDIALECTS_H
#define LLMC_INITALLDIALECTS_H

#include "Exec/IR/ExecDialect.h"
#include "LLM/IR/LLMDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"

namespace llmc {

/// Adds the `llm` and `exec` dialects and the upstream dialects llmc
/// programs use (func, arith, tensor) to `registry`.
inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<llm::LLMDialect, exec::ExecDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect>();
}

} // namespace llmc

#endif // LLMC_INITALLDIALECTS_H
