//===- RunInputs.cpp - llmc-run: host tensors and --input files -----------===//
//
// llmc-run holds host values as doubles (ref::HostTensor). Here: their
// storage bytes on the device (pack, unpack), the files --input reads
// (readInput) and the range of an integer argument (integerRangeError).
//
//===----------------------------------------------------------------------===//

#include "RunMain.h"

#include "llmc/runtime/FileIO.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Parallel.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace mlir;

namespace llmc::tools::run {

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

/// Host tensor (values already representable) -> storage bytes.
std::string pack(const ref::HostTensor &t) {
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

ref::HostTensor unpack(const std::string &bytes, Type elementType,
                       std::vector<int64_t> shape) {
  ref::HostTensor t;
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

std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

/// Why `v` is no value of the integer type `t` ("" when it is one): not
/// integral, outside the signed range of t's width (i1: 0 or 1), or, for
/// i64, beyond 2^53, where the doubles llmc-run holds host values in stop
/// being exact.
std::string integerRangeError(Type t, double v) {
  auto it = dyn_cast<IntegerType>(t);
  if (!it)
    return "";
  unsigned w = it.getWidth();
  double lo = w == 1 ? 0 : -std::ldexp(1.0, std::min(w, 54u) - 1);
  double hi = w == 1 ? 1 : std::ldexp(1.0, std::min(w, 54u) - 1) - (w <= 53);
  if (std::isfinite(v) && v == std::trunc(v) && v >= lo && v <= hi)
    return "";
  std::string found;
  llvm::raw_string_ostream(found) << llvm::format("%.17g", v);
  return "takes integers in [" + std::to_string(static_cast<int64_t>(lo)) +
         ", " + std::to_string(static_cast<int64_t>(hi)) + "], found " + found;
}

/// Argument `idx` of type `t` from `--input argI=path` (see its --help):
/// FILE.f32 / FILE.i64 values converted to the argument's type, or the
/// argument's own storage (FILE.bin, FILE.<dtype>). The file must have
/// exactly the argument's element count; integer arguments take integral
/// values in range. Sets `error` and returns nullopt otherwise.
std::optional<ref::HostTensor> readInput(const std::string &path, unsigned idx,
                                         RankedTensorType t, std::string &error) {
  const std::string flag = "--input arg" + std::to_string(idx) + "=" + path;
  const std::string argName = "argument " + std::to_string(idx) + " (" +
                              typeStr(t) + ")";
  Type et = t.getElementType();
  auto own = dtypeOf(et);
  const std::string ownName = own.ok() ? llmc::rt::DTypeName(*own) : "";
  llvm::StringRef ext = llvm::sys::path::extension(path);
  ext.consume_front(".");
  enum { F32, I64, Raw } kind;
  int64_t width;
  if (ext == "f32") {
    kind = F32, width = 4;
  } else if (ext == "i64") {
    kind = I64, width = 8;
  } else if (ext == "bin" || (!ownName.empty() && ext == ownName)) {
    if (!own.ok()) {
      error = flag + ": " + argName +
              " has no raw storage format in llmc; use FILE.f32 or FILE.i64";
      return std::nullopt;
    }
    kind = Raw, width = llmc::rt::DTypeSize(*own);
  } else {
    error = flag + ": " +
            (ext.empty() ? std::string("no file extension")
                         : "unknown input file type '." + ext.str() + "'") +
            "; name it FILE.f32 (float32 values), FILE.i64 (int64 values)" +
            (ownName.empty() ? std::string()
                             : ", FILE.bin or FILE." + ownName + " (raw " +
                                   ownName + " storage of argument " +
                                   std::to_string(idx) + ")");
    return std::nullopt;
  }
  const int64_t n = t.getNumElements();
  llmc::rt::ReadOptions ro;
  ro.exact_bytes = n * width;
  auto bytes = llmc::rt::ReadFile(path, ro);
  if (!bytes.ok()) {
    error = flag + ": " + std::string(bytes.status().message());
    if (absl::IsOutOfRange(bytes.status()))
      error += " (" + argName + " holds " + std::to_string(n) + " values of " +
               std::to_string(width) + " bytes as " +
               (kind == F32   ? std::string("float32")
                : kind == I64 ? std::string("int64")
                              : "raw " + ownName) +
               ")";
    return std::nullopt;
  }
  std::vector<int64_t> shape(t.getShape().begin(), t.getShape().end());
  ref::HostTensor h;
  if (kind == Raw) {
    h = unpack(*bytes, et, shape);
  } else {
    h.elementType = et;
    h.shape = shape;
    h.data.resize(n);
  }
  const bool isInt = isa<IntegerType>(et);
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (kind == Raw) {
      if (et.isInteger(1) && static_cast<unsigned char>((*bytes)[i]) > 1) {
        error = flag + ": byte #" + std::to_string(i) + " is " +
                std::to_string(static_cast<unsigned char>((*bytes)[i])) + "; " +
                argName + " takes 0 or 1";
        return std::nullopt;
      }
      v = h.data[i];
    } else if (kind == I64) {
      int64_t x;
      std::memcpy(&x, bytes->data() + i * 8, 8);
      v = static_cast<double>(x);
      // Beyond 2^53 the double is not x: refuse it rather than round.
      if (isInt && (x > (int64_t(1) << 53) || x < -(int64_t(1) << 53))) {
        std::string range = integerRangeError(et, std::ldexp(1.0, 63));
        error = flag + ": value #" + std::to_string(i) + ": " + argName + " " +
                range.substr(0, range.find(", found")) + ", found " +
                std::to_string(x);
        return std::nullopt;
      }
    } else {
      float x;
      std::memcpy(&x, bytes->data() + i * 4, 4);
      v = x;
    }
    if (std::string why = integerRangeError(et, v); !why.empty()) {
      error = flag + ": value #" + std::to_string(i) + ": " + argName + " " + why;
      return std::nullopt;
    }
    h.data[i] = kind == Raw ? v : ref::RoundToType(v, et);
  }
  return h;
}

} // namespace llmc::tools::run
