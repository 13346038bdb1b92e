//===- LowerToExecutable.h - llm function -> runtime Executable -*- C++ -*-===//
//
// Codegen: turns a shape-specialized `func.func` of `llm` ops into an
// rt::Executable — fused CUDA C++ kernels (lib/Target/CUDA generators),
// cuBLASLt GEMM descriptors, NCCL collective calls, an arena buffer plan and
// the launch sequence.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_COMPILER_LOWERTOEXECUTABLE_H
#define LLMC_COMPILER_LOWERTOEXECUTABLE_H

#include "Exec/IR/ExecOps.h"
#include "llmc/Support/DType.h"
#include "llmc/Target/CUDA/KernelLibrary.h"
#include "llmc/runtime/Executable.h"

#include "absl/status/statusor.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace mlir {
class Pass;
class PassManager;
} // namespace mlir

namespace llmc {

/// Which implementation runs prefill attention (llm.attention with a query
/// longer than the decode kernels take) in bf16/f16.
/// (LLMC_ATTENTION_BACKEND is read by llmc::SetTuningKnobs, at the API
/// boundary; see llmc/Pipelines/Pipeline.h.)
enum class AttentionBackend {
  /// cuDNN's fused flash attention where the shape is one cuDNN takes
  /// (rt::CudnnAttentionUnsupportedReason), llmc's FlashAttention-2 kernel
  /// elsewhere. Today every shape cuDNN takes is given to it (cuDNN's SDPA is
  /// about 2x llmc's kernel at B=4 S=2048 H=32 D=128 causal on the H200);
  /// bench/attn_sweep.sh --backends measures both per shape for refining it.
  kAuto,
  /// llmc's kernel only (no cuDNN alternative in the executable).
  kLlmc,
  /// cuDNN for every shape it takes, as kAuto, and tools report a fallback to
  /// llmc's kernel (no cuDNN, no plan) as a warning.
  kCudnn,
};

/// "auto", "llmc" or "cudnn" -> the backend; InvalidArgument naming the
/// value and the valid ones otherwise.
absl::StatusOr<AttentionBackend> ParseAttentionBackend(const std::string &name);

struct LowerOptions {
  /// Fuse chains of elementwise ops into one kernel.
  bool fuse_elementwise = true;
  /// Fuse a residual add into the following RMSNorm/LayerNorm kernel.
  bool fuse_residual_norm = true;
  /// Fuse a bias add into the cuBLASLt epilogue.
  bool fuse_gemm_epilogue = true;
  /// Horizontal fusion of decode GEMVs (at most kGemvMaxRows rows) that read
  /// the same input: 2-4 of them (q/k/v) become one multi-output GEMV
  /// launch, and mul(silu(x W_gate^T), x W_up^T) one SwiGLU GEMV (with
  /// fuse_elementwise). Results are bitwise those of the separate kernels.
  bool fuse_gemv = true;
  /// Alignment of arena offsets, bytes.
  int64_t arena_alignment = 128;
  /// Compute capability of the target GPU times ten plus the minor (90 for
  /// sm_90/sm_90a, 80 for sm_80). It only changes how fp8 GEMMs lower:
  /// from 89 (Ada, Hopper) they are cuBLASLt fp8 GEMMs (A [m,k] and B [n,k],
  /// K and N multiples of 16); below, where there are no fp8 tensor cores,
  /// both operands are dequantized to bf16 (exact) and multiplied by a bf16
  /// GEMM with the same f32 accumulation.
  int target_sm = 90;
  /// Prefill attention backend: with kAuto/kCudnn a supported attention
  /// kernel launch also carries an rt::AttentionSpec (Launch::attention) that
  /// the runtime runs through cuDNN when libcudnn.so.9 is present and plans
  /// the shape; the kernel stays in the executable as the fallback.
  AttentionBackend attention_backend = AttentionBackend::kAuto;
  /// The FlashAttention-2 tile of every tensor-core attention kernel (for
  /// sweeps: --attention-tile, LLMC_ATTN_CONFIG); none: the shape's default
  /// (cu::DefaultAttentionTile). A tile the shape cannot use is an
  /// Unimplemented error naming the op.
  std::optional<cuda::AttentionTile> attention_tile;
  /// 16-byte vectors per input each thread of an elementwise kernel's fast
  /// path loads before using any, 1..4 (--ew-unroll, LLMC_EW_UNROLL).
  int elementwise_unroll = cuda::kElementwiseUnroll;
  /// 16-byte weight loads each lane of a decode GEMV has in flight, 1..16
  /// (--gemv-unroll, LLMC_GEMV_UNROLL); results are bitwise the same.
  int gemv_unroll = cuda::kGemvUnroll;
  /// Flash-decoding of an llm.attention combines its splits in the split
  /// kernel's last block (true) or in a second kernel (false, the default;
  /// --flash-decode-combine, LLMC_FLASH_DECODE_COMBINE: for A/B
  /// measurements).
  bool flash_decode_fused_combine = false;
  /// Move work that depends on parameters only (llm::parameterArguments) into
  /// the parameter-preparation segment, run once per parameter set
  /// (rt::Executable::num_prepare_launches). Off: every launch runs on every
  /// call (for A/B measurements: llmc-compile/llmc-run --no-hoist), except
  /// the one-time zeroing of kernels' semaphores (flash-decoding's fused
  /// combine), which is never per-call work.
  bool hoist_parameter_work = true;
  /// The most bytes of constant data one executable may carry: dense
  /// constants that some launch reads from memory are stored in the
  /// executable and uploaded by the runtime at load. All such constants
  /// together must fit, else lowering fails (ResourceExhausted, naming the
  /// constant and this limit) before their bytes are allocated. Splat
  /// constants that only fused elementwise kernels read are immediates and
  /// do not count.
  int64_t max_constant_bytes = int64_t(1) << 30;
};

/// The compute capability of an NVRTC arch name ("sm_90a" -> 90, "sm_80" ->
/// 80, "compute_89" -> 89, "sm_100f" -> 100); 0 when `arch` is not of that
/// form.
int ComputeCapabilityOfArch(const std::string &arch);

/// The oldest target llmc's kernels compile for: they use bf16, cp.async and
/// mma.sync (sm_80, Ampere).
inline constexpr int kMinComputeCapability = 80;

/// "" when `arch` (an NVRTC arch name) is one llmc compiles for, else why
/// not, naming the arch: below sm_80 (kMinComputeCapability) the kernels
/// would fail late in NVRTC or ptxas. Names that are not of the sm_<NN> /
/// compute_<NN> form are left to the caller's syntax check.
std::string UnsupportedArchReason(const std::string &arch);

/// Statistics of one lowering, for reports (`llmc-compile --print-stats`).
/// The launch counts are those of every call (the per-call launches); the
/// parameter-preparation segment, run once per parameter set, is counted
/// apart.
struct LowerStats {
  int num_ops = 0;          // llm ops in the function
  int num_kernel_launches = 0;
  int num_gemms = 0;
  int num_copies = 0;       // device-to-device copies (skipped when in place)
  int num_distinct_kernels = 0;
  int64_t arena_bytes = 0;           // planned peak of intermediates
  int64_t intermediate_bytes = 0;    // sum of all arena intermediates (no reuse)
  int num_prepare_launches = 0;      // rt::Executable::num_prepare_launches
  int64_t persistent_bytes = 0;      // Persistent buffers (parameter-derived
                                     // values read per call), bytes
};

/// Registers the backend's passes (lib/Compiler/Passes.td):
/// `llmc-select-kernel-configs` (lib/Compiler/KernelConfigs.h) and
/// `llmc-form-kernels`: the lowering's kernel grouping (residual
/// add + norm, elementwise chains, multi-output and SwiGLU decode GEMVs,
/// RoPE written into a KV cache by its index_put)
/// decided as `llm.kernel = {group, kind}` attributes (lib/Compiler/
/// KernelPlan.h), which LowerToExecutable reads and checks; it plans a
/// function that did not run the pass with the same function.
void registerCompilerPasses();
/// llmc-form-kernels with the fusion and hoisting choices of `options`.
std::unique_ptr<mlir::Pass> createFormKernelsPass(const LowerOptions &options);
/// llmc-select-kernel-configs with the tuning knobs of `options`
/// (attention_backend, attention_tile, elementwise_unroll, gemv_unroll).
std::unique_ptr<mlir::Pass> createSelectKernelConfigsPass(const LowerOptions &options);

/// Lowers `fn`, which must have static shapes (run llmc-specialize-shapes
/// first). Errors: InvalidArgument for a dynamic shape, Unimplemented for an
/// op or configuration the CUDA backend does not support (the message names
/// the op, its location and the unsupported property). Kernels are emitted as
/// source; compile them with CompileKernels (or let the runtime do it at
/// load).
/// `setup`, when given, configures the pass manager that runs the passes on
/// the execution-level IR (llmc-plan-arena), as the tools do with MLIR's
/// pass-manager flags (--mlir-print-ir-after-all, --mlir-timing); its
/// failure is an InvalidArgument.
absl::StatusOr<rt::Executable>
LowerToExecutable(mlir::func::FuncOp fn, const LowerOptions &options = {},
                  LowerStats *stats = nullptr,
                  const std::function<mlir::LogicalResult(mlir::PassManager &)> &setup = {});

/// The same lowering, stopped at the execution-level IR: an
/// `exec.executable` in `context` (which need not be `fn`'s) with its arena
/// planned (llmc-plan-arena), what translateToExecutable
/// (llmc/Target/Executable/TranslateToExecutable.h) turns into the
/// executable LowerToExecutable returns. Errors as LowerToExecutable's.
absl::StatusOr<mlir::OwningOpRef<exec::ExecutableOp>>
LowerToExecIR(mlir::func::FuncOp fn, mlir::MLIRContext &context,
              const LowerOptions &options = {}, LowerStats *stats = nullptr,
              const std::function<mlir::LogicalResult(mlir::PassManager &)> &setup = {});

} // namespace llmc

#endif // LLMC_COMPILER_LOWERTOEXECUTABLE_H
