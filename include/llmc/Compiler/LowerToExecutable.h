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

#include "llmc/runtime/Executable.h"

#include "absl/status/statusor.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>

namespace llmc {

/// Which implementation runs prefill attention (llm.attention with a query
/// longer than the decode kernels take) in bf16/f16.
enum class AttentionBackend {
  /// LLMC_ATTENTION_BACKEND (auto, llmc or cudnn) when set, else kAuto.
  kDefault,
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
/// kDefault resolved through LLMC_ATTENTION_BACKEND (InvalidArgument for a
/// bad value, naming the variable); other values unchanged.
absl::StatusOr<AttentionBackend> ResolveAttentionBackend(AttentionBackend b);

struct LowerOptions {
  /// Fuse chains of elementwise ops into one kernel (llmc-fuse's elementwise
  /// kind).
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
  AttentionBackend attention_backend = AttentionBackend::kDefault;
  /// Move work that depends on parameters only (llm::parameterArguments) into
  /// the parameter-preparation segment, run once per parameter set
  /// (rt::Executable::num_prepare_launches). Off: every launch runs on every
  /// call (for A/B measurements: llmc-compile/llmc-run --no-hoist).
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
/// 80, "compute_89" -> 89); 0 when `arch` is not of that form.
int ComputeCapabilityOfArch(const std::string &arch);

/// Statistics of one lowering, for reports (`llmc-compile --stats`).
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

/// The runtime element type of an llm element type (f32, f16, bf16,
/// f8E4M3FN, f8E5M2, i1, i8, i32, i64); InvalidArgument for any other type.
absl::StatusOr<rt::DType> toRuntimeDType(mlir::Type type);

/// Cleans up and raises an imported graph before lowering: canonicalize ->
/// llmc-raise (decomposed RMSNorm => llm.rms_norm; HF q*cos +
/// rotate_half(q)*sin => llm.rope with cos/sin tables) -> canonicalize -> CSE on
/// `fn`, in place. Graphs imported op by op from ATen (the torch.compile
/// plugin) carry no-ops such as `x * broadcast(1.0)` and norms spelled as
/// five elementwise/reduction kernels; this turns them into what codegen
/// fuses. Run it after shape specialization (and sharding), before
/// ApplyPrecisionPolicy; llmc-compile, llmc-run's CUDA path and
/// llmc::Compiler::Compile do. The values `fn` computes are unchanged up to
/// rounding (a raised bf16/f16 RMSNorm or RoPE rounds once where the
/// decomposed form rounds each step; see
/// llmc-raise). `raise` = false skips llmc-raise (llmc-compile --no-raise,
/// to compare). Errors: InvalidArgument naming @fn when a pass fails (its
/// diagnostics go to the context's diagnostic handler).
absl::Status PrepareForLowering(mlir::func::FuncOp fn, bool raise = true);

/// The numerics policies of `--precision` (llmc-run, llmc-compile) and
/// CompilerOptions::precision: "fp32" (the graph as written), "bf16" and
/// "fp16" (matmul/attention operands cast, f32 accumulation), "fp8" (per-tensor
/// current scaling of matmul operands to e4m3; see llmc-precision).
/// ApplyPrecisionPolicy runs llmc-precision{policy} on `fn` in place and, for
/// fp8, llmc-pad-layout (cuBLASLt's fp8 GEMMs need K and the leading dims in
/// multiples of 16; pad-layout pads fp8 GEMMs to multiples of 32 and slices
/// the result back), then canonicalize and CSE. Run it after shape
/// specialization. "fp32" leaves `fn` unchanged. Errors: InvalidArgument for
/// an unknown policy (names it and the valid ones) or a failing pass (its
/// diagnostics go to the context's diagnostic handler).
absl::Status ApplyPrecisionPolicy(mlir::func::FuncOp fn,
                                  const std::string &policy);

/// Lowers `fn`, which must have static shapes (run llmc-specialize-shapes
/// first). Errors: InvalidArgument for a dynamic shape, Unimplemented for an
/// op or configuration the CUDA backend does not support (the message names
/// the op, its location and the unsupported property). Kernels are emitted as
/// source; compile them with CompileKernels (or let the runtime do it at
/// load).
absl::StatusOr<rt::Executable> LowerToExecutable(mlir::func::FuncOp fn,
                                                 const LowerOptions &options = {},
                                                 LowerStats *stats = nullptr);

} // namespace llmc

#endif // LLMC_COMPILER_LOWERTOEXECUTABLE_H
