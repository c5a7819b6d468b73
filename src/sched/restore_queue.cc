#include "sched/restore_queue.h"

#include <algorithm>
#include <string>

namespace flatcake {

std::string_view RestoreClassName(RestoreClass cls) {
  return cls == RestoreClass::kDramReady ? "dram-ready" : "ssd-preparing";
}

std::string_view SchedPolicyName(SchedPolicy policy) {
  return policy == SchedPolicy::kMas ? "fc-mas" : "fcfs";
}

Result<SchedPolicy> ParseSchedPolicy(std::string_view name) {
  if (name == "mas" || name == "fc-mas") return SchedPolicy::kMas;
  if (name == "fcfs") return SchedPolicy::kFcfs;
  return Status::InvalidArgument("unknown scheduling policy '" + std::string(name) +
                                 "' (expected fc-mas or fcfs)");
}

Gva SlowestGva(std::span<const Gva> gvas) {
  Gva slowest = 0;
  for (Gva g : gvas) slowest = std::max(slowest, g);
  return slowest;
}

RestoreRequest MakeRestoreRequest(uint64_t id, std::span<const Gva> gvas, uint64_t kv_bytes,
                                  int64_t arrival_ns) {
  return RestoreRequest{id, arrival_ns, SlowestGva(gvas), kv_bytes};
}

namespace {

uint64_t WaitNs(const RestoreRequest& r, int64_t now_ns) {
  return now_ns > r.arrival_ns ? static_cast<uint64_t>(now_ns - r.arrival_ns) : 0;
}
uint64_t RatioBytes(const RestoreRequest& r) { return std::max<uint64_t>(r.kv_bytes, 1); }

}  // namespace

double ResponseRatio(const RestoreRequest& request, int64_t now_ns) {
  return 1.0 +
         static_cast<double>(WaitNs(request, now_ns)) / static_cast<double>(RatioBytes(request));
}

bool HrrnBefore(const RestoreRequest& a, const RestoreRequest& b, int64_t now_ns) {
  // 1 + wa/sa > 1 + wb/sb  <=>  wa*sb > wb*sa; both products fit in 128 bits.
  const unsigned __int128 lhs = static_cast<unsigned __int128>(WaitNs(a, now_ns)) * RatioBytes(b);
  const unsigned __int128 rhs = static_cast<unsigned __int128>(WaitNs(b, now_ns)) * RatioBytes(a);
  if (lhs != rhs) return lhs > rhs;
  if (a.kv_bytes != b.kv_bytes) return a.kv_bytes < b.kv_bytes;
  if (a.arrival_ns != b.arrival_ns) return a.arrival_ns < b.arrival_ns;
  return a.id < b.id;
}

Status SchedOptions::Validate() const {
  if (window_bytes == 0) return Status::InvalidArgument("sched: window_bytes must be > 0");
  if (policy != SchedPolicy::kMas && policy != SchedPolicy::kFcfs) {
    return Status::InvalidArgument("sched: unknown policy");
  }
  return Status::OK();
}

RestoreQueue::RestoreQueue(const SchedOptions& options) : options_(options) {}

Status RestoreQueue::Submit(const RestoreRequest& request, int64_t now_ns) {
  if (request.arrival_ns < 0) {
    return Status::InvalidArgument("sched: request " + std::to_string(request.id) +
                                   " has no arrival timestamp");
  }
  const RestoreClass cls = ClassifyRestore(request.slowest_gva);
  Entry entry{request, cls, State::kQueued, next_seq_, Status::OK(), -1, 0};
  auto [it, inserted] = entries_.try_emplace(request.id, std::move(entry));
  if (!inserted) {
    return Status::InvalidArgument("sched: request id " + std::to_string(request.id) +
                                   " is already queued");
  }
  ++next_seq_;
  Entry& e = it->second;
  if (cls == RestoreClass::kDramReady) {
    // Nothing to prepare: ready at once under both policies (FCFS still serves it in order).
    e.state = State::kReady;
    e.ready_ns = now_ns;
    order_.insert(KeyOf(e));
  } else if (options_.policy == SchedPolicy::kFcfs) {
    order_.insert(KeyOf(e));
  } else {
    pending_.push_back(&e);
  }
  return Status::OK();
}

bool RestoreQueue::Fits(uint64_t bytes) const {
  // An oversized request is admitted alone into an empty window rather than waiting forever.
  return in_flight_count_ == 0 ||
         bytes <= options_.window_bytes - std::min(in_flight_bytes_, options_.window_bytes);
}

void RestoreQueue::Admit(Entry& entry, int64_t now_ns, std::vector<RestoreRequest>* out) {
  entry.state = State::kPrefetching;
  entry.admitted_ns = now_ns;
  ++in_flight_count_;
  in_flight_bytes_ += entry.request.kv_bytes;
  peak_in_flight_bytes_ = std::max(peak_in_flight_bytes_, in_flight_bytes_);
  out->push_back(entry.request);
}

std::vector<RestoreRequest> RestoreQueue::TakeAdmissions(int64_t now_ns) {
  std::vector<RestoreRequest> admitted;
  if (options_.policy == SchedPolicy::kFcfs) {
    // Only the head is served; an SSD head prefetches while everything behind it waits.
    if (order_.empty()) return admitted;
    Entry& head = entries_.at(order_.begin()->id);
    if (head.state == State::kQueued && Fits(head.request.kv_bytes)) {
      Admit(head, now_ns, &admitted);
    }
    return admitted;
  }
  while (!pending_.empty()) {
    // The wait term grows with time, so the order is recomputed at every decision: a linear scan
    // over the pending set (control path; the set is as long as the SSD backlog).
    size_t best = 0;
    for (size_t i = 1; i < pending_.size(); ++i) {
      if (HrrnBefore(pending_[i]->request, pending_[best]->request, now_ns)) best = i;
    }
    Entry& e = *pending_[best];
    if (!Fits(e.request.kv_bytes)) break;  // strict: nothing overtakes the best request
    pending_[best] = pending_.back();
    pending_.pop_back();
    Admit(e, now_ns, &admitted);
  }
  return admitted;
}

Status RestoreQueue::CompletePrefetch(uint64_t id, const Status& io_status, int64_t now_ns) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.state != State::kPrefetching) {
    return Status::NotFound("sched: request " + std::to_string(id) + " has no prefetch in flight");
  }
  Entry& e = it->second;
  --in_flight_count_;
  in_flight_bytes_ -= e.request.kv_bytes;
  e.state = State::kReady;
  e.prefetch_status = io_status;
  e.ready_ns = now_ns;
  // Under FCFS the entry already sits in order_ (at the head); under FC-MAS it enters the ready
  // order now, by its original arrival time.
  if (options_.policy == SchedPolicy::kMas) order_.insert(KeyOf(e));
  return Status::OK();
}

Status RestoreQueue::Abandon(uint64_t id, const Status& status, int64_t now_ns) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return Status::NotFound("sched: request " + std::to_string(id));
  Entry& e = it->second;
  if (e.state != State::kQueued) {
    return Status::Busy("sched: request " + std::to_string(id) + " is no longer waiting");
  }
  e.state = State::kReady;
  e.prefetch_status = status;
  e.ready_ns = now_ns;
  // Under FCFS the entry already sits in order_; under FC-MAS it leaves the pending set for the
  // ready order, by its original arrival time.
  if (options_.policy == SchedPolicy::kMas) {
    auto p = std::find(pending_.begin(), pending_.end(), &e);
    if (p != pending_.end()) {
      *p = pending_.back();
      pending_.pop_back();
    }
    order_.insert(KeyOf(e));
  }
  return Status::OK();
}

bool RestoreQueue::ReadyAvailable() const {
  if (order_.empty()) return false;
  return entries_.at(order_.begin()->id).state == State::kReady;
}

std::optional<ReadyRequest> RestoreQueue::PopReady() {
  if (!ReadyAvailable()) return std::nullopt;
  auto node = entries_.extract(order_.begin()->id);
  order_.erase(order_.begin());
  Entry& e = node.mapped();
  return ReadyRequest{e.request, e.restore_class, std::move(e.prefetch_status), e.admitted_ns,
                      e.ready_ns};
}

std::vector<RestoreRequest> RestoreQueue::DrainUnserved() {
  std::vector<const Entry*> drained;
  for (const auto& [id, e] : entries_) {
    if (e.state != State::kPrefetching) drained.push_back(&e);
  }
  std::sort(drained.begin(), drained.end(),
            [](const Entry* a, const Entry* b) { return KeyOf(*a) < KeyOf(*b); });
  std::vector<RestoreRequest> out;
  out.reserve(drained.size());
  for (const Entry* e : drained) out.push_back(e->request);
  for (const RestoreRequest& r : out) {
    order_.erase(KeyOf(entries_.at(r.id)));
    entries_.erase(r.id);
  }
  pending_.clear();
  return out;
}

size_t RestoreQueue::pending_ssd() const {
  if (options_.policy == SchedPolicy::kMas) return pending_.size();
  size_t n = 0;
  for (const auto& [id, e] : entries_) {
    n += (e.restore_class == RestoreClass::kSsdPreparing && e.state == State::kQueued) ? 1 : 0;
  }
  return n;
}

}  // namespace flatcake
