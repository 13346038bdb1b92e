//===- LLMDialect.cpp - the llm dialect ----------------------------------===//

#include "LLM/IR/LLMDialect.h"

#include "LLM/IR/LLMOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace llmc::llm;

#include "LLM/IR/LLMDialect.cpp.inc"

void LLMDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "LLM/IR/LLMOps.cpp.inc"
      >();
}

Operation *LLMDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                           Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, type, elements);
}
