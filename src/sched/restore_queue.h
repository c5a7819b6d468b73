// RestoreQueue: the queueing logic of FC-MAS, the medium-aware restore scheduler (paper §3.3).
//
// This is the deterministic core: no threads, no clock. Every decision that depends on time takes
// `now_ns` as a parameter, so tests and the virtual-time simulator (restore_sim.h) can replay an
// exact timeline; MasScheduler (mas_scheduler.h) wraps it with a mutex, condition variables, a
// steady clock and a PrefetchExecutor.
//
// Thread safety: none. A RestoreQueue is owned by one thread or guarded by its owner's mutex.
//
// Life of a request under SchedPolicy::kMas:
//   Submit: classified by one comparison of its slowest GVA against kGvaSsdBoundary.
//     DRAM-ready    -> enters the ready order at once.
//     SSD-preparing -> waits in the pending set.
//   TakeAdmissions(now): repeatedly picks the pending request with the highest response ratio
//     1 + wait / kv_bytes (HRRN, recomputed at every call because wait grows) and admits it while
//     its bytes fit in the window. The caller starts one prefetch per admitted request.
//   CompletePrefetch: the request's bytes leave the window and it enters the ready order.
//   PopReady: hands out the ready request with the smallest ORIGINAL arrival_ns, so a promoted
//     SSD request goes ahead of DRAM requests that arrived after it.
//
// Under SchedPolicy::kFcfs every request enters one arrival-ordered queue at Submit; only its head
// may be admitted (an SSD head runs its prefetch while everything behind it waits) and only a
// ready head may be popped. It shares the ready order, the window accounting and the bookkeeping
// with kMas; only the admission and ready-entry rules differ.
//
// Invariants:
//  - in_flight_bytes() <= window_bytes, except while exactly one request is in flight: a request
//    larger than the whole window is admitted alone when the window is empty (never deadlock,
//    never abort; backpressure only delays).
//  - HRRN admission is strict: when the highest-ratio request does not fit, nothing behind it is
//    admitted. This is what bounds the wait of a large request under a stream of small ones: its
//    ratio keeps growing until it is the best, and from then on the window drains for it.
//  - Every submitted request is handed out by PopReady exactly once, or by DrainUnserved.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flatcake/gva.h"
#include "flatcake/status.h"

namespace flatcake {

// The class of a request, from its slowest medium.
enum class RestoreClass : uint8_t { kDramReady = 0, kSsdPreparing = 1 };
// kMas: dual queues + HRRN + arrival-ordered re-admission. kFcfs: one arrival-ordered queue.
enum class SchedPolicy : uint8_t { kMas = 0, kFcfs = 1 };

std::string_view RestoreClassName(RestoreClass cls);
std::string_view SchedPolicyName(SchedPolicy policy);
// Accepts "mas" / "fc-mas" and "fcfs".
Result<SchedPolicy> ParseSchedPolicy(std::string_view name);

// arrival_ns value asking MasScheduler::Submit to stamp the request from its clock.
inline constexpr int64_t kStampOnSubmit = -1;

// One restore request. Plain data, copied in and out.
struct RestoreRequest {
  uint64_t id = 0;                      // unique among the requests live in one queue
  int64_t arrival_ns = kStampOnSubmit;  // arrival time on the queue's clock (ns)
  Gva slowest_gva = 0;                  // the largest GVA the request needs
  uint64_t kv_bytes = 0;                // bytes to restore from SSD: the window charge
};

// The largest of `gvas` (0, a DRAM address, when empty). One pass, no decoding.
Gva SlowestGva(std::span<const Gva> gvas);
// The single comparison of §3.2: any address at or above 2^60 lives on SSD.
constexpr RestoreClass ClassifyRestore(Gva slowest_gva) {
  return GvaIsSsd(slowest_gva) ? RestoreClass::kSsdPreparing : RestoreClass::kDramReady;
}
RestoreRequest MakeRestoreRequest(uint64_t id, std::span<const Gva> gvas, uint64_t kv_bytes,
                                  int64_t arrival_ns = kStampOnSubmit);

// The HRRN priority 1 + wait / kv_bytes, for display (a wait before arrival counts as 0; a
// zero-byte request counts as one byte).
double ResponseRatio(const RestoreRequest& request, int64_t now_ns);
// Exact comparison of priorities at `now_ns` (integer cross-multiplication, no rounding): true
// when `a` goes before `b`. Ties go to the smaller request (so at equal wait, including zero, the
// smaller restore wins), then to the earlier arrival, then to the smaller id.
bool HrrnBefore(const RestoreRequest& a, const RestoreRequest& b, int64_t now_ns);

struct SchedOptions {
  SchedPolicy policy = SchedPolicy::kMas;
  // Bytes of SSD prefetch allowed in flight at once (the staging window).
  uint64_t window_bytes = uint64_t{256} << 20;

  Status Validate() const;
};

// A request handed to a consumer.
struct ReadyRequest {
  RestoreRequest request;
  RestoreClass restore_class = RestoreClass::kDramReady;
  // OK for DRAM-ready requests; the executor's result for SSD ones. A failed prefetch is still
  // handed out (never dropped) so the consumer can fall back, e.g. to recomputation.
  Status prefetch_status;
  int64_t admitted_ns = -1;  // when the prefetch was admitted (SSD only)
  int64_t ready_ns = 0;      // when the request entered the ready order
};

class RestoreQueue {
 public:
  // REQUIRES: options.Validate().ok() (MasScheduler::Create and SimulateRestores check it).
  explicit RestoreQueue(const SchedOptions& options);

  // Adds a request. REQUIRES request.arrival_ns >= 0. Errors: InvalidArgument for a negative
  // arrival or an id that is already live.
  Status Submit(const RestoreRequest& request, int64_t now_ns);

  // Admits the requests whose prefetch should start now and charges their bytes to the window.
  // The caller must start one prefetch per returned request and report it via CompletePrefetch.
  std::vector<RestoreRequest> TakeAdmissions(int64_t now_ns);

  // The prefetch of `id` finished with `io_status`. Errors: NotFound if `id` is not in flight.
  Status CompletePrefetch(uint64_t id, const Status& io_status, int64_t now_ns);

  // Serves request `id`, still waiting for admission, as failed with `status` (a cancelled
  // restore): it skips its prefetch and enters the ready order at once. Errors: NotFound if `id`
  // is not live, Busy if it is prefetching or already ready.
  Status Abandon(uint64_t id, const Status& status, int64_t now_ns);

  // The next request to serve, if one is ready (see the policy rules above).
  std::optional<ReadyRequest> PopReady();
  bool ReadyAvailable() const;

  // Removes and returns every live request that is not in flight (pending, queued or ready), in
  // arrival order. In-flight requests stay until CompletePrefetch.
  std::vector<RestoreRequest> DrainUnserved();

  const SchedOptions& options() const { return options_; }
  size_t live() const { return entries_.size(); }
  size_t pending_ssd() const;  // SSD-preparing requests not yet admitted
  size_t in_flight() const { return in_flight_count_; }
  uint64_t in_flight_bytes() const { return in_flight_bytes_; }
  uint64_t peak_in_flight_bytes() const { return peak_in_flight_bytes_; }

 private:
  enum class State : uint8_t { kQueued, kPrefetching, kReady };
  struct Entry {
    RestoreRequest request;
    RestoreClass restore_class;
    State state;
    uint64_t seq;  // submission order; breaks arrival ties
    Status prefetch_status;
    int64_t admitted_ns = -1;
    int64_t ready_ns = 0;
  };
  // Position in the arrival order: (arrival_ns, seq) is unique.
  struct OrderKey {
    int64_t arrival_ns;
    uint64_t seq;
    uint64_t id;
    auto operator<=>(const OrderKey&) const = default;
  };
  static OrderKey KeyOf(const Entry& e) { return {e.request.arrival_ns, e.seq, e.request.id}; }

  bool Fits(uint64_t bytes) const;
  void Admit(Entry& entry, int64_t now_ns, std::vector<RestoreRequest>* out);

  SchedOptions options_;
  std::unordered_map<uint64_t, Entry> entries_;  // every live request, by id
  // kMas: the ready requests; kFcfs: every live request. Both in arrival order.
  std::set<OrderKey> order_;
  // kMas: SSD requests awaiting admission (unordered_map nodes keep their address on rehash).
  std::vector<Entry*> pending_;
  uint64_t next_seq_ = 0;
  size_t in_flight_count_ = 0;
  uint64_t in_flight_bytes_ = 0;
  uint64_t peak_in_flight_bytes_ = 0;
};

}  // namespace flatcake
