//===- StatusMacros.h - absl::StatusOr helpers shared by llmc -*- C++ -*-===//
//
// Header-only (absl only), so the kernel generators (lib/Target/CUDA, no
// MLIR), the reference executor and the lowering use the same macro.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_SUPPORT_STATUSMACROS_H
#define LLMC_SUPPORT_STATUSMACROS_H

#include "absl/status/statusor.h"

#include <utility>

/// `lhs = *expr;` when `expr` (an absl::StatusOr) is ok, else returns its
/// status from the enclosing function. `lhs` may declare a variable
/// (`LLMC_ASSIGN_OR_RETURN(int x, f());`).
#define LLMC_ASSIGN_OR_RETURN(lhs, expr)                                       \
  LLMC_ASSIGN_OR_RETURN_IMPL(LLMC_STATUS_CONCAT(llmcStatusOr, __LINE__), lhs, expr)
#define LLMC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                             \
  auto tmp = (expr);                                                           \
  if (!tmp.ok())                                                               \
    return tmp.status();                                                       \
  lhs = std::move(*tmp)
#define LLMC_STATUS_CONCAT(a, b) LLMC_STATUS_CONCAT_IMPL(a, b)
#define LLMC_STATUS_CONCAT_IMPL(a, b) a##b

#endif // LLMC_SUPPORT_STATUSMACROS_H
