// llmc_compile reads exactly `mlir_len` bytes of `mlir`: the text need not
// be NUL-terminated. MLIR's lexer stops at a NUL after the buffer, so a text
// ending inside a token (a string, a number, an identifier) made it read past
// the caller's buffer (SIGSEGV when the buffer ends at a page boundary). The
// texts here end right before an inaccessible page.
#include "llmc/llmc_c.h"

#include "gtest/gtest.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace {

/// Two pages, the second inaccessible; Place() copies a text so that it ends
/// where the inaccessible page begins.
class GuardedBuffer {
public:
  GuardedBuffer() : page_(sysconf(_SC_PAGESIZE)) {
    base_ = static_cast<char *>(mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(mprotect(base_ + page_, page_, PROT_NONE), 0);
  }
  ~GuardedBuffer() { munmap(base_, 2 * page_); }

  const char *Place(const std::string &text) {
    char *at = base_ + page_ - text.size();
    std::memcpy(at, text.data(), text.size());
    return at;
  }

private:
  long page_;
  char *base_;
};

TEST(CapiText, TextEndingInsideATokenIsNotReadPastItsLength) {
  llmc_compiler_t *compiler = nullptr;
  llmc_status_free(llmc_compiler_create("arch=sm_90a", &compiler));
  ASSERT_NE(compiler, nullptr);
  GuardedBuffer buffer;
  const char *texts[] = {
      "func.func @f() { \"abc",          // unterminated string
      "module attributes {llm.x = \"\\", // escape at the end
      "module attributes {llm.x = 12345",
      "module attributes {llm.x = 1.0e",
      "module attributes {llm.x = 0x",
      "func.func @f(%x: tensor<4xf32",
      "#a = affine_map<(d0) -> (d0",
      "module {} %",
      "module {} @\"x",
      "module {} ^bb",
      "module {} !llm.",
  };
  for (const char *text : texts) {
    std::string s = text;
    llmc_executable_t *exe = nullptr;
    llmc_status_t *st = llmc_compile(compiler, buffer.Place(s), s.size(),
                                     nullptr, nullptr, &exe);
    EXPECT_EQ(llmc_status_code(st), 3) << text;
    EXPECT_NE(std::string(llmc_status_message(st)).find("<mlir>:1:"),
              std::string::npos)
        << text << ": " << llmc_status_message(st);
    EXPECT_EQ(exe, nullptr);
    llmc_status_free(st);
  }
  // A valid program ending at the page boundary compiles.
  std::string neg = "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                    "  %y = llm.neg %x : tensor<4xf32>\n"
                    "  return %y : tensor<4xf32>\n"
                    "}";
  llmc_executable_t *exe = nullptr;
  llmc_status_t *st = llmc_compile(compiler, buffer.Place(neg), neg.size(),
                                   nullptr, nullptr, &exe);
  EXPECT_EQ(st, nullptr) << llmc_status_message(st);
  llmc_status_free(st);
  llmc_executable_release(exe);
  llmc_compiler_release(compiler);
}

} // namespace
