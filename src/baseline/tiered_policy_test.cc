// The tiered policy alone: a directory over a bare ExtentAllocator (no memory, no files), driven
// the way TieredStore (and the simulator) drive it.
#include "baseline/tiered_policy.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "media/extent_allocator.h"
#include "util/block_content.h"

namespace flatcake::baseline {
namespace {

// 4 layers x 2 planes x 2 KiB = 16 KiB per object (4 pages).
const KvLayout kLayout{4, 2, 2048};
constexpr uint64_t kObj = 16 * kKiB;

// DRAM: 64 objects (the watermark 0.95 evicts at 61 down to 57). SSD: 4 files of one bucket's
// 16 objects, a bucket closing at 8 keys: 8 buckets of 8 objects in the ring.
TieredStoreOptions SmallOptions() {
  TieredStoreOptions o;
  o.dram_bytes = 64 * kObj;
  o.ssd_dirs = {"(none: the directory only needs the geometry)"};
  o.bucket_bytes = 16 * kObj;
  o.bucket_keys = 8;
  o.ssd_bytes = 4 * o.bucket_bytes;
  o.staging_bytes = 32 * kObj;
  return o;
}

// A directory and its DRAM space, with the store's put and allocation sequence around it; every
// eviction's offloads "succeed" at once.
class Harness {
 public:
  explicit Harness(const TieredStoreOptions& o, SsdGeometry ssd)
      : dram_(o.dram_bytes, /*boundary=*/0, kTieredAlign), space_(&dram_), dir_(o, &space_, ssd) {
    EXPECT_TRUE(dir_.AdoptLayout(kLayout).ok());
  }
  explicit Harness(const TieredStoreOptions& o) : Harness(o, SsdGeometry::ForOptions(o)) {}

  TieredDirectory& dir() { return dir_; }
  ExtentAllocator& dram() { return dram_; }
  const std::vector<EvictionVictim>& evicted() const { return evicted_; }

  std::optional<uint64_t> AllocateDram() {
    for (int attempt = 0; attempt < TieredDirectory::kAllocateAttempts; ++attempt) {
      if (dir_.NeedsEviction(kObj)) {
        std::vector<EvictionVictim> v = dir_.ChooseVictims();
        dir_.FinishEviction(v, /*write_ok=*/true);
        evicted_.insert(evicted_.end(), v.begin(), v.end());
      }
      auto off = dir_.TryAllocateDram(kObj);
      if (off.ok()) return *off;
    }
    return std::nullopt;
  }
  PutAdmission Put(const Key& key) {
    const PutAdmission a = dir_.BeginPut(key);
    if (a != PutAdmission::kPresent) dir_.FinishPut(key, a, AllocateDram());
    return a;
  }
  // Puts new keys of namespace 9 until more than `n` objects were evicted.
  void PutUntilEvicted(size_t n) {
    while (evicted_.size() <= n) Put(MakeKeys(9, next_++, 1)[0]);
  }
  bool InDram(const Key& k) { return dir_.Lookup({&k, 1}).dram_bytes > 0; }
  bool OnSsdOnly(const Key& k) { return dir_.Lookup({&k, 1}).ssd_bytes > 0; }
  bool Absent(const Key& k) { return dir_.Lookup({&k, 1}).leading_hits == 0; }

 private:
  ExtentAllocator dram_;
  DramSpaceOf<ExtentAllocator> space_;
  TieredDirectory dir_;
  std::vector<EvictionVictim> evicted_;
  uint64_t next_ = 0;
};

std::vector<Key> VictimKeys(std::span<const EvictionVictim> v) {
  std::vector<Key> keys;
  for (const EvictionVictim& e : v) keys.push_back(e.key);
  return keys;
}

TEST(TieredDirectoryTest, EvictsLeastRecentlyUsedUnpinnedObjects) {
  Harness h(SmallOptions());
  const std::vector<Key> keys = MakeKeys(1, 0, 64);
  for (int i = 0; i < 60; ++i) EXPECT_EQ(h.Put(keys[i]), PutAdmission::kNew);
  EXPECT_EQ(h.Put(keys[0]), PutAdmission::kPresent);
  EXPECT_TRUE(h.evicted().empty());
  // A read touches keys 0 and 1; key 5 stays pinned.
  TieredHits hits;
  ASSERT_TRUE(h.dir().PinHits(std::vector<Key>{keys[0], keys[1], keys[5]}, kLayout, &hits).ok());
  EXPECT_EQ(hits.dram, (std::vector<uint32_t>{0, 1, 2}));
  h.dir().UnpinDram(keys[0]);
  h.dir().UnpinDram(keys[1]);

  h.Put(keys[60]);  // 61 objects > the watermark: down to 57, then the new one
  EXPECT_EQ(VictimKeys(h.evicted()), (std::vector<Key>{keys[2], keys[3], keys[4]}));
  EXPECT_EQ(h.dram().used(), 58 * kObj);
  // From the cold end on: 6..59, then the touched 0 and 1; the pinned 5 is passed over.
  h.PutUntilEvicted(59);
  ASSERT_EQ(h.evicted().size(), 60u);
  std::vector<Key> want(keys.begin() + 2, keys.begin() + 5);
  want.insert(want.end(), keys.begin() + 6, keys.begin() + 60);
  want.insert(want.end(), {keys[0], keys[1], keys[60]});
  EXPECT_EQ(VictimKeys(h.evicted()), want);
  EXPECT_TRUE(h.InDram(keys[5]));
  EXPECT_TRUE(h.OnSsdOnly(keys[2]) && h.OnSsdOnly(keys[0]));
  const TieredStats s = h.dir().Stats();
  EXPECT_EQ(s.evictions, 60u);
  EXPECT_EQ(s.offloads, 60u);
  EXPECT_EQ(s.dram.blocks_live, 58u);
  EXPECT_EQ(s.ssd.blocks_live, 60u);
  EXPECT_EQ(s.dram.used_bytes, 58 * kObj);
}

TEST(TieredDirectoryTest, OffloadsInEvictionOrderIntoBucketsClosingAtBucketKeys) {
  Harness h(SmallOptions());
  h.PutUntilEvicted(62);  // 63 of the ring's 64 objects
  for (size_t i = 0; i < 63; ++i) {
    const EvictionVictim& v = h.evicted()[i];
    ASSERT_TRUE(v.write) << i;
    EXPECT_EQ(v.ssd_off, i * kObj) << i;       // appended back to back, across the files
    EXPECT_EQ(v.bucket, int64_t(i / 8)) << i;  // 8 keys per bucket
  }
  const TieredStats s = h.dir().Stats();
  EXPECT_EQ(s.buckets_written, 8u);
  EXPECT_EQ(s.buckets_dropped, 0u);
  EXPECT_EQ(s.ssd.used_bytes, 63 * kObj);
}

TEST(TieredDirectoryTest, BucketClosesAtBucketBytes) {
  TieredStoreOptions o = SmallOptions();
  o.bucket_keys = 500;
  o.bucket_bytes = 4 * kObj;  // = the file size
  o.ssd_bytes = 4 * o.bucket_bytes;
  Harness h(o);
  h.PutUntilEvicted(15);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(h.evicted()[i].bucket, int64_t(i / 4)) << i;
    EXPECT_EQ(h.evicted()[i].ssd_off, i * kObj) << i;
  }
  // Victims 16 and 17 (the pass is 3) open a fifth bucket at the ring's start, over the first.
  ASSERT_EQ(h.evicted().size(), 18u);
  EXPECT_EQ(h.evicted()[16].bucket, 4);
  EXPECT_EQ(h.evicted()[17].ssd_off, kObj);
  EXPECT_EQ(h.dir().Stats().buckets_written, 5u);
  EXPECT_EQ(h.dir().Stats().buckets_dropped, 1u);
}

TEST(TieredDirectoryTest, FullRingDropsTheOldestBucketWithItsObjects) {
  Harness h(SmallOptions());
  h.PutUntilEvicted(64);  // victim 64 opens a ninth bucket where the first one is
  const TieredStats s = h.dir().Stats();
  EXPECT_EQ(s.buckets_dropped, 1u);
  EXPECT_EQ(s.blocks_dropped, 8u);
  EXPECT_EQ(s.ssd.reclaimed_bytes, 8 * kObj);
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(h.Absent(h.evicted()[i].key)) << i;
  EXPECT_TRUE(h.OnSsdOnly(h.evicted()[8].key));
  EXPECT_EQ(h.evicted()[64].ssd_off, 0u);
  EXPECT_EQ(h.evicted()[64].bucket, 8);
}

TEST(TieredDirectoryTest, PinnedBucketBlocksTheRingAndItsVictimIsDropped) {
  Harness h(SmallOptions());
  h.PutUntilEvicted(62);
  ASSERT_EQ(h.evicted().size(), 63u);  // passes of 3
  // An SSD hit on the oldest bucket pins it; its read is the whole object.
  const std::vector<Key> hit{h.evicted()[1].key};
  std::vector<int64_t> pinned;
  std::vector<SliceRead> reads = h.dir().PinBuckets(hit, std::vector<uint32_t>{0}, &pinned);
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].file, 0u);
  EXPECT_EQ(reads[0].offset, kObj);
  EXPECT_EQ(reads[0].len, kObj);
  EXPECT_EQ(reads[0].layer, 0u);  // the key index
  EXPECT_EQ(pinned, (std::vector<int64_t>{0}));

  h.PutUntilEvicted(63);  // victims 63 (the last slot) .. 65: 64 and 65 meet the pinned bucket
  EXPECT_TRUE(h.evicted()[63].write);
  for (size_t i : {64u, 65u}) {
    EXPECT_FALSE(h.evicted()[i].write) << i;
    EXPECT_EQ(h.evicted()[i].bucket, -1) << i;
    EXPECT_TRUE(h.Absent(h.evicted()[i].key)) << i;
  }
  TieredStats s = h.dir().Stats();
  EXPECT_EQ(s.evicted_dropped, 2u);
  EXPECT_EQ(s.buckets_dropped, 0u);
  EXPECT_TRUE(h.OnSsdOnly(hit[0]));

  h.dir().UnpinBuckets(pinned);
  h.PutUntilEvicted(66);
  s = h.dir().Stats();
  EXPECT_EQ(s.buckets_dropped, 1u);
  EXPECT_EQ(s.evicted_dropped, 2u);
  EXPECT_TRUE(h.Absent(hit[0]));
}

TEST(TieredDirectoryTest, PromotionReadmitsAnSsdHitAndItsEvictionWritesNothing) {
  Harness h(SmallOptions());
  h.PutUntilEvicted(2);
  const Key k = h.evicted()[0].key;
  ASSERT_TRUE(h.OnSsdOnly(k));
  TieredHits hits;
  ASSERT_TRUE(h.dir().PinHits({&k, 1}, kLayout, &hits).ok());
  EXPECT_EQ(hits.ssd, (std::vector<uint32_t>{0}));

  ASSERT_TRUE(h.dir().BeginPromotion(k));
  EXPECT_FALSE(h.dir().BeginPromotion(k));                 // one promotion at a time
  EXPECT_EQ(h.dir().BeginPut(k), PutAdmission::kPresent);  // and no re-persist meanwhile
  const TieredStats before = h.dir().Stats();
  EXPECT_TRUE(h.dir().FinishPromotion(k, h.AllocateDram()));
  EXPECT_TRUE(h.InDram(k));
  EXPECT_FALSE(h.dir().BeginPromotion(k));  // in DRAM now
  TieredStats s = h.dir().Stats();
  EXPECT_EQ(s.promotions, 1u);
  EXPECT_EQ(s.dram.written_bytes, before.dram.written_bytes + kObj);
  EXPECT_EQ(s.dram.admitted_bytes, before.dram.admitted_bytes);
  EXPECT_EQ(s.dram.blocks_live, before.dram.blocks_live + 1);
  EXPECT_EQ(s.ssd.blocks_live, before.ssd.blocks_live);  // on both tiers now

  // Promoted objects are the most recently used: evicted last, and without a second write.
  const size_t n = h.evicted().size();
  h.PutUntilEvicted(n + 58);  // not yet round the ring: its bucket stays
  bool seen = false;
  for (size_t i = n; i < h.evicted().size(); ++i) {
    if (h.evicted()[i].key != k) continue;
    seen = true;
    EXPECT_GT(i, n + 50);
    EXPECT_FALSE(h.evicted()[i].write);
    EXPECT_EQ(h.evicted()[i].bucket, h.evicted()[0].bucket);
  }
  EXPECT_TRUE(seen);
  EXPECT_TRUE(h.OnSsdOnly(k));
  s = h.dir().Stats();
  EXPECT_EQ(s.offloads + 1, s.evictions);  // every victim but the promoted one was written

  // Put again while only on SSD: re-persisted, not admitted.
  const uint64_t admitted = s.dram.admitted_bytes;
  EXPECT_EQ(h.Put(k), PutAdmission::kRepersist);
  s = h.dir().Stats();
  EXPECT_EQ(s.repersisted, 1u);
  EXPECT_EQ(s.dram.admitted_bytes, admitted);
  EXPECT_TRUE(h.InDram(k));
}

TEST(TieredDirectoryTest, FailedPromotionOfAnObjectDroppedMeanwhileForgetsIt) {
  Harness h(SmallOptions());
  h.PutUntilEvicted(0);
  const Key k = h.evicted()[0].key;
  ASSERT_TRUE(h.dir().BeginPromotion(k));
  h.PutUntilEvicted(64);  // its bucket is dropped while it is being promoted
  EXPECT_EQ(h.dir().Stats().buckets_dropped, 1u);
  // Not yet forgotten (promoting), but no longer on SSD; a failed promotion forgets it.
  EXPECT_FALSE(h.dir().FinishPromotion(k, std::nullopt));
  EXPECT_TRUE(h.Absent(k));
}

TEST(TieredDirectoryTest, DramOnlyDropsEveryVictim) {
  TieredStoreOptions o = SmallOptions();
  o.ssd_dirs.clear();
  Harness h(o);
  EXPECT_FALSE(h.dir().has_ssd());
  h.PutUntilEvicted(2);
  for (const EvictionVictim& v : h.evicted()) {
    EXPECT_FALSE(v.write);
    EXPECT_TRUE(h.Absent(v.key));
  }
  const TieredStats s = h.dir().Stats();
  EXPECT_EQ(s.evicted_dropped, 3u);
  EXPECT_EQ(s.offloads, 0u);
}

TEST(TieredDirectoryTest, RunsTerabyteTiersOnMetadataAlone) {
  TieredStoreOptions o;
  o.dram_bytes = 1024 * kGiB;
  o.ssd_dirs = {"(sim)"};
  o.ssd_bytes = 4096 * kGiB;
  const SsdGeometry g = SsdGeometry::ForOptions(o);
  EXPECT_EQ(g.num_files, 16384u);
  EXPECT_EQ(g.file_bytes, 256 * kMiB);
  Harness h(o, g);
  for (const Key& k : MakeKeys(2, 0, 1000)) h.Put(k);
  const TieredStats s = h.dir().Stats();
  EXPECT_EQ(s.dram.capacity_bytes, 1024 * kGiB);
  EXPECT_EQ(s.ssd.capacity_bytes, 4096 * kGiB);
  EXPECT_EQ(s.dram.used_bytes, 1000 * kObj);
  EXPECT_EQ(s.dram.blocks_live, 1000u);
}

TEST(TieredPrefetchPolicyTest, TrimsToTheStagingPoolAndCountsOneRevocationPerPrefetch) {
  const TieredStoreOptions o = SmallOptions();
  EXPECT_EQ(PrefetchKeep(o, kObj, 10), 10u);
  EXPECT_EQ(PrefetchKeep(o, kObj, 40), 32u);  // larger than the pool: its leading 32
  EXPECT_DOUBLE_EQ(PrefetchTimeoutSeconds(o, 10 * 1024), 3.0);
  EXPECT_DOUBLE_EQ(PrefetchTimeoutSeconds(o, 1024 * 1024), 30.0);  // capped

  Harness h(o);
  uint32_t revoked = 0;
  h.dir().CountRevoked(8, &revoked);  // trimmed ...
  h.dir().CountRevoked(2, &revoked);  // ... and read late: still one revocation
  EXPECT_EQ(revoked, 10u);
  uint32_t other = 0;
  h.dir().CountRevoked(1, &other);
  const TieredStats s = h.dir().Stats();
  EXPECT_EQ(s.revocations, 2u);
  EXPECT_EQ(s.revoked_blocks, 11u);
}

TEST(TieredPrefetchPolicyTest, StagingPoolAcquiresFirstFitWithoutWaiting) {
  StagingPool pool(32 * kObj);
  std::optional<uint64_t> a = pool.TryAcquire(20 * kObj);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(pool.TryAcquire(20 * kObj).has_value());  // would wait: the caller's business
  std::optional<uint64_t> b = pool.TryAcquire(12 * kObj - 100);  // rounded up to pages
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(*b, 20 * kObj);
  EXPECT_EQ(pool.used(), 32 * kObj);
  pool.Release(*a, 20 * kObj);
  EXPECT_EQ(pool.used(), 12 * kObj);
  EXPECT_EQ(pool.TryAcquire(20 * kObj), std::optional<uint64_t>(0));
  EXPECT_EQ(pool.peak(), 32 * kObj);
}

TEST(TieredPrefetchPolicyTest, PartitionsReadsIntoBatchesAndCountsWhatLanded) {
  TieredStoreOptions o;
  o.max_io_bytes = 4 * kObj;
  // Ten adjacent objects in file 0 (reads of 4, 4, 2) and five scattered ones in file 1.
  std::vector<SliceRead> slices;
  for (uint32_t i = 0; i < 10; ++i) slices.push_back({0, i * kObj, kObj, nullptr, i});
  for (uint32_t i = 0; i < 5; ++i) slices.push_back({1, 2 * i * kObj, kObj, nullptr, 10 + i});
  auto plan = PlanReads(slices, StagedReadOptions(o));
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->reads.size(), 8u);
  EXPECT_EQ(plan->bytes_gap, 0u);  // no gap bridging

  // Batches of at least 5 objects: reads [0, 2) (8 objects), [2, 6) (5), [6, 8) (2).
  EXPECT_EQ(PartitionReadBatches(*plan, 5), (std::vector<size_t>{2, 6, 8}));
  EXPECT_EQ(SlicesLanded(*plan, 0), 0u);
  EXPECT_EQ(SlicesLanded(*plan, 2), 8u);
  EXPECT_EQ(SlicesLanded(*plan, 6), 13u);
  EXPECT_EQ(SlicesLanded(*plan, 8), 15u);
  // 0 is taken as 1: every read is its own batch.
  EXPECT_EQ(PartitionReadBatches(*plan, 0), (std::vector<size_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_TRUE(PartitionReadBatches(CoalescePlan{}, 5).empty());
}

}  // namespace
}  // namespace flatcake::baseline
