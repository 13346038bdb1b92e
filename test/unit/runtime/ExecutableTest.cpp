#include "llmc/runtime/Executable.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <sys/stat.h>

#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "llmc/runtime/KernelCompiler.h"
#include "llmc/runtime/Hash.h"

namespace llmc::rt {
namespace {

/// The 64-byte header of a 64-bit little-endian ELF file for CUDA
/// (EM_CUDA = 190) with no sections, then `tail`: the smallest cubin
/// Validate accepts.
std::string MinimalCubin(const std::string& tail = std::string("\0\xfe", 2)) {
  std::string elf(64, '\0');
  elf.replace(0, 4, "\x7f" "ELF");
  elf[4] = 2;     // ELFCLASS64
  elf[5] = 1;     // ELFDATA2LSB
  elf[6] = 1;     // EV_CURRENT
  elf[18] = char(190);  // e_machine = EM_CUDA
  elf[52] = 64;   // e_ehsize
  return elf + tail;
}

Executable Sample() {
  Executable e;
  e.inputs = {{"x", DType::bf16, {2, 64}}};
  e.outputs = {{"y", DType::bf16, {2, 128}}};
  Buffer in{0, Buffer::Input, 2 * 64 * 2, 0, 0, ""};
  Buffer out{1, Buffer::Output, 2 * 128 * 2, 0, 0, ""};
  Buffer w{2, Buffer::Constant, 4, 0, -1, std::string("\x00\x01\xff\x7f", 4)};
  Buffer tmp{3, Buffer::Arena, 1024, 512, -1, ""};
  // The GEMM's B [128, 64] and bias [128], bf16, written by a preparation.
  Buffer wb{4, Buffer::Persistent, 128 * 64 * 2, 0, -1, ""};
  Buffer bias{5, Buffer::Persistent, 128 * 2, 0, -1, ""};
  e.buffers = {in, out, w, tmp, wb, bias};
  e.arena_bytes = 2048;
  KernelSpec k;
  k.name = "rmsnorm";
  k.source = "extern \"C\" __global__ void rmsnorm() {}";
  k.arch = "sm_90a";
  k.cubin = MinimalCubin();
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
  g.b = {4, 0};
  g.d = {1, 0};
  g.bias = {5, 0};
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
  EXPECT_FALSE(back->kernels[0].grid_dependency);
  // grid_dependency is written only when set, and read back.
  EXPECT_EQ(bytes.find("grid_dependency"), std::string::npos);
  e.kernels[0].grid_dependency = true;
  back = DeserializeExecutable(SerializeExecutable(e));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->kernels[0].grid_dependency);
  // The producer likewise: absent above, kept when set.
  EXPECT_EQ(bytes.find("producer"), std::string::npos);
  EXPECT_EQ(back->producer, "");
  e.producer = "llmc 9.9.9";
  back = DeserializeExecutable(SerializeExecutable(e));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->producer, "llmc 9.9.9");
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

// GEMM dtypes cuBLASLt has no kernel for are refused at validation (they
// would fail in cublasLtMatmulAlgoGetHeuristic on the GPU), naming the gemm
// and the pair; the pairs it has pass.
TEST(ExecutableTest, ValidateRefusesGemmDTypesCublasLtLacks) {
  struct Case { DType a, b, d; const char* why; };
  const Case bad[] = {
      {DType::bf16, DType::bf16, DType::f16, "gemm 0 has no cuBLASLt kernel: bf16 x bf16 -> f16"},
      {DType::f32, DType::f32, DType::bf16, "f32 x f32 -> bf16: an f32 GEMM writes f32"},
      {DType::f16, DType::bf16, DType::f32, "A and B need one dtype"},
      {DType::f8e5m2, DType::f8e5m2, DType::bf16, "no e5m2 x e5m2 GEMM"},
      {DType::f8e4m3, DType::bf16, DType::bf16, "needs both operands in fp8"},
      {DType::f8e4m3, DType::f8e4m3, DType::f8e4m3, "writes bf16, f16 or f32"},
      {DType::i8, DType::i8, DType::i32, "operands are f32, f16, bf16 or fp8"}};
  for (const Case& c : bad) {
    Executable e = Sample();
    GemmSpec& g = e.gemms[0];
    g.dtype_a = c.a, g.dtype_b = c.b, g.dtype_c = g.dtype_d = c.d;
    g.transa = false, g.transb = true;
    EXPECT_THAT(std::string(e.Validate().message()), ::testing::HasSubstr(c.why));
  }
  const Case good[] = {{DType::f32, DType::f32, DType::f32},
                       {DType::f16, DType::f16, DType::f16},
                       {DType::bf16, DType::bf16, DType::f32},
                       {DType::f8e4m3, DType::f8e5m2, DType::f16},
                       {DType::f8e5m2, DType::f8e4m3, DType::bf16}};
  for (const Case& c : good)
    EXPECT_EQ(UnsupportedGemmDTypes(c.a, c.b, c.d), "")
        << DTypeName(c.a) << " x " << DTypeName(c.b) << " -> " << DTypeName(c.d);
}

// ---------------------------------------------------------------------------
// Forged executables: a valid file, one field changed in its JSON payload,
// the header's size and checksum recomputed (what an attacker or a buggy
// writer produces). Each must be refused at load with a message naming the
// field and the bound, never reach the driver.
// ---------------------------------------------------------------------------

/// Sample() serialized, `edit` applied to its payload, re-sealed.
std::string Forge(const std::function<void(nlohmann::json&)>& edit,
                  Executable e = Sample()) {
  std::string data = SerializeExecutable(e);
  nlohmann::json j = nlohmann::json::parse(data.substr(data.find('\n') + 1));
  edit(j);
  std::string payload = j.dump();
  return "LLMCX " + std::to_string(Executable::kFormatVersion) + " " +
         std::to_string(payload.size()) + " " + Sha256::HexDigest(payload) +
         "\n" + payload;
}

/// The load error of a forged file (empty when it loads).
std::string Refusal(const std::string& data) {
  auto back = DeserializeExecutable(data);
  if (back.ok()) return "";
  EXPECT_EQ(back.status().code(), absl::StatusCode::kDataLoss) << back.status();
  return std::string(back.status().message());
}

using ::testing::HasSubstr;

TEST(ForgedExecutableTest, UnchangedForgeLoads) {
  EXPECT_EQ(Refusal(Forge([](nlohmann::json&) {})), "");
}

TEST(ForgedExecutableTest, ArenaOffsetOverflowingInt64) {
  // Before: arena_offset + bytes wrapped to a negative number and passed.
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["buffers"][3]["arena_offset"] = INT64_MAX - 100;
              })),
              HasSubstr("buffer 3 [9223372036854775707, +1024) exceeds arena "
                        "of 2048 bytes"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["buffers"][3]["arena_offset"] = uint64_t(1) << 63;
              })),
              HasSubstr("field 'arena_offset' is 9223372036854775808 (expected "
                        "-9223372036854775808..9223372036854775807)"));
}

TEST(ForgedExecutableTest, GemmLargerThanItsBuffers) {
  // Before: m, n, k were only checked to be positive.
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["gemms"][0]["mnk"] = {2, 128, 4096};
                j["gemms"][0]["ld"] = {4096, 4096, 128, 128};
              })),
              HasSubstr("gemm 0 A needs 16384 bytes at offset 0 of buffer 0 "
                        "(256 bytes)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["gemms"][0]["mnk"][0] = 3; })),
              HasSubstr("gemm 0 A needs 384 bytes"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["gemms"][0]["ld"][3] = 129; })),
              HasSubstr("gemm 0 D needs 514 bytes at offset 0 of buffer 1 (512 bytes)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["gemms"][0]["ld"][0] = 63; })),
              HasSubstr("gemm 0 A has row stride 63 below its 64 columns (2x64)"));
  // Batch strides count: a second batch of A lies past the buffer.
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["gemms"][0]["batch"] = 2;
                j["gemms"][0]["strides"] = {128, 0, 0, 0};
              })),
              HasSubstr("gemm 0 A needs 512 bytes"));
  // Extents whose byte count overflows int64.
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["gemms"][0]["batch"] = 2;
                j["gemms"][0]["strides"] = {INT64_MAX / 2, 0, 0, 0};
              })),
              HasSubstr("gemm 0 A (2 x 2x64, ld 64, batch stride "
                        "4611686018427387903) overflows int64 bytes"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["gemms"][0]["batch"] = int64_t(1) << 31; })),
              HasSubstr("gemm 0 has batch 2147483648 (cuBLASLt takes at most 2^31-1)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["gemms"][0]["bias"] = {2, 0};  // a 4-byte constant, 128 bf16 needed
              })),
              HasSubstr("gemm 0 bias needs 256 bytes at offset 0 of buffer 2 (4 bytes)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["gemms"][0]["compute"] = "bf16"; })),
              HasSubstr("gemm 0 accumulates in bf16 (expected f32)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["gemms"][0]["alpha"] = 1e300; })),
              HasSubstr("field 'alpha' is 1e+300, not a finite f32"));
}

TEST(ForgedExecutableTest, GridAndBlockBeyondTheHardware) {
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["launches"][0]["grid"][0] = uint64_t(1) << 31;
              })),
              HasSubstr("launch 0 (norm) has grid.x = 2147483648 (expected "
                        "1..2147483647)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["launches"][0]["grid"][1] = 65536; })),
              HasSubstr("has grid.y = 65536 (expected 1..65535)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["launches"][0]["grid"][2] = 0; })),
              HasSubstr("has grid.z = 0 (expected 1..65535)"));
  // Before: -1 and 2^32 + 5 were read as uint32 4294967295 and 5.
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["launches"][0]["grid"][0] = -1; })),
              HasSubstr("field 'grid'[0] is -1 (expected 0..4294967295)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["launches"][0]["grid"][0] = (uint64_t(1) << 32) + 5;
              })),
              HasSubstr("field 'grid'[0] is 4294967301"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["launches"][0]["block"] = {32, 32, 2};
              })),
              HasSubstr("launch 0 (norm) has 2048 threads per block (at most 1024)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["launches"][0]["block"][2] = 65; })),
              HasSubstr("has block.z = 65 (expected 1..64)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["launches"][0]["smem"] = 1 << 20; })),
              HasSubstr("needs 1048576 bytes of dynamic shared memory (at most 232448)"));
}

TEST(ForgedExecutableTest, GarbageOrTruncatedCubin) {
  auto cubin = [](const std::string& bytes) {
    return [bytes](nlohmann::json& j) {
      j["kernels"][0]["cubin"] = absl::Base64Escape(bytes);
    };
  };
  EXPECT_THAT(Refusal(Forge(cubin("this is not a cubin at all"))),
              HasSubstr("kernel 0 'rmsnorm' has a cubin for sm_90a that is not "
                        "an ELF file (26 bytes without the ELF header)"));
  std::string elf = MinimalCubin("");
  std::string x86 = elf;
  x86[18] = 62;  // EM_X86_64
  EXPECT_THAT(Refusal(Forge(cubin(x86))),
              HasSubstr("is an ELF file for machine 62, not for CUDA (190)"));
  std::string elf32 = elf;
  elf32[4] = 1;
  EXPECT_THAT(Refusal(Forge(cubin(elf32))), HasSubstr("not a 64-bit little-endian ELF"));
  // Section headers past the end (a cut-off cubin): the driver would read
  // them from beyond the buffer.
  std::string cut = elf;
  uint64_t shoff = 4096;
  uint16_t shnum = 3, shentsize = 64;
  std::memcpy(&cut[40], &shoff, 8);
  std::memcpy(&cut[58], &shentsize, 2);
  std::memcpy(&cut[60], &shnum, 2);
  EXPECT_THAT(Refusal(Forge(cubin(cut))),
              HasSubstr("has 3 section headers at offset 4096 beyond its 64 bytes"));
  // One section header inside, its contents outside.
  std::string sect = elf + std::string(64, '\0');
  shoff = 64;
  shnum = 1;
  uint32_t progbits = 1;
  uint64_t off = 0, size = uint64_t(1) << 40;
  std::memcpy(&sect[40], &shoff, 8);
  std::memcpy(&sect[58], &shentsize, 2);
  std::memcpy(&sect[60], &shnum, 2);
  std::memcpy(&sect[64 + 4], &progbits, 4);
  std::memcpy(&sect[64 + 24], &off, 8);
  std::memcpy(&sect[64 + 32], &size, 8);
  EXPECT_THAT(Refusal(Forge(cubin(sect))),
              HasSubstr("has section 0 of 1099511627776 bytes at offset 0 beyond "
                        "its 128 bytes"));
  // PTX (a compute_ arch) is text.
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["kernels"][0]["arch"] = "compute_90";
                j["kernels"][0]["cubin"] = absl::Base64Escape(std::string(".version\0x", 10));
              })),
              HasSubstr("has PTX for compute_90 with a NUL byte"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["kernels"][0]["arch"] = "sm_9x"; })),
              HasSubstr(std::string("has arch 'sm_9x' (expected ") + kArchSpelling + ")"));
}

TEST(ForgedExecutableTest, SourceKernelsAreText) {
  // nvrtcCreateProgram takes a C string: a NUL would compile a prefix.
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["kernels"][0]["source"] = std::string("extern \"C\"\0 junk", 17);
              })),
              HasSubstr("kernel 0 'rmsnorm' has a NUL byte in its CUDA source"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["kernels"][0]["headers"]["pre.h"] = std::string("#x\0y", 4);
              })),
              HasSubstr("has a header with an empty name or a NUL byte"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["kernels"][0]["name"] = std::string("rms\0norm", 8);
              })),
              HasSubstr("kernel 0 has an empty name or one with a NUL byte"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["kernels"][0]["source"] = "";
                j["kernels"][0]["cubin"] = "";
              })),
              HasSubstr("has neither a cubin nor CUDA source"));
}

// The payload is JSON text: a string that is not UTF-8 would make the
// serializer throw (an abort through the C API), so Validate refuses it and
// SaveExecutable writes nothing.
TEST(ForgedExecutableTest, StringsThatAreNotUtf8AreRefusedBeforeSaving) {
  Executable e = Sample();
  e.launches[0].label = "norm\xff";
  EXPECT_THAT(std::string(e.Validate().message()),
              HasSubstr("launch 0 has a label that is not UTF-8 text"));
  e = Sample();
  e.kernels[0].source += "\xc3(";  // a lead byte without its continuation
  EXPECT_THAT(std::string(e.Validate().message()),
              HasSubstr("kernel 0 'rmsnorm' has source, an option, a header or "
                        "an arch that is not UTF-8 text"));
  EXPECT_FALSE(SaveExecutable(e, "/nonexistent-dir/x.llmcx").ok());
  e = Sample();
  e.inputs[0].name = "\xed\xa0\x80";  // an encoded surrogate
  EXPECT_THAT(std::string(e.Validate().message()),
              HasSubstr("input #0 has a name that is not UTF-8 text"));
  e = Sample();
  e.kernels[0].headers["pre.h"] = "// caf\xc3\xa9 \xf0\x9f\x98\x80";  // é and an emoji
  EXPECT_TRUE(e.Validate().ok()) << e.Validate();
}

TEST(ForgedExecutableTest, SignaturesRanksAndDtypes) {
  // Same bytes, rank 10: the kernels' shape structs hold 8 dims.
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["inputs"][0]["shape"] = {1, 1, 1, 1, 1, 1, 1, 1, 2, 64};
              })),
              HasSubstr("input 'x' (#0) has rank 10 (at most 8)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["inputs"][0]["shape"] = {int64_t(1) << 40, int64_t(1) << 40};
              })),
              HasSubstr("input 'x' (#0) of shape [1099511627776,1099511627776] "
                        "bf16 has more than 2^62 bytes"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["inputs"][0]["shape"] = {2, 32}; })),
              HasSubstr("buffer 0 has 256 bytes but input 'x' has 128"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["inputs"][0]["dtype"] = "f64"; })),
              HasSubstr("unknown dtype 'f64'"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["outputs"][0]["alias_input"] = 0; })),
              HasSubstr("output 'y' (#0) aliases input 'x' of another type"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["outputs"][0]["alias_input"] = 7; })),
              HasSubstr("output 'y' (#0) aliases input 7 of 1"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["inputs"][0]["alias_input"] = 0; })),
              HasSubstr("only outputs alias inputs"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["format_version"] = 1; })),
              HasSubstr("format version 1 (this runtime reads 2)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["symbol_bindings"]["batch"] = -2; })),
              HasSubstr("dynamic dim 'batch' is bound to -2"));
}

TEST(ForgedExecutableTest, IndicesEnumsAndArguments) {
  // Before: 2^32 was read as kernel 0.
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["launches"][0]["kernel"] = uint64_t(1) << 32;
              })),
              HasSubstr("field 'kernel' is 4294967296 (expected -2147483648..2147483647)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["launches"][0]["kernel"] = 0.5; })),
              HasSubstr("field 'kernel' is 0.5, not an integer"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["launches"][0]["kernel"] = true; })),
              HasSubstr("field 'kernel' is true, not an integer"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["gemms"][0]["epilogue"] = 6; })),
              HasSubstr("field 'epilogue' has out-of-range value 6"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["launches"][0]["args"][1]["i"] = int64_t(1) << 31;
              })),
              HasSubstr("launch 0 (norm) arg 1 is an i32 holding 2147483648"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["launches"][0]["args"][0]["ref"] = {0, 257};
              })),
              HasSubstr("launch 0 (norm) arg 0 offset 257 outside buffer 0"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["launches"][0]["args"].push_back(
                    {{"kind", 4}, {"bytes", absl::Base64Escape(std::string(40000, 'x'))}});
              })),
              HasSubstr("passes more than 32764 bytes of kernel parameters"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["launches"][0]["args"].push_back({{"kind", 4}, {"bytes", ""}});
              })),
              HasSubstr("arg 4 is an empty by-value struct"));
}

TEST(ForgedExecutableTest, CopiesCollectivesAndAttention) {
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["launches"][3]["src"] = {3, 1000};
              })),
              HasSubstr("launch 3 copies 256 bytes out of bounds: launch 3 src "
                        "needs 256 bytes at offset 1000 of buffer 3 (1024 bytes)"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["launches"][3]["copy_bytes"] = INT64_MAX;
              })),
              HasSubstr("copies 9223372036854775807 bytes out of bounds"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) { j["collectives"][0]["count"] = 4096; })),
              HasSubstr("collective 0 send needs 8192 bytes at offset 0 of buffer 3"));
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["collectives"][0]["count"] = INT64_MAX / 2 + 1;
              })),
              HasSubstr("collective 0 of 4611686018427387904 elements overflows int64 bytes"));
  Executable e = Sample();
  AttentionSpec a;
  a.b = 1, a.sq = 2, a.skv = 2, a.hq = 2, a.hkv = 1, a.d = 16;  // q, o: 128 B
  a.q = {0, 0}, a.k = {3, 0}, a.v = {3, 512}, a.o = {1, 0};
  e.attentions = {a};
  e.launches[0].attention = 0;
  EXPECT_EQ(Refusal(SerializeExecutable(e)), "");
  EXPECT_THAT(Refusal(Forge([](nlohmann::json& j) {
                j["attentions"][0]["shape"] = {int64_t(1) << 40, int64_t(1) << 40,
                                               2, 2, 1, 16};
              }, e)),
              HasSubstr("attention 0 q overflows int64 bytes"));
}

TEST(ForgedExecutableTest, CollectiveTotalsNeedTheCommunicatorSize) {
  Executable e = Sample();  // a reduce-scatter of 64 bf16 per rank from [3, 0)
  EXPECT_TRUE(ValidateCollectives(e, 8).ok());  // 1024 bytes: 8 ranks fit
  absl::Status st = ValidateCollectives(e, 16);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("collective 0 (reduce-scatter of 64 bf16 per rank) needs "
                        "2048 bytes over 16 ranks in buffer 3 but has 1024 at offset 0"));
}

TEST(ExecutableTest, SaveRefusesAnInvalidExecutableAndSpecialFiles) {
  std::string dir = std::filesystem::temp_directory_path() /
                    ("llmc-exe-save-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Executable e = Sample();
  e.launches[0].grid[0] = 0;
  absl::Status st = SaveExecutable(e, dir + "/bad.llmcx");
  EXPECT_THAT(std::string(st.message()), HasSubstr("not writing " + dir + "/bad.llmcx"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("grid.x = 0"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/bad.llmcx"));
  // No directory is created for the file (before: created silently).
  st = SaveExecutable(Sample(), dir + "/missing/x.llmcx");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir + "/missing"));
  // A FIFO is neither replaced by a save nor read (nor blocked on) by a load.
  std::string fifo = dir + "/fifo.llmcx";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_EQ(SaveExecutable(Sample(), fifo).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(LoadExecutable(fifo).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  auto dev = LoadExecutable("/dev/zero");
  EXPECT_THAT(std::string(dev.status().message()),
              HasSubstr("llmc executable '/dev/zero' is a character device"));
  std::filesystem::remove_all(dir);
}

TEST(ExecutableTest, RealCubinsAndPtxPassValidate) {
  if (!KernelCompiler::NvrtcVersion().ok()) GTEST_SKIP() << "no NVRTC";
  KernelCompilerOptions o;
  o.use_disk_cache = false;
  KernelCompiler kc(o);
  for (const char* arch : {"sm_90a", "sm_80", "compute_90"}) {
    KernelSource src;
    src.name = "k";
    src.source = "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] *= 2.f; }";
    src.arch = arch;
    auto compiled = kc.Compile(src);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    Executable e = Sample();
    e.kernels[0].arch = arch;
    e.kernels[0].cubin = compiled->binary;
    EXPECT_TRUE(e.Validate().ok()) << arch << ": " << e.Validate();
  }
}

}  // namespace
}  // namespace llmc::rt
