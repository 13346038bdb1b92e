//===- LowerRoPE.cpp - rotary position embedding --------------------------===//
//
// llm.rope: from cos/sin tables (shared over the batch or one per batch)
// or from theta and a position offset (Su et al., RoFormer, 2021).
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// rope(x, cos, sin) or rope(x, offset) => one kernel.
static absl::Status lowerRoPE(RoPEOp o, Lowering &l) {
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
      if (in.size() < 2 || in[in.size() - 2] != seq || in.back() != cfg.head_dim ||
          !llvm::all_of(in.drop_back(2), isOne))
        return Value();
      return b.getInput();
    };
    if (Value c1 = sharedTable(cos), s1 = sharedTable(sin); c1 && s1) {
      cos = c1;
      sin = s1;
      perBatch = false;
    }
    std::vector<KernelArg> args = {l.ptrArg(o.getResult()),
                                   l.ptrArg(o.getInput()),
                                   l.ptrArg(cos),
                                   l.ptrArg(sin),
                                   i64Arg(batch),
                                   i64Arg(seq),
                                   i64Arg(perBatch ? seq * cfg.head_dim : 0)};
    return l.launchGenerated(cu::EmitRoPETable(cfg), cu::RoPETableLaunch(cfg, batch, seq),
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

void populateRoPELowerings(OpLoweringSet &set) { set.add<RoPEOp>(lowerRoPE); }

} // namespace llmc::codegen
