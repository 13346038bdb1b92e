//===- LLMOps.h - llm dialect operations ------------------------*- C++ -*-===//
//
// C++ classes of the `llm` ops generated from LLMOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_LLM_IR_LLMOPS_H
#define LLMC_DIALECT_LLM_IR_LLMOPS_H

#include "LLM/IR/LLMDialect.h"
#include "LLM/IR/LLMInterfaces.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "LLM/IR/LLMEnums.h.inc"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace llmc::llm {

/// The most elements one tensor may have in llmc, and the most any static
/// dimension may be: 2^40 (8 TiB of i64, 4 TiB of f32). Every byte size,
/// stride and linear index of such a tensor fits int64 with room to spare;
/// the runtime's Executable::Validate uses the same bound.
constexpr int64_t kMaxTensorElements = int64_t(1) << 40;

/// The product of `shape`'s static dimensions, dynamic ones left out, with
/// empty (size-0) dimensions counted as 1: an upper bound on every row-major
/// stride and linear index of a tensor of that shape (and its element count
/// when no dimension is empty). nullopt when the product overflows int64.
std::optional<int64_t> checkedExtent(llvm::ArrayRef<int64_t> shape);

/// The number of elements of `type` counting only its static dimensions
/// (0 when one is empty); nullopt when `type` is unranked or the product of
/// its static dimensions overflows int64 (see checkedExtent).
std::optional<int64_t> checkedNumElements(mlir::ShapedType type);

/// Checks that `type` (when it is a ranked tensor) is within
/// kMaxTensorElements: no static dimension above it, and the product of the
/// static dimensions (empty ones counted as 1) not above it. `what` names
/// the value for the message ("operand #1", "argument 0 of @f"), e.g.
///   operand #0 has type 'tensor<2199023255552xf32>' with 2199023255552
///   elements, more than the supported 2^40 (1099511627776)
mlir::LogicalResult
verifyTensorSize(llvm::function_ref<mlir::InFlightDiagnostic()> emitError,
                 llvm::StringRef what, mlir::Type type);

/// True for the element types of the `llm` dialect: f32, f16, bf16,
/// f8E4M3FN, f8E5M2, i1, i8, i32 and i64 (signless).
bool isSupportedElementType(mlir::Type type);

/// The largest head dimension `llm.attention` supports (its range is
/// 1..kMaxAttentionHeadDim): what llmc's CUDA kernels implement (the
/// warp-per-query-row kernel keeps D / 32 accumulators per lane).
constexpr int64_t kMaxAttentionHeadDim = 1024;

// Edge-case rules shared by the verifiers and the reference executor, so
// that both reject the same programs with the same words: each returns the
// message (without the op name) or nullopt. Dynamic sizes pass.

/// A reduction over `dims` of a tensor of `shape`: no reduced dimension is
/// empty.
std::optional<std::string> checkReducedDims(llvm::ArrayRef<int64_t> shape,
                                            llvm::ArrayRef<int64_t> dims);
/// A matmul's contraction size K (already known to agree between lhs and
/// rhs): at least 1.
std::optional<std::string> checkContractionSize(int64_t k);
/// An attention head dimension D: 1..kMaxAttentionHeadDim.
std::optional<std::string> checkAttentionHeadDim(int64_t d);

/// The verifier of the BoundedTensors trait: every ranked tensor operand
/// and result of `op` passes verifyTensorSize.
mlir::LogicalResult verifyBoundedTensors(mlir::Operation *op);

/// Op trait of every `llm` op (LLM_Op): its operands and results are within
/// kMaxTensorElements, so its verifier, folders and lowerings may compute
/// element counts, byte sizes and strides without overflow checks.
template <typename ConcreteType>
class BoundedTensors
    : public mlir::OpTrait::TraitBase<ConcreteType, BoundedTensors> {
public:
  static mlir::LogicalResult verifyTrait(mlir::Operation *op) {
    return verifyBoundedTensors(op);
  }
};

} // namespace llmc::llm

#define GET_OP_CLASSES
#include "LLM/IR/LLMOps.h.inc"

namespace llmc::llm {

/// Result shape of `llm.matmul` for operands lhs [..., M, K] ([..., K, M]
/// when transposeLhs) and rhs [..., K, N] ([..., N, K] when transposeRhs):
/// the NumPy broadcast of the batch dimensions followed by [M, N]. nullopt
/// when an operand has rank < 2 or the batch dimensions do not broadcast.
std::optional<llvm::SmallVector<int64_t>>
matmulResultShape(mlir::RankedTensorType lhs, mlir::RankedTensorType rhs,
                  bool transposeLhs, bool transposeRhs);

} // namespace llmc::llm

#endif // LLMC_DIALECT_LLM_IR_LLMOPS_H
