//===- PipelineFlags.h - pipeline flags of llmc-compile and llmc-run -*- C++ -*-===//
//
// The command-line face of llmc::PipelineOptions that both tools share
// (--precision, --fp8-scaling, --no-hoist and the tuning knobs --attention,
// --attention-tile, --ew-unroll, --gemv-unroll), validated once into PipelineOptions with
// errors naming the flag, and MLIR's pass-manager flags
// (--mlir-print-ir-after-all, --mlir-timing, ...) applied to the pipeline's
// pass manager.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_LIB_TOOLS_PIPELINEFLAGS_H
#define LLMC_LIB_TOOLS_PIPELINEFLAGS_H

#include "llmc/Pipelines/Pipeline.h"

#include "llvm/Support/CommandLine.h"

#include <string>

namespace llmc::tools {

struct PipelineFlags {
  explicit PipelineFlags(llvm::cl::OptionCategory &category);

  llvm::cl::opt<std::string> precision;
  llvm::cl::opt<std::string> fp8Scaling;
  llvm::cl::opt<bool> noHoist;
  llvm::cl::opt<std::string> attention;
  llvm::cl::opt<std::string> attentionTile;
  llvm::cl::opt<std::string> ewUnroll;
  llvm::cl::opt<std::string> gemvUnroll;
  llvm::cl::opt<std::string> flashDecodeCombine;

  /// PipelineOptions with the policy, --no-hoist and, when `knobs` (only
  /// where code is generated: a bad LLMC_* variable must not stop a run that
  /// never reads it), the tuning knobs (flag, else environment, else
  /// default: SetTuningKnobs).
  /// Errors: "--precision: expected fp32, ...", "--ew-unroll: ...",
  /// "--gemv-unroll: ...", "environment variable LLMC_EW_UNROLL: ...".
  absl::StatusOr<PipelineOptions> options(bool knobs = true) const;
};

/// Registers MLIR's pass-manager and timing flags and lists them in --help
/// under passManagerCategory(). Call before cl::ParseCommandLineOptions.
void registerPassManagerFlags();
llvm::cl::OptionCategory &passManagerCategory();

/// Applies those flags to `pm` (a PassManagerSetup). Fails, with a
/// diagnostic, on a combination MLIR refuses.
mlir::LogicalResult applyPassManagerFlags(mlir::PassManager &pm);

} // namespace llmc::tools

#endif // LLMC_LIB_TOOLS_PIPELINEFLAGS_H
