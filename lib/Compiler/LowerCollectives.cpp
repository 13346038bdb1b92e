//===- LowerCollectives.cpp - NCCL collectives ----------------------------===//
//
// llm.all_reduce, llm.all_gather, llm.reduce_scatter => exec.collective
// (NCCL over the session's communicator); a group of one is a view.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// all_reduce / all_gather / reduce_scatter => exec.collective.
static absl::Status lowerCollective(Operation *o, Lowering &l) {
  if (auto a = dyn_cast<AllReduceOp>(o); a && a.getGroupSize() == 1)
    return absl::OkStatus(); // a view of its input
  rt::DType dtype = *toDType(tensorType(o->getOperand(0)).getElementType());
  exec::CollectiveKind kind;
  exec::Reduction reduction = exec::Reduction::sum;
  auto reductionOf = [](ReduceKind k) {
    return k == ReduceKind::sum ? exec::Reduction::sum : exec::Reduction::max;
  };
  int64_t count = numElements(o->getOperand(0));
  if (auto ar = dyn_cast<AllReduceOp>(o)) {
    kind = exec::CollectiveKind::all_reduce;
    reduction = reductionOf(ar.getKind());
  } else if (auto ag = dyn_cast<AllGatherOp>(o)) {
    auto t = tensorType(ag.getInput());
    for (int64_t i = 0; i < static_cast<int64_t>(ag.getDim()); ++i)
      if (t.getDimSize(i) != 1)
        return unsupported(o, "all_gather along an inner dimension");
    kind = exec::CollectiveKind::all_gather;
  } else {
    auto rs = cast<ReduceScatterOp>(o);
    auto t = tensorType(rs.getInput());
    for (int64_t i = 0; i < static_cast<int64_t>(rs.getDim()); ++i)
      if (t.getDimSize(i) != 1)
        return unsupported(o, "reduce_scatter along an inner dimension");
    kind = exec::CollectiveKind::reduce_scatter;
    reduction = reductionOf(rs.getKind());
    count = numElements(o->getResult(0));
  }
  BufferRef send = l.storageOf(o->getOperand(0));
  BufferRef recv = l.storageOf(o->getResult(0));
  l.getBuilder().collective(kind, reduction, count, dtype, send, recv,
                            o->getName().getStringRef());
  return absl::OkStatus();
}

void populateCollectiveLowerings(OpLoweringSet &set) {
  set.add<AllReduceOp, AllGatherOp, ReduceScatterOp>(lowerCollective);
}

} // namespace llmc::codegen
