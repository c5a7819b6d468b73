// UcxNode between two nodes in one process (UCX picks TCP on loopback: ucx_transport.h).
#include "cluster/ucx_transport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>

#include "testing/netns_lab.h"

namespace flatcake::cluster {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<UcxNode> NewNode() {
  // UCX on loopback only: a worker's address names every interface up when it is made, and a
  // bridge that cluster_process_test (run beside this one) adds and removes would be tried.
  static const testing::UcxEnvironment env("tcp", "lo");
  auto n = UcxNode::Create();
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  return n.ok() ? std::move(*n) : nullptr;
}

std::string Pattern(size_t n, uint8_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return s;
}

TEST(UcxTransport, CallsGetRepliesSmallAndLargeAndErrorsAsSent) {
  auto a = NewNode(), b = NewNode();
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(b->address().empty());
  // Echo: the reply carries the request's header reversed and its data.
  b->SetHandler(7, [](std::string h, std::string d, UcxNode::Responder r) {
    std::reverse(h.begin(), h.end());
    r(Status::OK(), std::move(h), std::move(d));
  });
  b->SetHandler(8, [](std::string, std::string, UcxNode::Responder r) {
    r(Status::NoSpace("pool full"), {}, {});
  });
  auto small = a->CallSync(b->address(), 7, "abc", "payload", milliseconds(5000));
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_EQ(small->first, "cba");
  EXPECT_EQ(small->second, "payload");
  const std::string big = Pattern(8 << 20, 3);  // rendezvous both ways
  auto large = a->CallSync(b->address(), 7, "h", big, milliseconds(10000));
  ASSERT_TRUE(large.ok()) << large.status().ToString();
  EXPECT_TRUE(large->second == big);
  // Headers past what a UCX header may hold travel in the data, with or without data.
  const std::string long_header = Pattern(40000, 5);
  auto lh = a->CallSync(b->address(), 7, long_header, "", milliseconds(5000));
  ASSERT_TRUE(lh.ok()) << lh.status().ToString();
  EXPECT_EQ(lh->first, std::string(long_header.rbegin(), long_header.rend()));
  auto lhd = a->CallSync(b->address(), 7, long_header, big, milliseconds(10000));
  ASSERT_TRUE(lhd.ok()) << lhd.status().ToString();
  EXPECT_TRUE(lhd->second == big);
  auto err = a->CallSync(b->address(), 8, "", "", milliseconds(5000));
  EXPECT_EQ(err.status().code(), StatusCode::kNoSpace);
  EXPECT_NE(err.status().message().find("pool full"), std::string::npos);
  auto none = a->CallSync(b->address(), 9, "", "", milliseconds(5000));
  EXPECT_EQ(none.status().code(), StatusCode::kUnsupported);
}

TEST(UcxTransport, ManyConcurrentCallsEachGetTheirOwnReply) {
  auto a = NewNode(), b = NewNode();
  ASSERT_TRUE(a && b);
  b->SetHandler(1, [](std::string h, std::string d, UcxNode::Responder r) {
    // Answered from another thread, later.
    std::thread([h = std::move(h), d = std::move(d), r = std::move(r)]() mutable {
      r(Status::OK(), std::move(h), std::move(d));
    }).detach();
  });
  std::vector<std::thread> ts;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const std::string h = std::to_string(t) + ":" + std::to_string(i);
        auto r = a->CallSync(b->address(), 1, h, Pattern(100 + i * 1000, i), milliseconds(10000));
        if (r.ok() && r->first == h && r->second == Pattern(100 + i * 1000, i)) good++;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(good.load(), 200);
}

TEST(UcxTransport, GetsReadRegisteredMemoryByteExact) {
  auto a = NewNode(), b = NewNode();
  ASSERT_TRUE(a && b);
  std::string region = Pattern(64 << 20, 9);
  auto reg = b->Register(region.data(), region.size());
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  const uint64_t base = reinterpret_cast<uint64_t>(region.data());
  std::string dst(8 << 20, '\0');
  auto local = a->Register(dst.data(), dst.size());
  ASSERT_TRUE(local.ok());
  // Eight 1 MiB pieces from scattered offsets.
  std::vector<UcxNode::GetPiece> pieces;
  for (size_t i = 0; i < 8; ++i) {
    pieces.push_back({dst.data() + (i << 20), base + ((7 - i) * 5 << 20), size_t{1} << 20});
  }
  ASSERT_TRUE(a->GetSync(b->address(), reg->rkey, pieces, milliseconds(10000)).ok());
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_EQ(0, std::memcmp(dst.data() + (i << 20), region.data() + ((7 - i) * 5 << 20), 1 << 20))
        << "piece " << i;
  }
  // A second get reuses the endpoint and the unpacked key.
  std::string one(4096, '\0');
  ASSERT_TRUE(
      a->GetSync(b->address(), reg->rkey, {{one.data(), base + 12345, 4096}}, milliseconds(5000))
          .ok());
  EXPECT_EQ(one, region.substr(12345, 4096));
  a->Unregister(local->handle);
  b->Unregister(reg->handle);
}

TEST(UcxTransport, APeerThatGoesAwayFailsCallsWithinTheirTimeout) {
  auto a = NewNode();
  ASSERT_TRUE(a);
  std::string addr;
  {
    auto b = NewNode();
    ASSERT_TRUE(b);
    addr = b->address();
    b->SetHandler(1, [](std::string, std::string, UcxNode::Responder) {
      // never answers
    });
    const auto t0 = std::chrono::steady_clock::now();
    auto r = a->CallSync(addr, 1, "", "", milliseconds(300));
    EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2000));
  }  // b destroyed
  const auto t0 = std::chrono::steady_clock::now();
  auto r = a->CallSync(addr, 1, "", "", milliseconds(1500));
  EXPECT_FALSE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(4000));
  std::string buf(4096, '\0');
  const Status g = a->GetSync(addr, "not a key", {{buf.data(), 0, 4096}}, milliseconds(1000));
  EXPECT_FALSE(g.ok());
}

TEST(UcxTransport, AStoppedNodeFailsAtOnceAndItsPeersSeeItGone) {
  auto a = NewNode();
  auto b = NewNode();
  ASSERT_TRUE(a && b);
  std::string region(1 << 20, 'r');
  auto reg = b->Register(region.data(), region.size());
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  std::atomic<int> handled{0};
  b->SetHandler(1, [&](std::string, std::string, UcxNode::Responder respond) {
    handled++;
    respond(Status::OK(), "pong", {});
  });
  ASSERT_TRUE(a->CallSync(b->address(), 1, "", "", milliseconds(5000)).ok());
  b->Quiesce();  // from another thread: returns once the progress thread has caught up
  b->Stop();
  b->Stop();     // idempotent
  b->Quiesce();  // a stopped node: at once
  // Its own calls, gets and registrations fail at once, with Aborted.
  const auto t0 = std::chrono::steady_clock::now();
  auto r = b->CallSync(a->address(), 1, "", "", milliseconds(60000));
  EXPECT_EQ(r.status().code(), StatusCode::kAborted);
  std::string buf(4096, '\0');
  EXPECT_EQ(
      b->GetSync(a->address(), reg->rkey, {{buf.data(), 0, 4096}}, milliseconds(60000)).code(),
      StatusCode::kAborted);
  EXPECT_EQ(b->Register(buf.data(), buf.size()).status().code(), StatusCode::kAborted);
  b->Unregister(reg->handle);  // released by the stop already: a no-op
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000));
  // Its peers: its handler is gone with its worker, and so is its registered memory.
  auto after = a->CallSync(b->address(), 1, "", "", milliseconds(1500));
  EXPECT_FALSE(after.ok());
  const Status g = a->GetSync(b->address(), reg->rkey,
                              {{buf.data(), reinterpret_cast<uint64_t>(region.data()), 4096}},
                              milliseconds(1500));
  EXPECT_FALSE(g.ok());
  EXPECT_EQ(handled.load(), 1);
  // A peer found gone is not connected to again at once: the calls right after fail without a
  // connection attempt, saying so (each attempt would cost a connection and a UCX error line).
  for (int i = 0; i < 20; ++i) {
    auto again = a->CallSync(b->address(), 1, "", "", milliseconds(1500));
    ASSERT_FALSE(again.ok());
    EXPECT_NE(again.status().ToString().find("peer unreachable"), std::string::npos)
        << again.status().ToString();
  }
}

}  // namespace
}  // namespace flatcake::cluster
