#include "serve/wire.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "flatcake/key.h"
#include "serve/rpc_convert.h"

namespace flatcake::serve {
namespace {

using google::protobuf::util::MessageDifferencer;

std::string Keys(uint64_t first, size_t count) {
  std::vector<Key> keys;
  for (size_t i = 0; i < count; ++i) keys.push_back(KeyFromId(first + i));
  return EncodeKeys(keys);
}

rpc::KvLayout Layout(uint32_t layers, uint32_t planes, uint64_t slice) {
  return ToRpc(KvLayout{layers, planes, slice});
}

// A new envelope at the end of `out`, its id one past the previous one's (or `first_id`).
template <typename Message>
Message& Append(std::vector<Message>& out, uint64_t first_id) {
  const uint64_t id = out.empty() ? first_id : out.back().id() + 1;
  out.emplace_back().set_id(id);
  return out.back();
}

// One request of every body, each field set to something other than its default.
std::vector<rpc::Request> SampleRequests() {
  std::vector<rpc::Request> out;
  auto next = [&]() -> rpc::Request& { return Append(out, 1); };
  rpc::Hello* hello = next().mutable_hello();
  hello->set_protocol_version(kProtocolVersion);
  hello->set_min_protocol_version(kMinProtocolVersion);
  hello->set_tenant("team-a.prod_1");
  hello->set_client_pid(4242);
  hello->set_client_name("sglang tp3");
  next().mutable_lookup()->set_keys(Keys(10, 128));
  next().mutable_exists()->set_keys(Keys(20, 3));
  rpc::ReserveWrite* reserve = next().mutable_reserve_write();
  reserve->set_keys(Keys(30, 7));
  *reserve->mutable_layout() = Layout(61, 1, 36864);
  rpc::WriteHints* hints = reserve->mutable_hints();
  hints->set_session("chat-17");
  hints->set_prefix_tail(Keys(29, 1));
  hints->set_turn(3);
  hints->set_prior_reply_tokens(880);
  hints->set_context_tokens(40000);
  hints->set_shared_prefix(true);
  hints->set_force_medium(rpc::MEDIUM_SSD);
  rpc::PublishWrite* publish = next().mutable_publish_write();
  publish->set_reservation_id(77);
  for (uint64_t c : {0x0123456789abcdefull, ~0ull, 1ull}) publish->add_checksums(c);
  next().mutable_abort_write()->set_reservation_id(78);
  rpc::PinRead* pin = next().mutable_pin_read();
  pin->set_keys(Keys(40, 5));
  *pin->mutable_layout() = Layout(32, 2, 16384);
  pin->set_arrival_ns(123456789);
  rpc::Unpin* unpin = next().mutable_unpin();
  unpin->set_pin_id(91);
  unpin->set_delivered(4);
  unpin->set_corrupt(1);
  unpin->set_bytes_from_dram(1 << 20);
  unpin->set_bytes_from_ssd(3 << 20);
  unpin->set_ssd_bytes_read(4 << 20);
  unpin->set_ssd_reads(9);
  next().mutable_stats();
  next().mutable_cluster_view();
  return out;
}

std::vector<rpc::Response> SampleResponses() {
  std::vector<rpc::Response> out;
  auto next = [&]() -> rpc::Response& { return Append(out, 100); };
  *next().mutable_error() = ToRpc(Status::NoSpace("tenant quota of 1 GiB on ssd reached"));
  rpc::HelloReply* hello = next().mutable_hello();
  hello->set_protocol_version(1);
  hello->set_min_protocol_version(1);
  hello->set_server_version("flatcake 0.1.0");
  hello->set_session_token(0xfeedface);
  hello->set_node_id(3);
  hello->mutable_dram_arena()->set_bytes(8ull << 30);
  hello->mutable_dram_arena()->set_fd_index(0);
  hello->mutable_dram_arena()->set_page_mode("thp");
  for (int i = 0; i < 3; ++i) {
    rpc::SsdFile* file = hello->add_ssd_files();
    file->set_path("/nvme" + std::to_string(i) + "/flatcake-pool-" + std::to_string(i) + ".dat");
    file->set_bytes(256ull << 20);
  }
  hello->set_ssd_direct_io(true);
  rpc::Limits* limits = hello->mutable_limits();
  limits->set_max_frame_bytes(kMaxRequestPayloadBytes);
  limits->set_max_batch_keys(kMaxBatchKeys);
  limits->set_max_layers(4096);
  limits->set_max_planes(16);
  limits->set_max_slice_bytes(1ull << 30);
  limits->set_run_align(4096);
  limits->set_max_pins(1024);
  limits->set_max_reservations(64);
  rpc::LookupReply* lookup = next().mutable_lookup();
  lookup->set_leading_hits(100);
  lookup->set_slowest_medium(rpc::MEDIUM_SSD);
  lookup->set_dram_bytes(1 << 20);
  lookup->set_ssd_bytes(5 << 20);
  next().mutable_exists()->set_leading_hits(2);
  rpc::ReserveWriteReply* reserve = next().mutable_reserve_write();
  reserve->set_reservation_id(77);
  for (uint32_t s = 0; s < 2; ++s) {
    rpc::Segment* seg = reserve->add_segments();
    seg->set_medium(s == 0 ? rpc::MEDIUM_DRAM : rpc::MEDIUM_SSD);
    seg->set_file_index(s);
    seg->set_offset(4096 * (10 + s));
    seg->set_blocks(3);
    seg->set_plane_stride(3 * 36864);
    seg->set_layer_stride(3 * 36864);
    seg->set_block_stride(36864);
    seg->set_bytes(61ull * 3 * 36864);
  }
  reserve->add_keys()->set_already_present(true);
  for (uint32_t k = 0; k < 6; ++k) {
    rpc::ReservedKey* key = reserve->add_keys();
    key->set_segment(k / 3);
    key->set_block(k % 3);
  }
  next().mutable_publish_write()->set_published(6);
  next().mutable_abort_write();
  rpc::PinReadReply* pin = next().mutable_pin_read();
  pin->set_pin_id(91);
  pin->set_hits(2);
  pin->set_leading_hits(1);
  pin->set_queued_ns(250000);
  for (int b = 0; b < 3; ++b) {
    rpc::BlockLocation* block = pin->add_blocks();
    if (b == 1) continue;  // a miss
    block->set_found(true);
    block->set_medium(b == 0 ? rpc::MEDIUM_DRAM : rpc::MEDIUM_SSD);
    block->set_file_index(b == 0 ? 0 : 1);
    block->set_offset(8192 * (b + 1));
    block->set_plane_stride(65536);
    block->set_layer_stride(131072);
    block->set_checksum(0xdeadbeefcafef00dull + b);
  }
  next().mutable_unpin();
  StoreStats stats;
  stats.dram.capacity_bytes = 1 << 30;
  stats.ssd.used_bytes = 12345;
  stats.hits = 99;
  stats.skipped_records = 2;
  *next().mutable_stats() = ToRpc(stats);
  ClusterViewInfo view;
  view.enabled = true;
  view.node_id = 2;
  view.etcd_reachable = true;
  view.members = {{1, "a", std::string("\x01\x02", 2), 5ull << 30, true},
                  {2, "b", "addr", 3ull << 30, false}};
  *next().mutable_cluster_view() = ToRpc(view);
  return out;
}

std::vector<uint8_t> Frame(const google::protobuf::MessageLite& message, uint32_t fds = 0) {
  Result<std::vector<uint8_t>> frame = EncodeFrame(message, fds);
  EXPECT_TRUE(frame.ok()) << frame.status().ToString();
  return frame.ok() ? *frame : std::vector<uint8_t>{};
}

std::vector<uint8_t> FrameOfPayload(std::span<const uint8_t> payload, uint16_t version = 1,
                                    uint16_t flags = 0) {
  std::vector<uint8_t> frame(kFrameHeaderBytes + payload.size());
  EncodeFrameHeader({version, flags, static_cast<uint32_t>(payload.size())},
                    std::span<uint8_t, kFrameHeaderBytes>(frame.data(), kFrameHeaderBytes));
  if (!payload.empty())
    std::memcpy(frame.data() + kFrameHeaderBytes, payload.data(), payload.size());
  return frame;
}

std::vector<uint8_t> FrameOfPayload(const std::string& payload) {
  return FrameOfPayload(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
}

template <typename Message>
std::set<int> BodiesOf(const std::vector<Message>& messages) {
  std::set<int> bodies;
  for (const Message& m : messages) bodies.insert(static_cast<int>(m.body_case()));
  return bodies;
}

TEST(WireTest, SamplesCoverEveryBody) {
  // A body added to the schema without a sample here fails this test.
  const auto* request_body = rpc::Request::descriptor()->FindOneofByName("body");
  const auto* response_body = rpc::Response::descriptor()->FindOneofByName("body");
  ASSERT_NE(request_body, nullptr);
  ASSERT_NE(response_body, nullptr);
  EXPECT_EQ(BodiesOf(SampleRequests()).size(), static_cast<size_t>(request_body->field_count()));
  EXPECT_EQ(BodiesOf(SampleResponses()).size(), static_cast<size_t>(response_body->field_count()));
}

// Each message's frame decodes to an equal message.
template <typename Message, typename Decode>
void ExpectEachRoundTrips(const std::vector<Message>& messages, Decode decode) {
  for (const Message& message : messages) {
    SCOPED_TRACE(message.ShortDebugString());
    const std::vector<uint8_t> frame = Frame(message);
    Result<Message> decoded = decode(std::span<const uint8_t>(frame));
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_TRUE(MessageDifferencer::Equals(message, *decoded));
  }
}

// The two receivers, with their default limits, for the templates here.
constexpr auto kDecodeRequest = [](std::span<const uint8_t> f) { return DecodeRequestFrame(f); };
constexpr auto kDecodeResponse = [](std::span<const uint8_t> f) { return DecodeResponseFrame(f); };

TEST(WireTest, EveryMessageRoundTrips) {
  ExpectEachRoundTrips(SampleRequests(), kDecodeRequest);
  ExpectEachRoundTrips(SampleResponses(), kDecodeResponse);
}

TEST(WireTest, HeaderLayout) {
  rpc::Response response = SampleResponses()[1];  // a HelloReply, sent with the arena's fd
  const std::vector<uint8_t> frame = Frame(response, 1);
  ASSERT_GE(frame.size(), kFrameHeaderBytes);
  EXPECT_EQ(std::string(frame.begin(), frame.begin() + 4), "FCK1");
  EXPECT_EQ(frame[4], 1);  // version 1, little-endian
  EXPECT_EQ(frame[5], 0);
  EXPECT_EQ(frame[6], 1);  // one descriptor
  EXPECT_EQ(frame[7], 0);
  Result<FrameHeader> header = DecodeFrameHeader(frame);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->version, kProtocolVersion);
  EXPECT_EQ(header->fd_count(), 1u);
  EXPECT_EQ(header->payload_bytes, frame.size() - kFrameHeaderBytes);
  EXPECT_EQ(header->payload_bytes, response.ByteSizeLong());
}

// Every proper prefix of each message's frame fails to decode, as Corruption.
template <typename Message, typename Decode>
void ExpectEveryPrefixFails(const std::vector<Message>& messages, Decode decode) {
  for (const Message& message : messages) {
    const std::vector<uint8_t> frame = Frame(message);
    for (size_t len = 0; len < frame.size(); ++len) {
      const Status status = decode(std::span<const uint8_t>(frame.data(), len)).status();
      ASSERT_FALSE(status.ok()) << message.ShortDebugString() << " cut at " << len;
      EXPECT_EQ(status.code(), StatusCode::kCorruption) << status.ToString();
    }
  }
}

TEST(WireTest, TruncatedAtEveryOffsetFails) {
  ExpectEveryPrefixFails(SampleRequests(), kDecodeRequest);
  ExpectEveryPrefixFails(SampleResponses(), kDecodeResponse);
}

TEST(WireTest, TrailingBytesFail) {
  std::vector<uint8_t> frame = Frame(SampleRequests()[1]);
  frame.push_back(0);
  Result<rpc::Request> r = DecodeRequestFrame(frame);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("after the frame's payload"), std::string_view::npos);
}

TEST(WireTest, BadMagicFails) {
  const std::vector<uint8_t> good = Frame(SampleRequests()[1]);
  for (size_t i = 0; i < 4; ++i) {
    std::vector<uint8_t> frame = good;
    frame[i] ^= 0x20;
    Result<rpc::Request> r = DecodeRequestFrame(frame);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_NE(r.status().message().find("magic"), std::string_view::npos);
  }
}

TEST(WireTest, VersionOutsideTheRangeIsUnsupported) {
  const rpc::Request hello = SampleRequests()[0];
  for (uint16_t version : {uint16_t{0}, uint16_t{kProtocolVersion + 1}, uint16_t{UINT16_MAX}}) {
    Result<std::vector<uint8_t>> frame = EncodeFrame(hello, 0, version);
    ASSERT_TRUE(frame.ok());
    Result<rpc::Request> r = DecodeRequestFrame(*frame);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << r.status().ToString();
    // A connection's first frame: a newer client's Hello is read, to be answered with ours.
    Result<rpc::Request> first = DecodeRequestFrame(*frame, kHelloFrameLimits);
    EXPECT_EQ(first.ok(), version != 0) << first.status().ToString();
  }
}

TEST(WireTest, ReservedFlagsAndTooManyDescriptorsFail) {
  const std::string payload = SampleRequests()[1].SerializeAsString();
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(payload.data()),
                                       payload.size());
  for (uint16_t flags : {uint16_t{0x0010}, uint16_t{0x8000}, uint16_t{kMaxFrameFds + 1}}) {
    Result<rpc::Request> r = DecodeRequestFrame(FrameOfPayload(bytes, 1, flags));
    ASSERT_FALSE(r.ok()) << flags;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  }
  Result<rpc::Request> most = DecodeRequestFrame(FrameOfPayload(bytes, 1, kMaxFrameFds));
  EXPECT_TRUE(most.ok()) << most.status().ToString();
}

TEST(WireTest, OversizedLengthFailsFromTheHeaderAlone) {
  // The header alone, no payload behind it: the length is refused before any payload is needed.
  std::vector<uint8_t> header(kFrameHeaderBytes);
  const auto out = std::span<uint8_t, kFrameHeaderBytes>(header.data(), kFrameHeaderBytes);
  for (uint32_t length : {kMaxFramePayloadBytes + 1, uint32_t{UINT32_MAX}}) {
    EncodeFrameHeader({kProtocolVersion, 0, length}, out);
    Result<FrameHeader> h = DecodeFrameHeader(header);
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
    Result<rpc::Request> r = DecodeRequestFrame(header);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  // A server reads less of a request than a client does of a reply.
  EncodeFrameHeader({kProtocolVersion, 0, kMaxRequestPayloadBytes + 1}, out);
  EXPECT_FALSE(DecodeFrameHeader(header, kRequestFrameLimits).ok());
  EXPECT_TRUE(DecodeFrameHeader(header).ok());
}

TEST(WireTest, LargestRequestFitsTheRequestLimit) {
  rpc::Request request;
  request.set_id(UINT64_MAX);
  rpc::ReserveWrite* w = request.mutable_reserve_write();
  w->set_keys(Keys(0, kMaxBatchKeys));
  *w->mutable_layout() = Layout(kMaxKvLayers, kMaxKvPlanes, kMaxSliceBytes);
  w->mutable_hints()->set_session(std::string(kMaxSessionBytes, 's'));
  w->mutable_hints()->set_prefix_tail(Keys(1, 1));
  EXPECT_LE(request.ByteSizeLong(), kMaxRequestPayloadBytes);
  rpc::Request publish;
  publish.set_id(UINT64_MAX);
  publish.mutable_publish_write()->set_reservation_id(UINT64_MAX);
  for (uint32_t i = 0; i < kMaxBatchKeys; ++i)
    publish.mutable_publish_write()->add_checksums(~0ull);
  EXPECT_LE(publish.ByteSizeLong(), kMaxRequestPayloadBytes);
  Result<rpc::Request> r = DecodeRequestFrame(Frame(publish));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

TEST(WireTest, EncodeRefusesWhatNoReceiverAccepts) {
  rpc::Request request;
  request.mutable_lookup()->set_keys(std::string(kMaxFramePayloadBytes, 'k'));
  Result<std::vector<uint8_t>> big = EncodeFrame(request);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  Result<std::vector<uint8_t>> fds = EncodeFrame(SampleRequests()[1], kMaxFrameFds + 1);
  ASSERT_FALSE(fds.ok());
  EXPECT_EQ(fds.status().code(), StatusCode::kInvalidArgument);
}

TEST(WireTest, PayloadThatDoesNotParseIsCorruption) {
  // A field tag with wire type 7 (no such type), a truncated varint, a length past the end.
  for (const std::string& payload : {std::string("\x0f\x01", 2), std::string("\x08\xff\xff", 3),
                                     std::string("\x12\x7f\x01", 3), std::string(64, '\xff')}) {
    Result<rpc::Request> r = DecodeRequestFrame(FrameOfPayload(payload));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
    Result<rpc::Response> s = DecodeResponseFrame(FrameOfPayload(payload));
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kCorruption) << s.status().ToString();
  }
}

TEST(WireTest, MissingOrUnknownBodyIsUnsupported) {
  rpc::Request empty;
  empty.set_id(5);
  Result<rpc::Request> r = DecodeRequestFrame(Frame(empty));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  // A newer client's body: field 99, length-delimited, after id 7. It parses (the id is there to
  // answer under) and is refused by name.
  std::string payload = empty.SerializeAsString();
  payload = std::string("\x08\x07", 2) + std::string("\x9a\x06\x02\x08\x01", 5);
  Result<rpc::Request> parsed = ParseRequest(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->id(), 7u);
  Status invalid = ValidateRequest(*parsed);
  EXPECT_EQ(invalid.code(), StatusCode::kUnsupported);
  EXPECT_NE(invalid.message().find("unknown field 99"), std::string_view::npos)
      << invalid.ToString();
  Result<rpc::Request> whole = DecodeRequestFrame(FrameOfPayload(payload));
  ASSERT_FALSE(whole.ok());
  EXPECT_EQ(whole.status().code(), StatusCode::kUnsupported);
  Result<rpc::Response> reply = DecodeResponseFrame(FrameOfPayload(payload));
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kUnsupported);
}

// The sample whose body is `body`.
template <typename Message>
Message SampleWith(const std::vector<Message>& samples, typename Message::BodyCase body) {
  for (const Message& m : samples) {
    if (m.body_case() == body) return m;
  }
  ADD_FAILURE() << "no sample of body " << body;
  return Message();
}

// A sample with one thing broken, which validation must refuse with InvalidArgument.
template <typename Message>
struct Breakage {
  typename Message::BodyCase body;  // the sample to start from
  std::string what;
  std::function<void(Message&)> apply;
};

template <typename Message, typename Validate>
void ExpectEachRefused(const std::vector<Message>& samples,
                       const std::vector<Breakage<Message>>& breakages, Validate validate) {
  for (const Breakage<Message>& b : breakages) {
    Message m = SampleWith(samples, b.body);
    b.apply(m);
    const Status s = validate(m);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << b.what << ": " << s.ToString();
  }
}

TEST(WireTest, RequestContentIsChecked) {
  using R = rpc::Request;
  std::vector<Breakage<R>> breakages = {
      {R::kLookup, "a key blob of 15 bytes",
       [](R& r) { r.mutable_lookup()->set_keys(std::string(15, 'k')); }},
      {R::kExists, "one key too many",
       [](R& r) { r.mutable_exists()->set_keys(Keys(0, kMaxBatchKeys + 1)); }},
      {R::kHello, "a tenant too long",
       [](R& r) { r.mutable_hello()->set_tenant(std::string(kMaxTenantBytes + 1, 't')); }},
      {R::kHello, "versions 2..1",
       [](R& r) {
         r.mutable_hello()->set_min_protocol_version(2);
         r.mutable_hello()->set_protocol_version(1);
       }},
      {R::kHello, "a client name too long",
       [](R& r) { r.mutable_hello()->set_client_name(std::string(kMaxClientNameBytes + 1, 'c')); }},
      {R::kReserveWrite, "a write without a layout",
       [](R& r) { r.mutable_reserve_write()->clear_layout(); }},
      {R::kReserveWrite, "a write with 0 layers",
       [](R& r) { r.mutable_reserve_write()->mutable_layout()->set_num_layers(0); }},
      {R::kReserveWrite, "a prefix tail of 15 bytes",
       [](R& r) {
         r.mutable_reserve_write()->mutable_hints()->set_prefix_tail(std::string(15, 'p'));
       }},
      {R::kReserveWrite, "a forced medium 7",
       [](R& r) {
         r.mutable_reserve_write()->mutable_hints()->set_force_medium(static_cast<rpc::Medium>(7));
       }},
      {R::kReserveWrite, "a session name too long",
       [](R& r) {
         r.mutable_reserve_write()->mutable_hints()->set_session(
             std::string(kMaxSessionBytes + 1, 's'));
       }},
      {R::kPinRead, "a read of 17 planes",
       [](R& r) { r.mutable_pin_read()->mutable_layout()->set_num_planes(kMaxKvPlanes + 1); }},
      {R::kPinRead, "a read of 1 GiB + 1 slices",
       [](R& r) { r.mutable_pin_read()->mutable_layout()->set_slice_bytes(kMaxSliceBytes + 1); }},
      {R::kPublishWrite, "a publish of reservation 0",
       [](R& r) { r.mutable_publish_write()->set_reservation_id(0); }},
      {R::kAbortWrite, "an abort of reservation 0",
       [](R& r) { r.mutable_abort_write()->set_reservation_id(0); }},
      {R::kUnpin, "an unpin of pin 0", [](R& r) { r.mutable_unpin()->set_pin_id(0); }},
  };
  for (const char* tenant : {"", "a b", "a/b", "t\xc3\xa9", "x\n"}) {
    breakages.push_back({R::kHello, std::string("tenant '") + tenant + "'",
                         [tenant](R& r) { r.mutable_hello()->set_tenant(tenant); }});
  }
  ExpectEachRefused(SampleRequests(), breakages, ValidateRequest);
  // The whole-frame decoder runs the same checks.
  for (const Breakage<R>& b : breakages) {
    R r = SampleWith(SampleRequests(), b.body);
    b.apply(r);
    EXPECT_FALSE(DecodeRequestFrame(Frame(r)).ok()) << b.what;
  }
}

TEST(WireTest, ResponseContentIsChecked) {
  using R = rpc::Response;
  const std::vector<Breakage<R>> breakages = {
      {R::kError, "an error with code OK", [](R& r) { r.mutable_error()->set_code(rpc::CODE_OK); }},
      {R::kLookup, "a lookup on medium 2",
       [](R& r) { r.mutable_lookup()->set_slowest_medium(static_cast<rpc::Medium>(2)); }},
      {R::kReserveWrite, "a key in segment 2 of 2",
       [](R& r) { r.mutable_reserve_write()->mutable_keys(1)->set_segment(2); }},
      {R::kReserveWrite, "a key in block 3 of 3",
       [](R& r) { r.mutable_reserve_write()->mutable_keys(1)->set_block(3); }},
      {R::kReserveWrite, "keys reserved under id 0",
       [](R& r) { r.mutable_reserve_write()->set_reservation_id(0); }},
      {R::kReserveWrite, "a segment on medium -1",
       [](R& r) {
         r.mutable_reserve_write()->mutable_segments(1)->set_medium(static_cast<rpc::Medium>(-1));
       }},
      {R::kPinRead, "3 hits counted, 2 located", [](R& r) { r.mutable_pin_read()->set_hits(3); }},
      {R::kPinRead, "more leading hits than hits",
       [](R& r) { r.mutable_pin_read()->set_leading_hits(3); }},
      {R::kPinRead, "blocks pinned under id 0", [](R& r) { r.mutable_pin_read()->set_pin_id(0); }},
      {R::kPinRead, "a block on medium 9",
       [](R& r) {
         r.mutable_pin_read()->mutable_blocks(0)->set_medium(static_cast<rpc::Medium>(9));
       }},
  };
  ExpectEachRefused(SampleResponses(), breakages, ValidateResponse);
}

TEST(WireTest, TenantNames) {
  EXPECT_TRUE(ValidateTenantName("a").ok());
  EXPECT_TRUE(ValidateTenantName("Team_7.prod-eu").ok());
  EXPECT_TRUE(ValidateTenantName(std::string(kMaxTenantBytes, 'z')).ok());
  EXPECT_FALSE(ValidateTenantName(std::string("a\0b", 3)).ok());
}

// Random bytes, fixed seed: every decode returns (OK or an error), none crashes. Run under
// AddressSanitizer this also checks that no decode reads outside its span.
TEST(WireTest, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(20260521);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<size_t> length(0, 512);
  size_t accepted = 0;
  // Garbage payloads behind a valid header, and wholly random frames.
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> payload(length(rng));
    for (uint8_t& b : payload) b = static_cast<uint8_t>(byte(rng));
    const std::vector<uint8_t> framed = FrameOfPayload(payload);
    accepted += DecodeRequestFrame(framed).ok();
    accepted += DecodeResponseFrame(framed).ok();
    EXPECT_FALSE(DecodeRequestFrame(payload).ok() && payload.size() < kFrameHeaderBytes);
    (void)DecodeResponseFrame(payload);
  }
  // Valid frames with a few bytes changed, in the header or the payload.
  std::vector<std::vector<uint8_t>> frames;
  for (const rpc::Request& r : SampleRequests()) frames.push_back(Frame(r));
  for (const rpc::Response& r : SampleResponses()) frames.push_back(Frame(r));
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> frame = frames[static_cast<size_t>(i) % frames.size()];
    const int flips = 1 + i % 4;
    for (int f = 0; f < flips; ++f) {
      frame[std::uniform_int_distribution<size_t>(0, frame.size() - 1)(rng)] =
          static_cast<uint8_t>(byte(rng));
    }
    accepted += DecodeRequestFrame(frame).ok();
    accepted += DecodeResponseFrame(frame).ok();
  }
  // Some mutations land in values and still decode; most break something. Either is fine; the
  // count only shows both happened.
  EXPECT_GT(accepted, 0u);
  EXPECT_LT(accepted, 80000u);
}

}  // namespace
}  // namespace flatcake::serve
