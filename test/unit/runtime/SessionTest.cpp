// Session tests. The signature checks run everywhere; the device tests run
// only where libcuda and a GPU are present (skipped otherwise).
#include "llmc/runtime/Session.h"

#include <cmath>
#include <cstring>

#include "gtest/gtest.h"

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
    k.arch = "sm_75";
    k.cubin = "not a cubin for this gpu";
  }
  e->kernels = {k};
  Launch c1; c1.kind = Launch::Copy; c1.src = {2, 0}; c1.dst = {3, 0}; c1.copy_bytes = 4 * n;
  Launch ax; ax.kind = Launch::Kernel; ax.kernel = 0;
  ax.grid[0] = (n + 127) / 128; ax.block[0] = 128;
  Arg y; y.buffer = 3;
  Arg x; x.buffer = 0;
  Arg a; a.kind = Arg::F32; a.f = 3.f;
  Arg nn; nn.kind = Arg::I32; nn.i = n;
  ax.args = {y, x, a, nn};
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
  absl::Status bad = (*session)->Run({{*x, DType::f16, {n}}},
                                     {{*y1, DType::f32, {n}}}, *stream);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  (void)dev->DestroyStream(*stream);
  for (uint64_t p : {*x, *y1, *y2}) (void)dev->Free(p);
}

// Row-major D[m,n] = act(A[m,k] @ B + bias), f32 and bf16, B both layouts.
void RunGemm(const std::shared_ptr<Device>& dev, DType dt, bool transb,
             Epilogue epi) {
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
  auto da = dev->Alloc(ha.size()), dd = dev->Alloc(m * n * es);
  ASSERT_TRUE(da.ok() && dd.ok());
  ASSERT_TRUE(dev->CopyToDevice(*da, ha.data(), ha.size()).ok());
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok());
  absl::Status st = (*session)->Run({{*da, dt, {m, k}}}, {{*dd, dt, {m, n}}}, *stream);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(dev->SynchronizeStream(*stream).ok());
  std::string hd(m * n * es, '\0');
  ASSERT_TRUE(dev->CopyToHost(hd.data(), *dd, hd.size()).ok());
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

TEST(SessionGpuTest, GemmF32RowMajor) {
  REQUIRE_GPU(dev);
  RunGemm(dev, DType::f32, false, Epilogue::none);
  RunGemm(dev, DType::f32, true, Epilogue::bias);
}

TEST(SessionGpuTest, GemmBf16BiasRelu) {
  REQUIRE_GPU(dev);
  RunGemm(dev, DType::bf16, true, Epilogue::relu_bias);
  RunGemm(dev, DType::bf16, false, Epilogue::relu);
}

}  // namespace
}  // namespace llmc::rt
