#include "util/checksum.h"

#include <xxhash.h>

// The library's runtime-dispatched XXH3 picks the widest vector unit the CPU has (AVX2 or
// AVX-512 on x86-64) and returns the same values as the plain entry point, which is built for
// SSE2 only: over 16 KiB slices, 22.8-23.5 GB/s through the dispatched one against 12.7-13.9
// through the plain one on this project's machines.
//
// The dispatched code returns with the upper halves of the vector registers dirty, and until a
// VZEROUPPER every legacy-encoded SSE instruction of the thread runs slowly (measured: an SSE2
// hash loop at 3.7 GB/s instead of 13.9, and glibc's AVX-512 memcpy and memset do not clear the
// state). The rest of this program is built for the SSE2 baseline, so each hash is followed by
// one.
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <immintrin.h>
#include <xxh_x86dispatch.h>
#define FLATCAKE_XXH3_DISPATCH 1
#endif

namespace flatcake {

namespace {

#ifdef FLATCAKE_XXH3_DISPATCH
__attribute__((target("avx"))) void ZeroUpper() { _mm256_zeroupper(); }
// VZEROUPPER is an AVX instruction; the dispatcher picks a vector path only on CPUs that have it.
// (__builtin_cpu_init first: this runs during static initialisation.)
const bool kHaveAvx = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") != 0;
}();
#endif

}  // namespace

uint64_t SliceChecksum(const void* data, uint64_t len, uint32_t position) {
#ifdef FLATCAKE_XXH3_DISPATCH
  const uint64_t h = XXH3_64bits_withSeed_dispatch(data, len, position);
  if (kHaveAvx) ZeroUpper();
  return h;
#else
  return XXH3_64bits_withSeed(data, len, position);
#endif
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
