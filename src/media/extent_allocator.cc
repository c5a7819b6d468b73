#include "media/extent_allocator.h"

#include <algorithm>
#include <string>

#include "util/align.h"

namespace flatcake {

ExtentAllocator::ExtentAllocator(uint64_t capacity, uint64_t boundary, uint64_t alignment)
    : capacity_(capacity), boundary_(boundary), alignment_(alignment) {
  // One free range per boundary span, so that no extent can straddle two of them.
  const uint64_t span = boundary_ == 0 ? capacity_ : boundary_;
  for (uint64_t off = 0; off < capacity_; off += span) {
    free_.emplace(off, std::min(span, capacity_ - off));
  }
}

void ExtentAllocator::Carve(std::map<uint64_t, uint64_t>::iterator it, uint64_t off, uint64_t len) {
  const uint64_t start = it->first;
  const uint64_t end = it->first + it->second;
  free_.erase(it);
  if (off > start) free_.emplace(start, off - start);
  if (off + len < end) free_.emplace(off + len, end - off - len);
  used_ += len;
}

Result<uint64_t> ExtentAllocator::Allocate(uint64_t bytes, uint64_t hint) {
  if (bytes == 0) return Status::InvalidArgument("zero-byte allocation");
  const uint64_t want = AlignUp(bytes, alignment_);
  if (boundary_ != 0 && want > boundary_) {
    return Status::InvalidArgument("allocation of " + std::to_string(want) + " bytes exceeds the " +
                                   std::to_string(boundary_) + "-byte file size");
  }
  MutexLock lock(mu_);
  if (hint != kNoHint) {
    // The free range that starts at or before the hint, if it covers [hint, hint + want).
    auto it = free_.upper_bound(hint);
    if (it != free_.begin()) {
      --it;
      if (hint + want <= it->first + it->second) {
        Carve(it, hint, want);
        return hint;
      }
    }
  }
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const uint64_t off = it->first;
    Carve(it, off, want);
    return off;
  }
  return Status::NoSpace("no free range of " + std::to_string(want) + " bytes (" +
                         std::to_string(capacity_ - used_) + " bytes free in all)");
}

Status ExtentAllocator::AllocateAt(uint64_t offset, uint64_t bytes) {
  const uint64_t want = AlignUp(bytes, alignment_);
  if (bytes == 0 || offset % alignment_ != 0 || offset + want > capacity_ ||
      (boundary_ != 0 && offset / boundary_ != (offset + want - 1) / boundary_)) {
    return Status::InvalidArgument("extent [" + std::to_string(offset) + ", +" +
                                   std::to_string(bytes) + ") is misaligned or out of range");
  }
  MutexLock lock(mu_);
  auto it = free_.upper_bound(offset);
  if (it != free_.begin()) {
    --it;
    if (offset + want <= it->first + it->second) {
      Carve(it, offset, want);
      return Status::OK();
    }
  }
  return Status::Busy("extent [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                      ") overlaps one already in use");
}

void ExtentAllocator::Free(uint64_t offset, uint64_t bytes) {
  const uint64_t len = AlignUp(bytes, alignment_);
  MutexLock lock(mu_);
  used_ -= len;
  auto it = free_.emplace(offset, len).first;
  auto mergeable = [&](uint64_t end) { return boundary_ == 0 || end % boundary_ != 0; };
  // Merge with the following range, then with the preceding one.
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first && mergeable(next->first)) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first && mergeable(it->first)) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

uint64_t ExtentAllocator::used() const {
  MutexLock lock(mu_);
  return used_;
}

uint64_t ExtentAllocator::largest_free() const {
  MutexLock lock(mu_);
  uint64_t best = 0;
  for (const auto& [off, len] : free_) best = std::max(best, len);
  return best;
}

size_t ExtentAllocator::free_ranges() const {
  MutexLock lock(mu_);
  return free_.size();
}

}  // namespace flatcake
