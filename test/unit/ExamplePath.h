//===- ExamplePath.h - where the tests find examples/*.mlir ----------------===//
//
// The test binaries also run from dist/ on the GPU machine, where the source
// tree of the build is not at the path compiled in: LLMC_EXAMPLES_DIR (e.g.
// dist/share/llmc/examples) overrides LLMC_SOURCE_DIR/examples.
//
//===----------------------------------------------------------------------===//
#ifndef LLMC_TEST_UNIT_EXAMPLEPATH_H
#define LLMC_TEST_UNIT_EXAMPLEPATH_H

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace llmc::test {

/// Path of examples/<name>.
inline std::string ExamplePath(const std::string &name) {
  if (const char *dir = std::getenv("LLMC_EXAMPLES_DIR"); dir && *dir)
    return std::string(dir) + "/" + name;
  return std::string(LLMC_SOURCE_DIR) + "/examples/" + name;
}

/// Text of examples/<name>; empty when it cannot be read.
inline std::string ReadExample(const std::string &name) {
  std::ifstream f(ExamplePath(name));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_EXAMPLEPATH_H
