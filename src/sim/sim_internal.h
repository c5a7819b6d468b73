// The simulator's parts, shared by simulator.cc (the server, the GPU, the event loop) and the
// store models (sim_flat.cc, sim_tiered.cc). Not a public interface.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <queue>
#include <unordered_map>
#include <vector>

#include "eval/replay.h"
#include "flatcake/key.h"
#include "flatcake/layout.h"
#include "sim/profile.h"
#include "sim/simulator.h"
#include "trace/trace.h"

namespace flatcake::sim::internal {

inline double TransferSeconds(uint64_t bytes, double gbps) { return bytes / (gbps * 1e9); }

// A FIFO resource with a bandwidth: the host-to-GPU link, host memcpy, the scatter stage.
class Link {
 public:
  explicit Link(double gbps) : gbps_(gbps) {}
  // Moves `bytes` starting no earlier than `t`; returns when they are across.
  double Transfer(double t, uint64_t bytes) {
    if (bytes == 0) return t;
    const double start = std::max(t, free_);
    free_ = start + TransferSeconds(bytes, gbps_);
    return free_;
  }

 private:
  double gbps_;
  double free_ = 0;
};

// The SSD array (profile.h: SsdProfile). Jobs are served FIFO; a job's service time follows from
// its command count and bytes.
class SsdDevice {
 public:
  explicit SsdDevice(const SsdProfile& p) : p_(p) {}
  // Service time of `commands` commands moving `bytes` at `gbps`.
  double ServiceSeconds(uint64_t commands, uint64_t bytes, double gbps) const;
  // A job issued at `t`; returns its completion. `gbps` 0 = the array's own read or write rate.
  double Submit(double t, uint64_t commands, uint64_t bytes, bool write, double gbps = 0);

  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t bytes_written() const { return bytes_written_; }
  uint64_t read_commands() const { return read_commands_; }
  double read_busy_s() const { return read_busy_s_; }
  const SsdProfile& profile() const { return p_; }

 private:
  SsdProfile p_;
  double free_ = 0;
  uint64_t bytes_read_ = 0, bytes_written_ = 0, read_commands_ = 0;
  double read_busy_s_ = 0;
};

// Write commands of `bytes` split at `max_io`.
inline uint64_t CommandsFor(uint64_t bytes, uint64_t max_io) {
  return bytes == 0 ? 0 : (bytes + max_io - 1) / max_io;
}

// One request's life in the server.
struct ReqState {
  uint32_t idx = 0;
  double arrival = 0;
  double start = -1;   // got a slot: lookup and restore begin
  double ready = -1;   // restored (or nothing to restore): may prefill
  double ssd_in = -1;  // its SSD hits landed (requests with SSD hits)
  double ttft = -1;
  uint32_t full_blocks = 0;  // blocks whose tokens are all in the prompt (the ones stored)
  uint32_t hbm_blocks = 0;   // leading blocks found in the GPU prefix cache
  uint32_t lookup_hits = 0;  // leading blocks the store holds after those
  uint32_t delivered = 0;    // of which restored (a leading run)
  uint32_t from_ssd = 0;     // of the delivered ones, read from SSD
  uint32_t revoked = 0;
};

class Simulator;

// The interface between the server and a store policy. Times are virtual seconds.
class StoreModel {
 public:
  virtual ~StoreModel() = default;
  // Leading blocks of `r`'s prompt from block `first` on that the store holds now.
  virtual uint32_t Lookup(const ReqState& r, uint32_t first) = 0;
  // Restores r.lookup_hits blocks from block `first`; sets r.delivered, r.from_ssd, r.revoked,
  // r.ssd_in and calls Simulator::Restored(r.idx, t) once they are in (at t >= now).
  virtual void Restore(ReqState& r, uint32_t first, double now) = 0;
  // Writes r's blocks [first, end) (just computed); returns when the write is done.
  virtual double Write(ReqState& r, uint32_t first, uint32_t end, double now) = 0;
  // A store event scheduled with Simulator::Schedule.
  virtual void OnEvent(uint32_t kind, uint64_t a, double now) = 0;
  virtual void Finish(SimReport* rep) = 0;
};

struct Event {
  double t;
  uint64_t seq;
  uint32_t kind;
  uint64_t a;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

// Event kinds below kStoreEventBase are the server's; the store's start there.
inline constexpr uint32_t kStoreEventBase = 100;

// What the store models need from the simulation: the requests, the devices and the clock.
struct SimContext {
  const std::vector<trace::TraceRequest>* requests = nullptr;
  std::vector<eval::RequestHints> hints;
  const SimProfile* profile = nullptr;
  SimPolicy policy = SimPolicy::kFlat;
  uint32_t block_tokens = 0;
  KvLayout layout;
  uint64_t key_namespace = 0x5eed;
  std::unique_ptr<SsdDevice> ssd;
  std::unique_ptr<Link> h2d, host_copy, scatter;
  std::function<void(double t, uint32_t kind, uint64_t a)> schedule;
  std::function<void(uint32_t idx, double t)> restored;
  std::vector<ReqState>* reqs = nullptr;

  uint64_t block_bytes() const { return layout.block_bytes(); }
  Key KeyOf(uint64_t block_id) const { return KeyFromId(block_id, key_namespace); }
  int64_t Ns(double t) const { return static_cast<int64_t>(t * 1e9); }
};

std::unique_ptr<StoreModel> MakeFlatModel(SimContext* ctx);
std::unique_ptr<StoreModel> MakeTieredModel(SimContext* ctx);

}  // namespace flatcake::sim::internal
