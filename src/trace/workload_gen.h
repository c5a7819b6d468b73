// Synthetic workload generators: agentic coding sessions, multi-turn conversations and
// API-style one-shot traffic, produced in memory as TraceRequest (for the replayer and the
// simulator) or written as Mooncake-schema JSON lines.
//
// Model. Every request's prompt is a chain of token segments: a shared system prompt, then the
// session's history, then new content. Block ids are prefix-chained: a full block keeps its id as
// long as the prefix before it is unchanged, so a later turn that extends the history reuses
// every full block of the previous prompt, and only the partly filled last block and the new
// tokens get fresh ids. Ids in the output are dense, numbered in order of first use.
//
// Determinism: the output is a pure function of (kind, options); it uses its own PRNG and
// distributions (no std::*_distribution), so the same seed gives the same bytes everywhere.
//
// Thread safety: the functions are reentrant; no shared state.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "flatcake/status.h"
#include "trace/trace.h"

namespace flatcake::trace {

enum class WorkloadKind : uint8_t { kAgentic, kConversation, kApi };

std::string_view WorkloadKindName(WorkloadKind kind);
Result<WorkloadKind> ParseWorkloadKind(std::string_view name);

// Knobs. Token counts are at --scale 1 and are multiplied by `scale`; means of lognormal (sigma
// given where it matters) or geometric/exponential distributions as noted. Defaults depend on the
// kind: take them from DefaultWorkloadOptions(kind) and override what you need.
struct WorkloadOptions {
  uint64_t requests = 0;  // requests to emit (the earliest `requests` by arrival time)
  uint64_t seed = 1;
  double scale = 1.0;         // multiplies every token count (contexts shrink, not the shape)
  uint32_t block_tokens = 0;  // tokens per block

  // Shared prefixes.
  double system_tokens = 0;     // system prompt length (each variant drawn lognormal, sigma .3)
  uint32_t system_prompts = 1;  // distinct system prompts, chosen with Zipf popularity
  double prompt_zipf = 1.0;     // Zipf exponent of system prompt popularity

  // Sessions.
  double turns = 1;          // mean user turns per session (geometric, >= 1)
  double first_tokens = 0;   // new content in a session's first request (lognormal, sigma 1)
  double turn_tokens = 0;    // new user content in each later turn (lognormal, sigma 1)
  double output_tokens = 0;  // reply length (lognormal, sigma 0.8)
  double think_s = 0;        // mean seconds from a reply to the next user turn (exponential)
  double rate = 0;           // conversation/api: mean request arrivals per second
  uint32_t concurrency = 1;  // agentic: sessions in flight at once

  // Agentic sessions: each user turn runs an agent loop of `steps` requests; each step appends
  // the previous reply plus a tool result to the context.
  double steps = 1;             // mean agent steps per user turn (geometric)
  double tool_tokens = 0;       // tool result kept in the context per step (lognormal, sigma 1.2)
  double ephemeral_tokens = 0;  // per-request suffix not kept afterwards (exponential)
  double max_context = 0;       // compaction threshold: the context restarts from a summary
  double summary_tokens = 0;    // summary kept after compaction
  double subagent_prob = 0;     // chance that a user turn fans out sub-agents
  uint32_t max_subagents = 0;   // sub-agents per fan-out, uniform in [1, max]
  double subagent_steps = 1;    // mean steps of one sub-agent (geometric)
  double subagent_replay = 0;   // chance a sub-agent replays the session context (else fresh)
  double subagent_task_tokens = 0;    // task prompt appended to the replayed prefix
  double subagent_result_tokens = 0;  // result each sub-agent returns into the main context
  double one_shot = 0;                // fraction of requests that are one-shot side calls
  double one_shot_tokens = 0;         // unique content of a side call (after a shared 2K prompt)
  double step_think_s = 0;            // mean gap between an agent reply and its next step
};

WorkloadOptions DefaultWorkloadOptions(WorkloadKind kind);
Status ValidateWorkloadOptions(const WorkloadOptions& options);

// Generates `options.requests` requests in arrival order. time_s is a whole number of ms;
// session_id is dense from 0; turn is 1-based along the request's chain; parent is the index
// (in the returned vector) of the request this one continues, -1 for a chain start.
Result<std::vector<TraceRequest>> GenerateWorkload(WorkloadKind kind,
                                                   const WorkloadOptions& options);

// Writes requests as Mooncake JSON lines: timestamp (ms), input_length, output_length, hash_ids,
// plus session_id, turn, parent and block_tokens when `extra_fields` (the Mooncake reader honours
// a line's block_tokens, so a generated trace reads back with its own block size).
Status WriteMooncakeJsonl(const std::vector<TraceRequest>& requests, bool extra_fields,
                          std::FILE* out);

}  // namespace flatcake::trace
