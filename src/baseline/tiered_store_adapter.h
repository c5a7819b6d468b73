// TieredStoreAdapter: the tiered baseline behind the `Store` interface, so that the CLI, Python
// and the replay run either policy through one interface.
//
// How the interface maps onto the baseline:
//  - Put admits every block to DRAM (WriteHints are ignored: tiered placement has no policy to
//    feed); written counts admitted and re-persisted blocks, medium is always kDram, segments is
//    the number of objects written (one per block). Unlike the flat store, a failing Put may have
//    published the blocks before the failing one.
//  - Lookup: leading hits, bytes per medium; a hit with no DRAM copy makes the slowest medium
//    kSsd.
//  - Restore runs the tiered Get to completion on the calling thread (its staging pool and
//    revocation are the baseline's own scheduling) and returns a handle that is already done.
//    The prefetch deadline is PrefetchTimeoutSeconds for keys.size() * tokens_per_block tokens.
//    on_layer is called for every layer, in order, once the delivered blocks are in `dst`
//    (before the SSD hits are promoted). GetResult: revoked hits are misses, counted in
//    `revoked`; queued_ns is the time from arrival until the prefetch got its staging memory (the
//    tiered analogue of the flat store's read window; 0 for a restore that needs no SSD),
//    ssd_read_ns the rest of the delivery; corrupt is 0 (objects carry no checksums).
//  - Reclaim and Clear are not supported by the baseline (its eviction is its own): Reclaim
//    frees nothing, Clear is a no-op.
//  - GetStats maps TieredStats onto StoreStats (restore_window_peak_bytes = the staging peak);
//    the tiered-only counters (promotions, evictions, offloads, buckets dropped, revocations)
//    are read through tiered().GetStats().
//
// Thread safety: as TieredStore; every method may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "baseline/tiered_store.h"
#include "flatcake/store.h"

namespace flatcake::baseline {

// The StoreOptions describing a tiered store's options (budgets, directories, I/O knobs,
// tokens_per_block; bucket_bytes as the SSD file size, staging_bytes as the read window).
StoreOptions DescribeTieredOptions(const TieredStoreOptions& options);
// The tiered store the same StoreOptions ask for, its inverse: budgets, directories, I/O knobs,
// watermarks and tokens_per_block carry over, ssd_file_bytes becomes the bucket size and
// read_window_bytes the staging pool; the baseline's own knobs keep their (Mooncake) defaults.
TieredStoreOptions TieredOptionsFrom(const StoreOptions& options);

class TieredStoreAdapter final : public Store {
 public:
  static Result<std::unique_ptr<TieredStoreAdapter>> Open(const TieredStoreOptions& options);
  explicit TieredStoreAdapter(std::unique_ptr<TieredStore> tiered);

  Result<PutResult> Put(std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& src,
                        const WriteHints& hints = {}) override;
  LookupResult Lookup(std::span<const Key> keys) override;
  Result<std::unique_ptr<RestoreHandle>> Restore(std::span<const Key> keys, const KvLayout& layout,
                                                 const BlockBuffers& dst,
                                                 const RestoreOptions& options = {}) override;
  uint64_t Reclaim(MediaType medium, double target_fraction) override;
  void Clear() override;
  StoreStats GetStats() const override;
  StoreInfo GetInfo() const override;
  const StoreOptions& options() const override { return options_; }

  TieredStore& tiered() { return *tiered_; }
  const TieredStore& tiered() const { return *tiered_; }

 private:
  const std::unique_ptr<TieredStore> tiered_;
  const StoreOptions options_;
  std::atomic<uint64_t> puts_{0}, gets_{0}, lookups_{0};
  std::atomic<uint64_t> restores_dram_ready_{0}, restores_ssd_{0};
  std::atomic<uint64_t> blocks_written_{0}, blocks_skipped_{0};
  std::atomic<uint64_t> hits_{0}, misses_{0};
};

}  // namespace flatcake::baseline
