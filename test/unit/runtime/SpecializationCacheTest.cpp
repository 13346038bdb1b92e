#include "llmc/runtime/SpecializationCache.h"

#include "gtest/gtest.h"

namespace llmc::rt {
namespace {

// x: [batch, seq, 64], mask: [batch, seq]
std::vector<InputShapeSpec> Inputs() {
  return {{"x", {DimSpec::Dynamic("batch"), DimSpec::Dynamic("seq"),
                 DimSpec::Static(64)}},
          {"mask", {DimSpec::Dynamic("batch"), DimSpec::Dynamic("seq")}}};
}

struct Recorder {
  std::vector<DimBindings> calls;
  CompileFn Fn() {
    return [this](const DimBindings& dims)
               -> absl::StatusOr<std::shared_ptr<Executable>> {
      calls.push_back(dims);
      auto e = std::make_shared<Executable>();
      for (const auto& [k, v] : dims) e->symbol_bindings[k] = v;
      return e;
    };
  }
};

TEST(BucketPolicyTest, Buckets) {
  BucketPolicy none;
  EXPECT_EQ(none.Bucket(37), 37);
  BucketPolicy mul{BucketPolicy::MultipleOf, 16};
  EXPECT_EQ(mul.Bucket(1), 16);
  EXPECT_EQ(mul.Bucket(16), 16);
  EXPECT_EQ(mul.Bucket(17), 32);
  BucketPolicy p2{BucketPolicy::PowerOfTwo};
  EXPECT_EQ(p2.Bucket(1), 1);
  EXPECT_EQ(p2.Bucket(5), 8);
  EXPECT_EQ(p2.Bucket(1024), 1024);
  EXPECT_EQ(p2.Bucket(1025), 2048);
}

// Before: the power-of-two loop never ended above 2^62 (p overflowed to 0)
// and the multiple-of rounding overflowed into an "internal error".
TEST(BucketPolicyTest, BucketsBeyondInt64AreRefusedNotLoopedOn) {
  BucketPolicy p2{BucketPolicy::PowerOfTwo};
  EXPECT_EQ(p2.Bucket(int64_t(1) << 62), int64_t(1) << 62);
  EXPECT_EQ(p2.Bucket((int64_t(1) << 62) + 1), -1);
  EXPECT_EQ(p2.Bucket(INT64_MAX), -1);
  BucketPolicy mul{BucketPolicy::MultipleOf, 16};
  EXPECT_EQ(mul.Bucket(INT64_MAX - 14), -1);  // the next multiple is 2^63
  EXPECT_EQ(mul.Bucket(INT64_MAX / 16 * 16), INT64_MAX / 16 * 16);
  EXPECT_EQ(mul.Bucket(0), 0);

  Recorder rec;
  SpecializationCache cache(Inputs(), {{"seq", p2}}, rec.Fn());
  auto e = cache.Get({{1, (int64_t(1) << 62) + 1, 64}, {1, (int64_t(1) << 62) + 1}});
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e.status().message(),
            "dynamic dim 'seq' is 4611686018427387905, which has no "
            "power-of-two bucket within int64");
  SpecializationCache bad(Inputs(), {{"seq", {BucketPolicy::MultipleOf, 0}}}, rec.Fn());
  auto z = bad.Get({{1, 5, 64}, {1, 5}});
  EXPECT_EQ(z.status().message(),
            "bucket policy of dynamic dim 'seq': multiple-of 0 (expected a "
            "multiple > 0)");
  EXPECT_TRUE(rec.calls.empty());
}

TEST(SpecializationCacheTest, HitsMissesAndBucketing) {
  Recorder rec;
  SpecializationCache cache(
      Inputs(), {{"seq", {BucketPolicy::PowerOfTwo}}}, rec.Fn());
  auto a = cache.Get({{2, 100, 64}, {2, 100}});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->concrete.at("seq"), 100);
  EXPECT_EQ(a->bucketed.at("seq"), 128);
  EXPECT_EQ(a->bucketed.at("batch"), 2);
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0].at("seq"), 128);
  EXPECT_EQ(a->executable->symbol_bindings.at("seq"), 128);

  auto b = cache.Get({{2, 120, 64}, {2, 120}});  // same bucket
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->executable, a->executable);
  EXPECT_EQ(b->concrete.at("seq"), 120);
  auto c = cache.Get({{3, 120, 64}, {3, 120}});  // batch not bucketed
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->executable, a->executable);
  SpecializationStats s = cache.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.compiles, 2);
  EXPECT_EQ(cache.num_specializations(), 2);
}

TEST(SpecializationCacheTest, GuardsRejectContradictoryShapes) {
  Recorder rec;
  SpecializationCache cache(Inputs(), {}, rec.Fn());
  auto s = cache.Get({{2, 10, 32}, {2, 10}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("input 'x' dim 2: expected static size 64, got 32"),
            std::string::npos) << s.status();
  auto mismatch = cache.Get({{2, 10, 64}, {2, 11}});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("'seq' is 11 here but 10"),
            std::string::npos) << mismatch.status();
  EXPECT_FALSE(cache.Get({{2, 10, 64}}).ok());
  EXPECT_FALSE(cache.Get({{2, 10}, {2, 10}}).ok());
  EXPECT_TRUE(rec.calls.empty());
}

TEST(SpecializationCacheTest, RecompileLimitNamesDimAndValues) {
  Recorder rec;
  SpecializationCache cache(Inputs(), {}, rec.Fn(), /*recompile_limit=*/3);
  for (int seq : {5, 6, 7}) ASSERT_TRUE(cache.Get({{1, seq, 64}, {1, seq}}).ok());
  EXPECT_TRUE(cache.Get({{1, 6, 64}, {1, 6}}).ok());  // hit is still fine
  auto over = cache.Get({{1, 8, 64}, {1, 8}});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  std::string msg(over.status().message());
  EXPECT_NE(msg.find("'seq' saw [5, 6, 7, 8]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("limit of 3"), std::string::npos) << msg;
  EXPECT_EQ(rec.calls.size(), 3u);
}

TEST(SpecializationCacheTest, CompileErrorPropagatesAndIsNotCached) {
  int calls = 0;
  SpecializationCache cache(
      Inputs(), {},
      [&](const DimBindings&) -> absl::StatusOr<std::shared_ptr<Executable>> {
        if (++calls == 1) return absl::InvalidArgumentError("boom");
        return std::make_shared<Executable>();
      });
  auto a = cache.Get({{1, 4, 64}, {1, 4}});
  EXPECT_EQ(a.status().message(), "boom");
  EXPECT_TRUE(cache.Get({{1, 4, 64}, {1, 4}}).ok());
  EXPECT_EQ(cache.stats().compiles, 1);
}

}  // namespace
}  // namespace llmc::rt
