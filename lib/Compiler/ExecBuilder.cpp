//===- ExecBuilder.cpp - the lowering's sink: exec ops, built in order ------===//

#include "ExecBuilder.h"

#include "llmc/Support/DType.h"

#include "absl/strings/str_cat.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

namespace llmc::codegen {

ExecBuilder::ExecBuilder(MLIRContext &context, StringRef name, int64_t prepStepShift)
    : ctx(&context), b(&context), prepStepShift(prepStepShift) {
  context.getOrLoadDialect<exec::ExecDialect>();
  Location loc = UnknownLoc::get(ctx);
  exe = exec::ExecutableOp::create(b, loc, b.getStringAttr(name), IntegerAttr(),
                                   DictionaryAttr());
  b.setInsertionPointToStart(&exe->getBody().emplaceBlock());
  // Every section is inserted before the preparation region, every per-call
  // launch after it (finish() drops it when empty).
  prepare = exec::PrepareOp::create(b, loc);
  prepare.getBody().emplaceBlock();
}

/// Positions `b` after the last op of the latest nonempty section among
/// `sections` (searched from the back), else at the start of the block.
static void insertAfter(OpBuilder &b, Block &block,
                        std::initializer_list<Operation *> sections) {
  for (Operation *op : llvm::reverse(sections))
    if (op) {
      b.setInsertionPointAfter(op);
      return;
    }
  b.setInsertionPointToStart(&block);
}

void ExecBuilder::addInput(StringRef name, ArrayRef<int64_t> shape, rt::DType dtype) {
  insertAfter(b, exe->getBody().front(), {lastSignature});
  auto op = exec::InputOp::create(b, b.getUnknownLoc(), name,
                                  RankedTensorType::get(shape, toMlirType(ctx, dtype)),
                                  /*parameter=*/false);
  inputs.push_back(op);
  lastSignature = op;
}

void ExecBuilder::addOutput(StringRef name, ArrayRef<int64_t> shape, rt::DType dtype) {
  insertAfter(b, exe->getBody().front(), {lastSignature});
  auto op = exec::OutputOp::create(b, b.getUnknownLoc(), name,
                                   RankedTensorType::get(shape, toMlirType(ctx, dtype)),
                                   IntegerAttr());
  outputs.push_back(op);
  lastSignature = op;
}

void ExecBuilder::markParameter(int input) { inputs[input].setParameter(true); }

void ExecBuilder::setAliasInput(int output, int input) {
  outputs[output].setAliasInputAttr(b.getI64IntegerAttr(input));
}

int64_t ExecBuilder::outputBytes(int output) {
  auto type = cast<RankedTensorType>(outputs[output].getType());
  return type.getNumElements() * rt::DTypeSize(*toRuntimeDType(type.getElementType()));
}

int ExecBuilder::addBuffer(exec::BufferKind kind, int64_t bytes, IntegerAttr ioIndex,
                           DenseI64ArrayAttr live, StringAttr data) {
  insertAfter(b, exe->getBody().front(), {lastSignature, lastBuffer});
  auto op = exec::BufferOp::create(b, b.getUnknownLoc(), exec::BufferType::get(ctx),
                                   exec::BufferKindAttr::get(ctx, kind),
                                   b.getI64IntegerAttr(bytes), ioIndex, live,
                                   IntegerAttr(), data);
  buffers.push_back(op);
  lastBuffer = op;
  return static_cast<int>(buffers.size()) - 1;
}

int ExecBuilder::addIOBuffer(exec::BufferKind kind, int ioIndex) {
  int64_t bytes;
  if (kind == exec::BufferKind::input) {
    auto type = cast<RankedTensorType>(inputs[ioIndex].getType());
    bytes = type.getNumElements() * rt::DTypeSize(*toRuntimeDType(type.getElementType()));
  } else {
    bytes = outputBytes(ioIndex);
  }
  return addBuffer(kind, bytes, b.getI64IntegerAttr(ioIndex), {}, {});
}

int ExecBuilder::addArenaBuffer(int64_t bytes, int64_t firstStep, int64_t lastStep) {
  int64_t shift = preparing_ ? prepStepShift : 0;
  return addBuffer(exec::BufferKind::arena, bytes, {},
                   b.getDenseI64ArrayAttr({firstStep - shift, lastStep - shift}), {});
}

int ExecBuilder::addConstantBuffer(int64_t bytes, StringRef data) {
  return addBuffer(exec::BufferKind::constant, bytes, {}, {}, b.getStringAttr(data));
}

int ExecBuilder::addPersistentBuffer(int64_t bytes) {
  return addBuffer(exec::BufferKind::persistent, bytes, {}, {}, {});
}

void ExecBuilder::makePersistent(int id) {
  exec::BufferOp op = buffers[id];
  op.setKindAttr(exec::BufferKindAttr::get(ctx, exec::BufferKind::persistent));
  op.removeLiveAttr();
}

int ExecBuilder::addKernel(StringRef name, StringRef source) {
  auto [it, inserted] = kernelIndex.try_emplace(name, kernels.size());
  if (!inserted)
    return it->second;
  insertAfter(b, exe->getBody().front(), {lastSignature, lastBuffer, lastKernel});
  auto op = exec::KernelOp::create(b, b.getUnknownLoc(), b.getStringAttr(name),
                                   StringAttr(), b.getStringAttr(source),
                                   b.getStrArrayAttr({}), DictionaryAttr(),
                                   StringAttr(), StringAttr());
  kernels.push_back(op);
  lastKernel = op;
  return it->second;
}

void ExecBuilder::atLaunch() {
  if (preparing_)
    b.setInsertionPointToEnd(&prepare.getBody().front());
  else
    b.setInsertionPointToEnd(&exe->getBody().front());
}

void ExecBuilder::launch(int kernel, ArrayRef<int64_t> grid, ArrayRef<int64_t> block,
                         int64_t smem, ArrayRef<KernelArg> args, StringRef name,
                         const AttentionAttachment *attention) {
  SmallVector<Value> operands;
  SmallVector<Attribute> attrs;
  for (const KernelArg &a : args) {
    switch (a.kind) {
    case KernelArg::Buffer:
      operands.push_back(value(a.ref));
      attrs.push_back(b.getIndexAttr(a.ref.offset));
      break;
    case KernelArg::I32:
      if ((a.i < INT32_MIN || a.i > INT32_MAX) && internalError.empty())
        internalError = absl::StrCat("an i32 argument of '", name.str(), "' is ", a.i);
      attrs.push_back(b.getI32IntegerAttr(static_cast<int32_t>(a.i)));
      break;
    case KernelArg::I64: attrs.push_back(b.getI64IntegerAttr(a.i)); break;
    case KernelArg::F32: attrs.push_back(b.getF32FloatAttr(a.f)); break;
    case KernelArg::Bytes: attrs.push_back(b.getStringAttr(a.bytes)); break;
    }
  }
  SmallVector<Value> attnOperands;
  DenseI64ArrayAttr attnOffsets;
  exec::AttentionAttr attn;
  if (attention) {
    const AttentionAttachment &s = *attention;
    for (BufferRef r : {s.q, s.k, s.v, s.o})
      attnOperands.push_back(value(r));
    attnOffsets = b.getDenseI64ArrayAttr({s.q.offset, s.k.offset, s.v.offset, s.o.offset});
    attn = exec::AttentionAttr::get(ctx, s.b, s.sq, s.skv, s.hq, s.hkv, s.d,
                                    b.getBoolAttr(s.causal), b.getF32FloatAttr(s.scale),
                                    toMlirType(ctx, s.dtype));
  }
  atLaunch();
  exec::LaunchOp::create(b, b.getUnknownLoc(),
                         FlatSymbolRefAttr::get(kernels[kernel].getSymNameAttr()),
                         b.getDenseI64ArrayAttr(grid), b.getDenseI64ArrayAttr(block),
                         b.getI64IntegerAttr(smem), operands, b.getArrayAttr(attrs),
                         attnOperands, attnOffsets, attn, label(name));
}

void ExecBuilder::gemm(const GemmDesc &g, StringRef name) {
  auto optional = [&](BufferRef r) -> std::pair<Value, IntegerAttr> {
    if (r.buffer < 0)
      return {};
    return {value(r), offset(r)};
  };
  auto [c, co] = optional(g.c);
  auto [bias, biaso] = optional(g.bias);
  auto [sa, sao] = optional(g.scale_a);
  auto [sb, sbo] = optional(g.scale_b);
  auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
  auto type = [&](rt::DType t) { return TypeAttr::get(toMlirType(ctx, t)); };
  atLaunch();
  exec::GemmOp::create(
      b, b.getUnknownLoc(), i64(g.m), i64(g.n), i64(g.k), i64(g.batch), i64(g.stride_a),
      i64(g.stride_b), i64(g.stride_c), i64(g.stride_d),
      g.transa ? b.getUnitAttr() : UnitAttr(), g.transb ? b.getUnitAttr() : UnitAttr(),
      i64(g.lda), i64(g.ldb), i64(g.ldc), i64(g.ldd), type(g.dtype_a), type(g.dtype_b),
      type(g.dtype_c), type(g.dtype_d), type(g.compute), b.getF32FloatAttr(g.alpha),
      b.getF32FloatAttr(g.beta), exec::EpilogueAttr::get(ctx, g.epilogue), value(g.a),
      offset(g.a), value(g.b), offset(g.b), c, co, value(g.d), offset(g.d), bias, biaso,
      sa, sao, sb, sbo, label(name));
}

void ExecBuilder::copy(BufferRef src, BufferRef dst, int64_t bytes, StringRef name) {
  atLaunch();
  exec::CopyOp::create(b, b.getUnknownLoc(), b.getI64IntegerAttr(bytes), value(src),
                       offset(src), value(dst), offset(dst), label(name));
}

void ExecBuilder::collective(exec::CollectiveKind kind, exec::Reduction reduction,
                             int64_t count, rt::DType dtype, BufferRef send,
                             BufferRef recv, StringRef name) {
  atLaunch();
  exec::CollectiveOp::create(b, b.getUnknownLoc(),
                             exec::CollectiveKindAttr::get(ctx, kind),
                             exec::ReductionAttr::get(ctx, reduction),
                             b.getI64IntegerAttr(count),
                             TypeAttr::get(toMlirType(ctx, dtype)), value(send),
                             offset(send), value(recv), offset(recv), label(name));
}

/// The buffers a launch writes: every buffer of a kernel launch (its
/// arguments do not say which it writes), a GEMM's D, a collective's
/// receive buffer, a copy's destination.
static SmallVector<Value> writtenBuffers(Operation *op) {
  if (auto l = dyn_cast<exec::LaunchOp>(op))
    return SmallVector<Value>(l.getBuffers());
  if (auto g = dyn_cast<exec::GemmOp>(op))
    return {g.getD()};
  if (auto c = dyn_cast<exec::CollectiveOp>(op))
    return {c.getRecv()};
  if (auto c = dyn_cast<exec::CopyOp>(op))
    return {c.getDst()};
  return {};
}

absl::StatusOr<OwningOpRef<exec::ExecutableOp>> ExecBuilder::finish() {
  auto bug = [&](const std::string &what) {
    return absl::InternalError(
        absl::StrCat("llmc internal error (please report): ", what));
  };
  if (!internalError.empty())
    return bug(absl::StrCat(internalError, " in @", exe->getSymName().str()));
  if (prepare.getBody().front().empty())
    prepare.erase();
  // Every output must be the destination of some launch; a result whose
  // storage nothing writes would silently return the caller's uninitialized
  // memory.
  llvm::SmallDenseSet<int64_t> written;
  exe->walk([&](Operation *op) {
    for (Value v : writtenBuffers(op)) {
      auto buffer = v.getDefiningOp<exec::BufferOp>();
      if (buffer.getKind() == exec::BufferKind::output)
        written.insert(*buffer.getIoIndex());
    }
  });
  for (auto [i, out] : llvm::enumerate(outputs))
    if (!written.contains(i) && cast<RankedTensorType>(out.getType()).getNumElements() > 0)
      return bug(absl::StrCat("result ", i, " of @", exe->getSymName().str(),
                              " is never written by the compiled code"));
  return std::move(exe);
}

} // namespace llmc::codegen
