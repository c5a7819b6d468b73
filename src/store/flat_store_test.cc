#include "store/flat_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "io/fault_injection_io_engine.h"
#include "io/posix_io_engine.h"
#include "io/uring_io_engine.h"
#include "store/segment_layout.h"
#include "util/aligned_buffer.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake {
namespace {

constexpr KvLayout kLayout{4, 2, 16 * 1024};  // 128 KiB blocks

StoreOptions SmallOptions(const std::string& dir) {
  StoreOptions o;
  o.dram_bytes = 16 * kMiB;
  o.ssd_dirs = {dir};
  o.ssd_bytes = 64 * kMiB;
  o.ssd_file_bytes = 4 * kMiB;
  o.max_scopes = 256;
  o.io_engine = IoEngineKind::kPosix;
  return o;
}

class FlatStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = FlatStore::OpenWithEngine(SmallOptions(dir_.path()), nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    store_ = std::move(*r);
  }
  // Puts `keys` (filled with their deterministic content) on `medium`.
  PutResult PutKeys(const std::vector<Key>& keys, std::optional<MediaType> medium,
                    WriteHints hints = {}) {
    HostBlocks src(kLayout, keys.size());
    src.Fill(keys);
    hints.force_medium = medium;
    auto r = store_->Put(keys, kLayout, src.buffers(), hints);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : PutResult{};
  }
  // Gets `keys` and checks every found block byte for byte. Returns hits.
  uint32_t GetAndVerify(const std::vector<Key>& keys, GetResult* out = nullptr) {
    HostBlocks dst(kLayout, keys.size());
    std::memset(dst.bytes.data(), 0xEE, dst.bytes.size());
    auto r = store_->Get(keys, kLayout, dst.buffers());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return 0;
    std::vector<uint8_t> want(kLayout.block_bytes());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!r->found[i]) continue;
      FillBlock(keys[i], want.data(), want.size());
      EXPECT_EQ(0, std::memcmp(want.data(), dst.block(i), want.size())) << "block " << i;
    }
    if (out) *out = *r;
    return r->hits;
  }

  // Puts one turn of session `session` on SSD.
  void PutTurn(std::span<const Key> keys, const std::string& session) {
    HostBlocks src(kLayout, keys.size());
    src.Fill(std::vector<Key>(keys.begin(), keys.end()));
    WriteHints h;
    h.session = session;
    h.force_medium = MediaType::kSsd;
    auto r = store_->Put(keys, kLayout, src.buffers(), h);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->written, keys.size());
  }

  TempDir dir_;
  std::unique_ptr<FlatStore> store_;
};

// An index too large to allocate is refused with its size (it used to end the process in an
// uncaught std::bad_alloc), and leaves the pool directory usable.
TEST(FlatStoreOpenTest, AbsurdIndexCapacityIsRefusedNotFatal) {
  TempDir dir;
  StoreOptions o = SmallOptions(dir.path());
  o.index_capacity = uint64_t{1} << 40;
  auto r = FlatStore::OpenWithEngine(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNoSpace);
  EXPECT_NE(r.status().ToString().find("index_capacity"), std::string::npos)
      << r.status().ToString();
  o.index_capacity = 0;
  auto again = FlatStore::OpenWithEngine(o, nullptr);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

TEST_F(FlatStoreTest, RoundTripThroughBothMedia) {
  auto dram_keys = MakeKeys(1, 0, 20);
  auto ssd_keys = MakeKeys(2, 0, 20);
  EXPECT_EQ(PutKeys(dram_keys, MediaType::kDram).medium, MediaType::kDram);
  EXPECT_EQ(PutKeys(ssd_keys, MediaType::kSsd).medium, MediaType::kSsd);
  GetResult r;
  EXPECT_EQ(GetAndVerify(dram_keys, &r), 20u);
  EXPECT_EQ(r.bytes_from_dram, 20 * kLayout.block_bytes());
  EXPECT_EQ(GetAndVerify(ssd_keys, &r), 20u);
  EXPECT_EQ(r.bytes_from_ssd, 20 * kLayout.block_bytes());
  // One segment, 4 layers x 2 planes: the restore coalesces into one read of the whole segment.
  EXPECT_EQ(r.ssd_reads, 1u);
  // Mixed batch, with a missing key in the middle.
  std::vector<Key> mixed = {dram_keys[3], ssd_keys[5], KeyFromId(99, 99), ssd_keys[0]};
  EXPECT_EQ(GetAndVerify(mixed, &r), 3u);
  EXPECT_EQ(r.leading_hits, 2u);
  EXPECT_EQ(r.found, (std::vector<uint8_t>{1, 1, 0, 1}));
}

// Every kind from both media, into aligned and odd destinations, in restores small enough for
// cached stores and large enough (5 MiB, above FlatStore::kStreamingCopyBytes) for streaming ones.
TEST_F(FlatStoreTest, EveryBufferKindRoundTrips) {
  ASSERT_GE(40 * kLayout.block_bytes(), FlatStore::kStreamingCopyBytes);
  for (MediaType medium : {MediaType::kSsd, MediaType::kDram}) {
    for (uint64_t count : {6, 40}) {
      auto keys = MakeKeys(3 + static_cast<int>(medium), 1000 * count, count);
      PutKeys(keys, medium);
      for (uint64_t misalign : {7, 0}) {
        for (BufferKind kind : {BufferKind::kBlockContiguous, BufferKind::kBlockPlaneMajor,
                                BufferKind::kPlanePointers, BufferKind::kSlicePointers}) {
          SCOPED_TRACE(testing::Message()
                       << BufferKindName(kind) << (medium == MediaType::kSsd ? " SSD " : " DRAM ")
                       << count << " blocks, destination +" << misalign);
          const uint64_t per = PointersPerBlock(kind, kLayout);
          const uint64_t chunk = kLayout.block_bytes() / per;
          std::vector<uint8_t> mem(kLayout.block_bytes() * keys.size() + 4096 + misalign);
          uint8_t* base =
              mem.data() + (4096 - reinterpret_cast<uintptr_t>(mem.data()) % 4096) + misalign;
          std::vector<void*> ptrs;
          for (uint64_t i = 0; i < per * keys.size(); ++i) ptrs.push_back(base + i * chunk);
          BlockBuffers dst{kind, ptrs};
          auto r = store_->Get(keys, kLayout, dst);
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          EXPECT_EQ(r->hits, keys.size());
          // Compare slice by slice against the block-contiguous original.
          std::vector<uint8_t> want(kLayout.block_bytes());
          for (size_t b = 0; b < keys.size(); ++b) {
            FillBlock(keys[b], want.data(), want.size());
            for (uint32_t l = 0; l < kLayout.num_layers; ++l) {
              for (uint32_t p = 0; p < kLayout.num_planes; ++p) {
                const uint8_t* got = SliceAddress(dst, kLayout, b, l, p);
                const uint8_t* exp =
                    want.data() + (l * kLayout.num_planes + p) * kLayout.slice_bytes;
                ASSERT_EQ(0, std::memcmp(got, exp, kLayout.slice_bytes))
                    << " b" << b << " l" << l << " p" << p;
              }
            }
          }
        }
      }
    }
  }
}

// A destination laid out like the segment on disk ([layer][plane][block], aligned) takes the
// restore's read in place; block-contiguous 16 KiB slices are staged and copied.
TEST_F(FlatStoreTest, ReadsLandInPlaceWhenTheDestinationMatchesTheFile) {
  auto keys = MakeKeys(4, 0, 8);
  PutKeys(keys, MediaType::kSsd);
  const uint64_t s = kLayout.slice_bytes, n = keys.size();
  Result<AlignedBuffer> mem = AlignedBuffer::Allocate(kLayout.block_bytes() * n);
  ASSERT_TRUE(mem.ok());
  std::vector<void*> ptrs(n * kLayout.num_layers * kLayout.num_planes);
  for (uint64_t b = 0; b < n; ++b) {
    for (uint32_t l = 0; l < kLayout.num_layers; ++l) {
      for (uint32_t p = 0; p < kLayout.num_planes; ++p) {
        ptrs[(b * kLayout.num_layers + l) * kLayout.num_planes + p] =
            mem->data() + SegmentLayout(kLayout, n).SliceOffset(l, p, b);
      }
    }
  }
  const BlockBuffers dst{BufferKind::kSlicePointers, ptrs};
  auto r = store_->Get(keys, kLayout, dst);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hits, n);
  EXPECT_EQ(r->ssd_reads, 1u);
  EXPECT_EQ(r->ssd_reads_in_place, 1u);
  std::vector<uint8_t> want(kLayout.block_bytes());
  for (uint64_t b = 0; b < n; ++b) {
    FillBlock(keys[b], want.data(), want.size());
    for (uint32_t l = 0; l < kLayout.num_layers; ++l) {
      for (uint32_t p = 0; p < kLayout.num_planes; ++p) {
        ASSERT_EQ(0, std::memcmp(SliceAddress(dst, kLayout, b, l, p),
                                 want.data() + (l * kLayout.num_planes + p) * s, s))
            << "b" << b << " l" << l << " p" << p;
      }
    }
  }
  GetResult staged;
  EXPECT_EQ(GetAndVerify(keys, &staged), n);
  EXPECT_EQ(staged.ssd_reads, 1u);
  EXPECT_EQ(staged.ssd_reads_in_place, 0u);
}

TEST_F(FlatStoreTest, WriteOnceAndExistsCountsLeadingKeys) {
  auto keys = MakeKeys(4, 0, 8);
  EXPECT_EQ(PutKeys({keys.begin(), keys.begin() + 5}, MediaType::kSsd).written, 5u);
  EXPECT_EQ(store_->Exists(keys), 5u);
  PutResult again = PutKeys(keys, MediaType::kDram);
  EXPECT_EQ(again.already_present, 5u);
  EXPECT_EQ(again.written, 3u);
  EXPECT_EQ(store_->Exists(keys), 8u);
  std::vector<Key> gap = {keys[0], KeyFromId(7, 77), keys[1]};
  EXPECT_EQ(store_->Exists(gap), 1u);
  EXPECT_EQ(GetAndVerify(keys), 8u);
}

TEST_F(FlatStoreTest, BadInputIsRejectedAndTheStoreKeepsWorking) {
  auto keys = MakeKeys(5, 0, 4);
  PutKeys(keys, MediaType::kSsd);
  HostBlocks buf(kLayout, keys.size());
  // Wrong pointer count.
  BlockBuffers short_ptrs{BufferKind::kBlockContiguous, std::span<void* const>(buf.ptrs).first(3)};
  EXPECT_TRUE(store_->Get(keys, kLayout, short_ptrs).status().IsInvalidArgument());
  // Null pointer.
  std::vector<void*> with_null = buf.ptrs;
  with_null[2] = nullptr;
  auto st = store_->Put(MakeKeys(5, 100, 4), kLayout, {BufferKind::kBlockContiguous, with_null});
  EXPECT_TRUE(st.status().IsInvalidArgument());
  EXPECT_NE(st.status().message().find("null"), std::string::npos);
  // Layout differing from the stored one.
  KvLayout other{4, 2, 8 * 1024};
  auto bad = store_->Get(keys, other, buf.buffers());
  EXPECT_TRUE(bad.status().IsInvalidArgument());
  EXPECT_NE(bad.status().message().find("stored as"), std::string::npos);
  // Zero dimension.
  EXPECT_TRUE(store_->Get(keys, KvLayout{0, 2, 16}, buf.buffers()).status().IsInvalidArgument());
  // Unknown keys are misses, not errors.
  GetResult r;
  EXPECT_EQ(GetAndVerify(MakeKeys(6, 0, 3), &r), 0u);
  // A block too large for one pool file is refused, and leaves no session record behind.
  const uint64_t sessions = store_->GetStats().sessions;
  const KvLayout huge{64, 2, 64 * 1024};  // 8 MiB blocks, 4 MiB pool files
  std::vector<uint8_t> big(huge.block_bytes());
  void* one[] = {big.data()};
  WriteHints h;
  h.session = "too-big";
  auto refused = store_->Put(MakeKeys(7, 0, 1), huge, {BufferKind::kBlockContiguous, one}, h);
  EXPECT_TRUE(refused.status().IsInvalidArgument()) << refused.status().ToString();
  EXPECT_EQ(store_->GetStats().sessions, sessions);
  // Still usable.
  EXPECT_EQ(GetAndVerify(keys), 4u);
}

TEST_F(FlatStoreTest, WriteAmplificationIsExactlyOne) {
  for (int i = 0; i < 10; ++i) {
    PutKeys(MakeKeys(10 + i, 0, 7), i % 2 ? MediaType::kDram : MediaType::kSsd);
  }
  StoreStats s = store_->GetStats();
  EXPECT_GT(s.ssd.admitted_bytes, 0u);
  EXPECT_GT(s.dram.admitted_bytes, 0u);
  EXPECT_EQ(s.ssd.written_bytes, s.ssd.admitted_bytes);
  EXPECT_EQ(s.dram.written_bytes, s.dram.admitted_bytes);
}

TEST_F(FlatStoreTest, ChainInferenceJoinsTheSessionScope) {
  auto keys = MakeKeys(20, 0, 12);
  WriteHints first;
  PutKeys({keys.begin(), keys.begin() + 4}, MediaType::kSsd, first);
  WriteHints next;
  next.prefix_tail = keys[3];
  PutKeys({keys.begin() + 4, keys.begin() + 8}, MediaType::kSsd, next);
  next.prefix_tail = keys[7];
  PutKeys({keys.begin() + 8, keys.end()}, MediaType::kSsd, next);
  StoreStats s = store_->GetStats();
  EXPECT_EQ(s.ssd.scopes_live, 1u);  // one session, one SSD scope, three segments
  // An unrelated chain gets its own scope.
  PutKeys(MakeKeys(21, 0, 2), MediaType::kSsd);
  EXPECT_EQ(store_->GetStats().ssd.scopes_live, 2u);
  GetResult r;
  EXPECT_EQ(GetAndVerify(keys, &r), 12u);
  // Three segments in one file: at most one read per (segment, layer, plane) run, merged
  // further because the segments sit back to back.
  EXPECT_LE(r.ssd_reads, 3u * kLayout.num_layers * kLayout.num_planes);
}

TEST_F(FlatStoreTest, PlacementFollowsTable2) {
  StoreOptions o = store_->options();
  WriteHints h;
  h.session = "chat";
  EXPECT_EQ(PutKeys(MakeKeys(30, 0, 1), std::nullopt, h).medium, MediaType::kSsd);  // turn 1
  h.prior_reply_tokens = o.tau_tokens - 1;
  EXPECT_EQ(PutKeys(MakeKeys(30, 1, 1), std::nullopt, h).medium, MediaType::kDram);  // short turn
  h.prior_reply_tokens = o.tau_tokens;
  EXPECT_EQ(PutKeys(MakeKeys(30, 2, 1), std::nullopt, h).medium, MediaType::kSsd);  // long reply
  WriteHints shared;
  shared.shared_prefix = true;
  EXPECT_EQ(PutKeys(MakeKeys(31, 0, 1), std::nullopt, shared).medium, MediaType::kDram);
  WriteHints agent;
  agent.session = "agent";
  agent.turn = 3;
  agent.prior_reply_tokens = 10;
  agent.context_tokens = o.l_agent_tokens;
  EXPECT_EQ(PutKeys(MakeKeys(32, 0, 1), std::nullopt, agent).medium, MediaType::kSsd);
}

TEST_F(FlatStoreTest, FullDramSpillsToSsdAndReclaimsOldestScopesFirst) {
  // DRAM holds 128 blocks of 128 KiB; write 40 scopes of 8 blocks (2.5x DRAM).
  std::vector<std::vector<Key>> scopes;
  for (int i = 0; i < 40; ++i) {
    scopes.push_back(MakeKeys(100 + i, 0, 8));
    PutResult r = PutKeys(scopes.back(), MediaType::kDram);
    EXPECT_EQ(r.written, 8u);
  }
  StoreStats s = store_->GetStats();
  EXPECT_GT(s.dram.scopes_reclaimed, 0u);
  EXPECT_LE(s.dram.used_bytes, s.dram.capacity_bytes);
  // The newest scopes survive, the oldest were reclaimed whole.
  EXPECT_EQ(store_->Exists(scopes.back()), 8u);
  EXPECT_EQ(store_->Exists(scopes.front()), 0u);
  for (const auto& k : scopes) {
    size_t e = store_->Exists(k);
    EXPECT_TRUE(e == 0 || e == 8) << "a scope is reclaimed whole";
    if (e == 8) EXPECT_EQ(GetAndVerify(k), 8u);
  }
  EXPECT_EQ(s.dram.written_bytes, s.dram.admitted_bytes);
}

TEST_F(FlatStoreTest, ABatchLargerThanTheWatermarkReclaimMakesRoomForItself) {
  // A DRAM-only store of 128 blocks, 120 of them in one-block scopes. A batch of 40 needs more
  // than the watermark reclaim frees (down to 85%: 108 blocks used, 20 free) and, with nowhere
  // to spill, reclaims the oldest scopes until it fits, rather than fail with NoSpace.
  StoreOptions o = SmallOptions(dir_.path());
  o.ssd_dirs.clear();
  auto opened = FlatStore::OpenWithEngine(o, nullptr);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store_ = std::move(*opened);
  std::vector<std::vector<Key>> small;
  for (int i = 0; i < 120; ++i) {
    small.push_back(MakeKeys(500 + i, 0, 1));
    WriteHints h;
    h.session = "small-" + std::to_string(i);
    ASSERT_EQ(PutKeys(small.back(), MediaType::kDram, h).written, 1u);
  }
  const auto big = MakeKeys(700, 0, 40);
  WriteHints h;
  h.session = "big";
  EXPECT_EQ(PutKeys(big, MediaType::kDram, h).written, 40u);
  EXPECT_EQ(GetAndVerify(big), 40u);
  // The oldest scopes went, whole; the newest stayed.
  EXPECT_EQ(store_->Exists(small.front()), 0u);
  EXPECT_EQ(store_->Exists(small.back()), 1u);
  for (const auto& k : small) {
    if (store_->Exists(k) == 1) EXPECT_EQ(GetAndVerify(k), 1u);
  }
  // A batch larger than the medium still fails, clearly, having reclaimed only what the
  // watermark asks (whole scopes down to 85%), not everything (it cannot fit whatever is
  // freed); the store keeps serving what it holds.
  HostBlocks src(kLayout, 200);
  const auto huge = MakeKeys(900, 0, 200);
  src.Fill(huge);
  WriteHints force;
  force.force_medium = MediaType::kDram;
  auto r = store_->Put(huge, kLayout, src.buffers(), force);
  EXPECT_TRUE(r.status().IsNoSpace()) << r.status().ToString();
  EXPECT_GT(store_->GetStats().dram.used_bytes, o.dram_bytes / 2);
  EXPECT_EQ(GetAndVerify(small.back()), 1u);
}

TEST_F(FlatStoreTest, SmallScopesShareSsdFilesAndFullSsdReclaimsWholeScopes) {
  // 64 MiB of SSD in 4 MiB files; each scope of 8 blocks is 1 MiB, so four share a file and 40
  // fit without any reclamation (were a scope to own whole files, only 16 would).
  std::vector<std::vector<Key>> scopes;
  for (int i = 0; i < 40; ++i) {
    scopes.push_back(MakeKeys(200 + i, 0, 8));
    EXPECT_EQ(PutKeys(scopes.back(), MediaType::kSsd).written, 8u);
  }
  StoreStats s = store_->GetStats();
  EXPECT_EQ(s.ssd.scopes_reclaimed, 0u);
  EXPECT_EQ(s.ssd.used_bytes, 40 * kMiB);
  for (const auto& k : scopes) ASSERT_EQ(GetAndVerify(k), 8u);
  // Overfill: the oldest scopes go whole, the newest survive, nothing is written twice.
  for (int i = 40; i < 100; ++i) {
    scopes.push_back(MakeKeys(200 + i, 0, 8));
    EXPECT_EQ(PutKeys(scopes.back(), MediaType::kSsd).written, 8u);
  }
  s = store_->GetStats();
  EXPECT_GE(s.ssd.scopes_reclaimed, 36u);
  EXPECT_LE(s.ssd.used_bytes, s.ssd.capacity_bytes);
  EXPECT_EQ(s.ssd.written_bytes, s.ssd.admitted_bytes);
  EXPECT_EQ(store_->Exists(scopes.front()), 0u);
  EXPECT_EQ(GetAndVerify(scopes.back()), 8u);
  for (const auto& k : scopes) {
    const size_t e = store_->Exists(k);
    EXPECT_TRUE(e == 0 || e == 8) << "a scope is reclaimed whole";
    if (e == 8) EXPECT_EQ(GetAndVerify(k), 8u);
  }
}

TEST_F(FlatStoreTest, InterleavedSessionsShareFilesAndRestorePerSegment) {
  // One session written in five turns, another session's block written between turns: the two
  // share pool files, and the long session restores with one read per segment (its runs are
  // back to back within a segment; the other session's block separates segments by more than
  // Δgap).
  auto keys = MakeKeys(400, 0, 20);
  for (int t = 0; t < 5; ++t) {
    PutTurn(std::span(keys).subspan(t * 4, 4), "long");
    PutKeys(MakeKeys(500 + t, 0, 1), MediaType::kSsd);
  }
  GetResult r;
  EXPECT_EQ(GetAndVerify(keys, &r), 20u);
  EXPECT_EQ(r.ssd_reads, 5u);
  EXPECT_EQ(store_->GetStats().ssd.used_bytes, 25 * kLayout.block_bytes());
}

TEST_F(FlatStoreTest, AGrowingSessionContinuesWhereItsLastSegmentEnded) {
  // An older scope at the start of the pool is reclaimed, leaving a hole (set apart by another
  // session's scope) that first fit would hand to the next segment; the growing session instead
  // continues right after its own last segment, so its five turns restore as one read.
  auto old_keys = MakeKeys(600, 0, 2);
  PutTurn(old_keys, "old");
  PutTurn(MakeKeys(601, 0, 2), "other");
  auto keys = MakeKeys(602, 0, 10);
  PutTurn(std::span(keys).subspan(0, 2), "long");
  const uint64_t used = store_->GetStats().ssd.used_bytes;
  const double keep =
      static_cast<double>(used - 2 * kLayout.block_bytes()) / store_->GetStats().ssd.capacity_bytes;
  EXPECT_EQ(store_->Reclaim(MediaType::kSsd, keep), 2 * kLayout.block_bytes());
  ASSERT_EQ(store_->Exists(old_keys), 0u);
  for (int t = 1; t < 5; ++t) PutTurn(std::span(keys).subspan(t * 2, 2), "long");
  GetResult r;
  EXPECT_EQ(GetAndVerify(keys, &r), 10u);
  EXPECT_EQ(r.ssd_reads, 1u);  // 1.25 MiB, under the 4 MiB maximum read
}

TEST_F(FlatStoreTest, PinnedScopesAreNotReclaimed) {
  auto keys = MakeKeys(300, 0, 8);
  PutKeys(keys, MediaType::kDram);
  // Pin the scope the way a reader does, then try to reclaim everything.
  IndexEntry e;
  ASSERT_TRUE(store_ != nullptr);
  HostBlocks dst(kLayout, keys.size());
  RestoreOptions go;
  uint64_t freed_during = 0;
  go.on_layer = [&](uint32_t layer) {
    if (layer == 0) freed_during = store_->Reclaim(MediaType::kDram, 0.0);
  };
  auto r = store_->Get(keys, kLayout, dst.buffers(), go);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hits, 8u);
  EXPECT_EQ(freed_during, 0u);                            // the only scope was pinned by the reader
  EXPECT_GT(store_->Reclaim(MediaType::kDram, 0.0), 0u);  // unpinned now
  EXPECT_EQ(store_->Exists(keys), 0u);
  (void)e;
}

TEST(FlatStoreWrites, OutOfOrderWriteCompletionsNeverCorruptASegment) {
  // Many small staging chunks over several engine workers: completions arrive out of order, and
  // a staging buffer must not be refilled before its own write finished.
  TempDir dir;
  for (IoEngineKind engine : {IoEngineKind::kPreadv, IoEngineKind::kUring}) {
    if (engine == IoEngineKind::kUring && !UringIoEngine::CompiledIn()) continue;  // not built
    StoreOptions o = SmallOptions(dir.path());
    o.io_engine = engine;
    o.io_workers = 4;
    o.write_staging_bytes = 64 * kKiB;
    auto r = FlatStore::OpenWithEngine(o, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto keys = MakeKeys(700, 0, 24);  // one 3 MiB segment = 96 chunks of 32 KiB
    HostBlocks src(kLayout, keys.size());
    src.Fill(keys);
    WriteHints ssd;
    ssd.force_medium = MediaType::kSsd;
    ASSERT_TRUE((*r)->Put(keys, kLayout, src.buffers(), ssd).ok());
    HostBlocks dst(kLayout, keys.size());
    auto g = (*r)->Get(keys, kLayout, dst.buffers());
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->hits, keys.size()) << IoEngineKindName(engine);
    EXPECT_EQ(0, std::memcmp(dst.bytes.data(), src.bytes.data(), src.bytes.size()))
        << IoEngineKindName(engine);
  }
}

TEST(FlatStoreErrors, InjectedEioAndEnospcLeaveTheStoreUsable) {
  TempDir dir;
  auto fault = std::make_unique<FaultInjectionIoEngine>(std::make_unique<PosixIoEngine>());
  FaultInjectionIoEngine* inject = fault.get();
  auto r = FlatStore::OpenWithEngine(SmallOptions(dir.path()), std::move(fault));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  FlatStore& store = **r;
  auto good = MakeKeys(400, 0, 10);
  HostBlocks src(kLayout, 10);
  src.Fill(good);
  WriteHints ssd;
  ssd.force_medium = MediaType::kSsd;
  ASSERT_TRUE(store.Put(good, kLayout, src.buffers(), ssd).ok());

  // ENOSPC on write: a clear status, nothing published.
  inject->SetWriteError(ENOSPC);
  auto bad = MakeKeys(401, 0, 10);
  auto w = store.Put(bad, kLayout, src.buffers(), ssd);
  EXPECT_TRUE(w.status().IsNoSpace()) << w.status().ToString();
  EXPECT_EQ(store.Exists(bad), 0u);
  // EIO on write.
  inject->SetWriteError(EIO);
  w = store.Put(bad, kLayout, src.buffers(), ssd);
  EXPECT_TRUE(w.status().IsIOError()) << w.status().ToString();
  inject->ClearWrites();

  // EIO on read: the get fails clearly; the data is still there afterwards.
  inject->SetReadError(EIO);
  HostBlocks dst(kLayout, 10);
  auto g = store.Get(good, kLayout, dst.buffers());
  EXPECT_TRUE(g.status().IsIOError()) << g.status().ToString();
  inject->Clear();
  g = store.Get(good, kLayout, dst.buffers());
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->hits, 10u);
  EXPECT_EQ(0, std::memcmp(dst.bytes.data(), src.bytes.data(), src.bytes.size()));
  // The failed keys can be written once the fault is gone.
  EXPECT_TRUE(store.Put(bad, kLayout, src.buffers(), ssd).ok());
  EXPECT_EQ(store.Exists(bad), 10u);
}

// Writes `keys` (filled with their pattern) to SSD in one Put and returns the source blocks.
HostBlocks PutOnSsd(FlatStore& store, const std::vector<Key>& keys, const KvLayout& layout) {
  HostBlocks src(layout, keys.size());
  src.Fill(keys);
  WriteHints ssd;
  ssd.force_medium = MediaType::kSsd;
  const auto put = store.Put(keys, layout, src.buffers(), ssd);
  EXPECT_TRUE(put.ok()) << put.status().ToString();
  return src;
}

TEST(FlatStoreReads, LargeRestoreReportsEveryLayerOnceAndInOrder) {
  // 128 blocks x 16 layers x 2 planes = 4096 slices: the restore's first layer goes out as a
  // restore of its own, ahead of the rest (FlatStore::kSplitRestoreSlices). Every engine, with
  // its own completion threads, still reports layers 0..15 once each and in order, and corrupt
  // slices on disk are caught by the checksum in either restore.
  static_assert(FlatStore::kSplitRestoreSlices <= 4096);
  const KvLayout layout{16, 2, 4096};
  for (IoEngineKind engine : {IoEngineKind::kPosix, IoEngineKind::kPreadv, IoEngineKind::kUring}) {
    if (engine == IoEngineKind::kUring && !UringIoEngine::CompiledIn()) continue;  // not built
    SCOPED_TRACE(IoEngineKindName(engine));
    TempDir dir;
    StoreOptions o = SmallOptions(dir.path());
    o.io_engine = engine;
    auto made = FlatStore::OpenWithEngine(o, nullptr);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    FlatStore& store = **made;
    auto keys = MakeKeys(700, 0, 128);
    HostBlocks src = PutOnSsd(store, keys, layout);
    ASSERT_EQ(store.Exists(keys), keys.size());
    for (int corrupt = 0; corrupt < 2; ++corrupt) {
      if (corrupt == 1) {
        // The 4 MiB pool files hold one 32-block segment each, layer-major: run (l, p) is the
        // segment's 32 slices of layer l, plane p. Block 5's (0, 0) slice is read by the first
        // restore, block 9's (5, 1) slice by the second.
        const int fd = store.ssd_pool()->fds()[0];
        const SegmentLayout seg(layout, 32);
        for (const uint64_t off : {seg.SliceOffset(0, 0, 5), seg.SliceOffset(5, 1, 9)}) {
          alignas(4096) static uint8_t page[4096];
          const auto at = static_cast<off_t>(store.ssd_pool()->FileOffset(off));
          ASSERT_EQ(pread(fd, page, 4096, at), 4096);
          page[77] ^= 0xFF;
          ASSERT_EQ(pwrite(fd, page, 4096, at), 4096);
        }
      }
      HostBlocks dst(layout, keys.size());
      std::mutex mu;
      std::vector<uint32_t> layers;
      RestoreOptions go;
      go.on_layer = [&](uint32_t l) {
        std::lock_guard<std::mutex> lock(mu);
        layers.push_back(l);
      };
      auto g = store.Get(keys, layout, dst.buffers(), go);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      std::vector<uint32_t> want_layers(layout.num_layers);
      for (uint32_t l = 0; l < layout.num_layers; ++l) want_layers[l] = l;
      EXPECT_EQ(layers, want_layers);
      EXPECT_EQ(g->hits, keys.size() - 2 * corrupt);
      EXPECT_EQ(g->corrupt, 2u * corrupt);
      EXPECT_EQ(g->found[5], corrupt == 0);
      EXPECT_EQ(g->found[9], corrupt == 0);
      // Two restores: per segment one read of its layer 0 and one of the rest (each segment is
      // 4 MiB, one maximum read); a single restore would read each segment in one.
      EXPECT_EQ(g->ssd_reads, 2 * keys.size() * layout.block_bytes() / o.ssd_file_bytes);
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!g->found[i]) continue;
        EXPECT_EQ(0, std::memcmp(src.block(i), dst.block(i), layout.block_bytes())) << i;
      }
    }
  }
}

TEST(FlatStoreErrors, FailedFirstLayerOfASplitRestoreFailsTheGet) {
  // The first layer's restore fails (EIO on segment 0's layer 0): the Get fails clearly, layer 0
  // is never reported, and whatever layers are reported come in order (the rest of the restore is
  // cancelled; RestoreTest.CancelStopsIssuingAndWaitReturnsTheReason checks that mechanism). Once
  // the fault is gone the same Get succeeds.
  const KvLayout layout{16, 2, 4096};
  TempDir dir;
  auto fault = std::make_unique<FaultInjectionIoEngine>(std::make_unique<PosixIoEngine>());
  FaultInjectionIoEngine* inject = fault.get();
  auto made = FlatStore::OpenWithEngine(SmallOptions(dir.path()), std::move(fault));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  FlatStore& store = **made;
  auto keys = MakeKeys(701, 0, 128);
  HostBlocks src = PutOnSsd(store, keys, layout);
  ASSERT_EQ(store.Exists(keys), keys.size());
  FaultSpec spec;
  spec.file = 0;
  spec.range_begin = store.ssd_pool()->FileOffset(0);  // block 0's layer-0 slice
  spec.range_end = spec.range_begin + 4096;
  inject->SetReadFault(spec);
  std::vector<uint32_t> layers;
  RestoreOptions go;
  go.on_layer = [&](uint32_t l) { layers.push_back(l); };  // serialised by the store
  HostBlocks dst(layout, keys.size());
  auto g = store.Get(keys, layout, dst.buffers(), go);
  EXPECT_TRUE(g.status().IsIOError()) << g.status().ToString();
  EXPECT_TRUE(std::find(layers.begin(), layers.end(), 0u) == layers.end());
  EXPECT_TRUE(std::is_sorted(layers.begin(), layers.end()));
  inject->ClearReads();
  g = store.Get(keys, layout, dst.buffers());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->hits, keys.size());
  EXPECT_EQ(0, std::memcmp(dst.bytes.data(), src.bytes.data(), src.bytes.size()));
}

TEST(FlatStoreErrors, CorruptedBlockIsAMissAndCounted) {
  TempDir dir;
  auto r = FlatStore::OpenWithEngine(SmallOptions(dir.path()), nullptr);
  ASSERT_TRUE(r.ok());
  FlatStore& store = **r;
  auto keys = MakeKeys(500, 0, 4);
  HostBlocks src(kLayout, 4);
  src.Fill(keys);
  WriteHints ssd;
  ssd.force_medium = MediaType::kSsd;
  ASSERT_TRUE(store.Put(keys, kLayout, src.buffers(), ssd).ok());
  // Flip one byte of block 2's layer-1 slice on disk: segment run (l=1,p=0) starts at 2 runs.
  const int fd = store.ssd_pool()->fds()[0];
  const off_t off = static_cast<off_t>(
      store.ssd_pool()->FileOffset(SegmentLayout(kLayout, 4).SliceOffset(1, 0, 2) + 100));
  alignas(4096) static uint8_t page[4096];
  ASSERT_EQ(pread(fd, page, 4096, off / 4096 * 4096), 4096);
  page[off % 4096] ^= 0xFF;
  ASSERT_EQ(pwrite(fd, page, 4096, off / 4096 * 4096), 4096);
  HostBlocks dst(kLayout, 4);
  auto g = store.Get(keys, kLayout, dst.buffers());
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->found, (std::vector<uint8_t>{1, 1, 0, 1}));
  EXPECT_EQ(g->corrupt, 1u);
  EXPECT_EQ(store.GetStats().checksum_mismatches, 1u);
}

// The DRAM path hashes each slice as it copies it: a byte changed in the arena after the put is
// a miss, whichever copy order (per block or per run) and stores (cached or streaming) serve it.
TEST(FlatStoreErrors, CorruptedDramBlockIsAMissAndCounted) {
  TempDir dir;
  auto r = FlatStore::OpenWithEngine(SmallOptions(dir.path()), nullptr);
  ASSERT_TRUE(r.ok());
  FlatStore& store = **r;
  constexpr uint64_t kBlocks = 40;  // 5 MiB: restored whole, with streaming stores
  auto keys = MakeKeys(501, 0, kBlocks);
  HostBlocks src(kLayout, kBlocks);
  src.Fill(keys);
  WriteHints dram;
  dram.force_medium = MediaType::kDram;
  ASSERT_TRUE(store.Put(keys, kLayout, src.buffers(), dram).ok());
  // The first segment of a fresh store starts the arena: flip a byte of block 2's layer-1 slice.
  store.TEST_dram_arena()[SegmentLayout(kLayout, kBlocks).SliceOffset(1, 0, 2) + 100] ^= 0xFF;
  for (uint64_t n : {kBlocks, uint64_t{4}}) {
    for (BufferKind kind : {BufferKind::kBlockContiguous, BufferKind::kSlicePointers}) {
      SCOPED_TRACE(testing::Message() << n << " blocks into " << BufferKindName(kind));
      const uint64_t per = PointersPerBlock(kind, kLayout);
      HostBlocks dst(kLayout, n);
      std::vector<void*> ptrs;
      for (uint64_t i = 0; i < per * n; ++i) {
        ptrs.push_back(dst.bytes.data() + i * (kLayout.block_bytes() / per));
      }
      const uint64_t before = store.GetStats().checksum_mismatches;
      auto g = store.Get(std::span<const Key>(keys.data(), n), kLayout, BlockBuffers{kind, ptrs});
      ASSERT_TRUE(g.ok());
      EXPECT_EQ(g->corrupt, 1u);
      EXPECT_EQ(g->hits, n - 1);
      EXPECT_EQ(g->found[2], 0);
      EXPECT_EQ(g->found[3], 1);
      EXPECT_EQ(store.GetStats().checksum_mismatches, before + 1);
    }
  }
}

TEST(FlatStoreOpen, RefusesBadSsdDirectories) {
  StoreOptions o = SmallOptions("/nonexistent/flatcake");
  auto r = Store::Open(o);
  EXPECT_TRUE(r.status().IsNotFound());
  EXPECT_NE(r.status().message().find("/nonexistent/flatcake"), std::string::npos);
  TempDir dir;
  o = SmallOptions(dir.path());
  o.ssd_bytes = uint64_t{1} << 46;  // 64 TiB: more than this disk has
  o.ssd_file_bytes = uint64_t{1} << 36;
  r = Store::Open(o);
  EXPECT_TRUE(r.status().IsNoSpace()) << r.status().ToString();
  o = SmallOptions(dir.path() + "/file");
  ASSERT_EQ(0, system(("touch " + dir.path() + "/file").c_str()));
  EXPECT_TRUE(Store::Open(o).status().IsInvalidArgument());
  // Two stores cannot share a directory.
  auto a = Store::Open(SmallOptions(dir.path()));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(Store::Open(SmallOptions(dir.path())).status().code(), StatusCode::kBusy);
}

}  // namespace
}  // namespace flatcake
