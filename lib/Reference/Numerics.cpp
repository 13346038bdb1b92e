//===- Numerics.cpp - rounding, random tensors and error metrics ---------===//
//
// The element-type rounding the reference executor applies to every op
// result, and the helpers tests use to make inputs and compare outputs.
//
//===----------------------------------------------------------------------===//

#include "llmc/Reference/ReferenceExecutor.h"

#include "llvm/Support/Parallel.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>
#include <limits>

using namespace mlir;

namespace llmc::reference {

int64_t HostTensor::numElements() const {
  if (llvm::is_contained(shape, 0))
    return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    if (llvm::MulOverflow(n, d, n))
      return std::numeric_limits<int64_t>::max();
  return n;
}

std::string HostTensor::typeString() const {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  llvm::raw_string_ostream os(s);
  if (elementType)
    elementType.print(os);
  else
    os << "<null>";
  os << ">";
  return s;
}

static double wrapInteger(double value, unsigned width) {
  if (std::isnan(value))
    return 0.0;
  double t = std::trunc(value);
  if (width == 1)
    return t != 0.0 ? 1.0 : 0.0;
  if (width >= 64) {
    // Doubles hold i64 exactly only up to 2^53; saturate instead of UB.
    if (t >= 0x1p63)
      return 0x1p63 - 1024.0;
    if (t < -0x1p63)
      return -0x1p63;
    return t;
  }
  double modulus = std::ldexp(1.0, width);
  double r = std::fmod(t, modulus); // exact, in (-2^w, 2^w)
  auto x = static_cast<int64_t>(r);
  uint64_t u = static_cast<uint64_t>(x) & ((uint64_t{1} << width) - 1);
  if ((u >> (width - 1)) & 1)
    return static_cast<double>(static_cast<int64_t>(u) -
                               (int64_t{1} << width));
  return static_cast<double>(u);
}

/// double -> bf16 with one round-to-nearest-even: double -> float with
/// round-to-odd (exact for a second rounding to a format >= 2 bits
/// narrower), then float -> bf16 RNE on the bits. Same result as APFloat,
/// much faster for large tensors.
static double roundToBF16(double value) {
  float f = static_cast<float>(value);
  if (std::isnan(value))
    return value;
  if (static_cast<double>(f) != value && !std::isinf(value)) {
    // Truncate toward zero, then make the last bit odd.
    if (std::fabs(static_cast<double>(f)) > std::fabs(value))
      f = std::nextafter(f, 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    bits |= 1u;
    std::memcpy(&f, &bits, sizeof(bits));
  }
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  bits &= 0xFFFF0000u;
  std::memcpy(&f, &bits, sizeof(bits));
  return static_cast<double>(f);
}

double RoundToType(double value, Type elementType) {
  if (!elementType)
    return std::numeric_limits<double>::quiet_NaN();
  if (auto it = dyn_cast<IntegerType>(elementType)) {
    if (it.getWidth() == 1) // x != 0, as torch's bool conversion (NaN -> 1)
      return value != 0.0 ? 1.0 : 0.0;
    return wrapInteger(value, it.getWidth());
  }
  if (elementType.isF64())
    return value;
  if (elementType.isF32())
    return static_cast<double>(static_cast<float>(value));
  if (elementType.isBF16())
    return roundToBF16(value);
  auto ft = dyn_cast<FloatType>(elementType);
  if (!ft || std::isnan(value))
    return std::numeric_limits<double>::quiet_NaN();
  if (isa<Float8E4M3FNType, Float8E5M2Type>(ft)) {
    // Saturate to the largest finite value, as the GPU's conversion does
    // (cvt.rn.satfinite; e4m3fn has no infinities); NaN stays NaN.
    double largest =
        llvm::APFloat::getLargest(ft.getFloatSemantics()).convertToDouble();
    value = std::fmin(std::fmax(value, -largest), largest);
  }
  llvm::APFloat f(value);
  bool lostInfo = false;
  f.convert(ft.getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven,
            &lostInfo);
  f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
            &lostInfo);
  return f.convertToDouble();
}

HostTensor RandomTensor(Type elementType, llvm::ArrayRef<int64_t> shape,
                        std::mt19937_64 &rng, double stddev) {
  HostTensor t;
  t.elementType = elementType;
  t.shape.assign(shape.begin(), shape.end());
  int64_t n = t.numElements();
  t.data.resize(n);
  if (auto it = dyn_cast<IntegerType>(elementType)) {
    std::uniform_int_distribution<int> dist(it.getWidth() == 1 ? 0 : -4,
                                            it.getWidth() == 1 ? 1 : 4);
    for (double &v : t.data)
      v = dist(rng);
    return t;
  }
  // Large tensors: fixed-size chunks, each from its own generator seeded
  // from `rng`, filled in parallel (deterministic for a given rng state).
  constexpr int64_t kChunk = int64_t(1) << 20;
  int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<uint64_t> seeds(chunks);
  for (uint64_t &s : seeds)
    s = rng();
  llvm::parallelFor(0, chunks, [&](size_t c) {
    std::mt19937_64 local(seeds[c]);
    std::normal_distribution<double> dist(0.0, stddev);
    int64_t end = std::min<int64_t>(n, (int64_t(c) + 1) * kChunk);
    for (int64_t i = int64_t(c) * kChunk; i < end; ++i)
      t.data[i] = RoundToType(dist(local), elementType);
  });
  return t;
}

double RelativeError(const HostTensor &got, const HostTensor &ref) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (got.shape != ref.shape || got.data.size() != ref.data.size())
    return kInf;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.data.size(); ++i) {
    double r = ref.data[i], g = got.data[i];
    if (!std::isfinite(r))
      continue;
    if (!std::isfinite(g))
      return kInf;
    num += (g - r) * (g - r);
    den += r * r;
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

bool SameNonFinitePositions(const HostTensor &got, const HostTensor &ref) {
  if (got.shape != ref.shape || got.data.size() != ref.data.size())
    return false;
  for (size_t i = 0; i < ref.data.size(); ++i) {
    double r = ref.data[i], g = got.data[i];
    if (std::isnan(r) != std::isnan(g))
      return false;
    if (std::isinf(r) != std::isinf(g) || (std::isinf(r) && r != g))
      return false;
  }
  return true;
}

} // namespace llmc::reference
