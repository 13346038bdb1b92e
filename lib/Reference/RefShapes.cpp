//===- RefShapes.cpp - reference: views, pad, concat, gather ----------------===//

#include "RankState.h"

#include <functional>

namespace llmc::reference::detail {

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

absl::StatusOr<HostTensor> RankState::broadcast(llm::BroadcastOp op,
                                                bool *pending) {
  const HostTensor &x = in(op, 0);
  auto rt = op.getResult().getType();
  size_t lead = rt.getRank() - x.shape.size();
  Shape to(rt.getRank());
  for (int64_t d = 0; d < rt.getRank(); ++d) {
    int64_t want = rt.getDimSize(d);
    if (!ShapedType::isDynamic(want)) {
      to[d] = want;
      continue;
    }
    if (d >= static_cast<int64_t>(lead) && x.shape[d - lead] != 1) {
      to[d] = x.shape[d - lead];
      continue;
    }
    // The result's size here is not given by the input: a user decides it.
    *pending = true;
    return takeOrCopy(op, 0);
  }
  if (absl::Status s = checkBroadcastable(op, "input", x.shape, to); !s.ok())
    return s;
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, to));
  broadcastInto(x, out.shape, out.data);
  return out;
}

absl::StatusOr<HostTensor> RankState::reshape(llm::ReshapeOp op) {
  const HostTensor &x = in(op, 0);
  auto rt = op.getResult().getType();
  Shape to(rt.getShape().begin(), rt.getShape().end());
  int64_t known = 1, dynIdx = -1;
  for (int64_t d = 0; d < rt.getRank(); ++d) {
    if (ShapedType::isDynamic(to[d])) {
      if (dynIdx >= 0)
        return opError(op, absl::StrCat("result ", shapeStr(to),
                                        " has more than one dynamic dimension"));
      dynIdx = d;
    } else {
      known *= to[d];
    }
  }
  int64_t n = x.numElements();
  if (dynIdx >= 0) {
    if (known == 0 || n % known != 0)
      return opError(op, absl::StrCat("input ", shapeStr(x.shape), " with ", n,
                                      " elements cannot be reshaped to ",
                                      shapeStr(to)));
    to[dynIdx] = n / known;
  } else if (known != n) {
    return opError(op, absl::StrCat("input ", shapeStr(x.shape), " has ", n,
                                    " elements but the result ", shapeStr(to),
                                    " has ", known));
  }
  LLMC_ASSIGN_OR_RETURN(HostTensor out, takeOrCopy(op, 0));
  out.shape = std::move(to);
  return out;
}

absl::StatusOr<HostTensor> RankState::transpose(llm::TransposeOp op) {
  const HostTensor &x = in(op, 0);
  ArrayRef<int64_t> perm = op.getPermutation();
  Shape to(perm.size());
  Shape xs = stridesOf(x.shape), s(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    to[i] = x.shape[perm[i]];
    s[i] = xs[perm[i]];
  }
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, to));
  forEachIndex(to, [&](int64_t lin, ArrayRef<int64_t> idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      off += idx[d] * s[d];
    out.data[lin] = x.data[off];
  });
  return out;
}

absl::StatusOr<HostTensor> RankState::slice(llm::SliceOp op) {
  const HostTensor &x = in(op, 0);
  ArrayRef<int64_t> starts = op.getStarts(), limits = op.getLimits(),
                    steps = op.getSteps();
  size_t rank = x.shape.size();
  Shape to(rank), xs = stridesOf(x.shape);
  for (size_t d = 0; d < rank; ++d) {
    int64_t limit = limits[d] == -1 ? x.shape[d] : limits[d];
    if (starts[d] < 0 || limit > x.shape[d] || starts[d] > limit || steps[d] < 1)
      return opError(op, absl::StrCat("range [", starts[d], ", ", limit,
                                      ") step ", steps[d], " of dimension ", d,
                                      " is outside [0, ", x.shape[d], "]"));
    int64_t len = limit - starts[d]; // in [0, dim]: no overflow below
    to[d] = len == 0 ? 0 : (len - 1) / steps[d] + 1;
  }
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, to));
  forEachIndex(to, [&](int64_t lin, ArrayRef<int64_t> idx) {
    int64_t off = 0;
    for (size_t d = 0; d < rank; ++d)
      off += (starts[d] + idx[d] * steps[d]) * xs[d];
    out.data[lin] = x.data[off];
  });
  return out;
}

absl::StatusOr<HostTensor> RankState::pad(llm::PadOp op) {
  const HostTensor &x = in(op, 0);
  ArrayRef<int64_t> high = op.getHigh();
  if (high.size() != x.shape.size())
    return opError(op, absl::StrCat("expected ", x.shape.size(),
                                    " high padding entries, found ",
                                    high.size()));
  Shape to = x.shape;
  for (size_t d = 0; d < to.size(); ++d)
    to[d] += high[d]; // both at most 2^40 (the verifier)
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, to));
  Shape os = stridesOf(to);
  forEachIndex(x.shape, [&](int64_t lin, ArrayRef<int64_t> idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      off += idx[d] * os[d];
    out.data[off] = x.data[lin];
  });
  return out;
}

absl::StatusOr<HostTensor> RankState::concat(llm::ConcatOp op) {
  int64_t dim = op.getDim();
  const HostTensor &first = in(op, 0);
  Shape to = first.shape;
  to[dim] = 0;
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    const HostTensor &t = in(op, i);
    for (size_t d = 0; d < to.size(); ++d)
      if (static_cast<int64_t>(d) != dim && t.shape[d] != first.shape[d])
        return opError(op, absl::StrCat("input ", i, " has shape ",
                                        shapeStr(t.shape), ", expected ",
                                        first.shape[d], " in dimension ", d,
                                        " (as input 0)"));
    if (llvm::AddOverflow(to[dim], t.shape[dim], to[dim]))
      return opError(op, absl::StrCat("result dimension ", dim,
                                      " overflows int64 at input ", i));
  }
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, first.elementType, to));
  if (out.data.empty()) // no elements: nothing to copy, however many rows
    return out;
  int64_t outer = product(ArrayRef<int64_t>(to).take_front(dim));
  int64_t inner = product(ArrayRef<int64_t>(to).drop_front(dim + 1));
  int64_t offset = 0;
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    const HostTensor &t = in(op, i);
    int64_t rows = t.shape[dim];
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(t.data.begin() + o * rows * inner, rows * inner,
                  out.data.begin() + (o * to[dim] + offset) * inner);
    offset += rows;
  }
  return out;
}

absl::StatusOr<HostTensor> RankState::gather(llm::GatherOp op) {
  const HostTensor &table = in(op, 0), &idx = in(op, 1);
  int64_t axis = op.getAxis();
  Shape to(table.shape.begin(), table.shape.begin() + axis);
  to.insert(to.end(), idx.shape.begin(), idx.shape.end());
  to.insert(to.end(), table.shape.begin() + axis + 1, table.shape.end());
  int64_t outer = product(ArrayRef<int64_t>(table.shape).take_front(axis));
  int64_t inner = product(ArrayRef<int64_t>(table.shape).drop_front(axis + 1));
  int64_t rows = table.shape[axis];
  int64_t count = idx.numElements();
  for (int64_t k = 0; k < count; ++k) {
    double v = idx.data[k];
    if (v < 0 || v >= static_cast<double>(rows))
      return absl::OutOfRangeError(absl::StrCat(
          "'llm.gather' at ", locStr(op.getLoc()), ": index ",
          static_cast<int64_t>(v), " at position ", k,
          " of the indices is out of range [0, ", rows, ") for axis ", axis,
          " of the table ", shapeStr(table.shape)));
  }
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, table.elementType, to));
  if (out.data.empty())
    return out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < count; ++k) {
      int64_t r = static_cast<int64_t>(idx.data[k]);
      std::copy_n(table.data.begin() + (o * rows + r) * inner, inner,
                  out.data.begin() + (o * count + k) * inner);
    }
  return out;
}

absl::StatusOr<HostTensor> RankState::indexPut(llm::IndexPutOp op) {
  const HostTensor &base = in(op, 0), &idx = in(op, 1), &src = in(op, 2);
  int64_t dim = op.getDim();
  int64_t count = idx.numElements();
  Shape want = base.shape;
  want[dim] = count;
  if (src.shape != want)
    return opError(op, absl::StrCat("source ", shapeStr(src.shape),
                                    " does not match the base ",
                                    shapeStr(base.shape), " with ", count,
                                    " indices in dimension ", dim,
                                    " (expected ", shapeStr(want), ")"));
  int64_t rows = base.shape[dim];
  std::vector<int64_t> at(count);
  for (int64_t k = 0; k < count; ++k) {
    double v = idx.data[k];
    if (v < -static_cast<double>(rows) || v >= static_cast<double>(rows))
      return absl::OutOfRangeError(absl::StrCat(
          opName(op), ": index ", static_cast<int64_t>(v), " at position ", k,
          " of the indices is out of range [-", rows, ", ", rows,
          ") for dimension ", dim, " of the base ", shapeStr(base.shape)));
    at[k] = v < 0 ? static_cast<int64_t>(v) + rows : static_cast<int64_t>(v);
  }
  int64_t outer = product(ArrayRef<int64_t>(base.shape).take_front(dim));
  int64_t inner = product(ArrayRef<int64_t>(base.shape).drop_front(dim + 1));
  bool accumulate = op.getAccumulate();
  // The base is updated in place when this is its last use (`base` is not
  // used below: taking it ends that reference). Sums are float64, rounded
  // once to the element type at the end.
  LLMC_ASSIGN_OR_RETURN(HostTensor out, takeOrCopy(op, 0));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < count; ++k) {
      auto from = src.data.begin() + (o * count + k) * inner;
      auto to = out.data.begin() + (o * rows + at[k]) * inner;
      if (accumulate)
        std::transform(from, from + inner, to, to, std::plus<double>());
      else
        std::copy_n(from, inner, to);
    }
  if (accumulate)
    roundInPlace(out);
  return out;
}

absl::StatusOr<HostTensor> RankState::argmax(llm::ArgMaxOp op) {
  const HostTensor &x = in(op, 0);
  int64_t dim = op.getDim();
  int64_t outer = product(ArrayRef<int64_t>(x.shape).take_front(dim));
  int64_t inner = product(ArrayRef<int64_t>(x.shape).drop_front(dim + 1));
  int64_t n = x.shape[dim];
  Shape to;
  for (int64_t i = 0; i < static_cast<int64_t>(x.shape.size()); ++i)
    if (i != dim)
      to.push_back(x.shape[i]);
    else if (op.getKeepdim())
      to.push_back(1);
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, op.getType().getElementType(), to));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      // The first maximum; a NaN is larger than any number (torch.argmax).
      int64_t best = 0;
      double bv = x.data[o * n * inner + i];
      for (int64_t j = 1; j < n && !std::isnan(bv); ++j) {
        double v = x.data[(o * n + j) * inner + i];
        if (std::isnan(v) || v > bv) {
          bv = v;
          best = j;
        }
      }
      out.data[o * inner + i] = static_cast<double>(best);
    }
  return out;
}

namespace {
/// Philox4x32-10 (Salmon et al. 2011), the first output word for `counter`
/// under `key`: the same integer arithmetic as the CUDA kernel
/// (lib/Target/CUDA/Random.cpp).
uint32_t philoxFirstWord(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                         uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t{0xD2511F53u} * c0, p1 = uint64_t{0xCD9E8D57u} * c2;
    uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c0;
}
} // namespace

absl::StatusOr<HostTensor> RankState::dropoutMask(llm::DropoutMaskOp op) {
  const HostTensor &seed = in(op, 0);
  if (!seed.shape.empty())
    return opError(op, absl::StrCat("seed must be a scalar, found shape ",
                                    shapeStr(seed.shape)));
  auto rt = op.getType();
  if (!rt.hasStaticShape())
    return opError(op, "the result shape must be static (specialize the shapes first)");
  Shape shape(rt.getShape().begin(), rt.getShape().end());
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, rt.getElementType(), shape));
  const uint64_t s = static_cast<uint64_t>(static_cast<int64_t>(seed.data[0]));
  const uint32_t k0 = uint32_t(s), k1 = uint32_t(s >> 32);
  const uint32_t stream = static_cast<uint32_t>(op.getStream());
  const uint32_t threshold = op.keepThreshold();
  for (size_t i = 0; i < out.data.size(); ++i) {
    uint64_t n = i;
    uint32_t x = philoxFirstWord(uint32_t(n), uint32_t(n >> 32), stream, 0, k0, k1);
    out.data[i] = (x >> 8) >= threshold ? 1.0 : 0.0;
  }
  return out;
}

absl::StatusOr<HostTensor> RankState::cumsum(llm::CumsumOp op) {
  const HostTensor &x = in(op, 0);
  int64_t dim = static_cast<int64_t>(op.getDim());
  if (dim < 0 || dim >= static_cast<int64_t>(x.shape.size()))
    return opError(op, absl::StrCat("dim ", dim, " is out of range for shape ",
                                    shapeStr(x.shape)));
  int64_t outer = product(ArrayRef<int64_t>(x.shape).take_front(dim));
  int64_t inner = product(ArrayRef<int64_t>(x.shape).drop_front(dim + 1));
  int64_t n = x.shape[dim];
  LLMC_ASSIGN_OR_RETURN(HostTensor out,
                       newTensor(op, op.getType().getElementType(), x.shape));
  // Float64 sums: exact for integer inputs (up to 2^53), and for floats
  // rounded once per element by roundInPlace.
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double run = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        int64_t at = (o * n + j) * inner + i;
        run += x.data[at];
        out.data[at] = run;
      }
    }
  roundInPlace(out);
  return out;
}

} // namespace llmc::reference::detail
