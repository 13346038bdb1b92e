// C API of the serving engine (llmc_serving_engine_*) on the CPU reference
// executor (options.reference = 1, no GPU): the tiny LLaMA serving step
// serves requests to the end with every token accounted for, and misuse is
// reported with the documented codes, naming the argument or field.
#include "../ExamplePath.h"
#include "CapiTestUtils.h"
#include "llmc/llmc_c.h"

#include "gtest/gtest.h"

#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

using llmc::test::Contains;
using llmc::test::Status;

/// The example's weights (arguments 10 ..): shapes, f32, random values;
/// vectors (norm weights) 1.
struct Weights {
  Weights() {
    const std::vector<std::vector<int64_t>> shapes = {
        {97, 64}, {256, 16}, {256, 16},                                      // wte, rope
        {64}, {64, 64}, {32, 64}, {32, 64}, {64, 64}, {64}, {176, 64}, {176, 64}, {64, 176},
        {64}, {64, 64}, {32, 64}, {32, 64}, {64, 64}, {64}, {176, 64}, {176, 64}, {64, 176},
        {64}, {97, 64}};
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> u(-0.2f, 0.2f);
    for (const auto &s : shapes) {
      int64_t n = 1;
      for (int64_t d : s)
        n *= d;
      std::vector<float> v(n);
      for (float &x : v)
        x = s.size() == 1 ? 1.0f : u(gen);
      data.push_back(std::move(v));
      this->shapes.push_back(s);
    }
    for (size_t i = 0; i < data.size(); ++i)
      tensors.push_back({data[i].data(), LLMC_DTYPE_F32, static_cast<int32_t>(shapes[i].size()),
                         this->shapes[i].data(), nullptr});
  }
  std::vector<std::vector<float>> data;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<llmc_tensor> tensors;
};

llmc_serving_engine_options Options() {
  llmc_serving_engine_options o = {};
  o.max_batch_tokens = 8;
  o.max_sequences = 3;
  o.reference = 1;
  return o;
}

llmc_sampling_params Greedy(int64_t max_new_tokens) {
  llmc_sampling_params p = {};
  p.top_p = 1;
  p.max_new_tokens = max_new_tokens;
  return p;
}

TEST(ServingEngineCapiTest, ServesRequestsToTheEndOnTheReferenceExecutor) {
  const std::string step = llmc::test::ReadExample("tiny_llama_serving_step.mlir");
  Weights w;
  llmc_serving_engine_options o = Options();
  llmc_serving_engine_t *engine = nullptr;
  EXPECT_LLMC_OK(llmc_serving_engine_create(nullptr, step.c_str(), nullptr, w.tensors.data(),
                                            static_cast<int64_t>(w.tensors.size()), &o, &engine));
  EXPECT_LLMC_OK(llmc_serving_engine_warmup(engine));  // no-op on the reference executor
  std::map<int64_t, int64_t> wanted = {{10, 3}, {11, 5}, {12, 2}, {13, 4}};
  for (const auto &[id, n] : wanted) {
    std::vector<int32_t> prompt(static_cast<size_t>(id % 7 + 2), static_cast<int32_t>(id));
    llmc_sampling_params p = Greedy(n);
    EXPECT_LLMC_OK(llmc_serving_engine_add_request(engine, id, prompt.data(),
                                                   static_cast<int64_t>(prompt.size()), &p));
  }
  std::map<int64_t, std::vector<int32_t>> streamed, finished;
  int32_t work = 1;
  for (int steps = 0; work && steps < 100; ++steps) {
    int64_t nt = 0, nf = 0;
    EXPECT_LLMC_OK(llmc_serving_engine_step(engine, &nt, &nf));
    for (int64_t i = 0; i < nt; ++i) {
      int64_t id = 0;
      int32_t token = -1;
      EXPECT_LLMC_OK(llmc_serving_engine_step_token(engine, i, &id, &token));
      EXPECT_GE(token, 0);
      EXPECT_LT(token, 97);
      streamed[id].push_back(token);
    }
    for (int64_t i = 0; i < nf; ++i) {
      int64_t id = 0, n = 0;
      int32_t reason = -1;
      const int32_t *tokens = nullptr;
      const char *error = nullptr;
      EXPECT_LLMC_OK(
          llmc_serving_engine_step_finished(engine, i, &id, &reason, &tokens, &n, &error));
      EXPECT_EQ(reason, 1) << "max_new_tokens";
      EXPECT_STREQ(error, "");
      finished[id].assign(tokens, tokens + n);
    }
    EXPECT_LLMC_OK(llmc_serving_engine_has_work(engine, &work));
  }
  ASSERT_EQ(work, 0);
  ASSERT_EQ(finished.size(), wanted.size());
  for (const auto &[id, n] : wanted) {
    EXPECT_EQ(static_cast<int64_t>(finished[id].size()), n) << id;
    EXPECT_EQ(finished[id], streamed[id]) << id;
  }
  int64_t counts[LLMC_SERVING_ENGINE_STATS] = {};
  double waste = -1;
  EXPECT_LLMC_OK(llmc_serving_engine_stats(engine, counts, LLMC_SERVING_ENGINE_STATS, &waste));
  EXPECT_EQ(counts[9], 4);   // finished
  EXPECT_EQ(counts[11], 14); // generated
  EXPECT_EQ(counts[14], 64); // KV pages
  EXPECT_GT(counts[6], 0);   // partial prefills (budget 8 < the longest prompt)
  EXPECT_GE(waste, 0.0);
  // Reading past the last step's results is an error naming the index.
  Status past(llmc_serving_engine_step_token(engine, 1000, nullptr, nullptr));
  EXPECT_EQ(past.code(), 3);
  EXPECT_TRUE(Contains(past.message(), "expected a token index in [0, ")) << past.message();
  Status pastFinished(
      llmc_serving_engine_step_finished(engine, -1, nullptr, nullptr, nullptr, nullptr, nullptr));
  EXPECT_EQ(pastFinished.code(), 3);
  llmc_serving_engine_release(engine);
}

TEST(ServingEngineCapiTest, MisuseIsReportedNamingTheArgument) {
  const std::string step = llmc::test::ReadExample("tiny_llama_serving_step.mlir");
  Weights w;
  llmc_serving_engine_options o = Options();
  llmc_serving_engine_t *engine = nullptr;
  const int64_t n = static_cast<int64_t>(w.tensors.size());
  auto create = [&](llmc_compiler_t *c, const char *mlir, int64_t count,
                    const llmc_serving_engine_options *opts) {
    return Status(llmc_serving_engine_create(c, mlir, nullptr, w.tensors.data(), count, opts,
                                             &engine));
  };
  {
    Status s = create(nullptr, step.c_str(), n, nullptr);
    EXPECT_EQ(s.code(), 3);
    EXPECT_TRUE(Contains(s.message(), "options: NULL")) << s.message();
  }
  {
    llmc_serving_engine_options gpu = o;
    gpu.reference = 0;
    Status s = create(nullptr, step.c_str(), n, &gpu);
    EXPECT_EQ(s.code(), 3);
    EXPECT_TRUE(Contains(s.message(), "compiler: NULL")) << s.message();
  }
  {
    Status s = create(nullptr, step.c_str(), n - 1, &o);
    EXPECT_EQ(s.code(), 3);
    EXPECT_TRUE(Contains(s.message(), "takes 23 weights")) << s.message();
  }
  {
    std::vector<int64_t> wrong = {97, 63};
    llmc_tensor t = w.tensors[0];
    t.shape = wrong.data();
    std::vector<llmc_tensor> ts = w.tensors;
    ts[0] = t;
    Status s(llmc_serving_engine_create(nullptr, step.c_str(), nullptr, ts.data(), n, &o,
                                        &engine));
    EXPECT_EQ(s.code(), 3);
    EXPECT_TRUE(Contains(s.message(), "weight 'arg10' (#0)")) << s.message();
  }
  {
    llmc_serving_engine_options bad = o;
    bad.max_sequences = 9;
    Status s = create(nullptr, step.c_str(), n, &bad);
    EXPECT_EQ(s.code(), 3);
    EXPECT_TRUE(Contains(s.message(), "options.max_sequences = 9")) << s.message();
  }
  {
    Status s = create(nullptr, "func.func @f() { return }", 0, &o);
    EXPECT_EQ(s.code(), 3);
    EXPECT_TRUE(Contains(s.message(), "serving step @f")) << s.message();
  }
  {
    Status s = create(nullptr, "this is not MLIR", n, &o);
    EXPECT_EQ(s.code(), 3);
    EXPECT_TRUE(Contains(s.message(), "could not parse")) << s.message();
  }
  EXPECT_EQ(engine, nullptr);
  EXPECT_LLMC_OK(llmc_serving_engine_create(nullptr, step.c_str(), nullptr, w.tensors.data(), n,
                                            &o, &engine));
  const int32_t prompt[2] = {1, 2};
  llmc_sampling_params p = Greedy(70);
  Status tooLong(llmc_serving_engine_add_request(engine, 0, prompt, 2, &p));
  EXPECT_EQ(tooLong.code(), 3);
  EXPECT_TRUE(Contains(tooLong.message(), "request 0 needs 2 + 70 tokens")) << tooLong.message();
  Status noParams(llmc_serving_engine_add_request(engine, 0, prompt, 2, nullptr));
  EXPECT_EQ(noParams.code(), 3);
  p = Greedy(2);
  Status empty(llmc_serving_engine_add_request(engine, 0, prompt, 0, &p));
  EXPECT_TRUE(Contains(empty.message(), "prompt: expected >= 1 tokens")) << empty.message();
  Status stats(llmc_serving_engine_stats(engine, nullptr, LLMC_SERVING_ENGINE_STATS + 1, nullptr));
  EXPECT_EQ(stats.code(), 3);
  Status null(llmc_serving_engine_step(nullptr, nullptr, nullptr));
  EXPECT_EQ(null.code(), 3);
  llmc_serving_engine_release(engine);
  llmc_serving_engine_release(nullptr);
}

} // namespace
