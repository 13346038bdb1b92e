//===- Passes.td - passes of the CUDA backend ---------------*- tablegen -*-===//
//
// Passes that show decisions of the CUDA lowering (lib/Compiler) in IR.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_LIB_COMPILER_PASSES_TD
#define LLMC_LIB_COMPILER_PASSES_TD

include "mlir/Pass/PassBase.td"

def FormKernelsPass : Pass<"llmc-form-kernels", "::mlir::func::FuncOp"> {
  let summary = "Shows which ops the CUDA lowering runs as one kernel.";
  let description = [{
    Runs the CUDA lowering's kernel grouping (`llmc::planKernels`,
    lib/Compiler/KernelPlan.h) on a shape-specialized function and shows
    it as `llm.kernel = {group, kind}` on every op of a kernel of two or
    more ops, groups numbered in program order of their last op. Kinds:

    - `residual_norm`: an `llm.add` whose sum the following RMSNorm /
      LayerNorm kernel computes and writes;
    - `elementwise`: a chain of elementwise ops, each used once by the
      next (within llmc-fuse's bounds and never across the
      parameter-preparation boundary of llmc-hoist-parameter-work);
    - `multi_gemv`: decode GEMVs (a few rows times `transpose_rhs`
      weights) that share their input, in one kernel;
    - `swiglu_gemv`: `mul(silu(x W_gate), x W_up)` as one decode GEMV.

    Every other op is a kernel, GEMM, copy or collective of its own (views
    and constants have no launch). LowerToExecutable makes the same
    decision with the same function; this pass makes it visible
    (`llmc-compile --emit=mlir` runs it). The function must have static
    shapes and no `llm.fusion` regions.

    Before:
    ```mlir
    %g = llm.matmul %x, %wg {transpose_rhs} : tensor<1x256xbf16>, tensor<512x256xbf16> -> tensor<1x512xbf16>
    %u = llm.matmul %x, %wu {transpose_rhs} : tensor<1x256xbf16>, tensor<512x256xbf16> -> tensor<1x512xbf16>
    %a = llm.silu %g : tensor<1x512xbf16>
    %m = llm.mul %a, %u : tensor<1x512xbf16>
    ```
    After:
    ```mlir
    %g = llm.matmul %x, %wg {llm.kernel = {group = 0 : i64, kind = "swiglu_gemv"}, transpose_rhs} : ...
    %u = llm.matmul %x, %wu {llm.kernel = {group = 0 : i64, kind = "swiglu_gemv"}, transpose_rhs} : ...
    %a = llm.silu %g {llm.kernel = {group = 0 : i64, kind = "swiglu_gemv"}} : tensor<1x512xbf16>
    %m = llm.mul %a, %u {llm.kernel = {group = 0 : i64, kind = "swiglu_gemv"}} : tensor<1x512xbf16>
    ```
  }];
  let options = [
    Option<"elementwise", "elementwise", "bool", "true",
           "Fuse chains of elementwise ops">,
    Option<"residualNorm", "residual-norm", "bool", "true",
           "Fuse a residual add into the following norm">,
    Option<"gemmEpilogue", "gemm-epilogue", "bool", "true",
           "Group a GEMM's elementwise tail">,
    Option<"gemv", "gemv", "bool", "true",
           "Multi-output and SwiGLU decode GEMVs">,
    Option<"hoist", "hoist", "bool", "true",
           "Keep parameter-preparation work in kernels of its own">
  ];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

#endif // LLMC_LIB_COMPILER_PASSES_TD
