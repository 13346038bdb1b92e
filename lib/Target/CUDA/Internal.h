//===- Internal.h - helpers shared by the CUDA source generators ---------===//
#ifndef LLMC_LIB_TARGET_CUDA_INTERNAL_H
#define LLMC_LIB_TARGET_CUDA_INTERNAL_H

#include "llmc/Support/StatusMacros.h"
#include "llmc/Target/CUDA/KernelLibrary.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace llmc::cuda::detail {

/// Exact, deterministic float literal: "1.00000001e-06f" style (%.9g round
/// trips); inf/nan become __int_as_float(bits).
std::string FloatLit(float v);
/// Exact hex tag of a float's bits for kernel names ("3727c5ac").
std::string FloatTag(float v);
/// 64-bit FNV-1a, printed as 16 hex digits.
std::string HashHex(const std::string &s);
/// The PTX wrappers of the tensor-core attention kernels (cp.async,
/// ldmatrix, mma.sync m16n8k16, pack2), from "// ---- PTX wrappers (sm_80+)
/// ----"; the kernel emulator replaces this block (test/unit/kernels).
extern const char *const kFlashPtxHelpers;
/// ceil(a / b) for positive b.
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t RoundUp(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }
/// Largest power of two vector width (elements) with width*size <= 16 bytes
/// that divides n; 1 when none.
int VecWidth(int64_t n, int elem_size);
/// Assemble: preamble + "// config" block + body, every entry of the body
/// starting with llmcGridDependencyWait() and llmcLaunchDependents() unless
/// the body calls llmcGridDependencyWait() itself (see the preamble's
/// "programmatic dependent launch"; WaitsForGridDependency). Unimplemented
/// when a `static constexpr int kX = <literal>;` of config or body does not
/// fit int.
absl::StatusOr<std::string> Assemble(const std::string &header_comment,
                                     const std::string &config,
                                     const std::string &body);
/// A kernel variant: `body` with each `from` text replaced by its `to`
/// (every occurrence). Variants are written this way so that the base
/// kernel's source, and so every existing executable, stays byte-identical.
/// Internal error naming `what` when a `from` text is missing (the base
/// kernel changed under the variant).
absl::StatusOr<std::string>
SourceVariant(std::string body, const char *what,
              std::initializer_list<std::pair<std::string, std::string>> edits);
/// Grid sizes below 1 become 1. Unimplemented when the grid exceeds CUDA's
/// 2147483647 x 65535 x 65535 blocks.
absl::StatusOr<LaunchDims> Dims(int64_t gx, int64_t gy, int64_t gz, int64_t bx,
                                int64_t smem = 0);

/// The generators' two errors, both "llmc::cuda kernel generator: <msg>":
/// InvalidArgument for a configuration outside a generator's documented
/// contract (what its *Supported predicate or its config fields allow), and
/// Unimplemented for a well-formed configuration the kernel cannot serve
/// (sizes beyond 32-bit indices or CUDA's grid limits, too many strided dims).
absl::Status Invalid(const std::string &msg);
absl::Status Unsupported(const std::string &msg);

/// "sum", "mean", "max" or "min" (kernel names and comments).
const char *KindName(ReduceKind k);
/// The reductions' device helpers for `k` (RowKernels.cpp): kMean,
/// identity(), combine(a, b) (NaN-propagating for max/min), warpReduce(v) and
/// blockReduce(v, scratch) over fp32 accumulators.
std::string ReduceOps(ReduceKind k);

/// The elementwise ops' names ("add", "silu", ...) and operand counts
/// (Elementwise.cpp; EwNode::operands).
const char *EwOpName(EwOp op);
int EwArity(EwOp op);
/// The device functions the node statements call (ew_sigmoid, ew_silu,
/// ew_gelu_erf, ew_gelu_tanh), ending in a newline.
extern const char *const kEwDeviceHelpers;
/// The statement that computes node k of an elementwise DAG, as the
/// elementwise kernel's ew_body has it (Elementwise.cpp):
/// "const float n<k> = <expr>;  // <op> -> <type>" (int64_t for an integer
/// node; fp32 math for float nodes, int64 for integer ones), rounded to the
/// node's type when it is a cast or `round_every_node`. Operand -(i + 1)
/// names variable x<i>, of type value_types[i] (held as int64_t when an
/// integer type, else float); operand j >= 0 names n<j>. The operands must
/// be valid (the caller validates).
std::string EwNodeStatement(const std::vector<ScalarType> &value_types,
                            const std::vector<EwNode> &nodes, size_t k, bool round_every_node);

} // namespace llmc::cuda::detail

namespace llmc::cuda::detail {

} // namespace llmc::cuda::detail

#endif
