// Shape specialization cache: maps the concrete shapes of a call to an
// Executable compiled for (bucketed) values of the dynamic dims, with guards
// and a recompile limit.
#ifndef LLMC_RUNTIME_SPECIALIZATIONCACHE_H
#define LLMC_RUNTIME_SPECIALIZATIONCACHE_H

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "llmc/runtime/Executable.h"

namespace llmc::rt {

/// One dimension of an input: a static size, or a named dynamic dim.
struct DimSpec {
  int64_t size = -1;   // >= 0: static
  std::string symbol;  // non-empty: dynamic
  static DimSpec Static(int64_t n) { return {n, ""}; }
  static DimSpec Dynamic(std::string s) { return {-1, std::move(s)}; }
};

struct InputShapeSpec {
  std::string name;
  std::vector<DimSpec> dims;
};

/// How a dynamic dim's concrete value is rounded up to the value compiled for.
struct BucketPolicy {
  enum Kind { None, MultipleOf, PowerOfTwo };
  Kind kind = None;
  int64_t multiple = 1;  // MultipleOf only, > 0
  /// Bucketed value for concrete `v` >= 0 (>= v), or -1 when that value
  /// does not fit in int64 (v above 2^62 for PowerOfTwo, within `multiple`
  /// of INT64_MAX for MultipleOf); SpecializationCache::Get reports it.
  int64_t Bucket(int64_t v) const;
};

using DimBindings = absl::flat_hash_map<std::string, int64_t>;
using CompileFn = std::function<absl::StatusOr<std::shared_ptr<Executable>>(
    const DimBindings& dims)>;

struct SpecializationStats {
  int64_t hits = 0, misses = 0, compiles = 0;
};

/// Thread-safe; compiles run under the cache lock (one at a time).
class SpecializationCache {
 public:
  /// `policies` maps dim symbols to a policy (absent: None). At most
  /// `recompile_limit` specializations are compiled.
  SpecializationCache(std::vector<InputShapeSpec> inputs,
                      absl::flat_hash_map<std::string, BucketPolicy> policies,
                      CompileFn compile, int recompile_limit = 8);

  struct Entry {
    std::shared_ptr<Executable> executable;
    /// Concrete values of the dynamic dims in this call.
    DimBindings concrete;
    /// Values the executable was compiled for (the caller pads inputs up to
    /// these). Guards: concrete <= bucketed for each dim; static dims equal.
    DimBindings bucketed;
  };

  /// Errors: InvalidArgument when shapes contradict the spec (wrong count or
  /// rank, static dim mismatch, one symbol bound to two values) naming input,
  /// dim and expected vs actual, or when a dim's policy has no bucket for its
  /// value (a multiple-of policy with multiple <= 0, a bucket beyond int64); ResourceExhausted when a new specialization
  /// would exceed the recompile limit (names each dim and the values seen);
  /// the compile callback's error otherwise.
  absl::StatusOr<Entry> Get(const std::vector<std::vector<int64_t>>& shapes);

  SpecializationStats stats() const;
  int num_specializations() const;

 private:
  absl::StatusOr<DimBindings> Bind(
      const std::vector<std::vector<int64_t>>& shapes) const;

  std::vector<InputShapeSpec> inputs_;
  absl::flat_hash_map<std::string, BucketPolicy> policies_;
  CompileFn compile_;
  int limit_;
  mutable absl::Mutex mu_;
  // Sorted (symbol, bucketed value) pairs -> executable.
  std::map<std::vector<std::pair<std::string, int64_t>>,
           std::shared_ptr<Executable>>
      entries_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<int64_t>> seen_ ABSL_GUARDED_BY(mu_);
  SpecializationStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_SPECIALIZATIONCACHE_H
