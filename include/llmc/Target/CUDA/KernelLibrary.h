//===- KernelLibrary.h - CUDA C++ source generators for llmc kernels -------===//
//
// Plain C++17, no CUDA or MLIR dependency. Every generator returns a complete
// CUDA C++ translation unit (our own preamble + the kernel) that NVRTC can
// compile without any CUDA header, with exactly one `extern "C" __global__`
// entry whose name is derived deterministically from the configuration (same
// config -> same name and byte-identical source, so kernel caches hit).
//
// Every generator documents the kernel's exact argument list; a companion
// `...Launch()` function returns the grid / block / dynamic shared memory.
// Kernels whose LaunchDims::smem exceeds 48 KiB need the caller to set
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES before launch.
//
// Conventions used by all kernels:
//  * Tensors are dense row-major ("contiguous") unless stated otherwise.
//  * All math is fp32 (accumulation included); results are rounded once to the
//    output type (round-to-nearest-even; fp8 saturates to the finite max).
//  * Pointers: `T*` below means a device pointer to the storage type of the
//    configured ScalarType (see CTypeName). int64 scalars are passed as
//    `long long`, floats as `float`, ints as `int`.
//  * "error flag" arguments are `int*` device pointers; kernels only ever
//    store a nonzero code there (never clear it); nullptr is allowed.
//
// Errors: nothing here throws. A generator that cannot serve a configuration
// returns a status whose message starts "llmc::cuda kernel generator: ":
//  * InvalidArgument: the configuration is outside the generator's documented
//    contract (a field out of its range, a type it does not take, a config
//    its *Supported predicate rejects). The caller's bug or unchecked input.
//  * Unimplemented: a well-formed configuration the kernel cannot serve:
//    sizes beyond its 32-bit indices (every Emit*: a compile-time
//    `static constexpr int` constant over 2^31 - 1), a launch grid beyond
//    CUDA's 2147483647 x 65535 x 65535 blocks (every *Launch), or the limits
//    listed with each generator.
// The predicates and helpers that return plain values (*Supported,
// *NeedsShape, DefaultAttentionTile, ParseAttentionTile, ...) never fail.
//
// See docs/kernels.md for algorithms and limits.
//===----------------------------------------------------------------------===//
#ifndef LLMC_TARGET_CUDA_KERNELLIBRARY_H
#define LLMC_TARGET_CUDA_KERNELLIBRARY_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmc::cuda {

//===----------------------------------------------------------------------===//
// Types shared by all generators
//===----------------------------------------------------------------------===//

enum class ScalarType { f32, f16, bf16, f8e4m3, f8e5m2, i1, i8, i32, i64 };

/// Storage type name used in generated code: "float", "f16", "bf16",
/// "fp8e4m3", "fp8e5m2", "uint8_t" (i1: one byte holding 0 or 1), "int8_t",
/// "int32_t", "int64_t". The non-builtin names are defined by Preamble().
const char *CTypeName(ScalarType t);
/// Short tag used in kernel names: "f32", "f16", "bf16", "e4m3", ...
const char *ScalarTypeTag(ScalarType t);
/// Size in bytes of one element of the storage type.
int ScalarSize(ScalarType t);
bool IsFloatType(ScalarType t); // f32, f16, bf16, f8*
bool IsIntType(ScalarType t);   // i1, i8, i32, i64

struct KernelCode {
  std::string name;   // the single extern "C" __global__ entry
  std::string source; // complete translation unit (Preamble() included)
};

struct LaunchDims {
  unsigned grid[3];
  unsigned block[3];
  unsigned smem; // dynamic shared memory bytes
};

/// Whether `source` (a complete translation unit) is an llmc kernel that calls
/// llmcGridDependencyWait() before its first access to memory an earlier
/// launch may write or read, so the runtime may launch it with programmatic
/// dependent launch (rt::KernelSpec::grid_dependency): true for every kernel
/// the generators build.
bool WaitsForGridDependency(std::string_view source);

/// Header-free preamble prepended to every kernel: integer typedefs, the
/// bf16/f16/fp8 storage structs with conversions (inline PTX; fp8 uses the
/// sm_89+ cvt instructions and a bit-exact software path below sm_89), warp
/// and block reductions, small math helpers, vector load structs.
std::string_view Preamble();

/// Number of SMs assumed when sizing grid-stride launches (H200 = 132).
inline constexpr int kAssumedNumSMs = 132;

//===----------------------------------------------------------------------===//
// 1. Elementwise fusion
//===----------------------------------------------------------------------===//

enum class EwOp {
  add, sub, mul, div, neg, abs, exp, log, tanh, sqrt, rsqrt, pow, maximum,
  minimum, silu, gelu_erf, gelu_tanh, relu, sigmoid, compare, select, cast,
  constant,
  sin, cos  // accurate sinf/cosf (radians), not the __sinf/__cosf intrinsics
};
enum class CmpPredicate { eq, ne, lt, le, gt, ge };

/// How an input is indexed relative to the output (output is contiguous).
enum class InputLayout {
  kContiguous,   // same shape as the output, dense
  kScalar,       // a single element, read at index 0
  kRowBroadcast, // shape [N] broadcast against [..., N]: index = i % N
  kStrided,      // general: runtime per-dim strides in elements, 0 = broadcast
  kTransposed,   // the output with its last two dims swapped: dense [..., C, R]
                 // read as [..., R, C] (a transpose view); makes the kernel tiled
};

struct EwInput {
  ScalarType type = ScalarType::f32;
  InputLayout layout = InputLayout::kContiguous;
};

struct EwNode {
  EwOp op = EwOp::add;
  /// Negative = input index -(i+1); non-negative = earlier node index.
  /// compare: (a, b); select: (cond, a, b); cast/unary: (a); constant: ().
  std::vector<int> operands;
  ScalarType type = ScalarType::f32; // result type (compare: i1)
  double constant = 0.0;             // for EwOp::constant
  CmpPredicate pred = CmpPredicate::eq;
};

struct EwOutput {
  int node = 0;
  ScalarType type = ScalarType::f32;
};

/// Default 16-byte vectors per input in flight per thread in the elementwise
/// fast path (ElementwiseProgram::unroll).
inline constexpr int kElementwiseUnroll = 1;

struct ElementwiseProgram {
  std::vector<EwInput> inputs;
  std::vector<EwNode> nodes;
  std::vector<EwOutput> outputs;
  /// Round every node's result to its type (f16/bf16/fp8 round-to-nearest-
  /// even, i8/i32 wrap), as the unfused graph stores each op's result. This
  /// keeps fused and unfused results identical (llm value semantics); when
  /// false only casts and outputs round (fp32 intermediates).
  bool round_every_node = true;
  /// 16-byte vectors per input each thread loads per iteration of the fast
  /// path before using any, 1..4 (1: one at a time). A tuning knob
  /// (LowerOptions::elementwise_unroll), measured on the GPU.
  int unroll = kElementwiseUnroll;
  /// Some output is written over an input's memory (an in-place update of a
  /// donated argument, `llm.aliasing_output`): the caller guarantees that
  /// such an input is read contiguously, at the index of the output element
  /// being written, so each element is read before its own thread writes
  /// it. The pointers are then not declared __restrict__.
  bool outputs_alias_inputs = false;
};

inline constexpr int kElementwiseMaxRank = 8;
inline constexpr int kElementwiseThreads = 256;

/// Elementwise kernel. Math: float-typed nodes compute in fp32, integer-typed
/// nodes (i1/i8/i32/i64) in 64-bit integers (integer div truncates toward
/// zero, x/0 gives 0); transcendental ops on integer nodes compute in fp32 and
/// truncate. maximum/minimum propagate NaN (as torch.maximum).
///
/// Kernel arguments, in order:
///   OutT_0* out_0, ..., OutT_{k-1}* out_{k-1},
///   const InT_0* in_0, ..., const InT_{n-1}* in_{n-1},
///   long long numel,
///   EwShape shape            (by value; only when some input is kStrided
///                             or kRowBroadcast)
/// EwShape is `long long data[1 + 8 + 8 * n]` = {rank, sizes[8] (output dims,
/// outermost first, unused = 1), strides[n][8] (per input, elements, 0 =
/// broadcast; unused dims/inputs 0)}; build it with PackElementwiseShape.
/// kRowBroadcast uses N = sizes[rank-1].
/// Fast path (all inputs kContiguous/kScalar and all pointers 16-byte aligned):
/// 16-byte vector loads, grid-stride, scalar tail.
/// InvalidArgument: no outputs, unroll outside 1..4, a node with the wrong
/// operand count or an operand that is neither an input nor an earlier node,
/// an output naming no node.
///
/// Tiled form (some input kTransposed; the others kContiguous or kScalar):
/// the output is a batch of row-major [rows, cols] matrices and each
/// kTransposed input the dense [cols, rows] matrices of the same batch, as
/// a transposed operand of a GEMM is written into its cuBLASLt layout (the
/// quantizing cast of an fp8 GEMM operand, docs/fp8.md). A block takes one
/// 64 x 64 tile (kTransposeTile): it reads every kTransposed input's tile
/// along the input's rows (coalesced; 16-byte vectors where a tile row is
/// full and its start 16-byte aligned) into shared memory, then evaluates the
/// program along the output's rows, each thread 4 consecutive elements of a
/// row (one 4-element store where the row is full and aligned). Same math
/// as the other forms, element for element.
/// Kernel arguments, in order:
///   OutT_0* out_0, ..., const InT_0* in_0, ..., long long numel,
///   long long rows, long long cols
/// (numel = batch * rows * cols); launch: ElementwiseTransposedLaunch.
/// InvalidArgument also: a tiled program with a kStrided or kRowBroadcast
/// input, or whose kTransposed tiles exceed 48 KiB of shared memory
/// (ElementwiseTiledFits).
absl::StatusOr<KernelCode> EmitElementwise(const ElementwiseProgram &prog);
/// Grid-stride launch of a non-tiled program; InvalidArgument for a tiled one.
absl::StatusOr<LaunchDims> ElementwiseLaunch(const ElementwiseProgram &prog, int64_t numel);
/// Whether some input is kTransposed (the tiled form).
bool ElementwiseTiled(const ElementwiseProgram &prog);
/// Whether the shared-memory tiles of the kTransposed inputs fit in 48 KiB
/// (64 x 65 elements each: two f32, four bf16, eight fp8 inputs).
bool ElementwiseTiledFits(const ElementwiseProgram &prog);
/// Grid (ceil(rows / 64), ceil(cols / 64), batch) of kTransposeThreads
/// threads: consecutive blocks take consecutive row tiles, i.e. consecutive
/// 64-element pieces of the same rows of a transposed input (the input's
/// contiguous dimension), so the blocks in flight read long contiguous runs
/// of each input row (their writes are 64-element pieces of successive
/// output rows). Unimplemented beyond CUDA's grid: more than 65535 column
/// tiles (4,194,240 columns; the tokens of an fp8 weight gradient's
/// operand) or batches, where the lowering keeps the strided form.
absl::StatusOr<LaunchDims> ElementwiseTransposedLaunch(int64_t batch, int64_t rows,
                                                       int64_t cols);
/// True when the kernel takes the trailing EwShape argument.
bool ElementwiseNeedsShape(const ElementwiseProgram &prog);
/// Packs the EwShape argument. `in_strides[i]` may be empty for inputs that
/// are not kStrided. Returns 1 + 8 + 8 * inputs.size() int64 values.
/// Unimplemented: out_sizes of rank outside 1..8 (kElementwiseMaxRank);
/// InvalidArgument: a kStrided input without `rank` strides.
absl::StatusOr<std::vector<int64_t>>
PackElementwiseShape(const ElementwiseProgram &prog,
                     const std::vector<int64_t> &out_sizes,
                     const std::vector<std::vector<int64_t>> &in_strides);

//===----------------------------------------------------------------------===//
// 2./3. RMSNorm, LayerNorm (optionally fused with a residual add)
//===----------------------------------------------------------------------===//

struct RMSNormConfig {
  ScalarType in = ScalarType::bf16; // x, residual and residual_out
  ScalarType weight = ScalarType::bf16;
  ScalarType out = ScalarType::bf16;
  int64_t hidden = 4096;
  float eps = 1e-6f;
  bool fused_residual = false;
  /// HF LLaMA semantics: round x*rsqrt(..) to `in` before multiplying by w.
  bool round_before_weight = false;
};

/// y = x * rsqrt(mean(x^2) + eps) * w  (Zhang & Sennrich 2019), fp32 math.
/// fused_residual: s = x + r (rounded to `in`) is written to residual_out and
/// normalized instead of x.
/// Kernel arguments:
///   plain:  (OutT* out, const InT* x, const WT* weight, long long rows)
///   fused:  (OutT* out, InT* residual_out, const InT* x, const InT* residual,
///            const WT* weight, long long rows)
/// residual_out may alias x or residual (each element is read before written
/// by the same thread).
/// InvalidArgument: a non-float in/weight/out type, hidden < 1.
absl::StatusOr<KernelCode> EmitRMSNorm(const RMSNormConfig &cfg);
absl::StatusOr<LaunchDims> RMSNormLaunch(const RMSNormConfig &cfg, int64_t rows);

struct LayerNormConfig {
  ScalarType in = ScalarType::bf16;
  ScalarType weight = ScalarType::bf16; // also the bias type
  ScalarType out = ScalarType::bf16;
  int64_t hidden = 4096;
  float eps = 1e-5f;
  bool has_weight = true;
  bool has_bias = true;
  bool fused_residual = false;
};

/// y = (x - mean) * rsqrt(var + eps) * w + b (Ba et al. 2016), biased var,
/// two-pass over the row held in registers, fp32.
/// Kernel arguments (bracketed ones only when configured):
///   (OutT* out, [InT* residual_out], const InT* x, [const InT* residual],
///    [const WT* weight], [const WT* bias], long long rows)
/// InvalidArgument: a non-float in/weight/out type, hidden < 1.
absl::StatusOr<KernelCode> EmitLayerNorm(const LayerNormConfig &cfg);
absl::StatusOr<LaunchDims> LayerNormLaunch(const LayerNormConfig &cfg, int64_t rows);

//===----------------------------------------------------------------------===//
// 4. Softmax over the last dim
//===----------------------------------------------------------------------===//

struct SoftmaxConfig {
  ScalarType in = ScalarType::bf16;
  ScalarType out = ScalarType::bf16;
  int64_t n = 1024;                         // last dim
  bool has_mask = false;
  ScalarType mask = ScalarType::f32;        // f32/f16/bf16 additive mask
};

/// y = softmax(x * scale + mask[row % mask_rows]) over the last dim, fp32,
/// max-subtracted, exp2 with log2(e) prescale. Rows whose every logit is -inf
/// give NaN (as PyTorch). N <= 1024: one warp per row (4 rows per block), row
/// in registers; N > 1024: one block per row, online normalizer (Milakov &
/// Gimelshein 2018) in a first pass, second pass re-reads x.
/// Kernel arguments:
///   (OutT* out, const InT* x, const MaskT* mask /*nullptr if !has_mask*/,
///    float scale, long long rows, long long mask_rows)
/// InvalidArgument: a non-float in/out/mask type, n < 1.
absl::StatusOr<KernelCode> EmitSoftmax(const SoftmaxConfig &cfg);
absl::StatusOr<LaunchDims> SoftmaxLaunch(const SoftmaxConfig &cfg, int64_t rows);

//===----------------------------------------------------------------------===//
// 5. RoPE
//===----------------------------------------------------------------------===//

enum class PositionSource { kNone, kScalarI32, kScalarI64, kPerBatchI32, kPerBatchI64 };

struct RoPEConfig {
  ScalarType dtype = ScalarType::bf16;
  int64_t num_heads = 32;
  int64_t head_dim = 128;
  int64_t rotary_dim = 0;     // 0 = head_dim; dims >= rotary_dim are copied
  bool interleaved = false;   // false: pairs (i, i+R/2) (LLaMA/NeoX);
                              // true: pairs (2i, 2i+1) (GPT-J)
  float theta = 10000.0f;
  PositionSource offset = PositionSource::kNone;
};

/// RoFormer rotary embedding on x [B, S, H, D]:
///   inv_freq_i = 1 / theta^(2i/R) (fp32 powf), angle = float(s + offset) *
///   inv_freq_i, (a, b) -> (a*cos - b*sin, b*cos + a*sin).
/// Kernel arguments:
///   (T* out, const T* x, const void* offset /*int32 or int64 per config;
///    nullptr = 0*/, long long batch, long long seq)
/// out may alias x (in place). One block per token (b, s).
/// InvalidArgument: a non-float dtype; head_dim < 2, an odd rotary dim or
/// one above head_dim, num_heads < 1. Unimplemented: num_heads * head_dim
/// over 2^30.
absl::StatusOr<KernelCode> EmitRoPE(const RoPEConfig &cfg);
absl::StatusOr<LaunchDims> RoPELaunch(const RoPEConfig &cfg, int64_t batch, int64_t seq);

/// The table form of RoPE (llm.rope with cos/sin), as Hugging Face
/// LLaMA/Mistral `apply_rotary_pos_emb` (q * cos + rotate_half(q) * sin; Su
/// et al. 2021): the angles come from precomputed tables, which also covers
/// any rope scaling.
struct RoPETableConfig {
  ScalarType dtype = ScalarType::bf16;  // x and out
  ScalarType table = ScalarType::f32;   // cos and sin (any float type, read as fp32)
  int64_t num_heads = 32;
  int64_t head_dim = 128;               // D, even
  bool interleaved = false;             // pairs (2j, 2j+1) instead of (i, i+D/2)
  /// The RoPE + KV-cache write variant: out is a cache written at the rows
  /// an index tensor names (index_put of the rotated tensor), see below.
  bool cache_write = false;
  ScalarType index = ScalarType::i64;   // cache_write: i32 or i64 indices
  /// cache_write: also rotate a q [B, S, q_heads, D] (same tables) into a
  /// dense q_out (0: no q), and copy a v [B, S, num_heads, D] into a second
  /// cache at the same rows and strides: a decode step's q, k and v in one
  /// launch.
  int64_t q_heads = 0;
  bool v_write = false;
};

/// x, out [B, S, H, D] contiguous; cos, sin full head-dim rows, element
/// (b, s, d) at b * table_batch_stride + s * D + d (table_batch_stride = S*D
/// for [B, S, D] tables, 0 for [S, D] or [1, S, D]: broadcast over batch;
/// always broadcast over heads). fp32 math, rounded once to T:
///   half_split:  out[i] = x[i] c[i] - x[i+D/2] s[i] (i < D/2),
///                out[i] = x[i] c[i] + x[i-D/2] s[i] (i >= D/2)
///   interleaved: out[2j] = x[2j] c[2j] - x[2j+1] s[2j],
///                out[2j+1] = x[2j+1] c[2j+1] + x[2j] s[2j+1]
/// Kernel arguments:
///   (T* out, const T* x, const TabT* cos_tab, const TabT* sin_tab, long long batch,
///    long long seq, long long table_batch_stride)
/// out may alias x (in place). One block per token (b, s); each thread reads
/// the table entries of its pairs once and applies them to every head.
///
/// cache_write (the RoPE + KV-cache write of a decode or prefill step, e.g.
/// gpt-fast's `k_cache[:, :, input_pos] = rope(k)`): the rotated element
/// (b, s, h, d) goes to out[b * out_b + r * out_row + h * out_h + d] with
/// r = index[s] instead of to a [B, S, H, D] tensor (strides in elements of
/// the cache; out_row steps one cache row). As llm.index_put on the GPU, a
/// negative r counts from the end (r + rows) and a token whose r is outside
/// [0, rows) is not written. out must not overlap x. Kernel arguments:
///   (T* out, const T* x, const TabT* cos_tab, const TabT* sin_tab, long long batch,
///    long long seq, long long table_batch_stride, const IdxT* index, long long rows,
///    long long out_b, long long out_row, long long out_h)
/// With q_heads > 0 and/or v_write (cache_write only) the grid has one more
/// row of blocks per part (blockIdx.y: 0 the k cache write, then q, then v)
/// and the arguments go on with
///   (T* q_out, const T* q /*q_heads > 0*/, T* v_cache, const T* v /*v_write*/);
/// q is written whatever the index, v as k.
/// InvalidArgument: a non-float dtype or table type, an odd head_dim or one
/// below 2, num_heads < 1, cache_write with an index type other than i32 and
/// i64, q_heads < 0, q_heads or v_write without cache_write. Unimplemented:
/// num_heads * head_dim or q_heads * head_dim over 2^30.
absl::StatusOr<KernelCode> EmitRoPETable(const RoPETableConfig &cfg);
/// Whether EmitRoPETable takes `cfg` (without making its source).
bool RoPETableSupported(const RoPETableConfig &cfg);
absl::StatusOr<LaunchDims> RoPETableLaunch(const RoPETableConfig &cfg, int64_t batch, int64_t seq);

//===----------------------------------------------------------------------===//
// 6. Flash attention (prefill)
//===----------------------------------------------------------------------===//

/// Tiling of the tensor-core FlashAttention-2 kernel. A CTA of `warps` warps
/// owns `block_m` query rows (each warp block_m/warps = 16 or 32 rows, i.e.
/// one or two m16 MMA tiles) and walks the keys in `block_n`-row K/V tiles.
///   stages = 1: one K and one V buffer; the V[j] load overlaps QK^T and the
///               K[j+1] load overlaps PV (two barriers per tile).
///   stages = 2: K and V double-buffered; K[j+1] and V[j+1] load while tile j
///               is computed (one barrier per tile).
///   qtile_fastest: grid (q tiles, Hq, B), consecutive CTAs share one head's
///               K/V in L2 (FlashAttention-2's order); false: grid (B*Hq, q
///               tiles), consecutive CTAs are different heads.
/// Causal kernels visit query tiles longest-first in either order.
/// Text form (LLMC_ATTN_CONFIG, kernel names): "bm128_bn64_w4_s2", with
/// "_gh" appended for qtile_fastest = false. block_m = 0 means "the
/// library default for the head dim" (DefaultAttentionTile).
struct AttentionTile {
  int block_m = 0;   // 64 or 128
  int block_n = 64;  // 32, 64 or 128
  int warps = 4;     // 4 or 8
  int stages = 2;    // 1 or 2
  bool qtile_fastest = true;
  bool operator==(const AttentionTile &o) const {
    return block_m == o.block_m && block_n == o.block_n && warps == o.warps &&
           stages == o.stages && qtile_fastest == o.qtile_fastest;
  }
};

struct AttentionConfig {
  ScalarType dtype = ScalarType::bf16; // q, k, v, out: bf16, f16 or f32
  int64_t head_dim = 128;
  bool causal = false;                  // bottom-right aligned
  bool has_mask = false;
  ScalarType mask = ScalarType::f32;    // f32/bf16/f16 additive mask
  /// Force the simple (one warp per query row) kernel even when the tensor
  /// core kernel applies. The tensor-core kernel is used for bf16/f16 with
  /// head_dim % 16 == 0 and head_dim <= 256.
  bool force_simple = false;
  /// Tensor-core kernel tiling (ignored by the simple kernel).
  AttentionTile tile;
  /// k/v in HND layout [B, Hkv, Skv, D] (row stride D) instead of NHD
  /// [B, Skv, Hkv, D]; q and out stay [B, Sq, Hq, D].
  bool kv_hnd = false;
  /// The training forward (tensor-core kernel only): one more kernel
  /// argument `float* lse` after mask_stride_q, [B, Hq, Sq] f32, the natural
  /// log of each row's softmax denominator, log(sum_j exp(scale * q.k_j +
  /// mask)) (+inf for a row with no visible key); O is written only when
  /// `out` is not null.
  bool write_lse = false;
  /// Packed variable-length sequences (llm.varlen_attention; FlashAttention's
  /// varlen API): q and out [T, Hq, D], k and v [Tk, Hkv, D], sequence b's
  /// rows from cu_seqlens_q[b] (cu_seqlens_k[b]) to the next offset. The
  /// kernel's `batch`, `seq_q` and `seq_kv` arguments are B and the bounds
  /// the grid covers (T and Tk); two more arguments follow mask_stride_q:
  /// `const CuQT* cu_seqlens_q, const CuKT* cu_seqlens_k` ([B + 1] each, of
  /// `cu_seqlens_q_type` / `cu_seqlens_k_type`, i32 or i64). Not with a mask,
  /// kv_hnd or write_lse. Launch with AttentionLaunch(cfg, B, T, Hq): a block
  /// past its sequence's rows returns at once.
  bool varlen = false;
  ScalarType cu_seqlens_q_type = ScalarType::i32;
  ScalarType cu_seqlens_k_type = ScalarType::i32;
};

/// True when EmitAttention produces the mma.sync FlashAttention-2 kernel.
bool AttentionUsesTensorCores(const AttentionConfig &cfg);

/// The library's default tiling for a head dim (tile.block_m == 0 resolves
/// to this).
AttentionTile DefaultAttentionTile(int64_t head_dim);
/// cfg.tile with block_m == 0 replaced by DefaultAttentionTile(head_dim).
AttentionTile ResolvedAttentionTile(const AttentionConfig &cfg);
/// "bm128_bn64_w4_s2" (+ "_gh" when !qtile_fastest).
std::string AttentionTileName(const AttentionTile &tile);
/// Parses AttentionTileName's form; false (with *error set) on bad text.
bool ParseAttentionTile(const std::string &text, AttentionTile *tile,
                        std::string *error);
/// Whether the tensor-core kernel supports cfg's tiling for its head dim:
/// block_m in {64,128}, block_n in {32,64,128}, warps in {4,8} with 16 or
/// 32 rows per warp, stages in {1,2}, dynamic shared memory <= 227 KiB
/// (sm_90; sm_80 allows 163 KiB) and fp32 accumulators (O, S and register Q)
/// <= 192 per thread so ptxas does not spill. *why says what fails.
bool AttentionTileSupported(const AttentionConfig &cfg, std::string *why);
/// Dynamic shared memory of the tensor-core kernel for cfg (bytes).
int64_t AttentionSmemBytes(const AttentionConfig &cfg);

/// FlashAttention-2 forward (Dao 2023). q [B,Sq,Hq,D], k/v [B,Skv,Hkv,D],
/// out [B,Sq,Hq,D], contiguous. GQA: kv head = h / (Hq/Hkv) (Hq % Hkv == 0).
/// causal: query i sees keys j <= i + Skv - Sq. Mask: element
///   mask[b*mask_stride_b + h*mask_stride_h + i*mask_stride_q + j]
/// (strides in elements; pass 0 to broadcast over b or h; usually
/// mask_stride_q = Skv). Rows with no visible key (all masked) give 0
/// (FlashAttention convention; PyTorch's math path gives NaN there).
/// Kernel arguments:
///   (T* out, const T* q, const T* k, const T* v, const MaskT* mask,
///    long long batch, long long seq_q, long long seq_kv,
///    int heads_q, int heads_kv, float scale,
///    long long mask_stride_b, long long mask_stride_h,
///    long long mask_stride_q)
/// (mask may be nullptr when !has_mask; strides then ignored.)
/// InvalidArgument: dtype not bf16/f16/f32, head_dim outside 1..1024, a
/// non-float mask type, a tiling AttentionTileSupported rejects (its *why
/// is the message) when the tensor-core kernel applies.
absl::StatusOr<KernelCode> EmitAttention(const AttentionConfig &cfg);
/// Unimplemented (tensor-core kernel with qtile_fastest): heads_q or batch
/// over 65535.
absl::StatusOr<LaunchDims> AttentionLaunch(const AttentionConfig &cfg, int64_t batch,
                           int64_t seq_q, int64_t heads_q);

/// FlashAttention-2 backward (Dao 2023, arXiv:2307.08691, Algorithm 2)
/// for llm.attention_backward without a mask: three kernels, launched in
/// order on one stream.
///   prep (float* dsum, float* dq_acc, const T* out, const T* dout,
///         long long rows = B*Sq*Hq, long long seq_q, int heads_q):
///     dsum [B,Hq,Sq] = rowsum(dout * out) in f32; dq_acc [B,Sq,Hq,D] = 0.
///   main (T* dk, T* dv, float* dq_acc, const T* q, const T* k, const T* v,
///         const T* dout, const float* lse, const float* dsum,
///         long long batch, long long seq_q, long long seq_kv,
///         int heads_q, int heads_kv, float scale):
///     dk, dv [B,Skv,Hkv,D] (GQA: summed over the group's query heads);
///     dq_acc += dS K (unscaled, fp32 atomics); lse [B,Hq,Sq] f32 natural
///     log as the forward wrote it (+inf or -inf: a row with no visible
///     key, no gradient).
///   dq   (T* dq, const float* dq_acc, long long n = B*Sq*Hq*D, float scale).
/// q/out/dout/dq [B,Sq,Hq,D]; causal is bottom-right aligned as in the
/// forward. A pair with P = 0 contributes nothing. 16-byte aligned pointers.
struct AttentionBackwardConfig {
  ScalarType dtype = ScalarType::bf16;  // q, k, v, out, dout and the gradients
  int64_t head_dim = 128;
  bool causal = false;
};
struct AttentionBackwardKernels {
  KernelCode prep, main, dq;
};
/// bf16/f16 and head dims that are multiples of 16 in 16..128; *why says
/// what fails.
bool AttentionBackwardSupported(const AttentionBackwardConfig &cfg, std::string *why);
int64_t AttentionBackwardSmemBytes(const AttentionBackwardConfig &cfg);
/// InvalidArgument when !AttentionBackwardSupported (its *why).
absl::StatusOr<AttentionBackwardKernels> EmitAttentionBackward(const AttentionBackwardConfig &cfg);
absl::StatusOr<LaunchDims> AttentionBackwardPrepLaunch(int64_t batch, int64_t seq_q, int64_t heads_q);
/// Grid (B * Hkv, Skv / 64 key tiles): Skv up to 64 * 65535.
absl::StatusOr<LaunchDims> AttentionBackwardLaunch(const AttentionBackwardConfig &cfg, int64_t batch,
                                                   int64_t seq_kv, int64_t heads_kv);
absl::StatusOr<LaunchDims> AttentionBackwardDqLaunch(int64_t n);

//===----------------------------------------------------------------------===//
// 7. Flash decoding (split-KV)
//===----------------------------------------------------------------------===//

enum class KvLenSource { kArg, kDeviceI32, kDeviceI64, kPerBatchI32, kPerBatchI64 };

struct DecodeConfig {
  ScalarType dtype = ScalarType::bf16; // bf16, f16, f32
  int64_t head_dim = 128;
  int64_t group_size = 4; // Hq / Hkv
  int64_t q_len = 1;      // Sq (compile time; queries are the last q_len positions)
  bool causal = true;     // only matters for q_len > 1
  KvLenSource kv_len = KvLenSource::kArg;
  /// k/v cache in HND layout [B, Hkv, Smax, D] instead of NHD [B, Smax, Hkv, D].
  bool kv_hnd = false;
  /// An additive mask (f32/bf16/f16), read as
  ///   mask[b * mask_stride_b + h * mask_stride_h + qi * mask_stride_q + j]
  /// for q head h, query qi and key j (strides in elements, 0 broadcasts).
  /// Key slots whose mask is -inf for every query row of a warp are not
  /// loaded, so a position mask over a preallocated cache reads only the
  /// visible rows.
  bool has_mask = false;
  ScalarType mask = ScalarType::f32;
  /// A paged KV cache (llm.paged_attention; PagedAttention, Kwon et al.,
  /// SOSP 2023): k/v are pages [P, page_size, Hkv, D] read through a block
  /// table, the queries are packed by sequence [T, Hq, D] (cu_seqlens), and
  /// q_len is the number of query rows a block holds at once: a sequence
  /// with more new tokens takes them q_len at a time. Not with kv_hnd or a
  /// mask; kv_len is unused (each sequence's length is seq_lens[b]). See
  /// llmc/Target/CUDA/Decode.h.
  bool paged = false;
  int64_t page_size = 16;
  /// Element types of block_table, cu_seqlens_q and seq_lens (i32 or i64).
  ScalarType block_table = ScalarType::i32;
  ScalarType cu_seqlens = ScalarType::i32;
  ScalarType seq_lens = ScalarType::i32;
  /// An fp8 KV cache (paged only): pages of this type (f8e4m3 or f8e5m2)
  /// instead of `dtype`, read as pages * scale[kv head] with the split
  /// kernel's two extra arguments `const float* k_scale, const float*
  /// v_scale` ([Hkv] each, after num_splits). Loads and key slots are sized
  /// by the 1-byte element (up to 16 elements per 16-byte load), and each
  /// 32-bit word of a load is converted at once (FlashDecodeGeometryOf,
  /// lib/Target/CUDA/Decode.cpp). Unset: K/V of `dtype`.
  std::optional<ScalarType> kv_fp8;
  /// The split kernel's last block of each (batch, kv head) to finish merges
  /// the splits of its query rows itself (a semaphore per (batch, kv head)
  /// counts the finished splits), so no combine kernel runs: one launch,
  /// the same arithmetic (results bitwise equal). The split kernel takes two
  /// more arguments at the end, `unsigned int* semaphores` ([B, Hkv], zero
  /// before the launch and left zero after it: atomicInc wraps each count at
  /// the last split) and `T* out`; the combine kernel is not emitted. A
  /// semaphore that is not zero at the launch gives a wrong combine, so two
  /// launches sharing one buffer must not overlap (one session runs one call
  /// at a time). Dense caches only (not `paged`).
  bool fused_combine = false;
};

struct DecodeKernels {
  KernelCode split;   // phase 1
  KernelCode combine; // phase 2
};

/// The flash-decoding kernels for these configs are generated by
/// EmitFlashDecode (llmc/Target/CUDA/Decode.h).

//===----------------------------------------------------------------------===//
// 8. KV-cache append (K and V together)
//===----------------------------------------------------------------------===//

struct KvAppendConfig {
  ScalarType dtype = ScalarType::bf16;
  int64_t heads_kv = 8;
  int64_t head_dim = 128;
  PositionSource pos = PositionSource::kScalarI64; // kNone = position 0
};

/// k_cache/v_cache [B, Smax, Hkv, D]; k_new/v_new [B, Snew, Hkv, D];
/// rows [pos, pos+Snew) of each batch are overwritten. If pos < 0 or
/// pos + Snew > Smax for a batch, nothing is written for that batch and
/// *error = 1.
/// Kernel arguments:
///   (T* k_cache, T* v_cache, const T* k_new, const T* v_new,
///    const void* pos /*int32/int64 per config*/, int* error,
///    long long batch, long long max_seq, long long seq_new)
/// InvalidArgument: heads_kv or head_dim < 1. Unimplemented: heads_kv *
/// head_dim over 2^30.
absl::StatusOr<KernelCode> EmitKvAppend(const KvAppendConfig &cfg);

/// Paged KV append (llm.paged_kv_append; PagedAttention, Kwon et al., SOSP
/// 2023): the new tokens' K or V rows, packed by sequence, written into their
/// pages.
struct PagedKvAppendConfig {
  ScalarType dtype = ScalarType::bf16;
  /// A float update (f32, f16, bf16) quantized into fp8 pages (`dtype`
  /// f8e4m3 or f8e5m2): row element e of KV head h is stored as
  /// fromF<T>(update / scale[h]), with the kernel's extra argument `const
  /// float* scale` ([Hkv], after update). Unset: the update is of `dtype`
  /// and copied.
  std::optional<ScalarType> quantize_from;
  int64_t heads_kv = 8;
  int64_t head_dim = 128;
  int64_t page_size = 16;
  /// Element types of block_table, cu_seqlens_q and seq_lens (i32 or i64).
  ScalarType block_table = ScalarType::i32;
  ScalarType cu_seqlens = ScalarType::i32;
  ScalarType seq_lens = ScalarType::i32;
};

/// pages [P, page_size, Hkv, D], update [T, Hkv, D] (sequence b's n_b rows
/// from cu_seqlens[b], cu_seqlens [B + 1]), block_table [B, max_pages],
/// seq_lens [B]: row i of sequence b (position seq_lens[b] - n_b + i) is
/// written to row pos % page_size of page block_table[b, pos / page_size].
/// A token whose position is negative, past max_pages * page_size, or whose
/// page id is outside [0, num_pages) is not written and sets *error = 3.
/// Kernel arguments:
///   (T* pages, const T* update, const BtT* block_table, const CuT* cu_seqlens,
///    const LenT* seq_lens, int* error, long long num_tokens, long long num_seqs,
///    long long max_pages, long long num_pages)
/// One block per token (grid T). InvalidArgument: sizes < 1 or index types
/// other than i32/i64. Unimplemented: heads_kv * head_dim over 2^30.
absl::StatusOr<KernelCode> EmitPagedKvAppend(const PagedKvAppendConfig &cfg);
absl::StatusOr<LaunchDims> PagedKvAppendLaunch(const PagedKvAppendConfig &cfg,
                                               int64_t num_tokens);
absl::StatusOr<LaunchDims> KvAppendLaunch(const KvAppendConfig &cfg, int64_t batch,
                          int64_t seq_new);

//===----------------------------------------------------------------------===//
// 9. Gather / embedding and index_put (scatter)
//===----------------------------------------------------------------------===//

struct GatherConfig {
  ScalarType dtype = ScalarType::bf16;
  ScalarType index = ScalarType::i64; // i32 or i64
  int64_t dim = 4096;                 // D (row length)
};

/// out[n, :] = table[idx[n], :]; idx outside [0, V) -> zeros and *error = 2.
/// Kernel arguments:
///   (T* out, const T* table, const IdxT* indices, int* error,
///    long long num_indices, long long vocab)
/// InvalidArgument: an index type other than i32/i64, dim < 1.
/// Unimplemented: dim over 2^30.
absl::StatusOr<KernelCode> EmitGather(const GatherConfig &cfg);
absl::StatusOr<LaunchDims> GatherLaunch(const GatherConfig &cfg, int64_t num_indices);

/// llm.index_put: base viewed as [outer, rows, inner] (row-major), source
/// [outer, count, inner], indices [count] (i32/i64; negative counts from
/// the end, outside [-rows, rows) skipped). Copy (index_copy, KV-cache
/// writes): out[o, idx[n], :] = src[o, n, :], `out` already holding the
/// base (in place, or a copy made first); duplicate indices leave one of
/// their rows. Add (index_add / accumulate, embedding backward):
/// out = base with out[o, idx[n], :] += src[o, n, :], deterministic (each
/// block owns IndexAddRowsPerBlock rows and adds its matches in the order
/// of n; no atomics); f32 adds in place, bf16/f16 sum in an fp32 scratch
/// row per touched row (IndexPutScratchBytes) and round once. `out` may be
/// `base` (in place).
/// Kernel arguments:
///   copy: (T* out, const T* src, const IdxT* indices,
///          long long outer, long long rows, long long count)
///   add:  (T* out, const T* base, const T* src, const IdxT* indices,
///          float* scratch, long long outer, long long rows, long long count,
///          long long rows_per_block)
/// InvalidArgument: an index type other than i32/i64, inner < 1.
/// Unimplemented: inner over 2^30; accumulate into a type other than
/// f32/bf16/f16; accumulate with count over 2^31 - 1.
struct IndexPutConfig {
  ScalarType dtype = ScalarType::bf16;
  ScalarType index = ScalarType::i64;
  int64_t inner = 128;  // elements per slice (product of base dims after dim)
  bool accumulate = false;
  bool zero_base = false;  // accumulate only: base is all zeros (`base` unread)
};
inline constexpr int64_t kIndexAddMaxRowsPerBlock = 2048;
absl::StatusOr<KernelCode> EmitIndexPut(const IndexPutConfig &cfg);
absl::StatusOr<LaunchDims> IndexPutLaunch(const IndexPutConfig &cfg, int64_t outer, int64_t rows,
                                          int64_t count);
/// Rows of one outer slice each index_add block owns (its rows_per_block).
int64_t IndexAddRowsPerBlock(int64_t outer, int64_t rows);
/// Bytes of fp32 scratch index_add needs (0 for f32 and for copies).
int64_t IndexPutScratchBytes(const IndexPutConfig &cfg, int64_t outer, int64_t count);

//===----------------------------------------------------------------------===//
// 10. Reductions
//===----------------------------------------------------------------------===//

/// llm.argmax over the last dim: x [rows, n] (f32, bf16, f16, row-major) ->
/// out [rows] i64, torch.argmax's answer (the first maximum; a NaN is larger
/// than any number, the first NaN wins). One block per row.
/// Kernel arguments: (long long* out, const InT* x, long long rows)
/// InvalidArgument: n < 1. Unimplemented: another input type; n over
/// 2^31 - 1.
struct ArgMaxConfig {
  ScalarType in = ScalarType::f32;
  int64_t n = 32000;
};
absl::StatusOr<KernelCode> EmitArgMax(const ArgMaxConfig &cfg);
absl::StatusOr<LaunchDims> ArgMaxLaunch(const ArgMaxConfig &cfg, int64_t rows);

/// llm.cumsum over the last dim: x [rows, n] (f32, bf16, f16, i1, i8, i32,
/// i64; row-major) -> out [rows, n], the inclusive prefix sums
/// (torch.cumsum). Float inputs give their own type, accumulated in fp32;
/// integer and boolean inputs accumulate exactly in int64 and give i64,
/// i32 or a float type. One block per row.
/// Kernel arguments: (OutT* out, const InT* x, long long rows)
/// InvalidArgument: n < 1, a float input with another result type.
/// Unimplemented: fp8, an i1/i8 result, n over 2^31 - 1.
struct CumsumConfig {
  ScalarType in = ScalarType::i1;
  ScalarType out = ScalarType::i64;
  int64_t n = 2048;
};
absl::StatusOr<KernelCode> EmitCumsum(const CumsumConfig &cfg);
absl::StatusOr<LaunchDims> CumsumLaunch(const CumsumConfig &cfg, int64_t rows);

/// llm.dropout_mask: out [n] (i1, one byte each) = keep flags,
/// (Philox4x32-10(key = seed, counter = (i_lo, i_hi, stream, 0)).x >> 8)
/// >= threshold (Salmon et al. 2011), one thread per element, grid-stride.
/// Kernel arguments: (uint8_t* out, const long long* seed, long long n,
/// unsigned threshold, unsigned stream). InvalidArgument: n < 0.
absl::StatusOr<KernelCode> EmitDropoutMask();
absl::StatusOr<LaunchDims> DropoutMaskLaunch(int64_t n);

enum class ReduceKind { sum, mean, max, min };

struct RowReduceConfig {
  ScalarType in = ScalarType::bf16;
  ScalarType out = ScalarType::f32;
  ReduceKind kind = ReduceKind::sum;
  int64_t n = 4096; // last dim
};

/// out[r] = reduce(x[r, 0:n]); fp32 accumulation; max/min propagate NaN.
/// Kernel arguments: (OutT* out, const InT* x, long long rows)
/// InvalidArgument: n < 1.
absl::StatusOr<KernelCode> EmitRowReduce(const RowReduceConfig &cfg);
absl::StatusOr<LaunchDims> RowReduceLaunch(const RowReduceConfig &cfg, int64_t rows);

/// How an input of a fused row kernel is read in the kernel's [rows, n]
/// index space (row r, column j).
enum class RowInputLayout {
  kDense,  // [rows, n] row-major: element (r, j) at r * n + j
  kColumn, // [n], the same for every row (a norm's weight): element j
  kRow,    // [rows], one value per row (a saved statistic): element r
  kScalar, // one value: element 0
};

struct RowInput {
  ScalarType type = ScalarType::f32;
  RowInputLayout layout = RowInputLayout::kDense;
};

/// A reduction over the row of a value of the program (fp32 accumulation;
/// max/min propagate NaN; mean divides by n), its result rounded to `type`.
struct RowReduction {
  ReduceKind kind = ReduceKind::sum;
  int operand = 0; // a value reference (RowFusedProgram)
  ScalarType type = ScalarType::f32;
};

/// A sum over the rows (a column sum) of a value of the program: the weight
/// gradient of a norm, sum(dy * x_hat) over [B, S], computed by the norm
/// backward's own row kernel.
struct RowColumnSum {
  int value = 0; // a value reference (RowFusedProgram)
};

struct RowFusedOutput {
  int value = 0; // a value reference (RowFusedProgram)
  ScalarType type = ScalarType::f32;
  /// true: out[r], one value per row (the value must be per row); false:
  /// out[r * n + j] (a per-row value is written to every column).
  bool per_row = false;
};

/// One kernel for a row reduction with its elementwise prologue and epilogue
/// (the persistent-reduction form of Inductor; an RMSNorm or LayerNorm
/// backward's dx in one pass: dx = g*w*rstd - x * rstd^3 / n * sum(g*w*x)).
/// Value references: node k as k >= 0, input i as -(i + 1), reduction q as
/// -(inputs.size() + q + 1). Nodes are EwNodes (ElementwiseProgram's math
/// and rounding) in topological order; a reduction's operand and a node's
/// operands may reference earlier nodes, inputs and reductions, as long as
/// no reduction depends on itself. A value is per row when it is a kRow /
/// kScalar input, a reduction, a constant, or a node whose operands are all
/// per row; otherwise per element.
struct RowFusedProgram {
  int64_t n = 0; // row length, elements
  std::vector<RowInput> inputs;
  std::vector<RowReduction> reductions;
  std::vector<EwNode> nodes;
  std::vector<RowFusedOutput> outputs;
  /// Column sums, formed in the pass that stores the per-element outputs
  /// (see EmitRowFused).
  std::vector<RowColumnSum> column_sums;
  /// As ElementwiseProgram::round_every_node.
  bool round_every_node = true;
};

/// The fused row kernel: one block per row (grid-stride over rows). Per row,
/// the reductions are formed in passes over the row, a reduction whose
/// operand depends on another's result in a later pass; per-row values are
/// computed once per row; a last pass computes and stores the per-element
/// outputs, and thread 0 stores the per-row ones. When no per-element
/// output or column sum reads a reduction (a value stored with its row
/// maximum: the fp8 policy's amax in the value's producer), the last
/// reduction pass stores them and there is no last pass (one read of the row
/// fewer); the results are the same bits. 16-byte vectors when n is
/// a multiple of the vector width and every dense/column pointer is 16-byte
/// aligned (checked at run time), else scalar. When the row's inputs fit in
/// registers (at most 192 bytes per thread of up to 256 threads), every
/// input vector is loaded once, all loads issued up front, and the passes
/// read the registers (the persistent form); otherwise each pass re-reads
/// its inputs (from L1/L2 for rows of a few KiB). 64-bit indices.
/// Column sum c: each thread keeps fp32 sums of its columns over the rows
/// its block takes (in row order, in registers), and the block writes them
/// as partials_c[blockIdx.x, 0:n] (fp32, row-major [grid, n], grid =
/// RowFusedLaunch's); a column reduction of the partials over the blocks
/// (EmitColumnReduce, r = grid, inner = n) finishes the sum in a fixed
/// order, so the result is deterministic. A thread keeps at most 48 fp32
/// accumulators per column sum: the register-resident form is used only
/// when its kPer x kVec columns a thread fit that, and the streaming form
/// takes at least n / 32 threads (at most 256, hence n <=
/// kRowFusedMaxColumnRow).
/// Kernel arguments, in order:
///   OutT_0* out_0, ..., float* partials_0, ..., const InT_0* in_0, ...,
///   long long rows
/// InvalidArgument: n < 1, no outputs, a bad reference, wrong operand
/// count, a reduction depending on itself, a per-row output of a
/// per-element value, more than kRowFusedMaxReductions reductions or
/// kRowFusedMaxColumnSums column sums, or n > kRowFusedMaxColumnRow with
/// column sums.
inline constexpr int kRowFusedMaxReductions = 8;
inline constexpr int kRowFusedMaxColumnSums = 4;
inline constexpr int64_t kRowFusedMaxColumnRow = 8192;
absl::StatusOr<KernelCode> EmitRowFused(const RowFusedProgram &prog);
absl::StatusOr<LaunchDims> RowFusedLaunch(const RowFusedProgram &prog, int64_t rows);
/// Bytes of partials_c a column sum of a launch over `rows` needs.
absl::StatusOr<int64_t> RowFusedColumnPartialBytes(const RowFusedProgram &prog, int64_t rows);

struct FullReduceConfig {
  ScalarType in = ScalarType::bf16;
  ScalarType out = ScalarType::f32;
  ReduceKind kind = ReduceKind::sum;
};

struct FullReduceKernels {
  KernelCode stage1; // (float* partials, const InT* x, long long numel)
  KernelCode stage2; // (OutT* out, const float* partials, int num_partials,
                     //  long long numel)
};

/// Two-stage reduction of a whole tensor: stage 1 launches
/// FullReduceNumPartials(numel) blocks, each reducing a grid-stride slice in
/// fp32 (per-thread sequential, then tree) to partials[blockIdx.x]; stage 2
/// (one block) tree-reduces the partials and writes out[0] (mean = fp32 sum /
/// numel).
absl::StatusOr<FullReduceKernels> EmitFullReduce(const FullReduceConfig &cfg);
int FullReduceNumPartials(int64_t numel);
absl::StatusOr<LaunchDims> FullReduceStage1Launch(const FullReduceConfig &cfg, int64_t numel);
absl::StatusOr<LaunchDims> FullReduceStage2Launch(const FullReduceConfig &cfg, int64_t numel);

struct ColumnReduceConfig {
  ScalarType in = ScalarType::bf16;
  ScalarType out = ScalarType::f32;
  ReduceKind kind = ReduceKind::sum;
  /// Columns per thread, read as one load: a power of two of at most 16
  /// bytes that divides `inner` (ColumnReduceVecWidth); 1 = scalar loads.
  int vec = 1;
};

struct ColumnReduceKernels {
  /// (OutT* out, float* partials, const InT* x, long long outer, long long r,
  ///  long long inner, long long rows_per_split)
  KernelCode partial;
  /// (OutT* out, const float* partials, long long count, long long r,
  ///  int splits), count = outer * inner
  KernelCode combine;
};

/// out[o, i] = reduce over j of x[o, j, i], for x dense row-major
/// [outer, r, inner] (inner >= 1) and out [outer, inner]: a reduction over
/// consecutive dimensions that do not include the last (the weight
/// gradients of RMSNorm, LayerNorm and biases, e.g. sum(dy * x_hat,
/// dims=[0, 1]) of [B, S, H] is outer 1, r B*S, inner H). fp32 accumulation;
/// max/min propagate NaN; mean divides the fp32 sum by r.
/// `partial` runs blocks of 32 x vec columns x 8 row lanes (coalesced
/// along the columns), grid (outer * ceil(inner / (32 vec)), splits): split s reduces rows
/// [s * rows_per_split, (s + 1) * rows_per_split). With one split it
/// writes `out`; with several it writes fp32 partials[s, o, i] (workspace
/// ColumnReduceWorkspaceBytes) and `combine` reduces them in split order
/// (deterministic). Kernel names depend on the types, kind and vec only.
/// InvalidArgument: an unsupported input type, a bad vec, or (launch)
/// inner not a multiple of vec.
absl::StatusOr<ColumnReduceKernels> EmitColumnReduce(const ColumnReduceConfig &cfg);
/// The widest load (elements, up to 16 bytes) whose width divides inner.
int ColumnReduceVecWidth(ScalarType in, int64_t inner);
/// Row splits that give the GPU about 4 blocks per SM of 132 when the
/// columns alone do not (each split keeps at least 64 rows; at most 64).
int ColumnReduceNumSplits(int64_t outer, int64_t r, int64_t inner, int vec);
int64_t ColumnReduceRowsPerSplit(int64_t r, int splits);
int64_t ColumnReduceWorkspaceBytes(int64_t outer, int64_t inner, int splits);
absl::StatusOr<LaunchDims> ColumnReducePartialLaunch(const ColumnReduceConfig &cfg,
                                                     int64_t outer, int64_t inner,
                                                     int splits);
absl::StatusOr<LaunchDims> ColumnReduceCombineLaunch(const ColumnReduceConfig &cfg,
                                                     int64_t outer, int64_t inner);

//===----------------------------------------------------------------------===//
// 11. Skinny matmul (decode GEMV)
//===----------------------------------------------------------------------===//

inline constexpr int kGemvMaxRows = 8;
/// 16-byte weight loads each lane of a decode GEMV issues before using any
/// (the `unroll` of GemvConfig, MultiGemvConfig and SwiGluGemvConfig):
/// kGemvUnroll by default, 1..kGemvMaxUnroll. Every lane adds its chunks in
/// the same order whatever the unroll, so results are bitwise the same; only
/// the bytes in flight change.
inline constexpr int kGemvUnroll = 4;
inline constexpr int kGemvMaxUnroll = 16;

struct GemvConfig {
  ScalarType dtype = ScalarType::bf16; // x, w, bias: bf16 or f16
  ScalarType out = ScalarType::bf16;   // y: f32, f16 or bf16
  int64_t m = 1;                       // rows of x, 1..kGemvMaxRows
  int64_t k = 4096;                    // contraction length, multiple of 8
  int64_t n = 4096;                    // output columns (rows of w)
  bool has_bias = false;
  int unroll = kGemvUnroll;            // loads in flight per lane, 1..kGemvMaxUnroll
};

/// True for bf16/f16 with 1 <= m <= kGemvMaxRows, k % 8 == 0 and an unroll
/// in 1..kGemvMaxUnroll.
bool GemvSupported(const GemvConfig &cfg);

/// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]); x [M, K] and y [M, N]
/// row-major, w [N, K] row-major (nn.Linear layout, `transpose_rhs`). For
/// decode-step projections, where reading w is the whole cost: one warp per
/// output column, 16-byte loads, fp32 accumulation. x, w must be 16-byte
/// aligned.
/// Kernel arguments:
///   (OutT* y, const T* x, const T* w, const T* bias /*nullptr if none*/,
///    long long n)
/// InvalidArgument: a config GemvSupported rejects.
absl::StatusOr<KernelCode> EmitGemv(const GemvConfig &cfg);
absl::StatusOr<LaunchDims> GemvLaunch(const GemvConfig &cfg);

/// Horizontal fusion of decode GEMVs that share their input x (q/k/v
/// projections, gate/up): one launch computes every y_i. Each output row is
/// computed by exactly the arithmetic of EmitGemv (same per-lane chunking,
/// fp32 accumulation order, warp reduction, bias add and rounding), so
/// y_i is bitwise what EmitGemv writes for (x, w_i, bias_i).
inline constexpr int kMultiGemvMaxOutputs = 4;
struct MultiGemvConfig {
  ScalarType dtype = ScalarType::bf16; // x, every w_i and bias_i: bf16 or f16
  int64_t m = 1;                       // rows of x, 1..kGemvMaxRows
  int64_t k = 4096;                    // contraction length, multiple of 8
  int num_outputs = 2;                 // 1..kMultiGemvMaxOutputs
  ScalarType out[kMultiGemvMaxOutputs] = {ScalarType::bf16, ScalarType::bf16,
                                          ScalarType::bf16, ScalarType::bf16}; // f32/f16/bf16
  int64_t n[kMultiGemvMaxOutputs] = {0, 0, 0, 0}; // rows of w_i (>= 1; the launch grid)
  bool has_bias[kMultiGemvMaxOutputs] = {false, false, false, false};
  int unroll = kGemvUnroll;            // loads in flight per lane, 1..kGemvMaxUnroll
};
bool MultiGemvSupported(const MultiGemvConfig &cfg);
/// y_i[m, n] = sum_k x[m, k] * w_i[n, k] (+ bias_i[n]) for i < num_outputs;
/// x [M, K], y_i [M, N_i] row-major, w_i [N_i, K] row-major; 16-byte aligned
/// x and w_i. The rows of all w_i are one work list (one warp per row), so
/// the grid covers sum_i N_i rows: one launch instead of num_outputs, and
/// one wave tail instead of several.
/// Kernel arguments:
///   (const T* x, then per output i: OutT_i* y_i, const T* w_i,
///    const T* bias_i /*nullptr if none*/, long long n_i)
/// InvalidArgument: a config MultiGemvSupported rejects.
absl::StatusOr<KernelCode> EmitMultiGemv(const MultiGemvConfig &cfg);
absl::StatusOr<LaunchDims> MultiGemvLaunch(const MultiGemvConfig &cfg);

/// SwiGLU feed-forward input projections of a decode step in one kernel
/// (Shazeer, "GLU Variants Improve Transformer", 2020; LLaMA's MLP):
///   gate = round<gate_out>(x @ w_gate^T (+ bias_gate))
///   up   = round<up_out>(x @ w_up^T (+ bias_up))
///   y    = round<out>(round<act_out>(silu(gate)) * up),
///   silu(g) = g / (1 + exp(-g)),
/// i.e. llm.mul(llm.silu(matmul(x, w_gate)), matmul(x, w_up)) with every
/// intermediate rounded to its type exactly as the unfused GEMVs and the
/// elementwise kernel (every node rounded) do, so y is bitwise the unfused
/// result. One warp computes row n of both weights (the product is formed in
/// registers; gate and up are never stored).
struct SwiGluGemvConfig {
  ScalarType dtype = ScalarType::bf16;    // x, w_gate, w_up, biases: bf16 or f16
  ScalarType gate_out = ScalarType::bf16; // type of the gate matmul's result
  ScalarType up_out = ScalarType::bf16;   // type of the up matmul's result
  ScalarType act_out = ScalarType::bf16;  // type of silu(gate)
  ScalarType out = ScalarType::bf16;      // type of y
  int64_t m = 1;                          // rows of x, 1..kGemvMaxRows
  int64_t k = 4096;                       // contraction length, multiple of 8
  int64_t n = 11008;                      // rows of w_gate and of w_up
  bool has_bias = false;                  // both biases present
  int unroll = kGemvUnroll;               // loads in flight per lane, 1..kGemvMaxUnroll
};
bool SwiGluGemvSupported(const SwiGluGemvConfig &cfg);
/// x [M, K], y [M, N] row-major; w_gate, w_up [N, K] row-major, 16-byte
/// aligned. Kernel arguments:
///   (OutT* y, const T* x, const T* w_gate, const T* w_up,
///    const T* bias_gate, const T* bias_up /*nullptr if none*/, long long n)
/// InvalidArgument: a config SwiGluGemvSupported rejects.
absl::StatusOr<KernelCode> EmitSwiGluGemv(const SwiGluGemvConfig &cfg);
absl::StatusOr<LaunchDims> SwiGluGemvLaunch(const SwiGluGemvConfig &cfg);

//===----------------------------------------------------------------------===//
// 12. Zero padding (llm.pad)
//===----------------------------------------------------------------------===//

inline constexpr int kPadMaxRank = 8;
inline constexpr int kPadThreads = 256;

struct PadConfig {
  ScalarType dtype = ScalarType::bf16; // any type: elements are copied bit-exactly
  int rank = 2;                        // 1..kPadMaxRank
  /// Elements per thread step along the last dim; a power of two with
  /// vec * ScalarSize(dtype) <= 16 that divides both the input's and the
  /// output's last dim (PadVecWidth picks the widest).
  int vec = 1;
};
/// The widest vector width valid for PadConfig::vec.
int PadVecWidth(ScalarType dtype, int64_t in_last, int64_t out_last);
/// High zero padding (the semantics of `llm.pad`): out has sizes
/// out_sizes[d] >= in_sizes[d]; out[c] = in[c] where c[d] < in_sizes[d] for
/// every d, else zero (the all-zero bit pattern: +0.0 for every float type,
/// 0 for integers). Both tensors dense row-major. Each thread handles `vec`
/// consecutive elements of a row with one 16-byte (or narrower) load and
/// store when both pointers are aligned to vec * element size, else the
/// same loop one element at a time; grid-stride.
/// Kernel arguments:
///   (E* out, const E* in, long long numel_out, PadShape shape)
/// where E is the unsigned integer of the element's size and PadShape is
/// `long long data[2 * rank]` = {out sizes (outermost first), in sizes},
/// passed by value; build it with PackPadShape.
/// InvalidArgument: rank outside 1..8, vec not a power of two or over 16
/// bytes. PackPadShape: InvalidArgument for sizes of different ranks or a
/// rank outside 1..8.
absl::StatusOr<KernelCode> EmitPad(const PadConfig &cfg);
absl::StatusOr<LaunchDims> PadLaunch(const PadConfig &cfg, int64_t numel_out);
absl::StatusOr<std::vector<int64_t>> PackPadShape(const std::vector<int64_t> &out_sizes,
                                                  const std::vector<int64_t> &in_sizes);

//===----------------------------------------------------------------------===//
// 13. Tiled transpose (the last two dims of a batch of matrices)
//===----------------------------------------------------------------------===//

/// Elements per side of the square tile a transpose block moves through
/// shared memory; kTransposeThreads threads per block.
inline constexpr int kTransposeTile = 64;
inline constexpr int kTransposeThreads = 256;

struct TransposeConfig {
  ScalarType in = ScalarType::bf16;  // element type read
  ScalarType out = ScalarType::bf16; // `in` (a bit-exact copy) or, for a float `in`, another float type
};
/// True when out == in (any type), or both are float types (IsFloatType).
bool TransposeSupported(const TransposeConfig &cfg);
/// out[b, c, r] = convert(in[b * batch_stride + r * ld + c]) for b < batch,
/// r < rows, c < cols: the input a batch of row-major [rows, cols]
/// matrices with row stride ld >= cols (elements) and batch stride
/// batch_stride, the output dense [batch, cols, rows]. convert is the
/// identity (bit-exact) when out == in, else round-to-nearest-even through
/// float (fp8 saturating, as every llmc cast). This is the relayout of a
/// GEMM operand into cuBLASLt's fp8 "TN" layout: each block reads a 64 x 64
/// tile row by row (a warp reads 32 consecutive elements) into shared
/// memory and writes it column by column (a warp writes 32 consecutive
/// elements), where an elementwise kernel with strided reads touches a
/// 32-byte sector per element read. One element per access, except for a
/// copy of 1-byte elements (fp8) on a full tile whose input rows (in, ld)
/// and output rows (out, rows) start 4-byte aligned: 4 elements per access
/// (a warp moves 128 bytes, not 32). The lowering uses the bit-exact copy
/// only; the converting form is tested but has no caller yet.
/// Kernel arguments:
///   (OutT* out, const InT* in, long long rows, long long cols, long long ld,
///    long long batch_stride)
/// Grid (ceil(cols / 64), ceil(rows / 64), batch), kTransposeThreads threads.
/// InvalidArgument: a config TransposeSupported rejects. TransposeLaunch:
/// Unimplemented beyond CUDA's grid (rows over 65535 tiles, batch over 65535).
absl::StatusOr<KernelCode> EmitTranspose(const TransposeConfig &cfg);
absl::StatusOr<LaunchDims> TransposeLaunch(int64_t batch, int64_t rows, int64_t cols);

} // namespace llmc::cuda

#endif // LLMC_TARGET_CUDA_KERNELLIBRARY_H
