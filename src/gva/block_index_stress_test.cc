// Stress test of BlockIndex: writers, readers and a reclaimer running together for a few seconds
// (FLATCAKE_STRESS_SECONDS overrides the default of 5). Meant to run under ThreadSanitizer too.
//
// Keys are grouped into scopes of kBlocksPerScope keys. A scope cycles through
//   OPEN(gen) -> SEALED(gen) -> RECLAIMING(gen) -> OPEN(gen + 1) ...
// Writers fill OPEN scopes, all writers racing on the same keys (Reserve decides), sometimes
// aborting a reservation and retrying; the writer whose Publish completes the scope seals it. The
// reclaimer erases a SEALED scope's keys with a generation check. Writers pin a scope while they
// insert so the reclaimer never erases a generation that a writer may still add to (the store
// does the same with its scope pins). Every entry is derived from its key and generation, so
// readers can tell a torn or foreign entry from the right one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gva/block_index.h"

namespace flatcake {
namespace {

constexpr uint32_t kScopes = 48;
constexpr uint32_t kBlocksPerScope = 128;
constexpr int kWriters = 3;
constexpr int kReaders = 3;

enum Phase : uint64_t { kOpen = 0, kSealed = 1, kReclaiming = 2 };

Key KeyOf(uint32_t scope, uint32_t gen, uint32_t block) {
  return KeyFromId((uint64_t{scope} << 48) | (uint64_t{gen} << 16) | block, 0x5eed);
}

IndexEntry EntryOf(const Key& k, uint32_t scope, uint32_t gen, uint32_t block) {
  IndexEntry e;
  e.gva = k.lo;
  e.layer_stride = k.hi;
  e.checksum = k.lo * 31 + k.hi;
  e.scope_id = scope;
  e.scope_gen = gen;
  e.segment = gen;
  e.block = block;
  return e;
}

struct ScopeState {
  std::atomic<uint64_t> word{0};  // gen << 2 | phase
  std::atomic<uint32_t> pins{0};
  std::atomic<uint32_t> published{0};  // keys of the current generation published so far
};

uint64_t Word(uint64_t gen, Phase phase) { return gen << 2 | phase; }
uint32_t GenOf(uint64_t word) { return static_cast<uint32_t>(word >> 2); }
Phase PhaseOf(uint64_t word) { return static_cast<Phase>(word & 3); }

double StressSeconds() {
  const char* env = std::getenv("FLATCAKE_STRESS_SECONDS");
  if (env != nullptr) {
    double s = std::atof(env);
    if (s > 0) return s;
  }
  return 5.0;
}

TEST(BlockIndexStress, WritersReadersAndReclaimer) {
  // Room for every scope at once at ~37% load, so kFull never happens; churn leaves tombstones.
  BlockIndex index(16384);
  std::vector<ScopeState> scopes(kScopes);
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> hot{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> published{0}, lost_races{0}, aborts{0}, hits{0}, misses{0}, reclaimed{0};
  auto fail = [&](const std::string& what) {
    if (failures.fetch_add(1) < 10) ADD_FAILURE() << what;
  };

  auto writer = [&](int id) {
    std::mt19937_64 rng(1000 + id);
    while (!stop.load(std::memory_order_relaxed)) {
      // Half the time, the scope the reclaimer reopened last: writers then race on its keys.
      uint32_t s = rng() % 2 == 0 ? hot.load(std::memory_order_relaxed)
                                  : static_cast<uint32_t>(rng() % kScopes);
      ScopeState& scope = scopes[s];
      scope.pins.fetch_add(1);
      uint64_t w = scope.word.load();
      if (PhaseOf(w) != kOpen) {
        scope.pins.fetch_sub(1);
        std::this_thread::yield();
        continue;
      }
      uint32_t gen = GenOf(w);
      uint32_t start = static_cast<uint32_t>(rng() % kBlocksPerScope);
      for (uint32_t n = 0; n < kBlocksPerScope; ++n) {
        uint32_t b = (start + n) % kBlocksPerScope;
        Key k = KeyOf(s, gen, b);
        BlockIndex::Reservation r;
        auto o = index.Reserve(k, &r);
        if (o == BlockIndex::ReserveOutcome::kReserved && rng() % 16 == 0) {
          index.Abort(r);  // a failed write; try again right away
          aborts.fetch_add(1, std::memory_order_relaxed);
          o = index.Reserve(k, &r);
        }
        if (o == BlockIndex::ReserveOutcome::kFull) {
          fail("kFull at a load that never exceeds the limit");
          continue;
        }
        if (o == BlockIndex::ReserveOutcome::kExists) {
          lost_races.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        IndexEntry probe;
        if (index.Lookup(k, &probe)) fail("a reserved key is visible before Publish");
        index.Publish(r, EntryOf(k, s, gen, b));
        published.fetch_add(1, std::memory_order_relaxed);
        if (b % 8 == 0) std::this_thread::yield();  // let other writers into this scope
        if (scope.published.fetch_add(1) + 1 == kBlocksPerScope) {
          uint64_t open = Word(gen, kOpen);
          if (!scope.word.compare_exchange_strong(open, Word(gen, kSealed))) {
            fail("scope changed while a writer held a pin");
          }
        }
      }
      scope.pins.fetch_sub(1);
    }
  };

  // Odd readers use the batched lookups: the key in the middle of a batch of neighbours (other
  // scopes' keys, which may be mid-insert or mid-erase), alternately LookupBatch and
  // LookupPrefix.
  auto lookup = [&](int id, std::mt19937_64& rng, const Key& k, IndexEntry* e) {
    if (id % 2 == 0) return index.Lookup(k, e);
    Key keys[5];
    for (Key& other : keys) {
      other = KeyOf(static_cast<uint32_t>(rng() % kScopes),
                    GenOf(scopes[rng() % kScopes].word.load(std::memory_order_relaxed)),
                    static_cast<uint32_t>(rng() % kBlocksPerScope));
    }
    keys[2] = k;
    IndexEntry out[5];
    bool found[5];
    if (rng() % 2 == 0) {
      index.LookupBatch(keys, out, found);
    } else {
      // The prefix answers for k only when both keys before it hit; otherwise ask Lookup.
      const size_t leading = index.LookupPrefix(keys, out);
      found[2] = leading >= 2 ? leading >= 3 : index.Lookup(k, &out[2]);
    }
    if (found[2]) *e = out[2];
    return found[2];
  };

  auto reader = [&](int id) {
    std::mt19937_64 rng(2000 + id);
    while (!stop.load(std::memory_order_relaxed)) {
      uint32_t s = static_cast<uint32_t>(rng() % kScopes);
      uint32_t b = static_cast<uint32_t>(rng() % kBlocksPerScope);
      uint64_t before = scopes[s].word.load();
      uint32_t gen = GenOf(before);
      // Mostly the current generation; sometimes a reclaimed one or one not yet written.
      uint32_t pick = static_cast<uint32_t>(rng() % 8);
      uint32_t qgen = pick == 0 ? gen + 1 : (pick == 1 && gen > 0 ? gen - 1 : gen);
      Key k = KeyOf(s, qgen, b);
      IndexEntry e;
      if (!lookup(id, rng, k, &e)) {
        misses.fetch_add(1, std::memory_order_relaxed);
        uint64_t after = scopes[s].word.load();
        if (qgen == gen && PhaseOf(before) == kSealed && after == before) {
          fail("a key of a sealed scope is missing");
        }
        continue;
      }
      hits.fetch_add(1, std::memory_order_relaxed);
      if (!(e == EntryOf(k, s, qgen, b))) {
        fail("torn or foreign entry for scope " + std::to_string(s) + " gen " +
             std::to_string(qgen) + " block " + std::to_string(b));
        continue;
      }
      if (qgen < gen) fail("a key of a reclaimed generation was found");
      if (qgen > gen) {
        uint64_t after = scopes[s].word.load();
        if (GenOf(after) < qgen) fail("a key of a future generation was found");
      }
      // Once seen, it stays visible until the reclaimer takes the scope.
      for (int again = 0; again < 4; ++again) {
        IndexEntry e2;
        bool found = lookup(id, rng, k, &e2);
        uint64_t after = scopes[s].word.load();
        if (found) {
          if (!(e2 == e)) fail("entry changed while published");
        } else if (GenOf(after) == qgen && PhaseOf(after) != kReclaiming) {
          fail("a published key vanished before its scope was reclaimed");
        }
      }
    }
  };

  auto reclaimer = [&] {
    std::mt19937_64 rng(3000);
    while (!stop.load(std::memory_order_relaxed)) {
      uint32_t s = static_cast<uint32_t>(rng() % kScopes);
      ScopeState& scope = scopes[s];
      uint64_t w = scope.word.load();
      if (PhaseOf(w) != kSealed) {
        std::this_thread::yield();
        continue;
      }
      uint32_t gen = GenOf(w);
      if (!scope.word.compare_exchange_strong(w, Word(gen, kReclaiming))) {
        fail("only the reclaimer moves a sealed scope");
        continue;
      }
      if (scope.pins.load() != 0) {  // a writer may still add to this generation: not now
        uint64_t back = Word(gen, kReclaiming);
        scope.word.compare_exchange_strong(back, Word(gen, kSealed));
        std::this_thread::yield();
        continue;
      }
      for (uint32_t b = 0; b < kBlocksPerScope; ++b) {
        Key k = KeyOf(s, gen, b);
        if (index.Erase(k, s, gen + 1)) fail("erase with a newer generation removed a key");
        if (index.Erase(k, (s + 1) % kScopes, gen))
          fail("erase with a foreign scope removed a key");
        if (!index.Erase(k, s, gen)) fail("erase of a sealed scope's key failed");
      }
      scope.published.store(0);
      scope.word.store(Word(gen + 1, kOpen));
      hot.store(s, std::memory_order_relaxed);
      reclaimed.fetch_add(1, std::memory_order_relaxed);
    }
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) threads.emplace_back(writer, i);
  for (int i = 0; i < kReaders; ++i) threads.emplace_back(reader, i);
  threads.emplace_back(reclaimer);
  std::this_thread::sleep_for(std::chrono::duration<double>(StressSeconds()));
  stop.store(true);
  for (auto& t : threads) t.join();

  // Quiescent consistency: exactly the current generations' published keys are present.
  size_t live = 0;
  for (uint32_t s = 0; s < kScopes; ++s) {
    uint64_t w = scopes[s].word.load();
    ASSERT_NE(PhaseOf(w), kReclaiming);
    uint32_t gen = GenOf(w);
    uint32_t found = 0;
    for (uint32_t b = 0; b < kBlocksPerScope; ++b) {
      IndexEntry e;
      Key k = KeyOf(s, gen, b);
      if (index.Lookup(k, &e)) {
        ++found;
        EXPECT_EQ(e, EntryOf(k, s, gen, b));
      }
      if (gen > 0) EXPECT_FALSE(index.Lookup(KeyOf(s, gen - 1, b), &e)) << "reclaimed key found";
    }
    EXPECT_EQ(found, scopes[s].published.load()) << "scope " << s;
    if (PhaseOf(w) == kSealed) EXPECT_EQ(found, kBlocksPerScope) << "scope " << s;
    live += found;
  }
  EXPECT_EQ(index.size(), live);
  EXPECT_EQ(failures.load(), 0u);
  // The run must have exercised every path, or it proves little.
  EXPECT_GT(reclaimed.load(), 0u);
  EXPECT_GT(lost_races.load(), 0u);
  EXPECT_GT(aborts.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
  std::printf(
      "published %llu, lost races %llu, aborts %llu, scopes reclaimed %llu, lookups %llu hit / "
      "%llu miss, live %zu, tombstones %zu of %zu slots\n",
      (unsigned long long)published.load(), (unsigned long long)lost_races.load(),
      (unsigned long long)aborts.load(), (unsigned long long)reclaimed.load(),
      (unsigned long long)hits.load(), (unsigned long long)misses.load(), live, index.tombstones(),
      index.capacity());
}

}  // namespace
}  // namespace flatcake
