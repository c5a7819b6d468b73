#include "store/segment_layout.h"

#include <gtest/gtest.h>

#include <set>

namespace flatcake {
namespace {

constexpr KvLayout kMha{4, 2, 16384};  // runs of whole pages: no padding
constexpr KvLayout kOdd{3, 2, 1000};   // runs padded to 4 KiB

// The layout is usable in constant expressions (a pure core).
static_assert(SegmentLayout(kMha, 8).PlaneStride() == 8 * 16384);
static_assert(SegmentLayout(kMha, 8).Bytes() == 4 * 2 * 8 * 16384);
static_assert(SegmentLayout::FromLayerStride(kMha, 2 * 8 * 16384).SliceOffset(1, 1, 0) ==
              SegmentLayout(kMha, 8).RunOffset(1, 1));

TEST(SegmentLayout, UnpaddedRunsTileTheSegmentLayerMajor) {
  const SegmentLayout seg(kMha, 8);
  const uint64_t s = kMha.slice_bytes;
  EXPECT_EQ(seg.num_blocks(), 8u);
  EXPECT_EQ(seg.Runs(), 8u);
  EXPECT_EQ(seg.PlaneStride(), 8 * s);
  EXPECT_EQ(seg.LayerStride(), 2 * 8 * s);
  EXPECT_EQ(seg.Bytes(), 4 * 2 * 8 * s);
  EXPECT_EQ(seg.RunPayload(), 8 * s);
  // Without padding the segment is the blocks' bytes exactly: [layer][plane][block] in slices.
  EXPECT_EQ(seg.Bytes(), 8 * 4 * 2 * s);
  for (uint32_t l = 0; l < 4; ++l) {
    for (uint32_t p = 0; p < 2; ++p) {
      for (uint64_t b = 0; b < 8; ++b) {
        EXPECT_EQ(seg.SliceOffset(l, p, b), ((l * 2 + p) * 8 + b) * s);
      }
    }
  }
}

TEST(SegmentLayout, RunsArePaddedTo4KiB) {
  const SegmentLayout seg(kOdd, 5);  // 5000 payload bytes per run -> 8192
  EXPECT_EQ(seg.RunPayload(), 5000u);
  EXPECT_EQ(seg.PlaneStride(), 8192u);
  EXPECT_EQ(seg.LayerStride(), 2 * 8192u);
  EXPECT_EQ(seg.Bytes(), 3 * 2 * 8192u);
  EXPECT_EQ(seg.BlockOffset(3), 3000u);
  EXPECT_EQ(seg.RunOffset(2, 1), (2 * 2 + 1) * 8192u);
  EXPECT_EQ(seg.SliceOffset(2, 1, 4), (2 * 2 + 1) * 8192u + 4000);
  for (uint32_t l = 0; l < 3; ++l) {
    for (uint32_t p = 0; p < 2; ++p) EXPECT_EQ(seg.RunOffset(l, p) % 4096, 0u);
  }
}

TEST(SegmentLayout, SlicesNeverOverlapAndStayInsideTheSegment) {
  for (const uint64_t n : {1u, 3u, 7u, 64u}) {
    const SegmentLayout seg(kOdd, n);
    std::set<uint64_t> starts;
    for (uint32_t l = 0; l < kOdd.num_layers; ++l) {
      for (uint32_t p = 0; p < kOdd.num_planes; ++p) {
        for (uint64_t b = 0; b < n; ++b) {
          const uint64_t off = seg.SliceOffset(l, p, b);
          EXPECT_LE(off + kOdd.slice_bytes, seg.Bytes());
          // Within its run, before the run's padding.
          EXPECT_LE(off - seg.RunOffset(l, p) + kOdd.slice_bytes, seg.RunPayload());
          EXPECT_TRUE(starts.insert(off).second);
        }
      }
    }
  }
}

TEST(SegmentLayout, AnIndexEntrysLayerStrideGivesTheSameSlices) {
  // The write path stores a block's (0, 0) slice offset and the layer stride; a reader that knows
  // only those finds every slice where the writer put it.
  for (const uint64_t n : {1u, 5u, 33u}) {
    const SegmentLayout written(kOdd, n);
    const SegmentLayout read = SegmentLayout::FromLayerStride(kOdd, written.LayerStride());
    EXPECT_EQ(read.num_blocks(), 0u);
    EXPECT_EQ(read.PlaneStride(), written.PlaneStride());
    EXPECT_EQ(read.LayerStride(), written.LayerStride());
    EXPECT_EQ(read.Bytes(), written.Bytes());
    for (uint64_t b = 0; b < n; ++b) {
      for (uint32_t l = 0; l < kOdd.num_layers; ++l) {
        for (uint32_t p = 0; p < kOdd.num_planes; ++p) {
          EXPECT_EQ(written.BlockOffset(b) + read.RunOffset(l, p), written.SliceOffset(l, p, b));
        }
      }
    }
  }
}

TEST(SegmentLayout, BlocksFittingIsTheLargestSegmentThatFits) {
  for (const uint64_t bytes : {uint64_t{4096} * 6, uint64_t{1} << 20, uint64_t{4} << 20}) {
    const uint64_t n = SegmentLayout::BlocksFitting(kOdd, bytes);
    ASSERT_GT(n, 0u);
    EXPECT_LE(SegmentLayout(kOdd, n).Bytes(), bytes);
    EXPECT_GT(SegmentLayout(kOdd, n + 1).Bytes(), bytes);
  }
  EXPECT_EQ(SegmentLayout::BlocksFitting(kMha, 4 * 2 * 16384 - 1), 0u);
  EXPECT_EQ(SegmentLayout::BlocksFitting(kMha, 4 * 2 * 16384), 1u);
}

}  // namespace
}  // namespace flatcake
