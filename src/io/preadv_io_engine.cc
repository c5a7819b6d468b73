#include "io/preadv_io_engine.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "io/posix_io_engine.h"

namespace flatcake {
namespace {

// Ops continuing one another are gathered into one call only while small: large ops already
// amortise the system call, and gathering them would serialise what other threads could overlap.
constexpr uint64_t kMaxGatherBytes = 1ull << 20;
constexpr size_t kMaxGatherOps = 64;

}  // namespace

PreadvIoEngine::PreadvIoEngine(uint32_t threads, uint64_t max_chunk) : max_chunk_(max_chunk) {
  threads = std::max<uint32_t>(threads, 1);
  threads_.reserve(threads);
  for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

PreadvIoEngine::~PreadvIoEngine() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : threads_) t.join();
}

uint32_t PreadvIoEngine::ThreadsFor(const IoEngineOptions& options) {
  return std::max<uint32_t>(1, options.workers * std::min<uint32_t>(options.queue_depth, 8));
}

Status PreadvIoEngine::RegisterFiles(std::span<const int> fds) {
  fds_.assign(fds.begin(), fds.end());
  return Status::OK();
}

void PreadvIoEngine::Submit(std::span<const IoOp> ops, IoCompletionSink* sink) {
  if (ops.empty()) return;
  {
    MutexLock lock(mu_);
    for (const IoOp& op : ops) queue_.push_back(Pending{op, sink});
  }
  if (ops.size() == 1) {
    cv_.NotifyOne();
  } else {
    cv_.NotifyAll();
  }
}

void PreadvIoEngine::Run() {
  std::vector<Pending> batch;
  for (;;) {
    batch.clear();
    {
      MutexLock lock(mu_);
      while (!stop_ && queue_.empty()) cv_.Wait(mu_);
      if (queue_.empty()) return;  // stop_ and drained
      batch.push_back(queue_.front());
      queue_.pop_front();
      uint64_t bytes = batch.back().op.len;
      while (!queue_.empty() && batch.size() < kMaxGatherOps) {
        const IoOp& prev = batch.back().op;
        const IoOp& next = queue_.front().op;
        // A vectored op is already one gathered call of its own.
        if (prev.len == 0 || next.len == 0 || prev.vectored() || next.vectored() ||
            next.opcode != prev.opcode || next.file != prev.file ||
            next.offset != prev.offset + prev.len || bytes + next.len > kMaxGatherBytes) {
          break;
        }
        bytes += next.len;
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    Execute(batch);
  }
}

void PreadvIoEngine::Execute(std::vector<Pending>& batch) {
  const IoOp& first = batch.front().op;
  if (first.file >= fds_.size() || fds_[first.file] < 0) {
    for (auto& p : batch) p.sink->OnIoComplete(p.op.tag, IoBadFileStatus(p.op, fds_.size()));
    return;
  }
  const int fd = fds_[first.file];
  if (batch.size() == 1 || max_chunk_ != 0) {
    // One op, or a test forcing short transfers: the plain loop covers it.
    for (auto& p : batch) p.sink->OnIoComplete(p.op.tag, TransferSync(fd, p.op, max_chunk_));
    return;
  }
  std::vector<iovec> iov(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) iov[i] = iovec{batch[i].op.buf, batch[i].op.len};
  size_t idx = 0;      // first op not yet fully transferred
  uint64_t in_op = 0;  // bytes of batch[idx] already transferred
  uint64_t offset = first.offset;
  Status error;
  while (idx < batch.size()) {
    iov[idx].iov_base = static_cast<uint8_t*>(batch[idx].op.buf) + in_op;
    iov[idx].iov_len = batch[idx].op.len - in_op;
    const int cnt = static_cast<int>(std::min<size_t>(batch.size() - idx, IOV_MAX));
    const ssize_t r = first.opcode == IoOpcode::kRead
                          ? ::preadv(fd, &iov[idx], cnt, static_cast<off_t>(offset))
                          : ::pwritev(fd, &iov[idx], cnt, static_cast<off_t>(offset));
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) {
      const IoOp& op = batch[idx].op;
      if (r < 0) {
        error = IoErrnoStatus(op, in_op, errno);
      } else {
        error = op.opcode == IoOpcode::kRead ? IoEofStatus(op, in_op)
                                             : IoErrnoStatus(op, in_op, ENOSPC);
      }
      break;
    }
    offset += static_cast<uint64_t>(r);
    uint64_t left = static_cast<uint64_t>(r);
    while (left > 0) {
      const uint64_t rest = batch[idx].op.len - in_op;
      if (left >= rest) {
        left -= rest;
        batch[idx].sink->OnIoComplete(batch[idx].op.tag, Status::OK());
        ++idx;
        in_op = 0;
      } else {
        in_op += left;
        left = 0;
      }
    }
  }
  // The op that failed carries the error; the ones after it were never attempted and fail with
  // it too, rather than being retried behind an error the caller will act on anyway.
  for (; idx < batch.size(); ++idx) batch[idx].sink->OnIoComplete(batch[idx].op.tag, error);
}

}  // namespace flatcake
