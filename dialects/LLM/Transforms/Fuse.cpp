//===- Fuse.cpp - group ops into llm.fusion regions -----------------------===//
//
// Materializes the groups of planFusionGroups (FusionPlan.h) as llm.fusion
// ops: one region per kernel.
//
//===----------------------------------------------------------------------===//

#include "LLM/Transforms/FusionPlan.h"
#include "LLM/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"

namespace llmc::llm {
#define GEN_PASS_DEF_FUSEPASS
#include "LLM/Transforms/Passes.h.inc"
} // namespace llmc::llm

using namespace mlir;
using namespace llmc::llm;

FusionOp llmc::llm::materializeFusion(const FusionGroup &group) {
  llvm::DenseSet<Operation *> members(group.ops.begin(), group.ops.end());
  SmallVector<Value> inputs;
  llvm::DenseSet<Value> seen;
  SmallVector<Location> locs;
  for (Operation *op : group.ops) {
    locs.push_back(op->getLoc());
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if ((!def || !members.contains(def)) && seen.insert(v).second)
        inputs.push_back(v);
    }
  }
  SmallVector<Value> outputs;
  for (Operation *op : group.ops)
    for (Value r : op->getResults())
      if (llvm::any_of(r.getUsers(), [&](Operation *u) {
            return !members.contains(u);
          }))
        outputs.push_back(r);

  Operation *last = group.ops.back();
  OpBuilder b(last);
  Location loc = b.getFusedLoc(locs);
  SmallVector<Type> resultTypes;
  for (Value v : outputs)
    resultTypes.push_back(v.getType());
  auto fusion =
      FusionOp::create(b, loc, resultTypes,
                       b.getStringAttr(fusionKindName(group.kind)), inputs);
  Block *block = new Block();
  fusion.getBody().push_back(block);
  IRMapping map;
  for (Value in : inputs)
    map.map(in, block->addArgument(in.getType(), in.getLoc()));
  OpBuilder inner = OpBuilder::atBlockEnd(block);
  for (Operation *op : group.ops)
    inner.clone(*op, map);
  SmallVector<Value> yielded;
  for (Value v : outputs)
    yielded.push_back(map.lookup(v));
  YieldOp::create(inner, loc, yielded);

  for (auto [v, r] : llvm::zip(outputs, fusion.getResults()))
    v.replaceUsesWithIf(r, [&](OpOperand &use) {
      return !members.contains(use.getOwner());
    });
  for (Operation *op : llvm::reverse(group.ops))
    op->erase();
  return fusion;
}

namespace {
struct FusePass : llmc::llm::impl::FusePassBase<FusePass> {
  using FusePassBase::FusePassBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.isExternal())
      return;
    if (!fn.getBody().hasOneBlock()) {
      fn.emitOpError() << "expected a single-block body for fusion, found "
                       << fn.getBody().getBlocks().size() << " blocks";
      return signalPassFailure();
    }
    FusionPlanOptions options;
    options.elementwise = elementwise;
    options.residualNorm = residualNorm;
    options.gemmEpilogue = gemmEpilogue;
    options.ropeAttention = ropeAttention;
    for (const FusionGroup &group :
         planFusionGroups(fn.getBody().front(), options))
      materializeFusion(group);
  }
};
} // namespace
