#include "serve/metrics_observer.h"

#include "store/flat_store.h"

namespace flatcake::serve {

void MetricsObserver::OnClientConnected(const ClientIdentity& client) {
  metrics_.OnClientConnected(client.tenant);
}

void MetricsObserver::OnClientClosed(const ClientIdentity& client, std::string_view reason) {
  // Only a connection that passed Hello was counted as connected (DaemonMetrics pairs the two).
  if (!client.tenant.empty()) metrics_.OnClientDisconnected(client.tenant);
}

void MetricsObserver::OnRequest(const ClientIdentity& client, RequestType type, bool ok) {
  metrics_.OnRequest(type);
}

void MetricsObserver::OnProtocolError(const ClientIdentity& client, ProtocolError error,
                                      std::string_view reason) {
  metrics_.OnProtocolError(error);
}

void MetricsObserver::OnPinRead(uint64_t dram_hits, uint64_t ssd_hits, uint64_t misses) {
  metrics_.OnPinRead(dram_hits, ssd_hits, misses);
}

void MetricsObserver::ObserveQueueWait(double seconds) { metrics_.ObserveQueueWait(seconds); }

void MetricsObserver::ObserveRestore(MediaType medium, double seconds) {
  metrics_.ObserveRestore(medium, seconds);
}

void WatchDaemon(Daemon& daemon, const std::map<std::string, TenantQuota, std::less<>>& tenants,
                 DaemonMetrics* metrics) {
  metrics->SetRecovery(daemon.store().GetInfo());
  for (const auto& [name, quota] : tenants) {
    metrics->SetTenantQuota(name, MediaType::kDram, quota.dram_bytes);
    metrics->SetTenantQuota(name, MediaType::kSsd, quota.ssd_bytes);
  }
  // Called without the metrics' lock (metrics.h), so it may set the tenants' figures.
  metrics->SetStoreSource([&daemon, metrics] {
    for (const TenantUsage& u : daemon.TenantUsages()) {
      for (MediaType m : {MediaType::kDram, MediaType::kSsd}) {
        const auto i = static_cast<size_t>(m == MediaType::kSsd);
        metrics->SetTenantUsage(u.tenant, m, u.used_bytes[i] + u.reserved_bytes[i]);
        metrics->SetTenantQuota(u.tenant, m, u.quota.bytes(m));
      }
    }
    const FlatStore::RestoreQueueDepth q = daemon.store().restore_queue_depth();
    metrics->SetRestoreQueue(q.waiting, q.admitted);
    return daemon.store().GetStats();
  });
}

void UnwatchDaemon(DaemonMetrics* metrics) { metrics->SetStoreSource({}); }

}  // namespace flatcake::serve
