//===- PlanArena.cpp - llmc-plan-arena -----------------------------------===//
//
// First fit of the arena buffers over their liveness intervals (see the pass
// description in Passes.td). The algorithm, its order and its tie-breaking
// are those the lowering used before the pass existed, so offsets are
// byte-identical (test/golden).
//
//===----------------------------------------------------------------------===//

#include "Exec/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <vector>

namespace llmc::exec {
#define GEN_PASS_DEF_PLANARENAPASS
#include "Exec/Transforms/Passes.h.inc"
} // namespace llmc::exec

using namespace mlir;
using namespace llmc::exec;

namespace {

struct PlanArenaPass : llmc::exec::impl::PlanArenaPassBase<PlanArenaPass> {
  using PlanArenaPassBase::PlanArenaPassBase;

  void runOnOperation() override {
    ExecutableOp exe = getOperation();
    struct Item {
      BufferOp buffer;
      int index; // buffer order: the tie-break
      int64_t first, last;
    };
    std::vector<Item> items;
    int index = 0;
    for (BufferOp b : exe.getBody().front().getOps<BufferOp>()) {
      if (std::optional<ArrayRef<int64_t>> live = b.getLive())
        items.push_back({b, index, (*live)[0], (*live)[1]});
      ++index;
    }
    // First fit over a list of live blocks sorted by offset.
    struct Block {
      int64_t offset, size, last;
    };
    std::vector<Block> live;
    std::sort(items.begin(), items.end(), [](const Item &a, const Item &b) {
      return a.first != b.first ? a.first < b.first : a.index < b.index;
    });
    int64_t peak = 0;
    int64_t align = alignment;
    if (align < 1 || align > (int64_t(1) << 30) || (align & (align - 1)) != 0) {
      exe.emitOpError() << "llmc-plan-arena: expected alignment a power of two "
                           "in [1, 2^30], found "
                        << align;
      return signalPassFailure();
    }
    // Every offset and size stays below 2^62, so no sum below overflows.
    constexpr int64_t kLimit = int64_t(1) << 62;
    Builder builder(&getContext());
    for (Item &item : items) {
      llvm::erase_if(live, [&](const Block &b) { return b.last < item.first; });
      std::sort(live.begin(), live.end(),
                [](const Block &a, const Block &b) { return a.offset < b.offset; });
      if (item.buffer.getBytes() > kLimit - align) {
        item.buffer.emitOpError() << "llmc-plan-arena: expected an arena buffer "
                                     "of less than 2^62 bytes, found "
                                  << item.buffer.getBytes();
        return signalPassFailure();
      }
      int64_t size = (item.buffer.getBytes() + align - 1) / align * align;
      int64_t offset = 0;
      for (const Block &b : live) {
        if (offset + size <= b.offset)
          break;
        offset = std::max(offset, b.offset + b.size);
      }
      if (offset > kLimit - size) {
        item.buffer.emitOpError() << "llmc-plan-arena: the arena would exceed "
                                     "2^62 bytes placing this buffer of "
                                  << item.buffer.getBytes() << " bytes at offset "
                                  << offset;
        return signalPassFailure();
      }
      item.buffer.setOffsetAttr(builder.getI64IntegerAttr(offset));
      live.push_back({offset, size, item.last});
      peak = std::max(peak, offset + size);
    }
    exe.setArenaBytesAttr(builder.getI64IntegerAttr(peak));
  }
};

} // namespace
