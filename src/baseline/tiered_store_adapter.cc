#include "baseline/tiered_store_adapter.h"

#include <algorithm>
#include <utility>

#include "flatcake/clock.h"
#include "store/ready_restore_handle.h"

namespace flatcake::baseline {

StoreOptions DescribeTieredOptions(const TieredStoreOptions& t) {
  StoreOptions o;
  o.dram_bytes = t.dram_bytes;
  o.huge_pages = t.huge_pages;
  o.ssd_dirs = t.ssd_dirs;
  o.ssd_bytes = t.ssd_dirs.empty() ? 0 : t.ssd_bytes;
  o.ssd_file_bytes = t.bucket_bytes;  // the pool's files are one bucket each
  o.direct_io = t.direct_io;
  o.tokens_per_block = t.tokens_per_block;
  o.high_watermark = t.high_watermark;
  o.low_watermark = t.high_watermark - t.eviction_ratio;
  o.io_engine = t.io_engine;
  o.io_workers = t.io_workers;
  o.io_queue_depth = t.io_queue_depth;
  o.read_window_bytes = t.staging_bytes;  // SSD hits are staged through this pool
  o.max_gap_bytes = 0;                    // only adjacent objects are merged
  o.max_io_bytes = t.max_io_bytes;
  o.verify_checksums = false;
  return o;
}

TieredStoreOptions TieredOptionsFrom(const StoreOptions& o) {
  TieredStoreOptions t;
  t.dram_bytes = o.dram_bytes;
  t.huge_pages = o.huge_pages;
  t.ssd_dirs = o.ssd_dirs;
  t.ssd_bytes = o.ssd_bytes;
  t.bucket_bytes = o.ssd_file_bytes;
  t.direct_io = o.direct_io;
  t.tokens_per_block = o.tokens_per_block;
  t.high_watermark = o.high_watermark;
  t.eviction_ratio = o.high_watermark - o.low_watermark;
  t.io_engine = o.io_engine;
  t.io_workers = o.io_workers;
  t.io_queue_depth = o.io_queue_depth;
  t.staging_bytes = o.read_window_bytes;
  t.max_io_bytes = o.max_io_bytes;
  return t;
}

Result<std::unique_ptr<TieredStoreAdapter>> TieredStoreAdapter::Open(
    const TieredStoreOptions& options) {
  FC_ASSIGN_OR_RETURN(std::unique_ptr<TieredStore> tiered, TieredStore::Open(options));
  return std::make_unique<TieredStoreAdapter>(std::move(tiered));
}

TieredStoreAdapter::TieredStoreAdapter(std::unique_ptr<TieredStore> tiered)
    : tiered_(std::move(tiered)), options_(DescribeTieredOptions(tiered_->options())) {}

Result<PutResult> TieredStoreAdapter::Put(std::span<const Key> keys, const KvLayout& layout,
                                          const BlockBuffers& src, const WriteHints&) {
  puts_.fetch_add(1, std::memory_order_relaxed);
  uint32_t admitted = 0, repersisted = 0;
  Status st = tiered_->Put(keys, layout, src, &admitted, &repersisted);
  const uint32_t written = admitted + repersisted;
  blocks_written_.fetch_add(written, std::memory_order_relaxed);
  if (!st.ok()) return st;
  blocks_skipped_.fetch_add(keys.size() - written, std::memory_order_relaxed);
  PutResult r;
  r.written = written;
  r.already_present = static_cast<uint32_t>(keys.size()) - written;
  r.medium = MediaType::kDram;
  r.segments = written;
  return r;
}

LookupResult TieredStoreAdapter::Lookup(std::span<const Key> keys) {
  lookups_.fetch_add(1, std::memory_order_relaxed);
  return tiered_->Lookup(keys);
}

Result<std::unique_ptr<RestoreHandle>> TieredStoreAdapter::Restore(std::span<const Key> keys,
                                                                   const KvLayout& layout,
                                                                   const BlockBuffers& dst,
                                                                   const RestoreOptions& options) {
  gets_.fetch_add(1, std::memory_order_relaxed);
  const int64_t call_ns = SteadyNowNs();
  const int64_t arrival_ns = options.arrival_ns == kArrivalNow ? call_ns : options.arrival_ns;
  const double timeout_s =
      PrefetchTimeoutSeconds(tiered_->options(), keys.size() * uint64_t{options_.tokens_per_block});
  std::function<void()> on_delivered;
  if (options.on_layer) {
    on_delivered = [&] {
      for (uint32_t l = 0; l < layout.num_layers; ++l) options.on_layer(l);
    };
  }
  Result<TieredGetResult> t = tiered_->Get(keys, layout, dst, timeout_s, on_delivered);
  if (!t.ok()) {
    return std::unique_ptr<RestoreHandle>(
        std::make_unique<ReadyRestoreHandle>(t.status(), layout.num_layers));
  }
  GetResult g;
  g.found = std::move(t->found);
  g.hits = t->hits;
  g.leading_hits = t->leading_hits;
  g.bytes_from_dram = t->bytes_from_dram;
  g.bytes_from_ssd = t->bytes_from_ssd;
  g.ssd_bytes_read = t->ssd_bytes_read;
  g.ssd_reads = t->ssd_reads;
  g.revoked = t->revoked;
  const bool ssd = t->ssd_hits + t->revoked > 0;
  if (ssd) {
    const int64_t wait_ns = static_cast<int64_t>(t->staging_wait_s * 1e9);
    g.queued_ns = std::max<int64_t>(0, call_ns - arrival_ns) + wait_ns;
    g.ssd_read_ns = std::max<int64_t>(0, static_cast<int64_t>(t->deliver_s * 1e9) - wait_ns);
  }
  (ssd ? restores_ssd_ : restores_dram_ready_).fetch_add(1, std::memory_order_relaxed);
  hits_.fetch_add(g.hits, std::memory_order_relaxed);
  misses_.fetch_add(keys.size() - g.hits, std::memory_order_relaxed);
  return std::unique_ptr<RestoreHandle>(
      std::make_unique<ReadyRestoreHandle>(std::move(g), layout.num_layers));
}

uint64_t TieredStoreAdapter::Reclaim(MediaType, double) { return 0; }

void TieredStoreAdapter::Clear() {}

StoreStats TieredStoreAdapter::GetStats() const {
  const TieredStats t = tiered_->GetStats();
  StoreStats s;
  s.dram = t.dram;
  s.ssd = t.ssd;
  s.puts = puts_.load(std::memory_order_relaxed);
  s.gets = gets_.load(std::memory_order_relaxed);
  s.exists_calls = lookups_.load(std::memory_order_relaxed);
  s.restores_dram_ready = restores_dram_ready_.load(std::memory_order_relaxed);
  s.restores_ssd = restores_ssd_.load(std::memory_order_relaxed);
  s.restore_window_peak_bytes = t.staging_peak_bytes;
  s.blocks_written = blocks_written_.load(std::memory_order_relaxed);
  s.blocks_skipped_present = blocks_skipped_.load(std::memory_order_relaxed);
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.io_errors = t.io_errors;
  return s;
}

StoreInfo TieredStoreAdapter::GetInfo() const { return tiered_->GetInfo(); }

}  // namespace flatcake::baseline
