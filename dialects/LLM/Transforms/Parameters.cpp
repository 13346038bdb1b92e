//===- Parameters.cpp - which function arguments are parameters ----------===//
//
// One definition of "parameter" (weight) shared by the weight-only rewrite of
// llmc-precision and by codegen's parameter-preparation segment (work that
// depends on parameters only runs once per parameter set).
//
//===----------------------------------------------------------------------===//

#include "LLM/Transforms/Passes.h"

#include "LLM/IR/LLMInterfaces.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace llmc::llm;

namespace {

enum class Slot { Neutral, Weight, Activation };

/// How operand `index` of `op` is read: as a weight (a matmul's rank-2 RHS
/// shared across the batch, or its bias; a norm's weight/bias; the input of
/// quantize_weight; a gather table), as an activation (a matmul LHS or
/// batched RHS; the input of a norm, softmax, RoPE, attention; a KV cache or
/// its update; gather indices; a collective; a function result) or neither
/// (elementwise ops, reductions, views, ...).
Slot slotOf(Operation *op, unsigned index) {
  if (auto mm = dyn_cast<MatmulOp>(op)) {
    if (index == 0)
      return Slot::Activation;
    if (index == 1)
      return cast<RankedTensorType>(mm.getRhs().getType()).getRank() == 2
                 ? Slot::Weight
                 : Slot::Activation;
    if (op->getOperand(index) == mm.getBias())
      return Slot::Weight;
    return Slot::Neutral; // an fp8 scale
  }
  if (isa<RMSNormOp, LayerNormOp>(op))
    return index == 0 ? Slot::Activation : Slot::Weight;
  if (isa<QuantizeWeightOp>(op))
    return Slot::Weight;
  if (isa<GatherOp>(op))
    return index == 0 ? Slot::Weight : Slot::Activation;
  if (isa<SoftmaxOp, RoPEOp, AttentionOp, PagedAttentionOp, VarlenAttentionOp,
          KVCacheAppendOp, PagedKVAppendOp, IndexPutOp, AllReduceOp, AllGatherOp, ReduceScatterOp, func::ReturnOp>(op))
    return Slot::Activation;
  return Slot::Neutral;
}

bool isConstant(Value v) { return matchPattern(v, m_Constant()); }

/// The unmarked-graph rule for one argument (see parameterArguments).
bool readAsWeightOnly(BlockArgument arg) {
  bool weight = false;
  llvm::DenseSet<Value> derived = {arg};
  llvm::DenseSet<Operation *> visited;
  SmallVector<Value> worklist = {arg};
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      switch (slotOf(user, use.getOperandNumber())) {
      case Slot::Activation:
        return false;
      case Slot::Weight:
        weight = true;
        break;
      case Slot::Neutral:
        break;
      }
      // Follow ops computed from this argument (and constants) alone: casts,
      // views, pads, fp8 scaling (abs, reduce_max, div), quantization.
      if (user->getNumResults() == 0 || !visited.insert(user).second)
        continue;
      if (!llvm::all_of(user->getOperands(), [&](Value o) {
            return derived.contains(o) || isConstant(o);
          })) {
        visited.erase(user); // may become fully derived through another operand
        continue;
      }
      for (Value r : user->getResults())
        if (derived.insert(r).second)
          worklist.push_back(r);
    }
  }
  return weight;
}

} // namespace

SmallVector<bool> llmc::llm::parameterArguments(func::FuncOp fn) {
  unsigned n = fn.getNumArguments();
  SmallVector<bool> params(n, false);
  if (fn.isExternal())
    return params;
  bool anyMarked = false;
  for (unsigned i = 0; i < n; ++i)
    anyMarked |= static_cast<bool>(fn.getArgAttr(i, "llm.param"));
  for (unsigned i = 0; i < n; ++i) {
    if (fn.getArgAttr(i, "llm.donate"))
      continue; // updated in place on every call (KV caches)
    params[i] = anyMarked ? static_cast<bool>(fn.getArgAttr(i, "llm.param"))
                          : readAsWeightOnly(fn.getArgument(i));
  }
  return params;
}

bool llmc::llm::isParameterArgument(func::FuncOp fn, BlockArgument arg) {
  if (!arg || arg.getOwner() != &fn.getBody().front())
    return false;
  return parameterArguments(fn)[arg.getArgNumber()];
}

namespace {

/// The values parameter preparation may read besides constants (parameter
/// arguments, then the results of prepared ops) and the storage roots of the
/// returned values.
struct PreparationRule {
  llvm::DenseSet<Value> derived;
  llvm::DenseSet<Value> returnedRoots;

  explicit PreparationRule(func::FuncOp fn) {
    SmallVector<bool> params = parameterArguments(fn);
    for (BlockArgument arg : fn.getArguments())
      if (params[arg.getArgNumber()])
        derived.insert(arg);
    // Computed results only: a returned parameter (or a view of one) is
    // read in place, and its views may still be prepared.
    Operation *ret = fn.getBody().front().getTerminator();
    for (Value v : ret->getOperands())
      if (Value root = storageRoot(v); root.getDefiningOp() && !isConstant(root))
        returnedRoots.insert(root);
  }

  /// Why `op` cannot be prepared once per parameter set, or "".
  std::string blocker(Operation *op) const {
    if (op->getNumResults() == 0 || op->getNumOperands() == 0)
      return "it has no operands or no results";
    if (isa<DequantizeWeightOp, AllReduceOp, AllGatherOp, ReduceScatterOp,
            KVCacheAppendOp, PagedKVAppendOp, IndexPutOp, func::ReturnOp>(op))
      return "it runs on every call (collectives, kv_cache_append, paged_kv_append, index_put "
             "and dequantize_weight are never prepared once)";
    bool any = false;
    for (auto [i, o] : llvm::enumerate(op->getOperands())) {
      if (derived.contains(o))
        any = true;
      else if (!isConstant(o))
        return llvm::formatv("operand {0} is neither a parameter, a constant "
                             "nor the result of a marked op",
                             i)
            .str();
    }
    if (!any)
      return "it reads no parameter";
    for (Value r : op->getResults())
      if (returnedRoots.contains(storageRoot(r)))
        return "its result is returned (results are written on every call)";
    return "";
  }

  void add(Operation *op) {
    for (Value r : op->getResults())
      derived.insert(r);
  }
};

} // namespace

SmallVector<Operation *> llmc::llm::parameterPreparationOps(func::FuncOp fn) {
  SmallVector<Operation *> ops;
  if (fn.isExternal())
    return ops;
  PreparationRule rule(fn);
  for (Operation &op : fn.getBody().front()) {
    if (!rule.blocker(&op).empty())
      continue;
    ops.push_back(&op);
    rule.add(&op);
  }
  return ops;
}

FailureOr<SmallVector<Operation *>>
llmc::llm::decidedParameterPreparationOps(func::FuncOp fn, std::string &error) {
  if (!fn->hasAttr(kParameterPreparationPlannedAttr))
    return parameterPreparationOps(fn);
  SmallVector<Operation *> ops;
  if (fn.isExternal())
    return ops;
  PreparationRule rule(fn);
  for (Operation &op : fn.getBody().front()) {
    if (!op.hasAttr(kParameterPreparationAttr))
      continue;
    if (std::string why = rule.blocker(&op); !why.empty()) {
      llvm::raw_string_ostream os(error);
      os << "'" << op.getName() << "' at " << op.getLoc() << " is marked "
         << kParameterPreparationAttr << " but " << why;
      return failure();
    }
    ops.push_back(&op);
    rule.add(&op);
  }
  return ops;
}
