//===- Version.h - llmc's version -------------------------------*- C++ -*-===//
//
// One definition: `project(llmc VERSION ...)` in the top-level
// CMakeLists.txt, configured into lib/Support/Version.cpp.in. The C API
// (llmc_version), the tools' --version and the Python package report it.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_SUPPORT_VERSION_H
#define LLMC_SUPPORT_VERSION_H

#include "llvm/Support/raw_ostream.h"

namespace llmc {

/// llmc's version, "MAJOR.MINOR.PATCH" (semantic versioning), a static string.
const char *versionString();

/// Prints "llmc version X.Y.Z" and the LLVM/MLIR version it was built with:
/// the tools' --version (register it with llvm::cl::SetVersionPrinter).
void printVersion(llvm::raw_ostream &os);

} // namespace llmc

#endif // LLMC_SUPPORT_VERSION_H
