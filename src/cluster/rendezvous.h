// Capacity-weighted rendezvous hashing: where a session lives in the cluster.
//
// Every node gets a score for a session's root key, -weight / ln(u), where u in (0, 1) is a hash
// of (key, node id); the session's home is the node with the highest score, and when that one is
// full the next one takes it. Every client computes the same order from the member list alone,
// without asking anyone; a node's share of the sessions is its weight's share of the total; and
// when a node joins or leaves only the sessions whose home it is (or becomes) move.
//
// Functions over values; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flatcake/key.h"

namespace flatcake::cluster {

struct RendezvousNode {
  uint32_t node_id = 0;
  double weight = 0;  // > 0: a node of weight 0 is never chosen
};

// The hash of (key, node) mapped into (0, 1), the `u` of the score.
double RendezvousUniform(const Key& root, uint32_t node_id);

// The nodes' ids in rendezvous order for `root`: the home first, then who takes over when it is
// full. Nodes of weight <= 0 are left out; ties (equal scores) go to the lower id.
std::vector<uint32_t> RendezvousOrder(const Key& root, std::span<const RendezvousNode> nodes);

// RendezvousOrder(...)[0], or 0 when no node has a positive weight.
uint32_t RendezvousHome(const Key& root, std::span<const RendezvousNode> nodes);

}  // namespace flatcake::cluster
