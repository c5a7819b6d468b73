// Block checksums. A block's checksum is the sum (mod 2^64) over its slices of XXH3-64 of the
// slice, seeded with the slice's position l * planes + p. The same function runs on write (over
// the caller's source buffers) and on read (over the destination buffers), so a block verifies
// whatever either side's buffer layout.
//
// Why a sum of per-slice hashes rather than one hash over the block: the terms commute, so a
// restore hashes each slice the moment it lands, on whichever I/O worker landed it and in
// whatever order reads complete, while the slice is still in that core's cache. The seed makes a
// slice delivered to the wrong position a mismatch, as a changed byte is.
#pragma once

#include <cstdint>

#include "flatcake/layout.h"

namespace flatcake {

// XXH3-64 of one slice at position `position` (= layer * planes + plane) of its block.
uint64_t SliceChecksum(const void* data, uint64_t len, uint32_t position);

uint64_t BlockChecksum(const BlockBuffers& buffers, const KvLayout& layout, uint64_t block);

}  // namespace flatcake
