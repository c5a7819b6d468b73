// DramArena: the DRAM medium. One anonymous mapping made once at start-up and pre-faulted, backed
// by reserved huge pages when the system has them, else transparent huge pages, else plain pages.
// Space is handed out as 4 KiB-aligned ranges (a scope's segments) by an ExtentAllocator.
//
// A file-backed arena (CreateFile: a file in /dev/shm or a hugetlbfs mount, mapped shared and
// locked with flock) outlives the process: a store that reopens it finds its bytes as it left
// them (recovered()), and its journal says which are blocks.
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
  ~DramArena();
  DramArena(const DramArena&) = delete;
  DramArena& operator=(const DramArena&) = delete;

  uint8_t* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  // "hugetlb", "thp" or "plain".
  const std::string& page_mode() const { return page_mode_; }
  bool file_backed() const { return fd_ >= 0; }
  bool recovered() const { return recovered_; }

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
            bool recovered = false);

  uint8_t* const base_;
  const uint64_t capacity_;
  const std::string page_mode_;
  const int fd_;  // file-backed arenas: the file, holding the flock
  const bool recovered_;
  ExtentAllocator alloc_;
};

}  // namespace flatcake
