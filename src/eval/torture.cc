#include "eval/torture.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "io/posix_io_engine.h"
#include "store/flat_store.h"
#include "testing/durable_pool_model.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake::eval {
namespace {

using testing::kDurableLayouts;

// The keys: kChains chains of kChainLen ids, chain c stored as kDurableLayouts[c % 4]. About five
// times what the pool holds, so reclamation runs all the time and freed keys are put again.
constexpr uint32_t kChains = 64;
constexpr uint32_t kChainLen = 16;
constexpr uint32_t kNumKeys = kChains * kChainLen;
constexpr uint64_t kNamespace = 0x70127;
constexpr uint64_t kPhaseOps = 48;  // operations between changes of the fault rates
constexpr size_t kMaxFailures = 20;

constexpr std::array<std::string_view, kNumTortureOps> kOpNames = {"put",     "lookup", "restore",
                                                                   "reclaim", "clear",  "reopen"};

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// What the model knows of a key.
enum class KeyState : uint8_t {
  kAbsent,  // not in the store: never served
  kLive,    // published: present, and served byte-exact
  kTorn,    // published by a put whose write was torn and acknowledged: present, served
            // byte-exact or missed
};

struct KeyModel {
  KeyState state = KeyState::kAbsent;
  MediaType medium = MediaType::kDram;
};

// The faults one operation met.
struct StepFaults {
  uint64_t count = 0;
  bool harmful = false;  // one that may fail the operation (any but a delay)
  bool silent = false;   // an acknowledged torn write
};

class Torture {
 public:
  Torture(const TortureOptions& options, std::string dir, TortureReport* report)
      : options_(options), dir_(std::move(dir)), r_(*report), rng_(options.seed) {
    r_.seed = options.seed;
  }

  Status Run() {
    const auto start = std::chrono::steady_clock::now();
    FC_RETURN_IF_ERROR(Open(/*first=*/true));
    while (r_.faults_injected < options_.faults && store_) {
      if (r_.ops % kPhaseOps == 0) NewRates();
      Step();
      if (options_.progress && r_.ops % options_.progress_every == 0) {
        options_.progress(r_.ops, r_.faults_injected);
      }
    }
    store_.reset();
    r_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options_.progress) options_.progress(r_.ops, r_.faults_injected);
    return Status::OK();
  }

 private:
  static Key KeyOf(uint32_t id) { return KeyFromId(id, kNamespace); }
  static uint8_t LayoutIndexOf(uint32_t id) { return (id / kChainLen) % kDurableLayouts.size(); }
  uint64_t Draw(uint64_t n) { return rng_() % n; }
  void Note(uint64_t v) { r_.digest = Mix(r_.digest ^ v); }

  void Fail(const std::string& what) {
    r_.unexpected_errors++;
    if (r_.failures.size() < kMaxFailures) {
      r_.failures.push_back("op " + std::to_string(r_.ops) + " (" + what_ + "): " + what);
    }
  }

  Status Open(bool first) {
    StoreOptions o = testing::SmallDurablePool(dir_);
    o.index_capacity = 2 * kNumKeys;
    o.read_window_bytes = o.ssd_bytes;  // a restore never waits for the window
    // Mostly without a sync per put: without power losses the modes differ only in their syncs,
    // and each fdatasync costs milliseconds on a disk.
    static constexpr SyncMode kModes[] = {SyncMode::kEvery, SyncMode::kInterval,
                                          SyncMode::kInterval, SyncMode::kNone, SyncMode::kNone};
    o.sync = kModes[Draw(std::size(kModes))];
    o.sync_interval_ms = 5;
    o.wipe = first;
    // The posix engine moves at most this much per system call: short transfers, continued.
    const uint64_t max_chunk = Draw(2) ? 0 : 4096 * (1 + Draw(8));
    auto engine =
        std::make_unique<FaultInjectionIoEngine>(std::make_unique<PosixIoEngine>(max_chunk));
    fault_ = engine.get();
    auto opened = FlatStore::OpenWithEngine(o, std::move(engine));
    if (!opened.ok()) {
      fault_ = nullptr;
      return opened.status().WithContext("open the store");
    }
    store_ = std::move(opened).value();
    fault_->SetRandomFaults(rates_);
    return Status::OK();
  }

  // New fault rates: each kind at one of a few rates (often 0), and now and then none at all.
  void NewRates() {
    static constexpr double kRates[] = {0, 0, 0, 0.005, 0.02, 0.05, 0.15, 0.4};
    rates_ = RandomFaults{};
    rates_.seed = options_.seed;
    if (Draw(10) != 0) {
      for (size_t k = 0; k < kNumFaultKinds; ++k) {
        // A put issues several writes where a restore issues one coalesced read: reads get
        // higher rates, so that both directions see faults.
        const double scale = IsRead(static_cast<FaultKind>(k)) ? 3 : 1;
        rates_.rate[k] = scale * kRates[Draw(std::size(kRates))];
      }
    }
    // Each direction's rates add up to at most 0.8.
    for (bool read : {true, false}) {
      double sum = 0;
      for (size_t k = 0; k < kNumFaultKinds; ++k) {
        if (IsRead(static_cast<FaultKind>(k)) == read) sum += rates_.rate[k];
      }
      if (sum <= 0.8) continue;
      for (size_t k = 0; k < kNumFaultKinds; ++k) {
        if (IsRead(static_cast<FaultKind>(k)) == read) rates_.rate[k] *= 0.8 / sum;
      }
    }
    if (fault_) fault_->SetRandomFaults(rates_);
  }
  static bool IsRead(FaultKind k) {
    return k == FaultKind::kReadEio || k == FaultKind::kShortRead || k == FaultKind::kDelayedRead;
  }

  void Step() {
    fault_->SetEpoch(r_.ops);
    const uint64_t roll = Draw(100);
    TortureOp op = roll < 40   ? TortureOp::kPut
                   : roll < 55 ? TortureOp::kLookup
                   : roll < 90 ? TortureOp::kRestore
                   : roll < 96 ? TortureOp::kReclaim
                   : roll < 97 ? TortureOp::kClear
                               : TortureOp::kReopen;
    what_ = std::string(kOpNames[static_cast<size_t>(op)]);
    Note(static_cast<uint64_t>(op));
    switch (op) {
      case TortureOp::kPut: StepPut(); break;
      case TortureOp::kLookup: StepLookup(); break;
      case TortureOp::kRestore: StepRestore(); break;
      case TortureOp::kReclaim: StepReclaim(); break;
      case TortureOp::kClear: StepClear(); break;
      case TortureOp::kReopen: StepReopen(); break;
    }
    r_.ops_by_kind[static_cast<size_t>(op)]++;
    r_.ops++;
    if (store_ && r_.ops % 64 == 0) Sweep(/*may_free=*/false, /*all=*/true);
  }

  // The faults the operation met (its delayed ops all passed on by now).
  StepFaults Collect() {
    fault_->DrainDelayed();
    StepFaults f;
    for (const InjectedFault& i : fault_->TakeInjected()) {
      f.count++;
      f.harmful = f.harmful || !FaultIsTransparent(i.kind);
      f.silent = f.silent || FaultDamagesSilently(i.kind);
      r_.faults_by_kind[static_cast<size_t>(i.kind)]++;
      r_.faults_injected++;
      Note(static_cast<uint64_t>(i.kind) ^ (uint64_t{i.file} << 8) ^ (i.offset << 20) ^
           (i.len << 44));
    }
    return f;
  }

  bool Present(uint32_t id, MediaType* medium = nullptr) {
    const Key k = KeyOf(id);
    const LookupResult lr = store_->Lookup(std::span<const Key>(&k, 1));
    if (medium) *medium = lr.slowest_medium;
    return lr.leading_hits == 1;
  }

  uint64_t ScopesReclaimed() {
    const StoreStats s = store_->GetStats();
    return s.dram.scopes_reclaimed + s.ssd.scopes_reclaimed;
  }

  // Checks presence against the model: a present key must stay present unless the operation may
  // free (then it is absent from now on); an absent one must stay absent. `all`: every key, else
  // the present ones.
  void Sweep(bool may_free, bool all) {
    for (uint32_t id = 0; id < kNumKeys; ++id) {
      KeyModel& m = keys_[id];
      if (m.state == KeyState::kAbsent && !all) continue;
      const bool present = Present(id);
      if (present == (m.state != KeyState::kAbsent)) continue;
      if (present) {
        Fail("key " + std::to_string(id) + " is present but was never published or was freed");
        m.state = KeyState::kLive;
        (void)Present(id, &m.medium);
      } else if (may_free) {
        r_.blocks_reclaimed++;
        m.state = KeyState::kAbsent;
      } else {
        Fail("key " + std::to_string(id) + " was published and vanished");
        m.state = KeyState::kAbsent;
      }
    }
  }

  struct Range {
    uint32_t first;
    uint32_t n;
  };
  // A range of one chain; `recent`: mostly one of the chains put last.
  Range PickRange(uint32_t max_n, bool recent = false) {
    auto chain = static_cast<uint32_t>(Draw(kChains));
    if (recent && Draw(10) < 6) chain = recent_[Draw(recent_.size())];
    const auto at = static_cast<uint32_t>(Draw(kChainLen));
    const uint32_t n = 1 + static_cast<uint32_t>(Draw(std::min(kChainLen - at, max_n)));
    Note((uint64_t{chain} << 32) ^ (uint64_t{at} << 16) ^ n);
    what_ += " keys " + std::to_string(chain * kChainLen + at) + "+" + std::to_string(n);
    return {chain * kChainLen + at, n};
  }

  std::vector<Key> KeysOf(Range r) {
    std::vector<Key> keys;
    for (uint32_t i = 0; i < r.n; ++i) keys.push_back(KeyOf(r.first + i));
    return keys;
  }

  void StepPut() {
    const Range r = PickRange(8);
    recent_[next_recent_++ % recent_.size()] = r.first / kChainLen;
    const KvLayout& layout = kDurableLayouts[LayoutIndexOf(r.first)];
    const std::vector<Key> keys = KeysOf(r);
    HostBlocks src(layout, r.n);
    src.Fill(keys);
    WriteHints h;
    const uint64_t chain = r.first / kChainLen;
    if (Draw(4) != 0) h.session = "s" + std::to_string(chain % 8);
    if (r.first % kChainLen > 0 && Draw(2)) h.prefix_tail = KeyOf(r.first - 1);
    const uint64_t medium = Draw(100);
    if (medium < 60) h.force_medium = MediaType::kSsd;
    if (medium >= 60 && medium < 85) h.force_medium = MediaType::kDram;
    uint32_t before = 0;
    for (uint32_t i = 0; i < r.n; ++i) before += keys_[r.first + i].state != KeyState::kAbsent;
    const uint64_t reclaimed = ScopesReclaimed();
    auto put = store_->Put(keys, layout, src.buffers(), h);
    const StepFaults f = Collect();
    Note(static_cast<uint64_t>(put.status().code()));
    const bool freed = ScopesReclaimed() != reclaimed;
    if (put.ok()) {
      Note(put->written ^ (uint64_t{put->already_present} << 32));
      if (put->already_present != before || put->written != r.n - before) {
        Fail("put wrote " + std::to_string(put->written) + " and skipped " +
             std::to_string(put->already_present) + " of " + std::to_string(r.n) + " keys, " +
             std::to_string(before) + " of them present before");
      }
    } else if (!f.harmful) {
      Fail("put failed without a fault: " + put.status().ToString());
    } else {
      r_.failed_puts++;
    }
    // The keys this put wrote: present now (a failed put: a prefix of them, its published
    // segments), torn when a write was torn and acknowledged.
    bool gap = false;
    for (uint32_t i = 0; i < r.n; ++i) {
      KeyModel& m = keys_[r.first + i];
      if (m.state != KeyState::kAbsent) continue;
      MediaType where;
      const bool present = Present(r.first + i, &where);
      Note(present);
      if (present && gap) Fail("a failed put published more than a prefix of its blocks");
      if (!present) {
        gap = true;
        if (put.ok()) Fail("key " + std::to_string(r.first + i) + " put but not present");
        continue;
      }
      m.state = f.silent ? KeyState::kTorn : KeyState::kLive;
      m.medium = where;
    }
    Sweep(freed, /*all=*/false);
  }

  void StepLookup() {
    const Range r = PickRange(kChainLen);
    const std::vector<Key> keys = KeysOf(r);
    const LookupResult lr = store_->Lookup(keys);
    (void)Collect();
    Note(lr.leading_hits);
    uint32_t want = 0;
    uint64_t bytes = 0;
    MediaType slowest = MediaType::kDram;
    for (; want < r.n && keys_[r.first + want].state != KeyState::kAbsent; ++want) {
      bytes += kDurableLayouts[LayoutIndexOf(r.first)].block_bytes();
      slowest = std::max(slowest, keys_[r.first + want].medium);
    }
    if (lr.leading_hits != want || lr.dram_bytes + lr.ssd_bytes != bytes ||
        lr.slowest_medium != slowest) {
      Fail("lookup found " + std::to_string(lr.leading_hits) + " leading hits (" +
           std::to_string(lr.dram_bytes + lr.ssd_bytes) + " bytes), the model " +
           std::to_string(want) + " (" + std::to_string(bytes) + " bytes)");
    }
  }

  void StepRestore() {
    const Range r = PickRange(kChainLen, /*recent=*/true);
    const std::vector<Key> keys = KeysOf(r);
    const uint8_t li = LayoutIndexOf(r.first);
    // Now and then the wrong layout: refused when anything is present.
    const bool wrong_layout = Draw(40) == 0;
    const KvLayout& layout = kDurableLayouts[wrong_layout ? (li + 1) % kDurableLayouts.size() : li];
    HostBlocks dst(layout, r.n);
    std::memset(dst.bytes.data(), 0xA5, dst.bytes.size());
    uint32_t present = 0, torn = 0;
    for (uint32_t i = 0; i < r.n; ++i) {
      present += keys_[r.first + i].state != KeyState::kAbsent;
      torn += keys_[r.first + i].state == KeyState::kTorn;
    }
    auto handle = store_->Restore(keys, layout, dst.buffers());
    Result<GetResult> got = handle.status();
    if (handle.ok()) {
      got = (*handle)->Wait();
      handle->reset();
    }
    const StepFaults f = Collect();
    Note(static_cast<uint64_t>(got.status().code()));
    if (wrong_layout && present > 0) {
      if (got.status().code() != StatusCode::kInvalidArgument) {
        Fail("a restore with another layout than the stored one was not refused: " +
             got.status().ToString());
      }
      Sweep(false, false);
      return;
    }
    if (!got.ok()) {
      if (!f.harmful) return Fail("restore failed without a fault: " + got.status().ToString());
      r_.failed_restores++;
      return Sweep(false, false);
    }
    Note(got->hits ^ (uint64_t{got->corrupt} << 32));
    std::vector<uint8_t> want(layout.block_bytes());
    uint32_t hits = 0;
    for (uint32_t i = 0; i < r.n; ++i) {
      KeyModel& m = keys_[r.first + i];
      if (!got->found[i]) {
        if (m.state == KeyState::kTorn) r_.torn_blocks_missed++;
        if (m.state == KeyState::kLive && !f.harmful) {
          Fail("key " + std::to_string(r.first + i) + " is present but the restore missed it");
        }
        continue;
      }
      hits++;
      FillBlock(keys[i], want.data(), want.size());
      uint64_t bad = 0;
      for (size_t b = 0; b < want.size(); ++b) bad += want[b] != dst.block(i)[b];
      r_.wrong_bytes += bad;
      r_.blocks_verified++;
      if (bad > 0)
        Fail("key " + std::to_string(r.first + i) + ": " + std::to_string(bad) +
             " wrong bytes served");
      if (m.state == KeyState::kAbsent) {
        Fail("key " + std::to_string(r.first + i) + " was served but is not in the store");
      }
      if (m.state == KeyState::kTorn && bad == 0) m.state = KeyState::kLive;  // its bytes held
    }
    if (hits != got->hits)
      Fail("the restore counted " + std::to_string(got->hits) + " hits of " + std::to_string(hits));
    if (got->corrupt > torn) {
      Fail(std::to_string(got->corrupt) + " checksum mismatches among " + std::to_string(torn) +
           " torn blocks");
    }
    Sweep(false, false);
  }

  void StepReclaim() {
    const MediaType medium = Draw(3) ? MediaType::kSsd : MediaType::kDram;
    const double target = static_cast<double>(Draw(10)) / 10;
    Note(static_cast<uint64_t>(medium) ^ static_cast<uint64_t>(target * 10) << 8);
    what_ +=
        std::string(medium == MediaType::kSsd ? " ssd" : " dram") + " to " + std::to_string(target);
    const StoreStats before = store_->GetStats();
    const uint64_t freed = store_->Reclaim(medium, target);
    (void)Collect();
    Note(freed);
    const StoreStats after = store_->GetStats();
    const MediumStats& b = medium == MediaType::kSsd ? before.ssd : before.dram;
    const MediumStats& a = medium == MediaType::kSsd ? after.ssd : after.dram;
    const auto goal = static_cast<uint64_t>(target * static_cast<double>(a.capacity_bytes));
    if (a.used_bytes > goal || (b.used_bytes > goal && freed == 0)) {
      Fail("reclaim to " + std::to_string(goal) + " bytes left " + std::to_string(a.used_bytes) +
           " of " + std::to_string(b.used_bytes) + " used, freeing " + std::to_string(freed));
    }
    Sweep(/*may_free=*/true, /*all=*/false);
  }

  void StepClear() {
    store_->Clear();
    (void)Collect();
    for (uint32_t id = 0; id < kNumKeys; ++id) {
      if (keys_[id].state != KeyState::kAbsent) r_.blocks_reclaimed++;
      keys_[id].state = KeyState::kAbsent;
    }
    Sweep(false, /*all=*/true);
  }

  void StepReopen() {
    (void)Collect();
    store_.reset();
    fault_ = nullptr;
    if (Status st = Open(/*first=*/false); !st.ok()) return Fail(st.ToString());
    Note(store_->GetInfo().recovered_blocks);
    // What a restart keeps: SSD blocks; the anonymous DRAM arena starts empty.
    for (uint32_t id = 0; id < kNumKeys; ++id) {
      KeyModel& m = keys_[id];
      if (m.state != KeyState::kAbsent && m.medium == MediaType::kDram) m.state = KeyState::kAbsent;
      if (m.state != KeyState::kAbsent) r_.blocks_recovered++;
    }
    Sweep(/*may_free=*/false, /*all=*/true);
    // Every recovered block, read back without faults.
    fault_->ClearRandomFaults();
    for (uint32_t chain = 0; chain < kChains; ++chain) VerifyChain(chain);
    fault_->SetRandomFaults(rates_);
  }

  // Restores the present keys of `chain` (faults off) and checks their bytes.
  void VerifyChain(uint32_t chain) {
    std::vector<uint32_t> ids;
    for (uint32_t id = chain * kChainLen; id < (chain + 1) * kChainLen; ++id) {
      if (keys_[id].state != KeyState::kAbsent) ids.push_back(id);
    }
    if (ids.empty()) return;
    const KvLayout& layout = kDurableLayouts[LayoutIndexOf(ids[0])];
    std::vector<Key> keys;
    for (uint32_t id : ids) keys.push_back(KeyOf(id));
    HostBlocks dst(layout, ids.size());
    auto got = store_->Get(keys, layout, dst.buffers());
    (void)Collect();
    if (!got.ok())
      return Fail("reading back chain " + std::to_string(chain) + ": " + got.status().ToString());
    std::vector<uint8_t> want(layout.block_bytes());
    for (size_t i = 0; i < ids.size(); ++i) {
      KeyModel& m = keys_[ids[i]];
      if (!got->found[i]) {
        if (m.state == KeyState::kLive) {
          Fail("key " + std::to_string(ids[i]) + " survived the reopen but is not served");
        } else {
          r_.torn_blocks_missed++;
        }
        continue;
      }
      FillBlock(keys[i], want.data(), want.size());
      uint64_t bad = 0;
      for (size_t b = 0; b < want.size(); ++b) bad += want[b] != dst.block(i)[b];
      r_.wrong_bytes += bad;
      r_.blocks_verified++;
      if (bad > 0) Fail("key " + std::to_string(ids[i]) + ": wrong bytes after the reopen");
    }
  }

  const TortureOptions& options_;
  const std::string dir_;
  TortureReport& r_;
  std::mt19937_64 rng_;
  RandomFaults rates_;
  std::unique_ptr<FlatStore> store_;
  FaultInjectionIoEngine* fault_ = nullptr;  // store_'s engine
  std::vector<KeyModel> keys_ = std::vector<KeyModel>(kNumKeys);
  std::string what_;                  // the operation running, for failure messages
  std::array<uint32_t, 8> recent_{};  // the chains put last
  uint64_t next_recent_ = 0;
};

}  // namespace

std::string_view TortureOpName(TortureOp op) { return kOpNames[static_cast<size_t>(op)]; }

Result<TortureReport> RunTorture(const TortureOptions& options) {
  if (options.faults == 0) return Status::InvalidArgument("--faults must be at least 1");
  TempDir dir("flatcake-torture", options.dir);
  if (!dir.ok()) {
    return Status::IOError("cannot create a pool directory under '" +
                           (options.dir.empty() ? std::string("$TMPDIR or /tmp") : options.dir) +
                           "'");
  }
  TortureReport report;
  Torture t(options, dir.path(), &report);
  FC_RETURN_IF_ERROR(t.Run());
  return report;
}

}  // namespace flatcake::eval
