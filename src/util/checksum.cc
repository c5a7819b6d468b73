#include "util/checksum.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace flatcake {

uint64_t BlockChecksum(const BlockBuffers& buffers, const KvLayout& layout, uint64_t block) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (uint32_t p = 0; p < layout.num_planes; ++p) {
      XXH3_64bits_update(&st, SliceAddress(buffers, layout, block, l, p), layout.slice_bytes);
    }
  }
  return XXH3_64bits_digest(&st);
}

}  // namespace flatcake
