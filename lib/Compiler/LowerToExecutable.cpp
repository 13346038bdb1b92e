//===- LowerToExecutable.cpp - llm function -> exec IR -> Executable -------===//
//
// Codegen for the CUDA backend. Walks a shape-specialized function once,
// building its exec.executable (ExecBuilder.h):
//
//  1. Views. `llm.reshape` (and collectives over a group of one) alias their
//     input's storage; `llm.broadcast` is a strided view read by elementwise
//     kernels (materialized only for other consumers).
//  2. Fusion. Elementwise ops whose producer is elementwise and used once are
//     grouped into one kernel (an elementwise program); a residual `llm.add`
//     feeding an RMSNorm/LayerNorm becomes the norm kernel's prologue (it
//     writes the sum too); a `bias` operand becomes the cuBLASLt epilogue.
//  3. Storage. Function results are written in place into the output
//     buffers; every other value lives in one arena: the lowering records
//     each arena buffer's liveness interval, and llmc-plan-arena places
//     them on the exec IR (first fit over 128-byte aligned blocks, reuse of
//     dead blocks; dialects/Exec/Transforms/PlanArena.cpp).
//  4. Launches, in program order: generated kernels (lib/Target/CUDA),
//     cuBLASLt GEMMs, copies, NCCL collectives.
//  5. Parameter preparation. Work that depends on parameters only
//     (llm::parameterArguments: casts, fp8 scaling and quantization, pads,
//     weight-only quantization, materialized slices, the fp8 GEMMs' [n,k]
//     relayouts of weights) is emitted into the `exec.prepare` region, the
//     front of the launch sequence, which the runtime runs once per
//     parameter set (rt::ParameterGuard). Values of that segment read by the
//     per-call launches (the frontier) live in Persistent buffers; the
//     segment's own intermediates are arena scratch that the per-call
//     launches reuse. Lazy views of parameters stay views unless a consumer
//     needs dense storage.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"
#include "llmc/runtime/KernelCompiler.h"

#include "Exec/Transforms/Passes.h"
#include "llmc/Target/Executable/TranslateToExecutable.h"
#include "mlir/Pass/PassManager.h"

using namespace mlir;
using namespace llmc;

namespace llmc::codegen {

absl::Status Lowering::checkStatic() {
  if (fn.isExternal())
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: @", fn.getSymName().str(),
        " is a declaration (no body) and cannot be compiled"));
  for (BlockArgument arg : fn.getArguments()) {
    auto t = dyn_cast<RankedTensorType>(arg.getType());
    if (!t)
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: argument ", arg.getArgNumber(), " of @",
          fn.getSymName().str(), " has type ", typeName(arg.getType()),
          "; llmc functions take ranked tensors (use tensor<...> even for "
          "scalars)"));
    if (!t.hasStaticShape())
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: argument ", arg.getArgNumber(), " of @",
          fn.getSymName().str(),
          " has a dynamic shape; specialize shapes first "
          "(--llmc-specialize-shapes or llmc-run --shape)"));
    if (absl::Status st = checkTensorSize(
            absl::StrCat("argument ", arg.getArgNumber(), " of @", fn.getSymName().str()), t);
        !st.ok())
      return st;
  }
  for (Operation &op : fn.getBody().front())
    for (Value r : op.getResults()) {
      auto t = dyn_cast<RankedTensorType>(r.getType());
      if (!t)
        return absl::UnimplementedError(absl::StrCat(
            "cuda backend: ", describe(&op), " produces ", typeName(r.getType()),
            "; only ranked tensor values are supported"));
      if (!t.hasStaticShape())
        return absl::InvalidArgumentError(absl::StrCat(
            "cuda backend: ", describe(&op), " has a result of dynamic shape"));
      if (absl::Status st = checkTensorSize(describe(&op), t); !st.ok())
        return st;
    }
  return absl::OkStatus();
}

/// The parameter-preparation segment: the ops llmc-hoist-parameter-work
/// marked (checked: a mark that would hoist per-call work is an error), or,
/// for a function it did not plan, the same rule's choice
/// (llm::decidedParameterPreparationOps). The parameters these ops read are
/// marked `parameter` for the runtime's guard (and any other input a
/// preparation launch reads, by the ExecBuilder).
absl::Status Lowering::planHoisting() {
  if (!options.hoist_parameter_work)
    return absl::OkStatus();
  SmallVector<bool> params = llm::parameterArguments(fn);
  for (BlockArgument arg : fn.getArguments())
    if (params[arg.getArgNumber()])
      parameterDerived.insert(arg);
  std::string error;
  FailureOr<SmallVector<Operation *>> ops =
      llm::decidedParameterPreparationOps(fn, error);
  if (failed(ops))
    return absl::InvalidArgumentError("cuda backend: " + error);
  for (Operation *op : *ops) {
    hoisted.insert(op);
    for (Value r : op->getResults())
      parameterDerived.insert(r);
    for (Value o : op->getOperands())
      if (auto arg = dyn_cast<BlockArgument>(o))
        builder.markParameter(arg.getArgNumber());
  }
  return absl::OkStatus();
}

/// The preparation's liveness steps are shifted before every per-call step
/// (the op count plus one): its scratch may overlap any per-call buffer.
static int64_t prepStepShift(func::FuncOp fn) {
  return fn.isExternal() ? 0
                         : static_cast<int64_t>(fn.getBody().front().getOperations().size()) + 1;
}

Lowering::Lowering(func::FuncOp fn, const LowerOptions &options, MLIRContext &context)
    : fn(fn), options(options), builder(context, fn.getSymName(), prepStepShift(fn)) {}

/// `op`'s launches: none for views, constants and ops whose kernel another
/// op emits; the kernel of a group llmc-form-kernels formed at its last op;
/// else the conversion pattern of its op type.
absl::Status Lowering::emitOp(Operation *op, const OpLoweringSet &patterns) {
  // Results with no elements need no launch.
  if (op->getNumResults() > 0 && llvm::all_of(op->getResults(), [](Value r) {
        auto t = dyn_cast<RankedTensorType>(r.getType());
        return t && t.getNumElements() == 0;
      }))
    return absl::OkStatus();
  if (isa<ViewLikeOpInterface, ConstantOp, arith::ConstantOp>(op))
    return absl::OkStatus(); // views and constants: no launch of their own
  if (kernelPlan.fusedIntoNorm.contains(op))
    return absl::OkStatus(); // the norm's kernel adds it
  if (auto it = kernelPlan.gemvGroupOf.find(op); it != kernelPlan.gemvGroupOf.end()) {
    const GemvGroup &group = kernelPlan.gemvGroups[it->second];
    return op == group.emitAt ? lowerGemvGroup(group, *this) : absl::OkStatus();
  }
  if (auto it = kernelPlan.ropeCacheWriteOf.find(op);
      it != kernelPlan.ropeCacheWriteOf.end()) {
    const RopeCacheWrite &w = kernelPlan.ropeCacheWrites[it->second];
    return op == w.emitAt ? lowerRopeCacheWrite(w, *this) : absl::OkStatus();
  }
  if (auto it = kernelPlan.attentionStatsOf.find(op);
      it != kernelPlan.attentionStatsOf.end()) {
    const AttentionStats &a = kernelPlan.attentionStats[it->second];
    return op == a.emitAt ? lowerAttentionStats(a, *this) : absl::OkStatus();
  }
  if (auto it = kernelPlan.rowGroupOf.find(op); it != kernelPlan.rowGroupOf.end()) {
    ArrayRef<Operation *> group = kernelPlan.rowGroups[it->second];
    return op == group.back() ? lowerRowGroup(group, *this) : absl::OkStatus();
  }
  if (isElementwise(op)) {
    auto &group = kernelPlan.groups[kernelPlan.groupOf[op]];
    if (group.back() != op)
      return absl::OkStatus(); // emitted with the group's last op
    return lowerElementwiseGroup(group, *this);
  }
  if (const OpLoweringSet::Fn *pattern = patterns.lookup(op))
    return (*pattern)(op, *this);
  return unsupported(op, "no CUDA lowering for this op");
}

absl::StatusOr<OwningOpRef<exec::ExecutableOp>> Lowering::run() {
  if (auto st = checkStatic(); !st.ok())
    return st;
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());

  // Signature.
  for (BlockArgument arg : fn.getArguments()) {
    auto dtype = toDType(tensorType(arg).getElementType());
    if (!dtype.ok())
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: argument ", arg.getArgNumber(), ": ",
          dtype.status().message()));
    // The runtime's signatures and the C API hold rank <= 8.
    if (tensorType(arg).getRank() > rt::kMaxTensorRank)
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: argument ", arg.getArgNumber(), " has rank ",
          tensorType(arg).getRank(), "; executables take tensors of rank at most ",
          rt::kMaxTensorRank));
    builder.addInput(absl::StrCat("arg", arg.getArgNumber()), tensorType(arg).getShape(),
                 *dtype);
    buffers[arg] = builder.addIOBuffer(exec::BufferKind::input, arg.getArgNumber());
  }
  // Results: a value computed here is written straight into its output buffer.
  std::vector<std::pair<Value, int>> copies; // (value, output index)
  std::vector<Value> viewResults;              // storage roots that are views
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto dtype = toDType(tensorType(v).getElementType());
    if (!dtype.ok())
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: result ", i, ": ", dtype.status().message()));
    if (tensorType(v).getRank() > rt::kMaxTensorRank)
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: result ", i, " has rank ", tensorType(v).getRank(),
          "; executables return tensors of rank at most ", rt::kMaxTensorRank));
    builder.addOutput(absl::StrCat("result", i), tensorType(v).getShape(), *dtype);
    // A result whose storage is a lazy view (a broadcast/transpose/slice,
    // possibly seen through reshapes, as in GQA's repeat_kv:
    // reshape(broadcast(reshape(k)))) is materialized straight into its
    // output buffer after the last op; nothing else would ever write it.
    Value root = storageRoot(v);
    Operation *rootDef = root.getDefiningOp();
    bool computed = rootDef && !matchPattern(root, m_Constant()) && !buffers.count(root);
    if (computed && !outputIndex.count(root)) {
      outputIndex[root] = i;
      if (isa<StridedViewOpInterface>(rootDef))
        viewResults.push_back(root);
    } else {
      copies.push_back({v, static_cast<int>(i)});
    }
  }

  if (absl::Status st = planHoisting(); !st.ok())
    return st;
  absl::StatusOr<KernelPlan> plan = decidedKernelPlan(fn, options, hoisted);
  if (!plan.ok())
    return plan.status();
  kernelPlan = std::move(*plan);
  absl::StatusOr<KernelConfigs> configs = decidedKernelConfigs(fn, options);
  if (!configs.ok())
    return configs.status();
  kernelConfigs = std::move(*configs);
  // Results a donated argument's buffer holds (llm.aliasing_output), where
  // the kernel computing them may write there: that kernel writes the
  // input buffer, and the output is a copy from it (skipped when the
  // caller passes the input as the output, as alias_input tells it to).
  for (auto [k, arg] : inPlaceResults(fn, kernelPlan, hoisted)) {
    Value root = ret.getOperand(k);
    auto it = outputIndex.find(root);
    if (it == outputIndex.end() || it->second != static_cast<int>(k))
      continue;
    outputIndex.erase(it);
    buffers[root] = buffers[arg];
    inPlaceArg[root] = arg;
    copies.push_back({root, static_cast<int>(k)});
  }

  // Liveness in units of ops (program order); each value's storage root is
  // live from its definition to its last (transitive, through views) use.
  int index = 0;
  llvm::DenseMap<Operation *, int> opIndex;
  for (Operation &op : body)
    opIndex[&op] = index++;
  // A use of a view (broadcast/transpose/slice), also through reshapes, reads
  // the view's source when the consumer runs (fused strided read or a lazy
  // copy right before it): the source stays live until then.
  std::function<void(Value, int)> touch = [&](Value v, int at) {
    Value root = storageRoot(v);
    lastUseStep[root] = std::max(lastUseStep.lookup(root), at);
    if (auto view = root.getDefiningOp<StridedViewOpInterface>())
      touch(cast<ViewLikeOpInterface>(view.getOperation()).getViewSource(), at);
  };
  for (Operation &op : body) {
    int at = opIndex[&op];
    for (Value r : op.getResults())
      if (!defStep.count(storageRoot(r)))
        defStep[storageRoot(r)] = at;
    for (Value operand : op.getOperands())
      touch(operand, at);
    // A fused group reads its external inputs when its last op runs.
    if (isElementwise(&op) && kernelPlan.groupOf.count(&op)) {
      int last = opIndex[kernelPlan.groups[kernelPlan.groupOf[&op]].back()];
      for (Value operand : op.getOperands())
        touch(operand, last);
      for (Value r : op.getResults())
        if (defStep[storageRoot(r)] > last || defStep[storageRoot(r)] == at)
          defStep[storageRoot(r)] = std::min(defStep[storageRoot(r)], at);
    }
    // A row kernel reads its external inputs at its last member.
    if (auto it = kernelPlan.rowGroupOf.find(&op); it != kernelPlan.rowGroupOf.end())
      for (Value operand : op.getOperands())
        touch(operand, opIndex[kernelPlan.rowGroups[it->second].back()]);
    // A fused GEMV group reads its members' operands when it is emitted.
    if (auto it = kernelPlan.gemvGroupOf.find(&op); it != kernelPlan.gemvGroupOf.end() && isa<MatmulOp>(op))
      for (Value operand : op.getOperands())
        touch(operand, opIndex[kernelPlan.gemvGroups[it->second].emitAt]);
    // A RoPE + KV-cache write (with its step's q and v) reads every
    // member's operands when it runs, at its last member.
    if (auto it = kernelPlan.ropeCacheWriteOf.find(&op); it != kernelPlan.ropeCacheWriteOf.end()) {
      const RopeCacheWrite &w = kernelPlan.ropeCacheWrites[it->second];
      for (Value operand : op.getOperands())
        touch(operand, opIndex[w.emitAt]);
      if (w.v && &op == w.v.operator->())
        touch(w.vValue, opIndex[w.emitAt]);
    }
    // An attention with its statistics reads both ops' operands at the later.
    if (auto it = kernelPlan.attentionStatsOf.find(&op); it != kernelPlan.attentionStatsOf.end())
      for (Value operand : op.getOperands())
        touch(operand, opIndex[kernelPlan.attentionStats[it->second].emitAt]);
    // The fused residual add's sum is written by the norm.
    if (auto add = dyn_cast<AddOp>(&op); add && kernelPlan.fusedIntoNorm.contains(add))
      for (Operation *user : add->getUsers())
        touch(add.getLhs(), opIndex[user]), touch(add.getRhs(), opIndex[user]);
  }

  // Runs `emit` (launches for `op`): its status (a kernel generator's
  // rejection already names `op`, see generated()), else the first error of
  // the lazy materializations (view copies, constants) that `emit` caused.
  auto guarded = [&](Operation *op, llvm::function_ref<absl::Status()> emit) {
    llvm::SaveAndRestore<Operation *> restore(emitting, op);
    absl::Status st = emit();
    for (absl::Status &m : materializeErrors)
      if (st.ok() && !m.ok())
        st = m;
    materializeErrors.clear();
    return st;
  };
  OpLoweringSet patterns;
  populateAttentionLowerings(patterns);
  populateCollectiveLowerings(patterns);
  populateDataMovementLowerings(patterns);
  populateKVCacheLowerings(patterns);
  populateMatmulLowerings(patterns);
  populateNormLowerings(patterns);
  populateRandomLowerings(patterns);
  populateReductionLowerings(patterns);
  populateRoPELowerings(patterns);
  populateWeightOnlyLowerings(patterns);
  for (Operation &op : body) {
    if (isa<func::ReturnOp>(op))
      continue;
    step = opIndex[&op];
    Preparing scope(builder, hoisted.contains(&op));
    absl::Status st = guarded(&op, [&] { return emitOp(&op, patterns); });
    if (!st.ok())
      return st;
  }
  // Run at the return's step: the sources of views and copies are live up to
  // and including it, so the arena never places the new buffers over them.
  step = opIndex[ret];
  for (Value root : viewResults) {
    if (buffers.count(root))
      continue; // a consumer already materialized it into the output
    if (absl::Status st = guarded(root.getDefiningOp(), [&] {
          bufferFor(root);
          return absl::OkStatus();
        });
        !st.ok())
      return st;
  }
  // Results that are inputs, constants or duplicates: copy.
  for (auto [v, i] : copies) {
    int id = builder.addIOBuffer(exec::BufferKind::output, i);
    // A donated argument returned through views holds the result after the
    // call when it has the result's type (a reshape to another shape does
    // not: the result is then a copy only).
    if (auto arg = dyn_cast<BlockArgument>(storageRoot(v));
        arg && arg != v && fn.getArgAttr(arg.getArgNumber(), "llm.donate") &&
        arg.getType() == v.getType())
      builder.setAliasInput(i, arg.getArgNumber());
    else if (auto in = inPlaceArg.find(v);
             in != inPlaceArg.end() &&
             fn.getArgAttrOfType<IntegerAttr>(in->second.getArgNumber(), "llm.aliasing_output")
                     .getInt() == static_cast<int64_t>(i))
      builder.setAliasInput(i, in->second.getArgNumber());
    if (absl::Status st = guarded(ret, [&, v = v] { return emitCopyToBuffer(id, v, ret); });
        !st.ok())
      return st;
  }
  return builder.finish();
}

} // namespace llmc::codegen

using namespace llmc::codegen;

absl::StatusOr<AttentionBackend>
llmc::ParseAttentionBackend(const std::string &name) {
  if (name == "auto")
    return AttentionBackend::kAuto;
  if (name == "llmc")
    return AttentionBackend::kLlmc;
  if (name == "cudnn")
    return AttentionBackend::kCudnn;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown attention backend '", name, "' (expected auto, llmc or cudnn)"));
}

int llmc::ComputeCapabilityOfArch(const std::string &arch) {
  // One rule for what an arch name is (rt::IsValidArch); here only its digits.
  if (!rt::IsValidArch(arch))
    return 0;
  llvm::StringRef digits(arch);
  if (!digits.consume_front("sm_") && !digits.consume_front("compute_"))
    return 0;
  if (!digits.consume_back("a"))
    digits.consume_back("f");
  int cc = 0;
  if (digits.size() < 2 || digits.getAsInteger(10, cc))
    return 0;
  return cc;
}

std::string llmc::UnsupportedArchReason(const std::string &arch) {
  int cc = ComputeCapabilityOfArch(arch);
  if (cc <= 0 || cc >= kMinComputeCapability)
    return "";
  return absl::StrCat(arch, ": llmc's kernels need sm_", kMinComputeCapability,
                      " or newer (bf16, cp.async, mma.sync); give sm_80, sm_89 or sm_90a");
}

/// What the exec IR of one lowering holds, for reports: launches by kind
/// (the preparation's apart), kernels, arena and persistent bytes.
static void collectStats(func::FuncOp fn, exec::ExecutableOp exe, LowerStats &stats) {
  stats = LowerStats();
  for (Operation &op : fn.getBody().front())
    stats.num_ops += isa<LLMDialect>(op.getDialect());
  for (Operation &op : exe.getBody().front()) {
    if (auto prep = dyn_cast<exec::PrepareOp>(op)) {
      stats.num_prepare_launches += prep.getBody().front().getOperations().size();
      continue;
    }
    stats.num_kernel_launches += isa<exec::LaunchOp>(op);
    stats.num_copies += isa<exec::CopyOp>(op);
    stats.num_gemms += isa<exec::GemmOp>(op);
    stats.num_distinct_kernels += isa<exec::KernelOp>(op);
    if (auto buffer = dyn_cast<exec::BufferOp>(op)) {
      if (buffer.getKind() == exec::BufferKind::arena)
        stats.intermediate_bytes += buffer.getBytes();
      if (buffer.getKind() == exec::BufferKind::persistent)
        stats.persistent_bytes += buffer.getBytes();
    }
  }
  stats.arena_bytes = exe.getArenaBytes().value_or(0);
}

/// The lowering's exec IR in `context`, its arena planned by llmc-plan-arena.
absl::StatusOr<OwningOpRef<exec::ExecutableOp>>
llmc::LowerToExecIR(func::FuncOp fn, MLIRContext &context, const LowerOptions &options,
                    LowerStats *stats,
                    const std::function<LogicalResult(PassManager &)> &setup) {
  absl::StatusOr<OwningOpRef<exec::ExecutableOp>> op =
      Lowering(fn, options, context).run();
  if (!op.ok())
    return op.status();
  PassManager pm(&context, exec::ExecutableOp::getOperationName());
  pm.addPass(exec::createPlanArenaPass({options.arena_alignment}));
  if (setup && failed(setup(pm)))
    return absl::InvalidArgumentError(
        "the pass-manager options do not apply to the execution-level passes");
  std::string diagnostics;
  ScopedDiagnosticHandler capture(&context, [&](Diagnostic &d) {
    llvm::raw_string_ostream(diagnostics) << d << "\n";
    return success();
  });
  if (failed(pm.run(**op)))
    return absl::InternalError(absl::StrCat(
        "llmc internal error (please report): llmc-plan-arena failed: ", diagnostics));
  if (stats)
    collectStats(fn, **op, *stats);
  return op;
}

absl::StatusOr<rt::Executable>
llmc::LowerToExecutable(func::FuncOp fn, const LowerOptions &options, LowerStats *stats,
                        const std::function<LogicalResult(PassManager &)> &setup) {
  // A context of its own: the exec IR (kernel sources, constants) is freed
  // with it, not kept in the caller's context for its lifetime.
  MLIRContext context(MLIRContext::Threading::DISABLED);
  absl::StatusOr<OwningOpRef<exec::ExecutableOp>> op =
      LowerToExecIR(fn, context, options, stats, setup);
  if (!op.ok())
    return op.status();
  absl::StatusOr<rt::Executable> exe = translateToExecutable(**op);
  if (!exe.ok())
    return absl::InternalError(absl::StrCat(
        "llmc internal error (please report): ", exe.status().message()));
  if (auto st = exe->Validate(); !st.ok())
    return absl::InternalError(absl::StrCat(
        "llmc internal error (please report): lowering produced an invalid "
        "executable: ",
        st.message()));
  return exe;
}
