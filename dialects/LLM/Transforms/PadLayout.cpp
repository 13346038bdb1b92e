//===- PadLayout.cpp - pad GEMM dimensions to tensor-core multiples -------===//

#include "LLM/Transforms/Passes.h"

#include <numeric>

#include "mlir/IR/Builders.h"
#include "llvm/Support/MathExtras.h"

namespace llmc::llm {
#define GEN_PASS_DEF_PADLAYOUTPASS
#include "LLM/Transforms/Passes.h.inc"
} // namespace llmc::llm

using namespace mlir;
using namespace llmc::llm;

bool llmc::llm::isParameterDerived(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<ViewLikeOpInterface, CastOp, PadOp>(def))
      return false;
    v = def->getOperand(0);
  }
  return true;
}

namespace {

Value padHigh(OpBuilder &b, Value v, ArrayRef<int64_t> high) {
  if (llvm::all_of(high, [](int64_t h) { return h == 0; }))
    return v;
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(t.getShape());
  for (auto [d, h] : llvm::zip(shape, high))
    d += h;
  auto pad = PadOp::create(b, v.getLoc(), t.clone(shape), v, high);
  return pad;
}

struct PadLayoutPass : llmc::llm::impl::PadLayoutPassBase<PadLayoutPass> {
  using PadLayoutPassBase::PadLayoutPassBase;

  // matmul(x, w) => slice(matmul(pad(x), pad(w)))
  void padMatmul(MatmulOp mm) {
    auto lhs = mm.getLhs().getType(), rhs = mm.getRhs().getType();
    auto res = mm.getResult().getType();
    if (!lhs.hasStaticShape() || !rhs.hasStaticShape() ||
        !res.hasStaticShape())
      return;
    bool tl = mm.getTransposeLhs(), tr = mm.getTransposeRhs();
    int64_t lr = lhs.getRank(), rr = rhs.getRank();
    int64_t mDim = lr - (tl ? 1 : 2), kDimL = lr - (tl ? 2 : 1);
    int64_t kDimR = rr - (tr ? 1 : 2), nDim = rr - (tr ? 2 : 1);
    int64_t m = lhs.getDimSize(mDim), k = lhs.getDimSize(kDimL),
            n = rhs.getDimSize(nDim);
    bool fp8 = isa<Float8E4M3FNType, Float8E5M2Type>(lhs.getElementType()) ||
               isa<Float8E4M3FNType, Float8E5M2Type>(rhs.getElementType());
    int64_t m2 = m, k2, n2;
    if (fp8Only) {
      // Only what cuBLASLt's fp8 GEMMs need: K and N in multiples of 16. M
      // stays (a decode-shaped GEMM of a few rows is not padded to 32).
      if (!fp8)
        return;
      k2 = llvm::alignTo(k, 16);
      n2 = llvm::alignTo(n, 16);
    } else {
      // fp8: multiples of 32 as well as of the options' (cuBLASLt's fp8
      // GEMMs need K and N in multiples of 16; multiple=40 alone would give
      // 40).
      int64_t mult = fp8 ? std::lcm<int64_t>(multiple, 32) : int64_t(multiple);
      int64_t vocabMult = fp8 ? std::lcm<int64_t>(vocabMultiple, 32) : int64_t(vocabMultiple);
      m2 = llvm::alignTo(m, mult);
      k2 = llvm::alignTo(k, mult);
      n2 = llvm::alignTo(n, n >= 32000 ? vocabMult : mult);
    }
    if (m2 == m && k2 == k && n2 == n)
      return;
    OpBuilder b(mm);
    SmallVector<int64_t> lh(lr, 0), rh(rr, 0);
    lh[mDim] = m2 - m;
    lh[kDimL] = k2 - k;
    rh[kDimR] = k2 - k;
    rh[nDim] = n2 - n;
    Value a = padHigh(b, mm.getLhs(), lh);
    Value w = padHigh(b, mm.getRhs(), rh);
    Value bias = mm.getBias();
    if (bias)
      bias = padHigh(b, bias, {n2 - n});
    SmallVector<int64_t> shape(res.getShape());
    shape[shape.size() - 2] = m2;
    shape.back() = n2;
    auto padded = MatmulOp::create(b, mm.getLoc(), res.clone(shape), a, w, bias,
                                   mm.getScaleLhs(), mm.getScaleRhs(), tl, tr);
    int64_t rank = res.getRank();
    SmallVector<int64_t> starts(rank, 0), steps(rank, 1);
    SmallVector<int64_t> limits(res.getShape());
    Value sliced = SliceOp::create(b, mm.getLoc(), res, padded, starts, limits,
                                   steps);
    mm.getResult().replaceAllUsesWith(sliced);
    mm.erase();
  }

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (multiple <= 0 || vocabMultiple <= 0 || multiple > 4096 ||
        vocabMultiple > 4096) {
      fn.emitOpError() << "multiple and vocab-multiple must be in 1..4096, found "
                       << static_cast<int64_t>(multiple) << " and "
                       << static_cast<int64_t>(vocabMultiple);
      return signalPassFailure();
    }
    SmallVector<MatmulOp> mms;
    fn.walk([&](MatmulOp mm) { mms.push_back(mm); });
    for (MatmulOp mm : mms)
      padMatmul(mm);
  }
};
} // namespace
