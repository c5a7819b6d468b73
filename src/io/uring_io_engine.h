// UringIoEngine: W worker threads, each owning one io_uring ring. Ops are striped round-robin over
// the workers. A worker takes as many queued ops as its queue depth allows, prepares one SQE each,
// submits them with one system call, then reaps every available completion at once
// (io_uring_for_each_cqe + io_uring_cq_advance). A short transfer is re-queued for the remainder;
// 0 bytes before the end is an error. Files are registered with every ring (fixed files) and, when
// a caller announces long-lived buffers (RegisterBuffers), those are registered too and ops whose
// buffer lies inside one use READ_FIXED / WRITE_FIXED, which skips per-op page pinning. Vectored
// ops (IoOp::iov) use READV / WRITEV, continued mid-list after a short transfer.
//
// Thread safety: Submit may be called concurrently from any thread, including from completion
// callbacks. RegisterFiles / RegisterBuffers / UnregisterBuffers run on every worker's own thread
// (so rings may be single-issuer) and block until done; they must not be called from a completion
// callback, nor while ops are in flight. Sinks are called on worker threads, never under a lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "io/io_engine.h"
#include "util/thread_annotations.h"

namespace flatcake {

class UringIoEngine : public IoEngine {
 public:
  struct Options {
    uint32_t workers = 2;
    uint32_t queue_depth = 64;  // SQEs in flight per worker
    // Largest transfer one SQE asks for (0 = 1 GiB). Larger ops proceed as short transfers; tests
    // set it small to exercise resubmission.
    uint64_t max_sqe_bytes = 0;
  };
  struct Stats {
    uint64_t ops = 0;   // ops completed
    uint64_t sqes = 0;  // SQEs prepared, including resubmissions
    uint64_t fixed_buffer_sqes = 0;
    uint64_t resubmissions = 0;  // short transfers continued
    // Round trips of the worker loop into the kernel (submit, or submit and wait), including the
    // ones that only wait for completions, and the submissions made between two completions of
    // one reaping pass for ops that a completion queued.
    uint64_t submit_calls = 0;
    uint64_t vectored_sqes = 0;  // READV / WRITEV SQEs, including resubmissions
    // Submissions that carried at least one SQE: with batching, a burst of ops taken together
    // costs one of these, not one per op.
    uint64_t submit_batches = 0;
    // Reaping passes that found at least one op completion, and the op completions they took
    // (the workers' own wake-up reads are not counted): cqes_reaped / reap_passes is the mean
    // completion batch.
    uint64_t reap_passes = 0;
    uint64_t cqes_reaped = 0;
  };

  // Sets up every worker's ring; fails (e.g. io_uring disabled or unsupported, or a queue depth
  // beyond what a ring can hold) without side effects, so callers can fall back to another
  // engine.
  // In a build without io_uring (FLATCAKE_WITH_URING) it always fails, with Unsupported.
  static Result<std::unique_ptr<UringIoEngine>> Create(const Options& options);
  // Whether this build has the engine at all (false: Create always fails).
  static bool CompiledIn();
  ~UringIoEngine() override;
  UringIoEngine(const UringIoEngine&) = delete;
  UringIoEngine& operator=(const UringIoEngine&) = delete;

  // Registering the table with the rings is an optimisation: when the kernel refuses, ops use the
  // plain descriptors and files_registered() says false.
  Status RegisterFiles(std::span<const int> fds) override;
  void Submit(std::span<const IoOp> ops, IoCompletionSink* sink) override;
  std::string_view name() const override { return "uring"; }
  // Fails (e.g. ENOMEM past RLIMIT_MEMLOCK) leaving the previously registered regions in place;
  // ops then simply use unregistered buffers.
  Status RegisterBuffers(std::span<const IoBufferRegion> regions) override;
  void UnregisterBuffers(std::span<const IoBufferRegion> regions) override;

  bool files_registered() const { return files_registered_.load(); }
  // Sums every worker's counters. Each counter has a single writer (its worker), so reading
  // while ops are in flight gives a slightly stale but never torn value.
  Stats stats() const;

 private:
  class Worker;
  UringIoEngine() = default;

  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<uint64_t> next_worker_{0};
  Mutex register_mu_;  // serialises RegisterFiles / RegisterBuffers / UnregisterBuffers
  std::atomic<bool> files_registered_{false};
};

}  // namespace flatcake
