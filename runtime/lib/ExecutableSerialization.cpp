// Executable serialization: the versioned "LLMCX" file (header line, JSON
// payload, base64 binaries; format in Executable.h), Save and Load.
#include "llmc/runtime/Executable.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "llmc/runtime/FileIO.h"
#include "llmc/runtime/Hash.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {

using json = nlohmann::json;

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
  json j = {{"name", k.name},       {"source", k.source},
            {"arch", k.arch},       {"cubin", absl::Base64Escape(k.cubin)},
            {"options", k.options}, {"headers", k.headers}};
  if (k.grid_dependency) j["grid_dependency"] = true;
  return j;
}
KernelSpec KernelFrom(const json& j) {
  KernelSpec k;
  k.name = j.at("name").get<std::string>();
  k.source = j.at("source").get<std::string>();
  k.arch = j.at("arch").get<std::string>();
  k.cubin = Bytes(j, "cubin");
  k.options = j.at("options").get<std::vector<std::string>>();
  k.headers = j.at("headers").get<std::map<std::string, std::string>>();
  k.grid_dependency = j.contains("grid_dependency") && BoolAt(j, "grid_dependency");
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
  json j = {{"shape", {a.b, a.sq, a.skv, a.hq, a.hkv, a.d}},
          {"causal", a.causal},
          {"scale", a.scale},
          {"dtype", DTypeName(a.dtype)},
          {"q", Ref(a.q)},
          {"k", Ref(a.k)},
          {"v", Ref(a.v)},
          {"o", Ref(a.o)}};
  if (a.has_lse()) j["lse"] = Ref(a.lse);
  if (a.backward) {
    j["backward"] = true;
    j["grad_output"] = Ref(a.grad_output);
    j["grad_query"] = Ref(a.grad_query);
    j["grad_key"] = Ref(a.grad_key);
    j["grad_value"] = Ref(a.grad_value);
    j["row_sum"] = Ref(a.row_sum);
    j["dq_accum"] = Ref(a.dq_accum);
  }
  return j;
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
  if (j.contains("lse")) a.lse = RefAt(j, "lse");
  a.backward = j.contains("backward") && BoolAt(j, "backward");
  if (a.backward) {
    a.grad_output = RefAt(j, "grad_output");
    a.grad_query = RefAt(j, "grad_query");
    a.grad_key = RefAt(j, "grad_key");
    a.grad_value = RefAt(j, "grad_value");
    a.row_sum = RefAt(j, "row_sum");
    a.dq_accum = RefAt(j, "dq_accum");
  }
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
  if (!exe.producer.empty()) j["producer"] = exe.producer;
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
    if (j.contains("producer")) {
      if (!j.at("producer").is_string()) Fail("field 'producer' is not a string");
      exe.producer = j.at("producer").get<std::string>();
    }
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

}  // namespace llmc::rt
