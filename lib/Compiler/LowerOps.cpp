//===- LowerOps.cpp - per-op dispatch and norms -----------------------------===//

#include "Lowering.h"

namespace llmc::codegen {

absl::Status Lowering::emitNorm(Operation *op) {
  Value x = op->getOperand(0);
  Value out = op->getResult(0);
  auto add = x.getDefiningOp<AddOp>();
  bool fused = add && kernelPlan.fusedIntoNorm.contains(add);
  int64_t hidden = tensorType(x).getShape().back();
  int64_t rows = numElements(x) / std::max<int64_t>(hidden, 1);
  std::vector<KernelArg> args = {ptrArg(out)};
  if (fused)
    args.push_back(ptrArg(add.getResult()));
  if (fused) {
    args.push_back(ptrArg(add.getLhs()));
    args.push_back(ptrArg(add.getRhs()));
  } else {
    args.push_back(ptrArg(x));
  }
  if (auto rms = dyn_cast<RMSNormOp>(op)) {
    cu::RMSNormConfig cfg;
    cfg.in = scalarOf(x);
    cfg.weight = scalarOf(rms.getWeight());
    cfg.out = scalarOf(out);
    cfg.hidden = hidden;
    cfg.eps = static_cast<float>(rms.getEps().convertToDouble());
    cfg.fused_residual = fused;
    args.push_back(ptrArg(rms.getWeight()));
    args.push_back(i64Arg(rows));
    LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                          generated(cu::RMSNormLaunch(cfg, rows), op));
    LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                          generated(cu::EmitRMSNorm(cfg), op));
    launch(addKernel(code), dims, std::move(args), op);
    return absl::OkStatus();
  }
  auto ln = cast<LayerNormOp>(op);
  cu::LayerNormConfig cfg;
  cfg.in = scalarOf(x);
  cfg.weight = scalarOf(ln.getWeight());
  if (ln.getBias() && scalarOf(ln.getBias()) != cfg.weight)
    return unsupported(op, "bias and weight of different element types");
  cfg.out = scalarOf(out);
  cfg.hidden = hidden;
  cfg.eps = static_cast<float>(ln.getEps().convertToDouble());
  cfg.has_weight = true;
  cfg.has_bias = static_cast<bool>(ln.getBias());
  cfg.fused_residual = fused;
  args.push_back(ptrArg(ln.getWeight()));
  if (ln.getBias())
    args.push_back(ptrArg(ln.getBias()));
  args.push_back(i64Arg(rows));
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                        generated(cu::LayerNormLaunch(cfg, rows), op));
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                        generated(cu::EmitLayerNorm(cfg), op));
  launch(addKernel(code), dims, std::move(args), op);
  return absl::OkStatus();
}

absl::Status Lowering::emitOp(Operation *op) {
  // Results with no elements need no launch.
  if (op->getNumResults() > 0 && llvm::all_of(op->getResults(), [](Value r) {
        auto t = dyn_cast<RankedTensorType>(r.getType());
        return t && t.getNumElements() == 0;
      }))
    return absl::OkStatus();
  if (isa<ViewLikeOpInterface, ConstantOp, arith::ConstantOp>(op))
    return absl::OkStatus(); // views and constants: no launch of their own
  if (auto q = dyn_cast<QuantizeWeightOp>(op))
    return emitQuantizeWeight(q);
  if (auto d = dyn_cast<DequantizeWeightOp>(op))
    return emitDequantizeWeight(d);
  if (auto a = dyn_cast<AllReduceOp>(op); a && a.getGroupSize() == 1)
    return absl::OkStatus();
  if (kernelPlan.fusedIntoNorm.contains(op))
    return absl::OkStatus();
  if (auto it = kernelPlan.gemvGroupOf.find(op); it != kernelPlan.gemvGroupOf.end())
    return op == kernelPlan.gemvGroups[it->second].emitAt ? emitGemvGroup(kernelPlan.gemvGroups[it->second])
                                               : absl::OkStatus();
  if (isElementwise(op)) {
    auto &group = kernelPlan.groups[kernelPlan.groupOf[op]];
    if (group.back() != op)
      return absl::OkStatus(); // emitted with the group's last op
    return emitElementwiseGroup(group);
  }
  return llvm::TypeSwitch<Operation *, absl::Status>(op)
      .Case<RMSNormOp, LayerNormOp>([&](Operation *o) { return emitNorm(o); })
      .Case<MatmulOp>([&](MatmulOp o) { return emitMatmul(o); })
      .Case<AttentionOp>([&](AttentionOp o) { return emitAttention(o); })
      .Case<SoftmaxOp>([&](SoftmaxOp o) -> absl::Status {
        int64_t n = tensorType(o.getInput()).getShape().back();
        int64_t rows = numElements(o.getInput()) / std::max<int64_t>(n, 1);
        cu::SoftmaxConfig cfg;
        cfg.in = scalarOf(o.getInput());
        cfg.out = scalarOf(o.getResult());
        cfg.n = n;
        int64_t maskRows = 1;
        if (Value mask = o.getMask()) {
          // The kernel reads mask[row % mask_rows]: the mask must be dense
          // over its trailing dims and 1 over the leading ones.
          ArrayRef<int64_t> ms = tensorType(mask).getShape();
          ArrayRef<int64_t> xs = tensorType(o.getInput()).getShape();
          size_t lead = xs.size() - ms.size();
          size_t firstNonOne = 0;
          while (firstNonOne < ms.size() && ms[firstNonOne] == 1)
            ++firstNonOne;
          for (size_t i = firstNonOne; i < ms.size(); ++i)
            if (ms[i] != xs[lead + i])
              return unsupported(o, "a softmax mask broadcast inside its "
                                    "trailing dimensions");
          if (ms.empty() || ms.back() != n)
            return unsupported(o, "a softmax mask broadcast along the row");
          cfg.has_mask = true;
          cfg.mask = scalarOf(mask);
          maskRows = numElements(mask) / n;
        }
        float scale = o.getScale()
                          ? static_cast<float>(o.getScale()->convertToDouble())
                          : 1.f;
        std::vector<KernelArg> args = {
            ptrArg(o.getResult()), ptrArg(o.getInput()),
            o.getMask() ? ptrArg(o.getMask()) : nullArg(), f32Arg(scale),
            i64Arg(rows), i64Arg(maskRows)};
        LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                              generated(cu::SoftmaxLaunch(cfg, rows), o));
        LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                              generated(cu::EmitSoftmax(cfg), o));
        launch(addKernel(code), dims, std::move(args), o);
        return absl::OkStatus();
      })
      .Case<RoPEOp>([&](RoPEOp o) -> absl::Status {
        auto t = tensorType(o.getInput());
        if (Value cos = o.getCos()) {
          // Table form: cos/sin [S, D] or [Bt, S, D] (Bt in {1, B}), read
          // with batch stride 0 unless there is one table per batch.
          auto ct = tensorType(cos);
          cu::RoPETableConfig cfg;
          cfg.dtype = scalarOf(o.getInput());
          cfg.table = scalarOf(cos);
          cfg.num_heads = t.getDimSize(2);
          cfg.head_dim = t.getDimSize(3);
          cfg.interleaved = o.getMode() == RopeMode::interleaved;
          int64_t batch = t.getDimSize(0), seq = t.getDimSize(1);
          bool perBatch = ct.getRank() == 3 && ct.getDimSize(0) != 1;
          // Tables broadcast over the batch (llm.broadcast of one [S, D]
          // table) are read from the broadcast's input with stride 0 rather
          // than materialized.
          Value sin = o.getSin();
          auto sharedTable = [&](Value v) -> Value {
            auto b = v.getDefiningOp<BroadcastOp>();
            if (!b)
              return Value();
            // [..., 1, S, D]: only leading unit dims are broadcast.
            ArrayRef<int64_t> in = tensorType(b.getInput()).getShape();
            auto isOne = [](int64_t d) { return d == 1; };
            if (in.size() < 2 || in[in.size() - 2] != seq ||
                in.back() != cfg.head_dim ||
                !llvm::all_of(in.drop_back(2), isOne))
              return Value();
            return b.getInput();
          };
          if (Value c1 = sharedTable(cos), s1 = sharedTable(sin); c1 && s1) {
            cos = c1;
            sin = s1;
            perBatch = false;
          }
          std::vector<KernelArg> args = {
              ptrArg(o.getResult()), ptrArg(o.getInput()), ptrArg(cos),
              ptrArg(sin),           i64Arg(batch),        i64Arg(seq),
              i64Arg(perBatch ? seq * cfg.head_dim : 0)};
          LLMC_ASSIGN_OR_RETURN(
              cu::LaunchDims dims,
              generated(cu::RoPETableLaunch(cfg, batch, seq), o));
          LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                                generated(cu::EmitRoPETable(cfg), o));
          launch(addKernel(code), dims, std::move(args), o);
          return absl::OkStatus();
        }
        cu::RoPEConfig cfg;
        cfg.dtype = scalarOf(o.getInput());
        cfg.num_heads = t.getDimSize(2);
        cfg.head_dim = t.getDimSize(3);
        cfg.interleaved = o.getMode() == RopeMode::interleaved;
        cfg.theta = static_cast<float>(o.getTheta().convertToDouble());
        if (Value off = o.getOffset()) {
          bool i32 = tensorType(off).getElementType().isInteger(32);
          bool perBatch = tensorType(off).getRank() == 1;
          cfg.offset = perBatch ? (i32 ? cu::PositionSource::kPerBatchI32
                                       : cu::PositionSource::kPerBatchI64)
                                : (i32 ? cu::PositionSource::kScalarI32
                                       : cu::PositionSource::kScalarI64);
        }
        std::vector<KernelArg> args = {
            ptrArg(o.getResult()), ptrArg(o.getInput()),
            o.getOffset() ? ptrArg(o.getOffset()) : nullArg(),
            i64Arg(t.getDimSize(0)), i64Arg(t.getDimSize(1))};
        LLMC_ASSIGN_OR_RETURN(
            cu::LaunchDims dims,
            generated(cu::RoPELaunch(cfg, t.getDimSize(0), t.getDimSize(1)),
                      o));
        LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                              generated(cu::EmitRoPE(cfg), o));
        launch(addKernel(code), dims, std::move(args), o);
        return absl::OkStatus();
      })
      .Case<KVCacheAppendOp>([&](KVCacheAppendOp o) -> absl::Status {
        // Value semantics: result = cache with rows replaced. A donated cache
        // is updated in place; otherwise copy it into the result's storage
        // first, then write the new rows there.
        if (!updatesInPlace(o))
          if (auto st = emitCopyInto(o.getResult(), o.getCache(), o); !st.ok())
            return st;
        auto c = tensorType(o.getCache());
        auto u = tensorType(o.getUpdate());
        cu::KvAppendConfig cfg;
        cfg.dtype = scalarOf(o.getCache());
        cfg.heads_kv = c.getDimSize(2);
        cfg.head_dim = c.getDimSize(3);
        cfg.pos = tensorType(o.getPosition()).getElementType().isInteger(32)
                      ? cu::PositionSource::kScalarI32
                      : cu::PositionSource::kScalarI64;
        int err = newArenaBuffer(128, step, step);
        // The kernel appends K and V together; pass the same tensor twice.
        std::vector<KernelArg> args = {
            ptrArg(o.getResult()), ptrArg(o.getResult()), ptrArg(o.getUpdate()),
            ptrArg(o.getUpdate()), ptrArg(o.getPosition()), bufArg(err),
            i64Arg(c.getDimSize(0)), i64Arg(c.getDimSize(1)),
            i64Arg(u.getDimSize(1))};
        LLMC_ASSIGN_OR_RETURN(
            cu::LaunchDims dims,
            generated(cu::KvAppendLaunch(cfg, c.getDimSize(0), u.getDimSize(1)),
                      o));
        LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                              generated(cu::EmitKvAppend(cfg), o));
        launch(addKernel(code), dims, std::move(args), o);
        return absl::OkStatus();
      })
      .Case<GatherOp>([&](GatherOp o) -> absl::Status {
        auto table = tensorType(o.getTable());
        if (o.getAxis() != 0 || table.getRank() != 2)
          return unsupported(o, "gather other than rows of a rank-2 table");
        cu::GatherConfig cfg;
        cfg.dtype = scalarOf(o.getTable());
        cfg.index = scalarOf(o.getIndices());
        cfg.dim = table.getDimSize(1);
        int64_t count = numElements(o.getIndices());
        int err = newArenaBuffer(128, step, step);
        std::vector<KernelArg> args = {ptrArg(o.getResult()), ptrArg(o.getTable()),
                                     ptrArg(o.getIndices()), bufArg(err),
                                     i64Arg(count), i64Arg(table.getDimSize(0))};
        LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                              generated(cu::GatherLaunch(cfg, count), o));
        LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                              generated(cu::EmitGather(cfg), o));
        launch(addKernel(code), dims, std::move(args), o);
        return absl::OkStatus();
      })
      .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceMinOp>(
          [&](Operation *o) -> absl::Status {
            Value in = o->getOperand(0);
            auto t = tensorType(in);
            ArrayRef<int64_t> dims =
                cast<DenseI64ArrayAttr>(o->getAttr("dims")).asArrayRef();
            cu::ReduceKind kind = isa<ReduceSumOp>(o)    ? cu::ReduceKind::sum
                                  : isa<ReduceMeanOp>(o) ? cu::ReduceKind::mean
                                  : isa<ReduceMaxOp>(o)  ? cu::ReduceKind::max
                                                         : cu::ReduceKind::min;
            if (static_cast<int64_t>(dims.size()) == t.getRank() &&
                t.getRank() > 0) {
              cu::FullReduceConfig cfg;
              cfg.in = scalarOf(in);
              cfg.out = scalarOf(o->getResult(0));
              cfg.kind = kind;
              int64_t numel = numElements(in);
              LLMC_ASSIGN_OR_RETURN(cu::FullReduceKernels ks,
                                    generated(cu::EmitFullReduce(cfg), o));
              int partials = newArenaBuffer(
                  4 * int64_t(cu::FullReduceNumPartials(numel)), step, step);
              std::vector<KernelArg> args1 = {bufArg(partials), ptrArg(in),
                                            i64Arg(numel)};
              LLMC_ASSIGN_OR_RETURN(
                  cu::LaunchDims dims1,
                  generated(cu::FullReduceStage1Launch(cfg, numel), o));
              launch(addKernel(ks.stage1), dims1, std::move(args1), o);
              std::vector<KernelArg> args2 = {
                  ptrArg(o->getResult(0)), bufArg(partials),
                  i32Arg(cu::FullReduceNumPartials(numel)), i64Arg(numel)};
              LLMC_ASSIGN_OR_RETURN(
                  cu::LaunchDims dims2,
                  generated(cu::FullReduceStage2Launch(cfg, numel), o));
              launch(addKernel(ks.stage2), dims2, std::move(args2), o);
              return absl::OkStatus();
            }
            if (dims.size() != 1 || dims[0] != t.getRank() - 1)
              return unsupported(o, "reduction over dimensions other than the "
                                    "last one or all of them");
            cu::RowReduceConfig cfg;
            cfg.in = scalarOf(in);
            cfg.out = scalarOf(o->getResult(0));
            cfg.kind = kind;
            cfg.n = t.getShape().back();
            int64_t rows = numElements(in) / std::max<int64_t>(cfg.n, 1);
            std::vector<KernelArg> args = {ptrArg(o->getResult(0)), ptrArg(in),
                                         i64Arg(rows)};
            LLMC_ASSIGN_OR_RETURN(cu::LaunchDims grid,
                                  generated(cu::RowReduceLaunch(cfg, rows), o));
            LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                                  generated(cu::EmitRowReduce(cfg), o));
            launch(addKernel(code), grid, std::move(args), o);
            return absl::OkStatus();
          })
      .Case<ConcatOp>([&](ConcatOp o) -> absl::Status {
        // Concatenation along dim d is a sequence of block copies when every
        // dimension before d has size 1.
        auto t = tensorType(o.getResult());
        for (int64_t i = 0; i < static_cast<int64_t>(o.getDim()); ++i)
          if (t.getDimSize(i) != 1)
            return unsupported(o, "concat along an inner dimension");
        int64_t offset = 0;
        for (Value in : o.getInputs()) {
          BufferRef src{bufferFor(in), 0};
          builder.copy(src, {bufferFor(o.getResult()), offset}, byteSize(in), "llm.concat");
          offset += byteSize(in);
        }
        return absl::OkStatus();
      })
      .Case<AllReduceOp, AllGatherOp, ReduceScatterOp>(
          [&](Operation *o) -> absl::Status {
            rt::DType dtype = *toDType(tensorType(o->getOperand(0)).getElementType());
            exec::CollectiveKind kind;
            exec::Reduction reduction = exec::Reduction::sum;
            auto reductionOf = [](ReduceKind k) {
              return k == ReduceKind::sum ? exec::Reduction::sum : exec::Reduction::max;
            };
            int64_t count = numElements(o->getOperand(0));
            if (auto ar = dyn_cast<AllReduceOp>(o)) {
              kind = exec::CollectiveKind::all_reduce;
              reduction = reductionOf(ar.getKind());
            } else if (auto ag = dyn_cast<AllGatherOp>(o)) {
              auto t = tensorType(ag.getInput());
              for (int64_t i = 0; i < static_cast<int64_t>(ag.getDim()); ++i)
                if (t.getDimSize(i) != 1)
                  return unsupported(o, "all_gather along an inner dimension");
              kind = exec::CollectiveKind::all_gather;
            } else {
              auto rs = cast<ReduceScatterOp>(o);
              auto t = tensorType(rs.getInput());
              for (int64_t i = 0; i < static_cast<int64_t>(rs.getDim()); ++i)
                if (t.getDimSize(i) != 1)
                  return unsupported(o, "reduce_scatter along an inner dimension");
              kind = exec::CollectiveKind::reduce_scatter;
              reduction = reductionOf(rs.getKind());
              count = numElements(o->getResult(0));
            }
            BufferRef send{bufferFor(o->getOperand(0)), 0};
            BufferRef recv{bufferFor(o->getResult(0)), 0};
            builder.collective(kind, reduction, count, dtype, send, recv,
                               o->getName().getStringRef());
            return absl::OkStatus();
          })
      .Case<PadOp>([&](PadOp o) { return emitPad(o); })
      .Default([&](Operation *o) {
        return unsupported(o, "no CUDA lowering for this op");
      });
}

} // namespace llmc::codegen
