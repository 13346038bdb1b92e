//===- ExecBuilder.cpp - the lowering's sink: exec ops, built in order ------===//

#include "ExecBuilder.h"

#include "llmc/Support/DType.h"

#include "absl/strings/str_cat.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

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
  Type type = kind == exec::BufferKind::input ? inputs[ioIndex].getType()
                                              : outputs[ioIndex].getType();
  // Signature types are static tensors of runtime dtypes (addInput/addOutput).
  return addBuffer(kind, *exec::tensorBytes(type), b.getI64IntegerAttr(ioIndex), {}, {});
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

int ExecBuilder::addKernel(StringRef name, StringRef source, bool gridDependency) {
  auto [it, inserted] = kernelIndex.try_emplace(name, kernels.size());
  if (!inserted)
    return it->second;
  insertAfter(b, exe->getBody().front(), {lastSignature, lastBuffer, lastKernel});
  auto op = exec::KernelOp::create(b, b.getUnknownLoc(), b.getStringAttr(name),
                                   StringAttr(), b.getStringAttr(source),
                                   b.getStrArrayAttr({}), DictionaryAttr(),
                                   StringAttr(), StringAttr());
  if (gridDependency)
    op.setGridDependency(true);
  kernels.push_back(op);
  lastKernel = op;
  return it->second;
}

void ExecBuilder::atLaunch(ArrayRef<Value> reads) {
  if (!preparing_) {
    b.setInsertionPointToEnd(&exe->getBody().front());
    return;
  }
  b.setInsertionPointToEnd(&prepare.getBody().front());
  // The preparation runs again when a parameter changes (rt::ParameterGuard):
  // every input it reads is one.
  for (Value v : reads) {
    auto buffer = v.getDefiningOp<exec::BufferOp>();
    if (buffer && buffer.getKind() == exec::BufferKind::input)
      markParameter(static_cast<int>(*buffer.getIoIndex()));
  }
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
    SmallVector<BufferRef, 11> refs = {s.q, s.k, s.v, s.o};
    if (s.lse.buffer >= 0)
      refs.push_back(s.lse);
    if (s.backward)
      refs.append({s.grad_output, s.grad_query, s.grad_key, s.grad_value, s.row_sum,
                   s.dq_accum});
    SmallVector<int64_t, 11> offsets;
    for (BufferRef r : refs) {
      attnOperands.push_back(value(r));
      offsets.push_back(r.offset);
    }
    attnOffsets = b.getDenseI64ArrayAttr(offsets);
    attn = exec::AttentionAttr::get(ctx, s.b, s.sq, s.skv, s.hq, s.hkv, s.d,
                                    b.getBoolAttr(s.causal), b.getF32FloatAttr(s.scale),
                                    toMlirType(ctx, s.dtype));
  }
  atLaunch(operands);
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
  SmallVector<Value> reads = {value(g.a), value(g.b)};
  for (Value v : {c, bias, sa, sb})
    if (v)
      reads.push_back(v);
  atLaunch(reads);
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
  atLaunch({value(src)});
  exec::CopyOp::create(b, b.getUnknownLoc(), b.getI64IntegerAttr(bytes), value(src),
                       offset(src), value(dst), offset(dst), label(name));
}

void ExecBuilder::collective(exec::CollectiveKind kind, exec::Reduction reduction,
                             int64_t count, rt::DType dtype, BufferRef send,
                             BufferRef recv, StringRef name) {
  atLaunch({value(send)});
  exec::CollectiveOp::create(b, b.getUnknownLoc(),
                             exec::CollectiveKindAttr::get(ctx, kind),
                             exec::ReductionAttr::get(ctx, reduction),
                             b.getI64IntegerAttr(count),
                             TypeAttr::get(toMlirType(ctx, dtype)), value(send),
                             offset(send), value(recv), offset(recv), label(name));
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
  // The exec verifier's invariants (sections in order, every output
  // written, the preparation reading parameters only, ...) are the
  // lowering's to keep: a violation is its bug, caught here rather than
  // blamed on a later pass.
  std::string diagnostics;
  ScopedDiagnosticHandler capture(ctx, [&](Diagnostic &d) {
    llvm::raw_string_ostream(diagnostics) << d;
    return success();
  });
  if (failed(verify(*exe)))
    return bug(absl::StrCat("the lowering of @", exe->getSymName().str(),
                            " built invalid exec IR: ", diagnostics));
  return std::move(exe);
}

} // namespace llmc::codegen
