//===- RoPETableTest.cpp - llm.rope with cos/sin tables ---------------------===//
//
// The table form of llm.rope (HF apply_rotary_pos_emb: x * cos +
// rotate_half(x) * sin):
//  - reference executor: the op equals the same computation written with
//    llm.mul/add/neg/slice/concat/reshape/broadcast (fp32, fresh random x and
//    tables, both pairings, [S, D], [1, S, D] and [B, S, D] tables);
//  - lowering (no GPU): one llmc_rope_table launch, the table batch stride,
//    tables broadcast over the batch read without a copy;
//  - GPU (skips without one): the CUDA executable against the reference
//    executor, for argument, broadcast, transposed and computed tables.
//
//===----------------------------------------------------------------------===//

#include "../MlirContext.h"
#include "../kernels/CpuReference.h"
#include "ReferenceTestUtils.h"

#include "llmc/Compiler/LowerToExecutable.h"
#include "llmc/runtime/Session.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>

namespace {

namespace rt = llmc::rt;
using llmc::reference::HostTensor;
using llmc::reference::testing::ReferenceTest;
using llmc::ref::FromBf16;
using llmc::ref::ToBf16;
using llmc::test::SharedContext;

std::string Ty(std::vector<int64_t> shape, const std::string &elem) {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + elem + ">";
}

struct Case {
  int64_t b, s, h, d;
  std::string xt = "f32", tt = "f32";
  int64_t tableBatch = 1; // 0: rank-2 [S, D] tables
  bool interleaved = false;
};

std::vector<int64_t> XShape(const Case &c) { return {c.b, c.s, c.h, c.d}; }
std::vector<int64_t> TableShape(const Case &c) {
  if (c.tableBatch == 0)
    return {c.s, c.d};
  return {c.tableBatch, c.s, c.d};
}
const char *Mode(const Case &c) { return c.interleaved ? "interleaved" : "half_split"; }

/// @rope(x, cos, sin): the table form of llm.rope.
std::string RopeMlir(const Case &c) {
  std::string x = Ty(XShape(c), c.xt), t = Ty(TableShape(c), c.tt);
  return "func.func @rope(%x: " + x + ", %c: " + t + ", %s: " + t + ") -> " + x +
         " {\n  %y = llm.rope %x cos(%c : " + t + ") sin(%s : " + t + ") " + Mode(c) +
         " : " + x + "\n  return %y : " + x + "\n}\n";
}

/// @hf(x, cos, sin): x * cos + rotate(x) * sin with elementary ops (f32).
std::string DecomposedMlir(const Case &c) {
  std::string x = Ty(XShape(c), "f32"), t = Ty(TableShape(c), "f32");
  std::string t4 = Ty({c.tableBatch == 0 ? 1 : c.tableBatch, c.s, 1, c.d}, "f32");
  std::string m = "func.func @hf(%x: " + x + ", %c: " + t + ", %s: " + t + ") -> " + x + " {\n";
  m += "  %c4 = llm.reshape %c : " + t + " to " + t4 + "\n";
  m += "  %s4 = llm.reshape %s : " + t + " to " + t4 + "\n";
  m += "  %cb = llm.broadcast %c4 : " + t4 + " to " + x + "\n";
  m += "  %sb = llm.broadcast %s4 : " + t4 + " to " + x + "\n";
  const int64_t half = c.d / 2;
  if (!c.interleaved) {
    // rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])
    std::string xh = Ty({c.b, c.s, c.h, half}, "f32");
    m += "  %x1 = llm.slice %x [0, 0, 0, 0] to [-1, -1, -1, " + std::to_string(half) +
         "] step [1, 1, 1, 1] : " + x + "\n";
    m += "  %x2 = llm.slice %x [0, 0, 0, " + std::to_string(half) + "] to [-1, -1, -1, " +
         std::to_string(c.d) + "] step [1, 1, 1, 1] : " + x + "\n";
    m += "  %n2 = llm.neg %x2 : " + xh + "\n";
    m += "  %rot = llm.concat %n2, %x1 dim = 3 : " + xh + ", " + xh + "\n";
  } else {
    // Pairs (2j, 2j+1): rot[2j] = -x[2j+1], rot[2j+1] = x[2j].
    std::string x5 = Ty({c.b, c.s, c.h, half, 2}, "f32");
    std::string x5h = Ty({c.b, c.s, c.h, half, 1}, "f32");
    m += "  %x5 = llm.reshape %x : " + x + " to " + x5 + "\n";
    m += "  %xe = llm.slice %x5 [0, 0, 0, 0, 0] to [-1, -1, -1, -1, 1] step [1, 1, 1, 1, 1] : " +
         x5 + "\n";
    m += "  %xo = llm.slice %x5 [0, 0, 0, 0, 1] to [-1, -1, -1, -1, 2] step [1, 1, 1, 1, 1] : " +
         x5 + "\n";
    m += "  %no = llm.neg %xo : " + x5h + "\n";
    m += "  %r5 = llm.concat %no, %xe dim = 4 : " + x5h + ", " + x5h + "\n";
    m += "  %rot = llm.reshape %r5 : " + x5 + " to " + x + "\n";
  }
  m += "  %a = llm.mul %x, %cb : " + x + "\n";
  m += "  %b = llm.mul %rot, %sb : " + x + "\n";
  m += "  %y = llm.add %a, %b : " + x + "\n";
  m += "  return %y : " + x + "\n}\n";
  return m;
}

/// x ~ N(0, 1); cos/sin of angles ~ N(0, 2^2), each entry its own angle (the
/// duplicated halves of real HF tables would hide a wrong table index).
std::vector<HostTensor> Inputs(mlir::func::FuncOp fn, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto types = fn.getArgumentTypes();
  auto xt = mlir::cast<mlir::RankedTensorType>(types[0]);
  auto tt = mlir::cast<mlir::RankedTensorType>(types[1]);
  std::vector<HostTensor> in;
  in.push_back(llmc::reference::RandomTensor(
      xt.getElementType(), {xt.getShape().begin(), xt.getShape().end()}, rng, 1.0));
  HostTensor ang = llmc::reference::RandomTensor(
      mlir::Float32Type::get(fn.getContext()), {tt.getShape().begin(), tt.getShape().end()},
      rng, 2.0);
  HostTensor c = ang, s = ang;
  c.elementType = s.elementType = tt.getElementType();
  for (size_t i = 0; i < ang.data.size(); ++i) {
    c.data[i] = llmc::reference::RoundToType(std::cos(ang.data[i]), c.elementType);
    s.data[i] = llmc::reference::RoundToType(std::sin(ang.data[i]), s.elementType);
  }
  in.push_back(c);
  in.push_back(s);
  return in;
}

class RoPETableReferenceTest : public ReferenceTest {};

TEST_F(RoPETableReferenceTest, MatchesDecomposedHfGraph) {
  const Case cases[] = {
      {2, 7, 3, 64, "f32", "f32", 1, false}, {2, 7, 3, 64, "f32", "f32", 0, true},
      {3, 5, 2, 128, "f32", "f32", 3, false}, {3, 5, 2, 16, "f32", "f32", 3, true},
      {1, 9, 4, 32, "f32", "f32", 0, false}};
  uint64_t seed = 7;
  for (const Case &c : cases) {
    std::string what = RopeMlir(c);
    mlir::func::FuncOp rope = parse(RopeMlir(c) + DecomposedMlir(c));
    ASSERT_TRUE(rope) << what;
    auto hf = module->lookupSymbol<mlir::func::FuncOp>("hf");
    ASSERT_TRUE(hf);
    std::vector<HostTensor> in = Inputs(rope, seed++);
    auto got = llmc::reference::Evaluate(rope, in);
    auto want = llmc::reference::Evaluate(hf, in);
    ASSERT_TRUE(got.ok()) << got.status() << "\n" << what;
    ASSERT_TRUE(want.ok()) << want.status() << "\n" << DecomposedMlir(c);
    // The op rounds once; the decomposed graph rounds each of mul, mul and
    // add to fp32: a few fp32 ulps apart.
    double err = llmc::reference::RelativeError((*got)[0], (*want)[0]);
    EXPECT_LT(err, 1e-6) << what;
    // Not the identity: the rotation moved x.
    EXPECT_GT(llmc::reference::RelativeError((*got)[0], in[0]), 0.1) << what;
  }
}

TEST_F(RoPETableReferenceTest, RejectsTablesOfTheWrongShapeAtRunTime) {
  // The verifier accepts dynamic dims; the executor checks the bound shapes.
  std::string src =
      "func.func @f(%x: tensor<1x4x2x8xf32>, %c: tensor<?x8xf32>, %s: tensor<?x8xf32>) -> "
      "tensor<1x4x2x8xf32> {\n  %y = llm.rope %x cos(%c : tensor<?x8xf32>) sin(%s : "
      "tensor<?x8xf32>) half_split : tensor<1x4x2x8xf32>\n  return %y : tensor<1x4x2x8xf32>\n}\n";
  std::mt19937_64 rng(3);
  mlir::Type f32 = mlir::Float32Type::get(&ctx);
  std::vector<HostTensor> in = {llmc::reference::RandomTensor(f32, {1, 4, 2, 8}, rng),
                                llmc::reference::RandomTensor(f32, {5, 8}, rng),
                                llmc::reference::RandomTensor(f32, {5, 8}, rng)};
  absl::Status st = runStatus(src, in);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("cos and sin must both be [4, 8] or [1 or 1, 4, 8], found [5, 8]"),
            std::string::npos)
      << st;
}

//===----------------------------------------------------------------------===//
// Lowering
//===----------------------------------------------------------------------===//

struct Lowered {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp fn;
  absl::StatusOr<rt::Executable> exe = absl::UnknownError("not lowered");
};

void Lower(const std::string &src, Lowered &l) {
  l.module =
      mlir::parseSourceString<mlir::ModuleOp>(src, mlir::ParserConfig(&SharedContext()));
  ASSERT_TRUE(l.module) << src;
  l.fn = *l.module->getOps<mlir::func::FuncOp>().begin();
  l.exe = llmc::LowerToExecutable(l.fn);
  ASSERT_TRUE(l.exe.ok()) << l.exe.status() << "\n" << src;
}

const rt::Launch *RopeLaunch(const rt::Executable &exe) {
  for (const rt::Launch &l : exe.launches)
    if (l.label == "llm.rope")
      return &l;
  return nullptr;
}

TEST(RoPETableLoweringTest, OneTableKernelWithTheTableBatchStride) {
  for (int64_t tb : {0, 1, 2}) {
    Case c{2, 7, 4, 64, "bf16", "f32", tb, tb == 2};
    Lowered l;
    ASSERT_NO_FATAL_FAILURE(Lower(RopeMlir(c), l));
    const rt::Executable &exe = *l.exe;
    ASSERT_EQ(exe.launches.size(), 1u) << RopeMlir(c);
    const rt::Launch *launch = RopeLaunch(exe);
    ASSERT_NE(launch, nullptr);
    ASSERT_EQ(exe.kernels.size(), 1u);
    EXPECT_EQ(exe.kernels[0].name, std::string("llmc_rope_table_bf16_tabf32_h4_d64_") +
                                       (tb == 2 ? "interleaved" : "half"));
    // (out, x, cos, sin, batch, seq, table_batch_stride)
    ASSERT_EQ(launch->args.size(), 7u);
    EXPECT_EQ(exe.buffers[launch->args[2].buffer].kind, rt::Buffer::Input);
    EXPECT_EQ(exe.buffers[launch->args[3].buffer].kind, rt::Buffer::Input);
    EXPECT_EQ(launch->args[4].i, 2);
    EXPECT_EQ(launch->args[5].i, 7);
    EXPECT_EQ(launch->args[6].i, tb == 2 ? 7 * 64 : 0) << "table batch " << tb;
    EXPECT_EQ(launch->grid[0], 14u);  // one block per token
  }
}

TEST(RoPETableLoweringTest, BroadcastTablesAreReadWithoutACopy) {
  std::string x = "tensor<3x5x2x32xf32>", t = "tensor<5x32xf32>", tb = "tensor<3x5x32xf32>";
  std::string src = "func.func @f(%x: " + x + ", %c: " + t + ", %s: " + t + ") -> " + x +
                    " {\n  %cb = llm.broadcast %c : " + t + " to " + tb +
                    "\n  %sb = llm.broadcast %s : " + t + " to " + tb +
                    "\n  %y = llm.rope %x cos(%cb : " + tb + ") sin(%sb : " + tb +
                    ") half_split : " + x + "\n  return %y : " + x + "\n}\n";
  Lowered l;
  ASSERT_NO_FATAL_FAILURE(Lower(src, l));
  ASSERT_EQ(l.exe->launches.size(), 1u);
  const rt::Launch *launch = RopeLaunch(*l.exe);
  ASSERT_NE(launch, nullptr);
  EXPECT_EQ(l.exe->buffers[launch->args[2].buffer].kind, rt::Buffer::Input);
  EXPECT_EQ(l.exe->buffers[launch->args[2].buffer].io_index, 1);
  EXPECT_EQ(l.exe->buffers[launch->args[3].buffer].io_index, 2);
  EXPECT_EQ(launch->args[6].i, 0);
}

//===----------------------------------------------------------------------===//
// GPU: the CUDA executable against the reference executor
//===----------------------------------------------------------------------===//

/// Packs a host tensor as its device dtype (f32 or bf16 here).
std::string Pack(const HostTensor &t) {
  std::string out;
  for (double v : t.data) {
    if (t.elementType.isBF16()) {
      uint16_t h = ToBf16(static_cast<float>(v));
      out.append(reinterpret_cast<const char *>(&h), 2);
    } else {
      float f = static_cast<float>(v);
      out.append(reinterpret_cast<const char *>(&f), 4);
    }
  }
  return out;
}

/// Runs `l` on the GPU with `inputs`, returns output 0 as host doubles.
absl::StatusOr<HostTensor> RunOnGpu(std::shared_ptr<rt::Device> dev, Lowered &l,
                                    const std::vector<HostTensor> &inputs,
                                    const HostTensor &like) {
  auto shared = std::make_shared<rt::Executable>(std::move(*l.exe));
  auto session = rt::Session::Load(dev, shared);
  if (!session.ok())
    return session.status();
  std::vector<rt::DeviceTensor> din, dout;
  std::vector<uint64_t> ptrs;
  absl::Status st;
  for (size_t i = 0; i < inputs.size() && st.ok(); ++i) {
    std::string bytes = Pack(inputs[i]);
    auto p = dev->Alloc(bytes.size());
    if (!p.ok())
      return p.status();
    ptrs.push_back(*p);
    st = dev->CopyToDevice(*p, bytes.data(), bytes.size());
    din.push_back({*p, shared->inputs[i].dtype, shared->inputs[i].shape});
  }
  const rt::TensorSig &o = shared->outputs[0];
  size_t n = static_cast<size_t>(o.NumElements());
  size_t bytes = n * rt::DTypeSize(o.dtype);
  std::vector<char> host(bytes);
  if (st.ok()) {
    auto p = dev->Alloc(bytes);
    if (!p.ok())
      return p.status();
    ptrs.push_back(*p);
    dout.push_back({*p, o.dtype, o.shape});
    st = dev->Memset(*p, 0xff, bytes); // NaN: an unwritten element fails
  }
  if (st.ok())
    st = (*session)->Run(din, dout, nullptr);
  if (st.ok())
    st = dev->Synchronize();
  if (st.ok())
    st = dev->CopyToHost(host.data(), dout[0].dptr, bytes);
  for (uint64_t p : ptrs)
    (void)dev->Free(p);
  if (!st.ok())
    return st;
  HostTensor got = like;
  for (size_t i = 0; i < n; ++i) {
    if (o.dtype == rt::DType::bf16) {
      uint16_t h;
      std::memcpy(&h, host.data() + 2 * i, 2);
      got.data[i] = FromBf16(h);
    } else {
      float f;
      std::memcpy(&f, host.data() + 4 * i, 4);
      got.data[i] = f;
    }
  }
  return got;
}

TEST(RoPETableGpuTest, MatchesReferenceExecutor) {
  struct GpuCase {
    const char *what;
    std::string src;
    Lowered l;
    std::vector<HostTensor> in, want;
  };
  std::vector<std::unique_ptr<GpuCase>> cases;
  auto add = [&](const char *what, std::string src) {
    cases.push_back(std::make_unique<GpuCase>());
    cases.back()->what = what;
    cases.back()->src = std::move(src);
  };
  for (const Case &c :
       {Case{2, 7, 3, 64, "f32", "f32", 0, false}, Case{2, 7, 5, 128, "bf16", "f32", 2, true},
        Case{1, 129, 8, 128, "bf16", "bf16", 1, false}, Case{3, 7, 4, 64, "f32", "bf16", 1, true}})
    add("argument tables", RopeMlir(c));
  // Tables broadcast over the batch, transposed ([D, S] stored), and computed
  // in the graph (a cast): views and intermediates as table operands.
  add("broadcast tables",
      "func.func @f(%x: tensor<3x7x4x64xbf16>, %c: tensor<7x64xf32>, %s: tensor<7x64xf32>) "
      "-> tensor<3x7x4x64xbf16> {\n"
      "  %cb = llm.broadcast %c : tensor<7x64xf32> to tensor<3x7x64xf32>\n"
      "  %sb = llm.broadcast %s : tensor<7x64xf32> to tensor<3x7x64xf32>\n"
      "  %y = llm.rope %x cos(%cb : tensor<3x7x64xf32>) sin(%sb : tensor<3x7x64xf32>) "
      "half_split : tensor<3x7x4x64xbf16>\n  return %y : tensor<3x7x4x64xbf16>\n}\n");
  add("transposed and computed tables",
      "func.func @f(%x: tensor<2x7x4x64xf32>, %c: tensor<64x7xbf16>, %s: tensor<64x7xbf16>) "
      "-> tensor<2x7x4x64xf32> {\n"
      "  %ct = llm.transpose %c [1, 0] : tensor<64x7xbf16>\n"
      "  %st = llm.transpose %s [1, 0] : tensor<64x7xbf16>\n"
      "  %cf = llm.cast %ct : tensor<7x64xbf16> to tensor<7x64xf32>\n"
      "  %sf = llm.cast %st : tensor<7x64xbf16> to tensor<7x64xf32>\n"
      "  %y = llm.rope %x cos(%cf : tensor<7x64xf32>) sin(%sf : tensor<7x64xf32>) "
      "interleaved : tensor<2x7x4x64xf32>\n  return %y : tensor<2x7x4x64xf32>\n}\n");
  // Lowering and the reference run without a GPU too.
  uint64_t seed = 11;
  for (auto &gc : cases) {
    ASSERT_NO_FATAL_FAILURE(Lower(gc->src, gc->l));
    gc->in = Inputs(gc->l.fn, seed++);
    auto want = llmc::reference::Evaluate(gc->l.fn, gc->in);
    ASSERT_TRUE(want.ok()) << want.status() << "\n" << gc->src;
    gc->want = std::move(*want);
  }
  auto dev = rt::Device::Open(0);
  if (!dev.ok())
    GTEST_SKIP() << "needs a GPU: " << dev.status();
  for (auto &gc : cases) {
    const HostTensor &want = gc->want[0];
    auto got = RunOnGpu(*dev, gc->l, gc->in, want);
    ASSERT_TRUE(got.ok()) << got.status() << "\n" << gc->src;
    ASSERT_TRUE(llmc::reference::SameNonFinitePositions(*got, want)) << gc->what << "\n" << gc->src;
    // fp32 math rounded once to the output type: fp32 ~1e-7, bf16 within
    // its unit roundoff 2^-9.
    double err = llmc::reference::RelativeError(*got, want);
    EXPECT_LT(err, want.elementType.isF32() ? 1e-5 : 1e-2) << gc->what << "\n" << gc->src;
  }
}

} // namespace
