#include "llmc/runtime/SpecializationCache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {

int64_t BucketPolicy::Bucket(int64_t v) const {
  switch (kind) {
    case None: return v;
    case MultipleOf: {
      int64_t m = std::max<int64_t>(multiple, 1);
      int64_t up;
      if (v <= 0) return 0;
      if (__builtin_add_overflow(v, m - 1, &up)) return -1;
      return up / m * m;
    }
    case PowerOfTwo: {
      // 2^62 is the largest power of two an int64 holds (2^63 is not).
      if (v > (int64_t(1) << 62)) return -1;
      int64_t p = 1;
      while (p < v) p <<= 1;
      return p;
    }
  }
  return v;
}

SpecializationCache::SpecializationCache(
    std::vector<InputShapeSpec> inputs,
    absl::flat_hash_map<std::string, BucketPolicy> policies, CompileFn compile,
    int recompile_limit)
    : inputs_(std::move(inputs)),
      policies_(std::move(policies)),
      compile_(std::move(compile)),
      limit_(recompile_limit) {}

absl::StatusOr<DimBindings> SpecializationCache::Bind(
    const std::vector<std::vector<int64_t>>& shapes) const {
  if (shapes.size() != inputs_.size())
    return absl::InvalidArgumentError(absl::StrCat(
        "expected ", inputs_.size(), " inputs, got ", shapes.size()));
  DimBindings dims;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const InputShapeSpec& spec = inputs_[i];
    const std::vector<int64_t>& shape = shapes[i];
    if (shape.size() != spec.dims.size())
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", spec.name, "': expected rank ", spec.dims.size(),
          ", got rank ", shape.size(), " [", absl::StrJoin(shape, ","), "]"));
    for (size_t d = 0; d < shape.size(); ++d) {
      const DimSpec& ds = spec.dims[d];
      if (shape[d] < 0)
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", spec.name, "' dim ", d, " is negative: ", shape[d]));
      if (ds.symbol.empty()) {
        if (shape[d] != ds.size)
          return absl::InvalidArgumentError(absl::StrCat(
              "input '", spec.name, "' dim ", d, ": expected static size ",
              ds.size, ", got ", shape[d]));
        continue;
      }
      auto [it, inserted] = dims.emplace(ds.symbol, shape[d]);
      if (!inserted && it->second != shape[d])
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", spec.name, "' dim ", d, ": dynamic dim '", ds.symbol,
            "' is ", shape[d], " here but ", it->second, " in an earlier input"));
    }
  }
  return dims;
}

absl::StatusOr<SpecializationCache::Entry> SpecializationCache::Get(
    const std::vector<std::vector<int64_t>>& shapes) {
  LLMC_RT_ASSIGN_OR_RETURN(DimBindings concrete, Bind(shapes));
  DimBindings bucketed;
  std::vector<std::pair<std::string, int64_t>> key;
  for (const auto& [sym, v] : concrete) {
    auto pol = policies_.find(sym);
    if (pol != policies_.end() && pol->second.kind == BucketPolicy::MultipleOf &&
        pol->second.multiple <= 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket policy of dynamic dim '", sym, "': multiple-of ",
          pol->second.multiple, " (expected a multiple > 0)"));
    int64_t b = pol == policies_.end() ? v : pol->second.Bucket(v);
    if (b < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "dynamic dim '", sym, "' is ", v, ", which has no ",
          pol->second.kind == BucketPolicy::PowerOfTwo
              ? std::string("power-of-two")
              : absl::StrCat("multiple-of-", pol->second.multiple),
          " bucket within int64"));
    if (b < v) return InternalBug("bucket ", b, " below value ", v, " for ", sym);
    bucketed[sym] = b;
    key.emplace_back(sym, b);
  }
  std::sort(key.begin(), key.end());

  absl::MutexLock lock(&mu_);
  for (const auto& [sym, v] : concrete) {
    auto& vals = seen_[sym];
    if (std::find(vals.begin(), vals.end(), v) == vals.end()) vals.push_back(v);
  }
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    ++stats_.hits;
    return Entry{it->second, std::move(concrete), std::move(bucketed)};
  }
  ++stats_.misses;
  if (static_cast<int>(entries_.size()) >= limit_) {
    std::vector<std::string> parts;
    for (const auto& [sym, vals] : seen_)
      parts.push_back(absl::StrCat("'", sym, "' saw [", absl::StrJoin(vals, ", "),
                                   "]"));
    std::vector<std::string> wanted;
    for (const auto& [sym, b] : key) wanted.push_back(absl::StrCat(sym, "=", b));
    return absl::ResourceExhaustedError(absl::StrCat(
        "recompile limit of ", limit_, " specializations reached; new ",
        "specialization {", absl::StrJoin(wanted, ", "),
        "} refused. Dynamic dims: ", absl::StrJoin(parts, "; "),
        ". Use a bucketing policy (multiple-of-N or power-of-two) for the dims "
        "that vary, or raise the limit"));
  }
  auto exe = compile_(bucketed);
  if (!exe.ok()) return exe.status();
  if (!*exe) return InternalBug("compile callback returned a null executable");
  ++stats_.compiles;
  entries_.emplace(key, *exe);
  return Entry{*exe, std::move(concrete), std::move(bucketed)};
}

SpecializationStats SpecializationCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

int SpecializationCache::num_specializations() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(entries_.size());
}

}  // namespace llmc::rt
