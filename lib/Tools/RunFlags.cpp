//===- RunFlags.cpp - llmc-run: flag validation and errors ----------------===//
//
// Every flag of llmc-run is checked here before anything runs (checkFlags),
// so a bad value or a contradiction is an error naming the flag; fail()
// prints llmc-run's errors; pipelineOptions() turns the checked flags into
// the cuda path's PipelineOptions.
//
//===----------------------------------------------------------------------===//

#include "RunMain.h"

#include "TensorParallel.h"
#include "llmc/runtime/FileIO.h"

#include "LLM/Transforms/Passes.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

using namespace mlir;

namespace llmc::tools::run {

int fail(const llvm::Twine &msg) {
  const llmc::tools::TpState &tp = llmc::tools::tpState();
  llvm::errs() << "llmc-run: "
               << (tp.role == llmc::tools::TpState::Rank
                       ? "[rank " + std::to_string(tp.rank) + "] "
                       : std::string())
               << "error: " << msg << "\n";
  return 1;
}

/// The error for a flag whose value is invalid, or for flags that
/// contradict each other or have no effect together, whatever the backend
/// (every value is checked before anything runs); "" when they are fine.
std::string checkFlags(const Options &opts) {
  auto given = [](const cl::Option &o) { return o.getNumOccurrences() > 0; };
  if (opts.backend != "cuda" && opts.backend != "ref")
    return "unknown --backend '" + opts.backend + "' (expected cuda or ref)";
  // --precision and the tuning knobs (flag, else environment variable).
  if (auto pipeline = opts.pipeline.options(/*knobs=*/opts.backend == "cuda");
      !pipeline.ok())
    return std::string(pipeline.status().message());
  std::string error;
  if (!llmc::llm::parseWeightOnlyMode(opts.weightOnly, error))
    return "--weight-only: " + error;
  if (given(opts.check) && !opts.check.empty() && opts.check != "ref" &&
      opts.check != "gpu-f32")
    return "unknown --check mode '" + opts.check + "' (expected ref or gpu-f32)";
  if (given(opts.tolerance) &&
      !(std::isfinite(opts.tolerance.getValue()) && opts.tolerance >= 0)) {
    std::string tol;
    llvm::raw_string_ostream(tol) << llvm::format("%g", opts.tolerance.getValue());
    return "--tol=" + tol + ": expected a finite relative error >= 0";
  }
  if (given(opts.iters) && opts.iters < 1)
    return "--iters=" + std::to_string(opts.iters) +
           ": expected at least 1 timed run";
  if (given(opts.gpu) && opts.gpu < 0)
    return "--gpu=" + std::to_string(opts.gpu) + ": expected a GPU ordinal >= 0";
  // Flags the cuda backend alone reads would be silently ignored.
  if (opts.backend == "ref")
    for (const cl::Option *o :
         std::initializer_list<const cl::Option *>{
             &opts.check, &opts.bench, &opts.iters, &opts.profile,
             &opts.noGraphs, &opts.pipeline.attention,
             &opts.pipeline.attentionTile, &opts.pipeline.ewUnroll,
             &opts.pipeline.gemvUnroll, &opts.pipeline.flashDecodeCombine, &opts.gpu,
             &opts.tolerance, &opts.pipeline.noHoist, &opts.ncclTimeout})
      if (given(*o))
        return "--" + o->ArgStr.str() +
               " applies to the cuda backend only; it has no effect with "
               "--backend=ref";
  if (opts.emit != "run" && opts.emit != "executable-dump" && opts.emit != "exec")
    return "--emit=" + opts.emit + ": expected run, executable-dump or exec";
  // The dump is the cuda backend's executable, not a run of it.
  if (opts.emit != "run") {
    const std::string emit = "--emit=" + opts.emit.getValue();
    if (opts.backend != "cuda")
      return emit + " prints the cuda backend's executable; "
             "it has no effect with --backend=" + opts.backend;
    for (const cl::Option *o : std::initializer_list<const cl::Option *>{
             // (cl::list's operator& is its vector's address)
             std::addressof(opts.values), std::addressof(opts.inputFiles),
             &opts.outputDir, &opts.check,
             &opts.bench, &opts.iters, &opts.profile, &opts.noGraphs,
             &opts.seed, &opts.refMaxMemory, &opts.refMaxGmacs, &opts.tolerance,
             &opts.rendezvous, &opts.runId, &opts.gpu, &opts.ncclTimeout})
      if (given(*o))
        return "--" + o->ArgStr.str() + " has no effect with " + emit +
               " (it prints the executable and runs nothing)";
    if (opts.tp > 1 && !given(opts.rank))
      return emit + " with --tp=" + std::to_string(opts.tp) +
             " prints one rank's executable: give --rank=R";
  }
  if (given(opts.tolerance) && !given(opts.check))
    return "--tol needs --check (it bounds the check's relative error)";
  if (given(opts.iters) && !opts.bench)
    return "--iters needs --bench (it counts the timed runs)";
  if (!opts.profile.empty() && !opts.bench)
    return "--profile needs --bench (the profile is the timed run)";
  if (given(opts.profile)) {
    if (opts.profile.empty() || opts.profile == "-")
      return "--profile='" + opts.profile +
             "': name a file (llmc-run prints its report on stdout)";
    if (auto st = llmc::rt::CheckWritableFile(opts.profile); !st.ok())
      return "--profile: " + std::string(st.message());
  }
  if (given(opts.outputDir)) {
    struct stat st;
    if (opts.outputDir.empty() || opts.outputDir == "-")
      return "--output-dir='" + opts.outputDir + "': name a directory";
    if (::stat(opts.outputDir.c_str(), &st) != 0)
      return "--output-dir '" + opts.outputDir + "': " +
             (errno == ENOENT ? std::string("the directory does not exist "
                                            "(llmc-run does not create it)")
                              : std::string(std::strerror(errno)));
    if (!S_ISDIR(st.st_mode))
      return "--output-dir '" + opts.outputDir + "' is " +
             llmc::rt::FileKindName(st.st_mode) + ", not a directory";
  }
  return "";
}

/// The pipeline options of the cuda path: --precision, --weight-only,
/// --no-hoist, the tuning knobs, and the target's compute capability (0: the
/// default). The flags were checked by checkFlags.
absl::StatusOr<llmc::PipelineOptions> pipelineOptions(const Options &opts,
                                                      int targetSm) {
  absl::StatusOr<llmc::PipelineOptions> options =
      opts.pipeline.options(/*knobs=*/true);
  if (!options.ok())
    return options.status();
  std::string error;
  std::optional<llmc::llm::WeightOnlyMode> weightOnly =
      llmc::llm::parseWeightOnlyMode(opts.weightOnly, error);
  if (!weightOnly)
    return absl::InvalidArgumentError("--weight-only: " + error);
  options->weight_only = *weightOnly;
  if (targetSm > 0)
    options->target_sm = targetSm;
  return options;
}

} // namespace llmc::tools::run
