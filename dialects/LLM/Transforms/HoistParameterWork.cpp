//===- HoistParameterWork.cpp - mark the parameter-preparation segment ----===//
//
// llmc-hoist-parameter-work: the decision of which ops run once per
// parameter set, as attributes (llm::parameterPreparationOps is the rule;
// codegen checks and obeys the marks).
//
//===----------------------------------------------------------------------===//

#include "LLM/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace llmc::llm {
#define GEN_PASS_DEF_HOISTPARAMETERWORKPASS
#include "LLM/Transforms/Passes.h.inc"
} // namespace llmc::llm

using namespace mlir;
using namespace llmc::llm;

namespace {

struct HoistParameterWorkPass
    : llmc::llm::impl::HoistParameterWorkPassBase<HoistParameterWorkPass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.isExternal())
      return;
    if (!fn.getBody().hasOneBlock()) {
      fn.emitOpError() << "expected a single-block body, found "
                       << fn.getBody().getBlocks().size() << " blocks";
      return signalPassFailure();
    }
    UnitAttr unit = UnitAttr::get(fn.getContext());
    // Re-planning replaces earlier marks.
    for (Operation &op : fn.getBody().front())
      op.removeAttr(kParameterPreparationAttr);
    for (Operation *op : parameterPreparationOps(fn))
      op->setAttr(kParameterPreparationAttr, unit);
    fn->setAttr(kParameterPreparationPlannedAttr, unit);
  }
};

} // namespace
