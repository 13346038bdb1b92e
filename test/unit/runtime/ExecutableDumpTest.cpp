#include "llmc/runtime/ExecutableDump.h"

#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace llmc::rt {
namespace {

/// One of everything: a preparation launch, a kernel launch with every
/// argument kind (and an attention alternative), a GEMM, a collective and a
/// copy, constant data, a kernel header.
Executable Sample() {
  Executable e;
  e.inputs = {{"x", DType::bf16, {2, 64}}, {"w", DType::bf16, {128, 64}}};
  e.inputs[1].parameter = true;
  e.outputs = {{"y", DType::bf16, {2, 128}}};
  e.outputs[0].alias_input = 0;
  e.buffers = {{0, Buffer::Input, 256, 0, 0, ""},
               {1, Buffer::Input, 16384, 0, 1, ""},
               {2, Buffer::Output, 512, 0, 0, ""},
               {3, Buffer::Constant, 256, 0, -1, std::string(256, '\x7f')},
               {4, Buffer::Arena, 1024, 512, -1, ""},
               {5, Buffer::Persistent, 16384, 0, -1, ""}};
  e.arena_bytes = 2048;
  KernelSpec k;
  k.name = "llmc_norm";
  k.source = "extern \"C\" __global__ void llmc_norm() {}";
  k.arch = "sm_90a";
  k.cubin = "cubin bytes";
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
  g.b = {5, 0};
  g.d = {2, 0};
  g.bias = {3, 0};
  e.gemms = {g};
  CollectiveSpec c;
  c.op = CollectiveSpec::ReduceScatter;
  c.count = 64;
  c.send = {4, 0};
  c.recv = {4, 128};
  e.collectives = {c};
  AttentionSpec a;
  a.b = 1, a.sq = 2, a.skv = 2, a.hq = 2, a.hkv = 1, a.d = 32;
  a.causal = true;
  a.scale = 0.125f;
  a.q = {4, 0}, a.k = {4, 128}, a.v = {4, 256}, a.o = {4, 384};
  e.attentions = {a};
  Launch prep;
  prep.kind = Launch::Copy;
  prep.src = {1, 0};
  prep.dst = {5, 0};
  prep.copy_bytes = 16384;
  prep.label = "prep.w";
  Launch l1;
  l1.kind = Launch::Kernel;
  l1.kernel = 0;
  l1.grid[0] = 2;
  l1.block[0] = 128;
  l1.smem = 1024;
  l1.label = "norm";
  l1.attention = 0;
  Arg a0; a0.kind = Arg::BufferPtr; a0.buffer = 0; a0.byte_offset = 16;
  Arg a1; a1.kind = Arg::I32; a1.i = -7;
  Arg a2; a2.kind = Arg::I64; a2.i = int64_t(1) << 40;
  Arg a3; a3.kind = Arg::F32; a3.f = 1e-6f;
  Arg a4; a4.kind = Arg::Bytes; a4.bytes.assign(16, '\0');
  int64_t words[2] = {3, -1};
  std::memcpy(a4.bytes.data(), words, 16);
  Arg a5; a5.kind = Arg::Bytes; a5.bytes = std::string("\x01\xab", 2);
  l1.args = {a0, a1, a2, a3, a4, a5};
  Launch l2; l2.kind = Launch::Gemm; l2.gemm = 0; l2.label = "proj";
  Launch l3; l3.kind = Launch::Collective; l3.collective = 0;
  Launch l4; l4.kind = Launch::Copy; l4.src = {4, 0}; l4.dst = {2, 0}; l4.copy_bytes = 256;
  e.launches = {prep, l1, l2, l3, l4};
  e.num_prepare_launches = 1;
  e.symbol_bindings = {{"batch", 2}};
  return e;
}

TEST(ExecutableDumpTest, Format) {
  const std::string expected =
      "llmc-executable-dump 1\n"
      "format_version 2\n"
      "counts inputs=2 outputs=1 buffers=6 kernels=1 gemms=1 collectives=1 "
      "attentions=1 launches=5\n"
      "num_prepare_launches 1\n"
      "arena_bytes 2048\n"
      "symbol \"batch\"=2\n"
      "input 0 \"x\" bf16 [2,64] alias_input=-1 parameter=0\n"
      "input 1 \"w\" bf16 [128,64] alias_input=-1 parameter=1\n"
      "output 0 \"y\" bf16 [2,128] alias_input=0 parameter=0\n"
      "buffer 0 input bytes=256 io_index=0\n"
      "buffer 1 input bytes=16384 io_index=1\n"
      "buffer 2 output bytes=512 io_index=0\n";
  std::string dump = DescribeExecutable(Sample());
  // The head exactly; the digests are checked in DigestsAreSha256OfTheBytes.
  EXPECT_EQ(dump.substr(0, expected.size()), expected);
  EXPECT_NE(dump.find("buffer 3 constant bytes=256 data=256:"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("buffer 4 arena bytes=1024 arena_offset=512\n"
                      "buffer 5 persistent bytes=16384\n"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("kernel 0 llmc_norm source=41:"), std::string::npos) << dump;
  EXPECT_NE(dump.find(" options=[\"-use_fast_math\"]\n"), std::string::npos) << dump;
  EXPECT_NE(dump.find("kernel 0 header \"pre.h\" 11:"), std::string::npos) << dump;
  EXPECT_NE(
      dump.find("gemm 0 m=2 n=128 k=64 batch=1 strides=[0,0,0,0] trans=[0,1] "
                "ld=[64,64,128,128] dtypes=[bf16,bf16,bf16,bf16] compute=f32 "
                "alpha=0.5 beta=0 epilogue=gelu_bias a=b0+0 b=b5+0 c=none "
                "d=b2+0 bias=b3+0 scale_a=none scale_b=none\n"),
      std::string::npos)
      << dump;
  EXPECT_NE(dump.find("collective 0 reduce_scatter sum bf16 count=64 "
                      "send=b4+0 recv=b4+128\n"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("attention 0 b=1 sq=2 skv=2 hq=2 hkv=1 d=32 causal=1 "
                      "scale=0.125 dtype=bf16 q=b4+0 k=b4+128 v=b4+256 "
                      "o=b4+384\n"),
            std::string::npos)
      << dump;
  // Launches: the segment, the kernel by name, every argument kind.
  EXPECT_NE(dump.find("launch 0 prepare copy src=b1+0 dst=b5+0 bytes=16384 "
                      "label=\"prep.w\"\n"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("launch 1 call kernel llmc_norm grid=[2,1,1] "
                      "block=[128,1,1] smem=1024 args=[b0+16,i32:-7,"
                      "i64:1099511627776,f32:9.99999997e-07,bytes:i64[3,-1],"
                      "bytes:hex[01ab]] attention=0 label=\"norm\"\n"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("launch 2 call gemm 0 label=\"proj\"\n"), std::string::npos)
      << dump;
  EXPECT_NE(dump.find("launch 3 call collective 0 label=\"\"\n"), std::string::npos)
      << dump;
  EXPECT_NE(dump.find("launch 4 call copy src=b4+0 dst=b2+0 bytes=256 label=\"\"\n"),
            std::string::npos)
      << dump;
  EXPECT_EQ(dump.back(), '\n');
}

TEST(ExecutableDumpTest, DigestsAreSha256OfTheBytes) {
  // SHA-256("abc"), FIPS 180-4 appendix B.1.
  Executable e;
  e.buffers = {{0, Buffer::Constant, 3, 0, -1, "abc"}};
  KernelSpec k;
  k.name = "k";
  k.source = "abc";
  k.headers = {{"h", "abc"}};
  e.kernels = {k};
  const std::string abc =
      "3:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  std::string dump = DescribeExecutable(e);
  EXPECT_NE(dump.find("buffer 0 constant bytes=3 data=" +
                      abc + "\n"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("kernel 0 k source=" + abc + " options=[]\n"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("kernel 0 header \"h\" " + abc + "\n"), std::string::npos)
      << dump;
}

// Every field the serializer keeps (except the cubin and its arch) shows in
// the dump: changing any one of them changes it.
TEST(ExecutableDumpTest, EveryFieldShows) {
  using Mutation = std::pair<const char*, std::function<void(Executable&)>>;
  const std::vector<Mutation> mutations = {
      {"format_version", [](Executable& e) { e.format_version = 1; }},
      {"input.name", [](Executable& e) { e.inputs[0].name = "z"; }},
      {"input.dtype", [](Executable& e) { e.inputs[0].dtype = DType::f16; }},
      {"input.shape", [](Executable& e) { e.inputs[0].shape = {64, 2}; }},
      {"input.parameter", [](Executable& e) { e.inputs[0].parameter = true; }},
      {"input.alias", [](Executable& e) { e.inputs[0].alias_input = 1; }},
      {"output.alias", [](Executable& e) { e.outputs[0].alias_input = -1; }},
      {"extra input", [](Executable& e) { e.inputs.push_back(e.inputs[0]); }},
      {"buffer.id", [](Executable& e) { e.buffers[4].id = 7; }},
      {"buffer.kind", [](Executable& e) { e.buffers[4].kind = Buffer::Persistent; }},
      {"buffer.bytes", [](Executable& e) { e.buffers[4].bytes = 1152; }},
      {"buffer.offset", [](Executable& e) { e.buffers[4].arena_offset = 640; }},
      {"buffer.io", [](Executable& e) { e.buffers[1].io_index = 0; }},
      {"buffer.io of an arena buffer", [](Executable& e) { e.buffers[4].io_index = 0; }},
      {"buffer.offset of an input", [](Executable& e) { e.buffers[0].arena_offset = 8; }},
      {"buffer.data of an arena buffer",
       [](Executable& e) { e.buffers[4].constant_data = "x"; }},
      {"buffer.data", [](Executable& e) { e.buffers[3].constant_data[0] = 9; }},
      {"kernel.name", [](Executable& e) { e.kernels[0].name = "llmc_other"; }},
      {"kernel.source", [](Executable& e) { e.kernels[0].source += " "; }},
      {"kernel.options", [](Executable& e) { e.kernels[0].options.push_back("-G"); }},
      {"kernel.header", [](Executable& e) { e.kernels[0].headers["pre.h"] += " "; }},
      {"kernel.header name",
       [](Executable& e) { e.kernels[0].headers = {{"b.h", "#define X 1"}}; }},
      {"gemm.m", [](Executable& e) { e.gemms[0].m = 3; }},
      {"gemm.n", [](Executable& e) { e.gemms[0].n = 64; }},
      {"gemm.k", [](Executable& e) { e.gemms[0].k = 32; }},
      {"gemm.batch", [](Executable& e) { e.gemms[0].batch = 2; }},
      {"gemm.stride_a", [](Executable& e) { e.gemms[0].stride_a = 1; }},
      {"gemm.stride_b", [](Executable& e) { e.gemms[0].stride_b = 1; }},
      {"gemm.stride_c", [](Executable& e) { e.gemms[0].stride_c = 1; }},
      {"gemm.stride_d", [](Executable& e) { e.gemms[0].stride_d = 1; }},
      {"gemm.transa", [](Executable& e) { e.gemms[0].transa = true; }},
      {"gemm.transb", [](Executable& e) { e.gemms[0].transb = false; }},
      {"gemm.lda", [](Executable& e) { e.gemms[0].lda = 65; }},
      {"gemm.ldb", [](Executable& e) { e.gemms[0].ldb = 65; }},
      {"gemm.ldc", [](Executable& e) { e.gemms[0].ldc = 129; }},
      {"gemm.ldd", [](Executable& e) { e.gemms[0].ldd = 129; }},
      {"gemm.dtype_a", [](Executable& e) { e.gemms[0].dtype_a = DType::f16; }},
      {"gemm.dtype_b", [](Executable& e) { e.gemms[0].dtype_b = DType::f16; }},
      {"gemm.dtype_c", [](Executable& e) { e.gemms[0].dtype_c = DType::f16; }},
      {"gemm.dtype_d", [](Executable& e) { e.gemms[0].dtype_d = DType::f16; }},
      {"gemm.compute", [](Executable& e) { e.gemms[0].compute = DType::f16; }},
      {"gemm.alpha", [](Executable& e) { e.gemms[0].alpha = 0.5000001f; }},
      {"gemm.beta", [](Executable& e) { e.gemms[0].beta = 1.f; }},
      {"gemm.epilogue", [](Executable& e) { e.gemms[0].epilogue = Epilogue::gelu; }},
      {"gemm.a", [](Executable& e) { e.gemms[0].a.offset = 2; }},
      {"gemm.b", [](Executable& e) { e.gemms[0].b.buffer = 1; }},
      {"gemm.c", [](Executable& e) { e.gemms[0].c = {2, 0}; }},
      {"gemm.d", [](Executable& e) { e.gemms[0].d.offset = 2; }},
      {"gemm.bias", [](Executable& e) { e.gemms[0].bias.offset = 2; }},
      {"gemm.scale_a", [](Executable& e) { e.gemms[0].scale_a = {3, 0}; }},
      {"gemm.scale_b", [](Executable& e) { e.gemms[0].scale_b = {3, 0}; }},
      {"collective.op", [](Executable& e) { e.collectives[0].op = CollectiveSpec::AllGather; }},
      {"collective.reduction",
       [](Executable& e) { e.collectives[0].reduction = CollectiveSpec::Max; }},
      {"collective.dtype", [](Executable& e) { e.collectives[0].dtype = DType::f32; }},
      {"collective.count", [](Executable& e) { e.collectives[0].count = 32; }},
      {"collective.send", [](Executable& e) { e.collectives[0].send.offset = 8; }},
      {"collective.recv", [](Executable& e) { e.collectives[0].recv.buffer = 2; }},
      {"attention.b", [](Executable& e) { e.attentions[0].b = 2; }},
      {"attention.sq", [](Executable& e) { e.attentions[0].sq = 1; }},
      {"attention.skv", [](Executable& e) { e.attentions[0].skv = 3; }},
      {"attention.hq", [](Executable& e) { e.attentions[0].hq = 4; }},
      {"attention.hkv", [](Executable& e) { e.attentions[0].hkv = 2; }},
      {"attention.d", [](Executable& e) { e.attentions[0].d = 64; }},
      {"attention.causal", [](Executable& e) { e.attentions[0].causal = false; }},
      {"attention.scale", [](Executable& e) { e.attentions[0].scale = 0.25f; }},
      {"attention.dtype", [](Executable& e) { e.attentions[0].dtype = DType::f16; }},
      {"attention.q", [](Executable& e) { e.attentions[0].q.offset = 1; }},
      {"attention.k", [](Executable& e) { e.attentions[0].k.offset = 1; }},
      {"attention.v", [](Executable& e) { e.attentions[0].v.offset = 1; }},
      {"attention.o", [](Executable& e) { e.attentions[0].o.offset = 1; }},
      {"launch.kind", [](Executable& e) { e.launches[2].kind = Launch::Kernel; }},
      {"launch.kernel",
       [](Executable& e) {
         e.kernels.push_back(e.kernels[0]);
         e.launches[1].kernel = 1;
         e.kernels[1].name = "llmc_norm2";
       }},
      {"launch.kernel on a gemm", [](Executable& e) { e.launches[2].kernel = 0; }},
      {"launch.grid", [](Executable& e) { e.launches[1].grid[2] = 2; }},
      {"launch.grid on a copy", [](Executable& e) { e.launches[4].grid[0] = 2; }},
      {"launch.block", [](Executable& e) { e.launches[1].block[1] = 2; }},
      {"launch.smem", [](Executable& e) { e.launches[1].smem = 0; }},
      {"launch.smem on a gemm", [](Executable& e) { e.launches[2].smem = 16; }},
      {"launch.args on a gemm",
       [](Executable& e) { e.launches[2].args = e.launches[1].args; }},
      {"arg.buffer", [](Executable& e) { e.launches[1].args[0].buffer = 1; }},
      {"arg.offset", [](Executable& e) { e.launches[1].args[0].byte_offset = 0; }},
      {"arg.kind", [](Executable& e) { e.launches[1].args[1].kind = Arg::I64; }},
      {"arg.i32", [](Executable& e) { e.launches[1].args[1].i = 7; }},
      {"arg.i64", [](Executable& e) { e.launches[1].args[2].i = 1; }},
      {"arg.f32", [](Executable& e) { e.launches[1].args[3].f = 1.0000001e-6f; }},
      {"arg.bytes", [](Executable& e) { e.launches[1].args[4].bytes[15] = 0; }},
      {"arg.short bytes", [](Executable& e) { e.launches[1].args[5].bytes[1] = 1; }},
      {"arg count", [](Executable& e) { e.launches[1].args.pop_back(); }},
      {"launch.attention", [](Executable& e) { e.launches[1].attention = -1; }},
      {"launch.gemm", [](Executable& e) { e.launches[2].gemm = 1; }},
      {"launch.gemm on a kernel", [](Executable& e) { e.launches[1].gemm = 0; }},
      {"launch.collective", [](Executable& e) { e.launches[3].collective = 1; }},
      {"launch.collective on a copy", [](Executable& e) { e.launches[4].collective = 0; }},
      {"launch.src", [](Executable& e) { e.launches[4].src.offset = 4; }},
      {"launch.dst", [](Executable& e) { e.launches[4].dst.buffer = 4; }},
      {"launch.src on a kernel", [](Executable& e) { e.launches[1].src = {0, 0}; }},
      {"launch.copy_bytes", [](Executable& e) { e.launches[4].copy_bytes = 128; }},
      {"launch.copy_bytes on a gemm", [](Executable& e) { e.launches[2].copy_bytes = 1; }},
      {"launch.label", [](Executable& e) { e.launches[2].label = "proj2"; }},
      {"launch order",
       [](Executable& e) { std::swap(e.launches[3], e.launches[4]); }},
      {"num_prepare_launches", [](Executable& e) { e.num_prepare_launches = 0; }},
      {"arena_bytes", [](Executable& e) { e.arena_bytes = 4096; }},
      {"symbol_bindings", [](Executable& e) { e.symbol_bindings["batch"] = 3; }},
      {"symbol name", [](Executable& e) { e.symbol_bindings = {{"seq", 2}}; }},
  };
  const Executable base = Sample();
  const std::string baseDump = DescribeExecutable(base);
  const std::string baseBytes = SerializeExecutable(base);
  for (const auto& [what, mutate] : mutations) {
    Executable e = base;
    mutate(e);
    // The mutation is one the executable's own format keeps ...
    EXPECT_NE(SerializeExecutable(e), baseBytes) << what;
    // ... and the dump shows it.
    EXPECT_NE(DescribeExecutable(e), baseDump) << what;
  }
}

// Cubins and the arch they were built for depend on NVRTC, not on the
// compiler: they do not show.
TEST(ExecutableDumpTest, CubinsAndArchDoNotShow) {
  Executable e = Sample();
  const std::string dump = DescribeExecutable(e);
  e.kernels[0].cubin = "other cubin";
  e.kernels[0].arch = "sm_80";
  EXPECT_EQ(DescribeExecutable(e), dump);
  EXPECT_EQ(dump.find("cubin bytes"), std::string::npos);
  EXPECT_EQ(dump.find("sm_90a"), std::string::npos);
}

// What a golden test compares is what a file holds: the dump of a
// deserialized executable is that of the original.
TEST(ExecutableDumpTest, SameAfterSerialization) {
  Executable e = Sample();
  // Deserialize validates: no alias of another type, no cubin to check.
  e.outputs[0].alias_input = -1;
  e.kernels[0].cubin.clear();
  auto back = DeserializeExecutable(SerializeExecutable(e));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(DescribeExecutable(*back), DescribeExecutable(e));
}

// An invalid executable (as a broken compiler could make) still dumps.
TEST(ExecutableDumpTest, OutOfRangeKernelIndex) {
  Executable e = Sample();
  e.launches[1].kernel = 5;
  EXPECT_NE(DescribeExecutable(e).find("launch 1 call kernel #5(out of range) "),
            std::string::npos);
}

}  // namespace
}  // namespace llmc::rt
