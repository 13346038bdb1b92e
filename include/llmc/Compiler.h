//===- Compiler.h - the embedded JIT: MLIR text -> rt::Executable -*- C++ -*-===//
//
// The C++ face of llmc for programs that embed it (the C API in llmc_c.h is a
// thin layer over it). A Compiler owns an MLIRContext with every llmc dialect
// and an NVRTC kernel compiler; Compile() runs the same flow as llmc-compile:
//
//   parse + verify -> llmc::RunPipeline (llmc/Pipelines/Pipeline.h: shape
//                     specialization, canonicalize/raise, precision policy)
//                  -> LowerToExecutable
//                  -> rt::KernelCompiler::CompileAll (cubins for `arch`)
//
// and returns an rt::Executable ready for rt::Session::Load (or
// rt::SaveExecutable). A JitFunction adds the specialization cache: it binds
// the dynamic dims of a call's input shapes and compiles once per shape
// signature.
//
//   auto compiler = llmc::Compiler::Create({}).value();
//   auto exe = compiler->Compile(text, "tiny_llama_block", {{"seq", 7}});
//   auto session = rt::Session::Load(device, *exe);
//
// Shapes and dtypes: the executable's inputs/outputs (TensorSig) are the
// function's arguments/results with every dynamic dimension replaced by its
// binding; dense row-major, element types f32/f16/bf16/f8E4M3FN/f8E5M2/i1
// (one byte)/i8/i32/i64.
//
// Errors (absl::Status codes):
//   InvalidArgument     malformed or invalid MLIR (the message holds every
//                       diagnostic with its location), an unknown function
//                       name, a missing/unused/contradicting shape binding
//                       (named), a bad option;
//   Unimplemented       an op or configuration the CUDA backend does not
//                       support (names the op and its location);
//   FailedPrecondition  libnvrtc cannot be loaded;
//   Internal            an llmc bug.
//
// Thread-safety: every method may be called concurrently; MLIR work is
// serialized on the Compiler's mutex, NVRTC compiles run outside it.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_COMPILER_H
#define LLMC_COMPILER_H

#include "llmc/runtime/Executable.h"
#include "llmc/runtime/KernelCompiler.h"
#include "llmc/runtime/ServingStep.h"
#include "llmc/runtime/SpecializationCache.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace llmc {

struct PipelineOptions;

struct CompilerOptions {
  /// NVRTC target of the cubins ("sm_90a", "sm_80", ...). Empty: the arch of
  /// GPU 0 when one is present, else "sm_90a". A session on a GPU of another
  /// arch recompiles from the embedded source at load.
  std::string arch;
  /// Fusion on/off: elementwise chains, residual + norm, GEMM epilogues.
  bool fuse = true;
  /// Numerics policy applied to every compiled function: "fp32" (the graph
  /// as written), "bf16", "fp16" or "fp8" (llmc-precision; see
  /// llmc::PipelineOptions in llmc/Pipelines/Pipeline.h). fp8 GEMMs are cuBLASLt fp8 GEMMs for
  /// an `arch` of sm_89 or later and dequantize + bf16 GEMMs below.
  std::string precision = "fp32";
  /// Under precision "fp8": "tensor" (one scale per GEMM operand) or "row"
  /// (one per row of the LHS and per column of the RHS, torchao's rowwise
  /// recipe; see llmc-precision's fp8-scaling).
  std::string fp8_scaling = "tensor";
  /// Weight-only quantization of the rank-2 parameter weights of matmuls
  /// whose K is a multiple of 128: "none", "int8" or "int4" (symmetric, one
  /// scale per 128 weights along K; AWQ/GPTQ-style layout, quantized once
  /// per parameter set in the preparation segment, dequantized in the decode
  /// GEMV or before a bf16 GEMM). Not with precision "fp8".
  std::string weight_only = "none";
  /// Kernel cache directory; empty = rt::DefaultCacheDir().
  std::string cache_dir;
  bool use_disk_cache = true;
  /// Compile every kernel with NVRTC (cubins for `arch`). false: the kernels
  /// stay CUDA source only (rt::Session::Load compiles them), e.g. to compare
  /// executables without NVRTC (test/golden).
  bool compile_kernels = true;
};

class Compiler {
public:
  /// Reads the tuning knobs' environment variables (LLMC_ATTENTION_BACKEND,
  /// LLMC_ATTN_CONFIG, LLMC_EW_UNROLL, LLMC_GEMV_UNROLL,
  /// LLMC_FLASH_DECODE_COMBINE; llmc::SetTuningKnobs)
  /// once, here: later changes to them do not affect this Compiler. Errors:
  /// InvalidArgument for a malformed `arch`, an unknown `precision` or a bad
  /// value of one of those variables (named).
  static absl::StatusOr<std::unique_ptr<Compiler>>
  Create(CompilerOptions options = {});
  ~Compiler();
  Compiler(const Compiler &) = delete;
  Compiler &operator=(const Compiler &) = delete;

  /// Compiles `function` (empty: the first func.func) of the module
  /// `mlirText` with its dynamic dims bound by `shapeBindings` (names from
  /// `llm.dim_names`, else "arg<i>.<d>"; see llm::dynamicDimName). The
  /// executable's `symbol_bindings` records the bindings.
  absl::StatusOr<std::shared_ptr<rt::Executable>>
  Compile(std::string_view mlirText, std::string_view function,
          const std::map<std::string, int64_t> &shapeBindings);

  /// Shape specs of `function`'s inputs (static sizes and dynamic dim
  /// names), for a specialization cache. Errors as for Compile's parse step.
  absl::StatusOr<std::vector<rt::InputShapeSpec>>
  InputShapes(std::string_view mlirText, std::string_view function);

  /// The resolved NVRTC arch.
  const std::string &arch() const { return options_.arch; }
  const CompilerOptions &options() const { return options_; }
  rt::KernelCompiler &kernel_compiler() { return *kernels_; }

private:
  explicit Compiler(CompilerOptions options);

  CompilerOptions options_;
  std::mutex mu_; // guards context_ and everything parsed into it
  std::unique_ptr<mlir::MLIRContext> context_;
  std::unique_ptr<rt::KernelCompiler> kernels_;
  /// options_ as the compilation pipeline, tuning knobs read at Create.
  std::unique_ptr<PipelineOptions> pipeline_;
};

/// The executable factory of rt::SessionStepModel for serving-step function
/// `function` of `mlirText` (llmc/runtime/ServingStep.h): each bucket
/// compiles with the dims tokens = T_b, seqs = B_b, seqs_plus_one = B_b + 1
/// and logit_rows = B_b. Errors as Compile's.
rt::StepExecutableFactory ServingStepFactory(std::shared_ptr<Compiler> compiler,
                                             std::string mlirText, std::string function);

/// A function compiled on demand per shape signature: the first call with
/// new values of the dynamic dims compiles (after bucketing), later calls
/// with the same values hit the cache.
///
///   auto jit = llmc::JitFunction::Create(compiler, text, "block").value();
///   auto entry = jit->Get({{1, 7, 64}, {64}, ...});   // compiles seq=7
///   entry->executable ...                             // compiled for
///   entry->bucketed                                   // these dim values
class JitFunction {
public:
  /// Parses `mlirText` once to read the input shapes of `function`.
  /// `policies` buckets dynamic dims by name (absent: exact values); at most
  /// `recompileLimit` specializations are compiled. Errors as
  /// Compiler::InputShapes.
  static absl::StatusOr<std::unique_ptr<JitFunction>>
  Create(std::shared_ptr<Compiler> compiler, std::string mlirText,
         std::string function,
         absl::flat_hash_map<std::string, rt::BucketPolicy> policies = {},
         int recompileLimit = 8);

  /// Executable for a call with input shapes `shapes` (one per argument).
  /// Errors: InvalidArgument when the shapes contradict the function's
  /// signature (names input, dim, expected vs actual), ResourceExhausted past
  /// the recompile limit, else Compile's errors.
  absl::StatusOr<rt::SpecializationCache::Entry>
  Get(const std::vector<std::vector<int64_t>> &shapes);

  const std::vector<rt::InputShapeSpec> &input_specs() const { return specs_; }
  rt::SpecializationStats stats() const { return cache_->stats(); }
  int num_specializations() const { return cache_->num_specializations(); }

private:
  JitFunction() = default;
  std::shared_ptr<Compiler> compiler_;
  std::string text_, function_;
  std::vector<rt::InputShapeSpec> specs_;
  std::unique_ptr<rt::SpecializationCache> cache_;
};

} // namespace llmc

#endif // LLMC_COMPILER_H
