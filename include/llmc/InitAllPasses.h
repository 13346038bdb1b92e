//===- InitAllPasses.h - register every llmc pass ---------------*- C++ -*-===//
//
// The one registration point for llmc's passes and pipelines, plus the
// upstream passes llmc-opt users expect (canonicalize, cse, ...).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_INITALLPASSES_H
#define LLMC_INITALLPASSES_H

namespace llmc {

/// Registers llmc's passes and pipelines and the upstream transforms passes.
void registerAllPasses();

} // namespace llmc

#endif // LLMC_INITALLPASSES_H
