//===- TensorParallel.h - llmc-run --tp: ranks, launcher, set-up -*- C++ -*-===//
//
// llmc-run --tp=N runs one llmc-shard'ed rank per process and GPU:
//   * with --rank=R --rendezvous=PATH (or torchrun's RANK / WORLD_SIZE /
//     LOCAL_RANK / TORCHELASTIC_RUN_ID environment) this process is rank R;
//   * with neither, it is a launcher: it starts N copies of itself (rank r on
//     GPU r, a fresh rendezvous file and run id), waits for all of them and
//     stops the others as soon as one fails.
// See docs/tensor-parallel.md.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_LIB_TOOLS_TENSORPARALLEL_H
#define LLMC_LIB_TOOLS_TENSORPARALLEL_H

#include "llmc/runtime/Communicator.h"
#include "llmc/runtime/Session.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <memory>
#include <string>

namespace llmc::tools {

/// The --tp flags as given.
struct TpFlags {
  int tp = 1;
  int rank = -1;    // -1: from RANK, else launcher
  int device = -1;  // -1: LOCAL_RANK, else rank
  std::string rendezvous;
  std::string run_id;
  double timeout_s = 300;
};

/// What this process is, once the flags and environment are resolved.
struct TpState {
  enum Role { Single, Launcher, Rank } role = Single;
  int tp = 1, rank = 0, device = 0;
  std::string rendezvous, run_id;
  double timeout_s = 300;
  /// Rank: the communicator, once SetUpRank succeeded.
  std::shared_ptr<rt::Communicator> comm;
};

/// The process-wide state (default: Single, GPU 0).
TpState &tpState();

/// Resolves flags + environment into tpState(). Errors (user mistakes): tp <
/// 1, rank out of range, --rank without --rendezvous, WORLD_SIZE != --tp.
absl::Status ResolveTp(const TpFlags &flags);

/// Launcher: runs `argv` again tp times with --rank/--rendezvous/--run-id
/// appended. Rank 0 writes to this stdout; the others' stdout goes to files
/// whose check and timing lines are printed, prefixed "[rank r]", at the
/// end. Returns the exit code: 0 if every rank exited 0, 2 if the worst was
/// a failed --check, else 1.
int LaunchRanks(int argc, char **argv);

/// Rank: opens the rank's GPU, exchanges the NCCL id through the rendezvous
/// file and creates the communicator (stored in tpState().comm).
absl::Status SetUpRank();

/// True if `fn` has a collective with group_size > 1 (it is already one
/// rank's program).
bool hasCollectives(mlir::func::FuncOp fn);

/// Emits an error on every collective of `fn` whose group_size (> 1)
/// differs from `tp`.
mlir::LogicalResult checkGroupSizes(mlir::func::FuncOp fn, int tp);

/// Checks that every collective of `fn` has group_size == tp and, for tp > 1
/// and a function without collectives, applies llmc-shard{tp rank} to `fn`
/// in place. Errors go to the context's diagnostic handler; returns failure
/// then.
mlir::LogicalResult shardForRank(mlir::func::FuncOp fn, int tp, int rank);

} // namespace llmc::tools

#endif // LLMC_LIB_TOOLS_TENSORPARALLEL_H
