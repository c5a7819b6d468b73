#include "io/io_engine.h"

#include <algorithm>
#include <string>

#include "io/posix_io_engine.h"
#include "io/preadv_io_engine.h"
#include "io/uring_io_engine.h"
#include "util/thread_annotations.h"

namespace flatcake {
namespace {

std::string Describe(const IoOp& op, uint64_t done) {
  std::string s = op.opcode == IoOpcode::kRead ? "read" : "write";
  s += " file " + std::to_string(op.file) + " offset " + std::to_string(op.offset + done) +
       " (len " + std::to_string(op.len - done) + ")";
  return s;
}

// Collects completions of one ExecuteSync call.
class SyncSink : public IoCompletionSink {
 public:
  explicit SyncSink(size_t expected) : remaining_(expected) {}
  void OnIoComplete(uint64_t /*tag*/, const Status& status) override {
    MutexLock lock(mu_);
    if (!status.ok() && first_error_.ok()) first_error_ = status;
    if (--remaining_ == 0) cv_.NotifyAll();
  }
  Status Wait() {
    MutexLock lock(mu_);
    while (remaining_ != 0) cv_.Wait(mu_);
    return first_error_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  size_t remaining_ GUARDED_BY(mu_);
  Status first_error_ GUARDED_BY(mu_);
};

// Runs one ExecuteSyncBounded call: a sliding window of in-flight bytes over `ops`.
class BoundedRun : public IoCompletionSink {
 public:
  BoundedRun(IoEngine& engine, std::span<const IoOp> ops, uint64_t budget)
      : engine_(engine), ops_(ops), budget_(budget) {}

  Status Run() {
    Pump();
    MutexLock lock(mu_);
    while (!(inflight_ops_ == 0 && callbacks_ == 0 && !pumping_ &&
             (next_ == ops_.size() || !first_error_.ok()))) {
      cv_.Wait(mu_);
    }
    return first_error_;
  }

  void OnIoComplete(uint64_t tag, const Status& status) override {
    {
      MutexLock lock(mu_);
      if (!status.ok() && first_error_.ok()) first_error_ = status;
      inflight_bytes_ -= ops_[tag].len;
      --inflight_ops_;
      ++callbacks_;  // Run may not return (and free this) while the pump below runs
    }
    Pump();
    MutexLock lock(mu_);
    --callbacks_;
    cv_.NotifyAll();
  }

 private:
  // Submits the ops that fit. One thread at a time does it, outside the lock (an engine may
  // complete ops inside Submit, whose completions then find pumping_ set and leave the room
  // they freed to this loop's next pass).
  void Pump() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (pumping_) return;
    pumping_ = true;
    std::vector<IoOp> batch;
    for (;;) {
      batch.clear();
      while (first_error_.ok() && next_ < ops_.size() &&
             (inflight_ops_ == 0 || inflight_bytes_ + ops_[next_].len <= budget_)) {
        batch.push_back(ops_[next_]);
        batch.back().tag = next_++;
        inflight_bytes_ += batch.back().len;
        ++inflight_ops_;
      }
      if (batch.empty()) break;
      lock.Unlock();
      engine_.Submit(batch, this);
      lock.Lock();
    }
    pumping_ = false;
  }

  IoEngine& engine_;
  const std::span<const IoOp> ops_;
  const uint64_t budget_;
  Mutex mu_;
  CondVar cv_;
  size_t next_ GUARDED_BY(mu_) = 0;  // first op not yet submitted
  uint64_t inflight_bytes_ GUARDED_BY(mu_) = 0;
  size_t inflight_ops_ GUARDED_BY(mu_) = 0;
  bool pumping_ GUARDED_BY(mu_) = false;
  size_t callbacks_ GUARDED_BY(mu_) = 0;  // OnIoComplete calls not yet finished
  Status first_error_ GUARDED_BY(mu_);
};

}  // namespace

Status IoErrnoStatus(const IoOp& op, uint64_t done, int err) {
  return Status::FromErrno(err, Describe(op, done));
}

Status IoEofStatus(const IoOp& op, uint64_t done) {
  return Status::IOError(Describe(op, done) + ": unexpected end of file");
}

Status IoBadFileStatus(const IoOp& op, size_t file_count) {
  return Status::InvalidArgument(Describe(op, 0) + ": file index not registered (" +
                                 std::to_string(file_count) + " files)");
}

Status CheckIoVecs(const IoOp& op) {
  if (!op.vectored()) return Status::OK();
  uint64_t sum = 0;
  for (uint32_t i = 0; i < op.iovcnt; ++i) sum += op.iov[i].iov_len;
  if (sum == op.len && (op.iovcnt > 0 || op.len == 0)) return Status::OK();
  return Status::InvalidArgument(Describe(op, 0) + ": iovec lengths sum to " + std::to_string(sum) +
                                 " over " + std::to_string(op.iovcnt) + " entries");
}

uint32_t IoVecRemainder(const IoOp& op, uint64_t done, uint64_t max_bytes, iovec* out,
                        uint32_t max_out) {
  uint32_t i = 0;
  uint64_t skip = done;
  while (i < op.iovcnt && skip >= op.iov[i].iov_len) {
    skip -= op.iov[i].iov_len;
    ++i;
  }
  uint32_t n = 0;
  uint64_t total = 0;
  for (; i < op.iovcnt && n < max_out && total < max_bytes; ++i) {
    const uint64_t avail = op.iov[i].iov_len - skip;
    if (avail > 0) {
      const uint64_t take = std::min(avail, max_bytes - total);
      out[n++] = iovec{static_cast<uint8_t*>(op.iov[i].iov_base) + skip, take};
      total += take;
    }
    skip = 0;
  }
  return n;
}

Status ExecuteSync(IoEngine& engine, std::span<const IoOp> ops) {
  if (ops.empty()) return Status::OK();
  SyncSink sink(ops.size());
  engine.Submit(ops, &sink);
  return sink.Wait();
}

Status ExecuteSyncBounded(IoEngine& engine, std::span<const IoOp> ops,
                          uint64_t max_inflight_bytes) {
  if (ops.empty()) return Status::OK();
  BoundedRun run(engine, ops, max_inflight_bytes);
  return run.Run();
}

Result<std::unique_ptr<IoEngine>> MakeIoEngine(const IoEngineOptions& options, std::string* note) {
  if (options.workers == 0 || options.queue_depth == 0) {
    return Status::InvalidArgument("I/O engine needs at least one worker and queue depth >= 1");
  }
  switch (options.kind) {
    case IoEngineKind::kPosix: return std::unique_ptr<IoEngine>(std::make_unique<PosixIoEngine>());
    case IoEngineKind::kPreadv:
      return std::unique_ptr<IoEngine>(
          std::make_unique<PreadvIoEngine>(PreadvIoEngine::ThreadsFor(options)));
    case IoEngineKind::kUring: {
      FC_ASSIGN_OR_RETURN(auto uring, UringIoEngine::Create(UringIoEngine::Options{
                                          options.workers, options.queue_depth}));
      return std::unique_ptr<IoEngine>(std::move(uring));
    }
    case IoEngineKind::kAuto: {
      auto uring =
          UringIoEngine::Create(UringIoEngine::Options{options.workers, options.queue_depth});
      if (uring.ok()) return std::unique_ptr<IoEngine>(std::move(uring).value());
      if (note != nullptr) {
        *note = UringIoEngine::CompiledIn()
                    ? "io_uring unavailable (" + uring.status().ToString() +
                          "); using the preadv thread pool"
                    : "this build has no io_uring (configured without liburing or with "
                      "FLATCAKE_WITH_URING=OFF); using the preadv thread pool";
      }
      return std::unique_ptr<IoEngine>(
          std::make_unique<PreadvIoEngine>(PreadvIoEngine::ThreadsFor(options)));
    }
  }
  return Status::InvalidArgument("unknown I/O engine kind");
}

}  // namespace flatcake
