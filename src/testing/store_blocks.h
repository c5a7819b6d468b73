// Helpers of the store tests that write blocks with FillBlock's content and read them back: a
// small store over a test directory, and what a Get of a batch served. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "flatcake/store.h"
#include "util/block_content.h"

namespace flatcake::testing {

// An 8 MiB DRAM arena and a 32 MiB SSD pool in 4 MiB files under `dir`, 256 scope slots, the
// posix engine: room for a few hundred 64 KiB blocks, quick to open.
inline StoreOptions SmallStoreOptions(const std::string& dir) {
  StoreOptions o;
  o.dram_bytes = 8 * kMiB;
  o.ssd_dirs = {dir};
  o.ssd_bytes = 32 * kMiB;
  o.ssd_file_bytes = 4 * kMiB;
  o.max_scopes = 256;
  o.io_engine = IoEngineKind::kPosix;
  return o;
}

// Fails the test for every block of `dst` that `found` marks but that does not hold its key's
// FillBlock content.
inline void ExpectFoundBlocksExact(const std::vector<Key>& keys, const std::vector<uint8_t>& found,
                                   HostBlocks& dst) {
  std::vector<uint8_t> want(dst.layout.block_bytes());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!found[i]) continue;
    FillBlock(keys[i], want.data(), want.size());
    EXPECT_EQ(0, std::memcmp(want.data(), dst.block(i), want.size())) << "wrong bytes, block " << i;
  }
}

// Gets `keys` (stored as `layout`) and returns, per key, 1 when it was served byte-exact and 0
// when it was missing; a served block with wrong bytes fails the test.
inline std::vector<uint8_t> ServedBlocks(Store& s, const std::vector<Key>& keys,
                                         const KvLayout& layout) {
  HostBlocks dst(layout, keys.size());
  auto r = s.Get(keys, layout, dst.buffers());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  ExpectFoundBlocksExact(keys, r->found, dst);
  return r->found;
}

// Puts `keys` with FillBlock's content on `medium`; fails the test unless every key was written.
inline void PutFilled(Store& s, const std::vector<Key>& keys, const KvLayout& layout,
                      MediaType medium) {
  HostBlocks src(layout, keys.size());
  src.Fill(keys);
  WriteHints hints;
  hints.force_medium = medium;
  auto r = s.Put(keys, layout, src.buffers(), hints);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->written, keys.size());
}

// `n` times `v`: the expected `found` of a batch served (1) or missing (0) as a whole.
inline std::vector<uint8_t> AllOf(size_t n, uint8_t v) { return std::vector<uint8_t>(n, v); }

}  // namespace flatcake::testing
