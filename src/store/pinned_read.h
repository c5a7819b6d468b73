// PinnedRead: the data half of a restore (store/data_plan.h). Given the pinned hits of a batch of
// keys and the caller's destination buffers, it copies the DRAM hits out of the arena, hands the
// SSD hits' slices to a RestoreReader (coalesced, layer-ordered, first layer first:
// LayeredRestore), hashes every delivered slice in the pass that delivers it, and says which blocks
// match their stored checksums. FlatStore's Restore runs one per job over its own media; a client
// of the node daemon runs one over its mapping of the arena and its own reader of the pool files.
//
// The pins are not its business: the metadata half took them (FlatStore::PinRead, or the embedded
// Restore) and drops them after the restore, so the addresses stay valid throughout.
//
// Thread safety: CopyDram and StartSsdReads run once each, on any thread; the slice callbacks run
// on the reader's I/O workers (summing into atomics). Verified and Outcome may be called once the
// copies and the reads are done, which the caller orders (FlatStore through FC-MAS's hand-offs).
// The object must outlive its reads: until the done callback of StartSsdReads has run.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "flatcake/store.h"
#include "io/layered_restore.h"
#include "io/restore_reader.h"
#include "store/data_plan.h"

namespace flatcake {

// Layers [first, end) of each block of a restore (end 0: through the last).
struct LayerRange {
  uint32_t first = 0;
  uint32_t end = 0;
};

class PinnedRead {
 public:
  // A restore delivering at least this many bytes from DRAM copies with streaming stores
  // (CopyStores): its destination outgrows a core's cache anyway (2 MiB of L2 on the development
  // VM), and streaming spares reading each destination line before writing it. Smaller ones keep
  // their bytes in the cache, where the caller may read them next.
  static constexpr uint64_t kStreamingCopyBytes = 4 * kMiB;

  // `hits`: of a pin of `layout`, in key order. `dst`'s pointer table is copied; the memory it
  // names must outlive the restore. `verify`: hash what is delivered and compare it with each
  // block's stored checksum. `layers`: deliver only layers [first, end) of each block (a part of
  // a restore; end 0: through the last); a block's checksum covers all its layers, so a part is
  // never verified, whatever `verify` says. REQUIRES: dst validated for `layout` and the pinned
  // keys; first < end <= layout.num_layers.
  PinnedRead(const KvLayout& layout, const BlockBuffers& dst, std::vector<PinnedHit> hits,
             bool verify, LayerRange layers = {});
  PinnedRead(const PinnedRead&) = delete;
  PinnedRead& operator=(const PinnedRead&) = delete;

  const KvLayout& layout() const { return layout_; }
  uint32_t first_layer() const { return first_layer_; }
  uint32_t end_layer() const { return end_layer_; }
  // Bytes of each block this restore delivers (all of them, or its layers' share).
  uint64_t block_bytes_delivered() const {
    return uint64_t{end_layer_ - first_layer_} * layout_.num_planes * layout_.slice_bytes;
  }
  const BlockBuffers& dst() const { return dst_; }
  const std::vector<PinnedHit>& hits() const { return hits_; }
  size_t num_dram_hits() const { return dram_.size(); }
  size_t num_ssd_hits() const { return ssd_hits_.size(); }

  // OK when every hit's slices lie inside its medium as `media` reaches it (for SSD: inside one
  // pool file): what a process that was handed the addresses checks before touching them.
  Status Check(const MediaAccess& media) const;

  // Copies the DRAM hits from the arena, whose byte 0 is at `arena`, into the destination, and
  // hashes them in the same pass.
  void CopyDram(const uint8_t* arena);

  // Appends the slice reads of layers [first, last) of every SSD hit of a pool laid out as
  // `geometry` to `*out`.
  void AppendSsdSlices(const SsdPoolGeometry& geometry, uint32_t first, uint32_t last,
                       std::vector<SliceRead>* out) const;

  // Starts reading the SSD hits through `reader`, whose engine has the pool's files registered in
  // pool order; returns at once (LayeredRestore::Start). `on_layer(l)` runs once per layer that
  // landed whole; `on_done` once every read is back, after the slices' checksums were gathered.
  // REQUIRES: CopyDram has run (a layer reported must be whole).
  std::shared_ptr<LayeredRestore> StartSsdReads(RestoreReader& reader,
                                                const SsdPoolGeometry& geometry,
                                                std::function<void(uint32_t)> on_layer,
                                                LayeredRestore::DoneCallback on_done);

  // After the copies and the reads: whether hit `i`'s delivered bytes match its stored checksum
  // (always true without verification).
  bool Verified(size_t i) const { return !verify_ || delivered_[i] == hits_[i].checksum; }

  // The outcome for the `num_keys` pinned keys once the copies and the reads ended with `st`: a
  // hit is found when `st` is OK, its pin is still valid (`pin_valid[i]`; empty: all are) and it
  // verified; counts a mismatch as corrupt. SSD counters from the reads' stats.
  GetResult Outcome(size_t num_keys, const Status& st, std::span<const uint8_t> pin_valid) const;

  // The whole data half on this thread: Check, CopyDram, the SSD reads through `reader` (needed
  // when there are SSD hits), the wait, and Outcome. For a pin that FC-MAS admitted, or whose hits
  // are all in DRAM.
  Result<GetResult> Run(const MediaAccess& media, RestoreReader* reader, size_t num_keys,
                        std::function<void(uint32_t)> on_layer = nullptr);

 private:
  // A DRAM hit as the copy loops want it.
  struct DramSource {
    uint64_t offset;        // of its (0, 0) slice in the arena
    uint64_t plane_stride;  // of its segment
    uint32_t hit;           // index into hits_
    uint32_t key;           // hits_[hit].key: its destination
  };

  const KvLayout layout_;
  const uint32_t first_layer_, end_layer_;
  std::vector<void*> dst_pointers_;
  BlockBuffers dst_;  // over dst_pointers_
  const std::vector<PinnedHit> hits_;
  const bool verify_;
  std::vector<DramSource> dram_;
  std::vector<uint32_t> ssd_hits_;   // indices into hits_
  std::vector<uint64_t> delivered_;  // per hit: the sum of its delivered slices' hashes
  // Per SSD hit: the sum of its slice hashes, added up by the I/O workers as slices land.
  std::unique_ptr<std::atomic<uint64_t>[]> ssd_sums_;
  ReaderStats ssd_stats_;  // set when the reads are done
};

}  // namespace flatcake
