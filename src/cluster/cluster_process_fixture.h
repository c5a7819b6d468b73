// The fixture and helpers of the cluster's process tests (cluster_process_test.cc: membership,
// restores through any node, a home killed mid-restore, a partition; cluster_placement_test.cc:
// placement by weight, full homes, quotas and the home's staging bound): three real
// `flatcake serve --etcd` daemons and `flatcake cluster status`, against an etcd the test starts
// itself (EtcdProcess).
//
// Where the test may create network namespaces (root), each daemon runs in one of its own
// (testing::NetnsLab), joined to the test's namespace by a veth link, UCX on TCP over it, etcd on
// the bridge: the nodes are separate hosts, and a cut link is a partition. Elsewhere, or with
// FLATCAKE_CLUSTER_TEST_LOOPBACK=1, they run on loopback (UCX's choice of transport) and the
// partition test is skipped. Test-only.
#pragma once

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

namespace flatcake::cluster::process_test {

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

  // Nodes 0..n-1, node 1 with the serve config file `node1_config`, started into `nodes`: once
  // all n are members, their NodeIDs by name (empty when they never all are), and a client of
  // each in `clients` (empty when a client could not connect). Callers assert both sizes.
  std::map<std::string, uint32_t> StartMembers(int n, const std::string& node1_config,
                                               std::vector<std::unique_ptr<Child>>* nodes,
                                               std::vector<std::unique_ptr<ClusterStore>>* clients);

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

inline constexpr KvLayout kLayout{4, 2, 4096};  // 32 KiB blocks

inline std::vector<Key> SessionKeys(const std::string& name, int n) {
  std::vector<Key> keys;
  for (int i = 0; i < n; ++i) keys.push_back(KeyFromString(name + "/" + std::to_string(i)));
  return keys;
}

// A session name whose home (its first key's) is `node` in `store`'s placement.
inline std::string SessionHomedAt(ClusterStore& store, uint32_t node, const std::string& tag) {
  for (int i = 0; i < 10000; ++i) {
    const std::string name = tag + std::to_string(i);
    const std::vector<uint32_t> order = store.Placement(SessionKeys(name, 1)[0]);
    if (!order.empty() && order[0] == node) return name;
  }
  return "";
}

inline std::unique_ptr<ClusterStore> ConnectCluster(const std::string& socket) {
  auto c = ClusterStore::Connect(socket, "t", flatcake::testing::SmallClientOptions());
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

// Clients of nodes 0..n-1's daemons, once each sees all n members (empty on failure).
inline std::vector<std::unique_ptr<ClusterStore>> ConnectAll(
    const std::function<std::string(int)>& socket, size_t n = 3) {
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

inline Result<PutResult> PutSession(Store& s, const std::vector<Key>& keys,
                                    const std::string& session,
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
inline Restored RestoreSession(Store& s, const std::vector<Key>& keys) {
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
inline Restored RestoreOnceBack(Store& s, const std::vector<Key>& keys) {
  Restored r;
  for (int i = 0; i < 50; ++i) {
    r = RestoreSession(s, keys);
    EXPECT_EQ(r.wrong_bytes, 0u);
    if (r.result.leading_hits == keys.size()) break;
    std::this_thread::sleep_for(milliseconds(200));
  }
  return r;
}

inline std::map<std::string, uint32_t> ClusterProcessTest::StartMembers(
    int n, const std::string& node1_config, std::vector<std::unique_ptr<Child>>* nodes,
    std::vector<std::unique_ptr<ClusterStore>>* clients) {
  std::set<std::string> names;
  for (int i = 0; i < n; ++i) {
    nodes->push_back(i == 1 ? StartNode(i, kDefaultDram, false, 64 << 20, node1_config)
                            : StartNode(i));
    names.insert("node" + std::to_string(i));
  }
  auto ids = WaitMembers(names);  // which fails the test when they never all are
  *clients = ConnectAll([this](int i) { return Socket(i); }, static_cast<size_t>(n));
  return ids;
}

}  // namespace flatcake::cluster::process_test
