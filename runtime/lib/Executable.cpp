#include "llmc/runtime/Executable.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "llmc/runtime/Hash.h"
#include "llmc/runtime/FileIO.h"
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

template <typename E>
E EnumAt(const json& j, const char* key, int count) {
  int v = j.at(key).get<int>();
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
  return {a[0].get<int>(), a[1].get<int64_t>()};
}

json ToJson(const TensorSig& t) {
  return {{"name", t.name}, {"dtype", DTypeName(t.dtype)}, {"shape", t.shape},
          {"alias_input", t.alias_input}, {"parameter", t.parameter}};
}
TensorSig SigFrom(const json& j) {
  TensorSig t;
  t.name = j.at("name").get<std::string>();
  t.dtype = DTypeAt(j, "dtype");
  t.shape = j.at("shape").get<std::vector<int64_t>>();
  t.alias_input = j.value("alias_input", -1);
  t.parameter = j.value("parameter", false);
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
  b.id = j.at("id").get<int>();
  b.kind = EnumAt<Buffer::Kind>(j, "kind", 5);
  b.bytes = j.at("bytes").get<int64_t>();
  b.arena_offset = j.at("arena_offset").get<int64_t>();
  b.io_index = j.at("io_index").get<int>();
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
  auto mnk = j.at("mnk").get<std::vector<int64_t>>();
  auto strides = j.at("strides").get<std::vector<int64_t>>();
  auto trans = j.at("trans").get<std::vector<bool>>();
  auto ld = j.at("ld").get<std::vector<int64_t>>();
  if (mnk.size() != 3 || strides.size() != 4 || trans.size() != 2 ||
      ld.size() != 4)
    Fail("gemm has malformed mnk/strides/trans/ld");
  g.m = mnk[0], g.n = mnk[1], g.k = mnk[2];
  g.batch = j.at("batch").get<int64_t>();
  g.stride_a = strides[0], g.stride_b = strides[1], g.stride_c = strides[2],
  g.stride_d = strides[3];
  g.transa = trans[0], g.transb = trans[1];
  g.lda = ld[0], g.ldb = ld[1], g.ldc = ld[2], g.ldd = ld[3];
  g.dtype_a = DTypeAt(j, "dtype_a");
  g.dtype_b = DTypeAt(j, "dtype_b");
  g.dtype_c = DTypeAt(j, "dtype_c");
  g.dtype_d = DTypeAt(j, "dtype_d");
  g.compute = DTypeAt(j, "compute");
  g.alpha = j.at("alpha").get<float>();
  g.beta = j.at("beta").get<float>();
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
  c.count = j.at("count").get<int64_t>();
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
  auto shape = j.at("shape").get<std::vector<int64_t>>();
  if (shape.size() != 6) Fail("attention shape is not [b, sq, skv, hq, hkv, d]");
  a.b = shape[0], a.sq = shape[1], a.skv = shape[2], a.hq = shape[3],
  a.hkv = shape[4], a.d = shape[5];
  a.causal = j.at("causal").get<bool>();
  a.scale = j.at("scale").get<float>();
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
    a.f = j.at("f").get<float>();
  } else {
    a.i = j.at("i").get<int64_t>();
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
  l.kernel = j.at("kernel").get<int>();
  auto grid = j.at("grid").get<std::vector<uint32_t>>();
  auto block = j.at("block").get<std::vector<uint32_t>>();
  if (grid.size() != 3 || block.size() != 3) Fail("launch grid/block not 3-D");
  for (int i = 0; i < 3; ++i) l.grid[i] = grid[i], l.block[i] = block[i];
  l.smem = j.at("smem").get<uint32_t>();
  for (const json& a : j.at("args")) l.args.push_back(ArgFrom(a));
  l.gemm = j.at("gemm").get<int>();
  l.collective = j.at("collective").get<int>();
  l.src = RefAt(j, "src");
  l.dst = RefAt(j, "dst");
  l.copy_bytes = j.at("copy_bytes").get<int64_t>();
  l.label = j.at("label").get<std::string>();
  l.attention = j.value("attention", -1);
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
    exe.format_version = j.at("format_version").get<int>();
    exe.inputs = ListFrom<TensorSig>(j, "inputs", SigFrom);
    exe.outputs = ListFrom<TensorSig>(j, "outputs", SigFrom);
    exe.buffers = ListFrom<Buffer>(j, "buffers", BufferFrom);
    exe.kernels = ListFrom<KernelSpec>(j, "kernels", KernelFrom);
    exe.gemms = ListFrom<GemmSpec>(j, "gemms", GemmFrom);
    exe.collectives = ListFrom<CollectiveSpec>(j, "collectives", CollectiveFrom);
    if (j.contains("attentions"))
      exe.attentions = ListFrom<AttentionSpec>(j, "attentions", AttentionFrom);
    exe.launches = ListFrom<Launch>(j, "launches", LaunchFrom);
    exe.num_prepare_launches = j.at("num_prepare_launches").get<int>();
    exe.arena_bytes = j.at("arena_bytes").get<int64_t>();
    exe.symbol_bindings =
        j.at("symbol_bindings").get<std::map<std::string, int64_t>>();
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
// ---------------------------------------------------------------------------
absl::Status Executable::Validate() const {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("invalid executable: ", parts...));
  };
  for (const auto* sigs : {&inputs, &outputs})
    for (const TensorSig& t : *sigs)
      for (int64_t d : t.shape)
        if (d < 0 || d > (int64_t(1) << 40))
          return bad(sigs == &inputs ? "input '" : "output '", t.name,
                     "' has dimension ", d, " (expected 0..2^40)");
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
        break;
      }
      case Buffer::Arena:
        if (b.arena_offset < 0 || b.arena_offset + b.bytes > arena_bytes)
          return bad("buffer ", i, " [", b.arena_offset, ", +", b.bytes,
                     ") exceeds arena of ", arena_bytes, " bytes");
        break;
      case Buffer::Persistent:
        break;
      case Buffer::Constant:
        if (static_cast<int64_t>(b.constant_data.size()) != b.bytes)
          return bad("constant buffer ", i, " holds ", b.constant_data.size(),
                     " bytes, declares ", b.bytes);
        break;
    }
  }
  auto check_ref = [&](const BufferRef& r, bool optional,
                       const std::string& what) -> absl::Status {
    if (r.buffer == -1 && optional) return absl::OkStatus();
    if (r.buffer < 0 || r.buffer >= static_cast<int>(buffers.size()))
      return bad(what, " refers to buffer ", r.buffer, " of ", buffers.size());
    if (r.offset < 0 || r.offset > buffers[r.buffer].bytes)
      return bad(what, " offset ", r.offset, " outside buffer ", r.buffer);
    return absl::OkStatus();
  };
  for (size_t i = 0; i < gemms.size(); ++i) {
    const GemmSpec& g = gemms[i];
    std::string w = absl::StrCat("gemm ", i);
    if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0)
      return bad(w, " has non-positive m/n/k/batch");
    LLMC_RT_RETURN_IF_ERROR(check_ref(g.a, false, w + " A"));
    LLMC_RT_RETURN_IF_ERROR(check_ref(g.b, false, w + " B"));
    LLMC_RT_RETURN_IF_ERROR(check_ref(g.c, true, w + " C"));
    LLMC_RT_RETURN_IF_ERROR(check_ref(g.d, false, w + " D"));
    LLMC_RT_RETURN_IF_ERROR(check_ref(g.bias, true, w + " bias"));
    LLMC_RT_RETURN_IF_ERROR(check_ref(g.scale_a, true, w + " scale_a"));
    LLMC_RT_RETURN_IF_ERROR(check_ref(g.scale_b, true, w + " scale_b"));
    bool needs_bias = g.epilogue == Epilogue::bias ||
                      g.epilogue == Epilogue::relu_bias ||
                      g.epilogue == Epilogue::gelu_bias;
    if (needs_bias && g.bias.buffer < 0) return bad(w, " epilogue needs a bias");
  }
  for (size_t i = 0; i < collectives.size(); ++i) {
    std::string w = absl::StrCat("collective ", i);
    LLMC_RT_RETURN_IF_ERROR(check_ref(collectives[i].send, false, w + " send"));
    LLMC_RT_RETURN_IF_ERROR(check_ref(collectives[i].recv, false, w + " recv"));
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
    if (a.dtype != DType::bf16 && a.dtype != DType::f16)
      return bad(w, " has dtype ", DTypeName(a.dtype), " (expected bf16 or f16)");
    int64_t el = DTypeSize(a.dtype);
    const std::pair<const BufferRef*, int64_t> refs[] = {
        {&a.q, a.b * a.sq * a.hq * a.d * el},
        {&a.k, a.b * a.skv * a.hkv * a.d * el},
        {&a.v, a.b * a.skv * a.hkv * a.d * el},
        {&a.o, a.b * a.sq * a.hq * a.d * el}};
    const char* names[] = {" q", " k", " v", " o"};
    for (int r = 0; r < 4; ++r) {
      LLMC_RT_RETURN_IF_ERROR(check_ref(*refs[r].first, false, w + names[r]));
      if (refs[r].first->offset + refs[r].second >
          buffers[refs[r].first->buffer].bytes)
        return bad(w, names[r], " needs ", refs[r].second, " bytes at offset ",
                   refs[r].first->offset, " of buffer ", refs[r].first->buffer,
                   " (", buffers[refs[r].first->buffer].bytes, " bytes)");
    }
  }
  if (num_prepare_launches < 0 ||
      num_prepare_launches > static_cast<int>(launches.size()))
    return bad("num_prepare_launches ", num_prepare_launches, " outside 0..",
               launches.size());
  for (size_t i = 0; i < launches.size(); ++i) {
    const Launch& l = launches[i];
    std::string w = absl::StrCat("launch ", i, l.label.empty() ? "" : " (",
                                 l.label, l.label.empty() ? "" : ")");
    if (l.kind != Launch::Kernel && l.attention != -1)
      return bad(w, " is not a kernel launch but names attention ", l.attention);
    switch (l.kind) {
      case Launch::Kernel:
        if (l.kernel < 0 || l.kernel >= static_cast<int>(kernels.size()))
          return bad(w, " refers to kernel ", l.kernel);
        if (l.attention < -1 || l.attention >= static_cast<int>(attentions.size()))
          return bad(w, " refers to attention ", l.attention, " of ",
                     attentions.size());
        for (size_t a = 0; a < l.args.size(); ++a)
          if (l.args[a].kind == Arg::BufferPtr)
            LLMC_RT_RETURN_IF_ERROR(check_ref({l.args[a].buffer, l.args[a].byte_offset},
                                              false, absl::StrCat(w, " arg ", a)));
        break;
      case Launch::Gemm:
        if (l.gemm < 0 || l.gemm >= static_cast<int>(gemms.size()))
          return bad(w, " refers to gemm ", l.gemm);
        break;
      case Launch::Collective:
        if (l.collective < 0 || l.collective >= static_cast<int>(collectives.size()))
          return bad(w, " refers to collective ", l.collective);
        break;
      case Launch::Copy:
        LLMC_RT_RETURN_IF_ERROR(check_ref(l.src, false, w + " src"));
        LLMC_RT_RETURN_IF_ERROR(check_ref(l.dst, false, w + " dst"));
        if (l.copy_bytes < 0 ||
            l.src.offset + l.copy_bytes > buffers[l.src.buffer].bytes ||
            l.dst.offset + l.copy_bytes > buffers[l.dst.buffer].bytes)
          return bad(w, " copies ", l.copy_bytes, " bytes out of bounds");
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace llmc::rt
