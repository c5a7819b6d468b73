// `flatcake stats [--json] [--watch SECONDS] [--metrics-addr HOST:PORT]` (stats_cmd.h).
#include "cli/stats_cmd.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <thread>

#include "cli/commands.h"
#include "cli/report_format.h"
#include "cli/store_flags.h"
#include "serve/http_get.h"
#include "serve/metrics.h"

namespace flatcake::cli {
namespace {

namespace metric = serve::metric;
using nlohmann::json;
using serve::PromText;

// A quantile or ratio, null when it has no value (no observations).
json Number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

uint64_t Count(double v) { return v > 0 && std::isfinite(v) ? static_cast<uint64_t>(v) : 0; }

json MediumSummary(const PromText& t, std::string_view medium) {
  const serve::LabelMatch m = {{"medium", medium}};
  const uint64_t capacity = Count(t.Sum(metric::kCapacityBytes, m));
  const uint64_t used = Count(t.Sum(metric::kUsedBytes, m));
  const std::vector<serve::HistogramBucket> restores = t.Buckets(metric::kRestoreSeconds, m);
  return {
      {"capacity_bytes", capacity},
      {"used_bytes", used},
      {"used_fraction", capacity > 0 ? json(static_cast<double>(used) / capacity) : json(nullptr)},
      {"blocks", Count(t.Sum(metric::kBlocks, m))},
      {"hits", Count(t.Sum(metric::kHits, m))},
      {"read_bytes", Count(t.Sum(metric::kReadBytes, m))},
      {"written_bytes", Count(t.Sum(metric::kWrittenBytes, m))},
      {"delivered_bytes", Count(t.Sum(metric::kDeliveredBytes, m))},
      {"reclaimed_bytes", Count(t.Sum(metric::kReclaimedBytes, m))},
      {"reclaimed_scopes", Count(t.Sum(metric::kReclaimedScopes, m))},
      {"restores", restores.empty() ? 0 : Count(restores.back().count)},
      {"restore_p50_s", Number(serve::HistogramQuantile(restores, 0.5))},
      {"restore_p99_s", Number(serve::HistogramQuantile(restores, 0.99))},
  };
}

// {label value: sum} of a counter by one label.
json ByLabel(const PromText& t, std::string_view name, std::string_view label) {
  json out = json::object();
  for (const std::string& v : t.LabelValues(name, label)) {
    out[v] = Count(t.Sum(name, {{label, v}}));
  }
  return out;
}

// "1.2 ms", "350 us", "2.50 s"; "-" for none.
std::string Seconds(const json& v) {
  if (!v.is_number()) return "-";
  const double s = v.get<double>();
  char buf[32];
  if (s >= 1) {
    std::snprintf(buf, sizeof(buf), "%.2f s", s);
  } else if (s >= 1e-3) {
    std::snprintf(buf, sizeof(buf), "%.1f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f us", s * 1e6);
  }
  return buf;
}

std::string Percent(double part, double whole) {
  if (!(whole > 0)) return "-";
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * part / whole);
  return buf;
}

std::string Quota(uint64_t bytes) { return bytes == 0 ? "no limit" : FormatBytes(bytes); }

// How fast counter `key` of `medium` grew since `previous`, seconds before: "12.00 MiB/s".
std::string Rate(const json& now, const json& previous, double seconds, const char* medium,
                 const char* key) {
  const double grew =
      now["media"][medium][key].get<double>() - previous["media"][medium][key].get<double>();
  return FormatBytes(grew > 0 ? static_cast<uint64_t>(grew / seconds) : 0) + "/s";
}

uint64_t RequestCount(const json& summary) {
  uint64_t n = 0;
  for (const auto& [type, count] : summary["requests"].items()) n += count.get<uint64_t>();
  return n;
}

std::string Line(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

}  // namespace

json SummarizeMetrics(const PromText& t) {
  json s;
  s["media"] = {{"dram", MediumSummary(t, "dram")}, {"ssd", MediumSummary(t, "ssd")}};
  const uint64_t hits = Count(t.Sum(metric::kHits));
  const uint64_t misses = Count(t.Sum(metric::kMisses));
  s["hits"] = hits;
  s["misses"] = misses;
  s["hit_rate"] = hits + misses > 0 ? json(static_cast<double>(hits) / (hits + misses)) : json();
  const std::vector<serve::HistogramBucket> waits = t.Buckets(metric::kQueueWaitSeconds);
  s["queue"] = {{"waiting", Count(t.Sum(metric::kQueueRequests, {{"state", "waiting"}}))},
                {"admitted", Count(t.Sum(metric::kQueueRequests, {{"state", "admitted"}}))},
                {"waits", waits.empty() ? 0 : Count(waits.back().count)},
                {"wait_p50_s", Number(serve::HistogramQuantile(waits, 0.5))},
                {"wait_p99_s", Number(serve::HistogramQuantile(waits, 0.99))}};
  s["clients"] = Count(t.Sum(metric::kClients));
  s["connections"] = Count(t.Sum(metric::kConnections));
  json tenants = json::object();
  std::vector<std::string> names = t.LabelValues(metric::kClients, "tenant");
  for (const std::string& n : t.LabelValues(metric::kTenantUsedBytes, "tenant")) names.push_back(n);
  for (const std::string& n : t.LabelValues(metric::kTenantQuotaBytes, "tenant")) {
    names.push_back(n);
  }
  for (const std::string& n : names) {
    if (tenants.contains(n)) continue;
    const auto bytes = [&](std::string_view name, std::string_view medium) {
      return Count(t.Sum(name, {{"tenant", n}, {"medium", medium}}));
    };
    tenants[n] = {{"clients", Count(t.Sum(metric::kClients, {{"tenant", n}}))},
                  {"dram_used_bytes", bytes(metric::kTenantUsedBytes, "dram")},
                  {"ssd_used_bytes", bytes(metric::kTenantUsedBytes, "ssd")},
                  {"dram_quota_bytes", bytes(metric::kTenantQuotaBytes, "dram")},
                  {"ssd_quota_bytes", bytes(metric::kTenantQuotaBytes, "ssd")}};
  }
  s["tenants"] = std::move(tenants);
  s["requests"] = ByLabel(t, metric::kRequests, "type");
  s["protocol_errors"] = ByLabel(t, metric::kProtocolErrors, "reason");
  s["recovery"] = {{"blocks", Count(t.Sum(metric::kRecoveredBlocks))},
                   {"segments", Count(t.Sum(metric::kRecoveredSegments))},
                   {"bytes", Count(t.Sum(metric::kRecoveredBytes))},
                   {"seconds", t.Sum(metric::kRecoverySeconds)}};
  s["checksum_mismatches"] = Count(t.Sum(metric::kChecksumMismatches));
  s["io_errors"] = Count(t.Sum(metric::kIoErrors));
  return s;
}

std::string FormatStatsSummary(const json& s, std::string_view endpoint, const json* previous,
                               double seconds) {
  std::string out = "flatcake daemon at " + std::string(endpoint) + "\n";
  out += Line("%-6s %12s %12s %7s %10s %10s %12s %12s %9s %9s\n", "medium", "capacity", "used",
              "use", "blocks", "hits", "read", "written", "rst p50", "rst p99");
  for (const char* medium : {"dram", "ssd"}) {
    const json& m = s["media"][medium];
    const auto bytes = [&](const char* key) { return FormatBytes(m[key].get<uint64_t>()); };
    out += Line("%-6s %12s %12s %7s %10llu %10llu %12s %12s %9s %9s\n", medium,
                bytes("capacity_bytes").c_str(), bytes("used_bytes").c_str(),
                Percent(m["used_bytes"].get<double>(), m["capacity_bytes"].get<double>()).c_str(),
                static_cast<unsigned long long>(m["blocks"].get<uint64_t>()),
                static_cast<unsigned long long>(m["hits"].get<uint64_t>()),
                bytes("read_bytes").c_str(), bytes("written_bytes").c_str(),
                Seconds(m["restore_p50_s"]).c_str(), Seconds(m["restore_p99_s"]).c_str());
  }
  if (previous != nullptr && seconds > 0) {
    const double requests = static_cast<double>(RequestCount(s) - RequestCount(*previous));
    out += "rates: dram read " + Rate(s, *previous, seconds, "dram", "read_bytes") + ", written " +
           Rate(s, *previous, seconds, "dram", "written_bytes") + "; ssd read " +
           Rate(s, *previous, seconds, "ssd", "read_bytes") + ", written " +
           Rate(s, *previous, seconds, "ssd", "written_bytes") +
           Line("; %.0f requests/s\n", requests / seconds);
  }
  const double hits = s["hits"].get<double>(), misses = s["misses"].get<double>();
  out += Line("reads: %.0f blocks asked, %.0f hits (%s: dram %s, ssd %s), %.0f misses\n",
              hits + misses, hits, Percent(hits, hits + misses).c_str(),
              Percent(s["media"]["dram"]["hits"].get<double>(), hits + misses).c_str(),
              Percent(s["media"]["ssd"]["hits"].get<double>(), hits + misses).c_str(), misses);
  const json& q = s["queue"];
  out += Line("FC-MAS: %llu waiting, %llu admitted; wait p50 %s, p99 %s (%llu waits)\n",
              static_cast<unsigned long long>(q["waiting"].get<uint64_t>()),
              static_cast<unsigned long long>(q["admitted"].get<uint64_t>()),
              Seconds(q["wait_p50_s"]).c_str(), Seconds(q["wait_p99_s"]).c_str(),
              static_cast<unsigned long long>(q["waits"].get<uint64_t>()));
  out += Line("clients: %llu connected (%llu connections since start)\n",
              static_cast<unsigned long long>(s["clients"].get<uint64_t>()),
              static_cast<unsigned long long>(s["connections"].get<uint64_t>()));
  const auto counts = [](const json& by) {
    std::string text;
    for (const auto& [name, n] : by.items()) {
      if (n.get<uint64_t>() == 0) continue;
      text += (text.empty() ? "" : ", ") + name + " " + std::to_string(n.get<uint64_t>());
    }
    return text.empty() ? std::string("none") : text;
  };
  out += "requests: " + counts(s["requests"]) + "\n";
  out += "protocol errors: " + counts(s["protocol_errors"]) + "\n";
  out += Line("store errors: %llu checksum mismatches, %llu I/O errors\n",
              static_cast<unsigned long long>(s["checksum_mismatches"].get<uint64_t>()),
              static_cast<unsigned long long>(s["io_errors"].get<uint64_t>()));
  if (!s["tenants"].empty()) {
    out +=
        Line("%-24s %8s %28s %28s\n", "tenant", "clients", "dram used / quota", "ssd used / quota");
    for (const auto& [name, t] : s["tenants"].items()) {
      const std::string dram = FormatBytes(t["dram_used_bytes"].get<uint64_t>()) + " / " +
                               Quota(t["dram_quota_bytes"].get<uint64_t>());
      const std::string ssd = FormatBytes(t["ssd_used_bytes"].get<uint64_t>()) + " / " +
                              Quota(t["ssd_quota_bytes"].get<uint64_t>());
      out += Line("%-24s %8llu %28s %28s\n", name.c_str(),
                  static_cast<unsigned long long>(t["clients"].get<uint64_t>()), dram.c_str(),
                  ssd.c_str());
    }
  }
  const json& r = s["recovery"];
  out += Line("recovery at open: %llu blocks in %llu segments, %s, %.2f s\n",
              static_cast<unsigned long long>(r["blocks"].get<uint64_t>()),
              static_cast<unsigned long long>(r["segments"].get<uint64_t>()),
              FormatBytes(r["bytes"].get<uint64_t>()).c_str(), r["seconds"].get<double>());
  return out;
}

Result<json> FetchStatsSummary(const StatsArgs& args) {
  FC_ASSIGN_OR_RETURN(const serve::HostPort at, serve::ParseHostPort(args.metrics_addr));
  FC_ASSIGN_OR_RETURN(const serve::HttpResponse response,
                      serve::HttpGet(at, "/metrics", args.timeout));
  if (response.status != 200) {
    return Status::IOError("http://" + at.ToString() + "/metrics answered HTTP " +
                           std::to_string(response.status) + ": is it a flatcake daemon?");
  }
  FC_ASSIGN_OR_RETURN(const PromText text, PromText::Parse(response.body));
  return SummarizeMetrics(text);
}

int RunStats(const StatsArgs& args) {
  std::optional<json> previous;
  auto previous_at = std::chrono::steady_clock::now();
  for (bool first = true;; first = false) {
    if (!first) {
      std::this_thread::sleep_for(std::chrono::duration<double>(args.watch_seconds));
    }
    const auto at = std::chrono::steady_clock::now();
    const Result<json> summary = FetchStatsSummary(args);
    if (!summary.ok()) {
      const int rc = ReportStatus("stats", summary.status());
      if (args.watch_seconds <= 0) return rc;
      std::fflush(stderr);
      continue;
    }
    if (args.json) {
      std::printf("%s\n", summary->dump().c_str());
    } else {
      if (!first) std::printf("\n");
      const double seconds = std::chrono::duration<double>(at - previous_at).count();
      std::fputs(
          FormatStatsSummary(*summary, args.metrics_addr, previous ? &*previous : nullptr, seconds)
              .c_str(),
          stdout);
    }
    std::fflush(stdout);
    if (args.watch_seconds <= 0) return 0;
    previous = *summary;
    previous_at = at;
  }
}

void RegisterStatsCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<StatsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "stats", "Print a running daemon's metrics (flatcake serve --metrics-addr) for a person");
  cmd->add_option("--metrics-addr", args->metrics_addr,
                  "HOST:PORT of the daemon's metrics endpoint")
      ->default_str(std::string(kDefaultStatsAddr));
  cmd->add_flag("--json", args->json, "Print one JSON object per report instead");
  cmd->add_option("--watch", args->watch_seconds,
                  "Reprint every SECONDS until interrupted (failed scrapes are reported and "
                  "retried)")
      ->type_name("SECONDS")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->callback([args, exit_code] { *exit_code = RunStats(*args); });
}

}  // namespace flatcake::cli
