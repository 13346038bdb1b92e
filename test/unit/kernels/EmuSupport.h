//===- EmuSupport.h - run generated kernels on the CPU emulator -----------===//
//
// Shared by the GoogleTest files that run generated CUDA kernels on the CPU
// emulator (emu/CudaEmu.h): the kernel source without the device preamble is
// compiled as host C++ with the system compiler into a shared object, loaded
// with dlopen, and entered through a per-test `emu_entry` stub that calls
// emu::Launch. Tests call HaveCompiler() first and GTEST_SKIP without one.
//
//===----------------------------------------------------------------------===//
#ifndef LLMC_TEST_KERNELS_EMUSUPPORT_H
#define LLMC_TEST_KERNELS_EMUSUPPORT_H

#include "llmc/Target/CUDA/KernelLibrary.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::test {

/// Grid / block extents passed by value to `emu_entry`; layout-compatible
/// with the emulator's dim3.
struct Dim3 { unsigned x = 1, y = 1, z = 1; };

/// The host C++ compiler for the emulator: $LLMC_EMU_CXX, else "c++".
std::string HostCompiler();
/// True if HostCompiler() runs (`--version`); checked once per process.
/// Emulator tests skip when this is false.
bool HaveCompiler();

/// Builds `k` for the emulator and returns dlsym(handle, "emu_entry"), or
/// nullptr after an ADD_FAILURE naming the failed compile command or the
/// dlopen error. The source compiled is `#include <emu/CudaEmu.h>` (from
/// LLMC_TEST_SOURCE_DIR), then k.source after the
/// "// ===== end of llmc preamble =====" marker with the inline-PTX wrapper
/// block replaced by LLMC_EMU_PTX_WRAPPERS and each
/// `extern __shared__ __align__(16) T name[];` pointed at emu::dyn_smem, then
/// `stub` with every "KERNEL" replaced by k.name. `stub` must define
/// `extern "C" void emu_entry(dim3 grid, dim3 block, ...)`. Compiled with
/// `-std=c++17 -O1 -w -shared -fPIC -pthread` in a fresh /tmp/llmc_emu_*
/// directory, removed with its files once the library is loaded; the
/// library stays loaded for the rest of the process.
void *BuildEmu(const cuda::KernelCode &k, const std::string &stub);

/// The grid / block of a launch as emulator Dim3.
Dim3 G(const cuda::LaunchDims &d);
Dim3 B(const cuda::LaunchDims &d);

/// n floats from N(0, scale^2), std::mt19937 seeded with `seed`.
std::vector<float> Randn(size_t n, uint32_t seed, float scale = 1.0f);

} // namespace llmc::test
#endif
