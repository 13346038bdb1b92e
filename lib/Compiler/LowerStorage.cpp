//===- LowerStorage.cpp - buffers, views, copies, launches ------------------===//

#include "Lowering.h"

namespace llmc::codegen {

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
    // A copy the generators refuse is an error of the op being emitted,
    // whose operand the view is.
    materializeErrors.push_back(
        emitCopyToBuffer(id, root, def, emitting ? emitting : def));
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

/// dst (fresh storage) = src viewed through its strides.
absl::Status Lowering::emitCopyInto(Value dst, Value src, Operation *op) {
  return emitCopyToBuffer(bufferFor(dst), src, op);
}

/// Buffer `dstBuffer` (dense, src's shape and type) = src read through its
/// view strides: a plain device copy when src is dense, else a one-node
/// elementwise kernel with a strided input. Generator errors name `blame`
/// (default: op).
absl::Status Lowering::emitCopyToBuffer(int dstBuffer, Value src, Operation *op,
                                        Operation *blame) {
  if (!blame)
    blame = op;
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
  prog.unroll = kernelConfigs.elementwise_unroll;
  prog.inputs.push_back({scalarOf(src), cu::InputLayout::kStrided});
  cu::EwNode n;
  n.op = cu::EwOp::cast;
  n.type = scalarOf(src);
  n.operands = {-1};
  prog.nodes.push_back(n);
  prog.outputs.push_back({0, scalarOf(src)});
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                        generated(cu::EmitElementwise(prog), blame));
  int kernel = addKernel(code);
  int64_t esize = cu::ScalarSize(scalarOf(src));
  std::vector<rt::Arg> args = {bufArg(dstBuffer),
                               ptrArg(read->root, read->elementOffset * esize),
                               i64Arg(numel)};
  LLMC_ASSIGN_OR_RETURN(
      rt::Arg shapeBytes,
      generated(shapeArg(prog, std::vector<int64_t>(shape.begin(), shape.end()),
                         {std::vector<int64_t>(read->strides.begin(),
                                               read->strides.end())}),
                blame));
  args.push_back(std::move(shapeBytes));
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                        generated(cu::ElementwiseLaunch(prog, numel), blame));
  launch(kernel, dims, std::move(args), op);
  return absl::OkStatus();
}

} // namespace llmc::codegen
