// Three real `flatcake serve --etcd` daemons and `flatcake cluster status`, against an etcd the
// test starts itself (EtcdProcess): they join under distinct NodeIDs; one killed with SIGKILL
// drops out within its lease TTL; restarted on its pool it rejoins under its old NodeID; with
// etcd stopped the daemons keep serving, and they are members again once it is back; sessions are
// placed by weight and restored byte-exact through any node; a partition.
//
// Where the test may create network namespaces (root), each daemon runs in one of its own
// (testing::NetnsLab), joined to the test's namespace by a veth link, UCX on TCP over it, etcd on
// the bridge: the nodes are separate hosts, and a cut link is a partition. Elsewhere, or with
// FLATCAKE_CLUSTER_TEST_LOOPBACK=1, they run on loopback (UCX's choice of transport) and the
// partition test is skipped.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "cluster/cluster_store.h"
#include "cluster/etcd_process.h"
#include "serve/http_get.h"
#include "serve/prom_text.h"
#include "serve/remote_store.h"
#include "testing/child_process.h"
#include "testing/netns_lab.h"
#include "testing/serve_client_options.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake::cluster {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Child;

class ClusterProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    std::string etcd_host = "127.0.0.1";
    if (std::getenv("FLATCAKE_CLUSTER_TEST_LOOPBACK") != nullptr) {
      why_loopback_ = "FLATCAKE_CLUSTER_TEST_LOOPBACK is set";
    } else if (auto lab = flatcake::testing::NetnsLab::Create(4); lab.ok()) {
      lab_ = std::move(*lab);
      etcd_host = lab_->host_address();
      ucx_env_ = std::make_unique<flatcake::testing::UcxEnvironment>("tcp", lab_->bridge());
    } else {
      why_loopback_ = lab.status().ToString();
    }
    if (lab_ != nullptr) {
      std::printf("daemons in network namespaces, etcd on %s\n", lab_->host_address().c_str());
    } else {
      std::printf("daemons on loopback: %s\n", why_loopback_.c_str());
    }
    auto started = EtcdProcess::Start("etcd", seconds(20), etcd_host);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    etcd_ = std::move(*started);
  }

  // A failed test shows the tail of every daemon's log.
  void TearDown() override {
    if (!HasFailure()) return;
    for (int i = 0; i < 3; ++i) {
      std::ifstream in(dir_.File("n" + std::to_string(i) + ".log"));
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string log = ss.str();
      std::printf("--- node%d's log (tail):\n%s\n", i,
                  log.substr(log.size() > 3000 ? log.size() - 3000 : 0).c_str());
    }
  }

  // Where node i serves its metrics when asked to (StartNode's `metrics`): any port is free in a
  // namespace of its own.
  serve::HostPort MetricsAddress(int i) {
    if (lab_ != nullptr) return {lab_->address(i), 9464};
    if (metrics_ports_.count(i) == 0) {
      auto port = FreeLoopbackPort();
      EXPECT_TRUE(port.ok()) << port.status().ToString();
      metrics_ports_[i] = port.ok() ? *port : 0;
    }
    return {"127.0.0.1", metrics_ports_[i]};
  }

  std::string Socket(int i) const { return dir_.File("n" + std::to_string(i) + ".sock"); }

  // DRAM of (8 + 8 i) MiB unless `dram_bytes` says otherwise (0: none).
  static constexpr uint64_t kDefaultDram = ~uint64_t{0};
  // A serve config file of `text` in the test's directory: its path.
  std::string ConfigFile(const std::string& name, const std::string& text) {
    const std::string path = dir_.File(name);
    std::ofstream(path) << text;
    return path;
  }

  std::unique_ptr<Child> StartNode(int i, uint64_t dram_bytes = kDefaultDram, bool metrics = false,
                                   uint64_t ssd_bytes = 64 << 20, const std::string& config = "") {
    const std::string pool = dir_.File("pool" + std::to_string(i));
    std::filesystem::create_directories(pool);
    const uint64_t dram = dram_bytes != kDefaultDram ? dram_bytes : uint64_t(8 + 8 * i) << 20;
    std::vector<std::string> argv;
    if (lab_ != nullptr) argv = lab_->Exec(i);
    const std::vector<std::string> serve = {
        FLATCAKE_BINARY,    "serve",
        "--socket",         Socket(i),
        "--ssd-dir",        pool,
        "--ssd-bytes",      std::to_string(ssd_bytes),
        "--ssd-file-bytes", std::to_string(std::min<uint64_t>(ssd_bytes, 64 << 20)),
        "--dram-bytes",     std::to_string(dram),
        "--etcd",           etcd_->client_url(),
        "--cluster",        "t",
        "--node-name",      "node" + std::to_string(i),
        "--lease-ttl",      "2"};
    argv.insert(argv.end(), serve.begin(), serve.end());
    if (!config.empty()) {
      argv.push_back("--config");
      argv.push_back(config);
    }
    if (metrics) {
      const serve::HostPort at = MetricsAddress(i);
      argv.push_back("--metrics-addr");
      argv.push_back(at.host + ":" + std::to_string(at.port));
    }
    return std::make_unique<Child>(argv, dir_.File("n" + std::to_string(i) + ".log"));
  }

  // `flatcake cluster status --json`: its exit status and the parsed object.
  std::pair<int, json> Status(const std::string& url) {
    Child c({FLATCAKE_BINARY, "cluster", "status", "--etcd", url, "--cluster", "t", "--json",
             "--timeout-ms", "1000"},
            dir_.File("status.log"));
    const std::string out = c.ReadAll();
    const int rc = c.Wait();
    json j = json::parse(out, nullptr, false);
    return {rc, j};
  }

  // Waits until the members are exactly `names`, every one healthy (a killed node's record is
  // gone, not only stale); their NodeIDs by name.
  std::map<std::string, uint32_t> WaitMembers(std::set<std::string> names,
                                              seconds timeout = seconds(10)) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    std::map<std::string, uint32_t> ids;
    while (std::chrono::steady_clock::now() < until) {
      auto [rc, j] = Status(etcd_->client_url());
      ids.clear();
      std::set<std::string> got;
      if (rc == 0 && j.is_object()) {
        for (const json& m : j["members"]) {
          if (!m["healthy"].get<bool>()) got.insert("(stale)");
          got.insert(m["name"].get<std::string>());
          ids[m["name"].get<std::string>()] = m["node_id"].get<uint32_t>();
        }
      }
      if (got == names) return ids;
      std::this_thread::sleep_for(milliseconds(100));
    }
    ADD_FAILURE() << "members never became exactly the expected set";
    return {};
  }

  // A plain client of node i's daemon (no routing: that node's own store); null on failure.
  std::unique_ptr<serve::RemoteStore> LocalClient(int i) {
    auto c = serve::RemoteStore::Connect(Socket(i), "t", flatcake::testing::SmallClientOptions());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  bool Answers(int i) {
    auto c = serve::RemoteStore::Connect(Socket(i), "t", flatcake::testing::SmallClientOptions());
    return c.ok();
  }

  TempDir dir_{"flatcake-cluster"};
  std::unique_ptr<flatcake::testing::NetnsLab> lab_;  // null on loopback
  std::string why_loopback_;
  std::unique_ptr<flatcake::testing::UcxEnvironment> ucx_env_;
  std::map<int, uint16_t> metrics_ports_;
  std::unique_ptr<EtcdProcess> etcd_;
};

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

constexpr KvLayout kLayout{4, 2, 4096};  // 32 KiB blocks

std::vector<Key> SessionKeys(const std::string& name, int n) {
  std::vector<Key> keys;
  for (int i = 0; i < n; ++i) keys.push_back(KeyFromString(name + "/" + std::to_string(i)));
  return keys;
}

// A session name whose home (its first key's) is `node` in `store`'s placement.
std::string SessionHomedAt(ClusterStore& store, uint32_t node, const std::string& tag) {
  for (int i = 0; i < 10000; ++i) {
    const std::string name = tag + std::to_string(i);
    const std::vector<uint32_t> order = store.Placement(SessionKeys(name, 1)[0]);
    if (!order.empty() && order[0] == node) return name;
  }
  return "";
}

std::unique_ptr<ClusterStore> ConnectCluster(const std::string& socket) {
  auto c = ClusterStore::Connect(socket, "t", flatcake::testing::SmallClientOptions());
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

// Clients of nodes 0..n-1's daemons, once each sees all n members (empty on failure).
std::vector<std::unique_ptr<ClusterStore>> ConnectAll(const std::function<std::string(int)>& socket,
                                                      size_t n = 3) {
  std::vector<std::unique_ptr<ClusterStore>> c;
  for (size_t i = 0; i < n; ++i) {
    c.push_back(ConnectCluster(socket(static_cast<int>(i))));
    if (c.back() == nullptr) return {};
  }
  for (const auto& store : c) {
    for (int i = 0; i < 100 && store->Placement(Key{1, 2}).size() != n; ++i) {
      std::this_thread::sleep_for(milliseconds(100));
    }
    EXPECT_EQ(store->Placement(Key{1, 2}).size(), n);
  }
  return c;
}

Result<PutResult> PutSession(Store& s, const std::vector<Key>& keys, const std::string& session,
                             std::optional<MediaType> medium = std::nullopt) {
  std::vector<std::vector<uint8_t>> blocks(keys.size(),
                                           std::vector<uint8_t>(kLayout.block_bytes()));
  std::vector<void*> ptrs;
  for (size_t i = 0; i < keys.size(); ++i) {
    FillBlock(keys[i], blocks[i].data(), kLayout.block_bytes());
    ptrs.push_back(blocks[i].data());
  }
  WriteHints h;
  h.session = session;
  h.force_medium = medium;
  return s.Put(keys, kLayout, BlockBuffers{BufferKind::kBlockContiguous, ptrs}, h);
}

struct Restored {
  GetResult result;
  std::vector<uint32_t> layers;  // in the order on_layer reported them
  size_t wrong_bytes = 0;        // in blocks reported found
};

// Restores `keys` through `s` into per-slice buffers and compares every found block's bytes.
Restored RestoreSession(Store& s, const std::vector<Key>& keys) {
  Restored out;
  const uint64_t bb = kLayout.block_bytes();
  std::vector<uint8_t> mem(keys.size() * bb, 0xee);
  std::vector<void*> ptrs;  // kSlicePointers, each slice in its place of a contiguous block
  for (size_t b = 0; b < keys.size(); ++b) {
    for (uint32_t l = 0; l < kLayout.num_layers; ++l) {
      for (uint32_t p = 0; p < kLayout.num_planes; ++p) {
        ptrs.push_back(mem.data() + b * bb + (l * kLayout.num_planes + p) * kLayout.slice_bytes);
      }
    }
  }
  Mutex mu;
  RestoreOptions ro;
  ro.on_layer = [&](uint32_t l) {
    MutexLock lock(mu);
    out.layers.push_back(l);
  };
  auto h = s.Restore(keys, kLayout, BlockBuffers{BufferKind::kSlicePointers, ptrs}, ro);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  if (!h.ok()) return out;
  auto r = (*h)->Wait();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return out;
  out.result = *r;
  std::vector<uint8_t> expect(bb);
  for (size_t b = 0; b < keys.size(); ++b) {
    if (!r->found[b]) continue;
    FillBlock(keys[b], expect.data(), bb);
    for (uint64_t i = 0; i < bb; ++i) out.wrong_bytes += mem[b * bb + i] != expect[i];
  }
  return out;
}

// After a partition heals: restores `keys` through `s` until every block is back (at most 10 s),
// each attempt byte-exact in what it reports found; the last attempt.
Restored RestoreOnceBack(Store& s, const std::vector<Key>& keys) {
  Restored r;
  for (int i = 0; i < 50; ++i) {
    r = RestoreSession(s, keys);
    EXPECT_EQ(r.wrong_bytes, 0u);
    if (r.result.leading_hits == keys.size()) break;
    std::this_thread::sleep_for(milliseconds(200));
  }
  return r;
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
  nodes.push_back(StartNode(0));
  nodes.push_back(StartNode(1, kDefaultDram, false, 64 << 20, config));
  nodes.push_back(StartNode(2));
  auto ids = WaitMembers({"node0", "node1", "node2"});
  ASSERT_EQ(ids.size(), 3u);
  auto clients = ConnectAll([this](int i) { return Socket(i); });
  ASSERT_EQ(clients.size(), 3u);
  auto home = LocalClient(1);
  ASSERT_NE(home, nullptr);
  const std::string small = SessionHomedAt(*clients[0], ids["node1"], "quota-small");
  const std::string large = SessionHomedAt(*clients[0], ids["node1"], "quota-large");
  ASSERT_FALSE(small.empty());
  ASSERT_FALSE(large.empty());
  const std::vector<Key> small_keys = SessionKeys(small, 64), large_keys = SessionKeys(large, 128);
  for (const auto* keys : {&small_keys, &large_keys}) {
    auto put = PutSession(*clients[0], *keys, keys == &small_keys ? small : large, MediaType::kSsd);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    EXPECT_EQ(put->written, keys->size());
  }
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
  nodes.push_back(StartNode(0));
  nodes.push_back(StartNode(1, kDefaultDram, false, 64 << 20, config));
  auto ids = WaitMembers({"node0", "node1"});
  ASSERT_EQ(ids.size(), 2u);
  auto clients = ConnectAll([this](int i) { return Socket(i); }, 2);
  ASSERT_EQ(clients.size(), 2u);
  const std::string large = SessionHomedAt(*clients[0], ids["node1"], "staged-large");
  const std::string small = SessionHomedAt(*clients[0], ids["node1"], "staged-small");
  ASSERT_FALSE(large.empty());
  ASSERT_FALSE(small.empty());
  const std::vector<Key> large_keys = SessionKeys(large, 64), small_keys = SessionKeys(small, 16);
  for (const auto* keys : {&large_keys, &small_keys}) {
    auto put = PutSession(*clients[0], *keys, keys == &large_keys ? large : small, MediaType::kSsd);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    EXPECT_EQ(put->written, keys->size());
  }
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
}  // namespace flatcake::cluster
