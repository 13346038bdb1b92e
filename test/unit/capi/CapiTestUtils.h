//===- CapiTestUtils.h - helpers of the C API tests ------------------------===//
#ifndef LLMC_TEST_UNIT_CAPI_CAPITESTUTILS_H
#define LLMC_TEST_UNIT_CAPI_CAPITESTUTILS_H

#include "llmc/llmc_c.h"

#include <gtest/gtest.h>

#include <string>

namespace llmc::test {

/// Owns a status; reads code and message.
struct Status {
  explicit Status(llmc_status_t *s) : s(s) {}
  ~Status() { llmc_status_free(s); }
  Status(const Status &) = delete;
  Status &operator=(const Status &) = delete;
  int code() const { return llmc_status_code(s); }
  std::string message() const { return llmc_status_message(s); }
  llmc_status_t *s;
};

inline bool Contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

} // namespace llmc::test

/// Fails the test (returning from it) unless `expr` gives an OK status.
#define EXPECT_LLMC_OK(expr)                                                   \
  do {                                                                         \
    ::llmc::test::Status st_(expr);                                            \
    ASSERT_EQ(st_.code(), 0) << st_.message();                                 \
  } while (0)

#endif // LLMC_TEST_UNIT_CAPI_CAPITESTUTILS_H
