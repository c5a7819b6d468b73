#include "store/pinned_read.h"

#include <string>
#include <utility>

#include "store/segment_layout.h"
#include "util/checksum.h"
#include "util/thread_annotations.h"

namespace flatcake {

PinnedRead::PinnedRead(const KvLayout& layout, const BlockBuffers& dst, std::vector<PinnedHit> hits,
                       bool verify, LayerRange layers)
    : layout_(layout),
      first_layer_(layers.first),
      end_layer_(layers.end == 0 ? layout.num_layers : layers.end),
      dst_pointers_(dst.ptrs.begin(), dst.ptrs.end()),
      dst_{dst.kind, std::span<void* const>(dst_pointers_)},
      hits_(std::move(hits)),
      verify_(verify && first_layer_ == 0 && end_layer_ == layout.num_layers),
      delivered_(hits_.size(), 0) {
  for (uint32_t i = 0; i < hits_.size(); ++i) {
    const PinnedHit& h = hits_[i];
    if (h.medium == MediaType::kSsd) {
      ssd_hits_.push_back(i);
    } else {
      dram_.push_back(DramSource{h.offset, h.layer_stride / layout.num_planes, i, h.key});
    }
  }
}

Status PinnedRead::Check(const MediaAccess& media) const {
  for (const PinnedHit& h : hits_) {
    const SegmentLayout seg = SegmentLayout::FromLayerStride(layout_, h.layer_stride);
    // From the block's first slice to the end of its last.
    const uint64_t span =
        seg.RunOffset(layout_.num_layers - 1, layout_.num_planes - 1) + layout_.slice_bytes;
    bool inside;
    if (h.medium == MediaType::kDram) {
      inside = media.dram != nullptr && h.offset <= media.dram_bytes &&
               span <= media.dram_bytes - h.offset;
    } else {
      const SsdPoolGeometry* geo = media.ssd;
      inside = geo != nullptr && media.engine != nullptr && h.offset < geo->capacity() &&
               span <= geo->capacity() - h.offset &&
               geo->FileOf(h.offset) == geo->FileOf(h.offset + span - 1);
    }
    if (h.layer_stride % layout_.num_planes != 0 || h.layer_stride < layout_.num_planes ||
        !inside) {
      return Status::InvalidArgument("pinned block at " + std::to_string(h.offset) +
                                     " (layer stride " + std::to_string(h.layer_stride) +
                                     ") lies outside its medium as this process reaches it");
    }
  }
  return Status::OK();
}

// The copy order follows the destination. Block by block ([layer][plane] within each) writes
// block-contiguous and per-plane destinations front to back, while the arena's slices of a block
// lie a plane stride apart (each copy prefetches the next). Into per-slice destinations (SGLang's
// layer_first: one pool per layer and plane, blocks side by side) layer by layer across the
// blocks instead: then both sides run front to back, since a segment's blocks also lie side by
// side in each of its runs.
void PinnedRead::CopyDram(const uint8_t* arena) {
  const uint64_t sb = layout_.slice_bytes;
  const uint32_t planes = layout_.num_planes;
  const size_t n_hits = dram_.size();
  const CopyStores stores = n_hits * layout_.block_bytes() >= kStreamingCopyBytes
                                ? CopyStores::kStreaming
                                : CopyStores::kCached;
  // Hit n's slice of run r = l * planes + p in the arena: runs follow each other a plane stride
  // apart (SegmentLayout), from the block's (0, 0) slice at its offset.
  auto from = [&](size_t n, uint32_t r) {
    const DramSource& d = dram_[n];
    return arena + d.offset + r * d.plane_stride;
  };
  // One pass over each byte: the hash is taken from the registers that store it.
  auto copy = [&](size_t n, uint32_t r, const uint8_t* next) {
    const DramSource& d = dram_[n];
    uint8_t* to = SliceAddress(dst_, layout_, d.key, r / planes, r % planes);
    if (verify_) {
      delivered_[d.hit] += CopySliceWithChecksum(to, from(n, r), sb, r, stores, next);
    } else {
      CopySlice(to, from(n, r), sb, stores, next);
    }
  };
  for (const DramSource& d : dram_) delivered_[d.hit] = 0;
  // The runs of the layers delivered: [first, runs).
  const uint32_t first = first_layer_ * planes;
  const uint32_t runs = end_layer_ * planes;
  if (dst_.kind == BufferKind::kSlicePointers) {
    for (uint32_t r = first; r < runs; ++r) {
      for (size_t n = 0; n < n_hits; ++n) {
        const uint8_t* next = n + 1 < n_hits ? from(n + 1, r)
                              : r + 1 < runs ? from(0, r + 1)
                                             : nullptr;
        copy(n, r, next);
      }
    }
  } else {
    for (size_t n = 0; n < n_hits; ++n) {
      for (uint32_t r = first; r < runs; ++r) {
        const uint8_t* next = r + 1 < runs     ? from(n, r + 1)
                              : n + 1 < n_hits ? from(n + 1, first)
                                               : nullptr;
        copy(n, r, next);
      }
    }
  }
  // Before the layers are reported and the restore completes (both take locks).
  if (stores == CopyStores::kStreaming) FenceStreamingStores();
}

void PinnedRead::AppendSsdSlices(const SsdPoolGeometry& geometry, uint32_t first, uint32_t last,
                                 std::vector<SliceRead>* out) const {
  const uint32_t planes = layout_.num_planes;
  out->reserve(out->size() + ssd_hits_.size() * (last - first) * planes);
  for (uint32_t j = 0; j < ssd_hits_.size(); ++j) {
    const PinnedHit& h = hits_[ssd_hits_[j]];
    const SegmentLayout seg = SegmentLayout::FromLayerStride(layout_, h.layer_stride);
    for (uint32_t l = first; l < last; ++l) {
      for (uint32_t p = 0; p < planes; ++p) {
        const uint64_t off = h.offset + seg.RunOffset(l, p);  // h.offset: the (0, 0) slice
        // tag: which SSD block (index into ssd_hits_) and plane, for the slice hash.
        out->push_back(SliceRead{geometry.FileOf(off), geometry.FileOffset(off),
                                 layout_.slice_bytes, SliceAddress(dst_, layout_, h.key, l, p), l,
                                 j * planes + p});
      }
    }
  }
}

std::shared_ptr<LayeredRestore> PinnedRead::StartSsdReads(RestoreReader& reader,
                                                          const SsdPoolGeometry& geometry,
                                                          std::function<void(uint32_t)> on_layer,
                                                          LayeredRestore::DoneCallback on_done) {
  SliceCallback on_slice;
  if (verify_) {
    ssd_sums_.reset(new std::atomic<uint64_t>[ssd_hits_.size()]);
    for (size_t j = 0; j < ssd_hits_.size(); ++j) ssd_sums_[j].store(0);
    const uint32_t planes = layout_.num_planes;
    std::atomic<uint64_t>* const sums = ssd_sums_.get();
    // A staged slice is copied out and hashed in one pass; cached stores, since the disk, not
    // memory, bounds these restores and streaming stores would need a fence per slice here.
    on_slice = [sums, planes](const SliceRead& s, const uint8_t* bytes, uint8_t* copy_to) {
      const uint32_t position = s.layer * planes + s.tag % planes;
      const uint64_t h = copy_to != nullptr ? CopySliceWithChecksum(copy_to, bytes, s.len, position,
                                                                    CopyStores::kCached)
                                            : SliceChecksum(bytes, s.len, position);
      sums[s.tag / planes].fetch_add(h, std::memory_order_relaxed);
    };
  }
  const uint64_t total =
      uint64_t{ssd_hits_.size()} * (end_layer_ - first_layer_) * layout_.num_planes;
  return LayeredRestore::Start(
      reader, total, first_layer_, end_layer_,
      [this, &geometry](uint32_t first, uint32_t last, std::vector<SliceRead>* out) {
        AppendSsdSlices(geometry, first, last, out);
      },
      std::move(on_layer), std::move(on_slice),
      [this, on_done = std::move(on_done)](const Status& st, const ReaderStats& rs) {
        // Every slice callback has run (the reader restores are done, which orders their
        // effects before this).
        ssd_stats_ = rs;
        if (ssd_sums_) {
          for (size_t j = 0; j < ssd_hits_.size(); ++j) {
            delivered_[ssd_hits_[j]] = ssd_sums_[j].load(std::memory_order_relaxed);
          }
        }
        on_done(st, rs);
      });
}

GetResult PinnedRead::Outcome(size_t num_keys, const Status& st,
                              std::span<const uint8_t> pin_valid) const {
  GetResult result;
  result.found.assign(num_keys, 0);
  const uint64_t block_bytes = block_bytes_delivered();
  for (size_t i = 0; i < hits_.size(); ++i) {
    const PinnedHit& h = hits_[i];
    bool ok = st.ok() && (pin_valid.empty() || pin_valid[i]);
    if (ok && !Verified(i)) {
      ok = false;
      result.corrupt++;
    }
    if (ok) {
      result.found[h.key] = 1;
      result.hits++;
      (h.medium == MediaType::kSsd ? result.bytes_from_ssd : result.bytes_from_dram) += block_bytes;
    }
  }
  while (result.leading_hits < num_keys && result.found[result.leading_hits]) {
    result.leading_hits++;
  }
  result.ssd_bytes_read = ssd_stats_.bytes_read;
  result.ssd_reads = ssd_stats_.reads_issued;
  result.ssd_reads_in_place = ssd_stats_.direct_reads + ssd_stats_.vectored_ops;
  return result;
}

Result<GetResult> PinnedRead::Run(const MediaAccess& media, RestoreReader* reader, size_t num_keys,
                                  std::function<void(uint32_t)> on_layer) {
  FC_RETURN_IF_ERROR(Check(media));
  if (!dram_.empty()) CopyDram(media.dram);
  Status st;
  if (ssd_hits_.empty()) {
    for (uint32_t l = first_layer_; on_layer && l < end_layer_; ++l) on_layer(l);
  } else {
    if (reader == nullptr) return Status::InvalidArgument("SSD hits to read but no reader");
    Mutex mu;
    CondVar cv;
    bool done = false;
    auto reads = StartSsdReads(*reader, *media.ssd, std::move(on_layer),
                               [&](const Status& s, const ReaderStats&) {
                                 // Notified under the lock: this frame may be gone right after.
                                 MutexLock lock(mu);
                                 st = s;
                                 done = true;
                                 cv.NotifyAll();
                               });
    MutexLock lock(mu);
    while (!done) cv.Wait(mu);
  }
  return Outcome(num_keys, st, {});
}

}  // namespace flatcake
