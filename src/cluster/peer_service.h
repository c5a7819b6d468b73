// PeerService: what a member's daemon answers, over UCX, to clients of other nodes
// (docs/cluster.md, "Data path"). The requests are the Peer* messages of flatcake_rpc.proto:
//   - PeerHello: the node's id and its DRAM arena (address, size, packed UCX key), which the
//     service registered with UCX at Start;
//   - PeerLookup: the store's Lookup;
//   - PeerPut: the store's Put of the blocks the request carries (reserved, written, published
//     only once written, as any Put);
//   - PeerRestore: pins the hits; the reply says where each is. The client reads DRAM hits
//     itself from the arena with UCX gets; SSD hits the service restores with the store's own
//     engine (coalesced, layer by layer, FC-MAS scheduled) into a staging buffer, and answers each
//     PeerLayer once that layer has landed, so the client receives layers in order as they land;
//   - PeerRestoreEnd: which SSD hits were read and verified; unpins and frees the staging.
// A client that says which layers it has (PeerRestore.layer_window, PeerLayer.received) gets a
// long restore's SSD hits through a ring: a few layers' buffers, filled a chunk of layers at a
// time (FlatStore::RestoreLayers, each chunk admitted by
// FC-MAS on its own, so that a restore the network holds back does not hold the read window),
// a chunk as soon as the client has the layers its buffers held. The home then holds a bounded
// staging whatever the restore's size, and its buffers, reused, are warm (docs/cluster.md).
// The staging of the restores in flight is bounded (`max_staging_bytes`; 0: a quarter of the
// machine's memory): a restore whose SSD hits do not all fit in what is left gets the leading
// ones that do, and the rest are misses (a client recomputes them), rather than the daemon
// running out of memory.
// A restore the client abandons (gone, cut off) is ended by the service after `restore_ttl`.
// Keys are mapped into the request's tenant namespace, as the daemon maps its clients' keys.
// A peer's put is charged to its tenant's quota on this node (the daemon's TenantLedger), as a
// local client's is: reserved, charged (or refused with NoSpace, which passes the batch on to the
// next member), written with the store's writer, published.
//
// Thread safety: handlers run on the UCX progress thread and never block; SSD completions on the
// store's I/O threads; the store restores start on a thread of their own; the sweeper on its own.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cluster/ucx_transport.h"
#include "serve/metrics.h"
#include "serve/tenants.h"
#include "store/flat_store.h"
#include "util/thread_annotations.h"

namespace flatcake::rpc {
class PeerRestore;
}  // namespace flatcake::rpc

namespace flatcake::cluster {

// UcxNode handler ids of the peer requests.
enum PeerRequest : uint32_t {
  kPeerHello = 100,
  kPeerLookup = 101,
  kPeerPut = 102,
  kPeerRestore = 103,
  kPeerLayer = 104,
  kPeerRestoreEnd = 105,
  kPeerStats = 106,
};

struct PeerServiceOptions {
  // The staging of the restores in flight, at most; 0: a quarter of the machine's memory.
  uint64_t max_staging_bytes = 0;
  // A restore its client abandoned is ended after this.
  std::chrono::milliseconds restore_ttl = std::chrono::seconds(30);
  // The ring (PeerService, above): about ring_bytes of layer buffers, and at least the chunks
  // reading and the client's window, less one, filled in chunks of about ring_chunk_bytes of layers
  // (at least one layer): the read budget of one store restore.
  uint64_t ring_bytes = uint64_t{128} << 20;
  uint64_t ring_chunk_bytes = uint64_t{32} << 20;
  // Start warms this much of the staging (at most an eighth of its bound, or one ring_bytes when
  // that is more and within half the bound), on the sweeper's thread, and keeps it for the
  // restores: the ring of a restore whose layers are 64 MiB (2 GiB of a 32-layer model), three
  // slots with the window of two that a ClusterStore keeps for such layers. A fresh buffer's pages
  // are zeroed by the kernel as the reads first touch them, which on a VM is far slower than the
  // disk (docs/cluster.md).
  uint64_t warm_staging_bytes = uint64_t{192} << 20;
};

class PeerService {
 public:
  // Chunks of a ring reading at once: one reading, one queued behind it (more would share the
  // disk with it and hold its layers back).
  static constexpr uint32_t kChunksReading = 2;
  // A client's layer window beyond this is taken as this.
  static constexpr uint32_t kMaxLayerWindow = 64;
  // The layer requests a client keeps in flight for layers of `layer_bytes`: about `window_bytes`
  // of them, at least two, at most `most` (`most` when layer_bytes is 0; `most` when that is
  // below two). The client's bound on the replies on their way into its buffers
  // (PeerRestore.layer_window_bytes), which the home applies to the SSD hits it found.
  static uint32_t LayerWindow(uint64_t layer_bytes, uint64_t window_bytes, uint32_t most);

  // `store`, `ucx`, `ledger` (null: no quotas) and `metrics` (null: none; the peer_* metrics,
  // docs/serve.md) outlive the service.
  PeerService(FlatStore* store, UcxNode* ucx, uint32_t node_id,
              serve::TenantLedger* ledger = nullptr, serve::DaemonMetrics* metrics = nullptr,
              const PeerServiceOptions& options = {});
  // Stop().
  ~PeerService();
  PeerService(const PeerService&) = delete;
  PeerService& operator=(const PeerService&) = delete;

  // Registers the arena and the handlers, starts the sweeper and the staging's warming.
  Status Start();
  // Replaces the handlers by ones that answer Aborted and capture nothing, waits for the calls of
  // the old ones in progress (UcxNode::Quiesce), ends every restore in flight (unpinned, staging
  // freed) and stops the sweeper: after it, the service may be destroyed and the store closed
  // while peers still send requests. Idempotent; not from the UCX progress thread.
  void Stop();

  size_t restores_in_flight() const EXCLUDES(mu_);
  // The warming of the staging (PeerServiceOptions::warm_staging_bytes) is over.
  bool staging_warm() const { return staging_warm_.load(); }

 private:
  struct Restore;
  class StagingPool;
  // `respond`, counting the request in the metrics when it answers.
  UcxNode::Responder Counted(UcxNode::Responder respond, uint32_t peer, serve::PeerRequestType type,
                             uint64_t bytes_in);
  // The client node of restore `restore_id` (0 when unknown).
  uint32_t FromNodeOf(uint64_t restore_id) const EXCLUDES(mu_);
  void OnHello(const std::string& header, UcxNode::Responder respond);
  void OnStats(const std::string& header, UcxNode::Responder respond);
  void OnLookup(const std::string& header, UcxNode::Responder respond);
  void OnPut(const std::string& header, std::string data, UcxNode::Responder respond);
  // Put of a peer's blocks for `tenant` (keys and hints already in its namespace), charged to
  // its quota when there is a ledger.
  Result<PutResult> ChargedPut(const std::string& tenant, std::span<const Key> keys,
                               const KvLayout& layout, const BlockBuffers& src,
                               const WriteHints& hints);
  void OnRestore(const std::string& header, UcxNode::Responder respond) EXCLUDES(mu_);
  // Sets r's chunk and slots (r->layout set) for `ssd_hits` found, by the window `req` asks for;
  // returns that window (PeerRestoreReply.layer_window), 0 without a ring.
  uint32_t SizeStaging(const rpc::PeerRestore& req, size_t ssd_hits, Restore* r) const;
  void OnLayer(const std::string& header, UcxNode::Responder respond) EXCLUDES(mu_);
  void OnRestoreEnd(const std::string& header, UcxNode::Responder respond) EXCLUDES(mu_);
  // Queues r for the starter thread (StartLoop), unless it is queued already.
  void QueueStart(const std::shared_ptr<Restore>& r) REQUIRES(mu_);
  void StartLoop() EXCLUDES(mu_);
  // Starts the store restores of r's next chunks whose buffers are free (all of its layers at
  // once without a ring). On the starter thread: starting a restore may wait for the I/O
  // engine's queue, which neither the UCX progress thread nor the store's threads may.
  void StartChunks(const std::shared_ptr<Restore>& r) EXCLUDES(mu_);
  // Called on the store's thread as layer `layer` of `r`'s SSD hits lands.
  void LayerLanded(const std::shared_ptr<Restore>& r, uint32_t layer) EXCLUDES(mu_);
  // Ends `r`: fails the layers still asked for, cancels and waits for its SSD reads, unpins.
  void Finish(const std::shared_ptr<Restore>& r) EXCLUDES(mu_);
  // Layer `layer` of r's SSD hits, in place in its (layer-major) staging: sent without a copy.
  static UcxPayload LayerBytes(const std::shared_ptr<Restore>& r, uint32_t layer);
  void SweepLoop() EXCLUDES(mu_);

  FlatStore* const store_;
  UcxNode* const ucx_;
  const uint32_t node_id_;
  serve::TenantLedger* const ledger_;
  serve::DaemonMetrics* const metrics_;
  const PeerServiceOptions options_;
  const uint64_t owner_;  // the lease owner of every pin the service takes
  UcxNode::Registration arena_;
  uint64_t arena_base_ = 0, arena_bytes_ = 0;

  mutable Mutex mu_;
  CondVar cv_;
  bool stopped_ GUARDED_BY(mu_) = false;
  uint64_t next_restore_ GUARDED_BY(mu_) = 1;
  std::unordered_map<uint64_t, std::shared_ptr<Restore>> restores_ GUARDED_BY(mu_);
  // Staging buffers of ended restores, for the next ones; shared with the restores, whose last
  // layer may still be on its way out when the service is gone.
  std::shared_ptr<StagingPool> staging_;
  std::thread sweeper_;
  CondVar start_cv_;
  std::deque<std::shared_ptr<Restore>> to_start_ GUARDED_BY(mu_);
  std::thread starter_;
  std::atomic<bool> stop_warming_{false};
  std::atomic<bool> staging_warm_{false};
  bool started_ = false;
};

}  // namespace flatcake::cluster
