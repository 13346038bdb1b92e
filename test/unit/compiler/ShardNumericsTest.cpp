//===- ShardNumericsTest.cpp - llmc-shard ranks vs the unsharded function -===//
//
// For each model and tensor-parallel degree N, `llmc-shard{tp=N rank=r}` is
// run on N copies of the function; the N rank functions are evaluated in
// lockstep by EvaluateRanks (real all_reduce sums) on identical replicated
// inputs, and every rank's output is compared with Evaluate of the unsharded
// function on the same inputs. The only difference is the order of the
// sums (partial GEMMs rounded to f32, then summed across ranks), so the f32
// relative L2 error bound is 1e-5.
//
//===----------------------------------------------------------------------===//

#include "../ExamplePath.h"
#include "ReferenceTestUtils.h"

#include "LLM/IR/LLMOps.h"
#include "LLM/Transforms/Passes.h"
#include "llmc/InitAllPasses.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

using namespace mlir;
using namespace llmc::reference;
using namespace llmc::reference::testing;

namespace {

constexpr double kTolerance = 1e-5;

/// An MHA LLaMA-style block: d=64, 8 heads x 8 (query and KV), SwiGLU 96,
/// dynamic sequence length, f32. Shards 2, 4 and 8 ways.
constexpr const char *kTinyMha = R"mlir(
func.func @tiny_mha_block(
    %x: tensor<1x?x64xf32> {llm.dim_names = ["seq"]},
    %attn_norm_w: tensor<64xf32>,
    %wq: tensor<64x64xf32>, %wk: tensor<64x64xf32>, %wv: tensor<64x64xf32>,
    %wo: tensor<64x64xf32>,
    %ffn_norm_w: tensor<64xf32>,
    %w_gate: tensor<96x64xf32>, %w_up: tensor<96x64xf32>,
    %w_down: tensor<64x96xf32>) -> tensor<1x?x64xf32> {
  %h = llm.rms_norm %x, %attn_norm_w {eps = 1.0e-05 : f64} : tensor<1x?x64xf32>, tensor<64xf32>
  %q = llm.matmul %h, %wq {transpose_rhs} : tensor<1x?x64xf32>, tensor<64x64xf32> -> tensor<1x?x64xf32>
  %k = llm.matmul %h, %wk {transpose_rhs} : tensor<1x?x64xf32>, tensor<64x64xf32> -> tensor<1x?x64xf32>
  %v = llm.matmul %h, %wv {transpose_rhs} : tensor<1x?x64xf32>, tensor<64x64xf32> -> tensor<1x?x64xf32>
  %q4 = llm.reshape %q : tensor<1x?x64xf32> to tensor<1x?x8x8xf32>
  %k4 = llm.reshape %k : tensor<1x?x64xf32> to tensor<1x?x8x8xf32>
  %v4 = llm.reshape %v : tensor<1x?x64xf32> to tensor<1x?x8x8xf32>
  %qr = llm.rope %q4 half_split {theta = 1.000000e+04 : f64} : tensor<1x?x8x8xf32>
  %kr = llm.rope %k4 half_split {theta = 1.000000e+04 : f64} : tensor<1x?x8x8xf32>
  %attn = llm.attention %qr, %kr, %v4 {causal} : tensor<1x?x8x8xf32>, tensor<1x?x8x8xf32>, tensor<1x?x8x8xf32>
  %attn2 = llm.reshape %attn : tensor<1x?x8x8xf32> to tensor<1x?x64xf32>
  %o = llm.matmul %attn2, %wo {transpose_rhs} : tensor<1x?x64xf32>, tensor<64x64xf32> -> tensor<1x?x64xf32>
  %r1 = llm.add %x, %o : tensor<1x?x64xf32>
  %h2 = llm.rms_norm %r1, %ffn_norm_w {eps = 1.0e-05 : f64} : tensor<1x?x64xf32>, tensor<64xf32>
  %gate = llm.matmul %h2, %w_gate {transpose_rhs} : tensor<1x?x64xf32>, tensor<96x64xf32> -> tensor<1x?x96xf32>
  %up = llm.matmul %h2, %w_up {transpose_rhs} : tensor<1x?x64xf32>, tensor<96x64xf32> -> tensor<1x?x96xf32>
  %act = llm.silu %gate : tensor<1x?x96xf32>
  %ff = llm.mul %act, %up : tensor<1x?x96xf32>
  %down = llm.matmul %ff, %w_down {transpose_rhs} : tensor<1x?x96xf32>, tensor<64x96xf32> -> tensor<1x?x64xf32>
  %out = llm.add %r1, %down : tensor<1x?x64xf32>
  return %out : tensor<1x?x64xf32>
}
)mlir";

/// A GPT-style MLP: [in, out] weights (no transpose), biases on both GEMMs
/// (the row-parallel bias is added by rank 0 only), GELU, a residual.
constexpr const char *kGeluMlp = R"mlir(
func.func @gelu_mlp(%x: tensor<1x?x32xf32> {llm.dim_names = ["seq"]},
                    %w1: tensor<32x128xf32>, %b1: tensor<128xf32>,
                    %w2: tensor<128x32xf32>, %b2: tensor<32xf32>) -> tensor<1x?x32xf32> {
  %h = llm.matmul %x, %w1 bias %b1 : tensor<1x?x32xf32>, tensor<32x128xf32>, tensor<128xf32> -> tensor<1x?x128xf32>
  %a = llm.gelu %h tanh : tensor<1x?x128xf32>
  %y = llm.matmul %a, %w2 bias %b2 : tensor<1x?x128xf32>, tensor<128x32xf32>, tensor<32xf32> -> tensor<1x?x32xf32>
  %r = llm.add %x, %y : tensor<1x?x32xf32>
  return %r : tensor<1x?x32xf32>
}
)mlir";

class ShardNumericsTest : public ReferenceTest {
protected:
  ShardNumericsTest() {
    static bool registered = [] {
      llmc::registerAllPasses();
      return true;
    }();
    (void)registered;
  }

  /// Parses `src` and runs `pipeline` (if any) on it. Null on failure, with
  /// the diagnostics in `diagnostics`.
  OwningOpRef<ModuleOp> parseAndRun(const std::string &src,
                                    const std::string &pipeline,
                                    std::string &diagnostics) {
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      diagnostics += d.str() + "\n";
      return success();
    });
    OwningOpRef<ModuleOp> m = parseSourceString<ModuleOp>(src, &ctx);
    if (!m)
      return nullptr;
    if (pipeline.empty())
      return m;
    PassManager pm(&ctx);
    std::string err;
    llvm::raw_string_ostream es(err);
    if (failed(parsePassPipeline(pipeline, pm, es))) {
      diagnostics += "bad pipeline: " + err;
      return nullptr;
    }
    if (failed(pm.run(*m)))
      return nullptr;
    return m;
  }

  static std::string shardPipeline(int64_t tp, int64_t rank) {
    return "func.func(llmc-shard{tp=" + std::to_string(tp) +
           " rank=" + std::to_string(rank) + "})";
  }

  std::string loadExample(const std::string &name) {
    std::string path = llmc::test::ExamplePath(name);
    OwningOpRef<ModuleOp> m = parseSourceFile<ModuleOp>(path, &ctx);
    if (!m) {
      ADD_FAILURE() << "cannot parse " << path;
      return "";
    }
    return print(*m);
  }

  /// Fresh random inputs, every dynamic dimension `seq`: activations
  /// N(0, 1), matrices N(0, 0.1), rank-1 parameters 1 + N(0, 0.1).
  std::vector<HostTensor> inputsFor(func::FuncOp fn, int64_t seq) {
    std::vector<HostTensor> inputs;
    for (auto [i, type] : llvm::enumerate(fn.getArgumentTypes())) {
      auto rt = cast<RankedTensorType>(type);
      std::vector<int64_t> shape;
      for (int64_t d : rt.getShape())
        shape.push_back(ShapedType::isDynamic(d) ? seq : d);
      HostTensor t =
          RandomTensor(rt.getElementType(), shape, rng, i == 0 ? 1.0 : 0.1);
      if (shape.size() == 1)
        for (double &v : t.data)
          v = RoundToType(1.0 + v, rt.getElementType());
      inputs.push_back(std::move(t));
    }
    return inputs;
  }

  /// Shards `src` `tp` ways and checks every rank against the unsharded
  /// function on two input draws per sequence length.
  /// `after` is an optional pipeline run on every rank after the sharding.
  void checkSharded(const std::string &src, int64_t tp, const std::string &what,
                    const std::string &after = "") {
    SCOPED_TRACE(what + ", tp=" + std::to_string(tp));
    std::string diags;
    OwningOpRef<ModuleOp> full = parseAndRun(src, "", diags);
    ASSERT_TRUE(full) << diags;
    std::vector<OwningOpRef<ModuleOp>> shards;
    SmallVector<func::FuncOp> fns;
    for (int64_t r = 0; r < tp; ++r) {
      std::string pipeline = shardPipeline(tp, r);
      if (!after.empty())
        pipeline += "," + after;
      shards.push_back(parseAndRun(src, pipeline, diags));
      ASSERT_TRUE(shards.back()) << "rank " << r << ":\n" << diags;
      func::FuncOp fn = firstFunc(*shards.back());
      // One all_reduce per attention or MLP block, over the whole group.
      int reduces = 0;
      fn.walk([&](llmc::llm::AllReduceOp ar) {
        ++reduces;
        EXPECT_EQ(ar.getGroupSize(), static_cast<uint64_t>(tp));
      });
      EXPECT_GT(reduces, 0) << print(*shards.back());
      fns.push_back(fn);
    }
    func::FuncOp ref = firstFunc(*full);
    bool dynamic = llvm::any_of(ref.getArgumentTypes(), [](Type t) {
      return !cast<RankedTensorType>(t).hasStaticShape();
    });
    std::vector<int64_t> seqs =
        dynamic ? std::vector<int64_t>{1, 5, 7} : std::vector<int64_t>{0};
    for (int64_t seq : seqs) {
      for (int draw = 0; draw < 2; ++draw) {
        std::vector<HostTensor> inputs = inputsFor(ref, seq);
        for (const HostTensor &t : inputs)
          ASSERT_TRUE(llvm::any_of(t.data, [](double v) { return v != 0; }));
        auto want = Evaluate(ref, inputs);
        ASSERT_TRUE(want.ok()) << want.status();
        std::vector<std::vector<HostTensor>> replicated(tp, inputs);
        auto got = EvaluateRanks(fns, replicated);
        ASSERT_TRUE(got.ok()) << got.status() << "\n" << print(*shards[0]);
        ASSERT_EQ(got->size(), static_cast<size_t>(tp));
        for (int64_t r = 0; r < tp; ++r) {
          ASSERT_EQ((*got)[r].size(), want->size());
          for (size_t o = 0; o < want->size(); ++o) {
            ASSERT_TRUE(allFinite((*want)[o]));
            double err = RelativeError((*got)[r][o], (*want)[o]);
            EXPECT_LE(err, kTolerance)
                << "rank " << r << ", result " << o << ", seq " << seq
                << ", draw " << draw << "\n"
                << print(*shards[r]);
          }
        }
      }
    }
  }
};

TEST_F(ShardNumericsTest, TinyLlamaGqaTp2) {
  std::string src = loadExample("tiny_llama_block.mlir");
  ASSERT_FALSE(src.empty());
  checkSharded(src, 2, "tiny_llama_block");
}

TEST_F(ShardNumericsTest, TinyLlamaStaticShapesTp2) {
  std::string diags;
  std::string path =
      llmc::test::ExamplePath("tiny_llama_block.mlir");
  OwningOpRef<ModuleOp> m = parseSourceFile<ModuleOp>(path, &ctx);
  ASSERT_TRUE(m);
  PassManager pm(&ctx);
  ASSERT_TRUE(succeeded(
      parsePassPipeline("func.func(llmc-specialize-shapes{dims=seq=6})", pm)));
  ASSERT_TRUE(succeeded(pm.run(*m)));
  checkSharded(print(*m), 2, "tiny_llama_block seq=6");
  // The compile pipeline (padding, fusion, memory planning) after sharding
  // keeps every rank exact.
  checkSharded(print(*m), 2, "tiny_llama_block seq=6 + llmc-pipeline",
               "llmc-pipeline{form-kernels=1 pad-all=1}");
}

TEST_F(ShardNumericsTest, TinyLlamaTp4FailsOnTwoKvHeads) {
  std::string src = loadExample("tiny_llama_block.mlir");
  ASSERT_FALSE(src.empty());
  for (int64_t r = 0; r < 4; ++r) {
    std::string diags;
    OwningOpRef<ModuleOp> m = parseAndRun(src, shardPipeline(4, r), diags);
    EXPECT_FALSE(m) << print(*m);
    EXPECT_NE(diags.find("'llm.attention' op cannot shard 4 query heads and "
                         "2 KV heads 4 ways: both head counts must be "
                         "divisible by tp=4"),
              std::string::npos)
        << diags;
  }
}

TEST_F(ShardNumericsTest, TinyMhaTp2) { checkSharded(kTinyMha, 2, "tiny_mha"); }
TEST_F(ShardNumericsTest, TinyMhaTp4) { checkSharded(kTinyMha, 4, "tiny_mha"); }
TEST_F(ShardNumericsTest, TinyMhaTp8) { checkSharded(kTinyMha, 8, "tiny_mha"); }

TEST_F(ShardNumericsTest, TinyMhaTp4ThenPipeline) {
  checkSharded(kTinyMha, 4, "tiny_mha + llmc-pipeline", "llmc-pipeline{pad-all=1}");
}

TEST_F(ShardNumericsTest, GeluMlpWithBiases) {
  for (int64_t tp : {2, 4})
    checkSharded(kGeluMlp, tp, "gelu_mlp");
}

TEST_F(ShardNumericsTest, Tp1IsIdentity) {
  std::string src = loadExample("tiny_llama_block.mlir");
  ASSERT_FALSE(src.empty());
  std::string diags;
  OwningOpRef<ModuleOp> before = parseAndRun(src, "", diags);
  OwningOpRef<ModuleOp> after = parseAndRun(src, shardPipeline(1, 0), diags);
  ASSERT_TRUE(before && after) << diags;
  EXPECT_EQ(print(*before), print(*after));
}

} // namespace
