//===- DType.cpp - MLIR element types <-> runtime dtypes ------------------===//

#include "llmc/Support/DType.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

absl::StatusOr<llmc::rt::DType> llmc::toRuntimeDType(Type t) {
  if (t.isF32()) return rt::DType::f32;
  if (t.isF16()) return rt::DType::f16;
  if (t.isBF16()) return rt::DType::bf16;
  if (isa<Float8E4M3FNType>(t)) return rt::DType::f8e4m3;
  if (isa<Float8E5M2Type>(t)) return rt::DType::f8e5m2;
  if (t.isInteger(1)) return rt::DType::i1;
  if (t.isInteger(8)) return rt::DType::i8;
  if (t.isInteger(32)) return rt::DType::i32;
  if (t.isInteger(64)) return rt::DType::i64;
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return absl::InvalidArgumentError("unsupported element type " + s +
                                    " (expected f32, f16, bf16, f8E4M3FN, "
                                    "f8E5M2, i1, i8, i32 or i64)");
}

Type llmc::toMlirType(MLIRContext *ctx, rt::DType t) {
  switch (t) {
  case rt::DType::f32: return Float32Type::get(ctx);
  case rt::DType::f16: return Float16Type::get(ctx);
  case rt::DType::bf16: return BFloat16Type::get(ctx);
  case rt::DType::f8e4m3: return Float8E4M3FNType::get(ctx);
  case rt::DType::f8e5m2: return Float8E5M2Type::get(ctx);
  case rt::DType::i1: return IntegerType::get(ctx, 1);
  case rt::DType::i8: return IntegerType::get(ctx, 8);
  case rt::DType::i32: return IntegerType::get(ctx, 32);
  case rt::DType::i64: return IntegerType::get(ctx, 64);
  }
  return {};
}
