// One GPU through its primary context: device properties, the device's
// caching memory pool and synchronous memory/stream helpers for tools and
// tests. Sessions (Session.h) and communicators (Communicator.h) run on a
// Device; it depends on neither. Needs libcuda and a GPU at run time.
#ifndef LLMC_RUNTIME_DEVICE_H
#define LLMC_RUNTIME_DEVICE_H

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "llmc/runtime/CudaTypes.h"
#include "llmc/runtime/MemoryPool.h"

namespace llmc::rt {

struct CudaDriver;

/// One GPU, through its primary context.
class Device {
 public:
  /// cuInit, cuDeviceGet(ordinal), retains the primary context and makes it
  /// current. FailedPrecondition without a driver/GPU; InvalidArgument for a
  /// bad ordinal.
  static absl::StatusOr<std::shared_ptr<Device>> Open(int ordinal = 0);
  ~Device();

  int ordinal() const { return ordinal_; }
  int cc_major() const { return cc_major_; }
  int cc_minor() const { return cc_minor_; }
  const std::string& name() const { return name_; }
  int64_t total_memory_bytes() const { return total_memory_; }
  /// NVRTC arch for this device: "sm_90a" on 9.0 (so wgmma is allowed),
  /// else "sm_<major><minor>".
  std::string Arch() const;
  /// True if a cubin built for `arch` runs here (same major, minor <= ours;
  /// exact match for "a" variants).
  bool CanRunCubin(const std::string& arch) const;

  /// Makes the primary context current on the calling thread.
  absl::Status MakeCurrent() const;
  /// Device-wide default caching pool (cuMemAlloc-backed).
  MemoryPool& pool() { return *pool_; }
  const CudaDriver& driver() const { return *driver_; }

  // Helpers for tools and tests (synchronous unless noted). Bytes.
  absl::StatusOr<uint64_t> Alloc(size_t bytes);
  absl::Status Free(uint64_t dptr);
  absl::Status CopyToDevice(uint64_t dst, const void* src, size_t bytes);
  absl::Status CopyToHost(void* dst, uint64_t src, size_t bytes);
  absl::Status Memset(uint64_t dst, uint8_t value, size_t bytes);
  absl::Status Synchronize();
  absl::StatusOr<CUstream> CreateStream();
  absl::Status DestroyStream(CUstream stream);
  absl::Status SynchronizeStream(CUstream stream);

 private:
  Device() = default;
  const CudaDriver* driver_ = nullptr;
  int ordinal_ = 0;
  int device_ = 0;  // CUdevice
  CUcontext context_ = nullptr;
  int cc_major_ = 0, cc_minor_ = 0;
  std::string name_;
  int64_t total_memory_ = 0;
  std::unique_ptr<MemoryPool> pool_;
};

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_DEVICE_H
