// Membership: a daemon's place in a FlatCake cluster, kept in etcd (docs/cluster.md).
//
// Keys, under /flatcake/<cluster>/:
//   ids/<node_id>      the NodeID's claim: taken by a create-if-absent transaction, so two nodes
//                      never share one; value: the node's name.
//   members/<node_id>  the member's record (MemberInfo as JSON), refreshed every TTL/3 with its
//                      use.
// Both are attached to the node's lease: a node that stops renewing (killed, cut off) drops out
// when the lease expires, within lease_ttl_s, and its NodeID is free again.
//
// Join takes the preferred NodeID (the one a restarted node had, saved next to its pool) when it
// is free, else the lowest free one in 1..kMaxNodeId. A keeper thread renews the lease and
// republishes the record; while etcd is unreachable the node keeps its last view of the members
// and serves on, and when etcd is back it renews, or, if the lease expired meanwhile, joins again
// under the same NodeID when it is still free. A watcher thread follows members/ (list, then
// watch from the list's revision; listed again after any break).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd_client.h"
#include "flatcake/status.h"
#include "util/thread_annotations.h"

namespace flatcake::cluster {

// NodeIDs are the GVA's 12-bit NodeID field; 0 is the local node's own addresses.
inline constexpr uint32_t kMaxNodeId = 4095;

struct MemberInfo {
  uint32_t node_id = 0;
  std::string name;          // the node's name (its host name by default)
  std::string socket;        // the daemon's Unix socket on its node
  std::string data_address;  // where peers reach its data path; empty: none published
  uint64_t dram_capacity_bytes = 0;
  uint64_t ssd_capacity_bytes = 0;
  uint64_t dram_used_bytes = 0;
  uint64_t ssd_used_bytes = 0;
  int64_t pid = 0;
  int64_t started_unix_ms = 0;
  int64_t updated_unix_ms = 0;  // when the record was last published
  int64_t lease_ttl_s = 0;
  std::string version;

  // The rendezvous weight: the bytes it can hold (DRAM and SSD).
  double weight() const { return static_cast<double>(dram_capacity_bytes + ssd_capacity_bytes); }
  // Renewed within its lease TTL as of `now_unix_ms`.
  bool healthy(int64_t now_unix_ms) const {
    return updated_unix_ms + lease_ttl_s * 1000 >= now_unix_ms;
  }
};

std::string EncodeMember(const MemberInfo& m);
// Corruption naming what is wrong for a record that is not a member's JSON.
Result<MemberInfo> DecodeMember(std::string_view json_text);

int64_t UnixNowMs();

// The key prefix of cluster `name`: "/flatcake/<name>/".
std::string ClusterPrefix(std::string_view name);
// A cluster name: 1 to 64 of [A-Za-z0-9._-]. InvalidArgument otherwise.
Status ValidateClusterName(std::string_view name);

// The members of `cluster` as etcd holds them now, in NodeID order (for `flatcake cluster
// status`, and for clients that are no member).
Result<std::vector<MemberInfo>> ListMembers(EtcdClient& etcd, std::string_view cluster);

struct MembershipOptions {
  std::vector<serve::HostPort> etcd;
  std::string cluster = "default";
  int64_t lease_ttl_s = 10;
  // The NodeID to take when it is free (a restarted node's old one); 0: the lowest free.
  uint32_t preferred_node_id = 0;
  std::chrono::milliseconds etcd_timeout{2000};
  MemberInfo self;  // node_id, started_unix_ms, updated_unix_ms and lease_ttl_s are set by Join
  // Called before each publish to bring the record's use (and anything else) up to date.
  std::function<void(MemberInfo*)> refresh;
};

class Membership {
 public:
  // Takes a NodeID, publishes the record and starts the keeper and watcher. IOError when etcd
  // cannot be reached, NoSpace when every NodeID is taken, InvalidArgument for bad options.
  static Result<std::unique_ptr<Membership>> Join(MembershipOptions options);
  // Leave().
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Stops the threads and revokes the lease (the node drops out at once). Idempotent.
  void Leave();

  uint32_t node_id() const { return node_id_.load(); }
  const std::string& cluster() const { return options_.cluster; }
  // The members last seen (this node included), in NodeID order.
  std::vector<MemberInfo> Members() const EXCLUDES(mu_);
  // Whether the last call to etcd succeeded.
  bool etcd_reachable() const { return reachable_.load(); }
  // Counts changes of the member set seen (for waiting in tests).
  uint64_t generation() const { return generation_.load(); }
  // Waits until `pred(Members())` holds or `timeout` passes: whether it held.
  bool WaitFor(const std::function<bool(const std::vector<MemberInfo>&)>& pred,
               std::chrono::milliseconds timeout) const EXCLUDES(mu_);

 private:
  explicit Membership(MembershipOptions options);
  // Grants a lease and takes a NodeID (`preferred` first when not 0).
  Status Register(uint32_t preferred);
  Status Publish();
  void KeeperLoop();
  void WatcherLoop();
  void SetMembers(std::vector<MemberInfo> members) EXCLUDES(mu_);
  void ApplyEvents(const std::vector<EtcdEvent>& events) EXCLUDES(mu_);
  // Sleeps up to `d`, returning early (false) when stopping.
  bool SleepFor(std::chrono::milliseconds d) EXCLUDES(mu_);

  MembershipOptions options_;
  EtcdClient etcd_;
  const std::string prefix_;
  std::atomic<uint32_t> node_id_{0};
  std::atomic<int64_t> lease_{0};
  std::atomic<bool> reachable_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};

  mutable Mutex mu_;
  mutable CondVar cv_;
  std::vector<MemberInfo> members_ GUARDED_BY(mu_);
  MemberInfo self_ GUARDED_BY(mu_);
  bool left_ GUARDED_BY(mu_) = false;

  std::thread keeper_, watcher_;
};

}  // namespace flatcake::cluster
