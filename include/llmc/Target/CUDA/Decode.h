//===- Decode.h - bandwidth-oriented flash-decoding kernels -----*- C++ -*-===//
//
// Split-KV flash-decoding (Dao, Haziza, Massa, Sizov 2023, "Flash-Decoding
// for long-context inference"): short queries (q_len 1..16) against a long
// KV cache. Phase 1 (split) streams one key range of one (batch, kv head)
// with coalesced 16-byte row loads; phase 2 (combine) merges the splits with
// their running (max, sum), as in FlashAttention's online softmax (Milakov &
// Gimelshein 2018, exp2 domain).
//
// Layouts (contiguous, row-major):
//   q, out       [B, q_len, Hq, D]      T = bf16, f16 or f32
//   k, v cache   [B, Smax, Hkv, D]      only rows < kv_len are read
//   partial_acc  float [B, Hq, q_len, splits, D]   unnormalized sum p*V
//   partial_ml   float [B, Hq, q_len, splits, 2]   (max in log2 units, sum p)
// GQA: q head h uses kv head h / (Hq / Hkv). Causal (q_len > 1): query i sees
// keys j <= i + kv_len - q_len (the queries are the last q_len positions).
// Rows with no visible key give 0.
//
// Kernel arguments (identical to the KernelLibrary.h Decode* kernels, so a
// caller switches by name only):
//   split:   (float* partial_acc, float* partial_ml, const T* q, const T* k,
//             const T* v, const void* kv_len_ptr, long long kv_len_arg,
//             long long max_seq /*Smax*/, int heads_kv, float scale,
//             int num_splits
//             [, const MaskT* mask, long long mask_stride_b,
//              long long mask_stride_h, long long mask_stride_q]) -- the
//             mask arguments only with DecodeConfig::has_mask
// With DecodeConfig::kv_hnd the cache is [B, Hkv, Smax, D] (PyTorch SDPA's
// layout) instead of [B, Smax, Hkv, D].
//   combine: (T* out, const float* partial_acc, const float* partial_ml,
//             int heads_kv, int num_splits)
// With DecodeConfig::fused_combine the split kernel also takes
//   (..., unsigned int* semaphores /*[B, Hkv], zero*/, T* out)
// and its last block per (batch, kv head) does the combine (no second
// launch; semaphores are left zero, so one zeroed buffer serves every
// launch of a step).
// kv_len = kv_len_arg (KvLenSource::kArg), *(int32/int64*)kv_len_ptr, or
// ((int32/int64*)kv_len_ptr)[b] for the per-batch sources; clamped to Smax.
//
// Paged (DecodeConfig::paged; llm.paged_attention):
//   q, out       [T, Hq, D]   new tokens packed by sequence: sequence b's
//                n_b rows from cu_seqlens[b] (cu_seqlens [B + 1])
//   k, v pages   [P, page_size, Hkv, D]: key position j of sequence b is row
//                j % page_size of page block_table[b * max_pages + j / page_size]
//   partial_acc  float [T, Hq, splits, D], partial_ml float [T, Hq, splits, 2]
//   split:   (float* partial_acc, float* partial_ml, const T* q, const T* k,
//             const T* v, const BtT* block_table, const CuT* cu_seqlens,
//             const LenT* seq_lens, long long max_pages, long long num_pages,
//             int heads_kv, float scale, int num_splits), grid (splits, Hkv, B)
//   combine: the dense one with q_len 1 and batch T (grid T * Hq).
// The keys of sequence b are seq_lens[b] (clamped to max_pages * page_size);
// its new tokens are the last n_b positions, taken q_len rows at a time
// (causal: row i sees keys j <= seq_lens[b] - n_b + i). A page id outside
// [0, num_pages) reads as zeros (nothing out of bounds; the reference
// executor reports it).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_TARGET_CUDA_DECODE_H
#define LLMC_TARGET_CUDA_DECODE_H

#include "llmc/Target/CUDA/KernelLibrary.h"

#include <string>
#include <utility>

namespace llmc::cuda {

/// How one split block maps the work onto its 4 warps (derived from the
/// DecodeConfig alone; see FlashDecodeGeometryOf).
///  * A "lane group" of `lanes` lanes reads one K (and V) row: lane l of the
///    group loads vectors l, l + lanes, ... (`vec` elements, <= 16 bytes
///    each), so one warp load instruction covers 32 / lanes whole rows.
///    Dot products are reduced with xor shuffles inside the group.
///  * Each lane group keeps its own online-softmax state (max, sum, O) for
///    its keys; groups and warps are merged once at the end of the block.
///  * `row_sets` > 1 splits the query rows (group_size * q_len) over warps
///    when Q and O would not fit in registers; warps of different row sets
///    read the same keys (the second read is usually an L1/L2 hit).
///  * `unroll` key slots per lane per tile; a tile's K and V loads are all
///    issued before the first is used (memory-level parallelism).
struct FlashDecodeGeometry {
  int lanes = 16;        // lanes per key row (power of two, 1..32)
  int vec = 8;           // elements per load (vec * K/V element size <= 16 bytes: up to 16 for fp8 K/V)
  int vecs_per_lane = 1; // ceil(head_dim / vec / lanes)
  int row_sets = 1;      // 1, 2 or 4
  int rows_per_warp = 1; // ceil(group_size * q_len / row_sets)
  int unroll = 1;        // key slots per lane per tile
  int streams = 4;       // 4 / row_sets warps that split the keys of a block
  int tile_keys = 8;     // keys per warp per tile = unroll * 32 / lanes
};

/// Geometry for cfg. InvalidArgument outside the ranges FlashDecodeSupported
/// names; Unimplemented when no register layout fits (e.g. bf16, head dim
/// 16, group 5, 13 queries).
absl::StatusOr<FlashDecodeGeometry> FlashDecodeGeometryOf(const DecodeConfig &cfg);
/// "l16v8n1r1u4" style tag of a geometry (part of the kernel names).
std::string FlashDecodeGeometryName(const FlashDecodeGeometry &g);

/// Whether the kernels serve cfg: bf16/f16/f32, 1 <= head_dim <= 512,
/// group_size >= 1, q_len >= 1, group_size * q_len * head_dim <= 4096 (fp32
/// Q and O of a block's rows spread over 128 threads' registers), and a
/// register layout fits (FlashDecodeGeometryOf; with a mask at most 8 query
/// rows per warp). Otherwise use EmitAttention.
bool FlashDecodeSupported(const DecodeConfig &cfg);

/// Both phases for cfg. Split block = (split, kv head, batch) with 128
/// threads; keys [split * chunk, min((split + 1) * chunk, kv_len)) where
/// chunk = ceil(kv_len / num_splits) rounded up to the geometry's tile_keys.
/// Combine block = one query row (b, h, i), 128 threads.
/// Errors: those of FlashDecodeGeometryOf (see KernelLibrary.h for the rest).
absl::StatusOr<DecodeKernels> EmitFlashDecode(const DecodeConfig &cfg);

/// Split count (>= 1) for a cache of max_kv_len rows: enough split blocks to
/// give every SM about 4 (memory-level parallelism), but at least 2 tiles per
/// warp per split, at most 256 splits. Errors: those of FlashDecodeGeometryOf.
absl::StatusOr<int> FlashDecodeNumSplits(const DecodeConfig &cfg, int64_t batch,
                         int64_t heads_kv, int64_t max_kv_len,
                         int num_sms = kAssumedNumSMs);
absl::StatusOr<LaunchDims> FlashDecodeSplitLaunch(const DecodeConfig &cfg, int64_t batch,
                                  int64_t heads_kv, int num_splits);
absl::StatusOr<LaunchDims> FlashDecodeCombineLaunch(const DecodeConfig &cfg, int64_t batch,
                                    int64_t heads_kv);
/// Workspace bytes: {partial_acc, partial_ml}.
std::pair<int64_t, int64_t> FlashDecodeWorkspaceBytes(const DecodeConfig &cfg,
                                                      int64_t batch,
                                                      int64_t heads_kv,
                                                      int num_splits);

} // namespace llmc::cuda

#endif // LLMC_TARGET_CUDA_DECODE_H
