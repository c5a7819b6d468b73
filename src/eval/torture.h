// The fault campaign (`flatcake torture`): a randomized driver that runs put, lookup, restore,
// reclaim, clear, close and reopen against a FlatStore over a small durable pool, with the
// FaultInjectionIoEngine (io/fault_injection_io_engine.h) injecting EIO, ENOSPC, short reads and
// writes, torn writes (reported or acknowledged) and delayed completions at rates that change
// every few dozen operations, until a given number of faults has been injected.
//
// Every returned byte and every status is checked against a model of what must be there (the
// contract of flatcake/store.h and docs/format.md):
//  - a served block is always byte-exact (its content is a function of its key): any other byte
//    is counted in wrong_bytes, whatever faults came before;
//  - an operation during which no fault that can fail it was injected (none, or only delayed
//    completions) must succeed, and a restore must serve every block the model says is there;
//  - a block published by a put stays present until a reclamation or Clear frees it, and SSD
//    blocks survive a close and reopen; a freed block, and a DRAM block after a reopen, is never
//    served again; a failed put publishes at most a prefix of its segments;
//  - a block whose write was torn and acknowledged is served byte-exact or missed (its checksum
//    catches it), never wrong; a restore reports checksum mismatches only for such blocks.
// Anything else is an unexpected error (counted, and the first few described).
//
// Determinism: one driver thread runs one operation at a time; the store's own threads (restore
// issuer, FC-MAS dispatcher, interval syncer) and the fault engine's delay thread only ever work
// on that operation. The faults are a hash of the seed, the operation's number and the I/O op
// (FaultInjectionIoEngine::SetRandomFaults), not of the order in which threads submit, and the
// driver draws its own choices from a generator seeded with the seed, so a seed replays the same
// operations, faults and outcomes; `digest` hashes them all so that two runs can be compared.
// The pool directory is a fresh temporary one unless given.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flatcake/status.h"
#include "io/fault_injection_io_engine.h"

namespace flatcake::eval {

struct TortureOptions {
  uint64_t faults = 10000;  // run until this many faults have been injected
  uint64_t seed = 1;
  std::string dir;  // the pool's parent directory; empty: $TMPDIR or /tmp
  // Called every `progress_every` operations and at the end, from the driver thread.
  std::function<void(uint64_t ops, uint64_t faults)> progress;
  uint64_t progress_every = 100000;
};

// Driver operations, in TortureReport::ops_by_kind.
enum class TortureOp : uint8_t { kPut, kLookup, kRestore, kReclaim, kClear, kReopen };
inline constexpr size_t kNumTortureOps = 6;
// "put", "lookup", "restore", "reclaim", "clear", "reopen".
std::string_view TortureOpName(TortureOp op);

struct TortureReport {
  uint64_t seed = 0;
  uint64_t ops = 0;
  std::array<uint64_t, kNumTortureOps> ops_by_kind{};
  uint64_t faults_injected = 0;
  std::array<uint64_t, kNumFaultKinds> faults_by_kind{};
  uint64_t wrong_bytes = 0;
  uint64_t unexpected_errors = 0;
  std::vector<std::string> failures;  // the first unexpected errors, with their operation
  // How the store answered the faults (all of them allowed by the contract).
  uint64_t failed_puts = 0, failed_restores = 0;
  uint64_t blocks_verified = 0;     // served blocks compared byte for byte
  uint64_t torn_blocks_missed = 0;  // acknowledged-torn blocks a restore missed (checksum)
  uint64_t blocks_reclaimed = 0;    // blocks freed by reclamation or Clear
  uint64_t blocks_recovered = 0;    // SSD blocks found again after reopens
  uint64_t digest = 0;              // hash of every operation, fault and outcome, in order
  double seconds = 0;
};

// Runs the campaign. Errors: a pool directory that cannot be created, a store that cannot be
// opened at the start (a reopen that fails is an unexpected error of the run, which then ends).
Result<TortureReport> RunTorture(const TortureOptions& options);

}  // namespace flatcake::eval
