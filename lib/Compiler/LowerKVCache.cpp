//===- LowerKVCache.cpp - KV-cache append ---------------------------------===//
//
// llm.kv_cache_append: new K/V rows written at a position of the cache, in
// place when the cache is donated.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

namespace llmc::codegen {

/// kv_cache_append(cache, update, pos) => [copy of the cache,] one kernel.
static absl::Status lowerKVCacheAppend(KVCacheAppendOp o, Lowering &l) {
  // Value semantics: result = cache with rows replaced. A donated cache
  // is updated in place; otherwise copy it into the result's storage
  // first, then write the new rows there.
  if (!updatesInPlace(o))
    if (auto st = l.emitCopyInto(o.getResult(), o.getCache(), o); !st.ok())
      return st;
  auto c = tensorType(o.getCache());
  auto u = tensorType(o.getUpdate());
  cu::KvAppendConfig cfg;
  cfg.dtype = scalarOf(o.getCache());
  cfg.heads_kv = c.getDimSize(2);
  cfg.head_dim = c.getDimSize(3);
  cfg.pos = tensorType(o.getPosition()).getElementType().isInteger(32)
                ? cu::PositionSource::kScalarI32
                : cu::PositionSource::kScalarI64;
  int err = l.newArenaBuffer(128, l.getStep(), l.getStep());
  // The kernel appends K and V together; pass the same tensor twice.
  std::vector<KernelArg> args = {
      l.ptrArg(o.getResult()), l.ptrArg(o.getResult()),   l.ptrArg(o.getUpdate()),
      l.ptrArg(o.getUpdate()), l.ptrArg(o.getPosition()), l.bufArg(err),
      i64Arg(c.getDimSize(0)), i64Arg(c.getDimSize(1)),   i64Arg(u.getDimSize(1))};
  return l.launchGenerated(cu::EmitKvAppend(cfg),
                           cu::KvAppendLaunch(cfg, c.getDimSize(0), u.getDimSize(1)),
                           args, o);
}

/// paged_kv_append(pages, update, block table, cu_seqlens_q, seq_lens) =>
/// [copy of the pages,] one kernel (one block per new token).
static absl::Status lowerPagedKVAppend(PagedKVAppendOp o, Lowering &l) {
  if (!updatesInPlace(o))
    if (auto st = l.emitCopyInto(o.getResult(), o.getPages(), o); !st.ok())
      return st;
  auto pages = tensorType(o.getPages());
  auto bt = tensorType(o.getBlockTable());
  int64_t t = tensorType(o.getUpdate()).getDimSize(0);
  if (t == 0)
    return absl::OkStatus();
  cu::PagedKvAppendConfig cfg;
  cfg.dtype = scalarOf(o.getPages());
  if (o.getScale())  // a float update quantized into fp8 pages
    cfg.quantize_from = scalarOf(o.getUpdate());
  cfg.heads_kv = pages.getDimSize(2);
  cfg.head_dim = pages.getDimSize(3);
  cfg.page_size = pages.getDimSize(1);
  cfg.block_table = scalarOf(o.getBlockTable());
  cfg.cu_seqlens = scalarOf(o.getCuSeqlensQ());
  cfg.seq_lens = scalarOf(o.getSeqLens());
  int err = l.newArenaBuffer(128, l.getStep(), l.getStep());
  std::vector<KernelArg> args = {
      l.ptrArg(o.getResult()),      l.ptrArg(o.getUpdate()),  l.ptrArg(o.getBlockTable()),
      l.ptrArg(o.getCuSeqlensQ()),  l.ptrArg(o.getSeqLens()), l.bufArg(err),
      i64Arg(t),                    i64Arg(bt.getDimSize(0)), i64Arg(bt.getDimSize(1)),
      i64Arg(pages.getDimSize(0))};
  if (o.getScale())  // after the update, as the kernel takes it
    args.insert(args.begin() + 2, l.ptrArg(o.getScale()));
  return l.launchGenerated(cu::EmitPagedKvAppend(cfg), cu::PagedKvAppendLaunch(cfg, t), args, o);
}

void populateKVCacheLowerings(OpLoweringSet &set) {
  set.add<KVCacheAppendOp>(lowerKVCacheAppend);
  set.add<PagedKVAppendOp>(lowerPagedKVAppend);
}

} // namespace llmc::codegen
