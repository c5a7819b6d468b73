#include "io/io_engine.h"

#include <condition_variable>
#include <mutex>
#include <string>

#include "io/posix_io_engine.h"
#include "io/preadv_io_engine.h"
#include "io/uring_io_engine.h"

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
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok() && first_error_.ok()) first_error_ = status;
    if (--remaining_ == 0) cv_.notify_all();
  }
  Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return remaining_ == 0; });
    return first_error_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t remaining_;
  Status first_error_;
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

Status ExecuteSync(IoEngine& engine, std::span<const IoOp> ops) {
  if (ops.empty()) return Status::OK();
  SyncSink sink(ops.size());
  engine.Submit(ops, &sink);
  return sink.Wait();
}

std::string_view IoEngineKindName(IoEngineKind kind) {
  switch (kind) {
    case IoEngineKind::kAuto: return "auto";
    case IoEngineKind::kUring: return "uring";
    case IoEngineKind::kPreadv: return "preadv";
    case IoEngineKind::kPosix: return "posix";
  }
  return "unknown";
}

Result<IoEngineKind> ParseIoEngineKind(std::string_view text) {
  for (IoEngineKind k :
       {IoEngineKind::kAuto, IoEngineKind::kUring, IoEngineKind::kPreadv, IoEngineKind::kPosix}) {
    if (text == IoEngineKindName(k)) return k;
  }
  return Status::InvalidArgument("unknown I/O engine '" + std::string(text) +
                                 "' (expected auto, uring, preadv or posix)");
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
        *note = "io_uring unavailable (" + uring.status().ToString() +
                "); using the preadv thread pool";
      }
      return std::unique_ptr<IoEngine>(
          std::make_unique<PreadvIoEngine>(PreadvIoEngine::ThreadsFor(options)));
    }
  }
  return Status::InvalidArgument("unknown I/O engine kind");
}

}  // namespace flatcake
