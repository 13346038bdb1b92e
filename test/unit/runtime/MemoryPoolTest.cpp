#include "llmc/runtime/MemoryPool.h"

#include <cstring>

#include "gtest/gtest.h"

namespace llmc::rt {
namespace {

CUstream StreamA() { return reinterpret_cast<CUstream>(0x1000); }
CUstream StreamB() { return reinterpret_cast<CUstream>(0x2000); }

struct PoolFixture {
  explicit PoolFixture(size_t cap = 0) {
    auto a = std::make_unique<FakeDeviceAllocator>(cap);
    fake = a.get();
    pool = std::make_unique<MemoryPool>(std::move(a));
  }
  FakeDeviceAllocator* fake;
  std::unique_ptr<MemoryPool> pool;
};

TEST(MemoryPoolTest, RoundsToSizeClasses) {
  EXPECT_EQ(MemoryPool::RoundSize(0), 512u);
  EXPECT_EQ(MemoryPool::RoundSize(1), 512u);
  EXPECT_EQ(MemoryPool::RoundSize(512), 512u);
  EXPECT_EQ(MemoryPool::RoundSize(513), 1024u);
  EXPECT_EQ(MemoryPool::RoundSize(1 << 20), size_t(1) << 20);
  EXPECT_EQ(MemoryPool::RoundSize((1 << 20) + 1), size_t(2) << 20);
  EXPECT_EQ(MemoryPool::RoundSize((5 << 20) + 7), size_t(6) << 20);
}

TEST(MemoryPoolTest, AllocFreeReuseOnSameStream) {
  PoolFixture f;
  auto p = f.pool->Allocate(1000, StreamA());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p % 128, 0u);
  std::memset(reinterpret_cast<void*>(*p), 0xab, 1000);  // host-backed fake
  ASSERT_TRUE(f.pool->Free(*p, StreamA()).ok());
  auto q = f.pool->Allocate(700, StreamA());  // same 1024 B class
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, *p);
  EXPECT_EQ(f.fake->num_allocate_calls(), 1);
  PoolStats s = f.pool->Stats();
  EXPECT_EQ(s.num_allocs, 2);
  EXPECT_EQ(s.num_cache_hits, 1);
  EXPECT_EQ(s.bytes_in_use, 1024);
  EXPECT_EQ(s.bytes_reserved, 1024);
}

TEST(MemoryPoolTest, CrossStreamReuseNeedsSynchronization) {
  PoolFixture f;
  auto p = f.pool->Allocate(4096, StreamA());
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(f.pool->Free(*p, StreamA()).ok());
  auto q = f.pool->Allocate(4096, StreamB());
  ASSERT_TRUE(q.ok());
  EXPECT_NE(*q, *p) << "block reused on another stream without a sync";
  ASSERT_TRUE(f.pool->Free(*q, StreamB()).ok());
  f.pool->StreamsSynchronized();
  auto r = f.pool->Allocate(4096, StreamB());
  auto t = f.pool->Allocate(4096, StreamB());
  ASSERT_TRUE(r.ok() && t.ok());
  EXPECT_EQ(f.fake->num_allocate_calls(), 2);  // both served from cache
}

TEST(MemoryPoolTest, StatsPeakFragmentationAndTrim) {
  PoolFixture f;
  auto a = f.pool->Allocate(3 << 20);  // 4 MiB class
  auto b = f.pool->Allocate(100);      // 512 B class
  ASSERT_TRUE(a.ok() && b.ok());
  PoolStats s = f.pool->Stats();
  EXPECT_EQ(s.bytes_in_use, (4 << 20) + 512);
  EXPECT_EQ(s.peak_in_use, (4 << 20) + 512);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.0);
  ASSERT_TRUE(f.pool->Free(*a).ok());
  s = f.pool->Stats();
  EXPECT_EQ(s.bytes_in_use, 512);
  EXPECT_EQ(s.bytes_reserved, (4 << 20) + 512);
  EXPECT_NEAR(s.fragmentation, 1.0 - 512.0 / ((4 << 20) + 512), 1e-12);
  EXPECT_EQ(f.pool->Trim(), size_t(4) << 20);
  s = f.pool->Stats();
  EXPECT_EQ(s.bytes_reserved, 512);
  EXPECT_EQ(s.peak_in_use, (4 << 20) + 512);
  EXPECT_EQ(f.fake->outstanding_bytes(), 512u);
}

TEST(MemoryPoolTest, DoubleFreeAndForeignPointerAreUserErrors) {
  PoolFixture f;
  auto p = f.pool->Allocate(64);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(f.pool->Free(*p).ok());
  absl::Status twice = f.pool->Free(*p);
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("double free"), std::string::npos);
  EXPECT_EQ(f.pool->Free(0xdead00).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MemoryPoolTest, OomTrimsCacheAndRetries) {
  PoolFixture f(8 << 20);
  auto a = f.pool->Allocate(4 << 20);
  auto b = f.pool->Allocate(2 << 20);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(f.pool->Free(*a).ok());  // cached, 4 MiB still reserved
  // 6 MiB does not fit next to 6 MiB reserved; trimming the cache makes room.
  auto c = f.pool->Allocate(6 << 20);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(f.pool->Stats().bytes_reserved, 8 << 20);
}

TEST(MemoryPoolTest, OomAfterRetryReportsRequestAndStats) {
  PoolFixture f(4 << 20);
  auto a = f.pool->Allocate(4 << 20);
  ASSERT_TRUE(a.ok());
  auto b = f.pool->Allocate(3 << 20);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  std::string msg(b.status().message());
  EXPECT_NE(msg.find(std::to_string(3 << 20)), std::string::npos) << msg;
  EXPECT_NE(msg.find("in use 4194304"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fake"), std::string::npos) << msg;
  // Pool is still usable afterwards.
  ASSERT_TRUE(f.pool->Free(*a).ok());
  EXPECT_TRUE(f.pool->Allocate(3 << 20).ok());
}

struct CallbackState {
  int allocs = 0, frees = 0;
  void* last_stream = nullptr;
};

TEST(MemoryPoolTest, CallbackAllocatorForwardsStreamAndUser) {
  CallbackState st;
  AllocatorCallbacks cb;
  cb.user = &st;
  cb.alloc = [](size_t n, void* stream, void* user) -> void* {
    auto* s = static_cast<CallbackState*>(user);
    ++s->allocs;
    s->last_stream = stream;
    return std::aligned_alloc(256, n);
  };
  cb.free = [](void* p, void*, void* user) {
    ++static_cast<CallbackState*>(user)->frees;
    std::free(p);
  };
  {
    MemoryPool pool(MakeCallbackAllocator(cb));
    auto p = pool.Allocate(2048, StreamA());
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(st.last_stream, static_cast<void*>(StreamA()));
    {
      auto buf = PooledBuffer::Allocate(&pool, 100, StreamA());
      ASSERT_TRUE(buf.ok());
      EXPECT_EQ(pool.Stats().bytes_in_use, 2048 + 512);
    }
    EXPECT_EQ(pool.Stats().bytes_in_use, 2048);  // RAII returned the block
    ASSERT_TRUE(pool.Free(*p).ok());
  }
  EXPECT_EQ(st.allocs, 2);
  EXPECT_EQ(st.frees, 2);  // pool destruction released the cache
}

TEST(MemoryPoolTest, MisalignedUserAllocatorIsRejected) {
  AllocatorCallbacks cb;
  static char storage[4096 + 256];
  cb.alloc = [](size_t, void*, void*) -> void* {
    return storage + (128 - reinterpret_cast<uintptr_t>(storage) % 128) + 8;
  };
  cb.free = [](void*, void*, void*) {};
  MemoryPool pool(MakeCallbackAllocator(cb));
  auto p = pool.Allocate(100);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("aligned"), std::string::npos);
}

}  // namespace
}  // namespace llmc::rt
