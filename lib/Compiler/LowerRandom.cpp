//===- LowerRandom.cpp - dropout keep masks --------------------------------===//
//
// llm.dropout_mask: one Philox4x32-10 kernel for every dropout site (the
// stream and the keep threshold are launch arguments).
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// dropout_mask(seed) => one thread per element.
static absl::Status lowerDropoutMask(DropoutMaskOp o, Lowering &l) {
  int64_t n = tensorType(o.getResult()).getNumElements();
  if (n == 0)
    return absl::OkStatus();
  std::vector<KernelArg> args = {l.ptrArg(o.getResult()), l.ptrArg(o.getSeed()),
                                 i64Arg(n), i32Arg(o.keepThreshold()),
                                 i32Arg(static_cast<int64_t>(o.getStream()))};
  return l.launchGenerated(cu::EmitDropoutMask(), cu::DropoutMaskLaunch(n), args, o);
}

void populateRandomLowerings(OpLoweringSet &set) {
  set.add<DropoutMaskOp>(lowerDropoutMask);
}

} // namespace llmc::codegen
