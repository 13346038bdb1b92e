//===- InlineFusion.cpp - undo llmc-fuse ----------------------------------===//

#include "LLM/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace llmc::llm;

// fusion(ins) { body; yield ys } => body[ins]; uses of the results => ys
void llmc::llm::inlineFusionRegions(func::FuncOp fn) {
  SmallVector<FusionOp> fusions;
  fn.walk([&](FusionOp f) { fusions.push_back(f); });
  for (FusionOp f : fusions) {
    OpBuilder b(f);
    IRMapping map;
    Block &body = f.getBody().front();
    for (auto [arg, in] : llvm::zip(body.getArguments(), f.getInputs()))
      map.map(arg, in);
    for (Operation &op : body.without_terminator())
      b.clone(op, map);
    auto yield = cast<YieldOp>(body.getTerminator());
    for (auto [r, v] : llvm::zip(f.getResults(), yield.getValues()))
      r.replaceAllUsesWith(map.lookupOrDefault(v));
    f.erase();
  }
}
