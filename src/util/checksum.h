// Block checksums: XXH3-64 over a block's slices in [layer][plane] order, wherever they live.
// The same function runs on write (over the caller's source buffers) and on read (over the
// destination buffers), so a block verifies regardless of either side's buffer layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "flatcake/layout.h"

namespace flatcake {

uint64_t BlockChecksum(const BlockBuffers& buffers, const KvLayout& layout, uint64_t block);

// The same checksum computed incrementally, for blocks that arrive layer by layer: feed each
// block's slices in [layer][plane] order with Update, then Digest. Not thread-safe; the restore
// path calls it from its (serialised, in-order) layer callbacks.
class StreamingChecksums {
 public:
  explicit StreamingChecksums(size_t blocks);
  ~StreamingChecksums();
  StreamingChecksums(const StreamingChecksums&) = delete;
  StreamingChecksums& operator=(const StreamingChecksums&) = delete;
  void Update(size_t block, const void* data, uint64_t len);
  uint64_t Digest(size_t block) const;

 private:
  struct State;
  std::unique_ptr<State[]> states_;
};

}  // namespace flatcake
