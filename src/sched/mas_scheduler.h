// MasScheduler: FC-MAS with threads, a clock and a prefetch executor around RestoreQueue.
//
// Thread safety: every public method may be called concurrently from any thread: submitters,
// consumers (PopReady/TryPop) and the executor's completion callbacks. One mutex guards the
// RestoreQueue and the flags below; this is the control path (one lock hold per request event),
// not the data path, which runs in the executor. Two condition variables: `ready_cv_` wakes
// consumers when a request becomes ready or on shutdown; `idle_cv_` wakes Shutdown when the last
// prefetch completes and no thread is dispatching.
//
// Invariants:
//  - The executor is never called with the mutex held, so it may call `done` inline or from any
//    thread. Exactly one thread at a time (`dispatching_`) hands admitted requests to the
//    executor; other threads that change the queue while it runs leave the work to it, and it
//    re-reads the queue before giving up the role, so no admission is lost and callbacks never
//    recurse into the executor.
//  - Backpressure only delays: a request waits for window space, is never rejected for lack of
//    it, and a request larger than the window runs alone (see restore_queue.h).
//  - After Shutdown returns no thread of this scheduler touches it again: no prefetch is in
//    flight and no thread is dispatching, so the object may be destroyed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "flatcake/clock.h"
#include "flatcake/status.h"
#include "sched/restore_queue.h"
#include "util/thread_annotations.h"

namespace flatcake {

// Runs the SSD part of a restore (in the store: coalesced reads into the staging window).
class PrefetchExecutor {
 public:
  virtual ~PrefetchExecutor() = default;
  // Starts restoring `request.kv_bytes` from SSD. Must call `done` exactly once, eventually, from
  // any thread or inline, also on failure (with the error). Must not call Shutdown.
  virtual void Prefetch(const RestoreRequest& request, std::function<void(Status)> done) = 0;
};

struct MasSchedulerOptions {
  SchedOptions sched;
  // Clock for arrival stamps and HRRN waits, in ns; empty means SteadyNowNs. Tests inject a
  // manual clock to make waits exact.
  std::function<int64_t()> clock;
};

struct MasSchedulerStats {
  uint64_t submitted = 0;
  uint64_t dram_ready = 0;
  uint64_t ssd_preparing = 0;
  uint64_t prefetches_started = 0;
  uint64_t prefetches_failed = 0;
  uint64_t popped = 0;
  uint64_t peak_in_flight_bytes = 0;
  // Now: SSD-preparing requests waiting for the read window, and prefetches admitted into it and
  // not yet complete.
  uint64_t waiting_ssd = 0;
  uint64_t in_flight = 0;
};

class MasScheduler {
 public:
  // `executor` must outlive the scheduler. Errors: InvalidArgument for bad options.
  static Result<std::unique_ptr<MasScheduler>> Create(const MasSchedulerOptions& options,
                                                      PrefetchExecutor* executor);
  // Shuts down (see Shutdown) if that was not done yet.
  ~MasScheduler();
  MasScheduler(const MasScheduler&) = delete;
  MasScheduler& operator=(const MasScheduler&) = delete;

  // Queues a request; stamps arrival_ns from the clock when it is kStampOnSubmit, otherwise keeps
  // the supplied timestamp (simulation, or a stamp taken earlier by the caller). Never blocks on
  // window space. Errors: Aborted after Shutdown, InvalidArgument for a duplicate live id.
  Status Submit(RestoreRequest request);

  // Serves a request that still waits for admission as failed with `status`, without a
  // prefetch (see RestoreQueue::Abandon); false when it is prefetching, ready or unknown.
  bool Abandon(uint64_t id, const Status& status);

  // Blocks until a request is ready and returns it, or returns nullopt once Shutdown has begun.
  std::optional<ReadyRequest> PopReady();
  // Returns a ready request if there is one now; nullopt otherwise (and after Shutdown).
  std::optional<ReadyRequest> TryPop();

  // Stops the scheduler: new submissions fail, blocked and later PopReady calls return nullopt,
  // no new prefetch starts. Waits for the prefetches in flight to complete, then returns every
  // request that was submitted but never popped (in arrival order), so the caller can fail them
  // over. Idempotent (a second call returns an empty list).
  // REQUIRES: not called from an executor callback.
  std::vector<RestoreRequest> Shutdown();

  MasSchedulerStats stats() const;
  int64_t Now() const { return clock_(); }

 private:
  MasScheduler(const MasSchedulerOptions& options, PrefetchExecutor* executor);
  // Admits and dispatches prefetches until the queue has nothing more to admit, unless another
  // thread is already doing so. Releases mu_ around the executor's calls; holds it again on
  // return.
  void PumpLocked() REQUIRES(mu_);
  void OnPrefetchDone(uint64_t id, const Status& status) EXCLUDES(mu_);

  std::function<int64_t()> clock_;
  PrefetchExecutor* executor_;

  mutable Mutex mu_;
  CondVar ready_cv_;
  CondVar idle_cv_;
  RestoreQueue queue_ GUARDED_BY(mu_);
  bool dispatching_ GUARDED_BY(mu_) = false;
  bool shutdown_ GUARDED_BY(mu_) = false;
  MasSchedulerStats stats_ GUARDED_BY(mu_);
};

}  // namespace flatcake
