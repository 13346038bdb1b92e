//===- Preamble.cpp - header-free CUDA preamble for generated kernels ------===//

#include "Internal.h"

namespace llmc::cuda {

namespace {
// The preamble must compile with NVRTC without any CUDA header and with
// `nvcc -cubin` (which pre-includes cuda_runtime.h) alike, so every name is
// either guarded or llmc-specific.
constexpr std::string_view kPreamble = R"CUDA(
// ===== llmc preamble (header-free; NVRTC and nvcc) =====
#ifndef LLMC_PREAMBLE_INCLUDED
#define LLMC_PREAMBLE_INCLUDED
#if defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

#define LLMC_DEV static __device__ __forceinline__
#define LLMC_INF __int_as_float(0x7f800000)
#define LLMC_NAN __int_as_float(0x7fffffff)
#define LLMC_LOG2E 1.4426950408889634f

// ---- 16-bit and 8-bit float storage types (bit patterns) ----
struct __align__(2) bf16 { uint16_t bits; };
struct __align__(2) f16 { uint16_t bits; };
struct __align__(1) fp8e4m3 { uint8_t bits; };
struct __align__(1) fp8e5m2 { uint8_t bits; };

// ---- to float ----
LLMC_DEV float toF(float v) { return v; }
LLMC_DEV float toF(bf16 v) { return __uint_as_float(((uint32_t)v.bits) << 16); }
LLMC_DEV float toF(f16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}
LLMC_DEV float toF(fp8e5m2 v) {  // e5m2 is the upper byte of an f16
  f16 h; h.bits = (uint16_t)((uint32_t)v.bits << 8);
  return toF(h);
}
LLMC_DEV float toF(fp8e4m3 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t h2;
  uint16_t in = (uint16_t)v.bits;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(in));
  f16 h; h.bits = (uint16_t)(h2 & 0xffffu);
  return toF(h);
#else
  // Software decode: e4m3fn, bias 7, no inf, 0x7f/0xff = NaN.
  uint32_t sign = ((uint32_t)v.bits & 0x80u) << 24;
  uint32_t e = ((uint32_t)v.bits >> 3) & 0xfu, m = (uint32_t)v.bits & 0x7u;
  float mag;
  if (e == 15u && m == 7u) return LLMC_NAN;
  if (e == 0u) mag = (float)m * (1.0f / 512.0f);   // subnormal: m * 2^-9
  else mag = __uint_as_float(((e + 120u) << 23) | (m << 20));
  return __uint_as_float(__float_as_uint(mag) | sign);
#endif
}
LLMC_DEV float toF(int8_t v) { return (float)v; }
LLMC_DEV float toF(uint8_t v) { return (float)v; }
LLMC_DEV float toF(int32_t v) { return (float)v; }
LLMC_DEV float toF(int64_t v) { return (float)v; }

// ---- from float (round to nearest even; fp8 saturates to finite max) ----
template <typename T> LLMC_DEV T fromF(float f);
template <> __device__ __forceinline__ float fromF<float>(float f) { return f; }
template <> __device__ __forceinline__ bf16 fromF<bf16>(float f) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(f));
  return r;
}
template <> __device__ __forceinline__ f16 fromF<f16>(float f) {
  f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(f));
  return r;
}
// Software fp8 encoder (RNE, satfinite: |x| > max -> max, NaN -> NaN).
// MBITS mantissa bits, BIAS exponent bias, MAXCODE the largest finite code.
template <int MBITS, int BIAS, uint32_t MAXCODE, uint32_t NANCODE>
LLMC_DEV uint8_t llmc_fp8_encode(float f) {
  uint32_t bits = __float_as_uint(f);
  uint32_t sign = (bits >> 24) & 0x80u;
  uint32_t abits = bits & 0x7fffffffu;
  if (abits > 0x7f800000u) return (uint8_t)(sign | NANCODE);
  float a = __uint_as_float(abits);
  // min normal 2^(1-BIAS)
  const float min_normal = __uint_as_float((uint32_t)(127 + 1 - BIAS) << 23);
  uint32_t code;
  if (a < min_normal) {
    // subnormal grid: multiples of 2^(1-BIAS-MBITS); rintf = RNE
    const float inv_step = __uint_as_float((uint32_t)(127 + BIAS - 1 + MBITS) << 23);
    code = (uint32_t)rintf(a * inv_step);  // 2^MBITS == smallest normal code
  } else {
    const int shift = 23 - MBITS;
    uint32_t r = abits + ((1u << (shift - 1)) - 1u) + ((abits >> shift) & 1u);
    r >>= shift;                                       // RNE, carry into exponent
    uint32_t rebias = (uint32_t)(127 - BIAS) << MBITS;
    code = (r > rebias + MAXCODE || abits >= 0x7f800000u) ? MAXCODE : r - rebias;
  }
  return (uint8_t)(sign | code);
}
template <> __device__ __forceinline__ fp8e4m3 fromF<fp8e4m3>(float f) {
  fp8e4m3 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
  r.bits = (uint8_t)(pair & 0xffu);  // second source goes to the low byte
#else
  r.bits = llmc_fp8_encode<3, 7, 0x7eu, 0x7fu>(f);   // max 448
#endif
  return r;
}
template <> __device__ __forceinline__ fp8e5m2 fromF<fp8e5m2>(float f) {
  fp8e5m2 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t pair;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
  r.bits = (uint8_t)(pair & 0xffu);
#else
  r.bits = llmc_fp8_encode<2, 15, 0x7bu, 0x7fu>(f);  // max 57344
#endif
  return r;
}
// float -> integer: truncation toward zero (C / PyTorch .to(int)).
template <> __device__ __forceinline__ int8_t fromF<int8_t>(float f) { return (int8_t)(int)f; }
template <> __device__ __forceinline__ uint8_t fromF<uint8_t>(float f) { return (uint8_t)(f != 0.0f); }
template <> __device__ __forceinline__ int32_t fromF<int32_t>(float f) { return (int32_t)f; }
template <> __device__ __forceinline__ int64_t fromF<int64_t>(float f) { return (int64_t)f; }

// ---- integer view of any storage type (used by integer-typed math) ----
LLMC_DEV int64_t toI(float v) { return (int64_t)v; }
LLMC_DEV int64_t toI(bf16 v) { return (int64_t)toF(v); }
LLMC_DEV int64_t toI(f16 v) { return (int64_t)toF(v); }
LLMC_DEV int64_t toI(fp8e4m3 v) { return (int64_t)toF(v); }
LLMC_DEV int64_t toI(fp8e5m2 v) { return (int64_t)toF(v); }
LLMC_DEV int64_t toI(int8_t v) { return v; }
LLMC_DEV int64_t toI(uint8_t v) { return v; }
LLMC_DEV int64_t toI(int32_t v) { return v; }
LLMC_DEV int64_t toI(int64_t v) { return v; }
template <typename T> LLMC_DEV T fromI(int64_t v) { return fromF<T>((float)v); }
template <> __device__ __forceinline__ int8_t fromI<int8_t>(int64_t v) { return (int8_t)v; }
template <> __device__ __forceinline__ uint8_t fromI<uint8_t>(int64_t v) { return (uint8_t)(v != 0); }
template <> __device__ __forceinline__ int32_t fromI<int32_t>(int64_t v) { return (int32_t)v; }
template <> __device__ __forceinline__ int64_t fromI<int64_t>(int64_t v) { return v; }

// ---- vector of N storage elements for 16-byte (or smaller) accesses ----
template <typename T, int N> struct alignas(sizeof(T) * N > 16 ? 16 : sizeof(T) * N) LlmcVec {
  T v[N];
};

// ---- NaN-propagating max/min (torch.maximum semantics) ----
LLMC_DEV float llmc_maxf(float a, float b) { return (a != a || b != b) ? LLMC_NAN : fmaxf(a, b); }
LLMC_DEV float llmc_minf(float a, float b) { return (a != a || b != b) ? LLMC_NAN : fminf(a, b); }

// ---- programmatic dependent launch (sm_90+; CUDA Programming Guide 4.5) ----
// The runtime may start a kernel while the previous kernel in the stream is
// still running (launch attribute PROGRAMMATIC_STREAM_SERIALIZATION).
// llmcGridDependencyWait() returns once that kernel has completed and its
// writes are visible; every llmc kernel calls it before its first access to
// memory that an earlier launch may write or read (Assemble makes it the
// entry's first statement unless the kernel places it itself), then
// llmcLaunchDependents() lets the next kernel start. No-ops below sm_90 and
// without the attribute.
LLMC_DEV void llmcGridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
LLMC_DEV void llmcLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Starts moving the 128-byte line at p from DRAM into L2 (a hint, no data
// returned). Safe before llmcGridDependencyWait() whatever writes p: L2 is
// the point of coherence, so a later load after the wait sees the writes.
LLMC_DEV void llmcPrefetchL2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
}

// ---- warp / block reductions (butterfly __shfl_xor_sync) ----
LLMC_DEV float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
LLMC_DEV float warpMax(float v) {  // ignores NaN (fmaxf)
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
LLMC_DEV float warpMaxNan(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = llmc_maxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
LLMC_DEV float warpMinNan(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = llmc_minf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide reductions over blockDim.x threads (multiple of 32, <= 1024).
// `scratch` must hold 32 floats; every thread gets the result. Contains two
// __syncthreads, so the same scratch may be reused by the next call.
LLMC_DEV float blockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  v = warpSum(v);
  __syncthreads();                 // protect scratch from a previous use
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return warpSum(v);
}
LLMC_DEV float blockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  v = warpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : -LLMC_INF;
  return warpMax(v);
}
#endif  // LLMC_PREAMBLE_INCLUDED
// ===== end of llmc preamble =====
)CUDA";
} // namespace

std::string_view Preamble() { return kPreamble; }

} // namespace llmc::cuda
