#include "llmc/runtime/Profile.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace llmc::rt {
namespace {

Executable TwoLaunches() {
  Executable exe;
  KernelSpec k;
  k.name = "llmc_rmsnorm_test";
  exe.kernels.push_back(k);
  GemmSpec g;
  g.m = 2048;
  g.n = 4096;
  g.k = 4096;
  exe.gemms.push_back(g);
  Launch a;
  a.kind = Launch::Kernel;
  a.kernel = 0;
  a.label = "llm.rms_norm";
  Launch b;
  b.kind = Launch::Gemm;
  b.gemm = 0;
  b.label = "llm.matmul";
  exe.launches = {a, b};
  return exe;
}

LaunchTiming At(double start_ms, float ms) {
  LaunchTiming t;
  t.start_ms = start_ms;
  t.ms = ms;
  return t;
}

TEST(ProfileTest, ChromeTraceEventsSitAtTheirGpuStartTimes) {
  // The GEMM starts 5 us after the kernel ends: the gap shows, not hidden.
  auto json = ChromeTraceJson(TwoLaunches(), {At(0.0, 0.025f), At(0.030, 0.1f)});
  ASSERT_TRUE(json.ok()) << json.status();
  auto trace = nlohmann::json::parse(*json);
  const auto& ev = trace.at("traceEvents");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0]["name"], "llm.rms_norm");
  EXPECT_EQ(ev[0]["ph"], "X");
  EXPECT_EQ(ev[0]["args"]["kernel"], "llmc_rmsnorm_test");
  EXPECT_DOUBLE_EQ(ev[0]["ts"].get<double>(), 0.0);
  EXPECT_NEAR(ev[0]["dur"].get<double>(), 25.0, 1e-3);  // microseconds
  EXPECT_NEAR(ev[0]["args"]["gap_us"].get<double>(), 0.0, 1e-6);
  EXPECT_NEAR(ev[1]["ts"].get<double>(), 30.0, 1e-3);    // its own start, not 25
  EXPECT_NEAR(ev[1]["args"]["gap_us"].get<double>(), 5.0, 1e-3);
  EXPECT_EQ(ev[1]["args"]["kind"], "gemm");
  // 2*2048*4096*4096 FLOP in 0.1 ms = 687 TFLOP/s
  EXPECT_NEAR(ev[1]["args"]["tflops"].get<double>(), 687.19, 0.05);
}

// Before: nlohmann's dump threw on the byte 0xff (std::terminate).
TEST(ProfileTest, LabelThatIsNotUtf8IsReplacedNotThrown) {
  Executable exe = TwoLaunches();
  exe.launches[0].label = "norm\xff";
  auto json = ChromeTraceJson(exe, {At(0.0, 0.025f), At(0.025, 0.1f)});
  ASSERT_TRUE(json.ok()) << json.status();
  auto trace = nlohmann::json::parse(*json);
  EXPECT_EQ(trace["traceEvents"][0]["name"], "norm\xef\xbf\xbd");  // U+FFFD
}

TEST(ProfileTest, MismatchedOrInvalidTimesAreErrors) {
  auto few = ChromeTraceJson(TwoLaunches(), {At(0.0, 0.1f)});
  ASSERT_FALSE(few.ok());
  EXPECT_NE(std::string(few.status().message()).find("1 launch times for 2 launches"),
            std::string::npos);
  EXPECT_FALSE(ChromeTraceJson(TwoLaunches(), {At(0.0, 0.1f), At(0.1, -1.f)}).ok());
  EXPECT_FALSE(ChromeTraceJson(TwoLaunches(), {At(0.0, 0.1f), At(0.1, NAN)}).ok());
  EXPECT_FALSE(ChromeTraceJson(TwoLaunches(), {At(0.0, 0.1f), At(-0.5, 0.1f)}).ok());
  EXPECT_FALSE(ChromeTraceJson(TwoLaunches(), {At(0.0, 0.1f), At(INFINITY, 0.1f)}).ok());
}

}  // namespace
}  // namespace llmc::rt
