#include "media/ssd_file_pool.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace flatcake {
namespace {

std::string PoolFilePath(const std::string& dir, uint32_t index) {
  return dir + "/flatcake-pool-" + std::to_string(index) + ".dat";
}

uint64_t ExistingFileBytes(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

}  // namespace

Result<std::unique_ptr<SsdFilePool>> SsdFilePool::Create(const Options& o) {
  if (o.dirs.empty()) return Status::InvalidArgument("no SSD directory given");
  if (o.file_bytes == 0 || o.file_bytes % kAlignment != 0) {
    return Status::InvalidArgument("SSD file size " + std::to_string(o.file_bytes) +
                                   " is not a positive multiple of 4096");
  }
  const uint64_t nfiles = o.total_bytes / o.file_bytes;
  if (nfiles == 0) {
    return Status::InvalidArgument("SSD capacity " + std::to_string(o.total_bytes) +
                                   " is smaller than one pool file (" +
                                   std::to_string(o.file_bytes) + " bytes)");
  }
  std::unique_ptr<SsdFilePool> pool(new SsdFilePool());
  pool->file_bytes_ = o.file_bytes;

  // Validate every directory and lock it before creating any file.
  std::vector<uint64_t> files_per_dir(o.dirs.size(), 0);
  for (uint64_t i = 0; i < nfiles; ++i) files_per_dir[i % o.dirs.size()]++;
  for (size_t d = 0; d < o.dirs.size(); ++d) {
    const std::string& dir = o.dirs[d];
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0) {
      return Status::NotFound("SSD directory '" + dir + "' does not exist");
    }
    if (!S_ISDIR(st.st_mode)) {
      return Status::InvalidArgument("SSD path '" + dir + "' is not a directory");
    }
    if (access(dir.c_str(), W_OK | X_OK) != 0) {
      return Status::InvalidArgument("SSD directory '" + dir + "' is not writable");
    }
    const std::string lock_path = dir + "/flatcake.lock";
    int lfd = open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (lfd < 0) return Status::FromErrno(errno, "SSD directory '" + dir + "' lock file");
    if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
      close(lfd);
      return Status::Busy("SSD directory '" + dir + "' is in use by another FlatCake store");
    }
    pool->lock_fds_.push_back(lfd);
    struct statvfs vfs {};
    if (statvfs(dir.c_str(), &vfs) != 0) return Status::FromErrno(errno, "statvfs " + dir);
    uint64_t reusable = 0;
    for (uint64_t i = d; i < nfiles; i += o.dirs.size()) {
      reusable +=
          std::min(ExistingFileBytes(PoolFilePath(dir, static_cast<uint32_t>(i))), o.file_bytes);
    }
    const uint64_t need = files_per_dir[d] * o.file_bytes;
    const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize + reusable;
    if (avail < need) {
      return Status::NoSpace("SSD directory '" + dir + "' has " + std::to_string(avail) +
                             " bytes available, needs " + std::to_string(need) + " for " +
                             std::to_string(files_per_dir[d]) + " pool files");
    }
  }

  auto open_file = o.open_file ? o.open_file : [](const char* path, int flags, mode_t mode) {
    return ::open(path, flags, mode);
  };
  pool->direct_ = o.direct_io != DirectIoMode::kOff;
  for (uint64_t i = 0; i < nfiles; ++i) {
    const std::string path = PoolFilePath(o.dirs[i % o.dirs.size()], static_cast<uint32_t>(i));
    const int base_flags = O_CREAT | O_RDWR | O_CLOEXEC;
    int fd = -1;
    if (pool->direct_) {
      fd = open_file(path.c_str(), base_flags | O_DIRECT, 0644);
      if (fd < 0 && errno == EINVAL && o.direct_io == DirectIoMode::kAuto) {
        pool->direct_ = false;
        pool->note_ = "O_DIRECT refused on '" + path + "'; using buffered I/O for the SSD pool";
        // Files opened so far keep O_DIRECT; clear it so the pool is uniform.
        for (int prev : pool->fds_) fcntl(prev, F_SETFL, fcntl(prev, F_GETFL) & ~O_DIRECT);
      } else if (fd < 0 && errno == EINVAL) {
        return Status::Unsupported("O_DIRECT refused on '" + path + "' (direct_io=on)");
      }
    }
    if (fd < 0) fd = open_file(path.c_str(), base_flags, 0644);
    if (fd < 0) return Status::FromErrno(errno, "open SSD pool file '" + path + "'");
    pool->fds_.push_back(fd);
    pool->paths_.push_back(path);
    if (ftruncate(fd, static_cast<off_t>(o.file_bytes)) != 0) {
      return Status::FromErrno(errno, "size SSD pool file '" + path + "'");
    }
    int rc = fallocate(fd, 0, 0, static_cast<off_t>(o.file_bytes));
    if (rc != 0 && errno != EOPNOTSUPP) {
      return Status::FromErrno(errno, "fallocate SSD pool file '" + path + "'");
    }
  }
  pool->alloc_ = std::make_unique<ExtentAllocator>(nfiles * o.file_bytes, o.file_bytes, kAlignment);
  return pool;
}

SsdFilePool::~SsdFilePool() {
  for (int fd : fds_) close(fd);
  for (const std::string& p : paths_) unlink(p.c_str());
  for (int fd : lock_fds_) close(fd);  // releases the flock
}

Result<uint64_t> SsdFilePool::Allocate(uint64_t bytes, uint64_t hint) {
  auto off = alloc_->Allocate(bytes, hint);
  if (!off.ok()) return off.status().WithContext("SSD pool");
  return off;
}

}  // namespace flatcake
