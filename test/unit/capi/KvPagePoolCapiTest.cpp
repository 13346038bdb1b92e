// C API of the KV page pool (llmc_kv_page_pool_*): a sequence lifecycle on
// host memory (host_memory = 1, no GPU): append, fork, copy-on-write, tokens
// read back through the block tables, truncate, release; misuse reported
// with the documented codes.
#include "CapiTestUtils.h"
#include "llmc/llmc_c.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace {

using llmc::test::Contains;
using llmc::test::Status;

llmc_kv_page_pool_options HostOptions() {
  llmc_kv_page_pool_options o = {};
  o.num_pages = 6;
  o.page_size = 4;
  o.num_layers = 2;
  o.num_kv_heads = 2;
  o.head_dim = 4;
  o.element_bytes = 2;
  o.host_memory = 1;
  return o;
}

struct PoolHandle {
  explicit PoolHandle(llmc_kv_page_pool_options o = HostOptions()) {
    Status st(llmc_kv_page_pool_create(&o, &p));
    EXPECT_EQ(st.code(), 0) << st.message();
  }
  ~PoolHandle() { llmc_kv_page_pool_release(p); }
  llmc_kv_page_pool_t *p = nullptr;
};

constexpr int64_t kRowBytes = 2 * 4 * 2;

/// The first int32 of K (token) and V (-token) of every layer at `slot`.
void WriteToken(llmc_kv_page_pool_t *pool, int64_t slot, int32_t token) {
  for (int64_t l = 0; l < 2; ++l) {
    uint64_t k = 0, v = 0;
    Status st(llmc_kv_page_pool_pages(pool, l, &k, &v));
    ASSERT_EQ(st.code(), 0) << st.message();
    int32_t neg = -token;
    std::memcpy(reinterpret_cast<void *>(k + slot * kRowBytes), &token, 4);
    std::memcpy(reinterpret_cast<void *>(v + slot * kRowBytes), &neg, 4);
  }
}

/// The tokens of `seq` read back through its block table (K of layer 1;
/// checks V and layer 0 agree).
std::vector<int32_t> ReadTokens(llmc_kv_page_pool_t *pool, int64_t seq) {
  int64_t length = 0, num_pages = 0;
  Status a(llmc_kv_page_pool_length(pool, seq, &length));
  EXPECT_EQ(a.code(), 0) << a.message();
  Status b(llmc_kv_page_pool_block_table(pool, seq, nullptr, 0, &num_pages));
  EXPECT_EQ(b.code(), 0) << b.message();
  EXPECT_EQ(num_pages, (length + 3) / 4);
  std::vector<int32_t> table(num_pages);
  Status c(llmc_kv_page_pool_block_table(pool, seq, table.data(), num_pages,
                                         &num_pages));
  EXPECT_EQ(c.code(), 0) << c.message();
  std::vector<int32_t> tokens;
  for (int64_t j = 0; j < length; ++j) {
    int64_t slot = int64_t{table[j / 4]} * 4 + j % 4;
    int32_t words[4];
    for (int64_t l = 0; l < 2; ++l) {
      uint64_t k = 0, v = 0;
      Status st(llmc_kv_page_pool_pages(pool, l, &k, &v));
      EXPECT_EQ(st.code(), 0) << st.message();
      std::memcpy(&words[2 * l], reinterpret_cast<void *>(k + slot * kRowBytes), 4);
      std::memcpy(&words[2 * l + 1], reinterpret_cast<void *>(v + slot * kRowBytes), 4);
    }
    EXPECT_EQ(words[0], words[2]) << "layers differ at position " << j;
    EXPECT_EQ(words[1], -words[0]) << "K and V differ at position " << j;
    EXPECT_EQ(words[3], -words[0]) << "K and V differ at position " << j;
    tokens.push_back(words[2]);
  }
  return tokens;
}

std::vector<int64_t> Stats(llmc_kv_page_pool_t *pool, double *waste = nullptr) {
  std::vector<int64_t> c(LLMC_KV_PAGE_POOL_STATS, -1);
  Status st(llmc_kv_page_pool_stats(pool, c.data(), LLMC_KV_PAGE_POOL_STATS, waste));
  EXPECT_EQ(st.code(), 0) << st.message();
  return c;
}

TEST(KvPagePoolCapiTest, SequenceLifecycleOnHostMemory) {
  PoolHandle h;
  ASSERT_NE(h.p, nullptr);
  llmc_kv_page_pool_t *pool = h.p;
  uint64_t k0 = 0, v0 = 0, k1 = 0;
  EXPECT_LLMC_OK(llmc_kv_page_pool_pages(pool, 0, &k0, &v0));
  EXPECT_LLMC_OK(llmc_kv_page_pool_pages(pool, 1, &k1, nullptr));
  EXPECT_NE(k0, 0u);
  EXPECT_GE(v0, k0 + 6 * 4 * kRowBytes);
  EXPECT_GE(k1, v0 + 6 * 4 * kRowBytes);

  int64_t a = -1;
  EXPECT_LLMC_OK(llmc_kv_page_pool_add_sequence(pool, &a));
  int64_t slots[8];
  EXPECT_LLMC_OK(llmc_kv_page_pool_append(pool, a, 6, slots));
  EXPECT_EQ(std::vector<int64_t>(slots, slots + 6),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  for (int i = 0; i < 6; ++i)
    WriteToken(pool, slots[i], 100 + i);

  int64_t b = -1;
  EXPECT_LLMC_OK(llmc_kv_page_pool_fork(pool, a, &b));
  EXPECT_NE(a, b);
  std::vector<int64_t> st = Stats(pool);
  EXPECT_EQ(st[2], 2); // used
  EXPECT_EQ(st[3], 2); // shared
  EXPECT_EQ(st[5], 12); // tokens
  EXPECT_EQ(st[6], 6); // filled slots

  // b appends into the shared page 1: copy-on-write into page 2.
  EXPECT_LLMC_OK(llmc_kv_page_pool_append(pool, b, 3, slots));
  EXPECT_EQ(std::vector<int64_t>(slots, slots + 3),
            (std::vector<int64_t>{2 * 4 + 2, 2 * 4 + 3, 3 * 4}));
  EXPECT_EQ(Stats(pool)[7], 1); // pending
  EXPECT_LLMC_OK(llmc_kv_page_pool_apply_pending_copies(pool, nullptr));
  for (int i = 0; i < 3; ++i)
    WriteToken(pool, slots[i], 200 + i);
  EXPECT_LLMC_OK(llmc_kv_page_pool_append(pool, a, 1, slots));
  EXPECT_EQ(slots[0], 1 * 4 + 2); // page 1 is a's alone now
  WriteToken(pool, slots[0], 300);

  EXPECT_EQ(ReadTokens(pool, a),
            (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 300}));
  EXPECT_EQ(ReadTokens(pool, b),
            (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 200, 201, 202}));
  EXPECT_LLMC_OK(llmc_kv_page_pool_check_invariants(pool));

  int64_t seqs[2] = {b, a};
  int32_t table[2 * 3], lens[2];
  EXPECT_LLMC_OK(llmc_kv_page_pool_fill_batch_metadata(pool, seqs, 2, 3, table, lens));
  EXPECT_EQ(std::vector<int32_t>(table, table + 6),
            (std::vector<int32_t>{0, 2, 3, 0, 1, 0}));
  EXPECT_EQ(std::vector<int32_t>(lens, lens + 2), (std::vector<int32_t>{9, 7}));

  // Speculative tokens rejected, then the sequence ends.
  EXPECT_LLMC_OK(llmc_kv_page_pool_truncate(pool, b, 5));
  EXPECT_EQ(ReadTokens(pool, b), (std::vector<int32_t>{100, 101, 102, 103, 104}));
  double waste = -1;
  st = Stats(pool, &waste);
  EXPECT_EQ(st[1], 3); // free: page 3 went back
  EXPECT_EQ(st[8], 1); // copies on write so far
  EXPECT_DOUBLE_EQ(waste, 1.0 - 8.0 / 12.0); // pages 0, 1, 2: 4 + 3 + 1 rows
  EXPECT_LLMC_OK(llmc_kv_page_pool_release_sequence(pool, a));
  EXPECT_LLMC_OK(llmc_kv_page_pool_release_sequence(pool, b));
  st = Stats(pool, &waste);
  EXPECT_EQ(st[0], 6);
  EXPECT_EQ(st[1], 6);
  EXPECT_EQ(st[4], 0);
  EXPECT_EQ(waste, 0.0);
  EXPECT_LLMC_OK(llmc_kv_page_pool_check_invariants(pool));
}

TEST(KvPagePoolCapiTest, TakePendingCopies) {
  PoolHandle h;
  llmc_kv_page_pool_t *pool = h.p;
  int64_t slots[2], n = -1;
  for (int i = 0; i < 2; ++i) {
    int64_t a, b;
    EXPECT_LLMC_OK(llmc_kv_page_pool_add_sequence(pool, &a));
    EXPECT_LLMC_OK(llmc_kv_page_pool_append(pool, a, 1, slots));
    EXPECT_LLMC_OK(llmc_kv_page_pool_fork(pool, a, &b));
    EXPECT_LLMC_OK(llmc_kv_page_pool_append(pool, b, 1, slots));
  }
  EXPECT_LLMC_OK(llmc_kv_page_pool_take_pending_copies(pool, nullptr, 0, &n));
  EXPECT_EQ(n, 2);
  int64_t pairs[4] = {-1, -1, -1, -1};
  EXPECT_LLMC_OK(llmc_kv_page_pool_take_pending_copies(pool, pairs, 1, &n));
  EXPECT_EQ(n, 1);
  EXPECT_EQ(std::vector<int64_t>(pairs, pairs + 2), (std::vector<int64_t>{0, 1}));
  EXPECT_LLMC_OK(llmc_kv_page_pool_take_pending_copies(pool, pairs, 2, &n));
  EXPECT_EQ(n, 1);
  EXPECT_EQ(std::vector<int64_t>(pairs, pairs + 2), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Stats(pool)[7], 0);
}

TEST(KvPagePoolCapiTest, GpuPagesCopyOnWrite) {
  llmc_kv_page_pool_options o = HostOptions();
  o.host_memory = 0;
  llmc_kv_page_pool_t *pool = nullptr;
  Status made(llmc_kv_page_pool_create(&o, &pool));
  if (made.code() == 9)
    GTEST_SKIP() << "no GPU: " << made.message();
  ASSERT_EQ(made.code(), 0) << made.message();
  int64_t a = -1, b = -1, slots[2], n = 0;
  EXPECT_LLMC_OK(llmc_kv_page_pool_add_sequence(pool, &a));
  EXPECT_LLMC_OK(llmc_kv_page_pool_append(pool, a, 2, slots));
  EXPECT_LLMC_OK(llmc_kv_page_pool_fork(pool, a, &b));
  EXPECT_LLMC_OK(llmc_kv_page_pool_append(pool, b, 1, slots));
  EXPECT_EQ(slots[0], 1 * 4 + 2);
  EXPECT_LLMC_OK(llmc_kv_page_pool_apply_pending_copies(pool, nullptr));
  EXPECT_LLMC_OK(llmc_kv_page_pool_take_pending_copies(pool, nullptr, 0, &n));
  EXPECT_EQ(n, 0);
  uint64_t k = 0;
  EXPECT_LLMC_OK(llmc_kv_page_pool_pages(pool, 1, &k, nullptr));
  EXPECT_NE(k, 0u);
  EXPECT_LLMC_OK(llmc_kv_page_pool_check_invariants(pool));
  llmc_kv_page_pool_release(pool);
}

TEST(KvPagePoolCapiTest, MisuseIsReportedWithItsCode) {
  llmc_kv_page_pool_t *out = reinterpret_cast<llmc_kv_page_pool_t *>(0x1);
  llmc_kv_page_pool_options o = HostOptions();
  o.page_size = 0;
  Status bad(llmc_kv_page_pool_create(&o, &out));
  EXPECT_EQ(bad.code(), 3);
  EXPECT_TRUE(Contains(bad.message(), "page_size")) << bad.message();
  EXPECT_EQ(out, nullptr);
  o = HostOptions();
  o.element_bytes = 8;
  EXPECT_EQ(Status(llmc_kv_page_pool_create(&o, &out)).code(), 3);
  o = HostOptions();
  o.host_memory = 2;
  EXPECT_EQ(Status(llmc_kv_page_pool_create(&o, &out)).code(), 3);
  EXPECT_EQ(Status(llmc_kv_page_pool_create(nullptr, &out)).code(), 3);
  EXPECT_EQ(Status(llmc_kv_page_pool_create(&o, nullptr)).code(), 3);
  llmc_kv_page_pool_release(nullptr);

  PoolHandle h;
  llmc_kv_page_pool_t *pool = h.p;
  int64_t seq = -1, slots[32], len = 0, n = 0;
  EXPECT_EQ(Status(llmc_kv_page_pool_add_sequence(nullptr, &seq)).code(), 3);
  EXPECT_EQ(Status(llmc_kv_page_pool_add_sequence(pool, nullptr)).code(), 3);
  EXPECT_EQ(Status(llmc_kv_page_pool_pages(pool, 2, nullptr, nullptr)).code(), 3);
  EXPECT_LLMC_OK(llmc_kv_page_pool_add_sequence(pool, &seq));
  EXPECT_EQ(Status(llmc_kv_page_pool_append(pool, seq, 1, nullptr)).code(), 3);
  EXPECT_EQ(Status(llmc_kv_page_pool_append(pool, seq, -1, slots)).code(), 3);
  EXPECT_LLMC_OK(llmc_kv_page_pool_append(pool, seq, 0, nullptr));

  // Out of pages (6 of 4 tokens): code 8, nothing changes.
  Status full(llmc_kv_page_pool_append(pool, seq, 25, slots));
  EXPECT_EQ(full.code(), 8);
  EXPECT_TRUE(Contains(full.message(), "needs 7 more page(s), 6 free of 6"))
      << full.message();
  EXPECT_LLMC_OK(llmc_kv_page_pool_length(pool, seq, &len));
  EXPECT_EQ(len, 0);
  EXPECT_EQ(Stats(pool)[1], 6);
  EXPECT_LLMC_OK(llmc_kv_page_pool_append(pool, seq, 24, slots));

  int32_t pages[6];
  Status small(llmc_kv_page_pool_block_table(pool, seq, pages, 5, &n));
  EXPECT_EQ(small.code(), 3);
  EXPECT_EQ(n, 6);
  EXPECT_EQ(Status(llmc_kv_page_pool_truncate(pool, seq, 25)).code(), 3);
  int64_t seqs[1] = {seq};
  int32_t table[5], lens[1];
  EXPECT_EQ(Status(llmc_kv_page_pool_fill_batch_metadata(pool, seqs, 1, 5, table,
                                                         lens)).code(), 3);
  EXPECT_EQ(Status(llmc_kv_page_pool_fill_batch_metadata(pool, nullptr, 1, 5, table,
                                                         lens)).code(), 3);
  int64_t counts[LLMC_KV_PAGE_POOL_STATS + 1];
  EXPECT_EQ(Status(llmc_kv_page_pool_stats(pool, counts, LLMC_KV_PAGE_POOL_STATS + 1,
                                           nullptr)).code(), 3);

  // Unknown or released sequences: code 5 naming the id.
  EXPECT_LLMC_OK(llmc_kv_page_pool_release_sequence(pool, seq));
  Status gone(llmc_kv_page_pool_append(pool, seq, 1, slots));
  EXPECT_EQ(gone.code(), 5);
  EXPECT_TRUE(Contains(gone.message(), "sequence " + std::to_string(seq)))
      << gone.message();
  EXPECT_EQ(Status(llmc_kv_page_pool_fork(pool, 77, &seq)).code(), 5);
  EXPECT_EQ(Status(llmc_kv_page_pool_release_sequence(pool, 77)).code(), 5);
  EXPECT_EQ(Status(llmc_kv_page_pool_truncate(pool, 77, 0)).code(), 5);
  EXPECT_EQ(Status(llmc_kv_page_pool_length(pool, 77, &len)).code(), 5);
  EXPECT_EQ(Status(llmc_kv_page_pool_block_table(pool, 77, nullptr, 0, &n)).code(), 5);
  EXPECT_LLMC_OK(llmc_kv_page_pool_check_invariants(pool));
}

TEST(KvPagePoolCapiTest, OptionErrorsNameTheOptionsField) {
  struct Case {
    int64_t llmc_kv_page_pool_options::*field;
    int64_t value;
    const char *expected;
  };
  for (const Case &c :
       {Case{&llmc_kv_page_pool_options::page_size, 0, "options.page_size: "},
        Case{&llmc_kv_page_pool_options::num_pages, int64_t{1} << 31,
             "options.num_pages: "},
        Case{&llmc_kv_page_pool_options::element_bytes, 3,
             "options.element_bytes: "},
        Case{&llmc_kv_page_pool_options::head_dim, int64_t{1} << 45,
             "options: the pages need more than 2^50 bytes"}}) {
    // Also with host_memory = 0: checked before a GPU is looked for.
    for (int32_t host : {1, 0}) {
      llmc_kv_page_pool_options o = HostOptions();
      o.host_memory = host;
      o.*c.field = c.value;
      llmc_kv_page_pool_t *out = nullptr;
      Status st(llmc_kv_page_pool_create(&o, &out));
      EXPECT_EQ(st.code(), 3) << st.message();
      EXPECT_TRUE(Contains(st.message(), c.expected)) << st.message();
      EXPECT_FALSE(Contains(st.message(), "KvPagePoolOptions")) << st.message();
      EXPECT_EQ(out, nullptr);
    }
  }
}

TEST(KvPagePoolCapiTest, ArraysOfCapacityZeroAndBatchMetadataErrors) {
  PoolHandle h;
  llmc_kv_page_pool_t *pool = h.p;
  int64_t a = -1, b = -1, empty = -1, slots[8], n = -1;
  EXPECT_LLMC_OK(llmc_kv_page_pool_add_sequence(pool, &a));
  EXPECT_LLMC_OK(llmc_kv_page_pool_add_sequence(pool, &empty));
  EXPECT_LLMC_OK(llmc_kv_page_pool_append(pool, a, 5, slots));
  EXPECT_LLMC_OK(llmc_kv_page_pool_fork(pool, a, &b));
  EXPECT_LLMC_OK(llmc_kv_page_pool_append(pool, b, 1, slots)); // a pending copy

  // A non-NULL array of 0 entries: code 3 (count still set) unless the
  // table is empty; no copy taken.
  int32_t pages[1] = {-7};
  Status zero(llmc_kv_page_pool_block_table(pool, a, pages, 0, &n));
  EXPECT_EQ(zero.code(), 3);
  EXPECT_EQ(n, 2);
  EXPECT_LLMC_OK(llmc_kv_page_pool_block_table(pool, empty, pages, 0, &n));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(pages[0], -7);
  int64_t pairs[2] = {-7, -7};
  EXPECT_LLMC_OK(llmc_kv_page_pool_take_pending_copies(pool, pairs, 0, &n));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(pairs[0], -7);
  EXPECT_LLMC_OK(llmc_kv_page_pool_take_pending_copies(pool, nullptr, 0, &n));
  EXPECT_EQ(n, 1);

  // fill_batch_metadata: every error writes nothing.
  int64_t seqs[2] = {a, b};
  int32_t table[2 * 2], lens[2];
  std::fill(table, table + 4, -7);
  std::fill(lens, lens + 2, -7);
  auto fill = [&](const int64_t *s, int64_t num, int64_t max_pages) {
    return Status(llmc_kv_page_pool_fill_batch_metadata(pool, s, num, max_pages,
                                                        table, lens))
        .code();
  };
  EXPECT_EQ(Status(llmc_kv_page_pool_fill_batch_metadata(nullptr, seqs, 2, 2,
                                                         table, lens)).code(), 3);
  EXPECT_EQ(fill(seqs, -1, 2), 3);
  EXPECT_EQ(fill(seqs, 2, 0), 3);
  EXPECT_EQ(fill(nullptr, 2, 2), 3);
  EXPECT_EQ(fill(seqs, int64_t{1} << 62, 4), 3); // num_sequences * max_pages
  EXPECT_EQ(fill(seqs, 2, 1), 3);                // a has 2 pages
  int64_t gone[2] = {a, 77};
  EXPECT_EQ(fill(gone, 2, 2), 5);
  EXPECT_EQ(std::vector<int32_t>(table, table + 4), std::vector<int32_t>(4, -7));
  EXPECT_EQ(std::vector<int32_t>(lens, lens + 2), std::vector<int32_t>(2, -7));
  EXPECT_LLMC_OK(llmc_kv_page_pool_fill_batch_metadata(pool, seqs, 2, 2, table, lens));
  EXPECT_EQ(std::vector<int32_t>(lens, lens + 2), (std::vector<int32_t>{5, 6}));
}

} // namespace
