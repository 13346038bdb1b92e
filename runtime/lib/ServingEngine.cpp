#include "llmc/runtime/ServingEngine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

int64_t CeilDiv(int64_t a, int64_t b) { return a == 0 ? 0 : (a - 1) / b + 1; }

/// SplitMix64's finalizer (Steele et al., OOPSLA 2014): a bijective mix of
/// 64 bits.
uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// A uniform double in [0, 1) from (seed, request, token index) alone
/// (counter-based: no generator state to carry between steps or batches).
double UniformDraw(uint64_t seed, int64_t request_id, int64_t token_index) {
  uint64_t z = Mix64(Mix64(Mix64(seed) ^ static_cast<uint64_t>(request_id)) ^
                     static_cast<uint64_t>(token_index));
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

/// Logit for ordering: NaN below everything.
float OrderKey(float x) { return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x; }

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop_token: return "stop_token";
    case FinishReason::max_new_tokens: return "max_new_tokens";
    case FinishReason::failed: return "failed";
  }
  return "unknown";
}

std::string ServingEngineStats::ToString() const {
  return absl::StrFormat(
      "%d steps, %d tokens (%.2f per step, at most %d): %d prefill (%d "
      "recomputed, %d partial chunks), %d decode; %d preemptions; requests: "
      "%d added, %d finished (%d failed), %d waiting, %d running; %d tokens "
      "generated; KV: %s",
      steps, batched_tokens, tokens_per_step(), max_step_tokens, prefill_tokens,
      recomputed_tokens, partial_prefills, decode_tokens, preemptions,
      requests_added, requests_finished, requests_failed, waiting, running,
      generated_tokens, kv.ToString());
}

int32_t SampleToken(absl::Span<const float> logits, const SamplingParams& params,
                    int64_t request_id, int64_t token_index) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (n == 0) return 0;
  // Greedy: the first maximum (`>` keeps the lowest id), NaN skipped.
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (OrderKey(logits[i]) > OrderKey(logits[best])) best = i;
  const double top = OrderKey(logits[best]);
  if (params.temperature <= 0 || !std::isfinite(top)) return static_cast<int32_t>(best);

  // softmax(logits / temperature), unnormalized: the maximum has weight 1.
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  std::vector<double> weight(n);
  for (int64_t i = 0; i < n; ++i)
    weight[i] = std::exp((static_cast<double>(OrderKey(logits[i])) - top) * inv_t);
  const double u = UniformDraw(params.seed, request_id, token_index);

  if (params.top_p >= 1) {
    const double total = std::accumulate(weight.begin(), weight.end(), 0.0);
    const double target = u * total;
    double acc = 0;
    int64_t last = best;
    for (int64_t i = 0; i < n; ++i) {
      if (weight[i] <= 0) continue;
      acc += weight[i];
      last = i;
      if (target < acc) return static_cast<int32_t>(i);
    }
    return static_cast<int32_t>(last);  // rounding: the last token with weight
  }

  // Nucleus: tokens by decreasing logit (ties: lowest id first), the
  // shortest prefix holding at least top_p of the probability.
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return OrderKey(logits[a]) > OrderKey(logits[b]);
  });
  const double total = std::accumulate(weight.begin(), weight.end(), 0.0);
  const double threshold = static_cast<double>(params.top_p) * total;
  double kept = 0;
  int64_t k = 0;
  while (k < n) {
    kept += weight[order[k]];
    ++k;
    if (kept >= threshold) break;
  }
  const double target = u * kept;
  double acc = 0;
  for (int64_t i = 0; i < k; ++i) {
    acc += weight[order[i]];
    if (target < acc) return order[i];
  }
  return order[k - 1];
}

/// A request as the scheduler tracks it.
struct ServingEngine::RequestState {
  int64_t id = 0;
  SamplingParams sampling;
  /// Prompt, then the generated tokens.
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;
  /// Its KvPagePool sequence while running; -1 while waiting.
  int64_t pool_seq = -1;
  /// Tokens whose K/V are in its pages (tokens[0 .. computed)).
  int64_t computed = 0;
  /// The most tokens it ever had computed (what a preemption throws away is
  /// recomputed up to here).
  int64_t high_water = 0;
  /// This step: tokens to compute, whether as a decode, and their slots
  /// (non-empty once reserved).
  int64_t scheduled = 0;
  bool decode = false;
  std::vector<int64_t> slots;

  int64_t remaining() const { return static_cast<int64_t>(tokens.size()) - computed; }
  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
};

absl::StatusOr<std::unique_ptr<ServingEngine>> ServingEngine::Create(
    KvPagePool* pool, StepModel* model, EngineOptions options) {
  if (!pool) return absl::InvalidArgumentError("ServingEngine::Create: pool is null");
  if (!model) return absl::InvalidArgumentError("ServingEngine::Create: model is null");
  if (options.max_batch_tokens < 1 || options.max_batch_tokens > kInt32Max)
    return absl::InvalidArgumentError(absl::StrCat(
        "EngineOptions.max_batch_tokens: expected 1 .. ", kInt32Max, ", found ",
        options.max_batch_tokens));
  if (options.max_sequences < 1 || options.max_sequences > options.max_batch_tokens)
    return absl::InvalidArgumentError(absl::StrCat(
        "EngineOptions.max_sequences: expected 1 .. max_batch_tokens (",
        options.max_batch_tokens, ", so every decode fits in a step), found ",
        options.max_sequences));
  if (options.vocab < 1 || options.vocab > kInt32Max)
    return absl::InvalidArgumentError(absl::StrCat(
        "EngineOptions.vocab: expected 1 .. ", kInt32Max, ", found ", options.vocab));
  return std::unique_ptr<ServingEngine>(new ServingEngine(pool, model, options));
}

ServingEngine::ServingEngine(KvPagePool* pool, StepModel* model, EngineOptions options)
    : pool_(pool), model_(model), options_(options) {}

ServingEngine::~ServingEngine() {
  for (RequestState* r : running_)
    if (r->pool_seq >= 0) (void)pool_->Release(r->pool_seq);
}

absl::Status ServingEngine::AddRequest(Request request) {
  const int64_t vocab = options_.vocab;
  const SamplingParams& s = request.sampling;
  auto bad = [&](auto&&... what) {
    return absl::InvalidArgumentError(
        absl::StrCat("ServingEngine::AddRequest: request ", request.id, ": ", what...));
  };
  if (request.prompt.empty()) return bad("prompt: expected at least one token, found none");
  for (size_t i = 0; i < request.prompt.size(); ++i)
    if (request.prompt[i] < 0 || request.prompt[i] >= vocab)
      return bad("prompt[", i, "]: expected a token in [0, ", vocab, "), found ",
                 request.prompt[i]);
  if (!std::isfinite(s.temperature) || s.temperature < 0)
    return bad("temperature: expected finite and >= 0, found ", s.temperature);
  if (!(s.top_p > 0 && s.top_p <= 1))
    return bad("top_p: expected in (0, 1], found ", s.top_p);
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (s.max_new_tokens < 1 || s.max_new_tokens > kInt32Max - prompt_len)
    return bad("max_new_tokens: expected 1 .. ", kInt32Max - prompt_len,
               " (int32 positions after a prompt of ", prompt_len, "), found ",
               s.max_new_tokens);
  for (size_t i = 0; i < s.stop_tokens.size(); ++i)
    if (s.stop_tokens[i] < 0 || s.stop_tokens[i] >= vocab)
      return bad("stop_tokens[", i, "]: expected a token in [0, ", vocab, "), found ",
                 s.stop_tokens[i]);
  if (requests_.contains(request.id))
    return bad("id: already used by an unfinished request");

  auto r = std::make_unique<RequestState>();
  r->id = request.id;
  r->sampling = std::move(request.sampling);
  r->tokens = std::move(request.prompt);
  r->prompt_len = prompt_len;
  waiting_.push_back(r.get());
  requests_[r->id] = std::move(r);
  ++stats_.requests_added;
  return absl::OkStatus();
}

bool ServingEngine::HasWork() const {
  return !waiting_.empty() || !running_.empty() || !unreported_.empty();
}

absl::Status ServingEngine::Preempt(RequestState* r) {
  if (running_.empty() || running_.back() != r)
    return InternalBug("serving engine: preempting request ", r->id,
                       ", not the most recently admitted running request");
  absl::Status released = pool_->Release(r->pool_seq);
  if (!released.ok())
    return InternalBug("serving engine: releasing the pages of preempted request ",
                       r->id, ": ", released.message());
  r->pool_seq = -1;
  r->computed = 0;
  r->scheduled = 0;
  r->decode = false;
  r->slots.clear();
  running_.pop_back();
  waiting_.push_front(r);
  ++stats_.preemptions;
  return absl::OkStatus();
}

absl::Status ServingEngine::Retire(RequestState* r, FinishReason reason,
                                   absl::Status status,
                                   std::vector<FinishedRequest>& out) {
  if (r->pool_seq >= 0) {
    absl::Status released = pool_->Release(r->pool_seq);
    if (!released.ok())
      return InternalBug("serving engine: releasing the pages of finished request ",
                         r->id, ": ", released.message());
  }
  FinishedRequest f;
  f.id = r->id;
  f.reason = reason;
  f.status = std::move(status);
  f.tokens.assign(r->tokens.begin() + r->prompt_len, r->tokens.end());
  out.push_back(std::move(f));
  ++stats_.requests_finished;
  if (reason == FinishReason::failed) ++stats_.requests_failed;
  requests_.erase(r->id);  // destroys *r
  return absl::OkStatus();
}

void ServingEngine::TakeBackReservations() {
  for (RequestState* r : running_) {
    if (!r->slots.empty()) (void)pool_->Truncate(r->pool_seq, r->computed);
    r->slots.clear();
    r->scheduled = 0;
    r->decode = false;
  }
}

absl::StatusOr<StepResult> ServingEngine::Step() {
  StepResult result;
  result.finished = std::move(unreported_);
  unreported_.clear();
  const int64_t page_size = pool_->options().page_size;
  const int64_t num_pages = pool_->options().num_pages;
  int64_t budget = options_.max_batch_tokens;

  // 1. Budget: decodes first (running_.size() <= max_sequences <=
  // max_batch_tokens, so all of them fit), then the running prefills'
  // chunks in admission order.
  for (RequestState* r : running_) {
    r->scheduled = 0;
    r->decode = r->remaining() == 1;
    r->slots.clear();
    if (r->decode) {
      r->scheduled = 1;
      --budget;
    }
  }
  for (RequestState* r : running_) {
    if (r->decode || budget == 0) continue;
    r->scheduled = std::min(r->remaining(), budget);
    budget -= r->scheduled;
  }

  // 2. Pages, in admission order; the most recently admitted request gives
  // way. Victims come from the back of running_, after `r`: none of them
  // has reserved pages this step yet.
  for (size_t i = 0; i < running_.size(); ++i) {
    RequestState* r = running_[i];
    if (r->scheduled == 0) continue;
    for (;;) {
      absl::StatusOr<std::vector<int64_t>> slots =
          pool_->Append(r->pool_seq, r->scheduled);
      if (slots.ok()) {
        r->slots = std::move(*slots);
        break;
      }
      if (!absl::IsResourceExhausted(slots.status())) {
        TakeBackReservations();
        return InternalBug("serving engine: reserving ", r->scheduled,
                           " token(s) of request ", r->id, ": ",
                           slots.status().message());
      }
      RequestState* last = running_.back();
      if (last != r) {
        LLMC_RT_RETURN_IF_ERROR(Preempt(last));
        ++result.preemptions;
        continue;
      }
      if (running_.size() == 1) {
        // Alone and still out of pages: it can never fit.
        const int64_t length = r->computed + r->scheduled;
        absl::Status why = absl::ResourceExhaustedError(absl::StrCat(
            "serving engine: request ", r->id, " needs ", CeilDiv(length, page_size),
            " KV pages for its ", length, " tokens, more than the pool can give it "
            "running alone (", num_pages, " pages of ", page_size, " tokens; ",
            slots.status().message(), ")"));
        running_.pop_back();
        LLMC_RT_RETURN_IF_ERROR(
            Retire(r, FinishReason::failed, std::move(why), result.finished));
      } else {
        LLMC_RT_RETURN_IF_ERROR(Preempt(r));
        ++result.preemptions;
      }
      break;
    }
  }

  // 3. Admission, FCFS, unless this step preempted (a preempted request
  // would come straight back).
  while (result.preemptions == 0 && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < options_.max_sequences) {
    RequestState* r = waiting_.front();
    const int64_t length = static_cast<int64_t>(r->tokens.size());
    if (CeilDiv(length, page_size) > num_pages) {
      waiting_.pop_front();
      absl::Status why = absl::ResourceExhaustedError(absl::StrCat(
          "serving engine: request ", r->id, " needs ", CeilDiv(length, page_size),
          " KV pages for its ", length, " tokens (prompt ", r->prompt_len,
          ", generated ", r->generated(), "), more than the pool's ", num_pages,
          " pages of ", page_size, " tokens"));
      LLMC_RT_RETURN_IF_ERROR(
          Retire(r, FinishReason::failed, std::move(why), result.finished));
      continue;
    }
    const int64_t chunk = std::min(length, budget);
    const int64_t seq = pool_->AddSequence();
    absl::StatusOr<std::vector<int64_t>> slots = pool_->Append(seq, chunk);
    if (!slots.ok()) {
      (void)pool_->Release(seq);
      if (!absl::IsResourceExhausted(slots.status())) {
        TakeBackReservations();
        return InternalBug("serving engine: reserving ", chunk,
                           " token(s) of new request ", r->id, ": ",
                           slots.status().message());
      }
      if (!running_.empty()) break;  // wait for pages
      // Nothing of the engine's holds pages: other users of the pool do.
      waiting_.pop_front();
      absl::Status why = absl::ResourceExhaustedError(absl::StrCat(
          "serving engine: request ", r->id, " cannot get ", CeilDiv(chunk, page_size),
          " KV pages with no request running: other users of the pool hold them (",
          slots.status().message(), ")"));
      LLMC_RT_RETURN_IF_ERROR(
          Retire(r, FinishReason::failed, std::move(why), result.finished));
      continue;
    }
    waiting_.pop_front();
    r->pool_seq = seq;
    r->computed = 0;
    r->scheduled = chunk;
    r->decode = false;
    r->slots = std::move(*slots);
    running_.push_back(r);
    budget -= chunk;
  }

  // 4. The batch: decodes, then prefill chunks, each in admission order.
  std::vector<RequestState*> batch;
  for (int pass = 0; pass < 2; ++pass)
    for (RequestState* r : running_)
      if (r->scheduled > 0 && r->decode == (pass == 0)) batch.push_back(r);
  if (batch.empty()) return result;

  StepBatch b;
  const size_t num_seqs = batch.size();
  b.cu_seqlens_q.push_back(0);
  for (RequestState* r : batch) {
    if (static_cast<int64_t>(r->slots.size()) != r->scheduled) {
      TakeBackReservations();
      return InternalBug("serving engine: request ", r->id, " has ", r->slots.size(),
                         " slots for ", r->scheduled, " scheduled tokens");
    }
    for (int64_t j = 0; j < r->scheduled; ++j) {
      b.token_ids.push_back(r->tokens[r->computed + j]);
      b.positions.push_back(static_cast<int32_t>(r->computed + j));
      b.slots.push_back(r->slots[j]);
    }
    b.cu_seqlens_q.push_back(static_cast<int32_t>(b.token_ids.size()));
    const int64_t length = r->computed + r->scheduled;
    const bool wants = length == static_cast<int64_t>(r->tokens.size());
    b.wants_logits.push_back(wants ? 1 : 0);
    if (wants) b.logits_rows.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
    b.max_pages = std::max(b.max_pages, CeilDiv(length, page_size));
    b.sequences.push_back(r->pool_seq);
    b.request_ids.push_back(r->id);
  }
  b.block_table.assign(num_seqs * b.max_pages, 0);
  b.seq_lens.assign(num_seqs, 0);
  absl::Status filled =
      pool_->FillBatchMetadata(b.sequences, b.max_pages, absl::MakeSpan(b.block_table),
                               absl::MakeSpan(b.seq_lens));
  for (size_t i = 0; filled.ok() && i < num_seqs; ++i)
    if (b.seq_lens[i] != batch[i]->computed + batch[i]->scheduled)
      filled = InternalBug("serving engine: request ", batch[i]->id, " has ",
                           b.seq_lens[i], " tokens in the pool, expected ",
                           batch[i]->computed + batch[i]->scheduled);
  if (!filled.ok()) {
    TakeBackReservations();
    if (filled.code() == absl::StatusCode::kInternal) return filled;
    return InternalBug("serving engine: batch metadata: ", filled.message());
  }

  // 5. Copy-on-write copies, then the model.
  auto fail_step = [&](absl::Status status) {
    TakeBackReservations();
    unreported_ = std::move(result.finished);
    return status;
  };
  absl::Status copied = pool_->ApplyPendingCopies(options_.stream);
  if (!copied.ok()) return fail_step(Annotate(copied, "serving engine: step"));
  absl::StatusOr<std::vector<std::vector<float>>> logits = model_->Run(b, *pool_);
  if (!logits.ok())
    return fail_step(Annotate(logits.status(), "serving engine: StepModel::Run"));
  if (logits->size() != b.logits_rows.size())
    return fail_step(absl::FailedPreconditionError(absl::StrCat(
        "serving engine: StepModel::Run: expected ", b.logits_rows.size(),
        " logits vectors (one per sequence that wants logits), found ",
        logits->size())));
  for (size_t k = 0; k < logits->size(); ++k)
    if (static_cast<int64_t>((*logits)[k].size()) != options_.vocab)
      return fail_step(absl::FailedPreconditionError(absl::StrCat(
          "serving engine: StepModel::Run: logits vector ", k, ": expected ",
          options_.vocab, " (vocab) floats, found ", (*logits)[k].size())));

  // 6. Bookkeeping, sampling, retirement.
  const int64_t num_tokens = b.num_tokens();
  result.num_tokens = num_tokens;
  result.num_sequences = static_cast<int64_t>(num_seqs);
  ++stats_.steps;
  stats_.batched_tokens += num_tokens;
  stats_.max_step_tokens = std::max(stats_.max_step_tokens, num_tokens);
  std::vector<std::pair<RequestState*, FinishReason>> done;
  size_t k = 0;
  for (size_t i = 0; i < num_seqs; ++i) {
    RequestState* r = batch[i];
    const int64_t n = r->scheduled;
    stats_.recomputed_tokens +=
        std::max<int64_t>(0, std::min(r->computed + n, r->high_water) - r->computed);
    if (r->decode && r->computed >= r->prompt_len)
      stats_.decode_tokens += n;
    else
      stats_.prefill_tokens += n;
    r->computed += n;
    r->high_water = std::max(r->high_water, r->computed);
    r->scheduled = 0;
    r->decode = false;
    r->slots.clear();
    if (!b.wants_logits[i]) {
      ++stats_.partial_prefills;
      continue;
    }
    const int32_t token = SampleToken((*logits)[k++], r->sampling, r->id, r->generated());
    r->tokens.push_back(token);
    ++stats_.generated_tokens;
    result.tokens.push_back(GeneratedToken{r->id, token});
    const std::vector<int32_t>& stop = r->sampling.stop_tokens;
    if (std::find(stop.begin(), stop.end(), token) != stop.end())
      done.emplace_back(r, FinishReason::stop_token);
    else if (r->generated() >= r->sampling.max_new_tokens)
      done.emplace_back(r, FinishReason::max_new_tokens);
  }
  if (!done.empty()) {
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [&](RequestState* r) {
                                    return std::any_of(done.begin(), done.end(),
                                                       [&](const auto& d) {
                                                         return d.first == r;
                                                       });
                                  }),
                   running_.end());
    for (auto& [r, reason] : done)
      LLMC_RT_RETURN_IF_ERROR(Retire(r, reason, absl::OkStatus(), result.finished));
  }
  return result;
}

absl::StatusOr<std::vector<FinishedRequest>> ServingEngine::RunToCompletion() {
  std::vector<FinishedRequest> all;
  while (HasWork()) {
    LLMC_RT_ASSIGN_OR_RETURN(StepResult step, Step());
    if (step.num_tokens == 0 && step.finished.empty())
      return InternalBug("serving engine: a step made no progress with ",
                         waiting_.size(), " waiting and ", running_.size(),
                         " running requests");
    for (FinishedRequest& f : step.finished) all.push_back(std::move(f));
  }
  return all;
}

ServingEngineStats ServingEngine::Stats() const {
  ServingEngineStats s = stats_;
  s.waiting = static_cast<int64_t>(waiting_.size());
  s.running = static_cast<int64_t>(running_.size());
  s.kv = pool_->Stats();
  return s;
}

}  // namespace llmc::rt
