// A canonical, line-oriented text form of an rt::Executable for golden files
// and diffs (test/golden, `llmc-compile --emit=executable-dump`,
// `llmc-run --emit=executable-dump`).
//
// The dump holds every field that identifies what the executable runs:
// signatures, buffers (SHA-256 of constant data), kernels (name, length and
// SHA-256 of the CUDA source, NVRTC options, headers by name with SHA-256),
// the launches in order (kernel by name, grid, block, shared memory, every
// argument, label, attention/GEMM/collective index, copy extents), GEMM,
// collective and attention descriptors, the preparation segment, the arena
// size and the symbol bindings. It leaves out what depends on the machine or
// the NVRTC version rather than on the compiler: the cubins and the arch they
// were built for (KernelSpec::cubin, KernelSpec::arch). One item per line,
// each line starting with its kind and index, so that a diff of two dumps
// reads "launch 7 ... grid=[...]" changed.
#ifndef LLMC_RUNTIME_EXECUTABLEDUMP_H
#define LLMC_RUNTIME_EXECUTABLEDUMP_H

#include <string>

#include "llmc/runtime/Executable.h"

namespace llmc::rt {

/// Version of the dump's text format (its first line); bump it when a line's
/// layout changes, so golden files are regenerated knowingly.
inline constexpr int kExecutableDumpVersion = 1;

/// The canonical dump of `exe` (see the file comment); deterministic, ends
/// with a newline. Works on any executable, valid or not (indices out of
/// range print as such).
std::string DescribeExecutable(const Executable& exe);

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_EXECUTABLEDUMP_H
