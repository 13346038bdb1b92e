//===- SpecializeShapes.cpp - bind dynamic dims to concrete values --------===//
//
// Shape specialization: the runtime compiles one executable per concrete
// shape signature (guards on the bound values live in the runtime's
// specialization cache). This pass rewrites a function with dynamic
// dimensions into its static instance.
//
//===----------------------------------------------------------------------===//

#include "LLM/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

namespace llmc::llm {
#define GEN_PASS_DEF_SPECIALIZESHAPESPASS
#include "LLM/Transforms/Passes.h.inc"
} // namespace llmc::llm

using namespace mlir;
using namespace llmc::llm;

std::string llmc::llm::dynamicDimName(func::FuncOp fn, unsigned arg,
                                      unsigned dim) {
  auto type = dyn_cast<RankedTensorType>(fn.getArgument(arg).getType());
  if (type) {
    unsigned dynIndex = 0;
    for (unsigned d = 0; d < dim; ++d)
      dynIndex += type.isDynamicDim(d);
    if (auto names = fn.getArgAttrOfType<ArrayAttr>(arg, "llm.dim_names"))
      if (dynIndex < names.size())
        if (auto s = dyn_cast<StringAttr>(names[dynIndex]))
          return s.str();
  }
  return ("arg" + llvm::Twine(arg) + "." + llvm::Twine(dim)).str();
}

static RankedTensorType withShape(Type type, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape,
                               cast<RankedTensorType>(type).getElementType());
}

static ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// For elementwise ops: all operands share one shape. A broadcast whose
/// dynamic result dims could not be derived from its input takes the shape of
/// a static sibling operand.
static FailureOr<SmallVector<int64_t>> unifyOperandShapes(Operation *op,
                                                          ValueRange values) {
  Value known;
  for (Value v : values)
    if (auto t = dyn_cast<RankedTensorType>(v.getType());
        t && t.hasStaticShape() && t.getRank() > 0) {
      known = v;
      break;
    }
  if (!known) {
    // Rank-0 or all-dynamic: take the first operand as is.
    return SmallVector<int64_t>(shapeOf(values.front()));
  }
  ArrayRef<int64_t> shape = shapeOf(known);
  for (Value v : values) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.hasStaticShape())
      continue;
    auto bcast = v.getDefiningOp<BroadcastOp>();
    if (!bcast || t.getRank() != static_cast<int64_t>(shape.size())) {
      op->emitOpError() << "operand of type " << t
                        << " has unresolved dynamic dimensions after shape "
                           "specialization";
      return failure();
    }
    v.setType(withShape(t, shape));
  }
  return SmallVector<int64_t>(shape);
}

/// A broadcast whose dynamic result dims its input does not determine takes
/// them from `target` (right-aligned), the shape its consumer needs.
static void resolveBroadcastFrom(Value v, ArrayRef<int64_t> target) {
  auto bcast = v.getDefiningOp<BroadcastOp>();
  if (!bcast)
    return;
  auto t = bcast.getType();
  if (t.hasStaticShape() || t.getRank() > static_cast<int64_t>(target.size()))
    return;
  SmallVector<int64_t> shape(t.getShape());
  int64_t lead = target.size() - t.getRank();
  for (int64_t i = 0; i < t.getRank(); ++i)
    if (ShapedType::isDynamic(shape[i]))
      shape[i] = target[lead + i];
  bcast.getResult().setType(withShape(t, shape));
}

/// Computes the static result types of `op` from its (static) operands.
static LogicalResult computeResultTypes(Operation *op,
                                        SmallVectorImpl<Type> &types) {
  // Elementwise operands share one shape: resolve broadcasts from siblings.
  if (op->hasTrait<OpTrait::Elementwise>() && op->getNumOperands() > 1 &&
      failed(unifyOperandShapes(op, op->getOperands())))
    return failure();
  // Masks broadcast to the scores / input shape.
  if (auto attn = dyn_cast<AttentionOp>(op); attn && attn.getMask()) {
    auto q = attn.getQuery().getType(), k = attn.getKey().getType();
    resolveBroadcastFrom(attn.getMask(), {q.getDimSize(0), q.getDimSize(2),
                                          q.getDimSize(1),
                                          k.getDimSize(attn.kvSeqDim())});
  }
  auto scoresOf = [](RankedTensorType q, RankedTensorType k) {
    return SmallVector<int64_t>{q.getDimSize(0), q.getDimSize(2),
                                q.getDimSize(1), k.getDimSize(1)};
  };
  if (auto lse = dyn_cast<AttentionLogSumExpOp>(op); lse && lse.getMask())
    resolveBroadcastFrom(lse.getMask(),
                         scoresOf(lse.getQuery().getType(), lse.getKey().getType()));
  if (auto bwd = dyn_cast<AttentionBackwardOp>(op); bwd && bwd.getMask())
    resolveBroadcastFrom(bwd.getMask(),
                         scoresOf(bwd.getQuery().getType(), bwd.getKey().getType()));
  if (auto sm = dyn_cast<SoftmaxOp>(op); sm && sm.getMask())
    resolveBroadcastFrom(sm.getMask(), sm.getInput().getType().getShape());
  // RoPE cos/sin tables broadcast to [B, S, D] (right-aligned: [S, D] too).
  if (auto rope = dyn_cast<RoPEOp>(op); rope && rope.getCos()) {
    auto x = rope.getInput().getType();
    for (Value table : {rope.getCos(), rope.getSin()})
      resolveBroadcastFrom(table, {x.getDimSize(0), x.getDimSize(1),
                                   x.getDimSize(3)});
  }
  if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
    if (succeeded(infer.inferReturnTypes(op->getContext(), op->getLoc(),
                                         op->getOperands(),
                                         op->getRawDictionaryAttrs(),
                                         op->getPropertiesStorage(),
                                         op->getRegions(), types)))
      return success();
    // Type inference may fail without a diagnostic of its own: always say
    // which op and which operand types.
    InFlightDiagnostic d = op->emitOpError()
                           << "cannot compute its result types from the "
                              "specialized operand types (";
    llvm::interleaveComma(op->getOperandTypes(), d);
    d << ")";
    return failure();
  }
  auto same = [&](Value v) {
    types.push_back(withShape(op->getResult(0).getType(), shapeOf(v)));
    return success();
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<ConstantOp>([&](ConstantOp c) {
        types.push_back(c.getType());
        return success();
      })
      .Case<SoftmaxOp, RMSNormOp, LayerNormOp, RoPEOp, AllReduceOp, CumsumOp>(
          [&](auto o) { return same(o->getOperand(0)); })
      .Case<AttentionOp>([&](AttentionOp o) { return same(o.getQuery()); })
      .Case<PagedAttentionOp, VarlenAttentionOp>([&](auto o) { return same(o.getQuery()); })
      .Case<AttentionLogSumExpOp>([&](AttentionLogSumExpOp o) {
        auto q = o.getQuery().getType();
        types.push_back(withShape(o.getType(), {q.getDimSize(0), q.getDimSize(2),
                                                q.getDimSize(1)}));
        return success();
      })
      .Case<AttentionBackwardOp>([&](AttentionBackwardOp o) {
        for (Value v : {o.getQuery(), o.getKey(), o.getValue()})
          types.push_back(v.getType());
        return success();
      })
      .Case<KVCacheAppendOp>([&](KVCacheAppendOp o) { return same(o.getCache()); })
      .Case<PagedKVAppendOp>([&](PagedKVAppendOp o) { return same(o.getPages()); })
      .Case<IndexPutOp>([&](IndexPutOp o) { return same(o.getBase()); })
      .Case<SelectOp>([&](SelectOp o) -> LogicalResult {
        auto shape = unifyOperandShapes(op, op->getOperands());
        if (failed(shape))
          return failure();
        types.push_back(withShape(o.getType(), *shape));
        return success();
      })
      .Case<BroadcastOp>([&](BroadcastOp o) {
        auto in = o.getInput().getType();
        auto out = o.getType();
        SmallVector<int64_t> shape(out.getShape());
        int64_t lead = out.getRank() - in.getRank();
        for (int64_t i = 0; i < in.getRank(); ++i)
          if (out.isDynamicDim(lead + i) && in.getDimSize(i) != 1)
            shape[lead + i] = in.getDimSize(i);
        // Remaining dynamic dims are resolved by the consumer.
        types.push_back(withShape(out, shape));
        return success();
      })
      .Case<ReshapeOp>([&](ReshapeOp o) -> LogicalResult {
        auto in = o.getInput().getType();
        auto out = o.getType();
        SmallVector<int64_t> shape(out.getShape());
        int64_t known = 1, dynIdx = -1;
        for (auto [i, d] : llvm::enumerate(shape)) {
          if (ShapedType::isDynamic(d))
            dynIdx = i;
          else
            known *= d;
        }
        if (dynIdx >= 0) {
          if (known == 0 || in.getNumElements() % known != 0)
            return o.emitOpError()
                   << "cannot reshape " << in << " to " << out
                   << " after shape specialization";
          shape[dynIdx] = in.getNumElements() / known;
        }
        types.push_back(withShape(out, shape));
        return success();
      })
      .Case<MatmulOp>([&](MatmulOp o) -> LogicalResult {
        auto shape = matmulResultShape(o.getLhs().getType(), o.getRhs().getType(),
                                       o.getTransposeLhs(), o.getTransposeRhs());
        if (!shape)
          return o.emitOpError() << "batch dimensions do not broadcast after "
                                    "shape specialization";
        types.push_back(withShape(o.getType(), *shape));
        return success();
      })
      .Default([&](Operation *o) -> LogicalResult {
        if (o->hasTrait<OpTrait::Elementwise>() && o->getNumResults() == 1 &&
            o->getNumOperands() > 0) {
          auto shape = unifyOperandShapes(o, o->getOperands());
          if (failed(shape))
            return failure();
          types.push_back(withShape(o->getResult(0).getType(), *shape));
          return success();
        }
        return o->emitOpError()
               << "has no shape specialization rule; its results must be "
                  "computable from static operands";
      });
}

/// The function's own tensors (arguments and results, which no llm
/// verifier sees when they pass straight through) have llm element types
/// and sizes within kMaxTensorElements.
static LogicalResult verifySignature(func::FuncOp fn) {
  auto emit = [&] { return fn.emitError(); };
  auto check = [&](StringRef kind, unsigned i, Type type) -> LogicalResult {
    std::string what =
        (kind + " " + llvm::Twine(i) + " of @" + fn.getSymName()).str();
    auto shaped = dyn_cast<ShapedType>(type);
    if (shaped && !isSupportedElementType(shaped.getElementType()))
      return fn.emitError()
             << what << " has element type " << shaped.getElementType()
             << ", which llmc does not support (expected f32, f16, bf16, "
                "f8E4M3FN, f8E5M2, i1, i8, i32 or i64)";
    return verifyTensorSize(emit, what, type);
  };
  for (auto [i, t] : llvm::enumerate(fn.getArgumentTypes()))
    if (failed(check("argument", i, t)))
      return failure();
  for (auto [i, t] : llvm::enumerate(fn.getResultTypes()))
    if (failed(check("result", i, t)))
      return failure();
  return success();
}

LogicalResult
llmc::llm::specializeShapes(func::FuncOp fn,
                            const std::map<std::string, int64_t> &bindings) {
  if (fn.isExternal())
    return fn.emitError() << "@" << fn.getSymName()
                          << " is a declaration (no body); nothing to specialize";
  if (failed(verifySignature(fn)))
    return failure();
  auto isStatic = [](Type t) {
    auto rt = dyn_cast<RankedTensorType>(t);
    return !rt || rt.hasStaticShape();
  };
  bool allStatic = llvm::all_of(fn.getArgumentTypes(), isStatic);
  fn.walk([&](Operation *op) {
    allStatic &= llvm::all_of(op->getResultTypes(), isStatic);
  });
  if (allStatic && bindings.empty())
    return success(); // already specialized (possibly fused): nothing to do
  std::map<std::string, bool> used;
  for (auto &[name, value] : bindings)
    used[name] = false;

  // 1. Arguments.
  for (BlockArgument arg : fn.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || type.hasStaticShape())
      continue;
    SmallVector<int64_t> shape(type.getShape());
    for (auto [d, size] : llvm::enumerate(shape)) {
      if (!ShapedType::isDynamic(size))
        continue;
      std::string name = dynamicDimName(fn, arg.getArgNumber(), d);
      auto it = bindings.find(name);
      if (it == bindings.end()) {
        std::string given;
        for (auto &[n, v] : bindings)
          given += (given.empty() ? "" : ", ") + n;
        return fn.emitError() << "dynamic dimension '" << name
                              << "' (argument " << arg.getArgNumber()
                              << ", dimension " << d
                              << ") has no value; pass it as " << name
                              << "=<size>"
                              << (given.empty() ? "" : " (bound: " + given + ")");
      }
      if (it->second > kMaxTensorElements)
        return fn.emitError()
               << "dimension '" << name << "' = " << it->second
               << " (argument " << arg.getArgNumber() << " of @"
               << fn.getSymName() << ", dimension " << d
               << ") is more than the supported 2^40 (" << kMaxTensorElements
               << ")";
      if (it->second < 0)
        return fn.emitError() << "dimension '" << name << "' = " << it->second
                              << " (argument " << arg.getArgNumber()
                              << ", dimension " << d << ") must be >= 0";
      size = it->second;
      used[name] = true;
    }
    // The bound dimensions together may still be too many elements.
    RankedTensorType bound = withShape(type, shape);
    std::string what;
    llvm::raw_string_ostream os(what);
    os << "argument " << arg.getArgNumber() << " of @" << fn.getSymName()
       << " (";
    unsigned n = 0;
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (type.isDynamicDim(d))
        os << (n++ ? ", " : "") << dynamicDimName(fn, arg.getArgNumber(), d)
           << " = " << shape[d];
    os << ")";
    if (failed(verifyTensorSize([&] { return fn.emitError(); }, what, bound)))
      return failure();
    arg.setType(bound);
  }
  for (auto &[name, wasUsed] : used)
    if (!wasUsed)
      return fn.emitError() << "binding '" << name
                            << "' names no dynamic dimension of @"
                            << fn.getSymName();

  // 2. Body, in order.
  for (Operation &op : fn.getBody().front()) {
    if (isa<func::ReturnOp>(op))
      continue;
    if (op.getNumRegions() != 0)
      return op.emitOpError() << "with regions cannot be shape-specialized";
    SmallVector<Type> types;
    if (failed(computeResultTypes(&op, types)))
      return failure();
    for (auto [i, result, type] :
         llvm::enumerate(op.getResults(), types)) {
      auto declared = dyn_cast<RankedTensorType>(result.getType());
      auto computed = cast<RankedTensorType>(type);
      if (declared && failed(verifyCompatibleShape(declared.getShape(),
                                                   computed.getShape())))
        return op.emitOpError()
               << "result declared as " << declared << " but is " << computed
               << " for the bound dimensions";
      // Before any later op computes with it (element counts, reshapes).
      if (failed(verifyTensorSize([&] { return op.emitOpError(); },
                                  "result #" + std::to_string(i) +
                                      " for the bound dimensions",
                                  computed)))
        return failure();
      result.setType(computed);
    }
  }

  // 3. Function type.
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  fn.setFunctionType(FunctionType::get(fn.getContext(),
                                       fn.getBody().front().getArgumentTypes(),
                                       ret.getOperandTypes()));
  return verify(fn);
}

namespace {
struct SpecializeShapesPass
    : llmc::llm::impl::SpecializeShapesPassBase<SpecializeShapesPass> {
  using SpecializeShapesPassBase::SpecializeShapesPassBase;

  void runOnOperation() override {
    std::map<std::string, int64_t> bindings;
    for (const std::string &entry : dims) {
      auto [name, value] = llvm::StringRef(entry).split('=');
      int64_t v;
      if (name.empty() || value.getAsInteger(10, v)) {
        getOperation().emitError()
            << "malformed binding '" << entry << "', expected name=<integer>";
        return signalPassFailure();
      }
      bindings[name.str()] = v;
    }
    if (failed(specializeShapes(getOperation(), bindings)))
      signalPassFailure();
  }
};
} // namespace
