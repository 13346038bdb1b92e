//===- RaiseNumericsTest.cpp - decomposed vs raised RMSNorm ---------------===//
//
// llmc-raise (through llmc::PrepareForLowering, as every CUDA lowering runs
// it) turns decomposed RMSNorm chains, as the torch.compile plugin imports
// Hugging Face's LlamaRMSNorm, into llm.rms_norm. Each case is evaluated by
// the reference executor as written and raised, on fresh random inputs, and
// both are compared with RMSNorm computed here in float64 from the same
// inputs (y = x / sqrt(mean(x^2) + eps) * w, Zhang & Sennrich 2019):
//  - f32: raised vs as written <= 1e-6 relative L2 (both compute in f32;
//    the chain rounds each op's result to f32, the raised op once);
//  - bf16/f16: <= 1e-2 (the chain rounds the normalized value to the input
//    type and then the product with the weight, the raised op rounds once:
//    one extra rounding, 2^-9 / 2^-12 relative on average), and the raised
//    result is at least as close to the float64 RMSNorm as the chain's.
//
//===----------------------------------------------------------------------===//

#include "ReferenceTestUtils.h"

#include "LLM/IR/LLMOps.h"
#include "llmc/Compiler/LowerToExecutable.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

using namespace mlir;
using namespace llmc::reference;
using namespace llmc::reference::testing;

namespace {

/// How the chain spells the norm.
enum class Form {
  kHuggingFace,    // pow(x, 2), mean + eps, rsqrt, x * r, w * n
  kSwapped,        // mul(x, x), eps + mean, r * x, n * w
  kOneOverSqrt,    // div(1, sqrt(v)) instead of rsqrt(v)
  kDivideBySqrt,   // x / sqrt(v)
};

const char *formName(Form f) {
  switch (f) {
  case Form::kHuggingFace: return "hf";
  case Form::kSwapped: return "swapped";
  case Form::kOneOverSqrt: return "one_over_sqrt";
  case Form::kDivideBySqrt: return "divide_by_sqrt";
  }
  return "?";
}

std::string shapeStr(const std::vector<int64_t> &shape) {
  std::string s;
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s;
}

/// The decomposed RMSNorm over the last dim of `shape` in element type
/// `elt` ("f32", "bf16", "f16"), math in f32 (casts around it unless f32).
std::string decomposed(const std::vector<int64_t> &shape, const std::string &elt,
                       Form form, double eps) {
  std::vector<int64_t> kshape = shape;
  kshape.back() = 1;
  int64_t h = shape.back();
  std::string t = "tensor<" + shapeStr(shape) + elt + ">";
  std::string tf = "tensor<" + shapeStr(shape) + "f32>";
  std::string kf = "tensor<" + shapeStr(kshape) + "f32>";
  std::string wt = "tensor<" + std::to_string(h) + "x" + elt + ">";
  bool cast = elt != "f32";
  std::ostringstream os;
  os.precision(17);
  os << "func.func @norm(%x: " << t << ", %w: " << wt << ") -> " << t << " {\n";
  os << "  %wb = llm.broadcast %w : " << wt << " to " << t << "\n";
  // Without casts (f32) the chain reads x and the weight multiplies m.
  const std::string xf = cast ? "%xf" : "%x", n = cast ? "%n" : "%m";
  if (cast)
    os << "  %xf = llm.cast %x : " << t << " to " << tf << "\n";
  if (form == Form::kHuggingFace) {
    os << "  %two = llm.constant dense<2.0> : tensor<f32>\n"
       << "  %twob = llm.broadcast %two : tensor<f32> to " << tf << "\n"
       << "  %sq = llm.pow " << xf << ", %twob : " << tf << "\n";
  } else {
    os << "  %sq = llm.mul " << xf << ", " << xf << " : " << tf << "\n";
  }
  os << "  %mean = llm.reduce_mean %sq [" << shape.size() - 1 << "] keepdim : "
     << tf << "\n"
     << "  %eps = llm.constant dense<" << std::scientific << eps
     << std::defaultfloat << "> : tensor<f32>\n"
     << "  %epsb = llm.broadcast %eps : tensor<f32> to " << kf << "\n";
  if (form == Form::kSwapped)
    os << "  %v = llm.add %epsb, %mean : " << kf << "\n";
  else
    os << "  %v = llm.add %mean, %epsb : " << kf << "\n";
  switch (form) {
  case Form::kHuggingFace:
  case Form::kSwapped:
    os << "  %r = llm.rsqrt %v : " << kf << "\n";
    break;
  case Form::kOneOverSqrt:
    os << "  %s = llm.sqrt %v : " << kf << "\n"
       << "  %one = llm.constant dense<1.0> : " << kf << "\n"
       << "  %r = llm.div %one, %s : " << kf << "\n";
    break;
  case Form::kDivideBySqrt:
    os << "  %r = llm.sqrt %v : " << kf << "\n";
    break;
  }
  os << "  %rb = llm.broadcast %r : " << kf << " to " << tf << "\n";
  if (form == Form::kDivideBySqrt)
    os << "  %m = llm.div " << xf << ", %rb : " << tf << "\n";
  else if (form == Form::kSwapped)
    os << "  %m = llm.mul %rb, " << xf << " : " << tf << "\n";
  else
    os << "  %m = llm.mul " << xf << ", %rb : " << tf << "\n";
  if (cast)
    os << "  %n = llm.cast %m : " << tf << " to " << t << "\n";
  if (form == Form::kSwapped)
    os << "  %y = llm.mul " << n << ", %wb : " << t << "\n";
  else
    os << "  %y = llm.mul %wb, " << n << " : " << t << "\n";
  os << "  return %y : " << t << "\n}\n";
  return os.str();
}

class RaiseNumericsTest : public ReferenceTest {
protected:
  Type elementType(const std::string &elt) {
    if (elt == "bf16")
      return bf16();
    if (elt == "f16")
      return f16();
    return f32();
  }

  /// RMSNorm in float64 from the (already rounded) inputs; `eps` as the f32
  /// constant of the chain holds it.
  HostTensor exact(const HostTensor &x, const HostTensor &w, double eps) {
    HostTensor y = x;
    int64_t h = x.shape.back();
    double e = static_cast<float>(eps);
    for (int64_t row = 0; row < x.numElements() / h; ++row) {
      double ss = 0;
      for (int64_t i = 0; i < h; ++i)
        ss += x.data[row * h + i] * x.data[row * h + i];
      double inv = 1.0 / std::sqrt(ss / h + e);
      for (int64_t i = 0; i < h; ++i)
        y.data[row * h + i] = x.data[row * h + i] * inv * w.data[i];
    }
    return y;
  }

  void check(const std::vector<int64_t> &shape, const std::string &elt,
             Form form, double eps) {
    std::string src = decomposed(shape, elt, form, eps);
    SCOPED_TRACE(src);
    Prepared p;
    ASSERT_NO_FATAL_FAILURE(parseAndPrepare(src, p));
    func::FuncOp fnBefore = p.fnBefore, fnAfter = p.fnAfter;
    // The raise happened: one llm.rms_norm and nothing else is left.
    int norms = countOps(fnAfter, [](Operation *op) { return isa<llmc::llm::RMSNormOp>(op); });
    int others = countOps(fnAfter, [](Operation *op) {
      return !isa<llmc::llm::RMSNormOp>(op) && op->getDialect() &&
             op->getDialect()->getNamespace() == "llm";
    });
    ASSERT_EQ(norms, 1) << print(*p.after);
    ASSERT_EQ(others, 0) << print(*p.after);

    const bool f32 = elt == "f32";
    const double tolerance = f32 ? 1e-6 : 1e-2;
    Type et = elementType(elt);
    for (int draw = 0; draw < 2; ++draw) {
      // x: rows of very different magnitudes (the norm is scale-invariant
      // up to eps); w: 1 + N(0, 0.1), as trained norm weights look.
      HostTensor x = rand(et, shape);
      int64_t h = shape.back();
      std::uniform_real_distribution<double> logScale(-2.0, 2.0);
      for (int64_t row = 0; row < x.numElements() / h; ++row) {
        double scale = std::pow(10.0, logScale(rng));
        for (int64_t i = 0; i < h; ++i)
          x.data[row * h + i] = RoundToType(x.data[row * h + i] * scale, et);
      }
      HostTensor w = rand(et, {h}, 0.1);
      for (double &v : w.data)
        v = RoundToType(1.0 + v, et);

      auto asWritten = Evaluate(fnBefore, {x, w});
      auto raised = Evaluate(fnAfter, {x, w});
      ASSERT_TRUE(asWritten.ok()) << asWritten.status();
      ASSERT_TRUE(raised.ok()) << raised.status();
      const HostTensor &a = (*asWritten)[0], &r = (*raised)[0];
      ASSERT_TRUE(allFinite(a) && allFinite(r));
      HostTensor want = exact(x, w, eps);
      double diff = RelativeError(r, a);
      double errRaised = RelativeError(r, want);
      double errWritten = RelativeError(a, want);
      EXPECT_LE(diff, tolerance) << "raised vs as written, draw " << draw;
      EXPECT_LE(errRaised, tolerance) << "raised vs float64, draw " << draw;
      if (!f32 && x.numElements() >= 256) {
        // One rounding instead of two: over enough elements, never worse
        // than the chain.
        EXPECT_LE(errRaised, errWritten) << "draw " << draw;
        // And it did change something (the comparison is not vacuous).
        EXPECT_GT(diff, 0.0) << "draw " << draw;
      }
      if (std::getenv("LLMC_PRINT_ERRORS"))
        std::printf("%s %s %s: raised-vs-written %.3g, raised %.3g, written "
                    "%.3g (vs float64)\n",
                    formName(form), elt.c_str(), shapeStr(shape).c_str(), diff,
                    errRaised, errWritten);
    }
  }
};

TEST_F(RaiseNumericsTest, HuggingFaceForm) {
  for (const char *elt : {"f32", "bf16", "f16"})
    for (auto shape : std::vector<std::vector<int64_t>>{
             {1, 16, 128}, {2, 7, 33}, {3, 4096}, {5, 1}})
      check(shape, elt, Form::kHuggingFace, 1e-6);
}

TEST_F(RaiseNumericsTest, OtherSpellings) {
  for (Form form : {Form::kSwapped, Form::kOneOverSqrt, Form::kDivideBySqrt})
    for (const char *elt : {"f32", "bf16"})
      for (auto shape :
           std::vector<std::vector<int64_t>>{{1, 16, 128}, {7, 33}})
        check(shape, elt, form, 1e-5);
}

/// A large eps: with rows scaled by 10^U(-2, 2), mean(x^2) spans 1e-4..1e4,
/// so eps dominates some rows and must be carried over exactly.
TEST_F(RaiseNumericsTest, LargeEps) {
  for (const char *elt : {"f32", "bf16"})
    check({8, 64}, elt, Form::kHuggingFace, 1e-2);
}

} // namespace

namespace {

/// gpt-fast's RMSNorm, as the plugin imports it: the weight (bf16) cast to
/// f32 and multiplied in f32, the product cast back. llmc-raise gives one
/// bf16 rms_norm with the f32 weight (the casts around the norm folded):
/// within the bf16 bound of float64 and of the graph as written.
TEST_F(RaiseNumericsTest, GptFastFormFoldsTheCasts) {
  const std::string src = R"(
func.func @norm(%x: tensor<3x1x256xbf16>, %w: tensor<256xbf16>) -> tensor<3x1x256xbf16> {
  %1 = llm.cast %x : tensor<3x1x256xbf16> to tensor<3x1x256xf32>
  %2 = llm.constant dense<2.0> : tensor<f32>
  %3 = llm.broadcast %2 : tensor<f32> to tensor<3x1x256xf32>
  %4 = llm.pow %1, %3 : tensor<3x1x256xf32>
  %5 = llm.reduce_mean %4 [2] keepdim : tensor<3x1x256xf32>
  %6 = llm.constant dense<1.0e-05> : tensor<f32>
  %7 = llm.broadcast %6 : tensor<f32> to tensor<3x1x1xf32>
  %8 = llm.add %5, %7 : tensor<3x1x1xf32>
  %9 = llm.rsqrt %8 : tensor<3x1x1xf32>
  %10 = llm.broadcast %9 : tensor<3x1x1xf32> to tensor<3x1x256xf32>
  %11 = llm.mul %1, %10 : tensor<3x1x256xf32>
  %12 = llm.cast %w : tensor<256xbf16> to tensor<256xf32>
  %13 = llm.broadcast %12 : tensor<256xf32> to tensor<3x1x256xf32>
  %14 = llm.mul %11, %13 : tensor<3x1x256xf32>
  %15 = llm.cast %14 : tensor<3x1x256xf32> to tensor<3x1x256xbf16>
  return %15 : tensor<3x1x256xbf16>
})";
  Prepared p;
  ASSERT_NO_FATAL_FAILURE(parseAndPrepare(src, p));
  int bf16Norms = countOps(p.fnAfter, [](Operation *op) {
    auto n = dyn_cast<llmc::llm::RMSNormOp>(op);
    return n && n.getInput().getType().getElementType().isBF16();
  });
  int casts = countOps(p.fnAfter, [](Operation *op) { return isa<llmc::llm::CastOp>(op); });
  ASSERT_EQ(bf16Norms, 1) << print(*p.after);
  ASSERT_EQ(casts, 1) << print(*p.after); // the weight's, to f32
  for (int draw = 0; draw < 2; ++draw) {
    HostTensor x = rand(bf16(), {3, 1, 256});
    for (double &v : x.data)
      v = RoundToType(10.0 * v, bf16()); // rms ~10: the norm changes x
    HostTensor w = rand(bf16(), {256}, 0.1);
    for (double &v : w.data)
      v = RoundToType(1.0 + v, bf16());
    auto asWritten = Evaluate(p.fnBefore, {x, w});
    auto raised = Evaluate(p.fnAfter, {x, w});
    ASSERT_TRUE(asWritten.ok()) << asWritten.status();
    ASSERT_TRUE(raised.ok()) << raised.status();
    const HostTensor &a = (*asWritten)[0], &r = (*raised)[0];
    ASSERT_TRUE(allFinite(a) && allFinite(r));
    HostTensor want = exact(x, w, 1e-5);
    EXPECT_LE(RelativeError(r, a), 1e-2) << "draw " << draw;
    EXPECT_LE(RelativeError(r, want), 1e-2) << "draw " << draw;
    EXPECT_GT(RelativeError(r, x), 0.1) << "draw " << draw; // normalized, not x
  }
}

/// A transpose sunk into the elementwise ops it reads (the backward's
/// `transpose(add(tangent, transpose(dk)))` around attention, with an odd
/// head count and sequence, and a chain behind it): afterwards only the
/// inputs %t and %x are transposed (views the fused kernel reads strided), no
/// computed value, and the results are the same values, element for element
/// (a permutation of the same arithmetic), in f32 and bf16.
TEST_F(RaiseNumericsTest, SunkTransposeIsExact) {
  for (const char *elt : {"f32", "bf16"}) {
    std::string t = std::string("tensor<2x3x5x16x") + elt + ">";
    std::string u = std::string("tensor<2x5x3x16x") + elt + ">";
    const std::string src = "func.func @f(%t: " + t + ", %d: " + u + ", %x: " + t + ") -> " + u +
                            " {\n"
                            "  %dt = llm.transpose %d [0, 2, 1, 3] : " + u + "\n"
                            "  %a = llm.add %t, %dt : " + t + "\n"
                            "  %e = llm.exp %x : " + t + "\n"
                            "  %m = llm.mul %a, %e : " + t + "\n"
                            "  %r = llm.transpose %m [0, 2, 1, 3] : " + t + "\n"
                            "  return %r : " + u + "\n}\n";
    SCOPED_TRACE(src);
    Prepared p;
    ASSERT_NO_FATAL_FAILURE(parseAndPrepare(src, p));
    auto transposes = [](func::FuncOp fn) {
      return countOps(fn, [](Operation *op) { return isa<llmc::llm::TransposeOp>(op); });
    };
    ASSERT_EQ(transposes(p.fnBefore), 2);
    ASSERT_EQ(transposes(p.fnAfter), 2) << print(*p.after);  // of %t and %x, none of a result
    Type et = std::string(elt) == "bf16" ? bf16() : f32();
    for (int draw = 0; draw < 2; ++draw) {
      HostTensor tv = rand(et, {2, 3, 5, 16}), dv = rand(et, {2, 5, 3, 16}),
                 xv = rand(et, {2, 3, 5, 16});
      auto asWritten = Evaluate(p.fnBefore, {tv, dv, xv});
      auto sunk = Evaluate(p.fnAfter, {tv, dv, xv});
      ASSERT_TRUE(asWritten.ok()) << asWritten.status();
      ASSERT_TRUE(sunk.ok()) << sunk.status();
      const HostTensor &a = (*asWritten)[0], &r = (*sunk)[0];
      ASSERT_TRUE(allFinite(a) && allFinite(r));
      ASSERT_EQ(a.data.size(), r.data.size());
      for (size_t i = 0; i < a.data.size(); ++i)
        ASSERT_EQ(a.data[i], r.data[i]) << elt << " element " << i;
    }
  }
}

} // namespace
