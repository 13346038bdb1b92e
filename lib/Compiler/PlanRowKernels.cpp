//===- PlanRowKernels.cpp - row reductions with their elementwise ops -----===//
//
// The row kernels of planKernels (KernelPlan.h): a reduction over the last
// dimension joins the elementwise kernel that computes its input (the
// prologue) and the elementwise kernels that read its result (the
// epilogue), and other reductions of the same rows, into one
// cuda::EmitRowFused kernel. The decomposed RMSNorm backward of a training
// graph (g*w*x summed per row, then dx from the sum) was four kernels
// writing and re-reading three float32 tensors of the activation's size; as
// one row kernel it reads its inputs once from memory and writes dx.
//
//===----------------------------------------------------------------------===//

#include "KernelPlan.h"

#include "LLM/IR/LLMInterfaces.h"
#include "LLM/Transforms/FusionPlan.h"

#include "absl/strings/str_cat.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace llmc;
using namespace llmc::llm;

static ArrayRef<int64_t> shapeOf(Type t) { return cast<RankedTensorType>(t).getShape(); }

std::optional<RowSpace> llmc::rowReductionSpace(Operation *op) {
  if (!isa<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceMinOp>(op))
    return std::nullopt;
  auto in = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  auto out = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!in || !out || !in.hasStaticShape() || in.getRank() < 1 || in.getNumElements() == 0 ||
      !isa<FloatType>(in.getElementType()) || !isa<FloatType>(out.getElementType()))
    return std::nullopt;
  ArrayRef<int64_t> dims = cast<DenseI64ArrayAttr>(op->getAttr("dims")).asArrayRef();
  if (dims.size() != 1 || dims[0] != in.getRank() - 1)
    return std::nullopt;
  RowSpace space;
  space.shape.assign(in.getShape().begin(), in.getShape().end());
  space.n = in.getShape().back();
  space.rows = in.getNumElements() / space.n;
  return space;
}

bool llmc::isColumnSumOf(Operation *op, const RowSpace &space) {
  if (!isa<ReduceSumOp>(op))
    return false;
  auto in = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  auto out = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!in || !out || in.getShape() != ArrayRef<int64_t>(space.shape) ||
      !isa<FloatType>(in.getElementType()) || !isa<FloatType>(out.getElementType()))
    return false;
  ArrayRef<int64_t> dims = cast<DenseI64ArrayAttr>(op->getAttr("dims")).asArrayRef();
  if (static_cast<int64_t>(dims.size()) != in.getRank() - 1)
    return false;
  for (auto [i, d] : llvm::enumerate(dims))
    if (d != static_cast<int64_t>(i))
      return false;
  return true;
}

bool llmc::isRowShaped(Type type, const RowSpace &space) {
  ArrayRef<int64_t> s = shapeOf(type);
  ArrayRef<int64_t> lead = ArrayRef<int64_t>(space.shape).drop_back();
  return s == lead || (s.size() == space.shape.size() && s.back() == 1 && s.drop_back() == lead);
}

Value llmc::rowKernelMember(Value v, const llvm::SmallPtrSetImpl<Operation *> &members,
                            const RowSpace &space) {
  for (Value cur = v;;) {
    Operation *def = cur.getDefiningOp();
    if (def && members.contains(def))
      return cur;
    if (auto b = dyn_cast_or_null<BroadcastOp>(def)) {
      // A per-row value broadcast along the row (or to another row shape).
      Type in = b.getInput().getType();
      if (!isRowShaped(in, space))
        return {};
      if (!isRowShaped(b.getType(), space) &&
          !(shapeOf(b.getType()) == ArrayRef<int64_t>(space.shape) &&
            shapeOf(in).size() == space.shape.size()))
        return {};
      cur = b.getInput();
      continue;
    }
    if (auto r = dyn_cast_or_null<ReshapeOp>(def)) {
      if (!isRowShaped(r.getInput().getType(), space) || !isRowShaped(r.getType(), space))
        return {};
      cur = r.getInput();
      continue;
    }
    return {};
  }
}

/// Whether `v` (not a member) can be read by the row kernel: a splat
/// constant, possibly broadcast or reshaped; a value of the full or a row
/// shape that is not a view or is a reshape of one (dense); a dense per-row
/// value broadcast along the row; a dense [n] (or [1, .., 1, n]) value
/// broadcast over the rows; a dense single element broadcast.
static bool readableOutside(Value v, const RowSpace &space) {
  // Row-major in memory: not a view, or a reshape of such a value (a GEMM's
  // [M, N] result read as [B, S, N]).
  auto dense = [](Value x) {
    while (auto r = x.getDefiningOp<ReshapeOp>())
      x = r.getInput();
    Operation *def = x.getDefiningOp();
    return !def || (!isa<ViewLikeOpInterface>(def) &&
                    (!def->hasTrait<OpTrait::ConstantLike>() || isSplatConstant(x)));
  };
  auto splatThroughViews = [](Value x) {
    while (Operation *def = x.getDefiningOp()) {
      if (isSplatConstant(x))
        return true;
      if (!isa<BroadcastOp, ReshapeOp>(def))
        return false;
      x = def->getOperand(0);
    }
    return false;
  };
  if (splatThroughViews(v))
    return true;
  ArrayRef<int64_t> shape = shapeOf(v.getType());
  bool full = shape == ArrayRef<int64_t>(space.shape);
  if (!full && !isRowShaped(v.getType(), space))
    return false;
  if (dense(v))
    return true;
  auto b = v.getDefiningOp<BroadcastOp>();
  if (!b || !full || !dense(b.getInput()))
    return false;
  ArrayRef<int64_t> in = shapeOf(b.getInput().getType());
  int64_t numel = 1;
  for (int64_t d : in)
    numel *= d;
  if (numel == 1)
    return true; // a scalar
  if (in.size() == space.shape.size() && isRowShaped(b.getInput().getType(), space))
    return true; // per row
  // Per column: [n] or [1, .., 1, n].
  return !in.empty() && in.back() == space.n && numel == space.n;
}

void llmc::outsideUsers(Value v, const llvm::SmallPtrSetImpl<Operation *> &members,
                        SmallVectorImpl<Operation *> &users) {
  for (Operation *user : v.getUsers()) {
    if (members.contains(user))
      continue;
    if (isa<ViewLikeOpInterface>(user) && user->getNumResults() == 1) {
      outsideUsers(user->getResult(0), members, users);
      continue;
    }
    users.push_back(user);
  }
}

std::optional<std::pair<Operation *, std::string>>
llmc::rowKernelProblem(ArrayRef<Operation *> ops,
                       const llvm::DenseSet<Operation *> &prepared) {
  auto problem = [](Operation *op, std::string why) {
    return std::make_optional(std::make_pair(op, std::move(why)));
  };
  if (ops.empty())
    return std::nullopt;
  std::optional<RowSpace> space;
  int reductions = 0;
  for (Operation *op : ops) {
    if (std::optional<RowSpace> s = rowReductionSpace(op)) {
      if (space && s->shape != space->shape)
        return problem(op, "it reduces rows of another shape than the kernel's first reduction");
      space = s;
      ++reductions;
    }
  }
  if (!space)
    return problem(ops.front(), "a row_reduction kernel needs a reduction over the last "
                                "dimension of a float tensor with elements");
  if (reductions > cuda::kRowFusedMaxReductions)
    return problem(ops.back(), absl::StrCat("the kernel has ", reductions,
                                            " reductions, more than ",
                                            cuda::kRowFusedMaxReductions));
  llvm::SmallPtrSet<Operation *, 32> members(ops.begin(), ops.end());
  llvm::SmallPtrSet<Operation *, 4> columns;
  for (Operation *op : ops)
    if (isColumnSumOf(op, *space))
      columns.insert(op);
  if (static_cast<int>(columns.size()) > cuda::kRowFusedMaxColumnSums)
    return problem(ops.back(), absl::StrCat("the kernel has ", columns.size(),
                                            " column sums, more than ",
                                            cuda::kRowFusedMaxColumnSums));
  if (!columns.empty() && space->n > cuda::kRowFusedMaxColumnRow)
    return problem(*columns.begin(),
                   absl::StrCat("a row kernel sums columns of rows of at most ",
                                cuda::kRowFusedMaxColumnRow, " elements; these have ", space->n));
  Operation *last = ops.back();
  Block *block = last->getBlock();
  int64_t cost = 0;
  llvm::SmallDenseSet<Value, 16> inputs;
  for (Operation *op : ops) {
    if (op->getBlock() != block || (op != last && !op->isBeforeInBlock(last)))
      return problem(op, "the members are not in program order in one block");
    if (prepared.contains(op) != prepared.contains(ops.front()))
      return problem(op, "the kernel mixes parameter-preparation work (run once per "
                         "parameter set) with per-call work");
    bool reduction = rowReductionSpace(op).has_value() || columns.contains(op);
    if (!reduction) {
      if (!isElementwise(op) || op->getNumResults() != 1)
        return problem(op, "only row reductions (with column sums of the same rows) "
                           "and elementwise ops form a row kernel");
      Type t = op->getResult(0).getType();
      if (shapeOf(t) != ArrayRef<int64_t>(space->shape) && !isRowShaped(t, *space))
        return problem(op, "its result is neither of the kernel's full shape nor one "
                           "value per row");
      cost += fusedOpCost(op);
    }
    for (Value v : op->getOperands()) {
      if (Value m = rowKernelMember(v, members, *space)) {
        if (columns.contains(m.getDefiningOp()))
          return problem(op, "it reads a column sum of the kernel, which is complete "
                             "only after the kernel");
        continue;
      }
      // Any other view of a member's result would read memory the kernel
      // has not written yet.
      Value root = v;
      while (auto view = dyn_cast_or_null<ViewLikeOpInterface>(root.getDefiningOp()))
        root = view.getViewSource();
      if (root.getDefiningOp() && members.contains(root.getDefiningOp()))
        return problem(op, "an operand is a view of a member's result that the kernel "
                           "cannot compute in place (only per-row values broadcast "
                           "along the row are)");
      if (!readableOutside(v, *space))
        return problem(op, "an operand is neither a member (or a per-row member broadcast "
                           "along the row) nor a dense, per-row, per-column or scalar read");
      if (!isSplatConstant(v))
        inputs.insert(v);
    }
    SmallVector<Operation *> users;
    outsideUsers(op->getResult(0), members, users);
    for (Operation *user : users) {
      Operation *top = block->findAncestorOpInBlock(*user);
      if (!top || !last->isBeforeInBlock(top))
        return problem(op, absl::StrCat("its result is used by ", describeOp(user),
                                        " before the kernel's last member, where the "
                                        "kernel runs and writes it"));
    }
  }
  if (static_cast<int64_t>(ops.size()) > kMaxFusedOps || cost > kMaxFusedCost ||
      static_cast<int64_t>(inputs.size()) > kMaxFusedInputs)
    return problem(last, absl::StrCat("the kernel has ", ops.size(), " ops of cost ", cost,
                                      " reading ", inputs.size(),
                                      " inputs, more than one kernel's bounds (",
                                      kMaxFusedOps, " ops, cost ", kMaxFusedCost, ", ",
                                      kMaxFusedInputs, " inputs)"));
  return std::nullopt;
}

void llmc::formRowKernels(func::FuncOp fn, KernelPlan &plan,
                          const llvm::DenseSet<Operation *> &prepared) {
  Block &body = fn.getBody().front();
  auto sorted = [](SmallVector<Operation *> ops) {
    llvm::sort(ops, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
    return ops;
  };
  // The ops `op` brings into a row kernel: its elementwise kernel, or itself.
  auto unitOf = [&](Operation *op) -> SmallVector<Operation *> {
    if (auto it = plan.groupOf.find(op); it != plan.groupOf.end())
      return SmallVector<Operation *>(plan.groups[it->second]);
    return {op};
  };
  auto columnUnits = [&](ArrayRef<Operation *> ops,
                         const llvm::SmallPtrSetImpl<Operation *> &members,
                         const RowSpace &space) {
    SmallVector<SmallVector<Operation *>> units;
    llvm::SmallPtrSet<Operation *, 8> seen;
    auto consider = [&](Value v) {
      for (Operation *user : v.getUsers()) {
        if (members.contains(user) || !seen.insert(user).second)
          continue;
        if (isColumnSumOf(user, space)) {
          units.push_back({user});
          continue;
        }
        if (!isElementwise(user) || !plan.groupOf.count(user))
          continue;
        SmallVector<Operation *> unit = unitOf(user);
        llvm::SmallPtrSet<Operation *, 16> inUnit(unit.begin(), unit.end());
        SmallVector<Operation *> sinks;
        bool onlyColumns = true;
        for (Operation *u : unit) {
          SmallVector<Operation *> users;
          outsideUsers(u->getResult(0), inUnit, users);
          for (Operation *r : users) {
            if (isColumnSumOf(r, space))
              sinks.push_back(r);
            else if (!members.contains(r))
              onlyColumns = false;
          }
        }
        if (onlyColumns && !sinks.empty()) {
          unit.append(sinks.begin(), sinks.end());
          units.push_back(std::move(unit));
        }
      }
    };
    for (Operation *m : ops) {
      consider(m->getResult(0));
      for (Value v : m->getOperands())
        if (!isSplatConstant(v))
          consider(v);
    }
    return units;
  };
  for (Operation &seed : body) {
    std::optional<RowSpace> space = rowReductionSpace(&seed);
    if (!space || plan.rowGroupOf.count(&seed))
      continue;
    // A kernel runs either once per parameter set or on every call.
    const bool seedPrepared = prepared.contains(&seed);
    SmallVector<Operation *> ops = {&seed};
    auto tryJoin = [&](ArrayRef<Operation *> more) {
      if (llvm::any_of(more, [&](Operation *m) {
            return plan.rowGroupOf.count(m) || plan.gemvGroupOf.count(m) ||
                   plan.ropeCacheWriteOf.count(m) || plan.attentionStatsOf.count(m) ||
                   plan.fusedIntoNorm.contains(m) || prepared.contains(m) != seedPrepared;
          }))
        return false;
      SmallVector<Operation *> merged(ops);
      merged.append(more.begin(), more.end());
      merged = sorted(std::move(merged));
      if (rowKernelProblem(merged, prepared))
        return false;
      ops = std::move(merged);
      return true;
    };
    // The prologue: the elementwise kernel computing the reduced value.
    if (Operation *def = seed.getOperand(0).getDefiningOp(); def && plan.groupOf.count(def))
      tryJoin(unitOf(def));
    // The epilogue and sibling reductions: kernels reading a member's
    // result (directly or through views); and the elementwise kernels
    // computing a member's operand (a residual add before the norm's cast);
    // until none more joins.
    for (bool changed = true; changed;) {
      changed = false;
      llvm::SmallPtrSet<Operation *, 32> members(ops.begin(), ops.end());
      SmallVector<Operation *> readers;
      for (Operation *m : ops)
        outsideUsers(m->getResult(0), members, readers);
      SmallVector<Operation *> producers;
      for (Operation *m : ops)
        for (Value v : m->getOperands())
          if (Operation *def = v.getDefiningOp();
              def && !members.contains(def) && isElementwise(def) && plan.groupOf.count(def))
            producers.push_back(def);
      for (Operation *def : producers)
        if (tryJoin(unitOf(def))) {
          changed = true;
          break;
        }
      if (changed)
        continue;
      for (Operation *reader : readers) {
        bool ew = isElementwise(reader) && plan.groupOf.count(reader);
        std::optional<RowSpace> s = rowReductionSpace(reader);
        if (!ew && !(s && s->shape == space->shape))
          continue;
        if (tryJoin(unitOf(reader))) {
          changed = true;
          break;
        }
      }
      if (changed)
        continue;
      // Column sums of these rows (a norm's weight gradient,
      // sum(dy * x_hat) over [B, S]) of a value the kernel computes or reads,
      // or of an elementwise kernel's result computed from one (with no
      // other use): the kernel sums it over the rows it takes.
      for (SmallVector<Operation *> &unit : columnUnits(ops, members, *space)) {
        if (tryJoin(unit)) {
          changed = true;
          break;
        }
      }
    }
    if (ops.size() < 2)
      continue;
    int id = plan.rowGroups.size();
    for (Operation *op : ops) {
      plan.rowGroupOf[op] = id;
      if (auto it = plan.groupOf.find(op); it != plan.groupOf.end()) {
        plan.groups[it->second].clear(); // an empty group forms no kernel
        plan.groupOf.erase(it);
      }
    }
    plan.rowGroups.push_back(std::move(ops));
  }
}
