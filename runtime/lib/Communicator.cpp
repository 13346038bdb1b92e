#include "llmc/runtime/Communicator.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "llmc/runtime/Device.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/FileIO.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {

static_assert(sizeof(ncclUniqueId) == NcclUniqueId::kBytes,
              "NcclUniqueId must match NCCL's ncclUniqueId");
static_assert(NCCL_UNIQUE_ID_BYTES == NcclUniqueId::kBytes);

std::string NcclUniqueIdToHex(const NcclUniqueId& id) {
  static const char* kDigits = "0123456789abcdef";
  std::string out(2 * NcclUniqueId::kBytes, '0');
  for (int i = 0; i < NcclUniqueId::kBytes; ++i) {
    unsigned char b = static_cast<unsigned char>(id.bytes[i]);
    out[2 * i] = kDigits[b >> 4];
    out[2 * i + 1] = kDigits[b & 15];
  }
  return out;
}

absl::StatusOr<NcclUniqueId> NcclUniqueIdFromHex(const std::string& hex) {
  if (hex.size() != 2 * NcclUniqueId::kBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "an NCCL unique id has ", 2 * NcclUniqueId::kBytes,
        " hex digits, got ", hex.size(), " characters"));
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  NcclUniqueId id;
  for (int i = 0; i < NcclUniqueId::kBytes; ++i) {
    int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "NCCL unique id: '", hex.substr(2 * i, 2), "' at byte ", i,
          " is not hex"));
    id.bytes[i] = static_cast<char>(hi << 4 | lo);
  }
  return id;
}

absl::Status PollUntil(const std::function<absl::StatusOr<bool>()>& done,
                       absl::Duration timeout, const std::string& what,
                       absl::Duration poll) {
  absl::Time deadline = absl::Now() + timeout;
  absl::Duration sleep = std::min(poll, absl::Microseconds(50));
  while (true) {
    LLMC_RT_ASSIGN_OR_RETURN(bool ok, done());
    if (ok) return absl::OkStatus();
    if (absl::Now() >= deadline)
      return absl::DeadlineExceededError(absl::StrFormat(
          "%s did not complete within the timeout of %.3g s", what,
          absl::ToDoubleSeconds(timeout)));
    // Short sleeps first (a collective usually finishes within microseconds
    // of the stream), growing to `poll`.
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(sleep));
    sleep = std::min(poll, sleep * 2);
  }
}

// ---------------------------------------------------------------------------
// Communicator
// ---------------------------------------------------------------------------
namespace {

std::string RankName(int rank, int nranks) {
  return absl::StrCat("rank ", rank, " of ", nranks);
}

/// ncclCommGetAsyncError as a Status: OK and *in_progress for
/// ncclInProgress, OK for ncclSuccess, else the error with NCCL's last
/// message for this communicator.
absl::Status AsyncState(const Nccl& nccl, ncclComm_t comm, bool* in_progress) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = nccl.ncclCommGetAsyncError(comm, &state);
  if (r != ncclSuccess) return nccl.Check(r, "ncclCommGetAsyncError");
  if (in_progress) *in_progress = state == ncclInProgress;
  if (state == ncclSuccess || state == ncclInProgress) return absl::OkStatus();
  const char* detail = nccl.ncclGetLastError(comm);
  return absl::InternalError(absl::StrCat(
      "NCCL reported ", nccl.ncclGetErrorString(state),
      detail && *detail ? absl::StrCat(" (", detail, ")") : "",
      state == ncclRemoteError ? "; a peer rank failed or exited" : ""));
}

}  // namespace

absl::StatusOr<NcclUniqueId> Communicator::GetUniqueId() {
  LLMC_RT_ASSIGN_OR_RETURN(const Nccl* nccl, Nccl::Get());
  ncclUniqueId raw;
  LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(*nccl, ncclGetUniqueId, &raw));
  NcclUniqueId id;
  std::memcpy(id.bytes, &raw, sizeof(raw));
  return id;
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    std::shared_ptr<Device> device, const NcclUniqueId& id, int rank,
    int nranks, absl::Duration timeout,
    std::function<absl::Status()> peer_check) {
  if (nranks < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("an NCCL communicator needs nranks >= 1, got ", nranks));
  if (rank < 0 || rank >= nranks)
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is out of range for ", nranks,
        " ranks (expected 0 <= rank < nranks)"));
  if (!device)
    return absl::InvalidArgumentError("Communicator::Create needs a device");
  LLMC_RT_ASSIGN_OR_RETURN(const Nccl* nccl, Nccl::Get());
  // NCCL uses the CUDA runtime's current device, which follows the current
  // driver context.
  LLMC_RT_RETURN_IF_ERROR(device->MakeCurrent());
  ncclUniqueId raw;
  std::memcpy(&raw, id.bytes, sizeof(raw));
  // The initializer sets size/magic/version for the nccl.h we compile
  // against; NCCL reads only the fields that version has.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  std::string who = RankName(rank, nranks);
  ncclResult_t r =
      nccl->ncclCommInitRankConfig(&comm, nranks, raw, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    absl::Status st = nccl->Check(r, "ncclCommInitRankConfig");
    if (comm) nccl->ncclCommAbort(comm);
    return Annotate(st, absl::StrCat("creating the NCCL communicator of ", who,
                                     " on GPU ", device->ordinal()));
  }
  absl::Status st = PollUntil(
      [&]() -> absl::StatusOr<bool> {
        if (peer_check) LLMC_RT_RETURN_IF_ERROR(peer_check());
        bool in_progress = false;
        LLMC_RT_RETURN_IF_ERROR(AsyncState(*nccl, comm, &in_progress));
        return !in_progress;
      },
      timeout,
      absl::StrCat("NCCL communicator set-up of ", who, " (waiting for all ",
                   nranks, " ranks to join)"));
  if (!st.ok()) {
    nccl->ncclCommAbort(comm);
    if (absl::IsDeadlineExceeded(st))
      return absl::DeadlineExceededError(absl::StrCat(
          st.message(), "; is every rank running, with the same id and "
                        "nranks? The communicator was aborted"));
    return Annotate(st, absl::StrCat("creating the NCCL communicator of ", who,
                                     " on GPU ", device->ordinal(),
                                     " (aborted)"));
  }
  std::unique_ptr<Communicator> c(new Communicator());
  c->device_ = std::move(device);
  c->comm_ = comm;
  c->rank_ = rank;
  c->nranks_ = nranks;
  c->timeout_ = timeout;
  return c;
}

Communicator::~Communicator() {
  if (!comm_) return;
  auto nccl = Nccl::Get();
  if (!nccl.ok()) return;
  if (device_) (void)device_->MakeCurrent();
  // Non-blocking communicator: finalize (flushes outstanding work), wait for
  // it, then destroy; abort if that fails or hangs.
  ncclResult_t r = (*nccl)->ncclCommFinalize(comm_);
  absl::Status st = (r == ncclSuccess || r == ncclInProgress)
                        ? PollUntil(
                              [&]() -> absl::StatusOr<bool> {
                                bool in_progress = false;
                                LLMC_RT_RETURN_IF_ERROR(
                                    AsyncState(**nccl, comm_, &in_progress));
                                return !in_progress;
                              },
                              std::min(timeout_, absl::Seconds(30)),
                              "ncclCommFinalize")
                        : (*nccl)->Check(r, "ncclCommFinalize");
  if (st.ok())
    (*nccl)->ncclCommDestroy(comm_);
  else
    (*nccl)->ncclCommAbort(comm_);
  comm_ = nullptr;
}

void Communicator::Abort() {
  if (!comm_) return;
  auto nccl = Nccl::Get();
  if (nccl.ok()) {
    if (device_) (void)device_->MakeCurrent();
    (*nccl)->ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

absl::Status Communicator::CheckAsyncError() const {
  if (!comm_)
    return absl::FailedPreconditionError(absl::StrCat(
        "the NCCL communicator of ", RankName(rank_, nranks_),
        " was aborted after an earlier error"));
  LLMC_RT_ASSIGN_OR_RETURN(const Nccl* nccl, Nccl::Get());
  return AsyncState(*nccl, comm_, nullptr);
}

absl::Status Communicator::Wait(CUstream stream, const std::string& what) {
  LLMC_RT_RETURN_IF_ERROR(CheckAsyncError());
  LLMC_RT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
  if (device_) LLMC_RT_RETURN_IF_ERROR(device_->MakeCurrent());
  std::string who = RankName(rank_, nranks_);
  absl::Status st = PollUntil(
      [&]() -> absl::StatusOr<bool> {
        CUresult q = cu->cuStreamQuery(stream);
        if (q == CUDA_SUCCESS) return true;
        if (q != CUDA_ERROR_NOT_READY) {
          LLMC_RT_RETURN_IF_ERROR(cu->Check(q, "cuStreamQuery"));
        }
        LLMC_RT_RETURN_IF_ERROR(CheckAsyncError());
        return false;
      },
      timeout_, absl::StrCat(what, " on ", who));
  if (st.ok()) return st;
  Abort();
  if (absl::IsDeadlineExceeded(st))
    return absl::DeadlineExceededError(absl::StrCat(
        st.message(), "; another rank probably failed, exited or runs a "
                      "different graph. The NCCL communicator was aborted"));
  return Annotate(st, absl::StrCat("while waiting for ", what, " on ", who,
                                   " (NCCL communicator aborted)"));
}

// ---------------------------------------------------------------------------
// FileRendezvous
// ---------------------------------------------------------------------------
namespace {

constexpr const char* kMagic = "llmc-nccl-rendezvous 1";

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

bool ProcessAlive(int64_t pid) {
  if (pid <= 0) return false;
  return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

struct RendezvousFile {
  int nranks = 0;
  std::string run_id, host;
  int64_t pid = 0;
  NcclUniqueId id;
};

absl::StatusOr<RendezvousFile> ParseRendezvous(const std::string& path,
                                               const std::string& text) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("rendezvous file ", path,
                                            " is malformed: ", why));
  };
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.empty() || lines[0] != kMagic)
    return bad(absl::StrCat("the first line is not '", kMagic, "'"));
  RendezvousFile f;
  bool have_id = false, have_n = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(lines[i], absl::MaxSplits(' ', 1));
    if (kv.first == "nranks") {
      if (!absl::SimpleAtoi(kv.second, &f.nranks)) return bad("nranks");
      have_n = true;
    } else if (kv.first == "run_id") {
      f.run_id = kv.second == "-" ? "" : kv.second;
    } else if (kv.first == "host") {
      f.host = kv.second;
    } else if (kv.first == "pid") {
      if (!absl::SimpleAtoi(kv.second, &f.pid)) return bad("pid");
    } else if (kv.first == "id") {
      auto id = NcclUniqueIdFromHex(kv.second);
      if (!id.ok()) return bad(std::string(id.status().message()));
      f.id = *id;
      have_id = true;
    }
  }
  if (!have_id || !have_n) return bad("no 'id' or 'nranks' line");
  return f;
}

/// Rendezvous and acknowledgement files hold a few short lines.
ReadOptions RendezvousRead() {
  ReadOptions ro;
  ro.max_bytes = 64 << 10;
  ro.what = "rendezvous file";
  return ro;
}

/// Removes `path` if it is a regular file: a rendezvous path that names a
/// device node, FIFO or directory is never removed (as root, removing
/// /dev/null would break the machine).
void RemoveRegularFile(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    std::remove(path.c_str());
}

std::string AckPath(const std::string& path, int rank) {
  return absl::StrCat(path, ".rank", rank);
}

std::pair<std::string, std::string> SplitDir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

/// Every PATH.rank<k> file: (k, contents).
std::vector<std::pair<int, std::string>> ListAcks(const std::string& path) {
  std::vector<std::pair<int, std::string>> out;
  auto [dir, base] = SplitDir(path);
  std::string prefix = base + ".rank";
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    int k;
    if (!absl::SimpleAtoi(name.substr(prefix.size()), &k)) continue;
    auto text = ReadFile(dir + "/" + name, RendezvousRead());
    if (text.ok()) out.push_back({k, *text});
  }
  closedir(d);
  return out;
}

}  // namespace

FileRendezvous::FileRendezvous(std::string path, int rank, int nranks,
                               std::string run_id, absl::Duration timeout)
    : path_(std::move(path)),
      rank_(rank),
      nranks_(nranks),
      run_id_(std::move(run_id)),
      timeout_(timeout) {}

absl::StatusOr<NcclUniqueId> FileRendezvous::Exchange(const NcclUniqueId* id) {
  if (nranks_ < 1 || rank_ < 0 || rank_ >= nranks_)
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous: rank ", rank_, " of ", nranks_,
        " is invalid (expected nranks >= 1 and 0 <= rank < nranks)"));
  if (path_.empty())
    return absl::InvalidArgumentError("rendezvous: empty file path");
  if (run_id_.find_first_of(" \n") != std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous: the run id '", run_id_, "' contains white space"));
  if (rank_ == 0) {
    if (!id)
      return absl::InvalidArgumentError(
          "rendezvous: rank 0 must supply the NCCL unique id to publish");
    // Acknowledgements of an earlier run must not look like ours.
    Cleanup();
    std::string text = absl::StrCat(
        kMagic, "\nnranks ", nranks_, "\nrun_id ",
        run_id_.empty() ? "-" : run_id_, "\nhost ", HostName(), "\npid ",
        static_cast<int64_t>(getpid()), "\nid ", NcclUniqueIdToHex(*id), "\n");
    LLMC_RT_RETURN_IF_ERROR(Annotate(AtomicWriteFile(path_, text),
                                     "rank 0 publishing the NCCL id"));
    return *id;
  }
  std::string host = HostName();
  RendezvousFile found;
  std::string last_stale;
  absl::Status st = PollUntil(
      [&]() -> absl::StatusOr<bool> {
        if (access(path_.c_str(), F_OK) != 0) return false;
        auto text = ReadFile(path_, RendezvousRead());
        if (absl::IsNotFound(text.status()))
          return false;  // removed between the two calls
        if (!text.ok()) return text.status();
        LLMC_RT_ASSIGN_OR_RETURN(found, ParseRendezvous(path_, *text));
        if (!run_id_.empty() && found.run_id != run_id_) {
          last_stale = absl::StrCat("a file with run id '", found.run_id,
                                    "' (expected '", run_id_, "')");
          return false;
        }
        if (run_id_.empty() && found.host == host && !ProcessAlive(found.pid)) {
          last_stale = absl::StrCat("a file written by process ", found.pid,
                                    ", which has exited");
          return false;
        }
        return true;
      },
      timeout_,
      absl::StrCat("rank ", rank_, " waiting for rank 0's NCCL id in ", path_),
      absl::Milliseconds(20));
  if (absl::IsDeadlineExceeded(st))
    return absl::DeadlineExceededError(absl::StrCat(
        st.message(), "; is rank 0 running with the same rendezvous path",
        run_id_.empty() ? "" : " and run id", "?",
        last_stale.empty() ? ""
                           : absl::StrCat(" Ignored a stale file of an earlier "
                                          "run: ",
                                          last_stale, ".")));
  LLMC_RT_RETURN_IF_ERROR(st);
  bool match = found.nranks == nranks_;
  (void)AtomicWriteFile(AckPath(path_, rank_),
                        absl::StrCat("nranks ", nranks_, " ",
                                     match ? "ok" : "mismatch", "\n"));
  if (!match)
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank_, " was started with ", nranks_,
        " ranks (tensor-parallel degree ", nranks_, ") but rank 0 (process ",
        found.pid, " on ", found.host, ", ", path_, ") with ", found.nranks,
        "; every rank must use the same degree"));
  return found.id;
}

absl::Status FileRendezvous::CheckPeers() const {
  if (rank_ != 0) return absl::OkStatus();
  for (const auto& [k, text] : ListAcks(path_)) {
    int n = 0;
    std::vector<std::string> parts = absl::StrSplit(text, ' ');
    if (parts.size() < 2 || parts[0] != "nranks" ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(parts[1]), &n))
      continue;
    if (n != nranks_)
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", k, " was started with ", n,
          " ranks (tensor-parallel degree ", n, ") but rank 0 with ", nranks_,
          "; every rank must use the same degree"));
  }
  return absl::OkStatus();
}

void FileRendezvous::Cleanup() {
  if (rank_ != 0) return;
  RemoveRegularFile(path_);
  for (const auto& [k, text] : ListAcks(path_))
    RemoveRegularFile(AckPath(path_, k));
}

}  // namespace llmc::rt
