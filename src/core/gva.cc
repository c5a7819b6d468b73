#include "flatcake/gva.h"

#include <cstdio>
#include <string>

namespace flatcake {

static_assert(GvaIsDram(EncodeGva(MediaType::kDram, 4095, kGvaMaxOffset)));
static_assert(GvaIsSsd(EncodeGva(MediaType::kSsd, 0, 0)));
static_assert(GvaNode(EncodeGva(MediaType::kSsd, 77, 123)) == 77);
static_assert(GvaOffset(EncodeGva(MediaType::kSsd, 77, 123)) == 123);

Status GvaSpace::AddNode(uint32_t node, uint64_t dram_bytes, uint64_t ssd_bytes) {
  if (node >= kGvaMaxNodes) {
    return Status::InvalidArgument("node id " + std::to_string(node) + " exceeds 4095");
  }
  if (dram_bytes > kGvaMaxOffset + 1 || ssd_bytes > kGvaMaxOffset + 1) {
    return Status::InvalidArgument("medium capacity exceeds the 48-bit GVA offset range");
  }
  if (nodes_.size() <= node) nodes_.resize(node + 1);
  nodes_[node] = NodeMedia{true, dram_bytes, ssd_bytes};
  return Status::OK();
}

Result<Gva> GvaSpace::Make(MediaType media, uint32_t node, uint64_t offset) const {
  Gva gva = EncodeGva(media, node, offset & kGvaOffsetMask);
  if (offset > kGvaMaxOffset) return Status::InvalidArgument("GVA offset exceeds 48 bits");
  FC_ASSIGN_OR_RETURN(GvaFields f, Decode(gva));
  (void)f;
  return gva;
}

Result<GvaFields> GvaSpace::Decode(Gva gva, uint64_t length) const {
  const uint32_t media = GvaMediaBits(gva);
  if (media > static_cast<uint32_t>(MediaType::kSsd)) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "GVA 0x%016llx uses reserved media type %u",
                  static_cast<unsigned long long>(gva), media);
    return Status::InvalidArgument(buf);
  }
  const uint32_t node = GvaNode(gva);
  if (node >= nodes_.size() || !nodes_[node].present) {
    return Status::InvalidArgument("GVA names unknown node " + std::to_string(node));
  }
  const uint64_t offset = GvaOffset(gva);
  const uint64_t capacity = media == 0 ? nodes_[node].dram_bytes : nodes_[node].ssd_bytes;
  if (length == 0 || offset >= capacity || capacity - offset < length) {
    return Status::InvalidArgument(
        "GVA offset " + std::to_string(offset) + "+" + std::to_string(length) +
        " lies outside the " + (media == 0 ? "DRAM" : "SSD") + " medium of node " +
        std::to_string(node) + " (" + std::to_string(capacity) + " bytes)");
  }
  return GvaFields{static_cast<MediaType>(media), node, offset};
}

}  // namespace flatcake
