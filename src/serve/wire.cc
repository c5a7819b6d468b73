#include "serve/wire.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <string>

#include "flatcake/layout.h"
#include "serve/rpc_convert.h"

namespace flatcake::serve {

static_assert(std::endian::native == std::endian::little,
              "frame headers are copied as little-endian words (the project targets "
              "little-endian hosts)");
static_assert(kMaxFrameFds <= kFrameFdCountMask);
static_assert(kMaxRequestPayloadBytes <= kMaxFramePayloadBytes);

namespace {

// Header field offsets (wire.h draws the layout).
constexpr size_t kVersionAt = 4;
constexpr size_t kFlagsAt = 6;
constexpr size_t kLengthAt = 8;

std::string Hex32(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// The field numbers a parser kept as unknown: what a newer peer sent that this build lacks.
std::string UnknownFieldNumbers(const google::protobuf::Message& message) {
  const google::protobuf::UnknownFieldSet& unknown =
      message.GetReflection()->GetUnknownFields(message);
  std::string out;
  for (int i = 0; i < unknown.field_count(); ++i) {
    if (!out.empty()) out += ", ";
    out += std::to_string(unknown.field(i).number());
  }
  return out;
}

Status UnknownBody(const google::protobuf::Message& message, uint64_t id, std::string_view what) {
  const std::string fields = UnknownFieldNumbers(message);
  std::string msg = std::string(what) + " " + std::to_string(id) + " has no body this build knows";
  if (!fields.empty()) msg += " (unknown field " + fields + ")";
  return Status::Unsupported(msg);
}

Status CheckKeyBlob(const std::string& blob) {
  Result<size_t> count = CountKeys(blob, kMaxBatchKeys);
  return count.ok() ? Status::OK() : count.status();
}

Status CheckLayout(bool has_layout, const rpc::KvLayout& layout) {
  if (!has_layout) return Status::InvalidArgument("no layout");
  return ValidateKvLayout(FromRpc(layout));
}

Status CheckMedium(rpc::Medium medium) {
  Result<MediaType> m = FromRpc(medium);
  return m.ok() ? Status::OK() : m.status();
}

Status CheckNonZeroId(uint64_t id, std::string_view what) {
  return id != 0 ? Status::OK() : Status::InvalidArgument(std::string(what) + " is 0");
}

Status CheckHello(const rpc::Hello& hello) {
  if (hello.min_protocol_version() == 0 ||
      hello.min_protocol_version() > hello.protocol_version()) {
    return Status::InvalidArgument("protocol versions " +
                                   std::to_string(hello.min_protocol_version()) + ".." +
                                   std::to_string(hello.protocol_version()) + " are no range");
  }
  FC_RETURN_IF_ERROR(ValidateTenantName(hello.tenant()));
  if (hello.client_name().size() > kMaxClientNameBytes) {
    return Status::InvalidArgument("client name of " + std::to_string(hello.client_name().size()) +
                                   " bytes exceeds " + std::to_string(kMaxClientNameBytes));
  }
  return Status::OK();
}

Status CheckRequestBody(const rpc::Request& request) {
  switch (request.body_case()) {
    case rpc::Request::kHello: return CheckHello(request.hello());
    case rpc::Request::kLookup: return CheckKeyBlob(request.lookup().keys());
    case rpc::Request::kExists: return CheckKeyBlob(request.exists().keys());
    case rpc::Request::kReserveWrite: {
      const rpc::ReserveWrite& w = request.reserve_write();
      FC_RETURN_IF_ERROR(CheckKeyBlob(w.keys()));
      FC_RETURN_IF_ERROR(CheckLayout(w.has_layout(), w.layout()));
      Result<WriteHints> hints = FromRpc(w.hints());
      return hints.ok() ? Status::OK() : hints.status();
    }
    case rpc::Request::kPublishWrite: {
      const rpc::PublishWrite& p = request.publish_write();
      FC_RETURN_IF_ERROR(CheckNonZeroId(p.reservation_id(), "reservation id"));
      if (static_cast<size_t>(p.checksums_size()) > kMaxBatchKeys) {
        return Status::InvalidArgument(std::to_string(p.checksums_size()) +
                                       " checksums exceed the batch limit");
      }
      return Status::OK();
    }
    case rpc::Request::kAbortWrite:
      return CheckNonZeroId(request.abort_write().reservation_id(), "reservation id");
    case rpc::Request::kPinRead: {
      const rpc::PinRead& r = request.pin_read();
      FC_RETURN_IF_ERROR(CheckKeyBlob(r.keys()));
      return CheckLayout(r.has_layout(), r.layout());
    }
    case rpc::Request::kUnpin: return CheckNonZeroId(request.unpin().pin_id(), "pin id");
    case rpc::Request::kStats:
    case rpc::Request::kClusterView: return Status::OK();
    case rpc::Request::BODY_NOT_SET: break;
  }
  return UnknownBody(request, request.id(), "request");
}

Status CheckReserveWriteReply(const rpc::ReserveWriteReply& reply) {
  if (static_cast<size_t>(reply.keys_size()) > kMaxBatchKeys) {
    return Status::InvalidArgument("reservation of " + std::to_string(reply.keys_size()) +
                                   " keys exceeds the batch limit");
  }
  for (const rpc::Segment& segment : reply.segments()) {
    FC_RETURN_IF_ERROR(CheckMedium(segment.medium()));
  }
  bool reserved = false;
  for (const rpc::ReservedKey& key : reply.keys()) {
    if (key.already_present()) continue;
    reserved = true;
    if (key.segment() >= static_cast<uint32_t>(reply.segments_size()) ||
        key.block() >= reply.segments(static_cast<int>(key.segment())).blocks()) {
      return Status::InvalidArgument("reserved key at segment " + std::to_string(key.segment()) +
                                     " block " + std::to_string(key.block()) +
                                     " lies outside the reply's segments");
    }
  }
  if (reserved && reply.reservation_id() == 0) {
    return Status::InvalidArgument("keys reserved under reservation id 0");
  }
  return Status::OK();
}

Status CheckPinReadReply(const rpc::PinReadReply& reply) {
  if (static_cast<size_t>(reply.blocks_size()) > kMaxBatchKeys) {
    return Status::InvalidArgument("pin of " + std::to_string(reply.blocks_size()) +
                                   " blocks exceeds the batch limit");
  }
  uint32_t found = 0;
  for (const rpc::BlockLocation& block : reply.blocks()) {
    if (!block.found()) continue;
    ++found;
    FC_RETURN_IF_ERROR(CheckMedium(block.medium()));
  }
  if (found != reply.hits() || reply.leading_hits() > reply.hits()) {
    return Status::InvalidArgument("pin reply counts " + std::to_string(reply.hits()) + " hits (" +
                                   std::to_string(reply.leading_hits()) + " leading) but locates " +
                                   std::to_string(found));
  }
  if (found > 0 && reply.pin_id() == 0) {
    return Status::InvalidArgument("blocks pinned under pin id 0");
  }
  return Status::OK();
}

Status CheckResponseBody(const rpc::Response& response) {
  switch (response.body_case()) {
    case rpc::Response::kError:
      if (response.error().code() == rpc::CODE_OK) {
        return Status::InvalidArgument("an error with code OK");
      }
      return Status::OK();
    case rpc::Response::kLookup: return CheckMedium(response.lookup().slowest_medium());
    case rpc::Response::kReserveWrite: return CheckReserveWriteReply(response.reserve_write());
    case rpc::Response::kPinRead: return CheckPinReadReply(response.pin_read());
    case rpc::Response::kHello:
    case rpc::Response::kExists:
    case rpc::Response::kPublishWrite:
    case rpc::Response::kAbortWrite:
    case rpc::Response::kUnpin:
    case rpc::Response::kStats:
    case rpc::Response::kClusterView: return Status::OK();
    case rpc::Response::BODY_NOT_SET: break;
  }
  return UnknownBody(response, response.id(), "response");
}

template <typename Message>
Result<Message> ParsePayload(std::span<const uint8_t> payload, std::string_view what) {
  Message message;
  // Payloads are bounded by the header check; this also keeps the size cast below in range.
  if (payload.size() > kMaxFramePayloadBytes ||
      !message.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return Status::Corruption("payload of " + std::to_string(payload.size()) +
                              " bytes does not parse as a " + std::string(what));
  }
  return message;
}

// The payload of a whole frame: exactly the length its header announces.
Result<std::span<const uint8_t>> FramePayload(std::span<const uint8_t> frame,
                                              const FrameLimits& limits) {
  FC_ASSIGN_OR_RETURN(const FrameHeader header, DecodeFrameHeader(frame, limits));
  const size_t have = frame.size() - kFrameHeaderBytes;
  if (have < header.payload_bytes) {
    return Status::Corruption("truncated frame: payload has " + std::to_string(have) + " of " +
                              std::to_string(header.payload_bytes) + " bytes");
  }
  if (have > header.payload_bytes) {
    return Status::Corruption(std::to_string(have - header.payload_bytes) +
                              " bytes after the frame's payload of " +
                              std::to_string(header.payload_bytes));
  }
  return frame.subspan(kFrameHeaderBytes);
}

}  // namespace

void EncodeFrameHeader(const FrameHeader& header, std::span<uint8_t, kFrameHeaderBytes> out) {
  std::memcpy(out.data(), &kFrameMagic, sizeof(kFrameMagic));
  std::memcpy(out.data() + kVersionAt, &header.version, sizeof(header.version));
  std::memcpy(out.data() + kFlagsAt, &header.flags, sizeof(header.flags));
  std::memcpy(out.data() + kLengthAt, &header.payload_bytes, sizeof(header.payload_bytes));
}

Result<FrameHeader> DecodeFrameHeader(std::span<const uint8_t> bytes, const FrameLimits& limits) {
  if (bytes.size() < kFrameHeaderBytes) {
    return Status::Corruption("truncated frame header: " + std::to_string(bytes.size()) + " of " +
                              std::to_string(kFrameHeaderBytes) + " bytes");
  }
  uint32_t magic = 0;
  FrameHeader header;
  std::memcpy(&magic, bytes.data(), sizeof(magic));
  std::memcpy(&header.version, bytes.data() + kVersionAt, sizeof(header.version));
  std::memcpy(&header.flags, bytes.data() + kFlagsAt, sizeof(header.flags));
  std::memcpy(&header.payload_bytes, bytes.data() + kLengthAt, sizeof(header.payload_bytes));
  if (magic != kFrameMagic) {
    return Status::Corruption("bad frame magic " + Hex32(magic) + " (expected " +
                              Hex32(kFrameMagic) + ", \"FCK1\")");
  }
  if (header.version < limits.min_version || header.version > limits.max_version) {
    return Status::Unsupported(
        "protocol version " + std::to_string(header.version) + " not accepted (this side speaks " +
        std::to_string(limits.min_version) + ".." + std::to_string(limits.max_version) + ")");
  }
  if ((header.flags & ~kFrameFdCountMask) != 0) {
    return Status::Corruption("reserved frame flag bits set: " + Hex32(header.flags));
  }
  if (header.fd_count() > kMaxFrameFds) {
    return Status::Corruption("frame announces " + std::to_string(header.fd_count()) +
                              " descriptors, more than " + std::to_string(kMaxFrameFds));
  }
  if (header.payload_bytes > limits.max_payload_bytes) {
    return Status::InvalidArgument("frame payload of " + std::to_string(header.payload_bytes) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(limits.max_payload_bytes));
  }
  return header;
}

Result<std::vector<uint8_t>> EncodeFrame(const google::protobuf::MessageLite& message,
                                         uint32_t fd_count, uint16_t version) {
  const size_t bytes = message.ByteSizeLong();
  if (bytes > kMaxFramePayloadBytes) {
    return Status::InvalidArgument("message of " + std::to_string(bytes) +
                                   " bytes exceeds the frame limit of " +
                                   std::to_string(kMaxFramePayloadBytes));
  }
  if (fd_count > kMaxFrameFds) {
    return Status::InvalidArgument(std::to_string(fd_count) + " descriptors exceed the limit of " +
                                   std::to_string(kMaxFrameFds) + " per frame");
  }
  std::vector<uint8_t> frame(kFrameHeaderBytes + bytes);
  const FrameHeader header{version, static_cast<uint16_t>(fd_count), static_cast<uint32_t>(bytes)};
  EncodeFrameHeader(header, std::span<uint8_t, kFrameHeaderBytes>(frame.data(), kFrameHeaderBytes));
  if (!message.SerializeToArray(frame.data() + kFrameHeaderBytes, static_cast<int>(bytes))) {
    return Status::InvalidArgument("message does not serialize (a required field is missing)");
  }
  return frame;
}

Result<rpc::Request> ParseRequest(std::span<const uint8_t> payload) {
  return ParsePayload<rpc::Request>(payload, "Request");
}

Result<rpc::Response> ParseResponse(std::span<const uint8_t> payload) {
  return ParsePayload<rpc::Response>(payload, "Response");
}

Status ValidateRequest(const rpc::Request& request) {
  Status status = CheckRequestBody(request);
  if (status.ok() || status.code() == StatusCode::kUnsupported) return status;
  return status.WithContext("request " + std::to_string(request.id()));
}

Status ValidateResponse(const rpc::Response& response) {
  Status status = CheckResponseBody(response);
  if (status.ok() || status.code() == StatusCode::kUnsupported) return status;
  return status.WithContext("response " + std::to_string(response.id()));
}

Status ValidateTenantName(std::string_view name) {
  if (name.empty() || name.size() > kMaxTenantBytes) {
    return Status::InvalidArgument("tenant name must have 1 to " + std::to_string(kMaxTenantBytes) +
                                   " bytes, not " + std::to_string(name.size()));
  }
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Status::InvalidArgument("tenant name may hold only [A-Za-z0-9._-], not byte " +
                                     std::to_string(static_cast<unsigned char>(c)));
    }
  }
  return Status::OK();
}

Result<rpc::Request> DecodeRequestFrame(std::span<const uint8_t> frame, const FrameLimits& limits) {
  FC_ASSIGN_OR_RETURN(const std::span<const uint8_t> payload, FramePayload(frame, limits));
  FC_ASSIGN_OR_RETURN(rpc::Request request, ParseRequest(payload));
  FC_RETURN_IF_ERROR(ValidateRequest(request));
  return request;
}

Result<rpc::Response> DecodeResponseFrame(std::span<const uint8_t> frame,
                                          const FrameLimits& limits) {
  FC_ASSIGN_OR_RETURN(const std::span<const uint8_t> payload, FramePayload(frame, limits));
  FC_ASSIGN_OR_RETURN(rpc::Response response, ParseResponse(payload));
  FC_RETURN_IF_ERROR(ValidateResponse(response));
  return response;
}

}  // namespace flatcake::serve
