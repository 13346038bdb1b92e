//===- LowerNorms.cpp - RMSNorm, LayerNorm, softmax -----------------------===//
//
// Row kernels: RMSNorm and LayerNorm (with a fused residual add when
// llmc-form-kernels grouped one into the norm: residual_norm) and softmax.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// norm(x) or norm(add(a, b)) (a residual_norm kernel, which also writes the
/// sum) => one row kernel per norm.
static absl::Status lowerNorm(Operation *op, Lowering &l) {
  Value x = op->getOperand(0);
  Value out = op->getResult(0);
  auto add = x.getDefiningOp<AddOp>();
  bool fused = add && l.getKernelPlan().fusedIntoNorm.contains(add);
  int64_t hidden = tensorType(x).getShape().back();
  int64_t rows = numElements(x) / std::max<int64_t>(hidden, 1);
  std::vector<KernelArg> args = {l.ptrArg(out)};
  if (fused)
    args.push_back(l.ptrArg(add.getResult()));
  if (fused) {
    args.push_back(l.ptrArg(add.getLhs()));
    args.push_back(l.ptrArg(add.getRhs()));
  } else {
    args.push_back(l.ptrArg(x));
  }
  if (auto rms = dyn_cast<RMSNormOp>(op)) {
    cu::RMSNormConfig cfg;
    cfg.in = scalarOf(x);
    cfg.weight = scalarOf(rms.getWeight());
    cfg.out = scalarOf(out);
    cfg.hidden = hidden;
    cfg.eps = static_cast<float>(rms.getEps().convertToDouble());
    cfg.fused_residual = fused;
    args.push_back(l.ptrArg(rms.getWeight()));
    args.push_back(i64Arg(rows));
    return l.launchGenerated(cu::EmitRMSNorm(cfg), cu::RMSNormLaunch(cfg, rows), args,
                             op);
  }
  auto ln = cast<LayerNormOp>(op);
  cu::LayerNormConfig cfg;
  cfg.in = scalarOf(x);
  cfg.weight = scalarOf(ln.getWeight());
  if (ln.getBias() && scalarOf(ln.getBias()) != cfg.weight)
    return unsupported(op, "bias and weight of different element types");
  cfg.out = scalarOf(out);
  cfg.hidden = hidden;
  cfg.eps = static_cast<float>(ln.getEps().convertToDouble());
  cfg.has_weight = true;
  cfg.has_bias = static_cast<bool>(ln.getBias());
  cfg.fused_residual = fused;
  args.push_back(l.ptrArg(ln.getWeight()));
  if (ln.getBias())
    args.push_back(l.ptrArg(ln.getBias()));
  args.push_back(i64Arg(rows));
  return l.launchGenerated(cu::EmitLayerNorm(cfg), cu::LayerNormLaunch(cfg, rows), args,
                           op);
}

/// softmax(x [, mask]) => one row kernel.
static absl::Status lowerSoftmax(SoftmaxOp o, Lowering &l) {
  int64_t n = tensorType(o.getInput()).getShape().back();
  int64_t rows = numElements(o.getInput()) / std::max<int64_t>(n, 1);
  cu::SoftmaxConfig cfg;
  cfg.in = scalarOf(o.getInput());
  cfg.out = scalarOf(o.getResult());
  cfg.n = n;
  int64_t maskRows = 1;
  if (Value mask = o.getMask()) {
    // The kernel reads mask[row % mask_rows]: the mask must be dense
    // over its trailing dims and 1 over the leading ones.
    ArrayRef<int64_t> ms = tensorType(mask).getShape();
    ArrayRef<int64_t> xs = tensorType(o.getInput()).getShape();
    size_t lead = xs.size() - ms.size();
    size_t firstNonOne = 0;
    while (firstNonOne < ms.size() && ms[firstNonOne] == 1)
      ++firstNonOne;
    for (size_t i = firstNonOne; i < ms.size(); ++i)
      if (ms[i] != xs[lead + i])
        return unsupported(o, "a softmax mask broadcast inside its "
                              "trailing dimensions");
    if (ms.empty() || ms.back() != n)
      return unsupported(o, "a softmax mask broadcast along the row");
    cfg.has_mask = true;
    cfg.mask = scalarOf(mask);
    maskRows = numElements(mask) / n;
  }
  float scale = o.getScale() ? static_cast<float>(o.getScale()->convertToDouble()) : 1.f;
  std::vector<KernelArg> args = {l.ptrArg(o.getResult()),
                                 l.ptrArg(o.getInput()),
                                 o.getMask() ? l.ptrArg(o.getMask()) : nullArg(),
                                 f32Arg(scale),
                                 i64Arg(rows),
                                 i64Arg(maskRows)};
  return l.launchGenerated(cu::EmitSoftmax(cfg), cu::SoftmaxLaunch(cfg, rows), args, o);
}

void populateNormLowerings(OpLoweringSet &set) {
  set.add<RMSNormOp, LayerNormOp>(lowerNorm);
  set.add<SoftmaxOp>(lowerSoftmax);
}

} // namespace llmc::codegen
