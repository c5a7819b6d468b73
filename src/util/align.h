// Rounding to an alignment, for the 4 KiB (and other) boundaries that O_DIRECT, staging and the
// media's extents need. `a` is any positive alignment; powers of two are the common case.
#pragma once

#include <cstdint>

namespace flatcake {

constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
constexpr uint64_t AlignDown(uint64_t v, uint64_t a) { return v / a * a; }

}  // namespace flatcake
