#include "media/extent_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace flatcake {
namespace {

constexpr uint64_t kPage = 4096;

TEST(ExtentAllocator, FirstFitRoundsUpAndCoalescesFreedRanges) {
  ExtentAllocator a(16 * kPage, 0, kPage);
  EXPECT_EQ(*a.Allocate(1), 0u);  // rounded up to one page
  EXPECT_EQ(*a.Allocate(3 * kPage), kPage);
  EXPECT_EQ(*a.Allocate(4 * kPage), 4 * kPage);
  EXPECT_EQ(a.used(), 8 * kPage);
  a.Free(kPage, 3 * kPage);
  a.Free(0, 1);
  EXPECT_EQ(a.free_ranges(), 2u);  // [0, 4) merged; [8, 16) apart
  EXPECT_EQ(a.largest_free(), 8 * kPage);
  EXPECT_EQ(*a.Allocate(4 * kPage), 0u);
  EXPECT_TRUE(a.Allocate(9 * kPage).status().IsNoSpace());
  EXPECT_TRUE(a.Allocate(0).status().IsInvalidArgument());
}

TEST(ExtentAllocator, HintKeepsAGrowingOwnerContiguous) {
  ExtentAllocator a(64 * kPage, 0, kPage);
  const uint64_t first = *a.Allocate(4 * kPage);
  const uint64_t other = *a.Allocate(4 * kPage);  // someone else right behind it
  a.Free(other, 4 * kPage);
  // The owner continues at its own end even though first fit would give the same range anyway;
  // then claim the gap behind it so first fit would pick elsewhere.
  EXPECT_EQ(*a.Allocate(2 * kPage, first + 4 * kPage), first + 4 * kPage);
  const uint64_t hole = *a.Allocate(kPage);  // lowest free page: first + 6
  EXPECT_EQ(hole, first + 6 * kPage);
  a.Free(hole, kPage);
  // A hint inside a free range but not at its start is honoured too.
  EXPECT_EQ(*a.Allocate(kPage, 40 * kPage), 40 * kPage);
  EXPECT_EQ(*a.Allocate(kPage), first + 6 * kPage);
  // A hint whose range is taken falls back to first fit.
  EXPECT_EQ(*a.Allocate(kPage, first), first + 7 * kPage);
}

TEST(ExtentAllocator, NoExtentSpansABoundaryEvenAfterFrees) {
  ExtentAllocator a(8 * kPage, 4 * kPage, kPage);
  EXPECT_TRUE(a.Allocate(5 * kPage).status().IsInvalidArgument());
  const uint64_t x = *a.Allocate(2 * kPage);  // [0, 2)
  const uint64_t y = *a.Allocate(4 * kPage);  // does not fit in [2, 4): second span
  EXPECT_EQ(x, 0u);
  EXPECT_EQ(y, 4 * kPage);
  EXPECT_EQ(*a.Allocate(2 * kPage, 2 * kPage), 2 * kPage);
  a.Free(2 * kPage, 2 * kPage);
  a.Free(y, 4 * kPage);
  // [2, 4) and [4, 8) touch but belong to different spans: they stay two ranges.
  EXPECT_EQ(a.free_ranges(), 2u);
  EXPECT_EQ(a.largest_free(), 4 * kPage);
  EXPECT_EQ(*a.Allocate(3 * kPage, 2 * kPage), 4 * kPage);  // hint would cross: first fit
}

TEST(ExtentAllocator, RandomChurnNeverOverlapsAndReturnsEverything) {
  const uint64_t cap = 256 * kPage;
  ExtentAllocator a(cap, 32 * kPage, kPage);
  std::mt19937_64 rng(7);
  std::vector<std::pair<uint64_t, uint64_t>> live;
  std::vector<int> owner(cap / kPage, -1);
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const uint64_t len = (1 + rng() % 8) * kPage;
      const uint64_t hint =
          live.empty() ? ExtentAllocator::kNoHint : live.back().first + live.back().second;
      auto off = a.Allocate(len, hint);
      if (!off.ok()) {
        ASSERT_TRUE(off.status().IsNoSpace());
        continue;
      }
      ASSERT_EQ(*off % kPage, 0u);
      ASSERT_LE(*off + len, cap);
      ASSERT_EQ(*off / (32 * kPage), (*off + len - 1) / (32 * kPage)) << "spans a boundary";
      for (uint64_t p = *off / kPage; p < (*off + len) / kPage; ++p) {
        ASSERT_EQ(owner[p], -1) << "page " << p << " handed out twice";
        owner[p] = step;
      }
      live.emplace_back(*off, len);
    } else {
      const size_t i = rng() % live.size();
      const auto [off, len] = live[i];
      for (uint64_t p = off / kPage; p < (off + len) / kPage; ++p) owner[p] = -1;
      a.Free(off, len);
      live.erase(live.begin() + static_cast<long>(i));
    }
    uint64_t in_use = 0;
    for (const auto& e : live) in_use += e.second;
    ASSERT_EQ(a.used(), in_use);
  }
  for (const auto& [off, len] : live) a.Free(off, len);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.free_ranges(), 8u);  // one per boundary span, all whole again
  EXPECT_EQ(a.largest_free(), 32 * kPage);
}

}  // namespace
}  // namespace flatcake
