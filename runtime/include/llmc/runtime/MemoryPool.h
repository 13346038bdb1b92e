// Caching, stream-ordered device memory pool over a pluggable allocator.
#ifndef LLMC_RUNTIME_MEMORYPOOL_H
#define LLMC_RUNTIME_MEMORYPOOL_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "llmc/runtime/CudaTypes.h"

namespace llmc::rt {

/// Source of raw device memory. Pointers are device addresses (CUdeviceptr).
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  /// Allocates `bytes` (> 0). Out of memory must be ResourceExhausted so the
  /// pool can trim its cache and retry.
  virtual absl::StatusOr<uint64_t> Allocate(size_t bytes, CUstream stream) = 0;
  virtual void Free(uint64_t ptr, size_t bytes, CUstream stream) = 0;
  virtual std::string Name() const = 0;
};

/// cuMemAlloc/cuMemFree in the calling thread's current context.
std::unique_ptr<DeviceAllocator> MakeCudaDriverAllocator();

/// Host memory pretending to be device memory (256-byte aligned), for tests.
/// `capacity_bytes` caps the total outstanding bytes (0 = unlimited);
/// allocations beyond it fail with ResourceExhausted.
class FakeDeviceAllocator : public DeviceAllocator {
 public:
  explicit FakeDeviceAllocator(size_t capacity_bytes = 0)
      : capacity_(capacity_bytes) {}
  ~FakeDeviceAllocator() override;
  absl::StatusOr<uint64_t> Allocate(size_t bytes, CUstream stream) override;
  void Free(uint64_t ptr, size_t bytes, CUstream stream) override;
  std::string Name() const override { return "fake"; }
  size_t outstanding_bytes() const;
  int64_t num_allocate_calls() const;

 private:
  mutable absl::Mutex mu_;
  size_t capacity_;
  size_t outstanding_ = 0;
  int64_t calls_ = 0;
  absl::flat_hash_map<uint64_t, size_t> live_;
};

/// C callbacks (e.g. PyTorch's caching allocator handed over by the plugin).
/// `alloc` returns nullptr on failure (treated as out of memory).
struct AllocatorCallbacks {
  void* (*alloc)(size_t size, void* stream, void* user) = nullptr;
  void (*free)(void* ptr, void* stream, void* user) = nullptr;
  void* user = nullptr;
};
std::unique_ptr<DeviceAllocator> MakeCallbackAllocator(AllocatorCallbacks cb);

struct PoolStats {
  /// Bytes handed out to users (rounded block sizes).
  int64_t bytes_in_use = 0;
  /// Bytes held from the underlying allocator (in use + cached).
  int64_t bytes_reserved = 0;
  int64_t peak_in_use = 0;
  /// Allocate() calls that succeeded.
  int64_t num_allocs = 0;
  /// Allocate() calls served from the cache.
  int64_t num_cache_hits = 0;
  /// Calls into the underlying allocator.
  int64_t num_device_allocs = 0;
  /// 1 - in_use / reserved (0 when nothing is reserved).
  double fragmentation = 0;
  std::string ToString() const;
};

/// Thread-safe caching allocator.
///
/// Sizes round up to 512 B below 1 MiB and to 2 MiB above; every pointer is
/// at least 128-byte aligned. A freed block is cached, tagged with the stream
/// it was last used on, and is reused right away for requests of the same
/// size class on that stream. Using it on another stream requires that the
/// user has synchronized: call `StreamsSynchronized()` after a device/stream
/// sync to make all cached blocks reusable on any stream.
class MemoryPool {
 public:
  explicit MemoryPool(std::unique_ptr<DeviceAllocator> allocator);
  ~MemoryPool();  // releases cached blocks; blocks still in use are leaked
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  /// Returns a device pointer to >= `bytes` bytes (`bytes` == 0 gives a
  /// minimal block). On allocator OOM the cache is trimmed and the request
  /// retried once; then ResourceExhausted naming the request and the stats.
  absl::StatusOr<uint64_t> Allocate(size_t bytes, CUstream stream = nullptr);
  /// Returns `ptr` to the cache (usable again on `stream`, or on the stream
  /// it was allocated on when `stream` is null). InvalidArgument if `ptr` is
  /// not a live allocation of this pool (double free, foreign pointer).
  absl::Status Free(uint64_t ptr, CUstream stream = nullptr);
  /// Makes every cached block reusable on every stream.
  void StreamsSynchronized();
  /// Returns all cached (free) blocks to the allocator. Returns bytes freed.
  size_t Trim();
  PoolStats Stats() const;
  /// Size class of a request (see class comment).
  static size_t RoundSize(size_t bytes);

 private:
  struct Block {
    size_t size;
    CUstream stream;
    bool in_use;
  };
  size_t TrimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<DeviceAllocator> allocator_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Block> blocks_ ABSL_GUARDED_BY(mu_);
  // Free blocks: (stream, size) -> ptrs. Stream kAnyStream = synchronized.
  std::map<std::pair<CUstream, size_t>, std::vector<uint64_t>> free_
      ABSL_GUARDED_BY(mu_);
  PoolStats stats_ ABSL_GUARDED_BY(mu_);
};

/// RAII owner of one pool allocation, e.g. an Executable's arena.
class PooledBuffer {
 public:
  PooledBuffer() = default;
  static absl::StatusOr<PooledBuffer> Allocate(MemoryPool* pool, size_t bytes,
                                               CUstream stream = nullptr);
  PooledBuffer(PooledBuffer&& o) noexcept { *this = std::move(o); }
  PooledBuffer& operator=(PooledBuffer&& o) noexcept;
  ~PooledBuffer() { Reset(); }
  void Reset();
  uint64_t ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  MemoryPool* pool_ = nullptr;
  uint64_t ptr_ = 0;
  size_t bytes_ = 0;
  CUstream stream_ = nullptr;
};

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_MEMORYPOOL_H
