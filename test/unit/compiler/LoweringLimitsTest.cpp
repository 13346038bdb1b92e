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

#include <cstring>
#include <string>
#include <vector>

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

// The EwShape argument of an elementwise launch: {rank, sizes[8],
// strides[inputs][8]}.
std::vector<int64_t> ShapeArg(const rt::Launch &l) {
  const rt::Arg &a = l.args.back();
  EXPECT_EQ(a.kind, rt::Arg::Bytes);
  std::vector<int64_t> v(a.bytes.size() / sizeof(int64_t));
  std::memcpy(v.data(), a.bytes.data(), v.size() * sizeof(int64_t));
  return v;
}

// Offset of element `i` (row-major over `sizes`) read through `strides`.
int64_t OffsetOf(int64_t i, const std::vector<int64_t> &sizes, const std::vector<int64_t> &strides) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

// Elementwise kernels take at most 8 dims of strides; a view of rank 10 (or
// 100) is indexed over its collapsed index space, which reads the same
// elements. Before, the rank-10 transposed view below escaped lowering as an
// uncaught exception (terminate) and the rank-100 broadcast add was refused.
TEST(LoweringLimits, ViewsOfRankAbove8ReadTheSameElements) {
  // x viewed as [2,1,3,1,2,2,1,1,5,1] and transposed by `perm`.
  const std::vector<int64_t> in = {2, 1, 3, 1, 2, 2, 1, 1, 5, 1};
  const std::vector<int64_t> perm = {8, 0, 2, 4, 5, 1, 3, 6, 7, 9};
  std::string inT = "tensor<2x1x3x1x2x2x1x1x5x1xf32>";
  auto exe = Lower("func.func @rank10_view(%x: tensor<120xf32>) -> tensor<120xf32> {\n"
                   "  %v = llm.reshape %x : tensor<120xf32> to " + inT + "\n"
                   "  %t = llm.transpose %v [8, 0, 2, 4, 5, 1, 3, 6, 7, 9] : " + inT + "\n"
                   "  %r = llm.reshape %t : tensor<5x2x3x2x2x1x1x1x1x1xf32> to tensor<120xf32>\n"
                   "  return %r : tensor<120xf32>\n}\n");
  ASSERT_TRUE(exe.ok()) << exe.status();
  ASSERT_EQ(exe->launches.size(), 1u);
  std::vector<int64_t> shape = ShapeArg(exe->launches[0]);
  ASSERT_EQ(shape.size(), 1u + 8 + 8);
  const int64_t rank = shape[0];
  EXPECT_EQ(rank, 3);  // 5, then 2x3x2x2 (one run of x's strides), then the trailing 1
  std::vector<int64_t> sizes(shape.begin() + 1, shape.begin() + 1 + rank);
  std::vector<int64_t> strides(shape.begin() + 9, shape.begin() + 9 + rank);
  std::vector<int64_t> inStrides(in.size(), 1), outSizes, outStrides;
  for (int64_t d = static_cast<int64_t>(in.size()) - 2; d >= 0; --d)
    inStrides[d] = inStrides[d + 1] * in[d + 1];
  for (int64_t p : perm) {
    outSizes.push_back(in[p]);
    outStrides.push_back(inStrides[p]);
  }
  for (int64_t i = 0; i < 120; ++i)
    ASSERT_EQ(OffsetOf(i, sizes, strides), OffsetOf(i, outSizes, outStrides)) << "element " << i;

  // A rank-100 broadcast add: [1 x ... x 1 x 4] broadcast to [2 x 1 ... x 4].
  std::string ones, twos;
  for (int d = 0; d < 99; ++d) {
    ones += "1x";
    twos += d == 0 ? "2x" : "1x";
  }
  std::string t = "tensor<" + ones + "4xf32>", tb = "tensor<" + twos + "4xf32>";
  auto add = Lower("func.func @rank100_add(%x0: tensor<4xf32>, %y0: tensor<8xf32>) -> tensor<8xf32> {\n"
                   "  %x = llm.reshape %x0 : tensor<4xf32> to " + t + "\n"
                   "  %y = llm.reshape %y0 : tensor<8xf32> to " + tb + "\n"
                   "  %b = llm.broadcast %x : " + t + " to " + tb + "\n"
                   "  %a = llm.add %b, %y : " + tb + "\n"
                   "  %r = llm.reshape %a : " + tb + " to tensor<8xf32>\n"
                   "  return %r : tensor<8xf32>\n}\n");
  ASSERT_TRUE(add.ok()) << add.status();
  ASSERT_EQ(add->launches.size(), 1u);
  shape = ShapeArg(add->launches[0]);
  EXPECT_EQ(shape[0], 2);  // [2, 4]: the row-broadcast input reads index % 4
  EXPECT_EQ(shape[1], 2);
  EXPECT_EQ(shape[2], 4);
}

} // namespace
