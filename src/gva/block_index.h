// BlockIndex: FC-GVA's Level-1 index, key (128-bit) -> IndexEntry.
//
// A fixed-capacity, open-addressed hash table (linear probing, power-of-two slots) whose
// synchronisation is one 64-bit state word per slot changed with compare-and-swap. The state
// words sit in their own dense array (eight per cache line) and carry a 16-bit fingerprint of the
// slot's key, so a probe walks the chain in the state array and touches a slot's key and entry
// (one 64-byte cache line in a second array) only when the fingerprint matches. A slot's life
// cycle is
//   EMPTY -> CLAIMED -> INSERTING -> RESERVED -> PUBLISHED -> TOMBSTONE -> CLAIMED ...
// (INSERTING and RESERVED may also go straight to TOMBSTONE). CLAIMED means "owned, key not yet
// written"; INSERTING means "key written, checking that no other slot holds the same key";
// RESERVED is the pending state the caller sees after Reserve. The state word also carries a
// version that is bumped every time a slot is claimed, and states only move forward within one
// version, so a state word value never repeats: a reader that copied a slot and then finds the
// word unchanged knows the copy is consistent (seqlock-style validation).
//
// Thread safety and progress:
//  - Lookup, LookupBatch and LookupPrefix are wait-free: each key probes at most capacity()
//    slots (plus, in the batched ones, the hinted slot tried first); they never wait and never
//    write to shared memory (no counters, no state words). They use acquire loads only.
//  - Reserve/Publish/Abort/Erase never block and never take locks. Publish, Abort and Erase are
//    a bounded number of steps; Reserve retries only when another Reserve of the same key or a
//    concurrent claim of the same free slot changed the table under it, and its update of the
//    home's reach word only when another Reserve of the same home changed that word
//    (lock-free).
//  - All methods may be called concurrently from any number of threads. Every field a concurrent
//    reader touches is a std::atomic, so the table is free of data races by construction.
//
// Invariants:
//  - A key is visible to Lookup only after Publish; between Reserve and Publish lookups miss.
//    This is how "published only after the write completed" is implemented: the store reserves,
//    writes the data, then publishes.
//  - At most one RESERVED or PUBLISHED slot holds a given key at any time (concurrent Reserve of
//    the same key: exactly one wins, the others get kExists).
//  - A key lives in the probe chain of its home slot: every slot between its home and its own
//    slot is non-EMPTY. Slots never return to EMPTY, so a probe that meets an EMPTY slot can stop.
//  - Tombstoned slots are reused by later inserts (the first tombstone of the chain is taken).
//  - Each slot's line carries a reach: an upper bound on 1 + the probe distance of every key
//    whose home it is and that was ever reserved there (since the last Compact). It only grows,
//    and Reserve raises it before the key can be published, so lookups probe at most `reach`
//    slots from home instead of to the first EMPTY: a miss at 90% load stops after a few slots
//    (none when no key has that home) rather than walking the whole cluster.
//  - The same word carries four placement hints: Reserve records, in the cell its fingerprint
//    picks, how far from home its key landed. Hints are advisory (the latest key of a cell wins,
//    erased keys leave stale ones); the batched lookups use them to prefetch and try a key's own
//    slot first, and fall back to the full probe whenever the hinted slot does not hold the key.
//
// Memory layout, for lookups (see block_index.cc for the figures): the state words sit in a
// dense, 64-byte aligned array, eight per cache line, and the keys and entries in a second array,
// one 64-byte line per slot. Both arrays are 2 MiB aligned and advised for transparent huge pages
// so that a probe costs cache misses but rarely TLB misses. A hit touches the state line(s) from
// its home slot to its own slot plus its own key/entry line; the batched lookups overlap those
// misses across keys (software prefetch, the key's own line found through its hint), which is
// what makes them several times faster per key than a loop of Lookup on a table larger than the
// caches.
//
// Slots never return to EMPTY concurrently, so a long-lived table under insert/erase churn slowly
// turns EMPTY slots into tombstones and misses probe further. tombstones() exposes the count and
// Compact() rebuilds the table when the caller can exclude every other access for a moment.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "flatcake/gva.h"
#include "flatcake/key.h"
#include "flatcake/status.h"
#include "util/aligned_buffer.h"

namespace flatcake {

// What the index stores for one block. Plain data; copied in and out.
struct IndexEntry {
  Gva gva = 0;                // address of the block's layer-0, plane-0 slice
  uint64_t layer_stride = 0;  // bytes between the block's slice of layer l and of layer l+1
  uint64_t checksum = 0;      // BlockChecksum (util/checksum.h): sum of seeded per-slice XXH3-64
  uint32_t scope_id = 0;      // owning scope slot
  uint32_t scope_gen = 0;     // owning scope generation; a mismatch means the scope was reclaimed
  uint32_t segment = 0;       // segment number within the scope
  uint32_t block = 0;         // block number within the segment

  friend bool operator==(const IndexEntry&, const IndexEntry&) = default;
};

class BlockIndex {
 public:
  // Capacity is rounded up to a power of two (minimum 64 slots).
  explicit BlockIndex(size_t capacity);
  ~BlockIndex();
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  // Handle to a reserved slot; only meaningful to the thread that reserved it.
  struct Reservation {
    size_t slot = SIZE_MAX;
  };
  enum class ReserveOutcome { kReserved, kExists, kFull };

  // Claims a slot for `key`, making it pending (Lookup still misses). kExists when the key is
  // already published or pending elsewhere; kFull when no slot is free (load above
  // max_load_factor, see below). On kReserved, *out is set and the caller MUST call exactly one
  // of Publish or Abort for it.
  ReserveOutcome Reserve(const Key& key, Reservation* out);
  // Makes the reserved key visible with `entry`. REQUIRES: `r` came from Reserve and was neither
  // published nor aborted.
  void Publish(Reservation r, const IndexEntry& entry);
  // Drops a reservation (e.g. the write failed); the slot becomes a tombstone.
  void Abort(Reservation r);

  // Wait-free lookup. Returns true and copies the entry when `key` is published.
  bool Lookup(const Key& key, IndexEntry* out) const;

  // Batched lookup: for every i, found[i] = Lookup(keys[i], &out[i]) (out[i] is left untouched on
  // a miss). Each key's home lines are prefetched kLookupAhead keys before it is probed, and the
  // line of the slot its placement hint names kLookupHintAhead keys before, so the cache misses
  // of that many keys overlap. Each key's answer is linearisable on its own (exactly
  // as a Lookup at some instant during the call); the batch as a whole is not a snapshot.
  // Duplicates are allowed. Returns the number of hits. REQUIRES: out and found have room for
  // keys.size() elements (nothing is touched for an empty batch).
  size_t LookupBatch(std::span<const Key> keys, IndexEntry* out, bool* found) const;
  // Batched lookup of a prefix: looks up keys in order, as LookupBatch does, and stops at the
  // first miss. Returns n, the number of leading keys found; out[0..n) hold their entries.
  // (Up to kLookupAhead keys past the first miss are prefetched, never probed.)
  size_t LookupPrefix(std::span<const Key> keys, IndexEntry* out) const;
  // Pipeline distances of the batched lookups, in keys: a key's home lines are prefetched
  // kLookupAhead keys before it is probed, and its placement hint is read (from the home line,
  // by then cached) and the hinted slot's lines prefetched kLookupHintAhead keys before. Enough
  // misses in flight to cover memory latency, few enough that prefetched lines are still cached
  // when probed.
  static constexpr size_t kLookupAhead = 16;
  static constexpr size_t kLookupHintAhead = 8;

  // Tombstones `key` if it is published and its entry belongs to scope (scope_id, scope_gen).
  // Returns true when this call removed it.
  bool Erase(const Key& key, uint32_t scope_id, uint32_t scope_gen);

  // Rebuilds the table in place without its tombstones: published entries are re-inserted,
  // everything else becomes EMPTY again, so probe chains shrink back to what the live keys need.
  // REQUIRES: exclusive access. No other method (Lookup included) may run concurrently and no
  // reservation may be outstanding; the store guarantees this with a batch-level lock that every
  // Put, Get and Exists holds shared and Compact holds exclusive.
  void Compact();

  size_t capacity() const { return mask_ + 1; }
  // Published entries (approximate under concurrency).
  size_t size() const { return published_.load(std::memory_order_relaxed); }
  // Slots in the TOMBSTONE state (approximate under concurrency).
  size_t tombstones() const { return tombstones_.load(std::memory_order_relaxed); }
  // Reserve refuses new keys once published + reserved slots reach this fraction of capacity,
  // so probe chains stay short. Tombstones do not count (they are reused).
  static constexpr double kMaxLoadFactor = 0.92;

  // 64-bit mix of the key: the low bits pick the home slot (hash & (capacity() - 1)), the top 16
  // the fingerprint. Public so that tests can build keys that collide on purpose.
  static uint64_t Hash(const Key& key);

 private:
  struct Slot;
  // Raw, 64-byte aligned storage for `bytes` (2 MiB aligned and advised for huge pages when it is
  // at least 2 MiB). Throws std::bad_alloc like new when memory is exhausted.
  static AlignedBuffer AllocateArray(size_t bytes);
  // Reads the key of slot `idx`; returns the state word re-read afterwards (the copy is valid
  // only if that word still has the version of the word read before).
  uint64_t ReadKey(size_t idx, Key* key) const;
  // Copies a slot's entry (acquire loads). The copy is valid only if the slot's state word is
  // unchanged afterwards (Lookup) or nothing runs concurrently (Compact).
  static IndexEntry ReadEntry(const Slot& s);
  // Lookup of a key whose Hash is `hash`.
  bool LookupHashed(const Key& key, uint64_t hash, IndexEntry* out) const;
  // The slot that the placement hint of the key hashed to `hash` names (its home when there is
  // no hint). Only a guess: the slot may hold another key or none.
  size_t HintedSlot(uint64_t hash) const;
  // LookupHashed, trying the slot named by the home's placement hint first.
  bool LookupHinted(const Key& key, uint64_t hash, IndexEntry* out) const;
  // If slot `idx`, whose state word was `w` (PUBLISHED, the key's fingerprint), holds `key`:
  // copies its entry, validates that the word is still `w`, and returns true.
  bool CopyIfKey(size_t idx, uint64_t w, const Key& key, IndexEntry* out) const;
  // The pipeline behind LookupBatch and LookupPrefix: probes keys[i] into out[i] in order and
  // calls on_result(i, found), stopping early when that returns false. Returns the number of
  // keys probed.
  template <typename OnResult>
  size_t LookupPipelined(std::span<const Key> keys, IndexEntry* out, OnResult on_result) const;
  // Step of Reserve: raises the reach of slot `home` to cover probe position `my_pos` and records
  // that position in the hint cell of the key hashed to `hash`.
  void RaiseReach(size_t home, size_t my_pos, uint64_t hash);
  // Moves slot `idx` from `word` to TOMBSTONE (same version). False when the word changed.
  bool Tombstone(size_t idx, uint64_t word);

  // The two arrays own their memory through the buffers; their elements are trivially
  // destructible, so freeing the buffers is all the destruction they need.
  AlignedBuffer states_memory_;
  AlignedBuffer slots_memory_;
  std::atomic<uint64_t>* states_ = nullptr;
  Slot* slots_ = nullptr;  // key + entry, one cache line each
  size_t mask_;
  size_t max_live_;
  // Reserve calls in flight + RESERVED + PUBLISHED slots: each Reserve takes one unit up front
  // and keeps it only on kReserved; Abort and Erase give it back.
  std::atomic<size_t> live_{0};
  std::atomic<size_t> published_{0};
  std::atomic<size_t> tombstones_{0};
};

}  // namespace flatcake
