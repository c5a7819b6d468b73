#include "util/aligned_buffer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

namespace flatcake {
namespace {

bool AlignedTo(const void* p, uint64_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

TEST(AlignedBufferTest, AllocatesAlignedMemoryOfTheRequestedSize) {
  for (uint64_t align : {uint64_t{64}, uint64_t{4096}, AlignedBuffer::kHugePageBytes}) {
    Result<AlignedBuffer> b = AlignedBuffer::Allocate(10000, {.alignment = align});
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_TRUE(AlignedTo(b->data(), align));
    EXPECT_EQ(b->size(), 10000u);
    b->data()[9999] = 1;  // writable to the last byte
  }
}

TEST(AlignedBufferTest, PrefaultZeroesTheBytes) {
  Result<AlignedBuffer> b = AlignedBuffer::Allocate(
      3 << 20, {.alignment = 4096, .backing = PageBacking::kTransparentHuge, .prefault = true});
  ASSERT_TRUE(b.ok());
  uint64_t nonzero = 0;
  for (uint64_t i = 0; i < b->size(); ++i) nonzero += b->data()[i] != 0;
  EXPECT_EQ(nonzero, 0u);
}

TEST(AlignedBufferTest, ZeroBytesStillGivesAPointer) {
  Result<AlignedBuffer> b = AlignedBuffer::Allocate(0);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(b->data(), nullptr);
  EXPECT_EQ(b->size(), 0u);
}

TEST(AlignedBufferTest, RejectsBadAlignmentsWithAStatus) {
  EXPECT_EQ(AlignedBuffer::Allocate(100, {.alignment = 3000}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(AlignedBuffer::Allocate(100, {.alignment = 64, .backing = PageBacking::kSmallPages})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(AlignedBufferTest, ReportsExhaustionAsNoSpace) {
  Result<AlignedBuffer> b = AlignedBuffer::Allocate(uint64_t{1} << 62);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kNoSpace);
}

TEST(AlignedBufferTest, MovesOwnership) {
  AlignedBuffer a = std::move(AlignedBuffer::Allocate(4096)).value();
  uint8_t* p = a.data();
  AlignedBuffer b(std::move(a));
  // The moved-from state is part of the contract: empty, so its destructor frees nothing.
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.data(), p);
  AlignedBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), 4096u);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move)
}

TEST(AlignedBufferTest, HugePagesOnlyForLargeArrays) {
  AlignedBufferOptions small = AlignedBuffer::HugePagesWhenLarge(4096, 64);
  EXPECT_EQ(small.alignment, 64u);
  EXPECT_EQ(small.backing, PageBacking::kDefault);
  AlignedBufferOptions large = AlignedBuffer::HugePagesWhenLarge(AlignedBuffer::kHugePageBytes, 64);
  EXPECT_EQ(large.alignment, AlignedBuffer::kHugePageBytes);
  EXPECT_EQ(large.backing, PageBacking::kTransparentHuge);
}

// The VmFlags of the mapping that starts at `start` in /proc/self/smaps ("" when none does).
std::string VmFlagsOfMappingAt(uintptr_t start) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  while (std::getline(smaps, line)) {
    uintptr_t from = 0, to = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> from >> dash >> to && dash == '-') {
      in = from == start;
    } else if (in && line.rfind("VmFlags:", 0) == 0) {
      return line + " ";
    }
  }
  return "";
}

TEST(AlignedBufferTest, AdviseHugePagesMarksOnlyTheAlignedPart) {
  const uint64_t huge = AlignedBuffer::kHugePageBytes;
  const size_t len = 4 * huge;
  void* map = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  const uintptr_t base = reinterpret_cast<uintptr_t>(map);
  const uintptr_t aligned = (base + huge - 1) / huge * huge;  // a 2 MiB boundary inside
  auto* p = reinterpret_cast<uint8_t*>(aligned);
  if (::madvise(p, huge, MADV_NOHUGEPAGE) != 0) {
    ::munmap(map, len);
    GTEST_SKIP() << "this kernel has no transparent huge pages";
  }
  // Under 2 MiB: no advice, and the mapping keeps the flags set above.
  AdviseHugePages(p + 4096, huge - 8192);
  ASSERT_NE(VmFlagsOfMappingAt(aligned).find(" nh "), std::string::npos);
  // From a page before the boundary to a page past the next one: [aligned, aligned + 2 MiB) only.
  AdviseHugePages(p - 4096, huge + 8192);
  EXPECT_NE(VmFlagsOfMappingAt(aligned).find(" hg "), std::string::npos);
  const std::string after = VmFlagsOfMappingAt(aligned + huge);
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.find(" hg "), std::string::npos);
  ::munmap(map, len);
}

}  // namespace
}  // namespace flatcake
