// DaemonMetrics without prometheus-cpp (CMake did not find it): no registry, no endpoint, every
// figure dropped. The daemon calls it as it would the real one; only an address is refused.
#include "serve/http_get.h"
#include "serve/metrics.h"

namespace flatcake::serve {

struct DaemonMetrics::Impl {};

bool DaemonMetrics::Available() { return false; }

Result<std::unique_ptr<DaemonMetrics>> DaemonMetrics::Create(std::string_view address) {
  if (!address.empty()) {
    FC_RETURN_IF_ERROR(ParseHostPort(address).status());
    return Status::Unsupported(
        "metrics not built: this flatcake was built without prometheus-cpp (install "
        "prometheus-cpp-dev and rebuild), so it cannot serve metrics on " +
        std::string(address));
  }
  return std::unique_ptr<DaemonMetrics>(new DaemonMetrics(std::make_unique<Impl>()));
}

DaemonMetrics::DaemonMetrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DaemonMetrics::~DaemonMetrics() = default;

uint16_t DaemonMetrics::port() const { return 0; }
std::string DaemonMetrics::Render() const { return {}; }
void DaemonMetrics::Update(const StoreStats&) {}
void DaemonMetrics::SetStoreSource(std::function<StoreStats()>) {}
void DaemonMetrics::SetRecovery(const StoreInfo&) {}
void DaemonMetrics::OnClientConnected(std::string_view) {}
void DaemonMetrics::OnClientDisconnected(std::string_view) {}
void DaemonMetrics::OnRequest(RequestType) {}
void DaemonMetrics::OnProtocolError(ProtocolError) {}
void DaemonMetrics::OnPinRead(uint64_t, uint64_t, uint64_t) {}
void DaemonMetrics::OnClientReads(const ClientReads&) {}
void DaemonMetrics::ObserveRestore(MediaType, double) {}
void DaemonMetrics::ObserveQueueWait(double) {}
void DaemonMetrics::SetRestoreQueue(uint64_t, uint64_t) {}
void DaemonMetrics::SetTenantUsage(std::string_view, MediaType, uint64_t) {}
void DaemonMetrics::SetTenantQuota(std::string_view, MediaType, uint64_t) {}
void DaemonMetrics::OnPeerRequest(uint32_t, PeerRequestType, uint64_t, uint64_t, bool) {}

}  // namespace flatcake::serve
