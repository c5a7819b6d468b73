#include "store/scope_placer.h"

#include <algorithm>
#include <utility>

#include "media/extent_allocator.h"
#include "store/segment_layout.h"

namespace flatcake {
namespace {

// "anon-<n>" -> n, else 0.
uint64_t AnonNumber(const std::string& name) {
  constexpr std::string_view kPrefix = ScopePlacer::kAnonPrefix;
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return 0;
  uint64_t n = 0;
  for (size_t i = kPrefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    n = n * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return n;
}

constexpr int Index(MediaType m) { return static_cast<int>(m); }

}  // namespace

Result<MediaType> ScopePlacer::ChooseMedium(const WriteHints& hints, const Session& s,
                                            const KvLayout& layout, uint32_t n,
                                            PlacementInput* in_out,
                                            std::string_view* reason) const {
  PlacementInput& in = *in_out;
  in.shared_prefix = hints.shared_prefix;
  in.turn = hints.turn ? hints.turn : s.turns + 1;
  in.prior_reply_tokens = hints.prior_reply_tokens;
  const uint64_t before = hints.context_tokens ? *hints.context_tokens : s.context_tokens;
  in.context_tokens = before + uint64_t{n} * options_.tokens_per_block;
  MediaType medium;
  if (hints.force_medium) {
    medium = *hints.force_medium;
    *reason = "forced";
  } else {
    const PlacementDecision d = ChoosePlacement(in, options_);
    medium = d.medium;
    *reason = d.reason;
  }
  if (!host_.MediumEnabled(medium))
    medium = medium == MediaType::kDram ? MediaType::kSsd : MediaType::kDram;
  if (!host_.MediumEnabled(medium)) return Status::InvalidArgument("requested medium is disabled");
  if (host_.MediumEnabled(MediaType::kSsd) &&
      SegmentLayout::BlocksFitting(layout, host_.SsdFileBytes()) == 0) {
    // Checked whatever the medium: a DRAM batch may spill to SSD.
    return Status::InvalidArgument("a block of " + layout.ToString() +
                                   " (with each layer run padded to 4 KiB) exceeds the SSD pool "
                                   "file size; raise ssd_file_bytes");
  }
  return medium;
}

Status ScopePlacer::PlaceBatch(const WriteHints& hints, std::span<const Key> keys,
                               const KvLayout& layout, uint32_t n, uint64_t now_ns,
                               Placement* out) {
  // Session: explicit, else inferred from the chain, else a new anonymous one.
  std::string name = hints.session;
  if (name.empty() && hints.prefix_tail) {
    auto it = tails_.find(*hints.prefix_tail);
    if (it != tails_.end()) name = it->second;
  }
  if (name.empty()) name = std::string(kAnonPrefix) + std::to_string(++anon_sessions_);
  auto session_it = sessions_.try_emplace(name).first;
  Session& s = session_it->second;
  // Reclamation below must not forget the session being placed (we hold a reference to it).
  // Afterwards, a session left without any live scope (a new one whose placement failed, or one
  // whose last scope was reclaimed to make room) is forgotten, as reclamation would have done.
  placing_session_ = &session_it->first;
  struct FinishPlacing {
    ScopePlacer* placer;
    SessionMap::iterator it;
    ~FinishPlacing() {
      placer->placing_session_ = nullptr;
      if (!placer->SessionAlive(it->second)) placer->ForgetSession(it);
    }
  } finish_placing{this, session_it};

  PlacementInput in;
  std::string_view reason;
  FC_ASSIGN_OR_RETURN(MediaType medium, ChooseMedium(hints, s, layout, n, &in, &reason));
  std::vector<PendingSegment>* segs = &out->segments;

  // Try the chosen medium; DRAM that stays full after reclamation spills to SSD.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int mi = Index(medium);
    const uint64_t cap = host_.Capacity(medium);
    const auto low = static_cast<uint64_t>(options_.low_watermark * cap);
    uint32_t id = s.scope[mi];
    const bool reuse = id != kNoScope && host_.ScopeGeneration(id) == s.scope_gen[mi] &&
                       host_.ScopeLive(id) && host_.ScopeLayout(id) == layout;
    if (!reuse) {
      auto r = host_.NewScope(medium, layout, name, now_ns);
      if (!r.ok()) {
        // Out of scope slots: free the oldest unpinned scopes of this medium and retry once.
        Reclaim(medium, low, kNoScope);
        r = host_.NewScope(medium, layout, name, now_ns);
        if (!r.ok()) return r.status();
      }
      id = *r;
      s.scope[mi] = id;
      s.scope_gen[mi] = host_.ScopeGeneration(id);
    }
    if (host_.Used(medium) >= options_.high_watermark * cap) Reclaim(medium, low, id);
    const size_t before_segs = segs->size();
    Status st = AllocateSegments(id, n, segs);
    if (st.IsNoSpace()) {
      Reclaim(medium, low, id);
      st = AllocateSegments(id, n, segs);
    }
    // With nowhere to spill to, a batch larger than the watermark reclaim freed makes room for
    // itself: unpinned scopes are reclaimed down to what it leaves room for, then, if the free
    // space is too scattered, all of them; it fails only when nothing more can be freed. A
    // batch larger than the medium reclaims nothing: it cannot fit whatever is freed.
    const bool can_spill = medium == MediaType::kDram && host_.MediumEnabled(MediaType::kSsd);
    const uint64_t need = SegmentLayout(layout, n).Bytes();
    for (const uint64_t target : {cap - std::min(cap, need), uint64_t{0}}) {
      if (!st.IsNoSpace() || can_spill || need > cap) break;
      if (Reclaim(medium, target, id) > 0) st = AllocateSegments(id, n, segs);
    }
    if (st.ok()) {
      if (!host_.TryPinScope(id, s.scope_gen[mi])) {
        return Status::Aborted("scope vanished during placement");
      }
      out->medium = medium;
      out->scope_id = id;
      out->gen = s.scope_gen[mi];
      out->reason = reason;
      out->spilled = attempt > 0;
      s.turns = in.turn;
      s.context_tokens = in.context_tokens;
      SetTail(s, keys.back(), name);
      host_.TouchScope(id, now_ns);
      return Status::OK();
    }
    segs->resize(before_segs);
    if (ReleaseIfEmpty(id, s.scope_gen[mi])) s.scope[mi] = kNoScope;
    if (!st.IsNoSpace() || medium == MediaType::kSsd || !host_.MediumEnabled(MediaType::kSsd)) {
      return st;
    }
    medium = MediaType::kSsd;  // Table 2: any write that finds DRAM full goes to SSD.
  }
  return Status::NoSpace("no medium has room for the batch");
}

Status ScopePlacer::AllocateSegments(uint32_t id, uint32_t n, std::vector<PendingSegment>* segs) {
  const KvLayout& layout = host_.ScopeLayout(id);
  const MediaType medium = host_.ScopeMedium(id);
  uint32_t done = 0;
  // Segments allocated by this call, rolled back if a later one fails.
  const size_t first_new = segs->size();
  auto rollback = [&] {
    for (size_t i = segs->size(); i-- > first_new;) {
      const Segment& seg = (*segs)[i].seg;
      host_.PopScopeSegment(id);
      host_.FreeExtent(medium, seg.base, seg.bytes);
    }
    segs->resize(first_new);
  };
  while (done < n) {
    // A segment is one extent: at most one SSD pool file, halved until the medium has a free
    // range that large. It goes where the scope's last segment ended when that space is free.
    uint64_t want = n - done;
    if (medium == MediaType::kSsd) {
      want = std::min(want, SegmentLayout::BlocksFitting(layout, host_.SsdFileBytes()));
    }
    const std::vector<Segment>& have = host_.ScopeSegments(id);
    const uint64_t hint =
        have.empty() ? ExtentAllocator::kNoHint : have.back().base + have.back().bytes;
    Segment seg;
    Result<uint64_t> off = Status::NoSpace("");
    while (want > 0) {
      const SegmentLayout seg_layout(layout, want);
      seg.run_stride = seg_layout.PlaneStride();
      seg.bytes = seg_layout.Bytes();
      off = host_.AllocateExtent(medium, seg.bytes, hint);
      if (off.ok()) break;
      want /= 2;
    }
    if (!off.ok()) {
      rollback();
      return off.status();
    }
    seg.base = *off;
    seg.num_blocks = static_cast<uint32_t>(want);
    const uint32_t segment_no = host_.AppendScopeSegment(id, seg);
    segs->push_back(PendingSegment{seg, done, segment_no});
    done += seg.num_blocks;
  }
  return Status::OK();
}

bool ScopePlacer::SessionAlive(const Session& s) const {
  for (int m = 0; m < 2; ++m) {
    const uint32_t id = s.scope[m];
    if (id != kNoScope && host_.ScopeLive(id) && host_.ScopeGeneration(id) == s.scope_gen[m]) {
      return true;
    }
  }
  return false;
}

void ScopePlacer::ForgetSession(SessionMap::iterator it) {
  if (it->second.has_tail) {
    auto t = tails_.find(it->second.tail);
    if (t != tails_.end() && t->second == it->first) tails_.erase(t);
  }
  sessions_.erase(it);
}

void ScopePlacer::SetTail(Session& s, const Key& tail, const std::string& name) {
  if (s.has_tail) tails_.erase(s.tail);
  s.tail = tail;
  s.has_tail = true;
  tails_[tail] = name;
}

void ScopePlacer::Release(uint32_t id, uint32_t retired_gen) {
  // The host's part goes first (FlatStore's free record: once the extents are reused, the old
  // scope must not come back).
  host_.ReleaseScope(id, retired_gen);
  const MediaType medium = host_.ScopeMedium(id);
  for (const Segment& seg : host_.ScopeSegments(id)) {
    if (!seg.abandoned) host_.FreeExtent(medium, seg.base, seg.bytes);
  }
  // Forget the session once none of its scopes is left, so session metadata does not outlive
  // the data (anonymous one-batch sessions would otherwise accumulate forever).
  auto it = sessions_.find(host_.ScopeSession(id));
  if (it != sessions_.end() && placing_session_ != &it->first) {
    Session& s = it->second;
    const int mi = Index(medium);
    if (s.scope[mi] == id && s.scope_gen[mi] == retired_gen) s.scope[mi] = kNoScope;
    if (!SessionAlive(s)) ForgetSession(it);
  }
  host_.RecycleScope(id);
}

void ScopePlacer::AbandonSegments(uint32_t id, std::span<const PendingSegment> segs) {
  const MediaType medium = host_.ScopeMedium(id);
  for (const PendingSegment& ps : segs) {
    host_.FreeExtent(medium, ps.seg.base, ps.seg.bytes);
    host_.AbandonScopeSegment(id, ps.segment_no);
  }
}

bool ScopePlacer::ReleaseIfEmpty(uint32_t id, uint32_t gen) {
  if (!host_.ScopeLive(id) || host_.ScopeGeneration(id) != gen || host_.ScopeBlocks(id) != 0 ||
      !host_.ScopeSegments(id).empty() || !host_.TryRetireScope(id, gen)) {
    return false;
  }
  Release(id, gen);
  return true;
}

uint64_t ScopePlacer::Reclaim(MediaType medium, uint64_t target_used, uint32_t keep_scope) {
  if (!host_.MediumEnabled(medium) || host_.Used(medium) <= target_used) return 0;
  std::vector<std::pair<uint64_t, uint32_t>> candidates;  // (last use, slot)
  const uint32_t slots = host_.NumScopeSlots();
  for (uint32_t i = 0; i < slots; ++i) {
    if (i != keep_scope && host_.ScopeLive(i) && host_.ScopeMedium(i) == medium &&
        host_.ScopeReaders(i) == 0) {
      candidates.emplace_back(host_.ScopeLastUse(i), i);
    }
  }
  std::sort(candidates.begin(), candidates.end());
  uint64_t freed = 0;
  uint32_t scopes = 0;
  for (const auto& [ts, id] : candidates) {
    if (host_.Used(medium) <= target_used) break;
    const uint32_t gen = host_.ScopeGeneration(id);
    if (!host_.TryRetireScope(id, gen)) continue;  // a reader pinned it meanwhile
    const uint64_t bytes = host_.ScopeUsedBytes(id);
    Release(id, gen);
    freed += bytes;
    scopes++;
  }
  if (scopes > 0) host_.OnReclaimed(medium, freed, scopes);
  return freed;
}

void ScopePlacer::ForgetSessions() {
  sessions_.clear();
  tails_.clear();
}

void ScopePlacer::RestoreSession(const std::string& name, MediaType medium, uint32_t id,
                                 uint32_t gen, uint32_t turns, uint64_t context_tokens,
                                 const Key* tail) {
  NoteRecoveredName(name);
  Session& s = sessions_[name];
  const int mi = Index(medium);
  s.scope[mi] = id;
  s.scope_gen[mi] = gen;
  s.turns = turns;
  s.context_tokens = context_tokens;
  if (tail) SetTail(s, *tail, name);
}

void ScopePlacer::NoteRecoveredName(const std::string& name) {
  anon_sessions_ = std::max(anon_sessions_, AnonNumber(name));
}

const ScopePlacer::Session* ScopePlacer::FindSession(const std::string& name) const {
  auto it = sessions_.find(name);
  return it == sessions_.end() ? nullptr : &it->second;
}

}  // namespace flatcake
