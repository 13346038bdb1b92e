//===- ToolSupport.cpp - shared front end of llmc's command-line tools ----===//

#include "ToolSupport.h"
#include "PipelineFlags.h"

#include "llmc/InitAllDialects.h"

#include "mlir/IR/MLIRContext.h"

using namespace mlir;

std::unique_ptr<MLIRContext> llmc::tools::makeContext() {
  DialectRegistry registry;
  llmc::registerAllDialects(registry);
  // One function at a time: no pass runs in parallel, and MLIR's
  // --mlir-print-ir-module-scope needs a context without threads.
  auto ctx = std::make_unique<MLIRContext>(registry, MLIRContext::Threading::DISABLED);
  ctx->loadAllAvailableDialects();
  ctx->printOpOnDiagnostic(false);
  return ctx;
}

func::FuncOp llmc::tools::findFunction(ModuleOp module, llvm::StringRef name,
                                       std::string &error) {
  std::string names;
  for (auto f : module.getOps<func::FuncOp>()) {
    if (!name.empty() && f.getSymName() == name && f.isExternal()) {
      error = "@" + name.str() + " is a declaration (no body)";
      return nullptr;
    }
    if ((name.empty() && !f.isExternal()) || f.getSymName() == name)
      return f;
    names += (names.empty() ? "" : ", ") + f.getSymName().str();
  }
  error = name.empty() ? "no function with a body in the module"
                       : "no function named '" + name.str() +
                             "' (the module has: " + names + ")";
  // Functions are looked up at the top level only: say so when one sits in a
  // nested module (the tools compile one top-level func.func).
  bool nested = false;
  module.walk([&](func::FuncOp f) { nested |= f->getParentOp() != module.getOperation(); });
  if (nested)
    error += "; functions in nested modules are not searched: put the function at the "
             "top level of the file";
  return nullptr;
}

std::optional<std::map<std::string, int64_t>>
llmc::tools::parseShapeBindings(llvm::ArrayRef<std::string> entries,
                                std::string &error) {
  std::map<std::string, int64_t> bindings;
  for (const std::string &s : entries) {
    auto [name, value] = llvm::StringRef(s).split('=');
    int64_t v;
    if (name.empty() || value.getAsInteger(10, v) || v < 0) {
      error = "malformed --shape '" + s + "', expected NAME=N with N >= 0";
      return std::nullopt;
    }
    // Last-wins would silently run another shape (the C API rejects it).
    if (auto [it, fresh] = bindings.emplace(name.str(), v); !fresh) {
      error = "--shape " + s + ": '" + name.str() + "' is already bound by --shape " +
              name.str() + "=" + std::to_string(it->second) +
              " (bind each dynamic dimension once)";
      return std::nullopt;
    }
  }
  return bindings;
}

std::string llmc::tools::printExecIR(func::FuncOp fn, const llmc::LowerOptions &options) {
  MLIRContext context(MLIRContext::Threading::DISABLED);
  auto op = llmc::LowerToExecIR(fn, context, options, nullptr, applyPassManagerFlags);
  if (!op.ok())
    return std::string(op.status().message());
  (*op)->print(llvm::outs());
  llvm::outs() << "\n";
  llvm::outs().flush();
  if (llvm::outs().has_error()) {
    llvm::outs().clear_error();
    return "writing the execution-level IR to stdout failed";
  }
  return "";
}
