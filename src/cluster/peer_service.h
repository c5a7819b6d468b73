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
// store's I/O threads; the sweeper on its own thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cluster/ucx_transport.h"
#include "serve/metrics.h"
#include "serve/tenants.h"
#include "store/flat_store.h"
#include "util/thread_annotations.h"

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

class PeerService {
 public:
  // `store`, `ucx`, `ledger` (null: no quotas) and `metrics` (null: none; the peer_* metrics,
  // docs/serve.md) outlive the service.
  PeerService(FlatStore* store, UcxNode* ucx, uint32_t node_id,
              serve::TenantLedger* ledger = nullptr, serve::DaemonMetrics* metrics = nullptr,
              uint64_t max_staging_bytes = 0,
              std::chrono::milliseconds restore_ttl = std::chrono::seconds(30));
  // Stop().
  ~PeerService();
  PeerService(const PeerService&) = delete;
  PeerService& operator=(const PeerService&) = delete;

  // Registers the arena and the handlers, starts the sweeper.
  Status Start();
  // Replaces the handlers by ones that answer Aborted and capture nothing, waits for the calls of
  // the old ones in progress (UcxNode::Quiesce), ends every restore in flight (unpinned, staging
  // freed) and stops the sweeper: after it, the service may be destroyed and the store closed
  // while peers still send requests. Idempotent; not from the UCX progress thread.
  void Stop();

  size_t restores_in_flight() const EXCLUDES(mu_);

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
  void OnLayer(const std::string& header, UcxNode::Responder respond) EXCLUDES(mu_);
  void OnRestoreEnd(const std::string& header, UcxNode::Responder respond) EXCLUDES(mu_);
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
  const std::chrono::milliseconds restore_ttl_;
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
  bool started_ = false;
};

}  // namespace flatcake::cluster
