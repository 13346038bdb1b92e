//===- RunMain.h - llmc-run's options and shared functions -----*- C++ -*-===//
//
// Internal to llmc-run (llmc::runMain). Its flags (Options) and the
// functions its files share, split by concern:
//   RunMain.cpp    the driver: flags, launcher, parsing, shape bindings,
//                  weight-only quantization, the dump, inputs, reference
//                  run and check, results
//   RunFlags.cpp   flag validation (checkFlags), errors (fail), the cuda
//                  path's PipelineOptions
//   RunInputs.cpp  host tensors: storage bytes (pack/unpack), --input files,
//                  integer ranges
//   RunCheck.cpp   --check tolerances and the float32 GPU reference instance
//   RunGpu.cpp     the rank's program, the GPU run and the --bench report
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_LIB_TOOLS_RUNMAIN_H
#define LLMC_LIB_TOOLS_RUNMAIN_H

#include "PipelineFlags.h"
#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/Pipelines/Pipeline.h"
#include "llmc/Reference/ReferenceExecutor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/CommandLine.h"

#include <optional>
#include <string>
#include <vector>

namespace llmc::tools::run {

namespace cl = llvm::cl;
namespace ref = llmc::reference;

struct Options {
  cl::OptionCategory cat{"llmc-run options"};
  cl::opt<std::string> input{cl::Positional, cl::desc("<file.mlir>"),
                             cl::Required, cl::cat(cat)};
  cl::opt<std::string> fnName{"fn", cl::desc("function to run (default: the first)"),
                              cl::cat(cat)};
  cl::opt<std::string> backend{"backend", cl::desc("cuda or ref"),
                               cl::init("cuda"), cl::cat(cat)};
  cl::list<std::string> shapes{"shape", cl::desc("NAME=N binding of a dynamic dimension"),
                               cl::cat(cat)};
  cl::list<std::string> values{"value",
                               cl::desc("argI=V: value of a rank-0 integer argument"),
                               cl::cat(cat)};
  cl::list<std::string> inputFiles{
      "input",
      cl::desc("argI=FILE: take argument I (row-major, little-endian) from "
               "FILE.npy (a C-ordered NumPy array of the argument's shape: "
               "float64/32/16, int64/32/16/8, uint8/16/32 or bool, rounded to "
               "the argument's type), "
               "FILE.f32 (float32 values, rounded to the argument's type), "
               "FILE.i64 (int64 values), or FILE.bin / FILE.<its dtype> "
               "(e.g. FILE.bf16: the argument's own storage, i1 one byte 0 "
               "or 1); the file must hold exactly the argument's element "
               "count, and integer arguments take integral values in range"),
      cl::cat(cat)};
  cl::opt<std::string> outputDir{
      "output-dir",
      cl::desc("write each result I as DIR/resultI.f32 (raw little-endian "
               "float32, row-major); DIR must exist"),
      cl::cat(cat)};
  cl::opt<std::string> check{"check", cl::desc("compare with a reference: ref (CPU, "
                                               "float64), gpu-f32 (unfused f32 on the GPU), "
                                               "or by size when no value is given"),
                             cl::ValueOptional, cl::init(""), cl::cat(cat)};
  cl::opt<bool> bench{"bench", cl::desc("time end to end and per kernel"), cl::cat(cat)};
  cl::opt<int> iters{"iters", cl::desc("timed repetitions for --bench"), cl::init(50),
                     cl::cat(cat)};
  cl::opt<std::string> profile{
      "profile",
      cl::desc("with --bench: write the per-launch timings of one run as "
               "Chrome-trace JSON (chrome://tracing, ui.perfetto.dev) to FILE"),
      cl::value_desc("FILE"), cl::cat(cat)};
  cl::opt<bool> noGraphs{"no-cuda-graphs", cl::desc("launch kernels one by one"),
                         cl::cat(cat)};
  cl::opt<uint64_t> seed{"seed", cl::desc("random seed for inputs"), cl::init(1),
                         cl::cat(cat)};
  /// --precision, --no-hoist, --attention, --attention-tile, --ew-unroll,
  /// --gemv-unroll.
  llmc::tools::PipelineFlags pipeline{cat};
  cl::opt<std::string> weightOnly{
      "weight-only",
      cl::desc("none, int8 or int4: weight-only quantization of parameter "
               "matmul weights (llmc-precision weight-only, groups of 128 "
               "along K); --check then checks the kernels against the "
               "quantized graph"),
      cl::init("none"), cl::cat(cat)};
  cl::opt<double> refMaxMemory{
      "ref-max-memory",
      cl::desc("host memory budget of the CPU reference executor (--backend=ref, "
               "--check=ref) in GiB of float64 data: inputs, live values and "
               "results (default 8, or half the physical memory or of the "
               "address-space limit (ulimit -v) when that is less)"),
      cl::init(double(ref::kDefaultMaxHostBytes) / double(int64_t(1) << 30)),
      cl::cat(cat)};
  cl::opt<double> refMaxGmacs{
      "ref-max-gmacs",
      cl::desc("work budget of the CPU reference executor (--backend=ref, "
               "--check=ref) in 1e9 multiply-adds of matmuls and attention "
               "(default 16, tens of seconds); a graph over it is an error "
               "naming the op, before its loops run"),
      cl::init(ref::kDefaultMaxMultiplyAdds / 1e9), cl::cat(cat)};
  cl::opt<double> tolerance{"tol",
                            cl::desc("with --check: relative error bound "
                                     "(default by dtype)"),
                            cl::init(-1.0), cl::cat(cat)};
  cl::opt<int> tp{"tp",
                  cl::desc("tensor-parallel degree: run llmc-shard{tp=N rank=R} "
                           "on N GPUs through NCCL (one process per rank; "
                           "without --rank, llmc-run starts the N processes)"),
                  cl::init(1), cl::cat(cat)};
  cl::opt<int> rank{"rank",
                    cl::desc("with --tp: run only this rank (default: $RANK "
                             "under torchrun, else start all ranks)"),
                    cl::init(-1), cl::cat(cat)};
  cl::opt<std::string> rendezvous{
      "rendezvous",
      cl::desc("with --rank: file through which rank 0 hands out the NCCL id "
               "(every rank must see it; default $LLMC_RENDEZVOUS)"),
      cl::value_desc("PATH"), cl::cat(cat)};
  cl::opt<std::string> runId{
      "run-id",
      cl::desc("with --rank: id of this launch, the same on every rank, so a "
               "stale rendezvous file is never used (default $LLMC_RUN_ID, "
               "$TORCHELASTIC_RUN_ID)"),
      cl::cat(cat)};
  cl::opt<int> gpu{"gpu",
                   cl::desc("GPU ordinal (default: 0; with --tp $LOCAL_RANK, "
                            "else the rank)"),
                   cl::init(-1), cl::cat(cat)};
  cl::opt<double> ncclTimeout{
      "nccl-timeout",
      cl::desc("seconds a rank waits for the others (set-up, each "
               "collective) before it aborts with an error"),
      cl::init(300.0), cl::cat(cat)};
  cl::opt<std::string> emit{
      "emit",
      cl::desc("run (the default); executable-dump: print the canonical "
               "text of the executable the cuda backend would run (with "
               "--tp=N, of rank --rank) instead of running it, with no "
               "inputs, GPU, NVRTC or NCCL (see test/golden); exec: print "
               "that executable as execution-level IR (the exec dialect)"),
      cl::init("run"), cl::cat(cat)};
};

// RunFlags.cpp

/// Prints "llmc-run: [rank R] error: MSG" and returns 1.
int fail(const llvm::Twine &msg);
/// The first invalid flag or combination of flags; "" when they are fine.
std::string checkFlags(const Options &opts);
/// The cuda path's pipeline options for compute capability `targetSm` (0: the
/// default target).
absl::StatusOr<llmc::PipelineOptions> pipelineOptions(const Options &opts,
                                                      int targetSm);

// RunInputs.cpp

/// Host tensor (values already representable) -> storage bytes, and back
/// (ref::toStorage, ref::fromStorage).
inline std::string pack(const ref::HostTensor &t) { return ref::toStorage(t); }
inline ref::HostTensor unpack(const std::string &bytes, mlir::Type elementType,
                              std::vector<int64_t> shape) {
  return ref::fromStorage(bytes, elementType, std::move(shape));
}
/// `t` as MLIR prints it.
std::string typeStr(mlir::Type t);
/// Why `v` is no value of the integer type `t`; "" when it is one.
std::string integerRangeError(mlir::Type t, double v);
/// Argument `idx` from `--input argI=path`; sets `error` and returns nullopt
/// when the file does not fit the argument.
std::optional<ref::HostTensor> readInput(const std::string &path, unsigned idx,
                                         mlir::RankedTensorType t,
                                         std::string &error);

// RunCheck.cpp

/// --check's default relative error bound for a result of `resultType`.
double defaultTolerance(mlir::func::FuncOp fn, mlir::Type resultType);
/// The relative error a precision policy adds.
double precisionTolerance(const std::string &policy);
/// Rewrites `fn` into its float32 instance (--check=gpu-f32).
mlir::LogicalResult upcastToF32(mlir::func::FuncOp fn);

// RunGpu.cpp

/// Shards `fn` for `rank` of `tp` and runs the pipeline on it, in place.
mlir::LogicalResult toRankProgram(mlir::func::FuncOp fn, int tp, int rank,
                                  llmc::PipelineOptions options);

struct GpuRun {
  std::vector<ref::HostTensor> outputs;
  double median_ms = 0;
  std::vector<float> per_launch_ms;
};

/// Lowers `fn`, runs it once on this rank's GPU (and, with `bench`, times
/// it and prints the report) and returns its results.
absl::StatusOr<GpuRun> runOnGpu(mlir::func::FuncOp fn,
                                const std::vector<ref::HostTensor> &inputs,
                                const Options &opts, bool bench,
                                llmc::LowerStats *stats);

} // namespace llmc::tools::run

#endif // LLMC_LIB_TOOLS_RUNMAIN_H
