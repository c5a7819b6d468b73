// FlatStore's durable media: the journal of commit and free records (media/durable_format.h,
// docs/format.md), recovery at open, journal rewrites and periodic syncs. The SSD pool is always
// durable (its journal sits in the first SSD directory); a file-backed DRAM arena (dram_path)
// keeps a journal of its own beside the file (<dram_path>.journal), with the same records.
//
// Ordering, which is the whole of crash consistency here:
//  - a segment's data is written (and, with sync=every, flushed) before its commit record is
//    appended, and the record is appended before any of its blocks is published, so every block
//    a caller ever saw survives a process kill;
//  - a scope's free record (or Clear's record) is appended before its extents can be reused, so
//    a reclaimed or cleared block never comes back;
//  - whatever a power loss tears, a recovered block's bytes are checked against the checksum in
//    its record on every read: a torn block is a miss, never wrong bytes; extents two records
//    claim go to the newer one.

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <unordered_set>

#include "store/flat_store.h"
#include "store/segment_layout.h"

namespace flatcake {
namespace {

using durable::RecordType;

// A journal at most this many times the live records (and this large) is rewritten.
constexpr uint64_t kRewriteFactor = 4;
constexpr uint64_t kRewriteMinBytes = 1 * kMiB;

}  // namespace

Status FlatStore::OpenJournal(MediaType m) {
  const bool ssd = m == MediaType::kSsd;
  const std::string path = ssd ? SsdJournalPath() : options_.dram_path + ".journal";
  std::unique_ptr<Journal>& journal = journal_[static_cast<int>(m)];
  FC_ASSIGN_OR_RETURN(journal, Journal::Open(path));
  if (ssd) {
    info_.ssd_durable = true;
    info_.journal_path = path;
    info_.sync_mode = std::string(SyncModeName(options_.sync));
  } else {
    info_.dram_journal_path = path;
  }
  if (!(ssd ? ssd_->recovered() : dram_->recovered())) {
    // A new (or wiped) medium: whatever journal was there describes nothing that exists now.
    MutexLock lock(mu_);
    journal->ReleaseImage();
    return RewriteJournalLocked(m);
  }
  const auto start = std::chrono::steady_clock::now();
  const durable::ScanResult scan = durable::ScanRecords(journal->image());
  info_.recovery_read_bytes +=
      journal->image().size() + (ssd ? ssd_->num_files() * durable::kSuperblockBytes : 0);
  const uint64_t skipped_before = info_.skipped_records;
  Status st = Recover(m, scan);
  journal->ReleaseImage();
  FC_RETURN_IF_ERROR(st);
  info_.recovered = true;
  info_.recovery_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MutexLock lock(mu_);
  // Start from a compact journal when the old one is mostly dead records or ends in a torn one.
  const uint64_t live = live_journal_bytes_[static_cast<int>(m)];
  // Anything recovery skipped (torn, damaged, overlapped) is left out of the new journal, so it
  // is not skipped again at every open (nor revived once what overlapped it is gone).
  if (info_.skipped_records > skipped_before ||
      journal->bytes() > kRewriteFactor * live + kRewriteMinBytes) {
    return RewriteJournalLocked(m);
  }
  return Status::OK();
}

namespace {

// What a journal's records leave live: the segments of each scope (journal order), each scope's
// record bytes, and what replay skipped. Pure: recovery claims and rebuilds from it.
struct Replayed {
  std::map<uint64_t, std::vector<durable::SegmentRecord>> live;  // scope uid -> its segments
  std::map<uint64_t, uint64_t> record_bytes;                     // scope uid -> journal bytes
  uint64_t skipped = 0, max_seq = 0, max_uid = 0;
  bool foreign_header = false;  // a header record names another pool (or arena)
};

Replayed Replay(const durable::ScanResult& scan,
                const std::function<bool(const durable::HeaderRecord&)>& mine) {
  Replayed out;
  out.skipped = scan.skipped;
  for (const durable::RecordView& r : scan.records) {
    out.max_seq = std::max(out.max_seq, r.seq);
    switch (r.type) {
      case RecordType::kHeader: {
        auto h = durable::DecodeHeader(r.payload);
        if (!h.ok() || !mine(*h)) {
          out.foreign_header = true;
          return out;
        }
        break;
      }
      case RecordType::kSegment: {
        auto seg = durable::DecodeSegment(r.payload);
        if (!seg.ok()) {
          out.skipped++;
          break;
        }
        // A torn or missing header only loses the check that the journal is this pool's; the
        // superblocks matched, and every block is still checked against its checksum.
        seg->seq = r.seq;
        out.max_uid = std::max(out.max_uid, seg->scope_uid);
        out.record_bytes[seg->scope_uid] += r.framed_bytes();
        out.live[seg->scope_uid].push_back(std::move(*seg));
        break;
      }
      case RecordType::kFreeScope: {
        auto uid = durable::DecodeFreeScope(r.payload);
        if (!uid.ok()) {
          out.skipped++;
          break;
        }
        out.live.erase(*uid);
        out.record_bytes.erase(*uid);
        break;
      }
      case RecordType::kClear:
        out.live.clear();
        out.record_bytes.clear();
        break;
      default: out.skipped++;
    }
  }
  for (auto& [uid, segs] : out.live) {
    std::sort(segs.begin(), segs.end(),
              [](const auto& a, const auto& b) { return a.segment_no < b.segment_no; });
  }
  return out;
}

}  // namespace

Status FlatStore::Recover(MediaType m, const durable::ScanResult& scan) {
  const bool ssd = m == MediaType::kSsd;
  Journal& journal = *journal_[static_cast<int>(m)];
  // 1. Replay: the live segments, by scope.
  Replayed rep = Replay(scan, [&](const durable::HeaderRecord& h) {
    return ssd ? h.store_id == ssd_->store_id()
               : h.num_files == 0 && h.file_bytes == dram_->capacity();
  });
  if (rep.foreign_header) {
    return Status::InvalidArgument("journal '" + journal.path() + "' belongs to another " +
                                   (ssd ? std::string("pool than the files beside it")
                                        : "arena than '" + options_.dram_path + "'") +
                                   "; to discard it and start empty, open with wipe=true (--wipe)");
  }

  // 2. Claim extents. One claimed twice goes to the segment committed last (a lost free record
  // let an older claim survive), so claim in descending journal order.
  std::vector<const durable::SegmentRecord*> newest_first;
  for (const auto& [uid, segs] : rep.live) {
    for (const auto& seg : segs) newest_first.push_back(&seg);
  }
  std::sort(newest_first.begin(), newest_first.end(),
            [](const auto* a, const auto* b) { return a->seq > b->seq; });
  std::unordered_set<const durable::SegmentRecord*> claimed;
  const uint64_t fb = ssd ? ssd_->file_bytes() : dram_->capacity();
  for (const durable::SegmentRecord* seg : newest_first) {
    const SegmentLayout sl(seg->layout, seg->num_blocks);
    const bool sane = sl.Bytes() == seg->bytes && sl.PlaneStride() == seg->run_stride &&
                      seg->keys.size() == seg->num_blocks &&
                      seg->base / fb == (seg->base + seg->bytes - 1) / fb;
    const Status got = !sane ? Status::Corruption("segment record")
                       : ssd ? ssd_->AllocateAt(seg->base, seg->bytes)
                             : dram_->AllocateAt(seg->base, seg->bytes);
    if (got.ok()) {
      claimed.insert(seg);
    } else {
      rep.skipped++;
    }
  }

  // 3. Rebuild each scope with a claimed segment, oldest first.
  ReaderLock index_lock(index_mu_);
  MutexLock lock(mu_);
  const uint64_t now = NowNs();
  for (const auto& [uid, segs] : rep.live) {
    std::vector<const durable::SegmentRecord*> mine;
    for (const auto& seg : segs) {
      if (claimed.count(&seg)) mine.push_back(&seg);
    }
    if (mine.empty()) continue;
    // Older scopes look older to reclamation, in journal order.
    rep.skipped += RebuildScopeLocked(m, uid, rep.record_bytes[uid], mine,
                                      now - std::min(now, rep.max_uid - uid));
  }
  next_scope_uid_ = std::max(next_scope_uid_, rep.max_uid + 1);
  journal.SetNextSeq(rep.max_seq + 1);
  info_.skipped_records += rep.skipped;
  return Status::OK();
}

uint64_t FlatStore::RebuildScopeLocked(MediaType m, uint64_t uid, uint64_t journal_bytes,
                                       std::span<const durable::SegmentRecord* const> segs,
                                       uint64_t last_use_ns) {
  const int mi = static_cast<int>(m);
  auto slot = NewScope(m, segs.front()->layout, segs.front()->session, NowNs());
  if (!slot.ok()) {
    // More scopes than max_scopes allows: this one is dropped (its extents freed again), but a
    // later anonymous session still does not take its name.
    placer_.NoteRecoveredName(segs.front()->session);
    for (const auto* seg : segs) FreeExtent(m, seg->base, seg->bytes);
    return segs.size();
  }
  uint64_t skipped = 0;
  const uint32_t id = *slot;
  ScopeSlot& scope = scopes_[id];
  const uint32_t gen = scope.generation();
  scope.uid = uid;
  scope.journal_bytes = journal_bytes;
  live_journal_bytes_[mi] += journal_bytes;
  const durable::SegmentRecord* last = segs.front();
  for (const durable::SegmentRecord* rec : segs) {
    if (!(rec->layout == scope.layout)) {  // a scope has one layout; a record that disagrees is bad
      FreeExtent(m, rec->base, rec->bytes);
      skipped++;
      continue;
    }
    Segment seg{rec->base, rec->num_blocks, rec->run_stride, rec->bytes};
    const uint32_t segment_no = static_cast<uint32_t>(scope.segments.size());
    seg.first_key = static_cast<uint32_t>(scope.keys.size());
    scope.segments.push_back(seg);
    scope.used_bytes += seg.bytes;
    const SegmentLayout sl(rec->layout, rec->num_blocks);
    for (uint32_t b = 0; b < rec->num_blocks; ++b) {
      // Kept whatever happens below, so the segment's keys stay its own range (the index only
      // erases a key's entry when it is this scope's).
      scope.keys.push_back(rec->keys[b]);
      scope.checksums.push_back(rec->checksums[b]);
      BlockIndex::Reservation r;
      if (index_->Reserve(rec->keys[b], &r) != BlockIndex::ReserveOutcome::kReserved) {
        continue;  // the key is in another scope too (or the index is full): one copy serves
      }
      index_->Publish(r, BlockEntry(m, seg.base, sl, b, rec->checksums[b], id, gen, segment_no));
      scope.blocks++;
      info_.recovered_blocks++;
      info_.recovered_bytes += rec->layout.block_bytes();
    }
    info_.recovered_segments++;
    last = rec;
  }
  scope.Touch(last_use_ns);
  info_.recovered_scopes++;
  placer_.RestoreSession(scope.session, m, id, gen, last->turns, last->context_tokens,
                         scope.keys.empty() ? nullptr : &scope.keys.back());
  return skipped;
}

Status FlatStore::CommitSegment(ScopeSlot& scope, const PendingSegment& ps,
                                std::span<const Key> keys, std::span<const uint64_t> checksums) {
  const bool ssd = scope.medium == MediaType::kSsd;
  Journal& journal = *journal_[static_cast<int>(scope.medium)];
  // A DRAM arena's file is memory: only SSD data and records have a disk to be synced to.
  const bool sync_every = ssd && options_.sync == SyncMode::kEvery;
  if (sync_every) {
    const int fd = ssd_->fds()[ssd_->FileOf(ps.seg.base)];
    if (fdatasync(fd) != 0) return Status::FromErrno(errno, "fdatasync SSD segment");
    syncs_.fetch_add(1, std::memory_order_relaxed);
    NotifySync(false, ssd_->FileOf(ps.seg.base));
  }
  durable::SegmentRecord rec;
  rec.segment_no = ps.segment_no;
  rec.layout = scope.layout;
  rec.base = ps.seg.base;
  rec.num_blocks = ps.seg.num_blocks;
  rec.run_stride = ps.seg.run_stride;
  rec.bytes = ps.seg.bytes;
  rec.keys.assign(keys.begin(), keys.end());
  rec.checksums.assign(checksums.begin(), checksums.end());
  {
    // Under mu_, like a rewrite, so a rewrite never misses a record appended meanwhile.
    MutexLock lock(mu_);
    rec.scope_uid = scope.uid;
    rec.session = scope.session;
    if (const ScopePlacer::Session* sess = placer_.FindSession(scope.session)) {
      rec.turns = sess->turns;
      rec.context_tokens = sess->context_tokens;
    }
    uint64_t bytes = 0;
    Status st = journal.Append([&](uint64_t seq) {
      std::vector<uint8_t> out = durable::EncodeSegment(seq, rec);
      bytes = out.size();
      return out;
    });
    if (!st.ok()) {
      journal_errors_.fetch_add(1, std::memory_order_relaxed);
      return st.WithContext("SSD segment commit record");
    }
    scope.journal_bytes += bytes;
    live_journal_bytes_[static_cast<int>(scope.medium)] += bytes;
    scope.segments[ps.segment_no].first_key = static_cast<uint32_t>(scope.keys.size());
    scope.keys.insert(scope.keys.end(), keys.begin(), keys.end());
    scope.checksums.insert(scope.checksums.end(), checksums.begin(), checksums.end());
    scope.blocks += keys.size();
  }
  if (sync_every) {
    Status st = journal.Sync();
    if (!st.ok()) return st.WithContext("SSD segment commit record");
    NotifySync(true);
  }
  return Status::OK();
}

void FlatStore::JournalFreeLocked(const ScopeSlot& scope) {
  const int mi = static_cast<int>(scope.medium);
  live_journal_bytes_[mi] -= std::min(live_journal_bytes_[mi], scope.journal_bytes);
  if (clearing_) return;  // Clear's record covers it
  Status st = journal_[mi]->Append(
      [uid = scope.uid](uint64_t seq) { return durable::EncodeFreeScope(seq, uid); });
  if (st.ok()) return;
  journal_errors_.fetch_add(1, std::memory_order_relaxed);
  // Without its free record a reopen would bring the scope back over extents reused since: the
  // journal is rewritten now from the live scopes, this one left out, which records the free.
  if (!RewriteJournalLocked(scope.medium, scope.uid).ok()) {
    journal_errors_.fetch_add(1, std::memory_order_relaxed);
  }
}

void FlatStore::MaybeCompactJournalLocked(MediaType m) {
  const int mi = static_cast<int>(m);
  if (clearing_ || !journal_[mi]) return;
  if (journal_[mi]->bytes() <= kRewriteFactor * live_journal_bytes_[mi] + kRewriteMinBytes) return;
  if (!RewriteJournalLocked(m).ok()) journal_errors_.fetch_add(1, std::memory_order_relaxed);
}

Status FlatStore::RewriteJournalLocked(MediaType m, uint64_t leave_out) {
  // The header, then one record per segment of every live scope of the medium, from memory.
  const int mi = static_cast<int>(m);
  uint64_t live = 0;
  Status st = journal_[mi]->Rewrite([&](uint64_t* seq) REQUIRES(mu_) {
    std::vector<uint8_t> out;
    auto add = [&](std::vector<uint8_t> rec) { out.insert(out.end(), rec.begin(), rec.end()); };
    durable::HeaderRecord h;  // a DRAM arena: no files, its capacity
    h.store_id = m == MediaType::kSsd ? ssd_->store_id() : 0;
    h.num_files = m == MediaType::kSsd ? ssd_->num_files() : 0;
    h.file_bytes = m == MediaType::kSsd ? ssd_->file_bytes() : dram_->capacity();
    add(durable::EncodeHeader((*seq)++, h));
    live = out.size();
    for (uint32_t i = 0; i < options_.max_scopes; ++i) {
      ScopeSlot& s = scopes_[i];
      if (!s.live() || s.medium != m || (leave_out != 0 && s.uid == leave_out)) continue;
      const ScopePlacer::Session* sess = placer_.FindSession(s.session);
      const size_t before = out.size();
      for (uint32_t n = 0; n < s.segments.size(); ++n) {
        const Segment& seg = s.segments[n];
        // Being written, failed, or covered by a Clear record (a scope Clear could not free).
        if (seg.first_key == Segment::kUncommitted || seg.cleared) continue;
        const size_t k = seg.first_key;
        durable::SegmentRecord rec;
        rec.scope_uid = s.uid;
        rec.segment_no = n;
        rec.session = s.session;
        if (sess) {
          rec.turns = sess->turns;
          rec.context_tokens = sess->context_tokens;
        }
        rec.layout = s.layout;
        rec.base = seg.base;
        rec.num_blocks = seg.num_blocks;
        rec.run_stride = seg.run_stride;
        rec.bytes = seg.bytes;
        rec.keys.assign(s.keys.begin() + k, s.keys.begin() + k + seg.num_blocks);
        rec.checksums.assign(s.checksums.begin() + k, s.checksums.begin() + k + seg.num_blocks);
        add(durable::EncodeSegment((*seq)++, rec));
      }
      s.journal_bytes = out.size() - before;
      live += s.journal_bytes;
    }
    return out;
  });
  if (!st.ok()) return st;
  live_journal_bytes_[mi] = live;
  journal_rewrites_.fetch_add(1, std::memory_order_relaxed);
  if (m == MediaType::kSsd) NotifySync(true);
  return Status::OK();
}

void FlatStore::SyncLoop() {
  MutexLock lock(sync_mu_);
  while (!stop_syncer_) {
    sync_cv_.WaitFor(sync_mu_, std::chrono::milliseconds(options_.sync_interval_ms));
    if (stop_syncer_) break;
    // Data first, then the records that name it.
    Status st = ssd_->SyncData();
    if (st.ok()) {
      NotifySync(false);
      st = journal_[static_cast<int>(MediaType::kSsd)]->Sync();
    }
    if (st.ok()) {
      NotifySync(true);
      syncs_.fetch_add(1, std::memory_order_relaxed);
    } else {
      journal_errors_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void FlatStore::TEST_SetSyncListener(std::function<void(const SyncEvent&)> listener) {
  MutexLock lock(sync_listener_mu_);
  sync_listener_ = std::move(listener);
}

void FlatStore::NotifySync(bool journal, uint32_t file) {
  MutexLock lock(sync_listener_mu_);
  if (!sync_listener_) return;
  // Read under the listener's lock, so that the listener never sees the journal's durable length
  // go back (a later sync's notice overtaking an earlier one's).
  sync_listener_(SyncEvent{
      journal, file, journal ? journal_[static_cast<int>(MediaType::kSsd)]->synced_bytes() : 0});
}

}  // namespace flatcake
