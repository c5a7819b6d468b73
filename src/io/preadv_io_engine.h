// PreadvIoEngine: a pool of threads issuing blocking preadv/pwritev; the fallback where io_uring
// is unavailable. Each thread has one system call in flight, so the pool's device queue depth is
// its thread count. A thread that dequeues an op also takes the queued ops that continue it in the
// same file (same direction, contiguous offsets, small total) and moves them with one vectored
// call, which is what preadv buys over pread. A vectored op (IoOp::iov) is moved with
// preadv/pwritev over its own iovec list and never gathered with others.
//
// Thread safety: Submit may be called concurrently from any thread (including completion
// callbacks); the queue is guarded by mu_. The file table is set once by RegisterFiles before any
// Submit and read-only afterwards. The destructor finishes every queued op before returning.
#pragma once

#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "io/io_engine.h"
#include "util/thread_annotations.h"

namespace flatcake {

class PreadvIoEngine : public IoEngine {
 public:
  // `max_chunk`: cap on bytes per system call (0 = none); tests use it to force short transfers.
  explicit PreadvIoEngine(uint32_t threads, uint64_t max_chunk = 0);
  ~PreadvIoEngine() override;
  PreadvIoEngine(const PreadvIoEngine&) = delete;
  PreadvIoEngine& operator=(const PreadvIoEngine&) = delete;

  // Threads giving a device queue depth comparable to `options` (workers x queue_depth, capped:
  // beyond ~8 blocking calls per worker the pool only adds context switches).
  static uint32_t ThreadsFor(const IoEngineOptions& options);

  Status RegisterFiles(std::span<const int> fds) override;
  void Submit(std::span<const IoOp> ops, IoCompletionSink* sink) override;
  std::string_view name() const override { return "preadv"; }

 private:
  struct Pending {
    IoOp op;
    IoCompletionSink* sink;
  };
  void Run();
  // Moves `batch` (contiguous ops of one file and direction) with vectored calls and completes
  // each op.
  void Execute(std::vector<Pending>& batch);

  const uint64_t max_chunk_;
  std::vector<int> fds_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Pending> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace flatcake
