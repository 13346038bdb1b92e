// PlanCollectiveJoins (Session.h): which launches must wait for which
// collectives, from the byte ranges each launch reads and writes.
#include <algorithm>
#include <utility>
#include <vector>

#include "llmc/runtime/Session.h"

namespace llmc::rt {

// ---------------------------------------------------------------------------
// Collective dependencies
// ---------------------------------------------------------------------------
namespace {

/// A byte range of one memory space: the arena, or one input / output /
/// constant tensor.
struct Region {
  std::pair<int, int> space;  // (0 arena | 1 input | 2 output | 3 constant, index)
  int64_t lo = 0, hi = 0;
  bool write = false;
};

void AddRegion(const Executable& exe, int buffer, bool write,
               std::vector<Region>* out) {
  if (buffer < 0 || buffer >= static_cast<int>(exe.buffers.size())) return;
  const Buffer& b = exe.buffers[buffer];
  Region r;
  r.write = write;
  switch (b.kind) {
    case Buffer::Arena:
      r.space = {0, 0};
      r.lo = b.arena_offset;
      r.hi = b.arena_offset + b.bytes;
      break;
    case Buffer::Input:
      r.space = {1, b.io_index};
      r.hi = b.bytes;
      break;
    case Buffer::Output: {
      int alias = b.io_index >= 0 && b.io_index < static_cast<int>(exe.outputs.size())
                      ? exe.outputs[b.io_index].alias_input
                      : -1;
      r.space = alias >= 0 ? std::make_pair(1, alias) : std::make_pair(2, b.io_index);
      r.hi = b.bytes;
      break;
    }
    case Buffer::Constant:
    case Buffer::Persistent:
      r.space = {3, b.id};
      r.hi = b.bytes;
      break;
  }
  // Zero-sized tensors still get a one-byte range: cheap and conservative.
  r.hi = std::max(r.hi, r.lo + 1);
  out->push_back(r);
}

std::vector<Region> RegionsOf(const Executable& exe, const Launch& l) {
  std::vector<Region> out;
  switch (l.kind) {
    case Launch::Kernel:
      for (const Arg& a : l.args)
        if (a.kind == Arg::BufferPtr) AddRegion(exe, a.buffer, true, &out);
      break;
    case Launch::Gemm: {
      const GemmSpec& g = exe.gemms[l.gemm];
      for (const BufferRef* r : {&g.a, &g.b, &g.c, &g.bias, &g.scale_a, &g.scale_b})
        AddRegion(exe, r->buffer, false, &out);
      AddRegion(exe, g.d.buffer, true, &out);
      break;
    }
    case Launch::Collective: {
      const CollectiveSpec& c = exe.collectives[l.collective];
      AddRegion(exe, c.send.buffer, false, &out);
      AddRegion(exe, c.recv.buffer, true, &out);
      break;
    }
    case Launch::Copy:
      AddRegion(exe, l.src.buffer, false, &out);
      AddRegion(exe, l.dst.buffer, true, &out);
      break;
  }
  return out;
}

bool Conflict(const std::vector<Region>& a, const std::vector<Region>& b) {
  for (const Region& x : a)
    for (const Region& y : b)
      if ((x.write || y.write) && x.space == y.space && x.lo < y.hi && y.lo < x.hi)
        return true;
  return false;
}

}  // namespace

std::vector<std::vector<int>> PlanCollectiveJoins(const Executable& exe) {
  std::vector<std::vector<int>> joins(exe.launches.size());
  for (size_t j = 0; j < exe.launches.size(); ++j) {
    if (exe.launches[j].kind != Launch::Collective) continue;
    std::vector<Region> mine = RegionsOf(exe, exe.launches[j]);
    for (size_t i = j + 1; i < exe.launches.size(); ++i) {
      if (exe.launches[i].kind == Launch::Collective) continue;
      if (Conflict(mine, RegionsOf(exe, exe.launches[i]))) {
        joins[i].push_back(static_cast<int>(j));
        break;
      }
    }
  }
  return joins;
}

std::vector<char> ProgrammaticLaunches(const Executable& exe,
                                       const std::vector<std::vector<int>>& joins) {
  std::vector<char> programmatic(exe.launches.size(), 0);
  const size_t first = static_cast<size_t>(std::max(exe.num_prepare_launches, 0));
  for (size_t i = first + 1; i < exe.launches.size(); ++i) {
    const Launch& l = exe.launches[i];
    const Launch& prev = exe.launches[i - 1];
    programmatic[i] = l.kind == Launch::Kernel && prev.kind == Launch::Kernel &&
                      prev.attention < 0 && l.kernel >= 0 && static_cast<size_t>(l.kernel) < exe.kernels.size() &&
                      exe.kernels[l.kernel].grid_dependency &&
                      (i >= joins.size() || joins[i].empty());
  }
  return programmatic;
}

}  // namespace llmc::rt
