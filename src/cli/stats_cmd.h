// `flatcake stats`: the daemon's metrics endpoint (serve/metrics.h) for a person: fetched over
// HTTP, parsed (serve/prom_text.h) and summarised per medium, for FC-MAS, clients and tenants,
// as text or as one JSON object. docs/serve.md ("Metrics") shows both.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "flatcake/status.h"
#include "serve/prom_text.h"

namespace flatcake::cli {

// Where `flatcake stats` looks without --metrics-addr: the address docs/serve.md suggests for
// metrics_addr.
inline constexpr std::string_view kDefaultStatsAddr = "127.0.0.1:9464";

struct StatsArgs {
  std::string metrics_addr = std::string(kDefaultStatsAddr);
  bool json = false;
  double watch_seconds = 0;  // > 0: reprint every so many seconds until interrupted
  std::chrono::milliseconds timeout{5000};
};

// The summary of one scrape, as `--json` prints it: media.{dram,ssd}.{capacity_bytes,
// used_bytes, used_fraction, blocks, hits, read_bytes, written_bytes, delivered_bytes,
// reclaimed_bytes, reclaimed_scopes, restores, restore_p50_s, restore_p99_s}, hits, misses,
// hit_rate, queue.{waiting, admitted, waits, wait_p50_s, wait_p99_s}, clients, connections,
// tenants.NAME.{clients, dram_used_bytes, ssd_used_bytes, dram_quota_bytes, ssd_quota_bytes},
// requests.TYPE, protocol_errors.REASON, recovery.{blocks, segments, bytes, seconds},
// checksum_mismatches, io_errors. A quantile or rate without observations is null.
nlohmann::json SummarizeMetrics(const serve::PromText& metrics);

// The summary for a person: a table per medium, then lines for lookups, FC-MAS, clients,
// requests, errors, tenants and recovery. With `previous` (the summary of the scrape `seconds`
// before), byte and request counts also show their rate.
std::string FormatStatsSummary(const nlohmann::json& summary, std::string_view endpoint,
                               const nlohmann::json* previous = nullptr, double seconds = 0);

// Fetches the endpoint once and summarises it. IOError naming the address when nothing answers
// there; Corruption for a body that is no metrics text; IOError for an HTTP status other than
// 200.
Result<nlohmann::json> FetchStatsSummary(const StatsArgs& args);

// The whole command: prints one report (or, with watch_seconds, one every so many seconds) to
// stdout and returns the exit status: 0, or 1 after printing why the endpoint could not be read
// (a watch keeps going past a failed scrape: the daemon may be restarting).
int RunStats(const StatsArgs& args);

}  // namespace flatcake::cli
