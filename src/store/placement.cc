#include "store/placement.h"

namespace flatcake {

PlacementDecision ChoosePlacement(const PlacementInput& in, const StoreOptions& o) {
  // A prefix shared by several requests is small and hot: keep it in DRAM.
  if (in.shared_prefix) return {MediaType::kDram, "shared-prefix"};
  // Long contexts (agentic sessions) are large and restored as a whole: SSD, laid out flat.
  if (in.context_tokens >= o.l_agent_tokens) return {MediaType::kSsd, "agentic-long"};
  if (in.prior_reply_tokens && *in.prior_reply_tokens >= o.tau_tokens) {
    return {MediaType::kSsd, "long-reply"};
  }
  // One-shot requests and first turns may never be reused.
  if (in.turn <= 1) return {MediaType::kSsd, "first-turn"};
  if (in.prior_reply_tokens) return {MediaType::kDram, "short-turn-chat"};
  // A later turn whose reply length is unknown: the cheap misprediction is SSD (a hit is still a
  // hit there, served by coalesced reads), so do not spend DRAM on a guess.
  return {MediaType::kSsd, "reply-unknown"};
}

}  // namespace flatcake
