// ClusterViewInfo: what a daemon tells its clients about the cluster it belongs to (the
// ClusterView request, docs/protocol.md; docs/cluster.md), so that a client reaches the other
// nodes itself: their NodeIDs, data-path addresses and rendezvous weights. Values; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flatcake::serve {

struct ClusterViewMember {
  uint32_t node_id = 0;
  std::string name;
  std::string data_address;  // the member's UCX worker address (binary)
  uint64_t capacity_bytes = 0;
  bool healthy = false;
};

struct ClusterViewInfo {
  bool enabled = false;  // false: a one-node store; the rest is unset
  uint32_t node_id = 0;  // the daemon's own NodeID; 0 while it has not joined yet (no members)
  bool etcd_reachable = false;
  std::vector<ClusterViewMember> members;  // the daemon included, in NodeID order
};

}  // namespace flatcake::serve
