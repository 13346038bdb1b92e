//===- ReferenceExecutor.cpp - CPU reference executor for llm IR ---------===//
//
// A straightforward interpreter: ops run in block order on dense row-major
// double buffers; math inside an op is float64 and every result is rounded
// once to its element type (RoundToType). Shapes are computed per op from the
// concrete operands and checked against the op's result type.
//
// User-input errors (inputs that do not match the function, indices out of
// range, a KV cache overflow) are InvalidArgumentError / OutOfRangeError
// naming the op; an op the executor does not know is UnimplementedError.
//
// Host memory is bounded (EvaluateOptions::max_host_bytes): every buffer is
// reserved against the budget before it is allocated (ResourceExhausted
// naming the op and the tensor otherwise), and a value is released after
// its last use. The build has no exceptions, so an allocation that failed
// would abort the process: none is attempted that the budget did not allow.
//
//===----------------------------------------------------------------------===//

#include "llmc/Reference/ReferenceExecutor.h"

#include "LLM/IR/LLMOps.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

using namespace mlir;
namespace llm = llmc::llm;

namespace llmc::reference {
namespace {

/// `lhs = *expr;` when `expr` (a StatusOr) is ok, else returns its status.
#define REF_ASSIGN_OR_RETURN(lhs, expr)                                        \
  REF_ASSIGN_OR_RETURN_IMPL(REF_CONCAT(refStatusOr, __LINE__), lhs, expr)
#define REF_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                              \
  auto tmp = (expr);                                                           \
  if (!tmp.ok())                                                               \
    return tmp.status();                                                       \
  lhs = std::move(*tmp)
#define REF_CONCAT(a, b) REF_CONCAT_IMPL(a, b)
#define REF_CONCAT_IMPL(a, b) a##b

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

//===----------------------------------------------------------------------===//
// Small helpers
//===----------------------------------------------------------------------===//

using Shape = std::vector<int64_t>;

/// Product of `shape`; callers pass shapes already within the budget or
/// the element limit (see checkedProduct otherwise).
int64_t product(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Product of `shape`, nullopt when it overflows int64 (0 when a
/// dimension is 0).
std::optional<int64_t> checkedProduct(llvm::ArrayRef<int64_t> shape) {
  if (llvm::is_contained(shape, 0))
    return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || llvm::MulOverflow(n, d, n))
      return std::nullopt;
  return n;
}

Shape stridesOf(llvm::ArrayRef<int64_t> shape) {
  Shape s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

std::string shapeStr(llvm::ArrayRef<int64_t> shape) {
  std::vector<std::string> parts;
  for (int64_t d : shape)
    parts.push_back(ShapedType::isDynamic(d) ? "?" : std::to_string(d));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

std::string locStr(Location loc) {
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return s;
}

/// "'llm.matmul' at loc(...)": how messages name an op.
std::string opName(Operation *op) {
  return absl::StrCat("'", op->getName().getStringRef().str(), "' at ",
                      locStr(op->getLoc()));
}

absl::Status opError(Operation *op, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(opName(op), ": ", msg));
}

/// "tensor<2x3xbf16>" for messages.
std::string tensorStr(Type elementType, llvm::ArrayRef<int64_t> shape) {
  HostTensor t;
  t.elementType = elementType;
  t.shape.assign(shape.begin(), shape.end());
  return t.typeString();
}

constexpr const char *kSupportedTypes =
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

Type resultElementType(Operation *op, unsigned i = 0) {
  return cast<RankedTensorType>(op->getResult(i).getType()).getElementType();
}

void roundInPlace(HostTensor &t) {
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
absl::Status checkBroadcastable(Operation *op, absl::string_view what,
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
void broadcastInto(const HostTensor &t, llvm::ArrayRef<int64_t> to,
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

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double nanMax(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return kNaN;
  return std::max(a, b);
}
double nanMin(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return kNaN;
  return std::min(a, b);
}

int64_t scalarInt(const HostTensor &t) {
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
  absl::Status evalFusion(llm::FusionOp op);
  absl::StatusOr<HostTensor> compute(Operation *op);
  absl::Status checkResult(Operation *op, const HostTensor &t);
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
  absl::StatusOr<HostTensor> reduce(Operation *op, llvm::ArrayRef<int64_t> dims,
                                    bool keepdim, int kind);
  absl::StatusOr<HostTensor> softmax(llm::SoftmaxOp op);
  absl::StatusOr<HostTensor> rmsNorm(llm::RMSNormOp op);
  absl::StatusOr<HostTensor> layerNorm(llm::LayerNormOp op);
  absl::StatusOr<HostTensor> rope(llm::RoPEOp op);
  absl::StatusOr<HostTensor> matmul(llm::MatmulOp op);
  absl::StatusOr<HostTensor> attention(llm::AttentionOp op);
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

RankState::RankState(func::FuncOp fn, HostBudget *budget)
    : fn_(fn), budget_(budget) {
  fn.walk([&](Operation *user) {
    for (Value v : user->getOperands()) {
      Block *block = v.getParentBlock();
      Operation *at = block ? block->findAncestorOpInBlock(*user) : nullptr;
      if (!at)
        continue;
      Operation *&last = lastUser_[v];
      if (!last || last->isBeforeInBlock(at))
        last = at;
    }
  });
}

absl::StatusOr<HostTensor> RankState::newTensor(Operation *op, Type elementType,
                                                Shape shape,
                                                absl::string_view what) {
  if (absl::Status s =
          reserve(op, absl::StrCat(what, " ", tensorStr(elementType, shape)),
                  checkedProduct(shape));
      !s.ok())
    return s;
  HostTensor t;
  t.elementType = elementType;
  t.shape = std::move(shape);
  t.data.assign(product(t.shape), 0.0);
  return t;
}

absl::StatusOr<std::vector<double>>
RankState::newBuffer(Operation *op, absl::string_view what, int64_t n) {
  if (absl::Status s = reserve(op, what, n); !s.ok())
    return s;
  return std::vector<double>(n, 0.0);
}

absl::StatusOr<HostTensor> RankState::copyOf(Operation *op, const HostTensor &t,
                                             absl::string_view what) {
  if (absl::Status s =
          reserve(op, absl::StrCat(what, " ", t.typeString()),
                  static_cast<int64_t>(t.data.size()));
      !s.ok())
    return s;
  return t;
}

absl::StatusOr<HostTensor> RankState::takeOrCopy(Operation *op, unsigned i) {
  Value v = op->getOperand(i);
  bool onlyUse = lastUser_.lookup(v) == op &&
                 llvm::count(op->getOperands(), v) == 1;
  auto it = values_.find(v);
  if (!onlyUse || it == values_.end() || it->second.pendingBroadcast)
    return copyOf(op, in(v), "a copy of its operand");
  HostTensor t = std::move(it->second.tensor);
  budget_->drop(t);
  values_.erase(it);
  return t;
}

void RankState::store(Value v, Entry e) {
  auto it = values_.find(v);
  if (it != values_.end())
    budget_->drop(it->second.tensor);
  budget_->hold(e.tensor);
  values_[v] = std::move(e);
}

void RankState::release(Value v) {
  auto it = values_.find(v);
  if (it == values_.end())
    return;
  budget_->drop(it->second.tensor);
  values_.erase(it);
}

void RankState::releaseDeadOperands(Operation *op) {
  for (Value v : op->getOperands())
    if (lastUser_.lookup(v) == op)
      release(v);
  for (Value r : op->getResults())
    if (r.use_empty())
      release(r);
}

absl::StatusOr<HostTensor> RankState::constantFromAttr(Operation *op,
                                                       Attribute attr) {
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense)
    return absl::UnimplementedError(absl::StrCat(
        opName(op), ": only dense elements attributes are supported by the "
                    "reference executor"));
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!type || type != dense.getType())
    return opError(op, absl::StrCat("result type ",
                                    typeStr(op->getResult(0).getType()),
                                    " is not a ranked tensor of the value's "
                                    "type; the reference executor evaluates "
                                    "tensors only"));
  if (!llm::isSupportedElementType(type.getElementType()))
    return opError(op, absl::StrCat("constant of element type ",
                                    typeStr(type.getElementType()),
                                    ", which the reference executor does not "
                                    "support (expected ",
                                    kSupportedTypes, ")"));
  absl::StatusOr<HostTensor> t = newTensor(
      op, type.getElementType(),
      Shape(type.getShape().begin(), type.getShape().end()), "the constant");
  if (!t.ok())
    return t.status();
  if (isa<FloatType>(type.getElementType())) {
    int64_t i = 0;
    for (const APFloat &f : dense.getValues<APFloat>()) {
      bool lost = false;
      APFloat d = f;
      d.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
      t->data[i++] = d.convertToDouble();
    }
  } else {
    auto it = cast<IntegerType>(type.getElementType());
    int64_t i = 0;
    for (const APInt &v : dense.getValues<APInt>())
      t->data[i++] = it.getWidth() == 1 ? static_cast<double>(v.getZExtValue())
                                        : static_cast<double>(v.getSExtValue());
  }
  return t;
}

absl::Status RankState::bindInputs(llvm::ArrayRef<HostTensor> inputs) {
  std::string fnName = absl::StrCat("@", fn_.getSymName().str());
  if (fn_.getBody().empty())
    return absl::InvalidArgumentError(
        absl::StrCat(fnName, " has no body to evaluate"));
  auto argTypes = fn_.getArgumentTypes();
  if (inputs.size() != argTypes.size())
    return absl::InvalidArgumentError(
        absl::StrCat(fnName, " expects ", argTypes.size(), " inputs, found ",
                     inputs.size()));
  // Element types first: RoundToType below only knows the llm ones.
  auto checkType = [&](absl::string_view what, Type type) -> absl::Status {
    auto rt = dyn_cast<ShapedType>(type);
    if (rt && !llm::isSupportedElementType(rt.getElementType()))
      return absl::InvalidArgumentError(absl::StrCat(
          fnName, " ", what, " has element type ",
          typeStr(rt.getElementType()),
          ", which the reference executor does not support (expected ",
          kSupportedTypes, ")"));
    return absl::OkStatus();
  };
  for (auto [i, type] : llvm::enumerate(argTypes))
    if (absl::Status s = checkType(absl::StrCat("argument #", i), type);
        !s.ok())
      return s;
  for (auto [i, type] : llvm::enumerate(fn_.getResultTypes()))
    if (absl::Status s = checkType(absl::StrCat("result #", i), type); !s.ok())
      return s;
  Block &body = fn_.getBody().front();
  for (auto [i, type] : llvm::enumerate(argTypes)) {
    const HostTensor &t = inputs[i];
    std::string what = absl::StrCat(fnName, " argument #", i);
    auto rt = dyn_cast<RankedTensorType>(type);
    if (!rt)
      return absl::InvalidArgumentError(absl::StrCat(
          what, " has type ", typeStr(type),
          "; the reference executor takes ranked tensors only"));
    if (t.elementType != rt.getElementType())
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": expected element type ", typeStr(rt.getElementType()),
          ", found ",
          t.elementType ? typeStr(t.elementType) : std::string("<null>")));
    if (static_cast<int64_t>(t.shape.size()) != rt.getRank())
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": expected shape ", shapeStr(rt.getShape()), " (rank ",
          rt.getRank(), "), found ", shapeStr(t.shape)));
    for (int64_t d = 0; d < rt.getRank(); ++d) {
      int64_t want = rt.getDimSize(d);
      if (t.shape[d] < 0 || (!ShapedType::isDynamic(want) && want != t.shape[d]))
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": expected shape ", shapeStr(rt.getShape()),
                         ", found ", shapeStr(t.shape)));
    }
    // The element limit of the llm dialect, for the dynamic dimensions
    // (before any count is computed from them).
    std::optional<int64_t> extent = llm::checkedExtent(t.shape);
    if (!extent || *extent > llm::kMaxTensorElements)
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": shape ", shapeStr(t.shape), " has ",
          extent ? std::to_string(*extent) : std::string("over 2^63"),
          llvm::is_contained(t.shape, 0) ? " elements in its non-empty dimensions"
                                         : " elements",
          ", more than the supported 2^40 (", llm::kMaxTensorElements, ")"));
    if (static_cast<int64_t>(t.data.size()) != t.numElements())
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape ", shapeStr(t.shape), " has ",
                       t.numElements(), " elements but the data holds ",
                       t.data.size()));
    for (size_t k = 0; k < t.data.size(); ++k) {
      double v = t.data[k], r = RoundToType(v, t.elementType);
      if (!(r == v || (std::isnan(r) && std::isnan(v))))
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": element ", k, " is ", v, ", not representable in ",
            typeStr(t.elementType), " (nearest ", r, ")"));
    }
    BlockArgument arg = body.getArgument(i);
    if (arg.use_empty())
      continue;
    if (absl::Status s =
            budget_->reserve(what, absl::StrCat("the copy of ", t.typeString()),
                             static_cast<int64_t>(t.data.size()));
        !s.ok())
      return s;
    store(arg, Entry{t, false});
    budget_->endOp();
  }
  it_ = body.begin();
  return absl::OkStatus();
}

absl::StatusOr<Operation *> RankState::runUntilCollective(bool allowMultiRank) {
  Block &body = fn_.getBody().front();
  for (; it_ != body.end(); ++it_) {
    Operation *op = &*it_;
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (absl::Status s = resolvePendingOperands(op); !s.ok())
        return s;
      results_.clear();
      // Results stay held (counted) until the caller takes them; a value
      // returned twice is copied.
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        bool again = llvm::is_contained(ret.getOperands().drop_front(i + 1), v);
        auto it = values_.find(v);
        if (!again && it != values_.end() && lastUser_.lookup(v) == op) {
          results_.push_back(std::move(it->second.tensor));
          values_.erase(it);
          continue;
        }
        absl::StatusOr<HostTensor> t = copyOf(op, in(v), "a copy of result");
        if (!t.ok())
          return t.status();
        budget_->hold(*t);
        results_.push_back(std::move(*t));
      }
      budget_->endOp();
      ++it_;
      return nullptr;
    }
    int64_t group = 1;
    if (auto ar = dyn_cast<llm::AllReduceOp>(op))
      group = ar.getGroupSize();
    else if (auto ag = dyn_cast<llm::AllGatherOp>(op))
      group = ag.getGroupSize();
    else if (auto rs = dyn_cast<llm::ReduceScatterOp>(op))
      group = rs.getGroupSize();
    if (group > 1) {
      if (!allowMultiRank)
        return opError(op, absl::StrCat(
                               "group_size ", group, " needs ", group,
                               " ranks; evaluate it with EvaluateRanks"));
      if (absl::Status s = resolvePendingOperands(op); !s.ok())
        return s;
      budget_->endOp();
      Operation *stopped = op;
      ++it_;
      return stopped;
    }
    if (absl::Status s = evalOp(op); !s.ok())
      return s;
  }
  return absl::InternalError(absl::StrCat(
      "@", fn_.getSymName().str(), " ended without a func.return"));
}

absl::Status RankState::checkResult(Operation *op, const HostTensor &t) {
  auto rt = cast<RankedTensorType>(op->getResult(0).getType());
  bool ok = static_cast<int64_t>(t.shape.size()) == rt.getRank();
  for (int64_t d = 0; ok && d < rt.getRank(); ++d)
    ok = ShapedType::isDynamic(rt.getDimSize(d)) || rt.getDimSize(d) == t.shape[d];
  if (!ok)
    return opError(op, absl::StrCat("computed result shape ", shapeStr(t.shape),
                                    " does not match the result type ",
                                    typeStr(rt)));
  if (static_cast<int64_t>(t.data.size()) != t.numElements())
    return absl::InternalError(absl::StrCat(
        "reference executor bug: '", op->getName().getStringRef().str(),
        "' produced ", t.data.size(), " values for shape ", shapeStr(t.shape)));
  return absl::OkStatus();
}

/// Gives pending broadcasts a shape from the op using them: the shape of
/// another (non-pending) operand of the same rank for elementwise ops.
absl::Status RankState::resolvePendingOperands(Operation *op) {
  for (Value v : op->getOperands()) {
    Entry &e = values_[v];
    if (!e.pendingBroadcast)
      continue;
    auto target = cast<RankedTensorType>(v.getType());
    const Shape *known = nullptr;
    if (op->hasTrait<OpTrait::Elementwise>()) {
      for (Value other : op->getOperands()) {
        Entry &o = values_[other];
        if (!o.pendingBroadcast &&
            static_cast<int64_t>(o.tensor.shape.size()) == target.getRank()) {
          known = &o.tensor.shape;
          break;
        }
      }
    }
    if (!known)
      return opError(
          v.getDefiningOp(),
          absl::StrCat("cannot infer the dynamic dimensions of the result ",
                       typeStr(target), " from the input ",
                       e.tensor.typeString(),
                       " or from its user '",
                       op->getName().getStringRef().str(), "'"));
    Shape to = *known;
    for (int64_t d = 0; d < target.getRank(); ++d)
      if (!ShapedType::isDynamic(target.getDimSize(d)))
        to[d] = target.getDimSize(d);
    if (absl::Status s = checkBroadcastable(v.getDefiningOp(), "input",
                                            e.tensor.shape, to);
        !s.ok())
      return s;
    absl::StatusOr<HostTensor> out =
        newTensor(v.getDefiningOp(), e.tensor.elementType, to);
    if (!out.ok())
      return out.status();
    broadcastInto(values_[v].tensor, to, out->data);
    store(v, Entry{std::move(*out), false});
  }
  return absl::OkStatus();
}

absl::Status RankState::evalOp(Operation *op) {
  absl::Status s = evalOpImpl(op);
  budget_->endOp();
  if (s.ok())
    releaseDeadOperands(op);
  return s;
}

absl::Status RankState::evalOpImpl(Operation *op) {
  if (auto f = dyn_cast<llm::FusionOp>(op))
    return evalFusion(f);
  if (auto q = dyn_cast<llm::QuantizeWeightOp>(op))
    return quantizeWeight(q);
  if (op->getNumResults() != 1)
    return absl::UnimplementedError(absl::StrCat(
        opName(op), ": the reference executor supports single-result ops "
                    "only"));
  if (auto b = dyn_cast<llm::BroadcastOp>(op)) {
    if (absl::Status s = resolvePendingOperands(op); !s.ok())
      return s;
    bool pending = false;
    absl::StatusOr<HostTensor> t = broadcast(b, &pending);
    if (!t.ok())
      return t.status();
    if (!pending)
      if (absl::Status s = checkResult(op, *t); !s.ok())
        return s;
    store(op->getResult(0), Entry{std::move(*t), pending});
    return absl::OkStatus();
  }
  if (absl::Status s = resolvePendingOperands(op); !s.ok())
    return s;
  absl::StatusOr<HostTensor> t = compute(op);
  if (!t.ok())
    return t.status();
  if (absl::Status s = checkResult(op, *t); !s.ok())
    return s;
  store(op->getResult(0), Entry{std::move(*t), false});
  return absl::OkStatus();
}

/// An llm.fusion is its region evaluated on its inputs (pending broadcasts
/// flow in unresolved and are resolved by their users inside).
absl::Status RankState::evalFusion(llm::FusionOp op) {
  Block &body = op.getBody().front();
  for (auto [i, arg, input] :
       llvm::enumerate(body.getArguments(), op.getInputs())) {
    if (arg.use_empty())
      continue;
    bool pending = isPending(input);
    absl::StatusOr<HostTensor> t = takeOrCopy(op, i);
    if (!t.ok())
      return t.status();
    store(arg, Entry{std::move(*t), pending});
  }
  budget_->endOp();
  for (Operation &inner : body.without_terminator())
    if (absl::Status s = evalOp(&inner); !s.ok())
      return s;
  Operation *yield = body.getTerminator();
  for (auto [i, result, v] :
       llvm::enumerate(op.getResults(), yield->getOperands())) {
    bool again =
        llvm::is_contained(yield->getOperands().drop_front(i + 1), v);
    auto it = values_.find(v);
    if (!again && it != values_.end() && lastUser_.lookup(v) == yield) {
      Entry e = std::move(it->second);
      budget_->drop(e.tensor);
      values_.erase(it);
      store(result, std::move(e));
      continue;
    }
    absl::StatusOr<HostTensor> t = copyOf(op, in(v), "a copy of result");
    if (!t.ok())
      return t.status();
    store(result, Entry{std::move(*t), isPending(v)});
  }
  releaseDeadOperands(yield);
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Op dispatch
//===----------------------------------------------------------------------===//

absl::StatusOr<HostTensor> RankState::compute(Operation *op) {
  using R = absl::StatusOr<HostTensor>;
  return llvm::TypeSwitch<Operation *, R>(op)
      .Case<llm::ConstantOp>(
          [&](auto c) { return constantFromAttr(op, c.getValue()); })
      .Case<arith::ConstantOp>(
          [&](auto c) { return constantFromAttr(op, c.getValue()); })
      .Case<llm::AddOp, llm::SubOp, llm::MulOp, llm::DivOp, llm::PowOp,
            llm::MaximumOp, llm::MinimumOp, llm::CompareOp>(
          [&](auto) { return binary(op); })
      .Case<llm::NegOp>([&](auto) {
        return unary(op, [](double x) { return -x; });
      })
      .Case<llm::AbsOp>([&](auto) {
        return unary(op, [](double x) { return std::fabs(x); });
      })
      .Case<llm::ExpOp>([&](auto) {
        return unary(op, [](double x) { return std::exp(x); });
      })
      .Case<llm::LogOp>([&](auto) {
        return unary(op, [](double x) { return std::log(x); });
      })
      .Case<llm::TanhOp>([&](auto) {
        return unary(op, [](double x) { return std::tanh(x); });
      })
      .Case<llm::SinOp>([&](auto) {
        return unary(op, [](double x) { return std::sin(x); });
      })
      .Case<llm::CosOp>([&](auto) {
        return unary(op, [](double x) { return std::cos(x); });
      })
      .Case<llm::SqrtOp>([&](auto) {
        return unary(op, [](double x) { return std::sqrt(x); });
      })
      .Case<llm::RsqrtOp>([&](auto) {
        return unary(op, [](double x) { return 1.0 / std::sqrt(x); });
      })
      .Case<llm::SiluOp>([&](auto) {
        return unary(op, [](double x) { return x * sigmoid(x); });
      })
      .Case<llm::SigmoidOp>(
          [&](auto) { return unary(op, [](double x) { return sigmoid(x); }); })
      .Case<llm::ReluOp>([&](auto) {
        return unary(op, [](double x) {
          return std::isnan(x) ? x : (x > 0.0 ? x : 0.0);
        });
      })
      .Case<llm::GeluOp>([&](llm::GeluOp g) {
        if (g.getApproximation() == llm::GeluApproximation::tanh)
          return unary(op, [](double x) {
            const double k = std::sqrt(2.0 / M_PI);
            return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
          });
        return unary(op, [](double x) {
          return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
        });
      })
      .Case<llm::SelectOp>([&](auto) -> R {
        const HostTensor &c = in(op, 0), &a = in(op, 1), &b = in(op, 2);
        if (c.shape != a.shape || a.shape != b.shape)
          return opError(op, absl::StrCat("cond ", shapeStr(c.shape),
                                          ", on_true ", shapeStr(a.shape),
                                          " and on_false ", shapeStr(b.shape),
                                          " must have one shape"));
        REF_ASSIGN_OR_RETURN(HostTensor out,
                             newTensor(op, resultElementType(op), a.shape));
        for (size_t i = 0; i < out.data.size(); ++i)
          out.data[i] = c.data[i] != 0.0 ? a.data[i] : b.data[i];
        return out;
      })
      .Case<llm::CastOp>([&](auto) -> R {
        const HostTensor &x = in(op, 0);
        Type to = resultElementType(op);
        REF_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, to, x.shape));
        auto it = dyn_cast<IntegerType>(to);
        bool floatToInt = isa<FloatType>(x.elementType) && it && it.getWidth() > 1;
        for (size_t i = 0; i < out.data.size(); ++i) {
          double v = x.data[i];
          if (floatToInt) {
            // cvt.rzi: truncate toward zero, saturate, NaN -> 0.
            unsigned w = it.getWidth();
            double hi = std::ldexp(1.0, w - 1) - 1.0, lo = -std::ldexp(1.0, w - 1);
            v = std::isnan(v) ? 0.0 : std::fmin(std::fmax(std::trunc(v), lo), hi);
          }
          out.data[i] = RoundToType(v, to);
        }
        return out;
      })
      .Case<llm::ReshapeOp>([&](auto r) { return reshape(r); })
      .Case<llm::TransposeOp>([&](auto t) { return transpose(t); })
      .Case<llm::SliceOp>([&](auto s) { return slice(s); })
      .Case<llm::PadOp>([&](auto p) { return pad(p); })
      .Case<llm::ConcatOp>([&](auto c) { return concat(c); })
      .Case<llm::GatherOp>([&](auto g) { return gather(g); })
      .Case<llm::ReduceSumOp>([&](auto r) {
        return reduce(op, r.getDims(), r.getKeepdim(), 0);
      })
      .Case<llm::ReduceMeanOp>([&](auto r) {
        return reduce(op, r.getDims(), r.getKeepdim(), 1);
      })
      .Case<llm::ReduceMaxOp>([&](auto r) {
        return reduce(op, r.getDims(), r.getKeepdim(), 2);
      })
      .Case<llm::ReduceMinOp>([&](auto r) {
        return reduce(op, r.getDims(), r.getKeepdim(), 3);
      })
      .Case<llm::SoftmaxOp>([&](auto s) { return softmax(s); })
      .Case<llm::RMSNormOp>([&](auto n) { return rmsNorm(n); })
      .Case<llm::LayerNormOp>([&](auto n) { return layerNorm(n); })
      .Case<llm::RoPEOp>([&](auto r) { return rope(r); })
      .Case<llm::MatmulOp>([&](auto m) { return matmul(m); })
      .Case<llm::AttentionOp>([&](auto a) { return attention(a); })
      .Case<llm::KVCacheAppendOp>([&](auto k) { return kvCacheAppend(k); })
      .Case<llm::DequantizeWeightOp>(
          [&](auto d) { return dequantizeWeight(d); })
      // Collectives of a group of one rank are the identity.
      .Case<llm::AllReduceOp, llm::AllGatherOp, llm::ReduceScatterOp>(
          [&](auto) -> R { return takeOrCopy(op, 0); })
      .Default([&](Operation *) -> R {
        return absl::UnimplementedError(absl::StrCat(
            opName(op), ": op is not supported by the reference executor"));
      });
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

absl::StatusOr<HostTensor> RankState::unary(Operation *op,
                                            double (*fn)(double)) {
  const HostTensor &x = in(op, 0);
  REF_ASSIGN_OR_RETURN(HostTensor out,
                       newTensor(op, resultElementType(op), x.shape));
  for (size_t i = 0; i < x.data.size(); ++i)
    out.data[i] = fn(x.data[i]);
  roundInPlace(out);
  return out;
}

absl::StatusOr<HostTensor> RankState::binary(Operation *op) {
  const HostTensor &a = in(op, 0), &b = in(op, 1);
  if (a.shape != b.shape)
    return opError(op, absl::StrCat("operands have shapes ", shapeStr(a.shape),
                                    " and ", shapeStr(b.shape),
                                    "; expected one shape (broadcast "
                                    "explicitly with llm.broadcast)"));
  REF_ASSIGN_OR_RETURN(HostTensor out,
                       newTensor(op, resultElementType(op), a.shape));
  bool isInt = isa<IntegerType>(a.elementType);
  size_t n = a.data.size();
  auto apply = [&](auto fn) {
    for (size_t i = 0; i < n; ++i)
      out.data[i] = fn(a.data[i], b.data[i]);
  };
  if (isa<llm::AddOp>(op))
    apply([](double x, double y) { return x + y; });
  else if (isa<llm::SubOp>(op))
    apply([](double x, double y) { return x - y; });
  else if (isa<llm::MulOp>(op))
    apply([](double x, double y) { return x * y; });
  else if (isa<llm::DivOp>(op)) {
    if (isInt) {
      for (size_t i = 0; i < n; ++i) {
        if (b.data[i] == 0.0)
          return opError(op, absl::StrCat("integer division by zero at element ",
                                          i));
        out.data[i] = std::trunc(a.data[i] / b.data[i]);
      }
    } else {
      apply([](double x, double y) { return x / y; });
    }
  } else if (isa<llm::PowOp>(op))
    apply([](double x, double y) { return std::pow(x, y); });
  else if (isa<llm::MaximumOp>(op))
    apply(nanMax);
  else if (isa<llm::MinimumOp>(op))
    apply(nanMin);
  else if (auto cmp = dyn_cast<llm::CompareOp>(op)) {
    llm::CmpPredicate p = cmp.getPredicate();
    for (size_t i = 0; i < n; ++i) {
      double x = a.data[i], y = b.data[i];
      bool r = false;
      switch (p) {
      case llm::CmpPredicate::eq: r = x == y; break;
      case llm::CmpPredicate::ne: r = x != y; break;
      case llm::CmpPredicate::lt: r = x < y; break;
      case llm::CmpPredicate::le: r = x <= y; break;
      case llm::CmpPredicate::gt: r = x > y; break;
      case llm::CmpPredicate::ge: r = x >= y; break;
      }
      out.data[i] = r ? 1.0 : 0.0;
    }
    return out;
  }
  roundInPlace(out);
  return out;
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

absl::StatusOr<HostTensor> RankState::broadcast(llm::BroadcastOp op,
                                                bool *pending) {
  const HostTensor &x = in(op, 0);
  auto rt = op.getResult().getType();
  size_t lead = rt.getRank() - x.shape.size();
  Shape to(rt.getRank());
  for (int64_t d = 0; d < rt.getRank(); ++d) {
    int64_t want = rt.getDimSize(d);
    if (!ShapedType::isDynamic(want)) {
      to[d] = want;
      continue;
    }
    if (d >= static_cast<int64_t>(lead) && x.shape[d - lead] != 1) {
      to[d] = x.shape[d - lead];
      continue;
    }
    // The result's size here is not given by the input: a user decides it.
    *pending = true;
    return takeOrCopy(op, 0);
  }
  if (absl::Status s = checkBroadcastable(op, "input", x.shape, to); !s.ok())
    return s;
  REF_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, to));
  broadcastInto(x, out.shape, out.data);
  return out;
}

absl::StatusOr<HostTensor> RankState::reshape(llm::ReshapeOp op) {
  const HostTensor &x = in(op, 0);
  auto rt = op.getResult().getType();
  Shape to(rt.getShape().begin(), rt.getShape().end());
  int64_t known = 1, dynIdx = -1;
  for (int64_t d = 0; d < rt.getRank(); ++d) {
    if (ShapedType::isDynamic(to[d])) {
      if (dynIdx >= 0)
        return opError(op, absl::StrCat("result ", shapeStr(to),
                                        " has more than one dynamic dimension"));
      dynIdx = d;
    } else {
      known *= to[d];
    }
  }
  int64_t n = x.numElements();
  if (dynIdx >= 0) {
    if (known == 0 || n % known != 0)
      return opError(op, absl::StrCat("input ", shapeStr(x.shape), " with ", n,
                                      " elements cannot be reshaped to ",
                                      shapeStr(to)));
    to[dynIdx] = n / known;
  } else if (known != n) {
    return opError(op, absl::StrCat("input ", shapeStr(x.shape), " has ", n,
                                    " elements but the result ", shapeStr(to),
                                    " has ", known));
  }
  REF_ASSIGN_OR_RETURN(HostTensor out, takeOrCopy(op, 0));
  out.shape = std::move(to);
  return out;
}

absl::StatusOr<HostTensor> RankState::transpose(llm::TransposeOp op) {
  const HostTensor &x = in(op, 0);
  ArrayRef<int64_t> perm = op.getPermutation();
  Shape to(perm.size());
  Shape xs = stridesOf(x.shape), s(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    to[i] = x.shape[perm[i]];
    s[i] = xs[perm[i]];
  }
  REF_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, to));
  forEachIndex(to, [&](int64_t lin, ArrayRef<int64_t> idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      off += idx[d] * s[d];
    out.data[lin] = x.data[off];
  });
  return out;
}

absl::StatusOr<HostTensor> RankState::slice(llm::SliceOp op) {
  const HostTensor &x = in(op, 0);
  ArrayRef<int64_t> starts = op.getStarts(), limits = op.getLimits(),
                    steps = op.getSteps();
  size_t rank = x.shape.size();
  Shape to(rank), xs = stridesOf(x.shape);
  for (size_t d = 0; d < rank; ++d) {
    int64_t limit = limits[d] == -1 ? x.shape[d] : limits[d];
    if (starts[d] < 0 || limit > x.shape[d] || starts[d] > limit || steps[d] < 1)
      return opError(op, absl::StrCat("range [", starts[d], ", ", limit,
                                      ") step ", steps[d], " of dimension ", d,
                                      " is outside [0, ", x.shape[d], "]"));
    int64_t len = limit - starts[d]; // in [0, dim]: no overflow below
    to[d] = len == 0 ? 0 : (len - 1) / steps[d] + 1;
  }
  REF_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, to));
  forEachIndex(to, [&](int64_t lin, ArrayRef<int64_t> idx) {
    int64_t off = 0;
    for (size_t d = 0; d < rank; ++d)
      off += (starts[d] + idx[d] * steps[d]) * xs[d];
    out.data[lin] = x.data[off];
  });
  return out;
}

absl::StatusOr<HostTensor> RankState::pad(llm::PadOp op) {
  const HostTensor &x = in(op, 0);
  ArrayRef<int64_t> high = op.getHigh();
  if (high.size() != x.shape.size())
    return opError(op, absl::StrCat("expected ", x.shape.size(),
                                    " high padding entries, found ",
                                    high.size()));
  Shape to = x.shape;
  for (size_t d = 0; d < to.size(); ++d)
    to[d] += high[d]; // both at most 2^40 (the verifier)
  REF_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, to));
  Shape os = stridesOf(to);
  forEachIndex(x.shape, [&](int64_t lin, ArrayRef<int64_t> idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      off += idx[d] * os[d];
    out.data[off] = x.data[lin];
  });
  return out;
}

absl::StatusOr<HostTensor> RankState::concat(llm::ConcatOp op) {
  int64_t dim = op.getDim();
  const HostTensor &first = in(op, 0);
  Shape to = first.shape;
  to[dim] = 0;
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    const HostTensor &t = in(op, i);
    for (size_t d = 0; d < to.size(); ++d)
      if (static_cast<int64_t>(d) != dim && t.shape[d] != first.shape[d])
        return opError(op, absl::StrCat("input ", i, " has shape ",
                                        shapeStr(t.shape), ", expected ",
                                        first.shape[d], " in dimension ", d,
                                        " (as input 0)"));
    if (llvm::AddOverflow(to[dim], t.shape[dim], to[dim]))
      return opError(op, absl::StrCat("result dimension ", dim,
                                      " overflows int64 at input ", i));
  }
  REF_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, first.elementType, to));
  if (out.data.empty()) // no elements: nothing to copy, however many rows
    return out;
  int64_t outer = product(ArrayRef<int64_t>(to).take_front(dim));
  int64_t inner = product(ArrayRef<int64_t>(to).drop_front(dim + 1));
  int64_t offset = 0;
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    const HostTensor &t = in(op, i);
    int64_t rows = t.shape[dim];
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(t.data.begin() + o * rows * inner, rows * inner,
                  out.data.begin() + (o * to[dim] + offset) * inner);
    offset += rows;
  }
  return out;
}

absl::StatusOr<HostTensor> RankState::gather(llm::GatherOp op) {
  const HostTensor &table = in(op, 0), &idx = in(op, 1);
  int64_t axis = op.getAxis();
  Shape to(table.shape.begin(), table.shape.begin() + axis);
  to.insert(to.end(), idx.shape.begin(), idx.shape.end());
  to.insert(to.end(), table.shape.begin() + axis + 1, table.shape.end());
  int64_t outer = product(ArrayRef<int64_t>(table.shape).take_front(axis));
  int64_t inner = product(ArrayRef<int64_t>(table.shape).drop_front(axis + 1));
  int64_t rows = table.shape[axis];
  int64_t count = idx.numElements();
  for (int64_t k = 0; k < count; ++k) {
    double v = idx.data[k];
    if (v < 0 || v >= static_cast<double>(rows))
      return absl::OutOfRangeError(absl::StrCat(
          "'llm.gather' at ", locStr(op.getLoc()), ": index ",
          static_cast<int64_t>(v), " at position ", k,
          " of the indices is out of range [0, ", rows, ") for axis ", axis,
          " of the table ", shapeStr(table.shape)));
  }
  REF_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, table.elementType, to));
  if (out.data.empty())
    return out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < count; ++k) {
      int64_t r = static_cast<int64_t>(idx.data[k]);
      std::copy_n(table.data.begin() + (o * rows + r) * inner, inner,
                  out.data.begin() + (o * count + k) * inner);
    }
  return out;
}

//===----------------------------------------------------------------------===//
// Reductions and normalizations
//===----------------------------------------------------------------------===//

/// kind: 0 sum, 1 mean, 2 max, 3 min.
absl::StatusOr<HostTensor> RankState::reduce(Operation *op,
                                             ArrayRef<int64_t> dims,
                                             bool keepdim, int kind) {
  const HostTensor &x = in(op, 0);
  // The verifier's rule, for shapes that were dynamic there.
  if (std::optional<std::string> error = llm::checkReducedDims(x.shape, dims))
    return opError(op, *error);
  size_t rank = x.shape.size();
  std::vector<bool> reduced(rank, false);
  for (int64_t d : dims)
    reduced[d] = true;
  Shape kept(rank); // the output shape with keepdim
  int64_t count = 1;
  for (size_t d = 0; d < rank; ++d) {
    kept[d] = reduced[d] ? 1 : x.shape[d];
    if (reduced[d])
      count *= x.shape[d];
  }
  Shape ks = stridesOf(kept);
  double init = kind == 2 ? -kInf : kind == 3 ? kInf : 0.0;
  Shape to;
  for (size_t d = 0; d < rank; ++d)
    if (!reduced[d] || keepdim)
      to.push_back(kept[d]);
  REF_ASSIGN_OR_RETURN(HostTensor out,
                       newTensor(op, resultElementType(op), std::move(to)));
  std::vector<double> &acc = out.data;
  std::fill(acc.begin(), acc.end(), init);
  forEachIndex(x.shape, [&](int64_t lin, ArrayRef<int64_t> idx) {
    int64_t o = 0;
    for (size_t d = 0; d < rank; ++d)
      if (!reduced[d])
        o += idx[d] * ks[d];
    double v = x.data[lin];
    switch (kind) {
    case 0:
    case 1: acc[o] += v; break;
    case 2: acc[o] = nanMax(acc[o], v); break;
    case 3: acc[o] = nanMin(acc[o], v); break;
    }
  });
  if (kind == 1)
    for (double &v : acc)
      v /= static_cast<double>(count); // count >= 1: no empty reduced dim
  roundInPlace(out);
  return out;
}

absl::StatusOr<HostTensor> RankState::softmax(llm::SoftmaxOp op) {
  const HostTensor &x = in(op, 0);
  std::vector<double> mask;
  if (op.getMask()) {
    const HostTensor &m = in(op.getMask());
    if (absl::Status s = checkBroadcastable(op, "mask", m.shape, x.shape);
        !s.ok())
      return s;
    REF_ASSIGN_OR_RETURN(mask, newBuffer(op, absl::StrCat(
                                                 "the mask broadcast to ",
                                                 shapeStr(x.shape)),
                                         x.numElements()));
    broadcastInto(m, x.shape, mask);
  }
  double scale = op.getScale() ? op.getScale()->convertToDouble() : 1.0;
  int64_t cols = x.shape.back();
  int64_t rows = cols == 0 ? 0 : x.numElements() / cols;
  REF_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, x.shape));
  REF_ASSIGN_OR_RETURN(std::vector<double> z,
                       newBuffer(op, "a row of scores", cols));
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -kInf;
    for (int64_t c = 0; c < cols; ++c) {
      int64_t i = r * cols + c;
      z[c] = x.data[i] * scale + (mask.empty() ? 0.0 : mask[i]);
      mx = nanMax(mx, z[c]);
    }
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      z[c] = std::exp(z[c] - mx); // an all -inf row gives NaN, as PyTorch
      sum += z[c];
    }
    for (int64_t c = 0; c < cols; ++c)
      out.data[r * cols + c] = z[c] / sum;
  }
  roundInPlace(out);
  return out;
}

static absl::Status checkNormParam(Operation *op, absl::string_view name,
                                   const HostTensor &p, int64_t hidden) {
  if (p.shape.size() != 1 || p.shape[0] != hidden)
    return opError(op, absl::StrCat(name, " must have shape [", hidden,
                                    "] (the input's last dimension), found ",
                                    shapeStr(p.shape)));
  return absl::OkStatus();
}

absl::StatusOr<HostTensor> RankState::rmsNorm(llm::RMSNormOp op) {
  const HostTensor &x = in(op, 0), &w = in(op, 1);
  int64_t h = x.shape.back();
  if (absl::Status s = checkNormParam(op, "weight", w, h); !s.ok())
    return s;
  double eps = op.getEps().convertToDouble();
  int64_t rows = h == 0 ? 0 : x.numElements() / h;
  REF_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, x.shape));
  for (int64_t r = 0; r < rows; ++r) {
    const double *row = x.data.data() + r * h;
    double ss = 0.0;
    for (int64_t c = 0; c < h; ++c)
      ss += row[c] * row[c];
    double inv = 1.0 / std::sqrt(ss / static_cast<double>(h) + eps);
    for (int64_t c = 0; c < h; ++c)
      out.data[r * h + c] = row[c] * inv * w.data[c];
  }
  roundInPlace(out);
  return out;
}

absl::StatusOr<HostTensor> RankState::layerNorm(llm::LayerNormOp op) {
  const HostTensor &x = in(op, 0), &w = in(op, 1);
  int64_t h = x.shape.back();
  if (absl::Status s = checkNormParam(op, "weight", w, h); !s.ok())
    return s;
  const HostTensor *b = nullptr;
  if (op.getBias()) {
    b = &in(op.getBias());
    if (absl::Status s = checkNormParam(op, "bias", *b, h); !s.ok())
      return s;
  }
  double eps = op.getEps().convertToDouble();
  int64_t rows = h == 0 ? 0 : x.numElements() / h;
  REF_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, x.shape));
  for (int64_t r = 0; r < rows; ++r) {
    const double *row = x.data.data() + r * h;
    double mean = 0.0;
    for (int64_t c = 0; c < h; ++c)
      mean += row[c];
    mean /= static_cast<double>(h);
    double var = 0.0;
    for (int64_t c = 0; c < h; ++c)
      var += (row[c] - mean) * (row[c] - mean);
    var /= static_cast<double>(h);
    double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < h; ++c)
      out.data[r * h + c] =
          (row[c] - mean) * inv * w.data[c] + (b ? b->data[c] : 0.0);
  }
  roundInPlace(out);
  return out;
}

//===----------------------------------------------------------------------===//
// Transformer ops
//===----------------------------------------------------------------------===//

absl::StatusOr<HostTensor> RankState::rope(llm::RoPEOp op) {
  const HostTensor &x = in(op, 0);
  int64_t B = x.shape[0], S = x.shape[1], H = x.shape[2], D = x.shape[3];
  if (D % 2 != 0)
    return opError(op, absl::StrCat("head dimension must be even, found ", D));
  REF_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, x.shape));
  if (out.data.empty()) // no elements: no loop over the other dimensions
    return out;
  // Positions are float64 (s + an i64 offset near 2^63 must not overflow).
  REF_ASSIGN_OR_RETURN(std::vector<double> offsets,
                       newBuffer(op, "the per-batch offsets", B));
  if (op.getOffset()) {
    const HostTensor &off = in(op.getOffset());
    if (off.shape.empty()) {
      std::fill(offsets.begin(), offsets.end(),
                off.data.empty() ? 0.0 : off.data[0]);
    } else if (off.shape.size() == 1 && off.shape[0] == B) {
      for (int64_t b = 0; b < B; ++b)
        offsets[b] = off.data[b];
    } else {
      return opError(op, absl::StrCat("offset must be a scalar or have shape [",
                                      B, "], found ", shapeStr(off.shape)));
    }
  }
  bool interleaved = op.getMode() == llm::RopeMode::interleaved;
  int64_t half = D / 2;
  if (op.getCos() || op.getSin()) {
    if (!op.getCos() || !op.getSin() || op.getOffset())
      return opError(op, "cos and sin tables must be given together and "
                         "without an offset");
    // Table form (HF apply_rotary_pos_emb): x * cos + rotate(x) * sin, with
    // full head-dim rows cos/sin [S, D] or [Bt, S, D], Bt in {1, B}.
    const HostTensor &cs = in(op.getCos());
    const HostTensor &sn = in(op.getSin());
    size_t rank = cs.shape.size();
    bool shapeOk = cs.shape == sn.shape && (rank == 2 || rank == 3) &&
                   cs.shape[rank - 2] == S && cs.shape[rank - 1] == D &&
                   (rank == 2 || cs.shape[0] == 1 || cs.shape[0] == B);
    if (!shapeOk)
      return opError(op, absl::StrCat("cos and sin must both be [", S, ", ", D,
                                      "] or [1 or ", B, ", ", S, ", ", D,
                                      "], found ", shapeStr(cs.shape), " and ",
                                      shapeStr(sn.shape)));
    int64_t tableBatchStride =
        rank == 3 && cs.shape[0] == B && B > 1 ? S * D : 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        const double *c = cs.data.data() + b * tableBatchStride + s * D;
        const double *n = sn.data.data() + b * tableBatchStride + s * D;
        for (int64_t h = 0; h < H; ++h) {
          const double *xr = x.data.data() + ((b * S + s) * H + h) * D;
          double *o = out.data.data() + ((b * S + s) * H + h) * D;
          for (int64_t i = 0; i < half; ++i) {
            int64_t ia = interleaved ? 2 * i : i;
            int64_t ib = interleaved ? 2 * i + 1 : i + half;
            o[ia] = xr[ia] * c[ia] - xr[ib] * n[ia];
            o[ib] = xr[ib] * c[ib] + xr[ia] * n[ib];
          }
        }
      }
    roundInPlace(out);
    return out;
  }
  double theta = op.getTheta().convertToDouble();
  REF_ASSIGN_OR_RETURN(std::vector<double> invFreq,
                       newBuffer(op, "the inverse frequencies", half));
  for (int64_t i = 0; i < half; ++i)
    invFreq[i] = std::pow(theta, -2.0 * static_cast<double>(i) /
                                     static_cast<double>(D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      double p = static_cast<double>(s) + offsets[b];
      for (int64_t h = 0; h < H; ++h) {
        int64_t base = ((b * S + s) * H + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          int64_t ia = interleaved ? base + 2 * i : base + i;
          int64_t ib = interleaved ? base + 2 * i + 1 : base + i + half;
          double angle = p * invFreq[i];
          double c = std::cos(angle), sn = std::sin(angle);
          double a = x.data[ia], v = x.data[ib];
          out.data[ia] = a * c - v * sn;
          out.data[ib] = a * sn + v * c;
        }
      }
    }
  roundInPlace(out);
  return out;
}

/// Dot product with four independent partial sums.
static double dot(const double *a, const double *b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += a[k] * b[k];
    s1 += a[k + 1] * b[k + 1];
    s2 += a[k + 2] * b[k + 2];
    s3 += a[k + 3] * b[k + 3];
  }
  for (; k < n; ++k)
    s0 += a[k] * b[k];
  return (s0 + s1) + (s2 + s3);
}

absl::StatusOr<HostTensor> RankState::matmul(llm::MatmulOp op) {
  const HostTensor &a = in(op, 0), &bt = in(op, 1);
  bool tl = op.getTransposeLhs(), tr = op.getTransposeRhs();
  size_t lr = a.shape.size(), rr = bt.shape.size();
  int64_t M = a.shape[lr - (tl ? 1 : 2)], K = a.shape[lr - (tl ? 2 : 1)];
  int64_t Kr = bt.shape[rr - (tr ? 1 : 2)], N = bt.shape[rr - (tr ? 2 : 1)];
  if (K != Kr)
    return opError(op, absl::StrCat("contraction sizes differ: lhs ",
                                    shapeStr(a.shape), " has K = ", K,
                                    ", rhs ", shapeStr(bt.shape), " has K = ",
                                    Kr));
  // The verifier's rule, for shapes that were dynamic there.
  if (std::optional<std::string> error = llm::checkContractionSize(K))
    return opError(op, *error);
  const HostTensor *bias = nullptr;
  if (op.getBias()) {
    bias = &in(op.getBias());
    if (bias->shape.size() != 1 || bias->shape[0] != N)
      return opError(op, absl::StrCat("bias must have shape [", N,
                                      "] (N), found ", shapeStr(bias->shape)));
  }
  // Batch dimensions broadcast NumPy-style.
  Shape lb(a.shape.begin(), a.shape.end() - 2),
      rb(bt.shape.begin(), bt.shape.end() - 2);
  size_t nb = std::max(lb.size(), rb.size());
  Shape batch(nb), ls(nb, 0), rs(nb, 0);
  Shape lbs = stridesOf(lb), rbs = stridesOf(rb);
  for (size_t i = 0; i < nb; ++i) {
    int64_t li = static_cast<int64_t>(i + lb.size()) - static_cast<int64_t>(nb);
    int64_t ri = static_cast<int64_t>(i + rb.size()) - static_cast<int64_t>(nb);
    int64_t da = li >= 0 ? lb[li] : 1, db = ri >= 0 ? rb[ri] : 1;
    if (da != 1 && db != 1 && da != db)
      return opError(op, absl::StrCat("batch dimensions ", shapeStr(lb),
                                      " and ", shapeStr(rb),
                                      " do not broadcast"));
    batch[i] = da == 1 ? db : da;
    if (li >= 0 && da != 1)
      ls[i] = lbs[li];
    if (ri >= 0 && db != 1)
      rs[i] = rbs[ri];
  }
  Shape to = batch;
  to.push_back(M);
  to.push_back(N);
  double work = double(M) * double(N) * double(K);
  for (int64_t d : batch)
    work *= double(d);
  if (absl::Status s = budget_->spend(opName(op), work); !s.ok())
    return s;
  REF_ASSIGN_OR_RETURN(HostTensor out,
                       newTensor(op, resultElementType(op), to));
  if (out.data.empty()) // no elements: no loop over the batch
    return out;
  // A row-major [M, K]; Bt [N, K].
  REF_ASSIGN_OR_RETURN(std::vector<double> A,
                       newBuffer(op, "a copy of the lhs matrix", M * K));
  REF_ASSIGN_OR_RETURN(std::vector<double> Bt,
                       newBuffer(op, "a copy of the rhs matrix", N * K));
  int64_t lastL = -1, lastR = -1;
  forEachIndex(batch, [&](int64_t bi, ArrayRef<int64_t> idx) {
    int64_t lo = 0, ro = 0;
    for (size_t d = 0; d < nb; ++d) {
      lo += idx[d] * ls[d];
      ro += idx[d] * rs[d];
    }
    const double *pa = a.data.data() + lo * M * K;
    const double *pb = bt.data.data() + ro * K * N;
    if (lo != lastL) {
      for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k)
          A[i * K + k] = tl ? pa[k * M + i] : pa[i * K + k];
      lastL = lo;
    }
    if (ro != lastR) {
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k)
          Bt[j * K + k] = tr ? pb[j * K + k] : pb[k * N + j];
      lastR = ro;
    }
    double *pc = out.data.data() + bi * M * N;
    constexpr int64_t kRowBlock = 16;
    for (int64_t i0 = 0; i0 < M; i0 += kRowBlock)
      for (int64_t j = 0; j < N; ++j)
        for (int64_t i = i0; i < std::min(M, i0 + kRowBlock); ++i)
          pc[i * N + j] = dot(&A[i * K], &Bt[j * K], K) +
                          (bias ? bias->data[j] : 0.0);
  });
  roundInPlace(out);
  return out;
}

absl::StatusOr<HostTensor> RankState::attention(llm::AttentionOp op) {
  const HostTensor &q = in(op, 0), &k = in(op, 1), &v = in(op, 2);
  int64_t B = q.shape[0], Sq = q.shape[1], Hq = q.shape[2], D = q.shape[3];
  int64_t Skv = k.shape[1], Hkv = k.shape[2];
  if (k.shape != v.shape)
    return opError(op, absl::StrCat("key ", shapeStr(k.shape), " and value ",
                                    shapeStr(v.shape),
                                    " must have the same shape"));
  if (k.shape[0] != B || k.shape[3] != D)
    return opError(op, absl::StrCat("query ", shapeStr(q.shape), " and key ",
                                    shapeStr(k.shape),
                                    " differ in batch or head dimension"));
  // The verifier's rule, for shapes that were dynamic there.
  if (std::optional<std::string> error = llm::checkAttentionHeadDim(D))
    return opError(op, *error);
  if (Hkv == 0 || Hq % Hkv != 0)
    return opError(op, absl::StrCat("query heads (", Hq,
                                    ") must be a multiple of key/value heads (",
                                    Hkv, ")"));
  int64_t L = Skv;
  if (op.getKvLen()) {
    L = scalarInt(in(op.getKvLen()));
    if (L < 0 || L > Skv)
      return opError(op, absl::StrCat("kv_len ", L, " is outside [0, ", Skv,
                                      "] (the key length)"));
  }
  Shape scoresShape = {B, Hq, Sq, Skv};
  // The mask is read in place through broadcast strides (0 along the
  // dimensions it broadcasts), not materialized at [B, Hq, Sq, Skv].
  const HostTensor *mask = nullptr;
  Shape ms(4, 0);
  if (op.getMask()) {
    mask = &in(op.getMask());
    if (absl::Status s =
            checkBroadcastable(op, "mask", mask->shape, scoresShape);
        !s.ok())
      return s;
    Shape strides = stridesOf(mask->shape);
    size_t lead = 4 - mask->shape.size();
    for (size_t d = 0; d < mask->shape.size(); ++d)
      ms[lead + d] = mask->shape[d] == 1 ? 0 : strides[d];
  }
  double scale = op.getScale() ? op.getScale()->convertToDouble()
                               : 1.0 / std::sqrt(static_cast<double>(D));
  bool causal = op.getCausal();
  int64_t group = Hq / Hkv;
  if (absl::Status s = budget_->spend(
          opName(op), 2.0 * double(B) * double(Hq) * double(Sq) * double(Skv) * double(D));
      !s.ok())
    return s;
  REF_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, q.elementType, q.shape));
  if (out.data.empty()) // no elements: no loop over batch, heads, rows
    return out;
  REF_ASSIGN_OR_RETURN(std::vector<double> p,
                       newBuffer(op, "a row of scores", Skv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      int64_t hk = h / group;
      for (int64_t i = 0; i < Sq; ++i) {
        const double *qi = q.data.data() + ((b * Sq + i) * Hq + h) * D;
        // Keys j < L, and with `causal` j <= i + L - Sq (bottom right).
        int64_t end = causal ? std::min(L, i + L - Sq + 1) : L;
        double mx = -kInf;
        for (int64_t j = 0; j < end; ++j) {
          const double *kj = k.data.data() + ((b * Skv + j) * Hkv + hk) * D;
          double s = dot(qi, kj, D) * scale;
          if (mask)
            s += mask->data[b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]];
          p[j] = s;
          mx = nanMax(mx, s);
        }
        double *oi = out.data.data() + ((b * Sq + i) * Hq + h) * D;
        // A row with no visible key (or every score -inf) gives zeros, as
        // FlashAttention; NaN scores propagate.
        if (end <= 0 || mx == -kInf)
          continue;
        double sum = 0.0;
        for (int64_t j = 0; j < end; ++j) {
          p[j] = std::exp(p[j] - mx);
          sum += p[j];
        }
        for (int64_t j = 0; j < end; ++j) {
          const double *vj = v.data.data() + ((b * Skv + j) * Hkv + hk) * D;
          double w = p[j] / sum;
          for (int64_t d = 0; d < D; ++d)
            oi[d] += w * vj[d];
        }
      }
    }
  roundInPlace(out);
  return out;
}

//===----------------------------------------------------------------------===//
// Weight-only quantization
//===----------------------------------------------------------------------===//

// Float32 arithmetic on purpose: these are the exact operations the CUDA
// kernels perform (IEEE division and multiplication, rint = round half to
// even), so the reference reproduces their bits.

absl::Status RankState::quantizeWeight(llm::QuantizeWeightOp op) {
  const HostTensor &w = in(op, 0);
  if (w.shape.size() != 2)
    return opError(op, absl::StrCat("expected a rank-2 weight, found shape ",
                                    shapeStr(w.shape)));
  const int64_t n = w.shape[0], k = w.shape[1];
  const int64_t bits = op.getBits(), group = op.getGroupSize();
  if (k % group != 0)
    return opError(op, absl::StrCat("K = ", k, " is not a multiple of group_size = ",
                                    group));
  const float qmax = bits == 4 ? 7.0f : 127.0f;
  const int64_t groups = k / group;
  REF_ASSIGN_OR_RETURN(
      HostTensor packed,
      newTensor(op, op.getPacked().getType().getElementType(),
                {n, bits == 4 ? k / 2 : k}, "the packed result"));
  REF_ASSIGN_OR_RETURN(HostTensor scales,
                       newTensor(op, op.getScales().getType().getElementType(),
                                 {n, groups}, "the scales result"));
  // One row of codes (counted as doubles: an upper bound).
  if (absl::Status s = reserve(op, "a row of codes", k); !s.ok())
    return s;
  std::vector<int> q(k);
  for (int64_t r = 0; r < n && k > 0; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      float amax = 0.0f;
      for (int64_t j = g * group; j < (g + 1) * group; ++j)
        amax = std::fmax(amax, std::fabs(static_cast<float>(w.data[r * k + j])));
      const float scale = amax / qmax;
      scales.data[r * groups + g] = scale;
      for (int64_t j = g * group; j < (g + 1) * group; ++j) {
        float x = static_cast<float>(w.data[r * k + j]);
        float v = scale > 0.0f ? std::nearbyint(x / scale) : 0.0f;
        q[j] = static_cast<int>(std::fmin(std::fmax(v, -qmax), qmax));
      }
    }
    if (bits == 8) {
      for (int64_t j = 0; j < k; ++j)
        packed.data[r * k + j] = q[j];
    } else {
      for (int64_t j = 0; j < k / 2; ++j) {
        int byte = (q[2 * j] & 0xF) | ((q[2 * j + 1] & 0xF) << 4);
        packed.data[r * (k / 2) + j] = static_cast<int8_t>(byte);
      }
    }
  }
  for (auto [result, t] :
       llvm::zip(op->getResults(), std::array<HostTensor *, 2>{&packed, &scales})) {
    auto rt = cast<RankedTensorType>(result.getType());
    for (int64_t d = 0; d < 2; ++d)
      if (!ShapedType::isDynamic(rt.getDimSize(d)) && rt.getDimSize(d) != t->shape[d])
        return opError(op, absl::StrCat("computed result shape ", shapeStr(t->shape),
                                        " does not match the result type ",
                                        typeStr(rt)));
    store(result, Entry{std::move(*t), false});
  }
  return absl::OkStatus();
}

absl::StatusOr<HostTensor>
RankState::dequantizeWeight(llm::DequantizeWeightOp op) {
  const HostTensor &packed = in(op, 0), &scales = in(op, 1);
  const int64_t bits = op.getBits(), group = op.getGroupSize();
  if (packed.shape.size() != 2 || scales.shape.size() != 2)
    return opError(op, "expected rank-2 packed and scales operands");
  const int64_t n = packed.shape[0];
  const int64_t k = bits == 4 ? packed.shape[1] * 2 : packed.shape[1];
  if (k % group != 0 || scales.shape[0] != n || scales.shape[1] != k / group)
    return opError(op, absl::StrCat("scales of shape ", shapeStr(scales.shape),
                                    " do not match packed of shape ",
                                    shapeStr(packed.shape), " for group_size ",
                                    group));
  REF_ASSIGN_OR_RETURN(HostTensor out,
                       newTensor(op, resultElementType(op), {n, k}));
  for (int64_t r = 0; r < n && k > 0; ++r)
    for (int64_t j = 0; j < k; ++j) {
      int q;
      if (bits == 8) {
        q = static_cast<int>(packed.data[r * k + j]);
      } else {
        int byte = static_cast<int>(packed.data[r * (k / 2) + j / 2]) & 0xFF;
        int nib = (j % 2 ? byte >> 4 : byte) & 0xF;
        q = nib >= 8 ? nib - 16 : nib;
      }
      float v = static_cast<float>(q) *
                static_cast<float>(scales.data[r * (k / group) + j / group]);
      out.data[r * k + j] = RoundToType(v, out.elementType);
    }
  return out;
}

absl::StatusOr<HostTensor>
RankState::kvCacheAppend(llm::KVCacheAppendOp op) {
  const HostTensor &cache = in(op, 0), &upd = in(op, 1);
  int64_t pos = scalarInt(in(op, 2));
  if (cache.shape[0] != upd.shape[0] || cache.shape[2] != upd.shape[2] ||
      cache.shape[3] != upd.shape[3])
    return opError(op, absl::StrCat("update ", shapeStr(upd.shape),
                                    " does not match cache ",
                                    shapeStr(cache.shape),
                                    " in batch, heads or head dimension"));
  int64_t B = cache.shape[0], Smax = cache.shape[1], Snew = upd.shape[1];
  int64_t row = cache.shape[2] * cache.shape[3];
  // pos > Smax - Snew, not pos + Snew > Smax: the sum overflows int64 for
  // a position near 2^63, wrapping negative past the check.
  if (pos < 0 || pos > Smax - Snew)
    return absl::OutOfRangeError(absl::StrCat(
        opName(op), ": position ", pos, " + ", Snew,
        " new rows exceeds the cache length ", Smax));
  // The cache is updated in place when this is its last use (`cache` is
  // not used below: taking it ends that reference).
  REF_ASSIGN_OR_RETURN(HostTensor out, takeOrCopy(op, 0));
  if (Snew * row == 0)
    return out;
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(upd.data.begin() + b * Snew * row, Snew * row,
                out.data.begin() + (b * Smax + pos) * row);
  return out;
}

//===----------------------------------------------------------------------===//
// Collectives across simulated ranks
//===----------------------------------------------------------------------===//

absl::Status runCollective(llvm::ArrayRef<Operation *> ops,
                           std::vector<RankState> &ranks, HostBudget &budget) {
  int64_t n = static_cast<int64_t>(ranks.size());
  Operation *op0 = ops[0];
  for (int64_t r = 1; r < n; ++r)
    if (ops[r]->getName() != op0->getName())
      return opError(ops[r], absl::StrCat("rank ", r, " reached '",
                                          ops[r]->getName().getStringRef().str(),
                                          "' while rank 0 reached '",
                                          op0->getName().getStringRef().str(),
                                          "'; collectives must match"));
  std::vector<const HostTensor *> ins;
  for (int64_t r = 0; r < n; ++r) {
    ins.push_back(&ranks[r].operand(ops[r], 0));
    if (ins.back()->shape != ins[0]->shape)
      return opError(ops[r], absl::StrCat("rank ", r, " input ",
                                          shapeStr(ins.back()->shape),
                                          " differs from rank 0's ",
                                          shapeStr(ins[0]->shape)));
  }
  auto checkGroup = [&](int64_t group) -> absl::Status {
    if (group != n)
      return opError(op0, absl::StrCat("group_size ", group, " differs from ",
                                       n, " simulated ranks"));
    return absl::OkStatus();
  };
  // `copies` tensors of `shape` for what the collective makes.
  auto reserve = [&](absl::string_view what, llvm::ArrayRef<int64_t> shape,
                     int64_t copies) -> absl::Status {
    std::optional<int64_t> count = checkedProduct(shape);
    if (count && llvm::MulOverflow(*count, copies, *count))
      count = std::nullopt;
    return budget.reserve(
        opName(op0),
        absl::StrCat(what, " (", copies, " x ",
                     tensorStr(ins[0]->elementType, shape), ")"),
        count);
  };
  auto reduceAll = [&](bool isMax) {
    HostTensor sum = *ins[0];
    for (int64_t r = 1; r < n; ++r)
      for (size_t i = 0; i < sum.data.size(); ++i)
        sum.data[i] = isMax ? nanMax(sum.data[i], ins[r]->data[i])
                            : sum.data[i] + ins[r]->data[i];
    roundInPlace(sum);
    return sum;
  };
  // Every rank gets `t` (copies but the last, which is moved).
  auto giveAll = [&](HostTensor t) {
    for (int64_t r = 0; r + 1 < n; ++r)
      ranks[r].setResult(ops[r], t);
    ranks[n - 1].setResult(ops[n - 1], std::move(t));
  };
  if (auto ar = dyn_cast<llm::AllReduceOp>(op0)) {
    if (absl::Status s = checkGroup(ar.getGroupSize()); !s.ok())
      return s;
    if (absl::Status s = reserve("the results", ins[0]->shape, n); !s.ok())
      return s;
    giveAll(reduceAll(ar.getKind() == llm::ReduceKind::max));
    return absl::OkStatus();
  }
  if (auto ag = dyn_cast<llm::AllGatherOp>(op0)) {
    if (absl::Status s = checkGroup(ag.getGroupSize()); !s.ok())
      return s;
    int64_t dim = ag.getDim();
    Shape to = ins[0]->shape;
    int64_t rows = to[dim];
    if (llvm::MulOverflow(to[dim], n, to[dim]))
      return opError(op0, absl::StrCat("result dimension ", dim, " (", rows,
                                       " x ", n, " ranks) overflows int64"));
    if (absl::Status s = reserve("the results", to, n); !s.ok())
      return s;
    HostTensor out;
    out.elementType = ins[0]->elementType;
    out.shape = to;
    out.data.assign(product(to), 0.0);
    int64_t outer = product(ArrayRef<int64_t>(to).take_front(dim));
    int64_t inner = product(ArrayRef<int64_t>(to).drop_front(dim + 1));
    if (!out.data.empty())
      for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < outer; ++o)
          std::copy_n(ins[r]->data.begin() + o * rows * inner, rows * inner,
                      out.data.begin() + (o * to[dim] + r * rows) * inner);
    giveAll(std::move(out));
    return absl::OkStatus();
  }
  auto rs = cast<llm::ReduceScatterOp>(op0);
  if (absl::Status s = checkGroup(rs.getGroupSize()); !s.ok())
    return s;
  int64_t dim = rs.getDim();
  if (ins[0]->shape[dim] % n != 0)
    return opError(op0, absl::StrCat("dimension ", dim, " of size ",
                                     ins[0]->shape[dim],
                                     " does not divide by group_size ", n));
  // The sum, then one chunk per rank (as much again in all).
  if (absl::Status s = reserve("the sum and its chunks", ins[0]->shape, 2);
      !s.ok())
    return s;
  HostTensor sum = reduceAll(rs.getKind() == llm::ReduceKind::max);
  Shape to = sum.shape;
  int64_t rows = to[dim] / n;
  to[dim] = rows;
  int64_t outer = product(ArrayRef<int64_t>(to).take_front(dim));
  int64_t inner = product(ArrayRef<int64_t>(to).drop_front(dim + 1));
  for (int64_t r = 0; r < n; ++r) {
    HostTensor out;
    out.elementType = sum.elementType;
    out.shape = to;
    out.data.assign(product(to), 0.0);
    if (!out.data.empty())
      for (int64_t o = 0; o < outer; ++o)
        std::copy_n(sum.data.begin() + (o * rows * n + r * rows) * inner,
                    rows * inner, out.data.begin() + o * rows * inner);
    ranks[r].setResult(ops[r], std::move(out));
  }
  return absl::OkStatus();
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

double MultiplyAdds(Operation *op) {
  auto product = [](RankedTensorType t) {
    return t.hasStaticShape() ? double(t.getNumElements()) : -1.0;
  };
  if (auto mm = dyn_cast<llm::MatmulOp>(op)) {
    auto lhs = cast<RankedTensorType>(mm.getLhs().getType());
    auto res = cast<RankedTensorType>(mm.getResult().getType());
    int64_t k = lhs.getDimSize(lhs.getRank() - (mm.getTransposeLhs() ? 2 : 1));
    if (product(res) < 0 || ShapedType::isDynamic(k))
      return -1;
    return product(res) * double(k);
  }
  if (auto at = dyn_cast<llm::AttentionOp>(op)) {
    auto q = cast<RankedTensorType>(at.getQuery().getType());
    auto k = cast<RankedTensorType>(at.getKey().getType());
    if (product(q) < 0 || k.isDynamicDim(1))
      return -1;
    return 2.0 * product(q) * double(k.getDimSize(1));
  }
  return 0;
}

absl::StatusOr<std::vector<HostTensor>>
Evaluate(func::FuncOp fn, llvm::ArrayRef<HostTensor> inputs,
         const EvaluateOptions &options) {
  HostBudget budget(options.max_host_bytes, options.max_multiply_adds);
  RankState state(fn, &budget);
  if (absl::Status s = state.bindInputs(inputs); !s.ok())
    return s;
  absl::StatusOr<Operation *> stopped =
      state.runUntilCollective(/*allowMultiRank=*/false);
  if (!stopped.ok())
    return stopped.status();
  return std::move(state.results());
}

absl::StatusOr<std::vector<std::vector<HostTensor>>>
EvaluateRanks(llvm::ArrayRef<func::FuncOp> fns,
              llvm::ArrayRef<std::vector<HostTensor>> inputs,
              const EvaluateOptions &options) {
  if (fns.empty() || fns.size() != inputs.size())
    return absl::InvalidArgumentError(
        absl::StrCat("EvaluateRanks expects one input list per function, found ",
                     fns.size(), " functions and ", inputs.size(),
                     " input lists"));
  HostBudget budget(options.max_host_bytes, options.max_multiply_adds);
  std::vector<RankState> ranks;
  for (func::FuncOp fn : fns)
    ranks.emplace_back(fn, &budget);
  for (size_t r = 0; r < ranks.size(); ++r)
    if (absl::Status s = ranks[r].bindInputs(inputs[r]); !s.ok())
      return absl::Status(s.code(), absl::StrCat("rank ", r, ": ", s.message()));
  while (true) {
    std::vector<Operation *> stops;
    for (size_t r = 0; r < ranks.size(); ++r) {
      absl::StatusOr<Operation *> op =
          ranks[r].runUntilCollective(/*allowMultiRank=*/true);
      if (!op.ok())
        return absl::Status(op.status().code(),
                            absl::StrCat("rank ", r, ": ", op.status().message()));
      stops.push_back(*op);
    }
    size_t done = llvm::count(stops, nullptr);
    if (done == ranks.size())
      break;
    if (done != 0)
      return absl::InvalidArgumentError(
          "some ranks returned while others wait in a collective");
    absl::Status s = runCollective(stops, ranks, budget);
    budget.endOp();
    if (!s.ok())
      return s;
  }
  std::vector<std::vector<HostTensor>> out;
  for (RankState &r : ranks)
    out.push_back(std::move(r.results()));
  return out;
}

} // namespace llmc::reference
