//===- FusionPlan.h - which llm ops share a kernel --------------*- C++ -*-===//
//
// The cost model of fusion: which llm ops may share a kernel, within which
// bounds. llmc-form-kernels (lib/Compiler/KernelPlan.h, planKernels) builds
// the kernels it decides from these groups.
//
// Cost model:
//  - no op is ever duplicated into two kernels; a producer joins its
//    consumer's group when the consumer is its single user, or, between
//    elementwise ops of one shape, when the kernel can write the producer's
//    result as another output (multi-output: every use outside the group
//    comes after the group's last op, where the kernel runs; a training
//    forward's saved activations); residual-norm groups also return the
//    sum, used again after the norm;
//  - a GEMM main loop is never fused into: a matmul's operands are computed
//    outside its group; a group holds at most one matmul, and the matmul is
//    a leaf (bias add, activation, output cast follow it as an epilogue);
//  - views (reshape, broadcast, transpose, slice) and constants stay outside
//    and are read by the kernel through strides;
//  - a group is bounded (kMaxFusedOps ops, kMaxFusedInputs inputs): a
//    longer chain is split into several kernels, each starting where the
//    previous one stopped.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_LLM_TRANSFORMS_FUSIONPLAN_H
#define LLMC_DIALECT_LLM_TRANSFORMS_FUSIONPLAN_H

#include "mlir/IR/Block.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

namespace llmc::llm {

/// Bounds of one elementwise or GEMM-epilogue group, i.e. of one generated
/// kernel. A fused kernel evaluates its ops as one straight-line body that
/// NVRTC inlines into every lane of the 16-byte vector path and into the
/// scalar tail (9 copies for bf16), and NVRTC's time grows faster than
/// linearly in that body (1,000 fused unary ops took 30 s, 2,000 over
/// 120 s, 64 sinf 15 s), so a group stops growing at the first of:
///  - kMaxFusedOps ops;
///  - kMaxFusedCost cost units (fusedOpCost: about 1.5 ms of NVRTC time
///    each in a bf16 kernel; 512 units keep a kernel near 1 s or less);
///  - kMaxFusedInputs distinct values read from outside: each is a kernel
///    parameter (a pointer, and 64 bytes of strides in the by-value shape
///    argument of a strided kernel), and CUDA's kernel parameter space is
///    4 KiB before CUDA 12.1 (32 inputs take at most 2.4 KiB).
/// A longer chain continues in a new group (kernel) from the previous one's
/// result: one more write and read of that intermediate per split.
inline constexpr int kMaxFusedOps = 64;
inline constexpr int kMaxFusedCost = 512;
inline constexpr int kMaxFusedInputs = 32;

/// The cost of `op` in a fused kernel, in the units of kMaxFusedCost: 1 for
/// arithmetic, comparisons, selects and casts; more for the math library
/// calls NVRTC inlines (rsqrtf 4; expf, sqrtf and division 8; tanhf,
/// sigmoid and SiLU 12; GELU 16; logf 24; powf 48; sinf and cosf, with
/// their large-argument reduction, 64).
int fusedOpCost(mlir::Operation *op);

struct FusionPlanOptions {
  /// Chains of elementwise ops (a producer used once, or with its result
  /// written out too).
  bool elementwise = true;
  /// A residual llm.add into the following rms_norm / layer_norm.
  bool residualNorm = true;
  /// Elementwise ops following a matmul with one use.
  bool gemmEpilogue = true;
  /// llm.rope ops feeding only an attention's query/key.
  bool ropeAttention = true;
  /// Bounds of one elementwise / GEMM-epilogue group (see kMaxFusedOps);
  /// a chain beyond them becomes several groups.
  int maxOps = kMaxFusedOps;
  int maxCost = kMaxFusedCost;
  int maxInputs = kMaxFusedInputs;
};

enum class FusionKind { Elementwise, ResidualNorm, GemmEpilogue, RopeAttention };

struct FusionGroup {
  FusionKind kind;
  /// Members in program order; the last one is where the kernel runs.
  llvm::SmallVector<mlir::Operation *> ops;
};

/// Groups the ops of `body` (a straight-line block; nested regions are not
/// looked into). Only groups of two or more ops are returned. Every value
/// a group defines that is used outside it is used after the group's last
/// op, so the group can run at that op's position.
llvm::SmallVector<FusionGroup> planFusionGroups(mlir::Block &body,
                                                const FusionPlanOptions &options);

} // namespace llmc::llm

#endif // LLMC_DIALECT_LLM_TRANSFORMS_FUSIONPLAN_H
