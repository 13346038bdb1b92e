//===- Parameters.cpp - which function arguments are parameters ----------===//
//
// One definition of "parameter" (weight) shared by the weight-only rewrite of
// llmc-precision and by codegen's parameter-preparation segment (work that
// depends on parameters only runs once per parameter set).
//
//===----------------------------------------------------------------------===//

#include "LLM/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseSet.h"

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
    return Slot::Weight; // bias
  }
  if (isa<RMSNormOp, LayerNormOp>(op))
    return index == 0 ? Slot::Activation : Slot::Weight;
  if (isa<QuantizeWeightOp>(op))
    return Slot::Weight;
  if (isa<GatherOp>(op))
    return index == 0 ? Slot::Weight : Slot::Activation;
  if (isa<SoftmaxOp, RoPEOp, AttentionOp, KVCacheAppendOp, AllReduceOp,
          AllGatherOp, ReduceScatterOp, func::ReturnOp, FusionOp>(op))
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
