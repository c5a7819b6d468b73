// Block keys: 128-bit digests that name one KV block (one page of tokens, one TP rank, all layers).
//
// Engines name pages with strings (SGLang: 64-hex chained SHA-256 page hashes, suffixed per rank);
// KeyFromString folds such a string into 128 bits with XXH3-128. Callers that already hold a
// 128-bit digest build a Key directly. Keys are plain values; any bit pattern is a valid key.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace flatcake {

struct Key {
  uint64_t hi = 0;
  uint64_t lo = 0;

  friend constexpr bool operator==(const Key& a, const Key& b) = default;
};

// XXH3-128 of `text` (deterministic across processes and machines).
Key KeyFromString(std::string_view text);
// A key for integer identifiers (trace block ids, tests): XXH3-128 of the little-endian bytes of
// `id` with `ns` as seed, so different namespaces never collide by construction.
Key KeyFromId(uint64_t id, uint64_t ns = 0);
// 32 lowercase hex digits, hi first.
std::string KeyToHex(const Key& key);

struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    return static_cast<size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull));
  }
};

}  // namespace flatcake
