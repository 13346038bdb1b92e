//===- KernelConfigs.h - kernel configurations chosen in IR -----*- C++ -*-===//
//
// The configuration of a generated kernel that is a choice, not a
// consequence of shapes and types, is chosen once by the
// `llmc-select-kernel-configs` pass, whose options are the tuning knobs
// (--attention-backend, --attention-tile, --ew-unroll, --gemv-unroll and
// their variables,
// read once by llmc::SetTuningKnobs), and written into IR:
//
//  - on each llm.attention, `llm.kernel_config`, one of
//      {kernel = "flash_decode", splits = N [, fused_combine]}
//          split-KV flash-decoding (Target/CUDA/Decode.h) in N splits of
//          the KV range (1..256), then the combine kernel, or with
//          `fused_combine` the split kernel's last block per (batch, kv
//          head) combines (one launch; a zeroed semaphore buffer);
//      {kernel = "flash_attention", tile = "bm64_bn64_w4_s2", cudnn = B}
//          FlashAttention-2 (Dao 2023) with that tile when it runs on tensor
//          cores (cu::AttentionTileName's form); with `cudnn` the launch
//          also carries cuDNN's fused SDPA as the runtime's first choice
//          (rt::AttentionSpec), the kernel staying its fallback;
//  - on the function, `llm.kernel_configs = {elementwise_unroll = U,
//    gemv_unroll = G}`: the 16-byte vectors per input each thread of an
//    elementwise kernel loads before using any (1..4), and the 16-byte
//    weight loads each lane of a decode GEMV has in flight (1..16; results
//    are bitwise the same for every G).
//
// The lowering reads them back (decidedKernelConfigs) and checks each where
// it emits the kernel, so a configuration written in IR is either computed
// exactly or an error naming the op; it never re-decides.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_LIB_COMPILER_KERNELCONFIGS_H
#define LLMC_LIB_COMPILER_KERNELCONFIGS_H

#include "LLM/IR/LLMOps.h"
#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/Target/CUDA/KernelLibrary.h"
#include "llmc/runtime/Executable.h"

#include "absl/status/statusor.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

#include <array>
#include <optional>

namespace llmc {

inline constexpr llvm::StringLiteral kKernelConfigAttr = "llm.kernel_config";
inline constexpr llvm::StringLiteral kKernelConfigsAttr = "llm.kernel_configs";

/// The kernel of one llm.attention and its configuration.
struct AttentionChoice {
  enum Kernel { kFlashDecode, kFlashAttention };
  Kernel kernel = kFlashAttention;
  /// kFlashDecode: KV splits, 1..256.
  int splits = 1;
  /// kFlashDecode of an llm.attention: the split kernel's last block per
  /// (batch, kv head) combines the splits (cu::DecodeConfig::fused_combine).
  bool fused_combine = false;
  /// kFlashDecode of an llm.paged_attention: query rows a block takes at a
  /// time (cu::DecodeConfig::q_len), 1..16.
  int query_rows = 1;
  /// kFlashAttention: the tensor-core kernel's tile (ignored by the
  /// one-warp-per-row kernel that other types and head dims run).
  cuda::AttentionTile tile;
  /// kFlashAttention: carry cuDNN's fused SDPA as the runtime's first choice.
  bool cudnn = false;
};

struct KernelConfigs {
  int elementwise_unroll = cuda::kElementwiseUnroll;
  int gemv_unroll = cuda::kGemvUnroll;
  llvm::DenseMap<mlir::Operation *, AttentionChoice> attention;
};

/// The flash-decoding configuration of `op` (type, head dim, GQA group,
/// query length, causal, KV layout, mask type; kv_len read from the
/// argument).
cuda::DecodeConfig flashDecodeConfig(llm::AttentionOp op);

/// The paged flash-decoding configuration of `op` taking `queryRows` query
/// rows at a time (cu::DecodeConfig::paged).
cuda::DecodeConfig pagedDecodeConfig(llm::PagedAttentionOp op, int64_t queryRows);

/// Whether the flash-decoding kernels compute `op`: at most 16 queries, a
/// float mask (if any) dense along the keys, and a configuration cu::FlashDecodeSupported takes. What a
/// `flash_decode` llm.kernel_config needs; the rule below picks it only
/// where it is the faster kernel.
bool flashDecodeServes(llm::AttentionOp op);
/// op's mask strides {batch, q head, query} in elements over its dense key
/// dimension (0 along broadcast dimensions; all 0 without a mask), or
/// nullopt when the mask broadcasts along the key dimension.
std::optional<std::array<int64_t, 3>> attentionMaskStrides(llm::AttentionOp op);

/// cuDNN's SDPA for `op` (shapes, causal, scale, type; no buffers yet);
/// InvalidArgument for an element type the runtime does not have.
absl::StatusOr<rt::AttentionSpec> cudnnAttentionSpec(llm::AttentionOp op);
/// The same for `op`'s backward (spec.backward, with an lse).
absl::StatusOr<rt::AttentionSpec> cudnnAttentionSpec(llm::AttentionBackwardOp op);

/// The rule llmc-select-kernel-configs applies with the knobs of `options`
/// (attention_backend, attention_tile, elementwise_unroll, gemv_unroll) to a
/// shape-specialized function:
///  - flash-decoding for an attention it serves (flashDecodeServes) that
///    reads `kv_len` or has one query, in cu::FlashDecodeNumSplits splits; FlashAttention-2 otherwise, with
///    the forced tile or cu::DefaultAttentionTile (heads or batch over
///    65535: not q-tile-fastest), and cuDNN unless the backend is llmc, the
///    attention has a mask or cuDNN does not take it
///    (rt::CudnnAttentionUnsupportedReason);
///  - for an attention backward (FlashAttention-2's backward kernels),
///    cuDNN's fused SDPA backward on the same conditions;
///  - for an llm.varlen_attention, FlashAttention-2 with the forced or the
///    default tile (no cuDNN);
///  - for an llm.paged_attention, paged flash-decoding taking ceil(T / B)
///    query rows at a time (at most 16, fewer where no register layout fits)
///    in cu::FlashDecodeNumSplits splits of max_pages * page_size keys;
///  - the elementwise unroll of `options`.
KernelConfigs selectKernelConfigs(mlir::func::FuncOp fn, const LowerOptions &options);

/// Writes `configs` into `fn` (kKernelConfigAttr on every attention it
/// holds, kKernelConfigsAttr on the function).
void annotateKernelConfigs(mlir::func::FuncOp fn, const KernelConfigs &configs);

/// The configurations of `fn` as decided, for the lowering: read from the
/// attributes of a function that has kKernelConfigsAttr (InvalidArgument
/// naming the op for a malformed attribute or an attention without one),
/// else selectKernelConfigs(fn, options).
absl::StatusOr<KernelConfigs> decidedKernelConfigs(mlir::func::FuncOp fn,
                                                   const LowerOptions &options);

} // namespace llmc

#endif // LLMC_LIB_COMPILER_KERNELCONFIGS_H
