// PosixIoEngine: pread/pwrite inline on the calling thread. The simplest engine: Submit performs
// every op before returning and calls the sink from inside Submit.
//
// Thread safety: Submit may be called concurrently once RegisterFiles has returned; the file table
// is immutable afterwards. Also hosts TransferSync, the blocking transfer loop shared with the
// preadv pool.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <vector>

#include "io/io_engine.h"

namespace flatcake {

// Performs one op on `fd` with pread/pwrite, looping on short transfers (and EINTR) until the
// whole length moved. Each system call moves at most `max_chunk` bytes (0 = no cap), which tests
// use to exercise the short-transfer path. 0 bytes before the end -> IoEofStatus. A vectored op
// moves with preadv/pwritev (at most kMaxIoVecs entries per call).
Status TransferSync(int fd, const IoOp& op, uint64_t max_chunk = 0);

class PosixIoEngine : public IoEngine {
 public:
  // `max_chunk`: cap on bytes per system call (0 = none); see TransferSync.
  explicit PosixIoEngine(uint64_t max_chunk = 0) : max_chunk_(max_chunk) {}

  Status RegisterFiles(std::span<const int> fds) override;
  void Submit(std::span<const IoOp> ops, IoCompletionSink* sink) override;
  std::string_view name() const override { return "posix"; }

 private:
  const uint64_t max_chunk_;
  std::vector<int> fds_;
};

}  // namespace flatcake
