// The tiered baseline's placement policy, apart from its data: which objects are admitted,
// evicted, offloaded, dropped with their bucket, staged, revoked and promoted. TieredStore calls
// it for every decision and does the copies and the I/O itself; the discrete-event simulator
// (src/sim/) calls the same code in virtual time, with no memory behind the tiers. What the
// policy is (the Mooncake / HiCache defaults and their sources) is told in tiered_store.h and
// docs/replay.md.
//
// Pieces:
//  - TieredDirectory: the object map, the DRAM LRU, the SSD bucket ring and the policy counters.
//    Offsets are real: DRAM offsets come from a DramSpace (TieredStore's arena, or a bare
//    ExtentAllocator in the simulator: 1 TiB of "DRAM" costs only its free-range map), SSD
//    offsets from the ring over an SsdGeometry (pool offset = file * file_bytes + offset).
//  - StagingPool: the staging memory's accounting (first-fit offsets, used, peak), with no
//    waiting in it; TieredStore waits on a condition variable around it, the simulator queues
//    waiters in virtual time.
//  - Pure functions of the options: the prefetch deadline and trim, the staged read plan's
//    options, its partition into batches and what has landed after some batches.
//
// Thread safety: none of these classes synchronises itself (TieredStore holds its mutexes around
// every call; the simulator is single-threaded). DramSpace implementations may be called with the
// directory's caller's lock held.
//
// Object states (TieredDirectory): an object is in DRAM when it has a DRAM offset, on SSD when it
// has a live bucket; either or both. While `writing` (a put copying it in) it is invisible; while
// `evicting` (chosen as a victim, its offload in flight) or `promoting` (an SSD hit being copied
// into DRAM) it is neither admitted again nor dropped from the map by a bucket drop. A pinned DRAM
// object is never a victim, and a victim still pinned is freed on its last unpin (free_on_unpin).
// A pinned bucket is never dropped: an offload that needs its space drops its victim instead.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "flatcake/key.h"
#include "flatcake/layout.h"
#include "flatcake/options.h"
#include "flatcake/status.h"
#include "flatcake/store.h"
#include "io/coalesce.h"
#include "io/io_engine.h"
#include "media/extent_allocator.h"

namespace flatcake::baseline {

struct TieredStoreOptions {
  // --- DRAM tier ---
  uint64_t dram_bytes = 1 * kGiB;
  HugePageMode huge_pages = HugePageMode::kAuto;
  double high_watermark = 0.95;  // Mooncake master eviction_high_watermark_ratio
  double eviction_ratio = 0.05;  // Mooncake master eviction_ratio

  // --- SSD tier (bucket backend); no directory = DRAM-only ---
  std::vector<std::string> ssd_dirs;
  uint64_t ssd_bytes = 4 * kGiB;       // total SSD budget (a whole number of buckets' files)
  uint64_t bucket_bytes = 256 * kMiB;  // a bucket closes at this size ...
  uint32_t bucket_keys = 500;          // ... or at this many keys
  DirectIoMode direct_io = DirectIoMode::kAuto;

  // --- host staging of SSD hits (HiCache prefetch) ---
  uint64_t staging_bytes = 256 * kMiB;
  double prefetch_timeout_base_s = 2.0;  // HiCache timeout policy
  double prefetch_timeout_per_ki_token_s = 0.1;
  double prefetch_timeout_max_s = 30.0;
  bool promote_on_hit = true;
  // A promotion reads the object from SSD again (the store loads the offloaded replica back),
  // rather than reusing the staged copy that was delivered.
  bool promotion_rereads = true;
  uint32_t prefetch_batch_objects = 128;  // objects per batch of prefetch reads
  // Tokens in one block: the timeout policy is per token, and the Store interface's Restore
  // derives a prefetch's tokens from its keys (TieredStoreAdapter).
  uint32_t tokens_per_block = 256;

  // --- I/O ---
  IoEngineKind io_engine = IoEngineKind::kAuto;
  uint32_t io_workers = 2;
  uint32_t io_queue_depth = 64;
  uint64_t max_io_bytes = 4 * kMiB;  // merged reads and offload writes are split at this size
};

Status ValidateTieredStoreOptions(const TieredStoreOptions& options);

struct TieredStats {
  MediumStats dram;        // admitted = new blocks; written = admissions + promotions + re-persists
  MediumStats ssd;         // admitted = 0 (nothing is placed on SSD directly); written = offloads
  uint64_t evictions = 0;  // objects evicted from DRAM
  uint64_t offloads = 0;   // ... of which written to SSD
  uint64_t evicted_dropped = 0;       // ... of which lost (no SSD tier, or no room)
  uint64_t promotions = 0;            // SSD hits copied back into DRAM
  uint64_t promotion_read_bytes = 0;  // SSD bytes read to promote
  uint64_t repersisted = 0;           // blocks re-put while an SSD copy existed
  uint64_t revocations = 0;           // prefetches revoked (whole or trimmed)
  uint64_t revoked_blocks = 0;
  uint64_t buckets_written = 0;  // buckets opened
  uint64_t buckets_dropped = 0;
  uint64_t blocks_dropped = 0;  // objects lost with a dropped bucket
  uint64_t staging_peak_bytes = 0;
  uint64_t io_errors = 0;
};

// Objects (and staging ranges, SSD extents) are whole 4 KiB pages.
inline constexpr uint64_t kTieredAlign = 4096;

// The size of one block's object: its layout's block bytes rounded up to a page.
uint64_t TieredObjectBytes(const KvLayout& layout);

// --- prefetch policy (pure functions of the options) ---

// The prefetch deadline HiCache's timeout policy gives a prefetch of `tokens` tokens.
double PrefetchTimeoutSeconds(const TieredStoreOptions& options, uint64_t tokens);
// How many of a prefetch's `ssd_hits` leading SSD hits it keeps: one larger than the whole staging
// pool is trimmed to its leading part that fits (it could never fit); the rest is revoked.
size_t PrefetchKeep(const TieredStoreOptions& options, uint64_t obj_bytes, size_t ssd_hits);
// How SSD hits are planned: only objects adjacent on disk merge (no gap bridging), reads split at
// max_io_bytes.
CoalesceOptions StagedReadOptions(const TieredStoreOptions& options);
// The plan's reads in batches of at least prefetch_batch_objects objects (a batch ends at the read
// that reaches it; a single read is never split): the end (one past the last read) of each batch,
// in issue order. The deadline is checked as each batch completes: the batches after one that
// completed late are never issued.
std::vector<size_t> PartitionReadBatches(const CoalescePlan& plan, uint32_t batch_objects);
// The slices (a prefix of plan.slices) delivered when the reads up to `reads_end` (a batch end,
// or 0 for none) completed by the deadline.
size_t SlicesLanded(const CoalescePlan& plan, size_t reads_end);

// --- the media the directory places objects on ---

// The DRAM address space: TieredStore's DramArena, or the simulator's ExtentAllocator (both
// through DramSpaceOf).
class DramSpace {
 public:
  virtual ~DramSpace() = default;
  virtual Result<uint64_t> Allocate(uint64_t bytes) = 0;
  // REQUIRES: (offset, bytes) came from Allocate and was not freed since.
  virtual void Free(uint64_t offset, uint64_t bytes) = 0;
  virtual uint64_t used() const = 0;
};

// A DramSpace over anything with Allocate(bytes) / Free(offset, bytes) / used() (DramArena,
// ExtentAllocator). `space` must outlive it.
template <class Space>
class DramSpaceOf final : public DramSpace {
 public:
  explicit DramSpaceOf(Space* space) : space_(space) {}
  Result<uint64_t> Allocate(uint64_t bytes) override { return space_->Allocate(bytes); }
  void Free(uint64_t offset, uint64_t bytes) override { space_->Free(offset, bytes); }
  uint64_t used() const override { return space_->used(); }

 private:
  Space* const space_;
};

// The SSD pool's shape: `num_files` files of `file_bytes` (one bucket never straddles two files).
// num_files == 0: no SSD tier (DRAM-only).
struct SsdGeometry {
  uint32_t num_files = 0;
  uint64_t file_bytes = 0;
  // The pool TieredStore opens for `options`: ssd_bytes / bucket_bytes files of bucket_bytes;
  // none without ssd_dirs.
  static SsdGeometry ForOptions(const TieredStoreOptions& options);
};

// --- the directory ---

// What a put does with one key.
enum class PutAdmission {
  kPresent,    // in DRAM, or being written, evicted or promoted by another request: nothing
  kNew,        // a new block: admitted
  kRepersist,  // held only on SSD: the recomputed block lands in DRAM again
};

// An object chosen for eviction, with its offload decided.
struct EvictionVictim {
  Key key;
  uint64_t dram_off = 0;
  // Its bucket: the one it already had, or the one it was appended to; -1 = dropped.
  int64_t bucket = -1;
  uint64_t ssd_off = 0;  // pool offset in that bucket
  bool write = false;    // offload it (it had no SSD copy and got room in a bucket)
};

// A Get's hits: the keys' indices found in DRAM (pinned, with their DRAM offsets) and on SSD.
struct TieredHits {
  std::vector<uint32_t> dram, ssd;
  std::vector<uint64_t> dram_offs;
};

class TieredDirectory {
 public:
  // How often AllocateDram's caller evicts and retries before reporting DRAM full of pinned
  // objects.
  static constexpr int kAllocateAttempts = 3;

  // `dram` must outlive the directory; its capacity budget is options.dram_bytes.
  TieredDirectory(const TieredStoreOptions& options, DramSpace* dram, SsdGeometry ssd);
  TieredDirectory(const TieredDirectory&) = delete;
  TieredDirectory& operator=(const TieredDirectory&) = delete;

  // The one layout this directory holds: the first call fixes it; InvalidArgument for any other.
  Status AdoptLayout(const KvLayout& layout);
  uint64_t obj_bytes() const { return obj_bytes_; }  // 0 until a layout was adopted
  bool has_ssd() const { return ssd_.num_files > 0; }
  const SsdGeometry& ssd() const { return ssd_; }

  // --- put ---
  // Decides what a put does with `key`; unless kPresent the object is now `writing`, and the
  // caller allocates DRAM (the allocation sequence below), copies the block in and calls
  // FinishPut.
  PutAdmission BeginPut(const Key& key);
  // `dram_off`: where the block landed, nullopt when no DRAM could be had (a new object is then
  // forgotten; one with an SSD copy stays on SSD).
  void FinishPut(const Key& key, PutAdmission admission, std::optional<uint64_t> dram_off);

  // --- DRAM allocation and eviction ---
  // An allocation is: up to kAllocateAttempts times, evict (ChooseVictims, the offload writes,
  // FinishEviction) when NeedsEviction, then TryAllocateDram.
  // True when `bytes` more would push DRAM usage past the high watermark.
  bool NeedsEviction(uint64_t bytes) const;
  // `bytes` of DRAM, when they fit the capacity budget (NoSpace otherwise).
  Result<uint64_t> TryAllocateDram(uint64_t bytes);
  // The first half of an eviction pass: takes the least recently used unpinned objects out of
  // the LRU until usage would be eviction_ratio below the high watermark (none when it already
  // is), marks them evicting and counts them, and appends those with no SSD copy, in eviction
  // order, to the open bucket (dropping old buckets for room; a victim meets a pinned bucket or no
  // SSD tier: it is dropped). Writing the victims with `write` set is the caller's.
  std::vector<EvictionVictim> ChooseVictims();
  // The second half: `write_ok` = every offload write succeeded. An offloaded victim whose bucket
  // is still live gets its SSD copy; a victim with none is lost. Frees the victims' DRAM (at the
  // last unpin for those pinned meanwhile).
  void FinishEviction(std::span<const EvictionVictim> victims, bool write_ok);

  // --- lookup and get ---
  // The leading keys held on either tier (an object with no DRAM copy counts as SSD).
  LookupResult Lookup(std::span<const Key> keys) const;
  // Pins and touches the DRAM hits of `keys`, lists the SSD-only ones. InvalidArgument when
  // `layout` is not the stored one.
  Status PinHits(std::span<const Key> keys, const KvLayout& layout, TieredHits* hits);
  // REQUIRES: `key` was pinned by PinHits.
  void UnpinDram(const Key& key);
  // Pins the buckets of the SSD hits `ssd_hits` (indices into `keys`) still on SSD and returns
  // their reads (whole objects; `layer` = the key index, which the planner carries through its
  // sort). An object whose bucket was dropped meanwhile is left out: a miss. `*pinned` receives
  // the pinned bucket ids, for UnpinBuckets.
  std::vector<SliceRead> PinBuckets(std::span<const Key> keys, std::span<const uint32_t> ssd_hits,
                                    std::vector<int64_t>* pinned);
  void UnpinBuckets(std::span<const int64_t> pinned);
  // Counts `blocks` revoked from one prefetch; `*prefetch_revoked` is that prefetch's count so
  // far (its first revoked blocks count one revocation).
  void CountRevoked(uint32_t blocks, uint32_t* prefetch_revoked);

  // --- promotion of a delivered SSD hit ---
  // True when `key` is to be promoted (it is on SSD only, and neither being written nor evicted
  // nor promoted by another request); it is then `promoting` (still readable from SSD) until
  // FinishPromotion. The caller allocates DRAM (as for a put) and copies the object in.
  bool BeginPromotion(const Key& key);
  // `dram_off`: where it landed, nullopt when no DRAM could be had. Frees that DRAM when the
  // object was dropped meanwhile. Returns whether the object is now in DRAM (the most recently
  // used).
  bool FinishPromotion(const Key& key, std::optional<uint64_t> dram_off);

  // --- stats ---
  // The policy counters, and the ones the caller counts (the media's read/written/delivered
  // bytes, promotion_read_bytes, io_errors): the caller adds to those through counters().
  TieredStats& counters() { return stats_; }
  // counters() with the DRAM used bytes and both tiers' live objects (a promoted object counts
  // on both).
  TieredStats Stats() const;

 private:
  struct Object {
    int64_t dram_off = -1;  // DRAM offset, -1 = not in DRAM
    uint32_t dram_pins = 0;
    bool writing = false;
    bool evicting = false;
    bool promoting = false;
    bool free_on_unpin = false;
    int64_t bucket = -1;   // bucket id, -1 = no SSD copy
    uint64_t ssd_off = 0;  // pool offset of the object
    bool in_lru = false;
    std::list<Key>::iterator lru;
  };
  struct Bucket {
    uint64_t id = 0;
    uint32_t file = 0;
    uint64_t start = 0;  // offset in the file
    uint64_t bytes = 0;
    std::vector<Key> keys;
    uint32_t pins = 0;
  };

  // Reserves `bytes` in the open bucket (dropping old buckets for room); false when a pinned
  // bucket is in the way or no object fits a file.
  bool AppendToBucket(const Key& key, uint64_t bytes, int64_t* bucket, uint64_t* pool_off);
  void DropOldestBucket();
  Bucket* FindBucket(int64_t id);
  void FreeDram(Object& obj);
  // Makes `obj` the most recently used (enters it into the LRU if it is in DRAM and not leaving).
  void Touch(const Key& key, Object& obj);

  const TieredStoreOptions options_;
  DramSpace* const dram_;
  const SsdGeometry ssd_;
  std::unordered_map<Key, Object, KeyHash> objects_;
  std::list<Key> lru_;          // front = most recently used
  std::deque<Bucket> buckets_;  // creation order; front = oldest live
  uint64_t next_bucket_id_ = 0;
  bool bucket_open_ = false;
  uint32_t head_file_ = 0;  // the ring head: where the next object goes
  uint64_t head_off_ = 0;
  TieredStats stats_;
  uint64_t obj_bytes_ = 0;    // object size of the one layout held (0 = none yet)
  uint64_t block_bytes_ = 0;  // that layout's block bytes (unaligned)
};

// --- staging ---

// The host staging pool's accounting: first-fit page-aligned ranges of [0, capacity), the bytes
// held and their peak. No waiting: TryAcquire fails at once when no range fits.
class StagingPool {
 public:
  // `capacity` is rounded up to a page. TieredStore passes its staging arena's (staging_bytes
  // rounded up to 2 MiB).
  explicit StagingPool(uint64_t capacity);
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // The offset of `bytes` (rounded up to a page), nullopt when no free range is large enough.
  std::optional<uint64_t> TryAcquire(uint64_t bytes);
  // REQUIRES: (offset, bytes) came from TryAcquire and was not released since.
  void Release(uint64_t offset, uint64_t bytes);

  uint64_t capacity() const { return alloc_.capacity(); }
  uint64_t used() const { return used_; }
  uint64_t peak() const { return peak_; }

 private:
  ExtentAllocator alloc_;
  uint64_t used_ = 0;
  uint64_t peak_ = 0;
};

}  // namespace flatcake::baseline
