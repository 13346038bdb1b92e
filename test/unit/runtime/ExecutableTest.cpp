#include "llmc/runtime/Executable.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "llmc/runtime/Hash.h"

namespace llmc::rt {
namespace {

Executable Sample() {
  Executable e;
  e.inputs = {{"x", DType::bf16, {2, 64}}};
  e.outputs = {{"y", DType::bf16, {2, 128}}};
  Buffer in{0, Buffer::Input, 2 * 64 * 2, 0, 0, ""};
  Buffer out{1, Buffer::Output, 2 * 128 * 2, 0, 0, ""};
  Buffer w{2, Buffer::Constant, 4, 0, -1, std::string("\x00\x01\xff\x7f", 4)};
  Buffer tmp{3, Buffer::Arena, 1024, 512, -1, ""};
  e.buffers = {in, out, w, tmp};
  e.arena_bytes = 2048;
  KernelSpec k;
  k.name = "rmsnorm";
  k.source = "extern \"C\" __global__ void rmsnorm() {}";
  k.arch = "sm_90a";
  k.cubin = std::string("\x7f" "ELF\0\0\xfe", 7);
  k.options = {"-use_fast_math"};
  k.headers = {{"pre.h", "#define X 1"}};
  e.kernels = {k};
  GemmSpec g;
  g.m = 2, g.n = 128, g.k = 64;
  g.transb = true;
  g.lda = 64, g.ldb = 64, g.ldc = 128, g.ldd = 128;
  g.alpha = 0.5f;
  g.epilogue = Epilogue::gelu_bias;
  g.a = {0, 0};
  g.b = {3, 0};
  g.d = {1, 0};
  g.bias = {2, 0};
  e.gemms = {g};
  CollectiveSpec c;
  c.op = CollectiveSpec::ReduceScatter;
  c.count = 64;
  c.send = {3, 0};
  c.recv = {3, 128};
  e.collectives = {c};
  Launch l1;
  l1.kind = Launch::Kernel;
  l1.kernel = 0;
  l1.grid[0] = 2;
  l1.block[0] = 128;
  l1.smem = 64 * 1024;
  l1.label = "norm";
  Arg a0; a0.kind = Arg::BufferPtr; a0.buffer = 0; a0.byte_offset = 16;
  Arg a1; a1.kind = Arg::I32; a1.i = -7;
  Arg a2; a2.kind = Arg::I64; a2.i = int64_t(1) << 40;
  Arg a3; a3.kind = Arg::F32; a3.f = 1e-6f;
  l1.args = {a0, a1, a2, a3};
  Launch l2; l2.kind = Launch::Gemm; l2.gemm = 0;
  Launch l3; l3.kind = Launch::Collective; l3.collective = 0;
  Launch l4; l4.kind = Launch::Copy; l4.src = {3, 0}; l4.dst = {1, 0}; l4.copy_bytes = 256;
  e.launches = {l1, l2, l3, l4};
  e.symbol_bindings = {{"batch", 2}};
  return e;
}

TEST(ExecutableTest, DTypeHelpers) {
  EXPECT_EQ(DTypeSize(DType::bf16), 2);
  EXPECT_EQ(DTypeSize(DType::f8e4m3), 1);
  EXPECT_EQ(DTypeSize(DType::i64), 8);
  EXPECT_STREQ(DTypeName(DType::f8e5m2), "f8e5m2");
  EXPECT_EQ(*DTypeFromName("i32"), DType::i32);
  EXPECT_FALSE(DTypeFromName("f64").ok());
  TensorSig s{"x", DType::f16, {3, 5}};
  EXPECT_EQ(s.Bytes(), 30);
}

TEST(ExecutableTest, RoundTripPreservesEverything) {
  Executable e = Sample();
  ASSERT_TRUE(e.Validate().ok()) << e.Validate();
  std::string bytes = SerializeExecutable(e);
  auto back = DeserializeExecutable(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(SerializeExecutable(*back), bytes);
  EXPECT_EQ(back->inputs[0].shape, (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(back->buffers[2].constant_data, e.buffers[2].constant_data);
  EXPECT_EQ(back->buffers[3].arena_offset, 512);
  EXPECT_EQ(back->kernels[0].cubin, e.kernels[0].cubin);
  EXPECT_EQ(back->kernels[0].headers.at("pre.h"), "#define X 1");
  EXPECT_EQ(back->gemms[0].epilogue, Epilogue::gelu_bias);
  EXPECT_TRUE(back->gemms[0].transb);
  EXPECT_FLOAT_EQ(back->gemms[0].alpha, 0.5f);
  EXPECT_EQ(back->collectives[0].op, CollectiveSpec::ReduceScatter);
  ASSERT_EQ(back->launches.size(), 4u);
  EXPECT_EQ(back->launches[0].smem, 64u * 1024);
  EXPECT_EQ(back->launches[0].args[1].i, -7);
  EXPECT_EQ(back->launches[0].args[2].i, int64_t(1) << 40);
  EXPECT_FLOAT_EQ(back->launches[0].args[3].f, 1e-6f);
  EXPECT_EQ(back->launches[3].copy_bytes, 256);
  EXPECT_EQ(back->symbol_bindings.at("batch"), 2);
}

TEST(ExecutableTest, FileRoundTrip) {
  std::string path = std::filesystem::temp_directory_path() /
                     ("llmc-exe-" + std::to_string(::getpid()) + ".llmcx");
  ASSERT_TRUE(SaveExecutable(Sample(), path).ok());
  auto back = LoadExecutable(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(SerializeExecutable(*back), SerializeExecutable(Sample()));
  std::filesystem::remove(path);
  auto missing = LoadExecutable(path);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(ExecutableTest, VersionMismatchNamesBothVersions) {
  Executable e = Sample();
  e.format_version = 99;
  auto back = DeserializeExecutable(SerializeExecutable(e));
  ASSERT_FALSE(back.ok());
  std::string msg(back.status().message());
  EXPECT_NE(msg.find("version 99"), std::string::npos) << msg;
  EXPECT_NE(msg.find("version " + std::to_string(Executable::kFormatVersion)),
            std::string::npos) << msg;
}

TEST(ExecutableTest, CorruptionIsDetectedNeverCrashes) {
  std::string bytes = SerializeExecutable(Sample());
  EXPECT_EQ(DeserializeExecutable("").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeserializeExecutable("{\"json\": 1}").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Every truncation point and a flipped byte anywhere are errors, not crashes.
  for (size_t cut = 0; cut < bytes.size(); cut += 7)
    EXPECT_FALSE(DeserializeExecutable(bytes.substr(0, cut)).ok()) << cut;
  for (size_t pos = 0; pos < bytes.size(); pos += 13) {
    std::string bad = bytes;
    bad[pos] ^= 0x20;
    EXPECT_FALSE(DeserializeExecutable(bad).ok()) << pos;
  }
  auto trunc = DeserializeExecutable(bytes.substr(0, bytes.size() - 3));
  EXPECT_EQ(trunc.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(trunc.status().message().find("truncated"), std::string::npos);
}

TEST(ExecutableTest, WellFormedButSemanticallyBadPayloadIsDataLoss) {
  // Valid header and checksum around JSON with missing or mistyped fields.
  const std::string version = std::to_string(Executable::kFormatVersion);
  for (std::string payload : {"{\"format_version\": " + version + "}",
                              std::string("[1,2,3]"), std::string("nul")}) {
    std::string data = "LLMCX " + version + " " + std::to_string(payload.size()) + " " +
                       Sha256::HexDigest(payload) + "\n" + payload;
    auto back = DeserializeExecutable(data);
    ASSERT_FALSE(back.ok()) << payload;
    EXPECT_EQ(back.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(back.status().message().find("malformed"), std::string::npos);
  }
}

TEST(ExecutableTest, ValidateRejectsOutOfRangeReferences) {
  Executable e = Sample();
  e.launches[0].kernel = 5;
  absl::Status s = e.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("launch 0 (norm)"), std::string::npos) << s;
  e = Sample();
  e.buffers[3].arena_offset = 1536;  // 1536 + 1024 > 2048
  EXPECT_NE(e.Validate().message().find("exceeds arena"), std::string::npos);
  e = Sample();
  e.gemms[0].bias = {};
  EXPECT_NE(e.Validate().message().find("needs a bias"), std::string::npos);
  e = Sample();
  e.launches[3].copy_bytes = 4096;
  EXPECT_FALSE(e.Validate().ok());
}

}  // namespace
}  // namespace llmc::rt
