#include "trace/trace_stats.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "testing/trace_files.h"

namespace flatcake::trace {
namespace {

TraceRequest Req(std::vector<uint64_t> ids, int64_t session = -1) {
  TraceRequest r;
  r.block_ids = std::move(ids);
  r.input_tokens = r.block_ids.size() * 16;
  r.session_id = session;
  r.block_tokens = 16;
  return r;
}

// Worked by hand:
//   r0 [1,2,3]    3 new
//   r1 [1,2,4]    1,2 hit at distance 1; 4 new
//   r2 [5]        new
//   r3 [1,2,4,4]  the repeated 4 counts once; 1,2 (last r1) and 4 (last r1) hit at distance 2
//   r4 [6,3]      6 new; 3 (last r0) hits at distance 4
// accesses 3+3+1+3+2 = 12, hits 6 -> 50%; unique 6; uses 1:3 2:3 3:2 4:2 5:1 6:1 -> once 2/6;
// distances {1,1,2,2,2,4}: mean 2, between 1, P50 = 3rd = 2, P90 = P99 = 6th = 4;
// top 10% = ceil(0.6) = 1 block with 3 uses -> 3/12 = 25%; 12/5 = 2.4 blocks per request.
TEST(TraceStats, HandWorkedExample) {
  std::vector<TraceRequest> t = {Req({1, 2, 3}, 7), Req({1, 2, 4}, 7), Req({5}, 8),
                                 Req({1, 2, 4, 4}, 7), Req({6, 3})};
  TraceStats s = ComputeTraceStats(t);
  EXPECT_EQ(s.requests, 5u);
  EXPECT_EQ(s.block_accesses, 12u);
  EXPECT_EQ(s.hits, 6u);
  EXPECT_EQ(s.unique_blocks, 6u);
  EXPECT_EQ(s.once_blocks, 2u);
  EXPECT_DOUBLE_EQ(s.hit_rate_pct, 50.0);
  EXPECT_NEAR(s.once_access_pct, 100.0 / 3, 1e-9);
  EXPECT_DOUBLE_EQ(s.reuse_mean, 2.0);
  EXPECT_DOUBLE_EQ(s.reuse_mean_between, 1.0);
  EXPECT_EQ(s.reuse_p50, 2u);
  EXPECT_EQ(s.reuse_p90, 4u);
  EXPECT_EQ(s.reuse_p99, 4u);
  EXPECT_DOUBLE_EQ(s.top10_share_pct, 25.0);
  EXPECT_DOUBLE_EQ(s.mean_blocks_per_request, 2.4);
  EXPECT_EQ(s.sessions, 2u);
}

// 100 requests share block 0 (99 hits at distance 1); the last also reuses block 1 from the
// first (one hit at distance 99). Nearest-rank P99 is the 99th of 100 sorted distances = 1,
// where linear interpolation would give 1.98. Mean = (99 + 99) / 100 = 1.98.
TEST(TraceStats, P99IsNearestRank) {
  std::vector<TraceRequest> t;
  t.push_back(Req({0, 1}));
  for (int i = 1; i < 99; ++i) t.push_back(Req({0}));
  t.push_back(Req({0, 1}));
  TraceStats s = ComputeTraceStats(t);
  EXPECT_EQ(s.hits, 100u);
  EXPECT_EQ(s.reuse_p99, 1u);
  EXPECT_NEAR(s.reuse_mean, 1.98, 1e-12);
  EXPECT_EQ(s.once_blocks, 0u);
}

TEST(TraceStats, EmptyAndAllNew) {
  TraceStats empty = ComputeTraceStats(std::vector<TraceRequest>{});
  EXPECT_EQ(empty.requests, 0u);
  EXPECT_EQ(empty.hit_rate_pct, 0.0);
  // The id UINT64_MAX is a valid block id (it is the table's empty marker internally).
  TraceStats s = ComputeTraceStats({Req({UINT64_MAX, 3}), Req({UINT64_MAX})});
  EXPECT_EQ(s.unique_blocks, 2u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.once_blocks, 1u);
}

TEST(TraceStats, GrowsPastTheInitialTable) {
  // 200k distinct ids force several rehashes; each is reused once by the next request.
  std::vector<TraceRequest> t;
  for (uint64_t i = 0; i < 1000; ++i) {
    std::vector<uint64_t> ids;
    for (uint64_t k = 0; k < 200; ++k) ids.push_back(i * 200 + k);
    t.push_back(Req(ids));
    t.push_back(Req(std::move(ids)));
  }
  TraceStats s = ComputeTraceStats(t);
  EXPECT_EQ(s.unique_blocks, 200000u);
  EXPECT_EQ(s.hits, 200000u);
  EXPECT_DOUBLE_EQ(s.hit_rate_pct, 50.0);
  EXPECT_EQ(s.reuse_p99, 1u);
}

TEST(TraceStats, JsonHasTheTableOneFields) {
  std::string j = TraceStatsJson(ComputeTraceStats({Req({1}), Req({1})}), "a\"b", 3);
  for (const char* key : {"\"requests\": 2", "\"unique_blocks\": 1", "\"once_access_pct\": 0.00",
                          "\"reuse_mean\": 1.00", "\"reuse_p99\": 1", "\"hit_rate_pct\": 50.00",
                          "\"bad_lines\": 3", "\"file\": \"a\\\"b\""}) {
    EXPECT_NE(j.find(key), std::string::npos) << key << " in " << j;
  }
}

std::string Fixed2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

// The reference values of the shared Mooncake traces (README and the paper's Table 1).
TEST(TraceStats, SharedMooncakeTracesMatchTableOne) {
  FC_REQUIRE_SHARED_TRACES(dir);
  auto t0 = std::chrono::steady_clock::now();
  auto conv = ComputeTraceStats(dir + "/mooncake_conversation_trace.jsonl", {});
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(conv.ok()) << conv.status().ToString();
  EXPECT_EQ(conv->requests, 12031u);
  EXPECT_EQ(conv->unique_blocks, 182790u);
  EXPECT_EQ(Fixed2(conv->once_access_pct), "75.85");
  EXPECT_EQ(Fixed2(conv->reuse_mean), "727.63");
  EXPECT_EQ(conv->reuse_p99, 5527u);
  EXPECT_EQ(Fixed2(conv->hit_rate_pct), "36.64");
  EXPECT_EQ(conv->block_accesses, 288500u);
  EXPECT_EQ(conv->hits, 105710u);
  EXPECT_EQ(conv->reuse_p50, 384u);
  EXPECT_EQ(conv->reuse_p90, 1748u);
  // "Well under a second" on this machine; generous for a loaded box or a sanitizer build.
  EXPECT_LT(secs, 5.0);

  auto syn = ComputeTraceStats(dir + "/mooncake_synthetic_trace.jsonl", {});
  ASSERT_TRUE(syn.ok()) << syn.status().ToString();
  EXPECT_EQ(syn->requests, 3993u);
  EXPECT_EQ(syn->unique_blocks, 43924u);
  EXPECT_EQ(Fixed2(syn->once_access_pct), "58.45");
  EXPECT_EQ(Fixed2(syn->reuse_mean), "430.45");
  EXPECT_EQ(syn->reuse_p99, 2235u);
  EXPECT_EQ(Fixed2(syn->hit_rate_pct), "63.96");
  EXPECT_EQ(syn->reuse_p50, 233u);
  EXPECT_EQ(syn->reuse_p90, 1100u);
}

}  // namespace
}  // namespace flatcake::trace
