// BlockIndex implementation. See block_index.h for the contract; this file argues why the
// protocol keeps it.
//
// State word layout: bits [2:0] hold the state, bits [18:3] the fingerprint of the key the slot
// was claimed for, bits [63:19] the slot's version. Fingerprint and version change only when a
// slot is claimed (EMPTY/TOMBSTONE -> CLAIMED, version + 1); within one version the state only
// moves forward (CLAIMED -> INSERTING -> RESERVED -> PUBLISHED -> TOMBSTONE, with INSERTING and
// RESERVED also allowed to go to TOMBSTONE). Hence a word value never repeats and "the word is
// unchanged" means "nothing happened to the slot". The fingerprint lets probes skip foreign keys
// without reading the slot's cache line: with one 64-byte line per probe, a miss at 90% load
// walked ~50 lines; the dense state array makes that ~7, and the home slot's reach bound (the
// farthest any key of that home was ever placed, kept in the home's key/entry line) cuts the
// walk of long misses to that distance. The same word's placement hints let batched lookups
// skip the walk for most hits (see LookupPipelined).
//
// Memory ordering: every store to a key or entry field is a release store and every load of one
// is an acquire load (plain moves on x86). A reader that copied a field written by the next
// owner of a slot therefore synchronises with that owner, whose claiming CAS precedes the store,
// so the reader's re-load of the state word is guaranteed to see the word changed. Reserve uses
// sequentially consistent operations on state words because its correctness argument (below)
// needs a single total order of the claimers' "key visible" CAS and their re-scans.
#include "gva/block_index.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace flatcake {
namespace {

constexpr uint64_t kEmpty = 0;
constexpr uint64_t kClaimed = 1;    // owned by a Reserve; key not written yet
constexpr uint64_t kInserting = 2;  // key written; owner checks for a rival slot with the key
constexpr uint64_t kReserved = 3;   // won; pending until Publish or Abort
constexpr uint64_t kPublished = 4;
constexpr uint64_t kTombstone = 5;
constexpr uint64_t kStateMask = 7;
constexpr size_t kCacheLine = 64;
constexpr size_t kStatesPerLine = kCacheLine / sizeof(uint64_t);
constexpr int kFingerprintShift = 3;
constexpr uint64_t kFingerprintMask = uint64_t{0xFFFF} << kFingerprintShift;
constexpr int kVersionShift = 19;

constexpr uint64_t StateOf(uint64_t word) { return word & kStateMask; }
constexpr uint64_t WithState(uint64_t word, uint64_t state) { return (word & ~kStateMask) | state; }
constexpr bool SameVersion(uint64_t a, uint64_t b) {
  return (a & ~kStateMask) == (b & ~kStateMask);
}
// States in which the slot's key field is valid for the current version.
constexpr bool Keyed(uint64_t word) {
  uint64_t s = StateOf(word);
  return s == kInserting || s == kReserved || s == kPublished;
}
constexpr uint64_t FingerprintBits(uint64_t hash) { return (hash >> 48) << kFingerprintShift; }
constexpr bool FingerprintIs(uint64_t word, uint64_t fp_bits) {
  return (word & kFingerprintMask) == fp_bits;
}
// Whether `word` is a PUBLISHED slot with the fingerprint of `hash`: the slots whose key a lookup
// (or Erase) compares with its own.
constexpr bool PublishedWithFingerprint(uint64_t word, uint64_t hash) {
  return (word & (kFingerprintMask | kStateMask)) == (FingerprintBits(hash) | kPublished);
}
// The word of a slot claimed from `old` for a key whose fingerprint bits are `fp_bits`.
constexpr uint64_t ClaimWord(uint64_t old, uint64_t fp_bits) {
  return (((old >> kVersionShift) + 1) << kVersionShift) | fp_bits | kClaimed;
}

// The home line's `reach` word: bits [31:0] hold the reach bound, saturating at kReachUnbounded
// (which means "no bound": probe to the first EMPTY); bits [63:32] hold four 8-bit placement
// hints. Hint cell c of home h holds the probe distance (1..255) of the latest key of home h whose
// fingerprint's low two bits are c, or 0 (none yet, or the key sits at home or more than 255
// slots away). Hints are advisory: the batched lookups prefetch the hinted slot and try it first
// (LookupHinted), accepting it only through the same checks the full probe makes, so a stale or
// overwritten hint costs a wasted prefetch and a state load before the full probe, never a wrong
// answer.
constexpr uint64_t kReachBits = 0xFFFFFFFFull;
constexpr uint64_t kReachUnbounded = kReachBits;
constexpr int kHintShift = 32;
constexpr uint64_t kMaxHint = 255;
constexpr size_t HintCell(uint64_t hash) { return (hash >> 48) & 3; }
// The probe bound a reach word allows, for a table of `slots` slots.
constexpr uint64_t ReachBound(uint64_t word, uint64_t slots) {
  const uint64_t r = word & kReachBits;
  return r == kReachUnbounded ? slots : r;
}
// The hinted probe distance for a key hashed to `hash` (0: none; the home line is prefetched
// anyway).
constexpr uint64_t HintedDistance(uint64_t word, uint64_t hash) {
  return (word >> (kHintShift + 8 * HintCell(hash))) & 0xFF;
}

static_assert(ReachBound(7 | (uint64_t{0xAB} << kHintShift), 64) == 7, "hints are not the bound");
static_assert(ReachBound(kReachUnbounded | (uint64_t{1} << 40), 64) == 64, "saturated: no bound");
static_assert(HintedDistance(uint64_t{0x05030201} << kHintShift, uint64_t{2} << 48) == 3);

constexpr size_t kMinCapacity = 64;
constexpr size_t kMaxCapacity = size_t{1} << 40;

constexpr auto kAcq = std::memory_order_acquire;
constexpr auto kRel = std::memory_order_release;
constexpr auto kSeq = std::memory_order_seq_cst;

}  // namespace

// Key and entry of one slot: one cache line. The entry's four 32-bit fields are packed in pairs
// so that every field is a lock-free 64-bit atomic.
struct alignas(64) BlockIndex::Slot {
  std::atomic<uint64_t> key_hi{0};
  std::atomic<uint64_t> key_lo{0};
  std::atomic<uint64_t> gva{0};
  std::atomic<uint64_t> layer_stride{0};
  std::atomic<uint64_t> checksum{0};
  std::atomic<uint64_t> scope{0};     // scope_id | scope_gen << 32
  std::atomic<uint64_t> location{0};  // segment | block << 32
  // Not part of this slot's entry: the probe bound of the keys whose home this slot is (see the
  // header) and their placement hints (see kReachBits). It shares the line so that a lookup's
  // first line read brings them too.
  std::atomic<uint64_t> reach{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// Lookups probe both arrays at random. With 4 KiB pages a table of a few million slots (tens to
// hundreds of MiB) costs a TLB miss and page walk on top of nearly every cache miss; 2 MiB pages
// cover the arrays with a few hundred TLB entries. The advice is best effort: without
// transparent huge pages the arrays simply use small pages.
AlignedBuffer BlockIndex::AllocateArray(size_t bytes) {
  Result<AlignedBuffer> mem =
      AlignedBuffer::Allocate(bytes, AlignedBuffer::HugePagesWhenLarge(bytes, kCacheLine));
  if (!mem.ok()) throw std::bad_alloc();
  return std::move(mem).value();
}

BlockIndex::BlockIndex(size_t capacity) {
  static_assert(sizeof(Slot) == 64, "a slot's key and entry must fill exactly one cache line");
  static_assert(std::is_trivially_destructible_v<Slot> &&
                std::is_trivially_destructible_v<std::atomic<uint64_t>>);
  size_t cap = std::bit_ceil(std::clamp(capacity, kMinCapacity, kMaxCapacity));
  states_memory_ = AllocateArray(cap * sizeof(uint64_t));
  states_ = reinterpret_cast<std::atomic<uint64_t>*>(states_memory_.data());
  for (size_t i = 0; i < cap; ++i) new (&states_[i]) std::atomic<uint64_t>(kEmpty);
  slots_memory_ = AllocateArray(cap * sizeof(Slot));
  slots_ = reinterpret_cast<Slot*>(slots_memory_.data());
  for (size_t i = 0; i < cap; ++i) new (&slots_[i]) Slot();
  mask_ = cap - 1;
  max_live_ = static_cast<size_t>(kMaxLoadFactor * static_cast<double>(cap));
}

BlockIndex::~BlockIndex() = default;

uint64_t BlockIndex::Hash(const Key& key) {
  // Keys are digests already, but tests and benchmarks also use structured keys; two multiply
  // and fold rounds spread every input bit over both the home slot and the fingerprint.
  uint64_t h = (key.lo ^ std::rotl(key.hi, 29)) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return h;
}

IndexEntry BlockIndex::ReadEntry(const Slot& s) {
  IndexEntry e;
  e.gva = s.gva.load(kAcq);
  e.layer_stride = s.layer_stride.load(kAcq);
  e.checksum = s.checksum.load(kAcq);
  const uint64_t scope = s.scope.load(kAcq);
  const uint64_t location = s.location.load(kAcq);
  e.scope_id = static_cast<uint32_t>(scope);
  e.scope_gen = static_cast<uint32_t>(scope >> 32);
  e.segment = static_cast<uint32_t>(location);
  e.block = static_cast<uint32_t>(location >> 32);
  return e;
}

uint64_t BlockIndex::ReadKey(size_t idx, Key* key) const {
  const Slot& s = slots_[idx];
  key->hi = s.key_hi.load(kAcq);
  key->lo = s.key_lo.load(kAcq);
  return states_[idx].load(kAcq);
}

bool BlockIndex::Tombstone(size_t idx, uint64_t word) {
  if (!states_[idx].compare_exchange_strong(word, WithState(word, kTombstone), kSeq)) {
    return false;
  }
  tombstones_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Raises the home's reach to cover our slot before the key can become visible to lookups
// (Publish's release CAS orders this store before it; when the word already holds our bound and
// hint nothing is stored, and read-read coherence makes a lookup that sees our Publish read that
// word or a later one). A later Abort leaves it raised: the bound only needs to be an upper bound.
// The same update records our slot in the home's hint cell for our fingerprint.
void BlockIndex::RaiseReach(size_t home, size_t my_pos, uint64_t hash) {
  std::atomic<uint64_t>& reach = slots_[home].reach;
  const uint64_t need = std::min<uint64_t>(my_pos + 1, kReachUnbounded);
  const int cell_shift = kHintShift + 8 * static_cast<int>(HintCell(hash));
  const uint64_t hint = my_pos <= kMaxHint ? my_pos : 0;
  uint64_t r = reach.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t bound = std::max<uint64_t>(r & kReachBits, need);
    const uint64_t next =
        (r & ~kReachBits & ~(uint64_t{0xFF} << cell_shift)) | bound | (hint << cell_shift);
    if (next == r || reach.compare_exchange_weak(r, next, kRel, std::memory_order_relaxed)) {
      break;
    }
  }
}

// Reserve protocol (one attempt; an attempt that loses a race starts over):
//  1. Scan the chain from the home slot to the first EMPTY. A RESERVED or PUBLISHED slot with the
//     key means kExists. Remember the first TOMBSTONE (or the EMPTY) as the target. Only slots
//     whose fingerprint matches the key's are read further.
//  2. Claim the target with CAS (-> CLAIMED, new version, our fingerprint), write the key,
//     CAS -> INSERTING. Only
//     now can other claimers see the key; CLAIMED slots are skipped by every scan because their
//     key is unknown, which never blocks anyone.
//  3. Re-scan the chain to the first EMPTY (past our own slot) for another keyed slot with the
//     key. RESERVED/PUBLISHED: another Reserve already won -> tombstone ours, kExists.
//     INSERTING at an earlier probe position: it has priority -> tombstone ours and start over
//     (it may still lose to someone, so kExists would be premature). INSERTING at a later
//     position: we have priority -> tombstone it by CAS.
//  4. CAS INSERTING -> RESERVED. It fails only if an earlier rival tombstoned us: start over.
//
// Why at most one slot reaches RESERVED: take two claimers A and B of key K with A's slot at an
// earlier probe position than B's, both of which completed step 4. Each made its INSERTING state
// visible (seq_cst CAS) before its re-scan, so in the single total order of seq_cst operations
// one of them, say X, wrote INSERTING before the other, Y, read X's slot during its re-scan. Both
// re-scans cover both slots: the chain has no EMPTY before B's slot (B's step-1 scan saw none,
// and slots never become EMPTY again). So Y saw X INSERTING or RESERVED. If X = A (earlier), Y = B
// either saw A RESERVED (kExists) or INSERTING (yield): B never reaches step 4's CAS from that
// re-scan. If X = B (later), A either saw B RESERVED (kExists) or INSERTING and tombstoned it, so
// B's step-4 CAS fails (or A's tombstone CAS failed because B is already RESERVED, and A re-reads
// the slot and yields). Either way not both succeed. Progress: every start-over is caused by a
// rival that made progress (won a claim CAS or reached INSERTING earlier in the chain).
BlockIndex::ReserveOutcome BlockIndex::Reserve(const Key& key, Reservation* out) {
  if (live_.fetch_add(1, std::memory_order_relaxed) >= max_live_) {
    live_.fetch_sub(1, std::memory_order_relaxed);
    return ReserveOutcome::kFull;
  }
  auto give_back = [&](ReserveOutcome outcome) {
    live_.fetch_sub(1, std::memory_order_relaxed);
    return outcome;
  };
  const uint64_t hash = Hash(key);
  const uint64_t fp = FingerprintBits(hash);
  const size_t home = static_cast<size_t>(hash) & mask_;
  for (;;) {
    // Step 1.
    size_t target = SIZE_MAX;
    uint64_t target_word = 0;
    bool exists = false;
    for (size_t n = 0; n <= mask_ && !exists; ++n) {
      size_t idx = (home + n) & mask_;
      uint64_t w = states_[idx].load(kSeq);
      uint64_t st = StateOf(w);
      if (st == kEmpty || st == kTombstone) {
        if (target == SIZE_MAX) {
          target = idx;
          target_word = w;
        }
        if (st == kEmpty) break;
      } else if ((st == kReserved || st == kPublished) && FingerprintIs(w, fp)) {
        Key k;
        uint64_t w2 = ReadKey(idx, &k);
        exists = k == key && SameVersion(w, w2) && Keyed(w2);
      }
    }
    if (exists) return give_back(ReserveOutcome::kExists);
    if (target == SIZE_MAX) continue;  // every slot was busy at scan time; live_ says one frees up

    // Step 2.
    std::atomic<uint64_t>& my_state = states_[target];
    uint64_t claimed = ClaimWord(target_word, fp);
    if (!my_state.compare_exchange_strong(target_word, claimed, kSeq)) continue;
    if (StateOf(target_word) == kTombstone) tombstones_.fetch_sub(1, std::memory_order_relaxed);
    slots_[target].key_hi.store(key.hi, kRel);
    slots_[target].key_lo.store(key.lo, kRel);
    const uint64_t inserting = WithState(claimed, kInserting);
    {
      uint64_t expected = claimed;
      bool ok = my_state.compare_exchange_strong(expected, inserting, kSeq);
      assert(ok && "nobody but the owner changes a CLAIMED slot");
      (void)ok;
    }

    // Raise the home's reach to cover our slot before the key can become visible to lookups.
    const size_t my_pos = (target - home) & mask_;
    RaiseReach(home, my_pos, hash);

    // Step 3.
    bool restart = false;
    for (size_t n = 0; n <= mask_ && !restart; ++n) {
      if (n == my_pos) continue;
      size_t idx = (home + n) & mask_;
      uint64_t w = states_[idx].load(kSeq);
      if (StateOf(w) == kEmpty) break;
      while (Keyed(w) && FingerprintIs(w, fp)) {
        Key k;
        uint64_t w2 = ReadKey(idx, &k);
        if (!SameVersion(w, w2) || !Keyed(w2) || !(k == key)) break;
        uint64_t st = StateOf(w2);
        if (st == kReserved || st == kPublished) {
          Tombstone(target, inserting);  // may fail if a rival already tombstoned us
          return give_back(ReserveOutcome::kExists);
        }
        if (n < my_pos) {  // an earlier INSERTING rival has priority
          Tombstone(target, inserting);
          restart = true;
          break;
        }
        if (Tombstone(idx, w2)) break;  // a later rival: we have priority
        w = states_[idx].load(kSeq);    // it changed under us; look again
      }
    }
    if (restart) continue;

    // Step 4.
    uint64_t expected = inserting;
    if (!my_state.compare_exchange_strong(expected, WithState(inserting, kReserved), kSeq)) {
      continue;  // an earlier rival tombstoned us
    }
    out->slot = target;
    return ReserveOutcome::kReserved;
  }
}

void BlockIndex::Publish(Reservation r, const IndexEntry& entry) {
  assert(r.slot <= mask_);
  Slot& s = slots_[r.slot];
  uint64_t w = states_[r.slot].load(std::memory_order_relaxed);
  assert(StateOf(w) == kReserved && "Publish of a slot that is not reserved");
  s.gva.store(entry.gva, kRel);
  s.layer_stride.store(entry.layer_stride, kRel);
  s.checksum.store(entry.checksum, kRel);
  s.scope.store(uint64_t{entry.scope_id} | (uint64_t{entry.scope_gen} << 32), kRel);
  s.location.store(uint64_t{entry.segment} | (uint64_t{entry.block} << 32), kRel);
  bool ok = states_[r.slot].compare_exchange_strong(w, WithState(w, kPublished), kRel,
                                                    std::memory_order_relaxed);
  assert(ok && "nobody but the owner changes a RESERVED slot");
  (void)ok;
  published_.fetch_add(1, std::memory_order_relaxed);
}

void BlockIndex::Abort(Reservation r) {
  assert(r.slot <= mask_);
  uint64_t w = states_[r.slot].load(std::memory_order_relaxed);
  assert(StateOf(w) == kReserved && "Abort of a slot that is not reserved");
  bool ok = Tombstone(r.slot, w);
  assert(ok);
  (void)ok;
  live_.fetch_sub(1, std::memory_order_relaxed);
}

bool BlockIndex::Lookup(const Key& key, IndexEntry* out) const {
  const uint64_t hash = Hash(key);
  // Many hits sit in their home slot: fetch its key/entry line while the state line is still on
  // its way, so the two cache misses overlap instead of following one another.
  __builtin_prefetch(&slots_[static_cast<size_t>(hash) & mask_]);
  return LookupHashed(key, hash, out);
}

// A plain slot-by-slot loop on purpose: a branch-free scan of a whole state line (match and
// EMPTY bit masks) measured slower both in cache (more work per hit) and out of it, because the
// key/entry load then depends on the computed mask instead of being issued speculatively.
bool BlockIndex::LookupHashed(const Key& key, uint64_t hash, IndexEntry* out) const {
  const size_t home = static_cast<size_t>(hash) & mask_;
  size_t idx = home;
  size_t bound = mask_ + 1;
  for (size_t n = 0; n < bound; ++n, idx = (idx + 1) & mask_) {
    // The reach bound is consulted only once the chain is a state line long: making the short
    // probes of most hits wait for it (or mispredict on it) measured slower in batches.
    if (n == kStatesPerLine) {
      // A key published before this load has its distance inside the bound (Reserve raised it
      // before the Publish we would have to see); one whose Publish is not yet visible was
      // unpublished at this instant, so a miss is a correct answer for it.
      bound = std::min<uint64_t>(ReachBound(slots_[home].reach.load(kAcq), mask_ + 1), bound);
      if (n >= bound) return false;
    }
    const uint64_t w = states_[idx].load(kAcq);
    if (StateOf(w) == kEmpty) return false;
    if (!PublishedWithFingerprint(w, hash)) continue;
    if (CopyIfKey(idx, w, key, out)) return true;
  }
  return false;
}

bool BlockIndex::CopyIfKey(size_t idx, uint64_t w, const Key& key, IndexEntry* out) const {
  const Slot& s = slots_[idx];
  if (s.key_hi.load(kAcq) != key.hi || s.key_lo.load(kAcq) != key.lo) return false;
  const uint64_t gva = s.gva.load(kAcq);
  const uint64_t layer_stride = s.layer_stride.load(kAcq);
  const uint64_t checksum = s.checksum.load(kAcq);
  const uint64_t scope = s.scope.load(kAcq);
  const uint64_t location = s.location.load(kAcq);
  // Validation: if the word changed, the copy may mix two owners; skip the slot. That is safe:
  // a key published throughout the lookup sits in a slot whose word does not change, and a key
  // whose slot changed was unpublished at some instant during the lookup (at most one live slot
  // per key), so a miss is a correct answer for it.
  if (states_[idx].load(kAcq) != w) return false;
  // Field by field from registers: copying an IndexEntry assembled on the stack from 32-bit
  // halves stalls on store forwarding.
  out->gva = gva;
  out->layer_stride = layer_stride;
  out->checksum = checksum;
  out->scope_id = static_cast<uint32_t>(scope);
  out->scope_gen = static_cast<uint32_t>(scope >> 32);
  out->segment = static_cast<uint32_t>(location);
  out->block = static_cast<uint32_t>(location >> 32);
  return true;
}

inline size_t BlockIndex::HintedSlot(uint64_t hash) const {
  const size_t home = static_cast<size_t>(hash) & mask_;
  const uint64_t hints = slots_[home].reach.load(std::memory_order_relaxed);
  return (home + HintedDistance(hints, hash)) & mask_;
}

// The hinted slot first: most hits are there, and then the chain is not walked. A key found there
// with its word unchanged was published at that instant, which is all Lookup promises; anything
// else (no hint, a stale one, a miss) takes the full probe.
bool BlockIndex::LookupHinted(const Key& key, uint64_t hash, IndexEntry* out) const {
  const size_t idx = HintedSlot(hash);
  const uint64_t w = states_[idx].load(kAcq);
  if (PublishedWithFingerprint(w, hash) && CopyIfKey(idx, w, key, out)) {
    return true;
  }
  return LookupHashed(key, hash, out);
}

// Batched lookups. A lookup on a table larger than the caches is a few dependent cache misses
// (the home slot's line with the reach bound, the state line(s), the matching key/entry line) and
// little else, so a loop of Lookup runs at one or two memory latencies per key. The pipeline
// below has three stages. Key i + kLookupAhead: hash, prefetch its home line and state line(s).
// Key i + kLookupHintAhead: read the placement hint from the home line, now cached, and prefetch
// the hinted slot's lines, without a branch. Key i: probe, hinted slot first (LookupHinted). At
// 90% load most hits sit a few slots from home, so without the hint their own line was a
// dependent miss after the state line (an earlier stage that found it by scanning the state line
// measured no faster: the scan mispredicts once per key), and the probe walked the chain. With
// the hint, batched lookups at 90% load on a 2M-slot table ran 1.5-2.1x faster on this VM, and
// 1.4x in cache. Prefetches are only hints and the hinted slot is validated exactly as the probe
// validates a slot, so every answer is as correct as Lookup's.

template <typename OnResult>
size_t BlockIndex::LookupPipelined(std::span<const Key> keys, IndexEntry* out,
                                   OnResult on_result) const {
  constexpr size_t kHint = kLookupHintAhead;
  constexpr size_t kAhead = kLookupAhead;
  static_assert(kHint < kAhead);
  constexpr size_t kRing = std::bit_ceil(kAhead + 1);
  uint64_t hashes[kRing];
  const size_t n = keys.size();
  for (size_t j = 0; j < n + kAhead; ++j) {
    if (j < n) {
      const uint64_t h = Hash(keys[j]);
      hashes[j % kRing] = h;
      // The home slot's key/entry line (with its reach and hints) and its state line(s). Written
      // out here rather than in a helper: GCC 12 judged such a helper free of side effects once
      // inlined and dropped the prefetches (checked in the disassembly).
      const size_t home = static_cast<size_t>(h) & mask_;
      __builtin_prefetch(&slots_[home]);
      __builtin_prefetch(&states_[home]);
      // A chain starting in the second half of its state line usually continues into the next.
      if ((home % kStatesPerLine) >= kStatesPerLine / 2) {
        __builtin_prefetch(&states_[((home | (kStatesPerLine - 1)) + 1) & mask_]);
      }
    }
    // Key j - kHint: its home line has had time to arrive; prefetch the line of the slot its
    // hint names (the home line again when there is no hint), branch-free.
    if (j >= kHint && j - kHint < n) {
      const size_t idx = HintedSlot(hashes[(j - kHint) % kRing]);
      __builtin_prefetch(&slots_[idx]);
      __builtin_prefetch(&states_[idx]);
    }
    if (j >= kAhead) {
      const size_t i = j - kAhead;
      if (i >= n) break;
      if (!on_result(i, LookupHinted(keys[i], hashes[i % kRing], &out[i]))) return i + 1;
    }
  }
  return n;
}

size_t BlockIndex::LookupBatch(std::span<const Key> keys, IndexEntry* out, bool* found) const {
  size_t hits = 0;
  LookupPipelined(keys, out, [&](size_t i, bool hit) {
    found[i] = hit;
    hits += hit;
    return true;
  });
  return hits;
}

size_t BlockIndex::LookupPrefix(std::span<const Key> keys, IndexEntry* out) const {
  size_t leading = 0;
  LookupPipelined(keys, out, [&](size_t, bool hit) {
    leading += hit;
    return hit;
  });
  return leading;
}

bool BlockIndex::Erase(const Key& key, uint32_t scope_id, uint32_t scope_gen) {
  const uint64_t want_scope = uint64_t{scope_id} | (uint64_t{scope_gen} << 32);
  const uint64_t hash = Hash(key);
  size_t idx = static_cast<size_t>(hash) & mask_;
  for (size_t n = 0; n <= mask_; ++n, idx = (idx + 1) & mask_) {
    uint64_t w = states_[idx].load(kAcq);
    if (StateOf(w) == kEmpty) return false;
    if (!PublishedWithFingerprint(w, hash)) continue;
    const Slot& s = slots_[idx];
    if (s.key_hi.load(kAcq) != key.hi || s.key_lo.load(kAcq) != key.lo) continue;
    uint64_t scope = s.scope.load(kAcq);
    if (states_[idx].load(kAcq) != w) continue;  // as in Lookup
    // The key has exactly one live slot, and this is it.
    if (scope != want_scope) return false;
    if (!Tombstone(idx, w)) return false;  // a concurrent Erase removed it first
    published_.fetch_sub(1, std::memory_order_relaxed);
    live_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

void BlockIndex::Compact() {
  std::vector<std::pair<Key, IndexEntry>> live;
  live.reserve(published_.load(std::memory_order_relaxed));
  for (size_t i = 0; i <= mask_; ++i) {
    if (StateOf(states_[i].load(std::memory_order_relaxed)) != kPublished) continue;
    const Slot& s = slots_[i];
    live.emplace_back(
        Key{s.key_hi.load(std::memory_order_relaxed), s.key_lo.load(std::memory_order_relaxed)},
        ReadEntry(s));
  }
  for (size_t i = 0; i <= mask_; ++i) {
    states_[i].store(kEmpty, std::memory_order_relaxed);
    slots_[i].reach.store(0, std::memory_order_relaxed);
  }
  live_.store(0, std::memory_order_relaxed);
  published_.store(0, std::memory_order_relaxed);
  tombstones_.store(0, std::memory_order_relaxed);
  for (const auto& [key, entry] : live) {
    Reservation r;
    // Cannot fail: the keys are distinct and there are fewer of them than before.
    if (Reserve(key, &r) == ReserveOutcome::kReserved) Publish(r, entry);
  }
}

}  // namespace flatcake
