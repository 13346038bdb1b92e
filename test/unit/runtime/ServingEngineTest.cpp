// ServingEngine: the continuous-batching scheduler, on host memory
// (FakeDeviceAllocator, HostPageCopy) with a stand-in model that really
// uses the paged KV cache: each new token writes a value derived from
// (token, position) into its slot of layer 0's key pages, and a sequence's
// logits are a hash of every value it reads back through its block table,
// so a wrong page, a wrong position, a token of another sequence or a row
// not (re)computed after a preemption changes the tokens. The acceptance
// test (issue 19): each request's tokens under any arrival order and batch
// mix equal those it produces alone, and those an independent oracle
// computes without the engine.
#include "llmc/runtime/ServingEngine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "llmc/runtime/MemoryPool.h"

namespace llmc::rt {
namespace {

constexpr int64_t kVocab = 48;
constexpr uint64_t kHashSeed = 0x243f6a8885a308d3ull;

bool Contains(absl::string_view s, absl::string_view part) {
  return s.find(part) != absl::string_view::npos;
}

uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// What the stand-in model stores for token `token` at position `pos`.
uint32_t TokenValue(int32_t token, int64_t pos) {
  return static_cast<uint32_t>(Mix((uint64_t(uint32_t(token)) << 32) ^ uint64_t(pos)));
}

/// vocab pseudo-random logits in [-4, 4) from a sequence hash.
std::vector<float> HashLogits(uint64_t h, int64_t vocab) {
  std::vector<float> logits(vocab);
  for (int64_t i = 0; i < vocab; ++i)
    logits[i] = float(Mix(h ^ Mix(uint64_t(i) + 1)) >> 40) * (8.0f / 16777216.0f) - 4.0f;
  return logits;
}

/// The row the stand-in model keeps per token in layer 0's key pages
/// (num_kv_heads 1, head_dim 2, 4-byte elements).
struct KvRow {
  uint32_t value;
  int32_t position;
};

/// The stand-in model (see the file comment). Also checks the batch layout
/// against llm.paged_kv_append's (positions and slots from seq_lens,
/// cu_seqlens_q and block_table) and that every row a sequence reads was
/// last written by that sequence at that position.
class PagedHashModel : public StepModel {
 public:
  absl::StatusOr<std::vector<std::vector<float>>> Run(const StepBatch& b,
                                                      KvPagePool& pool) override {
    ++calls;
    if (fail_call == calls) return absl::UnavailableError("stand-in model: injected failure");
    if (observer) observer(b);
    const int64_t ps = pool.options().page_size;
    char* keys = reinterpret_cast<char*>(pool.KeyPages(0));
    const int64_t row_bytes = pool.row_bytes();
    const int64_t num_seqs = b.num_sequences();
    const int64_t num_tokens = b.num_tokens();
    auto bad = [&](auto&&... what) {
      return absl::InternalError(absl::StrCat("stand-in model: ", what...));
    };
    if (static_cast<int64_t>(b.cu_seqlens_q.size()) != num_seqs + 1 ||
        b.cu_seqlens_q.front() != 0 || b.cu_seqlens_q.back() != num_tokens ||
        static_cast<int64_t>(b.positions.size()) != num_tokens ||
        static_cast<int64_t>(b.slots.size()) != num_tokens ||
        static_cast<int64_t>(b.wants_logits.size()) != num_seqs ||
        static_cast<int64_t>(b.sequences.size()) != num_seqs ||
        static_cast<int64_t>(b.request_ids.size()) != num_seqs ||
        static_cast<int64_t>(b.block_table.size()) != num_seqs * b.max_pages)
      return bad("inconsistent batch sizes");
    auto slot_of = [&](int64_t seq, int64_t pos) -> int64_t {
      return int64_t{b.block_table[seq * b.max_pages + pos / ps]} * ps + pos % ps;
    };
    // The paged append: every new token's row.
    std::vector<int32_t> expected_rows;
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t n = b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s];
      if (n < 1 || n > b.seq_lens[s] || b.seq_lens[s] > b.max_pages * ps)
        return bad("sequence ", s, ": ", n, " new tokens, length ", b.seq_lens[s]);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = b.cu_seqlens_q[s] + i;
        const int64_t pos = b.seq_lens[s] - n + i;
        if (b.positions[t] != pos) return bad("token ", t, " at position ", b.positions[t], ", expected ", pos);
        const int64_t slot = slot_of(s, pos);
        if (b.slots[t] != slot) return bad("token ", t, " slot ", b.slots[t], ", block table says ", slot);
        KvRow row{TokenValue(b.token_ids[t], pos), static_cast<int32_t>(pos)};
        std::memcpy(keys + slot * row_bytes, &row, sizeof(row));
        writer_[slot] = {b.sequences[s], pos};
      }
      if (b.wants_logits[s]) expected_rows.push_back(b.cu_seqlens_q[s + 1] - 1);
    }
    if (b.logits_rows != expected_rows) return bad("logits_rows");
    // Attention stand-in: hash every row of each sampling sequence.
    std::vector<std::vector<float>> out;
    for (int64_t s = 0; s < num_seqs; ++s) {
      if (!b.wants_logits[s]) continue;
      uint64_t h = kHashSeed;
      for (int64_t j = 0; j < b.seq_lens[s]; ++j) {
        const int64_t slot = slot_of(s, j);
        auto w = writer_.find(slot);
        if (w == writer_.end() || w->second != std::make_pair(b.sequences[s], j))
          return bad("request ", b.request_ids[s], " (pool sequence ", b.sequences[s],
                     ") reads position ", j, " from slot ", slot, ", last written by ",
                     w == writer_.end() ? std::string("nobody")
                                        : absl::StrCat("sequence ", w->second.first,
                                                       " position ", w->second.second));
        KvRow row;
        std::memcpy(&row, keys + slot * row_bytes, sizeof(row));
        h = Mix(h ^ row.value);
      }
      out.push_back(HashLogits(h, vocab));
    }
    return out;
  }

  int64_t vocab = kVocab;
  int64_t calls = 0;
  /// Run fails on this call (1-based); 0: never.
  int64_t fail_call = 0;
  std::function<void(const StepBatch&)> observer;

 private:
  /// slot -> (pool sequence, position) of its last write.
  std::map<int64_t, std::pair<int64_t, int64_t>> writer_;
};

/// The tokens `r` generates, computed without the engine or the pages.
std::vector<int32_t> Oracle(const Request& r, int64_t vocab = kVocab) {
  std::vector<int32_t> tokens = r.prompt, generated;
  for (;;) {
    uint64_t h = kHashSeed;
    for (size_t j = 0; j < tokens.size(); ++j) h = Mix(h ^ TokenValue(tokens[j], j));
    const int32_t t = SampleToken(HashLogits(h, vocab), r.sampling, r.id,
                                  static_cast<int64_t>(generated.size()));
    generated.push_back(t);
    tokens.push_back(t);
    const auto& stop = r.sampling.stop_tokens;
    if (std::find(stop.begin(), stop.end(), t) != stop.end()) break;
    if (static_cast<int64_t>(generated.size()) >= r.sampling.max_new_tokens) break;
  }
  return generated;
}

struct Config {
  int64_t num_pages = 64;
  int64_t page_size = 4;
  int64_t max_batch_tokens = 64;
  int64_t max_sequences = 16;
};

Config Cfg(int64_t num_pages, int64_t page_size, int64_t max_batch_tokens,
           int64_t max_sequences) {
  Config c;
  c.num_pages = num_pages;
  c.page_size = page_size;
  c.max_batch_tokens = max_batch_tokens;
  c.max_sequences = max_sequences;
  return c;
}

/// A pool, the stand-in model and an engine over them.
struct Engine {
  explicit Engine(Config c = {}) : config(c) {
    mem = std::make_unique<MemoryPool>(std::make_unique<FakeDeviceAllocator>());
    KvPagePoolOptions o;
    o.num_pages = c.num_pages;
    o.page_size = c.page_size;
    o.num_layers = 1;
    o.num_kv_heads = 1;
    o.head_dim = 2;
    o.element_bytes = 4;
    o.copy_page = HostPageCopy();
    auto p = KvPagePool::Create(mem.get(), std::move(o));
    EXPECT_TRUE(p.ok()) << p.status();
    pool = std::move(*p);
    EngineOptions e;
    e.max_batch_tokens = c.max_batch_tokens;
    e.max_sequences = c.max_sequences;
    e.vocab = kVocab;
    auto s = ServingEngine::Create(pool.get(), &model, e);
    EXPECT_TRUE(s.ok()) << s.status();
    engine = std::move(*s);
  }
  /// Every page free, no sequence left, bookkeeping consistent.
  void ExpectPoolClean() {
    EXPECT_TRUE(pool->CheckInvariants().ok()) << pool->CheckInvariants();
    KvPagePoolStats st = pool->Stats();
    EXPECT_EQ(st.free_pages, config.num_pages) << st.ToString();
    EXPECT_EQ(st.num_sequences, 0) << st.ToString();
  }
  Config config;
  std::unique_ptr<MemoryPool> mem;
  std::unique_ptr<KvPagePool> pool;
  PagedHashModel model;
  std::unique_ptr<ServingEngine> engine;
};

/// `r` alone in a fresh engine of configuration `c`.
FinishedRequest RunAlone(const Request& r, Config c) {
  Engine e(c);
  EXPECT_TRUE(e.engine->AddRequest(r).ok());
  auto done = e.engine->RunToCompletion();
  EXPECT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->size(), 1u);
  e.ExpectPoolClean();
  return done->empty() ? FinishedRequest{} : done->front();
}

Request MakeRequest(int64_t id, std::vector<int32_t> prompt, int64_t max_new_tokens,
                    float temperature = 0, float top_p = 1, uint64_t seed = 0,
                    std::vector<int32_t> stop = {}) {
  Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.sampling.max_new_tokens = max_new_tokens;
  r.sampling.temperature = temperature;
  r.sampling.top_p = top_p;
  r.sampling.seed = seed;
  r.sampling.stop_tokens = std::move(stop);
  return r;
}

std::vector<int32_t> Iota(int n, int32_t from = 1) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = (from + i) % kVocab;
  return v;
}

std::map<int64_t, FinishedRequest> ById(std::vector<FinishedRequest> done) {
  std::map<int64_t, FinishedRequest> m;
  for (FinishedRequest& f : done) {
    EXPECT_FALSE(m.count(f.id)) << "request " << f.id << " finished twice";
    m[f.id] = std::move(f);
  }
  return m;
}

// ---------------------------------------------------------------------------
// Sampling.

TEST(ServingEngineTest, GreedyTakesTheLowestIdOnTiesAndSkipsNaN) {
  SamplingParams greedy;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(SampleToken(std::vector<float>{1, 3, 3, 2}, greedy, 7, 0), 1);
  EXPECT_EQ(SampleToken(std::vector<float>{nan, 2, 2}, greedy, 7, 0), 1);
  EXPECT_EQ(SampleToken(std::vector<float>{-inf, -inf, -inf}, greedy, 7, 0), 0);
  EXPECT_EQ(SampleToken(std::vector<float>{0, 0, 0, 0}, greedy, 7, 0), 0);
  // Sampling with no finite logit falls back to greedy.
  SamplingParams hot;
  hot.temperature = 1;
  EXPECT_EQ(SampleToken(std::vector<float>{-inf, nan, -inf}, hot, 7, 0), 0);
  EXPECT_EQ(SampleToken(std::vector<float>{-inf, 5, -inf}, hot, 7, 3), 1);
}

TEST(ServingEngineTest, TinyTopPIsGreedy) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-3, 3);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<float> logits(1 + trial % 40);
    for (float& x : logits) x = u(rng);
    if (trial % 3 == 0) logits[logits.size() / 2] = logits.back();  // ties
    SamplingParams greedy, nucleus;
    nucleus.temperature = 0.5f + trial % 4;
    nucleus.top_p = 1e-6f;
    nucleus.seed = rng();
    EXPECT_EQ(SampleToken(logits, nucleus, trial, trial % 9),
              SampleToken(logits, greedy, trial, 0));
  }
}

TEST(ServingEngineTest, SamplingFollowsSoftmaxAndTheNucleus) {
  // Probabilities 0.4, 0.35, 0.25 at temperature 1.
  const std::vector<float> logits = {std::log(0.4f), std::log(0.35f), std::log(0.25f)};
  SamplingParams full;
  full.temperature = 1;
  full.seed = 5;
  SamplingParams nucleus = full;
  nucleus.top_p = 0.6f;  // {0, 1}: 0.75 of the mass
  const int n = 20000;
  std::vector<int> count_full(3), count_nucleus(3);
  for (int i = 0; i < n; ++i) {
    ++count_full[SampleToken(logits, full, 3, i)];
    ++count_nucleus[SampleToken(logits, nucleus, 3, i)];
  }
  EXPECT_NEAR(count_full[0] / double(n), 0.40, 0.02);
  EXPECT_NEAR(count_full[1] / double(n), 0.35, 0.02);
  EXPECT_NEAR(count_full[2] / double(n), 0.25, 0.02);
  EXPECT_EQ(count_nucleus[2], 0);
  EXPECT_NEAR(count_nucleus[0] / double(n), 0.4 / 0.75, 0.02);
  // Counter-based: the same (seed, request, index) draws the same token;
  // another seed or request draws a different sequence.
  int same = 0, other_seed = 0, other_request = 0;
  SamplingParams reseeded = full;
  reseeded.seed = 6;
  for (int i = 0; i < 200; ++i) {
    same += SampleToken(logits, full, 3, i) == SampleToken(logits, full, 3, i);
    other_seed += SampleToken(logits, full, 3, i) == SampleToken(logits, reseeded, 3, i);
    other_request += SampleToken(logits, full, 3, i) == SampleToken(logits, full, 4, i);
  }
  EXPECT_EQ(same, 200);
  EXPECT_LT(other_seed, 150);
  EXPECT_LT(other_request, 150);
  // A low temperature concentrates on the most probable token.
  SamplingParams cold = full;
  cold.temperature = 0.01f;
  int argmax = 0;
  for (int i = 0; i < 1000; ++i) argmax += SampleToken(logits, cold, 3, i) == 0;
  EXPECT_GT(argmax, 990);
}

// ---------------------------------------------------------------------------
// Validation.

TEST(ServingEngineTest, CreateValidatesOptions) {
  Engine e;
  PagedHashModel model;
  auto create = [&](int64_t tokens, int64_t seqs, int64_t vocab) {
    EngineOptions o;
    o.max_batch_tokens = tokens;
    o.max_sequences = seqs;
    o.vocab = vocab;
    return ServingEngine::Create(e.pool.get(), &model, o).status();
  };
  EXPECT_TRUE(create(16, 16, 10).ok());
  for (auto [status, field] :
       {std::pair{create(0, 1, 10), "max_batch_tokens"},
        std::pair{create(int64_t{1} << 31, 1, 10), "max_batch_tokens"},
        std::pair{create(16, 0, 10), "max_sequences"},
        std::pair{create(16, 17, 10), "max_sequences"},
        std::pair{create(16, 4, 0), "vocab"}}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_TRUE(Contains(status.message(), field)) << status;
  }
  EngineOptions o;
  o.vocab = 10;
  EXPECT_EQ(ServingEngine::Create(nullptr, &model, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ServingEngine::Create(e.pool.get(), nullptr, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ServingEngineTest, BadRequestsAreRejectedNamingTheField) {
  Engine e;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    Request request;
    const char* field;
  };
  std::vector<Case> cases = {
      {MakeRequest(1, {}, 4), "prompt"},
      {MakeRequest(1, {3, kVocab}, 4), "prompt[1]"},
      {MakeRequest(1, {-1}, 4), "prompt[0]"},
      {MakeRequest(1, {3}, 0), "max_new_tokens"},
      {MakeRequest(1, {3}, int64_t{1} << 31), "max_new_tokens"},
      {MakeRequest(1, {3}, 4, -0.5f), "temperature"},
      {MakeRequest(1, {3}, 4, nan), "temperature"},
      {MakeRequest(1, {3}, 4, 1, 0), "top_p"},
      {MakeRequest(1, {3}, 4, 1, 1.5f), "top_p"},
      {MakeRequest(1, {3}, 4, 1, nan), "top_p"},
      {MakeRequest(1, {3}, 4, 0, 1, 0, {2, kVocab + 3}), "stop_tokens[1]"},
  };
  for (Case& c : cases) {
    absl::Status s = e.engine->AddRequest(c.request);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(Contains(s.message(), c.field)) << s;
  }
  EXPECT_FALSE(e.engine->HasWork());
  ASSERT_TRUE(e.engine->AddRequest(MakeRequest(1, {3, 4}, 2)).ok());
  absl::Status dup = e.engine->AddRequest(MakeRequest(1, {5}, 2));
  EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(dup.message(), "already used")) << dup;
  ASSERT_TRUE(e.engine->RunToCompletion().ok());
  // Finished: the id may be used again.
  EXPECT_TRUE(e.engine->AddRequest(MakeRequest(1, {5}, 2)).ok());
  ASSERT_TRUE(e.engine->RunToCompletion().ok());
  EXPECT_EQ(e.engine->Stats().requests_added, 2);
  e.ExpectPoolClean();
}

// ---------------------------------------------------------------------------
// Small scenarios.

TEST(ServingEngineTest, MaxNewTokensOneFinishesAfterThePrompt) {
  Engine e;
  Request r = MakeRequest(42, Iota(9), 1);
  ASSERT_TRUE(e.engine->AddRequest(r).ok());
  auto step = e.engine->Step();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->num_tokens, 9);
  ASSERT_EQ(step->tokens.size(), 1u);
  EXPECT_EQ(step->tokens[0].request_id, 42);
  ASSERT_EQ(step->finished.size(), 1u);
  EXPECT_EQ(step->finished[0].reason, FinishReason::max_new_tokens);
  EXPECT_EQ(step->finished[0].tokens, Oracle(r));
  EXPECT_EQ(step->finished[0].tokens.size(), 1u);
  EXPECT_FALSE(e.engine->HasWork());
  e.ExpectPoolClean();
}

TEST(ServingEngineTest, StopTokenAsTheFirstGeneratedTokenEndsTheRequest) {
  Request probe = MakeRequest(3, Iota(6, 10), 5);
  const int32_t first = Oracle(probe)[0];
  Request r = MakeRequest(3, Iota(6, 10), 5, 0, 1, 0, {static_cast<int32_t>((first + 1) % kVocab), first});
  Engine e;
  ASSERT_TRUE(e.engine->AddRequest(r).ok());
  auto done = e.engine->RunToCompletion();
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->size(), 1u);
  EXPECT_EQ((*done)[0].reason, FinishReason::stop_token);
  EXPECT_EQ((*done)[0].tokens, std::vector<int32_t>{first});
  e.ExpectPoolClean();
}

TEST(ServingEngineTest, ConstantLogitsDecodeGreedilyToTokenZero) {
  class Flat : public StepModel {
   public:
    absl::StatusOr<std::vector<std::vector<float>>> Run(const StepBatch& b,
                                                        KvPagePool&) override {
      return std::vector<std::vector<float>>(b.logits_rows.size(),
                                             std::vector<float>(kVocab, 0.5f));
    }
  } flat;
  Engine e;
  EngineOptions o = e.engine->options();
  auto engine = ServingEngine::Create(e.pool.get(), &flat, o);
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->AddRequest(MakeRequest(0, {7, 8}, 4)).ok());
  auto done = (*engine)->RunToCompletion();
  ASSERT_TRUE(done.ok());
  EXPECT_EQ((*done)[0].tokens, std::vector<int32_t>(4, 0));
}

TEST(ServingEngineTest, ChunkedPrefillRidesAlongWithDecodesFirst) {
  Engine e(Cfg(64, 4, 4, 4));
  std::vector<std::vector<int64_t>> requests_per_step;
  std::vector<std::vector<int32_t>> positions_per_step;
  std::vector<std::vector<uint8_t>> wants_per_step;
  e.model.observer = [&](const StepBatch& b) {
    requests_per_step.push_back(b.request_ids);
    positions_per_step.push_back(b.positions);
    wants_per_step.push_back(b.wants_logits);
  };
  Request a = MakeRequest(100, Iota(2), 6);
  Request b = MakeRequest(200, Iota(9, 20), 3);
  ASSERT_TRUE(e.engine->AddRequest(a).ok());
  ASSERT_TRUE(e.engine->Step().ok());  // a's prompt, 2 tokens
  ASSERT_TRUE(e.engine->AddRequest(b).ok());
  std::map<int64_t, FinishedRequest> done;
  while (e.engine->HasWork()) {
    auto step = e.engine->Step();
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_LE(step->num_tokens, 4);
    for (FinishedRequest& f : step->finished) done[f.id] = f;
  }
  using V64 = std::vector<int64_t>;
  using V32 = std::vector<int32_t>;
  using V8 = std::vector<uint8_t>;
  // Step 0: a's prompt. Then a decodes one token per step, first in the
  // batch, and b's 9 prompt tokens come in chunks of the 3 left.
  ASSERT_GE(requests_per_step.size(), 5u);
  EXPECT_EQ(requests_per_step[0], V64{100});
  EXPECT_EQ(positions_per_step[0], (V32{0, 1}));
  for (int s = 1; s <= 3; ++s) {
    EXPECT_EQ(requests_per_step[s], (V64{100, 200})) << s;
    EXPECT_EQ(wants_per_step[s], (V8{1, uint8_t(s == 3)})) << s;
  }
  EXPECT_EQ(positions_per_step[1], (V32{2, 0, 1, 2}));
  EXPECT_EQ(positions_per_step[2], (V32{3, 3, 4, 5}));
  EXPECT_EQ(positions_per_step[3], (V32{4, 6, 7, 8}));
  EXPECT_EQ(positions_per_step[4], (V32{5, 9}));  // both decode
  EXPECT_EQ(done[100].tokens, Oracle(a));
  EXPECT_EQ(done[200].tokens, Oracle(b));
  ServingEngineStats st = e.engine->Stats();
  EXPECT_EQ(st.partial_prefills, 2);
  EXPECT_EQ(st.prefill_tokens, 11);
  EXPECT_EQ(st.decode_tokens, (6 - 1) + (3 - 1));
  EXPECT_EQ(st.generated_tokens, 9);
  EXPECT_EQ(st.max_step_tokens, 4);
  e.ExpectPoolClean();
}

TEST(ServingEngineTest, OutOfPagesPreemptsTheLatestAndRecomputes) {
  // 6 pages of 4 = 24 tokens; two requests of up to 8 + 11 = 19 tokens each.
  Config c = Cfg(6, 4, 32, 4);
  Engine e(c);
  Request a = MakeRequest(1, Iota(8), 12);
  Request b = MakeRequest(2, Iota(8, 30), 12, 1.0f, 0.9f, 77);
  ASSERT_TRUE(e.engine->AddRequest(a).ok());
  ASSERT_TRUE(e.engine->AddRequest(b).ok());
  int64_t preempted_in_steps = 0;
  std::map<int64_t, FinishedRequest> done;
  while (e.engine->HasWork()) {
    auto step = e.engine->Step();
    ASSERT_TRUE(step.ok()) << step.status();
    preempted_in_steps += step->preemptions;
    ASSERT_TRUE(e.pool->CheckInvariants().ok());
    for (FinishedRequest& f : step->finished) done[f.id] = f;
  }
  ServingEngineStats st = e.engine->Stats();
  EXPECT_GE(st.preemptions, 1);
  EXPECT_EQ(st.preemptions, preempted_in_steps);
  EXPECT_GT(st.recomputed_tokens, 0);
  EXPECT_EQ(done[1].tokens, Oracle(a));
  EXPECT_EQ(done[2].tokens, Oracle(b));
  EXPECT_EQ(done[1].tokens, RunAlone(a, c).tokens);
  EXPECT_EQ(done[2].tokens, RunAlone(b, c).tokens);
  e.ExpectPoolClean();
}

TEST(ServingEngineTest, RequestTooLargeForThePoolFailsAndTheOthersComplete) {
  // 8 pages of 4 = 32 tokens.
  Config c = Cfg(8, 4, 16, 4);
  Engine e(c);
  // Its prompt alone needs 10 pages: fails at admission.
  Request huge_prompt = MakeRequest(10, Iota(40), 3);
  // 20 + 30 tokens: grows out of the pool while decoding, preempting the
  // others first; fails once alone, with the 13 tokens whose K/V fit.
  Request grows = MakeRequest(11, Iota(20, 5), 30);
  std::vector<Request> small = {MakeRequest(12, Iota(5, 7), 6),
                                MakeRequest(13, Iota(3, 9), 5, 0.8f, 1, 3),
                                MakeRequest(14, Iota(7, 2), 4)};
  ASSERT_TRUE(e.engine->AddRequest(grows).ok());
  ASSERT_TRUE(e.engine->AddRequest(huge_prompt).ok());
  for (const Request& r : small) ASSERT_TRUE(e.engine->AddRequest(r).ok());
  auto done = e.engine->RunToCompletion();
  ASSERT_TRUE(done.ok()) << done.status();
  std::map<int64_t, FinishedRequest> by_id = ById(std::move(*done));
  ASSERT_EQ(by_id.size(), 5u);

  const FinishedRequest& h = by_id[10];
  EXPECT_EQ(h.reason, FinishReason::failed);
  EXPECT_EQ(h.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(h.status.message(), "request 10 needs 10 KV pages")) << h.status;
  EXPECT_TRUE(h.tokens.empty());

  const FinishedRequest& g = by_id[11];
  EXPECT_EQ(g.reason, FinishReason::failed);
  EXPECT_EQ(g.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(g.status.message(), "request 11 needs 9 KV pages")) << g.status;
  std::vector<int32_t> full = Oracle(grows);
  ASSERT_EQ(g.tokens.size(), 13u);
  EXPECT_EQ(g.tokens, std::vector<int32_t>(full.begin(), full.begin() + 13));

  for (const Request& r : small) {
    EXPECT_NE(by_id[r.id].reason, FinishReason::failed) << by_id[r.id].status;
    EXPECT_EQ(by_id[r.id].tokens, Oracle(r)) << r.id;
  }
  ServingEngineStats st = e.engine->Stats();
  EXPECT_EQ(st.requests_failed, 2);
  EXPECT_EQ(st.requests_finished, 5);
  EXPECT_GE(st.preemptions, 1);
  e.ExpectPoolClean();
}

TEST(ServingEngineTest, AModelErrorTakesTheStepBackAndTheNextStepRetries) {
  Config c = Cfg(32, 4, 8, 4);
  Engine e(c);
  std::vector<Request> rs = {MakeRequest(1, Iota(11), 5), MakeRequest(2, Iota(3, 4), 6, 1.2f, 0.8f, 9),
                             MakeRequest(3, Iota(5, 8), 4)};
  for (const Request& r : rs) ASSERT_TRUE(e.engine->AddRequest(r).ok());
  e.model.fail_call = 3;
  std::map<int64_t, FinishedRequest> done;
  int errors = 0;
  while (e.engine->HasWork()) {
    auto step = e.engine->Step();
    if (!step.ok()) {
      ASSERT_EQ(++errors, 1) << step.status();
      EXPECT_EQ(step.status().code(), absl::StatusCode::kUnavailable);
      EXPECT_TRUE(Contains(step.status().message(), "StepModel::Run")) << step.status();
      EXPECT_TRUE(e.pool->CheckInvariants().ok());
      continue;
    }
    for (FinishedRequest& f : step->finished) done[f.id] = f;
  }
  EXPECT_EQ(errors, 1);
  for (const Request& r : rs) EXPECT_EQ(done[r.id].tokens, Oracle(r)) << r.id;
  e.ExpectPoolClean();
}

TEST(ServingEngineTest, WrongLogitsCountIsTheModelsError) {
  class Empty : public StepModel {
   public:
    absl::StatusOr<std::vector<std::vector<float>>> Run(const StepBatch&,
                                                        KvPagePool&) override {
      return std::vector<std::vector<float>>();
    }
  } empty;
  Engine e;
  auto engine = ServingEngine::Create(e.pool.get(), &empty, e.engine->options());
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->AddRequest(MakeRequest(0, {1, 2}, 2)).ok());
  auto step = (*engine)->Step();
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(step.status().message(), "expected 1 logits vectors")) << step.status();
  // The reservation was taken back; destroying the engine releases the rest.
  EXPECT_EQ(e.pool->Stats().tokens, 0);
  engine->reset();
  e.ExpectPoolClean();
}

TEST(ServingEngineTest, DestroyingTheEngineReleasesItsPages) {
  Engine e;
  ASSERT_TRUE(e.engine->AddRequest(MakeRequest(0, Iota(30), 10)).ok());
  ASSERT_TRUE(e.engine->Step().ok());
  EXPECT_GT(e.pool->Stats().used_pages, 0);
  e.engine.reset();
  e.ExpectPoolClean();
}

// ---------------------------------------------------------------------------
// Acceptance: randomized arrivals and batch mixes.

struct FuzzConfig {
  uint32_t seed;
  int num_requests;
  Config engine;
  /// The pool and budget are small enough that these must happen.
  bool expect_preemption;
  bool expect_chunking;
};

std::ostream& operator<<(std::ostream& os, const FuzzConfig& c) {
  return os << "seed " << c.seed << ", " << c.num_requests << " requests, "
            << c.engine.num_pages << " pages of " << c.engine.page_size
            << ", budget " << c.engine.max_batch_tokens << ", max_sequences "
            << c.engine.max_sequences;
}

class ServingEngineFuzzTest : public testing::TestWithParam<FuzzConfig> {};

TEST_P(ServingEngineFuzzTest, EachRequestsTokensEqualItsTokensAlone) {
  const FuzzConfig& fc = GetParam();
  const Config& c = fc.engine;
  std::mt19937_64 rng(fc.seed);
  auto uniform = [&](int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  // Every request fits in the pool alone: prompt + max_new_tokens - 1 <=
  // 70 + 40 - 1 tokens.
  ASSERT_GE(c.num_pages * c.page_size, 109);

  std::vector<Request> requests;
  std::vector<int64_t> arrival;
  for (int i = 0; i < fc.num_requests; ++i) {
    Request r;
    r.id = 1000 + 7 * i;
    std::vector<int32_t> prompt(uniform(1, 70));
    for (int32_t& t : prompt) t = static_cast<int32_t>(uniform(0, kVocab - 1));
    r.prompt = std::move(prompt);
    r.sampling.max_new_tokens = uniform(1, 4) == 1 ? uniform(1, 3) : uniform(1, 40);
    if (uniform(0, 1)) {
      const float temperatures[] = {0.6f, 1.0f, 1.4f};
      const float top_ps[] = {1.0f, 0.95f, 0.7f, 0.3f};
      r.sampling.temperature = temperatures[uniform(0, 2)];
      r.sampling.top_p = top_ps[uniform(0, 3)];
      r.sampling.seed = rng();
    }
    if (uniform(0, 9) < 3)
      for (int64_t k = uniform(1, 2); k > 0; --k)
        r.sampling.stop_tokens.push_back(static_cast<int32_t>(uniform(0, kVocab - 1)));
    requests.push_back(std::move(r));
    arrival.push_back(uniform(0, 2 * fc.num_requests / 3));
  }
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return arrival[a] < arrival[b]; });

  Engine e(c);
  std::map<int64_t, std::vector<int32_t>> streamed;
  std::map<int64_t, FinishedRequest> done;
  size_t next = 0;
  for (int64_t step = 0; next < order.size() || e.engine->HasWork(); ++step) {
    ASSERT_LT(step, 100000) << "no end";
    for (; next < order.size() && arrival[order[next]] <= step; ++next)
      ASSERT_TRUE(e.engine->AddRequest(requests[order[next]]).ok());
    auto result = e.engine->Step();
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_LE(result->num_tokens, c.max_batch_tokens);
    EXPECT_LE(result->num_sequences, c.max_sequences);
    ASSERT_TRUE(e.pool->CheckInvariants().ok()) << e.pool->CheckInvariants();
    for (const GeneratedToken& t : result->tokens) streamed[t.request_id].push_back(t.token);
    for (FinishedRequest& f : result->finished) {
      ASSERT_FALSE(done.count(f.id)) << f.id;
      EXPECT_EQ(f.tokens, streamed[f.id]) << f.id;
      done[f.id] = std::move(f);
    }
  }
  ServingEngineStats st = e.engine->Stats();
  SCOPED_TRACE(st.ToString());
  ASSERT_EQ(done.size(), requests.size());
  for (const Request& r : requests) {
    const FinishedRequest& f = done[r.id];
    ASSERT_NE(f.reason, FinishReason::failed) << r.id << ": " << f.status;
    const std::vector<int32_t> oracle = Oracle(r);
    EXPECT_EQ(f.tokens, oracle) << "request " << r.id;
    EXPECT_EQ(f.tokens, RunAlone(r, c).tokens) << "request " << r.id;
    const bool stopped = std::find(r.sampling.stop_tokens.begin(), r.sampling.stop_tokens.end(),
                                   f.tokens.back()) != r.sampling.stop_tokens.end();
    EXPECT_EQ(f.reason, stopped ? FinishReason::stop_token : FinishReason::max_new_tokens);
  }
  EXPECT_EQ(st.requests_finished, fc.num_requests);
  EXPECT_EQ(st.requests_failed, 0);
  EXPECT_EQ(st.waiting + st.running, 0);
  EXPECT_EQ(st.batched_tokens, st.prefill_tokens + st.decode_tokens);
  EXPECT_LE(st.max_step_tokens, c.max_batch_tokens);
  if (fc.expect_preemption) {
    EXPECT_GT(st.preemptions, 0);
    EXPECT_GT(st.recomputed_tokens, 0);
  }
  if (fc.expect_chunking) {
    EXPECT_GT(st.partial_prefills, 0);
  }
  // Continuous batching: steps mixed several sequences.
  EXPECT_GT(st.tokens_per_step(), 2.0);
  std::cout << "[ stats    ] " << st.ToString() << "\n";
  e.ExpectPoolClean();
}

std::vector<FuzzConfig> FuzzConfigs() {
  return {
      {1, 40, Cfg(32, 4, 16, 8), true, true},
      {2, 60, Cfg(16, 8, 24, 12), true, true},
      {3, 20, Cfg(30, 4, 64, 16), true, true},
      {4, 50, Cfg(8, 16, 32, 32), true, true},
      {5, 30, Cfg(28, 4, 16, 16), true, true},
      {6, 45, Cfg(40, 4, 48, 6), true, true},
      // A roomy pool: chunking without preemption.
      {7, 30, Cfg(512, 4, 32, 32), false, true},
  };
}

INSTANTIATE_TEST_SUITE_P(ServingEngineRandom, ServingEngineFuzzTest,
                         testing::ValuesIn(FuzzConfigs()));

}  // namespace
}  // namespace llmc::rt
