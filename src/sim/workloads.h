// Workloads the simulator runs besides traces: the agentic generator at a profile's scale and the
// fixed-length sessions of the paper's context-length sweep (Figure 10).
#pragma once

#include <cstdint>
#include <vector>

#include "flatcake/status.h"
#include "sim/profile.h"
#include "trace/trace.h"
#include "trace/workload_gen.h"

namespace flatcake::sim {

// The generator options of `profile`'s default workload: the replay's built-in default
// (replay-default) or the agentic generator with the profile's requests, scale and concurrency,
// in the profile's pages. `requests` (when > 0) overrides the count.
trace::WorkloadOptions ProfileWorkloadOptions(const SimProfile& profile, uint64_t requests);

// Figure 10's sessions: `sessions` sessions of `turns` requests each, every request
// `context_tokens` long: the first turn all new tokens, each later one the session's first
// context_tokens - new_tokens tokens again plus new_tokens fresh ones (a fixed-length prefix
// reused turn after turn). Turns go round-robin over the sessions (turn 1 of every session, then
// turn 2, ...), one request per second before rescaling to the target load; each reply is
// `output_tokens`. REQUIRES new_tokens < context_tokens.
Result<std::vector<trace::TraceRequest>> FixedLengthSessions(uint64_t context_tokens,
                                                             uint32_t block_tokens,
                                                             uint32_t sessions, uint32_t turns,
                                                             uint64_t new_tokens,
                                                             uint64_t output_tokens);

}  // namespace flatcake::sim
