#include "llmc/runtime/Profile.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace llmc::rt {

absl::StatusOr<std::string> ChromeTraceJson(const Executable& exe,
                                            const std::vector<float>& launch_ms) {
  if (launch_ms.size() != exe.launches.size())
    return absl::InvalidArgumentError(absl::StrCat(
        "profile: ", launch_ms.size(), " launch times for ", exe.launches.size(),
        " launches"));
  nlohmann::json events = nlohmann::json::array();
  double ts_us = 0;
  for (size_t i = 0; i < exe.launches.size(); ++i) {
    const Launch& l = exe.launches[i];
    const float ms = launch_ms[i];
    if (!std::isfinite(ms) || ms < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("profile: launch ", i, " has time ", ms, " ms"));
    nlohmann::json args = {{"index", i}};
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
    const double dur_us = ms * 1e3;
    events.push_back({{"name", l.label.empty() ? "launch" : l.label},
                      {"cat", args["kind"]},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", 0},
                      {"ts", ts_us},
                      {"dur", dur_us},
                      {"args", args}});
    ts_us += dur_us;
  }
  nlohmann::json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  // Labels are for display: a byte that is not UTF-8 becomes U+FFFD rather
  // than an exception.
  return trace.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace llmc::rt
