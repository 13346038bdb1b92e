//===- RowKernels.cpp - RMSNorm, LayerNorm, softmax, row reductions -------===//
//
// All "one row at a time" kernels share one geometry: a row of `n` elements
// is split into vectors of kVec elements (16 bytes of the input type when
// n % kVec == 0, else scalar); kThreadsPerRow threads own vectors
// t, t + kThreadsPerRow, ... (kChunks per thread) and keep them in registers.
// Short rows: one warp per row, 4 rows per 128-thread block (warp
// reductions only). Long rows: one block per row (block reductions).
// Rows too long for registers (RowFitsRegisters) are streamed instead: each
// pass over the row is a loop that re-reads it, so neither the generated
// code nor a thread's registers grow with the row width (an unrolled
// register row of 2^20 elements took NVRTC 3.4 s, 2^22 over 2 minutes).
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {

struct RowGeom {
  int vec = 1;              // elements per vector access
  int64_t num_vec = 0;      // vectors per row
  int threads_per_row = 32; // 32 = warp per row
  int rows_per_block = 4;
  int chunks = 1;           // vectors per thread
  int block() const { return threads_per_row * rows_per_block; }
};

// `max_regs_floats`: the largest number of row elements a thread may keep.
RowGeom ComputeRowGeom(int64_t n, int elem_size) {
  RowGeom g;
  g.vec = VecWidth(n, elem_size);
  g.num_vec = n / g.vec;
  if (g.num_vec <= 32 * 4) {
    g.threads_per_row = 32;
    g.rows_per_block = 4;
  } else {
    int64_t t = RoundUp(CeilDiv(g.num_vec, 4), 32);
    t = std::clamp<int64_t>(t, 64, 1024);
    g.threads_per_row = static_cast<int>(t);
    g.rows_per_block = 1;
  }
  g.chunks = static_cast<int>(CeilDiv(g.num_vec, g.threads_per_row));
  return g;
}

/// The most row elements one thread of a norm kernel keeps in registers
/// (kChunks * kVec). Rows needing more (above 65536 elements: 1024 threads
/// per row, 64 elements each) are streamed.
constexpr int64_t kNormMaxRegisterFloats = 64;

bool RowFitsRegisters(const RowGeom &g, int64_t max_floats) {
  return static_cast<int64_t>(g.chunks) * g.vec <= max_floats;
}

/// Row lengths from this one on are indexed with 64-bit integers in the
/// generated code (vector and element indices within a row overflow int
/// near 2^31).
constexpr int64_t kWideRow = int64_t(1) << 30;

/// `body` with its row indices made 64-bit, for rows of kWideRow elements or
/// more: the loop counters over a row's vectors (`int vi`) and element
/// indices passed as `int j`.
std::string WidenRowIndices(std::string body) {
  for (const char *from : {"int vi = ", "int j,"}) {
    const std::string f = from, to = "int64_t" + f.substr(3);
    for (size_t at = body.find(f); at != std::string::npos; at = body.find(f, at + to.size()))
      body.replace(at, f.size(), to);
  }
  return body;
}

std::string GeomConfig(const RowGeom &g, int64_t n) {
  std::ostringstream s;
  if (n >= kWideRow)
    s << "static constexpr long long kN = " << n << "LL;     // row length\n"
      << "static constexpr int kVec = " << g.vec << ";           // elements per vector access\n"
      << "static constexpr long long kNumVec = kN / kVec;\n";
  else
    s << "static constexpr int kN = " << n << ";              // row length\n"
      << "static constexpr int kVec = " << g.vec << ";           // elements per vector access\n"
      << "static constexpr int kNumVec = kN / kVec;\n";
  s
    << "static constexpr int kThreadsPerRow = " << g.threads_per_row << ";  // 32 = one warp per row\n"
    << "static constexpr int kRowsPerBlock = " << g.rows_per_block << ";\n"
    << "static constexpr int kChunks = " << g.chunks << ";        // vectors per thread (registers)\n";
  return s.str();
}

// Row-wide reductions: warp shuffles for a warp per row, block otherwise.
constexpr const char *kRowReduceHelpers = R"CUDA(
LLMC_DEV float rowSum(float v, float* scratch) {
  if (kThreadsPerRow == 32) return warpSum(v);
  return blockSum(v, scratch);
}
LLMC_DEV float rowMax(float v, float* scratch) {
  if (kThreadsPerRow == 32) return warpMax(v);
  return blockMax(v, scratch);
}
)CUDA";

absl::Status CheckFloat(ScalarType t, const char *what) {
  if (!IsFloatType(t)) return Invalid(std::string(what) + " must be a floating-point type");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// RMSNorm / LayerNorm
//===----------------------------------------------------------------------===//

struct NormParams {
  bool layer_norm;
  ScalarType in, weight, out;
  int64_t hidden;
  float eps;
  bool has_weight, has_bias, residual, round_before_weight;
};

std::string NormName(const NormParams &p) {
  std::ostringstream s;
  s << (p.layer_norm ? "llmc_layernorm_" : "llmc_rmsnorm_") << ScalarTypeTag(p.in) << "_"
    << ScalarTypeTag(p.weight) << "_" << ScalarTypeTag(p.out) << "_h" << p.hidden << "_eps"
    << FloatTag(p.eps);
  if (p.residual) s << "_res";
  if (p.layer_norm) s << (p.has_weight ? "_w" : "_now") << (p.has_bias ? "_b" : "_nob");
  if (p.round_before_weight) s << "_hfround";
  return s.str();
}

/// A norm over a row too long for registers: one block per row, each pass a
/// loop over the row's vectors (thread t takes vectors t, t + kThreadsPerRow,
/// ..., as the register kernel does, so per-thread sums are formed in the
/// same order). Pass 1 forms s = x (+ residual, rounded and written to
/// residual_out) and its sum of squares (RMSNorm) or sum (LayerNorm);
/// LayerNorm's pass 2 re-reads s for the variance; the last pass re-reads s,
/// normalizes and stores. Later passes read s back from residual_out when
/// the residual is fused (the elements this thread wrote). 64-bit indices.
absl::StatusOr<KernelCode> EmitStreamingNorm(const NormParams &p, const RowGeom &g) {
  KernelCode kc;
  kc.name = NormName(p);
  std::ostringstream hdr;
  if (p.layer_norm)
    hdr << "// llmc LayerNorm (Ba, Kiros & Hinton 2016): y = (x - mean) * rsqrt(var + eps) * w + b\n"
           "// biased variance, fp32 math.\n";
  else
    hdr << "// llmc RMSNorm (Zhang & Sennrich 2019): y = x * rsqrt(mean(x^2) + eps) * w, fp32 math.\n";
  if (p.residual)
    hdr << "// Fused residual add: s = x + residual (rounded to the input type) is written to\n"
           "// residual_out and normalized.\n";
  hdr << "// Long row: one block per row, streamed (each pass re-reads the row from memory).\n";

  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(p.in) << " InT;\n"
      << "typedef " << CTypeName(p.weight) << " WT;\n"
      << "typedef " << CTypeName(p.out) << " OutT;\n"
      << "static constexpr long long kN = " << p.hidden << "LL;  // row length\n"
      << "static constexpr int kVec = " << g.vec << ";           // elements per vector access\n"
      << "static constexpr long long kNumVec = kN / kVec;\n"
      << "static constexpr int kThreadsPerRow = " << g.threads_per_row << ";\n"
      << "static constexpr int kRowsPerBlock = 1;\n"
      << "static constexpr float kEps = " << FloatLit(p.eps) << ";\n"
      << "static constexpr bool kRoundBeforeWeight = " << (p.round_before_weight ? "true" : "false") << ";\n";

  std::ostringstream b;
  b << kRowReduceHelpers << "\n";
  b << "extern \"C\" __global__ void __launch_bounds__(kThreadsPerRow * kRowsPerBlock) " << kc.name << "(\n"
    << "    OutT* __restrict__ out,\n";
  if (p.residual) b << "    InT* residual_out,\n";
  b << "    const InT* x,\n";
  if (p.residual) b << "    const InT* residual,\n";
  if (p.has_weight) b << "    const WT* __restrict__ weight,\n";
  if (p.has_bias) b << "    const WT* __restrict__ bias,\n";
  b << "    long long rows) {\n";
  b << R"CUDA(  typedef LlmcVec<InT, kVec> InV;
  typedef LlmcVec<WT, kVec> WV;
  typedef LlmcVec<OutT, kVec> OutV;
  __shared__ float scratch[32];
  const int t = threadIdx.x;
  const int64_t row = blockIdx.x;
  if (row >= rows) return;  // uniform per block
  const int64_t base = row * kN;

  // ---- pass 1: the row s (fp32) and its sum )CUDA"
    << (p.layer_norm ? "" : "of squares ") << "----\n";
  b << R"CUDA(  float acc = 0.0f;
  for (int64_t vi = t; vi < kNumVec; vi += kThreadsPerRow) {
    const InV xv = reinterpret_cast<const InV*>(x + base)[vi];
)CUDA";
  const char *accumulate = p.layer_norm ? "acc += f;" : "acc += f * f;";
  if (p.residual) {
    b << "    const InV rv = reinterpret_cast<const InV*>(residual + base)[vi];\n"
         "    InV sv;\n#pragma unroll\n    for (int e = 0; e < kVec; ++e) {\n"
         "      sv.v[e] = fromF<InT>(toF(xv.v[e]) + toF(rv.v[e]));  // rounded like the unfused add\n"
         "      const float f = toF(sv.v[e]);\n      " << accumulate << "\n    }\n"
         "    reinterpret_cast<InV*>(residual_out + base)[vi] = sv;\n  }\n";
  } else {
    b << "#pragma unroll\n    for (int e = 0; e < kVec; ++e) {\n"
         "      const float f = toF(xv.v[e]);\n      " << accumulate << "\n    }\n  }\n";
  }
  // Later passes read s again: x, or the sum this thread wrote.
  b << "  const InV* sr = reinterpret_cast<const InV*>(" << (p.residual ? "residual_out" : "x") << " + base);\n";
  if (p.layer_norm) {
    b << R"CUDA(  const float mean = rowSum(acc, scratch) / (float)kN;
  // ---- pass 2: biased variance ----
  acc = 0.0f;
  for (int64_t vi = t; vi < kNumVec; vi += kThreadsPerRow) {
    const InV sv = sr[vi];
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float d = toF(sv.v[e]) - mean;
      acc += d * d;
    }
  }
  const float var = rowSum(acc, scratch) / (float)kN;
  const float rstd = rsqrtf(var + kEps);
)CUDA";
  } else {
    b << R"CUDA(  const float mean = 0.0f;
  const float rstd = rsqrtf(rowSum(acc, scratch) / (float)kN + kEps);
)CUDA";
  }
  b << R"CUDA(
  // ---- last pass: normalize, scale, store ----
  for (int64_t vi = t; vi < kNumVec; vi += kThreadsPerRow) {
    const InV sv = sr[vi];
)CUDA";
  if (p.has_weight) b << "    const WV wv = reinterpret_cast<const WV*>(weight)[vi];\n";
  if (p.has_bias) b << "    const WV bv = reinterpret_cast<const WV*>(bias)[vi];\n";
  b << "    OutV ov;\n#pragma unroll\n    for (int e = 0; e < kVec; ++e) {\n"
       "      float y = (toF(sv.v[e]) - mean) * rstd;\n"
       "      if (kRoundBeforeWeight) y = toF(fromF<InT>(y));  // HF: .to(input_dtype) before * weight\n";
  if (p.has_weight) b << "      y = y * toF(wv.v[e]);\n";
  if (p.has_bias) b << "      y = y + toF(bv.v[e]);\n";
  b << "      ov.v[e] = fromF<OutT>(y);\n    }\n"
       "    reinterpret_cast<OutV*>(out + base)[vi] = ov;\n  }\n}\n";
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble(hdr.str(), cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<KernelCode> EmitNorm(const NormParams &p) {
  for (absl::Status st : {CheckFloat(p.in, "norm input"), CheckFloat(p.weight, "norm weight"),
                          CheckFloat(p.out, "norm output")})
    if (!st.ok()) return st;
  if (p.hidden < 1) return Invalid("norm: hidden must be >= 1");
  const RowGeom g = ComputeRowGeom(p.hidden, ScalarSize(p.in));
  if (!RowFitsRegisters(g, kNormMaxRegisterFloats)) return EmitStreamingNorm(p, g);
  KernelCode kc;
  kc.name = NormName(p);

  std::ostringstream hdr;
  if (p.layer_norm)
    hdr << "// llmc LayerNorm (Ba, Kiros & Hinton 2016): y = (x - mean) * rsqrt(var + eps) * w + b\n"
           "// biased variance, two passes over the row held in registers, fp32 math.\n";
  else
    hdr << "// llmc RMSNorm (Zhang & Sennrich 2019): y = x * rsqrt(mean(x^2) + eps) * w, fp32 math.\n";
  if (p.residual)
    hdr << "// Fused residual add: s = x + residual (rounded to the input type) is written to\n"
           "// residual_out and normalized.\n";
  hdr << "// One row in registers; " << (g.threads_per_row == 32 ? "one warp per row." : "one block per row.") << "\n";

  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(p.in) << " InT;\n"
      << "typedef " << CTypeName(p.weight) << " WT;\n"
      << "typedef " << CTypeName(p.out) << " OutT;\n"
      << GeomConfig(g, p.hidden) << "static constexpr float kEps = " << FloatLit(p.eps) << ";\n"
      << "static constexpr bool kRoundBeforeWeight = " << (p.round_before_weight ? "true" : "false") << ";\n";

  std::ostringstream b;
  b << kRowReduceHelpers << "\n";
  b << "extern \"C\" __global__ void __launch_bounds__(kThreadsPerRow * kRowsPerBlock) " << kc.name << "(\n"
    << "    OutT* __restrict__ out,\n";
  if (p.residual) b << "    InT* residual_out,\n";
  b << "    const InT* x,\n";
  if (p.residual) b << "    const InT* residual,\n";
  if (p.has_weight) b << "    const WT* __restrict__ weight,\n";
  if (p.has_bias) b << "    const WT* __restrict__ bias,\n";
  b << "    long long rows) {\n";
  b << R"CUDA(  typedef LlmcVec<InT, kVec> InV;
  typedef LlmcVec<WT, kVec> WV;
  typedef LlmcVec<OutT, kVec> OutV;
  __shared__ float scratch[32];
  const int t = threadIdx.x % kThreadsPerRow;
  const int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  if (row >= rows) return;  // uniform per warp (warp mode) / per block (block mode)
  const int64_t base = row * (int64_t)kN;

  // ---- load the row into registers (fp32) ----
  float v[kChunks][kVec];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int vi = t + c * kThreadsPerRow;
    if (vi < kNumVec) {
      const InV xv = reinterpret_cast<const InV*>(x + base)[vi];
)CUDA";
  if (p.residual) {
    b << R"CUDA(      const InV rv = reinterpret_cast<const InV*>(residual + base)[vi];
      InV sv;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        sv.v[e] = fromF<InT>(toF(xv.v[e]) + toF(rv.v[e]));  // rounded like the unfused add
        v[c][e] = toF(sv.v[e]);
      }
      reinterpret_cast<InV*>(residual_out + base)[vi] = sv;
)CUDA";
  } else {
    b << R"CUDA(#pragma unroll
      for (int e = 0; e < kVec; ++e) v[c][e] = toF(xv.v[e]);
)CUDA";
  }
  b << R"CUDA(    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) v[c][e] = 0.0f;
    }
  }

)CUDA";
  if (p.layer_norm) {
    b << R"CUDA(  // ---- pass 1: mean; pass 2: biased variance of the register-resident row ----
  float acc = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc += v[c][e];
  const float mean = rowSum(acc, scratch) / (float)kN;
  acc = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (t + c * kThreadsPerRow < kNumVec) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float d = v[c][e] - mean;
        acc += d * d;
      }
    }
  }
  const float var = rowSum(acc, scratch) / (float)kN;
  const float rstd = rsqrtf(var + kEps);
)CUDA";
  } else {
    b << R"CUDA(  // ---- sum of squares -> rsqrt(mean + eps) ----
  float acc = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc += v[c][e] * v[c][e];
  const float mean = 0.0f;
  const float rstd = rsqrtf(rowSum(acc, scratch) / (float)kN + kEps);
)CUDA";
  }
  b << R"CUDA(
  // ---- normalize, scale, store ----
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int vi = t + c * kThreadsPerRow;
    if (vi < kNumVec) {
)CUDA";
  if (p.has_weight) b << "      const WV wv = reinterpret_cast<const WV*>(weight)[vi];\n";
  if (p.has_bias) b << "      const WV bv = reinterpret_cast<const WV*>(bias)[vi];\n";
  b << "      OutV ov;\n#pragma unroll\n      for (int e = 0; e < kVec; ++e) {\n"
       "        float y = (v[c][e] - mean) * rstd;\n"
       "        if (kRoundBeforeWeight) y = toF(fromF<InT>(y));  // HF: .to(input_dtype) before * weight\n";
  if (p.has_weight) b << "        y = y * toF(wv.v[e]);\n";
  if (p.has_bias) b << "        y = y + toF(bv.v[e]);\n";
  b << "        ov.v[e] = fromF<OutT>(y);\n      }\n"
       "      reinterpret_cast<OutV*>(out + base)[vi] = ov;\n    }\n  }\n}\n";
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble(hdr.str(), cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> NormLaunch(int64_t hidden, ScalarType in, int64_t rows) {
  const RowGeom g = ComputeRowGeom(hidden, ScalarSize(in));
  return Dims(CeilDiv(std::max<int64_t>(rows, 1), g.rows_per_block), 1, 1, g.block());
}

} // namespace

absl::StatusOr<KernelCode> EmitRMSNorm(const RMSNormConfig &c) {
  return EmitNorm({false, c.in, c.weight, c.out, c.hidden, c.eps, true, false,
                   c.fused_residual, c.round_before_weight});
}
absl::StatusOr<LaunchDims> RMSNormLaunch(const RMSNormConfig &c, int64_t rows) {
  return NormLaunch(c.hidden, c.in, rows);
}
absl::StatusOr<KernelCode> EmitLayerNorm(const LayerNormConfig &c) {
  return EmitNorm({true, c.in, c.weight, c.out, c.hidden, c.eps, c.has_weight,
                   c.has_bias, c.fused_residual, false});
}
absl::StatusOr<LaunchDims> LayerNormLaunch(const LayerNormConfig &c, int64_t rows) {
  return NormLaunch(c.hidden, c.in, rows);
}

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

namespace {
// Rows longer than this use the online (two read) path.
constexpr int64_t kSoftmaxMaxRegisterFloats = 32;

bool SoftmaxUsesRegisters(const SoftmaxConfig &c, const RowGeom &g) {
  return static_cast<int64_t>(g.chunks) * g.vec <= kSoftmaxMaxRegisterFloats;
}
RowGeom SoftmaxGeom(const SoftmaxConfig &c) {
  RowGeom g = ComputeRowGeom(c.n, ScalarSize(c.in));
  if (!SoftmaxUsesRegisters(c, g)) {
    g.threads_per_row = 1024;
    g.rows_per_block = 1;
    g.chunks = static_cast<int>(CeilDiv(g.num_vec, 1024));
  }
  return g;
}
} // namespace

absl::StatusOr<KernelCode> EmitSoftmax(const SoftmaxConfig &c) {
  for (absl::Status st : {CheckFloat(c.in, "softmax input"), CheckFloat(c.out, "softmax output"),
                          c.has_mask ? CheckFloat(c.mask, "softmax mask") : absl::OkStatus()})
    if (!st.ok()) return st;
  if (c.n < 1) return Invalid("softmax: n must be >= 1");
  const RowGeom g = SoftmaxGeom(c);
  const bool regs = SoftmaxUsesRegisters(c, ComputeRowGeom(c.n, ScalarSize(c.in)));
  KernelCode kc;
  kc.name = std::string("llmc_softmax_") + ScalarTypeTag(c.in) + "_" + ScalarTypeTag(c.out) + "_n" +
            std::to_string(c.n) + (c.has_mask ? std::string("_mask") + ScalarTypeTag(c.mask) : "");
  std::ostringstream hdr;
  hdr << "// llmc softmax over the last dim: y = softmax(x * scale + mask[row % mask_rows]).\n"
         "// fp32 math in the log2 domain (t = (x*scale + m) * log2(e), y = exp2(t - max) / sum).\n"
         "// A row whose logits are all -inf gives NaN (PyTorch semantics).\n";
  if (regs)
    hdr << "// Row held in registers; " << (g.threads_per_row == 32 ? "one warp per row." : "one block per row.") << "\n";
  else
    hdr << "// Long rows: one block per row; pass 1 computes (max, sum) with the online normalizer\n"
           "// (Milakov & Gimelshein 2018, arXiv:1805.02867); pass 2 re-reads x and writes y.\n";
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.in) << " InT;\n"
      << "typedef " << CTypeName(c.out) << " OutT;\n"
      << "typedef " << (c.has_mask ? CTypeName(c.mask) : "float") << " MaskT;\n"
      << GeomConfig(g, c.n) << "static constexpr bool kHasMask = " << (c.has_mask ? "true" : "false") << ";\n";
  std::ostringstream b;
  b << kRowReduceHelpers;
  b << R"CUDA(
// exp2(m - m_new) that is 0 (not NaN) when m == -inf.
LLMC_DEV float rescale(float m, float m_new) { return m == -LLMC_INF ? 0.0f : exp2f(m - m_new); }

// Logit in the log2 domain for element j of a row.
LLMC_DEV float logit2(float x, const MaskT* mrow, int j, float scale) {
  float t = x * scale;
  if (kHasMask) t += toF(mrow[j]);
  return t * LLMC_LOG2E;
}
)CUDA";
  b << "\nextern \"C\" __global__ void __launch_bounds__(kThreadsPerRow * kRowsPerBlock) " << kc.name
    << "(\n    OutT* __restrict__ out, const InT* __restrict__ x, const MaskT* __restrict__ mask,\n"
       "    float scale, long long rows, long long mask_rows) {\n";
  b << R"CUDA(  typedef LlmcVec<InT, kVec> InV;
  typedef LlmcVec<OutT, kVec> OutV;
  __shared__ float scratch[32];
  const int t = threadIdx.x % kThreadsPerRow;
  const int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  if (row >= rows) return;  // uniform per warp / block
  const InV* xr = reinterpret_cast<const InV*>(x + row * (int64_t)kN);
  OutV* yr = reinterpret_cast<OutV*>(out + row * (int64_t)kN);
  const MaskT* mrow = kHasMask ? mask + (row % mask_rows) * (int64_t)kN : mask;
)CUDA";
  if (regs) {
    b << R"CUDA(
  // ---- load logits (log2 domain) into registers; padding = -inf ----
  float v[kChunks][kVec];
  float m = -LLMC_INF;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int vi = t + c * kThreadsPerRow;
    if (vi < kNumVec) {
      const InV xv = xr[vi];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        v[c][e] = logit2(toF(xv.v[e]), mrow, vi * kVec + e, scale);
        m = fmaxf(m, v[c][e]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) v[c][e] = -LLMC_INF;
    }
  }
  m = rowMax(m, scratch);
  const float m_use = m == -LLMC_INF ? 0.0f : m;  // avoid (-inf) - (-inf)
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      v[c][e] = exp2f(v[c][e] - m_use);
      s += v[c][e];
    }
  s = rowSum(s, scratch);
  // all -inf row: PyTorch gives NaN
  const float inv = m == -LLMC_INF ? LLMC_NAN : 1.0f / s;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int vi = t + c * kThreadsPerRow;
    if (vi < kNumVec) {
      OutV ov;
#pragma unroll
      for (int e = 0; e < kVec; ++e) ov.v[e] = fromF<OutT>(v[c][e] * inv);
      yr[vi] = ov;
    }
  }
}
)CUDA";
  } else {
    b << R"CUDA(
  // ---- pass 1: online (max, sum) per thread, one rescale per vector ----
  float m = -LLMC_INF, s = 0.0f;
  for (int vi = t; vi < kNumVec; vi += kThreadsPerRow) {
    const InV xv = xr[vi];
    float tv[kVec];
    float mv = -LLMC_INF;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      tv[e] = logit2(toF(xv.v[e]), mrow, vi * kVec + e, scale);
      mv = fmaxf(mv, tv[e]);
    }
    const float m_new = fmaxf(m, mv);
    if (m_new != -LLMC_INF) {
      float add = 0.0f;
#pragma unroll
      for (int e = 0; e < kVec; ++e) add += exp2f(tv[e] - m_new);
      s = s * rescale(m, m_new) + add;
      m = m_new;
    }
  }
  // ---- combine (m, s) pairs: block max, then rescaled block sum ----
  const float M = rowMax(m, scratch);
  const float S = rowSum(M == -LLMC_INF ? 0.0f : s * rescale(m, M), scratch);
  const float inv = M == -LLMC_INF ? LLMC_NAN : 1.0f / S;
  // ---- pass 2: re-read and write ----
  for (int vi = t; vi < kNumVec; vi += kThreadsPerRow) {
    const InV xv = xr[vi];
    OutV ov;
#pragma unroll
    for (int e = 0; e < kVec; ++e)
      ov.v[e] = fromF<OutT>(exp2f(logit2(toF(xv.v[e]), mrow, vi * kVec + e, scale) - M) * inv);
    yr[vi] = ov;
  }
}
)CUDA";
  }
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble(hdr.str(), cfg.str(), c.n >= kWideRow ? WidenRowIndices(b.str()) : b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> SoftmaxLaunch(const SoftmaxConfig &c, int64_t rows) {
  const RowGeom g = SoftmaxGeom(c);
  return Dims(CeilDiv(std::max<int64_t>(rows, 1), g.rows_per_block), 1, 1, g.block());
}

//===----------------------------------------------------------------------===//
// Row reduction
//===----------------------------------------------------------------------===//

namespace detail {
const char *KindName(ReduceKind k) {
  switch (k) {
  case ReduceKind::sum: return "sum";
  case ReduceKind::mean: return "mean";
  case ReduceKind::max: return "max";
  case ReduceKind::min: return "min";
  }
  return "?";
}

std::string ReduceOps(ReduceKind k) {
  std::ostringstream s;
  const bool is_sum = k == ReduceKind::sum || k == ReduceKind::mean;
  s << "static constexpr bool kMean = " << (k == ReduceKind::mean ? "true" : "false") << ";\n";
  if (is_sum) {
    s << "LLMC_DEV float identity() { return 0.0f; }\n"
         "LLMC_DEV float combine(float a, float b) { return a + b; }\n"
         "LLMC_DEV float warpReduce(float v) { return warpSum(v); }\n";
  } else {
    const bool mx = k == ReduceKind::max;
    s << "LLMC_DEV float identity() { return " << (mx ? "-LLMC_INF" : "LLMC_INF") << "; }\n"
      << "LLMC_DEV float combine(float a, float b) { return " << (mx ? "llmc_maxf" : "llmc_minf")
      << "(a, b); }  // NaN-propagating\n"
      << "LLMC_DEV float warpReduce(float v) { return " << (mx ? "warpMaxNan" : "warpMinNan") << "(v); }\n";
  }
  s << R"CUDA(// Block-wide reduce (blockDim.x multiple of 32); every thread gets the result.
LLMC_DEV float blockReduce(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpReduce(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? scratch[lane] : identity();
  return warpReduce(v);
}
)CUDA";
  return s.str();
}
} // namespace detail

absl::StatusOr<KernelCode> EmitRowReduce(const RowReduceConfig &c) {
  if (c.n < 1) return Invalid("row reduce: n must be >= 1");
  if (IsIntType(c.in) && c.in != ScalarType::i32 && c.in != ScalarType::i8 && c.in != ScalarType::i1 &&
      c.in != ScalarType::i64)
    return Invalid("row reduce: bad input type");
  const int vec = VecWidth(c.n, ScalarSize(c.in));
  const int64_t nvec = c.n / vec;
  const int threads = nvec <= 1024 ? 32 : 256;
  const int rows_per_block = threads == 32 ? 4 : 1;
  KernelCode kc;
  kc.name = std::string("llmc_rowreduce_") + KindName(c.kind) + "_" + ScalarTypeTag(c.in) + "_" +
            ScalarTypeTag(c.out) + "_n" + std::to_string(c.n);
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.in) << " InT;\n"
      << "typedef " << CTypeName(c.out) << " OutT;\n"
      << (c.n >= kWideRow ? "static constexpr long long kN = " : "static constexpr int kN = ") << c.n
      << (c.n >= kWideRow ? "LL;\n" : ";\n")
      << "static constexpr int kVec = " << vec << ";\n"
      << (c.n >= kWideRow ? "static constexpr long long kNumVec = kN / kVec;\n"
                          : "static constexpr int kNumVec = kN / kVec;\n")
      << "static constexpr int kThreadsPerRow = " << threads << ";\n"
      << "static constexpr int kRowsPerBlock = " << rows_per_block << ";\n"
      << ReduceOps(c.kind);
  std::ostringstream b;
  b << "\nextern \"C\" __global__ void __launch_bounds__(kThreadsPerRow * kRowsPerBlock) " << kc.name
    << "(\n    OutT* __restrict__ out, const InT* __restrict__ x, long long rows) {\n";
  b << R"CUDA(  typedef LlmcVec<InT, kVec> InV;
  __shared__ float scratch[32];
  const int t = threadIdx.x % kThreadsPerRow;
  const int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  if (row >= rows) return;  // uniform per warp / block
  const InV* xr = reinterpret_cast<const InV*>(x + row * (int64_t)kN);
  float acc = identity();
  for (int vi = t; vi < kNumVec; vi += kThreadsPerRow) {
    const InV xv = xr[vi];
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc = combine(acc, toF(xv.v[e]));
  }
  acc = kThreadsPerRow == 32 ? warpReduce(acc) : blockReduce(acc, scratch);
  if (kMean) acc = acc / (float)kN;
  if (t == 0) out[row] = fromF<OutT>(acc);
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(
      kc.source, Assemble(std::string("// llmc row reduction (") + KindName(c.kind) +
                              ") over the last dim, fp32 accumulation: per-thread strided\n"
                              "// accumulation, then warp/block butterfly tree.\n",
                          cfg.str(), c.n >= kWideRow ? WidenRowIndices(b.str()) : b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> RowReduceLaunch(const RowReduceConfig &c, int64_t rows) {
  const int vec = VecWidth(c.n, ScalarSize(c.in));
  const bool warp = c.n / vec <= 1024;
  return Dims(CeilDiv(std::max<int64_t>(rows, 1), warp ? 4 : 1), 1, 1, warp ? 128 : 256);
}

//===----------------------------------------------------------------------===//
// Full reduction (two stages)
//===----------------------------------------------------------------------===//

namespace {
constexpr int kFullReduceThreads = 256;
constexpr int kFullReduceMaxPartials = 1024;
} // namespace

int FullReduceNumPartials(int64_t numel) {
  // ~4 KiB of elements per thread-block-iteration; at most 1024 partials.
  const int64_t per_block = int64_t{kFullReduceThreads} * 16;
  return static_cast<int>(std::clamp<int64_t>(CeilDiv(std::max<int64_t>(numel, 1), per_block), 1,
                                              kFullReduceMaxPartials));
}

absl::StatusOr<FullReduceKernels> EmitFullReduce(const FullReduceConfig &c) {
  FullReduceKernels k;
  const std::string tag = std::string(KindName(c.kind)) + "_" + ScalarTypeTag(c.in) + "_" + ScalarTypeTag(c.out);
  k.stage1.name = "llmc_fullreduce1_" + tag;
  k.stage2.name = "llmc_fullreduce2_" + tag;
  const int vec = 16 / ScalarSize(c.in);
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.in) << " InT;\n"
      << "typedef " << CTypeName(c.out) << " OutT;\n"
      << "static constexpr int kVec = " << vec << ";\n"
      << "static constexpr int kThreads = " << kFullReduceThreads << ";\n"
      << ReduceOps(c.kind);
  const std::string hdr = std::string("// llmc full reduction (") + KindName(c.kind) +
                          "), two stages, fp32 accumulation.\n"
                          "// Stage 1: each block reduces a grid-stride slice (per-thread sequential, 16-byte\n"
                          "// loads, then a butterfly tree) to partials[blockIdx.x]. Stage 2: one block tree-\n"
                          "// reduces the partials. Error grows with numel/(blocks*threads) only.\n";
  std::ostringstream b1;
  b1 << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << k.stage1.name
     << "(\n    float* __restrict__ partials, const InT* __restrict__ x, long long numel) {\n";
  b1 << R"CUDA(  typedef LlmcVec<InT, kVec> InV;
  __shared__ float scratch[32];
  const int64_t tid = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  const int64_t nthreads = (int64_t)gridDim.x * kThreads;
  // Two independent accumulators to shorten the sequential dependency chain.
  float acc0 = identity(), acc1 = identity();
  int64_t begin = 0;
  if (((uint64_t)x & 15) == 0) {
    const int64_t nvec = numel / kVec;
    const InV* xv = reinterpret_cast<const InV*>(x);
    for (int64_t i = tid; i < nvec; i += nthreads) {
      const InV v = xv[i];
#pragma unroll
      for (int e = 0; e < kVec; e += 2) {
        acc0 = combine(acc0, toF(v.v[e]));
        if (e + 1 < kVec) acc1 = combine(acc1, toF(v.v[e + 1]));
      }
    }
    begin = nvec * kVec;
  }
  for (int64_t i = begin + tid; i < numel; i += nthreads) acc0 = combine(acc0, toF(x[i]));
  const float r = blockReduce(combine(acc0, acc1), scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = r;
}
)CUDA";
  std::ostringstream b2;
  b2 << "\nextern \"C\" __global__ void __launch_bounds__(1024) " << k.stage2.name
     << "(\n    OutT* __restrict__ out, const float* __restrict__ partials, int num_partials,\n"
        "    long long numel) {\n";
  b2 << R"CUDA(  __shared__ float scratch[32];
  float acc = identity();
  for (int i = threadIdx.x; i < num_partials; i += blockDim.x) acc = combine(acc, partials[i]);
  acc = blockReduce(acc, scratch);
  if (threadIdx.x == 0) out[0] = fromF<OutT>(kMean ? acc / (float)numel : acc);
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(k.stage1.source, Assemble(hdr + "// (stage 1)\n", cfg.str(), b1.str()));
  LLMC_ASSIGN_OR_RETURN(k.stage2.source, Assemble(hdr + "// (stage 2)\n", cfg.str(), b2.str()));
  return k;
}

absl::StatusOr<LaunchDims> FullReduceStage1Launch(const FullReduceConfig &, int64_t numel) {
  return Dims(FullReduceNumPartials(numel), 1, 1, kFullReduceThreads);
}
absl::StatusOr<LaunchDims> FullReduceStage2Launch(const FullReduceConfig &, int64_t) {
  return Dims(1, 1, 1, 1024);
}

} // namespace llmc::cuda
