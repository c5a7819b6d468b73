// Fuzz target: the daemon's configuration (serve/serve_config.h): the TOML file ParseServeConfig
// reads (toml++ underneath, then every key checked against its setting or option row) and the
// whole-config check, plus the small parsers of its values and flags: file modes, HOST:PORT
// addresses, log levels. The first byte picks the parser; the rest is its text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "serve/http_get.h"
#include "serve/serve_config.h"
#include "serve/serve_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flatcake::serve;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0:
    case 1: {
      auto config = ParseServeConfig(text, "fuzz.toml");
      if (config.ok()) (void)ValidateServeConfig(*config);
      break;
    }
    case 2: (void)ParseFileMode(text); break;
    default:
      (void)ParseHostPort(text);
      (void)ParseLogLevel(text);
      break;
  }
  return 0;
}
