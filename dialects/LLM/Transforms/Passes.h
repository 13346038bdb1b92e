//===- Passes.h - llm dialect passes ----------------------------*- C++ -*-===//

#ifndef LLMC_DIALECT_LLM_TRANSFORMS_PASSES_H
#define LLMC_DIALECT_LLM_TRANSFORMS_PASSES_H

#include "LLM/IR/LLMOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir {
class RewritePatternSet;
} // namespace mlir

#include <map>
#include <string>

namespace llmc::llm {

#define GEN_PASS_DECL
#include "LLM/Transforms/Passes.h.inc"

/// Name of dimension `dim` of argument `arg` if it is dynamic: the entry of
/// the argument's `llm.dim_names` attribute, or "arg<arg>.<dim>".
std::string dynamicDimName(mlir::func::FuncOp fn, unsigned arg, unsigned dim);

/// Rewrites `fn` to static shapes: every dynamic argument dimension takes its
/// value from `bindings` (by dynamicDimName) and result shapes are recomputed
/// op by op. Emits a diagnostic on `fn` (unbound or unused name, a binding
/// that contradicts the IR, a shape no rule determines, an argument, result
/// or op result above llm::kMaxTensorElements, a function argument or result
/// whose element type llmc does not support) and fails.
mlir::LogicalResult
specializeShapes(mlir::func::FuncOp fn,
                 const std::map<std::string, int64_t> &bindings);

/// The patterns of `llmc-raise`: decomposed RMSNorm (as imported from ATen)
/// => llm.rms_norm. See the pass description in Passes.td.
void populateRaisePatterns(mlir::RewritePatternSet &patterns);

/// HF apply_rotary_pos_emb (q*cos + rotate_half(q)*sin) -> llm.rope with
/// cos/sin tables (RaiseRoPE.cpp); part of populateRaisePatterns.
void populateRaiseRoPEPatterns(mlir::RewritePatternSet &patterns);

struct FusionGroup;

/// Replaces the ops of `group` (from planFusionGroups) by one llm.fusion op
/// at the position of the group's last op and returns it.
FusionOp materializeFusion(const FusionGroup &group);

/// Inlines every llm.fusion region of `fn` back into its body (the inverse
/// of llmc-fuse), for consumers that plan fusion themselves.
void inlineFusionRegions(mlir::func::FuncOp fn);

/// Options of the `llmc-pipeline` pass pipeline.
struct PipelineOptions : public mlir::PassPipelineOptions<PipelineOptions> {
  Option<std::string> precision{*this, "precision",
                                llvm::cl::desc("fp32, bf16, fp16 or fp8"),
                                llvm::cl::init("fp32")};
  Option<std::string> weightOnly{
      *this, "weight-only",
      llvm::cl::desc("weight-only quantization of linear weights: none, int8 "
                     "or int4 (groups of 128 along K)"),
      llvm::cl::init("none")};
  Option<int64_t> padMultiple{*this, "pad-multiple",
                              llvm::cl::desc("GEMM dimension multiple"),
                              llvm::cl::init(16)};
  Option<int64_t> vocabMultiple{*this, "vocab-multiple",
                                llvm::cl::desc("multiple for vocab-like N"),
                                llvm::cl::init(64)};
  Option<bool> fuseElementwise{*this, "fuse-elementwise",
                               llvm::cl::desc("fuse elementwise chains"),
                               llvm::cl::init(true)};
  Option<bool> fuseResidualNorm{*this, "fuse-residual-norm",
                                llvm::cl::desc("fuse residual add + norm"),
                                llvm::cl::init(true)};
  Option<bool> fuseGemmEpilogue{*this, "fuse-gemm-epilogue",
                                llvm::cl::desc("fuse GEMM epilogues"),
                                llvm::cl::init(true)};
  Option<bool> fuseRopeAttention{*this, "fuse-rope-attention",
                                 llvm::cl::desc("fuse RoPE into attention"),
                                 llvm::cl::init(true)};
  Option<int64_t> alignment{*this, "alignment",
                            llvm::cl::desc("arena buffer alignment in bytes"),
                            llvm::cl::init(128)};
  Option<bool> report{*this, "report",
                      llvm::cl::desc("remark with the arena sizes"),
                      llvm::cl::init(false)};
};

/// canonicalize -> raise -> precision -> pad-layout -> canonicalize, cse ->
/// fuse -> plan-memory, on every func.func of a module.
void buildLLMCPipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

/// Registers `llmc-pipeline`.
void registerLLMCPipeline();

/// True when `v` is a function argument seen through casts, views and pads:
/// anything computed from it depends on that one argument (a parameter) and
/// can be computed once per parameter set (`llm.hoistable`).
bool isParameterDerived(mlir::Value v);

/// The parameters (weights) of `fn`, one flag per argument: work that
/// depends on parameters only may run once per parameter set (codegen's
/// parameter-preparation segment, the weight-only rewrite).
///  - When some argument carries `llm.param`: exactly those arguments.
///  - Otherwise (a heuristic): every argument that is read as a weight and
///    never as an activation, following the ops computed from that argument
///    (and constants) alone. Weight reads: a matmul's rank-2 RHS or its bias,
///    a norm's weight/bias, quantize_weight, a gather table. Activation
///    reads: a matmul LHS or batched (rank > 2) RHS, the input of a norm,
///    softmax, RoPE or attention, KV-cache append, gather indices,
///    collectives, function results. A rank-2 activation used only as a
///    matmul RHS (e.g. K of a 2-D attention written as matmuls) reads as a
///    weight: mark `llm.param` on the real weights in such graphs.
/// Donated arguments (`llm.donate`) are never parameters.
llvm::SmallVector<bool> parameterArguments(mlir::func::FuncOp fn);

/// parameterArguments(fn)[arg's number]; false for a value that is not an
/// argument of `fn`.
bool isParameterArgument(mlir::func::FuncOp fn, mlir::BlockArgument arg);

/// The `weight-only` rewrite of llmc-precision: every matmul whose rank-2
/// RHS is derived from a parameter argument (isParameterDerived +
/// isParameterArgument), with float operands and K a multiple of
/// `groupSize`, reads dequantize_weight(quantize_weight(w)) instead
/// (`transpose_rhs`, w as [N, K]; the quantize op is `llm.hoistable`).
/// Matmuls whose K is not a multiple of `groupSize` stay unquantized.
/// `bits` is 4 or 8.
mlir::LogicalResult quantizeLinearWeights(mlir::func::FuncOp fn, int64_t bits,
                                          int64_t groupSize = 128);

#define GEN_PASS_REGISTRATION
#include "LLM/Transforms/Passes.h.inc"

} // namespace llmc::llm

#endif // LLMC_DIALECT_LLM_TRANSFORMS_PASSES_H
