// The GPU serving model's bucketing and padding (rt::StepBucketing,
// rt::PadStepBatch, rt::ReadServingStepLayout), on the CPU. That padded
// batches give the unpadded batches' tokens is shown with a real model in
// test/unit/compiler/ServingStepTest.cpp (PaddingToBucketsChangesNoToken).
#include "llmc/runtime/ServingStep.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "llmc/runtime/MemoryPool.h"

namespace llmc::rt {
namespace {

StepBucketing Buckets() { return StepBucketing{{1, 2, 4, 8, 16, 64}, 6}; }

TEST(StepBucketingTest, ChoosesTheSmallestBucketAndOneSequenceMore) {
  StepBucketing b = Buckets();
  struct Case {
    int64_t tokens, seqs, want_t, want_b;
  } cases[] = {{1, 1, 1, 2}, {3, 2, 4, 5}, {4, 4, 4, 5}, {5, 5, 8, 7}, {9, 6, 16, 7}, {64, 6, 64, 7}};
  for (const Case& c : cases) {
    absl::StatusOr<StepBucket> s = b.Choose(c.tokens, c.seqs);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->tokens, c.want_t) << c.tokens;
    EXPECT_EQ(s->sequences, c.want_b) << c.tokens;
  }
  EXPECT_EQ(b.All().size(), 6u);
  // The largest gap below a bucket: 16 .. 64 pads up to 47 tokens.
  EXPECT_EQ(b.MaxPaddingTokens(), 47);
  EXPECT_EQ(StepBucketing({{4, 8}, 2}).MaxPaddingTokens(), 3);
  EXPECT_EQ(StepBucketing({{1, 2, 3}, 2}).MaxPaddingTokens(), 0);
}

TEST(StepBucketingTest, TheDefaultIsPowersOfTwoThenMultiplesOf64) {
  EXPECT_EQ(StepBucketing::Default(512, 64).token_buckets,
            (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 320, 384, 448, 512}));
  EXPECT_EQ(StepBucketing::Default(16, 4).token_buckets, (std::vector<int64_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(StepBucketing::Default(100, 4).token_buckets,
            (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 100}));
  EXPECT_EQ(StepBucketing::Default(1, 1).token_buckets, (std::vector<int64_t>{1}));
  EXPECT_EQ(StepBucketing::Default(100, 4).max_sequences, 4);
  EXPECT_TRUE(StepBucketing::Default(100, 4).Validate().ok());
}

TEST(LogitsToFloatTest, ConvertsEachDtypeExactly) {
  // bf16 1.5, -2; f16 1.5, -2, the smallest subnormal, +inf, NaN.
  const uint16_t bf16[] = {0x3FC0, 0xC000};
  auto b = LogitsToFloat(reinterpret_cast<const uint8_t*>(bf16), DType::bf16, 2, 1);
  EXPECT_EQ(b, (std::vector<std::vector<float>>{{1.5f}, {-2.0f}}));
  const uint16_t f16[] = {0x3E00, 0xC000, 0x0001, 0x7C00, 0x7E00, 0x0000};
  auto h = LogitsToFloat(reinterpret_cast<const uint8_t*>(f16), DType::f16, 2, 3);
  EXPECT_EQ(h[0][0], 1.5f);
  EXPECT_EQ(h[0][1], -2.0f);
  EXPECT_EQ(h[0][2], std::ldexp(1.0f, -24));
  EXPECT_EQ(h[1][0], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(h[1][1]));
  EXPECT_EQ(h[1][2], 0.0f);
  const float f32[] = {0.25f, -7.0f, 3.0f, 1e30f};
  auto f = LogitsToFloat(reinterpret_cast<const uint8_t*>(f32), DType::f32, 2, 2);
  EXPECT_EQ(f, (std::vector<std::vector<float>>{{0.25f, -7.0f}, {3.0f, 1e30f}}));
}

TEST(StepBucketingTest, RejectsWhatNoBucketHolds) {
  StepBucketing b = Buckets();
  EXPECT_EQ(b.Choose(65, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.Choose(65, 1).status().message().find("64"), std::string::npos);
  EXPECT_FALSE(b.Choose(0, 1).ok());
  EXPECT_FALSE(b.Choose(3, 4).ok());   // more sequences than tokens
  EXPECT_FALSE(b.Choose(10, 7).ok());  // more than max_sequences
  EXPECT_FALSE(StepBucketing({{}, 4}).Validate().ok());
  EXPECT_FALSE(StepBucketing({{1, 4, 4}, 4}).Validate().ok());
  EXPECT_FALSE(StepBucketing({{0, 4}, 4}).Validate().ok());
  EXPECT_FALSE(StepBucketing({{1, 4}, 0}).Validate().ok());
}

/// Two sequences: a decode (1 token, length 6, pages 3 and 1) and a
/// prefill chunk (3 tokens, length 3, page 2), page size 4.
StepBatch TwoSequences() {
  StepBatch s;
  s.token_ids = {11, 21, 22, 23};
  s.positions = {5, 0, 1, 2};
  s.cu_seqlens_q = {0, 1, 4};
  s.seq_lens = {6, 3};
  s.max_pages = 2;
  s.block_table = {3, 1, 2, 0};
  s.logits_rows = {0, 3};
  return s;
}

TEST(PadStepBatchTest, PadsIntoOneExtraSequenceAndEmptyOnes) {
  const std::vector<int32_t> paddingPages = {7, 8};
  absl::StatusOr<PaddedStepInputs> p =
      PadStepBatch(TwoSequences(), StepBucket{8, 5}, /*max_pages=*/3, paddingPages, 4);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->tokens, (std::vector<int32_t>{11, 21, 22, 23, 0, 0, 0, 0}));
  EXPECT_EQ(p->positions, (std::vector<int32_t>{5, 0, 1, 2, 0, 0, 0, 0}));
  EXPECT_EQ(p->cu_seqlens_q, (std::vector<int32_t>{0, 1, 4, 8, 8, 8}));
  EXPECT_EQ(p->seq_lens, (std::vector<int32_t>{6, 3, 4, 0, 0}));
  EXPECT_EQ(p->block_table,
            (std::vector<int32_t>{3, 1, 0, 2, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(p->logits_rows, (std::vector<int32_t>{0, 3, 0, 0, 0}));
}

TEST(PadStepBatchTest, AnExactFitHasAnEmptyPaddingSequence) {
  absl::StatusOr<PaddedStepInputs> p =
      PadStepBatch(TwoSequences(), StepBucket{4, 3}, 2, {}, 4);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->cu_seqlens_q, (std::vector<int32_t>{0, 1, 4, 4}));
  EXPECT_EQ(p->seq_lens, (std::vector<int32_t>{6, 3, 0}));
  EXPECT_EQ(p->logits_rows, (std::vector<int32_t>{0, 3, 0}));
}

TEST(PadStepBatchTest, RejectsWhatDoesNotFit) {
  const std::vector<int32_t> one = {7};
  // Too many tokens, no sequence left for the padding, too few block-table
  // columns, too few padding pages (5 padding tokens need 2 pages of 4).
  EXPECT_FALSE(PadStepBatch(TwoSequences(), StepBucket{2, 5}, 3, one, 4).ok());
  EXPECT_FALSE(PadStepBatch(TwoSequences(), StepBucket{8, 2}, 3, one, 4).ok());
  EXPECT_FALSE(PadStepBatch(TwoSequences(), StepBucket{8, 5}, 1, one, 4).ok());
  absl::Status st = PadStepBatch(TwoSequences(), StepBucket{9, 5}, 3, one, 4).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("5 padding tokens need 2 pages"), std::string::npos) << st;
  StepBatch bad = TwoSequences();
  bad.positions.pop_back();
  EXPECT_FALSE(PadStepBatch(bad, StepBucket{8, 5}, 3, one, 4).ok());
  bad = TwoSequences();
  bad.cu_seqlens_q.back() = 3;  // does not end at T
  EXPECT_FALSE(PadStepBatch(bad, StepBucket{8, 5}, 3, one, 4).ok());
}

TEST(ReservePaddingPagesTest, ReservesTheLargestPaddingAndGivesItBack) {
  MemoryPool memory(std::make_unique<FakeDeviceAllocator>());
  KvPagePoolOptions o;
  o.num_pages = 20;
  o.page_size = 4;
  o.num_layers = 1;
  o.num_kv_heads = 1;
  o.head_dim = 8;
  o.element_bytes = 4;
  o.copy_page = HostPageCopy();
  auto pool = KvPagePool::Create(&memory, o);
  ASSERT_TRUE(pool.ok()) << pool.status();
  // More pages than the block table's columns: the padding sequence could
  // not be addressed.
  absl::Status st = ReservePaddingPages(**pool, Buckets(), /*max_pages=*/11).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("up to 47 tokens, which take 12 pages"), std::string::npos) << st;
  EXPECT_EQ((*pool)->Stats().free_pages, 20);
  auto r = ReservePaddingPages(**pool, Buckets(), 12);  // 47 tokens: 12 pages
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->second.size(), 12u);
  EXPECT_EQ((*pool)->Stats().free_pages, 8);
  // Not enough pages for a second one: an error naming the padding, and the
  // pool unchanged.
  st = ReservePaddingPages(**pool, Buckets(), 12).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("padding"), std::string::npos) << st;
  EXPECT_EQ((*pool)->Stats().free_pages, 8);
  ASSERT_TRUE((*pool)->Release(r->first).ok());
  EXPECT_EQ((*pool)->Stats().free_pages, 20);
  EXPECT_TRUE((*pool)->CheckInvariants().ok());
}

TEST(ReadServingStepLayoutTest, ChecksTheConvention) {
  KvPagePoolOptions pool;
  pool.num_pages = 32;
  pool.page_size = 4;
  pool.num_layers = 1;
  pool.num_kv_heads = 2;
  pool.head_dim = 16;
  pool.element_bytes = 2;
  const StepBucket b{8, 5};
  Executable exe;
  auto in = [&](DType d, std::vector<int64_t> s) { exe.inputs.push_back({"", d, s}); };
  in(DType::i32, {8});
  in(DType::i32, {8});
  in(DType::i32, {6});
  in(DType::i32, {5});
  in(DType::i32, {5, 16});
  in(DType::i32, {5});
  in(DType::bf16, {32, 4, 2, 16});
  in(DType::bf16, {32, 4, 2, 16});
  in(DType::bf16, {97, 64});
  exe.outputs.push_back({"", DType::bf16, {5, 97}});
  exe.outputs.push_back({"", DType::bf16, {32, 4, 2, 16}, 6});
  exe.outputs.push_back({"", DType::bf16, {32, 4, 2, 16}, 7});
  absl::StatusOr<ServingStepLayout> l = ReadServingStepLayout(exe, b, pool);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->num_layers, 1);
  EXPECT_EQ(l->max_pages, 16);
  EXPECT_EQ(l->vocab, 97);
  EXPECT_EQ(l->num_weights, 1);
  EXPECT_EQ(l->logits_dtype, DType::bf16);

  Executable wrongTokens = exe;
  wrongTokens.inputs[0].shape = {7};
  absl::Status st = ReadServingStepLayout(wrongTokens, b, pool).status();
  EXPECT_NE(st.message().find("input 0 (tokens)"), std::string::npos) << st;
  Executable wrongPages = exe;
  wrongPages.inputs[7].shape = {16, 4, 2, 16};
  st = ReadServingStepLayout(wrongPages, b, pool).status();
  EXPECT_NE(st.message().find("value pages of layer 0"), std::string::npos) << st;
  Executable noAlias = exe;
  noAlias.outputs[2].alias_input = -1;
  EXPECT_FALSE(ReadServingStepLayout(noAlias, b, pool).ok());
  KvPagePoolOptions twoLayers = pool;
  twoLayers.num_layers = 2;
  EXPECT_FALSE(ReadServingStepLayout(exe, b, twoLayers).ok());
}

}  // namespace
}  // namespace llmc::rt
