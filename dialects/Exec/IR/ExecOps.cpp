//===- ExecOps.cpp - exec dialect operations -----------------------------===//
//
// Verifiers, the launch-argument syntax and the buffers' result names.
//
//===----------------------------------------------------------------------===//

#include "Exec/IR/ExecOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <tuple>

using namespace mlir;
using namespace llmc::exec;

#include "Exec/IR/ExecEnums.cpp.inc"

std::optional<int64_t> llmc::exec::elementBytes(Type t) {
  if (t.isF32() || t.isInteger(32))
    return 4;
  if (t.isF16() || t.isBF16())
    return 2;
  if (isa<Float8E4M3FNType, Float8E5M2Type>(t) || t.isInteger(1) || t.isInteger(8))
    return 1;
  if (t.isInteger(64))
    return 8;
  return std::nullopt;
}

std::optional<int64_t> llmc::exec::tensorBytes(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape())
    return std::nullopt;
  std::optional<int64_t> size = elementBytes(t.getElementType());
  if (!size)
    return std::nullopt;
  int64_t n = *size;
  for (int64_t d : t.getShape())
    if (llvm::MulOverflow(n, d, n))
      return std::nullopt;
  return n;
}

bool llmc::exec::isLaunchLike(Operation *op) {
  return isa<LaunchOp, GemmOp, CopyOp, CollectiveOp>(op);
}

namespace {

constexpr llvm::StringLiteral kElementTypes =
    "f32, f16, bf16, f8E4M3FN, f8E5M2, i1, i8, i32 or i64";

/// Bytes of `buffer` when an exec.buffer defines it.
std::optional<int64_t> bufferBytes(Value buffer) {
  if (auto def = buffer.getDefiningOp<BufferOp>())
    return def.getBytes();
  return std::nullopt;
}

/// `what`'s range [offset, offset + extent) lies inside `buffer`.
LogicalResult verifyRange(Operation *op, StringRef what, Value buffer,
                          int64_t offset, int64_t extent) {
  std::optional<int64_t> bytes = bufferBytes(buffer);
  if (offset < 0 || (bytes && (offset > *bytes || extent > *bytes - offset)))
    return op->emitOpError() << "expected " << what << " [" << offset << ", +"
                             << extent << ") inside its buffer of "
                             << (bytes ? *bytes : 0) << " bytes, found it outside";
  return success();
}

LogicalResult verifyElementType(Operation *op, StringRef what, Type t) {
  if (!elementBytes(t))
    return op->emitOpError() << "expected " << what << " of " << kElementTypes
                             << ", found " << t;
  return success();
}

LogicalResult verifyDim3(Operation *op, StringRef what, ArrayRef<int64_t> dims) {
  if (dims.size() != 3)
    return op->emitOpError() << "expected " << what << " of 3 dimensions, found "
                             << dims.size();
  // The runtime's bound (rt::Executable::Validate checks the tighter
  // per-dimension limits of CUDA).
  for (int64_t d : dims)
    if (d < 1 || d > int64_t(INT32_MAX))
      return op->emitOpError() << "expected " << what
                               << " dimensions in [1, 2^31), found " << d;
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Custom directives
//===----------------------------------------------------------------------===//

/// `(%b[offset], 5 : i32, 7, 1.0 : f32, "bytes")`: a buffer pointer is an
/// index-typed offset in `args` and the next operand in `buffers`.
static ParseResult
parseLaunchArgs(OpAsmParser &p, SmallVectorImpl<OpAsmParser::UnresolvedOperand> &buffers,
                ArrayAttr &args) {
  SmallVector<Attribute> list;
  Builder b(p.getContext());
  if (p.parseCommaSeparatedList(OpAsmParser::Delimiter::Paren, [&]() -> ParseResult {
        OpAsmParser::UnresolvedOperand operand;
        OptionalParseResult isOperand = p.parseOptionalOperand(operand);
        if (isOperand.has_value()) {
          int64_t offset = 0;
          if (failed(*isOperand) || p.parseLSquare() || p.parseInteger(offset) ||
              p.parseRSquare())
            return failure();
          buffers.push_back(operand);
          list.push_back(b.getIndexAttr(offset));
          return success();
        }
        Attribute attr;
        if (p.parseAttribute(attr))
          return failure();
        list.push_back(attr);
        return success();
      }))
    return failure();
  args = b.getArrayAttr(list);
  return success();
}

static void printLaunchArgs(OpAsmPrinter &p, Operation *, OperandRange buffers,
                            ArrayAttr args) {
  p << "(";
  unsigned next = 0;
  llvm::interleaveComma(args, p, [&](Attribute a) {
    auto i = dyn_cast<IntegerAttr>(a);
    if (i && i.getType().isIndex() && next < buffers.size()) {
      p << buffers[next++] << "[" << i.getInt() << "]";
      return;
    }
    p.printAttribute(a);
  });
  p << ")";
}

/// `%q[0], %k[0], ...`: buffers with byte offsets.
static ParseResult
parseBufferRefs(OpAsmParser &p, SmallVectorImpl<OpAsmParser::UnresolvedOperand> &buffers,
                DenseI64ArrayAttr &offsets) {
  SmallVector<int64_t> values;
  if (p.parseCommaSeparatedList([&]() -> ParseResult {
        OpAsmParser::UnresolvedOperand operand;
        int64_t offset = 0;
        if (p.parseOperand(operand) || p.parseLSquare() || p.parseInteger(offset) ||
            p.parseRSquare())
          return failure();
        buffers.push_back(operand);
        values.push_back(offset);
        return success();
      }))
    return failure();
  offsets = DenseI64ArrayAttr::get(p.getContext(), values);
  return success();
}

static void printBufferRefs(OpAsmPrinter &p, Operation *, OperandRange buffers,
                            DenseI64ArrayAttr offsets) {
  for (auto [i, b] : llvm::enumerate(buffers)) {
    if (i)
      p << ", ";
    p << b << "[" << (offsets && i < offsets.size() ? offsets[i] : 0) << "]";
  }
}

#define GET_OP_CLASSES
#include "Exec/IR/ExecOps.cpp.inc"

//===----------------------------------------------------------------------===//
// exec.executable
//===----------------------------------------------------------------------===//

SmallVector<InputOp, 4> ExecutableOp::getInputs() {
  return llvm::to_vector<4>(getBody().front().getOps<InputOp>());
}

SmallVector<OutputOp, 4> ExecutableOp::getOutputs() {
  return llvm::to_vector<4>(getBody().front().getOps<OutputOp>());
}

LogicalResult ExecutableOp::verify() {
  if (getArenaBytes() && *getArenaBytes() < 0)
    return emitOpError() << "expected non-negative arena_bytes, found "
                         << *getArenaBytes();
  if (auto bindings = getSymbolBindingsAttr())
    for (NamedAttribute b : bindings)
      if (auto v = dyn_cast<IntegerAttr>(b.getValue()); !v || !v.getType().isSignlessInteger(64))
        return emitOpError() << "expected an i64 binding for '"
                             << b.getName().strref() << "', found " << b.getValue();
  return success();
}

LogicalResult ExecutableOp::verifyRegions() {
  SmallVector<InputOp, 4> inputs = getInputs();
  SmallVector<OutputOp, 4> outputs = getOutputs();
  Block &body = getBody().front();
  for (OutputOp out : outputs)
    if (std::optional<int64_t> alias = out.getAliasInput()) {
      if (*alias < 0 || *alias >= static_cast<int64_t>(inputs.size()))
        return out.emitOpError() << "expected alias_input below " << inputs.size()
                                 << " (the number of inputs), found " << *alias;
      if (inputs[*alias].getType() != out.getType())
        return out.emitOpError() << "expected aliased input " << *alias
                                 << " of type " << out.getType() << ", found "
                                 << inputs[*alias].getType();
    }
  SmallVector<Operation *> outputBuffers(outputs.size(), nullptr);
  bool sawLaunch = false;
  int prepares = 0;
  // The block's sections in order: signature, buffers, kernels, launches.
  auto section = [](Operation &op) {
    return isa<InputOp, OutputOp>(op) ? 0 : isa<BufferOp>(op) ? 1 : isa<KernelOp>(op) ? 2 : 3;
  };
  static const char *const kSections[] = {"the signature (exec.input, exec.output)",
                                          "the buffers", "the kernels",
                                          "the launches (and exec.prepare)"};
  int lastSection = 0;
  for (Operation &op : body) {
    if (section(op) < lastSection)
      return op.emitOpError() << "expected " << kSections[section(op)] << " before "
                              << kSections[lastSection];
    lastSection = section(op);
    if (isLaunchLike(&op))
      sawLaunch = true;
    if (auto prepare = dyn_cast<PrepareOp>(op)) {
      if (++prepares > 1)
        return op.emitOpError() << "expected at most one exec.prepare, found "
                                << prepares;
      if (sawLaunch)
        return op.emitOpError()
               << "expected exec.prepare before every launch, found it after one";
      // It runs once per parameter set (rt::ParameterGuard keys on the
      // parameter inputs): an input it reads that is not one would be read
      // once and never again.
      for (Operation &launch : prepare.getBody().front())
        for (Value operand : launch.getOperands()) {
          auto buffer = operand.getDefiningOp<BufferOp>();
          if (!buffer || buffer.getKind() != BufferKind::input || !buffer.getIoIndex() ||
              *buffer.getIoIndex() < 0 ||
              *buffer.getIoIndex() >= static_cast<int64_t>(inputs.size()))
            continue;
          if (!inputs[*buffer.getIoIndex()].getParameter())
            return launch.emitOpError()
                   << "in exec.prepare expected to read parameter inputs only, found input "
                   << *buffer.getIoIndex() << " (not marked parameter)";
        }
    }
    auto buffer = dyn_cast<BufferOp>(op);
    if (!buffer)
      continue;
    if (std::optional<int64_t> io = buffer.getIoIndex()) {
      bool isInput = buffer.getKind() == BufferKind::input;
      size_t count = isInput ? inputs.size() : outputs.size();
      if (*io >= static_cast<int64_t>(count))
        return buffer.emitOpError()
               << "expected io_index below " << count << " (the number of "
               << (isInput ? "inputs" : "outputs") << "), found " << *io;
      Type t = isInput ? inputs[*io].getType() : outputs[*io].getType();
      std::optional<int64_t> bytes = tensorBytes(t);
      if (bytes && *bytes != buffer.getBytes())
        return buffer.emitOpError()
               << "expected " << *bytes << " bytes (" << (isInput ? "input " : "output ")
               << *io << ", " << t << "), found " << buffer.getBytes();
    }
    if (std::optional<int64_t> offset = buffer.getOffset(); offset && getArenaBytes())
      if (buffer.getBytes() > *getArenaBytes() - *offset)
        return buffer.emitOpError()
               << "expected the arena buffer inside arena_bytes (" << *getArenaBytes()
               << "), found " << buffer.getBytes() << " bytes at offset " << *offset;
    if (buffer.getKind() == BufferKind::output) {
      int64_t io = *buffer.getIoIndex();
      if (outputBuffers[io])
        return buffer.emitOpError() << "expected one output buffer for output " << io
                                    << ", found a second";
      outputBuffers[io] = buffer;
    }
  }
  // Every output is a buffer that some launch writes (a kernel's pointer
  // argument, a GEMM's D, a collective's recv, a copy's destination): the
  // caller would otherwise read memory nothing wrote.
  for (auto [io, buffer] : llvm::enumerate(outputBuffers)) {
    std::optional<int64_t> bytes = tensorBytes(outputs[io].getType());
    if (bytes && *bytes == 0)
      continue;
    if (!buffer)
      return outputs[io].emitOpError() << "expected an output buffer for output " << io
                                       << ", found none";
    bool written = llvm::any_of(buffer->getResult(0).getUses(), [](OpOperand &use) {
      Operation *user = use.getOwner();
      if (auto gemm = dyn_cast<GemmOp>(user))
        return use.get() == gemm.getD();
      if (auto c = dyn_cast<CollectiveOp>(user))
        return use.get() == c.getRecv();
      if (auto copy = dyn_cast<CopyOp>(user))
        return use.get() == copy.getDst();
      if (auto launch = dyn_cast<LaunchOp>(user))
        return llvm::is_contained(launch.getBuffers(), use.get());
      return false;
    });
    if (!written)
      return buffer->emitOpError() << "expected output " << io
                                   << " to be written by a launch, GEMM, collective or "
                                      "copy, found no writer";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Signature, buffers, kernels
//===----------------------------------------------------------------------===//

LogicalResult InputOp::verify() {
  return verifyElementType(*this, "an element type",
                           cast<RankedTensorType>(getType()).getElementType());
}

LogicalResult OutputOp::verify() {
  return verifyElementType(*this, "an element type",
                           cast<RankedTensorType>(getType()).getElementType());
}

void BufferOp::getAsmResultNames(function_ref<void(Value, StringRef)> setName) {
  int index = 0;
  for (Operation &op : *(*this)->getBlock()) {
    if (&op == getOperation())
      break;
    index += isa<BufferOp>(op);
  }
  setName(getResult(), ("b" + llvm::Twine(index)).str());
}

LogicalResult BufferOp::verify() {
  BufferKind kind = getKind();
  StringRef name = stringifyBufferKind(kind);
  if (getBytes() < 0)
    return emitOpError() << "expected non-negative bytes, found " << getBytes();
  bool io = kind == BufferKind::input || kind == BufferKind::output;
  if (io && !getIoIndex())
    return emitOpError() << "expected an io_index on an " << name
                         << " buffer, found none";
  if (!io && getIoIndex())
    return emitOpError() << "expected no io_index on a " << name << " buffer, found "
                         << *getIoIndex();
  if (getIoIndex() && *getIoIndex() < 0)
    return emitOpError() << "expected a non-negative io_index, found " << *getIoIndex();
  if (kind != BufferKind::arena && (getLive() || getOffset()))
    return emitOpError() << "expected live and offset only on arena buffers, found "
                            "them on a "
                         << name << " buffer";
  if (std::optional<ArrayRef<int64_t>> live = getLive())
    if (live->size() != 2 || (*live)[0] > (*live)[1])
      return emitOpError() << "expected live = [first, last] with first <= last, found "
                           << getLiveAttr();
  if (getOffset() && *getOffset() < 0)
    return emitOpError() << "expected a non-negative offset, found " << *getOffset();
  if (kind == BufferKind::constant) {
    if (!getData())
      return emitOpError() << "expected data on a constant buffer, found none";
    if (static_cast<int64_t>(getData()->size()) != getBytes())
      return emitOpError() << "expected " << getBytes() << " bytes of data, found "
                           << getData()->size();
  } else if (getData()) {
    return emitOpError() << "expected data only on constant buffers, found it on a "
                         << name << " buffer";
  }
  return success();
}

LogicalResult KernelOp::verify() {
  if (DictionaryAttr headers = getHeadersAttr())
    for (NamedAttribute h : headers)
      if (!isa<StringAttr>(h.getValue()))
        return emitOpError() << "expected the contents of header '"
                             << h.getName().strref() << "' as a string, found "
                             << h.getValue();
  return success();
}

//===----------------------------------------------------------------------===//
// Launches
//===----------------------------------------------------------------------===//

LogicalResult LaunchOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto exe = (*this)->getParentOfType<ExecutableOp>();
  if (!exe || !symbolTable.lookupNearestSymbolFrom<KernelOp>(exe, getKernelAttr()))
    return emitOpError() << "expected " << getKernelAttr()
                         << " to name an exec.kernel, found none";
  return success();
}

LogicalResult LaunchOp::verify() {
  if (failed(verifyDim3(*this, "grid", getGrid())) ||
      failed(verifyDim3(*this, "block", getBlock())))
    return failure();
  if (getSmem() < 0 || getSmem() > int64_t(UINT32_MAX))
    return emitOpError() << "expected smem in [0, 2^32), found " << getSmem();
  size_t pointers = 0;
  for (auto [i, a] : llvm::enumerate(getArgs())) {
    auto integer = dyn_cast<IntegerAttr>(a);
    auto fp = dyn_cast<FloatAttr>(a);
    bool ok = isa<StringAttr>(a) || (fp && fp.getType().isF32()) ||
              (integer && (integer.getType().isIndex() ||
                           integer.getType().isSignlessInteger(32) ||
                           integer.getType().isSignlessInteger(64)));
    if (!ok)
      return emitOpError() << "expected argument " << i
                           << " to be a buffer pointer, i32, i64, f32 or bytes, found "
                           << a;
    if (!integer || !integer.getType().isIndex())
      continue;
    if (pointers < getBuffers().size() &&
        failed(verifyRange(*this, ("argument " + llvm::Twine(i)).str(),
                           getBuffers()[pointers], integer.getInt(), 0)))
      return failure();
    ++pointers;
  }
  if (pointers != getBuffers().size())
    return emitOpError() << "expected " << pointers
                         << " buffer operands (one per pointer argument), found "
                         << getBuffers().size();
  size_t attention = getAttentionBuffers().size();
  if (getAttention() ? attention != 4 && attention != 5 && attention != 11 : attention != 0)
    return emitOpError() << "expected " << (getAttention() ? "4, 5 or 11" : "0")
                         << " attention operands (q, k, v, o[, lse] or a backward's q, k, "
                            "v, o, lse, dO, dQ, dK, dV, row sum, dQ accumulator), found "
                         << attention;
  size_t offsets = getAttentionOffsets() ? getAttentionOffsets()->size() : 0;
  if (offsets != attention)
    return emitOpError() << "expected " << attention
                         << " attention offsets (one per attention operand), found "
                         << offsets;
  if (attention) {
    for (auto [b, o] : llvm::zip(getAttentionBuffers(), *getAttentionOffsets()))
      if (failed(verifyRange(*this, "attention operand", b, o, 0)))
        return failure();
  }
  return success();
}

LogicalResult GemmOp::verify() {
  for (auto [name, v] : {std::pair<StringRef, int64_t>{"m", getM()},
                         {"n", getN()}, {"k", getK()}, {"batch", getBatch()}})
    if (v <= 0)
      return emitOpError() << "expected " << name << " > 0, found " << v;
  for (auto [name, t] : {std::pair<StringRef, Type>{"dtype_a", getDtypeA()},
                         {"dtype_b", getDtypeB()}, {"dtype_c", getDtypeC()},
                         {"dtype_d", getDtypeD()}})
    if (failed(verifyElementType(*this, name, t)))
      return failure();
  if (!getCompute().isF32())
    return emitOpError() << "expected compute f32, found " << getCompute();
  // An optional operand comes with its offset, and an offset with its operand.
  for (auto [what, b, offset] :
       {std::tuple<StringRef, Value, std::optional<int64_t>>{"c", getC(), getCOffset()},
        {"bias", getBias(), getBiasOffset()},
        {"scale_a", getScaleA(), getScaleAOffset()},
        {"scale_b", getScaleB(), getScaleBOffset()}})
    if (static_cast<bool>(b) != offset.has_value())
      return emitOpError() << "expected operand " << what << " and " << what
                           << "_offset together, found "
                           << (b ? "the operand without its offset"
                                 : "an offset without the operand");
  auto ref = [&](StringRef what, Value b, std::optional<int64_t> offset) {
    return !b || succeeded(verifyRange(*this, ("operand " + what).str(), b,
                                       offset.value_or(0), 0));
  };
  if (!ref("a", getA(), getAOffset()) || !ref("b", getB(), getBOffset()) ||
      !ref("c", getC(), getCOffset()) || !ref("d", getD(), getDOffset()) ||
      !ref("bias", getBias(), getBiasOffset()) ||
      !ref("scale_a", getScaleA(), getScaleAOffset()) ||
      !ref("scale_b", getScaleB(), getScaleBOffset()))
    return failure();
  return success();
}

LogicalResult CopyOp::verify() {
  if (getBytes() < 0)
    return emitOpError() << "expected non-negative bytes, found " << getBytes();
  if (failed(verifyRange(*this, "source", getSrc(), getSrcOffset(), getBytes())) ||
      failed(verifyRange(*this, "destination", getDst(), getDstOffset(), getBytes())))
    return failure();
  return success();
}

LogicalResult CollectiveOp::verify() {
  if (getCount() < 0)
    return emitOpError() << "expected a non-negative count, found " << getCount();
  if (failed(verifyElementType(*this, "dtype", getDtype())))
    return failure();
  if (failed(verifyRange(*this, "send", getSend(), getSendOffset(), 0)) ||
      failed(verifyRange(*this, "recv", getRecv(), getRecvOffset(), 0)))
    return failure();
  return success();
}
