// ClusterNode: a node daemon's part in a cluster (docs/cluster.md): its UCX worker, its
// membership in etcd, and the PeerService that answers other nodes' clients. `flatcake serve
// --etcd` and `flatcake bench cluster` run one per daemon:
//
//   auto node = ClusterNode::Create();                     // the UCX worker
//   daemon_options.cluster_view = (*node)->ViewSource();  // clients' ClusterView answers
//   auto daemon = serve::Daemon::Start(daemon_options);
//   (*node)->Join(daemon.get(), options);                  // NodeID, record, peer service
//   ...
//   (*node)->Leave();                                      // before the daemon shuts down
//
// Until Join, ViewSource says the cluster is enabled with no members (NodeID 0), so that clients
// prepare their data path and place everything locally until the node has joined. The NodeID is
// saved in options.node_id_file (when given) and taken again at the next Join when it is free.
//
// Thread safety: ViewSource's function may be called from any thread at any time; Join and
// Leave from one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/membership.h"
#include "cluster/peer_service.h"
#include "cluster/ucx_transport.h"
#include "serve/cluster_view.h"
#include "serve/daemon.h"
#include "serve/metrics.h"
#include "util/thread_annotations.h"

namespace flatcake::cluster {

struct ClusterNodeOptions {
  std::vector<serve::HostPort> etcd;
  std::string cluster = "default";
  std::string node_name;  // empty: the host name
  int64_t lease_ttl_s = 10;
  std::string node_id_file;  // empty: the NodeID is not kept across restarts
  std::string version;
  serve::DaemonMetrics* metrics = nullptr;  // the peer_* metrics; null: none; outlives the node
  // The service of other nodes' clients (its staging bound: peer.max_staging_bytes).
  PeerServiceOptions peer;
};

class ClusterNode {
 public:
  static Result<std::unique_ptr<ClusterNode>> Create();
  // Leave().
  ~ClusterNode();
  ClusterNode(const ClusterNode&) = delete;
  ClusterNode& operator=(const ClusterNode&) = delete;

  // For DaemonOptions::cluster_view; the node must outlive whoever calls it (the daemon).
  std::function<serve::ClusterViewInfo()> ViewSource();
  // Joins, describing `daemon` (its socket, its store's capacities and, at each renewal, use),
  // and starts serving peers from its store. `daemon` outlives Leave.
  Status Join(serve::Daemon* daemon, const ClusterNodeOptions& options) EXCLUDES(mu_);
  // Leaves the cluster (the lease revoked), stops serving peers and stops the UCX worker (so that
  // no peer reads the store's memory once it closes); Join after it fails. Idempotent.
  void Leave() EXCLUDES(mu_);

  uint32_t node_id() const EXCLUDES(mu_);
  // The peer service's staging is warm (PeerService::staging_warm); false when not joined.
  bool peer_staging_warm() const EXCLUDES(mu_);
  // Other nodes' clients' restores the peer service holds (pinned, staged); 0 when not joined.
  size_t peer_restores_in_flight() const EXCLUDES(mu_);
  UcxNode& ucx() { return *ucx_; }
  serve::ClusterViewInfo View() const EXCLUDES(mu_);

 private:
  explicit ClusterNode(std::unique_ptr<UcxNode> ucx) : ucx_(std::move(ucx)) {}

  std::unique_ptr<UcxNode> ucx_;
  mutable Mutex mu_;
  std::unique_ptr<Membership> membership_ GUARDED_BY(mu_);
  std::unique_ptr<PeerService> peers_ GUARDED_BY(mu_);
  bool left_ GUARDED_BY(mu_) = false;
};

// Hexadecimal of `bytes` (a UCX worker address in a member record), and back (empty for text
// that is not).
std::string HexEncode(std::string_view bytes);
std::string HexDecode(std::string_view hex);

}  // namespace flatcake::cluster
