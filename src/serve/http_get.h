// A minimal HTTP/1.1 client for one thing: reading the daemon's metrics endpoint (GET /metrics,
// docs/serve.md) from `flatcake stats` and the tests. One request per connection
// (Connection: close), plain HTTP, no redirects, no compression asked for; bodies with a
// Content-Length, chunked, or up to the end of the stream.
//
// And the HOST:PORT form of addresses that the daemon's configuration (metrics_addr) and
// `flatcake stats --metrics-addr` take.
//
// Functions over values and their own sockets; thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "flatcake/status.h"

namespace flatcake::serve {

struct HostPort {
  std::string host;  // an IPv4 address, a host name, or an IPv6 address (without brackets)
  uint16_t port = 0;

  // "host:port", with brackets around an IPv6 address.
  std::string ToString() const;
};

// "HOST:PORT": an IPv4 address or a host name, or "[IPv6]", then a port 0..65535 (0: any free
// port, for a server). InvalidArgument naming what is wrong otherwise.
Result<HostPort> ParseHostPort(std::string_view text);

struct HttpResponse {
  int status = 0;            // 200, 404, ...
  std::string content_type;  // the Content-Type header's value, as sent
  std::string body;
};

// GET `path` from http://at/: connects, sends the request, reads the whole response, all within
// `timeout`. A response of any status comes back as it is (the caller judges a 404). Errors:
// IOError "cannot connect to HOST:PORT: <reason>" when nothing answers there (refused,
// unreachable, unknown host), DeadlineExceeded past the timeout, Corruption for a response that
// is not HTTP/1.x or is cut short, NoSpace for a body past `max_body_bytes`.
Result<HttpResponse> HttpGet(const HostPort& at, std::string_view path,
                             std::chrono::milliseconds timeout,
                             size_t max_body_bytes = size_t{64} << 20);

}  // namespace flatcake::serve
