// `flatcake bench sched`: FC-MAS against one FCFS queue on the same mixed stream of DRAM-ready
// and SSD-preparing restores.
//
// One seeded arrival sequence (Poisson arrivals, a DRAM-ready share, SSD sizes log-uniform in a
// range) is served twice, once per policy (StoreOptions::scheduler), by a real store through its
// public restore API: the store holds DRAM-resident and SSD-resident sessions (written with real
// writes before the stream starts), a submitter thread calls Store::Restore for each request at
// its arrival time, stamped with that time, and the restores read real bytes from this machine's
// disk, checksums verified. Latency: arrival to the moment the request's last layer is in its
// destination (the layer callback). The store schedules; this benchmark only submits and times.
//
// With --virtual the same stream is a discrete-event run of FC-MAS's queueing core
// (SimulateRestores, sched/restore_sim.h) against a modelled SSD (--ssd-gbps) and modelled copies
// (--dram-copy-us, --consumers): exact and instantaneous, for scales this machine cannot serve.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/store_flags.h"
#include "flatcake/gva.h"
#include "flatcake/store.h"
#include "sched/restore_queue.h"
#include "sched/restore_sim.h"
#include "util/align.h"
#include "util/block_content.h"
#include "util/temp_dir.h"
#include "util/thread_annotations.h"

namespace flatcake::cli {
namespace {

// A flag value for an error message ("1e-09", "4000", "nan").
std::string Num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

struct SchedBenchOptions {
  uint64_t requests = 2000;  // in [1, kMaxRequests]: a CLI::Range check on the option
  double dram_share = 0.5;
  double rate = 400;  // arrivals per second
  double ssd_min_mib = 1;
  double ssd_max_mib = 16;
  double window_mib = 64;
  uint64_t seed = 1;
  bool virtual_time = false;
  bool json = false;
  // The store (real time).
  double dram_mib = 1;  // size of a DRAM-ready request
  IoEngineKind io_engine = IoEngineKind::kAuto;
  std::string ssd_dir;  // empty: a temporary directory, removed afterwards
  // The model (--virtual).
  double ssd_gbps = 4.0;
  double dram_copy_us = 50;
  int consumers = 2;

  // Flag ranges. Comparisons are written so that NaN fails them. The upper bounds keep every
  // modelled time (ns, int64) and the window (bytes, uint64) far from overflow.
  Status Validate() const {
    if (!(dram_share >= 0 && dram_share <= 1)) {
      return Status::InvalidArgument("--dram-share must be in [0, 1]");
    }
    if (!(rate >= kMinRate && rate <= 1e9)) {
      return Status::InvalidArgument("--rate must be in [1e-3, 1e9] arrivals per second (got " +
                                     Num(rate) +
                                     "); the stream lasts about --requests / --rate seconds");
    }
    if (!(ssd_gbps >= 1e-3 && ssd_gbps <= 1e4)) {
      return Status::InvalidArgument("--ssd-gbps must be in [0.001, 10000]");
    }
    if (!(ssd_min_mib >= 1.0 / 1024 && ssd_max_mib >= ssd_min_mib)) {
      return Status::InvalidArgument("need 1 KiB <= --ssd-min-mib <= --ssd-max-mib");
    }
    if (ssd_max_mib > 1048576) return Status::InvalidArgument("--ssd-max-mib must be <= 1 TiB");
    // The store holds 16 sessions of each class, written before the stream starts.
    if (!virtual_time && ssd_max_mib > kMaxStoreSsdMib) {
      return Status::InvalidArgument("--ssd-max-mib must be <= " + Num(kMaxStoreSsdMib) +
                                     " with a real store (use --virtual for larger restores)");
    }
    if (!(dram_mib >= 1.0 / 1024 && dram_mib <= 256)) {
      return Status::InvalidArgument("--dram-mib must be in [1/1024, 256]");
    }
    if (!(dram_copy_us >= 0 && dram_copy_us <= 1e6)) {
      return Status::InvalidArgument("--dram-copy-us must be in [0, 1e6] (1 s)");
    }
    if (!(window_mib > 0 && window_mib <= 1048576)) {
      return Status::InvalidArgument("--window-mib must be in (0, 1048576] (1 TiB)");
    }
    if (consumers < 1 || consumers > 65536) {
      return Status::InvalidArgument("--consumers must be in [1, 65536], got " +
                                     std::to_string(consumers));
    }
    return Status::OK();
  }
  static constexpr uint64_t kMaxRequests = 10000000;
  static constexpr double kMaxStoreSsdMib = 256;
  static constexpr double kMinRate = 1e-3;
};

// Longest modelled stream (arrivals, SSD transfers, copies) accepted: far below int64 ns
// (~292 years) in virtual time; in real time the run would take that long, so it is capped
// at ten minutes.
constexpr double kMaxVirtualSpanS = 1e7;
constexpr double kMaxRealSpanS = 600;

// The workload: arrival offsets from the start of the run (ns) and the request contents.
std::vector<RestoreRequest> MakeArrivals(const SchedBenchOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(o.rate / 1e9);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double log_min = std::log(o.ssd_min_mib * 1048576.0);
  const double log_max = std::log(o.ssd_max_mib * 1048576.0);
  std::vector<RestoreRequest> out;
  out.reserve(o.requests);
  double t = 0;
  for (uint64_t i = 0; i < o.requests; ++i) {
    t += gap(rng);
    const bool dram = unit(rng) < o.dram_share;
    const double u = unit(rng);
    RestoreRequest r;
    r.id = i;
    r.arrival_ns = static_cast<int64_t>(t);
    if (dram) {
      r.slowest_gva = EncodeGva(MediaType::kDram, 0, i * 4096);
    } else {
      r.slowest_gva = EncodeGva(MediaType::kSsd, 0, i * 4096);
      r.kv_bytes = static_cast<uint64_t>(std::exp(log_min + u * (log_max - log_min)));
    }
    out.push_back(r);
  }
  return out;
}

struct PolicyRun {
  std::vector<int64_t> dram_ns, ssd_ns;  // latencies
  int64_t makespan_ns = 0;               // stream start to last completion
  uint64_t peak_in_flight_bytes = 0;
  uint64_t ssd_bytes_read = 0;
};

// The store's data set: DRAM-resident and SSD-resident sessions, and which keys each request of
// the stream restores. Requests take turns over the sessions of their class; an SSD request
// restores the leading blocks of its session that make up its size.
class SchedDataSet {
 public:
  static constexpr KvLayout kLayout{16, 2, 16 * 1024};  // 512 KiB blocks
  static constexpr uint64_t kSessions = 16;             // per medium

  explicit SchedDataSet(const SchedBenchOptions& o)
      : dram_blocks_(Blocks(o.dram_mib)), ssd_blocks_(Blocks(o.ssd_max_mib)) {}

  uint64_t dram_bytes() const { return kSessions * dram_blocks_ * kLayout.block_bytes(); }
  uint64_t ssd_bytes() const { return kSessions * ssd_blocks_ * kLayout.block_bytes(); }
  uint64_t session_bytes() const {
    return std::max(dram_blocks_, ssd_blocks_) * kLayout.block_bytes();
  }
  uint64_t max_request_blocks() const { return std::max(dram_blocks_, ssd_blocks_); }

  // Writes every session (real writes, each on its medium).
  Status Populate(Store& store) const {
    std::vector<uint8_t> buf(session_bytes());
    std::vector<void*> ptrs;
    for (int m = 0; m < 2; ++m) {
      const MediaType medium = m == 0 ? MediaType::kDram : MediaType::kSsd;
      const uint64_t n = m == 0 ? dram_blocks_ : ssd_blocks_;
      for (uint64_t s = 0; s < kSessions; ++s) {
        const std::vector<Key> keys = SessionKeys(medium, s, n);
        ptrs.clear();
        for (uint64_t b = 0; b < n; ++b) {
          uint8_t* p = buf.data() + b * kLayout.block_bytes();
          FillBlock(keys[b], p, kLayout.block_bytes());
          ptrs.push_back(p);
        }
        WriteHints h;
        h.session = std::string(m == 0 ? "dram-" : "ssd-") + std::to_string(s);
        h.force_medium = medium;
        FC_ASSIGN_OR_RETURN(PutResult r,
                            store.Put(keys, kLayout, {BufferKind::kBlockContiguous, ptrs}, h));
        if (r.written != n) return Status::IOError("bench sched: a session was not written whole");
      }
    }
    return Status::OK();
  }

  // The keys request `r` (number `i` of the stream) restores.
  std::vector<Key> RequestKeys(const RestoreRequest& r, uint64_t i) const {
    if (r.kv_bytes == 0) return SessionKeys(MediaType::kDram, i % kSessions, dram_blocks_);
    const uint64_t n = std::clamp<uint64_t>(
        (r.kv_bytes + kLayout.block_bytes() - 1) / kLayout.block_bytes(), 1, ssd_blocks_);
    return SessionKeys(MediaType::kSsd, i % kSessions, n);
  }

 private:
  static uint64_t Blocks(double mib) {
    const double bytes = mib * 1048576.0;
    return std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(bytes / kLayout.block_bytes())));
  }
  static std::vector<Key> SessionKeys(MediaType medium, uint64_t session, uint64_t n) {
    std::vector<Key> keys;
    for (uint64_t b = 0; b < n; ++b) {
      keys.push_back(Key{(static_cast<uint64_t>(medium) << 32) | session, b + 1});
    }
    return keys;
  }

  uint64_t dram_blocks_, ssd_blocks_;
};

// Pre-faulted destination buffers, reused once a restore into them is done (a fresh buffer's
// first-touch page faults would be timed as restore latency).
class DestPool {
 public:
  explicit DestPool(uint64_t bytes) : bytes_(bytes) {}
  uint8_t* Take() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (free_.empty()) {
      owned_.push_back(std::make_unique<uint8_t[]>(bytes_));
      std::memset(owned_.back().get(), 0, bytes_);
      return owned_.back().get();
    }
    uint8_t* p = free_.back();
    free_.pop_back();
    return p;
  }
  void Give(uint8_t* p) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    free_.push_back(p);
  }
  void Reserve(size_t n) {
    std::vector<uint8_t*> taken;
    for (size_t i = 0; i < n; ++i) taken.push_back(Take());
    for (uint8_t* p : taken) Give(p);
  }

 private:
  const uint64_t bytes_;
  Mutex mu_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_ GUARDED_BY(mu_);
  std::vector<uint8_t*> free_ GUARDED_BY(mu_);
};

// Waits for the restores in submission order, checks each one's result and recycles its buffer.
// The latencies come from the layer callbacks, so waiting in order does not skew them.
class RestoreCollector {
 public:
  struct InFlight {
    size_t index = 0;
    uint64_t keys = 0;
    uint8_t* dst = nullptr;
    std::unique_ptr<RestoreHandle> handle;
  };

  explicit RestoreCollector(DestPool* pool) : pool_(pool), thread_([this] { Run(); }) {}
  ~RestoreCollector() { (void)Finish(); }

  void Push(InFlight f) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      queue_.push_back(std::move(f));
    }
    cv_.NotifyOne();
  }
  void Fail(const Status& st) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (failure_.ok()) failure_ = st;
  }
  // Waits for everything pushed; the first failure, if any.
  Status Finish() EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      closed_ = true;
    }
    cv_.NotifyOne();
    if (thread_.joinable()) thread_.join();
    MutexLock lock(mu_);  // uncontended once joined; taken for the analysis
    return failure_;
  }

 private:
  void Run() EXCLUDES(mu_) {
    for (;;) {
      InFlight f;
      {
        MutexLock lock(mu_);
        while (!closed_ && queue_.empty()) cv_.Wait(mu_);
        if (queue_.empty()) return;
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      Result<GetResult> r = f.handle->Wait();
      Status st = r.ok() ? Status::OK() : r.status();
      if (st.ok() && (r->hits != f.keys || r->corrupt != 0)) {
        st = Status::Corruption("bench sched: request " + std::to_string(f.index) + " got " +
                                std::to_string(r->hits) + " of " + std::to_string(f.keys) +
                                " blocks (" + std::to_string(r->corrupt) + " corrupt)");
      }
      pool_->Give(f.dst);
      if (!st.ok()) Fail(st);
    }
  }

  DestPool* const pool_;
  Mutex mu_;
  CondVar cv_;
  std::deque<InFlight> queue_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  Status failure_ GUARDED_BY(mu_);
  std::thread thread_;  // last: starts after the members it uses
};

// A store holding `data`, scheduling restores by `policy`.
StoreOptions SchedStoreOptions(SchedPolicy policy, const SchedBenchOptions& o,
                               const SchedDataSet& data, const std::string& dir) {
  StoreOptions so;
  so.dram_bytes = data.dram_bytes() + 64 * kMiB;
  so.ssd_dirs = {dir};
  so.recover = false;  // a measurement starts from an empty pool
  so.ssd_file_bytes = AlignUp(std::max<uint64_t>(data.session_bytes(), 64 * kMiB), 4096);
  so.ssd_bytes = so.ssd_file_bytes * (2 + data.ssd_bytes() / so.ssd_file_bytes);
  so.read_window_bytes = static_cast<uint64_t>(o.window_mib * 1048576.0);
  so.io_engine = o.io_engine;
  so.scheduler = policy == SchedPolicy::kFcfs ? RestoreScheduler::kFcfs : RestoreScheduler::kMas;
  return so;
}

Result<PolicyRun> RunStore(SchedPolicy policy, const SchedBenchOptions& o,
                           const std::vector<RestoreRequest>& arrivals, const std::string& dir) {
  const SchedDataSet data(o);
  FC_ASSIGN_OR_RETURN(std::unique_ptr<Store> store,
                      Store::Open(SchedStoreOptions(policy, o, data, dir)));
  FC_RETURN_IF_ERROR(data.Populate(*store));
  const KvLayout& layout = SchedDataSet::kLayout;
  const uint64_t bb = layout.block_bytes();
  DestPool pool(data.max_request_blocks() * bb);
  // Enough buffers for the restores in flight at once (a 64 MiB window of SSD restores, the DRAM
  // ones, and those the in-order collector has not recycled yet): a buffer allocated and faulted
  // during the stream costs the submitting thread milliseconds, timed as the next requests'
  // latency (with 16 reserved, one run's FC-MAS DRAM P99 was 7.3 ms instead of about 2).
  pool.Reserve(64);
  std::vector<std::atomic<int64_t>> done_ns(arrivals.size());
  RestoreCollector collector(&pool);

  const int64_t start_ns = SteadyNowNs() + 10'000'000;  // the stream starts in 10 ms
  const auto start = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(start_ns));
  std::vector<void*> ptrs;
  for (size_t i = 0; i < arrivals.size(); ++i) {
    std::this_thread::sleep_until(start + std::chrono::nanoseconds(arrivals[i].arrival_ns));
    const std::vector<Key> keys = data.RequestKeys(arrivals[i], i);
    uint8_t* dst = pool.Take();
    ptrs.clear();
    for (size_t b = 0; b < keys.size(); ++b) ptrs.push_back(dst + b * bb);
    RestoreOptions ro;
    ro.arrival_ns = start_ns + arrivals[i].arrival_ns;
    std::atomic<int64_t>* done = &done_ns[i];
    ro.on_layer = [done, last = layout.num_layers - 1](uint32_t l) {
      if (l == last) done->store(SteadyNowNs(), std::memory_order_relaxed);
    };
    auto h = store->Restore(keys, layout, {BufferKind::kBlockContiguous, ptrs}, ro);
    if (!h.ok()) {
      pool.Give(dst);
      collector.Fail(h.status());
      break;
    }
    collector.Push(RestoreCollector::InFlight{i, keys.size(), dst, std::move(*h)});
  }
  FC_RETURN_IF_ERROR(collector.Finish());

  PolicyRun run;
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const int64_t done = done_ns[i].load(std::memory_order_relaxed);
    const int64_t latency = done - (start_ns + arrivals[i].arrival_ns);
    (arrivals[i].kv_bytes == 0 ? run.dram_ns : run.ssd_ns).push_back(latency);
    run.makespan_ns = std::max(run.makespan_ns, done - start_ns);
  }
  const StoreStats st = store->GetStats();
  run.peak_in_flight_bytes = st.restore_window_peak_bytes;
  run.ssd_bytes_read = st.ssd.read_bytes;
  return run;
}

Result<PolicyRun> RunVirtual(SchedPolicy policy, const SchedBenchOptions& o,
                             const std::vector<RestoreRequest>& arrivals) {
  RestoreSimModel model;
  model.ssd_bytes_per_sec = o.ssd_gbps * 1e9;
  model.dram_copy_ns = static_cast<int64_t>(o.dram_copy_us * 1e3);
  model.consumers = o.consumers;
  const SchedOptions so{policy, static_cast<uint64_t>(o.window_mib * 1048576.0)};
  FC_ASSIGN_OR_RETURN(std::vector<RestoreSimOutcome> out, SimulateRestores(so, model, arrivals));
  PolicyRun run;
  for (const RestoreSimOutcome& r : out) {
    (r.restore_class == RestoreClass::kDramReady ? run.dram_ns : run.ssd_ns)
        .push_back(r.latency_ns());
    run.makespan_ns = std::max(run.makespan_ns, r.done_ns);
  }
  // The simulator does not report the window peak; an exact figure needs a queue-level probe.
  return run;
}

double PercentileMs(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank.
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return static_cast<double>(v[rank - 1]) / 1e6;
}
double MaxMs(const std::vector<int64_t>& v) {
  return v.empty() ? 0 : static_cast<double>(*std::max_element(v.begin(), v.end())) / 1e6;
}

// Checks that the stream fits the run's limits; InvalidArgument naming the figure otherwise.
Status CheckSpan(const SchedBenchOptions& o, const std::vector<RestoreRequest>& arrivals) {
  const double max_span_s = o.virtual_time ? kMaxVirtualSpanS : kMaxRealSpanS;
  uint64_t ssd_bytes = 0, dram_requests = 0;
  for (const RestoreRequest& r : arrivals) {
    ssd_bytes += r.kv_bytes;
    dram_requests += r.kv_bytes == 0;
  }
  const double span_s = static_cast<double>(arrivals.back().arrival_ns) / 1e9;
  if (!o.virtual_time) {
    if (span_s <= max_span_s) return Status::OK();
    return Status::InvalidArgument("the stream's arrivals span " + Num(span_s) + " s, more than " +
                                   Num(max_span_s) +
                                   " s of real time (use --virtual, or raise --rate)");
  }
  const double ssd_work_s = static_cast<double>(ssd_bytes) / (o.ssd_gbps * 1e9);
  // DRAM copies are spread over the consumers.
  const double copy_work_s =
      static_cast<double>(dram_requests) * o.dram_copy_us / 1e6 / o.consumers;
  if (span_s > max_span_s || ssd_work_s > max_span_s || copy_work_s > max_span_s) {
    return Status::InvalidArgument("the stream models " + Num(span_s) + " s of arrivals, " +
                                   Num(ssd_work_s) + " s of SSD transfers and " + Num(copy_work_s) +
                                   " s of DRAM copies; each must be <= " + Num(max_span_s) + " s");
  }
  return Status::OK();
}

void PrintTable(const PolicyRun (&runs)[2], const SchedPolicy (&policies)[2]) {
  std::printf("%-7s %-14s %6s %9s %9s %9s %12s\n", "policy", "class", "count", "p50_ms", "p99_ms",
              "max_ms", "makespan_ms");
  for (int i = 0; i < 2; ++i) {
    const PolicyRun& r = runs[i];
    for (int c = 0; c < 2; ++c) {
      const std::vector<int64_t>& v = c == 0 ? r.dram_ns : r.ssd_ns;
      std::printf("%-7s %-14s %6zu %9.3f %9.3f %9.3f %12.1f\n",
                  std::string(SchedPolicyName(policies[i])).c_str(),
                  c == 0 ? "dram-ready" : "ssd-preparing", v.size(), PercentileMs(v, 50),
                  PercentileMs(v, 99), MaxMs(v), static_cast<double>(r.makespan_ns) / 1e6);
    }
  }
}

nlohmann::json ResultJson(const SchedBenchOptions& o, const PolicyRun (&runs)[2], double ratio,
                          double wall_s) {
  nlohmann::json j;
  j["bench"] = "sched";
  j["service"] = o.virtual_time ? "virtual-time" : "store";
  j["requests"] = o.requests;
  j["dram_share"] = o.dram_share;
  j["rate_per_s"] = o.rate;
  j["ssd_min_mib"] = o.ssd_min_mib;
  j["ssd_max_mib"] = o.ssd_max_mib;
  j["window_mib"] = o.window_mib;
  j["seed"] = o.seed;
  if (o.virtual_time) {
    j["ssd_gbps"] = o.ssd_gbps;
    j["consumers"] = o.consumers;
    j["dram_copy_us"] = o.dram_copy_us;
  } else {
    j["dram_mib"] = o.dram_mib;
    j["io_engine"] = std::string(IoEngineKindName(o.io_engine));
  }
  const char* names[2] = {"mas", "fcfs"};
  for (int i = 0; i < 2; ++i) {
    const std::string n = names[i];
    j[n + "_dram_p50_ms"] = PercentileMs(runs[i].dram_ns, 50);
    j[n + "_dram_p99_ms"] = PercentileMs(runs[i].dram_ns, 99);
    j[n + "_ssd_p50_ms"] = PercentileMs(runs[i].ssd_ns, 50);
    j[n + "_ssd_p99_ms"] = PercentileMs(runs[i].ssd_ns, 99);
    j[n + "_ssd_max_ms"] = MaxMs(runs[i].ssd_ns);
    j[n + "_makespan_ms"] = static_cast<double>(runs[i].makespan_ns) / 1e6;
    if (!o.virtual_time) {
      j[n + "_peak_inflight_mib"] = static_cast<double>(runs[i].peak_in_flight_bytes) / 1048576.0;
      j[n + "_ssd_read_gbps"] = runs[i].makespan_ns > 0
                                    ? static_cast<double>(runs[i].ssd_bytes_read) /
                                          static_cast<double>(runs[i].makespan_ns)
                                    : 0;
    }
  }
  j["fcfs_vs_mas_dram_p99"] = ratio;
  j["wall_s"] = wall_s;
  return j;
}

int RunSchedBench(const SchedBenchOptions& o) {
  auto bad_flags = [](const Status& s) { return ReportArgError("bench sched", s); };
  if (Status s = o.Validate(); !s.ok()) return bad_flags(s);
  const double max_span_s = o.virtual_time ? kMaxVirtualSpanS : kMaxRealSpanS;
  const double expected_span_s = static_cast<double>(o.requests) / o.rate;
  if (expected_span_s > max_span_s) {
    return bad_flags(Status::InvalidArgument(
        "--requests / --rate = " + Num(expected_span_s) + " s of arrivals, more than " +
        Num(max_span_s) + " s" +
        (o.virtual_time ? "" : " of real time (use --virtual, or raise --rate)")));
  }
  const std::vector<RestoreRequest> arrivals = MakeArrivals(o);
  if (Status s = CheckSpan(o, arrivals); !s.ok()) return bad_flags(s);
  std::unique_ptr<TempDir> tmp;
  std::string dir = o.ssd_dir;
  if (!o.virtual_time && dir.empty()) {
    tmp = std::make_unique<TempDir>("flatcake-sched");
    dir = tmp->path();
    if (dir.empty())
      return ReportStatus("bench sched", Status::IOError("cannot create a temp dir"));
  }

  const auto wall_start = std::chrono::steady_clock::now();
  PolicyRun runs[2];
  const SchedPolicy policies[2] = {SchedPolicy::kMas, SchedPolicy::kFcfs};
  for (int i = 0; i < 2; ++i) {
    Result<PolicyRun> r = o.virtual_time ? RunVirtual(policies[i], o, arrivals)
                                         : RunStore(policies[i], o, arrivals, dir);
    if (!r.ok()) {
      if (!o.virtual_time) return ReportOpenError("bench sched", r.status());
      return ReportStatus("bench sched", r.status());
    }
    runs[i] = std::move(*r);
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  const double span_s = static_cast<double>(arrivals.back().arrival_ns) / 1e9;
  if (o.virtual_time) {
    std::printf(
        "sched: %llu requests (%.0f%% DRAM-ready), %.0f arrivals/s over %.2f s, virtual time: SSD "
        "%.2f GB/s modelled (one FIFO device), SSD sizes %.1f-%.1f MiB log-uniform, window %.0f "
        "MiB, %d consumers, DRAM copy %.0f us, seed %llu\n",
        static_cast<unsigned long long>(o.requests), o.dram_share * 100, o.rate, span_s, o.ssd_gbps,
        o.ssd_min_mib, o.ssd_max_mib, o.window_mib, o.consumers, o.dram_copy_us,
        static_cast<unsigned long long>(o.seed));
  } else {
    std::printf(
        "sched: %llu requests (%.0f%% DRAM-ready, %.2f MiB each), %.0f arrivals/s over %.2f s, "
        "through Store::Restore on a real store (%s engine, read window %.0f MiB), SSD restores "
        "%.1f-%.1f MiB log-uniform, seed %llu\n",
        static_cast<unsigned long long>(o.requests), o.dram_share * 100, o.dram_mib, o.rate, span_s,
        std::string(IoEngineKindName(o.io_engine)).c_str(), o.window_mib, o.ssd_min_mib,
        o.ssd_max_mib, static_cast<unsigned long long>(o.seed));
  }
  PrintTable(runs, policies);
  const double mas_p99 = PercentileMs(runs[0].dram_ns, 99);
  const double fcfs_p99 = PercentileMs(runs[1].dram_ns, 99);
  const double ratio = mas_p99 > 0 ? fcfs_p99 / mas_p99 : 0;
  std::printf(
      "DRAM-ready P99: FCFS %.3f ms / FC-MAS %.3f ms = %.1fx (target >= 10x); wall %.2f s\n",
      fcfs_p99, mas_p99, ratio, wall_s);
  if (o.json) std::printf("%s\n", ResultJson(o, runs, ratio, wall_s).dump().c_str());
  return 0;
}

}  // namespace

void RegisterSchedBench(CLI::App& bench, int* exit_code) {
  auto opt = std::make_shared<SchedBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "sched",
      "FC-MAS vs one FCFS queue on the same mixed stream of DRAM-ready and SSD restores, through "
      "a real store's restore API (or --virtual: a discrete-event model): P50/P99 latency per "
      "class; exits 2 on bad flags");
  cmd->add_option("--requests", opt->requests, "Requests in the stream")
      ->check(CLI::Range(uint64_t{1}, SchedBenchOptions::kMaxRequests))
      ->capture_default_str();
  cmd->add_option("--dram-share", opt->dram_share, "Fraction of DRAM-ready requests")
      ->capture_default_str();
  cmd->add_option("--rate", opt->rate,
                  "Arrivals per second, Poisson (1e-3 to 1e9; --requests / --rate at most 600 s "
                  "in real time)")
      ->capture_default_str();
  cmd->add_option("--ssd-min-mib", opt->ssd_min_mib, "Smallest SSD restore, MiB")
      ->capture_default_str();
  cmd->add_option("--ssd-max-mib", opt->ssd_max_mib,
                  "Largest SSD restore, MiB (sizes are log-uniform in between; at most 256 with "
                  "a real store)")
      ->capture_default_str();
  cmd->add_option("--window-mib", opt->window_mib,
                  "The store's read window, into which FC-MAS admits SSD restores, MiB")
      ->capture_default_str();
  cmd->add_option("--dram-mib", opt->dram_mib, "Size of a DRAM-ready restore, MiB (real store)")
      ->capture_default_str();
  AddStoreFlag(cmd, "io_engine", &opt->io_engine);
  cmd->add_option("--ssd-dir", opt->ssd_dir,
                  "Directory of the store's SSD pool (default: a temporary one, removed after)");
  cmd->add_option("--ssd-gbps", opt->ssd_gbps, "Modelled SSD bandwidth, GB/s (--virtual)")
      ->capture_default_str();
  cmd->add_option("--dram-copy-us", opt->dram_copy_us,
                  "Modelled copy time of a DRAM-ready request, us (--virtual)")
      ->capture_default_str();
  cmd->add_option("--consumers", opt->consumers,
                  "Modelled consumers popping ready requests (--virtual; 1-65536)")
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Seed of the arrival sequence")->capture_default_str();
  cmd->add_flag("--virtual", opt->virtual_time,
                "Discrete-event virtual time of FC-MAS's queueing core instead of a real store");
  cmd->add_flag("--json", opt->json, "Print one JSON object with the results on the last line");
  cmd->callback([opt, exit_code] { *exit_code = RunSchedBench(*opt); });
}

}  // namespace flatcake::cli
