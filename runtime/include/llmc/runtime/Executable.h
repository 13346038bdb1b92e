// The compiled artifact: kernels, GEMM descriptors, collectives, buffers and
// the launch sequence the runtime replays, plus its versioned serialization.
//
// File format: the line "LLMCX <format_version> <payload_bytes> <sha256>\n"
// followed by a JSON payload; binary fields (cubins, constants) are base64.
#ifndef LLMC_RUNTIME_EXECUTABLE_H
#define LLMC_RUNTIME_EXECUTABLE_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace llmc::rt {

enum class DType { f32, f16, bf16, f8e4m3, f8e5m2, i1, i8, i32, i64 };

/// Largest rank of an input or output (the kernels' shape structs hold 8
/// dims, kElementwiseMaxRank).
inline constexpr int kMaxTensorRank = 8;
/// Largest byte size of an input or output (2^62: every offset and size
/// computed from it stays within int64).
inline constexpr int64_t kMaxTensorBytes = int64_t(1) << 62;

/// Bytes per element (i1 is stored as one byte).
int64_t DTypeSize(DType t);
/// "f32", "bf16", ...
const char* DTypeName(DType t);
/// Inverse of DTypeName; InvalidArgument for an unknown name.
absl::StatusOr<DType> DTypeFromName(const std::string& name);

/// Signature of one input/output tensor. Shapes are concrete (the
/// specialization this executable was compiled for); dense row-major.
struct TensorSig {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  /// Outputs only: index of a donated input (`llm.donate`) that the compiled
  /// code updated in place and that holds this output's data; the caller may
  /// pass that input's buffer as this output to skip the final copy. -1: none.
  int alias_input = -1;
  /// Inputs only: a parameter (weight) that the parameter-preparation
  /// segment reads; see Executable::num_prepare_launches.
  bool parameter = false;
  int64_t NumElements() const;
  int64_t Bytes() const { return NumElements() * DTypeSize(dtype); }
};

/// A device memory region referenced by launches.
struct Buffer {
  /// Persistent: device memory owned by the Session for its lifetime, written
  /// by the parameter-preparation segment (e.g. quantized weights) and read
  /// by every call; not part of the per-call arena.
  enum Kind { Input, Output, Arena, Constant, Persistent };
  int id = 0;
  Kind kind = Arena;
  int64_t bytes = 0;
  /// Arena: byte offset into the arena (planned by the compiler).
  int64_t arena_offset = 0;
  /// Input/Output: index into Executable::inputs / outputs.
  int io_index = -1;
  /// Constant: raw bytes uploaded at load time.
  std::string constant_data;
};

/// A (buffer, byte offset) operand.
struct BufferRef {
  int buffer = -1;  // -1: none
  int64_t offset = 0;
};

struct KernelSpec {
  /// Entry symbol (extern "C" __global__).
  std::string name;
  /// CUDA C++ source (used when `cubin` is empty or built for another arch).
  std::string source;
  /// Arch the cubin was built for ("sm_90a").
  std::string arch;
  /// Cubin bytes; may be empty.
  std::string cubin;
  std::vector<std::string> options;
  /// In-memory headers for NVRTC (name -> contents).
  std::map<std::string, std::string> headers;
  /// The kernel calls llmcGridDependencyWait() (griddepcontrol.wait) before
  /// its first access to memory an earlier launch may write or read, so the
  /// runtime may launch it with programmatic dependent launch (sm_90+; CUDA
  /// Programming Guide 4.5): it starts while the previous kernel finishes.
  /// Serialized only when true; files without it read as false.
  bool grid_dependency = false;
};

/// One kernel argument.
struct Arg {
  enum Kind { BufferPtr, I32, I64, F32, Bytes };
  Kind kind = BufferPtr;
  /// BufferPtr: device address of `buffer` + `byte_offset`.
  int buffer = -1;
  int64_t byte_offset = 0;
  /// I32 / I64 value.
  int64_t i = 0;
  /// F32 value.
  float f = 0;
  /// Bytes: a by-value struct parameter (e.g. the elementwise kernels' shape
  /// struct), passed to the kernel as one parameter of bytes.size() bytes.
  std::string bytes;
};

enum class Epilogue { none, bias, relu, gelu, relu_bias, gelu_bias };

/// D = alpha * op(A) @ op(B) + beta * C [+ bias] [activation], ROW-MAJOR:
/// op(A) is [m,k], op(B) is [k,n], C/D are [m,n]. A is stored [m,k]
/// (transa=false) or [k,m] (transa=true), likewise B [k,n] / [n,k]. lda..ldd
/// are row strides in elements; stride_* are batch strides in elements
/// (batch > 1). The runtime maps this onto column-major cuBLASLt by computing
/// D^T = op(B)^T op(A)^T, i.e. swapping A and B. bias has n elements (one per
/// output column), dtype dtype_d. fp8 (e4m3/e5m2) A/B need transa=false,
/// transb=true (cuBLASLt "TN"); scale_a/scale_b point to one f32 each.
struct GemmSpec {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_d = 0;
  bool transa = false, transb = false;
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
  DType dtype_a = DType::bf16, dtype_b = DType::bf16, dtype_c = DType::bf16,
        dtype_d = DType::bf16;
  /// Accumulation type; only f32 is supported.
  DType compute = DType::f32;
  float alpha = 1.f, beta = 0.f;
  Epilogue epilogue = Epilogue::none;
  BufferRef bias;
  BufferRef a, b, c, d;
  BufferRef scale_a, scale_b;
};

/// Why cuBLASLt (f32 accumulation, f32 scale type) has no GEMM reading A and
/// B of these dtypes and writing D (and C) of `d`; "" when it has one. The
/// pairs it has: f32 x f32 -> f32; f16 x f16 -> f16 or f32; bf16 x bf16 ->
/// bf16 or f32; fp8 x fp8 (e4m3/e5m2, not e5m2 x e5m2) -> bf16, f16 or f32
/// (cuBLASLt's "cublasLtMatmul regular" type table; an fp8 D, which needs a
/// D scale, is not used). The lowering writes other results through an f32
/// product; Executable::Validate refuses them.
std::string UnsupportedGemmDTypes(DType a, DType b, DType d);

/// NCCL collective over the session's communicator.
struct CollectiveSpec {
  enum Op { AllReduce, AllGather, ReduceScatter };
  enum Reduction { Sum, Prod, Max, Min, Avg };
  Op op = AllReduce;
  Reduction reduction = Sum;
  DType dtype = DType::bf16;
  /// Elements per rank sent (AllReduce/AllGather) or received
  /// (ReduceScatter).
  int64_t count = 0;
  BufferRef send, recv;
};

/// Scaled dot-product attention that the runtime may run through cuDNN's
/// fused flash attention (SDPA forward) instead of the Kernel launch that
/// carries it (Launch::attention); that kernel computes the same result and
/// is what runs whenever cuDNN is absent or has no plan for the shape (see
/// CudnnAttention.h). o = softmax(q k^T * scale [causal]) v per head
/// (Vaswani et al. 2017) with fp32 accumulation. Layout as llm.attention:
/// q and o dense row-major [b, sq, hq, d], k and v [b, skv, hkv, d];
/// grouped-query attention (hkv divides hq, query head h reads kv head
/// h / (hq / hkv)). `causal` aligns at the bottom right (key j visible to
/// query i iff j <= i + skv - sq). dtype: bf16 or f16 for q/k/v/o.
/// `lse` (optional, buffer -1 when absent): the f32 [b, hq, sq] row
/// statistics an SDPA forward saves for its backward, lse_i = log sum_j
/// exp(s_ij) in the natural log (FlashAttention-2, Dao 2023, Algorithm 1
/// line 12), written by the same launch (llm.attention_logsumexp).
///
/// `backward`: the gradients instead (llm.attention_backward; Dao 2023,
/// Algorithm 2), through cuDNN's fused SDPA backward: reads q, k, v, o,
/// lse and grad_output (o's layout), writes grad_query, grad_key and
/// grad_value (q's, k's and v's layouts); row_sum (f32 [b, hq, sq]) and
/// dq_accum (f32 [b, hq, sq, d]) are scratch it overwrites. The launches
/// that carry one backward spec (llmc's kernels: D, the main kernel, dQ)
/// are its fallback together: the first of them runs cuDNN, and the others
/// are skipped when it did.
struct AttentionSpec {
  int64_t b = 0, sq = 0, skv = 0, hq = 0, hkv = 0, d = 0;
  bool causal = false;
  float scale = 1.f;
  DType dtype = DType::bf16;
  BufferRef q, k, v, o, lse;
  bool backward = false;
  BufferRef grad_output, grad_query, grad_key, grad_value, row_sum, dq_accum;

  bool has_lse() const { return lse.buffer >= 0; }
};

/// One buffer an AttentionSpec reads or writes: its name ("q", "k", "v",
/// "o", "lse", "grad_output", "grad_query", "grad_key", "grad_value",
/// "row_sum", "dq_accum"), reference and size in bytes (0 when the size
/// overflows int64).
struct AttentionOperand {
  const char* name;
  BufferRef ref;
  int64_t bytes;
};

/// The buffers of `spec`: q, k, v, o and lse when present for the
/// forward; for the backward q, k, v, o, lse, grad_output, grad_query,
/// grad_key, grad_value, row_sum, dq_accum.
std::vector<AttentionOperand> AttentionOperands(const AttentionSpec& spec);

struct Launch {
  enum Kind { Kernel, Gemm, Collective, Copy };
  Kind kind = Kernel;
  /// Kernel: index into Executable::kernels.
  int kernel = -1;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  /// Dynamic shared memory, bytes.
  uint32_t smem = 0;
  std::vector<Arg> args;
  /// Gemm: index into Executable::gemms.
  int gemm = -1;
  /// Collective: index into Executable::collectives.
  int collective = -1;
  /// Copy: device-to-device copy of copy_bytes from src to dst.
  BufferRef src, dst;
  int64_t copy_bytes = 0;
  /// Free-form name for profiles ("layer3.attn.qkv").
  std::string label;
  /// Kernel only: index into Executable::attentions when the runtime may
  /// replace this (attention) kernel by cuDNN; -1: none. The kernel stays the
  /// fallback.
  int attention = -1;
};

struct Executable {
  /// 2: Buffer::Persistent, TensorSig::parameter, num_prepare_launches.
  static constexpr int kFormatVersion = 2;
  int format_version = kFormatVersion;
  std::vector<TensorSig> inputs, outputs;
  std::vector<Buffer> buffers;
  std::vector<KernelSpec> kernels;
  std::vector<GemmSpec> gemms;
  std::vector<CollectiveSpec> collectives;
  /// Optional cuDNN alternatives of attention kernels (Launch::attention).
  /// Serialized only when present, so files without them read as before and
  /// a runtime that does not know them runs the kernels.
  std::vector<AttentionSpec> attentions;
  std::vector<Launch> launches;
  /// launches[0, num_prepare_launches) are the parameter-preparation segment
  /// (e.g. weight quantization): they depend only on inputs marked
  /// `parameter`, write only Persistent buffers (and arena scratch of their
  /// own) and run once per parameter set (see ParameterGuard); the rest run
  /// on every call.
  int num_prepare_launches = 0;
  /// Size of the scratch arena, bytes.
  int64_t arena_bytes = 0;
  /// Dynamic dim name -> value this specialization was compiled for.
  std::map<std::string, int64_t> symbol_bindings;
  /// The compiler that made it ("llmc 0.1.0"), for diagnostics: empty when
  /// unknown (files written before it existed, executables built by hand).
  /// Serialized only when set; not part of what the runtime checks.
  std::string producer;

  /// Everything the runtime trusts, checked against the executable's own
  /// buffers and the hardware's limits with overflow-checked arithmetic:
  /// indices in range; signatures (rank <= kMaxTensorRank, dtype, dims in
  /// 0..2^40, at most kMaxTensorBytes, aliases of equal type); buffers
  /// (input/output buffers exactly their tensor's bytes, arena regions
  /// inside arena_bytes, constants holding their bytes); kernels (text
  /// source, names and headers without NUL bytes, a well-formed arch, a
  /// cubin that is a CUDA ELF whose headers and sections lie inside it, PTX
  /// without NUL bytes); launches (grid.x < 2^31, grid.y/z < 2^16, at most
  /// 1024 threads per block, <= 227 KiB dynamic shared memory, <= 32764
  /// parameter bytes, i32 arguments in range, buffer arguments inside their
  /// buffer); GEMMs (m, n, k, batch > 0, row strides >= rows, every operand's
  /// extent including batch strides inside its buffer, f32 accumulation,
  /// fp8 layout, bias and scales present and large enough); attention and
  /// copy extents; collective counts (per rank; ValidateCollectives checks
  /// the totals once the communicator's size is known); enum values.
  /// InvalidArgument naming the offending item and the expected bound.
  absl::Status Validate() const;
};

/// The totals Validate cannot check without the communicator: an
/// all-gather receives and a reduce-scatter sends `nranks * count`
/// elements. InvalidArgument naming the collective, the bytes needed and
/// those its buffer has.
absl::Status ValidateCollectives(const Executable& exe, int nranks);

/// Serializes to the LLMCX container (see file comment).
std::string SerializeExecutable(const Executable& exe);
/// Parses an LLMCX container. Errors: InvalidArgument for a non-LLMCX input
/// or a different format version (message names both versions), DataLoss for
/// truncation/corruption (size or checksum mismatch, malformed JSON/fields).
absl::StatusOr<Executable> DeserializeExecutable(const std::string& data);
/// Validates `exe` (an invalid executable is never written), then writes it
/// with AtomicWriteFile: `path` must be absent or a regular file and its
/// directory must exist.
absl::Status SaveExecutable(const Executable& exe, const std::string& path);
/// ReadFile (a regular file of at most kMaxReadBytes) + DeserializeExecutable;
/// errors name `path`.
absl::StatusOr<Executable> LoadExecutable(const std::string& path);

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_EXECUTABLE_H
