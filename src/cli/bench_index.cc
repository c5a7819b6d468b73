// `flatcake bench index`: throughput of the Level-1 index (BlockIndex) against the two maps a
// store would otherwise use, std::unordered_map behind one std::shared_mutex and
// tbb::concurrent_hash_map, on the same keys in the same run.
//
// For each load factor (50% and 90% of --capacity) and thread count (1 and 2), each structure is
// built from empty by the threads together (timed: inserts per second), then probed by the same
// threads with pre-generated query streams that hit with probability --hit-ratio (timed: lookups
// per second). Every lookup's outcome is checked against the expected hit count, so a structure
// that answers wrongly fails the run instead of looking fast.
//
// Lookups are measured in two shapes. "single": one call per key (BlockIndex::Lookup; the mutex
// map takes its shared lock per key; tbb takes an accessor per key). "batch": --batch keys per
// call, which is how the store resolves them (FlatStore::Get and Exists hand the index all of a
// request's keys at once): BlockIndex::LookupBatch, which overlaps the keys' cache misses, and
// the mutex map holding its shared lock once per batch, so the comparison is not an artefact of
// per-key locking. tbb::concurrent_hash_map has no batched form and is measured per key. The
// headline flat figure and both ratios use the batch shape for flat and the mutex map.
#include <tbb/concurrent_hash_map.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/store_flags.h"
#include "flatcake/key.h"
#include "gva/block_index.h"

namespace flatcake::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct IndexBenchOptions {
  size_t capacity = size_t{1} << 21;
  double seconds = 0.15;
  uint64_t ops = 0;
  double hit_ratio = 0.9;
  int rounds = 5;
  size_t batch = 32;
  bool json = false;
};

IndexEntry EntryFor(const Key& k) {
  IndexEntry e;
  e.gva = k.lo;
  e.layer_stride = k.hi;
  e.checksum = k.lo ^ k.hi;
  e.scope_id = 1;
  e.scope_gen = 1;
  return e;
}

// The three structures behind one interface; each is sized for `n` keys up front.
class FlatAdapter {
 public:
  static constexpr const char* kName = "flat (BlockIndex)";
  FlatAdapter(size_t capacity, size_t /*n*/) : index_(capacity) {}
  bool Insert(const Key& k, const IndexEntry& e) {
    BlockIndex::Reservation r;
    if (index_.Reserve(k, &r) != BlockIndex::ReserveOutcome::kReserved) return false;
    index_.Publish(r, e);
    return true;
  }
  bool Lookup(const Key& k, IndexEntry* e) const { return index_.Lookup(k, e); }
  size_t LookupBatch(std::span<const Key> keys, IndexEntry* out, bool* found) const {
    return index_.LookupBatch(keys, out, found);
  }

 private:
  BlockIndex index_;
};

class MutexMapAdapter {
 public:
  static constexpr const char* kName = "unordered_map+shared_mutex";
  MutexMapAdapter(size_t /*capacity*/, size_t n) { map_.reserve(n); }
  bool Insert(const Key& k, const IndexEntry& e) {
    std::unique_lock lock(mu_);
    return map_.emplace(k, e).second;
  }
  bool Lookup(const Key& k, IndexEntry* e) const {
    std::shared_lock lock(mu_);
    auto it = map_.find(k);
    if (it == map_.end()) return false;
    *e = it->second;
    return true;
  }
  // The same batch shape as the store's: one shared lock for the whole batch.
  size_t LookupBatch(std::span<const Key> keys, IndexEntry* out, bool* found) const {
    std::shared_lock lock(mu_);
    size_t hits = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = map_.find(keys[i]);
      found[i] = it != map_.end();
      if (found[i]) {
        out[i] = it->second;
        ++hits;
      }
    }
    return hits;
  }

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<Key, IndexEntry, KeyHash> map_;
};

struct TbbKeyCompare {
  static size_t hash(const Key& k) { return KeyHash()(k); }
  static bool equal(const Key& a, const Key& b) { return a == b; }
};

class TbbAdapter {
 public:
  static constexpr const char* kName = "tbb::concurrent_hash_map";
  TbbAdapter(size_t /*capacity*/, size_t n) : map_(n) {}
  bool Insert(const Key& k, const IndexEntry& e) {
    return map_.insert(std::pair<const Key, IndexEntry>(k, e));
  }
  bool Lookup(const Key& k, IndexEntry* e) const {
    Map::const_accessor a;
    if (!map_.find(a, k)) return false;
    *e = a->second;
    return true;
  }

 private:
  using Map = tbb::concurrent_hash_map<Key, IndexEntry, TbbKeyCompare>;
  Map map_;
};

struct CellResult {
  std::string structure;
  int threads = 0;
  double load = 0;
  double insert_mops = 0;
  double lookup_mops = 0;          // median of the rounds
  std::vector<double> round_mops;  // each round, in order (paired with the other rows')
  uint64_t lookups = 0;
  bool correct = true;
};

// Per thread: its query keys and how many of them are hits.
struct QueryStream {
  std::vector<Key> keys;
  uint64_t hits = 0;
};

std::vector<QueryStream> MakeQueries(size_t n_loaded, int threads, double hit_ratio,
                                     size_t per_thread) {
  std::vector<QueryStream> streams(threads);
  for (int t = 0; t < threads; ++t) {
    std::mt19937_64 rng(0xbe7c4 + t);
    std::uniform_real_distribution<double> coin(0, 1);
    QueryStream& s = streams[t];
    s.keys.reserve(per_thread);
    for (size_t i = 0; i < per_thread; ++i) {
      if (coin(rng) < hit_ratio) {
        s.keys.push_back(KeyFromId(rng() % n_loaded, 1));
        ++s.hits;
      } else {
        s.keys.push_back(KeyFromId(rng(), 2));  // namespace 2 is never inserted
      }
    }
  }
  return streams;
}

// Runs `body(t)` on `threads` threads started together; returns the wall time in seconds.
template <typename Body>
double RunThreads(int threads, Body body) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      body(t);
    });
  }
  while (ready.load() < threads) {
  }
  auto start = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  return SecondsSince(start);
}

// Builds `Adapter` from the first `n_loaded` keys with `threads` threads; returns inserts/s.
template <typename Adapter>
std::unique_ptr<Adapter> Build(const IndexBenchOptions& opt, const std::vector<Key>& keys,
                               size_t n_loaded, int threads, CellResult* res) {
  auto adapter = std::make_unique<Adapter>(opt.capacity, n_loaded);
  std::atomic<uint64_t> insert_failures{0};
  double insert_s = RunThreads(threads, [&](int t) {
    size_t begin = n_loaded * t / threads, end = n_loaded * (t + 1) / threads;
    uint64_t failed = 0;
    for (size_t i = begin; i < end; ++i) failed += !adapter->Insert(keys[i], EntryFor(keys[i]));
    insert_failures.fetch_add(failed);
  });
  res->insert_mops = static_cast<double>(n_loaded) / insert_s / 1e6;
  if (insert_failures.load() != 0) res->correct = false;
  return adapter;
}

// One timed lookup round; returns lookups/s in millions and checks every answer. `batch` = 0
// looks keys up one call at a time, otherwise `batch` keys per LookupBatch call.
template <typename Adapter>
double LookupRound(const IndexBenchOptions& opt, const Adapter& adapter, int threads, size_t batch,
                   const std::vector<QueryStream>& queries, CellResult* res) {
  std::atomic<uint64_t> total_ops{0};
  std::atomic<bool> wrong{false};
  const auto span = std::chrono::duration<double>(opt.seconds);
  double lookup_s = RunThreads(threads, [&](int t) {
    const QueryStream& q = queries[t];
    const size_t n = q.keys.size();
    uint64_t done = 0, found = 0, sink = 0;
    std::vector<IndexEntry> out(std::max<size_t>(batch, 1));
    std::unique_ptr<bool[]> hit(new bool[std::max<size_t>(batch, 1)]);
    auto deadline = Clock::now() + span;
    // Whole passes over the stream, so the hit count can be checked exactly.
    for (;;) {
      if (batch == 0) {
        for (size_t i = 0; i < n; ++i) {
          IndexEntry e;
          if (adapter.Lookup(q.keys[i], &e)) {
            ++found;
            sink += e.gva ^ q.keys[i].lo;  // zero for a right entry
          }
        }
      } else if constexpr (requires { adapter.LookupBatch(q.keys, out.data(), hit.get()); }) {
        for (size_t i = 0; i < n; i += batch) {
          const size_t m = std::min(batch, n - i);
          const size_t hits =
              adapter.LookupBatch(std::span<const Key>(&q.keys[i], m), out.data(), hit.get());
          found += hits;
          for (size_t j = 0; j < m; ++j) {
            if (hit[j]) sink += out[j].gva ^ q.keys[i + j].lo;
          }
        }
      } else {
        found = ~uint64_t{0};  // no batched form: never asked for, fail loudly if it is
      }
      done += n;
      if (opt.ops > 0 ? done >= opt.ops : Clock::now() >= deadline) break;
    }
    if (found != q.hits * (done / n) || sink != 0) wrong.store(true);
    total_ops.fetch_add(done);
  });
  if (wrong.load()) res->correct = false;
  res->lookups += total_ops.load();
  return static_cast<double>(total_ops.load()) / lookup_s / 1e6;
}

// Median over rounds of a's lookup rate over b's in the same round.
double MedianRatio(const CellResult& a, const CellResult& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.round_mops.size() && i < b.round_mops.size(); ++i) {
    r.push_back(a.round_mops[i] / b.round_mops[i]);
  }
  return r.empty() ? 0.0 : Median(std::move(r));
}

// One (load, threads) cell for all three structures. The lookup rounds of the three are
// interleaved and each reports its median, so a burst of load from other processes on the
// machine hits all of them alike rather than skewing one.
void RunCell(const IndexBenchOptions& opt, const std::vector<Key>& keys, double load, int threads,
             std::vector<CellResult>* cells) {
  const size_t n_loaded = static_cast<size_t>(load * static_cast<double>(opt.capacity));
  const size_t per_thread = std::min<size_t>(n_loaded, size_t{1} << 18);
  auto queries = MakeQueries(n_loaded, threads, opt.hit_ratio, per_thread);
  // Batched rows share their structure (and its build) with the single-key rows.
  CellResult flat_res, flat_batch_res, mutex_res, mutex_batch_res, tbb_res;
  for (CellResult* r : {&flat_res, &flat_batch_res, &mutex_res, &mutex_batch_res, &tbb_res}) {
    r->threads = threads;
    r->load = load;
  }
  flat_res.structure = std::string(FlatAdapter::kName) + " single";
  flat_batch_res.structure = std::string(FlatAdapter::kName) + " batch";
  mutex_res.structure = std::string(MutexMapAdapter::kName) + " single";
  mutex_batch_res.structure = std::string(MutexMapAdapter::kName) + " batch";
  tbb_res.structure = std::string(TbbAdapter::kName) + " single";
  auto flat = Build<FlatAdapter>(opt, keys, n_loaded, threads, &flat_res);
  auto mutex_map = Build<MutexMapAdapter>(opt, keys, n_loaded, threads, &mutex_res);
  auto tbb = Build<TbbAdapter>(opt, keys, n_loaded, threads, &tbb_res);
  flat_batch_res.insert_mops = flat_res.insert_mops;
  flat_batch_res.correct = flat_res.correct;
  mutex_batch_res.insert_mops = mutex_res.insert_mops;
  mutex_batch_res.correct = mutex_res.correct;
  for (int round = 0; round < opt.rounds; ++round) {
    flat_res.round_mops.push_back(LookupRound(opt, *flat, threads, 0, queries, &flat_res));
    flat_batch_res.round_mops.push_back(
        LookupRound(opt, *flat, threads, opt.batch, queries, &flat_batch_res));
    mutex_res.round_mops.push_back(LookupRound(opt, *mutex_map, threads, 0, queries, &mutex_res));
    mutex_batch_res.round_mops.push_back(
        LookupRound(opt, *mutex_map, threads, opt.batch, queries, &mutex_batch_res));
    tbb_res.round_mops.push_back(LookupRound(opt, *tbb, threads, 0, queries, &tbb_res));
  }
  for (CellResult* r : {&flat_res, &flat_batch_res, &mutex_res, &mutex_batch_res, &tbb_res}) {
    r->lookup_mops = Median(r->round_mops);
    cells->push_back(*r);
  }
}

// The option ranges; InvalidArgument names the first one out of range.
Status CheckIndexBenchOptions(const IndexBenchOptions& opt) {
  if (opt.capacity < 1024 || opt.capacity > (size_t{1} << 30)) {
    return Status::InvalidArgument("--capacity must be in [1024, 2^30]");
  }
  if (!(opt.hit_ratio >= 0 && opt.hit_ratio <= 1)) {
    return Status::InvalidArgument("--hit-ratio must be in [0, 1]");
  }
  if (opt.rounds < 1 || opt.rounds > 100) {
    return Status::InvalidArgument("--rounds must be in [1, 100]");
  }
  if (opt.batch < 1 || opt.batch > 4096) {
    return Status::InvalidArgument("--batch must be in [1, 4096]");
  }
  if (!(opt.seconds > 0) && opt.ops == 0) return Status::InvalidArgument("--seconds must be > 0");
  return Status::OK();
}

// The JSON of every cell of the matrix.
nlohmann::json CellsJson(const std::vector<CellResult>& cells) {
  nlohmann::json matrix = nlohmann::json::array();
  for (const auto& c : cells) {
    matrix.push_back({{"structure", c.structure},
                      {"threads", c.threads},
                      {"load", c.load},
                      {"insert_mops", c.insert_mops},
                      {"lookup_mops", c.lookup_mops},
                      {"round_lookup_mops", c.round_mops},
                      {"lookups", c.lookups},
                      {"correct", c.correct}});
  }
  return matrix;
}

int RunIndexBench(const IndexBenchOptions& opt) {
  if (Status st = CheckIndexBenchOptions(opt); !st.ok()) return ReportArgError("bench index", st);
  const size_t capacity = std::bit_ceil(opt.capacity);
  const double loads[] = {0.5, 0.9};
  const int thread_counts[] = {1, 2};
  const size_t n_max = static_cast<size_t>(0.9 * static_cast<double>(capacity));
  std::vector<Key> keys(n_max);
  for (size_t i = 0; i < n_max; ++i) keys[i] = KeyFromId(i, 1);

  IndexBenchOptions o = opt;
  o.capacity = capacity;
  std::vector<CellResult> cells;
  for (double load : loads) {
    for (int threads : thread_counts) RunCell(o, keys, load, threads, &cells);
  }

  std::printf(
      "index benchmark: capacity %zu slots, hit ratio %.2f, lookups: median of %d rounds "
      "of %s (ratios: median of the per-round ratios)\n"
      "lookup shapes: single = one call per key; batch = %zu keys per call (flat: LookupBatch, "
      "the path FlatStore::Get/Exists use; mutex map: one shared lock per batch)\n",
      capacity, opt.hit_ratio, opt.rounds,
      opt.ops > 0 ? (std::to_string(opt.ops) + " lookups/thread").c_str()
                  : (std::to_string(opt.seconds) + " s").c_str(),
      opt.batch);
  std::printf("%-5s %-8s %-34s %12s %12s %s\n", "load", "threads", "structure", "insert Mops",
              "lookup Mops", "check");
  bool all_correct = true;
  for (const auto& c : cells) {
    std::printf("%-5.2f %-8d %-34s %12.2f %12.2f %s\n", c.load, c.threads, c.structure.c_str(),
                c.insert_mops, c.lookup_mops, c.correct ? "ok" : "WRONG");
    all_correct = all_correct && c.correct;
  }
  auto find = [&](const char* name, const char* shape, int threads,
                  double load) -> const CellResult& {
    const std::string full = std::string(name) + " " + shape;
    for (const auto& c : cells) {
      if (c.structure == full && c.threads == threads && c.load == load) return c;
    }
    return cells.front();
  };
  // Headline: 2 threads, 90% load; flat and the mutex map in the store's (batch) shape.
  const CellResult& flat = find(FlatAdapter::kName, "batch", 2, 0.9);
  const CellResult& flat_single = find(FlatAdapter::kName, "single", 2, 0.9);
  const CellResult& mutex_map = find(MutexMapAdapter::kName, "batch", 2, 0.9);
  const CellResult& mutex_single = find(MutexMapAdapter::kName, "single", 2, 0.9);
  const CellResult& tbb = find(TbbAdapter::kName, "single", 2, 0.9);
  // Each ratio is the median of the per-round ratios: the two rows of a round ran seconds apart,
  // so a burst of load from other processes skews a round's pair together and cancels.
  double flat_vs_mutex = MedianRatio(flat, mutex_map);
  double flat_vs_tbb = MedianRatio(flat, tbb);
  double single_vs_mutex = MedianRatio(flat_single, mutex_single);
  double single_vs_tbb = MedianRatio(flat_single, tbb);
  std::printf(
      "2 threads, 90%% load, batch shape (the store's): flat/mutex map lookups %.2fx (target >= "
      "3), flat/tbb %.2fx (target > 1)\n"
      "2 threads, 90%% load, one key per call: flat/mutex map %.2fx, flat/tbb %.2fx\n",
      flat_vs_mutex, flat_vs_tbb, single_vs_mutex, single_vs_tbb);
  if (std::thread::hardware_concurrency() < 2) {
    std::printf("note: this machine has fewer than 2 hardware threads\n");
  }
  if (opt.json) {
    nlohmann::json j;
    j["capacity"] = capacity;
    j["hit_ratio"] = opt.hit_ratio;
    j["rounds"] = opt.rounds;
    j["batch"] = opt.batch;
    j["lookup_shape"] = "batch";  // of flat_lookup_mops and mutex_map_lookup_mops
    j["flat_lookup_mops"] = flat.lookup_mops;
    j["mutex_map_lookup_mops"] = mutex_map.lookup_mops;
    j["tbb_lookup_mops"] = tbb.lookup_mops;
    j["flat_vs_mutex"] = flat_vs_mutex;
    j["flat_vs_tbb"] = flat_vs_tbb;
    j["flat_single_lookup_mops"] = flat_single.lookup_mops;
    j["mutex_map_single_lookup_mops"] = mutex_single.lookup_mops;
    j["flat_single_vs_mutex_single"] = single_vs_mutex;
    j["flat_single_vs_tbb"] = single_vs_tbb;
    j["flat_insert_mops"] = flat.insert_mops;
    j["mutex_map_insert_mops"] = mutex_map.insert_mops;
    j["tbb_insert_mops"] = tbb.insert_mops;
    j["correct"] = all_correct;
    j["matrix"] = CellsJson(cells);
    std::printf("%s\n", j.dump().c_str());
  }
  if (!all_correct) {
    std::fprintf(stderr, "flatcake bench index: Corruption: a structure returned wrong results\n");
    return 1;
  }
  return 0;
}

}  // namespace

void RegisterIndexBench(CLI::App& bench, int* exit_code) {
  auto opt = std::make_shared<IndexBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "index",
      "Level-1 index throughput: BlockIndex vs std::unordered_map+std::shared_mutex vs "
      "tbb::concurrent_hash_map, inserts and lookups with 1 and 2 threads at 50% and 90% load");
  cmd->add_option("--capacity", opt->capacity,
                  "BlockIndex slots (rounded up to a power of two); the loads are fractions of "
                  "it and the other maps get the same keys")
      ->capture_default_str();
  cmd->add_option("--seconds", opt->seconds, "Duration of each lookup measurement, in seconds")
      ->capture_default_str();
  cmd->add_option("--ops", opt->ops,
                  "Lookups per thread per measurement instead of --seconds (0 = use --seconds; "
                  "rounded up to whole passes over the query stream)")
      ->capture_default_str();
  cmd->add_option("--hit-ratio", opt->hit_ratio,
                  "Fraction of lookups whose key is present (the rest are absent keys)")
      ->capture_default_str();
  cmd->add_option("--rounds", opt->rounds,
                  "Lookup rounds per structure and cell, interleaved across the structures; the "
                  "median is reported, and each ratio is the median of the per-round ratios")
      ->capture_default_str();
  cmd->add_option("--batch", opt->batch,
                  "Keys per call in the batch shape (flat LookupBatch, mutex map one lock per "
                  "batch)")
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print one JSON object with the results on the last line");
  cmd->callback([opt, exit_code] { *exit_code = RunIndexBench(*opt); });
}

}  // namespace flatcake::cli
