#include "trace/workload_gen.h"

#include <gtest/gtest.h>

#include <unordered_set>

#include "testing/trace_files.h"
#include "trace/trace_stats.h"
#include "util/temp_dir.h"

namespace flatcake::trace {
namespace {

std::vector<TraceRequest> Gen(WorkloadKind kind, WorkloadOptions o) {
  auto r = GenerateWorkload(kind, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<TraceRequest>{};
}

std::string ToJsonl(const std::vector<TraceRequest>& reqs, bool extra) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  EXPECT_TRUE(WriteMooncakeJsonl(reqs, extra, f).ok());
  std::fclose(f);
  std::string out(buf, len);
  std::free(buf);
  return out;
}

// Structural invariants every generated trace must hold, whatever the knobs.
void CheckInvariants(const std::vector<TraceRequest>& reqs, uint32_t block_tokens, bool chat) {
  uint64_t next_new_id = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const TraceRequest& r = reqs[i];
    ASSERT_EQ(r.block_ids.size(), (r.input_tokens + block_tokens - 1) / block_tokens) << i;
    ASSERT_EQ(r.block_tokens, block_tokens);
    if (i > 0) ASSERT_GE(r.time_s, reqs[i - 1].time_s) << i;
    ASSERT_LT(r.parent, static_cast<int64_t>(i));
    ASSERT_GE(r.turn, 1);
    std::unordered_set<uint64_t> seen;
    for (uint64_t id : r.block_ids) {
      ASSERT_TRUE(seen.insert(id).second) << "id repeats within request " << i;
      // Dense ids in order of first use.
      ASSERT_LE(id, next_new_id);
      if (id == next_new_id) ++next_new_id;
    }
    if (r.parent >= 0) {
      const TraceRequest& p = reqs[r.parent];
      ASSERT_EQ(r.session_id, p.session_id);
      ASSERT_EQ(r.turn, p.turn + 1);
      ASSERT_GE(r.time_s, p.time_s);
      if (chat) {
        // A chat turn extends its parent's prompt: every full block of the parent (all but its
        // last, partly filled one) is a prefix of the child.
        ASSERT_GE(r.block_ids.size() + 1, p.block_ids.size());
        for (size_t k = 0; k + 1 < p.block_ids.size(); ++k) {
          ASSERT_EQ(r.block_ids[k], p.block_ids[k]) << i << " block " << k;
        }
      } else {
        // Agent steps drop the parent's ephemeral suffix and may compact, but always keep the
        // system prompt (longer than a block in these tests) in front.
        ASSERT_EQ(r.block_ids[0], p.block_ids[0]) << i;
      }
    }
  }
}

TEST(WorkloadGen, SameSeedSameBytesOtherSeedDiffers) {
  for (WorkloadKind kind :
       {WorkloadKind::kAgentic, WorkloadKind::kConversation, WorkloadKind::kApi}) {
    WorkloadOptions o = DefaultWorkloadOptions(kind);
    o.requests = 300;
    o.scale = 0.1;
    o.seed = 42;
    std::string a = ToJsonl(Gen(kind, o), true);
    std::string b = ToJsonl(Gen(kind, o), true);
    EXPECT_EQ(a, b) << WorkloadKindName(kind);
    o.seed = 43;
    EXPECT_NE(a, ToJsonl(Gen(kind, o), true)) << WorkloadKindName(kind);
  }
}

TEST(WorkloadGen, InvariantsHoldForEveryKind) {
  for (WorkloadKind kind :
       {WorkloadKind::kAgentic, WorkloadKind::kConversation, WorkloadKind::kApi}) {
    WorkloadOptions o = DefaultWorkloadOptions(kind);
    o.requests = 800;
    o.scale = 0.2;
    auto reqs = Gen(kind, o);
    ASSERT_EQ(reqs.size(), 800u) << WorkloadKindName(kind);
    CheckInvariants(reqs, o.block_tokens, kind != WorkloadKind::kAgentic);
  }
  // Agentic with concurrency and heavy sub-agent use still holds them.
  WorkloadOptions o = DefaultWorkloadOptions(WorkloadKind::kAgentic);
  o.requests = 600;
  o.scale = 0.05;
  o.concurrency = 3;
  o.subagent_prob = 1.0;
  o.subagent_replay = 1.0;
  o.block_tokens = 16;
  auto reqs = Gen(WorkloadKind::kAgentic, o);
  ASSERT_EQ(reqs.size(), 600u);
  CheckInvariants(reqs, 16, false);
}

TEST(WorkloadGen, WrittenTraceReadsBackIdentically) {
  WorkloadOptions o = DefaultWorkloadOptions(WorkloadKind::kConversation);
  o.requests = 500;
  o.block_tokens = 256;  // not the reader's Mooncake default: it must come from the file
  auto reqs = Gen(WorkloadKind::kConversation, o);
  TempDir dir("flatcake-trace-test");
  std::string path = dir.File("gen.jsonl");
  testing::WritePlain(path, ToJsonl(reqs, true));
  auto back = ReadTrace(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ((*back)[i].block_ids, reqs[i].block_ids);
    EXPECT_DOUBLE_EQ((*back)[i].time_s, reqs[i].time_s);
    EXPECT_EQ((*back)[i].session_id, reqs[i].session_id);
    EXPECT_EQ((*back)[i].parent, reqs[i].parent);
    EXPECT_EQ((*back)[i].turn, reqs[i].turn);
    EXPECT_EQ((*back)[i].output_tokens, reqs[i].output_tokens);
    EXPECT_EQ((*back)[i].block_tokens, reqs[i].block_tokens);
  }
  std::string plain = ToJsonl(reqs, false);
  EXPECT_EQ(plain.find("session_id"), std::string::npos);
}

TEST(WorkloadGen, RejectsBadOptions) {
  WorkloadOptions o = DefaultWorkloadOptions(WorkloadKind::kAgentic);
  auto expect_bad = [](WorkloadKind kind, WorkloadOptions bad) {
    EXPECT_TRUE(GenerateWorkload(kind, bad).status().IsInvalidArgument());
  };
  WorkloadOptions b = o;
  b.requests = 0;
  expect_bad(WorkloadKind::kAgentic, b);
  b = o;
  b.block_tokens = 0;
  expect_bad(WorkloadKind::kAgentic, b);
  b = o;
  b.scale = -1;
  expect_bad(WorkloadKind::kAgentic, b);
  b = o;
  b.one_shot = 1.0;
  expect_bad(WorkloadKind::kAgentic, b);
  b = o;
  b.turns = 0.5;
  expect_bad(WorkloadKind::kAgentic, b);
  b = o;
  b.max_context = 1000;  // below system + summary
  expect_bad(WorkloadKind::kAgentic, b);
  b = DefaultWorkloadOptions(WorkloadKind::kApi);
  b.rate = 0;
  expect_bad(WorkloadKind::kApi, b);
  EXPECT_TRUE(ParseWorkloadKind("chat").status().IsInvalidArgument());
  EXPECT_EQ(*ParseWorkloadKind("api"), WorkloadKind::kApi);
}

// The defaults are tuned to land near the paper's Table 1 rows; the bands are wide enough for
// seed-to-seed variation and narrow enough to catch a broken model.
TEST(WorkloadGen, AgenticDefaultsLandNearTheClaudeCodeTrace) {
  WorkloadOptions o = DefaultWorkloadOptions(WorkloadKind::kAgentic);
  auto reqs = Gen(WorkloadKind::kAgentic, o);
  TraceStats s = ComputeTraceStats(reqs);
  EXPECT_GT(s.hit_rate_pct, 97.0);
  EXPECT_LT(s.hit_rate_pct, 99.5);
  EXPECT_GT(s.once_access_pct, 10.0);
  EXPECT_LT(s.once_access_pct, 25.0);
  EXPECT_GE(s.reuse_mean, 1.0);
  EXPECT_LT(s.reuse_mean, 3.0);
  EXPECT_GE(s.reuse_p99, 4u);
  EXPECT_LE(s.reuse_p99, 30u);
  EXPECT_GT(s.mean_blocks_per_request, 2000);
  EXPECT_LT(s.mean_blocks_per_request, 5000);
  // Scale shrinks contexts roughly in proportion.
  o.scale = 0.1;
  TraceStats small = ComputeTraceStats(Gen(WorkloadKind::kAgentic, o));
  EXPECT_LT(small.mean_blocks_per_request, s.mean_blocks_per_request / 5);
  EXPECT_GT(small.hit_rate_pct, 93.0);
}

TEST(WorkloadGen, ConversationDefaultsLandNearMooncakeConversation) {
  TraceStats s = ComputeTraceStats(
      Gen(WorkloadKind::kConversation, DefaultWorkloadOptions(WorkloadKind::kConversation)));
  EXPECT_NEAR(s.once_access_pct, 76.0, 5.0);
  EXPECT_NEAR(s.hit_rate_pct, 37.0, 5.0);
  EXPECT_GT(s.reuse_mean, 200.0);
  EXPECT_LT(s.reuse_mean, 1500.0);
  EXPECT_GT(s.sessions, 1000u);
}

TEST(WorkloadGen, ApiDefaultsAreMostlyOneShot) {
  TraceStats s =
      ComputeTraceStats(Gen(WorkloadKind::kApi, DefaultWorkloadOptions(WorkloadKind::kApi)));
  EXPECT_GT(s.once_access_pct, 90.0);
  EXPECT_GT(s.hit_rate_pct, 30.0);  // shared system prompts
  EXPECT_GT(s.sessions, 4500u);     // ~97% of sessions are a single request
}

}  // namespace
}  // namespace flatcake::trace
