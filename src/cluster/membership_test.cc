// The cluster's etcd side against a real etcd (Debian's etcd-server) that each test starts on
// loopback with a temporary data directory (EtcdProcess).
#include "cluster/membership.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "cluster/etcd_process.h"

namespace flatcake::cluster {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = EtcdProcess::Start();
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    etcd_ = std::move(*started);
    auto eps = ParseEtcdEndpoints(etcd_->client_url());
    ASSERT_TRUE(eps.ok());
    endpoints_ = *eps;
  }

  MembershipOptions Options(const std::string& name, int64_t ttl = 3) {
    MembershipOptions o;
    o.etcd = endpoints_;
    o.cluster = "test";
    o.lease_ttl_s = ttl;
    o.self.name = name;
    o.self.socket = "/run/" + name + ".sock";
    o.self.dram_capacity_bytes = 1ull << 30;
    o.self.ssd_capacity_bytes = 4ull << 30;
    return o;
  }

  static bool HasIds(const std::vector<MemberInfo>& ms, std::set<uint32_t> ids) {
    std::set<uint32_t> got;
    for (const MemberInfo& m : ms) got.insert(m.node_id);
    return got == ids;
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::vector<serve::HostPort> endpoints_;
};

TEST(EtcdEndpoints, ParsesListsAndRefusesWhatItCannotSpeak) {
  auto eps = ParseEtcdEndpoints("http://127.0.0.1:2379, 10.0.0.2:2379,http://[::1]:2380/");
  ASSERT_TRUE(eps.ok()) << eps.status().ToString();
  ASSERT_EQ(eps->size(), 3u);
  EXPECT_EQ((*eps)[1].host, "10.0.0.2");
  EXPECT_EQ((*eps)[2].host, "::1");
  EXPECT_EQ((*eps)[2].port, 2380);
  EXPECT_EQ(ParseEtcdEndpoints("https://h:2379").status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(ParseEtcdEndpoints("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseEtcdEndpoints("h:1,,h:2").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseEtcdEndpoints("http://h").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(ValidateClusterName("prod-1.eu").code(), StatusCode::kOk);
  EXPECT_EQ(ValidateClusterName("a/b").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateClusterName("").code(), StatusCode::kInvalidArgument);
}

TEST_F(EtcdTest, ClientPutsRangesCreatesOnceAndLeasesExpire) {
  EtcdClient c(endpoints_, milliseconds(2000));
  ASSERT_TRUE(c.Put("/t/a", std::string("v\0\xff", 3)).ok());
  auto got = c.Get("/t/a");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ((*got)->value, std::string("v\0\xff", 3));  // binary-safe through base64
  EXPECT_FALSE(c.Get("/t/none")->has_value());
  auto first = c.CreateIfAbsent("/t/once", "1");
  auto second = c.CreateIfAbsent("/t/once", "2");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(*first);
  EXPECT_FALSE(*second);
  EXPECT_EQ(c.Get("/t/once")->value().value, "1");
  auto range = c.GetPrefix("/t/");
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->kvs.size(), 2u);
  EXPECT_GT(range->revision, 0);

  auto lease = c.GrantLease(2);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(c.Put("/t/leased", "x", *lease).ok());
  auto ttl = c.KeepAlive(*lease);
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(*ttl, 0);
  // Not renewed: gone within the TTL (etcd checks expiry every 500 ms).
  const auto t0 = std::chrono::steady_clock::now();
  while (c.Get("/t/leased")->has_value() && std::chrono::steady_clock::now() - t0 < seconds(6)) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_FALSE(c.Get("/t/leased")->has_value());
  EXPECT_LE(std::chrono::steady_clock::now() - t0, seconds(4));
  EXPECT_EQ(*c.KeepAlive(*lease), 0);  // a lease that is gone says so
  ASSERT_TRUE(c.Delete("/t/a").ok());
  EXPECT_FALSE(c.Get("/t/a")->has_value());
}

TEST_F(EtcdTest, WatchSeesPutsAndDeletesInOrder) {
  EtcdClient c(endpoints_, milliseconds(2000));
  std::atomic<bool> stop{false};
  std::vector<EtcdEvent> seen;
  Mutex mu;
  std::thread w([&] {
    const Status st = c.Watch("/w/", 0, stop, [&](const std::vector<EtcdEvent>& evs) {
      MutexLock lock(mu);
      seen.insert(seen.end(), evs.begin(), evs.end());
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
  });
  std::this_thread::sleep_for(milliseconds(300));  // the watch is created
  ASSERT_TRUE(c.Put("/w/1", "a").ok());
  ASSERT_TRUE(c.Put("/other", "b").ok());  // outside the prefix
  ASSERT_TRUE(c.Delete("/w/1").ok());
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    {
      MutexLock lock(mu);
      if (seen.size() >= 2 || std::chrono::steady_clock::now() - t0 > seconds(5)) break;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  stop = true;
  w.join();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].type, EtcdEvent::Type::kPut);
  EXPECT_EQ(seen[0].kv.key, "/w/1");
  EXPECT_EQ(seen[0].kv.value, "a");
  EXPECT_EQ(seen[1].type, EtcdEvent::Type::kDelete);
}

TEST_F(EtcdTest, ClientReportsAnUnreachableEtcdClearly) {
  auto port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  EtcdClient dead({serve::HostPort{"127.0.0.1", *port}}, milliseconds(500));
  const Status st = dead.Put("/x", "y");
  EXPECT_EQ(st.code(), StatusCode::kIOError);
  EXPECT_NE(st.message().find("etcd unreachable"), std::string::npos) << st.ToString();
  // The second endpoint answers when the first does not.
  EtcdClient failover({serve::HostPort{"127.0.0.1", *port}, endpoints_[0]}, milliseconds(500));
  EXPECT_TRUE(failover.Put("/x", "y").ok());
}

// Three nodes joining at once get three distinct NodeIDs; each sees all three; one that leaves
// is gone from the others' view at once; one killed (no renewal) within its lease TTL.
TEST_F(EtcdTest, MembersGetDistinctIdsSeeEachOtherAndDropOut) {
  std::vector<std::unique_ptr<Membership>> ms(3);
  std::vector<std::thread> joins;
  for (int i = 0; i < 3; ++i) {
    joins.emplace_back([&, i] {
      auto m = Membership::Join(Options("node" + std::to_string(i)));
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      ms[i] = std::move(*m);
    });
  }
  for (auto& t : joins) t.join();
  ASSERT_TRUE(ms[0] && ms[1] && ms[2]);
  const std::set<uint32_t> ids = {ms[0]->node_id(), ms[1]->node_id(), ms[2]->node_id()};
  ASSERT_EQ(ids, (std::set<uint32_t>{1, 2, 3}));
  for (auto& m : ms) {
    EXPECT_TRUE(m->WaitFor([&](const auto& v) { return HasIds(v, ids); }, seconds(5)));
  }
  const auto members = ms[0]->Members();
  ASSERT_EQ(members.size(), 3u);
  for (const MemberInfo& m : members) {
    EXPECT_EQ(m.ssd_capacity_bytes, 4ull << 30);
    EXPECT_EQ(m.lease_ttl_s, 3);
    EXPECT_TRUE(m.healthy(UnixNowMs()));
    EXPECT_EQ(m.socket, "/run/" + m.name + ".sock");
  }
  // A clean leave revokes the lease.
  const uint32_t left = ms[2]->node_id();
  ms[2]->Leave();
  std::set<uint32_t> two = ids;
  two.erase(left);
  EXPECT_TRUE(ms[0]->WaitFor([&](const auto& v) { return HasIds(v, two); }, seconds(2)));
  EtcdClient c(endpoints_, milliseconds(2000));
  auto listed = ListMembers(c, "test");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 2u);
  // The freed NodeID is taken again by the next node.
  auto again = Membership::Join(Options("node3"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->node_id(), left);
}

// A member whose lease is not renewed (a node killed or cut off: here a record put under a raw
// 2 s lease) drops out of the others' view within the TTL.
TEST_F(EtcdTest, ARecordWhoseLeaseIsNotRenewedDropsOutWithinTheTtl) {
  auto m = Membership::Join(Options("watcher"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EtcdClient c(endpoints_, milliseconds(2000));
  auto lease = c.GrantLease(2);
  ASSERT_TRUE(lease.ok());
  MemberInfo ghost;
  ghost.node_id = 77;
  ghost.name = "ghost";
  ghost.lease_ttl_s = 2;
  ghost.updated_unix_ms = UnixNowMs();
  ASSERT_TRUE(c.Put(ClusterPrefix("test") + "members/77", EncodeMember(ghost), *lease).ok());
  const uint32_t self = (*m)->node_id();
  ASSERT_TRUE((*m)->WaitFor([&](const auto& v) { return HasIds(v, {self, 77}); }, seconds(3)));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*m)->WaitFor([&](const auto& v) { return HasIds(v, {self}); }, seconds(5)));
  EXPECT_LE(std::chrono::steady_clock::now() - t0, milliseconds(3000));
}

// While etcd is down the members keep their view; when it is back (within the TTL or after) the
// node renews or rejoins under its old NodeID.
TEST_F(EtcdTest, MembersKeepTheirViewWhileEtcdIsDownAndRejoinAfter) {
  auto a = Membership::Join(Options("a", 2));
  auto b = Membership::Join(Options("b", 2));
  ASSERT_TRUE(a.ok() && b.ok());
  const uint32_t ida = (*a)->node_id(), idb = (*b)->node_id();
  ASSERT_TRUE((*a)->WaitFor([&](const auto& v) { return HasIds(v, {ida, idb}); }, seconds(3)));
  etcd_->Kill();
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_FALSE((*a)->etcd_reachable());
  EXPECT_TRUE(HasIds((*a)->Members(), {ida, idb}));  // the last view stays
  std::this_thread::sleep_for(milliseconds(2500));   // past the TTL
  ASSERT_TRUE(etcd_->Restart().ok());
  // etcd restores leases with a fresh TTL after a restart, or expires them; either way both
  // nodes are members again under their own NodeIDs.
  EXPECT_TRUE((*a)->WaitFor([&](const auto& v) { return HasIds(v, {ida, idb}); }, seconds(10)));
  const auto t0 = std::chrono::steady_clock::now();
  while (!(*a)->etcd_reachable() && std::chrono::steady_clock::now() - t0 < seconds(5)) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE((*a)->etcd_reachable());
  EXPECT_EQ((*a)->node_id(), ida);
  EXPECT_EQ((*b)->node_id(), idb);
}

TEST_F(EtcdTest, JoinRefusesBadOptionsAndAPreferredIdHeldByAnother) {
  MembershipOptions bad = Options("x");
  bad.lease_ttl_s = 1;
  EXPECT_EQ(Membership::Join(bad).status().code(), StatusCode::kInvalidArgument);
  bad = Options("x");
  bad.cluster = "no/slash";
  EXPECT_EQ(Membership::Join(bad).status().code(), StatusCode::kInvalidArgument);
  bad = Options("x");
  bad.preferred_node_id = kMaxNodeId + 1;
  EXPECT_EQ(Membership::Join(bad).status().code(), StatusCode::kInvalidArgument);
  MembershipOptions first = Options("first");
  first.preferred_node_id = 9;
  auto a = Membership::Join(first);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->node_id(), 9u);
  MembershipOptions second = Options("second");
  second.preferred_node_id = 9;  // held: it gets another
  auto b = Membership::Join(second);
  ASSERT_TRUE(b.ok());
  EXPECT_NE((*b)->node_id(), 9u);
  auto port = FreeLoopbackPort();
  MembershipOptions dead = Options("dead");
  dead.etcd = {serve::HostPort{"127.0.0.1", *port}};
  dead.etcd_timeout = milliseconds(300);
  EXPECT_EQ(Membership::Join(dead).status().code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace flatcake::cluster
