#include "sched/mas_scheduler.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace flatcake {

Result<std::unique_ptr<MasScheduler>> MasScheduler::Create(const MasSchedulerOptions& options,
                                                           PrefetchExecutor* executor) {
  FC_RETURN_IF_ERROR(options.sched.Validate());
  if (executor == nullptr) return Status::InvalidArgument("sched: executor is null");
  return std::unique_ptr<MasScheduler>(new MasScheduler(options, executor));
}

MasScheduler::MasScheduler(const MasSchedulerOptions& options, PrefetchExecutor* executor)
    : clock_(options.clock ? options.clock : std::function<int64_t()>(SteadyNowNs)),
      executor_(executor),
      queue_(options.sched) {}

MasScheduler::~MasScheduler() { (void)Shutdown(); }

Status MasScheduler::Submit(RestoreRequest request) {
  MutexLock lock(mu_);
  if (shutdown_) return Status::Aborted("sched: scheduler is shut down");
  const int64_t now = clock_();
  if (request.arrival_ns == kStampOnSubmit) request.arrival_ns = now;
  FC_RETURN_IF_ERROR(queue_.Submit(request, now));
  ++stats_.submitted;
  if (ClassifyRestore(request.slowest_gva) == RestoreClass::kDramReady) {
    ++stats_.dram_ready;
    ready_cv_.NotifyOne();
  } else {
    ++stats_.ssd_preparing;
    PumpLocked();
  }
  return Status::OK();
}

void MasScheduler::PumpLocked() {
  if (dispatching_) return;  // the dispatching thread re-reads the queue before it stops
  dispatching_ = true;
  while (!shutdown_) {
    std::vector<RestoreRequest> batch = queue_.TakeAdmissions(clock_());
    if (batch.empty()) break;
    stats_.prefetches_started += batch.size();
    mu_.unlock();
    for (const RestoreRequest& r : batch) {
      const uint64_t id = r.id;
      executor_->Prefetch(r, [this, id](Status s) { OnPrefetchDone(id, s); });
    }
    mu_.lock();
  }
  dispatching_ = false;
  idle_cv_.NotifyAll();
}

void MasScheduler::OnPrefetchDone(uint64_t id, const Status& status) {
  MutexLock lock(mu_);
  // The only failure is an id with no prefetch in flight: an executor bug; nothing to undo.
  if (!queue_.CompletePrefetch(id, status, clock_()).ok()) return;
  if (!status.ok()) ++stats_.prefetches_failed;
  ready_cv_.NotifyAll();  // under FC-MAS several consumers may now find work
  PumpLocked();           // window space freed: admit more
  // Still under the lock: Shutdown cannot observe the idle state and return before this
  // callback has stopped touching the scheduler.
  idle_cv_.NotifyAll();
}

bool MasScheduler::Abandon(uint64_t id, const Status& status) {
  MutexLock lock(mu_);
  if (!queue_.Abandon(id, status, clock_()).ok()) return false;
  ready_cv_.NotifyAll();
  return true;
}

std::optional<ReadyRequest> MasScheduler::PopReady() {
  MutexLock lock(mu_);
  while (!shutdown_ && !queue_.ReadyAvailable()) ready_cv_.Wait(mu_);
  if (shutdown_) return std::nullopt;
  std::optional<ReadyRequest> r = queue_.PopReady();
  ++stats_.popped;
  // FCFS: the next head may be an SSD request to admit now, or a ready one for another consumer.
  if (queue_.options().policy == SchedPolicy::kFcfs) {
    PumpLocked();
    if (queue_.ReadyAvailable()) ready_cv_.NotifyOne();
  }
  return r;
}

std::optional<ReadyRequest> MasScheduler::TryPop() {
  MutexLock lock(mu_);
  if (shutdown_) return std::nullopt;
  std::optional<ReadyRequest> r = queue_.PopReady();
  if (!r) return r;
  ++stats_.popped;
  if (queue_.options().policy == SchedPolicy::kFcfs) {
    PumpLocked();
    if (queue_.ReadyAvailable()) ready_cv_.NotifyOne();
  }
  return r;
}

std::vector<RestoreRequest> MasScheduler::Shutdown() {
  MutexLock lock(mu_);
  const bool first = !shutdown_;
  shutdown_ = true;
  ready_cv_.NotifyAll();
  while (queue_.in_flight() != 0 || dispatching_) idle_cv_.Wait(mu_);
  if (!first) return {};
  return queue_.DrainUnserved();
}

MasSchedulerStats MasScheduler::stats() const {
  MutexLock lock(mu_);
  MasSchedulerStats s = stats_;
  s.peak_in_flight_bytes = queue_.peak_in_flight_bytes();
  s.waiting_ssd = queue_.pending_ssd();
  s.in_flight = queue_.in_flight();
  return s;
}

}  // namespace flatcake
