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

} // namespace

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

namespace {
/// A little-endian NumPy element type of an .npy file: its size and how to
/// read one value as a double.
struct NpyType {
  int size;
  double (*read)(const char *);
  bool int64 = false; // values beyond 2^53 are refused, not rounded
};

template <typename T> double readAs(const char *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return static_cast<double>(v);
}
double readHalf(const char *p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  llvm::APFloat f(llvm::APFloat::IEEEhalf(), llvm::APInt(16, h));
  return f.convertToFloat();
}

std::optional<NpyType> npyType(llvm::StringRef descr) {
  if (descr == "<f8") return NpyType{8, readAs<double>};
  if (descr == "<f4") return NpyType{4, readAs<float>};
  if (descr == "<f2") return NpyType{2, readHalf};
  if (descr == "<i8") return NpyType{8, readAs<int64_t>, /*int64=*/true};
  if (descr == "<i4") return NpyType{4, readAs<int32_t>};
  if (descr == "<i2") return NpyType{2, readAs<int16_t>};
  if (descr == "|i1") return NpyType{1, readAs<int8_t>};
  if (descr == "|u1" || descr == "|b1") return NpyType{1, readAs<uint8_t>};
  if (descr == "<u2") return NpyType{2, readAs<uint16_t>};
  if (descr == "<u4") return NpyType{4, readAs<uint32_t>};
  return std::nullopt;
}

/// The value of `key` in the header dict of an .npy file ('descr': '<f4',
/// 'fortran_order': False, 'shape': (2, 3), ...): the text up to the next
/// top-level comma or the closing brace; empty when absent.
llvm::StringRef npyField(llvm::StringRef header, llvm::StringRef key) {
  size_t at = header.find(("'" + key + "':").str());
  if (at == llvm::StringRef::npos)
    return {};
  llvm::StringRef rest = header.substr(at + key.size() + 3).ltrim();
  int depth = 0;
  size_t end = 0;
  for (; end < rest.size(); ++end) {
    char c = rest[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  return rest.substr(0, end).trim();
}
} // namespace

/// Argument `t` from the .npy file `bytes` (NumPy format 1.0-3.0: C order,
/// little-endian float64/32/16, int64/32/16/8, uint8/16/32 or bool, the
/// argument's shape): the values as doubles, or the reason it is refused.
static std::optional<std::vector<double>> readNpy(const std::string &bytes,
                                                  RankedTensorType t, std::string &error) {
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0) {
    error = "not an .npy file (no \\x93NUMPY magic)";
    return std::nullopt;
  }
  const unsigned major = static_cast<unsigned char>(bytes[6]);
  size_t headerLen, headerAt;
  if (major == 1) {
    headerLen = static_cast<unsigned char>(bytes[8]) |
                static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
    headerAt = 10;
  } else if ((major == 2 || major == 3) && bytes.size() >= 12) {
    headerLen = 0;
    for (int i = 3; i >= 0; --i)
      headerLen = headerLen << 8 | static_cast<unsigned char>(bytes[8 + i]);
    headerAt = 12;
  } else {
    error = ".npy format version " + std::to_string(major) + " (expected 1, 2 or 3)";
    return std::nullopt;
  }
  if (headerLen > bytes.size() - headerAt) {
    error = "the .npy header runs past the end of the file";
    return std::nullopt;
  }
  llvm::StringRef header(bytes.data() + headerAt, headerLen);
  llvm::StringRef descr = npyField(header, "descr").trim("'\"");
  llvm::StringRef order = npyField(header, "fortran_order");
  llvm::StringRef shapeText = npyField(header, "shape");
  std::optional<NpyType> type = npyType(descr);
  if (!type) {
    error = "the .npy element type '" + descr.str() +
            "' is not one llmc reads (little-endian float64/32/16, int64/32/16/8, "
            "uint8/16/32, bool)";
    return std::nullopt;
  }
  if (order != "False") {
    error = "the .npy array is in Fortran order; save a C-ordered array "
            "(numpy.ascontiguousarray)";
    return std::nullopt;
  }
  std::vector<int64_t> shape;
  llvm::StringRef dims = shapeText.trim("() ");
  while (!dims.empty()) {
    auto [dim, rest] = dims.split(',');
    dim = dim.trim();
    int64_t d;
    if (!dim.empty()) {
      if (dim.getAsInteger(10, d)) {
        error = "the .npy shape '" + shapeText.str() + "' is malformed";
        return std::nullopt;
      }
      shape.push_back(d);
    }
    dims = rest;
  }
  if (llvm::ArrayRef<int64_t>(shape) != t.getShape()) {
    std::string got, want;
    llvm::raw_string_ostream g(got), w(want);
    llvm::interleaveComma(shape, g);
    llvm::interleaveComma(t.getShape(), w);
    error = "the .npy array has shape (" + got + "), the argument (" + want + ")";
    return std::nullopt;
  }
  const int64_t n = t.getNumElements();
  const size_t dataAt = headerAt + headerLen;
  if (bytes.size() - dataAt != static_cast<size_t>(n) * type->size) {
    error = "the .npy data has " + std::to_string(bytes.size() - dataAt) + " bytes, expected " +
            std::to_string(n * type->size);
    return std::nullopt;
  }
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) {
    const char *p = bytes.data() + dataAt + i * type->size;
    if (type->int64) {
      int64_t x;
      std::memcpy(&x, p, 8);
      if (x > (int64_t(1) << 53) || x < -(int64_t(1) << 53)) {
        error = "value #" + std::to_string(i) + " is " + std::to_string(x) +
                ", beyond the 2^53 that llmc-run's values hold exactly";
        return std::nullopt;
      }
    }
    values[i] = type->read(p);
  }
  return values;
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
  enum { F32, I64, Raw, Npy } kind;
  int64_t width;
  if (ext == "npy") {
    kind = Npy, width = 0;
  } else if (ext == "f32") {
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
            "; name it FILE.npy (a NumPy array of the argument's shape), FILE.f32 "
            "(float32 values), FILE.i64 (int64 values)" +
            (ownName.empty() ? std::string()
                             : ", FILE.bin or FILE." + ownName + " (raw " +
                                   ownName + " storage of argument " +
                                   std::to_string(idx) + ")");
    return std::nullopt;
  }
  const int64_t n = t.getNumElements();
  llmc::rt::ReadOptions ro;
  if (kind == Npy)
    ro.max_bytes = std::min<int64_t>(ro.max_bytes, 8 * n + (int64_t(1) << 20));
  else
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
  std::optional<std::vector<double>> npy;
  if (kind == Npy) {
    std::string why;
    npy = readNpy(*bytes, t, why);
    if (!npy) {
      error = flag + ": " + why;
      return std::nullopt;
    }
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
    } else if (kind == Npy) {
      v = (*npy)[i];
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
