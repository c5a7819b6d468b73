// HugePageAllocator: a std::allocator replacement for the large, short-lived arrays of read
// planning (a million descriptors is ~40 MB). Blocks of 2 MiB and more are AlignedBuffers, 2 MiB
// aligned and advised as transparent huge pages, so first touch costs one fault per 2 MiB instead
// of one per 4 KiB; on virtual machines where a page fault is expensive that is the difference
// between a few milliseconds and hundreds. Smaller blocks come from malloc. resize() leaves
// trivially constructible elements uninitialised (callers overwrite them). Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "util/aligned_buffer.h"

namespace flatcake {

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT(google-explicit-constructor)

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    void* p = nullptr;
    if (bytes >= AlignedBuffer::kHugePageBytes) {
      Result<AlignedBuffer> mem = AlignedBuffer::Allocate(
          bytes,
          {.alignment = AlignedBuffer::kHugePageBytes, .backing = PageBacking::kTransparentHuge});
      if (!mem.ok()) throw std::bad_alloc();
      p = mem->release();
    } else {
      p = std::malloc(bytes == 0 ? 1 : bytes);
      if (p == nullptr) throw std::bad_alloc();
    }
    return static_cast<T*>(p);
  }
  // Both kinds of block are freed with std::free (AlignedBuffer::release's contract).
  void deallocate(T* p, size_t) { std::free(p); }

  // resize() default-initialises rather than zeroes: scratch arrays are overwritten anyway.
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using HugeVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace flatcake
