//===- ExportExecutable.cpp - rt::Executable -> exec.executable (bridge) ---===//
//
// The bridge from the lowering's rt::Executable to exec IR (see
// TranslateToExecutable.h): deleted once conversion patterns build exec ops
// directly. It only restates fields; a field the lowering never sets for a
// kind (a GEMM index on a kernel launch, an offset on an input buffer) is an
// internal error rather than something to drop silently.
//
//===----------------------------------------------------------------------===//

#include "llmc/Target/Executable/TranslateToExecutable.h"

#include "Common.h"

#include "absl/strings/str_cat.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace llmc;
using namespace llmc::exec_translation;

namespace {

absl::Status bug(const llvm::Twine &what) {
  return absl::InternalError(absl::StrCat(
      "llmc internal error (please report): executable to exec IR: ", what.str()));
}

struct Exporter {
  MLIRContext *ctx;
  OpBuilder b;
  Location loc;
  const rt::Executable &exe;
  std::vector<Value> buffers;
  std::vector<FlatSymbolRefAttr> kernels;
  std::vector<int> gemmUses, collectiveUses, attentionUses;

  Exporter(MLIRContext *ctx, Location loc, const rt::Executable &exe)
      : ctx(ctx), b(ctx), loc(loc), exe(exe) {}

  absl::StatusOr<Value> buffer(int id, const std::string &what) {
    if (id < 0 || id >= static_cast<int>(buffers.size()))
      return bug(what + " names buffer " + llvm::Twine(id) + " of " +
                 llvm::Twine(buffers.size()));
    return buffers[id];
  }

  RankedTensorType tensor(const rt::TensorSig &sig) {
    return RankedTensorType::get(sig.shape, toType(ctx, sig.dtype));
  }

  absl::Status signature() {
    for (const rt::TensorSig &sig : exe.inputs) {
      if (sig.alias_input != -1)
        return bug("input '" + sig.name + "' has an alias_input");
      exec::InputOp::create(b, loc, sig.name, tensor(sig), sig.parameter);
    }
    for (const rt::TensorSig &sig : exe.outputs) {
      if (sig.parameter)
        return bug("output '" + sig.name + "' is marked parameter");
      exec::OutputOp::create(b, loc, sig.name, tensor(sig),
                             sig.alias_input < 0 ? IntegerAttr()
                                                 : b.getI64IntegerAttr(sig.alias_input));
    }
    return absl::OkStatus();
  }

  absl::Status bufferOps(ArrayRef<ArenaInterval> arena) {
    std::vector<std::vector<ArenaInterval>> intervals(exe.buffers.size());
    for (const ArenaInterval &i : arena) {
      if (i.buffer < 0 || i.buffer >= static_cast<int>(exe.buffers.size()))
        return bug("arena interval of buffer " + llvm::Twine(i.buffer) + " of " +
                   llvm::Twine(exe.buffers.size()));
      intervals[i.buffer].push_back(i);
    }
    for (auto [id, rb] : llvm::enumerate(exe.buffers)) {
      std::string what = absl::StrCat("buffer ", id);
      if (rb.id != static_cast<int>(id))
        return bug(what + " has id " + llvm::Twine(rb.id));
      exec::BufferKind kind;
      switch (rb.kind) {
      case rt::Buffer::Input: kind = exec::BufferKind::input; break;
      case rt::Buffer::Output: kind = exec::BufferKind::output; break;
      case rt::Buffer::Arena: kind = exec::BufferKind::arena; break;
      case rt::Buffer::Constant: kind = exec::BufferKind::constant; break;
      case rt::Buffer::Persistent: kind = exec::BufferKind::persistent; break;
      default: return bug(what + " has an unknown kind");
      }
      bool io = rb.kind == rt::Buffer::Input || rb.kind == rt::Buffer::Output;
      if (!io && rb.io_index != -1)
        return bug(what + " has an io_index but is not an input or output");
      if (rb.kind != rt::Buffer::Constant && !rb.constant_data.empty())
        return bug(what + " has data but is not a constant");
      DenseI64ArrayAttr live;
      if (rb.kind == rt::Buffer::Arena) {
        if (intervals[id].size() != 1)
          return bug(what + " is an arena buffer with " +
                     llvm::Twine(intervals[id].size()) + " liveness intervals");
        live = b.getDenseI64ArrayAttr({intervals[id][0].first, intervals[id][0].last});
      } else if (!intervals[id].empty() || rb.arena_offset != 0) {
        return bug(what + " is not an arena buffer but has an arena interval or offset");
      }
      auto op = exec::BufferOp::create(
          b, loc, exec::BufferType::get(ctx),
          exec::BufferKindAttr::get(ctx, kind), b.getI64IntegerAttr(rb.bytes),
          io ? b.getI64IntegerAttr(rb.io_index) : IntegerAttr(), live, IntegerAttr(),
          rb.kind == rt::Buffer::Constant ? b.getStringAttr(rb.constant_data)
                                          : StringAttr());
      buffers.push_back(op.getResult());
    }
    return absl::OkStatus();
  }

  void kernelOps() {
    llvm::StringSet<> taken;
    for (auto [i, k] : llvm::enumerate(exe.kernels)) {
      std::string sym = k.name.empty() ? absl::StrCat("kernel", i) : k.name;
      if (taken.contains(sym))
        sym = absl::StrCat(sym, "_", i);
      while (taken.contains(sym))
        sym += "_";
      taken.insert(sym);
      SmallVector<StringRef> options(k.options.begin(), k.options.end());
      SmallVector<NamedAttribute> headers;
      for (const auto &[name, text] : k.headers)
        headers.push_back(b.getNamedAttr(name, b.getStringAttr(text)));
      exec::KernelOp::create(
          b, loc, b.getStringAttr(sym),
          sym == k.name ? StringAttr() : b.getStringAttr(k.name),
          b.getStringAttr(k.source), b.getStrArrayAttr(options),
          headers.empty() ? DictionaryAttr() : b.getDictionaryAttr(headers),
          k.arch.empty() ? StringAttr() : b.getStringAttr(k.arch),
          k.cubin.empty() ? StringAttr() : b.getStringAttr(k.cubin));
      kernels.push_back(FlatSymbolRefAttr::get(ctx, sym));
    }
  }

  StringAttr label(const rt::Launch &l) {
    return l.label.empty() ? StringAttr() : b.getStringAttr(l.label);
  }

  /// Operand and offset attribute of an optional reference.
  absl::Status optionalRef(const rt::BufferRef &r, const std::string &what, Value &v,
                           IntegerAttr &offset) {
    if (r.buffer < 0) {
      if (r.offset != 0)
        return bug(what + " has an offset but no buffer");
      return absl::OkStatus();
    }
    absl::StatusOr<Value> buf = buffer(r.buffer, what);
    if (!buf.ok())
      return buf.status();
    v = *buf;
    offset = b.getI64IntegerAttr(r.offset);
    return absl::OkStatus();
  }

  absl::Status required(const rt::BufferRef &r, const std::string &what, Value &v,
                        IntegerAttr &offset) {
    if (r.buffer < 0)
      return bug(what + " has no buffer");
    return optionalRef(r, what, v, offset);
  }

  absl::Status kernelLaunch(const rt::Launch &l, const std::string &what) {
    if (l.kernel < 0 || l.kernel >= static_cast<int>(kernels.size()))
      return bug(what + " names kernel " + llvm::Twine(l.kernel));
    SmallVector<Value> operands;
    SmallVector<Attribute> args;
    for (const rt::Arg &a : l.args) {
      switch (a.kind) {
      case rt::Arg::BufferPtr: {
        absl::StatusOr<Value> buf = buffer(a.buffer, what);
        if (!buf.ok())
          return buf.status();
        operands.push_back(*buf);
        args.push_back(b.getIndexAttr(a.byte_offset));
        break;
      }
      case rt::Arg::I32:
        if (a.i < INT32_MIN || a.i > INT32_MAX)
          return bug(what + " has an i32 argument out of range");
        args.push_back(b.getI32IntegerAttr(static_cast<int32_t>(a.i)));
        break;
      case rt::Arg::I64: args.push_back(b.getI64IntegerAttr(a.i)); break;
      case rt::Arg::F32: args.push_back(b.getF32FloatAttr(a.f)); break;
      case rt::Arg::Bytes: args.push_back(b.getStringAttr(a.bytes)); break;
      default: return bug(what + " has an argument of unknown kind");
      }
    }
    SmallVector<Value> attnOperands;
    DenseI64ArrayAttr attnOffsets;
    exec::AttentionAttr attn;
    if (l.attention != -1) {
      if (l.attention < 0 || l.attention >= static_cast<int>(exe.attentions.size()))
        return bug(what + " names attention " + llvm::Twine(l.attention));
      ++attentionUses[l.attention];
      const rt::AttentionSpec &s = exe.attentions[l.attention];
      SmallVector<int64_t> offsets;
      for (const rt::BufferRef *r : {&s.q, &s.k, &s.v, &s.o}) {
        Value v;
        IntegerAttr offset;
        if (absl::Status st = required(*r, what + "'s attention", v, offset); !st.ok())
          return st;
        attnOperands.push_back(v);
        offsets.push_back(r->offset);
      }
      attnOffsets = b.getDenseI64ArrayAttr(offsets);
      attn = exec::AttentionAttr::get(ctx, s.b, s.sq, s.skv, s.hq, s.hkv, s.d,
                                      b.getBoolAttr(s.causal), b.getF32FloatAttr(s.scale),
                                      toType(ctx, s.dtype));
    }
    exec::LaunchOp::create(
        b, loc, kernels[l.kernel],
        b.getDenseI64ArrayAttr({l.grid[0], l.grid[1], l.grid[2]}),
        b.getDenseI64ArrayAttr({l.block[0], l.block[1], l.block[2]}),
        b.getI64IntegerAttr(l.smem), operands, b.getArrayAttr(args), attnOperands,
        attnOffsets, attn, label(l));
    return absl::OkStatus();
  }

  absl::Status gemm(const rt::Launch &l, const std::string &what) {
    if (l.gemm < 0 || l.gemm >= static_cast<int>(exe.gemms.size()))
      return bug(what + " names GEMM " + llvm::Twine(l.gemm));
    ++gemmUses[l.gemm];
    const rt::GemmSpec &g = exe.gemms[l.gemm];
    Value a, bb, c, d, bias, sa, sb;
    IntegerAttr ao, bo, co, dO, biaso, sao, sbo;
    for (absl::Status st :
         {required(g.a, what + "'s A", a, ao), required(g.b, what + "'s B", bb, bo),
          optionalRef(g.c, what + "'s C", c, co), required(g.d, what + "'s D", d, dO),
          optionalRef(g.bias, what + "'s bias", bias, biaso),
          optionalRef(g.scale_a, what + "'s scale_a", sa, sao),
          optionalRef(g.scale_b, what + "'s scale_b", sb, sbo)})
      if (!st.ok())
        return st;
    auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
    auto type = [&](rt::DType t) { return TypeAttr::get(toType(ctx, t)); };
    exec::GemmOp::create(
        b, loc, i64(g.m), i64(g.n), i64(g.k), i64(g.batch), i64(g.stride_a),
        i64(g.stride_b), i64(g.stride_c), i64(g.stride_d),
        g.transa ? b.getUnitAttr() : UnitAttr(), g.transb ? b.getUnitAttr() : UnitAttr(),
        i64(g.lda), i64(g.ldb), i64(g.ldc), i64(g.ldd), type(g.dtype_a),
        type(g.dtype_b), type(g.dtype_c), type(g.dtype_d), type(g.compute),
        b.getF32FloatAttr(g.alpha), b.getF32FloatAttr(g.beta),
        exec::EpilogueAttr::get(ctx, static_cast<exec::Epilogue>(g.epilogue)), a, ao,
        bb, bo, c, co, d, dO, bias, biaso, sa, sao, sb, sbo, label(l));
    return absl::OkStatus();
  }

  absl::Status collective(const rt::Launch &l, const std::string &what) {
    if (l.collective < 0 || l.collective >= static_cast<int>(exe.collectives.size()))
      return bug(what + " names collective " + llvm::Twine(l.collective));
    ++collectiveUses[l.collective];
    const rt::CollectiveSpec &c = exe.collectives[l.collective];
    Value send, recv;
    IntegerAttr so, ro;
    if (absl::Status st = required(c.send, what + "'s send", send, so); !st.ok())
      return st;
    if (absl::Status st = required(c.recv, what + "'s recv", recv, ro); !st.ok())
      return st;
    exec::CollectiveOp::create(
        b, loc, exec::CollectiveKindAttr::get(ctx, static_cast<exec::CollectiveKind>(c.op)),
        exec::ReductionAttr::get(ctx, static_cast<exec::Reduction>(c.reduction)),
        b.getI64IntegerAttr(c.count), TypeAttr::get(toType(ctx, c.dtype)), send, so,
        recv, ro, label(l));
    return absl::OkStatus();
  }

  absl::Status launch(const rt::Launch &l, size_t i) {
    std::string what = absl::StrCat("launch ", i);
    const rt::Launch none;
    bool kernel = l.kind == rt::Launch::Kernel;
    bool sameDims = std::equal(l.grid, l.grid + 3, none.grid) &&
                    std::equal(l.block, l.block + 3, none.block) && l.smem == 0;
    // Fields outside the launch's kind stay at their defaults.
    if ((!kernel && (l.kernel != -1 || !sameDims || !l.args.empty() ||
                     l.attention != -1)) ||
        (l.kind != rt::Launch::Gemm && l.gemm != -1) ||
        (l.kind != rt::Launch::Collective && l.collective != -1) ||
        (l.kind != rt::Launch::Copy &&
         (l.src.buffer != -1 || l.src.offset != 0 || l.dst.buffer != -1 ||
          l.dst.offset != 0 || l.copy_bytes != 0)))
      return bug(what + " has a field that does not belong to its kind");
    switch (l.kind) {
    case rt::Launch::Kernel: return kernelLaunch(l, what);
    case rt::Launch::Gemm: return gemm(l, what);
    case rt::Launch::Collective: return collective(l, what);
    case rt::Launch::Copy: {
      Value src, dst;
      IntegerAttr so, dO;
      if (absl::Status st = required(l.src, what + "'s source", src, so); !st.ok())
        return st;
      if (absl::Status st = required(l.dst, what + "'s destination", dst, dO); !st.ok())
        return st;
      exec::CopyOp::create(b, loc, b.getI64IntegerAttr(l.copy_bytes), src, so, dst, dO,
                           label(l));
      return absl::OkStatus();
    }
    }
    return bug(what + " has an unknown kind");
  }
};

} // namespace

absl::StatusOr<OwningOpRef<exec::ExecutableOp>>
llmc::exportExecutable(MLIRContext *context, Location loc, StringRef name,
                       const rt::Executable &exe, ArrayRef<ArenaInterval> arena) {
  context->getOrLoadDialect<exec::ExecDialect>();
  if (exe.format_version != rt::Executable::kFormatVersion)
    return bug("format_version " + llvm::Twine(exe.format_version));
  if (exe.num_prepare_launches < 0 ||
      exe.num_prepare_launches > static_cast<int>(exe.launches.size()))
    return bug("num_prepare_launches " + llvm::Twine(exe.num_prepare_launches));
  Exporter ex(context, loc, exe);
  OpBuilder &b = ex.b;
  SmallVector<NamedAttribute> bindings;
  for (const auto &[sym, value] : exe.symbol_bindings)
    bindings.push_back(b.getNamedAttr(sym, b.getI64IntegerAttr(value)));
  OwningOpRef<exec::ExecutableOp> op = exec::ExecutableOp::create(
      b, loc, b.getStringAttr(name), IntegerAttr(),
      bindings.empty() ? DictionaryAttr() : b.getDictionaryAttr(bindings));
  b.setInsertionPointToStart(&op->getBody().emplaceBlock());
  if (absl::Status st = ex.signature(); !st.ok())
    return st;
  if (absl::Status st = ex.bufferOps(arena); !st.ok())
    return st;
  ex.kernelOps();
  ex.gemmUses.assign(exe.gemms.size(), 0);
  ex.collectiveUses.assign(exe.collectives.size(), 0);
  ex.attentionUses.assign(exe.attentions.size(), 0);
  OpBuilder::InsertPoint perCall = b.saveInsertionPoint();
  if (exe.num_prepare_launches > 0) {
    auto prep = exec::PrepareOp::create(b, loc);
    perCall = b.saveInsertionPoint();
    b.setInsertionPointToStart(&prep.getBody().emplaceBlock());
  }
  for (auto [i, l] : llvm::enumerate(exe.launches)) {
    if (static_cast<int>(i) == exe.num_prepare_launches)
      b.restoreInsertionPoint(perCall);
    if (absl::Status st = ex.launch(l, i); !st.ok())
      return st;
  }
  for (auto [what, uses] : {std::pair<const char *, std::vector<int> *>{"GEMM", &ex.gemmUses},
                            {"collective", &ex.collectiveUses},
                            {"attention", &ex.attentionUses}})
    for (auto [i, n] : llvm::enumerate(*uses))
      if (n != 1)
        return bug(llvm::Twine(what) + " " + llvm::Twine(i) + " is used by " +
                   llvm::Twine(n) + " launches (expected one)");
  return op;
}
