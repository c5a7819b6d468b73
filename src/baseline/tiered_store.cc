#include "baseline/tiered_store.h"

#include <algorithm>
#include <cstring>

#include "io/coalesce.h"
#include "util/align.h"
#include "util/aligned_buffer.h"

namespace flatcake::baseline {
namespace {

constexpr uint64_t kAlign = 4096;
using Clock = std::chrono::steady_clock;

// A block is stored as one page-contiguous object: its slices in [layer][plane] order.
void CopyBlockIn(const BlockBuffers& src, const KvLayout& layout, uint64_t b, uint8_t* obj) {
  uint64_t pos = 0;
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (uint32_t p = 0; p < layout.num_planes; ++p) {
      std::memcpy(obj + pos, SliceAddress(src, layout, b, l, p), layout.slice_bytes);
      pos += layout.slice_bytes;
    }
  }
}
void CopyBlockOut(const uint8_t* obj, const KvLayout& layout, const BlockBuffers& dst, uint64_t b) {
  uint64_t pos = 0;
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (uint32_t p = 0; p < layout.num_planes; ++p) {
      std::memcpy(SliceAddress(dst, layout, b, l, p), obj + pos, layout.slice_bytes);
      pos += layout.slice_bytes;
    }
  }
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Status ValidateTieredStoreOptions(const TieredStoreOptions& o) {
  if (o.dram_bytes == 0) return Status::InvalidArgument("tiered: dram_bytes must be > 0");
  if (!(o.high_watermark > 0 && o.high_watermark <= 1)) {
    return Status::InvalidArgument("tiered: high_watermark must be in (0, 1]");
  }
  if (!(o.eviction_ratio > 0 && o.eviction_ratio < o.high_watermark)) {
    return Status::InvalidArgument("tiered: eviction_ratio must be in (0, high_watermark)");
  }
  if (o.bucket_keys == 0) return Status::InvalidArgument("tiered: bucket_keys must be > 0");
  if (!o.ssd_dirs.empty()) {
    if (o.bucket_bytes < kAlign || o.bucket_bytes % kAlign != 0) {
      return Status::InvalidArgument("tiered: bucket_bytes must be a positive multiple of 4 KiB");
    }
    if (o.ssd_bytes < o.bucket_bytes) {
      return Status::InvalidArgument("tiered: ssd_bytes must hold at least one bucket");
    }
    if (o.staging_bytes < kAlign) {
      return Status::InvalidArgument("tiered: staging_bytes must be at least 4 KiB");
    }
  }
  if (o.max_io_bytes < kAlign || o.max_io_bytes % kAlign != 0) {
    return Status::InvalidArgument("tiered: max_io_bytes must be a positive multiple of 4 KiB");
  }
  if (o.prefetch_timeout_base_s < 0 || o.prefetch_timeout_per_ki_token_s < 0 ||
      o.prefetch_timeout_max_s < 0) {
    return Status::InvalidArgument("tiered: prefetch timeouts must be >= 0");
  }
  return Status::OK();
}

double PrefetchTimeoutSeconds(const TieredStoreOptions& o, uint64_t tokens) {
  const double t =
      o.prefetch_timeout_base_s + o.prefetch_timeout_per_ki_token_s * (tokens / 1024.0);
  return std::min(t, o.prefetch_timeout_max_s);
}

Result<std::unique_ptr<TieredStore>> TieredStore::Open(const TieredStoreOptions& options) {
  FC_RETURN_IF_ERROR(ValidateTieredStoreOptions(options));
  std::unique_ptr<TieredStore> store(new TieredStore(options));
  FC_RETURN_IF_ERROR(store->Init());
  return store;
}

TieredStore::TieredStore(const TieredStoreOptions& options) : options_(options) {}

TieredStore::~TieredStore() { engine_.reset(); }

Status TieredStore::Init() {
  if (!options_.ssd_dirs.empty()) {
    SsdFilePool::Options po;
    po.dirs = options_.ssd_dirs;
    po.file_bytes = options_.bucket_bytes;  // one bucket never straddles two files
    po.total_bytes = options_.ssd_bytes / options_.bucket_bytes * options_.bucket_bytes;
    po.direct_io = options_.direct_io;
    FC_ASSIGN_OR_RETURN(ssd_, SsdFilePool::Create(po));
    IoEngineOptions eo;
    eo.kind = options_.io_engine;
    eo.workers = options_.io_workers;
    eo.queue_depth = options_.io_queue_depth;
    FC_ASSIGN_OR_RETURN(engine_, MakeIoEngine(eo, &io_note_));
    FC_RETURN_IF_ERROR(engine_->RegisterFiles(ssd_->fds()));
    FC_ASSIGN_OR_RETURN(staging_, DramArena::Create(options_.staging_bytes, HugePageMode::kNone));
  }
  FC_ASSIGN_OR_RETURN(dram_, DramArena::Create(options_.dram_bytes, options_.huge_pages));
  // The arena rounds up to 2 MiB; the budget is what the caller asked for.
  dram_cap_ = options_.dram_bytes;
  MutexLock lock(mu_);  // uncontended: Open has not returned the store yet
  stats_.dram.capacity_bytes = dram_cap_;
  stats_.ssd.capacity_bytes = ssd_ ? ssd_->capacity() : 0;
  return Status::OK();
}

uint64_t TieredStore::ObjectBytes(const KvLayout& layout) const {
  return AlignUp(layout.block_bytes(), kAlign);
}

// --- DRAM allocation and eviction ---

Result<uint64_t> TieredStore::AllocateDram(uint64_t bytes) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (dram_->used() + bytes > options_.high_watermark * dram_cap_) EvictDown();
    if (dram_->used() + bytes <= dram_cap_) {
      auto off = dram_->Allocate(bytes);
      if (off.ok()) return off;
    }
  }
  return Status::NoSpace("tiered: DRAM full of pinned objects");
}

void TieredStore::EvictDown() {
  MutexLock evict_lock(evict_mu_);
  const uint64_t target =
      static_cast<uint64_t>((options_.high_watermark - options_.eviction_ratio) * dram_cap_);
  std::vector<Victim> victims;
  uint64_t obj_bytes = 0;
  {
    MutexLock lock(mu_);
    uint64_t used = dram_->used();
    if (used <= target) return;  // another thread evicted meanwhile
    // Walk from the least recently used end; `next` is taken before the victim leaves the list.
    for (auto it = lru_.end(); it != lru_.begin() && used > target;) {
      --it;
      const Key key = *it;
      Object& obj = objects_.at(key);
      if (obj.dram_pins > 0) continue;
      it = lru_.erase(it);
      obj.in_lru = false;
      obj.evicting = true;
      victims.push_back(
          Victim{key, static_cast<uint64_t>(obj.dram_off), obj.bucket, obj.ssd_off, false});
      used -= obj_bytes_;
    }
    obj_bytes = obj_bytes_;
    stats_.evictions += victims.size();
    // Offload, in eviction order, every victim that has no SSD copy yet.
    for (Victim& v : victims) {
      if (v.bucket >= 0) continue;  // already on SSD: nothing to write (it was promoted)
      v.write = ssd_ && AppendToBucketLocked(v.key, obj_bytes, &v.bucket, &v.ssd_off);
      if (!v.write) v.bucket = -1;  // dropped: no SSD tier, or a pinned bucket in the way
    }
  }
  Status st = WriteVictims(victims, obj_bytes);
  MutexLock lock(mu_);
  if (!st.ok()) stats_.io_errors++;
  for (const Victim& v : victims) {
    Object& obj = objects_.at(v.key);
    obj.evicting = false;
    if (v.write && st.ok() && FindBucketLocked(v.bucket) != nullptr) {
      obj.bucket = v.bucket;
      obj.ssd_off = v.ssd_off;
      stats_.offloads++;
    }
    if (obj.bucket < 0) stats_.evicted_dropped++;
    if (obj.dram_pins > 0) {
      obj.free_on_unpin = true;
    } else {
      FreeDramLocked(obj);
      if (obj.bucket < 0) objects_.erase(v.key);
    }
  }
}

Status TieredStore::WriteVictims(std::vector<Victim>& victims, uint64_t obj_bytes) {
  if (!ssd_) return Status::OK();
  // Victims appended back to back form runs of consecutive pool offsets: one write per run
  // (split at max_io), gathered from their scattered DRAM objects.
  std::vector<const Victim*> order;
  for (const Victim& v : victims) {
    if (v.write) order.push_back(&v);
  }
  if (order.empty()) return Status::OK();
  std::sort(order.begin(), order.end(),
            [](const Victim* a, const Victim* b) { return a->ssd_off < b->ssd_off; });
  const uint64_t fb = ssd_->file_bytes();
  const uint64_t per_op = std::max<uint64_t>(1, options_.max_io_bytes / obj_bytes);
  const uint64_t batch_objects = std::max<uint64_t>(per_op, (16 * kMiB) / obj_bytes);
  Result<AlignedBuffer> buf =
      AlignedBuffer::Allocate(batch_objects * obj_bytes, {.alignment = kAlign});
  if (!buf.ok()) return Status::NoSpace("tiered: cannot allocate the offload buffer");
  std::vector<IoOp> ops;
  uint64_t filled = 0;
  auto flush = [&]() -> Status {
    Status st = ExecuteSync(*engine_, ops);
    ops.clear();
    filled = 0;
    return st;
  };
  Status first;
  for (size_t i = 0; i < order.size();) {
    // A run: consecutive offsets in one file, at most per_op objects, fitting in the buffer.
    size_t j = i + 1;
    while (j < order.size() && j - i < per_op &&
           order[j]->ssd_off == order[j - 1]->ssd_off + obj_bytes &&
           order[j]->ssd_off / fb == order[i]->ssd_off / fb) {
      ++j;
    }
    if (filled + (j - i) > batch_objects) {
      Status st = flush();
      if (first.ok()) first = st;
    }
    uint8_t* dst = buf->data() + filled * obj_bytes;
    for (size_t k = i; k < j; ++k) {
      std::memcpy(dst + (k - i) * obj_bytes, dram_->base() + order[k]->dram_off, obj_bytes);
    }
    IoOp op;
    op.opcode = IoOpcode::kWrite;
    op.file = static_cast<uint32_t>(order[i]->ssd_off / fb);
    op.offset = order[i]->ssd_off % fb;
    op.buf = dst;
    op.len = (j - i) * obj_bytes;
    ops.push_back(op);
    filled += j - i;
    i = j;
  }
  if (!ops.empty()) {
    Status st = flush();
    if (first.ok()) first = st;
  }
  if (first.ok()) {
    MutexLock lock(mu_);
    stats_.ssd.written_bytes += order.size() * obj_bytes;
  }
  return first;
}

bool TieredStore::AppendToBucketLocked(const Key& key, uint64_t bytes, int64_t* bucket,
                                       uint64_t* pool_off) {
  const uint64_t fb = ssd_->file_bytes();
  if (bytes > fb) return false;
  Bucket* open = bucket_open_ && !buckets_.empty() ? &buckets_.back() : nullptr;
  if (open == nullptr || open->keys.size() >= options_.bucket_keys ||
      open->bytes + bytes > options_.bucket_bytes || head_off_ + bytes > fb) {
    // Close the open bucket; the next one starts at the ring head (the next file when this one
    // has no room left).
    if (head_off_ + bytes > fb) {
      head_file_ = (head_file_ + 1) % ssd_->num_files();
      head_off_ = 0;
    }
    // Make room for the new bucket's first object before opening it.
    while (!buckets_.empty()) {
      Bucket& oldest = buckets_.front();
      const bool overlaps = oldest.file == head_file_ && oldest.start < head_off_ + bytes &&
                            oldest.start + std::max<uint64_t>(oldest.bytes, 1) > head_off_;
      if (!overlaps) break;
      if (oldest.pins > 0) return false;
      DropOldestBucketLocked();
    }
    Bucket b;
    b.id = next_bucket_id_++;
    b.file = head_file_;
    b.start = head_off_;
    buckets_.push_back(std::move(b));
    bucket_open_ = true;
    stats_.buckets_written++;
    open = &buckets_.back();
  } else {
    // Growing the open bucket: drop older buckets that lie in the way.
    while (buckets_.size() > 1) {
      Bucket& oldest = buckets_.front();
      const bool overlaps = oldest.file == head_file_ && oldest.start < head_off_ + bytes &&
                            oldest.start + oldest.bytes > head_off_;
      if (!overlaps) break;
      if (oldest.pins > 0) return false;
      DropOldestBucketLocked();
    }
    open = &buckets_.back();
  }
  *bucket = static_cast<int64_t>(open->id);
  *pool_off = uint64_t{head_file_} * fb + head_off_;
  open->keys.push_back(key);
  open->bytes += bytes;
  head_off_ += bytes;
  stats_.ssd.used_bytes += bytes;
  return true;
}

void TieredStore::DropOldestBucketLocked() {
  Bucket& b = buckets_.front();
  for (const Key& k : b.keys) {
    auto it = objects_.find(k);
    if (it == objects_.end() || it->second.bucket != static_cast<int64_t>(b.id)) continue;
    Object& obj = it->second;
    obj.bucket = -1;
    if (obj.dram_off < 0 && !obj.evicting && !obj.writing && !obj.promoting) {
      objects_.erase(it);
      stats_.blocks_dropped++;
    }
  }
  stats_.buckets_dropped++;
  stats_.ssd.reclaimed_bytes += b.bytes;
  stats_.ssd.used_bytes -= b.bytes;
  if (buckets_.size() == 1) bucket_open_ = false;
  buckets_.pop_front();
}

TieredStore::Bucket* TieredStore::FindBucketLocked(int64_t id) {
  if (id < 0 || buckets_.empty()) return nullptr;
  const uint64_t first = buckets_.front().id;
  if (static_cast<uint64_t>(id) < first || static_cast<uint64_t>(id) - first >= buckets_.size()) {
    return nullptr;
  }
  return &buckets_[static_cast<uint64_t>(id) - first];
}

void TieredStore::FreeDramLocked(Object& obj) {
  if (obj.dram_off >= 0) {
    dram_->Free(static_cast<uint64_t>(obj.dram_off), obj_bytes_);
    obj.dram_off = -1;
  }
  obj.free_on_unpin = false;
}

void TieredStore::UnpinDramLocked(const Key& key) {
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  Object& obj = it->second;
  if (--obj.dram_pins == 0 && obj.free_on_unpin) {
    FreeDramLocked(obj);
    if (obj.bucket < 0 && !obj.evicting) objects_.erase(it);
  }
}

void TieredStore::TouchLocked(const Key& key, Object& obj) {
  if (obj.in_lru) {
    lru_.splice(lru_.begin(), lru_, obj.lru);
  } else if (!obj.evicting && !obj.free_on_unpin && obj.dram_off >= 0) {
    lru_.push_front(key);
    obj.lru = lru_.begin();
    obj.in_lru = true;
  }
}

// --- Put / Exists ---

Status TieredStore::Put(std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& src,
                        uint32_t* admitted, uint32_t* repersisted) {
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  FC_RETURN_IF_ERROR(ValidateBuffers(src, layout, keys.size()));
  const uint64_t obj_bytes = ObjectBytes(layout);
  {
    MutexLock lock(mu_);
    if (obj_bytes_ == 0) {
      obj_bytes_ = obj_bytes;
      block_bytes_ = layout.block_bytes();
    }
    if (obj_bytes_ != obj_bytes) {
      return Status::InvalidArgument("tiered: every block must have the same layout (" +
                                     layout.ToString() + " differs)");
    }
  }
  uint32_t n_admitted = 0, n_repersisted = 0;
  Status result;
  for (uint64_t b = 0; b < keys.size(); ++b) {
    bool repersist = false;
    {
      MutexLock lock(mu_);
      auto [it, inserted] = objects_.try_emplace(keys[b]);
      Object& obj = it->second;
      if (!inserted) {
        // In DRAM, or being written by another request: nothing to do.
        if (obj.dram_off >= 0 || obj.writing || obj.evicting || obj.promoting) continue;
        repersist = true;  // only on SSD: the recomputed block lands in DRAM again
      }
      obj.writing = true;
    }
    auto off = AllocateDram(obj_bytes);
    // The object is invisible (writing) and its range is ours: copy without the lock.
    if (off.ok()) CopyBlockIn(src, layout, b, dram_->base() + *off);
    MutexLock lock(mu_);
    Object& obj = objects_.at(keys[b]);
    obj.writing = false;
    if (!off.ok()) {
      if (obj.bucket < 0) objects_.erase(keys[b]);
      if (result.ok()) result = off.status();
      continue;
    }
    obj.dram_off = static_cast<int64_t>(*off);
    TouchLocked(keys[b], obj);
    stats_.dram.written_bytes += obj_bytes;
    if (repersist) {
      stats_.repersisted++;
      ++n_repersisted;
    } else {
      stats_.dram.admitted_bytes += obj_bytes;
      ++n_admitted;
    }
  }
  if (admitted) *admitted = n_admitted;
  if (repersisted) *repersisted = n_repersisted;
  return result;
}

LookupResult TieredStore::Lookup(std::span<const Key> keys) {
  MutexLock lock(mu_);
  LookupResult out;
  for (const Key& k : keys) {
    auto it = objects_.find(k);
    if (it == objects_.end() || it->second.writing) break;
    const Object& obj = it->second;
    if (obj.dram_off < 0 && obj.bucket < 0) break;
    if (obj.dram_off >= 0) {
      out.dram_bytes += block_bytes_;
    } else {
      out.ssd_bytes += block_bytes_;
      out.slowest_medium = MediaType::kSsd;
    }
    ++out.leading_hits;
  }
  return out;
}

// --- Get ---

int64_t TieredStore::AcquireStaging(uint64_t bytes,
                                    std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(staging_mu_);
  for (;;) {
    auto off = staging_->Allocate(bytes);
    if (off.ok()) {
      staging_used_ += AlignUp(bytes, kAlign);
      MutexLock l2(mu_);
      stats_.staging_peak_bytes = std::max(stats_.staging_peak_bytes, staging_used_);
      return static_cast<int64_t>(*off);
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    staging_cv_.WaitUntil(staging_mu_, deadline);
  }
}

void TieredStore::ReleaseStaging(uint64_t off, uint64_t bytes) {
  {
    MutexLock lock(staging_mu_);
    staging_->Free(off, bytes);
    staging_used_ -= AlignUp(bytes, kAlign);
  }
  staging_cv_.NotifyAll();
}

Result<TieredGetResult> TieredStore::Get(std::span<const Key> keys, const KvLayout& layout,
                                         const BlockBuffers& dst, double timeout_s,
                                         const std::function<void()>& on_delivered) {
  const auto t0 = std::chrono::steady_clock::now();
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  FC_RETURN_IF_ERROR(ValidateBuffers(dst, layout, keys.size()));
  const uint64_t obj_bytes = ObjectBytes(layout);
  TieredGetResult r;
  r.found.assign(keys.size(), 0);
  Hits hits;
  FC_RETURN_IF_ERROR(FindAndPinHits(keys, layout, obj_bytes, &hits));
  DeliverDramHits(keys, layout, dst, hits, &r);
  if (!hits.ssd.empty() && ssd_) {
    const auto deadline =
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    FC_RETURN_IF_ERROR(DeliverSsdHits(keys, layout, dst, hits.ssd, t0, deadline, on_delivered, &r));
  }
  if (r.deliver_s == 0) {
    r.deliver_s = Since(t0);
    if (on_delivered) on_delivered();  // not yet called: nothing was promoted
  }
  {
    MutexLock lock(mu_);
    stats_.dram.read_bytes += r.bytes_from_dram;
    stats_.dram.delivered_bytes += r.bytes_from_dram;
  }
  for (uint8_t f : r.found) r.hits += f;
  while (r.leading_hits < keys.size() && r.found[r.leading_hits]) r.leading_hits++;
  return r;
}

Status TieredStore::FindAndPinHits(std::span<const Key> keys, const KvLayout& layout,
                                   uint64_t obj_bytes, Hits* hits) {
  MutexLock lock(mu_);
  if (obj_bytes_ != 0 && obj_bytes_ != obj_bytes) {
    return Status::InvalidArgument("tiered: read layout " + layout.ToString() +
                                   " differs from the stored one");
  }
  for (uint32_t i = 0; i < keys.size(); ++i) {
    auto it = objects_.find(keys[i]);
    if (it == objects_.end() || it->second.writing) continue;
    Object& obj = it->second;
    if (obj.dram_off >= 0) {
      obj.dram_pins++;
      TouchLocked(keys[i], obj);
      hits->dram.push_back(i);
      hits->dram_offs.push_back(static_cast<uint64_t>(obj.dram_off));
    } else if (obj.bucket >= 0) {
      hits->ssd.push_back(i);
    }
  }
  return Status::OK();
}

void TieredStore::DeliverDramHits(std::span<const Key> keys, const KvLayout& layout,
                                  const BlockBuffers& dst, const Hits& hits, TieredGetResult* r) {
  for (size_t h = 0; h < hits.dram.size(); ++h) {
    CopyBlockOut(dram_->base() + hits.dram_offs[h], layout, dst, hits.dram[h]);
    r->found[hits.dram[h]] = 1;
  }
  {
    MutexLock lock(mu_);
    for (uint32_t i : hits.dram) UnpinDramLocked(keys[i]);
  }
  r->dram_hits = static_cast<uint32_t>(hits.dram.size());
  r->bytes_from_dram = uint64_t{r->dram_hits} * layout.block_bytes();
}

void TieredStore::CountRevokedLocked(uint32_t blocks, TieredGetResult* r) {
  if (r->revoked == 0) stats_.revocations++;
  stats_.revoked_blocks += blocks;
  r->revoked += blocks;
}

Status TieredStore::DeliverSsdHits(std::span<const Key> keys, const KvLayout& layout,
                                   const BlockBuffers& dst, std::vector<uint32_t> ssd_hits,
                                   Clock::time_point t0, Clock::time_point deadline,
                                   const std::function<void()>& on_delivered, TieredGetResult* r) {
  const uint64_t obj_bytes = ObjectBytes(layout);
  // Trim a prefetch larger than the whole pool to its leading part (it could never fit).
  const uint64_t fit = options_.staging_bytes / obj_bytes;
  size_t keep = std::min<size_t>(ssd_hits.size(), fit);
  int64_t soff = -1;
  const auto w0 = std::chrono::steady_clock::now();
  if (keep > 0) soff = AcquireStaging(keep * obj_bytes, deadline);
  r->staging_wait_s = Since(w0);
  if (soff < 0) keep = 0;
  const uint32_t revoked = static_cast<uint32_t>(ssd_hits.size() - keep);
  if (revoked > 0) {
    MutexLock lock(mu_);
    CountRevokedLocked(revoked, r);
  }
  if (keep == 0) return Status::OK();
  ssd_hits.resize(keep);
  std::vector<int64_t> pinned_buckets;
  std::vector<SliceRead> slices = PinBucketsOfHits(keys, ssd_hits, obj_bytes, &pinned_buckets);
  Status st;
  CoalescePlan plan;
  if (!slices.empty()) {
    CoalesceOptions co;
    co.max_gap = 0;  // merge only objects that are adjacent on disk
    co.max_io = options_.max_io_bytes;
    co.alignment = kAlign;
    st = PlanReads(slices, co, &plan);
  }
  // Objects land in the staging region in plan order (object s at s * obj_bytes), so each merged
  // read (consecutive on disk) is also consecutive in memory.
  uint8_t* stage = staging_->base() + soff;
  if (st.ok() && !slices.empty()) {
    size_t landed = 0;  // slices (in plan order) delivered
    st = ReadStagedBatches(plan, stage, obj_bytes, deadline, &landed, r);
    if (st.ok()) {
      for (size_t s = 0; s < landed; ++s) {
        const uint32_t ki = plan.slices[s].layer;
        CopyBlockOut(stage + s * obj_bytes, layout, dst, ki);
        r->found[ki] = 1;
        r->ssd_hits++;
      }
      r->bytes_from_ssd = uint64_t{r->ssd_hits} * layout.block_bytes();
      const uint32_t late = static_cast<uint32_t>(plan.slices.size() - landed);
      if (late > 0) {
        MutexLock lock(mu_);
        CountRevokedLocked(late, r);
      }
      plan.slices.resize(landed);  // only delivered objects are promoted
    }
  }
  {
    MutexLock lock(mu_);
    for (int64_t id : pinned_buckets) {
      if (Bucket* b = FindBucketLocked(id)) b->pins--;
    }
    stats_.ssd.read_bytes += r->ssd_bytes_read;
    stats_.ssd.delivered_bytes += r->bytes_from_ssd;
    if (!st.ok()) stats_.io_errors++;
  }
  r->deliver_s = Since(t0);
  if (st.ok() && on_delivered) on_delivered();
  // Promote the delivered objects into DRAM (they become the most recently used). Like the
  // store's load-back of an offloaded object, a promotion reads it from SSD again.
  if (st.ok() && options_.promote_on_hit && options_.promotion_rereads && !plan.slices.empty()) {
    st = RereadForPromotion(plan, stage, obj_bytes);
  }
  if (st.ok() && options_.promote_on_hit) PromoteToDram(keys, plan, stage, obj_bytes);
  ReleaseStaging(static_cast<uint64_t>(soff), keep * obj_bytes);
  if (!st.ok()) return st.WithContext("tiered get");
  return Status::OK();
}

std::vector<SliceRead> TieredStore::PinBucketsOfHits(std::span<const Key> keys,
                                                     std::span<const uint32_t> ssd_hits,
                                                     uint64_t obj_bytes,
                                                     std::vector<int64_t>* pinned_buckets) {
  // Pin the buckets now (not while waiting for staging, so a long wait never blocks the ring);
  // an object whose bucket was dropped meanwhile is a miss.
  std::vector<SliceRead> slices;
  MutexLock lock(mu_);
  const uint64_t fb = ssd_->file_bytes();
  for (uint32_t i : ssd_hits) {
    auto it = objects_.find(keys[i]);
    if (it == objects_.end() || it->second.bucket < 0) continue;
    Bucket* b = FindBucketLocked(it->second.bucket);
    if (b == nullptr) continue;
    b->pins++;
    pinned_buckets->push_back(it->second.bucket);
    const uint64_t off = it->second.ssd_off;
    // `layer` carries the key index through the planner's sort.
    slices.push_back(SliceRead{static_cast<uint32_t>(off / fb), off % fb, obj_bytes, nullptr, i});
  }
  return slices;
}

Status TieredStore::ReadStagedBatches(const CoalescePlan& plan, uint8_t* stage, uint64_t obj_bytes,
                                      Clock::time_point deadline, size_t* landed,
                                      TieredGetResult* r) {
  std::vector<IoOp> ops;
  ops.reserve(plan.reads.size());
  for (const MergedRead& mr : plan.reads) {
    const SliceRead& first = plan.slices[mr.first_slice];
    IoOp op;
    op.opcode = IoOpcode::kRead;
    op.file = mr.file;
    op.offset = mr.offset;
    op.len = mr.len;
    op.buf = stage + mr.first_slice * obj_bytes + (mr.offset - first.offset);
    ops.push_back(op);
  }
  // Reads go out in batches (HiCache's storage batches); the deadline is checked as each batch
  // completes. A batch that completes after it is read but not delivered, and the batches after
  // it are never issued: the prefetch is revoked from there on.
  const size_t batch = std::max<uint32_t>(1, options_.prefetch_batch_objects);
  size_t next_op = 0;
  Status st;
  while (st.ok() && next_op < ops.size()) {
    size_t end = next_op, objs = 0;
    while (end < ops.size() && (objs < batch || end == next_op)) {
      objs += plan.reads[end].slice_count;
      ++end;
    }
    st = ExecuteSync(*engine_, std::span<const IoOp>(ops.data() + next_op, end - next_op));
    r->ssd_reads += end - next_op;
    for (size_t k = next_op; k < end; ++k) r->ssd_bytes_read += ops[k].len;
    next_op = end;
    if (!st.ok()) break;
    if (Clock::now() > deadline) break;
    *landed = plan.reads[end - 1].first_slice + plan.reads[end - 1].slice_count;
  }
  return st;
}

Status TieredStore::RereadForPromotion(const CoalescePlan& plan, uint8_t* stage,
                                       uint64_t obj_bytes) {
  std::vector<IoOp> ops;
  for (const MergedRead& mr : plan.reads) {
    if (mr.first_slice >= plan.slices.size()) break;
    const SliceRead& first = plan.slices[mr.first_slice];
    IoOp op;
    op.opcode = IoOpcode::kRead;
    op.file = mr.file;
    op.offset = mr.offset;
    op.len = std::min<uint64_t>(
        mr.len, (plan.slices.size() - mr.first_slice) * obj_bytes - (mr.offset - first.offset));
    op.buf = stage + mr.first_slice * obj_bytes + (mr.offset - first.offset);
    ops.push_back(op);
  }
  Status st = ExecuteSync(*engine_, ops);
  uint64_t bytes = 0;
  for (const IoOp& op : ops) bytes += op.len;
  MutexLock lock(mu_);
  stats_.ssd.read_bytes += bytes;
  stats_.promotion_read_bytes += bytes;
  return st;
}

void TieredStore::PromoteToDram(std::span<const Key> keys, const CoalescePlan& plan,
                                const uint8_t* stage, uint64_t obj_bytes) {
  for (size_t s = 0; s < plan.slices.size(); ++s) {
    const uint32_t ki = plan.slices[s].layer;
    {
      MutexLock lock(mu_);
      auto it = objects_.find(keys[ki]);
      if (it == objects_.end() || it->second.dram_off >= 0 || it->second.writing ||
          it->second.evicting || it->second.promoting) {
        continue;
      }
      it->second.promoting = true;  // stays readable from SSD meanwhile
    }
    auto off = AllocateDram(obj_bytes);
    if (off.ok()) std::memcpy(dram_->base() + *off, stage + s * obj_bytes, obj_bytes);
    MutexLock lock(mu_);
    auto it = objects_.find(keys[ki]);
    if (it == objects_.end()) {
      if (off.ok()) dram_->Free(*off, obj_bytes);
      continue;
    }
    Object& obj = it->second;
    obj.promoting = false;
    if (!off.ok()) {
      if (obj.bucket < 0 && obj.dram_off < 0) objects_.erase(it);
      continue;
    }
    obj.dram_off = static_cast<int64_t>(*off);
    TouchLocked(keys[ki], obj);
    stats_.dram.written_bytes += obj_bytes;
    stats_.promotions++;
  }
}

TieredStats TieredStore::GetStats() const {
  MutexLock lock(mu_);
  TieredStats s = stats_;
  s.dram.used_bytes = dram_->used();
  uint64_t d = 0, f = 0;
  for (const auto& [k, obj] : objects_) {
    d += obj.dram_off >= 0;
    f += obj.bucket >= 0;
  }
  s.dram.blocks_live = d;
  s.ssd.blocks_live = f;
  return s;
}

StoreInfo TieredStore::GetInfo() const {
  StoreInfo info;
  info.dram_page_mode = dram_->page_mode();
  info.io_engine = engine_ ? std::string(engine_->name()) : "none";
  info.io_note = io_note_;
  if (ssd_) {
    info.ssd_direct_io = ssd_->direct();
    info.ssd_note = ssd_->note();
    info.ssd_files = ssd_->num_files();
  }
  info.ssd_dirs = options_.ssd_dirs;
  return info;
}

void TieredStore::CountObjects(uint64_t* dram, uint64_t* ssd) const {
  TieredStats s = GetStats();
  *dram = s.dram.blocks_live;
  *ssd = s.ssd.blocks_live;
}

}  // namespace flatcake::baseline
