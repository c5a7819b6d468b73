// SegmentWriter: the data half of a write (store/data_plan.h). Fills the segments of a
// WriteReservation from the caller's blocks: each segment's layer-major byte stream
// (SegmentGather) goes into the DRAM arena as this process maps it, or to the SSD pool files
// through this process's IoEngine, and the blocks' checksums come out of the same pass for
// PublishWrite. FlatStore's Put runs one over its own media; a client of the node daemon runs one
// over its mapping of the arena and its own descriptors of the pool files.
//
// SSD writes: a segment goes out in chunks of one staging buffer each (PlanSsdWrites), gathered
// into the borrowed buffers in turn, each chunk's write submitted at once, so that up to the
// loan's size of writes are in flight while the next chunk is gathered.
//
// Thread safety: Write may be called concurrently (the staging pool is shared, each call has its
// own gather). The writer only reads its MediaAccess, whose targets must outlive it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flatcake/layout.h"
#include "flatcake/status.h"
#include "store/data_plan.h"
#include "store/staging.h"

namespace flatcake {

// One write of a segment to SSD: segment bytes [pos, pos + len) to file `file` at `file_offset`.
struct SsdSegmentWrite {
  uint64_t pos = 0;
  uint64_t len = 0;
  uint32_t file = 0;
  uint64_t file_offset = 0;
};

// The writes of SSD segment `seg`, in segment order, each at most `chunk_bytes` (a multiple of
// 4 KiB). REQUIRES: the segment lies inside one file of `geometry` (CheckSegment).
std::vector<SsdSegmentWrite> PlanSsdWrites(const ReservedSegment& seg,
                                           const SsdPoolGeometry& geometry, uint64_t chunk_bytes);

// OK when `seg` is a segment of `layout` that lies inside its medium as `media` reaches it (for
// SSD: inside one pool file): what a writer or reader checks before it touches an address it was
// handed. InvalidArgument, naming what is wrong, otherwise.
Status CheckSegment(const ReservedSegment& seg, const KvLayout& layout, const MediaAccess& media);

class SegmentWriter {
 public:
  // `staging`: the gather buffers of SSD writes; may be null when `media` has no SSD. Both must
  // outlive the writer.
  SegmentWriter(const MediaAccess& media, StagingPool* staging)
      : media_(media), staging_(staging) {}

  // Writes blocks `blocks` of `src` (indices into its batch) as segment `seg` of `layout`, and
  // sets *checksums to their BlockChecksums, in `blocks` order. REQUIRES: src validated for
  // `layout`. InvalidArgument when the segment does not check (CheckSegment) or blocks.size() is
  // not its block count; the engine's error when an SSD write fails (the segment is then partly
  // written and must not be published).
  Status Write(const ReservedSegment& seg, const KvLayout& layout, const BlockBuffers& src,
               std::span<const uint32_t> blocks, std::vector<uint64_t>* checksums) const;

  // Every segment of `r`, from src (the batch r was reserved for); *checksums gets one per entry
  // of r.blocks, in that order: what PublishWrite takes. Stops at the first error.
  Status WriteAll(const WriteReservation& r, const BlockBuffers& src,
                  std::vector<uint64_t>* checksums) const;

 private:
  Status WriteSsd(const ReservedSegment& seg, SegmentGather& gather) const;

  const MediaAccess media_;
  StagingPool* const staging_;
};

}  // namespace flatcake
