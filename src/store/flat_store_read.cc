// FlatStore's read side: Lookup, and the data path of a restore (resolving its hits, copying DRAM
// blocks, reading SSD blocks, verifying). The scheduling around it is in flat_store_restore.cc.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <span>

#include "store/flat_store.h"
#include "store/segment_layout.h"
#include "util/checksum.h"

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

Status FlatStore::ResolveHits(std::span<const Key> keys, RestoreJob* job) {
  const KvLayout& layout = job->layout;
  std::vector<RestoreHit>& hits = job->hits;
  hits.reserve(keys.size());
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
        UnpinHits(*job);
        return Status::InvalidArgument("key " + KeyToHex(keys[i]) + " was stored as " +
                                       s.layout.ToString() + " but the read asks for " +
                                       layout.ToString());
      }
      hits.push_back(RestoreHit{i, e});
    }
  }  // pinned scopes stay valid without the index
  // A forged or stale address is never dereferenced.
  for (uint32_t i = 0; i < hits.size(); ++i) {
    RestoreHit& h = hits[i];
    auto decoded = gva_space_.Decode(h.entry.gva, layout.slice_bytes);
    if (!decoded.ok()) {
      h.valid = false;
      continue;
    }
    h.offset = decoded->offset;
    h.plane_stride = h.entry.layer_stride / layout.num_planes;
    (GvaIsSsd(h.entry.gva) ? job->ssd_hits : job->dram_hits).push_back(i);
  }
  return Status::OK();
}

void FlatStore::UnpinHits(const RestoreJob& job) {
  for (const RestoreHit& h : job.hits) scopes_[h.entry.scope_id].Unpin();
}

// The copy order follows the destination. Block by block ([layer][plane] within each) writes
// block-contiguous and per-plane destinations front to back, while the arena's slices of a block
// lie a plane stride apart (each copy prefetches the next). Into per-slice destinations (SGLang's
// layer_first: one pool per layer and plane, blocks side by side) layer by layer across the
// blocks instead: then both sides run front to back, since a segment's blocks also lie side by
// side in each of its runs.
void FlatStore::CopyDramHits(RestoreJob& job) {
  const KvLayout& layout = job.layout;
  const uint64_t sb = layout.slice_bytes;
  const uint32_t planes = layout.num_planes;
  const size_t n_hits = job.dram_hits.size();
  const CopyStores stores = n_hits * layout.block_bytes() >= kStreamingCopyBytes
                                ? CopyStores::kStreaming
                                : CopyStores::kCached;
  // Hit n's slice of run r = l * planes + p in the arena: runs follow each other a plane stride
  // apart (SegmentLayout), from the block's (0, 0) slice at h.offset.
  auto from = [&](size_t n, uint32_t r) {
    const RestoreHit& h = job.hits[job.dram_hits[n]];
    return dram_->base() + h.offset + r * h.plane_stride;
  };
  // One pass over each byte: the hash is taken from the registers that store it.
  auto copy = [&](size_t n, uint32_t r, const uint8_t* next) {
    RestoreHit& h = job.hits[job.dram_hits[n]];
    uint8_t* to = SliceAddress(job.dst, layout, h.key, r / planes, r % planes);
    if (options_.verify_checksums) {
      h.checksum += CopySliceWithChecksum(to, from(n, r), sb, r, stores, next);
    } else {
      CopySlice(to, from(n, r), sb, stores, next);
    }
  };
  for (uint32_t i : job.dram_hits) job.hits[i].checksum = 0;
  const uint32_t runs = layout.num_layers * planes;
  if (job.dst.kind == BufferKind::kSlicePointers) {
    for (uint32_t r = 0; r < runs; ++r) {
      for (size_t n = 0; n < n_hits; ++n) {
        const uint8_t* next = n + 1 < n_hits ? from(n + 1, r)
                              : r + 1 < runs ? from(0, r + 1)
                                             : nullptr;
        copy(n, r, next);
      }
    }
  } else {
    for (size_t n = 0; n < n_hits; ++n) {
      for (uint32_t r = 0; r < runs; ++r) {
        const uint8_t* next = r + 1 < runs     ? from(n, r + 1)
                              : n + 1 < n_hits ? from(n + 1, 0)
                                               : nullptr;
        copy(n, r, next);
      }
    }
  }
  // Before the layers are reported and the job completes (both take locks).
  if (stores == CopyStores::kStreaming) FenceStreamingStores();
}

void FlatStore::BuildSsdSlices(const RestoreJob& job, uint32_t first, uint32_t last,
                               std::vector<SliceRead>* out) const {
  const KvLayout& layout = job.layout;
  const uint32_t planes = layout.num_planes;
  out->reserve(out->size() + job.ssd_hits.size() * (last - first) * planes);
  for (uint32_t j = 0; j < job.ssd_hits.size(); ++j) {
    const RestoreHit& h = job.hits[job.ssd_hits[j]];
    const SegmentLayout seg = SegmentLayout::FromLayerStride(layout, h.entry.layer_stride);
    for (uint32_t l = first; l < last; ++l) {
      for (uint32_t p = 0; p < planes; ++p) {
        const uint64_t off = h.offset + seg.RunOffset(l, p);  // h.offset: the (0, 0) slice
        // tag: which SSD block (index into ssd_hits) and plane, for the slice hash.
        out->push_back(SliceRead{ssd_->FileOf(off), ssd_->FileOffset(off), layout.slice_bytes,
                                 SliceAddress(job.dst, layout, h.key, l, p), l, j * planes + p});
      }
    }
  }
}

// SSD slices go through the restore pipeline (io/layered_restore.h): coalesced, layer-ordered
// reads in a bounded staging window, the first layer first, with per-layer completion forwarded
// to the caller. Returns at once; `done` runs when every read is back (on an I/O worker), or
// before this returns when nothing could be started.
void FlatStore::StartSsdReads(const std::shared_ptr<RestoreJob>& job,
                              std::function<void(Status)> done) {
  const KvLayout& layout = job->layout;
  SliceCallback on_slice;
  RestoreJob* const raw = job.get();
  if (options_.verify_checksums) {
    job->ssd_sums.reset(new std::atomic<uint64_t>[job->ssd_hits.size()]);
    for (size_t j = 0; j < job->ssd_hits.size(); ++j) job->ssd_sums[j].store(0);
    const uint32_t planes = layout.num_planes;
    // A staged slice is copied out and hashed in one pass; cached stores, since the disk, not
    // memory, bounds these restores and streaming stores would need a fence per slice here.
    on_slice = [raw, planes](const SliceRead& s, const uint8_t* bytes, uint8_t* copy_to) {
      const uint32_t position = s.layer * planes + s.tag % planes;
      const uint64_t h = copy_to != nullptr ? CopySliceWithChecksum(copy_to, bytes, s.len, position,
                                                                    CopyStores::kCached)
                                            : SliceChecksum(bytes, s.len, position);
      raw->ssd_sums[s.tag / planes].fetch_add(h, std::memory_order_relaxed);
    };
  }
  const uint64_t total = uint64_t{job->ssd_hits.size()} * layout.num_layers * layout.num_planes;
  auto reads = LayeredRestore::Start(
      *restore_, total, layout.num_layers,
      [this, raw](uint32_t first, uint32_t last, std::vector<SliceRead>* out) {
        BuildSsdSlices(*raw, first, last, out);
      },
      [raw](uint32_t l) { raw->ReportLayer(l); }, std::move(on_slice),
      [job, done = std::move(done)](const Status& st, const ReaderStats& rs) {
        job->ssd_stats = rs;
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
  GetResult result;
  result.found.assign(job.num_keys, 0);
  if (st.ok() && job.ssd_sums) {
    // Every slice callback has run (the reader restores are done, which orders their effects
    // before the prefetch's completion).
    for (size_t j = 0; j < job.ssd_hits.size(); ++j) {
      job.hits[job.ssd_hits[j]].checksum = job.ssd_sums[j].load(std::memory_order_relaxed);
    }
  }
  const uint64_t now = NowNs();
  const uint64_t block_bytes = job.layout.block_bytes();
  for (const RestoreHit& h : job.hits) {
    ScopeSlot& s = scopes_[h.entry.scope_id];
    bool ok = st.ok() && h.valid && s.generation() == h.entry.scope_gen;
    if (ok && options_.verify_checksums && h.checksum != h.entry.checksum) {
      ok = false;
      result.corrupt++;
    }
    if (ok) {
      result.found[h.key] = 1;
      result.hits++;
      (GvaIsSsd(h.entry.gva) ? result.bytes_from_ssd : result.bytes_from_dram) += block_bytes;
    }
    s.Touch(now);
    s.Unpin();
  }
  while (result.leading_hits < job.num_keys && result.found[result.leading_hits]) {
    result.leading_hits++;
  }
  result.ssd_bytes_read = job.ssd_stats.bytes_read;
  result.ssd_reads = job.ssd_stats.reads_issued;
  result.ssd_reads_in_place = job.ssd_stats.direct_reads + job.ssd_stats.vectored_ops;
  if (job.admitted_ns >= 0) {
    result.queued_ns = std::max<int64_t>(0, job.admitted_ns - job.arrival_ns);
    result.ssd_read_ns = std::max<int64_t>(0, job.ssd_done_ns - job.admitted_ns);
  }
  if (st.ok()) {
    hits_.fetch_add(result.hits, std::memory_order_relaxed);
    misses_.fetch_add(job.num_keys - result.hits, std::memory_order_relaxed);
    mismatches_.fetch_add(result.corrupt, std::memory_order_relaxed);
    media_[0].delivered.fetch_add(result.bytes_from_dram, std::memory_order_relaxed);
    media_[0].read.fetch_add(result.bytes_from_dram, std::memory_order_relaxed);
    media_[1].delivered.fetch_add(result.bytes_from_ssd, std::memory_order_relaxed);
  } else if (st.code() == StatusCode::kAborted) {
    restores_cancelled_.fetch_add(1, std::memory_order_relaxed);
  } else {
    io_errors_.fetch_add(1, std::memory_order_relaxed);
  }
  media_[1].read.fetch_add(result.ssd_bytes_read, std::memory_order_relaxed);

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

}  // namespace flatcake
