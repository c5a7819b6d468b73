// `flatcake soak --minutes N [--json]`: the soak (cli/soak.h, docs/reliability.md). This process
// runs `flatcake serve` (this binary) on a small durable pool in a temporary directory, and
// --clients client processes (this binary, `soak --client`) spread over --tenants tenants. While
// they run it
//  - samples the daemon's /proc every --sample-ms: RSS (VmRSS, RssAnon, RssShmem), descriptors,
//    threads;
//  - kills a random client with SIGKILL every --kill-every seconds on average (exponentially
//    distributed) and starts it again after 0 to 200 ms;
//  - once, at --restart-at of the run, puts canary blocks on SSD through its own client, kills
//    the daemon with SIGKILL, stops the clients (SIGSTOP), starts the daemon again on the same
//    pool and restores the canaries before the clients go on (SIGCONT): every one must come back
//    byte-exact (a process kill loses nothing published, whatever the sync mode);
//  - sorts the clients' errors into expected ones (the daemon away: from its kill until
//    kRestartGrace after the clients go on; a put refused for space, every scope pinned) and
//    unexpected ones (anything else, a client that exits by itself, a daemon that dies by
//    itself).
// At the end the clients get SIGTERM (they report their last counters), the soak's own client
// disconnects, and the daemon's descriptors must come back to what they were before any client
// connected (kFdSlack more at most); then the daemon gets SIGTERM and must exit 0.
// Exit 0 when no byte was wrong, no error unexpected, no canary lost, the descriptors came back,
// the restart and at least one kill happened, and the RSS was flat where it is judged (runs of
// 2 minutes or more); 1 otherwise; 2 on bad flags.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/report_format.h"
#include "cli/soak.h"
#include "cli/soak_report.h"
#include "cli/store_flags.h"
#include "flatcake/clock.h"
#include "serve/remote_store.h"
#include "util/block_content.h"
#include "util/child_process.h"
#include "util/temp_dir.h"

namespace flatcake::cli {
namespace {

using soak::ClientCounters;
using soak::ProcSample;

constexpr int64_t kNsPerS = 1'000'000'000;
// After the clients go on again (the restarted daemon listening), how long their calls may still
// fail for its absence (each reconnects on its next call, at most once per 50 ms).
constexpr int64_t kRestartGrace = 3 * kNsPerS;
// Descriptors the daemon may hold at the end beyond those it held before any client came.
constexpr uint32_t kFdSlack = 2;
constexpr uint64_t kCanaries = 64;
constexpr uint64_t kCanaryNs = 0x50AC000;
constexpr double kMinJudgedSeconds = 120;

struct SoakArgs {
  double minutes = 1;
  bool json = false;
  uint32_t clients = 4;
  uint32_t tenants = 2;
  uint64_t seed = 0;
  double kill_every_s = 3;
  double restart_at = 0.25;
  uint32_t sample_ms = 0;
  uint64_t dram_bytes = 32 * kMiB;
  uint64_t ssd_bytes = 128 * kMiB;
  std::string dir;
  // The hidden client mode.
  bool client = false;
  soak::ClientArgs client_args;
};

// One client slot: the process running now, what earlier ones in the slot did.
struct Slot {
  uint32_t id = 0;
  std::string tenant;
  std::unique_ptr<Child> child;
  ClientCounters current;    // the running process's last report
  int64_t start_at_ns = -1;  // when to start the next process (-1: one runs)
};

struct ErrorTally {
  std::map<std::string, uint64_t> expected, unexpected;
  std::vector<std::string> unexpected_samples;  // the first few, as the clients said them
  uint64_t expected_total() const { return Sum(expected); }
  uint64_t unexpected_total() const { return Sum(unexpected); }
  void Unexpected(const std::string& kind, const std::string& text) {
    ++unexpected[kind];
    if (unexpected_samples.size() < 20) unexpected_samples.push_back(text);
  }
  static uint64_t Sum(const std::map<std::string, uint64_t>& m) {
    uint64_t n = 0;
    for (const auto& [k, v] : m) n += v;
    return n;
  }
};

struct CanaryFigures {
  uint64_t published = 0, served_before = 0, recovered = 0, missing = 0, wrong_bytes = 0;
};

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t CountOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct DaemonLog;

class Soak {
 public:
  explicit Soak(const SoakArgs& a) : a_(a), rng_(a.seed) {}
  int Main();

 private:
  Status Setup();
  Status StartDaemon();
  void StartClient(Slot& s);
  // Reads what `s`'s process said; `to_end`: until its stdout closes (it has exited).
  void Drain(Slot& s, bool to_end);
  void HandleLine(Slot& s, const std::string& line);
  // The process in `s` is gone (exit status `status`, `killed`: by us): its counters are
  // banked and the next one is scheduled.
  void Retire(Slot& s, int status, bool killed);
  void KillOne();
  Status RestartDaemon();
  Status PutCanaries();
  void CheckCanaries();
  void Sample();
  void Finish();
  void AddDaemonStats(const StoreStats& st);
  // Prints the report (and the JSON line); whether the soak passed.
  bool Report(double run_s);
  // Report's parts: what failed (empty: the soak passed), the text and the JSON line.
  std::vector<std::string> Failures(const soak::RssVerdict& rss) const;
  void PrintText(const soak::RssVerdict& rss, const DaemonLog& dlog,
                 const std::vector<std::string>& failures) const;
  void PrintJson(const soak::RssVerdict& rss, const DaemonLog& dlog,
                 const std::vector<std::string>& failures) const;
  // How long the daemon was away at its restart (0 before it came back).
  double DaemonDownMs() const {
    return back_ns_ >= 0 ? static_cast<double>(back_ns_ - away_from_ns_) / 1e6 : 0.0;
  }
  double Elapsed() const { return static_cast<double>(SteadyNowNs() - t0_) / kNsPerS; }

  const SoakArgs a_;
  std::mt19937_64 rng_;
  std::unique_ptr<TempDir> tmp_;
  std::string exe_, socket_, log_;
  int64_t t0_ = 0, end_ns_ = 0;
  std::unique_ptr<Child> daemon_;
  uint32_t daemon_gen_ = 0;
  std::unique_ptr<serve::RemoteStore> canary_store_;
  std::vector<Slot> slots_;
  ClientCounters banked_;
  ErrorTally errors_;
  std::vector<std::string> wrong_samples_;
  std::vector<ProcSample> samples_;
  CanaryFigures canary_;
  // The daemon's absence: from its kill to its listening again (-1: not yet).
  int64_t away_from_ns_ = -1, back_ns_ = -1;
  uint64_t kills_ = 0, client_starts_ = 0, daemon_restarts_ = 0;
  uint32_t fd_start_ = 0, fd_end_ = 0, fd_max_ = 0, threads_max_ = 0;
  int daemon_exit_ = -1;
  uint64_t scopes_reclaimed_dram_ = 0, scopes_reclaimed_ssd_ = 0, checksum_mismatches_ = 0,
           io_errors_ = 0, recovered_blocks_ = 0;
  std::string fatal_;
};

Status Soak::Setup() {
  char exe[4096];
  const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) return Status::FromErrno(errno, "readlink /proc/self/exe");
  exe_.assign(exe, static_cast<size_t>(len));
  tmp_ = std::make_unique<TempDir>("flatcake-soak", a_.dir);
  if (!tmp_->ok()) return Status::IOError("cannot create a directory under --dir");
  socket_ = tmp_->File("sock");
  log_ = tmp_->File("daemon.log");
  for (uint32_t i = 0; i < a_.clients; ++i) {
    Slot s;
    s.id = i;
    s.tenant = "soak-" + std::to_string(i % a_.tenants);
    slots_.push_back(std::move(s));
  }
  return Status::OK();
}

Status Soak::StartDaemon() {
  const std::vector<std::string> args = {exe_,
                                         "serve",
                                         "--socket",
                                         socket_,
                                         "--dram-bytes",
                                         std::to_string(a_.dram_bytes),
                                         "--ssd-dir",
                                         tmp_->path(),
                                         "--ssd-bytes",
                                         std::to_string(a_.ssd_bytes),
                                         "--ssd-file-bytes",
                                         std::to_string(a_.ssd_bytes / 8)};
  const size_t before = CountOf(ReadWholeFile(log_), "listening on");
  daemon_ = std::make_unique<Child>(args, log_);
  ++daemon_gen_;
  const int64_t deadline = SteadyNowNs() + 60 * kNsPerS;
  while (CountOf(ReadWholeFile(log_), "listening on") == before) {
    if (std::optional<int> st = daemon_->TryWait()) {
      // The log goes with the temporary directory: its last lines go in the message.
      const std::string log = ReadWholeFile(log_);
      return Status::Aborted("the daemon exited with status " + std::to_string(*st) + ": " +
                             log.substr(log.size() - std::min<size_t>(log.size(), 600)));
    }
    if (SteadyNowNs() > deadline) return Status::Aborted("the daemon did not start within 60 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Status::OK();
}

void Soak::StartClient(Slot& s) {
  const std::vector<std::string> args = {exe_,
                                         "soak",
                                         "--client",
                                         "--socket",
                                         socket_,
                                         "--tenant",
                                         s.tenant,
                                         "--slot",
                                         std::to_string(s.id),
                                         "--seed",
                                         std::to_string(a_.seed * 1000003 + client_starts_)};
  s.child = std::make_unique<Child>(args, tmp_->File("clients.log"));
  s.current = {};
  s.start_at_ns = -1;
  ++client_starts_;
}

void Soak::HandleLine(Slot& s, const std::string& line) {
  if (line.rfind("S ", 0) == 0) {
    const auto j = nlohmann::json::parse(line.substr(2), nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) s.current = ClientCounters::FromJson(j);
    return;
  }
  if (line.rfind("W ", 0) == 0) {
    if (wrong_samples_.size() < 20) wrong_samples_.push_back(line.substr(2));
    return;
  }
  if (line.rfind("E ", 0) != 0) return;
  std::istringstream in(line.substr(2));
  int64_t t_ns = 0;
  std::string op, code;
  in >> t_ns >> op >> code;
  const std::string kind = op + ":" + code;
  const bool daemon_away = away_from_ns_ >= 0 && t_ns >= away_from_ns_ &&
                           (back_ns_ < 0 || t_ns <= back_ns_ + kRestartGrace);
  if (daemon_away) {
    ++errors_.expected["daemon_restart " + kind];
  } else if (op == "put" && code == StatusCodeName(StatusCode::kNoSpace)) {
    ++errors_.expected["store_full " + kind];
  } else {
    errors_.Unexpected(kind, "client " + std::to_string(s.id) + ": " + line);
  }
}

void Soak::Drain(Slot& s, bool to_end) {
  if (s.child == nullptr) return;
  while (std::optional<std::string> line = s.child->PollLine(to_end ? 1000 : 0)) {
    HandleLine(s, *line);
  }
}

void Soak::Retire(Slot& s, int status, bool killed) {
  Drain(s, /*to_end=*/true);
  banked_.Add(s.current);
  s.current = {};
  if (!killed && status != 0) {
    errors_.Unexpected("client_exit:" + std::to_string(status),
                       "client " + std::to_string(s.id) + " exited with status " +
                           std::to_string(status) + " (see " + tmp_->File("clients.log") + ")");
  }
  s.child.reset();
  s.start_at_ns = SteadyNowNs() + static_cast<int64_t>(rng_() % 200) * 1'000'000;
}

void Soak::KillOne() {
  std::vector<Slot*> running;
  for (Slot& s : slots_) {
    if (s.child != nullptr) running.push_back(&s);
  }
  if (running.empty()) return;
  Slot& s = *running[rng_() % running.size()];
  s.child->Kill(SIGKILL);
  const int status = s.child->Wait();
  ++kills_;
  Retire(s, status, /*killed=*/status == 128 + SIGKILL);
}

void Soak::AddDaemonStats(const StoreStats& st) {
  scopes_reclaimed_dram_ += st.dram.scopes_reclaimed;
  scopes_reclaimed_ssd_ += st.ssd.scopes_reclaimed;
  checksum_mismatches_ += st.checksum_mismatches;
  io_errors_ += st.io_errors;
  recovered_blocks_ += st.recovered_blocks;
}

Status Soak::PutCanaries() {
  const std::vector<Key> keys = MakeKeys(kCanaryNs, 0, kCanaries);
  HostBlocks src(soak::kLayouts[0], kCanaries);
  src.Fill(keys);
  WriteHints h;
  h.session = "soak-canary";
  h.force_medium = MediaType::kSsd;
  FC_ASSIGN_OR_RETURN(PutResult put, canary_store_->Put(keys, src.layout, src.buffers(), h));
  canary_.published = put.written + put.already_present;
  HostBlocks dst(soak::kLayouts[0], kCanaries);
  FC_ASSIGN_OR_RETURN(GetResult got, canary_store_->Get(keys, dst.layout, dst.buffers()));
  canary_.served_before = got.hits;
  return Status::OK();
}

void Soak::CheckCanaries() {
  const std::vector<Key> keys = MakeKeys(kCanaryNs, 0, kCanaries);
  // The soak's own client reconnects on a call, at most once per reconnect_interval.
  const int64_t deadline = SteadyNowNs() + 10 * kNsPerS;
  while (canary_store_->Exists(keys) == 0 && !canary_store_->connected() &&
         SteadyNowNs() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  HostBlocks dst(soak::kLayouts[0], kCanaries);
  Result<GetResult> got = canary_store_->Get(keys, dst.layout, dst.buffers());
  if (!got.ok()) {
    errors_.Unexpected("canary_restore:" + std::string(StatusCodeName(got.status().code())),
                       "restoring the canaries after the restart: " + got.status().ToString());
    canary_.missing = kCanaries;
    return;
  }
  std::vector<uint8_t> want(dst.layout.block_bytes());
  for (uint64_t i = 0; i < kCanaries; ++i) {
    if (!got->found[i]) continue;
    ++canary_.recovered;
    FillBlock(keys[i], want.data(), want.size());
    for (size_t b = 0; b < want.size(); ++b) canary_.wrong_bytes += want[b] != dst.block(i)[b];
  }
  canary_.missing = canary_.published - std::min(canary_.published, canary_.recovered);
}

Status Soak::RestartDaemon() {
  Status put = PutCanaries();
  if (!put.ok()) {
    errors_.Unexpected("canary_put:" + std::string(StatusCodeName(put.code())),
                       "putting the canaries: " + put.ToString());
  }
  AddDaemonStats(canary_store_->GetStats());
  Sample();
  away_from_ns_ = SteadyNowNs();
  daemon_->Kill(SIGKILL);
  daemon_->Wait();
  // The clients are stopped (their connections are dead already) until the canaries are read
  // back, so that what the new daemon serves them is what it recovered, not what is left of it
  // after the clients' writes made it reclaim.
  for (Slot& s : slots_) {
    if (s.child != nullptr) s.child->Kill(SIGSTOP);
  }
  const Status started = StartDaemon();
  if (started.ok()) {
    ++daemon_restarts_;
    CheckCanaries();
  }
  for (Slot& s : slots_) {
    if (s.child != nullptr) s.child->Kill(SIGCONT);
  }
  back_ns_ = SteadyNowNs();
  return started;
}

void Soak::Sample() {
  Result<ProcSample> s = soak::SampleProc(daemon_->pid());
  if (!s.ok()) return;
  s->t_s = Elapsed();
  s->daemon = daemon_gen_;
  fd_max_ = std::max(fd_max_, s->fds);
  threads_max_ = std::max(threads_max_, s->threads);
  samples_.push_back(*s);
}

void Soak::Finish() {
  for (Slot& s : slots_) {
    if (s.child != nullptr) s.child->Kill(SIGTERM);
  }
  for (Slot& s : slots_) {
    if (s.child == nullptr) continue;
    const int status = s.child->Wait(std::chrono::milliseconds(20000));
    // One started a moment ago may not have set its handler yet: SIGTERM's default ends it.
    Retire(s, status, /*killed=*/status == 128 + SIGTERM);
  }
  AddDaemonStats(canary_store_->GetStats());
  canary_store_.reset();
  // The clients' connections close on the daemon's threads; give them a moment.
  const int64_t deadline = SteadyNowNs() + 10 * kNsPerS;
  for (;;) {
    Result<ProcSample> s = soak::SampleProc(daemon_->pid());
    if (s.ok()) fd_end_ = s->fds;
    if (!s.ok() || fd_end_ <= fd_start_ || SteadyNowNs() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Sample();
  daemon_->Kill(SIGTERM);
  daemon_exit_ = daemon_->Wait(std::chrono::milliseconds(30000));
}

int Soak::Main() {
  if (Status st = Setup(); !st.ok()) return ReportStatus("soak", st);
  const double run_s = a_.minutes * 60;
  const uint32_t sample_ms =
      a_.sample_ms != 0 ? a_.sample_ms
                        : static_cast<uint32_t>(std::clamp(run_s * 1000 / 200, 100.0, 1000.0));
  const double kill_mean_s = std::min(a_.kill_every_s, run_s / 10);
  std::exponential_distribution<double> next_kill_s(1 / kill_mean_s);

  t0_ = SteadyNowNs();
  if (Status st = StartDaemon(); !st.ok()) return ReportStatus("soak", st);
  Result<ProcSample> idle = soak::SampleProc(daemon_->pid());
  if (!idle.ok()) return ReportStatus("soak", idle.status());
  fd_start_ = idle->fds;
  Sample();
  serve::ClientOptions co;
  co.client_name = "soak canary";
  co.reconnect_interval = std::chrono::milliseconds(50);
  auto canary = serve::RemoteStore::Connect(socket_, "soak-canary", co);
  if (!canary.ok()) return ReportStatus("soak", canary.status());
  canary_store_ = std::move(*canary);
  for (Slot& s : slots_) StartClient(s);

  end_ns_ = t0_ + static_cast<int64_t>(run_s * kNsPerS);
  const int64_t restart_ns = t0_ + static_cast<int64_t>(a_.restart_at * run_s * kNsPerS);
  int64_t next_sample = SteadyNowNs() + int64_t{sample_ms} * 1'000'000;
  int64_t next_kill = SteadyNowNs() + static_cast<int64_t>(next_kill_s(rng_) * kNsPerS);
  while (SteadyNowNs() < end_ns_ && fatal_.empty()) {
    for (Slot& s : slots_) {
      if (s.child == nullptr) continue;
      Drain(s, false);
      if (std::optional<int> st = s.child->TryWait()) Retire(s, *st, /*killed=*/false);
    }
    const int64_t now = SteadyNowNs();
    for (Slot& s : slots_) {
      if (s.child == nullptr && now >= s.start_at_ns) StartClient(s);
    }
    if (std::optional<int> st = daemon_->TryWait()) {
      fatal_ = "the daemon exited by itself with status " + std::to_string(*st);
      errors_.Unexpected("daemon_exit", fatal_ + " (see " + log_ + ")");
      break;
    }
    if (now >= next_sample) {
      Sample();
      next_sample = now + int64_t{sample_ms} * 1'000'000;
    }
    if (now >= next_kill) {
      KillOne();
      next_kill = SteadyNowNs() + static_cast<int64_t>(next_kill_s(rng_) * kNsPerS);
    }
    if (daemon_restarts_ == 0 && now >= restart_ns) {
      if (Status st = RestartDaemon(); !st.ok()) {
        fatal_ = "restarting the daemon: " + st.ToString();
        errors_.Unexpected("daemon_restart", fatal_);
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (fatal_.empty()) Finish();
  return Report(run_s) ? 0 : 1;
}

// What the daemons logged: warnings and errors by what they say (digits as '#'), and what the
// connections that ended released.
struct DaemonLog {
  uint64_t warnings = 0, errors = 0, released_reservations = 0, released_pins = 0;
  std::map<std::string, uint64_t> lines;  // warning and error lines, normalized
};

DaemonLog ParseDaemonLog(const std::string& text) {
  DaemonLog d;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (const size_t at = line.find("; released "); at != std::string::npos) {
      unsigned long long w = 0, p = 0;
      if (std::sscanf(line.c_str() + at, "; released %llu reservations, %llu pins", &w, &p) == 2) {
        d.released_reservations += w;
        d.released_pins += p;
      }
    }
    const bool warning = line.find(" flatcake serve W: ") != std::string::npos;
    const bool error = line.find(" flatcake serve E: ") != std::string::npos;
    if (!warning && !error) continue;
    (warning ? d.warnings : d.errors) += 1;
    std::string norm;
    for (size_t i = line.find(": ") + 2; i < line.size() && norm.size() < 120; ++i) {
      const bool digit = line[i] >= '0' && line[i] <= '9';
      if (!digit) {
        norm += line[i];
      } else if (norm.empty() || norm.back() != '#') {
        norm += '#';
      }
    }
    ++d.lines[(warning ? "W " : "E ") + norm];
  }
  return d;
}

double MiB(uint64_t b) { return static_cast<double>(b) / (1 << 20); }

bool Soak::Report(double run_s) {
  const soak::RssVerdict rss = soak::JudgeRss(samples_, run_s, kMinJudgedSeconds);
  const DaemonLog dlog = ParseDaemonLog(ReadWholeFile(log_));
  const std::vector<std::string> failures = Failures(rss);
  PrintText(rss, dlog, failures);
  if (a_.json) PrintJson(rss, dlog, failures);
  return failures.empty();
}

std::vector<std::string> Soak::Failures(const soak::RssVerdict& rss) const {
  const ClientCounters& c = banked_;
  std::vector<std::string> failures;
  if (!fatal_.empty()) failures.push_back(fatal_);
  if (c.wrong_bytes != 0) failures.push_back("wrong bytes");
  if (c.corrupt != 0) failures.push_back("blocks failed their checksum");
  if (errors_.unexpected_total() != 0) failures.push_back("unexpected errors");
  if (daemon_restarts_ != 1) failures.push_back("the daemon was not restarted");
  if (kills_ == 0) failures.push_back("no client was killed");
  if (canary_.missing != 0 || canary_.wrong_bytes != 0) failures.push_back("canaries lost");
  if (fd_end_ > fd_start_ + kFdSlack) failures.push_back("descriptors leaked");
  if (daemon_exit_ != 0) failures.push_back("the daemon did not exit 0 on SIGTERM");
  if (rss.judged && !rss.flat) failures.push_back("RSS not flat");
  return failures;
}

void Soak::PrintText(const soak::RssVerdict& rss, const DaemonLog& dlog,
                     const std::vector<std::string>& failures) const {
  const ClientCounters& c = banked_;
  const bool passed = failures.empty();
  const double down_ms = DaemonDownMs();
  std::printf("soak: %.2f min, %u clients over %u tenants, seed %lu\n", a_.minutes, a_.clients,
              a_.tenants, static_cast<unsigned long>(a_.seed));
  std::printf(
      "ops: put %lu (%lu blocks: %lu written, %lu present), lookup %lu (%lu keys, %lu hits), "
      "restore %lu (%lu keys, %lu hits), cancelled %lu\n",
      static_cast<unsigned long>(c.puts), static_cast<unsigned long>(c.put_blocks),
      static_cast<unsigned long>(c.put_written), static_cast<unsigned long>(c.put_present),
      static_cast<unsigned long>(c.lookups), static_cast<unsigned long>(c.lookup_keys),
      static_cast<unsigned long>(c.lookup_hits), static_cast<unsigned long>(c.restores),
      static_cast<unsigned long>(c.restore_keys), static_cast<unsigned long>(c.restore_hits),
      static_cast<unsigned long>(c.restores_cancelled));
  std::printf("bytes verified %lu, wrong bytes %lu (%lu blocks), checksum misses %lu\n",
              static_cast<unsigned long>(c.bytes_verified),
              static_cast<unsigned long>(c.wrong_bytes), static_cast<unsigned long>(c.wrong_blocks),
              static_cast<unsigned long>(c.corrupt));
  std::printf("errors: expected %lu, unexpected %lu\n",
              static_cast<unsigned long>(errors_.expected_total()),
              static_cast<unsigned long>(errors_.unexpected_total()));
  for (const auto& [kind, n] : errors_.expected) {
    std::printf("  expected   %-40s %lu\n", kind.c_str(), static_cast<unsigned long>(n));
  }
  for (const auto& [kind, n] : errors_.unexpected) {
    std::printf("  UNEXPECTED %-40s %lu\n", kind.c_str(), static_cast<unsigned long>(n));
  }
  for (const std::string& s : errors_.unexpected_samples) std::printf("    %s\n", s.c_str());
  for (const std::string& s : wrong_samples_) std::printf("  wrong block %s\n", s.c_str());
  std::printf(
      "kills %lu, client starts %lu, daemon restarts %lu (down %.0f ms); canaries: %lu "
      "published, %lu served before, %lu recovered, %lu missing, %lu wrong bytes\n",
      static_cast<unsigned long>(kills_), static_cast<unsigned long>(client_starts_),
      static_cast<unsigned long>(daemon_restarts_), down_ms,
      static_cast<unsigned long>(canary_.published),
      static_cast<unsigned long>(canary_.served_before),
      static_cast<unsigned long>(canary_.recovered), static_cast<unsigned long>(canary_.missing),
      static_cast<unsigned long>(canary_.wrong_bytes));
  std::printf(
      "daemon RSS: start %.1f MiB, max %.1f MiB, end %.1f MiB; last half (%.0f-%.0f s, %lu "
      "samples): slope %.1f KiB/min (anon %.1f KiB/min), growth %.2f MiB, bound %.2f MiB: %s\n",
      MiB(rss.start_bytes), MiB(rss.max_bytes), MiB(rss.end_bytes), rss.from_s, rss.to_s,
      static_cast<unsigned long>(rss.samples), rss.slope_bytes_per_s * 60 / 1024,
      rss.anon_slope_bytes_per_s * 60 / 1024, rss.growth_bytes / (1 << 20),
      rss.bound_bytes / (1 << 20),
      !rss.judged ? "not judged (run under 2 minutes)"
      : rss.flat  ? "flat"
                  : "NOT FLAT");
  std::printf("daemon fds: %u idle at start, %u at end (max %u); threads max %u\n", fd_start_,
              fd_end_, fd_max_, threads_max_);
  std::printf(
      "daemon: scopes reclaimed DRAM %lu SSD %lu, checksum mismatches %lu, I/O errors %lu, "
      "recovered blocks %lu; log: %lu warnings, %lu errors, released %lu reservations and %lu "
      "pins of ended connections; exit %d on SIGTERM\n",
      static_cast<unsigned long>(scopes_reclaimed_dram_),
      static_cast<unsigned long>(scopes_reclaimed_ssd_),
      static_cast<unsigned long>(checksum_mismatches_), static_cast<unsigned long>(io_errors_),
      static_cast<unsigned long>(recovered_blocks_), static_cast<unsigned long>(dlog.warnings),
      static_cast<unsigned long>(dlog.errors),
      static_cast<unsigned long>(dlog.released_reservations),
      static_cast<unsigned long>(dlog.released_pins), daemon_exit_);
  for (const auto& [line, n] : dlog.lines) {
    std::printf("  daemon log %5lu x %s\n", static_cast<unsigned long>(n), line.c_str());
  }
  std::string why;
  for (const std::string& f : failures) why += (why.empty() ? "" : "; ") + f;
  std::printf("soak %s%s%s\n", passed ? "passed" : "FAILED", passed ? "" : ": ", why.c_str());
}

void Soak::PrintJson(const soak::RssVerdict& rss, const DaemonLog& dlog,
                     const std::vector<std::string>& failures) const {
  const ClientCounters& c = banked_;
  const bool passed = failures.empty();
  const double down_ms = DaemonDownMs();
  nlohmann::json samples = nlohmann::json::array();
  const size_t stride = std::max<size_t>(1, (samples_.size() + 239) / 240);
  for (size_t i = 0; i < samples_.size(); i += stride) {
    const ProcSample& s = samples_[i];
    samples.push_back(
        {std::round(s.t_s * 10) / 10, s.daemon, s.rss_bytes, s.anon_bytes, s.fds, s.threads});
  }
  nlohmann::json log_lines = nlohmann::json::object();
  for (const auto& [line, n] : dlog.lines) log_lines[line] = n;
  nlohmann::json j = {
      {"soak",
       {{"minutes", a_.minutes},
        {"seconds", Elapsed()},
        {"clients", a_.clients},
        {"tenants", a_.tenants},
        {"seed", a_.seed}}},
      {"passed", passed},
      {"failures", failures},
      {"ops",
       {{"put", c.puts},
        {"lookup", c.lookups},
        {"restore", c.restores},
        {"restore_cancelled", c.restores_cancelled}}},
      {"blocks", c.ToJson()},
      {"bytes_verified", c.bytes_verified},
      {"wrong_bytes", c.wrong_bytes},
      {"wrong_blocks", c.wrong_blocks},
      {"checksum_misses", c.corrupt},
      {"unexpected_errors", errors_.unexpected_total()},
      {"expected_errors", errors_.expected_total()},
      {"errors",
       {{"expected", errors_.expected},
        {"unexpected", errors_.unexpected},
        {"unexpected_samples", errors_.unexpected_samples}}},
      {"kills", kills_},
      {"client_starts", client_starts_},
      {"client_restarts", client_starts_ - a_.clients},
      {"daemon_restarts", daemon_restarts_},
      {"daemon_down_ms", down_ms},
      {"canary",
       {{"published", canary_.published},
        {"served_before", canary_.served_before},
        {"recovered", canary_.recovered},
        {"missing", canary_.missing},
        {"wrong_bytes", canary_.wrong_bytes}}},
      {"rss",
       {{"start_bytes", rss.start_bytes},
        {"max_bytes", rss.max_bytes},
        {"end_bytes", rss.end_bytes},
        {"window_s", {rss.from_s, rss.to_s}},
        {"window_samples", rss.samples},
        {"slope_bytes_per_s", rss.slope_bytes_per_s},
        {"anon_slope_bytes_per_s", rss.anon_slope_bytes_per_s},
        {"growth_bytes", rss.growth_bytes},
        {"bound_bytes", rss.bound_bytes},
        {"judged", rss.judged},
        {"flat", rss.flat}}},
      {"fds",
       {{"idle_start", fd_start_},
        {"end", fd_end_},
        {"max", fd_max_},
        {"leak", fd_end_ > fd_start_ + kFdSlack}}},
      {"threads_max", threads_max_},
      {"daemon",
       {{"scopes_reclaimed_dram", scopes_reclaimed_dram_},
        {"scopes_reclaimed_ssd", scopes_reclaimed_ssd_},
        {"checksum_mismatches", checksum_mismatches_},
        {"io_errors", io_errors_},
        {"recovered_blocks", recovered_blocks_},
        {"exit_on_sigterm", daemon_exit_},
        {"log_warnings", dlog.warnings},
        {"log_errors", dlog.errors},
        {"log_lines", log_lines},
        {"released_reservations", dlog.released_reservations},
        {"released_pins", dlog.released_pins}}},
      {"samples_columns", {"t_s", "daemon", "rss_bytes", "anon_bytes", "fds", "threads"}},
      {"samples", samples}};
  std::printf("%s\n", j.dump().c_str());
}

int RunSoak(SoakArgs a) {
  if (a.client) return soak::RunClient(a.client_args);
  if (!(a.minutes > 0) || a.minutes > 7 * 24 * 60) {
    return ReportArgError("soak", Status::InvalidArgument("--minutes must be in (0, 10080]"));
  }
  if (!(a.kill_every_s > 0)) {
    return ReportArgError("soak", Status::InvalidArgument("--kill-every must be above 0"));
  }
  if (!(a.restart_at > 0) || a.restart_at > 0.5) {
    return ReportArgError("soak", Status::InvalidArgument("--restart-at must be in (0, 0.5]"));
  }
  if (a.ssd_bytes < 8 * kMiB || a.ssd_bytes % (8 * 4 * kKiB) != 0) {
    return ReportArgError(
        "soak", Status::InvalidArgument("--ssd-bytes must be at least 8 MiB and a multiple of "
                                        "32 KiB (8 pool files of whole 4 KiB pages)"));
  }
  if (a.dram_bytes < 4 * kMiB) {
    return ReportArgError("soak", Status::InvalidArgument("--dram-bytes must be at least 4 MiB"));
  }
  if (a.seed == 0) a.seed = static_cast<uint64_t>(SteadyNowNs()) % 1000000007 + 1;
  ::signal(SIGPIPE, SIG_IGN);
  Soak soak(a);
  return soak.Main();
}

}  // namespace

void RegisterSoakCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<SoakArgs>();
  CLI::App* cmd = app.add_subcommand(
      "soak",
      "Mixed traffic through a `flatcake serve` daemon for --minutes, clients killed and "
      "restarted at random, one daemon restart; reports the daemon's RSS, descriptors, errors "
      "and wrong bytes; exits 1 on any wrong byte, unexpected error or leak");
  cmd->add_option("--minutes", a->minutes, "How long to run (fractions allowed: 0.2 = 12 s)")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object on the last line");
  cmd->add_option("--clients", a->clients, "Client processes")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  cmd->add_option("--tenants", a->tenants, "Tenants the clients are spread over")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the schedule and the clients (0: from the clock)")
      ->capture_default_str();
  cmd->add_option("--kill-every", a->kill_every_s,
                  "Mean seconds between client kills (at most a tenth of the run)")
      ->capture_default_str();
  cmd->add_option("--restart-at", a->restart_at,
                  "When the daemon is killed and restarted, as a fraction of the run (<= 0.5)")
      ->capture_default_str();
  cmd->add_option("--sample-ms", a->sample_ms,
                  "Milliseconds between samples of the daemon (0: the run / 200, in [100, 1000])")
      ->check(CLI::Range(0u, 60000u))
      ->capture_default_str();
  const auto size = CLI::AsSizeValue(false);
  cmd->add_option("--dram-bytes", a->dram_bytes, "The daemon's DRAM arena")
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--ssd-bytes", a->ssd_bytes, "The daemon's durable SSD pool (8 files)")
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--dir", a->dir,
                  "Where the temporary pool goes (default: $TMPDIR, else /tmp); removed "
                  "afterwards");
  // The client processes the soak starts (not for people).
  cmd->add_flag("--client", a->client)->group("");
  cmd->add_option("--socket", a->client_args.socket)->group("");
  cmd->add_option("--tenant", a->client_args.tenant)->group("");
  cmd->add_option("--slot", a->client_args.slot)->group("");
  cmd->callback([a, exit_code] {
    SoakArgs args = *a;
    args.client_args.seed = args.seed;
    *exit_code = RunSoak(args);
  });
}

}  // namespace flatcake::cli
