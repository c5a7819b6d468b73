#include "io/uring_io_engine.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "util/thread_annotations.h"

namespace flatcake {
namespace {

constexpr uint64_t kWakeTag = ~0ull;  // user_data of the eventfd read that wakes a worker
constexpr uint64_t kDefaultMaxSqeBytes = 1ull << 30;
// Most entries the kernel gives a ring without IORING_SETUP_CLAMP (IORING_MAX_ENTRIES); larger
// requests fail with EINVAL. Used only to explain that failure: the kernel stays the judge.
constexpr unsigned kKernelMaxRingEntries = 32768;

// Adds to a counter that only its worker thread writes: a relaxed load and store, not a locked
// read-modify-write, since nothing else ever writes it. Readers (stats()) may see it a little late.
inline void Bump(std::atomic<uint64_t>& counter, uint64_t n = 1) {
  counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

}  // namespace

// One ring and the thread that owns it. Everything below "worker-thread state" is touched only by
// that thread; the queue, the control list and the flags are guarded by mu_.
class UringIoEngine::Worker {
 public:
  Worker(uint32_t depth, uint64_t max_sqe_bytes)
      : depth_(depth), max_sqe_bytes_(max_sqe_bytes == 0 ? kDefaultMaxSqeBytes : max_sqe_bytes) {}

  ~Worker() {
    if (thread_.joinable()) {
      {
        MutexLock lock(mu_);
        stop_ = true;
      }
      Wake();
      thread_.join();
    }
    if (efd_ >= 0) ::close(efd_);
  }

  Status Start() {
    efd_ = ::eventfd(0, EFD_CLOEXEC);
    if (efd_ < 0) return Status::FromErrno(errno, "eventfd");
    std::promise<Status> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, &ready] { Loop(ready); });
    Status s = started.get();
    if (!s.ok()) thread_.join();
    return s;
  }

  void Enqueue(std::vector<IoOp>& ops, IoCompletionSink* sink) {
    bool wake;
    {
      MutexLock lock(mu_);
      for (const IoOp& op : ops) queue_.push_back(Pending{op, sink});
      queued_.store(true, std::memory_order_relaxed);
      wake = idle_;
      idle_ = false;
    }
    if (wake) Wake();
  }

  // Runs `fn` on the worker thread between batches and returns its status.
  Status RunOnWorker(std::function<Status()> fn) {
    auto control = std::make_shared<Control>();
    control->fn = std::move(fn);
    auto done = control->done.get_future();
    {
      MutexLock lock(mu_);
      controls_.push_back(control);
      idle_ = false;
    }
    Wake();
    return done.get();
  }

  // Control bodies (worker thread only).
  Status SetFiles(std::span<const int> fds) {
    if (fixed_files_) io_uring_unregister_files(&ring_);
    fixed_files_ = false;
    fds_.assign(fds.begin(), fds.end());
    if (!fds_.empty()) {
      fixed_files_ = io_uring_register_files(&ring_, fds_.data(), fds_.size()) == 0;
    }
    return fixed_files_ || fds_.empty() ? Status::OK() : Status::Unsupported("fixed files");
  }

  Status SetRegions(std::vector<IoBufferRegion> regions) {
    if (!regions_.empty()) io_uring_unregister_buffers(&ring_);
    regions_.clear();
    if (regions.empty()) return Status::OK();
    std::vector<iovec> iov;
    for (const auto& r : regions) iov.push_back(iovec{r.base, r.len});
    const int rc = io_uring_register_buffers(&ring_, iov.data(), iov.size());
    if (rc < 0) return Status::FromErrno(-rc, "io_uring_register_buffers");
    regions_ = std::move(regions);
    return Status::OK();
  }

  const std::vector<IoBufferRegion>& regions() const { return regions_; }

  UringIoEngine::Stats stats() const {
    UringIoEngine::Stats s;
    s.ops = ops_.load(std::memory_order_relaxed);
    s.sqes = sqes_.load(std::memory_order_relaxed);
    s.fixed_buffer_sqes = fixed_sqes_.load(std::memory_order_relaxed);
    s.resubmissions = resubmissions_.load(std::memory_order_relaxed);
    s.submit_calls = submit_calls_.load(std::memory_order_relaxed);
    s.vectored_sqes = vectored_sqes_.load(std::memory_order_relaxed);
    s.submit_batches = submit_batches_.load(std::memory_order_relaxed);
    s.reap_passes = reap_passes_.load(std::memory_order_relaxed);
    s.cqes_reaped = cqes_reaped_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  struct Pending {
    IoOp op;
    IoCompletionSink* sink;
  };
  struct Slot {
    IoOp op;
    IoCompletionSink* sink = nullptr;
    uint64_t done = 0;
    std::vector<iovec> iov_rest;  // rebuilt iovec list of a continued vectored op; kept for reuse
  };
  struct Control {
    std::function<Status()> fn;
    std::promise<Status> done;
  };
  struct Finished {
    IoCompletionSink* sink;
    uint64_t tag;
    Status status;
  };

  void Wake() {
    const uint64_t one = 1;
    // A failed write can only mean the counter is saturated, i.e. a wake-up is already pending.
    [[maybe_unused]] ssize_t n = ::write(efd_, &one, sizeof(one));
  }

  Status InitRing() {
    const unsigned entries = depth_ + 1;  // +1: the eventfd read is always armed
    // Single issuer + deferred task running keep completion work on this thread; older kernels
    // reject the flags, so fall back step by step.
    const unsigned flag_sets[] = {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
                                  IORING_SETUP_COOP_TASKRUN, 0};
    int rc = -EINVAL;
    for (unsigned flags : flag_sets) {
      rc = io_uring_queue_init(entries, &ring_, flags);
      if (rc != -EINVAL) break;
    }
    if (rc < 0) {
      Status s =
          Status::FromErrno(-rc, "io_uring_queue_init(" + std::to_string(entries) +
                                     " entries for queue depth " + std::to_string(depth_) + ")");
      if (rc == -EINVAL && depth_ >= kKernelMaxRingEntries) {  // also if depth_ + 1 wrapped
        s = Status::InvalidArgument(std::string(s.message()) + ": a ring holds at most " +
                                    std::to_string(kKernelMaxRingEntries) +
                                    " entries, so the queue depth must be at most " +
                                    std::to_string(kKernelMaxRingEntries - 1));
      }
      return s;
    }
    return Status::OK();
  }

  io_uring_sqe* GetSqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {  // unreachable while in-flight <= depth; kept as a safety net
      Bump(submit_batches_);
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }

  void ArmWake() {
    io_uring_sqe* sqe = GetSqe();
    io_uring_prep_read(sqe, efd_, &wake_buf_, sizeof(wake_buf_), 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  int FindRegion(const uint8_t* p, uint64_t n) const {
    for (size_t i = 0; i < regions_.size(); ++i) {
      const auto* base = static_cast<const uint8_t*>(regions_[i].base);
      if (p >= base && p + n <= base + regions_[i].len) return static_cast<int>(i);
    }
    return -1;
  }

  void Prep(uint32_t idx) {
    Slot& s = slots_[idx];
    io_uring_sqe* sqe = GetSqe();
    const uint64_t off = s.op.offset + s.done;
    const int fd = fixed_files_ ? static_cast<int>(s.op.file) : fds_[s.op.file];
    const bool read = s.op.opcode == IoOpcode::kRead;
    if (s.op.vectored()) {
      PrepVectored(s, sqe, fd, off, read);
    } else {
      uint8_t* p = static_cast<uint8_t*>(s.op.buf) + s.done;
      const auto n = static_cast<unsigned>(std::min(s.op.len - s.done, max_sqe_bytes_));
      const int region = FindRegion(p, n);
      if (region >= 0) {
        if (read) {
          io_uring_prep_read_fixed(sqe, fd, p, n, off, region);
        } else {
          io_uring_prep_write_fixed(sqe, fd, p, n, off, region);
        }
        Bump(fixed_sqes_);
      } else if (read) {
        io_uring_prep_read(sqe, fd, p, n, off);
      } else {
        io_uring_prep_write(sqe, fd, p, n, off);
      }
    }
    if (fixed_files_) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, idx);
    Bump(sqes_);
  }

  // READV / WRITEV. The caller's list goes to the kernel as is when it is whole and within the
  // limits; a continuation or an over-long list is rebuilt in the slot, which lives until the op
  // completes (the kernel may read the iovecs after submission on older kernels).
  void PrepVectored(Slot& s, io_uring_sqe* sqe, int fd, uint64_t off, bool read) {
    const iovec* v = s.op.iov;
    uint32_t cnt = s.op.iovcnt;
    if (s.done > 0 || cnt > kMaxIoVecs || s.op.len > max_sqe_bytes_) {
      s.iov_rest.resize(std::min(s.op.iovcnt, kMaxIoVecs));
      cnt = IoVecRemainder(s.op, s.done, max_sqe_bytes_, s.iov_rest.data(),
                           static_cast<uint32_t>(s.iov_rest.size()));
      v = s.iov_rest.data();
    }
    if (read) {
      io_uring_prep_readv(sqe, fd, v, cnt, off);
    } else {
      io_uring_prep_writev(sqe, fd, v, cnt, off);
    }
    Bump(vectored_sqes_);
  }

  void Finish(uint32_t idx, Status status) {
    Slot& s = slots_[idx];
    finished_.push_back(Finished{s.sink, s.op.tag, std::move(status)});
    free_.push_back(idx);
    --inflight_;
  }

  void Reap() {
    unsigned head;
    unsigned count = 0;
    unsigned op_cqes = 0;
    bool rearm = false;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++count;
      const uint64_t ud = io_uring_cqe_get_data64(cqe);
      if (ud == kWakeTag) {
        rearm = true;
        continue;
      }
      ++op_cqes;
      const auto idx = static_cast<uint32_t>(ud);
      Slot& s = slots_[idx];
      const int res = cqe->res;
      if (res > 0) {
        s.done += static_cast<uint64_t>(res);
        if (s.done < s.op.len) {
          Bump(resubmissions_);
          resubmit_.push_back(idx);
        } else {
          Finish(idx, Status::OK());
        }
      } else if (res == 0) {
        Finish(idx, s.op.opcode == IoOpcode::kRead ? IoEofStatus(s.op, s.done)
                                                   : IoErrnoStatus(s.op, s.done, ENOSPC));
      } else if (res == -EAGAIN || res == -EINTR) {
        resubmit_.push_back(idx);
      } else {
        Finish(idx, IoErrnoStatus(s.op, s.done, -res));
      }
    }
    io_uring_cq_advance(&ring_, count);
    if (op_cqes > 0) {
      Bump(reap_passes_);
      Bump(cqes_reaped_, op_cqes);
    }
    if (rearm) ArmWake();
  }

  // Hands the finished ops to their sinks. A sink's work (a restore copying its bytes out) can
  // be long, and it often queues new reads (a restore's freed window space): those go to the
  // kernel between two completions rather than after the whole pass, so the device is not left
  // idle while this thread copies.
  void Deliver() {
    while (!finished_.empty()) {
      delivering_.swap(finished_);
      Bump(ops_, delivering_.size());
      for (auto& f : delivering_) {
        f.sink->OnIoComplete(f.tag, f.status);
        if (queued_.load(std::memory_order_relaxed) && inflight_ < depth_) SubmitQueued();
      }
      delivering_.clear();  // ops that failed before reaching the kernel may be in finished_
    }
  }

  // Moves queued ops into the ring while it has room.
  void TakeQueued(std::vector<Pending>* taken) REQUIRES(mu_) {
    while (inflight_ + taken->size() < depth_ && !queue_.empty()) {
      taken->push_back(queue_.front());
      queue_.pop_front();
    }
    queued_.store(!queue_.empty(), std::memory_order_relaxed);
  }

  // Preps the taken ops' SQEs; ops that cannot go to the kernel finish at once (finished_).
  void PrepTaken(const std::vector<Pending>& taken) {
    for (const Pending& p : taken) {
      if (p.op.file >= fds_.size() || (!fixed_files_ && fds_[p.op.file] < 0)) {
        finished_.push_back(Finished{p.sink, p.op.tag, IoBadFileStatus(p.op, fds_.size())});
        continue;
      }
      if (Status bad = CheckIoVecs(p.op); !bad.ok()) {
        finished_.push_back(Finished{p.sink, p.op.tag, std::move(bad)});
        continue;
      }
      if (p.op.len == 0) {
        finished_.push_back(Finished{p.sink, p.op.tag, Status::OK()});
        continue;
      }
      const uint32_t idx = free_.back();
      free_.pop_back();
      Slot& slot = slots_[idx];
      slot.op = p.op;
      slot.sink = p.sink;
      slot.done = 0;
      ++inflight_;
      Prep(idx);
    }
  }

  // Submits, without waiting, the ops queued since the loop last took them (from Deliver).
  void SubmitQueued() {
    taken_mid_pass_.clear();
    {
      MutexLock lock(mu_);
      TakeQueued(&taken_mid_pass_);
    }
    PrepTaken(taken_mid_pass_);
    Bump(submit_calls_);
    if (io_uring_sq_ready(&ring_) > 0) Bump(submit_batches_);
    io_uring_submit(&ring_);  // a failure is retried by the loop's next submit
  }

  void Loop(std::promise<Status>& ready) {
    Status init = InitRing();
    if (!init.ok()) {
      ready.set_value(init);
      return;
    }
    slots_.resize(depth_);
    for (uint32_t i = depth_; i > 0; --i) free_.push_back(i - 1);
    ArmWake();
    ready.set_value(Status::OK());

    std::vector<Pending> taken;
    std::vector<std::shared_ptr<Control>> controls;
    for (;;) {
      taken.clear();
      controls.clear();
      bool stopping;
      bool more;
      {
        MutexLock lock(mu_);
        controls.swap(controls_);
        TakeQueued(&taken);
        idle_ = queue_.empty() && controls_.empty();
        stopping = stop_ && queue_.empty();
        more = !queue_.empty();
      }
      for (auto& c : controls) c->done.set_value(c->fn());
      for (uint32_t idx : resubmit_) Prep(idx);
      resubmit_.clear();
      PrepTaken(taken);
      Deliver();
      if (stopping && inflight_ == 0) break;
      Bump(submit_calls_);
      if (io_uring_sq_ready(&ring_) > 0) Bump(submit_batches_);
      // Ops still queued with room for them (some taken ops needed no I/O): submit without
      // blocking and come straight back for them.
      const int rc = more && inflight_ < depth_ ? io_uring_submit(&ring_)
                                                : io_uring_submit_and_wait(&ring_, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        // The ring itself failed; nothing sensible to do but back off and retry.
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      Reap();
      Deliver();
    }
    if (fixed_files_) io_uring_unregister_files(&ring_);
    if (!regions_.empty()) io_uring_unregister_buffers(&ring_);
    io_uring_queue_exit(&ring_);
  }

  const uint32_t depth_;
  const uint64_t max_sqe_bytes_;
  int efd_ = -1;
  std::thread thread_;

  Mutex mu_;
  std::deque<Pending> queue_ GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Control>> controls_ GUARDED_BY(mu_);
  bool idle_ GUARDED_BY(mu_) = false;  // worker may be asleep
  bool stop_ GUARDED_BY(mu_) = false;

  // Worker-thread state.
  io_uring ring_{};
  uint64_t wake_buf_ = 0;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> resubmit_;
  std::vector<Finished> finished_;
  std::vector<Finished> delivering_;     // the pass Deliver is handing out
  std::vector<Pending> taken_mid_pass_;  // SubmitQueued's ops
  // queue_ is not empty: written under mu_, read without it between two completions (a stale
  // false only delays the ops to the loop's next pass).
  std::atomic<bool> queued_{false};
  uint32_t inflight_ = 0;
  std::vector<int> fds_;
  bool fixed_files_ = false;
  std::vector<IoBufferRegion> regions_;

  // Counters for stats(): written by the worker thread only (see Bump), read by anyone.
  std::atomic<uint64_t> ops_{0}, sqes_{0}, fixed_sqes_{0}, resubmissions_{0}, submit_calls_{0},
      vectored_sqes_{0}, submit_batches_{0}, reap_passes_{0}, cqes_reaped_{0};
};

bool UringIoEngine::CompiledIn() { return true; }

Result<std::unique_ptr<UringIoEngine>> UringIoEngine::Create(const Options& options) {
  if (options.workers == 0 || options.queue_depth == 0) {
    return Status::InvalidArgument("uring engine needs workers >= 1 and queue_depth >= 1");
  }
  std::unique_ptr<UringIoEngine> engine(new UringIoEngine());
  for (uint32_t i = 0; i < options.workers; ++i) {
    auto w = std::make_unique<Worker>(options.queue_depth, options.max_sqe_bytes);
    FC_RETURN_IF_ERROR(w->Start().WithContext("uring worker " + std::to_string(i)));
    engine->workers_.push_back(std::move(w));
  }
  return engine;
}

UringIoEngine::~UringIoEngine() = default;

Status UringIoEngine::RegisterFiles(std::span<const int> fds) {
  MutexLock lock(register_mu_);
  bool all = true;
  for (auto& w : workers_) {
    all = w->RunOnWorker([&w, fds] { return w->SetFiles(fds); }).ok() && all;
  }
  files_registered_ = all && !fds.empty();
  return Status::OK();
}

Status UringIoEngine::RegisterBuffers(std::span<const IoBufferRegion> regions) {
  MutexLock lock(register_mu_);
  Status first;
  for (auto& w : workers_) {
    std::vector<IoBufferRegion> all = w->regions();
    all.insert(all.end(), regions.begin(), regions.end());
    Status s = w->RunOnWorker([&w, all] { return w->SetRegions(all); });
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

void UringIoEngine::UnregisterBuffers(std::span<const IoBufferRegion> regions) {
  MutexLock lock(register_mu_);
  for (auto& w : workers_) {
    std::vector<IoBufferRegion> keep;
    for (const auto& r : w->regions()) {
      const bool drop = std::any_of(regions.begin(), regions.end(),
                                    [&](const IoBufferRegion& x) { return x.base == r.base; });
      if (!drop) keep.push_back(r);
    }
    (void)w->RunOnWorker([&w, keep] { return w->SetRegions(keep); });
  }
}

void UringIoEngine::Submit(std::span<const IoOp> ops, IoCompletionSink* sink) {
  if (ops.empty()) return;
  const size_t n = workers_.size();
  uint64_t start = next_worker_.fetch_add(ops.size(), std::memory_order_relaxed);
  if (n == 1) {
    std::vector<IoOp> all(ops.begin(), ops.end());
    workers_[0]->Enqueue(all, sink);
    return;
  }
  std::vector<std::vector<IoOp>> per(n);
  for (size_t i = 0; i < ops.size(); ++i) per[(start + i) % n].push_back(ops[i]);
  for (size_t w = 0; w < n; ++w) {
    if (!per[w].empty()) workers_[w]->Enqueue(per[w], sink);
  }
}

UringIoEngine::Stats UringIoEngine::stats() const {
  Stats total;
  for (const auto& w : workers_) {
    Stats s = w->stats();
    total.ops += s.ops;
    total.sqes += s.sqes;
    total.fixed_buffer_sqes += s.fixed_buffer_sqes;
    total.resubmissions += s.resubmissions;
    total.submit_calls += s.submit_calls;
    total.vectored_sqes += s.vectored_sqes;
    total.submit_batches += s.submit_batches;
    total.reap_passes += s.reap_passes;
    total.cqes_reaped += s.cqes_reaped;
  }
  return total;
}

}  // namespace flatcake
