//===- LowerMatmul.cpp - GEMMs, GEMVs, weight-only --------------------------===//

#include "Lowering.h"

#include "absl/strings/str_join.h"

namespace llmc::codegen {

/// A rank-2 operand read in place as a matrix.
struct MatrixView {
  int buffer = -1;
  int64_t byteOffset = 0;
  int64_t ld = 0;          // row stride of the stored matrix, elements
  bool transposed = false; // stored as the transpose of the logical matrix
};

/// A rank-2 GEMM operand that is a slice/transpose view of dense storage
/// (e.g. llmc-shard's per-rank rows or columns of a weight, or a transposed
/// weight) read in place through an offset and a leading dimension instead of
/// being copied first. Only for views whose inner stride is 1 in one of the
/// two dims, with 256-byte aligned starts and 16-byte aligned rows (what
/// cuBLASLt's default heuristics assume of every pointer). nullopt: dense
/// already, or not expressible.
static std::optional<MatrixView> matrixView(Value v, Lowering &l) {
  auto t = tensorType(v);
  if (t.getRank() != 2)
    return std::nullopt;
  Operation *def = storageRoot(v).getDefiningOp();
  if (!def || !isa<SliceOp, TransposeOp>(def))
    return std::nullopt;
  auto read = l.stridedRead(v);
  if (!read.ok() || storageRoot(read->root) != read->root)
    return std::nullopt;
  if (isa_and_nonnull<StridedViewOpInterface>(read->root.getDefiningOp()))
    return std::nullopt;
  int64_t rows = t.getDimSize(0), cols = t.getDimSize(1);
  int64_t s0 = read->strides[0], s1 = read->strides[1];
  MatrixView mv;
  if (s1 == 1 && (rows == 1 || s0 >= cols)) {
    mv.ld = rows == 1 ? cols : s0;
  } else if (s0 == 1 && (cols == 1 || s1 >= rows)) {
    mv.ld = cols == 1 ? rows : s1;
    mv.transposed = true;
  } else {
    return std::nullopt;
  }
  int64_t esize = cu::ScalarSize(scalarOf(v));
  mv.byteOffset = read->elementOffset * esize;
  if (mv.byteOffset % 256 != 0 || (mv.ld * esize) % 16 != 0)
    return std::nullopt;
  mv.buffer = l.bufferFor(read->root);
  return mv;
}

static KernelArg gemvWeightArg(MatmulOp op, Lowering &l);

/// result = round(acc [* scale_lhs * scale_rhs] [+ bias]) from the f32
/// product `acc` in arena buffer `scratch`, rounded once as llm.matmul
/// specifies: the epilogue of a scaled fp8 matmul with a bias, of one computed
/// in bf16 below sm_89, and of a low-precision matmul whose bias cuBLASLt's
/// epilogue cannot take (see lowerMatmul).
static absl::Status finishGemmFromF32(MatmulOp op, int scratch, Lowering &l) {
  cu::ElementwiseProgram prog;
  prog.unroll = l.getKernelConfigs().elementwise_unroll;
  prog.round_every_node = false;
  const cu::ScalarType f32 = cu::ScalarType::f32, out = scalarOf(op.getResult());
  prog.inputs = {{f32, cu::InputLayout::kContiguous}};
  std::vector<KernelArg> args = {l.ptrArg(op.getResult()), l.bufArg(scratch)};
  // Node operands: -1 - i is input i, j >= 0 is node j.
  int last = -1;
  auto addInput = [&](cu::ScalarType type, cu::InputLayout layout, Value v) {
    prog.inputs.push_back({type, layout});
    args.push_back(l.ptrArg(v));
    return -static_cast<int>(prog.inputs.size());
  };
  auto addNode = [&](cu::EwOp kind, std::vector<int> operands) {
    prog.nodes.push_back(cu::EwNode{kind, std::move(operands), f32});
    return last = static_cast<int>(prog.nodes.size()) - 1;
  };
  if (op.getScaleLhs()) {
    int sa = addInput(f32, cu::InputLayout::kScalar, op.getScaleLhs());
    int sb = addInput(f32, cu::InputLayout::kScalar, op.getScaleRhs());
    addNode(cu::EwOp::mul, {addNode(cu::EwOp::mul, {-1, sa}), sb});
  }
  if (Value bias = op.getBias()) {
    int b = addInput(scalarOf(bias), cu::InputLayout::kRowBroadcast, bias);
    addNode(cu::EwOp::add, {last, addNode(cu::EwOp::cast, {b})});
  }
  prog.nodes.push_back(cu::EwNode{cu::EwOp::cast, {last}, out});
  prog.outputs.push_back({static_cast<int>(prog.nodes.size()) - 1, out});
  int64_t numel = numElements(op.getResult());
  args.push_back(i64Arg(numel));
  if (op.getBias()) {
    auto res = tensorType(op.getResult());
    std::vector<int64_t> sizes(res.getShape().begin(), res.getShape().end());
    std::vector<std::vector<int64_t>> inputShapes(prog.inputs.size());
    LLMC_ASSIGN_OR_RETURN(KernelArg shape, generated(shapeArg(prog, sizes, inputShapes), op));
    args.push_back(std::move(shape));
  }
  return l.launchGenerated(cu::EmitElementwise(prog), cu::ElementwiseLaunch(prog, numel), args,
                           op);
}

static absl::Status lowerMatmul(MatmulOp op, Lowering &l) {
  auto lhs = tensorType(op.getLhs()), rhs = tensorType(op.getRhs());
  auto res = tensorType(op.getResult());
  int64_t lr = lhs.getRank(), rr = rhs.getRank();
  bool ta = op.getTransposeLhs(), tb = op.getTransposeRhs();
  int64_t m = lhs.getDimSize(lr - (ta ? 1 : 2));
  int64_t k = lhs.getDimSize(lr - (ta ? 2 : 1));
  int64_t n = rhs.getDimSize(rr - (tb ? 2 : 1));
  int64_t lhsBatch = 1, rhsBatch = 1, resBatch = 1;
  for (int64_t d : lhs.getShape().drop_back(2)) lhsBatch *= d;
  for (int64_t d : rhs.getShape().drop_back(2)) rhsBatch *= d;
  for (int64_t d : res.getShape().drop_back(2)) resBatch *= d;

  auto dt = [](Value v) { return *toDType(tensorType(v).getElementType()); };
  // Weight-only quantized decode projection: the GEMV reads the packed
  // weight and its scales directly.
  if (cu::QuantGemvConfig qc; fusedDequantGemv(op, &qc)) {
    auto deq = op.getRhs().getDefiningOp<DequantizeWeightOp>();
    std::vector<KernelArg> args = {l.ptrArg(op.getResult()),
                                   l.ptrArg(op.getLhs()),
                                   l.ptrArg(deq.getPacked()),
                                   l.ptrArg(deq.getScales()),
                                   qc.has_bias ? l.ptrArg(op.getBias()) : nullArg(),
                                   i64Arg(n)};
    return l.launchGenerated(cu::EmitQuantGemv(qc), cu::QuantGemvLaunch(qc), args, op);
  }
  // Decode-shaped projections (a few rows against an nn.Linear weight): the
  // weight read is the whole cost; a GEMV kernel streams it at full bandwidth.
  if (cu::GemvConfig gc; decodeGemvConfig(op, &gc)) {
    gc.unroll = l.getKernelConfigs().gemv_unroll;
    std::vector<KernelArg> args = {
        l.ptrArg(op.getResult()), l.ptrArg(op.getLhs()), gemvWeightArg(op, l),
        gc.has_bias ? l.ptrArg(op.getBias()) : nullArg(), i64Arg(n)};
    return l.launchGenerated(cu::EmitGemv(gc), cu::GemvLaunch(gc), args, op);
  }
  GemmDesc g;
  g.dtype_a = dt(op.getLhs());
  g.dtype_b = dt(op.getRhs());
  g.dtype_d = g.dtype_c = dt(op.getResult());
  if (g.dtype_a == rt::DType::i8 || g.dtype_a == rt::DType::i32 ||
      g.dtype_a == rt::DType::i64)
    return unsupported(op, absl::StrCat("an integer matmul (", rt::DTypeName(g.dtype_a),
                                        " operands); the CUDA backend's GEMMs take f32, f16, "
                                        "bf16 or fp8 operands"));
  if (k == 0)
    return unsupported(op, "a matmul with an empty contraction (K = 0)");
  auto isFp8 = [](rt::DType t) {
    return t == rt::DType::f8e4m3 || t == rt::DType::f8e5m2;
  };
  int aBuffer = -1, bBuffer = -1; // relaid-out operands (fp8), else -1
  // Slice/transpose views of weights (shared across the batch) and of
  // unbatched activations are read in place; a transposed view flips the
  // operand's transpose flag instead of being copied.
  std::optional<MatrixView> aView, bView;
  if (lhsBatch == 1 && lr == 2 && (aView = matrixView(op.getLhs(), l)))
    ta = ta != aView->transposed;
  if (rhsBatch == 1 && rr == 2 && (bView = matrixView(op.getRhs(), l)))
    tb = tb != bView->transposed;
  bool fp8 = isFp8(g.dtype_a) || isFp8(g.dtype_b);
  if (fp8) {
    // cuBLASLt has no e5m2 x e5m2 GEMM (torch._scaled_mm refuses it too):
    // such a pair takes the dequantizing path below, as below sm_89.
    bool fp8Gemm = l.getOptions().target_sm >= 89 &&
                   !(g.dtype_a == rt::DType::f8e5m2 && g.dtype_b == rt::DType::f8e5m2);
    // The relayouts below read the logical operands: keep an in-place view
    // only where it already gives cuBLASLt's TN layout for an fp8 GEMM.
    bool tn = fp8Gemm;
    if (aView && !(tn && !ta))
      aView.reset(), ta = op.getTransposeLhs();
    if (bView && !(tn && tb))
      bView.reset(), tb = op.getTransposeRhs();
    if (!isFp8(g.dtype_a) || !isFp8(g.dtype_b))
      return unsupported(op, absl::StrCat(
          "a matmul of ", rt::DTypeName(g.dtype_a), " by ",
          rt::DTypeName(g.dtype_b), "; fp8 GEMMs need both operands in fp8"));
    if (!fp8Gemm) {
      // No fp8 tensor cores below sm_89 (cuBLASLt fp8 needs Ada/Hopper), or
      // no fp8 kernel for the pair: dequantize both operands to bf16 (exact:
      // every e4m3/e5m2 value is a bf16 value) and run a bf16 GEMM with the
      // same f32 accumulation.
      auto a = l.emitRelayout(op.getLhs(), false, cu::ScalarType::bf16, op);
      if (!a.ok())
        return a.status();
      auto b = l.emitRelayout(op.getRhs(), false, cu::ScalarType::bf16, op);
      if (!b.ok())
        return b.status();
      aBuffer = *a;
      bBuffer = *b;
      g.dtype_a = g.dtype_b = rt::DType::bf16;
    } else {
      // cuBLASLt's fp8 kernels take only the "TN" layout (A [m,k] and B
      // [n,k], K contiguous in both) and 16-byte aligned leading dims.
      // llmc-pad-layout pads fp8 GEMMs to multiples of 32.
      if (k % 16 != 0 || n % 16 != 0)
        return unsupported(op, absl::StrCat(
            "an fp8 GEMM with K = ", k, " and N = ", n,
            "; cuBLASLt needs both to be multiples of 16: run llmc-pad-layout "
            "first (every llmc pipeline does; llmc-opt: --llmc-pipeline or "
            "--llmc-pad-layout=\"fp8-only=1\")"));
      // A stored [k,m] or B stored [k,n] is transposed into a scratch buffer
      // on every call (one read and one write of the operand, small next to
      // the GEMM); weight-only operands are candidates for hoisting out of
      // the call.
      if (ta) {
        auto a = l.emitRelayout(op.getLhs(), true, scalarOf(op.getLhs()), op);
        if (!a.ok())
          return a.status();
        aBuffer = *a;
        ta = false;
      }
      if (!tb) {
        auto b = l.emitRelayout(op.getRhs(), true, scalarOf(op.getRhs()), op);
        if (!b.ok())
          return b.status();
        bBuffer = *b;
        tb = true;
      }
    }
  }
  g.transa = ta;
  g.transb = tb;
  g.k = k;
  g.n = n;
  if (rhsBatch == 1 && !ta) {
    // Shared weight: fold every batch dimension of lhs into M.
    g.m = m * lhsBatch;
    g.batch = 1;
  } else {
    if ((lhsBatch != resBatch && lhsBatch != 1) ||
        (rhsBatch != resBatch && rhsBatch != 1))
      return unsupported(
          op, absl::StrCat("batch dimensions [", absl::StrJoin(lhs.getShape().drop_back(2), ","),
                           "] (lhs) and [", absl::StrJoin(rhs.getShape().drop_back(2), ","),
                           "] (rhs) that broadcast only in part; the CUDA backend's GEMMs take "
                           "equal batch counts, or a batch count of 1 on one side (broadcast "
                           "the operand with llm.broadcast first)"));
    g.m = m;
    g.batch = resBatch;
    g.stride_a = lhsBatch == 1 ? 0 : m * k;
    g.stride_b = rhsBatch == 1 ? 0 : k * n;
    g.stride_c = g.stride_d = m * n;
  }
  g.lda = ta ? m : k;
  g.ldb = tb ? k : n;
  g.ldc = g.ldd = n;
  if (aBuffer >= 0)
    g.a = {aBuffer, 0};
  else if (aView)
    g.a = {aView->buffer, aView->byteOffset}, g.lda = aView->ld;
  else
    g.a = l.storageOf(op.getLhs());
  if (bBuffer >= 0)
    g.b = {bBuffer, 0};
  else if (bView)
    g.b = {bView->buffer, bView->byteOffset}, g.ldb = bView->ld;
  else
    g.b = l.storageOf(op.getRhs());
  g.d = l.storageOf(op.getResult());
  g.c = g.d;
  g.beta = 0.f;
  // fp8 scales: cuBLASLt multiplies the accumulator by *scale_a * *scale_b
  // before rounding to D (sm_89+, no bias). A bias goes to cuBLASLt's
  // epilogue, which adds it to the fp32 accumulator, when the operands are
  // not fp8, the bias has D's dtype and is no llm.broadcast, and epilogue
  // fusion is on. Otherwise the GEMM writes fp32 scratch and one elementwise
  // kernel scales, adds the bias and rounds once, as llm.matmul specifies (a
  // bias added to a D already rounded to bf16 would round twice): for every
  // scaled GEMM with a bias or below sm_89 (where the operands were
  // dequantized to bf16 above), and for every other biased GEMM whose D is
  // narrower than fp32. An fp32 D adds its bias in place.
  //
  // A result cuBLASLt cannot write from these operands (llm.matmul allows
  // any float result: bf16 x bf16 -> f16, f32 x f32 -> bf16, an fp8 result,
  // fp8 operands dequantized to bf16 with an f16 result) takes the f32
  // scratch too, the finishing kernel rounding once to the result's type.
  Value bias = op.getBias();
  bool scaled = static_cast<bool>(op.getScaleLhs());
  bool direct = rt::UnsupportedGemmDTypes(g.dtype_a, g.dtype_b, g.dtype_d).empty();
  bool biasInEpilogue = direct && bias && l.getOptions().fuse_gemm_epilogue &&
                        dt(bias) == g.dtype_d && !fp8 && !bias.getDefiningOp<BroadcastOp>();
  if (direct && scaled && g.dtype_a != rt::DType::bf16 && !bias) {
    g.scale_a = l.storageOf(op.getScaleLhs());
    g.scale_b = l.storageOf(op.getScaleRhs());
  } else if (biasInEpilogue) {
    g.epilogue = exec::Epilogue::bias;
    g.bias = l.storageOf(bias);
  } else if (!direct || scaled || (bias && g.dtype_d != rt::DType::f32)) {
    int scratch = l.newArenaBuffer(4 * g.m * g.n * g.batch, l.getStep(), l.getStep());
    g.d = g.c = {scratch, 0};
    g.dtype_c = g.dtype_d = rt::DType::f32;
    l.getBuilder().gemm(g, "llm.matmul");
    return finishGemmFromF32(op, scratch, l);
  }
  l.getBuilder().gemm(g, "llm.matmul");
  if (bias && !biasInEpilogue) {
    // An fp32 D: out = out + cast(bias), bias broadcast along rows, in place.
    cu::ElementwiseProgram prog;
    prog.unroll = l.getKernelConfigs().elementwise_unroll;
    prog.outputs_alias_inputs = true; // out is in0
    const cu::ScalarType out = scalarOf(op.getResult());
    prog.inputs = {{out, cu::InputLayout::kContiguous},
                   {scalarOf(bias), cu::InputLayout::kRowBroadcast}};
    prog.nodes = {cu::EwNode{cu::EwOp::cast, {-2}, out}, cu::EwNode{cu::EwOp::add, {-1, 0}, out}};
    prog.outputs.push_back({1, out});
    int64_t numel = numElements(op.getResult());
    std::vector<KernelArg> args = {l.ptrArg(op.getResult()), l.ptrArg(op.getResult()),
                                   l.ptrArg(bias), i64Arg(numel)};
    std::vector<int64_t> sizes(res.getShape().begin(), res.getShape().end());
    LLMC_ASSIGN_OR_RETURN(KernelArg shape, generated(shapeArg(prog, sizes, {{}, {}}), op));
    args.push_back(std::move(shape));
    return l.launchGenerated(cu::EmitElementwise(prog), cu::ElementwiseLaunch(prog, numel), args,
                             op);
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Decode GEMVs: single, horizontally fused, SwiGLU
//===----------------------------------------------------------------------===//

/// A GEMV's weight: a block of whole weight rows (llmc-shard's
/// column-parallel split) is read in place.
static KernelArg gemvWeightArg(MatmulOp op, Lowering &l) {
  int64_t k = tensorType(op.getLhs()).getShape().back();
  std::optional<MatrixView> w = matrixView(op.getRhs(), l);
  return w && !w->transposed && w->ld == k ? l.bufArg(w->buffer, w->byteOffset)
                                           : l.ptrArg(op.getRhs());
}

/// Groups decode GEMVs that read the same lhs:
///  * mul(silu(matmul(x, Wg)), matmul(x, Wu)), each intermediate used only
///    there and silu + mul alone in their elementwise group: one SwiGLU GEMV
///    at the mul (gate, up and silu(gate) are never stored);
///  * other runs of 2..kMultiGemvMaxOutputs GEMVs of the same x whose
///    results are all used only after the run's last matmul (so none feeds
///    another): one multi-output GEMV at the last matmul.
/// The liveness pass keeps every member's operands live up to the group's
/// launch (emitAt); results are defined no later than it.
absl::Status lowerGemvGroup(const GemvGroup &group, Lowering &l) {
  if (group.silu) {
    MatmulOp gate = group.members[0];
    MatmulOp up = group.members[1];
    cu::SwiGluGemvConfig c;
    swiGluGemvConfig(gate, up, group.silu, group.emitAt, &c); // planned: true
    c.unroll = l.getKernelConfigs().gemv_unroll;
    std::vector<KernelArg> args = {l.ptrArg(group.emitAt->getResult(0)),
                                   l.ptrArg(gate.getLhs()),
                                   gemvWeightArg(gate, l),
                                   gemvWeightArg(up, l),
                                   c.has_bias ? l.ptrArg(gate.getBias()) : nullArg(),
                                   c.has_bias ? l.ptrArg(up.getBias()) : nullArg(),
                                   i64Arg(c.n)};
    return l.launchGenerated(cu::EmitSwiGluGemv(c), cu::SwiGluGemvLaunch(c), args,
                             group.emitAt);
  }
  cu::MultiGemvConfig c;
  c.num_outputs = group.members.size();
  c.unroll = l.getKernelConfigs().gemv_unroll;
  std::vector<KernelArg> args = {l.ptrArg(MatmulOp(group.members[0]).getLhs())};
  for (auto [i, member] : llvm::enumerate(group.members)) {
    MatmulOp mm = member;
    cu::GemvConfig gc;
    decodeGemvConfig(mm, &gc);
    c.dtype = gc.dtype;
    c.m = gc.m;
    c.k = gc.k;
    c.out[i] = gc.out;
    c.n[i] = gc.n;
    c.has_bias[i] = gc.has_bias;
    args.push_back(l.ptrArg(mm.getResult()));
    args.push_back(gemvWeightArg(mm, l));
    args.push_back(gc.has_bias ? l.ptrArg(mm.getBias()) : nullArg());
    args.push_back(i64Arg(gc.n));
  }
  return l.launchGenerated(cu::EmitMultiGemv(c), cu::MultiGemvLaunch(c), args,
                           group.emitAt);
}

void populateMatmulLowerings(OpLoweringSet &set) { set.add<MatmulOp>(lowerMatmul); }

} // namespace llmc::codegen
