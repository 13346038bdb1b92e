// Continuous-batching scheduler of llmc's serving engine: iteration-level
// scheduling over a paged KV cache, independent of how the model runs.
//
// Orca (Yu et al., OSDI 2022) schedules at the granularity of one model
// iteration: requests join and leave the running batch between steps
// instead of waiting for a whole batch to finish. Sarathi-Serve (Agrawal et
// al., OSDI 2024) bounds each step by a token budget and splits prompts into
// chunks that ride along with the decodes (chunked prefill), so a long
// prompt never stalls the running decodes. vLLM's scheduler adds the paged
// KV cache (KvPagePool) and recompute preemption: when the pages run out,
// the most recently admitted request gives its pages back and is later
// recomputed from its prompt and the tokens it has generated.
//
// One step: the running decodes get one token each, then prefill chunks
// (running requests that have not finished their prompt, then waiting
// requests admitted FCFS) fill the rest of the budget; pages are reserved
// with KvPagePool::Append, preempting when they run out; the model runs on
// the ragged batch (StepBatch: the operand layout of llm.paged_attention
// and llm.paged_kv_append); each sequence whose prompt is now computed
// samples a token; requests that hit a stop token or max_new_tokens retire
// and release their pages.
#ifndef LLMC_RUNTIME_SERVINGENGINE_H
#define LLMC_RUNTIME_SERVINGENGINE_H

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "llmc/runtime/CudaTypes.h"
#include "llmc/runtime/KvPagePool.h"

namespace llmc::rt {

/// How a request chooses its tokens.
struct SamplingParams {
  /// 0: greedy (argmax, the lowest token id on ties); > 0: sample from
  /// softmax(logits / temperature). Finite and >= 0.
  float temperature = 0;
  /// Nucleus sampling (Holtzman et al., ICLR 2020): sample only among the
  /// most probable tokens whose probabilities sum to at least top_p. In
  /// (0, 1]; ignored when greedy.
  float top_p = 1;
  /// With the request id and the token's index, seeds the token's random
  /// draw: the tokens do not depend on the batch a request runs in.
  uint64_t seed = 0;
  /// Tokens to generate at most (>= 1).
  int64_t max_new_tokens = 16;
  /// Generation ends after any of these tokens (it is included in the
  /// output). Each in [0, vocab).
  std::vector<int32_t> stop_tokens;
};

struct Request {
  /// Unique among the engine's unfinished requests (may be reused once the
  /// request with that id has finished).
  int64_t id = 0;
  /// Non-empty; each token in [0, vocab).
  std::vector<int32_t> prompt;
  SamplingParams sampling;
};

/// What one model step gets: B sequences with T new tokens in all, in the
/// layout of llm.paged_kv_append / llm.paged_attention. Sequence b's new
/// tokens are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of the packed
/// [T] arrays, at positions seq_lens[b] - n_b .. seq_lens[b] - 1.
struct StepBatch {
  /// [T] new tokens, packed by sequence.
  std::vector<int32_t> token_ids;
  /// [T] their positions in their sequences (RoPE positions).
  std::vector<int32_t> positions;
  /// [T] the KV slot of each new token (page * page_size + row; vLLM's
  /// slot_mapping): where its K/V rows go.
  std::vector<int64_t> slots;
  /// [B + 1] from 0 to T.
  std::vector<int32_t> cu_seqlens_q;
  /// [B] each sequence's length including this step's tokens.
  std::vector<int32_t> seq_lens;
  /// [B * max_pages] row-major int32 page ids (KvPagePool::FillBatchMetadata;
  /// entries past a sequence's pages are 0).
  std::vector<int32_t> block_table;
  /// Columns of block_table: the most pages any sequence of the batch has.
  int64_t max_pages = 0;
  /// [B] 1 when sequence b's last token's logits are wanted (it finishes
  /// its prompt or decodes), 0 for a prefill chunk that does not finish the
  /// prompt.
  std::vector<uint8_t> wants_logits;
  /// The rows of [T] whose logits are wanted (the last row of each sequence
  /// with wants_logits), in batch order: what a model gathers before its
  /// LM head.
  std::vector<int32_t> logits_rows;
  /// [B] the KvPagePool sequence of each batch entry.
  std::vector<int64_t> sequences;
  /// [B] the request of each batch entry.
  std::vector<int64_t> request_ids;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_sequences() const { return static_cast<int64_t>(seq_lens.size()); }
};

/// The model, as the engine sees it. Run writes the new tokens' K/V into
/// their slots of the pool's pages, runs attention over each sequence's
/// pages (positions 0 .. seq_lens[b] - 1) and returns the logits (`vocab`
/// floats) of the last token of each sequence with wants_logits, in batch
/// order (logits_rows.size() vectors). The engine has already applied the
/// pool's pending copies.
class StepModel {
 public:
  virtual ~StepModel() = default;
  virtual absl::StatusOr<std::vector<std::vector<float>>> Run(
      const StepBatch& batch, KvPagePool& pool) = 0;
};

struct EngineOptions {
  /// Token budget of one step: T <= max_batch_tokens. >= max_sequences, so
  /// every running decode fits in every step.
  int64_t max_batch_tokens = 256;
  /// Running requests (B) at most; >= 1.
  int64_t max_sequences = 32;
  /// Logits per sequence; >= 1 and <= INT32_MAX.
  int64_t vocab = 0;
  /// The stream ApplyPendingCopies enqueues the copy-on-write copies on
  /// (the model's stream).
  CUstream stream = nullptr;
};

enum class FinishReason { stop_token, max_new_tokens, failed };
const char* FinishReasonName(FinishReason reason);

struct GeneratedToken {
  int64_t request_id = 0;
  int32_t token = 0;
};

struct FinishedRequest {
  int64_t id = 0;
  FinishReason reason = FinishReason::max_new_tokens;
  /// OK unless `reason` is failed: then why (ResourceExhausted when the
  /// request alone needs more KV pages than the pool has).
  absl::Status status;
  /// Every token generated, the stop token included.
  std::vector<int32_t> tokens;
};

/// What one step did.
struct StepResult {
  /// The token each sampling sequence produced this step, in batch order
  /// (at most one per request).
  std::vector<GeneratedToken> tokens;
  /// The requests that finished this step (or failed), their pages
  /// released.
  std::vector<FinishedRequest> finished;
  /// T and B of the model step (0 when the model did not run).
  int64_t num_tokens = 0;
  int64_t num_sequences = 0;
  /// Requests preempted this step.
  int64_t preemptions = 0;
};

struct ServingEngineStats {
  /// Model steps run.
  int64_t steps = 0;
  /// Tokens the model steps computed: prefill (prompt chunks and
  /// recomputation after preemption) plus decode (one generated token of a
  /// sequence whose prompt was computed).
  int64_t batched_tokens = 0;
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  /// Tokens computed again after a preemption (part of prefill_tokens).
  int64_t recomputed_tokens = 0;
  /// The largest T of a step.
  int64_t max_step_tokens = 0;
  /// Prefill chunks that did not finish their prompt (chunked prefill).
  int64_t partial_prefills = 0;
  int64_t preemptions = 0;
  int64_t requests_added = 0;
  int64_t requests_finished = 0;
  /// Finished with FinishReason::failed (part of requests_finished).
  int64_t requests_failed = 0;
  int64_t generated_tokens = 0;
  /// Now.
  int64_t waiting = 0;
  int64_t running = 0;
  /// The pool now: pages in use, waste.
  KvPagePoolStats kv;
  double tokens_per_step() const {
    return steps == 0 ? 0.0 : double(batched_tokens) / double(steps);
  }
  std::string ToString() const;
};

/// The token `logits` choose under `params` as the `token_index`-th token
/// (from 0) of request `request_id`: greedy when temperature is 0 (argmax,
/// lowest id on ties; NaN never wins), else a draw from the top-p nucleus
/// of softmax(logits / temperature) (probabilities in double; ties in
/// probability ordered by id) with a counter-based random number from
/// (seed, request_id, token_index), so it is the same in any batch and on
/// any platform. `params` is assumed valid (ServingEngine::AddRequest
/// checks); logits must be non-empty.
int32_t SampleToken(absl::Span<const float> logits, const SamplingParams& params,
                    int64_t request_id, int64_t token_index);

/// The continuous-batching scheduler (see the file comment).
///
/// Scheduling policy, one Step():
///  1. Budget: every running request with one token left to compute (a
///     decode) gets it; then running requests still computing their prompt
///     get chunks of what remains of max_batch_tokens, in admission order.
///  2. Pages, in admission order (the priority order): KvPagePool::Append
///     of each request's tokens. When the pool is out of pages, the most
///     recently admitted running request is preempted (vLLM's recompute
///     preemption: its pages released, it goes back to the front of the
///     waiting queue and later recomputes its prompt and generated tokens),
///     until the request fits or is itself the most recently admitted: then
///     it is preempted, or, when it is the only running request, it fails
///     with ResourceExhausted (it needs more pages than the pool has).
///  3. Admission, only when nothing was preempted this step: waiting
///     requests FCFS, each with a first chunk of at most the budget left,
///     while the budget, max_sequences and the free pages allow (admission
///     never preempts; the first request that does not fit stops it). A
///     request whose tokens to compute alone need more than the pool's pages
///     fails with ResourceExhausted.
///  4. The pool's pending copies, the model on the batch (decodes first,
///     then prefill chunks), sampling (SampleToken with the token's index
///     among the request's generated tokens), retirement.
/// The earliest admitted running request is never preempted, so every step
/// either computes tokens or finishes a request, and Step() never
/// deadlocks. A request's tokens are the same as when it runs alone (given a
/// model whose logits depend only on the sequence's own tokens).
///
/// The engine owns the pool sequences it adds; other users of the pool only
/// reduce the pages it can use. On an error of the model or of the page
/// copies, Step() returns it and takes back the step's token reservations:
/// the next Step() retries.
///
/// Not thread-safe: one caller drives Step(); AddRequest may be called
/// between steps (from that caller, or serialized with it). `pool` and
/// `model` must outlive the engine.
class ServingEngine {
 public:
  /// InvalidArgument naming the field for a null pool or model, or options
  /// out of range.
  static absl::StatusOr<std::unique_ptr<ServingEngine>> Create(
      KvPagePool* pool, StepModel* model, EngineOptions options);
  ~ServingEngine();
  ServingEngine(const ServingEngine&) = delete;
  ServingEngine& operator=(const ServingEngine&) = delete;

  /// Queues `request` (FCFS). InvalidArgument for an empty prompt, tokens
  /// outside [0, vocab), parameters out of range, or an id in use by an
  /// unfinished request.
  absl::Status AddRequest(Request request);
  /// One iteration (see the class comment). With nothing to do, returns an
  /// empty result without running the model.
  absl::StatusOr<StepResult> Step();
  /// Requests waiting or running (or failures not yet reported).
  bool HasWork() const;
  /// Steps until !HasWork(); the finished requests in the order they
  /// finished.
  absl::StatusOr<std::vector<FinishedRequest>> RunToCompletion();

  ServingEngineStats Stats() const;
  const EngineOptions& options() const { return options_; }

 private:
  struct RequestState;
  ServingEngine(KvPagePool* pool, StepModel* model, EngineOptions options);
  /// Gives `r`'s pages back and queues it at the front of the waiting queue
  /// (it must be the last running request).
  absl::Status Preempt(RequestState* r);
  /// Ends `r` (not in the running list or the waiting queue any more):
  /// releases its pool sequence and moves it into `out`.
  absl::Status Retire(RequestState* r, FinishReason reason, absl::Status status,
                      std::vector<FinishedRequest>& out);
  /// Undoes this step's Append of every running request (an error after
  /// pages were reserved): truncates its pool sequence back to the tokens
  /// computed.
  void TakeBackReservations();

  KvPagePool* pool_;
  StepModel* model_;
  EngineOptions options_;
  /// The unfinished requests by id.
  absl::flat_hash_map<int64_t, std::unique_ptr<RequestState>> requests_;
  /// FCFS; preempted requests go back to the front.
  std::deque<RequestState*> waiting_;
  /// Admission order: the front is the highest priority.
  std::vector<RequestState*> running_;
  /// Failures of a step whose model call failed, reported by the next step.
  std::vector<FinishedRequest> unreported_;
  ServingEngineStats stats_;
};

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_SERVINGENGINE_H
