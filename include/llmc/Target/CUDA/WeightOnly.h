//===- WeightOnly.h - int8/int4 weight-only quantization kernels -*- C++ -*-===//
//
// CUDA C++ generators for llm.quantize_weight / llm.dequantize_weight and the
// fused dequantizing decode GEMV. Scheme (see LLMOps.td): symmetric absmax
// per group of `group` consecutive elements along K of a row-major [N, K]
// weight, scale = max|w| / Q (Q = 127 for 8 bits, 7 for 4 bits), q =
// rint(w / scale) in [-Q, Q] (0 when scale is 0); packed i8 [N, K] (8 bits)
// or [N, K / 2] (4 bits: element 2j in the low nibble of byte j, two's
// complement); scales f32 [N, K / group]. (Dettmers et al. 2022 absmax;
// group size 128 as in GPTQ, Frantar et al. 2023, and AWQ, Lin et al. 2024.)
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_TARGET_CUDA_WEIGHTONLY_H
#define LLMC_TARGET_CUDA_WEIGHTONLY_H

#include "llmc/Target/CUDA/KernelLibrary.h"

namespace llmc::cuda {

struct WeightQuantConfig {
  int bits = 4;              // 4 or 8
  int64_t group = 128;       // multiple of 64
  ScalarType dtype = ScalarType::bf16; // weight (quantize) / result (dequantize): f32, f16, bf16
};

/// True for bits 4/8, group % 64 == 0 and a float dtype.
bool WeightQuantSupported(const WeightQuantConfig &cfg);

/// llm.quantize_weight: one warp per group, IEEE f32 division and rintf, so
/// the bits equal the reference executor's. Arguments:
///   (int8_t* packed, float* scales, const T* w, long long n, long long k)
/// with w [n, k] row-major, k % group == 0.
/// InvalidArgument (both quantize and dequantize): a config
/// WeightQuantSupported rejects. Errors otherwise as in KernelLibrary.h.
absl::StatusOr<KernelCode> EmitQuantizeWeight(const WeightQuantConfig &cfg);
absl::StatusOr<LaunchDims> QuantizeWeightLaunch(const WeightQuantConfig &cfg, int64_t n, int64_t k);

/// llm.dequantize_weight: out[n, k] = T(q[n, k] * scales[n, k / group])
/// (f32 product, rounded to T), 8 elements per thread. Arguments:
///   (T* out, const int8_t* packed, const float* scales, long long n, long long k)
absl::StatusOr<KernelCode> EmitDequantizeWeight(const WeightQuantConfig &cfg);
absl::StatusOr<LaunchDims> DequantizeWeightLaunch(const WeightQuantConfig &cfg, int64_t n, int64_t k);

struct QuantGemvConfig {
  int bits = 4;                         // 4 or 8
  int64_t group = 128;                  // multiple of 32 (bits 4) / 16 (bits 8)
  ScalarType dtype = ScalarType::bf16;  // x and bias: bf16 or f16
  ScalarType out = ScalarType::bf16;    // y: f32, f16 or bf16
  int64_t m = 1;                        // rows of x, 1..kGemvMaxRows
  int64_t k = 4096;                     // multiple of group
  int64_t n = 4096;
  bool has_bias = false;
};

bool QuantGemvSupported(const QuantGemvConfig &cfg);

/// y[m, n] = sum_k x[m, k] * q[n, k] * scales[n, k / group] (+ bias[n]) for
/// decode (m <= kGemvMaxRows): one warp per output column streams the packed
/// row with 16-byte loads (32 int4 / 16 int8 weights each, all in one
/// group), several in flight per lane; fp32 accumulation, the group's scale
/// applied once per 16-byte chunk. The dequantized weight is used in f32
/// (never rounded to the activation type: at least as accurate as
/// matmul(x, dequantize_weight(q, s) : T)). x, packed 16-byte aligned.
/// Arguments:
///   (OutT* y, const T* x, const int8_t* packed, const float* scales,
///    const T* bias /*nullptr if none*/, long long n)
/// InvalidArgument: a config QuantGemvSupported rejects.
absl::StatusOr<KernelCode> EmitQuantGemv(const QuantGemvConfig &cfg);
absl::StatusOr<LaunchDims> QuantGemvLaunch(const QuantGemvConfig &cfg);

} // namespace llmc::cuda

#endif // LLMC_TARGET_CUDA_WEIGHTONLY_H
