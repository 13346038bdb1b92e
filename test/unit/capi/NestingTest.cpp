// The nesting limit (llmc/Support/ParseSource.h) at the C API: a deeply
// nested source is an invalid-argument status with the location of the
// level that crosses the limit, where MLIR's recursive parser used to
// overflow the stack and kill the host process. Also the scanner's rules
// (what counts as a level) on small sources.
#include "llmc/Support/ParseSource.h"
#include "llmc/llmc_c.h"

#include "gtest/gtest.h"

#include <pthread.h>

#include <string>

namespace {

std::string Repeat(const std::string &s, int n) {
  std::string out;
  out.reserve(s.size() * n);
  for (int i = 0; i < n; ++i)
    out += s;
  return out;
}

std::string NestedModules(int n) {
  return Repeat("module {\n", n) + Repeat("}\n", n);
}

std::string NestedArrays(int n) {
  return "module attributes {llm.deep = " + Repeat("[", n) + Repeat("]", n) +
         "} {}\n";
}

/// n type aliases, each a tuple of the previous one.
std::string TypeAliasChain(int n) {
  std::string s = "!t0 = tuple<f32>\n";
  for (int i = 1; i < n; ++i)
    s += "!t" + std::to_string(i) + " = tuple<!t" + std::to_string(i - 1) +
         ">\n";
  return s + "func.func private @f(!t" + std::to_string(n - 1) + ")\n";
}

const char *kNeg = "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                   "  %y = llm.neg %x : tensor<4xf32>\n"
                   "  return %y : tensor<4xf32>\n"
                   "}\n";

struct Compiler {
  Compiler() {
    llmc_status_t *st = llmc_compiler_create("arch=sm_90a", &c);
    EXPECT_EQ(st, nullptr) << llmc_status_message(st);
    llmc_status_free(st);
  }
  ~Compiler() { llmc_compiler_release(c); }

  /// The status code and message of compiling `text`.
  std::pair<int, std::string> Compile(const std::string &text) {
    llmc_executable_t *exe = nullptr;
    llmc_status_t *st =
        llmc_compile(c, text.data(), text.size(), nullptr, nullptr, &exe);
    std::pair<int, std::string> result(llmc_status_code(st),
                                       llmc_status_message(st));
    llmc_status_free(st);
    llmc_executable_release(exe);
    return result;
  }

  llmc_compiler_t *c = nullptr;
};

bool Contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

TEST(CapiNesting, DeepSourcesAreErrorsNotCrashes) {
  Compiler c;
  struct Case {
    std::string name, text, where;
  } cases[] = {
      {"5000 modules", NestedModules(5000), "<mlir>:257:8: error: '{' nests 257 levels deep"},
      {"10000 arrays", NestedArrays(10000), "<mlir>:1:286: error: '[' nests 257 levels deep"},
      {"20000 type aliases", TypeAliasChain(20000),
       "<mlir>:257:15: error: '!t255' nests 257 levels deep through its alias definitions"},
  };
  for (const Case &k : cases) {
    auto [code, message] = c.Compile(k.text);
    EXPECT_EQ(code, 3) << k.name << ": " << message;
    EXPECT_TRUE(Contains(message, k.where)) << k.name << ": " << message;
    EXPECT_TRUE(Contains(message, "llmc accepts at most 256 levels"))
        << k.name << ": " << message;
  }
  // The compiler is still usable.
  auto [code, message] = c.Compile(kNeg);
  EXPECT_EQ(code, 0) << message;
}

/// A host thread with a 2 MiB stack (the pthread default is 8 MiB) parses,
/// verifies and reports sources at the limit without overflowing it.
TEST(CapiNesting, AtTheLimitFitsInATwoMiBStack) {
  Compiler c;
  struct Job {
    Compiler *c;
    int codes[2] = {-1, -1};
  } job{&c};
  auto body = [](void *p) -> void * {
    Job *j = static_cast<Job *>(p);
    j->codes[0] = j->c->Compile(NestedModules(256)).first;
    j->codes[1] = j->c->Compile(TypeAliasChain(250)).first;
    return nullptr;
  };
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 2 << 20);
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, &attr, body, &job), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_EQ(job.codes[0], 3); // no function to compile
  EXPECT_EQ(job.codes[1], 3); // a declaration only
}

TEST(CheckNesting, CountsEveryBracketKindUpToTheLimit) {
  EXPECT_FALSE(llmc::checkNesting(Repeat("(", 256)));
  auto v = llmc::checkNesting("x\n" + Repeat("([{<", 64) + "(");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->line, 2u);
  EXPECT_EQ(v->column, 257u);
  EXPECT_EQ(v->offset, 2u + 256u);
  EXPECT_EQ(v->message, "'(' nests 257 levels deep; llmc accepts at most 256 "
                        "levels of nested '(', '[', '{' and '<'");
  // Closed brackets give their level back.
  EXPECT_FALSE(llmc::checkNesting(Repeat("[" + Repeat("(", 200) + Repeat(")", 200) + "]", 50)));
  ASSERT_TRUE(llmc::checkNesting("[[[", "", 2));
}

TEST(CheckNesting, StringsCommentsArrowsAndComparisonsDoNotCount) {
  EXPECT_FALSE(llmc::checkNesting("\"" + Repeat("(", 300) + "\" // " + Repeat("{", 300)));
  EXPECT_FALSE(llmc::checkNesting("\"\\\"" + Repeat("<", 300) + "\""));
  // The '>' of '->' and '>=' closes nothing, so these nest 300 levels.
  EXPECT_TRUE(llmc::checkNesting(Repeat("tuple<(i32) -> i32, ", 300)));
  EXPECT_TRUE(llmc::checkNesting(Repeat("[affine_set<(d0) : (d0 >= 0)>, ", 300)));
  // A string ends at its line's end, as in MLIR's lexer.
  EXPECT_TRUE(llmc::checkNesting("\"abc\n" + Repeat("[", 300)));
}

TEST(CheckNesting, AliasUsesCountTheirDefinitionsDepth) {
  // #a nests 200 levels; used at depth 57 it reaches 257.
  std::string def = "#a = " + Repeat("[", 200) + Repeat("]", 200) + "\n";
  EXPECT_FALSE(llmc::checkNesting(def + Repeat("[", 56) + "#a" + Repeat("]", 56)));
  auto v = llmc::checkNesting(def + Repeat("[", 57) + "#a" + Repeat("]", 57));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->line, 2u);
  EXPECT_EQ(v->column, 58u);
  EXPECT_EQ(v->message.substr(0, 43), "'#a' nests 257 levels deep through its alia");
  // `: type` and adjacent groups belong to the definition.
  std::string typed = "#b = dense<1.0> : tensor<" + Repeat("tuple<", 200) + "f32" +
                      Repeat(">", 200) + ">\n";
  EXPECT_TRUE(llmc::checkNesting(typed + Repeat("[", 60) + "#b"));
  EXPECT_TRUE(llmc::checkNesting("!c = " + Repeat("tuple<", 100) + "f32" + Repeat(">", 100) +
                                 "\n!d = " + Repeat("tuple<", 100) + "!c" + Repeat(">", 100) +
                                 "\n" + Repeat("(", 57) + "!d"));
  // The operations after a definition are not part of it.
  EXPECT_FALSE(llmc::checkNesting("#e = [1]\nmodule " + Repeat("{", 200) + Repeat("}", 200) +
                                  "\n" + Repeat("{", 200) + "#e"));
  // Undefined names (dialect attributes, result numbers) add nothing.
  EXPECT_FALSE(llmc::checkNesting(Repeat("[", 256) + "#llm.x !llm.y %r#1"));
}

TEST(CheckNesting, SplitMarkerStartsAFreshScan) {
  std::string text = Repeat("{", 200) + "\n// -----\n" + Repeat("{", 200);
  EXPECT_TRUE(llmc::checkNesting(text));
  EXPECT_FALSE(llmc::checkNesting(text, "// -----"));
  // Aliases are per chunk too.
  std::string alias = "#a = " + Repeat("[", 200) + Repeat("]", 200) + "\n// -----\n" +
                      Repeat("[", 100) + "#a";
  EXPECT_TRUE(llmc::checkNesting(alias));
  EXPECT_FALSE(llmc::checkNesting(alias, "// -----"));
  // A longer dash run is not a split (MLIR warns of a near miss).
  EXPECT_TRUE(llmc::checkNesting(Repeat("{", 200) + "\n// ------\n" + Repeat("{", 200),
                                 "// -----"));
}

} // namespace
