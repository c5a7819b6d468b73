#include "store/flat_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "media/durable_format.h"
#include "store/segment_layout.h"
#include "store/staging.h"
#include "util/checksum.h"
#include "util/file_mode.h"

namespace flatcake {

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  FC_ASSIGN_OR_RETURN(auto store, FlatStore::OpenWithEngine(options, nullptr));
  return std::unique_ptr<Store>(std::move(store));
}

Result<std::unique_ptr<FlatStore>> FlatStore::OpenWithEngine(const StoreOptions& options,
                                                             std::unique_ptr<IoEngine> engine) {
  FC_RETURN_IF_ERROR(ValidateStoreOptions(options));
  std::unique_ptr<FlatStore> store(new FlatStore(options, std::move(engine)));
  FC_RETURN_IF_ERROR(store->Init(/*shared=*/false));
  return store;
}

Result<std::unique_ptr<FlatStore>> FlatStore::OpenShared(const StoreOptions& options,
                                                         std::unique_ptr<IoEngine> engine) {
  FC_RETURN_IF_ERROR(ValidateStoreOptions(options));
  std::unique_ptr<FlatStore> store(new FlatStore(options, std::move(engine)));
  FC_RETURN_IF_ERROR(store->Init(/*shared=*/true));
  return store;
}

FlatStore::FlatStore(const StoreOptions& options, std::unique_ptr<IoEngine> engine)
    : options_(options), engine_(std::move(engine)), placer_(options_, *this) {}

FlatStore::~FlatStore() {
  if (syncer_.joinable()) {
    {
      MutexLock lock(sync_mu_);
      stop_syncer_ = true;
    }
    sync_cv_.NotifyAll();
    syncer_.join();
  }
  if (Durable(MediaType::kSsd) && options_.sync != SyncMode::kNone) {
    // A clean close leaves everything synced (data first, then the records naming it).
    if (ssd_->SyncData().ok()) (void)journal_[static_cast<int>(MediaType::kSsd)]->Sync();
  }
  StopScheduler();
  // The reader drains its restores through the engine, and the engine references the pool's fds:
  // stop both before the pool closes its files.
  restore_.reset();
  engine_.reset();
}

std::string FlatStore::SsdJournalPath() const {
  return options_.ssd_dirs.front() + "/" + durable::kJournalName;
}

SsdFilePool::Options FlatStore::SsdPoolOptions() const {
  SsdFilePool::Options po;
  po.dirs = options_.ssd_dirs;
  po.total_bytes = options_.ssd_bytes;
  po.file_bytes = options_.ssd_file_bytes;
  po.direct_io = options_.direct_io;
  po.durable = true;
  po.wipe = options_.wipe || !options_.recover;
  po.file_mode = options_.group_access ? kGroupFileMode : kOwnerOnlyFileMode;
  // No journal, or an empty one: nothing was ever published, so files a power cut left
  // unfinished while the pool was made are made again rather than refused.
  struct stat journal {};
  po.nothing_published =
      ::stat(SsdJournalPath().c_str(), &journal) != 0 ? errno == ENOENT : journal.st_size == 0;
  return po;
}

Status FlatStore::Init(bool shared) {
  // SSD first: a bad directory should fail before the DRAM arena is mapped and pre-faulted.
  if (!options_.ssd_dirs.empty()) {
    FC_ASSIGN_OR_RETURN(ssd_, SsdFilePool::Create(SsdPoolOptions()));
    info_.ssd_direct_io = ssd_->direct();
    info_.ssd_note = ssd_->note();
    info_.ssd_files = ssd_->num_files();
    info_.ssd_dirs = options_.ssd_dirs;
  }
  if (options_.dram_bytes > 0) {
    if (options_.dram_path.empty()) {
      FC_ASSIGN_OR_RETURN(dram_,
                          shared ? DramArena::CreateShared(options_.dram_bytes, options_.huge_pages)
                                 : DramArena::Create(options_.dram_bytes, options_.huge_pages));
    } else {
      FC_ASSIGN_OR_RETURN(dram_, DramArena::CreateFile(options_.dram_bytes, options_.dram_path,
                                                       options_.recover && !options_.wipe));
    }
    info_.dram_page_mode = dram_->page_mode();
    info_.dram_backing = dram_->file_backed()      ? "file " + options_.dram_path
                         : dram_->shared_fd() >= 0 ? "memfd (shared)"
                                                   : "anonymous";
  } else {
    info_.dram_page_mode = "none";
  }
  FC_RETURN_IF_ERROR(
      gva_space_.AddNode(options_.node_id, Capacity(MediaType::kDram), Capacity(MediaType::kSsd)));

  if (!engine_) {
    IoEngineOptions eo;
    eo.kind = options_.io_engine;
    eo.workers = options_.io_workers;
    eo.queue_depth = options_.io_queue_depth;
    FC_ASSIGN_OR_RETURN(engine_, MakeIoEngine(eo, &info_.io_note));
  }
  info_.io_engine = std::string(engine_->name());
  if (ssd_) {
    FC_RETURN_IF_ERROR(engine_->RegisterFiles(ssd_->fds()));
    ReaderOptions ro;
    ro.window_bytes = options_.read_window_bytes;
    ro.inflight_bytes = options_.read_inflight_bytes;
    ro.coalesce.max_gap = options_.max_gap_bytes;
    ro.coalesce.max_io = options_.max_io_bytes;
    FC_ASSIGN_OR_RETURN(restore_, RestoreReader::Create(*engine_, ro));
    FC_ASSIGN_OR_RETURN(write_staging_, StagingPool::ForSegmentWrites(
                                            options_.max_io_bytes, options_.write_staging_bytes));
    // Registered buffers spare the kernel pinning the pages of every write; best effort.
    const IoBufferRegion staging = write_staging_->region();
    (void)engine_->RegisterBuffers({&staging, 1});
    info_.ssd_write_io_bytes = write_staging_->buffer_bytes();
    info_.ssd_writes_in_flight = write_staging_->count();
  }
  if (dram_) {
    media_access_.dram = dram_->base();
    media_access_.dram_bytes = dram_->capacity();
  }
  if (ssd_) media_access_.ssd = &ssd_->geometry();
  media_access_.engine = engine_.get();
  writer_ = std::make_unique<SegmentWriter>(media_access_, write_staging_.get());

  uint64_t cap = options_.index_capacity;
  if (cap == 0) {
    // One slot per 16 KiB of capacity at most 64M slots, at least 64K: blocks are rarely smaller.
    cap = (Capacity(MediaType::kDram) + Capacity(MediaType::kSsd)) / (16 * kKiB);
    cap = std::clamp<uint64_t>(cap * 2, uint64_t{1} << 16, uint64_t{1} << 26);
  }
  // Both tables are sized by options alone: an absurd index_capacity or max_scopes is refused
  // here, with the sizes, rather than ending the process in an allocation failure.
  try {
    index_ = std::make_unique<BlockIndex>(cap);
  } catch (const std::bad_alloc&) {
    return Status::NoSpace("cannot allocate a block index of " + std::to_string(cap) +
                           " slots (index_capacity); lower it, or 0 sizes it from the capacities");
  }
  try {
    scopes_ = std::make_unique<ScopeSlot[]>(options_.max_scopes);
  } catch (const std::bad_alloc&) {
    return Status::NoSpace("cannot allocate " + std::to_string(options_.max_scopes) +
                           " scope slots of " + std::to_string(sizeof(ScopeSlot)) +
                           " bytes (max_scopes); lower it");
  }
  {
    // Uncontended (no other thread sees the store yet); the lock is taken for the analysis.
    MutexLock lock(mu_);
    for (uint32_t i = options_.max_scopes; i-- > 0;) free_scopes_.push_back(i);
  }
  if (ssd_) FC_RETURN_IF_ERROR(OpenJournal(MediaType::kSsd));
  if (dram_ && dram_->file_backed()) FC_RETURN_IF_ERROR(OpenJournal(MediaType::kDram));
  if (Durable(MediaType::kSsd) && options_.sync == SyncMode::kInterval) {
    syncer_ = std::thread([this] { SyncLoop(); });
  }
  return StartScheduler();
}

bool FlatStore::MediumEnabled(MediaType m) const {
  return m == MediaType::kDram ? dram_ != nullptr : ssd_ != nullptr;
}
uint64_t FlatStore::Capacity(MediaType m) const {
  if (m == MediaType::kDram) return dram_ ? dram_->capacity() : 0;
  return ssd_ ? ssd_->capacity() : 0;
}
uint64_t FlatStore::Used(MediaType m) const {
  if (m == MediaType::kDram) return dram_ ? dram_->used() : 0;
  return ssd_ ? ssd_->used() : 0;
}

Result<uint64_t> FlatStore::AllocateExtent(MediaType m, uint64_t bytes, uint64_t hint) {
  return m == MediaType::kDram ? dram_->Allocate(bytes, hint) : ssd_->Allocate(bytes, hint);
}

void FlatStore::FreeExtent(MediaType m, uint64_t offset, uint64_t bytes) {
  if (m == MediaType::kDram) {
    dram_->Free(offset, bytes);
  } else {
    ssd_->Free(offset, bytes);
  }
}

uint64_t FlatStore::NowNs() const {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

Result<PutResult> FlatStore::Put(std::span<const Key> keys, const KvLayout& layout,
                                 const BlockBuffers& src, const WriteHints& hints) {
  auto result = PutLocked(keys, layout, src, hints);
  MaybeCompactIndex();
  return result;
}

void FlatStore::MaybeCompactIndex() {
  // Compact once tombstones take a quarter of the table; wait for in-flight batches only when
  // they take half (until then a busy store just tries again after its next put).
  const size_t tomb = index_->tombstones();
  const size_t cap = index_->capacity();
  if (tomb < cap / 4) return;
  if (tomb >= cap / 2) {
    index_mu_.lock();
  } else if (!index_mu_.try_lock()) {
    return;
  }
  if (index_->tombstones() >= cap / 4) {
    MutexLock lock(leases_mu_);
    // Compact needs every reservation given up; nothing else runs meanwhile, so the reservations
    // in force lose nothing by taking their slots again after it.
    for (auto& [id, w] : writes_) {
      if (w->lost) continue;
      for (const BlockIndex::Reservation& r : w->slots) index_->Abort(r);
    }
    index_->Compact();
    for (auto& [id, w] : writes_) RetakeSlots(*w);
    index_compactions_.fetch_add(1, std::memory_order_relaxed);
  }
  index_mu_.unlock();
}

Result<PutResult> FlatStore::PutLocked(std::span<const Key> keys, const KvLayout& layout,
                                       const BlockBuffers& src, const WriteHints& hints) {
  ReaderLock index_lock(index_mu_);
  puts_.fetch_add(1, std::memory_order_relaxed);
  FC_RETURN_IF_ERROR(ValidateBuffers(src, layout, keys.size()));
  PutResult result;
  if (keys.empty()) return result;

  // 1. Reserve every key not already present (reserved keys stay invisible until published),
  // then place and allocate; the scope comes back pinned.
  PendingWrite w;
  FC_RETURN_IF_ERROR(ReserveBatch(keys, layout, hints, &w));
  result.already_present = w.already_present;
  if (w.todo.empty()) return result;
  const MediaType medium = w.placement.medium;

  // 2. Write each segment (the data half), then publish its entries.
  Status st;
  std::vector<uint64_t> checksums;
  for (const PendingSegment& ps : w.placement.segments) {
    st = writer_->Write(
        Reserved(w, ps), layout, src,
        std::span<const uint32_t>(w.todo).subspan(ps.first_block, ps.seg.num_blocks), &checksums);
    if (!st.ok()) break;
    media_[static_cast<int>(medium)].written.fetch_add(ps.seg.bytes, std::memory_order_relaxed);
    st = PublishNextSegment(w, checksums);
    if (!st.ok()) break;
    result.segments++;
  }
  const size_t published = w.published < w.placement.segments.size()
                               ? w.placement.segments[w.published].first_block
                               : w.todo.size();
  FinishWrite(w);
  result.written = static_cast<uint32_t>(published);
  result.medium = medium;
  if (!st.ok()) {
    io_errors_.fetch_add(1, std::memory_order_relaxed);
    return st.WithContext("put: " + std::to_string(published) + " of " +
                          std::to_string(w.todo.size()) + " blocks written before the error");
  }
  return result;
}

Status FlatStore::ReserveBatch(std::span<const Key> keys, const KvLayout& layout,
                               const WriteHints& hints, PendingWrite* w) {
  w->layout = layout;
  w->todo.reserve(keys.size());
  w->slots.reserve(keys.size());
  auto abort_all = [&] {
    for (auto r : w->slots) index_->Abort(r);
    w->slots.clear();
    w->todo.clear();
  };
  for (uint32_t i = 0; i < keys.size(); ++i) {
    BlockIndex::Reservation r;
    switch (index_->Reserve(keys[i], &r)) {
      case BlockIndex::ReserveOutcome::kReserved:
        w->todo.push_back(i);
        w->slots.push_back(r);
        break;
      case BlockIndex::ReserveOutcome::kExists: w->already_present++; break;
      case BlockIndex::ReserveOutcome::kFull:
        abort_all();
        return Status::NoSpace("block index is full (" + std::to_string(index_->capacity()) +
                               " slots); raise index_capacity");
    }
  }
  blocks_present_.fetch_add(w->already_present, std::memory_order_relaxed);
  if (w->todo.empty()) return Status::OK();
  Status st;
  {
    MutexLock lock(mu_);
    st = placer_.PlaceBatch(hints, keys, layout, static_cast<uint32_t>(w->todo.size()), NowNs(),
                            &w->placement);
  }
  if (!st.ok()) {
    abort_all();
    return st;
  }
  w->keys.reserve(w->todo.size());
  for (uint32_t i : w->todo) w->keys.push_back(keys[i]);
  return Status::OK();
}

Status FlatStore::PublishNextSegment(PendingWrite& w, std::span<const uint64_t> checksums) {
  const PendingSegment& ps = w.placement.segments[w.published];
  const uint32_t scope_id = w.placement.scope_id;
  const uint32_t gen = w.placement.gen;
  const MediaType medium = w.placement.medium;
  ScopeSlot& scope = scopes_[scope_id];
  const auto seg_keys = std::span<const Key>(w.keys).subspan(ps.first_block, ps.seg.num_blocks);
  if (Durable(medium)) {
    // The commit record, after the data and before publication: what a restart finds.
    FC_RETURN_IF_ERROR(CommitSegment(scope, ps, seg_keys, checksums.first(ps.seg.num_blocks)));
  } else {
    MutexLock lock(mu_);
    scope.keys.insert(scope.keys.end(), seg_keys.begin(), seg_keys.end());
    scope.blocks += ps.seg.num_blocks;
  }
  const SegmentLayout seg_layout(w.layout, ps.seg.num_blocks);
  for (uint32_t b = 0; b < ps.seg.num_blocks; ++b) {
    index_->Publish(
        w.slots[ps.first_block + b],
        BlockEntry(medium, ps.seg.base, seg_layout, b, checksums[b], scope_id, gen, ps.segment_no));
  }
  w.published++;
  media_[static_cast<int>(medium)].admitted.fetch_add(ps.seg.bytes, std::memory_order_relaxed);
  blocks_written_.fetch_add(ps.seg.num_blocks, std::memory_order_relaxed);
  return Status::OK();
}

void FlatStore::FinishWrite(PendingWrite& w) {
  if (w.todo.empty()) return;
  const std::vector<PendingSegment>& segs = w.placement.segments;
  const uint32_t scope_id = w.placement.scope_id;
  ScopeSlot& scope = scopes_[scope_id];
  scope.Touch(NowNs());
  if (w.published == segs.size()) {
    scope.Unpin();
    return;
  }
  if (!w.lost) {
    for (size_t k = segs[w.published].first_block; k < w.slots.size(); ++k) {
      index_->Abort(w.slots[k]);
    }
  }
  MutexLock lock(mu_);
  // A segment whose commit record went out (its sync failed after) stays the scope's: a restart
  // may find it, so its extent must not be reused before the scope is freed.
  std::vector<PendingSegment> abandon;
  for (size_t n = w.published; n < segs.size(); ++n) {
    if (scope.segments[segs[n].segment_no].first_key == Segment::kUncommitted) {
      abandon.push_back(segs[n]);
    }
  }
  placer_.AbandonSegments(scope_id, abandon);
  scope.Unpin();
  placer_.ReleaseIfEmpty(scope_id, w.placement.gen);
}

ReservedSegment FlatStore::Reserved(const PendingWrite& w, const PendingSegment& ps) {
  const SegmentLayout sl(w.layout, ps.seg.num_blocks);
  return ReservedSegment{w.placement.medium, ps.seg.base,  ps.seg.num_blocks, sl.PlaneStride(),
                         sl.LayerStride(),   ps.seg.bytes, ps.first_block};
}

Result<uint32_t> FlatStore::NewScope(MediaType medium, const KvLayout& layout,
                                     const std::string& session, uint64_t now_ns) {
  if (free_scopes_.empty()) {
    return Status::NoSpace("all " + std::to_string(options_.max_scopes) +
                           " scope slots are in use; raise max_scopes");
  }
  uint32_t id = free_scopes_.back();
  free_scopes_.pop_back();
  ScopeSlot& s = scopes_[id];
  s.medium = medium;
  s.layout = layout;
  s.block_bytes.store(layout.block_bytes(), std::memory_order_relaxed);
  s.session = session;
  s.segments.clear();
  s.keys.clear();
  s.checksums.clear();
  s.uid = next_scope_uid_++;
  s.journal_bytes = 0;
  s.used_bytes = 0;
  s.blocks = 0;
  s.Touch(now_ns);
  s.Activate();
  return id;
}

uint32_t FlatStore::AppendScopeSegment(uint32_t id, const Segment& seg) {
  ScopeSlot& s = scopes_[id];
  s.used_bytes += seg.bytes;
  s.segments.push_back(seg);
  return static_cast<uint32_t>(s.segments.size() - 1);
}

void FlatStore::PopScopeSegment(uint32_t id) {
  ScopeSlot& s = scopes_[id];
  s.used_bytes -= s.segments.back().bytes;
  s.segments.pop_back();
}

void FlatStore::ReleaseScope(uint32_t id, uint32_t retired_gen) {
  const ScopeSlot& s = scopes_[id];
  if (Durable(s.medium)) JournalFreeLocked(s);
  for (const Key& k : s.keys) index_->Erase(k, id, retired_gen);
  if (scope_release_listener_) scope_release_listener_(id, retired_gen, s.medium);
}

void FlatStore::RecycleScope(uint32_t id) {
  ScopeSlot& s = scopes_[id];
  s.session.clear();
  s.segments.clear();
  s.keys.clear();
  s.checksums.clear();
  s.used_bytes = 0;
  s.blocks = 0;
  free_scopes_.push_back(id);
}

void FlatStore::OnReclaimed(MediaType medium, uint64_t bytes, uint32_t scopes) {
  MediumCounters& mc = media_[static_cast<int>(medium)];
  mc.reclaimed.fetch_add(bytes, std::memory_order_relaxed);
  mc.scopes_reclaimed.fetch_add(scopes, std::memory_order_relaxed);
  if (bytes > 0 && Durable(medium)) {
    // sync=every: the free records are durable before the extents can be reused.
    if (medium == MediaType::kSsd && options_.sync == SyncMode::kEvery) {
      if (journal_[static_cast<int>(medium)]->Sync().ok()) {
        NotifySync(true);
      } else {
        journal_errors_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    MaybeCompactJournalLocked(medium);
  }
}

uint64_t FlatStore::Reclaim(MediaType medium, double target_fraction) {
  ReaderLock index_lock(index_mu_);
  MutexLock lock(mu_);
  return placer_.Reclaim(medium, static_cast<uint64_t>(target_fraction * Capacity(medium)),
                         ScopePlacer::kNoScope);
}

void FlatStore::Clear() {
  ReaderLock index_lock(index_mu_);
  MutexLock lock(mu_);
  // One record per durable medium frees every segment committed before it. Scopes a reader still
  // pins stay until they are reclaimed, but are gone after a restart either way.
  bool cleared = true;
  for (MediaType m : {MediaType::kDram, MediaType::kSsd}) {
    if (!Durable(m)) continue;
    Journal& j = *journal_[static_cast<int>(m)];
    Status st = j.Append([](uint64_t seq) { return durable::EncodeClear(seq); });
    if (st.ok() && m == MediaType::kSsd && options_.sync != SyncMode::kNone) {
      st = j.Sync();
      if (st.ok()) NotifySync(true);
    }
    if (!st.ok()) journal_errors_.fetch_add(1, std::memory_order_relaxed);
    cleared = cleared && st.ok();
  }
  clearing_ = cleared;
  for (MediaType m : {MediaType::kDram, MediaType::kSsd}) {
    placer_.Reclaim(m, 0, ScopePlacer::kNoScope);
  }
  clearing_ = false;
  if (cleared) {
    // What Clear could not free (pinned) is covered by its record all the same: no rewrite may
    // write its committed segments again.
    for (uint32_t i = 0; i < options_.max_scopes; ++i) {
      ScopeSlot& s = scopes_[i];
      if (!s.live() || !Durable(s.medium)) continue;
      for (Segment& seg : s.segments) {
        if (seg.first_key != Segment::kUncommitted) seg.cleared = true;
      }
    }
  }
  placer_.ForgetSessions();
  for (MediaType m : {MediaType::kDram, MediaType::kSsd}) MaybeCompactJournalLocked(m);
}

StoreStats FlatStore::GetStats() const {
  StoreStats st;
  MutexLock lock(mu_);
  st.sessions = placer_.num_sessions();
  for (MediaType m : {MediaType::kDram, MediaType::kSsd}) {
    const MediumCounters& c = media_[static_cast<int>(m)];
    MediumStats& ms = m == MediaType::kDram ? st.dram : st.ssd;
    ms.capacity_bytes = Capacity(m);
    ms.used_bytes = Used(m);
    ms.admitted_bytes = c.admitted.load();
    ms.written_bytes = c.written.load();
    ms.read_bytes = c.read.load();
    ms.delivered_bytes = c.delivered.load();
    ms.reclaimed_bytes = c.reclaimed.load();
    ms.scopes_reclaimed = c.scopes_reclaimed.load();
  }
  for (uint32_t i = 0; i < options_.max_scopes; ++i) {
    const ScopeSlot& s = scopes_[i];
    if (!s.live()) continue;
    MediumStats& ms = s.medium == MediaType::kDram ? st.dram : st.ssd;
    ms.scopes_live++;
    ms.blocks_live += s.blocks;
  }
  st.puts = puts_.load();
  st.gets = gets_.load();
  st.exists_calls = exists_.load();
  st.restores_dram_ready = restores_dram_.load();
  st.restores_ssd = restores_ssd_.load();
  st.restores_cancelled = restores_cancelled_.load();
  st.restore_window_peak_bytes = sched_ ? sched_->stats().peak_in_flight_bytes : 0;
  st.blocks_written = blocks_written_.load();
  st.blocks_skipped_present = blocks_present_.load();
  st.hits = hits_.load();
  st.misses = misses_.load();
  st.checksum_mismatches = mismatches_.load();
  st.io_errors = io_errors_.load();
  st.index_capacity = index_->capacity();
  st.index_size = index_->size();
  st.index_tombstones = index_->tombstones();
  st.index_compactions = index_compactions_.load();
  for (const auto& j : journal_) st.journal_bytes += j ? j->bytes() : 0;
  st.journal_rewrites = journal_rewrites_.load();
  st.journal_errors = journal_errors_.load();
  st.syncs = syncs_.load();
  st.recovered_blocks = info_.recovered_blocks;
  st.recovered_segments = info_.recovered_segments;
  st.skipped_records = info_.skipped_records;
  return st;
}

FlatStore::RestoreQueueDepth FlatStore::restore_queue_depth() const {
  if (!sched_) return {};
  const MasSchedulerStats s = sched_->stats();
  return {s.waiting_ssd, s.in_flight};
}

}  // namespace flatcake
