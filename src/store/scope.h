// Scopes: the placement and reclamation unit. One session's (or shared prefix's) blocks on one
// medium, written as a sequence of layer-major segments, freed as a whole.
//
// Each scope lives in a fixed ScopeSlot of the store's slot array (FlatStore::scopes_; a slot's
// index is the scope id that index entries carry). The slot's control word packs
//   generation[63:32] | live[31] | readers[30:0]
// and is the only synchronisation between readers and reclamation:
//  - TryPin(gen) increments readers only while the slot is live with generation `gen` (one CAS),
//    so a reader holding an index entry of a reclaimed scope fails to pin and treats it as a miss;
//  - TryRetire(gen) moves (gen, live, 0 readers) to (gen + 1, not live, 0) in one CAS, so a scope
//    with a reader is never retired, and once retired no reader can pin it again. Its extents are
//    freed only after a successful TryRetire: no reader ever sees recycled bytes.
// Writers pin the scope they are writing into, so a segment in flight is never reclaimed.
//
// The descriptive fields (medium, layout, session, segments, which are also the scope's extents,
// keys and the counters) are written by the store under its mutex. `layout` and `medium` are set
// before the first index entry of the generation is published and do not change while the
// generation lives, so a pinned reader may read them.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "flatcake/gva.h"
#include "flatcake/key.h"
#include "flatcake/layout.h"

namespace flatcake {

// One write batch inside a scope: [layer][plane][block], each (layer, plane) run `run_stride`
// bytes (the blocks' slices back to back, padded to 4 KiB); SegmentLayout(layout, num_blocks)
// (store/segment_layout.h) gives run_stride, bytes and every slice's offset. Each segment is one
// extent of its medium, allocated where the scope's previous segment ended whenever that space
// is free.
struct Segment {
  uint64_t base = 0;  // medium offset (DRAM arena offset or SSD pool offset)
  uint32_t num_blocks = 0;
  uint64_t run_stride = 0;
  uint64_t bytes = 0;  // layers * planes * run_stride: SegmentLayout::Bytes()
  // Durable SSD scopes: where this segment's keys start in the scope's `keys` once its commit
  // record is written (concurrent batches may commit out of order); kUncommitted before.
  static constexpr uint32_t kUncommitted = UINT32_MAX;
  uint32_t first_key = kUncommitted;
  // Durable scopes that outlived a Clear (pinned by a reader or a put): committed before the
  // Clear record, so gone after a restart; a journal rewrite must not bring it back.
  bool cleared = false;
  // Reserved for a write that was never published (aborted, or its writer failed): its extent
  // was freed and is no longer the scope's. Kept only so that later segments keep their numbers.
  bool abandoned = false;
};

// Marks segments[n] abandoned, takes its bytes off *used_bytes, and drops the abandoned segments
// at the end of the list (none of them is named by an index entry or a record). What each
// ScopeHost's AbandonScopeSegment does to its scope.
inline void AbandonSegment(std::vector<Segment>* segments, uint32_t n, uint64_t* used_bytes) {
  Segment& seg = (*segments)[n];
  if (seg.abandoned) return;
  seg.abandoned = true;
  *used_bytes -= seg.bytes;
  while (!segments->empty() && segments->back().abandoned) segments->pop_back();
}

class ScopeSlot {
 public:
  static constexpr uint64_t kLiveBit = uint64_t{1} << 31;
  static constexpr uint64_t kReaderMask = kLiveBit - 1;

  static uint32_t GenOf(uint64_t ctl) { return static_cast<uint32_t>(ctl >> 32); }

  bool TryPin(uint32_t gen) {
    uint64_t c = ctl_.load(std::memory_order_acquire);
    while (GenOf(c) == gen && (c & kLiveBit) && (c & kReaderMask) < kReaderMask) {
      if (ctl_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) return true;
    }
    return false;
  }
  void Unpin() { ctl_.fetch_sub(1, std::memory_order_acq_rel); }
  // Retires generation `gen` if it is live and unpinned. Afterwards the slot is free.
  bool TryRetire(uint32_t gen) {
    uint64_t expect = (uint64_t{gen} << 32) | kLiveBit;
    return ctl_.compare_exchange_strong(expect, uint64_t{gen + 1} << 32, std::memory_order_acq_rel);
  }
  // Makes a free slot live with its current generation; returns that generation.
  // REQUIRES: the slot is free (not live) and the caller holds the store mutex.
  uint32_t Activate() {
    uint64_t c = ctl_.load(std::memory_order_acquire);
    ctl_.store(c | kLiveBit, std::memory_order_release);
    return GenOf(c);
  }
  bool live() const { return ctl_.load(std::memory_order_acquire) & kLiveBit; }
  uint32_t generation() const { return GenOf(ctl_.load(std::memory_order_acquire)); }
  uint32_t readers() const {
    return static_cast<uint32_t>(ctl_.load(std::memory_order_acquire) & kReaderMask);
  }

  void Touch(uint64_t now_ns) { last_use_ns.store(now_ns, std::memory_order_relaxed); }

  std::atomic<uint64_t> last_use_ns{0};
  // layout.block_bytes(), readable without a pin (Lookup counts bytes without pinning): set with
  // the layout, before the generation's first index entry is published.
  std::atomic<uint64_t> block_bytes{0};

  // --- written under the store mutex ---
  MediaType medium = MediaType::kDram;
  KvLayout layout;
  std::string session;
  std::vector<Segment> segments;  // also the extents the scope owns on its medium
  std::vector<Key> keys;          // published keys, erased from the index at reclamation
  // Durable SSD scopes: each published key's block checksum (parallel to `keys`, so the journal
  // can be rewritten from memory), the scope's id in the journal and its records' bytes.
  std::vector<uint64_t> checksums;
  uint64_t uid = 0;
  uint64_t journal_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t blocks = 0;

 private:
  std::atomic<uint64_t> ctl_{uint64_t{1} << 32};  // generation 1, free
};

}  // namespace flatcake
