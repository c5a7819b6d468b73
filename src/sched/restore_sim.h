// SimulateRestores: a virtual-time, discrete-event run of RestoreQueue, for exact tests (the
// paper's Figure 4 timeline, starvation bounds) and for `flatcake bench sched --virtual`.
//
// Model:
//  - The SSD is one device of `ssd_bytes_per_sec` serving admitted prefetches one at a time in
//    admission order (FIFO): a prefetch admitted at t completes at
//    max(t, device free) + kv_bytes / bandwidth. The same device serves both policies, so they
//    differ only in ordering, not in SSD throughput.
//  - `consumers` servers take ready requests (PopReady). A DRAM-ready request occupies one for
//    `dram_copy_ns` (the host-to-device copy); a prefetched SSD request for `ssd_consume_ns`
//    (its data is already resident). A request completes when its service ends.
//  - Events at the same instant are processed in the order: prefetch completions, consumer
//    releases, arrivals; then admissions and pops repeat until nothing changes.
//
// Thread safety: a pure function of its arguments.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flatcake/status.h"
#include "sched/restore_queue.h"

namespace flatcake {

struct RestoreSimModel {
  double ssd_bytes_per_sec = 2e9;
  int64_t dram_copy_ns = 50'000;
  int64_t ssd_consume_ns = 0;
  int consumers = 1;

  Status Validate() const;
};

// What happened to one request, all times in ns on the virtual clock.
struct RestoreSimOutcome {
  RestoreRequest request;
  RestoreClass restore_class = RestoreClass::kDramReady;
  int64_t admitted_ns = -1;  // prefetch admitted (SSD only)
  int64_t ready_ns = 0;      // entered the ready order
  int64_t start_ns = 0;      // popped by a consumer
  int64_t done_ns = 0;       // service finished
  int64_t latency_ns() const { return done_ns - request.arrival_ns; }
};

// Runs every request of `arrivals` (arrival_ns >= 0, any order, unique ids) to completion.
// Returns the outcomes in the order of `arrivals`. Errors: InvalidArgument for bad options, model
// or requests.
Result<std::vector<RestoreSimOutcome>> SimulateRestores(const SchedOptions& options,
                                                        const RestoreSimModel& model,
                                                        std::span<const RestoreRequest> arrivals);

}  // namespace flatcake
