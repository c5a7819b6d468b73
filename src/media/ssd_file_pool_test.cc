#include "media/ssd_file_pool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "media/metadata_faults.h"
#include "util/temp_dir.h"

namespace flatcake {
namespace {

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

TEST(SsdFilePool, AnotherProcessOpensTheFilesFromTheGeometry) {
  TempDir a, b;
  SsdFilePool::Options o = PoolOptions({a.path(), b.path()});
  o.durable = true;  // files start with a superblock: data_offset is past it
  auto pool = SsdFilePool::Create(o);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const SsdPoolGeometry& geo = (*pool)->geometry();
  EXPECT_EQ(geo.paths, (*pool)->paths());
  EXPECT_EQ(geo.num_files(), 8u);
  EXPECT_EQ(geo.file_bytes, 1 * kMiB);
  EXPECT_GT(geo.data_offset, 0u);
  EXPECT_EQ(geo.FileOf(3 * kMiB + 8192), 3u);
  EXPECT_EQ(geo.FileOffset(3 * kMiB + 8192), geo.data_offset + 8192);

  // A byte written through the other process's descriptor is the pool's byte.
  auto files = SsdFilePool::OpenFiles(geo);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->fds().size(), 8u);
  const int fd = files->fds()[5];
  EXPECT_EQ((fcntl(fd, F_GETFL) & O_DIRECT) != 0, geo.direct);
  alignas(4096) static uint8_t page[4096];
  std::memset(page, 0xA7, sizeof(page));
  ASSERT_EQ(pwrite(fd, page, sizeof(page), static_cast<off_t>(geo.data_offset)), 4096);
  uint8_t got = 0;
  const int own = ::open(geo.paths[5].c_str(), O_RDONLY);
  ASSERT_GE(own, 0);
  ASSERT_EQ(pread(own, &got, 1, static_cast<off_t>(geo.data_offset)), 1);
  close(own);
  EXPECT_EQ(got, 0xA7);

  SsdPoolGeometry missing = geo;
  missing.paths.push_back(a.path() + "/no-such-file");
  EXPECT_TRUE(SsdFilePool::OpenFiles(missing).status().IsNotFound());
}

// Pool files hold every tenant's KV: 0600 by default; 0660 (less the umask) with group access,
// for a daemon whose clients of other users in its group open them. The lock file is 0600.
TEST(SsdFilePool, FilesAreTheOwnersOnlyOrTheGroupsWithGroupAccess) {
  for (const mode_t want : {mode_t{0600}, mode_t{0660}}) {
    for (const mode_t mask : {mode_t{0007}, mode_t{0022}}) {
      TempDir dir;
      SsdFilePool::Options o = PoolOptions({dir.path()});
      o.file_mode = want;
      const mode_t old = ::umask(mask);
      auto pool = SsdFilePool::Create(o);
      ::umask(old);
      ASSERT_TRUE(pool.ok()) << pool.status().ToString();
      for (const std::string& p : (*pool)->paths()) {
        struct stat st {};
        ASSERT_EQ(stat(p.c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 0777, want & ~mask) << p;
      }
      struct stat lock {};
      ASSERT_EQ(stat((dir.path() + "/flatcake.lock").c_str(), &lock), 0);
      EXPECT_EQ(lock.st_mode & 0077, 0u);
    }
  }
}

// A pool created with looser modes (0644, as before, or by hand) is tightened when it opens.
TEST(SsdFilePool, LooserModesOfAnExistingPoolAreTightened) {
  TempDir dir;
  {
    auto pool = SsdFilePool::Create(PoolOptions({dir.path()}));
    ASSERT_TRUE(pool.ok());
    for (const std::string& p : (*pool)->paths()) ASSERT_EQ(::chmod(p.c_str(), 0644), 0);
  }
  ASSERT_EQ(::chmod((dir.path() + "/flatcake.lock").c_str(), 0666), 0);
  auto pool = SsdFilePool::Create(PoolOptions({dir.path()}));
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  for (const std::string& p : (*pool)->paths()) {
    struct stat st {};
    ASSERT_EQ(stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << p;
  }
  struct stat lock {};
  ASSERT_EQ(stat((dir.path() + "/flatcake.lock").c_str(), &lock), 0);
  EXPECT_EQ(lock.st_mode & 0777, 0600u);
}

// A superblock write that fails (an injected EIO) fails the creation, naming the file, and
// leaves no file behind for a later open to take for a damaged pool; the next creation works.
TEST(SsdFilePool, AFailedSuperblockWriteFailsCreationAndLeavesNothing) {
  TempDir dir;
  SsdFilePool::Options o = PoolOptions({dir.path()});
  o.durable = true;
  SetMetadataFaultHook([](MetadataOp op) { return op == MetadataOp::kSuperblockWrite ? EIO : 0; });
  auto failed = SsdFilePool::Create(o);
  SetMetadataFaultHook(nullptr);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("superblock"), std::string_view::npos)
      << failed.status().ToString();
  struct stat st {};
  EXPECT_NE(stat((dir.path() + "/flatcake-pool-0.dat").c_str(), &st), 0);
  auto pool = SsdFilePool::Create(o);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
}

TEST(SsdFilePool, SmallExtentsShareFilesAndNoneSpansTwo) {
  TempDir a;
  auto pool = SsdFilePool::Create(PoolOptions({a.path()}));  // 8 files of 1 MiB
  ASSERT_TRUE(pool.ok());
  SsdFilePool& p = **pool;
  // Three small sessions pack into the first file instead of taking one file each.
  EXPECT_EQ(*p.Allocate(64 * kKiB), 0u);
  EXPECT_EQ(*p.Allocate(64 * kKiB), 64 * kKiB);
  EXPECT_EQ(*p.Allocate(100), 128 * kKiB);  // rounded up to 4 KiB
  EXPECT_EQ(p.used(), 132 * kKiB);
  // 900 KiB does not fit in what is left of file 0, so it starts file 1.
  EXPECT_EQ(*p.Allocate(900 * kKiB), 1 * kMiB);
  // Continuing at a hint: the session's next segment lands right after its last one.
  EXPECT_EQ(*p.Allocate(100 * kKiB, 1 * kMiB + 900 * kKiB), 1 * kMiB + 900 * kKiB);
  // A hint whose range would cross into the next file is not honoured.
  const uint64_t off = *p.Allocate(200 * kKiB, 1 * kMiB + 1000 * kKiB);
  EXPECT_NE(off, 1 * kMiB + 1000 * kKiB);
  EXPECT_EQ(off / kMiB, (off + 200 * kKiB - 1) / kMiB) << "extent spans two files";
  EXPECT_TRUE(p.Allocate(2 * kMiB).status().IsInvalidArgument());
}

TEST(SsdFilePool, RefusesWhenFullAndReusesFreedSpace) {
  TempDir a;
  auto pool = SsdFilePool::Create(PoolOptions({a.path()}));
  ASSERT_TRUE(pool.ok());
  SsdFilePool& p = **pool;
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(*p.Allocate(1 * kMiB), uint64_t{i} * kMiB);
  Result<uint64_t> full = p.Allocate(4096);
  ASSERT_TRUE(full.status().IsNoSpace());
  EXPECT_NE(full.status().ToString().find("SSD pool"), std::string::npos)
      << full.status().ToString();
  p.Free(5 * kMiB, 1 * kMiB);
  p.Free(2 * kMiB, 1 * kMiB);
  EXPECT_EQ(p.used(), 6 * kMiB);
  EXPECT_EQ(*p.Allocate(512 * kKiB), 2 * kMiB);
  EXPECT_EQ(*p.Allocate(1 * kMiB), 5 * kMiB);
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

// A pool that could not be created (here: the file table full at the third file) leaves no
// file behind, so that the next open creates it instead of refusing a "damaged" pool.
TEST(SsdFilePool, FailedCreationLeavesNoPoolFiles) {
  TempDir dir;
  SsdFilePool::Options o = PoolOptions({dir.path()});
  o.durable = true;
  o.open_file = [](const char* path, int flags, mode_t mode) {
    if (std::string(path).find("flatcake-pool-2.dat") != std::string::npos) {
      errno = EMFILE;
      return -1;
    }
    return ::open(path, flags & ~O_DIRECT, mode);
  };
  auto failed = SsdFilePool::Create(o);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().ToString().find("Too many open files"), std::string::npos)
      << failed.status().ToString();
  for (uint32_t i = 0; i < 8; ++i) {
    struct stat st {};
    EXPECT_NE(stat(SsdFilePool::FilePath({dir.path()}, i).c_str(), &st), 0) << i;
  }
  o.open_file = nullptr;
  auto pool = SsdFilePool::Create(o);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_FALSE((*pool)->recovered());
}

// More pool files than the open-file limit allows is refused at once, before any file is made,
// even for an absurd capacity (a billion files: no loop over them).
TEST(SsdFilePool, RefusesMoreFilesThanTheOpenFileLimit) {
  TempDir dir;
  SsdFilePool::Options o = PoolOptions({dir.path()});
  o.total_bytes = uint64_t{1} << 60;
  o.file_bytes = 1 * kGiB;
  auto pool = SsdFilePool::Create(o);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), StatusCode::kNoSpace);
  EXPECT_NE(pool.status().ToString().find("open-file limit"), std::string::npos)
      << pool.status().ToString();
  struct stat st {};
  EXPECT_NE(stat(SsdFilePool::FilePath({dir.path()}, 0).c_str(), &st), 0);
}

}  // namespace
}  // namespace flatcake
