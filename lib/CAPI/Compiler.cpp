//===- Compiler.cpp - the embedded JIT: MLIR text -> rt::Executable -------===//

#include "llmc/Compiler.h"

#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/InitAllDialects.h"
#include "llmc/Pipelines/Pipeline.h"
#include "llmc/Support/ParseSource.h"
#include "llmc/runtime/KernelCompiler.h"
#include "llmc/runtime/Session.h"

#include "LLM/Transforms/Passes.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "llmc/runtime/Log.h"
#include "mlir/IR/MLIRContext.h"

#include "CompilerInternal.h"
#include "llvm/Support/raw_ostream.h"


using namespace mlir;

namespace llmc {
namespace {

/// "file:line:col" for file locations, MLIR's printed form otherwise.
std::string locationString(Location loc) {
  if (auto flc = dyn_cast<FileLineColLoc>(loc))
    return absl::StrCat(flc.getFilename().str(), ":", flc.getLine(), ":",
                        flc.getColumn());
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return s;
}

const char *severityString(DiagnosticSeverity s) {
  switch (s) {
  case DiagnosticSeverity::Error: return "error";
  case DiagnosticSeverity::Warning: return "warning";
  case DiagnosticSeverity::Note: return "note";
  case DiagnosticSeverity::Remark: return "remark";
  }
  return "error";
}

/// Collects every diagnostic emitted on the context while alive as
/// "loc: severity: message" lines (notes indented under their error).
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext *ctx)
      : handler_(ctx, [this](Diagnostic &d) {
          add(d, "");
          for (Diagnostic &note : d.getNotes())
            add(note, "  ");
          return success();
        }) {}

  /// InvalidArgument "<what>: <diagnostics>".
  absl::Status error(std::string_view what) const {
    std::string text = absl::StrJoin(lines_, "\n");
    if (text.empty())
      text = "(no diagnostic)";
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ":\n", text));
  }

  /// `st` (its code kept) with the diagnostics emitted so far appended.
  absl::Status annotate(const absl::Status &st) const {
    if (lines_.empty())
      return st;
    return absl::Status(st.code(), absl::StrCat(st.message(), "\n",
                                                absl::StrJoin(lines_, "\n")));
  }

  /// The warnings and remarks, for llmc's log after a success (the C
  /// API's llmc_set_log_callback), not nowhere.
  std::vector<std::pair<rt::LogLevel, std::string>> warnings() const {
    std::vector<std::pair<rt::LogLevel, std::string>> out;
    for (const auto &[severity, line] : logged_)
      out.emplace_back(severity == DiagnosticSeverity::Remark
                           ? rt::LogLevel::info
                           : rt::LogLevel::warning,
                       line);
    return out;
  }

private:
  void add(Diagnostic &d, const char *indent) {
    lines_.push_back(absl::StrCat(indent, locationString(d.getLocation()), ": ",
                                  severityString(d.getSeverity()), ": ",
                                  d.str()));
    if (d.getSeverity() == DiagnosticSeverity::Warning ||
        d.getSeverity() == DiagnosticSeverity::Remark)
      logged_.emplace_back(d.getSeverity(), lines_.back());
  }

  std::vector<std::string> lines_;
  std::vector<std::pair<DiagnosticSeverity, std::string>> logged_;
  ScopedDiagnosticHandler handler_;
};

} // namespace

absl::StatusOr<func::FuncOp> parseFunction(MLIRContext *ctx,
                                           std::string_view text,
                                           std::string_view function,
                                           OwningOpRef<ModuleOp> &module) {
  {
    DiagnosticCollector diags(ctx);
    module = parseModuleString(llvm::StringRef(text.data(), text.size()),
                               "<mlir>", ctx);
    if (!module)
      return diags.error("could not parse the MLIR module");
  }
  std::vector<std::string> names;
  for (auto fn : module->getOps<func::FuncOp>()) {
    if (function.empty() || fn.getSymName() == llvm::StringRef(function.data(),
                                                               function.size())) {
      if (fn.isExternal())
        return absl::InvalidArgumentError(absl::StrCat(
            "function @", fn.getSymName().str(), " is a declaration (no body)"));
      return fn;
    }
    names.push_back("@" + fn.getSymName().str());
  }
  if (function.empty())
    return absl::InvalidArgumentError("no func.func in the MLIR module");
  return absl::InvalidArgumentError(absl::StrCat(
      "no function named '", std::string(function), "' in the module (found: ",
      names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
}

std::unique_ptr<MLIRContext> makeCompilerContext() {
  DialectRegistry registry;
  registerAllDialects(registry);
  auto context = std::make_unique<MLIRContext>(registry);
  context->loadAllAvailableDialects();
  // Diagnostics go into status messages: no dump of the whole op attached.
  context->printOpOnDiagnostic(false);
  return context;
}

Compiler::Compiler(CompilerOptions options) : options_(std::move(options)) {}
Compiler::~Compiler() = default;

absl::StatusOr<std::unique_ptr<Compiler>> Compiler::Create(CompilerOptions options) {
  if (options.arch.empty()) {
    auto device = rt::Device::Open(0);
    options.arch = device.ok() ? (*device)->Arch() : "sm_90a";
  }
  if (!rt::IsValidArch(options.arch))
    return absl::InvalidArgumentError(
        absl::StrCat("arch: expected ", rt::kArchSpelling, ", found '", options.arch, "'"));
  if (std::string why = UnsupportedArchReason(options.arch); !why.empty())
    return absl::InvalidArgumentError("arch " + why);
  // The pipeline of every Compile, with the tuning knobs read from the
  // environment once, here.
  auto pipeline = std::make_unique<PipelineOptions>();
  std::string error;
  std::optional<llm::PrecisionPolicy> policy =
      llm::parsePrecisionPolicy(options.precision, error);
  if (!policy)
    return absl::InvalidArgumentError("precision: " + error);
  pipeline->precision = *policy;
  std::optional<llm::Fp8Scaling> fp8Scaling =
      llm::parseFp8Scaling(options.fp8_scaling, error);
  if (!fp8Scaling)
    return absl::InvalidArgumentError("fp8_scaling: " + error);
  pipeline->fp8_scaling = *fp8Scaling;
  std::optional<llm::WeightOnlyMode> weightOnly =
      llm::parseWeightOnlyMode(options.weight_only, error);
  if (!weightOnly)
    return absl::InvalidArgumentError("weight_only: " + error);
  pipeline->weight_only = *weightOnly;
  pipeline->fuse_elementwise = pipeline->fuse_residual_norm =
      pipeline->fuse_gemm_epilogue = options.fuse;
  if (int cc = ComputeCapabilityOfArch(options.arch); cc > 0)
    pipeline->target_sm = cc;
  if (absl::Status st = SetTuningKnobs({}, *pipeline); !st.ok())
    return st;
  if (absl::Status st = ValidatePipelineOptions(*pipeline); !st.ok())
    return st;
  std::unique_ptr<Compiler> c(new Compiler(options));
  c->pipeline_ = std::move(pipeline);
  c->context_ = makeCompilerContext();
  rt::KernelCompilerOptions kco;
  kco.cache_dir = options.cache_dir;
  kco.use_disk_cache = options.use_disk_cache;
  c->kernels_ = std::make_unique<rt::KernelCompiler>(kco);
  return c;
}

absl::StatusOr<std::shared_ptr<rt::Executable>>
Compiler::Compile(std::string_view mlirText, std::string_view function,
                  const std::map<std::string, int64_t> &shapeBindings) {
  auto exe = std::make_shared<rt::Executable>();
  std::vector<std::pair<rt::LogLevel, std::string>> messages;
  {
    std::lock_guard<std::mutex> lock(mu_);
    OwningOpRef<ModuleOp> module;
    auto fn = parseFunction(context_.get(), mlirText, function, module);
    if (!fn.ok())
      return fn.status();
    PipelineOptions pipeline = *pipeline_;
    pipeline.shape_bindings = shapeBindings;
    DiagnosticCollector diags(context_.get());
    if (absl::Status st = RunPipeline(*fn, pipeline); !st.ok())
      return diags.error(std::string(st.message()));
    auto lowered = LowerToExecutable(*fn, lowerOptions(pipeline));
    if (!lowered.ok())
      return diags.annotate(lowered.status());
    messages = diags.warnings();
    *exe = std::move(*lowered);
  }
  // Outside the lock: a log handler may compile again.
  for (const auto &[level, line] : messages)
    rt::Log(level, line);
  if (exe->symbol_bindings.empty())
    exe->symbol_bindings = shapeBindings;
  if (!options_.compile_kernels)
    return exe;

  // NVRTC outside the lock: the kernel compiler is thread-safe and caches.
  std::vector<rt::KernelSource> sources;
  for (const rt::KernelSpec &k : exe->kernels)
    sources.push_back({k.name, k.source, k.options, options_.arch, k.headers});
  auto compiled = kernels_->CompileAll(sources);
  if (!compiled.ok())
    return absl::Status(compiled.status().code(),
                        absl::StrCat("NVRTC (", options_.arch, "): ",
                                     compiled.status().message()));
  for (size_t i = 0; i < exe->kernels.size(); ++i) {
    exe->kernels[i].arch = (*compiled)[i].arch;
    exe->kernels[i].cubin = std::move((*compiled)[i].binary);
  }
  return exe;
}

absl::StatusOr<std::vector<rt::InputShapeSpec>>
Compiler::InputShapes(std::string_view mlirText, std::string_view function) {
  std::lock_guard<std::mutex> lock(mu_);
  OwningOpRef<ModuleOp> module;
  auto fn = parseFunction(context_.get(), mlirText, function, module);
  if (!fn.ok())
    return fn.status();
  std::vector<rt::InputShapeSpec> specs;
  for (BlockArgument arg : fn->getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type)
      return absl::InvalidArgumentError(absl::StrCat(
          "argument ", arg.getArgNumber(), " of @", fn->getSymName().str(),
          ": expected a ranked tensor"));
    rt::InputShapeSpec spec;
    spec.name = absl::StrCat("arg", arg.getArgNumber());
    for (auto [d, size] : llvm::enumerate(type.getShape()))
      spec.dims.push_back(ShapedType::isDynamic(size)
                              ? rt::DimSpec::Dynamic(llm::dynamicDimName(
                                    *fn, arg.getArgNumber(), d))
                              : rt::DimSpec::Static(size));
    specs.push_back(std::move(spec));
  }
  return specs;
}

absl::StatusOr<std::unique_ptr<JitFunction>>
JitFunction::Create(std::shared_ptr<Compiler> compiler, std::string mlirText,
                    std::string function,
                    absl::flat_hash_map<std::string, rt::BucketPolicy> policies,
                    int recompileLimit) {
  if (!compiler)
    return absl::InvalidArgumentError("compiler: expected a Compiler, found null");
  auto specs = compiler->InputShapes(mlirText, function);
  if (!specs.ok())
    return specs.status();
  std::unique_ptr<JitFunction> jit(new JitFunction());
  jit->compiler_ = std::move(compiler);
  jit->text_ = std::move(mlirText);
  jit->function_ = std::move(function);
  jit->specs_ = *specs;
  JitFunction *self = jit.get();
  rt::CompileFn compile = [self](const rt::DimBindings &dims)
      -> absl::StatusOr<std::shared_ptr<rt::Executable>> {
    std::map<std::string, int64_t> bindings(dims.begin(), dims.end());
    return self->compiler_->Compile(self->text_, self->function_, bindings);
  };
  jit->cache_ = std::make_unique<rt::SpecializationCache>(
      *specs, std::move(policies), std::move(compile), recompileLimit);
  return jit;
}

absl::StatusOr<rt::SpecializationCache::Entry>
JitFunction::Get(const std::vector<std::vector<int64_t>> &shapes) {
  return cache_->Get(shapes);
}

rt::StepExecutableFactory ServingStepFactory(std::shared_ptr<Compiler> compiler,
                                             std::string mlirText, std::string function) {
  auto text = std::make_shared<const std::string>(std::move(mlirText));
  return [compiler = std::move(compiler), text,
          function = std::move(function)](rt::StepBucket b)
             -> absl::StatusOr<std::shared_ptr<const rt::Executable>> {
    auto exe = compiler->Compile(*text, function,
                                 {{"tokens", b.tokens},
                                  {"seqs", b.sequences},
                                  {"seqs_plus_one", b.sequences + 1},
                                  {"logit_rows", b.sequences}});
    if (!exe.ok())
      return exe.status();
    return std::shared_ptr<const rt::Executable>(std::move(*exe));
  };
}

} // namespace llmc
