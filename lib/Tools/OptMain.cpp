//===- OptMain.cpp - entry point of llmc-opt ------------------------------===//
//
// Lives in libllmc.so so that MLIR (linked statically into the library) has a
// single copy: llmc-opt itself only calls llmcOptMain.
//
// MLIR's MlirOptMain(argc, argv, ...) as MLIR 22 implements it, with one
// step added: the input is checked against llmc's nesting limit
// (llmc/Support/ParseSource.h) before MLIR parses it, so a deeply nested
// source is an error instead of a stack overflow. Flags, output file and
// --split-input-file / --verify-diagnostics behave as in mlir-opt.
//
//===----------------------------------------------------------------------===//

#include "llmc/InitAllDialects.h"
#include "llmc/InitAllPasses.h"
#include "llmc/Support/ParseSource.h"
#include "llmc/Tools.h"

#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llmc/Support/Version.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

int llmc::optMain(int argc, char **argv) {
  mlir::DialectRegistry registry;
  llmc::registerAllDialects(registry);
  llmc::registerAllPasses();
  llvm::cl::SetVersionPrinter(llmc::printVersion);
  auto [inputFilename, outputFilename] = mlir::registerAndParseCLIOptions(
      argc, argv, "llmc optimizer driver\n", registry);

  llvm::InitLLVM y(argc, argv);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  // --show-dialects and --list-passes print and return before any input.
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(mlir::MlirOptMain(
        llvm::outs(), llvm::MemoryBuffer::getMemBuffer(""), registry, config));

  if (inputFilename == "-" &&
      llvm::sys::Process::FileDescriptorIsDisplayed(fileno(stdin)))
    llvm::errs() << "(processing input from stdin now, hit ctrl-c/ctrl-d to "
                    "interrupt)\n";
  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> file =
      mlir::openInputFile(inputFilename, &errorMessage);
  if (!file) {
    llvm::errs() << errorMessage << "\n";
    return EXIT_FAILURE;
  }
  if (std::optional<llmc::NestingViolation> v =
          llmc::checkNesting(file->getBuffer(), config.inputSplitMarker())) {
    llvm::SourceMgr sourceMgr;
    const char *at = file->getBufferStart() + v->offset;
    sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
    sourceMgr.PrintMessage(llvm::errs(), llvm::SMLoc::getFromPointer(at),
                           llvm::SourceMgr::DK_Error, v->message);
    return EXIT_FAILURE;
  }
  std::unique_ptr<llvm::ToolOutputFile> output =
      mlir::openOutputFile(outputFilename, &errorMessage);
  if (!output) {
    llvm::errs() << errorMessage << "\n";
    return EXIT_FAILURE;
  }
  if (mlir::failed(
          mlir::MlirOptMain(output->os(), std::move(file), registry, config)))
    return EXIT_FAILURE;
  output->keep();
  return EXIT_SUCCESS;
}
