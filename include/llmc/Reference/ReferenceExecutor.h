//===- ReferenceExecutor.h - CPU reference executor for llm IR --*- C++ -*-===//
//
// Evaluates a `func.func` of `llm` ops (plus `arith.constant`, `llm.constant`
// and `func.return`) on host buffers. It is the numerical ground truth the
// compiled pipeline is checked against: simple loops, float64 math inside
// every op, and every op's result rounded to its element type exactly as the
// GPU stores it (round-to-nearest-even for f16/bf16/fp8, f8E4M3FN saturating
// to ±448, integers wrapping to their width).
//
// Shapes come from the concrete inputs: every op computes its result shape at
// evaluation time (a reshape with one dynamic dimension infers it) and checks
// it against the op's result type.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_REFERENCE_REFERENCEEXECUTOR_H
#define LLMC_REFERENCE_REFERENCEEXECUTOR_H

#include "absl/status/statusor.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Types.h"
#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace llmc::reference {

/// A dense row-major host tensor. Values are held as double but are always
/// exactly representable in `elementType` (f32, f16, bf16, f8E4M3FN, f8E5M2,
/// i1, i8, i32, i64; i64 values beyond 2^53 are not representable here).
struct HostTensor {
  mlir::Type elementType;
  std::vector<int64_t> shape;
  std::vector<double> data;

  /// Product of `shape` (1 for a rank-0 tensor; INT64_MAX when it
  /// overflows int64).
  int64_t numElements() const;
  /// "tensor<2x3xbf16>"-style description for messages.
  std::string typeString() const;
};

/// Rounds `value` to `elementType` as the GPU stores it: RNE for floats
/// (f8E4M3FN saturates finite values and ±inf to ±448, NaN stays NaN),
/// truncation toward zero and wrap-around for integers, `x != 0` for i1.
/// A type that is neither a float nor an integer (index, complex, none)
/// gives NaN; the executor rejects such types before it rounds.
double RoundToType(double value, mlir::Type elementType);

/// The default of EvaluateOptions::max_host_bytes: 8 GiB.
constexpr int64_t kDefaultMaxHostBytes = int64_t(8) << 30;

/// The default of EvaluateOptions::max_multiply_adds: 1.6e10, tens of
/// seconds of float64 loops on one core.
constexpr double kDefaultMaxMultiplyAdds = 1.6e10;

/// The multiply-adds of one llm.matmul (batch x M x N x K) or llm.attention
/// (2 x B x Hq x Sq x Skv x D: scores and the weighted sum) from its static
/// types; 0 for any other op, -1 when a dimension it needs is dynamic. The
/// measure of EvaluateOptions::max_multiply_adds (the executor counts the
/// same products from the shapes it runs) and of llmc-run's plain --check.
double MultiplyAdds(mlir::Operation *op);

struct EvaluateOptions {
  /// The most bytes of tensor data the executor holds at once (8 per
  /// element: values are float64), over all ranks: its copies of the
  /// inputs, the values still to be used, the results, and the buffers of
  /// the op being evaluated. Every allocation is checked against it first;
  /// going over is a ResourceExhaustedError naming the op, the tensor, its
  /// size and the budget. Values are released after their last use.
  int64_t max_host_bytes = kDefaultMaxHostBytes;
  /// The most multiply-adds the executor spends in matmuls and attention
  /// over the whole evaluation (all ranks; see MultiplyAdds): each op is
  /// checked before its loops run, and going over is a ResourceExhaustedError
  /// naming the op, its work and what is left. Every other op's work is
  /// proportional to the memory it touches, which max_host_bytes bounds.
  double max_multiply_adds = kDefaultMaxMultiplyAdds;
};

/// Evaluates `fn` on `inputs` (one per argument, matching its element type,
/// rank and static dimensions; at most 2^40 elements each). Errors name the
/// op (or argument) and say what was expected and what was found; the
/// edge-case rules of the verifiers (no reduction over an empty dimension,
/// K >= 1, attention head dims 1..1024) hold for dynamic shapes too.
/// Collectives with group_size 1 are the identity; larger groups need
/// `EvaluateRanks`.
absl::StatusOr<std::vector<HostTensor>>
Evaluate(mlir::func::FuncOp fn, llvm::ArrayRef<HostTensor> inputs,
         const EvaluateOptions &options = {});

/// Evaluates one function per simulated rank in lockstep: `fns[r]` runs on
/// `inputs[r]`. Collectives (all_reduce, all_gather, reduce_scatter) must be
/// reached in the same order by every rank and have group_size equal to the
/// number of ranks; rank r contributes its input at position r. The ranks
/// share one host memory budget.
absl::StatusOr<std::vector<std::vector<HostTensor>>>
EvaluateRanks(llvm::ArrayRef<mlir::func::FuncOp> fns,
              llvm::ArrayRef<std::vector<HostTensor>> inputs,
              const EvaluateOptions &options = {});

/// A tensor of `shape` with N(0, stddev) values rounded to a float
/// `elementType`; integers are uniform in [-4, 4] (i1: 0 or 1).
HostTensor RandomTensor(mlir::Type elementType, llvm::ArrayRef<int64_t> shape,
                        std::mt19937_64 &rng, double stddev = 1.0);

/// The storage bytes of `t` (values already representable in its element
/// type): little-endian, row-major, in the runtime's layout of the dtype
/// (llmc::toRuntimeDType; i1 one byte). The element type must be one the
/// runtime stores.
std::string toStorage(const HostTensor &t);
/// The host tensor of `elementType` and `shape` whose storage is `bytes`
/// (exactly numElements * the dtype's size bytes).
HostTensor fromStorage(std::string_view bytes, mlir::Type elementType,
                       std::vector<int64_t> shape);

/// ‖got − ref‖₂ / ‖ref‖₂ over the positions where `ref` is finite; +inf when
/// the shapes differ or `got` has a NaN/inf where `ref` is finite. When ‖ref‖₂
/// is 0 the absolute error ‖got − ref‖₂ is returned.
double RelativeError(const HostTensor &got, const HostTensor &ref);

/// True when both tensors have the same shape and NaN, +inf and -inf appear
/// at exactly the same positions.
bool SameNonFinitePositions(const HostTensor &got, const HostTensor &ref);

} // namespace llmc::reference

#endif // LLMC_REFERENCE_REFERENCEEXECUTOR_H
