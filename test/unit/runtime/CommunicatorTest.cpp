// Communicator, file rendezvous and collective scheduling tests. The
// rendezvous protocol, timeouts and PlanCollectiveJoins run everywhere; the
// NCCL tests need libnccl (ncclGetUniqueId needs no GPU) and the
// communicator/session tests one or two GPUs (skipped otherwise).
#include "llmc/runtime/Communicator.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/FileIO.h"
#include "llmc/runtime/KernelCompiler.h"
#include "llmc/runtime/Session.h"

namespace llmc::rt {
namespace {

using ::testing::HasSubstr;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

/// A fresh directory for rendezvous files, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "llmc-rdzv-XXXXXX";
    char* p = mkdtemp(tmpl.data());
    path_ = p ? p : "";
  }
  ~TempDir() {
    if (!path_.empty()) (void)std::system(("rm -rf '" + path_ + "'").c_str());
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

NcclUniqueId RandomId(uint64_t seed) {
  std::mt19937_64 rng(seed);
  NcclUniqueId id;
  for (char& c : id.bytes) c = static_cast<char>(rng());
  return id;
}

bool SameId(const NcclUniqueId& a, const NcclUniqueId& b) {
  return std::memcmp(a.bytes, b.bytes, NcclUniqueId::kBytes) == 0;
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

TEST(NcclUniqueIdTest, HexRoundTripAndErrors) {
  NcclUniqueId id = RandomId(7);
  std::string hex = NcclUniqueIdToHex(id);
  EXPECT_EQ(hex.size(), 256u);
  auto back = NcclUniqueIdFromHex(hex);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(SameId(*back, id));
  EXPECT_EQ(NcclUniqueIdFromHex("abc").status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string bad = hex;
  bad[10] = 'g';
  EXPECT_THAT(Msg(NcclUniqueIdFromHex(bad).status()), HasSubstr("byte 5"));
}

TEST(PollUntilTest, SucceedsFailsAndTimesOut) {
  int calls = 0;
  EXPECT_TRUE(PollUntil([&]() -> absl::StatusOr<bool> { return ++calls == 3; },
                        absl::Seconds(5), "x")
                  .ok());
  EXPECT_EQ(calls, 3);
  absl::Status err = PollUntil(
      []() -> absl::StatusOr<bool> { return absl::InternalError("boom"); },
      absl::Seconds(5), "x");
  EXPECT_EQ(err.code(), absl::StatusCode::kInternal);
  absl::Time t0 = absl::Now();
  absl::Status late = PollUntil([]() -> absl::StatusOr<bool> { return false; },
                                absl::Milliseconds(100), "the all_reduce");
  absl::Duration took = absl::Now() - t0;
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(Msg(late), HasSubstr("the all_reduce did not complete within the "
                                   "timeout of 0.1 s"));
  EXPECT_GE(took, absl::Milliseconds(100));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(FileRendezvousTest, RankZeroPublishesOthersReadAndAcknowledge) {
  TempDir dir;
  std::string path = dir.File("id");
  NcclUniqueId id = RandomId(1);
  FileRendezvous r0(path, 0, 3, "run-a", absl::Seconds(10));
  // Peers start first and wait for the file.
  std::vector<absl::StatusOr<NcclUniqueId>> got(3, absl::UnknownError(""));
  std::vector<std::thread> peers;
  for (int r = 1; r < 3; ++r)
    peers.emplace_back([&, r] {
      FileRendezvous rr(path, r, 3, "run-a", absl::Seconds(10));
      got[r] = rr.Exchange(nullptr);
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto mine = r0.Exchange(&id);
  ASSERT_TRUE(mine.ok()) << mine.status();
  for (auto& t : peers) t.join();
  for (int r = 1; r < 3; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].status();
    EXPECT_TRUE(SameId(*got[r], id)) << "rank " << r;
    EXPECT_TRUE(Exists(path + ".rank" + std::to_string(r)));
  }
  EXPECT_TRUE(r0.CheckPeers().ok());
  r0.Cleanup();
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(Exists(path + ".rank1"));
  EXPECT_FALSE(Exists(path + ".rank2"));
}

TEST(FileRendezvousTest, DegreeMismatchIsReportedOnBothSides) {
  TempDir dir;
  std::string path = dir.File("id");
  NcclUniqueId id = RandomId(2);
  FileRendezvous r0(path, 0, 2, "", absl::Seconds(10));
  ASSERT_TRUE(r0.Exchange(&id).ok());
  FileRendezvous r1(path, 1, 4, "", absl::Seconds(10));
  absl::StatusOr<NcclUniqueId> got = r1.Exchange(nullptr);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(got.status()),
              HasSubstr("rank 1 was started with 4 ranks (tensor-parallel "
                        "degree 4) but rank 0"));
  EXPECT_THAT(Msg(got.status()), HasSubstr("with 2; every rank must use the "
                                           "same degree"));
  absl::Status peers = r0.CheckPeers();
  EXPECT_EQ(peers.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(peers), HasSubstr("rank 1 was started with 4 ranks"));
  EXPECT_THAT(Msg(peers), HasSubstr("but rank 0 with 2"));
}

TEST(FileRendezvousTest, StaleFileWithAnotherRunIdIsIgnored) {
  TempDir dir;
  std::string path = dir.File("id");
  NcclUniqueId old_id = RandomId(3), new_id = RandomId(4);
  ASSERT_TRUE(FileRendezvous(path, 0, 2, "old-run", absl::Seconds(1))
                  .Exchange(&old_id)
                  .ok());
  FileRendezvous r1(path, 1, 2, "new-run", absl::Milliseconds(200));
  auto timed_out = r1.Exchange(nullptr);
  EXPECT_EQ(timed_out.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(Msg(timed_out.status()), HasSubstr("run id 'old-run'"));
  // The new rank 0 replaces the file; the waiting peer takes the new id.
  absl::StatusOr<NcclUniqueId> got = absl::UnknownError("");
  std::thread peer([&] {
    got = FileRendezvous(path, 1, 2, "new-run", absl::Seconds(10))
              .Exchange(nullptr);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(FileRendezvous(path, 0, 2, "new-run", absl::Seconds(1))
                  .Exchange(&new_id)
                  .ok());
  peer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(SameId(*got, new_id));
}

TEST(FileRendezvousTest, StaleFileOfAnExitedWriterIsIgnored) {
  TempDir dir;
  std::string path = dir.File("id");
  // A rank 0 that published and exited (an earlier run that crashed).
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    NcclUniqueId id = RandomId(5);
    _exit(FileRendezvous(path, 0, 2, "", absl::Seconds(1)).Exchange(&id).ok()
              ? 0
              : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  ASSERT_TRUE(Exists(path));
  auto got = FileRendezvous(path, 1, 2, "", absl::Milliseconds(200))
                 .Exchange(nullptr);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(Msg(got.status()),
              HasSubstr(absl::StrCat("written by process ", child,
                                     ", which has exited")));
}

TEST(FileRendezvousTest, TimeoutNamesPathAndMalformedFileIsDataLoss) {
  TempDir dir;
  std::string path = dir.File("never");
  auto got = FileRendezvous(path, 1, 2, "", absl::Milliseconds(100))
                 .Exchange(nullptr);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(Msg(got.status()), HasSubstr(path));
  EXPECT_THAT(Msg(got.status()), HasSubstr("is rank 0 running"));
  ASSERT_TRUE(AtomicWriteFile(path, "something else\n").ok());
  got = FileRendezvous(path, 1, 2, "", absl::Seconds(5)).Exchange(nullptr);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(got.status()), HasSubstr("malformed"));
}

// A rendezvous path that is not a regular file: rank 0 refuses to publish
// and leaves it alone (before, its clean-up removed whatever was there, so
// as root --rendezvous=/dev/null deleted the device node, and the rename
// put a regular file in its place); the other ranks report it at once
// (before, reading a FIFO blocked forever).
TEST(FileRendezvousTest, SpecialFileAsPathIsRefusedAndKept) {
  TempDir dir;
  std::string fifo = dir.File("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  NcclUniqueId id = RandomId(3);
  auto published = FileRendezvous(fifo, 0, 2, "", absl::Seconds(1)).Exchange(&id);
  EXPECT_EQ(published.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(published.status()),
              HasSubstr("is a FIFO, not a regular file; llmc writes regular "
                        "files only"));
  struct stat st;
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  auto t0 = absl::Now();
  auto got = FileRendezvous(fifo, 1, 2, "", absl::Seconds(30)).Exchange(nullptr);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(got.status()),
              HasSubstr("rendezvous file '" + fifo + "' is a FIFO"));
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(FileRendezvousTest, RejectsBadRankAndMissingId) {
  TempDir dir;
  EXPECT_EQ(FileRendezvous(dir.File("a"), 2, 2, "", absl::Seconds(1))
                .Exchange(nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FileRendezvous(dir.File("a"), 0, 0, "", absl::Seconds(1))
                .Exchange(nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(FileRendezvous(dir.File("a"), 0, 2, "", absl::Seconds(1))
                      .Exchange(nullptr)
                      .status()),
              HasSubstr("rank 0 must supply"));
}

TEST(CommunicatorTest, RejectsBadRankAndDegreeBeforeTouchingNccl) {
  NcclUniqueId id;
  auto a = Communicator::Create(nullptr, id, 0, 0);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(a.status()), HasSubstr("nranks >= 1, got 0"));
  auto b = Communicator::Create(nullptr, id, 2, 2);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(b.status()), HasSubstr("rank 2 is out of range for 2 ranks"));
  auto c = Communicator::Create(nullptr, id, -1, 2);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CommunicatorDeathTest, MissingLibncclIsAClearStatus) {
  // A fresh process (threadsafe style re-executes the test binary), so the
  // process-wide NCCL table is loaded under the environment variable.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("LLMC_LIBNCCL", "/nonexistent/libnccl.so.2", 1);
        auto id = Communicator::GetUniqueId();
        bool clear = !id.ok() &&
                     id.status().code() == absl::StatusCode::kFailedPrecondition &&
                     Msg(id.status()).find("LLMC_LIBNCCL") != std::string::npos;
        std::exit(clear ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CommunicatorTest, UniqueIdsFromLibnccl) {
  if (!Nccl::Get().ok()) GTEST_SKIP() << Nccl::Get().status();
  auto a = Communicator::GetUniqueId();
  auto b = Communicator::GetUniqueId();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(SameId(*a, *b));
  EXPECT_FALSE(SameId(*a, NcclUniqueId{}));
}

// ---------------------------------------------------------------------------
// PlanCollectiveJoins
// ---------------------------------------------------------------------------

/// Arena buffers 0..3 at [0,100) [100,200) [0,100) [300,400); input 4,
/// output 5.
Executable JoinTestExecutable() {
  Executable e;
  e.inputs = {{"x", DType::f32, {25}}};
  e.outputs = {{"y", DType::f32, {25}}};
  e.arena_bytes = 400;
  auto arena = [&](int id, int64_t off) {
    Buffer b;
    b.id = id;
    b.kind = Buffer::Arena;
    b.bytes = 100;
    b.arena_offset = off;
    e.buffers.push_back(b);
  };
  arena(0, 0);
  arena(1, 100);
  arena(2, 0);
  arena(3, 300);
  Buffer in;
  in.id = 4, in.kind = Buffer::Input, in.bytes = 100, in.io_index = 0;
  Buffer out;
  out.id = 5, out.kind = Buffer::Output, out.bytes = 100, out.io_index = 0;
  e.buffers.push_back(in);
  e.buffers.push_back(out);
  CollectiveSpec c;
  c.dtype = DType::f32;
  c.count = 25;
  c.send = {0, 0};
  c.recv = {1, 0};
  e.collectives = {c};
  return e;
}

Launch KernelOn(std::vector<int> buffers) {
  Launch l;
  l.kind = Launch::Kernel;
  l.kernel = 0;
  for (int b : buffers) {
    Arg a;
    a.kind = Arg::BufferPtr;
    a.buffer = b;
    l.args.push_back(a);
  }
  return l;
}

Launch CollectiveLaunch() {
  Launch l;
  l.kind = Launch::Collective;
  l.collective = 0;
  return l;
}

TEST(PlanCollectiveJoinsTest, JoinsBeforeFirstLaunchTouchingRecvOrOverwritingSend) {
  Executable e = JoinTestExecutable();
  e.launches = {KernelOn({4, 0}),  // 0: x -> send
                CollectiveLaunch(),  // 1: all_reduce send -> recv
                KernelOn({4, 3}),  // 2: independent of the collective
                KernelOn({2}),     // 3: reuses the send buffer's arena bytes
                KernelOn({1, 5})};  // 4: reads recv
  auto joins = PlanCollectiveJoins(e);
  ASSERT_EQ(joins.size(), 5u);
  EXPECT_TRUE(joins[0].empty());
  EXPECT_TRUE(joins[1].empty());
  EXPECT_TRUE(joins[2].empty());  // overlaps
  EXPECT_EQ(joins[3], std::vector<int>{1});
  EXPECT_TRUE(joins[4].empty());  // already joined at 3
}

TEST(PlanCollectiveJoinsTest, GemmReadingTheSendBufferNeedsNoJoin) {
  Executable e = JoinTestExecutable();
  GemmSpec g;
  g.a = {0, 0};  // reads send: no hazard with the collective's read
  g.b = {4, 0};
  g.d = {3, 0};
  GemmSpec g2 = g;
  g2.a = {1, 0};  // reads recv: must wait
  e.gemms = {g, g2};
  Launch l1;
  l1.kind = Launch::Gemm;
  l1.gemm = 0;
  Launch l2 = l1;
  l2.gemm = 1;
  e.launches = {CollectiveLaunch(), l1, l2};
  auto joins = PlanCollectiveJoins(e);
  EXPECT_TRUE(joins[1].empty());
  EXPECT_EQ(joins[2], std::vector<int>{0});
}

TEST(PlanCollectiveJoinsTest, DonatedOutputCountsAsItsInputAndUnusedResultsJoinAtEnd) {
  Executable e = JoinTestExecutable();
  e.outputs[0].alias_input = 0;
  e.collectives[0].send = {4, 0};  // sends the input
  e.launches = {CollectiveLaunch(),
                KernelOn({3}),   // independent
                KernelOn({5})};  // writes the output = the donated input
  auto joins = PlanCollectiveJoins(e);
  EXPECT_TRUE(joins[1].empty());
  EXPECT_EQ(joins[2], std::vector<int>{0});
  e.outputs[0].alias_input = -1;
  joins = PlanCollectiveJoins(e);
  for (const auto& j : joins) EXPECT_TRUE(j.empty());  // joined at the end
}

// ---------------------------------------------------------------------------
// ProgrammaticLaunches
// ---------------------------------------------------------------------------

TEST(ProgrammaticLaunchesTest, OnlyKernelsThatWaitDirectlyAfterAKernel) {
  Executable e = JoinTestExecutable();
  e.kernels.resize(2);
  e.kernels[0].grid_dependency = true;  // kernel 1 does not wait
  Launch old = KernelOn({3});
  old.kernel = 1;
  Launch copy;
  copy.kind = Launch::Copy;
  Launch cudnn = KernelOn({3});  // an attention cuDNN may run instead
  cudnn.attention = 0;
  e.num_prepare_launches = 1;
  e.launches = {KernelOn({4, 0}),    // 0: preparation
                KernelOn({4, 3}),    // 1: first per-call launch: no
                KernelOn({3}),       // 2: after a kernel: yes
                old,                 // 3: its kernel does not wait: no
                KernelOn({3}),       // 4: after a kernel that does not wait: yes
                CollectiveLaunch(),  // 5
                KernelOn({3}),       // 6: after a collective: no
                copy,                // 7
                KernelOn({3}),       // 8: after a copy: no
                KernelOn({1, 5}),    // 9: joins the collective: no
                cudnn,               // 10: after a kernel: yes (the kernel waits)
                KernelOn({3})};      // 11: after what cuDNN may run: no
  auto joins = PlanCollectiveJoins(e);
  ASSERT_EQ(joins[9], std::vector<int>{5});
  EXPECT_EQ(ProgrammaticLaunches(e, joins),
            (std::vector<char>{0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0}));
  // Without a preparation segment the first launch still has no predecessor.
  e.num_prepare_launches = 0;
  EXPECT_EQ(ProgrammaticLaunches(e, joins)[1], 1);
  EXPECT_EQ(ProgrammaticLaunches(e, joins)[0], 0);
}

// ---------------------------------------------------------------------------
// GPU: communicators and sessions with collectives
// ---------------------------------------------------------------------------

int VisibleGpus() {
  auto cu = CudaDriver::Get();
  if (!cu.ok() || (*cu)->cuInit(0) != CUDA_SUCCESS) return 0;
  int n = 0;
  if ((*cu)->cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
  return n;
}

/// all_reduce(sum) of an f32 input into the arena, then a copy to the output
/// (the copy must wait for the collective), and an independent copy of the
/// input to a second output.
Executable AllReduceExecutable(int64_t n, CollectiveSpec::Reduction red) {
  Executable e;
  e.inputs = {{"x", DType::f32, {n}}};
  e.outputs = {{"y", DType::f32, {n}}, {"x_copy", DType::f32, {n}}};
  e.arena_bytes = n * 4;
  Buffer in, out, out2, tmp;
  in.id = 0, in.kind = Buffer::Input, in.bytes = n * 4, in.io_index = 0;
  out.id = 1, out.kind = Buffer::Output, out.bytes = n * 4, out.io_index = 0;
  out2.id = 2, out2.kind = Buffer::Output, out2.bytes = n * 4, out2.io_index = 1;
  tmp.id = 3, tmp.kind = Buffer::Arena, tmp.bytes = n * 4;
  e.buffers = {in, out, out2, tmp};
  CollectiveSpec c;
  c.op = CollectiveSpec::AllReduce;
  c.reduction = red;
  c.dtype = DType::f32;
  c.count = n;
  c.send = {0, 0};
  c.recv = {3, 0};
  e.collectives = {c};
  Launch coll;
  coll.kind = Launch::Collective;
  coll.collective = 0;
  coll.label = "llm.all_reduce";
  Launch indep;
  indep.kind = Launch::Copy;
  indep.src = {0, 0};
  indep.dst = {2, 0};
  indep.copy_bytes = n * 4;
  Launch dep = indep;
  dep.src = {3, 0};
  dep.dst = {1, 0};
  e.launches = {coll, indep, dep};
  return e;
}

std::vector<float> RandomFloats(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/// One rank: opens GPU `rank`, joins the communicator, runs the all_reduce
/// executable `runs` times (CUDA graphs on), checks y against `expected`.
void RunRank(const NcclUniqueId& id, int rank, int nranks, int64_t n,
             CollectiveSpec::Reduction red, const std::vector<float>& mine,
             const std::vector<float>& expected, absl::Status* result) {
  auto fail = [&](absl::Status st) { *result = st; };
  auto device = Device::Open(rank);
  if (!device.ok()) return fail(device.status());
  auto comm = Communicator::Create(*device, id, rank, nranks, absl::Seconds(60));
  if (!comm.ok()) return fail(comm.status());
  std::shared_ptr<Communicator> shared = std::move(*comm);
  SessionOptions so;
  so.communicator = shared;
  auto session = Session::Load(
      *device, std::make_shared<Executable>(AllReduceExecutable(n, red)), so);
  if (!session.ok()) return fail(session.status());
  auto x = (*device)->Alloc(n * 4), y = (*device)->Alloc(n * 4),
       y2 = (*device)->Alloc(n * 4);
  if (!x.ok() || !y.ok() || !y2.ok()) return fail(absl::InternalError("alloc"));
  auto stream = (*device)->CreateStream();
  if (!stream.ok()) return fail(stream.status());
  absl::Status st = (*device)->CopyToDevice(*x, mine.data(), n * 4);
  for (int it = 0; st.ok() && it < 3; ++it) {
    if (st.ok()) st = (*device)->Memset(*y, 0xFF, n * 4);
    if (st.ok())
      st = (*session)->Run({{*x, DType::f32, {n}}},
                           {{*y, DType::f32, {n}}, {*y2, DType::f32, {n}}},
                           *stream);
    if (st.ok()) st = shared->Wait(*stream, "the all_reduce test");
  }
  std::vector<float> got(n), copy(n);
  if (st.ok()) st = (*device)->CopyToHost(got.data(), *y, n * 4);
  if (st.ok()) st = (*device)->CopyToHost(copy.data(), *y2, n * 4);
  if (st.ok() && (*session)->num_graph_captures() != 1)
    st = absl::InternalError("expected one CUDA graph capture");
  for (int64_t i = 0; st.ok() && i < n; ++i) {
    double tol = 1e-5 * (std::abs(expected[i]) + 1.0);
    if (!(std::abs(got[i] - expected[i]) <= tol))
      st = absl::InternalError(absl::StrCat("rank ", rank, " y[", i, "] = ",
                                            got[i], ", expected ", expected[i]));
    else if (copy[i] != mine[i])
      st = absl::InternalError(absl::StrCat("rank ", rank, " x_copy[", i, "]"));
  }
  (void)(*device)->DestroyStream(*stream);
  for (uint64_t p : {*x, *y, *y2}) (void)(*device)->Free(p);
  *result = st;
}

TEST(CommunicatorGpuTest, AllReduceAcrossGpusOnTheCommunicationStream) {
  int gpus = VisibleGpus();
  if (gpus < 1) GTEST_SKIP() << "needs a GPU";
  if (!Nccl::Get().ok()) GTEST_SKIP() << Nccl::Get().status();
  int nranks = std::min(gpus, 2);
  const int64_t n = (1 << 20) + 3;
  for (auto red : {CollectiveSpec::Sum, CollectiveSpec::Max}) {
    auto id = Communicator::GetUniqueId();
    ASSERT_TRUE(id.ok()) << id.status();
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < nranks; ++r) inputs.push_back(RandomFloats(n, 100 + r));
    std::vector<float> expected(n);
    for (int64_t i = 0; i < n; ++i) {
      double acc = inputs[0][i];
      for (int r = 1; r < nranks; ++r)
        acc = red == CollectiveSpec::Sum ? acc + inputs[r][i]
                                         : std::max<double>(acc, inputs[r][i]);
      expected[i] = static_cast<float>(acc);
    }
    std::vector<absl::Status> results(nranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; ++r)
      threads.emplace_back(RunRank, std::cref(*id), r, nranks, n, red,
                           std::cref(inputs[r]), std::cref(expected),
                           &results[r]);
    for (auto& t : threads) t.join();
    for (int r = 0; r < nranks; ++r) EXPECT_TRUE(results[r].ok()) << results[r];
  }
}

TEST(CommunicatorGpuTest, MissingPeerTimesOutWithClearError) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  if (!Nccl::Get().ok()) GTEST_SKIP() << Nccl::Get().status();
  auto device = Device::Open(0);
  ASSERT_TRUE(device.ok()) << device.status();
  auto id = Communicator::GetUniqueId();
  ASSERT_TRUE(id.ok());
  absl::Time t0 = absl::Now();
  // Rank 0 of 2; rank 1 never starts.
  auto comm = Communicator::Create(*device, *id, 0, 2, absl::Seconds(2));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(30));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded)
      << comm.status();
  EXPECT_THAT(Msg(comm.status()), HasSubstr("rank 0 of 2"));
  EXPECT_THAT(Msg(comm.status()), HasSubstr("timeout of 2 s"));
}

TEST(CommunicatorGpuTest, SessionWithoutCommunicatorFailsAtLoad) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  if (!Nccl::Get().ok()) GTEST_SKIP() << Nccl::Get().status();
  auto device = Device::Open(0);
  ASSERT_TRUE(device.ok());
  auto s = Session::Load(*device, std::make_shared<Executable>(
                                      AllReduceExecutable(16, CollectiveSpec::Sum)));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(s.status()), HasSubstr("no NCCL communicator"));
}

}  // namespace
}  // namespace llmc::rt
