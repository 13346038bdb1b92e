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
#include <limits>

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

static cu::ReduceKind reduceKindOf(Operation *o) {
  return isa<ReduceSumOp>(o)    ? cu::ReduceKind::sum
         : isa<ReduceMeanOp>(o) ? cu::ReduceKind::mean
         : isa<ReduceMaxOp>(o)  ? cu::ReduceKind::max
                                : cu::ReduceKind::min;
}

/// out [outer, inner] = reduce over r of x [outer, r, inner] (`in`, of type
/// `inType`), any inner >= 1 (a plain reduction comes here for inner > 1; a
/// row kernel's column sums finish their partials here with inner = n): the
/// column kernel, and when its rows are split,
/// the combine kernel over an arena workspace of fp32 partials; launched
/// for `o`, whose result is `out`.
static absl::Status columnReduce(Operation *o, Value out, KernelArg in, cu::ScalarType inType,
                                 cu::ReduceKind kind, int64_t outer, int64_t r, int64_t inner,
                                 Lowering &l) {
  cu::ColumnReduceConfig cfg;
  cfg.in = inType;
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
                                 std::move(in),
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
  cu::ReduceKind kind = reduceKindOf(o);
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
      return columnReduce(o, o->getResult(0), l.ptrArg(in), scalarOf(in), kind, outer, r, inner, l);
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

/// A splat constant `v` is, also through broadcasts and reshapes.
static std::optional<double> splatThroughViews(Value v) {
  for (Value cur = v;;) {
    if (std::optional<double> c = splatValue(cur))
      return c;
    Operation *def = cur.getDefiningOp();
    if (!isa_and_nonnull<BroadcastOp, ReshapeOp>(def))
      return std::nullopt;
    cur = def->getOperand(0);
  }
}

/// How the row kernel of `space` reads `read` (of a value of `shape`): the
/// strides of dimensions of size 1 do not matter.
static std::optional<cu::RowInputLayout> rowInputLayout(const StridedRead &read,
                                                        ArrayRef<int64_t> shape,
                                                        const RowSpace &space) {
  SmallVector<int64_t> dense = rowMajorStrides(shape);
  auto matches = [&](auto want) {
    for (auto [i, size] : llvm::enumerate(shape))
      if (size != 1 && read.strides[i] != want(i))
        return false;
    return true;
  };
  if (matches([](size_t) { return 0; }))
    return cu::RowInputLayout::kScalar;
  if (isRowShaped(RankedTensorType::get(shape, Float32Type::get(read.root.getContext())),
                  space))
    return matches([&](size_t i) { return dense[i]; })
               ? std::optional(cu::RowInputLayout::kRow)
               : std::nullopt;
  if (matches([&](size_t i) { return dense[i]; }))
    return cu::RowInputLayout::kDense;
  size_t last = shape.size() - 1;
  if (matches([&](size_t i) { return i == last ? 1 : 0; }))
    return cu::RowInputLayout::kColumn;
  SmallVector<int64_t> lead = rowMajorStrides(shape.drop_back());
  if (matches([&](size_t i) { return i == last ? 0 : lead[i]; }))
    return cu::RowInputLayout::kRow;
  return std::nullopt;
}

absl::Status lowerRowGroup(ArrayRef<Operation *> ops, Lowering &l) {
  llvm::SmallPtrSet<Operation *, 32> members(ops.begin(), ops.end());
  Operation *last = ops.back();
  std::optional<RowSpace> space;
  for (Operation *op : ops)
    if (!space)
      space = rowReductionSpace(op);
  if (!space)
    return unsupported(last, "a row kernel without a row reduction");

  cu::RowFusedProgram prog;
  prog.n = space->n;
  // Reductions are referenced as kReductionRef - q until the inputs are
  // known, then as -(inputs + q + 1).
  constexpr int kReductionRef = std::numeric_limits<int>::min() / 2;
  llvm::DenseMap<Value, int> refOf;
  llvm::MapVector<Value, int> inputIndex;
  SmallVector<std::pair<Value, int64_t>> inputPtrs; // root, byte offset
  auto operandRef = [&](Value v) -> absl::StatusOr<int> {
    if (Value m = rowKernelMember(v, members, *space))
      return refOf.at(m);
    if (auto it = refOf.find(v); it != refOf.end())
      return it->second;
    if (std::optional<double> c = splatThroughViews(v)) {
      cu::EwNode n;
      n.op = cu::EwOp::constant;
      n.type = scalarOf(v);
      n.constant = *c;
      prog.nodes.push_back(n);
      return refOf[v] = static_cast<int>(prog.nodes.size()) - 1;
    }
    if (auto it = inputIndex.find(v); it != inputIndex.end())
      return -(it->second + 1);
    LLMC_ASSIGN_OR_RETURN(StridedRead read, l.stridedRead(v));
    std::optional<cu::RowInputLayout> layout =
        rowInputLayout(read, tensorType(v).getShape(), *space);
    int64_t offset = read.elementOffset * cu::ScalarSize(scalarOf(v));
    // The same storage read the same way (a per-row value used directly and
    // broadcast along the row) is one input.
    for (auto [i, in] : llvm::enumerate(prog.inputs))
      if (layout && in.layout == *layout && in.type == scalarOf(v) &&
          inputPtrs[i] == std::make_pair(read.root, offset))
        return inputIndex[v] = static_cast<int>(i), -(static_cast<int>(i) + 1);
    if (!layout)
      return unsupported(last, absl::StrCat("a row kernel input read neither dense, per row, "
                                            "per column nor as a scalar (",
                                            v.getDefiningOp() ? describeOp(v.getDefiningOp())
                                                              : std::string("an argument"),
                                            ")"));
    prog.inputs.push_back({scalarOf(v), *layout});
    inputPtrs.push_back({read.root, offset});
    int idx = static_cast<int>(prog.inputs.size()) - 1;
    inputIndex[v] = idx;
    return -(idx + 1);
  };
  SmallVector<Operation *> columns; // in prog.column_sums' order
  for (Operation *op : ops) {
    Value result = op->getResult(0);
    if (isColumnSumOf(op, *space)) {
      LLMC_ASSIGN_OR_RETURN(int value, operandRef(op->getOperand(0)));
      prog.column_sums.push_back({value});
      columns.push_back(op);
      continue;
    }
    if (rowReductionSpace(op)) {
      LLMC_ASSIGN_OR_RETURN(int operand, operandRef(op->getOperand(0)));
      prog.reductions.push_back({reduceKindOf(op), operand, scalarOf(result)});
      refOf[result] = kReductionRef - static_cast<int>(prog.reductions.size() - 1);
      continue;
    }
    std::optional<cu::EwNode> node = ewNodeOf(op);
    if (!node)
      return unsupported(op, "not an elementwise op");
    for (Value operand : op->getOperands()) {
      LLMC_ASSIGN_OR_RETURN(int ref, operandRef(operand));
      node->operands.push_back(ref);
    }
    prog.nodes.push_back(*node);
    refOf[result] = static_cast<int>(prog.nodes.size()) - 1;
  }
  const int numInputs = static_cast<int>(prog.inputs.size());
  auto finalRef = [&](int ref) {
    return ref <= kReductionRef / 2 ? -(numInputs + (kReductionRef - ref) + 1) : ref;
  };
  for (cu::EwNode &n : prog.nodes)
    for (int &o : n.operands)
      o = finalRef(o);
  for (cu::RowReduction &r : prog.reductions)
    r.operand = finalRef(r.operand);
  for (cu::RowColumnSum &c : prog.column_sums)
    c.value = finalRef(c.value);
  // Outputs: member results read outside the kernel (also through views).
  SmallVector<Value> outputs;
  for (Operation *op : ops) {
    if (llvm::is_contained(columns, op))
      continue; // summed over the blocks' partials below
    Value r = op->getResult(0);
    SmallVector<Operation *> readers;
    outsideUsers(r, members, readers);
    if (readers.empty())
      continue;
    prog.outputs.push_back({finalRef(refOf.at(r)), scalarOf(r), isRowShaped(r.getType(), *space)});
    outputs.push_back(r);
  }
  if (prog.outputs.empty() && columns.empty())
    return absl::OkStatus(); // nothing read: a dead kernel
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code, generated(cu::EmitRowFused(prog), last));
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                        generated(cu::RowFusedLaunch(prog, space->rows), last));
  std::vector<KernelArg> args;
  for (Value out : outputs)
    args.push_back(l.ptrArg(out));
  // Column sums: each block's fp32 partial sums [grid, n] in an arena
  // workspace, then summed over the blocks by a column reduction.
  SmallVector<int> partials;
  if (!columns.empty()) {
    LLMC_ASSIGN_OR_RETURN(int64_t bytes, generated(cu::RowFusedColumnPartialBytes(prog, space->rows), last));
    for (size_t c = 0; c < columns.size(); ++c) {
      partials.push_back(l.newArenaBuffer(bytes, l.getStep(), l.getStep()));
      args.push_back(l.bufArg(partials.back()));
    }
  }
  for (auto [root, offset] : inputPtrs)
    args.push_back(l.ptrArg(root, offset));
  args.push_back(i64Arg(space->rows));
  l.launch(l.addKernel(code), dims, std::move(args), last);
  for (auto [c, op] : llvm::enumerate(columns))
    if (absl::Status st = columnReduce(op, op->getResult(0), l.bufArg(partials[c]),
                                       cu::ScalarType::f32, cu::ReduceKind::sum, 1,
                                       dims.grid[0], space->n, l);
        !st.ok())
      return st;
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
