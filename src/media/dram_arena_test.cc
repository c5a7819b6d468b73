#include "media/dram_arena.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

namespace flatcake {
namespace {

TEST(DramArena, MapsAndReportsItsPageMode) {
  auto a = DramArena::Create(8 * kMiB, HugePageMode::kAuto);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const std::string mode = (*a)->page_mode();
  EXPECT_TRUE(mode == "hugetlb" || mode == "thp" || mode == "plain") << mode;
  std::memset((*a)->base(), 0x5A, (*a)->capacity());  // every byte is writable
  auto plain = DramArena::Create(4 * kMiB, HugePageMode::kNone);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->page_mode(), "plain");
}

TEST(DramArena, SharedArenaIsTheSameMemoryInAnotherMapping) {
  auto r = DramArena::CreateShared(3 * kMiB, HugePageMode::kAuto);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  DramArena& a = **r;
  EXPECT_EQ(a.capacity(), 4 * kMiB);  // rounded up to 2 MiB
  EXPECT_TRUE(a.page_mode() == "memfd" || a.page_mode() == "memfd-hugetlb") << a.page_mode();
  EXPECT_FALSE(a.file_backed());
  ASSERT_GE(a.shared_fd(), 0);
  // What another process would do with the descriptor it was sent: a second, separate mapping.
  auto m = SharedArenaMapping::Map(a.shared_fd(), a.capacity());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_NE(m->base(), a.base());
  m->base()[a.capacity() - 1] = 0x3C;
  EXPECT_EQ(a.base()[a.capacity() - 1], 0x3C);
  a.base()[12345] = 0x5A;
  EXPECT_EQ(m->base()[12345], 0x5A);
  // The size is sealed: no holder of the descriptor can shrink the arena under its owner.
  if (a.page_mode() == "memfd") EXPECT_NE(ftruncate(a.shared_fd(), 0), 0);
  EXPECT_TRUE(
      SharedArenaMapping::Map(a.shared_fd(), a.capacity() + 4096).status().IsInvalidArgument());
  SharedArenaMapping moved = std::move(*m);
  EXPECT_EQ(moved.base()[12345], 0x5A);
  EXPECT_EQ(m->base(), nullptr);
}

TEST(DramArena, AnonymousArenaHasNoSharedDescriptor) {
  auto r = DramArena::Create(2 * kMiB, HugePageMode::kNone);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->shared_fd(), -1);
}

TEST(DramArena, AllocatesFirstFitAndCoalescesFreedRanges) {
  auto r = DramArena::Create(2 * kMiB, HugePageMode::kNone);
  ASSERT_TRUE(r.ok());
  DramArena& a = **r;
  uint64_t x = *a.Allocate(512 * kKiB);
  uint64_t y = *a.Allocate(512 * kKiB);
  uint64_t z = *a.Allocate(1 * kMiB);
  EXPECT_EQ(x, 0u);
  EXPECT_EQ(y, 512 * kKiB);
  EXPECT_EQ(z, 1 * kMiB);
  EXPECT_TRUE(a.Allocate(4096).status().IsNoSpace());
  a.Free(x, 512 * kKiB);
  a.Free(y, 512 * kKiB);
  EXPECT_EQ(a.largest_free(), 1 * kMiB);  // x and y merged
  EXPECT_EQ(*a.Allocate(1 * kMiB), 0u);
  a.Free(0, 1 * kMiB);
  a.Free(z, 1 * kMiB);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.largest_free(), 2 * kMiB);
  EXPECT_EQ(*a.Allocate(100), 0u);  // rounded up to 4 KiB
  EXPECT_EQ(a.used(), 4096u);
}

}  // namespace
}  // namespace flatcake
