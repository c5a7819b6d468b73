#include "media/dram_arena.h"

#include <sys/mman.h>

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

DramArena::DramArena(uint8_t* base, uint64_t capacity, std::string page_mode)
    : base_(base),
      capacity_(capacity),
      page_mode_(std::move(page_mode)),
      alloc_(capacity, /*boundary=*/0, kAlignment) {}

DramArena::~DramArena() { munmap(base_, capacity_); }

Result<uint64_t> DramArena::Allocate(uint64_t bytes, uint64_t hint) {
  auto off = alloc_.Allocate(bytes, hint);
  if (!off.ok()) return off.status().WithContext("DRAM arena");
  return off;
}

}  // namespace flatcake
