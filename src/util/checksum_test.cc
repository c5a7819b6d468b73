#include "util/checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace flatcake {
namespace {

constexpr KvLayout kLayout{4, 2, 4096};

// One block held block-contiguously ([layer][plane] slices back to back) and the same bytes
// plane-major ([plane][layer]).
struct TwoCopies {
  std::vector<uint8_t> contiguous, plane_major;
  void* c_ptr[1];
  void* p_ptr[1];
  TwoCopies() : contiguous(kLayout.block_bytes()), plane_major(kLayout.block_bytes()) {
    std::mt19937_64 rng(3);
    for (auto& b : contiguous) b = static_cast<uint8_t>(rng());
    const uint64_t s = kLayout.slice_bytes;
    for (uint32_t l = 0; l < kLayout.num_layers; ++l) {
      for (uint32_t p = 0; p < kLayout.num_planes; ++p) {
        std::memcpy(&plane_major[(uint64_t{p} * kLayout.num_layers + l) * s],
                    &contiguous[(uint64_t{l} * kLayout.num_planes + p) * s], s);
      }
    }
    c_ptr[0] = contiguous.data();
    p_ptr[0] = plane_major.data();
  }
  BlockBuffers c() const { return {BufferKind::kBlockContiguous, c_ptr}; }
  BlockBuffers p() const { return {BufferKind::kBlockPlaneMajor, p_ptr}; }
};

TEST(Checksum, SameBlockSameChecksumWhateverTheBufferLayout) {
  TwoCopies b;
  EXPECT_EQ(BlockChecksum(b.c(), kLayout, 0), BlockChecksum(b.p(), kLayout, 0));
}

TEST(Checksum, SlicesHashedInAnyOrderSumToTheBlockChecksum) {
  TwoCopies b;
  const uint32_t n = kLayout.num_layers * kLayout.num_planes;
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  uint64_t sum = 0;
  for (uint32_t pos : order) {
    sum += SliceChecksum(&b.contiguous[pos * kLayout.slice_bytes], kLayout.slice_bytes, pos);
  }
  EXPECT_EQ(sum, BlockChecksum(b.c(), kLayout, 0));
}

TEST(Checksum, AChangedByteOrSwappedSlicesChangeIt) {
  TwoCopies b;
  const uint64_t want = BlockChecksum(b.c(), kLayout, 0);
  b.contiguous[5000] ^= 1;
  EXPECT_NE(BlockChecksum(b.c(), kLayout, 0), want);
  b.contiguous[5000] ^= 1;
  ASSERT_EQ(BlockChecksum(b.c(), kLayout, 0), want);
  // Slices of layer 1 and layer 2 (plane 0) exchanged: same bytes, wrong places.
  const uint64_t s = kLayout.slice_bytes;
  std::swap_ranges(&b.contiguous[2 * s], &b.contiguous[3 * s], &b.contiguous[4 * s]);
  EXPECT_NE(BlockChecksum(b.c(), kLayout, 0), want);
}

// Checksums are stored with every block, so the hash must stay XXH3-64 whichever vector unit the
// build or the CPU picks: compare against the library's plain entry point at every length class
// XXH3 treats apart (0-16, 17-128, 129-240, longer), at odd start addresses and several seeds.
TEST(Checksum, SliceChecksumIsSeededXxh3) {
  std::vector<uint8_t> bytes(3 * 16384 + 7);
  std::mt19937_64 rng(9);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  for (uint64_t len : {0, 1, 3, 8, 16, 17, 100, 128, 129, 200, 240, 241, 1000, 4096, 16384,
                       16384 + 5, 2 * 16384}) {
    for (uint64_t start : {0, 1, 7}) {
      for (uint32_t position : {0u, 1u, 63u}) {
        EXPECT_EQ(SliceChecksum(&bytes[start], len, position),
                  XXH3_64bits_withSeed(&bytes[start], len, position))
            << "len " << len << " start " << start << " position " << position;
      }
    }
  }
}

// The fused copy must hash exactly as SliceChecksum does (its hashes are compared with checksums
// stored by the plain path) and copy exactly len bytes, on every instruction set this CPU has:
// every length class of XXH3 (short, mid, the 1 KiB block boundaries of the long path, a tail of 1
// to 64 bytes), seeds, aligned and odd source and destination addresses (32 but not 64 aligned
// included), both store kinds; guard bytes around the destination.
TEST(Checksum, FusedCopyCopiesAndHashesAsSliceChecksumOnEveryIsa) {
  constexpr uint64_t kMax = 3 * 16384 + 130;
  constexpr uint64_t kGuard = 64;
  std::vector<uint8_t> src(kMax + 64);
  std::mt19937_64 rng(11);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  alignas(64) static uint8_t dst[kMax + 2 * kGuard + 64];
  int isas = 0;
  for (CopyIsa isa : {CopyIsa::kPortable, CopyIsa::kAvx2, CopyIsa::kAvx512}) {
    if (!TEST_CopyIsaAvailable(isa)) continue;
    ++isas;
    const uint64_t lengths[] = {0,    1,    16,   17,   64,   65,   128,   129,       240,
                                241,  255,  256,  257,  1023, 1024, 1025,  1087,      1088,
                                1089, 2048, 4096, 4097, 8191, 8192, 16384, 16384 + 5, kMax};
    for (uint64_t len : lengths) {
      for (uint64_t src_off : {0, 3}) {
        for (uint64_t dst_off : {0, 1, 32}) {
          for (CopyStores stores : {CopyStores::kCached, CopyStores::kStreaming}) {
            for (bool hash : {true, false}) {
              for (uint32_t position : {0u, 77u}) {
                SCOPED_TRACE(testing::Message()
                             << "isa " << static_cast<int>(isa) << " len " << len << " src+"
                             << src_off << " dst+" << dst_off << " streaming "
                             << (stores == CopyStores::kStreaming) << " hash " << hash
                             << " position " << position);
                std::memset(dst, 0xA5, sizeof dst);
                uint8_t* d = dst + kGuard + dst_off;
                const uint64_t h =
                    TEST_CopySliceOn(isa, hash, d, &src[src_off], len, position, stores);
                FenceStreamingStores();
                if (hash) EXPECT_EQ(h, SliceChecksum(&src[src_off], len, position));
                EXPECT_EQ(std::memcmp(d, &src[src_off], len), 0);
                EXPECT_TRUE(std::all_of(dst, d, [](uint8_t b) { return b == 0xA5; }));
                EXPECT_TRUE(
                    std::all_of(d + len, dst + sizeof dst, [](uint8_t b) { return b == 0xA5; }));
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GE(isas, 1);
  // The entry points the store calls (the widest instruction set), with a prefetch target.
  uint8_t* d = dst + kGuard;
  EXPECT_EQ(CopySliceWithChecksum(d, src.data(), 8192, 5, CopyStores::kStreaming, &src[8192]),
            SliceChecksum(src.data(), 8192, 5));
  CopySlice(d + 1, src.data(), 4096, CopyStores::kStreaming, src.data());
  FenceStreamingStores();
  EXPECT_EQ(std::memcmp(d + 1, src.data(), 4096), 0);
}

}  // namespace
}  // namespace flatcake
