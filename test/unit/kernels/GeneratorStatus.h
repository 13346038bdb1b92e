//===- GeneratorStatus.h - unwrapping kernel generator results in tests ---===//
#ifndef LLMC_TEST_UNIT_KERNELS_GENERATORSTATUS_H
#define LLMC_TEST_UNIT_KERNELS_GENERATORSTATUS_H

#include "absl/status/statusor.h"

#include <gtest/gtest.h>

#include <utility>

namespace llmc::test {

/// The value of a generator result that the test expects to succeed; a
/// failure is recorded (with the generator's message) and T{} returned, so
/// the test goes on and reports whatever else fails.
template <typename T> T Unwrap(absl::StatusOr<T> result) {
  if (!result.ok()) {
    ADD_FAILURE() << "kernel generator failed: " << result.status();
    return T{};
  }
  return *std::move(result);
}

} // namespace llmc::test

#endif
