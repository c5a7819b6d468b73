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

#include "util/align.h"

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
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno(errno, "open DRAM arena file '" + path + "'");
  auto fail = [fd](Status st) {
    close(fd);
    return st;
  };
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
  return std::unique_ptr<DramArena>(new DramArena(
      static_cast<uint8_t*>(p), cap, hugetlbfs ? "hugetlbfs-file" : "shared-file", fd, recovered));
}

DramArena::DramArena(uint8_t* base, uint64_t capacity, std::string page_mode, int fd,
                     bool recovered)
    : base_(base),
      capacity_(capacity),
      page_mode_(std::move(page_mode)),
      fd_(fd),
      recovered_(recovered),
      alloc_(capacity, /*boundary=*/0, kAlignment) {}

DramArena::~DramArena() {
  munmap(base_, capacity_);
  if (fd_ >= 0) close(fd_);  // releases the flock; the file stays
}

Result<uint64_t> DramArena::Allocate(uint64_t bytes, uint64_t hint) {
  auto off = alloc_.Allocate(bytes, hint);
  if (!off.ok()) return off.status().WithContext("DRAM arena");
  return off;
}

}  // namespace flatcake
