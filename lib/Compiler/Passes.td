//===- Passes.td - passes of the CUDA backend ---------------*- tablegen -*-===//
//
// Passes that make the CUDA lowering's decisions (lib/Compiler) in IR.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_LIB_COMPILER_PASSES_TD
#define LLMC_LIB_COMPILER_PASSES_TD

include "mlir/Pass/PassBase.td"

def FormKernelsPass : Pass<"llmc-form-kernels", "::mlir::func::FuncOp"> {
  let summary = "Decides which ops the CUDA lowering runs as one kernel.";
  let description = [{
    Runs the CUDA lowering's kernel grouping (`llmc::planKernels`,
    lib/Compiler/KernelPlan.h) on a shape-specialized function and shows
    it as `llm.kernel = {group, kind}` on every op of a kernel of two or
    more ops, groups numbered in program order of their last op. Kinds:

    - `residual_norm`: an `llm.add` whose sum the following RMSNorm /
      LayerNorm kernel computes and writes;
    - `elementwise`: a chain of elementwise ops, each used once by the
      next (within the fusion bounds of FusionPlan.h and never across the
      parameter-preparation boundary of llmc-hoist-parameter-work);
    - `multi_gemv`: decode GEMVs (a few rows times `transpose_rhs`
      weights) that share their input, in one kernel;
    - `swiglu_gemv`: `mul(silu(x W_gate), x W_up)` as one decode GEMV;
    - `rope_cache_write`: a table-form `llm.rope` whose result, through
      views of size-1 dims only, is written into a KV cache by one
      `llm.index_put` (no accumulate) along RoPE's sequence dimension: the
      RoPE kernel stores straight into the cache rows (gpt-fast's
      `k_cache[:, :, pos] = k`, Hugging Face's static-cache `index_copy_`);
      the step's q RoPE (same tables) and v cache write (same index tensor
      and cache layout) join the launch when their results are used only
      after its last member, where it runs.
    - `attention_stats`: an `llm.attention` and the
      `llm.attention_logsumexp` of the same operands (a training forward
      saving its statistics) in one launch;
    - `row_reduction`: reductions over the last dimension of one
      [rows, n] shape with the elementwise kernels computing their input
      and reading their results (directly or broadcast along the row), as
      one row kernel (`cuda::EmitRowFused`): a decomposed RMSNorm
      backward's dx, an RMSNorm forward that saves its statistics, a
      softmax written out; with the sums over the rows of a value it
      computes or reads (`llm.reduce_sum` over every dimension but the
      last: the norm's weight gradient), which it accumulates per block
      and a column reduction of the blocks' partial sums finishes.

    Every other op is a kernel, GEMM, copy or collective of its own (views
    and constants have no launch). The pass marks the function
    `llm.kernels_formed`; LowerToExecutable then reads the groups from
    these attributes instead of deciding again, after checking that each
    is a kernel its emitter computes exactly (an annotation that is not
    one is an error naming the op). Every tool and the C/C++ API run this
    pass before lowering; a function lowered without it is planned by the
    same function (`llmc::decidedKernelPlan`). The function must have
    static shapes.

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
    and the function carries `attributes {llm.kernels_formed}`.
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

def SelectKernelConfigsPass
    : Pass<"llmc-select-kernel-configs", "::mlir::func::FuncOp"> {
  let summary = "Chooses every generated kernel's configuration, in IR.";
  let description = [{
    Writes the configuration choices of the CUDA lowering into IR, with the
    tuning knobs as the pass's options (lib/Compiler/KernelConfigs.h):

    - on each `llm.attention`, `llm.kernel_config`: split-KV
      flash-decoding and its number of KV splits
      (`{kernel = "flash_decode", splits = N}`; with
      `flash-decode-combine=fused`, `fused_combine`: the split kernel
      combines its splits instead of a second kernel)
      for an attention of at most 16 queries that reads `kv_len` or has
      one query, when the kernel takes its type, head dim, GQA group and
      mask; otherwise
      FlashAttention-2 with its tensor-core tile (`attention-tile`, else
      the head dim's default) and whether cuDNN's fused SDPA runs first
      (`{kernel = "flash_attention", tile = "bm64_bn64_w4_s2", cudnn = true}`;
      cudnn unless `attention-backend=llmc`, the attention has a mask or
      cuDNN does not take the shape);
    - on the function, `llm.kernel_configs = {elementwise_unroll = U,
      gemv_unroll = G}`.

    LowerToExecutable reads these attributes and checks each where it
    emits the kernel (an unsupported configuration is an error naming the
    op); it never chooses again. Every tool and the C/C++ API run this pass
    after llmc-form-kernels, with the knobs set by `--attention-backend`,
    `--attention-tile`, `--ew-unroll`, `--gemv-unroll`,
    `--flash-decode-combine` or their environment variables.

    Before:
    ```mlir
    func.func @decode(%q: tensor<1x1x32x128xbf16>, %k: tensor<1x2048x8x128xbf16>, %v: tensor<1x2048x8x128xbf16>) -> tensor<1x1x32x128xbf16> {
      %o = llm.attention %q, %k, %v : ...
    ```
    After:
    ```mlir
    func.func @decode(...) -> tensor<1x1x32x128xbf16> attributes {llm.kernel_configs = {elementwise_unroll = 1 : i64}} {
      %o = llm.attention %q, %k, %v {llm.kernel_config = {kernel = "flash_decode", splits = 16 : i64}} : ...
    ```
  }];
  let options = [
    Option<"attentionBackend", "attention-backend", "std::string", "\"auto\"",
           "auto or cudnn: cuDNN's SDPA first where it takes the shape; "
           "llmc: llmc's kernels only">,
    Option<"attentionTile", "attention-tile", "std::string", "\"\"",
           "FlashAttention-2 tile of every tensor-core attention "
           "(bm<M>_bn<N>_w<warps>_s<stages>[_gh]); empty: the head dim's default">,
    Option<"elementwiseUnroll", "elementwise-unroll", "int64_t",
           "::llmc::cuda::kElementwiseUnroll",
           "16-byte vectors per input in flight per thread of an elementwise "
           "kernel (1..4)">,
    Option<"gemvUnroll", "gemv-unroll", "int64_t", "::llmc::cuda::kGemvUnroll",
           "16-byte weight loads in flight per lane of a decode GEMV (1..16)">,
    Option<"flashDecodeCombine", "flash-decode-combine", "std::string", "\"kernel\"",
           "fused: flash-decoding's split kernel combines its splits (one "
           "launch); kernel: a combine kernel does (two)">
  ];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

#endif // LLMC_LIB_COMPILER_PASSES_TD
