//===- ReferenceTestUtils.h - helpers for reference executor tests -*- C++ -*-===//

#ifndef LLMC_TEST_UNIT_COMPILER_REFERENCETESTUTILS_H
#define LLMC_TEST_UNIT_COMPILER_REFERENCETESTUTILS_H

#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/Pipelines/Pipeline.h"
#include "llmc/InitAllDialects.h"
#include "llmc/Reference/ReferenceExecutor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace llmc::reference::testing {

/// The first func.func of `m`, or null.
inline mlir::func::FuncOp firstFunc(mlir::ModuleOp m) {
  for (auto fn : m.getOps<mlir::func::FuncOp>())
    return fn;
  return nullptr;
}

/// The text of `func.func @name` in the test source file `path` (relative
/// to the repository root), from its first line to its closing brace; a
/// test failure and "" when the file or the function is missing. Lets unit
/// tests run the functions of a lit test instead of copies of them.
inline std::string functionFromFile(const std::string &path, const std::string &name) {
  std::ifstream in(std::string(LLMC_SOURCE_DIR) + "/" + path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t begin = text.find("func.func @" + name + "(");
  size_t end = begin == std::string::npos ? begin : text.find("\n}\n", begin);
  if (end == std::string::npos) {
    ADD_FAILURE() << "no func.func @" << name << " in " << path;
    return "";
  }
  return text.substr(begin, end + 3 - begin);
}

/// How many ops nested in `root` (`root` included) satisfy `pred`.
inline int countOps(mlir::Operation *root,
                    llvm::function_ref<bool(mlir::Operation *)> pred) {
  int n = 0;
  root->walk([&](mlir::Operation *op) { n += pred(op) ? 1 : 0; });
  return n;
}

class ReferenceTest : public ::testing::Test {
protected:
  ReferenceTest() {
    mlir::DialectRegistry registry;
    llmc::registerAllDialects(registry);
    ctx.appendDialectRegistry(registry);
    ctx.loadAllAvailableDialects();
  }

  /// Parses `src` and returns its first func.func (null, with a test failure,
  /// when parsing fails).
  mlir::func::FuncOp parse(const std::string &src) {
    module = mlir::parseSourceString<mlir::ModuleOp>(src, &ctx);
    if (!module) {
      ADD_FAILURE() << "failed to parse:\n" << src;
      return nullptr;
    }
    for (auto fn : module->getOps<mlir::func::FuncOp>())
      return fn;
    ADD_FAILURE() << "no func.func in:\n" << src;
    return nullptr;
  }

  /// Evaluates `src` on `inputs`, failing the test on an error.
  std::vector<HostTensor> run(const std::string &src,
                              const std::vector<HostTensor> &inputs) {
    mlir::func::FuncOp fn = parse(src);
    if (!fn)
      return {};
    absl::StatusOr<std::vector<HostTensor>> r = Evaluate(fn, inputs);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<HostTensor>{};
  }

  absl::Status runStatus(const std::string &src,
                         const std::vector<HostTensor> &inputs) {
    mlir::func::FuncOp fn = parse(src);
    if (!fn)
      return absl::InternalError("parse failed");
    return Evaluate(fn, inputs).status();
  }

  HostTensor rand(mlir::Type t, std::vector<int64_t> shape,
                  double stddev = 1.0) {
    return RandomTensor(t, shape, rng, stddev);
  }

  mlir::Type f32() { return mlir::Float32Type::get(&ctx); }
  mlir::Type f16() { return mlir::Float16Type::get(&ctx); }
  mlir::Type bf16() { return mlir::BFloat16Type::get(&ctx); }
  mlir::Type e4m3() { return mlir::Float8E4M3FNType::get(&ctx); }
  mlir::Type e5m2() { return mlir::Float8E5M2Type::get(&ctx); }
  mlir::Type i1() { return mlir::IntegerType::get(&ctx, 1); }
  mlir::Type i8() { return mlir::IntegerType::get(&ctx, 8); }
  mlir::Type i32() { return mlir::IntegerType::get(&ctx, 32); }
  mlir::Type i64() { return mlir::IntegerType::get(&ctx, 64); }

  HostTensor tensor(mlir::Type t, std::vector<int64_t> shape,
                    std::vector<double> data) {
    return HostTensor{t, std::move(shape), std::move(data)};
  }
  HostTensor scalar(mlir::Type t, double v) { return HostTensor{t, {}, {v}}; }

  /// `src` parsed twice: `before` as written, `after` through
  /// llmc::PrepareForLowering (the raise and what else every CUDA lowering
  /// runs first). Call it under ASSERT_NO_FATAL_FAILURE: it fails the test
  /// when parsing or the preparation fails.
  struct Prepared {
    mlir::OwningOpRef<mlir::ModuleOp> before, after;
    mlir::func::FuncOp fnBefore, fnAfter;
  };
  void parseAndPrepare(const std::string &src, Prepared &p) {
    p.before = mlir::parseSourceString<mlir::ModuleOp>(src, &ctx);
    p.after = mlir::parseSourceString<mlir::ModuleOp>(src, &ctx);
    ASSERT_TRUE(p.before && p.after);
    p.fnBefore = firstFunc(*p.before);
    p.fnAfter = firstFunc(*p.after);
    absl::Status st = llmc::PrepareForLowering(p.fnAfter);
    ASSERT_TRUE(st.ok()) << st;
  }

  mlir::MLIRContext ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::mt19937_64 rng{20261129};
};

/// Largest |got - want| over all elements; +inf on a shape mismatch.
inline double maxAbsDiff(const std::vector<double> &got,
                         const std::vector<double> &want) {
  if (got.size() != want.size())
    return INFINITY;
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i)
    m = std::max(m, std::fabs(got[i] - want[i]));
  return m;
}

/// `m` as text (for failure messages and round trips).
inline std::string print(mlir::ModuleOp m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os);
  return s;
}

inline bool allFinite(const HostTensor &t) {
  for (double v : t.data)
    if (!std::isfinite(v))
      return false;
  return true;
}

} // namespace llmc::reference::testing

#endif // LLMC_TEST_UNIT_COMPILER_REFERENCETESTUTILS_H
