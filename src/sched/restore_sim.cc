#include "sched/restore_sim.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>

namespace flatcake {

Status RestoreSimModel::Validate() const {
  if (!(ssd_bytes_per_sec > 0) || !std::isfinite(ssd_bytes_per_sec)) {
    return Status::InvalidArgument("sched sim: ssd bandwidth must be a positive number");
  }
  if (dram_copy_ns < 0 || ssd_consume_ns < 0) {
    return Status::InvalidArgument("sched sim: service times must be >= 0");
  }
  if (consumers < 1) return Status::InvalidArgument("sched sim: need at least one consumer");
  return Status::OK();
}

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// (time, id) min-heap entry.
using TimedId = std::pair<int64_t, uint64_t>;
using MinHeap = std::priority_queue<TimedId, std::vector<TimedId>, std::greater<TimedId>>;

int64_t TransferNs(uint64_t bytes, double bytes_per_sec) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(bytes) * 1e9 / bytes_per_sec));
}

}  // namespace

Result<std::vector<RestoreSimOutcome>> SimulateRestores(const SchedOptions& options,
                                                        const RestoreSimModel& model,
                                                        std::span<const RestoreRequest> arrivals) {
  FC_RETURN_IF_ERROR(options.Validate());
  FC_RETURN_IF_ERROR(model.Validate());
  std::unordered_map<uint64_t, size_t> index;  // id -> position in `arrivals`
  std::vector<RestoreSimOutcome> out(arrivals.size());
  std::vector<size_t> by_time(arrivals.size());
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const RestoreRequest& r = arrivals[i];
    if (r.arrival_ns < 0) return Status::InvalidArgument("sched sim: negative arrival time");
    if (!index.emplace(r.id, i).second) {
      return Status::InvalidArgument("sched sim: duplicate request id " + std::to_string(r.id));
    }
    out[i].request = r;
    out[i].restore_class = ClassifyRestore(r.slowest_gva);
    by_time[i] = i;
  }
  std::stable_sort(by_time.begin(), by_time.end(), [&](size_t a, size_t b) {
    return arrivals[a].arrival_ns < arrivals[b].arrival_ns;
  });

  RestoreQueue queue(options);
  MinHeap prefetch_done;  // completion time of each admitted prefetch
  MinHeap consumer_free;  // release time of each busy consumer
  int idle_consumers = model.consumers;
  int64_t device_free_ns = 0;
  size_t next_arrival = 0;
  size_t finished = 0;

  while (finished < arrivals.size()) {
    const int64_t t_arrival =
        next_arrival < by_time.size() ? arrivals[by_time[next_arrival]].arrival_ns : kNever;
    const int64_t t_prefetch = prefetch_done.empty() ? kNever : prefetch_done.top().first;
    const int64_t t_consumer = consumer_free.empty() ? kNever : consumer_free.top().first;
    const int64_t now = std::min({t_arrival, t_prefetch, t_consumer});
    if (now == kNever) return Status::Aborted("sched sim: stalled with requests unfinished");

    while (!prefetch_done.empty() && prefetch_done.top().first == now) {
      FC_RETURN_IF_ERROR(queue.CompletePrefetch(prefetch_done.top().second, Status::OK(), now));
      prefetch_done.pop();
    }
    while (!consumer_free.empty() && consumer_free.top().first == now) {
      out[index.at(consumer_free.top().second)].done_ns = now;
      consumer_free.pop();
      ++idle_consumers;
      ++finished;
    }
    while (next_arrival < by_time.size() && arrivals[by_time[next_arrival]].arrival_ns == now) {
      FC_RETURN_IF_ERROR(queue.Submit(arrivals[by_time[next_arrival]], now));
      ++next_arrival;
    }

    // Admissions and pops feed each other under FCFS (a pop exposes the next head), so repeat
    // until neither makes progress.
    for (bool progress = true; progress;) {
      progress = false;
      for (const RestoreRequest& r : queue.TakeAdmissions(now)) {
        device_free_ns =
            std::max(device_free_ns, now) + TransferNs(r.kv_bytes, model.ssd_bytes_per_sec);
        prefetch_done.emplace(device_free_ns, r.id);
        out[index.at(r.id)].admitted_ns = now;
        progress = true;
      }
      while (idle_consumers > 0) {
        std::optional<ReadyRequest> ready = queue.PopReady();
        if (!ready) break;
        RestoreSimOutcome& o = out[index.at(ready->request.id)];
        o.ready_ns = ready->ready_ns;
        o.start_ns = now;
        const int64_t service = ready->restore_class == RestoreClass::kDramReady
                                    ? model.dram_copy_ns
                                    : model.ssd_consume_ns;
        consumer_free.emplace(now + service, ready->request.id);
        --idle_consumers;
        progress = true;
      }
    }
  }
  return out;
}

}  // namespace flatcake
