//===- LowerRoPE.cpp - rotary position embedding --------------------------===//
//
// llm.rope: from cos/sin tables (shared over the batch or one per batch)
// or from theta and a position offset (Su et al., RoFormer, 2021).
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// The kernel arguments after `out` of the table form: x, cos, sin, batch,
/// seq, table_batch_stride. cos/sin [S, D] or [Bt, S, D] (Bt in {1, B}) are
/// read with batch stride 0 unless there is one table per batch; tables
/// broadcast over the batch (llm.broadcast of one [S, D] table) are read
/// from the broadcast's input with stride 0 rather than materialized.
static std::vector<KernelArg> ropeTableArgs(RoPEOp o, Lowering &l) {
  auto t = tensorType(o.getInput());
  int64_t batch = t.getDimSize(0), seq = t.getDimSize(1), headDim = t.getDimSize(3);
  Value cos = o.getCos(), sin = o.getSin();
  auto ct = tensorType(cos);
  bool perBatch = ct.getRank() == 3 && ct.getDimSize(0) != 1;
  auto sharedTable = [&](Value v) -> Value {
    auto b = v.getDefiningOp<BroadcastOp>();
    if (!b)
      return Value();
    // [..., 1, S, D]: only leading unit dims are broadcast.
    ArrayRef<int64_t> in = tensorType(b.getInput()).getShape();
    auto isOne = [](int64_t d) { return d == 1; };
    if (in.size() < 2 || in[in.size() - 2] != seq || in.back() != headDim ||
        !llvm::all_of(in.drop_back(2), isOne))
      return Value();
    return b.getInput();
  };
  if (Value c1 = sharedTable(cos), s1 = sharedTable(sin); c1 && s1) {
    cos = c1;
    sin = s1;
    perBatch = false;
  }
  return {l.ptrArg(o.getInput()), l.ptrArg(cos), l.ptrArg(sin), i64Arg(batch),
          i64Arg(seq), i64Arg(perBatch ? seq * headDim : 0)};
}

/// rope(x, cos, sin) or rope(x, offset) => one kernel.
static absl::Status lowerRoPE(RoPEOp o, Lowering &l) {
  auto t = tensorType(o.getInput());
  if (o.getCos()) {
    cu::RoPETableConfig cfg;
    cfg.dtype = scalarOf(o.getInput());
    cfg.table = scalarOf(o.getCos());
    cfg.num_heads = t.getDimSize(2);
    cfg.head_dim = t.getDimSize(3);
    cfg.interleaved = o.getMode() == RopeMode::interleaved;
    std::vector<KernelArg> args = {l.ptrArg(o.getResult())};
    llvm::append_range(args, ropeTableArgs(o, l));
    return l.launchGenerated(cu::EmitRoPETable(cfg),
                             cu::RoPETableLaunch(cfg, t.getDimSize(0), t.getDimSize(1)),
                             args, o);
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
    cfg.offset =
        perBatch
            ? (i32 ? cu::PositionSource::kPerBatchI32 : cu::PositionSource::kPerBatchI64)
            : (i32 ? cu::PositionSource::kScalarI32 : cu::PositionSource::kScalarI64);
  }
  std::vector<KernelArg> args = {l.ptrArg(o.getResult()), l.ptrArg(o.getInput()),
                                 o.getOffset() ? l.ptrArg(o.getOffset()) : nullArg(),
                                 i64Arg(t.getDimSize(0)), i64Arg(t.getDimSize(1))};
  return l.launchGenerated(
      cu::EmitRoPE(cfg), cu::RoPELaunch(cfg, t.getDimSize(0), t.getDimSize(1)), args, o);
}

/// index_put(cache, idx, views(rope(x, cos, sin))) => [copy of the cache
/// unless written in place,] one RoPE kernel storing into the cache rows.
absl::Status lowerRopeCacheWrite(const RopeCacheWrite &w, Lowering &l) {
  RoPEOp rope = w.rope;
  IndexPutOp put = w.put;
  cu::RoPETableConfig cfg;
  RopeCacheWriteLayout layout;
  if (!ropeCacheWriteConfig(rope, put, &cfg, &layout))
    return unsupported(put, "a RoPE + KV-cache write the kernel does not take");
  if (!updatesInPlace(put))
    if (absl::Status st = l.emitCopyInto(put.getResult(), put.getBase(), put); !st.ok())
      return st;
  IndexPutOp putV = w.v;
  if (putV && !updatesInPlace(putV))
    if (absl::Status st = l.emitCopyInto(putV.getResult(), putV.getBase(), putV); !st.ok())
      return st;
  auto t = tensorType(rope.getInput());
  std::vector<KernelArg> args = {l.ptrArg(put.getResult())};
  llvm::append_range(args, ropeTableArgs(rope, l));
  llvm::append_range(args, std::vector<KernelArg>{
                               l.ptrArg(put.getIndices()), i64Arg(layout.rows),
                               i64Arg(layout.out_b), i64Arg(layout.out_row),
                               i64Arg(layout.out_h)});
  if (RoPEOp q = w.q) {
    cfg.q_heads = tensorType(q.getInput()).getDimSize(2);
    args.push_back(l.ptrArg(q.getResult()));
    args.push_back(l.ptrArg(q.getInput()));
  }
  if (putV) {
    cfg.v_write = true;
    args.push_back(l.ptrArg(putV.getResult()));
    args.push_back(l.ptrArg(w.vValue));
  }
  return l.launchGenerated(cu::EmitRoPETable(cfg),
                           cu::RoPETableLaunch(cfg, t.getDimSize(0), t.getDimSize(1)),
                           args, w.emitAt);
}

void populateRoPELowerings(OpLoweringSet &set) { set.add<RoPEOp>(lowerRoPE); }

} // namespace llmc::codegen
