// AlignedBuffer: the one owner of aligned host memory in FlatCake: O_DIRECT staging and
// bounce buffers (4 KiB), the restore window and the index arrays (2 MiB, huge-page backed), and
// the benchmarks' destinations. Allocation reports failure as a Status, never by throwing, so the
// data path can return it; callers that must throw (a constructor, a std allocator) do so
// themselves. Move-only; not thread-safe (the bytes are the owner's to share).
#pragma once

#include <cstdint>
#include <utility>

#include "flatcake/status.h"

namespace flatcake {

// How the pages behind a buffer are backed (advice to the kernel, best effort).
enum class PageBacking : uint8_t {
  kDefault,          // no advice: whatever the system's transparent huge page policy gives
  kTransparentHuge,  // madvise(MADV_HUGEPAGE): one TLB entry and one fault per 2 MiB
  kSmallPages,       // madvise(MADV_NOHUGEPAGE): 4 KiB pages even where THP is the default
};

struct AlignedBufferOptions {
  uint64_t alignment = 4096;                    // a power of two, at least sizeof(void*)
  PageBacking backing = PageBacking::kDefault;  // other than kDefault: alignment >= 4 KiB
  // Zero the requested bytes at allocation, so their pages are faulted in now and not on the
  // data path.
  bool prefault = false;
};

// Advises huge pages (MADV_HUGEPAGE) for the 2 MiB-aligned part of [p, p + bytes), memory not
// yet touched that the caller did not allocate as an AlignedBuffer (a std::string's storage, say),
// so that its first touch faults 2 MiB at a time. Best effort; nothing for under 2 MiB.
void AdviseHugePages(void* p, uint64_t bytes);

class AlignedBuffer {
 public:
  static constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

  // The options for a large array probed at random (a hash table, a sort's scratch): buffers of
  // 2 MiB or more are 2 MiB aligned and huge-page backed, since with 4 KiB pages nearly every
  // cache miss would also miss the TLB; smaller ones are `small_alignment` aligned.
  static AlignedBufferOptions HugePagesWhenLarge(uint64_t bytes, uint64_t small_alignment);

  // Allocates `bytes` rounded up to options.alignment (at least one alignment unit); size() is
  // `bytes`. The page advice covers the whole rounded allocation, the prefault `bytes`.
  // Errors: InvalidArgument for an alignment that is not a power of two (or below 4 KiB with page
  // advice), NoSpace when memory is exhausted.
  static Result<AlignedBuffer> Allocate(uint64_t bytes, const AlignedBufferOptions& options = {});

  AlignedBuffer() = default;  // empty: data() null, size() 0
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  uint8_t& operator[](uint64_t i) const { return data_[i]; }  // REQUIRES: i < size()
  bool empty() const { return data_ == nullptr; }

  // Gives up ownership and leaves the buffer empty; the caller frees the memory with std::free.
  // For owners that keep the pointer elsewhere (HugePageAllocator).
  uint8_t* release() {
    size_ = 0;
    return std::exchange(data_, nullptr);
  }

 private:
  AlignedBuffer(uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace flatcake
