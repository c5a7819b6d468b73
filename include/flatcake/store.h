// Store: the FlatCake facade. Host DRAM and SSD are peer media behind one 64-bit address space;
// each batch of blocks is placed once, on its final medium, as one layer-major segment of a
// session scope, and never migrates.
//
// Restores are requests (paper §3.3, FC-MAS). Lookup tells a caller, from the GVAs alone, how many
// leading blocks are present and the slowest medium among them. Restore starts a request and
// returns a handle at once; the store's scheduler serves a request whose hits are all in DRAM at
// once (on the calling thread), queues one that needs SSD by its response ratio
// 1 + wait / kv_bytes and admits it as the read window frees, and hands finished requests back in
// original-arrival order among those ready. Backpressure waits; it never aborts. Get is Restore +
// Wait. StoreOptions::scheduler selects FC-MAS or one FCFS queue (for comparison).
//
// Thread safety: every method may be called concurrently from any number of threads, and a
// RestoreHandle may be waited on from several threads. Lookups (Lookup, Exists and the index part
// of Restore) take a shared batch-level lock, never a per-key one, and the index itself is
// read without locks; placement and allocation in Put take a short internal mutex; data copies
// and I/O run outside it.
//
// Guarantees:
//  - Write-once: a key already present (or being written) is not rewritten; Put reports it as
//    already_present.
//  - A key becomes visible to Lookup/Restore only after its data is fully written.
//  - A restore never returns bytes of a reclaimed scope: it pins the scopes of its hits from
//    Restore until it is done, and reclamation skips pinned scopes. Every block's checksum is
//    verified on read; a mismatch is a miss and counted.
//  - Errors (bad layout, null buffers, no space, I/O errors) come back as a Status; the store stays
//    usable and everything published before stays readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "flatcake/clock.h"
#include "flatcake/gva.h"
#include "flatcake/key.h"
#include "flatcake/layout.h"
#include "flatcake/options.h"
#include "flatcake/status.h"

namespace flatcake {

// Write-time signals for placement (paper Table 2) and scope inference. All optional.
struct WriteHints {
  // Caller's session id. Empty: the session is inferred from the key chain (prefix_tail).
  std::string session;
  // Key of the block just before keys[0] in the caller's prefix chain. When it is the tail of an
  // existing scope, the batch joins that scope's session.
  std::optional<Key> prefix_tail;
  uint32_t turn = 0;                           // 0 = unknown: inferred from the session
  std::optional<uint64_t> prior_reply_tokens;  // output tokens of the previous turn
  std::optional<uint64_t> context_tokens;      // tokens before keys[0]; default from the chain
  bool shared_prefix = false;                  // the engine's prefix refcount is > 1
  std::optional<MediaType> force_medium;       // bypass placement (tools, tests)
};

struct PutResult {
  uint32_t written = 0;                 // blocks written by this call
  uint32_t already_present = 0;         // blocks skipped because the key exists or is being written
  MediaType medium = MediaType::kDram;  // where the written blocks went
  uint32_t segments = 0;  // segments created (more than 1 when an extent boundary split it)
};

// What Lookup found: the leading keys present, read from their GVAs.
struct LookupResult {
  uint32_t leading_hits = 0;  // number of leading keys present (published, not reclaimed)
  // The slowest medium among the leading hits (kDram when there are none): what a restore of
  // them waits for.
  MediaType slowest_medium = MediaType::kDram;
  uint64_t dram_bytes = 0;  // bytes of the leading hits on each medium
  uint64_t ssd_bytes = 0;
};

// RestoreOptions::arrival_ns value meaning "when Restore is called".
inline constexpr int64_t kArrivalNow = -1;

struct RestoreOptions {
  // When the request arrived, on SteadyNowNs's clock (flatcake/clock.h). A caller that received the
  // request earlier (a serving engine's scheduler) passes that time: FC-MAS orders by it, and the
  // wait it counts toward the response ratio starts there.
  int64_t arrival_ns = kArrivalNow;
  // Called once per layer, in increasing layer order, when every requested block's slices of
  // that layer are in the caller's memory; on the calling thread for a DRAM-ready request, on an
  // I/O thread otherwise. Checksums are verified when the whole block has arrived, so a block may
  // still be reported as a miss after its layers were delivered. Must not block on the restore.
  std::function<void(uint32_t layer)> on_layer;
};

struct GetResult {
  std::vector<uint8_t> found;  // per key: 1 = delivered and verified
  uint32_t hits = 0;
  uint32_t leading_hits = 0;  // length of the found prefix
  uint32_t corrupt = 0;       // checksum mismatches (reported as misses)
  uint64_t bytes_from_dram = 0;
  uint64_t bytes_from_ssd = 0;  // delivered bytes that came from SSD
  uint64_t ssd_bytes_read = 0;  // bytes read from SSD (delivered + bridged gaps + alignment)
  uint64_t ssd_reads = 0;       // read commands issued
  // Of ssd_reads: those that landed straight in the destination buffers (their slices line up
  // with the file, aligned), not staged and copied.
  uint64_t ssd_reads_in_place = 0;
  // Scheduling (ns on the steady clock): how long the request waited for the read window (0 for a
  // DRAM-ready one), and how long its SSD reads took once admitted.
  int64_t queued_ns = 0;
  int64_t ssd_read_ns = 0;
  // Hits the store gave up on and reported as misses so that the caller recomputes them (the
  // tiered baseline revokes a prefetch that cannot get staging memory, or whose reads land, by
  // its deadline). Always 0 for the flat store, which waits instead.
  uint32_t revoked = 0;
};

// A restore in progress, returned by Store::Restore. The destination buffers must stay valid,
// and untouched by the caller, until the restore is done. Destroying a handle before the restore
// is done cancels it and waits for its reads to land.
class RestoreHandle {
 public:
  virtual ~RestoreHandle() = default;
  // Blocks until the restore is done; its result, or the error that failed it (Aborted when it
  // was cancelled). May be called again, and from several threads.
  virtual Result<GetResult> Wait() = 0;
  // Blocks at most `timeout`; true when the restore is done.
  virtual bool WaitFor(std::chrono::nanoseconds timeout) = 0;
  // Blocks until layer `layer` of every requested block is in the caller's memory (OK), or the
  // restore failed (its error). InvalidArgument for a layer out of range.
  virtual Status WaitLayer(uint32_t layer) = 0;
  virtual bool done() const = 0;
  // Fails the restore with Aborted unless it is done: a request still waiting for the window is
  // dropped from the queue; one whose reads are in flight issues no more reads. A no-op once done.
  virtual void Cancel() = 0;
};

struct MediumStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;      // allocated to live scopes
  uint64_t admitted_bytes = 0;  // bytes placed on this medium by Put (segment footprints)
  uint64_t written_bytes = 0;   // bytes physically written to this medium
  uint64_t read_bytes = 0;      // bytes read from this medium (SSD: including bridged gaps)
  uint64_t delivered_bytes = 0;
  uint64_t reclaimed_bytes = 0;
  uint64_t scopes_live = 0;
  uint64_t scopes_reclaimed = 0;
  uint64_t blocks_live = 0;
};

struct StoreStats {
  MediumStats dram;
  MediumStats ssd;
  uint64_t puts = 0, gets = 0, exists_calls = 0;  // gets: Restore calls; exists_calls: Lookups
  uint64_t restores_dram_ready = 0, restores_ssd = 0, restores_cancelled = 0;
  uint64_t restore_window_peak_bytes = 0;  // most SSD restore bytes FC-MAS had admitted at once
  uint64_t blocks_written = 0, blocks_skipped_present = 0;
  uint64_t hits = 0, misses = 0, checksum_mismatches = 0;
  uint64_t io_errors = 0;
  uint64_t index_capacity = 0, index_size = 0, index_tombstones = 0, index_compactions = 0;
  uint64_t sessions = 0;  // sessions with at least one live scope
  // Durable pools: journal size, rewrites, records that could not be written (the data stays
  // correct: a lost free record is caught at recovery by overlap and checksums) and syncs.
  uint64_t journal_bytes = 0, journal_rewrites = 0, journal_errors = 0, syncs = 0;
  // Copied from StoreInfo: what recovery at open rebuilt.
  uint64_t recovered_blocks = 0, recovered_segments = 0, skipped_records = 0;
};

// What Open found and chose; printed by `flatcake info`.
struct StoreInfo {
  std::string dram_page_mode;  // "hugetlb", "thp", "plain", or "none"
  std::string io_engine;       // engine in use
  std::string io_note;         // why a fallback was chosen, if any
  bool ssd_direct_io = false;
  std::string ssd_note;  // e.g. "O_DIRECT refused by tmpfs; using buffered I/O"
  uint32_t ssd_files = 0;
  std::vector<std::string> ssd_dirs;
  // SSD segment writes (from write_staging_bytes): the bytes of each write and how many are kept
  // in flight; 0 without SSD.
  uint64_t ssd_write_io_bytes = 0;
  uint32_t ssd_writes_in_flight = 0;
  std::string dram_backing;  // "anonymous", or "file <dram_path>" (outlives the process)
  std::string dram_journal_path;
  // --- durability (docs/format.md) ---
  bool ssd_durable = false;  // the SSD pool keeps a journal and survives restarts
  std::string journal_path;  // the pool's journal, when durable
  std::string sync_mode;     // "none", "interval" or "every"
  bool recovered = false;    // the pool held data of an earlier run, rebuilt at open
  uint64_t recovered_scopes = 0;
  uint64_t recovered_segments = 0;
  uint64_t recovered_blocks = 0;
  uint64_t recovered_bytes = 0;      // payload bytes of the recovered blocks
  uint64_t skipped_records = 0;      // damaged, torn or conflicting journal records passed over
  uint64_t recovery_read_bytes = 0;  // bytes read to recover (journal and superblocks)
  double recovery_seconds = 0;
};

class Store {
 public:
  // Opens a store: maps the DRAM arena, creates and pre-allocates the SSD pool files, starts the
  // I/O workers. Refuses, with a clear message, a missing, unwritable or too-small SSD directory.
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  virtual ~Store() = default;

  // Writes the blocks named by `keys` from `src` (laid out per `layout`). Keys already present are
  // skipped. On error nothing of this call is published.
  virtual Result<PutResult> Put(std::span<const Key> keys, const KvLayout& layout,
                                const BlockBuffers& src, const WriteHints& hints = {}) = 0;

  // The leading keys that are present, the slowest medium among them and their bytes per medium.
  virtual LookupResult Lookup(std::span<const Key> keys) = 0;
  // Number of leading keys that are present: Lookup(keys).leading_hits.
  size_t Exists(std::span<const Key> keys) { return Lookup(keys).leading_hits; }

  // Starts restoring the blocks named by `keys` into `dst` and returns at once (a DRAM-ready
  // request is served before it returns). A missing key is a miss (found[i] = 0), not an error.
  // Errors, before anything is read: bad buffers, or a stored block whose layout differs from
  // `layout` (InvalidArgument). `keys` need not outlive the call; `dst`'s memory must outlive the
  // restore.
  virtual Result<std::unique_ptr<RestoreHandle>> Restore(std::span<const Key> keys,
                                                         const KvLayout& layout,
                                                         const BlockBuffers& dst,
                                                         const RestoreOptions& options = {}) = 0;
  // Restore + Wait.
  Result<GetResult> Get(std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& dst,
                        const RestoreOptions& options = {});

  // Reclaims whole unpinned scopes of `medium`, oldest last use first, until its usage is at most
  // `target_fraction` of capacity. Returns the bytes freed. Runs automatically at the high
  // watermark; exposed for tools and tests.
  virtual uint64_t Reclaim(MediaType medium, double target_fraction) = 0;

  // Drops every scope (used by `clear` in integrations).
  virtual void Clear() = 0;

  virtual StoreStats GetStats() const = 0;
  virtual StoreInfo GetInfo() const = 0;
  virtual const StoreOptions& options() const = 0;
};

}  // namespace flatcake
