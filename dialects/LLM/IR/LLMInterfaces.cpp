//===- LLMInterfaces.cpp - what llm traits and interfaces mean ------------===//
//
// The llm op interfaces, their implementations on the view ops, and the
// storage-root helpers built on them.
//
//===----------------------------------------------------------------------===//

#include "LLM/IR/LLMInterfaces.h"

#include "LLM/IR/LLMOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
using namespace llmc::llm;

#include "LLM/IR/LLMInterfaces.cpp.inc"

bool llmc::llm::isElementwise(Operation *op) {
  return op->hasTrait<OpTrait::Elementwise>() &&
         isa_and_nonnull<LLMDialect>(op->getDialect());
}

//===----------------------------------------------------------------------===//
// Views
//===----------------------------------------------------------------------===//

Value ReshapeOp::getViewSource() { return getInput(); }
Value BroadcastOp::getViewSource() { return getInput(); }
Value TransposeOp::getViewSource() { return getInput(); }
Value SliceOp::getViewSource() { return getInput(); }

// Input dimensions align with the result's trailing ones; size-1 input
// dimensions and the added leading ones read one element (stride 0).
void BroadcastOp::composeLayout(int64_t &elementOffset,
                                SmallVectorImpl<int64_t> &strides) {
  ArrayRef<int64_t> in = getInput().getType().getShape();
  int64_t lead = getResult().getType().getRank() - static_cast<int64_t>(in.size());
  SmallVector<int64_t> out(getResult().getType().getRank(), 0);
  for (size_t i = 0; i < in.size(); ++i)
    out[lead + i] = in[i] == 1 ? 0 : strides[i];
  strides.assign(out.begin(), out.end());
}

// result.dim(i) = input.dim(permutation[i]).
void TransposeOp::composeLayout(int64_t &elementOffset,
                                SmallVectorImpl<int64_t> &strides) {
  SmallVector<int64_t> out;
  for (int64_t p : getPermutation())
    out.push_back(strides[p]);
  strides.assign(out.begin(), out.end());
}

// result[i] = input[start + i * step] per dimension.
void SliceOp::composeLayout(int64_t &elementOffset,
                            SmallVectorImpl<int64_t> &strides) {
  for (size_t i = 0; i < strides.size(); ++i) {
    elementOffset += getStarts()[i] * strides[i];
    strides[i] *= getSteps()[i];
  }
}

/// `v` is a donated function argument with no other use.
static bool isDonatedSoleUse(Value v) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || !v.hasOneUse())
    return false;
  auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  return fn && fn.getArgAttr(arg.getArgNumber(), "llm.donate");
}

bool llmc::llm::updatesInPlace(KVCacheAppendOp op) {
  return isDonatedSoleUse(op.getCache());
}

bool llmc::llm::updatesInPlace(PagedKVAppendOp op) {
  return isDonatedSoleUse(op.getPages());
}

bool llmc::llm::updatesInPlace(IndexPutOp op) {
  return isDonatedSoleUse(op.getBase());
}

Value llmc::llm::storageRoot(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (auto view = dyn_cast<ViewLikeOpInterface>(def);
        view && !isa<StridedViewOpInterface>(def)) {
      v = view.getViewSource();
    } else if (auto c = dyn_cast<AllReduceOp>(def); c && c.getGroupSize() == 1) {
      v = c.getInput();
    } else if (auto a = dyn_cast<KVCacheAppendOp>(def); a && updatesInPlace(a)) {
      v = a.getCache();
    } else if (auto a = dyn_cast<PagedKVAppendOp>(def); a && updatesInPlace(a)) {
      v = a.getPages();
    } else if (auto p = dyn_cast<IndexPutOp>(def); p && updatesInPlace(p)) {
      v = p.getBase();
    } else {
      break;
    }
  }
  return v;
}
