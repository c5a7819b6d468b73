#include "cluster/rendezvous.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>

namespace flatcake::cluster {
namespace {

double Score(const Key& root, const RendezvousNode& n) {
  return -n.weight / std::log(RendezvousUniform(root, n.node_id));
}

}  // namespace

double RendezvousUniform(const Key& root, uint32_t node_id) {
  const uint64_t words[2] = {root.hi, root.lo};
  const uint64_t h =
      XXH3_64bits_withSeed(words, sizeof(words), 0x9e3779b97f4a7c15ull ^ uint64_t{node_id});
  // The top 53 bits, centred in their interval: never 0 nor 1.
  return (static_cast<double>(h >> 11) + 0.5) / 9007199254740992.0;
}

std::vector<uint32_t> RendezvousOrder(const Key& root, std::span<const RendezvousNode> nodes) {
  std::vector<std::pair<double, uint32_t>> scored;
  scored.reserve(nodes.size());
  for (const RendezvousNode& n : nodes) {
    if (n.weight > 0) scored.emplace_back(Score(root, n), n.node_id);
  }
  std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<uint32_t> order;
  order.reserve(scored.size());
  for (const auto& [score, id] : scored) order.push_back(id);
  return order;
}

uint32_t RendezvousHome(const Key& root, std::span<const RendezvousNode> nodes) {
  const std::vector<uint32_t> order = RendezvousOrder(root, nodes);
  return order.empty() ? 0 : order.front();
}

}  // namespace flatcake::cluster
