#include "util/checksum.h"

#include <xxhash.h>

// The library's runtime-dispatched XXH3 picks the widest vector unit the CPU has (AVX2 or
// AVX-512 on x86-64) and returns the same values as the plain entry point. The plain one is built
// for SSE2 only, and its legacy-encoded SSE instructions run several times slower right after
// glibc's AVX-512 memcpy, which a restore calls between slice hashes (measured on this project's
// machines: hash plus 16 KiB copy 3.2 GB/s through the plain entry point, 10-11 GB/s through the
// dispatched one).
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#define FLATCAKE_XXH3_SEEDED XXH3_64bits_withSeed_dispatch
#else
#define FLATCAKE_XXH3_SEEDED XXH3_64bits_withSeed
#endif

namespace flatcake {

uint64_t SliceChecksum(const void* data, uint64_t len, uint32_t position) {
  return FLATCAKE_XXH3_SEEDED(data, len, position);
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
