// FlatStore: the single-node implementation of Store (include/flatcake/store.h), gluing FC-GVA
// (BlockIndex, scopes, placement), the media (DramArena, SsdFilePool) and FC-CIO (IoEngine,
// RestoreReader). See store.h for the contract and scope.h for the reader/reclaimer protocol.
//
// Placement policy (sessions, media, scopes, segments, reclamation) is the ScopePlacer's
// (store/scope_placer.h); FlatStore is its ScopeHost, over the media and the scope slots.
//
// Locking: `mu_` guards the placer (sessions), scope descriptors and allocation; it is never held
// across data copies or I/O. Index lookups and scope pins are lock-free. `index_mu_` is a
// batch-level maintenance lock: every Put, Restore (lookup phase), Lookup and Reclaim holds it
// shared (one atomic operation per call, not per key), and index compaction takes it exclusive for
// the few milliseconds the rebuild needs. Lock order: index_mu_ before mu_. Restores are scheduled
// by FC-MAS (`sched_`); `jobs_mu_` guards the restores in progress and the dispatcher's work queue
// (flat_store_restore.cc) and is never held while calling the scheduler, a job or the reader.
//
// Each of Put and Restore is a metadata half (reservation and publication; lookup and pins) and a
// data half (SegmentWriter; PinnedRead: store/data_plan.h). The metadata halves are public too,
// as leases (flat_store_lease.cc), so that another process can move the bytes itself: the node
// daemon's clients. `leases_mu_` guards the leases in force; it is taken after index_mu_ (index
// compaction re-takes the index slots of the reservations in force) and never with mu_ held.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "flatcake/store.h"
#include "gva/block_index.h"
#include "io/coalesce.h"
#include "io/io_engine.h"
#include "io/restore_reader.h"
#include "media/dram_arena.h"
#include "media/durable_format.h"
#include "media/journal.h"
#include "media/ssd_file_pool.h"
#include "sched/mas_scheduler.h"
#include "store/data_plan.h"
#include "store/pinned_read.h"
#include "store/restore_job.h"
#include "store/scope.h"
#include "store/scope_placer.h"
#include "store/segment_layout.h"
#include "store/segment_writer.h"
#include "store/staging.h"
#include "util/thread_annotations.h"

namespace flatcake {

class FlatStore final : public Store, private ScopeHost {
 public:
  // `engine` may be injected (tests wrap the real engine in a fault injector); when null, Open
  // builds one from the options.
  static Result<std::unique_ptr<FlatStore>> OpenWithEngine(const StoreOptions& options,
                                                           std::unique_ptr<IoEngine> engine);
  ~FlatStore() override;

  Result<PutResult> Put(std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& src,
                        const WriteHints& hints = {}) override;
  LookupResult Lookup(std::span<const Key> keys) override;
  // An SSD restore of at least this many slices starts its first layer as a restore of its own,
  // ahead of the rest (io/layered_restore.h).
  static constexpr size_t kSplitRestoreSlices = LayeredRestore::kSplitSlices;
  // A restore delivering at least this many bytes from DRAM copies with streaming stores
  // (store/pinned_read.h says why).
  static constexpr uint64_t kStreamingCopyBytes = PinnedRead::kStreamingCopyBytes;
  Result<std::unique_ptr<RestoreHandle>> Restore(std::span<const Key> keys, const KvLayout& layout,
                                                 const BlockBuffers& dst,
                                                 const RestoreOptions& options = {}) override;
  // Restore of layers [first_layer, end_layer) of each block only, scheduled by FC-MAS as a
  // restore of those bytes: the other layers' destination bytes are left alone (their slice
  // pointers may alias the range's), on_layer reports the range's layers, and the blocks are not
  // checked against their stored checksums, which cover every layer: `found` says a block's
  // range was delivered, and the caller checks the bytes (the cluster's peer service streams a
  // long restore this way, part by part through a ring of layer buffers, to a client that checks
  // every block end to end). InvalidArgument for an empty range or one past the layout.
  Result<std::unique_ptr<RestoreHandle>> RestoreLayers(std::span<const Key> keys,
                                                       const KvLayout& layout,
                                                       const BlockBuffers& dst,
                                                       uint32_t first_layer, uint32_t end_layer,
                                                       const RestoreOptions& options = {});
  uint64_t Reclaim(MediaType medium, double target_fraction) override;
  void Clear() override;
  StoreStats GetStats() const override;
  StoreInfo GetInfo() const override { return info_; }
  const StoreOptions& options() const override { return options_; }

  // --- leases: the metadata halves, for a process that moves the bytes itself ---
  // The node daemon serves its clients with these: a client fills a reservation's segments and
  // reads a pin's hits through its own mapping of the arena and its own descriptors of the pool
  // files (SegmentWriter, PinnedRead) and tells the store when it is done. Every reservation and
  // pin has an owner (the daemon's: a connection; any number will do), and ReleaseOwner ends all
  // of an owner's leases at once, so a client that dies publishes nothing and pins nothing. A
  // lease id that is not the caller's (unknown, ended, another owner's) is NotFound. Id 0 names
  // no lease: publishing, aborting or unpinning it is a no-op.

  // A store whose media other processes can reach (shared_media()): without dram_path its DRAM
  // arena is a memfd (DramArena::CreateShared) instead of an anonymous mapping. Otherwise as
  // OpenWithEngine.
  static Result<std::unique_ptr<FlatStore>> OpenShared(const StoreOptions& options,
                                                       std::unique_ptr<IoEngine> engine = nullptr);
  // The arena's descriptor and size (dram_fd -1 when it is anonymous: not opened shared) and the
  // pool's files, for a process that reaches them itself.
  SharedMedia shared_media() const;
  // The arena's bytes in this process (null without DRAM), for a transport that lets other
  // nodes read pinned blocks from it (src/cluster/peer_service.h); its size is
  // shared_media().dram_bytes. Bytes are only meaningful under a pin.
  const uint8_t* dram_arena_base() const { return dram_ ? dram_->base() : nullptr; }

  // Put's first half: marks the keys not already present as being written (concurrent writers
  // see them as already present, readers miss them) and places them, exactly as Put does; the
  // reservation names each segment's extent. Nothing of it is visible until PublishWrite. With
  // every key present, id 0 and nothing held. Errors as Put's (bad layout, no space).
  Result<WriteReservation> ReserveWrite(uint64_t owner, std::span<const Key> keys,
                                        const KvLayout& layout, const WriteHints& hints = {})
      EXCLUDES(index_mu_, mu_, leases_mu_);
  // Put's data half in this process, for an owner that holds no media of its own (a cluster
  // peer's put, which the daemon charges to a tenant between the halves): writes every segment of
  // `r` from `src` with the store's writer; `checksums` as PublishWrite takes them.
  Status WriteReserved(const WriteReservation& r, const BlockBuffers& src,
                       std::vector<uint64_t>* checksums) const;
  // Put's second half, once the owner's data half has written every segment of the reservation:
  // `checksums` has one per entry of its `blocks` (SegmentWriter::WriteAll's). Publishes segment
  // after segment (a durable medium's commit record, then the index entries) and ends the lease.
  // On an error (a commit record that cannot be written; InvalidArgument for a wrong number of
  // checksums, publishing nothing) the segments not yet published are aborted.
  Status PublishWrite(uint64_t owner, uint64_t reservation, std::span<const uint64_t> checksums)
      EXCLUDES(index_mu_, mu_, leases_mu_);
  // Ends a reservation unpublished: its keys are free again, its extents reusable.
  Status AbortWrite(uint64_t owner, uint64_t reservation) EXCLUDES(index_mu_, mu_, leases_mu_);

  // Restore's first half: looks the keys up and pins the scopes of the hits, exactly as Restore
  // does, so that their bytes stay put until Unpin. With no hit, id 0 and nothing held.
  // InvalidArgument, nothing pinned, for a bad layout or a hit stored with another one. Hits and
  // misses are the reader's to count (the store counts a lease's restore as a get).
  Result<ReadPin> PinRead(uint64_t owner, std::span<const Key> keys, const KvLayout& layout)
      EXCLUDES(index_mu_, leases_mu_);
  Status Unpin(uint64_t owner, uint64_t pin) EXCLUDES(leases_mu_);

  // FC-MAS for a pin whose bytes its owner reads (store/restore_job.h): the pin becomes a restore
  // request with its slowest GVA and its SSD bytes, arrived at `arrival_ns` (kArrivalNow: now).
  // `on_admitted` runs once: with OK when the owner may read, before this returns when every hit
  // is in DRAM (or the window has room), else when FC-MAS admits the request into the read
  // window; with an error (Aborted) when the pin is unpinned or released, or the store closes,
  // first. It runs on the caller's thread or one of the store's, must not block and must not call
  // the store. An admitted owner reads, then calls FinishRead, which gives the window its bytes
  // back; Unpin and ReleaseOwner do that too. InvalidArgument for a pin already scheduled.
  Status AdmitRead(uint64_t owner, uint64_t pin, int64_t arrival_ns,
                   std::function<void(Status)> on_admitted) EXCLUDES(leases_mu_, jobs_mu_);
  // The owner's reads of pin `pin`, admitted by AdmitRead, are done. The pin stays until Unpin.
  // InvalidArgument when the pin was not admitted (or finished already).
  Status FinishRead(uint64_t owner, uint64_t pin) EXCLUDES(leases_mu_, jobs_mu_);

  // What an owner's reads of a pin delivered (the node daemon's clients report it as they unpin):
  // counted as the embedded Restore counts its own (hits, misses of the `num_keys` pinned,
  // checksum mismatches, bytes per medium), so that GetStats covers every read of the store.
  void RecordLeaseRead(size_t num_keys, const GetResult& result);

  // `listener` runs whenever a scope is freed (reclaimed, cleared, or released empty), with its
  // slot id, the generation it had while live (WriteReservation::scope_id and scope_gen) and its
  // medium: the node daemon accounts each tenant's bytes until their scope goes. It runs under
  // the store's placement lock, on the thread that frees the scope; it must be short and must not
  // call the store. Null removes it.
  void SetScopeReleaseListener(
      std::function<void(uint32_t id, uint32_t gen, MediaType medium)> listener) EXCLUDES(mu_);

  // FC-MAS now: SSD restores waiting for the read window, and those admitted into it whose reads
  // are not done (embedded restores and owners' reads alike). Zeros without SSD.
  struct RestoreQueueDepth {
    uint64_t waiting = 0;
    uint64_t admitted = 0;
  };
  RestoreQueueDepth restore_queue_depth() const;

  struct ReleasedLeases {
    uint32_t writes = 0;  // reservations aborted
    uint32_t pins = 0;    // pins dropped
  };
  // Aborts every reservation of `owner` and drops every pin of theirs (a connection closed).
  ReleasedLeases ReleaseOwner(uint64_t owner) EXCLUDES(index_mu_, mu_, leases_mu_);

  IoEngine& engine() { return *engine_; }
  SsdFilePool* ssd_pool() { return ssd_.get(); }
  // Test hook: the DRAM arena's bytes (null without DRAM), for tests that corrupt a stored block.
  uint8_t* TEST_dram_arena() { return dram_ ? dram_->base() : nullptr; }

  // Fails `job` with Aborted unless it is done (RestoreHandle::Cancel).
  void CancelRestore(const std::shared_ptr<RestoreJob>& job);

  // A sync that made SSD writes durable: of pool data (one file, or all of them), or of the
  // journal, whose durable length is then journal_bytes.
  struct SyncEvent {
    static constexpr uint32_t kAllFiles = UINT32_MAX;
    bool journal = false;
    uint32_t file = kAllFiles;
    uint64_t journal_bytes = 0;
  };
  // Test hook (power-loss tests): `listener` runs after each such sync, on the thread that synced
  // (a put's, Clear's, a journal rewrite's or the interval syncer's), one call at a time; it must
  // not call the store. Null removes it.
  void TEST_SetSyncListener(std::function<void(const SyncEvent&)> listener)
      EXCLUDES(sync_listener_mu_);

 private:
  // FC-MAS's executor: starts an admitted request's prefetch (flat_store_restore.cc).
  class Executor final : public PrefetchExecutor {
   public:
    explicit Executor(FlatStore* store) : store_(store) {}
    void Prefetch(const RestoreRequest& request, std::function<void(Status)> done) override;

   private:
    FlatStore* const store_;
  };
  struct PrefetchTask {
    uint64_t id;
    std::function<void(Status)> done;
  };
  struct MediumCounters {
    std::atomic<uint64_t> admitted{0}, written{0}, read{0}, delivered{0}, reclaimed{0},
        scopes_reclaimed{0};
  };

  // A pin in force (PinRead).
  struct PinLease {
    uint64_t owner = 0;
    std::vector<PinnedHit> hits;
    Gva slowest_gva = 0;
    uint64_t ssd_bytes = 0;
    uint64_t job = 0;  // its remote restore job (AdmitRead), 0 when none
  };

  FlatStore(const StoreOptions& options, std::unique_ptr<IoEngine> engine);
  // `shared`: a DRAM arena other processes can map (OpenShared).
  Status Init(bool shared);
  // The SSD pool's journal: in the first SSD directory. REQUIRES: ssd_dirs not empty.
  std::string SsdJournalPath() const;
  // How Init creates (or reopens) the SSD pool from the options.
  SsdFilePool::Options SsdPoolOptions() const;

  // A batch write from its placement to its end: the embedded Put's, or a lease's (ReserveWrite).
  // Until FinishWrite its scope is pinned, the index slots of its keys are reserved (other
  // writers see the keys as present, readers miss them) and its segments' extents allocated.
  struct PendingWrite {
    uint64_t owner = 0;
    KvLayout layout;
    Placement placement;                         // medium, scope (pinned), segments
    std::vector<uint32_t> todo;                  // batch indices of the keys to write
    std::vector<Key> keys;                       // keys[todo[i]]
    std::vector<BlockIndex::Reservation> slots;  // per entry of todo
    uint32_t already_present = 0;
    size_t published = 0;  // segments published: a prefix of placement.segments
    // Its slots could not be taken again after an index compaction (never expected): it can
    // only be aborted.
    bool lost = false;
  };

  // --- write path (flat_store.cc) ---
  // Takes index_mu_ shared itself (the name predates the lock annotations); Put compacts after.
  Result<PutResult> PutLocked(std::span<const Key> keys, const KvLayout& layout,
                              const BlockBuffers& src, const WriteHints& hints)
      EXCLUDES(index_mu_, mu_);
  // Reserves the index slots of the keys not already present (or being written) and places
  // them (PlaceBatch, under mu_) into *w. On error nothing is held. Counts already present keys.
  Status ReserveBatch(std::span<const Key> keys, const KvLayout& layout, const WriteHints& hints,
                      PendingWrite* w) REQUIRES_SHARED(index_mu_) EXCLUDES(mu_);
  // Segment w.published of `w`, whose data is written and whose blocks' checksums are
  // `checksums`: its commit record on a durable medium, then its index entries.
  Status PublishNextSegment(PendingWrite& w, std::span<const uint64_t> checksums)
      REQUIRES_SHARED(index_mu_) EXCLUDES(mu_);
  // Ends a write: the slots of its unpublished blocks are given up and their segments abandoned
  // (extents freed), its scope unpinned, and freed when it holds nothing.
  void FinishWrite(PendingWrite& w) REQUIRES_SHARED(index_mu_) EXCLUDES(mu_);
  // The segment of `w` that the data half writes.
  static ReservedSegment Reserved(const PendingWrite& w, const PendingSegment& ps);

  // --- ScopeHost (flat_store.cc): what the placer calls, under mu_ ---
  bool MediumEnabled(MediaType m) const override;
  uint64_t Capacity(MediaType m) const override;
  uint64_t Used(MediaType m) const override;
  uint64_t SsdFileBytes() const override { return ssd_->file_bytes(); }
  Result<uint64_t> AllocateExtent(MediaType m, uint64_t bytes, uint64_t hint) override;
  void FreeExtent(MediaType m, uint64_t offset, uint64_t bytes) override;
  uint32_t NumScopeSlots() const override { return options_.max_scopes; }
  Result<uint32_t> NewScope(MediaType medium, const KvLayout& layout, const std::string& session,
                            uint64_t now_ns) override REQUIRES(mu_);
  bool ScopeLive(uint32_t id) const override { return scopes_[id].live(); }
  uint32_t ScopeGeneration(uint32_t id) const override { return scopes_[id].generation(); }
  MediaType ScopeMedium(uint32_t id) const override REQUIRES(mu_) { return scopes_[id].medium; }
  const KvLayout& ScopeLayout(uint32_t id) const override REQUIRES(mu_) {
    return scopes_[id].layout;
  }
  const std::string& ScopeSession(uint32_t id) const override REQUIRES(mu_) {
    return scopes_[id].session;
  }
  const std::vector<Segment>& ScopeSegments(uint32_t id) const override REQUIRES(mu_) {
    return scopes_[id].segments;
  }
  uint64_t ScopeUsedBytes(uint32_t id) const override REQUIRES(mu_) {
    return scopes_[id].used_bytes;
  }
  uint32_t AppendScopeSegment(uint32_t id, const Segment& seg) override REQUIRES(mu_);
  void PopScopeSegment(uint32_t id) override REQUIRES(mu_);
  void AbandonScopeSegment(uint32_t id, uint32_t segment_no) override REQUIRES(mu_) {
    AbandonSegment(&scopes_[id].segments, segment_no, &scopes_[id].used_bytes);
  }
  uint64_t ScopeBlocks(uint32_t id) const override REQUIRES(mu_) { return scopes_[id].blocks; }
  uint32_t ScopeReaders(uint32_t id) const override { return scopes_[id].readers(); }
  uint64_t ScopeLastUse(uint32_t id) const override {
    return scopes_[id].last_use_ns.load(std::memory_order_relaxed);
  }
  void TouchScope(uint32_t id, uint64_t now_ns) override { scopes_[id].Touch(now_ns); }
  bool TryPinScope(uint32_t id, uint32_t gen) override { return scopes_[id].TryPin(gen); }
  bool TryRetireScope(uint32_t id, uint32_t gen) override { return scopes_[id].TryRetire(gen); }
  // The free record (durable media), then the scope's keys out of the index.
  void ReleaseScope(uint32_t id, uint32_t retired_gen) override REQUIRES(mu_);
  void RecycleScope(uint32_t id) override REQUIRES(mu_);
  // Counters; on a durable medium the free records' sync (sync=every) and a journal rewrite.
  void OnReclaimed(MediaType medium, uint64_t bytes, uint32_t scopes) override REQUIRES(mu_);

  // --- durability (flat_store_durable.cc; docs/format.md) ---
  // Opens the SSD pool's journal; replays it when the pool was recovered, else starts it anew.
  Status OpenJournal(MediaType m) EXCLUDES(mu_);
  // Rebuilds the medium's scopes, sessions, extents and index entries from its journal.
  Status Recover(MediaType m, const durable::ScanResult& scan) EXCLUDES(mu_);
  // Recovery: one scope from its claimed segments (in segment order); returns the segments
  // skipped (no scope slot, or a layout other than the scope's).
  uint64_t RebuildScopeLocked(MediaType m, uint64_t uid, uint64_t journal_bytes,
                              std::span<const durable::SegmentRecord* const> segs,
                              uint64_t last_use_ns) REQUIRES(mu_) REQUIRES_SHARED(index_mu_);
  // The commit record of a written SSD segment, appended before its blocks are published.
  // sync=every: the segment's data is flushed first and the record after.
  Status CommitSegment(ScopeSlot& scope, const PendingSegment& ps, std::span<const Key> keys,
                       std::span<const uint64_t> checksums) EXCLUDES(mu_);
  // Before a durable SSD scope's extents are freed: its free record (nothing while Clear runs,
  // whose one record covers every scope).
  void JournalFreeLocked(const ScopeSlot& scope) REQUIRES(mu_);
  // Rewrites the journal from the live scopes once dead records dominate it.
  void MaybeCompactJournalLocked(MediaType m) REQUIRES(mu_);
  // `leave_out`: the uid of a scope being freed, not recorded (0: none).
  Status RewriteJournalLocked(MediaType m, uint64_t leave_out = 0) REQUIRES(mu_);
  void SyncLoop();
  bool Durable(MediaType m) const { return journal_[static_cast<int>(m)] != nullptr; }
  // Tells the sync listener, if any, that pool file `file` (SyncEvent::kAllFiles: every one) or,
  // when `journal`, the journal is durable now.
  void NotifySync(bool journal, uint32_t file = SyncEvent::kAllFiles) EXCLUDES(sync_listener_mu_);

  // --- read path (flat_store_read.cc) ---
  // The metadata half of a read: looks up every key and pins the scopes of its hits into *hits
  // (in key order; a hit whose address does not decode is a miss); *slowest gets their largest
  // GVA. InvalidArgument, with nothing pinned, when a hit's layout differs from `layout`.
  Status PinHits(std::span<const Key> keys, const KvLayout& layout, std::vector<PinnedHit>* hits,
                 Gva* slowest);
  // Drops the pins of `hits`, marking their scopes used now.
  void UnpinHits(std::span<const PinnedHit> hits);
  // Starts reading the job's SSD hits; `done` runs once when every read is back.
  void StartSsdReads(const std::shared_ptr<RestoreJob>& job, std::function<void(Status)> done);
  // Verifies, unpins and completes the job with `st` (OK, or the error that failed it).
  void FinishJob(RestoreJob& job, Status st);
  // Counts a read of `num_keys` keys that delivered `result`.
  void CountRead(size_t num_keys, const GetResult& result);

  // --- scheduling (flat_store_restore.cc) ---
  // Restore and RestoreLayers: `layers` of each block ({}: all).
  Result<std::unique_ptr<RestoreHandle>> StartRestore(std::span<const Key> keys,
                                                      const KvLayout& layout,
                                                      const BlockBuffers& dst,
                                                      const RestoreOptions& options,
                                                      LayerRange layers);
  Status StartScheduler();
  // Stops FC-MAS and the dispatcher; fails every restore not yet done. Before the reader goes.
  void StopScheduler();
  void QueuePrefetch(uint64_t id, std::function<void(Status)> done);
  void StartPrefetch(uint64_t id, std::function<void(Status)> done);
  // Serves every request FC-MAS hands out now, in its order.
  void ServeReady();
  void DispatchLoop();
  std::shared_ptr<RestoreJob> FindJob(uint64_t id, bool take);
  // Registers `job` (its id set) and submits `request` for it to FC-MAS, then serves what is
  // ready. On an error the job is not registered (the caller ends it).
  Status SubmitJob(const std::shared_ptr<RestoreJob>& job, const RestoreRequest& request)
      EXCLUDES(jobs_mu_);
  // AdmitRead's request: `job` (its arrival and on_admitted set) becomes a remote job and is
  // submitted; on an error nothing is told.
  Status SubmitRemoteJob(const std::shared_ptr<RestoreJob>& job, Gva slowest_gva,
                         uint64_t ssd_bytes) EXCLUDES(jobs_mu_);
  // Ends remote job `id` (its pin is unpinned or released): frees its window share, or takes it
  // out of the queue; its owner is told Aborted unless it was admitted already.
  void CancelRemoteJob(uint64_t id) EXCLUDES(jobs_mu_);
  // The owner of remote job `id` read what it was admitted for: its window share comes back.
  // InvalidArgument while it waits for admission.
  Status FinishRemoteJob(uint64_t id) EXCLUDES(jobs_mu_);

  Gva MakeGva(MediaType m, uint64_t offset) const { return EncodeGva(m, options_.node_id, offset); }
  // The index entry of block `b` of the segment at `base` (laid out as `sl`) of scope `scope_id`.
  IndexEntry BlockEntry(MediaType m, uint64_t base, const SegmentLayout& sl, uint32_t b,
                        uint64_t checksum, uint32_t scope_id, uint32_t gen,
                        uint32_t segment_no) const {
    IndexEntry e;
    e.gva = MakeGva(m, base + sl.BlockOffset(b));
    e.layer_stride = sl.LayerStride();
    e.checksum = checksum;
    e.scope_id = scope_id;
    e.scope_gen = gen;
    e.segment = segment_no;
    e.block = b;
    return e;
  }
  uint64_t NowNs() const;

  const StoreOptions options_;
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<RestoreReader> restore_;      // SSD read pipeline (null without SSD)
  std::unique_ptr<StagingPool> write_staging_;  // gather buffers of SSD segment writes
  std::unique_ptr<DramArena> dram_;
  std::unique_ptr<SsdFilePool> ssd_;
  MediaAccess media_access_;               // the data halves' view of dram_, ssd_ and engine_
  std::unique_ptr<SegmentWriter> writer_;  // the embedded Put's data half
  std::unique_ptr<BlockIndex> index_;
  std::unique_ptr<ScopeSlot[]> scopes_;
  GvaSpace gva_space_;
  StoreInfo info_;

  // Compacts the index when tombstones pile up. The reservations in force keep their slots
  // (given up before the rebuild and taken again after it).
  void MaybeCompactIndex() EXCLUDES(index_mu_, leases_mu_);
  // --- leases (flat_store_lease.cc) ---
  Result<WriteReservation> ReserveLeased(uint64_t owner, std::span<const Key> keys,
                                         const KvLayout& layout, const WriteHints& hints)
      EXCLUDES(index_mu_, mu_, leases_mu_);
  // Takes reservation `id` of `owner` out of the leases in force; null when it is not theirs.
  std::unique_ptr<PendingWrite> TakeWrite(uint64_t owner, uint64_t id) EXCLUDES(leases_mu_);
  // Takes the slots of a reservation in force again after a compaction.
  void RetakeSlots(PendingWrite& w) REQUIRES(index_mu_);

  mutable SharedMutex index_mu_ ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  Mutex leases_mu_ ACQUIRED_AFTER(index_mu_);
  // Reservations in force, none of them published in part (PublishWrite takes its reservation out
  // first), and pins in force, by lease id.
  std::unordered_map<uint64_t, std::unique_ptr<PendingWrite>> writes_ GUARDED_BY(leases_mu_);
  std::unordered_map<uint64_t, PinLease> pins_ GUARDED_BY(leases_mu_);
  uint64_t next_lease_ GUARDED_BY(leases_mu_) = 1;
  ScopePlacer placer_ GUARDED_BY(mu_);
  std::function<void(uint32_t, uint32_t, MediaType)> scope_release_listener_ GUARDED_BY(mu_);
  std::vector<uint32_t> free_scopes_ GUARDED_BY(mu_);  // slot ids, LIFO

  std::unique_ptr<Journal> journal_[2];  // per medium: the SSD pool's; a file-backed arena's
  uint64_t next_scope_uid_ GUARDED_BY(mu_) = 1;
  uint64_t live_journal_bytes_[2] GUARDED_BY(mu_) = {0, 0};  // live scopes' records, header
  bool clearing_ GUARDED_BY(mu_) = false;
  std::thread syncer_;
  Mutex sync_mu_;
  CondVar sync_cv_;
  bool stop_syncer_ GUARDED_BY(sync_mu_) = false;
  std::atomic<uint64_t> journal_rewrites_{0}, journal_errors_{0}, syncs_{0};
  Mutex sync_listener_mu_;
  std::function<void(const SyncEvent&)> sync_listener_ GUARDED_BY(sync_listener_mu_);

  Executor executor_{this};
  std::unique_ptr<MasScheduler> sched_;
  std::thread dispatcher_;
  Mutex jobs_mu_;
  CondVar jobs_cv_;
  std::unordered_map<uint64_t, std::shared_ptr<RestoreJob>> jobs_ GUARDED_BY(jobs_mu_);
  std::deque<PrefetchTask> prefetch_tasks_ GUARDED_BY(jobs_mu_);
  bool drain_requested_ GUARDED_BY(jobs_mu_) = false;
  bool stop_dispatcher_ GUARDED_BY(jobs_mu_) = false;
  int completions_running_ GUARDED_BY(jobs_mu_) = 0;
  std::atomic<uint64_t> next_restore_id_{1};

  MediumCounters media_[2];
  std::atomic<uint64_t> puts_{0}, gets_{0}, exists_{0}, blocks_written_{0}, blocks_present_{0},
      hits_{0}, misses_{0}, mismatches_{0}, io_errors_{0}, index_compactions_{0}, restores_dram_{0},
      restores_ssd_{0}, restores_cancelled_{0};
};

}  // namespace flatcake
