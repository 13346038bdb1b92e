//===- KernelPlan.h - which ops share a CUDA kernel -------------*- C++ -*-===//
//
// The one decision of which ops of a function run as one CUDA kernel, made
// once per function by planKernels in the `llmc-form-kernels` pass, which
// writes it into IR (annotateKernels); the lowering reads it back
// (decidedKernelPlan) and never decides again: residual add + norm, chains of
// elementwise ops, multi-output decode GEMVs sharing an input, the SwiGLU
// decode GEMV (mul(silu(x W_gate), x W_up) in one kernel), and RoPE written
// straight into a KV cache by its index_put (one kernel), and an attention forward
// with the logsumexp its backward needs (one launch). The lowering emits
// one launch per group and per remaining op.
//
// Built on llm::planFusionGroups (the cost model and bounds of FusionPlan.h):
// an elementwise op joins its producer's kernel only when the plan put both
// in one group, the producer is used once (or its other uses all come after
// the op, and the kernel writes its result as another output), and both
// are on the same side of
// the parameter-preparation boundary (llmc-hoist-parameter-work); a residual
// add is computed by the norm only when the plan grouped them, its summands
// are dense and it is not prepared apart from the norm. Plan groups that are
// not one kernel here run as several: rope_attention (RoPE, then attention)
// and gemm_epilogue (the GEMM, then its elementwise tail, unless cuBLASLt's
// bias epilogue takes it).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_LIB_COMPILER_KERNELPLAN_H
#define LLMC_LIB_COMPILER_KERNELPLAN_H

#include "LLM/IR/LLMOps.h"
#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/Support/Describe.h"
#include "llmc/Target/CUDA/Decode.h"
#include "llmc/Target/CUDA/KernelLibrary.h"
#include "llmc/Target/CUDA/WeightOnly.h"
#include "llmc/runtime/Executable.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace llmc {

/// The kernel element type of a runtime dtype, and of a ranked tensor value
/// whose element type llmc::toRuntimeDType maps (f32, f16, bf16, fp8, i1,
/// i8, i32, i64; checked by the lowering before any kernel is planned).
cuda::ScalarType kernelScalarType(rt::DType t);
cuda::ScalarType kernelScalarType(mlir::Value v);

/// A decode GEMV for `op` (x [.., m, k] times W^T, W [n, k] `transpose_rhs`,
/// at most cu::kGemvMaxRows rows, matching dtypes, an optional bias of the
/// operand dtype) when the GEMV kernel takes it; fills `gc`.
bool decodeGemvConfig(llm::MatmulOp op, cuda::GemvConfig *gc);

/// matmul(x, dequantize_weight(q, s)) {transpose_rhs} that one fused GEMV
/// reading q and s computes; fills `cfg`.
bool fusedDequantGemv(llm::MatmulOp op, cuda::QuantGemvConfig *cfg);

/// The SwiGLU decode GEMV computing mul(silu(gate), up) of two decode GEMVs
/// `gate` and `up` of one input (same shape, bias on both or neither) when
/// its kernel takes it; fills `c`.
bool swiGluGemvConfig(llm::MatmulOp gate, llm::MatmulOp up, mlir::Operation *silu,
                      mlir::Operation *mul, cuda::SwiGluGemvConfig *c);

/// Where the RoPE + KV-cache write kernel stores (cuda::RoPETableConfig's
/// cache_write), in elements of the index_put's base: its rows along the
/// indexed dimension and the strides of RoPE's batch, row and head.
struct RopeCacheWriteLayout {
  int64_t rows = 0, out_b = 0, out_row = 0, out_h = 0;
};

/// The RoPE + KV-cache write kernel (gpt-fast's `k_cache[:, :, pos] =
/// rope(k)`, Hugging Face's static-cache index_copy_) for `rope`, table form
/// on [B, S, H, D], whose result is only the source of `put` (no
/// accumulate), possibly through llm.reshape / llm.transpose /
/// llm.broadcast ops each used once that keep every dimension of size above
/// 1 (permute, add or drop size-1 dims): RoPE's S must be put's indexed
/// dimension (or S = 1), its D the base's last dimension, and RoPE must have
/// elements (an empty one writes nothing: no kernel). Fills `cfg` and
/// `layout`.
bool ropeCacheWriteConfig(llm::RoPEOp rope, llm::IndexPutOp put,
                          cuda::RoPETableConfig *cfg, RopeCacheWriteLayout *layout);

/// An llm.rope computed by the kernel of the llm.index_put that writes it,
/// with, in the same launch, the step's q RoPE and v cache write if any.
struct RopeCacheWrite {
  llm::RoPEOp rope;
  llm::IndexPutOp put;
  llm::RoPEOp q;         // q rotated with the same tables (optional)
  llm::IndexPutOp v;     // v written at the same rows (optional)
  mlir::Value vValue;    // v as [B, S, H, D], read dense by the kernel
  mlir::Operation *emitAt = nullptr; // the last of put, q, v: where it runs

  /// rope, put, then q and v when present.
  llvm::SmallVector<mlir::Operation *, 4> members() const {
    llvm::SmallVector<mlir::Operation *, 4> ops = {rope.operator->(), put.operator->()};
    if (q)
      ops.push_back(q.operator->());
    if (v)
      ops.push_back(v.operator->());
    return ops;
  }
};

/// The [B, S, H, D] value `putV` writes when it can join the launch of the
/// RoPE + KV-cache write (rope, put): same index tensor, no accumulate, a
/// base of put's type, written through views with put's layout; null if
/// not.
mlir::Value cacheWriteValue(llm::RoPEOp rope, llm::IndexPutOp put, llm::IndexPutOp putV);
/// Whether `q` can be rotated in the launch of the RoPE + KV-cache write of
/// `rope`: the same cos and sin values and pairing, element type, batch,
/// sequence and head dim (any head count: GQA).
bool cacheWriteQuery(llm::RoPEOp rope, llm::RoPEOp q);
/// Whether the members of `w` may all run at w.emitAt: each one before it
/// is used only after it (in one block).
bool ropeCacheWriteMembersOk(const RopeCacheWrite &w);

/// An SDPA forward that saves its statistics for backward: llm.attention
/// and llm.attention_logsumexp of the same query, key, causal and scale, run
/// as one launch (FlashAttention-2's write_lse variant writes O and the
/// logsumexp in one pass, and cuDNN's SDPA writes its stats when attached)
/// instead of a second, statistics-only pass over Q K^T.
struct AttentionStats {
  llm::AttentionOp attention;
  llm::AttentionLogSumExpOp stats;
  mlir::Operation *emitAt = nullptr; // the later of the two
};

/// Whether one launch computes `attention` and `stats`: the same query and
/// key, causal and scale, neither with a mask, no kv_len, key and value in
/// NHD layout, and the write_lse kernel's types (bf16/f16 query, key and
/// value of one type, head dim a multiple of 16 up to 256); both in one
/// block, the earlier one used only after the later one (directly or
/// through views, which launch nothing).
bool attentionStatsPair(llm::AttentionOp attention, llm::AttentionLogSumExpOp stats);

/// Decode GEMVs run as one kernel.
struct GemvGroup {
  llvm::SmallVector<llm::MatmulOp, 4> members; // program order; SwiGLU: {gate, up}
  mlir::Operation *emitAt = nullptr;           // last member, or the SwiGLU mul
  mlir::Operation *silu = nullptr;             // SwiGLU only
};

struct KernelPlan {
  /// Residual adds the following norm kernel computes (and writes).
  llvm::DenseSet<mlir::Operation *> fusedIntoNorm;
  /// Every other top-level elementwise op is in exactly one group (program
  /// order; the kernel runs at the last op): a chain, or the op alone.
  std::vector<llvm::SmallVector<mlir::Operation *>> groups;
  llvm::DenseMap<mlir::Operation *, int> groupOf;
  /// GEMV groups; gemvGroupOf maps members, and the SwiGLU silu and mul.
  std::vector<GemvGroup> gemvGroups;
  llvm::DenseMap<mlir::Operation *, int> gemvGroupOf;
  /// RoPE + KV-cache writes; ropeCacheWriteOf maps the rope and the put.
  std::vector<RopeCacheWrite> ropeCacheWrites;
  llvm::DenseMap<mlir::Operation *, int> ropeCacheWriteOf;
  /// Attention forwards with their statistics; attentionStatsOf maps both.
  std::vector<AttentionStats> attentionStats;
  llvm::DenseMap<mlir::Operation *, int> attentionStatsOf;
  /// Row kernels (cuda::EmitRowFused): row reductions with the elementwise
  /// ops before and after them, members in program order, run at the last;
  /// rowGroupOf maps every member. Their elementwise ops are in no `groups`
  /// entry.
  std::vector<llvm::SmallVector<mlir::Operation *>> rowGroups;
  llvm::DenseMap<mlir::Operation *, int> rowGroupOf;
};

/// The [rows, n] index space of a row kernel of `ops`: n is the reduced
/// (last) dimension of its reductions' input.
struct RowSpace {
  llvm::SmallVector<int64_t> shape; // the full shape [..., n]
  int64_t rows = 0, n = 0;
};

/// A reduction a row kernel computes: llm.reduce_{sum,mean,max,min} over
/// the last dimension only, of a float tensor with elements, and the index
/// space it defines.
std::optional<RowSpace> rowReductionSpace(mlir::Operation *op);

/// Whether `op` is a column sum a row kernel of `space` can compute:
/// llm.reduce_sum of a float tensor of the full shape over every dimension
/// but the last (sum(dy * x_hat, dims=[0, 1]) of [B, S, H]).
bool isColumnSumOf(mlir::Operation *op, const RowSpace &space);

/// Whether a value of `type` is per row in `space`: its shape is the full
/// shape with the last dimension 1 or dropped.
bool isRowShaped(mlir::Type type, const RowSpace &space);

/// Why `ops` (program order, one block) cannot be one row kernel
/// (cuda::EmitRowFused), as {the op, the reason}; nullopt when they can:
/// one or more row reductions of one index space (rowReductionSpace), up to
/// cuda::kRowFusedMaxColumnSums column sums of it (isColumnSumOf; rows of
/// at most cuda::kRowFusedMaxColumnRow
/// elements) whose results no member reads, and elementwise ops of the full
/// or a row shape; every operand a member, a
/// view of a member that maps the [rows, n] space onto it (a per-row value
/// broadcast along the row), a splat constant, or an outside value read
/// dense, as a per-row or per-column broadcast, or as a scalar; every
/// member's result used outside the kernel (also through views) only after
/// its last member; no mixing with parameter preparation (`prepared`);
/// within one kernel's bounds (kMaxFusedOps, kMaxFusedCost,
/// kMaxFusedInputs, cuda::kRowFusedMaxReductions).
std::optional<std::pair<mlir::Operation *, std::string>>
rowKernelProblem(llvm::ArrayRef<mlir::Operation *> ops,
                 const llvm::DenseSet<mlir::Operation *> &prepared);

/// The member value a row kernel of `members` reads for operand `v`: `v`
/// itself when a member defines it, or the per-row member that `v` views
/// (llm.broadcast along the row, llm.reshape between row shapes); null
/// otherwise.
mlir::Value rowKernelMember(mlir::Value v,
                            const llvm::SmallPtrSetImpl<mlir::Operation *> &members,
                            const RowSpace &space);

/// Appends the users of `v` outside `members` to `users`, looking through
/// views (a view launches nothing; its users read `v`'s storage): where a
/// kernel of `members` must write `v` out.
void outsideUsers(mlir::Value v, const llvm::SmallPtrSetImpl<mlir::Operation *> &members,
                  llvm::SmallVectorImpl<mlir::Operation *> &users);

/// planKernels' last step: every row reduction not in parameter
/// preparation joins the elementwise kernel computing its input and then,
/// while one joins, the elementwise kernels computing a member's operand,
/// those (and reductions of the same rows) reading a member's result, and
/// column sums of a value the kernel computes or reads (or of an
/// elementwise kernel's result computed from one that has no other use),
/// as long as rowKernelProblem finds none;
/// the kernels it forms move from `plan.groups` to `plan.rowGroups`. Ops
/// of other kernels (GEMV, RoPE + cache write, attention, residual norm)
/// never join.
void formRowKernels(mlir::func::FuncOp fn, KernelPlan &plan,
                    const llvm::DenseSet<mlir::Operation *> &prepared);

/// Plans the kernels of `fn`'s top-level block (a shape-specialized
/// function). `prepared` holds the parameter-preparation ops: no kernel
/// mixes them with per-call ops.
/// LowerOptions' fuse_elementwise, fuse_residual_norm, fuse_gemm_epilogue and
/// fuse_gemv choose which groupings are made.
KernelPlan planKernels(mlir::func::FuncOp fn, const LowerOptions &options,
                       const llvm::DenseSet<mlir::Operation *> &prepared);

/// The attribute annotateKernels puts on every op of a multi-op kernel:
/// {group = <n>, kind = "residual_norm" | "elementwise" | "multi_gemv" |
/// "swiglu_gemv" | "rope_cache_write" | "attention_stats" |
/// "row_reduction"}, groups numbered
/// in program order of their last op.
inline constexpr llvm::StringLiteral kKernelAttr = "llm.kernel";

/// A splat constant: kernels read it as an immediate, not from memory.
bool isSplatConstant(mlir::Value v);

/// The unit attribute llmc-form-kernels puts on every function it planned:
/// the function's kernels are exactly its kKernelAttr groups, and every op
/// without kKernelAttr runs as a kernel (GEMM, copy, collective) of its own.
inline constexpr llvm::StringLiteral kKernelsFormedAttr = "llm.kernels_formed";

/// Shows `plan` in IR (kKernelAttr on the members of every kernel of two or
/// more ops; earlier annotations are replaced) and marks `fn`
/// kKernelsFormedAttr.
void annotateKernels(mlir::func::FuncOp fn, const KernelPlan &plan);

/// The kernels of `fn` as decided, for the lowering: for a function that
/// llmc-form-kernels planned (kKernelsFormedAttr), the groups of its
/// kKernelAttr annotations, read back without planning again; for any other
/// function, planKernels(fn, options, prepared). Each annotated group is
/// checked to be a kernel its emitter computes exactly (members, their
/// order and uses, the parameter-preparation boundary `prepared`, the
/// bounds of one fused kernel, the GEMV kernels' configurations); an
/// annotation that is not one is InvalidArgument naming the op and why,
/// since emitting it would compute a wrong result or an unlaunchable kernel.
absl::StatusOr<KernelPlan>
decidedKernelPlan(mlir::func::FuncOp fn, const LowerOptions &options,
                  const llvm::DenseSet<mlir::Operation *> &prepared);

/// The results of `fn` that its donated arguments' buffers hold
/// (`llm.aliasing_output`), written there in place: {result index: the
/// argument}. A result qualifies when its own defining op belongs to an
/// elementwise kernel of `plan` whose index space is the argument's shape,
/// and every use of the argument is a member of that kernel reading it as
/// an operand of the full shape (so the kernel reads each element at the
/// index it writes, before writing it, and nothing reads the argument
/// afterwards): an optimizer's update of a parameter or of its moments.
/// The kernel must not be parameter preparation (`prepared`), which runs
/// once per parameter set, not on every call. Any other aliasing result
/// keeps value semantics (its own output buffer).
llvm::SmallVector<std::pair<unsigned, mlir::BlockArgument>>
inPlaceResults(mlir::func::FuncOp fn, const KernelPlan &plan,
               const llvm::DenseSet<mlir::Operation *> &prepared);

} // namespace llmc

#endif // LLMC_LIB_COMPILER_KERNELPLAN_H
