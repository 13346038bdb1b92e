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

#include "RankState.h"

namespace llmc::reference {
namespace detail {

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
    // e5m2 encodes +-inf (the cast saturates, so RoundToType gives 57344).
    const bool hasInf =
        isa<mlir::FloatType>(t.elementType) && !isa<mlir::Float8E4M3FNType>(t.elementType);
    for (size_t k = 0; k < t.data.size(); ++k) {
      double v = t.data[k], r = RoundToType(v, t.elementType);
      if (!(r == v || (std::isnan(r) && std::isnan(v)) || (std::isinf(v) && hasInf)))
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

absl::Status RankState::checkResult(Operation *op, Value result,
                                    const HostTensor &t) {
  auto rt = cast<RankedTensorType>(result.getType());
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
  if (auto q = dyn_cast<llm::QuantizeWeightOp>(op))
    return quantizeWeight(q);
  if (auto a = dyn_cast<llm::AttentionBackwardOp>(op)) {
    if (absl::Status s = resolvePendingOperands(op); !s.ok())
      return s;
    return attentionBackward(a);
  }
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


} // namespace detail

using namespace detail;

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
    if (product(q) < 0 || k.isDynamicDim(at.kvSeqDim()))
      return -1;
    return 2.0 * product(q) * double(k.getDimSize(at.kvSeqDim()));
  }
  if (auto pa = dyn_cast<llm::PagedAttentionOp>(op)) {
    // At most: every query row over every key its block table can hold.
    auto q = cast<RankedTensorType>(pa.getQuery().getType());
    auto kp = cast<RankedTensorType>(pa.getKeyPages().getType());
    auto bt = cast<RankedTensorType>(pa.getBlockTable().getType());
    if (product(q) < 0 || kp.isDynamicDim(1) || bt.isDynamicDim(1))
      return -1;
    return 2.0 * product(q) * double(kp.getDimSize(1)) * double(bt.getDimSize(1));
  }
  if (auto va = dyn_cast<llm::VarlenAttentionOp>(op)) {
    // At most: every query row over every key.
    auto q = cast<RankedTensorType>(va.getQuery().getType());
    auto k = cast<RankedTensorType>(va.getKey().getType());
    if (product(q) < 0 || k.isDynamicDim(0))
      return -1;
    return 2.0 * product(q) * double(k.getDimSize(0));
  }
  // One pass over the scores for the statistics, four for the gradients.
  auto scorePasses = [&](Value query, Value key, double passes) {
    auto q = cast<RankedTensorType>(query.getType());
    auto k = cast<RankedTensorType>(key.getType());
    if (product(q) < 0 || k.isDynamicDim(1))
      return -1.0;
    return passes * product(q) * double(k.getDimSize(1));
  };
  if (auto lse = dyn_cast<llm::AttentionLogSumExpOp>(op))
    return scorePasses(lse.getQuery(), lse.getKey(), 1.0);
  if (auto bwd = dyn_cast<llm::AttentionBackwardOp>(op))
    return scorePasses(bwd.getQuery(), bwd.getKey(), 4.0);
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
