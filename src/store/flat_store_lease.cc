// FlatStore's leases: the metadata halves of Put and Restore (ReserveBatch, PublishNextSegment and
// FinishWrite; PinHits and UnpinHits) served to another process that moves the bytes itself, and
// ended by their owner or, all at once, by ReleaseOwner (flat_store.h).
//
// A reservation in force holds what an embedded Put holds while it writes: its scope's pin, its
// keys' index slots and its segments' extents. It stays in `writes_` between calls; a call that
// works on it takes it out first (TakeWrite) and holds index_mu_ shared throughout, so that index
// compaction, which re-takes the slots of every reservation in `writes_`, never meets one in use.
#include <string>
#include <utility>

#include "store/flat_store.h"

namespace flatcake {
namespace {

// PinLease::job while AdmitRead submits its request (no restore id is this large).
constexpr uint64_t kSubmittingJob = UINT64_MAX;

Status NotTheOwners(const char* what, uint64_t id) {
  return Status::NotFound(std::string(what) + " " + std::to_string(id) +
                          " is not in force for this owner (ended, released, or another's)");
}

}  // namespace

SharedMedia FlatStore::shared_media() const {
  SharedMedia m;
  if (dram_) {
    m.dram_fd = dram_->shared_fd();
    m.dram_bytes = dram_->capacity();
  }
  if (ssd_) m.ssd = ssd_->geometry();
  return m;
}

Result<WriteReservation> FlatStore::ReserveWrite(uint64_t owner, std::span<const Key> keys,
                                                 const KvLayout& layout, const WriteHints& hints) {
  auto result = ReserveLeased(owner, keys, layout, hints);
  MaybeCompactIndex();
  return result;
}

Result<WriteReservation> FlatStore::ReserveLeased(uint64_t owner, std::span<const Key> keys,
                                                  const KvLayout& layout, const WriteHints& hints) {
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  ReaderLock index_lock(index_mu_);
  puts_.fetch_add(1, std::memory_order_relaxed);
  WriteReservation r;
  r.owner = owner;
  r.layout = layout;
  r.present.assign(keys.size(), 1);
  if (keys.empty()) return r;
  auto w = std::make_unique<PendingWrite>();
  w->owner = owner;
  FC_RETURN_IF_ERROR(ReserveBatch(keys, layout, hints, w.get()));
  r.already_present = w->already_present;
  if (w->todo.empty()) return r;
  for (uint32_t i : w->todo) r.present[i] = 0;
  r.medium = w->placement.medium;
  r.scope_id = w->placement.scope_id;
  r.scope_gen = w->placement.gen;
  r.blocks = w->todo;
  r.segments.reserve(w->placement.segments.size());
  for (const PendingSegment& ps : w->placement.segments) r.segments.push_back(Reserved(*w, ps));
  MutexLock lock(leases_mu_);
  r.id = next_lease_++;
  writes_.emplace(r.id, std::move(w));
  return r;
}

std::unique_ptr<FlatStore::PendingWrite> FlatStore::TakeWrite(uint64_t owner, uint64_t id) {
  MutexLock lock(leases_mu_);
  auto it = writes_.find(id);
  if (it == writes_.end() || it->second->owner != owner) return nullptr;
  std::unique_ptr<PendingWrite> w = std::move(it->second);
  writes_.erase(it);
  return w;
}

void FlatStore::RetakeSlots(PendingWrite& w) {
  if (w.lost) return;
  for (size_t k = 0; k < w.keys.size(); ++k) {
    // Cannot fail: no other call runs, the keys are distinct, and the table just lost its
    // tombstones. Should it all the same, the reservation can only be aborted.
    if (index_->Reserve(w.keys[k], &w.slots[k]) != BlockIndex::ReserveOutcome::kReserved) {
      for (size_t j = 0; j < k; ++j) index_->Abort(w.slots[j]);
      w.lost = true;
      return;
    }
  }
}

Status FlatStore::WriteReserved(const WriteReservation& r, const BlockBuffers& src,
                                std::vector<uint64_t>* checksums) const {
  FC_RETURN_IF_ERROR(ValidateBuffers(src, r.layout, r.present.size()));
  return writer_->WriteAll(r, src, checksums);
}

Status FlatStore::PublishWrite(uint64_t owner, uint64_t reservation,
                               std::span<const uint64_t> checksums) {
  if (reservation == 0) return Status::OK();
  Status st;
  {
    ReaderLock index_lock(index_mu_);
    std::unique_ptr<PendingWrite> w = TakeWrite(owner, reservation);
    if (w == nullptr) return NotTheOwners("write reservation", reservation);
    if (checksums.size() != w->todo.size()) {
      st = Status::InvalidArgument(std::to_string(checksums.size()) + " checksums for the " +
                                   std::to_string(w->todo.size()) +
                                   " blocks of write reservation " + std::to_string(reservation));
    } else if (w->lost) {
      st = Status::Aborted("write reservation " + std::to_string(reservation) +
                           " lost its index slots");
    }
    const MediaType medium = w->placement.medium;
    while (st.ok() && w->published < w->placement.segments.size()) {
      const PendingSegment& ps = w->placement.segments[w->published];
      // The owner wrote these bytes; the store counts them as it publishes them.
      media_[static_cast<int>(medium)].written.fetch_add(ps.seg.bytes, std::memory_order_relaxed);
      st = PublishNextSegment(*w, checksums.subspan(ps.first_block, ps.seg.num_blocks));
      if (!st.ok()) io_errors_.fetch_add(1, std::memory_order_relaxed);
    }
    FinishWrite(*w);
  }
  MaybeCompactIndex();
  return st.ok() ? st : st.WithContext("publish write " + std::to_string(reservation));
}

Status FlatStore::AbortWrite(uint64_t owner, uint64_t reservation) {
  if (reservation == 0) return Status::OK();
  {
    ReaderLock index_lock(index_mu_);
    std::unique_ptr<PendingWrite> w = TakeWrite(owner, reservation);
    if (w == nullptr) return NotTheOwners("write reservation", reservation);
    FinishWrite(*w);
  }
  MaybeCompactIndex();
  return Status::OK();
}

Result<ReadPin> FlatStore::PinRead(uint64_t owner, std::span<const Key> keys,
                                   const KvLayout& layout) {
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  gets_.fetch_add(1, std::memory_order_relaxed);
  ReadPin pin;
  pin.owner = owner;
  pin.layout = layout;
  FC_RETURN_IF_ERROR(PinHits(keys, layout, &pin.hits, &pin.slowest_gva));
  for (const PinnedHit& h : pin.hits) {
    if (h.medium == MediaType::kSsd) pin.ssd_bytes += layout.block_bytes();
  }
  (ClassifyRestore(pin.slowest_gva) == RestoreClass::kDramReady ? restores_dram_ : restores_ssd_)
      .fetch_add(1, std::memory_order_relaxed);
  if (pin.hits.empty()) return pin;
  MutexLock lock(leases_mu_);
  pin.id = next_lease_++;
  pins_.emplace(pin.id, PinLease{owner, pin.hits, pin.slowest_gva, pin.ssd_bytes, 0});
  return pin;
}

Status FlatStore::AdmitRead(uint64_t owner, uint64_t pin, int64_t arrival_ns,
                            std::function<void(Status)> on_admitted) {
  if (pin == 0) {  // nothing to read: admitted at once
    on_admitted(Status::OK());
    return Status::OK();
  }
  auto job = std::make_shared<RestoreJob>();
  job->arrival_ns = arrival_ns == kArrivalNow ? SteadyNowNs() : arrival_ns;
  {
    MutexLock lock(job->mu);  // uncontended: no other thread knows the job yet
    job->on_admitted = std::move(on_admitted);
  }
  Gva slowest = 0;
  uint64_t ssd_bytes = 0;
  {
    MutexLock lock(leases_mu_);
    auto it = pins_.find(pin);
    if (it == pins_.end() || it->second.owner != owner) return NotTheOwners("read pin", pin);
    if (it->second.job != 0) {
      return Status::InvalidArgument("read pin " + std::to_string(pin) + " is scheduled already");
    }
    slowest = it->second.slowest_gva;
    ssd_bytes = it->second.ssd_bytes;
    // Claimed before the request exists, so that an Unpin meanwhile finds it and cancels it.
    it->second.job = kSubmittingJob;
  }
  Status st = SubmitRemoteJob(job, slowest, ssd_bytes);
  bool released = false;
  {
    MutexLock lock(leases_mu_);
    auto it = pins_.find(pin);
    released = it == pins_.end();
    if (!released) it->second.job = st.ok() ? job->id : 0;
  }
  // Unpinned while it was being submitted: the request goes again.
  if (released && st.ok()) CancelRemoteJob(job->id);
  return st.ok() ? st : st.WithContext("admit read pin " + std::to_string(pin));
}

Status FlatStore::FinishRead(uint64_t owner, uint64_t pin) {
  uint64_t job = 0;
  {
    MutexLock lock(leases_mu_);
    auto it = pins_.find(pin);
    if (it == pins_.end() || it->second.owner != owner) return NotTheOwners("read pin", pin);
    job = it->second.job;
    if (job == 0 || job == kSubmittingJob) {
      return Status::InvalidArgument("read pin " + std::to_string(pin) + " has no read admitted");
    }
  }
  FC_RETURN_IF_ERROR(FinishRemoteJob(job).WithContext("read pin " + std::to_string(pin)));
  MutexLock lock(leases_mu_);
  auto it = pins_.find(pin);
  if (it != pins_.end() && it->second.job == job) it->second.job = 0;
  return Status::OK();
}

Status FlatStore::Unpin(uint64_t owner, uint64_t pin) {
  if (pin == 0) return Status::OK();
  PinLease lease;
  {
    MutexLock lock(leases_mu_);
    auto it = pins_.find(pin);
    if (it == pins_.end() || it->second.owner != owner) return NotTheOwners("read pin", pin);
    lease = std::move(it->second);
    pins_.erase(it);
  }
  if (lease.job != 0 && lease.job != kSubmittingJob) CancelRemoteJob(lease.job);
  UnpinHits(lease.hits);
  return Status::OK();
}

void FlatStore::RecordLeaseRead(size_t num_keys, const GetResult& result) {
  CountRead(num_keys, result);
}

void FlatStore::SetScopeReleaseListener(
    std::function<void(uint32_t id, uint32_t gen, MediaType medium)> listener) {
  MutexLock lock(mu_);
  scope_release_listener_ = std::move(listener);
}

FlatStore::ReleasedLeases FlatStore::ReleaseOwner(uint64_t owner) {
  ReleasedLeases out;
  std::vector<PinLease> pins;
  {
    ReaderLock index_lock(index_mu_);
    std::vector<std::unique_ptr<PendingWrite>> writes;
    {
      MutexLock lock(leases_mu_);
      for (auto it = writes_.begin(); it != writes_.end();) {
        if (it->second->owner != owner) {
          ++it;
          continue;
        }
        writes.push_back(std::move(it->second));
        it = writes_.erase(it);
      }
      for (auto it = pins_.begin(); it != pins_.end();) {
        if (it->second.owner != owner) {
          ++it;
          continue;
        }
        pins.push_back(std::move(it->second));
        it = pins_.erase(it);
      }
    }
    for (auto& w : writes) FinishWrite(*w);
    out.writes = static_cast<uint32_t>(writes.size());
  }
  for (const PinLease& p : pins) {
    if (p.job != 0 && p.job != kSubmittingJob) CancelRemoteJob(p.job);
    UnpinHits(p.hits);
  }
  out.pins = static_cast<uint32_t>(pins.size());
  MaybeCompactIndex();
  return out;
}

}  // namespace flatcake
