//===- LowerReductions.cpp - reductions -----------------------------------===//
//
// llm.reduce_{sum,mean,max,min} over all dimensions (two stages), over the
// trailing dimensions (a row kernel) or over a block of adjacent dimensions
// before the last (a column kernel): any reduction whose reduced dimensions
// are adjacent once dimensions of size 1 are dropped; llm.argmax over the
// last dimension (a row kernel).
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include <array>

namespace llmc::codegen {

/// x viewed as [outer, r, inner] for a reduction over `dims`: dimensions of
/// size 1 do not change the layout and are dropped, runs of kept or of
/// reduced dimensions merge. nullopt when the reduced dimensions are not
/// adjacent then (two runs).
static std::optional<std::array<int64_t, 3>> reductionLayout(ArrayRef<int64_t> shape,
                                                             ArrayRef<int64_t> dims) {
  std::array<int64_t, 3> layout = {1, 1, 1};
  int run = 0; // 0: kept dims before the reduced run, 1: reduced, 2: after
  for (auto [i, size] : llvm::enumerate(shape)) {
    if (size == 1)
      continue;
    bool reduced = llvm::is_contained(dims, static_cast<int64_t>(i));
    if (reduced && run == 2)
      return std::nullopt;
    if (reduced)
      run = 1;
    else if (run == 1)
      run = 2;
    layout[run] *= size;
  }
  return layout;
}

/// out [outer, inner] = reduce over r of x [outer, r, inner], inner > 1:
/// the column kernel, and when its rows are split, the combine kernel over
/// an arena workspace of fp32 partials.
static absl::Status lowerColumnReduction(Operation *o, cu::ReduceKind kind, int64_t outer,
                                         int64_t r, int64_t inner, Lowering &l) {
  Value in = o->getOperand(0), out = o->getResult(0);
  cu::ColumnReduceConfig cfg;
  cfg.in = scalarOf(in);
  cfg.out = scalarOf(out);
  cfg.kind = kind;
  cfg.vec = cu::ColumnReduceVecWidth(cfg.in, inner);
  int splits = cu::ColumnReduceNumSplits(outer, r, inner, cfg.vec);
  LLMC_ASSIGN_OR_RETURN(cu::ColumnReduceKernels ks, generated(cu::EmitColumnReduce(cfg), o));
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims partialDims,
                        generated(cu::ColumnReducePartialLaunch(cfg, outer, inner, splits), o));
  int64_t workspace = cu::ColumnReduceWorkspaceBytes(outer, inner, splits);
  int partials = workspace > 0 ? l.newArenaBuffer(workspace, l.getStep(), l.getStep()) : -1;
  std::vector<KernelArg> args = {l.ptrArg(out),
                                 partials >= 0 ? l.bufArg(partials) : nullArg(),
                                 l.ptrArg(in),
                                 i64Arg(outer),
                                 i64Arg(r),
                                 i64Arg(inner),
                                 i64Arg(cu::ColumnReduceRowsPerSplit(r, splits))};
  l.launch(l.addKernel(ks.partial), partialDims, args, o);
  if (splits == 1)
    return absl::OkStatus();
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims combineDims,
                        generated(cu::ColumnReduceCombineLaunch(cfg, outer, inner), o));
  std::vector<KernelArg> combineArgs = {l.ptrArg(out), l.bufArg(partials),
                                        i64Arg(outer * inner), i64Arg(r), i32Arg(splits)};
  l.launch(l.addKernel(ks.combine), combineDims, combineArgs, o);
  return absl::OkStatus();
}

/// reduce(x, all dims) => two kernels (partials, then total);
/// reduce(x, last dim) or over trailing dims => one row kernel;
/// reduce(x, dims before the last) => a column kernel [+ its combine].
static absl::Status lowerReduction(Operation *o, Lowering &l) {
  Value in = o->getOperand(0);
  auto t = tensorType(in);
  ArrayRef<int64_t> dims = cast<DenseI64ArrayAttr>(o->getAttr("dims")).asArrayRef();
  cu::ReduceKind kind = isa<ReduceSumOp>(o)    ? cu::ReduceKind::sum
                        : isa<ReduceMeanOp>(o) ? cu::ReduceKind::mean
                        : isa<ReduceMaxOp>(o)  ? cu::ReduceKind::max
                                               : cu::ReduceKind::min;
  if (static_cast<int64_t>(dims.size()) == t.getRank() && t.getRank() > 0) {
    cu::FullReduceConfig cfg;
    cfg.in = scalarOf(in);
    cfg.out = scalarOf(o->getResult(0));
    cfg.kind = kind;
    int64_t numel = numElements(in);
    LLMC_ASSIGN_OR_RETURN(cu::FullReduceKernels ks,
                          generated(cu::EmitFullReduce(cfg), o));
    int partials = l.newArenaBuffer(4 * int64_t(cu::FullReduceNumPartials(numel)),
                                    l.getStep(), l.getStep());
    std::vector<KernelArg> args1 = {l.bufArg(partials), l.ptrArg(in), i64Arg(numel)};
    LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims1,
                          generated(cu::FullReduceStage1Launch(cfg, numel), o));
    l.launch(l.addKernel(ks.stage1), dims1, std::move(args1), o);
    std::vector<KernelArg> args2 = {l.ptrArg(o->getResult(0)), l.bufArg(partials),
                                    i32Arg(cu::FullReduceNumPartials(numel)),
                                    i64Arg(numel)};
    LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims2,
                          generated(cu::FullReduceStage2Launch(cfg, numel), o));
    l.launch(l.addKernel(ks.stage2), dims2, std::move(args2), o);
    return absl::OkStatus();
  }
  int64_t n = t.getShape().back(), rows = numElements(in) / std::max<int64_t>(n, 1);
  if (dims.size() != 1 || dims[0] != t.getRank() - 1) {
    std::optional<std::array<int64_t, 3>> layout = reductionLayout(t.getShape(), dims);
    if (!layout)
      return unsupported(o, "a reduction over dimensions that are not adjacent "
                            "(apart from dimensions of size 1); reduce one block "
                            "of adjacent dimensions at a time");
    auto [outer, r, inner] = *layout;
    if (inner > 1)
      return lowerColumnReduction(o, kind, outer, r, inner, l);
    n = r, rows = outer;
  }
  cu::RowReduceConfig cfg;
  cfg.in = scalarOf(in);
  cfg.out = scalarOf(o->getResult(0));
  cfg.kind = kind;
  cfg.n = n;
  std::vector<KernelArg> args = {l.ptrArg(o->getResult(0)), l.ptrArg(in), i64Arg(rows)};
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims grid,
                        generated(cu::RowReduceLaunch(cfg, rows), o));
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code, generated(cu::EmitRowReduce(cfg), o));
  l.launch(l.addKernel(code), grid, std::move(args), o);
  return absl::OkStatus();
}

/// Ops over the last dim of `input` (argmax, cumsum): its length n, the
/// rows (0: nothing to launch), or Unimplemented for another dim.
static absl::StatusOr<std::pair<int64_t, int64_t>>
lastDimRows(Operation *op, Value input, int64_t dim, const char *what) {
  auto x = tensorType(input);
  if (dim != x.getRank() - 1)
    return unsupported(op, absl::StrCat(what, " over a dimension other than the last"));
  int64_t n = x.getDimSize(x.getRank() - 1);
  return std::make_pair(n, n > 0 ? x.getNumElements() / n : 0);
}

/// argmax(x) over the last dim => one block per row.
static absl::Status lowerArgMax(ArgMaxOp op, Lowering &l) {
  LLMC_ASSIGN_OR_RETURN(auto shape, lastDimRows(op, op.getInput(),
                                                static_cast<int64_t>(op.getDim()), "argmax"));
  auto [n, rows] = shape;
  if (rows == 0)
    return absl::OkStatus();
  cu::ArgMaxConfig cfg;
  cfg.in = scalarOf(op.getInput());
  cfg.n = n;
  std::vector<KernelArg> args = {l.ptrArg(op.getResult()), l.ptrArg(op.getInput()),
                                 i64Arg(rows)};
  return l.launchGenerated(cu::EmitArgMax(cfg), cu::ArgMaxLaunch(cfg, rows), args, op);
}

/// cumsum(x) over the last dim => one block per row.
static absl::Status lowerCumsum(CumsumOp op, Lowering &l) {
  LLMC_ASSIGN_OR_RETURN(auto shape, lastDimRows(op, op.getInput(),
                                                static_cast<int64_t>(op.getDim()), "cumsum"));
  auto [n, rows] = shape;
  if (rows == 0)
    return absl::OkStatus();
  cu::CumsumConfig cfg;
  cfg.in = scalarOf(op.getInput());
  cfg.out = scalarOf(op.getResult());
  cfg.n = n;
  std::vector<KernelArg> args = {l.ptrArg(op.getResult()), l.ptrArg(op.getInput()),
                                 i64Arg(rows)};
  return l.launchGenerated(cu::EmitCumsum(cfg), cu::CumsumLaunch(cfg, rows), args, op);
}

void populateReductionLowerings(OpLoweringSet &set) {
  set.add<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceMinOp>(lowerReduction);
  set.add<ArgMaxOp>(lowerArgMax);
  set.add<CumsumOp>(lowerCumsum);
}

} // namespace llmc::codegen
