// DramArena: the DRAM medium. One anonymous mapping made once at start-up and pre-faulted, backed
// by reserved huge pages when the system has them, else transparent huge pages, else plain pages.
// Space is handed out as 4 KiB-aligned ranges (a scope's segments) by an ExtentAllocator.
//
// A file-backed arena (CreateFile: a file in /dev/shm or a hugetlbfs mount, mapped shared and
// locked with flock) outlives the process: a store that reopens it finds its bytes as it left
// them (recovered()), and its journal says which are blocks.
//
// A shared arena (CreateShared: a memfd, on reserved huge pages when there are enough) lives as
// long as its descriptor: the node daemon passes shared_fd() to its clients, which map the same
// bytes with SharedArenaMapping. Its size is sealed, so no client can shrink it under the daemon.
// A file-backed arena is shared the same way (shared_fd() is its file).
//
// Thread safety: Allocate/Free/used() are internally synchronised. base() is immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "flatcake/options.h"
#include "flatcake/status.h"
#include "media/extent_allocator.h"

namespace flatcake {

class DramArena {
 public:
  static constexpr uint64_t kAlignment = 4096;

  // Maps `bytes` (rounded up to 2 MiB). `mode` selects the page backing (see HugePageMode).
  static Result<std::unique_ptr<DramArena>> Create(uint64_t bytes, HugePageMode mode);
  // The arena in the file at `path` (created when absent), `bytes` rounded up to 2 MiB. With
  // `keep` an existing file of the same size keeps its contents (recovered() is then true); one
  // of another size is refused, naming both (InvalidArgument); without `keep` the file starts
  // zeroed. Busy when another store holds the file.
  static Result<std::unique_ptr<DramArena>> CreateFile(uint64_t bytes, const std::string& path,
                                                       bool keep);
  // An arena of `bytes` (rounded up to 2 MiB) on a memfd that other processes can map. `mode`:
  // kAuto and kHugeTlb take reserved huge pages (MFD_HUGETLB) when enough are free, kHugeTlb
  // fails (Unsupported) otherwise; every other case is a plain memfd, advised for transparent
  // huge pages unless `mode` is kNone. The memory starts zeroed and is populated before this
  // returns. Page mode "memfd-hugetlb" or "memfd".
  static Result<std::unique_ptr<DramArena>> CreateShared(uint64_t bytes, HugePageMode mode);
  ~DramArena();
  DramArena(const DramArena&) = delete;
  DramArena& operator=(const DramArena&) = delete;

  uint8_t* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  // "hugetlb", "thp" or "plain".
  const std::string& page_mode() const { return page_mode_; }
  // The arena outlives the process (CreateFile).
  bool file_backed() const { return persistent_; }
  bool recovered() const { return recovered_; }
  // The descriptor another process maps the arena through (its capacity() bytes from offset 0):
  // the memfd of a shared arena, the file of a file-backed one; -1 for an anonymous arena. Owned
  // by the arena: a receiver dups it (sending it over a socket does).
  int shared_fd() const { return fd_; }

  // Returns the offset of a free range of `bytes` (rounded up to kAlignment): at `hint` when that
  // range is free, else first fit. NoSpace when no free range is large enough.
  Result<uint64_t> Allocate(uint64_t bytes, uint64_t hint = ExtentAllocator::kNoHint);
  // REQUIRES: (offset, bytes) was returned by Allocate with the same `bytes` and not freed since.
  void Free(uint64_t offset, uint64_t bytes) { alloc_.Free(offset, bytes); }
  // Recovery: takes exactly this range (ExtentAllocator::AllocateAt).
  Status AllocateAt(uint64_t offset, uint64_t bytes) { return alloc_.AllocateAt(offset, bytes); }

  uint64_t used() const { return alloc_.used(); }
  uint64_t largest_free() const { return alloc_.largest_free(); }

 private:
  DramArena(uint8_t* base, uint64_t capacity, std::string page_mode, int fd = -1,
            bool persistent = false, bool recovered = false);

  uint8_t* const base_;
  const uint64_t capacity_;
  const std::string page_mode_;
  const int fd_;  // shared arenas: the memfd; file-backed ones: the file, holding the flock
  const bool persistent_;
  const bool recovered_;
  ExtentAllocator alloc_;
};

// Another process's view of a shared or file-backed arena: `bytes` mapped read-write and shared
// from the descriptor it was handed (DramArena::shared_fd()). Owns the mapping, not the
// descriptor. Movable; thread-compatible (the bytes are the arena's, synchronised by its owner's
// protocol: a client writes only extents it reserved and reads only extents it pinned).
class SharedArenaMapping {
 public:
  // Maps `bytes` of `fd` from offset 0. InvalidArgument when the object behind fd is smaller;
  // `populate` maps every page before returning (MAP_POPULATE) rather than on first touch.
  static Result<SharedArenaMapping> Map(int fd, uint64_t bytes, bool populate = true);
  SharedArenaMapping() = default;
  SharedArenaMapping(SharedArenaMapping&& other) noexcept;
  SharedArenaMapping& operator=(SharedArenaMapping&& other) noexcept;
  ~SharedArenaMapping();

  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  SharedArenaMapping(uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace flatcake
