//===- Lowering.h - the CUDA lowering's state and helpers -------*- C++ -*-===//
//
// Internal to lib/Compiler: the Lowering class (one per LowerToExecutable
// call) and the helpers its files share. The lowering is split by concern:
//   LowerToExecutable.cpp  driver: checks, signature, liveness, parameter
//                          preparation, the public functions (the result
//                          is exec IR, built through ExecBuilder.h; then
//                          llmc-plan-arena, translateToExecutable)
//   LowerStorage.cpp       buffers, strided reads of views, copies, launches
//   LowerElementwise.cpp   fused elementwise kernels
//   LowerOps.cpp           the per-op dispatch (emitOp) and norms
//   LowerMatmul.cpp        GEMMs (cuBLASLt), relayouts, pads, decode GEMVs,
//                          weight-only quantization
//   LowerAttention.cpp     attention (FlashAttention-2 kernels, cuDNN)
// Which ops share a kernel is decided by llmc-form-kernels (planKernels),
// their configurations by llmc-select-kernel-configs; both are read back
// from IR (decidedKernelPlan, KernelPlan.h; decidedKernelConfigs,
// KernelConfigs.h).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_LIB_COMPILER_LOWERING_H
#define LLMC_LIB_COMPILER_LOWERING_H

#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/Target/Executable/TranslateToExecutable.h"

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
#include <cstdlib>
#include <cstring>
#include <map>
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

/// `lhs = *expr;` when `expr` (a StatusOr) is ok, else returns its status
/// from the enclosing function.
#define LLMC_ASSIGN_OR_RETURN(lhs, expr)                                       \
  LLMC_ASSIGN_OR_RETURN_IMPL(LLMC_CONCAT(llmcStatusOr, __LINE__), lhs, expr)
#define LLMC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                             \
  auto tmp = (expr);                                                           \
  if (!tmp.ok())                                                               \
    return tmp.status();                                                       \
  lhs = std::move(*tmp)
#define LLMC_CONCAT(a, b) LLMC_CONCAT_IMPL(a, b)
#define LLMC_CONCAT_IMPL(a, b) a##b

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

/// Raw storage bytes of a dense constant in the runtime's layout.
inline absl::StatusOr<std::string> constantBytes(ElementsAttr elements) {
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
  /// Builds `fn`'s exec.executable in `context`.
  Lowering(func::FuncOp fn, const LowerOptions &options, MLIRContext &context);

  /// The executable with its arena unplanned (each arena buffer carries its
  /// liveness, none an offset): LowerToExecIR plans it with llmc-plan-arena.
  absl::StatusOr<OwningOpRef<exec::ExecutableOp>> run();

private:
  // --- analysis ---
  absl::Status checkStatic();
  absl::StatusOr<StridedRead> stridedRead(Value v);

  // --- storage ---
  int bufferFor(Value v); // buffer id of v's storage root
  int bufferForImpl(Value v);
  int newArenaBuffer(int64_t bytes, int firstStep, int lastStep);

  // --- emission ---
  int addKernel(const cu::KernelCode &code);
  KernelArg ptrArg(Value v, int64_t byteOffset = 0);
  KernelArg bufArg(int buffer, int64_t byteOffset = 0) {
    return KernelArg::buffer(buffer, byteOffset);
  }
  void launch(int kernel, const cu::LaunchDims &dims, ArrayRef<KernelArg> args,
              Operation *op, const AttentionAttachment *attention = nullptr);
  absl::Status emitOp(Operation *op);
  absl::Status emitElementwiseGroup(ArrayRef<Operation *> ops);
  absl::Status emitCopyInto(Value dst, Value src, Operation *op);
  absl::Status emitCopyToBuffer(int dstBuffer, Value src, Operation *op,
                                Operation *blame = nullptr);
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
  absl::StatusOr<AttentionAttachment> cudnnAttachment(AttentionOp op);
  absl::Status emitNorm(Operation *op);
  // Weight-only quantization (llm.quantize_weight / dequantize_weight).
  absl::StatusOr<cu::WeightQuantConfig> weightQuantConfig(Operation *op, int64_t bits,
                                                          int64_t group,
                                                          cu::ScalarType dtype);
  absl::Status emitQuantizeWeight(QuantizeWeightOp op);
  absl::Status emitDequantizeWeight(DequantizeWeightOp op);
  // Horizontal fusion of decode GEMVs sharing an input (KernelPlan).
  KernelArg gemvWeightArg(MatmulOp op);
  absl::Status emitGemvGroup(const GemvGroup &group);
  absl::Status planHoisting();
  bool isHoisted(Value v) const { return parameterDerived.contains(v); }
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
  llvm::DenseMap<Value, int> lastUseStep;      // storage root -> last step
  llvm::DenseMap<Value, int> defStep;          // storage root -> def step
  KernelPlan kernelPlan;                       // which ops share a kernel
  KernelConfigs kernelConfigs;                 // their configurations
  llvm::DenseMap<Value, int> outputIndex;      // returned root -> output
  std::vector<absl::Status> materializeErrors; // from lazy view copies
  Operation *emitting = nullptr;               // the op `guarded` is emitting
  // Parameter preparation (see the file comment).
  llvm::DenseSet<Operation *> hoisted;     // ops of the preparation segment
  llvm::DenseSet<Value> parameterDerived;  // parameters and hoisted results
  llvm::DenseSet<int> prepOutputs;         // buffers of hoisted values
  llvm::DenseSet<int> promoted;            // of those, read per call
  llvm::DenseMap<std::tuple<Value, int, int>, int> hoistedRelayouts;
  int64_t constantBytesTotal = 0; // constant data stored in the executable
};

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
