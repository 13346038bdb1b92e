//===- Misc.cpp - RoPE, KV-cache append, gather/embedding generators -------===//

#include "Internal.h"

#include <algorithm>
#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {
const char *PosTag(PositionSource p) {
  switch (p) {
  case PositionSource::kNone: return "pos0";
  case PositionSource::kScalarI32: return "posi32";
  case PositionSource::kScalarI64: return "posi64";
  case PositionSource::kPerBatchI32: return "pbposi32";
  case PositionSource::kPerBatchI64: return "pbposi64";
  }
  return "?";
}

// Device expression reading the position/offset for batch `b` from `ptr`.
std::string PosExpr(PositionSource p, const char *ptr, const char *b) {
  const std::string P = ptr, B = b;
  switch (p) {
  case PositionSource::kNone: return "(int64_t)0";
  case PositionSource::kScalarI32:
    return "(" + P + " ? (int64_t)reinterpret_cast<const int32_t*>(" + P + ")[0] : (int64_t)0)";
  case PositionSource::kScalarI64:
    return "(" + P + " ? (int64_t)reinterpret_cast<const int64_t*>(" + P + ")[0] : (int64_t)0)";
  case PositionSource::kPerBatchI32:
    return "(" + P + " ? (int64_t)reinterpret_cast<const int32_t*>(" + P + ")[" + B + "] : (int64_t)0)";
  case PositionSource::kPerBatchI64:
    return "(" + P + " ? (int64_t)reinterpret_cast<const int64_t*>(" + P + ")[" + B + "] : (int64_t)0)";
  }
  return "0";
}

/// The most elements of one token's heads (RoPE, KV append) or one gathered
/// row these kernels index with 32-bit integers (kHeads * kHeadDim, kRow,
/// kDim and the loops over them), with room for a block's stride.
constexpr int64_t kMaxIntRow = int64_t(1) << 30;

absl::Status CheckTokenSize(const char *what, int64_t heads, int64_t head_dim) {
  if (heads > kMaxIntRow / head_dim)
    return Unsupported(std::string(what) + ": " + std::to_string(heads) + " heads of " +
                       std::to_string(head_dim) + " elements per token; at most 2^30 (" +
                       std::to_string(kMaxIntRow) + ") elements are supported");
  return absl::OkStatus();
}

struct RoPEGeom {
  int half;        // rotary pairs per head
  int threads_i;   // threads along the pair index
  int head_groups; // threads along heads
  int block;
};
RoPEGeom ComputeRoPEGeom(const RoPEConfig &c) {
  RoPEGeom g;
  const int64_t rot = c.rotary_dim ? c.rotary_dim : c.head_dim;
  g.half = static_cast<int>(rot / 2);
  g.threads_i = std::min(g.half, 256);
  g.head_groups = static_cast<int>(std::clamp<int64_t>(256 / std::max(g.threads_i, 1), 1, c.num_heads));
  g.block = static_cast<int>(RoundUp(int64_t{g.threads_i} * g.head_groups, 32));
  return g;
}
} // namespace

//===----------------------------------------------------------------------===//
// RoPE
//===----------------------------------------------------------------------===//

absl::StatusOr<KernelCode> EmitRoPE(const RoPEConfig &c) {
  if (!IsFloatType(c.dtype)) return Invalid("rope: dtype must be float");
  const int64_t rot = c.rotary_dim ? c.rotary_dim : c.head_dim;
  if (c.head_dim < 2 || rot < 2 || rot > c.head_dim || rot % 2 != 0 || c.num_heads < 1)
    return Invalid("rope: bad head_dim / rotary_dim / num_heads");
  if (absl::Status st = CheckTokenSize("rope", c.num_heads, c.head_dim); !st.ok()) return st;
  const RoPEGeom g = ComputeRoPEGeom(c);
  KernelCode kc;
  kc.name = std::string("llmc_rope_") + ScalarTypeTag(c.dtype) + "_h" + std::to_string(c.num_heads) + "_d" +
            std::to_string(c.head_dim) + "_r" + std::to_string(rot) + (c.interleaved ? "_interleaved" : "_half") +
            "_theta" + FloatTag(c.theta) + "_" + PosTag(c.offset);
  std::ostringstream hdr;
  hdr << "// llmc RoPE (Su et al. 2021, RoFormer) on x [B, S, H, D], contiguous.\n"
         "//   inv_freq_i = 1 / theta^(2i / R)     (fp32 powf, as HF: 1.0 / base ** (arange(0,R,2)/R))\n"
         "//   angle = float(s + offset) * inv_freq_i, cos/sin with accurate sincosf\n"
         "//   (a, b) -> (a*cos - b*sin, b*cos + a*sin), fp32 math, rounded once.\n"
      << (c.interleaved ? "// Pairs (2i, 2i+1) (GPT-J interleaved).\n"
                        : "// Pairs (i, i + R/2) (LLaMA / GPT-NeoX rotate_half).\n")
      << "// One block per token; thread (i, hg) handles pair i of heads hg, hg + kHeadGroups, ...\n";
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n"
      << "static constexpr int kHeads = " << c.num_heads << ";\n"
      << "static constexpr int kHeadDim = " << c.head_dim << ";\n"
      << "static constexpr int kRotDim = " << rot << ";\n"
      << "static constexpr int kHalf = kRotDim / 2;  // pairs per head\n"
      << "static constexpr bool kInterleaved = " << (c.interleaved ? "true" : "false") << ";\n"
      << "static constexpr float kTheta = " << FloatLit(c.theta) << ";\n"
      << "static constexpr int kThreadsI = " << g.threads_i << ";\n"
      << "static constexpr int kHeadGroups = " << g.head_groups << ";\n"
      << "static constexpr int kThreads = " << g.block << ";\n";
  std::ostringstream b;
  b << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << kc.name
    << "(\n    T* out, const T* x, const void* offset, long long batch, long long seq) {\n";
  b << "  const int64_t token = blockIdx.x;  // b * seq + s\n"
       "  const int64_t bi = token / seq, s = token % seq;\n"
       "  const int64_t off = "
    << PosExpr(c.offset, "offset", "bi") << ";\n";
  b << R"CUDA(  const float pos = (float)(s + off);
  const int64_t tok_base = token * (int64_t)(kHeads * kHeadDim);
  const int ti = threadIdx.x % kThreadsI, hg = threadIdx.x / kThreadsI;
  if (hg < kHeadGroups) {
    for (int i = ti; i < kHalf; i += kThreadsI) {
      const float inv_freq = 1.0f / powf(kTheta, (float)(2 * i) / (float)kRotDim);
      float sn, cs;
      sincosf(pos * inv_freq, &sn, &cs);
      const int ia = kInterleaved ? 2 * i : i;
      const int ib = kInterleaved ? 2 * i + 1 : i + kHalf;
      for (int h = hg; h < kHeads; h += kHeadGroups) {
        const int64_t o = tok_base + (int64_t)h * kHeadDim;
        const float a = toF(x[o + ia]), bv = toF(x[o + ib]);
        out[o + ia] = fromF<T>(a * cs - bv * sn);
        out[o + ib] = fromF<T>(bv * cs + a * sn);
      }
    }
  }
  // Dims beyond the rotary part are copied (no-op when out == x).
  if (kRotDim < kHeadDim) {
    for (int j = threadIdx.x; j < kHeads * (kHeadDim - kRotDim); j += blockDim.x) {
      const int h = j / (kHeadDim - kRotDim), d = kRotDim + j % (kHeadDim - kRotDim);
      const int64_t o = tok_base + (int64_t)h * kHeadDim + d;
      out[o] = x[o];
    }
  }
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble(hdr.str(), cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> RoPELaunch(const RoPEConfig &c, int64_t batch, int64_t seq) {
  return Dims(std::max<int64_t>(batch * seq, 1), 1, 1, ComputeRoPEGeom(c).block);
}

//===----------------------------------------------------------------------===//
// RoPE, table form
//===----------------------------------------------------------------------===//

namespace {
RoPEConfig GeomConfig(const RoPETableConfig &c) {
  RoPEConfig g;
  g.num_heads = c.num_heads;
  g.head_dim = c.head_dim;
  return g;
}
} // namespace

namespace {
/// Every refusal of EmitRoPETable, before any source is made.
absl::Status CheckRoPETable(const RoPETableConfig &c) {
  if (!IsFloatType(c.dtype)) return Invalid("rope table: dtype must be float");
  if (!IsFloatType(c.table)) return Invalid("rope table: cos/sin table type must be float");
  if (c.head_dim < 2 || c.head_dim % 2 != 0 || c.num_heads < 1)
    return Invalid("rope table: bad head_dim / num_heads");
  if (absl::Status st = CheckTokenSize("rope table", c.num_heads, c.head_dim); !st.ok()) return st;
  if (c.cache_write && c.index != ScalarType::i32 && c.index != ScalarType::i64)
    return Invalid("rope table: cache write indices must be i32 or i64");
  if (c.q_heads < 0 || ((c.q_heads > 0 || c.v_write) && !c.cache_write))
    return Invalid("rope table: q and v parts need a cache write");
  if (c.q_heads > 0)
    if (absl::Status st = CheckTokenSize("rope table", c.q_heads, c.head_dim); !st.ok()) return st;
  return absl::OkStatus();
}
} // namespace

bool RoPETableSupported(const RoPETableConfig &c) { return CheckRoPETable(c).ok(); }

absl::StatusOr<KernelCode> EmitRoPETable(const RoPETableConfig &c) {
  if (absl::Status st = CheckRoPETable(c); !st.ok()) return st;
  const RoPEGeom g = ComputeRoPEGeom(GeomConfig(c));
  KernelCode kc;
  kc.name = std::string("llmc_rope_table_") + ScalarTypeTag(c.dtype) + "_tab" + ScalarTypeTag(c.table) + "_h" +
            std::to_string(c.num_heads) + "_d" + std::to_string(c.head_dim) +
            (c.interleaved ? "_interleaved" : "_half") +
            (c.cache_write ? std::string("_cachewrite_") + ScalarTypeTag(c.index) : "") +
            (c.q_heads > 0 ? "_q" + std::to_string(c.q_heads) : "") + (c.v_write ? "_v" : "");
  std::ostringstream hdr;
  hdr << "// llmc RoPE, table form (HF apply_rotary_pos_emb: x*cos + rotate_half(x)*sin;\n"
         "// Su et al. 2021) on x [B, S, H, D], contiguous. cos/sin hold full head-dim\n"
         "// rows at b * table_batch_stride + s * D (stride 0: broadcast over batch),\n"
         "// broadcast over heads. fp32 math, rounded once.\n"
      << (c.interleaved ? "// Pairs (2j, 2j+1) (GPT-J interleaved).\n"
                        : "// Pairs (i, i + D/2) (LLaMA / GPT-NeoX rotate_half).\n")
      << "// One block per token; thread (i, hg) reads pair i's table entries once and\n"
         "// rotates pair i of heads hg, hg + kHeadGroups, ...\n";
  if (c.cache_write)
    hdr << "// Cache write: token (b, s) goes to cache row index[s] (negative: from the\n"
           "// end; outside [0, rows): not written), element (b, r, h, d) at\n"
           "// b * out_b + r * out_row + h * out_h + d.\n";
  if (c.q_heads > 0 || c.v_write)
    hdr << "// blockIdx.y: 0 rotates k into its cache"
        << (c.q_heads > 0 ? "; 1 rotates q into q_out" : "")
        << (c.v_write ? "; the last copies v into its cache at k's rows" : "") << ".\n";
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n"
      << "typedef " << CTypeName(c.table) << " TabT;\n"
      << "static constexpr int kHeads = " << c.num_heads << ";\n"
      << "static constexpr int kHeadDim = " << c.head_dim << ";\n"
      << "static constexpr int kHalf = kHeadDim / 2;  // pairs per head\n"
      << "static constexpr bool kInterleaved = " << (c.interleaved ? "true" : "false") << ";\n"
      << "static constexpr int kThreadsI = " << g.threads_i << ";\n"
      << "static constexpr int kHeadGroups = " << g.head_groups << ";\n"
      << "static constexpr int kThreads = " << g.block << ";\n";
  if (c.cache_write)
    cfg << "typedef " << CTypeName(c.index) << " IdxT;\n";
  if (c.q_heads > 0)
    cfg << "static constexpr int kQHeads = " << c.q_heads << ";\n";
  std::ostringstream b;
  b << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << kc.name
    << "(\n    T* out, const T* x, const TabT* cos_tab, const TabT* sin_tab, long long batch, long long seq,\n"
       "    long long table_batch_stride"
    << (c.cache_write ? ", const IdxT* index, long long rows, long long out_b,\n"
                        "    long long out_row, long long out_h"
                      : "")
    << (c.q_heads > 0 ? ", T* q_out, const T* q" : "") << (c.v_write ? ", T* v_cache, const T* v" : "")
    << ") {\n";
  b << R"CUDA(  const int64_t token = blockIdx.x;  // b * seq + s
  const int64_t bi = token / seq, s = token % seq;
  const int64_t row = bi * table_batch_stride + s * (int64_t)kHeadDim;
  const int64_t tok_base = token * (int64_t)(kHeads * kHeadDim);
)CUDA";
  if (c.q_heads > 0)
    b << R"CUDA(  if (blockIdx.y == 1) {  // q: rotated into the dense q_out, whatever the index
    const int64_t q_base = token * (int64_t)(kQHeads * kHeadDim);
    const int qi = threadIdx.x % kThreadsI, qg = threadIdx.x / kThreadsI;
    if (qg >= kHeadGroups) return;
    for (int i = qi; i < kHalf; i += kThreadsI) {
      const int ia = kInterleaved ? 2 * i : i;
      const int ib = kInterleaved ? 2 * i + 1 : i + kHalf;
      const float ca = toF(cos_tab[row + ia]), sa = toF(sin_tab[row + ia]);
      const float cb = toF(cos_tab[row + ib]), sb = toF(sin_tab[row + ib]);
      for (int h = qg; h < kQHeads; h += kHeadGroups) {
        const int64_t o = q_base + (int64_t)h * kHeadDim;
        const float a = toF(q[o + ia]), bv = toF(q[o + ib]);
        q_out[o + ia] = fromF<T>(a * ca - bv * sa);
        q_out[o + ib] = fromF<T>(bv * cb + a * sb);
      }
    }
    return;
  }
)CUDA";
  if (c.cache_write)
    b << R"CUDA(  int64_t r = (int64_t)index[s];
  if (r < 0) r += rows;
  if (r < 0 || r >= rows) return;  // as index_put on the GPU: not written
  const int64_t out_base = bi * out_b + r * out_row;
)CUDA";
  if (c.v_write)
    b << "  if (blockIdx.y == " << (c.q_heads > 0 ? 2 : 1) << R"CUDA() {  // v: copied into its cache
    for (int e = threadIdx.x; e < kHeads * kHeadDim; e += kThreads) {
      const int h = e / kHeadDim, d = e % kHeadDim;
      v_cache[out_base + (int64_t)h * out_h + d] = v[tok_base + e];
    }
    return;
  }
)CUDA";
  // The plain form (half-split pairs, no cache or q/v parts) with whole
  // 16-byte vectors of pairs: a vector path for aligned pointers.
  const int vp = 16 / std::max(ScalarSize(c.dtype), ScalarSize(c.table));
  if (!c.cache_write && c.q_heads == 0 && !c.v_write && !c.interleaved && (c.head_dim / 2) % vp == 0)
    b << "  // Vector path: task (h, i) rotates pairs i .. i + kVP - 1 of head h with\n"
         "  // 16-byte loads of x and of the tables (consecutive threads, consecutive\n"
         "  // pairs); the same math per element as the scalar loop below.\n"
         "  constexpr int kVP = "
      << vp << ";\n"
      << R"CUDA(  if ((((uint64_t)out | (uint64_t)x | (uint64_t)cos_tab | (uint64_t)sin_tab) & 15) == 0 &&
      table_batch_stride % kVP == 0) {
    for (int task = threadIdx.x; task < kHeads * (kHalf / kVP); task += kThreads) {
      const int h = task / (kHalf / kVP), i = (task % (kHalf / kVP)) * kVP;
      const int64_t o = tok_base + (int64_t)h * kHeadDim + i;
      const LlmcVec<T, kVP> va = *reinterpret_cast<const LlmcVec<T, kVP>*>(x + o);
      const LlmcVec<T, kVP> vb = *reinterpret_cast<const LlmcVec<T, kVP>*>(x + o + kHalf);
      const LlmcVec<TabT, kVP> ca = *reinterpret_cast<const LlmcVec<TabT, kVP>*>(cos_tab + row + i);
      const LlmcVec<TabT, kVP> sa = *reinterpret_cast<const LlmcVec<TabT, kVP>*>(sin_tab + row + i);
      const LlmcVec<TabT, kVP> cb = *reinterpret_cast<const LlmcVec<TabT, kVP>*>(cos_tab + row + i + kHalf);
      const LlmcVec<TabT, kVP> sb = *reinterpret_cast<const LlmcVec<TabT, kVP>*>(sin_tab + row + i + kHalf);
      LlmcVec<T, kVP> ra, rb;
#pragma unroll
      for (int e = 0; e < kVP; ++e) {
        const float a = toF(va.v[e]), bv = toF(vb.v[e]);
        ra.v[e] = fromF<T>(a * toF(ca.v[e]) - bv * toF(sa.v[e]));
        rb.v[e] = fromF<T>(bv * toF(cb.v[e]) + a * toF(sb.v[e]));
      }
      *reinterpret_cast<LlmcVec<T, kVP>*>(out + o) = ra;
      *reinterpret_cast<LlmcVec<T, kVP>*>(out + o + kHalf) = rb;
    }
    return;
  }
)CUDA";
  b << R"CUDA(  const int ti = threadIdx.x % kThreadsI, hg = threadIdx.x / kThreadsI;
  if (hg < kHeadGroups) {
    for (int i = ti; i < kHalf; i += kThreadsI) {
      const int ia = kInterleaved ? 2 * i : i;
      const int ib = kInterleaved ? 2 * i + 1 : i + kHalf;
      const float ca = toF(cos_tab[row + ia]), sa = toF(sin_tab[row + ia]);
      const float cb = toF(cos_tab[row + ib]), sb = toF(sin_tab[row + ib]);
      for (int h = hg; h < kHeads; h += kHeadGroups) {
        const int64_t o = tok_base + (int64_t)h * kHeadDim;
        const float a = toF(x[o + ia]), bv = toF(x[o + ib]);
)CUDA";
  // Head h's store offset: its [H, D] row of the token, or of the cache row.
  if (c.cache_write)
    b << "        const int64_t so = out_base + (int64_t)h * out_h;\n";
  const char *so = c.cache_write ? "so" : "o";
  b << "        out[" << so << " + ia] = fromF<T>(a * ca - bv * sa);\n"
    << "        out[" << so << " + ib] = fromF<T>(bv * cb + a * sb);\n"
    << R"CUDA(      }
    }
  }
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble(hdr.str(), cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> RoPETableLaunch(const RoPETableConfig &c, int64_t batch, int64_t seq) {
  const int64_t parts = 1 + (c.q_heads > 0 ? 1 : 0) + (c.v_write ? 1 : 0);
  return Dims(std::max<int64_t>(batch * seq, 1), parts, 1, ComputeRoPEGeom(GeomConfig(c)).block);
}

//===----------------------------------------------------------------------===//
// KV-cache append
//===----------------------------------------------------------------------===//

namespace {
constexpr int kAppendThreads = 256;
}

absl::StatusOr<KernelCode> EmitKvAppend(const KvAppendConfig &c) {
  if (c.heads_kv < 1 || c.head_dim < 1) return Invalid("kv append: bad sizes");
  if (absl::Status st = CheckTokenSize("kv append", c.heads_kv, c.head_dim); !st.ok()) return st;
  const int64_t row = c.heads_kv * c.head_dim;
  const int vec = VecWidth(row, ScalarSize(c.dtype));
  KernelCode kc;
  kc.name = std::string("llmc_kvappend_") + ScalarTypeTag(c.dtype) + "_h" + std::to_string(c.heads_kv) + "_d" +
            std::to_string(c.head_dim) + "_" + PosTag(c.pos);
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n"
      << "static constexpr int kRow = " << row << ";  // Hkv * D elements per token\n"
      << "static constexpr int kVec = " << vec << ";\n"
      << "static constexpr int kRowVec = kRow / kVec;\n"
      << "static constexpr int kThreads = " << kAppendThreads << ";\n";
  std::ostringstream b;
  b << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << kc.name
    << "(\n    T* k_cache, T* v_cache, const T* k_new, const T* v_new, const void* pos, int* error,\n"
       "    long long batch, long long max_seq, long long seq_new) {\n"
       "  typedef LlmcVec<T, kVec> V;\n"
       "  const int64_t bi = blockIdx.y;\n"
       "  const int64_t p = "
    << PosExpr(c.pos, "pos", "bi") << ";\n";
  b << R"CUDA(  if (p < 0 || p + seq_new > max_seq) {  // out of bounds: write nothing for this batch
    if (threadIdx.x == 0 && blockIdx.x == 0 && error) *error = 1;
    return;
  }
  const int64_t n = seq_new * kRowVec;
  V* kc = reinterpret_cast<V*>(k_cache) + (bi * max_seq + p) * kRowVec;
  V* vc = reinterpret_cast<V*>(v_cache) + (bi * max_seq + p) * kRowVec;
  const V* kn = reinterpret_cast<const V*>(k_new) + bi * n;
  const V* vn = reinterpret_cast<const V*>(v_new) + bi * n;
  for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += (int64_t)gridDim.x * kThreads) {
    kc[i] = kn[i];
    vc[i] = vn[i];
  }
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(
      kc.source, Assemble("// llmc KV-cache append: cache[b, pos:pos+Snew] = new[b] for K and V (in place).\n"
                          "// Bounds: pos < 0 or pos + Snew > Smax -> nothing written, *error = 1.\n",
                          cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<KernelCode> EmitPagedKvAppend(const PagedKvAppendConfig &c) {
  if (c.heads_kv < 1 || c.head_dim < 1 || c.page_size < 1) return Invalid("paged kv append: bad sizes");
  for (ScalarType t : {c.block_table, c.cu_seqlens, c.seq_lens})
    if (t != ScalarType::i32 && t != ScalarType::i64)
      return Invalid("paged kv append: block_table, cu_seqlens and seq_lens must be i32 or i64");
  if (absl::Status st = CheckTokenSize("paged kv append", c.heads_kv, c.head_dim); !st.ok()) return st;
  const bool quantize = c.quantize_from.has_value();
  if (quantize && ((c.dtype != ScalarType::f8e4m3 && c.dtype != ScalarType::f8e5m2) ||
                   !IsFloatType(*c.quantize_from) || *c.quantize_from == ScalarType::f8e4m3 ||
                   *c.quantize_from == ScalarType::f8e5m2))
    return Invalid("paged kv append: quantizes an f32/f16/bf16 update into f8e4m3/f8e5m2 pages only");
  const int64_t row = c.heads_kv * c.head_dim;
  const int vec = VecWidth(row, ScalarSize(c.dtype));
  KernelCode kc;
  kc.name = std::string("llmc_paged_kvappend_") + ScalarTypeTag(c.dtype) +
            (quantize ? std::string("_from_") + ScalarTypeTag(*c.quantize_from) : std::string()) + "_h" +
            std::to_string(c.heads_kv) + "_d" + std::to_string(c.head_dim) + "_ps" + std::to_string(c.page_size) +
            "_" + ScalarTypeTag(c.block_table) + ScalarTypeTag(c.cu_seqlens) + ScalarTypeTag(c.seq_lens);
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n";
  if (quantize)
    cfg << "typedef " << CTypeName(*c.quantize_from) << " UpdT;  // quantized to T: update / scale[h]\n"
        << "static constexpr int kHeadDim = " << c.head_dim << ";\n";
  cfg
      << "typedef " << CTypeName(c.block_table) << " BtT;\n"
      << "typedef " << CTypeName(c.cu_seqlens) << " CuT;\n"
      << "typedef " << CTypeName(c.seq_lens) << " LenT;\n"
      << "static constexpr int kRow = " << row << ";  // Hkv * D elements per token\n"
      << "static constexpr int kVec = " << vec << ";\n"
      << "static constexpr int kRowVec = kRow / kVec;\n"
      << "static constexpr int64_t kPageSize = " << c.page_size << ";\n"
      << "static constexpr int kThreads = " << kAppendThreads << ";\n";
  std::ostringstream b;
  b << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << kc.name
    << (quantize ? "(\n    T* pages, const UpdT* __restrict__ update, const float* __restrict__ scale,"
                 : "(\n    T* pages, const T* __restrict__ update,")
    << R"CUDA( const BtT* __restrict__ block_table,
    const CuT* __restrict__ cu_seqlens, const LenT* __restrict__ seq_lens, int* error,
    long long num_tokens, long long num_seqs, long long max_pages, long long num_pages) {
  typedef LlmcVec<T, kVec> V;
  const int64_t t = blockIdx.x;
  if (t >= num_tokens) return;
  // The sequence of token t: the last b with cu_seqlens[b] <= t.
  int64_t lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if ((int64_t)cu_seqlens[mid] <= t) lo = mid; else hi = mid - 1;
  }
  const int64_t b = lo, first = (int64_t)cu_seqlens[b], nb = (int64_t)cu_seqlens[b + 1] - first;
  const int64_t pos = (int64_t)seq_lens[b] - nb + (t - first);
  const int64_t page = pos >= 0 && pos < max_pages * kPageSize && t - first < nb
                           ? (int64_t)block_table[b * max_pages + pos / kPageSize] : -1;
  if (page < 0 || page >= num_pages) {  // nothing written out of bounds
    if (threadIdx.x == 0 && error) *error = 3;
    return;
  }
)CUDA"
    << (quantize
      ? "  T* dst = pages + (page * kPageSize + pos % kPageSize) * kRow;\n"
        "  const UpdT* src = update + t * kRow;\n"
        "  for (int i = threadIdx.x; i < kRow; i += kThreads) dst[i] = fromF<T>(toF(src[i]) / scale[i / kHeadDim]);"
      : "  V* dst = reinterpret_cast<V*>(pages) + (page * kPageSize + pos % kPageSize) * kRowVec;\n"
        "  const V* src = reinterpret_cast<const V*>(update) + t * kRowVec;\n"
        "  for (int i = threadIdx.x; i < kRowVec; i += kThreads) dst[i] = src[i];")
    << "\n}\n";
  LLMC_ASSIGN_OR_RETURN(
      kc.source,
      Assemble("// llmc paged KV append (PagedAttention, Kwon et al. 2023): token t of sequence b, position p,\n"
               "// goes to row p % page_size of page block_table[b, p / page_size] (in place).\n"
               "// A position or page out of range -> that token is not written, *error = 3.\n" +
                   std::string(quantize ? "// fp8 pages: each element stored as update / scale[kv head], saturating.\n"
                                        : ""),
               cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> PagedKvAppendLaunch(const PagedKvAppendConfig &, int64_t num_tokens) {
  return Dims(std::max<int64_t>(num_tokens, 1), 1, 1, kAppendThreads);
}

absl::StatusOr<LaunchDims> KvAppendLaunch(const KvAppendConfig &c, int64_t batch, int64_t seq_new) {
  const int64_t row = c.heads_kv * c.head_dim;
  const int vec = VecWidth(row, ScalarSize(c.dtype));
  const int64_t work = std::max<int64_t>(seq_new * (row / vec), 1);
  const int64_t gx = std::min<int64_t>(CeilDiv(work, kAppendThreads), 1024);
  return Dims(gx, std::max<int64_t>(batch, 1), 1, kAppendThreads);
}

//===----------------------------------------------------------------------===//
// Gather / embedding
//===----------------------------------------------------------------------===//

namespace {
int GatherThreads(const GatherConfig &c) {
  const int vec = VecWidth(c.dim, ScalarSize(c.dtype));
  return static_cast<int>(std::clamp<int64_t>(RoundUp(c.dim / vec, 32), 32, 256));
}
} // namespace

absl::StatusOr<KernelCode> EmitGather(const GatherConfig &c) {
  if (c.index != ScalarType::i32 && c.index != ScalarType::i64)
    return Invalid("gather: index must be i32 or i64");
  if (c.dim < 1) return Invalid("gather: dim must be >= 1");
  if (c.dim > kMaxIntRow)
    return Unsupported("gather: rows of " + std::to_string(c.dim) + " elements; at most 2^30 (" +
                       std::to_string(kMaxIntRow) + ") are supported");
  const int vec = VecWidth(c.dim, ScalarSize(c.dtype));
  KernelCode kc;
  kc.name = std::string("llmc_gather_") + ScalarTypeTag(c.dtype) + "_" + ScalarTypeTag(c.index) + "_d" +
            std::to_string(c.dim);
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.dtype) << " T;\n"
      << "typedef " << CTypeName(c.index) << " IdxT;\n"
      << "static constexpr int kDim = " << c.dim << ";\n"
      << "static constexpr int kVec = " << vec << ";\n"
      << "static constexpr int kRowVec = kDim / kVec;\n"
      << "static constexpr int kThreads = " << GatherThreads(c) << ";\n";
  std::ostringstream b;
  b << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << kc.name
    << "(\n    T* __restrict__ out, const T* __restrict__ table, const IdxT* __restrict__ indices,\n"
       "    int* error, long long num_indices, long long vocab) {\n";
  b << R"CUDA(  typedef LlmcVec<T, kVec> V;
  const int64_t n = blockIdx.x;  // one block per gathered row
  if (n >= num_indices) return;
  const int64_t idx = (int64_t)indices[n];
  V* dst = reinterpret_cast<V*>(out) + n * kRowVec;
  if (idx < 0 || idx >= vocab) {  // out of range: zeros + error flag 2
    if (threadIdx.x == 0 && error) *error = 2;
    V z;
#pragma unroll
    for (int e = 0; e < kVec; ++e) z.v[e] = fromF<T>(0.0f);
    for (int i = threadIdx.x; i < kRowVec; i += kThreads) dst[i] = z;
    return;
  }
  const V* src = reinterpret_cast<const V*>(table) + idx * kRowVec;
  for (int i = threadIdx.x; i < kRowVec; i += kThreads) dst[i] = src[i];
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(
      kc.source, Assemble("// llmc gather / embedding lookup: out[n, :] = table[idx[n], :].\n"
                          "// Out-of-range index -> zeros and *error = 2.\n",
                          cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> GatherLaunch(const GatherConfig &c, int64_t num_indices) {
  return Dims(std::max<int64_t>(num_indices, 1), 1, 1, GatherThreads(c));
}

//===----------------------------------------------------------------------===//
// Zero padding
//===----------------------------------------------------------------------===//

namespace {
const char *BitsType(int size) {
  switch (size) {
  case 1: return "uint8_t";
  case 2: return "uint16_t";
  case 4: return "uint32_t";
  default: return "uint64_t";
  }
}
} // namespace

int PadVecWidth(ScalarType dtype, int64_t in_last, int64_t out_last) {
  int w = 16 / ScalarSize(dtype);
  while (w > 1 && (in_last % w != 0 || out_last % w != 0)) w /= 2;
  return w;
}

absl::StatusOr<KernelCode> EmitPad(const PadConfig &c) {
  if (c.rank < 1 || c.rank > kPadMaxRank) return Invalid("pad: rank must be in 1..8");
  const int size = ScalarSize(c.dtype);
  if (c.vec < 1 || (c.vec & (c.vec - 1)) != 0 || c.vec * size > 16)
    return Invalid("pad: vec must be a power of two with vec * element size <= 16");
  KernelCode kc;
  kc.name = "llmc_pad_b" + std::to_string(size) + "_r" + std::to_string(c.rank) + "_v" + std::to_string(c.vec);
  std::ostringstream cfg;
  cfg << "typedef " << BitsType(size) << " E;  // element bits: any type of " << size << " byte(s)\n"
      << "static constexpr int kRank = " << c.rank << ";\n"
      << "static constexpr int kVec = " << c.vec << ";\n"
      << "static constexpr int kThreads = " << kPadThreads << ";\n"
      << "struct PadShape { long long out[kRank]; long long in[kRank]; };\n";
  std::ostringstream b;
  b << R"CUDA(
template <int V>
LLMC_DEV void padRows(E* out, const E* in, long long numel, const PadShape& s) {
  typedef LlmcVec<E, V> Vt;
  const int64_t items = numel / V;
  for (int64_t it = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; it < items;
       it += (int64_t)gridDim.x * blockDim.x) {
    // V divides both last dims: the V elements are all inside or all outside.
    int64_t rem = it * V, src = 0, stride = 1;
    bool inside = true;
#pragma unroll
    for (int d = kRank - 1; d >= 0; --d) {
      const int64_t c = rem % s.out[d];
      rem /= s.out[d];
      inside = inside && c < s.in[d];
      src += c * stride;
      stride *= s.in[d];
    }
    Vt v;
    if (inside) {
      v = *reinterpret_cast<const Vt*>(in + src);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) v.v[e] = 0;
    }
    *reinterpret_cast<Vt*>(out + it * V) = v;
  }
}
)CUDA";
  b << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << kc.name
    << "(\n    E* __restrict__ out, const E* __restrict__ in, long long numel, PadShape shape) {\n";
  b << R"CUDA(  const unsigned long long align = (unsigned long long)(kVec * sizeof(E));
  if (kVec > 1 && ((unsigned long long)out % align) == 0 && ((unsigned long long)in % align) == 0)
    padRows<kVec>(out, in, numel, shape);
  else
    padRows<1>(out, in, numel, shape);
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(
      kc.source, Assemble("// llmc zero padding (llm.pad): out[c] = (every c[d] < in_sizes[d]) ? in[c] : 0,\n"
                          "// a bit-exact copy for any element type; dense row-major tensors.\n",
                          cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> PadLaunch(const PadConfig &c, int64_t numel_out) {
  const int64_t items = std::max<int64_t>(numel_out / std::max(c.vec, 1), 1);
  return Dims(std::min<int64_t>(CeilDiv(items, kPadThreads), int64_t{kAssumedNumSMs} * 8), 1, 1, kPadThreads);
}

//===----------------------------------------------------------------------===//
// Tiled transpose
//===----------------------------------------------------------------------===//

bool TransposeSupported(const TransposeConfig &c) {
  return c.in == c.out || (IsFloatType(c.in) && IsFloatType(c.out));
}

absl::StatusOr<KernelCode> EmitTranspose(const TransposeConfig &c) {
  if (!TransposeSupported(c))
    return Invalid("transpose: a conversion between types that are not both float");
  KernelCode kc;
  kc.name = std::string("llmc_transpose_") + ScalarTypeTag(c.in) + "_" + ScalarTypeTag(c.out);
  std::ostringstream cfg;
  cfg << "typedef " << CTypeName(c.in) << " InT;\n"
      << "typedef " << CTypeName(c.out) << " OutT;\n"
      << "static constexpr int kTile = " << kTransposeTile << ";\n"
      << "static constexpr int kThreads = " << kTransposeThreads << ";\n";
  const std::string load = c.in == c.out ? "src[r * ld + c]" : "fromF<OutT>(toF(src[r * ld + c]))";
  // fp8 copies (1-byte elements, no conversion: every relayout the lowering
  // emits) move 4 elements per access on full, 4-byte aligned tiles: one
  // element per access moves 32 bytes per warp instruction, which held the
  // 1B training step's fp8 transposes to 0.4-1.3 TB/s on the H100.
  const bool bytes = c.in == c.out && ScalarSize(c.in) == 1;
  std::ostringstream b;
  b << "\nextern \"C\" __global__ void __launch_bounds__(kThreads) " << kc.name << R"CUDA((
    OutT* __restrict__ out, const InT* __restrict__ in, long long rows, long long cols,
    long long ld, long long batch_stride) {
  constexpr int kRowsPerPass = kThreads / kTile;
  const long long r0 = (long long)blockIdx.y * kTile, c0 = (long long)blockIdx.x * kTile;
  const InT* src = in + (long long)blockIdx.z * batch_stride;
  OutT* dst = out + (long long)blockIdx.z * rows * cols;
)CUDA";
  if (bytes)
    b << R"CUDA(  // A full tile whose rows start and whose output rows start on 4-byte
  // boundaries: words of 4 elements. Read: 16 threads per tile row, each a
  // word; write: 16 threads per output row (a tile column), each packing
  // the 4 elements of 4 consecutive tile rows. Rows padded by one word.
  if (r0 + kTile <= rows && c0 + kTile <= cols &&
      (((unsigned long long)src | (unsigned long long)ld | (unsigned long long)dst |
        (unsigned long long)rows) & 3) == 0) {
    constexpr int kWords = kTile / 4, kStride = kTile + 4;
    __shared__ unsigned int wwords[kTile * kStride / 4];
    unsigned char* wtile = reinterpret_cast<unsigned char*>(wwords);
    const int w = threadIdx.x % kWords;
    for (int i = threadIdx.x / kWords; i < kTile; i += kThreads / kWords)
      *reinterpret_cast<unsigned int*>(&wtile[i * kStride + 4 * w]) =
          *reinterpret_cast<const unsigned int*>(&src[(r0 + i) * ld + c0 + 4 * w]);
    __syncthreads();
    for (int j = threadIdx.x / kWords; j < kTile; j += kThreads / kWords) {
      const unsigned char* col = &wtile[4 * w * kStride + j];
      const unsigned int v = (unsigned int)col[0] | ((unsigned int)col[kStride] << 8) |
                             ((unsigned int)col[2 * kStride] << 16) |
                             ((unsigned int)col[3 * kStride] << 24);
      *reinterpret_cast<unsigned int*>(&dst[(c0 + j) * rows + r0 + 4 * w]) = v;
    }
    return;
  }
)CUDA";
  b << R"CUDA(  // One extra column: the column-wise reads of the write phase fall in
  // different banks for 4-byte elements; 2-byte and 1-byte elements still
  // share banks two ways there (32 and 16 ways without the column).
  __shared__ OutT tile[kTile][kTile + 1];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  for (int i = ty; i < kTile; i += kRowsPerPass) {
    const long long r = r0 + i, c = c0 + tx;
    if (r < rows && c < cols) tile[i][tx] = )CUDA"
    << load << R"CUDA(;
  }
  __syncthreads();
  for (int i = ty; i < kTile; i += kRowsPerPass) {
    const long long c = c0 + i, r = r0 + tx;
    if (c < cols && r < rows) dst[c * rows + r] = tile[tx][i];
  }
}
)CUDA";
  LLMC_ASSIGN_OR_RETURN(
      kc.source,
      Assemble("// llmc tiled transpose: out[b, c, r] = convert(in[b * batch_stride + r * ld + c]),\n"
               "// 64 x 64 tiles through shared memory (coalesced reads and writes).\n",
               cfg.str(), b.str()));
  return kc;
}

absl::StatusOr<LaunchDims> TransposeLaunch(int64_t batch, int64_t rows, int64_t cols) {
  return Dims(CeilDiv(cols, kTransposeTile), CeilDiv(rows, kTransposeTile), batch,
              kTransposeThreads);
}

absl::StatusOr<std::vector<int64_t>> PackPadShape(const std::vector<int64_t> &out_sizes,
                                                  const std::vector<int64_t> &in_sizes) {
  if (out_sizes.size() != in_sizes.size() || out_sizes.empty() || out_sizes.size() > size_t{kPadMaxRank})
    return Invalid("pad: shapes of different ranks or rank outside 1..8");
  std::vector<int64_t> packed(out_sizes);
  packed.insert(packed.end(), in_sizes.begin(), in_sizes.end());
  return packed;
}

} // namespace llmc::cuda
