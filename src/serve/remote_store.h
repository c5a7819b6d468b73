// RemoteStore: a Store (flatcake/store.h) served by the node daemon (`flatcake serve`,
// docs/serve.md): everything that takes a Store takes one. Only the control path goes through
// the daemon's socket (docs/protocol.md); the bytes move directly, in this process, through its
// own mapping of the daemon's DRAM arena and its own descriptors of the SSD pool files, with its
// own I/O engine (store/attached_media.h).
//
//  - Put: ReserveWrite; the segments written here (SegmentWriter); PublishWrite (AbortWrite
//    after any error: nothing of a failed put becomes visible).
//  - Lookup, Exists: one round trip.
//  - Restore: PinRead (answered once FC-MAS admitted the request); the DRAM copies and SSD reads
//    here (PinnedRead), layer by layer, every block verified (a mismatch is a miss); Unpin.
//    Restore returns at once; the handle's waits run the copies on the waiting thread when
//    nobody has started them (serve/remote_restore.h says which thread runs what). Errors the
//    embedded Restore returns from Restore (a stored layout other than `layout`) come from the
//    handle's Wait here.
//  - GetStats: the daemon's store, as a whole. GetInfo and options(): what the daemon announced
//    at the first connection, with this client's own I/O settings.
//  - Reclaim and Clear act on every tenant's blocks; they are not in the protocol: Reclaim frees
//    nothing (returns 0) and Clear does nothing. The daemon reclaims by itself at its
//    watermarks.
//
// The daemon going away: calls in flight fail (IOError naming why; a restore whose reads were
// under way fails too, since its pins went with the connection). Until the daemon is back,
// Lookup and Exists report misses, Restore reports every key missing, GetStats zeros, and Put
// fails with IOError. Each call first reconnects when the connection is broken (at most once per
// reconnect_interval): new Hello, new mapping, reopened files, so it sees the recovered pool.
//
// Thread safety: every method from any number of threads; calls share one connection and are
// pipelined on it. Restore handles may outlive nothing: destroy them before the store (the
// destructor fails restores still pinning, and waits for those reading).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flatcake/store.h"
#include "serve/cluster_view.h"
#include "serve/daemon_connection.h"
#include "serve/task_thread.h"
#include "store/read_leases.h"
#include "util/thread_annotations.h"

namespace flatcake::serve {

class RemoteStore final : public Store {
 public:
  // Connects to the daemon at `address` ("unix:///path/to/socket", or the path itself) as
  // `tenant` (1 to 64 bytes of [A-Za-z0-9._-]). Fails when this first connection does
  // (DaemonConnection::Open says how).
  static Result<std::unique_ptr<RemoteStore>> Connect(std::string address, std::string tenant,
                                                      ClientOptions options = {});
  ~RemoteStore() override;

  Result<PutResult> Put(std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& src,
                        const WriteHints& hints = {}) override;
  LookupResult Lookup(std::span<const Key> keys) override;
  Result<std::unique_ptr<RestoreHandle>> Restore(std::span<const Key> keys, const KvLayout& layout,
                                                 const BlockBuffers& dst,
                                                 const RestoreOptions& options = {}) override;
  // Not served through the daemon (see above): 0.
  uint64_t Reclaim(MediaType medium, double target_fraction) override { return 0; }
  // Not served through the daemon (see above): does nothing.
  void Clear() override {}
  StoreStats GetStats() const override;
  StoreInfo GetInfo() const override { return info_; }
  const StoreOptions& options() const override { return options_; }

  const std::string& tenant() const { return tenant_; }
  const std::string& socket_path() const { return path_; }
  // Whether the connection is up now (false after the daemon went away, until a call
  // reconnects).
  bool connected() const EXCLUDES(mu_);
  // Connections made after the first.
  uint64_t reconnects() const EXCLUDES(mu_);
  // Read leases over the current connection, for a data half of this process that moves the
  // bytes itself (the GPU path: gpu::GpuTransfer::Create). Each Pin is one PinRead, answered once
  // FC-MAS admitted it; Unpin reports what was delivered. The leases keep that connection (and
  // this process's mapping of the arena) until they are destroyed, which must be before this
  // store; once it breaks, Pin fails with IOError and the leases must be opened again. IOError
  // when the daemon cannot be reached.
  Result<std::unique_ptr<ReadLeases>> OpenReadLeases() EXCLUDES(mu_);
  // The cluster the daemon belongs to (docs/cluster.md): `enabled` false for a one-node store.
  // IOError when the daemon cannot be reached.
  Result<ClusterViewInfo> ClusterView() const EXCLUDES(mu_);

 private:
  RemoteStore(std::string path, std::string tenant, ClientOptions options);
  // The connection for a call: the current one, or a new one when it is broken (at most one
  // attempt per reconnect_interval). IOError when the daemon cannot be reached.
  Result<DaemonConnection::Use> Acquire() const EXCLUDES(mu_);
  // Describes the daemon for GetInfo and options(), from the first connection.
  void Describe(const DaemonConnection& c);

  const std::string path_;
  const std::string tenant_;
  const ClientOptions client_options_;
  StoreOptions options_;  // fixed by Connect
  StoreInfo info_;        // fixed by Connect
  mutable TaskThread runner_;

  mutable Mutex mu_;
  mutable std::unique_ptr<DaemonConnection> current_ GUARDED_BY(mu_);
  // Replaced connections that restores (or calls) still use; destroyed once none does.
  mutable std::vector<std::unique_ptr<DaemonConnection>> retired_ GUARDED_BY(mu_);
  mutable std::chrono::steady_clock::time_point next_attempt_ GUARDED_BY(mu_);
  mutable Status last_error_ GUARDED_BY(mu_);
  mutable uint64_t reconnects_ GUARDED_BY(mu_) = 0;
};

}  // namespace flatcake::serve
