// rt::DescribeExecutable: the canonical text form of an Executable (see
// ExecutableDump.h).
#include "llmc/runtime/ExecutableDump.h"

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "llmc/runtime/Hash.h"

namespace llmc::rt {
namespace {

/// Exact and round-trippable: 9 significant digits identify a float.
std::string Float(float f) { return absl::StrFormat("%.9g", f); }

std::string Quoted(const std::string& s) {
  return absl::StrCat("\"", absl::CEscape(s), "\"");
}

std::string Dims(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

std::string Dim3(const uint32_t (&v)[3]) {
  return absl::StrCat("[", v[0], ",", v[1], ",", v[2], "]");
}

/// "b<buffer>+<offset>", or "none" for the empty reference.
std::string Ref(int buffer, int64_t offset) {
  if (buffer < 0 && offset == 0) return "none";
  return absl::StrCat("b", buffer, "+", offset);
}
std::string Ref(const BufferRef& r) { return Ref(r.buffer, r.offset); }

/// Length and SHA-256 of `data`: "<bytes>:<sha256 hex>".
std::string Digest(const std::string& data) {
  return absl::StrCat(data.size(), ":", Sha256::HexDigest(data));
}

std::string Name(DType t) {
  switch (t) {
    case DType::f32: case DType::f16: case DType::bf16: case DType::f8e4m3:
    case DType::f8e5m2: case DType::i1: case DType::i8: case DType::i32:
    case DType::i64:
      return DTypeName(t);
  }
  return absl::StrCat("dtype?", static_cast<int>(t));
}

std::string Name(Buffer::Kind k) {
  switch (k) {
    case Buffer::Input: return "input";
    case Buffer::Output: return "output";
    case Buffer::Arena: return "arena";
    case Buffer::Constant: return "constant";
    case Buffer::Persistent: return "persistent";
  }
  return absl::StrCat("kind?", static_cast<int>(k));
}

std::string Name(Epilogue e) {
  switch (e) {
    case Epilogue::none: return "none";
    case Epilogue::bias: return "bias";
    case Epilogue::relu: return "relu";
    case Epilogue::gelu: return "gelu";
    case Epilogue::relu_bias: return "relu_bias";
    case Epilogue::gelu_bias: return "gelu_bias";
  }
  return absl::StrCat("epilogue?", static_cast<int>(e));
}

std::string Name(CollectiveSpec::Op op) {
  switch (op) {
    case CollectiveSpec::AllReduce: return "all_reduce";
    case CollectiveSpec::AllGather: return "all_gather";
    case CollectiveSpec::ReduceScatter: return "reduce_scatter";
  }
  return absl::StrCat("op?", static_cast<int>(op));
}

std::string Name(CollectiveSpec::Reduction r) {
  switch (r) {
    case CollectiveSpec::Sum: return "sum";
    case CollectiveSpec::Prod: return "prod";
    case CollectiveSpec::Max: return "max";
    case CollectiveSpec::Min: return "min";
    case CollectiveSpec::Avg: return "avg";
  }
  return absl::StrCat("reduction?", static_cast<int>(r));
}

std::string Name(Launch::Kind k) {
  switch (k) {
    case Launch::Kernel: return "kernel";
    case Launch::Gemm: return "gemm";
    case Launch::Collective: return "collective";
    case Launch::Copy: return "copy";
  }
  return absl::StrCat("kind?", static_cast<int>(k));
}

/// An argument as the kernel receives it; by-value structs (whose fields
/// are 64-bit in every llmc kernel) as int64 words when their size allows.
std::string ArgText(const Arg& a) {
  switch (a.kind) {
    case Arg::BufferPtr: return Ref(a.buffer, a.byte_offset);
    case Arg::I32: return absl::StrCat("i32:", a.i);
    case Arg::I64: return absl::StrCat("i64:", a.i);
    case Arg::F32: return absl::StrCat("f32:", Float(a.f));
    case Arg::Bytes: {
      if (!a.bytes.empty() && a.bytes.size() % 8 == 0) {
        std::vector<int64_t> words(a.bytes.size() / 8);
        std::memcpy(words.data(), a.bytes.data(), a.bytes.size());
        return absl::StrCat("bytes:i64", Dims(words));
      }
      return absl::StrCat("bytes:hex[", absl::BytesToHexString(a.bytes), "]");
    }
  }
  return absl::StrCat("arg?", static_cast<int>(a.kind));
}

std::string KernelName(const Executable& exe, int k) {
  if (k >= 0 && k < static_cast<int>(exe.kernels.size()))
    return exe.kernels[k].name;
  return absl::StrCat("#", k, "(out of range)");
}

void AppendLaunch(std::string& out, const Executable& exe, int i) {
  const Launch& l = exe.launches[i];
  const Launch none;
  absl::StrAppend(&out, "launch ", i,
                  i < exe.num_prepare_launches ? " prepare " : " call ",
                  Name(l.kind));
  // The fields of the launch's kind first, then any other field that is not
  // at its default (nothing the serializer keeps is left out).
  const bool kernel = l.kind == Launch::Kernel;
  std::vector<std::string> fields;
  if (kernel || l.kernel != none.kernel)
    fields.push_back(kernel ? KernelName(exe, l.kernel)
                            : absl::StrCat("kernel=", KernelName(exe, l.kernel)));
  auto dim3Differs = [](const uint32_t (&a)[3], const uint32_t (&b)[3]) {
    return a[0] != b[0] || a[1] != b[1] || a[2] != b[2];
  };
  if (kernel || dim3Differs(l.grid, none.grid))
    fields.push_back(absl::StrCat("grid=", Dim3(l.grid)));
  if (kernel || dim3Differs(l.block, none.block))
    fields.push_back(absl::StrCat("block=", Dim3(l.block)));
  if (kernel || l.smem != none.smem)
    fields.push_back(absl::StrCat("smem=", l.smem));
  if (kernel || !l.args.empty()) {
    std::vector<std::string> args;
    for (const Arg& a : l.args) args.push_back(ArgText(a));
    fields.push_back(absl::StrCat("args=[", absl::StrJoin(args, ","), "]"));
  }
  if (l.attention != none.attention)
    fields.push_back(absl::StrCat("attention=", l.attention));
  if (l.kind == Launch::Gemm)
    fields.push_back(absl::StrCat(l.gemm));
  else if (l.gemm != none.gemm)
    fields.push_back(absl::StrCat("gemm=", l.gemm));
  if (l.kind == Launch::Collective)
    fields.push_back(absl::StrCat(l.collective));
  else if (l.collective != none.collective)
    fields.push_back(absl::StrCat("collective=", l.collective));
  const bool copy = l.kind == Launch::Copy;
  if (copy || l.src.buffer != -1 || l.src.offset != 0)
    fields.push_back(absl::StrCat("src=", Ref(l.src)));
  if (copy || l.dst.buffer != -1 || l.dst.offset != 0)
    fields.push_back(absl::StrCat("dst=", Ref(l.dst)));
  if (copy || l.copy_bytes != 0)
    fields.push_back(absl::StrCat("bytes=", l.copy_bytes));
  fields.push_back(absl::StrCat("label=", Quoted(l.label)));
  absl::StrAppend(&out, " ", absl::StrJoin(fields, " "), "\n");
}

}  // namespace

std::string DescribeExecutable(const Executable& exe) {
  std::string out;
  absl::StrAppend(&out, "llmc-executable-dump ", kExecutableDumpVersion, "\n");
  absl::StrAppend(&out, "format_version ", exe.format_version, "\n");
  int prepare = exe.num_prepare_launches;
  absl::StrAppend(&out, "counts inputs=", exe.inputs.size(),
                  " outputs=", exe.outputs.size(),
                  " buffers=", exe.buffers.size(),
                  " kernels=", exe.kernels.size(),
                  " gemms=", exe.gemms.size(),
                  " collectives=", exe.collectives.size(),
                  " attentions=", exe.attentions.size(),
                  " launches=", exe.launches.size(), "\n");
  absl::StrAppend(&out, "num_prepare_launches ", prepare, "\n");
  absl::StrAppend(&out, "arena_bytes ", exe.arena_bytes, "\n");
  for (const auto& [name, value] : exe.symbol_bindings)
    absl::StrAppend(&out, "symbol ", Quoted(name), "=", value, "\n");

  auto sig = [&](const char* what, size_t i, const TensorSig& t) {
    absl::StrAppend(&out, what, " ", i, " ", Quoted(t.name), " ", Name(t.dtype),
                    " ", Dims(t.shape), " alias_input=", t.alias_input,
                    " parameter=", t.parameter ? 1 : 0, "\n");
  };
  for (size_t i = 0; i < exe.inputs.size(); ++i) sig("input", i, exe.inputs[i]);
  for (size_t i = 0; i < exe.outputs.size(); ++i)
    sig("output", i, exe.outputs[i]);

  for (size_t i = 0; i < exe.buffers.size(); ++i) {
    const Buffer& b = exe.buffers[i];
    absl::StrAppend(&out, "buffer ", i);
    if (b.id != static_cast<int>(i)) absl::StrAppend(&out, " id=", b.id);
    absl::StrAppend(&out, " ", Name(b.kind), " bytes=", b.bytes);
    // The fields of the buffer's kind, and any other that is not at its
    // default.
    const bool io = b.kind == Buffer::Input || b.kind == Buffer::Output;
    if (b.kind == Buffer::Arena || b.arena_offset != 0)
      absl::StrAppend(&out, " arena_offset=", b.arena_offset);
    if (io || b.io_index != -1) absl::StrAppend(&out, " io_index=", b.io_index);
    if (b.kind == Buffer::Constant || !b.constant_data.empty())
      absl::StrAppend(&out, " data=", Digest(b.constant_data));
    absl::StrAppend(&out, "\n");
  }

  for (size_t i = 0; i < exe.kernels.size(); ++i) {
    const KernelSpec& k = exe.kernels[i];
    std::vector<std::string> options;
    for (const std::string& o : k.options) options.push_back(Quoted(o));
    absl::StrAppend(&out, "kernel ", i, " ", k.name, " source=", Digest(k.source),
                    " options=[", absl::StrJoin(options, ","), "]",
                    k.grid_dependency ? " grid_dependency" : "", "\n");
    for (const auto& [name, text] : k.headers)
      absl::StrAppend(&out, "kernel ", i, " header ", Quoted(name), " ",
                      Digest(text), "\n");
  }

  for (size_t i = 0; i < exe.gemms.size(); ++i) {
    const GemmSpec& g = exe.gemms[i];
    absl::StrAppend(
        &out, "gemm ", i, " m=", g.m, " n=", g.n, " k=", g.k,
        " batch=", g.batch, " strides=[", g.stride_a, ",", g.stride_b, ",",
        g.stride_c, ",", g.stride_d, "] trans=[", g.transa ? 1 : 0, ",",
        g.transb ? 1 : 0, "] ld=[", g.lda, ",", g.ldb, ",", g.ldc, ",", g.ldd,
        "] dtypes=[", Name(g.dtype_a), ",", Name(g.dtype_b), ",",
        Name(g.dtype_c), ",", Name(g.dtype_d), "] compute=", Name(g.compute),
        " alpha=", Float(g.alpha), " beta=", Float(g.beta),
        " epilogue=", Name(g.epilogue), " a=", Ref(g.a), " b=", Ref(g.b),
        " c=", Ref(g.c), " d=", Ref(g.d), " bias=", Ref(g.bias),
        " scale_a=", Ref(g.scale_a), " scale_b=", Ref(g.scale_b), "\n");
  }

  for (size_t i = 0; i < exe.collectives.size(); ++i) {
    const CollectiveSpec& c = exe.collectives[i];
    absl::StrAppend(&out, "collective ", i, " ", Name(c.op), " ",
                    Name(c.reduction), " ", Name(c.dtype), " count=", c.count,
                    " send=", Ref(c.send), " recv=", Ref(c.recv), "\n");
  }

  for (size_t i = 0; i < exe.attentions.size(); ++i) {
    const AttentionSpec& a = exe.attentions[i];
    absl::StrAppend(&out, "attention ", i, " b=", a.b, " sq=", a.sq,
                    " skv=", a.skv, " hq=", a.hq, " hkv=", a.hkv, " d=", a.d,
                    " causal=", a.causal ? 1 : 0, " scale=", Float(a.scale),
                    " dtype=", Name(a.dtype), " q=", Ref(a.q), " k=", Ref(a.k),
                    " v=", Ref(a.v), " o=", Ref(a.o),
                    a.has_lse() ? absl::StrCat(" lse=", Ref(a.lse)) : "");
    if (a.backward)
      absl::StrAppend(&out, " backward grad_output=", Ref(a.grad_output),
                      " grad_query=", Ref(a.grad_query), " grad_key=", Ref(a.grad_key),
                      " grad_value=", Ref(a.grad_value), " row_sum=", Ref(a.row_sum),
                      " dq_accum=", Ref(a.dq_accum));
    absl::StrAppend(&out, "\n");
  }

  for (size_t i = 0; i < exe.launches.size(); ++i)
    AppendLaunch(out, exe, static_cast<int>(i));
  return out;
}

}  // namespace llmc::rt
