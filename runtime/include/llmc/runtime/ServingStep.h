// A compiled serving step as the serving engine's model: the ragged batch of
// a continuous-batching step padded to a few bucketed shapes, each bucket one
// executable replayed as a CUDA graph.
//
// A serving-step function (examples/tiny_llama_serving_step.mlir, or
// llmc.serving.llama_serving_step_mlir for HF LLaMA/Mistral configs) takes,
// in order (every integer array int32):
//   0 tokens [T]          the new tokens, packed by sequence;
//   1 positions [T]       their positions (RoPE);
//   2 cu_seqlens_q [B+1]  sequence b's rows are cu_seqlens_q[b] .. [b+1]-1;
//   3 seq_lens [B]        each sequence's length with this step's tokens;
//   4 block_table [B, MP] page ids (MP columns, static);
//   5 logits_rows [R]     the packed rows whose logits the step returns;
//   6 .. 6+2L-1           layer l's key pages then value pages, each
//                         [P, page_size, Hkv, D], donated and updated in place
//                         (results 1 .. 2L alias them);
//   6+2L ..               the weights (parameters), any number.
// and returns logits [R, vocab] (f32, bf16 or f16) then the 2L pages. The
// dynamic dims are named tokens (T), seqs (B), seqs_plus_one (B + 1) and
// logit_rows (R) (llm.dim_names). This is the operand layout of
// llm.paged_kv_append / llm.paged_attention (FlashAttention's varlen
// cu_seqlens plus vLLM's block table; Kwon et al., "Efficient Memory
// Management for Large Language Model Serving with PagedAttention", SOSP
// 2023).
//
// Buckets. Compiling per exact (T, B) would compile at almost every step, so
// T is padded up to the smallest of a few token buckets T_b (as vLLM's CUDA
// graph capture sizes) and B to B_b = min(T_b, max_sequences) + 1: one
// executable per token bucket. The padding tokens form one extra sequence
// (token 0 at position 0, the rest of it as prefill) whose K/V go to pages
// reserved for it in the pool, so they never touch a real sequence's pages;
// the other padding sequences are empty (no tokens, length 0), and the
// padding logits rows read row 0 and are dropped.
#ifndef LLMC_RUNTIME_SERVINGSTEP_H
#define LLMC_RUNTIME_SERVINGSTEP_H

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "llmc/runtime/Executable.h"
#include "llmc/runtime/KvPagePool.h"
#include "llmc/runtime/ServingEngine.h"
#include "llmc/runtime/Session.h"

namespace llmc::rt {

/// The padded shape of a step: T_b tokens, B_b sequences (and B_b logits
/// rows).
struct StepBucket {
  int64_t tokens = 0;
  int64_t sequences = 0;
  bool operator==(const StepBucket& o) const {
    return tokens == o.tokens && sequences == o.sequences;
  }
};

/// How a StepModel pads: the token buckets (strictly ascending, each >= 1)
/// and the engine's max_sequences (>= 1).
struct StepBucketing {
  std::vector<int64_t> token_buckets;
  int64_t max_sequences = 0;

  /// llmc's default for an engine of `max_batch_tokens` (1 .. 2^31 - 1)
  /// and `max_sequences`: powers of two below 64, multiples of 64 up to
  /// 512, then powers of two, each below max_batch_tokens, then
  /// max_batch_tokens (1, 2, 4, .., 32, 64, 128, .., 448, 512 for 512;
  /// at most 44 buckets).
  static StepBucketing Default(int64_t max_batch_tokens, int64_t max_sequences);

  /// InvalidArgument naming the field when the buckets are empty, not
  /// strictly ascending or below 1, or max_sequences < 1.
  absl::Status Validate() const;
  /// The bucket of a batch of `tokens` new tokens (>= 1) in `sequences`
  /// sequences (1 <= sequences <= min(tokens, max_sequences)):
  /// T_b = the smallest token bucket >= tokens, B_b = min(T_b,
  /// max_sequences) + 1. InvalidArgument when tokens exceed the largest
  /// bucket or `sequences` is out of range.
  absl::StatusOr<StepBucket> Choose(int64_t tokens, int64_t sequences) const;
  /// Every bucket, in token order.
  std::vector<StepBucket> All() const;
  /// The most padding tokens a step can have: the largest gap below a
  /// bucket, max over i of T_i - T_{i-1} - 1 (T_0 = 0).
  int64_t MaxPaddingTokens() const;
};

/// `rows` x `vocab` logits stored row-major as `dtype` (f32, bf16 or f16;
/// IEEE f16 with subnormals, infinities and NaN) at `bytes`, as float rows:
/// what the engine's sampling reads.
std::vector<std::vector<float>> LogitsToFloat(const uint8_t* bytes, DType dtype, int64_t rows,
                                             int64_t vocab);

/// The integer inputs 0..5 of a serving-step function at a bucket.
struct PaddedStepInputs {
  std::vector<int32_t> tokens;        ///< [T_b]
  std::vector<int32_t> positions;     ///< [T_b]
  std::vector<int32_t> cu_seqlens_q;  ///< [B_b + 1]
  std::vector<int32_t> seq_lens;      ///< [B_b]
  std::vector<int32_t> block_table;   ///< [B_b, max_pages] row-major
  std::vector<int32_t> logits_rows;   ///< [B_b]
};

/// Pads `batch` (B >= 1 sequences, T >= 1 tokens) to `bucket`: sequence b <
/// B as in the batch, its block table row widened to `max_pages` columns
/// with 0; sequence B gets the T_b - T padding tokens (token 0, position 0),
/// length T_b - T, and `padding_pages` as its block table (they must hold
/// T_b - T tokens at `page_size` per page); sequences B+1 .. B_b-1 are
/// empty; logits rows past the batch's read row 0. InvalidArgument when
/// the batch does not fit the bucket (T > T_b, B >= B_b, batch.max_pages >
/// max_pages, inconsistent array sizes) or the padding pages are too few.
absl::StatusOr<PaddedStepInputs> PadStepBatch(const StepBatch& batch, StepBucket bucket,
                                              int64_t max_pages,
                                              absl::Span<const int32_t> padding_pages,
                                              int64_t page_size);

/// Reserves the padding sequence's pages in `pool`: a sequence of
/// `bucketing.MaxPaddingTokens()` tokens that nobody else writes, whose
/// block table PadStepBatch gets. Returns its pool sequence id and pages.
/// InvalidArgument when those pages are more than `max_pages` (the step's
/// block-table columns), ResourceExhausted when the pool has too few free
/// pages; the pool is unchanged then.
absl::StatusOr<std::pair<int64_t, std::vector<int32_t>>> ReservePaddingPages(
    KvPagePool& pool, const StepBucketing& bucketing, int64_t max_pages);

/// What a serving-step executable looks like (see the file comment),
/// read from its signature.
struct ServingStepLayout {
  int64_t num_layers = 0;   ///< L
  int64_t max_pages = 0;    ///< MP: block-table columns
  int64_t vocab = 0;        ///< logits columns
  DType logits_dtype = DType::f32;
  int64_t num_weights = 0;  ///< inputs from 6 + 2L on
};

/// Checks `exe` against the serving-step convention at `bucket` (the six
/// integer arrays' dtypes and shapes, 2L page inputs of the pool's shape
/// and element size that results 1..2L alias, logits [B_b, vocab]) and
/// returns its layout. InvalidArgument naming the input/output and what was
/// expected.
absl::StatusOr<ServingStepLayout> ReadServingStepLayout(const Executable& exe,
                                                        StepBucket bucket,
                                                        const KvPagePoolOptions& pool);

/// The executable of one bucket (compiled on demand by the caller, e.g.
/// llmc::Compiler::Compile with the dims tokens = T_b, seqs = B_b,
/// seqs_plus_one = B_b + 1, logit_rows = B_b).
using StepExecutableFactory =
    std::function<absl::StatusOr<std::shared_ptr<const Executable>>(StepBucket)>;

struct SessionStepModelOptions {
  StepBucketing bucketing;
  /// The serving step's block-table columns (MP, ServingStepLayout's
  /// max_pages); every bucket's executable must have them.
  int64_t max_pages = 0;
  /// For every bucket's session; use_cuda_graphs on by default (the batch
  /// arrays live in buffers of the model, so each bucket's graph key never
  /// changes and every step replays).
  SessionOptions session;
  /// The stream the steps run on (the engine's EngineOptions::stream).
  CUstream stream = nullptr;
};

/// A StepModel that runs a compiled serving step on the GPU. Each bucket
/// has its executable (from the factory, on first use or in Warmup), its
/// Session and a device buffer of the six integer arrays; a step pads the
/// batch (PadStepBatch), copies the arrays in with one host-to-device copy,
/// runs the session over the pool's pages and `weights`, and copies the
/// wanted logits rows back (synchronizing the stream).
///
/// Weight-only quantized executables quantize in each bucket's session
/// (one quantized copy per bucket): use them with few buckets.
class SessionStepModel : public StepModel {
 public:
  /// `weights`: the executables' inputs 6 + 2L .. in order, in device
  /// memory, kept by the caller for the model's lifetime. Reserves the
  /// padding pages in `pool` (ReservePaddingPages). Errors: InvalidArgument
  /// for bad options, ResourceExhausted without pages for the padding.
  static absl::StatusOr<std::unique_ptr<SessionStepModel>> Create(
      std::shared_ptr<Device> device, KvPagePool* pool, StepExecutableFactory factory,
      std::vector<DeviceTensor> weights, SessionStepModelOptions options);
  ~SessionStepModel() override;

  /// Compiles and loads every bucket now (so that no step waits for a
  /// compile). Returns the first error.
  absl::Status Warmup();
  absl::StatusOr<std::vector<std::vector<float>>> Run(const StepBatch& batch,
                                                     KvPagePool& pool) override;

  /// Steps run per bucket (by T_b).
  const std::map<int64_t, int64_t>& steps_per_bucket() const { return steps_per_bucket_; }
  /// CUDA graph statistics summed over the buckets' sessions.
  Session::GraphStats graph_stats() const;

 private:
  struct Bucket;
  SessionStepModel() = default;
  absl::StatusOr<Bucket*> GetBucket(StepBucket shape);

  std::shared_ptr<Device> device_;
  KvPagePool* pool_ = nullptr;
  StepExecutableFactory factory_;
  std::vector<DeviceTensor> weights_;
  SessionStepModelOptions options_;
  int64_t padding_sequence_ = -1;
  std::vector<int32_t> padding_pages_;
  std::map<int64_t, std::unique_ptr<Bucket>> buckets_;
  std::map<int64_t, int64_t> steps_per_bucket_;
};

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_SERVINGSTEP_H
