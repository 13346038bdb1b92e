//===- LowerAttention.cpp - attention ---------------------------------------===//

#include "Lowering.h"

#include <limits>

namespace llmc::codegen {

/// Checks the tensor-core tile of `cfg` (chosen by
/// llmc-select-kernel-configs: the forced tile or cu::DefaultAttentionTile,
/// whose rule comes from `bench/attn_sweep.sh` on the H200; every tile
/// listed there is correct, see test/unit/kernels EmuTile and
/// Attention.AllTilesCompileWithoutSpills).
static absl::Status checkAttentionTile(Operation *op, const cu::AttentionConfig &cfg) {
  std::string why;
  if (!cu::AttentionUsesTensorCores(cfg) || cu::AttentionTileSupported(cfg, &why))
    return absl::OkStatus();
  cu::AttentionTile rule = cu::DefaultAttentionTile(cfg.head_dim);
  rule.qtile_fastest = cfg.tile.qtile_fastest;
  return unsupported(op, (cfg.tile == rule ? ""
                                           : "the tile of its llm.kernel_config "
                                             "(from --attention-tile or "
                                             "LLMC_ATTN_CONFIG): ") +
                             why);
}

/// The softmax scale of an attention op: its `scale` or 1/sqrt(head dim).
static float softmaxScale(std::optional<APFloat> scale, int64_t d) {
  return scale ? static_cast<float>(scale->convertToDouble())
               : static_cast<float>(1.0 / std::sqrt(double(d)));
}

/// Shapes of an attention training op: q [b, sq, hq, d], k [b, skv, hkv, d].
struct TrainingDims {
  int64_t b, sq, hq, d, skv, hkv;
};

/// The dims of a training op (attention_logsumexp, attention_backward), or
/// an error when it has a mask: llmc-decompose-attention decomposes masked
/// ones, so the fused kernels never take one.
template <typename OpT>
static absl::StatusOr<TrainingDims> trainingDims(OpT op) {
  if (op.getMask())
    return unsupported(op, "a mask (llmc-decompose-attention decomposes masked "
                           "attention training ops; run it first)");
  auto q = tensorType(op.getQuery()), k = tensorType(op.getKey());
  return TrainingDims{q.getDimSize(0), q.getDimSize(1), q.getDimSize(2),
                      q.getDimSize(3), k.getDimSize(1), k.getDimSize(2)};
}

static absl::StatusOr<AttentionAttachment> cudnnAttachment(AttentionOp op, Value lse,
                                                          Lowering &l);

/// The shape and numerics of cuDNN's attachment from `spec` (no buffers).
static AttentionAttachment attachmentOf(const rt::AttentionSpec &spec) {
  AttentionAttachment a;
  a.b = spec.b, a.sq = spec.sq, a.skv = spec.skv, a.hq = spec.hq, a.hkv = spec.hkv;
  a.d = spec.d, a.causal = spec.causal, a.scale = spec.scale, a.dtype = spec.dtype;
  a.backward = spec.backward;
  return a;
}

/// attention(q, k, v [, mask, kv_len]) => flash-decoding (split + combine, or
/// the split kernel alone with its combine fused) or
/// one FlashAttention-2 kernel, with cuDNN's fused attention attached when
/// its llm.kernel_config asks for it. `lse` (optional): the f32 [B, Hq, Sq]
/// result of the llm.attention_logsumexp the same FlashAttention-2 launch
/// writes (attentionStatsPair holds; the caller checked the kernel choice).
static absl::Status lowerAttentionWith(AttentionOp op, Value lse, Lowering &l) {
  auto q = tensorType(op.getQuery()), k = tensorType(op.getKey());
  int64_t b = q.getDimSize(0), sq = q.getDimSize(1), hq = q.getDimSize(2),
          d = q.getDimSize(3), skv = k.getDimSize(op.kvSeqDim()),
          hkv = k.getDimSize(op.kvHeadsDim());
  float scale = softmaxScale(op.getScale(), d);
  cu::ScalarType dtype = scalarOf(op.getQuery());
  Value kvLen = op.getKvLen();
  auto choice = l.getKernelConfigs().attention.find(op);
  if (choice == l.getKernelConfigs().attention.end())
    return absl::InternalError(absl::StrCat(
        "llmc internal error (please report): ", describe(op),
        " has no kernel configuration"));
  cu::DecodeConfig dc = flashDecodeConfig(op);
  if (choice->second.kernel == AttentionChoice::kFlashDecode) {
    if (!flashDecodeServes(op))
      return unsupported(op, "its llm.kernel_config chooses flash_decode, whose "
                             "kernel takes at most 16 queries, a float mask "
                             "dense along the keys, bf16/f16/f32, head dim <= "
                             "512 and group size x query length x head dim <= "
                             "4096 with a register layout that fits");
    if (kvLen) {
      auto lenType = tensorType(kvLen).getElementType();
      dc.kv_len = lenType.isInteger(32) ? cu::KvLenSource::kDeviceI32
                                        : cu::KvLenSource::kDeviceI64;
    } else {
      dc.kv_len = cu::KvLenSource::kArg;
    }
    dc.fused_combine = choice->second.fused_combine;
    LLMC_ASSIGN_OR_RETURN(cu::DecodeKernels kernels,
                          generated(cu::EmitFlashDecode(dc), op));
    int splits = choice->second.splits;
    auto [accBytes, mlBytes] = cu::FlashDecodeWorkspaceBytes(dc, b, hkv, splits);
    int acc = l.newArenaBuffer(accBytes, l.getStep(), l.getStep());
    int ml = l.newArenaBuffer(mlBytes, l.getStep(), l.getStep());
    std::vector<KernelArg> a1 = {l.bufArg(acc),
                                 l.bufArg(ml),
                                 l.ptrArg(op.getQuery()),
                                 l.ptrArg(op.getKey()),
                                 l.ptrArg(op.getValue()),
                                 kvLen ? l.ptrArg(kvLen) : nullArg(),
                                 i64Arg(skv),
                                 i64Arg(skv),
                                 i32Arg(hkv),
                                 f32Arg(scale),
                                 i32Arg(splits)};
    if (Value mask = op.getMask()) {
      std::array<int64_t, 3> strides = *attentionMaskStrides(op);
      a1.push_back(l.ptrArg(mask));
      for (int64_t stride : strides)
        a1.push_back(i64Arg(stride));
    }
    if (dc.fused_combine) {
      LLMC_ASSIGN_OR_RETURN(int semaphores, l.zeroedSemaphores(b * hkv, op));
      a1.push_back(l.bufArg(semaphores));
      a1.push_back(l.ptrArg(op.getResult()));
    }
    LLMC_ASSIGN_OR_RETURN(
        cu::LaunchDims splitDims,
        generated(cu::FlashDecodeSplitLaunch(dc, b, hkv, splits), op));
    l.launch(l.addKernel(kernels.split), splitDims, std::move(a1), op);
    if (dc.fused_combine)
      return absl::OkStatus();
    std::vector<KernelArg> a2 = {l.ptrArg(op.getResult()), l.bufArg(acc), l.bufArg(ml),
                                 i32Arg(hkv), i32Arg(splits)};
    LLMC_ASSIGN_OR_RETURN(
        cu::LaunchDims combineDims,
        generated(cu::FlashDecodeCombineLaunch(dc, b, hkv), op));
    l.launch(l.addKernel(kernels.combine), combineDims, std::move(a2), op);
    return absl::OkStatus();
  }
  if (kvLen) {
    cu::DecodeConfig unmasked = dc;
    unmasked.has_mask = false;
    std::string why =
        sq > 16 ? absl::StrCat("a query length of ", sq, " (> 16)")
        : !attentionMaskStrides(op)
            ? std::string("a mask broadcast along the key dimension")
        : dc.has_mask && cu::FlashDecodeSupported(unmasked)
            ? absl::StrCat("a mask with group size x query length = ", (hq / hkv) * sq,
                           " query rows per KV head (masked flash-decoding keeps at "
                           "most 8 query rows per warp)")
            : absl::StrCat("head dim ", d, ", group size ", hq / hkv,
                           " and element type ", typeName(q.getElementType()));
    return unsupported(op, "kv_len needs the flash-decoding kernel, which does "
                           "not support " + why +
                           " (it takes bf16/f16/f32, head dim <= 512 and "
                           "group size x query length x head dim <= 4096)");
  }
  cu::AttentionConfig cfg;
  cfg.dtype = dtype;
  cfg.head_dim = d;
  cfg.causal = op.getCausal();
  cfg.kv_hnd = op.getKvHnd();
  cfg.write_lse = static_cast<bool>(lse);
  Value mask = op.getMask();
  std::optional<std::array<int64_t, 3>> maskStrides = attentionMaskStrides(op);
  if (!maskStrides)
    return unsupported(op, "a mask broadcast along the key dimension");
  auto [strideB, strideH, strideQ] = *maskStrides;
  if (mask) {
    cfg.has_mask = true;
    cfg.mask = scalarOf(mask);
  }
  cfg.tile = choice->second.tile;
  if (absl::Status st = checkAttentionTile(op, cfg); !st.ok())
    return st;
  std::vector<KernelArg> args = {l.ptrArg(op.getResult()),
                                 l.ptrArg(op.getQuery()),
                                 l.ptrArg(op.getKey()),
                                 l.ptrArg(op.getValue()),
                                 mask ? l.ptrArg(mask) : nullArg(),
                                 i64Arg(b),
                                 i64Arg(sq),
                                 i64Arg(skv),
                                 i32Arg(hq),
                                 i32Arg(hkv),
                                 f32Arg(scale),
                                 i64Arg(strideB),
                                 i64Arg(strideH),
                                 i64Arg(strideQ)};
  if (lse)
    args.push_back(l.ptrArg(lse));
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims,
                        generated(cu::AttentionLaunch(cfg, b, sq, hq), op));
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code,
                        generated(cu::EmitAttention(cfg), op));
  std::optional<AttentionAttachment> cudnn;
  if (choice->second.cudnn) {
    LLMC_ASSIGN_OR_RETURN(cudnn, cudnnAttachment(op, lse, l));
  }
  l.launch(l.addKernel(code), dims, std::move(args), op, cudnn ? &*cudnn : nullptr);
  return absl::OkStatus();
}

/// The cuDNN alternative of `op`'s attention kernel launch (exec.launch's
/// `attention`), which its llm.kernel_config asked for; the kernel stays as
/// the runtime's fallback.
static absl::StatusOr<AttentionAttachment> cudnnAttachment(AttentionOp op, Value lse,
                                                          Lowering &l) {
  absl::StatusOr<rt::AttentionSpec> specOr = cudnnAttentionSpec(op);
  std::string why = !specOr.ok()     ? std::string(specOr.status().message())
                    : op.getMask()   ? std::string("an additive mask")
                    : op.getKvHnd()  ? std::string("key/value in HND layout (kv_hnd)")
                                     : rt::CudnnAttentionUnsupportedReason(*specOr);
  if (!why.empty())
    return unsupported(op, "its llm.kernel_config asks for cuDNN's fused "
                           "attention, which does not take it: " + why);
  AttentionAttachment a = attachmentOf(*specOr);
  auto ref = [&](Value v) { return l.ptrArg(v).ref; };
  a.q = ref(op.getQuery()), a.k = ref(op.getKey()), a.v = ref(op.getValue());
  a.o = ref(op.getResult());
  if (lse)
    a.lse = ref(lse);
  return a;
}

/// attention_logsumexp(q, k) => the FlashAttention-2 forward kernel's
/// statistics variant (write_lse) with no output (out = null; the key
/// stands in for the value it does not read). llmc-decompose-attention
/// kept the op because the fused kernels take it (no mask, bf16/f16, head
/// dim a multiple of 16 up to 128).
static absl::Status lowerAttentionLogSumExp(AttentionLogSumExpOp op, Lowering &l) {
  LLMC_ASSIGN_OR_RETURN(TrainingDims dims, trainingDims(op));
  auto [b, sq, hq, d, skv, hkv] = dims;
  cu::AttentionConfig cfg;
  cfg.dtype = scalarOf(op.getQuery());
  cfg.head_dim = d;
  cfg.causal = op.getCausal();
  cfg.write_lse = true;
  if (!cu::AttentionUsesTensorCores(cfg) || scalarOf(op.getKey()) != cfg.dtype)
    return unsupported(op, "the training forward kernel takes bf16/f16 query and "
                           "key of one type with a head dim that is a multiple "
                           "of 16 (llmc-decompose-attention decomposes the rest)");
  if (absl::Status st = checkAttentionTile(op, cfg); !st.ok())
    return st;
  if (b * hq * sq == 0)
    return absl::OkStatus();
  std::vector<KernelArg> args = {nullArg(),
                                 l.ptrArg(op.getQuery()),
                                 l.ptrArg(op.getKey()),
                                 l.ptrArg(op.getKey()),
                                 nullArg(),
                                 i64Arg(b),
                                 i64Arg(sq),
                                 i64Arg(skv),
                                 i32Arg(hq),
                                 i32Arg(hkv),
                                 f32Arg(softmaxScale(op.getScale(), d)),
                                 i64Arg(0),
                                 i64Arg(0),
                                 i64Arg(0),
                                 l.ptrArg(op.getResult())};
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims launch,
                        generated(cu::AttentionLaunch(cfg, b, sq, hq), op));
  return l.launchGenerated(cu::EmitAttention(cfg), launch, args, op);
}

/// attention_backward(q, k, v, o, dO, lse) => FlashAttention-2's backward
/// (Dao 2023, Algorithm 2): D = rowsum(dO * o) and dQacc = 0, the main
/// kernel (dK, dV per key tile; dQacc by fp32 atomics), dQ = scale * dQacc.
/// D and dQacc are arena buffers of this step.
static absl::Status lowerAttentionBackward(AttentionBackwardOp op, Lowering &l) {
  LLMC_ASSIGN_OR_RETURN(TrainingDims dims, trainingDims(op));
  auto [b, sq, hq, d, skv, hkv] = dims;
  cu::AttentionBackwardConfig cfg;
  cfg.dtype = scalarOf(op.getQuery());
  cfg.head_dim = d;
  cfg.causal = op.getCausal();
  std::string why;
  if (!cu::AttentionBackwardSupported(cfg, &why))
    return unsupported(op, why + " (llmc-decompose-attention decomposes the rest)");
  for (Value v : {op.getKey(), op.getValue(), op.getOutput(), op.getGradOutput(),
                  op.getGradQuery(), op.getGradKey(), op.getGradValue()})
    if (scalarOf(v) != cfg.dtype)
      return unsupported(op, "operands and results of more than one element type "
                             "(the fused backward takes one; llmc-decompose-"
                             "attention decomposes the rest)");
  LLMC_ASSIGN_OR_RETURN(cu::AttentionBackwardKernels kernels,
                        generated(cu::EmitAttentionBackward(cfg), op));
  const int64_t rows = b * sq * hq, n = rows * d;
  const float scale = softmaxScale(op.getScale(), d);
  const int step = l.getStep();
  int dsum = l.newArenaBuffer(std::max<int64_t>(rows, 1) * 4, step, step);
  int dqAcc = l.newArenaBuffer(std::max<int64_t>(n, 1) * 4, step, step);
  // cuDNN's fused SDPA backward on every launch (they fall back together),
  // with D and dQacc (the same sizes) as its row sum and dQ accumulator.
  std::optional<AttentionAttachment> cudnn;
  auto choice = l.getKernelConfigs().attention.find(op);
  if (choice != l.getKernelConfigs().attention.end() && choice->second.cudnn &&
      rows > 0 && b * skv * hkv > 0) {
    LLMC_ASSIGN_OR_RETURN(rt::AttentionSpec spec, cudnnAttentionSpec(op));
    if (std::string why = rt::CudnnAttentionUnsupportedReason(spec); !why.empty())
      return unsupported(op, "its llm.kernel_config asks for cuDNN's fused attention "
                             "backward, which does not take it: " + why);
    AttentionAttachment a = attachmentOf(spec);
    auto ref = [&](Value v) { return l.ptrArg(v).ref; };
    a.q = ref(op.getQuery()), a.k = ref(op.getKey()), a.v = ref(op.getValue());
    a.o = ref(op.getOutput()), a.lse = ref(op.getLogsumexp());
    a.grad_output = ref(op.getGradOutput());
    a.grad_query = ref(op.getGradQuery()), a.grad_key = ref(op.getGradKey());
    a.grad_value = ref(op.getGradValue());
    a.row_sum = l.bufArg(dsum).ref, a.dq_accum = l.bufArg(dqAcc).ref;
    cudnn = a;
  }
  const AttentionAttachment *attach = cudnn ? &*cudnn : nullptr;
  if (rows > 0) {
    LLMC_ASSIGN_OR_RETURN(cu::LaunchDims prep,
                          generated(cu::AttentionBackwardPrepLaunch(b, sq, hq), op));
    l.launch(l.addKernel(kernels.prep), prep,
             {l.bufArg(dsum), l.bufArg(dqAcc), l.ptrArg(op.getOutput()),
              l.ptrArg(op.getGradOutput()), i64Arg(rows), i64Arg(sq), i32Arg(hq)},
             op, attach);
  }
  if (b * skv * hkv > 0) {
    LLMC_ASSIGN_OR_RETURN(cu::LaunchDims main,
                          generated(cu::AttentionBackwardLaunch(cfg, b, skv, hkv), op));
    l.launch(l.addKernel(kernels.main), main,
             {l.ptrArg(op.getGradKey()), l.ptrArg(op.getGradValue()), l.bufArg(dqAcc),
              l.ptrArg(op.getQuery()), l.ptrArg(op.getKey()), l.ptrArg(op.getValue()),
              l.ptrArg(op.getGradOutput()), l.ptrArg(op.getLogsumexp()), l.bufArg(dsum),
              i64Arg(b), i64Arg(sq), i64Arg(skv), i32Arg(hq), i32Arg(hkv), f32Arg(scale)},
             op, attach);
  }
  if (n > 0) {
    LLMC_ASSIGN_OR_RETURN(cu::LaunchDims fin,
                          generated(cu::AttentionBackwardDqLaunch(n), op));
    l.launch(l.addKernel(kernels.dq), fin,
             {l.ptrArg(op.getGradQuery()), l.bufArg(dqAcc), i64Arg(n), f32Arg(scale)}, op,
             attach);
  }
  return absl::OkStatus();
}

static absl::Status lowerAttention(AttentionOp op, Lowering &l) {
  return lowerAttentionWith(op, Value(), l);
}

/// attention + attention_logsumexp (llmc-form-kernels' attention_stats) =>
/// one FlashAttention-2 launch writing O and lse (cuDNN writing its stats
/// when attached); the two launches of the ops apart where the attention's
/// llm.kernel_config chose flash-decoding.
absl::Status lowerAttentionStats(const AttentionStats &a, Lowering &l) {
  auto choice = l.getKernelConfigs().attention.find(a.attention);
  if (choice != l.getKernelConfigs().attention.end() &&
      choice->second.kernel == AttentionChoice::kFlashDecode) {
    if (absl::Status st = lowerAttention(a.attention, l); !st.ok())
      return st;
    return lowerAttentionLogSumExp(a.stats, l);
  }
  AttentionLogSumExpOp stats = a.stats;
  return lowerAttentionWith(a.attention, stats.getResult(), l);
}

/// paged_attention(q, key pages, value pages, block table, cu_seqlens_q,
/// seq_lens) => paged flash-decoding: split + combine, as its
/// llm.kernel_config chose.
static absl::Status lowerPagedAttention(PagedAttentionOp op, Lowering &l) {
  auto choice = l.getKernelConfigs().attention.find(op);
  if (choice == l.getKernelConfigs().attention.end())
    return unsupported(op, "no paged flash-decoding kernel serves it (it takes bf16/f16/f32, "
                           "head dim <= 512 and group size x head dim <= 4096 with a register "
                           "layout that fits)");
  auto q = tensorType(op.getQuery()), kp = tensorType(op.getKeyPages());
  auto bt = tensorType(op.getBlockTable());
  int64_t t = q.getDimSize(0), d = q.getDimSize(2), hkv = kp.getDimSize(2),
          b = bt.getDimSize(0);
  if (kp.getDimSize(0) > std::numeric_limits<int32_t>::max())
    return unsupported(op, "more than 2^31 - 1 pages (the kernel keeps page ids in 32 bits)");
  if (t == 0 || b == 0)
    return absl::OkStatus();  // no rows to write (the combine's grid is never empty)
  cu::DecodeConfig dc = pagedDecodeConfig(op, choice->second.query_rows);
  LLMC_ASSIGN_OR_RETURN(cu::DecodeKernels kernels, generated(cu::EmitFlashDecode(dc), op));
  // The combine merges each packed row's splits as the dense one does a
  // batch of T single queries.
  cu::DecodeConfig rows = dc;
  rows.paged = false;
  rows.q_len = 1;
  int splits = choice->second.splits;
  auto [accBytes, mlBytes] = cu::FlashDecodeWorkspaceBytes(rows, t, hkv, splits);
  int acc = l.newArenaBuffer(std::max<int64_t>(accBytes, 4), l.getStep(), l.getStep());
  int ml = l.newArenaBuffer(std::max<int64_t>(mlBytes, 4), l.getStep(), l.getStep());
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims splitDims,
                        generated(cu::FlashDecodeSplitLaunch(dc, b, hkv, splits), op));
  std::vector<KernelArg> splitArgs = {
      l.bufArg(acc), l.bufArg(ml), l.ptrArg(op.getQuery()), l.ptrArg(op.getKeyPages()),
      l.ptrArg(op.getValuePages()), l.ptrArg(op.getBlockTable()),
      l.ptrArg(op.getCuSeqlensQ()), l.ptrArg(op.getSeqLens()), i64Arg(bt.getDimSize(1)),
      i64Arg(kp.getDimSize(0)), i32Arg(hkv), f32Arg(softmaxScale(op.getScale(), d)),
      i32Arg(splits)};
  if (op.getKeyScale()) {  // an fp8 KV cache: its per-KV-head scales
    splitArgs.push_back(l.ptrArg(op.getKeyScale()));
    splitArgs.push_back(l.ptrArg(op.getValueScale()));
  }
  l.launch(l.addKernel(kernels.split), splitDims, splitArgs, op);
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims combineDims,
                        generated(cu::FlashDecodeCombineLaunch(rows, t, hkv), op));
  l.launch(l.addKernel(kernels.combine), combineDims,
           {l.ptrArg(op.getResult()), l.bufArg(acc), l.bufArg(ml), i32Arg(hkv), i32Arg(splits)},
           op);
  return absl::OkStatus();
}

/// varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k) => one
/// FlashAttention-2 launch over the packed sequences (grid: the T query rows
/// as tiles x Hq x B; a block past its sequence's rows returns at once), in
/// the tile its llm.kernel_config chose.
static absl::Status lowerVarlenAttention(VarlenAttentionOp op, Lowering &l) {
  auto choice = l.getKernelConfigs().attention.find(op);
  if (choice == l.getKernelConfigs().attention.end())
    return absl::InternalError(absl::StrCat("llmc internal error (please report): ", describe(op),
                                            " has no kernel configuration"));
  auto q = tensorType(op.getQuery()), k = tensorType(op.getKey());
  int64_t t = q.getDimSize(0), hq = q.getDimSize(1), d = q.getDimSize(2), tk = k.getDimSize(0),
          hkv = k.getDimSize(1), b = tensorType(op.getCuSeqlensQ()).getDimSize(0) - 1;
  cu::AttentionConfig cfg;
  cfg.dtype = scalarOf(op.getQuery());
  cfg.head_dim = d;
  cfg.causal = op.getCausal();
  cfg.varlen = true;
  cfg.cu_seqlens_q_type = scalarOf(op.getCuSeqlensQ());
  cfg.cu_seqlens_k_type = scalarOf(op.getCuSeqlensK());
  cfg.tile = choice->second.tile;
  if (absl::Status st = checkAttentionTile(op, cfg); !st.ok())
    return st;
  if (b < 1 || t == 0)
    return absl::OkStatus();  // no rows to write
  LLMC_ASSIGN_OR_RETURN(cu::LaunchDims dims, generated(cu::AttentionLaunch(cfg, b, t, hq), op));
  LLMC_ASSIGN_OR_RETURN(cu::KernelCode code, generated(cu::EmitAttention(cfg), op));
  l.launch(l.addKernel(code), dims,
           {l.ptrArg(op.getResult()), l.ptrArg(op.getQuery()), l.ptrArg(op.getKey()),
            l.ptrArg(op.getValue()), nullArg(), i64Arg(b), i64Arg(t), i64Arg(tk), i32Arg(hq),
            i32Arg(hkv), f32Arg(softmaxScale(op.getScale(), d)), i64Arg(0), i64Arg(0), i64Arg(0),
            l.ptrArg(op.getCuSeqlensQ()), l.ptrArg(op.getCuSeqlensK())},
           op);
  return absl::OkStatus();
}

void populateAttentionLowerings(OpLoweringSet &set) {
  set.add<VarlenAttentionOp>(lowerVarlenAttention);
  set.add<AttentionOp>(lowerAttention);
  set.add<PagedAttentionOp>(lowerPagedAttention);
  set.add<AttentionLogSumExpOp>(lowerAttentionLogSumExp);
  set.add<AttentionBackwardOp>(lowerAttentionBackward);
}

} // namespace llmc::codegen
