//===- RefReductions.cpp - reference: reductions and norms ------------------===//

#include "RankState.h"

namespace llmc::reference::detail {

//===----------------------------------------------------------------------===//
// Reductions and normalizations
//===----------------------------------------------------------------------===//

/// kind: 0 sum, 1 mean, 2 max, 3 min.
absl::StatusOr<HostTensor> RankState::reduce(Operation *op,
                                             ArrayRef<int64_t> dims,
                                             bool keepdim, int kind) {
  const HostTensor &x = in(op, 0);
  // The verifier's rule, for shapes that were dynamic there.
  if (std::optional<std::string> error = llm::checkReducedDims(x.shape, dims))
    return opError(op, *error);
  size_t rank = x.shape.size();
  std::vector<bool> reduced(rank, false);
  for (int64_t d : dims)
    reduced[d] = true;
  Shape kept(rank); // the output shape with keepdim
  int64_t count = 1;
  for (size_t d = 0; d < rank; ++d) {
    kept[d] = reduced[d] ? 1 : x.shape[d];
    if (reduced[d])
      count *= x.shape[d];
  }
  Shape ks = stridesOf(kept);
  double init = kind == 2 ? -kInf : kind == 3 ? kInf : 0.0;
  Shape to;
  for (size_t d = 0; d < rank; ++d)
    if (!reduced[d] || keepdim)
      to.push_back(kept[d]);
  LLMC_ASSIGN_OR_RETURN(HostTensor out,
                       newTensor(op, resultElementType(op), std::move(to)));
  std::vector<double> &acc = out.data;
  std::fill(acc.begin(), acc.end(), init);
  forEachIndex(x.shape, [&](int64_t lin, ArrayRef<int64_t> idx) {
    int64_t o = 0;
    for (size_t d = 0; d < rank; ++d)
      if (!reduced[d])
        o += idx[d] * ks[d];
    double v = x.data[lin];
    switch (kind) {
    case 0:
    case 1: acc[o] += v; break;
    case 2: acc[o] = nanMax(acc[o], v); break;
    case 3: acc[o] = nanMin(acc[o], v); break;
    }
  });
  if (kind == 1)
    for (double &v : acc)
      v /= static_cast<double>(count); // count >= 1: no empty reduced dim
  roundInPlace(out);
  return out;
}

absl::StatusOr<HostTensor> RankState::softmax(llm::SoftmaxOp op) {
  const HostTensor &x = in(op, 0);
  std::vector<double> mask;
  if (op.getMask()) {
    const HostTensor &m = in(op.getMask());
    if (absl::Status s = checkBroadcastable(op, "mask", m.shape, x.shape);
        !s.ok())
      return s;
    LLMC_ASSIGN_OR_RETURN(mask, newBuffer(op, absl::StrCat(
                                                 "the mask broadcast to ",
                                                 shapeStr(x.shape)),
                                         x.numElements()));
    broadcastInto(m, x.shape, mask);
  }
  double scale = op.getScale() ? op.getScale()->convertToDouble() : 1.0;
  int64_t cols = x.shape.back();
  int64_t rows = cols == 0 ? 0 : x.numElements() / cols;
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, x.shape));
  LLMC_ASSIGN_OR_RETURN(std::vector<double> z,
                       newBuffer(op, "a row of scores", cols));
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -kInf;
    for (int64_t c = 0; c < cols; ++c) {
      int64_t i = r * cols + c;
      z[c] = x.data[i] * scale + (mask.empty() ? 0.0 : mask[i]);
      mx = nanMax(mx, z[c]);
    }
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      z[c] = std::exp(z[c] - mx); // an all -inf row gives NaN, as PyTorch
      sum += z[c];
    }
    for (int64_t c = 0; c < cols; ++c)
      out.data[r * cols + c] = z[c] / sum;
  }
  roundInPlace(out);
  return out;
}

static absl::Status checkNormParam(Operation *op, absl::string_view name,
                                   const HostTensor &p, int64_t hidden) {
  if (p.shape.size() != 1 || p.shape[0] != hidden)
    return opError(op, absl::StrCat(name, " must have shape [", hidden,
                                    "] (the input's last dimension), found ",
                                    shapeStr(p.shape)));
  return absl::OkStatus();
}

absl::StatusOr<HostTensor> RankState::rmsNorm(llm::RMSNormOp op) {
  const HostTensor &x = in(op, 0), &w = in(op, 1);
  int64_t h = x.shape.back();
  if (absl::Status s = checkNormParam(op, "weight", w, h); !s.ok())
    return s;
  double eps = op.getEps().convertToDouble();
  int64_t rows = h == 0 ? 0 : x.numElements() / h;
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, x.shape));
  for (int64_t r = 0; r < rows; ++r) {
    const double *row = x.data.data() + r * h;
    double ss = 0.0;
    for (int64_t c = 0; c < h; ++c)
      ss += row[c] * row[c];
    double inv = 1.0 / std::sqrt(ss / static_cast<double>(h) + eps);
    for (int64_t c = 0; c < h; ++c)
      out.data[r * h + c] = row[c] * inv * w.data[c];
  }
  roundInPlace(out);
  return out;
}

absl::StatusOr<HostTensor> RankState::layerNorm(llm::LayerNormOp op) {
  const HostTensor &x = in(op, 0), &w = in(op, 1);
  int64_t h = x.shape.back();
  if (absl::Status s = checkNormParam(op, "weight", w, h); !s.ok())
    return s;
  const HostTensor *b = nullptr;
  if (op.getBias()) {
    b = &in(op.getBias());
    if (absl::Status s = checkNormParam(op, "bias", *b, h); !s.ok())
      return s;
  }
  double eps = op.getEps().convertToDouble();
  int64_t rows = h == 0 ? 0 : x.numElements() / h;
  LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, x.elementType, x.shape));
  for (int64_t r = 0; r < rows; ++r) {
    const double *row = x.data.data() + r * h;
    double mean = 0.0;
    for (int64_t c = 0; c < h; ++c)
      mean += row[c];
    mean /= static_cast<double>(h);
    double var = 0.0;
    for (int64_t c = 0; c < h; ++c)
      var += (row[c] - mean) * (row[c] - mean);
    var /= static_cast<double>(h);
    double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < h; ++c)
      out.data[r * h + c] =
          (row[c] - mean) * inv * w.data[c] + (b ? b->data[c] : 0.0);
  }
  roundInPlace(out);
  return out;
}

} // namespace llmc::reference::detail
