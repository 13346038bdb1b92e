// Session internals shared by Session.cpp (loading, running), SessionLaunch.cpp
// (enqueuing one launch: kernel, cuBLASLt GEMM, NCCL collective, copy) and
// SessionGraph.cpp (the CUDA graph path): what a loaded executable holds on
// its device. Not a public header.
#ifndef LLMC_RUNTIME_LIB_SESSIONIMPL_H
#define LLMC_RUNTIME_LIB_SESSIONIMPL_H

#include <nvtx3/nvToolsExt.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "llmc/runtime/CudnnAttention.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/ParameterGuard.h"
#include "llmc/runtime/Session.h"

namespace llmc::rt {
namespace detail {

/// NCCL's data type for `t`; Unimplemented for the dtypes NCCL lacks.
absl::StatusOr<ncclDataType_t> NcclType(DType t);

/// Byte alignment of a device address that cuBLASLt's heuristics can use:
/// its largest power-of-two divisor, at most 256 (their default
/// assumption); 256 for a null address.
uint32_t GemmAlignment(uint64_t address);

/// One cuBLASLt plan of a GemmSpec: descriptors and the algorithm its
/// heuristics chose for operands aligned to at least `alignment` bytes
/// ({A, B, C, D} of the GemmSpec; CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*,
/// whose default, 256, would let an algorithm assume more than the arena's
/// 128 bytes or a caller's tensor gives).
struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::array<uint32_t, 4> alignment{256, 256, 256, 256};
};

/// Destroys `plan`'s descriptors (those it has) and clears it.
void DestroyGemmPlan(const CublasLt& lt, GemmPlan& plan);

/// An NVTX range (header-only NVTX v3: a no-op unless a tool such as Nsight
/// Systems is attached), so `nsys profile` shows llmc runs and, for eager and
/// timed runs, one range per launch named by its label.
class NvtxRange {
 public:
  explicit NvtxRange(const std::string& name) { nvtxRangePushA(name.c_str()); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace detail

struct Session::Impl {
  const CudaDriver* driver_ = nullptr;
  const CublasLt* lt = nullptr;
  const Nccl* nccl = nullptr;
  MemoryPool* pool = nullptr;
  std::vector<CUmodule> modules;
  std::vector<CUfunction> functions;
  std::vector<PooledBuffer> constants;  // by buffer id (empty if not constant)
                                        // (also Persistent buffers)
  ParameterGuard parameters;            // when to run the preparation segment
  PooledBuffer arena, workspace;
  cublasLtHandle_t lt_handle = nullptr;
  // Per GemmSpec, its plans: the first made at load for the alignments of
  // the arena's and constants' addresses (and 256-byte aligned inputs and
  // outputs), more on demand for callers' tensors aligned less
  // (GemmPlanFor).
  std::vector<std::vector<detail::GemmPlan>> gemms;
  // Instantiated CUDA graphs by input/output pointer key, least recently
  // used first out (SessionOptions::use_cuda_graphs).
  struct CachedGraph {
    std::vector<uint64_t> key;
    CUgraphExec exec = nullptr;
    uint64_t last_use = 0;
  };
  std::vector<CachedGraph> graphs;
  uint64_t graph_clock = 0;
  uint32_t graph_history = 0;  // cache misses of the last 32 graph runs
  // Graph runs for callers on the legacy default stream: a private stream
  // and the events that order it after / before the caller's work.
  CUstream graph_stream = nullptr;
  CUevent graph_fork = nullptr, graph_join = nullptr;
  std::vector<uint64_t> base;  // per buffer, resolved each run
  // Staged inputs/outputs (SessionOptions::staged_inputs and
  // staged_output_bytes): byte offsets into `staging` by input / output
  // index, -1 when not staged.
  PooledBuffer staging;
  std::vector<int64_t> staged_input_offset, staged_output_offset;
  // Collectives: the communicator, the communication stream, per Collective
  // launch a fork event (compute -> comm) and a done event (comm -> compute),
  // and the joins each launch needs (PlanCollectiveJoins).
  ncclComm_t comm = nullptr;
  CUstream comm_stream = nullptr;
  std::map<int, std::pair<CUevent, CUevent>> collective_events;
  std::vector<std::vector<int>> joins;
  // Per launch: whether it may be launched with programmatic dependent
  // launch (SessionOptions::programmatic_dependent_launch).
  std::vector<char> programmatic;
  std::vector<int> pending;  // Collective launches not yet joined this run
  // cuDNN alternatives of attention kernels (Launch::attention); null: none.
  std::unique_ptr<CudnnAttentionRunner> attention;
  // Per attention spec: the first launch carrying it (where cuDNN runs), and
  // whether cuDNN ran it in the current pass (its other launches skipped).
  std::vector<size_t> attention_first_launch;
  std::vector<char> attention_ran;

  ~Impl() {
    attention.reset();
    for (CachedGraph& g : graphs)
      if (g.exec) driver_->cuGraphExecDestroy(g.exec);
    if (graph_fork) driver_->cuEventDestroy(graph_fork);
    if (graph_join) driver_->cuEventDestroy(graph_join);
    if (graph_stream) driver_->cuStreamDestroy(graph_stream);
    for (auto& [i, ev] : collective_events) {
      if (ev.first) driver_->cuEventDestroy(ev.first);
      if (ev.second) driver_->cuEventDestroy(ev.second);
    }
    if (comm_stream) driver_->cuStreamDestroy(comm_stream);
    for (std::vector<detail::GemmPlan>& plans : gemms)
      for (detail::GemmPlan& g : plans) detail::DestroyGemmPlan(*lt, g);
    if (lt_handle) lt->cublasLtDestroy(lt_handle);
    for (CUmodule m : modules) driver_->cuModuleUnload(m);
  }

  /// Plans `g` for operands aligned to `alignment` ({A, B, C, D} bytes).
  absl::Status PlanGemm(const GemmSpec& g, size_t workspace_bytes,
                        const std::array<uint32_t, 4>& alignment,
                        detail::GemmPlan* plan);
  /// The plan of gemm `index` for operands aligned to `alignment` (bytes,
  /// {A, B, C, D}, each at most 256): the one made for exactly these, else
  /// a new one (a cuBLASLt heuristic query, kept for later calls).
  absl::StatusOr<detail::GemmPlan*> GemmPlanFor(
      const Executable& exe, int index, const std::array<uint32_t, 4>& alignment);
  /// The alignments {A, B, C, D} of `g`'s operands at this run's addresses
  /// (`base`).
  std::array<uint32_t, 4> GemmAlignments(const GemmSpec& g) const;
  /// Makes sure every GEMM launch in [first, end) has its plan for this
  /// run's addresses, before a CUDA graph capture: a cuBLASLt heuristic
  /// query (or its failure) inside the capture would turn the graphs off.
  absl::Status PlanGemmsForThisRun(const Executable& exe, size_t first);
  /// `programmatic`: a kernel launch starts while the previous kernel
  /// finishes (programmatic dependent launch).
  absl::Status Enqueue(const Executable& exe, const Launch& l, CUstream stream,
                       bool programmatic = false);
  /// Enqueues launch `i` on `stream`, first joining the collectives it
  /// depends on; a collective is forked onto the communication stream (and
  /// joined at once when `join_now`, for per-launch timing and the
  /// preparation, which also launch every kernel without overlap; otherwise
  /// a kernel marked in `programmatic` overlaps its predecessor).
  absl::Status EnqueueAt(const Executable& exe, size_t i, CUstream stream,
                         bool join_now);
  absl::Status Join(int launch, CUstream stream);
  /// Joins every collective still pending (end of a run).
  absl::Status JoinAll(CUstream stream);
};

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_LIB_SESSIONIMPL_H
