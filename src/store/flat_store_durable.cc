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
#include <map>
#include <string>

#include "store/flat_store.h"
#include "store/segment_layout.h"

namespace flatcake {
namespace {

using durable::RecordType;

// A journal at most this many times the live records (and this large) is rewritten.
constexpr uint64_t kRewriteFactor = 4;
constexpr uint64_t kRewriteMinBytes = 1 * kMiB;

// "anon-<n>" -> n, else 0.
uint64_t AnonNumber(const std::string& name) {
  constexpr std::string_view kPrefix = "anon-";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return 0;
  uint64_t n = 0;
  for (size_t i = kPrefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    n = n * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return n;
}

}  // namespace

Status FlatStore::OpenJournal(MediaType m) {
  const bool ssd = m == MediaType::kSsd;
  const std::string path = ssd ? options_.ssd_dirs.front() + "/" + durable::kJournalName
                               : options_.dram_path + ".journal";
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

Status FlatStore::Recover(MediaType m, const durable::ScanResult& scan) {
  const bool ssd = m == MediaType::kSsd;
  const int mi = static_cast<int>(m);
  Journal& journal = *journal_[mi];
  // 1. Replay: the live segments, by scope, in journal order.
  std::map<uint64_t, std::vector<durable::SegmentRecord>> live;
  std::map<uint64_t, uint64_t> record_bytes;
  uint64_t skipped = scan.skipped, max_seq = 0, max_uid = 0;
  for (const durable::RecordView& r : scan.records) {
    max_seq = std::max(max_seq, r.seq);
    switch (r.type) {
      case RecordType::kHeader: {
        auto h = durable::DecodeHeader(r.payload);
        const bool mine = h.ok() && (ssd ? h->store_id == ssd_->store_id()
                                         : h->num_files == 0 && h->file_bytes == dram_->capacity());
        if (!mine) {
          return Status::InvalidArgument(
              "journal '" + journal.path() + "' belongs to another " +
              (ssd ? std::string("pool than the files beside it")
                   : "arena than '" + options_.dram_path + "'") +
              "; to discard it and start empty, open with wipe=true (--wipe)");
        }
        break;
      }
      case RecordType::kSegment: {
        auto seg = durable::DecodeSegment(r.payload);
        if (!seg.ok()) {
          skipped++;
          break;
        }
        // A torn or missing header only loses the check that the journal is this pool's; the
        // superblocks matched, and every block is still checked against its checksum.
        seg->seq = r.seq;
        max_uid = std::max(max_uid, seg->scope_uid);
        record_bytes[seg->scope_uid] +=
            durable::kRecordHeaderBytes + (r.payload.size() + 7) / 8 * 8;
        live[seg->scope_uid].push_back(std::move(*seg));
        break;
      }
      case RecordType::kFreeScope: {
        auto uid = durable::DecodeFreeScope(r.payload);
        if (!uid.ok()) {
          skipped++;
          break;
        }
        live.erase(*uid);
        record_bytes.erase(*uid);
        break;
      }
      case RecordType::kClear:
        live.clear();
        record_bytes.clear();
        break;
      default: skipped++;
    }
  }

  // 2. Rebuild, oldest scope first; an extent claimed twice goes to the segment committed last (a
  // lost free record let an older claim survive), so claim in descending journal order.
  std::vector<std::pair<uint64_t, const durable::SegmentRecord*>> by_age;  // newest first
  for (auto& [uid, segs] : live) {
    std::sort(segs.begin(), segs.end(),
              [](const auto& a, const auto& b) { return a.segment_no < b.segment_no; });
    for (const auto& seg : segs) by_age.emplace_back(uid, &seg);
  }
  std::sort(by_age.begin(), by_age.end(),
            [](const auto& a, const auto& b) { return a.second->seq > b.second->seq; });
  std::map<const durable::SegmentRecord*, bool> claimed;
  const uint64_t fb = ssd ? ssd_->file_bytes() : dram_->capacity();
  for (const auto& [uid, seg] : by_age) {
    const SegmentLayout sl(seg->layout, seg->num_blocks);
    const bool sane = sl.Bytes() == seg->bytes && sl.PlaneStride() == seg->run_stride &&
                      seg->keys.size() == seg->num_blocks &&
                      seg->base / fb == (seg->base + seg->bytes - 1) / fb;
    const Status got = !sane ? Status::Corruption("segment record")
                       : ssd ? ssd_->AllocateAt(seg->base, seg->bytes)
                             : dram_->AllocateAt(seg->base, seg->bytes);
    if (got.ok()) {
      claimed[seg] = true;
    } else {
      skipped++;
    }
  }

  ReaderLock index_lock(index_mu_);
  MutexLock lock(mu_);
  const uint64_t now = NowNs();
  uint64_t anon = 0;
  for (auto& [uid, segs] : live) {
    const durable::SegmentRecord* first = nullptr;
    for (const auto& seg : segs) {
      if (claimed.count(&seg)) {
        first = &seg;
        break;
      }
    }
    if (first == nullptr) continue;
    auto slot = NewScopeLocked(m, first->layout, first->session);
    if (!slot.ok()) {
      // More scopes than max_scopes allows: the rest is dropped (its extents freed again).
      for (const auto& seg : segs) {
        if (claimed.count(&seg)) FreeExtentLocked(m, Segment{seg.base, 0, 0, seg.bytes});
        skipped++;
      }
      continue;
    }
    const uint32_t id = *slot;
    ScopeSlot& scope = scopes_[id];
    const uint32_t gen = scope.generation();
    scope.uid = uid;
    scope.journal_bytes = record_bytes[uid];
    live_journal_bytes_[mi] += scope.journal_bytes;
    const durable::SegmentRecord* last = first;
    for (const auto& seg : segs) {
      if (!claimed.count(&seg)) continue;
      if (!(seg.layout ==
            scope.layout)) {  // a scope has one layout; a record that disagrees is bad
        FreeExtentLocked(m, Segment{seg.base, 0, 0, seg.bytes});
        skipped++;
        continue;
      }
      Segment s;
      s.base = seg.base;
      s.num_blocks = seg.num_blocks;
      s.run_stride = seg.run_stride;
      s.bytes = seg.bytes;
      const uint32_t segment_no = static_cast<uint32_t>(scope.segments.size());
      s.first_key = static_cast<uint32_t>(scope.keys.size());
      scope.segments.push_back(s);
      scope.used_bytes += s.bytes;
      const SegmentLayout sl(seg.layout, seg.num_blocks);
      for (uint32_t b = 0; b < seg.num_blocks; ++b) {
        // Kept whatever happens below, so the segment's keys stay its own range (the index only
        // erases a key's entry when it is this scope's).
        scope.keys.push_back(seg.keys[b]);
        scope.checksums.push_back(seg.checksums[b]);
        BlockIndex::Reservation r;
        if (index_->Reserve(seg.keys[b], &r) != BlockIndex::ReserveOutcome::kReserved) {
          continue;  // the key is in another scope too (or the index is full): one copy serves
        }
        IndexEntry e;
        e.gva = MakeGva(m, seg.base + sl.BlockOffset(b));
        e.layer_stride = sl.LayerStride();
        e.checksum = seg.checksums[b];
        e.scope_id = id;
        e.scope_gen = gen;
        e.segment = segment_no;
        e.block = b;
        index_->Publish(r, e);
        scope.blocks++;
        info_.recovered_blocks++;
        info_.recovered_bytes += seg.layout.block_bytes();
      }
      info_.recovered_segments++;
      last = &seg;
    }
    // Older scopes look older to reclamation, in journal order.
    scope.Touch(now - std::min(now, max_uid - uid));
    info_.recovered_scopes++;
    Session& sess = sessions_[scope.session];
    sess.scope[mi] = id;
    sess.scope_gen[mi] = gen;
    sess.turns = last->turns;
    sess.context_tokens = last->context_tokens;
    if (!scope.keys.empty()) {
      if (sess.has_tail) tails_.erase(sess.tail);
      sess.tail = scope.keys.back();
      sess.has_tail = true;
      tails_[sess.tail] = scope.session;
    }
    anon = std::max(anon, AnonNumber(scope.session));
  }
  anon_sessions_ = std::max(anon_sessions_, anon);
  next_scope_uid_ = std::max(next_scope_uid_, max_uid + 1);
  journal.SetNextSeq(max_seq + 1);
  info_.skipped_records += skipped;
  return Status::OK();
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
    auto it = sessions_.find(scope.session);
    if (it != sessions_.end()) {
      rec.turns = it->second.turns;
      rec.context_tokens = it->second.context_tokens;
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
  if (!st.ok()) journal_errors_.fetch_add(1, std::memory_order_relaxed);
}

void FlatStore::MaybeCompactJournalLocked(MediaType m) {
  const int mi = static_cast<int>(m);
  if (clearing_ || !journal_[mi]) return;
  if (journal_[mi]->bytes() <= kRewriteFactor * live_journal_bytes_[mi] + kRewriteMinBytes) return;
  if (!RewriteJournalLocked(m).ok()) journal_errors_.fetch_add(1, std::memory_order_relaxed);
}

Status FlatStore::RewriteJournalLocked(MediaType m) {
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
      if (!s.live() || s.medium != m) continue;
      auto sess = sessions_.find(s.session);
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
        if (sess != sessions_.end()) {
          rec.turns = sess->second.turns;
          rec.context_tokens = sess->second.context_tokens;
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
