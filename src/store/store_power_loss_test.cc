// Power loss: writes not yet synced are dropped or torn, and the pool still serves 0 wrong bytes.
//
// The store runs on a FaultInjectionIoEngine whose write log records every SSD data write with the
// bytes it overwrote; the store's sync listener (FlatStore::TEST_SetSyncListener) tells the test
// when a pool file or the journal became durable, and the test forgets the writes a data sync
// covered. Each round ends in a power loss, either between operations or inside a put (one of its
// writes fails, torn or not); the store is dropped without a sync, and the loss is applied to its
// files: every logged write still unsynced is undone, then each is redone, left undone, torn (a
// random subset of its 4 KiB sectors lands) or replaced by garbage in one sector; the journal
// keeps its synced length and, of the rest, nothing, everything, a torn prefix, or a prefix and
// then garbage. The next round reopens the pool and requires:
//  - every block durable before the loss (its put returned under sync=every, or two interval
//    syncs passed, or recovery served it before) and not freed since is served byte-exact;
//  - nothing durably freed, nothing only in DRAM and nothing lost once is served;
//  - everything else is served byte-exact or not at all: 0 wrong bytes, and a new put and get work.
// Under sync=none nothing new is durable, and commit records outlive their data: those torn
// blocks must be misses (checksum mismatches), never wrong bytes. Deterministic for sync=every
// and none (one thread, the posix engine, a fixed seed).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <random>

#include "io/fault_injection_io_engine.h"
#include "io/posix_io_engine.h"
#include "store/flat_store.h"
#include "testing/durable_pool_model.h"
#include "util/temp_dir.h"

namespace flatcake {

// gtest's name for a SyncMode parameter in failure messages.
void PrintTo(SyncMode mode, std::ostream* os) { *os << SyncModeName(mode); }

namespace {

using testing::Expect;
using testing::kDurableLayouts;
using testing::KeyModel;

constexpr int kRounds = 80;
constexpr uint64_t kSector = 4096;

// What the store has made durable so far, from its sync listener: the journal's durable length
// and the writes not yet synced (through the engine's log), and how many syncs of every pool file
// the interval syncer made (its notices come from its own thread).
class SyncRecorder {
 public:
  struct Snapshot {
    uint64_t journal_durable = 0;
    // Syncs of every pool file completed at the last journal sync. A put that returned when d
    // had completed is durable once this reaches d + 2: sync d + 2 started after the put
    // returned, and the journal sync after it covers the put's record.
    uint64_t data_syncs_at_journal_sync = 0;
    std::vector<LoggedWrite> unsynced;
  };

  explicit SyncRecorder(FaultInjectionIoEngine& engine) : engine_(engine) {}
  // The journal's length at open, all of it durable.
  void Start(uint64_t journal_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    journal_durable_ = journal_bytes;
  }
  void OnSync(const FlatStore::SyncEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.journal) {
      journal_durable_ = e.journal_bytes;
      data_syncs_at_journal_sync_ = data_syncs_;
      return;
    }
    if (e.file == FlatStore::SyncEvent::kAllFiles) {
      engine_.ForgetWrites();
      data_syncs_++;
    } else {
      engine_.ForgetWrites(e.file);
    }
  }
  uint64_t data_syncs() {
    std::lock_guard<std::mutex> lock(mu_);
    return data_syncs_;
  }
  // The state a power loss now would leave.
  Snapshot Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return Snapshot{journal_durable_, data_syncs_at_journal_sync_, engine_.UnsyncedWrites()};
  }

 private:
  std::mutex mu_;
  FaultInjectionIoEngine& engine_;
  uint64_t journal_durable_ = 0;
  uint64_t data_syncs_ = 0, data_syncs_at_journal_sync_ = 0;
};

struct LossCounts {
  uint64_t kept = 0, dropped = 0, torn = 0, garbled = 0;  // unsynced data writes
  uint64_t journal_tails_cut = 0, journal_tails_garbled = 0, journal_tails_holed = 0;
};

std::vector<uint8_t> Garbage(std::mt19937_64& rng, uint64_t n) {
  std::vector<uint8_t> g(n);
  for (auto& b : g) b = static_cast<uint8_t>(rng());
  return g;
}

// Applies a power loss to the pool files and journal of a store already closed.
void ApplyPowerLoss(const std::vector<std::string>& pool_files, const std::string& journal,
                    const SyncRecorder::Snapshot& snap, std::mt19937_64& rng, LossCounts* c) {
  std::vector<int> fds;
  for (const std::string& p : pool_files) {
    fds.push_back(::open(p.c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_GE(fds.back(), 0) << p;
  }
  auto write = [&](const LoggedWrite& w, const uint8_t* p, uint64_t at, uint64_t n) {
    ASSERT_EQ(::pwrite(fds[w.file], p, n, static_cast<off_t>(w.offset + at)),
              static_cast<ssize_t>(n));
  };
  // The files as of their last syncs: every unsynced write undone, newest first.
  for (auto it = snap.unsynced.rbegin(); it != snap.unsynced.rend(); ++it) {
    const std::vector<uint8_t> old =
        it->before.empty() ? Garbage(rng, it->after.size()) : it->before;
    write(*it, old.data(), 0, old.size());
  }
  // Then what the drive happened to keep of each, oldest first.
  for (const LoggedWrite& w : snap.unsynced) {
    const uint64_t n = w.after.size();
    switch (rng() % 10) {
      case 0:
      case 1:
      case 2:
      case 3:
        write(w, w.after.data(), 0, n);
        c->kept++;
        break;
      case 4:
      case 5:
      case 6: c->dropped++; break;
      case 7:
      case 8:
        for (uint64_t s = 0; s < n; s += kSector) {
          if (rng() % 2) write(w, w.after.data() + s, s, std::min(kSector, n - s));
        }
        c->torn++;
        break;
      default: {
        write(w, w.after.data(), 0, n);
        const uint64_t s = (rng() % ((n + kSector - 1) / kSector)) * kSector;
        const std::vector<uint8_t> g = Garbage(rng, std::min(kSector, n - s));
        write(w, g.data(), s, g.size());
        c->garbled++;
      }
    }
  }
  for (int fd : fds) ::close(fd);
  // The journal: its synced length, then of the rest nothing, everything, a torn prefix, a prefix
  // followed by garbage, or everything but some 512-byte pieces, zeros now (written back out of
  // order), so that intact records follow damaged ones.
  struct stat st {};
  ASSERT_EQ(::stat(journal.c_str(), &st), 0);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  ASSERT_LE(snap.journal_durable, size);
  if (size == snap.journal_durable) return;
  const uint64_t cut = snap.journal_durable + rng() % (size - snap.journal_durable);
  const int fd = ::open(journal.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  switch (rng() % 5) {
    case 0: ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(snap.journal_durable)), 0); break;
    case 1: break;
    case 2:
      ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(cut)), 0);
      c->journal_tails_cut++;
      break;
    case 3: {
      const std::vector<uint8_t> g = Garbage(rng, size - cut);
      ASSERT_EQ(::pwrite(fd, g.data(), g.size(), static_cast<off_t>(cut)),
                static_cast<ssize_t>(g.size()));
      c->journal_tails_garbled++;
      break;
    }
    default: {
      constexpr uint64_t kPiece = 512;
      for (uint64_t p = snap.journal_durable / kPiece * kPiece; p < size; p += kPiece) {
        if (rng() % 3 != 0) continue;
        const uint64_t from = std::max(p, snap.journal_durable), to = std::min(p + kPiece, size);
        const std::vector<uint8_t> zeros(to - from, 0);
        ASSERT_EQ(::pwrite(fd, zeros.data(), zeros.size(), static_cast<off_t>(from)),
                  static_cast<ssize_t>(zeros.size()));
      }
      c->journal_tails_holed++;
    }
  }
  ::close(fd);
}

struct Totals {
  uint64_t verified = 0, wrong_bytes = 0, durable_verified = 0, mismatches = 0, skipped = 0;
  uint64_t mid_put_losses = 0, maybe_served = 0, maybe_missing = 0, freed_durably = 0;
  uint64_t freed_back = 0;  // keys freed without a sync that the loss brought back
};

// Where the journal stood when an operation returned: its length and how many rewrites it had.
struct JournalMark {
  uint64_t bytes;
  uint64_t rewrites;
};
// A free durable whatever the syncs seen: Clear's under sync=every or interval.
constexpr uint64_t kDurableFree = UINT64_MAX;

class PowerLossTest : public ::testing::TestWithParam<SyncMode> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    model_.ns = 20;
    o_ = testing::SmallDurablePool(dir_.path());
    o_.sync = GetParam();
    o_.sync_interval_ms = 3;
  }

  // One round: reopen and verify, operate, lose power.
  void Round(int round) {
    auto wrapped = std::make_unique<FaultInjectionIoEngine>(std::make_unique<PosixIoEngine>());
    FaultInjectionIoEngine& fault = *wrapped;
    SyncRecorder rec(fault);  // outlives the store, whose syncer calls it
    auto opened = FlatStore::OpenWithEngine(o_, std::move(wrapped));
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    std::unique_ptr<FlatStore> store = std::move(opened).value();
    const StoreInfo info = store->GetInfo();
    if (round > 0) ASSERT_TRUE(info.recovered);
    t_.skipped += info.skipped_records;

    // What survived the last loss.
    const uint64_t durable_before = model_.Count(Expect::kServed);
    const testing::VerifyCounts c = testing::VerifyAndSettle(*store, model_);
    t_.verified += c.verified;
    t_.wrong_bytes += c.wrong_bytes;
    t_.durable_verified += durable_before - c.missing;
    t_.maybe_served += c.maybe_served;
    t_.maybe_missing += c.maybe_missing;
    t_.mismatches += store->GetStats().checksum_mismatches;
    for (uint64_t id : freed_unsynced_) t_.freed_back += model_.keys[id].expect == Expect::kServed;
    freed_unsynced_.clear();
    ASSERT_EQ(c.wrong_bytes, 0u) << c.first_failure;
    ASSERT_EQ(c.missing, 0u) << c.first_failure;
    ASSERT_EQ(c.resurrected, 0u) << c.first_failure;
    ASSERT_EQ(c.errors, 0u) << c.first_failure;
    ASSERT_EQ(c.present, info.recovered_blocks);

    // Operate, logging every write from here on.
    rec.Start(store->GetStats().journal_bytes);
    fault.StartWriteLog();
    store->TEST_SetSyncListener([&rec](const FlatStore::SyncEvent& e) { rec.OnSync(e); });
    std::vector<uint64_t> live;  // SSD keys the store holds
    for (const auto& [id, e] : model_.keys) {
      const Key k = model_.KeyOf(id);
      if (store->Exists(std::span<const Key>(&k, 1)) == 1) live.push_back(id);
    }
    // id -> the journal's length once the operation that freed it returned (its free record is
    // durable once the journal is synced that far, or rewritten since).
    std::map<uint64_t, JournalMark> freed;
    std::map<uint64_t, uint64_t> published;  // id -> data syncs when its put returned
    // The pool keeps working: a put read back at once.
    ASSERT_TRUE(PutAndCheck(*store, rec, &live, &published, /*read_back=*/true));
    const bool mid_put = rng_() % 2 == 0;
    const int ops = 2 + static_cast<int>(rng_() % 10);
    for (int i = 0; i <= ops; ++i) {
      const uint32_t r = static_cast<uint32_t>(rng_() % 100);
      bool durable_free = false;
      if (i == ops) {
        if (!mid_put) break;
        // The last put fails at one of its writes, torn or not, and the power goes.
        FaultSpec spec;
        spec.kind = rng_() % 2 ? FaultSpec::Kind::kShort : FaultSpec::Kind::kError;
        spec.every_nth = 1 + rng_() % 6;
        spec.max_faults = 1;
        fault.SetWriteFault(spec);
        if (!PutAndCheck(*store, rec, &live, &published, false, MediaType::kSsd)) {
          t_.mid_put_losses++;
        }
        fault.ClearWrites();
      } else if (r < 3) {
        store->Clear();
        durable_free = o_.sync != SyncMode::kNone;  // Clear syncs its record before it returns
      } else if (r < 20) {
        store->Reclaim(MediaType::kSsd, 0.2 + 0.1 * static_cast<double>(rng_() % 4));
      } else if (r < 25) {
        store->Reclaim(MediaType::kDram, 0.2);
      } else {
        PutAndCheck(*store, rec, &live, &published, false);
      }
      // Keys freed by it: gone for good once the journal is durable past their free record.
      const StoreStats stats = store->GetStats();
      const JournalMark mark{durable_free ? kDurableFree : stats.journal_bytes,
                             stats.journal_rewrites};
      std::erase_if(live, [&](uint64_t id) {
        const Key k = model_.KeyOf(id);
        if (store->Exists(std::span<const Key>(&k, 1)) == 1) return false;
        freed[id] = mark;
        return true;
      });
    }

    // Power loss.
    const SyncRecorder::Snapshot snap = rec.Take();
    for (const auto& [id, d0] : published) {
      // Two interval syncs after the put returned, the second one's data sync started after it.
      if (snap.data_syncs_at_journal_sync >= d0 + 2) model_.keys[id].expect = Expect::kServed;
    }
    const uint64_t rewrites = store->GetStats().journal_rewrites;
    for (const auto& [id, mark] : freed) {
      // (A rewrite writes only the live scopes, and makes them durable.)
      const bool durably = mark.bytes == kDurableFree || rewrites > mark.rewrites ||
                           snap.journal_durable >= mark.bytes;
      t_.freed_durably += durably;
      KeyModel::Entry& e = model_.keys[id];
      if (e.expect == Expect::kNotServed) continue;  // lost before: it stays lost
      if (!durably) freed_unsynced_.push_back(id);
      e.expect = durably ? Expect::kNotServed : Expect::kMaybe;
    }
    const std::vector<std::string> files = store->ssd_pool()->paths();
    store.reset();
    ApplyPowerLoss(files, info.journal_path, snap, rng_, &loss_);
  }

  // Puts a batch of new keys (medium: mostly SSD, unless given) and settles what it knows of
  // them: under sync=every a put that returned is durable; DRAM keys and those a failed put did
  // not publish never are. With `read_back`, reads them back at once. Returns the put's success.
  bool PutAndCheck(FlatStore& store, SyncRecorder& rec, std::vector<uint64_t>* live,
                   std::map<uint64_t, uint64_t>* published, bool read_back,
                   std::optional<MediaType> medium = std::nullopt) {
    const uint8_t li = static_cast<uint8_t>(rng_() % kDurableLayouts.size());
    const KvLayout& layout = kDurableLayouts[li];
    const uint32_t n = 1 + static_cast<uint32_t>(rng_() % 10);
    std::vector<Key> keys;
    for (uint32_t i = 0; i < n; ++i) keys.push_back(model_.KeyOf(next_id_ + i));
    model_.Set(next_id_, n, Expect::kMaybe, li);
    HostBlocks src(layout, n);
    src.Fill(keys);
    WriteHints h;
    if (rng_() % 2) h.session = "s" + std::to_string(li);
    h.force_medium = medium ? *medium : rng_() % 5 ? MediaType::kSsd : MediaType::kDram;
    auto put = store.Put(keys, layout, src.buffers(), h);
    const uint64_t data_syncs = rec.data_syncs();
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t id = next_id_ + i;
      const LookupResult lr = store.Lookup(std::span<const Key>(&keys[i], 1));
      KeyModel::Entry& e = model_.keys[id];
      if (lr.leading_hits == 0 || lr.slowest_medium == MediaType::kDram) {
        e.expect = Expect::kNotServed;  // never committed on SSD
        continue;
      }
      live->push_back(id);
      if (o_.sync == SyncMode::kEvery) e.expect = Expect::kServed;
      (*published)[id] = data_syncs;
    }
    next_id_ += n;
    if (read_back && put.ok()) {
      HostBlocks dst(layout, n);
      auto got = store.Get(keys, layout, dst.buffers());
      EXPECT_TRUE(got.ok() && got->hits == n && dst.bytes == src.bytes);
    }
    return put.ok();
  }

  TempDir dir_;
  StoreOptions o_;
  KeyModel model_;
  std::mt19937_64 rng_{20 + static_cast<uint64_t>(GetParam())};
  uint64_t next_id_ = 1;
  Totals t_;
  LossCounts loss_;
  std::vector<uint64_t> freed_unsynced_;  // at the last loss
};

TEST_P(PowerLossTest, UnsyncedWritesLostOrTornServeNoWrongBytes) {
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round <= kRounds; ++round) {
    Round(round);
    ASSERT_FALSE(HasFailure()) << "round " << round;
  }
  std::printf(
      "power loss (sync=%s): %d losses (%lu inside a put), blocks verified %lu (%lu durable "
      "ones), wrong bytes %lu, checksum mismatches %lu, skipped records %lu, unsynced writes "
      "kept %lu / dropped %lu / torn %lu / garbled %lu, journal tails cut %lu / garbled %lu / "
      "holed %lu, "
      "keys freed durably %lu (unsynced frees undone by the loss %lu), other keys served %lu / "
      "lost "
      "%lu, %.1f s\n",
      std::string(SyncModeName(GetParam())).c_str(), kRounds, (unsigned long)t_.mid_put_losses,
      (unsigned long)t_.verified, (unsigned long)t_.durable_verified, (unsigned long)t_.wrong_bytes,
      (unsigned long)t_.mismatches, (unsigned long)t_.skipped, (unsigned long)loss_.kept,
      (unsigned long)loss_.dropped, (unsigned long)loss_.torn, (unsigned long)loss_.garbled,
      (unsigned long)loss_.journal_tails_cut, (unsigned long)loss_.journal_tails_garbled,
      (unsigned long)loss_.journal_tails_holed, (unsigned long)t_.freed_durably,
      (unsigned long)t_.freed_back, (unsigned long)t_.maybe_served, (unsigned long)t_.maybe_missing,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  EXPECT_EQ(t_.wrong_bytes, 0u);
  // Not vacuous: losses tore data and journals, puts died mid-write, and something was served.
  EXPECT_GT(t_.mid_put_losses, 0u);
  EXPECT_GT(loss_.dropped + loss_.torn + loss_.garbled, 0u);
  EXPECT_GT(t_.verified, 0u);
  if (GetParam() == SyncMode::kEvery) {
    // Every record (commits and reclamation's frees) is synced before its operation returns, so a
    // loss leaves no unsynced journal tail and undoes no free.
    EXPECT_GT(t_.durable_verified, 100u);
    EXPECT_GT(t_.freed_durably, 0u);
    EXPECT_EQ(t_.freed_back, 0u);
  } else {
    EXPECT_GT(loss_.journal_tails_cut + loss_.journal_tails_garbled, 0u);
    EXPECT_GT(t_.skipped, 0u);
  }
  if (GetParam() == SyncMode::kNone) {
    // Records outlived their data, and those blocks were caught by their checksums.
    EXPECT_GT(t_.mismatches, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(SyncModes, PowerLossTest,
                         ::testing::Values(SyncMode::kEvery, SyncMode::kInterval, SyncMode::kNone),
                         [](const ::testing::TestParamInfo<SyncMode>& info) {
                           return std::string(SyncModeName(info.param));
                         });

}  // namespace
}  // namespace flatcake
