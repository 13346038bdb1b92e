//===- Pipeline.h - the one compilation pipeline of every entry point -*- C++ -*-===//
//
// llmc-opt (--llmc-pipeline), llmc-compile, llmc-run's cuda path and
// llmc::Compiler::Compile (so the C API and the torch.compile plugin) build
// their flow from one options struct and one builder:
//
//   llmc-specialize-shapes{dims}         (when shapes are to be specialized)
//   -> llmc-shard{tp rank}               (tp > 1)
//   -> llmc-precision{weight-only}       (weight-only != none)
//   -> canonicalize -> llmc-raise -> canonicalize -> cse   (no raise: canonicalize, cse)
//   -> llmc-precision{policy} [-> llmc-pad-layout: every GEMM for fp8, the
//   fp8 GEMMs a graph states under other policies] -> canonicalize -> cse
//                                        (policy != fp32)
//   -> llmc-hoist-parameter-work         (hoist_parameter_work)
//   -> llmc-form-kernels -> llmc-select-kernel-configs
//                                        (form_kernels: the kernels the lowering
//                                        emits and their configurations)
//
// then LowerToExecutable with LowerOptions made from the same options.
// Tuning knobs are options too; their environment variables are read once,
// at an API boundary, by SetTuningKnobs (precedence: an explicit option, then
// the environment, then the default), never during compilation.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_PIPELINES_PIPELINE_H
#define LLMC_PIPELINES_PIPELINE_H

#include "llmc/Compiler/LowerToExecutable.h"

#include "LLM/Transforms/Passes.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace mlir {
class OpPassManager;
class PassManager;
} // namespace mlir

namespace llmc {

/// Everything that decides what one compilation builds. Defaults are those
/// of llmc-compile without flags.
struct PipelineOptions {
  //===--- graph level (the pass pipeline) ---------------------------------===//
  /// Bindings of the dynamic dimensions (names from `llm.dim_names`, else
  /// "arg<i>.<d>") for llmc-specialize-shapes (llmc::Compiler also records
  /// them in the executable's symbol_bindings).
  std::map<std::string, int64_t> shape_bindings;
  /// Run llmc-specialize-shapes with `shape_bindings` (which also checks
  /// element types and sizes of a static function). false: `fn` was
  /// specialized before (llmc-run, whose inputs and reference need the
  /// static function first; llmc-opt without dims).
  bool specialize_shapes = true;
  /// llmc-shard{tp rank} when tp > 1.
  int tp = 1;
  int rank = 0;
  /// Weight-only quantization of parameter matmul weights, before the
  /// policy (so the policy's casts read the dequantized weights).
  llm::WeightOnlyMode weight_only = llm::WeightOnlyMode::none;
  /// llmc-raise (decomposed RMSNorm, HF RoPE => llm ops) between the
  /// canonicalizations; false: canonicalize and CSE only.
  bool raise = true;
  llm::PrecisionPolicy precision = llm::PrecisionPolicy::fp32;
  /// Under the fp8 policy: one scale per GEMM operand, or per row of the
  /// LHS and column of the RHS (llmc-precision's fp8-scaling).
  llm::Fp8Scaling fp8_scaling = llm::Fp8Scaling::tensor;
  /// llmc-pad-layout on every GEMM, not only under the fp8 policy, with
  /// these multiples (llmc-opt's --llmc-pipeline="pad-all=1"; no tool pads
  /// other GEMMs).
  bool pad_all = false;
  int64_t pad_multiple = 16;
  int64_t vocab_multiple = 64;
  /// End with llmc-form-kernels (which ops share a kernel: llm.kernel
  /// attributes) and llmc-select-kernel-configs (their configurations, from
  /// the tuning knobs below: llm.kernel_config), decisions LowerToExecutable
  /// reads (and checks) instead of making again. Every tool and the C/C++
  /// API run them; llmc-opt's --llmc-pipeline only with form-kernels=1.
  bool form_kernels = true;

  //===--- fusion (llmc-form-kernels) --------------------------------------===//
  bool fuse_elementwise = true;
  bool fuse_residual_norm = true;
  bool fuse_gemm_epilogue = true;
  /// Multi-output and SwiGLU decode GEMVs.
  bool fuse_gemv = true;

  //===--- lowering (LowerOptions) -----------------------------------------===//
  /// llmc-hoist-parameter-work decides the parameter-preparation segment
  /// (work run once per parameter set); false: every launch runs on every
  /// call.
  bool hoist_parameter_work = true;
  /// Compute capability of the target (ComputeCapabilityOfArch).
  int target_sm = 90;
  int64_t arena_alignment = 128;
  int64_t max_constant_bytes = int64_t(1) << 30;

  //===--- tuning knobs (SetTuningKnobs) -----------------------------------===//
  AttentionBackend attention_backend = AttentionBackend::kAuto;
  /// A FlashAttention-2 tile for every tensor-core attention; none: the
  /// shape's default (cu::DefaultAttentionTile).
  std::optional<cuda::AttentionTile> attention_tile;
  /// 16-byte vectors per input in flight per thread in elementwise kernels.
  int elementwise_unroll = cuda::kElementwiseUnroll;
  /// 16-byte weight loads in flight per lane of a decode GEMV.
  int gemv_unroll = cuda::kGemvUnroll;
  /// Flash-decoding's split kernel combines its splits itself (true) or a
  /// combine kernel does (false, the default: 0.5-1% faster on the H100,
  /// docs/performance.md 2026-12-06), for A/B measurements.
  bool flash_decode_fused_combine = false;
};

/// The LowerOptions of `options`.
LowerOptions lowerOptions(const PipelineOptions &options);

/// Adds the pass pipeline of `options` (the sequence at the top of this
/// file) to `pm`, which must be anchored on func.func.
void buildPipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

/// Applied to the pass manager before it runs: the tools' MLIR pass-manager
/// flags (--mlir-print-ir-after-all, --mlir-timing, ...). A failure is
/// reported by the callback itself and stops the compilation.
using PassManagerSetup = std::function<mlir::LogicalResult(mlir::PassManager &)>;

/// The largest tensor-parallel degree (`tp`) a pipeline takes.
inline constexpr int kMaxTensorParallel = 1024;

/// Checks what buildPipeline cannot: 1 <= tp <= kMaxTensorParallel and
/// 0 <= rank < tp; weight_only none with the fp8 policy; fp8_scaling tensor
/// unless the policy is fp8; pad_multiple and
/// vocab_multiple in 1..4096; arena_alignment a positive power of two;
/// elementwise_unroll 1..4; gemv_unroll 1..16. InvalidArgument naming the option otherwise.
absl::Status ValidatePipelineOptions(const PipelineOptions &options);

/// Runs buildPipeline(options) on `fn` in place, after
/// ValidatePipelineOptions. Errors: InvalidArgument from the validation,
/// or "<pass> failed on @fn" (the pass's diagnostics go to the context's
/// diagnostic handler).
absl::Status RunPipeline(mlir::func::FuncOp fn, const PipelineOptions &options,
                         const PassManagerSetup &setup = {});

/// Clean-up and raise alone: canonicalize -> llmc-raise -> canonicalize ->
/// CSE (`raise` = false: canonicalize -> CSE) on `fn`, in place; the
/// pipeline's stage after shard and weight-only. Errors as RunPipeline.
absl::Status PrepareForLowering(mlir::func::FuncOp fn, bool raise = true);

/// The pipeline's precision stage alone on `fn`, in place:
/// llmc-precision{policy} (and llmc-pad-layout for fp8) -> canonicalize ->
/// CSE; for "fp32" only llmc-pad-layout{fp8-only} (a graph's own fp8 GEMMs,
/// padded exactly). llmc-run's reference backend runs it on the
/// graph as written. Errors: InvalidArgument "precision: expected ..." for
/// an unknown policy, else as RunPipeline. `fp8_scaling` as
/// PipelineOptions::fp8_scaling.
absl::Status ApplyPrecisionPolicy(
    mlir::func::FuncOp fn, const std::string &policy,
    llm::Fp8Scaling fp8_scaling = llm::Fp8Scaling::tensor);

//===----------------------------------------------------------------------===//
// Tuning knobs
//===----------------------------------------------------------------------===//

/// The environment variables of the tuning knobs, read by SetTuningKnobs
/// only.
inline constexpr const char kAttentionBackendVariable[] = "LLMC_ATTENTION_BACKEND";
inline constexpr const char kAttentionTileVariable[] = "LLMC_ATTN_CONFIG";
inline constexpr const char kElementwiseUnrollVariable[] = "LLMC_EW_UNROLL";
inline constexpr const char kGemvUnrollVariable[] = "LLMC_GEMV_UNROLL";
inline constexpr const char kFlashDecodeCombineVariable[] = "LLMC_FLASH_DECODE_COMBINE";

/// One knob as the user gave it: its text (empty: not given) and the name an
/// error blames ("--attention-tile", "attention_tile").
struct KnobSetting {
  std::string value;
  std::string name;
};

struct TuningKnobs {
  /// auto, llmc or cudnn (ParseAttentionBackend).
  KnobSetting attention_backend;
  /// A FlashAttention-2 tile in cu::AttentionTileName's form
  /// (bm64_bn64_w4_s2_gh).
  KnobSetting attention_tile;
  /// 1, 2, 3 or 4.
  KnobSetting elementwise_unroll;
  /// 1..16.
  KnobSetting gemv_unroll;
  /// fused (the default) or kernel: who combines flash-decoding's splits.
  KnobSetting flash_decode_combine;
};

/// Sets the tuning knobs of `options`: each from its setting in `given`,
/// else from its environment variable when that is set and not empty, else
/// the default. Errors: InvalidArgument "<name>: <what is wrong>", the name
/// being the setting's or the variable's.
absl::Status SetTuningKnobs(const TuningKnobs &given, PipelineOptions &options);

/// Registers the `llmc-pipeline` pass pipeline: buildPipeline with the
/// graph-level fields of PipelineOptions as pass options (dims, tp, rank,
/// weight-only, raise, precision, pad-all, form-kernels, ...; defaults as
/// above), so that `llmc-opt --llmc-pipeline="dims=seq=7 precision=bf16"`
/// prints what `llmc-compile --shape seq=7 --precision=bf16 --emit=mlir`
/// prints. Option values are checked when the pipeline is parsed
/// (ValidatePipelineOptions). One difference: `tp` always runs llmc-shard,
/// while llmc-run --tp runs a graph that already has collectives as written.
void registerPipelines();

} // namespace llmc

#endif // LLMC_PIPELINES_PIPELINE_H
