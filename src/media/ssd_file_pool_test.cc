#include "media/ssd_file_pool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "testing/test_util.h"

namespace flatcake {
namespace {

using testing::TempDir;

SsdFilePool::Options PoolOptions(std::vector<std::string> dirs) {
  SsdFilePool::Options o;
  o.dirs = std::move(dirs);
  o.total_bytes = 8 * kMiB;
  o.file_bytes = 1 * kMiB;
  return o;
}

TEST(SsdFilePool, PreallocatesFilesRoundRobinOverDirectories) {
  TempDir a, b;
  auto pool = SsdFilePool::Create(PoolOptions({a.path(), b.path()}));
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ((*pool)->num_files(), 8u);
  EXPECT_EQ((*pool)->capacity(), 8 * kMiB);
  for (uint32_t i = 0; i < 8; ++i) {
    const std::string& p = (*pool)->paths()[i];
    EXPECT_EQ(p.rfind(i % 2 ? b.path() : a.path(), 0), 0u) << p;
    struct stat st {};
    ASSERT_EQ(stat(p.c_str(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), 1 * kMiB);
    EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 1 * kMiB) << "fallocated";
  }
  EXPECT_TRUE((*pool)->direct());
}

TEST(SsdFilePool, AllocatesLowestFreeFileAndRefusesWhenFull) {
  TempDir a;
  auto pool = SsdFilePool::Create(PoolOptions({a.path()}));
  ASSERT_TRUE(pool.ok());
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(*(*pool)->AllocateFile(), i);
  EXPECT_TRUE((*pool)->AllocateFile().status().IsNoSpace());
  (*pool)->FreeFile(5);
  (*pool)->FreeFile(2);
  EXPECT_EQ(*(*pool)->AllocateFile(), 2u);
  EXPECT_EQ(*(*pool)->AllocateFile(), 5u);
}

TEST(SsdFilePool, FallsBackToBufferedIoWhenODirectIsRefused) {
  TempDir a;
  SsdFilePool::Options o = PoolOptions({a.path()});
  o.open_file = [](const char* path, int flags, mode_t mode) {
    if (flags & O_DIRECT) {
      errno = EINVAL;  // what tmpfs-like filesystems answer
      return -1;
    }
    return ::open(path, flags, mode);
  };
  auto pool = SsdFilePool::Create(o);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_FALSE((*pool)->direct());
  EXPECT_NE((*pool)->note().find("O_DIRECT refused"), std::string::npos);
  o.direct_io = DirectIoMode::kOn;
  TempDir b;
  o.dirs = {b.path()};
  auto strict = SsdFilePool::Create(o);
  EXPECT_EQ(strict.status().code(), StatusCode::kUnsupported);
}

TEST(SsdFilePool, RejectsBadGeometry) {
  TempDir a;
  SsdFilePool::Options o = PoolOptions({a.path()});
  o.file_bytes = 1000;
  EXPECT_TRUE(SsdFilePool::Create(o).status().IsInvalidArgument());
  o = PoolOptions({a.path()});
  o.total_bytes = 1000;
  EXPECT_TRUE(SsdFilePool::Create(o).status().IsInvalidArgument());
  EXPECT_TRUE(SsdFilePool::Create(PoolOptions({})).status().IsInvalidArgument());
}

}  // namespace
}  // namespace flatcake
