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
// The decisions are TieredDirectory's (tiered_policy.h), which the simulator runs as well; this
// class does the copies, the I/O and the waiting around them.
//
// Thread safety: every public method may be called concurrently. `mu_` guards the directory (the
// object map, the LRU list and the buckets); it is never held across data copies or I/O. Evictions
// (victim choice, offload writes) are serialised by `evict_mu_`. Readers pin what they copy: a
// pinned DRAM object is freed only when its last reader unpins, a pinned bucket is never dropped
// (an offload that would need its space drops its victim instead of waiting).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "baseline/tiered_policy.h"
#include "flatcake/key.h"
#include "flatcake/layout.h"
#include "flatcake/status.h"
#include "flatcake/store.h"
#include "io/coalesce.h"
#include "io/io_engine.h"
#include "media/dram_arena.h"
#include "media/ssd_file_pool.h"
#include "util/thread_annotations.h"

namespace flatcake::baseline {

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
  explicit TieredStore(const TieredStoreOptions& options);
  Status Init();

  // Allocates `bytes` of DRAM, evicting first when the watermark would be crossed.
  Result<uint64_t> AllocateDram(uint64_t bytes);
  // One eviction pass: the directory chooses the victims, this writes the offloaded ones.
  void EvictDown();
  Status WriteVictims(std::span<const EvictionVictim> victims, uint64_t obj_bytes);
  // Waits for `bytes` of staging until `deadline`; returns the offset or -1 on timeout.
  int64_t AcquireStaging(uint64_t bytes, std::chrono::steady_clock::time_point deadline);
  void ReleaseStaging(uint64_t off, uint64_t bytes);

  // The steps of Get.
  // Copies the DRAM hits out and unpins them.
  void DeliverDramHits(std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& dst,
                       const TieredHits& hits, TieredGetResult* r);
  // Stages the SSD hits (those that fit the staging pool by `deadline`), reads them in batches
  // until `deadline`, delivers what landed and promotes it; the rest is revoked.
  Status DeliverSsdHits(std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& dst,
                        std::vector<uint32_t> ssd_hits, std::chrono::steady_clock::time_point t0,
                        std::chrono::steady_clock::time_point deadline,
                        const std::function<void()>& on_delivered, TieredGetResult* r);
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

  const TieredStoreOptions options_;
  std::unique_ptr<DramArena> dram_;
  std::unique_ptr<DramArena> staging_;  // the staging memory; staging_pool_ places ranges in it
  std::unique_ptr<SsdFilePool> ssd_;
  std::unique_ptr<IoEngine> engine_;
  std::string io_note_;                                 // why MakeIoEngine fell back, if it did
  std::unique_ptr<DramSpaceOf<DramArena>> dram_space_;  // dram_, as the directory sees it

  // Every placement decision; its state (object map, LRU, buckets, counters) is guarded by mu_.
  mutable Mutex mu_;
  std::unique_ptr<TieredDirectory> dir_ PT_GUARDED_BY(mu_);

  Mutex evict_mu_ ACQUIRED_BEFORE(mu_);  // one eviction pass at a time

  mutable Mutex staging_mu_ ACQUIRED_BEFORE(mu_);
  CondVar staging_cv_;
  std::unique_ptr<StagingPool> staging_pool_ PT_GUARDED_BY(staging_mu_);  // null: no SSD tier
};

}  // namespace flatcake::baseline
