#include "util/aligned_buffer.h"

#include <sys/mman.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <string>

#include "util/align.h"

namespace flatcake {

AlignedBufferOptions AlignedBuffer::HugePagesWhenLarge(uint64_t bytes, uint64_t small_alignment) {
  AlignedBufferOptions o;
  if (bytes >= kHugePageBytes) {
    o.alignment = kHugePageBytes;
    o.backing = PageBacking::kTransparentHuge;
  } else {
    o.alignment = small_alignment;
  }
  return o;
}

Result<AlignedBuffer> AlignedBuffer::Allocate(uint64_t bytes, const AlignedBufferOptions& options) {
  const uint64_t align = options.alignment;
  if (align < sizeof(void*) || !std::has_single_bit(align)) {
    return Status::InvalidArgument("aligned buffer: alignment " + std::to_string(align) +
                                   " is not a power of two of at least " +
                                   std::to_string(sizeof(void*)));
  }
  if (options.backing != PageBacking::kDefault && align < 4096) {
    return Status::InvalidArgument("aligned buffer: page advice needs page-aligned memory");
  }
  const uint64_t rounded = bytes == 0 ? align : AlignUp(bytes, align);
  void* p = nullptr;
  if (::posix_memalign(&p, align, rounded) != 0) {
    return Status::NoSpace("cannot allocate " + std::to_string(bytes) + " bytes aligned to " +
                           std::to_string(align));
  }
  // Advice is best effort: without transparent huge pages the buffer simply keeps its pages.
  if (options.backing == PageBacking::kTransparentHuge) {
    (void)::madvise(p, rounded, MADV_HUGEPAGE);
  } else if (options.backing == PageBacking::kSmallPages) {
    (void)::madvise(p, rounded, MADV_NOHUGEPAGE);
  }
  if (options.prefault) std::memset(p, 0, bytes);
  return AlignedBuffer(static_cast<uint8_t*>(p), bytes);
}

void AdviseHugePages(void* p, uint64_t bytes) {
  const uint64_t at = reinterpret_cast<uintptr_t>(p);
  const uint64_t begin = AlignUp(at, AlignedBuffer::kHugePageBytes);
  const uint64_t end = (at + bytes) / AlignedBuffer::kHugePageBytes * AlignedBuffer::kHugePageBytes;
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace flatcake
