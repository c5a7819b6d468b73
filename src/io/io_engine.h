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
//    check this (the store guarantees it), the kernel returns EINVAL otherwise.
//  - Thread safety: Submit may be called concurrently from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "flatcake/status.h"

namespace flatcake {

enum class IoOpcode : uint8_t { kRead, kWrite };

struct IoOp {
  IoOpcode opcode = IoOpcode::kRead;
  uint32_t file = 0;    // index into the registered file table
  uint64_t offset = 0;  // byte offset in the file
  void* buf = nullptr;  // source (write) or destination (read)
  uint64_t len = 0;     // bytes
  uint64_t tag = 0;     // caller cookie passed back to the sink
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
  virtual Status RegisterBuffers(std::span<const IoBufferRegion> regions) {
    return Status::Unsupported("this I/O engine has no registered buffers");
  }
  // Forgets regions previously registered with these bases; must be called before the memory is
  // freed, since a pinned region would otherwise alias whatever is mapped there next.
  // REQUIRES: no op in flight in those regions; not called from a completion callback.
  virtual void UnregisterBuffers(std::span<const IoBufferRegion> regions) {}
};

// Error statuses every engine produces, so messages read the same whatever the engine:
// "<read|write> file F offset O (len L): <cause>", where O is where the failing transfer began.
Status IoErrnoStatus(const IoOp& op, uint64_t done, int err);
Status IoEofStatus(const IoOp& op, uint64_t done);          // 0 bytes before the end: IOError
Status IoBadFileStatus(const IoOp& op, size_t file_count);  // file index not registered

// Submits `ops` and waits for all of them. Returns OK or the first error seen (with the file and
// offset in its message).
Status ExecuteSync(IoEngine& engine, std::span<const IoOp> ops);

enum class IoEngineKind { kAuto, kUring, kPreadv, kPosix };
std::string_view IoEngineKindName(IoEngineKind kind);
Result<IoEngineKind> ParseIoEngineKind(std::string_view text);

struct IoEngineOptions {
  IoEngineKind kind = IoEngineKind::kAuto;
  uint32_t workers = 2;       // worker threads (uring rings or preadv threads)
  uint32_t queue_depth = 64;  // per worker
};

// Creates an engine. kAuto tries io_uring first and falls back to the preadv pool when ring setup
// fails (the fallback is recorded in *note, when given).
Result<std::unique_ptr<IoEngine>> MakeIoEngine(const IoEngineOptions& options,
                                               std::string* note = nullptr);

}  // namespace flatcake
