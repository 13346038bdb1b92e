//===- MlirContext.h - one MLIRContext with llmc's dialects per test binary -===//
#ifndef LLMC_TEST_UNIT_MLIRCONTEXT_H
#define LLMC_TEST_UNIT_MLIRCONTEXT_H

#include "llmc/InitAllDialects.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

namespace llmc::test {

/// A process-wide MLIRContext with every llmc dialect registered and loaded,
/// for tests that parse IR outside a fixture. Created on first use and never
/// destroyed (modules parsed in it may outlive a test).
inline mlir::MLIRContext &SharedContext() {
  static mlir::MLIRContext *ctx = [] {
    mlir::DialectRegistry registry;
    llmc::registerAllDialects(registry);
    auto *c = new mlir::MLIRContext(registry);
    c->loadAllAvailableDialects();
    return c;
  }();
  return *ctx;
}

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_MLIRCONTEXT_H
