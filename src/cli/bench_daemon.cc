// `flatcake bench daemon`: what going through the node daemon costs (issue 21's two targets).
//
// One daemon is started in this process (Daemon::Start on a temporary socket), its store on a
// temporary SSD pool (under --ssd-dir) and a DRAM arena. One session of --bytes is written
// through a client (RemoteStore) to each medium. Then:
//  - Restore bandwidth, per medium: the same keys restored into the same destination by the
//    embedded store (the daemon's own FlatStore, Daemon::store(), whose Restore is the embedded
//    path; keys mapped to the tenant's stored keys) and by the client through the daemon
//    (RemoteStore::Restore: PinRead, the reads in this process, Unpin). Both read the same bytes
//    of the same pool files, O_DIRECT where the pool uses it (so neither has a warm page cache),
//    with the same engine kind, workers, queue depth, window and read size; rounds alternate
//    which goes first and the medians are reported, daemon_vs_embedded = daemon / embedded.
//    Every restored byte is compared with FillBlock's content.
//  - Lookup latency: --clients child processes (this binary, spawned with the hidden
//    --lookup-client mode, so no fork of this multithreaded process runs anything but exec)
//    each do --keys-key Lookups of stored keys back to back for --duration-ms, starting together;
//    every call's round trip is gathered and the P50 and P99 over all of them reported.
// Exit 1 when a restored byte is wrong, a stored key is missed or a client fails; 2 on bad flags.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/report_format.h"
#include "cli/store_flags.h"
#include "flatcake/clock.h"
#include "serve/daemon.h"
#include "serve/remote_store.h"
#include "serve/serve_log.h"
#include "serve/tenants.h"
#include "store/flat_store.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

extern char** environ;

namespace flatcake::cli {
namespace {

constexpr const char* kTenant = "bench";
constexpr uint64_t kKeyNs[2] = {0xDA, 0x55D};  // the DRAM and the SSD session's keys

struct DaemonBenchArgs {
  uint64_t bytes = 1 * kGiB;
  uint32_t layers = 32;
  uint32_t planes = 2;
  uint64_t slice_bytes = 16 * kKiB;
  uint32_t clients = 4;
  uint32_t keys = 128;
  uint32_t reps = 5;
  uint32_t duration_ms = 2000;
  bool no_dram = false;
  std::string ssd_dir;
  bool json = false;
  // The hidden client mode (one lookup process).
  bool lookup_client = false;
  std::string socket;
  uint64_t key_count = 0;
  int64_t start_ns = 0;
  std::string out;
};

using Clock = std::chrono::steady_clock;

// One lookup client process: waits for start_ns, then looks up `keys` consecutive stored SSD keys
// at random offsets until duration_ms has passed (once at least); writes each call's round trip
// (µs, doubles) to `out`. Exit 1 when it cannot connect, a lookup misses a stored key, or `out`
// cannot be written.
int RunLookupClient(const DaemonBenchArgs& a) {
  serve::ClientOptions co;
  co.client_name = "bench daemon lookup client";
  auto store = serve::RemoteStore::Connect(a.socket, kTenant, co);
  if (!store.ok()) return ReportStatus("bench daemon --lookup-client", store.status());
  const std::vector<Key> keys = MakeKeys(kKeyNs[1], 0, a.key_count);
  const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(a.keys, a.key_count));
  std::mt19937_64 rng(static_cast<uint64_t>(getpid()));
  std::uniform_int_distribution<uint64_t> at(0, a.key_count - n);
  std::vector<double> us;
  us.reserve(1 << 20);
  uint64_t misses = 0;
  while (SteadyNowNs() < a.start_ns) std::this_thread::sleep_for(std::chrono::microseconds(100));
  const int64_t end_ns = a.start_ns + int64_t{a.duration_ms} * 1000000;
  // At least one call: on a loaded machine a client can start after the end (bench_daemon_test's
  // 100 ms run once got no call at all).
  do {
    const std::span<const Key> batch(keys.data() + at(rng), n);
    const auto t0 = Clock::now();
    const LookupResult r = (*store)->Lookup(batch);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (r.leading_hits != n) ++misses;
  } while (SteadyNowNs() < end_ns);
  std::FILE* f = std::fopen(a.out.c_str(), "wb");
  if (f == nullptr) return ReportStatus("bench daemon --lookup-client", Status::IOError(a.out));
  const bool written = std::fwrite(us.data(), sizeof(double), us.size(), f) == us.size();
  if (std::fclose(f) != 0 || !written) {
    return ReportStatus("bench daemon --lookup-client", Status::IOError("write " + a.out));
  }
  if (misses > 0) {
    std::fprintf(stderr, "flatcake bench daemon --lookup-client: %lu lookups missed stored keys\n",
                 static_cast<unsigned long>(misses));
    return 1;
  }
  return 0;
}

// Median GB/s of one medium's restores, each side.
struct MediumFigures {
  bool run = false;
  uint64_t blocks = 0;
  double embedded_gbps = 0, daemon_gbps = 0, ratio = 0;
};

struct LookupFigures {
  uint64_t calls = 0;
  double p50_us = 0, p99_us = 0, max_us = 0, calls_per_s = 0;
};

class DaemonBench {
 public:
  explicit DaemonBench(const DaemonBenchArgs& a)
      : a_(a), layout_{a.layers, a.planes, a.slice_bytes} {}
  int Main();

 private:
  Status Setup();
  // Restores every key of `medium` through `store` into dst_, timed, and verifies every byte.
  Result<double> TimedRestore(Store& store, const std::vector<Key>& keys, int medium);
  Status MeasureRestores(int medium);
  Status MeasureLookups();

  const DaemonBenchArgs a_;
  const KvLayout layout_;
  uint64_t blocks_ = 0;
  std::unique_ptr<TempDir> tmp_;
  std::unique_ptr<serve::Daemon> daemon_;
  std::unique_ptr<serve::RemoteStore> client_;
  std::vector<Key> keys_[2];         // as the client names them
  std::vector<Key> stored_keys_[2];  // as the daemon's store holds them (tenant namespace)
  AlignedBuffer dst_mem_;
  std::vector<void*> dst_ptrs_;
  uint64_t verified_ = 0, mismatches_ = 0, misses_ = 0;
  MediumFigures media_[2];
  LookupFigures lookups_;
};

Status DaemonBench::Setup() {
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout_));
  const uint64_t block = layout_.block_bytes();
  blocks_ = std::max<uint64_t>(a_.keys, (a_.bytes + block - 1) / block);
  const uint64_t session = blocks_ * block;
  FC_RETURN_IF_ERROR(CheckHostMemory(session * (a_.no_dram ? 1 : 2), "bench daemon",
                                     "the destination and the DRAM arena"));
  tmp_ = std::make_unique<TempDir>("flatcake-bench-daemon", a_.ssd_dir);
  if (tmp_->path().empty()) return Status::IOError("cannot create a directory under --ssd-dir");

  serve::DaemonOptions d;
  StoreOptions& o = d.store;
  o.dram_bytes = a_.no_dram ? 0 : session + session / 8 + 64 * kMiB;  // segments' padding
  o.ssd_dirs = {tmp_->path()};
  o.recover = false;  // a measurement starts from an empty pool
  o.ssd_file_bytes = 256 * kMiB;
  o.ssd_bytes = ((session + session / 8) / o.ssd_file_bytes + 3) * o.ssd_file_bytes;
  o.high_watermark = 1.0;
  o.low_watermark = 1.0;
  d.socket_path = tmp_->path() + "/sock";
  FC_ASSIGN_OR_RETURN(daemon_, serve::Daemon::Start(d));

  // The client reads with the engine, workers, depth, window and read size the daemon's store
  // reads with, so the two restores differ only in where the control path runs.
  const StoreOptions& so = daemon_->store().options();
  serve::ClientOptions co;
  co.client_name = "bench daemon";
  co.verify_checksums = so.verify_checksums;
  co.media = MediaOptionsOf(so);
  FC_ASSIGN_OR_RETURN(client_, serve::RemoteStore::Connect(d.socket_path, kTenant, co));

  const serve::TenantNamespace ns(kTenant);
  constexpr uint64_t kPerPut = 64;
  HostBlocks src(layout_, kPerPut);
  for (int m = 0; m < 2; ++m) {
    media_[m].run = m == 1 || !a_.no_dram;
    if (!media_[m].run) continue;
    media_[m].blocks = blocks_;
    keys_[m] = MakeKeys(kKeyNs[m], 0, blocks_);
    stored_keys_[m] = ns.StoredKeys(keys_[m]);
    for (uint64_t at = 0; at < blocks_; at += kPerPut) {
      const uint64_t n = std::min(kPerPut, blocks_ - at);
      std::vector<Key> batch(keys_[m].begin() + at, keys_[m].begin() + at + n);
      src.Fill(batch);
      BlockBuffers buffers = src.buffers();
      buffers.ptrs = buffers.ptrs.subspan(0, n);
      WriteHints h;
      h.session = m ? "ssd-session" : "dram-session";
      h.force_medium = static_cast<MediaType>(m);
      FC_ASSIGN_OR_RETURN(PutResult r, client_->Put(batch, layout_, buffers, h));
      if (r.written != n) return Status::Aborted("not every block was written");
    }
  }
  FC_ASSIGN_OR_RETURN(dst_mem_, AllocateHostMemory(session, /*huge=*/true));
  dst_ptrs_.resize(blocks_);
  for (uint64_t i = 0; i < blocks_; ++i) dst_ptrs_[i] = dst_mem_.data() + i * block;
  return Status::OK();
}

Result<double> DaemonBench::TimedRestore(Store& store, const std::vector<Key>& keys, int medium) {
  std::memset(dst_mem_.data(), 0, dst_mem_.size());
  const BlockBuffers dst{BufferKind::kBlockContiguous, dst_ptrs_};
  const auto t0 = Clock::now();
  FC_ASSIGN_OR_RETURN(GetResult r, store.Get(keys, layout_, dst));
  const double s = SecondsSince(t0);
  const uint64_t block = layout_.block_bytes();
  std::vector<uint8_t> want(block);
  for (uint64_t i = 0; i < blocks_; ++i) {
    if (!r.found[i]) {
      ++misses_;
      continue;
    }
    FillBlock(keys_[medium][i], want.data(), block);
    if (std::memcmp(want.data(), dst_ptrs_[i], block) != 0) ++mismatches_;
    verified_ += block;
  }
  return static_cast<double>(blocks_ * block) / s / 1e9;
}

Status DaemonBench::MeasureRestores(int m) {
  std::vector<double> embedded, remote, ratio;
  for (uint32_t rep = 0; rep < a_.reps; ++rep) {
    double e = 0, d = 0;
    for (int turn = 0; turn < 2; ++turn) {
      if ((turn == 0) == (rep % 2 == 0)) {
        FC_ASSIGN_OR_RETURN(e, TimedRestore(daemon_->store(), stored_keys_[m], m));
      } else {
        FC_ASSIGN_OR_RETURN(d, TimedRestore(*client_, keys_[m], m));
      }
    }
    embedded.push_back(e);
    remote.push_back(d);
    ratio.push_back(d / e);
  }
  media_[m].embedded_gbps = Median(embedded);
  media_[m].daemon_gbps = Median(remote);
  media_[m].ratio = Median(ratio);
  return Status::OK();
}

Status DaemonBench::MeasureLookups() {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) return Status::FromErrno(errno, "readlink /proc/self/exe");
  exe[len] = '\0';
  // Time for every child to start and connect before the clock starts.
  const int64_t start_ns = SteadyNowNs() + 500 * 1000000LL;
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  Status spawn_error;
  for (uint32_t c = 0; c < a_.clients; ++c) {
    outs.push_back(tmp_->path() + "/lookups-" + std::to_string(c));
    std::vector<std::string> args = {exe,
                                     "bench",
                                     "daemon",
                                     "--lookup-client",
                                     "--socket",
                                     daemon_->socket_path(),
                                     "--keys",
                                     std::to_string(a_.keys),
                                     "--key-count",
                                     std::to_string(blocks_),
                                     "--start-ns",
                                     std::to_string(start_ns),
                                     "--duration-ms",
                                     std::to_string(a_.duration_ms),
                                     "--out",
                                     outs.back()};
    std::vector<char*> argv;
    for (std::string& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (int rc = posix_spawn(&pid, exe, nullptr, nullptr, argv.data(), environ); rc != 0) {
      spawn_error = Status::FromErrno(rc, "spawn a lookup client");
      break;
    }
    pids.push_back(pid);
  }
  bool failed = false;
  for (pid_t pid : pids) {
    int wstatus = 0;
    if (waitpid(pid, &wstatus, 0) != pid || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      failed = true;
    }
  }
  FC_RETURN_IF_ERROR(spawn_error);
  if (failed) return Status::Aborted("a lookup client failed (its error is above)");
  std::vector<double> us;
  for (const std::string& path : outs) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return Status::FromErrno(errno, "open " + path);
    double v[4096];
    for (size_t got; (got = std::fread(v, sizeof(double), 4096, f)) > 0;) {
      us.insert(us.end(), v, v + got);
    }
    std::fclose(f);
  }
  lookups_.calls = us.size();
  lookups_.calls_per_s = static_cast<double>(us.size()) / (a_.duration_ms / 1e3);
  lookups_.max_us = us.empty() ? 0 : *std::max_element(us.begin(), us.end());
  lookups_.p50_us = Percentile(us, 0.50);
  lookups_.p99_us = Percentile(us, 0.99);
  return Status::OK();
}

int DaemonBench::Main() {
  if (Status st = Setup(); !st.ok()) return ReportStatus("bench daemon", st);
  for (int m = 1; m >= 0; --m) {
    if (!media_[m].run) continue;
    if (Status st = MeasureRestores(m); !st.ok()) return ReportStatus("bench daemon", st);
  }
  if (Status st = MeasureLookups(); !st.ok()) return ReportStatus("bench daemon", st);

  const StoreInfo info = daemon_->store().GetInfo();
  const uint64_t block = layout_.block_bytes();
  std::printf("daemon vs embedded: %lu blocks of %s (%s) per medium, %u reps, SSD %s (%s)\n",
              static_cast<unsigned long>(blocks_), layout_.ToString().c_str(),
              FormatBytes(blocks_ * block).c_str(), a_.reps,
              info.ssd_direct_io ? "O_DIRECT" : "buffered", info.io_engine.c_str());
  std::printf("%-6s %14s %12s %18s\n", "medium", "embedded GB/s", "daemon GB/s", "daemon/embedded");
  for (int m = 1; m >= 0; --m) {
    if (!media_[m].run) continue;
    std::printf("%-6s %14.2f %12.2f %18.3f\n", m ? "SSD" : "DRAM", media_[m].embedded_gbps,
                media_[m].daemon_gbps, media_[m].ratio);
  }
  std::printf(
      "lookups: %u clients x %u keys for %u ms: %lu calls (%.0f/s), P50 %.1f us, "
      "P99 %.1f us, max %.1f us\n",
      a_.clients, a_.keys, a_.duration_ms, static_cast<unsigned long>(lookups_.calls),
      lookups_.calls_per_s, lookups_.p50_us, lookups_.p99_us, lookups_.max_us);
  std::printf("bytes verified %lu, mismatches %lu, misses %lu\n",
              static_cast<unsigned long>(verified_), static_cast<unsigned long>(mismatches_),
              static_cast<unsigned long>(misses_));
  if (a_.json) {
    auto or_null = [](const MediumFigures& f, double v) {
      return f.run ? nlohmann::json(v) : nlohmann::json(nullptr);
    };
    nlohmann::json j = {{"bench", "daemon"},
                        {"daemon_vs_embedded", media_[1].ratio},
                        {"embedded_gbps", media_[1].embedded_gbps},
                        {"daemon_gbps", media_[1].daemon_gbps},
                        {"dram_daemon_vs_embedded", or_null(media_[0], media_[0].ratio)},
                        {"dram_embedded_gbps", or_null(media_[0], media_[0].embedded_gbps)},
                        {"dram_daemon_gbps", or_null(media_[0], media_[0].daemon_gbps)},
                        {"lookup_p50_us", lookups_.p50_us},
                        {"lookup_p99_us", lookups_.p99_us},
                        {"lookup_max_us", lookups_.max_us},
                        {"lookup_calls", lookups_.calls},
                        {"clients", a_.clients},
                        {"keys_per_lookup", std::min<uint64_t>(a_.keys, blocks_)},
                        {"duration_ms", a_.duration_ms},
                        {"blocks", blocks_},
                        {"block_bytes", block},
                        {"bytes", blocks_ * block},
                        {"reps", a_.reps},
                        {"ssd_direct_io", info.ssd_direct_io},
                        {"io_engine", info.io_engine},
                        {"bytes_verified", verified_},
                        {"mismatches", mismatches_},
                        {"misses", misses_}};
    std::printf("%s\n", j.dump().c_str());
  }
  return mismatches_ == 0 && misses_ == 0 ? 0 : 1;
}

int RunDaemonBench(const DaemonBenchArgs& a) {
  if (a.lookup_client) return RunLookupClient(a);
  if (a.slice_bytes == 0 || a.slice_bytes > kGiB) {
    return ReportArgError("bench daemon", Status::InvalidArgument("--slice-bytes must be in "
                                                                  "[1, 1 GiB]"));
  }
  if (a.bytes == 0 || a.bytes > 1024 * kGiB) {
    return ReportArgError("bench daemon", Status::InvalidArgument("--bytes must be in [1, 1 TiB]"));
  }
  // The daemon's connection lines would bury the table; its warnings and errors still show.
  serve::SetLogLevel(serve::LogLevel::kWarning);
  DaemonBench bench(a);
  return bench.Main();
}

}  // namespace

void RegisterDaemonBench(CLI::App& bench, int* exit_code) {
  auto a = std::make_shared<DaemonBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "daemon",
      "Restore bandwidth through the node daemon vs the embedded store on the same data (SSD and "
      "DRAM), and 128-key lookup latency with client processes busy; exits 1 on any wrong byte");
  const auto size = CLI::AsSizeValue(false);
  cmd->add_option("--bytes", a->bytes, "Bytes of the session on each medium")
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--layers", a->layers, "Layers per block")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--planes", a->planes, "Planes per layer (2 = K,V)")
      ->check(CLI::Range(1u, 16u))
      ->capture_default_str();
  cmd->add_option("--slice-bytes", a->slice_bytes, "Bytes of one (layer, plane) slice")
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--clients", a->clients, "Lookup client processes")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  cmd->add_option("--keys", a->keys, "Keys per lookup")
      ->check(CLI::Range(1u, 65536u))
      ->capture_default_str();
  cmd->add_option("--reps", a->reps, "Restore rounds per medium (medians reported)")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  cmd->add_option("--duration-ms", a->duration_ms, "How long the lookup clients run")
      ->check(CLI::Range(1u, 600000u))
      ->capture_default_str();
  cmd->add_flag("--no-dram", a->no_dram, "Measure the SSD restore only");
  cmd->add_option("--ssd-dir", a->ssd_dir,
                  "Where the temporary pool goes (default: $TMPDIR, else /tmp); removed "
                  "afterwards");
  cmd->add_flag("--json", a->json, "Print one JSON object on the last line");
  // The lookup client processes the bench spawns (not for people).
  cmd->add_flag("--lookup-client", a->lookup_client)->group("");
  cmd->add_option("--socket", a->socket)->group("");
  cmd->add_option("--key-count", a->key_count)->group("");
  cmd->add_option("--start-ns", a->start_ns)->group("");
  cmd->add_option("--out", a->out)->group("");
  cmd->callback([a, exit_code] { *exit_code = RunDaemonBench(*a); });
}

}  // namespace flatcake::cli
