// FaultInjectionIoEngine: wraps another IoEngine and makes chosen ops fail, for tests of every
// error path above the engine (store, restore reader, scheduler).
//
// A FaultSpec picks ops by direction, optional file index and byte range (an op is picked when it
// overlaps the range), then every Nth picked op (every_nth = 1: all of them), up to max_faults.
// What happens to a picked op:
//   - kError: nothing is transferred; the op fails with `err` (EIO, ENOSPC, ...).
//   - kShort: the first `prefix_bytes` (default: half, rounded down to 4 KiB) are really
//             transferred through the wrapped engine, then a read reports "unexpected end of file"
//             (the remainder came back as 0 bytes) and a write reports `err` (a torn write).
// Error messages carry the file index and offset, like the real engines' messages. Vectored ops
// (IoOp::iov) are picked and faulted the same way: a short one moves its first prefix_bytes into
// the iovecs they belong to, and nothing past them.
//
// The write log, for power-loss tests: while it is on, every write that reaches the wrapped engine
// (for a torn one, the part that does) is recorded before it is passed on, with the bytes it
// overwrites, read from the registered file first. ForgetWrites drops a file's entries once the
// test learns that file was synced, so the log holds exactly the writes a power loss may still
// drop or tear.
//
// Thread safety: Submit may be called concurrently; specs, counters and the log are guarded by
// mu_. Spec changes apply to ops submitted afterwards.
#pragma once

#include <cerrno>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "io/io_engine.h"
#include "util/thread_annotations.h"

namespace flatcake {

struct FaultSpec {
  enum class Kind : uint8_t { kError, kShort };
  Kind kind = Kind::kError;
  int err = EIO;
  uint64_t every_nth = 1;
  std::optional<uint32_t> file;  // only ops on this file index
  uint64_t range_begin = 0;      // only ops overlapping [range_begin, range_end)
  uint64_t range_end = std::numeric_limits<uint64_t>::max();
  uint64_t max_faults = std::numeric_limits<uint64_t>::max();
  std::optional<uint64_t> prefix_bytes;  // kShort: bytes transferred before the fault
};

// A write the log holds.
struct LoggedWrite {
  uint32_t file = 0;
  uint64_t offset = 0;
  std::vector<uint8_t> before;  // the bytes it overwrote; empty when they could not be read
  std::vector<uint8_t> after;   // the bytes it wrote
};

class FaultInjectionIoEngine : public IoEngine {
 public:
  struct Counters {
    uint64_t read_errors = 0;   // kError faults on reads
    uint64_t write_errors = 0;  // kError faults on writes (EIO, ENOSPC, ...)
    uint64_t short_reads = 0;
    uint64_t torn_writes = 0;
    uint64_t total() const { return read_errors + write_errors + short_reads + torn_writes; }
  };

  explicit FaultInjectionIoEngine(std::unique_ptr<IoEngine> base)
      : owned_(std::move(base)), base_(owned_.get()) {}
  // Wraps an engine owned elsewhere; it must outlive this one.
  explicit FaultInjectionIoEngine(IoEngine& base) : base_(&base) {}

  // Shorthands: fail every Nth read / write with `err`.
  void SetReadError(int err = EIO, uint64_t every_nth = 1);
  void SetWriteError(int err = EIO, uint64_t every_nth = 1);
  void SetReadFault(const FaultSpec& spec);
  void SetWriteFault(const FaultSpec& spec);
  void ClearReads();
  void ClearWrites();
  void Clear();
  Counters counters() const;

  // Starts logging writes (StopWriteLog stops and drops the log).
  void StartWriteLog();
  void StopWriteLog();
  // Drops the logged writes of file `file` (nullopt: of every file): they are durable now.
  void ForgetWrites(std::optional<uint32_t> file = std::nullopt);
  // The writes logged and not forgotten, oldest first.
  std::vector<LoggedWrite> UnsyncedWrites() const;

  Status RegisterFiles(std::span<const int> fds) override;
  void Submit(std::span<const IoOp> ops, IoCompletionSink* sink) override;
  std::string_view name() const override { return base_->name(); }
  Status RegisterBuffers(std::span<const IoBufferRegion> regions) override {
    return base_->RegisterBuffers(regions);
  }
  void UnregisterBuffers(std::span<const IoBufferRegion> regions) override {
    base_->UnregisterBuffers(regions);
  }
  IoEngine& base() { return *base_; }

 private:
  struct Rule {
    FaultSpec spec;
    uint64_t seen = 0;  // ops matching the filter so far
    uint64_t injected = 0;
  };
  // Returns the spec to apply to `op`, if it is picked; advances the rule's counters.
  std::optional<FaultSpec> Pick(const IoOp& op);
  // Logs write `op` (its first op.len bytes), if the log is on.
  void LogWrite(const IoOp& op);

  std::unique_ptr<IoEngine> owned_;
  IoEngine* base_;
  mutable Mutex mu_;
  std::optional<Rule> read_rule_ GUARDED_BY(mu_);
  std::optional<Rule> write_rule_ GUARDED_BY(mu_);
  Counters counters_ GUARDED_BY(mu_);
  std::vector<int> fds_ GUARDED_BY(mu_);
  bool logging_ GUARDED_BY(mu_) = false;
  std::vector<LoggedWrite> log_ GUARDED_BY(mu_);
};

}  // namespace flatcake
