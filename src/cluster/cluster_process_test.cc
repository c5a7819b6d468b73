// Three real `flatcake serve --etcd` daemons and `flatcake cluster status`, against an etcd the
// test starts on loopback (EtcdProcess): they join under distinct NodeIDs; one killed with
// SIGKILL drops out within its lease TTL; restarted on its pool it rejoins under its old NodeID;
// with etcd stopped the daemons keep serving, and they are members again once it is back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "cluster/etcd_process.h"
#include "serve/remote_store.h"
#include "testing/child_process.h"
#include "testing/serve_client_options.h"
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
    auto started = EtcdProcess::Start();
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    etcd_ = std::move(*started);
    ASSERT_TRUE(dir_.ok());
  }

  std::string Socket(int i) const { return dir_.File("n" + std::to_string(i) + ".sock"); }

  std::unique_ptr<Child> StartNode(int i) {
    const std::string pool = dir_.File("pool" + std::to_string(i));
    std::filesystem::create_directories(pool);
    std::vector<std::string> argv = {FLATCAKE_BINARY,    "serve",
                                     "--socket",         Socket(i),
                                     "--ssd-dir",        pool,
                                     "--ssd-bytes",      std::to_string(64 << 20),
                                     "--ssd-file-bytes", std::to_string(64 << 20),
                                     "--dram-bytes",     std::to_string((8 + 8 * i) << 20),
                                     "--etcd",           etcd_->client_url(),
                                     "--cluster",        "t",
                                     "--node-name",      "node" + std::to_string(i),
                                     "--lease-ttl",      "2"};
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

  bool Answers(int i) {
    auto c = serve::RemoteStore::Connect(Socket(i), "t", flatcake::testing::SmallClientOptions());
    return c.ok();
  }

  std::unique_ptr<EtcdProcess> etcd_;
  TempDir dir_{"flatcake-cluster"};
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
