#include "flatcake/key.h"

#include <xxhash.h>

#include <cstdio>

namespace flatcake {

Key KeyFromString(std::string_view text) {
  XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  return Key{h.high64, h.low64};
}

Key KeyFromId(uint64_t id, uint64_t ns) {
  XXH128_hash_t h = XXH3_128bits_withSeed(&id, sizeof(id), ns);
  return Key{h.high64, h.low64};
}

std::string KeyToHex(const Key& key) {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(key.hi),
                static_cast<unsigned long long>(key.lo));
  return std::string(buf, 32);
}

}  // namespace flatcake
