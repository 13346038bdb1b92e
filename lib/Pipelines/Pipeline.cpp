//===- Pipeline.cpp - the one compilation pipeline of every entry point ---===//

#include "llmc/Pipelines/Pipeline.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

#include <cstdlib>

using namespace mlir;

namespace llmc {
namespace {

/// canonicalize -> llmc-raise -> canonicalize -> CSE, or canonicalize -> CSE
/// without the raise.
void addPrepareStage(OpPassManager &pm, bool raise) {
  pm.addPass(createCanonicalizerPass());
  if (raise) {
    pm.addPass(llm::createRaisePass());
    pm.addPass(createCanonicalizerPass());
  }
  pm.addPass(createCSEPass());
}

/// llmc-precision{policy} [-> llmc-pad-layout] -> canonicalize -> CSE; the
/// pad for fp8 (cuBLASLt's fp8 GEMMs need K and the leading dims in
/// multiples of 16) or, with pad_all, for every policy; under other
/// policies llmc-pad-layout{fp8-only} pads the fp8 GEMMs the graph states.
void addPrecisionStage(OpPassManager &pm, const PipelineOptions &options) {
  const bool fp8 = options.precision == llm::PrecisionPolicy::fp8;
  auto addPad = [&](bool fp8Only) {
    llm::PadLayoutPassOptions pad;
    pad.multiple = options.pad_multiple;
    pad.vocabMultiple = options.vocab_multiple;
    pad.fp8Only = fp8Only;
    pm.addPass(llm::createPadLayoutPass(pad));
  };
  // fp8 GEMMs the graph states itself (not the policy's) are padded under
  // every policy: cuBLASLt's fp8 GEMMs need K and N in multiples of 16.
  if (!fp8 && !options.pad_all)
    addPad(/*fp8Only=*/true);
  if (options.precision == llm::PrecisionPolicy::fp32 && !options.pad_all)
    return;
  if (options.precision != llm::PrecisionPolicy::fp32) {
    llm::PrecisionPassOptions precision;
    precision.policy = llm::stringifyPrecisionPolicy(options.precision).str();
    precision.fp8Scaling = llm::stringifyFp8Scaling(options.fp8_scaling).str();
    pm.addPass(llm::createPrecisionPass(precision));
  }
  if (fp8 || options.pad_all)
    addPad(/*fp8Only=*/false);
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

/// Records the argument of the first pass that fails ("llmc-shard").
class FailedPassRecorder : public PassInstrumentation {
public:
  explicit FailedPassRecorder(std::string &name) : name_(name) {}
  void runAfterPassFailed(Pass *pass, Operation *) override {
    if (name_.empty())
      name_ = pass->getArgument().empty() ? pass->getName().str()
                                          : pass->getArgument().str();
  }

private:
  std::string &name_;
};

/// Runs `build`'s passes on `fn`; InvalidArgument naming the failed pass.
absl::Status runOn(func::FuncOp fn,
                   const std::function<void(OpPassManager &)> &build,
                   const PassManagerSetup &setup) {
  PassManager pm(fn.getContext(), func::FuncOp::getOperationName());
  build(pm);
  if (setup && failed(setup(pm)))
    return absl::InvalidArgumentError(
        "invalid pass-manager options (see the diagnostics above)");
  std::string failedPass;
  pm.addInstrumentation(std::make_unique<FailedPassRecorder>(failedPass));
  if (succeeded(pm.run(fn)))
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      failedPass.empty() ? "the pipeline" : failedPass, " failed on @",
      fn.getSymName().str()));
}

/// The value of a knob: `given` when set, else its environment variable
/// when set and not empty, else an empty setting.
KnobSetting fromEnvironment(const KnobSetting &given, const char *variable) {
  if (!given.value.empty())
    return given;
  const char *value = std::getenv(variable);
  if (!value || !*value)
    return {};
  return {value, absl::StrCat("environment variable ", variable)};
}

} // namespace

LowerOptions lowerOptions(const PipelineOptions &options) {
  LowerOptions lo;
  lo.fuse_elementwise = options.fuse_elementwise;
  lo.fuse_residual_norm = options.fuse_residual_norm;
  lo.fuse_gemm_epilogue = options.fuse_gemm_epilogue;
  lo.fuse_gemv = options.fuse_gemv;
  lo.arena_alignment = options.arena_alignment;
  lo.target_sm = options.target_sm;
  lo.attention_backend = options.attention_backend;
  lo.attention_tile = options.attention_tile;
  lo.elementwise_unroll = options.elementwise_unroll;
  lo.gemv_unroll = options.gemv_unroll;
  lo.flash_decode_fused_combine = options.flash_decode_fused_combine;
  lo.hoist_parameter_work = options.hoist_parameter_work;
  lo.max_constant_bytes = options.max_constant_bytes;
  return lo;
}

void buildPipeline(OpPassManager &pm, const PipelineOptions &options) {
  if (options.specialize_shapes) {
    llm::SpecializeShapesPassOptions specialize;
    for (const auto &[name, value] : options.shape_bindings)
      specialize.dims.push_back(absl::StrCat(name, "=", value));
    pm.addPass(llm::createSpecializeShapesPass(specialize));
  }
  if (options.tp > 1) {
    llm::ShardPassOptions shard;
    shard.tp = options.tp;
    shard.rank = options.rank;
    pm.addPass(llm::createShardPass(shard));
  }
  // Each rank quantizes only its own slice of every weight.
  if (options.weight_only != llm::WeightOnlyMode::none) {
    llm::PrecisionPassOptions weightOnly;
    weightOnly.weightOnly = llm::stringifyWeightOnlyMode(options.weight_only).str();
    pm.addPass(llm::createPrecisionPass(weightOnly));
  }
  addPrepareStage(pm, options.raise);
  addPrecisionStage(pm, options);
  // Attention's training ops become matmuls over static score shapes, after
  // the precision policy chose their type (so their GEMMs stay out of fp8).
  pm.addPass(llm::createDecomposeAttentionPass());
  if (options.hoist_parameter_work)
    pm.addPass(llm::createHoistParameterWorkPass());
  if (options.form_kernels) {
    pm.addPass(createFormKernelsPass(lowerOptions(options)));
    pm.addPass(createSelectKernelConfigsPass(lowerOptions(options)));
  }
}

absl::Status ValidatePipelineOptions(const PipelineOptions &options) {
  auto invalid = [](auto &&...parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts...));
  };
  if (options.tp < 1 || options.tp > kMaxTensorParallel || options.rank < 0 ||
      options.rank >= options.tp)
    return invalid("tp/rank: expected 1 <= tp <= ", kMaxTensorParallel,
                   " and 0 <= rank < tp, found tp=", options.tp,
                   " rank=", options.rank);
  if (options.weight_only != llm::WeightOnlyMode::none &&
      options.precision == llm::PrecisionPolicy::fp8)
    return invalid("weight-only=",
                   llm::stringifyWeightOnlyMode(options.weight_only).str(),
                   " cannot be combined with precision=fp8 (llmc-precision "
                   "quantizes weights either to fp8 or to int8/int4)");
  if (options.fp8_scaling != llm::Fp8Scaling::tensor &&
      options.precision != llm::PrecisionPolicy::fp8)
    return invalid("fp8-scaling=",
                   llm::stringifyFp8Scaling(options.fp8_scaling).str(),
                   " needs precision=fp8, found precision=",
                   llm::stringifyPrecisionPolicy(options.precision).str());
  for (auto [name, value] : {std::pair<const char *, int64_t>{"pad-multiple", options.pad_multiple},
                             {"vocab-multiple", options.vocab_multiple}})
    if (value < 1 || value > 4096)
      return invalid(name, ": expected 1..4096, found ", value);
  if (options.arena_alignment < 1 ||
      (options.arena_alignment & (options.arena_alignment - 1)) != 0)
    return invalid("alignment: expected a positive power of two (bytes), found ",
                   options.arena_alignment);
  if (options.elementwise_unroll < 1 || options.elementwise_unroll > 4)
    return invalid("elementwise unroll: expected 1, 2, 3 or 4, found ",
                   options.elementwise_unroll);
  if (options.gemv_unroll < 1 || options.gemv_unroll > cuda::kGemvMaxUnroll)
    return invalid("gemv unroll: expected 1..16, found ", options.gemv_unroll);
  return absl::OkStatus();
}

absl::Status RunPipeline(func::FuncOp fn, const PipelineOptions &options,
                         const PassManagerSetup &setup) {
  if (absl::Status st = ValidatePipelineOptions(options); !st.ok())
    return st;
  return runOn(
      fn, [&](OpPassManager &pm) { buildPipeline(pm, options); }, setup);
}

absl::Status PrepareForLowering(func::FuncOp fn, bool raise) {
  return runOn(
      fn, [&](OpPassManager &pm) { addPrepareStage(pm, raise); }, {});
}

absl::Status ApplyPrecisionPolicy(func::FuncOp fn, const std::string &policy,
                                  llm::Fp8Scaling fp8_scaling) {
  std::string error;
  std::optional<llm::PrecisionPolicy> parsed =
      llm::parsePrecisionPolicy(policy, error);
  if (!parsed)
    return absl::InvalidArgumentError("precision: " + error);
  PipelineOptions options;
  options.precision = *parsed;
  options.fp8_scaling = fp8_scaling;
  if (absl::Status st = ValidatePipelineOptions(options); !st.ok())
    return st;
  return runOn(
      fn, [&](OpPassManager &pm) { addPrecisionStage(pm, options); }, {});
}

absl::Status SetTuningKnobs(const TuningKnobs &given, PipelineOptions &options) {
  KnobSetting backend =
      fromEnvironment(given.attention_backend, kAttentionBackendVariable);
  if (!backend.value.empty()) {
    absl::StatusOr<AttentionBackend> b = ParseAttentionBackend(backend.value);
    if (!b.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(backend.name, ": ", b.status().message()));
    options.attention_backend = *b;
  }
  KnobSetting tile = fromEnvironment(given.attention_tile, kAttentionTileVariable);
  if (!tile.value.empty()) {
    cuda::AttentionTile t;
    std::string error;
    if (!cuda::ParseAttentionTile(tile.value, &t, &error))
      return absl::InvalidArgumentError(absl::StrCat(tile.name, ": ", error));
    options.attention_tile = t;
  }
  KnobSetting unroll =
      fromEnvironment(given.elementwise_unroll, kElementwiseUnrollVariable);
  if (!unroll.value.empty()) {
    const std::string &v = unroll.value;
    if (v.size() != 1 || v[0] < '1' || v[0] > '4')
      return absl::InvalidArgumentError(absl::StrCat(
          unroll.name, ": expected 1, 2, 3 or 4, found '", v, "'"));
    options.elementwise_unroll = v[0] - '0';
  }
  KnobSetting gemv = fromEnvironment(given.gemv_unroll, kGemvUnrollVariable);
  if (!gemv.value.empty()) {
    // Digits only, no sign, blank or leading zero: the value names a kernel.
    int u = 0;
    const std::string &v = gemv.value;
    bool digits = v.size() <= 2 && v[0] != '0' &&
                  v.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || !absl::SimpleAtoi(v, &u) || u < 1 || u > cuda::kGemvMaxUnroll)
      return absl::InvalidArgumentError(absl::StrCat(
          gemv.name, ": expected 1..16, found '", gemv.value, "'"));
    options.gemv_unroll = u;
  }
  KnobSetting combine =
      fromEnvironment(given.flash_decode_combine, kFlashDecodeCombineVariable);
  if (!combine.value.empty()) {
    if (combine.value != "fused" && combine.value != "kernel")
      return absl::InvalidArgumentError(absl::StrCat(
          combine.name, ": expected fused or kernel, found '", combine.value, "'"));
    options.flash_decode_fused_combine = combine.value == "fused";
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// llmc-pipeline
//===----------------------------------------------------------------------===//

namespace {

/// The pass options of `llmc-pipeline`: PipelineOptions' graph-level fields.
struct PipelinePassOptions
    : public PassPipelineOptions<PipelinePassOptions> {
  ListOption<std::string> dims{
      *this, "dims",
      llvm::cl::desc("name=value bindings of the dynamic dimensions: "
                     "llmc-specialize-shapes first (none: shapes stay)")};
  Option<int64_t> tp{*this, "tp",
                     llvm::cl::desc("llmc-shard's tensor-parallel degree (1: "
                                    "no llmc-shard)"),
                     llvm::cl::init(1)};
  Option<int64_t> rank{*this, "rank",
                       llvm::cl::desc("llmc-shard's rank, 0 <= rank < tp"),
                       llvm::cl::init(0)};
  Option<std::string> weightOnly{
      *this, "weight-only",
      llvm::cl::desc("weight-only quantization of linear weights before the "
                     "policy: none, int8 or int4 (groups of 128 along K)"),
      llvm::cl::init("none")};
  Option<bool> raise{*this, "raise",
                     llvm::cl::desc("llmc-raise between the canonicalizations"),
                     llvm::cl::init(true)};
  Option<std::string> precision{*this, "precision",
                                llvm::cl::desc("fp32, bf16, fp16 or fp8"),
                                llvm::cl::init("fp32")};
  Option<std::string> fp8Scaling{
      *this, "fp8-scaling",
      llvm::cl::desc("fp8 scaling: tensor (one scale per GEMM operand) or "
                     "row (per row of the LHS and column of the RHS)"),
      llvm::cl::init("tensor")};
  Option<bool> padAll{
      *this, "pad-all",
      llvm::cl::desc("llmc-pad-layout on every GEMM (default: fp8 ones only)"),
      llvm::cl::init(false)};
  Option<int64_t> padMultiple{*this, "pad-multiple",
                              llvm::cl::desc("GEMM dimension multiple"),
                              llvm::cl::init(16)};
  Option<int64_t> vocabMultiple{*this, "vocab-multiple",
                                llvm::cl::desc("multiple for vocab-like N"),
                                llvm::cl::init(64)};
  Option<bool> hoist{
      *this, "hoist",
      llvm::cl::desc("llmc-hoist-parameter-work: mark the work that depends "
                     "on parameters only (run once per parameter set)"),
      llvm::cl::init(true)};
  Option<bool> formKernels{
      *this, "form-kernels",
      llvm::cl::desc("end with llmc-form-kernels and "
                     "llmc-select-kernel-configs: the lowering's kernels and "
                     "their configurations as attributes"),
      llvm::cl::init(false)};
  Option<bool> fuseElementwise{*this, "fuse-elementwise",
                               llvm::cl::desc("fuse elementwise chains"),
                               llvm::cl::init(true)};
  Option<bool> fuseResidualNorm{*this, "fuse-residual-norm",
                                llvm::cl::desc("fuse residual add + norm"),
                                llvm::cl::init(true)};
  Option<bool> fuseGemmEpilogue{*this, "fuse-gemm-epilogue",
                                llvm::cl::desc("fuse GEMM epilogues"),
                                llvm::cl::init(true)};
};

/// PipelineOptions from the pass options; the error names the option.
FailureOr<PipelineOptions> toPipelineOptions(const PipelinePassOptions &in,
                                             std::string &error) {
  PipelineOptions out;
  out.specialize_shapes = !in.dims.empty();
  for (const std::string &entry : in.dims) {
    auto [name, value] = llvm::StringRef(entry).split('=');
    int64_t v;
    if (name.empty() || value.getAsInteger(10, v)) {
      error = "dims: malformed binding '" + entry + "', expected name=<integer>";
      return failure();
    }
    if (!out.shape_bindings.emplace(name.str(), v).second) {
      error = "dims: '" + name.str() + "' is bound twice";
      return failure();
    }
  }
  // Ranges of the int fields before they are narrowed; the rest is
  // ValidatePipelineOptions.
  if (in.tp < 1 || in.tp > kMaxTensorParallel || in.rank < 0 ||
      in.rank >= in.tp) {
    error = absl::StrCat("tp/rank: expected 1 <= tp <= ", kMaxTensorParallel,
                         " and 0 <= rank < tp, found tp=",
                         static_cast<int64_t>(in.tp),
                         " rank=", static_cast<int64_t>(in.rank));
    return failure();
  }
  out.tp = static_cast<int>(in.tp);
  out.rank = static_cast<int>(in.rank);
  std::optional<llm::WeightOnlyMode> weightOnly =
      llm::parseWeightOnlyMode(in.weightOnly, error);
  if (!weightOnly) {
    error = "weight-only: " + error;
    return failure();
  }
  std::optional<llm::PrecisionPolicy> precision =
      llm::parsePrecisionPolicy(in.precision, error);
  if (!precision) {
    error = "precision: " + error;
    return failure();
  }
  std::optional<llm::Fp8Scaling> fp8Scaling =
      llm::parseFp8Scaling(in.fp8Scaling, error);
  if (!fp8Scaling) {
    error = "fp8-scaling: " + error;
    return failure();
  }
  out.weight_only = *weightOnly;
  out.precision = *precision;
  out.fp8_scaling = *fp8Scaling;
  out.raise = in.raise;
  out.pad_all = in.padAll;
  out.pad_multiple = in.padMultiple;
  out.vocab_multiple = in.vocabMultiple;
  out.hoist_parameter_work = in.hoist;
  out.form_kernels = in.formKernels;
  out.fuse_elementwise = in.fuseElementwise;
  out.fuse_residual_norm = in.fuseResidualNorm;
  out.fuse_gemm_epilogue = in.fuseGemmEpilogue;
  if (absl::Status st = ValidatePipelineOptions(out); !st.ok()) {
    error = std::string(st.message());
    return failure();
  }
  return out;
}

} // namespace

void registerPipelines() {
  registerPassPipeline(
      "llmc-pipeline",
      "the compilation pipeline of llmc-compile, llmc-run and llmc::Compiler "
      "on every func.func: specialize-shapes -> shard -> weight-only -> "
      "canonicalize, raise, canonicalize, cse -> precision (+ pad-layout) -> "
      "canonicalize, cse -> hoist-parameter-work [-> form-kernels, "
      "select-kernel-configs]",
      [](OpPassManager &pm, llvm::StringRef text,
         llvm::function_ref<LogicalResult(const llvm::Twine &)> errorHandler)
          -> LogicalResult {
        PipelinePassOptions parsed;
        if (failed(parsed.parseFromString(text)))
          return failure();
        std::string error;
        FailureOr<PipelineOptions> options = toPipelineOptions(parsed, error);
        if (failed(options))
          return errorHandler("llmc-pipeline: " + error);
        if (pm.getOpAnchorName() == func::FuncOp::getOperationName())
          buildPipeline(pm, *options);
        else
          buildPipeline(pm.nest<func::FuncOp>(), *options);
        return success();
      },
      [](llvm::function_ref<void(const detail::PassOptions &)> optHandler) {
        optHandler(PipelinePassOptions());
      });
}

} // namespace llmc
