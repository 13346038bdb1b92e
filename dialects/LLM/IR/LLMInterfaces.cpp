//===- LLMInterfaces.cpp - what llm traits and interfaces mean ------------===//

#include "LLM/IR/LLMInterfaces.h"

#include "LLM/IR/LLMOps.h"

using namespace mlir;
using namespace llmc::llm;

bool llmc::llm::isElementwise(Operation *op) {
  return op->hasTrait<OpTrait::Elementwise>() &&
         isa_and_nonnull<LLMDialect>(op->getDialect());
}
