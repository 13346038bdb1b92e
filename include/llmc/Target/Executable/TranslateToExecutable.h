//===- TranslateToExecutable.h - exec dialect <-> rt::Executable -*- C++ -*-===//
//
// translateToExecutable: an `exec.executable` to the runtime's
// rt::Executable, field by field. It decides nothing: buffers, kernels and
// launches keep their order, and every offset (arena_bytes and each arena
// buffer's offset, written by llmc-plan-arena) is read from the IR. The GEMM,
// collective and attention tables are numbered in launch order (each
// belongs to one launch).
//
// The lowering (lib/Compiler) builds the exec IR; llmc-plan-arena places its
// arena; this turns it into what the runtime loads.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_TARGET_EXECUTABLE_TRANSLATETOEXECUTABLE_H
#define LLMC_TARGET_EXECUTABLE_TRANSLATETOEXECUTABLE_H

#include "Exec/IR/ExecOps.h"
#include "llmc/runtime/Executable.h"

#include "absl/status/statusor.h"
#include "mlir/IR/OwningOpRef.h"

namespace llmc {

/// Translates `op` (a verified exec.executable whose arena is planned) to an
/// rt::Executable. InvalidArgument naming the op for anything the runtime
/// cannot represent (an arena buffer without offset, no arena_bytes, an
/// element type the runtime does not know, a kernel symbol that resolves to
/// nothing). The result is not validated (rt::Executable::Validate).
absl::StatusOr<rt::Executable> translateToExecutable(exec::ExecutableOp op);

} // namespace llmc

#endif // LLMC_TARGET_EXECUTABLE_TRANSLATETOEXECUTABLE_H
