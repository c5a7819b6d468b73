#include "sim/workloads.h"

#include <string>

#include "eval/replay.h"

namespace flatcake::sim {

trace::WorkloadOptions ProfileWorkloadOptions(const SimProfile& p, uint64_t requests) {
  trace::WorkloadOptions wo;
  if (p.workload == "replay-default") {
    wo = eval::DefaultReplayWorkload();
  } else {
    wo = trace::DefaultWorkloadOptions(trace::WorkloadKind::kAgentic);
    wo.requests = p.workload_requests;
    wo.scale = p.workload_scale;
    wo.concurrency = p.workload_concurrency;
  }
  if (p.page_tokens) wo.block_tokens = p.page_tokens;
  if (requests) wo.requests = requests;
  return wo;
}

Result<std::vector<trace::TraceRequest>> FixedLengthSessions(uint64_t context_tokens,
                                                             uint32_t block_tokens,
                                                             uint32_t sessions, uint32_t turns,
                                                             uint64_t new_tokens,
                                                             uint64_t output_tokens) {
  if (block_tokens == 0 || sessions == 0 || turns == 0 || new_tokens >= context_tokens) {
    return Status::InvalidArgument(
        "fixed-length sessions need block_tokens, sessions and turns > 0 and new tokens (" +
        std::to_string(new_tokens) + ") below the context (" + std::to_string(context_tokens) +
        ")");
  }
  const uint64_t prefix_blocks = (context_tokens - new_tokens) / block_tokens;
  const uint64_t total_blocks = (context_tokens + block_tokens - 1) / block_tokens;
  std::vector<trace::TraceRequest> out;
  out.reserve(uint64_t{sessions} * turns);
  uint64_t next_id = 0;
  std::vector<uint64_t> prefix_base(sessions);
  std::vector<int64_t> last(sessions, -1);
  for (uint32_t t = 0; t < turns; ++t) {
    for (uint32_t s = 0; s < sessions; ++s) {
      trace::TraceRequest r;
      r.time_s = static_cast<double>(out.size());
      r.input_tokens = context_tokens;
      r.output_tokens = output_tokens;
      r.session_id = s;
      r.turn = static_cast<int32_t>(t + 1);
      r.parent = last[s];
      r.block_tokens = block_tokens;
      if (t == 0) {
        prefix_base[s] = next_id;
        next_id += prefix_blocks;
      }
      for (uint64_t b = 0; b < prefix_blocks; ++b) r.block_ids.push_back(prefix_base[s] + b);
      for (uint64_t b = prefix_blocks; b < total_blocks; ++b) r.block_ids.push_back(next_id++);
      last[s] = static_cast<int64_t>(out.size());
      out.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace flatcake::sim
