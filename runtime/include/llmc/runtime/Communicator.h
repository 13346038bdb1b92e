// NCCL communicators for tensor-parallel executables: one process per GPU,
// one rank per process, the same code within one node and across nodes
// (NCCL picks NVLink, PCIe, InfiniBand or sockets itself).
//
// Setting up N ranks takes three steps:
//   1. one process (rank 0) makes an NCCL unique id (Communicator::
//      GetUniqueId; 128 opaque bytes naming rank 0's bootstrap socket),
//   2. the id reaches every rank out of band: the caller's own channel (MPI,
//      torch.distributed.broadcast_object_list, ...) or a FileRendezvous on a
//      file system every rank sees,
//   3. every rank calls Communicator::Create(device, id, rank, nranks).
//
// Failure handling follows NCCL's non-blocking mode ("Fault tolerance" in
// the NCCL user guide): the communicator is created with
// ncclConfig_t::blocking = 0, so neither init nor a collective can hang the
// host; Create and Wait poll ncclCommGetAsyncError (and the stream) until
// success, an error, or a deadline, and on an error or timeout call
// ncclCommAbort, which also unblocks the kernels of collectives that wait for
// a peer that died. Every rank thus gets an error naming what it waited for,
// its rank and the timeout instead of hanging.
//
// Needs libnccl.so.2 (>= 2.14, for ncclCommInitRankConfig) at run time;
// without it every entry point returns FailedPrecondition naming LLMC_LIBNCCL.
#ifndef LLMC_RUNTIME_COMMUNICATOR_H
#define LLMC_RUNTIME_COMMUNICATOR_H

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "llmc/runtime/CudaTypes.h"

namespace llmc::rt {

class Device;

/// An NCCL unique id (ncclUniqueId, NCCL_UNIQUE_ID_BYTES = 128 opaque bytes).
struct NcclUniqueId {
  static constexpr int kBytes = 128;
  char bytes[kBytes] = {};
};

/// Lower-case hex of the 128 id bytes (256 characters) and back.
/// FromHex: InvalidArgument unless exactly 256 hex digits.
std::string NcclUniqueIdToHex(const NcclUniqueId& id);
absl::StatusOr<NcclUniqueId> NcclUniqueIdFromHex(const std::string& hex);

/// Polls `done` every `poll` until it returns true or an error, giving up
/// with DeadlineExceeded after `timeout` (the message names `what` and the
/// timeout in seconds). The building block of Communicator's waits, public
/// for tests and for launchers.
absl::Status PollUntil(const std::function<absl::StatusOr<bool>()>& done,
                       absl::Duration timeout, const std::string& what,
                       absl::Duration poll = absl::Milliseconds(1));

/// One rank's NCCL communicator on one GPU. Thread-compatible: the caller
/// serializes use (NCCL needs every rank to issue collectives in the same
/// order anyway).
class Communicator {
 public:
  /// A fresh unique id (ncclGetUniqueId). Call on ONE process and send the
  /// result to all. Needs libnccl, not a GPU. FailedPrecondition without
  /// libnccl; Internal if NCCL fails (e.g. no usable network interface).
  static absl::StatusOr<NcclUniqueId> GetUniqueId();

  /// Joins the communicator named by `id` as rank `rank` of `nranks` on
  /// `device` (its context is made current; one GPU per rank). Collective:
  /// returns once all `nranks` ranks have joined. `timeout` bounds the whole
  /// set-up; `peer_check` (optional) is called while waiting, and its error
  /// (e.g. FileRendezvous::CheckPeers finding a rank started with another
  /// degree) aborts the set-up.
  /// Errors: InvalidArgument for nranks < 1 or rank outside [0, nranks);
  /// FailedPrecondition without libnccl; DeadlineExceeded naming the rank,
  /// nranks and timeout when the other ranks did not join in time; Internal
  /// (with NCCL's message) when NCCL fails. The half-built communicator is
  /// aborted on every error.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(
      std::shared_ptr<Device> device, const NcclUniqueId& id, int rank,
      int nranks, absl::Duration timeout = absl::Minutes(5),
      std::function<absl::Status()> peer_check = nullptr);

  /// Finalizes (flushing pending work, bounded by the timeout) and destroys
  /// the communicator; aborts it instead when finalizing fails.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  /// Waits until all work enqueued on `stream` so far (collectives on the
  /// session's communication stream included, since Session::Run joins them
  /// into its stream) has finished, polling ncclCommGetAsyncError meanwhile.
  /// On an NCCL error or when `timeout()` passes, the communicator is
  /// aborted (it cannot be used again) and the error names `what`, this rank
  /// and the timeout. FailedPrecondition after an abort.
  absl::Status Wait(CUstream stream, const std::string& what);
  /// OK while the communicator is healthy; NCCL's asynchronous error (with
  /// ncclGetLastError's text) otherwise. Does not block.
  absl::Status CheckAsyncError() const;
  /// ncclCommAbort: stops outstanding collectives, frees the communicator.
  /// Idempotent.
  void Abort();

  /// The raw ncclComm_t (null after Abort), for Session and for callers that
  /// issue their own NCCL calls.
  ncclComm_t comm() const { return comm_; }
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  bool aborted() const { return comm_ == nullptr; }
  absl::Duration timeout() const { return timeout_; }
  void set_timeout(absl::Duration t) { timeout_ = t; }
  const std::shared_ptr<Device>& device() const { return device_; }

 private:
  Communicator() = default;
  std::shared_ptr<Device> device_;
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, nranks_ = 1;
  absl::Duration timeout_;
};

/// Hands an NCCL unique id from rank 0 to the other ranks through a file
/// every rank can read (local disk for one node, a shared file system across
/// nodes).
///
/// Protocol (all writes are write-temp-then-rename, so a reader never sees
/// a partial file):
///   rank 0   writes PATH: "llmc-nccl-rendezvous 1", nranks, run id, host,
///            pid and the id in hex;
///   rank r>0 polls PATH until it exists, rejects it if its run id differs
///            from a non-empty expected one or (same host, no run id) its
///            writer process is gone — a stale file of an earlier run —, then
///            checks nranks and writes PATH.rank<r> ("nranks N ok|mismatch")
///            so rank 0 learns of a mismatch too (CheckPeers);
///   rank 0   removes PATH and the PATH.rank* files (Cleanup) once the NCCL
///            communicator is up, i.e. once every rank has read the id.
/// A launcher that starts all ranks (llmc-run --tp=N) uses a fresh path and
/// run id; processes started by hand should pass the same unique run id
/// (LLMC_RUN_ID, or torchrun's TORCHELASTIC_RUN_ID) or a fresh path.
class FileRendezvous {
 public:
  /// `run_id` may be empty (then the stale-writer check above applies).
  FileRendezvous(std::string path, int rank, int nranks, std::string run_id,
                 absl::Duration timeout);
  /// Rank 0: publishes `id` (InvalidArgument if `id` is null). Other ranks:
  /// waits for rank 0's id (ignores `id`). Errors: InvalidArgument for a bad
  /// rank/nranks; FailedPrecondition naming both degrees when rank 0 was
  /// started with another nranks (or this rank is outside rank 0's degree);
  /// DeadlineExceeded naming the path and timeout when no file appeared;
  /// DataLoss for a malformed file; file-system errors as Internal/NotFound.
  absl::StatusOr<NcclUniqueId> Exchange(const NcclUniqueId* id);
  /// Rank 0, while waiting for the communicator: FailedPrecondition naming
  /// both degrees if a rank reported a different nranks. OK otherwise (and on
  /// other ranks).
  absl::Status CheckPeers() const;
  /// Rank 0: removes the rendezvous files. Safe to call more than once.
  void Cleanup();

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int rank_, nranks_;
  std::string run_id_;
  absl::Duration timeout_;
};

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_COMMUNICATOR_H
