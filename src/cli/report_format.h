// Formatting shared by the subcommands' text reports.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "flatcake/options.h"

namespace flatcake::cli {

// "1.50 GiB", "256.00 MiB", "4.00 KiB" (KiB below 1 MiB).
inline std::string FormatBytes(uint64_t b) {
  char buf[64];
  if (b >= kGiB) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(b) / kGiB);
  } else if (b >= kMiB) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(b) / kMiB);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f KiB", static_cast<double>(b) / kKiB);
  }
  return buf;
}

}  // namespace flatcake::cli
