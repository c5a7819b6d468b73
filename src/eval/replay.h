// Real-I/O trace replay: one policy (FlatCake's flat store, the Mooncake-style tiered baseline, or
// DRAM only) serves a request trace on this machine's disk, and the run is measured.
//
// Each request, at its (scaled) arrival time, is taken by one of `workers` threads, which
//  1. looks up its prefix (leading hits) and restores the hits with real reads into per-request
//     host buffers, every policy through the Store interface (Store::Get with the request's
//     arrival time): flat's FC-MAS serves DRAM-ready restores at once and queues SSD ones for its
//     read window; tiered (baseline::TieredStoreAdapter) stages SSD hits through its pool, with
//     revocation at the deadline, and is ready once its hits are delivered (promotion excluded);
//  2. verifies every restored byte against the deterministic content of its block (FillBlock);
//  3. models GPU prefill of the tokens it did not restore as time on one shared GPU (a serial
//     server at `prefill_tokens_per_s`); TTFT = queueing + restore + waiting for and running
//     prefill;
//  4. writes its new blocks with real writes (Put with WriteHints derived from the trace; the
//     tiered store ignores them).
//
// Thread safety: RunReplay is self-contained; concurrent calls need distinct directories.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "baseline/tiered_store.h"
#include "flatcake/layout.h"
#include "flatcake/status.h"
#include "trace/trace.h"
#include "trace/workload_gen.h"

namespace flatcake::eval {

enum class ReplayPolicy : uint8_t { kFlat, kTiered, kDramOnly };
std::string_view ReplayPolicyName(ReplayPolicy policy);
// "flat", "tiered", "dram-only" (also "dram").
Result<ReplayPolicy> ParseReplayPolicy(std::string_view name);

// The model whose KV blocks are stored and whose prefill is modelled. The default is a small
// dense model (16 layers, K and V planes) with its KV bytes per token scaled down so that a block
// is 64 KiB whatever the trace's block size, which keeps a replay within this machine's disk and
// time; prefill runs at a rate a single modern GPU reaches on such a model.
struct ModelProfile {
  uint32_t layers = 8;
  uint32_t planes = 2;
  uint64_t kv_bytes_per_token = 0;   // 0: block_bytes / tokens_per_block
  uint64_t block_bytes = 64 * 1024;  // used when kv_bytes_per_token is 0
  double prefill_tokens_per_s = 40000;
};

struct ReplayOptions {
  ReplayPolicy policy = ReplayPolicy::kFlat;
  std::string dir;  // data directory (SSD pool files); required unless dram-only
  uint64_t dram_bytes = 256ull << 20;
  uint64_t ssd_bytes = 2ull << 30;
  double qps = 0;  // target arrival rate; 0 keeps the trace's own timing
  uint32_t workers = 8;
  uint32_t block_tokens = 0;  // 0: the trace's block_tokens
  ModelProfile model;
  uint64_t key_namespace = 0x5eed;

  // Flat store knobs (the rest are StoreOptions defaults).
  uint64_t flat_file_bytes = 256ull << 20;   // SSD pool file (a segment never spans two)
  uint64_t flat_window_bytes = 64ull << 20;  // the store's read window (FC-MAS admits into it)
  uint64_t tau_tokens = 512;
  uint64_t l_agent_tokens = 32768;
  // Δgap, scaled like the KV bytes: the store's 64 KiB default is a fraction of one layer run of
  // a real model, but 16 blocks' worth of this profile's 4 KiB slices. One slice keeps the same
  // proportion (bridge a hole of about one block, never a skipped session tail).
  uint64_t flat_max_gap_bytes = 4096;

  // Tiered baseline knobs; dram/ssd budgets and dirs are filled from the fields above.
  baseline::TieredStoreOptions tiered;

  IoEngineKind io_engine = IoEngineKind::kAuto;
  // Called from the replay's driver thread every ~100 ms and at the end.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct ReplayReport {
  std::string policy;
  double qps = 0;  // target (0 = trace timing)
  uint64_t requests = 0;
  double duration_s = 0;
  uint64_t block_bytes = 0;
  uint32_t block_tokens = 0;

  uint64_t input_tokens = 0;
  uint64_t hit_tokens_dram = 0;  // restored (delivered and verified) from DRAM
  uint64_t hit_tokens_ssd = 0;   // restored from SSD
  uint64_t recomputed_tokens = 0;
  uint64_t lookup_hit_blocks = 0;  // leading hits found by the lookup
  uint64_t revoked_blocks = 0;     // tiered: hits whose prefetch was revoked
  uint64_t mismatches = 0;         // restored blocks whose bytes differ (or failed checksum)
  uint64_t errors = 0;             // requests whose restore or write returned an error
  std::string first_error;

  uint64_t ssd_bytes_read = 0;
  uint64_t ssd_bytes_delivered = 0;
  uint64_t ssd_bytes_written = 0;
  uint64_t dram_bytes_written = 0;
  uint64_t bytes_admitted = 0;
  double read_amp = 0;   // SSD bytes read / SSD bytes delivered
  double write_amp = 0;  // bytes written (all media) / bytes admitted

  double restore_p50_s = 0, restore_p99_s = 0;  // over requests with at least one hit
  double ssd_read_gbps = 0;  // SSD bytes read / time with an SSD restore in flight
  double ttft_mean_s = 0, ttft_p50_s = 0, ttft_p99_s = 0;
  double throughput_rps = 0;
  double gpu_busy_frac = 0;

  // Policy-specific counters.
  uint64_t promotions = 0, evictions = 0, offloads = 0, buckets_dropped = 0, revocations = 0;
  uint64_t scopes_reclaimed = 0;

  double hit_rate_pct() const;  // delivered hit tokens / input tokens
  double hit_dram_pct() const;
  double hit_ssd_pct() const;
};

// Replays `requests` (arrival order) under `options`. Fails on bad options or if the store
// cannot be opened; per-request I/O errors are counted in the report, not fatal.
Result<ReplayReport> RunReplay(const std::vector<trace::TraceRequest>& requests,
                               const ReplayOptions& options);

// Write-time signals the trace implies for each request (parallel to `requests`): the session it
// continues, its turn, and the output length of the session's previous request. Traces without
// session ids (Mooncake) are chained by prefix: a request whose leading known blocks end at the
// last or second-to-last block of an earlier request continues that request's session.
struct RequestHints {
  std::string session;
  uint32_t turn = 1;
  int64_t prior_reply_tokens = -1;  // -1: unknown
};
std::vector<RequestHints> DeriveHints(const std::vector<trace::TraceRequest>& requests);

// The layout of a block of `block_tokens` tokens of a model of `layers` x `planes` slices and
// `kv_bytes_per_token` bytes per token (each slice at least one byte).
KvLayout BlockLayout(uint32_t layers, uint32_t planes, uint64_t kv_bytes_per_token,
                     uint32_t block_tokens);

// The flat store's SSD pool for a budget: as many files as `flat_file_bytes` asks for, resized so
// they add up to the budget (to 4 KiB per file), so that flat and tiered get the same capacity.
struct FlatPool {
  uint64_t files = 0;
  uint64_t file_bytes = 0;
};
FlatPool FlatPoolFor(uint64_t ssd_bytes, uint64_t flat_file_bytes);

// Arrival offsets (seconds from the first request) of `requests`, their gaps scaled so the mean
// rate is `qps` (0 keeps the trace's own timing).
std::vector<double> ScaledArrivals(const std::vector<trace::TraceRequest>& requests, double qps);

// The replay's built-in default workload (`flatcake replay` with no workload flag), which
// `flatcake simulate --profile local` simulates too: an agentic-coding workload scaled so that
// three policies finish in well under three minutes on a 2-core machine with a ~1 GB/s disk, with
// DRAM far smaller than the sessions' working set, at kDefaultReplayQps.
trace::WorkloadOptions DefaultReplayWorkload();
inline constexpr double kDefaultReplayQps = 9;
// Table 2's L_agent for a workload at token `scale`: the threshold scales with the workload, so a
// scaled-down agentic session is still "long" to the flat store.
uint64_t ScaledLAgentTokens(uint64_t l_agent_tokens, double scale);

// Nearest-rank percentile of `v` (sorted in place); 0 for an empty vector.
double Percentile(std::vector<double>& v, double p);

}  // namespace flatcake::eval
