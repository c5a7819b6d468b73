#include "baseline/tiered_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "baseline/tiered_store_adapter.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake::baseline {
namespace {

// 4 layers x 2 planes x 2 KiB = 16 KiB per block (4 pages).
const KvLayout kLayout{4, 2, 2048};
constexpr uint64_t kBlock = 16 * kKiB;

TieredStoreOptions SmallOptions(const std::string& dir) {
  TieredStoreOptions o;
  o.dram_bytes = 64 * kBlock;  // watermark 0.95 -> evicts at 61 blocks down to 57
  o.huge_pages = HugePageMode::kNone;
  if (!dir.empty()) o.ssd_dirs = {dir};
  o.bucket_bytes = 16 * kBlock;
  o.bucket_keys = 8;  // the key limit closes buckets first here
  o.ssd_bytes = 4 * o.bucket_bytes;
  o.staging_bytes = 32 * kBlock;
  o.io_engine = IoEngineKind::kPreadv;
  return o;
}

void PutRange(TieredStore& s, uint64_t ns, uint64_t first, uint64_t n) {
  auto keys = MakeKeys(ns, first, n);
  HostBlocks b(kLayout, n);
  b.Fill(keys);
  ASSERT_TRUE(s.Put(keys, kLayout, b.buffers()).ok());
}

// Reads keys and checks every delivered byte; returns the result.
TieredGetResult GetAndVerify(TieredStore& s, uint64_t ns, uint64_t first, uint64_t n,
                             double timeout = 5.0) {
  auto keys = MakeKeys(ns, first, n);
  HostBlocks got(kLayout, n), want(kLayout, n);
  want.Fill(keys);
  auto r = s.Get(keys, kLayout, got.buffers(), timeout);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  for (uint64_t i = 0; i < n; ++i) {
    if (r->found[i]) {
      EXPECT_EQ(0, std::memcmp(got.block(i), want.block(i), kBlock)) << "block " << i;
    }
  }
  return *r;
}

TEST(TieredStoreTest, AdmitsEveryBlockToDram) {
  TempDir dir("tiered");
  auto s = TieredStore::Open(SmallOptions(dir.path()));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  PutRange(**s, 1, 0, 10);
  EXPECT_EQ((*s)->Exists(MakeKeys(1, 0, 12)), 10u);
  auto st = (*s)->GetStats();
  EXPECT_EQ(st.dram.admitted_bytes, 10 * kBlock);
  EXPECT_EQ(st.dram.written_bytes, 10 * kBlock);
  EXPECT_EQ(st.ssd.written_bytes, 0u);
  auto r = GetAndVerify(**s, 1, 0, 10);
  EXPECT_EQ(r.dram_hits, 10u);
  EXPECT_EQ(r.leading_hits, 10u);
  // A second Put of present keys admits nothing.
  uint32_t admitted = 99;
  auto keys = MakeKeys(1, 0, 10);
  HostBlocks b(kLayout, 10);
  b.Fill(keys);
  ASSERT_TRUE((*s)->Put(keys, kLayout, b.buffers(), &admitted).ok());
  EXPECT_EQ(admitted, 0u);
}

TEST(TieredStoreTest, LruEvictionOffloadsInEvictionOrderIntoBuckets) {
  TempDir dir("tiered");
  auto s = TieredStore::Open(SmallOptions(dir.path()));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  PutRange(**s, 1, 0, 40);
  // Touch the first 8 so that they are the most recently used.
  GetAndVerify(**s, 1, 0, 8);
  PutRange(**s, 2, 0, 30);  // 70 blocks > 61: eviction
  auto st = (*s)->GetStats();
  EXPECT_GT(st.evictions, 0u);
  EXPECT_EQ(st.offloads, st.evictions);
  EXPECT_EQ(st.ssd.written_bytes, st.offloads * kBlock);
  EXPECT_LE(st.dram.used_bytes, 0.95 * 64 * kBlock);
  // Bucket key limit 8: every 8 offloads open a new bucket.
  EXPECT_EQ(st.buckets_written, (st.offloads + 7) / 8);
  // The recently touched blocks stayed in DRAM; the LRU ones (8..) went to SSD first.
  auto hot = GetAndVerify(**s, 1, 0, 8);
  EXPECT_EQ(hot.dram_hits, 8u);
  auto cold = GetAndVerify(**s, 1, 8, 4);
  EXPECT_EQ(cold.ssd_hits, 4u);
  // Consecutively evicted blocks sit adjacent in one bucket: one merged read.
  EXPECT_EQ(cold.ssd_reads, 1u);
  EXPECT_EQ(cold.ssd_bytes_read, 4 * kBlock);
}

TEST(TieredStoreTest, SsdHitIsPromotedIntoDram) {
  TempDir dir("tiered");
  auto s = TieredStore::Open(SmallOptions(dir.path()));
  ASSERT_TRUE(s.ok());
  PutRange(**s, 1, 0, 40);
  PutRange(**s, 2, 0, 30);
  auto first = GetAndVerify(**s, 1, 0, 2);
  ASSERT_EQ(first.ssd_hits, 2u);
  auto st = (*s)->GetStats();
  EXPECT_EQ(st.promotions, 2u);
  auto again = GetAndVerify(**s, 1, 0, 2);
  EXPECT_EQ(again.dram_hits, 2u);
  EXPECT_EQ(again.ssd_hits, 0u);
  // Promotion is a DRAM write that admits nothing: write amplification > 1. It reads the
  // object from SSD again: read amplification 2 for promoted hits.
  st = (*s)->GetStats();
  EXPECT_GT(st.dram.written_bytes + st.ssd.written_bytes, st.dram.admitted_bytes);
  EXPECT_EQ(st.ssd.delivered_bytes, 2 * kBlock);
  EXPECT_EQ(st.ssd.read_bytes, 4 * kBlock);
  EXPECT_EQ(st.promotion_read_bytes, 2 * kBlock);
}

TEST(TieredStoreTest, FullSsdDropsWholeOldestBuckets) {
  TempDir dir("tiered");
  auto o = SmallOptions(dir.path());
  auto s = TieredStore::Open(o);
  ASSERT_TRUE(s.ok());
  // 64 blocks of SSD (4 files x 16), 57-61 in DRAM: 200 blocks overflow both.
  for (uint64_t i = 0; i < 10; ++i) PutRange(**s, 1, i * 20, 20);
  auto st = (*s)->GetStats();
  EXPECT_GT(st.buckets_dropped, 0u);
  EXPECT_EQ(st.blocks_dropped, st.buckets_dropped * 8);  // whole buckets of 8 keys
  EXPECT_LE(st.ssd.used_bytes, o.ssd_bytes);
  // The oldest blocks are gone, the newest are still there.
  EXPECT_EQ((*s)->Exists(MakeKeys(1, 0, 1)), 0u);
  EXPECT_EQ((*s)->Exists(MakeKeys(1, 190, 10)), 10u);
  // Whatever is still found reads back intact.
  auto r = GetAndVerify(**s, 1, 0, 200);
  EXPECT_GT(r.ssd_hits, 0u);
  EXPECT_GT(r.dram_hits, 0u);
}

TEST(TieredStoreTest, PrefetchWithoutStagingMemoryIsRevoked) {
  TempDir dir("tiered");
  auto o = SmallOptions(dir.path());
  o.staging_bytes = 4 * kBlock;
  auto s = TieredStore::Open(o);
  ASSERT_TRUE(s.ok());
  PutRange(**s, 1, 0, 40);
  PutRange(**s, 2, 0, 30);
  // 10 SSD hits but room for 4: the prefetch is trimmed to its leading 4, the rest revoked.
  auto r = GetAndVerify(**s, 1, 0, 10);
  EXPECT_EQ(r.ssd_hits, 4u);
  EXPECT_EQ(r.revoked, 6u);
  EXPECT_EQ(r.leading_hits, 4u);
  auto st = (*s)->GetStats();
  EXPECT_EQ(st.revocations, 1u);
  EXPECT_EQ(st.revoked_blocks, 6u);
}

TEST(TieredStoreTest, RevokedWhenStagingStaysBusyPastTheDeadline) {
  TempDir dir("tiered");
  auto o = SmallOptions(dir.path());
  o.staging_bytes = 4 * kBlock;
  o.promote_on_hit = false;
  auto s = TieredStore::Open(o);
  ASSERT_TRUE(s.ok());
  PutRange(**s, 1, 0, 40);
  PutRange(**s, 2, 0, 30);
  // Blocks 1:0..12 were evicted first (LRU) and stay on SSD (no promotion). Concurrent gets
  // contend for the 4-block pool with a zero deadline: whoever finds it busy is revoked. The
  // interleaving varies, so check the accounting: every SSD hit is delivered or revoked.
  std::vector<std::thread> ts;
  std::atomic<uint32_t> delivered{0}, revoked{0};
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      auto r = GetAndVerify(**s, 1, 4 * (t % 2), 4, 0.0);
      delivered += r.ssd_hits;
      revoked += r.revoked;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(delivered + revoked, 16u);
  EXPECT_EQ((*s)->GetStats().revoked_blocks, revoked.load());
}

TEST(TieredStoreTest, ReadsCompletingAfterTheDeadlineAreRevoked) {
  TempDir dir("tiered");
  auto s = TieredStore::Open(SmallOptions(dir.path()));
  ASSERT_TRUE(s.ok());
  PutRange(**s, 1, 0, 40);
  PutRange(**s, 2, 0, 30);
  // A deadline already passed: the first batch is read (staging was free) but not delivered.
  auto r = GetAndVerify(**s, 1, 0, 4, -1.0);
  EXPECT_EQ(r.ssd_hits, 0u);
  EXPECT_EQ(r.revoked, 4u);
  EXPECT_EQ(r.ssd_bytes_read, 4 * kBlock);
  auto st = (*s)->GetStats();
  EXPECT_EQ(st.ssd.delivered_bytes, 0u);
  EXPECT_EQ(st.ssd.read_bytes, 4 * kBlock);
  EXPECT_EQ(st.promotions, 0u);
  EXPECT_EQ((*s)->Exists(MakeKeys(1, 0, 4)), 4u);  // still on SSD
}

TEST(TieredStoreTest, DramOnlyDropsEvictedBlocks) {
  auto o = SmallOptions("");
  auto s = TieredStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE((*s)->has_ssd());
  PutRange(**s, 1, 0, 40);
  PutRange(**s, 2, 0, 30);
  auto st = (*s)->GetStats();
  EXPECT_GT(st.evicted_dropped, 0u);
  EXPECT_EQ(st.ssd.written_bytes, 0u);
  EXPECT_EQ(st.dram.written_bytes, st.dram.admitted_bytes);  // nothing else is ever written
  EXPECT_EQ((*s)->Exists(MakeKeys(1, 0, 1)), 0u);
  EXPECT_EQ((*s)->Exists(MakeKeys(2, 0, 30)), 30u);
}

TEST(TieredStoreTest, RejectsBadOptions) {
  TieredStoreOptions o;
  o.dram_bytes = 0;
  EXPECT_FALSE(TieredStore::Open(o).ok());
  o = SmallOptions("/nonexistent-dir-for-test");
  EXPECT_FALSE(TieredStore::Open(o).ok());
  o = SmallOptions("");
  o.eviction_ratio = 2;
  EXPECT_FALSE(TieredStore::Open(o).ok());
}

// --- through the Store interface (TieredStoreAdapter) ---

std::unique_ptr<TieredStoreAdapter> OpenAdapter(const TieredStoreOptions& o) {
  auto s = TieredStoreAdapter::Open(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

void PutRange(Store& s, uint64_t ns, uint64_t first, uint64_t n) {
  auto keys = MakeKeys(ns, first, n);
  HostBlocks b(kLayout, n);
  b.Fill(keys);
  auto r = s.Put(keys, kLayout, b.buffers(), WriteHints{.force_medium = MediaType::kSsd});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->medium, MediaType::kDram);  // hints are ignored: everything is admitted to DRAM
}

// An adapter filled past the DRAM watermark (1:0..40, then 2:0..30): the least recently used
// blocks of the first range are on SSD only, the second range is in DRAM.
std::unique_ptr<TieredStoreAdapter> OpenOverflowed(const TieredStoreOptions& o) {
  auto s = OpenAdapter(o);
  if (s != nullptr) {
    PutRange(*s, 1, 0, 40);
    PutRange(*s, 2, 0, 30);
  }
  return s;
}

TEST(TieredStoreAdapterTest, PutAndLookupReportMediaAfterEvictionToSsd) {
  TempDir dir("tiered");
  auto s = OpenAdapter(SmallOptions(dir.path()));
  ASSERT_NE(s, nullptr);
  Store& store = *s;
  auto keys = MakeKeys(1, 0, 10);
  HostBlocks b(kLayout, 10);
  b.Fill(keys);
  auto p = store.Put(keys, kLayout, b.buffers());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->written, 10u);
  EXPECT_EQ(p->already_present, 0u);
  p = store.Put(keys, kLayout, b.buffers());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->written, 0u);
  EXPECT_EQ(p->already_present, 10u);

  LookupResult l = store.Lookup(MakeKeys(1, 0, 12));
  EXPECT_EQ(l.leading_hits, 10u);
  EXPECT_EQ(l.slowest_medium, MediaType::kDram);
  EXPECT_EQ(l.dram_bytes, 10 * kBlock);
  EXPECT_EQ(l.ssd_bytes, 0u);

  PutRange(store, 1, 10, 30);
  PutRange(store, 2, 0, 30);  // 70 blocks > 61: the oldest are evicted to SSD
  l = store.Lookup(MakeKeys(1, 0, 2));
  EXPECT_EQ(l.leading_hits, 2u);
  EXPECT_EQ(l.slowest_medium, MediaType::kSsd);
  EXPECT_EQ(l.ssd_bytes, 2 * kBlock);
  EXPECT_EQ(l.dram_bytes, 0u);
  EXPECT_EQ(store.Exists(MakeKeys(2, 0, 30)), 30u);
  EXPECT_EQ(store.Lookup(MakeKeys(2, 0, 30)).slowest_medium, MediaType::kDram);
}

TEST(TieredStoreAdapterTest, RestoreIsDoneAtOnceAndReportsLayersInOrder) {
  TempDir dir("tiered");
  auto s = OpenOverflowed(SmallOptions(dir.path()));
  ASSERT_NE(s, nullptr);
  // Blocks 1:0..3 are on SSD, 2:0..3 in DRAM.
  for (uint64_t ns : {1, 2}) {
    auto keys = MakeKeys(ns, 0, 4);
    HostBlocks got(kLayout, 4), want(kLayout, 4);
    want.Fill(keys);
    std::vector<uint32_t> layers;
    RestoreOptions ro;
    ro.on_layer = [&](uint32_t layer) {
      // The data is in place when a layer is reported.
      for (uint64_t i = 0; i < 4; ++i) {
        EXPECT_EQ(0, std::memcmp(SliceAddress(got.buffers(), kLayout, i, layer, 1),
                                 SliceAddress(want.buffers(), kLayout, i, layer, 1),
                                 kLayout.slice_bytes));
      }
      layers.push_back(layer);
    };
    auto h = s->Restore(keys, kLayout, got.buffers(), ro);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_TRUE((*h)->done());
    EXPECT_TRUE((*h)->WaitFor(std::chrono::nanoseconds(0)));
    EXPECT_EQ(layers, (std::vector<uint32_t>{0, 1, 2, 3}));
    EXPECT_TRUE((*h)->WaitLayer(3).ok());
    EXPECT_EQ((*h)->WaitLayer(4).code(), StatusCode::kInvalidArgument);
    (*h)->Cancel();  // a no-op once done
    auto r = (*h)->Wait();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->hits, 4u);
    EXPECT_EQ(r->leading_hits, 4u);
    EXPECT_EQ(0, std::memcmp(got.block(0), want.block(0), 4 * kBlock));
    if (ns == 1) {
      EXPECT_EQ(r->bytes_from_ssd, 4 * kBlock);
      EXPECT_EQ(r->bytes_from_dram, 0u);
      EXPECT_GT(r->ssd_reads, 0u);
      EXPECT_EQ(r->ssd_bytes_read, 4 * kBlock);
      EXPECT_GT(r->ssd_read_ns, 0);
    } else {
      EXPECT_EQ(r->bytes_from_dram, 4 * kBlock);
      EXPECT_EQ(r->ssd_reads, 0u);
      EXPECT_EQ(r->queued_ns, 0);
      EXPECT_EQ(r->ssd_read_ns, 0);
    }
  }
}

TEST(TieredStoreAdapterTest, GetEqualsRestoreAndWait) {
  TempDir dir("tiered");
  auto s = OpenOverflowed(SmallOptions(dir.path()));
  ASSERT_NE(s, nullptr);
  auto keys = MakeKeys(2, 0, 6);
  HostBlocks a(kLayout, 6), b(kLayout, 6);
  auto g = s->Get(keys, kLayout, a.buffers());
  auto h = s->Restore(keys, kLayout, b.buffers());
  ASSERT_TRUE(g.ok() && h.ok());
  auto w = (*h)->Wait();
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(g->found, w->found);
  EXPECT_EQ(g->hits, w->hits);
  EXPECT_EQ(g->bytes_from_dram, w->bytes_from_dram);
  EXPECT_EQ(0, std::memcmp(a.block(0), b.block(0), 6 * kBlock));
  // A bad layout is an error, not a miss.
  KvLayout bad = kLayout;
  bad.slice_bytes *= 2;
  HostBlocks c(bad, 6);
  EXPECT_FALSE(s->Get(keys, bad, c.buffers()).ok());
}

TEST(TieredStoreAdapterTest, RevokedHitsAreMissesAndCounted) {
  TempDir dir("tiered");
  auto o = SmallOptions(dir.path());
  o.staging_bytes = 4 * kBlock;
  auto s = OpenOverflowed(o);
  ASSERT_NE(s, nullptr);
  auto keys = MakeKeys(1, 0, 10);
  HostBlocks got(kLayout, 10);
  auto r = s->Get(keys, kLayout, got.buffers());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hits, 4u);
  EXPECT_EQ(r->revoked, 6u);
  EXPECT_EQ(r->found[4], 0u);
  EXPECT_EQ(s->tiered().GetStats().revoked_blocks, 6u);
}

TEST(TieredStoreAdapterTest, StatsAndOptionsMapTheTieredStore) {
  TempDir dir("tiered");
  const auto o = SmallOptions(dir.path());
  auto s = OpenOverflowed(o);
  ASSERT_NE(s, nullptr);
  HostBlocks got(kLayout, 4);
  ASSERT_TRUE(s->Get(MakeKeys(1, 0, 4), kLayout, got.buffers()).ok());  // SSD
  ASSERT_TRUE(s->Get(MakeKeys(2, 0, 4), kLayout, got.buffers()).ok());  // DRAM
  ASSERT_TRUE(s->Get(MakeKeys(9, 0, 4), kLayout, got.buffers()).ok());  // misses
  EXPECT_EQ(s->Exists(MakeKeys(2, 0, 4)), 4u);

  const StoreStats st = s->GetStats();
  const TieredStats t = s->tiered().GetStats();
  EXPECT_EQ(st.puts, 2u);
  EXPECT_EQ(st.gets, 3u);
  EXPECT_EQ(st.exists_calls, 1u);
  EXPECT_EQ(st.restores_ssd, 1u);
  EXPECT_EQ(st.restores_dram_ready, 2u);
  EXPECT_EQ(st.hits, 8u);
  EXPECT_EQ(st.misses, 4u);
  EXPECT_EQ(st.blocks_written, 70u);
  EXPECT_EQ(st.dram.admitted_bytes, t.dram.admitted_bytes);
  EXPECT_EQ(st.dram.written_bytes, t.dram.written_bytes);
  EXPECT_EQ(st.ssd.written_bytes, t.ssd.written_bytes);
  EXPECT_EQ(st.ssd.read_bytes, t.ssd.read_bytes);
  EXPECT_EQ(st.ssd.delivered_bytes, 4 * kBlock);
  EXPECT_EQ(st.dram.delivered_bytes, 4 * kBlock);
  EXPECT_EQ(st.restore_window_peak_bytes, t.staging_peak_bytes);
  EXPECT_GT(t.evictions, 0u);
  EXPECT_EQ(t.promotions, 4u);

  const StoreOptions& so = s->options();
  EXPECT_EQ(so.dram_bytes, o.dram_bytes);
  EXPECT_EQ(so.ssd_dirs, o.ssd_dirs);
  EXPECT_EQ(so.ssd_bytes, o.ssd_bytes);
  EXPECT_EQ(so.ssd_file_bytes, o.bucket_bytes);
  EXPECT_EQ(so.tokens_per_block, o.tokens_per_block);
  EXPECT_EQ(so.io_engine, IoEngineKind::kPreadv);
  const StoreInfo info = s->GetInfo();
  EXPECT_EQ(info.ssd_dirs, o.ssd_dirs);
  EXPECT_EQ(info.ssd_files, 4u);
  EXPECT_FALSE(info.io_engine.empty());
}

TEST(TieredStoreAdapterTest, PrefetchTimeoutComesFromTheKeysTokens) {
  TempDir dir("tiered");
  auto o = SmallOptions(dir.path());
  // A deadline already passed for any prefetch: the SSD hits' first batch lands too late.
  o.prefetch_timeout_base_s = 0;
  o.prefetch_timeout_per_ki_token_s = 0;
  auto s = OpenOverflowed(o);
  ASSERT_NE(s, nullptr);
  HostBlocks got(kLayout, 4);
  auto r = s->Get(MakeKeys(1, 0, 4), kLayout, got.buffers());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hits, 0u);
  EXPECT_EQ(r->revoked, 4u);
}

}  // namespace
}  // namespace flatcake::baseline
