// FlatStore's read side: Lookup, and the data path of a restore (resolving its hits, copying DRAM
// blocks, reading SSD blocks, verifying). The scheduling around it is in flat_store_restore.cc.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <span>

#include "store/flat_store.h"
#include "store/segment_layout.h"

namespace flatcake {

LookupResult FlatStore::Lookup(std::span<const Key> keys) {
  ReaderLock index_lock(index_mu_);
  exists_.fetch_add(1, std::memory_order_relaxed);
  LookupResult out;
  // Batched index lookups overlap the keys' cache misses; chunks bound the work wasted past the
  // first miss (the index prefetches at most a pipeline's depth beyond it).
  constexpr size_t kChunk = 64;
  IndexEntry entries[kChunk];
  Gva slowest = 0;
  size_t n = 0;
  bool more = true;
  while (more && n < keys.size()) {
    const size_t m = std::min(kChunk, keys.size() - n);
    const size_t found = index_->LookupPrefix(keys.subspan(n, m), entries);
    size_t i = 0;
    for (; i < found; ++i) {
      const IndexEntry& e = entries[i];
      if (e.scope_id >= options_.max_scopes) break;  // never a valid entry
      const ScopeSlot& s = scopes_[e.scope_id];
      if (s.generation() != e.scope_gen || !s.live()) break;  // reclaimed
      // Not pinned: a scope reclaimed since the check above only makes this count stale.
      (GvaIsSsd(e.gva) ? out.ssd_bytes : out.dram_bytes) +=
          s.block_bytes.load(std::memory_order_relaxed);
      slowest = std::max(slowest, e.gva);
    }
    n += i;
    more = i == m;
  }
  out.leading_hits = static_cast<uint32_t>(n);
  out.slowest_medium = GvaIsSsd(slowest) ? MediaType::kSsd : MediaType::kDram;
  return out;
}

Status FlatStore::PinHits(std::span<const Key> keys, const KvLayout& layout,
                          std::vector<PinnedHit>* hits, Gva* slowest) {
  hits->reserve(keys.size());
  *slowest = 0;
  // One batched index lookup for all keys: it overlaps their cache misses.
  std::vector<IndexEntry> entries(keys.size());
  std::unique_ptr<bool[]> in_index(new bool[keys.size()]);
  {
    ReaderLock index_lock(index_mu_);
    index_->LookupBatch(keys, entries.data(), in_index.get());
    for (uint32_t i = 0; i < keys.size(); ++i) {
      if (!in_index[i]) continue;
      const IndexEntry& e = entries[i];
      if (e.scope_id >= options_.max_scopes) continue;
      ScopeSlot& s = scopes_[e.scope_id];
      if (!s.TryPin(e.scope_gen)) continue;  // reclaimed: a miss
      if (!(s.layout == layout)) {
        s.Unpin();
        UnpinHits(*hits);
        hits->clear();
        return Status::InvalidArgument("key " + KeyToHex(keys[i]) + " was stored as " +
                                       s.layout.ToString() + " but the read asks for " +
                                       layout.ToString());
      }
      // A forged or stale address is never dereferenced: it is a miss.
      auto decoded = gva_space_.Decode(e.gva, layout.slice_bytes);
      if (!decoded.ok()) {
        s.Unpin();
        continue;
      }
      hits->push_back(PinnedHit{i, decoded->media, decoded->offset, e.layer_stride, e.checksum,
                                e.scope_id, e.scope_gen});
      *slowest = std::max(*slowest, e.gva);
    }
  }  // pinned scopes stay valid without the index
  return Status::OK();
}

void FlatStore::UnpinHits(std::span<const PinnedHit> hits) {
  const uint64_t now = NowNs();
  for (const PinnedHit& h : hits) {
    ScopeSlot& s = scopes_[h.scope_id];
    s.Touch(now);
    s.Unpin();
  }
}

// SSD slices go through the restore pipeline (io/layered_restore.h): coalesced, layer-ordered
// reads in a bounded staging window, the first layer first, with per-layer completion forwarded
// to the caller. Returns at once; `done` runs when every read is back (on an I/O worker), or
// before this returns when nothing could be started.
void FlatStore::StartSsdReads(const std::shared_ptr<RestoreJob>& job,
                              std::function<void(Status)> done) {
  RestoreJob* const raw = job.get();
  auto reads = raw->read->StartSsdReads(
      *restore_, ssd_->geometry(), [raw](uint32_t l) { raw->ReportLayer(l); },
      [job, done = std::move(done)](const Status& st, const ReaderStats&) {
        job->ssd_done_ns = SteadyNowNs();
        done(st);
      });
  MutexLock lock(job->mu);
  if (job->done) return;  // (the reads ended before this line; nothing to hold)
  if (job->cancelled) reads->Cancel(Status::Aborted("restore cancelled"));
  job->reads = std::move(reads);
}

// Verifies every block, re-validates the pins (they cannot have been lost, but a broken invariant
// must surface as a miss, never as data), unpins, and fills the result.
void FlatStore::FinishJob(RestoreJob& job, Status st) {
  const PinnedRead& read = *job.read;
  const std::vector<PinnedHit>& hits = read.hits();
  std::vector<uint8_t> pin_valid(hits.size());
  for (size_t i = 0; i < hits.size(); ++i) {
    pin_valid[i] = scopes_[hits[i].scope_id].generation() == hits[i].scope_gen;
  }
  GetResult result = read.Outcome(job.num_keys, st, pin_valid);
  UnpinHits(hits);
  if (job.admitted_ns >= 0) {
    result.queued_ns = std::max<int64_t>(0, job.admitted_ns - job.arrival_ns);
    result.ssd_read_ns = std::max<int64_t>(0, job.ssd_done_ns - job.admitted_ns);
  }
  if (st.ok()) {
    CountRead(job.num_keys, result);
  } else {
    (st.code() == StatusCode::kAborted ? restores_cancelled_ : io_errors_)
        .fetch_add(1, std::memory_order_relaxed);
    media_[1].read.fetch_add(result.ssd_bytes_read, std::memory_order_relaxed);
  }

  std::shared_ptr<LayeredRestore> reads;  // released outside the lock
  {
    MutexLock lock(job.mu);
    job.status = st.ok() ? st : st.WithContext("restore");
    job.result = std::move(result);
    job.done = true;
    reads = std::move(job.reads);
  }
  job.cv.NotifyAll();
}

void FlatStore::CountRead(size_t num_keys, const GetResult& result) {
  hits_.fetch_add(result.hits, std::memory_order_relaxed);
  misses_.fetch_add(num_keys - std::min<size_t>(result.hits, num_keys), std::memory_order_relaxed);
  mismatches_.fetch_add(result.corrupt, std::memory_order_relaxed);
  media_[0].delivered.fetch_add(result.bytes_from_dram, std::memory_order_relaxed);
  media_[0].read.fetch_add(result.bytes_from_dram, std::memory_order_relaxed);
  media_[1].delivered.fetch_add(result.bytes_from_ssd, std::memory_order_relaxed);
  media_[1].read.fetch_add(result.ssd_bytes_read, std::memory_order_relaxed);
}

}  // namespace flatcake
