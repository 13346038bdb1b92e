//===- LowerStorage.cpp - buffers, views, copies, launches ------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// The alignment of a view's offset inside its source's buffer when the view
/// aliases it: the view keeps its source's alignment (arena offsets are
/// multiples of LowerOptions::arena_alignment, 128 bytes by default; the
/// kernels' 16-byte vector loads need 16), the same rule as GEMM operand
/// views (LowerMatmul.cpp).
static constexpr int64_t kAliasAlignment = 256;

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
  return builder.addKernel(code.name, code.source, cu::WaitsForGridDependency(code.source));
}

int Lowering::newArenaBuffer(int64_t bytes, int firstStep, int lastStep) {
  return builder.addArenaBuffer(bytes, firstStep, lastStep);
}

absl::StatusOr<int> Lowering::zeroedSemaphores(int64_t count, Operation *op) {
  if (auto it = semaphores.find(count); it != semaphores.end())
    return it->second;
  int64_t bytes = count * 4;
  if (bytes > options.max_constant_bytes - constantBytesTotal)
    return absl::ResourceExhaustedError(absl::StrCat(
        "cuda backend: ", describe(op), ": its ", count, " semaphores (", bytes,
        " bytes of zeros) take the executable's constant data to ",
        constantBytesTotal + bytes, " bytes, more than the limit of ",
        options.max_constant_bytes, " bytes (LowerOptions::max_constant_bytes)"));
  int zeros = builder.addConstantBuffer(bytes, std::string(bytes, '\0'));
  constantBytesTotal += bytes;
  int sem = builder.addPersistentBuffer(bytes);
  Preparing scope(builder, true);
  builder.copy({zeros, 0}, {sem, 0}, bytes, "semaphores");
  return semaphores[count] = sem;
}

/// A hoisted value's buffer starts as preparation scratch (arena) and becomes
/// Persistent the first time a per-call launch reads it.
int Lowering::bufferFor(Value v) {
  int id = bufferForImpl(v);
  if (!builder.preparing() && prepOutputs.contains(id) && promoted.insert(id).second)
    builder.makePersistent(id);
  return id;
}

int Lowering::bufferForImpl(Value v) {
  Value root = storageRoot(v);
  auto it = buffers.find(root);
  if (it != buffers.end())
    return it->second;
  // A strided view (broadcast/transpose/slice) read by a consumer that needs
  // dense storage, possibly through reshapes: give the view its own buffer
  // and copy into it now, right before the consumer's launch -- unless its
  // layout is a dense block of its source's storage as it is (a transpose or
  // broadcast that only moves size-1 dims, a slice of one contiguous block
  // such as the k part of a fused QKV output), which is then the view's
  // storage: its source's buffer at the block's offset. The copy would
  // reproduce the same bytes at the same moment (the lazy copy reads the
  // source right before the consumer, and the source stays live until then,
  // see `touch`; views are never written in place). The offset is a
  // multiple of kAliasAlignment, so the view keeps its source's alignment.
  if (Operation *def = root.getDefiningOp();
      isa_and_nonnull<StridedViewOpInterface>(def) && !outputIndex.count(root)) {
    absl::StatusOr<StridedRead> read = stridedRead(root);
    if (read.ok()) {
      ArrayRef<int64_t> shape = tensorType(root).getShape();
      auto dense = rowMajorStrides(shape);
      bool same = true;
      for (size_t i = 0; i < shape.size(); ++i)
        same &= shape[i] == 1 || read->strides[i] == dense[i];
      int64_t offset = read->elementOffset * cu::ScalarSize(scalarOf(root));
      if (same && offset % kAliasAlignment == 0) {
        int source = bufferForImpl(read->root);
        offset += aliasOffsets.lookup(storageRoot(read->root));
        if (offset % kAliasAlignment == 0) {
          if (offset != 0)
            aliasOffsets[root] = offset;
          return buffers[root] = source;
        }
      }
    }
  }
  if (Operation *def = root.getDefiningOp();
      isa_and_nonnull<StridedViewOpInterface>(def)) {
    // A view of parameters is materialized once per parameter set.
    bool prep = isHoisted(root) && !outputIndex.count(root);
    Preparing scope(builder, prep);
    int first = step;
    int last = std::max(step, lastUseStep.lookup(root));
    int id = outputIndex.count(root)
                 ? builder.addIOBuffer(exec::BufferKind::output, outputIndex[root])
                 : newArenaBuffer(byteSize(root), first, last);
    buffers[root] = id;
    if (prep)
      prepOutputs.insert(id);
    // A copy the generators refuse is an error of the op being emitted,
    // whose operand the view is.
    materializeErrors.push_back(
        emitCopyToBuffer(id, root, def, emitting ? emitting : def));
    return id;
  }
  // Constants: their bytes are stored in the executable, within
  // options.max_constant_bytes in total (checked before allocating them).
  Attribute attr;
  if (matchPattern(root, m_Constant(&attr))) {
    int64_t bytes = byteSize(root);
    std::string data;
    if (bytes > options.max_constant_bytes - constantBytesTotal) {
      Operation *def = root.getDefiningOp();
      materializeErrors.push_back(absl::ResourceExhaustedError(absl::StrCat(
          "cuda backend: ", describe(def), ": a constant of ", bytes,
          " bytes (", typeName(root.getType()), ") takes the executable's "
          "constant data to ", constantBytesTotal + bytes,
          " bytes, more than the limit of ", options.max_constant_bytes,
          " bytes (LowerOptions::max_constant_bytes); pass large tensors as "
          "function arguments")));
    } else {
      constantBytesTotal += bytes;
      auto stored = constantBytes(cast<ElementsAttr>(attr), root.getDefiningOp());
      if (stored.ok())
        data = std::move(*stored);
      else
        materializeErrors.push_back(stored.status());
    }
    // On an error the buffer holds no data; the lowering fails at this op.
    return buffers[root] = builder.addConstantBuffer(bytes, data);
  }
  // Function results write straight into the output buffer.
  if (auto result = outputIndex.find(root); result != outputIndex.end())
    return buffers[root] = builder.addIOBuffer(exec::BufferKind::output, result->second);
  int first = defStep.count(root) ? defStep[root] : step;
  int last = lastUseStep.count(root) ? lastUseStep[root] : step;
  int id = newArenaBuffer(byteSize(root), first, std::max(first, last));
  if (isHoisted(root))
    prepOutputs.insert(id);
  return buffers[root] = id;
}

BufferRef Lowering::storageOf(Value v) {
  int id = bufferFor(v);
  return {id, aliasOffsets.lookup(storageRoot(v))};
}

KernelArg Lowering::ptrArg(Value v, int64_t byteOffset) {
  BufferRef r = storageOf(v);
  return bufArg(r.buffer, r.offset + byteOffset);
}

void Lowering::launch(int kernel, const cu::LaunchDims &dims, ArrayRef<KernelArg> args,
                      Operation *op, const AttentionAttachment *attention) {
  int64_t grid[3], block[3];
  for (int i = 0; i < 3; ++i) {
    grid[i] = dims.grid[i];
    block[i] = dims.block[i];
  }
  builder.launch(kernel, grid, block, dims.smem, args, op->getName().getStringRef(),
             attention);
}

absl::Status Lowering::launchGenerated(absl::StatusOr<cu::KernelCode> code,
                                       absl::StatusOr<cu::LaunchDims> dims,
                                       ArrayRef<KernelArg> args, Operation *op) {
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims d, generated(std::move(dims), op));
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode k, generated(std::move(code), op));
  launch(addKernel(k), d, args, op);
  return absl::OkStatus();
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
    builder.copy(storageOf(read->root), {dstBuffer, 0}, byteSize(src), "copy");
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
  std::vector<KernelArg> args = {bufArg(dstBuffer),
                               ptrArg(read->root, read->elementOffset * esize),
                               i64Arg(numel)};
  LLMC_ASSIGN_OR_RETURN(
      KernelArg shapeBytes,
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

namespace {
/// A relayout that the tiled transpose kernel does: a batch of [rows, cols]
/// matrices, row stride ld, batch stride batchStride (elements), their last
/// two dims swapped.
struct TiledTranspose {
  int64_t batch = 1, rows = 0, cols = 0, ld = 0, batchStride = 0;
};

/// The tiled transpose of a read of `shape` through `strides` (its last two
/// dims swapped), when the innermost dim has stride 1 and the outer dims
/// collapse into one batch dim with one stride; none for empty tensors.
std::optional<TiledTranspose> tiledTranspose(bool swapLastTwo, ArrayRef<int64_t> shape,
                                             ArrayRef<int64_t> strides, int64_t numel) {
  const size_t rank = shape.size();
  if (!swapLastTwo || rank < 2 || numel == 0 || strides[rank - 1] != 1)
    return std::nullopt;
  TiledTranspose t;
  t.rows = shape[rank - 2];
  t.cols = shape[rank - 1];
  t.ld = t.rows == 1 ? t.cols : strides[rank - 2];
  if (t.ld < t.cols)
    return std::nullopt;
  // Outer dims, innermost first; size-1 dims have no stride that matters.
  int64_t nextStride = -1;
  for (size_t d = rank - 2; d-- > 0;) {
    if (shape[d] == 1)
      continue;
    if (nextStride == -1)
      t.batchStride = strides[d];
    else if (strides[d] != nextStride)
      return std::nullopt;
    nextStride = strides[d] * shape[d];
    t.batch *= shape[d];
  }
  return t;
}
} // namespace

/// A fresh dense buffer holding `src` (read through its view strides) with
/// its last two dims swapped when `swapLastTwo`, converted to `to`; live for
/// the current step only. One kernel: the tiled transpose where the read
/// is a batch of matrices with contiguous rows within CUDA's grid
/// (tiledTranspose), else an elementwise kernel.
absl::StatusOr<int> Lowering::emitRelayout(Value src, bool swapLastTwo, cu::ScalarType to,
                                           Operation *op) {
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
  // A transpose of matrices whose rows are contiguous (an activation or
  // gradient [tokens, features] into cuBLASLt's fp8 [features, tokens]):
  // the tiled kernel, with coalesced reads and writes.
  if (std::optional<TiledTranspose> t =
          tiledTranspose(swapLastTwo, tensorType(src).getShape(), read->strides, numel)) {
    cu::TransposeConfig cfg;
    cfg.in = scalarOf(src);
    cfg.out = to;
    absl::StatusOr<cu::LaunchDims> dims = cu::TransposeLaunch(t->batch, t->rows, t->cols);
    if (cu::TransposeSupported(cfg) && dims.ok()) {
      LLMC_ASSIGN_OR_RETURN(cu::KernelCode code, generated(cu::EmitTranspose(cfg), op));
      launch(addKernel(code), *dims,
             {bufArg(dst), ptrArg(read->root, read->elementOffset * cu::ScalarSize(cfg.in)),
              i64Arg(t->rows), i64Arg(t->cols), i64Arg(t->ld), i64Arg(t->batchStride)},
             op);
      return dst;
    }
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
  std::vector<KernelArg> args = {
      bufArg(dst), ptrArg(read->root, read->elementOffset * esize), i64Arg(numel)};
  LLMC_ASSIGN_OR_RETURN(
      KernelArg shapeBytes,
      generated(shapeArg(prog, std::vector<int64_t>(shape.begin(), shape.end()),
                         {std::vector<int64_t>(strides.begin(), strides.end())}),
                op));
  args.push_back(std::move(shapeBytes));
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                        generated(cu::ElementwiseLaunch(prog, numel), op));
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code, generated(cu::EmitElementwise(prog), op));
  launch(addKernel(code), dims, std::move(args), op);
  return dst;
}
} // namespace llmc::codegen
