// cuDNN's fused flash attention (SDPA forward) as an alternative to llmc's
// own FlashAttention-2 kernel for the attention launches an Executable marks
// (Launch::attention, AttentionSpec in Executable.h).
//
// libcudnn.so.9 is dlopen'ed like every NVIDIA library (DynamicLibs.h):
// LLMC_LIBCUDNN names the file explicitly, else
// CudaLibraryCandidates("libcudnn.so.9") are tried (the toolkit, the
// distribution's directories, the nvidia-cudnn-cu13 wheel). Only cuDNN's C
// backend API is used (cudnnBackend*Descriptor, SetAttribute, Finalize,
// GetAttribute, Execute): the operation graph is the one cudnn-frontend
// builds for SDPA forward (NVIDIA/cudnn-frontend,
// include/cudnn_frontend/node/scaled_dot_product_flash_attention.h and
// softmax.h), which cuDNN's fused flash attention engine matches:
//
//   S  = matmul(Q [b,hq,sq,d], K^T [b,hkv,d,skv])         (f32, virtual)
//   S  = S * scale                                      (scale by value)
//   S  = causal ? select(row >= col, S, lowest float) : S   (GEN_INDEX axes
//        2 and 3, CMP_GE, BINARY_SELECT; only for sq == skv, where top-left
//        and llmc's bottom-right alignment agree)
//   m  = max over keys(S); E = exp(S - m); l = sum over keys(E)
//   stats = m + log(l)      (virtual; f32 [b,hq,sq,1] output when the spec
//                            has `lse`: the training forward's statistics)
//   P  = E / l                                          (io dtype, virtual)
//   O  = matmul(P, V [b,hkv,skv,d])                     (f32 accumulation)
//
// Q/K/V/O keep llmc's [b, s, h, d] storage: cuDNN gets dims [b, h, s, d]
// with strides that describe it (K^T by swapping K's last two dims and
// strides), so nothing is transposed.
//
// The backward (AttentionSpec::backward) is the graph cudnn-frontend's
// CompositeSDPABackwardNode builds (see BuildSdpaBackwardOperations in
// CudnnAttention.cpp): rowsum(dO * O), P = exp(S * scale - stats) [causal],
// dV = P^T dO, dS = ((dO V^T - rowsum) * P) * scale, dK = dS^T Q, dQ = dS K
// through an f32 accumulator; GQA sums dK and dV over each group.
//
// A missing library, a build without cuDNN headers, an unsupported shape, a
// failed plan or a failed trial run all mean "run llmc's kernel": the runner
// records why (Report()) and never fails a Session load.
#ifndef LLMC_RUNTIME_CUDNNATTENTION_H
#define LLMC_RUNTIME_CUDNNATTENTION_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "llmc/runtime/CudaTypes.h"
#include "llmc/runtime/Executable.h"
#include "llmc/runtime/MemoryPool.h"

namespace llmc::rt {

/// True when this runtime was built with cuDNN headers (LLMC_HAVE_CUDNN);
/// without them every attention runs llmc's kernel.
bool CudnnAttentionCompiledIn();

/// "" if cuDNN's fused flash attention can take `spec` as far as llmc knows
/// without asking cuDNN (bf16/f16, head dim a multiple of 8 and <= 256,
/// Hkv divides Hq, causal only with sq == skv), else the reason it cannot.
/// cuDNN's heuristics have the last word at plan time.
std::string CudnnAttentionUnsupportedReason(const AttentionSpec& spec);

/// The loaded cuDNN library (opaque; see CudnnAttention.cpp).
struct Cudnn;

/// Loads libcudnn.so.9 once per process (FailedPrecondition naming the paths
/// tried and LLMC_LIBCUDNN when absent; Unimplemented in a build without
/// cuDNN headers or for a cuDNN older than 9.0).
absl::StatusOr<const Cudnn*> GetCudnn();
/// Loads a fresh table (honours LLMC_LIBCUDNN now); for tests.
absl::StatusOr<std::shared_ptr<const Cudnn>> LoadCudnn();
/// cudnnGetVersion() of a loaded library, e.g. 91400 for 9.14.0.
int64_t CudnnVersion(const Cudnn& lib);
/// Path the library was loaded from.
std::string CudnnPath(const Cudnn& lib);

/// Builds and finalizes every tensor and operation descriptor of `spec`'s
/// SDPA graph (no handle, no GPU needed) and returns the number of
/// operations; the errors are the ones plan building would report first.
/// For tests and diagnostics.
absl::StatusOr<int> CheckCudnnAttentionOperations(const Cudnn& lib,
                                                  const AttentionSpec& spec);

/// The cuDNN side of one Session: a cuDNN handle, one execution plan per
/// distinct attention configuration of the executable (shape, dtype,
/// causal, scale), one workspace, and for every AttentionSpec whether it
/// runs on cuDNN or falls back to its kernel (and why).
class CudnnAttentionRunner {
 public:
  /// Plans every spec of `exe` on the current context's GPU: builds the
  /// operation graph, asks the heuristics (mode A, then fallback) for engine
  /// configurations and finalizes the first that builds, then runs each plan
  /// once on zeroed scratch tensors from `pool` outside any capture (so a
  /// plan that cannot run, or lazily loads modules, is caught here and not
  /// inside a CUDA-graph capture). Never fails: a spec whose plan cannot be
  /// built or run is marked for its kernel. `lib` is GetCudnn()'s result.
  static std::unique_ptr<CudnnAttentionRunner> Create(
      const Executable& exe, MemoryPool* pool,
      absl::StatusOr<const Cudnn*> lib);
  ~CudnnAttentionRunner();
  CudnnAttentionRunner(const CudnnAttentionRunner&) = delete;
  CudnnAttentionRunner& operator=(const CudnnAttentionRunner&) = delete;

  /// True when attention `index` (into Executable::attentions) has a plan.
  bool Ready(int index) const;
  /// Number of specs that run on cuDNN.
  int num_ready() const;
  /// Enqueues attention `index` on `stream` (capturable) with the device
  /// addresses `address` gives for the spec's AttentionOperands (q, k, v,
  /// o, ...). Returns false without enqueuing anything when the
  /// spec has no plan or an address is not 16-byte aligned (cuDNN's
  /// requirement), and false when cuDNN's execute fails (the spec then runs
  /// its kernel from now on; Report() keeps the error): the caller then
  /// launches the kernel. Not an error in any of these cases.
  absl::StatusOr<bool> Run(int index,
                           const std::function<uint64_t(const BufferRef&)>& address,
                           CUstream stream);
  /// One line per outcome: "cuDNN <version> (<path>): attention 0, 2 (plan
  /// b=4 sq=2048 ... workspace N bytes)" / "llmc kernel for attention 1:
  /// <reason>".
  std::string Report() const;

  struct Plan;

 private:
  CudnnAttentionRunner() = default;
  const Cudnn* lib_ = nullptr;
  void* handle_ = nullptr;  // cudnnHandle_t
  std::vector<AttentionSpec> specs_;    // the executable's
  std::vector<std::unique_ptr<Plan>> plans_;
  std::vector<int> plan_of_;            // per spec: index into plans_ or -1
  std::vector<std::string> fallback_;   // per spec: why it falls back
  std::string global_fallback_;         // why nothing runs on cuDNN
  PooledBuffer workspace_;
};

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_CUDNNATTENTION_H
