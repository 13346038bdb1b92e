//===- ServingStepTest.cpp - the serving engine driving a real model ------===//
//
// Issue 19's engine acceptance on the CPU with a real model rather than a
// stand-in: rt::ServingEngine (continuous batching, chunked prefill,
// preemption) drives examples/tiny_llama_serving_step.mlir (a 2-layer tiny
// LLaMA whose every layer appends into and attends over a paged KV cache,
// llm.paged_kv_append / llm.paged_attention) on the reference executor, with
// the K/V pages held by rt::KvPagePool in host memory. Every request must
// produce exactly the tokens it produces alone, whatever the arrival order
// and batch mix; the pool must end with every page free.
//
//===----------------------------------------------------------------------===//

#include "../ExamplePath.h"
#include "ReferenceTestUtils.h"

#include "llmc/Reference/ServingStep.h"
#include "llmc/runtime/KvPagePool.h"
#include "llmc/runtime/MemoryPool.h"
#include "llmc/runtime/ServingEngine.h"

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>

namespace {

namespace rt = llmc::rt;
using llmc::reference::HostTensor;
using llmc::reference::testing::ReferenceTest;

// The example's sizes.
constexpr int64_t kLayers = 2, kHeadsKV = 2, kHeadDim = 16, kPageSize = 4, kPages = 64,
                  kMaxPages = 16, kVocab = 97, kRopeRows = 256;

class ServingStepTest : public ReferenceTest {
protected:
  void SetUp() override {
    fn_ = parse(llmc::test::ReadExample("tiny_llama_serving_step.mlir"));
    ASSERT_TRUE(fn_);
    // Weights: the function's arguments after the 6 batch arrays and the
    // 2 * kLayers page tensors; RoPE tables as LLaMA's (theta 1e4).
    auto args = fn_.getFunctionType().getInputs();
    for (size_t i = 6 + 2 * kLayers; i < args.size(); ++i) {
      auto type = mlir::cast<mlir::RankedTensorType>(args[i]);
      std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
      weights_.push_back(rand(f32(), shape, shape.size() == 1 ? 1.0 : 0.3));
    }
    for (int64_t p = 0; p < kRopeRows; ++p)
      for (int64_t i = 0; i < kHeadDim; ++i) {
        double a = p * std::pow(1e4, -2.0 * double(i % (kHeadDim / 2)) / double(kHeadDim));
        weights_[1].data[p * kHeadDim + i] = static_cast<float>(std::cos(a));
        weights_[2].data[p * kHeadDim + i] = static_cast<float>(std::sin(a));
      }
  }

  /// A pool of `pages` pages (at most the example's 64) in host memory.
  /// The model pads its pages to the example's 64.
  std::unique_ptr<rt::KvPagePool> makePool(int64_t pages) {
    memory_.push_back(std::make_unique<rt::MemoryPool>(std::make_unique<rt::FakeDeviceAllocator>()));
    rt::KvPagePoolOptions o;
    o.num_pages = pages;
    o.page_size = kPageSize;
    o.num_layers = kLayers;
    o.num_kv_heads = kHeadsKV;
    o.head_dim = kHeadDim;
    o.element_bytes = 4;
    o.copy_page = rt::HostPageCopy();
    absl::StatusOr<std::unique_ptr<rt::KvPagePool>> pool =
        rt::KvPagePool::Create(memory_.back().get(), o);
    EXPECT_TRUE(pool.ok()) << pool.status();
    if (!pool.ok())
      return nullptr;
    // Poison every page: a row the model reads before writing it gives NaN
    // logits.
    for (int64_t l = 0; l < kLayers; ++l)
      for (uint64_t addr : {(*pool)->KeyPages(l), (*pool)->ValuePages(l)}) {
        float *f = reinterpret_cast<float *>(addr);
        std::fill(f, f + pages * kPageSize * kHeadsKV * kHeadDim, NAN);
      }
    return std::move(*pool);
  }

  /// Runs `requests` through one engine: those with arrival 0 first, the
  /// others added before step `arrival`. Returns each request's tokens.
  /// With `buckets`, the model pads each batch to them (rt::PadStepBatch)
  /// and `shapes` receives the padded (T, B) of every step.
  std::map<int64_t, std::vector<int32_t>>
  serve(const std::vector<std::pair<int, rt::Request>> &requests, int64_t pages,
        int64_t budget, int64_t maxSeqs, rt::ServingEngineStats *stats = nullptr,
        std::vector<int64_t> buckets = {}, std::vector<rt::StepBucket> *shapes = nullptr) {
    std::map<int64_t, std::vector<int32_t>> tokens;
    std::unique_ptr<rt::KvPagePool> pool = makePool(pages);
    if (!pool)
      return tokens;
    std::optional<rt::StepBucketing> bucketing;
    if (!buckets.empty())
      bucketing = rt::StepBucketing{buckets, maxSeqs};
    auto model = llmc::reference::ReferenceStepModel::create(fn_, weights_, pool.get(), bucketing);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok())
      return tokens;
    rt::EngineOptions options;
    options.max_batch_tokens = budget;
    options.max_sequences = maxSeqs;
    options.vocab = kVocab;
    auto engine = rt::ServingEngine::Create(pool.get(), model->get(), options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok())
      return tokens;
    size_t added = 0;
    for (int step = 0; added < requests.size() || (*engine)->HasWork(); ++step) {
      for (const auto &[arrival, request] : requests)
        if (arrival == step) {
          absl::Status st = (*engine)->AddRequest(request);
          EXPECT_TRUE(st.ok()) << st;
          ++added;
        }
      absl::StatusOr<rt::StepResult> r = (*engine)->Step();
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok())
        return tokens;
      for (const rt::FinishedRequest &f : r->finished) {
        EXPECT_TRUE(f.status.ok()) << "request " << f.id << ": " << f.status;
        tokens[f.id] = f.tokens;
      }
    }
    if (stats)
      *stats = (*engine)->Stats();
    if (shapes)
      *shapes = (*model)->shapes();
    engine->reset();
    model->reset();  // gives the padding pages back
    EXPECT_TRUE(pool->CheckInvariants().ok());
    EXPECT_EQ(pool->Stats().free_pages, pages);
    return tokens;
  }

  mlir::func::FuncOp fn_;
  std::vector<HostTensor> weights_;
  std::vector<std::unique_ptr<rt::MemoryPool>> memory_;
};

/// Ten requests of 1..24 prompt tokens and 3..12 new tokens, half sampled,
/// some with a stop token, arriving over the first 6 steps.
std::vector<std::pair<int, rt::Request>> randomRequests(uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::pair<int, rt::Request>> requests;
  for (int64_t id = 0; id < 10; ++id) {
    rt::Request r;
    r.id = id;
    const int n = 1 + static_cast<int>(gen() % 24);
    for (int i = 0; i < n; ++i)
      r.prompt.push_back(static_cast<int32_t>(gen() % kVocab));
    r.sampling.max_new_tokens = 3 + static_cast<int64_t>(gen() % 10);
    if (id % 2) {  // half sampled (temperature, top-p, a seed), half greedy
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = 7 + id;
    }
    if (id % 3 == 0)
      r.sampling.stop_tokens = {static_cast<int32_t>(gen() % kVocab)};
    requests.push_back({static_cast<int>(gen() % 6), std::move(r)});
  }
  return requests;
}

TEST_F(ServingStepTest, EveryRequestGetsTheTokensItGetsAlone) {
  const std::vector<std::pair<int, rt::Request>> requests = randomRequests(20261204);
  // Alone: each request in a fresh engine and pool.
  std::map<int64_t, std::vector<int32_t>> alone;
  for (const auto &[arrival, request] : requests) {
    auto one = serve({{0, request}}, kPages, 64, 4);
    ASSERT_EQ(one.size(), 1u);
    alone[request.id] = one.begin()->second;
    ASSERT_FALSE(alone[request.id].empty());
  }
  // Together: arrivals over the first steps, a token budget that splits
  // prompts (chunked prefill) and a pool too small for everyone (preemption).
  rt::ServingEngineStats stats;
  auto together = serve(requests, /*pages=*/12, /*budget=*/12, /*maxSeqs=*/6, &stats);
  ASSERT_EQ(together.size(), requests.size());
  for (const auto &[id, tokens] : alone)
    EXPECT_EQ(together[id], tokens) << "request " << id;
  EXPECT_GT(stats.partial_prefills, 0) << stats.ToString();
  EXPECT_GT(stats.preemptions, 0) << stats.ToString();
  EXPECT_GT(stats.max_step_tokens, 1) << stats.ToString();
}

// The GPU model's padding, on the reference executor: every step padded to
// a token bucket, with the padding tokens in an extra sequence over pages
// reserved for them and empty sequences after it. The tokens must be those
// of the unpadded runs (the padding never reaches a real sequence's pages
// or logits), and every step must run at a bucket's shape.
TEST_F(ServingStepTest, PaddingToBucketsChangesNoToken) {
  const std::vector<std::pair<int, rt::Request>> requests = randomRequests(20261205);
  std::map<int64_t, std::vector<int32_t>> alone;
  for (const auto &[arrival, request] : requests)
    alone[request.id] = serve({{0, request}}, kPages, 64, 4).begin()->second;
  const std::vector<int64_t> buckets = {1, 2, 4, 8, 12};
  rt::ServingEngineStats stats;
  std::vector<rt::StepBucket> shapes;
  // 12 pages for the requests plus 1 for the padding (at most 3 tokens: the
  // gaps below 8 and 12).
  auto padded = serve(requests, /*pages=*/13, /*budget=*/12, /*maxSeqs=*/6, &stats, buckets,
                      &shapes);
  ASSERT_EQ(padded.size(), requests.size());
  for (const auto &[id, tokens] : alone)
    EXPECT_EQ(padded[id], tokens) << "request " << id;
  ASSERT_EQ(static_cast<int64_t>(shapes.size()), stats.steps);
  std::set<int64_t> used;
  for (const rt::StepBucket &s : shapes) {
    EXPECT_TRUE(std::count(buckets.begin(), buckets.end(), s.tokens)) << s.tokens;
    EXPECT_EQ(s.sequences, std::min<int64_t>(s.tokens, 6) + 1);
    used.insert(s.tokens);
  }
  EXPECT_GT(used.size(), 2u) << "the steps should span several buckets";
  EXPECT_GT(stats.partial_prefills, 0) << stats.ToString();
  EXPECT_GT(stats.preemptions, 0) << stats.ToString();
}

} // namespace
