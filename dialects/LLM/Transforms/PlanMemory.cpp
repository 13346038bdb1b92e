//===- PlanMemory.cpp - liveness-based arena planning ---------------------===//
//
// One arena per function: every intermediate tensor gets a byte offset;
// buffers of dead values are reused (first fit, in program order).
//
//===----------------------------------------------------------------------===//

#include "LLM/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace llmc::llm {
#define GEN_PASS_DEF_PLANMEMORYPASS
#include "LLM/Transforms/Passes.h.inc"
} // namespace llmc::llm

#include "llvm/Support/MathExtras.h"

#include <optional>

using namespace mlir;
using namespace llmc::llm;

namespace {

/// Bytes of a static tensor, or nullopt when the count overflows int64.
std::optional<int64_t> byteSize(RankedTensorType t) {
  int64_t bytes = (t.getElementTypeBitWidth() + 7) / 8;
  for (int64_t d : t.getShape())
    if (llvm::MulOverflow(bytes, d, bytes))
      return std::nullopt;
  return bytes;
}

struct PlanMemoryPass : llmc::llm::impl::PlanMemoryPassBase<PlanMemoryPass> {
  using PlanMemoryPassBase::PlanMemoryPassBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.isExternal())
      return;
    if (alignment <= 0 || (alignment & (alignment - 1)) != 0) {
      fn.emitOpError() << "alignment must be a positive power of two, found "
                       << static_cast<int64_t>(alignment);
      return signalPassFailure();
    }
    if (!fn.getBody().hasOneBlock()) {
      fn.emitOpError() << "expected a single-block body for memory planning, "
                          "found "
                       << fn.getBody().getBlocks().size() << " blocks";
      return signalPassFailure();
    }
    Block &body = fn.getBody().front();
    for (Operation &op : body)
      for (Value r : op.getResults()) {
        auto t = dyn_cast<RankedTensorType>(r.getType());
        if (!t) {
          op.emitOpError() << "result of type " << r.getType()
                           << " cannot be placed in the arena (expected a "
                              "ranked tensor)";
          return signalPassFailure();
        }
        if (!t.hasStaticShape()) {
          // Planned after shape specialization.
          if (report)
            mlir::emitRemark(fn.getLoc()) << "not planned: dynamic shapes (run "
                               "llmc-specialize-shapes first)";
          return;
        }
      }

    // Liveness, in op indices; a value's root lives until the last use of
    // any of its views.
    llvm::DenseMap<Operation *, int> index;
    int n = 0;
    for (Operation &op : body)
      index[&op] = n++;
    llvm::DenseMap<Value, int> first, last;
    llvm::DenseSet<Value> excluded; // arguments, returned, constants
    SmallVector<Value> order;
    for (Operation &op : body) {
      for (Value operand : op.getOperands()) {
        Value root = aliasRoot(operand);
        last[root] = std::max(last.lookup(root), index[&op]);
      }
      // Returned values are written into their output buffers in place, up
      // to reshapes; a returned strided view is copied there and its source
      // stays in the arena.
      if (isa<func::ReturnOp>(op))
        for (Value v : op.getOperands())
          excluded.insert(storageRoot(v));
      for (Value r : op.getResults()) {
        if (aliasRoot(r) != r)
          continue; // a view
        if (matchPattern(r, m_Constant())) {
          excluded.insert(r);
          continue;
        }
        first[r] = index[&op];
        last[r] = std::max(last.lookup(r), index[&op]);
        order.push_back(r);
      }
    }

    struct Live { int64_t offset, size; int last; };
    std::vector<Live> live;
    llvm::DenseMap<Value, int64_t> offsets;
    int64_t peak = 0, sum = 0;
    for (Value v : order) {
      if (excluded.contains(v))
        continue;
      int at = first[v];
      llvm::erase_if(live, [&](const Live &l) { return l.last < at; });
      llvm::sort(live, [](const Live &a, const Live &b) {
        return a.offset < b.offset;
      });
      std::optional<int64_t> bytes = byteSize(cast<RankedTensorType>(v.getType()));
      if (!bytes || *bytes > (int64_t(1) << 56)) {
        if (Operation *def = v.getDefiningOp())
          def->emitOpError() << "result of type " << v.getType()
                             << " is too large to place in an arena";
        else
          fn.emitError() << "a value of type " << v.getType()
                         << " is too large to place in an arena";
        return signalPassFailure();
      }
      int64_t size = (*bytes + alignment - 1) / alignment * alignment;
      int64_t offset = 0;
      for (const Live &l : live) {
        if (offset + size <= l.offset)
          break;
        offset = std::max(offset, l.offset + l.size);
      }
      live.push_back({offset, size, last[v]});
      offsets[v] = offset;
      peak = std::max(peak, offset + size);
      sum += size;
    }

    Builder b(fn.getContext());
    for (Operation &op : body) {
      if (op.getNumResults() == 0)
        continue;
      SmallVector<int64_t> perResult;
      bool any = false;
      for (Value r : op.getResults()) {
        auto it = offsets.find(aliasRoot(r));
        bool placed = it != offsets.end();
        any |= placed;
        perResult.push_back(placed ? it->second : -1);
      }
      if (!any) {
        op.removeAttr("llm.arena_offset");
        continue;
      }
      if (op.getNumResults() == 1)
        op.setAttr("llm.arena_offset", b.getI64IntegerAttr(perResult[0]));
      else
        op.setAttr("llm.arena_offset", b.getDenseI64ArrayAttr(perResult));
    }
    fn->setAttr("llm.arena_bytes", b.getI64IntegerAttr(peak));
    if (report)
      mlir::emitRemark(fn.getLoc()) << "arena peak " << peak
                      << " bytes, sum of intermediates " << sum << " bytes";
  }
};
} // namespace
