//===- LLMInterfaces.h - what llm traits and interfaces mean ----*- C++ -*-===//
//
// The op interfaces of the `llm` dialect (LLMInterfaces.td) and the one
// definition of the op classes that passes and codegen reason about: which
// ops are computed pointwise (elementwise), which are views of another
// value's storage, and which value owns the storage a value lives in.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_LLM_IR_LLMINTERFACES_H
#define LLMC_DIALECT_LLM_IR_LLMINTERFACES_H

#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/SmallVector.h"

#include "LLM/IR/LLMInterfaces.h.inc"

namespace llmc::llm {

class KVCacheAppendOp;
class IndexPutOp;
class PagedKVAppendOp;

/// True for the `llm` ops with MLIR's Elementwise trait (add, mul, exp,
/// silu, gelu, compare, select, cast, ...): one result, computed pointwise
/// from operands of the result's shape, so a chain of them is one fused
/// elementwise kernel (llm::planFusionGroups, codegen) and a tensor-parallel
/// split of their operands splits the result the same way (llmc-shard).
/// Ops of other dialects are never elementwise here, even with the trait:
/// codegen has no kernel for them. (Shape rules that hold for any op with
/// the trait, as in llmc-specialize-shapes and the reference executor,
/// check OpTrait::Elementwise directly.)
bool isElementwise(mlir::Operation *op);

// Views. An op with mlir::ViewLikeOpInterface (llm.reshape, llm.broadcast,
// llm.transpose, llm.slice) has no kernel of its own: its result is its
// view source's storage. Those with StridedViewOpInterface as well
// (broadcast, transpose, slice) read it through strides and an offset; a
// reshape reads it in its own row-major order, byte for byte.

/// The value that owns the storage `v` lives in, in `v`'s own row-major
/// layout: `v` seen through the ops whose result is their operand's bytes
/// unchanged, i.e. reshapes, an all_reduce over a group of one (an
/// identity), and a kv_cache_append, paged_kv_append or index_put that
/// updates its cache, pages or base in place (updatesInPlace). Strided views are not looked through: their elements
/// are elsewhere in their source's storage, so a consumer
/// that needs dense storage materializes them.
mlir::Value storageRoot(mlir::Value v);

/// A kv_cache_append (paged_kv_append, index_put) writes into its cache's
/// (pages', base's) storage when that storage is a donated function argument
/// (`llm.donate`) that nothing else reads; its result is then that
/// argument's storage.
bool updatesInPlace(KVCacheAppendOp op);
bool updatesInPlace(PagedKVAppendOp op);
bool updatesInPlace(IndexPutOp op);

} // namespace llmc::llm

#endif // LLMC_DIALECT_LLM_IR_LLMINTERFACES_H
