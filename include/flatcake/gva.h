// FC-GVA: the 64-bit Global Virtual Address of a slice run.
//
//   MediaType[63:60] | NodeID[59:48] | Offset[47:0]
//
// DRAM is media 0 and SSD media 1, so every DRAM address is numerically below 2^60 and every SSD
// address at or above it: one integer comparison classifies a request (FC-MAS relies on this).
// Encoding is constexpr and never fails for in-range fields; decoding an address that arrived from
// outside (a cache entry, a peer, a test) goes through GvaSpace::Decode, which rejects reserved
// media, unknown nodes and offsets beyond the medium's capacity instead of dereferencing them.
#pragma once

#include <cstdint>
#include <vector>

#include "flatcake/status.h"

namespace flatcake {

enum class MediaType : uint8_t { kDram = 0, kSsd = 1 };

using Gva = uint64_t;

inline constexpr int kGvaMediaShift = 60;
inline constexpr int kGvaNodeShift = 48;
inline constexpr uint64_t kGvaOffsetMask = (uint64_t{1} << kGvaNodeShift) - 1;
inline constexpr uint64_t kGvaNodeMask = 0xFFF;
inline constexpr uint64_t kGvaMaxOffset = kGvaOffsetMask;
inline constexpr uint32_t kGvaMaxNodes = 4096;
// Every address at or above this boundary lives on SSD.
inline constexpr Gva kGvaSsdBoundary = uint64_t{1} << kGvaMediaShift;

// REQUIRES: node < 4096, offset < 2^48 (checked by the static_asserts of callers or by
// GvaSpace::Make, which returns a Status instead).
constexpr Gva EncodeGva(MediaType media, uint32_t node, uint64_t offset) {
  return (static_cast<uint64_t>(media) << kGvaMediaShift) |
         ((static_cast<uint64_t>(node) & kGvaNodeMask) << kGvaNodeShift) |
         (offset & kGvaOffsetMask);
}
constexpr uint32_t GvaMediaBits(Gva gva) { return static_cast<uint32_t>(gva >> kGvaMediaShift); }
constexpr uint32_t GvaNode(Gva gva) {
  return static_cast<uint32_t>((gva >> kGvaNodeShift) & kGvaNodeMask);
}
constexpr uint64_t GvaOffset(Gva gva) { return gva & kGvaOffsetMask; }
// The single comparison that classifies an address.
constexpr bool GvaIsSsd(Gva gva) { return gva >= kGvaSsdBoundary; }
constexpr bool GvaIsDram(Gva gva) { return gva < kGvaSsdBoundary; }

struct GvaFields {
  MediaType media;
  uint32_t node;
  uint64_t offset;
};

// The set of addresses that are valid in this process: which nodes exist and how large each of
// their media is. Not thread-safe to mutate; const methods may be called concurrently.
class GvaSpace {
 public:
  // Declares node `node` with the given medium capacities (bytes). Capacity 0 = medium absent.
  Status AddNode(uint32_t node, uint64_t dram_bytes, uint64_t ssd_bytes);

  // Builds an address, checking every field against this space.
  Result<Gva> Make(MediaType media, uint32_t node, uint64_t offset) const;
  // Decodes and validates an address; `length` bytes starting there must lie inside the medium.
  Result<GvaFields> Decode(Gva gva, uint64_t length = 1) const;

 private:
  struct NodeMedia {
    bool present = false;
    uint64_t dram_bytes = 0;
    uint64_t ssd_bytes = 0;
  };
  std::vector<NodeMedia> nodes_;
};

}  // namespace flatcake
