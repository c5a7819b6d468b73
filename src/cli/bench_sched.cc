// `flatcake bench sched`: FC-MAS against one FCFS queue on the same mixed stream of DRAM-ready
// and SSD-preparing restores.
//
// One seeded arrival sequence (Poisson arrivals, a DRAM-ready share, SSD sizes log-uniform in a
// range) is served twice, once per policy, by the real MasScheduler: a submitter thread releases
// requests at their arrival times, consumer threads pop ready requests and copy DRAM-ready ones
// (a modelled copy time), and a modelled SSD serves prefetches. The SSD is one device of the given
// bandwidth serving admitted prefetches one at a time in admission order, so both policies get
// the same SSD throughput and differ only in ordering. By default service takes real time (SSD
// transfers sleep on a device thread, DRAM copies spin on the consumer thread), so the
// scheduler's locks, condition variables and threads are exercised, and thread wake-up delays on
// a busy machine show in the figures; with --virtual it is a discrete-event run of the same
// queueing core (SimulateRestores), exact and instantaneous. Latency: arrival to the end of the
// consumer's service.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/store_flags.h"
#include "flatcake/gva.h"
#include "sched/mas_scheduler.h"
#include "sched/restore_queue.h"
#include "sched/restore_sim.h"

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
  double rate = 1000;  // arrivals per second
  double ssd_gbps = 4.0;
  double ssd_min_mib = 1;
  double ssd_max_mib = 16;
  double dram_copy_us = 50;
  double window_mib = 64;
  int consumers = 2;
  uint64_t seed = 1;
  bool virtual_time = false;
  bool json = false;

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
    if (!(dram_copy_us >= 0 && dram_copy_us <= 1e6)) {
      return Status::InvalidArgument("--dram-copy-us must be in [0, 1e6] (1 s)");
    }
    if (!(window_mib > 0 && window_mib <= 1048576)) {
      return Status::InvalidArgument("--window-mib must be in (0, 1048576] (1 TiB)");
    }
    // Real time runs one thread per consumer; virtual time only counts them.
    const int max_consumers = virtual_time ? 65536 : 256;
    if (consumers < 1 || consumers > max_consumers) {
      return Status::InvalidArgument("--consumers must be in [1, " + std::to_string(max_consumers) +
                                     "]" + (virtual_time ? "" : " (real time: one thread each)") +
                                     ", got " + std::to_string(consumers));
    }
    return Status::OK();
  }
  static constexpr uint64_t kMaxRequests = 10000000;
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

// Modelled SSD: one device thread serving prefetches FIFO; each takes bytes / bandwidth from the
// later of its submission and the end of the previous transfer (sleep_until on that running
// finish time, so oversleeping does not add up).
class SleepSsd : public PrefetchExecutor {
 public:
  explicit SleepSsd(double bytes_per_sec)
      : bytes_per_sec_(bytes_per_sec), thread_([this] { Run(); }) {}
  ~SleepSsd() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Prefetch(const RestoreRequest& r, std::function<void(Status)> done) override {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back({r.kv_bytes, std::chrono::steady_clock::now(), std::move(done)});
    }
    cv_.notify_one();
  }

 private:
  struct Job {
    uint64_t bytes;
    std::chrono::steady_clock::time_point submitted;
    std::function<void(Status)> done;
  };
  void Run() {
    using Clock = std::chrono::steady_clock;
    Clock::time_point device_free = Clock::now();
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      const auto transfer = std::chrono::nanoseconds(
          static_cast<int64_t>(static_cast<double>(job.bytes) * 1e9 / bytes_per_sec_));
      // The device starts a transfer when it has the request and the previous transfer is over,
      // not when this thread gets around to it: a late wake-up delays the completion callback
      // but does not slow the modelled device down.
      device_free = std::max(device_free, job.submitted) + transfer;
      std::this_thread::sleep_until(device_free);
      job.done(Status::OK());
      lock.lock();
    }
  }

  double bytes_per_sec_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

struct PolicyRun {
  std::vector<int64_t> dram_ns, ssd_ns;  // latencies
  int64_t makespan_ns = 0;               // stream start to last completion
  uint64_t peak_in_flight_bytes = 0;
};

Result<PolicyRun> RunSleep(SchedPolicy policy, const SchedBenchOptions& o,
                           const std::vector<RestoreRequest>& arrivals) {
  SleepSsd ssd(o.ssd_gbps * 1e9);
  MasSchedulerOptions so;
  so.sched = {policy, static_cast<uint64_t>(o.window_mib * 1048576.0)};
  FC_ASSIGN_OR_RETURN(std::unique_ptr<MasScheduler> sched, MasScheduler::Create(so, &ssd));
  PolicyRun run;
  std::mutex mu;
  std::condition_variable all_done;
  size_t finished = 0;
  int64_t last_done = 0;
  const auto copy = std::chrono::nanoseconds(static_cast<int64_t>(o.dram_copy_us * 1e3));
  std::vector<std::thread> consumers;
  for (int c = 0; c < o.consumers; ++c) {
    consumers.emplace_back([&] {
      while (std::optional<ReadyRequest> r = sched->PopReady()) {
        if (r->restore_class == RestoreClass::kDramReady) {
          // A copy occupies its thread: spin for the copy time rather than sleep (a sleep would
          // add a second scheduler wake-up per request that a real copy does not have).
          const auto until = std::chrono::steady_clock::now() + copy;
          while (std::chrono::steady_clock::now() < until) {
          }
        }
        const int64_t done = SteadyNowNs();
        std::lock_guard lock(mu);
        const int64_t latency = done - r->request.arrival_ns;
        (r->restore_class == RestoreClass::kDramReady ? run.dram_ns : run.ssd_ns)
            .push_back(latency);
        last_done = std::max(last_done, done);
        if (++finished == arrivals.size()) all_done.notify_one();
      }
    });
  }
  Status submit_status;
  const auto start = std::chrono::steady_clock::now();
  const int64_t start_ns = SteadyNowNs();
  for (const RestoreRequest& a : arrivals) {
    std::this_thread::sleep_until(start + std::chrono::nanoseconds(a.arrival_ns));
    RestoreRequest r = a;
    r.arrival_ns = kStampOnSubmit;  // stamped by the scheduler's clock
    submit_status = sched->Submit(r);
    if (!submit_status.ok()) break;
  }
  if (submit_status.ok()) {
    std::unique_lock lock(mu);
    all_done.wait(lock, [&] { return finished == arrivals.size(); });
  }
  (void)sched->Shutdown();
  for (auto& t : consumers) t.join();
  FC_RETURN_IF_ERROR(submit_status);
  run.makespan_ns = last_done - start_ns;
  run.peak_in_flight_bytes = sched->stats().peak_in_flight_bytes;
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

int RunSchedBench(const SchedBenchOptions& o) {
  auto bad_flags = [](const Status& s) { return ReportArgError("bench sched", s); };
  if (Status s = o.Validate(); !s.ok()) return bad_flags(s);
  // The stream's modelled length is known only once it is drawn: arrivals, and the work the SSD
  // and the consumers must get through, each bound how long a run is (real time) and how large
  // its timestamps grow (virtual time).
  const double expected_span_s = static_cast<double>(o.requests) / o.rate;
  const double max_span_s = o.virtual_time ? kMaxVirtualSpanS : kMaxRealSpanS;
  if (expected_span_s > max_span_s) {
    return bad_flags(Status::InvalidArgument(
        "--requests / --rate = " + Num(expected_span_s) + " s of arrivals, more than " +
        std::to_string(static_cast<int64_t>(max_span_s)) + " s" +
        (o.virtual_time ? "" : " of real time (use --virtual, or raise --rate)")));
  }
  const std::vector<RestoreRequest> arrivals = MakeArrivals(o);
  uint64_t ssd_bytes = 0, dram_requests = 0;
  for (const RestoreRequest& r : arrivals) {
    ssd_bytes += r.kv_bytes;
    dram_requests += r.kv_bytes == 0;
  }
  const double span_s = static_cast<double>(arrivals.back().arrival_ns) / 1e9;
  const double ssd_work_s = static_cast<double>(ssd_bytes) / (o.ssd_gbps * 1e9);
  // DRAM copies are spread over the consumers.
  const double copy_work_s =
      static_cast<double>(dram_requests) * o.dram_copy_us / 1e6 / o.consumers;
  if (span_s > max_span_s || ssd_work_s > max_span_s || copy_work_s > max_span_s) {
    return bad_flags(Status::InvalidArgument(
        "the stream models " + Num(span_s) + " s of arrivals, " + Num(ssd_work_s) +
        " s of SSD transfers and " + Num(copy_work_s) +
        " s of DRAM copies; each must be <= " + std::to_string(static_cast<int64_t>(max_span_s)) +
        " s" + (o.virtual_time ? "" : " in real time (use --virtual)")));
  }
  const double ssd_busy =
      static_cast<double>(ssd_bytes) / (o.ssd_gbps * 1e9) / std::max(span_s, 1e-9);
  const char* service = o.virtual_time ? "virtual-time" : "sleep-based";

  const auto wall_start = std::chrono::steady_clock::now();
  PolicyRun runs[2];
  const SchedPolicy policies[2] = {SchedPolicy::kMas, SchedPolicy::kFcfs};
  for (int i = 0; i < 2; ++i) {
    Result<PolicyRun> r =
        o.virtual_time ? RunVirtual(policies[i], o, arrivals) : RunSleep(policies[i], o, arrivals);
    if (!r.ok()) {
      std::fprintf(stderr, "flatcake bench sched: %s\n", r.status().ToString().c_str());
      return 1;
    }
    runs[i] = std::move(*r);
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  std::printf(
      "sched: %llu requests (%.0f%% DRAM-ready), %.0f arrivals/s over %.2f s, SSD %.2f GB/s "
      "modelled (%s service, one FIFO device, %.0f%% busy), SSD sizes %.1f-%.1f MiB log-uniform, "
      "window %.0f MiB, %d consumers, DRAM copy %.0f us, seed %llu\n",
      static_cast<unsigned long long>(o.requests), o.dram_share * 100, o.rate, span_s, o.ssd_gbps,
      service, ssd_busy * 100, o.ssd_min_mib, o.ssd_max_mib, o.window_mib, o.consumers,
      o.dram_copy_us, static_cast<unsigned long long>(o.seed));
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
  const double mas_p99 = PercentileMs(runs[0].dram_ns, 99);
  const double fcfs_p99 = PercentileMs(runs[1].dram_ns, 99);
  const double ratio = mas_p99 > 0 ? fcfs_p99 / mas_p99 : 0;
  std::printf("DRAM-ready P99: FCFS %.3f ms / FC-MAS %.3f ms = %.1fx (target >= 5x); wall %.2f s\n",
              fcfs_p99, mas_p99, ratio, wall_s);

  if (o.json) {
    nlohmann::json j;
    j["bench"] = "sched";
    j["service"] = service;
    j["requests"] = o.requests;
    j["dram_share"] = o.dram_share;
    j["rate_per_s"] = o.rate;
    j["ssd_gbps"] = o.ssd_gbps;
    j["ssd_busy"] = ssd_busy;
    j["window_mib"] = o.window_mib;
    j["consumers"] = o.consumers;
    j["dram_copy_us"] = o.dram_copy_us;
    j["seed"] = o.seed;
    const char* names[2] = {"mas", "fcfs"};
    for (int i = 0; i < 2; ++i) {
      const std::string n = names[i];
      j[n + "_dram_p50_ms"] = PercentileMs(runs[i].dram_ns, 50);
      j[n + "_dram_p99_ms"] = PercentileMs(runs[i].dram_ns, 99);
      j[n + "_ssd_p50_ms"] = PercentileMs(runs[i].ssd_ns, 50);
      j[n + "_ssd_p99_ms"] = PercentileMs(runs[i].ssd_ns, 99);
      j[n + "_ssd_max_ms"] = MaxMs(runs[i].ssd_ns);
      j[n + "_makespan_ms"] = static_cast<double>(runs[i].makespan_ns) / 1e6;
    }
    if (!o.virtual_time) {
      j["mas_peak_inflight_mib"] = static_cast<double>(runs[0].peak_in_flight_bytes) / 1048576.0;
    }
    j["fcfs_vs_mas_dram_p99"] = ratio;
    j["wall_s"] = wall_s;
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace

void RegisterSchedBench(CLI::App& bench, int* exit_code) {
  auto opt = std::make_shared<SchedBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "sched",
      "FC-MAS vs one FCFS queue on the same mixed stream of DRAM-ready and SSD restores: P50/P99 "
      "latency per class (modelled SSD and copy times); exits 2 on bad flags");
  cmd->add_option("--requests", opt->requests, "Requests in the stream")
      ->check(CLI::Range(uint64_t{1}, SchedBenchOptions::kMaxRequests))
      ->capture_default_str();
  cmd->add_option("--dram-share", opt->dram_share, "Fraction of DRAM-ready requests")
      ->capture_default_str();
  cmd->add_option("--rate", opt->rate,
                  "Arrivals per second, Poisson (1e-3 to 1e9; --requests / --rate at most 600 s "
                  "in real time)")
      ->capture_default_str();
  cmd->add_option("--ssd-gbps", opt->ssd_gbps, "Modelled SSD bandwidth, GB/s")
      ->capture_default_str();
  cmd->add_option("--ssd-min-mib", opt->ssd_min_mib, "Smallest SSD restore, MiB")
      ->capture_default_str();
  cmd->add_option("--ssd-max-mib", opt->ssd_max_mib,
                  "Largest SSD restore, MiB (sizes are log-uniform in between)")
      ->capture_default_str();
  cmd->add_option("--dram-copy-us", opt->dram_copy_us, "Copy time of a DRAM-ready request, us")
      ->capture_default_str();
  cmd->add_option("--window-mib", opt->window_mib, "FC-MAS prefetch window, MiB")
      ->capture_default_str();
  cmd->add_option("--consumers", opt->consumers,
                  "Consumer threads popping ready requests (1-256; up to 65536 with --virtual)")
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Seed of the arrival sequence")->capture_default_str();
  cmd->add_flag("--virtual", opt->virtual_time,
                "Discrete-event virtual time instead of sleeping (exact, instantaneous)");
  cmd->add_flag("--json", opt->json, "Print one JSON object with the results on the last line");
  cmd->callback([opt, exit_code] { *exit_code = RunSchedBench(*opt); });
}

}  // namespace flatcake::cli
