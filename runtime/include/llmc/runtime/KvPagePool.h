// Paged KV cache page pool for serving: fixed-size pages of K and V in device
// memory, per-sequence block tables, shared pages with copy-on-write.
//
// PagedAttention (Kwon et al., "Efficient Memory Management for Large
// Language Model Serving with PagedAttention", SOSP 2023) and vLLM's block
// manager: a sequence's keys and values are not one contiguous buffer but a
// list of pages (its block table), so memory is reserved a page at a time
// instead of for the longest possible sequence, and a forked sequence
// (parallel sampling, beam search, a shared prompt) shares its parent's pages
// so a common prefix is stored once. A sequence that appends into a page it
// shares first gets a private copy (copy-on-write).
#ifndef LLMC_RUNTIME_KVPAGEPOOL_H
#define LLMC_RUNTIME_KVPAGEPOOL_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "llmc/runtime/CudaTypes.h"
#include "llmc/runtime/MemoryPool.h"

namespace llmc::rt {

/// Copies `bytes` bytes from device address `src` to `dst`, enqueued on
/// `stream` (the pool's copy-on-write copies). An error is returned from
/// KvPagePool::ApplyPendingCopies.
using PageCopyFn =
    std::function<absl::Status(uint64_t dst, uint64_t src, size_t bytes, CUstream stream)>;

/// cuMemcpyDtoDAsync in the calling thread's current CUDA context (the
/// context the pool's memory belongs to). FailedPrecondition without libcuda.
/// The default copy of a KvPagePool.
PageCopyFn CudaDriverPageCopy();

/// std::memcpy, ignoring the stream: for pages in host memory
/// (FakeDeviceAllocator), i.e. tests and the C API's `host_memory` mode.
PageCopyFn HostPageCopy();

/// The shape of a pool. Every count is > 0.
struct KvPagePoolOptions {
  /// P: pages per layer (page ids 0 .. P - 1; at most INT32_MAX, since block
  /// tables hold int32 page ids).
  int64_t num_pages = 0;
  /// Tokens per page (vLLM's block size; 16 is usual).
  int64_t page_size = 0;
  int64_t num_layers = 0;
  /// Hkv: key/value heads (fewer than query heads under GQA).
  int64_t num_kv_heads = 0;
  /// D: elements per head.
  int64_t head_dim = 0;
  /// Bytes per element: 1 (fp8), 2 (bf16, f16) or 4 (f32).
  int64_t element_bytes = 0;
  /// How ApplyPendingCopies copies a page; empty = CudaDriverPageCopy().
  PageCopyFn copy_page;
};

/// One copy-on-write copy to make: page `src` into page `dst`, for every
/// layer, K and V.
struct PageCopy {
  int32_t src = 0;
  int32_t dst = 0;
  bool operator==(const PageCopy& o) const { return src == o.src && dst == o.dst; }
};

struct KvPagePoolStats {
  /// P.
  int64_t num_pages = 0;
  /// Pages on the free list.
  int64_t free_pages = 0;
  /// Pages some sequence refers to (a shared page counts once);
  /// free_pages + used_pages == num_pages.
  int64_t used_pages = 0;
  /// Used pages referred to by more than one sequence (refcount > 1).
  int64_t shared_pages = 0;
  /// Live sequences.
  int64_t num_sequences = 0;
  /// Sum of the sequences' lengths (a shared prefix counts once per
  /// sequence).
  int64_t tokens = 0;
  /// Distinct (page, row) slots holding some live sequence's token (a
  /// shared prefix counts once).
  int64_t filled_slots = 0;
  /// Copy-on-write copies recorded and not yet taken or applied.
  int64_t pending_copies = 0;
  /// Copy-on-write copies recorded since the pool was made.
  int64_t copies_on_write = 0;
  /// KV memory wasted by paging: 1 - filled_slots / (used_pages *
  /// page_size), the unfilled rows of used pages (0 when no page is used).
  double waste = 0;
  std::string ToString() const;
};

/// A pool of KV cache pages in device memory (see the file comment).
///
/// Layout, what `llm.paged_attention` and `llm.paged_kv_append` read: for
/// each layer l, KeyPages(l) and ValuePages(l) are row-major tensors
/// [P, page_size, Hkv, D] of `element_bytes`-byte elements. Key (and value)
/// position j of a sequence lives in row j % page_size of page
/// block_table[j / page_size]; its "slot" (vLLM's slot_mapping) is
/// page * page_size + row, so its K row of layer l starts at
/// KeyPages(l) + slot * row_bytes().
///
/// Sequences are int64 ids (from 0, never reused). Each page has a
/// reference count: the number of block-table entries of live sequences
/// that refer to it. Append never returns a slot in a page whose count is
/// above 1: a sequence whose last, partially filled page is shared first
/// moves to a fresh page and records a copy (PageCopy) of the old page into
/// it, which the caller applies (ApplyPendingCopies, or TakePendingCopies
/// and its own copies) before the step that writes the new rows runs.
///
/// A serving step: Append for each sequence of the batch (its slots are
/// where the step writes the new tokens' K/V), ApplyPendingCopies on the
/// step's stream, then the step itself with FillBatchMetadata's block tables
/// and lengths. Fork a sequence only after the rows it has were written
/// (copies read the pages as they are when they are applied). Truncate drops
/// trailing tokens (rejected speculative tokens); Release ends a sequence. A
/// slot belongs to its sequence until that sequence is truncated below it or
/// released: a step must not write the rows of tokens dropped before it runs
/// (their pages may already hold another sequence's rows).
///
/// Thread-safe: every method may be called from any thread. The copy
/// function runs under the pool's lock and must not call back into the pool.
class KvPagePool {
 public:
  /// Validates `options` (ValidateOptions) and allocates the pages of all
  /// layers, 2 * num_layers * P * page_bytes() bytes (each tensor's start
  /// rounded up to 256 bytes), in one allocation from `pool` on `stream`
  /// (256 bytes more: MemoryPool promises only 128-byte alignment):
  /// ResourceExhausted naming the bytes wanted when the pool cannot. `pool`
  /// must outlive the result; the pages go back to it (on `stream`) when the
  /// result is destroyed.
  static absl::StatusOr<std::unique_ptr<KvPagePool>> Create(
      MemoryPool* pool, KvPagePoolOptions options, CUstream stream = nullptr);
  /// What Create checks of `options`: InvalidArgument naming the field as
  /// `<name>.<field>` (e.g. a C API's "options") and its value.
  static absl::Status ValidateOptions(const KvPagePoolOptions& options,
                                      absl::string_view name = "KvPagePoolOptions");
  ~KvPagePool();
  KvPagePool(const KvPagePool&) = delete;
  KvPagePool& operator=(const KvPagePool&) = delete;

  const KvPagePoolOptions& options() const { return options_; }
  /// Bytes of one token's K (or V) in one layer: Hkv * D * element_bytes.
  int64_t row_bytes() const { return row_bytes_; }
  /// Bytes of one page of one layer's K (or V): page_size * row_bytes().
  int64_t page_bytes() const { return page_bytes_; }
  /// Device address of layer `layer`'s key pages [P, page_size, Hkv, D]
  /// (256-byte aligned); 0 unless 0 <= layer < num_layers.
  uint64_t KeyPages(int64_t layer) const;
  /// Device address of layer `layer`'s value pages [P, page_size, Hkv, D]
  /// (256-byte aligned); 0 unless 0 <= layer < num_layers.
  uint64_t ValuePages(int64_t layer) const;

  /// A new, empty sequence.
  int64_t AddSequence();
  /// Reserves the slots of `num_tokens` (>= 0; InvalidArgument otherwise)
  /// new tokens at the end of sequence `seq` and returns them, in position
  /// order. Takes fresh pages as needed, and first moves a shared, partially
  /// filled last page to a private copy (copy-on-write: one PageCopy
  /// recorded, the shared page's count decremented). All or nothing: when
  /// the free pages do not suffice, ResourceExhausted ("KV page pool:
  /// sequence S needs N more page(s), F free of P") and nothing changes;
  /// nothing either when it throws std::bad_alloc.
  absl::StatusOr<std::vector<int64_t>> Append(int64_t seq, int64_t num_tokens);
  /// A new sequence with the length and pages of `seq` (every page's count
  /// + 1; nothing is copied). Nothing changes when it throws std::bad_alloc.
  absl::StatusOr<int64_t> Fork(int64_t seq);
  /// Ends sequence `seq`: its pages' counts - 1, those at 0 become free.
  absl::Status Release(int64_t seq);
  /// Drops the tokens of `seq` from position `length` on (0 <= length <=
  /// its length, InvalidArgument otherwise); pages no longer needed are
  /// released as by Release.
  absl::Status Truncate(int64_t seq, int64_t length);

  /// Tokens in sequence `seq`.
  absl::StatusOr<int64_t> Length(int64_t seq) const;
  /// The page ids of sequence `seq`, ceil(length / page_size) of them: its
  /// position j is in page table[j / page_size].
  absl::StatusOr<std::vector<int32_t>> BlockTable(int64_t seq) const;

  /// The `block_table` [B, max_pages] (int32, row-major; entries past a
  /// sequence's pages 0) and `seq_lens` [B] (int32) operands of
  /// llm.paged_attention / llm.paged_kv_append for the B = seqs.size()
  /// sequences `seqs`, written into host buffers of exactly B * max_pages and
  /// B elements. InvalidArgument for other sizes, max_pages < 1, or a
  /// sequence that needs more than max_pages pages; nothing is written then.
  absl::Status FillBatchMetadata(absl::Span<const int64_t> seqs,
                                 int64_t max_pages,
                                 absl::Span<int32_t> block_table,
                                 absl::Span<int32_t> seq_lens) const;

  /// The earliest `max_copies` (all by default) of the copy-on-write copies
  /// recorded and not yet taken or applied, in the order they must run (a
  /// later copy may read an earlier one's dst); forgets them: the caller now
  /// makes them, before those still pending.
  std::vector<PageCopy> TakePendingCopies(
      size_t max_copies = std::numeric_limits<size_t>::max());
  /// Makes the pending copies in order through the options' copy function:
  /// for each, 2 * num_layers copies of page_bytes() bytes (K and V of
  /// every layer), enqueued on `stream`. On a copy's error it is returned
  /// (annotated) and that copy and those after it stay pending.
  absl::Status ApplyPendingCopies(CUstream stream = nullptr);
  /// The number of copies recorded and not yet taken or applied:
  /// Stats().pending_copies without Stats()'s walk over every page.
  int64_t NumPendingCopies() const;

  /// Walks every page and sequence: for diagnostics, not every step.
  KvPagePoolStats Stats() const;

  /// Checks the bookkeeping, for tests: every page's count equals the
  /// number of block-table entries of live sequences that refer to it (no
  /// table refers to a page twice); the free list and the used pages
  /// partition [0, P) without duplicates; each sequence has
  /// ceil(length / page_size) pages; pending copies name pages in [0, P).
  /// Internal (an llmc bug) naming the first violation.
  absl::Status CheckInvariants() const;

 private:
  struct Sequence {
    int64_t length = 0;
    std::vector<int32_t> pages;
  };
  KvPagePool(MemoryPool* pool, KvPagePoolOptions options, CUstream stream,
             uint64_t allocation, uint64_t base, int64_t layer_stride);
  absl::StatusOr<Sequence*> Find(int64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<const Sequence*> Find(int64_t seq) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  /// Count - 1 of each page of `pages`; pages at 0 go to the free list.
  void Unref(absl::Span<const int32_t> pages) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int32_t TakeFreePage() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Immutable after construction.
  MemoryPool* pool_;
  KvPagePoolOptions options_;
  CUstream stream_;
  uint64_t allocation_;   // what pool_ returned (and takes back)
  uint64_t base_;         // allocation_ rounded up to 256: K0, V0, K1, V1, ...
  int64_t layer_stride_;  // bytes between consecutive K/V tensors
  int64_t row_bytes_;
  int64_t page_bytes_;

  mutable absl::Mutex mu_;
  /// std::unordered_map, not absl::flat_hash_map: an insert that throws
  /// (std::bad_alloc) has no effect, where absl's rehash leaves the table
  /// broken; AddSequence and Fork rely on it.
  std::unordered_map<int64_t, Sequence> sequences_ ABSL_GUARDED_BY(mu_);
  int64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  /// Reference count of each page.
  std::vector<int32_t> refcount_ ABSL_GUARDED_BY(mu_);
  /// Free page ids, taken from the back.
  std::vector<int32_t> free_ ABSL_GUARDED_BY(mu_);
  std::vector<PageCopy> pending_ ABSL_GUARDED_BY(mu_);
  int64_t copies_on_write_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_KVPAGEPOOL_H
