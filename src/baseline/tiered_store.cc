#include "baseline/tiered_store.h"

#include <algorithm>
#include <cstring>

#include "io/coalesce.h"
#include "util/aligned_buffer.h"

namespace flatcake::baseline {
namespace {

using Clock = std::chrono::steady_clock;

// A block is stored as one page-contiguous object: its slices in [layer][plane] order
// (GatherBlock and ScatterBlock, flatcake/layout.h, copy it in and out).

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

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
  // The arena rounds up to 2 MiB; the directory's budget is what the caller asked for
  // (options_.dram_bytes).
  dram_space_ = std::make_unique<DramSpaceOf<DramArena>>(dram_.get());
  const SsdGeometry geometry =
      ssd_ ? SsdGeometry{ssd_->num_files(), ssd_->file_bytes()} : SsdGeometry{};
  {
    MutexLock lock(mu_);  // uncontended: Open has not returned the store yet
    dir_ = std::make_unique<TieredDirectory>(options_, dram_space_.get(), geometry);
  }
  if (staging_) {
    MutexLock lock(staging_mu_);
    staging_pool_ = std::make_unique<StagingPool>(staging_->capacity());
  }
  return Status::OK();
}

// --- DRAM allocation and eviction ---

Result<uint64_t> TieredStore::AllocateDram(uint64_t bytes) {
  for (int attempt = 0; attempt < TieredDirectory::kAllocateAttempts; ++attempt) {
    bool evict = false;
    {
      MutexLock lock(mu_);
      evict = dir_->NeedsEviction(bytes);
    }
    if (evict) EvictDown();
    MutexLock lock(mu_);
    auto off = dir_->TryAllocateDram(bytes);
    if (off.ok()) return off;
  }
  return Status::NoSpace("tiered: DRAM full of pinned objects");
}

void TieredStore::EvictDown() {
  MutexLock evict_lock(evict_mu_);
  std::vector<EvictionVictim> victims;
  uint64_t obj_bytes = 0;
  {
    MutexLock lock(mu_);
    victims = dir_->ChooseVictims();
    obj_bytes = dir_->obj_bytes();
  }
  if (victims.empty()) return;  // another thread evicted meanwhile, or every object is pinned
  Status st = WriteVictims(victims, obj_bytes);
  MutexLock lock(mu_);
  if (!st.ok()) dir_->counters().io_errors++;
  dir_->FinishEviction(victims, st.ok());
}

Status TieredStore::WriteVictims(std::span<const EvictionVictim> victims, uint64_t obj_bytes) {
  if (!ssd_) return Status::OK();
  // Victims appended back to back form runs of consecutive pool offsets: one write per run
  // (split at max_io), gathered from their scattered DRAM objects.
  std::vector<const EvictionVictim*> order;
  for (const EvictionVictim& v : victims) {
    if (v.write) order.push_back(&v);
  }
  if (order.empty()) return Status::OK();
  std::sort(order.begin(), order.end(), [](const EvictionVictim* a, const EvictionVictim* b) {
    return a->ssd_off < b->ssd_off;
  });
  const uint64_t fb = ssd_->file_bytes();
  const uint64_t per_op = std::max<uint64_t>(1, options_.max_io_bytes / obj_bytes);
  const uint64_t batch_objects = std::max<uint64_t>(per_op, (16 * kMiB) / obj_bytes);
  Result<AlignedBuffer> buf =
      AlignedBuffer::Allocate(batch_objects * obj_bytes, {.alignment = kTieredAlign});
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
    dir_->counters().ssd.written_bytes += order.size() * obj_bytes;
  }
  return first;
}

// --- Put / Exists ---

Status TieredStore::Put(std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& src,
                        uint32_t* admitted, uint32_t* repersisted) {
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  FC_RETURN_IF_ERROR(ValidateBuffers(src, layout, keys.size()));
  const uint64_t obj_bytes = TieredObjectBytes(layout);
  {
    MutexLock lock(mu_);
    FC_RETURN_IF_ERROR(dir_->AdoptLayout(layout));
  }
  uint32_t n_admitted = 0, n_repersisted = 0;
  Status result;
  for (uint64_t b = 0; b < keys.size(); ++b) {
    PutAdmission admission;
    {
      MutexLock lock(mu_);
      admission = dir_->BeginPut(keys[b]);
    }
    if (admission == PutAdmission::kPresent) continue;
    auto off = AllocateDram(obj_bytes);
    // The object is invisible (writing) and its range is ours: copy without the lock.
    if (off.ok()) GatherBlock(src, layout, b, dram_->base() + *off);
    {
      MutexLock lock(mu_);
      dir_->FinishPut(keys[b], admission, off.ok() ? std::optional<uint64_t>(*off) : std::nullopt);
    }
    if (!off.ok()) {
      if (result.ok()) result = off.status();
    } else if (admission == PutAdmission::kRepersist) {
      ++n_repersisted;
    } else {
      ++n_admitted;
    }
  }
  if (admitted) *admitted = n_admitted;
  if (repersisted) *repersisted = n_repersisted;
  return result;
}

LookupResult TieredStore::Lookup(std::span<const Key> keys) {
  MutexLock lock(mu_);
  return dir_->Lookup(keys);
}

// --- Get ---

int64_t TieredStore::AcquireStaging(uint64_t bytes,
                                    std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(staging_mu_);
  for (;;) {
    if (std::optional<uint64_t> off = staging_pool_->TryAcquire(bytes)) {
      return static_cast<int64_t>(*off);
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    staging_cv_.WaitUntil(staging_mu_, deadline);
  }
}

void TieredStore::ReleaseStaging(uint64_t off, uint64_t bytes) {
  {
    MutexLock lock(staging_mu_);
    staging_pool_->Release(off, bytes);
  }
  staging_cv_.NotifyAll();
}

Result<TieredGetResult> TieredStore::Get(std::span<const Key> keys, const KvLayout& layout,
                                         const BlockBuffers& dst, double timeout_s,
                                         const std::function<void()>& on_delivered) {
  const auto t0 = std::chrono::steady_clock::now();
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  FC_RETURN_IF_ERROR(ValidateBuffers(dst, layout, keys.size()));
  TieredGetResult r;
  r.found.assign(keys.size(), 0);
  TieredHits hits;
  {
    MutexLock lock(mu_);
    FC_RETURN_IF_ERROR(dir_->PinHits(keys, layout, &hits));
  }
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
    TieredStats& c = dir_->counters();
    c.dram.read_bytes += r.bytes_from_dram;
    c.dram.delivered_bytes += r.bytes_from_dram;
  }
  for (uint8_t f : r.found) r.hits += f;
  while (r.leading_hits < keys.size() && r.found[r.leading_hits]) r.leading_hits++;
  return r;
}

void TieredStore::DeliverDramHits(std::span<const Key> keys, const KvLayout& layout,
                                  const BlockBuffers& dst, const TieredHits& hits,
                                  TieredGetResult* r) {
  for (size_t h = 0; h < hits.dram.size(); ++h) {
    ScatterBlock(dram_->base() + hits.dram_offs[h], layout, dst, hits.dram[h]);
    r->found[hits.dram[h]] = 1;
  }
  {
    MutexLock lock(mu_);
    for (uint32_t i : hits.dram) dir_->UnpinDram(keys[i]);
  }
  r->dram_hits = static_cast<uint32_t>(hits.dram.size());
  r->bytes_from_dram = uint64_t{r->dram_hits} * layout.block_bytes();
}

Status TieredStore::DeliverSsdHits(std::span<const Key> keys, const KvLayout& layout,
                                   const BlockBuffers& dst, std::vector<uint32_t> ssd_hits,
                                   Clock::time_point t0, Clock::time_point deadline,
                                   const std::function<void()>& on_delivered, TieredGetResult* r) {
  const uint64_t obj_bytes = TieredObjectBytes(layout);
  size_t keep = PrefetchKeep(options_, obj_bytes, ssd_hits.size());
  int64_t soff = -1;
  const auto w0 = std::chrono::steady_clock::now();
  if (keep > 0) soff = AcquireStaging(keep * obj_bytes, deadline);
  r->staging_wait_s = Since(w0);
  if (soff < 0) keep = 0;
  const uint32_t revoked = static_cast<uint32_t>(ssd_hits.size() - keep);
  if (revoked > 0) {
    MutexLock lock(mu_);
    dir_->CountRevoked(revoked, &r->revoked);
  }
  if (keep == 0) return Status::OK();
  ssd_hits.resize(keep);
  // Pin the buckets now (not while waiting for staging, so a long wait never blocks the ring);
  // an object whose bucket was dropped meanwhile is a miss.
  std::vector<int64_t> pinned_buckets;
  std::vector<SliceRead> slices;
  {
    MutexLock lock(mu_);
    slices = dir_->PinBuckets(keys, ssd_hits, &pinned_buckets);
  }
  Status st;
  CoalescePlan plan;
  if (!slices.empty()) st = PlanReads(slices, StagedReadOptions(options_), &plan);
  // Objects land in the staging region in plan order (object s at s * obj_bytes), so each merged
  // read (consecutive on disk) is also consecutive in memory.
  uint8_t* stage = staging_->base() + soff;
  if (st.ok() && !slices.empty()) {
    size_t landed = 0;  // slices (in plan order) delivered
    st = ReadStagedBatches(plan, stage, obj_bytes, deadline, &landed, r);
    if (st.ok()) {
      for (size_t s = 0; s < landed; ++s) {
        const uint32_t ki = plan.slices[s].layer;
        ScatterBlock(stage + s * obj_bytes, layout, dst, ki);
        r->found[ki] = 1;
        r->ssd_hits++;
      }
      r->bytes_from_ssd = uint64_t{r->ssd_hits} * layout.block_bytes();
      const uint32_t late = static_cast<uint32_t>(plan.slices.size() - landed);
      if (late > 0) {
        MutexLock lock(mu_);
        dir_->CountRevoked(late, &r->revoked);
      }
      plan.slices.resize(landed);  // only delivered objects are promoted
    }
  }
  {
    MutexLock lock(mu_);
    dir_->UnpinBuckets(pinned_buckets);
    TieredStats& c = dir_->counters();
    c.ssd.read_bytes += r->ssd_bytes_read;
    c.ssd.delivered_bytes += r->bytes_from_ssd;
    if (!st.ok()) c.io_errors++;
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
  Status st;
  size_t next_op = 0;
  for (size_t end : PartitionReadBatches(plan, options_.prefetch_batch_objects)) {
    st = ExecuteSync(*engine_, std::span<const IoOp>(ops.data() + next_op, end - next_op));
    r->ssd_reads += end - next_op;
    for (size_t k = next_op; k < end; ++k) r->ssd_bytes_read += ops[k].len;
    next_op = end;
    if (!st.ok()) break;
    if (Clock::now() > deadline) break;
    *landed = SlicesLanded(plan, end);
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
  TieredStats& c = dir_->counters();
  c.ssd.read_bytes += bytes;
  c.promotion_read_bytes += bytes;
  return st;
}

void TieredStore::PromoteToDram(std::span<const Key> keys, const CoalescePlan& plan,
                                const uint8_t* stage, uint64_t obj_bytes) {
  for (size_t s = 0; s < plan.slices.size(); ++s) {
    const uint32_t ki = plan.slices[s].layer;
    {
      MutexLock lock(mu_);
      if (!dir_->BeginPromotion(keys[ki])) continue;
    }
    auto off = AllocateDram(obj_bytes);
    if (off.ok()) std::memcpy(dram_->base() + *off, stage + s * obj_bytes, obj_bytes);
    MutexLock lock(mu_);
    dir_->FinishPromotion(keys[ki], off.ok() ? std::optional<uint64_t>(*off) : std::nullopt);
  }
}

TieredStats TieredStore::GetStats() const {
  uint64_t staging_peak = 0;
  {
    MutexLock lock(staging_mu_);
    if (staging_pool_) staging_peak = staging_pool_->peak();
  }
  MutexLock lock(mu_);
  TieredStats s = dir_->Stats();
  s.staging_peak_bytes = staging_peak;
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
