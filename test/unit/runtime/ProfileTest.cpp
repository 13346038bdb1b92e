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

TEST(ProfileTest, ChromeTraceHasOneCompleteEventPerLaunchBackToBack) {
  auto json = ChromeTraceJson(TwoLaunches(), {0.025f, 0.1f});
  ASSERT_TRUE(json.ok()) << json.status();
  auto trace = nlohmann::json::parse(*json);
  const auto& ev = trace.at("traceEvents");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0]["name"], "llm.rms_norm");
  EXPECT_EQ(ev[0]["ph"], "X");
  EXPECT_EQ(ev[0]["args"]["kernel"], "llmc_rmsnorm_test");
  EXPECT_DOUBLE_EQ(ev[0]["ts"].get<double>(), 0.0);
  EXPECT_NEAR(ev[0]["dur"].get<double>(), 25.0, 1e-3);  // microseconds
  EXPECT_NEAR(ev[1]["ts"].get<double>(), 25.0, 1e-3);    // starts when the first ends
  EXPECT_EQ(ev[1]["args"]["kind"], "gemm");
  // 2*2048*4096*4096 FLOP in 0.1 ms = 687 TFLOP/s
  EXPECT_NEAR(ev[1]["args"]["tflops"].get<double>(), 687.19, 0.05);
}

// Before: nlohmann's dump threw on the byte 0xff (std::terminate).
TEST(ProfileTest, LabelThatIsNotUtf8IsReplacedNotThrown) {
  Executable exe = TwoLaunches();
  exe.launches[0].label = "norm\xff";
  auto json = ChromeTraceJson(exe, {0.025f, 0.1f});
  ASSERT_TRUE(json.ok()) << json.status();
  auto trace = nlohmann::json::parse(*json);
  EXPECT_EQ(trace["traceEvents"][0]["name"], "norm\xef\xbf\xbd");  // U+FFFD
}

TEST(ProfileTest, MismatchedOrInvalidTimesAreErrors) {
  auto few = ChromeTraceJson(TwoLaunches(), {0.1f});
  ASSERT_FALSE(few.ok());
  EXPECT_NE(std::string(few.status().message()).find("1 launch times for 2 launches"),
            std::string::npos);
  EXPECT_FALSE(ChromeTraceJson(TwoLaunches(), {0.1f, -1.f}).ok());
  EXPECT_FALSE(ChromeTraceJson(TwoLaunches(), {0.1f, NAN}).ok());
}

}  // namespace
}  // namespace llmc::rt
