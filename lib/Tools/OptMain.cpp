//===- OptMain.cpp - entry point of llmc-opt ------------------------------===//
//
// Lives in libllmc.so so that MLIR (linked statically into the library) has a
// single copy: llmc-opt itself only calls llmcOptMain.
//
//===----------------------------------------------------------------------===//

#include "llmc/InitAllDialects.h"
#include "llmc/InitAllPasses.h"
#include "llmc/Tools.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int llmc::optMain(int argc, char **argv) {
  mlir::DialectRegistry registry;
  llmc::registerAllDialects(registry);
  llmc::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "llmc optimizer driver\n", registry));
}
