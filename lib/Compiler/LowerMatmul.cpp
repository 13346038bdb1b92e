//===- LowerMatmul.cpp - GEMMs, GEMVs, weight-only --------------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// A rank-2 GEMM operand that is a slice/transpose view of dense storage
/// (e.g. llmc-shard's per-rank rows or columns of a weight, or a transposed
/// weight) read in place through an offset and a leading dimension instead of
/// being copied first. Only for views whose inner stride is 1 in one of the
/// two dims, with 256-byte aligned starts and 16-byte aligned rows (what
/// cuBLASLt's default heuristics assume of every pointer). nullopt: dense
/// already, or not expressible.
std::optional<Lowering::MatrixView> Lowering::matrixView(Value v) {
  auto t = tensorType(v);
  if (t.getRank() != 2)
    return std::nullopt;
  Operation *def = storageRoot(v).getDefiningOp();
  if (!def || !isa<SliceOp, TransposeOp>(def))
    return std::nullopt;
  auto read = stridedRead(v);
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
  mv.buffer = bufferFor(read->root);
  return mv;
}

absl::Status Lowering::emitMatmul(MatmulOp op) {
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
    std::vector<KernelArg> args = {ptrArg(op.getResult()), ptrArg(op.getLhs()),
                                 ptrArg(deq.getPacked()), ptrArg(deq.getScales()),
                                 qc.has_bias ? ptrArg(op.getBias()) : nullArg(),
                                 i64Arg(n)};
    LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                          generated(cu::QuantGemvLaunch(qc), op));
    LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                          generated(cu::EmitQuantGemv(qc), op));
    launch(addKernel(code), dims, std::move(args), op);
    return absl::OkStatus();
  }
  // Decode-shaped projections (a few rows against an nn.Linear weight): the
  // weight read is the whole cost; a GEMV kernel streams it at full bandwidth.
  if (cu::GemvConfig gc; decodeGemvConfig(op, &gc)) {
    std::vector<KernelArg> args = {ptrArg(op.getResult()), ptrArg(op.getLhs()),
                                 gemvWeightArg(op),
                                 gc.has_bias ? ptrArg(op.getBias()) : nullArg(),
                                 i64Arg(n)};
    LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                          generated(cu::GemvLaunch(gc), op));
    LLMC_ASSIGN_OR_RETURN(cu::KernelCode code, generated(cu::EmitGemv(gc), op));
    launch(addKernel(code), dims, std::move(args), op);
    return absl::OkStatus();
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
  if (lhsBatch == 1 && lr == 2 && (aView = matrixView(op.getLhs())))
    ta = ta != aView->transposed;
  if (rhsBatch == 1 && rr == 2 && (bView = matrixView(op.getRhs())))
    tb = tb != bView->transposed;
  bool fp8 = isFp8(g.dtype_a) || isFp8(g.dtype_b);
  if (fp8) {
    // The relayouts below read the logical operands: keep an in-place view
    // only where it already gives cuBLASLt's TN layout on sm_89+.
    bool tn = options.target_sm >= 89;
    if (aView && !(tn && !ta))
      aView.reset(), ta = op.getTransposeLhs();
    if (bView && !(tn && tb))
      bView.reset(), tb = op.getTransposeRhs();
    if (!isFp8(g.dtype_a) || !isFp8(g.dtype_b))
      return unsupported(op, absl::StrCat(
          "a matmul of ", rt::DTypeName(g.dtype_a), " by ",
          rt::DTypeName(g.dtype_b), "; fp8 GEMMs need both operands in fp8"));
    if (g.dtype_d != rt::DType::f32 && g.dtype_d != rt::DType::bf16 &&
        g.dtype_d != rt::DType::f16)
      return unsupported(op, absl::StrCat("an fp8 GEMM with a ",
                                          rt::DTypeName(g.dtype_d),
                                          " result (expected f32, bf16 or f16)"));
    if (options.target_sm < 89) {
      // No fp8 tensor cores below sm_89 (cuBLASLt fp8 needs Ada/Hopper):
      // dequantize both operands to bf16 (exact: every e4m3/e5m2 value is a
      // bf16 value) and run a bf16 GEMM with the same f32 accumulation.
      auto a = emitRelayout(op.getLhs(), false, cu::ScalarType::bf16, op);
      if (!a.ok())
        return a.status();
      auto b = emitRelayout(op.getRhs(), false, cu::ScalarType::bf16, op);
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
            "first (llmc-run and llmc-compile do with --precision=fp8)"));
      // A stored [k,m] or B stored [k,n] is transposed into a scratch buffer
      // on every call (one read and one write of the operand, small next to
      // the GEMM); weight-only operands are candidates for hoisting out of
      // the call.
      if (ta) {
        auto a = emitRelayout(op.getLhs(), true, scalarOf(op.getLhs()), op);
        if (!a.ok())
          return a.status();
        aBuffer = *a;
        ta = false;
      }
      if (!tb) {
        auto b = emitRelayout(op.getRhs(), true, scalarOf(op.getRhs()), op);
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
      return unsupported(op, "partially broadcast batch dimensions");
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
    g.a = {bufferFor(op.getLhs()), 0};
  if (bBuffer >= 0)
    g.b = {bBuffer, 0};
  else if (bView)
    g.b = {bView->buffer, bView->byteOffset}, g.ldb = bView->ld;
  else
    g.b = {bufferFor(op.getRhs()), 0};
  g.d = {bufferFor(op.getResult()), 0};
  g.c = g.d;
  g.beta = 0.f;
  bool separateBias = false;
  if (Value bias = op.getBias()) {
    if (options.fuse_gemm_epilogue && dt(bias) == g.dtype_d && !fp8 &&
        !bias.getDefiningOp<BroadcastOp>()) {
      g.epilogue = exec::Epilogue::bias;
      g.bias = {bufferFor(bias), 0};
    } else {
      separateBias = true;
    }
  }
  builder.gemm(g, "llm.matmul");
  if (separateBias) {
    // out = out + cast(bias), bias broadcast along rows; in place.
    cu::ElementwiseProgram prog;
    prog.unroll = kernelConfigs.elementwise_unroll;
    prog.inputs.push_back({scalarOf(op.getResult()), cu::InputLayout::kContiguous});
    prog.inputs.push_back({scalarOf(op.getBias()), cu::InputLayout::kRowBroadcast});
    cu::EwNode c;
    c.op = cu::EwOp::cast;
    c.type = scalarOf(op.getResult());
    c.operands = {-2};
    cu::EwNode a;
    a.op = cu::EwOp::add;
    a.type = scalarOf(op.getResult());
    a.operands = {-1, 0};
    prog.nodes = {c, a};
    prog.outputs.push_back({1, scalarOf(op.getResult())});
    int64_t numel = numElements(op.getResult());
    std::vector<KernelArg> args = {ptrArg(op.getResult()), ptrArg(op.getResult()),
                                 ptrArg(op.getBias()), i64Arg(numel)};
    std::vector<int64_t> sizes(res.getShape().begin(), res.getShape().end());
    LLMC_ASSIGN_OR_RETURN(KernelArg shape,
                          generated(shapeArg(prog, sizes, {{}, {}}), op));
    args.push_back(std::move(shape));
    LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                          generated(cu::ElementwiseLaunch(prog, numel), op));
    LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                          generated(cu::EmitElementwise(prog), op));
    launch(addKernel(code), dims, std::move(args), op);
  }
  return absl::OkStatus();
}

/// A fresh dense buffer holding `src` (read through its view strides) with
/// its last two dims swapped when `swapLastTwo`, converted to `to`; live for
/// the current step only. One elementwise kernel.
absl::StatusOr<int> Lowering::emitRelayout(Value src, bool swapLastTwo,
                                           cu::ScalarType to, Operation *op) {
  // A parameter's relayout (an fp8 weight into cuBLASLt's [n,k]) is done
  // once per parameter set, into a Persistent buffer shared by its GEMMs.
  bool prep = isHoisted(src);
  auto key = std::make_tuple(src, static_cast<int>(swapLastTwo), static_cast<int>(to));
  if (prep)
    if (auto it = hoistedRelayouts.find(key); it != hoistedRelayouts.end())
      return it->second;
  Preparing scope(builder, prep);
  SmallVector<int64_t> shape(tensorType(src).getShape());
  auto read = stridedRead(src);
  if (!read.ok())
    return read.status();
  SmallVector<int64_t> strides(read->strides);
  if (swapLastTwo) {
    if (shape.size() < 2)
      return unsupported(op, "a transposed operand of rank below 2");
    std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
    std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  }
  if (shape.size() > static_cast<size_t>(cu::kElementwiseMaxRank))
    return unsupported(op, "an operand of rank above 8");
  int64_t numel = numElements(src);
  int dst;
  if (prep) {
    dst = builder.addPersistentBuffer(numel * cu::ScalarSize(to));
    hoistedRelayouts[key] = dst;
  } else {
    dst = newArenaBuffer(numel * cu::ScalarSize(to), step, step);
  }
  cu::ElementwiseProgram prog;
  prog.unroll = kernelConfigs.elementwise_unroll;
  prog.inputs.push_back({scalarOf(src), cu::InputLayout::kStrided});
  cu::EwNode n;
  n.op = cu::EwOp::cast;
  n.type = to;
  n.operands = {-1};
  prog.nodes.push_back(n);
  prog.outputs.push_back({0, to});
  int64_t esize = cu::ScalarSize(scalarOf(src));
  std::vector<KernelArg> args = {bufArg(dst),
                               ptrArg(read->root, read->elementOffset * esize),
                               i64Arg(numel)};
  LLMC_ASSIGN_OR_RETURN(
      KernelArg shapeBytes,
      generated(
          shapeArg(prog, std::vector<int64_t>(shape.begin(), shape.end()),
                   {std::vector<int64_t>(strides.begin(), strides.end())}),
          op));
  args.push_back(std::move(shapeBytes));
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                        generated(cu::ElementwiseLaunch(prog, numel), op));
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                        generated(cu::EmitElementwise(prog), op));
  launch(addKernel(code), dims, std::move(args), op);
  return dst;
}

// pad(x) => zero-filled result with x in its leading corner (one kernel).
absl::Status Lowering::emitPad(PadOp op) {
  auto in = tensorType(op.getInput()), out = tensorType(op.getResult());
  if (in.getRank() == 0 || in.getShape() == out.getShape())
    return emitCopyInto(op.getResult(), op.getInput(), op);
  if (in.getRank() > cu::kPadMaxRank)
    return unsupported(op, absl::StrCat("llm.pad of rank ", in.getRank(),
                                        " (at most ", cu::kPadMaxRank, ")"));
  cu::PadConfig cfg;
  cfg.dtype = scalarOf(op.getInput());
  cfg.rank = static_cast<int>(in.getRank());
  cfg.vec = cu::PadVecWidth(cfg.dtype, in.getShape().back(),
                            out.getShape().back());
  LLMC_ASSIGN_OR_RETURN(
      std::vector<int64_t> packed,
      generated(cu::PackPadShape(std::vector<int64_t>(out.getShape().begin(),
                                                      out.getShape().end()),
                                 std::vector<int64_t>(in.getShape().begin(),
                                                      in.getShape().end())),
                op));
  KernelArg shape = KernelArg::struct_(std::string(
      reinterpret_cast<const char *>(packed.data()), packed.size() * sizeof(int64_t)));
  int64_t numel = out.getNumElements();
  std::vector<KernelArg> args = {ptrArg(op.getResult()), ptrArg(op.getInput()),
                               i64Arg(numel), std::move(shape)};
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                        generated(cu::PadLaunch(cfg, numel), op));
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code, generated(cu::EmitPad(cfg), op));
  launch(addKernel(code), dims, std::move(args), op);
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Decode GEMVs: single, horizontally fused, SwiGLU
//===----------------------------------------------------------------------===//

/// A GEMV's weight: a block of whole weight rows (llmc-shard's
/// column-parallel split) is read in place.
KernelArg Lowering::gemvWeightArg(MatmulOp op) {
  int64_t k = tensorType(op.getLhs()).getShape().back();
  std::optional<MatrixView> w = matrixView(op.getRhs());
  return w && !w->transposed && w->ld == k ? bufArg(w->buffer, w->byteOffset)
                                           : ptrArg(op.getRhs());
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
absl::Status Lowering::emitGemvGroup(const GemvGroup &group) {
  if (group.silu) {
    MatmulOp gate = group.members[0];
    MatmulOp up = group.members[1];
    cu::SwiGluGemvConfig c;
    swiGluGemvConfig(gate, up, group.silu, group.emitAt, &c); // planned: true
    std::vector<KernelArg> args = {
        ptrArg(group.emitAt->getResult(0)), ptrArg(gate.getLhs()),
        gemvWeightArg(gate), gemvWeightArg(up),
        c.has_bias ? ptrArg(gate.getBias()) : nullArg(),
        c.has_bias ? ptrArg(up.getBias()) : nullArg(), i64Arg(c.n)};
    LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                          generated(cu::SwiGluGemvLaunch(c), group.emitAt));
    LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                          generated(cu::EmitSwiGluGemv(c), group.emitAt));
    launch(addKernel(code), dims, std::move(args), group.emitAt);
    return absl::OkStatus();
  }
  cu::MultiGemvConfig c;
  c.num_outputs = group.members.size();
  std::vector<KernelArg> args = {ptrArg(MatmulOp(group.members[0]).getLhs())};
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
    args.push_back(ptrArg(mm.getResult()));
    args.push_back(gemvWeightArg(mm));
    args.push_back(gc.has_bias ? ptrArg(mm.getBias()) : nullArg());
    args.push_back(i64Arg(gc.n));
  }
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                        generated(cu::MultiGemvLaunch(c), group.emitAt));
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                        generated(cu::EmitMultiGemv(c), group.emitAt));
  launch(addKernel(code), dims, std::move(args), group.emitAt);
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Weight-only quantization
//===----------------------------------------------------------------------===//

/// The quantize/dequantize kernel configuration of `op` (bits, group size,
/// float side `dtype`); Unimplemented naming the op when unsupported.
absl::StatusOr<cu::WeightQuantConfig>
Lowering::weightQuantConfig(Operation *op, int64_t bits, int64_t group,
                            cu::ScalarType dtype) {
  cu::WeightQuantConfig cfg;
  cfg.bits = bits;
  cfg.group = group;
  cfg.dtype = dtype;
  if (!cu::WeightQuantSupported(cfg))
    return unsupported(op, "weight (de)quantization with this bits/group_size "
                           "(supported: 4 or 8 bits, group_size a multiple of 64)");
  return cfg;
}

absl::Status Lowering::emitQuantizeWeight(QuantizeWeightOp op) {
  auto cfgOr = weightQuantConfig(op, op.getBits(), op.getGroupSize(),
                                 scalarOf(op.getWeight()));
  if (!cfgOr.ok())
    return cfgOr.status();
  const cu::WeightQuantConfig &cfg = *cfgOr;
  auto w = tensorType(op.getWeight());
  int64_t n = w.getDimSize(0), k = w.getDimSize(1);
  std::vector<KernelArg> args = {ptrArg(op.getPacked()), ptrArg(op.getScales()),
                               ptrArg(op.getWeight()), i64Arg(n), i64Arg(k)};
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                        generated(cu::QuantizeWeightLaunch(cfg, n, k), op));
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                        generated(cu::EmitQuantizeWeight(cfg), op));
  launch(addKernel(code), dims, std::move(args), op);
  return absl::OkStatus();
}

absl::Status Lowering::emitDequantizeWeight(DequantizeWeightOp op) {
  // Nothing to do when every user is a fused GEMV.
  if (llvm::all_of(op->getUsers(), [&](Operation *user) {
        cu::QuantGemvConfig qc;
        auto mm = dyn_cast<MatmulOp>(user);
        return mm && mm.getRhs() == op.getResult() && mm.getLhs() != op.getResult() &&
               (!mm.getBias() || mm.getBias() != op.getResult()) &&
               fusedDequantGemv(mm, &qc);
      }))
    return absl::OkStatus();
  auto cfgOr = weightQuantConfig(op, op.getBits(), op.getGroupSize(),
                                 scalarOf(op.getResult()));
  if (!cfgOr.ok())
    return cfgOr.status();
  const cu::WeightQuantConfig &cfg = *cfgOr;
  auto t = tensorType(op.getResult());
  int64_t n = t.getDimSize(0), k = t.getDimSize(1);
  std::vector<KernelArg> args = {ptrArg(op.getResult()), ptrArg(op.getPacked()),
                               ptrArg(op.getScales()), i64Arg(n), i64Arg(k)};
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                        generated(cu::DequantizeWeightLaunch(cfg, n, k), op));
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                        generated(cu::EmitDequantizeWeight(cfg), op));
  launch(addKernel(code), dims, std::move(args), op);
  return absl::OkStatus();
}

} // namespace llmc::codegen
