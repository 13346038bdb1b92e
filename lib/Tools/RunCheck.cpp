//===- RunCheck.cpp - llmc-run: what --check compares against -------------===//
//
// The relative error bounds of --check (by the least precise float type in
// the computation, and by the precision policy) and the unfused float32
// instance of a function that --check=gpu-f32 runs as the reference.
//
//===----------------------------------------------------------------------===//

#include "RunMain.h"

#include "LLM/IR/LLMOps.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <algorithm>

using namespace mlir;

namespace llmc::tools::run {

namespace {

double dtypeTolerance(Type t) {
  if (t.isF32()) return 1e-5;
  if (t.isF16() || t.isBF16()) return 1e-2;
  if (isa<Float8E4M3FNType, Float8E5M2Type>(t)) return 1e-1;
  return 0.0; // integers: exact
}

} // namespace

/// Tolerance for a result: that of the least precise float type the
/// computation stores anything in (f32 logits computed from bf16 activations
/// carry bf16 error), never tighter than the result's own type.
double defaultTolerance(func::FuncOp fn, Type resultType) {
  double tol = dtypeTolerance(resultType);
  auto visit = [&](Type t) {
    if (auto rt = dyn_cast<RankedTensorType>(t))
      if (isa<FloatType>(rt.getElementType()))
        tol = std::max(tol, dtypeTolerance(rt.getElementType()));
  };
  for (Type t : fn.getArgumentTypes())
    visit(t);
  fn.walk([&](Operation *op) {
    for (Type t : op->getResultTypes())
      visit(t);
  });
  return tol;
}

/// Relative L2 error a precision policy adds on top of the graph's own
/// types, the bounds PassNumericsTest checks the policies against: bf16/fp16
/// GEMM and attention operands carry 8/11 significant bits (2e-2); fp8 is 2u
/// with u = 2^-4 the unit roundoff of e4m3 relative to each tensor's scale
/// (0.125; see test/unit/compiler/PassNumericsTest.cpp for the derivation).
double precisionTolerance(const std::string &policy) {
  if (policy == "bf16" || policy == "fp16") return 2e-2;
  if (policy == "fp8") return 0.125;
  return 0.0;
}


/// Rewrites every f16/bf16 type in `fn` to f32 (args, results, constants):
/// the "unfused float32 instance" used as the GPU reference for big shapes.
LogicalResult upcastToF32(func::FuncOp fn) {
  MLIRContext *ctx = fn.getContext();
  auto f32 = Float32Type::get(ctx);
  auto convert = [&](Type t) -> Type {
    auto rt = dyn_cast<RankedTensorType>(t);
    if (rt && (rt.getElementType().isF16() || rt.getElementType().isBF16()))
      return RankedTensorType::get(rt.getShape(), f32);
    return t;
  };
  for (BlockArgument a : fn.getArguments())
    a.setType(convert(a.getType()));
  WalkResult r = fn.walk([&](Operation *op) {
    for (Value v : op->getResults())
      v.setType(convert(v.getType()));
    if (auto c = dyn_cast<llmc::llm::ConstantOp>(op)) {
      auto attr = dyn_cast<DenseElementsAttr>(c.getValue());
      auto t = cast<RankedTensorType>(c.getType());
      if (t.getElementType().isF32() && attr &&
          !attr.getElementType().isF32()) {
        SmallVector<float> vals;
        for (APFloat v : attr.getValues<APFloat>())
          vals.push_back(static_cast<float>(v.convertToDouble()));
        c.setValueAttr(DenseElementsAttr::get(t, llvm::ArrayRef<float>(vals)));
      }
    }
    return WalkResult::advance();
  });
  if (r.wasInterrupted())
    return failure();
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  fn.setFunctionType(FunctionType::get(ctx, fn.getBody().front().getArgumentTypes(),
                                       ret.getOperandTypes()));
  return success();
}

} // namespace llmc::tools::run
