// Table 1 statistics of a trace under an infinite-capacity cache.
//
// Definitions (requests are taken in the order given, numbered 0, 1, ...):
// - Each request counts each of its distinct block ids once (an "access").
// - hit rate: accesses whose block an earlier request already used, over all accesses.
// - once-access: unique blocks used by exactly one request, over unique blocks.
// - reuse distance: for every hit on block b by request j whose most recent earlier use was
//   request i, the index difference j - i (>= 1). `reuse_mean_between` is j - i - 1, the count of
//   requests strictly between. Percentiles are nearest-rank: the smallest d such that at least
//   p% of hits have distance <= d.
// - top-10% share: accesses that land on the 10% most-accessed unique blocks (rounded up).
//
// Thread safety: an accumulator is single-threaded.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "trace/trace.h"

namespace flatcake::trace {

struct TraceStats {
  uint64_t requests = 0;
  uint64_t block_accesses = 0;  // distinct blocks per request, summed
  uint64_t unique_blocks = 0;
  uint64_t once_blocks = 0;
  uint64_t hits = 0;
  double once_access_pct = 0;
  double hit_rate_pct = 0;
  double reuse_mean = 0;          // index difference j - i
  double reuse_mean_between = 0;  // j - i - 1
  uint64_t reuse_p50 = 0, reuse_p90 = 0, reuse_p99 = 0;
  double top10_share_pct = 0;
  double mean_blocks_per_request = 0;  // distinct blocks per request
  double mean_input_tokens = 0, mean_output_tokens = 0;
  uint64_t sessions = 0;  // distinct session ids; 0 when the trace does not carry them
  double duration_s = 0;  // last arrival minus first
  uint32_t block_tokens = 0;
};

class TraceStatsAccumulator {
 public:
  TraceStatsAccumulator();
  void Add(const TraceRequest& request);
  TraceStats Finish() const;

 private:
  struct Slot {
    uint64_t key;
    uint64_t last_request;  // index of the most recent request that used the block
    uint64_t uses;          // requests that used it
  };
  Slot* FindOrInsert(uint64_t key, bool* inserted);
  void Grow();

  std::vector<Slot> slots_;  // open addressing, linear probing; key kEmpty marks a free slot
  uint64_t size_ = 0;
  bool has_empty_key_ = false;  // the block id equal to kEmpty lives outside the table
  Slot empty_key_slot_{};
  std::vector<uint64_t> distance_hist_;  // hits per reuse distance
  std::unordered_set<int64_t> sessions_;
  TraceStats s_;
  double first_time_ = 0, last_time_ = 0;
  double input_sum_ = 0, output_sum_ = 0;
  long double distance_sum_ = 0;
};

// Reads `path` through OpenTrace and accumulates its statistics.
Result<TraceStats> ComputeTraceStats(const std::string& path, const ReaderOptions& options,
                                     uint64_t* bad_lines = nullptr);
TraceStats ComputeTraceStats(const std::vector<TraceRequest>& requests);

// One JSON object (single line) with every field; `file` is included when non-empty.
std::string TraceStatsJson(const TraceStats& stats, const std::string& file, uint64_t bad_lines);

}  // namespace flatcake::trace
