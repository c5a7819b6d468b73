// Frames of the daemon protocol (docs/protocol.md): a fixed 12-byte little-endian header, then a
// protobuf payload (serve/flatcake_rpc.proto), one rpc::Request from client to server or one
// rpc::Response back.
//
//   offset  0  uint32  magic    "FCK1" (the bytes 'F' 'C' 'K' '1')
//           4  uint16  version  the protocol version the payload is written in
//           6  uint16  flags    bits 0-3: descriptors sent with the frame (SCM_RIGHTS); others 0
//           8  uint32  length   payload bytes
//          12  payload
//
// The header's layout is the same in every protocol version, so any receiver can read a peer's
// version and length before it decides what to do with the frame.
//
// Decoding trusts nothing: each function takes bytes from a peer and returns a Status saying
// what is wrong, never crashing and never allocating for a length it has not checked against
// FrameLimits. What a Status means for the connection:
//  - Corruption: not a frame (a truncated header or payload, bad magic, reserved flag bits,
//    trailing bytes, a payload that does not parse), and InvalidArgument for a payload past the
//    limit: the byte stream cannot be trusted from here on, so the connection is closed.
//  - Unsupported (a version outside the accepted range, a body this side does not know) and
//    InvalidArgument from ValidateRequest (a well-formed message whose content is wrong): the
//    frame was whole, so a server answers with an Error under the request's id and carries on.
//
// Pure functions over byte spans and messages: no I/O, no state, safe from any thread. The fuzz
// targets' entry points are DecodeRequestFrame and DecodeResponseFrame, which run every check a
// receiver runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "flatcake/status.h"
#include "serve/flatcake_rpc.pb.h"

namespace flatcake::serve {

inline constexpr uint32_t kFrameMagic = 0x314B4346;  // "FCK1" read as a little-endian uint32
inline constexpr size_t kFrameHeaderBytes = 12;
// The protocol versions this build speaks (docs/protocol.md says how a connection settles on
// one).
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr uint16_t kMinProtocolVersion = 1;

// The largest payload of any frame, the format's limit.
inline constexpr uint32_t kMaxFramePayloadBytes = 16u << 20;  // 16 MiB
// The largest request payload a server reads. Requests carry no repeated messages, only key
// blobs and checksums: the largest, a ReserveWrite of kMaxBatchKeys keys, is about 1 MiB. A
// smaller limit than replies have bounds what a hostile client makes the server allocate:
// parsing can take several times a payload's size (an unknown field costs more in memory than
// its two bytes on the wire).
inline constexpr uint32_t kMaxRequestPayloadBytes = 2u << 20;  // 2 MiB
// Descriptors one frame may carry, and where flags hold their count.
inline constexpr uint32_t kMaxFrameFds = 8;
inline constexpr uint16_t kFrameFdCountMask = 0x000F;
// Keys in one request: 1 MiB of key blob, a reply of a few MiB.
inline constexpr uint32_t kMaxBatchKeys = 1u << 16;
// Hello's free-text fields.
inline constexpr size_t kMaxTenantBytes = 64;
inline constexpr size_t kMaxClientNameBytes = 256;
inline constexpr size_t kMaxSessionBytes = 256;  // WriteHints.session

struct FrameHeader {
  uint16_t version = kProtocolVersion;
  uint16_t flags = 0;
  uint32_t payload_bytes = 0;

  uint32_t fd_count() const { return flags & kFrameFdCountMask; }
};

// What a receiver accepts.
struct FrameLimits {
  uint16_t min_version = kMinProtocolVersion;
  uint16_t max_version = kProtocolVersion;
  uint32_t max_payload_bytes = kMaxFramePayloadBytes;
};
// A server reading requests on a connection that settled on this build's version.
inline constexpr FrameLimits kRequestFrameLimits{kMinProtocolVersion, kProtocolVersion,
                                                 kMaxRequestPayloadBytes};
// A server reading a connection's first frame: a Hello of any version from kMinProtocolVersion
// up, so that it can answer a newer client with the version it speaks (docs/protocol.md).
inline constexpr FrameLimits kHelloFrameLimits{kMinProtocolVersion, UINT16_MAX,
                                               kMaxRequestPayloadBytes};

// Writes `header` and kFrameMagic into the first kFrameHeaderBytes of `out`.
void EncodeFrameHeader(const FrameHeader& header, std::span<uint8_t, kFrameHeaderBytes> out);
// Reads the header at the start of `bytes` (what follows it is not looked at) and checks it
// against `limits`: Corruption for fewer than kFrameHeaderBytes, a bad magic, reserved flag
// bits or more than kMaxFrameFds descriptors; Unsupported for a version outside the limits;
// InvalidArgument for a payload longer than limits.max_payload_bytes.
Result<FrameHeader> DecodeFrameHeader(std::span<const uint8_t> bytes,
                                      const FrameLimits& limits = {});

// A whole frame, header and payload, announcing `fd_count` descriptors (which the caller sends
// with it: SendFrame in serve/unix_socket.h). InvalidArgument when the message serializes to
// more than kMaxFramePayloadBytes or fd_count exceeds kMaxFrameFds.
Result<std::vector<uint8_t>> EncodeFrame(const google::protobuf::MessageLite& message,
                                         uint32_t fd_count = 0,
                                         uint16_t version = kProtocolVersion);

// Parses a payload (the bytes after a header). Corruption when it is not a Request / Response.
// The body is not checked: an unknown one still yields the id to answer under.
Result<rpc::Request> ParseRequest(std::span<const uint8_t> payload);
Result<rpc::Response> ParseResponse(std::span<const uint8_t> payload);

// What a receiver checks in a parsed message beyond its syntax. Unsupported for no body, or one
// this side does not know (the message names the unknown field numbers). InvalidArgument for
// content that breaks the protocol's rules: a key blob that is not a whole number of keys or
// holds more than kMaxBatchKeys; a missing or invalid layout (ValidateKvLayout); a tenant that
// ValidateTenantName refuses; a zero reservation or pin id; an unknown medium; a reply whose
// per-key entries point at segments it does not have.
Status ValidateRequest(const rpc::Request& request);
Status ValidateResponse(const rpc::Response& response);

// A tenant name: 1 to kMaxTenantBytes bytes of [A-Za-z0-9._-]. InvalidArgument otherwise.
Status ValidateTenantName(std::string_view name);

// Every check above on one whole frame: the header (against `limits`), a payload of exactly the
// announced length (Corruption for a shorter or longer `frame`), the parse and Validate*. The
// descriptors the header announces are not part of the bytes; a socket receiver matches them
// (RecvFrame in serve/unix_socket.h).
Result<rpc::Request> DecodeRequestFrame(std::span<const uint8_t> frame,
                                        const FrameLimits& limits = kRequestFrameLimits);
Result<rpc::Response> DecodeResponseFrame(std::span<const uint8_t> frame,
                                          const FrameLimits& limits = {});

}  // namespace flatcake::serve
