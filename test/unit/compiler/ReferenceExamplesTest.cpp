//===- ReferenceExamplesTest.cpp - examples/ through the reference --------===//
//
// The example models evaluate without error and give finite outputs; the
// causal blocks are consistent across sequence lengths (the first positions
// of a longer sequence match the shorter sequence).
//
//===----------------------------------------------------------------------===//

#include "../ExamplePath.h"
#include "ReferenceTestUtils.h"

#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <cstdio>

using namespace mlir;
using namespace llmc::reference;
using namespace llmc::reference::testing;

namespace {

class ReferenceExamplesTest : public ReferenceTest {
protected:
  func::FuncOp load(const std::string &name) {
    std::string path = llmc::test::ExamplePath(name);
    module = parseSourceFile<ModuleOp>(path, &ctx);
    if (!module) {
      ADD_FAILURE() << "cannot parse " << path;
      return nullptr;
    }
    for (auto fn : module->getOps<func::FuncOp>())
      return fn;
    ADD_FAILURE() << "no function in " << path;
    return nullptr;
  }

  /// Random inputs for `fn` with every dynamic dimension set to `seq`:
  /// the first argument N(0, 1), float parameters N(0, 0.1) (rank 1: 1 +
  /// N(0, 0.1), like norm weights); i64 [1, seq] arguments are token ids in
  /// [0, vocab) for the first and positions 0..seq-1 for the second.
  std::vector<HostTensor> inputsFor(func::FuncOp fn, int64_t seq,
                                    int64_t vocab, std::mt19937_64 &gen) {
    std::vector<HostTensor> inputs;
    int intArgs = 0;
    for (auto [i, type] : llvm::enumerate(fn.getArgumentTypes())) {
      auto rt = cast<RankedTensorType>(type);
      std::vector<int64_t> shape;
      for (int64_t d : rt.getShape())
        shape.push_back(ShapedType::isDynamic(d) ? seq : d);
      Type et = rt.getElementType();
      if (isa<IntegerType>(et)) {
        HostTensor t{et, shape, {}};
        for (int64_t k = 0; k < t.numElements(); ++k)
          t.data.push_back(intArgs == 0 ? static_cast<double>((k * 37 + 11) % vocab)
                                        : static_cast<double>(k % seq));
        ++intArgs;
        inputs.push_back(std::move(t));
        continue;
      }
      HostTensor t = RandomTensor(et, shape, gen, i == 0 ? 1.0 : 0.1);
      if (shape.size() == 1)
        for (double &v : t.data)
          v = RoundToType(1.0 + v, et);
      inputs.push_back(std::move(t));
    }
    return inputs;
  }

  std::vector<HostTensor> evaluate(func::FuncOp fn,
                                   const std::vector<HostTensor> &inputs) {
    absl::StatusOr<std::vector<HostTensor>> r = Evaluate(fn, inputs);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<HostTensor>{};
  }
};

/// For a causal model, positions [0, short) of a run on a longer sequence
/// must equal a run on the short prefix (token inputs are prefixes too).
void expectCausalPrefix(const HostTensor &shortOut, const HostTensor &longOut,
                        int64_t shortSeq, int64_t longSeq) {
  ASSERT_EQ(shortOut.shape[1], shortSeq);
  ASSERT_EQ(longOut.shape[1], longSeq);
  int64_t row = shortOut.numElements() / shortSeq;
  for (int64_t i = 0; i < shortSeq * row; ++i)
    ASSERT_NEAR(shortOut.data[i], longOut.data[i],
                1e-5 * (1 + std::fabs(longOut.data[i])))
        << "element " << i;
}

TEST_F(ReferenceExamplesTest, TinyLlamaBlock) {
  func::FuncOp fn = load("tiny_llama_block.mlir");
  ASSERT_TRUE(fn);
  std::mt19937_64 g5(1), g7(1);
  auto in7 = inputsFor(fn, 7, 0, g7);
  auto in5 = inputsFor(fn, 5, 0, g5);
  // Same parameters; x of the short run is the prefix of the long one.
  for (size_t i = 1; i < in7.size(); ++i)
    in5[i] = in7[i];
  in5[0].data.assign(in7[0].data.begin(), in7[0].data.begin() + 5 * 64);
  auto out5 = evaluate(fn, in5);
  auto out7 = evaluate(fn, in7);
  ASSERT_EQ(out5.size(), 1u);
  ASSERT_EQ(out7.size(), 1u);
  EXPECT_EQ(out7[0].shape, (std::vector<int64_t>{1, 7, 64}));
  EXPECT_TRUE(allFinite(out5[0]));
  EXPECT_TRUE(allFinite(out7[0]));
  expectCausalPrefix(out5[0], out7[0], 5, 7);
}

TEST_F(ReferenceExamplesTest, TinyGpt2Block) {
  func::FuncOp fn = load("tiny_gpt2_block.mlir");
  ASSERT_TRUE(fn);
  std::mt19937_64 g5(2), g7(2);
  auto in5 = inputsFor(fn, 5, 97, g5);
  auto in7 = inputsFor(fn, 7, 97, g7);
  auto out5 = evaluate(fn, in5);
  auto out7 = evaluate(fn, in7);
  ASSERT_EQ(out5.size(), 1u);
  ASSERT_EQ(out7.size(), 1u);
  EXPECT_EQ(out7[0].shape, (std::vector<int64_t>{1, 7, 97}));
  EXPECT_TRUE(allFinite(out5[0]));
  EXPECT_TRUE(allFinite(out7[0]));
  expectCausalPrefix(out5[0], out7[0], 5, 7);
}

TEST_F(ReferenceExamplesTest, Gpt2SmallBlockAtSeq64) {
  func::FuncOp fn = load("gpt2_small_block.mlir");
  ASSERT_TRUE(fn);
  std::mt19937_64 gen(3);
  auto in = inputsFor(fn, 64, 50257, gen);
  auto start = std::chrono::steady_clock::now();
  auto out = evaluate(fn, in);
  double secs = std::chrono::duration<double>(
                    std::chrono::steady_clock::now() - start)
                    .count();
  std::printf("gpt2_small_block, seq 64: reference evaluation %.2f s\n", secs);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{1, 64, 50257}));
  EXPECT_TRUE(allFinite(out[0]));
}

TEST_F(ReferenceExamplesTest, LargeExamplesParseAndVerify) {
  // Too large to evaluate in a unit test; they must still load.
  for (const char *name : {"llama2_7b_block.mlir", "mistral_gqa_block.mlir",
                           "llama2_7b_decode_step.mlir"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(load(name));
  }
}

} // namespace
