//===- Shard.cpp - Megatron-style tensor parallelism ----------------------===//
//
// Rewrites a function into rank `rank`'s shard of a `tp`-way tensor-parallel
// program (Shoeybi et al. 2019, "Megatron-LM"). Activations are replicated;
// weights stay full-size arguments and every sharded projection reads its
// rank's slice through an `llm.slice` of the argument (parameter preparation,
// llmc-hoist-parameter-work):
//
//   attention:  q/k/v = column-parallel (heads split across ranks),
//               o_proj = row-parallel + all_reduce sum;
//   MLP:        gate/up (the leaves of an elementwise tree) = column-parallel,
//               down = row-parallel + all_reduce sum.
//
// The pass first matches every block and checks every precondition, then
// rewrites: a graph it does not understand fails with a diagnostic before
// any op is changed.
//
//===----------------------------------------------------------------------===//

#include "LLM/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

namespace llmc::llm {
#define GEN_PASS_DEF_SHARDPASS
#include "LLM/Transforms/Passes.h.inc"
} // namespace llmc::llm

using namespace mlir;
using namespace llmc::llm;

namespace {

/// Dimension of a rank-2 weight that holds the matmul's N (output) and K.
int64_t weightOutDim(MatmulOp mm) { return mm.getTransposeRhs() ? 0 : 1; }
int64_t weightInDim(MatmulOp mm) { return mm.getTransposeRhs() ? 1 : 0; }

/// [..., X] -> [..., H, D] with X = H * D and the leading dimensions kept.
bool isHeadSplit(ReshapeOp r) {
  auto in = r.getInput().getType(), out = r.getResult().getType();
  if (out.getRank() != in.getRank() + 1 || out.getRank() < 3)
    return false;
  if (in.getShape().drop_back() != out.getShape().drop_back(2))
    return false;
  int64_t x = in.getShape().back(), h = out.getDimSize(out.getRank() - 2),
          d = out.getShape().back();
  return !ShapedType::isDynamic(x) && !ShapedType::isDynamic(h) &&
         !ShapedType::isDynamic(d) && h * d == x;
}

/// [..., H, D] -> [..., H * D] with the leading dimensions kept.
bool isHeadMerge(ReshapeOp r) {
  auto in = r.getInput().getType(), out = r.getResult().getType();
  if (in.getRank() != out.getRank() + 1 || in.getRank() < 3)
    return false;
  if (out.getShape().drop_back() != in.getShape().drop_back(2))
    return false;
  int64_t x = out.getShape().back(), h = in.getDimSize(in.getRank() - 2),
          d = in.getShape().back();
  return !ShapedType::isDynamic(x) && !ShapedType::isDynamic(h) &&
         !ShapedType::isDynamic(d) && h * d == x;
}

/// What the pass will do, collected before any op changes.
struct ShardPlan {
  /// Projections whose weight's output dimension (and bias) is sliced.
  SmallVector<MatmulOp> columns;
  /// Projections whose weight's input dimension is sliced, followed by an
  /// all_reduce sum.
  SmallVector<MatmulOp> rows;
  /// Ops between them whose result type follows the shrunken operands.
  llvm::SetVector<Operation *> retype;
  /// Reshapes: which result dimension is divided by tp.
  llvm::DenseMap<Operation *, int64_t> divideDim;
  /// Matmuls already assigned a role.
  llvm::DenseSet<Operation *> claimed;
};

struct ShardPass : llmc::llm::impl::ShardPassBase<ShardPass> {
  using ShardPassBase::ShardPassBase;

  /// An activation [..., K] times a static rank-2 weight; a column-parallel
  /// one also needs a static output width divisible by tp.
  LogicalResult checkProjection(MatmulOp mm, StringRef role, bool column) {
    auto w = mm.getRhs().getType();
    if (mm.getTransposeLhs() || w.getRank() != 2 || !w.hasStaticShape())
      return mm.emitOpError()
             << "cannot shard the " << role
             << ": expected an activation times a static rank-2 weight "
                "(without transpose_lhs), found "
             << mm.getLhs().getType() << " and " << w;
    int64_t dim = column ? weightOutDim(mm) : weightInDim(mm);
    int64_t size = w.getDimSize(dim);
    if (size % tp != 0)
      return mm.emitOpError()
             << "cannot shard the " << role << ": its "
             << (column ? "output" : "input") << " size " << size
             << " does not divide by tp=" << static_cast<int64_t>(tp);
    if (column && ShapedType::isDynamic(mm.getType().getShape().back()))
      return mm.emitOpError() << "cannot shard the " << role
                              << ": its result's last dimension is dynamic";
    return success();
  }

  LogicalResult matchAttention(AttentionOp attn, ShardPlan &plan) {
    auto qt = attn.getQuery().getType(), kt = attn.getKey().getType();
    // The plan below follows NHD key/value chains (reshape [B, S, H, D]).
    if (attn.getKvHnd())
      return attn.emitOpError() << "cannot shard attention with key/value in "
                                   "HND layout (kv_hnd); shard the NHD form";
    int64_t hq = qt.getDimSize(2), hkv = kt.getDimSize(2);
    if (ShapedType::isDynamic(hq) || ShapedType::isDynamic(hkv))
      return attn.emitOpError()
             << "cannot shard dynamic head counts (" << qt << ", " << kt << ")";
    if (hq % tp != 0 || hkv % tp != 0)
      return attn.emitOpError()
             << "cannot shard " << hq << " query heads and " << hkv
             << " KV heads " << static_cast<int64_t>(tp)
             << " ways: both head counts must be "
             << "divisible by tp=" << static_cast<int64_t>(tp);
    if (Value mask = attn.getMask()) {
      auto mt = cast<RankedTensorType>(mask.getType());
      if (mt.getRank() >= 3 && mt.getDimSize(mt.getRank() - 3) != 1)
        return attn.emitOpError() << "cannot shard: a per-head mask (" << mt
                                  << ") is not supported";
    }

    const char *names[] = {"query", "key", "value"};
    Value operands[] = {attn.getQuery(), attn.getKey(), attn.getValue()};
    for (auto [name, operand] : llvm::zip(names, operands)) {
      SmallVector<Operation *> chain;
      Value cur = operand;
      ReshapeOp split;
      while (true) {
        if (isa_and_nonnull<KVCacheAppendOp>(cur.getDefiningOp()))
          return attn.emitOpError()
                 << "cannot shard: the " << name
                 << " comes from a KV cache (llm.kv_cache_append); decode "
                    "graphs are not supported yet";
        if (!cur.hasOneUse())
          return attn.emitOpError()
                 << "cannot shard: the " << name
                 << " (or a value on its path from the projection) is also "
                    "used outside the attention";
        Operation *def = cur.getDefiningOp();
        if (isa_and_nonnull<RoPEOp, CastOp>(def)) {
          chain.push_back(def);
          cur = def->getOperand(0);
          continue;
        }
        split = dyn_cast_or_null<ReshapeOp>(def);
        break;
      }
      if (!split || !isHeadSplit(split))
        return attn.emitOpError()
               << "cannot shard: the " << name
               << " is not a head split (llm.reshape [..., H*D] -> "
                  "[..., H, D], then llm.rope / llm.cast) of a projection";
      Value proj = split.getInput();
      auto mm = proj.getDefiningOp<MatmulOp>();
      if (!mm) {
        InFlightDiagnostic diag = attn.emitOpError();
        diag << "cannot shard: the " << name << " head split reads ";
        if (Operation *def = proj.getDefiningOp())
          diag << "'" << def->getName() << "'";
        else
          diag << "a block argument";
        diag << ", not an llm.matmul projection (fused QKV projections are "
                "not supported)";
        return diag;
      }
      if (!proj.hasOneUse())
        return attn.emitOpError()
               << "cannot shard: the " << name
               << " projection is also used outside the head split";
      if (failed(checkProjection(mm, std::string(name) + " projection",
                                 /*column=*/true)))
        return failure();
      plan.columns.push_back(mm);
      plan.claimed.insert(mm);
      plan.divideDim[split] = split.getType().getRank() - 2;
      plan.retype.insert(split);
      for (Operation *op : chain)
        plan.retype.insert(op);
    }
    plan.retype.insert(attn);

    Value out = attn.getResult();
    ReshapeOp merge = out.hasOneUse()
                          ? dyn_cast<ReshapeOp>(*out.getUsers().begin())
                          : nullptr;
    if (!merge || !isHeadMerge(merge))
      return attn.emitOpError()
             << "cannot shard: the attention output must be used only by a "
                "head merge (llm.reshape [..., H, D] -> [..., H*D])";
    Value merged = merge.getResult();
    MatmulOp o = merged.hasOneUse()
                     ? dyn_cast<MatmulOp>(*merged.getUsers().begin())
                     : nullptr;
    if (!o || o.getLhs() != merged)
      return attn.emitOpError()
             << "cannot shard: the merged heads must be used only as the "
                "activation of an llm.matmul (the output projection)";
    if (failed(checkProjection(o, "output projection", /*column=*/false)))
      return failure();
    plan.divideDim[merge] = merge.getType().getRank() - 1;
    plan.retype.insert(merge);
    plan.rows.push_back(o);
    plan.claimed.insert(o);
    return success();
  }

  /// Matches `down` as the row-parallel projection of an MLP: its
  /// activation is a tree of elementwise ops whose leaves are all matmul
  /// results (gate, up). Returns false when `down` is not such a projection
  /// (it stays replicated), failure when it is but cannot be sharded.
  FailureOr<bool> matchMlp(MatmulOp down, ShardPlan &plan) {
    Operation *root = down.getLhs().getDefiningOp();
    if (!root || !isElementwise(root))
      return false;
    llvm::SetVector<Operation *> cone;
    llvm::SetVector<Operation *> leaves;
    SmallVector<Operation *> worklist = {root};
    while (!worklist.empty()) {
      Operation *op = worklist.pop_back_val();
      if (!cone.insert(op))
        continue;
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (isa_and_nonnull<MatmulOp>(def))
          leaves.insert(def);
        else if (def && isElementwise(def))
          worklist.push_back(def);
        else
          return false; // reads something other than projections
      }
    }
    for (Operation *leaf : leaves)
      if (plan.claimed.contains(leaf))
        return false; // e.g. a row-parallel projection: its result is full

    // Every value of the block is consumed inside it.
    auto inside = [&](Operation *user) {
      return cone.contains(user) || user == down.getOperation();
    };
    for (Operation *op : llvm::concat<Operation *const>(cone.getArrayRef(),
                                                        leaves.getArrayRef()))
      if (!llvm::all_of(op->getUsers(), inside) ||
          (op == root && down.getRhs() == root->getResult(0)) ||
          (down.getBias() && down.getBias().getDefiningOp() == op)) {
        InFlightDiagnostic diag =
            down.emitOpError()
            << "cannot shard the MLP: the result of '" << op->getName()
            << "' is also used outside the block (it would need an "
               "all_gather)";
        diag.attachNote(op->getLoc()) << "used here";
        return failure();
      }
    for (Operation *leaf : leaves)
      if (failed(checkProjection(cast<MatmulOp>(leaf), "MLP input projection",
                                 /*column=*/true)))
        return failure();
    if (failed(checkProjection(down, "MLP output projection",
                               /*column=*/false)))
      return failure();
    for (Operation *leaf : leaves) {
      plan.columns.push_back(cast<MatmulOp>(leaf));
      plan.claimed.insert(leaf);
    }
    for (Operation *op : cone)
      plan.retype.insert(op);
    plan.rows.push_back(down);
    plan.claimed.insert(down);
    return true;
  }

  /// Rank `rank`'s 1/tp share of `v` along `dim` (static).
  Value sliceShare(OpBuilder &b, Location loc, Value v, int64_t dim) {
    auto t = cast<RankedTensorType>(v.getType());
    int64_t chunk = t.getDimSize(dim) / tp;
    SmallVector<int64_t> starts(t.getRank(), 0), steps(t.getRank(), 1);
    SmallVector<int64_t> limits(t.getShape()), shape(t.getShape());
    starts[dim] = rank * chunk;
    limits[dim] = (rank + 1) * chunk;
    shape[dim] = chunk;
    auto slice =
        SliceOp::create(b, loc, t.clone(shape), v, starts, limits, steps);
    return slice;
  }

  void rewrite(ShardPlan &plan) {
    OpBuilder b(&getContext());
    for (MatmulOp mm : plan.columns) {
      b.setInsertionPoint(mm);
      mm.getRhsMutable().assign(
          sliceShare(b, mm.getLoc(), mm.getRhs(), weightOutDim(mm)));
      if (Value bias = mm.getBias())
        mm.getBiasMutable().assign(sliceShare(b, mm.getLoc(), bias, 0));
      auto rt = mm.getType();
      SmallVector<int64_t> shape(rt.getShape());
      shape.back() /= tp;
      mm.getResult().setType(rt.clone(shape));
    }
    // In program order, so every operand is already retyped.
    SmallVector<Operation *> ops(plan.retype.begin(), plan.retype.end());
    llvm::sort(
        ops, [](Operation *a, Operation *c) { return a->isBeforeInBlock(c); });
    for (Operation *op : ops) {
      auto rt = cast<RankedTensorType>(op->getResult(0).getType());
      SmallVector<int64_t> shape;
      if (auto it = plan.divideDim.find(op); it != plan.divideDim.end()) {
        shape.assign(rt.getShape().begin(), rt.getShape().end());
        shape[it->second] /= tp;
      } else {
        // rope, cast, attention (the query's shape) and elementwise ops.
        auto in = cast<RankedTensorType>(op->getOperand(0).getType());
        shape.assign(in.getShape().begin(), in.getShape().end());
      }
      op->getResult(0).setType(rt.clone(shape));
    }
    for (MatmulOp mm : plan.rows) {
      b.setInsertionPoint(mm);
      mm.getRhsMutable().assign(
          sliceShare(b, mm.getLoc(), mm.getRhs(), weightInDim(mm)));
      // The bias is added once, by rank 0, to the partial sums.
      if (mm.getBias() && rank != 0)
        mm.getBiasMutable().clear();
      b.setInsertionPointAfter(mm);
      auto reduced =
          AllReduceOp::create(b, mm.getLoc(), mm.getType(), mm.getResult(),
                              ReduceKind::sum, static_cast<uint64_t>(tp));
      mm.getResult().replaceAllUsesExcept(reduced.getResult(), reduced);
    }
  }

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (tp < 1 || rank < 0 || rank >= tp) {
      fn.emitOpError() << "llmc-shard needs tp >= 1 and 0 <= rank < tp, found "
                       << "tp=" << static_cast<int64_t>(tp)
                       << " rank=" << static_cast<int64_t>(rank);
      return signalPassFailure();
    }
    if (tp == 1 || fn.isExternal())
      return;
    if (!fn.getBody().hasOneBlock()) {
      fn.emitOpError() << "cannot shard a body of "
                       << fn.getBody().getBlocks().size()
                       << " blocks (expected one)";
      return signalPassFailure();
    }
    Block &body = fn.getBody().front();

    ShardPlan plan;
    for (auto attn : body.getOps<AttentionOp>())
      if (failed(matchAttention(attn, plan)))
        return signalPassFailure();
    for (auto mm : body.getOps<MatmulOp>()) {
      if (plan.claimed.contains(mm))
        continue;
      FailureOr<bool> matched = matchMlp(mm, plan);
      if (failed(matched))
        return signalPassFailure();
    }
    if (plan.rows.empty()) {
      fn.emitOpError() << "found no attention or MLP block to shard "
                       << static_cast<int64_t>(tp) << " ways";
      return signalPassFailure();
    }
    for (auto mm : body.getOps<MatmulOp>())
      if (!plan.claimed.contains(mm))
        mm.emitWarning() << "left replicated by llmc-shard: not a projection "
                            "of an attention or MLP block";
    rewrite(plan);
  }
};
} // namespace
