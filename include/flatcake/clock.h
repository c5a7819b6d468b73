// The clock of restore arrival times (RestoreOptions::arrival_ns) and of FC-MAS's waits.
#pragma once

#include <chrono>
#include <cstdint>

namespace flatcake {

// Nanoseconds on the steady clock.
inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace flatcake
