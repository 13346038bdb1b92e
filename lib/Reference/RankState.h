//===- RankState.h - the reference executor's state ------------*- C++ -*-===//
//
// Internal to lib/Reference: one simulated rank's evaluation state
// (RankState), the host-memory and work budget, and the helpers the
// executor's files share:
//   ReferenceExecutor.cpp  evaluation loop, inputs, fusion regions,
//                          collectives across ranks, the public functions
//   RefCompute.cpp         the per-op dispatch
//   RefElementwise.cpp     unary and binary ops
//   RefShapes.cpp          views, pad, concat, gather
//   RefReductions.cpp      reductions, softmax, norms
//   RefLinalg.cpp          RoPE, matmul, attention, weight quantization,
//                          KV-cache append
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_LIB_REFERENCE_RANKSTATE_H
#define LLMC_LIB_REFERENCE_RANKSTATE_H

#include "llmc/Support/StatusMacros.h"
#include "llmc/Reference/ReferenceExecutor.h"

#include "LLM/IR/LLMOps.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>


namespace llmc::reference::detail {

using namespace mlir;
namespace llm = llmc::llm;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

//===----------------------------------------------------------------------===//
// Small helpers
//===----------------------------------------------------------------------===//

using Shape = std::vector<int64_t>;

/// Product of `shape`; callers pass shapes already within the budget or
/// the element limit (see checkedProduct otherwise).
inline int64_t product(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Product of `shape`, nullopt when it overflows int64 (0 when a
/// dimension is 0).
inline std::optional<int64_t> checkedProduct(llvm::ArrayRef<int64_t> shape) {
  if (llvm::is_contained(shape, 0))
    return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || llvm::MulOverflow(n, d, n))
      return std::nullopt;
  return n;
}

inline Shape stridesOf(llvm::ArrayRef<int64_t> shape) {
  Shape s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

inline std::string shapeStr(llvm::ArrayRef<int64_t> shape) {
  std::vector<std::string> parts;
  for (int64_t d : shape)
    parts.push_back(ShapedType::isDynamic(d) ? "?" : std::to_string(d));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

inline std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

inline std::string locStr(Location loc) {
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return s;
}

/// "'llm.matmul' at loc(...)": how messages name an op.
inline std::string opName(Operation *op) {
  return absl::StrCat("'", op->getName().getStringRef().str(), "' at ",
                      locStr(op->getLoc()));
}

inline absl::Status opError(Operation *op, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(opName(op), ": ", msg));
}

/// "tensor<2x3xbf16>" for messages.
inline std::string tensorStr(Type elementType, llvm::ArrayRef<int64_t> shape) {
  HostTensor t;
  t.elementType = elementType;
  t.shape.assign(shape.begin(), shape.end());
  return t.typeString();
}

inline constexpr const char *kSupportedTypes =
    "f32, f16, bf16, f8E4M3FN, f8E5M2, i1, i8, i32 or i64";

/// The host memory of one evaluation (all its ranks): bytes held in values
/// and results, plus the buffers reserved by the op being evaluated.
class HostBudget {
public:
  HostBudget(int64_t limit, double maxMultiplyAdds)
      : limit_(limit), maxWork_(maxMultiplyAdds) {}

  /// Counts the `multiplyAdds` of the op named `where` (see MultiplyAdds),
  /// or fails before its loops run when they exceed what is left.
  absl::Status spend(absl::string_view where, double multiplyAdds) {
    if (!(multiplyAdds <= maxWork_ - work_))
      return absl::ResourceExhaustedError(absl::StrCat(
          where, ": needs ", absl::StrFormat("%.3g", multiplyAdds),
          " multiply-adds but ", absl::StrFormat("%.3g", std::max(maxWork_ - work_, 0.0)),
          " are left of the reference executor's work budget of ",
          absl::StrFormat("%.3g", maxWork_),
          "; raise it with EvaluateOptions::max_multiply_adds "
          "(llmc-run --ref-max-gmacs=G, in units of 1e9)"));
    work_ += multiplyAdds;
    return absl::OkStatus();
  }

  /// Counts `elements` doubles for `what` (e.g. "the result
  /// tensor<4x8xf32>") of the op named `where`, or fails before anything
  /// is allocated when they do not fit.
  absl::Status reserve(absl::string_view where, absl::string_view what,
                       std::optional<int64_t> elements) {
    int64_t bytes = 0;
    if (!elements || *elements < 0 ||
        llvm::MulOverflow(*elements, int64_t(sizeof(double)), bytes) ||
        bytes > limit_ - used())
      return absl::ResourceExhaustedError(absl::StrCat(
          where, ": ", what, " needs ",
          bytes > 0 ? std::to_string(bytes) : std::string("over 2^63"),
          " bytes of host memory (float64 values) but ",
          std::max<int64_t>(limit_ - used(), 0),
          " bytes are left of the reference executor's budget of ", limit_,
          " bytes (", used(),
          " in use); raise it with EvaluateOptions::max_host_bytes "
          "(llmc-run --ref-max-memory=GIB)"));
    inFlight_ += bytes;
    peak_ = std::max(peak_, used());
    return absl::OkStatus();
  }
  /// A tensor enters or leaves the held values (results stay held).
  void hold(const HostTensor &t) { held_ += bytesOf(t); }
  void drop(const HostTensor &t) { held_ -= bytesOf(t); }
  /// The op's buffers are freed or held as values by now.
  void endOp() { inFlight_ = 0; }
  int64_t peak() const { return peak_; }

private:
  static int64_t bytesOf(const HostTensor &t) {
    return static_cast<int64_t>(t.data.size() * sizeof(double));
  }
  int64_t used() const { return held_ + inFlight_; }

  int64_t limit_;
  int64_t held_ = 0, inFlight_ = 0, peak_ = 0;
  double maxWork_, work_ = 0;
};

inline Type resultElementType(Operation *op, unsigned i = 0) {
  return cast<RankedTensorType>(op->getResult(i).getType()).getElementType();
}

inline void roundInPlace(HostTensor &t) {
  Type et = t.elementType;
  if (et.isF64())
    return;
  if (et.isF32()) {
    for (double &v : t.data)
      v = static_cast<double>(static_cast<float>(v));
    return;
  }
  for (double &v : t.data)
    v = RoundToType(v, et);
}

/// Visits every multi-index of `shape` in row-major order.
template <typename Fn> void forEachIndex(llvm::ArrayRef<int64_t> shape, Fn fn) {
  int64_t n = product(shape);
  Shape idx(shape.size(), 0);
  for (int64_t lin = 0; lin < n; ++lin) {
    fn(lin, llvm::ArrayRef<int64_t>(idx));
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
}

/// Checks that `from` broadcasts (right-aligned) to `to`.
inline absl::Status checkBroadcastable(Operation *op, absl::string_view what,
                                llvm::ArrayRef<int64_t> from,
                                llvm::ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return opError(op, absl::StrCat(what, " of shape ", shapeStr(from),
                                    " does not broadcast to ", shapeStr(to)));
  size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i])
      return opError(op, absl::StrCat(what, " of shape ", shapeStr(from),
                                      " does not broadcast to ", shapeStr(to),
                                      ": dimension ", i, " is ", from[i],
                                      ", expected 1 or ", to[lead + i]));
  return absl::OkStatus();
}

/// Materializes `t` broadcast to `to` (shapes already checked) into `out`,
/// which has product(to) elements.
inline void broadcastInto(const HostTensor &t, llvm::ArrayRef<int64_t> to,
                   std::vector<double> &out) {
  Shape fromStrides = stridesOf(t.shape);
  size_t lead = to.size() - t.shape.size();
  Shape s(to.size(), 0);
  for (size_t i = 0; i < t.shape.size(); ++i)
    s[lead + i] = t.shape[i] == 1 ? 0 : fromStrides[i];
  forEachIndex(to, [&](int64_t lin, llvm::ArrayRef<int64_t> idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      off += idx[d] * s[d];
    out[lin] = t.data[off];
  });
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

inline double nanMax(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return kNaN;
  return std::max(a, b);
}
inline double nanMin(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return kNaN;
  return std::min(a, b);
}

inline int64_t scalarInt(const HostTensor &t) {
  return static_cast<int64_t>(t.data.empty() ? 0 : t.data[0]);
}

//===----------------------------------------------------------------------===//
// The per-rank interpreter
//===----------------------------------------------------------------------===//

class RankState {
public:
  RankState(func::FuncOp fn, HostBudget *budget);

  absl::Status bindInputs(llvm::ArrayRef<HostTensor> inputs);
  /// Runs ops until a collective with group_size > 1 (returned) or the
  /// terminator (returns nullptr; results in `results()`).
  absl::StatusOr<Operation *> runUntilCollective(bool allowMultiRank);
  /// Stores a collective's result computed by the rank simulation (its
  /// buffer reserved by the caller) and releases the operands it was the
  /// last user of.
  void setResult(Operation *op, HostTensor t) {
    store(op->getResult(0), Entry{std::move(t), false});
    releaseDeadOperands(op);
  }
  const HostTensor &operand(Operation *op, unsigned i) {
    return values_[op->getOperand(i)].tensor;
  }
  std::vector<HostTensor> &results() { return results_; }

private:
  struct Entry {
    HostTensor tensor;
    /// An llm.broadcast whose result has a dynamic dimension the input does
    /// not determine; `tensor` is its input until a user fixes the shape.
    bool pendingBroadcast = false;
  };

  absl::Status evalOp(Operation *op);
  absl::Status evalOpImpl(Operation *op);
  absl::StatusOr<HostTensor> compute(Operation *op);
  /// Whether `t` fits `result`'s type (static dims equal, data sized).
  absl::Status checkResult(Operation *op, Value result, const HostTensor &t);
  absl::Status checkResult(Operation *op, const HostTensor &t) {
    return checkResult(op, op->getResult(0), t);
  }
  absl::Status resolvePendingOperands(Operation *op);
  const HostTensor &in(Operation *op, unsigned i) {
    return values_[op->getOperand(i)].tensor;
  }
  const HostTensor &in(Value v) { return values_[v].tensor; }

  // Memory: every buffer is reserved before it is allocated.
  absl::Status reserve(Operation *op, absl::string_view what,
                       std::optional<int64_t> elements) {
    return budget_->reserve(opName(op), what, elements);
  }
  /// A zero-filled result tensor of `shape`.
  absl::StatusOr<HostTensor> newTensor(Operation *op, Type elementType,
                                       Shape shape,
                                       absl::string_view what = "the result");
  /// A zero-filled scratch buffer of `n` doubles.
  absl::StatusOr<std::vector<double>> newBuffer(Operation *op,
                                                absl::string_view what,
                                                int64_t n);
  /// `t` copied.
  absl::StatusOr<HostTensor> copyOf(Operation *op, const HostTensor &t,
                                    absl::string_view what);
  /// Operand `i` of `op`: moved out when `op` is its only remaining user
  /// (no copy, nothing to reserve), else copied.
  absl::StatusOr<HostTensor> takeOrCopy(Operation *op, unsigned i);
  void store(Value v, Entry e);
  void release(Value v);
  bool isPending(Value v) {
    auto it = values_.find(v);
    return it != values_.end() && it->second.pendingBroadcast;
  }
  /// Releases the operands whose last user is `op`, and `op`'s unused
  /// results.
  void releaseDeadOperands(Operation *op);
  absl::StatusOr<HostTensor> constantFromAttr(Operation *op, Attribute attr);

  // Op groups.
  absl::StatusOr<HostTensor> unary(Operation *op, double (*fn)(double));
  absl::StatusOr<HostTensor> binary(Operation *op);
  absl::StatusOr<HostTensor> broadcast(llm::BroadcastOp op,
                                       bool *pending);
  absl::StatusOr<HostTensor> reshape(llm::ReshapeOp op);
  absl::StatusOr<HostTensor> transpose(llm::TransposeOp op);
  absl::StatusOr<HostTensor> slice(llm::SliceOp op);
  absl::StatusOr<HostTensor> pad(llm::PadOp op);
  absl::StatusOr<HostTensor> concat(llm::ConcatOp op);
  absl::StatusOr<HostTensor> gather(llm::GatherOp op);
  absl::StatusOr<HostTensor> indexPut(llm::IndexPutOp op);
  absl::StatusOr<HostTensor> argmax(llm::ArgMaxOp op);
  absl::StatusOr<HostTensor> reduce(Operation *op, llvm::ArrayRef<int64_t> dims,
                                    bool keepdim, int kind);
  absl::StatusOr<HostTensor> softmax(llm::SoftmaxOp op);
  absl::StatusOr<HostTensor> rmsNorm(llm::RMSNormOp op);
  absl::StatusOr<HostTensor> layerNorm(llm::LayerNormOp op);
  absl::StatusOr<HostTensor> rope(llm::RoPEOp op);
  absl::StatusOr<HostTensor> matmul(llm::MatmulOp op);
  absl::StatusOr<HostTensor> cumsum(llm::CumsumOp op);
  absl::StatusOr<HostTensor> dropoutMask(llm::DropoutMaskOp op);
  absl::StatusOr<HostTensor> attention(llm::AttentionOp op);
  absl::StatusOr<HostTensor> pagedAttention(llm::PagedAttentionOp op);
  absl::StatusOr<HostTensor> pagedKVAppend(llm::PagedKVAppendOp op);
  absl::StatusOr<HostTensor> varlenAttention(llm::VarlenAttentionOp op);
  /// The common part of the packed attentions: spends `work`, makes the
  /// result (the query's type and shape) and a row of `maxLen` scores, and
  /// lets `rows` fill it with the scale (`scale`, else 1/sqrt(D)).
  absl::StatusOr<HostTensor> packedAttention(
      Operation *op, const HostTensor &q, std::optional<llvm::APFloat> scale, double work,
      int64_t maxLen,
      llvm::function_ref<void(HostTensor &, std::vector<double> &, double)> rows);
  absl::StatusOr<HostTensor> attentionLogSumExp(llm::AttentionLogSumExpOp op);
  absl::Status attentionBackward(llm::AttentionBackwardOp op);
  absl::StatusOr<HostTensor> kvCacheAppend(llm::KVCacheAppendOp op);
  absl::Status quantizeWeight(llm::QuantizeWeightOp op);
  absl::StatusOr<HostTensor> dequantizeWeight(llm::DequantizeWeightOp op);

  func::FuncOp fn_;
  HostBudget *budget_;
  llvm::DenseMap<Value, Entry> values_;
  /// The op (in the value's own block) that uses each value last.
  llvm::DenseMap<Value, Operation *> lastUser_;
  Block::iterator it_;
  std::vector<HostTensor> results_;
};

} // namespace llmc::reference::detail

#endif // LLMC_LIB_REFERENCE_RANKSTATE_H
