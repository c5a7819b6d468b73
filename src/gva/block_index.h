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
//  - Lookup is wait-free: it probes at most capacity() slots, never waits and never writes.
//  - Reserve/Publish/Abort/Erase never block and never take locks. Publish, Abort and Erase are
//    a bounded number of steps; Reserve retries only when another Reserve of the same key or a
//    concurrent claim of the same free slot changed the table under it (lock-free).
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
//
// Slots never return to EMPTY concurrently, so a long-lived table under insert/erase churn slowly
// turns EMPTY slots into tombstones and misses probe further. tombstones() exposes the count and
// Compact() rebuilds the table when the caller can exclude every other access for a moment.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "flatcake/gva.h"
#include "flatcake/key.h"
#include "flatcake/status.h"

namespace flatcake {

// What the index stores for one block. Plain data; copied in and out.
struct IndexEntry {
  Gva gva = 0;                // address of the block's layer-0, plane-0 slice
  uint64_t layer_stride = 0;  // bytes between the block's slice of layer l and of layer l+1
  uint64_t checksum = 0;      // XXH3-64 of the block's slices in [layer][plane] order
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

 private:
  struct Slot;
  // 64-bit mix of the key: the low bits pick the home slot, the top 16 the fingerprint.
  static uint64_t Hash(const Key& key);
  // Reads the key of slot `idx`; returns the state word re-read afterwards (the copy is valid
  // only if that word still has the version of the word read before).
  uint64_t ReadKey(size_t idx, Key* key) const;
  // Copies a slot's entry (acquire loads). The copy is valid only if the slot's state word is
  // unchanged afterwards (Lookup) or nothing runs concurrently (Compact).
  static IndexEntry ReadEntry(const Slot& s);
  // Moves slot `idx` from `word` to TOMBSTONE (same version). False when the word changed.
  bool Tombstone(size_t idx, uint64_t word);

  std::unique_ptr<std::atomic<uint64_t>[]> states_;
  std::unique_ptr<Slot[]> slots_;  // key + entry, one cache line each
  size_t mask_;
  size_t max_live_;
  // Reserve calls in flight + RESERVED + PUBLISHED slots: each Reserve takes one unit up front
  // and keeps it only on kReserved; Abort and Erase give it back.
  std::atomic<size_t> live_{0};
  std::atomic<size_t> published_{0};
  std::atomic<size_t> tombstones_{0};
};

}  // namespace flatcake
