//===- Pipeline.cpp - the llmc-pipeline pass pipeline ---------------------===//

#include "LLM/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace llmc::llm;

void llmc::llm::buildLLMCPipeline(OpPassManager &pm,
                                  const PipelineOptions &options) {
  OpPassManager &fn = pm.nest<func::FuncOp>();
  fn.addPass(createCanonicalizerPass());
  fn.addPass(createRaisePass());
  PrecisionPassOptions precision;
  precision.policy = options.precision;
  precision.weightOnly = options.weightOnly;
  fn.addPass(createPrecisionPass(precision));
  PadLayoutPassOptions pad;
  pad.multiple = options.padMultiple;
  pad.vocabMultiple = options.vocabMultiple;
  fn.addPass(createPadLayoutPass(pad));
  fn.addPass(createCanonicalizerPass());
  fn.addPass(createCSEPass());
  FusePassOptions fuse;
  fuse.elementwise = options.fuseElementwise;
  fuse.residualNorm = options.fuseResidualNorm;
  fuse.gemmEpilogue = options.fuseGemmEpilogue;
  fuse.ropeAttention = options.fuseRopeAttention;
  fn.addPass(createFusePass(fuse));
  PlanMemoryPassOptions memory;
  memory.alignment = options.alignment;
  memory.report = options.report;
  fn.addPass(createPlanMemoryPass(memory));
}

void llmc::llm::registerLLMCPipeline() {
  PassPipelineRegistration<PipelineOptions>(
      "llmc-pipeline",
      "canonicalize -> raise -> precision -> pad-layout -> canonicalize, cse -> fuse "
      "-> plan-memory on every func.func",
      buildLLMCPipeline);
}
