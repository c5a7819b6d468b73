#include "util/checksum.h"

#include <xxhash.h>

namespace flatcake {

uint64_t SliceChecksum(const void* data, uint64_t len, uint32_t position) {
  return XXH3_64bits_withSeed(data, len, position);
}

uint64_t BlockChecksum(const BlockBuffers& buffers, const KvLayout& layout, uint64_t block) {
  uint64_t sum = 0;
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (uint32_t p = 0; p < layout.num_planes; ++p) {
      sum += SliceChecksum(SliceAddress(buffers, layout, block, l, p), layout.slice_bytes,
                           l * layout.num_planes + p);
    }
  }
  return sum;
}

}  // namespace flatcake
