// Three real `flatcake serve --etcd` daemons (cluster_process_fixture.h): they join under
// distinct NodeIDs; one killed with SIGKILL drops out within its lease TTL; restarted on its pool
// it rejoins under its old NodeID; with etcd stopped the daemons keep serving, and they are members
// again once it is back; sessions are restored byte-exact through any node, and a home killed
// mid-restore turns its blocks into misses; a partition; bad cluster flags.
#include <gtest/gtest.h>

#include "cluster/cluster_process_fixture.h"

namespace flatcake::cluster::process_test {
namespace {

TEST_F(ClusterProcessTest, DaemonsJoinDropOutRejoinAndRideOutAnEtcdOutage) {
  std::vector<std::unique_ptr<Child>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(StartNode(i));
  auto ids = WaitMembers({"node0", "node1", "node2"});
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ((std::set<uint32_t>{ids["node0"], ids["node1"], ids["node2"]}),
            (std::set<uint32_t>{1, 2, 3}));
  {
    auto [rc, j] = Status(etcd_->client_url());
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(j["healthy"].get<int>(), 3);
    for (const json& m : j["members"]) {
      const int i = m["name"].get<std::string>().back() - '0';
      EXPECT_EQ(m["dram_capacity_bytes"].get<uint64_t>(), uint64_t(8 + 8 * i) << 20);
      EXPECT_EQ(m["ssd_capacity_bytes"].get<uint64_t>(), uint64_t{64} << 20);
      EXPECT_EQ(m["socket"].get<std::string>(), Socket(i));
      EXPECT_EQ(m["lease_ttl_s"].get<int>(), 2);
    }
  }

  // SIGKILL: no leave; the lease runs out.
  const uint32_t id1 = ids["node1"];
  nodes[1]->Kill(SIGKILL);
  nodes[1]->Wait();
  const auto t0 = std::chrono::steady_clock::now();
  WaitMembers({"node0", "node2"});
  EXPECT_LE(std::chrono::steady_clock::now() - t0, milliseconds(4000));  // TTL 2 s + checks

  // Restarted on its pool: the old NodeID again.
  nodes[1] = StartNode(1);
  ids = WaitMembers({"node0", "node1", "node2"});
  EXPECT_EQ(ids["node1"], id1);

  // etcd down: status says so (exit 1); the daemons keep serving their clients.
  etcd_->Stop();
  auto [rc_down, j_down] = Status(etcd_->client_url());
  EXPECT_EQ(rc_down, 1);
  std::this_thread::sleep_for(milliseconds(3000));  // past the TTL
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Answers(i)) << "node" << i;
  // etcd back: every node is a member again, each under its own NodeID.
  ASSERT_TRUE(etcd_->Restart().ok());
  const auto back = WaitMembers({"node0", "node1", "node2"}, seconds(15));
  EXPECT_EQ(back, ids);

  // A clean stop leaves at once (the lease is revoked).
  nodes[2]->Kill(SIGTERM);
  EXPECT_EQ(nodes[2]->Wait(), 0);
  const auto t1 = std::chrono::steady_clock::now();
  WaitMembers({"node0", "node1"});
  EXPECT_LE(std::chrono::steady_clock::now() - t1, milliseconds(1500));
}

// Sessions written through node 0 whose homes are nodes 1 (SSD only) and 2 (DRAM) are found and
// restored byte-exact through the other nodes, layers in order; a home killed mid-restore turns
// its blocks into misses in bounded time, never errors or wrong bytes.
TEST_F(ClusterProcessTest, SessionsAreRestoredByteExactThroughAnyNode) {
  std::vector<std::unique_ptr<Child>> nodes;
  nodes.push_back(StartNode(0));
  nodes.push_back(StartNode(1, 0, true));  // no DRAM: its blocks are on SSD
  nodes.push_back(StartNode(2, 32 << 20));
  auto ids = WaitMembers({"node0", "node1", "node2"});
  ASSERT_EQ(ids.size(), 3u);
  auto clients = ConnectAll([this](int i) { return Socket(i); });
  ASSERT_EQ(clients.size(), 3u);
  ClusterStore *c0 = clients[0].get(), *c1 = clients[1].get(), *c2 = clients[2].get();
  ASSERT_TRUE(c0->clustered());
  EXPECT_EQ(c0->local_node_id(), ids["node0"]);

  const std::string on_ssd = SessionHomedAt(*c0, ids["node1"], "ssd-");
  const std::string on_dram = SessionHomedAt(*c0, ids["node2"], "dram-");
  ASSERT_FALSE(on_ssd.empty());
  ASSERT_FALSE(on_dram.empty());
  const std::vector<Key> ssd_keys = SessionKeys(on_ssd, 48);
  const std::vector<Key> dram_keys = SessionKeys(on_dram, 48);
  auto p1 = PutSession(*c0, ssd_keys, on_ssd);
  ASSERT_TRUE(p1.ok()) << p1.status().ToString();
  EXPECT_EQ(p1->written, 48u);
  auto p2 = PutSession(*c0, dram_keys, on_dram, MediaType::kDram);
  ASSERT_TRUE(p2.ok()) << p2.status().ToString();
  EXPECT_EQ(p2->written, 48u);
  // Every client computes the same homes.
  EXPECT_EQ(c2->Placement(ssd_keys[0]), c0->Placement(ssd_keys[0]));
  EXPECT_EQ(c1->Lookup(ssd_keys).leading_hits, 48u);
  EXPECT_EQ(c2->Lookup(dram_keys).leading_hits, 48u);
  EXPECT_EQ(c0->Lookup(SessionKeys(on_ssd + "x", 4)).leading_hits, 0u);

  // SSD-resident blocks of node 1, restored through node 2 (streamed layer by layer).
  Restored a = RestoreSession(*c2, ssd_keys);
  EXPECT_EQ(a.result.leading_hits, 48u);
  EXPECT_EQ(a.result.bytes_from_ssd, 48 * kLayout.block_bytes());
  EXPECT_EQ(a.wrong_bytes, 0u);
  EXPECT_EQ(a.layers, (std::vector<uint32_t>{0, 1, 2, 3}));
  // Node 1's peer metrics name node 2's client: its put (through node 0), restore and layers.
  auto scraped = serve::HttpGet(MetricsAddress(1), "/metrics", milliseconds(5000));
  ASSERT_TRUE(scraped.ok()) << scraped.status().ToString();
  auto prom = serve::PromText::Parse(scraped->body);
  ASSERT_TRUE(prom.ok()) << prom.status().ToString();
  const std::string from2 = std::to_string(ids["node2"]), from0 = std::to_string(ids["node0"]);
  EXPECT_EQ(prom->Sum("flatcake_peer_requests_total", {{"peer", from2}, {"type", "restore"}}), 1);
  EXPECT_EQ(prom->Sum("flatcake_peer_requests_total", {{"peer", from2}, {"type", "layer"}}),
            kLayout.num_layers);
  EXPECT_EQ(prom->Sum("flatcake_peer_bytes_total", {{"peer", from2}, {"direction", "sent"}}),
            48.0 * kLayout.block_bytes());
  EXPECT_EQ(prom->Sum("flatcake_peer_bytes_total", {{"peer", from0}, {"direction", "received"}}),
            48.0 * kLayout.block_bytes());
  EXPECT_EQ(prom->Sum("flatcake_peer_errors_total"), 0);
  // DRAM-resident blocks of node 2, read with UCX gets through node 1.
  Restored b = RestoreSession(*c1, dram_keys);
  EXPECT_EQ(b.result.leading_hits, 48u);
  EXPECT_EQ(b.result.bytes_from_dram, 48 * kLayout.block_bytes());
  EXPECT_EQ(b.wrong_bytes, 0u);
  EXPECT_EQ(b.layers, (std::vector<uint32_t>{0, 1, 2, 3}));
  // And through the writer's own node, and on the home itself (the local path).
  EXPECT_EQ(RestoreSession(*c0, dram_keys).wrong_bytes, 0u);
  Restored local = RestoreSession(*c2, dram_keys);
  EXPECT_EQ(local.result.leading_hits, 48u);
  EXPECT_EQ(local.wrong_bytes, 0u);

  // Node 2 killed in the middle of a restore of a larger SSD session it holds: the restore ends
  // within its deadline, without an error, with every block it reports found byte-exact (all of
  // them when the restore won the race, none when the kill did).
  const std::string big = SessionHomedAt(*c0, ids["node2"], "big-");
  const std::vector<Key> big_keys = SessionKeys(big, 1024);  // 32 MiB
  auto p3 = PutSession(*c0, big_keys, big, MediaType::kSsd);
  ASSERT_TRUE(p3.ok()) << p3.status().ToString();
  Restored racing;
  const auto r0 = std::chrono::steady_clock::now();
  std::thread restore([&] { racing = RestoreSession(*c1, big_keys); });
  std::this_thread::sleep_for(milliseconds(3));
  nodes[2]->Kill(SIGKILL);
  restore.join();
  nodes[2]->Wait();
  EXPECT_LT(std::chrono::steady_clock::now() - r0, seconds(12));
  std::printf(
      "a restore racing the home's SIGKILL: %u of 1024 blocks, %.0f ms\n", racing.result.hits,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r0).count());
  EXPECT_TRUE(racing.result.hits == 0 || racing.result.hits == 1024) << racing.result.hits;
  EXPECT_EQ(racing.wrong_bytes, 0u);
  // Its sessions are now misses, within the request timeout.
  const auto t0 = std::chrono::steady_clock::now();
  Restored gone = RestoreSession(*c1, dram_keys);
  EXPECT_EQ(gone.result.hits, 0u);
  EXPECT_EQ(gone.wrong_bytes, 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, seconds(12));
  EXPECT_EQ(c1->Lookup(dram_keys).leading_hits, 0u);
  // Node 1's SSD session is untouched.
  EXPECT_EQ(RestoreSession(*c0, ssd_keys).result.leading_hits, 48u);
}

// A partition: node 2's link cut. A restore from it in flight through node 1 ends in bounded
// time with all or none of its blocks, never a wrong byte; node 2 drops out of the others' view
// within its lease TTL and its sessions are misses through them; it keeps serving its own
// clients and places their new sessions locally; healed, it rejoins under its old NodeID and its
// sessions are restored byte-exact through node 0 again.
TEST_F(ClusterProcessTest, APartitionedNodeDropsOutServesLocallyAndRejoins) {
  if (lab_ == nullptr) {
    GTEST_SKIP() << "a partition needs network namespaces (" << why_loopback_
                 << "); the loopback tests cover the rest";
  }
  std::vector<std::unique_ptr<Child>> nodes;
  nodes.push_back(StartNode(0));
  nodes.push_back(StartNode(1));
  nodes.push_back(StartNode(2, 48 << 20));
  auto ids = WaitMembers({"node0", "node1", "node2"});
  ASSERT_EQ(ids.size(), 3u);
  auto clients = ConnectAll([this](int i) { return Socket(i); });
  ASSERT_EQ(clients.size(), 3u);
  ClusterStore *c0 = clients[0].get(), *c1 = clients[1].get(), *c2 = clients[2].get();
  const std::string session = SessionHomedAt(*c0, ids["node2"], "part-");
  const std::string big = SessionHomedAt(*c0, ids["node2"], "bigpart-");
  const std::vector<Key> keys = SessionKeys(session, 48);
  const std::vector<Key> big_keys = SessionKeys(big, 512);  // 16 MiB
  const std::string in_dram = SessionHomedAt(*c0, ids["node2"], "drampart-");
  const std::vector<Key> dram_keys = SessionKeys(in_dram, 640);  // 20 MiB
  ASSERT_TRUE(PutSession(*c0, keys, session).ok());
  auto pd = PutSession(*c0, dram_keys, in_dram, MediaType::kDram);
  ASSERT_TRUE(pd.ok()) << pd.status().ToString();
  EXPECT_EQ(pd->written, 640u);
  auto p = PutSession(*c0, big_keys, big, MediaType::kSsd);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->written, 512u);
  EXPECT_EQ(RestoreSession(*c1, keys).result.leading_hits, 48u);

  // Cut in the middle of two restores, one from its SSD (streamed layers), one from its DRAM
  // (UCX gets): each ends within its deadline with all or none of its blocks.
  Restored racing_ssd, racing_dram;
  double ssd_ms = 0, dram_ms = 0;
  const auto r0 = std::chrono::steady_clock::now();
  const auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  std::thread from_ssd([&] {
    racing_ssd = RestoreSession(*c1, big_keys);
    ssd_ms = ms_since(r0);
  });
  std::thread from_dram([&] {
    racing_dram = RestoreSession(*c0, dram_keys);
    dram_ms = ms_since(r0);
  });
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_TRUE(lab_->Cut(2).ok());
  from_ssd.join();
  from_dram.join();
  std::printf(
      "restores racing the cut: from SSD %u of 512 blocks in %.0f ms, from DRAM %u of %zu in %.0f "
      "ms\n",
      racing_ssd.result.hits, ssd_ms, racing_dram.result.hits, dram_keys.size(), dram_ms);
  for (const Restored* r : {&racing_ssd, &racing_dram}) {
    EXPECT_TRUE(r->result.hits == 0 || r->result.hits == r->result.found.size()) << r->result.hits;
    EXPECT_EQ(r->wrong_bytes, 0u);
  }
  EXPECT_LT(ssd_ms, 15000);
  EXPECT_LT(dram_ms, 15000);

  // Out of the others' view within the TTL; its sessions are misses through them.
  WaitMembers({"node0", "node1"}, seconds(6));
  for (int i = 0; i < 100 && c0->Placement(keys[0]).size() != 2; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_EQ(c0->Placement(keys[0]).size(), 2u);
  const auto m0 = std::chrono::steady_clock::now();
  Restored gone = RestoreSession(*c0, keys);
  const double gone_ms = ms_since(m0);
  EXPECT_EQ(gone.result.hits, 0u);
  EXPECT_EQ(gone.wrong_bytes, 0u);
  const auto l0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c0->Lookup(keys).leading_hits, 0u);
  const double lookup_ms = ms_since(l0);
  std::printf("cut off: its session a miss through node 0 in %.0f ms, its lookup in %.0f ms\n",
              gone_ms, lookup_ms);
  EXPECT_LT(gone_ms, 12000);
  EXPECT_LT(lookup_ms, 12000);

  // Node 2 still serves its own clients, and places their new sessions locally.
  Restored own = RestoreSession(*c2, keys);
  EXPECT_EQ(own.result.leading_hits, 48u);
  EXPECT_EQ(own.wrong_bytes, 0u);
  const std::string fresh = SessionHomedAt(*c0, ids["node0"], "cut-");
  const std::vector<Key> fresh_keys = SessionKeys(fresh, 16);
  auto fp = PutSession(*c2, fresh_keys, fresh);
  ASSERT_TRUE(fp.ok()) << fp.status().ToString();
  EXPECT_EQ(fp->written, 16u);
  Restored mine = RestoreSession(*c2, fresh_keys);
  EXPECT_EQ(mine.result.leading_hits, 16u);
  EXPECT_EQ(mine.wrong_bytes, 0u);

  // Healed: back under its NodeID, its sessions byte-exact through node 0 again.
  ASSERT_TRUE(lab_->Heal(2).ok());
  EXPECT_EQ(WaitMembers({"node0", "node1", "node2"}, seconds(15)), ids);
  EXPECT_EQ(RestoreOnceBack(*c0, keys).result.leading_hits, 48u);
  for (int i = 0; i < 100 && c1->Placement(keys[0]).size() != 3; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_EQ(RestoreOnceBack(*c1, big_keys).result.leading_hits, 512u);
}

TEST_F(ClusterProcessTest, BadClusterFlagsAreRefusedClearly) {
  Child bad({FLATCAKE_BINARY, "serve", "--socket", Socket(9), "--etcd", "https://x:1"},
            dir_.File("bad.log"));
  EXPECT_EQ(bad.Wait(), 2);
  Child name(
      {FLATCAKE_BINARY, "cluster", "status", "--etcd", etcd_->client_url(), "--cluster", "a/b"},
      dir_.File("bad.log"));
  EXPECT_EQ(name.Wait(), 2);
  std::ifstream in(dir_.File("bad.log"));
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_NE(s.str().find("https is not supported"), std::string::npos) << s.str();
  EXPECT_NE(s.str().find("cluster name 'a/b'"), std::string::npos) << s.str();
}

}  // namespace
}  // namespace flatcake::cluster::process_test
