//===- RefElementwise.cpp - reference: unary and binary ops -----------------===//

#include "RankState.h"

namespace llmc::reference::detail {

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

absl::StatusOr<HostTensor> RankState::unary(Operation *op,
                                            double (*fn)(double)) {
  const HostTensor &x = in(op, 0);
  LLMC_ASSIGN_OR_RETURN(HostTensor out,
                       newTensor(op, resultElementType(op), x.shape));
  for (size_t i = 0; i < x.data.size(); ++i)
    out.data[i] = fn(x.data[i]);
  roundInPlace(out);
  return out;
}

absl::StatusOr<HostTensor> RankState::binary(Operation *op) {
  const HostTensor &a = in(op, 0), &b = in(op, 1);
  if (a.shape != b.shape)
    return opError(op, absl::StrCat("operands have shapes ", shapeStr(a.shape),
                                    " and ", shapeStr(b.shape),
                                    "; expected one shape (broadcast "
                                    "explicitly with llm.broadcast)"));
  LLMC_ASSIGN_OR_RETURN(HostTensor out,
                       newTensor(op, resultElementType(op), a.shape));
  bool isInt = isa<IntegerType>(a.elementType);
  size_t n = a.data.size();
  auto apply = [&](auto fn) {
    for (size_t i = 0; i < n; ++i)
      out.data[i] = fn(a.data[i], b.data[i]);
  };
  if (isa<llm::AddOp>(op))
    apply([](double x, double y) { return x + y; });
  else if (isa<llm::SubOp>(op))
    apply([](double x, double y) { return x - y; });
  else if (isa<llm::MulOp>(op))
    apply([](double x, double y) { return x * y; });
  else if (isa<llm::DivOp>(op)) {
    if (isInt) {
      for (size_t i = 0; i < n; ++i) {
        if (b.data[i] == 0.0)
          return opError(op, absl::StrCat("integer division by zero at element ",
                                          i));
        out.data[i] = std::trunc(a.data[i] / b.data[i]);
      }
    } else {
      apply([](double x, double y) { return x / y; });
    }
  } else if (isa<llm::PowOp>(op))
    apply([](double x, double y) { return std::pow(x, y); });
  else if (isa<llm::MaximumOp>(op))
    apply(nanMax);
  else if (isa<llm::MinimumOp>(op))
    apply(nanMin);
  else if (auto cmp = dyn_cast<llm::CompareOp>(op)) {
    llm::CmpPredicate p = cmp.getPredicate();
    for (size_t i = 0; i < n; ++i) {
      double x = a.data[i], y = b.data[i];
      bool r = false;
      switch (p) {
      case llm::CmpPredicate::eq: r = x == y; break;
      case llm::CmpPredicate::ne: r = x != y; break;
      case llm::CmpPredicate::lt: r = x < y; break;
      case llm::CmpPredicate::le: r = x <= y; break;
      case llm::CmpPredicate::gt: r = x > y; break;
      case llm::CmpPredicate::ge: r = x >= y; break;
      }
      out.data[i] = r ? 1.0 : 0.0;
    }
    return out;
  }
  roundInPlace(out);
  return out;
}

} // namespace llmc::reference::detail
