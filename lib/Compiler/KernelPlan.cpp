//===- KernelPlan.cpp - which ops share a CUDA kernel ---------------------===//
//
// planKernels (see KernelPlan.h), and the llmc-form-kernels pass that shows
// its decision in IR.
//
//===----------------------------------------------------------------------===//

#include "KernelPlan.h"

#include "LLM/IR/LLMInterfaces.h"
#include "LLM/Transforms/FusionPlan.h"
#include "LLM/Transforms/Passes.h"
#include "llmc/Compiler/LowerToExecutable.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/MapVector.h"

using namespace mlir;
using namespace llmc;
using namespace llmc::llm;
namespace cu = llmc::cuda;

namespace llmc {
#define GEN_PASS_DECL
#define GEN_PASS_DEF_FORMKERNELSPASS
#define GEN_PASS_REGISTRATION
#include "Passes.h.inc"
} // namespace llmc

namespace {

RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }
cu::ScalarType scalarOf(Value v) { return kernelScalarType(v); }


} // namespace

bool llmc::isSplatConstant(Value v) {
  Attribute attr;
  return matchPattern(v, m_Constant(&attr)) && isa<SplatElementsAttr>(attr);
}

cu::ScalarType llmc::kernelScalarType(rt::DType t) {
  switch (t) {
  case rt::DType::f32: return cu::ScalarType::f32;
  case rt::DType::f16: return cu::ScalarType::f16;
  case rt::DType::bf16: return cu::ScalarType::bf16;
  case rt::DType::f8e4m3: return cu::ScalarType::f8e4m3;
  case rt::DType::f8e5m2: return cu::ScalarType::f8e5m2;
  case rt::DType::i1: return cu::ScalarType::i1;
  case rt::DType::i8: return cu::ScalarType::i8;
  case rt::DType::i32: return cu::ScalarType::i32;
  case rt::DType::i64: return cu::ScalarType::i64;
  }
  return cu::ScalarType::f32;
}

cu::ScalarType llmc::kernelScalarType(Value v) {
  return kernelScalarType(*toRuntimeDType(tensorType(v).getElementType()));
}

/// The GEMV kernel's configuration for a decode-shaped projection (a few rows
/// against an nn.Linear weight: the weight read is the whole cost and the
/// GEMV streams it at full bandwidth); false when the matmul is not one.
bool llmc::decodeGemvConfig(MatmulOp op, cu::GemvConfig *gc) {
  auto lhs = tensorType(op.getLhs()), rhs = tensorType(op.getRhs());
  int64_t lr = lhs.getRank(), rr = rhs.getRank();
  if (op.getTransposeLhs() || !op.getTransposeRhs() || lr < 2 || rr < 2 ||
      op.getScaleLhs())
    return false;
  int64_t lhsBatch = 1, rhsBatch = 1;
  for (int64_t d : lhs.getShape().drop_back(2)) lhsBatch *= d;
  for (int64_t d : rhs.getShape().drop_back(2)) rhsBatch *= d;
  int64_t m = lhs.getDimSize(lr - 2);
  if (rhsBatch != 1 || m * lhsBatch > cu::kGemvMaxRows)
    return false;
  gc->dtype = scalarOf(op.getLhs());
  gc->out = scalarOf(op.getResult());
  gc->m = m * lhsBatch;
  gc->k = lhs.getDimSize(lr - 1);
  gc->n = rhs.getDimSize(rr - 2);
  gc->has_bias = op.getBias() && scalarOf(op.getBias()) == gc->dtype;
  bool outOk = gc->out == cu::ScalarType::f32 || gc->out == cu::ScalarType::f16 ||
               gc->out == cu::ScalarType::bf16;
  return cu::GemvSupported(*gc) && outOk && (!op.getBias() || gc->has_bias) &&
         scalarOf(op.getRhs()) == gc->dtype;
}

/// matmul(x, dequantize_weight(q, s)) {transpose_rhs} with at most
/// kGemvMaxRows rows: one fused GEMV reading q and s.
bool llmc::fusedDequantGemv(MatmulOp op, cu::QuantGemvConfig *cfg) {
  auto deq = op.getRhs().getDefiningOp<DequantizeWeightOp>();
  if (!deq || op.getTransposeLhs() || !op.getTransposeRhs())
    return false;
  auto lhs = tensorType(op.getLhs());
  int64_t rows = 1;
  for (int64_t d : lhs.getShape().drop_back())
    rows *= d;
  cfg->bits = deq.getBits();
  cfg->group = deq.getGroupSize();
  cfg->dtype = scalarOf(op.getLhs());
  cfg->out = scalarOf(op.getResult());
  cfg->m = rows;
  cfg->k = lhs.getShape().back();
  cfg->n = tensorType(op.getRhs()).getDimSize(0);
  cfg->has_bias = static_cast<bool>(op.getBias());
  if (op.getBias() && scalarOf(op.getBias()) != cfg->dtype)
    return false;
  return cu::QuantGemvSupported(*cfg);
}

bool llmc::swiGluGemvConfig(MatmulOp gate, MatmulOp up, Operation *silu,
                            Operation *mul, cu::SwiGluGemvConfig *c) {
  cu::GemvConfig gg, gu;
  if (!decodeGemvConfig(gate, &gg) || !decodeGemvConfig(up, &gu))
    return false;
  c->dtype = gg.dtype;
  c->gate_out = gg.out;
  c->up_out = gu.out;
  c->act_out = scalarOf(silu->getResult(0));
  c->out = scalarOf(mul->getResult(0));
  c->m = gg.m;
  c->k = gg.k;
  c->n = gg.n;
  c->has_bias = gg.has_bias;
  return gg.has_bias == gu.has_bias && cu::SwiGluGemvSupported(*c);
}

/// How `put` writes `origin` ([B, S, H, D]) when put's source is `origin`
/// through reshapes, transposes and broadcasts, each the only user of the
/// value before it, that only permute, add or drop size-1 dims: RoPE's S
/// (origin dim 1) is put's indexed dimension (or S = 1) and D (dim 3) the
/// base's last. Fills `layout`; false otherwise.
static bool cacheWriteLayout(Value origin, IndexPutOp put, RopeCacheWriteLayout *layout) {
  if (put.getAccumulate())
    return false;
  SmallVector<Operation *> views;
  Value v = put.getSource();
  while (v != origin) {
    Operation *def = v.getDefiningOp();
    if (!def || !isa<ReshapeOp, TransposeOp, BroadcastOp>(def) || !v.hasOneUse() ||
        def->getBlock() != put->getBlock())
      return false;
    views.push_back(def);
    v = def->getOperand(0);
  }
  // Which origin dimension (0..3: B, S, H, D) each dimension of the value
  // holds; -1 for size-1 dims.
  auto originType = tensorType(origin);
  ArrayRef<int64_t> shape = originType.getShape();
  if (shape.size() != 4 || originType.getNumElements() == 0)
    return false;
  SmallVector<int> dimOf;
  for (int j = 0; j < 4; ++j)
    dimOf.push_back(shape[j] == 1 ? -1 : j);
  for (Operation *view : llvm::reverse(views)) {
    ArrayRef<int64_t> out = tensorType(view->getResult(0)).getShape();
    SmallVector<int> next;
    if (auto t = dyn_cast<TransposeOp>(view)) {
      for (int64_t p : t.getPermutation())
        next.push_back(dimOf[p]);
    } else {
      // A reshape, or a broadcast that adds nothing but size-1 dims: only
      // size-1 dims come or go.
      SmallVector<int> kept;
      for (int d : dimOf)
        if (d >= 0)
          kept.push_back(d);
      size_t k = 0;
      for (int64_t size : out) {
        if (size == 1) {
          next.push_back(-1);
          continue;
        }
        if (k == kept.size() || shape[kept[k]] != size)
          return false;
        next.push_back(kept[k++]);
      }
      if (k != kept.size())
        return false;
    }
    dimOf = std::move(next);
  }
  auto base = tensorType(put.getBase());
  int64_t rank = base.getRank(), dim = put.getDim();
  // An empty cache is never written: its index_put launches nothing, and
  // the launch must not vanish with it when it also computes q.
  if (static_cast<int64_t>(dimOf.size()) != rank || dimOf.back() != 3 ||
      base.getNumElements() == 0)
    return false;
  // S is the indexed dim (S = 1: the indexed dim has size 1 in the source,
  // which the verifier ties to one index).
  if (shape[1] != 1 ? dimOf[dim] != 1 : dimOf[dim] != -1)
    return false;
  SmallVector<int64_t> strides(rank, 1);
  for (int64_t i = rank - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * base.getDimSize(i + 1);
  *layout = RopeCacheWriteLayout();
  layout->rows = base.getDimSize(dim);
  layout->out_row = strides[dim];
  for (int64_t i = 0; i < rank; ++i) {
    if (dimOf[i] == 0)
      layout->out_b = strides[i];
    if (dimOf[i] == 2)
      layout->out_h = strides[i];
  }
  return true;
}

bool llmc::ropeCacheWriteConfig(RoPEOp rope, IndexPutOp put, cu::RoPETableConfig *cfg,
                                RopeCacheWriteLayout *layout) {
  // An empty RoPE (S = 0 tokens) writes nothing: no kernel at all, as the
  // unfused ops (the RoPE has no elements, the index_put no indices).
  if (!rope.getCos() || !rope.getResult().hasOneUse() ||
      !cacheWriteLayout(rope.getResult(), put, layout))
    return false;
  ArrayRef<int64_t> shape = tensorType(rope.getResult()).getShape();
  *cfg = cu::RoPETableConfig();
  cfg->dtype = scalarOf(rope.getInput());
  cfg->table = scalarOf(rope.getCos());
  cfg->num_heads = shape[2];
  cfg->head_dim = shape[3];
  cfg->interleaved = rope.getMode() == RopeMode::interleaved;
  cfg->cache_write = true;
  cfg->index = scalarOf(put.getIndices());
  return scalarOf(put.getBase()) == cfg->dtype && cu::RoPETableSupported(*cfg);
}

Value llmc::cacheWriteValue(RoPEOp rope, IndexPutOp put, IndexPutOp putV) {
  RopeCacheWriteLayout k, v;
  cu::RoPETableConfig cfg;
  if (!ropeCacheWriteConfig(rope, put, &cfg, &k) || putV == put ||
      putV.getIndices() != put.getIndices() || putV.getBase().getType() != put.getBase().getType())
    return Value();
  // The nearest value up the view chain with k's [B, S, H, D] shape whose
  // write has k's layout.
  for (Value x = putV.getSource(); x;) {
    if (x.getType() == rope.getResult().getType() && cacheWriteLayout(x, putV, &v) &&
        v.rows == k.rows && v.out_b == k.out_b && v.out_row == k.out_row && v.out_h == k.out_h)
      return x;
    Operation *def = x.getDefiningOp();
    x = isa_and_nonnull<ReshapeOp, TransposeOp, BroadcastOp>(def) ? def->getOperand(0) : Value();
  }
  return Value();
}

bool llmc::cacheWriteQuery(RoPEOp rope, RoPEOp q) {
  auto k = tensorType(rope.getInput()), qt = tensorType(q.getInput());
  return q != rope && q.getCos() == rope.getCos() && q.getSin() == rope.getSin() &&
         q.getMode() == rope.getMode() && qt.getElementType() == k.getElementType() &&
         qt.getRank() == 4 && qt.getDimSize(0) == k.getDimSize(0) &&
         qt.getDimSize(1) == k.getDimSize(1) && qt.getDimSize(3) == k.getDimSize(3) &&
         qt.getNumElements() > 0;
}

bool llmc::ropeCacheWriteMembersOk(const RopeCacheWrite &w) {
  Operation *last = w.emitAt;
  SmallVector<Operation *, 4> members = w.members();
  for (Operation *member : llvm::drop_begin(members)) { // not rope: views use it
    if (member == last)
      continue;
    if (member->getBlock() != last->getBlock() || !member->isBeforeInBlock(last))
      return false;
    for (Operation *user : member->getUsers())
      if (user->getBlock() != last->getBlock() || !last->isBeforeInBlock(user))
        return false;
  }
  return true;
}

bool llmc::attentionStatsPair(AttentionOp attention, AttentionLogSumExpOp stats) {
  if (attention.getQuery() != stats.getQuery() || attention.getKey() != stats.getKey() ||
      attention.getMask() || stats.getMask() || attention.getKvLen() ||
      attention.getKvHnd() || attention.getCausal() != stats.getCausal() ||
      attention.getScale() != stats.getScale())
    return false;
  Type t = getElementTypeOrSelf(attention.getQuery().getType());
  if (getElementTypeOrSelf(attention.getKey().getType()) != t ||
      getElementTypeOrSelf(attention.getValue().getType()) != t)
    return false;
  cu::AttentionConfig cfg;
  cfg.dtype = kernelScalarType(attention.getQuery());
  cfg.head_dim = cast<RankedTensorType>(attention.getQuery().getType()).getDimSize(3);
  cfg.write_lse = true;
  if (!cu::AttentionUsesTensorCores(cfg))
    return false;
  Operation *a = attention, *s = stats;
  if (a->getBlock() != s->getBlock())
    return false;
  Operation *first = a->isBeforeInBlock(s) ? a : s, *last = first == a ? s : a;
  // Views launch nothing (AOTAutograd transposes the saved logsumexp right
  // away): what reads through them must come after the launch.
  std::function<bool(Operation *)> usedAfter = [&](Operation *op) {
    return llvm::all_of(op->getUsers(), [&](Operation *user) {
      if (user->getBlock() != last->getBlock())
        return false;
      if (last->isBeforeInBlock(user))
        return true;
      return isa<ViewLikeOpInterface>(user) && usedAfter(user);
    });
  };
  return usedAfter(first);
}

namespace {

struct Planner {
  func::FuncOp fn;
  const LowerOptions &options;
  const llvm::DenseSet<Operation *> &prepared;
  KernelPlan plan;

  void planFusion();
  void planGemvGroups();
  void planRopeCacheWrites();
  void planAttentionStats();
};

} // namespace

void Planner::planFusion() {
  Block &body = fn.getBody().front();
  llm::FusionPlanOptions planOptions;
  planOptions.elementwise = options.fuse_elementwise;
  planOptions.residualNorm = options.fuse_residual_norm;
  planOptions.gemmEpilogue = options.fuse_gemm_epilogue;
  llvm::DenseMap<Operation *, int> planGroupOf;
  for (auto [i, g] : llvm::enumerate(llm::planFusionGroups(body, planOptions)))
    for (Operation *op : g.ops)
      planGroupOf[op] = static_cast<int>(i);
  auto samePlanGroup = [&](Operation *a, Operation *b) {
    auto ia = planGroupOf.find(a), ib = planGroupOf.find(b);
    return ia != planGroupOf.end() && ib != planGroupOf.end() && ia->second == ib->second;
  };
  if (options.fuse_residual_norm) {
    for (Operation &op : body) {
      if (!isa<RMSNormOp, LayerNormOp>(op))
        continue;
      auto add = op.getOperand(0).getDefiningOp<AddOp>();
      if (!add || add->getBlock() != &body || !samePlanGroup(add, &op))
        continue;
      // Both summands must be plain dense tensors of the same shape (not views).
      auto isDense = [&](Value v) {
        return !v.getDefiningOp<StridedViewOpInterface>() && !isSplatConstant(v);
      };
      if (!isDense(add.getLhs()) || !isDense(add.getRhs()) ||
          prepared.contains(add) != prepared.contains(&op))
        continue;
      // Every other use of the sum must come after the norm.
      bool ok = true;
      for (Operation *user : add->getUsers())
        if (user != &op && user->isBeforeInBlock(&op))
          ok = false;
      if (ok)
        plan.fusedIntoNorm.insert(add);
    }
  }
  // `op` may join the kernel of `def` when the kernel can then run where
  // `op` is: every use outside the kernel of any member's result (an output
  // the kernel writes: a producer with other uses too, multi-output as the
  // plan allows it) comes after `op`; and such a result has the kernel's
  // shape.
  auto canRunAt = [&](ArrayRef<int> groups, Operation *op) {
    llvm::SmallPtrSet<Operation *, 16> in;
    in.insert(op);
    for (int g : groups)
      in.insert(plan.groups[g].begin(), plan.groups[g].end());
    for (int g : groups)
      for (Operation *m : plan.groups[g]) {
        if (cast<ShapedType>(m->getResult(0).getType()).getShape() !=
            cast<ShapedType>(op->getResult(0).getType()).getShape())
          return false;
        for (Operation *user : m->getUsers()) {
          if (in.contains(user))
            continue;
          Operation *top = body.findAncestorOpInBlock(*user);
          if (!top || !op->isBeforeInBlock(top))
            return false;
        }
      }
    return true;
  };
  for (Operation &op : body) {
    if (!isElementwise(&op) || plan.fusedIntoNorm.contains(&op))
      continue;
    // The kernels of this op's operands in its plan group. The op joins all
    // of them when one kernel can run at the op (a DAG: SiLU's backward
    // reads the sigmoid twice, from two chains), else the first that can
    // alone.
    SmallVector<int, 2> joins;
    if (options.fuse_elementwise) {
      SmallVector<int, 2> candidates;
      for (Value operand : op.getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (!def || !plan.groupOf.count(def) || !samePlanGroup(def, &op) ||
            prepared.contains(def) != prepared.contains(&op) ||
            llvm::is_contained(candidates, plan.groupOf[def]))
          continue;
        candidates.push_back(plan.groupOf[def]);
      }
      if (candidates.size() > 1 && canRunAt(candidates, &op)) {
        joins = candidates;
      } else {
        for (int g : candidates)
          if (canRunAt(g, &op)) {
            joins.push_back(g);
            break;
          }
      }
    }
    int group;
    if (joins.empty()) {
      group = plan.groups.size();
      plan.groups.emplace_back();
    } else {
      group = joins.front();
      for (int other : llvm::drop_begin(joins)) {
        for (Operation *m : plan.groups[other]) {
          plan.groups[group].push_back(m);
          plan.groupOf[m] = group;
        }
        plan.groups[other].clear();  // an empty group forms no kernel
      }
      llvm::sort(plan.groups[group],
                 [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    }
    plan.groups[group].push_back(&op);
    plan.groupOf[&op] = group;
  }
}

/// The decode GEMVs of planGemvGroups, grouped by the x they read, in
/// program order.
static llvm::MapVector<Value, SmallVector<MatmulOp>>
decodeGemvsByLhs(func::FuncOp fn, const llvm::DenseSet<Operation *> &prepared) {
  llvm::MapVector<Value, SmallVector<MatmulOp>> byLhs;
  for (MatmulOp mm : fn.getBody().front().getOps<MatmulOp>()) {
    cu::GemvConfig gc;
    cu::QuantGemvConfig qc;
    if (!prepared.contains(mm) && !fusedDequantGemv(mm, &qc) && decodeGemvConfig(mm, &gc))
      byLhs[mm.getLhs()].push_back(mm);
  }
  return byLhs;
}

void Planner::planGemvGroups() {
  if (!options.fuse_gemv)
    return;
  llvm::MapVector<Value, SmallVector<MatmulOp>> byLhs = decodeGemvsByLhs(fn, prepared);
  // (The same rule as ReadKernelPlan's reader, which checks the plan.)
  auto usedOnlyAfter = [](Value v, Operation *point) {
    return llvm::all_of(v.getUsers(), [&](Operation *user) {
      return user->getBlock() == point->getBlock() && point->isBeforeInBlock(user);
    });
  };
  auto onlyOps = [&](Operation *member, Operation *a, Operation *b) {
    auto it = plan.groupOf.find(member);
    return it != plan.groupOf.end() && llvm::all_of(plan.groups[it->second], [&](Operation *o) {
             return o == a || o == b;
           });
  };
  auto addGroup = [&](GemvGroup g) {
    int id = plan.gemvGroups.size();
    for (MatmulOp mm : g.members)
      plan.gemvGroupOf[mm] = id;
    if (g.silu)
      plan.gemvGroupOf[g.silu] = id, plan.gemvGroupOf[g.emitAt] = id;
    plan.gemvGroups.push_back(std::move(g));
  };
  for (auto &[lhs, mms] : byLhs) {
    if (mms.size() < 2)
      continue;
    llvm::DenseSet<Operation *> taken;
    // mul(silu(gate), up) => swiglu_gemv(x, Wg, Wu)
    for (MatmulOp gate : mms) {
      if (!options.fuse_elementwise || taken.contains(gate) || !gate->hasOneUse())
        continue;
      auto silu = dyn_cast<SiluOp>(*gate->user_begin());
      if (!silu || !silu->hasOneUse())
        continue;
      auto mul = dyn_cast<MulOp>(*silu->user_begin());
      if (!mul || prepared.contains(mul))
        continue;
      Value other = mul.getLhs() == silu.getResult() ? mul.getRhs() : mul.getLhs();
      auto up = other.getDefiningOp<MatmulOp>();
      if (!up || up == gate || taken.contains(up) || !llvm::is_contained(mms, up) ||
          !up->hasOneUse())
        continue;
      ArrayRef<int64_t> shape = tensorType(gate.getResult()).getShape();
      if (tensorType(up.getResult()).getShape() != shape ||
          tensorType(silu.getResult()).getShape() != shape ||
          tensorType(mul.getResult()).getShape() != shape)
        continue;
      if (!onlyOps(silu, silu, mul) || !onlyOps(mul, silu, mul))
        continue;
      cu::SwiGluGemvConfig c;
      if (!swiGluGemvConfig(gate, up, silu, mul, &c))
        continue;
      taken.insert(gate);
      taken.insert(up);
      addGroup({{gate, up}, mul, silu});
    }
    // Runs of independent GEMVs in program order => multi_gemv(x, W_0..W_n).
    GemvGroup run;
    auto flush = [&] {
      if (run.members.size() >= 2) {
        run.emitAt = run.members.back();
        addGroup(std::move(run));
      }
      run = GemvGroup();
    };
    for (MatmulOp mm : mms) {
      if (taken.contains(mm))
        continue;
      bool fits = !run.members.empty() &&
                  run.members.size() < static_cast<size_t>(cu::kMultiGemvMaxOutputs) &&
                  llvm::all_of(run.members, [&](MatmulOp prev) {
                    return usedOnlyAfter(prev.getResult(), mm);
                  });
      if (!fits)
        flush();
      run.members.push_back(mm);
    }
    flush();
  }
}

void Planner::planRopeCacheWrites() {
  if (!options.fuse_elementwise)
    return;
  Block &body = fn.getBody().front();
  for (IndexPutOp put : body.getOps<IndexPutOp>()) {
    Value v = put.getSource();
    while (isa_and_nonnull<ReshapeOp, TransposeOp, BroadcastOp>(v.getDefiningOp()))
      v = v.getDefiningOp()->getOperand(0);
    auto rope = v.getDefiningOp<RoPEOp>();
    cu::RoPETableConfig cfg;
    RopeCacheWriteLayout layout;
    if (!rope || prepared.contains(rope) || prepared.contains(put) ||
        !ropeCacheWriteConfig(rope, put, &cfg, &layout))
      continue;
    plan.ropeCacheWrites.push_back({rope, put, RoPEOp(), IndexPutOp(), Value(), put});
  }
  // The q of the same step (same tables) and its v write (same indices,
  // cache type and layout) join the k write's launch: for q the nearest
  // candidate before k's RoPE (back to the previous k RoPE), else the first
  // after it; for v the first after it (up to the next k RoPE); when every
  // member's result is still used only after the launch.
  llvm::DenseSet<Operation *> kOps, kRopes;
  for (const RopeCacheWrite &w : plan.ropeCacheWrites) {
    for (Operation *m : w.members())
      kOps.insert(m);
    kRopes.insert(w.rope.operator->());
  }
  llvm::DenseSet<Operation *> taken;
  for (RopeCacheWrite &w : plan.ropeCacheWrites) {
    RoPEOp q;
    IndexPutOp putV;
    Value vValue;
    // q: Hugging Face rotates q and k together, q first (back to the
    // previous k RoPE); gpt-fast rotates q after the cache writes.
    for (Operation *op = w.rope->getPrevNode(); op && !kRopes.contains(op);
         op = op->getPrevNode())
      if (auto r = dyn_cast<RoPEOp>(op); r && !kOps.contains(op) && !taken.contains(op) &&
                                         !prepared.contains(op) && cacheWriteQuery(w.rope, r)) {
        q = r;
        break;
      }
    // Up to the next k RoPE in program order.
    for (Operation *op = w.rope->getNextNode(); op && !kRopes.contains(op);
         op = op->getNextNode()) {
      if (kOps.contains(op) || taken.contains(op) || prepared.contains(op))
        continue;
      if (auto r = dyn_cast<RoPEOp>(op); r && !q && cacheWriteQuery(w.rope, r))
        q = r;
      if (auto p = dyn_cast<IndexPutOp>(op); p && !putV)
        if (Value x = cacheWriteValue(w.rope, w.put, p)) {
          putV = p;
          vValue = x;
        }
    }
    auto lastOf = [&](const RopeCacheWrite &c) {
      Operation *last = c.put.operator->();
      for (Operation *m : c.members())
        if (last->isBeforeInBlock(m))
          last = m;
      return last;
    };
    for (auto [useQ, useV] : {std::pair{true, true}, {false, true}, {true, false}}) {
      RopeCacheWrite c{w.rope, w.put, useQ ? q : RoPEOp(), useV ? putV : IndexPutOp(),
                       useV ? vValue : Value(), nullptr};
      if ((useQ && !q) || (useV && !putV))
        continue;
      c.emitAt = lastOf(c);
      if (!ropeCacheWriteMembersOk(c))
        continue;
      w = c;
      if (c.q)
        taken.insert(c.q);
      if (c.v)
        taken.insert(c.v);
      break;
    }
  }
  for (auto [id, w] : llvm::enumerate(plan.ropeCacheWrites))
    for (Operation *m : w.members())
      plan.ropeCacheWriteOf[m] = static_cast<int>(id);
}

void Planner::planAttentionStats() {
  Block &body = fn.getBody().front();
  for (AttentionLogSumExpOp stats : body.getOps<AttentionLogSumExpOp>()) {
    if (prepared.contains(stats))
      continue;
    for (Operation *user : stats.getQuery().getUsers()) {
      auto attention = dyn_cast<AttentionOp>(user);
      if (!attention || prepared.contains(attention) ||
          plan.attentionStatsOf.count(attention) || !attentionStatsPair(attention, stats))
        continue;
      Operation *emitAt =
          attention->isBeforeInBlock(stats) ? stats.getOperation() : attention.getOperation();
      int id = static_cast<int>(plan.attentionStats.size());
      plan.attentionStats.push_back({attention, stats, emitAt});
      plan.attentionStatsOf[attention] = id;
      plan.attentionStatsOf[stats] = id;
      break;
    }
  }
}

/// Decode GEMVs that read the same x but sit apart in program order (Hugging
/// Face's LLaMA computes k's RoPE and cache write between the k, v and q
/// projections) move up next to the first of them, as long as their operands
/// are defined there: a matmul has no side effect, and the run they then form
/// is one multi-output GEMV launch (planGemvGroups) instead of one per
/// projection. A GEMV whose operands are not ready stops its x's run; no
/// other op moves. Reads of storage written in place cannot be reordered by
/// this: an index_put / kv_cache_append updates a donated argument in place
/// only when nothing else reads it (llm::updatesInPlace), so a matmul reads
/// either the argument (then the write is out of place) or the write's
/// result (then it is not ready before the write).
static void clusterDecodeGemvs(func::FuncOp fn, const llvm::DenseSet<Operation *> &prepared) {
  for (auto &[lhs, mms] : decodeGemvsByLhs(fn, prepared)) {
    Operation *anchor = mms.front();
    for (MatmulOp mm : llvm::drop_begin(mms)) {
      bool ready = llvm::all_of(mm->getOperands(), [&](Value v) {
        Operation *def = v.getDefiningOp();
        return !def || def == anchor || def->isBeforeInBlock(anchor);
      });
      if (!ready)
        break;
      if (mm->getPrevNode() != anchor)
        mm->moveAfter(anchor);
      anchor = mm;
    }
  }
}

KernelPlan llmc::planKernels(func::FuncOp fn, const LowerOptions &options,
                             const llvm::DenseSet<Operation *> &prepared) {
  if (options.fuse_gemv)
    clusterDecodeGemvs(fn, prepared);
  Planner p{fn, options, prepared, {}};
  p.planFusion();
  p.planGemvGroups();
  p.planRopeCacheWrites();
  p.planAttentionStats();
  if (options.fuse_elementwise)
    formRowKernels(fn, p.plan, prepared);
  return std::move(p.plan);
}

void llmc::annotateKernels(func::FuncOp fn, const KernelPlan &plan) {
  Block &body = fn.getBody().front();
  for (Operation &op : body)
    op.removeAttr(kKernelAttr);
  // Every kernel of two or more ops, by the op where it runs.
  llvm::MapVector<Operation *, std::pair<StringRef, SmallVector<Operation *>>> byLast;
  for (Operation *add : plan.fusedIntoNorm)
    for (Operation *norm : add->getUsers())
      if (isa<RMSNormOp, LayerNormOp>(norm) && norm->getOperand(0) == add->getResult(0))
        byLast[norm] = {"residual_norm", {add, norm}};
  for (const GemvGroup &g : plan.gemvGroups) {
    SmallVector<Operation *> ops(g.members.begin(), g.members.end());
    if (g.silu)
      ops.append({g.silu, g.emitAt});
    byLast[g.emitAt] = {g.silu ? "swiglu_gemv" : "multi_gemv", ops};
  }
  for (const RopeCacheWrite &w : plan.ropeCacheWrites) {
    SmallVector<Operation *> ops(w.members());
    llvm::sort(ops, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    byLast[w.emitAt] = {"rope_cache_write", ops};
  }
  for (const AttentionStats &a : plan.attentionStats) {
    SmallVector<Operation *> ops = {a.attention, a.stats};
    llvm::sort(ops, [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
    byLast[a.emitAt] = {"attention_stats", ops};
  }
  for (const SmallVector<Operation *> &g : plan.groups)
    if (g.size() > 1 && !plan.gemvGroupOf.count(g.back()))
      byLast[g.back()] = {"elementwise", g};
  for (const SmallVector<Operation *> &g : plan.rowGroups)
    byLast[g.back()] = {"row_reduction", g};
  MLIRContext *ctx = fn.getContext();
  Builder b(ctx);
  fn->setAttr(kKernelsFormedAttr, b.getUnitAttr());
  int64_t id = 0;
  for (Operation &op : body) {
    auto it = byLast.find(&op);
    if (it == byLast.end())
      continue;
    auto attr = b.getDictionaryAttr(
        {b.getNamedAttr("group", b.getI64IntegerAttr(id++)),
         b.getNamedAttr("kind", b.getStringAttr(it->second.first))});
    for (Operation *member : it->second.second)
      member->setAttr(kKernelAttr, attr);
  }
}

namespace {

/// llmc-form-kernels: planKernels on every function, shown as kKernelAttr.
struct FormKernelsPass : llmc::impl::FormKernelsPassBase<FormKernelsPass> {
  using FormKernelsPassBase::FormKernelsPassBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.isExternal())
      return;
    if (!fn.getBody().hasOneBlock()) {
      fn.emitOpError() << "llmc-form-kernels expects a body of one block";
      return signalPassFailure();
    }
    // The plan reads static shapes and kernel element types.
    for (Operation &op : fn.getBody().front())
      for (Value v : llvm::concat<Value>(op.getOperands(), op.getResults())) {
        auto t = dyn_cast<RankedTensorType>(v.getType());
        if (!t || !t.hasStaticShape() ||
            !toRuntimeDType(t.getElementType()).ok()) {
          op.emitOpError() << "llmc-form-kernels expects static shapes and "
                              "element types codegen supports, found "
                           << v.getType();
          return signalPassFailure();
        }
      }
    llvm::DenseSet<Operation *> prepared;
    if (hoist) {
      std::string error;
      auto ops = decidedParameterPreparationOps(fn, error);
      if (failed(ops)) {
        fn.emitOpError() << error;
        return signalPassFailure();
      }
      prepared.insert(ops->begin(), ops->end());
    }
    LowerOptions options;
    options.fuse_elementwise = elementwise;
    options.fuse_residual_norm = residualNorm;
    options.fuse_gemm_epilogue = gemmEpilogue;
    options.fuse_gemv = gemv;
    annotateKernels(fn, planKernels(fn, options, prepared));
  }
};

} // namespace

void llmc::registerCompilerPasses() { registerLLMCCompilerPasses(); }

std::unique_ptr<Pass> llmc::createFormKernelsPass(const LowerOptions &options) {
  FormKernelsPassOptions o;
  o.elementwise = options.fuse_elementwise;
  o.residualNorm = options.fuse_residual_norm;
  o.gemmEpilogue = options.fuse_gemm_epilogue;
  o.gemv = options.fuse_gemv;
  o.hoist = options.hoist_parameter_work;
  return createFormKernelsPass(o);
}

SmallVector<std::pair<unsigned, BlockArgument>>
llmc::inPlaceResults(func::FuncOp fn, const KernelPlan &plan,
                     const llvm::DenseSet<Operation *> &prepared) {
  SmallVector<std::pair<unsigned, BlockArgument>> found;
  if (fn.isExternal())
    return found;
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  for (BlockArgument arg : fn.getArguments()) {
    auto k = fn.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(), "llm.aliasing_output");
    if (!k || !fn.getArgAttr(arg.getArgNumber(), "llm.donate") || k.getInt() < 0 ||
        k.getInt() >= static_cast<int64_t>(ret.getNumOperands()))
      continue;
    Value v = ret.getOperand(k.getInt());
    Operation *def = v.getDefiningOp();
    auto group = def ? plan.groupOf.find(def) : plan.groupOf.end();
    if (v.getType() != arg.getType() || group == plan.groupOf.end() || !isElementwise(def) ||
        prepared.contains(def))
      continue;
    ArrayRef<Operation *> members = plan.groups[group->second];
    auto shape = cast<RankedTensorType>(arg.getType()).getShape();
    // The kernel's index space (its last op's shape, LowerElementwise.cpp).
    if (cast<RankedTensorType>(members.back()->getResult(0).getType()).getShape() != shape)
      continue;
    bool safe = llvm::all_of(arg.getUses(), [&](OpOperand &use) {
      Operation *user = use.getOwner();
      auto it = plan.groupOf.find(user);
      return it != plan.groupOf.end() && it->second == group->second && isElementwise(user) &&
             cast<RankedTensorType>(user->getResult(0).getType()).getShape() == shape;
    });
    if (safe)
      found.push_back({static_cast<unsigned>(k.getInt()), arg});
  }
  return found;
}
