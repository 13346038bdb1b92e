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

#include "llvm/ADT/DenseSet.h"

#include <map>
#include <optional>
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

/// The numerics policies of `llmc-precision` (see its description).
enum class PrecisionPolicy { fp32, bf16, fp16, fp8 };

/// Weight-only quantization of linear weights (`llmc-precision`'s
/// weight-only): none, or int8/int4 in groups of 128 along K.
enum class WeightOnlyMode { none, int8, int4 };

/// `name` as a policy ("fp32", "bf16", "fp16", "fp8"). The one place policy
/// names are checked: llmc-precision's option and every entry point
/// (llmc::PipelineOptions, the tools' --precision, CompilerOptions) parse
/// here. Otherwise std::nullopt with `error` = "expected fp32, bf16, fp16 or
/// fp8, found 'x'", for the caller to prefix with the option's name.
std::optional<PrecisionPolicy> parsePrecisionPolicy(llvm::StringRef name,
                                                    std::string &error);
llvm::StringRef stringifyPrecisionPolicy(PrecisionPolicy policy);

/// `name` as a weight-only mode ("none", "int8", "int4"), else std::nullopt
/// with `error` = "expected none, int8 or int4, found 'x'".
std::optional<WeightOnlyMode> parseWeightOnlyMode(llvm::StringRef name,
                                                  std::string &error);
llvm::StringRef stringifyWeightOnlyMode(WeightOnlyMode mode);
/// Bits per quantized weight: 8, 4, or 0 for none.
int weightOnlyBits(WeightOnlyMode mode);

/// Scaling granularity of the fp8 policy's GEMM operands
/// (`llmc-precision`'s fp8-scaling): one scale per tensor, or one per row
/// of the LHS and per column of the RHS (torchao's rowwise recipe).
enum class Fp8Scaling { tensor, row };

/// `name` as an fp8 scaling ("tensor", "row"), else std::nullopt with
/// `error` = "expected tensor or row, found 'x'".
std::optional<Fp8Scaling> parseFp8Scaling(llvm::StringRef name,
                                          std::string &error);
llvm::StringRef stringifyFp8Scaling(Fp8Scaling scaling);

/// True when `v` is a function argument seen through casts, views and pads:
/// anything computed from it depends on that one argument (a parameter) and
/// can be computed once per parameter set (llmc-hoist-parameter-work).
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

/// The unit argument attribute of a gradient flowing backward (a tangent
/// of AOTAutograd's backward graph): under the fp8 policy's HYBRID format,
/// GEMM operands computed from it are quantized to e5m2 (llmc-precision).
inline constexpr llvm::StringLiteral kGradientAttr = "llm.gradient";

/// The unit attribute of an op in the parameter-preparation segment
/// (llmc-hoist-parameter-work), and the function attribute that says the
/// segment was planned (an unmarked op of a planned function runs on every
/// call).
inline constexpr llvm::StringLiteral kParameterPreparationAttr =
    "llm.parameter_preparation";
inline constexpr llvm::StringLiteral kParameterPreparationPlannedAttr =
    "llm.parameter_preparation_planned";

/// The ops of `fn`'s top-level block that compute from parameters
/// (parameterArguments) and constants alone, with at least one parameter
/// read, in program order: work that can run once per parameter set instead
/// of on every call (weight casts, fp8 weight scaling, pads and relayouts of
/// weights, weight-only quantization). Excluded: ops with no operands or no
/// results, dequantize_weight (fused into its GEMV or run per call),
/// collectives and kv_cache_append (they communicate or write state on every
/// call), and ops whose result's storage (storageRoot) is returned.
llvm::SmallVector<mlir::Operation *> parameterPreparationOps(mlir::func::FuncOp fn);

/// The parameter-preparation segment as decided, for its consumers
/// (codegen, llmc-form-kernels): for a planned function
/// (kParameterPreparationPlannedAttr), the ops that carry
/// kParameterPreparationAttr, in program order, each checked against the
/// rule of parameterPreparationOps with the marked ops before it as the
/// parameter-derived values (so any subset of that function's choice is
/// accepted); for an unplanned one, parameterPreparationOps(fn). Fails on
/// an unsound mark, with `error` naming the first such op and why ("'llm.cast' at loc(...) is marked llm.parameter_preparation but
/// operand 0 is neither a parameter, a constant nor the result of a marked
/// op"): hoisting it would run work that depends on per-call inputs once.
mlir::FailureOr<llvm::SmallVector<mlir::Operation *>>
decidedParameterPreparationOps(mlir::func::FuncOp fn, std::string &error);

/// The `weight-only` rewrite of llmc-precision: every matmul whose rank-2
/// RHS is derived from a parameter argument (isParameterDerived +
/// isParameterArgument), with float operands and K a multiple of
/// `groupSize`, reads dequantize_weight(quantize_weight(w)) instead
/// (`transpose_rhs`, w as [N, K]).
/// Matmuls whose K is not a multiple of `groupSize` stay unquantized.
/// `bits` is 4 or 8.
mlir::LogicalResult quantizeLinearWeights(mlir::func::FuncOp fn, int64_t bits,
                                          int64_t groupSize = 128);

#define GEN_PASS_REGISTRATION
#include "LLM/Transforms/Passes.h.inc"

} // namespace llmc::llm

#endif // LLMC_DIALECT_LLM_TRANSFORMS_PASSES_H
