//===- LLMDialect.td - the llm dialect ---------------------*- tablegen -*-===//
//
// The graph-level dialect of llmc: transformer ops on ranked tensors.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_LLM_IR_LLMDIALECT_TD
#define LLMC_DIALECT_LLM_IR_LLMDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def LLM_Dialect : Dialect {
  let name = "llm";
  let cppNamespace = "::llmc::llm";
  let summary = "Transformer graph operations on ranked tensors.";
  let description = [{
    The `llm` dialect models transformer (LLM) graphs at the level a model
    author writes them: elementwise math, shape manipulation, reductions,
    normalizations (RMSNorm, LayerNorm), rotary position embeddings (RoPE),
    matmul, scaled dot-product attention with grouped-query attention (GQA)
    and a KV cache, and collectives for tensor parallelism.

    All ops have value semantics on ranked tensors with static or dynamic
    dimensions. Element types are f32, f16, bf16, f8E4M3FN, f8E5M2, i1, i8,
    i32 and i64. Broadcasting is explicit (`llm.broadcast`); binary
    elementwise ops require operands of identical type.

    Sizes: every tensor an op takes or makes has at most 2^40 elements,
    and every static dimension is at most 2^40 (empty dimensions count as 1
    in the product, so every stride and linear index is bounded too). Byte
    sizes (at most 8 TiB for i64) and offsets therefore fit int64
    everywhere. The verifier of every op checks it for static dimensions;
    shape specialization checks it again for the bound ones, and for the
    function's own argument and result types. Tensors with an empty
    (size-0) dimension are valid and have no elements; an op whose results
    are all empty does nothing. Ops that reduce over an empty dimension (a
    reduction over an empty axis, a matmul with K = 0) are rejected by
    their verifiers: see each op.

    Function argument attributes understood by llmc (any other `llm.`
    argument attribute is an error): `llm.dim_names` (names of the
    argument's dynamic dimensions, bound per specialization: an array of
    non-empty strings, one per dynamic dimension in order), `llm.donate`
    (the caller lets the compiled code update the argument in place, as a
    KV cache appended by `llm.kv_cache_append`), `llm.aliasing_output = k`
    (on a donated argument: its buffer may hold result `k`, of the
    argument's type, after the call -- XLA's input/output aliasing; the
    CUDA backend writes the result there when the kernel computing it is
    the argument's only reader and reads it elementwise, as an optimizer's
    update of a parameter, and keeps value semantics otherwise) and
    `llm.param` (the argument is a parameter, see
    `llm::parameterArguments`) and `llm.gradient` (the argument is a
    gradient flowing backward, as the tangents of AOTAutograd's backward
    graph: under `llmc-precision{policy=fp8}` GEMM operands computed from
    it are quantized to e5m2, Transformer Engine's HYBRID format);
    `llm.donate`, `llm.param` and `llm.gradient` are unit attributes.

    ```mlir
    %h = llm.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<?x4096xbf16>, tensor<4096xbf16>
    ```
  }];
  let hasConstantMaterializer = 1;
  let hasRegionArgAttrVerify = 1;
}

// Every ranked tensor an llm op takes or makes has at most 2^40 elements
// (llm::kMaxTensorElements; see the dialect description).
def LLM_BoundedTensors : NativeOpTrait<"BoundedTensors"> {
  let cppNamespace = "::llmc::llm";
}

class LLM_Op<string mnemonic, list<Trait> traits = []>
    : Op<LLM_Dialect, mnemonic, !listconcat(traits, [LLM_BoundedTensors])>;

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def LLM_CmpPredicate : I32EnumAttr<"CmpPredicate", "comparison predicate", [
    I32EnumAttrCase<"eq", 0>, I32EnumAttrCase<"ne", 1>,
    I32EnumAttrCase<"lt", 2>, I32EnumAttrCase<"le", 3>,
    I32EnumAttrCase<"gt", 4>, I32EnumAttrCase<"ge", 5>]> {
  let cppNamespace = "::llmc::llm";
}

def LLM_GeluApprox : I32EnumAttr<"GeluApproximation", "GELU formula", [
    I32EnumAttrCase<"erf", 0>, I32EnumAttrCase<"tanh", 1>]> {
  let cppNamespace = "::llmc::llm";
}

def LLM_RopeMode : I32EnumAttr<"RopeMode", "RoPE pairing of the head dimension", [
    I32EnumAttrCase<"half_split", 0>, I32EnumAttrCase<"interleaved", 1>]> {
  let cppNamespace = "::llmc::llm";
}

def LLM_ReduceKind : I32EnumAttr<"ReduceKind", "collective reduction", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"max", 1>]> {
  let cppNamespace = "::llmc::llm";
}

#endif // LLMC_DIALECT_LLM_IR_LLMDIALECT_TD
