#include "cluster/rendezvous.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace flatcake::cluster {
namespace {

Key Root(int i) { return KeyFromString("session-root-" + std::to_string(i)); }

// Shares follow the weights: with 1:2:5 over 40,000 keys each node's share is within 2 points of
// its weight's share.
TEST(Rendezvous, SharesFollowTheWeights) {
  const std::vector<RendezvousNode> nodes = {{1, 1.0}, {2, 2.0}, {3, 5.0}};
  std::map<uint32_t, int> homes;
  constexpr int kKeys = 40000;
  for (int i = 0; i < kKeys; ++i) homes[RendezvousHome(Root(i), nodes)]++;
  EXPECT_NEAR(homes[1] / double(kKeys), 1.0 / 8, 0.02);
  EXPECT_NEAR(homes[2] / double(kKeys), 2.0 / 8, 0.02);
  EXPECT_NEAR(homes[3] / double(kKeys), 5.0 / 8, 0.02);
}

// A node that leaves moves only the sessions it was home to, each to its next node in order; one
// that joins takes sessions only for itself.
TEST(Rendezvous, OnlyTheChangedNodesSessionsMove) {
  const std::vector<RendezvousNode> four = {{1, 3.0}, {2, 1.0}, {7, 2.0}, {9, 2.0}};
  const std::vector<RendezvousNode> three = {{1, 3.0}, {2, 1.0}, {9, 2.0}};
  int moved = 0;
  for (int i = 0; i < 5000; ++i) {
    const std::vector<uint32_t> order = RendezvousOrder(Root(i), four);
    ASSERT_EQ(order.size(), 4u);
    EXPECT_EQ(order.front(), RendezvousHome(Root(i), four));
    const uint32_t after = RendezvousHome(Root(i), three);
    if (order[0] == 7) {
      EXPECT_EQ(after, order[1]);  // the next in its order takes it
      moved++;
    } else {
      EXPECT_EQ(after, order[0]);  // untouched
    }
  }
  EXPECT_GT(moved, 5000 / 4 - 250);  // node 7 held about a quarter
  EXPECT_LT(moved, 5000 / 4 + 250);
}

TEST(Rendezvous, EveryClientComputesTheSameOrderAndZeroWeightsAreNeverChosen) {
  const std::vector<RendezvousNode> a = {{4, 1.0}, {5, 1.0}, {6, 0.0}};
  const std::vector<RendezvousNode> b = {{6, 0.0}, {5, 1.0}, {4, 1.0}};  // listed otherwise
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(RendezvousOrder(Root(i), a), RendezvousOrder(Root(i), b));
    EXPECT_NE(RendezvousHome(Root(i), a), 6u);
    EXPECT_EQ(RendezvousOrder(Root(i), a).size(), 2u);
  }
  EXPECT_EQ(RendezvousHome(Root(0), std::vector<RendezvousNode>{{3, 0.0}}), 0u);
  for (int i = 0; i < 1000; ++i) {
    const double u = RendezvousUniform(Root(i), 1);
    EXPECT_GT(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace flatcake::cluster
