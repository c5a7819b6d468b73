// The daemon's log: one line per event on stderr, with a level, a UTC timestamp and the
// component, e.g.
//   2027-01-05T10:11:12.345Z flatcake serve W: client 7 (pid 123, tenant a): closed: bad frame
// Lines below the level set (SetLogLevel) are dropped. Each line goes out in one write(2), so
// lines of concurrent threads never interleave. Thread-safe.
#pragma once

#include <string_view>

#include "flatcake/status.h"

namespace flatcake::serve {

enum class LogLevel : uint8_t { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

// "error", "warning", "info", "debug".
std::string_view LogLevelName(LogLevel level);
Result<LogLevel> ParseLogLevel(std::string_view text);

// The least severe level logged; kInfo at start.
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

// Writes `message` as one line at `level` (when enabled).
void Log(LogLevel level, std::string_view message);

// printf-style. The format is checked by the compiler.
[[gnu::format(printf, 2, 3)]] void Logf(LogLevel level, const char* format, ...);

}  // namespace flatcake::serve
