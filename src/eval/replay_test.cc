#include "eval/replay.h"

#include <gtest/gtest.h>

#include "trace/workload_gen.h"
#include "util/temp_dir.h"

namespace flatcake::eval {
namespace {

std::vector<trace::TraceRequest> TinyAgentic() {
  auto o = trace::DefaultWorkloadOptions(trace::WorkloadKind::kAgentic);
  o.requests = 120;
  o.scale = 0.05;
  o.block_tokens = 64;
  o.concurrency = 4;
  auto r = trace::GenerateWorkload(trace::WorkloadKind::kAgentic, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<trace::TraceRequest>{};
}

ReplayOptions TinyOptions(ReplayPolicy policy, const std::string& dir) {
  ReplayOptions o;
  o.policy = policy;
  o.dir = dir;
  o.dram_bytes = 8 << 20;  // sessions outgrow DRAM
  o.ssd_bytes = 64 << 20;
  o.qps = 200;
  o.workers = 4;
  o.model.block_bytes = 64 << 10;
  o.model.prefill_tokens_per_s = 5e6;
  o.l_agent_tokens = 2048;  // scaled with the workload
  o.flat_file_bytes = 1 << 20;
  o.tiered.staging_bytes = 16 << 20;
  o.io_engine = IoEngineKind::kPreadv;
  return o;
}

class ReplayTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    reqs_ = new std::vector<trace::TraceRequest>(TinyAgentic());
    for (ReplayPolicy p : {ReplayPolicy::kFlat, ReplayPolicy::kTiered, ReplayPolicy::kDramOnly}) {
      TempDir dir("replay");
      auto r = RunReplay(*reqs_, TinyOptions(p, dir.path()));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      reports_[static_cast<int>(p)] = *r;
    }
  }
  static void TearDownTestSuite() { delete reqs_; }
  static const ReplayReport& Report(ReplayPolicy p) { return reports_[static_cast<int>(p)]; }
  static std::vector<trace::TraceRequest>* reqs_;
  static ReplayReport reports_[3];
};
std::vector<trace::TraceRequest>* ReplayTest::reqs_ = nullptr;
ReplayReport ReplayTest::reports_[3];

TEST_F(ReplayTest, EveryPolicyReplaysWithoutMismatchesOrErrors) {
  for (ReplayPolicy p : {ReplayPolicy::kFlat, ReplayPolicy::kTiered, ReplayPolicy::kDramOnly}) {
    const ReplayReport& r = Report(p);
    SCOPED_TRACE(r.policy);
    EXPECT_EQ(r.requests, reqs_->size());
    EXPECT_EQ(r.mismatches, 0u);
    EXPECT_EQ(r.errors, 0u) << r.first_error;
    EXPECT_GT(r.hit_rate_pct(), 0.0);
    EXPECT_NEAR(r.hit_dram_pct() + r.hit_ssd_pct(), r.hit_rate_pct(), 1e-9);
    EXPECT_EQ(r.input_tokens, r.hit_tokens_dram + r.hit_tokens_ssd + r.recomputed_tokens);
    EXPECT_GT(r.ttft_p99_s, 0.0);
    EXPECT_GE(r.ttft_p99_s, r.ttft_p50_s);
  }
}

TEST_F(ReplayTest, FlatWritesOnceAndReadsWhatItDelivers) {
  const ReplayReport& f = Report(ReplayPolicy::kFlat);
  EXPECT_GT(f.ssd_bytes_delivered, 0u) << "the workload must restore from SSD";
  EXPECT_EQ(f.ssd_bytes_written + f.dram_bytes_written, f.bytes_admitted);
  EXPECT_DOUBLE_EQ(f.write_amp, 1.0);
  EXPECT_GE(f.read_amp, 1.0);
  EXPECT_LE(f.read_amp, 1.05);
}

TEST_F(ReplayTest, TieredAmplifiesReadsAndWrites) {
  const ReplayReport& f = Report(ReplayPolicy::kFlat);
  const ReplayReport& t = Report(ReplayPolicy::kTiered);
  EXPECT_GT(t.evictions, 0u) << "sessions must outgrow DRAM";
  EXPECT_GT(t.ssd_bytes_delivered, 0u);
  EXPECT_GT(t.read_amp, f.read_amp);
  EXPECT_GT(t.write_amp, 1.0);  // eviction writes and promotions
}

TEST_F(ReplayTest, DramOnlyNeverTouchesSsd) {
  const ReplayReport& d = Report(ReplayPolicy::kDramOnly);
  EXPECT_EQ(d.ssd_bytes_read, 0u);
  EXPECT_EQ(d.ssd_bytes_written, 0u);
  EXPECT_EQ(d.hit_tokens_ssd, 0u);
  EXPECT_DOUBLE_EQ(d.write_amp, 1.0);
}

TEST(ReplayOptionsTest, RejectsBadInput) {
  std::vector<trace::TraceRequest> none;
  EXPECT_FALSE(RunReplay(none, ReplayOptions{}).ok());
  auto reqs = TinyAgentic();
  ReplayOptions o;
  o.policy = ReplayPolicy::kFlat;  // no directory
  EXPECT_FALSE(RunReplay(reqs, o).ok());
  o.dir = "/nonexistent/replay-dir";
  EXPECT_FALSE(RunReplay(reqs, o).ok());
  EXPECT_FALSE(ParseReplayPolicy("lru").ok());
  EXPECT_EQ(*ParseReplayPolicy("dram-only"), ReplayPolicy::kDramOnly);
}

TEST(DeriveHintsTest, ChainsMooncakeRequestsByPrefix) {
  std::vector<trace::TraceRequest> reqs(4);
  reqs[0].block_ids = {1, 2, 3};
  reqs[0].output_tokens = 100;
  reqs[1].block_ids = {1, 2, 4, 5};  // continues request 0 (ends at its second-to-last block)
  reqs[2].block_ids = {1, 9};        // shares only a system-prompt block: a new session
  reqs[3].block_ids = {7};
  auto h = DeriveHints(reqs);
  EXPECT_EQ(h[1].session, h[0].session);
  EXPECT_EQ(h[1].turn, 2u);
  EXPECT_EQ(h[1].prior_reply_tokens, 100);
  EXPECT_NE(h[2].session, h[0].session);
  EXPECT_EQ(h[2].turn, 1u);
  EXPECT_NE(h[3].session, h[2].session);
}

TEST(PercentileTest, NearestRank) {
  std::vector<double> v = {5, 1, 4, 2, 3};
  EXPECT_EQ(Percentile(v, 50), 3);
  EXPECT_EQ(Percentile(v, 99), 5);
  std::vector<double> e;
  EXPECT_EQ(Percentile(e, 50), 0);
}

}  // namespace
}  // namespace flatcake::eval
