#include "llmc/runtime/ServingStep.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return a == 0 ? 0 : (a - 1) / b + 1; }

/// An IEEE binary16 value as float.
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else
    v = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  return sign ? -v : v;
}

float Bf16ToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// `rows` rows of `vocab` 2-byte values converted by `convert`.
template <typename Convert>
std::vector<std::vector<float>> HalvesToFloat(const uint8_t* bytes, int64_t rows, int64_t vocab,
                                              Convert convert) {
  std::vector<std::vector<float>> out(rows, std::vector<float>(vocab));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < vocab; ++v) {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * (r * vocab + v), 2);
      out[r][v] = convert(h);
    }
  return out;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

std::vector<std::vector<float>> LogitsToFloat(const uint8_t* bytes, DType dtype, int64_t rows,
                                             int64_t vocab) {
  if (dtype == DType::bf16) return HalvesToFloat(bytes, rows, vocab, Bf16ToFloat);
  if (dtype == DType::f16) return HalvesToFloat(bytes, rows, vocab, HalfToFloat);
  std::vector<std::vector<float>> out(rows, std::vector<float>(vocab));
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out[r].data(), bytes + 4 * r * vocab, 4 * vocab);
  return out;
}

StepBucketing StepBucketing::Default(int64_t max_batch_tokens, int64_t max_sequences) {
  StepBucketing b;
  b.max_sequences = max_sequences;
  for (int64_t t = 1; t < max_batch_tokens;
       t = t < 64 ? 2 * t : t < 512 ? t + 64 : 2 * t)
    b.token_buckets.push_back(t);
  b.token_buckets.push_back(max_batch_tokens);
  return b;
}

int64_t StepBucketing::MaxPaddingTokens() const {
  int64_t most = 0, previous = 0;
  for (int64_t t : token_buckets) {
    most = std::max(most, t - previous - 1);
    previous = t;
  }
  return most;
}

absl::Status StepBucketing::Validate() const {
  if (token_buckets.empty())
    return absl::InvalidArgumentError("bucketing.token_buckets: empty; at least one bucket");
  for (size_t i = 0; i < token_buckets.size(); ++i) {
    if (token_buckets[i] < 1 || token_buckets[i] > std::numeric_limits<int32_t>::max())
      return absl::InvalidArgumentError(absl::StrCat("bucketing.token_buckets[", i,
                                                     "]: ", token_buckets[i],
                                                     "; expected 1 .. 2^31 - 1"));
    if (i > 0 && token_buckets[i] <= token_buckets[i - 1])
      return absl::InvalidArgumentError(
          absl::StrCat("bucketing.token_buckets: not strictly ascending at index ", i, " (",
                       token_buckets[i - 1], " then ", token_buckets[i], ")"));
  }
  if (max_sequences < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("bucketing.max_sequences: ", max_sequences, "; expected >= 1"));
  return absl::OkStatus();
}

absl::StatusOr<StepBucket> StepBucketing::Choose(int64_t tokens, int64_t sequences) const {
  LLMC_RT_RETURN_IF_ERROR(Validate());
  if (tokens < 1 || tokens > token_buckets.back())
    return absl::InvalidArgumentError(
        absl::StrCat("a step of ", tokens, " tokens; the token buckets hold 1 .. ",
                     token_buckets.back(), " (raise the largest bucket or lower the "
                     "engine's max_batch_tokens)"));
  if (sequences < 1 || sequences > std::min(tokens, max_sequences))
    return absl::InvalidArgumentError(absl::StrCat(
        "a step of ", sequences, " sequences with ", tokens,
        " tokens; expected 1 .. min(tokens, max_sequences = ", max_sequences, ")"));
  const int64_t t = *std::lower_bound(token_buckets.begin(), token_buckets.end(), tokens);
  return StepBucket{t, std::min(t, max_sequences) + 1};
}

std::vector<StepBucket> StepBucketing::All() const {
  std::vector<StepBucket> all;
  for (int64_t t : token_buckets) all.push_back({t, std::min(t, max_sequences) + 1});
  return all;
}

absl::StatusOr<PaddedStepInputs> PadStepBatch(const StepBatch& batch, StepBucket bucket,
                                              int64_t max_pages,
                                              absl::Span<const int32_t> padding_pages,
                                              int64_t page_size) {
  const int64_t T = batch.num_tokens(), B = batch.num_sequences();
  const int64_t Tb = bucket.tokens, Bb = bucket.sequences;
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (T < 1 || B < 1) return bad("a step batch of ", T, " tokens in ", B, " sequences; expected >= 1 of each");
  if (T > Tb || B >= Bb)
    return bad("a step batch of ", T, " tokens in ", B, " sequences does not fit the bucket of ",
               Tb, " tokens and ", Bb, " sequences (one of them for the padding)");
  if (static_cast<int64_t>(batch.positions.size()) != T ||
      static_cast<int64_t>(batch.cu_seqlens_q.size()) != B + 1 ||
      batch.max_pages < 0 ||
      static_cast<int64_t>(batch.block_table.size()) != B * batch.max_pages ||
      static_cast<int64_t>(batch.logits_rows.size()) > B || batch.cu_seqlens_q.front() != 0 ||
      batch.cu_seqlens_q.back() != T)
    return bad("inconsistent step batch: ", T, " tokens, ", batch.positions.size(),
               " positions, ", batch.cu_seqlens_q.size(), " cu_seqlens_q entries for ", B,
               " sequences, ", batch.block_table.size(), " block-table entries for ",
               batch.max_pages, " columns, ", batch.logits_rows.size(), " logits rows");
  if (batch.max_pages > max_pages)
    return bad("a sequence of the step needs ", batch.max_pages,
               " pages; the step function's block table has ", max_pages,
               " columns (its longest sequence is ", max_pages * page_size, " tokens)");
  const int64_t pad = Tb - T;
  if (page_size < 1 || CeilDiv(pad, page_size) > static_cast<int64_t>(padding_pages.size()) ||
      CeilDiv(pad, page_size) > max_pages)
    return bad(pad, " padding tokens need ", CeilDiv(pad, page_size),
               " pages; ", padding_pages.size(), " reserved, ", max_pages, " block-table columns");

  PaddedStepInputs p;
  p.tokens.assign(batch.token_ids.begin(), batch.token_ids.end());
  p.tokens.resize(Tb, 0);
  p.positions.assign(batch.positions.begin(), batch.positions.end());
  p.positions.resize(Tb, 0);
  p.cu_seqlens_q.assign(batch.cu_seqlens_q.begin(), batch.cu_seqlens_q.end());
  p.seq_lens.assign(batch.seq_lens.begin(), batch.seq_lens.end());
  p.block_table.assign(Bb * max_pages, 0);
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(batch.block_table.begin() + b * batch.max_pages, batch.max_pages,
                p.block_table.begin() + b * max_pages);
  // Sequence B: the padding tokens (possibly none); the rest empty.
  p.cu_seqlens_q.push_back(static_cast<int32_t>(Tb));
  p.seq_lens.push_back(static_cast<int32_t>(pad));
  for (int64_t i = 0; i < CeilDiv(pad, page_size); ++i)
    p.block_table[B * max_pages + i] = padding_pages[i];
  p.cu_seqlens_q.resize(Bb + 1, static_cast<int32_t>(Tb));
  p.seq_lens.resize(Bb, 0);
  p.logits_rows.assign(batch.logits_rows.begin(), batch.logits_rows.end());
  p.logits_rows.resize(Bb, 0);
  return p;
}

absl::StatusOr<std::pair<int64_t, std::vector<int32_t>>> ReservePaddingPages(
    KvPagePool& pool, const StepBucketing& bucketing, int64_t max_pages) {
  LLMC_RT_RETURN_IF_ERROR(bucketing.Validate());
  const int64_t pad = bucketing.MaxPaddingTokens(), pageSize = pool.options().page_size;
  if (CeilDiv(pad, pageSize) > max_pages)
    return absl::InvalidArgumentError(absl::StrCat(
        "the token buckets pad a step by up to ", pad, " tokens, which take ",
        CeilDiv(pad, pageSize), " pages of ", pageSize,
        " in one padding sequence; the step's block table has ", max_pages,
        " columns (add buckets between the largest gaps)"));
  const int64_t seq = pool.AddSequence();
  absl::StatusOr<std::vector<int64_t>> slots = pool.Append(seq, pad);
  if (!slots.ok()) {
    (void)pool.Release(seq);
    return absl::Status(slots.status().code(),
                        absl::StrCat("reserving the pages of ", pad,
                                     " padding tokens (the largest gap below a token "
                                     "bucket): ", slots.status().message()));
  }
  absl::StatusOr<std::vector<int32_t>> table = pool.BlockTable(seq);
  if (!table.ok()) {
    (void)pool.Release(seq);
    return table.status();
  }
  return std::make_pair(seq, std::move(*table));
}

absl::StatusOr<ServingStepLayout> ReadServingStepLayout(const Executable& exe,
                                                        StepBucket bucket,
                                                        const KvPagePoolOptions& pool) {
  const int64_t Tb = bucket.tokens, Bb = bucket.sequences;
  auto bad = [](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("serving step: ", parts...));
  };
  if (exe.inputs.size() < 6) return bad(exe.inputs.size(), " inputs; expected at least 6 (the batch arrays)");
  const char* names[] = {"tokens", "positions", "cu_seqlens_q", "seq_lens", "block_table",
                         "logits_rows"};
  const std::vector<int64_t> want[] = {{Tb}, {Tb}, {Bb + 1}, {Bb}, {}, {Bb}};
  ServingStepLayout layout;
  for (int i = 0; i < 6; ++i) {
    const TensorSig& s = exe.inputs[i];
    const bool shapeOk = i == 4 ? s.shape.size() == 2 && s.shape[0] == Bb && s.shape[1] >= 1
                                : s.shape == want[i];
    if (s.dtype != DType::i32 || !shapeOk)
      return bad("input ", i, " (", names[i], ") is ", DTypeName(s.dtype), " ",
                 ShapeString(s.shape), "; expected i32 ",
                 i == 4 ? absl::StrCat("[", Bb, ", max_pages]") : ShapeString(want[i]));
  }
  layout.max_pages = exe.inputs[4].shape[1];
  // Pages: the inputs that outputs 1.. alias, from input 6 on.
  if (exe.outputs.empty()) return bad("no outputs; expected logits and the pages");
  int64_t pages = 0;
  while (1 + pages < static_cast<int64_t>(exe.outputs.size()) &&
         exe.outputs[1 + pages].alias_input == 6 + pages)
    ++pages;
  if (pages == 0 || pages % 2 != 0 || 1 + pages != static_cast<int64_t>(exe.outputs.size()))
    return bad(exe.outputs.size(), " outputs of which ", pages,
               " alias inputs 6..; expected logits then 2 * layers page results, result k "
               "aliasing input 5 + k (llm.donate, llm.aliasing_output)");
  layout.num_layers = pages / 2;
  const std::vector<int64_t> pageShape = {pool.num_pages, pool.page_size, pool.num_kv_heads,
                                          pool.head_dim};
  for (int64_t i = 6; i < 6 + pages; ++i) {
    const TensorSig& s = exe.inputs[i];
    if (s.shape != pageShape || DTypeSize(s.dtype) != pool.element_bytes)
      return bad("input ", i, " (", (i - 6) % 2 ? "value" : "key", " pages of layer ",
                 (i - 6) / 2, ") is ", DTypeName(s.dtype), " ", ShapeString(s.shape),
                 "; the page pool holds ", ShapeString(pageShape), " of ", pool.element_bytes,
                 "-byte elements");
  }
  const TensorSig& logits = exe.outputs[0];
  if (logits.shape.size() != 2 || logits.shape[0] != Bb ||
      (logits.dtype != DType::f32 && logits.dtype != DType::bf16 && logits.dtype != DType::f16))
    return bad("output 0 (logits) is ", DTypeName(logits.dtype), " ", ShapeString(logits.shape),
               "; expected f32, bf16 or f16 [", Bb, ", vocab]");
  layout.vocab = logits.shape[1];
  layout.logits_dtype = logits.dtype;
  layout.num_weights = static_cast<int64_t>(exe.inputs.size()) - 6 - pages;
  if (layout.num_layers != pool.num_layers)
    return bad(layout.num_layers, " layers of pages; the page pool has ", pool.num_layers);
  return layout;
}

/// One bucket's executable, session and device copy of the batch arrays.
struct SessionStepModel::Bucket {
  StepBucket shape;
  std::shared_ptr<const Executable> exe;
  ServingStepLayout layout;
  std::unique_ptr<Session> session;
  uint64_t arrays = 0;  // the six int32 arrays, back to back
  uint64_t logits = 0;  // [B_b, vocab]
  std::vector<DeviceTensor> inputs, outputs;
  std::vector<int64_t> host_offsets;  // byte offset of each array
  std::vector<int32_t> host;          // staging of the arrays
  std::vector<uint8_t> host_logits;
};

absl::StatusOr<std::unique_ptr<SessionStepModel>> SessionStepModel::Create(
    std::shared_ptr<Device> device, KvPagePool* pool, StepExecutableFactory factory,
    std::vector<DeviceTensor> weights, SessionStepModelOptions options) {
  if (!device) return absl::InvalidArgumentError("SessionStepModel: null device");
  if (!pool) return absl::InvalidArgumentError("SessionStepModel: null page pool");
  if (!factory) return absl::InvalidArgumentError("SessionStepModel: no executable factory");
  LLMC_RT_RETURN_IF_ERROR(options.bucketing.Validate());
  std::unique_ptr<SessionStepModel> m(new SessionStepModel());
  m->device_ = std::move(device);
  m->pool_ = pool;
  m->factory_ = std::move(factory);
  m->weights_ = std::move(weights);
  m->options_ = std::move(options);
  if (m->options_.max_pages < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "SessionStepModel: options.max_pages = ", m->options_.max_pages,
        "; expected the serving step's block-table columns (>= 1)"));
  auto padding = ReservePaddingPages(*pool, m->options_.bucketing, m->options_.max_pages);
  if (!padding.ok()) return padding.status();
  m->padding_sequence_ = padding->first;
  m->padding_pages_ = std::move(padding->second);
  return m;
}

SessionStepModel::~SessionStepModel() {
  for (auto& [t, b] : buckets_) {
    b->session.reset();
    if (b->arrays) (void)device_->Free(b->arrays);
    if (b->logits) (void)device_->Free(b->logits);
  }
  if (padding_sequence_ >= 0) (void)pool_->Release(padding_sequence_);
}

absl::StatusOr<SessionStepModel::Bucket*> SessionStepModel::GetBucket(StepBucket shape) {
  if (auto it = buckets_.find(shape.tokens); it != buckets_.end()) return it->second.get();
  auto b = std::make_unique<Bucket>();
  b->shape = shape;
  auto exe = factory_(shape);
  if (!exe.ok())
    return absl::Status(exe.status().code(),
                        absl::StrCat("compiling the serving step for ", shape.tokens,
                                     " tokens and ", shape.sequences,
                                     " sequences: ", exe.status().message()));
  b->exe = std::move(*exe);
  auto layout = ReadServingStepLayout(*b->exe, shape, pool_->options());
  if (!layout.ok()) return layout.status();
  b->layout = *layout;
  if (b->layout.num_weights != static_cast<int64_t>(weights_.size()))
    return absl::InvalidArgumentError(absl::StrCat(
        "serving step: ", b->layout.num_weights, " weight inputs; the model was given ",
        weights_.size()));
  if (b->layout.max_pages != options_.max_pages)
    return absl::InvalidArgumentError(absl::StrCat(
        "serving step: ", b->layout.max_pages, " block-table columns; the model was made for ",
        options_.max_pages));
  // The six arrays back to back, each at a 64-byte boundary (vectorized
  // loads of the kernels that read them).
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
  for (int i = 0; i < 6; ++i) {
    offsets.push_back(bytes);
    bytes += (b->exe->inputs[i].Bytes() + 63) / 64 * 64;
  }
  const TensorSig& lsig = b->exe->outputs[0];
  auto arrays = device_->Alloc(bytes);
  if (!arrays.ok()) return arrays.status();
  b->arrays = *arrays;
  auto logits = device_->Alloc(lsig.Bytes());
  if (!logits.ok()) {
    (void)device_->Free(b->arrays);
    return logits.status();
  }
  b->logits = *logits;
  // From here on a failure frees both.
  auto fail = [&](absl::Status st) {
    (void)device_->Free(b->arrays);
    (void)device_->Free(b->logits);
    return st;
  };
  for (int i = 0; i < 6; ++i)
    b->inputs.push_back({b->arrays + offsets[i], DType::i32, b->exe->inputs[i].shape});
  for (int64_t l = 0; l < b->layout.num_layers; ++l)
    for (bool key : {true, false}) {
      const TensorSig& s = b->exe->inputs[b->inputs.size()];
      b->inputs.push_back({key ? pool_->KeyPages(l) : pool_->ValuePages(l), s.dtype, s.shape});
    }
  b->inputs.insert(b->inputs.end(), weights_.begin(), weights_.end());
  b->outputs.push_back({b->logits, lsig.dtype, lsig.shape});
  for (int64_t i = 0; i < 2 * b->layout.num_layers; ++i) b->outputs.push_back(b->inputs[6 + i]);
  if (absl::Status st = CheckTensors(b->exe->inputs, b->inputs, "input"); !st.ok())
    return fail(st);
  auto session = Session::Load(device_, b->exe, options_.session);
  if (!session.ok()) return fail(session.status());
  b->session = std::move(*session);
  b->host_offsets = offsets;
  b->host.assign(bytes / sizeof(int32_t), 0);
  b->host_logits.resize(lsig.Bytes());
  Bucket* raw = b.get();
  buckets_[shape.tokens] = std::move(b);
  return raw;
}

absl::Status SessionStepModel::Warmup() {
  for (StepBucket shape : options_.bucketing.All()) {
    auto b = GetBucket(shape);
    if (!b.ok()) return b.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<float>>> SessionStepModel::Run(const StepBatch& batch,
                                                                     KvPagePool& pool) {
  if (&pool != pool_)
    return absl::InvalidArgumentError("SessionStepModel: run with another page pool than its own");
  auto shape = options_.bucketing.Choose(batch.num_tokens(), batch.num_sequences());
  if (!shape.ok()) return shape.status();
  auto bucket = GetBucket(*shape);
  if (!bucket.ok()) return bucket.status();
  Bucket& b = **bucket;
  auto padded = PadStepBatch(batch, b.shape, b.layout.max_pages, padding_pages_,
                             pool.options().page_size);
  if (!padded.ok()) return padded.status();
  int i = 0;
  for (const std::vector<int32_t>* v : {&padded->tokens, &padded->positions, &padded->cu_seqlens_q,
                                        &padded->seq_lens, &padded->block_table,
                                        &padded->logits_rows})
    std::copy(v->begin(), v->end(), b.host.begin() + b.host_offsets[i++] / sizeof(int32_t));
  const CudaDriver& drv = device_->driver();
  LLMC_RT_RETURN_IF_ERROR(device_->MakeCurrent());
  CUstream stream = options_.stream;
  LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(drv, cuMemcpyHtoDAsync, b.arrays, b.host.data(),
                                           b.host.size() * sizeof(int32_t), stream));
  LLMC_RT_RETURN_IF_ERROR(b.session->Run(b.inputs, b.outputs, stream));
  const int64_t rows = static_cast<int64_t>(batch.logits_rows.size());
  const int64_t elem = DTypeSize(b.layout.logits_dtype);
  const size_t bytes = static_cast<size_t>(rows * b.layout.vocab * elem);
  if (bytes > 0)
    LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(drv, cuMemcpyDtoHAsync, b.host_logits.data(),
                                             b.logits, bytes, stream));
  LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(drv, cuStreamSynchronize, stream));
  ++steps_per_bucket_[b.shape.tokens];
  return LogitsToFloat(b.host_logits.data(), b.layout.logits_dtype, rows, b.layout.vocab);
}

Session::GraphStats SessionStepModel::graph_stats() const {
  Session::GraphStats sum;
  for (const auto& [t, b] : buckets_) {
    Session::GraphStats s = b->session->graph_stats();
    sum.captures += s.captures;
    sum.instantiations += s.instantiations;
    sum.updates += s.updates;
    sum.replays += s.replays;
    sum.launches += s.launches;
    sum.cached += s.cached;
    if (sum.disabled_reason.empty()) sum.disabled_reason = s.disabled_reason;
  }
  return sum;
}

}  // namespace llmc::rt
