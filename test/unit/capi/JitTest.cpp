// C++ JIT API tests (llmc/Compiler.h): compile errors as statuses,
// signatures of a compiled example, thread-safe compiles and the
// specialization cache of a JitFunction.
#include "../ExamplePath.h"
#include "llmc/Compiler.h"

#include "gtest/gtest.h"

#include <fstream>
#include <sstream>
#include <thread>

namespace {

using llmc::test::ReadExample;

std::shared_ptr<llmc::Compiler> MakeCompiler() {
  llmc::CompilerOptions options;
  options.arch = "sm_90a";
  auto c = llmc::Compiler::Create(options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::shared_ptr<llmc::Compiler>(std::move(*c)) : nullptr;
}

/// Input shapes of tiny_llama_block for sequence length `seq`.
std::vector<std::vector<int64_t>> TinyLlamaShapes(int64_t seq) {
  return {{1, seq, 64}, {64},      {64, 64},  {32, 64},  {32, 64},
          {64, 64},     {64},      {176, 64}, {176, 64}, {64, 176}};
}

// The C API takes exactly the arch spellings llmc-compile and NVRTC take
// (rt::IsValidArch): the 'f' suffix too, and no malformed one.
TEST(JitCompiler, RejectsBadArch) {
  for (const char *arch : {"hopper", "sm_9", "sm_", "sm_90x", "compute_90af", "sm_123456",
                           "sm_090", "compute_0090", "sm_80a", "sm_89a", "sm_90f"}) {
    llmc::CompilerOptions options;
    options.arch = arch;
    auto c = llmc::Compiler::Create(options);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << arch;
    EXPECT_NE(c.status().message().find(std::string("expected ") + llmc::rt::kArchSpelling +
                                        ", found '" + arch + "'"),
              std::string::npos)
        << c.status();
  }
  for (const char *arch : {"sm_100f", "compute_90a", "sm_89", "sm_100a", "sm_120"}) {
    llmc::CompilerOptions options;
    options.arch = arch;
    EXPECT_TRUE(llmc::Compiler::Create(options).ok()) << arch;
  }
}

// A well-formed arch older than sm_80 is refused when the compiler is made,
// not late in NVRTC or ptxas (the kernels use bf16, cp.async, mma.sync).
TEST(JitCompiler, RejectsArchBelowSm80) {
  for (const char *arch : {"sm_75", "sm_70", "compute_60"}) {
    llmc::CompilerOptions options;
    options.arch = arch;
    auto c = llmc::Compiler::Create(options);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << arch;
    EXPECT_NE(c.status().message().find(std::string(arch) + ": llmc's kernels need sm_80"),
              std::string::npos)
        << c.status();
  }
  llmc::CompilerOptions options;
  options.arch = "sm_80";
  EXPECT_TRUE(llmc::Compiler::Create(options).ok());
}

// Every executable says which llmc made it (rt::Executable::producer, kept
// in the .llmcx file) for diagnostics of cached or shipped files.
TEST(JitCompiler, ExecutablesNameTheirProducer) {
  llmc::CompilerOptions options;
  options.arch = "sm_90a";
  options.compile_kernels = false;
  auto c = llmc::Compiler::Create(options);
  ASSERT_TRUE(c.ok()) << c.status();
  auto exe = (*c)->Compile(R"(
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = llm.add %x, %x : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
})", "", {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ((*exe)->producer, "llmc " LLMC_PROJECT_VERSION);
  auto back = llmc::rt::DeserializeExecutable(llmc::rt::SerializeExecutable(**exe));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->producer, (*exe)->producer);
}

TEST(JitCompiler, DefaultArchResolves) {
  auto c = llmc::Compiler::Create();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE((*c)->arch().empty());
}

TEST(JitCompiler, CompilesTinyLlamaWithCubins) {
  auto compiler = MakeCompiler();
  ASSERT_TRUE(compiler);
  auto exe = compiler->Compile(ReadExample("tiny_llama_block.mlir"), "", {{"seq", 7}});
  ASSERT_TRUE(exe.ok()) << exe.status();
  ASSERT_EQ((*exe)->inputs.size(), 10u);
  EXPECT_EQ((*exe)->inputs[0].shape, (std::vector<int64_t>{1, 7, 64}));
  EXPECT_EQ((*exe)->inputs[0].dtype, llmc::rt::DType::f32);
  ASSERT_EQ((*exe)->outputs.size(), 1u);
  EXPECT_EQ((*exe)->outputs[0].shape, (std::vector<int64_t>{1, 7, 64}));
  EXPECT_EQ((*exe)->symbol_bindings.at("seq"), 7);
  EXPECT_TRUE((*exe)->Validate().ok());
  ASSERT_FALSE((*exe)->kernels.empty());
  for (const auto &k : (*exe)->kernels) {
    EXPECT_EQ(k.arch, "sm_90a") << k.name;
    EXPECT_FALSE(k.cubin.empty()) << k.name;
  }
}

// The compile path of the C API and the torch.compile plugin raises the
// decomposed RMSNorm the plugin imports for HF's LlamaRMSNorm (bf16) to one
// llm.rms_norm kernel (PrepareForLowering); as written it is 5 kernels.
TEST(JitCompiler, RaisesDecomposedRMSNorm) {
  auto compiler = MakeCompiler();
  ASSERT_TRUE(compiler);
  const std::string text = R"mlir(
func.func @norm(%x: tensor<1x?x128xbf16> {llm.dim_names = ["seq"]}, %w: tensor<128xbf16>) -> tensor<1x?x128xbf16> {
  %2 = llm.broadcast %w : tensor<128xbf16> to tensor<1x?x128xbf16>
  %3 = llm.cast %x : tensor<1x?x128xbf16> to tensor<1x?x128xf32>
  %4 = llm.constant dense<2.0> : tensor<f32>
  %5 = llm.broadcast %4 : tensor<f32> to tensor<1x?x128xf32>
  %6 = llm.pow %3, %5 : tensor<1x?x128xf32>
  %7 = llm.reduce_mean %6 [2] keepdim : tensor<1x?x128xf32>
  %8 = llm.constant dense<1.0e-06> : tensor<f32>
  %9 = llm.broadcast %8 : tensor<f32> to tensor<1x?x1xf32>
  %10 = llm.add %7, %9 : tensor<1x?x1xf32>
  %11 = llm.rsqrt %10 : tensor<1x?x1xf32>
  %12 = llm.broadcast %11 : tensor<1x?x1xf32> to tensor<1x?x128xf32>
  %13 = llm.mul %3, %12 : tensor<1x?x128xf32>
  %14 = llm.cast %13 : tensor<1x?x128xf32> to tensor<1x?x128xbf16>
  %15 = llm.mul %2, %14 : tensor<1x?x128xbf16>
  return %15 : tensor<1x?x128xbf16>
}
)mlir";
  auto exe = compiler->Compile(text, "norm", {{"seq", 16}});
  ASSERT_TRUE(exe.ok()) << exe.status();
  ASSERT_EQ((*exe)->kernels.size(), 1u);
  EXPECT_NE((*exe)->kernels[0].name.find("rmsnorm"), std::string::npos)
      << (*exe)->kernels[0].name;
  EXPECT_TRUE((*exe)->gemms.empty());
}

TEST(JitCompiler, ErrorsAreStatuses) {
  auto compiler = MakeCompiler();
  ASSERT_TRUE(compiler);
  std::string text = ReadExample("tiny_llama_block.mlir");
  auto missing = compiler->Compile(text, "tiny_llama_block", {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("seq"), std::string::npos)
      << missing.status();
  auto unknown = compiler->Compile(text, "other", {{"seq", 7}});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  auto garbage = compiler->Compile("func.func @f(", "", {});
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(garbage.status().message().find("<mlir>:1:"), std::string::npos)
      << garbage.status();
  // The compiler stays usable after errors.
  EXPECT_TRUE(compiler->Compile(text, "", {{"seq", 3}}).ok());
}

TEST(JitCompiler, ConcurrentCompiles) {
  auto compiler = MakeCompiler();
  ASSERT_TRUE(compiler);
  std::string llama = ReadExample("tiny_llama_block.mlir");
  std::string gpt2 = ReadExample("tiny_gpt2_block.mlir");
  absl::Status results[4];
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      auto exe = compiler->Compile(i % 2 ? gpt2 : llama, "", {{"seq", 4 + i}});
      results[i] = exe.status();
      if (exe.ok() && (*exe)->symbol_bindings.at("seq") != 4 + i)
        results[i] = absl::InternalError("wrong specialization");
    });
  for (auto &t : threads)
    t.join();
  for (const absl::Status &s : results)
    EXPECT_TRUE(s.ok()) << s;
}

TEST(JitFunction, InputSpecsNameDynamicDims) {
  auto jit = llmc::JitFunction::Create(MakeCompiler(),
                                       ReadExample("tiny_llama_block.mlir"),
                                       "tiny_llama_block");
  ASSERT_TRUE(jit.ok()) << jit.status();
  const auto &specs = (*jit)->input_specs();
  ASSERT_EQ(specs.size(), 10u);
  ASSERT_EQ(specs[0].dims.size(), 3u);
  EXPECT_EQ(specs[0].dims[0].size, 1);
  EXPECT_EQ(specs[0].dims[1].symbol, "seq");
  EXPECT_EQ(specs[0].dims[2].size, 64);
  EXPECT_EQ(specs[9].dims[1].size, 176);
}

TEST(JitFunction, CompilesOncePerShapeSignature) {
  auto jit = llmc::JitFunction::Create(MakeCompiler(),
                                       ReadExample("tiny_llama_block.mlir"), "");
  ASSERT_TRUE(jit.ok()) << jit.status();
  auto a = (*jit)->Get(TinyLlamaShapes(7));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->executable->inputs[0].shape, (std::vector<int64_t>{1, 7, 64}));
  auto b = (*jit)->Get(TinyLlamaShapes(9));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->executable->inputs[0].shape, (std::vector<int64_t>{1, 9, 64}));
  EXPECT_EQ((*jit)->stats().compiles, 2);
  auto again = (*jit)->Get(TinyLlamaShapes(7));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->executable, a->executable);
  EXPECT_EQ((*jit)->stats().compiles, 2);
  EXPECT_EQ((*jit)->stats().hits, 1);
  EXPECT_EQ((*jit)->num_specializations(), 2);

  auto shapes = TinyLlamaShapes(7);
  shapes[0][2] = 65;
  auto bad = (*jit)->Get(shapes);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*jit)->stats().compiles, 2);
}

TEST(JitFunction, BucketsAndRecompileLimit) {
  absl::flat_hash_map<std::string, llmc::rt::BucketPolicy> policies;
  policies["seq"] = {llmc::rt::BucketPolicy::MultipleOf, 8};
  auto jit = llmc::JitFunction::Create(MakeCompiler(),
                                       ReadExample("tiny_llama_block.mlir"), "",
                                       policies, /*recompileLimit=*/1);
  ASSERT_TRUE(jit.ok()) << jit.status();
  auto a = (*jit)->Get(TinyLlamaShapes(5));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bucketed.at("seq"), 8);
  EXPECT_EQ(a->executable->inputs[0].shape, (std::vector<int64_t>{1, 8, 64}));
  auto b = (*jit)->Get(TinyLlamaShapes(7)); // same bucket
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->executable, a->executable);
  auto c = (*jit)->Get(TinyLlamaShapes(12)); // a second bucket: over the limit
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted) << c.status();
}

TEST(JitFunction, CreateErrors) {
  auto noCompiler = llmc::JitFunction::Create(nullptr, "", "");
  EXPECT_EQ(noCompiler.status().code(), absl::StatusCode::kInvalidArgument);
  auto noFn = llmc::JitFunction::Create(
      MakeCompiler(), ReadExample("tiny_llama_block.mlir"), "nope");
  EXPECT_EQ(noFn.status().code(), absl::StatusCode::kInvalidArgument);
}

} // namespace

// The serving engine's buckets: ServingStepFactory compiles the tiny LLaMA
// serving step at a bucket's (T_b, B_b), and the executable has the layout
// rt::SessionStepModel runs (the pages returned in place, logits [B_b, 97]).
TEST(JitCompiler, ServingStepFactoryCompilesABucket) {
  llmc::CompilerOptions options;
  options.arch = "sm_90a";
  options.compile_kernels = false;
  auto c = llmc::Compiler::Create(options);
  ASSERT_TRUE(c.ok()) << c.status();
  llmc::rt::StepExecutableFactory factory = llmc::ServingStepFactory(
      std::shared_ptr<llmc::Compiler>(std::move(*c)),
      llmc::test::ReadExample("tiny_llama_serving_step.mlir"), "tiny_llama_serving_step");
  for (llmc::rt::StepBucket bucket : {llmc::rt::StepBucket{1, 2}, llmc::rt::StepBucket{8, 5}}) {
    auto exe = factory(bucket);
    ASSERT_TRUE(exe.ok()) << exe.status();
    llmc::rt::KvPagePoolOptions pool;
    pool.num_pages = 64;
    pool.page_size = 4;
    pool.num_layers = 2;
    pool.num_kv_heads = 2;
    pool.head_dim = 16;
    pool.element_bytes = 4;
    auto layout = llmc::rt::ReadServingStepLayout(**exe, bucket, pool);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(layout->num_layers, 2);
    EXPECT_EQ(layout->max_pages, 16);
    EXPECT_EQ(layout->vocab, 97);
    EXPECT_EQ(layout->num_weights, 23);
  }
  auto unknown = llmc::ServingStepFactory(
      std::shared_ptr<llmc::Compiler>(llmc::Compiler::Create(options).value()),
      llmc::test::ReadExample("tiny_llama_serving_step.mlir"), "nope")({4, 3});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
}
