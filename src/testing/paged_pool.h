// Test helpers of the GPU data path (src/gpu): a paged KV pool in host memory and page orders.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "flatcake/key.h"
#include "flatcake/layout.h"
#include "gpu/gpu_transfer.h"
#include "util/block_content.h"

namespace flatcake::testing {

// The engine's paged KV pool in host memory: one page array per (layer, plane). The fake device
// addresses it directly; the device tests copy a real pool into one to check it.
struct HostPagedPool {
  KvLayout layout;
  uint64_t pages;
  std::vector<std::vector<uint8_t>> arrays;  // [l * planes + p]: pages * slice_bytes

  HostPagedPool(const KvLayout& l, uint64_t n) : layout(l), pages(n) {
    arrays.resize(uint64_t{l.num_layers} * l.num_planes);
    for (auto& a : arrays) a.assign(n * l.slice_bytes, 0xEE);
  }
  gpu::DeviceKvTarget Target(const std::vector<uint64_t>& page_of_key) {
    gpu::DeviceKvTarget t;
    for (auto& a : arrays) t.bases.push_back(a.data());
    t.pages = page_of_key;
    return t;
  }
  // Whether page `page` holds `key`'s FillBlock content in layers [0, layers).
  bool Holds(const Key& key, uint64_t page, uint32_t layers) const {
    std::vector<uint8_t> want(layout.block_bytes());
    FillBlock(key, want.data(), want.size());
    const uint64_t slice = layout.slice_bytes;
    for (uint32_t l = 0; l < layers; ++l) {
      for (uint32_t p = 0; p < layout.num_planes; ++p) {
        const uint8_t* got = arrays[l * layout.num_planes + p].data() + page * slice;
        if (std::memcmp(got, want.data() + (uint64_t{l} * layout.num_planes + p) * slice, slice) !=
            0) {
          return false;
        }
      }
    }
    return true;
  }
};

// Pages in reverse order, so that no block lands where a plain copy would put it.
inline std::vector<uint64_t> ReversedPages(size_t n, uint64_t pool_pages) {
  std::vector<uint64_t> pages(n);
  for (size_t i = 0; i < n; ++i) pages[i] = pool_pages - 1 - i;
  return pages;
}

}  // namespace flatcake::testing
