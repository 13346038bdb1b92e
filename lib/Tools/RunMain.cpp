//===- RunMain.cpp - llmc-run: execute an llm function ---------------------===//
//
//   llmc-run FILE.mlir [--fn=NAME] [--backend=cuda|ref] [--shape NAME=N]...
//            [--value argI=V]... [--precision=fp32|bf16|fp16|fp8] [--check]
//            [--bench] [--iters=N] [--no-cuda-graphs] [--seed=S]
//            [--tp=N [--rank=R --rendezvous=PATH [--run-id=ID]] [--gpu=D]]
//   llmc-run FILE.mlir --emit=executable-dump|exec [--tp=N --rank=R] [...]
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
// --attention-tile, --ew-unroll, --gemv-unroll and --no-hoist options) and prints
// its canonical text (rt::DescribeExecutable) instead of running it: no
// inputs, GPU, NVRTC or NCCL; it lowers for the default target (sm_90, as
// without a GPU); with --tp=N it prints rank --rank's program. test/golden
// pins it. --emit=exec prints the same program as execution-level IR (the
// `exec` dialect, after llmc-plan-arena), as llmc-compile --emit=exec does.
//
//===----------------------------------------------------------------------===//

#include "RunMain.h"

#include "llmc/InitAllDialects.h"
#include "llmc/InitAllPasses.h"
#include "llmc/Support/ParseSource.h"
#include "llmc/Tools.h"
#include "CommandLine.h"
#include "TensorParallel.h"
#include "ToolSupport.h"
#include "llmc/runtime/ExecutableDump.h"
#include "llmc/runtime/FileIO.h"

#include "LLM/Transforms/Passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llmc/Support/Version.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>

using namespace mlir;
using namespace llmc::tools::run;

int llmc::runMain(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  Options opts;
  // Pass names first: --mlir-print-ir-after=<pass> takes them.
  llmc::registerAllPasses();
  llmc::tools::registerPassManagerFlags();
  cl::HideUnrelatedOptions({&opts.cat, &llmc::tools::passManagerCategory()});
  cl::SetVersionPrinter(llmc::printVersion);
  cl::ParseCommandLineOptions(argc, argv, "llmc-run: execute an llm function\n");
  if (std::string e = llmc::tools::repeatedOptionError(opts.cat, argc, argv);
      !e.empty())
    return fail(e);
  if (std::string e = checkFlags(opts); !e.empty())
    return fail(e);

  // --emit=executable-dump builds one rank's program in this process: no
  // launcher, rendezvous or NCCL.
  const bool dump = opts.emit == "executable-dump" || opts.emit == "exec";
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
    if (opts.emit == "exec") {
      if (std::string error = llmc::tools::printExecIR(fn, llmc::lowerOptions(*pipeline));
          !error.empty())
        return fail(error);
      return 0;
    }
    auto exe = llmc::LowerToExecutable(fn, llmc::lowerOptions(*pipeline), nullptr,
                                       llmc::tools::applyPassManagerFlags);
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
    auto flags = opts.pipeline.options(/*knobs=*/false);
    if (!flags.ok())
      return fail(std::string(flags.status().message()));
    if (auto st = llmc::ApplyPrecisionPolicy(refFn, policy, flags->fp8_scaling);
        !st.ok())
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
