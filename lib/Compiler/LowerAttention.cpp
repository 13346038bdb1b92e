//===- LowerAttention.cpp - attention ---------------------------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// Tiling of the tensor-core FlashAttention-2 kernel for one attention shape.
/// Rule (update from `bench/attn_sweep.sh` on the H200; every tile listed
/// there is correct, see test/unit/kernels EmuTile and
/// Attention.AllTilesCompileWithoutSpills):
///   head dim <= 128: 64 x 64 tiles, 4 warps, K/V double-buffered
///   head dim  > 128: 64 x 32 tiles, 4 warps, K/V double-buffered
/// (cu::DefaultAttentionTile). Grid (q tiles, Hq, B) so that a head's CTAs
/// run together and share its K/V in L2, unless B or Hq exceed the 65535
/// limit of grid y/z. `forced` (LowerOptions::attention_tile) replaces the
/// rule for every tensor-core attention, for sweeps.
static absl::Status
chooseAttentionTile(Operation *op, cu::AttentionConfig &cfg, int64_t batch,
                    int64_t heads_q,
                    const std::optional<cu::AttentionTile> &forced) {
  cfg.tile = forced ? *forced : cu::DefaultAttentionTile(cfg.head_dim);
  if (batch > 65535 || heads_q > 65535)
    cfg.tile.qtile_fastest = false;
  std::string why;
  if (cu::AttentionUsesTensorCores(cfg) && !cu::AttentionTileSupported(cfg, &why))
    return unsupported(op, (forced ? "the tile given by --attention-tile or "
                                     "LLMC_ATTN_CONFIG: "
                                   : "") +
                               why);
  return absl::OkStatus();
}

absl::Status Lowering::emitAttention(AttentionOp op) {
  auto q = tensorType(op.getQuery()), k = tensorType(op.getKey());
  int64_t b = q.getDimSize(0), sq = q.getDimSize(1), hq = q.getDimSize(2),
          d = q.getDimSize(3), skv = k.getDimSize(1), hkv = k.getDimSize(2);
  float scale = op.getScale() ? static_cast<float>(op.getScale()->convertToDouble())
                              : static_cast<float>(1.0 / std::sqrt(double(d)));
  cu::ScalarType dtype = scalarOf(op.getQuery());
  Value kvLen = op.getKvLen();
  cu::DecodeConfig dc;
  dc.dtype = dtype;
  dc.head_dim = d;
  dc.group_size = hq / hkv;
  dc.q_len = sq;
  dc.causal = op.getCausal();
  bool decode = !op.getMask() && sq <= 16 && cu::FlashDecodeSupported(dc) &&
                (kvLen || sq == 1);
  if (decode) {
    if (kvLen) {
      auto lenType = tensorType(kvLen).getElementType();
      dc.kv_len = lenType.isInteger(32) ? cu::KvLenSource::kDeviceI32
                                        : cu::KvLenSource::kDeviceI64;
    } else {
      dc.kv_len = cu::KvLenSource::kArg;
    }
    cu::DecodeKernels kernels = cu::EmitFlashDecode(dc);
    int splits = cu::FlashDecodeNumSplits(dc, b, hkv, skv);
    auto [accBytes, mlBytes] = cu::FlashDecodeWorkspaceBytes(dc, b, hkv, splits);
    int acc = newArenaBuffer(accBytes, step, step);
    int ml = newArenaBuffer(mlBytes, step, step);
    std::vector<rt::Arg> a1 = {bufArg(acc), bufArg(ml), ptrArg(op.getQuery()),
                               ptrArg(op.getKey()), ptrArg(op.getValue()),
                               kvLen ? ptrArg(kvLen) : nullArg(), i64Arg(skv),
                               i64Arg(skv), i32Arg(hkv), f32Arg(scale),
                               i32Arg(splits)};
    launch(addKernel(kernels.split), cu::FlashDecodeSplitLaunch(dc, b, hkv, splits),
           std::move(a1), op);
    std::vector<rt::Arg> a2 = {ptrArg(op.getResult()), bufArg(acc), bufArg(ml),
                               i32Arg(hkv), i32Arg(splits)};
    launch(addKernel(kernels.combine), cu::FlashDecodeCombineLaunch(dc, b, hkv),
           std::move(a2), op);
    return absl::OkStatus();
  }
  if (kvLen) {
    std::string why = op.getMask() ? "an additive mask"
                      : sq > 16    ? absl::StrCat("a query length of ", sq, " (> 16)")
                                   : absl::StrCat("head dim ", d, ", group size ",
                                                  hq / hkv, " and element type ",
                                                  typeName(q.getElementType()));
    return unsupported(op, "kv_len needs the flash-decoding kernel, which does "
                           "not support " + why +
                           " (it takes bf16/f16/f32, head dim <= 512 and "
                           "group size x query length x head dim <= 4096)");
  }
  cu::AttentionConfig cfg;
  cfg.dtype = dtype;
  cfg.head_dim = d;
  cfg.causal = op.getCausal();
  int64_t strideB = 0, strideH = 0, strideQ = 0;
  Value mask = op.getMask();
  if (mask) {
    // Right-align the mask to [B, Hq, Sq, Skv]; the key dim must be dense.
    SmallVector<int64_t> ms(tensorType(mask).getShape());
    while (ms.size() < 4)
      ms.insert(ms.begin(), 1);
    if (ms[3] != skv)
      return unsupported(op, "a mask broadcast along the key dimension");
    cfg.has_mask = true;
    cfg.mask = scalarOf(mask);
    strideQ = ms[2] == 1 ? 0 : skv;
    strideH = ms[1] == 1 ? 0 : ms[2] * skv;
    strideB = ms[0] == 1 ? 0 : ms[1] * ms[2] * skv;
  }
  if (absl::Status st = chooseAttentionTile(op, cfg, b, hq, options.attention_tile);
      !st.ok())
    return st;
  std::vector<rt::Arg> args = {ptrArg(op.getResult()), ptrArg(op.getQuery()),
                               ptrArg(op.getKey()), ptrArg(op.getValue()),
                               mask ? ptrArg(mask) : nullArg(), i64Arg(b),
                               i64Arg(sq), i64Arg(skv), i32Arg(hq), i32Arg(hkv),
                               f32Arg(scale), i64Arg(strideB), i64Arg(strideH),
                               i64Arg(strideQ)};
  launch(addKernel(cu::EmitAttention(cfg)), cu::AttentionLaunch(cfg, b, sq, hq),
         std::move(args), op);
  return attachCudnnAttention(op, b, sq, skv, hq, hkv, d, scale);
}

/// Gives the attention kernel launch just emitted a cuDNN alternative
/// (rt::AttentionSpec, Launch::attention) when the backend option allows it
/// and cuDNN takes the shape; the kernel stays as the runtime's fallback.
absl::Status Lowering::attachCudnnAttention(AttentionOp op, int64_t b, int64_t sq,
                                            int64_t skv, int64_t hq, int64_t hkv,
                                            int64_t d, float scale) {
  if (options.attention_backend == AttentionBackend::kLlmc || op.getMask())
    return absl::OkStatus();
  auto dtype = toRuntimeDType(tensorType(op.getQuery()).getElementType());
  if (!dtype.ok())
    return absl::OkStatus();
  rt::AttentionSpec spec;
  spec.b = b, spec.sq = sq, spec.skv = skv, spec.hq = hq, spec.hkv = hkv, spec.d = d;
  spec.causal = op.getCausal();
  spec.scale = scale;
  spec.dtype = *dtype;
  if (!rt::CudnnAttentionUnsupportedReason(spec).empty())
    return absl::OkStatus();
  auto ref = [&](Value v) {
    rt::Arg a = ptrArg(v);
    return rt::BufferRef{a.buffer, a.byte_offset};
  };
  spec.q = ref(op.getQuery()), spec.k = ref(op.getKey()), spec.v = ref(op.getValue());
  spec.o = ref(op.getResult());
  exe.attentions.push_back(spec);
  exe.launches.back().attention = static_cast<int>(exe.attentions.size()) - 1;
  return absl::OkStatus();
}

} // namespace llmc::codegen
