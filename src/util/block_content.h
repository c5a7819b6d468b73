// Deterministic block content, for everything that writes blocks it later verifies: the replay,
// the benchmarks and the tests. FillBlock's bytes differ for every key and position, so a misplaced
// or recycled slice shows as a mismatch. Pure functions and a plain value type; thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "flatcake/key.h"
#include "flatcake/layout.h"

namespace flatcake {

// Writes the deterministic content of block `key` (its first `bytes` bytes) to dst.
inline void FillBlock(const Key& key, uint8_t* dst, uint64_t bytes) {
  uint64_t x = key.lo ^ (key.hi * 0x9E3779B97F4A7C15ull);
  uint64_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    __builtin_memcpy(dst + i, &x, 8);
  }
  for (; i < bytes; ++i) dst[i] = static_cast<uint8_t>(x >> (8 * (i % 8)));
}

// Keys KeyFromId(first .. first + n - 1, ns).
inline std::vector<Key> MakeKeys(uint64_t ns, uint64_t first, uint64_t n) {
  std::vector<Key> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(KeyFromId(first + i, ns));
  return keys;
}

// Block-contiguous host copy of `keys`, for Put and for comparison after Get.
struct HostBlocks {
  KvLayout layout;
  std::vector<uint8_t> bytes;
  std::vector<void*> ptrs;

  HostBlocks(const KvLayout& l, size_t n) : layout(l), bytes(l.block_bytes() * n), ptrs(n) {
    for (size_t i = 0; i < n; ++i) ptrs[i] = bytes.data() + i * l.block_bytes();
  }
  void Fill(const std::vector<Key>& keys) {
    for (size_t i = 0; i < keys.size(); ++i) {
      FillBlock(keys[i], static_cast<uint8_t*>(ptrs[i]), layout.block_bytes());
    }
  }
  BlockBuffers buffers() const { return BlockBuffers{BufferKind::kBlockContiguous, ptrs}; }
  uint8_t* block(size_t i) { return static_cast<uint8_t*>(ptrs[i]); }
};

}  // namespace flatcake
