//===- Tools.h - entry points of llmc's command-line tools ------*- C++ -*-===//
//
// Each tool in tools/ is a thin main() calling one of these, so every tool
// shares the one copy of MLIR inside libllmc.so.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_TOOLS_H
#define LLMC_TOOLS_H

namespace llmc {

/// `llmc-opt`: mlir-opt with the llm dialect and every llmc pass. Returns the
/// process exit code.
int optMain(int argc, char **argv);

/// `llmc-run`: executes an llm function on random inputs with the CUDA
/// backend or the CPU reference executor, optionally checking and timing it.
int runMain(int argc, char **argv);

/// `llmc-compile`: ahead-of-time compilation to a serialized Executable, every
/// kernel compiled by NVRTC (no GPU needed).
int compileMain(int argc, char **argv);

/// `llmc-serve`: serves a JSONL request file with the continuous-batching
/// engine (rt::ServingEngine) over a serving-step function
/// (llmc/runtime/ServingStep.h), on the GPU or the CPU reference executor;
/// prints per-request tokens and latencies and a throughput summary.
int serveMain(int argc, char **argv);

} // namespace llmc

#endif // LLMC_TOOLS_H
