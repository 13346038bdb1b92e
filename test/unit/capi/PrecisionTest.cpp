// Precision policies through the C++ JIT API (CompilerOptions::precision):
// what the CUDA backend makes of the fp8 policy's GEMMs (cuBLASLt fp8 "TN"
// GEMMs with 16-aligned K and N for sm_90a, dequantize + bf16 GEMMs for
// sm_80) and of llmc-pad-layout's llm.pad, with every kernel compiled by
// NVRTC. No GPU needed; the numerics on the GPU are checked by
// `llmc-run --precision=... --check` (scripts/gpu-round.sh, the C2 cases).
#include "llmc/Compiler.h"

#include "gtest/gtest.h"

#include <fstream>
#include <sstream>

namespace {

namespace rt = llmc::rt;

std::shared_ptr<llmc::Compiler> MakeCompiler(const std::string &arch,
                                             const std::string &precision) {
  llmc::CompilerOptions options;
  options.arch = arch;
  options.precision = precision;
  auto c = llmc::Compiler::Create(options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::shared_ptr<llmc::Compiler>(std::move(*c)) : nullptr;
}

// M = 3*5 = 15 (batch folded into M), K = 200, N = 160: none a multiple of 16;
// the weight is [N, K] (nn.Linear, transpose_rhs) in the first, [K, N] in
// the second (needs the transpose into the TN layout), plus a bias.
std::string Projections(const std::string &t) {
  std::string s = R"(
func.func @proj(%x: tensor<3x5x200xT>, %w: tensor<160x200xT>,
                %w2: tensor<160x200xT>, %b: tensor<200xT>) -> tensor<3x5x200xT> {
  %q = llm.matmul %x, %w {transpose_rhs} : tensor<3x5x200xT>, tensor<160x200xT> -> tensor<3x5x160xT>
  %o = llm.matmul %q, %w2 bias %b : tensor<3x5x160xT>, tensor<160x200xT>, tensor<200xT> -> tensor<3x5x200xT>
  return %o : tensor<3x5x200xT>
}
)";
  for (size_t p; (p = s.find("xT>")) != std::string::npos;)
    s.replace(p, 3, "x" + t + ">");
  return s;
}
const std::string kProjections = Projections("bf16");

bool IsFp8(rt::DType t) { return t == rt::DType::f8e4m3 || t == rt::DType::f8e5m2; }

int CountKernels(const rt::Executable &exe, const std::string &prefix) {
  int n = 0;
  for (const rt::Launch &l : exe.launches)
    if (l.kind == rt::Launch::Kernel && exe.kernels[l.kernel].name.rfind(prefix, 0) == 0)
      ++n;
  return n;
}

TEST(Precision, RejectsUnknownPolicy) {
  llmc::CompilerOptions options;
  options.arch = "sm_90a";
  options.precision = "fp4";
  auto c = llmc::Compiler::Create(options);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("'fp4'"), std::string::npos) << c.status();
}

// CompilerOptions::weight_only (the torch.compile option weight_only): a
// decode projection's parameter weight is quantized once, in the
// preparation segment, and the per-call launch is the weight-only GEMV;
// a bad mode or one combined with fp8 is refused when the compiler is made.
TEST(Precision, WeightOnlyQuantizesParameterWeightsInThePreparation) {
  const std::string text = R"(
func.func @f(%x: tensor<1x256xbf16>, %w: tensor<512x256xbf16>) -> tensor<1x512xbf16> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<1x256xbf16>, tensor<512x256xbf16> -> tensor<1x512xbf16>
  return %y : tensor<1x512xbf16>
})";
  for (std::string mode : {"none", "int8", "int4"}) {
    llmc::CompilerOptions options;
    options.arch = "sm_90a";
    options.weight_only = mode;
    options.compile_kernels = false;
    auto c = llmc::Compiler::Create(options);
    ASSERT_TRUE(c.ok()) << c.status();
    auto exe = (*c)->Compile(text, "", {});
    ASSERT_TRUE(exe.ok()) << mode << ": " << exe.status();
    std::string perCall;
    for (size_t i = (*exe)->num_prepare_launches; i < (*exe)->launches.size(); ++i)
      if ((*exe)->launches[i].kind == rt::Launch::Kernel)
        perCall += (*exe)->kernels[(*exe)->launches[i].kernel].name + " ";
    if (mode == "none") {
      EXPECT_EQ((*exe)->num_prepare_launches, 0);
      EXPECT_EQ(perCall, "llmc_gemv_bf16_bf16_m1_k256 ");
    } else {
      EXPECT_GT((*exe)->num_prepare_launches, 0) << mode;
      EXPECT_TRUE((*exe)->inputs[1].parameter);
      EXPECT_EQ(perCall, "llmc_qgemv_" + std::string(mode == "int8" ? "i8" : "i4") +
                             "_g128_bf16_bf16_m1_k256 ")
          << mode;
    }
  }
  llmc::CompilerOptions bad;
  bad.arch = "sm_90a";
  bad.weight_only = "int3";
  auto c = llmc::Compiler::Create(bad);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("weight_only: expected none, int8 or int4, found 'int3'"),
            std::string::npos) << c.status();
  bad.weight_only = "int8";
  bad.precision = "fp8";
  c = llmc::Compiler::Create(bad);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("fp8"), std::string::npos) << c.status();
}

TEST(Precision, Fp8GemmsAreCublasLtTnWithAlignedK) {
  auto compiler = MakeCompiler("sm_90a", "fp8");
  ASSERT_TRUE(compiler);
  auto exe = compiler->Compile(kProjections, "", {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  ASSERT_EQ((*exe)->gemms.size(), 2u);
  for (const rt::GemmSpec &g : (*exe)->gemms) {
    EXPECT_EQ(g.dtype_a, rt::DType::f8e4m3);
    EXPECT_EQ(g.dtype_b, rt::DType::f8e4m3);
    // The per-tensor scales scale the accumulator (cuBLASLt's A/B scale
    // pointers), which is written as bf16 directly; with a bias (the second
    // GEMM) the GEMM writes f32 and one kernel scales, adds the bias and
    // rounds once.
    const bool biased = &g == &(*exe)->gemms[1];
    EXPECT_EQ(g.dtype_d, biased ? rt::DType::f32 : rt::DType::bf16);
    EXPECT_EQ(g.scale_a.buffer >= 0, !biased);
    EXPECT_EQ(g.scale_b.buffer >= 0, !biased);
    EXPECT_FALSE(g.transa);
    EXPECT_TRUE(g.transb);
    EXPECT_EQ(g.k % 16, 0) << g.k;
    EXPECT_EQ(g.n % 16, 0) << g.n;
    EXPECT_EQ(g.lda, g.k);
    EXPECT_EQ(g.ldb, g.k);
    EXPECT_GE(g.m, 15);
    EXPECT_EQ(g.epilogue, rt::Epilogue::none); // the fp8 bias is a kernel
  }
  // Unaligned operands are padded by llm.pad kernels: x, w, q, w2 and the
  // bias (an operand of the scaled GEMM, added after its scaling).
  EXPECT_EQ(CountKernels(**exe, "llmc_pad_"), 5);
  for (const rt::KernelSpec &k : (*exe)->kernels)
    EXPECT_FALSE(k.cubin.empty()) << k.name;
  EXPECT_TRUE((*exe)->Validate().ok());
}

TEST(Precision, Fp8OnSm80DequantizesToBf16Gemms) {
  auto compiler = MakeCompiler("sm_80", "fp8");
  ASSERT_TRUE(compiler);
  auto exe = compiler->Compile(kProjections, "", {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  ASSERT_EQ((*exe)->gemms.size(), 2u);
  for (const rt::GemmSpec &g : (*exe)->gemms) {
    EXPECT_FALSE(IsFp8(g.dtype_a) || IsFp8(g.dtype_b));
    EXPECT_EQ(g.dtype_a, rt::DType::bf16);
  }
  for (const rt::KernelSpec &k : (*exe)->kernels)
    EXPECT_FALSE(k.cubin.empty()) << k.name;
}

TEST(Precision, SixteenBitPoliciesCastF32Gemms) {
  for (const char *policy : {"fp32", "bf16", "fp16"}) {
    auto compiler = MakeCompiler("sm_90a", policy);
    ASSERT_TRUE(compiler);
    auto exe = compiler->Compile(Projections("f32"), "", {});
    ASSERT_TRUE(exe.ok()) << policy << ": " << exe.status();
    for (const rt::GemmSpec &g : (*exe)->gemms)
      EXPECT_EQ(g.dtype_a, std::string(policy) == "fp16"   ? rt::DType::f16
                           : std::string(policy) == "bf16" ? rt::DType::bf16
                                                           : rt::DType::f32)
          << policy;
    // Only fp8 pads (cuBLASLt handles unaligned 16-bit GEMMs).
    EXPECT_EQ(CountKernels(**exe, "llmc_pad_"), 0) << policy;
  }
}

} // namespace
