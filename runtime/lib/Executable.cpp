// The Executable model: dtype names and sizes, and Validate, the checks
// everything the runtime later trusts passes first. Its serialization is in
// ExecutableSerialization.cpp, its canonical text in ExecutableDump.cpp.
#include "llmc/runtime/Executable.h"

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "llmc/runtime/KernelCompiler.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {

namespace {
constexpr const char* kDTypeNames[] = {"f32",    "f16",    "bf16",
                                       "f8e4m3", "f8e5m2", "i1",
                                       "i8",     "i32",    "i64"};
}  // namespace

int64_t DTypeSize(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::f8e4m3: case DType::f8e5m2: case DType::i1: case DType::i8:
      return 1;
    case DType::i64: return 8;
  }
  return 0;
}

const char* DTypeName(DType t) { return kDTypeNames[static_cast<int>(t)]; }

absl::StatusOr<DType> DTypeFromName(const std::string& name) {
  for (int i = 0; i < 9; ++i)
    if (name == kDTypeNames[i]) return static_cast<DType>(i);
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'"));
}

int64_t TensorSig::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------
// Validation
//
// Everything the runtime later trusts is checked here against the
// executable's own buffers and the hardware's limits, with overflow-checked
// arithmetic: a file with a recomputed checksum is still only data.
// ---------------------------------------------------------------------------
namespace {

// a * b and a + b, or nullopt on int64 overflow.
std::optional<int64_t> Mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
std::optional<int64_t> Add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

bool ValidDType(DType t) {
  int v = static_cast<int>(t);
  return v >= 0 && v < static_cast<int>(std::size(kDTypeNames));
}


// Whether `s` is UTF-8 (the JSON payload holds text; nlohmann's dump throws
// on anything else, so an unchecked string would abort a save).
bool IsUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2
             : (c >> 3) == 0x1E ? 3 : 4;
    if (n == 4 || i + n >= s.size()) return false;
    uint32_t cp = n == 0 ? c : n == 1 ? c & 0x1F : n == 2 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; k <= n; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 0x2) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates, beyond U+10FFFF.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) ||
        (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

template <typename T>
T ReadLE(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

// Why `cubin` is not a well-formed 64-bit little-endian CUDA ELF whose
// program and section headers and section contents lie inside it ("" when
// it is). The driver parses these offsets; out-of-range ones would make it
// read outside the buffer.
std::string CubinProblem(const std::string& cubin) {
  constexpr size_t kEhdr = 64, kShdr = 64, kPhdr = 56;
  constexpr uint16_t kEmCuda = 190;
  if (cubin.size() < kEhdr || cubin.compare(0, 4, "\x7f" "ELF") != 0)
    return absl::StrCat("is not an ELF file (", cubin.size(),
                        " bytes without the ELF header)");
  if (cubin[4] != 2 || cubin[5] != 1)
    return "is not a 64-bit little-endian ELF file";
  if (uint16_t machine = ReadLE<uint16_t>(cubin, 18); machine != kEmCuda)
    return absl::StrCat("is an ELF file for machine ", machine,
                        ", not for CUDA (", kEmCuda, ")");
  const uint64_t size = cubin.size();
  auto inside = [&](uint64_t off, uint64_t count, uint64_t each) {
    return count == 0 || (off <= size && count <= (size - off) / each);
  };
  uint64_t phoff = ReadLE<uint64_t>(cubin, 32), shoff = ReadLE<uint64_t>(cubin, 40);
  uint16_t phentsize = ReadLE<uint16_t>(cubin, 54), phnum = ReadLE<uint16_t>(cubin, 56);
  uint16_t shentsize = ReadLE<uint16_t>(cubin, 58), shnum = ReadLE<uint16_t>(cubin, 60);
  uint16_t shstrndx = ReadLE<uint16_t>(cubin, 62);
  if ((phnum && phentsize != kPhdr) || (shnum && shentsize != kShdr))
    return "has ELF header entry sizes other than 64-bit ELF's";
  if (!inside(phoff, phnum, kPhdr))
    return absl::StrCat("has ", phnum, " program headers at offset ", phoff,
                        " beyond its ", size, " bytes");
  if (!inside(shoff, shnum, kShdr))
    return absl::StrCat("has ", shnum, " section headers at offset ", shoff,
                        " beyond its ", size, " bytes");
  if (shnum && shstrndx >= shnum)
    return absl::StrCat("names section ", shstrndx, " of ", shnum,
                        " as its string table");
  for (uint16_t i = 0; i < shnum; ++i) {
    size_t h = shoff + size_t(i) * kShdr;
    constexpr uint32_t kNoBits = 8;
    if (ReadLE<uint32_t>(cubin, h + 4) == kNoBits) continue;
    uint64_t off = ReadLE<uint64_t>(cubin, h + 24), n = ReadLE<uint64_t>(cubin, h + 32);
    if (!inside(off, n, 1))
      return absl::StrCat("has section ", i, " of ", n, " bytes at offset ",
                          off, " beyond its ", size, " bytes");
  }
  for (uint16_t i = 0; i < phnum; ++i) {
    size_t h = phoff + size_t(i) * kPhdr;
    uint64_t off = ReadLE<uint64_t>(cubin, h + 8), n = ReadLE<uint64_t>(cubin, h + 32);
    if (!inside(off, n, 1))
      return absl::StrCat("has segment ", i, " of ", n, " bytes at offset ",
                          off, " beyond its ", size, " bytes");
  }
  return "";
}

// Hardware limits every CUDA GPU llmc targets shares (CUDA C++ Programming
// Guide, "Compute Capabilities", Table 23): grid.x < 2^31, grid.y and
// grid.z < 2^16, at most 1024 threads per block (x, y <= 1024, z <= 64),
// dynamic shared memory up to 227 KiB (sm_90's opt-in maximum), kernel
// parameters up to 32764 bytes (CUDA 12.1 on Volta and later).
constexpr uint32_t kMaxGridX = (uint32_t(1) << 31) - 1;
constexpr uint32_t kMaxGridYZ = 65535;
constexpr uint32_t kMaxBlockThreads = 1024;
constexpr uint32_t kMaxBlockDim[3] = {1024, 1024, 64};
constexpr uint32_t kMaxDynamicSmem = 227 * 1024;
constexpr int64_t kMaxKernelParamBytes = 32764;

}  // namespace

std::string UnsupportedGemmDTypes(DType a, DType b, DType d) {
  auto fp8 = [](DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; };
  auto pair = [&] {
    return absl::StrCat(DTypeName(a), " x ", DTypeName(b), " -> ", DTypeName(d));
  };
  if (fp8(a) || fp8(b)) {
    if (!fp8(a) || !fp8(b))
      return absl::StrCat(pair(), ": an fp8 GEMM needs both operands in fp8");
    if (a == DType::f8e5m2 && b == DType::f8e5m2)
      return absl::StrCat(pair(), ": cuBLASLt has no e5m2 x e5m2 GEMM");
    if (d != DType::bf16 && d != DType::f16 && d != DType::f32)
      return absl::StrCat(pair(), ": an fp8 GEMM writes bf16, f16 or f32");
    return "";
  }
  if (a != b)
    return absl::StrCat(pair(), ": A and B need one dtype");
  if (a != DType::f32 && a != DType::f16 && a != DType::bf16)
    return absl::StrCat(pair(), ": GEMM operands are f32, f16, bf16 or fp8");
  if (d != a && d != DType::f32)
    return absl::StrCat(pair(), ": ", a == DType::f32 ? "an " : "a ", DTypeName(a),
                        " GEMM writes ", DTypeName(a),
                        a == DType::f32 ? "" : " or f32");
  return "";
}

absl::Status Executable::Validate() const {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("invalid executable: ", parts...));
  };
  if (format_version != kFormatVersion)
    return bad("format version ", format_version, " (this runtime reads ",
               kFormatVersion, ")");
  if (arena_bytes < 0) return bad("arena has negative size ", arena_bytes);
  for (const auto& [name, value] : symbol_bindings) {
    if (!IsUtf8(name)) return bad("a dynamic dim name is not UTF-8 text");
    if (value < 0) return bad("dynamic dim '", name, "' is bound to ", value);
  }

  // Signatures: rank, dtype, dims, element and byte counts without overflow.
  for (const auto* sigs : {&inputs, &outputs}) {
    const bool is_input = sigs == &inputs;
    for (size_t i = 0; i < sigs->size(); ++i) {
      const TensorSig& t = (*sigs)[i];
      if (!IsUtf8(t.name))
        return bad(is_input ? "input" : "output", " #", i,
                   " has a name that is not UTF-8 text");
      std::string w = absl::StrCat(is_input ? "input '" : "output '", t.name,
                                   "' (#", i, ")");
      if (!ValidDType(t.dtype))
        return bad(w, " has dtype value ", static_cast<int>(t.dtype));
      if (t.shape.size() > static_cast<size_t>(kMaxTensorRank))
        return bad(w, " has rank ", t.shape.size(), " (at most ",
                   kMaxTensorRank, ")");
      std::optional<int64_t> bytes = DTypeSize(t.dtype);
      for (int64_t d : t.shape) {
        if (d < 0 || d > (int64_t(1) << 40))
          return bad(is_input ? "input '" : "output '", t.name,
                     "' has dimension ", d, " (expected 0..2^40)");
        if (bytes) bytes = Mul(*bytes, d);
      }
      if (!bytes || *bytes > kMaxTensorBytes)
        return bad(w, " of shape [", absl::StrJoin(t.shape, ","), "] ",
                   DTypeName(t.dtype), " has more than 2^62 bytes");
      if (is_input && t.alias_input != -1)
        return bad(w, " has alias_input ", t.alias_input,
                   " (only outputs alias inputs)");
      if (!is_input && t.parameter)
        return bad(w, " is marked as a parameter (only inputs are)");
      if (!is_input && t.alias_input != -1) {
        if (t.alias_input < 0 || t.alias_input >= static_cast<int>(inputs.size()))
          return bad(w, " aliases input ", t.alias_input, " of ", inputs.size());
        const TensorSig& in = inputs[t.alias_input];
        if (in.dtype != t.dtype || in.shape != t.shape)
          return bad(w, " aliases input '", in.name, "' of another type");
      }
    }
  }

  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = buffers[i];
    if (b.id != static_cast<int>(i))
      return bad("buffer #", i, " has id ", b.id, " (ids must equal positions)");
    if (b.bytes < 0) return bad("buffer ", i, " has negative size");
    switch (b.kind) {
      case Buffer::Input:
      case Buffer::Output: {
        const auto& sigs = b.kind == Buffer::Input ? inputs : outputs;
        if (b.io_index < 0 || b.io_index >= static_cast<int>(sigs.size()))
          return bad("buffer ", i, " io_index ", b.io_index, " out of range");
        // The caller's tensor is the buffer: exactly its signature's bytes.
        if (b.bytes != sigs[b.io_index].Bytes())
          return bad("buffer ", i, " has ", b.bytes, " bytes but ",
                     b.kind == Buffer::Input ? "input '" : "output '",
                     sigs[b.io_index].name, "' has ", sigs[b.io_index].Bytes());
        break;
      }
      case Buffer::Arena: {
        std::optional<int64_t> end = Add(b.arena_offset, b.bytes);
        if (b.arena_offset < 0 || !end || *end > arena_bytes)
          return bad("buffer ", i, " [", b.arena_offset, ", +", b.bytes,
                     ") exceeds arena of ", arena_bytes, " bytes");
        break;
      }
      case Buffer::Persistent:
        break;
      case Buffer::Constant:
        if (static_cast<int64_t>(b.constant_data.size()) != b.bytes)
          return bad("constant buffer ", i, " holds ", b.constant_data.size(),
                     " bytes, declares ", b.bytes);
        break;
      default:
        return bad("buffer ", i, " has kind value ", static_cast<int>(b.kind));
    }
  }
  // A reference to `need` bytes (unknown: -1) at r.offset of a buffer.
  auto check_ref = [&](const BufferRef& r, bool optional, const std::string& what,
                       int64_t need = 0) -> absl::Status {
    if (r.buffer == -1 && optional) return absl::OkStatus();
    if (r.buffer < 0 || r.buffer >= static_cast<int>(buffers.size()))
      return bad(what, " refers to buffer ", r.buffer, " of ", buffers.size());
    const int64_t size = buffers[r.buffer].bytes;
    if (r.offset < 0 || r.offset > size)
      return bad(what, " offset ", r.offset, " outside buffer ", r.buffer);
    if (need > size - r.offset)
      return bad(what, " needs ", need, " bytes at offset ", r.offset,
                 " of buffer ", r.buffer, " (", size, " bytes)");
    return absl::OkStatus();
  };
  // Bytes of `batch` row-major matrices of rows x cols elements of `el`
  // bytes, row stride ld and batch stride `stride` elements; nullopt on
  // overflow.
  auto matrix_bytes = [](int64_t batch, int64_t rows, int64_t cols, int64_t ld,
                         int64_t stride, int64_t el) -> std::optional<int64_t> {
    std::optional<int64_t> last_row = Mul(rows - 1, ld);
    std::optional<int64_t> last_batch = Mul(batch - 1, stride);
    if (!last_row || !last_batch) return std::nullopt;
    std::optional<int64_t> n = Add(*last_row, cols);
    if (n) n = Add(*n, *last_batch);
    if (n) n = Mul(*n, el);
    return n;
  };

  for (size_t i = 0; i < kernels.size(); ++i) {
    const KernelSpec& k = kernels[i];
    std::string w = absl::StrCat("kernel ", i, " '", k.name, "'");
    // Everything handed to NVRTC and the driver as C strings must be text:
    // an embedded NUL would silently cut it short.
    if (k.name.empty() || k.name.find('\0') != std::string::npos ||
        !IsUtf8(k.name))
      return bad("kernel ", i,
                 " has an empty name or one with a NUL byte or not UTF-8");
    {
      bool text = IsUtf8(k.source) && IsUtf8(k.arch);
      for (const std::string& o : k.options) text &= IsUtf8(o);
      for (const auto& [name, body] : k.headers) text &= IsUtf8(name) && IsUtf8(body);
      if (!text)
        return bad("kernel ", i, " '", k.name,
                   "' has source, an option, a header or an arch that is not "
                   "UTF-8 text");
    }
    if (k.source.find('\0') != std::string::npos)
      return bad(w, " has a NUL byte in its CUDA source (source is text)");
    for (const std::string& o : k.options)
      if (o.find('\0') != std::string::npos)
        return bad(w, " has an NVRTC option with a NUL byte");
    for (const auto& [name, text] : k.headers)
      if (name.empty() || name.find('\0') != std::string::npos ||
          text.find('\0') != std::string::npos)
        return bad(w, " has a header with an empty name or a NUL byte");
    if (k.cubin.empty() && k.source.empty())
      return bad(w, " has neither a cubin nor CUDA source");
    if (!k.arch.empty() && !IsValidArch(k.arch))
      return bad(w, " has arch '", k.arch, "' (expected ", kArchSpelling, ")");
    if (!k.cubin.empty()) {
      if (k.arch.empty())
        return bad(w, " has a cubin but no arch");
      if (absl::StartsWith(k.arch, "compute_")) {
        if (k.cubin.find('\0') != std::string::npos)
          return bad(w, " has PTX for ", k.arch, " with a NUL byte (PTX is text)");
      } else if (std::string why = CubinProblem(k.cubin); !why.empty()) {
        return bad(w, " has a cubin for ", k.arch, " that ", why);
      }
    }
  }

  for (size_t i = 0; i < gemms.size(); ++i) {
    const GemmSpec& g = gemms[i];
    std::string w = absl::StrCat("gemm ", i);
    if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0)
      return bad(w, " has non-positive m/n/k/batch");
    if (g.batch > std::numeric_limits<int32_t>::max())
      return bad(w, " has batch ", g.batch, " (cuBLASLt takes at most 2^31-1)");
    for (DType t : {g.dtype_a, g.dtype_b, g.dtype_c, g.dtype_d, g.compute})
      if (!ValidDType(t)) return bad(w, " has dtype value ", static_cast<int>(t));
    if (g.compute != DType::f32)
      return bad(w, " accumulates in ", DTypeName(g.compute), " (expected f32)");
    int e = static_cast<int>(g.epilogue);
    if (e < 0 || e > static_cast<int>(Epilogue::gelu_bias))
      return bad(w, " has epilogue value ", e);
    const bool fp8 = g.dtype_a == DType::f8e4m3 || g.dtype_a == DType::f8e5m2 ||
                     g.dtype_b == DType::f8e4m3 || g.dtype_b == DType::f8e5m2;
    if (fp8 && (g.transa || !g.transb))
      return bad(w, " is an fp8 GEMM but not transa=false, transb=true");
    if (std::string why = UnsupportedGemmDTypes(g.dtype_a, g.dtype_b, g.dtype_d); !why.empty())
      return bad(w, " has no cuBLASLt kernel: ", why);
    if (g.c.buffer >= 0 && g.dtype_c != g.dtype_d)
      return bad(w, " has C of ", DTypeName(g.dtype_c), " and D of ", DTypeName(g.dtype_d),
                 " (expected one dtype)");
    if (g.stride_a < 0 || g.stride_b < 0 || g.stride_c < 0 || g.stride_d < 0)
      return bad(w, " has a negative batch stride");
    // Stored shapes (Executable.h, GemmSpec): A [m,k] or [k,m], B [k,n] or
    // [n,k], C and D [m,n]; each row stride at least its row.
    const int64_t a_rows = g.transa ? g.k : g.m, a_cols = g.transa ? g.m : g.k;
    const int64_t b_rows = g.transb ? g.n : g.k, b_cols = g.transb ? g.k : g.n;
    struct Operand {
      const char* name;
      const BufferRef* ref;
      bool optional;
      int64_t rows, cols, ld, stride;
      DType dtype;
    };
    const Operand ops[] = {
        {"A", &g.a, false, a_rows, a_cols, g.lda, g.stride_a, g.dtype_a},
        {"B", &g.b, false, b_rows, b_cols, g.ldb, g.stride_b, g.dtype_b},
        {"C", &g.c, true, g.m, g.n, g.ldc, g.stride_c, g.dtype_c},
        {"D", &g.d, false, g.m, g.n, g.ldd, g.stride_d, g.dtype_d}};
    for (const Operand& o : ops) {
      if (o.optional && o.ref->buffer == -1) continue;
      std::string ow = absl::StrCat(w, " ", o.name);
      if (o.ld < o.cols)
        return bad(ow, " has row stride ", o.ld, " below its ", o.cols,
                   " columns (", o.rows, "x", o.cols, ")");
      std::optional<int64_t> need = matrix_bytes(g.batch, o.rows, o.cols, o.ld,
                                                 o.stride, DTypeSize(o.dtype));
      if (!need)
        return bad(ow, " (", g.batch, " x ", o.rows, "x", o.cols, ", ld ",
                   o.ld, ", batch stride ", o.stride, ") overflows int64 bytes");
      LLMC_RT_RETURN_IF_ERROR(check_ref(*o.ref, o.optional, ow, *need));
    }
    bool needs_bias = g.epilogue == Epilogue::bias ||
                      g.epilogue == Epilogue::relu_bias ||
                      g.epilogue == Epilogue::gelu_bias;
    if (needs_bias && g.bias.buffer < 0) return bad(w, " epilogue needs a bias");
    // One bias element per output column, in D's dtype (n <= ld of D).
    LLMC_RT_RETURN_IF_ERROR(
        check_ref(g.bias, true, w + " bias", g.n * DTypeSize(g.dtype_d)));
    LLMC_RT_RETURN_IF_ERROR(check_ref(g.scale_a, true, w + " scale_a", 4));
    LLMC_RT_RETURN_IF_ERROR(check_ref(g.scale_b, true, w + " scale_b", 4));
  }
  for (size_t i = 0; i < collectives.size(); ++i) {
    const CollectiveSpec& c = collectives[i];
    std::string w = absl::StrCat("collective ", i);
    if (static_cast<int>(c.op) < 0 || static_cast<int>(c.op) > 2 ||
        static_cast<int>(c.reduction) < 0 || static_cast<int>(c.reduction) > 4)
      return bad(w, " has op or reduction value ", static_cast<int>(c.op), ", ",
                 static_cast<int>(c.reduction));
    if (!ValidDType(c.dtype))
      return bad(w, " has dtype value ", static_cast<int>(c.dtype));
    if (c.count < 0) return bad(w, " has negative count ", c.count);
    // Per-rank sizes; ValidateCollectives checks the full ones for a
    // communicator of a given size.
    std::optional<int64_t> bytes = Mul(c.count, DTypeSize(c.dtype));
    if (!bytes) return bad(w, " of ", c.count, " elements overflows int64 bytes");
    LLMC_RT_RETURN_IF_ERROR(check_ref(c.send, false, w + " send", *bytes));
    LLMC_RT_RETURN_IF_ERROR(check_ref(c.recv, false, w + " recv", *bytes));
  }
  for (size_t i = 0; i < attentions.size(); ++i) {
    const AttentionSpec& a = attentions[i];
    std::string w = absl::StrCat("attention ", i);
    if (a.b <= 0 || a.sq <= 0 || a.skv <= 0 || a.hq <= 0 || a.hkv <= 0 ||
        a.d <= 0)
      return bad(w, " has a non-positive dimension (b, sq, skv, hq, hkv, d = ",
                 a.b, ", ", a.sq, ", ", a.skv, ", ", a.hq, ", ", a.hkv, ", ",
                 a.d, ")");
    if (a.hq % a.hkv != 0)
      return bad(w, " has ", a.hq, " query heads, not a multiple of its ",
                 a.hkv, " kv heads");
    if (!ValidDType(a.dtype))
      return bad(w, " has dtype value ", static_cast<int>(a.dtype));
    if (a.dtype != DType::bf16 && a.dtype != DType::f16)
      return bad(w, " has dtype ", DTypeName(a.dtype), " (expected bf16 or f16)");
    if (a.backward && !a.has_lse())
      return bad(w, " is a backward without the forward's lse");
    for (const AttentionOperand& op : AttentionOperands(a)) {
      if (op.bytes <= 0) return bad(w, " ", op.name, " overflows int64 bytes");
      LLMC_RT_RETURN_IF_ERROR(
          check_ref(op.ref, false, absl::StrCat(w, " ", op.name), op.bytes));
    }
  }
  if (num_prepare_launches < 0 ||
      num_prepare_launches > static_cast<int>(launches.size()))
    return bad("num_prepare_launches ", num_prepare_launches, " outside 0..",
               launches.size());
  for (size_t i = 0; i < launches.size(); ++i) {
    const Launch& l = launches[i];
    if (!IsUtf8(l.label))
      return bad("launch ", i, " has a label that is not UTF-8 text");
    std::string w = absl::StrCat("launch ", i, l.label.empty() ? "" : " (",
                                 l.label, l.label.empty() ? "" : ")");
    if (l.kind != Launch::Kernel && l.attention != -1)
      return bad(w, " is not a kernel launch but names attention ", l.attention);
    switch (l.kind) {
      case Launch::Kernel: {
        if (l.kernel < 0 || l.kernel >= static_cast<int>(kernels.size()))
          return bad(w, " refers to kernel ", l.kernel);
        if (l.attention < -1 || l.attention >= static_cast<int>(attentions.size()))
          return bad(w, " refers to attention ", l.attention, " of ",
                     attentions.size());
        const uint32_t grid_max[3] = {kMaxGridX, kMaxGridYZ, kMaxGridYZ};
        uint64_t threads = 1;
        for (int d = 0; d < 3; ++d) {
          const char* axis = "xyz" + d;
          if (l.grid[d] < 1 || l.grid[d] > grid_max[d])
            return bad(w, " has grid.", std::string(1, *axis), " = ", l.grid[d],
                       " (expected 1..", grid_max[d], ")");
          if (l.block[d] < 1 || l.block[d] > kMaxBlockDim[d])
            return bad(w, " has block.", std::string(1, *axis), " = ",
                       l.block[d], " (expected 1..", kMaxBlockDim[d], ")");
          threads *= l.block[d];
        }
        if (threads > kMaxBlockThreads)
          return bad(w, " has ", threads, " threads per block (at most ",
                     kMaxBlockThreads, ")");
        if (l.smem > kMaxDynamicSmem)
          return bad(w, " needs ", l.smem,
                     " bytes of dynamic shared memory (at most ",
                     kMaxDynamicSmem, ")");
        int64_t param_bytes = 0;
        for (size_t a = 0; a < l.args.size(); ++a) {
          const Arg& arg = l.args[a];
          std::string aw = absl::StrCat(w, " arg ", a);
          switch (arg.kind) {
            case Arg::BufferPtr:
              LLMC_RT_RETURN_IF_ERROR(
                  check_ref({arg.buffer, arg.byte_offset}, false, aw));
              param_bytes += 8;
              break;
            case Arg::I32:
              if (arg.i < std::numeric_limits<int32_t>::min() ||
                  arg.i > std::numeric_limits<int32_t>::max())
                return bad(aw, " is an i32 holding ", arg.i);
              param_bytes += 4;
              break;
            case Arg::I64: param_bytes += 8; break;
            case Arg::F32: param_bytes += 4; break;
            case Arg::Bytes:
              if (arg.bytes.empty()) return bad(aw, " is an empty by-value struct");
              param_bytes += static_cast<int64_t>(arg.bytes.size());
              break;
            default:
              return bad(aw, " has kind value ", static_cast<int>(arg.kind));
          }
          if (param_bytes > kMaxKernelParamBytes)
            return bad(w, " passes more than ", kMaxKernelParamBytes,
                       " bytes of kernel parameters");
        }
        break;
      }
      case Launch::Gemm:
        if (l.gemm < 0 || l.gemm >= static_cast<int>(gemms.size()))
          return bad(w, " refers to gemm ", l.gemm);
        break;
      case Launch::Collective:
        if (l.collective < 0 || l.collective >= static_cast<int>(collectives.size()))
          return bad(w, " refers to collective ", l.collective);
        break;
      case Launch::Copy:
        if (l.copy_bytes < 0)
          return bad(w, " copies ", l.copy_bytes, " bytes out of bounds");
        for (const auto& [ref, name] : {std::pair{&l.src, " src"}, {&l.dst, " dst"}})
          if (absl::Status st = check_ref(*ref, false, w + name, l.copy_bytes);
              !st.ok())
            return bad(w, " copies ", l.copy_bytes, " bytes out of bounds: ",
                       absl::StripPrefix(st.message(), "invalid executable: "));
        break;
      default:
        return bad(w, " has kind value ", static_cast<int>(l.kind));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateCollectives(const Executable& exe, int nranks) {
  if (nranks < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("a communicator of ", nranks, " ranks"));
  for (size_t i = 0; i < exe.collectives.size(); ++i) {
    const CollectiveSpec& c = exe.collectives[i];
    // AllGather receives, ReduceScatter sends, nranks times `count`.
    const BufferRef& full =
        c.op == CollectiveSpec::AllGather ? c.recv : c.send;
    if (c.op == CollectiveSpec::AllReduce) continue;
    std::optional<int64_t> need = Mul(c.count, DTypeSize(c.dtype));
    if (need) need = Mul(*need, nranks);
    if (full.buffer < 0 || full.buffer >= static_cast<int>(exe.buffers.size()))
      continue;  // Validate reports it
    const int64_t room = exe.buffers[full.buffer].bytes - full.offset;
    if (!need || *need > room)
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid executable: collective ", i, " (",
          c.op == CollectiveSpec::AllGather ? "all-gather" : "reduce-scatter",
          " of ", c.count, " ", DTypeName(c.dtype), " per rank) needs ",
          need ? absl::StrCat(*need) : std::string("more than 2^63"),
          " bytes over ", nranks, " ranks in buffer ", full.buffer, " but has ",
          room, " at offset ", full.offset));
  }
  return absl::OkStatus();
}

std::vector<AttentionOperand> AttentionOperands(const AttentionSpec& a) {
  auto bytes = [&](std::initializer_list<int64_t> dims) -> int64_t {
    std::optional<int64_t> n = 1;
    for (int64_t f : dims)
      if (n) n = Mul(*n, f);
    return n.value_or(0);
  };
  const int64_t el = DTypeSize(a.dtype);
  const int64_t qo = bytes({a.b, a.sq, a.hq, a.d, el}), kv = bytes({a.b, a.skv, a.hkv, a.d, el}),
                rows = bytes({a.b, a.hq, a.sq, 4});
  std::vector<AttentionOperand> ops = {{"q", a.q, qo}, {"k", a.k, kv}, {"v", a.v, kv},
                                       {"o", a.o, qo}};
  if (a.has_lse() || a.backward) ops.push_back({"lse", a.lse, rows});
  if (a.backward) {
    ops.push_back({"grad_output", a.grad_output, qo});
    ops.push_back({"grad_query", a.grad_query, qo});
    ops.push_back({"grad_key", a.grad_key, kv});
    ops.push_back({"grad_value", a.grad_value, kv});
    ops.push_back({"row_sum", a.row_sum, rows});
    ops.push_back({"dq_accum", a.dq_accum, bytes({a.b, a.hq, a.sq, a.d, 4})});
  }
  return ops;
}

}  // namespace llmc::rt
