// DramArena: the DRAM medium. One anonymous mapping made once at start-up and pre-faulted, backed
// by reserved huge pages when the system has them, else transparent huge pages, else plain pages.
// Space is handed out as 4 KiB-aligned ranges (a scope's segments); freed ranges coalesce with
// their neighbours.
//
// Thread safety: Allocate/Free/used() are internally synchronised. base() is immutable.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "flatcake/options.h"
#include "flatcake/status.h"

namespace flatcake {

class DramArena {
 public:
  static constexpr uint64_t kAlignment = 4096;

  // Maps `bytes` (rounded up to 2 MiB). `mode` selects the page backing (see HugePageMode).
  static Result<std::unique_ptr<DramArena>> Create(uint64_t bytes, HugePageMode mode);
  ~DramArena();
  DramArena(const DramArena&) = delete;
  DramArena& operator=(const DramArena&) = delete;

  uint8_t* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  // "hugetlb", "thp" or "plain".
  const std::string& page_mode() const { return page_mode_; }

  // Returns the offset of a free range of `bytes` (rounded up to kAlignment), first fit.
  // NoSpace when no free range is large enough.
  Result<uint64_t> Allocate(uint64_t bytes);
  // REQUIRES: (offset, bytes) was returned by Allocate with the same `bytes` and not freed since.
  void Free(uint64_t offset, uint64_t bytes);

  uint64_t used() const;
  uint64_t largest_free() const;

 private:
  DramArena(uint8_t* base, uint64_t capacity, std::string page_mode);

  uint8_t* const base_;
  const uint64_t capacity_;
  const std::string page_mode_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length, non-adjacent (coalesced)
  uint64_t used_ = 0;
};

}  // namespace flatcake
