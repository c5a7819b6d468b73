// `flatcake soak`: the RSS verdict on made-up series (flat after a warm-up, a steady leak, a
// window with two daemons in it), and a 12-second soak as a process: its JSON line says no byte
// was wrong, no error unexpected, clients were killed and restarted, the daemon restarted and
// served its canaries back, and its descriptors came back to where they started.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/soak_report.h"
#include "testing/command_run.h"
#include "util/temp_dir.h"

namespace flatcake::cli::soak {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// One sample a second for `seconds`, RSS from `rss(t)`; daemon 1 before `restart_s`, 2 after.
std::vector<ProcSample> Series(int seconds, double restart_s, uint64_t (*rss)(double)) {
  std::vector<ProcSample> s;
  for (int t = 0; t <= seconds; ++t) {
    ProcSample p;
    p.t_s = t;
    p.daemon = t < restart_s ? 1 : 2;
    p.rss_bytes = rss(t);
    p.anon_bytes = p.rss_bytes / 2;
    s.push_back(p);
  }
  return s;
}

TEST(SoakReportTest, LeastSquaresSlopeOfALine) {
  EXPECT_DOUBLE_EQ(LeastSquaresSlope({0, 1, 2, 3}, {5, 7, 9, 11}), 2.0);
  EXPECT_DOUBLE_EQ(LeastSquaresSlope({1}, {5}), 0.0);
  EXPECT_DOUBLE_EQ(LeastSquaresSlope({2, 2}, {1, 9}), 0.0);
}

TEST(SoakReportTest, AWarmUpInTheFirstHalfThenFlatIsFlat) {
  // Climbs 100 MiB over the first 200 s of 600, then wobbles by 1 MiB.
  const auto v = JudgeRss(Series(600, 150,
                                 [](double t) -> uint64_t {
                                   return static_cast<uint64_t>(std::min(t, 200.0) / 2 * kMiB) +
                                          (static_cast<uint64_t>(t) % 2) * kMiB;
                                 }),
                          600, 120);
  EXPECT_TRUE(v.judged);
  EXPECT_TRUE(v.flat) << v.growth_bytes;
  EXPECT_EQ(v.start_bytes, 0u);
  EXPECT_EQ(v.max_bytes, 101 * kMiB);
  EXPECT_EQ(v.samples, 301u);
  EXPECT_DOUBLE_EQ(v.bound_bytes, static_cast<double>(kFlatBoundBytes));
}

TEST(SoakReportTest, ASteadyLeakIsNotFlat) {
  // 50 MiB plus 16 KiB a second: 4.7 MiB over the last 300 s.
  const auto v = JudgeRss(
      Series(600, 150,
             [](double t) -> uint64_t { return 50 * kMiB + static_cast<uint64_t>(t) * 16 * 1024; }),
      600, 120);
  EXPECT_TRUE(v.judged);
  EXPECT_FALSE(v.flat);
  EXPECT_NEAR(v.slope_bytes_per_s, 16 * 1024, 1e-6);
  EXPECT_NEAR(v.anon_slope_bytes_per_s, 8 * 1024, 1e-6);
  EXPECT_NEAR(v.growth_bytes, 300.0 * 16 * 1024, 1e-3);
}

TEST(SoakReportTest, NotJudgedWhenShortOrWhenTheRestartFallsInTheWindow) {
  auto flat = [](double) -> uint64_t { return 64 * kMiB; };
  EXPECT_FALSE(JudgeRss(Series(60, 15, flat), 60, 120).judged);
  EXPECT_FALSE(JudgeRss(Series(600, 400, flat), 600, 120).judged);
  EXPECT_FALSE(JudgeRss({}, 600, 120).judged);
  EXPECT_TRUE(JudgeRss(Series(600, 150, flat), 600, 120).flat);
}

using flatcake::testing::CommandRun;
using flatcake::testing::LastLine;
using flatcake::testing::RunCommand;

TEST(SoakTest, AShortSoakHasNoWrongByteNoUnexpectedErrorAndNoFdLeak) {
  TempDir dir("soak-test");
  const CommandRun r = RunCommand(std::string(FLATCAKE_BINARY) +
                                  " soak --minutes 0.2 --clients 3 --tenants 2 --seed 7 --json"
                                  " --dir " +
                                  dir.path());
  EXPECT_EQ(r.status, 0) << r.out;
  const std::string line = LastLine(r.out);
  ASSERT_FALSE(line.empty()) << r.out;
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["wrong_bytes"], 0) << r.out;
  EXPECT_EQ(j["checksum_misses"], 0) << r.out;
  EXPECT_EQ(j["unexpected_errors"], 0) << r.out;
  EXPECT_GT(j["bytes_verified"].get<uint64_t>(), 0u);
  for (const char* op : {"put", "lookup", "restore"}) {
    EXPECT_GT(j["ops"][op].get<uint64_t>(), 0u) << op;
  }
  EXPECT_EQ(j["daemon_restarts"], 1);
  EXPECT_GE(j["kills"].get<uint64_t>(), 1u);
  EXPECT_GE(j["client_restarts"].get<uint64_t>(), j["kills"].get<uint64_t>() - 1);
  // Published on SSD before the daemon's SIGKILL, served after its restart, byte-exact.
  EXPECT_EQ(j["canary"]["published"], 64);
  EXPECT_EQ(j["canary"]["recovered"], 64);
  EXPECT_EQ(j["canary"]["wrong_bytes"], 0);
  EXPECT_FALSE(j["fds"]["leak"].get<bool>()) << j["fds"].dump();
  EXPECT_LE(j["fds"]["end"].get<uint32_t>(), j["fds"]["idle_start"].get<uint32_t>() + 2);
  EXPECT_GT(j["rss"]["max_bytes"].get<uint64_t>(), 0u);
  EXPECT_FALSE(j["rss"]["judged"].get<bool>());  // 12 s: no warm-up is over
  EXPECT_EQ(j["daemon"]["exit_on_sigterm"], 0);
  EXPECT_TRUE(j["passed"].get<bool>()) << j["failures"].dump();
}

TEST(SoakTest, BadFlagsExitTwo) {
  const std::string soak = std::string(FLATCAKE_BINARY) + " soak ";
  EXPECT_EQ(RunCommand(soak + "--minutes 0 2>&1").status, 2);
  EXPECT_EQ(RunCommand(soak + "--minutes -1 2>&1").status, 2);
  EXPECT_EQ(RunCommand(soak + "--minutes 1 --restart-at 0.9 2>&1").status, 2);
  EXPECT_EQ(RunCommand(soak + "--clients 0 2>&1").status, 2);
  EXPECT_EQ(RunCommand(soak + "--ssd-bytes 0 2>&1").status, 2);
  EXPECT_EQ(RunCommand(soak + "--dram-bytes 1M 2>&1").status, 2);
}

}  // namespace
}  // namespace flatcake::cli::soak
