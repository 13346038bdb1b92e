#include "llmc/runtime/KvPagePool.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {
namespace {

/// Alignment of each layer's K and V tensors inside the one allocation.
constexpr int64_t kTensorAlignment = 256;
/// Largest allocation accepted (far above any GPU; keeps the byte
/// arithmetic clear of overflow).
constexpr int64_t kMaxBytes = int64_t{1} << 50;

int64_t CeilDiv(int64_t a, int64_t b) { return a == 0 ? 0 : (a - 1) / b + 1; }

/// Room for `extra` more elements in `v`, growing geometrically as push_back
/// does, so that pushing them cannot throw.
template <typename T>
void Reserve(std::vector<T>& v, size_t extra) {
  if (v.capacity() - v.size() < extra)
    v.reserve(std::max(v.size() + extra, 2 * v.capacity()));
}

}  // namespace

absl::Status KvPagePool::ValidateOptions(const KvPagePoolOptions& o,
                                         absl::string_view name) {
  struct Field {
    const char* name;
    int64_t value;
  };
  for (const Field& f : {Field{"num_pages", o.num_pages}, Field{"page_size", o.page_size},
                         Field{"num_layers", o.num_layers},
                         Field{"num_kv_heads", o.num_kv_heads},
                         Field{"head_dim", o.head_dim},
                         Field{"element_bytes", o.element_bytes}}) {
    if (f.value <= 0)
      return absl::InvalidArgumentError(absl::StrCat(
          name, ".", f.name, ": expected > 0, found ", f.value));
  }
  if (o.element_bytes != 1 && o.element_bytes != 2 && o.element_bytes != 4)
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".element_bytes: expected 1, 2 or 4, found ", o.element_bytes));
  if (o.num_pages > std::numeric_limits<int32_t>::max())
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".num_pages: expected at most ",
        std::numeric_limits<int32_t>::max(), " (int32 page ids), found ",
        o.num_pages));
  // 2 * layers * pages * page_size * heads * dim * element_bytes, checked
  // factor by factor.
  int64_t bytes = 2;
  for (int64_t f : {o.num_layers, o.num_pages, o.page_size, o.num_kv_heads,
                    o.head_dim, o.element_bytes}) {
    if (bytes > kMaxBytes / f)
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": the pages need more than 2^50 bytes (num_pages ",
          o.num_pages, ", page_size ", o.page_size, ", num_layers ",
          o.num_layers, ", num_kv_heads ", o.num_kv_heads, ", head_dim ",
          o.head_dim, ", element_bytes ", o.element_bytes, ")"));
    bytes *= f;
  }
  return absl::OkStatus();
}

PageCopyFn CudaDriverPageCopy() {
  return [](uint64_t dst, uint64_t src, size_t bytes, CUstream stream) -> absl::Status {
    LLMC_RT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
    return LLMC_VENDOR_CALL(*cu, cuMemcpyDtoDAsync, static_cast<CUdeviceptr>(dst),
                            static_cast<CUdeviceptr>(src), bytes, stream);
  };
}

PageCopyFn HostPageCopy() {
  return [](uint64_t dst, uint64_t src, size_t bytes, CUstream) -> absl::Status {
    std::memcpy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    return absl::OkStatus();
  };
}

std::string KvPagePoolStats::ToString() const {
  return absl::StrFormat(
      "%d of %d pages used (%d free, %d shared), %d sequences, %d tokens in %d "
      "slots, waste %.3f, %d copies on write (%d pending)",
      used_pages, num_pages, free_pages, shared_pages, num_sequences, tokens,
      filled_slots, waste, copies_on_write, pending_copies);
}

absl::StatusOr<std::unique_ptr<KvPagePool>> KvPagePool::Create(
    MemoryPool* pool, KvPagePoolOptions options, CUstream stream) {
  if (!pool) return absl::InvalidArgumentError("KvPagePool::Create: pool is null");
  LLMC_RT_RETURN_IF_ERROR(ValidateOptions(options));
  const int64_t layer_bytes = options.num_pages * options.page_size *
                              options.num_kv_heads * options.head_dim *
                              options.element_bytes;
  const int64_t stride = CeilDiv(layer_bytes, kTensorAlignment) * kTensorAlignment;
  const int64_t bytes = 2 * options.num_layers * stride;
  // MemoryPool promises 128-byte alignment: room to round the start up.
  absl::StatusOr<uint64_t> allocation =
      pool->Allocate(static_cast<size_t>(bytes + kTensorAlignment), stream);
  if (!allocation.ok()) {
    std::string what = absl::StrFormat(
        "KV page pool: cannot allocate %d bytes for %d pages of %d tokens "
        "(K and V of %d layers, %d heads of %d elements of %d bytes)",
        bytes, options.num_pages, options.page_size, options.num_layers,
        options.num_kv_heads, options.head_dim, options.element_bytes);
    return Annotate(allocation.status(), what);
  }
  constexpr uint64_t kAlign = kTensorAlignment;
  const uint64_t base = (*allocation + kAlign - 1) / kAlign * kAlign;
  if (!options.copy_page) options.copy_page = CudaDriverPageCopy();
  return std::unique_ptr<KvPagePool>(new KvPagePool(
      pool, std::move(options), stream, *allocation, base, stride));
}

KvPagePool::KvPagePool(MemoryPool* pool, KvPagePoolOptions options,
                       CUstream stream, uint64_t allocation, uint64_t base,
                       int64_t layer_stride)
    : pool_(pool),
      options_(std::move(options)),
      stream_(stream),
      allocation_(allocation),
      base_(base),
      layer_stride_(layer_stride),
      row_bytes_(options_.num_kv_heads * options_.head_dim * options_.element_bytes),
      page_bytes_(options_.page_size * row_bytes_) {
  refcount_.assign(options_.num_pages, 0);
  free_.reserve(options_.num_pages);
  // Taken from the back: page 0 first.
  for (int64_t p = options_.num_pages - 1; p >= 0; --p)
    free_.push_back(static_cast<int32_t>(p));
}

KvPagePool::~KvPagePool() { (void)pool_->Free(allocation_, stream_); }

uint64_t KvPagePool::KeyPages(int64_t layer) const {
  if (layer < 0 || layer >= options_.num_layers) return 0;
  return base_ + static_cast<uint64_t>(2 * layer * layer_stride_);
}

uint64_t KvPagePool::ValuePages(int64_t layer) const {
  if (layer < 0 || layer >= options_.num_layers) return 0;
  return base_ + static_cast<uint64_t>((2 * layer + 1) * layer_stride_);
}

absl::StatusOr<KvPagePool::Sequence*> KvPagePool::Find(int64_t seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end())
    return absl::NotFoundError(
        absl::StrCat("KV page pool: no sequence ", seq,
                     " (never added, or released)"));
  return &it->second;
}

absl::StatusOr<const KvPagePool::Sequence*> KvPagePool::Find(int64_t seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end())
    return absl::NotFoundError(
        absl::StrCat("KV page pool: no sequence ", seq,
                     " (never added, or released)"));
  return &it->second;
}

void KvPagePool::Unref(absl::Span<const int32_t> pages) {
  for (int32_t p : pages)
    if (--refcount_[p] == 0) free_.push_back(p);
}

int32_t KvPagePool::TakeFreePage() {
  int32_t p = free_.back();
  free_.pop_back();
  refcount_[p] = 1;
  return p;
}

int64_t KvPagePool::AddSequence() {
  absl::MutexLock lock(&mu_);
  sequences_.try_emplace(next_sequence_);  // may throw: before the id is taken
  return next_sequence_++;
}

absl::StatusOr<std::vector<int64_t>> KvPagePool::Append(int64_t seq,
                                                        int64_t num_tokens) {
  absl::MutexLock lock(&mu_);
  LLMC_RT_ASSIGN_OR_RETURN(Sequence * s, Find(seq));
  if (num_tokens < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "KV page pool: Append to sequence ", seq,
        ": num_tokens: expected >= 0, found ", num_tokens));
  if (num_tokens == 0) return std::vector<int64_t>();
  const int64_t page_size = options_.page_size;
  const int64_t row = s->length % page_size;
  // Rows left in the last page, then fresh pages for the rest (written so
  // that a huge num_tokens cannot overflow).
  const int64_t room = row == 0 ? 0 : page_size - row;
  const int64_t fresh =
      num_tokens <= room ? 0 : (num_tokens - room - 1) / page_size + 1;
  const bool copy = row != 0 && refcount_[s->pages.back()] > 1;
  const int64_t needed = fresh + (copy ? 1 : 0);
  const int64_t available = static_cast<int64_t>(free_.size());
  if (needed > available)
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV page pool: sequence ", seq, " needs ", needed, " more page(s), ",
        available, " free of ", options_.num_pages));
  // What may throw (std::bad_alloc) comes before the first change, so the
  // changes cannot fail halfway: all or nothing.
  std::vector<int64_t> slots;
  slots.reserve(static_cast<size_t>(num_tokens));
  Reserve(s->pages, static_cast<size_t>(fresh));
  if (copy) Reserve(pending_, 1);
  if (copy) {
    int32_t shared = s->pages.back();
    int32_t own = TakeFreePage();
    --refcount_[shared];  // still > 0: another sequence holds it
    pending_.push_back(PageCopy{shared, own});
    ++copies_on_write_;
    s->pages.back() = own;
  }
  for (int64_t i = 0; i < fresh; ++i) s->pages.push_back(TakeFreePage());
  for (int64_t j = s->length; j < s->length + num_tokens; ++j)
    slots.push_back(int64_t{s->pages[j / page_size]} * page_size + j % page_size);
  s->length += num_tokens;
  return slots;
}

absl::StatusOr<int64_t> KvPagePool::Fork(int64_t seq) {
  absl::MutexLock lock(&mu_);
  LLMC_RT_ASSIGN_OR_RETURN(Sequence * s, Find(seq));
  // The new entry first (copying and inserting may throw, and then change
  // nothing), then the counts through it: all or nothing.
  const int64_t id = next_sequence_;
  auto it = sequences_.try_emplace(id, *s).first;
  ++next_sequence_;
  for (int32_t p : it->second.pages) ++refcount_[p];
  return id;
}

absl::Status KvPagePool::Release(int64_t seq) {
  absl::MutexLock lock(&mu_);
  LLMC_RT_ASSIGN_OR_RETURN(Sequence * s, Find(seq));
  Unref(s->pages);
  sequences_.erase(seq);
  return absl::OkStatus();
}

absl::Status KvPagePool::Truncate(int64_t seq, int64_t length) {
  absl::MutexLock lock(&mu_);
  LLMC_RT_ASSIGN_OR_RETURN(Sequence * s, Find(seq));
  if (length < 0 || length > s->length)
    return absl::InvalidArgumentError(absl::StrCat(
        "KV page pool: Truncate sequence ", seq, ": length: expected 0 .. ",
        s->length, " (its length), found ", length));
  const size_t keep = static_cast<size_t>(CeilDiv(length, options_.page_size));
  Unref(absl::MakeConstSpan(s->pages).subspan(keep));
  s->pages.resize(keep);
  s->length = length;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> KvPagePool::Length(int64_t seq) const {
  absl::MutexLock lock(&mu_);
  LLMC_RT_ASSIGN_OR_RETURN(const Sequence* s, Find(seq));
  return s->length;
}

absl::StatusOr<std::vector<int32_t>> KvPagePool::BlockTable(int64_t seq) const {
  absl::MutexLock lock(&mu_);
  LLMC_RT_ASSIGN_OR_RETURN(const Sequence* s, Find(seq));
  return s->pages;
}

absl::Status KvPagePool::FillBatchMetadata(absl::Span<const int64_t> seqs,
                                           int64_t max_pages,
                                           absl::Span<int32_t> block_table,
                                           absl::Span<int32_t> seq_lens) const {
  const int64_t batch = static_cast<int64_t>(seqs.size());
  if (max_pages < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "KV page pool: FillBatchMetadata: max_pages: expected >= 1, found ",
        max_pages));
  if (static_cast<int64_t>(seq_lens.size()) != batch ||
      batch > std::numeric_limits<int64_t>::max() / max_pages ||
      static_cast<int64_t>(block_table.size()) != batch * max_pages)
    return absl::InvalidArgumentError(absl::StrCat(
        "KV page pool: FillBatchMetadata: expected block_table of ", batch,
        " x ", max_pages, " and seq_lens of ", batch,
        " elements for ", batch, " sequences, found ", block_table.size(),
        " and ", seq_lens.size()));
  absl::MutexLock lock(&mu_);
  std::vector<const Sequence*> found;
  found.reserve(batch);
  for (int64_t b = 0; b < batch; ++b) {
    LLMC_RT_ASSIGN_OR_RETURN(const Sequence* s, Find(seqs[b]));
    if (static_cast<int64_t>(s->pages.size()) > max_pages)
      return absl::InvalidArgumentError(absl::StrCat(
          "KV page pool: FillBatchMetadata: sequence ", seqs[b], " (#", b,
          ") has ", s->length, " tokens in ", s->pages.size(),
          " pages, more than max_pages = ", max_pages));
    if (s->length > std::numeric_limits<int32_t>::max())
      return absl::InvalidArgumentError(absl::StrCat(
          "KV page pool: FillBatchMetadata: sequence ", seqs[b], " (#", b,
          ") has ", s->length, " tokens, more than int32 seq_lens hold"));
    found.push_back(s);
  }
  for (int64_t b = 0; b < batch; ++b) {
    int32_t* row = block_table.data() + b * max_pages;
    std::copy(found[b]->pages.begin(), found[b]->pages.end(), row);
    std::fill(row + found[b]->pages.size(), row + max_pages, 0);
    seq_lens[b] = static_cast<int32_t>(found[b]->length);
  }
  return absl::OkStatus();
}

std::vector<PageCopy> KvPagePool::TakePendingCopies(size_t max_copies) {
  absl::MutexLock lock(&mu_);
  const size_t n = std::min(max_copies, pending_.size());
  std::vector<PageCopy> taken(pending_.begin(), pending_.begin() + n);
  pending_.erase(pending_.begin(), pending_.begin() + n);
  return taken;
}

absl::Status KvPagePool::ApplyPendingCopies(CUstream stream) {
  absl::MutexLock lock(&mu_);
  const uint64_t bytes = static_cast<uint64_t>(page_bytes_);
  size_t done = 0;
  absl::Status status;
  for (; done < pending_.size() && status.ok(); ++done) {
    const PageCopy& c = pending_[done];
    for (int64_t l = 0; l < options_.num_layers && status.ok(); ++l) {
      for (uint64_t tensor : {KeyPages(l), ValuePages(l)}) {
        status = options_.copy_page(tensor + c.dst * bytes, tensor + c.src * bytes,
                                    bytes, stream);
        if (!status.ok()) {
          status = Annotate(status, absl::StrCat(
              "KV page pool: copying page ", c.src, " into page ", c.dst,
              " (copy on write), layer ", l));
          break;
        }
      }
    }
    if (!status.ok()) break;
  }
  pending_.erase(pending_.begin(), pending_.begin() + done);
  return status;
}

int64_t KvPagePool::NumPendingCopies() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(pending_.size());
}

KvPagePoolStats KvPagePool::Stats() const {
  absl::MutexLock lock(&mu_);
  KvPagePoolStats st;
  const int64_t page_size = options_.page_size;
  st.num_pages = options_.num_pages;
  st.free_pages = static_cast<int64_t>(free_.size());
  st.used_pages = st.num_pages - st.free_pages;
  st.num_sequences = static_cast<int64_t>(sequences_.size());
  st.pending_copies = static_cast<int64_t>(pending_.size());
  st.copies_on_write = copies_on_write_;
  for (int32_t c : refcount_) st.shared_pages += c > 1;
  // Rows of a page that hold a token: the most any of its sequences fills
  // (sequences sharing a page share its first rows).
  std::vector<int32_t> filled(options_.num_pages, 0);
  for (const auto& [id, s] : sequences_) {
    st.tokens += s.length;
    for (size_t i = 0; i < s.pages.size(); ++i) {
      int64_t rows = std::min<int64_t>(page_size, s.length - int64_t(i) * page_size);
      int32_t& f = filled[s.pages[i]];
      f = std::max<int32_t>(f, static_cast<int32_t>(rows));
    }
  }
  for (int32_t f : filled) st.filled_slots += f;
  st.waste = st.used_pages == 0
                 ? 0.0
                 : 1.0 - double(st.filled_slots) / double(st.used_pages * page_size);
  return st;
}

absl::Status KvPagePool::CheckInvariants() const {
  absl::MutexLock lock(&mu_);
  const int64_t num_pages = options_.num_pages;
  if (static_cast<int64_t>(refcount_.size()) != num_pages)
    return InternalBug("KV page pool: ", refcount_.size(), " reference counts for ",
                       num_pages, " pages");
  std::vector<int64_t> refs(num_pages, 0);
  for (const auto& [id, s] : sequences_) {
    if (s.length < 0 ||
        static_cast<int64_t>(s.pages.size()) != CeilDiv(s.length, options_.page_size))
      return InternalBug("KV page pool: sequence ", id, " has ", s.length,
                         " tokens in ", s.pages.size(), " pages of ",
                         options_.page_size);
    for (size_t i = 0; i < s.pages.size(); ++i) {
      int32_t p = s.pages[i];
      if (p < 0 || p >= num_pages)
        return InternalBug("KV page pool: sequence ", id, " entry ", i,
                           " names page ", p, " outside [0, ", num_pages, ")");
      if (std::find(s.pages.begin(), s.pages.begin() + i, p) != s.pages.begin() + i)
        return InternalBug("KV page pool: sequence ", id,
                           " refers to page ", p, " twice");
      ++refs[p];
    }
  }
  std::vector<bool> is_free(num_pages, false);
  for (int32_t p : free_) {
    if (p < 0 || p >= num_pages)
      return InternalBug("KV page pool: free page ", p, " outside [0, ",
                         num_pages, ")");
    if (is_free[p])
      return InternalBug("KV page pool: page ", p, " is on the free list twice");
    is_free[p] = true;
  }
  for (int64_t p = 0; p < num_pages; ++p) {
    if (refcount_[p] != refs[p])
      return InternalBug("KV page pool: page ", p, " has reference count ",
                         refcount_[p], " but ", refs[p],
                         " block-table entries refer to it");
    if (is_free[p] != (refs[p] == 0))
      return InternalBug("KV page pool: page ", p,
                         is_free[p] ? " is free but used by "
                                    : " is neither free nor used: ",
                         refs[p], " block-table entries");
  }
  for (const PageCopy& c : pending_)
    if (c.src < 0 || c.src >= num_pages || c.dst < 0 || c.dst >= num_pages)
      return InternalBug("KV page pool: pending copy of page ", c.src,
                         " into page ", c.dst, " outside [0, ", num_pages, ")");
  return absl::OkStatus();
}

}  // namespace llmc::rt
