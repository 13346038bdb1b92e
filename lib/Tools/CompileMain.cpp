//===- CompileMain.cpp - llmc-compile: ahead-of-time compilation -----------===//
//
//   llmc-compile FILE.mlir [--fn=NAME] [--shape NAME=N]... [--arch=sm_90a]...
//                [--precision=fp32|bf16|fp16|fp8] [-o FILE.llmcx | -o -]
//                [--print-stats] [--emit-cuda] [--emit=executable-dump|mlir|exec]
//                [--from-exec]
//                [--attention=..] [--attention-tile=..] [--ew-unroll=N]
//                [--gemv-unroll=N]
//                [--mlir-print-ir-after-all, --mlir-timing, ...]
//
// Runs the one compilation pipeline (llmc/Pipelines/Pipeline.h: shape
// specialization, canonicalize/raise, the precision policy), lowers to an Executable
// and compiles every kernel with NVRTC for each --arch (no GPU needed), then
// writes the serialized Executable of the first arch. fp8 GEMMs lower to
// cuBLASLt fp8 GEMMs for sm_89 and later and to dequantize + bf16 GEMMs
// below (see LowerOptions::target_sm), so an arch on the other side of sm_89
// from the first is lowered separately. --emit=executable-dump prints the
// canonical text of the executable instead (rt::DescribeExecutable: what -o
// would write, less the cubins) and runs no NVRTC; test/golden pins it.
// --emit=mlir prints the function after the pass pipeline, before lowering
// (what `llmc-opt --llmc-pipeline` prints with the same options).
// --emit=exec prints the execution-level IR (the `exec` dialect) after arena
// planning: what is translated to the executable. --from-exec reads such IR
// instead of an `llm` function (the exec.executable named by --fn, default
// the first) and translates it, without running the pipeline.
//
//===----------------------------------------------------------------------===//

#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/Target/Executable/TranslateToExecutable.h"
#include "llmc/InitAllDialects.h"
#include "llmc/InitAllPasses.h"
#include "llmc/Pipelines/Pipeline.h"
#include "llmc/Support/ParseSource.h"
#include "llmc/Tools.h"
#include "CommandLine.h"
#include "PipelineFlags.h"
#include "ToolSupport.h"
#include "llmc/runtime/Executable.h"
#include "llmc/runtime/ExecutableDump.h"
#include "llmc/runtime/FileIO.h"
#include "llmc/runtime/KernelCompiler.h"

#include "LLM/Transforms/Passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llmc/Support/Version.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <map>

using namespace mlir;
namespace cl = llvm::cl;

namespace {
int fail(const llvm::Twine &msg) {
  llvm::errs() << "llmc-compile: error: " << msg << "\n";
  return 1;
}
} // namespace

int llmc::compileMain(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::OptionCategory cat("llmc-compile options");
  cl::opt<std::string> input(cl::Positional, cl::desc("<file.mlir>"), cl::Required,
                             cl::cat(cat));
  cl::opt<std::string> output(
      "o",
      cl::desc("output .llmcx file (written atomically; an existing target "
               "must be a regular file and its directory must exist), or - "
               "for stdout"),
      cl::value_desc("FILE"), cl::cat(cat));
  cl::opt<std::string> fnName("fn", cl::desc("function (default: the first)"),
                              cl::cat(cat));
  cl::list<std::string> shapes("shape", cl::desc("NAME=N binding of a dynamic dimension"),
                               cl::cat(cat));
  cl::list<std::string> arches("arch", cl::desc("sm_90a, sm_90, sm_80, compute_90 ..."),
                               cl::cat(cat));
  llmc::tools::PipelineFlags pipelineFlags(cat);
  cl::opt<bool> stats("print-stats", cl::desc("print ops, kernels, GEMMs, arena bytes, compile time"),
                      cl::cat(cat));
  cl::opt<bool> emitCuda("emit-cuda", cl::desc("print the CUDA C++ of every kernel"),
                         cl::cat(cat));
  cl::opt<bool> noRaise("no-raise",
                        cl::desc("keep decomposed normalizations as written "
                                 "(skip llmc-raise; canonicalize and CSE "
                                 "still run)"),
                        cl::cat(cat));
  cl::opt<bool> noCache("no-cache", cl::desc("do not use the on-disk kernel cache"),
                        cl::cat(cat));
  cl::opt<std::string> emit(
      "emit",
      cl::desc("what to produce: executable (the default: NVRTC-compiled, "
               "written by -o), executable-dump (its canonical text on "
               "stdout, without NVRTC or cubins; see test/golden), mlir "
               "(the function after the pass pipeline, before lowering) or "
               "exec (the execution-level IR after arena planning)"),
      cl::init("executable"), cl::cat(cat));
  cl::opt<bool> fromExec(
      "from-exec",
      cl::desc("the input is execution-level IR (exec.executable, as "
               "--emit=exec prints): translate it instead of compiling an "
               "llm function (--fn names the executable)"),
      cl::cat(cat));
  // Pass names first: --mlir-print-ir-after=<pass> takes them.
  llmc::registerAllPasses();
  llmc::tools::registerPassManagerFlags();
  cl::HideUnrelatedOptions({&cat, &llmc::tools::passManagerCategory()});
  cl::SetVersionPrinter(llmc::printVersion);
  cl::ParseCommandLineOptions(argc, argv, "llmc-compile: ahead-of-time compilation\n");
  if (std::string e = llmc::tools::repeatedOptionError(cat, argc, argv); !e.empty())
    return fail(e);
  // Every flag value is checked before the (possibly long) compile.
  std::vector<std::string> archList;
  for (const std::string &arch : arches) {
    if (!llmc::rt::IsValidArch(arch))
      return fail("--arch=" + arch + ": expected " + llmc::rt::kArchSpelling);
    if (std::string why = llmc::UnsupportedArchReason(arch); !why.empty())
      return fail("--arch=" + why);
    if (llvm::is_contained(archList, arch))
      return fail("--arch=" + arch + " is given twice; give each arch once");
    archList.push_back(arch);
  }
  // --emit=mlir generates no code: the tuning knobs are not read.
  absl::StatusOr<llmc::PipelineOptions> pipelineOr =
      pipelineFlags.options(/*knobs=*/emit != "mlir");
  if (!pipelineOr.ok())
    return fail(std::string(pipelineOr.status().message()));
  llmc::PipelineOptions pipeline = std::move(*pipelineOr);
  pipeline.raise = !noRaise;
  if (emit != "executable" && emit != "executable-dump" && emit != "mlir" &&
      emit != "exec")
    return fail("--emit=" + emit +
                ": expected executable, executable-dump, mlir or exec");
  const bool dump = emit == "executable-dump";
  if (emit == "mlir" || emit == "exec") {
    // The IR is the whole of stdout; nothing is compiled.
    for (const cl::Option *o : std::initializer_list<const cl::Option *>{
             &output, &emitCuda, &stats, &noCache})
      if (o->getNumOccurrences())
        return fail("--emit=" + emit + " prints " +
                    (emit == "mlir" ? "the function after the pass pipeline"
                                    : "the execution-level IR") +
                    " on stdout; it cannot be combined with " +
                    std::string(o == &output ? "-o" : "--" + o->ArgStr.str()));
    if (emit == "exec" && archList.size() > 1)
      return fail("--emit=exec prints one executable; give at most one --arch "
                  "(found " + std::to_string(archList.size()) + ")");
  }
  if (fromExec && (emit == "mlir" || emit == "exec" || shapes.getNumOccurrences()))
    return fail(std::string("--from-exec translates execution-level IR, which is "
                            "already compiled; it cannot be combined with ") +
                (shapes.getNumOccurrences() ? "--shape" : "--emit=" + emit));
  if (dump) {
    // The dump is the whole of stdout and compiles no kernel.
    for (const cl::Option *o : std::initializer_list<const cl::Option *>{
             &output, &emitCuda, &stats, &noCache})
      if (o->getNumOccurrences())
        return fail("--emit=executable-dump prints the executable's text on "
                    "stdout and runs no NVRTC; it cannot be combined with " +
                    std::string(o == &output ? "-o" : "--" + o->ArgStr.str()));
    if (archList.size() > 1)
      return fail("--emit=executable-dump prints one executable; give at "
                  "most one --arch (found " + std::to_string(archList.size()) +
                  ")");
  }
  const bool toStdout = output == "-";
  if (toStdout && (emitCuda || stats))
    return fail(std::string("-o - writes the executable to stdout, where ") +
                (emitCuda ? "--emit-cuda" : "--print-stats") +
                " prints too; write the executable to a file");
  if (output.getNumOccurrences() && output.empty())
    return fail("-o needs a file name (or - for stdout)");
  if (!output.empty() && !toStdout)
    if (auto s = llmc::rt::CheckWritableFile(output); !s.ok())
      return fail("-o: " + std::string(s.message()));

  std::unique_ptr<MLIRContext> ctxOwner = llmc::tools::makeContext();
  MLIRContext &ctx = *ctxOwner;
  llvm::SourceMgr sm;
  SourceMgrDiagnosticHandler diag(sm, &ctx);
  auto t0 = std::chrono::steady_clock::now();
  OwningOpRef<ModuleOp> module = llmc::parseModuleFile(input, sm, &ctx);
  if (!module)
    return fail("could not parse '" + input + "'");
  std::string error;
  if (archList.empty())
    archList.push_back("sm_90a");
  auto optionsFor = [&](const std::string &arch) {
    llmc::PipelineOptions forArch = pipeline;
    if (int cc = llmc::ComputeCapabilityOfArch(arch); cc > 0)
      forArch.target_sm = cc;
    return llmc::lowerOptions(forArch);
  };
  func::FuncOp fn;
  absl::StatusOr<llmc::rt::Executable> exe = absl::UnknownError("not lowered");
  llmc::LowerStats st;
  if (fromExec) {
    llmc::exec::ExecutableOp found;
    for (auto e : module->getOps<llmc::exec::ExecutableOp>())
      if (fnName.empty() || e.getSymName() == fnName) {
        found = e;
        break;
      }
    if (!found)
      return fail("'" + input + "' has no exec.executable" +
                  (fnName.empty() ? std::string() : " @" + fnName));
    exe = llmc::translateToExecutable(found);
    if (!exe.ok())
      return fail(std::string(exe.status().message()));
  } else {
    fn = llmc::tools::findFunction(*module, fnName, error);
    if (!fn)
      return fail(error);
    auto parsedBindings = llmc::tools::parseShapeBindings(
        std::vector<std::string>(shapes.begin(), shapes.end()), error);
    if (!parsedBindings)
      return fail(error);
    pipeline.shape_bindings = std::move(*parsedBindings);
    if (auto s = llmc::RunPipeline(fn, pipeline, llmc::tools::applyPassManagerFlags);
        !s.ok())
      return fail(std::string(s.message()));
    if (emit == "mlir") {
      fn.print(llvm::outs());
      llvm::outs() << "\n";
      llvm::outs().flush();
      if (llvm::outs().has_error()) {
        llvm::outs().clear_error();
        return fail("writing the function to stdout failed");
      }
      return 0;
    }
    if (emit == "exec") {
      if (std::string error = llmc::tools::printExecIR(fn, optionsFor(archList.front()));
          !error.empty())
        return fail(error);
      return 0;
    }
    exe = llmc::LowerToExecutable(fn, optionsFor(archList.front()), &st,
                                  llmc::tools::applyPassManagerFlags);
    if (!exe.ok())
      return fail(std::string(exe.status().message()));
  }
  llmc::LowerOptions firstOptions = optionsFor(archList.front());
  auto t1 = std::chrono::steady_clock::now();
  if (dump) {
    // What -o validates and writes, less what NVRTC adds (cubins, arch).
    if (auto s = exe->Validate(); !s.ok())
      return fail(std::string(s.message()));
    llvm::outs() << llmc::rt::DescribeExecutable(*exe);
    llvm::outs().flush();
    if (llvm::outs().has_error()) {
      llvm::outs().clear_error();
      return fail("writing the executable dump to stdout failed");
    }
    return 0;
  }
  if (emitCuda)
    for (auto &k : exe->kernels)
      llvm::outs() << "// ===== kernel " << k.name << " =====\n" << k.source << "\n";

  llmc::rt::KernelCompilerOptions kco;
  kco.use_disk_cache = !noCache;
  llmc::rt::KernelCompiler compiler(kco);
  for (const std::string &arch : archList) {
    const llmc::rt::Executable *forArch = &*exe;
    absl::StatusOr<llmc::rt::Executable> other;
    if ((optionsFor(arch).target_sm >= 89) != (firstOptions.target_sm >= 89)) {
      if (fromExec)
        return fail("--arch=" + arch + ": an executable read with --from-exec "
                    "was lowered for one side of sm_89; give arches of that side");
      other = llmc::LowerToExecutable(fn, optionsFor(arch));
      if (!other.ok())
        return fail(arch + ": " + std::string(other.status().message()));
      forArch = &*other;
    }
    std::vector<llmc::rt::KernelSource> sources;
    for (auto &k : forArch->kernels) {
      llmc::rt::KernelSource s;
      s.name = k.name;
      s.source = k.source;
      s.arch = arch;
      s.headers = k.headers;
      sources.push_back(std::move(s));
    }
    auto compiled = compiler.CompileAll(sources);
    if (!compiled.ok())
      return fail("NVRTC (" + arch + "): " + std::string(compiled.status().message()));
    // The serialized executable carries the cubins of the first arch.
    if (arch == archList.front())
      for (auto [k, c] : llvm::zip(exe->kernels, *compiled)) {
        k.arch = c.arch;
        k.cubin = c.binary;
      }
  }
  auto t2 = std::chrono::steady_clock::now();
  if (stats) {
    auto ms = [](auto a, auto b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    auto cs = compiler.stats();
    llvm::outs() << "llm ops: " << st.num_ops << "\n"
                 << "kernel launches: " << st.num_kernel_launches << " ("
                 << st.num_distinct_kernels << " distinct kernels)\n"
                 << "GEMMs: " << st.num_gemms << "\n"
                 << "copies: " << st.num_copies << "\n"
                 << "arena peak bytes: " << st.arena_bytes << " (sum of intermediates "
                 << st.intermediate_bytes << ")\n"
                 << "persistent bytes: " << st.persistent_bytes
                 << " (parameter preparation: " << st.num_prepare_launches
                 << " launches, once per parameter set)\n"
                 << llvm::format("compile time: %.1f ms front end + codegen, %.1f ms "
                                 "NVRTC (%lld compiled, %lld memory hits, %lld disk hits)\n",
                                 ms(t0, t1), ms(t1, t2), (long long)cs.compiles,
                                 (long long)cs.memory_hits, (long long)cs.disk_hits);
  }
  if (toStdout) {
    // What SaveExecutable writes, validated the same way.
    if (auto s = exe->Validate(); !s.ok())
      return fail(std::string(s.message()));
    std::string data = llmc::rt::SerializeExecutable(*exe);
    llvm::outs() << data;
    llvm::outs().flush();
    if (llvm::outs().has_error()) {
      llvm::outs().clear_error();
      return fail("writing the executable to stdout failed");
    }
  } else if (!output.empty()) {
    if (auto s = llmc::rt::SaveExecutable(*exe, output); !s.ok())
      return fail(std::string(s.message()));
  }
  return 0;
}
