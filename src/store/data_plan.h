// The two halves of the store's data path, and what passes between them.
//
// FlatStore is the metadata half: the index, scopes, placement, reclamation and FC-MAS. Moving
// the bytes is the data half, which runs wherever the caller's memory is: inside the store for
// the embedded Put and Restore, and in another process for the node daemon's clients, which map
// the DRAM arena and open the SSD pool files themselves (SharedMedia says how). For a write the
// metadata half hands out a WriteReservation (where each segment of the batch goes) and
// SegmentWriter (store/segment_writer.h) fills it; for a read it hands out a ReadPin (where each
// pinned block is) and PinnedRead (store/pinned_read.h) copies and reads it. The embedded store
// runs the same two helpers on its own media, so a byte lands in the same place either way.
//
// Everything here is plain data, safe to copy and to send (MediaAccess holds this process's
// pointers and is not sent).
#pragma once

#include <cstdint>
#include <vector>

#include "flatcake/gva.h"
#include "flatcake/layout.h"
#include "media/ssd_file_pool.h"

namespace flatcake {

class IoEngine;

// What another process needs to reach a store's media: the DRAM arena's descriptor and size
// (SharedArenaMapping::Map) and the SSD pool's files (SsdFilePool::OpenFiles).
struct SharedMedia {
  int dram_fd = -1;  // -1: no DRAM, or an arena no other process can map (anonymous)
  uint64_t dram_bytes = 0;
  SsdPoolGeometry ssd;  // no paths: no SSD
};

// How this process reaches the media: the data halves' view. The pointers must outlive its users.
struct MediaAccess {
  uint8_t* dram = nullptr;  // the arena's byte 0 as this process maps it; null: no DRAM
  uint64_t dram_bytes = 0;
  const SsdPoolGeometry* ssd = nullptr;  // null: no SSD
  IoEngine* engine = nullptr;            // the pool's files registered in pool order
};

// One segment of a reservation: an extent of `bytes` at `base` on `medium`, laid out
// [layer][plane][block] as SegmentLayout(layout, num_blocks) (store/segment_layout.h) says.
struct ReservedSegment {
  MediaType medium = MediaType::kDram;
  uint64_t base = 0;  // medium offset: DRAM arena offset or SSD pool offset
  uint32_t num_blocks = 0;
  uint64_t plane_stride = 0;  // SegmentLayout::PlaneStride(): one padded (layer, plane) run
  uint64_t layer_stride = 0;  // SegmentLayout::LayerStride()
  uint64_t bytes = 0;         // SegmentLayout::Bytes()
  // It holds WriteReservation::blocks[first_block, first_block + num_blocks), in that order.
  uint32_t first_block = 0;
};

// A batch write reserved by FlatStore::ReserveWrite: its keys are marked as being written (other
// writers see them as already present, readers miss them) and its extents are allocated, until it
// is published or aborted.
struct WriteReservation {
  uint64_t id = 0;  // 0: nothing to write (every key present), nothing held
  uint64_t owner = 0;
  KvLayout layout;
  MediaType medium = MediaType::kDram;  // of every segment
  // The scope the segments belong to, as (slot id, generation): it names the scope until it is
  // freed (FlatStore::SetScopeReleaseListener reports that), so a caller can account for what
  // the reservation's bytes occupy until then.
  uint32_t scope_id = 0;
  uint32_t scope_gen = 0;
  // Per key of the batch: 1 when it is already present or being written (it is not written).
  std::vector<uint8_t> present;
  uint32_t already_present = 0;
  // The batch indices of the keys to write, in the order the segments hold them.
  std::vector<uint32_t> blocks;
  std::vector<ReservedSegment> segments;

  // The segments' footprints together: what a tenant's quota is charged for it.
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const ReservedSegment& seg : segments) n += seg.bytes;
    return n;
  }
};

// A block found by FlatStore::PinRead, its scope pinned so that its bytes stay as they are.
struct PinnedHit {
  uint32_t key = 0;  // index into the pinned keys
  MediaType medium = MediaType::kDram;
  uint64_t offset = 0;  // medium offset of the block's slice (layer 0, plane 0)
  // Its segment's layer stride: slice (l, p) is at offset +
  // SegmentLayout::FromLayerStride(layout, layer_stride).RunOffset(l, p).
  uint64_t layer_stride = 0;
  uint64_t checksum = 0;  // the BlockChecksum stored with it (util/checksum.h)
  uint32_t scope_id = 0;  // the scope pinned: the store's bookkeeping
  uint32_t scope_gen = 0;
};

// The hits of a batch of keys, pinned by FlatStore::PinRead until Unpin.
struct ReadPin {
  uint64_t id = 0;  // 0: no hit, nothing pinned
  uint64_t owner = 0;
  KvLayout layout;
  std::vector<PinnedHit> hits;  // in key order; a key without one is a miss
  Gva slowest_gva = 0;          // the largest GVA among the hits: its FC-MAS class
  uint64_t ssd_bytes = 0;       // block bytes of the SSD hits: what FC-MAS admits to the window
};

}  // namespace flatcake
