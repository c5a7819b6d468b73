#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "io/fault_injection_io_engine.h"
#include "io/restore_reader.h"
#include "io/uring_io_engine.h"
#include "testing/engine_kinds.h"
#include "testing/pattern_file.h"
#include "testing/restore_test_fixture.h"

namespace flatcake {
namespace {

using testing::AllocAligned;
using testing::CanariesOverwritten;
using testing::kFileBytes;
using testing::kPairSlice;
using testing::LayerMajorSession;
using testing::Mismatches;
using testing::RestoreTest;
using testing::ReversedPairs;

TEST_P(RestoreTest, BlockContiguousDestinationsOfLayerMajorFileAreReadVectored) {
  const uint32_t layers = 4, planes = 2, blocks = 32;
  const uint64_t slice = 16384, total = uint64_t{layers} * planes * blocks * slice;
  auto dest = AllocAligned(total);
  std::memset(dest.data(), 0, total);
  auto slices = LayerMajorSession(1, 0, layers, planes, blocks, slice, dest.data());
  std::shuffle(slices.begin(), slices.end(), std::mt19937_64(9));
  auto reader = Reader(1 << 20);
  std::vector<uint32_t> order;
  auto h = reader->Start(slices, 0, [&](uint32_t l, const Status& s) {
    EXPECT_TRUE(s.ok());
    order.push_back(l);
  });
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->Wait().ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_EQ(order, (std::vector<uint32_t>{0, 1, 2, 3}));
  const ReaderStats st = reader->stats();
  EXPECT_EQ(st.vectored_reads, total / (1 << 20));  // one per window-sized read
  EXPECT_EQ(st.vectored_ops, st.vectored_reads);
  EXPECT_EQ(st.scattered_reads, 0u);
  EXPECT_EQ(st.direct_reads, 0u);
  EXPECT_EQ(st.reads_issued, st.vectored_ops);
  EXPECT_EQ(st.bytes_read, total);
  EXPECT_EQ(st.bytes_delivered, total);
  if (auto* uring = dynamic_cast<UringIoEngine*>(engine_.get())) {
    EXPECT_GE(uring->stats().vectored_sqes, st.vectored_ops);
  }

  // The same restore with vectored reads disabled takes the staging path.
  ReaderOptions o;
  o.min_vector_entry_bytes = 0;  // vector any read that lines up
  o.window_bytes = 1 << 20;
  o.allow_vectored = false;
  auto staged = RestoreReader::Create(*engine_, o);
  ASSERT_TRUE(staged.ok());
  std::memset(dest.data(), 0, total);
  ASSERT_TRUE((*staged)->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_EQ((*staged)->stats().vectored_reads, 0u);
  EXPECT_EQ((*staged)->stats().scattered_reads, total / (1 << 20));
}

TEST_P(RestoreTest, SmallEntriesAreStagedAndLargeOnesVectoredByDefault) {
  // The same layer-major session twice: 16 KiB slices average below the default
  // min_vector_entry_bytes (one contiguous read and a copy), 256 KiB slices above it (in place).
  const ReaderOptions defaults;
  ASSERT_GT(defaults.min_vector_entry_bytes, 16384u);
  ASSERT_LE(defaults.min_vector_entry_bytes, 256u << 10);
  for (const uint64_t slice : {uint64_t{16384}, uint64_t{256} << 10}) {
    const uint32_t layers = 2, planes = 2, blocks = 4;
    const uint64_t total = uint64_t{layers} * planes * blocks * slice;
    auto dest = AllocAligned(total);
    std::memset(dest.data(), 0, total);
    auto slices = LayerMajorSession(1, 0, layers, planes, blocks, slice, dest.data());
    ReaderOptions o;
    o.window_bytes = 4 << 20;
    auto made = RestoreReader::Create(*engine_, o);
    ASSERT_TRUE(made.ok());
    ASSERT_TRUE((*made)->Restore(slices).ok());
    EXPECT_EQ(Mismatches(slices), 0u) << slice;
    const ReaderStats st = (*made)->stats();
    const uint64_t reads = st.vectored_reads + st.scattered_reads + st.direct_reads;
    EXPECT_GT(reads, 0u);
    EXPECT_EQ(st.bytes_delivered, total);
    if (slice < defaults.min_vector_entry_bytes) {
      EXPECT_EQ(st.scattered_reads, reads) << slice;
    } else {
      EXPECT_EQ(st.vectored_reads, reads) << slice;
    }
  }
}

TEST_P(RestoreTest, VectoredReadsSplitAtIovMax) {
  // 4 KiB slices in reversed destination order: the whole 8 MiB file is one merged read of 2048
  // entries, issued as two ops of kMaxIoVecs entries.
  const uint64_t slice = 4096, n = kFileBytes / slice;
  auto dest = AllocAligned(kFileBytes);
  std::vector<SliceRead> slices;
  for (uint64_t i = 0; i < n; ++i) {
    slices.push_back(SliceRead{0, i * slice, slice, dest.data() + (n - 1 - i) * slice, 0});
  }
  ReaderOptions o;
  o.min_vector_entry_bytes = 0;  // vector any read that lines up
  o.window_bytes = kFileBytes;
  o.coalesce.max_io = kFileBytes;
  auto made = RestoreReader::Create(*engine_, o);
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE((*made)->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  ReaderStats st = (*made)->stats();
  EXPECT_EQ(st.vectored_reads, 1u);
  EXPECT_EQ(st.vectored_ops, n / kMaxIoVecs);
  EXPECT_EQ(st.reads_issued, n / kMaxIoVecs);
  EXPECT_EQ(st.bytes_delivered, kFileBytes);

  // A smaller cap splits further; an odd one leaves a short last op.
  o.max_iovecs = 300;
  auto small = RestoreReader::Create(*engine_, o);
  ASSERT_TRUE(small.ok());
  std::memset(dest.data(), 0, kFileBytes);
  ASSERT_TRUE((*small)->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  st = (*small)->stats();
  EXPECT_EQ(st.vectored_reads, 1u);
  EXPECT_EQ(st.vectored_ops, (n + 299) / 300);

  o.max_iovecs = kMaxIoVecs + 1;
  EXPECT_TRUE(RestoreReader::Create(*engine_, o).status().IsInvalidArgument());
  o.max_iovecs = kMaxIoVecs;
  o.vector_alignment = 3000;
  EXPECT_TRUE(RestoreReader::Create(*engine_, o).status().IsInvalidArgument());
}

TEST_P(RestoreTest, MixedAlignedAndUnalignedDestinationsFallBack) {
  // Four regions of file 0, far enough apart to be separate reads (gap > max_gap):
  //  A: aligned block-contiguous destinations                      -> vectored
  //  B: the same, but one slice's destination is 1 byte off         -> scattered
  //  C: aligned, with 4 KiB holes between slices (bridged gaps)     -> vectored via discard
  //  D: aligned, but 100-byte holes (a gap O_DIRECT cannot land)    -> scattered
  const uint64_t slice = 16384, region = 1 << 20;
  std::vector<uint8_t> canvas(8 << 20, 0xEE);
  uint8_t* base = canvas.data() + (4096 - reinterpret_cast<uintptr_t>(canvas.data()) % 4096);
  std::vector<SliceRead> slices;
  uint8_t* d = base;
  auto add = [&](uint64_t file_off, uint8_t* out) {
    slices.push_back(SliceRead{0, file_off, slice, out, static_cast<uint32_t>(slices.size() % 3)});
  };
  // A: 16 slices, destinations in reversed order.
  for (int i = 0; i < 16; ++i) add(0 * region + i * slice, d + (15 - i) * slice);
  d += 16 * slice + 4096;
  // B: like A, with slice 7 one byte off (canary space kept around it).
  for (int i = 0; i < 16; ++i) {
    add(2 * region + i * slice, d + (15 - i) * (slice + 4096) + (i == 7 ? 1 : 0));
  }
  d += 16 * (slice + 4096) + 4096;
  // C: slices 20 KiB apart in the file.
  for (int i = 0; i < 16; ++i) add(4 * region + i * (slice + 4096), d + i * slice);
  d += 16 * slice + 4096;
  // D: slices 16 KiB + 100 bytes apart.
  for (int i = 0; i < 16; ++i) add(6 * region + i * (slice + 100), d + i * (slice + 4096));
  d += 16 * (slice + 4096);
  ASSERT_LE(d, canvas.data() + canvas.size());
  std::shuffle(slices.begin(), slices.end(), std::mt19937_64(4));

  ReaderOptions o;
  o.min_vector_entry_bytes = 0;  // vector any read that lines up
  o.window_bytes = 4 << 20;
  o.coalesce.max_gap = 16384;  // bridges C's and D's holes, not the space between regions
  auto made = RestoreReader::Create(*engine_, o);
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE((*made)->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_EQ(CanariesOverwritten(canvas, slices), 0u);
  const ReaderStats st = (*made)->stats();
  EXPECT_EQ(st.vectored_reads, 2u);   // A and C
  EXPECT_EQ(st.scattered_reads, 2u);  // B and D
  EXPECT_EQ(st.direct_reads, 0u);
  EXPECT_EQ(st.bytes_delivered, slices.size() * slice);
  EXPECT_EQ(st.bytes_gap, 15 * 4096 + 15 * 100u);
}

TEST_P(RestoreTest, ContinuingDestinationsShareOneIovec) {
  // 8 iovecs, so a cap of 4 per op makes 2 ops (16 entries would make 4).
  auto dest = AllocAligned(16 * kPairSlice);
  auto slices = ReversedPairs(dest.data());
  ReaderOptions o;
  o.min_vector_entry_bytes = 0;  // vector any read that lines up
  o.window_bytes = 1 << 20;
  o.max_iovecs = 4;
  auto made = RestoreReader::Create(*engine_, o);
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE((*made)->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_EQ((*made)->stats().vectored_reads, 1u);
  EXPECT_EQ((*made)->stats().vectored_ops, 2u);
}

TEST_P(RestoreTest, FailedOpOfASplitVectoredReadFailsTheRestore) {
  // One 8 MiB read of 2048 entries split into two ops; only the second op fails.
  FaultInjectionIoEngine fi(*engine_);
  const uint64_t slice = 4096, n = kFileBytes / slice;
  auto dest = AllocAligned(kFileBytes);
  std::vector<SliceRead> slices;
  for (uint64_t i = 0; i < n; ++i) {
    slices.push_back(SliceRead{0, i * slice, slice, dest.data() + (n - 1 - i) * slice, 0});
  }
  ReaderOptions o;
  o.min_vector_entry_bytes = 0;  // vector any read that lines up
  o.window_bytes = kFileBytes;
  o.coalesce.max_io = kFileBytes;
  auto made = RestoreReader::Create(fi, o);
  ASSERT_TRUE(made.ok());
  FaultSpec spec;
  spec.range_begin = kFileBytes - 1;  // only the op covering the file's end
  fi.SetReadFault(spec);
  Status s = (*made)->Restore(slices);
  ASSERT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(s.message().find("offset " + std::to_string(kFileBytes / 2)), std::string_view::npos)
      << s.ToString();
  EXPECT_EQ(fi.counters().read_errors, 1u);

  // A short read of a vectored op surfaces as end of file; the reader stays usable.
  FaultSpec shortr;
  shortr.kind = FaultSpec::Kind::kShort;
  fi.SetReadFault(shortr);
  s = (*made)->Restore(slices);
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(s.message().find("unexpected end of file"), std::string_view::npos) << s.ToString();
  fi.Clear();
  std::memset(dest.data(), 0, kFileBytes);
  ASSERT_TRUE((*made)->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_EQ((*made)->stats().vectored_reads, 3u);
}

INSTANTIATE_TEST_SUITE_P(AllEngines, RestoreTest, ::testing::ValuesIn(testing::kEngineKinds),
                         testing::EngineKindParamName);

}  // namespace
}  // namespace flatcake
