//===- WeightOnly.cpp - int8/int4 weight-only quantization of matmuls -----===//
//
// The `weight-only=int8|int4` part of llmc-precision: the RHS of a matmul
// that is a parameter (a function argument seen through casts and views) is
// replaced by dequantize_weight(quantize_weight(w)) with symmetric groups of
// 128 along K. The quantization depends on the parameter only (prepared once
// per parameter set: llmc-hoist-parameter-work); codegen fuses the
// dequantization into the decode GEMV.
//
//===----------------------------------------------------------------------===//

#include "LLM/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using namespace llmc::llm;

/// The function argument `v` is computed from (through the ops
/// isParameterDerived looks through), or null.
static BlockArgument parameterRoot(Value v) {
  if (!isParameterDerived(v))
    return {};
  while (Operation *def = v.getDefiningOp())
    v = def->getOperand(0);
  return dyn_cast<BlockArgument>(v);
}

LogicalResult llmc::llm::quantizeLinearWeights(func::FuncOp fn, int64_t bits,
                                               int64_t groupSize) {
  if (fn.isExternal())
    return success();
  SmallVector<MatmulOp> mms;
  fn.walk([&](MatmulOp mm) { mms.push_back(mm); });
  OpBuilder b(fn.getContext());
  // One quantization per (weight value, orientation).
  llvm::DenseMap<std::pair<Value, int>, std::pair<Value, Value>> done;
  for (MatmulOp mm : mms) {
    Value rhs = mm.getRhs();
    auto rt = cast<RankedTensorType>(rhs.getType());
    auto lt = cast<RankedTensorType>(mm.getLhs().getType());
    if (rt.getRank() != 2 || !isa<Float32Type, Float16Type, BFloat16Type>(
                                 rt.getElementType()) ||
        !isa<Float32Type, Float16Type, BFloat16Type>(lt.getElementType()))
      continue;
    if (!isParameterArgument(fn, parameterRoot(rhs)))
      continue; // activation x activation (or a computed weight): untouched
    bool tr = mm.getTransposeRhs();
    int64_t n = rt.getDimSize(tr ? 0 : 1), k = rt.getDimSize(tr ? 1 : 0);
    // K not a multiple of the group: left in floating point (documented).
    if (ShapedType::isDynamic(k) || ShapedType::isDynamic(n) || k % groupSize)
      continue;
    auto key = std::make_pair(rhs, static_cast<int>(tr));
    auto it = done.find(key);
    if (it == done.end()) {
      if (Operation *def = rhs.getDefiningOp())
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPointToStart(&fn.getBody().front());
      Location loc = rhs.getLoc();
      Value w = rhs;
      if (!tr) // [K, N] -> [N, K] (a view of the parameter)
        w = TransposeOp::create(b, loc, rt.clone({n, k}), rhs,
                                ArrayRef<int64_t>{1, 0});
      auto i8 = b.getIntegerType(8);
      auto packedT = RankedTensorType::get({n, bits == 4 ? k / 2 : k}, i8);
      auto scalesT = RankedTensorType::get({n, k / groupSize}, b.getF32Type());
      auto q = QuantizeWeightOp::create(b, loc, packedT, scalesT, w,
                                        b.getI64IntegerAttr(bits),
                                        b.getI64IntegerAttr(groupSize));
      it = done.insert({key, {q.getPacked(), q.getScales()}}).first;
    }
    auto [packed, scales] = it->second;
    b.setInsertionPoint(mm);
    Value deq = DequantizeWeightOp::create(
        b, mm.getLoc(), RankedTensorType::get({n, k}, rt.getElementType()),
        packed, scales, b.getI64IntegerAttr(bits),
        b.getI64IntegerAttr(groupSize));
    // matmul(x, w) => matmul(x, dequantize_weight(quantize_weight(w))) {transpose_rhs}
    mm.getRhsMutable().assign(deq);
    mm.setTransposeRhs(true);
  }
  return success();
}
