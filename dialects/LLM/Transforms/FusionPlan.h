//===- FusionPlan.h - which llm ops share a kernel --------------*- C++ -*-===//
//
// The fusion grouping decision, shared by `llmc-fuse` (which materializes
// the groups as `llm.fusion` regions) and codegen (which emits one kernel per
// group).
//
// Cost model:
//  - a producer joins its consumer's group only when the consumer is its
//    single user: no op is ever duplicated into two kernels, and every group
//    is a tree whose only escaping value is its root (residual-norm groups
//    also return the sum, used again after the norm);
//  - a GEMM main loop is never fused into: a matmul's operands are computed
//    outside its group; a group holds at most one matmul, and the matmul is
//    a leaf (bias add, activation, output cast follow it as an epilogue);
//  - views (reshape, broadcast, transpose, slice) and constants stay outside
//    and are read by the kernel through strides.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_LLM_TRANSFORMS_FUSIONPLAN_H
#define LLMC_DIALECT_LLM_TRANSFORMS_FUSIONPLAN_H

#include "mlir/IR/Block.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

namespace llmc::llm {

struct FusionPlanOptions {
  /// Chains of elementwise ops (producer used once).
  bool elementwise = true;
  /// A residual llm.add into the following rms_norm / layer_norm.
  bool residualNorm = true;
  /// Elementwise ops following a matmul with one use.
  bool gemmEpilogue = true;
  /// llm.rope ops feeding only an attention's query/key.
  bool ropeAttention = true;
};

enum class FusionKind { Elementwise, ResidualNorm, GemmEpilogue, RopeAttention };

/// The `kind` string of llm.fusion for `kind`.
llvm::StringRef fusionKindName(FusionKind kind);

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

/// True for ops codegen evaluates pointwise in a fused elementwise kernel.
bool isFusibleElementwise(mlir::Operation *op);

} // namespace llmc::llm

#endif // LLMC_DIALECT_LLM_TRANSFORMS_FUSIONPLAN_H
