//===- TensorParallel.cpp - llmc-run --tp: ranks, launcher, set-up --------===//

#include "TensorParallel.h"

#include "PipelineFlags.h"

#include "LLM/IR/LLMOps.h"
#include "LLM/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

using namespace mlir;

namespace llmc::tools {

TpState &tpState() {
  static TpState state;
  return state;
}

namespace {

bool envInt(const char *name, int *out) {
  const char *v = std::getenv(name);
  return v && *v && absl::SimpleAtoi(v, out);
}

} // namespace

absl::Status ResolveTp(const TpFlags &flags) {
  TpState &s = tpState();
  s.timeout_s = flags.timeout_s;
  if (flags.tp < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("--tp=", flags.tp, ": expected a degree >= 1"));
  if (!(flags.timeout_s > 0))
    return absl::InvalidArgumentError(absl::StrCat(
        "--nccl-timeout=", flags.timeout_s, ": expected seconds > 0"));
  s.tp = flags.tp;
  if (flags.tp == 1) {
    if (flags.rank > 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "--rank=", flags.rank, " needs --tp greater than the rank"));
    s.role = TpState::Single;
    s.device = flags.device >= 0 ? flags.device : 0;
    return absl::OkStatus();
  }
  int rank = flags.rank, world = 0, local = -1;
  bool fromEnv = false;
  if (rank < 0 && envInt("RANK", &rank)) {
    fromEnv = true;
    if (!envInt("WORLD_SIZE", &world))
      return absl::InvalidArgumentError(
          "RANK is set but WORLD_SIZE is not (torchrun sets both)");
    if (world != flags.tp)
      return absl::InvalidArgumentError(absl::StrCat(
          "--tp=", flags.tp, " but WORLD_SIZE=", world,
          ": start as many processes as the tensor-parallel degree"));
  }
  if (rank < 0) {
    s.role = TpState::Launcher;
    return absl::OkStatus();
  }
  if (rank >= flags.tp)
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is out of range for --tp=", flags.tp,
        " (expected 0 <= rank < tp)"));
  s.role = TpState::Rank;
  s.rank = rank;
  s.device = flags.device >= 0 ? flags.device
             : envInt("LOCAL_RANK", &local) ? local
                                            : rank;
  s.rendezvous = flags.rendezvous;
  s.run_id = flags.run_id;
  if (s.run_id.empty()) {
    // One id per launch, so a stale rendezvous file is never taken.
    for (const char *var : {"LLMC_RUN_ID", "TORCHELASTIC_RUN_ID"})
      if (const char *v = std::getenv(var); v && *v && std::string(v) != "none") {
        s.run_id = v;
        break;
      }
  }
  if (s.rendezvous.empty()) {
    if (const char *v = std::getenv("LLMC_RENDEZVOUS"); v && *v)
      s.rendezvous = v;
  }
  if (s.rendezvous.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " of --tp=", flags.tp, fromEnv ? " (from RANK)" : "",
        " needs --rendezvous=PATH (or LLMC_RENDEZVOUS): a file path every "
        "rank can read, where rank 0 publishes the NCCL id"));
  return absl::OkStatus();
}

int LaunchRanks(int argc, char **argv) {
  const TpState &s = tpState();
  std::string tmpl = "/tmp/llmc-tp-XXXXXX";
  if (const char *t = std::getenv("TMPDIR"); t && *t)
    tmpl = std::string(t) + "/llmc-tp-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    llvm::errs() << "llmc-run: error: cannot create a rendezvous directory "
                 << tmpl << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  std::string dir = tmpl;
  std::string path = dir + "/nccl-id";
  std::random_device rd;
  std::string runId = absl::StrCat(getpid(), "-", rd(), rd());
  llvm::outs() << "llmc-run: starting " << s.tp << " ranks (rank r on GPU r), "
               << "rendezvous " << path << "\n";
  llvm::outs().flush();

  std::vector<pid_t> pids(s.tp, -1);
  std::vector<std::string> logs(s.tp);
  for (int r = 0; r < s.tp; ++r) {
    std::vector<std::string> args(argv, argv + argc);
    args.push_back(absl::StrCat("--rank=", r));
    args.push_back("--rendezvous=" + path);
    args.push_back("--run-id=" + runId);
    if (r > 0)
      logs[r] = absl::StrCat(dir, "/rank", r, ".out");
    pid_t pid = fork();
    if (pid < 0) {
      llvm::errs() << "llmc-run: error: fork failed: " << std::strerror(errno)
                   << "\n";
      for (int k = 0; k < r; ++k)
        kill(pids[k], SIGTERM);
      for (int k = 0; k < r; ++k)
        waitpid(pids[k], nullptr, 0);
      return 1;
    }
    if (pid == 0) {
      if (r > 0) {
        int fd = open(logs[r].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
          dup2(fd, STDOUT_FILENO);
          close(fd);
        }
      }
      std::vector<char *> cargv;
      for (std::string &a : args)
        cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv("/proc/self/exe", cargv.data());
      std::fprintf(stderr, "llmc-run: error: exec of rank %d failed: %s\n", r,
                   std::strerror(errno));
      _exit(127);
    }
    pids[r] = pid;
  }

  // Wait for all; the first rank that fails (other than a failed --check,
  // which happens after every collective finished) stops the others.
  std::vector<int> codes(s.tp, -1);
  int running = s.tp;
  bool stopping = false;
  int firstFailure = -1;
  auto stopOthers = [&]() {
    stopping = true;
    for (int r = 0; r < s.tp; ++r)
      if (codes[r] < 0)
        kill(pids[r], SIGTERM);
  };
  auto stopDeadline = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, stopping ? WNOHANG : 0);
    if (pid == 0) {
      if (std::chrono::steady_clock::now() > stopDeadline) {
        for (int r = 0; r < s.tp; ++r)
          if (codes[r] < 0)
            kill(pids[r], SIGKILL);
        stopDeadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (pid < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    int r = 0;
    while (r < s.tp && pids[r] != pid)
      ++r;
    if (r == s.tp)
      continue;
    --running;
    int code = WIFEXITED(status) ? WEXITSTATUS(status)
               : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                     : 1;
    codes[r] = code;
    if (code != 0 && !stopping) {
      if (WIFSIGNALED(status))
        llvm::errs() << "llmc-run: rank " << r << " was killed by signal "
                     << WTERMSIG(status) << "\n";
      if (code != 2) {
        firstFailure = r;
        llvm::errs() << "llmc-run: rank " << r << " failed (exit code " << code
                     << "); stopping the other ranks\n";
        stopOthers();
        stopDeadline =
            std::chrono::steady_clock::now() + std::chrono::seconds(10);
      }
    }
  }

  // The other ranks' check and timing lines.
  for (int r = 1; r < s.tp; ++r) {
    std::ifstream in(logs[r]);
    std::string line;
    while (std::getline(in, line))
      if (line.find("check vs") != std::string::npos ||
          line.find("end to end") != std::string::npos ||
          line.find("bus bandwidth") != std::string::npos ||
          line.find("result") == 0)
        llvm::outs() << "[rank " << r << "] " << line << "\n";
    std::remove(logs[r].c_str());
  }
  std::remove(path.c_str());
  for (int r = 0; r < s.tp; ++r)
    std::remove(absl::StrCat(path, ".rank", r).c_str());
  rmdir(dir.c_str());

  int worst = 0;
  for (int r = 0; r < s.tp; ++r)
    if (codes[r] != 0 && (worst == 0 || worst == 2))
      worst = codes[r] == 2 ? 2 : 1;
  if (worst == 2)
    llvm::outs() << "llmc-run: a --check failed on some rank (see above)\n";
  else if (worst != 0)
    llvm::errs() << "llmc-run: error: " << (firstFailure >= 0 ? "rank " : "")
                 << (firstFailure >= 0 ? std::to_string(firstFailure) : "a rank")
                 << " failed; exit codes by rank:"
                 << [&] {
                      std::string s2;
                      for (int c : codes)
                        s2 += " " + std::to_string(c);
                      return s2;
                    }()
                 << "\n";
  else
    llvm::outs() << "llmc-run: all " << s.tp << " ranks succeeded\n";
  return worst;
}

absl::Status SetUpRank() {
  TpState &s = tpState();
  auto device = rt::Device::Open(s.device);
  if (!device.ok())
    return device.status();
  rt::FileRendezvous rdzv(s.rendezvous, s.rank, s.tp, s.run_id,
                          absl::Seconds(s.timeout_s));
  rt::NcclUniqueId mine;
  if (s.rank == 0) {
    auto id = rt::Communicator::GetUniqueId();
    if (!id.ok())
      return id.status();
    mine = *id;
  }
  auto id = rdzv.Exchange(s.rank == 0 ? &mine : nullptr);
  if (!id.ok())
    return id.status();
  auto comm = rt::Communicator::Create(
      *device, *id, s.rank, s.tp, absl::Seconds(s.timeout_s),
      [&]() { return rdzv.CheckPeers(); });
  if (!comm.ok()) {
    rdzv.Cleanup();
    return comm.status();
  }
  // Every rank has read the id once the communicator is up.
  rdzv.Cleanup();
  s.comm = std::move(*comm);
  return absl::OkStatus();
}

bool hasCollectives(func::FuncOp fn) {
  bool found = false;
  fn.walk([&](Operation *op) {
    if (isa<llm::AllReduceOp, llm::AllGatherOp, llm::ReduceScatterOp>(op))
      if (auto g = op->getAttrOfType<IntegerAttr>("group_size"))
        found |= g.getInt() > 1;
  });
  return found;
}

LogicalResult checkGroupSizes(func::FuncOp fn, int tp) {
  bool ok = true;
  fn.walk([&](Operation *op) {
    if (!isa<llm::AllReduceOp, llm::AllGatherOp, llm::ReduceScatterOp>(op))
      return;
    auto g = op->getAttrOfType<IntegerAttr>("group_size");
    if (g && g.getInt() > 1 && g.getInt() != tp) {
      op->emitOpError() << "has group_size = " << g.getInt()
                      << " but llmc-run runs " << tp << " rank(s); use --tp="
                      << g.getInt();
      ok = false;
    }
  });
  return success(ok);
}

LogicalResult shardForRank(func::FuncOp fn, int tp, int rank) {
  if (failed(checkGroupSizes(fn, tp)))
    return failure();
  // A graph that already has collectives is one rank's program (e.g. a
  // collective benchmark): run it as written.
  if (tp == 1 || hasCollectives(fn))
    return success();
  PassManager pm(fn.getContext(), func::FuncOp::getOperationName());
  llm::ShardPassOptions options;
  options.tp = tp;
  options.rank = rank;
  pm.addPass(llm::createShardPass(options));
  // --mlir-print-ir-after-all and the like cover llmc-shard too.
  if (failed(applyPassManagerFlags(pm)))
    return failure();
  return pm.run(fn);
}

} // namespace llmc::tools
