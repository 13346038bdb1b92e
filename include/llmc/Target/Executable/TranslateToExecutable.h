//===- TranslateToExecutable.h - exec dialect <-> rt::Executable -*- C++ -*-===//
//
// translateToExecutable: an `exec.executable` to the runtime's
// rt::Executable, field by field. It decides nothing: buffers, kernels and
// launches keep their order, and every offset (arena_bytes and each arena
// buffer's offset, written by llmc-plan-arena) is read from the IR. The GEMM,
// collective and attention tables are numbered in launch order (each
// belongs to one launch).
//
// exportExecutable: the inverse, a BRIDGE for now. The lowering
// (lib/Compiler) still fills an rt::Executable directly; this turns its
// output, with the arena buffers' liveness intervals, into exec IR so that
// the arena is planned by llmc-plan-arena and the executable comes out of
// translateToExecutable. A later step makes the conversion patterns build
// exec ops directly; this bridge is then deleted.
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

/// The liveness of one arena buffer, in launch steps (the lowering's
/// program-order op indices; the preparation segment's are shifted before
/// every per-call step).
struct ArenaInterval {
  int buffer = -1;
  int64_t first = 0, last = 0;
};

/// The bridge (see the file comment): `exe` as an exec.executable named
/// `name` at `loc`, every arena buffer carrying its interval from `arena`
/// and no offset (arena_bytes unset). Internal error for what the lowering
/// never produces: an arena buffer without exactly one interval, a field
/// that does not belong to its launch's or buffer's kind, a GEMM,
/// collective or attention entry not used by exactly one launch.
absl::StatusOr<mlir::OwningOpRef<exec::ExecutableOp>>
exportExecutable(mlir::MLIRContext *context, mlir::Location loc, llvm::StringRef name,
                 const rt::Executable &exe, llvm::ArrayRef<ArenaInterval> arena);

} // namespace llmc

#endif // LLMC_TARGET_EXECUTABLE_TRANSLATETOEXECUTABLE_H
