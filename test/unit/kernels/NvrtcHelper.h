//===- NvrtcHelper.h - minimal dlopen'ed NVRTC for kernel compile tests ---===//
#ifndef LLMC_TEST_KERNELS_NVRTCHELPER_H
#define LLMC_TEST_KERNELS_NVRTCHELPER_H
#include <string>
#include <vector>

namespace llmc::test {
/// True if libnvrtc could be loaded (tests skip otherwise).
bool NvrtcAvailable();
/// Compiles `source` for `arch` (e.g. "sm_90") to a cubin with NVRTC.
/// Returns true on success; `log` receives the compile log. `cubin_size`
/// receives the size of the produced cubin.
bool NvrtcCompile(const std::string &source, const std::string &name,
                  const std::string &arch, std::string *log,
                  size_t *cubin_size = nullptr);
/// Same with extra NVRTC options (e.g. "--ptxas-options=-v", whose register
/// and spill figures then appear in `log`).
bool NvrtcCompileWithOptions(const std::string &source, const std::string &name,
                             const std::string &arch,
                             const std::vector<std::string> &extra_options,
                             std::string *log, size_t *cubin_size = nullptr);
/// Compiles `source` to PTX for the virtual architecture `arch` (e.g.
/// "compute_90a") into `ptx`; true on success, the compile log in `log`.
bool NvrtcPtx(const std::string &source, const std::string &name, const std::string &arch,
              std::string *ptx, std::string *log);
} // namespace llmc::test
#endif
