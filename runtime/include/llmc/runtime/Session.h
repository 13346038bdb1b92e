// Device execution: a Session loads an Executable onto a Device (Device.h)
// and runs its launch sequence, optionally as a captured CUDA graph. Needs
// libcuda and a GPU at run time.
#ifndef LLMC_RUNTIME_SESSION_H
#define LLMC_RUNTIME_SESSION_H

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "llmc/runtime/CudaTypes.h"
#include "llmc/runtime/Device.h"
#include "llmc/runtime/Executable.h"
#include "llmc/runtime/Profile.h"
#include "llmc/runtime/KernelCompiler.h"
#include "llmc/runtime/MemoryPool.h"

namespace llmc::rt {

class Communicator;

/// The alignment, in bytes, every input and output tensor's address must
/// have: llmc's kernels read and write them with 16-byte vectors (cp.async
/// in attention, the GEMVs, the row kernels), and a misaligned access is a
/// sticky CUDA error that ends the process's context.
inline constexpr uint64_t kTensorAlignment = 16;

/// A tensor in device memory (dense, row-major; `dptr` a multiple of
/// kTensorAlignment unless the tensor is empty).
struct DeviceTensor {
  uint64_t dptr = 0;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
};

/// Checks `tensors` against `sigs` (count, dtype, shape, non-null pointer
/// aligned to kTensorAlignment, except tensor i when `staged` says
/// (*staged)[i] >= 0: it is copied through the session's aligned staging
/// buffer). InvalidArgument naming the tensor, expected vs actual. `what` is
/// "input" or "output".
absl::Status CheckTensors(const std::vector<TensorSig>& sigs,
                          const std::vector<DeviceTensor>& tensors,
                          const char* what,
                          const std::vector<int64_t>* staged = nullptr);

struct SessionOptions {
  /// Run the launch sequence (after parameter preparation, which always runs
  /// eagerly) as a CUDA graph. Graphs are keyed by the input and output
  /// pointers: up to `max_cuda_graphs` instantiated graphs are kept, least
  /// recently used first out, so a caller whose allocator cycles through a
  /// few buffer sets replays without capturing. A new pointer set is
  /// captured once and, when the cache is full, written into the least
  /// recently used graph with cuGraphExecUpdate (a fresh cuGraphInstantiate
  /// when the update is refused or the driver lacks it). On the legacy
  /// default stream (stream == nullptr or CU_STREAM_LEGACY, where capture is
  /// not allowed) the graph runs on a private stream of the session, ordered
  /// after the caller's earlier work and before its later work by events.
  /// A caller that is itself capturing `stream` gets the launches enqueued
  /// into its capture. When more than 16 of the last 32 runs (after 32
  /// captures) missed the cache, graphs cost more than they save and are
  /// turned off as below. A capture or instantiation failure is not an error: the session turns
  /// graphs off, says why in graph_stats().disabled_reason (and once on
  /// stderr), and enqueues the launches as without graphs.
  bool use_cuda_graphs = true;
  /// Instantiated CUDA graphs kept per session (>= 1).
  int max_cuda_graphs = 4;
  /// With use_cuda_graphs, for callers whose small inputs move between calls
  /// (what PyTorch's CUDA graph trees call dynamic inputs: a new token, a
  /// position): these inputs (indices into the executable's inputs) are
  /// copied at the start of every run (cuMemcpyDtoDAsync on the caller's
  /// stream) into staging buffers of the session, which the launches read
  /// instead, so neither the graph key nor the captured graph depends on
  /// where the caller keeps them. Load fails with InvalidArgument for an
  /// index out of range, a duplicate, a parameter input or an input that an
  /// output aliases. Ignored without use_cuda_graphs; once graphs are
  /// turned off for the session, only a staged input at an address that is
  /// not kTensorAlignment-aligned is still copied (such an input may lie at
  /// any address).
  std::vector<int> staged_inputs;
  /// With use_cuda_graphs: outputs of at most this many bytes that alias no
  /// input are written into staging buffers of the session and copied into
  /// the caller's tensors after the launches (one device-to-device copy
  /// each), so fresh output tensors on every call keep the graph. 0: none.
  /// Such an output may lie at any address, as a staged input may.
  int64_t staged_output_bytes = 0;
  /// Compiler for kernels without a usable cubin; null = a private one.
  KernelCompiler* compiler = nullptr;
  /// Pool for the arena, constants and GEMM workspace; null = device pool.
  MemoryPool* pool = nullptr;
  /// Communicator for Collective launches (required if there are any; see
  /// Communicator.h). Kept alive by the session.
  std::shared_ptr<Communicator> communicator;
  /// Alternatively a raw ncclComm_t owned by the caller (used when
  /// `communicator` is null).
  void* nccl_comm = nullptr;
  /// cuBLASLt workspace, bytes.
  size_t gemm_workspace_bytes = 32 << 20;
  /// Run the attention launches that carry a cuDNN alternative
  /// (Launch::attention) through cuDNN's fused flash attention where
  /// libcudnn.so.9 loads and a plan builds (CudnnAttention.h); false: always
  /// llmc's kernels.
  bool use_cudnn_attention = true;
  /// Programmatic dependent launch (sm_90+, CUDA Programming Guide 4.5):
  /// a kernel whose KernelSpec::grid_dependency is set and that directly
  /// follows another kernel launch of the sequence is launched with
  /// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, so it starts
  /// (and prefetches what no launch writes) while that kernel finishes; it
  /// waits for it before touching its data. Results are bitwise the same.
  /// Off below sm_90, with a driver older than CUDA 12.3 (programmatic edges
  /// in captured graphs), for per-launch timings, and when the environment
  /// sets LLMC_PDL=0.
  bool programmatic_dependent_launch = true;
};

/// The dependencies of collectives run on a separate communication stream:
/// for each launch i, the indices of Collective launches whose completion
/// launch i must wait for, because it reads or writes memory the collective
/// writes (its recv buffer) or writes memory it reads (its send buffer).
/// Memory is compared by byte ranges: arena buffers by their planned
/// [arena_offset, arena_offset + bytes), inputs/outputs/constants per tensor
/// (an output that aliases a donated input counts as that input); kernel
/// arguments count as read and written. Later collectives need no entry (the
/// communication stream orders them). Collectives absent from every list are
/// joined at the end of the run.
std::vector<std::vector<int>> PlanCollectiveJoins(const Executable& exe);

/// Per launch, whether it may run with programmatic dependent launch
/// (SessionOptions::programmatic_dependent_launch): a per-call kernel launch
/// whose kernel waits for the previous launch itself
/// (KernelSpec::grid_dependency), directly after another per-call kernel
/// launch that always runs llmc's kernel (not one cuDNN may replace: the
/// library's last kernel need not imply that its earlier ones completed)
/// and joining no collective (`joins`: PlanCollectiveJoins), so its only
/// stream predecessor is that kernel.
std::vector<char> ProgrammaticLaunches(const Executable& exe,
                                       const std::vector<std::vector<int>>& joins);

/// An Executable loaded on a Device. Run() calls are serialized.
///
/// Collectives run on a communication stream of the session: the compute
/// stream records an event after the collective's producers, the
/// communication stream waits for it and runs the NCCL call, and the compute
/// stream waits for the collective's done event only right before the first
/// launch that depends on it (PlanCollectiveJoins), so independent compute
/// overlaps. The fork/join through events is captured into the CUDA graph
/// like any other work; every collective is joined before Run's work ends.
class Session {
 public:
  /// Validates the executable, loads/compiles every kernel (NVRTC for the
  /// device's arch when the cubin is absent or for another arch), uploads
  /// constants, allocates the arena and GEMM workspace, and plans every GEMM
  /// (cuBLASLt descriptors + heuristic algorithm).
  static absl::StatusOr<std::unique_ptr<Session>> Load(
      std::shared_ptr<Device> device, std::shared_ptr<const Executable> exe,
      SessionOptions options = {});
  ~Session();

  /// Enqueues the executable on `stream` (asynchronous). Inputs/outputs must
  /// match the signature exactly and lie at kTensorAlignment-aligned
  /// addresses (InvalidArgument otherwise, before anything is enqueued). The arena and
  /// the Persistent buffers (parameter-preparation results) belong to the
  /// session, not to a stream: a caller that alternates streams must order
  /// the runs itself (an event or a synchronize between them), as with any
  /// shared scratch.
  absl::Status Run(const std::vector<DeviceTensor>& inputs,
                   const std::vector<DeviceTensor>& outputs, CUstream stream);
  /// Like Run but without graphs, timing each launch with events; returns
  /// milliseconds per launch, from the end of the previous launch to the end
  /// of this one (so they add up to the run; synchronizes `stream`).
  absl::StatusOr<std::vector<float>> RunTimed(
      const std::vector<DeviceTensor>& inputs,
      const std::vector<DeviceTensor>& outputs, CUstream stream);
  /// Like RunTimed, with where each launch lies on the GPU's clock: CUDA
  /// events recorded on `stream` just before and just after every launch
  /// (LaunchTiming; synchronizes `stream`). Parameter-preparation launches
  /// that did not run read as zero-length at the first timed launch's start.
  absl::StatusOr<std::vector<LaunchTiming>> RunTimeline(
      const std::vector<DeviceTensor>& inputs,
      const std::vector<DeviceTensor>& outputs, CUstream stream);

  const Executable& executable() const { return *exe_; }
  /// The next Run re-runs the parameter-preparation segment (e.g. weight
  /// quantization) even if the parameter pointers are unchanged: call it after
  /// overwriting weights in place. The segment otherwise runs only when a
  /// parameter input's pointer changes (see ParameterGuard.h).
  void InvalidateParameters();
  /// What the CUDA graph path did so far (tests, diagnostics).
  struct GraphStats {
    int64_t captures = 0;        ///< stream captures of the launch sequence
    int64_t instantiations = 0;  ///< cuGraphInstantiate calls that succeeded
    int64_t updates = 0;         ///< captures written into a cached graph
    int64_t replays = 0;         ///< runs that launched a cached graph as is
    int64_t launches = 0;        ///< graph launches in all (replays + new)
    int64_t private_stream_runs = 0;  ///< graph runs for legacy-stream callers
    int cached = 0;              ///< instantiated graphs held now
    /// Why graphs were turned off for this session; "" while they are on.
    std::string disabled_reason;
  };
  GraphStats graph_stats() const;
  /// Number of CUDA graph captures so far (for tests/diagnostics).
  int num_graph_captures() const { return static_cast<int>(graph_stats().captures); }
  /// Which attention launches run on cuDNN and why the others run llmc's
  /// kernel (CudnnAttentionRunner::Report); "" without attention
  /// alternatives.
  const std::string& attention_report() const { return attention_report_; }

  struct Impl;

 private:
  Session() = default;
  absl::Status RunLocked(const std::vector<DeviceTensor>& inputs,
                         const std::vector<DeviceTensor>& outputs,
                         CUstream stream, std::vector<LaunchTiming>* timings)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<Device> device_;
  std::shared_ptr<const Executable> exe_;
  SessionOptions options_;
  std::unique_ptr<Impl> impl_;
  /// The CUDA graph path of RunLocked: replays, captures, updates or
  /// instantiates; on a capture/instantiation failure turns graphs off and
  /// enqueues eagerly. `first` = number of preparation launches.
  absl::Status RunGraph(const std::vector<uint64_t>& key, CUstream stream,
                        size_t first) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Lays out the staging buffers (SessionOptions::staged_inputs and
  /// staged_output_bytes) and allocates them; InvalidArgument for a bad
  /// staged input.
  absl::Status PlanStaging();
  /// Copies the staged outputs of this run into the caller's `outputs`:
  /// every one with a staging slot when `all` (the graphs are on), else those
  /// at an address not kTensorAlignment-aligned (staged for that reason).
  absl::Status CopyStagedOutputs(const std::vector<DeviceTensor>& outputs,
                                 CUstream stream, bool all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Enqueues launches [first, end) on `stream`, joining every collective.
  absl::Status EnqueueAll(CUstream stream, size_t first)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  GraphStats graph_stats_ ABSL_GUARDED_BY(mu_);
  std::string attention_report_;
};

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_SESSION_H
