//===- LLMOps.td - llm dialect operations ------------------*- tablegen -*-===//
//
// Operations of the `llm` dialect. Every op works on ranked tensors with
// static or dynamic (`?`) dimensions. Layout conventions are row-major and
// are given per op.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_LLM_IR_LLMOPS_TD
#define LLMC_DIALECT_LLM_IR_LLMOPS_TD

include "LLM/IR/LLMDialect.td"
include "LLM/IR/LLMInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ViewLikeInterface.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

defvar LLM_AllElementTypes = [F32, F16, BF16, F8E4M3FN, F8E5M2, I1, I8, I32, I64];
def LLM_Tensor : RankedTensorOf<LLM_AllElementTypes>;
def LLM_FloatTensor : RankedTensorOf<[F32, F16, BF16, F8E4M3FN, F8E5M2]>;
def LLM_NumericTensor : RankedTensorOf<[F32, F16, BF16, F8E4M3FN, F8E5M2, I8, I32, I64]>;
def LLM_IntTensor : RankedTensorOf<[I32, I64]>;
def LLM_BoolTensor : RankedTensorOf<[I1]>;
// One f32 value as a rank-0 tensor (a per-tensor scale); buildable, so the
// assembly formats need not spell its type.
def LLM_F32Scalar : 0DTensorOf<[F32]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getF32Type())">;

//===----------------------------------------------------------------------===//
// Constant
//===----------------------------------------------------------------------===//

def LLM_ConstantOp : LLM_Op<"constant",
    [ConstantLike, Pure, AllTypesMatch<["value", "result"]>]> {
  let summary = "A tensor constant.";
  let description = [{
    Materializes a dense tensor constant of any llm element type.

    ```mlir
    %one = llm.constant dense<1.0> : tensor<4x8xbf16>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs LLM_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise (LLMElementwiseOps.td)
//===----------------------------------------------------------------------===//

include "LLM/IR/LLMElementwiseOps.td"

//===----------------------------------------------------------------------===//
// Type and shape manipulation
//===----------------------------------------------------------------------===//

def LLM_CastOp : LLM_Op<"cast", [Pure, Elementwise]> {
  let summary = "Element type conversion with the same shape.";
  let description = [{
    Float → float rounds to nearest even; float → f8E4M3FN and f8E5M2
    saturate to their largest finite values ±448 and ±57344, infinities
    included (NaN stays NaN), as the GPU's `cvt.rn.satfinite` does; float → int truncates toward zero; int → i1 is
    `x != 0`.

    ```mlir
    %y = llm.cast %x : tensor<?x4096xf32> to tensor<?x4096xbf16>
    ```
  }];
  let arguments = (ins LLM_Tensor:$input);
  let results = (outs LLM_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def LLM_BroadcastOp : LLM_Op<"broadcast", [Pure,
    DeclareOpInterfaceMethods<ViewLikeOpInterface>,
    DeclareOpInterfaceMethods<LLM_StridedViewOpInterface>]> {
  let summary = "NumPy-style broadcast to a larger shape.";
  let description = [{
    Dimensions are aligned from the right; each input dimension is 1 or
    equal to the result's. Missing leading dimensions are added.

    ```mlir
    %b = llm.broadcast %w : tensor<4096xbf16> to tensor<?x4096xbf16>
    ```
  }];
  let arguments = (ins LLM_Tensor:$input);
  let results = (outs LLM_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def LLM_ReshapeOp : LLM_Op<"reshape", [Pure,
    DeclareOpInterfaceMethods<ViewLikeOpInterface>]> {
  let summary = "Row-major reshape with the same number of elements.";
  let description = [{
    When the input has dynamic dimensions the result may have at most one
    dynamic dimension, which is then computed from the element count (as
    `torch.view` with `-1`).

    ```mlir
    %h = llm.reshape %q : tensor<?x4096xbf16> to tensor<?x32x128xbf16>
    ```
  }];
  let arguments = (ins LLM_Tensor:$input);
  let results = (outs LLM_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def LLM_TransposeOp : LLM_Op<"transpose", [Pure, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<ViewLikeOpInterface>,
    DeclareOpInterfaceMethods<LLM_StridedViewOpInterface>]> {
  let summary = "Permutes dimensions: result.dim(i) = input.dim(permutation[i]).";
  let description = [{
    ```mlir
    %t = llm.transpose %x [0, 2, 1, 3] : tensor<?x?x32x128xbf16>
    ```
  }];
  let arguments = (ins LLM_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs LLM_Tensor:$result);
  let assemblyFormat = "$input $permutation attr-dict `:` type($input)";
  let hasFolder = 1;
}

def LLM_SliceOp : LLM_Op<"slice", [Pure, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<ViewLikeOpInterface>,
    DeclareOpInterfaceMethods<LLM_StridedViewOpInterface>]> {
  let summary = "Strided slice: result[i] = input[start + i * step] per dimension.";
  let description = [{
    `starts`, `limits` and `steps` have one entry per dimension; a limit of
    -1 means the dimension's end. A dynamic input dimension must be sliced
    whole (start 0, limit -1, step 1) and stays dynamic.

    ```mlir
    %l = llm.slice %padded [0, 0] to [-1, 50257] step [1, 1] : tensor<?x50304xf32>
    ```
  }];
  let arguments = (ins LLM_Tensor:$input, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$limits, DenseI64ArrayAttr:$steps);
  let results = (outs LLM_Tensor:$result);
  let assemblyFormat = [{
    $input $starts `to` $limits `step` $steps attr-dict `:` type($input)
  }];
  let hasFolder = 1;
}

def LLM_ConcatOp : LLM_Op<"concat", [Pure, SameOperandsElementType,
                                     InferTypeOpAdaptor]> {
  let summary = "Concatenates tensors along one dimension.";
  let description = [{
    All inputs have the same rank and element type and equal sizes except
    along `dim`.

    ```mlir
    %kv = llm.concat %k, %v dim = 2 : tensor<1x7x8x64xbf16>, tensor<1x7x8x64xbf16>
    ```
  }];
  let arguments = (ins Variadic<LLM_Tensor>:$inputs, I64Attr:$dim);
  let results = (outs LLM_Tensor:$result);
  let assemblyFormat = "$inputs `dim` `=` $dim attr-dict `:` type($inputs)";
}

def LLM_GatherOp : LLM_Op<"gather", [Pure, InferTypeOpAdaptor]> {
  let summary = "Gathers slices of `table` along `axis` (embedding lookup).";
  let description = [{
    result.shape = table.shape[:axis] ++ indices.shape ++ table.shape[axis+1:].
    Indices are i32 or i64; an out-of-range index yields zeros on the GPU
    and an error in the reference executor. With `axis = 0` and a [V, D]
    table this is the token embedding.

    ```mlir
    %e = llm.gather %wte, %tokens axis = 0 : tensor<50257x768xf32>, tensor<?x?xi64>
    ```
  }];
  let arguments = (ins LLM_Tensor:$table, LLM_IntTensor:$indices, I64Attr:$axis);
  let results = (outs LLM_Tensor:$result);
  let assemblyFormat = [{
    $table `,` $indices `axis` `=` $axis attr-dict `:` type($table) `,` type($indices)
  }];
}

def LLM_IndexPutOp : LLM_Op<"index_put",
    [Pure, AllTypesMatch<["base", "result"]>]> {
  let summary = "Writes (or adds) slices of `source` into `base` at indices along `dim`.";
  let description = [{
    base [..., R, ...] with R at position `dim`, indices [N] (i32 or i64),
    source = base's shape with N at `dim`:
    result = base, then for n in [0, N): result.select(dim, indices[n]) =
    source.select(dim, n), or `+=` with `accumulate`. These are PyTorch's
    `index_copy` / `index_add` (and `index_put` / `index_put_` with one
    index tensor): the KV-cache write `k_cache[:, :, pos] = k` and the
    embedding backward `index_put(zeros, [tokens], grad, accumulate=True)`.

    A negative index counts from the end (n + R, as PyTorch); an index
    outside [-R, R) is an error in the reference executor; on the GPU that
    slice is skipped (nothing is written out of bounds).
    Without `accumulate`, duplicate indices leave one of their slices
    (which one is unspecified, as in PyTorch). With `accumulate` the sum is
    deterministic: each element adds its slices in the order of n (f32:
    in place, one rounding per add; bf16/f16: an fp32 sum added to the base
    and rounded once). The update is in place when
    `base` is a donated argument used only here (as for
    `llm.kv_cache_append`); otherwise `base` is copied first.

    ```mlir
    %kc = llm.index_put %cache[%pos], %k dim = 2 : tensor<1x8x2048x64xbf16>, tensor<1xi64>, tensor<1x8x1x64xbf16>
    %dw = llm.index_put %zeros[%tokens], %grad dim = 0 {accumulate} : tensor<32000x4096xf32>, tensor<2048xi64>, tensor<2048x4096xf32>
    ```
  }];
  let arguments = (ins LLM_NumericTensor:$base, LLM_IntTensor:$indices,
                       LLM_NumericTensor:$source, I64Attr:$dim,
                       UnitAttr:$accumulate);
  let results = (outs LLM_NumericTensor:$result);
  let assemblyFormat = [{
    $base `[` $indices `]` `,` $source `dim` `=` $dim attr-dict `:`
    type($base) `,` type($indices) `,` type($source)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Reductions and normalizations
//===----------------------------------------------------------------------===//

class LLM_ReduceOp<string mnemonic, string what>
    : LLM_Op<mnemonic, [Pure, InferTypeOpAdaptor]> {
  let summary = "Reduction (" # what # ") over the given dimensions.";
  let description = [{
    Reduces over `dims` (sorted, unique, non-negative). With `keepdim` the
    reduced dimensions stay with size 1. Floating-point accumulation is in
    fp32 (split into blocks for long reductions); the result is rounded once
    to the element type.

    Every reduced dimension has size >= 1: reducing over an empty dimension
    is an error (of the verifier for static sizes, again after shape
    specialization, and of the reference executor for unspecialized ones),
    not 0 for a sum, NaN for a mean or -inf/+inf for max/min. The maximum
    of nothing has no value (PyTorch raises too), an empty reduced axis in
    a transformer graph is a shape bug, and one rule keeps the CUDA kernels
    and the reference executor from disagreeing.

    ```mlir
    %s = llm.}] # mnemonic # [{ %x [1] keepdim : tensor<4x4096xf32>
    ```
  }];
  let arguments = (ins LLM_NumericTensor:$input, DenseI64ArrayAttr:$dims,
                       UnitAttr:$keepdim);
  let results = (outs LLM_NumericTensor:$result);
  let assemblyFormat = "$input $dims (`keepdim` $keepdim^)? attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def LLM_ReduceSumOp : LLM_ReduceOp<"reduce_sum", "sum">;
def LLM_ReduceMeanOp : LLM_ReduceOp<"reduce_mean", "arithmetic mean">;
def LLM_ReduceMaxOp : LLM_ReduceOp<"reduce_max", "maximum">;
def LLM_ReduceMinOp : LLM_ReduceOp<"reduce_min", "minimum">;

def LLM_CumsumOp : LLM_Op<"cumsum", [Pure]> {
  let summary = "Inclusive prefix sum along a dimension (torch.cumsum).";
  let description = [{
    result[..., i, ...] = sum_{j <= i} input[..., j, ...] along `dim`, the
    result of the input's shape. Float inputs give their own type (summed
    in fp32 or wider, rounded once per element); integer and boolean
    inputs are summed exactly in 64-bit integers and give i64 or i32
    (torch.cumsum of a bool or integer tensor is int64), or a float type
    (torch.cumsum(x, dtype=...)). Hugging Face's mask code counts sequence
    starts with it: `(position_diff != 1).cumsum(-1)`.

    The CUDA backend lowers `dim` = the last dimension (one block per row:
    per-thread runs, then a scan of the run totals across the block).

    ```mlir
    %c = llm.cumsum %starts dim = 1 : tensor<2x9xi1> -> tensor<2x9xi64>
    ```
  }];
  let arguments = (ins LLM_Tensor:$input, I64Attr:$dim);
  let results = (outs LLM_NumericTensor:$result);
  let assemblyFormat = [{
    $input `dim` `=` $dim attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def LLM_DropoutMaskOp : LLM_Op<"dropout_mask", [Pure]> {
  let summary = "Dropout's keep mask from counter-based random numbers (Philox4x32-10).";
  let description = [{
    result[i] (i1; i the row-major linear index of the result) is true,
    "keep", iff (x_i >> 8) >= ceil(p * 2^24), where x_i is the first 32-bit
    word of Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers: as
    easy as 1, 2, 3") with key (low and high 32 bits of the rank-0 i64
    `seed`) and counter (low and high 32 bits of i, `stream`, 0): each
    element is kept with probability 1 - ceil(p * 2^24) / 2^24, about
    1 - p. `stream` (in [0, 2^31)) separates dropout sites that share a
    seed. A function
    of its operands: the same seed, stream and shape give the same mask,
    and the reference executor and the CUDA kernel agree bit for bit. p is
    in [0, 1]; p = 1 drops every element.

    The torch.compile backend passes a fresh seed drawn from PyTorch's
    generator on every call, so masks change per step and follow
    torch.manual_seed (not PyTorch's own masks: the generators differ).

    ```mlir
    %keep = llm.dropout_mask %seed {p = 1.000000e-01 : f64, stream = 3 : i64} : tensor<i64> -> tensor<2x9x768xi1>
    ```
  }];
  let arguments = (ins RankedTensorOf<[I64]>:$seed, F64Attr:$p, I64Attr:$stream);
  let results = (outs LLM_BoolTensor:$result);
  let assemblyFormat = "$seed attr-dict `:` type($seed) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Elements are kept iff (x >> 8) >= this threshold (0 ... 2^24).
    uint32_t keepThreshold() {
      return static_cast<uint32_t>(std::ceil(getP().convertToDouble() * 16777216.0));
    }
  }];
}

def LLM_ArgMaxOp : LLM_Op<"argmax", [Pure, InferTypeOpAdaptor]> {
  let summary = "Index (i64) of the largest element along `dim`.";
  let description = [{
    result = input's shape without `dim` (size 1 with `keepdim`), i64: the
    position of the largest element along `dim`, the first one on ties; a
    NaN counts as larger than any number (the first NaN wins), as
    torch.argmax. The greedy next token of a decode step:

    ```mlir
    %next = llm.argmax %logits dim = 1 : tensor<4x32000xf32>
    ```
  }];
  let arguments = (ins LLM_NumericTensor:$input, I64Attr:$dim, UnitAttr:$keepdim);
  let results = (outs LLM_IntTensor:$result);
  let assemblyFormat = [{
    $input `dim` `=` $dim (`keepdim` $keepdim^)? attr-dict `:` type($input)
  }];
}

def LLM_SoftmaxOp : LLM_Op<"softmax", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "Softmax over the last dimension with optional scale and additive mask.";
  let description = [{
    result = exp(z - max(z)) / sum(exp(z - max(z))) with
    z = input * scale + mask, computed in fp32 (max-subtracted, Bridle 1990;
    online normalization, Milakov & Gimelshein 2018). `mask` (any float
    type) broadcasts NumPy-style to the input's shape. A row that is -inf
    everywhere gives NaN, as in PyTorch.

    ```mlir
    %p = llm.softmax %s mask %m {scale = 0.125 : f64} : tensor<1x32x7x7xf32>, tensor<1x1x7x7xf32>
    ```
  }];
  let arguments = (ins LLM_FloatTensor:$input, Optional<LLM_FloatTensor>:$mask,
                       OptionalAttr<F64Attr>:$scale);
  let results = (outs LLM_FloatTensor:$result);
  let assemblyFormat = [{
    $input (`mask` $mask^)? attr-dict `:` type($input) (`,` type($mask)^)?
  }];
  let hasVerifier = 1;
}

def LLM_RMSNormOp : LLM_Op<"rms_norm", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "RMSNorm over the last dimension.";
  let description = [{
    y = x / sqrt(mean(x^2, last dim) + eps) * weight (Zhang & Sennrich 2019,
    as in LLaMA). `input` is [..., H], `weight` is [H]; math in fp32, the
    result has the input's type.

    ```mlir
    %y = llm.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<?x4096xbf16>, tensor<4096xbf16>
    ```
  }];
  let arguments = (ins LLM_FloatTensor:$input, LLM_FloatTensor:$weight,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$eps);
  let results = (outs LLM_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` type($input) `,` type($weight)
  }];
  let hasVerifier = 1;
}

def LLM_LayerNormOp : LLM_Op<"layer_norm", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "LayerNorm over the last dimension, with weight and optional bias.";
  let description = [{
    y = (x - mean) / sqrt(var + eps) * weight + bias with the biased
    variance over the last dimension (Ba et al. 2016; torch.nn.LayerNorm).
    `input` [..., H], `weight` and `bias` [H]; math in fp32.

    ```mlir
    %y = llm.layer_norm %x, %g, %b {eps = 1.0e-05 : f64} : tensor<?x768xf32>, tensor<768xf32>, tensor<768xf32>
    ```
  }];
  let arguments = (ins LLM_FloatTensor:$input, LLM_FloatTensor:$weight,
                       Optional<LLM_FloatTensor>:$bias,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$eps);
  let results = (outs LLM_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` type($input) `,` type($weight) (`,` type($bias)^)?
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Transformer ops
//===----------------------------------------------------------------------===//

def LLM_RoPEOp : LLM_Op<"rope",
    [Pure, AttrSizedOperandSegments, AllTypesMatch<["input", "result"]>]> {
  let summary = "Rotary position embedding (RoPE) on [B, S, H, D].";
  let description = [{
    Su et al. 2021 (RoFormer). Two forms.

    Theta form (no tables): for position p = s + offset and pair index
    i < D/2, angle = p * theta^(-2i/D); each pair (a, b) becomes
    (a cos - b sin, a sin + b cos). `half_split` pairs (i, i + D/2) as in
    LLaMA/GPT-NeoX (HF `rotate_half`); `interleaved` pairs (2i, 2i+1) as in
    GPT-J. `offset` is an i32/i64 scalar or one value per batch ([B]),
    e.g. the KV-cache position of a decode step.

    Table form (`cos` and `sin`, always together): the angles come from
    precomputed tables, as Hugging Face LLaMA/Mistral pass them to
    `apply_rotary_pos_emb` (`q * cos + rotate_half(q) * sin`), which covers
    any rope scaling the model applies when it builds the tables. cos and
    sin have one type, [S, D] or [Bt, S, D] with Bt = 1 or B, FULL head-dim
    rows (D entries per position, each angle stored twice as HF does),
    broadcast over heads (and over batch when rank 2 or Bt = 1). Their
    element type may differ from the input's (read as fp32). With c = cos
    and s = sin at (b, s):

    ```
    half_split:  out[i]      = x[i] c[i] - x[i + D/2] s[i]     (i < D/2)
                 out[i]      = x[i] c[i] + x[i - D/2] s[i]     (i >= D/2)
    interleaved: out[2j]     = x[2j] c[2j] - x[2j+1] s[2j]
                 out[2j + 1] = x[2j+1] c[2j+1] + x[2j] s[2j+1]
    ```

    The tables hold the positions, so `offset` is rejected, and `theta`
    means nothing: a theta other than the default is rejected.

    Both forms compute in fp32 (or wider) and round once to the input type.

    ```mlir
    %q2 = llm.rope %q half_split {theta = 10000.0 : f64} : tensor<1x?x32x128xbf16>
    %k2 = llm.rope %k offset %pos half_split : tensor<4x1x32x128xbf16>, tensor<i64>
    %q3 = llm.rope %q cos(%c : tensor<1x2048x128xbf16>) sin(%s : tensor<1x2048x128xbf16>) half_split : tensor<4x2048x32x128xbf16>
    ```
  }];
  let arguments = (ins LLM_FloatTensor:$input, Optional<LLM_IntTensor>:$offset,
                       Optional<LLM_FloatTensor>:$cos,
                       Optional<LLM_FloatTensor>:$sin,
                       LLM_RopeMode:$mode,
                       DefaultValuedAttr<F64Attr, "10000.0">:$theta);
  let results = (outs LLM_FloatTensor:$result);
  let assemblyFormat = [{
    $input (`offset` $offset^)? (`cos` `(` $cos^ `:` type($cos) `)`)?
    (`sin` `(` $sin^ `:` type($sin) `)`)? $mode attr-dict `:` type($input)
    (`,` type($offset)^)?
  }];
  let hasVerifier = 1;
}

def LLM_MatmulOp : LLM_Op<"matmul", [Pure, AttrSizedOperandSegments]> {
  let summary = "Batched matrix product with transpose flags, optional bias and fp8 scales.";
  let description = [{
    lhs is [..., M, K] ([..., K, M] with `transpose_lhs`), rhs is
    [..., K, N] ([..., N, K] with `transpose_rhs`, the layout of
    torch.nn.Linear weights). Batch dimensions broadcast NumPy-style (a
    rank-2 rhs is shared by every batch). `bias` is [N], added to every row.
    Products accumulate in fp32; the result element type may differ from
    the operands' (an output cast), and is fp32, f16 or bf16 for fp8
    operands. K >= 1: an empty contraction (K = 0) is rejected rather than
    giving zeros (or the bias), for the reason reductions over empty
    dimensions are (see `llm.reduce_sum`); M or N may be 0 (an empty
    result, nothing to compute).

    `scales(scale_lhs, scale_rhs)` (fp8 operands only; both or neither):
    per-tensor dequantization scales, f32 scalars, as in
    `torch._scaled_mm` and cuBLASLt's A/B scale pointers. The result is
    round((sum_k lhs * rhs) * scale_lhs * scale_rhs + bias) to its element
    type: the scaling happens on the fp32 accumulator, before the single
    rounding. Without a bias the CUDA backend passes the scales to cuBLASLt,
    which writes the (bf16) result directly; with a bias, or below sm_89, it
    writes the fp32 product and one kernel scales, adds and rounds.

    ```mlir
    %q = llm.matmul %x, %wq {transpose_rhs} : tensor<?x4096xbf16>, tensor<4096x4096xbf16> -> tensor<?x4096xbf16>
    %y = llm.matmul %x8, %w8 scales(%sx, %sw) {transpose_rhs} : tensor<2048x4096xf8E4M3FN>, tensor<4096x4096xf8E4M3FN> -> tensor<2048x4096xbf16>
    ```
  }];
  let arguments = (ins LLM_NumericTensor:$lhs, LLM_NumericTensor:$rhs,
                       Optional<LLM_NumericTensor>:$bias,
                       Optional<LLM_F32Scalar>:$scale_lhs,
                       Optional<LLM_F32Scalar>:$scale_rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs LLM_NumericTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs (`bias` $bias^)? (`scales` `(` $scale_lhs^ `,` $scale_rhs `)`)? attr-dict `:` type($lhs) `,` type($rhs) (`,` type($bias)^)? `->` type($result)
  }];
  let builders = [
    // The unscaled product (every matmul but the fp8 policy's).
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$lhs,
                   "::mlir::Value":$rhs, "::mlir::Value":$bias,
                   "bool":$transpose_lhs, "bool":$transpose_rhs), [{
      build($_builder, $_state, result, lhs, rhs, bias, ::mlir::Value(),
            ::mlir::Value(), transpose_lhs, transpose_rhs);
    }]>
  ];
  let hasVerifier = 1;
}

def LLM_AttentionOp : LLM_Op<"attention",
    [Pure, AttrSizedOperandSegments, AllTypesMatch<["query", "result"]>]> {
  let summary = "Scaled dot-product attention with GQA, causal masking and a KV length.";
  let description = [{
    softmax(Q K^T * scale + mask) V per head (Vaswani et al. 2017), layout
    [B, S, H, D] for query [B, Sq, Hq, D], key and value [B, Skv, Hkv, D]
    and the result [B, Sq, Hq, D]. Grouped-query attention (Ainslie et al.
    2023): Hkv divides Hq and query head h reads KV head h / (Hq / Hkv).
    `scale` defaults to 1/sqrt(D). `mask` is additive and broadcasts to
    [B, Hq, Sq, Skv]. `kv_len` (i32/i64 scalar) limits attention to the
    first kv_len keys, for a preallocated KV cache. `causal` aligns at the
    bottom right: query i attends key j iff j <= i + L - Sq, where L is
    kv_len (or Skv), as in FlashAttention 2.1+ and PyTorch for Sq == Skv.
    Computed as FlashAttention-2 (Dao 2023) with fp32 accumulation. A query
    row that sees no key (Skv = 0, kv_len = 0, or every score -inf) gives
    zeros.

    The head dimension D is 1..1024 (llm::kMaxAttentionHeadDim), the range
    llmc's kernels implement (FlashAttention-2 on tensor cores for bf16/f16
    with D a multiple of 16 up to 256, a warp per query row otherwise, which
    keeps D / 32 fp32 accumulators per lane); the verifier and the reference
    executor reject other D. The CUDA backend evaluates `kv_len` only with
    its flash-decoding kernel (Sq <= 16, D <= 512, bf16/f16/f32) and
    rejects other `kv_len` attentions at compile time.

    `kv_hnd`: key and value are in FlashInfer's HND layout [B, Hkv, Skv, D]
    (PyTorch SDPA's layout, and a gpt-fast-style KV cache's) instead of NHD
    [B, Skv, Hkv, D]; the query and the result stay [B, Sq, Hq, D]. It lets
    attention read a [B, H, S, D] cache without a transposed copy;
    llmc-raise sets it when key and value are both llm.transpose
    [0, 2, 1, 3] of tensors.

    NaN and inf in K or V propagate to the rows that read them, as in
    PyTorch, with one exception: flash-decoding does not load a key whose
    mask is -inf for every query row its warp computes, so non-finite values
    in such keys (e.g. unwritten rows of a torch.empty cache past the
    position mask) do not reach the result there, while the reference
    executor and FlashAttention-2 give NaN.

    ```mlir
    %o = llm.attention %q, %k, %v {causal} : tensor<1x?x32x128xbf16>, tensor<1x?x8x128xbf16>, tensor<1x?x8x128xbf16>
    %d = llm.attention %q1, %kc, %vc kv_len(%len : tensor<i64>) {causal} : tensor<4x1x32x128xbf16>, tensor<4x2048x32x128xbf16>, tensor<4x2048x32x128xbf16>
    %h = llm.attention %q1, %kh, %vh mask(%m : tensor<1x1x1x2048xbf16>) {kv_hnd} : tensor<4x1x32x128xbf16>, tensor<4x8x2048x128xbf16>, tensor<4x8x2048x128xbf16>
    ```
  }];
  let arguments = (ins LLM_FloatTensor:$query, LLM_FloatTensor:$key,
                       LLM_FloatTensor:$value,
                       Optional<LLM_FloatTensor>:$mask,
                       Optional<LLM_IntTensor>:$kv_len,
                       UnitAttr:$causal, OptionalAttr<F64Attr>:$scale,
                       UnitAttr:$kv_hnd);
  let results = (outs LLM_FloatTensor:$result);
  let extraClassDeclaration = [{
    /// The key/value dimension of the key length (1, or 2 with kv_hnd).
    unsigned kvSeqDim() { return getKvHnd() ? 2 : 1; }
    /// The key/value dimension of the KV heads (2, or 1 with kv_hnd).
    unsigned kvHeadsDim() { return getKvHnd() ? 1 : 2; }
  }];
  let assemblyFormat = [{
    $query `,` $key `,` $value (`mask` `(` $mask^ `:` type($mask) `)`)?
    (`kv_len` `(` $kv_len^ `:` type($kv_len) `)`)? attr-dict `:`
    type($query) `,` type($key) `,` type($value)
  }];
  let hasVerifier = 1;
}

def LLM_AttentionLogSumExpOp : LLM_Op<"attention_logsumexp", [Pure]> {
  let summary = "The row statistics of attention that its backward needs (logsumexp).";
  let description = [{
    lse[b, h, i] = log sum_j exp(s_ij), s_ij = q_i . k_j * scale + mask_ij,
    over the keys j that `llm.attention` with the same operands and
    attributes lets query row i of head h see: query [B, Sq, Hq, D], key
    [B, Skv, Hkv, D] (NHD; GQA: Hkv divides Hq), `mask` additive and
    broadcast to [B, Hq, Sq, Skv], `causal` aligned at the bottom right,
    `scale` 1/sqrt(D) by default. The result is f32 [B, Hq, Sq], the layout
    of the logsumexp that PyTorch's SDPA kernels save for backward
    (FlashAttention-2, Dao 2023, Algorithm 1 line 12: L_i = m_i + log l_i).
    A row that sees no key (or only -inf scores) gives +inf, as
    FlashAttention's CUDA kernels do, so that exp(s - lse) is 0 there in
    any backward (PyTorch's CPU kernel writes 0, log 0 would be -inf and
    make the backward NaN). Computed in fp32 or wider.

    Training graphs import an SDPA forward whose statistics are saved as
    `llm.attention` (the output) plus this op; llmc-decompose-attention
    rewrites it into a matmul and row reductions until a fused kernel
    emits both results.

    ```mlir
    %lse = llm.attention_logsumexp %q, %k {causal} : tensor<2x16x4x64xbf16>, tensor<2x16x2x64xbf16> -> tensor<2x4x16xf32>
    ```
  }];
  let arguments = (ins LLM_FloatTensor:$query, LLM_FloatTensor:$key,
                       Optional<LLM_FloatTensor>:$mask,
                       UnitAttr:$causal, OptionalAttr<F64Attr>:$scale);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $query `,` $key (`mask` `(` $mask^ `:` type($mask) `)`)? attr-dict `:`
    type($query) `,` type($key) `->` type($result)
  }];
  let hasVerifier = 1;
}

def LLM_AttentionBackwardOp : LLM_Op<"attention_backward", [Pure,
    AllTypesMatch<["query", "grad_query"]>, AllTypesMatch<["key", "grad_key"]>,
    AllTypesMatch<["value", "grad_value"]>]> {
  let summary = "Gradients of `llm.attention` with respect to query, key and value.";
  let description = [{
    For o = llm.attention(q, k, v) with the same mask, `causal` and `scale`
    (layouts as there: [B, Sq, Hq, D] for query, output and grad_output,
    [B, Skv, Hkv, D] for key and value), `logsumexp` the f32 [B, Hq, Sq]
    statistics of `llm.attention_logsumexp` and do = grad_output, per
    head (FlashAttention-2, Dao 2023, Algorithm 2):

      P_ij  = exp(s_ij - lse_i)   (s as in llm.attention_logsumexp; 0 for
                                   keys the row does not see and for rows
                                   whose lse is +inf or -inf)
      D_i   = sum_d do_id * o_id
      dS_ij = P_ij * (do_i . v_j - D_i)
      dq_i  = scale * sum_j dS_ij k_j
      dk_j  = scale * sum_i dS_ij q_i,   dv_j = sum_i P_ij do_i

    A pair with P_ij = 0 (a key the row does not see) contributes nothing
    to dS, so NaN or inf in such a key's value does not reach the
    gradients. With GQA, dk and dv of a KV head sum over the Hq / Hkv query
    heads that read it. The probabilities come from the given logsumexp (not
    recomputed), as PyTorch's SDPA backward kernels do, so the logsumexp
    must be that of the forward. No gradient is produced for the mask.
    Accumulation is in fp32 or wider; the results have the types of query,
    key and value.

    llmc-decompose-attention rewrites it into batched matmuls and fused
    elementwise ops over [B, Hq, Sq, Skv] scores (memory O(Sq * Skv) per
    head), which needs static shapes (after shape specialization).

    ```mlir
    %dq, %dk, %dv = llm.attention_backward %q, %k, %v, %o, %do, %lse {causal} : tensor<2x16x4x64xbf16>, tensor<2x16x2x64xbf16>, tensor<2x16x2x64xbf16>, tensor<2x16x4x64xbf16>, tensor<2x16x4x64xbf16>, tensor<2x4x16xf32>
    ```
  }];
  let arguments = (ins LLM_FloatTensor:$query, LLM_FloatTensor:$key,
                       LLM_FloatTensor:$value, LLM_FloatTensor:$output,
                       LLM_FloatTensor:$grad_output,
                       RankedTensorOf<[F32]>:$logsumexp,
                       Optional<LLM_FloatTensor>:$mask,
                       UnitAttr:$causal, OptionalAttr<F64Attr>:$scale);
  let results = (outs LLM_FloatTensor:$grad_query, LLM_FloatTensor:$grad_key,
                      LLM_FloatTensor:$grad_value);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $output `,` $grad_output `,` $logsumexp
    (`mask` `(` $mask^ `:` type($mask) `)`)? attr-dict `:`
    type($query) `,` type($key) `,` type($value) `,` type($output) `,`
    type($grad_output) `,` type($logsumexp)
  }];
  let hasVerifier = 1;
}

def LLM_KVCacheAppendOp : LLM_Op<"kv_cache_append",
    [Pure, AllTypesMatch<["cache", "result"]>]> {
  let summary = "Writes new K or V rows into a preallocated KV cache at a position.";
  let description = [{
    cache [B, Smax, H, D], update [B, Snew, H, D], position an i32/i64
    scalar: result = cache with rows [position, position + Snew) of every
    batch replaced by `update`. The runtime performs it in place when the
    cache buffer is not used afterwards. position + Snew > Smax is an error
    at run time.

    ```mlir
    %kc = llm.kv_cache_append %cache, %k, %pos : tensor<32x2048x32x128xbf16>, tensor<32x1x32x128xbf16>, tensor<i64>
    ```
  }];
  let arguments = (ins LLM_FloatTensor:$cache, LLM_FloatTensor:$update,
                       LLM_IntTensor:$position);
  let results = (outs LLM_FloatTensor:$result);
  let assemblyFormat = [{
    $cache `,` $update `,` $position attr-dict `:` type($cache) `,` type($update) `,` type($position)
  }];
  let hasVerifier = 1;
}

def LLM_VarlenAttentionOp : LLM_Op<"varlen_attention",
    [Pure, AllTypesMatch<["query", "result"]>]> {
  let summary = "Attention of packed variable-length sequences (no padding).";
  let description = [{
    FlashAttention's `flash_attn_varlen_func` (Dao 2023): B sequences
    packed without padding along the first dimension, queries [T, Hq, D]
    with `cu_seqlens_q` [B + 1] and keys and values [Tk, Hkv, D] with
    `cu_seqlens_k` [B + 1] (cumulative offsets, from 0 up to T and Tk):
    sequence b's n_b queries (rows cu_seqlens_q[b] ..) attend only its m_b
    keys (rows cu_seqlens_k[b] ..), as packed training batches and prefill
    of several prompts do. `causal` aligns at the bottom right as
    `llm.attention` (query i attends key j iff j <= i + m_b - n_b; with
    n_b = m_b the usual causal mask within each sequence). GQA (Hkv divides
    Hq), `scale` defaulting to 1/sqrt(D), fp32 accumulation; a row that sees
    no key gives zeros. The result is [T, Hq, D]. Offsets that do not run
    from 0 to T (Tk) or decrease are a run-time error.

    ```mlir
    %o = llm.varlen_attention %q, %k, %v, %cuq, %cuk {causal} : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16>, tensor<9xi32>, tensor<9xi32>
    ```
  }];
  let arguments = (ins LLM_FloatTensor:$query, LLM_FloatTensor:$key,
                       LLM_FloatTensor:$value, LLM_IntTensor:$cu_seqlens_q,
                       LLM_IntTensor:$cu_seqlens_k, UnitAttr:$causal,
                       OptionalAttr<F64Attr>:$scale);
  let results = (outs LLM_FloatTensor:$result);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $cu_seqlens_q `,` $cu_seqlens_k attr-dict `:`
    type($query) `,` type($key) `,` type($value) `,` type($cu_seqlens_q) `,`
    type($cu_seqlens_k)
  }];
  let hasVerifier = 1;
}

def LLM_PagedKVAppendOp : LLM_Op<"paged_kv_append",
    [Pure, AllTypesMatch<["pages", "result"]>]> {
  let summary = "Writes new tokens' K or V rows into their pages of a paged KV cache.";
  let description = [{
    The write half of a paged KV cache (PagedAttention: Kwon et al., SOSP
    2023; vLLM's `reshape_and_cache`), with the sequence layout of
    `llm.paged_attention` so that a layer's append and attention take the
    same block table: pages [P, page_size, Hkv, D], the new tokens' rows
    `update` [T, Hkv, D] packed by sequence (sequence b's n_b rows from
    `cu_seqlens_q[b]`, `cu_seqlens_q` [B + 1] from 0 to T), `block_table`
    [B, max_pages] and `seq_lens` [B] (each sequence's length with its new
    tokens). Row i of sequence b is position p = seq_lens[b] - n_b + i and
    goes to row p % page_size of page block_table[b, p / page_size]; the
    result is `pages` with those rows replaced, every other row unchanged.

    In place when `pages` is a donated argument used only here (as
    `llm.kv_cache_append`); otherwise the pages are copied first. Run-time
    errors (the reference executor reports them with the op): the layout
    errors of `llm.paged_attention`, and two new tokens written to the same
    row (two sequences sharing a page they both append to: a page pool must
    copy a shared page before a sequence writes into it).

    Into fp8 pages (f8E4M3FN or f8E5M2) a float update (f32, f16, bf16) is
    written quantized, with `scale` [Hkv] f32 (one per KV head): the row
    stored is cast(update / scale[h]) to the page type, the quotient in f32
    (as torch's `(x.float() / scale).to(fp8)`), saturating as every cast to
    fp8 does. Pages of the update's type take no scale.

    ```mlir
    %kp2 = llm.paged_kv_append %kp, %k, %bt, %cuq, %lens : tensor<512x16x8x128xbf16>, tensor<5x8x128xbf16>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>
    %kp8 = llm.paged_kv_append %kp0, %k, %bt, %cuq, %lens scale %ks : tensor<512x16x8x128xf8E4M3FN>, tensor<5x8x128xbf16>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>, tensor<8xf32>
    ```
  }];
  let arguments = (ins LLM_FloatTensor:$pages, LLM_FloatTensor:$update,
                       LLM_IntTensor:$block_table, LLM_IntTensor:$cu_seqlens_q,
                       LLM_IntTensor:$seq_lens,
                       Optional<RankedTensorOf<[F32]>>:$scale);
  let results = (outs LLM_FloatTensor:$result);
  let assemblyFormat = [{
    $pages `,` $update `,` $block_table `,` $cu_seqlens_q `,` $seq_lens
    (`scale` $scale^)? attr-dict `:`
    type($pages) `,` type($update) `,` type($block_table) `,` type($cu_seqlens_q) `,`
    type($seq_lens) (`,` type($scale)^)?
  }];
  let hasVerifier = 1;
}

def LLM_PagedAttentionOp : LLM_Op<"paged_attention",
    [Pure, AttrSizedOperandSegments, AllTypesMatch<["query", "result"]>]> {
  let summary = "Attention of packed variable-length queries over a paged KV cache.";
  let description = [{
    The serving form of attention (PagedAttention: Kwon et al., SOSP 2023;
    the argument layout of FlashAttention's `flash_attn_varlen_func` with a
    `block_table`, as vLLM calls it). B sequences; the new tokens of all of
    them are packed along the first dimension of the query [T, Hq, D]:
    sequence b's are rows `cu_seqlens_q[b]` .. `cu_seqlens_q[b + 1] - 1`
    (`cu_seqlens_q` [B + 1], from 0 up to T; one row per sequence at
    decode, several for chunked prefill or speculative verification). The
    keys and values live in pages [P, page_size, Hkv, D]: key position j
    of sequence b is row j % page_size of page `block_table[b, j /
    page_size]` (`block_table` [B, max_pages]); `seq_lens` [B] gives each
    sequence's key length, its new tokens included (written into the pages
    before, by a paged append). The n_b new tokens are the last n_b
    positions: query row i of sequence b sits at position seq_lens[b] - n_b
    + i and, with `causal`, attends keys 0 .. that position, else all
    seq_lens[b] keys. Grouped-query attention as `llm.attention` (Hkv
    divides Hq); `scale` defaults to 1/sqrt(D); fp32 accumulation; a row
    that sees no key gives zeros. The result is [T, Hq, D].

    Run-time errors (the reference executor reports them with the op):
    `cu_seqlens_q` not non-decreasing from 0 to T, n_b > seq_lens[b],
    seq_lens[b] > max_pages * page_size, or a page id a sequence reads
    outside [0, P). Pages past a sequence's length are never read, so
    block-table entries there may be anything.

    An fp8 KV cache (pages of f8E4M3FN or f8E5M2, queries f32, f16 or bf16;
    vLLM's `kv_cache_dtype="fp8"`) halves the bytes decode reads. It comes
    with `scales(key_scale, value_scale)`, one f32 scale per KV head
    ([Hkv]): attention reads key = key_pages * key_scale[h] and value =
    value_pages * value_scale[h] (the scales `llm.paged_kv_append` divided
    by when it wrote them). Pages of the query's type take no scales.

    ```mlir
    %o = llm.paged_attention %q, %kp, %vp, %bt, %cuq, %lens {causal} : tensor<5x32x128xbf16>, tensor<512x16x8x128xbf16>, tensor<512x16x8x128xbf16>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>
    %o8 = llm.paged_attention %q, %kp8, %vp8, %bt, %cuq, %lens scales(%ks, %vs) {causal} : tensor<5x32x128xbf16>, tensor<512x16x8x128xf8E4M3FN>, tensor<512x16x8x128xf8E4M3FN>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>, tensor<8xf32>, tensor<8xf32>
    ```
  }];
  let arguments = (ins LLM_FloatTensor:$query, LLM_FloatTensor:$key_pages,
                       LLM_FloatTensor:$value_pages, LLM_IntTensor:$block_table,
                       LLM_IntTensor:$cu_seqlens_q, LLM_IntTensor:$seq_lens,
                       Optional<RankedTensorOf<[F32]>>:$key_scale,
                       Optional<RankedTensorOf<[F32]>>:$value_scale,
                       UnitAttr:$causal, OptionalAttr<F64Attr>:$scale);
  let results = (outs LLM_FloatTensor:$result);
  let assemblyFormat = [{
    $query `,` $key_pages `,` $value_pages `,` $block_table `,` $cu_seqlens_q `,`
    $seq_lens (`scales` `(` $key_scale^ `,` $value_scale `)`)? attr-dict `:`
    type($query) `,` type($key_pages) `,`
    type($value_pages) `,` type($block_table) `,` type($cu_seqlens_q) `,`
    type($seq_lens) (`,` type($key_scale)^ `,` type($value_scale))?
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Collectives (tensor parallelism)
//===----------------------------------------------------------------------===//

def LLM_AllReduceOp : LLM_Op<"all_reduce", [AllTypesMatch<["input", "result"]>]> {
  let summary = "All-reduce across a group of ranks (NCCL).";
  let description = [{
    Every rank of a group of `group_size` ranks receives the elementwise sum
    (or max) of the group's inputs.

    ```mlir
    %r = llm.all_reduce %x sum group_size = 2 : tensor<?x4096xbf16>
    ```
  }];
  let arguments = (ins LLM_NumericTensor:$input, LLM_ReduceKind:$kind,
                       I64Attr:$group_size);
  let results = (outs LLM_NumericTensor:$result);
  let assemblyFormat = [{
    $input $kind `group_size` `=` $group_size attr-dict `:` type($input)
  }];
  let hasVerifier = 1;
}

def LLM_AllGatherOp : LLM_Op<"all_gather", [InferTypeOpAdaptor]> {
  let summary = "All-gather: concatenates the group's inputs along `dim` (NCCL).";
  let description = [{
    result.dim(dim) = group_size * input.dim(dim), rank r's input at offset
    r * input.dim(dim).

    ```mlir
    %g = llm.all_gather %x dim = 1 group_size = 2 : tensor<4x2048xbf16>
    ```
  }];
  let arguments = (ins LLM_NumericTensor:$input, I64Attr:$dim, I64Attr:$group_size);
  let results = (outs LLM_NumericTensor:$result);
  let assemblyFormat = [{
    $input `dim` `=` $dim `group_size` `=` $group_size attr-dict `:` type($input)
  }];
}

def LLM_ReduceScatterOp : LLM_Op<"reduce_scatter", [InferTypeOpAdaptor]> {
  let summary = "Reduce-scatter: reduces across the group, rank r keeps chunk r of `dim` (NCCL).";
  let description = [{
    input.dim(dim) must divide by `group_size`; result.dim(dim) =
    input.dim(dim) / group_size.

    ```mlir
    %s = llm.reduce_scatter %x sum dim = 0 group_size = 2 : tensor<4096x4096xbf16>
    ```
  }];
  let arguments = (ins LLM_NumericTensor:$input, LLM_ReduceKind:$kind,
                       I64Attr:$dim, I64Attr:$group_size);
  let results = (outs LLM_NumericTensor:$result);
  let assemblyFormat = [{
    $input $kind `dim` `=` $dim `group_size` `=` $group_size attr-dict `:` type($input)
  }];
}

//===----------------------------------------------------------------------===//
// Layout padding
//===----------------------------------------------------------------------===//

def LLM_PadOp : LLM_Op<"pad", [Pure, AllElementTypesMatch<["input", "result"]>]> {
  let summary = "Zero padding at the end of each dimension.";
  let description = [{
    result.dim(i) = input.dim(i) + high[i]; the input occupies the leading
    corner of the result and every other element is zero. `llmc-pad-layout`
    pads GEMM operands to tensor-core multiples with it and slices the
    result back (`llm.slice`). A dynamic dimension can only have high = 0.
    A pad of a weight (a function argument) depends on it only, so
    llmc-hoist-parameter-work runs it once per parameter set.

    ```mlir
    %p = llm.pad %w high [47, 0] : tensor<50257x768xbf16> to tensor<50304x768xbf16>
    ```
  }];
  let arguments = (ins LLM_Tensor:$input, DenseI64ArrayAttr:$high);
  let results = (outs LLM_Tensor:$result);
  let assemblyFormat = [{
    $input `high` $high attr-dict `:` type($input) `to` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Weight-only quantization
//===----------------------------------------------------------------------===//

def LLM_QuantizeWeightOp : LLM_Op<"quantize_weight", [Pure]> {
  let summary = "Symmetric group-wise int8/int4 quantization of a linear weight.";
  let description = [{
    `weight` is [N, K] (the nn.Linear layout, rows are output features);
    each row is split into K / `group_size` groups of `group_size`
    consecutive elements along K (K must be a multiple of `group_size`;
    the op does not pad). Per group g of row n, in float32:

      scale[n, g] = max_k |w[n, k]| / Q        Q = 127 (bits = 8), 7 (bits = 4)
      q[n, k]     = rint(w[n, k] / scale[n, g])  (round half to even; 0 when scale is 0)

    so q lies in [-127, 127] (int8) or [-7, 7] (int4): symmetric absmax
    quantization (Dettmers et al. 2022, "LLM.int8()") applied per group of
    128 weights along K as in GPTQ (Frantar et al. 2023) and AWQ (Lin et
    al. 2024). The int4 code -8 is never produced, so the grid is symmetric
    around 0 (GPTQ's sym mode instead uses [-8, 7] with scale 2*max/15).

    Results: `packed` is i8 [N, K] for bits = 8, and [N, K / 2] for
    bits = 4 with two 4-bit two's-complement values per byte: element 2j in
    the low nibble (bits 0..3) and element 2j + 1 in the high nibble of
    byte j (the order of GPTQ/AWQ's packed int4 along K). `scales` is f32
    [N, K / group_size]. Depends on the weight only, so when the weight is a
    parameter llmc-hoist-parameter-work runs it once per parameter set.

    ```mlir
    %q, %s = llm.quantize_weight %w {bits = 4 : i64, group_size = 128 : i64} : tensor<4096x4096xbf16> -> tensor<4096x2048xi8>, tensor<4096x32xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32, F16, BF16]>:$weight,
                       I64Attr:$bits, I64Attr:$group_size);
  let results = (outs RankedTensorOf<[I8]>:$packed,
                      RankedTensorOf<[F32]>:$scales);
  let assemblyFormat = [{
    $weight attr-dict `:` type($weight) `->` type($packed) `,` type($scales)
  }];
  let hasVerifier = 1;
}

def LLM_DequantizeWeightOp : LLM_Op<"dequantize_weight", [Pure]> {
  let summary = "Expands an int8/int4 group-quantized weight to floats.";
  let description = [{
    The inverse of `llm.quantize_weight` up to rounding: for the [N, K]
    result, w[n, k] = q[n, k] * scales[n, k / group_size], computed in f32
    and rounded to the result type (f32, f16 or bf16). `packed` and
    `scales` have the layouts of `llm.quantize_weight`'s results (int4:
    element 2j in the low nibble of byte j). Codegen fuses it into the
    decode GEMV of a matmul that reads it as `rhs` with `transpose_rhs`
    (the packed weight is read directly); elsewhere it is a kernel of its
    own followed by the usual GEMM.

    ```mlir
    %w = llm.dequantize_weight %q, %s {bits = 4 : i64, group_size = 128 : i64} : tensor<4096x2048xi8>, tensor<4096x32xf32> -> tensor<4096x4096xbf16>
    ```
  }];
  let arguments = (ins RankedTensorOf<[I8]>:$packed,
                       RankedTensorOf<[F32]>:$scales,
                       I64Attr:$bits, I64Attr:$group_size);
  let results = (outs RankedTensorOf<[F32, F16, BF16]>:$result);
  let assemblyFormat = [{
    $packed `,` $scales attr-dict `:` type($packed) `,` type($scales) `->` type($result)
  }];
  let hasVerifier = 1;
}

#endif // LLMC_DIALECT_LLM_IR_LLMOPS_TD
