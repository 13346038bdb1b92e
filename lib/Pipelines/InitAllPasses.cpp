//===- InitAllPasses.cpp - register every llmc pass ----------------------===//

#include "llmc/InitAllPasses.h"

#include "llmc/Pipelines/Pipeline.h"

#include "Exec/Transforms/Passes.h"
#include "LLM/Transforms/Passes.h"
#include "mlir/Transforms/Passes.h"

void llmc::registerAllPasses() {
  mlir::registerTransformsPasses();
  llm::registerLLMTransformsPasses();
  exec::registerExecTransformsPasses();
  registerCompilerPasses();
  registerPipelines();
}
