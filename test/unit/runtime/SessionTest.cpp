// Session tests. The signature checks run everywhere; the device tests run
// only where libcuda and a GPU are present (skipped otherwise).
#include "llmc/runtime/Session.h"
#include "llmc/runtime/KernelCompiler.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "llmc/runtime/DynamicLibs.h"

namespace llmc::rt {
namespace {

TEST(CheckTensorsTest, NamesTensorAndExpectedVsActual) {
  std::vector<TensorSig> sigs = {{"x", DType::bf16, {2, 64}},
                                 {"pos", DType::i32, {2}}};
  std::vector<DeviceTensor> ok = {{0x1000, DType::bf16, {2, 64}},
                                  {0x2000, DType::i32, {2}}};
  EXPECT_TRUE(CheckTensors(sigs, ok, "input").ok());
  auto bad = ok;
  bad[0].dtype = DType::f16;
  absl::Status s = CheckTensors(sigs, bad, "input");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "input 'x' (#0): expected bf16[2,64], got f16[2,64]");
  bad = ok;
  bad[1].shape = {3};
  EXPECT_EQ(CheckTensors(sigs, bad, "input").message(),
            "input 'pos' (#1): expected i32[2], got i32[3]");
  bad = ok;
  bad[1].dptr = 0;
  EXPECT_NE(CheckTensors(sigs, bad, "output").message().find("null pointer"),
            std::string::npos);
  EXPECT_EQ(CheckTensors(sigs, {ok[0]}, "input").message(),
            "expected 2 inputs, got 1");
  // Kernels read inputs and write outputs with 16-byte vectors: a misaligned
  // address (a view into the middle of a row) is refused, not launched.
  bad = ok;
  bad[0].dptr = 0x1008;
  EXPECT_EQ(CheckTensors(sigs, bad, "output").message(),
            "output 'x' (#0) at 0x1008 is not 16-byte aligned (address % 16 = 8): "
            "llmc's kernels access inputs and outputs with 16-byte vectors; pass an "
            "aligned copy");
  // A tensor the session copies through its aligned staging buffer (a
  // staging slot: offset >= 0) may lie at any address.
  std::vector<int64_t> staged = {0, -1};
  EXPECT_TRUE(CheckTensors(sigs, bad, "input", &staged).ok());
  staged = {-1, 0};
  EXPECT_FALSE(CheckTensors(sigs, bad, "input", &staged).ok());
  // An empty tensor's address is never read.
  std::vector<TensorSig> empty = {{"e", DType::bf16, {0, 64}}};
  EXPECT_TRUE(CheckTensors(empty, {{0x1002, DType::bf16, {0, 64}}}, "input").ok());
}

std::shared_ptr<Device> OpenOrSkip() {
  auto d = Device::Open(0);
  if (!d.ok()) return nullptr;
  return *d;
}

#define REQUIRE_GPU(dev)                                                       \
  auto dev = OpenOrSkip();                                                     \
  if (!dev) GTEST_SKIP() << "no GPU: " << Device::Open(0).status()

TEST(DeviceTest, OpenFailsCleanlyOrReportsArch) {
  auto d = Device::Open(0);
  if (!d.ok()) {
    EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition)
        << d.status();
    return;
  }
  EXPECT_GE((*d)->cc_major(), 7);
  EXPECT_TRUE((*d)->CanRunCubin((*d)->Arch()));
  EXPECT_FALSE((*d)->CanRunCubin("sm_10"));
  EXPECT_EQ(Device::Open(1000).status().code(), absl::StatusCode::kInvalidArgument);
}

constexpr char kAxpy[] = R"(
extern "C" __global__ void axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
})";

// kAxpy (kernel 0) over n floats: buffer y += 3 * buffer x, 128 threads a block.
Launch AxpyLaunch(int y_buffer, int x_buffer, int n) {
  Launch ax; ax.kind = Launch::Kernel; ax.kernel = 0;
  ax.grid[0] = (n + 127) / 128; ax.block[0] = 128;
  Arg y; y.buffer = y_buffer;
  Arg x; x.buffer = x_buffer;
  Arg a; a.kind = Arg::F32; a.f = 3.f;
  Arg nn; nn.kind = Arg::I32; nn.i = n;
  ax.args = {y, x, a, nn};
  return ax;
}

// y = 3*x + const(1.0) via copy + axpy; n = 1000.
std::shared_ptr<Executable> AxpyExecutable(bool with_cubin_for_other_arch) {
  auto e = std::make_shared<Executable>();
  const int n = 1000;
  e->inputs = {{"x", DType::f32, {n}}};
  e->outputs = {{"y", DType::f32, {n}}};
  std::vector<float> ones(n, 1.f);
  e->buffers = {{0, Buffer::Input, 4 * n, 0, 0, ""},
                {1, Buffer::Output, 4 * n, 0, 0, ""},
                {2, Buffer::Constant, 4 * n, 0, -1,
                 std::string(reinterpret_cast<char*>(ones.data()), 4 * n)},
                {3, Buffer::Arena, 4 * n, 256, -1, ""}};
  e->arena_bytes = 256 + 4 * n;
  KernelSpec k;
  k.name = "axpy";
  k.source = kAxpy;
  if (with_cubin_for_other_arch) {
    // A real cubin of this kernel for another GPU: the session must ignore
    // it and compile the source for the device's arch. (A cubin that is not
    // a CUDA ELF at all is refused by Validate: ForgedExecutableTest.)
    KernelCompiler kc({/*cache_dir=*/"", /*use_disk_cache=*/false});
    auto other = kc.Compile({"axpy", kAxpy, {}, "sm_75", {}});
    EXPECT_TRUE(other.ok()) << other.status();
    if (other.ok()) {
      k.arch = "sm_75";
      k.cubin = other->binary;
    }
  }
  e->kernels = {k};
  Launch c1; c1.kind = Launch::Copy; c1.src = {2, 0}; c1.dst = {3, 0}; c1.copy_bytes = 4 * n;
  Launch ax = AxpyLaunch(/*y=*/3, /*x=*/0, n);
  Launch c2; c2.kind = Launch::Copy; c2.src = {3, 0}; c2.dst = {1, 0}; c2.copy_bytes = 4 * n;
  e->launches = {c1, ax, c2};
  return e;
}

TEST(SessionGpuTest, KernelsCopiesConstantsAndGraphReplay) {
  REQUIRE_GPU(dev);
  auto session = Session::Load(dev, AxpyExecutable(true));
  ASSERT_TRUE(session.ok()) << session.status();
  const int n = 1000;
  std::vector<float> hx(n);
  for (int i = 0; i < n; ++i) hx[i] = float(i);
  auto x = dev->Alloc(4 * n), y1 = dev->Alloc(4 * n), y2 = dev->Alloc(4 * n);
  ASSERT_TRUE(x.ok() && y1.ok() && y2.ok());
  ASSERT_TRUE(dev->CopyToDevice(*x, hx.data(), 4 * n).ok());
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<float> hy(n);
  for (uint64_t out : {*y1, *y1, *y2}) {
    ASSERT_TRUE(dev->Memset(out, 0, 4 * n).ok());
    absl::Status st = (*session)->Run({{*x, DType::f32, {n}}},
                                      {{out, DType::f32, {n}}}, *stream);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(dev->SynchronizeStream(*stream).ok());
    ASSERT_TRUE(dev->CopyToHost(hy.data(), out, 4 * n).ok());
    for (int i = 0; i < n; i += 97) ASSERT_FLOAT_EQ(hy[i], 3.f * i + 1.f) << i;
  }
  EXPECT_EQ((*session)->num_graph_captures(), 2);  // y1 replayed, y2 recaptured
  auto ms = (*session)->RunTimed({{*x, DType::f32, {n}}}, {{*y1, DType::f32, {n}}},
                                 *stream);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_EQ(ms->size(), 3u);
  // The timeline: launches in order on the GPU's clock, none overlapping
  // the previous one (one stream), each within its RunTimed figure.
  auto timeline = (*session)->RunTimeline({{*x, DType::f32, {n}}},
                                          {{*y1, DType::f32, {n}}}, *stream);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  ASSERT_EQ(timeline->size(), 3u);
  EXPECT_EQ((*timeline)[0].start_ms, 0.0);
  for (size_t i = 0; i < timeline->size(); ++i) {
    const LaunchTiming& t = (*timeline)[i];
    EXPECT_GT(t.ms, 0.f) << i;
    EXPECT_LE(t.ms, t.since_previous_ms + 1e-3f) << i;
    if (i > 0) {
      const LaunchTiming& p = (*timeline)[i - 1];
      EXPECT_GE(t.start_ms + 1e-3, p.start_ms + p.ms) << i;
    }
  }
  absl::Status bad = (*session)->Run({{*x, DType::f16, {n}}},
                                     {{*y1, DType::f32, {n}}}, *stream);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  (void)dev->DestroyStream(*stream);
  for (uint64_t p : {*x, *y1, *y2}) (void)dev->Free(p);
}

// Row-major D[m,n] = act(A[m,k] @ B + bias), f32 and bf16, B both layouts;
// A and D are the caller's tensors at `shift` bytes past an allocation.
void RunGemm(const std::shared_ptr<Device>& dev, DType dt, bool transb,
             Epilogue epi, int64_t shift = 0) {
  const int m = 5, n = 24, k = 40;
  auto bf16 = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  };
  auto unbf16 = [](uint16_t h) {
    uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  std::vector<float> A(m * k), B(k * n), bias(n);
  for (int i = 0; i < m * k; ++i) A[i] = float((i * 7) % 11 - 5) / 4;
  for (int i = 0; i < k * n; ++i) B[i] = float((i * 5) % 13 - 6) / 8;
  for (int i = 0; i < n; ++i) bias[i] = float(i % 5) - 2;
  auto encode = [&](const std::vector<float>& v) {
    std::string s;
    for (float f : v) {
      if (dt == DType::f32) s.append(reinterpret_cast<char*>(&f), 4);
      else { uint16_t h = bf16(f); s.append(reinterpret_cast<char*>(&h), 2); }
    }
    return s;
  };
  std::vector<float> Bstored(k * n);  // [k,n] or [n,k]
  for (int r = 0; r < k; ++r)
    for (int c = 0; c < n; ++c)
      Bstored[transb ? c * k + r : r * n + c] = B[r * n + c];
  const int64_t es = DTypeSize(dt);
  auto e = std::make_shared<Executable>();
  e->inputs = {{"a", dt, {m, k}}};
  e->outputs = {{"d", dt, {m, n}}};
  e->buffers = {{0, Buffer::Input, m * k * es, 0, 0, ""},
                {1, Buffer::Output, m * n * es, 0, 0, ""},
                {2, Buffer::Constant, k * n * es, 0, -1, encode(Bstored)},
                {3, Buffer::Constant, n * es, 0, -1, encode(bias)}};
  GemmSpec g;
  g.m = m, g.n = n, g.k = k;
  g.transb = transb;
  g.lda = k, g.ldb = transb ? k : n, g.ldc = n, g.ldd = n;
  g.dtype_a = g.dtype_b = g.dtype_c = g.dtype_d = dt;
  g.epilogue = epi;
  g.a = {0, 0}, g.b = {2, 0}, g.d = {1, 0};
  if (epi == Epilogue::bias || epi == Epilogue::relu_bias) g.bias = {3, 0};
  e->gemms = {g};
  Launch l; l.kind = Launch::Gemm; l.gemm = 0;
  e->launches = {l};
  auto session = Session::Load(dev, e);
  ASSERT_TRUE(session.ok()) << session.status();
  std::string ha = encode(A);
  auto da = dev->Alloc(ha.size() + shift), dd = dev->Alloc(m * n * es + shift);
  ASSERT_TRUE(da.ok() && dd.ok());
  const uint64_t a_at = *da + shift, d_at = *dd + shift;
  ASSERT_TRUE(dev->CopyToDevice(a_at, ha.data(), ha.size()).ok());
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok());
  absl::Status st = (*session)->Run({{a_at, dt, {m, k}}}, {{d_at, dt, {m, n}}}, *stream);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(dev->SynchronizeStream(*stream).ok());
  std::string hd(m * n * es, '\0');
  ASSERT_TRUE(dev->CopyToHost(hd.data(), d_at, hd.size()).ok());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int p = 0; p < k; ++p) {
        float a = A[i * k + p], b = B[p * n + j];
        if (dt == DType::bf16) a = unbf16(bf16(a)), b = unbf16(bf16(b));
        ref += double(a) * b;
      }
      if (epi == Epilogue::bias || epi == Epilogue::relu_bias) ref += bias[j];
      if (epi == Epilogue::relu || epi == Epilogue::relu_bias) ref = std::max(ref, 0.0);
      float got;
      if (dt == DType::f32) std::memcpy(&got, &hd[4 * (i * n + j)], 4);
      else { uint16_t h; std::memcpy(&h, &hd[2 * (i * n + j)], 2); got = unbf16(h); }
      ASSERT_NEAR(got, ref, dt == DType::f32 ? 1e-3 : 0.05 * (1 + std::fabs(ref)))
          << "(" << i << "," << j << ") transb=" << transb;
    }
  (void)dev->DestroyStream(*stream);
  (void)dev->Free(*da);
  (void)dev->Free(*dd);
}

// y[m,n] = 3 * (a[m,k] @ B) + 1 (f32): a cuBLASLt GEMM into the arena, a
// constant copied to the output, an axpy kernel. B is a constant.
constexpr int kGm = 8, kGn = 32, kGk = 48;
std::shared_ptr<Executable> GemmAxpyExecutable(const std::vector<float>& B) {
  auto e = std::make_shared<Executable>();
  const int mn = kGm * kGn;
  e->inputs = {{"a", DType::f32, {kGm, kGk}}};
  e->outputs = {{"y", DType::f32, {kGm, kGn}}};
  std::vector<float> ones(mn, 1.f);
  e->buffers = {{0, Buffer::Input, 4 * kGm * kGk, 0, 0, ""},
                {1, Buffer::Output, 4 * mn, 0, 0, ""},
                {2, Buffer::Constant, 4 * kGk * kGn, 0, -1,
                 std::string(reinterpret_cast<const char*>(B.data()), 4 * kGk * kGn)},
                {3, Buffer::Constant, 4 * mn, 0, -1,
                 std::string(reinterpret_cast<char*>(ones.data()), 4 * mn)},
                {4, Buffer::Arena, 4 * mn, 0, -1, ""}};
  e->arena_bytes = 4 * mn;
  KernelSpec k;
  k.name = "axpy";
  k.source = kAxpy;
  e->kernels = {k};
  GemmSpec g;
  g.m = kGm, g.n = kGn, g.k = kGk;
  g.lda = kGk, g.ldb = kGn, g.ldc = kGn, g.ldd = kGn;
  g.dtype_a = g.dtype_b = g.dtype_c = g.dtype_d = DType::f32;
  g.a = {0, 0}, g.b = {2, 0}, g.d = {4, 0};
  e->gemms = {g};
  Launch gl; gl.kind = Launch::Gemm; gl.gemm = 0;
  Launch c1; c1.kind = Launch::Copy; c1.src = {3, 0}; c1.dst = {1, 0}; c1.copy_bytes = 4 * mn;
  Launch ax = AxpyLaunch(/*y=*/1, /*x=*/4, mn);
  e->launches = {gl, c1, ax};
  return e;
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

// Graph runs against plain enqueue (bitwise: the same kernels) and against
// a float64 reference, over pointer sets that alternate, then a third set.
TEST(SessionGpuTest, GraphCacheReplaysUpdatesAndMatchesEnqueue) {
  REQUIRE_GPU(dev);
  std::vector<float> B = RandomFloats(kGk * kGn, 1);
  auto exe = GemmAxpyExecutable(B);
  SessionOptions with;
  with.max_cuda_graphs = 2;
  SessionOptions without;
  without.use_cuda_graphs = false;
  auto graphs = Session::Load(dev, exe, with);
  auto plain = Session::Load(dev, exe, without);
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  const size_t in_bytes = 4 * kGm * kGk, out_bytes = 4 * kGm * kGn;
  struct Set { uint64_t a, y; };
  std::vector<Set> sets(3);
  for (Set& s : sets) {
    auto a = dev->Alloc(in_bytes), y = dev->Alloc(out_bytes);
    ASSERT_TRUE(a.ok() && y.ok());
    s = {*a, *y};
  }
  auto ref_out = dev->Alloc(out_bytes);
  ASSERT_TRUE(ref_out.ok());
  // Set order: A B A B (replays), C (update of A's graph, the least recently
  // used), B (replay), A (update of C's).
  const int order[] = {0, 1, 0, 1, 2, 1, 0};
  uint32_t seed = 100;
  for (int which : order) {
    const Set& s = sets[which];
    std::vector<float> a = RandomFloats(kGm * kGk, ++seed);
    ASSERT_TRUE(dev->CopyToDevice(s.a, a.data(), in_bytes).ok());
    ASSERT_TRUE(dev->Memset(s.y, 0xff, out_bytes).ok());  // NaN if unwritten
    absl::Status st = (*graphs)->Run({{s.a, DType::f32, {kGm, kGk}}},
                                     {{s.y, DType::f32, {kGm, kGn}}}, *stream);
    ASSERT_TRUE(st.ok()) << st;
    st = (*plain)->Run({{s.a, DType::f32, {kGm, kGk}}},
                       {{*ref_out, DType::f32, {kGm, kGn}}}, *stream);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(dev->SynchronizeStream(*stream).ok());
    std::vector<float> got(kGm * kGn), want(kGm * kGn);
    ASSERT_TRUE(dev->CopyToHost(got.data(), s.y, out_bytes).ok());
    ASSERT_TRUE(dev->CopyToHost(want.data(), *ref_out, out_bytes).ok());
    for (int i = 0; i < kGm; ++i)
      for (int j = 0; j < kGn; ++j) {
        double ref = 0, scale = 0;  // scale: sum of |terms|, bounds fp32 rounding
        for (int p = 0; p < kGk; ++p) {
          ref += double(a[i * kGk + p]) * B[p * kGn + j];
          scale += std::fabs(double(a[i * kGk + p]) * B[p * kGn + j]);
        }
        ref = 3 * ref + 1;
        float g = got[i * kGn + j];
        ASSERT_FALSE(std::isnan(g)) << "(" << i << "," << j << ") set " << which;
        ASSERT_EQ(g, want[i * kGn + j]) << "graph != enqueue at (" << i << "," << j
                                        << ") set " << which;
        // CUBLAS_COMPUTE_32F (no TF32): fp32 rounding of k products and sums.
        ASSERT_NEAR(g, ref, 1e-5 * (1 + 3 * scale)) << "(" << i << "," << j << ")";
      }
  }
  Session::GraphStats st = (*graphs)->graph_stats();
  EXPECT_EQ(st.disabled_reason, "");
  EXPECT_EQ(st.captures, 4);  // A, B, C, A again
  EXPECT_EQ(st.replays, 3);   // A, B, B
  EXPECT_EQ(st.launches, 7);
  EXPECT_EQ(st.cached, 2);
  if (dev->driver().cuGraphExecUpdate) {
    EXPECT_EQ(st.updates, 2);
    EXPECT_EQ(st.instantiations, 2);
  } else {
    EXPECT_EQ(st.updates, 0);
    EXPECT_EQ(st.instantiations, 4);
  }
  EXPECT_EQ(st.private_stream_runs, 0);
  EXPECT_EQ((*plain)->graph_stats().launches, 0);
  (void)dev->DestroyStream(*stream);
  for (const Set& s : sets) (void)dev->Free(s.a), (void)dev->Free(s.y);
  (void)dev->Free(*ref_out);
}

// Staged input and output (SessionOptions::staged_inputs and
// staged_output_bytes): the caller passes a different input and output
// buffer on every call, yet one graph is captured and replayed, and every
// result equals the enqueued session's. A bad staged input fails Load.
TEST(SessionGpuTest, StagedInputsAndOutputsKeepOneGraph) {
  REQUIRE_GPU(dev);
  std::vector<float> B = RandomFloats(kGk * kGn, 7);
  auto exe = GemmAxpyExecutable(B);
  SessionOptions staged;
  staged.staged_inputs = {0};
  staged.staged_output_bytes = 4 * kGm * kGn;
  SessionOptions without;
  without.use_cuda_graphs = false;
  auto graphs = Session::Load(dev, exe, staged);
  auto plain = Session::Load(dev, exe, without);
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  const size_t in_bytes = 4 * kGm * kGk, out_bytes = 4 * kGm * kGn;
  auto ref_out = dev->Alloc(out_bytes);
  ASSERT_TRUE(ref_out.ok());
  std::vector<uint64_t> held;
  for (int call = 0; call < 6; ++call) {
    // Fresh buffers every call (the old ones stay allocated, so the
    // addresses differ).
    auto a = dev->Alloc(in_bytes), y = dev->Alloc(out_bytes);
    ASSERT_TRUE(a.ok() && y.ok());
    held.push_back(*a), held.push_back(*y);
    std::vector<float> av = RandomFloats(kGm * kGk, 200 + call);
    ASSERT_TRUE(dev->CopyToDevice(*a, av.data(), in_bytes).ok());
    ASSERT_TRUE(dev->Memset(*y, 0xff, out_bytes).ok());  // NaN if unwritten
    absl::Status st = (*graphs)->Run({{*a, DType::f32, {kGm, kGk}}},
                                     {{*y, DType::f32, {kGm, kGn}}}, *stream);
    ASSERT_TRUE(st.ok()) << st;
    st = (*plain)->Run({{*a, DType::f32, {kGm, kGk}}},
                       {{*ref_out, DType::f32, {kGm, kGn}}}, *stream);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(dev->SynchronizeStream(*stream).ok());
    std::vector<float> got(kGm * kGn), want(kGm * kGn);
    ASSERT_TRUE(dev->CopyToHost(got.data(), *y, out_bytes).ok());
    ASSERT_TRUE(dev->CopyToHost(want.data(), *ref_out, out_bytes).ok());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << i << " call " << call;
      ASSERT_EQ(got[i], want[i]) << "staged graph != enqueue at " << i << " call " << call;
    }
  }
  Session::GraphStats st = (*graphs)->graph_stats();
  EXPECT_EQ(st.disabled_reason, "");
  EXPECT_EQ(st.captures, 1);
  EXPECT_EQ(st.replays, 5);
  for (uint64_t p : held) (void)dev->Free(p);
  (void)dev->Free(*ref_out);
  (void)dev->DestroyStream(*stream);

  for (std::vector<int> bad : {std::vector<int>{1}, std::vector<int>{0, 0}, std::vector<int>{-1}}) {
    SessionOptions o;
    o.staged_inputs = bad;
    auto s = Session::Load(dev, exe, o);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
    EXPECT_NE(std::string(s.status().message()).find("staged_inputs: input"), std::string::npos)
        << s.status();
  }
}

// On the legacy default stream (PyTorch's default) graphs run on the
// session's private stream, joined to the caller's: a second session that
// reads the first one's output on stream 0 sees it complete.
TEST(SessionGpuTest, GraphOnLegacyDefaultStreamIsOrderedWithCaller) {
  REQUIRE_GPU(dev);
  const int n = 1000;
  auto first = Session::Load(dev, AxpyExecutable(false));
  auto second = Session::Load(dev, AxpyExecutable(false));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  auto x = dev->Alloc(4 * n), y = dev->Alloc(4 * n), z = dev->Alloc(4 * n);
  ASSERT_TRUE(x.ok() && y.ok() && z.ok());
  for (int call = 0; call < 3; ++call) {
    std::vector<float> hx = RandomFloats(n, 7 + call);
    ASSERT_TRUE(dev->CopyToDevice(*x, hx.data(), 4 * n).ok());
    ASSERT_TRUE(dev->Memset(*z, 0xff, 4 * n).ok());
    absl::Status st = (*first)->Run({{*x, DType::f32, {n}}}, {{*y, DType::f32, {n}}},
                                    /*stream=*/nullptr);
    ASSERT_TRUE(st.ok()) << st;
    st = (*second)->Run({{*y, DType::f32, {n}}}, {{*z, DType::f32, {n}}}, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(dev->Synchronize().ok());
    std::vector<float> hz(n);
    ASSERT_TRUE(dev->CopyToHost(hz.data(), *z, 4 * n).ok());
    for (int i = 0; i < n; ++i) {
      double want = 3.0 * (3.0 * hx[i] + 1.0) + 1.0;
      ASSERT_NEAR(hz[i], want, 1e-5 * (1 + std::fabs(want))) << i << " call " << call;
    }
  }
  for (auto* s : {&*first, &*second}) {
    Session::GraphStats st = (*s)->graph_stats();
    EXPECT_EQ(st.disabled_reason, "");
    EXPECT_EQ(st.captures, 1);
    EXPECT_EQ(st.replays, 2);
    EXPECT_EQ(st.private_stream_runs, 3);
  }
  for (uint64_t p : {*x, *y, *z}) (void)dev->Free(p);
}

TEST(SessionGpuTest, GemmF32RowMajor) {
  REQUIRE_GPU(dev);
  RunGemm(dev, DType::f32, false, Epilogue::none);
  RunGemm(dev, DType::f32, true, Epilogue::bias);
}

// cuBLASLt's heuristics assume 256-byte aligned operands unless told
// otherwise: a caller's tensors aligned to 16..128 bytes get a plan of
// their own (Session::Impl::GemmPlanFor) and the right product.
TEST(SessionGpuTest, GemmOperandsAlignedLessThan256Bytes) {
  REQUIRE_GPU(dev);
  for (int64_t shift : {16, 48, 128}) {
    RunGemm(dev, DType::bf16, true, Epilogue::bias, shift);
    RunGemm(dev, DType::f32, false, Epilogue::none, shift);
  }
}

TEST(SessionGpuTest, GemmBf16BiasRelu) {
  REQUIRE_GPU(dev);
  RunGemm(dev, DType::bf16, true, Epilogue::relu_bias);
  RunGemm(dev, DType::bf16, false, Epilogue::relu);
}

}  // namespace
}  // namespace llmc::rt
