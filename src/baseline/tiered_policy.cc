#include "baseline/tiered_policy.h"

#include <algorithm>

#include "util/align.h"

namespace flatcake::baseline {

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
    if (o.bucket_bytes < kTieredAlign || o.bucket_bytes % kTieredAlign != 0) {
      return Status::InvalidArgument("tiered: bucket_bytes must be a positive multiple of 4 KiB");
    }
    if (o.ssd_bytes < o.bucket_bytes) {
      return Status::InvalidArgument("tiered: ssd_bytes must hold at least one bucket");
    }
    if (o.staging_bytes < kTieredAlign) {
      return Status::InvalidArgument("tiered: staging_bytes must be at least 4 KiB");
    }
  }
  if (o.max_io_bytes < kTieredAlign || o.max_io_bytes % kTieredAlign != 0) {
    return Status::InvalidArgument("tiered: max_io_bytes must be a positive multiple of 4 KiB");
  }
  if (o.prefetch_timeout_base_s < 0 || o.prefetch_timeout_per_ki_token_s < 0 ||
      o.prefetch_timeout_max_s < 0) {
    return Status::InvalidArgument("tiered: prefetch timeouts must be >= 0");
  }
  return Status::OK();
}

uint64_t TieredObjectBytes(const KvLayout& layout) {
  return AlignUp(layout.block_bytes(), kTieredAlign);
}

// --- prefetch policy ---

double PrefetchTimeoutSeconds(const TieredStoreOptions& o, uint64_t tokens) {
  const double t =
      o.prefetch_timeout_base_s + o.prefetch_timeout_per_ki_token_s * (tokens / 1024.0);
  return std::min(t, o.prefetch_timeout_max_s);
}

size_t PrefetchKeep(const TieredStoreOptions& o, uint64_t obj_bytes, size_t ssd_hits) {
  const uint64_t fit = o.staging_bytes / obj_bytes;
  return std::min<size_t>(ssd_hits, fit);
}

CoalesceOptions StagedReadOptions(const TieredStoreOptions& o) {
  CoalesceOptions co;
  co.max_gap = 0;  // merge only objects that are adjacent on disk
  co.max_io = o.max_io_bytes;
  co.alignment = kTieredAlign;
  return co;
}

std::vector<size_t> PartitionReadBatches(const CoalescePlan& plan, uint32_t batch_objects) {
  const size_t batch = std::max<uint32_t>(1, batch_objects);
  std::vector<size_t> ends;
  for (size_t next = 0; next < plan.reads.size();) {
    size_t end = next, objs = 0;
    while (end < plan.reads.size() && (objs < batch || end == next)) {
      objs += plan.reads[end].slice_count;
      ++end;
    }
    ends.push_back(end);
    next = end;
  }
  return ends;
}

size_t SlicesLanded(const CoalescePlan& plan, size_t reads_end) {
  if (reads_end == 0) return 0;
  const MergedRead& last = plan.reads[reads_end - 1];
  return last.first_slice + last.slice_count;
}

SsdGeometry SsdGeometry::ForOptions(const TieredStoreOptions& o) {
  if (o.ssd_dirs.empty()) return {};
  return {static_cast<uint32_t>(o.ssd_bytes / o.bucket_bytes), o.bucket_bytes};
}

// --- TieredDirectory ---

TieredDirectory::TieredDirectory(const TieredStoreOptions& options, DramSpace* dram,
                                 SsdGeometry ssd)
    : options_(options), dram_(dram), ssd_(ssd) {
  stats_.dram.capacity_bytes = options_.dram_bytes;
  stats_.ssd.capacity_bytes = uint64_t{ssd_.num_files} * ssd_.file_bytes;
}

Status TieredDirectory::AdoptLayout(const KvLayout& layout) {
  const uint64_t obj_bytes = TieredObjectBytes(layout);
  if (obj_bytes_ == 0) {
    obj_bytes_ = obj_bytes;
    block_bytes_ = layout.block_bytes();
  }
  if (obj_bytes_ != obj_bytes) {
    return Status::InvalidArgument("tiered: every block must have the same layout (" +
                                   layout.ToString() + " differs)");
  }
  return Status::OK();
}

PutAdmission TieredDirectory::BeginPut(const Key& key) {
  auto [it, inserted] = objects_.try_emplace(key);
  Object& obj = it->second;
  PutAdmission admission = PutAdmission::kNew;
  if (!inserted) {
    if (obj.dram_off >= 0 || obj.writing || obj.evicting || obj.promoting) {
      return PutAdmission::kPresent;
    }
    admission = PutAdmission::kRepersist;
  }
  obj.writing = true;
  return admission;
}

void TieredDirectory::FinishPut(const Key& key, PutAdmission admission,
                                std::optional<uint64_t> dram_off) {
  Object& obj = objects_.at(key);
  obj.writing = false;
  if (!dram_off) {
    if (obj.bucket < 0) objects_.erase(key);
    return;
  }
  obj.dram_off = static_cast<int64_t>(*dram_off);
  Touch(key, obj);
  stats_.dram.written_bytes += obj_bytes_;
  if (admission == PutAdmission::kRepersist) {
    stats_.repersisted++;
  } else {
    stats_.dram.admitted_bytes += obj_bytes_;
  }
}

// --- DRAM allocation and eviction ---

bool TieredDirectory::NeedsEviction(uint64_t bytes) const {
  return dram_->used() + bytes > options_.high_watermark * options_.dram_bytes;
}

Result<uint64_t> TieredDirectory::TryAllocateDram(uint64_t bytes) {
  if (dram_->used() + bytes > options_.dram_bytes) {
    return Status::NoSpace("tiered: DRAM budget exhausted");
  }
  return dram_->Allocate(bytes);
}

std::vector<EvictionVictim> TieredDirectory::ChooseVictims() {
  const uint64_t target = static_cast<uint64_t>(
      (options_.high_watermark - options_.eviction_ratio) * options_.dram_bytes);
  std::vector<EvictionVictim> victims;
  uint64_t used = dram_->used();
  if (used <= target) return victims;  // another pass evicted meanwhile
  victims.reserve(
      std::min<uint64_t>(lru_.size(), (used - target) / std::max<uint64_t>(1, obj_bytes_) + 1));
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
        EvictionVictim{key, static_cast<uint64_t>(obj.dram_off), obj.bucket, obj.ssd_off, false});
    used -= obj_bytes_;
  }
  stats_.evictions += victims.size();
  // Offload, in eviction order, every victim that has no SSD copy yet.
  for (EvictionVictim& v : victims) {
    if (v.bucket >= 0) continue;  // already on SSD: nothing to write (it was promoted)
    v.write = has_ssd() && AppendToBucket(v.key, obj_bytes_, &v.bucket, &v.ssd_off);
    if (!v.write) v.bucket = -1;  // dropped: no SSD tier, or a pinned bucket in the way
  }
  return victims;
}

void TieredDirectory::FinishEviction(std::span<const EvictionVictim> victims, bool write_ok) {
  for (const EvictionVictim& v : victims) {
    Object& obj = objects_.at(v.key);
    obj.evicting = false;
    if (v.write && write_ok && FindBucket(v.bucket) != nullptr) {
      obj.bucket = v.bucket;
      obj.ssd_off = v.ssd_off;
      stats_.offloads++;
    }
    if (obj.bucket < 0) stats_.evicted_dropped++;
    if (obj.dram_pins > 0) {
      obj.free_on_unpin = true;
    } else {
      FreeDram(obj);
      if (obj.bucket < 0) objects_.erase(v.key);
    }
  }
}

bool TieredDirectory::AppendToBucket(const Key& key, uint64_t bytes, int64_t* bucket,
                                     uint64_t* pool_off) {
  const uint64_t fb = ssd_.file_bytes;
  if (bytes > fb) return false;
  Bucket* open = bucket_open_ && !buckets_.empty() ? &buckets_.back() : nullptr;
  if (open == nullptr || open->keys.size() >= options_.bucket_keys ||
      open->bytes + bytes > options_.bucket_bytes || head_off_ + bytes > fb) {
    // Close the open bucket; the next one starts at the ring head (the next file when this one
    // has no room left).
    if (head_off_ + bytes > fb) {
      head_file_ = (head_file_ + 1) % ssd_.num_files;
      head_off_ = 0;
    }
    // Make room for the new bucket's first object before opening it.
    while (!buckets_.empty()) {
      Bucket& oldest = buckets_.front();
      const bool overlaps = oldest.file == head_file_ && oldest.start < head_off_ + bytes &&
                            oldest.start + std::max<uint64_t>(oldest.bytes, 1) > head_off_;
      if (!overlaps) break;
      if (oldest.pins > 0) return false;
      DropOldestBucket();
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
      DropOldestBucket();
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

void TieredDirectory::DropOldestBucket() {
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

TieredDirectory::Bucket* TieredDirectory::FindBucket(int64_t id) {
  if (id < 0 || buckets_.empty()) return nullptr;
  const uint64_t first = buckets_.front().id;
  if (static_cast<uint64_t>(id) < first || static_cast<uint64_t>(id) - first >= buckets_.size()) {
    return nullptr;
  }
  return &buckets_[static_cast<uint64_t>(id) - first];
}

void TieredDirectory::FreeDram(Object& obj) {
  if (obj.dram_off >= 0) {
    dram_->Free(static_cast<uint64_t>(obj.dram_off), obj_bytes_);
    obj.dram_off = -1;
  }
  obj.free_on_unpin = false;
}

void TieredDirectory::Touch(const Key& key, Object& obj) {
  if (obj.in_lru) {
    lru_.splice(lru_.begin(), lru_, obj.lru);
  } else if (!obj.evicting && !obj.free_on_unpin && obj.dram_off >= 0) {
    lru_.push_front(key);
    obj.lru = lru_.begin();
    obj.in_lru = true;
  }
}

// --- lookup and get ---

LookupResult TieredDirectory::Lookup(std::span<const Key> keys) const {
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

Status TieredDirectory::PinHits(std::span<const Key> keys, const KvLayout& layout,
                                TieredHits* hits) {
  if (obj_bytes_ != 0 && obj_bytes_ != TieredObjectBytes(layout)) {
    return Status::InvalidArgument("tiered: read layout " + layout.ToString() +
                                   " differs from the stored one");
  }
  for (uint32_t i = 0; i < keys.size(); ++i) {
    auto it = objects_.find(keys[i]);
    if (it == objects_.end() || it->second.writing) continue;
    Object& obj = it->second;
    if (obj.dram_off >= 0) {
      obj.dram_pins++;
      Touch(keys[i], obj);
      hits->dram.push_back(i);
      hits->dram_offs.push_back(static_cast<uint64_t>(obj.dram_off));
    } else if (obj.bucket >= 0) {
      hits->ssd.push_back(i);
    }
  }
  return Status::OK();
}

void TieredDirectory::UnpinDram(const Key& key) {
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  Object& obj = it->second;
  if (--obj.dram_pins == 0 && obj.free_on_unpin) {
    FreeDram(obj);
    if (obj.bucket < 0 && !obj.evicting) objects_.erase(it);
  }
}

std::vector<SliceRead> TieredDirectory::PinBuckets(std::span<const Key> keys,
                                                   std::span<const uint32_t> ssd_hits,
                                                   std::vector<int64_t>* pinned) {
  std::vector<SliceRead> slices;
  const uint64_t fb = ssd_.file_bytes;
  for (uint32_t i : ssd_hits) {
    auto it = objects_.find(keys[i]);
    if (it == objects_.end() || it->second.bucket < 0) continue;
    Bucket* b = FindBucket(it->second.bucket);
    if (b == nullptr) continue;
    b->pins++;
    pinned->push_back(it->second.bucket);
    const uint64_t off = it->second.ssd_off;
    slices.push_back(SliceRead{static_cast<uint32_t>(off / fb), off % fb, obj_bytes_, nullptr, i});
  }
  return slices;
}

void TieredDirectory::UnpinBuckets(std::span<const int64_t> pinned) {
  for (int64_t id : pinned) {
    if (Bucket* b = FindBucket(id)) b->pins--;
  }
}

void TieredDirectory::CountRevoked(uint32_t blocks, uint32_t* prefetch_revoked) {
  if (*prefetch_revoked == 0) stats_.revocations++;
  stats_.revoked_blocks += blocks;
  *prefetch_revoked += blocks;
}

// --- promotion ---

bool TieredDirectory::BeginPromotion(const Key& key) {
  auto it = objects_.find(key);
  if (it == objects_.end() || it->second.dram_off >= 0 || it->second.writing ||
      it->second.evicting || it->second.promoting) {
    return false;
  }
  it->second.promoting = true;
  return true;
}

bool TieredDirectory::FinishPromotion(const Key& key, std::optional<uint64_t> dram_off) {
  auto it = objects_.find(key);
  if (it == objects_.end()) {
    if (dram_off) dram_->Free(*dram_off, obj_bytes_);
    return false;
  }
  Object& obj = it->second;
  obj.promoting = false;
  if (!dram_off) {
    if (obj.bucket < 0 && obj.dram_off < 0) objects_.erase(it);
    return false;
  }
  obj.dram_off = static_cast<int64_t>(*dram_off);
  Touch(key, obj);
  stats_.dram.written_bytes += obj_bytes_;
  stats_.promotions++;
  return true;
}

TieredStats TieredDirectory::Stats() const {
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

// --- StagingPool ---

StagingPool::StagingPool(uint64_t capacity)
    : alloc_(AlignUp(capacity, kTieredAlign), /*boundary=*/0, kTieredAlign) {}

std::optional<uint64_t> StagingPool::TryAcquire(uint64_t bytes) {
  auto off = alloc_.Allocate(bytes);
  if (!off.ok()) return std::nullopt;
  used_ += AlignUp(bytes, kTieredAlign);
  peak_ = std::max(peak_, used_);
  return *off;
}

void StagingPool::Release(uint64_t offset, uint64_t bytes) {
  alloc_.Free(offset, bytes);
  used_ -= AlignUp(bytes, kTieredAlign);
}

}  // namespace flatcake::baseline
