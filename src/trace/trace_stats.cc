#include "trace/trace_stats.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace flatcake::trace {
namespace {

constexpr uint64_t kEmpty = UINT64_MAX;

inline uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Nearest-rank percentile over a histogram of `total` samples.
uint64_t Percentile(const std::vector<uint64_t>& hist, uint64_t total, double pct) {
  if (total == 0) return 0;
  // rank = ceil(pct/100 * total), computed in integers to avoid 0.99 * n rounding surprises.
  uint64_t scaled = static_cast<uint64_t>(std::llround(pct * 100.0));  // pct in hundredths
  uint64_t rank = (scaled * total + 9999) / 10000;
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  for (size_t d = 0; d < hist.size(); ++d) {
    seen += hist[d];
    if (seen >= rank) return d;
  }
  return hist.empty() ? 0 : hist.size() - 1;
}

}  // namespace

TraceStatsAccumulator::TraceStatsAccumulator() { slots_.assign(1 << 16, Slot{kEmpty, 0, 0}); }

void TraceStatsAccumulator::Grow() {
  std::vector<Slot> old(slots_.size() * 2, Slot{kEmpty, 0, 0});
  old.swap(slots_);
  size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    size_t i = Mix(s.key) & mask;
    while (slots_[i].key != kEmpty) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

TraceStatsAccumulator::Slot* TraceStatsAccumulator::FindOrInsert(uint64_t key, bool* inserted) {
  if (key == kEmpty) {
    *inserted = !has_empty_key_;
    has_empty_key_ = true;
    return &empty_key_slot_;
  }
  size_t mask = slots_.size() - 1;
  size_t i = Mix(key) & mask;
  for (;;) {
    Slot& s = slots_[i];
    if (s.key == key) {
      *inserted = false;
      return &s;
    }
    if (s.key == kEmpty) break;
    i = (i + 1) & mask;
  }
  // Keep the load factor under 1/2 so probes stay short.
  if ((size_ + 1) * 2 > slots_.size()) {
    Grow();
    return FindOrInsert(key, inserted);
  }
  slots_[i].key = key;
  ++size_;
  *inserted = true;
  return &slots_[i];
}

void TraceStatsAccumulator::Add(const TraceRequest& r) {
  const uint64_t j = s_.requests++;
  if (j == 0) {
    first_time_ = r.time_s;
    s_.block_tokens = r.block_tokens;
  }
  last_time_ = r.time_s;
  input_sum_ += static_cast<double>(r.input_tokens);
  output_sum_ += static_cast<double>(r.output_tokens);
  if (r.session_id >= 0) sessions_.insert(r.session_id);
  for (uint64_t id : r.block_ids) {
    bool inserted = false;
    Slot* slot = FindOrInsert(id, &inserted);
    if (inserted) {
      slot->last_request = j;
      slot->uses = 1;
      ++s_.block_accesses;
      continue;
    }
    if (slot->last_request == j) continue;  // repeated within this request: counted once
    uint64_t d = j - slot->last_request;
    if (d >= distance_hist_.size())
      distance_hist_.resize(std::max<size_t>(d + 1, 2 * distance_hist_.size()));
    ++distance_hist_[d];
    distance_sum_ += d;
    ++s_.hits;
    ++s_.block_accesses;
    slot->last_request = j;
    ++slot->uses;
  }
}

TraceStats TraceStatsAccumulator::Finish() const {
  TraceStats s = s_;
  s.unique_blocks = size_ + (has_empty_key_ ? 1 : 0);
  std::vector<uint64_t> uses;
  uses.reserve(s.unique_blocks);
  for (const Slot& slot : slots_) {
    if (slot.key != kEmpty) uses.push_back(slot.uses);
  }
  if (has_empty_key_) uses.push_back(empty_key_slot_.uses);
  for (uint64_t u : uses) s.once_blocks += (u == 1);
  if (s.unique_blocks > 0) {
    s.once_access_pct = 100.0 * static_cast<double>(s.once_blocks) / s.unique_blocks;
    size_t top = (uses.size() + 9) / 10;
    std::nth_element(uses.begin(), uses.begin() + (top - 1), uses.end(), std::greater<>());
    uint64_t top_sum = 0;
    for (size_t i = 0; i < top; ++i) top_sum += uses[i];
    s.top10_share_pct = 100.0 * static_cast<double>(top_sum) / s.block_accesses;
  }
  if (s.block_accesses > 0) s.hit_rate_pct = 100.0 * static_cast<double>(s.hits) / s.block_accesses;
  if (s.hits > 0) {
    s.reuse_mean = static_cast<double>(distance_sum_ / s.hits);
    s.reuse_mean_between = s.reuse_mean - 1.0;
    s.reuse_p50 = Percentile(distance_hist_, s.hits, 50);
    s.reuse_p90 = Percentile(distance_hist_, s.hits, 90);
    s.reuse_p99 = Percentile(distance_hist_, s.hits, 99);
  }
  if (s.requests > 0) {
    s.mean_blocks_per_request = static_cast<double>(s.block_accesses) / s.requests;
    s.mean_input_tokens = input_sum_ / s.requests;
    s.mean_output_tokens = output_sum_ / s.requests;
    s.duration_s = last_time_ - first_time_;
  }
  s.sessions = sessions_.size();
  return s;
}

Result<TraceStats> ComputeTraceStats(const std::string& path, const ReaderOptions& options,
                                     uint64_t* bad_lines) {
  FC_ASSIGN_OR_RETURN(auto reader, OpenTrace(path, options));
  TraceStatsAccumulator acc;
  TraceRequest r;
  for (;;) {
    FC_ASSIGN_OR_RETURN(bool more, reader->Next(&r));
    if (!more) break;
    acc.Add(r);
  }
  if (bad_lines != nullptr) *bad_lines = reader->bad_lines();
  return acc.Finish();
}

TraceStats ComputeTraceStats(const std::vector<TraceRequest>& requests) {
  TraceStatsAccumulator acc;
  for (const TraceRequest& r : requests) acc.Add(r);
  return acc.Finish();
}

std::string TraceStatsJson(const TraceStats& s, const std::string& file, uint64_t bad_lines) {
  std::string out = "{";
  if (!file.empty()) {
    out += "\"file\": \"";
    for (char c : file) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
    out += "\", ";
  }
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                "\"requests\": %" PRIu64 ", \"unique_blocks\": %" PRIu64
                ", \"once_access_pct\": %.2f, "
                "\"reuse_mean\": %.2f, \"reuse_p99\": %" PRIu64
                ", \"hit_rate_pct\": %.2f, "
                "\"reuse_mean_between\": %.2f, \"reuse_p50\": %" PRIu64 ", \"reuse_p90\": %" PRIu64
                ", \"top10_share_pct\": %.2f, \"block_accesses\": %" PRIu64 ", \"hits\": %" PRIu64
                ", \"mean_blocks_per_request\": %.2f, \"mean_input_tokens\": %.2f, "
                "\"mean_output_tokens\": %.2f, \"sessions\": %" PRIu64
                ", \"duration_s\": %.3f, "
                "\"block_tokens\": %u, \"bad_lines\": %" PRIu64 "}",
                s.requests, s.unique_blocks, s.once_access_pct, s.reuse_mean, s.reuse_p99,
                s.hit_rate_pct, s.reuse_mean_between, s.reuse_p50, s.reuse_p90, s.top10_share_pct,
                s.block_accesses, s.hits, s.mean_blocks_per_request, s.mean_input_tokens,
                s.mean_output_tokens, s.sessions, s.duration_s, s.block_tokens, bad_lines);
  out += buf;
  return out;
}

}  // namespace flatcake::trace
