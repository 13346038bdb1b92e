//===- LowerDataMovement.cpp - gather, index_put, concat, pad -------------===//
//
// Ops that move data: row gathers (embedding lookups), slices written or
// added at indices (index_put: KV-cache writes, embedding backward),
// concatenation along an outer dimension (copies) and zero padding.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// gather(table, indices) => one kernel. The table is viewed as [rows,
/// inner] around `axis` (the dimensions before it must have size 1): rows
/// of an embedding table, positions of a RoPE table or a causal mask.
static absl::Status lowerGather(GatherOp o, Lowering &l) {
  auto table = tensorType(o.getTable());
  int64_t axis = o.getAxis();
  for (int64_t i = 0; i < axis; ++i)
    if (table.getDimSize(i) != 1)
      return unsupported(o, "gather along an axis with a dimension of size > 1 before it");
  int64_t inner = 1;
  for (int64_t i = axis + 1; i < table.getRank(); ++i)
    inner *= table.getDimSize(i);
  if (table.getRank() < 2 || inner == 0)
    return unsupported(o, "gather of single elements (a table of rank 1 or empty rows)");
  cu::GatherConfig cfg;
  cfg.dtype = scalarOf(o.getTable());
  cfg.index = scalarOf(o.getIndices());
  cfg.dim = inner;
  int64_t count = numElements(o.getIndices());
  int err = l.newArenaBuffer(128, l.getStep(), l.getStep());
  std::vector<KernelArg> args = {
      l.ptrArg(o.getResult()), l.ptrArg(o.getTable()), l.ptrArg(o.getIndices()),
      l.bufArg(err),           i64Arg(count),          i64Arg(table.getDimSize(axis))};
  return l.launchGenerated(cu::EmitGather(cfg), cu::GatherLaunch(cfg, count), args, o);
}

/// concat(a, b, ...) along an outer dimension => one copy per input.
static absl::Status lowerConcat(ConcatOp o, Lowering &l) {
  // Concatenation along dim d is a sequence of block copies when every
  // dimension before d has size 1.
  auto t = tensorType(o.getResult());
  for (int64_t i = 0; i < static_cast<int64_t>(o.getDim()); ++i)
    if (t.getDimSize(i) != 1)
      return unsupported(o, "concat along an inner dimension");
  int64_t offset = 0;
  for (Value in : o.getInputs()) {
    BufferRef src = l.storageOf(in);
    BufferRef dst = l.storageOf(o.getResult());
    l.getBuilder().copy(src, {dst.buffer, dst.offset + offset}, byteSize(in),
                        "llm.concat");
    offset += byteSize(in);
  }
  return absl::OkStatus();
}

/// pad(x) => zero-filled result with x in its leading corner (one kernel).
static absl::Status lowerPad(PadOp op, Lowering &l) {
  auto in = tensorType(op.getInput()), out = tensorType(op.getResult());
  if (in.getRank() == 0 || in.getShape() == out.getShape())
    return l.emitCopyInto(op.getResult(), op.getInput(), op);
  if (in.getRank() > cu::kPadMaxRank)
    return unsupported(op, absl::StrCat("llm.pad of rank ", in.getRank(), " (at most ",
                                        cu::kPadMaxRank, ")"));
  cu::PadConfig cfg;
  cfg.dtype = scalarOf(op.getInput());
  cfg.rank = static_cast<int>(in.getRank());
  cfg.vec = cu::PadVecWidth(cfg.dtype, in.getShape().back(), out.getShape().back());
  LLMC_ASSIGN_OR_RETURN(
      std::vector<int64_t> packed,
      generated(cu::PackPadShape(
                    std::vector<int64_t>(out.getShape().begin(), out.getShape().end()),
                    std::vector<int64_t>(in.getShape().begin(), in.getShape().end())),
                op));
  KernelArg shape = KernelArg::struct_(std::string(
      reinterpret_cast<const char *>(packed.data()), packed.size() * sizeof(int64_t)));
  int64_t numel = out.getNumElements();
  std::vector<KernelArg> args = {l.ptrArg(op.getResult()), l.ptrArg(op.getInput()),
                                 i64Arg(numel), std::move(shape)};
  return l.launchGenerated(cu::EmitPad(cfg), cu::PadLaunch(cfg, numel), args, op);
}

/// `v` is zero everywhere: a zero splat constant, possibly broadcast or
/// reshaped (the zeros an embedding backward accumulates into).
static bool isZeroSplat(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<BroadcastOp, ReshapeOp>(def))
      break;
    v = def->getOperand(0);
  }
  std::optional<double> splat = splatValue(v);
  return splat && *splat == 0.0;
}

/// index_put(base, indices, source) => [copy of the base,] one kernel.
static absl::Status lowerIndexPut(IndexPutOp o, Lowering &l) {
  auto base = tensorType(o.getBase());
  int64_t dim = o.getDim();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i)
    outer *= base.getDimSize(i);
  for (int64_t i = dim + 1; i < base.getRank(); ++i)
    inner *= base.getDimSize(i);
  int64_t rows = base.getDimSize(dim);
  int64_t count = numElements(o.getIndices());
  bool inPlace = updatesInPlace(o);
  cu::IndexPutConfig cfg;
  cfg.dtype = scalarOf(o.getBase());
  cfg.index = scalarOf(o.getIndices());
  cfg.inner = std::max<int64_t>(inner, 1);
  cfg.accumulate = o.getAccumulate();
  cfg.zero_base = cfg.accumulate && !inPlace && isZeroSplat(o.getBase());
  if (base.getNumElements() == 0)
    return absl::OkStatus();
  if (!cfg.accumulate) {
    // Value semantics: a donated base is written in place; otherwise the
    // result starts as a copy of it.
    if (!inPlace)
      if (auto st = l.emitCopyInto(o.getResult(), o.getBase(), o); !st.ok())
        return st;
    if (count * inner == 0)
      return absl::OkStatus();
    std::vector<KernelArg> args = {l.ptrArg(o.getResult()), l.ptrArg(o.getSource()),
                                   l.ptrArg(o.getIndices()), i64Arg(outer), i64Arg(rows),
                                   i64Arg(count)};
    return l.launchGenerated(cu::EmitIndexPut(cfg), cu::IndexPutLaunch(cfg, outer, rows, count),
                             args, o);
  }
  // The add kernel writes every row of the result (copying or zeroing the
  // untouched ones) unless it runs in place.
  int64_t scratchBytes = cu::IndexPutScratchBytes(cfg, outer, count);
  KernelArg scratch = nullArg();
  if (scratchBytes > 0)
    scratch = l.bufArg(l.newArenaBuffer(scratchBytes, l.getStep(), l.getStep()));
  KernelArg out = l.ptrArg(o.getResult());
  std::vector<KernelArg> args = {out,
                                 cfg.zero_base ? out : l.ptrArg(o.getBase()),
                                 count > 0 ? l.ptrArg(o.getSource()) : out,
                                 count > 0 ? l.ptrArg(o.getIndices()) : out,
                                 scratch,
                                 i64Arg(outer),
                                 i64Arg(rows),
                                 i64Arg(count),
                                 i64Arg(cu::IndexAddRowsPerBlock(outer, rows))};
  return l.launchGenerated(cu::EmitIndexPut(cfg), cu::IndexPutLaunch(cfg, outer, rows, count), args,
                           o);
}

void populateDataMovementLowerings(OpLoweringSet &set) {
  set.add<GatherOp>(lowerGather);
  set.add<ConcatOp>(lowerConcat);
  set.add<PadOp>(lowerPad);
  set.add<IndexPutOp>(lowerIndexPut);
}

} // namespace llmc::codegen
