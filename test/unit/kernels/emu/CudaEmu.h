//===- CudaEmu.h - run generated CUDA kernels on the CPU (test only) -------===//
//
// A tiny CUDA execution emulator so that generated kernels can be checked
// against CPU references without a GPU. The generated source (minus our device
// preamble) is compiled as host C++ against this header: every CUDA thread is
// a std::thread, one block at a time; __syncthreads is a block barrier, warp
// shuffles / ldmatrix / mma.sync go through per-warp exchange slots and a
// warp barrier, implementing the PTX ISA fragment layouts independently of
// the kernel code. Slow; for small shapes only. Requires convergent warps at
// every shuffle / ldmatrix / mma (true for all llmc kernels).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <math.h>

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "../CpuReference.h"

struct dim3 { unsigned x = 1, y = 1, z = 1; };

namespace emu {
class Barrier {
 public:
  void reset(int n) { n_ = n; count_ = 0; gen_ = 0; }
  void wait() {
    std::unique_lock<std::mutex> lk(m_);
    const unsigned gen = gen_;
    if (++count_ == n_) { count_ = 0; ++gen_; cv_.notify_all(); return; }
    cv_.wait(lk, [&] { return gen != gen_; });
  }
 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_ = 0, count_ = 0;
  unsigned gen_ = 0;
};
inline Barrier block_barrier;
inline Barrier warp_barrier[32];
inline uint32_t warp_slot[32][32][8];
inline char *dyn_smem = nullptr;
inline std::mutex atomic_mutex;
}  // namespace emu

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define __shared__ static

inline void __syncthreads() { emu::block_barrier.wait(); }
inline void emu_warp_sync() { emu::warp_barrier[threadIdx.x >> 5].wait(); }

template <typename V> inline V __shfl_xor_sync(unsigned, V v, int o) {
  static_assert(sizeof(V) == 4, "32-bit shuffles only");
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  std::memcpy(&emu::warp_slot[w][l][0], &v, 4);
  emu_warp_sync();
  V r;
  std::memcpy(&r, &emu::warp_slot[w][l ^ o][0], 4);
  emu_warp_sync();
  return r;
}
template <typename V> inline V __shfl_sync(unsigned, V v, int src) {
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  std::memcpy(&emu::warp_slot[w][l][0], &v, 4);
  emu_warp_sync();
  V r;
  std::memcpy(&r, &emu::warp_slot[w][src & 31][0], 4);
  emu_warp_sync();
  return r;
}
// Warp votes over the full warp (every kernel passes 0xffffffff).
inline int __any_sync(unsigned, int pred) {
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  const int mine = pred ? 1 : 0;
  std::memcpy(&emu::warp_slot[w][l][0], &mine, 4);
  emu_warp_sync();
  int any = 0;
  for (int i = 0; i < 32; ++i) {
    int v;
    std::memcpy(&v, &emu::warp_slot[w][i][0], 4);
    any |= v;
  }
  emu_warp_sync();
  return any;
}
inline float atomicAdd(float *p, float v) {
  std::lock_guard<std::mutex> lk(emu::atomic_mutex);
  const float old = *p;
  *p = old + v;
  return old;
}
inline unsigned int atomicAdd(unsigned int *p, unsigned int v) {
  std::lock_guard<std::mutex> lk(emu::atomic_mutex);
  const unsigned int old = *p;
  *p = old + v;
  return old;
}
inline unsigned int atomicInc(unsigned int *p, unsigned int limit) {
  std::lock_guard<std::mutex> lk(emu::atomic_mutex);
  const unsigned int old = *p;
  *p = old >= limit ? 0u : old + 1u;
  return old;
}
// Blocks run one at a time: memory is always coherent.
inline void __threadfence() {}
template <typename T> inline T __ldcg(const T *p) { return *p; }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
// Result byte i = byte (s >> 4i) & 7 of the 8 bytes {y, x} (x = bytes 0..3),
// as the CUDA Math API documents __byte_perm.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t v = ((uint64_t)y << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
}
inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
inline float __uint_as_float(uint32_t v) { float f; std::memcpy(&f, &v, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t v; std::memcpy(&v, &f, 4); return v; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float exp2f(float x) { return std::exp2(x); }
inline void sincosf(float x, float *s, float *c) { *s = std::sin(x); *c = std::cos(x); }

// ---- host version of the llmc preamble (same names and semantics) ----
#define LLMC_DEV static inline
#define LLMC_INF __int_as_float(0x7f800000)
#define LLMC_NAN __int_as_float(0x7fffffff)
#define LLMC_LOG2E 1.4426950408889634f
struct alignas(2) bf16 { uint16_t bits; };
struct alignas(2) f16 { uint16_t bits; };
struct alignas(1) fp8e4m3 { uint8_t bits; };
struct alignas(1) fp8e5m2 { uint8_t bits; };
LLMC_DEV float toF(float v) { return v; }
LLMC_DEV float toF(bf16 v) { return llmc::ref::FromBf16(v.bits); }
LLMC_DEV float toF(f16 v) { _Float16 h; std::memcpy(&h, &v.bits, 2); return (float)h; }
LLMC_DEV float toF(fp8e4m3 v) { return llmc::ref::FromE4M3(v.bits); }
LLMC_DEV float toF(fp8e5m2 v) { return llmc::ref::FromE5M2(v.bits); }
LLMC_DEV float toF(int8_t v) { return v; }
LLMC_DEV float toF(uint8_t v) { return v; }
LLMC_DEV float toF(int32_t v) { return (float)v; }
LLMC_DEV float toF(int64_t v) { return (float)v; }
template <typename T> T fromF(float f);
template <> inline float fromF<float>(float f) { return f; }
template <> inline bf16 fromF<bf16>(float f) { return bf16{llmc::ref::ToBf16(f)}; }
template <> inline f16 fromF<f16>(float f) { _Float16 h = (_Float16)f; f16 r; std::memcpy(&r.bits, &h, 2); return r; }
template <> inline fp8e4m3 fromF<fp8e4m3>(float f) { return fp8e4m3{llmc::ref::ToE4M3(f)}; }
template <> inline fp8e5m2 fromF<fp8e5m2>(float f) { return fp8e5m2{llmc::ref::ToE5M2(f)}; }
template <> inline int8_t fromF<int8_t>(float f) { return (int8_t)(int)f; }
template <> inline uint8_t fromF<uint8_t>(float f) { return f != 0.0f; }
template <> inline int32_t fromF<int32_t>(float f) { return (int32_t)f; }
template <> inline int64_t fromF<int64_t>(float f) { return (int64_t)f; }
template <typename S> LLMC_DEV int64_t toI(S v) { return (int64_t)toF(v); }
LLMC_DEV int64_t toI(int8_t v) { return v; }
LLMC_DEV int64_t toI(uint8_t v) { return v; }
LLMC_DEV int64_t toI(int32_t v) { return v; }
LLMC_DEV int64_t toI(int64_t v) { return v; }
template <typename T> T fromI(int64_t v) { return fromF<T>((float)v); }
template <> inline int8_t fromI<int8_t>(int64_t v) { return (int8_t)v; }
template <> inline uint8_t fromI<uint8_t>(int64_t v) { return v != 0; }
template <> inline int32_t fromI<int32_t>(int64_t v) { return (int32_t)v; }
template <> inline int64_t fromI<int64_t>(int64_t v) { return v; }
template <typename T, int N> struct alignas(sizeof(T) * N > 16 ? 16 : sizeof(T) * N) LlmcVec { T v[N]; };
LLMC_DEV float llmc_maxf(float a, float b) { return (a != a || b != b) ? LLMC_NAN : fmaxf(a, b); }
LLMC_DEV float llmc_minf(float a, float b) { return (a != a || b != b) ? LLMC_NAN : fminf(a, b); }
// Programmatic dependent launch: blocks run one at a time after the previous
// launch, so there is nothing to wait for; a prefetch is only a hint.
LLMC_DEV void llmcGridDependencyWait() {}
LLMC_DEV void llmcLaunchDependents() {}
LLMC_DEV void llmcPrefetchL2(const void *) {}
LLMC_DEV float warpSum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }
LLMC_DEV float warpMax(float v) { for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o)); return v; }
LLMC_DEV float warpMaxNan(float v) { for (int o = 16; o > 0; o >>= 1) v = llmc_maxf(v, __shfl_xor_sync(0xffffffffu, v, o)); return v; }
LLMC_DEV float warpMinNan(float v) { for (int o = 16; o > 0; o >>= 1) v = llmc_minf(v, __shfl_xor_sync(0xffffffffu, v, o)); return v; }
LLMC_DEV float blockSum(float v, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warpSum(v); __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return warpSum(v);
}
LLMC_DEV float blockMax(float v, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warpMax(v); __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : -LLMC_INF;
  return warpMax(v);
}

// ---- PTX wrappers used by the flash-attention kernel, per the PTX ISA ----
// (only valid after `typedef ... T;` of the kernel config: defined as a macro
// block that the test inserts after the config.)
#define LLMC_EMU_PTX_WRAPPERS                                                            \
  LLMC_DEV uint32_t smemAddr(const void *p) { return (uint32_t)((const char *)p - emu::dyn_smem); } \
  LLMC_DEV void cpAsync16(uint32_t dst, const void *src, int n) {                        \
    if (n) std::memcpy(emu::dyn_smem + dst, src, 16); else std::memset(emu::dyn_smem + dst, 0, 16); } \
  LLMC_DEV void cpAsyncCommit() {}                                                       \
  LLMC_DEV void cpAsyncWaitAll() {}                                                      \
  LLMC_DEV const uint16_t *emuRow(int w, int l) {                                        \
    return (const uint16_t *)(emu::dyn_smem + emu::warp_slot[w][l][0]); }                \
  LLMC_DEV void ldmatrixX4(uint32_t (&r)[4], uint32_t addr) {                            \
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;                                \
    emu::warp_slot[w][l][0] = addr; emu_warp_sync();                                     \
    for (int i = 0; i < 4; ++i) { const uint16_t *row = emuRow(w, i * 8 + l / 4);        \
      r[i] = row[2 * (l % 4)] | ((uint32_t)row[2 * (l % 4) + 1] << 16); }                \
    emu_warp_sync(); }                                                                   \
  LLMC_DEV void ldmatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {                       \
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;                                \
    emu::warp_slot[w][l][0] = addr; emu_warp_sync();                                     \
    for (int i = 0; i < 4; ++i) {                                                        \
      const uint16_t *r0 = emuRow(w, i * 8 + 2 * (l % 4)), *r1 = emuRow(w, i * 8 + 2 * (l % 4) + 1); \
      r[i] = r0[l / 4] | ((uint32_t)r1[l / 4] << 16); }                                  \
    emu_warp_sync(); }                                                                   \
  LLMC_DEV float emuHalf(uint32_t u, int hi) { T t; t.bits = (uint16_t)(hi ? u >> 16 : u & 0xffff); return toF(t); } \
  LLMC_DEV void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { \
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;                                \
    for (int i = 0; i < 4; ++i) emu::warp_slot[w][l][i] = a[i];                          \
    emu::warp_slot[w][l][4] = b0; emu::warp_slot[w][l][5] = b1; emu_warp_sync();         \
    float A[16][16], B[16][8];                                                           \
    for (int L = 0; L < 32; ++L) { const int g = L / 4, c = 2 * (L % 4);                 \
      const uint32_t *s = emu::warp_slot[w][L];                                          \
      for (int h = 0; h < 2; ++h) {                                                      \
        A[g][c + h] = emuHalf(s[0], h); A[g + 8][c + h] = emuHalf(s[1], h);              \
        A[g][c + 8 + h] = emuHalf(s[2], h); A[g + 8][c + 8 + h] = emuHalf(s[3], h);      \
        B[c + h][g] = emuHalf(s[4], h); B[c + 8 + h][g] = emuHalf(s[5], h); } }          \
    emu_warp_sync();                                                                     \
    const int g = l / 4, c = 2 * (l % 4);                                                \
    for (int e = 0; e < 4; ++e) { const int row = g + (e >> 1) * 8, col = c + (e & 1);   \
      float acc = d[e]; for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col]; d[e] = acc; } } \
  LLMC_DEV uint32_t pack2(float lo, float hi) {                                          \
    return (uint32_t)fromF<T>(lo).bits | ((uint32_t)fromF<T>(hi).bits << 16); }

namespace emu {
// Runs `kernel` for every block of grid (sequentially) with block.x threads.
inline void Launch(dim3 grid, dim3 block, unsigned smem, const std::function<void()> &kernel) {
  gridDim = grid;
  blockDim = block;
  std::vector<char> dyn(smem + 16);
  dyn_smem = dyn.data();
  const int nthreads = block.x;
  block_barrier.reset(nthreads);
  for (int w = 0; w < 32; ++w) warp_barrier[w].reset(32);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::vector<std::thread> ts;
        ts.reserve(nthreads);
        for (int t = 0; t < nthreads; ++t)
          ts.emplace_back([&, t, x, y, z] {
            threadIdx = dim3{(unsigned)t, 0, 0};
            blockIdx = dim3{x, y, z};
            kernel();
          });
        for (auto &th : ts) th.join();
      }
}
}  // namespace emu
