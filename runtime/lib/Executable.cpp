#include "llmc/runtime/Executable.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <stdexcept>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "llmc/runtime/Hash.h"
#include "llmc/runtime/FileIO.h"
#include "llmc/runtime/KernelCompiler.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {

using json = nlohmann::json;

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
// JSON mapping. Readers throw std::runtime_error / json exceptions on bad
// input; DeserializeExecutable turns them into DataLoss.
// ---------------------------------------------------------------------------
namespace {

void Fail(const std::string& msg) { throw std::runtime_error(msg); }

// Integers are read strictly: nlohmann's get<int>() would wrap 2^32 to 0,
// truncate 1.5 to 1 and read true as 1, turning a forged value into a
// plausible one that Validate cannot tell apart.
template <typename T>
T IntValue(const json& v, const std::string& what) {
  constexpr __int128 lo = std::numeric_limits<T>::min();
  constexpr __int128 hi = std::numeric_limits<T>::max();
  __int128 x = 0;
  if (v.is_number_unsigned()) x = v.get<uint64_t>();
  else if (v.is_number_integer()) x = v.get<int64_t>();
  else Fail(absl::StrCat(what, " is ", v.dump(), ", not an integer"));
  if (x < lo || x > hi)
    Fail(absl::StrCat(what, " is ", v.dump(), " (expected ",
                      static_cast<int64_t>(lo), "..", static_cast<uint64_t>(hi),
                      ")"));
  return static_cast<T>(x);
}
template <typename T>
T IntAt(const json& j, const char* key) {
  return IntValue<T>(j.at(key), absl::StrCat("field '", key, "'"));
}
template <typename T>
T IntAtOr(const json& j, const char* key, T fallback) {
  return j.contains(key) ? IntAt<T>(j, key) : fallback;
}
template <typename T>
std::vector<T> IntListAt(const json& j, const char* key) {
  const json& a = j.at(key);
  if (!a.is_array()) Fail(absl::StrCat("field '", key, "' is not a list"));
  std::vector<T> out;
  for (size_t i = 0; i < a.size(); ++i)
    out.push_back(IntValue<T>(a[i], absl::StrCat("field '", key, "'[", i, "]")));
  return out;
}
float FloatAt(const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_number()) Fail(absl::StrCat("field '", key, "' is not a number"));
  double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max())
    Fail(absl::StrCat("field '", key, "' is ", v.dump(), ", not a finite f32"));
  return static_cast<float>(d);
}
bool BoolAt(const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_boolean()) Fail(absl::StrCat("field '", key, "' is not a boolean"));
  return v.get<bool>();
}

template <typename E>
E EnumAt(const json& j, const char* key, int count) {
  int v = IntAt<int>(j, key);
  if (v < 0 || v >= count)
    Fail(absl::StrCat("field '", key, "' has out-of-range value ", v));
  return static_cast<E>(v);
}

DType DTypeAt(const json& j, const char* key) {
  auto t = DTypeFromName(j.at(key).get<std::string>());
  if (!t.ok()) Fail(std::string(t.status().message()));
  return *t;
}

std::string Bytes(const json& j, const char* key) {
  std::string out;
  if (!absl::Base64Unescape(j.at(key).get<std::string>(), &out))
    Fail(absl::StrCat("field '", key, "' is not valid base64"));
  return out;
}

json Ref(const BufferRef& r) { return json::array({r.buffer, r.offset}); }
BufferRef RefAt(const json& j, const char* key) {
  const json& a = j.at(key);
  if (!a.is_array() || a.size() != 2) Fail(absl::StrCat("bad ref '", key, "'"));
  return {IntValue<int>(a[0], absl::StrCat("buffer of '", key, "'")),
          IntValue<int64_t>(a[1], absl::StrCat("offset of '", key, "'"))};
}

json ToJson(const TensorSig& t) {
  return {{"name", t.name}, {"dtype", DTypeName(t.dtype)}, {"shape", t.shape},
          {"alias_input", t.alias_input}, {"parameter", t.parameter}};
}
TensorSig SigFrom(const json& j) {
  TensorSig t;
  t.name = j.at("name").get<std::string>();
  t.dtype = DTypeAt(j, "dtype");
  t.shape = IntListAt<int64_t>(j, "shape");
  t.alias_input = IntAtOr<int>(j, "alias_input", -1);
  t.parameter = j.contains("parameter") && BoolAt(j, "parameter");
  return t;
}

json ToJson(const Buffer& b) {
  return {{"id", b.id},
          {"kind", static_cast<int>(b.kind)},
          {"bytes", b.bytes},
          {"arena_offset", b.arena_offset},
          {"io_index", b.io_index},
          {"constant_data", absl::Base64Escape(b.constant_data)}};
}
Buffer BufferFrom(const json& j) {
  Buffer b;
  b.id = IntAt<int>(j, "id");
  b.kind = EnumAt<Buffer::Kind>(j, "kind", 5);
  b.bytes = IntAt<int64_t>(j, "bytes");
  b.arena_offset = IntAt<int64_t>(j, "arena_offset");
  b.io_index = IntAt<int>(j, "io_index");
  b.constant_data = Bytes(j, "constant_data");
  return b;
}

json ToJson(const KernelSpec& k) {
  return {{"name", k.name},       {"source", k.source},
          {"arch", k.arch},       {"cubin", absl::Base64Escape(k.cubin)},
          {"options", k.options}, {"headers", k.headers}};
}
KernelSpec KernelFrom(const json& j) {
  KernelSpec k;
  k.name = j.at("name").get<std::string>();
  k.source = j.at("source").get<std::string>();
  k.arch = j.at("arch").get<std::string>();
  k.cubin = Bytes(j, "cubin");
  k.options = j.at("options").get<std::vector<std::string>>();
  k.headers = j.at("headers").get<std::map<std::string, std::string>>();
  return k;
}

json ToJson(const GemmSpec& g) {
  return {{"mnk", {g.m, g.n, g.k}},
          {"batch", g.batch},
          {"strides", {g.stride_a, g.stride_b, g.stride_c, g.stride_d}},
          {"trans", {g.transa, g.transb}},
          {"ld", {g.lda, g.ldb, g.ldc, g.ldd}},
          {"dtype_a", DTypeName(g.dtype_a)},
          {"dtype_b", DTypeName(g.dtype_b)},
          {"dtype_c", DTypeName(g.dtype_c)},
          {"dtype_d", DTypeName(g.dtype_d)},
          {"compute", DTypeName(g.compute)},
          {"alpha", g.alpha},
          {"beta", g.beta},
          {"epilogue", static_cast<int>(g.epilogue)},
          {"bias", Ref(g.bias)},
          {"a", Ref(g.a)},
          {"b", Ref(g.b)},
          {"c", Ref(g.c)},
          {"d", Ref(g.d)},
          {"scale_a", Ref(g.scale_a)},
          {"scale_b", Ref(g.scale_b)}};
}
GemmSpec GemmFrom(const json& j) {
  GemmSpec g;
  auto mnk = IntListAt<int64_t>(j, "mnk");
  auto strides = IntListAt<int64_t>(j, "strides");
  auto trans = j.at("trans").get<std::vector<bool>>();
  auto ld = IntListAt<int64_t>(j, "ld");
  if (mnk.size() != 3 || strides.size() != 4 || trans.size() != 2 ||
      ld.size() != 4)
    Fail("gemm has malformed mnk/strides/trans/ld");
  g.m = mnk[0], g.n = mnk[1], g.k = mnk[2];
  g.batch = IntAt<int64_t>(j, "batch");
  g.stride_a = strides[0], g.stride_b = strides[1], g.stride_c = strides[2],
  g.stride_d = strides[3];
  g.transa = trans[0], g.transb = trans[1];
  g.lda = ld[0], g.ldb = ld[1], g.ldc = ld[2], g.ldd = ld[3];
  g.dtype_a = DTypeAt(j, "dtype_a");
  g.dtype_b = DTypeAt(j, "dtype_b");
  g.dtype_c = DTypeAt(j, "dtype_c");
  g.dtype_d = DTypeAt(j, "dtype_d");
  g.compute = DTypeAt(j, "compute");
  g.alpha = FloatAt(j, "alpha");
  g.beta = FloatAt(j, "beta");
  g.epilogue = EnumAt<Epilogue>(j, "epilogue", 6);
  g.bias = RefAt(j, "bias");
  g.a = RefAt(j, "a");
  g.b = RefAt(j, "b");
  g.c = RefAt(j, "c");
  g.d = RefAt(j, "d");
  g.scale_a = RefAt(j, "scale_a");
  g.scale_b = RefAt(j, "scale_b");
  return g;
}

json ToJson(const CollectiveSpec& c) {
  return {{"op", static_cast<int>(c.op)},
          {"reduction", static_cast<int>(c.reduction)},
          {"dtype", DTypeName(c.dtype)},
          {"count", c.count},
          {"send", Ref(c.send)},
          {"recv", Ref(c.recv)}};
}
CollectiveSpec CollectiveFrom(const json& j) {
  CollectiveSpec c;
  c.op = EnumAt<CollectiveSpec::Op>(j, "op", 3);
  c.reduction = EnumAt<CollectiveSpec::Reduction>(j, "reduction", 5);
  c.dtype = DTypeAt(j, "dtype");
  c.count = IntAt<int64_t>(j, "count");
  c.send = RefAt(j, "send");
  c.recv = RefAt(j, "recv");
  return c;
}

json ToJson(const AttentionSpec& a) {
  return {{"shape", {a.b, a.sq, a.skv, a.hq, a.hkv, a.d}},
          {"causal", a.causal},
          {"scale", a.scale},
          {"dtype", DTypeName(a.dtype)},
          {"q", Ref(a.q)},
          {"k", Ref(a.k)},
          {"v", Ref(a.v)},
          {"o", Ref(a.o)}};
}
AttentionSpec AttentionFrom(const json& j) {
  AttentionSpec a;
  auto shape = IntListAt<int64_t>(j, "shape");
  if (shape.size() != 6) Fail("attention shape is not [b, sq, skv, hq, hkv, d]");
  a.b = shape[0], a.sq = shape[1], a.skv = shape[2], a.hq = shape[3],
  a.hkv = shape[4], a.d = shape[5];
  a.causal = BoolAt(j, "causal");
  a.scale = FloatAt(j, "scale");
  a.dtype = DTypeAt(j, "dtype");
  a.q = RefAt(j, "q");
  a.k = RefAt(j, "k");
  a.v = RefAt(j, "v");
  a.o = RefAt(j, "o");
  return a;
}

json ToJson(const Arg& a) {
  switch (a.kind) {
    case Arg::BufferPtr: return {{"kind", 0}, {"ref", {a.buffer, a.byte_offset}}};
    case Arg::I32: return {{"kind", 1}, {"i", a.i}};
    case Arg::I64: return {{"kind", 2}, {"i", a.i}};
    case Arg::F32: return {{"kind", 3}, {"f", a.f}};
    case Arg::Bytes: return {{"kind", 4}, {"bytes", absl::Base64Escape(a.bytes)}};
  }
  return {};
}
Arg ArgFrom(const json& j) {
  Arg a;
  a.kind = EnumAt<Arg::Kind>(j, "kind", 5);
  if (a.kind == Arg::Bytes) {
    a.bytes = Bytes(j, "bytes");
  } else if (a.kind == Arg::BufferPtr) {
    BufferRef r = RefAt(j, "ref");
    a.buffer = r.buffer;
    a.byte_offset = r.offset;
  } else if (a.kind == Arg::F32) {
    a.f = FloatAt(j, "f");
  } else {
    a.i = IntAt<int64_t>(j, "i");
  }
  return a;
}

json ToJson(const Launch& l) {
  json args = json::array();
  for (const Arg& a : l.args) args.push_back(ToJson(a));
  json j = {{"kind", static_cast<int>(l.kind)},
          {"kernel", l.kernel},
          {"grid", {l.grid[0], l.grid[1], l.grid[2]}},
          {"block", {l.block[0], l.block[1], l.block[2]}},
          {"smem", l.smem},
          {"args", args},
          {"gemm", l.gemm},
          {"collective", l.collective},
          {"src", Ref(l.src)},
          {"dst", Ref(l.dst)},
          {"copy_bytes", l.copy_bytes},
          {"label", l.label}};
  if (l.attention >= 0) j["attention"] = l.attention;
  return j;
}
Launch LaunchFrom(const json& j) {
  Launch l;
  l.kind = EnumAt<Launch::Kind>(j, "kind", 4);
  l.kernel = IntAt<int>(j, "kernel");
  auto grid = IntListAt<uint32_t>(j, "grid");
  auto block = IntListAt<uint32_t>(j, "block");
  if (grid.size() != 3 || block.size() != 3) Fail("launch grid/block not 3-D");
  for (int i = 0; i < 3; ++i) l.grid[i] = grid[i], l.block[i] = block[i];
  l.smem = IntAt<uint32_t>(j, "smem");
  for (const json& a : j.at("args")) l.args.push_back(ArgFrom(a));
  l.gemm = IntAt<int>(j, "gemm");
  l.collective = IntAt<int>(j, "collective");
  l.src = RefAt(j, "src");
  l.dst = RefAt(j, "dst");
  l.copy_bytes = IntAt<int64_t>(j, "copy_bytes");
  l.label = j.at("label").get<std::string>();
  l.attention = IntAtOr<int>(j, "attention", -1);
  return l;
}

template <typename T, typename F>
std::vector<T> ListFrom(const json& j, const char* key, F from) {
  std::vector<T> out;
  const json& a = j.at(key);
  if (!a.is_array()) Fail(absl::StrCat("'", key, "' is not a list"));
  for (const json& e : a) out.push_back(from(e));
  return out;
}
template <typename T>
json ListTo(const std::vector<T>& v) {
  json out = json::array();
  for (const T& e : v) out.push_back(ToJson(e));
  return out;
}

}  // namespace

std::string SerializeExecutable(const Executable& exe) {
  json j = {{"format_version", exe.format_version},
            {"inputs", ListTo(exe.inputs)},
            {"outputs", ListTo(exe.outputs)},
            {"buffers", ListTo(exe.buffers)},
            {"kernels", ListTo(exe.kernels)},
            {"gemms", ListTo(exe.gemms)},
            {"collectives", ListTo(exe.collectives)},
            {"launches", ListTo(exe.launches)},
            {"num_prepare_launches", exe.num_prepare_launches},
            {"arena_bytes", exe.arena_bytes},
            {"symbol_bindings", exe.symbol_bindings}};
  if (!exe.attentions.empty()) j["attentions"] = ListTo(exe.attentions);
  std::string payload = j.dump();
  return absl::StrCat("LLMCX ", exe.format_version, " ", payload.size(), " ",
                      Sha256::HexDigest(payload), "\n", payload);
}

absl::StatusOr<Executable> DeserializeExecutable(const std::string& data) {
  if (data.compare(0, 6, "LLMCX ") != 0)
    return absl::InvalidArgumentError(
        "not an llmc executable (missing 'LLMCX' magic)");
  size_t eol = data.find('\n');
  if (eol == std::string::npos || eol > 200)
    return absl::DataLossError("llmc executable header is truncated");
  std::vector<std::string> fields =
      absl::StrSplit(data.substr(6, eol - 6), ' ');
  int version = 0;
  uint64_t size = 0;
  if (fields.size() != 3 || !absl::SimpleAtoi(fields[0], &version) ||
      !absl::SimpleAtoi(fields[1], &size))
    return absl::DataLossError("llmc executable header is malformed");
  if (version != Executable::kFormatVersion)
    return absl::InvalidArgumentError(absl::StrCat(
        "llmc executable format version ", version,
        " is not supported by this runtime (which reads version ",
        Executable::kFormatVersion, "); recompile the model"));
  std::string payload = data.substr(eol + 1);
  if (payload.size() != size)
    return absl::DataLossError(absl::StrCat(
        "llmc executable is truncated or padded: payload has ", payload.size(),
        " bytes, header says ", size));
  if (Sha256::HexDigest(payload) != fields[2])
    return absl::DataLossError("llmc executable is corrupt (checksum mismatch)");
  try {
    json j = json::parse(payload);
    Executable exe;
    exe.format_version = IntAt<int>(j, "format_version");
    exe.inputs = ListFrom<TensorSig>(j, "inputs", SigFrom);
    exe.outputs = ListFrom<TensorSig>(j, "outputs", SigFrom);
    exe.buffers = ListFrom<Buffer>(j, "buffers", BufferFrom);
    exe.kernels = ListFrom<KernelSpec>(j, "kernels", KernelFrom);
    exe.gemms = ListFrom<GemmSpec>(j, "gemms", GemmFrom);
    exe.collectives = ListFrom<CollectiveSpec>(j, "collectives", CollectiveFrom);
    if (j.contains("attentions"))
      exe.attentions = ListFrom<AttentionSpec>(j, "attentions", AttentionFrom);
    exe.launches = ListFrom<Launch>(j, "launches", LaunchFrom);
    exe.num_prepare_launches = IntAt<int>(j, "num_prepare_launches");
    exe.arena_bytes = IntAt<int64_t>(j, "arena_bytes");
    const json& bindings = j.at("symbol_bindings");
    if (!bindings.is_object()) Fail("'symbol_bindings' is not an object");
    for (const auto& [name, value] : bindings.items())
      exe.symbol_bindings[name] =
          IntValue<int64_t>(value, absl::StrCat("binding of '", name, "'"));
    // A well-formed file can still describe an impossible plan (an index out
    // of range, a negative dimension): reject it at load, not at run.
    if (absl::Status st = exe.Validate(); !st.ok())
      return absl::DataLossError(absl::StrCat(
          "llmc executable is inconsistent: ", st.message()));
    return exe;
  } catch (const std::exception& e) {
    return absl::DataLossError(
        absl::StrCat("llmc executable payload is malformed: ", e.what()));
  }
}

absl::Status SaveExecutable(const Executable& exe, const std::string& path) {
  // Never write a file that LoadExecutable would refuse.
  if (absl::Status st = exe.Validate(); !st.ok())
    return Annotate(st, absl::StrCat("not writing ", path));
  return AtomicWriteFile(path, SerializeExecutable(exe));
}

absl::StatusOr<Executable> LoadExecutable(const std::string& path) {
  ReadOptions ro;
  ro.what = "llmc executable";
  LLMC_RT_ASSIGN_OR_RETURN(std::string data, ReadFile(path, ro));
  auto exe = DeserializeExecutable(data);
  if (!exe.ok()) return Annotate(exe.status(), path);
  return exe;
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
      return bad(w, " has arch '", k.arch,
                 "' (expected sm_<NN>, compute_<NN>, optionally with an 'a' or 'f' suffix)");
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
    auto bytes = [&](int64_t s, int64_t h) -> std::optional<int64_t> {
      std::optional<int64_t> n = Mul(a.b, s);
      for (int64_t f : {h, a.d, DTypeSize(a.dtype)})
        if (n) n = Mul(*n, f);
      return n;
    };
    std::optional<int64_t> qo = bytes(a.sq, a.hq), kv = bytes(a.skv, a.hkv);
    if (!qo || !kv) return bad(w, " overflows int64 bytes");
    const std::pair<const BufferRef*, int64_t> refs[] = {
        {&a.q, *qo}, {&a.k, *kv}, {&a.v, *kv}, {&a.o, *qo}};
    const char* names[] = {" q", " k", " v", " o"};
    for (int r = 0; r < 4; ++r)
      LLMC_RT_RETURN_IF_ERROR(
          check_ref(*refs[r].first, false, w + names[r], refs[r].second));
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

}  // namespace llmc::rt
