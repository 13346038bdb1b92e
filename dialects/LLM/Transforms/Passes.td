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

def DecomposeAttentionPass : Pass<"llmc-decompose-attention", "::mlir::func::FuncOp"> {
  let summary = "Rewrites the attention training ops that no fused kernel takes into matmuls and fused elementwise ops.";
  let description = [{
    `llm.attention_logsumexp` and `llm.attention_backward` have fused
    kernels (FlashAttention-2's training forward and backward, Dao 2023,
    Algorithm 2) for bf16/f16 without a mask, with every operand of one
    element type and a head dim that is a multiple of 16 in 16..128: with
    `fused-kernels` (the default) such ops are kept for codegen. Every
    other one (f32, f64, masks, other head dims; all of them without
    `fused-kernels`) this pass writes as what FlashAttention-2's
    backward computes, with the scores
    materialized: per head s = q k^T * scale + mask (causal keys -inf,
    from index constants), P = exp(s - lse), D = rowsum(dO * o),
    dS = P * (dO v^T - D) * scale, dV = P^T dO, dK = dS^T q, dQ = dS k,
    GQA heads repeated for the products and summed for dK and dV. The
    matmuls accumulate in f32 and take P and dS in the query's element
    type, as FlashAttention-2 does; a pair with P = 0 adds nothing to dS
    (NaN in a key the row does not see stays out); with no (query, key)
    pair the results are constants. Memory is O(Sq * Skv) per head. Needs
    static shapes: the pipeline runs it after shape specialization and
    after llmc-precision, which gives these ops the attention's type (bf16
    under the fp8 policy too), then canonicalizes and CSEs what it wrote.

    ```mlir
    %lse = llm.attention_logsumexp %q, %k {causal} : tensor<1x4x2x64xbf16>, tensor<1x4x2x64xbf16> -> tensor<1x2x4xf32>
    ```
    becomes `llm.matmul` (transpose_rhs, f32 result), `llm.select` with
    `llm.compare le` of two i64 index constants, `llm.reduce_max`,
    `llm.exp`, `llm.reduce_sum`, `llm.log` and reshapes.
  }];
  let options = [
    Option<"fusedKernels", "fused-kernels", "bool", "true",
           "Keep the ops the fused FlashAttention-2 kernels take (bf16/f16, no mask, "
           "head dim a multiple of 16 in 16..128); false decomposes every op">,
  ];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

def RaisePass : Pass<"llmc-raise", "::mlir::func::FuncOp"> {
  let summary = "Recognizes decomposed RMSNorm and RoPE and rewrites them to llm ops; folds key/value transposes into attention.";
  let description = [{
    Graphs imported op by op from ATen (the torch.compile plugin) spell
    Hugging Face's `LlamaRMSNorm` (also Mistral's, Qwen2's) as
    cast/pow/reduce_mean/add/rsqrt/mul/cast/mul. This pass rewrites such a
    chain to one `llm.rms_norm` (Zhang & Sennrich 2019), which codegen
    lowers to a single kernel and fuses with a preceding residual add.
    LayerNorm needs no raising: the plugin imports `aten.native_layer_norm`
    as `llm.layer_norm` directly.

    Matched: `mul(w', n)` (either order) where

    - `w'` is a rank-1 weight `w` of shape [H] (an argument or a computed
      value) broadcast over the leading dimensions;
    - `n` is `m` or `cast(m)` back from f32;
    - `m` is `mul(xf, broadcast(r))` (either order) with
      `r = rsqrt(v)` or `div(1, sqrt(v))`, or `div(xf, broadcast(sqrt(v)))`;
    - `v = add(reduce_mean(sq) [last dim] keepdim, eps)` (either order),
      `eps` a splat constant >= 0 (possibly broadcast);
    - `sq = pow(xf, 2.0)` or `mul(xf, xf)`, the same `xf` that is
      normalized (or an identical cast of the same value);
    - `xf` is `x` or `cast(x)` to f32, the math in f32.

    It is raised only when exact up to rounding: the result type equals
    `x`'s type and `w`'s element type equals it (all f32, or bf16/f16 with
    the f32 casts of HF), and the reduction is over the last dimension only
    with keepdim and a static hidden size.
    Every intermediate (square, mean, sum, rsqrt and its broadcast,
    normalized value, cast back) must have one use: otherwise the
    decomposed ops would stay alive for their other users and raising would
    add work instead of removing it. `xf`, `w` and the constants may have
    other uses. A norm without the weight multiply is
    not raised (a ones weight would add a constant buffer and a multiply;
    no HF model emits one).

    Numerics: `llm.rms_norm` computes in fp32 and rounds once to the result
    type, where HF rounds twice in bf16/fp16 (the normalized value to the
    input type, then the product with the weight). The raised form is
    therefore at least as accurate; the difference is within the bf16/fp16
    tolerance (one rounding, 2^-8 relative for bf16).

    RoPE (RaiseRoPE.cpp): HF's `apply_rotary_pos_emb`,
    `q*cos + rotate_half(q)*sin` with `rotate_half(x) = cat(-x[..., D/2:],
    x[..., :D/2])` (the concat direct or spelled transpose / outer concat /
    transpose), on q [B, H, S, D] = transpose(y [B, S, H, D], [0, 2, 1, 3])
    or q [B, S, H, D], with cos/sin broadcast from [Bt, 1, S, D] (or
    [Bt, S, 1, D]), Bt 1 or B, becomes `llm.rope y cos(C) sin(S) half_split`
    on the tables reshaped to [Bt, S, D] (and the transpose back), any
    operand order. Every product and the rotated halves must have one use.
    HF rounds q*cos, rotate_half(q)*sin and the sum; llm.rope rounds once.
    Its backward as AOTAutograd writes it, `G*cos + rotate_half^T(G*sin)`
    with `rotate_half^T(m) = cat(m[..., D/2:], -m[..., :D/2])` spelled as
    the sum of two slice_scatter's into zeros, becomes `llm.rope` on G
    (transposed to [B, S, H, D]) with cos and the sine table's halves
    swapped and negated (computed on the [Bt, S, D] table; exact for any
    tables).

    After the raise patterns: `transpose(ew(a, b, ...), P)` with P keeping
    the innermost dimension and the transpose the elementwise result's only
    use becomes `ew(transpose(a, P), transpose(b, P), ...)`; the operands'
    transposes fold with the transposes they read (the backward's
    `transpose(add(tangent, transpose(dk)))` around attention is one add
    writing [B, S, H, D]) or are strided reads of the fused kernel.

    Casts around a norm: `cast(rms_norm(cast(x : T -> f32), w) -> T)` for
    T = bf16/f16 (the weight multiplied in f32, as gpt-fast's RMSNorm)
    becomes `rms_norm(x, w) : T`: the same fp32 math from the exactly
    widened x, rounded once to T (the f32 result's rounding to T is the
    same rounding), one kernel instead of three.

    Attention: `llm.attention %q, %kt, %vt` whose key and value are both
    `llm.transpose [0, 2, 1, 3]` of [B, H, S, D] tensors (PyTorch SDPA's
    layout, e.g. a gpt-fast KV cache) takes those tensors with `kv_hnd`,
    so the kernels read them in place instead of a transposed copy of the
    cache on every step. Exact (a layout change only).

    Before:
    ```mlir
    %2 = llm.broadcast %w : tensor<128xbf16> to tensor<1x16x128xbf16>
    %3 = llm.cast %x : tensor<1x16x128xbf16> to tensor<1x16x128xf32>
    %4 = llm.constant dense<2.0> : tensor<f32>
    %5 = llm.broadcast %4 : tensor<f32> to tensor<1x16x128xf32>
    %6 = llm.pow %3, %5 : tensor<1x16x128xf32>
    %7 = llm.reduce_mean %6 [2] keepdim : tensor<1x16x128xf32>
    %8 = llm.constant dense<1.0e-06> : tensor<f32>
    %9 = llm.broadcast %8 : tensor<f32> to tensor<1x16x1xf32>
    %10 = llm.add %7, %9 : tensor<1x16x1xf32>
    %11 = llm.rsqrt %10 : tensor<1x16x1xf32>
    %12 = llm.broadcast %11 : tensor<1x16x1xf32> to tensor<1x16x128xf32>
    %13 = llm.mul %3, %12 : tensor<1x16x128xf32>
    %14 = llm.cast %13 : tensor<1x16x128xf32> to tensor<1x16x128xbf16>
    %15 = llm.mul %2, %14 : tensor<1x16x128xbf16>
    ```
    After (the dead ops are erased; eps is the f32 constant's value):
    ```mlir
    %15 = llm.rms_norm %x, %w {eps = 9.9999999747524271E-7 : f64} : tensor<1x16x128xbf16>, tensor<128xbf16>
    ```
  }];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

def HoistParameterWorkPass : Pass<"llmc-hoist-parameter-work", "::mlir::func::FuncOp"> {
  let summary = "Marks the work that depends on parameters only, to run once per parameter set.";
  let description = [{
    Decides the executable's parameter-preparation segment: every top-level
    op that computes from parameters (`llm::parameterArguments`: the
    arguments marked `llm.param`, else those read only as weights) and
    constants alone, reading at least one parameter, gets the unit
    attribute `llm.parameter_preparation`, and the function gets
    `llm.parameter_preparation_planned`. Codegen runs the marked ops once
    per parameter set (again when a parameter's device pointer changes, or
    after `Session::InvalidateParameters`) and keeps their results in
    persistent buffers; every other op runs on every call.

    Never marked: ops without operands or results, `llm.dequantize_weight`
    (fused into its GEMV, or run per call), collectives and
    `llm.kv_cache_append` (they communicate or write state on every call),
    and ops whose result's storage is returned.

    Codegen checks the marks of a planned function: a marked op must read
    only parameters, constants and results of marked ops (an error naming
    the op otherwise, since hoisting it would compute from stale per-call
    inputs). Removing marks is always sound. A function without
    `llm.parameter_preparation_planned` is planned by codegen with the same
    rule. With `LowerOptions::hoist_parameter_work` off (`--no-hoist`) the
    marks are ignored.

    ```mlir
    // %w: a weight (read only as a matmul's rank-2 RHS), under bf16.
    func.func @f(%x: tensor<8x64xbf16>, %w: tensor<64x64xf32>) -> tensor<8x64xf32>
        attributes {llm.parameter_preparation_planned} {
      %wb = llm.cast %w {llm.parameter_preparation} : tensor<64x64xf32> to tensor<64x64xbf16>
      %y = llm.matmul %x, %wb : tensor<8x64xbf16>, tensor<64x64xbf16> -> tensor<8x64xf32>
      return %y : tensor<8x64xf32>
    }
    ```
  }];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

def PrecisionPass : Pass<"llmc-precision", "::mlir::func::FuncOp"> {
  let summary = "Runs GEMMs and attention in a lower precision (bf16, fp16, fp8).";
  let description = [{
    `policy=bf16|fp16`: f32 operands of `llm.matmul` and `llm.attention`
    are cast to the low type at the op boundary; a matmul keeps its f32
    result (products accumulate in fp32 and the output cast is part of the
    GEMM), an attention's result is cast back to f32. Norms, softmax and
    reductions stay as they are: their kernels compute in fp32 whatever the
    storage type, so no cast is added around them. One cast per value is
    created, and a cast pair is removed only when lossless (the cast
    canonicalization, `cast(cast(x: A->B): B->C) => cast(x: A->C)` when A->B
    is exact).

    `policy=fp8`: each matmul operand x (f32/f16/bf16) gets per-tensor
    current scaling: s = max(reduce_max(abs(x)), 1e-12) / m, and
    x8 = cast(x * (1 / s)) to the fp8 type (saturating; multiplying by the
    reciprocal, as torchao does), with m its largest finite value; the GEMM computes mm = x8a @ x8b in f32, the epilogue
    multiplies by s_a * s_b (and adds the bias in f32), and the result is
    rounded to bf16 (the fp8 GEMM's output type) and cast back to the
    original result type. Attention runs in bf16 under fp8.

    The fp8 type follows Transformer Engine's HYBRID format
    (`fp8-gradients=e5m2`, the default): gradients get f8E5M2 (m = 57344,
    the range gradients need), everything else f8E4M3FN (m = 448, the
    precision activations and weights need). A gradient is a value
    computed from an argument marked `llm.gradient` (the importer marks
    the tangents of AOTAutograd's backward graphs), so in a backward graph
    dX = dY W^T takes dY in e5m2 and W in e4m3, and dW = X^T dY takes X in
    e4m3 and dY in e5m2. cuBLASLt has no e5m2 x e5m2 GEMM: when both
    operands are gradients the RHS is e4m3. `fp8-gradients=e4m3` quantizes
    every operand to e4m3 (TE's E4M3 format).

    `fp8-scaling=row` (torchao's rowwise recipe, for accuracy-sensitive
    GEMMs): instead of one scale per operand, one per row of the LHS
    ([.., M, K]: s_a[.., m] over its K values) and one per column of the
    RHS (s_b[.., n]), so one outlier row or channel no longer pushes every
    other row into e4m3's subnormals; the epilogue multiplies the fp32
    product by s_a[m] * s_b[n]. Operands of dynamic shape keep one scale
    per tensor (the pipeline specializes shapes before this pass). The
    epilogue runs as an elementwise kernel after the GEMM (cuBLASLt's
    outer-vector scale modes are not used yet).

    Under every policy, an outer product (a matmul with K = 1) keeps its
    types: the RoPE angles Hugging Face's LLaMA computes as inverse
    frequencies [1, D/2, 1] x positions [1, 1, S] (a bmm in float32,
    autocast off). It has no contraction for tensor cores to speed up, and
    its rounded operand is not averaged: positions above 256 round in bf16
    and above 16 in e4m3, which turned the cos/sin tables into noise
    (relative error 0.8 at S = 2048).

    `policy=fp32` leaves the function unchanged.

    `weight-only=int8|int4` (after the policy's casts; not with fp8):
    every `llm.matmul` whose rank-2 RHS is a parameter (a function
    argument seen through casts, views and pads; when any argument carries
    `llm.param`, only those arguments are parameters) and whose operands
    are f32/f16/bf16 reads `llm.dequantize_weight(llm.quantize_weight(w))`
    instead: symmetric absmax quantization in groups of 128 along K (see
    `llm.quantize_weight`), the RHS turned to [N, K] (`transpose_rhs`, a
    transpose view is added for a [K, N] weight). Activations keep their
    type; the dequantized weight has the weight's type. The quantize op
    depends on the weight only, so llmc-hoist-parameter-work puts it in
    the parameter-preparation segment (run once per parameter set). Matmuls
    whose RHS is computed (activation x activation), whose K is dynamic
    or not a multiple of 128 are left unquantized (padding K would add a
    per-call copy of the activation). Error bound per output, with
    groups g and scales s_g: |y_q - y| <= sum_g s_g / 2 * sum_{k in g} |x_k|
    (plus the rounding of the dequantized weight to its type).

    Before (`weight-only=int4`):
    ```mlir
    %y = llm.matmul %x, %w {transpose_rhs} : tensor<1x256xbf16>, tensor<64x256xbf16> -> tensor<1x64xbf16>
    ```
    After:
    ```mlir
    %q, %s = llm.quantize_weight %w {bits = 4 : i64, group_size = 128 : i64} : tensor<64x256xbf16> -> tensor<64x128xi8>, tensor<64x2xf32>
    %wq = llm.dequantize_weight %q, %s {bits = 4 : i64, group_size = 128 : i64} : tensor<64x128xi8>, tensor<64x2xf32> -> tensor<64x256xbf16>
    %y = llm.matmul %x, %wq {transpose_rhs} : tensor<1x256xbf16>, tensor<64x256xbf16> -> tensor<1x64xbf16>
    ```

    Before (`policy=bf16`):
    ```mlir
    %y = llm.matmul %x, %w {transpose_rhs} : tensor<7x64xf32>, tensor<64x64xf32> -> tensor<7x64xf32>
    ```
    After:
    ```mlir
    %xb = llm.cast %x : tensor<7x64xf32> to tensor<7x64xbf16>
    %wb = llm.cast %w : tensor<64x64xf32> to tensor<64x64xbf16>
    %y = llm.matmul %xb, %wb {transpose_rhs} : tensor<7x64xbf16>, tensor<64x64xbf16> -> tensor<7x64xf32>
    ```
  }];
  let options = [
    Option<"policy", "policy", "std::string", "\"fp32\"",
           "Compute precision of GEMMs/attention: fp32, bf16, fp16 or fp8">,
    Option<"weightOnly", "weight-only", "std::string", "\"none\"",
           "Weight-only quantization of parameter matmul weights: none, int8 or int4 (symmetric, groups of 128 along K)">,
    Option<"fp8Gradients", "fp8-gradients", "std::string", "\"e5m2\"",
           "fp8 type of GEMM operands computed from llm.gradient arguments under policy=fp8: e5m2 (Transformer Engine's HYBRID format) or e4m3">,
    Option<"fp8Scaling", "fp8-scaling", "std::string", "\"tensor\"",
           "fp8 scaling granularity under policy=fp8: tensor (one scale per GEMM operand) or row (one per row of the LHS and per column of the RHS, torchao's rowwise recipe)">
  ];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

def PadLayoutPass : Pass<"llmc-pad-layout", "::mlir::func::FuncOp"> {
  let summary = "Pads static GEMM dimensions to tensor-core multiples.";
  let description = [{
    For every `llm.matmul` with static shapes, M, N and K are rounded up to
    `multiple` (for fp8 operands a multiple of 32 as well); an N of 32000 or
    more (a vocabulary) is rounded up to `vocab-multiple` instead
    (50257 -> 50304). Operands are padded with zeros by `llm.pad` (along K
    both operands, so the padded products add zeros), a bias along N, and
    the result is sliced back with `llm.slice`: the function computes
    exactly what it computed before. Dimensions already aligned are left
    alone, and a matmul with nothing to pad is not touched. With `fp8-only`,
    only matmuls with fp8 operands are padded, and only K and N, to
    multiples of 16 (what cuBLASLt's fp8 GEMMs need; M and the multiple
    options are left alone): the pipeline runs the pass so under every
    policy but fp8 (which pads every GEMM), so that fp8 GEMMs a graph states
    itself (`torch._scaled_mm`, hand-written IR) reach cuBLASLt as it needs
    them.

    Padding a function argument (a weight) is a pure function of it, so
    llmc-hoist-parameter-work puts such pads (also through casts, reshapes
    or transposes of one argument) in the parameter-preparation segment:
    they run once per parameter set instead of on every call.

    Before:
    ```mlir
    %y = llm.matmul %x, %w {transpose_rhs} : tensor<7x48xf32>, tensor<50257x48xf32> -> tensor<7x50257xf32>
    ```
    After:
    ```mlir
    %xp = llm.pad %x high [9, 0] : tensor<7x48xf32> to tensor<16x48xf32>
    %wp = llm.pad %w high [47, 0] : tensor<50257x48xf32> to tensor<50304x48xf32>
    %yp = llm.matmul %xp, %wp {transpose_rhs} : tensor<16x48xf32>, tensor<50304x48xf32> -> tensor<16x50304xf32>
    %y = llm.slice %yp [0, 0] to [7, 50257] step [1, 1] : tensor<16x50304xf32>
    ```
  }];
  let options = [
    Option<"multiple", "multiple", "int64_t", "16",
           "Multiple for M, N and K (fp8 operands: also of 32)">,
    Option<"vocabMultiple", "vocab-multiple", "int64_t", "64",
           "Multiple for an N of 32000 or more (a vocabulary)">,
    Option<"fp8Only", "fp8-only", "bool", "false",
           "Pad only the K and N of matmuls whose operands are fp8, to "
           "multiples of 16 (what cuBLASLt's fp8 GEMMs need); the pipeline "
           "runs it so under every policy other than fp8">
  ];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

def ShardPass : Pass<"llmc-shard", "::mlir::func::FuncOp"> {
  let summary = "Rewrites a transformer block into one rank's shard of N-way tensor parallelism.";
  let description = [{
    Megatron-style tensor parallelism (Shoeybi et al. 2019): the function
    becomes the program of rank `rank` out of `tp` ranks. Activations are
    replicated on every rank; each projection reads its rank's slice of the
    full-size weight argument through `llm.slice` (the slice depends on one
    argument only, so llmc-hoist-parameter-work puts it in the
    parameter-preparation segment, like llmc-pad-layout's pads, or codegen
    reads the block in place).

    - Attention: every `llm.attention` must read query, key and value as
      `llm.matmul` -> `llm.reshape` [..., H*D] -> [..., H, D] (then any
      `llm.rope` / `llm.cast`, per head). These projections become
      column-parallel (the weight's output dimension is sliced to its
      1/tp share: rank r keeps heads [r H/tp, (r+1) H/tp), and KV heads
      [r Hkv/tp, (r+1) Hkv/tp) under GQA, so local query head j still reads
      local KV head j / (H / Hkv)); the reshapes, RoPE and the attention
      follow with H/tp heads. The attention output must reach a matmul
      (o_proj) through the merging reshape [..., H, D] -> [..., H*D]: that
      matmul becomes row-parallel (the weight's input dimension is sliced)
      and its partial sums are summed by `llm.all_reduce sum`. H and Hkv
      must divide by tp.
    - MLP: a matmul (down) whose activation is a tree of elementwise ops
      (`llm.silu`, `llm.mul`, `llm.gelu`, ...) over matmul results only
      (gate and up) is row-parallel with an all-reduce; the leaf matmuls are
      column-parallel and the elementwise ops follow with 1/tp of the
      intermediate size (SwiGLU: down(silu(gate(x)) * up(x))).
    - A row-parallel bias is kept on rank 0 only (added once to the sum), a
      column-parallel bias is sliced with its weight. Norms, residual adds,
      embeddings and anything not matched above stay replicated; a matmul
      left replicated gets a warning.

    Weights may be in nn.Linear ([out, in], `transpose_rhs`) or [in, out]
    layout, with static shapes. The pass fails with a diagnostic naming the
    op, and leaves the IR to the pass manager, when the graph cannot be
    sharded: an attention whose operands are not head reshapes of
    projections (e.g. a fused QKV GEMM, or keys and values read from a KV
    cache: decode graphs are not supported yet), head counts or sizes that do not
    divide by tp, a per-head mask, an intermediate value used outside its
    attention or MLP block, or nothing to shard at all. `tp=1` leaves the function unchanged.

    Before (`--llmc-shard="tp=2 rank=1"`, 4 query and 2 KV heads of 16):
    ```mlir
    %k = llm.matmul %h, %wk {transpose_rhs} : tensor<1x?x64xf32>, tensor<32x64xf32> -> tensor<1x?x32xf32>
    %k4 = llm.reshape %k : tensor<1x?x32xf32> to tensor<1x?x2x16xf32>
    ...
    %attn2 = llm.reshape %attn : tensor<1x?x4x16xf32> to tensor<1x?x64xf32>
    %o = llm.matmul %attn2, %wo {transpose_rhs} : tensor<1x?x64xf32>, tensor<64x64xf32> -> tensor<1x?x64xf32>
    ```
    After:
    ```mlir
    %wk1 = llm.slice %wk [16, 0] to [32, 64] step [1, 1] : tensor<32x64xf32>
    %k = llm.matmul %h, %wk1 {transpose_rhs} : tensor<1x?x64xf32>, tensor<16x64xf32> -> tensor<1x?x16xf32>
    %k4 = llm.reshape %k : tensor<1x?x16xf32> to tensor<1x?x1x16xf32>
    ...
    %attn2 = llm.reshape %attn : tensor<1x?x2x16xf32> to tensor<1x?x32xf32>
    %wo1 = llm.slice %wo [0, 32] to [64, 64] step [1, 1] : tensor<64x64xf32>
    %p = llm.matmul %attn2, %wo1 {transpose_rhs} : tensor<1x?x32xf32>, tensor<64x32xf32> -> tensor<1x?x64xf32>
    %o = llm.all_reduce %p sum group_size = 2 : tensor<1x?x64xf32>
    ```
  }];
  let options = [
    Option<"tp", "tp", "int64_t", "1",
           "Tensor-parallel degree N (1: leave the function unchanged)">,
    Option<"rank", "rank", "int64_t", "0",
           "The rank (0..tp-1) whose shard the function becomes">
  ];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

#endif // LLMC_DIALECT_LLM_TRANSFORMS_PASSES_TD
