// FlatStore's read side: Exists and Get.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>

#include "store/flat_store.h"
#include "store/staging.h"
#include "util/checksum.h"

namespace flatcake {

size_t FlatStore::Exists(std::span<const Key> keys) {
  std::shared_lock<std::shared_mutex> index_lock(index_mu_);
  exists_.fetch_add(1, std::memory_order_relaxed);
  // Batched index lookups overlap the keys' cache misses; chunks bound the work wasted past the
  // first miss (the index prefetches at most a pipeline's depth beyond it).
  constexpr size_t kChunk = 64;
  IndexEntry entries[kChunk];
  size_t n = 0;
  while (n < keys.size()) {
    const size_t m = std::min(kChunk, keys.size() - n);
    const size_t found = index_->LookupPrefix(keys.subspan(n, m), entries);
    for (size_t i = 0; i < found; ++i) {
      if (entries[i].scope_id >= options_.max_scopes) return n + i;  // never a valid entry
      ScopeSlot& s = scopes_[entries[i].scope_id];
      if (s.generation() != entries[i].scope_gen || !s.live()) return n + i;  // reclaimed
    }
    n += found;
    if (found < m) break;
  }
  return n;
}

Result<GetResult> FlatStore::Get(std::span<const Key> keys, const KvLayout& layout,
                                 const BlockBuffers& dst, const GetOptions& options) {
  gets_.fetch_add(1, std::memory_order_relaxed);
  FC_RETURN_IF_ERROR(ValidateBuffers(dst, layout, keys.size()));
  GetResult result;
  result.found.assign(keys.size(), 0);

  // 1. Resolve and pin. A key whose scope cannot be pinned (reclaimed) is a miss.
  struct Hit {
    uint32_t key;
    IndexEntry e;
    bool valid = true;      // false: the entry's address did not decode (never read)
    uint64_t checksum = 0;  // of the delivered bytes
  };
  std::vector<Hit> hits;
  hits.reserve(keys.size());
  auto unpin_all = [&] {
    for (const Hit& h : hits) scopes_[h.e.scope_id].Unpin();
  };
  // One batched index lookup for all keys: it overlaps their cache misses.
  std::vector<IndexEntry> entries(keys.size());
  std::unique_ptr<bool[]> in_index(new bool[keys.size()]);
  std::shared_lock<std::shared_mutex> index_lock(index_mu_);
  index_->LookupBatch(keys, entries.data(), in_index.get());
  for (uint32_t i = 0; i < keys.size(); ++i) {
    if (!in_index[i]) continue;
    const IndexEntry& e = entries[i];
    if (e.scope_id >= options_.max_scopes) continue;
    ScopeSlot& s = scopes_[e.scope_id];
    if (!s.TryPin(e.scope_gen)) continue;
    if (!(s.layout == layout)) {
      s.Unpin();
      unpin_all();
      return Status::InvalidArgument("key " + KeyToHex(keys[i]) + " was stored as " +
                                     s.layout.ToString() + " but the read asks for " +
                                     layout.ToString());
    }
    hits.push_back(Hit{i, e, true, 0});
  }
  index_lock.unlock();  // pinned scopes stay valid without the index

  // 2. DRAM blocks are copied at once; SSD blocks are restored by ReadSsd, which builds their
  //    slices (a long session has hundreds of thousands) the first layer's first, so that its
  //    reads go out before the other layers' slices are built.
  const uint64_t sb = layout.slice_bytes;
  const uint64_t fb = ssd_ ? ssd_->file_bytes() : 1;
  // SSD blocks are verified slice by slice as the slices land (the I/O worker hashes each one
  // right after landing it, see util/checksum.h); DRAM blocks right after their copy.
  std::vector<uint32_t> ssd_hits;  // indices into `hits`
  std::vector<uint64_t> ssd_base;  // their decoded offsets
  for (uint32_t i = 0; i < hits.size(); ++i) {
    Hit& h = hits[i];
    auto decoded = gva_space_.Decode(h.e.gva, sb);
    if (!decoded.ok()) {  // a forged or stale address is never dereferenced
      h.valid = false;
      continue;
    }
    if (GvaIsSsd(h.e.gva)) {
      ssd_hits.push_back(i);
      ssd_base.push_back(decoded->offset);
      continue;
    }
    const uint64_t plane_stride = h.e.layer_stride / layout.num_planes;
    for (uint32_t l = 0; l < layout.num_layers; ++l) {
      for (uint32_t p = 0; p < layout.num_planes; ++p) {
        const uint64_t off = decoded->offset + l * h.e.layer_stride + p * plane_stride;
        std::memcpy(SliceAddress(dst, layout, h.key, l, p), dram_->base() + off, sb);
      }
    }
    if (options_.verify_checksums) h.checksum = BlockChecksum(dst, layout, h.key);
  }
  const SliceSource ssd_slices = [&](uint32_t first, uint32_t last, std::vector<SliceRead>* out) {
    const uint32_t planes = layout.num_planes;
    out->reserve(out->size() + ssd_hits.size() * (last - first) * planes);
    for (uint32_t j = 0; j < ssd_hits.size(); ++j) {
      const Hit& h = hits[ssd_hits[j]];
      const uint64_t plane_stride = h.e.layer_stride / planes;
      for (uint32_t l = first; l < last; ++l) {
        for (uint32_t p = 0; p < planes; ++p) {
          const uint64_t off = ssd_base[j] + l * h.e.layer_stride + p * plane_stride;
          // tag: which SSD block (index into ssd_hits) and plane, for the slice hash.
          out->push_back(SliceRead{static_cast<uint32_t>(off / fb), off % fb, sb,
                                   SliceAddress(dst, layout, h.key, l, p), l, j * planes + p});
        }
      }
    }
  };
  Status st;
  if (!ssd_hits.empty()) {
    std::unique_ptr<std::atomic<uint64_t>[]> sums;
    SliceCallback on_slice;
    if (options_.verify_checksums) {
      sums.reset(new std::atomic<uint64_t>[ssd_hits.size()]);
      for (size_t j = 0; j < ssd_hits.size(); ++j) sums[j].store(0, std::memory_order_relaxed);
      const uint32_t planes = layout.num_planes;
      on_slice = [&sums, planes](const SliceRead& s, const uint8_t* bytes) {
        const uint32_t position = s.layer * planes + s.tag % planes;
        sums[s.tag / planes].fetch_add(SliceChecksum(bytes, s.len, position),
                                       std::memory_order_relaxed);
      };
    }
    auto on_layer = [&](uint32_t l) {
      if (options.on_layer) options.on_layer(l);
    };
    st = ReadSsd(ssd_hits.size(), ssd_slices, layout, on_layer, std::move(on_slice), &result);
    // Wait() returned: every slice callback has run, and its sum is visible (the handle's
    // completion is synchronised with Wait).
    if (sums && st.ok()) {
      for (size_t j = 0; j < ssd_hits.size(); ++j) {
        hits[ssd_hits[j]].checksum = sums[j].load(std::memory_order_relaxed);
      }
    }
  } else if (options.on_layer) {
    for (uint32_t l = 0; l < layout.num_layers; ++l) options.on_layer(l);
  }
  if (!st.ok()) {
    unpin_all();
    io_errors_.fetch_add(1, std::memory_order_relaxed);
    return st.WithContext("get");
  }

  // 3. Verify every block; re-validate the pin (it cannot have been lost, but a broken invariant
  //    must surface as a miss, never as data), then unpin.
  const uint64_t now = NowNs();
  for (const Hit& h : hits) {
    ScopeSlot& s = scopes_[h.e.scope_id];
    bool ok = h.valid && s.generation() == h.e.scope_gen;
    if (ok && options_.verify_checksums) {
      if (h.checksum != h.e.checksum) {
        ok = false;
        result.corrupt++;
      }
    }
    if (ok) {
      result.found[h.key] = 1;
      result.hits++;
      (GvaIsSsd(h.e.gva) ? result.bytes_from_ssd : result.bytes_from_dram) += layout.block_bytes();
    }
    s.Touch(now);
    s.Unpin();
  }
  while (result.leading_hits < keys.size() && result.found[result.leading_hits]) {
    result.leading_hits++;
  }
  hits_.fetch_add(result.hits, std::memory_order_relaxed);
  misses_.fetch_add(keys.size() - result.hits, std::memory_order_relaxed);
  mismatches_.fetch_add(result.corrupt, std::memory_order_relaxed);
  media_[0].delivered.fetch_add(result.bytes_from_dram, std::memory_order_relaxed);
  media_[0].read.fetch_add(result.bytes_from_dram, std::memory_order_relaxed);
  media_[1].delivered.fetch_add(result.bytes_from_ssd, std::memory_order_relaxed);
  media_[1].read.fetch_add(result.ssd_bytes_read, std::memory_order_relaxed);
  return result;
}

}  // namespace flatcake

namespace flatcake {

// SSD slices go through the restore pipeline: coalesced, layer-ordered reads in a bounded staging
// window, with per-layer completion forwarded to the caller.
//
// A large restore goes out as two: its first layer, then the rest. The first layer's slices and
// plan are small, so its reads start at once, and the reader issues them before any of the rest's,
// while this thread is still building and planning the (much larger) rest; otherwise a long
// session's first layer would wait for the whole session's plan. The rest is started after the
// first layer: it issues once the first layer's reads are back from the device, so they do not
// share it with a window of later layers. The layers are still reported in order: a layer of the
// rest that completes before the first layer is held back until the first layer is reported.
Status FlatStore::ReadSsd(size_t blocks, const SliceSource& source, const KvLayout& layout,
                          const std::function<void(uint32_t)>& on_layer, SliceCallback on_slice,
                          GetResult* result) {
  const uint64_t total = uint64_t{blocks} * layout.num_layers * layout.num_planes;
  const bool split = layout.num_layers > 1 && total >= kSplitRestoreSlices;
  std::vector<SliceRead> first, rest;  // rest: built once the first restore is on its way
  source(0, split ? 1 : layout.num_layers, &first);

  // Layer reports of the two restores, merged into one ordered stream; and a failed first layer
  // cancels the rest (one restore stops issuing after its first error, and so do the two).
  struct Gate {
    std::mutex mu;
    bool first_reported = false;  // the first restore's layer 0 went out
    std::vector<uint32_t> held;   // the rest's OK layers that completed before that, in order
    Status first_failed;          // layer 0's error
    ReaderHandle* rest = nullptr;
  } gate;
  LayerCallback cb_first = [&](uint32_t layer, const Status& st) {
    if (!split) {
      if (st.ok()) on_layer(layer);
      return;
    }
    if (layer != 0) return;  // the first restore has only layer 0; the rest reports the others
    std::lock_guard<std::mutex> lock(gate.mu);
    if (st.ok()) {
      on_layer(0);
    } else {
      gate.first_failed = st;
      if (gate.rest != nullptr) gate.rest->Cancel(st);
    }
    for (uint32_t l : gate.held) on_layer(l);
    gate.held.clear();
    gate.first_reported = true;
  };
  LayerCallback cb_rest = [&](uint32_t layer, const Status& st) {
    if (layer == 0 || !st.ok()) return;  // layer 0 is the first restore's
    std::lock_guard<std::mutex> lock(gate.mu);
    if (gate.first_reported) {
      on_layer(layer);
    } else {
      gate.held.push_back(layer);
    }
  };
  auto count = [result](const ReaderHandle& h) {
    const ReaderStats rs = h.stats();
    result->ssd_bytes_read += rs.bytes_read;
    result->ssd_reads += rs.reads_issued;
    result->ssd_reads_in_place += rs.direct_reads + rs.vectored_ops;
  };
  FC_ASSIGN_OR_RETURN(auto h1, restore_->Start(first, layout.num_layers, cb_first, on_slice));
  Status st;
  if (split) {
    // The first layer is on its way: build the rest. It goes out once the first layer's reads are
    // back, while their bytes are being copied out.
    source(1, layout.num_layers, &rest);
    auto h2 = restore_->Start(rest, layout.num_layers, cb_rest, on_slice, h1);
    if (!h2.ok()) {
      (void)h1->Wait();  // its callbacks use this frame
      return h2.status();
    }
    {
      std::lock_guard<std::mutex> lock(gate.mu);
      gate.rest = h2->get();
      if (!gate.first_failed.ok()) gate.rest->Cancel(gate.first_failed);
    }
    st = h1->Wait();
    const Status st2 = (*h2)->Wait();
    if (st.ok()) st = st2;
    count(**h2);
  } else {
    st = h1->Wait();
  }
  count(*h1);
  return st;
}

}  // namespace flatcake
