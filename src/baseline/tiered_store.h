// TieredStore: the tiered KV-cache design that serving stacks run today (a Mooncake Store with
// SSD offload behind an SGLang HiCache-style host tier), rebuilt on FlatCake's own media and I/O
// code so that a replay compares placement policies, not I/O stacks. Every knob is an option and
// defaults to the documented Mooncake / HiCache value (see docs/replay.md for the sources):
//
//  - Admission: every new block is copied into host DRAM as one page-contiguous object.
//  - DRAM eviction: approximate LRU. When an allocation would push usage past the high watermark
//    (0.95) the least recently used unpinned objects are evicted until usage is eviction_ratio
//    (0.05) below it. An evicted object without an SSD copy is offloaded: appended, in eviction
//    order, to the open bucket; a bucket closes at bucket_bytes (256 MiB) or bucket_keys (500).
//  - SSD reclamation: a ring over the pool files; when it needs room the oldest whole buckets are
//    dropped (FIFO), with every object only they held.
//  - SSD hit: the object is read whole (adjacent objects of one bucket are merged by the same
//    coalescer the flat store uses, with no gap bridging) into a bounded host staging pool,
//    delivered to the caller, then promoted into DRAM (which may evict others). A prefetch that
//    cannot get staging memory before its deadline (HiCache's timeout policy: base + per-Ki-token,
//    capped) is revoked: its blocks are reported as misses and the caller recomputes them. A
//    prefetch larger than the whole pool is trimmed to its leading part that fits.
//  - DRAM-only: with no SSD directory, evicted objects are simply dropped.
//
// Thread safety: every public method may be called concurrently. `mu_` guards the object map, the
// LRU list and the buckets; it is never held across data copies or I/O. Evictions (victim choice,
// offload writes) are serialised by `evict_mu_`. Readers pin what they copy: a pinned DRAM object
// is freed only when its last reader unpins, a pinned bucket is never dropped (an offload that
// would need its space drops its victim instead of waiting).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "flatcake/key.h"
#include "flatcake/layout.h"
#include "flatcake/options.h"
#include "flatcake/status.h"
#include "flatcake/store.h"
#include "io/coalesce.h"
#include "io/io_engine.h"
#include "media/dram_arena.h"
#include "media/ssd_file_pool.h"
#include "util/thread_annotations.h"

namespace flatcake::baseline {

struct TieredStoreOptions {
  // --- DRAM tier ---
  uint64_t dram_bytes = 1 * kGiB;
  HugePageMode huge_pages = HugePageMode::kAuto;
  double high_watermark = 0.95;  // Mooncake master eviction_high_watermark_ratio
  double eviction_ratio = 0.05;  // Mooncake master eviction_ratio

  // --- SSD tier (bucket backend); no directory = DRAM-only ---
  std::vector<std::string> ssd_dirs;
  uint64_t ssd_bytes = 4 * kGiB;       // total SSD budget (a whole number of buckets' files)
  uint64_t bucket_bytes = 256 * kMiB;  // a bucket closes at this size ...
  uint32_t bucket_keys = 500;          // ... or at this many keys
  DirectIoMode direct_io = DirectIoMode::kAuto;

  // --- host staging of SSD hits (HiCache prefetch) ---
  uint64_t staging_bytes = 256 * kMiB;
  double prefetch_timeout_base_s = 2.0;  // HiCache timeout policy
  double prefetch_timeout_per_ki_token_s = 0.1;
  double prefetch_timeout_max_s = 30.0;
  bool promote_on_hit = true;
  // A promotion reads the object from SSD again (the store loads the offloaded replica back),
  // rather than reusing the staged copy that was delivered.
  bool promotion_rereads = true;
  uint32_t prefetch_batch_objects = 128;  // objects per batch of prefetch reads
  // Tokens in one block: the timeout policy is per token, and the Store interface's Restore
  // derives a prefetch's tokens from its keys (TieredStoreAdapter).
  uint32_t tokens_per_block = 256;

  // --- I/O ---
  IoEngineKind io_engine = IoEngineKind::kAuto;
  uint32_t io_workers = 2;
  uint32_t io_queue_depth = 64;
  uint64_t max_io_bytes = 4 * kMiB;  // merged reads and offload writes are split at this size
};

Status ValidateTieredStoreOptions(const TieredStoreOptions& options);

// The prefetch deadline HiCache's timeout policy gives a prefetch of `tokens` tokens.
double PrefetchTimeoutSeconds(const TieredStoreOptions& options, uint64_t tokens);

struct TieredGetResult {
  std::vector<uint8_t> found;  // per key: 1 = delivered
  uint32_t hits = 0;
  uint32_t leading_hits = 0;
  uint32_t dram_hits = 0;
  uint32_t ssd_hits = 0;
  uint32_t revoked = 0;  // SSD hits revoked (no staging memory, or read after the deadline)
  uint64_t bytes_from_dram = 0;
  uint64_t bytes_from_ssd = 0;
  uint64_t ssd_bytes_read = 0;
  uint64_t ssd_reads = 0;
  double staging_wait_s = 0;  // time spent waiting for staging memory
  double deliver_s = 0;       // from the call to the last delivered byte (promotion excluded)
};

struct TieredStats {
  MediumStats dram;        // admitted = new blocks; written = admissions + promotions + re-persists
  MediumStats ssd;         // admitted = 0 (nothing is placed on SSD directly); written = offloads
  uint64_t evictions = 0;  // objects evicted from DRAM
  uint64_t offloads = 0;   // ... of which written to SSD
  uint64_t evicted_dropped = 0;       // ... of which lost (no SSD tier, or no room)
  uint64_t promotions = 0;            // SSD hits copied back into DRAM
  uint64_t promotion_read_bytes = 0;  // SSD bytes read to promote
  uint64_t repersisted = 0;           // blocks re-put while an SSD copy existed
  uint64_t revocations = 0;           // prefetches revoked (whole or trimmed)
  uint64_t revoked_blocks = 0;
  uint64_t buckets_written = 0;  // buckets opened
  uint64_t buckets_dropped = 0;
  uint64_t blocks_dropped = 0;  // objects lost with a dropped bucket
  uint64_t staging_peak_bytes = 0;
  uint64_t io_errors = 0;
};

class TieredStore {
 public:
  static Result<std::unique_ptr<TieredStore>> Open(const TieredStoreOptions& options);
  ~TieredStore();
  TieredStore(const TieredStore&) = delete;
  TieredStore& operator=(const TieredStore&) = delete;

  // Admits every block not already in DRAM. A block held only on SSD is re-persisted into DRAM
  // (counted as written, not admitted). `*admitted` (optional) receives the new blocks' count,
  // `*repersisted` (optional) the re-persisted ones'.
  Status Put(std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& src,
             uint32_t* admitted = nullptr, uint32_t* repersisted = nullptr);
  // The leading keys held on either tier; an object with no DRAM copy counts as SSD (it is read
  // from there), one held on both as DRAM. Bytes are the layout's block bytes.
  LookupResult Lookup(std::span<const Key> keys);
  // Number of leading keys held on either tier.
  size_t Exists(std::span<const Key> keys) { return Lookup(keys).leading_hits; }
  // Copies the blocks of `keys` into `dst`: DRAM objects at once, SSD objects through the staging
  // pool, waiting for it at most `timeout_s` seconds before revoking. Misses are not errors.
  // `on_delivered` (optional) runs on the calling thread once every delivered block is in `dst`,
  // before the SSD hits are promoted (not on an error).
  Result<TieredGetResult> Get(std::span<const Key> keys, const KvLayout& layout,
                              const BlockBuffers& dst, double timeout_s,
                              const std::function<void()>& on_delivered = {});

  TieredStats GetStats() const;
  // What Open chose (page mode, I/O engine, SSD files), as Store::GetInfo reports it.
  StoreInfo GetInfo() const;
  const TieredStoreOptions& options() const { return options_; }
  bool has_ssd() const { return ssd_ != nullptr; }
  // Live objects on each tier (a promoted object counts on both).
  void CountObjects(uint64_t* dram, uint64_t* ssd) const;

 private:
  struct Object {
    int64_t dram_off = -1;  // arena offset, -1 = not in DRAM
    uint32_t dram_pins = 0;
    bool writing = false;    // being admitted: invisible to readers
    bool evicting = false;   // chosen as a victim, offload in progress
    bool promoting = false;  // an SSD hit being copied into DRAM
    bool free_on_unpin = false;
    int64_t bucket = -1;   // bucket id, -1 = no SSD copy
    uint64_t ssd_off = 0;  // pool offset of the object
    bool in_lru = false;
    std::list<Key>::iterator lru;
  };
  struct Bucket {
    uint64_t id = 0;
    uint32_t file = 0;
    uint64_t start = 0;  // offset in the file
    uint64_t bytes = 0;
    std::vector<Key> keys;
    uint32_t pins = 0;
  };
  struct Victim {
    Key key;
    uint64_t dram_off = 0;
    int64_t bucket = -1;  // assigned bucket, -1 = drop
    uint64_t ssd_off = 0;
    bool write = false;  // offload it (it had no SSD copy and got room in a bucket)
  };

  explicit TieredStore(const TieredStoreOptions& options);
  Status Init();

  uint64_t ObjectBytes(const KvLayout& layout) const;
  // Allocates `bytes` of DRAM, evicting first when the watermark would be crossed.
  Result<uint64_t> AllocateDram(uint64_t bytes);
  void EvictDown();
  // Reserves `bytes` in the open bucket (dropping old buckets for room); false when a pinned
  // bucket is in the way.
  bool AppendToBucketLocked(const Key& key, uint64_t bytes, int64_t* bucket, uint64_t* pool_off)
      REQUIRES(mu_);
  void DropOldestBucketLocked() REQUIRES(mu_);
  Bucket* FindBucketLocked(int64_t id) REQUIRES(mu_);
  void UnpinDramLocked(const Key& key) REQUIRES(mu_);
  void FreeDramLocked(Object& obj) REQUIRES(mu_);
  void TouchLocked(const Key& key, Object& obj) REQUIRES(mu_);
  Status WriteVictims(std::vector<Victim>& victims, uint64_t obj_bytes);
  // Waits for `bytes` of staging until `deadline`; returns the offset or -1 on timeout.
  int64_t AcquireStaging(uint64_t bytes, std::chrono::steady_clock::time_point deadline);
  void ReleaseStaging(uint64_t off, uint64_t bytes);

  // The steps of Get. Hits: the keys' indices found in DRAM (pinned, with their arena offsets)
  // and on SSD.
  struct Hits {
    std::vector<uint32_t> dram, ssd;
    std::vector<uint64_t> dram_offs;
  };
  Status FindAndPinHits(std::span<const Key> keys, const KvLayout& layout, uint64_t obj_bytes,
                        Hits* hits);
  // Copies the DRAM hits out and unpins them.
  void DeliverDramHits(std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& dst,
                       const Hits& hits, TieredGetResult* r);
  // Stages the SSD hits (those that fit the staging pool by `deadline`), reads them in batches
  // until `deadline`, delivers what landed and promotes it; the rest is revoked.
  Status DeliverSsdHits(std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& dst,
                        std::vector<uint32_t> ssd_hits, std::chrono::steady_clock::time_point t0,
                        std::chrono::steady_clock::time_point deadline,
                        const std::function<void()>& on_delivered, TieredGetResult* r);
  // Pins the buckets of the SSD hits still on SSD; returns their reads (`layer` = key index).
  std::vector<SliceRead> PinBucketsOfHits(std::span<const Key> keys,
                                          std::span<const uint32_t> ssd_hits, uint64_t obj_bytes,
                                          std::vector<int64_t>* pinned_buckets);
  // Issues the plan's reads into `stage` batch by batch until `deadline`; *landed: the slices (in
  // plan order) of the batches that completed in time.
  Status ReadStagedBatches(const CoalescePlan& plan, uint8_t* stage, uint64_t obj_bytes,
                           std::chrono::steady_clock::time_point deadline, size_t* landed,
                           TieredGetResult* r);
  // Reads the plan's (delivered) objects again, as a promotion does.
  Status RereadForPromotion(const CoalescePlan& plan, uint8_t* stage, uint64_t obj_bytes);
  // Copies the plan's staged objects into DRAM, where they are not already.
  void PromoteToDram(std::span<const Key> keys, const CoalescePlan& plan, const uint8_t* stage,
                     uint64_t obj_bytes);
  // REQUIRES mu_. Counts `blocks` revoked from the prefetch `r` (one revocation per prefetch).
  void CountRevokedLocked(uint32_t blocks, TieredGetResult* r) REQUIRES(mu_);

  const TieredStoreOptions options_;
  std::unique_ptr<DramArena> dram_;
  std::unique_ptr<DramArena> staging_;
  std::unique_ptr<SsdFilePool> ssd_;
  std::unique_ptr<IoEngine> engine_;
  uint64_t dram_cap_ = 0;
  std::string io_note_;  // why MakeIoEngine fell back, if it did

  mutable Mutex mu_;
  std::unordered_map<Key, Object, KeyHash> objects_ GUARDED_BY(mu_);
  std::list<Key> lru_ GUARDED_BY(mu_);          // front = most recently used
  std::deque<Bucket> buckets_ GUARDED_BY(mu_);  // creation order; front = oldest live
  uint64_t next_bucket_id_ GUARDED_BY(mu_) = 0;
  bool bucket_open_ GUARDED_BY(mu_) = false;
  uint32_t head_file_ GUARDED_BY(mu_) = 0;
  uint64_t head_off_ GUARDED_BY(mu_) = 0;
  TieredStats stats_ GUARDED_BY(mu_);
  // Object size of the one layout this store holds (0 = none yet).
  uint64_t obj_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t block_bytes_ GUARDED_BY(mu_) = 0;  // that layout's block bytes (unaligned)

  Mutex evict_mu_ ACQUIRED_BEFORE(mu_);  // one eviction pass at a time

  Mutex staging_mu_ ACQUIRED_BEFORE(mu_);
  CondVar staging_cv_;
  uint64_t staging_used_ GUARDED_BY(staging_mu_) = 0;
};

}  // namespace flatcake::baseline
