// Write-time placement (paper Table 2): which medium a new segment goes to. A pure function of
// the batch's signals and the options, so it is tested in isolation; the store adds the
// "DRAM full -> SSD" spill after it has tried to allocate.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "flatcake/gva.h"
#include "flatcake/options.h"

namespace flatcake {

struct PlacementInput {
  bool shared_prefix = false;                  // prefix refcount > 1
  uint32_t turn = 1;                           // 1 = first turn of its session
  std::optional<uint64_t> prior_reply_tokens;  // unknown when absent
  uint64_t context_tokens = 0;                 // tokens in the session before and in this batch
};

struct PlacementDecision {
  MediaType medium;
  std::string_view reason;  // "shared-prefix", "short-turn-chat", "agentic-long", "long-reply",
                            // "first-turn", "reply-unknown"
};

PlacementDecision ChoosePlacement(const PlacementInput& in, const StoreOptions& options);

}  // namespace flatcake
