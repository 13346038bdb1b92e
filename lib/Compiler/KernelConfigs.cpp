//===- KernelConfigs.cpp - kernel configurations chosen in IR -------------===//
//
// The rule of llmc-select-kernel-configs, the pass, and the lowering's
// reader (see KernelConfigs.h).
//
//===----------------------------------------------------------------------===//

#include "KernelConfigs.h"

#include "KernelPlan.h"

#include "LLM/Transforms/Passes.h"
#include "llmc/Target/CUDA/Decode.h"
#include "llmc/runtime/CudnnAttention.h"

#include "absl/strings/str_cat.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Pass/Pass.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace mlir;
using namespace llmc;
using namespace llmc::llm;
namespace cu = llmc::cuda;

namespace llmc {
#define GEN_PASS_DECL_SELECTKERNELCONFIGSPASS
#define GEN_PASS_DEF_SELECTKERNELCONFIGSPASS
#include "Passes.h.inc"
} // namespace llmc

namespace {

RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }

} // namespace

cu::DecodeConfig llmc::flashDecodeConfig(AttentionOp op) {
  auto q = tensorType(op.getQuery()), k = tensorType(op.getKey());
  cu::DecodeConfig dc;
  dc.dtype = kernelScalarType(op.getQuery());
  dc.head_dim = q.getDimSize(3);
  dc.group_size = q.getDimSize(2) / std::max<int64_t>(k.getDimSize(op.kvHeadsDim()), 1);
  dc.q_len = q.getDimSize(1);
  dc.causal = op.getCausal();
  dc.kv_hnd = op.getKvHnd();
  if (Value mask = op.getMask()) {
    dc.has_mask = true;
    dc.mask = kernelScalarType(mask);
  }
  return dc;
}

cu::DecodeConfig llmc::pagedDecodeConfig(PagedAttentionOp op, int64_t queryRows) {
  auto q = tensorType(op.getQuery()), kp = tensorType(op.getKeyPages());
  cu::DecodeConfig dc;
  dc.dtype = kernelScalarType(op.getQuery());
  dc.head_dim = q.getDimSize(2);
  dc.group_size = q.getDimSize(1) / std::max<int64_t>(kp.getDimSize(2), 1);
  dc.q_len = queryRows;
  dc.causal = op.getCausal();
  dc.paged = true;
  dc.page_size = kp.getDimSize(1);
  dc.block_table = kernelScalarType(op.getBlockTable());
  dc.cu_seqlens = kernelScalarType(op.getCuSeqlensQ());
  dc.seq_lens = kernelScalarType(op.getSeqLens());
  if (op.getKeyScale())  // an fp8 KV cache (the verifier's rule)
    dc.kv_fp8 = kernelScalarType(op.getKeyPages());
  return dc;
}

std::optional<std::array<int64_t, 3>> llmc::attentionMaskStrides(AttentionOp op) {
  Value mask = op.getMask();
  if (!mask)
    return std::array<int64_t, 3>{0, 0, 0};
  // Right-align the mask to [B, Hq, Sq, Skv]; the key dim must be dense.
  int64_t skv = tensorType(op.getKey()).getDimSize(op.kvSeqDim());
  SmallVector<int64_t> ms(tensorType(mask).getShape());
  while (ms.size() < 4)
    ms.insert(ms.begin(), 1);
  if (ms[3] != skv)
    return std::nullopt;
  int64_t strideQ = ms[2] == 1 ? 0 : skv;
  int64_t strideH = ms[1] == 1 ? 0 : ms[2] * skv;
  int64_t strideB = ms[0] == 1 ? 0 : ms[1] * ms[2] * skv;
  return std::array<int64_t, 3>{strideB, strideH, strideQ};
}

bool llmc::flashDecodeServes(AttentionOp op) {
  cu::DecodeConfig dc = flashDecodeConfig(op);
  return tensorType(op.getQuery()).getDimSize(1) <= 16 &&
         attentionMaskStrides(op).has_value() &&
         (!dc.has_mask || cu::IsFloatType(dc.mask)) && cu::FlashDecodeSupported(dc);
}

/// The spec's shape, type, causal and scale from query [B, Sq, Hq, D] and a
/// key whose sequence and head dims are `kvSeqDim` and `kvHeadsDim`.
static absl::StatusOr<rt::AttentionSpec> attentionSpec(Value query, Value key,
                                                       unsigned kvSeqDim, unsigned kvHeadsDim,
                                                       bool causal,
                                                       std::optional<APFloat> scale) {
  auto q = tensorType(query), k = tensorType(key);
  absl::StatusOr<rt::DType> dtype = toRuntimeDType(q.getElementType());
  if (!dtype.ok())
    return dtype.status();
  rt::AttentionSpec spec;
  spec.b = q.getDimSize(0), spec.sq = q.getDimSize(1), spec.hq = q.getDimSize(2);
  spec.d = q.getDimSize(3), spec.skv = k.getDimSize(kvSeqDim);
  spec.hkv = k.getDimSize(kvHeadsDim);
  spec.causal = causal;
  spec.scale = scale ? static_cast<float>(scale->convertToDouble())
                     : static_cast<float>(1.0 / std::sqrt(double(spec.d)));
  spec.dtype = *dtype;
  return spec;
}

absl::StatusOr<rt::AttentionSpec> llmc::cudnnAttentionSpec(AttentionOp op) {
  return attentionSpec(op.getQuery(), op.getKey(), op.kvSeqDim(), op.kvHeadsDim(),
                       op.getCausal(), op.getScale());
}

absl::StatusOr<rt::AttentionSpec> llmc::cudnnAttentionSpec(AttentionBackwardOp op) {
  absl::StatusOr<rt::AttentionSpec> spec =
      attentionSpec(op.getQuery(), op.getKey(), 1, 2, op.getCausal(), op.getScale());
  if (!spec.ok())
    return spec;
  spec->backward = true;
  spec->lse = {0, 0}; // present; the lowering gives the buffers
  return spec;
}

KernelConfigs llmc::selectKernelConfigs(func::FuncOp fn, const LowerOptions &options) {
  KernelConfigs configs;
  configs.elementwise_unroll = options.elementwise_unroll;
  configs.gemv_unroll = options.gemv_unroll;
  fn.walk([&](AttentionOp op) {
    auto q = tensorType(op.getQuery()), k = tensorType(op.getKey());
    int64_t b = q.getDimSize(0), sq = q.getDimSize(1), hq = q.getDimSize(2),
            d = q.getDimSize(3), skv = k.getDimSize(op.kvSeqDim()),
            hkv = k.getDimSize(op.kvHeadsDim());
    AttentionChoice choice;
    if (flashDecodeServes(op) && (op.getKvLen() || sq == 1)) {
      absl::StatusOr<int> splits =
          cu::FlashDecodeNumSplits(flashDecodeConfig(op), b, hkv, skv);
      if (splits.ok()) { // it is: the geometry exists
        choice.kernel = AttentionChoice::kFlashDecode;
        choice.splits = *splits;
        choice.fused_combine = options.flash_decode_fused_combine;
        configs.attention[op] = choice;
        return;
      }
    }
    choice.tile = options.attention_tile ? *options.attention_tile
                                         : cu::DefaultAttentionTile(d);
    if (b > 65535 || hq > 65535)
      choice.tile.qtile_fastest = false;
    // cuDNN's attachment describes NHD key/value only.
    if (options.attention_backend != AttentionBackend::kLlmc && !op.getMask() &&
        !op.getKvHnd()) {
      absl::StatusOr<rt::AttentionSpec> spec = cudnnAttentionSpec(op);
      choice.cudnn = spec.ok() && rt::CudnnAttentionUnsupportedReason(*spec).empty();
    }
    configs.attention[op] = choice;
  });
  fn.walk([&](VarlenAttentionOp op) {
    AttentionChoice choice;
    int64_t d = tensorType(op.getQuery()).getDimSize(2);
    choice.tile = options.attention_tile ? *options.attention_tile : cu::DefaultAttentionTile(d);
    auto cu = tensorType(op.getCuSeqlensQ());
    if (cu.getDimSize(0) - 1 > 65535 || tensorType(op.getQuery()).getDimSize(1) > 65535)
      choice.tile.qtile_fastest = false;
    configs.attention[op] = choice;
  });
  fn.walk([&](PagedAttentionOp op) {
    auto q = tensorType(op.getQuery()), kp = tensorType(op.getKeyPages());
    auto bt = tensorType(op.getBlockTable());
    int64_t t = q.getDimSize(0), b = std::max<int64_t>(bt.getDimSize(0), 1);
    // As many rows as a sequence has new tokens on average (decode: 1).
    for (int64_t rows = std::clamp<int64_t>((t + b - 1) / b, 1, 16); rows >= 1; --rows) {
      absl::StatusOr<int> splits =
          cu::FlashDecodeNumSplits(pagedDecodeConfig(op, rows), b, kp.getDimSize(2),
                                   bt.getDimSize(1) * kp.getDimSize(1));
      if (splits.ok()) {
        AttentionChoice choice;
        choice.kernel = AttentionChoice::kFlashDecode;
        choice.splits = *splits;
        choice.query_rows = static_cast<int>(rows);
        configs.attention[op] = choice;
        return;
      }
    }
  });
  fn.walk([&](AttentionBackwardOp op) {
    AttentionChoice choice;
    if (options.attention_backend != AttentionBackend::kLlmc && !op.getMask()) {
      absl::StatusOr<rt::AttentionSpec> spec = cudnnAttentionSpec(op);
      choice.cudnn = spec.ok() && rt::CudnnAttentionUnsupportedReason(*spec).empty();
    }
    configs.attention[op] = choice;
  });
  return configs;
}

void llmc::annotateKernelConfigs(func::FuncOp fn, const KernelConfigs &configs) {
  Builder b(fn.getContext());
  fn->setAttr(kKernelConfigsAttr,
              b.getDictionaryAttr(
                  {b.getNamedAttr("elementwise_unroll",
                                  b.getI64IntegerAttr(configs.elementwise_unroll)),
                   b.getNamedAttr("gemv_unroll", b.getI64IntegerAttr(configs.gemv_unroll))}));
  fn.walk([&](AttentionOp op) {
    auto it = configs.attention.find(op);
    if (it == configs.attention.end())
      return;
    const AttentionChoice &c = it->second;
    SmallVector<NamedAttribute> fields;
    if (c.kernel == AttentionChoice::kFlashDecode) {
      fields = {b.getNamedAttr("kernel", b.getStringAttr("flash_decode")),
                b.getNamedAttr("splits", b.getI64IntegerAttr(c.splits))};
      if (c.fused_combine)
        fields.push_back(b.getNamedAttr("fused_combine", b.getUnitAttr()));
    } else {
      fields = {b.getNamedAttr("kernel", b.getStringAttr("flash_attention")),
                b.getNamedAttr("tile", b.getStringAttr(cu::AttentionTileName(c.tile))),
                b.getNamedAttr("cudnn", b.getBoolAttr(c.cudnn))};
    }
    op->setAttr(kKernelConfigAttr, b.getDictionaryAttr(fields));
  });
  fn.walk([&](VarlenAttentionOp op) {
    auto it = configs.attention.find(op);
    if (it == configs.attention.end())
      return;
    op->setAttr(kKernelConfigAttr,
                b.getDictionaryAttr(
                    {b.getNamedAttr("kernel", b.getStringAttr("flash_attention")),
                     b.getNamedAttr("tile", b.getStringAttr(cu::AttentionTileName(it->second.tile))),
                     b.getNamedAttr("cudnn", b.getBoolAttr(false))}));
  });
  fn.walk([&](PagedAttentionOp op) {
    auto it = configs.attention.find(op);
    if (it == configs.attention.end())
      return;
    op->setAttr(kKernelConfigAttr,
                b.getDictionaryAttr(
                    {b.getNamedAttr("kernel", b.getStringAttr("paged_flash_decode")),
                     b.getNamedAttr("splits", b.getI64IntegerAttr(it->second.splits)),
                     b.getNamedAttr("query_rows",
                                    b.getI64IntegerAttr(it->second.query_rows))}));
  });
  fn.walk([&](AttentionBackwardOp op) {
    auto it = configs.attention.find(op);
    if (it == configs.attention.end())
      return;
    op->setAttr(kKernelConfigAttr,
                b.getDictionaryAttr(
                    {b.getNamedAttr("kernel", b.getStringAttr("flash_attention_backward")),
                     b.getNamedAttr("cudnn", b.getBoolAttr(it->second.cudnn))}));
  });
}

absl::StatusOr<KernelConfigs>
llmc::decidedKernelConfigs(func::FuncOp fn, const LowerOptions &options) {
  auto fnConfigs = fn->getAttr(kKernelConfigsAttr);
  if (!fnConfigs)
    return selectKernelConfigs(fn, options);
  auto invalid = [](Operation *op, const std::string &attr, Attribute value,
                    const char *expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: ", describeOp(op), " has ", attr, " = ", printAttribute(value),
        "; expected ", expected));
  };
  KernelConfigs configs;
  auto dict = dyn_cast<DictionaryAttr>(fnConfigs);
  auto unroll = dict ? dict.getAs<IntegerAttr>("elementwise_unroll") : nullptr;
  // gemv_unroll may be absent (IR written before it existed): the default.
  auto gemvUnroll = dict ? dict.getAs<IntegerAttr>("gemv_unroll") : nullptr;
  auto inRange = [](IntegerAttr a, int64_t hi) {
    return a.getType().isSignlessInteger(64) && a.getInt() >= 1 && a.getInt() <= hi;
  };
  if (!unroll || !inRange(unroll, 4) || (gemvUnroll && !inRange(gemvUnroll, cu::kGemvMaxUnroll)) ||
      dict.size() != (gemvUnroll ? 2u : 1u))
    return invalid(fn, kKernelConfigsAttr.str(), fnConfigs,
                   "{elementwise_unroll = <1, 2, 3 or 4>, gemv_unroll = <1..16>}");
  configs.elementwise_unroll = static_cast<int>(unroll.getInt());
  if (gemvUnroll)
    configs.gemv_unroll = static_cast<int>(gemvUnroll.getInt());
  absl::Status status;
  fn.walk([&](AttentionOp op) {
    if (!status.ok())
      return;
    Attribute attr = op->getAttr(kKernelConfigAttr);
    auto config = dyn_cast_or_null<DictionaryAttr>(attr);
    auto kernel = config ? config.getAs<StringAttr>("kernel") : nullptr;
    AttentionChoice choice;
    if (kernel && kernel.getValue() == "flash_decode") {
      auto splits = config.getAs<IntegerAttr>("splits");
      Attribute fused = config.get("fused_combine");
      if (splits && splits.getType().isSignlessInteger(64) &&
          (!fused || isa<UnitAttr>(fused)) && config.size() == (fused ? 3u : 2u) &&
          splits.getInt() >= 1 && splits.getInt() <= 256) {
        choice.kernel = AttentionChoice::kFlashDecode;
        choice.splits = static_cast<int>(splits.getInt());
        choice.fused_combine = fused != nullptr;
        configs.attention[op] = choice;
        return;
      }
    } else if (kernel && kernel.getValue() == "flash_attention") {
      auto tile = config.getAs<StringAttr>("tile");
      auto cudnn = config.getAs<BoolAttr>("cudnn");
      std::string error;
      if (tile && cudnn && config.size() == 3 &&
          cu::ParseAttentionTile(tile.getValue().str(), &choice.tile, &error)) {
        choice.kernel = AttentionChoice::kFlashAttention;
        choice.cudnn = cudnn.getValue();
        configs.attention[op] = choice;
        return;
      }
    }
    if (!attr) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: ", describeOp(op), " has no ", kKernelConfigAttr.str(),
          " in a function whose kernel configurations were selected (",
          kKernelConfigsAttr.str(), "); run llmc-select-kernel-configs again"));
      return;
    }
    status = invalid(op, kKernelConfigAttr.str(), attr,
                     "{kernel = \"flash_decode\", splits = <1..256>[, fused_combine]} or "
                     "{kernel = \"flash_attention\", tile = "
                     "\"bm<M>_bn<N>_w<warps>_s<stages>[_gh]\", cudnn = <bool>}");
  });
  if (!status.ok())
    return status;
  // Varlen attention: FlashAttention-2 (llmc's kernel; cuDNN not attached).
  fn.walk([&](VarlenAttentionOp op) {
    if (!status.ok())
      return;
    Attribute attr = op->getAttr(kKernelConfigAttr);
    auto config = dyn_cast_or_null<DictionaryAttr>(attr);
    auto kernel = config ? config.getAs<StringAttr>("kernel") : nullptr;
    auto tile = config ? config.getAs<StringAttr>("tile") : nullptr;
    auto cudnn = config ? config.getAs<BoolAttr>("cudnn") : nullptr;
    AttentionChoice choice;
    std::string error;
    if (!kernel || kernel.getValue() != "flash_attention" || !tile || !cudnn ||
        cudnn.getValue() || config.size() != 3 ||
        !cu::ParseAttentionTile(tile.getValue().str(), &choice.tile, &error)) {
      status = attr ? invalid(op, kKernelConfigAttr.str(), attr,
                              "{kernel = \"flash_attention\", tile = "
                              "\"bm<M>_bn<N>_w<warps>_s<stages>[_gh]\", cudnn = false}")
                    : absl::InvalidArgumentError(absl::StrCat(
                          "cuda backend: ", describeOp(op), " has no ", kKernelConfigAttr.str(),
                          " in a function whose kernel configurations were selected (",
                          kKernelConfigsAttr.str(), "); run llmc-select-kernel-configs again"));
      return;
    }
    configs.attention[op] = choice;
  });
  if (!status.ok())
    return status;
  // Paged attention: absent where no kernel serves it (the lowering says so).
  fn.walk([&](PagedAttentionOp op) {
    if (!status.ok())
      return;
    Attribute attr = op->getAttr(kKernelConfigAttr);
    if (!attr)
      return;
    auto config = dyn_cast<DictionaryAttr>(attr);
    auto kernel = config ? config.getAs<StringAttr>("kernel") : nullptr;
    auto splits = config ? config.getAs<IntegerAttr>("splits") : nullptr;
    auto rows = config ? config.getAs<IntegerAttr>("query_rows") : nullptr;
    auto inRange = [](IntegerAttr a, int64_t hi) {
      return a && a.getType().isSignlessInteger(64) && a.getInt() >= 1 && a.getInt() <= hi;
    };
    if (!kernel || kernel.getValue() != "paged_flash_decode" || !inRange(splits, 256) ||
        !inRange(rows, 16) || config.size() != 3) {
      status = invalid(op, kKernelConfigAttr.str(), attr,
                       "{kernel = \"paged_flash_decode\", splits = <1..256>, query_rows = "
                       "<1..16>}");
      return;
    }
    AttentionChoice choice;
    choice.kernel = AttentionChoice::kFlashDecode;
    choice.splits = static_cast<int>(splits.getInt());
    choice.query_rows = static_cast<int>(rows.getInt());
    configs.attention[op] = choice;
  });
  if (!status.ok())
    return status;
  // Backward ops: absent in IR written before they had one (no cuDNN).
  fn.walk([&](AttentionBackwardOp op) {
    if (!status.ok())
      return;
    AttentionChoice choice;
    if (Attribute attr = op->getAttr(kKernelConfigAttr)) {
      auto config = dyn_cast<DictionaryAttr>(attr);
      auto kernel = config ? config.getAs<StringAttr>("kernel") : nullptr;
      auto cudnn = config ? config.getAs<BoolAttr>("cudnn") : nullptr;
      if (!kernel || kernel.getValue() != "flash_attention_backward" || !cudnn ||
          config.size() != 2) {
        status = invalid(op, kKernelConfigAttr.str(), attr,
                         "{kernel = \"flash_attention_backward\", cudnn = <bool>}");
        return;
      }
      choice.cudnn = cudnn.getValue();
    }
    configs.attention[op] = choice;
  });
  if (!status.ok())
    return status;
  return configs;
}

namespace {

/// llmc-select-kernel-configs: selectKernelConfigs with the pass options,
/// written into IR.
struct SelectKernelConfigsPass
    : llmc::impl::SelectKernelConfigsPassBase<SelectKernelConfigsPass> {
  using SelectKernelConfigsPassBase::SelectKernelConfigsPassBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.isExternal())
      return;
    LowerOptions options;
    absl::StatusOr<AttentionBackend> backend = ParseAttentionBackend(attentionBackend);
    if (!backend.ok()) {
      fn.emitOpError() << "llmc-select-kernel-configs: attention-backend: "
                       << std::string(backend.status().message());
      return signalPassFailure();
    }
    options.attention_backend = *backend;
    if (!attentionTile.empty()) {
      cu::AttentionTile tile;
      std::string error;
      if (!cu::ParseAttentionTile(attentionTile, &tile, &error)) {
        fn.emitOpError() << "llmc-select-kernel-configs: attention-tile: " << error;
        return signalPassFailure();
      }
      options.attention_tile = tile;
    }
    if (elementwiseUnroll < 1 || elementwiseUnroll > 4) {
      fn.emitOpError() << "llmc-select-kernel-configs: elementwise-unroll: "
                          "expected 1, 2, 3 or 4, found "
                       << static_cast<int64_t>(elementwiseUnroll);
      return signalPassFailure();
    }
    options.elementwise_unroll = static_cast<int>(elementwiseUnroll);
    if (gemvUnroll < 1 || gemvUnroll > cu::kGemvMaxUnroll) {
      fn.emitOpError() << "llmc-select-kernel-configs: gemv-unroll: expected 1..16, found "
                       << static_cast<int64_t>(gemvUnroll);
      return signalPassFailure();
    }
    options.gemv_unroll = static_cast<int>(gemvUnroll);
    if (flashDecodeCombine != "fused" && flashDecodeCombine != "kernel") {
      fn.emitOpError() << "llmc-select-kernel-configs: flash-decode-combine: expected fused "
                          "or kernel, found '"
                       << flashDecodeCombine << "'";
      return signalPassFailure();
    }
    options.flash_decode_fused_combine = flashDecodeCombine == "fused";
    // The rule reads static shapes and kernel element types.
    WalkResult shapes = fn.walk([&](AttentionOp op) {
      for (Value v : op->getOperands()) {
        auto t = dyn_cast<RankedTensorType>(v.getType());
        if (!t || !t.hasStaticShape() || !toRuntimeDType(t.getElementType()).ok()) {
          op.emitOpError() << "llmc-select-kernel-configs expects static shapes and "
                              "element types codegen supports, found "
                           << v.getType();
          return WalkResult::interrupt();
        }
      }
      return WalkResult::advance();
    });
    if (shapes.wasInterrupted())
      return signalPassFailure();
    annotateKernelConfigs(fn, selectKernelConfigs(fn, options));
  }
};

} // namespace

std::unique_ptr<Pass> llmc::createSelectKernelConfigsPass(const LowerOptions &options) {
  SelectKernelConfigsPassOptions o;
  switch (options.attention_backend) {
  case AttentionBackend::kAuto: o.attentionBackend = "auto"; break;
  case AttentionBackend::kLlmc: o.attentionBackend = "llmc"; break;
  case AttentionBackend::kCudnn: o.attentionBackend = "cudnn"; break;
  }
  if (options.attention_tile)
    o.attentionTile = cu::AttentionTileName(*options.attention_tile);
  o.elementwiseUnroll = options.elementwise_unroll;
  o.gemvUnroll = options.gemv_unroll;
  o.flashDecodeCombine = options.flash_decode_fused_combine ? "fused" : "kernel";
  return createSelectKernelConfigsPass(o);
}
