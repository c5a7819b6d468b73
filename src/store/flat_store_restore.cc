// FlatStore's restores as requests: FC-MAS (sched/mas_scheduler.h) schedules every restore.
//
// Threads:
//  - The caller's thread runs Restore: it resolves and pins the hits, submits the request, and
//    serves what is ready, so a DRAM-ready request is copied before Restore returns. A prefetch
//    admitted while it submits (the window had room) is started on it too.
//  - One scheduler thread ("dispatcher") starts the prefetches FC-MAS admits from elsewhere (when
//    an I/O worker's completion frees window space) and serves the requests that became ready
//    there. Building and planning a large restore's slices takes milliseconds; I/O workers only
//    report completions and never do that work.
//  - I/O workers land the reads, hash the slices and report layers (restore_job.h).
//
// A pin whose owner reads it (AdmitRead: the node daemon's clients) is a request too, a remote
// job: FC-MAS admits it exactly as it would a restore of the same hits, its owner is told, and
// its window share comes back when the owner says its reads are done, or gives the pin up.
#include <chrono>
#include <memory>
#include <utility>

#include "store/flat_store.h"

namespace flatcake {
namespace {

// The store whose scheduling work this thread may run inline: set while a thread is inside
// Restore or Cancel, and on the dispatcher thread.
thread_local const FlatStore* t_inline_store = nullptr;

class InlineScope {
 public:
  explicit InlineScope(const FlatStore* store) : saved_(t_inline_store) { t_inline_store = store; }
  ~InlineScope() { t_inline_store = saved_; }
  InlineScope(const InlineScope&) = delete;
  InlineScope& operator=(const InlineScope&) = delete;

 private:
  const FlatStore* saved_;
};

// A remote job's prefetch: its owner reads now, and the prefetch completes (`done`) when the
// owner is done (FinishRemoteJob) or gives the pin up (CancelRemoteJob).
void AdmitRemote(RestoreJob& job, std::function<void(Status)> done) {
  {
    MutexLock lock(job.mu);
    if (!job.cancelled) {
      job.window_done = std::move(done);
      done = nullptr;
    }
  }
  if (done) {
    done(Status::Aborted("read pin released"));
    return;
  }
  job.TellAdmitted(Status::OK());
}

}  // namespace

// --- RestoreJob / FlatRestoreHandle ---

void RestoreJob::ReportLayer(uint32_t layer) {
  {
    MutexLock lock(mu);
    layers_reported = layer + 1;
  }
  cv.NotifyAll();
  if (on_layer) on_layer(layer);
}

void RestoreJob::TellAdmitted(const Status& st) {
  std::function<void(Status)> tell;
  Status why = st;
  {
    MutexLock lock(mu);
    tell = std::move(on_admitted);
    on_admitted = nullptr;
    // An admission that comes after the pin was given up is no admission.
    if (cancelled && why.ok()) why = Status::Aborted("read pin released");
  }
  if (tell) tell(why);
}

std::function<void(Status)> RestoreJob::CancelRemote() {
  MutexLock lock(mu);
  cancelled = true;
  std::function<void(Status)> done = std::move(window_done);
  window_done = nullptr;
  return done;
}

FlatRestoreHandle::~FlatRestoreHandle() {
  if (done()) return;
  Cancel();
  (void)Wait();
}

Result<GetResult> FlatRestoreHandle::Wait() {
  MutexLock lock(job_->mu);
  while (!job_->done) job_->cv.Wait(job_->mu);
  if (!job_->status.ok()) return job_->status;
  return job_->result;
}

bool FlatRestoreHandle::WaitFor(std::chrono::nanoseconds timeout) {
  MutexLock lock(job_->mu);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!job_->done) {
    if (!job_->cv.WaitUntil(job_->mu, deadline)) return job_->done;
  }
  return true;
}

Status FlatRestoreHandle::WaitLayer(uint32_t layer) {
  if (layer >= job_->layout.num_layers) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range (" +
                                   std::to_string(job_->layout.num_layers) + " layers)");
  }
  MutexLock lock(job_->mu);
  while (!job_->done && job_->layers_reported <= layer) job_->cv.Wait(job_->mu);
  if (job_->layers_reported > layer) return Status::OK();
  return job_->status;
}

bool FlatRestoreHandle::done() const {
  MutexLock lock(job_->mu);
  return job_->done;
}

void FlatRestoreHandle::Cancel() {
  // A done restore no longer needs its store, which may be gone.
  if (!done()) store_->CancelRestore(job_);
}

// --- FlatStore ---

Result<GetResult> Store::Get(std::span<const Key> keys, const KvLayout& layout,
                             const BlockBuffers& dst, const RestoreOptions& options) {
  FC_ASSIGN_OR_RETURN(std::unique_ptr<RestoreHandle> handle, Restore(keys, layout, dst, options));
  return handle->Wait();
}

Status FlatStore::StartScheduler() {
  MasSchedulerOptions so;
  so.sched.policy =
      options_.scheduler == RestoreScheduler::kFcfs ? SchedPolicy::kFcfs : SchedPolicy::kMas;
  so.sched.window_bytes = options_.read_window_bytes;
  FC_ASSIGN_OR_RETURN(sched_, MasScheduler::Create(so, &executor_));
  dispatcher_ = std::thread([this] { DispatchLoop(); });
  return Status::OK();
}

void FlatStore::StopScheduler() {
  if (!sched_) return;
  // A remote read admitted and never finished would hold Shutdown forever: its owner cannot
  // finish it now.
  std::vector<std::shared_ptr<RestoreJob>> remote;
  {
    MutexLock lock(jobs_mu_);
    for (auto& [id, job] : jobs_) {
      if (job->remote) remote.push_back(job);
    }
  }
  for (auto& job : remote) {
    if (auto done = job->CancelRemote()) done(Status::Aborted("the store is closing"));
  }
  // No new prefetch starts; those in flight complete (their reads land); what was never served is
  // failed below, so every waiter wakes and every pin is dropped.
  (void)sched_->Shutdown();  // the requests it never served are all in jobs_, failed below
  {
    MutexLock lock(jobs_mu_);
    while (completions_running_ != 0) jobs_cv_.Wait(jobs_mu_);
    stop_dispatcher_ = true;
  }
  jobs_cv_.NotifyAll();
  if (dispatcher_.joinable()) dispatcher_.join();
  std::unordered_map<uint64_t, std::shared_ptr<RestoreJob>> left;
  {
    MutexLock lock(jobs_mu_);
    left.swap(jobs_);
    // Empty already: Shutdown waited for every admitted prefetch, and the dispatcher, still
    // running then, started the queued ones. Cleared so no task outlives the scheduler.
    prefetch_tasks_.clear();
  }
  for (auto& [id, job] : left) {
    const Status why = Status::Aborted("the store is closing");
    if (job->remote) {
      job->TellAdmitted(why);
    } else {
      FinishJob(*job, why);
    }
  }
}

void FlatStore::Executor::Prefetch(const RestoreRequest& request,
                                   std::function<void(Status)> done) {
  store_->QueuePrefetch(request.id, std::move(done));
}

void FlatStore::QueuePrefetch(uint64_t id, std::function<void(Status)> done) {
  // The completion goes through the dispatcher: serving what became ready must not run on the
  // I/O worker that reports it.
  auto complete = [this, done = std::move(done)](Status st) {
    {
      MutexLock lock(jobs_mu_);
      ++completions_running_;
    }
    done(std::move(st));
    {
      MutexLock lock(jobs_mu_);
      --completions_running_;
      drain_requested_ = true;
    }
    jobs_cv_.NotifyAll();
  };
  if (t_inline_store == this) {
    StartPrefetch(id, std::move(complete));
    return;
  }
  {
    MutexLock lock(jobs_mu_);
    prefetch_tasks_.push_back(PrefetchTask{id, std::move(complete)});
  }
  jobs_cv_.NotifyAll();
}

void FlatStore::DispatchLoop() {
  InlineScope inline_scope(this);
  MutexLock lock(jobs_mu_);
  for (;;) {
    while (!stop_dispatcher_ && !drain_requested_ && prefetch_tasks_.empty()) {
      jobs_cv_.Wait(jobs_mu_);
    }
    if (stop_dispatcher_) return;
    if (!prefetch_tasks_.empty()) {
      PrefetchTask task = std::move(prefetch_tasks_.front());
      prefetch_tasks_.pop_front();
      lock.Unlock();
      StartPrefetch(task.id, std::move(task.done));
      lock.Lock();
      continue;
    }
    drain_requested_ = false;
    lock.Unlock();
    ServeReady();
    lock.Lock();
  }
}

std::shared_ptr<RestoreJob> FlatStore::FindJob(uint64_t id, bool take) {
  MutexLock lock(jobs_mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return nullptr;
  std::shared_ptr<RestoreJob> job = it->second;
  if (take) jobs_.erase(it);
  return job;
}

void FlatStore::StartPrefetch(uint64_t id, std::function<void(Status)> done) {
  std::shared_ptr<RestoreJob> job = FindJob(id, false);
  if (job == nullptr) {  // a scheduler bug: complete it so the window does not leak
    done(Status::NotFound("restore " + std::to_string(id) + " is unknown"));
    return;
  }
  if (job->remote) {
    AdmitRemote(*job, std::move(done));
    return;
  }
  {
    MutexLock lock(job->mu);
    if (job->cancelled) {
      done(Status::Aborted("restore cancelled"));
      return;
    }
  }
  job->admitted_ns = SteadyNowNs();
  // DRAM hits of a mixed request are copied before its SSD reads start, so a layer the reads
  // report is whole.
  job->read->CopyDram(media_access_.dram);
  StartSsdReads(job, std::move(done));
}

void FlatStore::ServeReady() {
  while (std::optional<ReadyRequest> ready = sched_->TryPop()) {
    std::shared_ptr<RestoreJob> job = FindJob(ready->request.id, true);
    if (job == nullptr) continue;
    Status st = ready->prefetch_status;
    if (job->remote) {
      // DRAM-ready: admitted as it is served. SSD-preparing: told when admitted, unless the
      // request ended first (Abandon).
      job->TellAdmitted(st);
      continue;
    }
    if (st.ok() && ready->restore_class == RestoreClass::kDramReady) {
      bool cancelled;
      {
        MutexLock lock(job->mu);
        cancelled = job->cancelled;
      }
      if (cancelled) {
        st = Status::Aborted("restore cancelled");
      } else {
        job->read->CopyDram(media_access_.dram);
        for (uint32_t l = job->read->first_layer(); l < job->read->end_layer(); ++l) {
          job->ReportLayer(l);
        }
      }
    }
    FinishJob(*job, std::move(st));
  }
}

Result<std::unique_ptr<RestoreHandle>> FlatStore::Restore(std::span<const Key> keys,
                                                          const KvLayout& layout,
                                                          const BlockBuffers& dst,
                                                          const RestoreOptions& options) {
  return StartRestore(keys, layout, dst, options, {});
}

Result<std::unique_ptr<RestoreHandle>> FlatStore::RestoreLayers(
    std::span<const Key> keys, const KvLayout& layout, const BlockBuffers& dst,
    uint32_t first_layer, uint32_t end_layer, const RestoreOptions& options) {
  if (first_layer >= end_layer || end_layer > layout.num_layers) {
    return Status::InvalidArgument("layers [" + std::to_string(first_layer) + ", " +
                                   std::to_string(end_layer) + ") of a layout of " +
                                   std::to_string(layout.num_layers));
  }
  return StartRestore(keys, layout, dst, options, {first_layer, end_layer});
}

Result<std::unique_ptr<RestoreHandle>> FlatStore::StartRestore(std::span<const Key> keys,
                                                               const KvLayout& layout,
                                                               const BlockBuffers& dst,
                                                               const RestoreOptions& options,
                                                               LayerRange layers) {
  gets_.fetch_add(1, std::memory_order_relaxed);
  FC_RETURN_IF_ERROR(ValidateBuffers(dst, layout, keys.size()));
  auto job = std::make_shared<RestoreJob>();
  job->layout = layout;
  job->num_keys = keys.size();
  job->on_layer = options.on_layer;
  job->arrival_ns = options.arrival_ns == kArrivalNow ? SteadyNowNs() : options.arrival_ns;
  std::vector<PinnedHit> hits;
  Gva slowest = 0;
  FC_RETURN_IF_ERROR(PinHits(keys, layout, &hits, &slowest));
  job->read.emplace(layout, dst, std::move(hits), options_.verify_checksums, layers);

  (ClassifyRestore(slowest) == RestoreClass::kDramReady ? restores_dram_ : restores_ssd_)
      .fetch_add(1, std::memory_order_relaxed);
  const RestoreRequest request{next_restore_id_.fetch_add(1, std::memory_order_relaxed),
                               job->arrival_ns, slowest,
                               job->read->num_ssd_hits() * job->read->block_bytes_delivered()};
  job->id = request.id;
  auto handle = std::make_unique<FlatRestoreHandle>(this, job);
  if (Status st = SubmitJob(job, request); !st.ok()) {
    FinishJob(*job, st);
    return st.WithContext("restore");
  }
  return std::unique_ptr<RestoreHandle>(std::move(handle));
}

Status FlatStore::SubmitJob(const std::shared_ptr<RestoreJob>& job, const RestoreRequest& request) {
  {
    MutexLock lock(jobs_mu_);
    jobs_.emplace(job->id, job);
  }
  InlineScope inline_scope(this);
  if (Status st = sched_->Submit(request); !st.ok()) {
    FindJob(job->id, true);
    return st;
  }
  ServeReady();
  return Status::OK();
}

Status FlatStore::SubmitRemoteJob(const std::shared_ptr<RestoreJob>& job, Gva slowest_gva,
                                  uint64_t ssd_bytes) {
  job->remote = true;
  job->id = next_restore_id_.fetch_add(1, std::memory_order_relaxed);
  return SubmitJob(job, RestoreRequest{job->id, job->arrival_ns, slowest_gva, ssd_bytes});
}

void FlatStore::CancelRemoteJob(uint64_t id) {
  std::shared_ptr<RestoreJob> job = FindJob(id, false);
  if (job == nullptr) return;  // served already
  const Status why = Status::Aborted("read pin released");
  // Admitted: its window share comes back now. Still queued: it leaves the queue.
  if (auto done = job->CancelRemote()) {
    done(why);
    return;
  }
  InlineScope inline_scope(this);
  if (sched_->Abandon(id, why)) ServeReady();
}

Status FlatStore::FinishRemoteJob(uint64_t id) {
  std::shared_ptr<RestoreJob> job = FindJob(id, false);
  if (job == nullptr) return Status::OK();  // served (a DRAM-ready one is, once admitted)
  std::function<void(Status)> done;
  {
    MutexLock lock(job->mu);
    done = std::move(job->window_done);
    job->window_done = nullptr;
  }
  if (!done) return Status::InvalidArgument("its read was not admitted yet");
  done(Status::OK());
  return Status::OK();
}

void FlatStore::CancelRestore(const std::shared_ptr<RestoreJob>& job) {
  const Status why = Status::Aborted("restore cancelled");
  std::shared_ptr<LayeredRestore> reads;
  {
    MutexLock lock(job->mu);
    if (job->done || job->cancelled) return;
    job->cancelled = true;
    reads = job->reads;
  }
  // Reads in flight land; nothing more is issued. (Reads started after this see `cancelled`.)
  if (reads) reads->Cancel(why);
  // A request still waiting for the window leaves the queue now rather than when admitted.
  InlineScope inline_scope(this);
  if (sched_->Abandon(job->id, why)) ServeReady();
}

}  // namespace flatcake
