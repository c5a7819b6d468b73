// The cluster's data path in one process, so that ThreadSanitizer sees all of it at once (this test
// is labelled concurrent: scripts/test.sh runs it in the TSan tree): a private etcd and two node
// daemons, each with its ClusterNode (UCX worker, membership, PeerService), and ClusterStore
// clients of node A on several threads putting to, looking up at and restoring from node B's DRAM
// and SSD at once, a restore dropped mid-stream, and node B going away under restores in flight.
// cluster_process_test covers the same paths with real `flatcake serve` processes (and network
// namespaces); this one puts the client's restore threads, the UCX progress threads, the home's
// handlers and its store's I/O threads under the race detector together.
#include "cluster/cluster_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cluster_node.h"
#include "cluster/etcd_process.h"
#include "cluster/peer_service.h"
#include "serve/daemon.h"
#include "serve/flatcake_rpc.pb.h"
#include "serve/rpc_convert.h"
#include "testing/netns_lab.h"
#include "testing/store_blocks.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake::cluster {
namespace {

constexpr KvLayout kLayout{4, 2, 16 * 1024};  // 128 KiB blocks
constexpr size_t kBlocks = 24;                // a session: 3 MiB
// Many layers, for the home's ring (PeerService): 256 KiB blocks, a session of 6 MiB whose layers
// are 192 KiB of its SSD hits.
constexpr KvLayout kLongLayout{32, 2, 4096};
constexpr int kThreads = 4;

struct Node {
  std::unique_ptr<TempDir> dir;
  std::unique_ptr<ClusterNode> cluster;
  std::unique_ptr<serve::Daemon> daemon;

  void Stop() {
    if (cluster != nullptr) cluster->Leave();
    if (daemon != nullptr) daemon->Shutdown();
    daemon.reset();
  }
};

class ClusterStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto etcd = EtcdProcess::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
    etcd_ = std::move(*etcd);
    ASSERT_NO_FATAL_FAILURE(StartNode(&a_, "a", {}));
    ASSERT_NO_FATAL_FAILURE(StartNode(&b_, "b", b_peer_));
  }
  void TearDown() override {
    for (Node* n : {&a_, &b_}) n->Stop();
  }

  // Starts n's daemon (in n's directory, made the first time), joined to the cluster unless
  // `join` is false (a one-node store, as without --etcd).
  void StartNode(Node* n, const std::string& name, PeerServiceOptions peer, bool join = true) {
    if (n->dir == nullptr) n->dir = std::make_unique<TempDir>("flatcake-cluster-store-" + name);
    ASSERT_TRUE(n->dir->ok());
    auto node = ClusterNode::Create();
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    n->cluster = std::move(*node);
    serve::DaemonOptions d;
    d.store.dram_bytes = 32 * kMiB;
    d.store.ssd_dirs = {n->dir->path()};
    d.store.ssd_bytes = 64 * kMiB;
    d.store.ssd_file_bytes = 8 * kMiB;
    d.store.recover = false;
    d.store.io_engine = IoEngineKind::kPreadv;  // the engine's worker threads, for the detector
    d.store.read_window_bytes = 8 * kMiB;
    d.store.write_staging_bytes = 8 * kMiB;
    d.socket_path = n->dir->path() + "/sock";
    if (join) d.cluster_view = n->cluster->ViewSource();
    auto daemon = serve::Daemon::Start(d);
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    n->daemon = std::move(*daemon);
    if (!join) return;
    ClusterNodeOptions co;
    auto eps = ParseEtcdEndpoints(etcd_->client_url());
    ASSERT_TRUE(eps.ok());
    co.etcd = *eps;
    co.cluster = "test";
    co.node_name = name;
    co.lease_ttl_s = 5;
    co.peer = peer;
    if (co.peer.max_staging_bytes == 0) co.peer.max_staging_bytes = 64 * kMiB;
    Status joined = n->cluster->Join(n->daemon.get(), co);
    ASSERT_TRUE(joined.ok()) << joined.ToString();
  }

  // A client of node A that sees both members.
  std::unique_ptr<ClusterStore> ClientOfA(ClusterClientOptions cluster = {}) {
    auto c = ClusterStore::Connect(a_.daemon->socket_path(), "t", {}, cluster);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return nullptr;
    for (int i = 0; i < 200 && (*c)->Placement(Key{1, 1}).size() < 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ((*c)->Placement(Key{1, 1}).size(), 2u) << "the client never saw both members";
    return std::move(*c);
  }

  // The keys of a session named `tag`N whose home is node B, for client `c`.
  std::vector<Key> SessionAtB(ClusterStore& c, const std::string& tag) {
    for (int i = 0; i < 10000; ++i) {
      const std::string name = tag + std::to_string(i);
      std::vector<Key> keys;
      for (size_t j = 0; j < kBlocks; ++j) {
        keys.push_back(KeyFromString(name + "/" + std::to_string(j)));
      }
      if (c.Placement(keys[0]).front() == b_.cluster->node_id()) return keys;
    }
    ADD_FAILURE() << "no session name homed at B";
    return {};
  }

  static void Write(Store& s, const std::vector<Key>& keys, MediaType medium,
                    const KvLayout& layout = kLayout) {
    testing::PutFilled(s, keys, layout, medium);
  }

  // Restores `keys` through `s`: the blocks found (each checked byte-exact here), the layers
  // reported in order.
  static size_t Restored(Store& s, const std::vector<Key>& keys, const KvLayout& layout = kLayout) {
    HostBlocks dst(layout, keys.size());
    std::atomic<uint32_t> next_layer{0};
    std::atomic<bool> in_order{true};
    RestoreOptions ro;
    ro.on_layer = [&](uint32_t l) {
      if (l != next_layer.fetch_add(1)) in_order = false;
    };
    auto h = s.Restore(keys, layout, dst.buffers(), ro);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (!h.ok()) return 0;
    auto r = (*h)->Wait();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return 0;
    EXPECT_TRUE(in_order.load()) << "layers reported out of order";
    EXPECT_EQ(r->corrupt, 0u);
    testing::ExpectFoundBlocksExact(keys, r->found, dst);
    return r->hits;
  }

  // UCX on loopback only: a worker's address names every interface up when it is made, and a
  // bridge another test (cluster_process_test, run beside this one) adds and removes would be
  // tried and found gone.
  testing::UcxEnvironment ucx_env_{"tcp", "lo"};
  PeerServiceOptions b_peer_;  // set before SetUp: node B's
  std::unique_ptr<EtcdProcess> etcd_;
  Node a_, b_;
};

TEST_F(ClusterStoreTest, ClientsOnSeveralThreadsWriteAndRestoreBothMediaOfAnotherNode) {
  std::vector<std::unique_ptr<ClusterStore>> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.push_back(ClientOfA());
    ASSERT_NE(clients.back(), nullptr);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ClusterStore& c = *clients[t];
      // Each thread: a session in B's DRAM and one in B's SSD, then both restored, twice, while
      // the other threads do the same.
      const auto dram = SessionAtB(c, "dram-" + std::to_string(t) + "-");
      const auto ssd = SessionAtB(c, "ssd-" + std::to_string(t) + "-");
      Write(c, dram, MediaType::kDram);
      Write(c, ssd, MediaType::kSsd);
      EXPECT_EQ(c.Lookup(dram).leading_hits, kBlocks);
      EXPECT_EQ(c.Lookup(ssd).leading_hits, kBlocks);
      for (int round = 0; round < 2; ++round) {
        EXPECT_EQ(Restored(c, dram), kBlocks);
        EXPECT_EQ(Restored(c, ssd), kBlocks);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // One client, many restores in flight at once from its one UCX worker.
  ClusterStore& c = *clients[0];
  const auto ssd = SessionAtB(c, "shared-");
  Write(c, ssd, MediaType::kSsd);
  std::vector<std::thread> readers;
  for (int t = 0; t < kThreads; ++t) {
    readers.emplace_back([&] { EXPECT_EQ(Restored(c, ssd), kBlocks); });
  }
  for (std::thread& t : readers) t.join();
  // GetStats sums both members (a PeerStats round trip to B), which hold every SSD session.
  EXPECT_GE(c.GetStats().ssd.used_bytes, (kThreads + 1) * kBlocks * kLayout.block_bytes());
}

TEST_F(ClusterStoreTest, ARestoreDroppedMidStreamLeavesTheOthersWhole) {
  auto c = ClientOfA();
  ASSERT_NE(c, nullptr);
  const auto ssd = SessionAtB(*c, "drop-");
  Write(*c, ssd, MediaType::kSsd);
  for (int i = 0; i < 8; ++i) {
    HostBlocks dst(kLayout, ssd.size());
    auto h = c->Restore(ssd, kLayout, dst.buffers());
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    if (i % 2 == 0) (void)(*h)->WaitLayer(0);
    (*h)->Cancel();
    h->reset();  // replies still on their way land in the worker's buffers, not in dst
  }
  EXPECT_EQ(Restored(*c, ssd), kBlocks);
}

TEST_F(ClusterStoreTest, AHomeGoingAwayUnderRestoresGivesMissesNeverWrongBytes) {
  ClusterClientOptions fast;
  fast.timeout = std::chrono::milliseconds(2000);
  auto c = ClientOfA(fast);
  ASSERT_NE(c, nullptr);
  const auto dram = SessionAtB(*c, "gone-dram-");
  const auto ssd = SessionAtB(*c, "gone-ssd-");
  Write(*c, dram, MediaType::kDram);
  Write(*c, ssd, MediaType::kSsd);
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      // Hits while B serves, misses once it is gone; Restored checks every block it got.
      while (!stop.load()) (void)Restored(*c, t == 0 ? dram : ssd);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  b_.Stop();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(Restored(*c, ssd), 0u);  // B's blocks: misses, within the timeout
}

TEST_F(ClusterStoreTest, AClientOfADaemonThatJoinsLaterBecomesAClusterClient) {
  Node c_node;
  ASSERT_NO_FATAL_FAILURE(StartNode(&c_node, "c", {}, /*join=*/false));
  ClusterClientOptions quick;
  quick.view_refresh = std::chrono::milliseconds(100);
  auto c = ClusterStore::Connect(c_node.daemon->socket_path(), "t", {}, quick);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE((*c)->clustered());
  EXPECT_TRUE((*c)->Placement(Key{1, 1}).empty());
  // Its daemon restarts on the same socket, now a member: the client follows it into the cluster.
  c_node.Stop();
  ASSERT_NO_FATAL_FAILURE(StartNode(&c_node, "c", {}));
  for (int i = 0; i < 200 && (*c)->Placement(Key{1, 1}).size() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE((*c)->clustered());
  ASSERT_EQ((*c)->Placement(Key{1, 1}).size(), 3u) << "the client never saw the three members";
  // And reads and writes another member's blocks: its UCX worker was made.
  const auto ssd = SessionAtB(**c, "late-");
  Write(**c, ssd, MediaType::kSsd);
  EXPECT_EQ(Restored(**c, ssd), kBlocks);
  c->reset();
  c_node.Stop();
}

// Node B streams a long restore's SSD hits through a ring of 7 layers (chunks of 2 layers, 2
// reading, the client's window of 4): 1.3 MiB of staging for a 6 MiB session. Its staging bound,
// 4.5 MiB, takes three such rings, and not the session whole (18 of its 24 blocks).
class ClusterRingTest : public ClusterStoreTest {
 protected:
  static constexpr uint64_t kLayerRun = kBlocks * 2 * 4096;  // 192 KiB
  explicit ClusterRingTest(uint64_t ring_bytes = kMiB, uint64_t chunk_bytes = 2 * kLayerRun) {
    b_peer_.max_staging_bytes = 4 * kMiB + kMiB / 2;
    b_peer_.ring_bytes = ring_bytes;
    b_peer_.ring_chunk_bytes = chunk_bytes;
  }

  // B's UCX address, for raw peer requests.
  std::string AddressOfB() {
    for (const auto& m : b_.cluster->View().members) {
      if (m.node_id == b_.cluster->node_id()) return m.data_address;
    }
    ADD_FAILURE() << "B is not in its own view";
    return {};
  }
  // A PeerRestore of `keys` from `raw` to B (at `b`), announcing `window`, `window_bytes` and
  // `window_most`; an empty reply (no restore id, nothing found) when the call fails.
  static rpc::PeerRestoreReply RawRestore(UcxNode& raw, const std::string& b,
                                          const std::vector<Key>& keys, uint32_t window,
                                          uint64_t window_bytes = 0, uint32_t window_most = 0) {
    rpc::PeerRestore req;
    req.set_tenant("t");
    req.set_keys(serve::EncodeKeys(keys));
    *req.mutable_layout() = serve::ToRpc(kLongLayout);
    req.set_layer_window(window);
    req.set_layer_window_bytes(window_bytes);
    req.set_layer_window_most(window_most);
    rpc::PeerRestoreReply reply;
    auto r = raw.CallSync(b, kPeerRestore, req.SerializeAsString(), {}, std::chrono::seconds(10));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) EXPECT_TRUE(reply.ParseFromString(r->first));
    return reply;
  }
  // Ends restore `id` of `raw`'s at B (at `b`), releasing its staging.
  static void EndRestore(UcxNode& raw, const std::string& b, uint64_t id) {
    rpc::PeerRestoreEnd req;
    req.set_restore_id(id);
    auto r =
        raw.CallSync(b, kPeerRestoreEnd, req.SerializeAsString(), {}, std::chrono::seconds(10));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
  }
  // The blocks `reply` found.
  static size_t Found(const rpc::PeerRestoreReply& reply) {
    size_t n = 0;
    for (const auto& b : reply.blocks()) n += b.found() ? 1 : 0;
    return n;
  }
  // The first `hits` keys of `session` and then keys no one wrote, `total` in all: a batch whose
  // SSD hits at the home are fewer than its keys.
  static std::vector<Key> FewHits(const std::vector<Key>& session, size_t hits, size_t total) {
    std::vector<Key> keys(session.begin(), session.begin() + static_cast<ptrdiff_t>(hits));
    for (size_t j = hits; j < total; ++j) {
      keys.push_back(KeyFromString("never-written/" + std::to_string(j)));
    }
    return keys;
  }
  // A PeerLayer request for `layer` of restore `id` from a client that has the layers below
  // `received`.
  static std::string LayerRequest(uint64_t id, uint32_t layer, uint32_t received) {
    rpc::PeerLayer req;
    req.set_restore_id(id);
    req.set_layer(layer);
    req.set_received(received);
    return req.SerializeAsString();
  }
};

TEST_F(ClusterRingTest, ALongSsdRestoreStreamsThroughARingAtTheHome) {
  ASSERT_GT(kBlocks * kLongLayout.block_bytes(), b_peer_.max_staging_bytes);
  // B warms its staging at join (a ring's worth here), and says when it is done.
  for (int i = 0; i < 200 && !b_.cluster->peer_staging_warm(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(b_.cluster->peer_staging_warm());
  auto c = ClientOfA();
  ASSERT_NE(c, nullptr);
  const auto ssd = SessionAtB(*c, "ring-");
  Write(*c, ssd, MediaType::kSsd, kLongLayout);
  // Whole, byte-exact and in order, though the home never stages more than 7 of its 32 layers.
  EXPECT_EQ(Restored(*c, ssd, kLongLayout), kBlocks);
  // Two restores in flight at once, each with its own ring, from two clients' workers (a third
  // ring's room is left for a restore of the round before whose last layer is still on its way).
  auto c2 = ClientOfA();
  ASSERT_NE(c2, nullptr);
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        EXPECT_EQ(Restored(t == 1 ? *c2 : *c, ssd, kLongLayout), kBlocks);
      }
    });
  }
  for (std::thread& t : readers) t.join();
}

// The smallest ring the home makes: for the whole session, chunks of one layer and ring_bytes of
// one, so the ring is the two chunks reading and the client's window, less one: 5 slots for a
// window of 4, 3 for 2 (for a quarter of it, chunks of 2 layers: 7 slots for a window of 4). A
// client that kept more requests in flight than the window it told the home would wait for
// itself here: its last request would say it has fewer layers than the last chunk needs.
class ClusterTightRingTest : public ClusterRingTest {
 protected:
  ClusterTightRingTest() : ClusterRingTest(kLayerRun, kLayerRun / 2) {}
};

TEST_F(ClusterTightRingTest, ClientsKeepTheWindowTheyToldTheHome) {
  auto c = ClientOfA();
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->layer_window(kLayerRun), ClusterStore::kLayerWindow);
  const auto ssd = SessionAtB(*c, "tight-");
  Write(*c, ssd, MediaType::kSsd, kLongLayout);
  EXPECT_EQ(Restored(*c, ssd, kLongLayout), kBlocks);
  // Window bytes that take less than two of these layers: two requests in flight.
  ClusterClientOptions two;
  two.layer_window_bytes = kLayerRun;
  two.timeout = std::chrono::seconds(2);
  auto c2 = ClientOfA(two);
  ASSERT_NE(c2, nullptr);
  ASSERT_EQ(c2->layer_window(kLayerRun), 2u);
  for (int round = 0; round < 3; ++round) EXPECT_EQ(Restored(*c2, ssd, kLongLayout), kBlocks);
}

// A batch with fewer SSD hits at the home than keys (misses here, or DRAM hits): the client's
// window in bytes takes more of their smaller layers, and the home, which alone knows the hits,
// answers the window it sized its ring by. The client keeps that one: with more requests in
// flight than the ring was sized for, this tight ring would leave the restore waiting for itself
// (the whole session: the home answers 2, and a client keeping its most, 4, fails here).
TEST_F(ClusterTightRingTest, AClientKeepsTheWindowTheHomeAnswersForTheHitsItFound) {
  // Window bytes of one layer of the whole batch (a window of 2), four of a quarter of it.
  ClusterClientOptions o;
  o.layer_window_bytes = kLayerRun;
  o.timeout = std::chrono::seconds(5);
  auto c = ClientOfA(o);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->layer_window(kLayerRun), 2u);
  ASSERT_EQ(c->layer_window(kLayerRun / 4), ClusterStore::kLayerWindow);
  const auto ssd = SessionAtB(*c, "few-");
  Write(*c, ssd, MediaType::kSsd, kLongLayout);
  const std::vector<Key> few = FewHits(ssd, kBlocks / 4, kBlocks);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(Restored(*c, few, kLongLayout), kBlocks / 4);
    EXPECT_EQ(Restored(*c, ssd, kLongLayout), kBlocks);
  }
}

TEST_F(ClusterRingTest, TheHomeAnswersTheWindowForTheSsdHitsItFound) {
  auto c = ClientOfA();
  ASSERT_NE(c, nullptr);
  const auto ssd = SessionAtB(*c, "answer-");
  const auto dram = SessionAtB(*c, "answer-dram-");
  Write(*c, ssd, MediaType::kSsd, kLongLayout);
  Write(*c, dram, MediaType::kDram, kLongLayout);
  auto raw = UcxNode::Create();
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  const std::string b = AddressOfB();
  // A quarter of the keys found, on SSD: their layer is a quarter of that of every key.
  const std::vector<Key> few = FewHits(ssd, kBlocks / 4, kBlocks);
  const uint64_t hits_layer = kLayerRun / 4;
  // What the home answers, for a client's window, window bytes and most.
  const auto answer = [&](const std::vector<Key>& keys, uint32_t window, uint64_t bytes,
                          uint32_t most) {
    const rpc::PeerRestoreReply reply = RawRestore(**raw, b, keys, window, bytes, most);
    EXPECT_EQ(Found(reply), keys == few ? kBlocks / 4 : kBlocks);
    if (reply.restore_id() != 0) EndRestore(**raw, b, reply.restore_id());
    return reply.layer_window();
  };
  // Window bytes of one layer of every key: the window of those layers is the least, 2; that of
  // the hits' layers 4.
  ASSERT_EQ(ClusterStore::LayerWindow(kLayerRun, kLayerRun), 2u);
  EXPECT_EQ(answer(few, 2, kLayerRun, 4), 4u);
  EXPECT_EQ(answer(ssd, 2, kLayerRun, 4), 2u);
  EXPECT_EQ(answer(few, 2, 3 * hits_layer, 4), 3u);
  EXPECT_EQ(answer(few, 2, hits_layer, 4), 2u);       // never fewer than two
  EXPECT_EQ(answer(few, 2, 100 * kLayerRun, 3), 3u);  // never more than the client's most
  // A client that does not say both: its window (within the most the home takes).
  EXPECT_EQ(answer(few, 3, 0, 4), 3u);
  EXPECT_EQ(answer(few, 3, kLayerRun, 0), 3u);
  EXPECT_EQ(answer(few, 1000, 0, 0), PeerService::kMaxLayerWindow);
  // No window answered: a client that gave none, or a batch without SSD hits.
  EXPECT_EQ(answer(few, 0, kLayerRun, 4), 0u);
  EXPECT_EQ(answer(dram, 2, kLayerRun, 4), 0u);
}

// A client whose worker goes away while the home holds one of its layer requests (waiting for a
// slot of the ring): the restore is ended by the home's sweeper after its TTL, which answers the
// request with an error, to a client that is gone. The home must go on serving the others (it
// answered on UCX's reply endpoint of the request once, which UCX had destroyed: SIGSEGV).
class ClusterGoneClientTest : public ClusterRingTest {
 protected:
  ClusterGoneClientTest() : ClusterRingTest(kLayerRun, kLayerRun / 2) {
    b_peer_.restore_ttl = std::chrono::seconds(3);
  }
};

TEST_F(ClusterGoneClientTest, AClientGoneWhileTheHomeHoldsItsRequestLeavesTheHomeServing) {
  auto c = ClientOfA();
  ASSERT_NE(c, nullptr);
  const auto ssd = SessionAtB(*c, "gone-");
  Write(*c, ssd, MediaType::kSsd, kLongLayout);
  const std::string b = AddressOfB();
  {
    auto raw = UcxNode::Create();
    ASSERT_TRUE(raw.ok()) << raw.status().ToString();
    const rpc::PeerRestoreReply reply = RawRestore(**raw, b, ssd, 2);  // a ring of 3 slots
    ASSERT_NE(reply.restore_id(), 0u);
    // Layer 5 while the client says it has none: it waits at the home for a slot.
    (*raw)->Call(b, kPeerLayer, LayerRequest(reply.restore_id(), 5, 0), {},
                 std::chrono::seconds(30), [](Status, std::string, std::string) {});
    // B takes a worker's requests in order: once a later one is answered, the layer request is
    // waiting there.
    auto hello = (*raw)->CallSync(b, kPeerHello, rpc::PeerHello().SerializeAsString(), {},
                                  std::chrono::seconds(10));
    ASSERT_TRUE(hello.ok()) << hello.status().ToString();
    ASSERT_EQ(b_.cluster->peer_restores_in_flight(), 1u);
  }  // the client's worker goes, its request still waiting at the home
  // The sweeper ends the restore after its TTL (3 s, a sweep every 0.5 s) and answers the request.
  for (int i = 0; i < 400 && b_.cluster->peer_restores_in_flight() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(b_.cluster->peer_restores_in_flight(), 0u);
  EXPECT_EQ(Restored(*c, ssd, kLongLayout), kBlocks);
}

TEST(ClusterLayerWindowTest, FewerRequestsInFlightForLargeLayersButNeverFewerThanTwo) {
  const uint64_t bytes = ClusterClientOptions{}.layer_window_bytes;
  ASSERT_EQ(bytes, 128 * kMiB);
  EXPECT_EQ(ClusterStore::LayerWindow(8 * kMiB, bytes), ClusterStore::kLayerWindow);
  EXPECT_EQ(ClusterStore::LayerWindow(32 * kMiB, bytes), 4u);
  EXPECT_EQ(ClusterStore::LayerWindow(40 * kMiB, bytes), 3u);
  EXPECT_EQ(ClusterStore::LayerWindow(42 * kMiB, bytes), 3u);
  EXPECT_EQ(ClusterStore::LayerWindow(43 * kMiB, bytes), 2u);
  EXPECT_EQ(ClusterStore::LayerWindow(64 * kMiB, bytes), 2u);  // 2 GiB of a 32-layer model
  EXPECT_EQ(ClusterStore::LayerWindow(kGiB, bytes), 2u);
  EXPECT_EQ(ClusterStore::LayerWindow(0, bytes), ClusterStore::kLayerWindow);
  EXPECT_EQ(ClusterStore::LayerWindow(8 * kMiB, 0), 2u);
  // The home's, for a client's window `most`: within it, and that window when below two.
  EXPECT_EQ(PeerService::LayerWindow(8 * kMiB, bytes, 3), 3u);
  EXPECT_EQ(PeerService::LayerWindow(8 * kMiB, bytes, 64), 16u);
  EXPECT_EQ(PeerService::LayerWindow(kGiB, bytes, 64), 2u);
  EXPECT_EQ(PeerService::LayerWindow(kGiB, bytes, 1), 1u);
  EXPECT_EQ(PeerService::LayerWindow(0, bytes, 7), 7u);
}

TEST_F(ClusterRingTest, TheHomeStagesWholeForAClientWithoutAWindowAndHoldsARingToItsWord) {
  auto c = ClientOfA();
  ASSERT_NE(c, nullptr);
  const auto ssd = SessionAtB(*c, "raw-");
  Write(*c, ssd, MediaType::kSsd, kLongLayout);
  auto raw = UcxNode::Create();
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  const std::string b = AddressOfB();
  const auto timeout = std::chrono::seconds(10);
  const auto restore = [&](uint32_t window) { return RawRestore(**raw, b, ssd, window); };
  const auto layer = [&](uint64_t id, uint32_t l, uint32_t received) {
    return (*raw)->CallSync(b, kPeerLayer, LayerRequest(id, l, received), {}, timeout);
  };
  // No window: every layer staged at once, so only the leading 18 blocks (4.5 MiB) fit.
  const rpc::PeerRestoreReply whole = restore(0);
  EXPECT_EQ(Found(whole), 18u);
  auto last = layer(whole.restore_id(), 31, 0);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(last->second.size(), 18u * 2 * 4096);
  EndRestore(**raw, b, whole.restore_id());
  // A window: a ring, and every block.
  const rpc::PeerRestoreReply ring = restore(4);
  ASSERT_EQ(Found(ring), kBlocks);
  for (uint32_t l = 0; l < 7; ++l) {
    auto got = layer(ring.restore_id(), l, l);  // the client has every layer below l
    ASSERT_TRUE(got.ok()) << "layer " << l << ": " << got.status().ToString();
    EXPECT_EQ(got->second.size(), kLayerRun);
  }
  // Layer 6 landed, so layers 6 and 7 were started in the slots of layers 0 and 1, which the
  // client said it had: asking for layer 0 again is refused, not answered with layer 7's bytes.
  auto again = layer(ring.restore_id(), 0, 6);
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument) << again.status().ToString();
  EndRestore(**raw, b, ring.restore_id());
}

}  // namespace
}  // namespace flatcake::cluster
