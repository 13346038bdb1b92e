//===- TranslateToExecutable.cpp - exec.executable -> rt::Executable ------===//
//
// Field by field; decides nothing (see TranslateToExecutable.h).
//
//===----------------------------------------------------------------------===//

#include "llmc/Target/Executable/TranslateToExecutable.h"

#include "Common.h"
#include "llmc/Support/Version.h"

#include "absl/strings/str_cat.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace llmc;
using namespace llmc::exec_translation;

namespace {

struct Translator {
  rt::Executable exe;
  llvm::DenseMap<Value, int> bufferIds;
  llvm::StringMap<int> kernelIds;

  absl::Status error(Operation *op, const llvm::Twine &what) {
    return absl::InvalidArgumentError(
        absl::StrCat("exec to executable: ", describe(op), ": ", what.str()));
  }

  absl::StatusOr<rt::DType> dtype(Operation *op, Type t) {
    if (std::optional<rt::DType> d = toDType(t))
      return *d;
    std::string s;
    llvm::raw_string_ostream os(s);
    os << t;
    return error(op, "element type " + s + " has no runtime dtype");
  }

  absl::StatusOr<rt::BufferRef> ref(Operation *op, Value buffer,
                                    std::optional<int64_t> offset) {
    rt::BufferRef r;
    if (!buffer)
      return r;
    auto it = bufferIds.find(buffer);
    if (it == bufferIds.end())
      return error(op, "an operand is not an exec.buffer of the executable");
    r.buffer = it->second;
    r.offset = offset.value_or(0);
    return r;
  }

  absl::StatusOr<rt::TensorSig> signature(Operation *op, StringRef name, Type type) {
    auto t = cast<RankedTensorType>(type);
    absl::StatusOr<rt::DType> d = dtype(op, t.getElementType());
    if (!d.ok())
      return d.status();
    rt::TensorSig sig;
    sig.name = name.str();
    sig.dtype = *d;
    sig.shape.assign(t.getShape().begin(), t.getShape().end());
    return sig;
  }

  absl::Status buffer(exec::BufferOp op) {
    rt::Buffer b;
    b.id = exe.buffers.size();
    b.bytes = op.getBytes();
    switch (op.getKind()) {
    case exec::BufferKind::input: b.kind = rt::Buffer::Input; break;
    case exec::BufferKind::output: b.kind = rt::Buffer::Output; break;
    case exec::BufferKind::arena: b.kind = rt::Buffer::Arena; break;
    case exec::BufferKind::constant: b.kind = rt::Buffer::Constant; break;
    case exec::BufferKind::persistent: b.kind = rt::Buffer::Persistent; break;
    }
    if (op.getIoIndex())
      b.io_index = *op.getIoIndex();
    if (b.kind == rt::Buffer::Arena) {
      if (!op.getOffset())
        return error(op, "arena buffer has no offset; run llmc-plan-arena first");
      b.arena_offset = *op.getOffset();
    }
    if (op.getData())
      b.constant_data = op.getData()->str();
    bufferIds[op.getResult()] = b.id;
    exe.buffers.push_back(std::move(b));
    return absl::OkStatus();
  }

  absl::Status kernelLaunch(exec::LaunchOp op, rt::Launch &l) {
    auto it = kernelIds.find(op.getKernel());
    if (it == kernelIds.end())
      return error(op, "@" + op.getKernel() + " names no exec.kernel");
    l.kind = rt::Launch::Kernel;
    l.kernel = it->second;
    for (int i = 0; i < 3; ++i) {
      l.grid[i] = static_cast<uint32_t>(op.getGrid()[i]);
      l.block[i] = static_cast<uint32_t>(op.getBlock()[i]);
    }
    l.smem = static_cast<uint32_t>(op.getSmem());
    unsigned next = 0;
    for (Attribute a : op.getArgs()) {
      rt::Arg arg;
      if (auto s = dyn_cast<StringAttr>(a)) {
        arg.kind = rt::Arg::Bytes;
        arg.bytes = s.str();
      } else if (auto f = dyn_cast<FloatAttr>(a)) {
        arg.kind = rt::Arg::F32;
        arg.f = f.getValue().convertToFloat();
      } else {
        auto i = cast<IntegerAttr>(a);
        if (i.getType().isIndex()) {
          absl::StatusOr<rt::BufferRef> r = ref(op, op.getBuffers()[next++], i.getInt());
          if (!r.ok())
            return r.status();
          arg.kind = rt::Arg::BufferPtr;
          arg.buffer = r->buffer;
          arg.byte_offset = r->offset;
        } else {
          arg.kind = i.getType().isInteger(32) ? rt::Arg::I32 : rt::Arg::I64;
          arg.i = i.getType().isInteger(32) ? i.getValue().getSExtValue() : i.getInt();
        }
      }
      l.args.push_back(std::move(arg));
    }
    if (exec::AttentionAttr attn = op.getAttentionAttr()) {
      rt::AttentionSpec s;
      s.b = attn.getB();
      s.sq = attn.getSq();
      s.skv = attn.getSkv();
      s.hq = attn.getHq();
      s.hkv = attn.getHkv();
      s.d = attn.getD();
      s.causal = attn.getCausal().getValue();
      s.scale = attn.getScale().getValue().convertToFloat();
      absl::StatusOr<rt::DType> d = dtype(op, attn.getDtype());
      if (!d.ok())
        return d.status();
      s.dtype = *d;
      s.backward = op.getAttentionBuffers().size() == 11;
      rt::BufferRef *refs[] = {&s.q,          &s.k,          &s.v,        &s.o,
                               &s.lse,        &s.grad_output, &s.grad_query, &s.grad_key,
                               &s.grad_value, &s.row_sum,    &s.dq_accum};
      for (size_t i = 0; i < op.getAttentionBuffers().size(); ++i) {
        absl::StatusOr<rt::BufferRef> r =
            ref(op, op.getAttentionBuffers()[i], (*op.getAttentionOffsets())[i]);
        if (!r.ok())
          return r.status();
        *refs[i] = *r;
      }
      // The launches of one backward (llmc's D, main and dQ kernels) carry
      // the same attachment: one spec, which cuDNN runs once.
      if (s.backward && !exe.attentions.empty() && sameAttention(exe.attentions.back(), s)) {
        l.attention = exe.attentions.size() - 1;
        return absl::OkStatus();
      }
      l.attention = exe.attentions.size();
      exe.attentions.push_back(s);
    }
    return absl::OkStatus();
  }

  static bool sameAttention(const rt::AttentionSpec &a, const rt::AttentionSpec &b) {
    auto same = [](const rt::BufferRef &x, const rt::BufferRef &y) {
      return x.buffer == y.buffer && x.offset == y.offset;
    };
    std::vector<rt::AttentionOperand> x = rt::AttentionOperands(a), y = rt::AttentionOperands(b);
    return a.b == b.b && a.sq == b.sq && a.skv == b.skv && a.hq == b.hq && a.hkv == b.hkv &&
           a.d == b.d && a.causal == b.causal && a.scale == b.scale && a.dtype == b.dtype &&
           a.backward == b.backward && x.size() == y.size() &&
           std::equal(x.begin(), x.end(), y.begin(),
                      [&](const rt::AttentionOperand &p, const rt::AttentionOperand &q) {
                        return same(p.ref, q.ref);
                      });
  }

  absl::Status gemm(exec::GemmOp op, rt::Launch &l) {
    rt::GemmSpec g;
    g.m = op.getM();
    g.n = op.getN();
    g.k = op.getK();
    g.batch = op.getBatch();
    g.stride_a = op.getStrideA();
    g.stride_b = op.getStrideB();
    g.stride_c = op.getStrideC();
    g.stride_d = op.getStrideD();
    g.transa = op.getTransa();
    g.transb = op.getTransb();
    g.lda = op.getLda();
    g.ldb = op.getLdb();
    g.ldc = op.getLdc();
    g.ldd = op.getLdd();
    std::pair<rt::DType *, Type> dtypes[] = {{&g.dtype_a, op.getDtypeA()},
                                             {&g.dtype_b, op.getDtypeB()},
                                             {&g.dtype_c, op.getDtypeC()},
                                             {&g.dtype_d, op.getDtypeD()},
                                             {&g.compute, op.getCompute()}};
    for (auto [field, type] : dtypes) {
      absl::StatusOr<rt::DType> d = dtype(op, type);
      if (!d.ok())
        return d.status();
      *field = *d;
    }
    g.alpha = op.getAlpha().convertToFloat();
    g.beta = op.getBeta().convertToFloat();
    g.epilogue = static_cast<rt::Epilogue>(op.getEpilogue());
    std::tuple<rt::BufferRef *, Value, std::optional<int64_t>> refs[] = {
        {&g.a, op.getA(), op.getAOffset()},
        {&g.b, op.getB(), op.getBOffset()},
        {&g.c, op.getC(), op.getCOffset()},
        {&g.d, op.getD(), op.getDOffset()},
        {&g.bias, op.getBias(), op.getBiasOffset()},
        {&g.scale_a, op.getScaleA(), op.getScaleAOffset()},
        {&g.scale_b, op.getScaleB(), op.getScaleBOffset()}};
    for (auto [field, buffer, offset] : refs) {
      absl::StatusOr<rt::BufferRef> r = ref(op, buffer, offset);
      if (!r.ok())
        return r.status();
      *field = *r;
    }
    l.kind = rt::Launch::Gemm;
    l.gemm = exe.gemms.size();
    exe.gemms.push_back(g);
    return absl::OkStatus();
  }

  absl::Status collective(exec::CollectiveOp op, rt::Launch &l) {
    rt::CollectiveSpec c;
    c.op = static_cast<rt::CollectiveSpec::Op>(op.getKind());
    c.reduction = static_cast<rt::CollectiveSpec::Reduction>(op.getReduction());
    absl::StatusOr<rt::DType> d = dtype(op, op.getDtype());
    if (!d.ok())
      return d.status();
    c.dtype = *d;
    c.count = op.getCount();
    absl::StatusOr<rt::BufferRef> send = ref(op, op.getSend(), op.getSendOffset());
    absl::StatusOr<rt::BufferRef> recv = ref(op, op.getRecv(), op.getRecvOffset());
    if (!send.ok())
      return send.status();
    if (!recv.ok())
      return recv.status();
    c.send = *send;
    c.recv = *recv;
    l.kind = rt::Launch::Collective;
    l.collective = exe.collectives.size();
    exe.collectives.push_back(c);
    return absl::OkStatus();
  }

  absl::Status launch(Operation *op) {
    rt::Launch l;
    absl::Status st;
    std::optional<StringRef> label;
    if (auto k = dyn_cast<exec::LaunchOp>(op)) {
      st = kernelLaunch(k, l);
      label = k.getLabel();
    } else if (auto g = dyn_cast<exec::GemmOp>(op)) {
      st = gemm(g, l);
      label = g.getLabel();
    } else if (auto c = dyn_cast<exec::CollectiveOp>(op)) {
      st = collective(c, l);
      label = c.getLabel();
    } else if (auto copy = dyn_cast<exec::CopyOp>(op)) {
      absl::StatusOr<rt::BufferRef> src = ref(op, copy.getSrc(), copy.getSrcOffset());
      absl::StatusOr<rt::BufferRef> dst = ref(op, copy.getDst(), copy.getDstOffset());
      if (!src.ok())
        return src.status();
      if (!dst.ok())
        return dst.status();
      l.kind = rt::Launch::Copy;
      l.src = *src;
      l.dst = *dst;
      l.copy_bytes = copy.getBytes();
      label = copy.getLabel();
    } else {
      return error(op, "is not a launch (exec.launch, exec.gemm, exec.copy, "
                       "exec.collective)");
    }
    if (!st.ok())
      return st;
    if (label)
      l.label = label->str();
    exe.launches.push_back(std::move(l));
    return absl::OkStatus();
  }

  absl::Status run(exec::ExecutableOp top) {
    if (!top.getArenaBytes())
      return error(top, "has no arena_bytes; run llmc-plan-arena first");
    exe.arena_bytes = *top.getArenaBytes();
    exe.producer = std::string("llmc ") + llmc::versionString();
    if (DictionaryAttr bindings = top.getSymbolBindingsAttr())
      for (NamedAttribute b : bindings)
        exe.symbol_bindings[b.getName().str()] = cast<IntegerAttr>(b.getValue()).getInt();
    Block &body = top.getBody().front();
    // The kernel table first: launches name kernels by symbol.
    for (exec::KernelOp k : body.getOps<exec::KernelOp>()) {
      kernelIds[k.getSymName()] = exe.kernels.size();
      rt::KernelSpec spec;
      spec.name = k.getEntryName().str();
      spec.source = k.getSource().str();
      spec.arch = k.getArch().value_or("").str();
      spec.cubin = k.getCubin().value_or("").str();
      spec.grid_dependency = k.getGridDependency();
      for (Attribute o : k.getOptions())
        spec.options.push_back(cast<StringAttr>(o).str());
      if (DictionaryAttr headers = k.getHeadersAttr())
        for (NamedAttribute h : headers)
          spec.headers[h.getName().str()] = cast<StringAttr>(h.getValue()).str();
      exe.kernels.push_back(std::move(spec));
    }
    for (Operation &op : body) {
      absl::Status st;
      if (auto in = dyn_cast<exec::InputOp>(op)) {
        absl::StatusOr<rt::TensorSig> sig = signature(in, in.getName(), in.getType());
        if (!sig.ok())
          return sig.status();
        sig->parameter = in.getParameter();
        exe.inputs.push_back(*sig);
      } else if (auto out = dyn_cast<exec::OutputOp>(op)) {
        absl::StatusOr<rt::TensorSig> sig = signature(out, out.getName(), out.getType());
        if (!sig.ok())
          return sig.status();
        sig->alias_input = out.getAliasInput().value_or(-1);
        exe.outputs.push_back(*sig);
      } else if (auto b = dyn_cast<exec::BufferOp>(op)) {
        st = buffer(b);
      } else if (isa<exec::KernelOp>(op)) {
        continue;
      } else if (auto prep = dyn_cast<exec::PrepareOp>(op)) {
        if (!exe.launches.empty())
          return error(prep, "follows a launch; the preparation segment comes first");
        for (Operation &inner : prep.getBody().front())
          if (st = launch(&inner); !st.ok())
            return st;
        exe.num_prepare_launches = exe.launches.size();
      } else {
        st = launch(&op);
      }
      if (!st.ok())
        return st;
    }
    return absl::OkStatus();
  }
};

} // namespace

absl::StatusOr<rt::Executable> llmc::translateToExecutable(exec::ExecutableOp op) {
  Translator t;
  if (absl::Status st = t.run(op); !st.ok())
    return st;
  return std::move(t.exe);
}
