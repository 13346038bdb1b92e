// The CUDA graph path of Session::Run: replays a cached graph, or captures
// the launches and instantiates (or updates) one, keyed by the input and
// output pointers; turns graphs off for the session when they cost more
// than they save or cannot be made (SessionOptions::use_cuda_graphs).
#include <algorithm>
#include <cstdio>
#include <string>

#include "SessionImpl.h"
#include "llmc/runtime/Log.h"
#include "absl/strings/str_cat.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {

using namespace detail;

#define CU_CALL(fn, ...) LLMC_VENDOR_CALL(*driver_, fn, __VA_ARGS__)

Session::GraphStats Session::graph_stats() const {
  absl::MutexLock lock(&mu_);
  GraphStats s = graph_stats_;
  s.cached = static_cast<int>(impl_->graphs.size());
  return s;
}

absl::Status Session::RunGraph(const std::vector<uint64_t>& key,
                               CUstream stream, size_t first) {
  Impl& im = *impl_;
  const CudaDriver* driver_ = im.driver_;
  GraphStats& stats = graph_stats_;
  // Capture is not allowed on the legacy default stream: run on a private
  // stream that waits for the caller's work so far, and make the caller's
  // stream wait for the graph.
  const bool legacy = stream == nullptr || stream == CU_STREAM_LEGACY;
  if (!legacy && driver_->cuStreamIsCapturing) {
    // The caller is capturing its own graph: our launches become part of it.
    CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
    if (driver_->cuStreamIsCapturing(stream, &capturing) == CUDA_SUCCESS &&
        capturing != CU_STREAM_CAPTURE_STATUS_NONE)
      return EnqueueAll(stream, first);
  }
  CUstream s = stream;
  if (legacy) {
    if (!im.graph_stream) {
      LLMC_RT_RETURN_IF_ERROR(
          CU_CALL(cuStreamCreate, &im.graph_stream, CU_STREAM_NON_BLOCKING));
      LLMC_RT_RETURN_IF_ERROR(
          CU_CALL(cuEventCreate, &im.graph_fork, CU_EVENT_DISABLE_TIMING));
      LLMC_RT_RETURN_IF_ERROR(
          CU_CALL(cuEventCreate, &im.graph_join, CU_EVENT_DISABLE_TIMING));
    }
    LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuEventRecord, im.graph_fork, stream));
    LLMC_RT_RETURN_IF_ERROR(
        CU_CALL(cuStreamWaitEvent, im.graph_stream, im.graph_fork, 0));
    s = im.graph_stream;
  }
  auto join = [&]() -> absl::Status {
    if (!legacy) return absl::OkStatus();
    ++stats.private_stream_runs;
    LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuEventRecord, im.graph_join, s));
    return CU_CALL(cuStreamWaitEvent, stream, im.graph_join, 0);
  };
  auto launch = [&](Impl::CachedGraph& g) -> absl::Status {
    g.last_use = ++im.graph_clock;
    NvtxRange range("llmc CUDA graph launch");
    LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuGraphLaunch, g.exec, s));
    ++stats.launches;
    return join();
  };
  // Graphs off for good: say why once, then run as without graphs (on the
  // caller's stream; the private one, if forked, is joined empty).
  auto give_up = [&](const absl::Status& why) -> absl::Status {
    stats.disabled_reason = std::string(why.message());
    Log(LogLevel::warning,
        absl::StrCat("CUDA graphs turned off for this session, launches are "
                     "enqueued one by one: ",
                     stats.disabled_reason));
    for (Impl::CachedGraph& g : im.graphs)
      if (g.exec) driver_->cuGraphExecDestroy(g.exec);
    im.graphs.clear();
    if (legacy) {
      LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuEventRecord, im.graph_join, s));
      LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuStreamWaitEvent, stream, im.graph_join, 0));
    }
    return EnqueueAll(stream, first);
  };

  // The last 32 lookups, one bit each (1 = miss): when pointer sets change
  // on most calls, capturing costs more than graphs save.
  im.graph_history <<= 1;
  for (Impl::CachedGraph& g : im.graphs)
    if (g.key == key) {
      ++stats.replays;
      return launch(g);
    }
  im.graph_history |= 1;
  if (stats.captures >= 32 && __builtin_popcount(im.graph_history) > 16)
    return give_up(absl::FailedPreconditionError(absl::StrCat(
        "the input/output pointers changed on ", __builtin_popcount(im.graph_history),
        " of the last 32 runs (more sets than the ", options_.max_cuda_graphs,
        " cached graphs)")));

  // A new pointer set: capture the launches, each GEMM planned for these
  // addresses first (not inside the capture).
  LLMC_RT_RETURN_IF_ERROR(im.PlanGemmsForThisRun(*exe_, first));
  absl::Status begin =
      CU_CALL(cuStreamBeginCapture, s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (!begin.ok()) return give_up(Annotate(begin, "beginning the capture"));
  absl::Status enq = EnqueueAll(s, first);
  CUgraph graph = nullptr;
  absl::Status end = CU_CALL(cuStreamEndCapture, s, &graph);
  if (!enq.ok() || !end.ok()) {
    if (graph) driver_->cuGraphDestroy(graph);
    return give_up(Annotate(enq.ok() ? end : enq, "capturing the launches"));
  }
  ++stats.captures;
  struct GraphGuard {
    const CudaDriver* d;
    CUgraph g;
    ~GraphGuard() { d->cuGraphDestroy(g); }
  } guard{driver_, graph};

  const size_t capacity =
      static_cast<size_t>(std::max(1, options_.max_cuda_graphs));
  if (im.graphs.size() >= capacity) {
    // Full: reuse the least recently used graph, updated in place when the
    // driver accepts the new graph's topology (same launches, new pointers).
    auto lru = std::min_element(
        im.graphs.begin(), im.graphs.end(),
        [](const Impl::CachedGraph& a, const Impl::CachedGraph& b) {
          return a.last_use < b.last_use;
        });
    if (driver_->cuGraphExecUpdate) {
      CUgraphExecUpdateResultInfo info{};
      if (driver_->cuGraphExecUpdate(lru->exec, graph, &info) == CUDA_SUCCESS) {
        lru->key = key;
        ++stats.updates;
        return launch(*lru);
      }
    }
    driver_->cuGraphExecDestroy(lru->exec);
    im.graphs.erase(lru);
  }
  CUgraphExec exec = nullptr;
  absl::Status inst = CU_CALL(cuGraphInstantiate, &exec, graph, 0);
  if (!inst.ok()) return give_up(Annotate(inst, "instantiating the graph"));
  ++stats.instantiations;
  im.graphs.push_back({key, exec, 0});
  return launch(im.graphs.back());
}

}  // namespace llmc::rt
