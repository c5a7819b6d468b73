// DaemonMetrics through its HTTP endpoint: an exposer on 127.0.0.1 (a free port), fed store
// snapshots and daemon events, read back with HttpGet and PromText: names, labels, values,
// histogram buckets, counters fed from cumulative values, bounded tenant labels, concurrency;
// and docs/serve.md naming every metric.
#include "serve/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "serve/flatcake_rpc.pb.h"
#include "serve/http_get.h"
#include "serve/prom_text.h"

namespace flatcake::serve {
namespace {

using namespace std::chrono_literals;

// The metrics without an endpoint, read through Render (what the endpoint serves): an endpoint
// that has served a request takes civetweb about 2 s to stop, so one test goes over HTTP.
class DaemonMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DaemonMetrics::Available()) GTEST_SKIP() << "built without prometheus-cpp";
    Result<std::unique_ptr<DaemonMetrics>> m = DaemonMetrics::Create("");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    metrics_ = std::move(*m);
  }

  PromText Scrape() {
    const std::string text = metrics_->Render();
    Result<PromText> parsed = PromText::Parse(text);
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << text;
    return parsed.ok() ? std::move(*parsed) : PromText{};
  }

  std::unique_ptr<DaemonMetrics> metrics_;
};

StoreStats SomeStats(uint64_t scale) {
  StoreStats s;
  s.dram.capacity_bytes = 8 * kGiB;
  s.dram.used_bytes = scale * kMiB;
  s.dram.written_bytes = 10 * scale;
  s.dram.read_bytes = 20 * scale;
  s.dram.blocks_live = 3 * scale;
  s.ssd.capacity_bytes = 64 * kGiB;
  s.ssd.used_bytes = 2 * scale * kMiB;
  s.ssd.written_bytes = 30 * scale;
  s.ssd.read_bytes = 40 * scale;
  s.ssd.reclaimed_bytes = 50 * scale;
  s.ssd.scopes_reclaimed = scale;
  s.restores_dram_ready = 5 * scale;
  s.restores_ssd = 6 * scale;
  s.checksum_mismatches = scale;
  s.index_size = 100 * scale;
  s.journal_bytes = 4096 * scale;
  return s;
}

TEST_F(DaemonMetricsTest, StoreSnapshotsBecomeGaugesAndCounters) {
  metrics_->Update(SomeStats(1));
  metrics_->Update(SomeStats(3));
  PromText t = Scrape();
  EXPECT_EQ(t.Sum(metric::kCapacityBytes, {{"medium", "dram"}}), 8.0 * kGiB);
  EXPECT_EQ(t.Sum(metric::kCapacityBytes, {{"medium", "ssd"}}), 64.0 * kGiB);
  EXPECT_EQ(t.Sum(metric::kUsedBytes, {{"medium", "ssd"}}), 6.0 * kMiB);
  EXPECT_EQ(t.Sum("flatcake_blocks", {{"medium", "dram"}}), 9);
  // Counters carry the store's cumulative values.
  EXPECT_EQ(t.Sum(metric::kWrittenBytes, {{"medium", "dram"}}), 30);
  EXPECT_EQ(t.Sum(metric::kWrittenBytes, {{"medium", "ssd"}}), 90);
  EXPECT_EQ(t.Sum(metric::kReadBytes, {{"medium", "ssd"}}), 120);
  EXPECT_EQ(t.Sum(metric::kReclaimedBytes, {{"medium", "ssd"}}), 150);
  EXPECT_EQ(t.Sum(metric::kReclaimedScopes, {{"medium", "ssd"}}), 3);
  EXPECT_EQ(t.Sum("flatcake_restores_total", {{"kind", "dram_ready"}}), 15);
  EXPECT_EQ(t.Sum("flatcake_restores_total", {{"kind", "ssd"}}), 18);
  EXPECT_EQ(t.Sum("flatcake_restores_total", {{"kind", "cancelled"}}), 0);
  EXPECT_EQ(t.Sum("flatcake_checksum_mismatches_total"), 3);
  EXPECT_EQ(t.Sum("flatcake_index_entries"), 300);
  EXPECT_EQ(t.Sum("flatcake_journal_bytes"), 3 * 4096);
  ASSERT_NE(t.family(metric::kWrittenBytes), nullptr);
  EXPECT_EQ(t.family(metric::kWrittenBytes)->type, "counter");
  EXPECT_EQ(t.family(metric::kUsedBytes)->type, "gauge");
  EXPECT_FALSE(t.family(metric::kUsedBytes)->help.empty());

  // A snapshot below the last (another store behind the metrics) adds its whole value: a
  // counter never goes down.
  metrics_->Update(SomeStats(1));
  t = Scrape();
  EXPECT_EQ(t.Sum(metric::kWrittenBytes, {{"medium", "dram"}}), 40);
  EXPECT_EQ(t.Sum(metric::kUsedBytes, {{"medium", "dram"}}), 1.0 * kMiB);  // a gauge follows
  metrics_->Update(SomeStats(2));
  EXPECT_EQ(Scrape().Sum(metric::kWrittenBytes, {{"medium", "dram"}}), 50);
}

TEST_F(DaemonMetricsTest, EventsBecomeCountersByTheirLabels) {
  metrics_->OnClientConnected("sglang");
  metrics_->OnClientConnected("sglang");
  metrics_->OnClientConnected("vllm.b");
  metrics_->OnClientDisconnected("sglang");
  metrics_->OnRequest(RequestType::kLookup);
  metrics_->OnRequest(RequestType::kLookup);
  rpc::Request pin;
  pin.mutable_pin_read();
  metrics_->OnRequest(RequestTypeOf(pin));
  metrics_->OnRequest(RequestTypeOf(rpc::Request{}));
  metrics_->OnProtocolError(ProtocolError::kBadFrame);
  metrics_->OnProtocolError(ProtocolError::kPeerRefused);
  metrics_->OnProtocolError(ProtocolError::kPeerRefused);
  metrics_->OnPinRead(4, 2, 3);
  metrics_->OnPinRead(1, 0, 0);
  metrics_->OnClientReads(
      {.bytes_from_dram = 1000, .bytes_from_ssd = 700, .ssd_bytes_read = 8192, .corrupt = 1});
  metrics_->SetRestoreQueue(5, 2);
  metrics_->SetTenantUsage("sglang", MediaType::kDram, 123);
  metrics_->SetTenantUsage("sglang", MediaType::kSsd, 456);
  metrics_->SetTenantQuota("sglang", MediaType::kSsd, 1000);
  StoreInfo info;
  info.recovered_blocks = 77;
  info.recovered_segments = 7;
  info.recovered_bytes = 770000;
  info.recovery_seconds = 1.25;
  metrics_->SetRecovery(info);

  const PromText t = Scrape();
  EXPECT_EQ(t.Sum(metric::kClients, {{"tenant", "sglang"}}), 1);
  EXPECT_EQ(t.Sum(metric::kClients, {{"tenant", "vllm.b"}}), 1);
  EXPECT_EQ(t.Sum("flatcake_connections_total"), 3);
  EXPECT_EQ(t.Sum(metric::kRequests, {{"type", "lookup"}}), 2);
  EXPECT_EQ(t.Sum(metric::kRequests, {{"type", "pin_read"}}), 1);
  EXPECT_EQ(t.Sum(metric::kRequests, {{"type", "unknown"}}), 1);
  EXPECT_EQ(t.Sum(metric::kRequests, {{"type", "hello"}}), 0);
  // Every type and reason is there from the start, at 0.
  EXPECT_EQ(t.LabelValues(metric::kRequests, "type").size(), kRequestTypeNames.size());
  EXPECT_EQ(t.LabelValues(metric::kProtocolErrors, "reason").size(), kProtocolErrorNames.size());
  EXPECT_EQ(t.Sum(metric::kProtocolErrors, {{"reason", "bad_frame"}}), 1);
  EXPECT_EQ(t.Sum(metric::kProtocolErrors, {{"reason", "peer_refused"}}), 2);
  EXPECT_EQ(t.Sum(metric::kHits, {{"medium", "dram"}}), 5);
  EXPECT_EQ(t.Sum(metric::kHits, {{"medium", "ssd"}}), 2);
  EXPECT_EQ(t.Sum(metric::kMisses), 3);
  EXPECT_EQ(t.Sum(metric::kReadBytes, {{"medium", "dram"}}), 1000);
  EXPECT_EQ(t.Sum(metric::kReadBytes, {{"medium", "ssd"}}), 8192);
  EXPECT_EQ(t.Sum("flatcake_delivered_bytes_total", {{"medium", "ssd"}}), 700);
  EXPECT_EQ(t.Sum("flatcake_checksum_mismatches_total"), 1);
  EXPECT_EQ(t.Sum(metric::kQueueRequests, {{"state", "waiting"}}), 5);
  EXPECT_EQ(t.Sum(metric::kQueueRequests, {{"state", "admitted"}}), 2);
  EXPECT_EQ(t.Sum(metric::kTenantUsedBytes, {{"tenant", "sglang"}, {"medium", "dram"}}), 123);
  EXPECT_EQ(t.Sum(metric::kTenantUsedBytes, {{"tenant", "sglang"}, {"medium", "ssd"}}), 456);
  EXPECT_EQ(t.Sum(metric::kTenantQuotaBytes, {{"tenant", "sglang"}, {"medium", "ssd"}}), 1000);
  EXPECT_EQ(t.Sum(metric::kRecoveredBlocks), 77);
  EXPECT_EQ(t.Sum(metric::kRecoveredSegments), 7);
  EXPECT_EQ(t.Sum(metric::kRecoveredBytes), 770000);
  EXPECT_EQ(t.Sum(metric::kRecoverySeconds), 1.25);
  // Rendered text is what the endpoint serves (less the exposer's own metrics).
  EXPECT_NE(metrics_->Render().find("flatcake_hits_total{medium=\"ssd\"} 2"), std::string::npos);
}

TEST_F(DaemonMetricsTest, PeerRequestsAreCountedByNodeTypeAndDirection) {
  metrics_->OnPeerRequest(2, PeerRequestType::kPut, 4096, 0, false);
  metrics_->OnPeerRequest(2, PeerRequestType::kLayer, 0, 1000, false);
  metrics_->OnPeerRequest(2, PeerRequestType::kLayer, 0, 24, false);
  metrics_->OnPeerRequest(7, PeerRequestType::kRestore, 0, 0, true);
  const auto t = PromText::Parse(metrics_->Render());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->Sum("flatcake_peer_requests_total", {{"peer", "2"}, {"type", "put"}}), 1);
  EXPECT_EQ(t->Sum("flatcake_peer_requests_total", {{"peer", "2"}, {"type", "layer"}}), 2);
  EXPECT_EQ(t->Sum("flatcake_peer_requests_total", {{"peer", "7"}, {"type", "restore"}}), 1);
  EXPECT_EQ(t->Sum("flatcake_peer_bytes_total", {{"peer", "2"}, {"direction", "received"}}), 4096);
  EXPECT_EQ(t->Sum("flatcake_peer_bytes_total", {{"peer", "2"}, {"direction", "sent"}}), 1024);
  EXPECT_EQ(t->Sum("flatcake_peer_errors_total", {{"peer", "7"}}), 1);
  EXPECT_EQ(t->Sum("flatcake_peer_errors_total", {{"peer", "2"}}), 0);
}

TEST_F(DaemonMetricsTest, LatencyHistogramsHaveTheirBuckets) {
  metrics_->ObserveRestore(MediaType::kDram, 0.0002);
  metrics_->ObserveRestore(MediaType::kDram, 0.0002);
  metrics_->ObserveRestore(MediaType::kDram, 0.003);
  metrics_->ObserveRestore(MediaType::kSsd, 2.0);
  metrics_->ObserveRestore(MediaType::kSsd, 45.0);  // past the last bound: +Inf only
  metrics_->ObserveQueueWait(0.02);

  const PromText t = Scrape();
  EXPECT_EQ(t.family(metric::kRestoreSeconds)->type, "histogram");
  const std::vector<HistogramBucket> dram =
      t.Buckets(metric::kRestoreSeconds, {{"medium", "dram"}});
  ASSERT_EQ(dram.size(), kLatencyBucketsSeconds.size() + 1);
  for (size_t i = 0; i < kLatencyBucketsSeconds.size(); ++i) {
    EXPECT_DOUBLE_EQ(dram[i].le, kLatencyBucketsSeconds[i]);
  }
  EXPECT_TRUE(std::isinf(dram.back().le));
  EXPECT_EQ(dram[0].count, 0);  // le 0.0001
  EXPECT_EQ(dram[1].count, 2);  // le 0.00025
  EXPECT_EQ(dram[4].count, 2);  // le 0.0025
  EXPECT_EQ(dram[5].count, 3);  // le 0.005
  EXPECT_EQ(dram.back().count, 3);
  EXPECT_EQ(t.Sum("flatcake_restore_seconds_count", {{"medium", "dram"}}), 3);
  EXPECT_NEAR(t.Sum("flatcake_restore_seconds_sum", {{"medium", "dram"}}), 0.0034, 1e-12);
  const std::vector<HistogramBucket> ssd = t.Buckets(metric::kRestoreSeconds, {{"medium", "ssd"}});
  EXPECT_EQ(ssd[ssd.size() - 2].count, 1);  // le 30
  EXPECT_EQ(ssd.back().count, 2);
  // The median DRAM restore lies in (0.0001, 0.00025].
  const double p50 = HistogramQuantile(dram, 0.5);
  EXPECT_GT(p50, 0.0001);
  EXPECT_LE(p50, 0.00025);
  EXPECT_EQ(t.Buckets(metric::kQueueWaitSeconds).back().count, 1);
  EXPECT_EQ(t.Buckets(metric::kQueueWaitSeconds)[7].count, 1);  // le 0.025
}

TEST_F(DaemonMetricsTest, TenantLabelsAreBounded) {
  for (size_t i = 0; i < kMaxTenantLabels + 10; ++i) {
    const std::string tenant = "t" + std::to_string(i);
    metrics_->OnClientConnected(tenant);
    metrics_->SetTenantUsage(tenant, MediaType::kDram, 10);
    metrics_->SetTenantQuota(tenant, MediaType::kDram, 100);
  }
  // An overflow tenant keeps its share of "(other)": setting it again replaces, not adds.
  metrics_->SetTenantUsage("t" + std::to_string(kMaxTenantLabels + 3), MediaType::kDram, 30);
  metrics_->OnClientDisconnected("t" + std::to_string(kMaxTenantLabels + 1));
  const PromText t = Scrape();
  const std::vector<std::string> labels = t.LabelValues(metric::kClients, "tenant");
  EXPECT_EQ(labels.size(), kMaxTenantLabels + 1);
  EXPECT_EQ(t.Sum(metric::kClients, {{"tenant", kOtherTenantLabel}}), 9);
  EXPECT_EQ(t.Sum(metric::kClients, {{"tenant", "t0"}}), 1);
  EXPECT_EQ(t.Sum(metric::kTenantUsedBytes, {{"tenant", kOtherTenantLabel}}), 9 * 10 + 30);
  // A sum of quotas means nothing: overflow tenants have none exported.
  EXPECT_TRUE(t.Select(metric::kTenantQuotaBytes, {{"tenant", kOtherTenantLabel}}).empty());
  EXPECT_EQ(t.LabelValues(metric::kTenantQuotaBytes, "tenant").size(), kMaxTenantLabels);
}

TEST_F(DaemonMetricsTest, ConcurrentEventsAndSnapshotsAddUp) {
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 1; k <= kEach; ++k) {
        metrics_->OnRequest(RequestType::kExists);
        metrics_->OnPinRead(1, 1, 0);
        metrics_->ObserveRestore(MediaType::kSsd, 0.001);
        metrics_->OnClientConnected("c" + std::to_string(i));
        StoreStats s;
        s.ssd.written_bytes = static_cast<uint64_t>(k);  // every thread walks the same values
        if (i == 0) metrics_->Update(s);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const PromText t = Scrape();
  EXPECT_EQ(t.Sum(metric::kRequests, {{"type", "exists"}}), kThreads * kEach);
  EXPECT_EQ(t.Sum(metric::kHits), 2.0 * kThreads * kEach);
  EXPECT_EQ(t.Sum("flatcake_restore_seconds_count", {{"medium", "ssd"}}), kThreads * kEach);
  EXPECT_EQ(t.Sum(metric::kClients), kThreads * kEach);
  EXPECT_EQ(t.Sum(metric::kWrittenBytes, {{"medium", "ssd"}}), kEach);
}

// The endpoint: GET /metrics on a free port of 127.0.0.1 answers what Render gives, plus the
// exposer's own exposer_* metrics.
TEST(DaemonMetricsEndpoint, ServesTheMetricsOverHttp) {
  if (!DaemonMetrics::Available()) GTEST_SKIP() << "built without prometheus-cpp";
  Result<std::unique_ptr<DaemonMetrics>> created = DaemonMetrics::Create("127.0.0.1:0");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  DaemonMetrics& m = **created;
  ASSERT_NE(m.port(), 0);
  StoreStats stats;
  stats.dram.capacity_bytes = 8 * kGiB;
  stats.ssd.written_bytes = 4096;
  m.Update(stats);
  m.OnClientConnected("sglang");
  m.OnRequest(RequestType::kPinRead);
  m.OnPinRead(3, 1, 2);
  m.ObserveRestore(MediaType::kSsd, 0.004);
  m.SetTenantUsage("sglang", MediaType::kSsd, 8192);

  const Result<HttpResponse> r = HttpGet({"127.0.0.1", m.port()}, "/metrics", 5s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->content_type.find("text/plain"), std::string::npos);
  const Result<PromText> served = PromText::Parse(r->body);
  ASSERT_TRUE(served.ok()) << served.status().ToString() << "\n" << r->body;
  const PromText& t = *served;
  EXPECT_EQ(t.Sum(metric::kCapacityBytes, {{"medium", "dram"}}), 8.0 * kGiB);
  EXPECT_EQ(t.Sum(metric::kWrittenBytes, {{"medium", "ssd"}}), 4096);
  EXPECT_EQ(t.Sum(metric::kClients, {{"tenant", "sglang"}}), 1);
  EXPECT_EQ(t.Sum(metric::kRequests, {{"type", "pin_read"}}), 1);
  EXPECT_EQ(t.Sum(metric::kHits, {{"medium", "dram"}}), 3);
  EXPECT_EQ(t.Sum(metric::kMisses), 2);
  EXPECT_EQ(t.Sum(metric::kTenantUsedBytes, {{"tenant", "sglang"}, {"medium", "ssd"}}), 8192);
  const std::vector<HistogramBucket> ssd = t.Buckets(metric::kRestoreSeconds, {{"medium", "ssd"}});
  ASSERT_EQ(ssd.size(), kLatencyBucketsSeconds.size() + 1);
  EXPECT_EQ(ssd[4].count, 0);  // le 0.0025
  EXPECT_EQ(ssd[5].count, 1);  // le 0.005
  // Every flatcake_ sample Render gives, the endpoint serves with the same value.
  const Result<PromText> rendered = PromText::Parse(m.Render());
  ASSERT_TRUE(rendered.ok());
  size_t compared = 0;
  for (const PromSample& s : rendered->samples()) {
    const std::vector<const PromSample*> same = t.Select(s.name);
    const auto match = std::find_if(same.begin(), same.end(),
                                    [&](const PromSample* o) { return o->labels == s.labels; });
    ASSERT_NE(match, same.end()) << s.name;
    EXPECT_EQ((*match)->value, s.value) << s.name;
    ++compared;
  }
  EXPECT_GT(compared, 100u);
  // Another path is no metrics page.
  const Result<HttpResponse> other = HttpGet({"127.0.0.1", m.port()}, "/nothing", 5s);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->status, 404);
}

// 100 held connections: 50 that never send a byte and 50 that send half a request line and
// stop. Scrapes are still served, each well within its timeout (two idle connections used to
// take both server threads for 30 s each).
TEST(DaemonMetricsEndpoint, ScrapesAreServedWhileAHundredIdleOrSlowConnectionsAreHeld) {
  if (!DaemonMetrics::Available()) GTEST_SKIP() << "built without prometheus-cpp";
  Result<std::unique_ptr<DaemonMetrics>> created = DaemonMetrics::Create("127.0.0.1:0");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  DaemonMetrics& m = **created;
  std::vector<int> held;
  for (int i = 0; i < 100; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(m.port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << i;
    if (i % 2 == 1) {
      const std::string half = "GET /metr";
      ASSERT_EQ(::send(fd, half.data(), half.size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(half.size()));
    }
    held.push_back(fd);
  }
  for (int scrape = 0; scrape < 3; ++scrape) {
    const auto start = std::chrono::steady_clock::now();
    const Result<HttpResponse> r = HttpGet({"127.0.0.1", m.port()}, "/metrics", 10s);
    ASSERT_TRUE(r.ok()) << "scrape " << scrape << ": " << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 8s) << scrape;
  }
  for (int fd : held) ::close(fd);
}

// With a store source, each scrape reads a fresh snapshot: no Update calls needed.
TEST(DaemonMetricsEndpoint, AStoreSourceIsReadAtEachScrape) {
  if (!DaemonMetrics::Available()) GTEST_SKIP() << "built without prometheus-cpp";
  Result<std::unique_ptr<DaemonMetrics>> created = DaemonMetrics::Create("127.0.0.1:0");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  DaemonMetrics& m = **created;
  std::atomic<uint64_t> calls{0};
  m.SetStoreSource([&calls] {
    StoreStats s;
    s.dram.used_bytes = 1000 * ++calls;
    s.dram.written_bytes = 10 * calls;
    return s;
  });
  for (uint64_t scrape = 1; scrape <= 2; ++scrape) {
    const Result<HttpResponse> r = HttpGet({"127.0.0.1", m.port()}, "/metrics", 5s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const Result<PromText> t = PromText::Parse(r->body);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->Sum(metric::kUsedBytes, {{"medium", "dram"}}), 1000.0 * scrape);
    EXPECT_EQ(t->Sum(metric::kWrittenBytes, {{"medium", "dram"}}), 10.0 * scrape);
  }
  // Render reads it too; an empty source stops that.
  const Result<PromText> rendered = PromText::Parse(m.Render());
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(rendered->Sum(metric::kUsedBytes, {{"medium", "dram"}}), 3000);
  m.SetStoreSource({});
  const uint64_t before = calls;
  (void)m.Render();
  EXPECT_EQ(calls, before);
}

TEST(DaemonMetricsCreate, RefusesBadAddressesAndABusyPort) {
  if (!DaemonMetrics::Available()) {
    const auto r = DaemonMetrics::Create("127.0.0.1:0");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(r.status().message().find("metrics not built"), std::string_view::npos);
    EXPECT_TRUE(DaemonMetrics::Create("").ok());
    return;
  }
  EXPECT_TRUE(DaemonMetrics::Create("no-port").status().IsInvalidArgument());
  EXPECT_TRUE(DaemonMetrics::Create("127.0.0.1:99999").status().IsInvalidArgument());
  Result<std::unique_ptr<DaemonMetrics>> first = DaemonMetrics::Create("127.0.0.1:0");
  ASSERT_TRUE(first.ok());
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  const Result<std::unique_ptr<DaemonMetrics>> second = DaemonMetrics::Create(taken);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.status().IsIOError()) << second.status().ToString();
  EXPECT_NE(second.status().message().find(taken), std::string_view::npos);
  // Without an address: figures, no endpoint.
  Result<std::unique_ptr<DaemonMetrics>> quiet = DaemonMetrics::Create("");
  ASSERT_TRUE(quiet.ok());
  EXPECT_EQ((*quiet)->port(), 0);
  (*quiet)->OnRequest(RequestType::kStats);
  EXPECT_NE((*quiet)->Render().find("flatcake_requests_total{type=\"stats\"} 1"),
            std::string::npos);
}

// docs/serve.md's Metrics section names every family the endpoint serves, and no other.
TEST(DaemonMetricsDocs, ServeMdNamesEveryMetric) {
  if (!DaemonMetrics::Available()) GTEST_SKIP() << "built without prometheus-cpp";
  std::ifstream in(std::string(FLATCAKE_SOURCE_DIR) + "/docs/serve.md");
  ASSERT_TRUE(in) << "docs/serve.md not found";
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string text = doc.str();
  const size_t begin = text.find("\n## Metrics\n");
  ASSERT_NE(begin, std::string::npos) << "docs/serve.md has no '## Metrics' section";
  const std::string section = text.substr(begin, text.find("\n## ", begin + 1) - begin);
  std::set<std::string> documented;
  const std::regex name(R"(`(flatcake_[a-z_]+)`)");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), name);
       it != std::sregex_iterator(); ++it) {
    documented.insert((*it)[1]);
  }
  auto metrics = DaemonMetrics::Create("");
  ASSERT_TRUE(metrics.ok());
  // Families without a series are not served: give the per-tenant and per-peer ones one.
  (*metrics)->OnPeerRequest(3, PeerRequestType::kPut, 10, 0, true);
  (*metrics)->OnPeerRequest(3, PeerRequestType::kLayer, 0, 10, false);
  (*metrics)->OnClientConnected("t");
  (*metrics)->SetTenantUsage("t", MediaType::kDram, 1);
  (*metrics)->SetTenantQuota("t", MediaType::kDram, 1);
  const Result<PromText> served = PromText::Parse((*metrics)->Render());
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  std::set<std::string> families;
  for (const auto& [family, info] : served->families()) families.insert(family);
  EXPECT_GT(families.size(), 30u);
  for (const std::string& f : families) {
    EXPECT_TRUE(documented.count(f)) << f << " is served but docs/serve.md does not name it";
  }
  for (const std::string& d : documented) {
    EXPECT_TRUE(families.count(d)) << "docs/serve.md names " << d << ", which is not served";
  }
}

}  // namespace
}  // namespace flatcake::serve
