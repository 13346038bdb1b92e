// Profiles of an Executable's launches as Chrome-trace / Perfetto JSON.
#ifndef LLMC_RUNTIME_PROFILE_H
#define LLMC_RUNTIME_PROFILE_H

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "llmc/runtime/Executable.h"

namespace llmc::rt {

/// Chrome Trace Event JSON (the "traceEvents" array format that
/// chrome://tracing and ui.perfetto.dev load) of one timed run: one complete
/// ("ph": "X") event per launch, back to back in launch order on one track,
/// named by the launch label, with the launch kind, kernel name or GEMM shape
/// and duration in its args. `launch_ms[i]` is launch i's time in
/// milliseconds, as Session::RunTimed returns. InvalidArgument when the counts
/// differ or a time is negative or not finite.
absl::StatusOr<std::string> ChromeTraceJson(const Executable& exe,
                                            const std::vector<float>& launch_ms);

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_PROFILE_H
