// ScopePlacer: the flat store's placement, scope, allocation and reclamation policy, apart from
// the store's data, threads and clock, so that FlatStore and the discrete-event simulator run the
// same code. It decides which session a batch belongs to, which medium it goes to (Table 2,
// store/placement.h, plus the "DRAM full -> SSD" spill), which scope it joins, where its segments
// go, and which scopes are reclaimed to make room; everything it touches it reaches through a
// ScopeHost.
//
// Thread safety: none of its own. The placer has no mutex and no atomics; every call, and every
// host call it makes, runs under the host's lock (FlatStore's mu_), or on one thread (the
// simulator). Time is a parameter (now_ns), never read from a clock.
//
// Invariants it keeps: a session is known only while one of its scopes is live (a session left
// without a live scope is forgotten, its chain tail with it), except the session a PlaceBatch is
// placing; a scope's segments are the extents it owns on its medium, freed only after the scope
// was retired (ScopeHost::TryRetireScope), so no reader ever sees recycled bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flatcake/key.h"
#include "flatcake/layout.h"
#include "flatcake/options.h"
#include "flatcake/status.h"
#include "flatcake/store.h"
#include "store/placement.h"
#include "store/scope.h"

namespace flatcake {

// What the placer needs of a store: its media's extent allocators and its scope slots. FlatStore
// implements it over its DramArena, SsdFilePool and ScopeSlot array; the simulator over plain
// structs. Scope ids index a fixed slot array of NumScopeSlots() entries; a slot's generation
// changes when it is retired, so (id, generation) names one scope for good.
class ScopeHost {
 public:
  virtual ~ScopeHost() = default;

  // --- media ---
  virtual bool MediumEnabled(MediaType m) const = 0;
  virtual uint64_t Capacity(MediaType m) const = 0;  // 0 when disabled
  virtual uint64_t Used(MediaType m) const = 0;      // bytes allocated, padding included
  // The SSD pool's file size: no segment spans two files. Only called when SSD is enabled.
  virtual uint64_t SsdFileBytes() const = 0;
  // An extent of `bytes`, at `hint` when that range is free (ExtentAllocator::kNoHint: none).
  // NoSpace when no free range is large enough.
  virtual Result<uint64_t> AllocateExtent(MediaType m, uint64_t bytes, uint64_t hint) = 0;
  // REQUIRES: (offset, bytes) came from AllocateExtent (or recovery) and was not freed since.
  virtual void FreeExtent(MediaType m, uint64_t offset, uint64_t bytes) = 0;

  // --- scope slots ---
  virtual uint32_t NumScopeSlots() const = 0;
  // Makes a free slot live for a new, empty scope of `session` on `medium` (last used at now_ns)
  // and returns its id; its generation is ScopeGeneration(id). NoSpace when every slot is live.
  virtual Result<uint32_t> NewScope(MediaType medium, const KvLayout& layout,
                                    const std::string& session, uint64_t now_ns) = 0;
  virtual bool ScopeLive(uint32_t id) const = 0;
  virtual uint32_t ScopeGeneration(uint32_t id) const = 0;
  // Of a live scope:
  virtual MediaType ScopeMedium(uint32_t id) const = 0;
  virtual const KvLayout& ScopeLayout(uint32_t id) const = 0;
  virtual const std::string& ScopeSession(uint32_t id) const = 0;
  // Its segments (also its extents), in segment order, and their bytes.
  virtual const std::vector<Segment>& ScopeSegments(uint32_t id) const = 0;
  virtual uint64_t ScopeUsedBytes(uint32_t id) const = 0;
  // Appends a segment (its bytes count as used by the scope); returns its segment number.
  virtual uint32_t AppendScopeSegment(uint32_t id, const Segment& seg) = 0;
  // Drops the scope's last segment (its extent is the caller's to free).
  virtual void PopScopeSegment(uint32_t id) = 0;
  // Segment `segment_no` will never be published: it is no longer the scope's (its extent is the
  // caller's to free) nor counted as used (AbandonSegment, store/scope.h).
  virtual void AbandonScopeSegment(uint32_t id, uint32_t segment_no) = 0;
  virtual uint64_t ScopeBlocks(uint32_t id) const = 0;  // blocks published
  virtual uint32_t ScopeReaders(uint32_t id) const = 0;
  virtual uint64_t ScopeLastUse(uint32_t id) const = 0;
  virtual void TouchScope(uint32_t id, uint64_t now_ns) = 0;
  // ScopeSlot::TryPin / TryRetire (store/scope.h): pin generation `gen` while it is live; retire
  // it when live and unpinned.
  virtual bool TryPinScope(uint32_t id, uint32_t gen) = 0;
  virtual bool TryRetireScope(uint32_t id, uint32_t gen) = 0;
  // A retired scope is being freed: the host's part before its extents go (FlatStore: the journal
  // free record, erasing its keys from the index). Its segments and session are still readable.
  virtual void ReleaseScope(uint32_t id, uint32_t retired_gen) = 0;
  // After its extents were freed: the slot is free again (its segments and session cleared).
  virtual void RecycleScope(uint32_t id) = 0;
  // After a Reclaim pass that retired `scopes` scopes (at least one) holding `bytes` bytes of
  // `medium` (FlatStore: counters, the free records' sync, a journal rewrite).
  virtual void OnReclaimed(MediaType medium, uint64_t bytes, uint32_t scopes) = 0;
};

// A segment allocated for (part of) a batch, still to be written.
struct PendingSegment {
  Segment seg;
  uint32_t first_block;  // index into the batch's to-write list
  uint32_t segment_no;   // index in the scope's segment list
};

// Where PlaceBatch put a batch. The scope comes back pinned for the caller (who unpins it after
// writing), so it is not reclaimed while its segments are written.
struct Placement {
  MediaType medium = MediaType::kDram;
  uint32_t scope_id = 0;
  uint32_t gen = 0;
  // ChoosePlacement's reason (store/placement.h), or "forced" for WriteHints::force_medium.
  std::string_view reason;
  bool spilled = false;  // the chosen medium was DRAM, which stayed full: placed on SSD instead
  std::vector<PendingSegment> segments;
};

class ScopePlacer {
 public:
  static constexpr uint32_t kNoScope = UINT32_MAX;
  static constexpr std::string_view kAnonPrefix = "anon-";

  // What the placer knows of a session between its batches.
  struct Session {
    uint32_t turns = 0;
    uint64_t context_tokens = 0;
    uint32_t scope[2] = {kNoScope, kNoScope};  // per medium: slot id of its current scope
    uint32_t scope_gen[2] = {0, 0};
    Key tail;  // the last key of its last batch: a batch chained to it joins the session
    bool has_tail = false;
  };

  // Uses the options' placement thresholds (tau_tokens, l_agent_tokens, tokens_per_block) and
  // watermarks (copied). `host` must outlive the placer.
  ScopePlacer(const StoreOptions& options, ScopeHost& host) : options_(options), host_(host) {}
  ScopePlacer(const ScopePlacer&) = delete;
  ScopePlacer& operator=(const ScopePlacer&) = delete;

  // Places a batch of `n` blocks of `layout` (the keys it writes end with keys.back()): resolves
  // its session (hints.session, else the session whose chain tail is *hints.prefix_tail, else a
  // new anonymous one), chooses the medium, joins the session's scope on it (or starts one,
  // reclaiming when the slots run out), reclaims down to the low watermark once usage reaches
  // the high one, and allocates the batch's segments (NoSpace: reclaim and retry; DRAM still
  // full: SSD). On success the scope is pinned and the session's turns, context and tail are
  // updated. InvalidArgument when no enabled medium can hold the layout's blocks; NoSpace when
  // nothing could be made room for.
  Status PlaceBatch(const WriteHints& hints, std::span<const Key> keys, const KvLayout& layout,
                    uint32_t n, uint64_t now_ns, Placement* out);

  // Retires and frees live, unpinned scopes of `medium` other than `keep_scope`, least recently
  // used first, until Used(medium) <= target_used. Returns the bytes freed.
  uint64_t Reclaim(MediaType medium, uint64_t target_used, uint32_t keep_scope);

  // Frees a retired scope: the host's release, its extents, and its session's claim on it (a
  // session left without a live scope is forgotten, unless it is being placed).
  // REQUIRES: TryRetireScope(id, retired_gen) succeeded.
  void Release(uint32_t id, uint32_t retired_gen);

  // A batch PlaceBatch placed in scope `id` will not be published (its write failed, or was
  // aborted): frees the extents of its segments `segs` and gives them up (AbandonScopeSegment).
  // REQUIRES: the caller still holds the scope's pin from PlaceBatch.
  void AbandonSegments(uint32_t id, std::span<const PendingSegment> segs);
  // Retires and frees scope `id` of generation `gen` when it is live, unpinned and holds nothing
  // (no block published, no segment): a scope started for a batch that was never written. True
  // when it was freed.
  bool ReleaseIfEmpty(uint32_t id, uint32_t gen);

  // Forgets every session (the store's Clear, after reclaiming what it could).
  void ForgetSessions();

  // Recovery: scope `id` (generation `gen`) of session `name` on `medium` was rebuilt from a
  // journal whose last record of it gave `turns` and `context_tokens`; `tail`, when not null, is
  // the scope's last key. Later anonymous names do not repeat `name`.
  void RestoreSession(const std::string& name, MediaType medium, uint32_t id, uint32_t gen,
                      uint32_t turns, uint64_t context_tokens, const Key* tail);
  // Recovery: the session name of a scope that could not be rebuilt; later anonymous names do not
  // repeat it either.
  void NoteRecoveredName(const std::string& name);

  // The session named `name`, or null.
  const Session* FindSession(const std::string& name) const;
  size_t num_sessions() const { return sessions_.size(); }

 private:
  using SessionMap = std::unordered_map<std::string, Session>;

  // The medium for a batch (Table 2, or hints.force_medium), falling back to the other medium when
  // one is disabled; `*in` gets the placement signals, `*reason` the decision's reason.
  Result<MediaType> ChooseMedium(const WriteHints& hints, const Session& s, const KvLayout& layout,
                                 uint32_t n, PlacementInput* in, std::string_view* reason) const;
  // Appends segments for `n` blocks to scope `id` and to `*segs`; on failure rolls back the ones
  // it appended.
  Status AllocateSegments(uint32_t id, uint32_t n, std::vector<PendingSegment>* segs);
  bool SessionAlive(const Session& s) const;
  void ForgetSession(SessionMap::iterator it);
  void SetTail(Session& s, const Key& tail, const std::string& name);

  const StoreOptions options_;
  ScopeHost& host_;
  SessionMap sessions_;
  std::unordered_map<Key, std::string, KeyHash> tails_;  // chain tail -> session
  uint64_t anon_sessions_ = 0;                           // the last anonymous number used
  // The session PlaceBatch is working on: reclamation meanwhile must not forget it.
  const std::string* placing_session_ = nullptr;
};

}  // namespace flatcake
