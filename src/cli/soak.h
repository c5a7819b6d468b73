// `flatcake soak` (docs/reliability.md): mixed traffic through a `flatcake serve` daemon for
// --minutes, with client processes killed (SIGKILL) and restarted at random and one daemon
// restart (SIGKILL, then started again on its durable pool), reporting the daemon's RSS over time,
// its descriptors, the errors by kind and the wrong bytes.
//
// Two halves share this header: the orchestrator (soak_cmd.cc), which runs the daemon and the
// clients as child processes and judges the run, and the client (soak_client.cc: the same
// binary, `flatcake soak --client`, hidden), which puts, looks up and restores through a
// RemoteStore and verifies every restored byte against FillBlock's content of its key. A client
// speaks to the orchestrator on its stdout, one line per event:
//   "S <json>"                         its counters so far (ClientCounters), every 200 ms and at
//                                      the end; a killed client's last one stands
//   "E <steady ns> <op> <code> <text>" an operation failed (the time, on SteadyNowNs's clock,
//                                      tells the orchestrator whether the daemon was away)
//   "W <key hex> <wrong bytes>"        a restored block differed from what its key must hold
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "flatcake/layout.h"

namespace flatcake::cli::soak {

// Two block shapes (16 KiB and 128 KiB); the key's namespace decides which, so that every
// writer of a key writes it with the same layout and the same bytes.
inline constexpr KvLayout kLayouts[2] = {{2, 2, 4096}, {4, 2, 16384}};
// Keys per namespace a client draws from: small enough that restores hit what was put.
inline constexpr uint64_t kKeySpace = 4096;

// The keys of client slot `slot` alone, and those every client of a tenant writes, per layout.
inline uint64_t OwnNs(uint32_t slot, int layout) { return 0x50A0000 + uint64_t{slot} * 2 + layout; }
inline uint64_t SharedNs(int layout) { return 0x50AF000 + static_cast<uint64_t>(layout); }
inline int LayoutOfNs(uint64_t ns) { return static_cast<int>(ns & 1); }

// What one client process did; cumulative over its life.
struct ClientCounters {
  uint64_t puts = 0, put_blocks = 0, put_written = 0, put_present = 0;
  uint64_t lookups = 0, lookup_keys = 0, lookup_hits = 0;
  uint64_t restores = 0, restore_keys = 0, restore_hits = 0, restores_cancelled = 0;
  uint64_t bytes_verified = 0, wrong_bytes = 0, wrong_blocks = 0, corrupt = 0;
  uint64_t errors = 0;

  void Add(const ClientCounters& o);
  nlohmann::json ToJson() const;
  static ClientCounters FromJson(const nlohmann::json& j);
};

// The hidden client mode's arguments.
struct ClientArgs {
  std::string socket;
  std::string tenant;
  uint32_t slot = 0;
  uint64_t seed = 0;
};

// Runs one client until SIGTERM (prints its counters and exits 0) or SIGKILL. Exit 1 when it
// cannot connect within 30 s.
int RunClient(const ClientArgs& a);

}  // namespace flatcake::cli::soak
