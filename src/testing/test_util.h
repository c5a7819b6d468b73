// Shared helpers for tests and benchmarks: temporary directories and deterministic block data.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "flatcake/key.h"
#include "flatcake/layout.h"

namespace flatcake::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  // `base` empty: $TMPDIR, else /tmp.
  explicit TempDir(const std::string& prefix = "flatcake-test", std::string base = "") {
    if (base.empty()) {
      const char* env = std::getenv("TMPDIR");
      base = env ? env : "/tmp";
    }
    std::string tmpl = base + "/" + prefix + "-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    char* p = mkdtemp(buf.data());
    path_ = p ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Deterministic content of byte `i` of block `key`: cheap, and different for every key and
// position, so misplaced or recycled bytes are detected.
inline void FillBlock(const Key& key, uint8_t* dst, uint64_t bytes) {
  uint64_t x = key.lo ^ (key.hi * 0x9E3779B97F4A7C15ull);
  uint64_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    __builtin_memcpy(dst + i, &x, 8);
  }
  for (; i < bytes; ++i) dst[i] = static_cast<uint8_t>(x >> (8 * (i % 8)));
}

// Block-contiguous host copy of `keys`, for Put and for comparison after Get.
struct HostBlocks {
  KvLayout layout;
  std::vector<uint8_t> bytes;
  std::vector<void*> ptrs;

  HostBlocks(const KvLayout& l, size_t n) : layout(l), bytes(l.block_bytes() * n), ptrs(n) {
    for (size_t i = 0; i < n; ++i) ptrs[i] = bytes.data() + i * l.block_bytes();
  }
  void Fill(const std::vector<Key>& keys) {
    for (size_t i = 0; i < keys.size(); ++i) {
      FillBlock(keys[i], static_cast<uint8_t*>(ptrs[i]), layout.block_bytes());
    }
  }
  BlockBuffers buffers() const { return BlockBuffers{BufferKind::kBlockContiguous, ptrs}; }
  uint8_t* block(size_t i) { return static_cast<uint8_t*>(ptrs[i]); }
};

inline std::vector<Key> MakeKeys(uint64_t ns, uint64_t first, uint64_t n) {
  std::vector<Key> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(KeyFromId(first + i, ns));
  return keys;
}

}  // namespace flatcake::testing
