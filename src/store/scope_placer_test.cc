#include "store/scope_placer.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "media/extent_allocator.h"
#include "store/plain_scope_host.h"

namespace flatcake {
namespace {

// 1 layer x 1 plane x 4 KiB: a segment of n blocks is exactly n * 4 KiB.
constexpr KvLayout kLayout{1, 1, 4 * kKiB};
constexpr uint64_t kBlock = 4 * kKiB;

// The placer's host: plain structs (store/plain_scope_host.h) that record each release.
class TestHost final : public PlainScopeHost {
 public:
  TestHost(uint64_t dram_bytes, uint64_t ssd_bytes, uint64_t ssd_file_bytes, uint32_t slots)
      : PlainScopeHost(dram_bytes, ssd_bytes, ssd_file_bytes, slots, kBlock) {}

  void ReleaseScope(uint32_t id, uint32_t retired_gen) override {
    released.push_back(id);
    EXPECT_EQ(scopes[id].gen, retired_gen + 1);
  }

  std::vector<uint32_t> released;  // slot ids, in release order
};

StoreOptions Options() {
  StoreOptions o;  // tau 512, l_agent 32768, 256 tokens per block, watermarks 0.95 / 0.85
  return o;
}

class ScopePlacerTest : public ::testing::Test {
 protected:
  // 64 KiB of DRAM (16 blocks), 1 MiB of SSD in 256 KiB files, 8 scope slots.
  ScopePlacerTest() : host_(64 * kKiB, 1 * kMiB, 256 * kKiB, 8), placer_(Options(), host_) {}

  // Places `n` blocks keyed (ns, 0..n-1) at time `now`; the writer's pin is dropped unless `pin`.
  Placement Place(uint32_t n, uint64_t ns, WriteHints hints, uint64_t now, bool pin = false) {
    std::vector<Key> keys;
    for (uint32_t i = 0; i < n; ++i) keys.push_back(KeyFromId(i, ns));
    Placement p;
    Status st = placer_.PlaceBatch(hints, keys, kLayout, n, now, &p);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (st.ok()) {
      host_.scopes[p.scope_id].blocks += n;  // "written and published"
      if (!pin) host_.scopes[p.scope_id].readers--;
    }
    return p;
  }
  static WriteHints Forced(const std::string& session, MediaType m) {
    WriteHints h;
    h.session = session;
    h.force_medium = m;
    return h;
  }

  TestHost host_;
  ScopePlacer placer_;
};

TEST_F(ScopePlacerTest, ReasonsFollowTable2) {
  WriteHints first;
  first.session = "chat";
  Placement p = Place(2, 1, first, 10);
  EXPECT_EQ(p.medium, MediaType::kSsd);
  EXPECT_EQ(p.reason, "first-turn");

  WriteHints second = first;
  second.prior_reply_tokens = 100;  // a short reply: the next turn is cheap to keep in DRAM
  p = Place(2, 2, second, 20);
  EXPECT_EQ(p.medium, MediaType::kDram);
  EXPECT_EQ(p.reason, "short-turn-chat");
  EXPECT_EQ(placer_.FindSession("chat")->turns, 2u);
  EXPECT_EQ(placer_.FindSession("chat")->context_tokens, 4u * 256);

  WriteHints third = first;
  third.prior_reply_tokens = 1000;
  EXPECT_EQ(Place(1, 3, third, 30).reason, "long-reply");
  WriteHints reply_unknown = first;
  EXPECT_EQ(Place(1, 4, reply_unknown, 40).reason, "reply-unknown");

  WriteHints shared;
  shared.shared_prefix = true;
  p = Place(1, 5, shared, 50);
  EXPECT_EQ(p.medium, MediaType::kDram);
  EXPECT_EQ(p.reason, "shared-prefix");

  WriteHints agent;
  agent.session = "agent";
  agent.context_tokens = 40000;
  EXPECT_EQ(Place(1, 6, agent, 60).reason, "agentic-long");

  p = Place(1, 7, Forced("tool", MediaType::kDram), 70);
  EXPECT_EQ(p.medium, MediaType::kDram);
  EXPECT_EQ(p.reason, "forced");
}

TEST_F(ScopePlacerTest, DisabledMediumFallsBackAndOversizedBlocksAreRefused) {
  TestHost ssd_only(0, 1 * kMiB, 256 * kKiB, 4);
  ScopePlacer placer(Options(), ssd_only);
  const Key key = KeyFromId(1);
  Placement p;
  ASSERT_TRUE(placer.PlaceBatch(Forced("s", MediaType::kDram), {&key, 1}, kLayout, 1, 0, &p).ok());
  EXPECT_EQ(p.medium, MediaType::kSsd);

  // A block larger than an SSD file is refused before anything is allocated, and the session it
  // would have started is not kept.
  const KvLayout huge{1, 1, 512 * kKiB};
  Placement q;
  Status st = placer.PlaceBatch(Forced("big", MediaType::kDram), {&key, 1}, huge, 1, 0, &q);
  EXPECT_TRUE(st.IsInvalidArgument()) << st.ToString();
  EXPECT_EQ(placer.FindSession("big"), nullptr);
  EXPECT_EQ(ssd_only.Used(MediaType::kSsd), kBlock);
}

TEST_F(ScopePlacerTest, SessionIsInferredFromThePrefixTail) {
  Placement a = Place(3, 1, WriteHints{}, 10);
  ASSERT_NE(placer_.FindSession("anon-1"), nullptr);
  WriteHints chained;
  chained.prefix_tail = KeyFromId(2, 1);  // the last key of the first batch
  chained.prior_reply_tokens = 600;       // long reply: stays on SSD, in the same scope
  Placement b = Place(2, 2, chained, 20);
  EXPECT_EQ(b.scope_id, a.scope_id);
  EXPECT_EQ(b.gen, a.gen);
  EXPECT_EQ(placer_.num_sessions(), 1u);
  EXPECT_EQ(placer_.FindSession("anon-1")->turns, 2u);
  // The tail moved to the second batch's last key: the first batch's tail chains no more.
  Placement c = Place(1, 3, chained, 30);
  EXPECT_NE(c.scope_id, a.scope_id);
  EXPECT_NE(placer_.FindSession("anon-2"), nullptr);
  EXPECT_EQ(placer_.num_sessions(), 2u);
}

TEST_F(ScopePlacerTest, ASessionsNextBatchLandsRightAfterItsLast) {
  // A hole before the first batch: first fit would put the second batch there.
  const uint64_t hole = *host_.alloc(MediaType::kSsd).Allocate(2 * kBlock);
  Placement a = Place(4, 1, Forced("s", MediaType::kSsd), 10);
  ASSERT_EQ(a.segments.size(), 1u);
  host_.alloc(MediaType::kSsd).Free(hole, 2 * kBlock);
  Placement b = Place(2, 2, Forced("s", MediaType::kSsd), 20);
  ASSERT_EQ(b.segments.size(), 1u);
  EXPECT_EQ(b.scope_id, a.scope_id);
  EXPECT_EQ(b.segments[0].seg.base, a.segments[0].seg.base + a.segments[0].seg.bytes);
  EXPECT_EQ(b.segments[0].segment_no, 1u);
  EXPECT_EQ(host_.scopes[a.scope_id].segments.size(), 2u);
  EXPECT_EQ(host_.ScopeUsedBytes(a.scope_id), 6 * kBlock);
}

TEST_F(ScopePlacerTest, SegmentsNeverSpanAnSsdFile) {
  // 80 blocks of 4 KiB over 256 KiB files (64 blocks each): two segments, 64 + 16.
  Placement p = Place(80, 1, Forced("s", MediaType::kSsd), 10);
  ASSERT_EQ(p.segments.size(), 2u);
  EXPECT_EQ(p.segments[0].seg.num_blocks, 64u);
  EXPECT_EQ(p.segments[1].seg.num_blocks, 16u);
  EXPECT_EQ(p.segments[1].first_block, 64u);
  EXPECT_EQ(p.segments[1].seg.base, 256 * kKiB);
}

TEST_F(ScopePlacerTest, FullDramSpillsToSsd) {
  Placement full = Place(16, 1, Forced("a", MediaType::kDram), 10, /*pin=*/true);
  EXPECT_EQ(full.medium, MediaType::kDram);
  EXPECT_EQ(host_.Used(MediaType::kDram), 64 * kKiB);
  // DRAM is full and its only scope pinned: nothing to reclaim, so the batch goes to SSD.
  Placement p = Place(2, 2, Forced("b", MediaType::kDram), 20);
  EXPECT_EQ(p.medium, MediaType::kSsd);
  EXPECT_TRUE(p.spilled);
  EXPECT_EQ(host_.ScopeMedium(p.scope_id), MediaType::kSsd);
  // The empty DRAM scope "b" started was given up (not reclaimed); "b" lives on through its SSD
  // scope.
  EXPECT_EQ(host_.released.size(), 1u);
  EXPECT_EQ(host_.reclaimed_scopes, 0u);
  EXPECT_TRUE(host_.ScopeLive(full.scope_id));
  const ScopePlacer::Session* b = placer_.FindSession("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->scope[static_cast<int>(MediaType::kDram)], ScopePlacer::kNoScope);
  EXPECT_EQ(b->scope[static_cast<int>(MediaType::kSsd)], p.scope_id);
}

TEST_F(ScopePlacerTest, HighWatermarkReclaimsOldestUnpinnedFirst) {
  Placement s1 = Place(4, 1, Forced("s1", MediaType::kDram), 10, /*pin=*/true);
  Placement s2 = Place(4, 2, Forced("s2", MediaType::kDram), 20);
  Placement s3 = Place(4, 3, Forced("s3", MediaType::kDram), 30);
  Placement s4 = Place(4, 4, Forced("s4", MediaType::kDram), 40);
  EXPECT_EQ(host_.Used(MediaType::kDram), 64 * kKiB);
  EXPECT_TRUE(host_.released.empty());
  // At 100% (>= 95%), down to 85% (54.4 KiB): the oldest, s1, is pinned; s2 is next and enough.
  Placement s5 = Place(2, 5, Forced("s5", MediaType::kDram), 50);
  EXPECT_EQ(s5.medium, MediaType::kDram);
  EXPECT_FALSE(s5.spilled);
  ASSERT_EQ(host_.released.size(), 1u);
  EXPECT_EQ(host_.released[0], s2.scope_id);
  EXPECT_EQ(host_.reclaimed_bytes, 4 * kBlock);
  EXPECT_EQ(host_.reclaimed_scopes, 1u);
  EXPECT_TRUE(host_.ScopeLive(s1.scope_id));
  EXPECT_TRUE(host_.ScopeLive(s3.scope_id));
  EXPECT_TRUE(host_.ScopeLive(s4.scope_id));
  EXPECT_EQ(host_.Used(MediaType::kDram), 56 * kKiB);
  // s2 had no other scope: forgotten, and its tail with it.
  EXPECT_EQ(placer_.FindSession("s2"), nullptr);
  EXPECT_NE(placer_.FindSession("s1"), nullptr);

  // An explicit reclaim to empty takes the rest in last-use order and leaves the pinned one.
  host_.released.clear();
  const uint64_t freed = placer_.Reclaim(MediaType::kDram, 0, ScopePlacer::kNoScope);
  EXPECT_EQ(freed, 10 * kBlock);
  EXPECT_EQ(host_.released, (std::vector<uint32_t>{s3.scope_id, s4.scope_id, s5.scope_id}));
  EXPECT_TRUE(host_.ScopeLive(s1.scope_id));
  EXPECT_EQ(host_.Used(MediaType::kDram), 4 * kBlock);
  EXPECT_EQ(placer_.num_sessions(), 1u);
}

TEST_F(ScopePlacerTest, NoSpaceReclaimsAndRetries) {
  // 16 blocks of SSD in one file.
  TestHost small(0, 64 * kKiB, 64 * kKiB, 4);
  ScopePlacer placer(Options(), small);
  std::vector<Key> keys;
  for (uint32_t i = 0; i < 14; ++i) keys.push_back(KeyFromId(i, 9));
  Placement a;
  ASSERT_TRUE(placer.PlaceBatch(Forced("a", MediaType::kSsd), keys, kLayout, 14, 10, &a).ok());
  small.scopes[a.scope_id].readers--;
  // 87.5%: under the high watermark (no reclaim before allocating), over the low one.
  EXPECT_EQ(small.Used(MediaType::kSsd), 14 * kBlock);
  // 8 blocks do not fit in the 2 left: the allocation fails (its halved first segment rolled
  // back), reclaims "a" and retries.
  Placement b;
  ASSERT_TRUE(
      placer.PlaceBatch(Forced("b", MediaType::kSsd), std::span(keys).first(8), kLayout, 8, 20, &b)
          .ok());
  EXPECT_EQ(small.released, std::vector<uint32_t>{a.scope_id});
  ASSERT_EQ(b.segments.size(), 1u);
  EXPECT_EQ(b.segments[0].seg.num_blocks, 8u);
  EXPECT_EQ(b.segments[0].segment_no, 0u);
  EXPECT_EQ(small.Used(MediaType::kSsd), 8 * kBlock);
  EXPECT_EQ(placer.FindSession("a"), nullptr);
}

TEST_F(ScopePlacerTest, RunningOutOfScopeSlotsReclaimsAboveTheLowWatermark) {
  TestHost two(64 * kKiB, 0, 0, 2);
  ScopePlacer placer(Options(), two);
  std::vector<Key> keys;
  for (uint32_t i = 0; i < 7; ++i) keys.push_back(KeyFromId(i));
  // Two scopes of 7 blocks: 87.5% of DRAM, over the low watermark.
  Placement p[3];
  for (int i = 0; i < 3; ++i) {
    const uint32_t n = i < 2 ? 7 : 2;
    ASSERT_TRUE(placer
                    .PlaceBatch(Forced("s" + std::to_string(i), MediaType::kDram),
                                std::span(keys).first(n), kLayout, n, 10 * (i + 1), &p[i])
                    .ok());
    two.scopes[p[i].scope_id].readers--;
  }
  // The third session took the slot of the first (the least recently used).
  EXPECT_EQ(two.released, std::vector<uint32_t>{p[0].scope_id});
  EXPECT_EQ(p[2].scope_id, p[0].scope_id);
  EXPECT_EQ(p[2].gen, p[0].gen + 1);
  EXPECT_EQ(placer.FindSession("s0"), nullptr);
  EXPECT_EQ(placer.num_sessions(), 2u);
  // Under the low watermark nothing is reclaimed for a slot: NoSpace.
  Placement q;
  Status st = placer.PlaceBatch(Forced("s3", MediaType::kDram), std::span(keys).first(1), kLayout,
                                1, 40, &q);
  EXPECT_TRUE(st.IsNoSpace()) << st.ToString();
  EXPECT_EQ(placer.FindSession("s3"), nullptr);
}

TEST_F(ScopePlacerTest, ASessionWithALiveScopeOnTheOtherMediumIsKept) {
  Placement ssd = Place(2, 1, Forced("s", MediaType::kSsd), 10);
  Placement dram = Place(2, 2, Forced("s", MediaType::kDram), 20);
  EXPECT_EQ(placer_.Reclaim(MediaType::kDram, 0, ScopePlacer::kNoScope), 2 * kBlock);
  ASSERT_NE(placer_.FindSession("s"), nullptr);
  EXPECT_EQ(placer_.FindSession("s")->scope[static_cast<int>(MediaType::kDram)],
            ScopePlacer::kNoScope);
  EXPECT_FALSE(host_.ScopeLive(dram.scope_id));
  EXPECT_EQ(placer_.Reclaim(MediaType::kSsd, 0, ScopePlacer::kNoScope), 2 * kBlock);
  EXPECT_EQ(placer_.FindSession("s"), nullptr);
  EXPECT_FALSE(host_.ScopeLive(ssd.scope_id));
  // Its tail is forgotten too: a batch chained to it starts a new anonymous session.
  WriteHints chained;
  chained.prefix_tail = KeyFromId(1, 2);
  Place(1, 3, chained, 30);
  EXPECT_NE(placer_.FindSession("anon-1"), nullptr);
}

TEST_F(ScopePlacerTest, RestoredSessionsChainAndKeepAnonymousNamesUnique) {
  auto id = host_.NewScope(MediaType::kSsd, kLayout, "anon-7", 5);
  ASSERT_TRUE(id.ok());
  const Key tail = KeyFromId(99);
  placer_.RestoreSession("anon-7", MediaType::kSsd, *id, host_.ScopeGeneration(*id), 3, 1500,
                         &tail);
  placer_.NoteRecoveredName("anon-9");  // a scope recovery had to drop
  WriteHints chained;
  chained.prefix_tail = tail;
  chained.prior_reply_tokens = 600;
  Placement p = Place(1, 1, chained, 10);
  EXPECT_EQ(p.scope_id, *id);
  EXPECT_EQ(placer_.FindSession("anon-7")->turns, 4u);
  EXPECT_EQ(placer_.FindSession("anon-7")->context_tokens, 1500u + 256);
  Place(1, 2, WriteHints{}, 20);
  EXPECT_NE(placer_.FindSession("anon-10"), nullptr);

  placer_.ForgetSessions();
  EXPECT_EQ(placer_.num_sessions(), 0u);
}

TEST_F(ScopePlacerTest, AbandonedBatchesGiveTheirExtentsBackAndKeepTheOthersNumbered) {
  const WriteHints dram = Forced("s", MediaType::kDram);
  Place(2, 1, dram, 10);  // published: segment 0
  std::vector<Key> keys = {KeyFromId(0, 2), KeyFromId(1, 2)};
  Placement a, b;  // two batches in flight in the same scope: segments 1 and 2
  ASSERT_TRUE(placer_.PlaceBatch(dram, keys, kLayout, 2, 20, &a).ok());
  ASSERT_TRUE(placer_.PlaceBatch(dram, keys, kLayout, 3, 30, &b).ok());
  ASSERT_EQ(a.scope_id, b.scope_id);
  const uint32_t id = a.scope_id;
  EXPECT_EQ(host_.Used(MediaType::kDram), 7 * kBlock);

  // The earlier one is abandoned: its extent is free, the later one keeps its number.
  placer_.AbandonSegments(id, a.segments);
  EXPECT_EQ(host_.Used(MediaType::kDram), 5 * kBlock);
  EXPECT_EQ(host_.ScopeUsedBytes(id), 5 * kBlock);
  ASSERT_EQ(host_.ScopeSegments(id).size(), 3u);
  EXPECT_TRUE(host_.ScopeSegments(id)[1].abandoned);
  // Then the later one: both go, and the scope's next segment follows its published one.
  placer_.AbandonSegments(id, b.segments);
  EXPECT_EQ(host_.ScopeSegments(id).size(), 1u);
  EXPECT_EQ(host_.Used(MediaType::kDram), 2 * kBlock);
  host_.Unpin(id);
  host_.Unpin(id);
  EXPECT_FALSE(placer_.ReleaseIfEmpty(id, a.gen)) << "it holds a published block";
  Placement c = Place(1, 3, dram, 40);
  EXPECT_EQ(c.segments[0].seg.base, host_.ScopeSegments(id)[0].bytes);
  // Reclaiming the scope frees what it still owns, once.
  EXPECT_EQ(placer_.Reclaim(MediaType::kDram, 0, ScopePlacer::kNoScope), 3 * kBlock);
  EXPECT_EQ(host_.Used(MediaType::kDram), 0u);
}

TEST_F(ScopePlacerTest, AScopeStartedForAnAbandonedBatchIsFreedWithItsSession) {
  std::vector<Key> keys = {KeyFromId(0, 9)};
  Placement p;
  ASSERT_TRUE(placer_.PlaceBatch(Forced("new", MediaType::kSsd), keys, kLayout, 1, 5, &p).ok());
  EXPECT_FALSE(placer_.ReleaseIfEmpty(p.scope_id, p.gen)) << "pinned by its writer";
  placer_.AbandonSegments(p.scope_id, p.segments);
  host_.Unpin(p.scope_id);
  EXPECT_TRUE(placer_.ReleaseIfEmpty(p.scope_id, p.gen));
  EXPECT_FALSE(host_.ScopeLive(p.scope_id));
  EXPECT_EQ(host_.Used(MediaType::kSsd), 0u);
  EXPECT_EQ(placer_.FindSession("new"), nullptr);
}

}  // namespace
}  // namespace flatcake
