//===- RowKernelEmuTest.cpp - row kernels from the lowering, run on the CPU -===//
//
// End to end for the fused row kernels (llmc-form-kernels' row_reduction,
// cuda::EmitRowFused): llm IR -> llmc::LowerToExecutable -> its one
// `llmc_rowfused_*` launch -> the kernel run on the CPU emulator
// (test/unit/kernels/emu) with its pointer arguments bound, from the
// launch's own buffer references, to host copies of the function's inputs
// and outputs -> every output compared with the reference executor
// (llmc::reference::Evaluate) on the same fresh random inputs. Relative L2
// error per output: f32 <= 1e-5, bf16 <= 1e-2; a NaN in the kernel's output
// fails unless the reference has one at the same place.
//
// Each kernel runs three times: as launched, with every host buffer one
// element off 16-byte alignment (the kernel's run-time scalar path), and
// with grid.x cut to 2 (its grid-stride loop over rows). A row kernel with
// column sums (a norm's weight gradient) is followed by the column
// reduction of its blocks' partial sums, run after it on the emulator too;
// its grid is not cut (the partials' shape is its grid), so those tests
// take more rows than the grid has blocks.
//
// Two tests run an elementwise kernel the same way: the kernel that finishes
// a GEMM written to f32 scratch (a scaled fp8 GEMM with a bias, a bf16 GEMM
// with an f32 bias), whose GEMM (cuBLASLt) the emulator cannot run, so its
// f32 accumulator is written into the scratch from the host.
//
//===----------------------------------------------------------------------===//

#include "../kernels/CpuReference.h"
#include "../kernels/EmuSupport.h"
#include "ReferenceTestUtils.h"

#include "llmc/runtime/Executable.h"
#include "llmc/runtime/ExecutableDump.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>

using namespace llmc::reference;
using namespace llmc::reference::testing;
namespace rt = llmc::rt;

namespace {

void ReplaceAll(std::string &s, const std::string &from, const std::string &to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
}

// The RMSNorm backward as AOTAutograd decomposes it (3x5x64), from the lit
// test of row kernels.
std::string RmsNormBackward() {
  return functionFromFile("test/Target/CUDA/row-kernels.mlir", "rms_norm_backward");
}

/// RmsNormBackward() on [2, 3, 2048] (6 rows of 2048: the 16-byte vector
/// path), also returning the row sum %s (a per-row output).
std::string RmsNormBackwardWide() {
  std::string s = RmsNormBackward();
  ReplaceAll(s, "3x5x64", "2x3x2048");
  ReplaceAll(s, "3x5x1", "2x3x1");
  ReplaceAll(s, "tensor<64xbf16>", "tensor<2048xbf16>");
  ReplaceAll(s, "dense<6.400000e+01>", "dense<2.048000e+03>");
  ReplaceAll(s, "-> tensor<2x3x2048xbf16> {", "-> (tensor<2x3x2048xbf16>, tensor<2x3x1xf32>) {");
  ReplaceAll(s, "return %out : tensor<2x3x2048xbf16>",
             "return %out, %s : tensor<2x3x2048xbf16>, tensor<2x3x1xf32>");
  return s;
}

// The RMSNorm backward with its weight gradient sum(g * xhat, dims=[0, 1])
// (from the lit test), on [2, 550, 256]: 1100 rows, more than the 1056
// blocks of the launch, so some blocks sum two rows into their partials.
std::string RmsNormBackwardWeightGrad() {
  std::string s = functionFromFile("test/Target/CUDA/row-kernels.mlir", "rms_norm_backward_weight_grad");
  ReplaceAll(s, "2x256x2048", "2x550x256");
  ReplaceAll(s, "2x256x1", "2x550x1");
  ReplaceAll(s, "1x1x2048", "1x1x256");
  ReplaceAll(s, "tensor<2048xbf16>", "tensor<256xbf16>");
  ReplaceAll(s, "dense<2.048000e+03>", "dense<2.560000e+02>");
  return s;
}

// Hugging Face's LlamaRMSNorm forward written out, saving rstd for the
// backward as a training forward does (from the lit test).
std::string HfRmsNormTrain() {
  return functionFromFile("test/Target/CUDA/row-kernels.mlir", "rms_norm_forward_saving_rstd");
}

/// softmax(x) over the last dim of f32 [6, n], written out: two reductions,
/// the sum reading the max.
std::string Softmax(int64_t n) {
  std::string s = R"(
func.func @softmax(%x: tensor<6xNxf32>) -> tensor<6xNxf32> {
  %m = llm.reduce_max %x [1] keepdim : tensor<6xNxf32>
  %mb = llm.broadcast %m : tensor<6x1xf32> to tensor<6xNxf32>
  %d = llm.sub %x, %mb : tensor<6xNxf32>
  %e = llm.exp %d : tensor<6xNxf32>
  %s = llm.reduce_sum %e [1] keepdim : tensor<6xNxf32>
  %sb = llm.broadcast %s : tensor<6x1xf32> to tensor<6xNxf32>
  %y = llm.div %e, %sb : tensor<6xNxf32>
  return %y : tensor<6xNxf32>
}
)";
  ReplaceAll(s, "6xN", "6x" + std::to_string(n));
  return s;
}

/// One kernel parameter as the source declares it.
struct Param {
  std::string type; // "const bf16*", "long long", ...
  bool pointer = false;
};

/// The parameters of the `extern "C" __global__` entry `name` in `source`.
std::vector<Param> KernelParams(const std::string &source, const std::string &name) {
  size_t at = source.find("extern \"C\" __global__");
  if (at == std::string::npos)
    return {};
  at = source.find(" " + name + "(", at);
  if (at == std::string::npos)
    return {};
  const size_t open = at + name.size() + 2, close = source.find(')', open);
  std::vector<Param> params;
  std::stringstream list(source.substr(open, close - open));
  for (std::string p; std::getline(list, p, ',');) {
    ReplaceAll(p, "__restrict__", " ");
    ReplaceAll(p, "*", " * ");
    std::vector<std::string> words;
    std::stringstream ws(p);
    for (std::string w; ws >> w;)
      words.push_back(w);
    if (words.size() < 2)
      return {};
    words.pop_back(); // the parameter's name
    Param q;
    for (const std::string &w : words) {
      q.type += (q.type.empty() || w == "*" ? "" : " ") + w;
      q.pointer |= w == "*";
    }
    params.push_back(q);
  }
  return params;
}

/// `emu_entry(grid, block, smem, void* const* ptrs, const long long* ints)`:
/// KERNEL(...) with parameter i from ptrs[i] (pointers, and by-value structs,
/// rt::Arg::Bytes in `args`, read through ptrs[i]) or ints[i].
std::string Stub(const std::vector<Param> &params, const std::vector<rt::Arg> &args) {
  std::string call;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string slot = std::to_string(i);
    call += i ? ", " : "";
    call += i < args.size() && args[i].kind == rt::Arg::Bytes
                ? "*(const " + params[i].type + "*)ptrs[" + slot + "]"
                : "(" + params[i].type + ")" + (params[i].pointer ? "ptrs[" : "ints[") + slot + "]";
  }
  return "\nextern \"C\" void emu_entry(dim3 g, dim3 b, unsigned smem, void* const* ptrs, "
         "const long long* ints) {\n  emu::Launch(g, b, smem, [&] { KERNEL(" +
         call + "); });\n}\n";
}
using EmuFn = void (*)(llmc::test::Dim3, llmc::test::Dim3, unsigned, void *const *,
                       const long long *);

/// Host memory for one buffer: `bytes` at a 16-byte aligned address plus
/// `shift`, the rest NaN bytes (0xff) so an unwritten output shows.
struct HostBuffer {
  std::vector<uint8_t> storage;
  uint8_t *data = nullptr;
  HostBuffer(int64_t bytes, int64_t shift) : storage(bytes + shift + 32, 0xff) {
    auto base = reinterpret_cast<uintptr_t>(storage.data());
    data = storage.data() + ((16 - base % 16) % 16) + shift;
  }
};

uint16_t Bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f))
    return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

absl::Status Encode(const HostTensor &t, rt::DType d, uint8_t *p) {
  for (size_t i = 0; i < t.data.size(); ++i) {
    const float f = static_cast<float>(t.data[i]);
    if (d == rt::DType::f32) {
      std::memcpy(p + 4 * i, &f, 4);
    } else if (d == rt::DType::bf16) {
      const uint16_t b = Bf16Bits(f);
      std::memcpy(p + 2 * i, &b, 2);
    } else {
      return absl::UnimplementedError(std::string("dtype ") + rt::DTypeName(d));
    }
  }
  return absl::OkStatus();
}

std::vector<double> Decode(const uint8_t *p, rt::DType d, int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) {
    float f;
    if (d == rt::DType::f32) {
      std::memcpy(&f, p + 4 * i, 4);
    } else if (d == rt::DType::f8e4m3) {
      f = llmc::ref::FromE4M3(p[i]);
    } else if (d == rt::DType::f8e5m2) {
      f = llmc::ref::FromE5M2(p[i]);
    } else if (d == rt::DType::f16) {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      f = llmc::ref::FromF16(b);
    } else {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      const uint32_t u = uint32_t(b) << 16;
      std::memcpy(&f, &u, 4);
    }
    v[i] = f;
  }
  return v;
}

/// The emulator arguments of launch `l`: each buffer pointer from the host
/// memory of the buffer it names (inputs `in`, outputs `out`, the `arena`,
/// constants copied into `constants`), by-value structs from the launch
/// itself, integers into `ints`. A persistent buffer is a test failure.
void BindArgs(const rt::Executable &exe, const rt::Launch &l, std::vector<HostBuffer> &in,
              std::vector<HostBuffer> &out, HostBuffer &arena,
              std::vector<std::string> &constants, std::vector<void *> &ptrs,
              std::vector<long long> &ints) {
  ptrs.assign(l.args.size(), nullptr);
  ints.assign(l.args.size(), 0);
  for (size_t i = 0; i < l.args.size(); ++i) {
    const rt::Arg &a = l.args[i];
    if (a.kind == rt::Arg::I64 || a.kind == rt::Arg::I32) {
      ints[i] = a.i;
      continue;
    }
    if (a.kind == rt::Arg::Bytes) {
      ptrs[i] = const_cast<char *>(a.bytes.data());
      continue;
    }
    ASSERT_EQ(a.kind, rt::Arg::BufferPtr) << "argument " << i;
    ASSERT_TRUE(a.buffer >= 0 && a.buffer < static_cast<int>(exe.buffers.size()))
        << "argument " << i;
    const rt::Buffer &b = exe.buffers[a.buffer];
    ASSERT_LE(a.byte_offset, b.bytes) << "argument " << i;
    uint8_t *base = nullptr;
    switch (b.kind) {
    case rt::Buffer::Input:
      ASSERT_TRUE(b.io_index >= 0 && b.io_index < static_cast<int>(in.size()));
      base = in[b.io_index].data;
      break;
    case rt::Buffer::Output:
      ASSERT_TRUE(b.io_index >= 0 && b.io_index < static_cast<int>(out.size()));
      base = out[b.io_index].data;
      break;
    case rt::Buffer::Arena:
      base = arena.data + b.arena_offset;
      break;
    case rt::Buffer::Constant:
      constants.resize(exe.buffers.size());
      constants[a.buffer] = b.constant_data;
      base = reinterpret_cast<uint8_t *>(constants[a.buffer].data());
      break;
    default:
      FAIL() << "argument " << i << " names a persistent buffer\n" << rt::DescribeExecutable(exe);
    }
    ptrs[i] = base + a.byte_offset;
  }
}

class RowKernelEmu : public ReferenceTest {
protected:
  void checkGemmFinishRoundsOnce(const char *src, int64_t M, int64_t N, int64_t K, bool scaled,
                                 bool biased = true);
  /// Random N(0, 1) inputs for `fn`'s arguments (rounded to their types),
  /// with no element exactly zero.
  std::vector<HostTensor> randomInputs(mlir::func::FuncOp fn) {
    std::vector<HostTensor> in;
    for (mlir::Type t : fn.getArgumentTypes()) {
      auto tt = mlir::cast<mlir::RankedTensorType>(t);
      HostTensor h = rand(tt.getElementType(), std::vector<int64_t>(tt.getShape().begin(), tt.getShape().end()));
      for (double &v : h.data)
        while (v == 0.0)
          v = RoundToType(std::normal_distribution<double>()(rng), tt.getElementType());
      in.push_back(std::move(h));
    }
    return in;
  }

  /// Lowers `src`, checks it is one llmc_rowfused_* launch (and its column
  /// reduction: `columnLaunches`), evaluates it
  /// with the reference executor and runs the kernel on the emulator (three
  /// ways, see the file comment), comparing every output. Skips before the
  /// run (after the lowering's checks) when there is no host compiler.
  /// `vec`: whether the kernel must have a vector path (kVec > 1) or must
  /// not; unset: either.
  /// `columnLaunches`: the launches of the column reduction after the row
  /// kernel (0: the row kernel alone).
  void check(const std::string &src, std::optional<bool> vec = std::nullopt,
             size_t columnLaunches = 0) {
    mlir::func::FuncOp fn = parse(src);
    ASSERT_TRUE(fn);
    const size_t numResults = fn.getNumResults();
    const std::vector<HostTensor> inputs = randomInputs(fn);
    const std::vector<HostTensor> want = run(src, inputs); // parses `src` again
    ASSERT_EQ(want.size(), numResults);

    fn = parse(src); // a fresh copy for the lowering
    ASSERT_TRUE(fn);
    absl::StatusOr<rt::Executable> exe = llmc::LowerToExecutable(fn, {});
    ASSERT_TRUE(exe.ok()) << exe.status();
    ASSERT_EQ(exe->launches.size(), columnLaunches + 1)
        << "not one row kernel" << (columnLaunches ? " and its column reduction" : "") << ":\n"
        << rt::DescribeExecutable(*exe);
    for (const rt::Launch &l : exe->launches) {
      ASSERT_EQ(l.kind, rt::Launch::Kernel) << rt::DescribeExecutable(*exe);
      ASSERT_TRUE(l.kernel >= 0 && l.kernel < static_cast<int>(exe->kernels.size()));
      const std::string &name = exe->kernels[l.kernel].name;
      const char *want = &l == &exe->launches[0] ? "llmc_rowfused_" : "llmc_colreduce_";
      ASSERT_EQ(name.rfind(want, 0), 0u) << name << " is not a " << want << " kernel:\n"
                                         << rt::DescribeExecutable(*exe);
    }
    const rt::KernelSpec &spec = exe->kernels[exe->launches[0].kernel];
    if (vec) {
      EXPECT_EQ(spec.source.find("static constexpr int kVec = 1;") == std::string::npos, *vec)
          << spec.name << (*vec ? " has no vector path" : " has a vector path");
    }

    ASSERT_EQ(exe->inputs.size(), inputs.size());
    ASSERT_EQ(exe->outputs.size(), want.size());
    for (size_t i = 0; i < inputs.size(); ++i)
      ASSERT_EQ(exe->inputs[i].shape, inputs[i].shape) << "input " << i;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(exe->outputs[i].shape, want[i].shape) << "output " << i;

    std::vector<std::vector<Param>> params;
    for (const rt::Launch &l : exe->launches) {
      const rt::KernelSpec &k = exe->kernels[l.kernel];
      params.push_back(KernelParams(k.source, k.name));
      ASSERT_EQ(params.back().size(), l.args.size()) << k.name << ": parameters vs launch arguments\n"
                                                     << rt::DescribeExecutable(*exe);
      for (size_t i = 0; i < params.back().size(); ++i)
        ASSERT_EQ(params.back()[i].pointer, l.args[i].kind == rt::Arg::BufferPtr)
            << k.name << " parameter " << i << " (" << params.back()[i].type << ")";
    }
    // The lowering's checks above need no compiler; the run does.
    if (!llmc::test::HaveCompiler())
      GTEST_SKIP() << "no host C++ compiler (" << llmc::test::HostCompiler() << ")";
    std::vector<EmuFn> entries;
    for (auto [i, l] : llvm::enumerate(exe->launches)) {
      const rt::KernelSpec &k = exe->kernels[l.kernel];
      entries.push_back(
          reinterpret_cast<EmuFn>(llmc::test::BuildEmu({k.name, k.source}, Stub(params[i], l.args))));
      ASSERT_NE(entries.back(), nullptr) << k.name;
    }

    struct Variant {
      const char *what;
      bool misalign;
      unsigned max_grid_x;
    };
    for (const Variant v : {Variant{"as launched", false, ~0u},
                            Variant{"buffers one element off 16-byte alignment", true, ~0u},
                            Variant{"grid.x cut to 2 (grid-stride over rows)", false, 2u}}) {
      if (columnLaunches > 0 && v.max_grid_x != ~0u)
        continue; // the column reduction reads one partial row per block as launched
      SCOPED_TRACE(std::string(spec.name) + ", " + v.what);
      auto shift = [&](rt::DType d) { return v.misalign ? rt::DTypeSize(d) : 0; };
      std::vector<HostBuffer> in, out;
      for (size_t i = 0; i < inputs.size(); ++i) {
        in.emplace_back(exe->inputs[i].Bytes(), shift(exe->inputs[i].dtype));
        absl::Status st = Encode(inputs[i], exe->inputs[i].dtype, in.back().data);
        ASSERT_TRUE(st.ok()) << st;
      }
      for (const rt::TensorSig &o : exe->outputs)
        out.emplace_back(o.Bytes(), shift(o.dtype));
      HostBuffer arena(exe->arena_bytes, 0);
      std::vector<std::string> constants(exe->buffers.size());

      for (const rt::Launch &l : exe->launches) {
        std::vector<void *> ptrs;
        std::vector<long long> ints;
        ASSERT_NO_FATAL_FAILURE(BindArgs(*exe, l, in, out, arena, constants, ptrs, ints));
        llmc::test::Dim3 grid{l.grid[0], l.grid[1], l.grid[2]}, block{l.block[0], l.block[1], l.block[2]};
        grid.x = std::min(grid.x, v.max_grid_x);
        entries[&l - exe->launches.data()](grid, block, l.smem, ptrs.data(), ints.data());
      }

      for (size_t o = 0; o < want.size(); ++o) {
        const rt::TensorSig &sig = exe->outputs[o];
        HostTensor got{want[o].elementType, want[o].shape,
                       Decode(out[o].data, sig.dtype, sig.NumElements())};
        for (size_t i = 0; i < got.data.size(); ++i)
          ASSERT_FALSE(std::isnan(got.data[i]) && !std::isnan(want[o].data[i]))
              << "output " << o << " element " << i << " is NaN; reference " << want[o].data[i];
        double maxAbs = 0;
        for (size_t i = 0; i < got.data.size(); ++i)
          if (std::isfinite(want[o].data[i]))
            maxAbs = std::max(maxAbs, std::fabs(got.data[i] - want[o].data[i]));
        // fp8: the kernel divides by the scale in f32, the reference in
        // float64, so a value at a rounding tie may land one e4m3 step
        // (2^-3 relative) away; a few such elements stay far below 1e-2.
        const double tol = sig.dtype == rt::DType::f32 ? 1e-5 : 1e-2;
        const double err = RelativeError(got, want[o]);
        EXPECT_LE(err, tol) << "output " << o << " (" << want[o].typeString()
                            << "): relative L2 error " << err << ", max |diff| " << maxAbs;
      }
    }
  }
};

/// The fp8 policy's row-scaled quantization of a [6, N] activation
/// (llmc-precision fp8-scaling=row, as it writes it): amax per row, the
/// scale max(amax, 1e-12) / m, and x / scale cast to `fp8` (f8E4M3FN with
/// m = 448, f8E5M2 with m = 57344) with its scales as outputs.
std::string Fp8RowQuantize(int64_t n, const std::string &fp8, const std::string &largest) {
  std::string s = R"mlir(
func.func @fp8_rows(%x: tensor<6xNxbf16>) -> (tensor<6xNxFP8>, tensor<6x1xf32>) {
  %xf = llm.cast %x : tensor<6xNxbf16> to tensor<6xNxf32>
  %a = llm.abs %xf : tensor<6xNxf32>
  %m = llm.reduce_max %a [1] keepdim : tensor<6xNxf32>
  %floor = llm.constant dense<1.000000e-12> : tensor<6x1xf32>
  %big = llm.constant dense<LARGEST> : tensor<6x1xf32>
  %c = llm.maximum %m, %floor : tensor<6x1xf32>
  %s = llm.div %c, %big : tensor<6x1xf32>
  %sb = llm.broadcast %s : tensor<6x1xf32> to tensor<6xNxf32>
  %d = llm.div %xf, %sb : tensor<6xNxf32>
  %q = llm.cast %d : tensor<6xNxf32> to tensor<6xNxFP8>
  return %q, %s : tensor<6xNxFP8>, tensor<6x1xf32>
}
)mlir";
  ReplaceAll(s, "6xN", "6x" + std::to_string(n));
  ReplaceAll(s, "FP8", fp8);
  ReplaceAll(s, "LARGEST", largest);
  return s;
}

// fp8 row scaling: the amax reduction, the scale and the scaled cast to
// e4m3 in one row kernel (one pass over the activation), 16-byte vectors.
TEST_F(RowKernelEmu, Fp8RowQuantizeE4M3) {
  check(Fp8RowQuantize(256, "f8E4M3FN", "4.480000e+02"), true);
}

// The same for a gradient (e5m2), on rows that no vector width divides.
TEST_F(RowKernelEmu, Fp8RowQuantizeE5M2OddRows) {
  check(Fp8RowQuantize(37, "f8E5M2", "5.734400e+04"), false);
}

/// Runs a one-matmul function `src` whose lowering is a GEMM into f32
/// scratch followed by one elementwise kernel that finishes the result
/// (round(acc [* sa * sb] [+ bias]) once). The GEMM itself (cuBLASLt) does
/// not run here: the scratch is filled with f32 accumulators computed on
/// the host, the kernel runs on the emulator, and its result must equal the
/// host's f32 evaluation of the same expression rounded once, bit for bit,
/// and the float64 reference executor within bf16 rounding. Inputs are
/// (a [M,K], b [N,K], then sa, sb when `scaled`, then bias [N] when
/// `biased`).
void RowKernelEmu::checkGemmFinishRoundsOnce(const char *src, int64_t M, int64_t N, int64_t K,
                                             bool scaled, bool biased) {
  mlir::func::FuncOp fn = parse(src);
  ASSERT_TRUE(fn);
  const std::vector<HostTensor> inputs = randomInputs(fn);
  const std::vector<HostTensor> want = run(src, inputs);
  ASSERT_EQ(want.size(), 1u);
  fn = parse(src);
  ASSERT_TRUE(fn);
  absl::StatusOr<rt::Executable> exe = llmc::LowerToExecutable(fn, {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  // The GEMM (f32 D, no scale pointers, no epilogue), then the kernel.
  ASSERT_EQ(exe->launches.size(), 2u) << rt::DescribeExecutable(*exe);
  ASSERT_EQ(exe->launches[0].kind, rt::Launch::Gemm);
  const rt::GemmSpec &g = exe->gemms[exe->launches[0].gemm];
  EXPECT_EQ(g.dtype_d, rt::DType::f32);
  EXPECT_LT(g.scale_a.buffer, 0);
  const rt::Launch &l = exe->launches[1];
  ASSERT_EQ(l.kind, rt::Launch::Kernel);
  const rt::KernelSpec &k = exe->kernels[l.kernel];
  std::vector<Param> params = KernelParams(k.source, k.name);
  ASSERT_EQ(params.size(), l.args.size()) << k.name;
  if (!llmc::test::HaveCompiler())
    GTEST_SKIP() << "no host C++ compiler (" << llmc::test::HostCompiler() << ")";
  auto entry = reinterpret_cast<EmuFn>(llmc::test::BuildEmu({k.name, k.source}, Stub(params, l.args)));
  ASSERT_NE(entry, nullptr) << k.name;

  // The f32 accumulators, as the GEMM writes them (D = g.d).
  const HostTensor &a = inputs[0], &b = inputs[1];
  const HostTensor *bias = biased ? &inputs[scaled ? 4 : 2] : nullptr;
  std::vector<float> acc(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t kk = 0; kk < K; ++kk)
        s += a.data[i * K + kk] * b.data[j * K + kk];
      acc[i * N + j] = static_cast<float>(s);
    }
  HostBuffer arena(exe->arena_bytes, 0);
  std::vector<HostBuffer> outs;
  outs.emplace_back(exe->outputs[0].Bytes(), 0);
  ASSERT_EQ(exe->buffers[g.d.buffer].kind, rt::Buffer::Arena);
  std::memcpy(arena.data + exe->buffers[g.d.buffer].arena_offset + g.d.offset, acc.data(),
              acc.size() * 4);
  std::vector<HostBuffer> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in.emplace_back(exe->inputs[i].Bytes(), 0);
    if (exe->inputs[i].dtype == rt::DType::f32 || exe->inputs[i].dtype == rt::DType::bf16) {
      ASSERT_TRUE(Encode(inputs[i], exe->inputs[i].dtype, in.back().data).ok());
    }
  }
  std::vector<std::string> constants;
  std::vector<void *> ptrs;
  std::vector<long long> ints;
  ASSERT_NO_FATAL_FAILURE(BindArgs(*exe, l, in, outs, arena, constants, ptrs, ints));
  entry({l.grid[0], l.grid[1], l.grid[2]}, {l.block[0], l.block[1], l.block[2]}, l.smem,
        ptrs.data(), ints.data());

  const rt::DType outType = exe->outputs[0].dtype;
  const std::vector<double> got = Decode(outs[0].data, outType, M * N);
  const float sa = scaled ? static_cast<float>(inputs[2].data[0]) : 1.f;
  const float sb = scaled ? static_cast<float>(inputs[3].data[0]) : 1.f;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float f32 = acc[i * N + j];
      if (scaled)
        f32 = f32 * sa * sb;
      if (bias)
        f32 += static_cast<float>(bias->data[j]);
      ASSERT_EQ(got[i * N + j], RoundToType(f32, want[0].elementType))
          << "element " << i << "," << j;
    }
  HostTensor res{want[0].elementType, want[0].shape, got};
  EXPECT_LE(RelativeError(res, want[0]), 1e-2);
}

// A scaled fp8 GEMM with a bias (llm.matmul ... bias scales(sa, sb)): the
// GEMM writes its f32 accumulator to scratch and one elementwise kernel
// computes round(acc * sa * sb + bias) once (acc is exact here: few fp8
// products).
TEST_F(RowKernelEmu, ScaledFp8GemmWithBiasRoundsOnce) {
  checkGemmFinishRoundsOnce(R"mlir(
func.func @scaled(%a8: tensor<13x32xf8E4M3FN>, %b8: tensor<32x32xf8E4M3FN>, %sa: tensor<f32>,
                  %sb: tensor<f32>, %bias: tensor<32xbf16>) -> tensor<13x32xbf16> {
  %y = llm.matmul %a8, %b8 bias %bias scales(%sa, %sb) {transpose_rhs} : tensor<13x32xf8E4M3FN>, tensor<32x32xf8E4M3FN>, tensor<32xbf16> -> tensor<13x32xbf16>
  return %y : tensor<13x32xbf16>
})mlir", 13, 32, 32, /*scaled=*/true);
}

// A bf16 GEMM whose bias cuBLASLt's epilogue cannot take (an f32 bias for a
// bf16 result) rounds once too: adding the bias to a D already rounded to
// bf16 would round twice.
TEST_F(RowKernelEmu, Bf16GemmWithF32BiasRoundsOnce) {
  checkGemmFinishRoundsOnce(R"mlir(
func.func @biased(%a: tensor<13x40xbf16>, %b: tensor<24x40xbf16>, %bias: tensor<24xf32>) -> tensor<13x24xbf16> {
  %y = llm.matmul %a, %b bias %bias {transpose_rhs} : tensor<13x40xbf16>, tensor<24x40xbf16>, tensor<24xf32> -> tensor<13x24xbf16>
  return %y : tensor<13x24xbf16>
})mlir", 13, 24, 40, /*scaled=*/false);
}

// A result cuBLASLt cannot write from the operands' type (llm.matmul takes
// any float result; cuBLASLt's bf16 GEMMs write bf16 or f32 only): the GEMM
// writes f32 and one kernel rounds it once to f16. Before, the lowering
// emitted a bf16 x bf16 -> f16 cuBLASLt GEMM that does not exist.
TEST_F(RowKernelEmu, Bf16GemmWithF16ResultRoundsOnce) {
  checkGemmFinishRoundsOnce(R"mlir(
func.func @f16out(%a: tensor<13x40xbf16>, %b: tensor<24x40xbf16>) -> tensor<13x24xf16> {
  %y = llm.matmul %a, %b {transpose_rhs} : tensor<13x40xbf16>, tensor<24x40xbf16> -> tensor<13x24xf16>
  return %y : tensor<13x24xf16>
})mlir", 13, 24, 40, /*scaled=*/false, /*biased=*/false);
}

// The same for an f32 GEMM with a bf16 result (cuBLASLt's f32 GEMMs write
// f32 only).
TEST_F(RowKernelEmu, F32GemmWithBf16ResultRoundsOnce) {
  checkGemmFinishRoundsOnce(R"mlir(
func.func @bf16out(%a: tensor<13x40xf32>, %b: tensor<24x40xf32>) -> tensor<13x24xbf16> {
  %y = llm.matmul %a, %b {transpose_rhs} : tensor<13x40xf32>, tensor<24x40xf32> -> tensor<13x24xbf16>
  return %y : tensor<13x24xbf16>
})mlir", 13, 24, 40, /*scaled=*/false, /*biased=*/false);
}

// An fp8 result (cuBLASLt writes none from bf16 operands): f32 product,
// then one saturating rounding to e4m3.
TEST_F(RowKernelEmu, Bf16GemmWithFp8ResultRoundsOnce) {
  checkGemmFinishRoundsOnce(R"mlir(
func.func @fp8out(%a: tensor<13x40xbf16>, %b: tensor<24x40xbf16>) -> tensor<13x24xf8E4M3FN> {
  %y = llm.matmul %a, %b {transpose_rhs} : tensor<13x40xbf16>, tensor<24x40xbf16> -> tensor<13x24xf8E4M3FN>
  return %y : tensor<13x24xf8E4M3FN>
})mlir", 13, 24, 40, /*scaled=*/false, /*biased=*/false);
}

// The RMSNorm backward (dx) in one kernel: 15 rows of 64.
TEST_F(RowKernelEmu, RmsNormBackward) { check(RmsNormBackward()); }

// 6 rows of 2048 (16-byte vectors), also writing the row sum (a per-row
// output).
TEST_F(RowKernelEmu, RmsNormBackwardWideWithRowSum) { check(RmsNormBackwardWide(), true); }

// dx and the weight gradient: the row kernel, then the column reduction of
// its 1056 blocks' partial sums (16 splits, and their combine).
TEST_F(RowKernelEmu, RmsNormBackwardWithWeightGradient) {
  check(RmsNormBackwardWeightGrad(), true, 2);
}

// LlamaRMSNorm's training forward: the output and the saved rstd.
TEST_F(RowKernelEmu, HfRmsNormForwardSavingRstd) { check(HfRmsNormTrain()); }

// Softmax: max, then the sum of exp(x - max) in a later pass.
TEST_F(RowKernelEmu, SoftmaxTwoReductions) { check(Softmax(40)); }

// A row length that is no multiple of any vector width.
TEST_F(RowKernelEmu, SoftmaxOddRowLength) { check(Softmax(37), false); }

} // namespace
