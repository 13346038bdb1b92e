//===- KernelConfigsTest.cpp - the lowering obeys llm.kernel_config -------===//
//
// llmc-select-kernel-configs chooses every kernel configuration in IR; a
// function marked `llm.kernel_configs` is lowered from those attributes
// (llmc::decidedKernelConfigs), not chosen again. These tests show that the
// pass's choice gives the executable the lowering's own choice gave, that
// another choice written in IR gives other launches, and that a choice the
// kernels cannot run is an error naming the op.
//
//===----------------------------------------------------------------------===//

#include "../MlirContext.h"

#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/runtime/ExecutableDump.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <string>

namespace {

namespace rt = llmc::rt;
using llmc::test::SharedContext;

absl::StatusOr<rt::Executable> Lower(const std::string &src, bool select = false) {
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(src, mlir::ParserConfig(&SharedContext()));
  if (!module)
    return absl::InvalidArgumentError("test source did not parse:\n" + src);
  auto fn = *module->getOps<mlir::func::FuncOp>().begin();
  if (select) {
    mlir::PassManager pm(&SharedContext(), mlir::func::FuncOp::getOperationName());
    pm.addPass(llmc::createSelectKernelConfigsPass({}));
    if (mlir::failed(pm.run(fn)))
      return absl::InternalError("llmc-select-kernel-configs failed");
    if (!fn->hasAttr("llm.kernel_configs"))
      return absl::InternalError("llmc-select-kernel-configs did not mark the function");
  }
  return llmc::LowerToExecutable(fn, {});
}

/// `body` as a function of q, k, v (and a mask), with `fnAttr` as its
/// attributes and `config` as the attention's llm.kernel_config.
std::string Attention(const std::string &q, const std::string &kv, const std::string &config,
                      const std::string &fnAttr = "{llm.kernel_configs = {elementwise_unroll = 1 : i64}}",
                      const std::string &extra = "") {
  std::string attrs = config.empty() ? extra : "{llm.kernel_config = " + config +
                                                   (extra.empty() ? "" : ", " + extra.substr(1, extra.size() - 2)) + "}";
  return "func.func @f(%q: " + q + ", %k: " + kv + ", %v: " + kv + ") -> " + q +
         (fnAttr.empty() ? "" : " attributes " + fnAttr) + " {\n  %o = llm.attention %q, %k, %v " +
         attrs + " : " + q + ", " + kv + ", " + kv + "\n  return %o : " + q + "\n}\n";
}

const std::string kDecodeQ = "tensor<1x1x32x128xbf16>", kDecodeKV = "tensor<1x512x8x128xbf16>";
const std::string kPrefill = "tensor<2x64x8x128xbf16>";

TEST(KernelConfigs, TheSelectedConfigurationGivesTheExecutableTheLoweringChose) {
  for (const std::string &src : {Attention(kDecodeQ, kDecodeKV, "", ""),
                                 Attention(kPrefill, kPrefill, "", "", "{causal}")}) {
    auto chosen = Lower(src);
    ASSERT_TRUE(chosen.ok()) << chosen.status();
    auto selected = Lower(src, /*select=*/true);
    ASSERT_TRUE(selected.ok()) << selected.status();
    EXPECT_EQ(rt::DescribeExecutable(*selected), rt::DescribeExecutable(*chosen)) << src;
  }
}

TEST(KernelConfigs, TheLoweringFollowsTheAttentionConfig) {
  // One query: flash-decoding by the rule, a combine kernel merging its
  // splits (two launches per call, nothing prepared) ...
  auto decode = Lower(Attention(kDecodeQ, kDecodeKV, "", ""));
  ASSERT_TRUE(decode.ok()) << decode.status();
  ASSERT_EQ(decode->launches.size(), 2u);
  EXPECT_EQ(decode->num_prepare_launches, 0);
  EXPECT_EQ(decode->launches[0].kind, rt::Launch::Kernel);
  EXPECT_NE(decode->kernels[decode->launches[1].kernel].name.find("flashdec_combine"),
            std::string::npos);
  // ... in the number of splits written in IR, with the combine kernel
  // unless IR says fused_combine ...
  auto three = Lower(Attention(kDecodeQ, kDecodeKV, R"({kernel = "flash_decode", splits = 3 : i64})"));
  ASSERT_TRUE(three.ok()) << three.status();
  ASSERT_EQ(three->launches.size(), 2u);
  EXPECT_EQ(three->num_prepare_launches, 0);
  EXPECT_EQ(three->launches[0].grid[0], 3u);
  auto fused = Lower(Attention(kDecodeQ, kDecodeKV,
                               R"({fused_combine, kernel = "flash_decode", splits = 3 : i64})"));
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(fused->launches.size(), 2u);
  EXPECT_EQ(fused->num_prepare_launches, 1);
  EXPECT_EQ(fused->launches[1].grid[0], 3u);
  EXPECT_NE(fused->kernels[fused->launches[1].kernel].name.find("_fused_"), std::string::npos);
  // ... or the FlashAttention-2 kernel alone when IR says so.
  auto flash = Lower(Attention(kDecodeQ, kDecodeKV,
                               R"({cudnn = false, kernel = "flash_attention", tile = "bm64_bn64_w4_s2_gh"})"));
  ASSERT_TRUE(flash.ok()) << flash.status();
  EXPECT_EQ(flash->launches.size(), 1u);
  EXPECT_TRUE(flash->attentions.empty());

  // Prefill: cuDNN's SDPA rides along by the rule, not when IR says no.
  auto withCudnn = Lower(Attention(kPrefill, kPrefill, "", "", "{causal}"));
  ASSERT_TRUE(withCudnn.ok()) << withCudnn.status();
  EXPECT_EQ(withCudnn->attentions.size(), 1u);
  auto without = Lower(Attention(kPrefill, kPrefill,
                                 R"({cudnn = false, kernel = "flash_attention", tile = "bm64_bn64_w4_s2_gh"})",
                                 "{llm.kernel_configs = {elementwise_unroll = 1 : i64}}", "{causal}"));
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_TRUE(without->attentions.empty());
  ASSERT_EQ(without->launches.size(), 1u);
  EXPECT_EQ(without->launches[0].attention, -1);
}

TEST(KernelConfigs, TheLoweringFollowsTheElementwiseUnroll) {
  const char *src = R"(
func.func @f(%x: tensor<64x256xbf16>) -> tensor<64x256xbf16> attributes {llm.kernel_configs = {elementwise_unroll = UNROLL : i64}} {
  %e = llm.exp %x : tensor<64x256xbf16>
  return %e : tensor<64x256xbf16>
})";
  auto withUnroll = [&](const std::string &u) {
    std::string s = src;
    s.replace(s.find("UNROLL"), 6, u);
    return Lower(s);
  };
  auto one = withUnroll("1"), four = withUnroll("4");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(four.ok()) << four.status();
  ASSERT_EQ(one->kernels.size(), 1u);
  ASSERT_EQ(four->kernels.size(), 1u);
  EXPECT_NE(one->kernels[0].source, four->kernels[0].source);
  std::string unconfigured = src;
  unconfigured.replace(unconfigured.find(" attributes"), unconfigured.find(" {\n  %e") - unconfigured.find(" attributes"), "");
  auto plain = Lower(unconfigured);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(rt::DescribeExecutable(*plain), rt::DescribeExecutable(*one));
}

// The GEMV unroll changes the decode GEMV kernel (its loads in flight), not
// the launches: same grid, arguments and buffers; an unconfigured function
// gets the default (4), whose kernel keeps its name.
TEST(KernelConfigs, TheLoweringFollowsTheGemvUnroll) {
  const char *src = R"(
func.func @f(%x: tensor<1x256xbf16>, %w: tensor<512x256xbf16>) -> tensor<1x512xbf16> attributes {llm.kernel_configs = {elementwise_unroll = 1 : i64, gemv_unroll = UNROLL : i64}} {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<1x256xbf16>, tensor<512x256xbf16> -> tensor<1x512xbf16>
  return %y : tensor<1x512xbf16>
})";
  auto withUnroll = [&](const std::string &u) {
    std::string s = src;
    s.replace(s.find("UNROLL"), 6, u);
    return Lower(s);
  };
  auto four = withUnroll("4"), eight = withUnroll("8");
  ASSERT_TRUE(four.ok()) << four.status();
  ASSERT_TRUE(eight.ok()) << eight.status();
  ASSERT_EQ(four->kernels.size(), 1u);
  ASSERT_EQ(eight->kernels.size(), 1u);
  EXPECT_EQ(four->kernels[0].name, "llmc_gemv_bf16_bf16_m1_k256");
  EXPECT_EQ(eight->kernels[0].name, "llmc_gemv_bf16_bf16_m1_k256_u8");
  EXPECT_NE(eight->kernels[0].source.find("kUnroll = 8;"), std::string::npos);
  ASSERT_EQ(four->launches.size(), 1u);
  ASSERT_EQ(eight->launches.size(), 1u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(four->launches[0].grid[i], eight->launches[0].grid[i]);
    EXPECT_EQ(four->launches[0].block[i], eight->launches[0].block[i]);
  }
  std::string unconfigured = src;
  size_t at = unconfigured.find(" attributes");
  unconfigured.replace(at, unconfigured.find(" {\n  %y") - at, "");
  auto plain = Lower(unconfigured);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(rt::DescribeExecutable(*plain), rt::DescribeExecutable(*four));
}

std::string LowerError(const std::string &src) {
  auto exe = Lower(src);
  if (exe.ok())
    return "lowered without error";
  std::string msg(exe.status().message());
  EXPECT_EQ(msg.find("internal error"), std::string::npos) << msg;
  return msg;
}

#define EXPECT_CONTAINS(haystack, needle)                                      \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(KernelConfigs, ConfigurationsTheKernelsCannotRunAreErrors) {
  // Flash-decoding takes at most 16 queries.
  std::string msg = LowerError(Attention(kPrefill, kPrefill, R"({kernel = "flash_decode", splits = 4 : i64})"));
  EXPECT_CONTAINS(msg, "'llm.attention' at ");
  EXPECT_CONTAINS(msg, "its llm.kernel_config chooses flash_decode, whose kernel takes at most 16 queries, a float mask dense along the keys");

  // Inside the kernel's ranges but with no register layout (bf16, head dim
  // 16, group 5, 13 queries): rejected before any kernel is generated.
  msg = LowerError(Attention("tensor<1x13x5x16xbf16>", "tensor<1x300x1x16xbf16>",
                             R"({kernel = "flash_decode", splits = 2 : i64})"));
  EXPECT_CONTAINS(msg, "its llm.kernel_config chooses flash_decode, whose kernel takes at most 16 queries");
  EXPECT_CONTAINS(msg, "with a register layout that fits");

  // cuDNN's SDPA takes bf16 and f16 only.
  const std::string f32 = "tensor<1x64x4x64xf32>";
  msg = LowerError(Attention(f32, f32, R"({cudnn = true, kernel = "flash_attention", tile = "bm64_bn64_w4_s2_gh"})"));
  EXPECT_CONTAINS(msg, "its llm.kernel_config asks for cuDNN's fused attention, which does not take it: dtype f32");

  // A tile the tensor-core kernel has not: block_m 32.
  msg = LowerError(Attention(kPrefill, kPrefill, R"({cudnn = false, kernel = "flash_attention", tile = "bm32_bn64_w4_s2"})"));
  EXPECT_CONTAINS(msg, "the tile of its llm.kernel_config (from --attention-tile or LLMC_ATTN_CONFIG): attention tile bm32_bn64_w4_s2 with head dim 128: block_m must be 64 or 128");
}

TEST(KernelConfigs, MalformedOrMissingConfigurationsAreErrors) {
  std::string msg = LowerError(Attention(kDecodeQ, kDecodeKV, R"({kernel = "flash_decode", splits = 0 : i64})"));
  EXPECT_CONTAINS(msg, "'llm.attention' at ");
  EXPECT_CONTAINS(msg, "has llm.kernel_config = {kernel = \"flash_decode\", splits = 0 : i64}; expected {kernel = \"flash_decode\", splits = <1..256>[, fused_combine]} or");
  msg = LowerError(Attention(kDecodeQ, kDecodeKV, R"({fused_combine = 1 : i64, kernel = "flash_decode", splits = 2 : i64})"));
  EXPECT_CONTAINS(msg, "has llm.kernel_config = {fused_combine = 1 : i64, kernel = \"flash_decode\", splits = 2 : i64}; expected");

  msg = LowerError(Attention(kPrefill, kPrefill, R"({cudnn = false, kernel = "flash_attention", tile = "big"})"));
  EXPECT_CONTAINS(msg, "; expected {kernel = \"flash_decode\"");

  msg = LowerError(Attention(kPrefill, kPrefill, ""));
  EXPECT_CONTAINS(msg, "has no llm.kernel_config in a function whose kernel configurations were selected");

  msg = LowerError(Attention(kPrefill, kPrefill, "", "{llm.kernel_configs = {elementwise_unroll = 7 : i64}}"));
  EXPECT_CONTAINS(msg, "'func.func' at ");
  EXPECT_CONTAINS(msg, "has llm.kernel_configs = {elementwise_unroll = 7 : i64}; expected "
                       "{elementwise_unroll = <1, 2, 3 or 4>, gemv_unroll = <1..16>}");

  msg = LowerError(Attention(kPrefill, kPrefill, "",
                             "{llm.kernel_configs = {elementwise_unroll = 1 : i64, gemv_unroll = 32 : i64}}"));
  EXPECT_CONTAINS(msg, "gemv_unroll = 32 : i64}; expected");
}

/// A decode step of llm.paged_attention: 4 sequences, 8 KV heads (group 4),
/// pages of 16 keys, `rows` new tokens per sequence.
std::string PagedAttention(const std::string &config, int rows = 1,
                           const std::string &fnAttr = "{llm.kernel_configs = {elementwise_unroll = 1 : i64}}") {
  std::string t = std::to_string(4 * rows);
  std::string q = "tensor<" + t + "x32x128xbf16>", kp = "tensor<256x16x8x128xbf16>";
  std::string types = q + ", " + kp + ", " + kp + ", tensor<4x64xi32>, tensor<5xi32>, tensor<4xi32>";
  return "func.func @f(%q: " + q + ", %kp: " + kp + ", %vp: " + kp +
         ", %bt: tensor<4x64xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) -> " + q +
         (fnAttr.empty() ? "" : " attributes " + fnAttr) +
         " {\n  %o = llm.paged_attention %q, %kp, %vp, %bt, %cu, %lens {causal" +
         (config.empty() ? "" : ", llm.kernel_config = " + config) + "} : " + types +
         "\n  return %o : " + q + "\n}\n";
}

// llm.paged_attention (issue 19): paged flash-decoding in the splits and
// query rows its llm.kernel_config gives; the selected configuration gives
// the lowering's own executable; malformed configurations are errors.
TEST(KernelConfigs, PagedAttentionFollowsItsConfig) {
  for (int rows : {1, 3}) {
    auto chosen = Lower(PagedAttention("", rows, ""));
    ASSERT_TRUE(chosen.ok()) << chosen.status();
    auto selected = Lower(PagedAttention("", rows, ""), /*select=*/true);
    ASSERT_TRUE(selected.ok()) << selected.status();
    EXPECT_EQ(rt::DescribeExecutable(*selected), rt::DescribeExecutable(*chosen));
    ASSERT_EQ(chosen->launches.size(), 2u);  // split + combine
    EXPECT_NE(chosen->kernels[chosen->launches[0].kernel].name.find("_q" + std::to_string(rows) + "_causal_paged16"),
              std::string::npos)
        << chosen->kernels[chosen->launches[0].kernel].name;
  }
  auto five = Lower(PagedAttention(R"({kernel = "paged_flash_decode", query_rows = 2 : i64, splits = 5 : i64})"));
  ASSERT_TRUE(five.ok()) << five.status();
  ASSERT_EQ(five->launches.size(), 2u);
  EXPECT_EQ(five->launches[0].grid[0], 5u);
  EXPECT_NE(five->kernels[five->launches[0].kernel].name.find("_q2_causal_paged16"), std::string::npos);

  // No new tokens: nothing to launch (a combine grid of one block would
  // write past the empty result).
  auto none = Lower(PagedAttention("", 0, ""));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->launches.empty());

  std::string msg = LowerError(PagedAttention(R"({kernel = "paged_flash_decode", query_rows = 17 : i64, splits = 5 : i64})"));
  EXPECT_CONTAINS(msg, "'llm.paged_attention' at ");
  EXPECT_CONTAINS(msg, "expected {kernel = \"paged_flash_decode\", splits = <1..256>, query_rows = <1..16>}");
  msg = LowerError(PagedAttention(R"({kernel = "flash_decode", splits = 5 : i64})"));
  EXPECT_CONTAINS(msg, "expected {kernel = \"paged_flash_decode\"");
}

// llm.varlen_attention: FlashAttention-2 in the tile of its llm.kernel_config;
// cuDNN is not offered for it.
TEST(KernelConfigs, VarlenAttentionFollowsItsConfig) {
  auto src = [](const std::string &config) {
    const std::string q = "tensor<300x8x128xbf16>", kv = "tensor<400x2x128xbf16>";
    return "func.func @f(%q: " + q + ", %k: " + kv + ", %v: " + kv +
           ", %cuq: tensor<5xi32>, %cuk: tensor<5xi32>) -> " + q +
           " attributes {llm.kernel_configs = {elementwise_unroll = 1 : i64}} {\n"
           "  %o = llm.varlen_attention %q, %k, %v, %cuq, %cuk {causal, llm.kernel_config = " +
           config + "} : " + q + ", " + kv + ", " + kv +
           ", tensor<5xi32>, tensor<5xi32>\n  return %o : " + q + "\n}\n";
  };
  auto wide = Lower(src(R"({cudnn = false, kernel = "flash_attention", tile = "bm128_bn64_w8_s2_gh"})"));
  ASSERT_TRUE(wide.ok()) << wide.status();
  ASSERT_EQ(wide->launches.size(), 1u);
  EXPECT_EQ(wide->launches[0].grid[0], 4u * 8u);  // B x Hq
  EXPECT_EQ(wide->launches[0].grid[1], 3u);       // 300 rows in 128-row tiles
  std::string msg = LowerError(src(R"({cudnn = true, kernel = "flash_attention", tile = "bm64_bn64_w4_s2_gh"})"));
  EXPECT_CONTAINS(msg, "'llm.varlen_attention' at ");
  EXPECT_CONTAINS(msg, "expected {kernel = \"flash_attention\", tile = \"bm<M>_bn<N>_w<warps>_s<stages>[_gh]\", cudnn = false}");
}

} // namespace
