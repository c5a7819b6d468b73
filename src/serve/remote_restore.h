// RemoteRestore: one restore by a client of the node daemon (serve/remote_store.h), and the
// RestoreHandle its caller holds on it.
//
// Life of a restore:
//   Start (the caller's thread): the PinRead goes out; Restore returns the handle at once.
//   The reply (the connection's reader thread) comes once FC-MAS has admitted the request: the
//     hits are pinned where it says. The data half is then ready, and runs on the first thread
//     to claim it: a caller waiting on the handle (Wait, WaitFor, WaitLayer), or else the
//     client's task thread, to which the reply posts it.
//   The data half (store/pinned_read.h): the DRAM hits are copied out of this process's mapping
//     of the arena, the SSD hits read through its own reader (layer by layer, on_layer in
//     order, on whichever thread lands a layer), every block verified.
//   Finish (the claiming thread, or the task thread after the SSD reads): the outcome, the Unpin
//     (which tells the daemon what was delivered), the connection let go, the handle done.
// A restore whose connection broke before it finished fails (IOError): the daemon released its
// pins with the connection, so what was read may be recycled bytes.
//
// Thread safety: every handle method from any thread. `mu_` guards the phase and the outcome;
// the fields above it are set before the phase leaves kPinning (under mu_) and read by the one
// thread that claimed the data half.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "flatcake/store.h"
#include "io/layered_restore.h"
#include "serve/daemon_connection.h"
#include "serve/task_thread.h"
#include "store/pinned_read.h"
#include "util/thread_annotations.h"

namespace flatcake::serve {

// A PinRead reply's locations of `num_keys` keys as pinned hits of this process's view of the
// media (`geo`: the pool files as this client opened them). InvalidArgument for a reply that does
// not fit the request.
Result<std::vector<PinnedHit>> PinnedHitsOf(const rpc::PinReadReply& reply, size_t num_keys,
                                            const KvLayout& layout, const SsdPoolGeometry& geo);
// The Unpin of pin `pin_id`, reporting `result` (its hits and bytes only when `delivered`).
rpc::Request UnpinRequest(uint64_t pin_id, bool delivered, const GetResult& result);

class RemoteRestore : public std::enable_shared_from_this<RemoteRestore> {
 public:
  // Sends the PinRead of `keys` over `conn` (held until the restore is done). `dst`'s pointer
  // table is copied; its memory must outlive the restore. `runner` outlives it too.
  // REQUIRES: dst validated for `layout` and keys.size() keys.
  static std::shared_ptr<RemoteRestore> Start(DaemonConnection::Use conn, TaskThread* runner,
                                              std::span<const Key> keys, const KvLayout& layout,
                                              const BlockBuffers& dst,
                                              const RestoreOptions& options, bool verify);

  Result<GetResult> Wait() EXCLUDES(mu_);
  bool WaitFor(std::chrono::nanoseconds timeout) EXCLUDES(mu_);
  Status WaitLayer(uint32_t layer) EXCLUDES(mu_);
  bool done() const EXCLUDES(mu_);
  void Cancel() EXCLUDES(mu_);

  RemoteRestore(DaemonConnection::Use conn, TaskThread* runner, const KvLayout& layout,
                const BlockBuffers& dst, size_t num_keys, const RestoreOptions& options,
                bool verify);

 private:
  enum class Phase : uint8_t {
    kPinning,  // the PinRead is out
    kPinned,   // admitted and pinned: the data half may be claimed
    kReading,  // claimed: copies and reads under way
  };

  // The PinRead's outcome, on the connection's reader thread.
  void OnPinned(Result<rpc::Response> reply) EXCLUDES(mu_);
  // Runs the data half on this thread when it is ready and nobody claimed it.
  void TryRunDataHalf() EXCLUDES(mu_);
  void RunDataHalf() EXCLUDES(mu_);
  void ReportLayer(uint32_t layer) EXCLUDES(mu_);
  // Waits until the restore is done or, unless `layer` is kWholeRestore, layer `layer` landed,
  // or `deadline` passed; runs the data half on this thread when it is ready and unclaimed.
  // Whether what it waited for came.
  static constexpr uint32_t kWholeRestore = UINT32_MAX;
  bool AwaitLocked(uint32_t layer, std::optional<std::chrono::steady_clock::time_point> deadline)
      REQUIRES(mu_);
  // The end: outcome, Unpin, the connection let go, the handle done. Once.
  void Finish(Status st) EXCLUDES(mu_);

  DaemonConnection::Use conn_;  // released by Finish: the connection is not touched after it
  TaskThread* const runner_;
  const KvLayout layout_;
  const std::vector<void*> dst_pointers_;
  const BlockBuffers dst_;  // over dst_pointers_
  const size_t num_keys_;
  const std::function<void(uint32_t)> on_layer_;
  const bool verify_;
  // Set by OnPinned before kPinned; then the claiming thread's.
  std::optional<PinnedRead> read_;
  uint64_t pin_id_ = 0;
  int64_t queued_ns_ = 0;
  int64_t ssd_start_ns_ = 0;

  mutable Mutex mu_;
  CondVar cv_;
  Phase phase_ GUARDED_BY(mu_) = Phase::kPinning;
  bool cancelled_ GUARDED_BY(mu_) = false;
  std::shared_ptr<LayeredRestore> reads_ GUARDED_BY(mu_);  // dropped when done
  uint32_t layers_reported_ GUARDED_BY(mu_) = 0;           // layers [0, n) have landed
  bool done_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
  GetResult result_ GUARDED_BY(mu_);
};

// The caller's handle; cancels (and waits for) an unfinished restore when destroyed.
class RemoteRestoreHandle final : public RestoreHandle {
 public:
  explicit RemoteRestoreHandle(std::shared_ptr<RemoteRestore> r) : r_(std::move(r)) {}
  ~RemoteRestoreHandle() override;
  Result<GetResult> Wait() override { return r_->Wait(); }
  bool WaitFor(std::chrono::nanoseconds timeout) override { return r_->WaitFor(timeout); }
  Status WaitLayer(uint32_t layer) override { return r_->WaitLayer(layer); }
  bool done() const override { return r_->done(); }
  void Cancel() override { r_->Cancel(); }

 private:
  const std::shared_ptr<RemoteRestore> r_;
};

}  // namespace flatcake::serve
