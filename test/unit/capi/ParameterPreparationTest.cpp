// The parameter-preparation segment (rt::Executable::num_prepare_launches):
// work that depends on parameters only (llm::parameterArguments) runs once
// per parameter set instead of on every call.
//  - CPU: which arguments are parameters; the executable's structure (the
//    segment reads only parameters and writes only Persistent buffers or its
//    own scratch, per-call launches never read the raw weights it replaces,
//    nothing that depends on an activation or a donated input is hoisted);
//    launch counts with and without hoisting (LowerOptions::
//    hoist_parameter_work).
//  - GPU (skips without one): a weight overwritten in place gives the new
//    result after Session::InvalidateParameters, a weight at a new pointer
//    gives it at once; compared with the CPU reference on random inputs.
#include "../ExamplePath.h"
#include "../MlirContext.h"
#include "llmc/Compiler.h"
#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/Pipelines/Pipeline.h"
#include "llmc/InitAllDialects.h"
#include "llmc/Reference/ReferenceExecutor.h"
#include "llmc/runtime/ExecutableDump.h"
#include "llmc/runtime/Session.h"

#include "LLM/Transforms/Passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "gtest/gtest.h"

#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

namespace {

namespace rt = llmc::rt;
namespace ref = llmc::reference;

using llmc::test::ReadExample;
using llmc::test::SharedContext;

/// A parsed, shape-specialized function (the graph as written).
struct Parsed {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp fn;
};

Parsed Parse(const std::string &text, const std::map<std::string, int64_t> &dims) {
  Parsed p;
  p.module =
      mlir::parseSourceString<mlir::ModuleOp>(text, mlir::ParserConfig(&SharedContext()));
  EXPECT_TRUE(p.module);
  if (!p.module)
    return p;
  p.fn = *p.module->getOps<mlir::func::FuncOp>().begin();
  EXPECT_TRUE(mlir::succeeded(llmc::llm::specializeShapes(p.fn, dims)));
  return p;
}

/// `text` specialized, under `precision`, lowered for sm_`sm` with or
/// without hoisting.
rt::Executable Lower(const std::string &text, const std::map<std::string, int64_t> &dims,
                     const std::string &precision, bool hoist, int sm = 90) {
  Parsed p = Parse(text, dims);
  if (!p.fn)
    return {};
  absl::Status st = llmc::ApplyPrecisionPolicy(p.fn, precision);
  EXPECT_TRUE(st.ok()) << st;
  llmc::LowerOptions lo;
  lo.hoist_parameter_work = hoist;
  lo.target_sm = sm;
  auto exe = llmc::LowerToExecutable(p.fn, lo);
  EXPECT_TRUE(exe.ok()) << exe.status();
  return exe.ok() ? std::move(*exe) : rt::Executable{};
}

/// Buffer ids a launch touches (kernel pointer arguments; GEMM A, B, C, D,
/// bias and scales; copy source and destination; collective buffers).
std::vector<int> Touched(const rt::Executable &exe, const rt::Launch &l) {
  std::vector<int> ids;
  switch (l.kind) {
  case rt::Launch::Kernel:
    for (const rt::Arg &a : l.args)
      if (a.kind == rt::Arg::BufferPtr)
        ids.push_back(a.buffer);
    break;
  case rt::Launch::Gemm: {
    const rt::GemmSpec &g = exe.gemms[l.gemm];
    for (const rt::BufferRef &r : {g.a, g.b, g.c, g.d, g.bias, g.scale_a, g.scale_b})
      if (r.buffer >= 0)
        ids.push_back(r.buffer);
    break;
  }
  case rt::Launch::Copy:
    ids = {l.src.buffer, l.dst.buffer};
    break;
  case rt::Launch::Collective:
    ids = {exe.collectives[l.collective].send.buffer,
           exe.collectives[l.collective].recv.buffer};
    break;
  }
  return ids;
}

bool IsParameterInput(const rt::Executable &exe, int buffer) {
  const rt::Buffer &b = exe.buffers[buffer];
  return b.kind == rt::Buffer::Input && exe.inputs[b.io_index].parameter;
}

/// The segment's invariants: preparation launches touch only parameter
/// inputs, Persistent, arena and constant buffers (never a non-parameter
/// input or an output) and are no collectives; every Persistent buffer is
/// touched by both parts (written once per parameter set, read per call);
/// (a parameter may also be read per call, e.g. by an elementwise op).
void ExpectWellFormed(const rt::Executable &exe) {
  ASSERT_TRUE(exe.Validate().ok()) << exe.Validate();
  int n = exe.num_prepare_launches;
  std::set<int> prepTouched, callTouched;
  for (int i = 0; i < static_cast<int>(exe.launches.size()); ++i) {
    const rt::Launch &l = exe.launches[i];
    for (int id : Touched(exe, l)) {
      const rt::Buffer &b = exe.buffers[id];
      if (i < n) {
        prepTouched.insert(id);
        EXPECT_NE(l.kind, rt::Launch::Collective) << "launch " << i;
        EXPECT_NE(b.kind, rt::Buffer::Output) << "preparation launch " << i << " ("
                                              << l.label << ") writes an output";
        if (b.kind == rt::Buffer::Input) {
          EXPECT_TRUE(exe.inputs[b.io_index].parameter)
              << "preparation launch " << i << " (" << l.label
              << ") reads input " << b.io_index << ", which is not a parameter";
        }
      } else {
        callTouched.insert(id);
      }
    }
  }
  for (const rt::Buffer &b : exe.buffers) {
    if (b.kind != rt::Buffer::Persistent)
      continue;
    EXPECT_TRUE(prepTouched.count(b.id)) << "Persistent buffer " << b.id
                                         << " is never written by the preparation";
    EXPECT_TRUE(callTouched.count(b.id)) << "Persistent buffer " << b.id
                                         << " is never read per call (should be scratch)";
  }
}

/// No per-call launch reads a parameter input: the segment derived all that
/// the call needs from the raw weights.
void ExpectNoPerCallParameterReads(const rt::Executable &exe) {
  for (int i = exe.num_prepare_launches; i < static_cast<int>(exe.launches.size()); ++i)
    for (int id : Touched(exe, exe.launches[i]))
      EXPECT_FALSE(IsParameterInput(exe, id))
          << "per-call launch " << i << " (" << exe.launches[i].label
          << ") reads parameter input " << exe.buffers[id].io_index;
}

std::multiset<std::string> Labels(const rt::Executable &exe, bool prep) {
  std::multiset<std::string> out;
  for (int i = 0; i < static_cast<int>(exe.launches.size()); ++i)
    if ((i < exe.num_prepare_launches) == prep)
      out.insert(exe.launches[i].label);
  return out;
}

int PerCallLaunches(const rt::Executable &exe) {
  return static_cast<int>(exe.launches.size()) - exe.num_prepare_launches;
}

int64_t PersistentBytes(const rt::Executable &exe) {
  int64_t bytes = 0;
  for (const rt::Buffer &b : exe.buffers)
    if (b.kind == rt::Buffer::Persistent)
      bytes += b.bytes;
  return bytes;
}

//===----------------------------------------------------------------------===//
// Which arguments are parameters
//===----------------------------------------------------------------------===//

std::vector<bool> Params(const std::string &text) {
  Parsed p = Parse(text, {});
  if (!p.fn)
    return {};
  auto flags = llmc::llm::parameterArguments(p.fn);
  return std::vector<bool>(flags.begin(), flags.end());
}

TEST(ParameterArguments, WeightsButNotActivations) {
  // x: matmul LHS and norm input; g: norm weight; w: rank-2 RHS; b: bias;
  // k: batched RHS (attention scores), an activation.
  EXPECT_EQ(Params(R"(
func.func @f(%x: tensor<2x4x64xf32>, %g: tensor<64xf32>, %w: tensor<32x64xf32>,
             %b: tensor<32xf32>, %k: tensor<2x32x4xf32>) -> tensor<2x4x4xf32> {
  %h = llm.rms_norm %x, %g {eps = 1.0e-05 : f64} : tensor<2x4x64xf32>, tensor<64xf32>
  %y = llm.matmul %h, %w bias %b {transpose_rhs} : tensor<2x4x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<2x4x32xf32>
  %s = llm.matmul %y, %k : tensor<2x4x32xf32>, tensor<2x32x4xf32> -> tensor<2x4x4xf32>
  return %s : tensor<2x4x4xf32>
})"),
            (std::vector<bool>{false, true, true, true, false}));
}

TEST(ParameterArguments, ActivationAnywhereWins) {
  // w is a matmul weight and also added to the result (neutral), fine; v is
  // a weight of one matmul and the LHS of another: an activation.
  EXPECT_EQ(Params(R"(
func.func @f(%x: tensor<4x64xf32>, %w: tensor<64x64xf32>, %v: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %y = llm.matmul %x, %w : tensor<4x64xf32>, tensor<64x64xf32> -> tensor<4x64xf32>
  %z = llm.matmul %v, %w : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
  %u = llm.matmul %y, %v : tensor<4x64xf32>, tensor<64x64xf32> -> tensor<4x64xf32>
  %r = llm.add %z, %w : tensor<64x64xf32>
  return %r : tensor<64x64xf32>
})"),
            (std::vector<bool>{false, true, false}));
}

TEST(ParameterArguments, DonatedAndMarked) {
  // A donated argument is never a parameter, even as a rank-2 matmul RHS.
  EXPECT_EQ(Params(R"(
func.func @f(%x: tensor<4x64xf32>, %c: tensor<64x64xf32> {llm.donate}) -> tensor<4x64xf32> {
  %y = llm.matmul %x, %c : tensor<4x64xf32>, tensor<64x64xf32> -> tensor<4x64xf32>
  return %y : tensor<4x64xf32>
})"),
            (std::vector<bool>{false, false}));
  // With llm.param on some argument, exactly the marked ones.
  EXPECT_EQ(Params(R"(
func.func @f(%x: tensor<4x64xf32>, %w: tensor<64x64xf32>, %v: tensor<64x64xf32> {llm.param}) -> tensor<4x64xf32> {
  %y = llm.matmul %x, %w : tensor<4x64xf32>, tensor<64x64xf32> -> tensor<4x64xf32>
  %z = llm.matmul %y, %v : tensor<4x64xf32>, tensor<64x64xf32> -> tensor<4x64xf32>
  return %z : tensor<4x64xf32>
})"),
            (std::vector<bool>{false, false, true}));
}

TEST(ParameterArguments, ThroughFp8Scaling) {
  // After the fp8 policy a weight reaches its GEMM through abs/reduce_max/div/
  // cast/pad and its scale meets the activation's scale in a mul (neutral).
  Parsed p = Parse(ReadExample("tiny_llama_block.mlir"), {{"seq", 7}});
  ASSERT_TRUE(p.fn);
  ASSERT_TRUE(llmc::ApplyPrecisionPolicy(p.fn, "fp8").ok());
  auto flags = llmc::llm::parameterArguments(p.fn);
  ASSERT_EQ(flags.size(), 10u);
  EXPECT_FALSE(flags[0]) << "x is an activation";
  for (int i = 1; i < 10; ++i)
    EXPECT_TRUE(flags[i]) << "argument " << i << " is a weight";
}

//===----------------------------------------------------------------------===//
// Executable structure (no GPU)
//===----------------------------------------------------------------------===//

TEST(ParameterPreparation, Fp8WeightQuantizationPadsAreHoisted) {
  std::string text = ReadExample("tiny_llama_block.mlir");
  rt::Executable before = Lower(text, {{"seq", 7}}, "fp8", /*hoist=*/false);
  rt::Executable after = Lower(text, {{"seq", 7}}, "fp8", /*hoist=*/true);
  EXPECT_EQ(before.num_prepare_launches, 0);
  ExpectWellFormed(after);
  ExpectNoPerCallParameterReads(after);
  // The same launches, split: per-tensor scaling of seven weights (these
  // small weights are read as one row: one row kernel for the amax of |w|
  // and the scale, then divide + cast) and the pads of the weights whose K
  // or N is not a multiple of 32.
  EXPECT_EQ(after.launches.size(), before.launches.size());
  std::multiset<std::string> prep = Labels(after, true);
  EXPECT_EQ(prep.count("llm.abs"), 0u); // in the row kernel
  EXPECT_EQ(prep.count("llm.reduce_max"), 0u);
  EXPECT_EQ(prep.count("llm.div"), 7u);
  EXPECT_EQ(prep.count("llm.cast"), 7u);
  EXPECT_GE(prep.count("llm.pad"), 1u);
  EXPECT_LE(PerCallLaunches(after), PerCallLaunches(before) - 2 * 7)
      << "per call: " << PerCallLaunches(before) << " -> " << PerCallLaunches(after);
  EXPECT_EQ(after.gemms.size(), 7u);
  EXPECT_FALSE(after.inputs[0].parameter);
  // Persistent: the seven fp8 weights (padded) and their scales, about one
  // byte per weight element, never the f32 intermediates.
  int64_t weightElems = 0;
  for (int i = 2; i < 10; ++i)
    if (i != 6)
      weightElems += after.inputs[i].NumElements();
  EXPECT_GE(PersistentBytes(after), weightElems);
  EXPECT_LT(PersistentBytes(after), 2 * weightElems);
}

TEST(ParameterPreparation, Fp8KnWeightRelayoutIsHoisted) {
  // A [K, N] weight: cuBLASLt's fp8 GEMM wants [N, K]; the scaling cast
  // writes it so, in the segment (no relayout). Below sm_89 both operands
  // become bf16: the weight's relayout once, in the segment.
  const char *text = R"(
func.func @proj(%x: tensor<32x64xf32>, %w: tensor<64x96xf32>) -> tensor<32x96xf32> {
  %y = llm.matmul %x, %w : tensor<32x64xf32>, tensor<64x96xf32> -> tensor<32x96xf32>
  return %y : tensor<32x96xf32>
})";
  for (int sm : {90, 80}) {
    SCOPED_TRACE("sm_" + std::to_string(sm));
    rt::Executable exe = Lower(text, {}, "fp8", true, sm);
    ExpectWellFormed(exe);
    ExpectNoPerCallParameterReads(exe);
    EXPECT_TRUE(exe.inputs[1].parameter);
    EXPECT_FALSE(exe.inputs[0].parameter);
    // The matmul's own relayout kernels: none on sm_89+; on sm_80 one for
    // the weight, in the segment; per call at most the activation's and the
    // scaling of the f32 product (sm_80, where cuBLASLt takes no fp8
    // scales).
    EXPECT_EQ(Labels(exe, true).count("llm.matmul"), sm >= 89 ? 0u : 1u);
    EXPECT_EQ(Labels(exe, true).count("llm.cast"), 1u) << "the weight's scaling cast";
    EXPECT_EQ(Labels(exe, false).count("llm.matmul"), sm >= 89 ? 1u : 3u)
        << "per call: the GEMM"
        << (sm >= 89 ? "" : ", the activation's bf16 copy and the scaling kernel");
  }
}

TEST(ParameterPreparation, Bf16PolicyCastsF32WeightsOnce) {
  std::string text = ReadExample("tiny_llama_block.mlir");
  rt::Executable before = Lower(text, {{"seq", 7}}, "bf16", false);
  rt::Executable after = Lower(text, {{"seq", 7}}, "bf16", true);
  ExpectWellFormed(after);
  ExpectNoPerCallParameterReads(after);
  std::multiset<std::string> prep = Labels(after, true);
  EXPECT_EQ(prep.size(), prep.count("llm.cast")) << "only casts to hoist";
  EXPECT_GE(prep.count("llm.cast"), 7u) << "the seven projection weights";
  EXPECT_EQ(PerCallLaunches(after), PerCallLaunches(before) - after.num_prepare_launches);
  // The bf16 copies of the weights: 2 bytes per element.
  int64_t weightElems = 0;
  for (int i = 2; i < 10; ++i)
    if (i != 6)
      weightElems += after.inputs[i].NumElements();
  EXPECT_GE(PersistentBytes(after), 2 * weightElems);
}

TEST(ParameterPreparation, ActivationAndDonatedWorkIsNeverHoisted) {
  // neg(w): parameter only, hoisted. add(x, w): reads the activation. neg(c):
  // c is donated. mul(w, w): returned (outputs are written every call).
  // (Unmarked, w would not be a parameter: a value computed from it alone is
  // a function result, which reads as an activation.)
  const char *text = R"(
func.func @mixed(%x: tensor<64x64xf32>, %w: tensor<64x64xf32> {llm.param}, %c: tensor<64x64xf32> {llm.donate})
    -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %wn = llm.neg %w : tensor<64x64xf32>
  %xw = llm.add %x, %w : tensor<64x64xf32>
  %cn = llm.neg %c : tensor<64x64xf32>
  %y = llm.matmul %xw, %wn : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
  %z = llm.matmul %y, %cn : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
  %r = llm.mul %w, %w : tensor<64x64xf32>
  return %z, %r : tensor<64x64xf32>, tensor<64x64xf32>
})";
  rt::Executable exe = Lower(text, {}, "fp32", true);
  ExpectWellFormed(exe);
  ASSERT_EQ(exe.num_prepare_launches, 1);
  EXPECT_EQ(exe.launches[0].label, "llm.neg");
  EXPECT_FALSE(exe.inputs[0].parameter);
  EXPECT_TRUE(exe.inputs[1].parameter);
  EXPECT_FALSE(exe.inputs[2].parameter);
  std::multiset<std::string> call = Labels(exe, false);
  EXPECT_EQ(call.count("llm.add"), 1u);
  EXPECT_EQ(call.count("llm.neg"), 1u);
  EXPECT_EQ(call.count("llm.mul"), 1u);
  EXPECT_EQ(PersistentBytes(exe), 64 * 64 * 4);

  // Nothing is a parameter: nothing is hoisted.
  rt::Executable act = Lower(R"(
func.func @act(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %n = llm.neg %x : tensor<64x64xf32>
  %y = llm.matmul %x, %n : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
  return %y : tensor<64x64xf32>
})", {}, "bf16", true);
  EXPECT_EQ(act.num_prepare_launches, 0);
  EXPECT_EQ(PersistentBytes(act), 0);
}

// The segment is decided in IR (llmc-hoist-parameter-work): codegen obeys
// the marks of a planned function, plans an unplanned one with the same
// rule, and refuses a mark that would run per-call work once.
TEST(ParameterPreparation, MarksInIrDecideAndAreChecked) {
  const std::string text = R"(
func.func @f(%x: tensor<64x64xf32>, %w: tensor<64x64xf32> {llm.param}) -> tensor<64x64xf32> {
  %wn = llm.neg %w : tensor<64x64xf32>
  %xn = llm.exp %x : tensor<64x64xf32>
  %y = llm.matmul %xn, %wn : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
  return %y : tensor<64x64xf32>
})";
  auto lower = [&](const std::string &mlir) {
    Parsed p = Parse(mlir, {});
    llmc::LowerOptions lo;
    return p.fn ? llmc::LowerToExecutable(p.fn, lo)
                : absl::StatusOr<rt::Executable>(absl::InternalError("parse"));
  };
  auto unplanned = lower(text);
  ASSERT_TRUE(unplanned.ok()) << unplanned.status();
  ASSERT_EQ(unplanned->num_prepare_launches, 1);
  EXPECT_EQ(unplanned->launches[0].label, "llm.neg");

  // The pass's marks give the same executable.
  Parsed marked = Parse(text, {});
  ASSERT_TRUE(marked.fn);
  mlir::PassManager pm(&SharedContext(), mlir::func::FuncOp::getOperationName());
  pm.addPass(llmc::llm::createHoistParameterWorkPass());
  ASSERT_TRUE(mlir::succeeded(pm.run(marked.fn)));
  EXPECT_TRUE(marked.fn->hasAttr(llmc::llm::kParameterPreparationPlannedAttr));
  llmc::LowerOptions lo;
  auto fromMarks = llmc::LowerToExecutable(marked.fn, lo);
  ASSERT_TRUE(fromMarks.ok()) << fromMarks.status();
  EXPECT_EQ(rt::DescribeExecutable(*fromMarks), rt::DescribeExecutable(*unplanned));

  // Planned with no marks: everything runs per call (removing marks is sound).
  std::string planned = text;
  planned.replace(planned.find(") -> tensor<64x64xf32> {"), 24,
                  ") -> tensor<64x64xf32> attributes {llm.parameter_preparation_planned} {");
  auto none = lower(planned);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->num_prepare_launches, 0);
  EXPECT_EQ(PerCallLaunches(*none), PerCallLaunches(*unplanned) + 1);

  // A mark on work that reads the activation is refused, naming the op.
  std::string bad = planned;
  bad.replace(bad.find("llm.exp %x :"), 12, "llm.exp %x {llm.parameter_preparation} :");
  auto refused = lower(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "'llm.exp' at loc(\"-\":4:9) is marked llm.parameter_preparation but "
                "operand 0 is neither a parameter, a constant nor the result of a marked op"),
            std::string::npos)
      << refused.status();
}

TEST(ParameterPreparation, LlamaBlockLaunchCounts) {
  // The LLaMA-2-7B block at seq 2048 under fp8 (no GPU needed to lower).
  std::string text = ReadExample("llama2_7b_block.mlir");
  rt::Executable before = Lower(text, {{"seq", 2048}}, "fp8", false);
  rt::Executable after = Lower(text, {{"seq", 2048}}, "fp8", true);
  ExpectWellFormed(after);
  // (91, 42 and 49 before multi-output elementwise fusion: an activation's
  // scaling kernel also writes the value it scales; 81 and 46 before the
  // GEMMs took their scales through cuBLASLt's scale pointers; 69, 35 and
  // 34 before the amax was found per row by row kernels; 47 and 26 before
  // the SwiGLU product's kernel found its row maxima.)
  EXPECT_EQ(PerCallLaunches(before), 46);
  EXPECT_EQ(after.num_prepare_launches, 21);
  EXPECT_EQ(PerCallLaunches(after), 25);
  EXPECT_LT(after.arena_bytes, before.arena_bytes);
}

//===----------------------------------------------------------------------===//
// GPU: parameter updates
//===----------------------------------------------------------------------===//

std::string Pack(const ref::HostTensor &t) {
  std::string out;
  for (double v : t.data) {
    float f = static_cast<float>(v);
    out.append(reinterpret_cast<const char *>(&f), 4);
  }
  return out;
}

/// Compiles `text` under `precision` for the GPU present, runs it, then
/// changes weight argument `w` three ways (in place without and with
/// InvalidateParameters, at a new pointer, back to the old pointer) and
/// compares every run with the reference of the weights it should see.
void UpdateScenario(const std::string &text, const std::map<std::string, int64_t> &dims,
                    const std::string &precision, int w, double tolerance) {
  auto devOr = rt::Device::Open(0);
  if (!devOr.ok())
    GTEST_SKIP() << "needs a GPU: " << devOr.status().message();
  auto dev = *devOr;
  if (precision == "fp8" && llmc::ComputeCapabilityOfArch(dev->Arch()) < 89)
    GTEST_SKIP() << "fp8 GEMMs need sm_89+, found " << dev->Arch();
  llmc::CompilerOptions options;
  options.arch = dev->Arch();
  options.precision = precision;
  auto compiler = llmc::Compiler::Create(options);
  ASSERT_TRUE(compiler.ok()) << compiler.status();
  auto exe = (*compiler)->Compile(text, "", dims);
  ASSERT_TRUE(exe.ok()) << exe.status();
  ASSERT_GT((*exe)->num_prepare_launches, 0);
  ASSERT_TRUE((*exe)->inputs[w].parameter);
  auto session = rt::Session::Load(dev, *exe);
  ASSERT_TRUE(session.ok()) << session.status();
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();

  Parsed p = Parse(text, dims);
  ASSERT_TRUE(p.fn);
  std::mt19937_64 rng(7);
  std::vector<ref::HostTensor> inputs;
  for (mlir::Type t : p.fn.getArgumentTypes()) {
    auto tt = mlir::cast<mlir::RankedTensorType>(t);
    ASSERT_TRUE(tt.getElementType().isF32()) << "this test packs f32 only";
    double stddev = tt.getRank() >= 2 ? 1.0 / std::sqrt(double(tt.getShape().back())) : 1.0;
    inputs.push_back(ref::RandomTensor(tt.getElementType(), tt.getShape(), rng, stddev));
  }
  auto newWeight = [&] {
    ref::HostTensor t = inputs[w];
    double stddev = 1.0 / std::sqrt(double(t.shape.back()));
    return ref::RandomTensor(t.elementType, t.shape, rng, stddev);
  };
  auto reference = [&](const ref::HostTensor &weight) {
    std::vector<ref::HostTensor> in = inputs;
    in[w] = weight;
    auto out = ref::Evaluate(p.fn, in);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? (*out)[0] : ref::HostTensor{};
  };

  std::vector<uint64_t> allocations;
  auto upload = [&](uint64_t ptr, const ref::HostTensor &t) {
    std::string bytes = Pack(t);
    ASSERT_TRUE(dev->CopyToDevice(ptr, bytes.data(), bytes.size()).ok());
  };
  std::vector<rt::DeviceTensor> din, dout;
  for (auto [i, t] : llvm::enumerate(inputs)) {
    auto ptr = dev->Alloc(t.numElements() * 4);
    ASSERT_TRUE(ptr.ok()) << ptr.status();
    allocations.push_back(*ptr);
    upload(*ptr, t);
    din.push_back({*ptr, rt::DType::f32, t.shape});
  }
  const rt::TensorSig &osig = (*exe)->outputs[0];
  ASSERT_EQ(osig.dtype, rt::DType::f32);
  auto out = dev->Alloc(osig.Bytes());
  ASSERT_TRUE(out.ok()) << out.status();
  allocations.push_back(*out);
  dout.push_back({*out, osig.dtype, osig.shape});

  auto runAndCompare = [&](const ref::HostTensor &expected, const char *what) {
    ASSERT_TRUE((*session)->Run(din, dout, *stream).ok()) << what;
    ASSERT_TRUE(dev->SynchronizeStream(*stream).ok()) << what;
    ref::HostTensor got = expected;
    std::vector<float> host(got.data.size());
    ASSERT_TRUE(dev->CopyToHost(host.data(), *out, host.size() * 4).ok());
    for (size_t k = 0; k < host.size(); ++k)
      got.data[k] = host[k];
    EXPECT_LT(ref::RelativeError(got, expected), tolerance) << what;
  };

  ref::HostTensor w1 = inputs[w], w2 = newWeight(), w3 = newWeight();
  ref::HostTensor r1 = reference(w1), r2 = reference(w2), r3 = reference(w3);
  // The weights must matter, or the comparisons below prove nothing.
  ASSERT_GT(ref::RelativeError(r2, r1), 5 * tolerance);
  ASSERT_GT(ref::RelativeError(r3, r2), 5 * tolerance);

  runAndCompare(r1, "first run");
  runAndCompare(r1, "second run (CUDA graph replay)");
  // In place, without telling the session: the segment does not re-run, the
  // result still reflects w1 (the documented contract of ParameterGuard).
  upload(din[w].dptr, w2);
  runAndCompare(r1, "weight overwritten in place, not invalidated");
  (*session)->InvalidateParameters();
  runAndCompare(r2, "weight overwritten in place + InvalidateParameters");
  runAndCompare(r2, "next run");
  // A new pointer re-runs the segment by itself.
  auto other = dev->Alloc(w3.numElements() * 4);
  ASSERT_TRUE(other.ok()) << other.status();
  allocations.push_back(*other);
  upload(*other, w3);
  uint64_t first = din[w].dptr;
  din[w].dptr = *other;
  runAndCompare(r3, "weight at a new pointer");
  din[w].dptr = first;
  runAndCompare(r2, "back to the first pointer (holding w2)");

  (void)dev->DestroyStream(*stream);
  for (uint64_t ptr : allocations)
    (void)dev->Free(ptr);
}

// RMSNorm + projection; K = 80 and N = 100 are padded to 96 and 128 under
// fp8 (the weight's pad is in the segment, the activation's per call).
const char *kProjection = R"(
func.func @proj(%x: tensor<2x7x80xf32>, %g: tensor<80xf32>, %w: tensor<100x80xf32>) -> tensor<2x7x100xf32> {
  %h = llm.rms_norm %x, %g {eps = 1.0e-05 : f64} : tensor<2x7x80xf32>, tensor<80xf32>
  %y = llm.matmul %h, %w {transpose_rhs} : tensor<2x7x80xf32>, tensor<100x80xf32> -> tensor<2x7x100xf32>
  return %y : tensor<2x7x100xf32>
})";

// bf16 policy, f32 weights: the bf16 weight casts are the segment.
TEST(ParameterPreparationGpu, Bf16WeightCastsFollowWeightUpdates) {
  UpdateScenario(kProjection, {}, "bf16", /*w=*/2, 2e-2);
}

// fp8 policy: per-tensor scaling, cast to e4m3 and pad of the weight.
TEST(ParameterPreparationGpu, Fp8WeightScalingFollowsWeightUpdates) {
  UpdateScenario(kProjection, {}, "fp8", /*w=*/2, 0.125);
}

} // namespace
