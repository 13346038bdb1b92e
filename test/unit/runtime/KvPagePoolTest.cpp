// KvPagePool: page accounting, copy-on-write and the page layout, on host
// memory (FakeDeviceAllocator, HostPageCopy); a randomized test checks every
// sequence's tokens read back through its block table after each operation.
#include "llmc/runtime/KvPagePool.h"

#include "llmc/runtime/Device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

//===----------------------------------------------------------------------===//
// Allocation failure injection (FailsOnAllocation): this test binary's global
// operator new is malloc, except that it throws std::bad_alloc on the n-th
// allocation of a thread that asked for it. Every unaligned form is replaced
// so that new and delete stay paired (sanitizers check that); not inlined,
// so that compilers do not see free() meet operator new.
//===----------------------------------------------------------------------===//

namespace {
/// Allocations of this thread left before the one that fails; -1: none fails.
thread_local int64_t allocations_before_failure = -1;
}  // namespace

[[gnu::noinline]] void* operator new(std::size_t bytes) {
  if (allocations_before_failure >= 0 && allocations_before_failure-- == 0)
    throw std::bad_alloc();
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void* operator new[](std::size_t bytes) { return ::operator new(bytes); }
[[gnu::noinline]] void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(bytes);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
[[gnu::noinline]] void* operator new[](std::size_t bytes, const std::nothrow_t& nt) noexcept {
  return ::operator new(bytes, nt);
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace llmc::rt {
namespace {

/// Runs `f` with the `n`-th allocation (from 0) it makes on this thread
/// throwing std::bad_alloc; true when that happened (`f` let it through).
template <typename F>
bool FailsOnAllocation(int64_t n, F f) {
  allocations_before_failure = n;
  bool failed = false;
  try {
    f();
  } catch (const std::bad_alloc&) {
    failed = true;
  }
  allocations_before_failure = -1;
  return failed;
}

KvPagePoolOptions SmallOptions(int64_t num_pages = 8, int64_t page_size = 4) {
  KvPagePoolOptions o;
  o.num_pages = num_pages;
  o.page_size = page_size;
  o.num_layers = 2;
  o.num_kv_heads = 2;
  o.head_dim = 4;
  o.element_bytes = 2;
  o.copy_page = HostPageCopy();
  return o;
}

struct Fixture {
  explicit Fixture(KvPagePoolOptions o = SmallOptions(), size_t cap = 0) {
    auto a = std::make_unique<FakeDeviceAllocator>(cap);
    fake = a.get();
    mem = std::make_unique<MemoryPool>(std::move(a));
    auto p = KvPagePool::Create(mem.get(), std::move(o));
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) pool = std::move(*p);
  }
  FakeDeviceAllocator* fake;
  std::unique_ptr<MemoryPool> mem;
  std::unique_ptr<KvPagePool> pool;
};

bool Contains(absl::string_view s, absl::string_view part) {
  return s.find(part) != absl::string_view::npos;
}

std::vector<int32_t> Table(const KvPagePool& pool, int64_t seq) {
  auto t = pool.BlockTable(seq);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : std::vector<int32_t>();
}

std::vector<int64_t> AppendOk(KvPagePool& pool, int64_t seq, int64_t n) {
  auto s = pool.Append(seq, n);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::vector<int64_t>();
}

using Slots = std::vector<int64_t>;
using Pages = std::vector<int32_t>;

TEST(KvPagePoolTest, OptionsAreValidatedNamingTheField) {
  auto mem = std::make_unique<MemoryPool>(std::make_unique<FakeDeviceAllocator>());
  struct Case {
    int64_t KvPagePoolOptions::*field;
    int64_t value;
    const char* name;
  };
  for (const Case& c : {Case{&KvPagePoolOptions::num_pages, 0, "num_pages"},
                        Case{&KvPagePoolOptions::page_size, -3, "page_size"},
                        Case{&KvPagePoolOptions::num_layers, 0, "num_layers"},
                        Case{&KvPagePoolOptions::num_kv_heads, 0, "num_kv_heads"},
                        Case{&KvPagePoolOptions::head_dim, -1, "head_dim"},
                        Case{&KvPagePoolOptions::element_bytes, 0, "element_bytes"},
                        Case{&KvPagePoolOptions::element_bytes, 3, "element_bytes"},
                        Case{&KvPagePoolOptions::num_pages, int64_t{1} << 31,
                             "num_pages"}}) {
    KvPagePoolOptions o = SmallOptions();
    o.*c.field = c.value;
    auto p = KvPagePool::Create(mem.get(), o);
    ASSERT_FALSE(p.ok()) << c.name;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(p.status().message(), c.name)) << p.status();
    EXPECT_TRUE(Contains(p.status().message(), std::to_string(c.value))) << p.status();
  }
  KvPagePoolOptions huge = SmallOptions();
  huge.num_pages = 1 << 30;
  huge.head_dim = 1 << 20;
  EXPECT_EQ(KvPagePool::Create(mem.get(), huge).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KvPagePool::Create(nullptr, SmallOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(mem->Stats().num_allocs, 0);
}

TEST(KvPagePoolTest, OutOfDeviceMemoryNamesTheBytes) {
  auto mem = std::make_unique<MemoryPool>(std::make_unique<FakeDeviceAllocator>(4096));
  auto p = KvPagePool::Create(mem.get(), SmallOptions(64, 16));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  // 2 layers x K,V x 64 pages x 16 tokens x 2 heads x 4 elements x 2 bytes.
  EXPECT_TRUE(Contains(p.status().message(), "cannot allocate 65536 bytes"))
      << p.status();
}

TEST(KvPagePoolTest, PagesAreOneTensorPerLayerKAndVAndGoBackToThePool) {
  Fixture f;
  KvPagePool& pool = *f.pool;
  EXPECT_EQ(pool.row_bytes(), 2 * 4 * 2);
  EXPECT_EQ(pool.page_bytes(), 4 * 16);
  const uint64_t tensor_bytes = 8 * pool.page_bytes();
  std::vector<uint64_t> tensors = {pool.KeyPages(0), pool.ValuePages(0),
                                   pool.KeyPages(1), pool.ValuePages(1)};
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(tensors[i] % 256, 0u);
    if (i) {
      EXPECT_GE(tensors[i], tensors[i - 1] + tensor_bytes);
    }
  }
  EXPECT_EQ(pool.KeyPages(2), 0u);
  EXPECT_EQ(pool.ValuePages(-1), 0u);
  EXPECT_GT(f.mem->Stats().bytes_in_use, 0);
  f.pool.reset();
  EXPECT_EQ(f.mem->Stats().bytes_in_use, 0);
}

/// A DeviceAllocator whose pointers are 128 bytes past a 256-byte boundary:
/// MemoryPool promises 128-byte alignment, no more.
class MisalignedAllocator : public DeviceAllocator {
 public:
  absl::StatusOr<uint64_t> Allocate(size_t bytes, CUstream stream) override {
    absl::StatusOr<uint64_t> p = fake_.Allocate(bytes + 128, stream);
    if (!p.ok()) return p;
    begin = *p + 128;
    end = begin + bytes;
    return begin;
  }
  void Free(uint64_t ptr, size_t bytes, CUstream stream) override {
    fake_.Free(ptr - 128, bytes + 128, stream);
  }
  std::string Name() const override { return "misaligned"; }
  /// The last allocation: [begin, end).
  uint64_t begin = 0, end = 0;

 private:
  FakeDeviceAllocator fake_;
};

TEST(KvPagePoolTest, PagesAre256ByteAlignedFromA128ByteAlignedPool) {
  auto owned = std::make_unique<MisalignedAllocator>();
  MisalignedAllocator* allocator = owned.get();
  MemoryPool mem(std::move(owned));
  auto made = KvPagePool::Create(&mem, SmallOptions());
  ASSERT_TRUE(made.ok()) << made.status();
  KvPagePool& pool = **made;
  EXPECT_NE(allocator->begin % 256, 0u);
  const uint64_t tensor_bytes = 8 * pool.page_bytes();
  for (int64_t l = 0; l < 2; ++l) {
    for (uint64_t t : {pool.KeyPages(l), pool.ValuePages(l)}) {
      EXPECT_EQ(t % 256, 0u);
      EXPECT_GE(t, allocator->begin);
      EXPECT_LE(t + tensor_bytes, allocator->end);
    }
  }
  made->reset();
  // Freed with the pointer the pool returned, not the aligned one.
  EXPECT_EQ(mem.Stats().bytes_in_use, 0);
}

TEST(KvPagePoolTest, AppendAcrossPageBoundaries) {
  Fixture f;
  KvPagePool& pool = *f.pool;
  int64_t a = pool.AddSequence();
  int64_t b = pool.AddSequence();
  EXPECT_NE(a, b);
  EXPECT_EQ(Table(pool, a), Pages{});
  EXPECT_EQ(AppendOk(pool, a, 3), (Slots{0, 1, 2}));
  EXPECT_EQ(AppendOk(pool, b, 1), (Slots{4}));  // page 1
  EXPECT_EQ(AppendOk(pool, a, 3), (Slots{3, 8, 9}));  // fills page 0, takes 2
  EXPECT_EQ(AppendOk(pool, a, 0), Slots{});
  EXPECT_EQ(AppendOk(pool, a, 6), (Slots{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(Table(pool, a), (Pages{0, 2, 3}));
  EXPECT_EQ(*pool.Length(a), 12);
  EXPECT_EQ(*pool.Length(b), 1);
  KvPagePoolStats st = pool.Stats();
  EXPECT_EQ(st.used_pages, 4);
  EXPECT_EQ(st.free_pages, 4);
  EXPECT_EQ(st.tokens, 13);
  EXPECT_EQ(st.filled_slots, 13);
  EXPECT_DOUBLE_EQ(st.waste, 1.0 - 13.0 / 16.0);
  EXPECT_EQ(st.copies_on_write, 0);
  EXPECT_TRUE(pool.CheckInvariants().ok());
  EXPECT_EQ(pool.Append(a, -1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvPagePoolTest, ForkSharesPagesAndAppendCopiesOnWriteOnce) {
  Fixture f;
  KvPagePool& pool = *f.pool;
  int64_t a = pool.AddSequence();
  AppendOk(pool, a, 6);  // pages 0, 1 (2 rows of page 1)
  auto b = pool.Fork(a);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(Table(pool, *b), (Pages{0, 1}));
  EXPECT_EQ(*pool.Length(*b), 6);
  KvPagePoolStats st = pool.Stats();
  EXPECT_EQ(st.used_pages, 2);
  EXPECT_EQ(st.shared_pages, 2);
  EXPECT_EQ(st.tokens, 12);
  EXPECT_EQ(st.filled_slots, 6);  // the shared prefix counts once

  // a writes into shared page 1: it moves to page 2, a copy 1 -> 2.
  EXPECT_EQ(AppendOk(pool, a, 1), (Slots{2 * 4 + 2}));
  EXPECT_EQ(Table(pool, a), (Pages{0, 2}));
  EXPECT_EQ(Table(pool, *b), (Pages{0, 1}));
  EXPECT_EQ(pool.Stats().pending_copies, 1);
  // Page 2 is a's alone now, page 1 b's alone: no further copies.
  EXPECT_EQ(AppendOk(pool, a, 1), (Slots{2 * 4 + 3}));
  EXPECT_EQ(AppendOk(pool, *b, 1), (Slots{1 * 4 + 2}));
  st = pool.Stats();
  EXPECT_EQ(st.copies_on_write, 1);
  EXPECT_EQ(st.shared_pages, 1);
  EXPECT_EQ(st.used_pages, 3);
  EXPECT_TRUE(pool.CheckInvariants().ok());

  std::vector<PageCopy> copies = pool.TakePendingCopies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0], (PageCopy{1, 2}));
  EXPECT_TRUE(pool.TakePendingCopies().empty());
}

TEST(KvPagePoolTest, ForkAtAPageBoundaryNeedsNoCopy) {
  Fixture f;
  KvPagePool& pool = *f.pool;
  int64_t a = pool.AddSequence();
  AppendOk(pool, a, 8);
  int64_t b = *pool.Fork(a);
  EXPECT_EQ(AppendOk(pool, a, 1), (Slots{8}));
  EXPECT_EQ(AppendOk(pool, b, 1), (Slots{12}));
  EXPECT_EQ(pool.Stats().copies_on_write, 0);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(KvPagePoolTest, ApplyPendingCopiesCopiesEveryLayerKAndV) {
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  KvPagePoolOptions o = SmallOptions();
  o.copy_page = [&](uint64_t dst, uint64_t src, size_t bytes, CUstream s) {
    EXPECT_EQ(bytes, 64u);
    EXPECT_EQ(s, reinterpret_cast<CUstream>(0x1000));
    calls.push_back({dst, src});
    return HostPageCopy()(dst, src, bytes, s);
  };
  Fixture f(o);
  KvPagePool& pool = *f.pool;
  int64_t a = pool.AddSequence();
  AppendOk(pool, a, 2);
  int64_t b = *pool.Fork(a);
  AppendOk(pool, b, 1);  // b: page 0 -> page 1
  ASSERT_TRUE(pool.ApplyPendingCopies(reinterpret_cast<CUstream>(0x1000)).ok());
  const uint64_t pb = pool.page_bytes();
  std::vector<std::pair<uint64_t, uint64_t>> expected;
  for (int l = 0; l < 2; ++l)
    for (uint64_t t : {pool.KeyPages(l), pool.ValuePages(l)})
      expected.push_back({t + 1 * pb, t + 0 * pb});
  EXPECT_EQ(calls, expected);
  EXPECT_EQ(pool.Stats().pending_copies, 0);
}

TEST(KvPagePoolTest, AFailedCopyAndTheRestStayPending) {
  int calls = 0;
  KvPagePoolOptions o = SmallOptions();
  o.copy_page = [&](uint64_t, uint64_t, size_t, CUstream) {
    return ++calls == 6 ? absl::InternalError("copy engine on fire") : absl::OkStatus();
  };
  Fixture f(o);
  KvPagePool& pool = *f.pool;
  for (int i = 0; i < 2; ++i) {
    int64_t a = pool.AddSequence();
    AppendOk(pool, a, 1);
    AppendOk(pool, *pool.Fork(a), 1);
  }
  ASSERT_EQ(pool.Stats().pending_copies, 2);
  absl::Status s = pool.ApplyPendingCopies();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(Contains(s.message(), "copy engine on fire")) << s;
  EXPECT_TRUE(Contains(s.message(), "layer 0")) << s;
  // The first copy's 4 copies went through; the second failed on its 2nd.
  EXPECT_EQ(pool.Stats().pending_copies, 1);
  EXPECT_TRUE(pool.ApplyPendingCopies().ok());
  EXPECT_EQ(calls, 6 + 4);
  EXPECT_EQ(pool.Stats().pending_copies, 0);
}

TEST(KvPagePoolTest, TakePendingCopiesTakesTheEarliestFirst) {
  Fixture f;
  KvPagePool& pool = *f.pool;
  for (int i = 0; i < 3; ++i) {
    int64_t a = pool.AddSequence();
    AppendOk(pool, a, 1);
    AppendOk(pool, *pool.Fork(a), 1);
  }
  // Pages 0, 2, 4 were shared; 1, 3, 5 their copies.
  EXPECT_EQ(pool.NumPendingCopies(), 3);
  EXPECT_EQ(pool.TakePendingCopies(2), (std::vector<PageCopy>{{0, 1}, {2, 3}}));
  EXPECT_EQ(pool.TakePendingCopies(0), std::vector<PageCopy>{});
  EXPECT_EQ(pool.NumPendingCopies(), 1);
  EXPECT_EQ(pool.TakePendingCopies(), (std::vector<PageCopy>{{4, 5}}));
  EXPECT_EQ(pool.NumPendingCopies(), 0);
  EXPECT_EQ(pool.Stats().pending_copies, 0);
  EXPECT_EQ(pool.Stats().copies_on_write, 3);
}

TEST(KvPagePoolTest, ReleaseFreesOnlyUnsharedPages) {
  Fixture f;
  KvPagePool& pool = *f.pool;
  int64_t a = pool.AddSequence();
  AppendOk(pool, a, 8);  // pages 0, 1
  int64_t b = *pool.Fork(a);
  AppendOk(pool, b, 4);  // page 2, b's alone
  EXPECT_EQ(pool.Stats().free_pages, 5);
  ASSERT_TRUE(pool.Release(a).ok());
  KvPagePoolStats st = pool.Stats();
  EXPECT_EQ(st.free_pages, 5);  // b still holds 0, 1
  EXPECT_EQ(st.shared_pages, 0);
  EXPECT_EQ(st.num_sequences, 1);
  EXPECT_EQ(Table(pool, b), (Pages{0, 1, 2}));
  EXPECT_TRUE(pool.CheckInvariants().ok());
  ASSERT_TRUE(pool.Release(b).ok());
  st = pool.Stats();
  EXPECT_EQ(st.free_pages, 8);
  EXPECT_EQ(st.used_pages, 0);
  EXPECT_EQ(st.waste, 0.0);
  EXPECT_TRUE(pool.CheckInvariants().ok());
  EXPECT_EQ(pool.Release(a).code(), absl::StatusCode::kNotFound);
}

TEST(KvPagePoolTest, TruncateDropsTrailingTokensAndPages) {
  Fixture f;
  KvPagePool& pool = *f.pool;
  int64_t a = pool.AddSequence();
  AppendOk(pool, a, 10);  // pages 0, 1, 2
  ASSERT_TRUE(pool.Truncate(a, 10).ok());
  EXPECT_EQ(pool.Stats().free_pages, 5);
  ASSERT_TRUE(pool.Truncate(a, 5).ok());
  EXPECT_EQ(*pool.Length(a), 5);
  EXPECT_EQ(Table(pool, a), (Pages{0, 1}));
  EXPECT_EQ(pool.Stats().free_pages, 6);
  // Speculative tokens rejected: the next ones reuse their rows.
  EXPECT_EQ(AppendOk(pool, a, 2), (Slots{5, 6}));
  absl::Status s = pool.Truncate(a, 8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "0 .. 7")) << s;
  EXPECT_EQ(pool.Truncate(a, -1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(pool.Truncate(a, 0).ok());
  EXPECT_EQ(Table(pool, a), Pages{});
  EXPECT_EQ(pool.Stats().free_pages, 8);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(KvPagePoolTest, TruncatedSequenceCopiesASharedPageBeforeAppending) {
  Fixture f;
  KvPagePool& pool = *f.pool;
  int64_t a = pool.AddSequence();
  AppendOk(pool, a, 7);  // pages 0, 1
  int64_t b = *pool.Fork(a);
  ASSERT_TRUE(pool.Truncate(b, 5).ok());  // b still shares page 1 (row 0)
  // Row 5 of page 1 is a's token: b must not overwrite it.
  EXPECT_EQ(AppendOk(pool, b, 1), (Slots{2 * 4 + 1}));
  EXPECT_EQ(pool.TakePendingCopies(), (std::vector<PageCopy>{{1, 2}}));
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(KvPagePoolTest, OutOfPagesChangesNothing) {
  Fixture f(SmallOptions(/*num_pages=*/4));
  KvPagePool& pool = *f.pool;
  int64_t a = pool.AddSequence();
  AppendOk(pool, a, 10);  // pages 0, 1, 2
  int64_t b = *pool.Fork(a);
  KvPagePoolStats before = pool.Stats();
  // 2 rows left in the shared page 2 (a copy first) + 2 pages for 5 more.
  auto r = pool.Append(b, 7);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "KV page pool: sequence " + std::to_string(b) +
                " needs 3 more page(s), 1 free of 4");
  EXPECT_EQ(pool.Stats().ToString(), before.ToString());
  EXPECT_EQ(Table(pool, a), (Pages{0, 1, 2}));
  EXPECT_EQ(Table(pool, b), (Pages{0, 1, 2}));
  EXPECT_EQ(*pool.Length(b), 10);
  EXPECT_TRUE(pool.TakePendingCopies().empty());
  EXPECT_EQ(pool.Append(b, int64_t{1} << 62).status().code(),
            absl::StatusCode::kResourceExhausted);
  // What fits still does: the copy into the last free page.
  EXPECT_EQ(AppendOk(pool, b, 2), (Slots{14, 15}));
  EXPECT_EQ(pool.Append(a, 3).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(AppendOk(pool, a, 2), (Slots{10, 11}));  // page 2 is a's alone now
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

// All or nothing also when host memory runs out (the C API reports
// std::bad_alloc as code 8, which promises nothing changed): each allocation
// of an Append that copies a shared page and takes fresh ones, and of Forks,
// fails in turn.
TEST(KvPagePoolTest, AppendAndForkChangeNothingWhenAnAllocationFails) {
  Fixture f(SmallOptions(/*num_pages=*/16));
  KvPagePool& pool = *f.pool;
  int64_t a = pool.AddSequence();
  AppendOk(pool, a, 6);  // pages 0, 1 (2 rows of page 1)
  int64_t b = *pool.Fork(a);
  auto state = [&] {
    return std::make_tuple(pool.Stats().ToString(), Table(pool, a), Table(pool, b),
                           *pool.Length(a), *pool.Length(b));
  };
  int failures = 0;
  for (int64_t n = 0;; ++n) {
    SCOPED_TRACE(absl::StrCat("allocation ", n, " of Append fails"));
    const auto before = state();
    absl::StatusOr<std::vector<int64_t>> slots;
    if (!FailsOnAllocation(n, [&] { slots = pool.Append(b, 9); })) {
      ASSERT_TRUE(slots.ok()) << slots.status();
      // b's copy of page 1 is page 2; then pages 3 and 4.
      EXPECT_EQ(*slots, (Slots{10, 11, 12, 13, 14, 15, 16, 17, 18}));
      break;
    }
    ++failures;
    ASSERT_EQ(state(), before);
    ASSERT_EQ(pool.NumPendingCopies(), 0);
    absl::Status inv = pool.CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv;
  }
  EXPECT_GT(failures, 0);
  EXPECT_EQ(pool.TakePendingCopies(), (std::vector<PageCopy>{{1, 2}}));

  // Enough forks that the sequence table grows too.
  for (int k = 0; k < 20; ++k) {
    failures = 0;
    for (int64_t n = 0;; ++n) {
      SCOPED_TRACE(absl::StrCat("fork ", k, ", allocation ", n, " fails"));
      const KvPagePoolStats before = pool.Stats();
      absl::StatusOr<int64_t> c;
      if (!FailsOnAllocation(n, [&] { c = pool.Fork(b); })) {
        ASSERT_TRUE(c.ok()) << c.status();
        EXPECT_EQ(Table(pool, *c), Table(pool, b));
        break;
      }
      ++failures;
      ASSERT_EQ(pool.Stats().ToString(), before.ToString());
      absl::Status inv = pool.CheckInvariants();
      ASSERT_TRUE(inv.ok()) << inv;
    }
    EXPECT_GT(failures, 0);
  }
  EXPECT_EQ(pool.Stats().num_sequences, 2 + 20);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(KvPagePoolTest, UnknownSequencesAreNotFound) {
  Fixture f;
  KvPagePool& pool = *f.pool;
  int64_t a = pool.AddSequence();
  ASSERT_TRUE(pool.Release(a).ok());
  for (int64_t id : {a, int64_t{99}, int64_t{-1}}) {
    std::vector<absl::Status> errors = {
        pool.Append(id, 1).status(), pool.Fork(id).status(), pool.Release(id),
        pool.Truncate(id, 0),        pool.Length(id).status(),
        pool.BlockTable(id).status()};
    for (const absl::Status& s : errors) {
      EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
      EXPECT_TRUE(Contains(s.message(), "sequence " + std::to_string(id))) << s;
    }
  }
  EXPECT_EQ(pool.Stats().num_sequences, 0);
  EXPECT_EQ(pool.AddSequence(), a + 1);  // ids are not reused
}

TEST(KvPagePoolTest, FillBatchMetadata) {
  Fixture f;
  KvPagePool& pool = *f.pool;
  int64_t a = pool.AddSequence();
  int64_t b = pool.AddSequence();
  AppendOk(pool, a, 9);  // pages 0, 1, 2
  AppendOk(pool, b, 2);  // page 3
  std::vector<int64_t> seqs = {b, a};
  std::vector<int32_t> table(2 * 3, -7), lens(2, -7);
  ASSERT_TRUE(pool.FillBatchMetadata(seqs, 3, absl::MakeSpan(table),
                                     absl::MakeSpan(lens)).ok());
  EXPECT_EQ(table, (std::vector<int32_t>{3, 0, 0, 0, 1, 2}));
  EXPECT_EQ(lens, (std::vector<int32_t>{2, 9}));

  std::vector<int32_t> small(2 * 2, -7), lens2(2, -7);
  absl::Status s = pool.FillBatchMetadata(seqs, 2, absl::MakeSpan(small),
                                          absl::MakeSpan(lens2));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "more than max_pages = 2")) << s;
  EXPECT_EQ(small, std::vector<int32_t>(4, -7));  // nothing written
  EXPECT_EQ(pool.FillBatchMetadata(seqs, 3, absl::MakeSpan(small),
                                   absl::MakeSpan(lens2)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.FillBatchMetadata(seqs, 0, {}, absl::MakeSpan(lens2)).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int64_t> unknown = {a, 42};
  EXPECT_EQ(pool.FillBatchMetadata(unknown, 3, absl::MakeSpan(table),
                                   absl::MakeSpan(lens)).code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(pool.FillBatchMetadata({}, 3, {}, {}).ok());
}

TEST(KvPagePoolTest, ConcurrentSequencesKeepTheBookkeeping) {
  Fixture f(SmallOptions(/*num_pages=*/64));
  KvPagePool& pool = *f.pool;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 300; ++i) {
        int64_t s = pool.AddSequence();
        (void)pool.Append(s, rng() % 9);
        auto c = pool.Fork(s);
        (void)pool.Append(*c, 1 + rng() % 5);
        (void)pool.Truncate(s, 0);
        (void)pool.Release(s);
        if (rng() % 2) (void)pool.Release(*c);
        (void)pool.ApplyPendingCopies();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(pool.CheckInvariants().ok()) << pool.CheckInvariants();
}

TEST(KvPagePoolGpuTest, CopyOnWriteThroughTheDriver) {
  auto device = Device::Open(0);
  if (!device.ok()) GTEST_SKIP() << "no GPU: " << device.status();
  Device& dev = **device;
  KvPagePoolOptions o = SmallOptions();
  o.copy_page = nullptr;  // the default: cuMemcpyDtoDAsync
  auto made = KvPagePool::Create(&dev.pool(), o);
  ASSERT_TRUE(made.ok()) << made.status();
  KvPagePool& pool = **made;
  const int64_t row = pool.row_bytes();
  auto write = [&](int64_t slot, int32_t token) {
    for (int64_t l = 0; l < 2; ++l) {
      int32_t v = -token;
      ASSERT_TRUE(dev.CopyToDevice(pool.KeyPages(l) + slot * row, &token, 4).ok());
      ASSERT_TRUE(dev.CopyToDevice(pool.ValuePages(l) + slot * row, &v, 4).ok());
    }
  };
  int64_t a = pool.AddSequence();
  std::vector<int64_t> slots = AppendOk(pool, a, 3);
  for (int i = 0; i < 3; ++i) write(slots[i], 10 + i);
  int64_t b = *pool.Fork(a);
  slots = AppendOk(pool, b, 1);  // page 0 -> page 1
  ASSERT_EQ(pool.Stats().pending_copies, 1);
  auto stream = dev.CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE(pool.ApplyPendingCopies(*stream).ok());
  ASSERT_TRUE(dev.SynchronizeStream(*stream).ok());
  write(slots[0], 20);
  std::vector<int32_t> table = Table(pool, b);
  ASSERT_EQ(table, (Pages{1}));
  for (int64_t l = 0; l < 2; ++l) {
    int32_t k[4], v[4];
    for (int64_t j = 0; j < 4; ++j) {
      ASSERT_TRUE(dev.CopyToHost(&k[j], pool.KeyPages(l) + (4 + j) * row, 4).ok());
      ASSERT_TRUE(dev.CopyToHost(&v[j], pool.ValuePages(l) + (4 + j) * row, 4).ok());
    }
    EXPECT_EQ(std::vector<int32_t>(k, k + 4), (std::vector<int32_t>{10, 11, 12, 20}));
    EXPECT_EQ(std::vector<int32_t>(v, v + 4), (std::vector<int32_t>{-10, -11, -12, -20}));
  }
  ASSERT_TRUE(dev.DestroyStream(*stream).ok());
}

//===----------------------------------------------------------------------===//
// Randomized: operations against a model of each sequence's tokens.
//===----------------------------------------------------------------------===//

struct FuzzConfig {
  KvPagePoolOptions options;
  uint32_t seed;
  /// Several operations per step (Appends of a step write their tokens
  /// only after the step's copies, as a model step does) instead of one.
  bool batched;
};

void PrintTo(const FuzzConfig& c, std::ostream* os) {
  *os << "{P " << c.options.num_pages << ", page_size " << c.options.page_size
      << ", element_bytes " << c.options.element_bytes << ", seed " << c.seed
      << (c.batched ? ", batched}" : "}");
}

std::string Name(const testing::TestParamInfo<FuzzConfig>& info) {
  const KvPagePoolOptions& o = info.param.options;
  return absl::StrCat("P", o.num_pages, "x", o.page_size, "_e", o.element_bytes,
                      "_seed", info.param.seed,
                      info.param.batched ? "_batched" : "_each");
}

class KvPagePoolFuzzTest : public testing::TestWithParam<FuzzConfig> {};

/// The fake device memory of a pool: a token id is written as int32 into the
/// first and last 4 bytes of its K row (token) and V row (~token) of the
/// first and last layer.
class Memory {
 public:
  explicit Memory(const KvPagePool& pool) : pool_(pool) {
    const int64_t layers = pool.options().num_layers;
    for (int64_t l : {int64_t{0}, layers - 1})
      for (uint64_t t : {pool.KeyPages(l), pool.ValuePages(l)})
        std::memset(reinterpret_cast<void*>(t), 0xff,
                    pool.options().num_pages * pool.page_bytes());  // -1: no token
  }
  void Write(int64_t slot, int32_t token) {
    ForEachWord(slot, [&](int32_t* k, int32_t* v) {
      *k = token;
      *v = ~token;
    });
  }
  /// "" when every word of `slot` holds `token`.
  std::string Check(int64_t slot, int32_t token) {
    std::string bad;
    ForEachWord(slot, [&](int32_t* k, int32_t* v) {
      if (*k != token || *v != ~token)
        bad = absl::StrCat("slot ", slot, " holds K ", *k, ", V ~", ~*v,
                           ", expected token ", token);
    });
    return bad;
  }

 private:
  template <typename F>
  void ForEachWord(int64_t slot, F f) {
    const int64_t layers = pool_.options().num_layers;
    const int64_t row = pool_.row_bytes();
    for (int64_t l : {int64_t{0}, layers - 1}) {
      for (int64_t offset : {int64_t{0}, row - 4}) {
        auto word = [&](uint64_t tensor) {
          return reinterpret_cast<int32_t*>(tensor + slot * row + offset);
        };
        f(word(pool_.KeyPages(l)), word(pool_.ValuePages(l)));
      }
    }
  }
  const KvPagePool& pool_;
};

TEST_P(KvPagePoolFuzzTest, SequencesReadBackTheirTokens) {
  const FuzzConfig& cfg = GetParam();
  Fixture f(cfg.options);
  ASSERT_NE(f.pool, nullptr);
  KvPagePool& pool = *f.pool;
  Memory memory(pool);
  const int64_t page_size = cfg.options.page_size;
  const int64_t num_pages = cfg.options.num_pages;
  std::mt19937 rng(cfg.seed);
  auto uniform = [&](int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };

  std::map<int64_t, std::vector<int32_t>> model;  // live sequence -> tokens
  int32_t next_token = 1;
  int64_t released = -1;                           // a dead id, once there is one
  struct Write {
    int64_t seq, position, slot;
    int32_t token;
  };
  std::vector<Write> writes;  // the step's, in order
  int64_t expected_copies = 0;

  auto tables = [&] {
    std::map<int64_t, std::vector<int32_t>> t;
    for (const auto& [id, tokens] : model) t[id] = Table(pool, id);
    return t;
  };
  // The step's end: its copies, then the K/V rows of its tokens still in
  // their sequences (a step does not compute tokens truncated or released
  // before it runs).
  auto finish_step = [&] {
    ASSERT_EQ(pool.Stats().pending_copies, expected_copies);
    ASSERT_TRUE(pool.ApplyPendingCopies().ok());
    expected_copies = 0;
    for (const Write& w : writes) {
      auto it = model.find(w.seq);
      if (it != model.end() && w.position < int64_t(it->second.size()) &&
          it->second[w.position] == w.token)
        memory.Write(w.slot, w.token);
    }
    writes.clear();
    for (const auto& [id, tokens] : model) {
      std::vector<int32_t> table = Table(pool, id);
      ASSERT_EQ(int64_t(table.size()), (int64_t(tokens.size()) + page_size - 1) / page_size);
      for (size_t j = 0; j < tokens.size(); ++j) {
        int64_t slot = int64_t{table[j / page_size]} * page_size + j % page_size;
        std::string bad = memory.Check(slot, tokens[j]);
        ASSERT_EQ(bad, "") << "sequence " << id << " position " << j;
      }
    }
  };
  auto random_live = [&] {
    auto it = model.begin();
    std::advance(it, uniform(0, int64_t(model.size()) - 1));
    return it->first;
  };

  const int kOps = 4000;
  int appends_ok = 0, appends_exhausted = 0, forks = 0, copies = 0;
  for (int op = 0; op < kOps; ++op) {
    SCOPED_TRACE(absl::StrCat("op ", op));
    int kind = static_cast<int>(uniform(0, 99));
    // Under pressure, a scheduler preempts: mostly releases then.
    if (pool.Stats().free_pages * 8 < num_pages && uniform(0, 3) == 0) kind = 75;
    if (model.empty() || kind < 8) {
      if (model.size() < 12) model[pool.AddSequence()] = {};
    } else if (kind < 55) {
      int64_t id = random_live();
      int64_t n = uniform(1, 2 * page_size);
      std::vector<int32_t>& tokens = model[id];
      const int64_t len = tokens.size();
      // Pages it takes: fresh ones, and a copy when its partially filled
      // last page appears in another table too.
      auto before = tables();
      int64_t fresh = (len + n + page_size - 1) / page_size - (len + page_size - 1) / page_size;
      bool shared = false;
      if (len % page_size != 0) {
        int32_t last = before[id].back();
        for (const auto& [other, t] : before)
          shared |= other != id && std::count(t.begin(), t.end(), last) > 0;
      }
      KvPagePoolStats st = pool.Stats();
      auto slots = pool.Append(id, n);
      if (fresh + shared > st.free_pages) {
        ASSERT_FALSE(slots.ok());
        ASSERT_EQ(slots.status().code(), absl::StatusCode::kResourceExhausted);
        ASSERT_EQ(pool.Stats().ToString(), st.ToString());
        ASSERT_EQ(tables(), before);
        ++appends_exhausted;
      } else {
        ASSERT_TRUE(slots.ok()) << slots.status() << " " << st.ToString();
        ASSERT_EQ(int64_t(slots->size()), n);
        expected_copies += shared;
        copies += shared;
        auto after = tables();
        for (const auto& [other, t] : before) {
          if (other != id) {
            ASSERT_EQ(after[other], t);
          }
        }
        for (int64_t k = 0; k < n; ++k) {
          int64_t j = len + k;
          int64_t slot = (*slots)[k];
          ASSERT_EQ(slot, int64_t{after[id][j / page_size]} * page_size + j % page_size);
          // Written by this sequence only: no other table has its page.
          for (const auto& [other, t] : after) {
            if (other != id) {
              ASSERT_EQ(std::count(t.begin(), t.end(), slot / page_size), 0)
                  << "slot " << slot << " of sequence " << id
                  << " is in a page sequence " << other << " holds";
            }
          }
          tokens.push_back(next_token);
          writes.push_back({id, j, slot, next_token++});
        }
        ++appends_ok;
      }
    } else if (kind < 70) {
      // A fork reads the parent's rows: they are written by then.
      ASSERT_NO_FATAL_FAILURE(finish_step());
      int64_t parent = random_live();
      auto child = pool.Fork(parent);
      ASSERT_TRUE(child.ok());
      model[*child] = model[parent];
      ++forks;
    } else if (kind < 80) {
      int64_t id = random_live();
      ASSERT_TRUE(pool.Release(id).ok());
      model.erase(id);
      released = id;
    } else if (kind < 97) {
      int64_t id = random_live();
      std::vector<int32_t>& tokens = model[id];
      int64_t len = tokens.size();
      int64_t length = uniform(0, 1) ? std::max<int64_t>(0, len - uniform(1, page_size))
                                     : uniform(0, len);
      ASSERT_TRUE(pool.Truncate(id, length).ok());
      tokens.resize(length);
    } else if (released >= 0) {
      KvPagePoolStats st = pool.Stats();
      ASSERT_EQ(pool.Append(released, 1).status().code(), absl::StatusCode::kNotFound);
      ASSERT_EQ(pool.Fork(released).status().code(), absl::StatusCode::kNotFound);
      ASSERT_EQ(pool.Truncate(released, 0).code(), absl::StatusCode::kNotFound);
      ASSERT_EQ(pool.Stats().ToString(), st.ToString());
    }
    absl::Status inv = pool.CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv;
    KvPagePoolStats st = pool.Stats();
    ASSERT_EQ(st.num_sequences, int64_t(model.size()));
    int64_t tokens = 0;
    std::set<int64_t> slots;
    for (const auto& [id, t] : model) {
      tokens += t.size();
      std::vector<int32_t> table = Table(pool, id);
      for (size_t j = 0; j < t.size(); ++j)
        slots.insert(int64_t{table[j / page_size]} * page_size + j % page_size);
    }
    ASSERT_EQ(st.tokens, tokens);
    ASSERT_EQ(st.filled_slots, int64_t(slots.size()));
    if (!cfg.batched || uniform(0, 3) == 0) {
      ASSERT_NO_FATAL_FAILURE(finish_step());
    }
  }
  ASSERT_NO_FATAL_FAILURE(finish_step());
  // The run must have exercised what it tests.
  EXPECT_GT(appends_ok, kOps / 10);
  EXPECT_GT(appends_exhausted, 0);
  EXPECT_GT(forks, kOps / 20);
  if (page_size > 1) {  // else no page is ever partly filled
    EXPECT_GT(copies, 10);
  }
  EXPECT_EQ(pool.Stats().copies_on_write, copies);

  for (const auto& [id, tokens] : model) ASSERT_TRUE(pool.Release(id).ok());
  KvPagePoolStats st = pool.Stats();
  EXPECT_EQ(st.free_pages, num_pages) << st.ToString();
  EXPECT_EQ(st.used_pages, 0);
  EXPECT_EQ(st.num_sequences, 0);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

std::vector<FuzzConfig> FuzzConfigs() {
  std::vector<FuzzConfig> configs;
  auto options = [](int64_t pages, int64_t page_size, int64_t layers, int64_t heads,
                    int64_t dim, int64_t element_bytes) {
    KvPagePoolOptions o;
    o.num_pages = pages;
    o.page_size = page_size;
    o.num_layers = layers;
    o.num_kv_heads = heads;
    o.head_dim = dim;
    o.element_bytes = element_bytes;
    o.copy_page = HostPageCopy();
    return o;
  };
  for (uint32_t seed : {1u, 2u, 3u}) {
    for (bool batched : {false, true}) {
      configs.push_back({options(40, 4, 3, 2, 4, 2), seed, batched});
      configs.push_back({options(24, 16, 2, 1, 2, 4), seed, batched});
      configs.push_back({options(32, 1, 2, 2, 4, 1), seed, batched});
    }
  }
  return configs;
}

INSTANTIATE_TEST_SUITE_P(KvPagePoolRandom, KvPagePoolFuzzTest, testing::ValuesIn(FuzzConfigs()),
                         Name);

}  // namespace
}  // namespace llmc::rt
