//===- RunMain.cpp - llmc-run: execute an llm function ---------------------===//
//
//   llmc-run FILE.mlir [--fn=NAME] [--backend=cuda|ref] [--shape NAME=N]...
//            [--value argI=V]... [--precision=fp32|bf16|fp16|fp8] [--check]
//            [--bench] [--iters=N] [--no-cuda-graphs] [--seed=S]
//            [--tp=N [--rank=R --rendezvous=PATH [--run-id=ID]] [--gpu=D]]
//   llmc-run FILE.mlir --emit=executable-dump [--tp=N --rank=R] [...]
//
// Random inputs (seeded), shape specialization, then either the CPU reference
// executor or the CUDA backend (codegen -> Executable -> runtime Session).
// --check compares the CUDA result with the reference executor (small
// shapes, float64 math) or, with --check=gpu-f32, with an unfused float32
// instance of the same function on the GPU (large shapes).
// --tp=N runs N tensor-parallel ranks (llmc-shard{tp=N rank=R}, NCCL; see
// TensorParallel.h and docs/tensor-parallel.md); --check compares every
// rank's replicated result with the unsharded function.
// --precision applies a numerics policy (llmc-precision, and for fp8
// llmc-pad-layout) to the function before it runs; --check still evaluates
// the function as written and allows the policy's error on top of the
// function's own (bf16/fp16 2e-2, fp8 0.125 relative L2: see
// precisionTolerance).
// --emit=executable-dump runs the CUDA path's flow up to the executable
// (shard, then llmc::RunPipeline: weight-only quantization, canonicalize
// and raise, precision policy; LowerToExecutable with the --attention,
// --attention-tile, --ew-unroll and --no-hoist options) and prints
// its canonical text (rt::DescribeExecutable) instead of running it: no
// inputs, GPU, NVRTC or NCCL; it lowers for the default target (sm_90, as
// without a GPU); with --tp=N it prints rank --rank's program. test/golden
// pins it.
//
//===----------------------------------------------------------------------===//

#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/Pipelines/Pipeline.h"
#include "llmc/InitAllDialects.h"
#include "llmc/InitAllPasses.h"
#include "llmc/Reference/ReferenceExecutor.h"
#include "llmc/Support/ParseSource.h"
#include "llmc/Tools.h"
#include "CommandLine.h"
#include "PipelineFlags.h"
#include "TensorParallel.h"
#include "ToolSupport.h"
#include "llmc/runtime/Communicator.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/ExecutableDump.h"
#include "llmc/runtime/FileIO.h"
#include "llmc/runtime/KernelCompiler.h"
#include "llmc/runtime/Profile.h"
#include "llmc/runtime/Session.h"

#include "LLM/Transforms/Passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Parallel.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>

using namespace mlir;
namespace cl = llvm::cl;
namespace ref = llmc::reference;

namespace {

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
  /// --precision, --no-hoist, --attention, --attention-tile, --ew-unroll.
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
      cl::desc("run (the default) or executable-dump: print the canonical "
               "text of the executable the cuda backend would run (with "
               "--tp=N, of rank --rank) instead of running it; no inputs, "
               "GPU, NVRTC or NCCL (see test/golden)"),
      cl::init("run"), cl::cat(cat)};
};

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
             &opts.pipeline.attentionTile, &opts.pipeline.ewUnroll, &opts.gpu,
             &opts.tolerance, &opts.pipeline.noHoist, &opts.ncclTimeout})
      if (given(*o))
        return "--" + o->ArgStr.str() +
               " applies to the cuda backend only; it has no effect with "
               "--backend=ref";
  if (opts.emit != "run" && opts.emit != "executable-dump")
    return "--emit=" + opts.emit + ": expected run or executable-dump";
  // The dump is the cuda backend's executable, not a run of it.
  if (opts.emit == "executable-dump") {
    if (opts.backend != "cuda")
      return "--emit=executable-dump prints the cuda backend's executable; "
             "it has no effect with --backend=" + opts.backend;
    for (const cl::Option *o : std::initializer_list<const cl::Option *>{
             // (cl::list's operator& is its vector's address)
             std::addressof(opts.values), std::addressof(opts.inputFiles),
             &opts.outputDir, &opts.check,
             &opts.bench, &opts.iters, &opts.profile, &opts.noGraphs,
             &opts.seed, &opts.refMaxMemory, &opts.refMaxGmacs, &opts.tolerance,
             &opts.rendezvous, &opts.runId, &opts.gpu, &opts.ncclTimeout})
      if (given(*o))
        return "--" + o->ArgStr.str() +
               " has no effect with --emit=executable-dump (it prints the "
               "executable and runs nothing)";
    if (opts.tp > 1 && !given(opts.rank))
      return "--emit=executable-dump with --tp=" + std::to_string(opts.tp) +
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

absl::StatusOr<llmc::rt::DType> dtypeOf(Type t) { return llmc::toRuntimeDType(t); }

const llvm::fltSemantics *semanticsOf(Type t) {
  if (t.isF16()) return &llvm::APFloat::IEEEhalf();
  if (t.isBF16()) return &llvm::APFloat::BFloat();
  if (isa<Float8E4M3FNType>(t)) return &llvm::APFloat::Float8E4M3FN();
  if (isa<Float8E5M2Type>(t)) return &llvm::APFloat::Float8E5M2();
  return nullptr;
}

/// Host tensor (values already representable) -> storage bytes.
std::string pack(const ref::HostTensor &t) {
  auto dtype = *dtypeOf(t.elementType);
  int64_t size = llmc::rt::DTypeSize(dtype);
  std::string out(t.data.size() * size, '\0');
  const bool bf16 = t.elementType.isBF16();
  llvm::parallelFor(0, t.data.size(), [&](size_t i) {
    double v = t.data[i];
    char *dst = &out[i * size];
    if (bf16 && std::isfinite(v)) {
      // Exactly representable in bf16: its bits are the float's top half.
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      uint16_t top = static_cast<uint16_t>(bits >> 16);
      std::memcpy(dst, &top, 2);
    } else if (t.elementType.isF32()) {
      float f = static_cast<float>(v);
      std::memcpy(dst, &f, 4);
    } else if (auto *sem = semanticsOf(t.elementType)) {
      llvm::APFloat f(v);
      bool lost;
      f.convert(*sem, llvm::APFloat::rmNearestTiesToEven, &lost);
      uint64_t bits = f.bitcastToAPInt().getZExtValue();
      std::memcpy(dst, &bits, size);
    } else {
      int64_t iv = static_cast<int64_t>(v);
      std::memcpy(dst, &iv, size);
    }
  });
  return out;
}

ref::HostTensor unpack(const std::string &bytes, Type elementType,
                       std::vector<int64_t> shape) {
  ref::HostTensor t;
  t.elementType = elementType;
  t.shape = std::move(shape);
  int64_t n = t.numElements();
  int64_t size = llmc::rt::DTypeSize(*dtypeOf(elementType));
  t.data.resize(n);
  const bool bf16 = elementType.isBF16();
  llvm::parallelFor(0, n, [&](int64_t i) {
    const char *src = &bytes[i * size];
    if (bf16) {
      uint16_t top;
      std::memcpy(&top, src, 2);
      uint32_t bits = uint32_t(top) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      t.data[i] = f;
    } else if (elementType.isF32()) {
      float f;
      std::memcpy(&f, src, 4);
      t.data[i] = f;
    } else if (auto *sem = semanticsOf(elementType)) {
      uint64_t bits = 0;
      std::memcpy(&bits, src, size);
      llvm::APFloat f(*sem, llvm::APInt(size * 8, bits));
      t.data[i] = f.convertToDouble();
    } else if (elementType.isInteger(1)) {
      t.data[i] = *src != 0;
    } else {
      int64_t v = 0;
      std::memcpy(&v, src, size);
      int shift = 64 - size * 8;
      t.data[i] = static_cast<double>((v << shift) >> shift);
    }
  });
  return t;
}

std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

/// Why `v` is no value of the integer type `t` ("" when it is one): not
/// integral, outside the signed range of t's width (i1: 0 or 1), or, for
/// i64, beyond 2^53, where the doubles llmc-run holds host values in stop
/// being exact.
std::string integerRangeError(Type t, double v) {
  auto it = dyn_cast<IntegerType>(t);
  if (!it)
    return "";
  unsigned w = it.getWidth();
  double lo = w == 1 ? 0 : -std::ldexp(1.0, std::min(w, 54u) - 1);
  double hi = w == 1 ? 1 : std::ldexp(1.0, std::min(w, 54u) - 1) - (w <= 53);
  if (std::isfinite(v) && v == std::trunc(v) && v >= lo && v <= hi)
    return "";
  std::string found;
  llvm::raw_string_ostream(found) << llvm::format("%.17g", v);
  return "takes integers in [" + std::to_string(static_cast<int64_t>(lo)) +
         ", " + std::to_string(static_cast<int64_t>(hi)) + "], found " + found;
}

/// Argument `idx` of type `t` from `--input argI=path` (see its --help):
/// FILE.f32 / FILE.i64 values converted to the argument's type, or the
/// argument's own storage (FILE.bin, FILE.<dtype>). The file must have
/// exactly the argument's element count; integer arguments take integral
/// values in range. Sets `error` and returns nullopt otherwise.
std::optional<ref::HostTensor> readInput(const std::string &path, unsigned idx,
                                         RankedTensorType t, std::string &error) {
  const std::string flag = "--input arg" + std::to_string(idx) + "=" + path;
  const std::string argName = "argument " + std::to_string(idx) + " (" +
                              typeStr(t) + ")";
  Type et = t.getElementType();
  auto own = dtypeOf(et);
  const std::string ownName = own.ok() ? llmc::rt::DTypeName(*own) : "";
  llvm::StringRef ext = llvm::sys::path::extension(path);
  ext.consume_front(".");
  enum { F32, I64, Raw } kind;
  int64_t width;
  if (ext == "f32") {
    kind = F32, width = 4;
  } else if (ext == "i64") {
    kind = I64, width = 8;
  } else if (ext == "bin" || (!ownName.empty() && ext == ownName)) {
    if (!own.ok()) {
      error = flag + ": " + argName +
              " has no raw storage format in llmc; use FILE.f32 or FILE.i64";
      return std::nullopt;
    }
    kind = Raw, width = llmc::rt::DTypeSize(*own);
  } else {
    error = flag + ": " +
            (ext.empty() ? std::string("no file extension")
                         : "unknown input file type '." + ext.str() + "'") +
            "; name it FILE.f32 (float32 values), FILE.i64 (int64 values)" +
            (ownName.empty() ? std::string()
                             : ", FILE.bin or FILE." + ownName + " (raw " +
                                   ownName + " storage of argument " +
                                   std::to_string(idx) + ")");
    return std::nullopt;
  }
  const int64_t n = t.getNumElements();
  llmc::rt::ReadOptions ro;
  ro.exact_bytes = n * width;
  auto bytes = llmc::rt::ReadFile(path, ro);
  if (!bytes.ok()) {
    error = flag + ": " + std::string(bytes.status().message());
    if (absl::IsOutOfRange(bytes.status()))
      error += " (" + argName + " holds " + std::to_string(n) + " values of " +
               std::to_string(width) + " bytes as " +
               (kind == F32   ? std::string("float32")
                : kind == I64 ? std::string("int64")
                              : "raw " + ownName) +
               ")";
    return std::nullopt;
  }
  std::vector<int64_t> shape(t.getShape().begin(), t.getShape().end());
  ref::HostTensor h;
  if (kind == Raw) {
    h = unpack(*bytes, et, shape);
  } else {
    h.elementType = et;
    h.shape = shape;
    h.data.resize(n);
  }
  const bool isInt = isa<IntegerType>(et);
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (kind == Raw) {
      if (et.isInteger(1) && static_cast<unsigned char>((*bytes)[i]) > 1) {
        error = flag + ": byte #" + std::to_string(i) + " is " +
                std::to_string(static_cast<unsigned char>((*bytes)[i])) + "; " +
                argName + " takes 0 or 1";
        return std::nullopt;
      }
      v = h.data[i];
    } else if (kind == I64) {
      int64_t x;
      std::memcpy(&x, bytes->data() + i * 8, 8);
      v = static_cast<double>(x);
      // Beyond 2^53 the double is not x: refuse it rather than round.
      if (isInt && (x > (int64_t(1) << 53) || x < -(int64_t(1) << 53))) {
        std::string range = integerRangeError(et, std::ldexp(1.0, 63));
        error = flag + ": value #" + std::to_string(i) + ": " + argName + " " +
                range.substr(0, range.find(", found")) + ", found " +
                std::to_string(x);
        return std::nullopt;
      }
    } else {
      float x;
      std::memcpy(&x, bytes->data() + i * 4, 4);
      v = x;
    }
    if (std::string why = integerRangeError(et, v); !why.empty()) {
      error = flag + ": value #" + std::to_string(i) + ": " + argName + " " + why;
      return std::nullopt;
    }
    h.data[i] = kind == Raw ? v : ref::RoundToType(v, et);
  }
  return h;
}

double dtypeTolerance(Type t) {
  if (t.isF32()) return 1e-5;
  if (t.isF16() || t.isBF16()) return 1e-2;
  if (isa<Float8E4M3FNType, Float8E5M2Type>(t)) return 1e-1;
  return 0.0; // integers: exact
}

/// Tolerance for a result: that of the least precise float type the
/// computation stores anything in (f32 logits computed from bf16 activations
/// carry bf16 error), never tighter than the result's own type.
double defaultTolerance(func::FuncOp fn, Type resultType) {
  double tol = dtypeTolerance(resultType);
  auto visit = [&](Type t) {
    if (auto rt = dyn_cast<RankedTensorType>(t))
      if (isa<FloatType>(rt.getElementType()))
        tol = std::max(tol, dtypeTolerance(rt.getElementType()));
  };
  for (Type t : fn.getArgumentTypes())
    visit(t);
  fn.walk([&](Operation *op) {
    for (Type t : op->getResultTypes())
      visit(t);
  });
  return tol;
}

/// Relative L2 error a precision policy adds on top of the graph's own
/// types, the bounds PassNumericsTest checks the policies against: bf16/fp16
/// GEMM and attention operands carry 8/11 significant bits (2e-2); fp8 is 2u
/// with u = 2^-4 the unit roundoff of e4m3 relative to each tensor's scale
/// (0.125; see test/unit/compiler/PassNumericsTest.cpp for the derivation).
double precisionTolerance(const std::string &policy) {
  if (policy == "bf16" || policy == "fp16") return 2e-2;
  if (policy == "fp8") return 0.125;
  return 0.0;
}


/// Rewrites every f16/bf16 type in `fn` to f32 (args, results, constants):
/// the "unfused float32 instance" used as the GPU reference for big shapes.
LogicalResult upcastToF32(func::FuncOp fn) {
  MLIRContext *ctx = fn.getContext();
  auto f32 = Float32Type::get(ctx);
  auto convert = [&](Type t) -> Type {
    auto rt = dyn_cast<RankedTensorType>(t);
    if (rt && (rt.getElementType().isF16() || rt.getElementType().isBF16()))
      return RankedTensorType::get(rt.getShape(), f32);
    return t;
  };
  for (BlockArgument a : fn.getArguments())
    a.setType(convert(a.getType()));
  WalkResult r = fn.walk([&](Operation *op) {
    for (Value v : op->getResults())
      v.setType(convert(v.getType()));
    if (auto c = dyn_cast<llmc::llm::ConstantOp>(op)) {
      auto attr = dyn_cast<DenseElementsAttr>(c.getValue());
      auto t = cast<RankedTensorType>(c.getType());
      if (t.getElementType().isF32() && attr &&
          !attr.getElementType().isF32()) {
        SmallVector<float> vals;
        for (APFloat v : attr.getValues<APFloat>())
          vals.push_back(static_cast<float>(v.convertToDouble()));
        c.setValueAttr(DenseElementsAttr::get(t, llvm::ArrayRef<float>(vals)));
      }
    }
    return WalkResult::advance();
  });
  if (r.wasInterrupted())
    return failure();
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  fn.setFunctionType(FunctionType::get(ctx, fn.getBody().front().getArgumentTypes(),
                                       ret.getOperandTypes()));
  return success();
}

/// Bytes a collective moves per rank by the nccl-tests convention ("bus
/// bandwidth", NCCL's doc/PERFORMANCE.md): all_reduce 2(n-1)/n of the
/// buffer, all_gather and reduce_scatter (n-1)/n of the full buffer.
double collectiveBusBytes(const llmc::rt::CollectiveSpec &c, int n) {
  double elem = llmc::rt::DTypeSize(c.dtype);
  double factor = n > 1 ? double(n - 1) / n : 0.0;
  switch (c.op) {
  case llmc::rt::CollectiveSpec::AllReduce:
    return 2 * factor * c.count * elem;
  case llmc::rt::CollectiveSpec::AllGather:
  case llmc::rt::CollectiveSpec::ReduceScatter:
    // count is per rank; the full buffer is n * count.
    return factor * n * c.count * elem;
  }
  return 0;
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

/// The program this rank runs, in place, from the function specialized as
/// written: its llmc-shard slice (llmc::tools::shardForRank, which leaves a
/// graph with collectives as written), then the pipeline of `options`
/// without shape specialization (weight-only quantization, canonicalize and
/// raise, the precision policy). Reports the error and returns failure.
LogicalResult toRankProgram(func::FuncOp fn, int tp, int rank,
                            llmc::PipelineOptions options) {
  if (failed(llmc::tools::shardForRank(fn, tp, rank)))
    return failure();
  // Canonicalize and raise (decomposed RMSNorm => llm.rms_norm) the function
  // that runs only: the reference results came from the graph as written,
  // so --check also verifies the raise.
  options.specialize_shapes = false;
  options.tp = 1;
  if (auto st = llmc::RunPipeline(fn, options, llmc::tools::applyPassManagerFlags);
      !st.ok()) {
    fail(std::string(st.message()));
    return failure();
  }
  return success();
}

struct GpuRun {
  std::vector<ref::HostTensor> outputs;
  double median_ms = 0;
  std::vector<float> per_launch_ms;
};

absl::StatusOr<GpuRun> runOnGpu(func::FuncOp fn,
                                const std::vector<ref::HostTensor> &inputs,
                                const Options &opts, bool bench,
                                llmc::LowerStats *stats) {
  namespace rt = llmc::rt;
  const llmc::tools::TpState &tp = llmc::tools::tpState();
  auto deviceOr = rt::Device::Open(tp.device);
  // Lower for the GPU present (fp8 GEMMs differ below sm_89); without one,
  // still lower first so that codegen errors show before the device error.
  auto pipelineOr = pipelineOptions(
      opts, deviceOr.ok() ? llmc::ComputeCapabilityOfArch((*deviceOr)->Arch()) : 0);
  if (!pipelineOr.ok())
    return pipelineOr.status();
  const llmc::LowerOptions lo = llmc::lowerOptions(*pipelineOr);
  auto exeOr = llmc::LowerToExecutable(fn, lo, stats);
  if (!exeOr.ok())
    return exeOr.status();
  auto exe = std::make_shared<rt::Executable>(std::move(*exeOr));
  if (!deviceOr.ok())
    return deviceOr.status();
  auto device = *deviceOr;
  rt::SessionOptions so;
  so.use_cuda_graphs = !opts.noGraphs;
  if (!exe->collectives.empty())
    so.communicator = tp.comm;
  // With a communicator, waits poll NCCL's error state and time out instead
  // of hanging when another rank failed.
  auto waitFor = [&](CUstream s, const char *what) -> absl::Status {
    return so.communicator ? so.communicator->Wait(s, what)
                           : device->SynchronizeStream(s);
  };
  auto t0 = std::chrono::steady_clock::now();
  auto sessionOr = rt::Session::Load(device, exe, so);
  if (!sessionOr.ok())
    return sessionOr.status();
  auto &session = *sessionOr;
  double loadMs = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
  llvm::outs() << "loaded " << exe->kernels.size() << " kernels, "
               << exe->gemms.size() << " GEMMs in " << llvm::format("%.1f", loadMs)
               << " ms (NVRTC + module load + cuBLASLt plans)\n";
  // Which attention launches run on cuDNN, and why others run llmc's kernel.
  if (!session->attention_report().empty()) {
    bool warn = lo.attention_backend == llmc::AttentionBackend::kCudnn;
    for (llvm::StringRef line : llvm::split(session->attention_report(), '\n')) {
      if (warn && line.starts_with("llmc kernel"))
        llvm::errs() << "warning: --attention=cudnn: " << line << "\n";
      else
        llvm::outs() << "attention: " << line << "\n";
    }
  }

  std::vector<rt::DeviceTensor> din, dout;
  std::vector<uint64_t> allocations;
  auto cleanup = [&] {
    for (uint64_t p : allocations)
      (void)device->Free(p);
  };
  for (auto [i, t] : llvm::enumerate(inputs)) {
    std::string bytes = pack(t);
    auto p = device->Alloc(std::max<size_t>(bytes.size(), 1));
    if (!p.ok()) {
      cleanup();
      return p.status();
    }
    allocations.push_back(*p);
    if (auto st = device->CopyToDevice(*p, bytes.data(), bytes.size()); !st.ok()) {
      cleanup();
      return st;
    }
    din.push_back({*p, exe->inputs[i].dtype, exe->inputs[i].shape});
  }
  for (auto &sig : exe->outputs) {
    if (sig.alias_input >= 0) {
      // A donated input updated in place: read the result from its buffer.
      dout.push_back({din[sig.alias_input].dptr, sig.dtype, sig.shape});
      continue;
    }
    auto p = device->Alloc(std::max<int64_t>(sig.Bytes(), 1));
    if (!p.ok()) {
      cleanup();
      return p.status();
    }
    allocations.push_back(*p);
    // Poison outputs so an unwritten element shows up as NaN / garbage.
    (void)device->Memset(*p, 0xFF, sig.Bytes());
    dout.push_back({*p, sig.dtype, sig.shape});
  }
  auto streamOr = device->CreateStream();
  if (!streamOr.ok()) {
    cleanup();
    return streamOr.status();
  }
  CUstream stream = *streamOr;
  GpuRun result;
  absl::Status st = session->Run(din, dout, stream);
  if (st.ok())
    st = waitFor(stream, "the first run");
  if (st.ok() && bench) {
    auto timed = session->RunTimed(din, dout, stream);
    if (!timed.ok())
      st = timed.status();
    else
      result.per_launch_ms = *timed;
    if (st.ok() && !opts.profile.empty()) {
      auto trace = llmc::rt::ChromeTraceJson(*exe, result.per_launch_ms);
      st = trace.ok() ? llmc::rt::AtomicWriteFile(opts.profile, *trace)
                      : trace.status();
      if (st.ok())
        llvm::outs() << "wrote the launch profile to " << opts.profile << "\n";
    }
    std::vector<double> samples;
    for (int w = 0; st.ok() && w < 5; ++w)
      st = session->Run(din, dout, stream);
    if (st.ok())
      st = waitFor(stream, "the warm-up runs");
    const rt::CudaDriver &drv = device->driver();
    CUevent start = nullptr, stop = nullptr;
    if (st.ok())
      st = LLMC_VENDOR_CALL(drv, cuEventCreate, &start, 0);
    if (st.ok())
      st = LLMC_VENDOR_CALL(drv, cuEventCreate, &stop, 0);
    for (int it = 0; st.ok() && it < opts.iters; ++it) {
      st = LLMC_VENDOR_CALL(drv, cuEventRecord, start, stream);
      if (st.ok())
        st = session->Run(din, dout, stream);
      if (st.ok())
        st = LLMC_VENDOR_CALL(drv, cuEventRecord, stop, stream);
      if (st.ok())
        st = so.communicator ? waitFor(stream, "a timed run")
                             : LLMC_VENDOR_CALL(drv, cuEventSynchronize, stop);
      float ms = 0;
      if (st.ok())
        st = LLMC_VENDOR_CALL(drv, cuEventElapsedTime, &ms, start, stop);
      samples.push_back(ms);
    }
    if (start)
      (void)drv.cuEventDestroy(start);
    if (stop)
      (void)drv.cuEventDestroy(stop);
    if (!samples.empty()) {
      std::sort(samples.begin(), samples.end());
      result.median_ms = samples[samples.size() / 2];
    }
  }
  if (st.ok()) {
    for (auto [i, sig] : llvm::enumerate(exe->outputs)) {
      std::string bytes(sig.Bytes(), '\0');
      st = device->CopyToHost(bytes.data(), dout[i].dptr, bytes.size());
      if (!st.ok())
        break;
      auto type = cast<RankedTensorType>(fn.getFunctionType().getResult(i));
      result.outputs.push_back(unpack(bytes, type.getElementType(), sig.shape));
    }
  }
  (void)device->DestroyStream(stream);
  cleanup();
  if (!st.ok())
    return st;
  if (bench) {
    if (exe->num_prepare_launches > 0)
      llvm::outs() << "parameter preparation: " << exe->num_prepare_launches
                   << " launches (not timed per call: they run once per "
                      "parameter set, before the first call)\n";
    llvm::outs() << "per-launch times (one eager run, CUDA events):\n";
    for (auto [i, l] : llvm::enumerate(exe->launches)) {
      if (i >= result.per_launch_ms.size())
        break;
      if (static_cast<int>(i) < exe->num_prepare_launches)
        continue;
      double ms = result.per_launch_ms[i];
      llvm::outs() << llvm::format("  %3d %-22s %9.4f ms", int(i), l.label.c_str(), ms);
      if (l.kind == rt::Launch::Gemm) {
        const rt::GemmSpec &g = exe->gemms[l.gemm];
        double flops = 2.0 * g.m * g.n * g.k * g.batch;
        llvm::outs() << llvm::format("  %7.1f TFLOP/s  [%lldx%lldx%lld]",
                                     flops / (ms * 1e-3) / 1e12, (long long)g.m,
                                     (long long)g.n, (long long)g.k);
      } else if (l.kind == rt::Launch::Kernel) {
        // Bytes: every distinct buffer the kernel touches, read or written once.
        std::set<int> seen;
        double bytes = 0;
        for (auto &a : l.args)
          if (a.kind == rt::Arg::BufferPtr && a.buffer >= 0 && seen.insert(a.buffer).second)
            bytes += exe->buffers[a.buffer].bytes;
        llvm::outs() << llvm::format("  %7.2f TB/s (%.1f MB)", bytes / (ms * 1e-3) / 1e12,
                                     bytes / 1e6);
      } else if (l.kind == rt::Launch::Collective) {
        llvm::outs() << llvm::format("  %7.1f GB/s bus bandwidth",
                                     collectiveBusBytes(exe->collectives[l.collective],
                                                        tp.tp) /
                                         (ms * 1e-3) / 1e9);
      }
      llvm::outs() << "\n";
    }
    std::string who = tp.tp > 1 ? "rank " + std::to_string(tp.rank) + " of " +
                                      std::to_string(tp.tp) + ", "
                                : std::string();
    llvm::outs() << llvm::format("end to end: median %.4f ms over %d runs (%s%s)\n",
                                 result.median_ms, int(opts.iters), who.c_str(),
                                 opts.noGraphs ? "eager launches" : "CUDA graph replay");
    // A graph of collectives only (a collective benchmark): the bus
    // bandwidth at the end-to-end median, nccl-tests' busbw.
    bool onlyCollectives = !exe->collectives.empty();
    double busBytes = 0;
    for (const rt::Launch &l : exe->launches) {
      if (l.kind == rt::Launch::Collective)
        busBytes += collectiveBusBytes(exe->collectives[l.collective], tp.tp);
      else
        onlyCollectives = false;
    }
    if (onlyCollectives && result.median_ms > 0)
      llvm::outs() << llvm::format(
          "collective bus bandwidth: %.1f GB/s (%.1f MB moved per rank "
          "by the nccl-tests convention, median of %d runs)\n",
          busBytes / (result.median_ms * 1e-3) / 1e9, busBytes / 1e6,
          int(opts.iters));
  }
  return result;
}

} // namespace

int llmc::runMain(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  Options opts;
  // Pass names first: --mlir-print-ir-after=<pass> takes them.
  llmc::registerAllPasses();
  llmc::tools::registerPassManagerFlags();
  cl::HideUnrelatedOptions({&opts.cat, &llmc::tools::passManagerCategory()});
  cl::ParseCommandLineOptions(argc, argv, "llmc-run: execute an llm function\n");
  if (std::string e = llmc::tools::repeatedOptionError(opts.cat, argc, argv);
      !e.empty())
    return fail(e);
  if (std::string e = checkFlags(opts); !e.empty())
    return fail(e);

  // --emit=executable-dump builds one rank's program in this process: no
  // launcher, rendezvous or NCCL.
  const bool dump = opts.emit == "executable-dump";
  if (dump) {
    if (opts.tp < 1)
      return fail("--tp=" + std::to_string(opts.tp) + ": expected a degree >= 1");
    if (opts.rank.getNumOccurrences() && (opts.rank < 0 || opts.rank >= opts.tp))
      return fail("--rank=" + std::to_string(opts.rank) +
                  ": expected 0 <= rank < --tp (" + std::to_string(opts.tp) + ")");
    llmc::tools::TpState &s = llmc::tools::tpState();
    s.tp = opts.tp;
    s.rank = std::max(0, opts.rank.getValue());
    s.role = opts.tp > 1 ? llmc::tools::TpState::Rank
                         : llmc::tools::TpState::Single;
  } else {
    // Tensor parallelism: a launcher starts the ranks and returns.
    if (opts.rank.getNumOccurrences() && opts.rank < 0) {
      llvm::errs() << "llmc-run: error: --rank=" << opts.rank
                   << ": expected 0 <= rank < --tp\n";
      return 1;
    }
    llmc::tools::TpFlags tpFlags;
    tpFlags.tp = opts.tp;
    tpFlags.rank = opts.rank;
    tpFlags.device = opts.gpu;
    tpFlags.rendezvous = opts.rendezvous;
    tpFlags.run_id = opts.runId;
    tpFlags.timeout_s = opts.ncclTimeout;
    if (auto st = llmc::tools::ResolveTp(tpFlags); !st.ok())
      return fail(std::string(st.message()));
    const llmc::tools::TpState &tp = llmc::tools::tpState();
    if (tp.tp > 1 && opts.backend != "cuda")
      return fail("--tp needs the cuda backend (the reference executor "
                  "checks --tp runs through --check)");
    if (tp.role != llmc::tools::TpState::Rank)
      for (const cl::Option *o :
           std::initializer_list<const cl::Option *>{&opts.rendezvous, &opts.runId})
        if (o->getNumOccurrences())
          return fail("--" + o->ArgStr.str() + " is for a rank started by hand "
                      "(--tp=N --rank=R); " +
                      (tp.role == llmc::tools::TpState::Launcher
                           ? "llmc-run --tp=N without --rank starts the ranks "
                             "with its own"
                           : "without --tp there is no rendezvous"));
    if (tp.role == llmc::tools::TpState::Launcher)
      return llmc::tools::LaunchRanks(argc, argv);
  }
  llmc::tools::TpState &tp = llmc::tools::tpState();

  std::unique_ptr<MLIRContext> ctxOwner = llmc::tools::makeContext();
  MLIRContext &ctx = *ctxOwner;
  llvm::SourceMgr sm;
  SourceMgrDiagnosticHandler diag(sm, &ctx);
  OwningOpRef<ModuleOp> module = llmc::parseModuleFile(opts.input, sm, &ctx);
  if (!module)
    return fail("could not parse '" + opts.input + "'");
  std::string error;
  func::FuncOp fn = llmc::tools::findFunction(*module, opts.fnName, error);
  if (!fn)
    return fail(error);
  auto parsedBindings = llmc::tools::parseShapeBindings(
      std::vector<std::string>(opts.shapes.begin(), opts.shapes.end()), error);
  if (!parsedBindings)
    return fail(error);
  std::map<std::string, int64_t> bindings = std::move(*parsedBindings);
  // --value and --input name each argument once, and not both.
  std::map<unsigned, int64_t> scalarValues;
  std::map<unsigned, std::string> valueFlags, inputFlags;
  for (const std::string &s : opts.values) {
    auto [name, value] = llvm::StringRef(s).split('=');
    unsigned idx;
    int64_t v;
    if (!name.consume_front("arg") || name.getAsInteger(10, idx) ||
        value.getAsInteger(10, v))
      return fail("malformed --value '" + s + "', expected argI=N");
    if (auto [it, fresh] = valueFlags.emplace(idx, s); !fresh)
      return fail("--value " + s + ": argument " + std::to_string(idx) +
                  " already has --value " + it->second + " (give it once)");
    scalarValues[idx] = v;
  }
  std::map<unsigned, std::string> inputPaths;
  for (const std::string &s : opts.inputFiles) {
    auto [name, path] = llvm::StringRef(s).split('=');
    unsigned idx;
    if (!name.consume_front("arg") || name.getAsInteger(10, idx) || path.empty())
      return fail("malformed --input '" + s + "', expected argI=FILE");
    if (auto [it, fresh] = inputFlags.emplace(idx, s); !fresh)
      return fail("--input " + s + ": argument " + std::to_string(idx) +
                  " already has --input " + it->second + " (give it once)");
    if (valueFlags.count(idx))
      return fail("--input " + s + " and --value " + valueFlags[idx] +
                  " both give argument " + std::to_string(idx));
    inputPaths[idx] = path.str();
  }
  for (auto &[idx, v] : scalarValues) {
    auto t = idx < fn.getNumArguments()
                 ? dyn_cast<RankedTensorType>(fn.getArgument(idx).getType())
                 : RankedTensorType();
    if (!t || t.getRank() != 0 || !isa<IntegerType>(t.getElementType()))
      return fail("--value arg" + std::to_string(idx) + "=" + std::to_string(v) +
                  ": argument " + std::to_string(idx) +
                  (t ? " is not a rank-0 integer tensor" : " does not exist") +
                  " (@" + fn.getSymName().str() + " has " +
                  std::to_string(fn.getNumArguments()) + " arguments)");
    if (std::string why = integerRangeError(t.getElementType(), double(v));
        !why.empty())
      return fail("--value arg" + std::to_string(idx) + "=" + std::to_string(v) +
                  ": argument " + std::to_string(idx) + " (" + typeStr(t) +
                  ") " + why);
  }
  if (failed(llmc::llm::specializeShapes(fn, bindings)))
    return 1;
  // Weight-only quantization: the quantized graph is what --check compares
  // against (`refFn`, a quantized clone); the function that runs is
  // quantized after llmc-shard, so each rank quantizes only its own slice
  // of every weight (groups of 128 along K never straddle a shard boundary
  // that is a multiple of 128, so the values are the same).
  OwningOpRef<func::FuncOp> quantized;
  const int weightBits = opts.weightOnly == "int4" ? 4 : opts.weightOnly == "int8" ? 8 : 0;
  if (opts.weightOnly != "none") {
    if (opts.pipeline.precision == "fp8")
      return fail("--weight-only=" + opts.weightOnly +
                  " cannot be combined with --precision=fp8 (llmc-precision "
                  "quantizes weights either to fp8 or to int8/int4)");
    quantized = cast<func::FuncOp>(fn->clone());
    if (failed(llmc::llm::quantizeLinearWeights(*quantized, weightBits)))
      return 1;
    if (quantized->getOps<llmc::llm::QuantizeWeightOp>().empty())
      llvm::errs() << "llmc-run: warning: --weight-only=" << opts.weightOnly
                   << " quantized no weight of @" << fn.getSymName()
                   << " (it takes rank-2 parameter weights of matmuls whose K "
                      "is a multiple of 128)\n";
  }
  func::FuncOp refFn = quantized ? *quantized : fn;
  if (failed(llmc::tools::checkGroupSizes(fn, tp.tp)))
    return 1;
  if (dump) {
    // The cuda backend's flow to its executable (as below, without inputs,
    // reference or GPU), for the default target.
    auto pipeline = pipelineOptions(opts, 0);
    if (!pipeline.ok())
      return fail(std::string(pipeline.status().message()));
    if (failed(toRankProgram(fn, tp.tp, tp.rank, *pipeline)))
      return 1;
    auto exe = llmc::LowerToExecutable(fn, llmc::lowerOptions(*pipeline));
    if (!exe.ok())
      return fail(std::string(exe.status().message()));
    if (auto st = exe->Validate(); !st.ok())
      return fail(std::string(st.message()));
    llvm::outs() << llmc::rt::DescribeExecutable(*exe);
    llvm::outs().flush();
    if (llvm::outs().has_error()) {
      llvm::outs().clear_error();
      return fail("writing the executable dump to stdout failed");
    }
    return 0;
  }

  // Inputs: floats ~ N(0, 1/sqrt(last dim)) for matrices, N(0, 1) for vectors;
  // integer tensors uniform in [0, 8) (valid token ids / indices); rank-0
  // integers from --value (default 0).
  std::mt19937_64 rng(opts.seed);
  std::vector<ref::HostTensor> inputs;
  for (auto &[idx, path] : inputPaths)
    if (idx >= fn.getNumArguments())
      return fail("--input arg" + std::to_string(idx) + "=" + path + ": @" +
                  fn.getSymName().str() + " has " +
                  std::to_string(fn.getNumArguments()) + " arguments");
  // The reference executor's budget; with the reference to run, the inputs
  // (held here as float64, then copied by the executor) must fit it too.
  if (!(opts.refMaxMemory > 0.0))
    return fail("--ref-max-memory must be > 0 (GiB), found " +
                std::to_string(opts.refMaxMemory));
  if (!(opts.refMaxGmacs > 0.0))
    return fail("--ref-max-gmacs must be > 0 (1e9 multiply-adds), found " +
                std::to_string(opts.refMaxGmacs));
  ref::EvaluateOptions refOptions;
  refOptions.max_multiply_adds = opts.refMaxGmacs * 1e9;
  refOptions.max_host_bytes =
      opts.refMaxMemory >= 0x1p33 ? std::numeric_limits<int64_t>::max()
                                  : static_cast<int64_t>(opts.refMaxMemory * 0x1p30);
  if (!opts.refMaxMemory.getNumOccurrences()) {
    // Without --ref-max-memory, stay below what this process can allocate
    // (llmc-run holds the inputs once more), so that a graph too big is the
    // budget's error, not an allocation failure (an abort).
    int64_t half = std::numeric_limits<int64_t>::max();
    if (struct rlimit rl; getrlimit(RLIMIT_AS, &rl) == 0 &&
                          rl.rlim_cur != RLIM_INFINITY)
      half = std::min<int64_t>(half, static_cast<int64_t>(rl.rlim_cur / 2));
    if (long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
        pages > 0 && size > 0)
      half = std::min<int64_t>(half, int64_t(pages) * size / 2);
    refOptions.max_host_bytes = std::min(refOptions.max_host_bytes, half);
  }
  const bool refRuns = opts.backend == "ref" || opts.check.getValue() == "ref";
  if (refRuns) {
    // The executor checks its work budget op by op; with static shapes the
    // whole graph is checked here, before seconds of input generation.
    double work = 0;
    Operation *over = nullptr;
    fn.walk([&](Operation *op) {
      double w = ref::MultiplyAdds(op);
      if (over || w <= 0)
        return;
      work += w;
      if (work > refOptions.max_multiply_adds)
        over = op;
    });
    if (over) {
      std::string where;
      llvm::raw_string_ostream os(where);
      os << "'" << over->getName() << "' at " << over->getLoc();
      return fail(where + ": the reference executor would need " +
                  llvm::formatv("{0:e2}", work).str() +
                  " multiply-adds in matmuls and attention up to this op, more "
                  "than its work budget of " +
                  llvm::formatv("{0:e2}", refOptions.max_multiply_adds).str() +
                  " (raise it with --ref-max-gmacs=G, in units of 1e9)");
    }
  }
  int64_t totalBytes = 0;
  for (BlockArgument arg : fn.getArguments()) {
    auto t = dyn_cast<RankedTensorType>(arg.getType());
    if (!t)
      return fail("argument " + std::to_string(arg.getArgNumber()) + " of @" +
                  fn.getSymName().str() +
                  " is not a ranked tensor; llmc-run supports ranked tensor "
                  "arguments (use tensor<i32> for a scalar)");
    // Host values are held as doubles: refuse what cannot fit in memory.
    totalBytes += t.getNumElements() * 8;
    if (t.getNumElements() > (int64_t(1) << 34) || totalBytes > (int64_t(1) << 37))
      return fail("argument " + std::to_string(arg.getArgNumber()) + " (" +
                  typeStr(t) + ") is too large for llmc-run's host-side inputs "
                  "(at most 2^34 elements, 128 GiB in all)");
    if (refRuns && totalBytes > refOptions.max_host_bytes)
      return fail("argument " + std::to_string(arg.getArgNumber()) + " (" +
                  typeStr(t) + ") brings the inputs to " +
                  std::to_string(totalBytes) +
                  " bytes of float64 host values, more than the reference "
                  "executor's budget of " +
                  std::to_string(refOptions.max_host_bytes) +
                  " bytes (raise it with --ref-max-memory=GIB)");
    Type et = t.getElementType();
    std::vector<int64_t> shape(t.getShape().begin(), t.getShape().end());
    if (auto it = inputPaths.find(arg.getArgNumber()); it != inputPaths.end()) {
      std::string error;
      std::optional<ref::HostTensor> h =
          readInput(it->second, arg.getArgNumber(), t, error);
      if (!h)
        return fail(error);
      inputs.push_back(std::move(*h));
      continue;
    }
    if (isa<IntegerType>(et)) {
      ref::HostTensor h;
      h.elementType = et;
      h.shape = shape;
      h.data.resize(t.getNumElements());
      if (t.getRank() == 0) {
        h.data[0] = scalarValues.count(arg.getArgNumber())
                        ? scalarValues[arg.getArgNumber()]
                        : 0;
      } else {
        std::uniform_int_distribution<int> dist(0, et.isInteger(1) ? 1 : 7);
        for (double &v : h.data)
          v = dist(rng);
      }
      inputs.push_back(std::move(h));
      continue;
    }
    double stddev = t.getRank() >= 2 ? 1.0 / std::sqrt(double(t.getShape().back())) : 1.0;
    inputs.push_back(ref::RandomTensor(et, shape, rng, stddev));
  }

  // Writes results as raw float32 for --output-dir.
  auto writeOutputs = [&](const std::vector<ref::HostTensor> &outs) -> bool {
    if (opts.outputDir.empty())
      return true;
    for (auto [i, o] : llvm::enumerate(outs)) {
      std::string bytes(o.data.size() * 4, '\0');
      for (size_t k = 0; k < o.data.size(); ++k) {
        float f = static_cast<float>(o.data[k]);
        std::memcpy(&bytes[k * 4], &f, 4);
      }
      std::string path = opts.outputDir + "/result" + std::to_string(i) + ".f32";
      if (auto st = llmc::rt::AtomicWriteFile(path, bytes); !st.ok()) {
        fail(std::string(st.message()));
        return false;
      }
    }
    return true;
  };

  const std::string policy = opts.pipeline.precision;
  if (opts.backend == "ref") {
    if (auto st = llmc::ApplyPrecisionPolicy(refFn, policy); !st.ok())
      return fail(std::string(st.message()));
    auto t0 = std::chrono::steady_clock::now();
    auto outs = ref::Evaluate(refFn, inputs, refOptions);
    if (!outs.ok())
      return fail(std::string(outs.status().message()));
    if (!writeOutputs(*outs))
      return 1;
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    for (auto [i, o] : llvm::enumerate(*outs)) {
      double sum = 0;
      for (double v : o.data)
        sum += v;
      llvm::outs() << "result" << i << ": " << o.typeString()
                   << llvm::format(" checksum %.6e", sum) << "\n";
    }
    llvm::outs() << llvm::format("reference executor: %.1f ms\n", ms);
    return 0;
  }
  if (opts.backend != "cuda")
    return fail("unknown --backend '" + opts.backend + "' (expected cuda or ref)");
  if (tp.tp > 1 && llmc::tools::hasCollectives(fn) &&
      opts.check.getNumOccurrences())
    return fail("--check with --tp compares the shards of an unsharded graph "
                "with it; @" + fn.getSymName().str() +
                " already has collectives (it is one rank's program)");
  if (tp.role == llmc::tools::TpState::Rank) {
    // Set up first, so that a rank started wrongly (another --tp, a missing
    // peer) is reported before any long compile.
    if (auto st = llmc::tools::SetUpRank(); !st.ok())
      return fail(std::string(st.message()));
    llvm::outs() << "tensor parallel: rank " << tp.rank << " of " << tp.tp
                 << " on GPU " << tp.device
                 << ", NCCL communicator ready; running llmc-shard{tp="
                 << tp.tp << " rank=" << tp.rank << "}\n";
  }

  // Reference results first: the lowering does not modify `fn`, but the
  // gpu-f32 check rewrites a clone.
  std::string checkMode = opts.check.getNumOccurrences() ? opts.check.getValue() : "";
  if (opts.check.getNumOccurrences() && checkMode.empty()) {
    // Plain --check: the CPU reference executor (float64) when the graph is
    // small enough to evaluate in seconds, else the float32 GPU instance.
    double work = 0;
    fn.walk([&](Operation *op) { work += std::max(ref::MultiplyAdds(op), 0.0); });
    checkMode = work <= 2e9 ? "ref" : "gpu-f32";
    llvm::outs() << "--check: " << llvm::format("%.2g", work)
                 << " multiply-adds in matmul/attention: checking against "
                 << (checkMode == "ref" ? "the CPU reference executor"
                                        : "an unfused float32 run on the GPU")
                 << " (force with --check=ref or --check=gpu-f32)\n";
  }
  std::vector<ref::HostTensor> expected;
  std::string expectedFrom;
  if (checkMode == "ref") {
    auto outs = ref::Evaluate(refFn, inputs, refOptions);
    if (!outs.ok())
      return fail("reference executor: " + std::string(outs.status().message()));
    expected = std::move(*outs);
    expectedFrom = "CPU reference executor (float64 math)";
  } else if (checkMode == "gpu-f32") {
    OwningOpRef<func::FuncOp> clone(cast<func::FuncOp>(refFn->clone()));
    if (failed(upcastToF32(*clone)))
      return fail("could not build the float32 instance");
    std::vector<ref::HostTensor> inputs32 = inputs;
    for (auto &t : inputs32)
      if (t.elementType.isBF16() || t.elementType.isF16())
        t.elementType = Float32Type::get(&ctx);
    auto gpu32 = runOnGpu(*clone, inputs32, opts, false, nullptr);
    if (!gpu32.ok())
      return fail("float32 GPU reference: " + std::string(gpu32.status().message()));
    expected = std::move(gpu32->outputs);
    expectedFrom = "float32 instance on the GPU";
  } else if (!checkMode.empty()) {
    return fail("unknown --check mode '" + checkMode + "' (expected ref or gpu-f32)");
  }

  // Tolerances from the function as written, then the policy.
  std::vector<double> tolerances;
  for (Type t : fn.getFunctionType().getResults())
    tolerances.push_back(
        std::max(defaultTolerance(fn, cast<RankedTensorType>(t).getElementType()),
                 precisionTolerance(policy)));
  // This rank's shard (the reference above ran the function as written).
  {
    auto pipeline = pipelineOptions(opts, 0);
    if (!pipeline.ok())
      return fail(std::string(pipeline.status().message()));
    if (failed(toRankProgram(fn, tp.tp, tp.rank, *pipeline)))
      return 1;
  }

  llmc::LowerStats stats;
  auto run = runOnGpu(fn, inputs, opts, opts.bench, &stats);
  if (!run.ok())
    return fail(std::string(run.status().message()));
  llvm::outs() << "compiled: " << stats.num_ops << " llm ops -> "
               << stats.num_kernel_launches << " kernel launches ("
               << stats.num_distinct_kernels << " distinct kernels) + "
               << stats.num_gemms << " GEMMs; arena " << stats.arena_bytes
               << " bytes (intermediates " << stats.intermediate_bytes << ")"
               << "; parameter preparation " << stats.num_prepare_launches
               << " launches, persistent " << stats.persistent_bytes
               << " bytes\n";
  if (!writeOutputs(run->outputs))
    return 1;
  bool ok = true;
  for (auto [i, o] : llvm::enumerate(run->outputs)) {
    double sum = 0;
    for (double v : o.data)
      sum += v;
    llvm::outs() << "result" << i << ": " << o.typeString()
                 << llvm::format(" checksum %.6e", sum) << "\n";
    if (expected.empty())
      continue;
    const ref::HostTensor &e = expected[i];
    double err = ref::RelativeError(o, e);
    double tol = opts.tolerance >= 0 ? opts.tolerance.getValue() : tolerances[i];
    bool sameNonFinite = ref::SameNonFinitePositions(o, e);
    bool pass = sameNonFinite && err <= tol;
    ok &= pass;
    llvm::outs() << "  check vs " << expectedFrom << ": relative error "
                 << llvm::format("%.3e", err) << " (tolerance "
                 << llvm::format("%.1e", tol) << ", by the least precise float type "
                 << "in the computation"
                 << (policy == "fp32" ? "" : " and the " + policy + " policy")
                 << "; result " << typeStr(o.elementType) << ")" << (sameNonFinite ? "" : ", NaN/inf positions differ")
                 << (pass ? " PASS" : " FAIL") << "\n";
  }
  return ok ? 0 : 2;
}
