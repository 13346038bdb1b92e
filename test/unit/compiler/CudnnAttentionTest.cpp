//===- CudnnAttentionTest.cpp - cuDNN attention alternative ----------------===//
//
// LowerOptions::attention_backend (LLMC_ATTENTION_BACKEND through
// llmc::SetTuningKnobs):
//  - CPU: which llm.attention launches get a cuDNN alternative
//    (rt::AttentionSpec + Launch::attention; the llmc kernel stays as the
//    fallback), that its buffers are the kernel's q/k/v/o, and that it
//    survives serialization.
//  - GPU (skips without a GPU; the cuDNN half skips without libcudnn.so.9):
//    B=1 S=128 H=4 D=64 bf16, causal and not, GQA: llmc's kernel and cuDNN
//    each against a float64 CPU reference on the same bf16 inputs (relative
//    L2 <= 1e-2), eager and through a CUDA graph; and the training forward
//    (llm.attention + llm.attention_logsumexp, one launch writing O and the
//    f32 logsumexp, cuDNN's SDPA writing its stats) the same, the
//    logsumexp within 1e-5 relative of float64.
//
//===----------------------------------------------------------------------===//

#include "llmc/Compiler/LowerToExecutable.h"
#include "../MlirContext.h"
#include "../kernels/CpuReference.h"
#include "../ScopedEnv.h"
#include "llmc/InitAllDialects.h"
#include "llmc/Pipelines/Pipeline.h"
#include "llmc/runtime/CudnnAttention.h"
#include "llmc/runtime/Session.h"

#include "LLM/Transforms/Passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

namespace {

namespace rt = llmc::rt;

using llmc::ref::FromBf16;
using llmc::ref::ToBf16;
using llmc::test::ScopedEnv;
using llmc::test::SharedContext;

struct Shape {
  int64_t b, sq, skv, hq, hkv, d;
  bool causal;
  std::string type = "bf16";
  bool mask = false;
  /// Also return the llm.attention_logsumexp of the same operands (a
  /// training forward).
  bool stats = false;
};

std::string AttentionMlir(const Shape &s) {
  auto t = [&](int64_t seq, int64_t h) {
    return "tensor<" + std::to_string(s.b) + "x" + std::to_string(seq) + "x" +
           std::to_string(h) + "x" + std::to_string(s.d) + "x" + s.type + ">";
  };
  std::string q = t(s.sq, s.hq), kv = t(s.skv, s.hkv);
  std::string mt = "tensor<" + std::to_string(s.sq) + "x" + std::to_string(s.skv) + "x" +
                   s.type + ">";
  std::string args = "%q: " + q + ", %k: " + kv + ", %v: " + kv;
  if (s.mask)
    args += ", %m: " + mt;
  std::string causal = s.causal ? "{causal} " : "";
  std::string lse = "tensor<" + std::to_string(s.b) + "x" + std::to_string(s.hq) + "x" +
                    std::to_string(s.sq) + "xf32>";
  return "func.func @attn(" + args + ") -> " + (s.stats ? "(" + q + ", " + lse + ")" : q) +
         " {\n  %o = llm.attention %q, %k, %v " +
         (s.mask ? "mask(%m : " + mt + ") " : std::string()) + causal + ": " + q + ", " + kv +
         ", " + kv + "\n" +
         (s.stats ? "  %lse = llm.attention_logsumexp %q, %k " + causal + ": " + q + ", " + kv +
                        " -> " + lse + "\n  return %o, %lse : " + q + ", " + lse
                  : "  return %o : " + q) +
         "\n}\n";
}

absl::StatusOr<rt::Executable> Lower(const Shape &s, llmc::AttentionBackend backend) {
  auto module = mlir::parseSourceString<mlir::ModuleOp>(AttentionMlir(s),
                                                        mlir::ParserConfig(&SharedContext()));
  if (!module)
    return absl::InvalidArgumentError("parse failed:\n" + AttentionMlir(s));
  auto fn = *module->getOps<mlir::func::FuncOp>().begin();
  llmc::LowerOptions lo;
  lo.attention_backend = backend;
  return llmc::LowerToExecutable(fn, lo);
}

/// The launch of the attention kernel.
const rt::Launch *AttentionLaunch(const rt::Executable &exe) {
  for (const rt::Launch &l : exe.launches)
    if (l.label == "llm.attention")
      return &l;
  return nullptr;
}

TEST(CudnnAttentionLoweringTest, AutoAttachesSpecWithTheKernelsBuffers) {
  ScopedEnv env("LLMC_ATTENTION_BACKEND", nullptr);
  for (auto backend : {llmc::AttentionBackend::kAuto, llmc::AttentionBackend::kCudnn}) {
    auto exe = Lower({2, 128, 128, 8, 2, 64, true}, backend);
    ASSERT_TRUE(exe.ok()) << exe.status();
    ASSERT_EQ(exe->attentions.size(), 1u);
    const rt::AttentionSpec &a = exe->attentions[0];
    EXPECT_EQ(a.b, 2);
    EXPECT_EQ(a.sq, 128);
    EXPECT_EQ(a.skv, 128);
    EXPECT_EQ(a.hq, 8);
    EXPECT_EQ(a.hkv, 2);
    EXPECT_EQ(a.d, 64);
    EXPECT_TRUE(a.causal);
    EXPECT_FLOAT_EQ(a.scale, 0.125f);  // 1/sqrt(64)
    EXPECT_EQ(a.dtype, rt::DType::bf16);
    const rt::Launch *l = AttentionLaunch(*exe);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->kind, rt::Launch::Kernel);  // the fallback stays
    EXPECT_EQ(l->attention, 0);
    // The kernel's arguments are (o, q, k, v, ...).
    ASSERT_GE(l->args.size(), 4u);
    EXPECT_EQ(l->args[0].buffer, a.o.buffer);
    EXPECT_EQ(l->args[1].buffer, a.q.buffer);
    EXPECT_EQ(l->args[2].buffer, a.k.buffer);
    EXPECT_EQ(l->args[3].buffer, a.v.buffer);
    EXPECT_EQ(exe->buffers[a.q.buffer].kind, rt::Buffer::Input);
    EXPECT_EQ(exe->buffers[a.o.buffer].kind, rt::Buffer::Output);
    auto back = rt::DeserializeExecutable(rt::SerializeExecutable(*exe));
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(back->attentions.size(), 1u);
    EXPECT_EQ(AttentionLaunch(*back)->attention, 0);
  }
}

TEST(CudnnAttentionLoweringTest, NoSpecWhereCudnnDoesNotApply) {
  ScopedEnv env("LLMC_ATTENTION_BACKEND", nullptr);
  struct Case {
    const char *what;
    Shape shape;
    llmc::AttentionBackend backend;
  };
  const Case cases[] = {
      {"llmc backend", {1, 128, 128, 4, 4, 64, true}, llmc::AttentionBackend::kLlmc},
      {"f32", {1, 128, 128, 4, 4, 64, true, "f32"}, llmc::AttentionBackend::kCudnn},
      {"additive mask", {1, 128, 128, 4, 4, 64, false, "bf16", true},
       llmc::AttentionBackend::kCudnn},
      {"causal sq != skv", {1, 64, 128, 4, 4, 64, true}, llmc::AttentionBackend::kCudnn},
      {"head dim 20", {1, 128, 128, 4, 4, 20, false}, llmc::AttentionBackend::kCudnn},
  };
  for (const Case &c : cases) {
    auto exe = Lower(c.shape, c.backend);
    ASSERT_TRUE(exe.ok()) << c.what << ": " << exe.status();
    EXPECT_TRUE(exe->attentions.empty()) << c.what;
    const rt::Launch *l = AttentionLaunch(*exe);
    ASSERT_NE(l, nullptr) << c.what;
    EXPECT_EQ(l->attention, -1) << c.what;
  }
  // Non-causal with sq != skv and f16 do get one.
  auto exe = Lower({1, 64, 200, 4, 4, 64, false, "f16"}, llmc::AttentionBackend::kAuto);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(exe->attentions.size(), 1u);
}

// The environment is read at the API boundary (SetTuningKnobs), never by
// the lowering: an explicit setting wins over it, a bad value is an error
// naming the variable, and LowerToExecutable does what its options say
// whatever the variable holds.
TEST(CudnnAttentionLoweringTest, EnvironmentIsReadOnceAtTheBoundary) {
  {
    ScopedEnv env("LLMC_ATTENTION_BACKEND", "llmc");
    llmc::PipelineOptions options;
    ASSERT_TRUE(llmc::SetTuningKnobs({}, options).ok());
    EXPECT_EQ(options.attention_backend, llmc::AttentionBackend::kLlmc);
    auto exe = Lower({1, 128, 128, 4, 4, 64, true}, options.attention_backend);
    ASSERT_TRUE(exe.ok()) << exe.status();
    EXPECT_TRUE(exe->attentions.empty());
    // An explicit setting wins over the environment.
    llmc::TuningKnobs given;
    given.attention_backend = {"cudnn", "--attention"};
    ASSERT_TRUE(llmc::SetTuningKnobs(given, options).ok());
    EXPECT_EQ(options.attention_backend, llmc::AttentionBackend::kCudnn);
    // The lowering itself ignores the variable.
    exe = Lower({1, 128, 128, 4, 4, 64, true}, llmc::AttentionBackend::kAuto);
    ASSERT_TRUE(exe.ok()) << exe.status();
    EXPECT_EQ(exe->attentions.size(), 1u);
  }
  {
    ScopedEnv env("LLMC_ATTENTION_BACKEND", "fastest");
    llmc::PipelineOptions options;
    absl::Status st = llmc::SetTuningKnobs({}, options);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("environment variable LLMC_ATTENTION_BACKEND: "),
              std::string::npos)
        << st;
    EXPECT_NE(st.message().find("'fastest' (expected auto, llmc or cudnn)"),
              std::string::npos)
        << st;
    llmc::TuningKnobs given;
    given.attention_backend = {"fast", "--attention"};
    st = llmc::SetTuningKnobs(given, options);
    EXPECT_NE(st.message().find("--attention: "), std::string::npos) << st;
  }
  EXPECT_EQ(llmc::ParseAttentionBackend("cudnn").value(), llmc::AttentionBackend::kCudnn);
  EXPECT_FALSE(llmc::ParseAttentionBackend("CUDNN").ok());
}

// ---------------------------------------------------------------------------
// GPU
// ---------------------------------------------------------------------------
/// softmax(q k^T * scale [causal, bottom-right]) v in float64; GQA head h
/// reads kv head h / (hq / hkv). `lse` (optional) gets the [b, hq, sq]
/// logsumexp of the scaled scores.
std::vector<double> Reference(const Shape &s, const std::vector<float> &q,
                              const std::vector<float> &k, const std::vector<float> &v,
                              double scale, std::vector<double> *lse = nullptr) {
  std::vector<double> out(s.b * s.sq * s.hq * s.d, 0.0);
  if (lse)
    lse->assign(s.b * s.hq * s.sq, 0.0);
  std::vector<double> p(s.skv);
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.hq; ++h)
      for (int64_t i = 0; i < s.sq; ++i) {
        int64_t hk = h / (s.hq / s.hkv);
        int64_t last = s.causal ? i + s.skv - s.sq : s.skv - 1;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= last; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < s.d; ++c)
            dot += double(q[((b * s.sq + i) * s.hq + h) * s.d + c]) *
                   k[((b * s.skv + j) * s.hkv + hk) * s.d + c];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = 0; j <= last; ++j)
          sum += p[j] = std::exp(p[j] - mx);
        if (lse)
          (*lse)[(b * s.hq + h) * s.sq + i] = mx + std::log(sum);
        for (int64_t j = 0; j <= last; ++j)
          for (int64_t c = 0; c < s.d; ++c)
            out[((b * s.sq + i) * s.hq + h) * s.d + c] +=
                p[j] / sum * v[((b * s.skv + j) * s.hkv + hk) * s.d + c];
      }
  return out;
}

/// Largest |got - want| / |want| over the elements; infinite with a NaN.
double MaxRelative(const std::vector<float> &got, const std::vector<double> &want) {
  if (got.size() != want.size())
    return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i]))
      return INFINITY;
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), 1e-30));
  }
  return worst;
}

/// Relative L2 error; infinite when `got` has a NaN.
double RelativeL2(const std::vector<float> &got, const std::vector<double> &want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i]))
      return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

struct GpuResult {
  std::vector<float> eager, graph;          // output 0 (bf16)
  std::vector<float> eager_lse, graph_lse;  // output 1 (f32) with Shape::stats
  std::string report;
};

/// Lowers `s` for `backend`, runs it eagerly and through a CUDA graph.
absl::StatusOr<GpuResult> RunOnGpu(std::shared_ptr<rt::Device> dev, const Shape &s,
                                   llmc::AttentionBackend backend,
                                   const std::vector<std::vector<uint16_t>> &in) {
  auto exe = Lower(s, backend);
  if (!exe.ok())
    return exe.status();
  auto shared = std::make_shared<rt::Executable>(std::move(*exe));
  auto session = rt::Session::Load(dev, shared);
  if (!session.ok())
    return session.status();
  GpuResult r;
  r.report = (*session)->attention_report();
  std::vector<rt::DeviceTensor> din, dout;
  std::vector<uint64_t> ptrs;
  for (size_t i = 0; i < in.size(); ++i) {
    auto p = dev->Alloc(in[i].size() * 2);
    if (!p.ok())
      return p.status();
    ptrs.push_back(*p);
    if (auto st = dev->CopyToDevice(*p, in[i].data(), in[i].size() * 2); !st.ok())
      return st;
    din.push_back({*p, rt::DType::bf16, shared->inputs[i].shape});
  }
  size_t n = static_cast<size_t>(shared->outputs[0].NumElements());
  size_t nl = s.stats ? static_cast<size_t>(shared->outputs[1].NumElements()) : 0;
  auto o = dev->Alloc(n * 2);
  if (!o.ok())
    return o.status();
  ptrs.push_back(*o);
  dout.push_back({*o, rt::DType::bf16, shared->outputs[0].shape});
  uint64_t lse = 0;
  if (s.stats) {
    auto p = dev->Alloc(nl * 4);
    if (!p.ok())
      return p.status();
    ptrs.push_back(lse = *p);
    dout.push_back({lse, rt::DType::f32, shared->outputs[1].shape});
  }
  auto stream = dev->CreateStream();
  if (!stream.ok())
    return stream.status();
  absl::Status st;
  std::vector<uint16_t> host(n);
  std::vector<float> host_lse(nl);
  auto fetch = [&](std::vector<float> *out, std::vector<float> *out_lse) {
    if (st.ok())
      st = dev->SynchronizeStream(*stream);
    if (st.ok())
      st = dev->CopyToHost(host.data(), *o, n * 2);
    if (st.ok() && nl)
      st = dev->CopyToHost(host_lse.data(), lse, nl * 4);
    for (uint16_t h : host)
      out->push_back(FromBf16(h));
    *out_lse = host_lse;
  };
  // NaN: an unwritten output fails.
  auto poison = [&] {
    if (st.ok())
      st = dev->Memset(*o, 0xff, n * 2);
    if (st.ok() && nl)
      st = dev->Memset(lse, 0xff, nl * 4);
  };
  // Eager (null stream: no graph), then twice on a stream (capture + replay).
  poison();
  if (st.ok())
    st = (*session)->Run(din, dout, nullptr);
  fetch(&r.eager, &r.eager_lse);
  poison();
  for (int i = 0; i < 2 && st.ok(); ++i)
    st = (*session)->Run(din, dout, *stream);
  fetch(&r.graph, &r.graph_lse);
  if (st.ok() && (*session)->num_graph_captures() != 1)
    st = absl::InternalError("expected one CUDA graph capture");
  (void)dev->DestroyStream(*stream);
  for (uint64_t p : ptrs)
    (void)dev->Free(p);
  if (!st.ok())
    return st;
  return r;
}

TEST(CudnnAttentionGpuTest, CudnnAndKernelMatchReference) {
  auto dev = rt::Device::Open(0);
  if (!dev.ok())
    GTEST_SKIP() << "no GPU: " << dev.status();
  ScopedEnv env("LLMC_ATTENTION_BACKEND", nullptr);
  const Shape shapes[] = {{1, 128, 128, 4, 4, 64, true},
                          {1, 128, 128, 4, 4, 64, false},
                          {2, 96, 160, 8, 2, 128, false}};
  std::mt19937 rng(20261129);
  std::normal_distribution<float> normal(0.f, 1.f);
  bool cudnn_ran[3] = {false, false, false};
  std::string cudnn_report;
  for (int si = 0; si < 3; ++si) {
    const Shape &s = shapes[si];
    std::string what = AttentionMlir(s);
    std::vector<std::vector<uint16_t>> in(3);
    std::vector<std::vector<float>> f(3);
    int64_t sizes[3] = {s.b * s.sq * s.hq * s.d, s.b * s.skv * s.hkv * s.d,
                        s.b * s.skv * s.hkv * s.d};
    for (int t = 0; t < 3; ++t)
      for (int64_t i = 0; i < sizes[t]; ++i) {
        uint16_t h = ToBf16(normal(rng));
        in[t].push_back(h);
        f[t].push_back(FromBf16(h));  // the reference sees the bf16 inputs
      }
    std::vector<double> want = Reference(s, f[0], f[1], f[2], 1.0 / std::sqrt(double(s.d)));
    for (auto backend : {llmc::AttentionBackend::kLlmc, llmc::AttentionBackend::kCudnn}) {
      const char *name = backend == llmc::AttentionBackend::kLlmc ? "llmc" : "cudnn";
      auto r = RunOnGpu(*dev, s, backend, in);
      ASSERT_TRUE(r.ok()) << name << " " << what << r.status();
      // bf16 output rounding (2^-9) and bf16 P: 1e-2 relative L2.
      EXPECT_LE(RelativeL2(r->eager, want), 1e-2) << name << " eager\n" << what << r->report;
      EXPECT_LE(RelativeL2(r->graph, want), 1e-2) << name << " CUDA graph\n" << what << r->report;
      if (backend == llmc::AttentionBackend::kCudnn) {
        cudnn_report += r->report + "\n";
        cudnn_ran[si] = r->report.rfind("cuDNN ", 0) == 0;
      } else {
        EXPECT_EQ(r->report, "") << "llmc backend must not plan cuDNN";
      }
    }
  }
  std::cout << "cuDNN attention report:\n" << cudnn_report;
  auto lib = rt::GetCudnn();
  if (!lib.ok())
    GTEST_SKIP() << "llmc's kernel checked; cuDNN not available: " << lib.status();
  // With cuDNN present, the brief's two shapes must have run on it (the GQA
  // shape with sq != skv may fall back; the report above says why).
  EXPECT_TRUE(cudnn_ran[0] && cudnn_ran[1])
      << "cuDNN " << rt::CudnnVersion(**lib) << " loaded from " << rt::CudnnPath(**lib)
      << " but the S=128 attentions did not run on it:\n"
      << cudnn_report;
}

// The training forward: one launch writes O and the logsumexp; with cuDNN
// its SDPA writes both (the stats as a graph output). Both backends against
// float64, the statistics in f32 (1e-5 relative: the scores are summed in
// fp32 from bf16 inputs, log-sum-exp is well conditioned).
TEST(CudnnAttentionGpuTest, TheTrainingForwardWritesItsStatistics) {
  auto dev = rt::Device::Open(0);
  if (!dev.ok())
    GTEST_SKIP() << "no GPU: " << dev.status();
  ScopedEnv env("LLMC_ATTENTION_BACKEND", nullptr);
  Shape shapes[] = {{2, 256, 256, 8, 8, 64, true}, {1, 192, 192, 8, 2, 128, true},
                    {2, 128, 128, 4, 4, 64, false}};
  std::mt19937 rng(20261203);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::string cudnn_report;
  int cudnn_ran = 0;
  for (Shape &s : shapes) {
    s.stats = true;
    std::string what = AttentionMlir(s);
    std::vector<std::vector<uint16_t>> in(3);
    std::vector<std::vector<float>> f(3);
    int64_t sizes[3] = {s.b * s.sq * s.hq * s.d, s.b * s.skv * s.hkv * s.d,
                        s.b * s.skv * s.hkv * s.d};
    for (int t = 0; t < 3; ++t)
      for (int64_t i = 0; i < sizes[t]; ++i) {
        uint16_t h = ToBf16(normal(rng));
        in[t].push_back(h);
        f[t].push_back(FromBf16(h));
      }
    std::vector<double> want_lse;
    std::vector<double> want =
        Reference(s, f[0], f[1], f[2], 1.0 / std::sqrt(double(s.d)), &want_lse);
    for (auto backend : {llmc::AttentionBackend::kLlmc, llmc::AttentionBackend::kCudnn}) {
      const char *name = backend == llmc::AttentionBackend::kLlmc ? "llmc" : "cudnn";
      auto exe = Lower(s, backend);
      ASSERT_TRUE(exe.ok()) << exe.status();
      ASSERT_EQ(exe->launches.size(), 1u) << name << " " << what;
      auto r = RunOnGpu(*dev, s, backend, in);
      ASSERT_TRUE(r.ok()) << name << " " << what << r.status();
      EXPECT_LE(RelativeL2(r->eager, want), 1e-2) << name << " eager\n" << what << r->report;
      EXPECT_LE(RelativeL2(r->graph, want), 1e-2) << name << " CUDA graph\n" << what << r->report;
      EXPECT_LE(MaxRelative(r->eager_lse, want_lse), 1e-5) << name << " eager lse\n" << what << r->report;
      EXPECT_LE(MaxRelative(r->graph_lse, want_lse), 1e-5) << name << " CUDA graph lse\n" << what << r->report;
      if (backend == llmc::AttentionBackend::kCudnn) {
        cudnn_report += r->report + "\n";
        cudnn_ran += r->report.rfind("cuDNN ", 0) == 0;
      }
    }
  }
  std::cout << "cuDNN training-forward report:\n" << cudnn_report;
  auto lib = rt::GetCudnn();
  if (!lib.ok())
    GTEST_SKIP() << "llmc's kernel checked; cuDNN not available: " << lib.status();
  EXPECT_EQ(cudnn_ran, 3) << cudnn_report;
}

// ---------------------------------------------------------------------------
// The backward: llm.attention_backward through llmc's FlashAttention-2
// backward kernels and through cuDNN's fused SDPA backward (attached with
// the cudnn backend), each against float64 gradients of the same bf16
// inputs (o and lse from a float64 forward, o rounded to bf16).
// ---------------------------------------------------------------------------
std::string BackwardMlir(const Shape &s) {
  auto t = [&](int64_t seq, int64_t h) {
    return "tensor<" + std::to_string(s.b) + "x" + std::to_string(seq) + "x" +
           std::to_string(h) + "x" + std::to_string(s.d) + "xbf16>";
  };
  std::string q = t(s.sq, s.hq), kv = t(s.skv, s.hkv);
  std::string lse = "tensor<" + std::to_string(s.b) + "x" + std::to_string(s.hq) + "x" +
                    std::to_string(s.sq) + "xf32>";
  return "func.func @bwd(%q: " + q + ", %k: " + kv + ", %v: " + kv + ", %o: " + q +
         ", %do: " + q + ", %lse: " + lse + ") -> (" + q + ", " + kv + ", " + kv +
         ") {\n  %dq, %dk, %dv = llm.attention_backward %q, %k, %v, %o, %do, %lse " +
         (s.causal ? "{causal} " : "") + ": " + q + ", " + kv + ", " + kv + ", " + q + ", " + q +
         ", " + lse + "\n  return %dq, %dk, %dv : " + q + ", " + kv + ", " + kv + "\n}\n";
}

/// dq, dk, dv of softmax(q k^T * scale [causal]) v in float64 (P from the
/// given lse, D = rowsum(do * o)), as llm.attention_backward defines them.
void BackwardReference(const Shape &s, const std::vector<float> &q, const std::vector<float> &k,
                       const std::vector<float> &v, const std::vector<float> &o,
                       const std::vector<float> &dout, const std::vector<double> &lse,
                       double scale, std::vector<double> *dq, std::vector<double> *dk,
                       std::vector<double> *dv) {
  dq->assign(q.size(), 0.0), dk->assign(k.size(), 0.0), dv->assign(v.size(), 0.0);
  auto qi = [&](int64_t b, int64_t i, int64_t h) { return ((b * s.sq + i) * s.hq + h) * s.d; };
  auto ki = [&](int64_t b, int64_t j, int64_t h) { return ((b * s.skv + j) * s.hkv + h) * s.d; };
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.hq; ++h) {
      int64_t hk = h / (s.hq / s.hkv);
      for (int64_t i = 0; i < s.sq; ++i) {
        int64_t last = s.causal ? i + s.skv - s.sq : s.skv - 1;
        double D = 0;
        for (int64_t c = 0; c < s.d; ++c)
          D += double(dout[qi(b, i, h) + c]) * o[qi(b, i, h) + c];
        for (int64_t j = 0; j <= last; ++j) {
          double dot = 0, dp = 0;
          for (int64_t c = 0; c < s.d; ++c) {
            dot += double(q[qi(b, i, h) + c]) * k[ki(b, j, hk) + c];
            dp += double(dout[qi(b, i, h) + c]) * v[ki(b, j, hk) + c];
          }
          double p = std::exp(dot * scale - lse[(b * s.hq + h) * s.sq + i]);
          double ds = p * (dp - D);
          for (int64_t c = 0; c < s.d; ++c) {
            (*dq)[qi(b, i, h) + c] += scale * ds * k[ki(b, j, hk) + c];
            (*dk)[ki(b, j, hk) + c] += scale * ds * q[qi(b, i, h) + c];
            (*dv)[ki(b, j, hk) + c] += p * dout[qi(b, i, h) + c];
          }
        }
      }
    }
}

TEST(CudnnAttentionGpuTest, TheBackwardMatchesReference) {
  auto dev = rt::Device::Open(0);
  if (!dev.ok())
    GTEST_SKIP() << "no GPU: " << dev.status();
  const Shape shapes[] = {{2, 256, 256, 8, 8, 64, true}, {1, 256, 256, 8, 2, 128, true},
                          {2, 128, 128, 4, 4, 64, false}, {1, 300, 300, 4, 2, 64, true}};
  std::mt19937 rng(20261204);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::string cudnn_report;
  int cudnn_ran = 0;
  for (const Shape &s : shapes) {
    const std::string what = BackwardMlir(s);
    const double scale = 1.0 / std::sqrt(double(s.d));
    const int64_t nq = s.b * s.sq * s.hq * s.d, nkv = s.b * s.skv * s.hkv * s.d;
    auto randomBf16 = [&](int64_t n, std::vector<uint16_t> *bits, std::vector<float> *f) {
      for (int64_t i = 0; i < n; ++i) {
        bits->push_back(ToBf16(normal(rng)));
        f->push_back(FromBf16(bits->back()));
      }
    };
    std::vector<uint16_t> qb, kb, vb, dob, ob;
    std::vector<float> q, k, v, dout, o;
    randomBf16(nq, &qb, &q), randomBf16(nkv, &kb, &k), randomBf16(nkv, &vb, &v);
    randomBf16(nq, &dob, &dout);
    std::vector<double> lse;
    std::vector<double> o64 = Reference(s, q, k, v, scale, &lse);
    for (double x : o64) {
      ob.push_back(ToBf16(static_cast<float>(x)));
      o.push_back(FromBf16(ob.back()));
    }
    std::vector<float> lsef(lse.begin(), lse.end());
    std::vector<double> wq, wk, wv;
    BackwardReference(s, q, k, v, o, dout, lse, scale, &wq, &wk, &wv);
    for (auto backend : {llmc::AttentionBackend::kLlmc, llmc::AttentionBackend::kCudnn}) {
      const char *name = backend == llmc::AttentionBackend::kLlmc ? "llmc" : "cudnn";
      auto module = mlir::parseSourceString<mlir::ModuleOp>(what, mlir::ParserConfig(&SharedContext()));
      ASSERT_TRUE(module) << what;
      llmc::LowerOptions lo;
      lo.attention_backend = backend;
      auto exe = llmc::LowerToExecutable(*module->getOps<mlir::func::FuncOp>().begin(), lo);
      ASSERT_TRUE(exe.ok()) << exe.status();
      auto shared = std::make_shared<rt::Executable>(std::move(*exe));
      auto session = rt::Session::Load(*dev, shared);
      ASSERT_TRUE(session.ok()) << session.status();
      const std::string report = (*session)->attention_report();
      std::vector<uint64_t> ptrs;
      std::vector<rt::DeviceTensor> din, dout_t;
      auto upload = [&](const void *data, int64_t bytes, rt::DType t, const std::vector<int64_t> &shape) {
        auto p = (*dev)->Alloc(bytes);
        ASSERT_TRUE(p.ok()) << p.status();
        ptrs.push_back(*p);
        ASSERT_TRUE((*dev)->CopyToDevice(*p, data, bytes).ok());
        din.push_back({*p, t, shape});
      };
      upload(qb.data(), nq * 2, rt::DType::bf16, shared->inputs[0].shape);
      upload(kb.data(), nkv * 2, rt::DType::bf16, shared->inputs[1].shape);
      upload(vb.data(), nkv * 2, rt::DType::bf16, shared->inputs[2].shape);
      upload(ob.data(), nq * 2, rt::DType::bf16, shared->inputs[3].shape);
      upload(dob.data(), nq * 2, rt::DType::bf16, shared->inputs[4].shape);
      upload(lsef.data(), lsef.size() * 4, rt::DType::f32, shared->inputs[5].shape);
      const int64_t sizes[3] = {nq, nkv, nkv};
      for (int i = 0; i < 3; ++i) {
        auto p = (*dev)->Alloc(sizes[i] * 2);
        ASSERT_TRUE(p.ok()) << p.status();
        ptrs.push_back(*p);
        ASSERT_TRUE((*dev)->Memset(*p, 0xff, sizes[i] * 2).ok());  // NaN if unwritten
        dout_t.push_back({*p, rt::DType::bf16, shared->outputs[i].shape});
      }
      auto stream = (*dev)->CreateStream();
      ASSERT_TRUE(stream.ok());
      // Eager, then through a CUDA graph (capture + replay).
      for (int run = 0; run < 3; ++run) {
        absl::Status st = (*session)->Run(din, dout_t, run == 0 ? nullptr : *stream);
        ASSERT_TRUE(st.ok()) << name << " " << st;
        ASSERT_TRUE((*dev)->SynchronizeStream(*stream).ok());
        if (run == 1)
          continue;
        const std::vector<double> *want[3] = {&wq, &wk, &wv};
        const char *grad[3] = {"dq", "dk", "dv"};
        for (int i = 0; i < 3; ++i) {
          std::vector<uint16_t> host(sizes[i]);
          ASSERT_TRUE((*dev)->CopyToHost(host.data(), dout_t[i].dptr, sizes[i] * 2).ok());
          std::vector<float> got;
          for (uint16_t h : host)
            got.push_back(FromBf16(h));
          // bf16 results and bf16 P / dS in the GEMMs: 1e-2 relative L2.
          EXPECT_LE(RelativeL2(got, *want[i]), 1e-2)
              << name << " " << grad[i] << (run ? " CUDA graph" : " eager") << "\n"
              << what << report;
        }
      }
      (void)(*dev)->DestroyStream(*stream);
      for (uint64_t p : ptrs)
        (void)(*dev)->Free(p);
      if (backend == llmc::AttentionBackend::kCudnn) {
        cudnn_report += report + "\n";
        cudnn_ran += report.find("backward") != std::string::npos &&
                     report.find("llmc kernel for attention") == std::string::npos;
      }
    }
  }
  std::cout << "cuDNN attention backward report:\n" << cudnn_report;
  auto lib = rt::GetCudnn();
  if (!lib.ok())
    GTEST_SKIP() << "llmc's kernels checked; cuDNN not available: " << lib.status();
  EXPECT_GE(cudnn_ran, 3) << cudnn_report;
}

// CPU: the backward's three launches carry one spec (cuDNN runs it once,
// at the first; the others are its fallback with it), with the kernels'
// buffers, through serialization; the llmc backend attaches none.
TEST(CudnnAttentionLoweringTest, TheBackwardsLaunchesShareOneSpec) {
  ScopedEnv env("LLMC_ATTENTION_BACKEND", nullptr);
  const Shape s = {2, 256, 256, 8, 2, 64, true};
  for (auto backend : {llmc::AttentionBackend::kAuto, llmc::AttentionBackend::kLlmc}) {
    auto module = mlir::parseSourceString<mlir::ModuleOp>(BackwardMlir(s),
                                                          mlir::ParserConfig(&SharedContext()));
    ASSERT_TRUE(module);
    llmc::LowerOptions lo;
    lo.attention_backend = backend;
    auto exe = llmc::LowerToExecutable(*module->getOps<mlir::func::FuncOp>().begin(), lo);
    ASSERT_TRUE(exe.ok()) << exe.status();
    ASSERT_EQ(exe->launches.size(), 3u);
    if (backend == llmc::AttentionBackend::kLlmc) {
      EXPECT_TRUE(exe->attentions.empty());
      continue;
    }
    auto back = rt::DeserializeExecutable(rt::SerializeExecutable(*exe));
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(back->attentions.size(), 1u);
    const rt::AttentionSpec &a = back->attentions[0];
    EXPECT_TRUE(a.backward);
    EXPECT_EQ(rt::CudnnAttentionUnsupportedReason(a), "");
    for (const rt::Launch &l : back->launches)
      EXPECT_EQ(l.attention, 0) << l.label;
    // The main kernel's arguments: dK, dV, dQacc, q, k, v, dO, lse, D.
    const rt::Launch &main = back->launches[1];
    EXPECT_EQ(main.args[0].buffer, a.grad_key.buffer);
    EXPECT_EQ(main.args[1].buffer, a.grad_value.buffer);
    EXPECT_EQ(main.args[2].buffer, a.dq_accum.buffer);
    EXPECT_EQ(main.args[3].buffer, a.q.buffer);
    EXPECT_EQ(main.args[6].buffer, a.grad_output.buffer);
    EXPECT_EQ(main.args[7].buffer, a.lse.buffer);
    EXPECT_EQ(main.args[8].buffer, a.row_sum.buffer);
    EXPECT_EQ(back->launches[2].args[0].buffer, a.grad_query.buffer);
    EXPECT_EQ(back->buffers[a.o.buffer].kind, rt::Buffer::Input);
    EXPECT_TRUE(back->Validate().ok()) << back->Validate();
  }
}

} // namespace
