// Profiles of an Executable's launches as Chrome-trace / Perfetto JSON.
#ifndef LLMC_RUNTIME_PROFILE_H
#define LLMC_RUNTIME_PROFILE_H

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "llmc/runtime/Executable.h"

namespace llmc::rt {

/// One launch of a timed run (Session::RunTimeline), in milliseconds of the
/// GPU's clock, from CUDA events recorded on the stream just before and
/// just after the launch.
struct LaunchTiming {
  /// Start, after the first timed launch's start (>= 0).
  double start_ms = 0;
  /// The launch itself: its start event to its end event.
  float ms = 0;
  /// The end of the previous launch (the first one's start) to this one's
  /// end: its time plus the gap before it (Session::RunTimed's figure).
  float since_previous_ms = 0;
};

/// Chrome Trace Event JSON (the "traceEvents" array format that
/// chrome://tracing and ui.perfetto.dev load) of one timed run
/// (Session::RunTimeline): one complete ("ph": "X") event per launch at its
/// GPU start time ("ts", microseconds after the first launch's start) with
/// its GPU duration ("dur"), on one track, named by the launch label, with
/// the launch kind, kernel name or GEMM shape (and TFLOP/s) and the idle gap
/// before it in its args. InvalidArgument when the counts differ or a time
/// is negative or not finite.
absl::StatusOr<std::string> ChromeTraceJson(const Executable& exe,
                                            const std::vector<LaunchTiming>& timeline);

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_PROFILE_H
