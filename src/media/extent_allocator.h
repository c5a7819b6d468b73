// ExtentAllocator: hands out aligned byte ranges of a fixed address space [0, capacity). Both
// media use it: the DRAM arena over its mapping, the SSD pool over the concatenation of its files
// (with `boundary` = the file size, so no extent ever spans two files).
//
// Allocation is first fit, except that a caller may pass a hint (the end of its previous extent):
// when [hint, hint + bytes) is free it is taken, so a scope that grows batch by batch stays
// contiguous on its medium whenever its neighbour has not been claimed. Freed ranges coalesce with
// their neighbours, but never across a boundary.
//
// Thread safety: every method is internally synchronised.
#pragma once

#include <cstdint>
#include <map>

#include "flatcake/status.h"
#include "util/thread_annotations.h"

namespace flatcake {

class ExtentAllocator {
 public:
  static constexpr uint64_t kNoHint = UINT64_MAX;

  // `capacity` and `boundary` (0: none) must be multiples of `alignment`, a power of two.
  ExtentAllocator(uint64_t capacity, uint64_t boundary, uint64_t alignment);
  ExtentAllocator(const ExtentAllocator&) = delete;
  ExtentAllocator& operator=(const ExtentAllocator&) = delete;

  // Returns the offset of a free range of `bytes` (rounded up to the alignment). NoSpace when no
  // free range is large enough; InvalidArgument for 0 bytes or more than one boundary span.
  Result<uint64_t> Allocate(uint64_t bytes, uint64_t hint = kNoHint);
  // Takes exactly [offset, offset + bytes (rounded up)) (recovery re-claims the extents a pool's
  // journal names). InvalidArgument when it is misaligned, out of range or spans a boundary;
  // Busy when any of it is already taken.
  Status AllocateAt(uint64_t offset, uint64_t bytes);
  // REQUIRES: (offset, bytes) was returned by Allocate with the same `bytes` and not freed since.
  void Free(uint64_t offset, uint64_t bytes);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const;
  uint64_t largest_free() const;
  size_t free_ranges() const;

 private:
  // Takes [off, off + len) out of the free range at `it`. REQUIRES: range inside it.
  void Carve(std::map<uint64_t, uint64_t>::iterator it, uint64_t off, uint64_t len) REQUIRES(mu_);

  const uint64_t capacity_;
  const uint64_t boundary_;
  const uint64_t alignment_;
  mutable Mutex mu_;
  // offset -> length; neighbours merged unless at a boundary
  std::map<uint64_t, uint64_t> free_ GUARDED_BY(mu_);
  uint64_t used_ GUARDED_BY(mu_) = 0;
};

}  // namespace flatcake
