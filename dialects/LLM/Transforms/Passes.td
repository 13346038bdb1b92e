//===- Passes.td - llm dialect passes ----------------------*- tablegen -*-===//

#ifndef LLMC_DIALECT_LLM_TRANSFORMS_PASSES_TD
#define LLMC_DIALECT_LLM_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def SpecializeShapesPass : Pass<"llmc-specialize-shapes", "::mlir::func::FuncOp"> {
  let summary = "Replaces dynamic dimensions with concrete values (shape specialization).";
  let description = [{
    Binds every dynamic dimension of the function's arguments to a value and
    propagates static shapes through the body, so that codegen sees only
    static shapes. Dynamic dimensions are named by the argument attribute
    `llm.dim_names` (one name per dynamic dimension, in order); unnamed ones
    are called `arg<i>.<d>` (argument i, dimension d). Every named dimension
    must be bound; a binding that names no dimension is an error.

    Before (`--llmc-specialize-shapes="dims=seq=7"`):
    ```mlir
    func.func @f(%x: tensor<1x?x64xf32> {llm.dim_names = ["seq"]}, %w: tensor<64xf32>) -> tensor<1x?x64xf32> {
      %y = llm.rms_norm %x, %w : tensor<1x?x64xf32>, tensor<64xf32>
      return %y : tensor<1x?x64xf32>
    }
    ```
    After:
    ```mlir
    func.func @f(%x: tensor<1x7x64xf32> {llm.dim_names = ["seq"]}, %w: tensor<64xf32>) -> tensor<1x7x64xf32> {
      %y = llm.rms_norm %x, %w : tensor<1x7x64xf32>, tensor<64xf32>
      return %y : tensor<1x7x64xf32>
    }
    ```
  }];
  let options = [
    ListOption<"dims", "dims", "std::string",
               "Bindings `name=value` for the dynamic dimensions">
  ];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

#endif // LLMC_DIALECT_LLM_TRANSFORMS_PASSES_TD
