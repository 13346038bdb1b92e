//===- RaiseRoPENumericsTest.cpp - decomposed vs raised HF RoPE -----------===//
//
// llmc-raise (through llmc::PrepareForLowering, as every CUDA lowering runs
// it) turns Hugging Face's apply_rotary_pos_emb as the torch.compile plugin
// imports it (q [B, H, S, D] = transpose of [B, S, H, D]; q*cos +
// rotate_half(q)*sin, rotate_half's inner concat spelled transpose / outer
// concat / transpose; cos/sin [Bt, S, D] cast to q's type and unsqueezed at
// the head dimension) into the table form of llm.rope. Each case is
// evaluated by the reference executor as written and raised, on fresh random
// inputs (tables from random angles, so every entry differs), and both are
// compared with the rotation computed here in float64 from the same rounded
// inputs (Su et al. 2021; HF rotate_half pairs i and i + D/2):
//  - f32: raised vs as written <= 1e-6 relative L2;
//  - bf16: <= 1e-2 (the chain rounds q*cos, rot*sin and their sum, the raised
//    op once), and the raised result is at least as close to float64.
// The same for the backward AOTAutograd writes for it (G*cos +
// rotate_half^T(G*sin), the transposed rotation spelled as two
// slice_scatter's into zeros), raised to llm.rope with the sine table's
// halves swapped and negated.
//
//===----------------------------------------------------------------------===//

#include "ReferenceTestUtils.h"

#include "LLM/IR/LLMOps.h"
#include "llmc/Compiler/LowerToExecutable.h"

#include <cmath>
#include <sstream>
#include <tuple>
#include <utility>

using namespace mlir;
using namespace llmc::reference;
using namespace llmc::reference::testing;

namespace {

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t v : d)
    s += std::to_string(v) + "x";
  return s;
}

/// %cosb and %sinb: the f32 [Bt, S, D] tables %cos and %sin in `elt`
/// (cast, or reshaped when f32), unsqueezed at the head dimension and
/// broadcast to [B, H, S, D], as the plugin imports HF's cos/sin.
void broadcastTables(std::ostringstream &os, int64_t b, int64_t s, int64_t h, int64_t d,
                     int64_t bt, const std::string &elt) {
  std::string q = "tensor<" + dims({b, h, s, d}) + elt + ">";
  std::string tf = "tensor<" + dims({bt, s, d}) + "f32>";
  std::string te = "tensor<" + dims({bt, s, d}) + elt + ">";
  std::string t4 = "tensor<" + dims({bt, 1, s, d}) + elt + ">";
  for (const char *t : {"cos", "sin"}) {
    if (elt == "f32")
      os << "  %" << t << "e = llm.reshape %" << t << " : " << tf << " to " << te << "\n";
    else
      os << "  %" << t << "e = llm.cast %" << t << " : " << tf << " to " << te << "\n";
    os << "  %" << t << "4 = llm.reshape %" << t << "e : " << te << " to " << t4 << "\n"
       << "  %" << t << "b = llm.broadcast %" << t << "4 : " << t4 << " to " << q << "\n";
  }
}

/// The plugin's import of HF apply_rotary_pos_emb for q of [B, S, H, D]
/// (argument %y, transposed to [B, H, S, D] as HF does), tables [Bt, S, D]
/// in f32, math in `elt`.
std::string decomposed(int64_t b, int64_t s, int64_t h, int64_t d, int64_t bt,
                       const std::string &elt) {
  const int64_t half = d / 2;
  std::string y = "tensor<" + dims({b, s, h, d}) + elt + ">";
  std::string q = "tensor<" + dims({b, h, s, d}) + elt + ">";
  std::string qh = "tensor<" + dims({b, h, s, half}) + elt + ">";
  std::string th = "tensor<" + dims({half, b, h, s}) + elt + ">";
  std::string tc = "tensor<" + dims({d, b, h, s}) + elt + ">";
  std::string tf = "tensor<" + dims({bt, s, d}) + "f32>";
  std::ostringstream os;
  os << "func.func @rope(%y: " << y << ", %cos: " << tf << ", %sin: " << tf
     << ") -> " << q << " {\n"
     << "  %q = llm.transpose %y [0, 2, 1, 3] : " << y << "\n";
  broadcastTables(os, b, s, h, d, bt, elt);
  os << "  %qc = llm.mul %q, %cosb : " << q << "\n"
     << "  %hi = llm.slice %q [0, 0, 0, " << half << "] to [-1, -1, -1, " << d
     << "] step [1, 1, 1, 1] : " << q << "\n"
     << "  %nhi = llm.neg %hi : " << qh << "\n"
     << "  %t0 = llm.transpose %nhi [3, 0, 1, 2] : " << qh << "\n"
     << "  %lo = llm.slice %q [0, 0, 0, 0] to [-1, -1, -1, " << half
     << "] step [1, 1, 1, 1] : " << q << "\n"
     << "  %t1 = llm.transpose %lo [3, 0, 1, 2] : " << qh << "\n"
     << "  %cat = llm.concat %t0, %t1 dim = 0 : " << th << ", " << th << "\n"
     << "  %rot = llm.transpose %cat [1, 2, 3, 0] : " << tc << "\n"
     << "  %rs = llm.mul %rot, %sinb : " << q << "\n"
     << "  %out = llm.add %qc, %rs : " << q << "\n"
     << "  return %out : " << q << "\n}\n";
  return os.str();
}

/// AOTAutograd's backward of the same function for the gradient %g of
/// q_embed [B, H, S, D]: g*cos + rotate_half^T(g*sin), rotate_half^T(m) =
/// slice_scatter(0, -m[..., :D/2], D/2..D) + slice_scatter(0, m[..., D/2:],
/// 0..D/2), each slice_scatter a zero-filled half concatenated with the
/// other in the plugin's transpose / outer concat / transpose spelling.
/// With `fromBshd` the gradient arrives as %y [B, S, H, D] and %g is its
/// head transpose (the branch that runs llm.rope on %y itself).
std::string decomposedBackward(int64_t b, int64_t s, int64_t h, int64_t d, int64_t bt,
                               const std::string &elt, bool fromBshd = false) {
  const int64_t half = d / 2;
  std::string q = "tensor<" + dims({b, h, s, d}) + elt + ">";
  std::string qh = "tensor<" + dims({b, h, s, half}) + elt + ">";
  std::string th = "tensor<" + dims({half, b, h, s}) + elt + ">";
  std::string tc = "tensor<" + dims({d, b, h, s}) + elt + ">";
  std::string tf = "tensor<" + dims({bt, s, d}) + "f32>";
  auto slice = [&](const std::string &v, int64_t lo, int64_t hi) {
    return "llm.slice " + v + " [0, 0, 0, " + std::to_string(lo) + "] to [-1, -1, -1, " +
           std::to_string(hi) + "] step [1, 1, 1, 1] : " + q;
  };
  std::string y = "tensor<" + dims({b, s, h, d}) + elt + ">";
  std::ostringstream os;
  os << "func.func @rope_backward(%" << (fromBshd ? "y: " + y : "g: " + q) << ", %cos: " << tf
     << ", %sin: " << tf << ") -> " << q << " {\n";
  if (fromBshd)
    os << "  %g = llm.transpose %y [0, 2, 1, 3] : " << y << "\n";
  broadcastTables(os, b, s, h, d, bt, elt);
  os << "  %m = llm.mul %g, %sinb : " << q << "\n"
     << "  %z0 = llm.constant dense<0.0> : " << q << "\n"
     << "  %z0lo = " << slice("%z0", 0, half) << "\n"
     << "  %tz0 = llm.transpose %z0lo [3, 0, 1, 2] : " << qh << "\n"
     << "  %mlo = " << slice("%m", 0, half) << "\n"
     << "  %nlo = llm.neg %mlo : " << qh << "\n"
     << "  %tn = llm.transpose %nlo [3, 0, 1, 2] : " << qh << "\n"
     << "  %cata = llm.concat %tz0, %tn dim = 0 : " << th << ", " << th << "\n"
     << "  %a = llm.transpose %cata [1, 2, 3, 0] : " << tc << "\n"
     << "  %mhi = " << slice("%m", half, d) << "\n"
     << "  %tm = llm.transpose %mhi [3, 0, 1, 2] : " << qh << "\n"
     << "  %z1 = llm.constant dense<0.0> : " << q << "\n"
     << "  %z1hi = " << slice("%z1", half, d) << "\n"
     << "  %tz1 = llm.transpose %z1hi [3, 0, 1, 2] : " << qh << "\n"
     << "  %catb = llm.concat %tm, %tz1 dim = 0 : " << th << ", " << th << "\n"
     << "  %bb = llm.transpose %catb [1, 2, 3, 0] : " << tc << "\n"
     << "  %rot = llm.add %a, %bb : " << q << "\n"
     << "  %gc = llm.mul %g, %cosb : " << q << "\n"
     << "  %out = llm.add %rot, %gc : " << q << "\n"
     << "  return %out : " << q << "\n}\n";
  return os.str();
}

class RaiseRoPENumericsTest : public ReferenceTest {
protected:
  /// cos and sin of fresh random angles in [-pi, pi], f32 [Bt, S, D]:
  /// unit-circle pairs, every entry distinct.
  std::pair<HostTensor, HostTensor> randomTables(int64_t bt, int64_t s, int64_t d) {
    HostTensor cosT = rand(f32(), {bt, s, d}), sinT = cosT;
    std::uniform_real_distribution<double> angle(-M_PI, M_PI);
    for (size_t i = 0; i < cosT.data.size(); ++i) {
      double a = angle(rng);
      cosT.data[i] = RoundToType(std::cos(a), f32());
      sinT.data[i] = RoundToType(std::sin(a), f32());
    }
    return {cosT, sinT};
  }

  /// Evaluates `before` and `after` on `inputs` and checks the raised
  /// result against the one as written and against float64 (`fillWant`
  /// writes it into a tensor shaped like the result): within `tolerance`,
  /// and for bf16 at least as close to float64 and not equal to the written
  /// one (the check is not vacuous).
  template <typename WantFn>
  void expectRaisedMatches(func::FuncOp before, func::FuncOp after,
                           const std::vector<HostTensor> &inputs, double tolerance,
                           bool lowPrecision, int draw, WantFn fillWant) {
    auto asWritten = Evaluate(before, inputs);
    auto raised = Evaluate(after, inputs);
    ASSERT_TRUE(asWritten.ok()) << asWritten.status();
    ASSERT_TRUE(raised.ok()) << raised.status();
    const HostTensor &a = (*asWritten)[0], &r = (*raised)[0];
    ASSERT_TRUE(allFinite(a) && allFinite(r));
    HostTensor want = a;
    fillWant(want);
    double diff = RelativeError(r, a);
    double errRaised = RelativeError(r, want);
    double errWritten = RelativeError(a, want);
    EXPECT_LE(diff, tolerance) << "raised vs as written, draw " << draw;
    EXPECT_LE(errRaised, tolerance) << "raised vs float64, draw " << draw;
    EXPECT_LE(errWritten, tolerance) << "as written vs float64, draw " << draw;
    if (lowPrecision) {
      EXPECT_LE(errRaised, errWritten) << "draw " << draw;
      EXPECT_GT(diff, 0.0) << "draw " << draw; // not vacuous
    }
  }

  void check(int64_t b, int64_t s, int64_t h, int64_t d, int64_t bt,
             const std::string &elt) {
    std::string src = decomposed(b, s, h, d, bt, elt);
    SCOPED_TRACE(src);
    Prepared p;
    ASSERT_NO_FATAL_FAILURE(parseAndPrepare(src, p));
    func::FuncOp fnBefore = p.fnBefore, fnAfter = p.fnAfter;
    // Raised: one llm.rope; no slice, concat, neg, mul or add is left.
    int ropes = countOps(fnAfter, [](Operation *op) { return isa<llmc::llm::RoPEOp>(op); });
    int leftovers = countOps(fnAfter, [](Operation *op) {
      return isa<llmc::llm::SliceOp, llmc::llm::ConcatOp, llmc::llm::NegOp, llmc::llm::MulOp,
                 llmc::llm::AddOp>(op);
    });
    ASSERT_EQ(ropes, 1) << print(*p.after);
    ASSERT_EQ(leftovers, 0) << print(*p.after);

    Type et = elt == "bf16" ? bf16() : f32();
    const double tolerance = elt == "f32" ? 1e-6 : 1e-2;
    for (int draw = 0; draw < 2; ++draw) {
      HostTensor y = rand(et, {b, s, h, d});
      HostTensor cosT, sinT;
      std::tie(cosT, sinT) = randomTables(bt, s, d);
      // float64 from the inputs as the graph sees them (tables rounded to
      // the element type), result [B, H, S, D].
      expectRaisedMatches(fnBefore, fnAfter, {y, cosT, sinT}, tolerance, elt != "f32", draw,
                          [&](HostTensor &want) {
        for (int64_t ib = 0; ib < b; ++ib)
          for (int64_t ih = 0; ih < h; ++ih)
            for (int64_t is = 0; is < s; ++is)
              for (int64_t i = 0; i < d; ++i) {
                auto yv = [&](int64_t j) { return y.data[((ib * s + is) * h + ih) * d + j]; };
                int64_t tb = bt == 1 ? 0 : ib;
                double c = RoundToType(cosT.data[(tb * s + is) * d + i], et);
                double sn = RoundToType(sinT.data[(tb * s + is) * d + i], et);
                double rot = i < d / 2 ? -yv(i + d / 2) : yv(i - d / 2);
                want.data[((ib * h + ih) * s + is) * d + i] = yv(i) * c + rot * sn;
              }
      });
    }
  }

  /// The backward: one llm.rope, no op left over G-sized tensors but
  /// transposes (the table's half swap is on [Bt, S, D]); numerics as above
  /// against dq[i] = g[i] c[i] + g[i + D/2] s[i + D/2] (i < D/2),
  /// g[i] c[i] - g[i - D/2] s[i - D/2] (i >= D/2) in float64.
  void checkBackward(int64_t b, int64_t s, int64_t h, int64_t d, int64_t bt,
                     const std::string &elt, bool fromBshd = false) {
    std::string src = decomposedBackward(b, s, h, d, bt, elt, fromBshd);
    SCOPED_TRACE(src);
    Prepared p;
    ASSERT_NO_FATAL_FAILURE(parseAndPrepare(src, p));
    const int64_t numel = b * h * s * d;
    int ropes = countOps(p.fnAfter, [](Operation *op) { return isa<llmc::llm::RoPEOp>(op); });
    int leftovers = countOps(p.fnAfter, [&](Operation *op) {
      if (isa<llmc::llm::RoPEOp, llmc::llm::TransposeOp>(op) || op->getNumResults() != 1)
        return false;
      auto t = dyn_cast<RankedTensorType>(op->getResult(0).getType());
      return t && t.hasStaticShape() && t.getNumElements() >= numel;
    });
    ASSERT_EQ(ropes, 1) << print(*p.after);
    ASSERT_EQ(leftovers, 0) << print(*p.after);

    Type et = elt == "bf16" ? bf16() : f32();
    const double tolerance = elt == "f32" ? 1e-6 : 1e-2;
    for (int draw = 0; draw < 2; ++draw) {
      // The gradient as the function takes it ([B, S, H, D] when fromBshd)
      // and as [B, H, S, D] for the float64 result below.
      HostTensor arg = fromBshd ? rand(et, {b, s, h, d}) : rand(et, {b, h, s, d});
      HostTensor g = rand(et, {b, h, s, d});
      for (int64_t ib = 0; ib < b; ++ib)
        for (int64_t ih = 0; ih < h; ++ih)
          for (int64_t is = 0; is < s; ++is)
            for (int64_t i = 0; i < d; ++i)
              g.data[((ib * h + ih) * s + is) * d + i] =
                  fromBshd ? arg.data[((ib * s + is) * h + ih) * d + i]
                           : arg.data[((ib * h + ih) * s + is) * d + i];
      HostTensor cosT, sinT;
      std::tie(cosT, sinT) = randomTables(bt, s, d);
      expectRaisedMatches(p.fnBefore, p.fnAfter, {arg, cosT, sinT}, tolerance, elt != "f32",
                          draw, [&](HostTensor &want) {
        for (int64_t ib = 0; ib < b; ++ib)
          for (int64_t ih = 0; ih < h; ++ih)
            for (int64_t is = 0; is < s; ++is)
              for (int64_t i = 0; i < d; ++i) {
                const int64_t row = ((ib * h + ih) * s + is) * d;
                const int64_t tab = ((bt == 1 ? 0 : ib) * s + is) * d;
                auto c = [&](int64_t j) { return RoundToType(cosT.data[tab + j], et); };
                auto sn = [&](int64_t j) { return RoundToType(sinT.data[tab + j], et); };
                const double gi = g.data[row + i];
                want.data[row + i] =
                    i < d / 2 ? gi * c(i) + g.data[row + i + d / 2] * sn(i + d / 2)
                              : gi * c(i) - g.data[row + i - d / 2] * sn(i - d / 2);
              }
      });
    }
  }
};

TEST_F(RaiseRoPENumericsTest, HuggingFaceForm) {
  for (const char *elt : {"f32", "bf16"}) {
    check(2, 7, 3, 16, 1, elt);   // tables shared over the batch
    check(2, 5, 4, 64, 2, elt);   // per-batch tables (packed positions)
    check(1, 33, 2, 128, 1, elt); // LLaMA head dim
  }
}

// The backward of HF RoPE: the gradient with respect to q of q*cos +
// rotate_half(q)*sin, for every table shape of the forward cases.
TEST_F(RaiseRoPENumericsTest, HuggingFaceBackward) {
  for (const char *elt : {"f32", "bf16"}) {
    checkBackward(2, 7, 3, 16, 1, elt);
    checkBackward(2, 5, 4, 64, 2, elt);
    checkBackward(1, 33, 2, 128, 1, elt);
    checkBackward(2, 5, 3, 16, 1, elt, /*fromBshd=*/true);
  }
}

} // namespace
