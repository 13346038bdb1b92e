//===- FusionPlan.cpp - which llm ops share a kernel ----------------------===//

#include "LLM/Transforms/FusionPlan.h"

#include "LLM/IR/LLMOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace llmc::llm;

int llmc::llm::fusedOpCost(Operation *op) {
  if (isa<SinOp, CosOp>(op))
    return 64;
  if (isa<PowOp>(op))
    return 48;
  if (isa<LogOp>(op))
    return 24;
  if (isa<GeluOp>(op))
    return 16;
  if (isa<TanhOp, SigmoidOp, SiluOp>(op))
    return 12;
  if (isa<ExpOp, SqrtOp, DivOp>(op))
    return 8;
  if (isa<RsqrtOp>(op))
    return 4;
  return isa<MatmulOp>(op) ? 0 : 1;
}

/// A value the norm kernel can read as a dense row-major tensor: not a
/// strided view, not a constant.
static bool isDenseOperand(Value v) {
  Operation *def = v.getDefiningOp();
  return !def || !(isa<StridedViewOpInterface>(def) ||
                   def->hasTrait<OpTrait::ConstantLike>());
}

namespace {
struct GroupBuilder {
  Block &body;
  const FusionPlanOptions &options;
  llvm::DenseMap<Operation *, int> index;   // program order
  llvm::DenseMap<Operation *, int> groupOf; // op -> group id
  llvm::DenseSet<Operation *> claimed;      // by residual-norm / rope-attention
  struct Group {
    FusionKind kind;
    SmallVector<Operation *> ops;
    bool hasMatmul = false;
    bool alive = true;
  };
  std::vector<Group> groups;

  GroupBuilder(Block &body, const FusionPlanOptions &options)
      : body(body), options(options) {
    int i = 0;
    for (Operation &op : body)
      index[&op] = i++;
  }

  bool inBody(Operation *op) { return op && op->getBlock() == &body; }

  int newGroup(FusionKind kind, ArrayRef<Operation *> ops) {
    groups.push_back(Group{kind, SmallVector<Operation *>(ops), false, true});
    for (Operation *op : ops)
      groupOf[op] = groups.size() - 1;
    return groups.size() - 1;
  }

  /// Whether the ops of `a` and `b` together stay within one kernel's
  /// bounds (kMaxFusedOps): options.maxOps ops, options.maxCost cost units
  /// and options.maxInputs distinct values read from outside (a matmul
  /// member's result counts as one: the epilogue reads it; the matmul's own
  /// operands are the GEMM's, not the kernel's; splat constants are
  /// immediates of the kernel, not parameters).
  bool fitsOneKernel(ArrayRef<Operation *> a, ArrayRef<Operation *> b) {
    if (static_cast<int64_t>(a.size() + b.size()) > options.maxOps)
      return false;
    int64_t cost = 0;
    llvm::SmallPtrSet<Operation *, 16> members;
    for (ArrayRef<Operation *> ops : {a, b})
      for (Operation *op : ops) {
        members.insert(op);
        cost += fusedOpCost(op);
      }
    if (cost > options.maxCost)
      return false;
    llvm::SmallDenseSet<Value, 16> inputs;
    for (ArrayRef<Operation *> ops : {a, b})
      for (Operation *op : ops) {
        if (isa<MatmulOp>(op))
          continue;
        for (Value v : op->getOperands()) {
          Operation *def = v.getDefiningOp();
          Attribute splat;
          if (matchPattern(v, m_Constant(&splat)) && isa<SplatElementsAttr>(splat))
            continue;
          if (!def || !members.contains(def) || isa<MatmulOp>(def))
            inputs.insert(v);
        }
      }
    return static_cast<int64_t>(inputs.size()) <= options.maxInputs;
  }

  void merge(int into, int from) {
    for (Operation *op : groups[from].ops) {
      groups[into].ops.push_back(op);
      groupOf[op] = into;
    }
    groups[into].hasMatmul |= groups[from].hasMatmul;
    groups[from].ops.clear();
    groups[from].alive = false;
  }

  void residualNorm() {
    for (Operation &op : body) {
      if (!isa<RMSNormOp, LayerNormOp>(op))
        continue;
      auto add = op.getOperand(0).getDefiningOp<AddOp>();
      if (!add || !inBody(add) || claimed.contains(add))
        continue;
      if (!isDenseOperand(add.getLhs()) || !isDenseOperand(add.getRhs()))
        continue;
      // Every other use of the sum comes after the norm.
      if (llvm::any_of(add->getUsers(), [&](Operation *user) {
            return user != &op && index.lookup(user) < index[&op] &&
                   inBody(user);
          }))
        continue;
      claimed.insert(add);
      claimed.insert(&op);
      newGroup(FusionKind::ResidualNorm, {add, &op});
    }
  }

  void ropeAttention() {
    for (Operation &op : body) {
      auto attn = dyn_cast<AttentionOp>(op);
      if (!attn)
        continue;
      SmallVector<Operation *> ops;
      for (Value v : {attn.getQuery(), attn.getKey()}) {
        // attention(cast(rope(x))) also fuses: the cast is the store type.
        auto cast = v.getDefiningOp<CastOp>();
        Value r = cast && inBody(cast) && v.hasOneUse() ? cast.getInput() : v;
        auto rope = r.getDefiningOp<RoPEOp>();
        if (!rope || !inBody(rope) || !r.hasOneUse() || !v.hasOneUse() ||
            claimed.contains(rope))
          continue;
        ops.push_back(rope);
        if (r != v)
          ops.push_back(cast);
      }
      if (ops.empty())
        continue;
      llvm::sort(ops, [&](Operation *a, Operation *b) {
        return index[a] < index[b];
      });
      ops.push_back(&op);
      for (Operation *o : ops)
        claimed.insert(o);
      newGroup(FusionKind::RopeAttention, ops);
    }
  }

  // ew(x, mm(a, b)) joins mm's group; ew2(ew1(x)) joins ew1's group.
  void elementwiseAndEpilogues() {
    for (Operation &op : body) {
      if (!isElementwise(&op) || claimed.contains(&op))
        continue;
      int g = newGroup(FusionKind::Elementwise, {&op});
      for (Value operand : op.getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (!inBody(def) || claimed.contains(def))
          continue;
        // A value with other uses still joins when its producer's kernel
        // can also write it out (multi-output; see sharesProducer).
        if (!operand.hasOneUse() && !sharesProducer(def, g))
          continue;
        if (auto mm = dyn_cast<MatmulOp>(def)) {
          if (!options.gemmEpilogue || groups[g].hasMatmul ||
              groupOf.count(mm))
            continue;
          if (groups[g].ops.size() > 1 && !options.elementwise)
            continue;
          if (!fitsOneKernel(groups[g].ops, {mm.getOperation()}))
            continue;
          groups[g].ops.push_back(mm);
          groups[g].hasMatmul = true;
          groups[g].kind = FusionKind::GemmEpilogue;
          groupOf[mm] = g;
          continue;
        }
        auto it = groupOf.find(def);
        if (it == groupOf.end() || it->second == g)
          continue;
        int d = it->second;
        bool mmD = groups[d].hasMatmul, mmG = groups[g].hasMatmul;
        if (mmD && mmG)
          continue; // at most one GEMM main loop per kernel
        if (mmD || mmG) {
          // An epilogue: allowed when the non-GEMM side is a single op
          // unless elementwise chains are fused too.
          if (!options.gemmEpilogue)
            continue;
          size_t other = mmD ? groups[g].ops.size() : groups[d].ops.size();
          if (other > 1 && !options.elementwise)
            continue;
        } else if (!options.elementwise) {
          continue;
        }
        // A chain beyond one kernel's bounds continues in a new kernel; so
        // does one whose outputs would be used before the merged kernel
        // runs (a member written out as well, used before this op).
        if (!fitsOneKernel(groups[g].ops, groups[d].ops) || !placeableMerged(g, d))
          continue;
        merge(g, d);
        if (groups[g].hasMatmul)
          groups[g].kind = FusionKind::GemmEpilogue;
      }
    }
  }

  /// Whether `op` may join the group of `def`, whose result it reads and
  /// which has other uses too: the kernel then writes `def`'s result as a
  /// second output instead of a kernel of its own writing it and `op`'s
  /// kernel reading it back (a training forward's saved activations: an
  /// RMSNorm's float32 input, SwiGLU's gate). Only between groups without a
  /// GEMM so far (kept simple: codegen never puts the matmul itself in an
  /// elementwise kernel, so this refuses some fusions it could take, e.g.
  /// an fp8 scaling right after a GEMM epilogue), and of one shape (the
  /// kernel's outputs have its shape; the elementwise verifiers keep shapes
  /// equal already). The caller also checks the merged group's bounds and
  /// that it can run where its last op is (placeableMerged).
  bool sharesProducer(Operation *def, int g) {
    if (!options.elementwise || !isElementwise(def))
      return false;
    auto it = groupOf.find(def);
    return it != groupOf.end() && it->second != g && !groups[it->second].hasMatmul &&
           !groups[g].hasMatmul && groups[it->second].kind == FusionKind::Elementwise;
  }

  bool placeableMerged(int g, int d) {
    SmallVector<Operation *> merged(groups[d].ops);
    merged.append(groups[g].ops.begin(), groups[g].ops.end());
    llvm::sort(merged, [&](Operation *a, Operation *b) { return index[a] < index[b]; });
    return placeable(merged);
  }

  /// Values a group defines that are used outside it must be used after its
  /// last op (where the kernel runs).
  bool placeable(ArrayRef<Operation *> ops) {
    llvm::DenseSet<Operation *> members(ops.begin(), ops.end());
    int last = index[ops.back()];
    for (Operation *op : ops)
      for (Operation *user : op->getUsers()) {
        if (members.contains(user))
          continue;
        Operation *top = body.findAncestorOpInBlock(*user);
        if (!top || index.lookup(top) <= last)
          return false;
      }
    return true;
  }

  SmallVector<FusionGroup> result() {
    SmallVector<FusionGroup> out;
    for (Group &g : groups) {
      if (!g.alive || g.ops.size() < 2)
        continue;
      llvm::sort(g.ops, [&](Operation *a, Operation *b) {
        return index[a] < index[b];
      });
      if (!placeable(g.ops))
        continue;
      out.push_back(FusionGroup{g.kind, g.ops});
    }
    llvm::sort(out, [&](const FusionGroup &a, const FusionGroup &b) {
      return index[a.ops.back()] < index[b.ops.back()];
    });
    return out;
  }
};
} // namespace

SmallVector<FusionGroup>
llmc::llm::planFusionGroups(Block &body, const FusionPlanOptions &options) {
  GroupBuilder b(body, options);
  if (options.residualNorm)
    b.residualNorm();
  if (options.ropeAttention)
    b.ropeAttention();
  if (options.elementwise || options.gemmEpilogue)
    b.elementwiseAndEpilogues();
  return b.result();
}
