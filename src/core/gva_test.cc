#include "flatcake/gva.h"

#include <gtest/gtest.h>

namespace flatcake {
namespace {

TEST(Gva, EncodeDecodeRoundTrip) {
  constexpr Gva kGva = EncodeGva(MediaType::kSsd, 12, 0xABCDEF);
  static_assert(GvaMediaBits(kGva) == 1 && GvaNode(kGva) == 12 && GvaOffset(kGva) == 0xABCDEF);
  GvaSpace space;
  ASSERT_TRUE(space.AddNode(12, 1 << 20, 1ull << 30).ok());
  auto f = space.Decode(kGva);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->media, MediaType::kSsd);
  EXPECT_EQ(f->node, 12u);
  EXPECT_EQ(f->offset, 0xABCDEFu);
}

TEST(Gva, OneComparisonClassifies) {
  EXPECT_TRUE(GvaIsDram(EncodeGva(MediaType::kDram, 4095, kGvaMaxOffset)));
  EXPECT_TRUE(GvaIsSsd(EncodeGva(MediaType::kSsd, 0, 0)));
  EXPECT_LT(EncodeGva(MediaType::kDram, 4095, kGvaMaxOffset), kGvaSsdBoundary);
}

TEST(Gva, DecodeRejectsReservedMediaUnknownNodesAndOutOfRangeOffsets) {
  GvaSpace space;
  ASSERT_TRUE(space.AddNode(0, 4096, 8192).ok());
  Gva reserved = (uint64_t{2} << kGvaMediaShift) | 5;
  EXPECT_TRUE(space.Decode(reserved).status().IsInvalidArgument());
  EXPECT_NE(space.Decode(reserved).status().message().find("reserved media"), std::string::npos);
  EXPECT_TRUE(space.Decode(EncodeGva(MediaType::kDram, 1, 0)).status().IsInvalidArgument());
  EXPECT_TRUE(space.Decode(EncodeGva(MediaType::kDram, 0, 4096)).status().IsInvalidArgument());
  EXPECT_TRUE(space.Decode(EncodeGva(MediaType::kSsd, 0, 8191)).ok());
  EXPECT_FALSE(space.Decode(EncodeGva(MediaType::kSsd, 0, 8191), 2).ok());
  EXPECT_FALSE(space.AddNode(4096, 1, 1).ok());
  EXPECT_FALSE(space.Make(MediaType::kDram, 0, uint64_t{1} << 48).ok());
}

}  // namespace
}  // namespace flatcake
