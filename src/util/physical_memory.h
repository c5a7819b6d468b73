// The machine's physical memory, for defaults and checks sized by it.
#pragma once

#include <unistd.h>

#include <cstdint>

namespace flatcake {

// Bytes of physical memory (sysconf); 4 GiB when the system does not say.
inline uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)
                               : uint64_t{1} << 32;
}

}  // namespace flatcake
