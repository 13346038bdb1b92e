//===- PipelineFlags.cpp - pipeline flags of llmc-compile and llmc-run ----===//

#include "PipelineFlags.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"

#include <set>

namespace cl = llvm::cl;

namespace llmc::tools {

PipelineFlags::PipelineFlags(cl::OptionCategory &category)
    : precision("precision",
                cl::desc("numerics policy: fp32 (as written), bf16, fp16 or "
                         "fp8 (scaled e4m3 GEMMs; e5m2 for gradients, what is "
                         "computed from llm.gradient arguments)"),
                cl::init("fp32"), cl::cat(category)),
      fp8Scaling("fp8-scaling",
                 cl::desc("with --precision=fp8: tensor (one scale per GEMM "
                          "operand) or row (one per row of the LHS and per "
                          "column of the RHS, torchao's rowwise recipe)"),
                 cl::init("tensor"), cl::cat(category)),
      noHoist("no-hoist",
              cl::desc("run parameter-only work (weight casts, fp8 weight "
                       "scaling, pads, relayouts) on every call instead of "
                       "once per parameter set"),
              cl::cat(category)),
      attention("attention",
                cl::desc("prefill attention backend: auto (cuDNN's fused "
                         "flash attention where cuDNN is present and takes "
                         "the shape, else llmc's kernel), llmc, or cudnn (as "
                         "auto, and llmc-run warns on every fallback); "
                         "default: $LLMC_ATTENTION_BACKEND, else auto"),
                cl::init(""), cl::cat(category)),
      attentionTile("attention-tile",
                    cl::desc("FlashAttention-2 tile of every tensor-core "
                             "attention kernel, bm<M>_bn<N>_w<warps>_s<stages>"
                             "[_gh] (e.g. bm64_bn64_w4_s2_gh), for sweeps; "
                             "default: $LLMC_ATTN_CONFIG, else by head dim"),
                    cl::init(""), cl::cat(category)),
      ewUnroll("ew-unroll",
               cl::desc("16-byte vectors per input in flight per thread in "
                        "elementwise kernels, 1..4; default: "
                        "$LLMC_EW_UNROLL, else 1"),
               cl::init(""), cl::cat(category)),
      gemvUnroll("gemv-unroll",
                 cl::desc("16-byte weight loads in flight per lane of a bf16/f16 "
                          "decode GEMV (not the int8/int4 weight-only one), 1..16, for sweeps (results are bitwise the same; "
                          "above 8, or at batch > 1, kernels may spill registers); "
                          "default: $LLMC_GEMV_UNROLL, else 4"),
                 cl::init(""), cl::cat(category)),
      flashDecodeCombine("flash-decode-combine",
                         cl::desc("fused (flash-decoding's split kernel combines its "
                                  "splits: one launch) or kernel (a second kernel "
                                  "does), for A/B measurements; default: "
                                  "$LLMC_FLASH_DECODE_COMBINE, else kernel"),
                         cl::init(""), cl::cat(category)) {}

absl::StatusOr<PipelineOptions> PipelineFlags::options(bool knobs) const {
  PipelineOptions options;
  std::string error;
  std::optional<llm::PrecisionPolicy> policy =
      llm::parsePrecisionPolicy(precision, error);
  if (!policy)
    return absl::InvalidArgumentError("--precision: " + error);
  options.precision = *policy;
  std::optional<llm::Fp8Scaling> scaling =
      llm::parseFp8Scaling(fp8Scaling, error);
  if (!scaling)
    return absl::InvalidArgumentError("--fp8-scaling: " + error);
  options.fp8_scaling = *scaling;
  options.hoist_parameter_work = !noHoist;
  if (!knobs)
    return options;
  // An empty value given explicitly is not "not given".
  for (const cl::opt<std::string> *knob :
       {&attention, &attentionTile, &ewUnroll, &gemvUnroll, &flashDecodeCombine})
    if (knob->getNumOccurrences() && knob->empty())
      return absl::InvalidArgumentError("--" + knob->ArgStr.str() +
                                        " needs a value");
  TuningKnobs given;
  given.attention_backend = {attention, "--attention"};
  given.attention_tile = {attentionTile, "--attention-tile"};
  given.elementwise_unroll = {ewUnroll, "--ew-unroll"};
  given.gemv_unroll = {gemvUnroll, "--gemv-unroll"};
  given.flash_decode_combine = {flashDecodeCombine, "--flash-decode-combine"};
  if (absl::Status st = SetTuningKnobs(given, options); !st.ok())
    return st;
  return options;
}

cl::OptionCategory &passManagerCategory() {
  static cl::OptionCategory category("MLIR pass-manager options (the "
                                     "pipeline before lowering)");
  return category;
}

void registerPassManagerFlags() {
  std::set<std::string> before;
  for (auto &entry : cl::getRegisteredOptions())
    before.insert(entry.first.str());
  mlir::registerPassManagerCLOptions();
  mlir::registerDefaultTimingManagerCLOptions();
  for (auto &entry : cl::getRegisteredOptions())
    if (!before.count(entry.first.str()))
      entry.second->addCategory(passManagerCategory());
}

mlir::LogicalResult applyPassManagerFlags(mlir::PassManager &pm) {
  if (mlir::failed(mlir::applyPassManagerCLOptions(pm)))
    return mlir::failure();
  mlir::applyDefaultTimingPassManagerCLOptions(pm);
  return mlir::success();
}

} // namespace llmc::tools
