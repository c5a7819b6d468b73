// FlatStore::RestoreLayers: a restore of a range of each block's layers (the cluster's peer
// service streams long restores through a ring of layer buffers with it).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "store/flat_store.h"
#include "testing/store_blocks.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake {
namespace {

constexpr uint8_t kUntouched = 0xEE;

std::unique_ptr<FlatStore> Open(const std::string& dir) {
  StoreOptions o = testing::SmallStoreOptions(dir);
  o.ssd_bytes = 64 * kMiB;
  o.ssd_file_bytes = 8 * kMiB;
  auto s = FlatStore::OpenWithEngine(o, nullptr);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

// Slice (l, p) of `block`, a whole block as stored ([layer][plane]).
const uint8_t* SliceOf(const std::vector<uint8_t>& block, const KvLayout& layout, uint32_t l,
                       uint32_t p) {
  return block.data() + (uint64_t{l} * layout.num_planes + p) * layout.slice_bytes;
}

// Restores layers [first, end) of `keys` into block-contiguous buffers filled with kUntouched and
// checks them: the range byte-exact, every other byte untouched, the range's layers reported once
// each and in order, every block found, the SSD bytes counted for the range alone.
void ExpectRangeRestored(FlatStore& s, const std::vector<Key>& keys, const KvLayout& layout,
                         uint32_t first, uint32_t end, MediaType medium) {
  HostBlocks dst(layout, keys.size());
  std::memset(dst.bytes.data(), kUntouched, dst.bytes.size());
  std::vector<uint32_t> reported;
  std::atomic<bool> busy{false};
  RestoreOptions ro;
  ro.on_layer = [&](uint32_t l) {
    EXPECT_FALSE(busy.exchange(true)) << "layer callbacks overlap";
    reported.push_back(l);
    busy = false;
  };
  auto h = s.RestoreLayers(keys, layout, dst.buffers(), first, end, ro);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto r = (*h)->Wait();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hits, keys.size());
  EXPECT_EQ(r->corrupt, 0u);
  const uint64_t range_bytes = uint64_t{end - first} * layout.num_planes * layout.slice_bytes;
  EXPECT_EQ(medium == MediaType::kSsd ? r->bytes_from_ssd : r->bytes_from_dram,
            keys.size() * range_bytes);
  std::vector<uint32_t> want_layers;
  for (uint32_t l = first; l < end; ++l) want_layers.push_back(l);
  EXPECT_EQ(reported, want_layers);
  std::vector<uint8_t> block(layout.block_bytes());
  std::vector<uint8_t> untouched(layout.slice_bytes, kUntouched);
  for (size_t i = 0; i < keys.size(); ++i) {
    FillBlock(keys[i], block.data(), block.size());
    for (uint32_t l = 0; l < layout.num_layers; ++l) {
      for (uint32_t p = 0; p < layout.num_planes; ++p) {
        const uint8_t* got = SliceAddress(dst.buffers(), layout, i, l, p);
        const uint8_t* want =
            l >= first && l < end ? SliceOf(block, layout, l, p) : untouched.data();
        ASSERT_EQ(0, std::memcmp(got, want, layout.slice_bytes))
            << "block " << i << " layer " << l << " plane " << p
            << (l >= first && l < end ? ": wrong bytes" : ": outside the range, written");
      }
    }
  }
}

TEST(RestoreLayers, DeliversTheRangeOnlyFromEitherMedium) {
  TempDir dir;
  auto s = Open(dir.path());
  ASSERT_NE(s, nullptr);
  const KvLayout layout{6, 2, 4096};
  const auto ssd = MakeKeys(1, 0, 20), dram = MakeKeys(2, 0, 20);
  testing::PutFilled(*s, ssd, layout, MediaType::kSsd);
  testing::PutFilled(*s, dram, layout, MediaType::kDram);
  for (auto [first, end] : {std::pair<uint32_t, uint32_t>{0, 6}, {0, 1}, {2, 5}, {5, 6}}) {
    SCOPED_TRACE(::testing::Message() << "layers [" << first << ", " << end << ")");
    ExpectRangeRestored(*s, ssd, layout, first, end, MediaType::kSsd);
    ExpectRangeRestored(*s, dram, layout, first, end, MediaType::kDram);
  }
}

TEST(RestoreLayers, ALargeRangeGoesOutAsTwoReaderRestoresAndStaysInOrder) {
  TempDir dir;
  auto s = Open(dir.path());
  ASSERT_NE(s, nullptr);
  // 128 blocks x 26 layers x 2 planes of the range: over LayeredRestore::kSplitSlices, so its
  // first layer is read first and alone.
  const KvLayout layout{32, 2, 4096};
  const auto keys = MakeKeys(3, 0, 128);
  for (size_t at = 0; at < keys.size(); at += 32) {
    testing::PutFilled(*s, {keys.begin() + at, keys.begin() + at + 32}, layout, MediaType::kSsd);
  }
  ExpectRangeRestored(*s, keys, layout, 3, 29, MediaType::kSsd);
}

TEST(RestoreLayers, SlicesOfOtherLayersMayAliasTheRange) {
  // A ring of two layer buffers: layers l and l + 2 share one; restoring layers [2, 4) writes the
  // ring with layers 2 and 3, and layers 0 and 1, which point at the same memory, stay out.
  TempDir dir;
  auto s = Open(dir.path());
  ASSERT_NE(s, nullptr);
  const KvLayout layout{4, 2, 4096};
  const auto keys = MakeKeys(4, 0, 8);
  testing::PutFilled(*s, keys, layout, MediaType::kSsd);
  const uint64_t run = keys.size() * layout.num_planes * layout.slice_bytes;
  std::vector<uint8_t> ring(2 * run, kUntouched);
  std::vector<void*> ptrs;
  for (size_t j = 0; j < keys.size(); ++j) {
    for (uint32_t l = 0; l < layout.num_layers; ++l) {
      for (uint32_t p = 0; p < layout.num_planes; ++p) {
        ptrs.push_back(ring.data() + (l % 2) * run + (p * keys.size() + j) * layout.slice_bytes);
      }
    }
  }
  auto h = s->RestoreLayers(keys, layout, BlockBuffers{BufferKind::kSlicePointers, ptrs}, 2, 4);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto r = (*h)->Wait();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hits, keys.size());
  std::vector<uint8_t> block(layout.block_bytes());
  for (size_t j = 0; j < keys.size(); ++j) {
    FillBlock(keys[j], block.data(), block.size());
    for (uint32_t l = 2; l < 4; ++l) {
      for (uint32_t p = 0; p < layout.num_planes; ++p) {
        EXPECT_EQ(0, std::memcmp(ptrs[(j * layout.num_layers + l) * layout.num_planes + p],
                                 SliceOf(block, layout, l, p), layout.slice_bytes))
            << "block " << j << " layer " << l << " plane " << p;
      }
    }
  }
}

TEST(RestoreLayers, RefusesAnEmptyRangeOrOnePastTheLayout) {
  TempDir dir;
  auto s = Open(dir.path());
  ASSERT_NE(s, nullptr);
  const KvLayout layout{4, 2, 4096};
  const auto keys = MakeKeys(5, 0, 2);
  testing::PutFilled(*s, keys, layout, MediaType::kSsd);
  HostBlocks dst(layout, keys.size());
  for (auto [first, end] : {std::pair<uint32_t, uint32_t>{2, 2}, {3, 1}, {0, 5}, {4, 5}}) {
    EXPECT_EQ(s->RestoreLayers(keys, layout, dst.buffers(), first, end).status().code(),
              StatusCode::kInvalidArgument)
        << first << ", " << end;
  }
}

}  // namespace
}  // namespace flatcake
