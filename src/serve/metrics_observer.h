// The daemon's metrics wired to a running daemon (`flatcake serve --metrics-addr`, docs/serve.md
// "Metrics"): MetricsObserver passes the daemon's events to DaemonMetrics, and WatchDaemon points
// the metrics at the daemon's store and ledger, read at each scrape.
//
// Thread-safe as DaemonMetrics is: the observer's methods run on the connection threads.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "serve/daemon.h"
#include "serve/metrics.h"

namespace flatcake::serve {

// A DaemonObserver that counts what it is told in `metrics` (not owned; outlives it).
class MetricsObserver final : public DaemonObserver {
 public:
  explicit MetricsObserver(DaemonMetrics* metrics) : metrics_(*metrics) {}

  void OnClientConnected(const ClientIdentity& client) override;
  void OnClientClosed(const ClientIdentity& client, std::string_view reason) override;
  void OnRequest(const ClientIdentity& client, RequestType type, bool ok) override;
  void OnProtocolError(const ClientIdentity& client, ProtocolError error,
                       std::string_view reason) override;
  void OnPinRead(uint64_t dram_hits, uint64_t ssd_hits, uint64_t misses) override;
  void ObserveQueueWait(double seconds) override;
  void ObserveRestore(MediaType medium, double seconds) override;

 private:
  DaemonMetrics& metrics_;
};

// Points `metrics` at `daemon`: its store's statistics and every tenant's use (Daemon::
// TenantUsages) are read at each scrape, its recovery figures once; the quotas of the tenants
// named in `tenants` are set now (a tenant seen later shows its quota with its use).
// REQUIRES: UnwatchDaemon(metrics) before the daemon shuts down.
void WatchDaemon(Daemon& daemon, const std::map<std::string, TenantQuota, std::less<>>& tenants,
                 DaemonMetrics* metrics);
// Stops reading the daemon at scrapes (the figures stay as last read).
void UnwatchDaemon(DaemonMetrics* metrics);

}  // namespace flatcake::serve
