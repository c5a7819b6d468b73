#include "serve/serve_log.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <string>

namespace flatcake::serve {
namespace {

std::atomic<uint8_t> g_level{static_cast<uint8_t>(LogLevel::kInfo)};

constexpr const char* kLevelNames[] = {"error", "warn", "info", "debug"};
constexpr char kLevelLetters[] = {'E', 'W', 'I', 'D'};

}  // namespace

std::string_view LogLevelName(LogLevel level) { return kLevelNames[static_cast<int>(level)]; }

Result<LogLevel> ParseLogLevel(std::string_view text) {
  if (text == "warning") return LogLevel::kWarning;
  for (int i = 0; i < 4; ++i) {
    if (text == kLevelNames[i]) return static_cast<LogLevel>(i);
  }
  return Status::InvalidArgument("log_level must be one of error, warn, info, debug, not '" +
                                 std::string(text) + "'");
}

void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<uint8_t>(level), std::memory_order_relaxed);
}

bool LogEnabled(LogLevel level) {
  return static_cast<uint8_t>(level) <= g_level.load(std::memory_order_relaxed);
}

void Log(LogLevel level, std::string_view message) {
  if (!LogEnabled(level)) return;
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  tm utc{};
  ::gmtime_r(&ts.tv_sec, &utc);
  char stamp[40];
  const size_t n = std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(stamp + n, sizeof(stamp) - n, ".%03ldZ", ts.tv_nsec / 1000000);
  std::string line;
  line.reserve(message.size() + 64);
  line += stamp;
  line += " flatcake serve ";
  line += kLevelLetters[static_cast<int>(level)];
  line += ": ";
  line += message;
  line += '\n';
  // One write per line; a short write to a pipe of a full stderr only loses the rest of it.
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t w = ::write(STDERR_FILENO, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    p += w;
    left -= static_cast<size_t>(w);
  }
}

void Logf(LogLevel level, const char* format, ...) {
  if (!LogEnabled(level)) return;
  char buf[1024];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  if (n < 0) return;
  Log(level, std::string_view(buf, std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1)));
}

}  // namespace flatcake::serve
