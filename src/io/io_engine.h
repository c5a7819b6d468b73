// IoEngine: the one narrow interface through which every data read and write of the store goes.
//
// The SSD file pool registers its file descriptors once; afterwards callers name files by their
// index in that table. Implementations:
//   - PosixIoEngine    (io/posix_io_engine.h): pread/pwrite on the calling thread; simplest.
//   - UringIoEngine    (io/uring_io_engine.h): W workers, each with its own io_uring ring,
//                      registered files, batched submission, bulk reaping.
//   - PreadvIoEngine   (io/preadv_io_engine.h): a thread pool issuing preadv/pwritev; the
//                      fallback where io_uring is unavailable.
//   - FaultInjectionIoEngine (io/fault_injection_io_engine.h): wraps another engine and injects
//                      EIO, ENOSPC, short and torn transfers, for tests.
//
// Contract for every implementation:
//  - Submit() never blocks on I/O completion (it may block briefly for queue space).
//  - For every submitted op, sink->OnIoComplete(tag, status) is called exactly once, from any
//    thread (possibly inside Submit), after the whole length was transferred or with an error.
//    Short transfers are resubmitted for the remainder; a transfer of 0 bytes before the end of
//    the requested range is reported as an IOError ("unexpected end of file").
//  - Files opened O_DIRECT need 4 KiB aligned offset, length and buffer; the engine does not
//    check this (the store guarantees it), the kernel returns EINVAL otherwise. For a vectored op
//    (IoOp::iov set) that holds for every iovec's base and length.
//  - A vectored op moves len bytes from/to its iovec list in order, as one preadv/pwritev
//    (IORING_OP_READV/WRITEV) where possible; lists longer than kMaxIoVecs, or transfers cut short,
//    continue from the first byte not yet moved, like any short transfer. An iovec list whose
//    lengths do not add up to len fails the op with InvalidArgument.
//  - Thread safety: Submit may be called concurrently from many threads.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "flatcake/options.h"
#include "flatcake/status.h"

namespace flatcake {

enum class IoOpcode : uint8_t { kRead, kWrite };

// Most iovecs one system call or SQE takes (Linux's IOV_MAX / UIO_MAXIOV).
inline constexpr uint32_t kMaxIoVecs = 1024;

struct IoOp {
  IoOpcode opcode = IoOpcode::kRead;
  uint32_t file = 0;    // index into the registered file table
  uint64_t offset = 0;  // byte offset in the file
  void* buf = nullptr;  // source (write) or destination (read); for a vectored op, iov[0]'s base
  uint64_t len = 0;     // bytes; for a vectored op, the sum of the iovec lengths
  uint64_t tag = 0;     // caller cookie passed back to the sink
  // Optional scatter/gather list: when set, the op transfers [offset, offset + len) from/to these
  // buffers in order instead of `buf`. The array is owned by the caller and must stay valid and
  // unchanged until the op completes (engines may hand it to the kernel as is).
  const iovec* iov = nullptr;
  uint32_t iovcnt = 0;

  bool vectored() const { return iov != nullptr; }
};

class IoCompletionSink {
 public:
  virtual ~IoCompletionSink() = default;
  virtual void OnIoComplete(uint64_t tag, const Status& status) = 0;
};

// A memory region (e.g. a restore staging window) that ops' buffers may lie in.
struct IoBufferRegion {
  void* base = nullptr;
  uint64_t len = 0;
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  // Registers the file table (index -> fd). Called once, before any Submit. Fds stay owned by the
  // caller and must outlive the engine.
  virtual Status RegisterFiles(std::span<const int> fds) = 0;
  virtual void Submit(std::span<const IoOp> ops, IoCompletionSink* sink) = 0;
  virtual std::string_view name() const = 0;

  // Optional: announces long-lived buffers (staging windows) so an engine that can pin them once
  // does so (io_uring fixed buffers) and uses the cheaper fixed-buffer ops for any op whose buffer
  // lies inside one. Regions accumulate across calls. Engines without such a facility return
  // Unsupported (the default); callers treat any failure as "not registered" and carry on.
  // REQUIRES: no op in flight; not called from a completion callback.
  virtual Status RegisterBuffers(std::span<const IoBufferRegion> /*regions*/) {
    return Status::Unsupported("this I/O engine has no registered buffers");
  }
  // Forgets regions previously registered with these bases; must be called before the memory is
  // freed, since a pinned region would otherwise alias whatever is mapped there next.
  // REQUIRES: no op in flight in those regions; not called from a completion callback.
  virtual void UnregisterBuffers(std::span<const IoBufferRegion> /*regions*/) {}
};

// Error statuses every engine produces, so messages read the same whatever the engine:
// "<read|write> file F offset O (len L): <cause>", where O is where the failing transfer began.
Status IoErrnoStatus(const IoOp& op, uint64_t done, int err);
Status IoEofStatus(const IoOp& op, uint64_t done);          // 0 bytes before the end: IOError
Status IoBadFileStatus(const IoOp& op, size_t file_count);  // file index not registered
// OK for a plain op; for a vectored op, InvalidArgument unless its iovec lengths sum to len.
Status CheckIoVecs(const IoOp& op);

// The part of vectored op `op` that starts `done` bytes in: writes at most `max_out` iovecs
// covering at most `max_bytes` bytes into `out` and returns how many (0 when nothing is left).
// Zero-length entries are dropped. Engines use it to continue short transfers mid-list.
uint32_t IoVecRemainder(const IoOp& op, uint64_t done, uint64_t max_bytes, iovec* out,
                        uint32_t max_out);

// Submits `ops` and waits for all of them. Returns OK or the first error seen (with the file and
// offset in its message).
Status ExecuteSync(IoEngine& engine, std::span<const IoOp> ops);
// Like ExecuteSync, but with at most `max_inflight_bytes` of submitted, uncompleted ops: ops go
// out in order, each as soon as the ones in flight leave room for it (one larger than the budget
// goes out alone), submitted by whichever thread completed the op that made the room. After the
// first error nothing more is submitted; the ops in flight are waited for and the error returned.
// The ops' tags are not used (they are passed to the engine replaced by the op's index).
Status ExecuteSyncBounded(IoEngine& engine, std::span<const IoOp> ops, uint64_t max_inflight_bytes);

// IoEngineKind, IoEngineKindName and ParseIoEngineKind are in flatcake/options.h (the store's
// io_engine option).
struct IoEngineOptions {
  IoEngineKind kind = IoEngineKind::kAuto;
  uint32_t workers = 2;       // worker threads (uring rings or preadv threads)
  uint32_t queue_depth = 64;  // per worker
};

// Creates an engine. kAuto tries io_uring first and falls back to the preadv pool when ring setup
// fails or the build has no io_uring (the fallback is recorded in *note, when given). kUring in
// such a build fails with Unsupported.
Result<std::unique_ptr<IoEngine>> MakeIoEngine(const IoEngineOptions& options,
                                               std::string* note = nullptr);

}  // namespace flatcake
