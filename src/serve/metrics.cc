// DaemonMetrics over prometheus-cpp: a Registry of families, an Exposer (civetweb) serving it.
// Built when CMake finds prometheus-cpp; metrics_absent.cc stands in otherwise.
#include "serve/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <functional>
#include <map>
#include <vector>

#include "serve/http_get.h"
#include "util/thread_annotations.h"

namespace flatcake::serve {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

// A counter fed from a cumulative value of the store: adds what the value grew by.
struct CumulativeCounter {
  Counter* counter = nullptr;
  uint64_t last = 0;

  void Feed(uint64_t value) {
    // Below the last value: another store, counted from zero (a counter never goes down).
    const uint64_t delta = value >= last ? value - last : value;
    if (delta > 0) counter->Increment(static_cast<double>(delta));
    last = value;
  }
};

// Per-medium figures of MediumStats: the levels as gauges, the cumulative ones as counters.
struct MediumField {
  std::string_view name;
  std::string_view help;
  uint64_t MediumStats::*field;
};
constexpr MediumField kMediumGauges[] = {
    {metric::kCapacityBytes, "Capacity of the medium, bytes.", &MediumStats::capacity_bytes},
    {metric::kUsedBytes, "Bytes of the medium allocated to live scopes.", &MediumStats::used_bytes},
    {metric::kBlocks, "Live blocks on the medium.", &MediumStats::blocks_live},
    {"flatcake_scopes", "Live scopes on the medium.", &MediumStats::scopes_live},
};
constexpr MediumField kMediumCounters[] = {
    {"flatcake_admitted_bytes_total", "Bytes placed on the medium by writes (segment footprints).",
     &MediumStats::admitted_bytes},
    {metric::kWrittenBytes, "Bytes written to the medium.", &MediumStats::written_bytes},
    {metric::kReadBytes,
     "Bytes read from the medium, by the store and by clients (SSD: gaps and alignment included).",
     &MediumStats::read_bytes},
    {metric::kDeliveredBytes, "Block bytes delivered from the medium to readers.",
     &MediumStats::delivered_bytes},
    {metric::kReclaimedBytes, "Bytes of the medium freed by reclaiming scopes.",
     &MediumStats::reclaimed_bytes},
    {metric::kReclaimedScopes, "Scopes of the medium reclaimed.", &MediumStats::scopes_reclaimed},
};
// Indexes into kMediumCounters of the ones clients' reads add to.
constexpr size_t kReadBytesCounter = 2;
constexpr size_t kDeliveredBytesCounter = 3;

struct StoreField {
  std::string_view name;
  std::string_view help;
  uint64_t StoreStats::*field;
};
constexpr StoreField kStoreGauges[] = {
    {"flatcake_restore_window_peak_bytes", "Most SSD restore bytes FC-MAS had admitted at once.",
     &StoreStats::restore_window_peak_bytes},
    {"flatcake_index_capacity", "Slots of the block index.", &StoreStats::index_capacity},
    {"flatcake_index_entries", "Entries in the block index.", &StoreStats::index_size},
    {"flatcake_index_tombstones", "Tombstones in the block index.", &StoreStats::index_tombstones},
    {"flatcake_sessions", "Sessions with at least one live scope.", &StoreStats::sessions},
    {"flatcake_journal_bytes", "Size of the SSD pool's journal, bytes.",
     &StoreStats::journal_bytes},
};
constexpr StoreField kStoreCounters[] = {
    {"flatcake_blocks_written_total", "Blocks written.", &StoreStats::blocks_written},
    {"flatcake_blocks_already_present_total", "Blocks a write skipped: their key was present.",
     &StoreStats::blocks_skipped_present},
    {metric::kChecksumMismatches,
     "Blocks whose checksum did not match on read, by the store or a client (served as misses).",
     &StoreStats::checksum_mismatches},
    {metric::kIoErrors, "I/O errors of the store.", &StoreStats::io_errors},
    {"flatcake_index_compactions_total", "Compactions of the block index.",
     &StoreStats::index_compactions},
    {"flatcake_journal_rewrites_total", "Rewrites of the SSD pool's journal.",
     &StoreStats::journal_rewrites},
    {"flatcake_journal_errors_total", "Journal records that could not be written.",
     &StoreStats::journal_errors},
    {"flatcake_syncs_total", "Syncs of the SSD pool (data, then journal).", &StoreStats::syncs},
};
constexpr size_t kChecksumCounter = 2;

constexpr std::string_view kRestoreKinds[] = {"dram_ready", "ssd", "cancelled"};
constexpr uint64_t StoreStats::*kRestoreFields[] = {
    &StoreStats::restores_dram_ready, &StoreStats::restores_ssd, &StoreStats::restores_cancelled};

std::string Str(std::string_view s) { return std::string(s); }

Family<Gauge>& GaugeFamily(prometheus::Registry& r, std::string_view name, std::string_view help) {
  return prometheus::BuildGauge().Name(Str(name)).Help(Str(help)).Register(r);
}
Family<Counter>& CounterFamily(prometheus::Registry& r, std::string_view name,
                               std::string_view help) {
  return prometheus::BuildCounter().Name(Str(name)).Help(Str(help)).Register(r);
}

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {kLatencyBucketsSeconds.begin(), kLatencyBucketsSeconds.end()};
}

// A gauge per tenant and medium. Tenants past kMaxTenantLabels share the "(other)" series, which
// shows the sum of their values (each one's is kept for that) when `sum_overflow` is set, and
// is not exported otherwise (a sum of quotas, some of them "no limit", means nothing).
struct TenantGauge {
  Family<Gauge>* family = nullptr;
  bool sum_overflow = false;
  std::map<std::string, uint64_t, std::less<>> overflow[2];  // by medium

  void Set(std::string_view label, std::string_view tenant, MediaType medium, uint64_t value) {
    const size_t m = static_cast<size_t>(medium);
    if (label == kOtherTenantLabel && !sum_overflow) return;
    Gauge& g = family->Add({{"tenant", Str(label)}, {"medium", Str(kMediumLabels[m])}});
    if (label != kOtherTenantLabel) {
      g.Set(static_cast<double>(value));
      return;
    }
    overflow[m][Str(tenant)] = value;
    uint64_t sum = 0;
    for (const auto& [name, v] : overflow[m]) sum += v;
    g.Set(static_cast<double>(sum));
  }
};

}  // namespace

struct DaemonMetrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  uint16_t port = 0;

  // Serialises the cumulative counters' last values and the tenant tables. The series are made
  // at construction and never change; prometheus-cpp's series are thread-safe themselves.
  Mutex mu;

  // Series made at construction (their label values are fixed), indexed by medium.
  Gauge* medium_gauges[std::size(kMediumGauges)][2] = {};
  CumulativeCounter medium_counters[std::size(kMediumCounters)][2] GUARDED_BY(mu);
  Gauge* store_gauges[std::size(kStoreGauges)] = {};
  CumulativeCounter store_counters[std::size(kStoreCounters)] GUARDED_BY(mu);
  CumulativeCounter restores[std::size(kRestoreKinds)] GUARDED_BY(mu);
  Counter* hits[2] = {};
  Counter* misses = nullptr;
  Histogram* restore_seconds[2] = {};
  Histogram* queue_wait = nullptr;
  Gauge* queue_waiting = nullptr;
  Gauge* queue_admitted = nullptr;
  Counter* requests[kRequestTypeNames.size()] = {};
  Counter* protocol_errors[kProtocolErrorNames.size()] = {};
  Counter* connections = nullptr;
  Gauge* recovered_scopes = nullptr;
  Gauge* recovered_segments = nullptr;
  Gauge* recovered_blocks = nullptr;
  Gauge* recovered_bytes = nullptr;
  Gauge* recovery_skipped = nullptr;
  Gauge* recovery_read_bytes = nullptr;
  Gauge* recovery_seconds = nullptr;
  Family<Gauge>* clients = nullptr;
  Family<Counter>* peer_requests = nullptr;
  Family<Counter>* peer_bytes = nullptr;
  Family<Counter>* peer_errors = nullptr;

  std::map<std::string, std::string, std::less<>> tenant_labels GUARDED_BY(mu);
  TenantGauge tenant_used GUARDED_BY(mu);
  TenantGauge tenant_quota GUARDED_BY(mu);
  std::function<StoreStats()> store_source GUARDED_BY(mu);

  // The registry as the exposer collects it: the store's snapshot refreshed first.
  class Collector : public prometheus::Collectable {
   public:
    explicit Collector(Impl* impl) : impl_(impl) {}
    std::vector<prometheus::MetricFamily> Collect() const override {
      impl_->Refresh();
      return impl_->registry->Collect();
    }

   private:
    Impl* impl_;
  };
  // What the exposer collects, and the exposer: last, so that it stops before anything it reads
  // goes.
  std::shared_ptr<Collector> collector;
  std::unique_ptr<prometheus::Exposer> exposer;

  Impl() {
    prometheus::Registry& r = *registry;
    const auto medium = [](size_t m) {
      return prometheus::Labels{{"medium", Str(kMediumLabels[m])}};
    };
    for (size_t i = 0; i < std::size(kMediumGauges); ++i) {
      auto& f = GaugeFamily(r, kMediumGauges[i].name, kMediumGauges[i].help);
      for (size_t m = 0; m < 2; ++m) medium_gauges[i][m] = &f.Add(medium(m));
    }
    for (size_t i = 0; i < std::size(kMediumCounters); ++i) {
      auto& f = CounterFamily(r, kMediumCounters[i].name, kMediumCounters[i].help);
      for (size_t m = 0; m < 2; ++m) medium_counters[i][m].counter = &f.Add(medium(m));
    }
    for (size_t i = 0; i < std::size(kStoreGauges); ++i) {
      store_gauges[i] = &GaugeFamily(r, kStoreGauges[i].name, kStoreGauges[i].help).Add({});
    }
    for (size_t i = 0; i < std::size(kStoreCounters); ++i) {
      store_counters[i].counter =
          &CounterFamily(r, kStoreCounters[i].name, kStoreCounters[i].help).Add({});
    }
    auto& restore_family = CounterFamily(
        r, "flatcake_restores_total",
        "Restores the store served, by kind: dram_ready (every hit in DRAM), ssd, cancelled.");
    for (size_t k = 0; k < std::size(kRestoreKinds); ++k) {
      restores[k].counter = &restore_family.Add({{"kind", Str(kRestoreKinds[k])}});
    }
    auto& hit_family =
        CounterFamily(r, metric::kHits, "Blocks found by reads (PinRead), by their medium.");
    for (size_t m = 0; m < 2; ++m) hits[m] = &hit_family.Add(medium(m));
    misses = &CounterFamily(r, metric::kMisses, "Blocks reads asked for and did not find.").Add({});
    auto& restore_hist = prometheus::BuildHistogram()
                             .Name(Str(metric::kRestoreSeconds))
                             .Help(
                                 "Restore time from PinRead to Unpin, seconds, by the slowest "
                                 "medium of its hits.")
                             .Register(r);
    for (size_t m = 0; m < 2; ++m) {
      restore_seconds[m] = &restore_hist.Add(medium(m), LatencyBuckets());
    }
    queue_wait = &prometheus::BuildHistogram()
                      .Name(Str(metric::kQueueWaitSeconds))
                      .Help("Time FC-MAS held a restore before admitting its SSD reads, seconds.")
                      .Register(r)
                      .Add({}, LatencyBuckets());
    auto& queue = GaugeFamily(r, metric::kQueueRequests,
                              "Restores in FC-MAS now: waiting for the read window, or admitted.");
    queue_waiting = &queue.Add({{"state", "waiting"}});
    queue_admitted = &queue.Add({{"state", "admitted"}});
    auto& request_family = CounterFamily(r, metric::kRequests, "Requests received, by type.");
    for (size_t t = 0; t < kRequestTypeNames.size(); ++t) {
      requests[t] = &request_family.Add({{"type", Str(kRequestTypeNames[t])}});
    }
    auto& error_family =
        CounterFamily(r, metric::kProtocolErrors, "Frames and connections refused, by reason.");
    for (size_t e = 0; e < kProtocolErrorNames.size(); ++e) {
      protocol_errors[e] = &error_family.Add({{"reason", Str(kProtocolErrorNames[e])}});
    }
    connections =
        &CounterFamily(r, metric::kConnections, "Client connections accepted (Hello).").Add({});
    clients = &GaugeFamily(r, metric::kClients, "Clients connected now, by tenant.");
    peer_requests = &CounterFamily(r, metric::kPeerRequests,
                                   "Requests of other nodes' clients, by their node and type.");
    peer_bytes = &CounterFamily(r, metric::kPeerBytes,
                                "Bytes to and from other nodes' clients, by their node.");
    peer_errors = &CounterFamily(r, metric::kPeerErrors,
                                 "Requests of other nodes' clients that failed, by their node.");
    tenant_used.family =
        &GaugeFamily(r, metric::kTenantUsedBytes, "Bytes a tenant holds on a medium.");
    tenant_used.sum_overflow = true;
    tenant_quota.family = &GaugeFamily(r, metric::kTenantQuotaBytes,
                                       "A tenant's quota on a medium, bytes; 0 is no limit.");
    const auto recovery = [&](std::string_view name, std::string_view help) {
      return &GaugeFamily(r, name, help).Add({});
    };
    recovered_scopes = recovery("flatcake_recovered_scopes", "Scopes recovery rebuilt at open.");
    recovered_segments = recovery(metric::kRecoveredSegments, "Segments recovery rebuilt at open.");
    recovered_blocks = recovery(metric::kRecoveredBlocks, "Blocks recovery rebuilt at open.");
    recovered_bytes =
        recovery(metric::kRecoveredBytes, "Payload bytes of the blocks recovery rebuilt.");
    recovery_skipped =
        recovery("flatcake_recovery_skipped_records",
                 "Damaged, torn or conflicting journal records recovery passed over.");
    recovery_read_bytes =
        recovery("flatcake_recovery_read_bytes", "Bytes recovery read (journal and superblocks).");
    recovery_seconds = recovery(metric::kRecoverySeconds, "Time recovery took at open, seconds.");
  }

  // DaemonMetrics::Update (metrics.h).
  void Update(const StoreStats& stats) EXCLUDES(mu) {
    const MediumStats* media[2] = {&stats.dram, &stats.ssd};
    MutexLock lock(mu);
    for (size_t d = 0; d < 2; ++d) {
      for (size_t i = 0; i < std::size(kMediumGauges); ++i) {
        medium_gauges[i][d]->Set(static_cast<double>(media[d]->*kMediumGauges[i].field));
      }
      for (size_t i = 0; i < std::size(kMediumCounters); ++i) {
        medium_counters[i][d].Feed(media[d]->*kMediumCounters[i].field);
      }
    }
    for (size_t i = 0; i < std::size(kStoreGauges); ++i) {
      store_gauges[i]->Set(static_cast<double>(stats.*kStoreGauges[i].field));
    }
    for (size_t i = 0; i < std::size(kStoreCounters); ++i) {
      store_counters[i].Feed(stats.*kStoreCounters[i].field);
    }
    for (size_t k = 0; k < std::size(kRestoreKinds); ++k) {
      restores[k].Feed(stats.*kRestoreFields[k]);
    }
  }

  // The store's snapshot from the source, when there is one.
  void Refresh() EXCLUDES(mu) {
    std::function<StoreStats()> source;
    {
      MutexLock lock(mu);
      source = store_source;
    }
    if (source) Update(source());
  }

  // The label of `tenant`: its own name while there is room, else "(other)".
  std::string TenantLabel(std::string_view tenant) REQUIRES(mu) {
    const auto it = tenant_labels.find(tenant);
    if (it != tenant_labels.end()) return it->second;
    const std::string label =
        tenant_labels.size() < kMaxTenantLabels ? Str(tenant) : Str(kOtherTenantLabel);
    // Overflow tenants are remembered too, so that each keeps its label.
    tenant_labels.emplace(Str(tenant), label);
    return label;
  }
};

// The endpoint's HTTP server gives each connection a thread while it is open, and an idle or
// slow peer held one for 30 s: two such peers blinded every scrape. It now has this many threads
// (each waits, costing a stack of address space and nothing else), and a connection that sends
// or takes nothing for kMetricsIoTimeoutMs is closed, so scrapes are served while up to
// kMetricsThreads - 1 peers hold connections open (tested with 100).
constexpr int kMetricsThreads = 128;
constexpr int kMetricsIoTimeoutMs = 5000;

bool DaemonMetrics::Available() { return true; }

Result<std::unique_ptr<DaemonMetrics>> DaemonMetrics::Create(std::string_view address) {
  auto impl = std::make_unique<Impl>();
  if (!address.empty()) {
    FC_ASSIGN_OR_RETURN(const HostPort at, ParseHostPort(address));
    try {
      impl->exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
          "listening_ports", at.ToString(), "num_threads", std::to_string(kMetricsThreads),
          "request_timeout_ms", std::to_string(kMetricsIoTimeoutMs), "keep_alive_timeout_ms",
          std::to_string(kMetricsIoTimeoutMs), "linger_timeout_ms", "0"});
    } catch (const std::exception& e) {
      return Status::IOError("metrics: cannot listen on " + at.ToString() +
                             " (in use, or not an address of this host): " + e.what());
    }
    impl->collector = std::make_shared<Impl::Collector>(impl.get());
    impl->exposer->RegisterCollectable(impl->collector);
    const std::vector<int> ports = impl->exposer->GetListeningPorts();
    impl->port = ports.empty() ? at.port : static_cast<uint16_t>(ports.front());
  }
  return std::unique_ptr<DaemonMetrics>(new DaemonMetrics(std::move(impl)));
}

DaemonMetrics::DaemonMetrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DaemonMetrics::~DaemonMetrics() = default;

uint16_t DaemonMetrics::port() const { return impl_->port; }

std::string DaemonMetrics::Render() const {
  impl_->Refresh();
  return prometheus::TextSerializer().Serialize(impl_->registry->Collect());
}

void DaemonMetrics::Update(const StoreStats& stats) { impl_->Update(stats); }

void DaemonMetrics::SetStoreSource(std::function<StoreStats()> source) {
  MutexLock lock(impl_->mu);
  impl_->store_source = std::move(source);
}

void DaemonMetrics::SetRecovery(const StoreInfo& info) {
  Impl& m = *impl_;
  m.recovered_scopes->Set(static_cast<double>(info.recovered_scopes));
  m.recovered_segments->Set(static_cast<double>(info.recovered_segments));
  m.recovered_blocks->Set(static_cast<double>(info.recovered_blocks));
  m.recovered_bytes->Set(static_cast<double>(info.recovered_bytes));
  m.recovery_skipped->Set(static_cast<double>(info.skipped_records));
  m.recovery_read_bytes->Set(static_cast<double>(info.recovery_read_bytes));
  m.recovery_seconds->Set(info.recovery_seconds);
}

void DaemonMetrics::OnClientConnected(std::string_view tenant) {
  Impl& m = *impl_;
  m.connections->Increment();
  MutexLock lock(m.mu);
  m.clients->Add({{"tenant", m.TenantLabel(tenant)}}).Increment();
}

void DaemonMetrics::OnClientDisconnected(std::string_view tenant) {
  Impl& m = *impl_;
  MutexLock lock(m.mu);
  m.clients->Add({{"tenant", m.TenantLabel(tenant)}}).Decrement();
}

void DaemonMetrics::OnRequest(RequestType type) {
  const auto t = std::min(static_cast<size_t>(type), kRequestTypeNames.size() - 1);
  impl_->requests[t]->Increment();
}

void DaemonMetrics::OnProtocolError(ProtocolError reason) {
  const auto r = static_cast<size_t>(reason);
  if (r < kProtocolErrorNames.size()) impl_->protocol_errors[r]->Increment();
}

void DaemonMetrics::OnPeerRequest(uint32_t peer, PeerRequestType type, uint64_t bytes_in,
                                  uint64_t bytes_out, bool failed) {
  Impl& m = *impl_;
  const std::string node = std::to_string(peer);  // NodeIDs are at most 4095: bounded labels
  const auto t = std::min(static_cast<size_t>(type), kPeerRequestTypeNames.size() - 1);
  MutexLock lock(m.mu);
  m.peer_requests->Add({{"peer", node}, {"type", Str(kPeerRequestTypeNames[t])}}).Increment();
  if (bytes_in > 0) {
    m.peer_bytes->Add({{"peer", node}, {"direction", "received"}})
        .Increment(static_cast<double>(bytes_in));
  }
  if (bytes_out > 0) {
    m.peer_bytes->Add({{"peer", node}, {"direction", "sent"}})
        .Increment(static_cast<double>(bytes_out));
  }
  if (failed) m.peer_errors->Add({{"peer", node}}).Increment();
}

void DaemonMetrics::OnPinRead(uint64_t dram_hits, uint64_t ssd_hits, uint64_t misses) {
  impl_->hits[0]->Increment(static_cast<double>(dram_hits));
  impl_->hits[1]->Increment(static_cast<double>(ssd_hits));
  impl_->misses->Increment(static_cast<double>(misses));
}

void DaemonMetrics::OnClientReads(const ClientReads& reads) {
  Impl& m = *impl_;
  MutexLock lock(m.mu);
  // The store never sees these reads: they add to the same series as its own, beside the
  // cumulative values it reports (which CumulativeCounter::last tracks apart).
  m.medium_counters[kReadBytesCounter][0].counter->Increment(
      static_cast<double>(reads.bytes_from_dram));
  m.medium_counters[kReadBytesCounter][1].counter->Increment(
      static_cast<double>(reads.ssd_bytes_read));
  m.medium_counters[kDeliveredBytesCounter][0].counter->Increment(
      static_cast<double>(reads.bytes_from_dram));
  m.medium_counters[kDeliveredBytesCounter][1].counter->Increment(
      static_cast<double>(reads.bytes_from_ssd));
  m.store_counters[kChecksumCounter].counter->Increment(static_cast<double>(reads.corrupt));
}

void DaemonMetrics::ObserveRestore(MediaType medium, double seconds) {
  impl_->restore_seconds[medium == MediaType::kSsd ? 1 : 0]->Observe(seconds);
}

void DaemonMetrics::ObserveQueueWait(double seconds) { impl_->queue_wait->Observe(seconds); }

void DaemonMetrics::SetRestoreQueue(uint64_t waiting, uint64_t admitted) {
  impl_->queue_waiting->Set(static_cast<double>(waiting));
  impl_->queue_admitted->Set(static_cast<double>(admitted));
}

void DaemonMetrics::SetTenantUsage(std::string_view tenant, MediaType medium, uint64_t used_bytes) {
  Impl& m = *impl_;
  MutexLock lock(m.mu);
  m.tenant_used.Set(m.TenantLabel(tenant), tenant, medium, used_bytes);
}

void DaemonMetrics::SetTenantQuota(std::string_view tenant, MediaType medium,
                                   uint64_t quota_bytes) {
  Impl& m = *impl_;
  MutexLock lock(m.mu);
  m.tenant_quota.Set(m.TenantLabel(tenant), tenant, medium, quota_bytes);
}

}  // namespace flatcake::serve
