// `flatcake simulate`: a discrete-event simulation, in virtual time and with no data, of a serving
// engine whose KV cache is kept by one of six policies, at a scale this machine cannot hold.
//
// The store policies are the library's own code, driven on media that account bytes and time:
//  - flat: store/ScopePlacer (Table 2 placement, session scopes, extent allocation through
//    media/ExtentAllocator, watermark reclamation), the segment layout (store/segment_layout.h),
//    read planning (io/coalesce.h PlanReads, fed one descriptor per segment run and layer) and
//    FC-MAS (sched/RestoreQueue, HRRN or FCFS, admitting into the read window);
//  - tiered: baseline/TieredDirectory (LRU, offload into buckets in eviction order, FIFO bucket
//    drop, promotion), its staging accounting, prefetch deadline, trimming and read batches.
// The devices (SSD array, H2D link, scatter), the GPU (HBM prefix cache with LRU, prefill and
// decode time) and the server (requests in flight) are models whose numbers come from a profile
// (profile.h). docs/simulate.md describes the model and compares it with the paper.
//
// Thread safety: RunSimulation is self-contained and reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flatcake/status.h"
#include "sim/profile.h"
#include "trace/trace.h"

namespace flatcake::sim {

enum class SimPolicy : uint8_t { kRecompute, kDramOnly, kTiered, kTieredGds, kFlat, kFlatFcfs };
std::string_view SimPolicyName(SimPolicy p);
// "recompute", "dram-only", "tiered", "tiered-gds", "flat", "flat-fcfs".
Result<SimPolicy> ParseSimPolicy(std::string_view name);
std::vector<SimPolicy> AllSimPolicies();

struct SimOptions {
  SimPolicy policy = SimPolicy::kFlat;
  double qps = 0;             // target mean arrival rate; 0 keeps the trace's timing
  uint32_t block_tokens = 0;  // 0: the profile's page_tokens, else the trace's
  // Cap on the GPU prefix cache's pages that no running request holds (bytes per rank); -1: only
  // the pool (hbm_kv_bytes less the running requests' pages) limits it. A sensitivity knob, not a
  // profile fact (docs/simulate.md).
  int64_t hbm_cache_bytes = -1;
};

struct SimReport {
  std::string policy;
  std::string profile;
  double qps = 0;
  uint64_t requests = 0;
  uint32_t block_tokens = 0;
  uint64_t block_bytes = 0;
  double makespan_s = 0;  // first arrival to last completion (virtual)

  uint64_t input_tokens = 0, output_tokens = 0;
  uint64_t hit_tokens_hbm = 0, hit_tokens_dram = 0, hit_tokens_ssd = 0;
  uint64_t recomputed_tokens = 0;
  uint64_t revoked_blocks = 0, revocations = 0;  // tiered: prefetches revoked (and their blocks)

  double ttft_mean_s = 0, ttft_p50_s = 0, ttft_p99_s = 0;
  double throughput_tok_s = 0;                  // (input + output tokens) / makespan
  double restore_p50_s = 0, restore_p99_s = 0;  // start of service -> restored, requests with hits
  double prefetch_latency_s = 0;  // mean, requests with SSD hits: start of service -> SSD data in
  double ssd_read_gbps = 0;       // SSD bytes read / time with a read in flight
  double ssd_read_gbps_per_worker = 0;

  uint64_t ssd_bytes_read = 0, ssd_bytes_delivered = 0, ssd_read_commands = 0;
  uint64_t ssd_bytes_written = 0, dram_bytes_written = 0, bytes_admitted = 0;
  double read_amp = 0, write_amp = 0;
  uint64_t promotions = 0, evictions = 0, buckets_dropped = 0, scopes_reclaimed = 0;

  double wall_s = 0;  // real time the simulation took
  uint64_t peak_rss_bytes = 0;

  double hit_rate_pct() const;
  double hit_hbm_pct() const;
  double hit_dram_pct() const;
  double hit_ssd_pct() const;
};

// Simulates `requests` (arrival order) under `profile` and `options`.
Result<SimReport> RunSimulation(const std::vector<trace::TraceRequest>& requests,
                                const SimProfile& profile, const SimOptions& options);

}  // namespace flatcake::sim
