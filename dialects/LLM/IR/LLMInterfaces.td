//===- LLMInterfaces.td - llm op interfaces ----------------*- tablegen -*-===//
//
// Interfaces of the `llm` ops. Views carry MLIR's ViewLikeOpInterface
// (getViewSource: the operand whose storage the result is); those read
// through strides carry LLM_StridedViewOpInterface as well.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_LLM_IR_LLMINTERFACES_TD
#define LLMC_DIALECT_LLM_IR_LLMINTERFACES_TD

include "mlir/IR/OpBase.td"

def LLM_StridedViewOpInterface : OpInterface<"StridedViewOpInterface"> {
  let cppNamespace = "::llmc::llm";
  let description = [{
    A view (an op with `ViewLikeOpInterface`) whose result is its source's
    storage read through other strides and an element offset, not in the
    result's own row-major order: `llm.broadcast` (stride 0 along the
    broadcast dimensions), `llm.transpose` (permuted strides) and
    `llm.slice` (an offset and scaled strides). A consumer that reads
    strided inputs (a fused elementwise kernel, a GEMM operand with a
    leading dimension) reads the source in place; one that needs dense
    storage gets a copy. The other view, `llm.reshape`, keeps the row-major
    order: its result is its source's bytes as they are.

    ```mlir
    // %t[i, j] = %x[j, i], element j * 11008 + i of %x's storage: %x is
    // read with strides [11008, 1], %t with strides [1, 11008].
    %t = llm.transpose %x [1, 0] : tensor<4096x11008xbf16>
    ```
  }];
  let methods = [
    InterfaceMethod<[{
        Where the result's elements are in the storage its source is read
        from: given the source's element offset and strides (in elements,
        one per source dimension), sets them to the result's (one stride
        per result dimension).
      }],
      "void", "composeLayout",
      (ins "int64_t &":$elementOffset,
           "::llvm::SmallVectorImpl<int64_t> &":$strides)>
  ];
  let verify = [{
    if (!::llvm::isa<::mlir::ViewLikeOpInterface>($_op))
      return $_op->emitOpError("a strided view must be a ViewLikeOpInterface");
    return ::mlir::success();
  }];
}

#endif // LLMC_DIALECT_LLM_IR_LLMINTERFACES_TD
