// Block checksums: XXH3-64 over a block's slices in [layer][plane] order, wherever they live.
// The same function runs on write (over the caller's source buffers) and on read (over the
// destination buffers), so a block verifies regardless of either side's buffer layout.
#pragma once

#include <cstdint>

#include "flatcake/layout.h"

namespace flatcake {

uint64_t BlockChecksum(const BlockBuffers& buffers, const KvLayout& layout, uint64_t block);

}  // namespace flatcake
