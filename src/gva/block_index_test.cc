#include "gva/block_index.h"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <memory>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

namespace flatcake {
namespace {

IndexEntry EntryFor(const Key& k, uint32_t scope_id = 1, uint32_t scope_gen = 1) {
  IndexEntry e;
  e.gva = k.lo;
  e.layer_stride = k.hi;
  e.checksum = k.lo ^ k.hi;
  e.scope_id = scope_id;
  e.scope_gen = scope_gen;
  e.segment = static_cast<uint32_t>(k.lo >> 32);
  e.block = static_cast<uint32_t>(k.hi >> 32);
  return e;
}

// Reserve + Publish; returns the outcome of Reserve.
BlockIndex::ReserveOutcome Insert(BlockIndex& index, const Key& k, uint32_t scope_id = 1,
                                  uint32_t scope_gen = 1) {
  BlockIndex::Reservation r;
  auto outcome = index.Reserve(k, &r);
  if (outcome == BlockIndex::ReserveOutcome::kReserved) {
    index.Publish(r, EntryFor(k, scope_id, scope_gen));
  }
  return outcome;
}

using Outcome = BlockIndex::ReserveOutcome;

TEST(BlockIndex, CapacityIsRoundedUpToAPowerOfTwo) {
  EXPECT_EQ(BlockIndex(0).capacity(), 64u);
  EXPECT_EQ(BlockIndex(100).capacity(), 128u);
  EXPECT_EQ(BlockIndex(4096).capacity(), 4096u);
}

TEST(BlockIndex, InsertLookupErase) {
  BlockIndex index(1024);
  for (uint64_t i = 0; i < 500; ++i) ASSERT_EQ(Insert(index, KeyFromId(i)), Outcome::kReserved);
  EXPECT_EQ(index.size(), 500u);
  for (uint64_t i = 0; i < 500; ++i) {
    IndexEntry e;
    ASSERT_TRUE(index.Lookup(KeyFromId(i), &e)) << i;
    EXPECT_EQ(e, EntryFor(KeyFromId(i)));
  }
  IndexEntry e;
  EXPECT_FALSE(index.Lookup(KeyFromId(12345), &e));
  for (uint64_t i = 0; i < 500; i += 2) EXPECT_TRUE(index.Erase(KeyFromId(i), 1, 1));
  EXPECT_EQ(index.size(), 250u);
  for (uint64_t i = 0; i < 500; ++i) EXPECT_EQ(index.Lookup(KeyFromId(i), &e), i % 2 == 1) << i;
  EXPECT_FALSE(index.Erase(KeyFromId(0), 1, 1)) << "second erase of the same key";
}

TEST(BlockIndex, KeysDifferingInOneHalfAreDistinct) {
  BlockIndex index(64);
  Key a{1, 2}, b{1, 3}, c{4, 2};
  ASSERT_EQ(Insert(index, a), Outcome::kReserved);
  ASSERT_EQ(Insert(index, b), Outcome::kReserved);
  ASSERT_EQ(Insert(index, c), Outcome::kReserved);
  IndexEntry e;
  ASSERT_TRUE(index.Lookup(b, &e));
  EXPECT_EQ(e, EntryFor(b));
  EXPECT_FALSE(index.Lookup(Key{4, 3}, &e));
}

TEST(BlockIndex, PendingKeyIsInvisibleUntilPublish) {
  BlockIndex index(64);
  Key k = KeyFromId(7);
  BlockIndex::Reservation r;
  ASSERT_EQ(index.Reserve(k, &r), Outcome::kReserved);
  IndexEntry e;
  EXPECT_FALSE(index.Lookup(k, &e));
  EXPECT_EQ(index.size(), 0u);
  BlockIndex::Reservation r2;
  EXPECT_EQ(index.Reserve(k, &r2), Outcome::kExists) << "a pending key is already taken";
  EXPECT_FALSE(index.Erase(k, 1, 1)) << "a pending key cannot be erased";
  index.Publish(r, EntryFor(k));
  ASSERT_TRUE(index.Lookup(k, &e));
  EXPECT_EQ(e, EntryFor(k));
  EXPECT_EQ(index.size(), 1u);
}

TEST(BlockIndex, AbortLeavesNoTraceAndAllowsAnotherReserve) {
  BlockIndex index(64);
  Key k = KeyFromId(9);
  BlockIndex::Reservation r;
  ASSERT_EQ(index.Reserve(k, &r), Outcome::kReserved);
  index.Abort(r);
  IndexEntry e;
  EXPECT_FALSE(index.Lookup(k, &e));
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.tombstones(), 1u);
  ASSERT_EQ(Insert(index, k), Outcome::kReserved);
  EXPECT_TRUE(index.Lookup(k, &e));
}

TEST(BlockIndex, WriteOnceSecondReserveOfPublishedKeyIsRefused) {
  BlockIndex index(64);
  Key k = KeyFromId(3);
  ASSERT_EQ(Insert(index, k, 1, 1), Outcome::kReserved);
  BlockIndex::Reservation r;
  EXPECT_EQ(index.Reserve(k, &r), Outcome::kExists);
  IndexEntry e;
  ASSERT_TRUE(index.Lookup(k, &e));
  EXPECT_EQ(e, EntryFor(k, 1, 1)) << "the first entry stays";
}

TEST(BlockIndex, TombstonesAreReused) {
  // A small table at high load: long probe chains full of tombstones.
  BlockIndex index(64);
  for (uint64_t i = 0; i < 50; ++i) ASSERT_EQ(Insert(index, KeyFromId(i)), Outcome::kReserved);
  for (uint64_t i = 0; i < 50; i += 2) ASSERT_TRUE(index.Erase(KeyFromId(i), 1, 1));
  EXPECT_EQ(index.tombstones(), 25u);
  for (uint64_t i = 100; i < 125; ++i) ASSERT_EQ(Insert(index, KeyFromId(i)), Outcome::kReserved);
  // 25 new keys, 50 live slots before and after: every one of them took a tombstone unless its
  // chain met an EMPTY slot first, so most tombstones are gone and the table is not fuller.
  EXPECT_LT(index.tombstones(), 25u);
  EXPECT_EQ(index.size(), 50u);
  IndexEntry e;
  for (uint64_t i = 0; i < 50; ++i) EXPECT_EQ(index.Lookup(KeyFromId(i), &e), i % 2 == 1) << i;
  for (uint64_t i = 100; i < 125; ++i) {
    ASSERT_TRUE(index.Lookup(KeyFromId(i), &e)) << i;
    EXPECT_EQ(e, EntryFor(KeyFromId(i)));
  }
  // Churn far more keys through the table than it has slots, right up to the load limit.
  for (uint64_t round = 0; round < 40; ++round) {
    for (uint64_t i = 0; i < 8; ++i) {
      ASSERT_EQ(Insert(index, KeyFromId(1000 + round * 100 + i)), Outcome::kReserved);
    }
    for (uint64_t i = 0; i < 8; ++i)
      ASSERT_TRUE(index.Erase(KeyFromId(1000 + round * 100 + i), 1, 1));
  }
  EXPECT_EQ(index.size(), 50u);
  for (uint64_t i = 100; i < 125; ++i) EXPECT_TRUE(index.Lookup(KeyFromId(i), &e)) << i;
}

TEST(BlockIndex, FullTableRefusesNewKeys) {
  BlockIndex index(64);
  const size_t max_live = static_cast<size_t>(BlockIndex::kMaxLoadFactor * 64);
  for (uint64_t i = 0; i < max_live; ++i) {
    ASSERT_EQ(Insert(index, KeyFromId(i)), Outcome::kReserved) << i;
  }
  BlockIndex::Reservation r;
  EXPECT_EQ(index.Reserve(KeyFromId(999), &r), Outcome::kFull);
  // A pending reservation counts as live too.
  ASSERT_TRUE(index.Erase(KeyFromId(0), 1, 1));
  ASSERT_EQ(index.Reserve(KeyFromId(999), &r), Outcome::kReserved);
  BlockIndex::Reservation r2;
  EXPECT_EQ(index.Reserve(KeyFromId(998), &r2), Outcome::kFull);
  index.Abort(r);
  EXPECT_EQ(Insert(index, KeyFromId(998)), Outcome::kReserved);
  IndexEntry e;
  for (uint64_t i = 1; i < max_live; ++i) EXPECT_TRUE(index.Lookup(KeyFromId(i), &e)) << i;
}

TEST(BlockIndex, EraseChecksScopeAndGeneration) {
  BlockIndex index(64);
  Key k = KeyFromId(5);
  ASSERT_EQ(Insert(index, k, 3, 7), Outcome::kReserved);
  EXPECT_FALSE(index.Erase(k, 3, 8)) << "a later generation of the scope does not own it";
  EXPECT_FALSE(index.Erase(k, 3, 6));
  EXPECT_FALSE(index.Erase(k, 4, 7)) << "another scope does not own it";
  IndexEntry e;
  ASSERT_TRUE(index.Lookup(k, &e));
  EXPECT_EQ(e.scope_id, 3u);
  EXPECT_EQ(e.scope_gen, 7u);
  EXPECT_TRUE(index.Erase(k, 3, 7));
  EXPECT_FALSE(index.Lookup(k, &e));
  EXPECT_FALSE(index.Erase(k, 3, 7));
}

// Two threads reserve the same key at the same moment, many times over, with tombstones of
// earlier rounds in the probe chain: exactly one wins each round.
TEST(BlockIndex, CompactDropsTombstonesAndKeepsEveryLiveEntry) {
  BlockIndex index(1024);
  // Churn: insert and erase in waves until most free slots are tombstones.
  std::vector<Key> live;
  for (uint64_t wave = 0; wave < 20; ++wave) {
    for (uint64_t i = 0; i < 400; ++i) {
      Key k{wave, i};
      ASSERT_EQ(Insert(index, k), BlockIndex::ReserveOutcome::kReserved);
      if (i % 8 == 0 && wave == 19) {
        live.push_back(k);
      } else {
        ASSERT_TRUE(index.Erase(k, 1, 1));
      }
    }
  }
  EXPECT_GT(index.tombstones(), 400u);
  EXPECT_EQ(index.size(), live.size());
  index.Compact();
  EXPECT_EQ(index.tombstones(), 0u);
  EXPECT_EQ(index.size(), live.size());
  for (const Key& k : live) {
    IndexEntry e;
    ASSERT_TRUE(index.Lookup(k, &e));
    EXPECT_EQ(e, EntryFor(k));
  }
  IndexEntry e;
  EXPECT_FALSE(index.Lookup(Key{3, 3}, &e));
  // Still fully usable afterwards: write-once holds and new keys go in.
  EXPECT_EQ(Insert(index, live[0]), BlockIndex::ReserveOutcome::kExists);
  EXPECT_EQ(Insert(index, Key{99, 99}), BlockIndex::ReserveOutcome::kReserved);
}

TEST(BlockIndex, ConcurrentReserveOfOneKeyHasExactlyOneWinner) {
  constexpr int kRounds = 3000;
  constexpr int kThreads = 2;
  BlockIndex index(256);
  std::barrier sync(kThreads);
  std::atomic<int> won[kRounds] = {};
  std::atomic<int> other[kRounds] = {};
  auto body = [&] {
    for (int round = 0; round < kRounds; ++round) {
      // 40 distinct keys: rounds reuse keys whose previous slot was aborted or erased.
      Key k = KeyFromId(static_cast<uint64_t>(round % 40), 77);
      sync.arrive_and_wait();
      BlockIndex::Reservation r;
      Outcome o = index.Reserve(k, &r);
      (o == Outcome::kReserved ? won : other)[round].fetch_add(1);
      sync.arrive_and_wait();  // both decided before the winner lets go of the key
      if (o == Outcome::kReserved) {
        if (round % 2 == 0) {
          index.Abort(r);
        } else {
          index.Publish(r, EntryFor(k));
          EXPECT_TRUE(index.Erase(k, 1, 1));
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(body);
  for (auto& t : threads) t.join();
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_EQ(won[round].load(), 1) << "round " << round;
    ASSERT_EQ(other[round].load(), kThreads - 1) << "round " << round;
  }
  EXPECT_EQ(index.size(), 0u);
}

TEST(BlockIndex, LookupBatchMatchesLookupForHitsMissesAndDuplicates) {
  BlockIndex index(4096);
  for (uint64_t i = 0; i < 3000; ++i) ASSERT_EQ(Insert(index, KeyFromId(i)), Outcome::kReserved);
  // Hits, misses and repeated keys interleaved; longer than the prefetch distance, and with a
  // length that is not a multiple of it.
  std::vector<Key> keys;
  for (uint64_t i = 0; i < 203; ++i) {
    keys.push_back(i % 3 == 0 ? KeyFromId(100000 + i) : KeyFromId(i * 7 % 3000));
    if (i % 10 == 0) keys.push_back(keys.back());  // duplicate, adjacent
  }
  keys.push_back(keys.front());  // duplicate, far apart
  std::vector<IndexEntry> out(keys.size());
  std::unique_ptr<bool[]> found(new bool[keys.size()]);
  const size_t hits = index.LookupBatch(keys, out.data(), found.get());
  size_t expected_hits = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    IndexEntry e;
    const bool want = index.Lookup(keys[i], &e);
    ASSERT_EQ(found[i], want) << i;
    if (want) {
      EXPECT_EQ(out[i], EntryFor(keys[i])) << i;
      ++expected_hits;
    }
  }
  EXPECT_EQ(hits, expected_hits);
  EXPECT_GT(hits, 0u);
  EXPECT_LT(hits, keys.size());
}

TEST(BlockIndex, LookupBatchLeavesMissesUntouchedAndHandlesEmptyAndTinyBatches) {
  BlockIndex index(64);
  const Key present = KeyFromId(1), absent = KeyFromId(2);
  ASSERT_EQ(Insert(index, present), Outcome::kReserved);
  EXPECT_EQ(index.LookupBatch({}, nullptr, nullptr), 0u);
  EXPECT_EQ(index.LookupPrefix({}, nullptr), 0u);
  IndexEntry sentinel;
  sentinel.gva = 0xdead;
  IndexEntry out[2] = {sentinel, sentinel};
  bool found[2] = {true, false};
  const Key keys[2] = {absent, present};
  EXPECT_EQ(index.LookupBatch(keys, out, found), 1u);
  EXPECT_FALSE(found[0]);
  EXPECT_EQ(out[0], sentinel) << "a miss leaves its output alone";
  EXPECT_TRUE(found[1]);
  EXPECT_EQ(out[1], EntryFor(present));
}

TEST(BlockIndex, LookupPrefixStopsAtTheFirstMiss) {
  BlockIndex index(1024);
  std::vector<Key> keys;
  for (uint64_t i = 0; i < 100; ++i) keys.push_back(KeyFromId(i));
  for (uint64_t i = 0; i < 100; ++i) {
    if (i != 57) ASSERT_EQ(Insert(index, keys[i]), Outcome::kReserved);
  }
  std::vector<IndexEntry> out(keys.size());
  ASSERT_EQ(index.LookupPrefix(keys, out.data()), 57u);
  for (size_t i = 0; i < 57; ++i) EXPECT_EQ(out[i], EntryFor(keys[i])) << i;
  EXPECT_EQ(index.LookupPrefix(std::span<const Key>(keys).first(57), out.data()), 57u);
  EXPECT_EQ(index.LookupPrefix(std::span<const Key>(keys).subspan(58), out.data()), 42u);
  EXPECT_EQ(index.LookupPrefix(std::span<const Key>(keys).subspan(57), out.data()), 0u);
}

// At the load limit of a small table, chains run over many state lines and wrap around the end
// of the table; every key must still be found, and misses must stop (lookups probe at most a
// key's reach, so this also checks that the reach covers every key, before and after Compact).
TEST(BlockIndex, LongChainsAreFoundByEveryLookupPath) {
  BlockIndex index(64);
  const size_t max_live = static_cast<size_t>(BlockIndex::kMaxLoadFactor * 64);
  std::vector<Key> keys;
  for (uint64_t i = 0; i < max_live; ++i) {
    keys.push_back(KeyFromId(i, 9));
    ASSERT_EQ(Insert(index, keys.back()), Outcome::kReserved);
  }
  auto check_all = [&](const char* when) {
    std::vector<IndexEntry> out(keys.size());
    std::unique_ptr<bool[]> found(new bool[keys.size()]);
    EXPECT_EQ(index.LookupBatch(keys, out.data(), found.get()), keys.size()) << when;
    EXPECT_EQ(index.LookupPrefix(keys, out.data()), keys.size()) << when;
    for (size_t i = 0; i < keys.size(); ++i) {
      IndexEntry e;
      ASSERT_TRUE(index.Lookup(keys[i], &e)) << when << " " << i;
      EXPECT_EQ(e, EntryFor(keys[i])) << when;
      EXPECT_EQ(out[i], EntryFor(keys[i])) << when;
    }
    IndexEntry e;
    for (uint64_t i = 0; i < 200; ++i) EXPECT_FALSE(index.Lookup(KeyFromId(i, 10), &e)) << when;
  };
  check_all("full");
  // Churn: erase and re-insert half of them so chains are full of tombstones, then compact.
  for (size_t i = 0; i < keys.size(); i += 2) ASSERT_TRUE(index.Erase(keys[i], 1, 1));
  for (size_t i = 0; i < keys.size(); i += 2) ASSERT_EQ(Insert(index, keys[i]), Outcome::kReserved);
  check_all("churned");
  index.Compact();
  check_all("compacted");
}

// The batched lookups try the slot named by the home's placement hint before walking the chain.
// Hints go stale when their key is erased and are overwritten by later keys of the same home;
// answers must not change. A table at its load limit, where most homes hold several keys and
// chains are long, is churned with erasures and new keys, and every batched answer (hits, erased
// keys, never-inserted keys) must match Lookup's.
TEST(BlockIndex, LookupBatchIsRightWhenPlacementHintsAreStaleOrOverwritten) {
  BlockIndex index(4096);
  const size_t max_live = static_cast<size_t>(BlockIndex::kMaxLoadFactor * 4096);
  std::vector<Key> live, erased;
  for (uint64_t i = 0; i < max_live; ++i) {
    live.push_back(KeyFromId(i, 11));
    ASSERT_EQ(Insert(index, live.back()), Outcome::kReserved);
  }
  std::vector<Key> kept;
  for (size_t i = 0; i < live.size(); ++i) {
    if (i % 3 == 0) {
      ASSERT_TRUE(index.Erase(live[i], 1, 1));
      erased.push_back(live[i]);
    } else {
      kept.push_back(live[i]);
    }
  }
  // New keys take the tombstones and overwrite the hints of the homes they land in.
  for (uint64_t i = 0; i < erased.size(); ++i) {
    kept.push_back(KeyFromId(i, 12));
    ASSERT_EQ(Insert(index, kept.back()), Outcome::kReserved);
  }
  std::vector<Key> queries = kept;
  queries.insert(queries.end(), erased.begin(), erased.end());
  for (uint64_t i = 0; i < 500; ++i) queries.push_back(KeyFromId(i, 13));
  std::vector<IndexEntry> out(queries.size());
  std::unique_ptr<bool[]> found(new bool[queries.size()]);
  EXPECT_EQ(index.LookupBatch(queries, out.data(), found.get()), kept.size());
  for (size_t i = 0; i < queries.size(); ++i) {
    IndexEntry e;
    ASSERT_EQ(found[i], index.Lookup(queries[i], &e)) << i;
    ASSERT_EQ(found[i], i < kept.size()) << i;
    if (found[i]) EXPECT_EQ(out[i], EntryFor(queries[i])) << i;
  }
  EXPECT_EQ(index.LookupPrefix(kept, out.data()), kept.size());
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(out[i], EntryFor(kept[i])) << i;
}

// The hinted slot is accepted only if it holds the very key: a key that shares its home, hint
// cell and whole 16-bit fingerprint with a published one (so the hint names that one's slot and
// its state word matches) must miss, and the published one must hit.
TEST(BlockIndex, LookupBatchDoesNotMistakeAKeyWithTheSameHomeAndFingerprint) {
  BlockIndex index(1024);
  const uint64_t mask = index.capacity() - 1;
  auto place = [&](const Key& k) {
    const uint64_t h = BlockIndex::Hash(k);
    return (h & mask) | ((h >> 48) << 32);  // home and fingerprint
  };
  // Birthday search over 2^26 (home, fingerprint) pairs: about 2^14 keys give a collision.
  std::unordered_map<uint64_t, Key> seen;
  Key published{}, twin{};
  bool found_pair = false;
  for (uint64_t i = 0; i < (uint64_t{1} << 20) && !found_pair; ++i) {
    const Key k = KeyFromId(i, 21);
    auto [it, inserted] = seen.emplace(place(k), k);
    if (!inserted) {
      published = it->second;
      twin = k;
      found_pair = true;
    }
  }
  ASSERT_TRUE(found_pair);
  ASSERT_FALSE(published == twin);
  // Neighbours first, so the published key lands away from home and its hint is non-zero.
  const uint64_t home = BlockIndex::Hash(published) & mask;
  size_t neighbours = 0;
  for (uint64_t i = 0; neighbours < 3 && i < (uint64_t{1} << 20); ++i) {
    const Key k = KeyFromId(i, 22);
    if ((BlockIndex::Hash(k) & mask) == home) {
      ASSERT_EQ(Insert(index, k), Outcome::kReserved);
      ++neighbours;
    }
  }
  ASSERT_EQ(neighbours, 3u);
  ASSERT_EQ(Insert(index, published), Outcome::kReserved);
  const Key batch[3] = {twin, published, twin};
  IndexEntry out[3];
  bool found[3];
  EXPECT_EQ(index.LookupBatch(batch, out, found), 1u);
  EXPECT_FALSE(found[0]);
  EXPECT_TRUE(found[1]);
  EXPECT_EQ(out[1], EntryFor(published));
  EXPECT_FALSE(found[2]);
  EXPECT_EQ(index.LookupPrefix(std::span<const Key>(batch, 1), out), 0u);
}

// Readers batch-look-up keys that a writer keeps erasing and re-inserting with a new scope
// generation: every answer is either a miss or the exact entry of one generation.
TEST(BlockIndex, LookupBatchDuringConcurrentEraseSeesWholeEntriesOrMisses) {
  constexpr uint64_t kKeys = 512;
  BlockIndex index(1024);
  std::vector<Key> keys;
  for (uint64_t i = 0; i < kKeys; ++i) {
    keys.push_back(KeyFromId(i, 5));
    ASSERT_EQ(Insert(index, keys.back(), 1, 0), Outcome::kReserved);
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0}, hits{0}, misses{0};
  std::thread writer([&] {
    for (uint32_t gen = 0; gen < 200; ++gen) {
      for (uint64_t i = 0; i < kKeys; ++i) {
        if (!index.Erase(keys[i], 1, gen)) bad.fetch_add(1);
        if (Insert(index, keys[i], 1, gen + 1) != Outcome::kReserved) bad.fetch_add(1);
      }
    }
    stop.store(true);
  });
  std::vector<IndexEntry> out(kKeys);
  std::unique_ptr<bool[]> found(new bool[kKeys]);
  while (!stop.load()) {
    index.LookupBatch(keys, out.data(), found.get());
    for (uint64_t i = 0; i < kKeys; ++i) {
      if (!found[i]) {
        misses.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      hits.fetch_add(1, std::memory_order_relaxed);
      if (!(out[i] == EntryFor(keys[i], 1, out[i].scope_gen)) || out[i].scope_gen > 200) {
        bad.fetch_add(1);
      }
    }
  }
  writer.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
  // Quiescent: every key present with the last generation.
  EXPECT_EQ(index.LookupBatch(keys, out.data(), found.get()), kKeys);
  for (uint64_t i = 0; i < kKeys; ++i) EXPECT_EQ(out[i], EntryFor(keys[i], 1, 200));
}

}  // namespace
}  // namespace flatcake
