//===- LowerWeightOnly.cpp - weight-only quantization ---------------------===//
//
// llm.quantize_weight / llm.dequantize_weight: int8/int4 weights with one
// scale per group of K (a dequantize whose every user is a fused GEMV
// needs no launch: the GEMV reads the packed weight).
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// The quantize/dequantize kernel configuration of `op` (bits, group size,
/// float side `dtype`); Unimplemented naming the op when unsupported.
static absl::StatusOr<cu::WeightQuantConfig>
weightQuantConfig(Operation *op, int64_t bits, int64_t group, cu::ScalarType dtype) {
  cu::WeightQuantConfig cfg;
  cfg.bits = bits;
  cfg.group = group;
  cfg.dtype = dtype;
  if (!cu::WeightQuantSupported(cfg))
    return unsupported(op, "weight (de)quantization with this bits/group_size "
                           "(supported: 4 or 8 bits, group_size a multiple of 64)");
  return cfg;
}

/// quantize_weight(w) => one kernel (packed weight and scales).
static absl::Status lowerQuantizeWeight(QuantizeWeightOp op, Lowering &l) {
  auto cfgOr =
      weightQuantConfig(op, op.getBits(), op.getGroupSize(), scalarOf(op.getWeight()));
  if (!cfgOr.ok())
    return cfgOr.status();
  const cu::WeightQuantConfig &cfg = *cfgOr;
  auto w = tensorType(op.getWeight());
  int64_t n = w.getDimSize(0), k = w.getDimSize(1);
  std::vector<KernelArg> args = {l.ptrArg(op.getPacked()), l.ptrArg(op.getScales()),
                                 l.ptrArg(op.getWeight()), i64Arg(n), i64Arg(k)};
  return l.launchGenerated(cu::EmitQuantizeWeight(cfg),
                           cu::QuantizeWeightLaunch(cfg, n, k), args, op);
}

/// dequantize_weight(packed, scales) => one kernel, or none when every user
/// is a fused GEMV.
static absl::Status lowerDequantizeWeight(DequantizeWeightOp op, Lowering &l) {
  // Nothing to do when every user is a fused GEMV.
  if (llvm::all_of(op->getUsers(), [&](Operation *user) {
        cu::QuantGemvConfig qc;
        auto mm = dyn_cast<MatmulOp>(user);
        return mm && mm.getRhs() == op.getResult() && mm.getLhs() != op.getResult() &&
               (!mm.getBias() || mm.getBias() != op.getResult()) &&
               fusedDequantGemv(mm, &qc);
      }))
    return absl::OkStatus();
  auto cfgOr =
      weightQuantConfig(op, op.getBits(), op.getGroupSize(), scalarOf(op.getResult()));
  if (!cfgOr.ok())
    return cfgOr.status();
  const cu::WeightQuantConfig &cfg = *cfgOr;
  auto t = tensorType(op.getResult());
  int64_t n = t.getDimSize(0), k = t.getDimSize(1);
  std::vector<KernelArg> args = {l.ptrArg(op.getResult()), l.ptrArg(op.getPacked()),
                                 l.ptrArg(op.getScales()), i64Arg(n), i64Arg(k)};
  return l.launchGenerated(cu::EmitDequantizeWeight(cfg),
                           cu::DequantizeWeightLaunch(cfg, n, k), args, op);
}

void populateWeightOnlyLowerings(OpLoweringSet &set) {
  set.add<QuantizeWeightOp>(lowerQuantizeWeight);
  set.add<DequantizeWeightOp>(lowerDequantizeWeight);
}

} // namespace llmc::codegen
