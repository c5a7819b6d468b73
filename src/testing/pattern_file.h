// Test helpers for the io/ tests: files of a deterministic byte pattern, distinct per file and
// position, and aligned buffers to read them into. Not thread-safe; each test owns its instances.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "util/aligned_buffer.h"

namespace flatcake::testing {

// An `align`-aligned buffer to read into; empty when memory is exhausted.
inline AlignedBuffer AllocAligned(size_t bytes, size_t align = 4096) {
  Result<AlignedBuffer> b = AlignedBuffer::Allocate(bytes, {.alignment = align});
  return b.ok() ? std::move(b).value() : AlignedBuffer();
}

// Byte i of file `file` in every test: distinct per position, so misplaced data shows.
inline uint8_t PatternByte(uint32_t file, uint64_t i) {
  uint64_t x = (i >> 3) * 0x9E3779B97F4A7C15ull + file * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x >> (8 * (i & 7)));
}

inline void FillPattern(uint8_t* p, uint32_t file, uint64_t offset, uint64_t len) {
  for (uint64_t i = 0; i < len; ++i) p[i] = PatternByte(file, offset + i);
}

// Creates `path` with `bytes` of the pattern of `file`, via plain writes. Returns false on error.
inline bool WritePatternFile(const std::string& path, uint32_t file, uint64_t bytes) {
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  std::string chunk(1 << 20, '\0');
  for (uint64_t off = 0; off < bytes; off += chunk.size()) {
    const uint64_t n = std::min<uint64_t>(chunk.size(), bytes - off);
    FillPattern(reinterpret_cast<uint8_t*>(chunk.data()), file, off, n);
    if (::pwrite(fd, chunk.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
      ::close(fd);
      return false;
    }
  }
  ::close(fd);
  return true;
}

}  // namespace flatcake::testing
