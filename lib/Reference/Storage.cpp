//===- Storage.cpp - host tensors to and from their storage bytes --------===//

#include "llmc/Reference/ReferenceExecutor.h"

#include "llmc/Support/DType.h"
#include "llmc/runtime/Executable.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/Support/Parallel.h"

#include <cstring>

using namespace mlir;

namespace llmc::reference {

namespace {

absl::StatusOr<llmc::rt::DType> dtypeOf(Type t) { return llmc::toRuntimeDType(t); }

const llvm::fltSemantics *semanticsOf(Type t) {
  if (t.isF16()) return &llvm::APFloat::IEEEhalf();
  if (t.isBF16()) return &llvm::APFloat::BFloat();
  if (isa<Float8E4M3FNType>(t)) return &llvm::APFloat::Float8E4M3FN();
  if (isa<Float8E5M2Type>(t)) return &llvm::APFloat::Float8E5M2();
  return nullptr;
}

} // namespace

std::string toStorage(const HostTensor &t) {
  auto dtype = *dtypeOf(t.elementType);
  int64_t size = llmc::rt::DTypeSize(dtype);
  std::string out(t.data.size() * size, '\0');
  const bool bf16 = t.elementType.isBF16();
  llvm::parallelFor(0, t.data.size(), [&](size_t i) {
    double v = t.data[i];
    char *dst = &out[i * size];
    if (bf16 && std::isfinite(v)) {
      // Exactly representable in bf16: its bits are the float's top half.
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      uint16_t top = static_cast<uint16_t>(bits >> 16);
      std::memcpy(dst, &top, 2);
    } else if (t.elementType.isF32()) {
      float f = static_cast<float>(v);
      std::memcpy(dst, &f, 4);
    } else if (auto *sem = semanticsOf(t.elementType)) {
      llvm::APFloat f(v);
      bool lost;
      f.convert(*sem, llvm::APFloat::rmNearestTiesToEven, &lost);
      uint64_t bits = f.bitcastToAPInt().getZExtValue();
      std::memcpy(dst, &bits, size);
    } else {
      int64_t iv = static_cast<int64_t>(v);
      std::memcpy(dst, &iv, size);
    }
  });
  return out;
}

HostTensor fromStorage(std::string_view bytes, mlir::Type elementType,
                       std::vector<int64_t> shape) {
  HostTensor t;
  t.elementType = elementType;
  t.shape = std::move(shape);
  int64_t n = t.numElements();
  int64_t size = llmc::rt::DTypeSize(*dtypeOf(elementType));
  t.data.resize(n);
  const bool bf16 = elementType.isBF16();
  llvm::parallelFor(0, n, [&](int64_t i) {
    const char *src = &bytes[i * size];
    if (bf16) {
      uint16_t top;
      std::memcpy(&top, src, 2);
      uint32_t bits = uint32_t(top) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      t.data[i] = f;
    } else if (elementType.isF32()) {
      float f;
      std::memcpy(&f, src, 4);
      t.data[i] = f;
    } else if (auto *sem = semanticsOf(elementType)) {
      uint64_t bits = 0;
      std::memcpy(&bits, src, size);
      llvm::APFloat f(*sem, llvm::APInt(size * 8, bits));
      t.data[i] = f.convertToDouble();
    } else if (elementType.isInteger(1)) {
      t.data[i] = *src != 0;
    } else {
      int64_t v = 0;
      std::memcpy(&v, src, size);
      int shift = 64 - size * 8;
      t.data[i] = static_cast<double>((v << shift) >> shift);
    }
  });
  return t;
}

} // namespace llmc::reference
