//===- LowerElementwise.cpp - fused elementwise kernels ---------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// The index space of an elementwise kernel with more dims than the
/// kernel's shape argument holds (cu::kElementwiseMaxRank), in fewer dims
/// that address the same elements: size-1 dims are dropped and adjacent
/// dims merge where every strided input reads them as one (stride[d] ==
/// stride[d+1] * size[d+1]). The last dim stays as it is (a row-broadcast
/// input reads index % its size). Index spaces within the bound are left
/// unchanged.
void collapseIndexSpace(const cu::ElementwiseProgram &prog, std::vector<int64_t> &sizes,
                        std::vector<std::vector<int64_t>> &strides) {
  if (sizes.size() <= static_cast<size_t>(cu::kElementwiseMaxRank))
    return;
  auto isStrided = [&](size_t i) {
    return prog.inputs[i].layout == cu::InputLayout::kStrided && i < strides.size();
  };
  std::vector<int64_t> outSizes;
  std::vector<std::vector<int64_t>> outStrides(strides.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    bool last = d + 1 == sizes.size();
    if (!last && sizes[d] == 1)
      continue;
    bool merge = !last && !outSizes.empty();
    for (size_t i = 0; merge && i < strides.size(); ++i)
      merge = !isStrided(i) || outStrides[i].back() == strides[i][d] * sizes[d];
    if (merge) {
      outSizes.back() *= sizes[d];
      for (size_t i = 0; i < strides.size(); ++i)
        if (isStrided(i))
          outStrides[i].back() = strides[i][d];
      continue;
    }
    outSizes.push_back(sizes[d]);
    for (size_t i = 0; i < strides.size(); ++i)
      if (isStrided(i))
        outStrides[i].push_back(strides[i][d]);
  }
  sizes = std::move(outSizes);
  for (size_t i = 0; i < strides.size(); ++i)
    if (isStrided(i))
      strides[i] = std::move(outStrides[i]);
}

/// The elementwise kernels' by-value shape struct (sizes and per-input
/// strides, see PackElementwiseShape) as one kernel parameter. A kernel over
/// more than cu::kElementwiseMaxRank dims runs over its collapsed index
/// space (collapseIndexSpace); when even that has too many dims the
/// generator refuses it, naming the rank.
absl::StatusOr<KernelArg> shapeArg(const cu::ElementwiseProgram &prog,
                                 std::vector<int64_t> sizes,
                                 std::vector<std::vector<int64_t>> strides) {
  collapseIndexSpace(prog, sizes, strides);
  absl::StatusOr<std::vector<int64_t>> packed =
      cu::PackElementwiseShape(prog, sizes, strides);
  if (!packed.ok())
    return packed.status();
  return KernelArg::struct_(std::string(reinterpret_cast<const char *>(packed->data()),
                                        packed->size() * sizeof(int64_t)));
}

/// The node of an elementwise kernel program computing `op` (its kind,
/// result type and predicate; operands are left to the caller), or nullopt
/// when `op` is not an elementwise op a kernel computes.
std::optional<cu::EwNode> ewNodeOf(Operation *op) {
  cu::EwNode n;
  n.type = scalarOf(op->getResult(0));
  auto kind = llvm::TypeSwitch<Operation *, std::optional<cu::EwOp>>(op)
      .Case<AddOp>([](auto) { return cu::EwOp::add; })
      .Case<SubOp>([](auto) { return cu::EwOp::sub; })
      .Case<MulOp>([](auto) { return cu::EwOp::mul; })
      .Case<DivOp>([](auto) { return cu::EwOp::div; })
      .Case<PowOp>([](auto) { return cu::EwOp::pow; })
      .Case<MaximumOp>([](auto) { return cu::EwOp::maximum; })
      .Case<MinimumOp>([](auto) { return cu::EwOp::minimum; })
      .Case<NegOp>([](auto) { return cu::EwOp::neg; })
      .Case<AbsOp>([](auto) { return cu::EwOp::abs; })
      .Case<ExpOp>([](auto) { return cu::EwOp::exp; })
      .Case<LogOp>([](auto) { return cu::EwOp::log; })
      .Case<TanhOp>([](auto) { return cu::EwOp::tanh; })
      .Case<SinOp>([](auto) { return cu::EwOp::sin; })
      .Case<CosOp>([](auto) { return cu::EwOp::cos; })
      .Case<SqrtOp>([](auto) { return cu::EwOp::sqrt; })
      .Case<RsqrtOp>([](auto) { return cu::EwOp::rsqrt; })
      .Case<SiluOp>([](auto) { return cu::EwOp::silu; })
      .Case<GeluOp>([](GeluOp g) {
        return g.getApproximation() == GeluApproximation::tanh
                   ? cu::EwOp::gelu_tanh
                   : cu::EwOp::gelu_erf;
      })
      .Case<ReluOp>([](auto) { return cu::EwOp::relu; })
      .Case<SigmoidOp>([](auto) { return cu::EwOp::sigmoid; })
      .Case<CompareOp>([&](CompareOp c) {
        n.pred = static_cast<cu::CmpPredicate>(c.getPredicate());
        return cu::EwOp::compare;
      })
      .Case<SelectOp>([](auto) { return cu::EwOp::select; })
      .Case<CastOp>([](auto) { return cu::EwOp::cast; })
      .Default([](Operation *) { return std::nullopt; });
  if (!kind)
    return std::nullopt;
  n.op = *kind;
  return n;
}

/// Whether a read through `strides` of an elementwise kernel's output space
/// `shape` is the transpose of dense storage: [..., C, R] read as
/// [..., R, C], the outer dims row-major over R * C blocks (size-1 dims
/// aside). Matrices of one row or column are no transpose.
static bool isTransposedDense(ArrayRef<int64_t> shape, ArrayRef<int64_t> strides) {
  size_t rank = shape.size();
  if (rank < 2 || strides.size() != rank)
    return false;
  int64_t rows = shape[rank - 2], cols = shape[rank - 1];
  if (rows < 2 || cols < 2 || strides[rank - 2] != 1 || strides[rank - 1] != rows)
    return false;
  int64_t next = rows * cols;
  for (size_t d = rank - 2; d-- > 0;) {
    if (shape[d] != 1 && strides[d] != next)
      return false;
    next *= shape[d];
  }
  return true;
}

absl::Status lowerElementwiseGroup(ArrayRef<Operation *> ops, Lowering &l) {
  llvm::DenseSet<Operation *> members(ops.begin(), ops.end());
  Operation *last = ops.back();
  ArrayRef<int64_t> outShape = tensorType(last->getResult(0)).getShape();
  int64_t numel = numElements(last->getResult(0));

  cu::ElementwiseProgram prog;
  prog.unroll = l.getKernelConfigs().elementwise_unroll;
  llvm::MapVector<Value, int> inputIndex; // external value -> input index
  std::vector<StridedRead> reads;
  std::vector<bool> transposedReads; // per input: isTransposedDense
  llvm::DenseMap<Value, int> nodeOf;
  auto operandRef = [&](Value v) -> absl::StatusOr<int> {
    if (auto it = nodeOf.find(v); it != nodeOf.end())
      return it->second;
    if (auto c = splatValue(v)) {
      cu::EwNode n;
      n.op = cu::EwOp::constant;
      n.type = scalarOf(v);
      n.constant = *c;
      prog.nodes.push_back(n);
      return nodeOf[v] = prog.nodes.size() - 1;
    }
    if (auto it = inputIndex.find(v); it != inputIndex.end())
      return -(it->second + 1);
    auto read = l.stridedRead(v);
    if (!read.ok())
      return read.status();
    cu::EwInput in;
    in.type = scalarOf(v);
    bool contiguous = read->elementOffset == 0 &&
                      ArrayRef<int64_t>(read->strides) ==
                          ArrayRef<int64_t>(rowMajorStrides(outShape)) &&
                      numElements(v) == numel;
    bool scalar = llvm::all_of(read->strides, [](int64_t s) { return s == 0; });
    bool rowBroadcast =
        !outShape.empty() && read->elementOffset == 0 &&
        read->strides.back() == 1 &&
        llvm::all_of(ArrayRef<int64_t>(read->strides).drop_back(),
                     [](int64_t s) { return s == 0; });
    in.layout = contiguous ? cu::InputLayout::kContiguous
                : scalar && read->elementOffset == 0 ? cu::InputLayout::kScalar
                : rowBroadcast ? cu::InputLayout::kRowBroadcast
                               : cu::InputLayout::kStrided;
    prog.inputs.push_back(in);
    reads.push_back(*read);
    transposedReads.push_back(numElements(v) == numel &&
                              isTransposedDense(outShape, read->strides));
    int idx = prog.inputs.size() - 1;
    inputIndex[v] = idx;
    return -(idx + 1);
  };

  for (Operation *op : ops) {
    std::optional<cu::EwNode> node = ewNodeOf(op);
    if (!node)
      return unsupported(op, "not an elementwise op");
    cu::EwNode &n = *node;
    for (Value operand : op->getOperands()) {
      auto ref = operandRef(operand);
      if (!ref.ok())
        return ref.status();
      n.operands.push_back(*ref);
    }
    prog.nodes.push_back(n);
    nodeOf[op->getResult(0)] = prog.nodes.size() - 1;
  }
  // Outputs: member results used outside the group (or returned).
  std::vector<Value> outputs;
  for (Operation *op : ops) {
    Value r = op->getResult(0);
    bool escapes = false;
    for (OpOperand &use : r.getUses())
      if (!members.contains(use.getOwner()))
        escapes = true;
    if (!escapes)
      continue;
    if (tensorType(r).getShape() != outShape)
      return unsupported(op, "fused elementwise outputs of different shapes");
    prog.outputs.push_back({nodeOf[r], scalarOf(r)});
    outputs.push_back(r);
  }
  if (prog.outputs.empty())
    return absl::OkStatus(); // dead group

  // Inputs that are the output's transpose (the quantizing cast of a GEMM
  // operand into cuBLASLt's fp8 layout) make the kernel tiled: coalesced
  // reads of them through shared memory, where the strided form reads a
  // 32-byte sector per element. Only next to contiguous and scalar inputs,
  // within the shared memory and CUDA's grid.
  std::optional<cu::LaunchDims> tiledDims;
  if (numel > 0 && llvm::is_contained(transposedReads, true)) {
    cu::ElementwiseProgram tiled = prog;
    bool ok = true;
    for (auto [i, in] : llvm::enumerate(tiled.inputs)) {
      if (transposedReads[i])
        in.layout = cu::InputLayout::kTransposed;
      else
        ok = ok && (in.layout == cu::InputLayout::kContiguous ||
                    in.layout == cu::InputLayout::kScalar);
    }
    int64_t rows = outShape[outShape.size() - 2], cols = outShape.back();
    absl::StatusOr<cu::LaunchDims> dims =
        cu::ElementwiseTransposedLaunch(numel / (rows * cols), rows, cols);
    if (ok && cu::ElementwiseTiledFits(tiled) && dims.ok()) {
      prog = std::move(tiled);
      tiledDims = *dims;
    }
  }

  // An output written over an input's buffer (llmc::inPlaceResults): that
  // input must be read at the index written, i.e. contiguously.
  for (auto [o, out] : llvm::enumerate(outputs)) {
    BlockArgument arg = l.inPlaceArgOf(out);
    if (!arg)
      continue;
    for (auto [i, read] : llvm::enumerate(reads))
      if (read.root == arg && (prog.inputs[i].layout != cu::InputLayout::kContiguous ||
                               read.elementOffset != 0))
        return absl::InternalError(absl::StrCat(
            "cuda backend: ", describe(last), ": output ", o, " is written over input ", i,
            ", which the kernel does not read contiguously at the written index"));
    prog.outputs_alias_inputs = true;
  }
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                        generated(cu::EmitElementwise(prog), last));
  int kernel = l.addKernel(code);
  std::vector<KernelArg> args;
  for (Value out : outputs)
    args.push_back(l.ptrArg(out));
  for (auto [i, read] : llvm::enumerate(reads)) {
    int64_t esize = cu::ScalarSize(prog.inputs[i].type);
    args.push_back(l.ptrArg(read.root, read.elementOffset * esize));
  }
  args.push_back(i64Arg(numel));
  if (tiledDims) {
    args.push_back(i64Arg(outShape[outShape.size() - 2]));
    args.push_back(i64Arg(outShape.back()));
    l.launch(kernel, *tiledDims, std::move(args), last);
    return absl::OkStatus();
  }
  if (cu::ElementwiseNeedsShape(prog)) {
    std::vector<int64_t> sizes(outShape.begin(), outShape.end());
    std::vector<std::vector<int64_t>> strides;
    for (auto &read : reads)
      strides.emplace_back(read.strides.begin(), read.strides.end());
    LLMC_ASSIGN_OR_RETURN(KernelArg shape,
                          generated(shapeArg(prog, sizes, strides), last));
    args.push_back(std::move(shape));
  }
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                        generated(cu::ElementwiseLaunch(prog, numel), last));
  l.launch(kernel, dims, std::move(args), last);
  return absl::OkStatus();
}

} // namespace llmc::codegen
