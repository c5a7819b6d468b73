// The flat policy's read descriptors in the simulator, exposed for the test that checks them
// against the store's per-slice descriptors.
#pragma once

#include <cstdint>
#include <vector>

#include "flatcake/layout.h"
#include "io/coalesce.h"

namespace flatcake::sim::internal {

// Appends one SliceRead per (layer, plane) covering blocks [first_block, first_block + count) of
// the segment at pool offset `seg_base` (runs of `run_stride` bytes, SegmentLayout's
// [layer][plane][block] order): the coarse form of the count * layers * planes slice reads the
// store builds for those blocks. Offsets are split into (file, offset) at `file_bytes`.
void AppendSsdRunReads(const KvLayout& layout, uint64_t file_bytes, uint64_t seg_base,
                       uint64_t run_stride, uint32_t first_block, uint32_t count,
                       std::vector<SliceRead>* out);

}  // namespace flatcake::sim::internal
