#include "eval/replay.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>
#include <thread>
#include <unordered_map>

#include "baseline/tiered_store_adapter.h"
#include "flatcake/store.h"
#include "util/align.h"
#include "util/block_content.h"
#include "util/thread_annotations.h"

namespace flatcake::eval {
namespace {

using Clock = std::chrono::steady_clock;
double Secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
Clock::duration FromSecs(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The outcome of one request's restore, whatever the policy.
struct RestoreOutcome {
  Status status;
  std::vector<uint8_t> found;  // per leading-hit key
  uint64_t from_dram_blocks = 0;
  uint64_t from_ssd_blocks = 0;
  uint64_t revoked = 0;
  uint64_t corrupt = 0;  // checksum failures reported by the store
  Clock::time_point ready;
  bool ssd = false;  // the restore touched SSD
  // When its SSD reads were in flight (for the bandwidth figure; queueing excluded).
  Clock::time_point io_begin, io_end;
};

// Per-worker reusable buffers: restores land in `in`, new blocks are generated into `out`.
struct WorkerBuffers {
  std::vector<uint8_t> in, out, expect;
  std::vector<void*> in_ptrs, out_ptrs;
  BlockBuffers Prepare(std::vector<uint8_t>& mem, std::vector<void*>& ptrs, size_t n,
                       uint64_t block) {
    if (mem.size() < n * block) mem.resize(n * block);
    ptrs.resize(n);
    for (size_t i = 0; i < n; ++i) ptrs[i] = mem.data() + i * block;
    return BlockBuffers{BufferKind::kBlockContiguous, std::span<void* const>(ptrs)};
  }
};

// The policy under test, through the Store interface (the flat store, or the tiered baseline's
// adapter; `tiered` is set for the latter, for its own report counters).
class StoreBackend {
 public:
  StoreBackend(std::unique_ptr<Store> store, baseline::TieredStoreAdapter* tiered,
               const KvLayout& layout, uint32_t block_tokens, std::vector<RequestHints> hints)
      : store_(std::move(store)),
        tiered_(tiered),
        layout_(layout),
        block_tokens_(block_tokens),
        hints_(std::move(hints)) {}

  size_t Lookup(std::span<const Key> keys) { return store_->Exists(keys); }

  // Restores `keys` into `dst` for a request that arrived at `arrival`; blocks until the data is
  // ready for prefill.
  RestoreOutcome Restore(std::span<const Key> keys, const BlockBuffers& dst,
                         Clock::time_point arrival) {
    RestoreOutcome out;
    RestoreOptions ro;
    ro.arrival_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(arrival.time_since_epoch()).count();
    // The tiered store promotes its SSD hits into DRAM after delivering them, before Get
    // returns: its request is ready when its layers were delivered.
    std::optional<Clock::time_point> delivered;
    if (tiered_ != nullptr) ro.on_layer = [&](uint32_t) { delivered = Clock::now(); };
    const auto t0 = Clock::now();
    auto r = store_->Get(keys, layout_, dst, ro);
    out.ready = delivered.value_or(Clock::now());
    if (!r.ok()) {
      out.status = r.status();
      out.found.assign(keys.size(), 0);
      return out;
    }
    out.found = r->found;
    out.corrupt = r->corrupt;
    out.revoked = r->revoked;
    const uint64_t bb = layout_.block_bytes();
    out.from_ssd_blocks = r->bytes_from_ssd / bb;
    out.from_dram_blocks = r->bytes_from_dram / bb;
    out.ssd = r->ssd_reads > 0 || r->revoked > 0;
    // The reads' interval, queueing for the window excluded (arrival may precede t0).
    out.io_begin = std::max(t0, arrival + std::chrono::nanoseconds(r->queued_ns));
    out.io_end = out.io_begin + std::chrono::nanoseconds(r->ssd_read_ns);
    return out;
  }

  // Writes the blocks a request recomputed; `prefix_len` blocks before keys[0] were restored,
  // the last of them being `tail` (when prefix_len > 0).
  Status Write(std::span<const Key> keys, const BlockBuffers& src, size_t req, size_t prefix_len,
               const Key& tail) {
    const RequestHints& h = hints_[req];
    WriteHints wh;
    wh.session = h.session;
    wh.turn = h.turn;
    if (h.prior_reply_tokens >= 0) wh.prior_reply_tokens = h.prior_reply_tokens;
    wh.context_tokens = prefix_len * block_tokens_;
    if (prefix_len > 0) wh.prefix_tail = tail;
    return store_->Put(keys, layout_, src, wh).status();
  }

  void Finish(ReplayReport* rep) {
    StoreStats s = store_->GetStats();
    rep->ssd_bytes_read = s.ssd.read_bytes;
    rep->ssd_bytes_delivered = s.ssd.delivered_bytes;
    rep->ssd_bytes_written = s.ssd.written_bytes;
    rep->dram_bytes_written = s.dram.written_bytes;
    rep->bytes_admitted = s.dram.admitted_bytes + s.ssd.admitted_bytes;
    rep->scopes_reclaimed = s.dram.scopes_reclaimed + s.ssd.scopes_reclaimed;
    if (tiered_ != nullptr) {
      const baseline::TieredStats t = tiered_->tiered().GetStats();
      rep->promotions = t.promotions;
      rep->evictions = t.evictions;
      rep->offloads = t.offloads;
      rep->buckets_dropped = t.buckets_dropped;
      rep->revocations = t.revocations;
    }
  }

 private:
  std::unique_ptr<Store> store_;
  baseline::TieredStoreAdapter* const tiered_;
  const KvLayout layout_;
  const uint32_t block_tokens_;
  const std::vector<RequestHints> hints_;
};

// --- the driver ---

struct RequestRecord {
  double ttft_s = -1;
  double restore_s = -1;
  double ssd_restore_s = -1;
};

class Replayer {
 public:
  Replayer(const std::vector<trace::TraceRequest>& reqs, const ReplayOptions& o,
           const KvLayout& layout, uint32_t block_tokens, StoreBackend* backend)
      : reqs_(reqs),
        o_(o),
        layout_(layout),
        block_tokens_(block_tokens),
        backend_(backend),
        records_(reqs.size()) {}

  void Run(ReplayReport* rep) {
    const std::vector<double> at = ScaledArrivals(reqs_, o_.qps);
    start_ = Clock::now();
    {
      // Uncontended (no worker has started); the lock is taken for the analysis.
      MutexLock lock(gmu_);
      gpu_free_ = start_;
    }
    std::vector<std::thread> workers;
    for (uint32_t w = 0; w < std::max<uint32_t>(1, o_.workers); ++w) {
      workers.emplace_back([this] { WorkerLoop(); });
    }
    std::thread dispatcher([&] {
      for (size_t i = 0; i < reqs_.size(); ++i) {
        std::this_thread::sleep_until(start_ + FromSecs(at[i]));
        {
          MutexLock lock(qmu_);
          queue_.push_back(Arrival{i, start_ + FromSecs(at[i])});
        }
        qcv_.NotifyOne();
      }
      MutexLock lock(qmu_);
      closed_ = true;
      qcv_.NotifyAll();
    });
    while (done_.load() < reqs_.size()) {
      if (o_.progress) o_.progress(done_.load(), reqs_.size());
      MutexLock lock(dmu_);
      const auto deadline = Clock::now() + std::chrono::milliseconds(100);
      while (done_.load() < reqs_.size()) {
        if (!dcv_.WaitUntil(dmu_, deadline)) break;
      }
    }
    dispatcher.join();
    for (auto& t : workers) t.join();
    // Uncontended (every worker has been joined); the locks are taken for the analysis.
    MutexLock stats_lock(smu_);
    MutexLock gpu_lock(gmu_);
    if (o_.progress) o_.progress(reqs_.size(), reqs_.size());
    const auto end = Clock::now();
    rep->duration_s = Secs(end - start_);

    std::vector<double> ttft, restore;
    double ttft_sum = 0;
    for (const RequestRecord& r : records_) {
      if (r.ttft_s >= 0) {
        ttft.push_back(r.ttft_s);
        ttft_sum += r.ttft_s;
      }
      if (r.restore_s >= 0) restore.push_back(r.restore_s);
    }
    rep->requests = reqs_.size();
    rep->input_tokens = input_tokens_;
    rep->hit_tokens_dram = hit_dram_;
    rep->hit_tokens_ssd = hit_ssd_;
    rep->recomputed_tokens = recomputed_;
    rep->lookup_hit_blocks = lookup_hits_;
    rep->revoked_blocks = revoked_;
    rep->mismatches = mismatches_;
    rep->errors = errors_;
    rep->first_error = first_error_;
    rep->ttft_mean_s = ttft.empty() ? 0 : ttft_sum / ttft.size();
    rep->ttft_p50_s = Percentile(ttft, 50);
    rep->ttft_p99_s = Percentile(ttft, 99);
    rep->restore_p50_s = Percentile(restore, 50);
    rep->restore_p99_s = Percentile(restore, 99);
    rep->throughput_rps = rep->duration_s > 0 ? reqs_.size() / rep->duration_s : 0;
    rep->gpu_busy_frac = rep->duration_s > 0 ? gpu_busy_s_ / rep->duration_s : 0;
    backend_->Finish(rep);
    // Bandwidth over the union of the intervals during which some SSD restore was in flight.
    std::sort(ssd_intervals_.begin(), ssd_intervals_.end());
    double busy = 0, cur_b = -1, cur_e = -1;
    for (const auto& [b, e] : ssd_intervals_) {
      if (b > cur_e) {
        busy += cur_e - cur_b;
        cur_b = b;
        cur_e = e;
      } else {
        cur_e = std::max(cur_e, e);
      }
    }
    busy += cur_e - cur_b;
    rep->ssd_read_gbps = busy > 0 ? rep->ssd_bytes_read / busy / 1e9 : 0;
    rep->read_amp =
        rep->ssd_bytes_delivered > 0 ? double(rep->ssd_bytes_read) / rep->ssd_bytes_delivered : 0;
    rep->write_amp =
        rep->bytes_admitted > 0
            ? double(rep->ssd_bytes_written + rep->dram_bytes_written) / rep->bytes_admitted
            : 0;
  }

 private:
  struct Arrival {
    size_t index;
    Clock::time_point at;
  };

  void WorkerLoop() {
    WorkerBuffers buf;
    buf.expect.resize(layout_.block_bytes());
    for (;;) {
      Arrival a;
      {
        MutexLock lock(qmu_);
        while (!closed_ && queue_.empty()) qcv_.Wait(qmu_);
        if (queue_.empty()) return;
        a = queue_.front();
        queue_.pop_front();
      }
      Serve(a, buf);
      if (done_.fetch_add(1) + 1 == reqs_.size()) dcv_.NotifyAll();
    }
  }

  void Fail(const Status& st) EXCLUDES(smu_) {
    MutexLock lock(smu_);
    errors_++;
    if (first_error_.empty()) first_error_ = st.ToString();
  }

  void Serve(const Arrival& a, WorkerBuffers& buf) {
    const trace::TraceRequest& req = reqs_[a.index];
    const uint64_t bb = layout_.block_bytes();
    std::vector<Key> keys;
    keys.reserve(req.block_ids.size());
    for (uint64_t id : req.block_ids) keys.push_back(KeyFromId(id, o_.key_namespace));
    const auto t_start = Clock::now();

    // 1. Lookup and restore the leading hits.
    const size_t n = backend_->Lookup(keys);
    size_t delivered = 0;
    uint64_t from_ssd = 0, revoked = 0, bad = 0;  // DRAM hits are the rest of `delivered`
    Clock::time_point ready = t_start;
    if (n > 0) {
      BlockBuffers dst = buf.Prepare(buf.in, buf.in_ptrs, n, bb);
      RestoreOutcome out = backend_->Restore(std::span<const Key>(keys.data(), n), dst, a.at);
      if (!out.status.ok()) Fail(out.status);
      ready = out.ready;
      revoked = out.revoked;
      bad = out.corrupt;
      // 2. Verify every restored byte; the delivered prefix ends at the first miss or mismatch.
      for (; delivered < n && delivered < out.found.size() && out.found[delivered]; ++delivered) {
        FillBlock(keys[delivered], buf.expect.data(), bb);
        if (std::memcmp(buf.expect.data(), buf.in_ptrs[delivered], bb) != 0) {
          bad++;
          break;
        }
      }
      // Attribute the delivered blocks to media in the store's proportions.
      const uint64_t got = out.from_dram_blocks + out.from_ssd_blocks;
      from_ssd = got ? std::min<uint64_t>(delivered, delivered * out.from_ssd_blocks / got) : 0;
      MutexLock lock(smu_);
      records_[a.index].restore_s = Secs(ready - t_start);
      if (out.ssd) {
        ssd_intervals_.emplace_back(Secs(out.io_begin - start_), Secs(out.io_end - start_));
      }
    }

    // 3. Prefill of what was not restored, on the one modelled GPU.
    const uint64_t hit_tokens = std::min<uint64_t>(delivered * block_tokens_, req.input_tokens);
    const uint64_t miss_tokens = req.input_tokens - hit_tokens;
    const double prefill_s = miss_tokens / o_.model.prefill_tokens_per_s;
    Clock::time_point gpu_end;
    {
      MutexLock lock(gmu_);
      const Clock::time_point start = std::max(ready, gpu_free_);
      gpu_end = start + FromSecs(prefill_s);
      gpu_free_ = gpu_end;
      gpu_busy_s_ += prefill_s;
    }
    std::this_thread::sleep_until(gpu_end);
    {
      MutexLock lock(smu_);
      records_[a.index].ttft_s = Secs(gpu_end - a.at);
      input_tokens_ += req.input_tokens;
      lookup_hits_ += n;
      revoked_ += revoked;
      mismatches_ += bad;
      recomputed_ += miss_tokens;
      const uint64_t ssd_tok = std::min(hit_tokens, from_ssd * block_tokens_);
      hit_ssd_ += ssd_tok;
      hit_dram_ += hit_tokens - ssd_tok;
    }

    // 4. Write the blocks that were not delivered (recomputed), with real writes. Like a serving
    //    engine's page-granular cache, only full blocks are stored: a partly filled last block
    //    changes with the next turn and is never reused.
    const size_t full = std::min<size_t>(keys.size(), req.input_tokens / block_tokens_);
    if (delivered < full) {
      const size_t m = full - delivered;
      BlockBuffers src = buf.Prepare(buf.out, buf.out_ptrs, m, bb);
      for (size_t i = 0; i < m; ++i) {
        FillBlock(keys[delivered + i], static_cast<uint8_t*>(buf.out_ptrs[i]), bb);
      }
      const Key tail = delivered > 0 ? keys[delivered - 1] : Key{};
      Status st = backend_->Write(std::span<const Key>(keys.data() + delivered, m), src, a.index,
                                  delivered, tail);
      if (!st.ok()) Fail(st);
    }
  }

  const std::vector<trace::TraceRequest>& reqs_;
  const ReplayOptions& o_;
  const KvLayout layout_;
  const uint32_t block_tokens_;
  StoreBackend* backend_;
  Clock::time_point start_;

  Mutex qmu_;
  CondVar qcv_;
  std::deque<Arrival> queue_ GUARDED_BY(qmu_);
  bool closed_ GUARDED_BY(qmu_) = false;

  // Wakes Run to report progress; guards nothing (done_ is atomic).
  Mutex dmu_;
  CondVar dcv_;
  std::atomic<uint64_t> done_{0};

  Mutex gmu_;
  Clock::time_point gpu_free_ GUARDED_BY(gmu_);
  double gpu_busy_s_ GUARDED_BY(gmu_) = 0;

  Mutex smu_;
  std::vector<RequestRecord> records_ GUARDED_BY(smu_);
  uint64_t input_tokens_ GUARDED_BY(smu_) = 0, hit_dram_ GUARDED_BY(smu_) = 0,
                         hit_ssd_ GUARDED_BY(smu_) = 0, recomputed_ GUARDED_BY(smu_) = 0,
                         lookup_hits_ GUARDED_BY(smu_) = 0, revoked_ GUARDED_BY(smu_) = 0,
                         mismatches_ GUARDED_BY(smu_) = 0, errors_ GUARDED_BY(smu_) = 0;
  // SSD restores in flight (s from start).
  std::vector<std::pair<double, double>> ssd_intervals_ GUARDED_BY(smu_);
  std::string first_error_ GUARDED_BY(smu_);
};

}  // namespace

std::string_view ReplayPolicyName(ReplayPolicy p) {
  switch (p) {
    case ReplayPolicy::kFlat: return "flat";
    case ReplayPolicy::kTiered: return "tiered";
    case ReplayPolicy::kDramOnly: return "dram-only";
  }
  return "?";
}

Result<ReplayPolicy> ParseReplayPolicy(std::string_view name) {
  if (name == "flat" || name == "flatcake") return ReplayPolicy::kFlat;
  if (name == "tiered" || name == "mooncake") return ReplayPolicy::kTiered;
  if (name == "dram-only" || name == "dram") return ReplayPolicy::kDramOnly;
  return Status::InvalidArgument("unknown policy '" + std::string(name) +
                                 "' (expected flat, tiered or dram-only)");
}

double ReplayReport::hit_rate_pct() const {
  return input_tokens ? 100.0 * (hit_tokens_dram + hit_tokens_ssd) / input_tokens : 0;
}
double ReplayReport::hit_dram_pct() const {
  return input_tokens ? 100.0 * hit_tokens_dram / input_tokens : 0;
}
double ReplayReport::hit_ssd_pct() const {
  return input_tokens ? 100.0 * hit_tokens_ssd / input_tokens : 0;
}

KvLayout BlockLayout(uint32_t layers, uint32_t planes, uint64_t kv_bytes_per_token,
                     uint32_t block_tokens) {
  const uint64_t slices = uint64_t{layers} * planes;
  return KvLayout{layers, planes,
                  std::max<uint64_t>(1, kv_bytes_per_token * block_tokens / slices)};
}

FlatPool FlatPoolFor(uint64_t ssd_bytes, uint64_t flat_file_bytes) {
  FlatPool p;
  p.files = std::max<uint64_t>(1, (ssd_bytes + flat_file_bytes - 1) / flat_file_bytes);
  p.file_bytes = std::max<uint64_t>(4096, AlignDown(ssd_bytes / p.files, 4096));
  return p;
}

std::vector<double> ScaledArrivals(const std::vector<trace::TraceRequest>& reqs, double qps) {
  std::vector<double> at(reqs.size(), 0);
  const double span = reqs.size() > 1 ? reqs.back().time_s - reqs.front().time_s : 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    double t = reqs[i].time_s - reqs.front().time_s;
    if (qps > 0) {
      t = span > 0 ? t * (static_cast<double>(reqs.size() - 1) / span) / qps
                   : static_cast<double>(i) / qps;
    }
    at[i] = std::max(0.0, t);
  }
  return at;
}

trace::WorkloadOptions DefaultReplayWorkload() {
  trace::WorkloadOptions wo = trace::DefaultWorkloadOptions(trace::WorkloadKind::kAgentic);
  wo.requests = 360;
  wo.scale = 0.15;
  wo.concurrency = 6;
  return wo;
}

uint64_t ScaledLAgentTokens(uint64_t l_agent_tokens, double scale) {
  return std::max<uint64_t>(256, static_cast<uint64_t>(l_agent_tokens * scale));
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * v.size()));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

std::vector<RequestHints> DeriveHints(const std::vector<trace::TraceRequest>& reqs) {
  std::vector<RequestHints> out(reqs.size());
  // Traces with sessions: the previous request of the session gives the prior reply.
  std::unordered_map<int64_t, size_t> last_of_session;
  // Traces without: block id -> (first request that used it, position in it).
  std::unordered_map<uint64_t, std::pair<size_t, size_t>> owner;
  uint64_t next_session = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const trace::TraceRequest& r = reqs[i];
    RequestHints& h = out[i];
    if (r.session_id >= 0) {
      h.session = std::string("s").append(std::to_string(r.session_id));
      auto it = last_of_session.find(r.session_id);
      h.turn = r.turn > 0 ? static_cast<uint32_t>(r.turn)
                          : (it == last_of_session.end() ? 1 : out[it->second].turn + 1);
      if (it != last_of_session.end()) {
        h.prior_reply_tokens = static_cast<int64_t>(reqs[it->second].output_tokens);
      }
      last_of_session[r.session_id] = i;
      continue;
    }
    size_t k = 0;
    while (k < r.block_ids.size() && owner.count(r.block_ids[k])) ++k;
    bool continued = false;
    if (k > 0) {
      const auto [j, pos] = owner.at(r.block_ids[k - 1]);
      const size_t len = reqs[j].block_ids.size();
      if (pos + 2 >= len) {  // ends at the last or second-to-last block of request j
        h.session = out[j].session;
        h.turn = out[j].turn + 1;
        h.prior_reply_tokens = static_cast<int64_t>(reqs[j].output_tokens);
        continued = true;
      }
    }
    if (!continued) h.session = std::string("c").append(std::to_string(next_session++));
    for (size_t p = 0; p < r.block_ids.size(); ++p) owner.try_emplace(r.block_ids[p], i, p);
  }
  return out;
}

Result<ReplayReport> RunReplay(const std::vector<trace::TraceRequest>& requests,
                               const ReplayOptions& o) {
  if (requests.empty()) return Status::InvalidArgument("replay: the trace has no requests");
  const uint32_t block_tokens = o.block_tokens ? o.block_tokens : requests.front().block_tokens;
  if (block_tokens == 0) return Status::InvalidArgument("replay: block size in tokens unknown");
  if (o.model.layers == 0 || o.model.planes == 0) {
    return Status::InvalidArgument("replay: model layers and planes must be > 0");
  }
  if (!(o.model.prefill_tokens_per_s > 0)) {
    return Status::InvalidArgument("replay: prefill tokens/s must be > 0");
  }
  if (o.qps < 0) return Status::InvalidArgument("replay: qps must be >= 0");
  if (o.policy == ReplayPolicy::kFlat && (o.flat_file_bytes == 0 || o.flat_file_bytes % 4096)) {
    return Status::InvalidArgument("replay: --flat-file-bytes must be a positive multiple of 4096");
  }
  const uint64_t per_token = o.model.kv_bytes_per_token
                                 ? o.model.kv_bytes_per_token
                                 : std::max<uint64_t>(1, o.model.block_bytes / block_tokens);
  const KvLayout layout = BlockLayout(o.model.layers, o.model.planes, per_token, block_tokens);
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  if (o.policy != ReplayPolicy::kDramOnly && o.dir.empty()) {
    return Status::InvalidArgument("replay: a data directory is required for SSD policies");
  }

  ReplayReport rep;
  rep.policy = std::string(ReplayPolicyName(o.policy));
  rep.qps = o.qps;
  rep.block_bytes = layout.block_bytes();
  rep.block_tokens = block_tokens;

  std::unique_ptr<StoreBackend> backend;
  if (o.policy == ReplayPolicy::kFlat) {
    StoreOptions so;
    so.dram_bytes = o.dram_bytes;
    so.ssd_dirs = {o.dir};
    so.recover = false;  // a replay starts from an empty store
    const FlatPool pool = FlatPoolFor(o.ssd_bytes, o.flat_file_bytes);
    so.ssd_file_bytes = pool.file_bytes;
    so.ssd_bytes = pool.file_bytes * pool.files;
    so.tokens_per_block = block_tokens;
    so.tau_tokens = o.tau_tokens;
    so.l_agent_tokens = o.l_agent_tokens;
    so.read_window_bytes = o.flat_window_bytes;
    so.max_gap_bytes = o.flat_max_gap_bytes;
    so.io_engine = o.io_engine;
    so.max_scopes = 1 << 18;
    FC_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(so));
    backend = std::make_unique<StoreBackend>(std::move(store), nullptr, layout, block_tokens,
                                             DeriveHints(requests));
  } else {
    baseline::TieredStoreOptions to = o.tiered;
    to.dram_bytes = o.dram_bytes;
    to.io_engine = o.io_engine;
    to.tokens_per_block = block_tokens;  // the prefetch timeout counts the hits' tokens
    if (o.policy == ReplayPolicy::kTiered) {
      to.ssd_dirs = {o.dir};
      to.ssd_bytes = o.ssd_bytes;
      // Small budgets (tests) get buckets that fit them; real runs keep the 256 MiB default.
      while (to.bucket_bytes > to.ssd_bytes / 4 && to.bucket_bytes > (1u << 20)) {
        to.bucket_bytes /= 2;
      }
    } else {
      to.ssd_dirs.clear();
    }
    FC_ASSIGN_OR_RETURN(std::unique_ptr<baseline::TieredStoreAdapter> store,
                        baseline::TieredStoreAdapter::Open(to));
    baseline::TieredStoreAdapter* tiered = store.get();
    backend = std::make_unique<StoreBackend>(std::move(store), tiered, layout, block_tokens,
                                             DeriveHints(requests));
  }
  Replayer replayer(requests, o, layout, block_tokens, backend.get());
  replayer.Run(&rep);
  backend.reset();
  return rep;
}

}  // namespace flatcake::eval
