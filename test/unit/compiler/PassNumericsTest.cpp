//===- PassNumericsTest.cpp - reference(before) vs reference(after pipeline) ===//
//
// Every example small enough for the reference executor, and random chains of
// ops over awkward shapes (1, 7, 33 and a vocab-like 50257), are evaluated on
// fresh random inputs before and after `llmc-pipeline` with each precision
// policy. Errors are relative L2 (RelativeError) per output:
//  - fp32: 1e-5 (the pipeline only regroups, pads with zeros and slices; the
//    reference computes in float64 and rounds once per op, so this is exact);
//  - bf16/fp16: 2e-2 (GEMM/attention operands rounded to 8/11 significant
//    bits, fp32 accumulation);
//  - fp8 (e4m3, per-tensor current scaling): 0.125 = 2u with u = 2^-4 the
//    unit roundoff of e4m3's 3 mantissa bits. Each GEMM operand element
//    carries a relative rounding error of at most u (RMS about u/sqrt(3)
//    ~ 0.036, since values are scaled into e4m3's normal range by amax/448),
//    so one GEMM's output has a relative L2 error of about
//    sqrt(2) * u/sqrt(3) ~ 0.051, plus the bf16 output rounding (2^-9). A
//    block chains GEMMs whose errors add in quadrature (and partly cancel on
//    the residual path), which stays below 2u for the depth of our examples.
//
//===----------------------------------------------------------------------===//

#include "../ExamplePath.h"
#include "ReferenceTestUtils.h"

#include "LLM/IR/LLMOps.h"
#include "LLM/Transforms/Passes.h"
#include "llmc/InitAllPasses.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

using namespace mlir;
using namespace llmc::reference;
using namespace llmc::reference::testing;

namespace {

struct Policy {
  const char *name;
  double tolerance;
};
constexpr Policy kPolicies[] = {
    {"fp32", 1e-5}, {"bf16", 2e-2}, {"fp16", 2e-2}, {"fp8", 0.125}};

class PassNumericsTest : public ReferenceTest {
protected:
  PassNumericsTest() {
    static bool registered = [] {
      llmc::registerAllPasses();
      return true;
    }();
    (void)registered;
  }

  /// Parses `src`, optionally runs `pipeline` on it; null on failure.
  OwningOpRef<ModuleOp> parseAndRun(const std::string &src,
                                    const std::string &pipeline) {
    OwningOpRef<ModuleOp> m = parseSourceString<ModuleOp>(src, &ctx);
    if (!m) {
      ADD_FAILURE() << "cannot parse:\n" << src;
      return nullptr;
    }
    if (pipeline.empty())
      return m;
    PassManager pm(&ctx);
    std::string err;
    llvm::raw_string_ostream es(err);
    if (failed(parsePassPipeline(pipeline, pm, es))) {
      ADD_FAILURE() << "bad pipeline '" << pipeline << "': " << err;
      return nullptr;
    }
    if (failed(pm.run(*m))) {
      ADD_FAILURE() << "pipeline '" << pipeline << "' failed on:\n" << src;
      return nullptr;
    }
    return m;
  }

  /// `after` (an fp8 HYBRID pipeline of `before`) against `before` on the
  /// reference executor, `draws` fresh random inputs: every result's
  /// relative L2 error is within u4 + u5 = 0.1875 (see
  /// Fp8HybridBackwardStaysWithinTheE5M2Bound) and above 1e-3 (the GEMMs
  /// really ran in fp8: without it the pipeline is exact to 1e-5).
  /// LLMC_PRINT_ERRORS=1 prints each error under `label`.
  void expectHybridFp8Errors(ModuleOp before, ModuleOp after, int draws, const char *label) {
    const double bound = 0.125 + 0.0625;
    for (int draw = 0; draw < draws; ++draw) {
      std::vector<HostTensor> inputs = inputsFor(firstFunc(before), 1);
      auto ref = Evaluate(firstFunc(before), inputs);
      ASSERT_TRUE(ref.ok()) << ref.status();
      auto got = Evaluate(firstFunc(after), inputs);
      ASSERT_TRUE(got.ok()) << got.status() << "\n" << print(after);
      ASSERT_EQ(got->size(), ref->size());
      for (size_t r = 0; r < ref->size(); ++r) {
        double err = RelativeError((*got)[r], (*ref)[r]);
        EXPECT_LE(err, bound) << label << ", result " << r << ", draw " << draw;
        EXPECT_GT(err, 1e-3) << label << ", result " << r << ", draw " << draw;
        if (std::getenv("LLMC_PRINT_ERRORS"))
          std::printf("%s, result %zu: relative error %.3g (bound %g)\n", label, r, err, bound);
      }
    }
  }

  /// Random inputs: float activations N(0, 1), float matrices N(0, 0.1),
  /// rank-1 floats 1 + N(0, 0.1) (norm weights); integer arguments are token
  /// ids in [0, vocab) (first) and positions 0..n-1 (second).
  std::vector<HostTensor> inputsFor(func::FuncOp fn, int64_t vocab) {
    std::vector<HostTensor> inputs;
    int intArgs = 0;
    for (auto [i, type] : llvm::enumerate(fn.getArgumentTypes())) {
      auto rt = cast<RankedTensorType>(type);
      std::vector<int64_t> shape(rt.getShape().begin(), rt.getShape().end());
      Type et = rt.getElementType();
      if (isa<IntegerType>(et)) {
        HostTensor t{et, shape, {}};
        int64_t n = t.numElements();
        for (int64_t k = 0; k < n; ++k)
          t.data.push_back(intArgs == 0
                               ? static_cast<double>(rng() % vocab)
                               : static_cast<double>(k % shape.back()));
        ++intArgs;
        inputs.push_back(std::move(t));
        continue;
      }
      bool param = fn.getArgAttr(i, "test.param") != nullptr ||
                   (i > 0 && shape.size() == 2);
      HostTensor t = RandomTensor(et, shape, rng, param ? 0.1 : 1.0);
      if (shape.size() == 1)
        for (double &v : t.data)
          v = RoundToType(1.0 + v, et);
      inputs.push_back(std::move(t));
    }
    return inputs;
  }

  /// reference(src) vs reference(llmc-pipeline{precision=p}(src)) for every
  /// policy, on two fresh input draws each.
  void checkAllPolicies(const std::string &src, int64_t vocab,
                        const std::string &what) {
    OwningOpRef<ModuleOp> before = parseAndRun(src, "");
    ASSERT_TRUE(before);
    for (const Policy &p : kPolicies) {
      std::string pipeline =
          std::string("llmc-pipeline{form-kernels=1 pad-all=1 precision=") + p.name + "}";
      OwningOpRef<ModuleOp> after = parseAndRun(src, pipeline);
      ASSERT_TRUE(after) << what;
      func::FuncOp fnAfter = firstFunc(*after);
      double worst = 0;
      ASSERT_TRUE(fnAfter->hasAttr("llm.kernels_formed"))
          << what << ": kernels not formed\n" << print(*after);
      for (int draw = 0; draw < 2; ++draw) {
        std::vector<HostTensor> inputs = inputsFor(firstFunc(*before), vocab);
        auto ref = Evaluate(firstFunc(*before), inputs);
        ASSERT_TRUE(ref.ok()) << what << ": " << ref.status();
        auto got = Evaluate(fnAfter, inputs);
        ASSERT_TRUE(got.ok()) << what << " (" << p.name
                              << "): " << got.status() << "\n"
                              << print(*after);
        ASSERT_EQ(got->size(), ref->size());
        for (size_t r = 0; r < ref->size(); ++r) {
          double err = RelativeError((*got)[r], (*ref)[r]);
          worst = std::max(worst, err);
          EXPECT_LE(err, p.tolerance)
              << what << ", policy " << p.name << ", result " << r
              << ", draw " << draw << "\n"
              << (p.tolerance < 1e-3 ? print(*after) : std::string());
        }
      }
      if (std::getenv("LLMC_PRINT_ERRORS"))
        std::printf("%s, %s: max relative error %.3g (tolerance %g)\n",
                    what.c_str(), p.name, worst, p.tolerance);
    }
  }

  std::string loadExample(const std::string &name, int64_t seq) {
    std::string path = llmc::test::ExamplePath(name);
    auto m = parseSourceFile<ModuleOp>(path, &ctx);
    if (!m) {
      ADD_FAILURE() << "cannot parse " << path;
      return "";
    }
    PassManager pm(&ctx);
    std::string spec = "func.func(llmc-specialize-shapes{dims=seq=" +
                       std::to_string(seq) + "})";
    if (failed(parsePassPipeline(spec, pm)) || failed(pm.run(*m))) {
      ADD_FAILURE() << "cannot specialize " << name;
      return "";
    }
    return print(*m);
  }
};

TEST_F(PassNumericsTest, TinyLlamaBlock) {
  for (int64_t seq : {5, 7}) {
    std::string src = loadExample("tiny_llama_block.mlir", seq);
    ASSERT_FALSE(src.empty());
    checkAllPolicies(src, 1, "tiny_llama_block seq=" + std::to_string(seq));
  }
}

TEST_F(PassNumericsTest, TinyGpt2Block) {
  for (int64_t seq : {5, 7}) {
    std::string src = loadExample("tiny_gpt2_block.mlir", seq);
    ASSERT_FALSE(src.empty());
    checkAllPolicies(src, 97, "tiny_gpt2_block seq=" + std::to_string(seq));
  }
}

/// Random chains over [M, K] activations: elementwise ops, norms, softmax and
/// matmuls (nn.Linear layout, optional bias) whose N is drawn from awkward
/// sizes; the last matmul may be a vocab-like 50257-wide LM head.
class RandomGraphs : public PassNumericsTest {
protected:
  std::string generate(std::mt19937_64 &gen) {
    const int64_t sizes[] = {1, 7, 33, 16};
    auto pick = [&](auto &arr) {
      return arr[gen() % (sizeof(arr) / sizeof(arr[0]))];
    };
    int64_t m = pick(sizes), k = pick(sizes);
    std::vector<std::string> args = {"%x: tensor<" + std::to_string(m) + "x" +
                                     std::to_string(k) + "xf32>"};
    std::ostringstream body;
    std::string cur = "%x";
    int64_t width = k;
    int tmp = 0;
    auto ty = [&](int64_t w) {
      return "tensor<" + std::to_string(m) + "x" + std::to_string(w) + "xf32>";
    };
    auto fresh = [&] { return "%v" + std::to_string(tmp++); };
    auto newArg = [&](const std::string &type) {
      std::string name = "%a" + std::to_string(args.size());
      args.push_back(name + ": " + type);
      return name;
    };
    int steps = 3 + gen() % 5;
    bool vocabUsed = false;
    for (int s = 0; s < steps; ++s) {
      std::string out = fresh();
      switch (gen() % 7) {
      case 0: { // unary
        const char *ops[] = {"tanh", "silu", "neg", "sigmoid", "abs"};
        body << "  " << out << " = llm." << pick(ops) << " " << cur << " : "
             << ty(width) << "\n";
        break;
      }
      case 1: { // binary with a fresh argument
        const char *ops[] = {"add", "mul", "sub"};
        std::string a = newArg(ty(width));
        body << "  " << out << " = llm." << pick(ops) << " " << cur << ", "
             << a << " : " << ty(width) << "\n";
        break;
      }
      case 2: { // gelu
        body << "  " << out << " = llm.gelu " << cur << " tanh : " << ty(width)
             << "\n";
        break;
      }
      case 3: { // rms_norm
        std::string w = newArg("tensor<" + std::to_string(width) + "xf32>");
        body << "  " << out << " = llm.rms_norm " << cur << ", " << w << " : "
             << ty(width) << ", tensor<" << width << "xf32>\n";
        break;
      }
      case 4: { // softmax
        body << "  " << out << " = llm.softmax " << cur << " : " << ty(width)
             << "\n";
        break;
      }
      default: { // matmul, maybe with bias, maybe the vocab head (last)
        int64_t n = pick(sizes);
        if (s == steps - 1 && !vocabUsed && gen() % 2 == 0 && width <= 33) {
          n = 50257;
          vocabUsed = true;
        }
        std::string w = newArg("tensor<" + std::to_string(n) + "x" +
                               std::to_string(width) + "xf32>");
        bool bias = gen() % 2;
        std::string b =
            bias ? newArg("tensor<" + std::to_string(n) + "xf32>") : "";
        body << "  " << out << " = llm.matmul " << cur << ", " << w
             << (bias ? " bias " + b : "") << " {transpose_rhs} : "
             << ty(width) << ", tensor<" << n << "x" << width << "xf32>"
             << (bias ? ", tensor<" + std::to_string(n) + "xf32>" : "")
             << " -> " << ty(n) << "\n";
        width = n;
        break;
      }
      }
      cur = out;
    }
    std::ostringstream src;
    src << "func.func @random(";
    for (size_t i = 0; i < args.size(); ++i)
      src << (i ? ", " : "") << args[i];
    src << ") -> " << ty(width) << " {\n"
        << body.str() << "  return " << cur << " : " << ty(width) << "\n}\n";
    return src.str();
  }
};

TEST_F(RandomGraphs, PipelineMatchesReference) {
  std::mt19937_64 gen(20261129);
  for (int i = 0; i < 24; ++i) {
    std::string src = generate(gen);
    SCOPED_TRACE(src);
    checkAllPolicies(src, 1, "random graph #" + std::to_string(i));
    if (HasFatalFailure())
      return;
  }
}

TEST_F(RandomGraphs, VocabHeadIsPaddedAndExact) {
  // [7, 16] x [50257, 16]^T: N padded to 50304, M to 16, sliced back.
  std::string src = R"mlir(
func.func @head(%x: tensor<7x16xf32>, %w: tensor<50257x16xf32>) -> tensor<7x50257xf32> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<7x16xf32>, tensor<50257x16xf32> -> tensor<7x50257xf32>
  return %y : tensor<7x50257xf32>
}
)mlir";
  OwningOpRef<ModuleOp> after = parseAndRun(src, "llmc-pipeline{form-kernels=1 pad-all=1}");
  ASSERT_TRUE(after);
  std::string text = print(*after);
  EXPECT_NE(text.find("tensor<50304x16xf32>"), std::string::npos) << text;
  checkAllPolicies(src, 1, "vocab head");
}

/// The backward of a two-layer MLP under the fp8 policy's HYBRID format
/// (llmc-precision): the gradient dy (`llm.gradient`) and what is computed
/// from it are e5m2, saved activations and weights e4m3. Each GEMM operand
/// element then carries a relative rounding error of at most u5 = 2^-3
/// (e5m2, 2 mantissa bits) or u4 = 2^-4 (e4m3), so a product's relative
/// error is at most u4 + u5 = 0.1875 to first order; with random signs a
/// GEMM's relative L2 error is about sqrt((u4^2 + u5^2) / 3) ~ 0.08, and
/// two GEMMs deep (dx, dW1) about 0.115. The bound checked is u4 + u5 for
/// every result, on fresh random inputs and awkward (padded) shapes.
TEST_F(PassNumericsTest, Fp8HybridBackwardStaysWithinTheE5M2Bound) {
  std::string src = R"mlir(
func.func @mlp_backward(%x: tensor<33x48xf32>, %w1: tensor<40x48xf32>,
                        %h: tensor<33x40xf32>, %w2: tensor<24x40xf32>,
                        %dy: tensor<33x24xf32> {llm.gradient})
    -> (tensor<33x48xf32>, tensor<40x48xf32>, tensor<24x40xf32>) {
  %dh = llm.matmul %dy, %w2 : tensor<33x24xf32>, tensor<24x40xf32> -> tensor<33x40xf32>
  %dw2 = llm.matmul %dy, %h {transpose_lhs} : tensor<33x24xf32>, tensor<33x40xf32> -> tensor<24x40xf32>
  %dh2 = llm.mul %dh, %h : tensor<33x40xf32>
  %dx = llm.matmul %dh2, %w1 : tensor<33x40xf32>, tensor<40x48xf32> -> tensor<33x48xf32>
  %dw1 = llm.matmul %dh2, %x {transpose_lhs} : tensor<33x40xf32>, tensor<33x48xf32> -> tensor<40x48xf32>
  return %dx, %dw1, %dw2 : tensor<33x48xf32>, tensor<40x48xf32>, tensor<24x40xf32>
}
)mlir";
  OwningOpRef<ModuleOp> before = parseAndRun(src, "");
  ASSERT_TRUE(before);
  OwningOpRef<ModuleOp> after =
      parseAndRun(src, "llmc-pipeline{form-kernels=1 pad-all=1 precision=fp8}");
  ASSERT_TRUE(after);
  // Every GEMM reads its gradient (dy, or dh2 computed from it) in e5m2 and
  // the weight or saved activation in e4m3: checked on the pass's output,
  // where the matmuls are still ops of their own.
  OwningOpRef<ModuleOp> precision =
      parseAndRun(src, "func.func(llmc-precision{policy=fp8})");
  ASSERT_TRUE(precision);
  int matmuls = 0;
  firstFunc(*precision).walk([&](llmc::llm::MatmulOp mm) {
    ++matmuls;
    auto type = [](Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); };
    EXPECT_TRUE(isa<Float8E5M2Type>(type(mm.getLhs()))) << print(*precision);
    EXPECT_TRUE(isa<Float8E4M3FNType>(type(mm.getRhs()))) << print(*precision);
  });
  EXPECT_EQ(matmuls, 4);
  expectHybridFp8Errors(*before, *after, /*draws=*/3, "mlp_backward fp8 hybrid");
}

/// A linear layer's backward in attention's layout: the output gradient dy
/// [B, S, H, D] is read as [B, S, H*D] by the input-gradient GEMM and as
/// [B*S, H*D] (transposed) by the weight-gradient GEMM. The fp8 policy
/// finds dy's scale once (one per-tensor amax over rows of H*D) and casts
/// dy twice with it, each cast straight into the layout cuBLASLt's fp8
/// GEMMs take (K contiguous in both operands): as it is for the input
/// gradient, transposed ([H*D, B*S]) for the weight gradient; no GEMM
/// reads a transposed fp8 operand. The results stay within the HYBRID
/// bound u4 + u5 of the test above, on fresh random inputs, and really ran
/// in fp8.
TEST_F(PassNumericsTest, Fp8GradientReadThroughReshapesIsScaledOnce) {
  std::string src = R"mlir(
func.func @linear_backward(%dy: tensor<4x64x4x128xf32> {llm.gradient},
                           %w: tensor<512x48xf32>, %x: tensor<256x48xf32>)
    -> (tensor<4x64x48xf32>, tensor<512x48xf32>) {
  %g3 = llm.reshape %dy : tensor<4x64x4x128xf32> to tensor<4x64x512xf32>
  %dx = llm.matmul %g3, %w : tensor<4x64x512xf32>, tensor<512x48xf32> -> tensor<4x64x48xf32>
  %g2 = llm.reshape %dy : tensor<4x64x4x128xf32> to tensor<256x512xf32>
  %dw = llm.matmul %g2, %x {transpose_lhs} : tensor<256x512xf32>, tensor<256x48xf32> -> tensor<512x48xf32>
  return %dx, %dw : tensor<4x64x48xf32>, tensor<512x48xf32>
}
)mlir";
  OwningOpRef<ModuleOp> precision =
      parseAndRun(src, "func.func(llmc-precision{policy=fp8})");
  ASSERT_TRUE(precision);
  int absOfDy = 0, scalingCasts = 0;
  SmallVector<Value> dyScales;
  firstFunc(*precision).walk([&](Operation *op) {
    auto type = [](Value v) { return cast<RankedTensorType>(v.getType()); };
    if (isa<llmc::llm::AbsOp>(op) && type(op->getOperand(0)).getNumElements() == 131072)
      ++absOfDy;
    if (isa<llmc::llm::CastOp>(op) && isa<Float8E5M2Type>(type(op->getResult(0)).getElementType()))
      ++scalingCasts;
    if (auto mm = dyn_cast<llmc::llm::MatmulOp>(op)) {
      EXPECT_FALSE(mm.getTransposeLhs()) << print(*precision);
      EXPECT_TRUE(mm.getTransposeRhs()) << print(*precision);
      dyScales.push_back(mm.getScaleLhs());
    }
  });
  EXPECT_EQ(absOfDy, 1) << print(*precision);
  EXPECT_EQ(scalingCasts, 2) << print(*precision);
  ASSERT_EQ(dyScales.size(), 2u);
  EXPECT_TRUE(dyScales[0] && dyScales[0] == dyScales[1]) << print(*precision);
  OwningOpRef<ModuleOp> before = parseAndRun(src, "");
  ASSERT_TRUE(before);
  OwningOpRef<ModuleOp> after =
      parseAndRun(src, "llmc-pipeline{form-kernels=1 pad-all=1 precision=fp8}");
  ASSERT_TRUE(after);
  expectHybridFp8Errors(*before, *after, /*draws=*/2, "linear_backward fp8 hybrid");
}

/// fp8-scaling=row against one scale per tensor, on a linear layer whose
/// activation has one outlier row (x 2^17, as attention sinks and massive
/// activations give) and whose weight has one outlier output channel. With
/// one scale per tensor every other row and channel is scaled by the
/// outlier's amax / 448 into e4m3's subnormals or to zero; with one scale
/// per row of x and per row of W (an output column of the result) they keep
/// e4m3's relative precision. Checked on the result's other rows and
/// columns: per tensor loses most of them (relative L2 error > 0.5), per
/// row stays within the fp8 policy's bound 2u = 0.125 (see the top).
TEST_F(PassNumericsTest, Fp8RowScalingKeepsTheRowsNextToAnOutlier) {
  std::string src = R"mlir(
func.func @linear(%x: tensor<33x64xf32>, %w: tensor<40x64xf32>) -> tensor<33x40xf32> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<33x64xf32>, tensor<40x64xf32> -> tensor<33x40xf32>
  return %y : tensor<33x40xf32>
}
)mlir";
  OwningOpRef<ModuleOp> before = parseAndRun(src, "");
  ASSERT_TRUE(before);
  OwningOpRef<ModuleOp> tensorScaled = parseAndRun(
      src, "llmc-pipeline{form-kernels=1 precision=fp8 fp8-scaling=tensor}");
  OwningOpRef<ModuleOp> rowScaled = parseAndRun(
      src, "llmc-pipeline{form-kernels=1 precision=fp8 fp8-scaling=row}");
  ASSERT_TRUE(tensorScaled && rowScaled);
  // The rows 1.. and columns 1.. of a [33, 40] result.
  auto inner = [](const HostTensor &t) {
    HostTensor r{t.elementType, {32, 39}, {}};
    for (int64_t m = 1; m < 33; ++m)
      for (int64_t n = 1; n < 40; ++n)
        r.data.push_back(t.data[m * 40 + n]);
    return r;
  };
  for (int draw = 0; draw < 2; ++draw) {
    std::vector<HostTensor> inputs = inputsFor(firstFunc(*before), 1);
    for (int64_t k = 0; k < 64; ++k) {
      inputs[0].data[k] *= 0x1p17;  // x row 0 (exact in f32)
      inputs[1].data[k] *= 0x1p17;  // W row 0: output channel 0
    }
    auto ref = Evaluate(firstFunc(*before), inputs);
    auto perTensor = Evaluate(firstFunc(*tensorScaled), inputs);
    auto perRow = Evaluate(firstFunc(*rowScaled), inputs);
    ASSERT_TRUE(ref.ok() && perTensor.ok() && perRow.ok())
        << ref.status() << perTensor.status() << perRow.status();
    double tensorErr = RelativeError(inner((*perTensor)[0]), inner((*ref)[0]));
    double rowErr = RelativeError(inner((*perRow)[0]), inner((*ref)[0]));
    EXPECT_GT(tensorErr, 0.5) << "draw " << draw;
    EXPECT_LE(rowErr, 0.125) << "draw " << draw << "\n" << print(*rowScaled);
    // The outlier row and channel themselves are exact to the same bound.
    EXPECT_LE(RelativeError((*perRow)[0], (*ref)[0]), 0.125) << "draw " << draw;
    if (std::getenv("LLMC_PRINT_ERRORS"))
      std::printf("outlier linear: relative error next to the outliers %.3g "
                  "per tensor, %.3g per row\n", tensorErr, rowErr);
  }
}

} // namespace
