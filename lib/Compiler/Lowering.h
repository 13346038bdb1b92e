//===- Lowering.h - the CUDA lowering's state and helpers -------*- C++ -*-===//
//
// Internal to lib/Compiler: the Lowering class (one per LowerToExecutable
// call) and the helpers its files share. The lowering is split by concern:
//   LowerToExecutable.cpp  driver: checks, signature, liveness, parameter
//                          preparation, the public functions (the result
//                          is exec IR, built through ExecBuilder.h; then
//                          llmc-plan-arena, translateToExecutable)
//   LowerStorage.cpp       buffers, strided reads of views, copies,
//                          relayouts, launches
// and one conversion pattern file per op family (OpLoweringSet):
//   LowerElementwise.cpp   fused elementwise kernels (elementwise groups)
//   LowerNorms.cpp         RMSNorm, LayerNorm (+ residual add), softmax
//   LowerMatmul.cpp        GEMMs (cuBLASLt), decode GEMVs and their groups
//   LowerWeightOnly.cpp    weight-only quantize/dequantize
//   LowerAttention.cpp     attention (FlashAttention-2, flash-decoding, cuDNN)
//   LowerRoPE.cpp          rotary position embedding
//   LowerKVCache.cpp       KV-cache append
//   LowerReductions.cpp    reductions
//   LowerDataMovement.cpp  gather, concat, pad
//   LowerCollectives.cpp   all-reduce, all-gather, reduce-scatter
// Which ops share a kernel is decided by llmc-form-kernels (planKernels),
// their configurations by llmc-select-kernel-configs; both are read back
// from IR (decidedKernelPlan, KernelPlan.h; decidedKernelConfigs,
// KernelConfigs.h).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_LIB_COMPILER_LOWERING_H
#define LLMC_LIB_COMPILER_LOWERING_H

#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/Support/StatusMacros.h"

#include "ExecBuilder.h"
#include "KernelConfigs.h"
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
#include <cstring>
#include <functional>
#include <tuple>


namespace llmc::codegen {

using namespace mlir;
using namespace llmc::llm;
namespace cu = llmc::cuda;

inline std::string typeName(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

inline std::string describe(Operation *op) { return describeOp(op); }

inline absl::Status unsupported(Operation *op, const llvm::Twine &what) {
  return absl::UnimplementedError(
      absl::StrCat("cuda backend: ", describe(op), ": ", what.str()));
}

/// A kernel generator's result (llmc/Target/CUDA), or its error reported as
/// `op` being unsupported: "cuda backend: '<op>' at <loc>: llmc::cuda kernel
/// generator: <why>". Use with LLMC_ASSIGN_OR_RETURN inside an emit function
/// (which `guarded` runs), so the op's pending materializeErrors are still
/// collected there.
template <typename T>
absl::StatusOr<T> generated(absl::StatusOr<T> result, Operation *op) {
  if (!result.ok())
    return unsupported(op, std::string(result.status().message()));
  return result;
}

inline absl::StatusOr<rt::DType> toDType(Type t) { return llmc::toRuntimeDType(t); }

inline cu::ScalarType toScalar(rt::DType t) { return kernelScalarType(t); }

inline RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }
inline cu::ScalarType scalarOf(Value v) {
  return toScalar(*toDType(tensorType(v).getElementType()));
}
inline int64_t numElements(Value v) { return tensorType(v).getNumElements(); }
inline int64_t byteSize(Value v) {
  return numElements(v) * rt::DTypeSize(*toDType(tensorType(v).getElementType()));
}

/// Row-major strides (elements) of `shape`.
inline SmallVector<int64_t> rowMajorStrides(ArrayRef<int64_t> shape) {
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

inline std::optional<double> splatValue(Value v) {
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

/// Raw storage bytes of a dense constant in the runtime's layout; `def` (the
/// constant op) is named in the error.
inline absl::StatusOr<std::string> constantBytes(ElementsAttr elements, Operation *def) {
  auto attr = dyn_cast<DenseElementsAttr>(elements);
  if (!attr)
    return absl::UnimplementedError(absl::StrCat(
        "cuda backend: ", describeOp(def),
        ": only dense constants (dense<...>) are supported, not dense_resource "
        "or other encodings"));
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

class OpLoweringSet;

/// One lowering of a shape-specialized function to exec IR. The driver
/// (run, LowerToExecutable.cpp) walks the ops in order and hands each to the
/// conversion pattern of its op family (OpLoweringSet) or, for the kernels
/// llmc-form-kernels formed, to the group's lowering. The public methods are
/// what those patterns use: the storage of values (buffers, views read in
/// place or materialized, the arena), kernels and launches (through the
/// ExecBuilder), and the decisions read from IR.
class Lowering {
public:
  /// Builds `fn`'s exec.executable in `context`.
  Lowering(func::FuncOp fn, const LowerOptions &options, MLIRContext &context);

  /// The executable with its arena unplanned (each arena buffer carries its
  /// liveness, none an offset): LowerToExecIR plans it with llmc-plan-arena.
  absl::StatusOr<OwningOpRef<exec::ExecutableOp>> run();

  // --- what the patterns read ---
  const LowerOptions &getOptions() const { return options; }
  /// Which ops share a kernel (llmc-form-kernels) and their configurations
  /// (llmc-select-kernel-configs).
  const KernelPlan &getKernelPlan() const { return kernelPlan; }
  /// The donated argument whose buffer `v` (a function result) is written
  /// over (llmc::inPlaceResults), or null.
  BlockArgument inPlaceArgOf(Value v) const { return inPlaceArg.lookup(v); }
  const KernelConfigs &getKernelConfigs() const { return kernelConfigs; }
  /// The launch step being emitted (the op's index in the function): the
  /// liveness unit of arena buffers.
  int getStep() const { return step; }
  /// Whether `v` is a parameter or computed from parameters only (its work
  /// runs in the preparation segment).
  bool isHoisted(Value v) const { return parameterDerived.contains(v); }
  /// GEMMs, copies and collectives are built on it directly.
  ExecBuilder &getBuilder() { return builder; }

  // --- storage ---
  /// `v` read in place: its storage root and the strides of the view.
  absl::StatusOr<StridedRead> stridedRead(Value v);
  /// The buffer of `v`'s storage root, made on first use (a view that needs
  /// dense storage is copied into a buffer of its own right here).
  int bufferFor(Value v);
  /// Where `v`'s storage starts: bufferFor(v) and, for a view that aliases
  /// its source's buffer at a nonzero offset (a dense slice such as the k
  /// or v part of a fused QKV projection), that byte offset.
  BufferRef storageOf(Value v);
  /// A fresh arena buffer live over [firstStep, lastStep].
  int newArenaBuffer(int64_t bytes, int firstStep, int lastStep);
  /// A persistent buffer of `count` 32-bit semaphores that are zero before
  /// every launch reading it: zeroed by the preparation (a copy from a zero
  /// constant), and every kernel given it leaves it zero (e.g.
  /// cu::DecodeConfig::fused_combine). One buffer per count, shared by the
  /// launches of the executable (they run one after another). The zeros
  /// count against LowerOptions::max_constant_bytes (ResourceExhausted
  /// naming `op` beyond it).
  absl::StatusOr<int> zeroedSemaphores(int64_t count, Operation *op);
  /// A fresh dense buffer holding `src` (through its view strides), its last
  /// two dims swapped when `swapLastTwo`, converted to `to`: one kernel, in
  /// the preparation (into a persistent buffer shared by its readers) when
  /// `src` is parameter-derived.
  absl::StatusOr<int> emitRelayout(Value src, bool swapLastTwo, cu::ScalarType to,
                                   Operation *op);
  /// dst's fresh storage = src through its strides (a copy or one kernel).
  absl::Status emitCopyInto(Value dst, Value src, Operation *op);
  absl::Status emitCopyToBuffer(int dstBuffer, Value src, Operation *op,
                                Operation *blame = nullptr);

  // --- kernels and launches ---
  int addKernel(const cu::KernelCode &code);
  KernelArg ptrArg(Value v, int64_t byteOffset = 0);
  KernelArg bufArg(int buffer, int64_t byteOffset = 0) {
    return KernelArg::buffer(buffer, byteOffset);
  }
  /// A launch of `kernel` labelled with `op`'s name.
  void launch(int kernel, const cu::LaunchDims &dims, ArrayRef<KernelArg> args,
              Operation *op, const AttentionAttachment *attention = nullptr);
  /// A launch of the kernel a generator made for `op`: `code` and `dims` are
  /// its results, either of which may be its rejection, reported as `op`
  /// unsupported (see generated(); the launch dimensions' first).
  absl::Status launchGenerated(absl::StatusOr<cu::KernelCode> code,
                               absl::StatusOr<cu::LaunchDims> dims,
                               ArrayRef<KernelArg> args, Operation *op);

private:
  absl::Status checkStatic();
  absl::Status planHoisting();
  int bufferForImpl(Value v);
  absl::Status emitOp(Operation *op, const OpLoweringSet &patterns);
  /// While alive, launches and arena buffers go to the preparation segment
  /// when `on` (or when they already did).
  struct Preparing {
    Preparing(ExecBuilder &out, bool on)
        : out(out), was(out.setPreparing(out.preparing() || on)) {}
    ~Preparing() { out.setPreparing(was); }
    ExecBuilder &out;
    bool was;
  };

  func::FuncOp fn;
  LowerOptions options;
  ExecBuilder builder;

  int step = 0; // index of the launch step being emitted
  llvm::DenseMap<Value, int> buffers;          // storage root -> buffer id
  llvm::DenseMap<Value, int64_t> aliasOffsets; // view root -> byte offset in
                                               // its source's buffer
  llvm::DenseMap<Value, int> lastUseStep;      // storage root -> last step
  llvm::DenseMap<Value, int> defStep;          // storage root -> def step
  KernelPlan kernelPlan;                       // which ops share a kernel
  KernelConfigs kernelConfigs;                 // their configurations
  llvm::DenseMap<Value, BlockArgument> inPlaceArg; // result written into a
                                                   // donated argument
  llvm::DenseMap<Value, int> outputIndex;      // returned root -> output
  std::vector<absl::Status> materializeErrors; // from lazy view copies
  Operation *emitting = nullptr;               // the op `guarded` is emitting
  // Parameter preparation (see the file comment).
  llvm::DenseSet<Operation *> hoisted;     // ops of the preparation segment
  llvm::DenseSet<Value> parameterDerived;  // parameters and hoisted results
  llvm::DenseSet<int> prepOutputs;         // buffers of hoisted values
  llvm::DenseSet<int> promoted;            // of those, read per call
  llvm::DenseMap<std::tuple<Value, int, int>, int> hoistedRelayouts;
  llvm::DenseMap<int64_t, int> semaphores; // zeroedSemaphores: count -> buffer
  int64_t constantBytesTotal = 0; // constant data stored in the executable
};

/// The conversion patterns: for each op type, the function that lowers it
/// to exec ops through a Lowering (Triton's one pattern per op family).
/// Each family's file adds its own (populate*Lowerings); an op type without
/// one is reported unsupported.
class OpLoweringSet {
public:
  using Fn = std::function<absl::Status(Operation *, Lowering &)>;
  /// `fn` lowers every op of the types `Op, Ops...`; it takes the op as an
  /// `Op` when there is one type, as an `Operation *` for several.
  template <typename Op, typename... Ops, typename F> void add(F fn) {
    Fn erased = [fn](Operation *op, Lowering &l) -> absl::Status {
      if constexpr (sizeof...(Ops) == 0)
        return fn(cast<Op>(op), l);
      else
        return fn(op, l);
    };
    for (TypeID id : {TypeID::get<Op>(), TypeID::get<Ops>()...}) {
      [[maybe_unused]] bool added = table.try_emplace(id, erased).second;
      assert(added && "an op type has two lowering patterns");
    }
  }
  /// The pattern of `op`'s type; null when none.
  const Fn *lookup(Operation *op) const {
    auto it = table.find(op->getName().getTypeID());
    return it == table.end() ? nullptr : &it->second;
  }

private:
  llvm::DenseMap<TypeID, Fn> table;
};

/// One per op-family file (lib/Compiler/Lower<Family>.cpp).
void populateAttentionLowerings(OpLoweringSet &set);
void populateCollectiveLowerings(OpLoweringSet &set);
void populateDataMovementLowerings(OpLoweringSet &set); // gather, concat, pad
void populateKVCacheLowerings(OpLoweringSet &set);
void populateMatmulLowerings(OpLoweringSet &set);
void populateNormLowerings(OpLoweringSet &set); // RMSNorm, LayerNorm, softmax
void populateRandomLowerings(OpLoweringSet &set); // dropout masks
void populateReductionLowerings(OpLoweringSet &set);
void populateRoPELowerings(OpLoweringSet &set);
void populateWeightOnlyLowerings(OpLoweringSet &set);

/// The lowerings of the kernels llmc-form-kernels formed from several ops:
/// a fused elementwise group (LowerElementwise.cpp), a row kernel, and a
/// group of decode GEMVs sharing their input (LowerMatmul.cpp).
absl::Status lowerElementwiseGroup(ArrayRef<Operation *> ops, Lowering &l);
/// The node computing elementwise `op` (kind, result type, predicate; no
/// operands yet), nullopt for any other op (LowerElementwise.cpp).
std::optional<cu::EwNode> ewNodeOf(Operation *op);
/// A row kernel (KernelPlan::rowGroups; LowerReductions.cpp).
absl::Status lowerRowGroup(ArrayRef<Operation *> ops, Lowering &l);
absl::Status lowerGemvGroup(const GemvGroup &group, Lowering &l);
/// RoPE computed by the kernel of the index_put that writes it into a KV
/// cache (LowerRoPE.cpp).
absl::Status lowerRopeCacheWrite(const RopeCacheWrite &w, Lowering &l);
absl::Status lowerAttentionStats(const AttentionStats &a, Lowering &l);

/// Every tensor codegen sizes is within llm::kMaxTensorElements (what the
/// `llm` verifiers and the runtime's Executable::Validate take), so element
/// counts, byte sizes and offsets below cannot overflow int64. `what` names
/// the value ("argument 0 of @f", "'arith.constant' at loc(...)").
inline absl::Status checkTensorSize(const std::string &what, RankedTensorType t) {
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

inline KernelArg i64Arg(int64_t v) { return KernelArg::i64(v); }
inline KernelArg i32Arg(int64_t v) { return KernelArg::i32(v); }
inline KernelArg f32Arg(float v) { return KernelArg::f32(v); }
inline KernelArg nullArg() { return i64Arg(0); }

/// See LowerElementwise.cpp.
void collapseIndexSpace(const cu::ElementwiseProgram &prog, std::vector<int64_t> &sizes,
                        std::vector<std::vector<int64_t>> &strides);
absl::StatusOr<KernelArg> shapeArg(const cu::ElementwiseProgram &prog,
                                 std::vector<int64_t> sizes,
                                 std::vector<std::vector<int64_t>> strides);

} // namespace llmc::codegen

#endif // LLMC_LIB_COMPILER_LOWERING_H
