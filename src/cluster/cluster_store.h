// ClusterStore: a Store over a whole FlatCake cluster, for a client of one node's daemon
// (docs/cluster.md, "Data path"). It connects to the node's daemon (serve::RemoteStore) and asks
// it which cluster it belongs to (ClusterView); when it belongs to none, it is that RemoteStore.
// Otherwise every batch is routed by its first key, the session's root: capacity-weighted
// rendezvous hashing over the healthy members (cluster/rendezvous.h) names its home.
//  - A batch whose home is this node takes the local path (RemoteStore: the daemon's arena and
//    pool files, directly).
//  - Lookup at a remote home: one UCX round trip (PeerLookup). A session whose home was full when
//    it was written is on a later member in rendezvous order (Put, below): when the home does not
//    hold even the root, the next kOverflowProbes members are asked, a round trip each, and the
//    member found is remembered for the restore that follows (forgotten again once a lookup finds
//    the session at its home, or a put writes it there).
//  - Put: a batch that starts a chain goes to its rendezvous home; one that continues a chain
//    (WriteHints.prefix_tail) goes to the member that holds its previous block, so a session
//    stays on one node (found from this client's record of its own puts, else by a lookup of that
//    block at each member). To a remote member the blocks travel with the request (PeerPut); it
//    reserves, writes and publishes them as any Put. A home that answers NoSpace passes the batch
//    to the next member in rendezvous order, as far as kOverflowProbes members past the home (as
//    far as a lookup asks): a new session none of those can hold is refused with NoSpace. While
//    etcd is unreachable (the daemon says so), new sessions are placed on this node.
//  - Restore from where the session is (the member its lookup or its put found, else its home):
//    PeerRestore pins the hits; DRAM hits are read with one-sided
//    UCX gets from the home's arena straight into the caller's buffers; SSD hits are read by the
//    home's own engine and arrive layer by layer (PeerLayer), each copied into place and
//    checksummed by the restore's thread as it lands;
//    layers are reported in order; every block is verified against its stored checksum here. A
//    home that dies or stops answering within `timeout` turns the blocks not yet verified into
//    misses: never an error, never wrong bytes.
// The member list is the daemon's, refreshed at most every `view_refresh` (also while the daemon
// is in no cluster: a daemon restarted with --etcd makes its clients cluster clients, their UCX
// worker made then; until then the store is its RemoteStore).
//
// GetStats sums the stores of the members this client can reach: its own node's and, with a
// PeerStats round trip each, every other healthy member's (a member that does not answer within
// `timeout` is left out). Reclaim and Clear are as RemoteStore's: no client operation (each
// daemon reclaims by itself).
//
// Thread safety: as RemoteStore; restore handles must not outlive the store.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "cluster/ucx_transport.h"
#include "flatcake/store.h"
#include "serve/remote_store.h"
#include "util/thread_annotations.h"

namespace flatcake::cluster {

struct ClusterClientOptions {
  std::chrono::milliseconds timeout{5000};  // per remote request
  std::chrono::milliseconds view_refresh{1000};
  // The replies of a remote SSD restore on their way into the client's buffers, at most about
  // this many bytes, but never fewer than two replies (ClusterStore::LayerWindow).
  uint64_t layer_window_bytes = uint64_t{128} << 20;
};

class ClusterStore final : public Store {
 public:
  static Result<std::unique_ptr<ClusterStore>> Connect(std::string address, std::string tenant,
                                                       serve::ClientOptions options = {},
                                                       ClusterClientOptions cluster = {});
  ~ClusterStore() override;

  Result<PutResult> Put(std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& src,
                        const WriteHints& hints = {}) override;
  LookupResult Lookup(std::span<const Key> keys) override;
  Result<std::unique_ptr<RestoreHandle>> Restore(std::span<const Key> keys, const KvLayout& layout,
                                                 const BlockBuffers& dst,
                                                 const RestoreOptions& options = {}) override;
  uint64_t Reclaim(MediaType medium, double target_fraction) override {
    return local_->Reclaim(medium, target_fraction);
  }
  void Clear() override { local_->Clear(); }
  StoreStats GetStats() const override EXCLUDES(mu_);
  StoreInfo GetInfo() const override { return local_->GetInfo(); }
  const StoreOptions& options() const override { return local_->options(); }

  // The client of this node's daemon: the whole store when not clustered().
  serve::RemoteStore& local() { return *local_; }
  // Whether the daemon is in a cluster; this node's NodeID there (0 when not).
  bool clustered() const EXCLUDES(mu_);
  uint32_t local_node_id() const EXCLUDES(mu_);
  // The members, home first, for a batch whose first key is `root` (empty when not clustered).
  std::vector<uint32_t> Placement(const Key& root) EXCLUDES(mu_);
  // The client's UCX worker (to register the memory restores land in: UcxNode::Register);
  // REQUIRES: clustered().
  UcxNode& ucx_worker() { return *ucx_; }

  // PeerLayer requests a remote SSD restore of layers of `layer_bytes` keeps in flight:
  // kLayerWindow, fewer when the layers are large, so that about `window_bytes` at most are on
  // their way (each lands in a buffer of the client's, fresh memory the first time), but never
  // fewer than two (one landing while the next is sent). A restore tells the home the window of a
  // layer of every key (the most SSD hits there can be), and the most it would keep (that of one
  // SSD hit's layer) with its window_bytes: the home applies those to the layer of the SSD hits it
  // found (PeerService::LayerWindow) and answers the window it sized its ring by, which the client
  // keeps; a home that does not answer sized its ring by the first.
  static constexpr uint32_t kLayerWindow = 4;
  static uint32_t LayerWindow(uint64_t layer_bytes, uint64_t window_bytes);
  // The same with this client's layer_window_bytes.
  uint32_t layer_window(uint64_t layer_bytes) const {
    return LayerWindow(layer_bytes, options_.layer_window_bytes);
  }

 private:
  struct Peer {
    std::string address;
    uint64_t arena_base = 0;  // 0: the member has no DRAM arena
    std::string arena_rkey;
  };
  ClusterStore(std::unique_ptr<serve::RemoteStore> local, ClusterClientOptions options);
  void RefreshView() EXCLUDES(mu_);
  // Keeps `view` as the member list, first making the UCX worker when it names a cluster and
  // there is none yet (the error, and the last view kept, when that fails).
  Status AdoptView(serve::ClusterViewInfo view) EXCLUDES(mu_);
  // The member's address and arena (a PeerHello the first time).
  Result<Peer> PeerOf(uint32_t node) const EXCLUDES(mu_);
  // The member that holds `key` (the last block a batch continues): this client's own record of
  // where it put it, else a lookup at this node, then at each other member. nullopt: none.
  std::optional<uint32_t> NodeHolding(const Key& key) EXCLUDES(mu_);
  // A PeerLookup at member `node`: no hit when it cannot be reached.
  LookupResult RemoteLookup(uint32_t node, std::span<const Key> keys) EXCLUDES(mu_);
  // The local store's Lookup when `node` is this one, else RemoteLookup.
  LookupResult LookupAt(uint32_t node, std::span<const Key> keys) EXCLUDES(mu_);
  // The member the batch rooted at `root` is on: the one this client last found it on or put it
  // to, while that one is in `order` (the healthy members), else its home (order[0]).
  uint32_t NodeOfRoot(const Key& root, const std::vector<uint32_t>& order) EXCLUDES(mu_);
  // Records in `cache` (tails_ or roots_) that `key` is on `node`.
  using NodeOfKey = std::unordered_map<Key, uint32_t, KeyHash>;
  void Remember(NodeOfKey ClusterStore::*cache, const Key& key, uint32_t node) EXCLUDES(mu_);
  void ForgetRoot(const Key& root) EXCLUDES(mu_);
  Result<PutResult> RemotePut(uint32_t node, std::span<const Key> keys, const KvLayout& layout,
                              const BlockBuffers& src, const WriteHints& hints);

  class RemoteRestore;
  std::unique_ptr<serve::RemoteStore> local_;
  const ClusterClientOptions options_;
  // Made once the view says the daemon is in a cluster, before that view is kept (under mu_), and
  // kept: whoever saw such a view under mu_ may use it unlocked.
  std::unique_ptr<UcxNode> ucx_;

  mutable Mutex mu_;
  serve::ClusterViewInfo view_ GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point view_at_ GUARDED_BY(mu_);
  mutable std::unordered_map<uint32_t, Peer> peers_ GUARDED_BY(mu_);  // a cache of PeerOf's
  // Two caches of where keys are, each of at most kMaxRemembered (cleared when full).
  static constexpr size_t kMaxRemembered = 1 << 16;
  // Where this client put the last block of its recent batches.
  NodeOfKey tails_ GUARDED_BY(mu_);
  // Sessions found, or put, away from their home: root key -> member.
  static constexpr size_t kOverflowProbes = 2;
  NodeOfKey roots_ GUARDED_BY(mu_);
};

}  // namespace flatcake::cluster
