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
// Random faults, for the fault campaign (`flatcake torture`, src/eval/torture.h): every op a
// FaultSpec does not pick may instead get one fault of a FaultKind with the probabilities of
// SetRandomFaults. The choice is a hash of (seed, epoch, the op's direction, file, offset and
// length, and how often that same op was seen in the epoch), not a draw from a shared generator,
// so it does not depend on the order in which concurrent threads submit: a caller that runs the
// same operations under the same seed and epochs gets the same faults. What each kind does:
//   - kReadEio, kWriteEio, kWriteEnospc: nothing is transferred; the op fails with that errno.
//   - kShortRead, kShortWrite: a 4 KiB-aligned prefix (possibly empty) is transferred, then the
//     op fails: "unexpected end of file" for a read, ENOSPC or EIO for a write.
//   - kTornWrite: a random subset of the op's 4 KiB sectors is written, one sector of garbage
//     lands in place of the data, the rest keep their old bytes; the op reports EIO.
//   - kTornWriteAcked: the same damage, but the op reports success, like a device that tears a
//     write it acknowledged (a vectored op is torn as a short write instead, reported EIO).
//   - kDelayedRead, kDelayedWrite: the op is held back and passed on unchanged, from a thread of
//     this engine, a few hundred microseconds later; ops submitted after it may complete first.
//
// Thread safety: Submit may be called concurrently; specs, counters and the log are guarded by
// mu_. Spec changes apply to ops submitted afterwards. The destructor passes on every op still
// held back and joins the thread that delays them.
#pragma once

#include <array>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <tuple>
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

// The faults SetRandomFaults injects (the class comment says what each does).
enum class FaultKind : uint8_t {
  kReadEio,
  kShortRead,
  kDelayedRead,
  kWriteEio,
  kWriteEnospc,
  kShortWrite,
  kTornWrite,
  kTornWriteAcked,
  kDelayedWrite,
};
inline constexpr size_t kNumFaultKinds = 9;
// "read_eio", "short_read", "delayed_read", "write_eio", "write_enospc", "short_write",
// "torn_write", "torn_write_acked", "delayed_write".
std::string_view FaultKindName(FaultKind kind);
// Faults that leave the op's outcome as it would have been: an op that got one still succeeds.
inline bool FaultIsTransparent(FaultKind kind) {
  return kind == FaultKind::kDelayedRead || kind == FaultKind::kDelayedWrite;
}
// Faults whose op reports success although the bytes on the device are not what it wrote.
inline bool FaultDamagesSilently(FaultKind kind) { return kind == FaultKind::kTornWriteAcked; }

struct RandomFaults {
  uint64_t seed = 0;
  // Probability per op of each kind (indexed by FaultKind); read kinds apply to reads, the rest
  // to writes. Each direction's probabilities must add up to at most 1.
  std::array<double, kNumFaultKinds> rate{};
  uint32_t max_delay_us = 400;  // delayed ops wait 1 .. max_delay_us microseconds
};

// One fault SetRandomFaults injected.
struct InjectedFault {
  uint64_t epoch = 0;
  FaultKind kind = FaultKind::kReadEio;
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t len = 0;
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
  ~FaultInjectionIoEngine() override;

  // Shorthands: fail every Nth read / write with `err`.
  void SetReadError(int err = EIO, uint64_t every_nth = 1);
  void SetWriteError(int err = EIO, uint64_t every_nth = 1);
  void SetReadFault(const FaultSpec& spec);
  void SetWriteFault(const FaultSpec& spec);
  void ClearReads();
  void ClearWrites();
  void Clear();
  Counters counters() const;

  // Random faults from now on (rates all 0: none); ClearRandomFaults stops them.
  void SetRandomFaults(const RandomFaults& faults);
  void ClearRandomFaults();
  // Starts epoch `epoch` of the random faults (a caller's step): the counts of ops seen again
  // start over.
  void SetEpoch(uint64_t epoch);
  // The random faults injected since the last call, in the order they were chosen.
  std::vector<InjectedFault> TakeInjected();
  // Random faults injected so far, by kind.
  std::array<uint64_t, kNumFaultKinds> injected_by_kind() const;
  // Waits until no delayed op is held back (each was passed on to the wrapped engine).
  void DrainDelayed();

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
  // Transfers the first `prefix` bytes of `op` (at most len - 1), then fails it: a read with
  // "unexpected end of file", a write with `err`.
  void SubmitPrefix(const IoOp& op, IoCompletionSink* sink, uint64_t prefix, int err);
  // The random fault for `op`, if it gets one; records it.
  // Returns its kind and a random number for the fault's details (prefix, sectors, delay).
  std::optional<std::pair<FaultKind, uint64_t>> PickRandom(const IoOp& op) EXCLUDES(mu_);
  // Carries out fault `kind` on `op`, reporting to `sink`.
  void Inject(FaultKind kind, const IoOp& op, IoCompletionSink* sink, uint64_t roll);
  // Transfers the 4 KiB sectors of write `op` that `roll` picks, garbage in one of them, then
  // reports `result` (OK: an acknowledged tear).
  void Tear(const IoOp& op, IoCompletionSink* sink, uint64_t roll, Status result);
  void Hold(const IoOp& op, IoCompletionSink* sink, uint64_t delay_us) EXCLUDES(mu_);
  void DelayLoop() EXCLUDES(mu_);

  struct HeldOp {
    IoOp op;
    IoCompletionSink* sink;
  };
  // (epoch-relative identity of an op: direction, file, offset, length)
  using OpIdentity = std::tuple<uint8_t, uint32_t, uint64_t, uint64_t>;

  std::unique_ptr<IoEngine> owned_;
  IoEngine* base_;
  mutable Mutex mu_;
  std::optional<Rule> read_rule_ GUARDED_BY(mu_);
  std::optional<Rule> write_rule_ GUARDED_BY(mu_);
  Counters counters_ GUARDED_BY(mu_);
  std::vector<int> fds_ GUARDED_BY(mu_);
  bool logging_ GUARDED_BY(mu_) = false;
  std::vector<LoggedWrite> log_ GUARDED_BY(mu_);

  std::optional<RandomFaults> random_ GUARDED_BY(mu_);
  uint64_t epoch_ GUARDED_BY(mu_) = 0;
  std::map<OpIdentity, uint64_t> seen_ GUARDED_BY(mu_);  // this epoch
  std::vector<InjectedFault> injected_ GUARDED_BY(mu_);
  std::array<uint64_t, kNumFaultKinds> by_kind_ GUARDED_BY(mu_){};
  // Delayed ops by release time (steady-clock ns) and arrival; the thread that releases them.
  std::multimap<std::pair<int64_t, uint64_t>, HeldOp> held_ GUARDED_BY(mu_);
  uint64_t held_seq_ GUARDED_BY(mu_) = 0;
  uint64_t releasing_ GUARDED_BY(mu_) = 0;  // taken out of held_, not yet passed on
  bool stop_delay_ GUARDED_BY(mu_) = false;
  CondVar delay_cv_;
  std::thread delay_thread_;
};

}  // namespace flatcake
