//===- KernelPlanTest.cpp - the lowering obeys llmc-form-kernels (no GPU) -===//
//
// llmc-form-kernels is the one decision of which ops share a kernel: a
// function it marked `llm.kernels_formed` is lowered from its `llm.kernel`
// attributes (llmc::decidedKernelPlan), not planned again. These tests show
// that the lowering follows the attributes (the pass's own decision gives
// the executable that planning in the lowering gave; another decision
// written in IR gives other launches), and that an annotation no emitter
// can compute exactly is an error naming the op, never a wrong kernel.
//
//===----------------------------------------------------------------------===//

#include "../MlirContext.h"
#include "ReferenceTestUtils.h"

#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/runtime/ExecutableDump.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace {

namespace rt = llmc::rt;
using llmc::test::SharedContext;

struct Parsed {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp fn;
};

Parsed Parse(const std::string &src) {
  Parsed p;
  p.module = mlir::parseSourceString<mlir::ModuleOp>(src, mlir::ParserConfig(&SharedContext()));
  if (p.module)
    p.fn = *p.module->getOps<mlir::func::FuncOp>().begin();
  return p;
}

absl::StatusOr<rt::Executable> Lower(const std::string &src) {
  Parsed p = Parse(src);
  if (!p.fn)
    return absl::InvalidArgumentError("test source did not parse:\n" + src);
  return llmc::LowerToExecutable(p.fn, {});
}

int KernelLaunches(const rt::Executable &exe) {
  int n = 0;
  for (const rt::Launch &l : exe.launches)
    n += l.kind == rt::Launch::Kernel;
  return n;
}

// A residual add + RMSNorm, an elementwise chain, decode q/k/v GEMVs and a
// SwiGLU GEMV: every kind of multi-op kernel.
const char *kAllKinds = R"(
func.func @all_kinds(%h: tensor<1x256xbf16>, %r: tensor<1x256xbf16>, %g: tensor<256xbf16>,
                     %wq: tensor<256x256xbf16>, %wk: tensor<128x256xbf16>, %wv: tensor<128x256xbf16>,
                     %wg: tensor<512x256xbf16>, %wu: tensor<512x256xbf16>)
    -> (tensor<1x256xbf16>, tensor<1x256xbf16>, tensor<1x128xbf16>, tensor<1x128xbf16>, tensor<1x512xbf16>) {
  %s = llm.add %h, %r : tensor<1x256xbf16>
  %x = llm.rms_norm %s, %g {eps = 1.0e-05 : f64} : tensor<1x256xbf16>, tensor<256xbf16>
  %q = llm.matmul %x, %wq {transpose_rhs} : tensor<1x256xbf16>, tensor<256x256xbf16> -> tensor<1x256xbf16>
  %k = llm.matmul %x, %wk {transpose_rhs} : tensor<1x256xbf16>, tensor<128x256xbf16> -> tensor<1x128xbf16>
  %v = llm.matmul %x, %wv {transpose_rhs} : tensor<1x256xbf16>, tensor<128x256xbf16> -> tensor<1x128xbf16>
  %e = llm.exp %q : tensor<1x256xbf16>
  %n = llm.neg %e : tensor<1x256xbf16>
  %y = llm.mul %n, %s : tensor<1x256xbf16>
  %gt = llm.matmul %x, %wg {transpose_rhs} : tensor<1x256xbf16>, tensor<512x256xbf16> -> tensor<1x512xbf16>
  %up = llm.matmul %x, %wu {transpose_rhs} : tensor<1x256xbf16>, tensor<512x256xbf16> -> tensor<1x512xbf16>
  %a = llm.silu %gt : tensor<1x512xbf16>
  %m = llm.mul %a, %up : tensor<1x512xbf16>
  return %s, %y, %k, %v, %m : tensor<1x256xbf16>, tensor<1x256xbf16>, tensor<1x128xbf16>, tensor<1x128xbf16>, tensor<1x512xbf16>
}
)";

TEST(KernelPlan, TheFormedDecisionGivesTheExecutableThatPlanningGave) {
  auto planned = Lower(kAllKinds);
  ASSERT_TRUE(planned.ok()) << planned.status();

  Parsed formed = Parse(kAllKinds);
  ASSERT_TRUE(formed.fn);
  mlir::PassManager pm(&SharedContext(), mlir::func::FuncOp::getOperationName());
  pm.addPass(llmc::createFormKernelsPass({}));
  ASSERT_TRUE(mlir::succeeded(pm.run(formed.fn)));
  ASSERT_TRUE(formed.fn->hasAttr("llm.kernels_formed"));
  int annotated = 0;
  formed.fn.walk([&](mlir::Operation *op) { annotated += op->hasAttr("llm.kernel"); });
  // add+norm, q/k/v, exp/neg/mul, gate/up/silu/mul.
  EXPECT_EQ(annotated, 2 + 3 + 3 + 4);
  auto fromIr = llmc::LowerToExecutable(formed.fn, {});
  ASSERT_TRUE(fromIr.ok()) << fromIr.status();
  EXPECT_EQ(rt::DescribeExecutable(*fromIr), rt::DescribeExecutable(*planned));
  // One launch per kernel: norm, multi-GEMV, elementwise chain, SwiGLU GEMV.
  EXPECT_EQ(KernelLaunches(*fromIr), 4);
}

// The lowering reads the decision: marked formed with no llm.kernel at all,
// every op is a kernel of its own (12 launches instead of 4: each matmul a
// decode GEMV); a group of only q and k makes 11.
TEST(KernelPlan, TheLoweringFollowsTheAttributesNotItsOwnPlan) {
  std::string unfused = kAllKinds;
  size_t body = unfused.find(") {\n  %s");
  ASSERT_NE(body, std::string::npos);
  unfused.replace(body, 3, ") attributes {llm.kernels_formed} {");
  auto alone = Lower(unfused);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(KernelLaunches(*alone), 12);

  std::string qk = unfused;
  const std::string kq = "%q = llm.matmul %x, %wq {transpose_rhs}";
  const std::string kk = "%k = llm.matmul %x, %wk {transpose_rhs}";
  qk.replace(qk.find(kq), kq.size(),
             "%q = llm.matmul %x, %wq {transpose_rhs, llm.kernel = {group = 7 : i64, kind = \"multi_gemv\"}}");
  qk.replace(qk.find(kk), kk.size(),
             "%k = llm.matmul %x, %wk {transpose_rhs, llm.kernel = {group = 7 : i64, kind = \"multi_gemv\"}}");
  auto grouped = Lower(qk);
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  EXPECT_EQ(KernelLaunches(*grouped), 11);
}

std::string LowerError(const std::string &src) {
  auto exe = Lower(src);
  if (exe.ok())
    return "lowered without error";
  EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument) << exe.status();
  std::string msg(exe.status().message());
  EXPECT_EQ(msg.find("internal error"), std::string::npos) << msg;
  return msg;
}

#define EXPECT_CONTAINS(haystack, needle)                                      \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(KernelPlan, AnIntermediateUsedAfterTheKernelIsAnotherOutput) {
  // %e is returned too: the one kernel writes %e and %n (multi-output).
  auto exe = Lower(R"(
func.func @f(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) attributes {llm.kernels_formed} {
  %e = llm.exp %x {llm.kernel = {group = 0 : i64, kind = "elementwise"}} : tensor<4x8xf32>
  %n = llm.neg %e {llm.kernel = {group = 0 : i64, kind = "elementwise"}} : tensor<4x8xf32>
  return %e, %n : tensor<4x8xf32>, tensor<4x8xf32>
})");
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(KernelLaunches(*exe), 1);
}

TEST(KernelPlan, AnIntermediateUsedBeforeTheKernelRunsIsAnError) {
  // %e is read by %m before %n, the kernel's last member, where it runs.
  std::string msg = LowerError(R"(
func.func @f(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) attributes {llm.kernels_formed} {
  %e = llm.exp %x {llm.kernel = {group = 0 : i64, kind = "elementwise"}} : tensor<4x8xf32>
  %m = llm.reduce_sum %e [1] keepdim : tensor<4x8xf32>
  %n = llm.neg %e {llm.kernel = {group = 0 : i64, kind = "elementwise"}} : tensor<4x8xf32>
  %b = llm.broadcast %m : tensor<4x1xf32> to tensor<4x8xf32>
  return %b, %n : tensor<4x8xf32>, tensor<4x8xf32>
})");
  EXPECT_CONTAINS(msg, "'llm.exp' at ");
  EXPECT_CONTAINS(msg, "is in llm.kernel group 0 (kind \"elementwise\")");
  EXPECT_CONTAINS(msg, "before the kernel's last member, where the kernel runs and writes it");
}

TEST(KernelPlan, AnElementwiseKernelOfANonElementwiseOpIsAnError) {
  std::string msg = LowerError(R"(
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {llm.kernels_formed} {
  %s = llm.softmax %x {llm.kernel = {group = 0 : i64, kind = "elementwise"}} : tensor<4x8xf32>
  %n = llm.neg %s {llm.kernel = {group = 0 : i64, kind = "elementwise"}} : tensor<4x8xf32>
  return %n : tensor<4x8xf32>
})");
  EXPECT_CONTAINS(msg, "'llm.softmax' at ");
  EXPECT_CONTAINS(msg, "only elementwise ops form an elementwise kernel");
}

TEST(KernelPlan, AKernelBeyondTheFusionBoundsIsAnError) {
  std::string src = "func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {llm.kernels_formed} {\n";
  std::string prev = "%x";
  for (int i = 0; i < 65; ++i) {
    src += "  %v" + std::to_string(i) + " = llm.neg " + prev +
           " {llm.kernel = {group = 3 : i64, kind = \"elementwise\"}} : tensor<4x8xf32>\n";
    prev = "%v" + std::to_string(i);
  }
  src += "  return " + prev + " : tensor<4x8xf32>\n}\n";
  std::string msg = LowerError(src);
  EXPECT_CONTAINS(msg, "the kernel has 65 ops of cost 65 reading 1 inputs, more than one kernel's bounds (64 ops");
}

TEST(KernelPlan, AResidualNormWhoseNormDoesNotReadTheSumIsAnError) {
  std::string msg = LowerError(R"(
func.func @f(%h: tensor<4x64xf32>, %r: tensor<4x64xf32>, %g: tensor<64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) attributes {llm.kernels_formed} {
  %s = llm.add %h, %r {llm.kernel = {group = 0 : i64, kind = "residual_norm"}} : tensor<4x64xf32>
  %n = llm.rms_norm %h, %g {eps = 1.0e-05 : f64, llm.kernel = {group = 0 : i64, kind = "residual_norm"}} : tensor<4x64xf32>, tensor<64xf32>
  return %s, %n : tensor<4x64xf32>, tensor<4x64xf32>
})");
  EXPECT_CONTAINS(msg, "'llm.rms_norm' at ");
  EXPECT_CONTAINS(msg, "its input is not the sum of the group's llm.add");
}

TEST(KernelPlan, AResidualSumUsedBeforeTheNormIsAnError) {
  std::string msg = LowerError(R"(
func.func @f(%h: tensor<4x64xf32>, %r: tensor<4x64xf32>, %g: tensor<64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) attributes {llm.kernels_formed} {
  %s = llm.add %h, %r {llm.kernel = {group = 0 : i64, kind = "residual_norm"}} : tensor<4x64xf32>
  %e = llm.exp %s : tensor<4x64xf32>
  %n = llm.rms_norm %s, %g {eps = 1.0e-05 : f64, llm.kernel = {group = 0 : i64, kind = "residual_norm"}} : tensor<4x64xf32>, tensor<64xf32>
  return %e, %n : tensor<4x64xf32>, tensor<4x64xf32>
})");
  EXPECT_CONTAINS(msg, "'llm.add' at ");
  EXPECT_CONTAINS(msg, "its sum is used by 'llm.exp' at ");
  EXPECT_CONTAINS(msg, "before the norm computes it");
}

TEST(KernelPlan, GemvsOfDifferentInputsAreAnError) {
  std::string msg = LowerError(R"(
func.func @f(%x: tensor<1x256xbf16>, %z: tensor<1x256xbf16>, %wq: tensor<256x256xbf16>, %wk: tensor<128x256xbf16>) -> (tensor<1x256xbf16>, tensor<1x128xbf16>) attributes {llm.kernels_formed} {
  %q = llm.matmul %x, %wq {transpose_rhs, llm.kernel = {group = 0 : i64, kind = "multi_gemv"}} : tensor<1x256xbf16>, tensor<256x256xbf16> -> tensor<1x256xbf16>
  %k = llm.matmul %z, %wk {transpose_rhs, llm.kernel = {group = 0 : i64, kind = "multi_gemv"}} : tensor<1x256xbf16>, tensor<128x256xbf16> -> tensor<1x128xbf16>
  return %q, %k : tensor<1x256xbf16>, tensor<1x128xbf16>
})");
  EXPECT_CONTAINS(msg, "the GEMVs of one kernel read the same input");
}

TEST(KernelPlan, AGemvResultUsedBeforeTheKernelRunsIsAnError) {
  // %q is read by %e before the kernel runs at %k.
  std::string msg = LowerError(R"(
func.func @f(%x: tensor<1x256xbf16>, %wq: tensor<256x256xbf16>, %wk: tensor<128x256xbf16>) -> (tensor<1x256xbf16>, tensor<1x128xbf16>) attributes {llm.kernels_formed} {
  %q = llm.matmul %x, %wq {transpose_rhs, llm.kernel = {group = 0 : i64, kind = "multi_gemv"}} : tensor<1x256xbf16>, tensor<256x256xbf16> -> tensor<1x256xbf16>
  %e = llm.exp %q : tensor<1x256xbf16>
  %k = llm.matmul %x, %wk {transpose_rhs, llm.kernel = {group = 0 : i64, kind = "multi_gemv"}} : tensor<1x256xbf16>, tensor<128x256xbf16> -> tensor<1x128xbf16>
  return %e, %k : tensor<1x256xbf16>, tensor<1x128xbf16>
})");
  EXPECT_CONTAINS(msg, "its result is used by 'llm.exp' at ");
  EXPECT_CONTAINS(msg, "before the kernel runs at its last member 'llm.matmul'");
}

TEST(KernelPlan, ASwiGluGemvWithoutItsMultiplyIsAnError) {
  std::string msg = LowerError(R"(
func.func @f(%x: tensor<1x256xbf16>, %wg: tensor<512x256xbf16>, %wu: tensor<512x256xbf16>) -> tensor<1x512xbf16> attributes {llm.kernels_formed} {
  %g = llm.matmul %x, %wg {transpose_rhs, llm.kernel = {group = 0 : i64, kind = "swiglu_gemv"}} : tensor<1x256xbf16>, tensor<512x256xbf16> -> tensor<1x512xbf16>
  %u = llm.matmul %x, %wu {transpose_rhs, llm.kernel = {group = 0 : i64, kind = "swiglu_gemv"}} : tensor<1x256xbf16>, tensor<512x256xbf16> -> tensor<1x512xbf16>
  %a = llm.silu %g {llm.kernel = {group = 0 : i64, kind = "swiglu_gemv"}} : tensor<1x512xbf16>
  %m = llm.mul %a, %u : tensor<1x512xbf16>
  return %m : tensor<1x512xbf16>
})");
  EXPECT_CONTAINS(msg, "a swiglu_gemv kernel is two decode GEMVs");
}

TEST(KernelPlan, ASwiGluGemvOfADequantizedWeightIsAnError) {
  // The gate GEMV reads an int8 weight that its own fused GEMV would
  // decompress (nothing writes the dequantized tensor): the SwiGLU kernel,
  // which reads dense weights, must not take it.
  std::string msg = LowerError(R"(
func.func @f(%x: tensor<1x256xbf16>, %q: tensor<512x256xi8>, %s: tensor<512x2xf32>, %wu: tensor<512x256xbf16>) -> tensor<1x512xbf16> attributes {llm.kernels_formed} {
  %wg = llm.dequantize_weight %q, %s {bits = 8 : i64, group_size = 128 : i64} : tensor<512x256xi8>, tensor<512x2xf32> -> tensor<512x256xbf16>
  %g = llm.matmul %x, %wg {transpose_rhs, llm.kernel = {group = 0 : i64, kind = "swiglu_gemv"}} : tensor<1x256xbf16>, tensor<512x256xbf16> -> tensor<1x512xbf16>
  %u = llm.matmul %x, %wu {transpose_rhs, llm.kernel = {group = 0 : i64, kind = "swiglu_gemv"}} : tensor<1x256xbf16>, tensor<512x256xbf16> -> tensor<1x512xbf16>
  %a = llm.silu %g {llm.kernel = {group = 0 : i64, kind = "swiglu_gemv"}} : tensor<1x512xbf16>
  %m = llm.mul %a, %u {llm.kernel = {group = 0 : i64, kind = "swiglu_gemv"}} : tensor<1x512xbf16>
  return %m : tensor<1x512xbf16>
})");
  EXPECT_CONTAINS(msg, "it reads a dequantized weight, which its own fused GEMV decompresses");
}

TEST(KernelPlan, MixingParameterPreparationAndPerCallWorkIsAnError) {
  // The cast of the parameter runs once per parameter set; the multiply by
  // the activation on every call: one kernel cannot do both.
  std::string msg = LowerError(R"(
func.func @f(%x: tensor<64xbf16>, %w: tensor<64xf32> {llm.param}) -> tensor<64xbf16> attributes {llm.kernels_formed} {
  %c = llm.cast %w {llm.kernel = {group = 0 : i64, kind = "elementwise"}} : tensor<64xf32> to tensor<64xbf16>
  %y = llm.mul %x, %c {llm.kernel = {group = 0 : i64, kind = "elementwise"}} : tensor<64xbf16>
  return %y : tensor<64xbf16>
})");
  EXPECT_CONTAINS(msg, "mixes parameter-preparation work");
}

// A decode step's k: RoPE, then the KV-cache write into a donated
// [B, H, S, D] cache through a transpose (gpt-fast's k_cache[:, :, pos] = k).
const char *kRopeCacheWrite = R"(
func.func @f(%k: tensor<1x1x4x64xbf16>, %c: tensor<1x1x64xbf16>, %s: tensor<1x1x64xbf16>,
             %cache: tensor<1x4x128x64xbf16> {llm.donate}, %pos: tensor<1xi64>) -> tensor<1x4x128x64xbf16> {
  %kr = llm.rope %k cos(%c : tensor<1x1x64xbf16>) sin(%s : tensor<1x1x64xbf16>) half_split : tensor<1x1x4x64xbf16>
  %kt = llm.transpose %kr [0, 2, 1, 3] : tensor<1x1x4x64xbf16>
  %w = llm.index_put %cache[%pos], %kt dim = 2 : tensor<1x4x128x64xbf16>, tensor<1xi64>, tensor<1x4x1x64xbf16>
  return %w : tensor<1x4x128x64xbf16>
}
)";

TEST(KernelPlan, RoPEIsWrittenIntoTheCacheByOneKernel) {
  const std::string src = kRopeCacheWrite;
  auto planned = Lower(src);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(KernelLaunches(*planned), 1);

  Parsed formed = Parse(src);
  ASSERT_TRUE(formed.fn);
  mlir::PassManager pm(&SharedContext(), mlir::func::FuncOp::getOperationName());
  pm.addPass(llmc::createFormKernelsPass({}));
  ASSERT_TRUE(mlir::succeeded(pm.run(formed.fn)));
  int annotated = 0;
  formed.fn.walk([&](mlir::Operation *op) { annotated += op->hasAttr("llm.kernel"); });
  EXPECT_EQ(annotated, 2);  // the rope and the index_put
  auto fromIr = llmc::LowerToExecutable(formed.fn, {});
  ASSERT_TRUE(fromIr.ok()) << fromIr.status();
  EXPECT_EQ(rt::DescribeExecutable(*fromIr), rt::DescribeExecutable(*planned));

  // Without the decision: RoPE into a buffer, then the write.
  std::string unfused = src;
  size_t body = unfused.find(" {\n  %kr");
  ASSERT_NE(body, std::string::npos);
  unfused.replace(body, 2, " attributes {llm.kernels_formed} {");
  auto alone = Lower(unfused);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(KernelLaunches(*alone), 2);
}

TEST(KernelPlan, ARopeCacheWriteOfARopeReadElsewhereIsAnError) {
  // The rotated k is also returned: the fused kernel would never write it.
  std::string msg = LowerError(R"(
func.func @f(%k: tensor<1x1x4x64xbf16>, %c: tensor<1x1x64xbf16>, %s: tensor<1x1x64xbf16>,
             %cache: tensor<1x4x128x64xbf16> {llm.donate}, %pos: tensor<1xi64>)
    -> (tensor<1x4x128x64xbf16>, tensor<1x1x4x64xbf16>) attributes {llm.kernels_formed} {
  %kr = llm.rope %k cos(%c : tensor<1x1x64xbf16>) sin(%s : tensor<1x1x64xbf16>) half_split {llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}} : tensor<1x1x4x64xbf16>
  %kt = llm.transpose %kr [0, 2, 1, 3] : tensor<1x1x4x64xbf16>
  %w = llm.index_put %cache[%pos], %kt dim = 2 {llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}} : tensor<1x4x128x64xbf16>, tensor<1xi64>, tensor<1x4x1x64xbf16>
  return %w, %kr : tensor<1x4x128x64xbf16>, tensor<1x1x4x64xbf16>
})");
  EXPECT_CONTAINS(msg, "'llm.index_put' at ");
  EXPECT_CONTAINS(msg, "(kind \"rope_cache_write\")");
  EXPECT_CONTAINS(msg, "its source is not the table-form llm.rope's result alone");

  msg = LowerError(R"(
func.func @f(%k: tensor<1x1x4x64xbf16>, %cache: tensor<1x4x128x64xbf16> {llm.donate}, %pos: tensor<1xi64>)
    -> tensor<1x4x128x64xbf16> attributes {llm.kernels_formed} {
  %kt = llm.transpose %k [0, 2, 1, 3] {llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}} : tensor<1x1x4x64xbf16>
  %w = llm.index_put %cache[%pos], %kt dim = 2 {llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}} : tensor<1x4x128x64xbf16>, tensor<1xi64>, tensor<1x4x1x64xbf16>
  return %w : tensor<1x4x128x64xbf16>
})");
  EXPECT_CONTAINS(msg, "a rope_cache_write kernel is an llm.rope followed by the llm.index_put");
}

// A decode step's q, k and v from one QKV output: the k write's launch also
// rotates q and writes v (one launch); the formed decision gives the
// planned executable.
const char *kDecodeQkv = R"(
func.func @f(%qkv: tensor<1x1x512xbf16>, %c: tensor<1x1x64xbf16>, %s: tensor<1x1x64xbf16>,
             %kc: tensor<1x2x128x64xbf16> {llm.donate}, %vc: tensor<1x2x128x64xbf16> {llm.donate},
             %pos: tensor<1xi64>) -> (tensor<1x1x4x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>) {
  %k0 = llm.slice %qkv [0, 0, 256] to [1, 1, 384] step [1, 1, 1] : tensor<1x1x512xbf16>
  %k1 = llm.reshape %k0 : tensor<1x1x128xbf16> to tensor<1x1x2x64xbf16>
  %kr = llm.rope %k1 cos(%c : tensor<1x1x64xbf16>) sin(%s : tensor<1x1x64xbf16>) half_split KR_ATTR: tensor<1x1x2x64xbf16>
  %kt = llm.transpose %kr [0, 2, 1, 3] : tensor<1x1x2x64xbf16>
  %kw = llm.index_put %kc[%pos], %kt dim = 2 KW_ATTR: tensor<1x2x128x64xbf16>, tensor<1xi64>, tensor<1x2x1x64xbf16>
  %v0 = llm.slice %qkv [0, 0, 384] to [1, 1, 512] step [1, 1, 1] : tensor<1x1x512xbf16>
  %v1 = llm.reshape %v0 : tensor<1x1x128xbf16> to tensor<1x1x2x64xbf16>
  %vt = llm.transpose %v1 [0, 2, 1, 3] : tensor<1x1x2x64xbf16>
  %vw = llm.index_put %vc[%pos], %vt dim = 2 VW_ATTR: tensor<1x2x128x64xbf16>, tensor<1xi64>, tensor<1x2x1x64xbf16>
  %vn = llm.neg %vw : tensor<1x2x128x64xbf16>
  %q0 = llm.slice %qkv [0, 0, 0] to [1, 1, 256] step [1, 1, 1] : tensor<1x1x512xbf16>
  %q1 = llm.reshape %q0 : tensor<1x1x256xbf16> to tensor<1x1x4x64xbf16>
  %qr = llm.rope %q1 cos(%c : tensor<1x1x64xbf16>) sin(%s : tensor<1x1x64xbf16>) half_split QR_ATTR: tensor<1x1x4x64xbf16>
  %o = llm.attention %qr, %kw, %vw {kv_hnd} : tensor<1x1x4x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>
  return %o, %kw, %vn : tensor<1x1x4x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>
}
)";

std::string WithAttrs(std::string src, const std::string &attrs) {
  for (const char *key : {"KR_ATTR", "KW_ATTR", "VW_ATTR", "QR_ATTR"})
    src.replace(src.find(key), strlen(key), attrs);
  return src;
}

TEST(KernelPlan, QAndVJoinTheCacheWriteWhenTheirResultsWait) {
  // The v cache is read (neg) before the q RoPE: v joins k's launch at the
  // v write; q is rotated on its own.
  const std::string src = WithAttrs(kDecodeQkv, "");
  Parsed formed = Parse(src);
  ASSERT_TRUE(formed.fn);
  mlir::PassManager pm(&SharedContext(), mlir::func::FuncOp::getOperationName());
  pm.addPass(llmc::createFormKernelsPass({}));
  ASSERT_TRUE(mlir::succeeded(pm.run(formed.fn)));
  int annotated = 0;
  formed.fn.walk([&](mlir::Operation *op) { annotated += op->hasAttr("llm.kernel"); });
  EXPECT_EQ(annotated, 3);  // k RoPE, k write, v write
  auto planned = Lower(src);
  ASSERT_TRUE(planned.ok()) << planned.status();
  auto fromIr = llmc::LowerToExecutable(formed.fn, {});
  ASSERT_TRUE(fromIr.ok()) << fromIr.status();
  EXPECT_EQ(rt::DescribeExecutable(*fromIr), rt::DescribeExecutable(*planned));

  // Annotated with q as well, the launch would run at q, after the neg has
  // read the v cache it has not yet written: an error naming the op.
  std::string formedSrc = WithAttrs(
      kDecodeQkv, "{llm.kernel = {group = 0 : i64, kind = \"rope_cache_write\"}} ");
  size_t body = formedSrc.find(" {\n  %k0");
  ASSERT_NE(body, std::string::npos);
  formedSrc.replace(body, 2, " attributes {llm.kernels_formed} {");
  std::string msg = LowerError(formedSrc);
  EXPECT_CONTAINS(msg, "(kind \"rope_cache_write\")");
  EXPECT_CONTAINS(msg, "'llm.index_put' at ");
  EXPECT_CONTAINS(msg, "its result is used by 'llm.neg' at ");
  EXPECT_CONTAINS(msg, "before the kernel runs at its last member 'llm.rope' at ");
}

// A training forward's SDPA and the logsumexp it saves for backward
// (ATTN_ATTR / LSE_ATTR: annotations to fill in).
const char *kAttentionStats = R"(
func.func @f(%q: tensor<2x70x4x64xbf16>, %k: tensor<2x70x2x64xbf16>, %v: tensor<2x70x2x64xbf16>)
    -> (tensor<2x70x4x64xbf16>, tensor<2x4x70xf32>) {
  %o = llm.attention %q, %k, %v ATTN_ATTR: tensor<2x70x4x64xbf16>, tensor<2x70x2x64xbf16>, tensor<2x70x2x64xbf16>
  %lse = llm.attention_logsumexp %q, %k LSE_ATTR: tensor<2x70x4x64xbf16>, tensor<2x70x2x64xbf16> -> tensor<2x4x70xf32>
  return %o, %lse : tensor<2x70x4x64xbf16>, tensor<2x4x70xf32>
}
)";

std::string AttentionStatsSource(const std::string &attn, const std::string &lse) {
  std::string src = kAttentionStats;
  src.replace(src.find("ATTN_ATTR"), strlen("ATTN_ATTR"), attn);
  src.replace(src.find("LSE_ATTR"), strlen("LSE_ATTR"), lse);
  return src;
}

// One launch writes O and the logsumexp (the FlashAttention-2 kernel's
// write_lse variant, cuDNN's SDPA with its stats attached), where two ran:
// the attention, then a statistics-only pass over Q K^T.
TEST(KernelPlan, AnAttentionWritesTheStatisticsOfItsBackward) {
  for (const char *causal : {"{causal} ", ""}) {
    const std::string src = AttentionStatsSource(causal, causal);
    auto planned = Lower(src);
    ASSERT_TRUE(planned.ok()) << planned.status();
    ASSERT_EQ(planned->launches.size(), 1u) << rt::DescribeExecutable(*planned);
    const rt::Launch &l = planned->launches[0];
    EXPECT_NE(planned->kernels[l.kernel].name.find("_lse_"), std::string::npos)
        << planned->kernels[l.kernel].name;
    // The lse output (buffer of the second result) is the kernel's last
    // argument and the cuDNN attachment's lse.
    ASSERT_EQ(planned->attentions.size(), 1u);
    const rt::AttentionSpec &a = planned->attentions[0];
    ASSERT_TRUE(a.has_lse());
    EXPECT_EQ(l.args.back().buffer, a.lse.buffer);
    EXPECT_EQ(planned->buffers[a.lse.buffer].kind, rt::Buffer::Output);
    EXPECT_EQ(planned->buffers[a.lse.buffer].io_index, 1);
    EXPECT_EQ(l.args.front().buffer, a.o.buffer);

    Parsed formed = Parse(src);
    ASSERT_TRUE(formed.fn);
    mlir::PassManager pm(&SharedContext(), mlir::func::FuncOp::getOperationName());
    pm.addPass(llmc::createFormKernelsPass({}));
    ASSERT_TRUE(mlir::succeeded(pm.run(formed.fn)));
    int annotated = 0;
    formed.fn.walk([&](mlir::Operation *op) { annotated += op->hasAttr("llm.kernel"); });
    EXPECT_EQ(annotated, 2);
    auto fromIr = llmc::LowerToExecutable(formed.fn, {});
    ASSERT_TRUE(fromIr.ok()) << fromIr.status();
    EXPECT_EQ(rt::DescribeExecutable(*fromIr), rt::DescribeExecutable(*planned));

    // Formed without the decision: two launches, no lse on the attachment.
    std::string unfused = src;
    unfused.replace(unfused.find(" {\n  %o"), 2, " attributes {llm.kernels_formed} {");
    auto alone = Lower(unfused);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ(alone->launches.size(), 2u);
    ASSERT_EQ(alone->attentions.size(), 1u);
    EXPECT_FALSE(alone->attentions[0].has_lse());
  }
}

// AOTAutograd's forward: the statistics first, transposed for the backward
// before the attention (a view: no launch), then the attention. One launch.
TEST(KernelPlan, AViewOfTheStatisticsBeforeTheAttentionIsNoUse) {
  auto planned = Lower(R"(
func.func @f(%q: tensor<2x70x4x64xbf16>, %k: tensor<2x70x2x64xbf16>, %v: tensor<2x70x2x64xbf16>)
    -> (tensor<2x70x4x64xbf16>, tensor<2x70x4xf32>) {
  %lse = llm.attention_logsumexp %q, %k {causal} : tensor<2x70x4x64xbf16>, tensor<2x70x2x64xbf16> -> tensor<2x4x70xf32>
  %t = llm.transpose %lse [0, 2, 1] : tensor<2x4x70xf32>
  %o = llm.attention %q, %k, %v {causal} : tensor<2x70x4x64xbf16>, tensor<2x70x2x64xbf16>, tensor<2x70x2x64xbf16>
  %n = llm.neg %t : tensor<2x70x4xf32>
  return %o, %n : tensor<2x70x4x64xbf16>, tensor<2x70x4xf32>
})");
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(KernelLaunches(*planned), 2) << rt::DescribeExecutable(*planned);
  ASSERT_EQ(planned->attentions.size(), 1u);
  EXPECT_TRUE(planned->attentions[0].has_lse());
}

TEST(KernelPlan, AttentionStatsOfOtherOperandsAreNotOneLaunch) {
  // Different causal flags: two launches, and an annotation saying
  // otherwise is an error naming the op.
  auto planned = Lower(AttentionStatsSource("{causal} ", ""));
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(planned->launches.size(), 2u);
  std::string src = AttentionStatsSource(
      "{causal, llm.kernel = {group = 0 : i64, kind = \"attention_stats\"}} ",
      "{llm.kernel = {group = 0 : i64, kind = \"attention_stats\"}} ");
  src.replace(src.find(" {\n  %o"), 2, " attributes {llm.kernels_formed} {");
  std::string msg = LowerError(src);
  EXPECT_CONTAINS(msg, "'llm.attention_logsumexp' at ");
  EXPECT_CONTAINS(msg, "(kind \"attention_stats\")");
  EXPECT_CONTAINS(msg, "does not share the attention's query, key, causal and scale");

  // The statistics read before the attention runs: not one launch.
  planned = Lower(R"(
func.func @f(%q: tensor<2x70x4x64xbf16>, %k: tensor<2x70x2x64xbf16>, %v: tensor<2x70x2x64xbf16>)
    -> (tensor<2x70x4x64xbf16>, tensor<2x4x70xf32>) {
  %lse = llm.attention_logsumexp %q, %k {causal} : tensor<2x70x4x64xbf16>, tensor<2x70x2x64xbf16> -> tensor<2x4x70xf32>
  %n = llm.neg %lse : tensor<2x4x70xf32>
  %o = llm.attention %q, %k, %v {causal} : tensor<2x70x4x64xbf16>, tensor<2x70x2x64xbf16>, tensor<2x70x2x64xbf16>
  return %o, %n : tensor<2x70x4x64xbf16>, tensor<2x4x70xf32>
})");
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(KernelLaunches(*planned), 3);
  // Another kind's op in the group.
  msg = LowerError(R"(
func.func @f(%q: tensor<2x70x4x64xbf16>, %k: tensor<2x70x2x64xbf16>, %v: tensor<2x70x2x64xbf16>)
    -> tensor<2x70x4x64xbf16> attributes {llm.kernels_formed} {
  %o = llm.attention %q, %k, %v {causal, llm.kernel = {group = 0 : i64, kind = "attention_stats"}} : tensor<2x70x4x64xbf16>, tensor<2x70x2x64xbf16>, tensor<2x70x2x64xbf16>
  %n = llm.neg %o {llm.kernel = {group = 0 : i64, kind = "attention_stats"}} : tensor<2x70x4x64xbf16>
  return %n : tensor<2x70x4x64xbf16>
})");
  EXPECT_CONTAINS(msg, "an attention_stats kernel is one llm.attention and one llm.attention_logsumexp");
}

TEST(KernelPlan, MalformedAndUnknownAnnotationsAreErrors) {
  std::string msg = LowerError(R"(
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {llm.kernels_formed} {
  %e = llm.exp %x {llm.kernel = {group = 0 : i64}} : tensor<4x8xf32>
  return %e : tensor<4x8xf32>
})");
  EXPECT_CONTAINS(msg, "'llm.exp' at ");
  EXPECT_CONTAINS(msg, "expected {group = <integer>, kind = <string>}");

  msg = LowerError(R"(
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {llm.kernels_formed} {
  %e = llm.exp %x {llm.kernel = {group = 18446744073709551616 : i128, kind = "elementwise"}} : tensor<4x8xf32>
  return %e : tensor<4x8xf32>
})");
  EXPECT_CONTAINS(msg, "expected {group = <integer>, kind = <string>}");

  msg = LowerError(R"(
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {llm.kernels_formed} {
  %e = llm.exp %x {llm.kernel = {group = 0 : i64, kind = "epilogue"}} : tensor<4x8xf32>
  return %e : tensor<4x8xf32>
})");
  EXPECT_CONTAINS(msg, "that kind is none of residual_norm, elementwise, multi_gemv, swiglu_gemv, "
                       "rope_cache_write, attention_stats and row_reduction");

  msg = LowerError(R"(
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {llm.kernels_formed} {
  %e = llm.exp %x {llm.kernel = {group = 0 : i64, kind = "elementwise"}} : tensor<4x8xf32>
  %n = llm.neg %e {llm.kernel = {group = 0 : i64, kind = "residual_norm"}} : tensor<4x8xf32>
  return %n : tensor<4x8xf32>
})");
  EXPECT_CONTAINS(msg, "'llm.neg' at ");
  EXPECT_CONTAINS(msg, "it is annotated kind \"residual_norm\"");
}

// The RMSNorm backward as AOTAutograd decomposes Hugging Face's LlamaRMSNorm
// (test/Target/CUDA/row-kernels.mlir): dx = g*w*rstd - 0.5 * rstd^3 / n *
// sum(g*w*x) * 2x.
std::string RmsNormBackward() {
  return llmc::reference::testing::functionFromFile("test/Target/CUDA/row-kernels.mlir",
                                                    "rms_norm_backward");
}

TEST(KernelPlan, TheRmsNormBackwardIsOneRowKernel) {
  auto exe = Lower(RmsNormBackward());
  ASSERT_TRUE(exe.ok()) << exe.status();
  // Was three elementwise kernels around a row reduction: four launches.
  ASSERT_EQ(KernelLaunches(*exe), 1);
  EXPECT_EQ(exe->kernels.at(exe->launches[0].kernel).name.rfind("llmc_rowfused_", 0), 0u)
      << exe->kernels.at(exe->launches[0].kernel).name;

  // llmc-form-kernels writes the decision as one row_reduction group, and
  // the lowering of that annotation gives the same executable.
  Parsed formed = Parse(RmsNormBackward());
  ASSERT_TRUE(formed.fn);
  mlir::PassManager pm(&SharedContext(), mlir::func::FuncOp::getOperationName());
  pm.addPass(llmc::createFormKernelsPass({}));
  ASSERT_TRUE(mlir::succeeded(pm.run(formed.fn)));
  int members = 0;
  formed.fn.walk([&](mlir::Operation *op) {
    if (auto k = op->getAttrOfType<mlir::DictionaryAttr>("llm.kernel")) {
      ++members;
      EXPECT_EQ(k.getAs<mlir::StringAttr>("kind").getValue(), "row_reduction");
    }
  });
  EXPECT_EQ(members, 13); // every op but the constants and views
  auto fromIr = llmc::LowerToExecutable(formed.fn, {});
  ASSERT_TRUE(fromIr.ok()) << fromIr.status();
  EXPECT_EQ(rt::DescribeExecutable(*fromIr), rt::DescribeExecutable(*exe));
}

// The 1B LLaMA backward's RMSNorm with its weight gradient: the add of the
// two GEMM results, the product with xhat and its sum over [B, S] join the
// row kernel (was: an add, a mul, a column reduction and its combine, and
// the row kernel). The annotation it writes lowers to the same executable.
TEST(KernelPlan, TheWeightGradientIsSummedByTheRowKernel) {
  const std::string src = llmc::reference::testing::functionFromFile(
      "test/Target/CUDA/row-kernels.mlir", "rms_norm_backward_weight_grad");
  auto exe = Lower(src);
  ASSERT_TRUE(exe.ok()) << exe.status();
  ASSERT_EQ(KernelLaunches(*exe), 3) << rt::DescribeExecutable(*exe);
  EXPECT_EQ(exe->kernels.at(exe->launches[0].kernel).name.rfind("llmc_rowfused_", 0), 0u);
  Parsed formed = Parse(src);
  ASSERT_TRUE(formed.fn);
  mlir::PassManager pm(&SharedContext(), mlir::func::FuncOp::getOperationName());
  pm.addPass(llmc::createFormKernelsPass({}));
  ASSERT_TRUE(mlir::succeeded(pm.run(formed.fn)));
  bool sumIsMember = false;
  formed.fn.walk([&](mlir::Operation *op) {
    auto k = op->getAttrOfType<mlir::DictionaryAttr>("llm.kernel");
    if (auto r = mlir::dyn_cast<llmc::llm::ReduceSumOp>(op); r && k)
      sumIsMember |= r.getType().getRank() == 3 && r.getType().getDimSize(0) == 1 &&
                     k.getAs<mlir::StringAttr>("kind").getValue() == "row_reduction";
  });
  EXPECT_TRUE(sumIsMember) << "the weight gradient's sum is not in the row kernel";
  auto fromIr = llmc::LowerToExecutable(formed.fn, {});
  ASSERT_TRUE(fromIr.ok()) << fromIr.status();
  EXPECT_EQ(rt::DescribeExecutable(*fromIr), rt::DescribeExecutable(*exe));

  // A member reading a column sum: the sums are complete only after the
  // kernel.
  std::string msg = LowerError(R"(
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {llm.kernels_formed} {
  %e = llm.exp %x {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<4x8xf32>
  %c = llm.reduce_sum %e [0] keepdim {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<4x8xf32>
  %s = llm.reduce_sum %e [1] keepdim {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<4x8xf32>
  %cb = llm.broadcast %c : tensor<1x8xf32> to tensor<4x8xf32>
  %sb = llm.broadcast %s : tensor<4x1xf32> to tensor<4x8xf32>
  %n = llm.div %cb, %sb {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<4x8xf32>
  return %n : tensor<4x8xf32>
})");
  EXPECT_CONTAINS(msg, "'llm.div' at ");
  EXPECT_CONTAINS(msg, "an operand is a view of a member's result");

  // The same read without a view: with one row, a column sum has the
  // kernel's full shape, and a member reads it directly.
  msg = LowerError(R"(
func.func @f(%x: tensor<1x8xf32>) -> tensor<1x8xf32> attributes {llm.kernels_formed} {
  %e = llm.exp %x {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<1x8xf32>
  %s = llm.reduce_sum %e [1] keepdim {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<1x8xf32>
  %c = llm.reduce_sum %e [0] keepdim {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<1x8xf32>
  %n = llm.neg %c {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<1x8xf32>
  return %n : tensor<1x8xf32>
})");
  EXPECT_CONTAINS(msg, "'llm.neg' at ");
  EXPECT_CONTAINS(msg, "it reads a column sum of the kernel, which is complete only after the kernel");
}

TEST(KernelPlan, ARowKernelIsCheckedWhenReadBack) {
  // The reduction's input is also read by %m before the kernel runs at %n.
  std::string msg = LowerError(R"(
func.func @f(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) attributes {llm.kernels_formed} {
  %e = llm.exp %x {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<4x8xf32>
  %m = llm.neg %e : tensor<4x8xf32>
  %s = llm.reduce_sum %e [1] keepdim {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<4x8xf32>
  %b = llm.broadcast %s : tensor<4x1xf32> to tensor<4x8xf32>
  %n = llm.div %e, %b {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<4x8xf32>
  return %m, %n : tensor<4x8xf32>, tensor<4x8xf32>
})");
  EXPECT_CONTAINS(msg, "'llm.exp' at ");
  EXPECT_CONTAINS(msg, "is in llm.kernel group 0 (kind \"row_reduction\")");
  EXPECT_CONTAINS(msg, "before the kernel's last member, where the kernel runs and writes it");

  // A reduction over the first dimension is a column reduction.
  msg = LowerError(R"(
func.func @f(%x: tensor<4x8xf32>) -> tensor<1x8xf32> attributes {llm.kernels_formed} {
  %e = llm.exp %x {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<4x8xf32>
  %s = llm.reduce_sum %e [0] keepdim {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<4x8xf32>
  return %s : tensor<1x8xf32>
})");
  EXPECT_CONTAINS(msg, "a row_reduction kernel needs a reduction over the last dimension");

  // A member read back through a reshape: the kernel has not written it.
  msg = LowerError(R"(
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x1xf32> attributes {llm.kernels_formed} {
  %e = llm.exp %x {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<4x8xf32>
  %r = llm.reshape %e : tensor<4x8xf32> to tensor<4x2x4xf32>
  %r2 = llm.reshape %r : tensor<4x2x4xf32> to tensor<4x8xf32>
  %n = llm.neg %r2 {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<4x8xf32>
  %s = llm.reduce_sum %n [1] keepdim {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<4x8xf32>
  return %s : tensor<4x1xf32>
})");
  EXPECT_CONTAINS(msg, "'llm.neg' at ");
  EXPECT_CONTAINS(msg, "an operand is a view of a member's result");

  // A transposed input is neither dense nor a broadcast.
  msg = LowerError(R"(
func.func @f(%x: tensor<8x8xf32>) -> tensor<8x1xf32> attributes {llm.kernels_formed} {
  %t = llm.transpose %x [1, 0] : tensor<8x8xf32>
  %e = llm.exp %t {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<8x8xf32>
  %s = llm.reduce_sum %e [1] keepdim {llm.kernel = {group = 0 : i64, kind = "row_reduction"}} : tensor<8x8xf32>
  return %s : tensor<8x1xf32>
})");
  EXPECT_CONTAINS(msg, "an operand is neither a member");
}

// Softmax written out by hand: max, then sum(exp(x - max)), then the
// division: two reductions, the second reading the first, in one kernel.
TEST(KernelPlan, ASoftmaxWrittenOutIsOneRowKernel) {
  auto exe = Lower(R"(
func.func @f(%x: tensor<6x40xf32>) -> tensor<6x40xf32> {
  %m = llm.reduce_max %x [1] keepdim : tensor<6x40xf32>
  %mb = llm.broadcast %m : tensor<6x1xf32> to tensor<6x40xf32>
  %d = llm.sub %x, %mb : tensor<6x40xf32>
  %e = llm.exp %d : tensor<6x40xf32>
  %s = llm.reduce_sum %e [1] keepdim : tensor<6x40xf32>
  %sb = llm.broadcast %s : tensor<6x1xf32> to tensor<6x40xf32>
  %y = llm.div %e, %sb : tensor<6x40xf32>
  return %y : tensor<6x40xf32>
})");
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(KernelLaunches(*exe), 1);
}

} // namespace
