// A minimal HTTP/1.1 client for two things: reading the daemon's metrics endpoint (GET /metrics,
// docs/serve.md) from `flatcake stats` and the tests, and talking to etcd's JSON gateway
// (POST /v3/..., src/cluster/etcd_client.h), whose watches answer with a stream. One request per
// connection (Connection: close), plain HTTP, no redirects, no compression asked for; bodies with a
// Content-Length, chunked, or up to the end of the stream.
//
// And the HOST:PORT form of addresses that the daemon's configuration (metrics_addr) and
// `flatcake stats --metrics-addr` take.
//
// Functions over values and their own sockets; thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
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

// POST `body` (of `content_type`) to `path` at http://at/, as HttpGet.
Result<HttpResponse> HttpPost(const HostPort& at, std::string_view path, std::string_view body,
                              std::string_view content_type, std::chrono::milliseconds timeout,
                              size_t max_body_bytes = size_t{64} << 20);

// POST, then hand the response body to `on_data` piece by piece as it arrives (a chunked body
// chunk by chunk), for as long as the server keeps it open: OK when the server ends the body,
// `on_data` returns false, or `stop` turns true (looked at every 100 ms). Connecting and sending
// must finish within `connect_timeout`; a status other than 200 is an IOError carrying the start
// of the body; a connection closed inside a chunked body is an IOError; other errors as HttpGet.
Status HttpPostStream(const HostPort& at, std::string_view path, std::string_view body,
                      std::string_view content_type, std::chrono::milliseconds connect_timeout,
                      const std::atomic<bool>& stop,
                      const std::function<bool(std::string_view)>& on_data);

}  // namespace flatcake::serve
