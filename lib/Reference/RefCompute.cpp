//===- RefCompute.cpp - reference: per-op dispatch --------------------------===//

#include "RankState.h"

namespace llmc::reference::detail {

//===----------------------------------------------------------------------===//
// Op dispatch
//===----------------------------------------------------------------------===//

absl::StatusOr<HostTensor> RankState::compute(Operation *op) {
  using R = absl::StatusOr<HostTensor>;
  return llvm::TypeSwitch<Operation *, R>(op)
      .Case<llm::ConstantOp>(
          [&](auto c) { return constantFromAttr(op, c.getValue()); })
      .Case<arith::ConstantOp>(
          [&](auto c) { return constantFromAttr(op, c.getValue()); })
      .Case<llm::AddOp, llm::SubOp, llm::MulOp, llm::DivOp, llm::PowOp,
            llm::MaximumOp, llm::MinimumOp, llm::CompareOp>(
          [&](auto) { return binary(op); })
      .Case<llm::NegOp>([&](auto) {
        return unary(op, [](double x) { return -x; });
      })
      .Case<llm::AbsOp>([&](auto) {
        return unary(op, [](double x) { return std::fabs(x); });
      })
      .Case<llm::ExpOp>([&](auto) {
        return unary(op, [](double x) { return std::exp(x); });
      })
      .Case<llm::LogOp>([&](auto) {
        return unary(op, [](double x) { return std::log(x); });
      })
      .Case<llm::TanhOp>([&](auto) {
        return unary(op, [](double x) { return std::tanh(x); });
      })
      .Case<llm::SinOp>([&](auto) {
        return unary(op, [](double x) { return std::sin(x); });
      })
      .Case<llm::CosOp>([&](auto) {
        return unary(op, [](double x) { return std::cos(x); });
      })
      .Case<llm::SqrtOp>([&](auto) {
        return unary(op, [](double x) { return std::sqrt(x); });
      })
      .Case<llm::RsqrtOp>([&](auto) {
        return unary(op, [](double x) { return 1.0 / std::sqrt(x); });
      })
      .Case<llm::SiluOp>([&](auto) {
        return unary(op, [](double x) { return x * sigmoid(x); });
      })
      .Case<llm::SigmoidOp>(
          [&](auto) { return unary(op, [](double x) { return sigmoid(x); }); })
      .Case<llm::ReluOp>([&](auto) {
        return unary(op, [](double x) {
          return std::isnan(x) ? x : (x > 0.0 ? x : 0.0);
        });
      })
      .Case<llm::GeluOp>([&](llm::GeluOp g) {
        if (g.getApproximation() == llm::GeluApproximation::tanh)
          return unary(op, [](double x) {
            const double k = std::sqrt(2.0 / M_PI);
            return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
          });
        return unary(op, [](double x) {
          return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
        });
      })
      .Case<llm::SelectOp>([&](auto) -> R {
        const HostTensor &c = in(op, 0), &a = in(op, 1), &b = in(op, 2);
        if (c.shape != a.shape || a.shape != b.shape)
          return opError(op, absl::StrCat("cond ", shapeStr(c.shape),
                                          ", on_true ", shapeStr(a.shape),
                                          " and on_false ", shapeStr(b.shape),
                                          " must have one shape"));
        LLMC_ASSIGN_OR_RETURN(HostTensor out,
                             newTensor(op, resultElementType(op), a.shape));
        for (size_t i = 0; i < out.data.size(); ++i)
          out.data[i] = c.data[i] != 0.0 ? a.data[i] : b.data[i];
        return out;
      })
      .Case<llm::CastOp>([&](auto) -> R {
        const HostTensor &x = in(op, 0);
        Type to = resultElementType(op);
        LLMC_ASSIGN_OR_RETURN(HostTensor out, newTensor(op, to, x.shape));
        auto it = dyn_cast<IntegerType>(to);
        bool floatToInt = isa<FloatType>(x.elementType) && it && it.getWidth() > 1;
        for (size_t i = 0; i < out.data.size(); ++i) {
          double v = x.data[i];
          if (floatToInt) {
            // cvt.rzi: truncate toward zero, saturate, NaN -> 0.
            unsigned w = it.getWidth();
            double hi = std::ldexp(1.0, w - 1) - 1.0, lo = -std::ldexp(1.0, w - 1);
            v = std::isnan(v) ? 0.0 : std::fmin(std::fmax(std::trunc(v), lo), hi);
          }
          out.data[i] = RoundToType(v, to);
        }
        return out;
      })
      .Case<llm::ReshapeOp>([&](auto r) { return reshape(r); })
      .Case<llm::TransposeOp>([&](auto t) { return transpose(t); })
      .Case<llm::SliceOp>([&](auto s) { return slice(s); })
      .Case<llm::PadOp>([&](auto p) { return pad(p); })
      .Case<llm::ConcatOp>([&](auto c) { return concat(c); })
      .Case<llm::GatherOp>([&](auto g) { return gather(g); })
      .Case<llm::IndexPutOp>([&](auto p) { return indexPut(p); })
      .Case<llm::ArgMaxOp>([&](auto a) { return argmax(a); })
      .Case<llm::CumsumOp>([&](auto c) { return cumsum(c); })
      .Case<llm::DropoutMaskOp>([&](auto d) { return dropoutMask(d); })
      .Case<llm::ReduceSumOp>([&](auto r) {
        return reduce(op, r.getDims(), r.getKeepdim(), 0);
      })
      .Case<llm::ReduceMeanOp>([&](auto r) {
        return reduce(op, r.getDims(), r.getKeepdim(), 1);
      })
      .Case<llm::ReduceMaxOp>([&](auto r) {
        return reduce(op, r.getDims(), r.getKeepdim(), 2);
      })
      .Case<llm::ReduceMinOp>([&](auto r) {
        return reduce(op, r.getDims(), r.getKeepdim(), 3);
      })
      .Case<llm::SoftmaxOp>([&](auto s) { return softmax(s); })
      .Case<llm::RMSNormOp>([&](auto n) { return rmsNorm(n); })
      .Case<llm::LayerNormOp>([&](auto n) { return layerNorm(n); })
      .Case<llm::RoPEOp>([&](auto r) { return rope(r); })
      .Case<llm::MatmulOp>([&](auto m) { return matmul(m); })
      .Case<llm::AttentionOp>([&](auto a) { return attention(a); })
      .Case<llm::PagedAttentionOp>([&](auto a) { return pagedAttention(a); })
      .Case<llm::PagedKVAppendOp>([&](auto a) { return pagedKVAppend(a); })
      .Case<llm::VarlenAttentionOp>([&](auto a) { return varlenAttention(a); })
      .Case<llm::AttentionLogSumExpOp>(
          [&](auto a) { return attentionLogSumExp(a); })
      .Case<llm::KVCacheAppendOp>([&](auto k) { return kvCacheAppend(k); })
      .Case<llm::DequantizeWeightOp>(
          [&](auto d) { return dequantizeWeight(d); })
      // Collectives of a group of one rank are the identity.
      .Case<llm::AllReduceOp, llm::AllGatherOp, llm::ReduceScatterOp>(
          [&](auto) -> R { return takeOrCopy(op, 0); })
      .Default([&](Operation *) -> R {
        return absl::UnimplementedError(absl::StrCat(
            opName(op), ": op is not supported by the reference executor"));
      });
}

} // namespace llmc::reference::detail
