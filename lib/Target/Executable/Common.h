//===- Common.h - shared by the exec <-> rt::Executable translations ------===//

#ifndef LLMC_LIB_TARGET_EXECUTABLE_COMMON_H
#define LLMC_LIB_TARGET_EXECUTABLE_COMMON_H

#include "llmc/runtime/Executable.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

namespace llmc::exec_translation {

/// The MLIR element type of a runtime dtype.
inline mlir::Type toType(mlir::MLIRContext *ctx, rt::DType t) {
  switch (t) {
  case rt::DType::f32: return mlir::Float32Type::get(ctx);
  case rt::DType::f16: return mlir::Float16Type::get(ctx);
  case rt::DType::bf16: return mlir::BFloat16Type::get(ctx);
  case rt::DType::f8e4m3: return mlir::Float8E4M3FNType::get(ctx);
  case rt::DType::f8e5m2: return mlir::Float8E5M2Type::get(ctx);
  case rt::DType::i1: return mlir::IntegerType::get(ctx, 1);
  case rt::DType::i8: return mlir::IntegerType::get(ctx, 8);
  case rt::DType::i32: return mlir::IntegerType::get(ctx, 32);
  case rt::DType::i64: return mlir::IntegerType::get(ctx, 64);
  }
  return {};
}

/// The runtime dtype of an MLIR element type; nullopt for any other type.
inline std::optional<rt::DType> toDType(mlir::Type t) {
  if (t.isF32()) return rt::DType::f32;
  if (t.isF16()) return rt::DType::f16;
  if (t.isBF16()) return rt::DType::bf16;
  if (llvm::isa<mlir::Float8E4M3FNType>(t)) return rt::DType::f8e4m3;
  if (llvm::isa<mlir::Float8E5M2Type>(t)) return rt::DType::f8e5m2;
  if (t.isInteger(1)) return rt::DType::i1;
  if (t.isInteger(8)) return rt::DType::i8;
  if (t.isInteger(32)) return rt::DType::i32;
  if (t.isInteger(64)) return rt::DType::i64;
  return std::nullopt;
}

/// "'exec.gemm' at loc(...)".
inline std::string describe(mlir::Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "'" << op->getName() << "' at ";
  op->getLoc().print(os);
  return s;
}

} // namespace llmc::exec_translation

#endif // LLMC_LIB_TARGET_EXECUTABLE_COMMON_H
