#include "io/coalesce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace flatcake {
namespace {

SliceRead Slice(uint32_t file, uint64_t offset, uint64_t len, uint32_t layer = 0) {
  return SliceRead{file, offset, len, nullptr, layer};
}

CoalesceOptions Opts(uint64_t max_gap = 64 << 10, uint64_t max_io = 4 << 20,
                     uint64_t alignment = 4096) {
  return CoalesceOptions{max_gap, max_io, alignment};
}

// Checks the invariants of any plan: every requested byte is covered by a read that lists its
// slice, reads are aligned and at most max_io.
void CheckPlan(const CoalescePlan& plan, const CoalesceOptions& o) {
  std::vector<uint64_t> covered(plan.slices.size(), 0);
  for (const auto& r : plan.reads) {
    EXPECT_EQ(r.offset % o.alignment, 0u);
    EXPECT_EQ(r.len % o.alignment, 0u);
    EXPECT_LE(r.len, o.max_io);
    ASSERT_GE(r.slice_count, 1u);
    for (uint32_t k = r.first_slice; k < r.first_slice + r.slice_count; ++k) {
      const auto& s = plan.slices[k];
      EXPECT_EQ(s.file, r.file);
      const uint64_t lo = std::max(s.offset, r.offset);
      const uint64_t hi = std::min(s.offset + s.len, r.offset + r.len);
      if (hi > lo) covered[k] += hi - lo;
    }
  }
  for (size_t k = 0; k < plan.slices.size(); ++k) {
    EXPECT_EQ(covered[k], plan.slices[k].len) << "slice " << k;
  }
  for (size_t k = 1; k < plan.slices.size(); ++k) {
    const auto& a = plan.slices[k - 1];
    const auto& b = plan.slices[k];
    EXPECT_TRUE(a.file < b.file || (a.file == b.file && a.offset <= b.offset));
  }
}

TEST(Coalesce, AdjacentSlicesMergeIntoOneRead) {
  std::vector<SliceRead> in;
  for (int i = 7; i >= 0; --i) in.push_back(Slice(0, i * 16384, 16384, i));
  auto plan = PlanReads(in, Opts());
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->reads.size(), 1u);
  EXPECT_EQ(plan->reads[0].offset, 0u);
  EXPECT_EQ(plan->reads[0].len, 8u * 16384);
  EXPECT_EQ(plan->reads[0].slice_count, 8u);
  EXPECT_EQ(plan->bytes_gap, 0u);
  EXPECT_EQ(plan->slices[0].layer, 0u);  // sorted back into offset order
  CheckPlan(*plan, Opts());
}

TEST(Coalesce, GapBridgedAtExactlyMaxGapNotOneMore) {
  const uint64_t gap = 64 << 10;
  {
    std::vector<SliceRead> in = {Slice(0, 0, 4096), Slice(0, 4096 + gap, 4096)};
    auto plan = PlanReads(in, Opts(gap));
    ASSERT_TRUE(plan.ok());
    ASSERT_EQ(plan->reads.size(), 1u);
    EXPECT_EQ(plan->bytes_gap, gap);
    EXPECT_EQ(plan->reads[0].len, 4096 + gap + 4096);
  }
  {
    // Alignment 1 so the one extra byte is not hidden by widening.
    std::vector<SliceRead> in = {Slice(0, 0, 4096), Slice(0, 4096 + gap + 1, 4096)};
    auto plan = PlanReads(in, Opts(gap, 4 << 20, 1));
    ASSERT_TRUE(plan.ok());
    ASSERT_EQ(plan->reads.size(), 2u);
    EXPECT_EQ(plan->bytes_gap, 0u);
    CheckPlan(*plan, Opts(gap, 4 << 20, 1));
  }
}

TEST(Coalesce, SplitsAtMaxIoBetweenSlices) {
  std::vector<SliceRead> in;
  for (int i = 0; i < 10; ++i) in.push_back(Slice(0, i * 65536ull, 65536));
  const auto o = Opts(0, 256 << 10);
  auto plan = PlanReads(in, o);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->reads.size(), 3u);  // 4 + 4 + 2 slices
  EXPECT_EQ(plan->reads[0].slice_count, 4u);
  EXPECT_EQ(plan->reads[1].first_slice, 4u);
  EXPECT_EQ(plan->reads[2].len, 2u * 65536);
  CheckPlan(*plan, o);
}

TEST(Coalesce, OversizedSliceIsCut) {
  std::vector<SliceRead> in = {Slice(0, 4096, (1 << 20) + 100), Slice(0, (1 << 20) + 8192, 4096)};
  const auto o = Opts(64 << 10, 256 << 10);
  auto plan = PlanReads(in, o);
  ASSERT_TRUE(plan.ok());
  // 1 MiB + 100 bytes from 4096: four full 256 KiB pieces, then a tail that absorbs slice 2.
  ASSERT_EQ(plan->reads.size(), 5u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(plan->reads[i].len, 256u << 10);
  EXPECT_EQ(plan->reads[4].slice_count, 2u);
  CheckPlan(*plan, o);
}

TEST(Coalesce, UnalignedSlicesWidenToAlignment) {
  std::vector<SliceRead> in = {Slice(0, 5000, 3000)};
  auto plan = PlanReads(in, Opts());
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->reads.size(), 1u);
  EXPECT_EQ(plan->reads[0].offset, 4096u);
  EXPECT_EQ(plan->reads[0].len, 4096u);  // [4096, 8192) holds [5000, 8000)
  EXPECT_EQ(plan->bytes_read, 4096u);
  EXPECT_EQ(plan->bytes_requested, 3000u);
}

TEST(Coalesce, FilesNeverMerge) {
  std::vector<SliceRead> in = {Slice(1, 4096, 4096), Slice(0, 0, 4096), Slice(1, 0, 4096),
                               Slice(0, 4096, 4096)};
  auto plan = PlanReads(in, Opts());
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->reads.size(), 2u);
  EXPECT_EQ(plan->reads[0].file, 0u);
  EXPECT_EQ(plan->reads[1].file, 1u);
  EXPECT_EQ(plan->reads[1].len, 8192u);
  CheckPlan(*plan, Opts());
}

TEST(Coalesce, ShuffledLayerRunsGiveOneReadPerRunChunk) {
  // Three sessions in three files; each: 8 layers x 64 slices of 16 KiB, layer-major.
  std::vector<SliceRead> in;
  for (uint32_t f = 0; f < 3; ++f) {
    for (uint32_t l = 0; l < 8; ++l) {
      for (uint32_t b = 0; b < 64; ++b) in.push_back(Slice(f, (l * 64ull + b) * 16384, 16384, l));
    }
  }
  std::mt19937_64 rng(1);
  std::shuffle(in.begin(), in.end(), rng);
  const auto o = Opts();
  auto plan = PlanReads(in, o);
  ASSERT_TRUE(plan.ok());
  // Each file is 8 MiB contiguous: two 4 MiB reads.
  EXPECT_EQ(plan->reads.size(), 6u);
  EXPECT_EQ(plan->bytes_read, plan->bytes_requested);
  CheckPlan(*plan, o);
}

TEST(Coalesce, SortIsStableAndHandlesHugeOffsets) {
  std::vector<SliceRead> in = {Slice(2, 1ull << 62, 10, 1), Slice(0, 5, 1, 2), Slice(0, 5, 1, 3),
                               Slice(0, 1, 1, 4)};
  auto order = SortSliceOrder(in);
  EXPECT_EQ(std::vector<uint32_t>(order.begin(), order.end()), (std::vector<uint32_t>{3, 1, 2, 0}));
  std::mt19937_64 rng(7);
  std::vector<SliceRead> many;
  for (int i = 0; i < 5000; ++i) many.push_back(Slice(rng() % 5, rng() % (1ull << 40), 1));
  auto o2 = SortSliceOrder(many);
  for (size_t i = 1; i < o2.size(); ++i) {
    const auto& a = many[o2[i - 1]];
    const auto& b = many[o2[i]];
    ASSERT_TRUE(a.file < b.file || (a.file == b.file && a.offset <= b.offset));
  }
}

TEST(Coalesce, RejectsBadInput) {
  std::vector<SliceRead> zero = {Slice(0, 0, 0)};
  EXPECT_TRUE(PlanReads(zero, Opts()).status().IsInvalidArgument());
  std::vector<SliceRead> ok = {Slice(0, 0, 1)};
  EXPECT_TRUE(PlanReads(ok, Opts(0, 4 << 20, 3000)).status().IsInvalidArgument());
  EXPECT_TRUE(PlanReads(ok, Opts(0, 6000, 4096)).status().IsInvalidArgument());
  std::vector<SliceRead> overflow = {Slice(0, ~0ull - 10, 100)};
  EXPECT_TRUE(PlanReads(overflow, Opts()).status().IsInvalidArgument());
  auto empty = PlanReads({}, Opts());
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->reads.empty());
}

TEST(Coalesce, RandomPlansCoverEveryByte) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<SliceRead> in;
    for (int i = 0; i < 500; ++i) {
      in.push_back(Slice(rng() % 3, rng() % (8 << 20), 1 + rng() % (300 << 10), rng() % 4));
    }
    const auto o = Opts(rng() % (128 << 10), 4096ull << (rng() % 8), 4096);
    auto plan = PlanReads(in, o);
    ASSERT_TRUE(plan.ok());
    CheckPlan(*plan, o);
  }
}

}  // namespace
}  // namespace flatcake
