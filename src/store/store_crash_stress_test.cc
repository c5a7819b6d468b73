// Process kills: a child process writes, reads, reclaims and clears a durable pool while the
// parent kills it with SIGKILL at random points; after each kill the parent reopens the pool
// (recovering it) and checks it against what the child reported, then the next child continues
// on the same pool.
//
// The child reports through a pipe, in fixed-size records that one write(2) carries whole:
//  - before each operation what it is about to do (a put's keys, a reclaim, a clear), and whether
//    it may free SSD blocks (a put does only near the high watermark; the child reclaims well
//    before it);
//  - each key a watcher thread sees in the index while the put is still running (the store's
//    promise: a block any caller saw survives a kill), then the put's outcome and medium;
//  - after the operation every key it knew live that Lookup no longer finds, then "done".
// After each kill the parent requires: every key reported published on SSD and not reported gone
// is served byte-exact; no key reported gone (or only ever in DRAM) is served; a key whose fate
// the kill left open is either served byte-exact or never again; the index holds nothing else;
// the store counted no checksum mismatch; and a new put and get work. 0 wrong bytes anywhere.
//
// FLATCAKE_CRASH_KILLS sets the number of kills (300 by default, 30 under ThreadSanitizer),
// FLATCAKE_CRASH_SEED the seed of the kill delays and of the children's operations (printed).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "store/flat_store.h"
#include "testing/durable_pool_model.h"
#include "testing/sanitizers.h"
#include "util/temp_dir.h"

namespace flatcake {
namespace {

using testing::Expect;
using testing::kDurableLayouts;
using testing::KeyModel;

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FLATCAKE_UNDER_TSAN_
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(FLATCAKE_UNDER_TSAN_)
// Every child and reopen runs several times slower: fewer kills, later.
constexpr int kDefaultKills = 30;
constexpr int64_t kDelayScale = 4;
#else
// The test command's ASan tree is built at -O0: a child killed at Release's delays has done a
// handful of operations (CI's 2-core machine: 6 on average, 29 distinct kill points in 300), so
// there half the kills, each twice as late, in about the same time.
constexpr int kDefaultKills = testing::kBuiltWithAsan ? 150 : 300;
constexpr int64_t kDelayScale = testing::kBuiltWithAsan ? 2 : 1;
#endif
constexpr uint64_t kKeyNs = 19;
constexpr uint64_t kIdsPerChild = uint64_t{1} << 24;
constexpr uint64_t kParentIds = uint64_t{1} << 48;  // the parent's own puts
constexpr uint32_t kParentBatch = 4;
constexpr uint64_t kMaxChildOps = 1'000'000;  // a child never killed stops by itself (a failure)

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* s = std::getenv(name);
  return s && *s ? std::strtoull(s, nullptr, 10) : fallback;
}

enum class Rec : uint32_t {
  kOpened = 1,       // the child's store is open; first = blocks it recovered
  kOpenFailed,       // (then it exits)
  kMissingAtOpen,    // first = id of a key the parent verified that the child's store lacks
  kBeginPut,         // first, count, layout; arg = 1 when the put may reclaim SSD scopes
  kSeen,             // first, count, layout; arg = medium: in the index while the put runs
  kPublished,        // first, count, layout; arg = medium: the put returned OK
  kPutFailed,        // first, count
  kBeginReclaimSsd,  // the child's SSD keys may go
  kBeginClear,
  kGone,        // first = id of a key Lookup no longer finds
  kUnexpected,  // first = id of a key that went although no operation could free it
  kReadMiss,    // first = id of a live key a Get did not serve
  kWrongBytes,  // first = bytes that differed in the child's own reads
  kDone,        // the operation's reports are complete
};
struct Report {
  Rec type;
  uint32_t layout = 0;
  uint64_t first = 0, count = 0, arg = 0;
};
static_assert(sizeof(Report) == 32 && PIPE_BUF % sizeof(Report) == 0);

// One child in ten clears the pool first thing, so that every run clears: its kill delay counts
// from that clear's start (RunAndKill), or a slow open under a sanitizer could outlast it.
bool ClearsFirst(uint32_t child_no) { return child_no % 10 == 5; }

// The child's end of the pipe. A write of at most PIPE_BUF bytes to a pipe is atomic, so a kill
// never leaves part of a record behind (the parent counts any it finds anyway).
class Reporter {
 public:
  explicit Reporter(int fd) : fd_(fd) {}
  void Send(const Report& r) { Send(std::span<const Report>(&r, 1)); }
  void Send(std::span<const Report> rs) {
    std::lock_guard<std::mutex> lock(mu_);
    constexpr size_t kPerWrite = PIPE_BUF / sizeof(Report);
    for (size_t i = 0; i < rs.size(); i += kPerWrite) {
      const size_t n = std::min(kPerWrite, rs.size() - i);
      const char* p = reinterpret_cast<const char*>(rs.data() + i);
      ssize_t w;
      do {
        w = ::write(fd_, p, n * sizeof(Report));
      } while (w < 0 && errno == EINTR);
      if (w != static_cast<ssize_t>(n * sizeof(Report))) _exit(4);
    }
  }

 private:
  std::mutex mu_;
  const int fd_;
};

// Polls the index for the keys of the put in flight and reports each one as it becomes visible.
// Stop returns only once the watcher reports nothing more about them.
class Watcher {
 public:
  Watcher(Store& store, Reporter& rep) : store_(store), rep_(rep) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Watcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Watch(const std::vector<Key>& keys, uint64_t first_id, uint32_t layout) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      keys_ = keys;
      first_id_ = first_id;
      layout_ = layout;
      seen_ = 0;
    }
    cv_.notify_all();
  }
  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    keys_.clear();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (seen_ >= keys_.size()) {
        cv_.wait(lock);
        continue;
      }
      const LookupResult r = store_.Lookup(std::span<const Key>(keys_).subspan(seen_));
      if (r.leading_hits > 0) {
        rep_.Send(Report{Rec::kSeen, layout_, first_id_ + seen_, r.leading_hits,
                         static_cast<uint64_t>(r.slowest_medium)});
        seen_ += r.leading_hits;
      }
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
  }

  Store& store_;
  Reporter& rep_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Key> keys_;
  uint64_t first_id_ = 0;
  uint32_t layout_ = 0;
  size_t seen_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// Child n's options: every sync mode, I/O engine and buffered/direct combination in turn.
StoreOptions ChildOptions(const std::string& dir, uint32_t n) {
  StoreOptions o = testing::SmallDurablePool(dir);
  constexpr SyncMode kSync[] = {SyncMode::kNone, SyncMode::kInterval, SyncMode::kEvery};
  constexpr IoEngineKind kEngine[] = {IoEngineKind::kPosix, IoEngineKind::kPreadv,
                                      IoEngineKind::kAuto};
  o.sync = kSync[n % 3];
  o.sync_interval_ms = 2;
  o.io_engine = kEngine[(n / 3) % 3];
  o.direct_io = (n / 9) % 2 ? DirectIoMode::kOff : DirectIoMode::kAuto;
  return o;
}

// The child: opens the pool (recovering it) and runs operations until it is killed.
class Child {
 public:
  Child(FlatStore& store, Reporter& rep, const KeyModel& model, const StoreOptions& o,
        uint32_t child_no, uint64_t seed)
      : store_(store),
        rep_(rep),
        model_(model),
        o_(o),
        child_no_(child_no),
        rng_(seed),
        next_id_(kIdsPerChild * (child_no + 1)),
        watcher_(store, rep) {}

  // Reports every key the parent verified that this store lacks, then runs.
  [[noreturn]] void Run() {
    for (const auto& [id, e] : model_.keys) {
      if (e.expect != Expect::kServed) continue;
      const Key k = model_.KeyOf(id);
      if (store_.Exists(std::span<const Key>(&k, 1)) == 1) {
        live_.push_back(LiveKey{id, e.layout});
      } else {
        rep_.Send(Report{Rec::kMissingAtOpen, 0, id});
      }
    }
    rep_.Send(Report{Rec::kOpened, 0, store_.GetInfo().recovered_blocks});
    const double cap = static_cast<double>(store_.GetStats().ssd.capacity_bytes);
    for (uint64_t op = 0; op < kMaxChildOps; ++op) {
      const StoreStats stats = store_.GetStats();
      const uint32_t r =
          op == 0 && ClearsFirst(child_no_) ? 0 : static_cast<uint32_t>(rng_() % 1000);
      bool may_free_ssd = false;
      if (r < 5) {
        rep_.Send(Report{Rec::kBeginClear});
        may_free_ssd = true;
        store_.Clear();
        chain_tail_.reset();
      } else if (static_cast<double>(stats.ssd.used_bytes) > 0.6 * cap || r < 80) {
        rep_.Send(Report{Rec::kBeginReclaimSsd});
        may_free_ssd = true;
        store_.Reclaim(MediaType::kSsd, 0.2 + 0.1 * static_cast<double>(rng_() % 4));
      } else if (r < 120) {
        store_.Reclaim(MediaType::kDram, 0.2);  // frees no SSD block
      } else if (r < 250 && !live_.empty()) {
        ReadBack();
      } else {
        may_free_ssd = Put(stats, cap);
      }
      SweepGone(may_free_ssd);
    }
    _exit(3);
  }

 private:
  struct LiveKey {
    uint64_t id;
    uint8_t layout;
  };

  // Reads back a few live keys of one layout: each must be served, byte-exact.
  void ReadBack() {
    const uint8_t li = live_[rng_() % live_.size()].layout;
    const KvLayout& layout = kDurableLayouts[li];
    std::vector<uint64_t> ids;
    for (const LiveKey& lk : live_) {
      if (lk.layout == li) ids.push_back(lk.id);
    }
    std::shuffle(ids.begin(), ids.end(), rng_);
    ids.resize(std::min<size_t>(ids.size(), 16));
    std::vector<Key> keys;
    for (uint64_t id : ids) keys.push_back(model_.KeyOf(id));
    HostBlocks dst(layout, keys.size());
    auto got = store_.Get(keys, layout, dst.buffers());
    std::vector<uint8_t> want(layout.block_bytes());
    uint64_t bad = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!got.ok() || !got->found[i]) {
        rep_.Send(Report{Rec::kReadMiss, li, ids[i]});
        continue;
      }
      FillBlock(keys[i], want.data(), want.size());
      for (uint64_t b = 0; b < want.size(); ++b) bad += want[b] != dst.block(i)[b];
    }
    if (bad) rep_.Send(Report{Rec::kWrongBytes, li, bad});
  }

  // Puts a batch of new keys: to a named session (one layout each), an anonymous one, or the
  // chain of the last put; mostly to SSD. Returns whether the put may have freed SSD blocks.
  bool Put(const StoreStats& stats, double cap) {
    const uint32_t kind = static_cast<uint32_t>(rng_() % 8);
    WriteHints h;
    uint8_t li;
    if (kind < 6) {
      h.session = "s" + std::to_string(kind);
      li = static_cast<uint8_t>(kind % kDurableLayouts.size());
    } else if (kind == 7 && chain_tail_) {
      h.prefix_tail = chain_tail_;
      li = chain_layout_;
    } else {
      li = static_cast<uint8_t>(rng_() % kDurableLayouts.size());
    }
    const KvLayout& layout = kDurableLayouts[li];
    const uint32_t n = 1 + static_cast<uint32_t>(rng_() % 12);
    h.force_medium = rng_() % 5 == 0 ? MediaType::kDram : MediaType::kSsd;
    // A put reclaims SSD scopes only at the high watermark, without a free range for a block, or
    // without a free scope slot (a DRAM batch may spill to SSD): say so when it might.
    const uint64_t batch = uint64_t{n} * layout.block_bytes();
    const bool may_free_ssd =
        static_cast<double>(stats.ssd.used_bytes + 2 * batch + 256 * kKiB) >=
            o_.high_watermark * cap ||
        store_.ssd_pool()->largest_free() < 2 * testing::kLargestDurableBlock ||
        stats.dram.scopes_live + stats.ssd.scopes_live + 4 >= o_.max_scopes;
    std::vector<Key> keys;
    for (uint32_t i = 0; i < n; ++i) keys.push_back(model_.KeyOf(next_id_ + i));
    rep_.Send(Report{Rec::kBeginPut, li, next_id_, n, may_free_ssd ? 1u : 0u});
    HostBlocks src(layout, n);
    src.Fill(keys);
    watcher_.Watch(keys, next_id_, li);
    auto put = store_.Put(keys, layout, src.buffers(), h);
    watcher_.Stop();
    if (put.ok()) {
      rep_.Send(Report{Rec::kPublished, li, next_id_, n, static_cast<uint64_t>(put->medium)});
    } else {
      std::fprintf(stderr, "child %u: put failed: %s\n", child_no_,
                   put.status().ToString().c_str());
      rep_.Send(Report{Rec::kPutFailed, li, next_id_, n});
    }
    for (uint32_t i = 0; i < n; ++i) {
      const LookupResult lr = store_.Lookup(std::span<const Key>(&keys[i], 1));
      if (lr.leading_hits == 1 && lr.slowest_medium == MediaType::kSsd) {
        live_.push_back(LiveKey{next_id_ + i, li});
      }
    }
    chain_tail_ = keys.back();
    chain_layout_ = li;
    next_id_ += n;
    return may_free_ssd;
  }

  // Reports every live key that is gone now, then the end of the operation.
  void SweepGone(bool may_free_ssd) {
    std::vector<Report> out;
    std::erase_if(live_, [&](const LiveKey& lk) {
      const Key k = model_.KeyOf(lk.id);
      if (store_.Exists(std::span<const Key>(&k, 1)) == 1) return false;
      out.push_back(Report{Rec::kGone, lk.layout, lk.id});
      if (!may_free_ssd) out.push_back(Report{Rec::kUnexpected, lk.layout, lk.id});
      return true;
    });
    out.push_back(Report{Rec::kDone});
    rep_.Send(out);
  }

  FlatStore& store_;
  Reporter& rep_;
  const KeyModel& model_;
  const StoreOptions o_;
  const uint32_t child_no_;
  std::mt19937_64 rng_;
  uint64_t next_id_;
  std::vector<LiveKey> live_;  // SSD keys Lookup finds
  std::optional<Key> chain_tail_;
  uint8_t chain_layout_ = 0;
  Watcher watcher_;
};

[[noreturn]] void RunChild(const std::string& dir, const KeyModel& model, uint32_t child_no,
                           uint64_t seed, int fd) {
  Reporter rep(fd);
  const StoreOptions o = ChildOptions(dir, child_no);
  auto opened = FlatStore::OpenWithEngine(o, nullptr);
  if (!opened.ok()) {
    std::fprintf(stderr, "child %u: open failed: %s\n", child_no,
                 opened.status().ToString().c_str());
    rep.Send(Report{Rec::kOpenFailed});
    _exit(2);
  }
  Child(**opened, rep, model, o, child_no, seed).Run();
}

struct ChildRun {
  std::vector<Report> reports;
  uint64_t torn_bytes = 0;  // a trailing partial record
  int status = 0;
};

// Forks child `child_no`, kills it `delay` later (after its first clear began, for a child that
// ClearsFirst), and collects its reports.
ChildRun RunAndKill(const std::string& dir, const KeyModel& model, uint32_t child_no, uint64_t seed,
                    std::chrono::microseconds delay) {
  ChildRun run;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return run;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    RunChild(dir, model, child_no, seed, fds[1]);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    ::close(fds[0]);
    return run;
  }
  std::vector<char> bytes;
  char buf[1 << 16];
  auto drain = [&](int timeout_ms) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return true;
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n <= 0) return n < 0 && errno == EINTR;  // false at EOF
    bytes.insert(bytes.end(), buf, buf + n);
    return true;
  };
  bool open = true;
  const auto began_clear = [&] {
    for (size_t at = 0; at + sizeof(Report) <= bytes.size(); at += sizeof(Report)) {
      Report r;
      std::memcpy(&r, bytes.data() + at, sizeof(r));
      if (r.type == Rec::kBeginClear) return true;
    }
    return false;
  };
  if (ClearsFirst(child_no)) {
    while (open && !began_clear()) open = drain(-1);
  }
  const auto deadline = std::chrono::steady_clock::now() + delay;
  for (auto now = std::chrono::steady_clock::now(); open && now < deadline;
       now = std::chrono::steady_clock::now()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    // poll's resolution is a millisecond; spin the last one.
    open = drain(left.count() > 1 ? static_cast<int>(left.count() - 1) : 0);
  }
  ::kill(pid, SIGKILL);
  while (open) open = drain(-1);
  ::close(fds[0]);
  ::waitpid(pid, &run.status, 0);
  run.reports.resize(bytes.size() / sizeof(Report));
  // A child killed before its first report sent nothing: memcpy from an empty vector's null
  // data() would be undefined even for 0 bytes.
  if (!run.reports.empty()) {
    std::memcpy(run.reports.data(), bytes.data(), run.reports.size() * sizeof(Report));
  }
  run.torn_bytes = bytes.size() % sizeof(Report);
  return run;
}

// What the parent learns from one child's reports.
struct ChildOutcome {
  bool opened = false;
  uint64_t ops_done = 0, seen = 0, published = 0, put_failures = 0, gone = 0, reclaims = 0,
           clears = 0;
  std::vector<std::string> failures;  // reports that are failures in themselves
};

ChildOutcome ApplyReports(const std::vector<Report>& reports, KeyModel& model) {
  ChildOutcome out;
  std::set<uint64_t> served;  // the kServed keys, kept in step with the model
  for (const auto& [id, e] : model.keys) {
    if (e.expect == Expect::kServed) served.insert(id);
  }
  std::vector<uint64_t> at_risk;  // kServed keys the operation in flight may free
  auto risk_all = [&] {
    for (uint64_t id : served) {
      model.keys[id].expect = Expect::kMaybe;
      at_risk.push_back(id);
    }
    served.clear();
  };
  auto published = [&](const Report& r) {
    const bool ssd = static_cast<MediaType>(r.arg) == MediaType::kSsd;
    for (uint64_t id = r.first; id < r.first + r.count; ++id) {
      KeyModel::Entry& e = model.keys[id];
      // Seen on SSD earlier and published now: the same. DRAM is not durable.
      if (e.expect != Expect::kMaybe) continue;
      e.expect = ssd ? Expect::kServed : Expect::kNotServed;
      if (ssd) served.insert(id);
    }
  };
  for (const Report& r : reports) {
    switch (r.type) {
      case Rec::kOpened: out.opened = true; break;
      case Rec::kOpenFailed: out.failures.push_back("the child could not open the pool"); break;
      case Rec::kMissingAtOpen:
        out.failures.push_back("key " + std::to_string(r.first) +
                               " verified before is missing in the child's store");
        break;
      case Rec::kBeginPut:
        if (r.arg) risk_all();
        model.Set(r.first, r.count, Expect::kMaybe, static_cast<uint8_t>(r.layout));
        break;
      case Rec::kSeen:
        out.seen += r.count;
        published(r);
        break;
      case Rec::kPublished:
        out.published += r.count;
        published(r);
        break;
      case Rec::kPutFailed: out.put_failures++; break;
      case Rec::kBeginReclaimSsd:
        out.reclaims++;
        risk_all();
        break;
      case Rec::kBeginClear:
        out.clears++;
        risk_all();
        break;
      case Rec::kGone:
        out.gone++;
        model.keys[r.first].expect = Expect::kNotServed;
        served.erase(r.first);
        break;
      case Rec::kUnexpected:
        out.failures.push_back("key " + std::to_string(r.first) +
                               " went during an operation that frees nothing");
        break;
      case Rec::kReadMiss:
        out.failures.push_back("the child's get missed live key " + std::to_string(r.first));
        break;
      case Rec::kWrongBytes:
        out.failures.push_back("the child read " + std::to_string(r.first) + " wrong bytes");
        break;
      case Rec::kDone:
        for (uint64_t id : at_risk) {
          KeyModel::Entry& e = model.keys[id];
          if (e.expect != Expect::kMaybe) continue;
          e.expect = Expect::kServed;
          served.insert(id);
        }
        at_risk.clear();
        out.ops_done++;
        break;
      default: out.failures.push_back("unknown report type"); break;
    }
  }
  return out;
}

TEST(StoreCrash, KilledWritersLoseNothingPublishedAndServeNothingFreed) {
  const int kills = static_cast<int>(EnvOr("FLATCAKE_CRASH_KILLS", kDefaultKills));
  const uint64_t seed = EnvOr("FLATCAKE_CRASH_SEED", 19);
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  KeyModel model;
  model.ns = kKeyNs;
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  uint64_t next_parent_id = kParentIds, verified = 0, wrong_bytes = 0, recoveries = 0,
           child_recoveries = 0, skipped_records = 0, torn_reports = 0, ops = 0, seen = 0,
           put_failures = 0, maybe_served = 0, maybe_missing = 0, reclaims = 0, clears = 0;
  std::set<uint64_t> kill_after_ops;  // how many operations children finished before a kill
  int64_t delay_min = INT64_MAX, delay_max = 0, delay_sum = 0;

  // The parent's put and get, on every (re)opened store: the pool keeps working.
  auto put_and_get = [&](FlatStore& store) {
    const KvLayout& layout = kDurableLayouts[0];
    std::vector<Key> keys;
    for (uint32_t i = 0; i < kParentBatch; ++i) keys.push_back(model.KeyOf(next_parent_id + i));
    HostBlocks src(layout, keys.size());
    src.Fill(keys);
    WriteHints h;
    h.session = "parent";
    h.force_medium = MediaType::kSsd;
    auto put = store.Put(keys, layout, src.buffers(), h);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    ASSERT_EQ(put->written, kParentBatch);
    HostBlocks dst(layout, keys.size());
    auto got = store.Get(keys, layout, dst.buffers());
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->hits, kParentBatch);
    ASSERT_EQ(dst.bytes, src.bytes);
    model.Set(next_parent_id, kParentBatch, Expect::kServed, 0);
    next_parent_id += kParentBatch;
  };
  {
    auto opened = FlatStore::OpenWithEngine(testing::SmallDurablePool(dir.path()), nullptr);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    put_and_get(**opened);
  }

  for (int k = 0; k < kills; ++k) {
    // Mostly while operations run; one in eight while the child opens and recovers the pool.
    const int64_t us =
        kDelayScale * (rng() % 8 == 0 ? static_cast<int64_t>(rng() % 15'000)
                                      : 15'000 + static_cast<int64_t>(rng() % 100'000));
    delay_min = std::min(delay_min, us);
    delay_max = std::max(delay_max, us);
    delay_sum += us;
    const uint64_t child_seed = rng();
    const uint32_t child_no = static_cast<uint32_t>(k);
    const std::string where = "kill " + std::to_string(k) + " (child seed " +
                              std::to_string(child_seed) + ", " + std::to_string(us) +
                              " us after fork, run seed " + std::to_string(seed) + ")";
    ChildRun run =
        RunAndKill(dir.path(), model, child_no, child_seed, std::chrono::microseconds(us));
    ASSERT_TRUE(WIFSIGNALED(run.status) && WTERMSIG(run.status) == SIGKILL)
        << where << ": the child exited by itself, status " << run.status;
    torn_reports += run.torn_bytes > 0;
    const ChildOutcome out = ApplyReports(run.reports, model);
    for (const std::string& f : out.failures) ADD_FAILURE() << where << ": " << f;
    ASSERT_TRUE(out.failures.empty());
    child_recoveries += out.opened;
    ops += out.ops_done;
    reclaims += out.reclaims;
    clears += out.clears;
    seen += out.seen;
    put_failures += out.put_failures;
    kill_after_ops.insert(out.ops_done);

    auto opened = FlatStore::OpenWithEngine(testing::SmallDurablePool(dir.path()), nullptr);
    ASSERT_TRUE(opened.ok()) << where << ": " << opened.status().ToString();
    FlatStore& store = **opened;
    const StoreInfo info = store.GetInfo();
    ASSERT_TRUE(info.recovered) << where;
    recoveries++;
    skipped_records += info.skipped_records;
    const testing::VerifyCounts c = testing::VerifyAndSettle(store, model);
    verified += c.verified;
    wrong_bytes += c.wrong_bytes;
    maybe_served += c.maybe_served;
    maybe_missing += c.maybe_missing;
    EXPECT_EQ(c.wrong_bytes, 0u) << where << ": " << c.first_failure;
    EXPECT_EQ(c.missing, 0u) << where << ": " << c.first_failure;
    EXPECT_EQ(c.resurrected, 0u) << where << ": " << c.first_failure;
    EXPECT_EQ(c.errors, 0u) << where << ": " << c.first_failure;
    // Nothing is served but what the children wrote: every recovered block is one of the keys.
    EXPECT_EQ(c.present, info.recovered_blocks) << where;
    EXPECT_EQ(store.GetStats().checksum_mismatches, 0u) << where;
    put_and_get(store);
    ASSERT_FALSE(::testing::Test::HasFailure()) << where;
  }

  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "crash test: kills %d, recoveries %lu (and %lu by children), blocks verified %lu, wrong "
      "bytes %lu, skipped records %lu (torn reports %lu), child operations %lu (%lu reclaims, "
      "%lu clears, %lu keys seen mid-put, %lu put failures), in-flight keys served %lu / lost %lu, "
      "kill delays %ld..%ld "
      "us (mean %ld) after %zu distinct operation counts, seed %lu, %.1f s\n",
      kills, (unsigned long)recoveries, (unsigned long)child_recoveries, (unsigned long)verified,
      (unsigned long)wrong_bytes, (unsigned long)skipped_records, (unsigned long)torn_reports,
      (unsigned long)ops, (unsigned long)reclaims, (unsigned long)clears, (unsigned long)seen,
      (unsigned long)put_failures, (unsigned long)maybe_served, (unsigned long)maybe_missing,
      (long)delay_min, (long)delay_max, (long)(kills ? delay_sum / kills : 0),
      kill_after_ops.size(), (unsigned long)seed, secs);
  EXPECT_EQ(wrong_bytes, 0u);
  EXPECT_EQ(put_failures, 0u);
  // Not vacuous: children got far enough to write, reclaim and clear, and were killed at many
  // different points.
  EXPECT_GT(model.Count(Expect::kServed), 0u);
  EXPECT_GT(ops, static_cast<uint64_t>(kills));
  EXPECT_GT(reclaims, 0u);
  EXPECT_GT(clears, 0u);
  EXPECT_GT(kill_after_ops.size(), static_cast<size_t>(kills / 10));
}

}  // namespace
}  // namespace flatcake
