//===- LowerToExecutable.cpp - llm function -> runtime Executable ---------===//
//
// Codegen for the CUDA backend. Walks a shape-specialized function once:
//
//  1. Views. `llm.reshape` (and collectives over a group of one) alias their
//     input's storage; `llm.broadcast` is a strided view read by elementwise
//     kernels (materialized only for other consumers).
//  2. Fusion. Elementwise ops whose producer is elementwise and used once are
//     grouped into one kernel (an elementwise program); a residual `llm.add`
//     feeding an RMSNorm/LayerNorm becomes the norm kernel's prologue (it
//     writes the sum too); a `bias` operand becomes the cuBLASLt epilogue.
//  3. Storage. Function results are written in place into the output
//     buffers; every other value lives in one arena, planned by liveness
//     (first fit over 128-byte aligned blocks, reuse of dead blocks).
//  4. Launches, in program order: generated kernels (lib/Target/CUDA),
//     cuBLASLt GEMMs, copies, NCCL collectives.
//  5. Parameter preparation. Work that depends on parameters only
//     (llm::parameterArguments: casts, fp8 scaling and quantization, pads,
//     weight-only quantization, materialized slices, the fp8 GEMMs' [n,k]
//     relayouts of weights) is moved to the front of the launch sequence,
//     launches[0, num_prepare_launches), which the runtime runs once per
//     parameter set (rt::ParameterGuard). Values of that segment read by the
//     per-call launches (the frontier) live in Persistent buffers; the
//     segment's own intermediates are arena scratch that the per-call
//     launches reuse. Lazy views of parameters stay views unless a consumer
//     needs dense storage.
//
//===----------------------------------------------------------------------===//

#include "llmc/Compiler/LowerToExecutable.h"

#include "KernelPlan.h"

#include "LLM/IR/LLMOps.h"
#include "LLM/Transforms/FusionPlan.h"
#include "LLM/Transforms/Passes.h"
#include "llmc/Target/CUDA/Decode.h"
#include "llmc/Target/CUDA/KernelLibrary.h"
#include "llmc/Target/CUDA/WeightOnly.h"
#include "llmc/runtime/CudnnAttention.h"

#include "absl/strings/str_cat.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/SaveAndRestore.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>

using namespace mlir;
using namespace llmc;
using namespace llmc::llm;
namespace cu = llmc::cuda;

namespace {

std::string typeName(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

std::string describe(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "'" << op->getName() << "' at ";
  op->getLoc().print(os);
  return s;
}

absl::Status unsupported(Operation *op, const llvm::Twine &what) {
  return absl::UnimplementedError(
      absl::StrCat("cuda backend: ", describe(op), ": ", what.str()));
}

absl::StatusOr<rt::DType> toDType(Type t) { return llmc::toRuntimeDType(t); }

cu::ScalarType toScalar(rt::DType t) { return kernelScalarType(t); }

RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }
cu::ScalarType scalarOf(Value v) {
  return toScalar(*toDType(tensorType(v).getElementType()));
}
int64_t numElements(Value v) { return tensorType(v).getNumElements(); }
int64_t byteSize(Value v) {
  return numElements(v) * rt::DTypeSize(*toDType(tensorType(v).getElementType()));
}

/// Row-major strides (elements) of `shape`.
SmallVector<int64_t> rowMajorStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

/// A value's data as an elementwise-kernel input: storage root plus how it is
/// indexed against the output shape.
struct StridedRead {
  Value root;                      // value that owns the storage
  int64_t elementOffset = 0;       // into root's storage
  SmallVector<int64_t> strides;    // per output dim, elements (0 = broadcast)
};

std::optional<double> splatValue(Value v) {
  Attribute attr;
  if (!matchPattern(v, m_Constant(&attr)))
    return std::nullopt;
  auto splat = dyn_cast<SplatElementsAttr>(attr);
  if (!splat)
    return std::nullopt;
  if (isa<FloatType>(splat.getElementType()))
    return splat.getSplatValue<APFloat>().convertToDouble();
  if (isa<IntegerType>(splat.getElementType()))
    return static_cast<double>(splat.getSplatValue<APInt>().getSExtValue());
  return std::nullopt;
}

/// Raw storage bytes of a dense constant in the runtime's layout.
absl::StatusOr<std::string> constantBytes(ElementsAttr elements) {
  auto attr = dyn_cast<DenseElementsAttr>(elements);
  if (!attr)
    return absl::UnimplementedError(
        "cuda backend: only dense constants (dense<...>) are supported, not "
        "dense_resource or other encodings");
  auto type = cast<RankedTensorType>(attr.getType());
  auto dtypeOr = toDType(type.getElementType());
  if (!dtypeOr.ok())
    return dtypeOr.status();
  int64_t n = type.getNumElements();
  int64_t size = rt::DTypeSize(*dtypeOr);
  std::string out(n * size, '\0');
  int64_t i = 0;
  if (isa<FloatType>(type.getElementType())) {
    for (APFloat v : attr.getValues<APFloat>()) {
      uint64_t bits = v.bitcastToAPInt().getZExtValue();
      if (type.getElementType().isF32()) {
        float f = v.convertToFloat();
        std::memcpy(&out[i * size], &f, 4);
      } else {
        std::memcpy(&out[i * size], &bits, size);
      }
      ++i;
    }
  } else {
    for (APInt v : attr.getValues<APInt>()) {
      uint64_t bits = v.getZExtValue();
      std::memcpy(&out[i * size], &bits, size);
      ++i;
    }
  }
  return out;
}

class Lowering {
public:
  Lowering(func::FuncOp fn, const LowerOptions &options)
      : fn(fn), options(options) {}

  absl::StatusOr<rt::Executable> run(LowerStats *stats);

private:
  // --- analysis ---
  absl::Status checkStatic();
  absl::StatusOr<StridedRead> stridedRead(Value v);

  // --- storage ---
  int bufferFor(Value v); // buffer id of v's storage root
  int bufferForImpl(Value v);
  int newArenaBuffer(int64_t bytes, int firstStep, int lastStep);
  absl::Status planArena();
  absl::Status checkEveryOutputWritten();

  // --- emission ---
  int addKernel(const cu::KernelCode &code);
  rt::Arg ptrArg(Value v, int64_t byteOffset = 0);
  rt::Arg bufArg(int buffer, int64_t byteOffset = 0);
  void launch(int kernel, const cu::LaunchDims &dims, std::vector<rt::Arg> args,
              Operation *op);
  absl::Status emitOp(Operation *op);
  absl::Status emitElementwiseGroup(ArrayRef<Operation *> ops);
  absl::Status emitCopyInto(Value dst, Value src, Operation *op);
  absl::Status emitCopyToBuffer(int dstBuffer, Value src, Operation *op);
  absl::Status emitMatmul(MatmulOp op);
  absl::StatusOr<int> emitRelayout(Value src, bool swapLastTwo,
                                   cu::ScalarType to, Operation *op);
  struct MatrixView {
    int buffer = -1;
    int64_t byteOffset = 0;
    int64_t ld = 0;           // row stride of the stored matrix, elements
    bool transposed = false;  // stored as the transpose of the logical matrix
  };
  std::optional<MatrixView> matrixView(Value v);
  absl::Status emitPad(PadOp op);
  absl::Status emitAttention(AttentionOp op);
  absl::Status attachCudnnAttention(AttentionOp op, int64_t b, int64_t sq, int64_t skv,
                                    int64_t hq, int64_t hkv, int64_t d, float scale);
  absl::Status emitNorm(Operation *op);
  // Weight-only quantization (llm.quantize_weight / dequantize_weight).
  absl::StatusOr<cu::WeightQuantConfig> weightQuantConfig(Operation *op, int64_t bits,
                                                          int64_t group,
                                                          cu::ScalarType dtype);
  absl::Status emitQuantizeWeight(QuantizeWeightOp op);
  absl::Status emitDequantizeWeight(DequantizeWeightOp op);
  // Horizontal fusion of decode GEMVs sharing an input (KernelPlan).
  rt::Arg gemvWeightArg(MatmulOp op);
  absl::Status emitGemvGroup(const GemvGroup &group);
  absl::Status planHoisting();
  bool isHoisted(Value v) const { return parameterDerived.contains(v); }
  void markPrep(size_t firstLaunch);
  void finishParameterPreparation();

  func::FuncOp fn;
  LowerOptions options;
  rt::Executable exe;

  int step = 0; // index of the launch step being emitted
  llvm::DenseMap<Value, int> buffers;          // storage root -> buffer id
  llvm::DenseMap<Value, int> lastUseStep;      // storage root -> last step
  llvm::DenseMap<Value, int> defStep;          // storage root -> def step
  KernelPlan kernelPlan;                       // which ops share a kernel
  llvm::DenseMap<Value, int> outputIndex;      // returned root -> output
  std::map<std::string, int> kernelIndex;
  struct ArenaItem { int buffer; int first, last; };
  std::vector<ArenaItem> arenaItems;
  int64_t intermediateBytes = 0;
  std::vector<absl::Status> materializeErrors; // from lazy view copies
  // Parameter preparation (see the file comment).
  llvm::DenseSet<Operation *> hoisted;     // ops of the preparation segment
  llvm::DenseSet<Value> parameterDerived;  // parameters and hoisted results
  bool inPrep = false;                     // emitting preparation launches
  std::vector<signed char> launchPrep;     // per launch: 1 prep, 0 per call
  llvm::DenseSet<int> prepArena;           // arena buffers made while inPrep
  llvm::DenseSet<int> prepOutputs;         // buffers of hoisted values
  llvm::DenseSet<int> promoted;            // of those, read per call
  llvm::DenseMap<std::tuple<Value, int, int>, int> hoistedRelayouts;
  int64_t persistentBytes = 0;
  int64_t constantBytesTotal = 0; // constant data stored in the executable
};

/// Every tensor codegen sizes is within llm::kMaxTensorElements (what the
/// `llm` verifiers and the runtime's Executable::Validate take), so element
/// counts, byte sizes and offsets below cannot overflow int64. `what` names
/// the value ("argument 0 of @f", "'arith.constant' at loc(...)").
absl::Status checkTensorSize(const std::string &what, RankedTensorType t) {
  std::optional<int64_t> extent = llm::checkedExtent(t.getShape());
  if (extent && *extent <= llm::kMaxTensorElements)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "cuda backend: ", what, " has type ", typeName(t),
      " whose dimensions multiply to ",
      extent ? std::to_string(*extent) : std::string("more than 2^63"),
      " (empty ones counted as 1), more than the supported 2^40 (",
      llm::kMaxTensorElements, ")"));
}

absl::Status Lowering::checkStatic() {
  if (fn.isExternal())
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: @", fn.getSymName().str(),
        " is a declaration (no body) and cannot be compiled"));
  for (BlockArgument arg : fn.getArguments()) {
    auto t = dyn_cast<RankedTensorType>(arg.getType());
    if (!t)
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: argument ", arg.getArgNumber(), " of @",
          fn.getSymName().str(), " has type ", typeName(arg.getType()),
          "; llmc functions take ranked tensors (use tensor<...> even for "
          "scalars)"));
    if (!t.hasStaticShape())
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: argument ", arg.getArgNumber(), " of @",
          fn.getSymName().str(),
          " has a dynamic shape; specialize shapes first "
          "(--llmc-specialize-shapes or llmc-run --shape)"));
    if (absl::Status st = checkTensorSize(
            absl::StrCat("argument ", arg.getArgNumber(), " of @", fn.getSymName().str()), t);
        !st.ok())
      return st;
  }
  for (Operation &op : fn.getBody().front())
    for (Value r : op.getResults()) {
      auto t = dyn_cast<RankedTensorType>(r.getType());
      if (!t)
        return absl::UnimplementedError(absl::StrCat(
            "cuda backend: ", describe(&op), " produces ", typeName(r.getType()),
            "; only ranked tensor values are supported"));
      if (!t.hasStaticShape())
        return absl::InvalidArgumentError(absl::StrCat(
            "cuda backend: ", describe(&op), " has a result of dynamic shape"));
      if (absl::Status st = checkTensorSize(describe(&op), t); !st.ok())
        return st;
    }
  return absl::OkStatus();
}

/// `v` read in place: a strided view (possibly of strided views) composes
/// its layout (StridedViewOpInterface) onto its source's; anything else is
/// its storage root read row-major.
absl::StatusOr<StridedRead> Lowering::stridedRead(Value v) {
  if (auto view = v.getDefiningOp<StridedViewOpInterface>()) {
    Value source = cast<ViewLikeOpInterface>(view.getOperation()).getViewSource();
    auto read = stridedRead(source);
    if (!read.ok())
      return read.status();
    view.composeLayout(read->elementOffset, read->strides);
    return read;
  }
  StridedRead read;
  read.root = storageRoot(v);
  auto strides = rowMajorStrides(tensorType(v).getShape());
  read.strides.assign(strides.begin(), strides.end());
  return read;
}

int Lowering::addKernel(const cu::KernelCode &code) {
  auto it = kernelIndex.find(code.name);
  if (it != kernelIndex.end())
    return it->second;
  rt::KernelSpec spec;
  spec.name = code.name;
  spec.source = code.source;
  exe.kernels.push_back(std::move(spec));
  int index = exe.kernels.size() - 1;
  kernelIndex[code.name] = index;
  return index;
}

int Lowering::newArenaBuffer(int64_t bytes, int firstStep, int lastStep) {
  rt::Buffer b;
  b.id = exe.buffers.size();
  b.kind = rt::Buffer::Arena;
  b.bytes = bytes;
  exe.buffers.push_back(b);
  arenaItems.push_back({b.id, firstStep, lastStep});
  intermediateBytes += bytes;
  if (inPrep)
    prepArena.insert(b.id);
  return b.id;
}

/// A hoisted value's buffer starts as preparation scratch (arena) and becomes
/// Persistent the first time a per-call launch reads it.
int Lowering::bufferFor(Value v) {
  int id = bufferForImpl(v);
  if (!inPrep && prepOutputs.contains(id) && promoted.insert(id).second)
    exe.buffers[id].kind = rt::Buffer::Persistent;
  return id;
}

int Lowering::bufferForImpl(Value v) {
  Value root = storageRoot(v);
  auto it = buffers.find(root);
  if (it != buffers.end())
    return it->second;
  // A strided view (broadcast/transpose/slice) read by a consumer that needs
  // dense storage, possibly through reshapes: give the view its own buffer
  // and copy into it now, right before the consumer's launch.
  if (Operation *def = root.getDefiningOp();
      isa_and_nonnull<StridedViewOpInterface>(def)) {
    // A view of parameters is materialized once per parameter set.
    bool prep = isHoisted(root) && !outputIndex.count(root);
    llvm::SaveAndRestore<bool> restore(inPrep, inPrep || prep);
    size_t firstLaunch = exe.launches.size();
    int first = step;
    int last = std::max(step, lastUseStep.lookup(root));
    int id = outputIndex.count(root) ? -1 : newArenaBuffer(byteSize(root), first, last);
    if (id < 0) {
      rt::Buffer b;
      b.id = exe.buffers.size();
      b.kind = rt::Buffer::Output;
      b.io_index = outputIndex[root];
      b.bytes = exe.outputs[b.io_index].Bytes();
      exe.buffers.push_back(b);
      id = b.id;
    }
    buffers[root] = id;
    if (prep)
      prepOutputs.insert(id);
    materializeErrors.push_back(emitCopyInto(root, root, def));
    if (prep)
      markPrep(firstLaunch);
    return id;
  }
  // Constants: their bytes are stored in the executable, within
  // options.max_constant_bytes in total (checked before allocating them).
  Attribute attr;
  if (matchPattern(root, m_Constant(&attr))) {
    rt::Buffer b;
    b.id = exe.buffers.size();
    b.kind = rt::Buffer::Constant;
    b.bytes = byteSize(root);
    if (b.bytes > options.max_constant_bytes - constantBytesTotal) {
      Operation *def = root.getDefiningOp();
      materializeErrors.push_back(absl::ResourceExhaustedError(absl::StrCat(
          "cuda backend: ", describe(def), ": a constant of ", b.bytes,
          " bytes (", typeName(root.getType()), ") takes the executable's "
          "constant data to ", constantBytesTotal + b.bytes,
          " bytes, more than the limit of ", options.max_constant_bytes,
          " bytes (LowerOptions::max_constant_bytes); pass large tensors as "
          "function arguments")));
    } else {
      constantBytesTotal += b.bytes;
      auto bytes = constantBytes(cast<ElementsAttr>(attr));
      if (bytes.ok())
        b.constant_data = std::move(*bytes);
      else
        materializeErrors.push_back(bytes.status());
    }
    exe.buffers.push_back(b);
    return buffers[root] = b.id;
  }
  // Function results write straight into the output buffer.
  if (auto out = outputIndex.find(root); out != outputIndex.end()) {
    rt::Buffer b;
    b.id = exe.buffers.size();
    b.kind = rt::Buffer::Output;
    b.io_index = out->second;
    b.bytes = exe.outputs[out->second].Bytes();
    exe.buffers.push_back(b);
    return buffers[root] = b.id;
  }
  int first = defStep.count(root) ? defStep[root] : step;
  int last = lastUseStep.count(root) ? lastUseStep[root] : step;
  int id = newArenaBuffer(byteSize(root), first, std::max(first, last));
  if (isHoisted(root))
    prepOutputs.insert(id);
  return buffers[root] = id;
}

rt::Arg Lowering::bufArg(int buffer, int64_t byteOffset) {
  rt::Arg a;
  a.kind = rt::Arg::BufferPtr;
  a.buffer = buffer;
  a.byte_offset = byteOffset;
  return a;
}
rt::Arg Lowering::ptrArg(Value v, int64_t byteOffset) {
  return bufArg(bufferFor(v), byteOffset);
}
rt::Arg i64Arg(int64_t v) {
  rt::Arg a;
  a.kind = rt::Arg::I64;
  a.i = v;
  return a;
}
rt::Arg i32Arg(int64_t v) {
  rt::Arg a;
  a.kind = rt::Arg::I32;
  a.i = v;
  return a;
}
rt::Arg f32Arg(float v) {
  rt::Arg a;
  a.kind = rt::Arg::F32;
  a.f = v;
  return a;
}
rt::Arg nullArg() { return i64Arg(0); }

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
rt::Arg shapeArg(const cu::ElementwiseProgram &prog,
                 std::vector<int64_t> sizes,
                 std::vector<std::vector<int64_t>> strides) {
  collapseIndexSpace(prog, sizes, strides);
  std::vector<int64_t> packed = cu::PackElementwiseShape(prog, sizes, strides);
  rt::Arg a;
  a.kind = rt::Arg::Bytes;
  a.bytes.assign(reinterpret_cast<const char *>(packed.data()),
                 packed.size() * sizeof(int64_t));
  return a;
}

void Lowering::launch(int kernel, const cu::LaunchDims &dims,
                      std::vector<rt::Arg> args, Operation *op) {
  rt::Launch l;
  l.kind = rt::Launch::Kernel;
  l.kernel = kernel;
  for (int i = 0; i < 3; ++i) {
    l.grid[i] = dims.grid[i];
    l.block[i] = dims.block[i];
  }
  l.smem = dims.smem;
  l.args = std::move(args);
  l.label = op->getName().getStringRef().str();
  exe.launches.push_back(std::move(l));
}

absl::Status Lowering::emitElementwiseGroup(ArrayRef<Operation *> ops) {
  llvm::DenseSet<Operation *> members(ops.begin(), ops.end());
  Operation *last = ops.back();
  ArrayRef<int64_t> outShape = tensorType(last->getResult(0)).getShape();
  int64_t numel = numElements(last->getResult(0));

  cu::ElementwiseProgram prog;
  prog.unroll = options.elementwise_unroll;
  llvm::MapVector<Value, int> inputIndex; // external value -> input index
  std::vector<StridedRead> reads;
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
    auto read = stridedRead(v);
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
    int idx = prog.inputs.size() - 1;
    inputIndex[v] = idx;
    return -(idx + 1);
  };

  for (Operation *op : ops) {
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
      return unsupported(op, "not an elementwise op");
    n.op = *kind;
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

  cu::KernelCode code = cu::EmitElementwise(prog);
  int kernel = addKernel(code);
  std::vector<rt::Arg> args;
  for (Value out : outputs)
    args.push_back(ptrArg(out));
  for (auto [i, read] : llvm::enumerate(reads)) {
    int64_t esize = cu::ScalarSize(prog.inputs[i].type);
    args.push_back(ptrArg(read.root, read.elementOffset * esize));
  }
  args.push_back(i64Arg(numel));
  if (cu::ElementwiseNeedsShape(prog)) {
    std::vector<int64_t> sizes(outShape.begin(), outShape.end());
    std::vector<std::vector<int64_t>> strides;
    for (auto &read : reads)
      strides.emplace_back(read.strides.begin(), read.strides.end());
    args.push_back(shapeArg(prog, sizes, strides));
  }
  launch(kernel, cu::ElementwiseLaunch(prog, numel), std::move(args), last);
  return absl::OkStatus();
}

/// dst (fresh storage) = src viewed through its strides.
absl::Status Lowering::emitCopyInto(Value dst, Value src, Operation *op) {
  return emitCopyToBuffer(bufferFor(dst), src, op);
}

/// Buffer `dstBuffer` (dense, src's shape and type) = src read through its
/// view strides: a plain device copy when src is dense, else a one-node
/// elementwise kernel with a strided input.
absl::Status Lowering::emitCopyToBuffer(int dstBuffer, Value src, Operation *op) {
  ArrayRef<int64_t> shape = tensorType(src).getShape();
  auto read = stridedRead(src);
  if (!read.ok())
    return read.status();
  int64_t numel = numElements(src);
  bool dense = read->elementOffset == 0 &&
               ArrayRef<int64_t>(read->strides) ==
                   ArrayRef<int64_t>(rowMajorStrides(shape)) &&
               numElements(read->root) == numel;
  if (dense) {
    rt::Launch l;
    l.kind = rt::Launch::Copy;
    l.src = {bufferFor(read->root), 0};
    l.dst = {dstBuffer, 0};
    l.copy_bytes = byteSize(src);
    l.label = "copy";
    exe.launches.push_back(l);
    return absl::OkStatus();
  }
  cu::ElementwiseProgram prog;
  prog.unroll = options.elementwise_unroll;
  prog.inputs.push_back({scalarOf(src), cu::InputLayout::kStrided});
  cu::EwNode n;
  n.op = cu::EwOp::cast;
  n.type = scalarOf(src);
  n.operands = {-1};
  prog.nodes.push_back(n);
  prog.outputs.push_back({0, scalarOf(src)});
  int kernel = addKernel(cu::EmitElementwise(prog));
  int64_t esize = cu::ScalarSize(scalarOf(src));
  std::vector<rt::Arg> args = {bufArg(dstBuffer),
                               ptrArg(read->root, read->elementOffset * esize),
                               i64Arg(numel)};
  args.push_back(
      shapeArg(prog, std::vector<int64_t>(shape.begin(), shape.end()),
               {std::vector<int64_t>(read->strides.begin(), read->strides.end())}));
  launch(kernel, cu::ElementwiseLaunch(prog, numel), std::move(args), op);
  return absl::OkStatus();
}

absl::Status Lowering::emitNorm(Operation *op) {
  Value x = op->getOperand(0);
  Value out = op->getResult(0);
  auto add = x.getDefiningOp<AddOp>();
  bool fused = add && kernelPlan.fusedIntoNorm.contains(add);
  int64_t hidden = tensorType(x).getShape().back();
  int64_t rows = numElements(x) / std::max<int64_t>(hidden, 1);
  std::vector<rt::Arg> args = {ptrArg(out)};
  if (fused)
    args.push_back(ptrArg(add.getResult()));
  if (fused) {
    args.push_back(ptrArg(add.getLhs()));
    args.push_back(ptrArg(add.getRhs()));
  } else {
    args.push_back(ptrArg(x));
  }
  if (auto rms = dyn_cast<RMSNormOp>(op)) {
    cu::RMSNormConfig cfg;
    cfg.in = scalarOf(x);
    cfg.weight = scalarOf(rms.getWeight());
    cfg.out = scalarOf(out);
    cfg.hidden = hidden;
    cfg.eps = static_cast<float>(rms.getEps().convertToDouble());
    cfg.fused_residual = fused;
    args.push_back(ptrArg(rms.getWeight()));
    args.push_back(i64Arg(rows));
    launch(addKernel(cu::EmitRMSNorm(cfg)), cu::RMSNormLaunch(cfg, rows),
           std::move(args), op);
    return absl::OkStatus();
  }
  auto ln = cast<LayerNormOp>(op);
  cu::LayerNormConfig cfg;
  cfg.in = scalarOf(x);
  cfg.weight = scalarOf(ln.getWeight());
  if (ln.getBias() && scalarOf(ln.getBias()) != cfg.weight)
    return unsupported(op, "bias and weight of different element types");
  cfg.out = scalarOf(out);
  cfg.hidden = hidden;
  cfg.eps = static_cast<float>(ln.getEps().convertToDouble());
  cfg.has_weight = true;
  cfg.has_bias = static_cast<bool>(ln.getBias());
  cfg.fused_residual = fused;
  args.push_back(ptrArg(ln.getWeight()));
  if (ln.getBias())
    args.push_back(ptrArg(ln.getBias()));
  args.push_back(i64Arg(rows));
  launch(addKernel(cu::EmitLayerNorm(cfg)), cu::LayerNormLaunch(cfg, rows),
         std::move(args), op);
  return absl::OkStatus();
}

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
    std::vector<rt::Arg> args = {ptrArg(op.getResult()), ptrArg(op.getLhs()),
                                 ptrArg(deq.getPacked()), ptrArg(deq.getScales()),
                                 qc.has_bias ? ptrArg(op.getBias()) : nullArg(),
                                 i64Arg(n)};
    launch(addKernel(cu::EmitQuantGemv(qc)), cu::QuantGemvLaunch(qc), std::move(args), op);
    return absl::OkStatus();
  }
  // Decode-shaped projections (a few rows against an nn.Linear weight): the
  // weight read is the whole cost; a GEMV kernel streams it at full bandwidth.
  if (cu::GemvConfig gc; decodeGemvConfig(op, &gc)) {
    std::vector<rt::Arg> args = {ptrArg(op.getResult()), ptrArg(op.getLhs()),
                                 gemvWeightArg(op),
                                 gc.has_bias ? ptrArg(op.getBias()) : nullArg(),
                                 i64Arg(n)};
    launch(addKernel(cu::EmitGemv(gc)), cu::GemvLaunch(gc), std::move(args), op);
    return absl::OkStatus();
  }
  rt::GemmSpec g;
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
      g.epilogue = rt::Epilogue::bias;
      g.bias = {bufferFor(bias), 0};
    } else {
      separateBias = true;
    }
  }
  exe.gemms.push_back(g);
  rt::Launch l;
  l.kind = rt::Launch::Gemm;
  l.gemm = exe.gemms.size() - 1;
  l.label = "llm.matmul";
  exe.launches.push_back(l);
  if (separateBias) {
    // out = out + cast(bias), bias broadcast along rows; in place.
    cu::ElementwiseProgram prog;
    prog.unroll = options.elementwise_unroll;
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
    std::vector<rt::Arg> args = {ptrArg(op.getResult()), ptrArg(op.getResult()),
                                 ptrArg(op.getBias()), i64Arg(numel)};
    std::vector<int64_t> sizes(res.getShape().begin(), res.getShape().end());
    args.push_back(shapeArg(prog, sizes, {{}, {}}));
    launch(addKernel(cu::EmitElementwise(prog)), cu::ElementwiseLaunch(prog, numel),
           std::move(args), op);
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
  llvm::SaveAndRestore<bool> restore(inPrep, inPrep || prep);
  size_t firstLaunch = exe.launches.size();
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
    rt::Buffer b;
    b.id = dst = exe.buffers.size();
    b.kind = rt::Buffer::Persistent;
    b.bytes = numel * cu::ScalarSize(to);
    exe.buffers.push_back(b);
    hoistedRelayouts[key] = dst;
  } else {
    dst = newArenaBuffer(numel * cu::ScalarSize(to), step, step);
  }
  cu::ElementwiseProgram prog;
  prog.unroll = options.elementwise_unroll;
  prog.inputs.push_back({scalarOf(src), cu::InputLayout::kStrided});
  cu::EwNode n;
  n.op = cu::EwOp::cast;
  n.type = to;
  n.operands = {-1};
  prog.nodes.push_back(n);
  prog.outputs.push_back({0, to});
  int64_t esize = cu::ScalarSize(scalarOf(src));
  std::vector<rt::Arg> args = {bufArg(dst),
                               ptrArg(read->root, read->elementOffset * esize),
                               i64Arg(numel)};
  args.push_back(shapeArg(prog, std::vector<int64_t>(shape.begin(), shape.end()),
                          {std::vector<int64_t>(strides.begin(), strides.end())}));
  launch(addKernel(cu::EmitElementwise(prog)), cu::ElementwiseLaunch(prog, numel),
         std::move(args), op);
  if (prep)
    markPrep(firstLaunch);
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
  std::vector<int64_t> packed = cu::PackPadShape(
      std::vector<int64_t>(out.getShape().begin(), out.getShape().end()),
      std::vector<int64_t>(in.getShape().begin(), in.getShape().end()));
  rt::Arg shape;
  shape.kind = rt::Arg::Bytes;
  shape.bytes.assign(reinterpret_cast<const char *>(packed.data()),
                     packed.size() * sizeof(int64_t));
  int64_t numel = out.getNumElements();
  std::vector<rt::Arg> args = {ptrArg(op.getResult()), ptrArg(op.getInput()),
                               i64Arg(numel), std::move(shape)};
  launch(addKernel(cu::EmitPad(cfg)), cu::PadLaunch(cfg, numel), std::move(args),
         op);
  return absl::OkStatus();
}

/// Tiling of the tensor-core FlashAttention-2 kernel for one attention shape.
/// Rule (update from `bench/attn_sweep.sh` on the H200; every tile listed
/// there is correct, see test/unit/kernels EmuTile and
/// Attention.AllTilesCompileWithoutSpills):
///   head dim <= 128: 64 x 64 tiles, 4 warps, K/V double-buffered
///   head dim  > 128: 64 x 32 tiles, 4 warps, K/V double-buffered
/// (cu::DefaultAttentionTile). Grid (q tiles, Hq, B) so that a head's CTAs
/// run together and share its K/V in L2, unless B or Hq exceed the 65535
/// limit of grid y/z. `forced` (LowerOptions::attention_tile) replaces the
/// rule for every tensor-core attention, for sweeps.
static absl::Status
chooseAttentionTile(Operation *op, cu::AttentionConfig &cfg, int64_t batch,
                    int64_t heads_q,
                    const std::optional<cu::AttentionTile> &forced) {
  cfg.tile = forced ? *forced : cu::DefaultAttentionTile(cfg.head_dim);
  if (batch > 65535 || heads_q > 65535)
    cfg.tile.qtile_fastest = false;
  std::string why;
  if (cu::AttentionUsesTensorCores(cfg) && !cu::AttentionTileSupported(cfg, &why))
    return unsupported(op, (forced ? "forced " : "") + why);
  return absl::OkStatus();
}

absl::Status Lowering::emitAttention(AttentionOp op) {
  auto q = tensorType(op.getQuery()), k = tensorType(op.getKey());
  int64_t b = q.getDimSize(0), sq = q.getDimSize(1), hq = q.getDimSize(2),
          d = q.getDimSize(3), skv = k.getDimSize(1), hkv = k.getDimSize(2);
  float scale = op.getScale() ? static_cast<float>(op.getScale()->convertToDouble())
                              : static_cast<float>(1.0 / std::sqrt(double(d)));
  cu::ScalarType dtype = scalarOf(op.getQuery());
  Value kvLen = op.getKvLen();
  cu::DecodeConfig dc;
  dc.dtype = dtype;
  dc.head_dim = d;
  dc.group_size = hq / hkv;
  dc.q_len = sq;
  dc.causal = op.getCausal();
  bool decode = !op.getMask() && sq <= 16 && cu::FlashDecodeSupported(dc) &&
                (kvLen || sq == 1);
  if (decode) {
    if (kvLen) {
      auto lenType = tensorType(kvLen).getElementType();
      dc.kv_len = lenType.isInteger(32) ? cu::KvLenSource::kDeviceI32
                                        : cu::KvLenSource::kDeviceI64;
    } else {
      dc.kv_len = cu::KvLenSource::kArg;
    }
    cu::DecodeKernels kernels = cu::EmitFlashDecode(dc);
    int splits = cu::FlashDecodeNumSplits(dc, b, hkv, skv);
    auto [accBytes, mlBytes] = cu::FlashDecodeWorkspaceBytes(dc, b, hkv, splits);
    int acc = newArenaBuffer(accBytes, step, step);
    int ml = newArenaBuffer(mlBytes, step, step);
    std::vector<rt::Arg> a1 = {bufArg(acc), bufArg(ml), ptrArg(op.getQuery()),
                               ptrArg(op.getKey()), ptrArg(op.getValue()),
                               kvLen ? ptrArg(kvLen) : nullArg(), i64Arg(skv),
                               i64Arg(skv), i32Arg(hkv), f32Arg(scale),
                               i32Arg(splits)};
    launch(addKernel(kernels.split), cu::FlashDecodeSplitLaunch(dc, b, hkv, splits),
           std::move(a1), op);
    std::vector<rt::Arg> a2 = {ptrArg(op.getResult()), bufArg(acc), bufArg(ml),
                               i32Arg(hkv), i32Arg(splits)};
    launch(addKernel(kernels.combine), cu::FlashDecodeCombineLaunch(dc, b, hkv),
           std::move(a2), op);
    return absl::OkStatus();
  }
  if (kvLen) {
    std::string why = op.getMask() ? "an additive mask"
                      : sq > 16    ? absl::StrCat("a query length of ", sq, " (> 16)")
                                   : absl::StrCat("head dim ", d, ", group size ",
                                                  hq / hkv, " and element type ",
                                                  typeName(q.getElementType()));
    return unsupported(op, "kv_len needs the flash-decoding kernel, which does "
                           "not support " + why +
                           " (it takes bf16/f16/f32, head dim <= 512 and "
                           "group size x query length x head dim <= 4096)");
  }
  cu::AttentionConfig cfg;
  cfg.dtype = dtype;
  cfg.head_dim = d;
  cfg.causal = op.getCausal();
  int64_t strideB = 0, strideH = 0, strideQ = 0;
  Value mask = op.getMask();
  if (mask) {
    // Right-align the mask to [B, Hq, Sq, Skv]; the key dim must be dense.
    SmallVector<int64_t> ms(tensorType(mask).getShape());
    while (ms.size() < 4)
      ms.insert(ms.begin(), 1);
    if (ms[3] != skv)
      return unsupported(op, "a mask broadcast along the key dimension");
    cfg.has_mask = true;
    cfg.mask = scalarOf(mask);
    strideQ = ms[2] == 1 ? 0 : skv;
    strideH = ms[1] == 1 ? 0 : ms[2] * skv;
    strideB = ms[0] == 1 ? 0 : ms[1] * ms[2] * skv;
  }
  if (absl::Status st = chooseAttentionTile(op, cfg, b, hq, options.attention_tile);
      !st.ok())
    return st;
  std::vector<rt::Arg> args = {ptrArg(op.getResult()), ptrArg(op.getQuery()),
                               ptrArg(op.getKey()), ptrArg(op.getValue()),
                               mask ? ptrArg(mask) : nullArg(), i64Arg(b),
                               i64Arg(sq), i64Arg(skv), i32Arg(hq), i32Arg(hkv),
                               f32Arg(scale), i64Arg(strideB), i64Arg(strideH),
                               i64Arg(strideQ)};
  launch(addKernel(cu::EmitAttention(cfg)), cu::AttentionLaunch(cfg, b, sq, hq),
         std::move(args), op);
  return attachCudnnAttention(op, b, sq, skv, hq, hkv, d, scale);
}

/// Gives the attention kernel launch just emitted a cuDNN alternative
/// (rt::AttentionSpec, Launch::attention) when the backend option allows it
/// and cuDNN takes the shape; the kernel stays as the runtime's fallback.
absl::Status Lowering::attachCudnnAttention(AttentionOp op, int64_t b, int64_t sq,
                                            int64_t skv, int64_t hq, int64_t hkv,
                                            int64_t d, float scale) {
  if (options.attention_backend == AttentionBackend::kLlmc || op.getMask())
    return absl::OkStatus();
  auto dtype = toRuntimeDType(tensorType(op.getQuery()).getElementType());
  if (!dtype.ok())
    return absl::OkStatus();
  rt::AttentionSpec spec;
  spec.b = b, spec.sq = sq, spec.skv = skv, spec.hq = hq, spec.hkv = hkv, spec.d = d;
  spec.causal = op.getCausal();
  spec.scale = scale;
  spec.dtype = *dtype;
  if (!rt::CudnnAttentionUnsupportedReason(spec).empty())
    return absl::OkStatus();
  auto ref = [&](Value v) {
    rt::Arg a = ptrArg(v);
    return rt::BufferRef{a.buffer, a.byte_offset};
  };
  spec.q = ref(op.getQuery()), spec.k = ref(op.getKey()), spec.v = ref(op.getValue());
  spec.o = ref(op.getResult());
  exe.attentions.push_back(spec);
  exe.launches.back().attention = static_cast<int>(exe.attentions.size()) - 1;
  return absl::OkStatus();
}

absl::Status Lowering::emitOp(Operation *op) {
  // Results with no elements need no launch.
  if (op->getNumResults() > 0 && llvm::all_of(op->getResults(), [](Value r) {
        auto t = dyn_cast<RankedTensorType>(r.getType());
        return t && t.getNumElements() == 0;
      }))
    return absl::OkStatus();
  if (isa<ViewLikeOpInterface, ConstantOp, arith::ConstantOp>(op))
    return absl::OkStatus(); // views and constants: no launch of their own
  if (auto q = dyn_cast<QuantizeWeightOp>(op))
    return emitQuantizeWeight(q);
  if (auto d = dyn_cast<DequantizeWeightOp>(op))
    return emitDequantizeWeight(d);
  if (auto a = dyn_cast<AllReduceOp>(op); a && a.getGroupSize() == 1)
    return absl::OkStatus();
  if (kernelPlan.fusedIntoNorm.contains(op))
    return absl::OkStatus();
  if (auto it = kernelPlan.gemvGroupOf.find(op); it != kernelPlan.gemvGroupOf.end())
    return op == kernelPlan.gemvGroups[it->second].emitAt ? emitGemvGroup(kernelPlan.gemvGroups[it->second])
                                               : absl::OkStatus();
  if (isElementwise(op)) {
    auto &group = kernelPlan.groups[kernelPlan.groupOf[op]];
    if (group.back() != op)
      return absl::OkStatus(); // emitted with the group's last op
    return emitElementwiseGroup(group);
  }
  return llvm::TypeSwitch<Operation *, absl::Status>(op)
      .Case<RMSNormOp, LayerNormOp>([&](Operation *o) { return emitNorm(o); })
      .Case<MatmulOp>([&](MatmulOp o) { return emitMatmul(o); })
      .Case<AttentionOp>([&](AttentionOp o) { return emitAttention(o); })
      .Case<SoftmaxOp>([&](SoftmaxOp o) -> absl::Status {
        int64_t n = tensorType(o.getInput()).getShape().back();
        int64_t rows = numElements(o.getInput()) / std::max<int64_t>(n, 1);
        cu::SoftmaxConfig cfg;
        cfg.in = scalarOf(o.getInput());
        cfg.out = scalarOf(o.getResult());
        cfg.n = n;
        int64_t maskRows = 1;
        if (Value mask = o.getMask()) {
          // The kernel reads mask[row % mask_rows]: the mask must be dense
          // over its trailing dims and 1 over the leading ones.
          ArrayRef<int64_t> ms = tensorType(mask).getShape();
          ArrayRef<int64_t> xs = tensorType(o.getInput()).getShape();
          size_t lead = xs.size() - ms.size();
          size_t firstNonOne = 0;
          while (firstNonOne < ms.size() && ms[firstNonOne] == 1)
            ++firstNonOne;
          for (size_t i = firstNonOne; i < ms.size(); ++i)
            if (ms[i] != xs[lead + i])
              return unsupported(o, "a softmax mask broadcast inside its "
                                    "trailing dimensions");
          if (ms.empty() || ms.back() != n)
            return unsupported(o, "a softmax mask broadcast along the row");
          cfg.has_mask = true;
          cfg.mask = scalarOf(mask);
          maskRows = numElements(mask) / n;
        }
        float scale = o.getScale()
                          ? static_cast<float>(o.getScale()->convertToDouble())
                          : 1.f;
        std::vector<rt::Arg> args = {
            ptrArg(o.getResult()), ptrArg(o.getInput()),
            o.getMask() ? ptrArg(o.getMask()) : nullArg(), f32Arg(scale),
            i64Arg(rows), i64Arg(maskRows)};
        launch(addKernel(cu::EmitSoftmax(cfg)), cu::SoftmaxLaunch(cfg, rows),
               std::move(args), o);
        return absl::OkStatus();
      })
      .Case<RoPEOp>([&](RoPEOp o) -> absl::Status {
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
            if (in.size() < 2 || in[in.size() - 2] != seq ||
                in.back() != cfg.head_dim ||
                !llvm::all_of(in.drop_back(2), isOne))
              return Value();
            return b.getInput();
          };
          if (Value c1 = sharedTable(cos), s1 = sharedTable(sin); c1 && s1) {
            cos = c1;
            sin = s1;
            perBatch = false;
          }
          std::vector<rt::Arg> args = {
              ptrArg(o.getResult()), ptrArg(o.getInput()), ptrArg(cos),
              ptrArg(sin),           i64Arg(batch),        i64Arg(seq),
              i64Arg(perBatch ? seq * cfg.head_dim : 0)};
          launch(addKernel(cu::EmitRoPETable(cfg)),
                 cu::RoPETableLaunch(cfg, batch, seq), std::move(args), o);
          return absl::OkStatus();
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
          cfg.offset = perBatch ? (i32 ? cu::PositionSource::kPerBatchI32
                                       : cu::PositionSource::kPerBatchI64)
                                : (i32 ? cu::PositionSource::kScalarI32
                                       : cu::PositionSource::kScalarI64);
        }
        std::vector<rt::Arg> args = {
            ptrArg(o.getResult()), ptrArg(o.getInput()),
            o.getOffset() ? ptrArg(o.getOffset()) : nullArg(),
            i64Arg(t.getDimSize(0)), i64Arg(t.getDimSize(1))};
        launch(addKernel(cu::EmitRoPE(cfg)),
               cu::RoPELaunch(cfg, t.getDimSize(0), t.getDimSize(1)),
               std::move(args), o);
        return absl::OkStatus();
      })
      .Case<KVCacheAppendOp>([&](KVCacheAppendOp o) -> absl::Status {
        // Value semantics: result = cache with rows replaced. A donated cache
        // is updated in place; otherwise copy it into the result's storage
        // first, then write the new rows there.
        if (!updatesInPlace(o))
          if (auto st = emitCopyInto(o.getResult(), o.getCache(), o); !st.ok())
            return st;
        auto c = tensorType(o.getCache());
        auto u = tensorType(o.getUpdate());
        cu::KvAppendConfig cfg;
        cfg.dtype = scalarOf(o.getCache());
        cfg.heads_kv = c.getDimSize(2);
        cfg.head_dim = c.getDimSize(3);
        cfg.pos = tensorType(o.getPosition()).getElementType().isInteger(32)
                      ? cu::PositionSource::kScalarI32
                      : cu::PositionSource::kScalarI64;
        int err = newArenaBuffer(128, step, step);
        // The kernel appends K and V together; pass the same tensor twice.
        std::vector<rt::Arg> args = {
            ptrArg(o.getResult()), ptrArg(o.getResult()), ptrArg(o.getUpdate()),
            ptrArg(o.getUpdate()), ptrArg(o.getPosition()), bufArg(err),
            i64Arg(c.getDimSize(0)), i64Arg(c.getDimSize(1)),
            i64Arg(u.getDimSize(1))};
        launch(addKernel(cu::EmitKvAppend(cfg)),
               cu::KvAppendLaunch(cfg, c.getDimSize(0), u.getDimSize(1)),
               std::move(args), o);
        return absl::OkStatus();
      })
      .Case<GatherOp>([&](GatherOp o) -> absl::Status {
        auto table = tensorType(o.getTable());
        if (o.getAxis() != 0 || table.getRank() != 2)
          return unsupported(o, "gather other than rows of a rank-2 table");
        cu::GatherConfig cfg;
        cfg.dtype = scalarOf(o.getTable());
        cfg.index = scalarOf(o.getIndices());
        cfg.dim = table.getDimSize(1);
        int64_t count = numElements(o.getIndices());
        int err = newArenaBuffer(128, step, step);
        std::vector<rt::Arg> args = {ptrArg(o.getResult()), ptrArg(o.getTable()),
                                     ptrArg(o.getIndices()), bufArg(err),
                                     i64Arg(count), i64Arg(table.getDimSize(0))};
        launch(addKernel(cu::EmitGather(cfg)), cu::GatherLaunch(cfg, count),
               std::move(args), o);
        return absl::OkStatus();
      })
      .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceMinOp>(
          [&](Operation *o) -> absl::Status {
            Value in = o->getOperand(0);
            auto t = tensorType(in);
            ArrayRef<int64_t> dims =
                cast<DenseI64ArrayAttr>(o->getAttr("dims")).asArrayRef();
            cu::ReduceKind kind = isa<ReduceSumOp>(o)    ? cu::ReduceKind::sum
                                  : isa<ReduceMeanOp>(o) ? cu::ReduceKind::mean
                                  : isa<ReduceMaxOp>(o)  ? cu::ReduceKind::max
                                                         : cu::ReduceKind::min;
            if (static_cast<int64_t>(dims.size()) == t.getRank() &&
                t.getRank() > 0) {
              cu::FullReduceConfig cfg;
              cfg.in = scalarOf(in);
              cfg.out = scalarOf(o->getResult(0));
              cfg.kind = kind;
              int64_t numel = numElements(in);
              cu::FullReduceKernels ks = cu::EmitFullReduce(cfg);
              int partials = newArenaBuffer(
                  4 * int64_t(cu::FullReduceNumPartials(numel)), step, step);
              launch(addKernel(ks.stage1), cu::FullReduceStage1Launch(cfg, numel),
                     {bufArg(partials), ptrArg(in), i64Arg(numel)}, o);
              launch(addKernel(ks.stage2), cu::FullReduceStage2Launch(cfg, numel),
                     {ptrArg(o->getResult(0)), bufArg(partials),
                      i32Arg(cu::FullReduceNumPartials(numel)), i64Arg(numel)},
                     o);
              return absl::OkStatus();
            }
            if (dims.size() != 1 || dims[0] != t.getRank() - 1)
              return unsupported(o, "reduction over dimensions other than the "
                                    "last one or all of them");
            cu::RowReduceConfig cfg;
            cfg.in = scalarOf(in);
            cfg.out = scalarOf(o->getResult(0));
            cfg.kind = kind;
            cfg.n = t.getShape().back();
            int64_t rows = numElements(in) / std::max<int64_t>(cfg.n, 1);
            launch(addKernel(cu::EmitRowReduce(cfg)), cu::RowReduceLaunch(cfg, rows),
                   {ptrArg(o->getResult(0)), ptrArg(in), i64Arg(rows)}, o);
            return absl::OkStatus();
          })
      .Case<ConcatOp>([&](ConcatOp o) -> absl::Status {
        // Concatenation along dim d is a sequence of block copies when every
        // dimension before d has size 1.
        auto t = tensorType(o.getResult());
        for (int64_t i = 0; i < static_cast<int64_t>(o.getDim()); ++i)
          if (t.getDimSize(i) != 1)
            return unsupported(o, "concat along an inner dimension");
        int64_t offset = 0;
        for (Value in : o.getInputs()) {
          rt::Launch l;
          l.kind = rt::Launch::Copy;
          l.src = {bufferFor(in), 0};
          l.dst = {bufferFor(o.getResult()), offset};
          l.copy_bytes = byteSize(in);
          l.label = "llm.concat";
          exe.launches.push_back(l);
          offset += byteSize(in);
        }
        return absl::OkStatus();
      })
      .Case<AllReduceOp, AllGatherOp, ReduceScatterOp>(
          [&](Operation *o) -> absl::Status {
            rt::CollectiveSpec c;
            c.dtype = *toDType(tensorType(o->getOperand(0)).getElementType());
            if (auto ar = dyn_cast<AllReduceOp>(o)) {
              c.op = rt::CollectiveSpec::AllReduce;
              c.reduction = ar.getKind() == ReduceKind::sum
                                ? rt::CollectiveSpec::Sum
                                : rt::CollectiveSpec::Max;
              c.count = numElements(o->getOperand(0));
            } else if (auto ag = dyn_cast<AllGatherOp>(o)) {
              auto t = tensorType(ag.getInput());
              for (int64_t i = 0; i < static_cast<int64_t>(ag.getDim()); ++i)
                if (t.getDimSize(i) != 1)
                  return unsupported(o, "all_gather along an inner dimension");
              c.op = rt::CollectiveSpec::AllGather;
              c.count = numElements(o->getOperand(0));
            } else {
              auto rs = cast<ReduceScatterOp>(o);
              auto t = tensorType(rs.getInput());
              for (int64_t i = 0; i < static_cast<int64_t>(rs.getDim()); ++i)
                if (t.getDimSize(i) != 1)
                  return unsupported(o, "reduce_scatter along an inner dimension");
              c.op = rt::CollectiveSpec::ReduceScatter;
              c.reduction = rs.getKind() == ReduceKind::sum
                                ? rt::CollectiveSpec::Sum
                                : rt::CollectiveSpec::Max;
              c.count = numElements(o->getResult(0));
            }
            c.send = {bufferFor(o->getOperand(0)), 0};
            c.recv = {bufferFor(o->getResult(0)), 0};
            exe.collectives.push_back(c);
            rt::Launch l;
            l.kind = rt::Launch::Collective;
            l.collective = exe.collectives.size() - 1;
            l.label = o->getName().getStringRef().str();
            exe.launches.push_back(l);
            return absl::OkStatus();
          })
      .Case<PadOp>([&](PadOp o) { return emitPad(o); })
      .Default([&](Operation *o) {
        return unsupported(o, "no CUDA lowering for this op");
      });
}

//===----------------------------------------------------------------------===//
// Decode GEMVs: single, horizontally fused, SwiGLU
//===----------------------------------------------------------------------===//

/// A GEMV's weight: a block of whole weight rows (llmc-shard's
/// column-parallel split) is read in place.
rt::Arg Lowering::gemvWeightArg(MatmulOp op) {
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
    cu::GemvConfig gg, gu;
    decodeGemvConfig(gate, &gg);
    decodeGemvConfig(up, &gu);
    cu::SwiGluGemvConfig c;
    c.dtype = gg.dtype;
    c.gate_out = gg.out;
    c.up_out = gu.out;
    c.act_out = scalarOf(group.silu->getResult(0));
    c.out = scalarOf(group.emitAt->getResult(0));
    c.m = gg.m;
    c.k = gg.k;
    c.n = gg.n;
    c.has_bias = gg.has_bias;
    std::vector<rt::Arg> args = {
        ptrArg(group.emitAt->getResult(0)), ptrArg(gate.getLhs()),
        gemvWeightArg(gate), gemvWeightArg(up),
        c.has_bias ? ptrArg(gate.getBias()) : nullArg(),
        c.has_bias ? ptrArg(up.getBias()) : nullArg(), i64Arg(c.n)};
    launch(addKernel(cu::EmitSwiGluGemv(c)), cu::SwiGluGemvLaunch(c), std::move(args),
           group.emitAt);
    return absl::OkStatus();
  }
  cu::MultiGemvConfig c;
  c.num_outputs = group.members.size();
  std::vector<rt::Arg> args = {ptrArg(MatmulOp(group.members[0]).getLhs())};
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
  launch(addKernel(cu::EmitMultiGemv(c)), cu::MultiGemvLaunch(c), std::move(args),
         group.emitAt);
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
  std::vector<rt::Arg> args = {ptrArg(op.getPacked()), ptrArg(op.getScales()),
                               ptrArg(op.getWeight()), i64Arg(n), i64Arg(k)};
  launch(addKernel(cu::EmitQuantizeWeight(cfg)), cu::QuantizeWeightLaunch(cfg, n, k),
         std::move(args), op);
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
  std::vector<rt::Arg> args = {ptrArg(op.getResult()), ptrArg(op.getPacked()),
                               ptrArg(op.getScales()), i64Arg(n), i64Arg(k)};
  launch(addKernel(cu::EmitDequantizeWeight(cfg)),
         cu::DequantizeWeightLaunch(cfg, n, k), std::move(args), op);
  return absl::OkStatus();
}

/// The preparation segment's ops: every op (but those below) whose operands
/// are all parameters (llm::parameterArguments), results of such ops or
/// constants, with at least one of the former. Never hoisted: dequantize_weight
/// (decompression, read per call by design), collectives (every rank would
/// have to prepare at once), KV-cache appends, ops whose result is a function
/// result (outputs are written on every call). The parameters that the
/// segment reads are marked `parameter` for the runtime's guard.
/// The parameter-preparation segment: the ops llmc-hoist-parameter-work
/// marked (checked: a mark that would hoist per-call work is an error), or,
/// for a function it did not plan, the same rule's choice.
absl::Status Lowering::planHoisting() {
  if (!options.hoist_parameter_work)
    return absl::OkStatus();
  SmallVector<bool> params = llm::parameterArguments(fn);
  for (BlockArgument arg : fn.getArguments())
    if (params[arg.getArgNumber()])
      parameterDerived.insert(arg);
  SmallVector<Operation *> ops;
  if (fn->hasAttr(llm::kParameterPreparationPlannedAttr)) {
    std::string error;
    FailureOr<SmallVector<Operation *>> marked =
        llm::markedParameterPreparationOps(fn, error);
    if (failed(marked))
      return absl::InvalidArgumentError("cuda backend: " + error);
    ops = std::move(*marked);
  } else {
    ops = llm::parameterPreparationOps(fn);
  }
  for (Operation *op : ops) {
    hoisted.insert(op);
    for (Value r : op->getResults())
      parameterDerived.insert(r);
    for (Value o : op->getOperands())
      if (auto arg = dyn_cast<BlockArgument>(o))
        exe.inputs[arg.getArgNumber()].parameter = true;
  }
  return absl::OkStatus();
}

/// Marks the launches from `firstLaunch` on as preparation launches.
void Lowering::markPrep(size_t firstLaunch) {
  launchPrep.resize(exe.launches.size(), -1);
  for (size_t i = firstLaunch; i < launchPrep.size(); ++i)
    launchPrep[i] = 1;
}

/// Moves the preparation launches to the front (each part keeps its order:
/// a preparation launch reads parameters and earlier preparation results
/// only) and gives the arena the preparation's scratch: it runs before every
/// per-call launch, so its blocks may overlap any of theirs.
void Lowering::finishParameterPreparation() {
  launchPrep.resize(exe.launches.size(), 0);
  std::vector<rt::Launch> prep, perCall;
  for (size_t i = 0; i < exe.launches.size(); ++i)
    (launchPrep[i] == 1 ? prep : perCall).push_back(std::move(exe.launches[i]));
  exe.num_prepare_launches = prep.size();
  exe.launches = std::move(prep);
  for (rt::Launch &l : perCall)
    exe.launches.push_back(std::move(l));
  int shift = static_cast<int>(std::distance(fn.getBody().front().begin(),
                                             fn.getBody().front().end())) + 1;
  std::vector<ArenaItem> items;
  for (ArenaItem item : arenaItems) {
    if (promoted.contains(item.buffer)) {
      intermediateBytes -= exe.buffers[item.buffer].bytes;
      continue; // now Persistent
    }
    if (prepArena.contains(item.buffer)) {
      item.first -= shift;
      item.last -= shift;
    }
    items.push_back(item);
  }
  arenaItems = std::move(items);
  for (const rt::Buffer &b : exe.buffers)
    if (b.kind == rt::Buffer::Persistent)
      persistentBytes += b.bytes;
}

absl::Status Lowering::planArena() {
  // First fit over a list of live blocks sorted by offset.
  struct Block { int64_t offset, size; int last; };
  std::vector<Block> live;
  std::sort(arenaItems.begin(), arenaItems.end(),
            [](const ArenaItem &a, const ArenaItem &b) {
              return a.first != b.first ? a.first < b.first : a.buffer < b.buffer;
            });
  int64_t peak = 0;
  int64_t align = std::max<int64_t>(options.arena_alignment, 1);
  for (const ArenaItem &item : arenaItems) {
    llvm::erase_if(live, [&](const Block &b) { return b.last < item.first; });
    std::sort(live.begin(), live.end(),
              [](const Block &a, const Block &b) { return a.offset < b.offset; });
    int64_t size = (exe.buffers[item.buffer].bytes + align - 1) / align * align;
    int64_t offset = 0;
    for (const Block &b : live) {
      if (offset + size <= b.offset)
        break;
      offset = std::max(offset, b.offset + b.size);
    }
    exe.buffers[item.buffer].arena_offset = offset;
    live.push_back({offset, size, item.last});
    peak = std::max(peak, offset + size);
  }
  exe.arena_bytes = peak;
  return absl::OkStatus();
}

absl::StatusOr<rt::Executable> Lowering::run(LowerStats *stats) {
  // llm.fusion regions (llmc-fuse) are inlined back into a private copy of
  // the function: planFusion below asks llm::planFusionGroups, the same plan
  // that formed the regions, so the regions' ops come back as the same
  // kernels.
  OwningOpRef<func::FuncOp> unfused;
  if (!fn.getOps<FusionOp>().empty()) {
    unfused = fn.clone();
    llm::inlineFusionRegions(*unfused);
    fn = *unfused;
  }
  if (auto st = checkStatic(); !st.ok())
    return st;
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());

  // Signature.
  for (BlockArgument arg : fn.getArguments()) {
    auto dtype = toDType(tensorType(arg).getElementType());
    if (!dtype.ok())
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: argument ", arg.getArgNumber(), ": ",
          dtype.status().message()));
    // The runtime's signatures and the C API hold rank <= 8.
    if (tensorType(arg).getRank() > rt::kMaxTensorRank)
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: argument ", arg.getArgNumber(), " has rank ",
          tensorType(arg).getRank(), "; executables take tensors of rank at most ",
          rt::kMaxTensorRank));
    rt::TensorSig sig;
    sig.name = absl::StrCat("arg", arg.getArgNumber());
    sig.dtype = *dtype;
    auto shape = tensorType(arg).getShape();
    sig.shape.assign(shape.begin(), shape.end());
    exe.inputs.push_back(sig);
    rt::Buffer b;
    b.id = exe.buffers.size();
    b.kind = rt::Buffer::Input;
    b.io_index = arg.getArgNumber();
    b.bytes = sig.Bytes();
    exe.buffers.push_back(b);
    buffers[arg] = b.id;
  }
  // Results: a value computed here is written straight into its output buffer.
  std::vector<std::pair<Value, int>> copies; // (value, output index)
  std::vector<Value> viewResults;              // storage roots that are views
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto dtype = toDType(tensorType(v).getElementType());
    if (!dtype.ok())
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: result ", i, ": ", dtype.status().message()));
    if (tensorType(v).getRank() > rt::kMaxTensorRank)
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: result ", i, " has rank ", tensorType(v).getRank(),
          "; executables return tensors of rank at most ", rt::kMaxTensorRank));
    rt::TensorSig sig;
    sig.name = absl::StrCat("result", i);
    sig.dtype = *dtype;
    auto shape = tensorType(v).getShape();
    sig.shape.assign(shape.begin(), shape.end());
    exe.outputs.push_back(sig);
    // A result whose storage is a lazy view (a broadcast/transpose/slice,
    // possibly seen through reshapes, as in GQA's repeat_kv:
    // reshape(broadcast(reshape(k)))) is materialized straight into its
    // output buffer after the last op; nothing else would ever write it.
    Value root = storageRoot(v);
    Operation *rootDef = root.getDefiningOp();
    bool computed = rootDef && !matchPattern(root, m_Constant()) && !buffers.count(root);
    if (computed && !outputIndex.count(root)) {
      outputIndex[root] = i;
      if (isa<StridedViewOpInterface>(rootDef))
        viewResults.push_back(root);
    } else {
      copies.push_back({v, static_cast<int>(i)});
    }
  }

  if (absl::Status st = planHoisting(); !st.ok())
    return st;
  {
    KernelPlanOptions plan;
    plan.elementwise = options.fuse_elementwise;
    plan.residualNorm = options.fuse_residual_norm;
    plan.gemmEpilogue = options.fuse_gemm_epilogue;
    plan.gemv = options.fuse_gemv;
    kernelPlan = planKernels(fn, plan, hoisted);
  }

  // Liveness in units of ops (program order); each value's storage root is
  // live from its definition to its last (transitive, through views) use.
  int index = 0;
  llvm::DenseMap<Operation *, int> opIndex;
  for (Operation &op : body)
    opIndex[&op] = index++;
  // A use of a view (broadcast/transpose/slice), also through reshapes, reads
  // the view's source when the consumer runs (fused strided read or a lazy
  // copy right before it): the source stays live until then.
  std::function<void(Value, int)> touch = [&](Value v, int at) {
    Value root = storageRoot(v);
    lastUseStep[root] = std::max(lastUseStep.lookup(root), at);
    if (auto view = root.getDefiningOp<StridedViewOpInterface>())
      touch(cast<ViewLikeOpInterface>(view.getOperation()).getViewSource(), at);
  };
  for (Operation &op : body) {
    int at = opIndex[&op];
    for (Value r : op.getResults())
      if (!defStep.count(storageRoot(r)))
        defStep[storageRoot(r)] = at;
    for (Value operand : op.getOperands())
      touch(operand, at);
    // A fused group reads its external inputs when its last op runs.
    if (isElementwise(&op) && kernelPlan.groupOf.count(&op)) {
      int last = opIndex[kernelPlan.groups[kernelPlan.groupOf[&op]].back()];
      for (Value operand : op.getOperands())
        touch(operand, last);
      for (Value r : op.getResults())
        if (defStep[storageRoot(r)] > last || defStep[storageRoot(r)] == at)
          defStep[storageRoot(r)] = std::min(defStep[storageRoot(r)], at);
    }
    // A fused GEMV group reads its members' operands when it is emitted.
    if (auto it = kernelPlan.gemvGroupOf.find(&op); it != kernelPlan.gemvGroupOf.end() && isa<MatmulOp>(op))
      for (Value operand : op.getOperands())
        touch(operand, opIndex[kernelPlan.gemvGroups[it->second].emitAt]);
    // The fused residual add's sum is written by the norm.
    if (auto add = dyn_cast<AddOp>(&op); add && kernelPlan.fusedIntoNorm.contains(add))
      for (Operation *user : add->getUsers())
        touch(add.getLhs(), opIndex[user]), touch(add.getRhs(), opIndex[user]);
  }

  // Runs `emit` (launches for `op`): a kernel generator's rejection (an
  // exception) becomes an error naming `op`, and so do the errors of lazy
  // materializations (view copies, constants) that `emit` caused.
  auto guarded = [&](Operation *op, llvm::function_ref<absl::Status()> emit) {
    absl::Status st;
    try {
      st = emit();
    } catch (const std::exception &e) {
      // The kernel generators reject configurations they cannot handle.
      st = unsupported(op, e.what());
    }
    for (absl::Status &m : materializeErrors)
      if (st.ok() && !m.ok())
        st = m;
    materializeErrors.clear();
    return st;
  };
  for (Operation &op : body) {
    if (isa<func::ReturnOp>(op))
      continue;
    step = opIndex[&op];
    inPrep = hoisted.contains(&op);
    size_t firstLaunch = exe.launches.size();
    absl::Status st = guarded(&op, [&] { return emitOp(&op); });
    if (inPrep)
      markPrep(firstLaunch);
    inPrep = false;
    if (!st.ok())
      return st;
  }
  // Run at the return's step: the sources of views and copies are live up to
  // and including it, so the arena never places the new buffers over them.
  step = opIndex[ret];
  for (Value root : viewResults) {
    if (buffers.count(root))
      continue; // a consumer already materialized it into the output
    if (absl::Status st = guarded(root.getDefiningOp(), [&] {
          bufferFor(root);
          return absl::OkStatus();
        });
        !st.ok())
      return st;
  }
  // Results that are inputs, constants or duplicates: copy.
  for (auto [v, i] : copies) {
    rt::Buffer b;
    b.id = exe.buffers.size();
    b.kind = rt::Buffer::Output;
    b.io_index = i;
    b.bytes = exe.outputs[i].Bytes();
    exe.buffers.push_back(b);
    if (auto arg = dyn_cast<BlockArgument>(storageRoot(v));
        arg && arg != v && fn.getArgAttr(arg.getArgNumber(), "llm.donate"))
      exe.outputs[i].alias_input = arg.getArgNumber();
    if (absl::Status st = guarded(ret, [&, v = v] { return emitCopyToBuffer(b.id, v, ret); });
        !st.ok())
      return st;
  }
  if (auto st = checkEveryOutputWritten(); !st.ok())
    return st;
  finishParameterPreparation();
  if (auto st = planArena(); !st.ok())
    return st;
  if (auto st = exe.Validate(); !st.ok())
    return absl::InternalError(absl::StrCat(
        "llmc internal error (please report): lowering produced an invalid "
        "executable: ",
        st.message()));
  if (stats) {
    stats->num_ops = 0;
    for (Operation &op : body)
      stats->num_ops += isa<LLMDialect>(op.getDialect());
    stats->num_kernel_launches = 0;
    stats->num_gemms = 0;
    for (auto [i, l] : llvm::enumerate(exe.launches)) {
      if (static_cast<int>(i) < exe.num_prepare_launches) {
        ++stats->num_prepare_launches;
        continue;
      }
      stats->num_kernel_launches += l.kind == rt::Launch::Kernel;
      stats->num_copies += l.kind == rt::Launch::Copy;
      stats->num_gemms += l.kind == rt::Launch::Gemm;
    }
    stats->persistent_bytes = persistentBytes;
    stats->num_distinct_kernels = exe.kernels.size();
    stats->arena_bytes = exe.arena_bytes;
    stats->intermediate_bytes = intermediateBytes;
  }
  return exe;
}

/// Every output buffer must be the destination of some launch (a kernel
/// argument, a GEMM's D, a collective's recv or a copy's dst); a result whose
/// storage nothing writes would silently return the caller's uninitialized
/// memory. An internal error, never expected.
absl::Status Lowering::checkEveryOutputWritten() {
  std::vector<bool> written(exe.outputs.size(), false);
  auto mark = [&](int buffer) {
    if (buffer < 0 || buffer >= static_cast<int>(exe.buffers.size()))
      return;
    const rt::Buffer &b = exe.buffers[buffer];
    if (b.kind == rt::Buffer::Output && b.io_index >= 0 &&
        b.io_index < static_cast<int>(written.size()))
      written[b.io_index] = true;
  };
  for (const rt::Launch &l : exe.launches) {
    switch (l.kind) {
    case rt::Launch::Kernel:
      for (const rt::Arg &a : l.args)
        if (a.kind == rt::Arg::BufferPtr)
          mark(a.buffer);
      break;
    case rt::Launch::Gemm:
      mark(exe.gemms[l.gemm].d.buffer);
      break;
    case rt::Launch::Collective:
      mark(exe.collectives[l.collective].recv.buffer);
      break;
    case rt::Launch::Copy:
      mark(l.dst.buffer);
      break;
    }
  }
  for (size_t i = 0; i < written.size(); ++i)
    if (!written[i] && exe.outputs[i].NumElements() > 0)
      return absl::InternalError(absl::StrCat(
          "llmc internal error (please report): result ", i, " of @",
          fn.getSymName().str(), " is never written by the compiled code"));
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<AttentionBackend>
llmc::ParseAttentionBackend(const std::string &name) {
  if (name == "auto")
    return AttentionBackend::kAuto;
  if (name == "llmc")
    return AttentionBackend::kLlmc;
  if (name == "cudnn")
    return AttentionBackend::kCudnn;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown attention backend '", name, "' (expected auto, llmc or cudnn)"));
}

absl::StatusOr<rt::DType> llmc::toRuntimeDType(Type t) {
  if (t.isF32()) return rt::DType::f32;
  if (t.isF16()) return rt::DType::f16;
  if (t.isBF16()) return rt::DType::bf16;
  if (isa<Float8E4M3FNType>(t)) return rt::DType::f8e4m3;
  if (isa<Float8E5M2Type>(t)) return rt::DType::f8e5m2;
  if (t.isInteger(1)) return rt::DType::i1;
  if (t.isInteger(8)) return rt::DType::i8;
  if (t.isInteger(32)) return rt::DType::i32;
  if (t.isInteger(64)) return rt::DType::i64;
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return absl::InvalidArgumentError("unsupported element type " + s +
                                    " (expected f32, f16, bf16, f8E4M3FN, "
                                    "f8E5M2, i1, i8, i32 or i64)");
}

int llmc::ComputeCapabilityOfArch(const std::string &arch) {
  llvm::StringRef digits(arch);
  if (!digits.consume_front("sm_") && !digits.consume_front("compute_"))
    return 0;
  digits.consume_back("a");
  int cc = 0;
  if (digits.size() < 2 || digits.getAsInteger(10, cc))
    return 0;
  return cc;
}

absl::StatusOr<rt::Executable> llmc::LowerToExecutable(func::FuncOp fn,
                                                       const LowerOptions &options,
                                                       LowerStats *stats) {
  Lowering lowering(fn, options);
  return lowering.run(stats);
}
