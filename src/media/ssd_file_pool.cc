#include "media/ssd_file_pool.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "media/durable_format.h"
#include "media/metadata_faults.h"
#include "util/aligned_buffer.h"
#include "util/file_mode.h"

namespace flatcake {
namespace {

constexpr std::string_view kFilePrefix = "flatcake-pool-";
constexpr std::string_view kFileSuffix = ".dat";

std::string PoolFilePath(const std::string& dir, uint32_t index) {
  return dir + "/" + SsdFilePool::FileName(index);
}

uint64_t ExistingFileBytes(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

// Descriptors a store needs besides its pool files: the directory locks, the journal and its
// rewrite, the I/O engine's rings and eventfds, a daemon's sockets; a generous allowance.
constexpr uint64_t kOtherFds = 64;

// Space the pool files already in `dir` hold, of those with index < nfiles that this directory
// holds (index % ndirs == d), each counted up to `physical_bytes`: what a reopen reuses. Reads the
// directory's entries, so its cost does not grow with nfiles.
uint64_t ReusableBytes(const std::string& dir, size_t d, size_t ndirs, uint64_t nfiles,
                       uint64_t physical_bytes) {
  DIR* dp = opendir(dir.c_str());
  if (dp == nullptr) return 0;
  uint64_t reusable = 0;
  while (const dirent* e = readdir(dp)) {
    const std::optional<uint32_t> i = SsdFilePool::ParseFileName(e->d_name);
    if (!i || *i >= nfiles || *i % ndirs != d) continue;
    reusable += std::min(ExistingFileBytes(dir + "/" + e->d_name), physical_bytes);
  }
  closedir(dp);
  return reusable;
}

}  // namespace

std::string SsdFilePool::FileName(uint32_t index) {
  return std::string(kFilePrefix) + std::to_string(index) + std::string(kFileSuffix);
}

std::string SsdFilePool::FilePath(const std::vector<std::string>& dirs, uint32_t index) {
  return PoolFilePath(dirs[index % dirs.size()], index);
}

std::optional<uint32_t> SsdFilePool::ParseFileName(std::string_view name) {
  if (!name.starts_with(kFilePrefix) || !name.ends_with(kFileSuffix)) return std::nullopt;
  name.remove_prefix(kFilePrefix.size());
  name.remove_suffix(kFileSuffix.size());
  if (name.empty() || name.size() > 10 || (name.size() > 1 && name[0] == '0')) return std::nullopt;
  uint64_t n = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (n > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(n);
}

Result<int> SsdFilePool::LockDirectory(const std::string& dir) {
  const std::string lock_path = dir + "/flatcake.lock";
  const int lfd = open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, kOwnerOnlyFileMode);
  if (lfd < 0) return Status::FromErrno(errno, "SSD directory '" + dir + "' lock file");
  if (Status st = RestrictFileMode(lfd, kOwnerOnlyFileMode, "lock file '" + lock_path + "'");
      !st.ok()) {
    close(lfd);
    return st;
  }
  if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
    close(lfd);
    return Status::Busy("SSD directory '" + dir + "' is in use by another FlatCake store or fsck");
  }
  return lfd;
}

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
  // Every pool file stays open: refuse, before touching anything, a pool the open-file limit
  // cannot hold (an absurd ssd_bytes lands here too, rather than in a loop over its files).
  struct rlimit fd_limit {};
  if (getrlimit(RLIMIT_NOFILE, &fd_limit) == 0 && fd_limit.rlim_cur != RLIM_INFINITY &&
      nfiles + o.dirs.size() + kOtherFds > fd_limit.rlim_cur) {
    return Status::NoSpace("the SSD pool needs " + std::to_string(nfiles) +
                           " pool files open at once (ssd_bytes / ssd_file_bytes) and about " +
                           std::to_string(o.dirs.size() + kOtherFds) +
                           " other descriptors, but the open-file limit (ulimit -n) is " +
                           std::to_string(fd_limit.rlim_cur) +
                           "; raise the limit, or ssd_file_bytes");
  }
  std::unique_ptr<SsdFilePool> pool(new SsdFilePool());
  SsdPoolGeometry& geo = pool->geometry_;
  geo.file_bytes = o.file_bytes;
  pool->durable_ = o.durable;
  geo.data_offset = o.durable ? durable::kSuperblockBytes : 0;
  const uint64_t physical_bytes = o.file_bytes + geo.data_offset;

  // Validate every directory and lock it before creating any file.
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
      return Status::InvalidArgument("SSD directory '" + dir + "' is not writable" +
                                     (errno == EROFS ? " (a read-only file system)" : ""));
    }
    FC_ASSIGN_OR_RETURN(const int lfd, LockDirectory(dir));
    pool->lock_fds_.push_back(lfd);
    struct statvfs vfs {};
    if (statvfs(dir.c_str(), &vfs) != 0) return Status::FromErrno(errno, "statvfs " + dir);
    const uint64_t files_here = nfiles / o.dirs.size() + (d < nfiles % o.dirs.size() ? 1 : 0);
    const uint64_t reusable = ReusableBytes(dir, d, o.dirs.size(), nfiles, physical_bytes);
    const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize + reusable;
    if (files_here > avail / physical_bytes) {
      const uint64_t need = files_here * physical_bytes;  // no overflow: below avail's range
      return Status::NoSpace(
          "SSD directory '" + dir + "' has " + std::to_string(avail) + " bytes available, needs " +
          (files_here > UINT64_MAX / physical_bytes ? "more than 2^64" : std::to_string(need)) +
          " for " + std::to_string(files_here) + " pool files");
    }
  }

  if (o.durable) {
    if (Status check = pool->CheckSuperblocks(o, nfiles); !check.ok()) {
      if (!o.nothing_published) return check;
      pool->recovered_ = false;
      pool->note_ = "an unfinished pool (" + std::string(check.message()) +
                    ", and nothing was ever published in it: its creation was cut short) was "
                    "created anew";
    }
  }

  // Files this open creates are removed again when it fails: a pool that could not be created
  // leaves nothing that a later open would take for a damaged pool.
  std::vector<std::string> created;
  Status st = pool->OpenFiles(o, nfiles, physical_bytes, &created);
  if (st.ok()) {
    pool->alloc_ =
        std::make_unique<ExtentAllocator>(nfiles * o.file_bytes, o.file_bytes, kAlignment);
    if (o.durable && !pool->recovered_) st = pool->WriteSuperblocks();
  }
  if (!st.ok()) {
    for (const std::string& path : created) unlink(path.c_str());
    return st;
  }
  return pool;
}

Status SsdFilePool::OpenFiles(const Options& o, uint64_t nfiles, uint64_t physical_bytes,
                              std::vector<std::string>* created) {
  auto open_file = o.open_file ? o.open_file : [](const char* path, int flags, mode_t mode) {
    return ::open(path, flags, mode);
  };
  SsdPoolGeometry& geo = geometry_;
  geo.direct = o.direct_io != DirectIoMode::kOff;
  for (uint64_t i = 0; i < nfiles; ++i) {
    const std::string path = FilePath(o.dirs, static_cast<uint32_t>(i));
    struct stat existing {};
    const bool is_new = stat(path.c_str(), &existing) != 0 && errno == ENOENT;
    const int base_flags = O_CREAT | O_RDWR | O_CLOEXEC;
    int fd = -1;
    if (geo.direct) {
      fd = open_file(path.c_str(), base_flags | O_DIRECT, o.file_mode);
      if (fd < 0 && errno == EINVAL && o.direct_io == DirectIoMode::kAuto) {
        geo.direct = false;
        note_ += std::string(note_.empty() ? "" : "; ") + "O_DIRECT refused on '" + path +
                 "'; using buffered I/O for the SSD pool";
        // Files opened so far keep O_DIRECT; clear it so the pool is uniform.
        for (int prev : fds_) fcntl(prev, F_SETFL, fcntl(prev, F_GETFL) & ~O_DIRECT);
      } else if (fd < 0 && errno == EINVAL) {
        return Status::Unsupported("O_DIRECT refused on '" + path + "' (direct_io=on)");
      }
    }
    if (fd < 0) fd = open_file(path.c_str(), base_flags, o.file_mode);
    if (fd < 0) return Status::FromErrno(errno, "open SSD pool file '" + path + "'");
    if (is_new) created->push_back(path);
    fds_.push_back(fd);
    FC_RETURN_IF_ERROR(RestrictFileMode(fd, o.file_mode, "SSD pool file '" + path + "'"));
    geo.paths.push_back(path);
    if (ftruncate(fd, static_cast<off_t>(physical_bytes)) != 0) {
      return Status::FromErrno(errno, "size SSD pool file '" + path + "'");
    }
    // A file already backed in full (a reopened pool: as many blocks as bytes, and no hole; the
    // blocks alone may count metadata) is not allocated again: on tmpfs that is a walk over every
    // page.
    struct stat st {};
    if (fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_blocks) * 512 >= physical_bytes &&
        lseek(fd, 0, SEEK_HOLE) >= static_cast<off_t>(physical_bytes)) {
      continue;
    }
    int rc = fallocate(fd, 0, 0, static_cast<off_t>(physical_bytes));
    if (rc != 0 && errno != EOPNOTSUPP) {
      return Status::FromErrno(errno, "fallocate SSD pool file '" + path + "'");
    }
  }
  return Status::OK();
}

Status SsdFilePool::CheckSuperblocks(const Options& o, uint64_t nfiles) {
  const std::string wipe_hint =
      "; to discard that pool and start empty, open with wipe=true (--wipe)";
  std::vector<std::string> paths;
  uint64_t present = 0;
  for (uint64_t i = 0; i < nfiles; ++i) {
    paths.push_back(FilePath(o.dirs, static_cast<uint32_t>(i)));
    struct stat st {};
    if (stat(paths.back().c_str(), &st) == 0) present++;
  }
  if (present == 0 || o.wipe) return Status::OK();  // a new pool (or one being wiped)
  uint64_t id = 0;
  for (uint64_t i = 0; i < nfiles; ++i) {
    const std::string& path = paths[i];
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return Status::InvalidArgument("SSD pool file '" + path + "' is missing while " +
                                     std::to_string(present) + " of the " + std::to_string(nfiles) +
                                     " files the options name exist" + wipe_hint);
    }
    std::vector<uint8_t> buf(durable::kSuperblockBytes);
    const ssize_t r = pread(fd, buf.data(), buf.size(), 0);
    close(fd);
    if (r != static_cast<ssize_t>(buf.size())) buf.assign(buf.size(), 0);
    auto sb = durable::DecodeSuperblock(buf);
    if (!sb.ok()) {
      return Status::InvalidArgument("SSD pool file '" + path +
                                     "': " + std::string(sb.status().message()) + wipe_hint);
    }
    std::string differs;
    if (sb->version != durable::kFormatVersion) {
      differs = "format version " + std::to_string(sb->version) + ", this FlatCake reads " +
                std::to_string(durable::kFormatVersion);
    } else if (sb->file_bytes != o.file_bytes) {
      differs = "ssd_file_bytes " + std::to_string(sb->file_bytes) + ", the options ask for " +
                std::to_string(o.file_bytes);
    } else if (sb->num_files != nfiles) {
      differs = std::to_string(sb->num_files) + " pool files (ssd_bytes " +
                std::to_string(sb->num_files * sb->file_bytes) + "), the options ask for " +
                std::to_string(nfiles) + " (ssd_bytes " + std::to_string(o.total_bytes) + ")";
    } else if (sb->file_index != i) {
      differs = "file index " + std::to_string(sb->file_index) + " where " + std::to_string(i) +
                " is expected (ssd_dirs listed in another order?)";
    } else if (i > 0 && sb->store_id != id) {
      differs = "another store's id (files of two pools mixed)";
    }
    if (!differs.empty()) {
      return Status::InvalidArgument("SSD pool file '" + path + "' holds a pool with " + differs +
                                     wipe_hint);
    }
    id = sb->store_id;
  }
  recovered_ = true;
  store_id_ = id;
  return Status::OK();
}

Status SsdFilePool::WriteSuperblocks() {
  uint64_t id = 0;
  if (getrandom(&id, sizeof(id), 0) != sizeof(id)) id = static_cast<uint64_t>(time(nullptr));
  store_id_ = id | 1;  // never 0
  FC_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Allocate(durable::kSuperblockBytes));
  for (uint32_t i = 0; i < fds_.size(); ++i) {
    durable::Superblock sb;
    sb.store_id = store_id_;
    sb.file_index = i;
    sb.num_files = num_files();
    sb.file_bytes = geometry_.file_bytes;
    const std::vector<uint8_t> bytes = durable::EncodeSuperblock(sb);
    std::memcpy(buf.data(), bytes.data(), bytes.size());
    if (const int err = MetadataFault(MetadataOp::kSuperblockWrite)) {
      return Status::FromErrno(err, "write the superblock of '" + geometry_.paths[i] + "'");
    }
    if (pwrite(fds_[i], buf.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
      return Status::FromErrno(errno, "write the superblock of '" + geometry_.paths[i] + "'");
    }
    if (fdatasync(fds_[i]) != 0)
      return Status::FromErrno(errno, "fdatasync '" + geometry_.paths[i] + "'");
  }
  return Status::OK();
}

Status SsdFilePool::SyncData() const {
  for (size_t i = 0; i < fds_.size(); ++i) {
    if (fdatasync(fds_[i]) != 0)
      return Status::FromErrno(errno, "fdatasync '" + geometry_.paths[i] + "'");
  }
  return Status::OK();
}

Result<SsdPoolFiles> SsdFilePool::OpenFiles(const SsdPoolGeometry& geometry) {
  SsdPoolFiles files;
  for (const std::string& path : geometry.paths) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (geometry.direct ? O_DIRECT : 0));
    if (fd < 0) return Status::FromErrno(errno, "open SSD pool file '" + path + "'");
    files.fds_.push_back(fd);
  }
  return files;
}

SsdPoolFiles& SsdPoolFiles::operator=(SsdPoolFiles&& other) noexcept {
  if (this != &other) {
    for (int fd : fds_) close(fd);
    fds_ = std::move(other.fds_);
    other.fds_.clear();
  }
  return *this;
}

SsdPoolFiles::~SsdPoolFiles() {
  for (int fd : fds_) close(fd);
}

SsdFilePool::~SsdFilePool() {
  for (int fd : fds_) close(fd);
  if (!durable_) {
    for (const std::string& p : geometry_.paths) unlink(p.c_str());
  }
  for (int fd : lock_fds_) close(fd);  // releases the flock
}

Result<uint64_t> SsdFilePool::Allocate(uint64_t bytes, uint64_t hint) {
  auto off = alloc_->Allocate(bytes, hint);
  if (!off.ok()) return off.status().WithContext("SSD pool");
  return off;
}

}  // namespace flatcake
