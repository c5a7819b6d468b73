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

struct StreamingChecksums::State {
  XXH3_state_t xxh;
};

StreamingChecksums::StreamingChecksums(size_t blocks) : states_(new State[blocks]) {
  for (size_t i = 0; i < blocks; ++i) XXH3_64bits_reset(&states_[i].xxh);
}
StreamingChecksums::~StreamingChecksums() = default;

void StreamingChecksums::Update(size_t block, const void* data, uint64_t len) {
  XXH3_64bits_update(&states_[block].xxh, data, len);
}

uint64_t StreamingChecksums::Digest(size_t block) const {
  return XXH3_64bits_digest(&states_[block].xxh);
}

}  // namespace flatcake
