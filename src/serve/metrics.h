// DaemonMetrics: the daemon's figures in Prometheus form, served as text on an HTTP endpoint
// (GET /metrics on metrics_addr) and read back by `flatcake stats`. docs/serve.md ("Metrics")
// lists every metric with its labels and meaning; metrics_test fails when one is missing there.
//
// Two sources feed it:
//  - the store's snapshots: Update(StoreStats), or a source SetStoreSource calls at each scrape;
//    SetRecovery(StoreInfo) once after open. The store's figures are cumulative; those exported as
//    counters (the
//    *_total metrics) keep the last value seen and add the difference, so that rate() works and
//    a counter never goes down. A value below the last one (the store behind the metrics was
//    replaced) counts in whole as the increment. Levels (capacity, use, live blocks) are gauges.
//  - the daemon's events: connections, requests, protocol errors, pins, restore and queue
//    times, per-tenant use and quotas; hits by medium at PinRead. The bytes a client read come
//    through the store (its Unpin report, FlatStore::RecordLeaseRead), or through
//    OnClientReads for a store that does not count them.
//
// Label values are bounded: media (dram, ssd), request types and protocol error reasons are
// the enums below; tenants are those seen first, at most kMaxTenantLabels of them, and every
// later one is counted under tenant="(other)" (not a valid tenant name), so a client naming
// tenants at random cannot grow the endpoint without limit.
//
// Without prometheus-cpp at build time (Available() false) the class still exists: every method
// is a no-op, Render() is empty and Create refuses a non-empty address with Unsupported.
//
// Thread-safe: every method may be called from any thread at any time.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "flatcake/gva.h"
#include "flatcake/status.h"
#include "flatcake/store.h"
#include "serve/daemon_events.h"

namespace flatcake::serve {

inline constexpr std::array<std::string_view, 2> kMediumLabels = {"dram", "ssd"};  // by MediaType
inline constexpr size_t kMaxTenantLabels = 256;
inline constexpr std::string_view kOtherTenantLabel = "(other)";

// Upper bounds of the latency histograms (restore times, FC-MAS waits), in seconds: 100 µs to
// 30 s, about three per decade.
inline constexpr std::array<double, 17> kLatencyBucketsSeconds = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};

// The names of the metrics `flatcake stats` reads (docs/serve.md lists them all).
namespace metric {
inline constexpr std::string_view kCapacityBytes = "flatcake_capacity_bytes";
inline constexpr std::string_view kUsedBytes = "flatcake_used_bytes";
inline constexpr std::string_view kBlocks = "flatcake_blocks";
inline constexpr std::string_view kDeliveredBytes = "flatcake_delivered_bytes_total";
inline constexpr std::string_view kChecksumMismatches = "flatcake_checksum_mismatches_total";
inline constexpr std::string_view kIoErrors = "flatcake_io_errors_total";
inline constexpr std::string_view kConnections = "flatcake_connections_total";
inline constexpr std::string_view kHits = "flatcake_hits_total";
inline constexpr std::string_view kMisses = "flatcake_misses_total";
inline constexpr std::string_view kReadBytes = "flatcake_read_bytes_total";
inline constexpr std::string_view kWrittenBytes = "flatcake_written_bytes_total";
inline constexpr std::string_view kReclaimedBytes = "flatcake_reclaimed_bytes_total";
inline constexpr std::string_view kReclaimedScopes = "flatcake_reclaimed_scopes_total";
inline constexpr std::string_view kRestoreSeconds = "flatcake_restore_seconds";
inline constexpr std::string_view kQueueRequests = "flatcake_restore_queue_requests";
inline constexpr std::string_view kQueueWaitSeconds = "flatcake_restore_queue_wait_seconds";
inline constexpr std::string_view kClients = "flatcake_clients";
inline constexpr std::string_view kRequests = "flatcake_requests_total";
inline constexpr std::string_view kProtocolErrors = "flatcake_protocol_errors_total";
inline constexpr std::string_view kTenantUsedBytes = "flatcake_tenant_used_bytes";
inline constexpr std::string_view kTenantQuotaBytes = "flatcake_tenant_quota_bytes";
inline constexpr std::string_view kRecoveredBlocks = "flatcake_recovered_blocks";
inline constexpr std::string_view kRecoveredSegments = "flatcake_recovered_segments";
inline constexpr std::string_view kRecoveredBytes = "flatcake_recovered_bytes";
inline constexpr std::string_view kRecoverySeconds = "flatcake_recovery_seconds";
inline constexpr std::string_view kPeerRequests = "flatcake_peer_requests_total";
inline constexpr std::string_view kPeerBytes = "flatcake_peer_bytes_total";
inline constexpr std::string_view kPeerErrors = "flatcake_peer_errors_total";
}  // namespace metric

// The requests other nodes' clients make of this daemon over the cluster's data path
// (cluster/peer_service.h), for the peer_* metrics' `type` label.
enum class PeerRequestType : uint8_t {
  kHello,
  kLookup,
  kPut,
  kRestore,
  kLayer,
  kRestoreEnd,
  kStats
};
inline constexpr std::array<std::string_view, 7> kPeerRequestTypeNames = {
    "hello", "lookup", "put", "restore", "layer", "restore_end", "stats"};

class DaemonMetrics {
 public:
  // Whether this build has the Prometheus endpoint (prometheus-cpp was found).
  static bool Available();

  // The metrics, and with a non-empty `address` (HOST:PORT, serve/http_get.h; port 0 takes a
  // free one, see port()) an HTTP server answering GET /metrics there on a thread of its own.
  // InvalidArgument for a malformed address, IOError when it cannot listen there (in use, not
  // an address of this host), Unsupported "metrics not built" when the address is set and
  // Available() is false.
  static Result<std::unique_ptr<DaemonMetrics>> Create(std::string_view address);
  ~DaemonMetrics();
  DaemonMetrics(const DaemonMetrics&) = delete;
  DaemonMetrics& operator=(const DaemonMetrics&) = delete;

  // The port the endpoint listens on; 0 without one.
  uint16_t port() const;
  // The text exposition, as GET /metrics answers it (without the endpoint's own exposer_*
  // metrics); empty when !Available().
  std::string Render() const;

  // --- the store's snapshots ---
  // Capacity, use, blocks and scopes per medium; bytes admitted, written, read, delivered and
  // reclaimed; restores by kind; index, journal and error figures.
  void Update(const StoreStats& stats);
  // Where Update's snapshots can come from: with a source set, each scrape (and Render) calls
  // it and Update with its result first, so that the store's figures are those of the moment
  // of the scrape and no timer is needed. It runs on the scraping thread (the endpoint's), so it
  // must be thread-safe (Store::GetStats is). It is called without this object's lock held, so
  // it may set the figures the store does not have (SetTenantUsage, from the daemon's ledger),
  // but it must not call Render or SetStoreSource. Empty: none.
  void SetStoreSource(std::function<StoreStats()> source);
  // What recovery at open rebuilt (StoreInfo's recovered_* and recovery_seconds).
  void SetRecovery(const StoreInfo& info);

  // --- the daemon's events ---
  // A client's Hello was accepted under `tenant` / its connection ended. The daemon calls the
  // second once for every first.
  void OnClientConnected(std::string_view tenant);
  void OnClientDisconnected(std::string_view tenant);
  void OnRequest(RequestType type);
  void OnProtocolError(ProtocolError reason);
  // A PinRead found `dram_hits` and `ssd_hits` blocks (by the medium they lie on) and missed
  // `misses`.
  void OnPinRead(uint64_t dram_hits, uint64_t ssd_hits, uint64_t misses);
  // A client's reads of a pin, from its Unpin: added to the bytes read and delivered per medium
  // and to the checksum failures. Only for a store that does not count its clients' reads
  // itself: `flatcake serve`'s does (FlatStore::RecordLeaseRead at Unpin, in its StoreStats), so
  // the daemon does not call this.
  void OnClientReads(const ClientReads& reads);
  // One restore of `medium` (its slowest medium) took `seconds`, from PinRead to Unpin.
  void ObserveRestore(MediaType medium, double seconds);
  // How long FC-MAS held one request before admitting its SSD reads (PinReadReply.queued_ns).
  void ObserveQueueWait(double seconds);
  // The FC-MAS queue now: requests waiting for the read window, and admitted ones in flight.
  void SetRestoreQueue(uint64_t waiting, uint64_t admitted);
  // Bytes `tenant` holds on `medium` now, and its quota there (0: none).
  void SetTenantUsage(std::string_view tenant, MediaType medium, uint64_t used_bytes);
  void SetTenantQuota(std::string_view tenant, MediaType medium, uint64_t quota_bytes);
  // A request of another node's client (`peer`: the NodeID it said it is on; 0: not said),
  // the bytes it carried in and its reply's out, and whether it failed.
  void OnPeerRequest(uint32_t peer, PeerRequestType type, uint64_t bytes_in, uint64_t bytes_out,
                     bool failed);

 private:
  struct Impl;
  explicit DaemonMetrics(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flatcake::serve
