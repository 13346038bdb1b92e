#include "llmc/runtime/Profile.h"

#include <algorithm>

#include <cmath>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace llmc::rt {

absl::StatusOr<std::string> ChromeTraceJson(const Executable& exe,
                                            const std::vector<LaunchTiming>& timeline) {
  if (timeline.size() != exe.launches.size())
    return absl::InvalidArgumentError(absl::StrCat(
        "profile: ", timeline.size(), " launch times for ", exe.launches.size(),
        " launches"));
  nlohmann::json events = nlohmann::json::array();
  double previous_end_ms = 0;
  for (size_t i = 0; i < exe.launches.size(); ++i) {
    const Launch& l = exe.launches[i];
    const float ms = timeline[i].ms;
    const double start_ms = timeline[i].start_ms;
    if (!std::isfinite(ms) || ms < 0 || !std::isfinite(start_ms) || start_ms < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "profile: launch ", i, " has start ", start_ms, " ms and time ", ms, " ms"));
    nlohmann::json args = {{"index", i}};
    // The GPU idle before the launch (launch overhead, a host-side wait).
    args["gap_us"] = std::max(0.0, start_ms - previous_end_ms) * 1e3;
    previous_end_ms = std::max(previous_end_ms, start_ms + ms);
    switch (l.kind) {
      case Launch::Kernel:
        args["kind"] = "kernel";
        if (l.kernel >= 0 && l.kernel < static_cast<int>(exe.kernels.size()))
          args["kernel"] = exe.kernels[l.kernel].name;
        args["grid"] = {l.grid[0], l.grid[1], l.grid[2]};
        args["block"] = {l.block[0], l.block[1], l.block[2]};
        break;
      case Launch::Gemm:
        args["kind"] = "gemm";
        if (l.gemm >= 0 && l.gemm < static_cast<int>(exe.gemms.size())) {
          const GemmSpec& g = exe.gemms[l.gemm];
          args["mnk"] = {g.m, g.n, g.k};
          args["batch"] = g.batch;
          args["tflops"] = 2.0 * g.m * g.n * g.k * g.batch / (ms * 1e-3) / 1e12;
        }
        break;
      case Launch::Collective: args["kind"] = "collective"; break;
      case Launch::Copy:
        args["kind"] = "copy";
        args["bytes"] = l.copy_bytes;
        break;
    }
    events.push_back({{"name", l.label.empty() ? "launch" : l.label},
                      {"cat", args["kind"]},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", 0},
                      {"ts", start_ms * 1e3},
                      {"dur", ms * 1e3},
                      {"args", args}});
  }
  nlohmann::json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  // Labels are for display: a byte that is not UTF-8 becomes U+FFFD rather
  // than an exception.
  return trace.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace llmc::rt
