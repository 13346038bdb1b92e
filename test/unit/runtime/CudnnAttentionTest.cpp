// The cuDNN attention alternative: executable fields (serialization,
// validation), the pure support rule, library lookup and the fallback when
// cuDNN is missing, and the backend-API descriptors of the SDPA graph
// (built without a GPU when a libcudnn.so.9 is loadable). Plan building and
// numerics need a GPU: test/unit/compiler/CudnnAttentionGpuTest.cpp.
#include "llmc/runtime/CudnnAttention.h"
#include "../ScopedEnv.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/Executable.h"

namespace llmc::rt {
namespace {

using llmc::test::ScopedEnv;

AttentionSpec Spec(int64_t b, int64_t sq, int64_t skv, int64_t hq, int64_t hkv,
                   int64_t d, bool causal, DType t = DType::bf16) {
  AttentionSpec s;
  s.b = b, s.sq = sq, s.skv = skv, s.hq = hq, s.hkv = hkv, s.d = d;
  s.causal = causal;
  s.scale = 0.125f;
  s.dtype = t;
  return s;
}

/// q, k, v inputs and o output of `s`, one kernel launch carrying it.
Executable AttentionExecutable(AttentionSpec s) {
  Executable exe;
  int64_t el = DTypeSize(s.dtype);
  exe.inputs = {{"q", s.dtype, {s.b, s.sq, s.hq, s.d}},
                {"k", s.dtype, {s.b, s.skv, s.hkv, s.d}},
                {"v", s.dtype, {s.b, s.skv, s.hkv, s.d}}};
  exe.outputs = {{"o", s.dtype, {s.b, s.sq, s.hq, s.d}}};
  for (int i = 0; i < 4; ++i) {
    Buffer b;
    b.id = i;
    b.kind = i < 3 ? Buffer::Input : Buffer::Output;
    b.io_index = i < 3 ? i : 0;
    b.bytes = (i == 1 || i == 2 ? s.skv * s.hkv : s.sq * s.hq) * s.b * s.d * el;
    exe.buffers.push_back(b);
  }
  s.q = {0, 0}, s.k = {1, 0}, s.v = {2, 0}, s.o = {3, 0};
  exe.attentions.push_back(s);
  KernelSpec k;
  k.name = "attn";
  k.source = "extern \"C\" __global__ void attn() {}";
  exe.kernels.push_back(k);
  Launch l;
  l.kind = Launch::Kernel;
  l.kernel = 0;
  for (int i : {3, 0, 1, 2}) {
    Arg a;
    a.buffer = i;
    l.args.push_back(a);
  }
  l.attention = 0;
  l.label = "llm.attention";
  exe.launches.push_back(l);
  return exe;
}

TEST(CudnnAttentionExecutableTest, RoundTripsSpecAndLaunchIndex) {
  Executable exe = AttentionExecutable(Spec(2, 96, 96, 8, 2, 64, true, DType::f16));
  ASSERT_TRUE(exe.Validate().ok()) << exe.Validate();
  auto back = DeserializeExecutable(SerializeExecutable(exe));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->attentions.size(), 1u);
  const AttentionSpec& a = back->attentions[0];
  EXPECT_EQ(a.b, 2);
  EXPECT_EQ(a.sq, 96);
  EXPECT_EQ(a.skv, 96);
  EXPECT_EQ(a.hq, 8);
  EXPECT_EQ(a.hkv, 2);
  EXPECT_EQ(a.d, 64);
  EXPECT_TRUE(a.causal);
  EXPECT_EQ(a.scale, 0.125f);
  EXPECT_EQ(a.dtype, DType::f16);
  EXPECT_EQ(a.q.buffer, 0);
  EXPECT_EQ(a.k.buffer, 1);
  EXPECT_EQ(a.v.buffer, 2);
  EXPECT_EQ(a.o.buffer, 3);
  EXPECT_EQ(back->launches[0].attention, 0);
  EXPECT_FALSE(a.has_lse());
}

// The training forward's statistics output (f32 [b, hq, sq]) round-trips,
// and a reference too small for it is named.
TEST(CudnnAttentionExecutableTest, TheStatisticsOutputRoundTripsAndIsValidated) {
  Executable exe = AttentionExecutable(Spec(2, 96, 96, 8, 2, 64, true));
  Buffer lse;
  lse.id = 4;
  lse.kind = Buffer::Output;
  lse.io_index = 1;
  lse.bytes = 2 * 8 * 96 * 4;
  exe.buffers.push_back(lse);
  exe.outputs.push_back({"lse", DType::f32, {2, 8, 96}});
  exe.attentions[0].lse = {4, 0};
  ASSERT_TRUE(exe.Validate().ok()) << exe.Validate();
  auto back = DeserializeExecutable(SerializeExecutable(exe));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->attentions[0].has_lse());
  EXPECT_EQ(back->attentions[0].lse.buffer, 4);
  EXPECT_EQ(back->attentions[0].lse.offset, 0);
  Executable bad = exe;
  bad.attentions[0].lse.offset = 16;
  std::string msg(bad.Validate().message());
  EXPECT_NE(msg.find("attention 0 lse needs"), std::string::npos) << msg;
}

TEST(CudnnAttentionExecutableTest, FilesWithoutAttentionsReadAsBefore) {
  Executable exe = AttentionExecutable(Spec(1, 128, 128, 4, 4, 64, false));
  exe.attentions.clear();
  exe.launches[0].attention = -1;
  std::string data = SerializeExecutable(exe);
  // Nothing new is written, so older runtimes read these files unchanged.
  EXPECT_EQ(data.find("\"attentions\""), std::string::npos);
  EXPECT_EQ(data.find("\"attention\""), std::string::npos);
  auto back = DeserializeExecutable(data);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->attentions.empty());
  EXPECT_EQ(back->launches[0].attention, -1);
}

TEST(CudnnAttentionExecutableTest, ValidateNamesBadAttention) {
  auto message = [](const Executable& e) { return std::string(e.Validate().message()); };
  Executable exe = AttentionExecutable(Spec(1, 128, 128, 4, 4, 64, false));
  Executable bad = exe;
  bad.launches[0].attention = 1;
  EXPECT_NE(message(bad).find("refers to attention 1 of 1"), std::string::npos) << message(bad);
  bad = exe;
  bad.attentions[0].hkv = 3;
  EXPECT_NE(message(bad).find("4 query heads, not a multiple of its 3 kv heads"),
            std::string::npos)
      << message(bad);
  bad = exe;
  bad.attentions[0].dtype = DType::f32;
  EXPECT_NE(message(bad).find("dtype f32 (expected bf16 or f16)"), std::string::npos)
      << message(bad);
  bad = exe;
  bad.attentions[0].sq = 256;  // q and o buffers hold 128 rows
  EXPECT_NE(message(bad).find("attention 0 q needs"), std::string::npos) << message(bad);
  bad = exe;
  bad.attentions[0].v.buffer = 9;
  EXPECT_NE(message(bad).find("attention 0 v refers to buffer 9"), std::string::npos)
      << message(bad);
  bad = exe;
  bad.launches[0].kind = Launch::Copy;
  bad.launches[0].src = {0, 0};
  bad.launches[0].dst = {3, 0};
  EXPECT_NE(message(bad).find("is not a kernel launch but names attention 0"),
            std::string::npos)
      << message(bad);
  // A corrupt file with such a spec is rejected at load.
  bad = exe;
  bad.attentions[0].d = 0;
  EXPECT_EQ(DeserializeExecutable(SerializeExecutable(bad)).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(CudnnAttentionSupportTest, ReasonsNameTheProperty) {
  EXPECT_EQ(CudnnAttentionUnsupportedReason(Spec(4, 2048, 2048, 32, 32, 128, true)), "");
  EXPECT_EQ(CudnnAttentionUnsupportedReason(Spec(1, 100, 300, 32, 8, 64, false)), "");
  EXPECT_EQ(CudnnAttentionUnsupportedReason(Spec(1, 64, 64, 8, 8, 256, true, DType::f16)), "");
  EXPECT_NE(CudnnAttentionUnsupportedReason(Spec(1, 64, 64, 8, 8, 64, false, DType::f32))
                .find("dtype f32"),
            std::string::npos);
  EXPECT_NE(CudnnAttentionUnsupportedReason(Spec(1, 64, 64, 8, 8, 60, false)).find("head dim 60"),
            std::string::npos);
  EXPECT_NE(CudnnAttentionUnsupportedReason(Spec(1, 64, 64, 8, 8, 512, false)).find("head dim 512"),
            std::string::npos);
  EXPECT_NE(CudnnAttentionUnsupportedReason(Spec(1, 64, 64, 8, 3, 64, false)).find("Hkv must divide"),
            std::string::npos);
  // Causal with sq != skv: llmc is bottom-right aligned, the graph top-left.
  EXPECT_NE(CudnnAttentionUnsupportedReason(Spec(1, 64, 128, 8, 8, 64, true)).find("bottom-right"),
            std::string::npos);
}

TEST(CudnnLibraryTest, CandidatesIncludeToolkitAndWheelDirectories) {
  std::string venv = ::testing::TempDir() + "/llmc_cudnn_venv";
  std::string lib = venv + "/lib/python3.99/site-packages/nvidia/cudnn/lib";
  for (std::string d : {venv, venv + "/lib", venv + "/lib/python3.99",
                        venv + "/lib/python3.99/site-packages",
                        venv + "/lib/python3.99/site-packages/nvidia",
                        venv + "/lib/python3.99/site-packages/nvidia/cudnn", lib})
    mkdir(d.c_str(), 0755);
  std::ofstream(lib + "/libcudnn.so.9") << "not a library";
  ScopedEnv env("VIRTUAL_ENV", venv.c_str());
  ScopedEnv home("CUDA_HOME", "/opt/cuda-x");
  ScopedEnv cudnn_home("CUDNN_HOME", "/opt/cudnn-x");
  ScopedEnv cudnn_path("CUDNN_PATH", nullptr);
  ScopedEnv cuda_path("CUDA_PATH", nullptr);
  std::vector<std::string> c = CudaLibraryCandidates("libcudnn.so.9");
  ASSERT_GE(c.size(), 5u);
  EXPECT_EQ(c[0], "libcudnn.so.9");
  EXPECT_EQ(c[1], "/opt/cudnn-x/lib64/libcudnn.so.9");  // CUDNN_HOME before CUDA_HOME
  EXPECT_EQ(c[3], "/opt/cuda-x/lib64/libcudnn.so.9");
  auto has = [&](const std::string& p) { return std::find(c.begin(), c.end(), p) != c.end(); };
  EXPECT_TRUE(has("/usr/local/cuda/lib64/libcudnn.so.9"));
  EXPECT_TRUE(has("/usr/lib/x86_64-linux-gnu/libcudnn.so.9"));
  // The wheel directories are canonical paths (TempDir() may end in '/').
  char* real = realpath(lib.c_str(), nullptr);
  ASSERT_NE(real, nullptr);
  EXPECT_TRUE(has(std::string(real) + "/libcudnn.so.9"));
  free(real);
}

TEST(CudnnLibraryTest, MissingLibraryMeansKernelFallback) {
  ScopedEnv env("LLMC_LIBCUDNN", "/nonexistent/libcudnn.so.9");
  auto lib = LoadCudnn();
  ASSERT_FALSE(lib.ok());
  if (CudnnAttentionCompiledIn()) {
    EXPECT_EQ(lib.status().code(), absl::StatusCode::kFailedPrecondition) << lib.status();
    EXPECT_NE(lib.status().message().find("LLMC_LIBCUDNN"), std::string::npos);
    EXPECT_NE(lib.status().message().find("/nonexistent/libcudnn.so.9"), std::string::npos);
  } else {
    EXPECT_EQ(lib.status().code(), absl::StatusCode::kUnimplemented) << lib.status();
  }
  Executable exe = AttentionExecutable(Spec(1, 128, 128, 4, 4, 64, true));
  auto runner = CudnnAttentionRunner::Create(exe, /*pool=*/nullptr, lib.status());
  EXPECT_FALSE(runner->Ready(0));
  EXPECT_EQ(runner->num_ready(), 0);
  auto ran = runner->Run(0, [](const BufferRef&) -> uint64_t { return 0x1000; }, nullptr);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_FALSE(*ran);  // the caller launches the kernel
  EXPECT_NE(runner->Report().find("llmc kernel for all 1 attention launch(es)"), std::string::npos)
      << runner->Report();
  EXPECT_NE(runner->Report().find(std::string(lib.status().message())), std::string::npos);
}

TEST(CudnnGraphTest, DescriptorsFinalizeWithoutAGpu) {
  if (!CudnnAttentionCompiledIn()) GTEST_SKIP() << "built without cuDNN headers";
  auto lib = LoadCudnn();
  if (!lib.ok()) GTEST_SKIP() << "no libcudnn.so.9 here: " << lib.status();
  EXPECT_GE(CudnnVersion(**lib), 90000);
  // bmm1, scale, max, sub, exp, sum, log, add, div, bmm2; causal adds two
  // GEN_INDEX, CMP_GE and BINARY_SELECT.
  auto plain = CheckCudnnAttentionOperations(**lib, Spec(1, 128, 128, 4, 4, 64, false));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain, 10);
  auto causal = CheckCudnnAttentionOperations(**lib, Spec(4, 2048, 2048, 32, 32, 128, true));
  ASSERT_TRUE(causal.ok()) << causal.status();
  EXPECT_EQ(*causal, 14);
  auto gqa = CheckCudnnAttentionOperations(
      **lib, Spec(2, 256, 512, 32, 8, 128, false, DType::f16));
  ASSERT_TRUE(gqa.ok()) << gqa.status();
  EXPECT_EQ(*gqa, 10);
  // The training forward: the same operations, the stats a non-virtual
  // f32 [b, hq, sq, 1] output.
  AttentionSpec train = Spec(4, 2048, 2048, 16, 16, 128, true);
  train.lse = {4, 0};
  auto stats = CheckCudnnAttentionOperations(**lib, train);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(*stats, 14);
  // The backward (cudnn-frontend's composite graph): row sum (mul, reduce,
  // mul), bmm, scale, sub stats, [causal: 2 GEN_INDEX, CMP_GE, SELECT],
  // exp, reshape P, bmm dV, bmm dP, sub, mul, scale, reshape dS, bmm dK,
  // reshape K, bmm dQ, identity; GQA adds a head reduction for dK and dV.
  AttentionSpec bwd = train;
  bwd.backward = true;
  auto backward = CheckCudnnAttentionOperations(**lib, bwd);
  ASSERT_TRUE(backward.ok()) << backward.status();
  EXPECT_EQ(*backward, 22);
  AttentionSpec gqa_bwd = Spec(2, 256, 256, 8, 2, 64, false, DType::f16);
  gqa_bwd.lse = {4, 0};
  gqa_bwd.backward = true;
  auto gqa_backward = CheckCudnnAttentionOperations(**lib, gqa_bwd);
  ASSERT_TRUE(gqa_backward.ok()) << gqa_backward.status();
  EXPECT_EQ(*gqa_backward, 20);
  AttentionSpec cross = bwd;
  cross.skv = 1024;
  EXPECT_EQ(CheckCudnnAttentionOperations(**lib, cross).status().code(),
            absl::StatusCode::kUnimplemented);
  auto unsupported = CheckCudnnAttentionOperations(**lib, Spec(1, 64, 64, 4, 4, 60, false));
  EXPECT_EQ(unsupported.status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace llmc::rt
