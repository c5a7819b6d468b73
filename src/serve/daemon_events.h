// The vocabulary of what the daemon reports about its clients (serve/daemon.h's DaemonObserver)
// and what its metrics count them by (serve/metrics.h): the request types of the protocol, the
// reasons a frame or a connection is refused, and what a client's reads of one pin did. One home
// for these, so that the daemon names an event the way the metrics label it.
//
// Values and pure functions: thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace flatcake::rpc {
class Request;
}  // namespace flatcake::rpc

namespace flatcake::serve {

// The request types of the protocol (rpc::Request's bodies), the label type= of
// flatcake_requests_total.
enum class RequestType : uint8_t {
  kHello,
  kLookup,
  kExists,
  kReserveWrite,
  kPublishWrite,
  kAbortWrite,
  kPinRead,
  kUnpin,
  kStats,
  kClusterView,
  kUnknown,  // a body this build does not know (answered Unsupported)
};
inline constexpr std::array<std::string_view, 11> kRequestTypeNames = {
    "hello",    "lookup", "exists", "reserve_write", "publish_write", "abort_write",
    "pin_read", "unpin",  "stats",  "cluster_view",  "unknown"};
RequestType RequestTypeOf(const rpc::Request& request);
// "hello", "lookup", ..., "unknown".
inline std::string_view RequestTypeName(RequestType type) {
  return kRequestTypeNames[static_cast<size_t>(type)];
}

// Why the daemon refused a frame or a connection: the label reason= of
// flatcake_protocol_errors_total. The wire.h Status codes say which applies.
enum class ProtocolError : uint8_t {
  kBadFrame,        // not a frame: bad magic or flags, truncated, trailing bytes, unparsable
  kFrameTooLarge,   // a length past the frame limit
  kBadVersion,      // a protocol version outside the accepted range
  kInvalidRequest,  // a whole frame whose content ValidateRequest refuses
  kUnknownRequest,  // a request body this build does not know
  kNoHello,         // a request before Hello, or a second Hello
  kPeerRefused,     // the allow-list refused the peer's credentials
  kTooManyClients,  // max_clients connections were open already
  kTimeout,         // a frame did not arrive (or leave) within its timeout
};
inline constexpr std::array<std::string_view, 9> kProtocolErrorNames = {
    "bad_frame", "frame_too_large", "bad_version",      "invalid_request", "unknown_request",
    "no_hello",  "peer_refused",    "too_many_clients", "timeout"};

// What a client's reads of one pin did, as its Unpin reports them.
struct ClientReads {
  uint64_t bytes_from_dram = 0;  // delivered from the arena
  uint64_t bytes_from_ssd = 0;   // delivered from the pool files
  uint64_t ssd_bytes_read = 0;   // read from the pool files, gaps and alignment included
  uint32_t corrupt = 0;          // blocks whose checksum did not match
};

}  // namespace flatcake::serve
