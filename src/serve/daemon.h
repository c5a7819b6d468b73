// Daemon: the node daemon's server (`flatcake serve`, docs/serve.md). It owns the node's store,
// opened shared (FlatStore::OpenShared: the DRAM arena on a memfd its clients map, the SSD pool
// files they open; a durable pool is recovered there), listens on a Unix socket and serves each
// client connection in the protocol of docs/protocol.md: Hello (peer credentials checked against
// the allow-list, versions settled, the arena's descriptor handed over), then the tenant's
// lookups, write reservations and read pins, each namespaced by tenant (serve/tenants.h) and
// held as the connection's leases, which die with it (FlatStore::ReleaseOwner).
//
// Threads: one accepts; each connection has a reader, which serves its requests in order, and a
// writer, which sends the replies that come later (a PinRead is answered when FC-MAS admits it,
// which may be on a store thread). At most max_clients connections are served at once; one more
// is answered BUSY and closed.
//
// Failure: a frame that is not one (bad header, truncated, garbage) closes only its connection,
// with the reason logged; a well-formed request the daemon cannot serve gets an Error and the
// connection carries on. A client that dies, or closes, has its reservations aborted (nothing of
// them is published) and its pins dropped.
//
// Thread safety: Start, Shutdown and the destructor are for one thread; the accessors may be
// called from any thread while the daemon runs. Observer callbacks run on the connection threads,
// concurrently.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flatcake/gva.h"
#include "flatcake/options.h"
#include "flatcake/status.h"
#include "serve/cluster_view.h"
#include "serve/daemon_events.h"
#include "serve/tenants.h"
#include "serve/unix_socket.h"

namespace flatcake {
class FlatStore;
}

namespace flatcake::serve {

// Who is at the other end of a connection.
struct ClientIdentity {
  uint64_t session_token = 0;  // HelloReply.session_token; names the connection in the log
  PeerCredentials peer;
  std::string tenant;  // empty until Hello was accepted
  std::string name;    // Hello.client_name
};

// What the daemon tells whoever watches it (the metrics). Every method has a no-op default; an
// implementation must be thread-safe and quick (it runs on the connection threads).
class DaemonObserver {
 public:
  virtual ~DaemonObserver() = default;
  // A client passed Hello.
  virtual void OnClientConnected(const ClientIdentity& client) {}
  // A connection ended (after Hello or before it); `reason` for a person ("closed by the
  // client", "bad frame: ...", "daemon shutting down").
  virtual void OnClientClosed(const ClientIdentity& client, std::string_view reason) {}
  // A request was served (its reply or Error sent or queued); `ok`: not an Error.
  virtual void OnRequest(const ClientIdentity& client, RequestType type, bool ok) {}
  // A frame or a connection was refused for breaking the protocol, or a peer for its
  // credentials or for max_clients: `error` classifies it, `reason` is for a person. The
  // connection is closed, except for a whole frame whose request is refused with an Error
  // (kInvalidRequest, kUnknownRequest, a second Hello).
  virtual void OnProtocolError(const ClientIdentity& client, ProtocolError error,
                               std::string_view reason) {}
  // A PinRead found `dram_hits` and `ssd_hits` blocks (by the medium they lie on) and missed
  // `misses`.
  virtual void OnPinRead(uint64_t dram_hits, uint64_t ssd_hits, uint64_t misses) {}
  // FC-MAS admitted a PinRead whose reads need SSD after `seconds` in its queue.
  virtual void ObserveQueueWait(double seconds) {}
  // A client's restore through a pin ended (Unpin): from the PinRead request to the Unpin, by
  // the slowest medium of its hits.
  virtual void ObserveRestore(MediaType medium, double seconds) {}
};

struct DaemonOptions {
  StoreOptions store;  // relative SSD and DRAM paths are made absolute at Start
  std::string socket_path;
  mode_t socket_mode = 0600;  // who may connect at all; the allow-list still decides
  PeerAllowList allow = PeerAllowList::OwnUid();
  uint32_t max_clients = 256;
  // Quotas by tenant; a tenant not listed gets default_quota (0: no limit).
  std::map<std::string, TenantQuota, std::less<>> tenant_quotas;
  TenantQuota default_quota;
  // Refuse (PERMISSION_DENIED) a Hello naming a tenant not in tenant_quotas.
  bool only_listed_tenants = false;
  // Per connection: pins and reservations held at once (BUSY past them); 0: no limit.
  uint32_t max_pins_per_client = 0;
  uint32_t max_reservations_per_client = 0;
  // A connection that sends no Hello within this is closed.
  std::chrono::milliseconds hello_timeout{5000};
  // A client that does not take a reply within this is disconnected.
  std::chrono::milliseconds send_timeout{10000};
  // A request frame whose first byte came must be whole within this (a silent connection between
  // frames is kept; one that stops halfway through a frame is closed).
  std::chrono::milliseconds frame_timeout{10000};
  // Shutdown waits this long for the requests in flight (PinReads waiting for FC-MAS included).
  std::chrono::milliseconds shutdown_grace{5000};
  // A connection that ends with unpublished reservations gives their extents back only after
  // this long (its pins go at once): a client killed with writes in flight (io_uring completes
  // them after the process is gone) or cut off mid-copy may still land bytes there, which must
  // not fall on a block reserved after them. 0: at once. Not applied at shutdown.
  std::chrono::milliseconds write_quarantine{1000};
  DaemonObserver* observer = nullptr;  // not owned; outlives the daemon; null: none
  // Answers clients' ClusterView requests (docs/cluster.md); called on a connection's thread.
  // Null: a one-node store (the reply says the cluster is not enabled).
  std::function<ClusterViewInfo()> cluster_view;
};

class Daemon {
 public:
  // Takes the socket's lock file (<socket_path>.lock: Busy, naming the pid that holds it, when
  // another daemon serves this socket), opens the store (Busy when another store or daemon holds
  // the SSD pool or the DRAM file), listens on the socket (Busy when a live server is already
  // there; a stale socket is replaced) and starts accepting.
  static Result<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  // Shutdown().
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Stops accepting, lets the requests in flight finish (at most shutdown_grace), closes every
  // connection (releasing its leases) and closes the store, which syncs per its durability
  // option. Idempotent.
  void Shutdown();

  // The store it serves, for tests and tools in the same process (reclaim, stats). Valid until
  // Shutdown returns.
  FlatStore& store();
  const std::string& socket_path() const;
  // Per tenant, what its reservations and published segments occupy (serve/tenants.h).
  std::vector<TenantUsage> TenantUsages() const;
  // The tenants' quota accounts, for writes that reach the store other than through a client
  // connection (a cluster peer's: cluster/peer_service.h).
  TenantLedger& ledger();
  // Connections being served (Hello done or not).
  size_t num_clients() const;

 private:
  class Impl;
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flatcake::serve
