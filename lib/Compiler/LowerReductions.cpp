//===- LowerReductions.cpp - reductions -----------------------------------===//
//
// llm.reduce_{sum,mean,max,min} over all dimensions (two-stage) or over the
// last one (a row kernel).
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// reduce(x, all dims) => two kernels (partials, then total);
/// reduce(x, last dim) => one row kernel.
static absl::Status lowerReduction(Operation *o, Lowering &l) {
  Value in = o->getOperand(0);
  auto t = tensorType(in);
  ArrayRef<int64_t> dims = cast<DenseI64ArrayAttr>(o->getAttr("dims")).asArrayRef();
  cu::ReduceKind kind = isa<ReduceSumOp>(o)    ? cu::ReduceKind::sum
                        : isa<ReduceMeanOp>(o) ? cu::ReduceKind::mean
                        : isa<ReduceMaxOp>(o)  ? cu::ReduceKind::max
                                               : cu::ReduceKind::min;
  if (static_cast<int64_t>(dims.size()) == t.getRank() && t.getRank() > 0) {
    cu::FullReduceConfig cfg;
    cfg.in = scalarOf(in);
    cfg.out = scalarOf(o->getResult(0));
    cfg.kind = kind;
    int64_t numel = numElements(in);
    LLMC_ASSIGN_OR_RETURN(cu::FullReduceKernels ks,
                          generated(cu::EmitFullReduce(cfg), o));
    int partials = l.newArenaBuffer(4 * int64_t(cu::FullReduceNumPartials(numel)),
                                    l.getStep(), l.getStep());
    std::vector<KernelArg> args1 = {l.bufArg(partials), l.ptrArg(in), i64Arg(numel)};
    LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims1,
                          generated(cu::FullReduceStage1Launch(cfg, numel), o));
    l.launch(l.addKernel(ks.stage1), dims1, std::move(args1), o);
    std::vector<KernelArg> args2 = {l.ptrArg(o->getResult(0)), l.bufArg(partials),
                                    i32Arg(cu::FullReduceNumPartials(numel)),
                                    i64Arg(numel)};
    LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims2,
                          generated(cu::FullReduceStage2Launch(cfg, numel), o));
    l.launch(l.addKernel(ks.stage2), dims2, std::move(args2), o);
    return absl::OkStatus();
  }
  if (dims.size() != 1 || dims[0] != t.getRank() - 1)
    return unsupported(o, "reduction over dimensions other than the "
                          "last one or all of them");
  cu::RowReduceConfig cfg;
  cfg.in = scalarOf(in);
  cfg.out = scalarOf(o->getResult(0));
  cfg.kind = kind;
  cfg.n = t.getShape().back();
  int64_t rows = numElements(in) / std::max<int64_t>(cfg.n, 1);
  std::vector<KernelArg> args = {l.ptrArg(o->getResult(0)), l.ptrArg(in), i64Arg(rows)};
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims grid,
                        generated(cu::RowReduceLaunch(cfg, rows), o));
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code, generated(cu::EmitRowReduce(cfg), o));
  l.launch(l.addKernel(code), grid, std::move(args), o);
  return absl::OkStatus();
}

void populateReductionLowerings(OpLoweringSet &set) {
  set.add<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceMinOp>(lowerReduction);
}

} // namespace llmc::codegen
