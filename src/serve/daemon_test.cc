// The node daemon in this process (serve/daemon.h) with RemoteStore clients (serve/remote_store.h)
// and raw protocol peers: every request, tenants and quotas, the peer check, broken frames,
// leases of clients that go away, a second daemon, restarts. The same daemon as a process of its
// own, with client processes killed, is serve_process_test.cc; under load, daemon_stress_test.cc.
#include "serve/daemon.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "serve/daemon_connection.h"
#include "serve/remote_store.h"
#include "serve/rpc_convert.h"
#include "serve/unix_socket.h"
#include "serve/wire.h"
#include "store/flat_store.h"
#include "testing/daemon_fixture.h"
#include "util/block_content.h"
#include "util/temp_dir.h"
#include "util/thread_annotations.h"

namespace flatcake::serve {
namespace {

using testing::kServeLayout;
using testing::PutBlocks;

class CountingObserver final : public DaemonObserver {
 public:
  void OnClientConnected(const ClientIdentity&) override { connected++; }
  void OnClientClosed(const ClientIdentity&, std::string_view) override { closed++; }
  void OnRequest(const ClientIdentity&, RequestType, bool ok) override {
    (ok ? requests_ok : requests_failed)++;
  }
  void OnProtocolError(const ClientIdentity&, ProtocolError, std::string_view) override {
    protocol_errors++;
  }
  void ObserveRestore(MediaType, double seconds) override { restores++; }

  std::atomic<int> connected{0}, closed{0}, requests_ok{0}, requests_failed{0}, protocol_errors{0},
      restores{0};
};

// Whether the peer closes `fd` within `timeout` (what it sent before is read and dropped).
bool ClosedByPeer(int fd, int timeout_ms = 3000) {
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0 && errno != EINTR) return true;
  }
}

std::vector<uint8_t> HelloFrame(const std::string& tenant, uint32_t version = kProtocolVersion) {
  rpc::Request r;
  r.set_id(1);
  r.mutable_hello()->set_protocol_version(version);
  r.mutable_hello()->set_min_protocol_version(version);
  r.mutable_hello()->set_tenant(tenant);
  auto f = EncodeFrame(r);
  EXPECT_TRUE(f.ok());
  return *f;
}

// A raw ReserveWrite of `keys` in DRAM, left unpublished.
Result<rpc::Response> ReserveDram(DaemonConnection& c, const std::vector<Key>& keys) {
  rpc::Request r;
  r.mutable_reserve_write()->set_keys(EncodeKeys(keys));
  *r.mutable_reserve_write()->mutable_layout() = ToRpc(kServeLayout);
  r.mutable_reserve_write()->mutable_hints()->set_force_medium(rpc::MEDIUM_DRAM);
  return c.Call(std::move(r), rpc::Response::kReserveWrite);
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    options_ = testing::SmallDaemonOptions(dir_.path());
    options_.observer = &observer_;
  }
  void Start() {
    daemon_ = testing::StartDaemon(options_);
    ASSERT_NE(daemon_, nullptr);
  }
  std::unique_ptr<RemoteStore> Client(const std::string& tenant = "t") {
    return testing::ConnectClient(options_.socket_path, tenant);
  }
  // A raw peer that has said Hello (the arena descriptor it received is dropped).
  UniqueFd RawHello(const std::string& tenant = "raw") {
    auto fd = ConnectUnix(options_.socket_path, std::chrono::milliseconds(2000));
    EXPECT_TRUE(fd.ok()) << fd.status().ToString();
    if (!fd.ok()) return UniqueFd();
    EXPECT_TRUE(SendFrame(fd->get(), HelloFrame(tenant)).ok());
    auto reply = RecvFrame(fd->get(), {}, std::chrono::milliseconds(2000));
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return std::move(*fd);
  }

  TempDir dir_;
  CountingObserver observer_;
  DaemonOptions options_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DaemonTest, PutLookupAndRestoreOnBothMediaServeEveryByte) {
  Start();
  auto c = Client();
  ASSERT_NE(c, nullptr);
  for (MediaType m : {MediaType::kDram, MediaType::kSsd}) {
    const std::vector<Key> keys = MakeKeys(m == MediaType::kDram ? 1 : 2, 0, 6);
    auto put = PutBlocks(*c, keys, m);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    EXPECT_EQ(put->written, 6u);
    EXPECT_EQ(put->medium, m);
    const LookupResult l = c->Lookup(keys);
    EXPECT_EQ(l.leading_hits, 6u);
    EXPECT_EQ(l.slowest_medium, m);
    EXPECT_EQ(c->Exists(keys), 6u);

    // A miss in the middle, layers reported in order, WaitLayer, every byte.
    std::vector<Key> ask = keys;
    ask.insert(ask.begin() + 3, KeyFromId(12345, 9));
    HostBlocks dst(kServeLayout, ask.size());
    std::vector<uint32_t> layers;
    RestoreOptions ro;
    ro.on_layer = [&layers](uint32_t l) { layers.push_back(l); };
    auto h = c->Restore(ask, kServeLayout, dst.buffers(), ro);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_TRUE((*h)->WaitLayer(1).ok());
    EXPECT_FALSE((*h)->WaitLayer(2).ok());
    auto r = (*h)->Wait();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->hits, 6u);
    EXPECT_EQ(r->leading_hits, 3u);
    EXPECT_EQ(r->found[3], 0);
    EXPECT_EQ(layers, (std::vector<uint32_t>{0, 1}));
    testing::ExpectFoundBlocksExact(ask, r->found, dst);
    EXPECT_EQ(m == MediaType::kSsd ? r->bytes_from_ssd : r->bytes_from_dram,
              6 * kServeLayout.block_bytes());

    auto again = PutBlocks(*c, keys, m);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->written, 0u);
    EXPECT_EQ(again->already_present, 6u);
  }
  // The reads the client reported count in the daemon's statistics, and the store's own.
  const StoreStats st = c->GetStats();
  EXPECT_EQ(st.hits, 12u);
  EXPECT_EQ(st.misses, 2u);
  EXPECT_EQ(st.dram.blocks_live + st.ssd.blocks_live, 12u);
  EXPECT_EQ(daemon_->store().GetStats().hits, 12u);
  EXPECT_EQ(observer_.restores.load(), 2);
  EXPECT_EQ(c->Reclaim(MediaType::kDram, 0), 0u);  // not served through the daemon
  EXPECT_EQ(c->GetInfo().ssd_files, 8u);
  EXPECT_EQ(c->options().dram_bytes, 8 * kMiB);
}

TEST_F(DaemonTest, ABlockStoredWithAnotherLayoutFailsTheRestore) {
  Start();
  auto c = Client();
  const std::vector<Key> keys = MakeKeys(3, 0, 2);
  ASSERT_TRUE(PutBlocks(*c, keys, MediaType::kDram).ok());
  const KvLayout other{4, 2, 4096};
  HostBlocks dst(other, keys.size());
  auto h = c->Restore(keys, other, dst.buffers());
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE((*h)->Wait().status().IsInvalidArgument());
  EXPECT_EQ(testing::ServedBlocks(*c, keys, kServeLayout), testing::AllOf(2, 1));
}

TEST_F(DaemonTest, TenantsNeverSeeEachOthersKeys) {
  Start();
  auto a = Client("alpha");
  auto b = Client("beta");
  const std::vector<Key> keys = MakeKeys(4, 0, 4);
  ASSERT_TRUE(PutBlocks(*a, keys, MediaType::kDram).ok());
  EXPECT_EQ(b->Exists(keys), 0u);
  EXPECT_EQ(testing::ServedBlocks(*b, keys, kServeLayout), testing::AllOf(4, 0));
  // Beta writes the same keys with bytes of its own: both are stored, each tenant reads its own.
  HostBlocks mine(kServeLayout, keys.size());
  std::memset(mine.bytes.data(), 0x5A, mine.bytes.size());
  auto put = b->Put(keys, kServeLayout, mine.buffers());
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->written, 4u);
  HostBlocks got(kServeLayout, keys.size());
  auto r = b->Get(keys, kServeLayout, got.buffers());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hits, 4u);
  EXPECT_EQ(got.bytes, mine.bytes);
  EXPECT_EQ(testing::ServedBlocks(*a, keys, kServeLayout), testing::AllOf(4, 1));
  // A third tenant, and the store itself under the plain keys, see none of them.
  EXPECT_EQ(Client("gamma")->Exists(keys), 0u);
  EXPECT_EQ(daemon_->store().Lookup(keys).leading_hits, 0u);
}

TEST(TenantNamespaceTest, KeysSessionsAndChainTailsAreTheTenants) {
  const TenantNamespace a("a"), b("b"), ab("ab");
  const Key k = KeyFromId(1);
  EXPECT_NE(a.StoredKey(k), b.StoredKey(k));
  EXPECT_NE(a.StoredKey(k), ab.StoredKey(k));
  EXPECT_NE(a.StoredKey(k), k);
  EXPECT_EQ(a.StoredKey(k), TenantNamespace("a").StoredKey(k));  // stable: no state
  WriteHints h;
  h.session = "s1";
  h.prefix_tail = k;
  const WriteHints stored = a.StoredHints(h);
  EXPECT_EQ(stored.session, "t/a/s1");
  EXPECT_EQ(*stored.prefix_tail, a.StoredKey(k));
  EXPECT_TRUE(a.StoredHints(WriteHints{}).session.empty());  // inferred sessions stay inferred
}

TEST_F(DaemonTest, AReservationPastTheTenantsQuotaIsNoSpace) {
  // A 4-block segment of kServeLayout takes 64 KiB.
  options_.tenant_quotas["small"] = TenantQuota{64 * kKiB, 0};
  Start();
  auto small = Client("small");
  auto other = Client("other");
  ASSERT_TRUE(PutBlocks(*small, MakeKeys(5, 0, 4), MediaType::kDram).ok());
  auto over = PutBlocks(*small, MakeKeys(5, 4, 4), MediaType::kDram);
  ASSERT_FALSE(over.ok());
  EXPECT_TRUE(over.status().IsNoSpace()) << over.status().ToString();
  EXPECT_NE(over.status().message().find("quota"), std::string_view::npos);
  EXPECT_EQ(small->Exists(MakeKeys(5, 4, 4)), 0u);  // nothing of it is visible
  // SSD has no quota for it; other tenants have none at all.
  EXPECT_TRUE(PutBlocks(*small, MakeKeys(5, 4, 4), MediaType::kSsd).ok());
  EXPECT_TRUE(PutBlocks(*other, MakeKeys(5, 0, 8), MediaType::kDram).ok());
  bool seen = false;
  for (const TenantUsage& u : daemon_->TenantUsages()) {
    if (u.tenant != "small") continue;
    seen = true;
    EXPECT_EQ(u.used_bytes[0], 64 * kKiB);
    EXPECT_EQ(u.reserved_bytes[0], 0u);
    EXPECT_EQ(u.used_bytes[1], 64 * kKiB);
  }
  EXPECT_TRUE(seen);
  // Once its scope is reclaimed, the tenant's DRAM is its own again.
  EXPECT_GT(daemon_->store().Reclaim(MediaType::kDram, 0), 0u);
  EXPECT_TRUE(PutBlocks(*small, MakeKeys(5, 8, 4), MediaType::kDram).ok());
}

TEST_F(DaemonTest, APeerOutsideTheAllowListIsRefused) {
  options_.allow = PeerAllowList{{::geteuid() + 1}, {}};
  Start();
  auto c =
      RemoteStore::Connect("unix://" + options_.socket_path, "t", testing::SmallClientOptions());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied) << c.status().ToString();
  EXPECT_EQ(observer_.connected.load(), 0);
}

TEST_F(DaemonTest, BrokenFramesCloseOnlyTheirConnection) {
  Start();
  auto good = Client();
  ASSERT_TRUE(PutBlocks(*good, MakeKeys(6, 0, 2), MediaType::kDram).ok());
  const auto connect = [&] {
    auto fd = ConnectUnix(options_.socket_path, std::chrono::milliseconds(2000));
    EXPECT_TRUE(fd.ok());
    return std::move(*fd);
  };
  // Garbage before Hello.
  {
    UniqueFd fd = connect();
    const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_TRUE(
        TEST_SendBytes(fd.get(), {reinterpret_cast<const uint8_t*>(junk.data()), junk.size()}, {})
            .ok());
    EXPECT_TRUE(ClosedByPeer(fd.get()));
  }
  // A truncated Hello: the header announces more than comes.
  {
    UniqueFd fd = connect();
    std::vector<uint8_t> hello = HelloFrame("t");
    hello.resize(hello.size() - 3);
    ASSERT_TRUE(TEST_SendBytes(fd.get(), hello, {}).ok());
    ::shutdown(fd.get(), SHUT_WR);
    EXPECT_TRUE(ClosedByPeer(fd.get()));
  }
  // After Hello: a length past the limit, random bytes, a payload that does not parse.
  for (int kind = 0; kind < 3; ++kind) {
    UniqueFd fd = RawHello();
    std::vector<uint8_t> bad(kFrameHeaderBytes);
    EncodeFrameHeader(FrameHeader{kProtocolVersion, 0, kind == 0 ? 64u << 20 : 8u},
                      std::span<uint8_t, kFrameHeaderBytes>(bad.data(), kFrameHeaderBytes));
    if (kind == 1) bad = {0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    if (kind == 2) bad.insert(bad.end(), {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
    ASSERT_TRUE(TEST_SendBytes(fd.get(), bad, {}).ok());
    EXPECT_TRUE(ClosedByPeer(fd.get())) << "kind " << kind;
  }
  // A request before Hello.
  {
    UniqueFd fd = connect();
    rpc::Request r;
    r.set_id(7);
    r.mutable_stats();
    ASSERT_TRUE(SendFrame(fd.get(), *EncodeFrame(r)).ok());
    auto reply = RecvFrame(fd.get(), {}, std::chrono::milliseconds(2000));
    ASSERT_TRUE(reply.ok());
    auto resp = ParseResponse(reply->payload);
    ASSERT_TRUE(resp.ok());
    EXPECT_EQ(resp->id(), 7u);
    EXPECT_EQ(resp->error().code(), rpc::CODE_INVALID_ARGUMENT);
    EXPECT_TRUE(ClosedByPeer(fd.get()));
  }
  EXPECT_TRUE(testing::Eventually([&] { return observer_.protocol_errors.load() == 6; }))
      << observer_.protocol_errors.load();
  // The well-behaved client was served throughout.
  EXPECT_EQ(testing::ServedBlocks(*good, MakeKeys(6, 0, 2), kServeLayout), testing::AllOf(2, 1));
  EXPECT_TRUE(good->connected());
}

TEST_F(DaemonTest, AWholeFrameWithABadRequestGetsAnErrorAndTheConnectionCarriesOn) {
  Start();
  UniqueFd fd = RawHello();
  rpc::Request r;
  r.set_id(5);
  r.mutable_lookup()->set_keys(std::string(15, 'x'));  // not a whole key
  ASSERT_TRUE(SendFrame(fd.get(), *EncodeFrame(r)).ok());
  r.set_id(6);
  r.mutable_stats();
  ASSERT_TRUE(SendFrame(fd.get(), *EncodeFrame(r)).ok());
  for (uint64_t id : {5u, 6u}) {
    auto frame = RecvFrame(fd.get(), {}, std::chrono::milliseconds(2000));
    ASSERT_TRUE(frame.ok()) << frame.status().ToString();
    auto resp = ParseResponse(frame->payload);
    ASSERT_TRUE(resp.ok());
    EXPECT_EQ(resp->id(), id);
    EXPECT_EQ(resp->has_error(), id == 5);
    if (id == 5) EXPECT_EQ(resp->error().code(), rpc::CODE_INVALID_ARGUMENT);
  }
}

// Request id 0 names no request: refused with an error, not served; the connection goes on.
TEST_F(DaemonTest, RequestIdZeroIsRefused) {
  Start();
  UniqueFd fd = RawHello();
  rpc::Request r;
  r.set_id(0);
  r.mutable_stats();
  ASSERT_TRUE(SendFrame(fd.get(), *EncodeFrame(r)).ok());
  auto frame = RecvFrame(fd.get(), {}, std::chrono::milliseconds(2000));
  ASSERT_TRUE(frame.ok()) << frame.status().ToString();
  auto resp = ParseResponse(frame->payload);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->error().code(), rpc::CODE_INVALID_ARGUMENT);
  EXPECT_FALSE(resp->has_stats());
  r.set_id(9);
  ASSERT_TRUE(SendFrame(fd.get(), *EncodeFrame(r)).ok());
  frame = RecvFrame(fd.get(), {}, std::chrono::milliseconds(2000));
  ASSERT_TRUE(frame.ok());
  resp = ParseResponse(frame->payload);
  ASSERT_TRUE(resp.ok());
  EXPECT_TRUE(resp->has_stats());
}

// After Hello, a silent connection stays open, but one that sends a frame short of its last
// byte is closed once frame_timeout passes (it used to be held open forever).
TEST_F(DaemonTest, AFrameThatStopsHalfwayIsClosedAfterTheFrameTimeout) {
  options_.frame_timeout = std::chrono::milliseconds(300);
  Start();
  UniqueFd idle = RawHello();
  UniqueFd half = RawHello();
  rpc::Request r;
  r.set_id(3);
  r.mutable_stats();
  std::vector<uint8_t> bytes = *EncodeFrame(r);
  bytes.pop_back();
  ASSERT_TRUE(TEST_SendBytes(half.get(), bytes, {}).ok());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(ClosedByPeer(half.get(), 3000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_FALSE(ClosedByPeer(idle.get(), 600));  // silence between frames is no error
  r.set_id(4);
  ASSERT_TRUE(SendFrame(idle.get(), *EncodeFrame(r)).ok());
  auto frame = RecvFrame(idle.get(), {}, std::chrono::milliseconds(2000));
  ASSERT_TRUE(frame.ok()) << frame.status().ToString();
}

TEST_F(DaemonTest, AClientOfNoCommonVersionIsUnsupported) {
  Start();
  auto fd = ConnectUnix(options_.socket_path, std::chrono::milliseconds(2000));
  ASSERT_TRUE(fd.ok());
  ASSERT_TRUE(SendFrame(fd->get(), HelloFrame("t", kProtocolVersion + 1)).ok());
  auto frame = RecvFrame(fd->get(), {}, std::chrono::milliseconds(2000));
  ASSERT_TRUE(frame.ok()) << frame.status().ToString();
  auto resp = ParseResponse(frame->payload);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->error().code(), rpc::CODE_UNSUPPORTED);
  EXPECT_TRUE(ClosedByPeer(fd->get()));
}

TEST_F(DaemonTest, AWriterThatGoesAwayPublishesNothingAndItsSpaceIsReused) {
  Start();
  const uint64_t used_before = daemon_->store().GetStats().dram.used_bytes;
  const std::vector<Key> keys = MakeKeys(7, 0, 4);
  {
    auto c = DaemonConnection::Open(options_.socket_path, "t", testing::SmallClientOptions());
    ASSERT_TRUE(c.ok());
    auto reply = ReserveDram(**c, keys);
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_GT(daemon_->store().GetStats().dram.used_bytes, used_before);
    // Half written, then the connection goes (as it does when its process dies).
    std::memset((*c)->media().access().dram + reply->reserve_write().segments(0).offset(), 1, 4096);
  }
  EXPECT_TRUE(testing::Eventually(
      [&] { return daemon_->store().GetStats().dram.used_bytes == used_before; }));
  auto c = Client();
  EXPECT_EQ(c->Exists(keys), 0u);
  auto put = PutBlocks(*c, keys, MediaType::kDram);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->written, 4u);  // the keys were free again
  EXPECT_EQ(testing::ServedBlocks(*c, keys, kServeLayout), testing::AllOf(4, 1));
  for (const TenantUsage& u : daemon_->TenantUsages()) EXPECT_EQ(u.reserved_bytes[0], 0u);
}

// DaemonOptions::write_quarantine: the extents of a writer that went away stay held for a while
// (late writes of its ring may still land there), then come back.
TEST_F(DaemonTest, AWriterThatGoesAwayHoldsItsExtentsForTheQuarantine) {
  options_.write_quarantine = std::chrono::milliseconds(1500);
  Start();
  const uint64_t used_before = daemon_->store().GetStats().dram.used_bytes;
  const std::vector<Key> keys = MakeKeys(8, 0, 4);
  {
    auto c = DaemonConnection::Open(options_.socket_path, "t", testing::SmallClientOptions());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(ReserveDram(**c, keys).ok());
  }
  const auto gone = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_GT(daemon_->store().GetStats().dram.used_bytes, used_before) << "released too early";
  EXPECT_TRUE(testing::Eventually(
      [&] { return daemon_->store().GetStats().dram.used_bytes == used_before; }));
  EXPECT_GE(std::chrono::steady_clock::now() - gone, std::chrono::milliseconds(1400));
  auto c = Client();
  auto put = PutBlocks(*c, keys, MediaType::kDram);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->written, 4u);
}

TEST_F(DaemonTest, AReaderThatGoesAwayReleasesItsPins) {
  Start();
  auto c = Client();
  const std::vector<Key> keys = MakeKeys(8, 0, 4);
  ASSERT_TRUE(PutBlocks(*c, keys, MediaType::kDram).ok());
  {
    auto raw = DaemonConnection::Open(options_.socket_path, "t", testing::SmallClientOptions());
    ASSERT_TRUE(raw.ok());
    rpc::Request r;
    r.mutable_pin_read()->set_keys(EncodeKeys(keys));
    *r.mutable_pin_read()->mutable_layout() = ToRpc(kServeLayout);
    auto reply = (*raw)->Call(std::move(r), rpc::Response::kPinRead);
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->pin_read().hits(), 4u);
    // Pinned: reclamation leaves the scope alone.
    EXPECT_EQ(daemon_->store().Reclaim(MediaType::kDram, 0), 0u);
  }
  EXPECT_TRUE(
      testing::Eventually([&] { return daemon_->store().Reclaim(MediaType::kDram, 0) > 0; }));
  EXPECT_EQ(c->Exists(keys), 0u);
}

TEST_F(DaemonTest, ASecondDaemonOnTheSocketOrThePoolIsRefused) {
  Start();
  DaemonOptions same_socket = options_;
  same_socket.store.ssd_dirs.clear();  // DRAM-only: only the socket is shared
  auto second = Daemon::Start(same_socket);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kBusy);
  EXPECT_NE(second.status().message().find("another flatcake serve"), std::string_view::npos)
      << second.status().ToString();
  DaemonOptions same_pool = options_;
  same_pool.socket_path = dir_.File("other.sock");
  auto third = Daemon::Start(same_pool);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kBusy) << third.status().ToString();
  // The first one serves on.
  EXPECT_TRUE(PutBlocks(*Client(), MakeKeys(9, 0, 1), MediaType::kDram).ok());
}

TEST_F(DaemonTest, PastMaxClientsAConnectionIsBusy) {
  options_.max_clients = 1;
  Start();
  auto first = Client();
  ASSERT_NE(first, nullptr);
  auto second = RemoteStore::Connect(options_.socket_path, "t", testing::SmallClientOptions());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kBusy) << second.status().ToString();
}

TEST_F(DaemonTest, ClientsReconnectToARestartedDaemonAndReadTheRecoveredPool) {
  Start();
  auto c = Client();
  const std::vector<Key> keys = MakeKeys(10, 0, 8);
  ASSERT_TRUE(PutBlocks(*c, keys, MediaType::kSsd).ok());
  daemon_->Shutdown();
  daemon_.reset();
  // The daemon is away: misses, a failed put, no statistics.
  EXPECT_EQ(c->Exists(keys), 0u);
  EXPECT_EQ(testing::ServedBlocks(*c, keys, kServeLayout), testing::AllOf(8, 0));
  auto put = PutBlocks(*c, MakeKeys(10, 100, 1), MediaType::kSsd);
  ASSERT_FALSE(put.ok());
  EXPECT_TRUE(put.status().IsIOError()) << put.status().ToString();
  EXPECT_FALSE(c->connected());
  Start();
  std::this_thread::sleep_for(testing::SmallClientOptions().reconnect_interval);
  EXPECT_EQ(c->Exists(keys), 8u);
  EXPECT_EQ(testing::ServedBlocks(*c, keys, kServeLayout), testing::AllOf(8, 1));
  EXPECT_EQ(c->reconnects(), 1u);
  EXPECT_EQ(daemon_->store().GetInfo().recovered_blocks, 8u);
}

TEST_F(DaemonTest, ARestoreWhoseConnectionBreaksMidReadFails) {
  Start();
  auto c = Client();
  const std::vector<Key> keys = MakeKeys(12, 0, 4);
  ASSERT_TRUE(PutBlocks(*c, keys, MediaType::kDram).ok());
  Mutex mu;
  CondVar cv;
  bool in_layer = false, go_on = false;
  RestoreOptions ro;
  ro.on_layer = [&](uint32_t l) {
    MutexLock lock(mu);
    in_layer = true;
    cv.NotifyAll();
    while (!go_on) cv.Wait(mu);
  };
  HostBlocks dst(kServeLayout, keys.size());
  auto h = c->Restore(keys, kServeLayout, dst.buffers(), ro);  // its data half runs on the
  ASSERT_TRUE(h.ok());                                         // client's task thread
  {
    MutexLock lock(mu);
    while (!in_layer) cv.Wait(mu);
  }
  daemon_->Shutdown();  // its pins go with the connection
  EXPECT_TRUE(testing::Eventually([&] { return !c->connected(); }));
  {
    MutexLock lock(mu);
    go_on = true;
    cv.NotifyAll();
  }
  auto r = (*h)->Wait();
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsIOError()) << r.status().ToString();
}

TEST_F(DaemonTest, ShutdownFailsTheCallsOfClientsAndRemovesTheSocket) {
  Start();
  auto c = Client();
  ASSERT_TRUE(PutBlocks(*c, MakeKeys(11, 0, 2), MediaType::kDram).ok());
  daemon_->Shutdown();
  EXPECT_NE(::access(options_.socket_path.c_str(), F_OK), 0);
  EXPECT_EQ(observer_.closed.load(), observer_.connected.load());
  EXPECT_EQ(c->GetStats().puts, 0u);  // zeros while the daemon is away
}

}  // namespace
}  // namespace flatcake::serve
