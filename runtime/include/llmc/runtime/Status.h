// Status helpers shared by the llmc runtime: early-return macros and the
// split between user-input errors and internal (llmc bug) errors.
#ifndef LLMC_RUNTIME_STATUS_H
#define LLMC_RUNTIME_STATUS_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define LLMC_RT_CONCAT_INNER(a, b) a##b
#define LLMC_RT_CONCAT(a, b) LLMC_RT_CONCAT_INNER(a, b)

/// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define LLMC_RT_RETURN_IF_ERROR(expr)                                          \
  do {                                                                         \
    ::absl::Status llmc_rt_status_ = (expr);                                   \
    if (!llmc_rt_status_.ok()) return llmc_rt_status_;                         \
  } while (0)

/// `LLMC_RT_ASSIGN_OR_RETURN(auto x, F())` declares/assigns x from a StatusOr
/// or returns its error status.
#define LLMC_RT_ASSIGN_OR_RETURN(lhs, expr)                                    \
  LLMC_RT_ASSIGN_OR_RETURN_IMPL(LLMC_RT_CONCAT(llmc_rt_sor_, __LINE__), lhs,   \
                                expr)
#define LLMC_RT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                          \
  auto tmp = (expr);                                                           \
  if (!tmp.ok()) return std::move(tmp).status();                               \
  lhs = std::move(tmp).value()

namespace llmc::rt {

/// An invariant of llmc itself was violated (a bug in llmc, not in the
/// caller's input). The message is prefixed so it never reads like a user
/// mistake.
template <typename... Args>
absl::Status InternalBug(const Args&... args) {
  return absl::InternalError(
      absl::StrCat("llmc internal error (please report): ", args...));
}

/// Prefixes `status`'s message with `context` ("while X: <original>"),
/// keeping its code. OK passes through unchanged.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_STATUS_H
