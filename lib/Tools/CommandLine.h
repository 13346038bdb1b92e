//===- CommandLine.h - flag checks shared by llmc-run and llmc-compile -*- C++ -*-===//
//
// llvm::cl keeps the last value of an option given twice (`--backend=ref
// --backend=cuda` runs cuda) and says nothing; llmc's tools refuse that.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_LIB_TOOLS_COMMANDLINE_H
#define LLMC_LIB_TOOLS_COMMANDLINE_H

#include "llvm/Support/CommandLine.h"

#include <string>

namespace llmc::tools {

/// The error for the single-valued options of `category` (cl::opt, not
/// cl::list) that occur more than once in argv, naming every occurrence as
/// written: "--backend is given 2 times (--backend=ref, then
/// --backend=cuda); give it once". Empty when there is none. Call after
/// cl::ParseCommandLineOptions.
std::string repeatedOptionError(llvm::cl::OptionCategory &category, int argc,
                                char **argv);

} // namespace llmc::tools

#endif // LLMC_LIB_TOOLS_COMMANDLINE_H
