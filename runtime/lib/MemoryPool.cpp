#include "llmc/runtime/MemoryPool.h"

#include <cstdlib>

#include "absl/strings/str_format.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {
namespace {

constexpr size_t kSmallLimit = 1 << 20;      // 1 MiB
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = 2 << 20;      // 2 MiB
constexpr uint64_t kAlignment = 128;
const CUstream kAnyStream = reinterpret_cast<CUstream>(~uintptr_t{0});

class CudaDriverAllocator : public DeviceAllocator {
 public:
  absl::StatusOr<uint64_t> Allocate(size_t bytes, CUstream) override {
    LLMC_RT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
    CUdeviceptr p = 0;
    LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(*cu, cuMemAlloc, &p, bytes));
    return static_cast<uint64_t>(p);
  }
  void Free(uint64_t ptr, size_t, CUstream) override {
    auto cu = CudaDriver::Get();
    if (cu.ok()) (*cu)->cuMemFree(static_cast<CUdeviceptr>(ptr));
  }
  std::string Name() const override { return "cuda-driver"; }
};

class CallbackAllocator : public DeviceAllocator {
 public:
  explicit CallbackAllocator(AllocatorCallbacks cb) : cb_(cb) {}
  absl::StatusOr<uint64_t> Allocate(size_t bytes, CUstream stream) override {
    void* p = cb_.alloc(bytes, stream, cb_.user);
    if (!p)
      return absl::ResourceExhaustedError(
          absl::StrFormat("user allocator returned null for %d bytes", bytes));
    return reinterpret_cast<uint64_t>(p);
  }
  void Free(uint64_t ptr, size_t, CUstream stream) override {
    cb_.free(reinterpret_cast<void*>(ptr), stream, cb_.user);
  }
  std::string Name() const override { return "user-callbacks"; }

 private:
  AllocatorCallbacks cb_;
};

}  // namespace

std::unique_ptr<DeviceAllocator> MakeCudaDriverAllocator() {
  return std::make_unique<CudaDriverAllocator>();
}

std::unique_ptr<DeviceAllocator> MakeCallbackAllocator(AllocatorCallbacks cb) {
  return std::make_unique<CallbackAllocator>(cb);
}

FakeDeviceAllocator::~FakeDeviceAllocator() {
  for (auto& [p, n] : live_) std::free(reinterpret_cast<void*>(p));
}

absl::StatusOr<uint64_t> FakeDeviceAllocator::Allocate(size_t bytes, CUstream) {
  absl::MutexLock lock(&mu_);
  ++calls_;
  if (capacity_ && outstanding_ + bytes > capacity_)
    return absl::ResourceExhaustedError(absl::StrFormat(
        "fake allocator: %d bytes requested, %d of %d in use", bytes,
        outstanding_, capacity_));
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!p) return absl::ResourceExhaustedError("host aligned_alloc failed");
  outstanding_ += bytes;
  live_[reinterpret_cast<uint64_t>(p)] = bytes;
  return reinterpret_cast<uint64_t>(p);
}

void FakeDeviceAllocator::Free(uint64_t ptr, size_t, CUstream) {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) std::abort();  // a pool bug; tests must see it
  outstanding_ -= it->second;
  live_.erase(it);
  std::free(reinterpret_cast<void*>(ptr));
}

size_t FakeDeviceAllocator::outstanding_bytes() const {
  absl::MutexLock lock(&mu_);
  return outstanding_;
}
int64_t FakeDeviceAllocator::num_allocate_calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

std::string PoolStats::ToString() const {
  return absl::StrFormat(
      "in use %d B, reserved %d B, peak in use %d B, %d allocs (%d cached), "
      "%d device allocs, fragmentation %.3f",
      bytes_in_use, bytes_reserved, peak_in_use, num_allocs, num_cache_hits,
      num_device_allocs, fragmentation);
}

MemoryPool::MemoryPool(std::unique_ptr<DeviceAllocator> allocator)
    : allocator_(std::move(allocator)) {}

MemoryPool::~MemoryPool() {
  absl::MutexLock lock(&mu_);
  TrimLocked();
}

size_t MemoryPool::RoundSize(size_t bytes) {
  if (bytes == 0) bytes = 1;
  size_t unit = bytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + unit - 1) / unit * unit;
}

absl::StatusOr<uint64_t> MemoryPool::Allocate(size_t bytes, CUstream stream) {
  const size_t size = RoundSize(bytes);
  absl::MutexLock lock(&mu_);
  auto take = [&](CUstream tag) -> uint64_t {
    auto it = free_.find({tag, size});
    if (it == free_.end() || it->second.empty()) return 0;
    uint64_t p = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
    return p;
  };
  uint64_t ptr = take(stream);
  if (!ptr) ptr = take(kAnyStream);
  if (ptr) {
    ++stats_.num_cache_hits;
  } else {
    absl::StatusOr<uint64_t> got = allocator_->Allocate(size, stream);
    ++stats_.num_device_allocs;
    if (!got.ok() && absl::IsResourceExhausted(got.status()) &&
        TrimLocked() > 0) {
      got = allocator_->Allocate(size, stream);
      ++stats_.num_device_allocs;
    }
    if (!got.ok()) {
      if (!absl::IsResourceExhausted(got.status())) return got.status();
      return absl::ResourceExhaustedError(absl::StrFormat(
          "out of device memory: cannot allocate %d bytes (%d rounded) from "
          "allocator '%s' after releasing cached blocks; pool: %s; cause: %s",
          bytes, size, allocator_->Name(), stats_.ToString(),
          got.status().message()));
    }
    ptr = *got;
    if (ptr % kAlignment != 0) {
      allocator_->Free(ptr, size, stream);
      return absl::FailedPreconditionError(absl::StrFormat(
          "allocator '%s' returned pointer 0x%x that is not %d-byte aligned",
          allocator_->Name(), ptr, kAlignment));
    }
    stats_.bytes_reserved += size;
  }
  blocks_[ptr] = Block{size, stream, true};
  ++stats_.num_allocs;
  stats_.bytes_in_use += size;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.bytes_in_use);
  return ptr;
}

absl::Status MemoryPool::Free(uint64_t ptr, CUstream stream) {
  absl::MutexLock lock(&mu_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end() || !it->second.in_use)
    return absl::InvalidArgumentError(absl::StrFormat(
        "MemoryPool::Free(0x%x): not a live allocation of this pool (%s)", ptr,
        it == blocks_.end() ? "unknown pointer" : "double free"));
  Block& b = it->second;
  b.in_use = false;
  if (stream) b.stream = stream;
  stats_.bytes_in_use -= b.size;
  free_[{b.stream, b.size}].push_back(ptr);
  return absl::OkStatus();
}

void MemoryPool::StreamsSynchronized() {
  absl::MutexLock lock(&mu_);
  std::map<std::pair<CUstream, size_t>, std::vector<uint64_t>> merged;
  for (auto& [key, ptrs] : free_) {
    auto& dst = merged[{kAnyStream, key.second}];
    dst.insert(dst.end(), ptrs.begin(), ptrs.end());
    for (uint64_t p : ptrs) blocks_[p].stream = kAnyStream;
  }
  free_ = std::move(merged);
}

size_t MemoryPool::Trim() {
  absl::MutexLock lock(&mu_);
  return TrimLocked();
}

size_t MemoryPool::TrimLocked() {
  size_t freed = 0;
  for (auto& [key, ptrs] : free_) {
    for (uint64_t p : ptrs) {
      allocator_->Free(p, key.second, key.first == kAnyStream ? nullptr : key.first);
      blocks_.erase(p);
      freed += key.second;
    }
  }
  free_.clear();
  stats_.bytes_reserved -= freed;
  return freed;
}

PoolStats MemoryPool::Stats() const {
  absl::MutexLock lock(&mu_);
  PoolStats s = stats_;
  s.fragmentation = s.bytes_reserved == 0
                        ? 0.0
                        : 1.0 - double(s.bytes_in_use) / double(s.bytes_reserved);
  return s;
}

absl::StatusOr<PooledBuffer> PooledBuffer::Allocate(MemoryPool* pool,
                                                    size_t bytes,
                                                    CUstream stream) {
  PooledBuffer b;
  LLMC_RT_ASSIGN_OR_RETURN(b.ptr_, pool->Allocate(bytes, stream));
  b.pool_ = pool;
  b.bytes_ = bytes;
  b.stream_ = stream;
  return b;
}

PooledBuffer& PooledBuffer::operator=(PooledBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    pool_ = o.pool_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    stream_ = o.stream_;
    o.pool_ = nullptr;
    o.ptr_ = 0;
  }
  return *this;
}

void PooledBuffer::Reset() {
  if (pool_ && ptr_) (void)pool_->Free(ptr_, stream_);
  pool_ = nullptr;
  ptr_ = 0;
}

}  // namespace llmc::rt
