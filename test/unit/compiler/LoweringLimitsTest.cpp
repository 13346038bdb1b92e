//===- LoweringLimitsTest.cpp - codegen's resource bounds (no GPU) ---------===//
//
// LowerToExecutable on programs that are valid but ask for unbounded
// resources: constant data beyond LowerOptions::max_constant_bytes (a
// 2^40-element splat used to build a 4 TiB string and abort with "LLVM
// ERROR: out of memory") and tensors beyond 2^40 elements reaching codegen.
// Each is an error naming the value and the limit, never a crash or an
// "internal error".
//
//===----------------------------------------------------------------------===//

#include "../MlirContext.h"

#include "llmc/Compiler/LowerToExecutable.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <string>

namespace {

namespace rt = llmc::rt;
using llmc::test::SharedContext;

absl::StatusOr<rt::Executable> Lower(const std::string &src, const llmc::LowerOptions &options = {}) {
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(src, mlir::ParserConfig(&SharedContext()));
  if (!module)
    return absl::InvalidArgumentError("test source did not parse:\n" + src);
  auto fn = *module->getOps<mlir::func::FuncOp>().begin();
  return llmc::LowerToExecutable(fn, options);
}

int64_t ConstantBytes(const rt::Executable &exe) {
  int64_t n = 0;
  for (const rt::Buffer &b : exe.buffers)
    if (b.kind == rt::Buffer::Constant)
      n += static_cast<int64_t>(b.constant_data.size());
  return n;
}

// Two 16-element f32 constants returned: 64 bytes each.
const char *kTwoConstants = R"(
func.func @two_constants() -> (tensor<16xf32>, tensor<16xi32>) {
  %a = llm.constant dense<[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]> : tensor<16xf32>
  %b = llm.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]> : tensor<16xi32>
  return %a, %b : tensor<16xf32>, tensor<16xi32>
}
)";

TEST(LoweringLimits, ConstantDataWithinTheBudget) {
  llmc::LowerOptions options;
  options.max_constant_bytes = 128;
  auto exe = Lower(kTwoConstants, options);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(ConstantBytes(*exe), 128);
}

TEST(LoweringLimits, ConstantDataBeyondTheBudgetIsAnErrorNamingTheConstant) {
  llmc::LowerOptions options;
  options.max_constant_bytes = 100;
  auto exe = Lower(kTwoConstants, options);
  ASSERT_FALSE(exe.ok());
  EXPECT_EQ(exe.status().code(), absl::StatusCode::kResourceExhausted) << exe.status();
  const std::string msg(exe.status().message());
  EXPECT_NE(msg.find("'llm.constant' at "), std::string::npos) << msg;
  EXPECT_NE(msg.find("a constant of 64 bytes (tensor<16xi32>)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("takes the executable's constant data to 128 bytes, more than the limit of 100 bytes"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("internal error"), std::string::npos) << msg;
}

// A splat read only by a fused elementwise kernel is an immediate of the
// kernel, not constant data.
TEST(LoweringLimits, SplatsReadByElementwiseKernelsAreNotConstantData) {
  llmc::LowerOptions options;
  options.max_constant_bytes = 0;
  auto exe = Lower(R"(
func.func @add_one(%x: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %one = llm.constant dense<1.0> : tensor<1024x1024xf32>
  %y = llm.add %x, %one : tensor<1024x1024xf32>
  return %y : tensor<1024x1024xf32>
}
)",
                       options);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(ConstantBytes(*exe), 0);
}

// 2^40 f32 elements as one splat returned by the function (and one a GEMM
// reads): 4 TiB of constant data, refused before any byte is allocated.
TEST(LoweringLimits, HugeSplatConstantsAreRefusedBeforeAllocating) {
  auto exe = Lower(R"(
func.func @huge_splat() -> tensor<1048576x1048576xf32> {
  %c = arith.constant dense<1.0> : tensor<1048576x1048576xf32>
  return %c : tensor<1048576x1048576xf32>
}
)");
  ASSERT_FALSE(exe.ok());
  EXPECT_EQ(exe.status().code(), absl::StatusCode::kResourceExhausted) << exe.status();
  const std::string msg(exe.status().message());
  EXPECT_NE(msg.find("'arith.constant' at "), std::string::npos) << msg;
  EXPECT_NE(msg.find("a constant of 4398046511104 bytes (tensor<1048576x1048576xf32>)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("more than the limit of 1073741824 bytes (LowerOptions::max_constant_bytes)"),
            std::string::npos)
      << msg;
  auto gemm = Lower(R"(
func.func @gemm_of_ones(%x: tensor<8x1048576xbf16>) -> tensor<8x4096xbf16> {
  %w = llm.constant dense<1.0> : tensor<1048576x4096xbf16>
  %y = llm.matmul %x, %w : tensor<8x1048576xbf16>, tensor<1048576x4096xbf16> -> tensor<8x4096xbf16>
  return %y : tensor<8x4096xbf16>
}
)");
  ASSERT_FALSE(gemm.ok());
  EXPECT_EQ(gemm.status().code(), absl::StatusCode::kResourceExhausted) << gemm.status();
  EXPECT_NE(gemm.status().message().find("a constant of 8589934592 bytes"), std::string::npos) << gemm.status();
}

// A tensor beyond 2^40 elements that reaches codegen (here an arith.constant
// returned directly, which no llm verifier sees) is a user error naming it,
// not an internal error from Executable::Validate.
TEST(LoweringLimits, TensorsAbove2p40ElementsAreUserErrors) {
  auto exe = Lower(R"(
func.func @too_big() -> tensor<2199023255552xf32> {
  %c = arith.constant dense<1.0> : tensor<2199023255552xf32>
  return %c : tensor<2199023255552xf32>
}
)");
  ASSERT_FALSE(exe.ok());
  EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument) << exe.status();
  const std::string msg(exe.status().message());
  EXPECT_NE(msg.find("'arith.constant' at "), std::string::npos) << msg;
  EXPECT_NE(msg.find("whose dimensions multiply to 2199023255552"), std::string::npos) << msg;
  EXPECT_NE(msg.find("more than the supported 2^40"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("internal error"), std::string::npos) << msg;
  auto arg = Lower(R"(
func.func @too_big_arg(%x: tensor<1099511627776x1099511627776x1099511627776xf32>)
    -> tensor<1099511627776x1099511627776x1099511627776xf32> {
  return %x : tensor<1099511627776x1099511627776x1099511627776xf32>
}
)");
  ASSERT_FALSE(arg.ok());
  EXPECT_NE(arg.status().message().find("argument 0 of @too_big_arg has type"), std::string::npos)
      << arg.status();
  EXPECT_NE(arg.status().message().find("multiply to more than 2^63"), std::string::npos) << arg.status();
}

} // namespace
