// RestoreJob: one restore request inside FlatStore, from Store::Restore until it is done, and the
// RestoreHandle the caller holds on it.
//
// Life of a job (see flat_store_restore.cc):
//   Restore: the keys are looked up, the scopes of the hits pinned and their GVAs decoded on the
//     caller's thread (the metadata half, as FlatStore::PinRead); the job is registered under its
//     id and submitted to FC-MAS (MasScheduler) with its slowest GVA and its SSD bytes.
//   Prefetch (SSD-preparing jobs, once FC-MAS admits them into the read window): DRAM hits are
//     copied, then the SSD slices go to the restore reader (the data half, `read`: PinnedRead);
//     the reads' completion completes the prefetch.
//   Serve (when FC-MAS hands the job out, in original-arrival order among the ready ones): a
//     DRAM-ready job's blocks are copied now; then every block is verified, the scopes unpinned,
//     and the job is done.
// A remote job (FlatStore::AdmitRead) schedules a pin whose owner reads the bytes itself: it has
// no data half here. Its admission (at once when DRAM-ready, else when FC-MAS admits its
// prefetch) is told to the owner through `on_admitted`; its prefetch completes when the owner
// says its reads are done (FinishRead) or gives the pin up; serving it only forgets it.
//
// Thread safety: the fields above `mu` are written before the job is submitted (or, for the SSD
// read state, by the one thread that runs its prefetch) and read afterwards by the threads the
// scheduler hands the job to; the scheduler's lock orders those hand-offs. `mu` guards the
// completion state and the reader handles (Cancel reaches them from the caller's thread). Lock
// order: mu before the LayeredRestore's locks; no callback of the reads runs under them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "flatcake/store.h"
#include "io/layered_restore.h"
#include "store/pinned_read.h"
#include "util/thread_annotations.h"

namespace flatcake {

class FlatStore;

struct RestoreJob {
  uint64_t id = 0;
  KvLayout layout;
  size_t num_keys = 0;
  std::function<void(uint32_t)> on_layer;
  int64_t arrival_ns = 0;
  // The pinned hits and the destination: the data half of the restore (not for a remote job).
  std::optional<PinnedRead> read;
  bool remote = false;

  // SSD reads: written by the thread that runs the prefetch, and by the reads' end.
  int64_t admitted_ns = -1;
  // Written once the reads are done, before the prefetch completes (which orders it before
  // FinishJob reads it).
  int64_t ssd_done_ns = 0;

  mutable Mutex mu;
  CondVar cv;
  std::shared_ptr<LayeredRestore> reads GUARDED_BY(mu);  // dropped when done
  bool cancelled GUARDED_BY(mu) = false;
  // Remote jobs: told once, with OK when admitted or the error that ended the job first.
  std::function<void(Status)> on_admitted GUARDED_BY(mu);
  // Remote jobs: the admitted prefetch's completion, until the owner's reads are done.
  std::function<void(Status)> window_done GUARDED_BY(mu);
  uint32_t layers_reported GUARDED_BY(mu) = 0;  // layers [0, n) are in the caller's memory
  bool done GUARDED_BY(mu) = false;
  Status status GUARDED_BY(mu);     // fixed once done
  GetResult result GUARDED_BY(mu);  // fixed once done

  // Records that layer `layer` landed whole and calls on_layer. Layers are reported in order.
  void ReportLayer(uint32_t layer) EXCLUDES(mu);
  // Remote jobs: calls on_admitted with `st` unless it was called already.
  void TellAdmitted(const Status& st) EXCLUDES(mu);
  // Remote jobs: marks the job cancelled and takes its admitted prefetch's completion, if any.
  std::function<void(Status)> CancelRemote() EXCLUDES(mu);
};

// The caller's handle: waits on the job; cancels (and waits for) an unfinished one when destroyed.
class FlatRestoreHandle final : public RestoreHandle {
 public:
  FlatRestoreHandle(FlatStore* store, std::shared_ptr<RestoreJob> job)
      : store_(store), job_(std::move(job)) {}
  ~FlatRestoreHandle() override;
  Result<GetResult> Wait() override;
  bool WaitFor(std::chrono::nanoseconds timeout) override;
  Status WaitLayer(uint32_t layer) override;
  bool done() const override;
  void Cancel() override;

 private:
  FlatStore* const store_;
  const std::shared_ptr<RestoreJob> job_;
};

}  // namespace flatcake
