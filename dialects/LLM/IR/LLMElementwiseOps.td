//===- LLMElementwiseOps.td - llm elementwise operations --*- tablegen -*-===//
//
// The `llm` dialect's elementwise operations (the `Elementwise` trait: same
// shape in and out, one result element per operand element), included by
// LLMOps.td after the type constraints they use.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_LLM_IR_LLMELEMENTWISEOPS_TD
#define LLMC_DIALECT_LLM_IR_LLMELEMENTWISEOPS_TD

class LLM_ElementwiseBinaryOp<string mnemonic, Type operandType,
                              list<Trait> traits = []>
    : LLM_Op<mnemonic, !listconcat([Pure, Elementwise,
                                    SameOperandsAndResultType], traits)> {
  let arguments = (ins operandType:$lhs, operandType:$rhs);
  let results = (outs operandType:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

class LLM_ElementwiseUnaryOp<string mnemonic, Type operandType,
                             list<Trait> traits = []>
    : LLM_Op<mnemonic, !listconcat([Pure, Elementwise,
                                    SameOperandsAndResultType], traits)> {
  let arguments = (ins operandType:$input);
  let results = (outs operandType:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def LLM_AddOp : LLM_ElementwiseBinaryOp<"add", LLM_NumericTensor, [Commutative]> {
  let summary = "Elementwise addition: result = lhs + rhs.";
  let description = [{
    Operands and result have one type (broadcast explicitly with
    `llm.broadcast`). Low-precision floats are added in fp32 and rounded
    once to the result type (round-to-nearest-even).

    ```mlir
    %s = llm.add %x, %residual : tensor<?x4096xbf16>
    ```
  }];
  let hasFolder = 1;
}
def LLM_SubOp : LLM_ElementwiseBinaryOp<"sub", LLM_NumericTensor> {
  let summary = "Elementwise subtraction: result = lhs - rhs.";
  let description = [{
    ```mlir
    %d = llm.sub %a, %b : tensor<8x16xf32>
    ```
  }];
  let hasFolder = 1;
}
def LLM_MulOp : LLM_ElementwiseBinaryOp<"mul", LLM_NumericTensor, [Commutative]> {
  let summary = "Elementwise multiplication: result = lhs * rhs.";
  let description = [{
    Used for the SwiGLU product `silu(gate) * up` (Shazeer 2020).

    ```mlir
    %h = llm.mul %g, %u : tensor<?x11008xbf16>
    ```
  }];
  let hasFolder = 1;
}
def LLM_DivOp : LLM_ElementwiseBinaryOp<"div", LLM_NumericTensor> {
  let summary = "Elementwise division: result = lhs / rhs.";
  let description = [{
    IEEE division for floats (x/0 = ±inf, 0/0 = NaN); integer division
    truncates toward zero.

    ```mlir
    %q = llm.div %a, %b : tensor<8xf32>
    ```
  }];
  let hasFolder = 1;
}
def LLM_PowOp : LLM_ElementwiseBinaryOp<"pow", LLM_FloatTensor> {
  let summary = "Elementwise power: result = lhs ^ rhs (C `powf` semantics).";
  let description = [{
    ```mlir
    %p = llm.pow %x, %two : tensor<8xf32>
    ```
  }];
}
def LLM_MaximumOp : LLM_ElementwiseBinaryOp<"maximum", LLM_NumericTensor, [Commutative]> {
  let summary = "Elementwise maximum; NaN propagates (torch.maximum).";
  let description = [{
    ```mlir
    %m = llm.maximum %a, %b : tensor<8xf32>
    ```
  }];
}
def LLM_MinimumOp : LLM_ElementwiseBinaryOp<"minimum", LLM_NumericTensor, [Commutative]> {
  let summary = "Elementwise minimum; NaN propagates (torch.minimum).";
  let description = [{
    ```mlir
    %m = llm.minimum %a, %b : tensor<8xf32>
    ```
  }];
}

def LLM_NegOp : LLM_ElementwiseUnaryOp<"neg", LLM_NumericTensor> {
  let summary = "Elementwise negation: result = -input.";
  let description = [{
    ```mlir
    %n = llm.neg %x : tensor<8xbf16>
    ```
  }];
  let hasFolder = 1;
}
def LLM_AbsOp : LLM_ElementwiseUnaryOp<"abs", LLM_NumericTensor> {
  let summary = "Elementwise absolute value.";
  let description = [{
    ```mlir
    %a = llm.abs %x : tensor<8xf16>
    ```
  }];
}
def LLM_ExpOp : LLM_ElementwiseUnaryOp<"exp", LLM_FloatTensor> {
  let summary = "Elementwise e^x, computed in fp32.";
  let description = [{
    ```mlir
    %e = llm.exp %x : tensor<8xf32>
    ```
  }];
}
def LLM_LogOp : LLM_ElementwiseUnaryOp<"log", LLM_FloatTensor> {
  let summary = "Elementwise natural logarithm, computed in fp32.";
  let description = [{
    ```mlir
    %l = llm.log %x : tensor<8xf32>
    ```
  }];
}
def LLM_TanhOp : LLM_ElementwiseUnaryOp<"tanh", LLM_FloatTensor> {
  let summary = "Elementwise hyperbolic tangent, computed in fp32.";
  let description = [{
    ```mlir
    %t = llm.tanh %x : tensor<8xf32>
    ```
  }];
}
def LLM_SinOp : LLM_ElementwiseUnaryOp<"sin", LLM_FloatTensor> {
  let summary = "Elementwise sine of an angle in radians, computed in fp32.";
  let description = [{
    Accurate sine (CUDA `sinf`, not the `__sinf` intrinsic, whose error grows
    with |x|): RoPE tables (Su et al. 2021) take angles position * inv_freq
    of thousands of radians, and PyTorch/Hugging Face use the accurate form.

    ```mlir
    %s = llm.sin %angles : tensor<2048x64xf32>
    ```
  }];
}
def LLM_CosOp : LLM_ElementwiseUnaryOp<"cos", LLM_FloatTensor> {
  let summary = "Elementwise cosine of an angle in radians, computed in fp32.";
  let description = [{
    Accurate cosine (CUDA `cosf`, not `__cosf`); see `llm.sin`.

    ```mlir
    %c = llm.cos %angles : tensor<2048x64xf32>
    ```
  }];
}
def LLM_SqrtOp : LLM_ElementwiseUnaryOp<"sqrt", LLM_FloatTensor> {
  let summary = "Elementwise square root, computed in fp32.";
  let description = [{
    ```mlir
    %r = llm.sqrt %x : tensor<8xf32>
    ```
  }];
}
def LLM_RsqrtOp : LLM_ElementwiseUnaryOp<"rsqrt", LLM_FloatTensor> {
  let summary = "Elementwise reciprocal square root 1/sqrt(x), computed in fp32.";
  let description = [{
    ```mlir
    %r = llm.rsqrt %x : tensor<8xf32>
    ```
  }];
}
def LLM_SiluOp : LLM_ElementwiseUnaryOp<"silu", LLM_FloatTensor> {
  let summary = "Elementwise SiLU (swish): x * sigmoid(x).";
  let description = [{
    Elfwing et al. 2017 / Ramachandran et al. 2017; the gate activation of
    SwiGLU (Shazeer 2020). Computed in fp32.

    ```mlir
    %s = llm.silu %gate : tensor<?x11008xbf16>
    ```
  }];
}
def LLM_GeluOp : LLM_Op<"gelu", [Pure, Elementwise, SameOperandsAndResultType]> {
  let summary = "Elementwise GELU, exact (erf) or tanh approximation.";
  let description = [{
    Hendrycks & Gimpel 2016. `erf`: 0.5 x (1 + erf(x / sqrt 2)).
    `tanh`: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) — GPT-2's form.
    Computed in fp32.

    ```mlir
    %g = llm.gelu %x tanh : tensor<?x3072xf16>
    ```
  }];
  let arguments = (ins LLM_FloatTensor:$input, LLM_GeluApprox:$approximation);
  let results = (outs LLM_FloatTensor:$result);
  let assemblyFormat = "$input $approximation attr-dict `:` type($result)";
}
def LLM_ReluOp : LLM_ElementwiseUnaryOp<"relu", LLM_NumericTensor> {
  let summary = "Elementwise max(x, 0).";
  let description = [{
    ```mlir
    %r = llm.relu %x : tensor<8xf32>
    ```
  }];
}
def LLM_SigmoidOp : LLM_ElementwiseUnaryOp<"sigmoid", LLM_FloatTensor> {
  let summary = "Elementwise logistic sigmoid 1 / (1 + e^-x), computed in fp32.";
  let description = [{
    ```mlir
    %s = llm.sigmoid %x : tensor<8xf32>
    ```
  }];
}

def LLM_CompareOp : LLM_Op<"compare",
    [Pure, Elementwise, SameTypeOperands, InferTypeOpAdaptor]> {
  let summary = "Elementwise comparison producing an i1 tensor.";
  let description = [{
    Compares `lhs` and `rhs` (same type) with the predicate; the result has
    their shape and element type i1. Ordered comparisons with NaN are false;
    `ne` with NaN is true (IEEE 754).

    ```mlir
    %m = llm.compare lt, %a, %b : tensor<8x8xf32>
    ```
  }];
  let arguments = (ins LLM_CmpPredicate:$predicate, LLM_NumericTensor:$lhs,
                       LLM_NumericTensor:$rhs);
  let results = (outs LLM_BoolTensor:$result);
  let assemblyFormat = "$predicate `,` $lhs `,` $rhs attr-dict `:` type($lhs)";
}

def LLM_SelectOp : LLM_Op<"select",
    [Pure, Elementwise, AllTypesMatch<["on_true", "on_false", "result"]>]> {
  let summary = "Elementwise select: result = cond ? on_true : on_false.";
  let description = [{
    `cond` is an i1 tensor of the result's shape.

    ```mlir
    %r = llm.select %c, %a, %b : tensor<8xi1>, tensor<8xf32>
    ```
  }];
  let arguments = (ins LLM_BoolTensor:$cond, LLM_Tensor:$on_true,
                       LLM_Tensor:$on_false);
  let results = (outs LLM_Tensor:$result);
  let assemblyFormat = [{
    $cond `,` $on_true `,` $on_false attr-dict `:` type($cond) `,` type($result)
  }];
}

#endif // LLMC_DIALECT_LLM_IR_LLMELEMENTWISEOPS_TD
