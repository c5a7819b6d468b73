// Where sessions go in a cluster of three real `flatcake serve --etcd` daemons
// (cluster_process_fixture.h): homes by capacity-weighted rendezvous hashing, a full home passing
// sessions on (and lookups following), a session no lookup would find refused, a peer's write
// counted against the home's tenant quota, and a remote restore larger than the home's staging.
#include <gtest/gtest.h>

#include "cluster/cluster_process_fixture.h"

namespace flatcake::cluster::process_test {
namespace {

// Writes an SSD session of `n` blocks whose home is `node` through `client`, named from `tag`:
// its keys, all written (empty on a failure, which the test records).
std::vector<Key> PutSsdSessionHomedAt(ClusterStore& client, uint32_t node, const std::string& tag,
                                      int n) {
  const std::string name = SessionHomedAt(client, node, tag);
  EXPECT_FALSE(name.empty()) << "no session named from " << tag << " is homed at node " << node;
  if (name.empty()) return {};
  std::vector<Key> keys = SessionKeys(name, n);
  auto put = PutSession(client, keys, name, MediaType::kSsd);
  EXPECT_TRUE(put.ok()) << put.status().ToString();
  if (!put.ok()) return {};
  EXPECT_EQ(put->written, keys.size()) << name;
  return put->written == keys.size() ? keys : std::vector<Key>{};
}

// Sessions go where every client computes their home, and homes follow the nodes' capacities
// (DRAM + SSD; 1 : 2 : 4 here): 350 one-block sessions written through node 0 are each found in
// the local store of the node rendezvous hashing names, and nowhere else.
TEST_F(ClusterProcessTest, SessionsSpreadAcrossNodesByWeight) {
  std::vector<std::unique_ptr<Child>> nodes;
  const uint64_t ssd[3] = {32 << 20, 64 << 20, 128 << 20};
  for (int i = 0; i < 3; ++i) nodes.push_back(StartNode(i, 0, false, ssd[i]));
  auto ids = WaitMembers({"node0", "node1", "node2"});
  ASSERT_EQ(ids.size(), 3u);
  auto clients = ConnectAll([this](int i) { return Socket(i); });
  ASSERT_EQ(clients.size(), 3u);
  ClusterStore* c0 = clients[0].get();
  std::map<uint32_t, std::vector<Key>> by_home;
  for (int s = 0; s < 350; ++s) {
    const std::string name = "spread-" + std::to_string(s);
    const std::vector<Key> keys = SessionKeys(name, 1);
    auto put = PutSession(*c0, keys, name);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    ASSERT_EQ(put->written, 1u);
    by_home[c0->Placement(keys[0])[0]].push_back(keys[0]);
  }
  double total_weight = 0;
  for (uint64_t b : ssd) total_weight += static_cast<double>(b);
  StoreStats sum;
  for (int i = 0; i < 3; ++i) {
    const uint32_t id = ids["node" + std::to_string(i)];
    // The node's own store (a plain client of its daemon: no routing) holds exactly its homes.
    auto local = LocalClient(i);
    ASSERT_NE(local, nullptr);
    const std::vector<Key>& mine = by_home[id];
    size_t held = 0;
    for (const Key& k : mine) held += local->Lookup(std::vector<Key>{k}).leading_hits;
    EXPECT_EQ(held, mine.size()) << "node" << i;
    const StoreStats st = local->GetStats();
    EXPECT_EQ(st.dram.blocks_live + st.ssd.blocks_live, mine.size()) << "node" << i;
    sum.ssd.capacity_bytes += st.ssd.capacity_bytes;
    sum.ssd.blocks_live += st.ssd.blocks_live;
    sum.blocks_written += st.blocks_written;
    const double share = static_cast<double>(mine.size()) / 350;
    const double expect = static_cast<double>(ssd[i]) / total_weight;
    std::printf("node%d (%llu MiB): %zu of 350 sessions, share %.3f, weight's share %.3f\n", i,
                static_cast<unsigned long long>(ssd[i] >> 20), mine.size(), share, expect);
    EXPECT_NEAR(share, expect, expect * 0.4) << "node" << i;
  }
  // A cluster client's stats are the whole cluster's, through whichever node it is connected to.
  EXPECT_EQ(sum.ssd.blocks_live, 350u);
  for (const auto& c : clients) {
    const StoreStats all = c->GetStats();
    EXPECT_EQ(all.ssd.capacity_bytes, sum.ssd.capacity_bytes);
    EXPECT_EQ(all.ssd.blocks_live, 350u);
    EXPECT_EQ(all.blocks_written, sum.blocks_written);
  }
}

// A home without room for a session (a batch larger than its pool: a full store would rather
// reclaim older sessions) passes it to the next member in rendezvous order; a lookup through a
// client that did not write it follows it there, and the restore after it is byte-exact.
TEST_F(ClusterProcessTest, AFullHomePassesSessionsOnAndLookupsFollow) {
  std::vector<std::unique_ptr<Child>> nodes;
  const uint64_t ssd[3] = {64 << 20, 8 << 20, 64 << 20};  // node 1 has room for no 12 MiB batch
  for (int i = 0; i < 3; ++i) nodes.push_back(StartNode(i, 0, false, ssd[i]));
  auto ids = WaitMembers({"node0", "node1", "node2"});
  ASSERT_EQ(ids.size(), 3u);
  auto clients = ConnectAll([this](int i) { return Socket(i); });
  ASSERT_EQ(clients.size(), 3u);
  auto home = LocalClient(1);
  ASSERT_NE(home, nullptr);
  // Three sessions of 12 MiB homed at node 1, then one of 2 MiB that fits there.
  std::vector<std::vector<Key>> sessions;
  for (int s = 0; s < 4; ++s) {
    const std::string name = SessionHomedAt(*clients[0], ids["node1"], "full" + std::to_string(s));
    ASSERT_FALSE(name.empty());
    sessions.push_back(SessionKeys(name, s < 3 ? 384 : 64));
    auto put = PutSession(*clients[0], sessions.back(), name, MediaType::kSsd);
    ASSERT_TRUE(put.ok()) << "session " << s << ": " << put.status().ToString();
    ASSERT_EQ(put->written, sessions.back().size());
    EXPECT_EQ(home->Lookup(sessions.back()).leading_hits, s < 3 ? 0u : 64u) << "session " << s;
  }
  // Node 2's client never saw them written: its lookups find each where it is; node 0's client
  // knows where it put them.
  for (ClusterStore* c : {clients[2].get(), clients[0].get()}) {
    for (const std::vector<Key>& keys : sessions) {
      EXPECT_EQ(c->Lookup(keys).leading_hits, keys.size());
      const Restored r = RestoreSession(*c, keys);
      EXPECT_EQ(r.result.leading_hits, keys.size());
      EXPECT_EQ(r.wrong_bytes, 0u);
    }
  }
  // A session written nowhere is still a miss, after the probes.
  EXPECT_EQ(clients[2]->Lookup(SessionKeys("never-written", 4)).leading_hits, 0u);

  // Session 0's copy away from home goes (the member reclaims it for newer sessions), and a
  // shorter session with the same root is written at its home, which now has room. Both clients
  // remembered the member (node 0's from its put, node 2's from a lookup): a put at home and a
  // lookup that finds it there make them forget it, so the restores go home.
  const uint32_t away = clients[0]->Placement(sessions[0][0])[1];
  int away_index = -1;
  for (int i = 0; i < 3; ++i) {
    if (ids["node" + std::to_string(i)] == away) away_index = i;
  }
  ASSERT_GE(away_index, 0);
  auto holder = LocalClient(away_index);
  ASSERT_NE(holder, nullptr);
  for (int s = 0; s < 6; ++s) {  // 72 MiB through a 64 MiB pool
    const std::string name = SessionHomedAt(*clients[0], away, "newer" + std::to_string(s));
    ASSERT_FALSE(name.empty());
    auto put = PutSession(*clients[0], SessionKeys(name, 384), name, MediaType::kSsd);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
  }
  ASSERT_EQ(holder->Lookup(sessions[0]).leading_hits, 0u) << "not reclaimed at node" << away_index;
  const std::vector<Key> again(sessions[0].begin(), sessions[0].begin() + 64);
  auto put = PutSession(*clients[0], again, "full0-again", MediaType::kSsd);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  ASSERT_EQ(home->Lookup(again).leading_hits, 64u);
  const Restored writer = RestoreSession(*clients[0], again);
  EXPECT_EQ(writer.result.leading_hits, 64u);
  EXPECT_EQ(writer.wrong_bytes, 0u);
  EXPECT_EQ(clients[2]->Lookup(again).leading_hits, 64u);
  const Restored reader = RestoreSession(*clients[2], again);
  EXPECT_EQ(reader.result.leading_hits, 64u);
  EXPECT_EQ(reader.wrong_bytes, 0u);
}

// A new session goes no further than a lookup asks (the home and two more members): with four
// members, one whose first three in rendezvous order have no room for it is refused, where it
// used to be stored on the fourth and never found by the clients that did not write it.
TEST_F(ClusterProcessTest, ASessionNoLookupWouldFindIsRefused) {
  std::vector<std::unique_ptr<Child>> nodes;
  const uint64_t ssd[4] = {64 << 20, 8 << 20, 8 << 20, 8 << 20};  // only node 0 holds 12 MiB
  for (int i = 0; i < 4; ++i) nodes.push_back(StartNode(i, 0, false, ssd[i]));
  auto ids = WaitMembers({"node0", "node1", "node2", "node3"});
  ASSERT_EQ(ids.size(), 4u);
  auto clients = ConnectAll([this](int i) { return Socket(i); }, 4);
  ASSERT_EQ(clients.size(), 4u);
  // A session whose last member in rendezvous order is node 0, and one whose second is.
  std::string last, second;
  for (int i = 0; i < 100000 && (last.empty() || second.empty()); ++i) {
    const std::string name = "order" + std::to_string(i);
    const std::vector<uint32_t> order = clients[1]->Placement(SessionKeys(name, 1)[0]);
    ASSERT_EQ(order.size(), 4u);
    if (order[3] == ids["node0"] && last.empty()) last = name;
    if (order[1] == ids["node0"] && second.empty()) second = name;
  }
  ASSERT_FALSE(last.empty());
  ASSERT_FALSE(second.empty());
  auto big = LocalClient(0);
  ASSERT_NE(big, nullptr);
  const std::vector<Key> refused = SessionKeys(last, 384), passed = SessionKeys(second, 384);
  auto put = PutSession(*clients[1], refused, last, MediaType::kSsd);
  EXPECT_TRUE(put.status().IsNoSpace()) << put.status().ToString();
  EXPECT_EQ(big->Lookup(refused).leading_hits, 0u) << "stored where no lookup looks";
  // One member past a full home still takes it, and another client finds it there.
  put = PutSession(*clients[1], passed, second, MediaType::kSsd);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->written, 384u);
  EXPECT_EQ(clients[3]->Lookup(passed).leading_hits, 384u);
  const Restored r = RestoreSession(*clients[3], passed);
  EXPECT_EQ(r.result.leading_hits, 384u);
  EXPECT_EQ(r.wrong_bytes, 0u);
}

// A peer's write counts against its tenant's quota at the home, as a local client's does. Node 1
// gives tenant t 4 MiB of SSD: a 2 MiB session homed there is stored there; a 4 MiB one, written
// through node 0, would take t past its quota, so node 1 refuses it (NoSpace) and the next member
// takes it. Node 2, which never saw them written, looks both up and restores them byte-exact.
TEST_F(ClusterProcessTest, APeerWriteCountsAgainstTheHomesTenantQuota) {
  const std::string config = ConfigFile("quota.toml", "[tenants.t]\nssd_bytes = \"4MiB\"\n");
  std::vector<std::unique_ptr<Child>> nodes;
  std::vector<std::unique_ptr<ClusterStore>> clients;
  auto ids = StartMembers(3, config, &nodes, &clients);
  ASSERT_EQ(ids.size(), 3u);
  ASSERT_EQ(clients.size(), 3u);
  auto home = LocalClient(1);
  ASSERT_NE(home, nullptr);
  const std::vector<Key> small_keys =
      PutSsdSessionHomedAt(*clients[0], ids["node1"], "quota-small", 64);
  const std::vector<Key> large_keys =
      PutSsdSessionHomedAt(*clients[0], ids["node1"], "quota-large", 128);
  ASSERT_EQ(small_keys.size(), 64u);
  ASSERT_EQ(large_keys.size(), 128u);
  EXPECT_EQ(home->Lookup(small_keys).leading_hits, 64u);
  EXPECT_EQ(home->Lookup(large_keys).leading_hits, 0u) << "stored past the tenant's quota";
  for (const auto* keys : {&small_keys, &large_keys}) {
    EXPECT_EQ(clients[2]->Lookup(*keys).leading_hits, keys->size());  // finds where it went
    const Restored r = RestoreSession(*clients[2], *keys);
    EXPECT_EQ(r.result.leading_hits, keys->size());
    EXPECT_EQ(r.wrong_bytes, 0u);
  }
}

// The home stages other nodes' restores from its SSD in bounded memory (peer_staging_bytes, 1 MiB
// at node 1 here): a remote restore of a 2 MiB session gets its leading 1 MiB of blocks and the
// rest are misses, never an error or a wrong byte; a session that fits is restored whole, before
// and after; the home's own clients restore the large one whole (the local path stages nothing).
TEST_F(ClusterProcessTest, ARemoteRestoreLargerThanTheHomesStagingGetsTheHitsThatFit) {
  const std::string config = ConfigFile("staging.toml", "peer_staging_bytes = \"1MiB\"\n");
  std::vector<std::unique_ptr<Child>> nodes;
  std::vector<std::unique_ptr<ClusterStore>> clients;
  auto ids = StartMembers(2, config, &nodes, &clients);
  ASSERT_EQ(ids.size(), 2u);
  ASSERT_EQ(clients.size(), 2u);
  const std::vector<Key> large_keys =
      PutSsdSessionHomedAt(*clients[0], ids["node1"], "staged-large", 64);
  const std::vector<Key> small_keys =
      PutSsdSessionHomedAt(*clients[0], ids["node1"], "staged-small", 16);
  ASSERT_EQ(large_keys.size(), 64u);
  ASSERT_EQ(small_keys.size(), 16u);
  // The staging of a restore is back once UCX has let go of its last layer, just after the
  // client has it: a restore right after may find part of it still lent, so each is retried
  // (every try byte-exact, never more hits than fit) until it gets what fits.
  const auto restore = [&](const std::vector<Key>& keys, uint32_t want) {
    Restored r;
    for (int attempt = 0; attempt < 40; ++attempt) {
      r = RestoreSession(*clients[0], keys);
      EXPECT_EQ(r.wrong_bytes, 0u);
      EXPECT_LE(r.result.hits, want);
      EXPECT_EQ(r.result.leading_hits, r.result.hits);
      if (r.result.hits == want) break;
      std::this_thread::sleep_for(milliseconds(50));
    }
    return r.result.hits;
  };
  const uint32_t fit = static_cast<uint32_t>((1 << 20) / kLayout.block_bytes());  // 32
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(restore(small_keys, 16), 16u) << "round " << round;
    EXPECT_EQ(restore(large_keys, fit), fit) << "round " << round;
  }
  auto home = LocalClient(1);
  ASSERT_NE(home, nullptr);
  const Restored local = RestoreSession(*home, large_keys);
  EXPECT_EQ(local.result.leading_hits, 64u);
  EXPECT_EQ(local.wrong_bytes, 0u);
}

}  // namespace
}  // namespace flatcake::cluster::process_test
