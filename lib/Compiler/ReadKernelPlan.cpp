//===- ReadKernelPlan.cpp - the kernels llmc-form-kernels decided ---------===//
//
// decidedKernelPlan (KernelPlan.h): the lowering reads the kernel grouping
// of a function that llmc-form-kernels planned from its `llm.kernel`
// attributes instead of deciding again. Annotations can come from anywhere
// (an .mlir file given to llmc-compile), so each group is checked for what
// its emitter relies on; the checks admit every grouping planKernels makes
// and nothing the emitters would compute wrongly.
//
//===----------------------------------------------------------------------===//

#include "KernelPlan.h"

#include "LLM/IR/LLMInterfaces.h"
#include "LLM/Transforms/FusionPlan.h"

#include "absl/strings/str_cat.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

using namespace mlir;
using namespace llmc;
using namespace llmc::llm;
namespace cu = llmc::cuda;

namespace {

/// One annotated kernel: its kind and members in program order.
struct Annotated {
  int64_t group = 0;
  StringRef kind;
  SmallVector<Operation *> ops;
};

class Reader {
public:
  Reader(func::FuncOp fn, const llvm::DenseSet<Operation *> &prepared)
      : fn(fn), prepared(prepared) {}

  absl::StatusOr<KernelPlan> read();

private:
  absl::Status bad(Operation *op, const Annotated &k, const llvm::Twine &why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: ", describeOp(op), " is in llm.kernel group ", k.group,
        " (kind \"", k.kind.str(), "\") but ", why.str()));
  }
  absl::Status samePreparationSide(const Annotated &k);
  absl::Status usedOnlyAfter(Operation *member, Operation *point, const Annotated &k);
  absl::Status residualNorm(const Annotated &k);
  absl::Status elementwise(const Annotated &k);
  absl::Status multiGemv(const Annotated &k);
  absl::Status swiGluGemv(const Annotated &k);
  absl::Status ropeCacheWrite(const Annotated &k);
  absl::Status attentionStats(const Annotated &k);
  absl::Status rowReduction(const Annotated &k);

  func::FuncOp fn;
  const llvm::DenseSet<Operation *> &prepared;
  KernelPlan plan;
  /// Elementwise ops of one kernel (elementwise kinds, SwiGLU's silu and mul).
  llvm::DenseMap<Operation *, int64_t> elementwiseKernelOf;
};

} // namespace

absl::Status Reader::samePreparationSide(const Annotated &k) {
  for (Operation *op : k.ops)
    if (prepared.contains(op) != prepared.contains(k.ops.front()))
      return bad(op, k,
                 "the kernel mixes parameter-preparation work (run once per "
                 "parameter set) with per-call work");
  return absl::OkStatus();
}

/// Every use of `member`'s results comes after `point`, where the kernel
/// runs (it computes them there).
absl::Status Reader::usedOnlyAfter(Operation *member, Operation *point,
                                   const Annotated &k) {
  for (Operation *user : member->getUsers())
    if (user->getBlock() != point->getBlock() || !point->isBeforeInBlock(user))
      return bad(member, k,
                 absl::StrCat("its result is used by ", describeOp(user),
                              " before the kernel runs at its last member ",
                              describeOp(point)));
  return absl::OkStatus();
}

// add(a, b) -> norm(add) => one norm kernel that also writes the sum.
absl::Status Reader::residualNorm(const Annotated &k) {
  if (k.ops.size() != 2 || !isa<AddOp>(k.ops[0]) ||
      !isa<RMSNormOp, LayerNormOp>(k.ops[1]))
    return bad(k.ops.front(), k,
               "a residual_norm kernel is an llm.add followed by the "
               "llm.rms_norm or llm.layer_norm that reads it");
  auto add = cast<AddOp>(k.ops[0]);
  Operation *norm = k.ops[1];
  if (norm->getOperand(0) != add.getResult())
    return bad(norm, k, "its input is not the sum of the group's llm.add");
  for (Value summand : {add.getLhs(), add.getRhs()})
    if (summand.getDefiningOp<StridedViewOpInterface>() || isSplatConstant(summand))
      return bad(add, k,
                 "the norm kernel reads the summands as dense tensors, and "
                 "one is a view or a splat constant");
  if (absl::Status st = samePreparationSide(k); !st.ok())
    return st;
  for (Operation *user : add->getUsers())
    if (user != norm && user->isBeforeInBlock(norm))
      return bad(add, k,
                 absl::StrCat("its sum is used by ", describeOp(user),
                              " before the norm computes it"));
  plan.fusedIntoNorm.insert(add);
  return absl::OkStatus();
}

// Elementwise chain => one elementwise program, run at its last member.
absl::Status Reader::elementwise(const Annotated &k) {
  Operation *last = k.ops.back();
  auto shape = cast<RankedTensorType>(last->getResult(0).getType()).getShape();
  llvm::SmallPtrSet<Operation *, 16> members(k.ops.begin(), k.ops.end());
  int64_t cost = 0;
  llvm::SmallDenseSet<Value, 16> inputs;
  for (Operation *op : k.ops) {
    if (!isElementwise(op) || op->getNumResults() != 1)
      return bad(op, k, "only elementwise ops form an elementwise kernel");
    if (cast<RankedTensorType>(op->getResult(0).getType()).getShape() != shape)
      return bad(op, k, "its result's shape differs from the kernel's output shape");
    // A member's result used outside the kernel is one of its outputs,
    // written when the kernel runs (at its last member): the use must come
    // after that.
    if (op != last)
      for (Operation *user : op->getUsers()) {
        if (members.contains(user))
          continue;
        Operation *top = last->getBlock()->findAncestorOpInBlock(*user);
        if (!top || !last->isBeforeInBlock(top))
          return bad(op, k,
                     absl::StrCat("its result is used by ", describeOp(user),
                                  " before the kernel's last member, where the "
                                  "kernel runs and writes it"));
      }
    cost += fusedOpCost(op);
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (!isSplatConstant(v) && (!def || !members.contains(def)))
        inputs.insert(v);
    }
  }
  if (static_cast<int64_t>(k.ops.size()) > kMaxFusedOps ||
      cost > kMaxFusedCost || static_cast<int64_t>(inputs.size()) > kMaxFusedInputs)
    return bad(last, k,
               absl::StrCat("the kernel has ", k.ops.size(), " ops of cost ", cost,
                            " reading ", inputs.size(),
                            " inputs, more than one kernel's bounds (", kMaxFusedOps,
                            " ops, cost ", kMaxFusedCost, ", ", kMaxFusedInputs,
                            " inputs)"));
  if (absl::Status st = samePreparationSide(k); !st.ok())
    return st;
  for (Operation *op : k.ops)
    elementwiseKernelOf[op] = k.group;
  return absl::OkStatus();
}

// matmul(x, W_0) .. matmul(x, W_n) => multi_gemv(x, W_0..W_n).
absl::Status Reader::multiGemv(const Annotated &k) {
  if (k.ops.size() < 2 || k.ops.size() > static_cast<size_t>(cu::kMultiGemvMaxOutputs))
    return bad(k.ops.front(), k,
               absl::StrCat("a multi_gemv kernel has 2 to ", cu::kMultiGemvMaxOutputs,
                            " decode GEMVs, found ", k.ops.size(), " ops"));
  GemvGroup group;
  for (Operation *op : k.ops) {
    auto mm = dyn_cast<MatmulOp>(op);
    cu::GemvConfig gc;
    cu::QuantGemvConfig qc;
    if (!mm || fusedDequantGemv(mm, &qc) || !decodeGemvConfig(mm, &gc))
      return bad(op, k, "it is not a decode GEMV the multi-output GEMV kernel takes");
    if (mm.getLhs() != MatmulOp(k.ops.front()).getLhs())
      return bad(op, k, "the GEMVs of one kernel read the same input");
    if (prepared.contains(op))
      return bad(op, k, "parameter-preparation work is never a decode GEMV kernel");
    if (op != k.ops.back())
      if (absl::Status st = usedOnlyAfter(op, k.ops.back(), k); !st.ok())
        return st;
    group.members.push_back(mm);
  }
  group.emitAt = k.ops.back();
  int id = plan.gemvGroups.size();
  for (MatmulOp mm : group.members)
    plan.gemvGroupOf[mm] = id;
  plan.gemvGroups.push_back(std::move(group));
  return absl::OkStatus();
}

// mul(silu(x W_gate), x W_up) => swiglu_gemv(x, W_gate, W_up).
absl::Status Reader::swiGluGemv(const Annotated &k) {
  auto silus = llvm::to_vector(llvm::make_filter_range(
      k.ops, [](Operation *op) { return isa<SiluOp>(op); }));
  auto mul = dyn_cast<MulOp>(k.ops.back());
  if (k.ops.size() != 4 || silus.size() != 1 || !mul)
    return bad(k.ops.front(), k,
               "a swiglu_gemv kernel is two decode GEMVs, the llm.silu of one "
               "and the llm.mul of that with the other");
  Operation *silu = silus.front();
  auto gate = silu->getOperand(0).getDefiningOp<MatmulOp>();
  Value other = mul.getLhs() == silu->getResult(0) ? mul.getRhs() : mul.getLhs();
  auto up = other.getDefiningOp<MatmulOp>();
  if (!gate || !up || gate == up || !llvm::is_contained(k.ops, gate.getOperation()) ||
      !llvm::is_contained(k.ops, up.getOperation()) ||
      (mul.getLhs() != silu->getResult(0) && mul.getRhs() != silu->getResult(0)))
    return bad(mul, k, "it is not mul(silu(gate GEMV), up GEMV) of the group's ops");
  for (Operation *op : {gate.getOperation(), up.getOperation(), silu})
    if (!op->hasOneUse())
      return bad(op, k, "its result is used outside the kernel, which writes "
                        "only the product");
  if (gate.getLhs() != up.getLhs())
    return bad(up, k, "the gate and up GEMVs read the same input");
  for (MatmulOp mm : {gate, up})
    if (cu::QuantGemvConfig qc; fusedDequantGemv(mm, &qc))
      return bad(mm, k, "it reads a dequantized weight, which its own fused "
                        "GEMV decompresses; the SwiGLU GEMV kernel reads dense "
                        "weights");
  for (Operation *op : k.ops)
    if (prepared.contains(op))
      return bad(op, k, "parameter-preparation work is never a decode GEMV kernel");
  ArrayRef<int64_t> shape = cast<RankedTensorType>(mul.getType()).getShape();
  for (Operation *op : k.ops)
    if (cast<RankedTensorType>(op->getResult(0).getType()).getShape() != shape)
      return bad(op, k, "the four ops of a swiglu_gemv kernel have one shape");
  cu::SwiGluGemvConfig c;
  if (!swiGluGemvConfig(gate, up, silu, mul, &c))
    return bad(mul, k, "the SwiGLU GEMV kernel does not take these types and shapes");
  int id = plan.gemvGroups.size();
  for (Operation *op : k.ops)
    plan.gemvGroupOf[op] = id;
  plan.gemvGroups.push_back({{gate, up}, mul, silu});
  elementwiseKernelOf[silu] = k.group;
  elementwiseKernelOf[mul] = k.group;
  return absl::OkStatus();
}

// rope(x) -> views -> index_put(cache, idx, .) => RoPE written into the
// cache, with the step's q RoPE and v write in the same launch if annotated.
absl::Status Reader::ropeCacheWrite(const Annotated &k) {
  SmallVector<RoPEOp> ropes;
  SmallVector<IndexPutOp> puts;
  for (Operation *op : k.ops) {
    if (auto r = dyn_cast<RoPEOp>(op))
      ropes.push_back(r);
    else if (auto p = dyn_cast<IndexPutOp>(op))
      puts.push_back(p);
    else
      ropes.clear(), puts.clear();
  }
  if (ropes.size() + puts.size() != k.ops.size() || ropes.empty() || puts.empty() ||
      ropes.size() > 2 || puts.size() > 2)
    return bad(k.ops.front(), k,
               "a rope_cache_write kernel is an llm.rope followed by the "
               "llm.index_put that writes its result, and at most one more "
               "llm.rope (q) and llm.index_put (v)");
  for (Operation *op : k.ops)
    if (prepared.contains(op))
      return bad(op, k, "parameter-preparation work is never a rope_cache_write kernel");
  // The k pair: a rope whose result a put of the group writes.
  RopeCacheWrite w;
  cu::RoPETableConfig cfg;
  RopeCacheWriteLayout layout;
  for (RoPEOp r : ropes)
    for (IndexPutOp p : puts)
      if (!w.rope && ropeCacheWriteConfig(r, p, &cfg, &layout))
        w.rope = r, w.put = p;
  if (!w.rope)
    return bad(puts.front(), k,
               "its source is not the table-form llm.rope's result alone "
               "(through reshapes, transposes and broadcasts used once that "
               "only permute, add or drop size-1 dimensions), written without "
               "accumulate along RoPE's sequence dimension with the head "
               "dimension last, for a RoPE of at least one element");
  for (RoPEOp r : ropes)
    if (r != w.rope) {
      if (!cacheWriteQuery(w.rope, r))
        return bad(r, k,
                   "a q RoPE in a rope_cache_write kernel reads the k RoPE's cos "
                   "and sin with its pairing, element type, batch, sequence and "
                   "head dim");
      w.q = r;
    }
  for (IndexPutOp p : puts)
    if (p != w.put) {
      w.vValue = cacheWriteValue(w.rope, w.put, p);
      if (!w.vValue)
        return bad(p, k,
                   "a v write in a rope_cache_write kernel uses the k write's "
                   "index tensor and cache type and writes a value of k's shape "
                   "with k's layout");
      w.v = p;
    }
  w.emitAt = k.ops.back();
  SmallVector<Operation *, 4> members = w.members();
  for (Operation *m : llvm::drop_begin(members)) // the k RoPE: only its views read it
    if (m != w.emitAt)
      if (absl::Status st = usedOnlyAfter(m, w.emitAt, k); !st.ok())
        return st;
  int id = plan.ropeCacheWrites.size();
  for (Operation *m : w.members())
    plan.ropeCacheWriteOf[m] = id;
  plan.ropeCacheWrites.push_back(w);
  return absl::OkStatus();
}

// attention + attention_logsumexp of the same operands => one launch.
absl::Status Reader::attentionStats(const Annotated &k) {
  AttentionOp attention;
  AttentionLogSumExpOp stats;
  for (Operation *op : k.ops) {
    if (auto a = dyn_cast<AttentionOp>(op); a && !attention)
      attention = a;
    else if (auto s = dyn_cast<AttentionLogSumExpOp>(op); s && !stats)
      stats = s;
  }
  if (k.ops.size() != 2 || !attention || !stats)
    return bad(k.ops.front(), k,
               "an attention_stats kernel is one llm.attention and one "
               "llm.attention_logsumexp");
  for (Operation *op : k.ops)
    if (prepared.contains(op))
      return bad(op, k, "parameter-preparation work is never an attention_stats kernel");
  if (!attentionStatsPair(attention, stats))
    return bad(stats, k,
               "it does not share the attention's query, key, causal and scale, "
               "or one of them has a mask or kv_len, key and value are not NHD, "
               "the types are not one of bf16/f16 with a head dim that is a "
               "multiple of 16 up to 256, or the earlier op is used before the "
               "later one");
  int id = plan.attentionStats.size();
  plan.attentionStats.push_back({attention, stats, k.ops.back()});
  plan.attentionStatsOf[attention] = id;
  plan.attentionStatsOf[stats] = id;
  return absl::OkStatus();
}

// Row reductions with their elementwise ops => one row kernel.
absl::Status Reader::rowReduction(const Annotated &k) {
  if (auto problem = rowKernelProblem(k.ops, prepared))
    return bad(problem->first, k, problem->second);
  int id = plan.rowGroups.size();
  for (Operation *op : k.ops)
    plan.rowGroupOf[op] = id;
  plan.rowGroups.emplace_back(k.ops.begin(), k.ops.end());
  return absl::OkStatus();
}

absl::StatusOr<KernelPlan> Reader::read() {
  Block &body = fn.getBody().front();
  std::map<int64_t, Annotated> kernels;
  for (Operation &op : body) {
    Attribute attr = op.getAttr(kKernelAttr);
    if (!attr)
      continue;
    auto dict = dyn_cast<DictionaryAttr>(attr);
    auto group = dict ? dict.getAs<IntegerAttr>("group") : nullptr;
    auto kind = dict ? dict.getAs<StringAttr>("kind") : nullptr;
    if (!group || !group.getType().isSignlessInteger(64) || !kind || dict.size() != 2)
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: ", describeOp(&op), " has ", kKernelAttr.str(), " = ",
          printAttribute(attr), "; expected {group = <integer>, kind = <string>}"));
    Annotated &k = kernels[group.getInt()];
    if (k.ops.empty()) {
      k.group = group.getInt();
      k.kind = kind.getValue();
    } else if (k.kind != kind.getValue()) {
      return bad(&op, k,
                 absl::StrCat("it is annotated kind \"", kind.getValue().str(),
                              "\""));
    }
    k.ops.push_back(&op);
  }
  for (auto &[id, k] : kernels) {
    absl::Status st;
    if (k.kind == "residual_norm")
      st = residualNorm(k);
    else if (k.kind == "elementwise")
      st = elementwise(k);
    else if (k.kind == "multi_gemv")
      st = multiGemv(k);
    else if (k.kind == "swiglu_gemv")
      st = swiGluGemv(k);
    else if (k.kind == "rope_cache_write")
      st = ropeCacheWrite(k);
    else if (k.kind == "attention_stats")
      st = attentionStats(k);
    else if (k.kind == "row_reduction")
      st = rowReduction(k);
    else
      st = bad(k.ops.front(), k,
               "that kind is none of residual_norm, elementwise, multi_gemv, "
               "swiglu_gemv, rope_cache_write, attention_stats and row_reduction");
    if (!st.ok())
      return st;
  }
  // Every other elementwise op (not a residual add) is a kernel of its own.
  llvm::DenseMap<int64_t, int> groupIndex;
  for (Operation &op : body) {
    if (!isElementwise(&op) || plan.fusedIntoNorm.contains(&op) ||
        plan.rowGroupOf.count(&op))
      continue;
    int index;
    auto it = elementwiseKernelOf.find(&op);
    if (it == elementwiseKernelOf.end() || !groupIndex.count(it->second)) {
      index = plan.groups.size();
      plan.groups.emplace_back();
      if (it != elementwiseKernelOf.end())
        groupIndex[it->second] = index;
    } else {
      index = groupIndex[it->second];
    }
    plan.groups[index].push_back(&op);
    plan.groupOf[&op] = index;
  }
  return std::move(plan);
}

absl::StatusOr<KernelPlan>
llmc::decidedKernelPlan(func::FuncOp fn, const LowerOptions &options,
                        const llvm::DenseSet<Operation *> &prepared) {
  if (!fn->hasAttr(kKernelsFormedAttr))
    return planKernels(fn, options, prepared);
  return Reader(fn, prepared).read();
}
