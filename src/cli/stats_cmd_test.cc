// `flatcake stats` against a metrics endpoint the test starts (DaemonMetrics on a free port of
// 127.0.0.1): the JSON summary's figures, the text report, the command's output and exit
// status, and an endpoint nobody serves.
#include "cli/stats_cmd.h"

#include <gtest/gtest.h>

#include <cmath>

#include "serve/metrics.h"

namespace flatcake::cli {
namespace {

using serve::DaemonMetrics;

// One endpoint for the suite: stopping one that has served takes civetweb about 2 s.
class StatsCommandTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!DaemonMetrics::Available()) return;
    Result<std::unique_ptr<DaemonMetrics>> m = DaemonMetrics::Create("127.0.0.1:0");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    metrics_ = m->release();
    Feed(*metrics_);
  }
  static void TearDownTestSuite() {
    delete metrics_;
    metrics_ = nullptr;
  }
  void SetUp() override {
    if (metrics_ == nullptr) GTEST_SKIP() << "built without prometheus-cpp";
    args_.metrics_addr = "127.0.0.1:" + std::to_string(metrics_->port());
  }

  static void Feed(DaemonMetrics& m) {
    StoreStats s;
    s.dram.capacity_bytes = 8 * kGiB;
    s.dram.used_bytes = 2 * kGiB;
    s.dram.blocks_live = 100;
    s.ssd.capacity_bytes = 64 * kGiB;
    s.ssd.used_bytes = 16 * kGiB;
    s.ssd.written_bytes = 5 * kGiB;
    s.ssd.reclaimed_bytes = kGiB;
    s.ssd.scopes_reclaimed = 4;
    s.io_errors = 2;
    m.Update(s);
    m.OnClientConnected("sglang");
    m.OnClientConnected("sglang");
    m.OnClientConnected("batch");
    m.OnRequest(serve::RequestType::kLookup);
    m.OnRequest(serve::RequestType::kPinRead);
    m.OnRequest(serve::RequestType::kPinRead);
    m.OnProtocolError(serve::ProtocolError::kBadFrame);
    m.OnPinRead(60, 30, 10);
    m.OnClientReads({.bytes_from_dram = kMiB,
                     .bytes_from_ssd = 2 * kMiB,
                     .ssd_bytes_read = 3 * kMiB,
                     .corrupt = 1});
    for (int i = 0; i < 90; ++i) m.ObserveRestore(MediaType::kDram, 0.0003);
    for (int i = 0; i < 10; ++i) m.ObserveRestore(MediaType::kDram, 0.02);
    m.ObserveRestore(MediaType::kSsd, 0.004);
    m.ObserveQueueWait(0.0015);
    m.SetRestoreQueue(3, 1);
    m.SetTenantUsage("sglang", MediaType::kDram, kGiB);
    m.SetTenantQuota("sglang", MediaType::kDram, 4 * kGiB);
    StoreInfo info;
    info.recovered_blocks = 500;
    info.recovered_segments = 5;
    info.recovered_bytes = 500 * kMiB;
    info.recovery_seconds = 0.75;
    m.SetRecovery(info);
  }

  static DaemonMetrics* metrics_;
  StatsArgs args_;
};
DaemonMetrics* StatsCommandTest::metrics_ = nullptr;

TEST_F(StatsCommandTest, JsonSummaryCarriesTheFigures) {
  const Result<nlohmann::json> r = FetchStatsSummary(args_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const nlohmann::json& s = *r;
  const nlohmann::json& dram = s["media"]["dram"];
  const nlohmann::json& ssd = s["media"]["ssd"];
  EXPECT_EQ(dram["capacity_bytes"], 8 * kGiB);
  EXPECT_EQ(dram["used_bytes"], 2 * kGiB);
  EXPECT_DOUBLE_EQ(dram["used_fraction"].get<double>(), 0.25);
  EXPECT_EQ(dram["blocks"], 100);
  EXPECT_EQ(dram["hits"], 60);
  EXPECT_EQ(dram["read_bytes"], kMiB);
  EXPECT_EQ(ssd["read_bytes"], 3 * kMiB);
  EXPECT_EQ(ssd["delivered_bytes"], 2 * kMiB);
  EXPECT_EQ(ssd["written_bytes"], 5 * kGiB);
  EXPECT_EQ(ssd["reclaimed_bytes"], kGiB);
  EXPECT_EQ(ssd["reclaimed_scopes"], 4);
  EXPECT_EQ(dram["restores"], 100);
  // 90 of 100 restores in (0.00025, 0.0005], 10 in (0.01, 0.025].
  const double p50 = dram["restore_p50_s"].get<double>();
  EXPECT_GT(p50, 0.00025);
  EXPECT_LE(p50, 0.0005);
  const double p99 = dram["restore_p99_s"].get<double>();
  EXPECT_GT(p99, 0.01);
  EXPECT_LE(p99, 0.025);
  EXPECT_EQ(ssd["restores"], 1);
  EXPECT_EQ(s["hits"], 90);
  EXPECT_EQ(s["misses"], 10);
  EXPECT_DOUBLE_EQ(s["hit_rate"].get<double>(), 0.9);
  EXPECT_EQ(s["queue"]["waiting"], 3);
  EXPECT_EQ(s["queue"]["admitted"], 1);
  EXPECT_EQ(s["queue"]["waits"], 1);
  EXPECT_GT(s["queue"]["wait_p50_s"].get<double>(), 0.001);
  EXPECT_EQ(s["clients"], 3);
  EXPECT_EQ(s["connections"], 3);
  EXPECT_EQ(s["tenants"]["sglang"]["clients"], 2);
  EXPECT_EQ(s["tenants"]["sglang"]["dram_used_bytes"], kGiB);
  EXPECT_EQ(s["tenants"]["sglang"]["dram_quota_bytes"], 4 * kGiB);
  EXPECT_EQ(s["tenants"]["sglang"]["ssd_quota_bytes"], 0);
  EXPECT_EQ(s["tenants"]["batch"]["clients"], 1);
  EXPECT_EQ(s["requests"]["pin_read"], 2);
  EXPECT_EQ(s["requests"]["lookup"], 1);
  EXPECT_EQ(s["requests"]["hello"], 0);
  EXPECT_EQ(s["protocol_errors"]["bad_frame"], 1);
  EXPECT_EQ(s["recovery"]["blocks"], 500);
  EXPECT_EQ(s["recovery"]["segments"], 5);
  EXPECT_EQ(s["recovery"]["bytes"], 500 * kMiB);
  EXPECT_DOUBLE_EQ(s["recovery"]["seconds"].get<double>(), 0.75);
  EXPECT_EQ(s["checksum_mismatches"], 1);
  EXPECT_EQ(s["io_errors"], 2);
}

TEST_F(StatsCommandTest, TextReportForAPerson) {
  const Result<nlohmann::json> r = FetchStatsSummary(args_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string text = FormatStatsSummary(*r, args_.metrics_addr);
  for (const char* part : {"flatcake daemon at 127.0.0.1:", "8.00 GiB", "25.0%", "5.00 GiB",
                           "90 hits (90.0%: dram 60.0%, ssd 30.0%), 10 misses",
                           "3 waiting, 1 admitted", "3 connected", "pin_read 2", "bad_frame 1",
                           "1.00 GiB / 4.00 GiB", "no limit", "500 blocks in 5 segments"}) {
    EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in:\n" << text;
  }
  EXPECT_EQ(text.find("rates:"), std::string::npos);
  // With the scrape before it, rates.
  nlohmann::json before = *r;
  before["media"]["ssd"]["written_bytes"] = 5 * kGiB - 100 * kMiB;
  before["requests"]["lookup"] = 0;
  const std::string watched = FormatStatsSummary(*r, args_.metrics_addr, &before, 2.0);
  EXPECT_NE(watched.find("ssd read 0.00 KiB/s, written 50.00 MiB/s; 0 requests/s"),
            std::string::npos)
      << watched;
}

TEST_F(StatsCommandTest, CommandPrintsOneJsonLine) {
  args_.json = true;
  testing::internal::CaptureStdout();
  const int rc = RunStats(args_);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.find('\n'), out.size() - 1) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["media"]["dram"]["capacity_bytes"], 8 * kGiB);
}

TEST(StatsCommand, AnUnreachableEndpointIsAClearErrorAndExitStatus1) {
  StatsArgs args;
  args.metrics_addr = "127.0.0.1:1";  // nobody listens on port 1
  args.timeout = std::chrono::milliseconds(2000);
  const Result<nlohmann::json> r = FetchStatsSummary(args);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot connect to 127.0.0.1:1"), std::string_view::npos)
      << r.status().ToString();
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  EXPECT_EQ(RunStats(args), 1);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(testing::internal::GetCapturedStdout().empty());
  EXPECT_NE(err.find("flatcake stats: IOError: cannot connect to 127.0.0.1:1"), std::string::npos)
      << err;
  args.metrics_addr = "nowhere";
  EXPECT_TRUE(FetchStatsSummary(args).status().IsInvalidArgument());
}

}  // namespace
}  // namespace flatcake::cli
