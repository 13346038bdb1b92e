//===- LLMDialect.cpp - the llm dialect ----------------------------------===//

#include "LLM/IR/LLMDialect.h"

#include "LLM/IR/LLMOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

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
/// strings, llm.donate and llm.param are unit attributes, llm.aliasing_output
/// is a donated argument's result index; any other `llm.` name is a typo the
/// compiler would otherwise ignore.
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
  if (name == "llm.donate" || name == "llm.param" || name == "llm.gradient") {
    if (!isa<UnitAttr>(attr.getValue()))
      return emit() << "is a unit attribute (write it without a value), "
                       "found "
                    << attr.getValue();
    return success();
  }
  if (name == "llm.aliasing_output") {
    // The donated argument's buffer may hold this result after the call
    // (XLA's input_output_alias): an index of a result of the argument's
    // own type, named by no other argument.
    auto index = dyn_cast<IntegerAttr>(attr.getValue());
    auto fn = dyn_cast<FunctionOpInterface>(op);
    if (!index || !index.getType().isSignlessInteger(64))
      return emit() << "must be an i64 result index, found " << attr.getValue();
    if (!fn)
      return emit() << "is only valid on a function's arguments";
    if (!fn.getArgAttr(argIndex, "llm.donate"))
      return emit() << "needs llm.donate on the same argument (only a donated "
                       "argument's buffer may hold a result)";
    int64_t k = index.getInt();
    ArrayRef<Type> results = fn.getResultTypes();
    if (k < 0 || k >= static_cast<int64_t>(results.size()))
      return emit() << "names result " << k << ", but the function has "
                    << results.size() << " result(s)";
    Type argType = fn.getArgumentTypes()[argIndex];
    if (results[k] != argType)
      return emit() << "names result " << k << " of type " << results[k]
                    << ", not the argument's type " << argType;
    for (unsigned other = 0; other < fn.getNumArguments(); ++other)
      if (auto o = fn.getArgAttrOfType<IntegerAttr>(other, "llm.aliasing_output");
          other != argIndex && o && o.getInt() == k)
        return emit() << "names result " << k << ", as argument " << other
                      << " does (a result has at most one aliasing argument)";
    return success();
  }
  return emit() << "is not an llm argument attribute (expected "
                   "llm.dim_names, llm.donate, llm.aliasing_output, llm.param or "
                   "llm.gradient)";
}
