#include "store/flat_store.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "store/placement.h"
#include "store/segment_layout.h"
#include "store/staging.h"
#include "util/align.h"
#include "util/checksum.h"

namespace flatcake {
namespace {

constexpr uint64_t kRunAlign = SegmentLayout::kRunAlign;

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  FC_ASSIGN_OR_RETURN(auto store, FlatStore::OpenWithEngine(options, nullptr));
  return std::unique_ptr<Store>(std::move(store));
}

Result<std::unique_ptr<FlatStore>> FlatStore::OpenWithEngine(const StoreOptions& options,
                                                             std::unique_ptr<IoEngine> engine) {
  FC_RETURN_IF_ERROR(ValidateStoreOptions(options));
  std::unique_ptr<FlatStore> store(new FlatStore(options, std::move(engine)));
  FC_RETURN_IF_ERROR(store->Init());
  return store;
}

FlatStore::FlatStore(const StoreOptions& options, std::unique_ptr<IoEngine> engine)
    : options_(options), engine_(std::move(engine)) {}

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

Status FlatStore::Init() {
  // SSD first: a bad directory should fail before the DRAM arena is mapped and pre-faulted.
  if (!options_.ssd_dirs.empty()) {
    SsdFilePool::Options po;
    po.dirs = options_.ssd_dirs;
    po.total_bytes = options_.ssd_bytes;
    po.file_bytes = options_.ssd_file_bytes;
    po.direct_io = options_.direct_io;
    po.durable = true;
    po.wipe = options_.wipe || !options_.recover;
    FC_ASSIGN_OR_RETURN(ssd_, SsdFilePool::Create(po));
    info_.ssd_direct_io = ssd_->direct();
    info_.ssd_note = ssd_->note();
    info_.ssd_files = ssd_->num_files();
    info_.ssd_dirs = options_.ssd_dirs;
  }
  if (options_.dram_bytes > 0) {
    if (options_.dram_path.empty()) {
      FC_ASSIGN_OR_RETURN(dram_, DramArena::Create(options_.dram_bytes, options_.huge_pages));
    } else {
      FC_ASSIGN_OR_RETURN(dram_, DramArena::CreateFile(options_.dram_bytes, options_.dram_path,
                                                       options_.recover && !options_.wipe));
    }
    info_.dram_page_mode = dram_->page_mode();
    info_.dram_backing = dram_->file_backed() ? "file " + options_.dram_path : "anonymous";
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
    ro.coalesce.max_gap = options_.max_gap_bytes;
    ro.coalesce.max_io = options_.max_io_bytes;
    FC_ASSIGN_OR_RETURN(restore_, RestoreReader::Create(*engine_, ro));
    // Segment writes of max_io_bytes (at most half the staging, so that one buffer is gathered
    // while others are written), with the whole staging in flight: a put keeps the disk busy
    // from its first chunk on, and the first chunk, gathered before any write can start, is
    // small.
    const uint64_t chunk = std::max<uint64_t>(
        kRunAlign,
        AlignDown(std::min(options_.max_io_bytes, options_.write_staging_bytes / 2), kRunAlign));
    const auto count = static_cast<uint32_t>(
        std::clamp<uint64_t>(options_.write_staging_bytes / chunk, 1, StagingPool::kMaxBuffers));
    FC_ASSIGN_OR_RETURN(write_staging_, StagingPool::Create(chunk, count));
    // Registered buffers spare the kernel pinning the pages of every write; best effort.
    const IoBufferRegion staging = write_staging_->region();
    (void)engine_->RegisterBuffers({&staging, 1});
    info_.ssd_write_io_bytes = chunk;
    info_.ssd_writes_in_flight = count;
  }

  uint64_t cap = options_.index_capacity;
  if (cap == 0) {
    // One slot per 16 KiB of capacity at most 64M slots, at least 64K: blocks are rarely smaller.
    cap = (Capacity(MediaType::kDram) + Capacity(MediaType::kSsd)) / (16 * kKiB);
    cap = std::clamp<uint64_t>(cap * 2, uint64_t{1} << 16, uint64_t{1} << 26);
  }
  index_ = std::make_unique<BlockIndex>(cap);
  scopes_ = std::make_unique<ScopeSlot[]>(options_.max_scopes);
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
    index_->Compact();
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

  // 1. Reserve every key not already present: reserved keys stay invisible until published.
  std::vector<uint32_t> todo;
  std::vector<BlockIndex::Reservation> resv;
  todo.reserve(keys.size());
  resv.reserve(keys.size());
  auto abort_all = [&] {
    for (auto r : resv) index_->Abort(r);
  };
  for (uint32_t i = 0; i < keys.size(); ++i) {
    BlockIndex::Reservation r;
    switch (index_->Reserve(keys[i], &r)) {
      case BlockIndex::ReserveOutcome::kReserved:
        todo.push_back(i);
        resv.push_back(r);
        break;
      case BlockIndex::ReserveOutcome::kExists: result.already_present++; break;
      case BlockIndex::ReserveOutcome::kFull:
        abort_all();
        return Status::NoSpace("block index is full (" + std::to_string(index_->capacity()) +
                               " slots); raise index_capacity");
    }
  }
  blocks_present_.fetch_add(result.already_present, std::memory_order_relaxed);
  if (todo.empty()) return result;

  // 2. Place and allocate (under the mutex); the scope comes back pinned.
  uint32_t scope_id = 0, gen = 0;
  std::vector<PendingSegment> segs;
  Status st =
      PlaceBatch(hints, keys, layout, static_cast<uint32_t>(todo.size()), &scope_id, &gen, &segs);
  if (!st.ok()) {
    abort_all();
    return st;
  }
  ScopeSlot& scope = scopes_[scope_id];
  const MediaType medium = scope.medium;

  // 3. Write each segment, then publish its entries.
  size_t published = 0;
  std::vector<Key> seg_keys;
  std::vector<uint64_t> checksums;
  for (const PendingSegment& ps : segs) {
    st = WriteSegment(scope, ps, layout, src, todo, &checksums);
    if (!st.ok()) break;
    const SegmentLayout seg_layout(layout, ps.seg.num_blocks);
    seg_keys.clear();
    for (uint32_t b = 0; b < ps.seg.num_blocks; ++b)
      seg_keys.push_back(keys[todo[ps.first_block + b]]);
    if (Durable(medium)) {
      // The commit record, after the data and before publication: what a restart finds.
      st = CommitSegment(scope, ps, seg_keys,
                         std::span<const uint64_t>(checksums).first(ps.seg.num_blocks));
      if (!st.ok()) break;
    } else {
      MutexLock lock(mu_);
      scope.keys.insert(scope.keys.end(), seg_keys.begin(), seg_keys.end());
      scope.blocks += ps.seg.num_blocks;
    }
    for (uint32_t b = 0; b < ps.seg.num_blocks; ++b) {
      const uint32_t k = ps.first_block + b;
      index_->Publish(resv[k], BlockEntry(medium, ps.seg.base, seg_layout, b, checksums[b],
                                          scope_id, gen, ps.segment_no));
    }
    published += ps.seg.num_blocks;
    media_[static_cast<int>(medium)].admitted.fetch_add(ps.seg.bytes, std::memory_order_relaxed);
    result.segments++;
  }
  for (size_t k = published; k < resv.size(); ++k) index_->Abort(resv[k]);
  scope.Touch(NowNs());
  scope.Unpin();
  result.written = static_cast<uint32_t>(published);
  result.medium = medium;
  blocks_written_.fetch_add(published, std::memory_order_relaxed);
  if (!st.ok()) {
    io_errors_.fetch_add(1, std::memory_order_relaxed);
    return st.WithContext("put: " + std::to_string(published) + " of " +
                          std::to_string(todo.size()) + " blocks written before the error");
  }
  return result;
}

Result<MediaType> FlatStore::ChooseMedium(const WriteHints& hints, const Session& s,
                                          const KvLayout& layout, uint32_t n,
                                          PlacementInput* in_out) const {
  PlacementInput& in = *in_out;
  in.shared_prefix = hints.shared_prefix;
  in.turn = hints.turn ? hints.turn : s.turns + 1;
  in.prior_reply_tokens = hints.prior_reply_tokens;
  const uint64_t before = hints.context_tokens ? *hints.context_tokens : s.context_tokens;
  in.context_tokens = before + uint64_t{n} * options_.tokens_per_block;
  MediaType medium =
      hints.force_medium ? *hints.force_medium : ChoosePlacement(in, options_).medium;
  if (!MediumEnabled(medium))
    medium = medium == MediaType::kDram ? MediaType::kSsd : MediaType::kDram;
  if (!MediumEnabled(medium)) return Status::InvalidArgument("requested medium is disabled");
  if (MediumEnabled(MediaType::kSsd) &&
      SegmentLayout::BlocksFitting(layout, ssd_->file_bytes()) == 0) {
    // Checked whatever the medium: a DRAM batch may spill to SSD.
    return Status::InvalidArgument("a block of " + layout.ToString() +
                                   " (with each layer run padded to 4 KiB) exceeds the SSD pool "
                                   "file size; raise ssd_file_bytes");
  }
  return medium;
}

Status FlatStore::PlaceBatch(const WriteHints& hints, std::span<const Key> keys,
                             const KvLayout& layout, uint32_t n, uint32_t* scope_id, uint32_t* gen,
                             std::vector<PendingSegment>* segs) {
  MutexLock lock(mu_);
  // Session: explicit, else inferred from the chain, else a new anonymous one.
  std::string name = hints.session;
  if (name.empty() && hints.prefix_tail) {
    auto it = tails_.find(*hints.prefix_tail);
    if (it != tails_.end()) name = it->second;
  }
  if (name.empty()) name = "anon-" + std::to_string(++anon_sessions_);
  auto session_it = sessions_.try_emplace(name).first;
  Session& s = session_it->second;
  // Reclamation below must not forget the session being placed (we hold a reference to it).
  // Afterwards, a session left without any live scope (a new one whose placement failed, or one
  // whose last scope was reclaimed to make room) is forgotten, as reclamation would have done.
  placing_session_ = &session_it->first;
  struct FinishPlacing {
    FlatStore* store;
    std::unordered_map<std::string, Session>::iterator it;
    // Runs as PlaceBatch returns, before its lock on mu_ is released; the analysis cannot tie
    // `store->mu_` to that lock from inside this local class.
    ~FinishPlacing() NO_THREAD_SAFETY_ANALYSIS {
      store->placing_session_ = nullptr;
      if (!store->SessionAliveLocked(it->second)) store->ForgetSessionLocked(it);
    }
  } finish_placing{this, session_it};

  PlacementInput in;
  FC_ASSIGN_OR_RETURN(MediaType medium, ChooseMedium(hints, s, layout, n, &in));

  // Try the chosen medium; DRAM that stays full after reclamation spills to SSD.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int mi = static_cast<int>(medium);
    uint32_t id = s.scope[mi];
    bool reuse = id != UINT32_MAX && scopes_[id].generation() == s.scope_gen[mi] &&
                 scopes_[id].live() && scopes_[id].layout == layout;
    if (!reuse) {
      auto r = NewScopeLocked(medium, layout, name);
      if (!r.ok()) {
        // Out of scope slots: free the oldest unpinned scopes of this medium and retry once.
        ReclaimLocked(medium, static_cast<uint64_t>(options_.low_watermark * Capacity(medium)),
                      UINT32_MAX);
        r = NewScopeLocked(medium, layout, name);
        if (!r.ok()) return r.status();
      }
      id = *r;
      s.scope[mi] = id;
      s.scope_gen[mi] = scopes_[id].generation();
    }
    ScopeSlot& scope = scopes_[id];
    const uint64_t cap = Capacity(medium);
    if (Used(medium) >= options_.high_watermark * cap) {
      ReclaimLocked(medium, static_cast<uint64_t>(options_.low_watermark * cap), id);
    }
    size_t before_segs = segs->size();
    Status st = AllocateSegmentsLocked(scope, n, segs);
    if (st.IsNoSpace()) {
      ReclaimLocked(medium, static_cast<uint64_t>(options_.low_watermark * cap), id);
      st = AllocateSegmentsLocked(scope, n, segs);
    }
    if (st.ok()) {
      if (!scope.TryPin(s.scope_gen[mi])) return Status::Aborted("scope vanished during placement");
      *scope_id = id;
      *gen = s.scope_gen[mi];
      s.turns = in.turn;
      s.context_tokens = in.context_tokens;
      if (s.has_tail) tails_.erase(s.tail);
      s.tail = keys.back();
      s.has_tail = true;
      tails_[s.tail] = name;
      scope.Touch(NowNs());
      return Status::OK();
    }
    segs->resize(before_segs);
    if (scope.blocks == 0 && scope.segments.empty() && scope.TryRetire(s.scope_gen[mi])) {
      ReleaseScopeLocked(id, s.scope_gen[mi]);
      s.scope[mi] = UINT32_MAX;
    }
    if (!st.IsNoSpace() || medium == MediaType::kSsd || !MediumEnabled(MediaType::kSsd)) {
      return st;
    }
    medium = MediaType::kSsd;  // Table 2: any write that finds DRAM full goes to SSD.
  }
  return Status::NoSpace("no medium has room for the batch");
}

Result<uint32_t> FlatStore::NewScopeLocked(MediaType medium, const KvLayout& layout,
                                           const std::string& session) {
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
  s.Touch(NowNs());
  s.Activate();
  return id;
}

void FlatStore::FreeExtentLocked(MediaType medium, const Segment& seg) {
  if (medium == MediaType::kDram) {
    dram_->Free(seg.base, seg.bytes);
  } else {
    ssd_->Free(seg.base, seg.bytes);
  }
}

Status FlatStore::AllocateSegmentsLocked(ScopeSlot& scope, uint32_t n,
                                         std::vector<PendingSegment>* segs) {
  const KvLayout& layout = scope.layout;
  const bool dram = scope.medium == MediaType::kDram;
  uint32_t done = 0;
  // Segments allocated by this call, rolled back if a later one fails. Runs under mu_, as this
  // function does.
  const size_t first_new = segs->size();
  auto rollback = [&]() REQUIRES(mu_) {
    for (size_t i = segs->size(); i-- > first_new;) {
      const Segment& seg = (*segs)[i].seg;
      scope.segments.pop_back();
      scope.used_bytes -= seg.bytes;
      FreeExtentLocked(scope.medium, seg);
    }
    segs->resize(first_new);
  };
  while (done < n) {
    // A segment is one extent: at most one SSD pool file, halved until the medium has a free
    // range that large. It goes where the scope's last segment ended when that space is free.
    uint64_t want = n - done;
    if (!dram) want = std::min(want, SegmentLayout::BlocksFitting(layout, ssd_->file_bytes()));
    const uint64_t hint = scope.segments.empty()
                              ? ExtentAllocator::kNoHint
                              : scope.segments.back().base + scope.segments.back().bytes;
    Segment seg;
    Result<uint64_t> off = Status::NoSpace("");
    while (want > 0) {
      const SegmentLayout seg_layout(layout, want);
      seg.run_stride = seg_layout.PlaneStride();
      seg.bytes = seg_layout.Bytes();
      off = dram ? dram_->Allocate(seg.bytes, hint) : ssd_->Allocate(seg.bytes, hint);
      if (off.ok()) break;
      want /= 2;
    }
    if (!off.ok()) {
      rollback();
      return off.status();
    }
    seg.base = *off;
    seg.num_blocks = static_cast<uint32_t>(want);
    scope.used_bytes += seg.bytes;
    scope.segments.push_back(seg);
    segs->push_back(PendingSegment{seg, done, static_cast<uint32_t>(scope.segments.size() - 1)});
    done += seg.num_blocks;
  }
  return Status::OK();
}

Status FlatStore::WriteSegment(const ScopeSlot& scope, const PendingSegment& ps,
                               const KvLayout& layout, const BlockBuffers& src,
                               std::span<const uint32_t> batch_index,
                               std::vector<uint64_t>* checksums) {
  const Segment& seg = ps.seg;
  SegmentGather gather(layout, seg, src, batch_index.subspan(ps.first_block, seg.num_blocks));
  MediumCounters& mc = media_[static_cast<int>(scope.medium)];
  if (scope.medium == MediaType::kDram) {
    // Streaming stores: the arena's bytes are read only by later restores, and bypassing the
    // cache spares reading every destination line first.
    gather.Fill(0, seg.bytes, dram_->base() + seg.base, CopyStores::kStreaming);
    mc.written.fetch_add(seg.bytes, std::memory_order_relaxed);
    checksums->assign(gather.checksums().begin(), gather.checksums().end());
    return Status::OK();
  }
  const uint32_t file = ssd_->FileOf(seg.base);
  const uint64_t file_off = ssd_->FileOffset(seg.base);
  // The segment in chunks of one staging buffer each, gathered into the borrowed buffers in turn;
  // each chunk's write goes out at once, so up to loan.size() writes are in flight while the next
  // chunk is gathered.
  const uint64_t chunk = write_staging_->buffer_bytes();
  const uint64_t chunks = (seg.bytes + chunk - 1) / chunk;
  const StagingPool::Loan loan = write_staging_->Borrow(
      static_cast<uint32_t>(std::min<uint64_t>(chunks, StagingPool::kMaxBuffers)));
  IoWaiter waiter;
  // in_flight[i]: tag of the write that still reads loan[i], if any. Workers may complete writes
  // out of order, so wait for that very write, not for "all but one".
  std::optional<uint64_t> in_flight[StagingPool::kMaxBuffers];
  Status st;
  uint64_t n = 0;
  for (uint64_t pos = 0; pos < seg.bytes; pos += chunk, ++n) {
    const uint64_t len = std::min(chunk, seg.bytes - pos);
    const auto i = static_cast<uint32_t>(n % loan.size());
    std::optional<uint64_t>& busy = in_flight[i];
    if (busy) {
      st = waiter.WaitFor(*busy);
      if (!st.ok()) break;
    }
    uint8_t* data = loan[i];
    // Streaming: the device reads the staging buffer from memory, not from this core's cache.
    gather.Fill(pos, len, data, CopyStores::kStreaming);
    IoOp op;
    op.opcode = IoOpcode::kWrite;
    op.file = file;
    op.offset = file_off + pos;
    op.buf = data;
    op.len = len;
    busy = waiter.Submit(*engine_, op);
  }
  Status all = waiter.WaitAll();
  if (st.ok()) st = all;
  if (!st.ok()) return st.WithContext("SSD segment write");
  mc.written.fetch_add(seg.bytes, std::memory_order_relaxed);
  checksums->assign(gather.checksums().begin(), gather.checksums().end());
  return Status::OK();
}

bool FlatStore::SessionAliveLocked(const Session& sess) const {
  for (int m = 0; m < 2; ++m) {
    const uint32_t sid = sess.scope[m];
    if (sid != UINT32_MAX && scopes_[sid].live() &&
        scopes_[sid].generation() == sess.scope_gen[m]) {
      return true;
    }
  }
  return false;
}

void FlatStore::ForgetSessionLocked(std::unordered_map<std::string, Session>::iterator it) {
  if (it->second.has_tail) {
    auto t = tails_.find(it->second.tail);
    if (t != tails_.end() && t->second == it->first) tails_.erase(t);
  }
  sessions_.erase(it);
}

void FlatStore::ReleaseScopeLocked(uint32_t id, uint32_t retired_gen) {
  ScopeSlot& s = scopes_[id];
  // The free record goes first: once the extents are reused, the old scope must not come back.
  if (Durable(s.medium)) JournalFreeLocked(s);
  for (const Segment& seg : s.segments) FreeExtentLocked(s.medium, seg);
  for (const Key& k : s.keys) index_->Erase(k, id, retired_gen);
  // Forget the session once none of its scopes is left, so session metadata does not outlive
  // the data (anonymous one-batch sessions would otherwise accumulate forever).
  auto it = sessions_.find(s.session);
  if (it != sessions_.end() && placing_session_ != &it->first) {
    Session& sess = it->second;
    const int mi = static_cast<int>(s.medium);
    if (sess.scope[mi] == id && sess.scope_gen[mi] == retired_gen) sess.scope[mi] = UINT32_MAX;
    if (!SessionAliveLocked(sess)) ForgetSessionLocked(it);
  }
  s.session.clear();
  s.segments.clear();
  s.keys.clear();
  s.checksums.clear();
  s.used_bytes = 0;
  s.blocks = 0;
  free_scopes_.push_back(id);
}

uint64_t FlatStore::ReclaimLocked(MediaType medium, uint64_t target_used, uint32_t keep_scope) {
  if (!MediumEnabled(medium) || Used(medium) <= target_used) return 0;
  std::vector<std::pair<uint64_t, uint32_t>> candidates;  // (last use, slot)
  for (uint32_t i = 0; i < options_.max_scopes; ++i) {
    const ScopeSlot& s = scopes_[i];
    if (i != keep_scope && s.live() && s.medium == medium && s.readers() == 0) {
      candidates.emplace_back(s.last_use_ns.load(std::memory_order_relaxed), i);
    }
  }
  std::sort(candidates.begin(), candidates.end());
  uint64_t freed = 0;
  MediumCounters& mc = media_[static_cast<int>(medium)];
  for (const auto& [ts, id] : candidates) {
    if (Used(medium) <= target_used) break;
    ScopeSlot& s = scopes_[id];
    const uint32_t gen = s.generation();
    if (!s.TryRetire(gen)) continue;  // a reader pinned it meanwhile
    const uint64_t bytes = s.used_bytes;
    ReleaseScopeLocked(id, gen);
    freed += bytes;
    mc.reclaimed.fetch_add(bytes, std::memory_order_relaxed);
    mc.scopes_reclaimed.fetch_add(1, std::memory_order_relaxed);
  }
  if (freed > 0 && Durable(medium)) {
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
  return freed;
}

uint64_t FlatStore::Reclaim(MediaType medium, double target_fraction) {
  ReaderLock index_lock(index_mu_);
  MutexLock lock(mu_);
  return ReclaimLocked(medium, static_cast<uint64_t>(target_fraction * Capacity(medium)),
                       UINT32_MAX);
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
  for (MediaType m : {MediaType::kDram, MediaType::kSsd}) ReclaimLocked(m, 0, UINT32_MAX);
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
  sessions_.clear();
  tails_.clear();
  for (MediaType m : {MediaType::kDram, MediaType::kSsd}) MaybeCompactJournalLocked(m);
}

StoreStats FlatStore::GetStats() const {
  StoreStats st;
  MutexLock lock(mu_);
  st.sessions = sessions_.size();
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

}  // namespace flatcake
