// Parameter preparation: guard decisions, the Executable fields that
// describe the segment, their serialization and the format-version bump.
#include "llmc/runtime/ParameterGuard.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "llmc/runtime/Executable.h"

namespace llmc::rt {
namespace {

Executable TwoInputs() {
  Executable e;
  TensorSig x{"x", DType::bf16, {1, 256}};
  TensorSig w{"w", DType::bf16, {64, 256}};
  w.parameter = true;
  e.inputs = {x, w};
  e.outputs = {TensorSig{"y", DType::bf16, {1, 64}}};
  Buffer in0, in1, out, packed;
  in0.id = 0, in0.kind = Buffer::Input, in0.io_index = 0, in0.bytes = 512;
  in1.id = 1, in1.kind = Buffer::Input, in1.io_index = 1, in1.bytes = 64 * 512;
  out.id = 2, out.kind = Buffer::Output, out.io_index = 0, out.bytes = 128;
  packed.id = 3, packed.kind = Buffer::Persistent, packed.bytes = 64 * 128;
  e.buffers = {in0, in1, out, packed};
  e.kernels.push_back(KernelSpec{"k", "src"});
  Launch quantize, gemv;
  quantize.kernel = 0;
  quantize.args = {Arg{Arg::BufferPtr, 3}, Arg{Arg::BufferPtr, 1}};
  quantize.label = "llm.quantize_weight";
  gemv.kernel = 0;
  gemv.args = {Arg{Arg::BufferPtr, 2}, Arg{Arg::BufferPtr, 0}, Arg{Arg::BufferPtr, 3}};
  e.launches = {quantize, gemv};
  e.num_prepare_launches = 1;
  return e;
}

TEST(ParameterGuard, RunsOncePerParameterSet) {
  Executable e = TwoInputs();
  ParameterGuard g;
  // Only the parameter input's pointer is part of the key.
  auto k1 = ParameterKey(e, {0x1000, 0xA000});
  ASSERT_EQ(k1, std::vector<uint64_t>{0xA000});
  EXPECT_TRUE(g.NeedsPrepare(k1));  // first run
  g.Prepared(k1);
  EXPECT_FALSE(g.NeedsPrepare(k1));
  // A new activation pointer does not re-prepare.
  EXPECT_FALSE(g.NeedsPrepare(ParameterKey(e, {0x2000, 0xA000})));
  // A new weight pointer does.
  auto k2 = ParameterKey(e, {0x1000, 0xB000});
  EXPECT_TRUE(g.NeedsPrepare(k2));
  g.Prepared(k2);
  EXPECT_FALSE(g.NeedsPrepare(k2));
  EXPECT_TRUE(g.NeedsPrepare(k1));  // back to the old weights: prepare again
  // In-place update: same pointer, explicit invalidation.
  g.Invalidate();
  EXPECT_TRUE(g.NeedsPrepare(k2));
  g.Prepared(k2);
  EXPECT_FALSE(g.NeedsPrepare(k2));
}

TEST(ParameterGuard, SegmentRoundTripsThroughSerialization) {
  Executable e = TwoInputs();
  ASSERT_TRUE(e.Validate().ok()) << e.Validate();
  auto back = DeserializeExecutable(SerializeExecutable(e));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->num_prepare_launches, 1);
  EXPECT_FALSE(back->inputs[0].parameter);
  EXPECT_TRUE(back->inputs[1].parameter);
  EXPECT_EQ(back->buffers[3].kind, Buffer::Persistent);
  EXPECT_EQ(back->buffers[3].bytes, 64 * 128);
}

TEST(ParameterGuard, ValidateRejectsSegmentBeyondLaunches) {
  Executable e = TwoInputs();
  e.num_prepare_launches = 3;
  absl::Status st = e.Validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("num_prepare_launches 3"), std::string::npos)
      << st.message();
}

TEST(ParameterGuard, VersionOneFilesAreRejectedWithAClearMessage) {
  ASSERT_EQ(Executable::kFormatVersion, 2);
  Executable e = TwoInputs();
  e.format_version = 1;
  auto r = DeserializeExecutable(SerializeExecutable(e));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  std::string msg(r.status().message());
  EXPECT_NE(msg.find("version 1 is not supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("recompile"), std::string::npos) << msg;
}

}  // namespace
}  // namespace llmc::rt
