//===- LLMDialect.cpp - the llm dialect ----------------------------------===//

#include "LLM/IR/LLMDialect.h"

#include "LLM/IR/LLMOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Diagnostics.h"

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

/// Function argument attributes: llm.dim_names is an array of non-empty
/// strings, llm.donate and llm.param are unit attributes; any other `llm.`
/// name is a typo the compiler would otherwise ignore.
LogicalResult LLMDialect::verifyRegionArgAttribute(Operation *op,
                                                   unsigned regionIndex,
                                                   unsigned argIndex,
                                                   NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  auto emit = [&]() {
    InFlightDiagnostic d = op->emitError();
    d << "attribute '" << name << "' of argument " << argIndex;
    if (auto sym = op->getAttrOfType<StringAttr>("sym_name"))
      d << " of @" << sym.getValue();
    d << " ";
    return d;
  };
  if (name == "llm.dim_names") {
    auto names = dyn_cast<ArrayAttr>(attr.getValue());
    if (!names)
      return emit() << "must be an array of strings, found "
                    << attr.getValue();
    for (auto [i, entry] : llvm::enumerate(names)) {
      auto s = dyn_cast<StringAttr>(entry);
      if (!s || s.getValue().empty())
        return emit() << "must be an array of non-empty strings (one name "
                         "per dynamic dimension), found "
                      << entry << " at position " << i;
    }
    return success();
  }
  if (name == "llm.donate" || name == "llm.param") {
    if (!isa<UnitAttr>(attr.getValue()))
      return emit() << "is a unit attribute (write it without a value), "
                       "found "
                    << attr.getValue();
    return success();
  }
  return emit() << "is not an llm argument attribute (expected "
                   "llm.dim_names, llm.donate or llm.param)";
}
