#include "serve/rpc_convert.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "serve/wire.h"

namespace flatcake::serve {
namespace {

TEST(RpcConvertTest, KeysRoundTrip) {
  std::vector<Key> keys;
  for (uint64_t i = 0; i < 100; ++i) keys.push_back(KeyFromId(i, 7));
  keys.push_back(Key{0, 0});
  keys.push_back(Key{~0ull, ~0ull});
  const std::string blob = EncodeKeys(keys);
  ASSERT_EQ(blob.size(), keys.size() * kKeyBytes);
  Result<std::vector<Key>> back = DecodeKeys(blob, kMaxBatchKeys);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, keys);
  Result<size_t> count = CountKeys(blob, kMaxBatchKeys);
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, keys.size());
}

TEST(RpcConvertTest, KeyBytesAreHiThenLoLittleEndian) {
  const Key key{0x0102030405060708ull, 0x1112131415161718ull};
  const std::string blob = EncodeKeys(std::span<const Key>(&key, 1));
  const std::string expected("\x08\x07\x06\x05\x04\x03\x02\x01\x18\x17\x16\x15\x14\x13\x12\x11",
                             16);
  EXPECT_EQ(blob, expected);
  Result<Key> back = DecodeKey(blob);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, key);
}

TEST(RpcConvertTest, BadKeyBlobsAreRefused) {
  EXPECT_TRUE(DecodeKeys("", 4).ok());
  for (size_t bytes : {1, 15, 17, 31}) {
    Result<std::vector<Key>> r = DecodeKeys(std::string(bytes, 'k'), 4);
    ASSERT_FALSE(r.ok()) << bytes;
    EXPECT_TRUE(r.status().IsInvalidArgument());
  }
  EXPECT_TRUE(DecodeKeys(std::string(4 * kKeyBytes, 'k'), 4).ok());
  Result<std::vector<Key>> too_many = DecodeKeys(std::string(5 * kKeyBytes, 'k'), 4);
  ASSERT_FALSE(too_many.ok());
  EXPECT_TRUE(too_many.status().IsInvalidArgument());
  EXPECT_FALSE(DecodeKey(std::string(15, 'k')).ok());
  EXPECT_FALSE(DecodeKey(std::string(32, 'k')).ok());
}

TEST(RpcConvertTest, Media) {
  for (MediaType m : {MediaType::kDram, MediaType::kSsd}) {
    Result<MediaType> back = FromRpc(ToRpc(m));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, m);
  }
  EXPECT_FALSE(FromRpc(static_cast<rpc::Medium>(2)).ok());
  EXPECT_FALSE(FromRpc(static_cast<rpc::Medium>(-1)).ok());
}

TEST(RpcConvertTest, LayoutRoundTrips) {
  const KvLayout layout{61, 1, 36864};
  EXPECT_EQ(FromRpc(ToRpc(layout)), layout);
}

TEST(RpcConvertTest, WriteHintsRoundTrip) {
  WriteHints full;
  full.session = "s-1";
  full.prefix_tail = KeyFromId(9);
  full.turn = 4;
  full.prior_reply_tokens = 0;  // set, though zero: stays set
  full.context_tokens = 123456;
  full.shared_prefix = true;
  full.force_medium = MediaType::kSsd;
  Result<WriteHints> back = FromRpc(ToRpc(full));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->session, full.session);
  EXPECT_EQ(back->prefix_tail, full.prefix_tail);
  EXPECT_EQ(back->turn, full.turn);
  EXPECT_EQ(back->prior_reply_tokens, full.prior_reply_tokens);
  EXPECT_EQ(back->context_tokens, full.context_tokens);
  EXPECT_EQ(back->shared_prefix, full.shared_prefix);
  EXPECT_EQ(back->force_medium, full.force_medium);

  Result<WriteHints> none = FromRpc(ToRpc(WriteHints{}));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->session.empty());
  EXPECT_FALSE(none->prefix_tail.has_value());
  EXPECT_FALSE(none->prior_reply_tokens.has_value());
  EXPECT_FALSE(none->context_tokens.has_value());
  EXPECT_FALSE(none->force_medium.has_value());
  EXPECT_FALSE(none->shared_prefix);
}

TEST(RpcConvertTest, StatusRoundTripsThroughError) {
  const Status statuses[] = {
      Status::NotFound("a"),         Status::Corruption("b"), Status::InvalidArgument("c"),
      Status::IOError("d"),          Status::NoSpace("e"),    Status::Busy("f"),
      Status::Unsupported("g"),      Status::Aborted("h"),    Status::PermissionDenied("i"),
      Status::DeadlineExceeded("j"),
  };
  for (const Status& s : statuses) {
    const Status back = FromRpc(ToRpc(s));
    EXPECT_EQ(back.code(), s.code()) << s.ToString();
    EXPECT_EQ(back.message(), s.message());
  }
  // A newer peer's code, or an error claiming OK: an IOError that names the code.
  rpc::Error unknown;
  unknown.set_code(static_cast<rpc::Code>(99));
  unknown.set_message("quota");
  const Status s = FromRpc(unknown);
  EXPECT_TRUE(s.IsIOError());
  EXPECT_EQ(s.message(), "error code 99: quota");
  unknown.set_code(rpc::CODE_OK);
  EXPECT_TRUE(FromRpc(unknown).IsIOError());
}

TEST(RpcConvertTest, LookupRoundTrips) {
  const LookupResult lookup{17, MediaType::kSsd, 1 << 20, 7 << 20};
  Result<LookupResult> back = FromRpc(ToRpc(lookup));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->leading_hits, lookup.leading_hits);
  EXPECT_EQ(back->slowest_medium, lookup.slowest_medium);
  EXPECT_EQ(back->dram_bytes, lookup.dram_bytes);
  EXPECT_EQ(back->ssd_bytes, lookup.ssd_bytes);
  rpc::LookupReply bad = ToRpc(lookup);
  bad.set_slowest_medium(static_cast<rpc::Medium>(5));
  EXPECT_FALSE(FromRpc(bad).ok());
}

TEST(RpcConvertTest, EveryStatsCounterRoundTrips) {
  // StoreStats is counters only; give each a distinct value through its bytes.
  static_assert(sizeof(StoreStats) % sizeof(uint64_t) == 0);
  std::vector<uint64_t> values(sizeof(StoreStats) / sizeof(uint64_t));
  for (size_t i = 0; i < values.size(); ++i) values[i] = 1000 + i;
  StoreStats stats;
  std::memcpy(&stats, values.data(), sizeof(stats));
  const rpc::StatsReply reply = ToRpc(stats);
  // Every field of the message is set (all values are non-zero), none forgotten.
  std::vector<const google::protobuf::FieldDescriptor*> set;
  reply.GetReflection()->ListFields(reply, &set);
  EXPECT_EQ(set.size(), static_cast<size_t>(rpc::StatsReply::descriptor()->field_count()));
  std::vector<const google::protobuf::FieldDescriptor*> medium_set;
  reply.dram().GetReflection()->ListFields(reply.dram(), &medium_set);
  EXPECT_EQ(medium_set.size(), static_cast<size_t>(rpc::MediumStats::descriptor()->field_count()));
  const StoreStats back = FromRpc(reply);
  std::vector<uint64_t> got(values.size());
  std::memcpy(got.data(), &back, sizeof(back));
  EXPECT_EQ(got, values);
}

}  // namespace
}  // namespace flatcake::serve
