#include "llmc/runtime/Device.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {

#define CU_CALL(fn, ...) LLMC_VENDOR_CALL(*driver_, fn, __VA_ARGS__)

absl::StatusOr<std::shared_ptr<Device>> Device::Open(int ordinal) {
  LLMC_RT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
  std::shared_ptr<Device> d(new Device());
  d->driver_ = cu;
  d->ordinal_ = ordinal;
  const CudaDriver* driver_ = cu;
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuInit, 0));
  int count = 0;
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuDeviceGetCount, &count));
  if (ordinal < 0 || ordinal >= count)
    return absl::InvalidArgumentError(absl::StrCat(
        "GPU ordinal ", ordinal, " out of range: ", count, " device(s) visible"));
  CUdevice dev;
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuDeviceGet, &dev, ordinal));
  d->device_ = dev;
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(
      cuDeviceGetAttribute, &d->cc_major_,
      CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(
      cuDeviceGetAttribute, &d->cc_minor_,
      CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  char name[256] = {0};
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuDeviceGetName, name, sizeof(name) - 1, dev));
  d->name_ = name;
  size_t total = 0;
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuDeviceTotalMem, &total, dev));
  d->total_memory_ = static_cast<int64_t>(total);
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuDevicePrimaryCtxRetain, &d->context_, dev));
  LLMC_RT_RETURN_IF_ERROR(d->MakeCurrent());
  d->pool_ = std::make_unique<MemoryPool>(MakeCudaDriverAllocator());
  return d;
}

Device::~Device() {
  if (!context_) return;
  (void)MakeCurrent();
  pool_.reset();  // returns cached blocks while the context is alive
  driver_->cuDevicePrimaryCtxRelease(device_);
}

std::string Device::Arch() const {
  bool arch_specific = cc_major_ == 9 && cc_minor_ == 0;
  return absl::StrCat("sm_", cc_major_, cc_minor_, arch_specific ? "a" : "");
}

bool Device::CanRunCubin(const std::string& arch) const {
  // "sm_XY" or "sm_XYa"/"sm_XYf"; X may be two digits (sm_100).
  if (arch.size() < 5 || arch.compare(0, 3, "sm_") != 0) return false;
  std::string digits = arch.substr(3);
  bool variant = !digits.empty() && std::isalpha(digits.back());
  if (variant) digits.pop_back();
  if (digits.size() < 2) return false;
  for (char c : digits)
    if (!std::isdigit(c)) return false;
  int major = std::stoi(digits.substr(0, digits.size() - 1));
  int minor = digits.back() - '0';
  if (major != cc_major_) return false;
  return variant ? minor == cc_minor_ : minor <= cc_minor_;
}

absl::Status Device::MakeCurrent() const {
  return CU_CALL(cuCtxSetCurrent, context_);
}

absl::StatusOr<uint64_t> Device::Alloc(size_t bytes) {
  LLMC_RT_RETURN_IF_ERROR(MakeCurrent());
  CUdeviceptr p = 0;
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuMemAlloc, &p, bytes));
  return static_cast<uint64_t>(p);
}
absl::Status Device::Free(uint64_t dptr) {
  LLMC_RT_RETURN_IF_ERROR(MakeCurrent());
  return CU_CALL(cuMemFree, static_cast<CUdeviceptr>(dptr));
}
absl::Status Device::CopyToDevice(uint64_t dst, const void* src, size_t bytes) {
  LLMC_RT_RETURN_IF_ERROR(MakeCurrent());
  return CU_CALL(cuMemcpyHtoD, static_cast<CUdeviceptr>(dst), src, bytes);
}
absl::Status Device::CopyToHost(void* dst, uint64_t src, size_t bytes) {
  LLMC_RT_RETURN_IF_ERROR(MakeCurrent());
  return CU_CALL(cuMemcpyDtoH, dst, static_cast<CUdeviceptr>(src), bytes);
}
absl::Status Device::Memset(uint64_t dst, uint8_t value, size_t bytes) {
  LLMC_RT_RETURN_IF_ERROR(MakeCurrent());
  return CU_CALL(cuMemsetD8, static_cast<CUdeviceptr>(dst), value, bytes);
}
absl::Status Device::Synchronize() {
  LLMC_RT_RETURN_IF_ERROR(MakeCurrent());
  return CU_CALL(cuCtxSynchronize);
}
absl::StatusOr<CUstream> Device::CreateStream() {
  LLMC_RT_RETURN_IF_ERROR(MakeCurrent());
  CUstream s = nullptr;
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  return s;
}
absl::Status Device::DestroyStream(CUstream stream) {
  return CU_CALL(cuStreamDestroy, stream);
}
absl::Status Device::SynchronizeStream(CUstream stream) {
  return CU_CALL(cuStreamSynchronize, stream);
}

}  // namespace llmc::rt
