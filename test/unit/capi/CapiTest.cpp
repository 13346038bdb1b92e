// C API tests (llmc_c.h): misuse is reported as a status naming the argument,
// compile/save/load round trip, and (with a GPU) runs checked against the CPU
// reference executor, including two sessions running concurrently.
#include "CapiTestUtils.h"
#include "../ExamplePath.h"
#include "../MlirContext.h"
#include "llmc/llmc_c.h"

#include "llmc/InitAllDialects.h"
#include "llmc/Reference/ReferenceExecutor.h"
#include "llmc/runtime/Session.h"

#include "LLM/Transforms/Passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>
#include <string>
#include <thread>
#include <unistd.h>

namespace {

namespace rt = llmc::rt;
namespace ref = llmc::reference;

using llmc::test::ReadExample;
using llmc::test::SharedContext;

using llmc::test::Contains;
using llmc::test::Status;

struct CompilerHandle {
  CompilerHandle() {
    Status st(llmc_compiler_create("arch=sm_90a", &c));
    EXPECT_EQ(st.code(), 0) << st.message();
  }
  ~CompilerHandle() { llmc_compiler_release(c); }
  llmc_compiler_t *c = nullptr;
};

struct ExeHandle {
  ~ExeHandle() { llmc_executable_release(e); }
  llmc_executable_t *e = nullptr;
};

/// Compiles `text` and expects failure with `code`; returns the message.
std::string CompileError(const std::string &text, const char *fn,
                         const char *bindings, int code) {
  CompilerHandle c;
  ExeHandle exe;
  Status st(llmc_compile(c.c, text.data(), text.size(), fn, bindings, &exe.e));
  EXPECT_EQ(st.code(), code) << st.message();
  EXPECT_EQ(exe.e, nullptr);
  return st.message();
}

// The C API reports CMake's project(llmc VERSION), the one definition.
TEST(CapiVersion, IsTheProjectVersion) {
  ASSERT_NE(llmc_version(), nullptr);
  EXPECT_STREQ(llmc_version(), LLMC_PROJECT_VERSION);
  EXPECT_EQ(llmc_version(), llmc_version()); // a static string, not a copy
}

TEST(CapiStatus, NullIsOk) {
  EXPECT_EQ(llmc_status_code(nullptr), 0);
  EXPECT_STREQ(llmc_status_message(nullptr), "");
  llmc_status_free(nullptr);
}

TEST(CapiCompiler, NullOutPointer) {
  Status st(llmc_compiler_create(nullptr, nullptr));
  EXPECT_EQ(st.code(), 3);
  EXPECT_TRUE(Contains(st.message(), "out_compiler")) << st.message();
}

TEST(CapiCompiler, BadOptions) {
  struct Case {
    const char *options, *expect;
  } cases[] = {{"bogus=1", "bogus"},
               {"fuse=2", "fuse"},
               {"arch", "key=value"},
               {"arch=volta", "arch"},
               {"fuse=1;fuse=0", "twice"}};
  for (const Case &c : cases) {
    llmc_compiler_t *compiler = reinterpret_cast<llmc_compiler_t *>(0x1);
    Status st(llmc_compiler_create(c.options, &compiler));
    EXPECT_EQ(st.code(), 3) << c.options;
    EXPECT_TRUE(Contains(st.message(), c.expect)) << c.options << ": " << st.message();
    EXPECT_EQ(compiler, nullptr);
  }
  llmc_compiler_t *compiler = nullptr;
  EXPECT_LLMC_OK(llmc_compiler_create(" arch=sm_80 ; fuse=0;; ", &compiler));
  llmc_compiler_release(compiler);
  llmc_compiler_release(nullptr);
}

TEST(CapiCompile, NullArguments) {
  CompilerHandle c;
  ExeHandle exe;
  std::string text = ReadExample("tiny_llama_block.mlir");
  Status a(llmc_compile(nullptr, text.data(), text.size(), nullptr, "seq=7", &exe.e));
  EXPECT_EQ(a.code(), 3);
  EXPECT_TRUE(Contains(a.message(), "compiler")) << a.message();
  Status b(llmc_compile(c.c, text.data(), text.size(), nullptr, "seq=7", nullptr));
  EXPECT_EQ(b.code(), 3);
  EXPECT_TRUE(Contains(b.message(), "out_executable")) << b.message();
  Status d(llmc_compile(c.c, nullptr, 10, nullptr, "seq=7", &exe.e));
  EXPECT_EQ(d.code(), 3);
  EXPECT_TRUE(Contains(d.message(), "mlir")) << d.message();
}

TEST(CapiCompile, MalformedMlirCarriesDiagnostic) {
  std::string text = "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                     "  %y = llm.no_such_op %x : tensor<4xf32>\n"
                     "  return %y : tensor<4xf32>\n"
                     "}\n";
  std::string msg = CompileError(text, nullptr, nullptr, 3);
  EXPECT_TRUE(Contains(msg, "could not parse")) << msg;
  EXPECT_TRUE(Contains(msg, "<mlir>:2:")) << msg;
  EXPECT_TRUE(Contains(msg, "llm.no_such_op")) << msg;
}

// llmc_set_log_callback: a successful compile's remarks and warnings reach
// the host's callback with their level and location, in order; NULL
// restores stderr and the old callback hears nothing more.
struct LogRecords {
  std::vector<std::pair<int, std::string>> messages;
};

extern "C" void RecordLog(int level, const char *message, void *user_data) {
  static_cast<LogRecords *>(user_data)->messages.emplace_back(level, message);
}

TEST(CapiLog, CompileRemarksReachTheCallback) {
  const std::string text =
      "func.func @grads(%q: tensor<1x8x4x24xbf16>, %k: tensor<1x8x2x24xbf16>, "
      "%lse: tensor<1x4x8xf32>) -> tensor<1x8x4x24xbf16> {\n"
      "  %g:3 = llm.attention_backward %q, %k, %k, %q, %q, %lse {causal} : "
      "tensor<1x8x4x24xbf16>, tensor<1x8x2x24xbf16>, tensor<1x8x2x24xbf16>, "
      "tensor<1x8x4x24xbf16>, tensor<1x8x4x24xbf16>, tensor<1x4x8xf32>\n"
      "  return %g#0 : tensor<1x8x4x24xbf16>\n"
      "}\n";
  LogRecords records;
  llmc_set_log_callback(RecordLog, &records);
  {
    CompilerHandle c;
    ExeHandle exe;
    EXPECT_LLMC_OK(llmc_compile(c.c, text.data(), text.size(), nullptr, nullptr, &exe.e));
  }
  llmc_set_log_callback(nullptr, nullptr);
  ASSERT_EQ(records.messages.size(), 1u);
  EXPECT_EQ(records.messages[0].first, LLMC_LOG_INFO);
  const std::string &m = records.messages[0].second;
  EXPECT_TRUE(Contains(m, "<mlir>:2:")) << m;
  EXPECT_TRUE(Contains(m, "remark: decomposed with the attention scores materialized")) << m;
  EXPECT_TRUE(Contains(m, "[1, 4, 8, 8]")) << m;
  // Back on stderr: the records stay as they were.
  {
    CompilerHandle c;
    ExeHandle exe;
    EXPECT_LLMC_OK(llmc_compile(c.c, text.data(), text.size(), nullptr, nullptr, &exe.e));
  }
  EXPECT_EQ(records.messages.size(), 1u);
}

TEST(CapiCompile, UnknownFunctionListsFunctions) {
  std::string msg =
      CompileError(ReadExample("tiny_llama_block.mlir"), "nope", "seq=7", 3);
  EXPECT_TRUE(Contains(msg, "'nope'")) << msg;
  EXPECT_TRUE(Contains(msg, "@tiny_llama_block")) << msg;
}

TEST(CapiCompile, ShapeBindings) {
  std::string text = ReadExample("tiny_llama_block.mlir");
  std::string missing = CompileError(text, nullptr, nullptr, 3);
  EXPECT_TRUE(Contains(missing, "seq")) << missing;
  std::string unused = CompileError(text, nullptr, "seq=7,batch=2", 3);
  EXPECT_TRUE(Contains(unused, "batch")) << unused;
  std::string malformed = CompileError(text, nullptr, "seq", 3);
  EXPECT_TRUE(Contains(malformed, "shape_bindings")) << malformed;
  std::string notInt = CompileError(text, nullptr, "seq=abc", 3);
  EXPECT_TRUE(Contains(notInt, "seq")) << notInt;
}

TEST(CapiCompile, UnsupportedOpIsUnimplemented) {
  std::string text =
      "func.func @imm(%a: tensor<4x8xi32>, %b: tensor<8x4xi32>) -> tensor<4x4xi32> {\n"
      "  %0 = llm.matmul %a, %b : tensor<4x8xi32>, tensor<8x4xi32> -> tensor<4x4xi32>\n"
      "  return %0 : tensor<4x4xi32>\n"
      "}\n";
  std::string msg = CompileError(text, "imm", "", 12);
  EXPECT_TRUE(Contains(msg, "llm.matmul")) << msg;
  EXPECT_TRUE(Contains(msg, "integer matmul")) << msg;
}

void ExpectTinyLlamaSignature(const llmc_executable_t *e) {
  ASSERT_EQ(llmc_executable_num_inputs(e), 10);
  ASSERT_EQ(llmc_executable_num_outputs(e), 1);
  llmc_dtype dtype;
  int32_t rank;
  int64_t shape[LLMC_MAX_RANK];
  EXPECT_LLMC_OK(llmc_executable_input_info(e, 0, &dtype, &rank, shape));
  EXPECT_EQ(dtype, LLMC_DTYPE_F32);
  ASSERT_EQ(rank, 3);
  EXPECT_EQ(shape[0], 1);
  EXPECT_EQ(shape[1], 7);
  EXPECT_EQ(shape[2], 64);
  EXPECT_LLMC_OK(llmc_executable_input_info(e, 9, &dtype, &rank, shape));
  ASSERT_EQ(rank, 2);
  EXPECT_EQ(shape[0], 64);
  EXPECT_EQ(shape[1], 176);
  EXPECT_LLMC_OK(llmc_executable_output_info(e, 0, &dtype, &rank, shape));
  EXPECT_EQ(dtype, LLMC_DTYPE_F32);
  ASSERT_EQ(rank, 3);
  EXPECT_EQ(shape[1], 7);
}

TEST(CapiExecutable, CompileSaveLoadRoundTrip) {
  CompilerHandle c;
  ExeHandle exe, loaded;
  std::string text = ReadExample("tiny_llama_block.mlir");
  EXPECT_LLMC_OK(
      llmc_compile(c.c, text.data(), text.size(), nullptr, "seq=7", &exe.e));
  ExpectTinyLlamaSignature(exe.e);

  std::string path = ::testing::TempDir() + "/capi_tiny_llama_" +
                     std::to_string(::getpid()) + ".llmcx";
  EXPECT_LLMC_OK(llmc_executable_save(exe.e, path.c_str()));
  EXPECT_LLMC_OK(llmc_executable_load(path.c_str(), &loaded.e));
  ExpectTinyLlamaSignature(loaded.e);
  std::remove(path.c_str());

  ExeHandle missing;
  Status notFound(llmc_executable_load(path.c_str(), &missing.e));
  EXPECT_NE(notFound.code(), 0);
  EXPECT_EQ(missing.e, nullptr);
}

TEST(CapiExecutable, InfoMisuse) {
  CompilerHandle c;
  ExeHandle exe;
  std::string text = ReadExample("tiny_llama_block.mlir");
  EXPECT_LLMC_OK(
      llmc_compile(c.c, text.data(), text.size(), nullptr, "seq=7", &exe.e));
  llmc_dtype dtype;
  int32_t rank;
  int64_t shape[LLMC_MAX_RANK];
  EXPECT_EQ(llmc_executable_num_inputs(nullptr), -1);
  EXPECT_EQ(llmc_executable_num_outputs(nullptr), -1);
  Status a(llmc_executable_input_info(nullptr, 0, &dtype, &rank, shape));
  EXPECT_EQ(a.code(), 3);
  EXPECT_TRUE(Contains(a.message(), "executable")) << a.message();
  Status b(llmc_executable_input_info(exe.e, 10, &dtype, &rank, shape));
  EXPECT_EQ(b.code(), 3);
  EXPECT_TRUE(Contains(b.message(), "index")) << b.message();
  Status d(llmc_executable_output_info(exe.e, -1, &dtype, &rank, shape));
  EXPECT_EQ(d.code(), 3);
  Status e(llmc_executable_output_info(exe.e, 0, &dtype, nullptr, shape));
  EXPECT_EQ(e.code(), 3);
  EXPECT_TRUE(Contains(e.message(), "out_rank")) << e.message();
  Status f(llmc_executable_save(nullptr, "/tmp/x.llmcx"));
  EXPECT_EQ(f.code(), 3);
  Status g(llmc_executable_save(exe.e, nullptr));
  EXPECT_EQ(g.code(), 3);
  EXPECT_TRUE(Contains(g.message(), "path")) << g.message();
  Status h(llmc_executable_load("/tmp/x.llmcx", nullptr));
  EXPECT_EQ(h.code(), 3);
  int32_t isParam = -1;
  Status i(llmc_executable_input_is_parameter(nullptr, 0, &isParam));
  EXPECT_EQ(i.code(), 3);
  EXPECT_TRUE(Contains(i.message(), "executable")) << i.message();
  Status j(llmc_executable_input_is_parameter(exe.e, 10, &isParam));
  EXPECT_EQ(j.code(), 3);
  EXPECT_TRUE(Contains(j.message(), "expected input index in [0, 10), found 10"))
      << j.message();
  Status k(llmc_executable_input_is_parameter(exe.e, 0, nullptr));
  EXPECT_EQ(k.code(), 3);
  EXPECT_TRUE(Contains(k.message(), "out_is_parameter")) << k.message();
  EXPECT_EQ(isParam, -1) << "nothing written on failure";
}

TEST(CapiExecutable, ParameterInputs) {
  // Under the bf16 policy the weight casts are parameter preparation: the
  // seven projection weights that they read are parameters; the activation
  // (input 0) is not. In fp32 nothing is prepared, so nothing is a parameter.
  std::string text = ReadExample("tiny_llama_block.mlir");
  for (std::string precision : {"bf16", "fp32"}) {
    llmc_compiler_t *compiler = nullptr;
    std::string opts = "arch=sm_90a;precision=" + precision;
    EXPECT_LLMC_OK(llmc_compiler_create(opts.c_str(), &compiler));
    ExeHandle exe;
    Status st(llmc_compile(compiler, text.data(), text.size(), nullptr, "seq=7",
                           &exe.e));
    llmc_compiler_release(compiler);
    ASSERT_EQ(st.code(), 0) << st.message();
    int32_t n = llmc_executable_num_inputs(exe.e), params = 0;
    for (int32_t i = 0; i < n; ++i) {
      int32_t isParam = -1;
      EXPECT_LLMC_OK(llmc_executable_input_is_parameter(exe.e, i, &isParam));
      ASSERT_TRUE(isParam == 0 || isParam == 1) << isParam;
      if (i == 0)
        EXPECT_EQ(isParam, 0) << "the activation";
      params += isParam;
    }
    if (precision == "bf16")
      EXPECT_GE(params, 7) << "the projection weights";
    else
      EXPECT_EQ(params, 0) << precision;
  }
}

TEST(CapiExecutable, Stats) {
  // The tiny LLaMA block under bf16: weight casts in the preparation, the
  // projections as cuBLASLt GEMMs, the attention with cuDNN as an option.
  std::string text = ReadExample("tiny_llama_block.mlir");
  llmc_compiler_t *compiler = nullptr;
  EXPECT_LLMC_OK(llmc_compiler_create("arch=sm_90a;precision=bf16", &compiler));
  ExeHandle exe;
  Status st(llmc_compile(compiler, text.data(), text.size(), nullptr, "seq=64", &exe.e));
  llmc_compiler_release(compiler);
  ASSERT_EQ(st.code(), 0) << st.message();
  int64_t c[LLMC_EXECUTABLE_STATS];
  std::fill(c, c + LLMC_EXECUTABLE_STATS, -1);
  EXPECT_LLMC_OK(llmc_executable_stats(exe.e, c, LLMC_EXECUTABLE_STATS));
  EXPECT_GT(c[0], 0) << "kernels";
  EXPECT_GT(c[1], c[3]) << "launches per call include the GEMMs";
  EXPECT_GE(c[2], 7) << "the seven weight casts";
  EXPECT_EQ(c[3], 7) << "q, k, v, o, gate, up, down";
  EXPECT_EQ(c[4], 1) << "one attention cuDNN may run";
  EXPECT_EQ(c[5], 0) << "no collectives";
  EXPECT_GT(c[6], 0) << "arena bytes";
  // A shorter array gets the first counts; bad arguments are code 3 and
  // write nothing.
  int64_t two[2] = {-1, -1};
  EXPECT_LLMC_OK(llmc_executable_stats(exe.e, two, 2));
  EXPECT_EQ(two[0], c[0]);
  EXPECT_EQ(two[1], c[1]);
  int64_t untouched = -5;
  EXPECT_EQ(Status(llmc_executable_stats(exe.e, &untouched, LLMC_EXECUTABLE_STATS + 1)).code(), 3);
  EXPECT_EQ(Status(llmc_executable_stats(exe.e, nullptr, 1)).code(), 3);
  EXPECT_EQ(Status(llmc_executable_stats(nullptr, &untouched, 1)).code(), 3);
  EXPECT_EQ(untouched, -5);
}

TEST(CapiExecutable, OutputAliasInput) {
  // A donated KV cache written in place holds the result: output 0 aliases
  // input 0; the other output and a misuse say so.
  const char *text = R"mlir(
func.func @f(%c: tensor<1x2x8x4xf32> {llm.donate}, %p: tensor<1xi64>, %k: tensor<1x2x1x4xf32>)
    -> (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>) {
  %r = llm.index_put %c[%p], %k dim = 2 : tensor<1x2x8x4xf32>, tensor<1xi64>, tensor<1x2x1x4xf32>
  %d = llm.add %k, %k : tensor<1x2x1x4xf32>
  return %r, %d : tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>
})mlir";
  llmc_compiler_t *compiler = nullptr;
  EXPECT_LLMC_OK(llmc_compiler_create("arch=sm_90a", &compiler));
  ExeHandle exe;
  Status st(llmc_compile(compiler, text, std::strlen(text), nullptr, nullptr, &exe.e));
  llmc_compiler_release(compiler);
  ASSERT_EQ(st.code(), 0) << st.message();
  int32_t in = -7;
  EXPECT_LLMC_OK(llmc_executable_output_alias_input(exe.e, 0, &in));
  EXPECT_EQ(in, 0);
  EXPECT_LLMC_OK(llmc_executable_output_alias_input(exe.e, 1, &in));
  EXPECT_EQ(in, -1);
  in = -7;
  Status bad(llmc_executable_output_alias_input(exe.e, 2, &in));
  EXPECT_EQ(bad.code(), 3);
  EXPECT_TRUE(Contains(bad.message(), "expected output index in [0, 2), found 2")) << bad.message();
  EXPECT_EQ(in, -7) << "nothing written on failure";
  EXPECT_EQ(Status(llmc_executable_output_alias_input(nullptr, 0, &in)).code(), 3);
  EXPECT_EQ(Status(llmc_executable_output_alias_input(exe.e, 0, nullptr)).code(), 3);
}

TEST(CapiSession, CreateMisuseAndMissingGpu) {
  CompilerHandle c;
  ExeHandle exe;
  std::string text = ReadExample("tiny_llama_block.mlir");
  EXPECT_LLMC_OK(
      llmc_compile(c.c, text.data(), text.size(), nullptr, "seq=7", &exe.e));
  llmc_session_t *session = nullptr;
  Status a(llmc_session_create(nullptr, 0, nullptr, &session));
  EXPECT_EQ(a.code(), 3);
  EXPECT_TRUE(Contains(a.message(), "executable")) << a.message();
  Status b(llmc_session_create(exe.e, 0, nullptr, nullptr));
  EXPECT_EQ(b.code(), 3);
  EXPECT_TRUE(Contains(b.message(), "out_session")) << b.message();
  Status d(llmc_session_create(exe.e, -1, nullptr, &session));
  EXPECT_EQ(d.code(), 3);
  EXPECT_TRUE(Contains(d.message(), "device_ordinal")) << d.message();
  Status e(llmc_session_create(exe.e, 0, "graphs=1", &session));
  EXPECT_EQ(e.code(), 3);
  EXPECT_TRUE(Contains(e.message(), "graphs")) << e.message();

  // The staging keys are checked before any device is opened.
  for (const char *bad : {"staged_inputs=a", "staged_inputs=-1", "staged_output_bytes=-5",
                          "staged_output_bytes=x"}) {
    Status f(llmc_session_create(exe.e, 0, bad, &session));
    EXPECT_EQ(f.code(), 3) << bad;
    EXPECT_TRUE(Contains(f.message(), "options: staged_")) << f.message();
    EXPECT_EQ(session, nullptr);
  }

  Status st(llmc_session_create(exe.e, 0, "cuda_graphs=0;staged_inputs=0;staged_output_bytes=64",
                                &session));
  if (!rt::Device::Open(0).ok()) {
    EXPECT_EQ(st.code(), 9) << st.message();
    EXPECT_FALSE(st.message().empty());
    EXPECT_EQ(session, nullptr);
  } else {
    EXPECT_EQ(st.code(), 0) << st.message();
    EXPECT_NE(session, nullptr);
  }
  llmc_session_release(session);
  llmc_session_release(nullptr);
}

TEST(CapiSession, RunNullSession) {
  Status st(llmc_session_run(nullptr, nullptr, 0, nullptr, 0, nullptr));
  EXPECT_EQ(st.code(), 3);
  EXPECT_TRUE(Contains(st.message(), "session")) << st.message();
}

TEST(CapiSession, GraphStatsNullArguments) {
  int64_t counts[7];
  Status a(llmc_session_graph_stats(nullptr, counts, nullptr, 0));
  EXPECT_EQ(a.code(), 3);
  EXPECT_TRUE(Contains(a.message(), "session")) << a.message();
}

//===----------------------------------------------------------------------===//
// GPU tests
//===----------------------------------------------------------------------===//

std::shared_ptr<rt::Device> OpenOrNull() {
  auto d = rt::Device::Open(0);
  return d.ok() ? *d : nullptr;
}

#define REQUIRE_GPU(dev)                                                       \
  auto dev = OpenOrNull();                                                     \
  if (!dev)                                                                    \
  GTEST_SKIP() << "needs a GPU: " << rt::Device::Open(0).status().message()

/// One example compiled through the C API, with its reference function,
/// random inputs, device buffers and the reference outputs.
struct Example {
  std::string text;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp fn;
  ExeHandle exe;
  std::vector<ref::HostTensor> inputs, expected;
  std::vector<uint64_t> dIn, dOut;
  std::vector<std::vector<int64_t>> inShapes, outShapes;
  std::vector<llmc_tensor> cIn, cOut;
};

std::string Pack(const ref::HostTensor &t) {
  std::string out;
  for (double v : t.data) {
    if (t.elementType.isF32()) {
      float f = static_cast<float>(v);
      out.append(reinterpret_cast<const char *>(&f), 4);
    } else if (t.elementType.isInteger(64)) {
      int64_t i = static_cast<int64_t>(v);
      out.append(reinterpret_cast<const char *>(&i), 8);
    } else if (t.elementType.isInteger(32)) {
      int32_t i = static_cast<int32_t>(v);
      out.append(reinterpret_cast<const char *>(&i), 4);
    } else {
      ADD_FAILURE() << "test packs f32/i32/i64 only, found " << t.typeString();
    }
  }
  return out;
}

llmc_dtype CDType(mlir::Type t) {
  if (t.isInteger(64)) return LLMC_DTYPE_I64;
  if (t.isInteger(32)) return LLMC_DTYPE_I32;
  return LLMC_DTYPE_F32;
}

/// Parses, specializes (`dim`=`value`), compiles through the C API, makes
/// random inputs (integers in [0, 5): valid token ids and positions),
/// evaluates the reference and uploads inputs / allocates outputs.
void Prepare(mlir::MLIRContext &ctx, llmc_compiler_t *compiler,
             const std::string &file, int64_t seq, rt::Device &dev,
             uint64_t seed, Example &ex) {
  ex.text = ReadExample(file);
  ASSERT_FALSE(ex.text.empty()) << "cannot read " << llmc::test::ExamplePath(file)
                                << " (set LLMC_EXAMPLES_DIR)";
  ex.module = mlir::parseSourceString<mlir::ModuleOp>(ex.text, mlir::ParserConfig(&ctx));
  ASSERT_TRUE(ex.module);
  ASSERT_FALSE(ex.module->getOps<mlir::func::FuncOp>().empty()) << file;
  ex.fn = *ex.module->getOps<mlir::func::FuncOp>().begin();
  ASSERT_TRUE(mlir::succeeded(llmc::llm::specializeShapes(ex.fn, {{"seq", seq}})));
  std::string bindings = "seq=" + std::to_string(seq);
  EXPECT_LLMC_OK(llmc_compile(compiler, ex.text.data(), ex.text.size(), nullptr,
                              bindings.c_str(), &ex.exe.e));
  std::mt19937_64 rng(seed);
  for (mlir::Type t : ex.fn.getArgumentTypes()) {
    auto tt = mlir::cast<mlir::RankedTensorType>(t);
    std::vector<int64_t> shape(tt.getShape().begin(), tt.getShape().end());
    if (tt.getElementType().isInteger()) {
      ref::HostTensor h;
      h.elementType = tt.getElementType();
      h.shape = shape;
      h.data.resize(tt.getNumElements());
      for (double &v : h.data)
        v = static_cast<double>(rng() % 5);
      ex.inputs.push_back(h);
    } else {
      double stddev = shape.size() >= 2 ? 1.0 / std::sqrt(double(shape.back())) : 1.0;
      ex.inputs.push_back(ref::RandomTensor(tt.getElementType(), shape, rng, stddev));
    }
  }
  auto expected = ref::Evaluate(ex.fn, ex.inputs);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ex.expected = std::move(*expected);

  for (const ref::HostTensor &t : ex.inputs) {
    std::string bytes = Pack(t);
    auto p = dev.Alloc(std::max<size_t>(bytes.size(), 1));
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(dev.CopyToDevice(*p, bytes.data(), bytes.size()).ok());
    ex.dIn.push_back(*p);
    ex.inShapes.push_back(t.shape);
  }
  for (mlir::Type t : ex.fn.getFunctionType().getResults()) {
    auto tt = mlir::cast<mlir::RankedTensorType>(t);
    auto p = dev.Alloc(tt.getNumElements() * 4);
    ASSERT_TRUE(p.ok()) << p.status();
    ex.dOut.push_back(*p);
    ex.outShapes.emplace_back(tt.getShape().begin(), tt.getShape().end());
  }
  for (size_t i = 0; i < ex.dIn.size(); ++i)
    ex.cIn.push_back({reinterpret_cast<void *>(ex.dIn[i]),
                      CDType(ex.inputs[i].elementType),
                      static_cast<int32_t>(ex.inShapes[i].size()),
                      ex.inShapes[i].data(), nullptr});
  for (size_t i = 0; i < ex.dOut.size(); ++i)
    ex.cOut.push_back({reinterpret_cast<void *>(ex.dOut[i]), LLMC_DTYPE_F32,
                       static_cast<int32_t>(ex.outShapes[i].size()),
                       ex.outShapes[i].data(), nullptr});
}

void CheckOutputs(rt::Device &dev, Example &ex) {
  for (size_t i = 0; i < ex.expected.size(); ++i) {
    ref::HostTensor got = ex.expected[i];
    std::vector<float> host(got.data.size());
    ASSERT_TRUE(dev.CopyToHost(host.data(), ex.dOut[i], host.size() * 4).ok());
    for (size_t k = 0; k < host.size(); ++k)
      got.data[k] = host[k];
    double err = ref::RelativeError(got, ex.expected[i]);
    EXPECT_LT(err, 1e-4) << "output " << i << " of @" << ex.fn.getSymName().str();
  }
}

void Free(rt::Device &dev, Example &ex) {
  for (uint64_t p : ex.dIn)
    (void)dev.Free(p);
  for (uint64_t p : ex.dOut)
    (void)dev.Free(p);
}

TEST(CapiGpu, RunMatchesReferenceAndRejectsMismatches) {
  REQUIRE_GPU(dev);
  CompilerHandle c;
  Example ex;
  ASSERT_NO_FATAL_FAILURE(Prepare(SharedContext(), c.c, "tiny_llama_block.mlir", 7, *dev, 1, ex));
  llmc_session_t *session = nullptr;
  EXPECT_LLMC_OK(llmc_session_create(ex.exe.e, 0, nullptr, &session));
  EXPECT_LLMC_OK(llmc_session_run(session, ex.cIn.data(), ex.cIn.size(),
                                  ex.cOut.data(), ex.cOut.size(), nullptr));
  ASSERT_TRUE(dev->Synchronize().ok());
  CheckOutputs(*dev, ex);

  auto runError = [&](std::vector<llmc_tensor> in, int32_t numOut) {
    Status st(llmc_session_run(session, in.data(), in.size(), ex.cOut.data(),
                               numOut, nullptr));
    EXPECT_EQ(st.code(), 3) << st.message();
    return st.message();
  };
  auto in = ex.cIn;
  in[0].dtype = LLMC_DTYPE_BF16;
  std::string m = runError(in, 1);
  EXPECT_TRUE(Contains(m, "input 'arg0' (#0)")) << m;
  EXPECT_TRUE(Contains(m, "expected f32[1,7,64], got bf16[1,7,64]")) << m;

  in = ex.cIn;
  int64_t wrongShape[3] = {1, 8, 64};
  in[0].shape = wrongShape;
  m = runError(in, 1);
  EXPECT_TRUE(Contains(m, "got f32[1,8,64]")) << m;

  in = ex.cIn;
  in.pop_back();
  m = runError(in, 1);
  EXPECT_TRUE(Contains(m, "expected 10 inputs, got 9")) << m;
  m = runError(ex.cIn, 0);
  EXPECT_TRUE(Contains(m, "output")) << m;

  in = ex.cIn;
  int64_t transposed[2] = {1, 64}; // input 9 is [64, 176]
  in[9].strides = transposed;
  m = runError(in, 1);
  EXPECT_TRUE(Contains(m, "strides must be contiguous, found [1,64]")) << m;
  EXPECT_TRUE(Contains(m, "call .contiguous()")) << m;
  int64_t rowMajor[2] = {176, 1};
  in[9].strides = rowMajor;
  EXPECT_LLMC_OK(llmc_session_run(session, in.data(), in.size(), ex.cOut.data(),
                                  1, nullptr));

  in = ex.cIn;
  in[1].rank = LLMC_MAX_RANK + 1;
  m = runError(in, 1);
  EXPECT_TRUE(Contains(m, "rank")) << m;
  in = ex.cIn;
  in[1].dtype = static_cast<llmc_dtype>(99);
  m = runError(in, 1);
  EXPECT_TRUE(Contains(m, "dtype")) << m;
  m = runError(ex.cIn, -1);
  EXPECT_TRUE(Contains(m, "num_outputs")) << m;
  Status nullIn(llmc_session_run(session, nullptr, 10, ex.cOut.data(), 1, nullptr));
  EXPECT_EQ(nullIn.code(), 3);

  ASSERT_TRUE(dev->Synchronize().ok());
  llmc_session_release(session);
  Free(*dev, ex);
}

// CUDA graphs for a caller on the legacy default stream (PyTorch's default):
// captured once on the session's private stream, replayed, joined to stream
// 0 so that a synchronize sees the results; each run checked against the
// reference executor.
TEST(CapiGpu, GraphsOnTheDefaultStreamReplayAndMatchReference) {
  REQUIRE_GPU(dev);
  CompilerHandle c;
  Example ex;
  ASSERT_NO_FATAL_FAILURE(Prepare(SharedContext(), c.c, "tiny_llama_block.mlir", 7, *dev, 1, ex));
  llmc_session_t *session = nullptr;
  EXPECT_LLMC_OK(llmc_session_create(ex.exe.e, 0, "cuda_graphs=1", &session));
  for (int i = 0; i < 3; ++i) {
    for (const llmc_tensor &t : ex.cOut) {
      size_t bytes = 1;
      for (int d = 0; d < t.rank; ++d) bytes *= t.shape[d];
      switch (t.dtype) {
        case LLMC_DTYPE_F32: case LLMC_DTYPE_I32: bytes *= 4; break;
        case LLMC_DTYPE_F16: case LLMC_DTYPE_BF16: bytes *= 2; break;
        case LLMC_DTYPE_I64: bytes *= 8; break;
        default: break;  // one byte
      }
      // Poisoned (NaN bytes) so that a run that writes nothing fails.
      ASSERT_TRUE(dev->Memset(reinterpret_cast<uint64_t>(t.data), 0xff, bytes).ok());
    }
    EXPECT_LLMC_OK(llmc_session_run(session, ex.cIn.data(), ex.cIn.size(),
                                    ex.cOut.data(), ex.cOut.size(), nullptr));
    ASSERT_TRUE(dev->Synchronize().ok());
    CheckOutputs(*dev, ex);
  }
  int64_t counts[7] = {0};
  char reason[512];
  EXPECT_LLMC_OK(llmc_session_graph_stats(session, counts, reason, sizeof(reason)));
  EXPECT_STREQ(reason, "");
  EXPECT_EQ(counts[0], 1) << "captures";
  EXPECT_EQ(counts[3], 2) << "replays";
  EXPECT_EQ(counts[4], 3) << "launches";
  EXPECT_EQ(counts[5], 3) << "private stream runs";
  EXPECT_EQ(counts[6], 1) << "cached";
  llmc_session_release(session);
  Free(*dev, ex);
}

// Two executables, two sessions, two threads, two streams, at once; both
// results checked against the reference executor.
TEST(CapiGpu, TwoSessionsConcurrentlyOnTwoStreams) {
  REQUIRE_GPU(dev);
  CompilerHandle c;
  Example a, b;
  ASSERT_NO_FATAL_FAILURE(Prepare(SharedContext(), c.c, "tiny_llama_block.mlir", 7, *dev, 1, a));
  ASSERT_NO_FATAL_FAILURE(Prepare(SharedContext(), c.c, "tiny_gpt2_block.mlir", 5, *dev, 2, b));
  llmc_session_t *sa = nullptr, *sb = nullptr;
  EXPECT_LLMC_OK(llmc_session_create(a.exe.e, 0, "cuda_graphs=1", &sa));
  EXPECT_LLMC_OK(llmc_session_create(b.exe.e, 0, "cuda_graphs=1", &sb));
  auto streamA = dev->CreateStream(), streamB = dev->CreateStream();
  ASSERT_TRUE(streamA.ok() && streamB.ok());

  auto worker = [&](llmc_session_t *s, Example *ex, CUstream stream,
                    std::string *error) {
    for (int i = 0; i < 20 && error->empty(); ++i) {
      Status st(llmc_session_run(s, ex->cIn.data(), ex->cIn.size(),
                                 ex->cOut.data(), ex->cOut.size(), stream));
      if (st.code() != 0)
        *error = st.message();
    }
    auto sync = dev->SynchronizeStream(stream);
    if (!sync.ok() && error->empty())
      *error = std::string(sync.message());
  };
  std::string errA, errB;
  std::thread ta(worker, sa, &a, *streamA, &errA);
  std::thread tb(worker, sb, &b, *streamB, &errB);
  ta.join();
  tb.join();
  EXPECT_EQ(errA, "");
  EXPECT_EQ(errB, "");
  CheckOutputs(*dev, a);
  CheckOutputs(*dev, b);

  llmc_session_release(sa);
  llmc_session_release(sb);
  (void)dev->DestroyStream(*streamA);
  (void)dev->DestroyStream(*streamB);
  Free(*dev, a);
  Free(*dev, b);
}

} // namespace

namespace llmc {
namespace {

TEST(CapiCommunicator, MisuseIsCode3AndNamesTheArgument) {
  llmc_nccl_unique_id id{};
  llmc_communicator_t *comm = nullptr;
  struct Case {
    const llmc_nccl_unique_id *id;
    int32_t rank, nranks, device;
    double timeout;
    const char *names;
  } cases[] = {
      {nullptr, 0, 2, 0, 0, "id"},          {&id, 2, 2, 0, 0, "rank"},
      {&id, -1, 2, 0, 0, "rank"},           {&id, 0, 0, 0, 0, "nranks"},
      {&id, 0, 2, -1, 0, "device_ordinal"}, {&id, 0, 2, 0, -1, "timeout_seconds"},
  };
  for (const Case &c : cases) {
    Status st(llmc_communicator_create(c.id, c.rank, c.nranks, c.device,
                                       c.timeout, &comm));
    EXPECT_EQ(st.code(), 3) << c.names << ": " << st.message();
    EXPECT_TRUE(Contains(st.message(), c.names)) << st.message();
    EXPECT_EQ(comm, nullptr);
  }
  Status out(llmc_communicator_create(&id, 0, 1, 0, 0, nullptr));
  EXPECT_EQ(out.code(), 3);
  EXPECT_TRUE(Contains(out.message(), "out_communicator")) << out.message();
  Status nul(llmc_nccl_get_unique_id(nullptr));
  EXPECT_EQ(nul.code(), 3);
  Status wait(llmc_communicator_wait(nullptr, nullptr));
  EXPECT_EQ(wait.code(), 3);
  EXPECT_EQ(llmc_communicator_rank(nullptr), -1);
  EXPECT_EQ(llmc_communicator_nranks(nullptr), -1);
  llmc_communicator_release(nullptr);

  CompilerHandle c;
  ExeHandle exe;
  std::string text = ReadExample("tiny_llama_block.mlir");
  EXPECT_LLMC_OK(
      llmc_compile(c.c, text.data(), text.size(), nullptr, "seq=7", &exe.e));
  llmc_session_t *session = nullptr;
  Status s(llmc_session_create_with_communicator(exe.e, nullptr, nullptr,
                                                 &session));
  EXPECT_EQ(s.code(), 3);
  EXPECT_TRUE(Contains(s.message(), "communicator")) << s.message();
  EXPECT_EQ(session, nullptr);
}

TEST(CapiCommunicator, UniqueIdAndCreateWithoutGpu) {
  llmc_nccl_unique_id a{}, b{};
  Status sa(llmc_nccl_get_unique_id(&a));
  if (sa.code() == 9) {
    EXPECT_TRUE(Contains(sa.message(), "LLMC_LIBNCCL")) << sa.message();
    GTEST_SKIP() << "no libnccl: " << sa.message();
  }
  ASSERT_EQ(sa.code(), 0) << sa.message();
  EXPECT_LLMC_OK(llmc_nccl_get_unique_id(&b));
  EXPECT_NE(std::memcmp(a.internal, b.internal, sizeof(a.internal)), 0);
  if (rt::Device::Open(0).ok())
    GTEST_SKIP() << "a GPU is present: the no-GPU path is not reachable";
  llmc_communicator_t *comm = nullptr;
  Status st(llmc_communicator_create(&a, 0, 1, 0, 5, &comm));
  EXPECT_EQ(st.code(), 9) << st.message();
  EXPECT_EQ(comm, nullptr);
}

} // namespace
} // namespace llmc
