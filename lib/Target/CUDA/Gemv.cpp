//===- Gemv.cpp - skinny matmul (decode GEMV) generator -------------------===//
//
// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for a handful of rows m: the
// shape of every projection in a decode step, where the weight read (N*K
// elements) is the whole cost and cuBLASLt's GEMM tiles leave bandwidth on
// the table. One warp per output column n streams the weight row w[n, :]
// with 16-byte loads (several in flight per lane), multiplies it against
// every x row (x is tiny and stays in L1/L2), and reduces the M partial sums
// with warp shuffles. fp32 accumulation.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {
constexpr int kGemvWarps = 8; // output columns per block
} // namespace

bool GemvSupported(const GemvConfig &c) {
  return (c.dtype == ScalarType::bf16 || c.dtype == ScalarType::f16) &&
         c.m >= 1 && c.m <= kGemvMaxRows && c.k >= 8 && c.k % 8 == 0 && c.n >= 1 &&
         c.unroll >= 1 && c.unroll <= kGemvMaxUnroll;
}

namespace {

bool OutTypeOk(ScalarType t) {
  return t == ScalarType::f32 || t == ScalarType::f16 || t == ScalarType::bf16;
}

/// The kernel-name suffix of a non-default unroll (default kernels keep
/// their names).
std::string UnrollTag(int unroll) {
  return unroll == kGemvUnroll ? "" : "_u" + std::to_string(unroll);
}

/// Configuration shared by every GEMV kernel of one (dtype, m, k, unroll).
std::string CommonConfig(ScalarType dtype, int64_t m, int64_t k, int unroll) {
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(dtype) << " T;\n"
      << "static constexpr int kM = " << m << ";      // rows of x (tokens)\n"
      << "static constexpr long long kK = " << k << "LL; // contraction length\n"
      << "static constexpr int kVec = 8;       // elements per 16-byte load\n"
      << "static constexpr int kWarps = " << kGemvWarps << ";\n"
      << "static constexpr int kUnroll = " << unroll << ";\n";
  return cfg.str();
}

/// The one warp-per-row dot product every GEMV kernel uses: acc[r][m] +=
/// sum over this lane's 16-byte chunks (lane, lane + 32, ...) of w_r * x[m].
/// The fp32 operations on one acc[r][m] come in the same order for every R,
/// so a row computed together with others (multi-output, SwiGLU) is bitwise
/// the row the single GEMV computes.
const char *kGemvRows = R"CUDA(
template <int R>
LLMC_DEV void gemvRows(const T* const (&w)[R], const T* __restrict__ x, int lane,
                       float (&acc)[R][kM]) {
  typedef LlmcVec<T, kVec> V;
  const V* xv = reinterpret_cast<const V*>(x);
  constexpr long long kChunks = kK / kVec;  // 16-byte chunks per row
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < kM; ++m) acc[r][m] = 0.f;
  // Programmatic dependent launch: the lines of this warp's first main-loop
  // weight loads start on their way into L2 while the previous launch
  // finishes; every load below comes after the wait (so x, and whatever
  // wrote the weights, are seen complete).
  constexpr long long kLineBytes = 128;
  constexpr long long kRowLines = (kK * (long long)sizeof(T) + kLineBytes - 1) / kLineBytes;
  constexpr long long kFirstLines = 32LL * kUnroll * kVec * (long long)sizeof(T) / kLineBytes;
#pragma unroll
  for (int r = 0; r < R; ++r)
    for (long long l = lane; l < kFirstLines && l < kRowLines; l += 32)
      llmcPrefetchL2(reinterpret_cast<const char*>(w[r]) + l * kLineBytes);
  llmcGridDependencyWait();
  llmcLaunchDependents();
  long long c = lane;
  // Main loop: R * kUnroll independent weight loads per lane in flight.
  for (; c + 32 * (kUnroll - 1) < kChunks; c += 32 * kUnroll) {
    V wv[R][kUnroll];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[r][u] = reinterpret_cast<const V*>(w[r])[c + 32 * u];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          const V xm = xv[m * kChunks + c + 32 * u];
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[r][m] += toF(wv[r][u].v[e]) * toF(xm.v[e]);
        }
      }
    }
  }
  for (; c < kChunks; c += 32) {  // tail
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const V wv = reinterpret_cast<const V*>(w[r])[c];
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        const V xm = xv[m * kChunks + c];
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[r][m] += toF(wv.v[e]) * toF(xm.v[e]);
      }
    }
  }
}
)CUDA";

} // namespace

absl::StatusOr<KernelCode> EmitGemv(const GemvConfig &c) {
  if (!GemvSupported(c)) return Invalid("gemv: unsupported configuration");
  KernelCode kc;
  kc.name = std::string("llmc_gemv_") + ScalarTypeTag(c.dtype) + "_" + ScalarTypeTag(c.out) +
            "_m" + std::to_string(c.m) + "_k" + std::to_string(c.k) + (c.has_bias ? "_bias" : "") +
            UnrollTag(c.unroll);
  std::ostringstream cfg;
  cfg << CommonConfig(c.dtype, c.m, c.k, c.unroll)
      << "typedef " << CTypeName(c.out) << " OutT;\n"
      << "static constexpr bool kBias = " << (c.has_bias ? "true" : "false") << ";\n";
  std::ostringstream b;
  b << kGemvRows;
  b << "\nextern \"C\" __global__ void __launch_bounds__(kWarps * 32) " << kc.name << R"CUDA((
    OutT* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w,
    const T* __restrict__ bias, long long n_cols) {
  const int lane = threadIdx.x & 31;
  const long long n = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (n >= n_cols) return;
  const T* const wrow[1] = {w + n * kK};
  float acc[1][kM];
  gemvRows<1>(wrow, x, lane, acc);
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    const float s = warpSum(acc[0][m]);
    if (lane == 0) {
      const float bv = kBias ? toF(bias[n]) : 0.f;
      y[(long long)m * n_cols + n] = fromF<OutT>(s + bv);
    }
  }
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(
      kc.source, Assemble("// llmc skinny matmul (decode GEMV): y[m,n] = sum_k x[m,k] * w[n,k] (+ bias[n]),\n"
                          "// w row-major [N, K] (nn.Linear layout); one warp per output column,\n"
                          "// 16-byte weight loads, fp32 accumulation.\n",
                          cfg.str(), b.str()));
  return kc;
}

bool MultiGemvSupported(const MultiGemvConfig &c) {
  if (c.num_outputs < 1 || c.num_outputs > kMultiGemvMaxOutputs) return false;
  GemvConfig g;
  g.dtype = c.dtype;
  g.m = c.m;
  g.k = c.k;
  g.unroll = c.unroll;
  if (!GemvSupported(g)) return false;
  // Every weight has rows: a grid whose warps all returned before the wait
  // would let the next launch overlap what this one's predecessor writes.
  for (int i = 0; i < c.num_outputs; ++i)
    if (!OutTypeOk(c.out[i]) || c.n[i] < 1) return false;
  return true;
}

absl::StatusOr<KernelCode> EmitMultiGemv(const MultiGemvConfig &c) {
  if (!MultiGemvSupported(c)) return Invalid("multi-output gemv: unsupported configuration");
  const int nout = c.num_outputs;
  KernelCode kc;
  kc.name = std::string("llmc_multigemv_") + ScalarTypeTag(c.dtype) + "_m" + std::to_string(c.m) +
            "_k" + std::to_string(c.k);
  for (int i = 0; i < nout; ++i)
    kc.name += std::string("_") + ScalarTypeTag(c.out[i]) + (c.has_bias[i] ? "b" : "");
  kc.name += UnrollTag(c.unroll);
  std::ostringstream cfg;
  cfg << CommonConfig(c.dtype, c.m, c.k, c.unroll);
  for (int i = 0; i < nout; ++i)
    cfg << "typedef " << CTypeName(c.out[i]) << " OutT" << i << ";\n"
        << "static constexpr bool kBias" << i << " = " << (c.has_bias[i] ? "true" : "false")
        << ";\n";
  std::ostringstream b;
  b << kGemvRows;
  b << R"CUDA(
// One weight row's kM outputs: warp reduction, bias, rounding to OutT.
template <typename OutT, bool kHasBias>
LLMC_DEV void gemvStore(OutT* __restrict__ y, const T* __restrict__ bias, long long n,
                        long long n_cols, int lane, float (&acc)[1][kM]) {
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    const float s = warpSum(acc[0][m]);
    if (lane == 0) {
      const float bv = kHasBias ? toF(bias[n]) : 0.f;
      y[(long long)m * n_cols + n] = fromF<OutT>(s + bv);
    }
  }
}
)CUDA";
  b << "\nextern \"C\" __global__ void __launch_bounds__(kWarps * 32) " << kc.name
    << "(\n    const T* __restrict__ x";
  for (int i = 0; i < nout; ++i)
    b << ",\n    OutT" << i << "* __restrict__ y" << i << ", const T* __restrict__ w" << i
      << ", const T* __restrict__ bias" << i << ", long long n" << i;
  b << ") {\n"
    << "  const int lane = threadIdx.x & 31;\n"
    << "  // The rows of every weight form one work list (w0's, then w1's, ...);\n"
    << "  // warp r of the grid takes row r. A warp never straddles two weights.\n"
    << "  long long r = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);\n"
    << "  int seg = " << nout << ";\n"
    << "  const T* wbase = nullptr;\n";
  for (int i = 0; i < nout; ++i) {
    b << "  if (seg == " << nout << ") {\n"
      << "    if (r < n" << i << ") { seg = " << i << "; wbase = w" << i << "; }\n"
      << "    else r -= n" << i << ";\n"
      << "  }\n";
  }
  b << "  if (seg == " << nout << ") return;\n"
    << "  const T* const wrow[1] = {wbase + r * kK};\n"
    << "  float acc[1][kM];\n"
    << "  gemvRows<1>(wrow, x, lane, acc);\n";
  for (int i = 0; i < nout; ++i)
    b << "  " << (i ? "else " : "") << "if (seg == " << i << ") gemvStore<OutT" << i << ", kBias"
      << i << ">(y" << i << ", bias" << i << ", r, n" << i << ", lane, acc);\n";
  b << "}\n";
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble(
      "// llmc multi-output decode GEMV: y_i[m,n] = sum_k x[m,k] * w_i[n,k] (+ bias_i[n])\n"
      "// for weights w_i [N_i, K] that share x; one launch, one warp per output column\n"
      "// over the rows of every w_i, 16-byte weight loads, fp32 accumulation.\n",
      cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> MultiGemvLaunch(const MultiGemvConfig &c) {
  int64_t rows = 0;
  for (int i = 0; i < c.num_outputs; ++i) rows += c.n[i];
  return Dims(CeilDiv(std::max<int64_t>(rows, 1), kGemvWarps), 1, 1, kGemvWarps * 32);
}

bool SwiGluGemvSupported(const SwiGluGemvConfig &c) {
  GemvConfig g;
  g.dtype = c.dtype;
  g.m = c.m;
  g.k = c.k;
  g.n = c.n;
  g.unroll = c.unroll;
  return GemvSupported(g) && OutTypeOk(c.gate_out) && OutTypeOk(c.up_out) &&
         OutTypeOk(c.act_out) && OutTypeOk(c.out);
}

absl::StatusOr<KernelCode> EmitSwiGluGemv(const SwiGluGemvConfig &c) {
  if (!SwiGluGemvSupported(c)) return Invalid("swiglu gemv: unsupported configuration");
  KernelCode kc;
  kc.name = std::string("llmc_swiglu_gemv_") + ScalarTypeTag(c.dtype) + "_m" + std::to_string(c.m) +
            "_k" + std::to_string(c.k) + "_" + ScalarTypeTag(c.gate_out) + ScalarTypeTag(c.up_out) +
            ScalarTypeTag(c.act_out) + ScalarTypeTag(c.out) + (c.has_bias ? "_bias" : "") +
            UnrollTag(c.unroll);
  std::ostringstream cfg;
  cfg << CommonConfig(c.dtype, c.m, c.k, c.unroll)
      << "typedef " << CTypeName(c.gate_out) << " GateT;  // x @ w_gate^T, rounded\n"
      << "typedef " << CTypeName(c.up_out) << " UpT;    // x @ w_up^T, rounded\n"
      << "typedef " << CTypeName(c.act_out) << " ActT;   // silu(gate), rounded\n"
      << "typedef " << CTypeName(c.out) << " OutT;   // silu(gate) * up\n"
      << "static constexpr bool kBias = " << (c.has_bias ? "true" : "false") << ";\n";
  std::ostringstream b;
  b << kGemvRows;
  b << "\nextern \"C\" __global__ void __launch_bounds__(kWarps * 32) " << kc.name << R"CUDA((
    OutT* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w_gate,
    const T* __restrict__ w_up, const T* __restrict__ bias_gate,
    const T* __restrict__ bias_up, long long n_cols) {
  const int lane = threadIdx.x & 31;
  const long long n = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (n >= n_cols) return;
  // Row n of both weights in one warp: both dot products end in registers.
  const T* const wrow[2] = {w_gate + n * kK, w_up + n * kK};
  float acc[2][kM];
  gemvRows<2>(wrow, x, lane, acc);
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    const float sg = warpSum(acc[0][m]);
    const float su = warpSum(acc[1][m]);
    if (lane == 0) {
      // Each intermediate rounded to its type, as the unfused GEMVs and the
      // elementwise kernel (every node rounded) do.
      const float g = toF(fromF<GateT>(sg + (kBias ? toF(bias_gate[n]) : 0.f)));
      const float u = toF(fromF<UpT>(su + (kBias ? toF(bias_up[n]) : 0.f)));
      const float a = toF(fromF<ActT>(g / (1.0f + expf(-g))));  // silu
      y[(long long)m * n_cols + n] = fromF<OutT>(a * u);
    }
  }
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble(
      "// llmc SwiGLU decode GEMV: y[m,n] = silu(x[m,:] . w_gate[n,:]) * (x[m,:] . w_up[n,:]),\n"
      "// w_gate, w_up row-major [N, K]; one warp per output column reads row n of both,\n"
      "// 16-byte weight loads, fp32 accumulation; gate and up are never written.\n",
      cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> SwiGluGemvLaunch(const SwiGluGemvConfig &c) {
  return Dims(CeilDiv(c.n, kGemvWarps), 1, 1, kGemvWarps * 32);
}

absl::StatusOr<LaunchDims> GemvLaunch(const GemvConfig &c) {
  return Dims(CeilDiv(c.n, kGemvWarps), 1, 1, kGemvWarps * 32);
}

} // namespace llmc::cuda
