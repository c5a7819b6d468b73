#include "media/dram_arena.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "util/align.h"
#include "util/file_mode.h"

namespace flatcake {
namespace {

constexpr uint64_t kHugePage = 2 * kMiB;

// Free reserved huge pages, in bytes (0 when none or unknown).
uint64_t FreeHugeTlbBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t free_pages = 0, page_kb = 0;
  while (in >> key) {
    uint64_t v = 0;
    in >> v;
    if (key == "HugePages_Free:") free_pages = v;
    if (key == "Hugepagesize:") page_kb = v;
    std::string rest;
    std::getline(in, rest);
  }
  return free_pages * page_kb * 1024;
}

bool ThpAvailable() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  return !line.empty() && line.find("[never]") == std::string::npos;
}

// Touches every page so the arena is resident before the first write (what MAP_POPULATE does for
// the other modes; THP needs the madvise first, so it is populated afterwards).
void Prefault(uint8_t* base, uint64_t bytes) {
#ifdef MADV_POPULATE_WRITE
  if (madvise(base, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  for (uint64_t off = 0; off < bytes; off += 4096) base[off] = 0;
}

}  // namespace

Result<std::unique_ptr<DramArena>> DramArena::Create(uint64_t bytes, HugePageMode mode) {
  if (bytes == 0) return Status::InvalidArgument("DRAM arena capacity is 0");
  const uint64_t cap = AlignUp(bytes, kHugePage);
  const int base_flags = MAP_PRIVATE | MAP_ANONYMOUS;

  if (mode == HugePageMode::kAuto || mode == HugePageMode::kHugeTlb) {
    if (FreeHugeTlbBytes() >= cap) {
      void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, base_flags | MAP_HUGETLB | MAP_POPULATE,
                     -1, 0);
      if (p != MAP_FAILED) {
        return std::unique_ptr<DramArena>(new DramArena(static_cast<uint8_t*>(p), cap, "hugetlb"));
      }
    }
    if (mode == HugePageMode::kHugeTlb) {
      return Status::Unsupported("MAP_HUGETLB arena of " + std::to_string(cap) +
                                 " bytes failed: not enough reserved huge pages "
                                 "(see /proc/sys/vm/nr_hugepages)");
    }
  }
  if ((mode == HugePageMode::kAuto && ThpAvailable()) || mode == HugePageMode::kTransparent) {
    void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, base_flags, -1, 0);
    if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap DRAM arena");
    if (madvise(p, cap, MADV_HUGEPAGE) == 0) {
      Prefault(static_cast<uint8_t*>(p), cap);
      return std::unique_ptr<DramArena>(new DramArena(static_cast<uint8_t*>(p), cap, "thp"));
    }
    munmap(p, cap);
    if (mode == HugePageMode::kTransparent) {
      return Status::Unsupported("madvise(MADV_HUGEPAGE) refused: transparent huge pages off");
    }
  }
  void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, base_flags | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap DRAM arena");
  return std::unique_ptr<DramArena>(new DramArena(static_cast<uint8_t*>(p), cap, "plain"));
}

Result<std::unique_ptr<DramArena>> DramArena::CreateFile(uint64_t bytes, const std::string& path,
                                                         bool keep) {
  if (bytes == 0) return Status::InvalidArgument("DRAM arena capacity is 0");
  const uint64_t cap = AlignUp(bytes, kHugePage);
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, kOwnerOnlyFileMode);
  if (fd < 0) return Status::FromErrno(errno, "open DRAM arena file '" + path + "'");
  auto fail = [fd](Status st) {
    close(fd);
    return st;
  };
  // Clients get the arena's descriptor from the daemon; nobody opens it by path.
  if (Status st = RestrictFileMode(fd, kOwnerOnlyFileMode, "DRAM arena file '" + path + "'");
      !st.ok()) {
    return fail(st);
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    return fail(Status::Busy("DRAM arena file '" + path + "' is in use by another FlatCake store"));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) return fail(Status::FromErrno(errno, "stat '" + path + "'"));
  const uint64_t had = static_cast<uint64_t>(st.st_size);
  if (keep && had != 0 && had != cap) {
    return fail(Status::InvalidArgument(
        "DRAM arena file '" + path + "' holds an arena of " + std::to_string(had) +
        " bytes; dram_bytes asks for " + std::to_string(cap) +
        "; to discard it and start empty, open with wipe=true (--wipe)"));
  }
  const bool recovered = keep && had == cap;
  if (!recovered && ftruncate(fd, 0) != 0) {
    return fail(Status::FromErrno(errno, "truncate '" + path + "'"));
  }
  if (ftruncate(fd, static_cast<off_t>(cap)) != 0) {
    return fail(Status::FromErrno(errno, "size DRAM arena file '" + path + "'"));
  }
  struct statfs fs {};
  const bool hugetlbfs = fstatfs(fd, &fs) == 0 && fs.f_type == 0x958458f6;  // HUGETLBFS_MAGIC
  void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) return fail(Status::FromErrno(errno, "mmap DRAM arena file '" + path + "'"));
  return std::unique_ptr<DramArena>(new DramArena(static_cast<uint8_t*>(p), cap,
                                                  hugetlbfs ? "hugetlbfs-file" : "shared-file", fd,
                                                  /*persistent=*/true, recovered));
}

Result<std::unique_ptr<DramArena>> DramArena::CreateShared(uint64_t bytes, HugePageMode mode) {
  if (bytes == 0) return Status::InvalidArgument("DRAM arena capacity is 0");
  const uint64_t cap = AlignUp(bytes, kHugePage);
  // A memfd of `cap` bytes, sealed at that size, mapped shared and populated; null on failure
  // (*err says why).
  auto make = [cap](bool hugetlb, Status* err) -> std::unique_ptr<DramArena> {
    const unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING | (hugetlb ? MFD_HUGETLB : 0u);
    const int fd = memfd_create("flatcake-dram-arena", flags);
    if (fd < 0) {
      *err = Status::FromErrno(errno, "memfd_create DRAM arena");
      return nullptr;
    }
    if (ftruncate(fd, static_cast<off_t>(cap)) != 0) {
      *err = Status::FromErrno(errno, "size the DRAM arena memfd");
      close(fd);
      return nullptr;
    }
    // Clients hold the descriptor too: none of them may shrink the arena (the daemon would fault
    // on its own mapping) or grow it. Kernels without seals on hugetlb memfds keep it unsealed.
    (void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      *err = Status::FromErrno(errno, "mmap the DRAM arena memfd");
      close(fd);
      return nullptr;
    }
    return std::unique_ptr<DramArena>(
        new DramArena(static_cast<uint8_t*>(p), cap, hugetlb ? "memfd-hugetlb" : "memfd", fd));
  };
  Status err;
  if (mode == HugePageMode::kAuto || mode == HugePageMode::kHugeTlb) {
    if (FreeHugeTlbBytes() >= cap) {
      if (auto arena = make(true, &err)) return arena;
    }
    if (mode == HugePageMode::kHugeTlb) {
      return Status::Unsupported("MFD_HUGETLB arena of " + std::to_string(cap) +
                                 " bytes failed: not enough reserved huge pages "
                                 "(see /proc/sys/vm/nr_hugepages)");
    }
  }
  auto arena = make(false, &err);
  if (!arena) return err;
  // Shared memory takes transparent huge pages only where shmem_enabled allows; best effort.
  if (mode != HugePageMode::kNone) (void)madvise(arena->base(), cap, MADV_HUGEPAGE);
  return arena;
}

DramArena::DramArena(uint8_t* base, uint64_t capacity, std::string page_mode, int fd,
                     bool persistent, bool recovered)
    : base_(base),
      capacity_(capacity),
      page_mode_(std::move(page_mode)),
      fd_(fd),
      persistent_(persistent),
      recovered_(recovered),
      alloc_(capacity, /*boundary=*/0, kAlignment) {}

DramArena::~DramArena() {
  munmap(base_, capacity_);
  // A file's flock is released (the file stays); a memfd's memory goes with its last holder.
  if (fd_ >= 0) close(fd_);
}

Result<SharedArenaMapping> SharedArenaMapping::Map(int fd, uint64_t bytes, bool populate) {
  if (bytes == 0) return Status::InvalidArgument("a shared DRAM arena of 0 bytes");
  struct stat st {};
  if (fstat(fd, &st) != 0) return Status::FromErrno(errno, "stat the shared DRAM arena");
  if (static_cast<uint64_t>(st.st_size) < bytes) {
    return Status::InvalidArgument("the shared DRAM arena holds " + std::to_string(st.st_size) +
                                   " bytes, not the " + std::to_string(bytes) + " expected");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0),
                 fd, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap the shared DRAM arena");
  return SharedArenaMapping(static_cast<uint8_t*>(p), bytes);
}

SharedArenaMapping::SharedArenaMapping(SharedArenaMapping&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

SharedArenaMapping& SharedArenaMapping::operator=(SharedArenaMapping&& other) noexcept {
  if (this != &other) {
    if (base_) munmap(base_, size_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedArenaMapping::~SharedArenaMapping() {
  if (base_) munmap(base_, size_);
}

Result<uint64_t> DramArena::Allocate(uint64_t bytes, uint64_t hint) {
  auto off = alloc_.Allocate(bytes, hint);
  if (!off.ok()) return off.status().WithContext("DRAM arena");
  return off;
}

}  // namespace flatcake
