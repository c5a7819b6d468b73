#include "sim/simulator.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <list>
#include <queue>
#include <unordered_map>

#include "sim/sim_internal.h"

namespace flatcake::sim {
namespace internal {

double SsdDevice::ServiceSeconds(uint64_t commands, uint64_t bytes, double gbps) const {
  if (commands == 0) return 0;
  const double c = static_cast<double>(commands);
  double t = TransferSeconds(bytes, gbps);
  t = std::max(t, c / p_.max_iops);
  t = std::max(t, c * p_.cmd_cpu_s / p_.workers);
  t = std::max(t, c * p_.cmd_latency_s / (double(p_.workers) * p_.queue_depth));
  return t + p_.cmd_latency_s;
}

double SsdDevice::Submit(double t, uint64_t commands, uint64_t bytes, bool write, double gbps) {
  if (commands == 0) return t;
  if (gbps <= 0) gbps = write ? p_.write_gbps : p_.read_gbps;
  const double start = std::max(t, free_);
  const double dur = ServiceSeconds(commands, bytes, gbps);
  free_ = start + dur;
  if (write) {
    bytes_written_ += bytes;
  } else {
    bytes_read_ += bytes;
    read_commands_ += commands;
    read_busy_s_ += dur;
  }
  return free_;
}

namespace {

// Server event kinds.
enum : uint32_t { kArrive = 1, kReady, kGpuDone, kWriteDone, kDecodeDone };

// The GPU's paged KV pool and the prefix cache in it. A request in the GPU's batch holds its pages
// (pinned: the ones it found from the start of its prefill, the ones it computed or restored from
// its end, all of them until its decode ends), and another request finds them there as a
// server's radix cache would. Pages
// no running request holds stay cached, least recently used first out, as long as the pool (less
// the pinned pages) and the idle-cache cap leave room.
class HbmCache {
 public:
  HbmCache(uint64_t pool_blocks, uint64_t idle_cap_blocks)
      : pool_(pool_blocks), idle_cap_(idle_cap_blocks) {
    map_.reserve(std::min<uint64_t>(pool_, uint64_t{1} << 22));
  }
  // Leading blocks of `ids` present (the cached ones touched as they are found).
  uint32_t Leading(const std::vector<uint64_t>& ids, uint32_t limit) {
    uint32_t n = 0;
    for (; n < limit; ++n) {
      auto it = map_.find(ids[n]);
      if (it == map_.end()) break;
      if (it->second.refs == 0) lru_.splice(lru_.begin(), lru_, it->second.pos);
    }
    return n;
  }
  // Pins ids[first, end): present or not, they are in the pool now.
  void Pin(const std::vector<uint64_t>& ids, uint32_t first, uint32_t end) {
    if (pool_ == 0) return;
    for (uint32_t i = first; i < end; ++i) {
      auto [it, fresh] = map_.try_emplace(ids[i]);
      if (!fresh && it->second.refs == 0) lru_.erase(it->second.pos);
      if (it->second.refs++ == 0) pinned_++;
    }
    EvictToFit();
  }
  // Unpins ids[0, end): what no other request holds becomes cached, most recent first.
  void Unpin(const std::vector<uint64_t>& ids, uint32_t end) {
    if (pool_ == 0) return;
    for (uint32_t i = 0; i < end; ++i) {
      auto it = map_.find(ids[i]);
      if (it == map_.end() || it->second.refs == 0) continue;
      if (--it->second.refs == 0) {
        pinned_--;
        if (idle_cap_ == 0) {  // nothing stays cached: no trip through the LRU
          map_.erase(it);
          continue;
        }
        lru_.push_front(ids[i]);
        it->second.pos = lru_.begin();
      }
    }
    EvictToFit();
  }

 private:
  struct Entry {
    uint32_t refs = 0;                  // running requests holding the page
    std::list<uint64_t>::iterator pos;  // in lru_ when refs == 0
  };
  void EvictToFit() {
    while (!lru_.empty() && (lru_.size() > idle_cap_ || pinned_ + lru_.size() > pool_)) {
      map_.erase(lru_.back());
      lru_.pop_back();
    }
  }

  uint64_t pool_, idle_cap_;
  uint64_t pinned_ = 0;
  std::list<uint64_t> lru_;
  std::unordered_map<uint64_t, Entry> map_;
};

uint64_t PeakRssBytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace

class Simulator {
 public:
  Simulator(const std::vector<trace::TraceRequest>& reqs, const SimProfile& p, const SimOptions& o,
            uint32_t block_tokens)
      : reqs_(reqs),
        p_(p),
        o_(o),
        hbm_(p.hbm_kv_bytes / std::max<uint64_t>(1, p.kv_bytes_per_token * block_tokens),
             o.hbm_cache_bytes < 0
                 ? UINT64_MAX
                 : static_cast<uint64_t>(o.hbm_cache_bytes) /
                       std::max<uint64_t>(1, p.kv_bytes_per_token * block_tokens)) {
    ctx_.requests = &reqs;
    ctx_.profile = &p;
    ctx_.policy = o.policy;
    ctx_.block_tokens = block_tokens;
    ctx_.layout = eval::BlockLayout(p.layers, p.planes, p.kv_bytes_per_token, block_tokens);
    ctx_.ssd = std::make_unique<SsdDevice>(p.ssd);
    ctx_.h2d = std::make_unique<Link>(p.h2d_gbps);
    ctx_.host_copy = std::make_unique<Link>(p.host_copy_gbps);
    ctx_.scatter = std::make_unique<Link>(p.scatter_gbps);
    ctx_.schedule = [this](double t, uint32_t kind, uint64_t a) { Schedule(t, kind, a); };
    ctx_.restored = [this](uint32_t idx, double t) { Schedule(t, kReady, idx); };
    ctx_.reqs = &state_;
  }

  Status Init() {
    ctx_.hints = eval::DeriveHints(reqs_);
    switch (o_.policy) {
      case SimPolicy::kRecompute: break;
      case SimPolicy::kFlat:
      case SimPolicy::kFlatFcfs: store_ = MakeFlatModel(&ctx_); break;
      case SimPolicy::kDramOnly:
      case SimPolicy::kTiered:
      case SimPolicy::kTieredGds: store_ = MakeTieredModel(&ctx_); break;
    }
    state_.resize(reqs_.size());
    // Arrivals scaled to the target rate as the replay scales them.
    const std::vector<double> at = eval::ScaledArrivals(reqs_, o_.qps);
    for (size_t i = 0; i < reqs_.size(); ++i) {
      ReqState& s = state_[i];
      s.idx = static_cast<uint32_t>(i);
      s.arrival = at[i];
      s.full_blocks = static_cast<uint32_t>(
          std::min<uint64_t>(reqs_[i].block_ids.size(), reqs_[i].input_tokens / ctx_.block_tokens));
    }
    ResolveParents();
    return Status::OK();
  }

  void Run() {
    // Arrivals are fed one at a time: the heap holds only what is in flight.
    if (!state_.empty()) Schedule(state_[0].arrival, kArrive, 0);
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      now_ = e.t;
      if (e.kind >= kStoreEventBase) {
        store_->OnEvent(e.kind, e.a, now_);
        continue;
      }
      switch (e.kind) {
        case kArrive: OnArrive(static_cast<uint32_t>(e.a)); break;
        case kReady: OnReady(static_cast<uint32_t>(e.a)); break;
        case kGpuDone: OnGpuDone(static_cast<uint32_t>(e.a)); break;
        case kWriteDone:
          if (p_.writes_hold_slot) ReleaseSlot();
          break;
        case kDecodeDone: OnDecodeDone(static_cast<uint32_t>(e.a)); break;
      }
    }
  }

  void Report(SimReport* rep) {
    rep->policy = std::string(SimPolicyName(o_.policy));
    rep->profile = p_.name;
    rep->qps = o_.qps;
    rep->requests = reqs_.size();
    rep->block_tokens = ctx_.block_tokens;
    rep->block_bytes = ctx_.block_bytes();
    rep->makespan_s = end_ - (state_.empty() ? 0 : state_.front().arrival);
    rep->input_tokens = input_tokens_;
    rep->output_tokens = output_tokens_;
    rep->hit_tokens_hbm = hit_hbm_;
    rep->hit_tokens_dram = hit_dram_;
    rep->hit_tokens_ssd = hit_ssd_;
    rep->recomputed_tokens = recomputed_;
    std::vector<double> ttft, restore;
    double ttft_sum = 0, pf_sum = 0;
    uint64_t pf_n = 0;
    for (const ReqState& s : state_) {
      ttft.push_back(s.ttft);
      ttft_sum += s.ttft;
      if (s.lookup_hits > 0) restore.push_back(s.ready - s.start);
      if (s.ssd_in >= 0) {
        pf_sum += s.ssd_in - s.start;
        pf_n++;
      }
      rep->revoked_blocks += s.revoked;
      rep->revocations += s.revoked > 0;
    }
    rep->ttft_mean_s = ttft.empty() ? 0 : ttft_sum / ttft.size();
    rep->ttft_p50_s = eval::Percentile(ttft, 50);
    rep->ttft_p99_s = eval::Percentile(ttft, 99);
    rep->restore_p50_s = eval::Percentile(restore, 50);
    rep->restore_p99_s = eval::Percentile(restore, 99);
    rep->prefetch_latency_s = pf_n ? pf_sum / pf_n : 0;
    rep->throughput_tok_s =
        rep->makespan_s > 0 ? (input_tokens_ + output_tokens_) / rep->makespan_s : 0;
    const SsdDevice& ssd = *ctx_.ssd;
    rep->ssd_bytes_read = ssd.bytes_read();
    rep->ssd_read_commands = ssd.read_commands();
    rep->ssd_bytes_written = ssd.bytes_written();
    rep->ssd_read_gbps = ssd.read_busy_s() > 0 ? ssd.bytes_read() / ssd.read_busy_s() / 1e9 : 0;
    rep->ssd_read_gbps_per_worker = rep->ssd_read_gbps / p_.ssd.workers;
    if (store_) store_->Finish(rep);
    rep->read_amp =
        rep->ssd_bytes_delivered ? double(rep->ssd_bytes_read) / rep->ssd_bytes_delivered : 0;
    rep->write_amp =
        rep->bytes_admitted
            ? double(rep->ssd_bytes_written + rep->dram_bytes_written) / rep->bytes_admitted
            : 0;
  }

 private:
  void Schedule(double t, uint32_t kind, uint64_t a) {
    events_.push(Event{std::max(t, now_), seq_++, kind, a});
  }

  // parent_[i]: the index of the request request i continues, or -1. A trace names it by index
  // (generated workloads) or, where its records carry ids (Qwen), by the parent's id.
  void ResolveParents() {
    parent_.assign(reqs_.size(), -1);
    std::unordered_map<int64_t, int64_t> by_id;
    for (size_t i = 0; i < reqs_.size(); ++i) {
      if (reqs_[i].request_id >= 0) by_id.emplace(reqs_[i].request_id, static_cast<int64_t>(i));
    }
    for (size_t i = 0; i < reqs_.size(); ++i) {
      const int64_t p = reqs_[i].parent;
      if (p < 0) continue;
      int64_t idx = p;
      if (!by_id.empty()) {
        auto it = by_id.find(p);
        idx = it == by_id.end() ? -1 : it->second;
      }
      if (idx >= 0 && idx < static_cast<int64_t>(i)) parent_[i] = idx;
    }
    finished_.assign(reqs_.size(), 0);
  }

  // A request arrives at its (scaled) time, but a client sends it only once the reply it
  // continues is complete: when a server runs behind, an agent's next step or a chat's next turn
  // waits for it instead of overtaking it. Its TTFT counts from when it was sent.
  void OnArrive(uint32_t idx) {
    if (idx + 1 < state_.size()) Schedule(state_[idx + 1].arrival, kArrive, idx + 1);
    const int64_t parent = parent_[idx];
    if (parent >= 0 && !finished_[parent]) {
      blocked_on_[static_cast<uint32_t>(parent)].push_back(idx);
      return;
    }
    Admit(idx);
  }

  void Admit(uint32_t idx) {
    state_[idx].arrival = now_;
    waiting_.push_back(idx);
    StartWaiting();
  }

  void StartWaiting() {
    while (running_ < p_.max_running && !waiting_.empty()) {
      const uint32_t idx = waiting_.front();
      waiting_.pop_front();
      running_++;
      Start(idx);
    }
  }

  void ReleaseSlot() {
    running_--;
    StartWaiting();
  }

  void Start(uint32_t idx) {
    ReqState& s = state_[idx];
    const trace::TraceRequest& req = reqs_[idx];
    s.start = now_;
    const uint32_t nblocks = static_cast<uint32_t>(req.block_ids.size());
    s.hbm_blocks = hbm_.Leading(req.block_ids, nblocks);
    s.lookup_hits = store_ && s.hbm_blocks < nblocks ? store_->Lookup(s, s.hbm_blocks) : 0;
    if (s.lookup_hits == 0) {
      Schedule(now_, kReady, idx);
      return;
    }
    store_->Restore(s, s.hbm_blocks, now_);
  }

  void OnReady(uint32_t idx) {
    ReqState& s = state_[idx];
    s.ready = now_;
    gpu_queue_.push_back(idx);
    if (!gpu_busy_) StartGpu();
  }

  void StartGpu() {
    if (gpu_queue_.empty()) return;
    const uint32_t idx = gpu_queue_.front();
    gpu_queue_.pop_front();
    const ReqState& s = state_[idx];
    const trace::TraceRequest& req = reqs_[idx];
    // In the batch now: the prefix it found in HBM is held until its decode ends (a request
    // still restoring, or queued for the GPU, holds none: like a server's waiting queue).
    hbm_.Pin(req.block_ids, 0, std::min(s.hbm_blocks, s.full_blocks));
    const uint64_t cached = std::min<uint64_t>(
        uint64_t{s.hbm_blocks + s.delivered} * ctx_.block_tokens, req.input_tokens);
    const double uncached = static_cast<double>(req.input_tokens - cached);
    const double prefill = uncached / p_.prefill_tokens_per_s +
                           uncached * (req.input_tokens / 1e6) * p_.prefill_attn_s_per_mtok;
    // Decode follows on the GPU: it is busy until then (TTFT is at the end of the prefill).
    const double decode =
        p_.decode_tokens_per_s > 0 ? req.output_tokens / p_.decode_tokens_per_s : 0;
    gpu_busy_ = true;
    Schedule(now_ + prefill, kGpuDone, idx);
    Schedule(now_ + prefill + decode, kDecodeDone, idx);
  }

  void OnGpuDone(uint32_t idx) {
    ReqState& s = state_[idx];
    const trace::TraceRequest& req = reqs_[idx];
    s.ttft = now_ - s.arrival;
    end_ = std::max(end_, now_);
    // Token accounting.
    const uint64_t bt = ctx_.block_tokens;
    const uint64_t hbm_tok = std::min<uint64_t>(uint64_t{s.hbm_blocks} * bt, req.input_tokens);
    const uint64_t store_tok =
        std::min<uint64_t>(uint64_t{s.hbm_blocks + s.delivered} * bt, req.input_tokens) - hbm_tok;
    const uint64_t ssd_tok = std::min<uint64_t>(store_tok, uint64_t{s.from_ssd} * bt);
    input_tokens_ += req.input_tokens;
    output_tokens_ += req.output_tokens;
    hit_hbm_ += hbm_tok;
    hit_ssd_ += ssd_tok;
    hit_dram_ += store_tok - ssd_tok;
    recomputed_ += req.input_tokens - hbm_tok - store_tok;
    // The prompt's full blocks are in HBM now, held until the decode ends; the ones the store did
    // not deliver are written.
    hbm_.Pin(req.block_ids, std::min(s.hbm_blocks, s.full_blocks), s.full_blocks);
    const uint32_t first = s.hbm_blocks + s.delivered;
    double write_done = now_;
    if (store_ && first < s.full_blocks) write_done = store_->Write(s, first, s.full_blocks, now_);
    Schedule(write_done, kWriteDone, idx);
  }

  void OnDecodeDone(uint32_t idx) {
    end_ = std::max(end_, now_);
    hbm_.Unpin(reqs_[idx].block_ids, state_[idx].full_blocks);
    finished_[idx] = 1;
    if (auto it = blocked_on_.find(idx); it != blocked_on_.end()) {
      const std::vector<uint32_t> children = std::move(it->second);
      blocked_on_.erase(it);
      for (uint32_t c : children) Admit(c);
    }
    gpu_busy_ = false;
    if (!p_.writes_hold_slot) ReleaseSlot();
    StartGpu();
  }

  const std::vector<trace::TraceRequest>& reqs_;
  const SimProfile& p_;
  const SimOptions o_;
  SimContext ctx_;
  std::unique_ptr<StoreModel> store_;
  std::vector<ReqState> state_;
  std::vector<int64_t> parent_;
  std::vector<uint8_t> finished_;                                   // decode done
  std::unordered_map<uint32_t, std::vector<uint32_t>> blocked_on_;  // parent -> arrived children
  HbmCache hbm_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  double now_ = 0, end_ = 0;
  uint32_t running_ = 0;
  std::deque<uint32_t> waiting_;
  std::deque<uint32_t> gpu_queue_;
  bool gpu_busy_ = false;
  uint64_t input_tokens_ = 0, output_tokens_ = 0, hit_hbm_ = 0, hit_dram_ = 0, hit_ssd_ = 0,
           recomputed_ = 0;
};

}  // namespace internal

std::string_view SimPolicyName(SimPolicy p) {
  switch (p) {
    case SimPolicy::kRecompute: return "recompute";
    case SimPolicy::kDramOnly: return "dram-only";
    case SimPolicy::kTiered: return "tiered";
    case SimPolicy::kTieredGds: return "tiered-gds";
    case SimPolicy::kFlat: return "flat";
    case SimPolicy::kFlatFcfs: return "flat-fcfs";
  }
  return "?";
}

Result<SimPolicy> ParseSimPolicy(std::string_view name) {
  for (SimPolicy p : AllSimPolicies()) {
    if (name == SimPolicyName(p)) return p;
  }
  return Status::InvalidArgument("unknown policy '" + std::string(name) +
                                 "' (expected recompute, dram-only, tiered, tiered-gds, flat or "
                                 "flat-fcfs)");
}

std::vector<SimPolicy> AllSimPolicies() {
  return {SimPolicy::kRecompute, SimPolicy::kDramOnly, SimPolicy::kTiered,
          SimPolicy::kTieredGds, SimPolicy::kFlat,     SimPolicy::kFlatFcfs};
}

double SimReport::hit_rate_pct() const {
  return input_tokens ? 100.0 * (hit_tokens_hbm + hit_tokens_dram + hit_tokens_ssd) / input_tokens
                      : 0;
}
double SimReport::hit_hbm_pct() const {
  return input_tokens ? 100.0 * hit_tokens_hbm / input_tokens : 0;
}
double SimReport::hit_dram_pct() const {
  return input_tokens ? 100.0 * hit_tokens_dram / input_tokens : 0;
}
double SimReport::hit_ssd_pct() const {
  return input_tokens ? 100.0 * hit_tokens_ssd / input_tokens : 0;
}

Result<SimReport> RunSimulation(const std::vector<trace::TraceRequest>& requests,
                                const SimProfile& profile, const SimOptions& options) {
  FC_RETURN_IF_ERROR(profile.Validate());
  if (requests.empty()) return Status::InvalidArgument("simulate: the workload has no requests");
  if (options.qps < 0) return Status::InvalidArgument("simulate: qps must be >= 0");
  uint32_t bt = options.block_tokens ? options.block_tokens : profile.page_tokens;
  if (bt == 0) bt = requests.front().block_tokens;
  if (bt == 0) return Status::InvalidArgument("simulate: block size in tokens unknown");
  for (const trace::TraceRequest& r : requests) {
    if (r.block_tokens != 0 && r.block_tokens != bt) {
      return Status::InvalidArgument(
          "simulate: the workload's blocks are " + std::to_string(r.block_tokens) +
          " tokens but the profile pages " + std::to_string(bt) +
          " (generate it with the profile's page size, or pass --block-tokens)");
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  internal::Simulator sim(requests, profile, options, bt);
  FC_RETURN_IF_ERROR(sim.Init());
  sim.Run();
  SimReport rep;
  sim.Report(&rep);
  rep.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.peak_rss_bytes = internal::PeakRssBytes();
  return rep;
}

}  // namespace flatcake::sim
