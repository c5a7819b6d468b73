#include "io/restore_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io/fault_injection_io_engine.h"
#include "testing/engine_kinds.h"
#include "testing/pattern_file.h"
#include "testing/restore_test_fixture.h"

namespace flatcake {
namespace {

using testing::AllocAligned;
using testing::CanariesOverwritten;
using testing::kFileBytes;
using testing::Mismatches;
using testing::PatternByte;
using testing::RestoreTest;

TEST_P(RestoreTest, ScattersByteExactIntoUnalignedDestinations) {
  // Slices of odd sizes at odd offsets, with gaps and across both files, into odd destinations
  // separated by canary bytes.
  std::mt19937_64 rng(11);
  std::vector<SliceRead> slices;
  std::vector<uint8_t> dest(6 << 20, 0xEE);
  uint64_t dpos = 1;
  for (uint32_t f = 0; f < 2; ++f) {
    uint64_t off = rng() % 5000;
    while (true) {
      const uint64_t len = 1 + rng() % 20000;
      if (off + len > kFileBytes - 8192 || dpos + len + 3 > dest.size()) break;
      slices.push_back(
          SliceRead{f, off, len, dest.data() + dpos, static_cast<uint32_t>(rng() % 6)});
      dpos += len + 3;  // 3 canary bytes between slices
      off += len + (rng() % 3 == 0 ? rng() % 100000 : 0);
    }
  }
  std::shuffle(slices.begin(), slices.end(), rng);
  auto reader = Reader(8 << 20);
  ASSERT_TRUE(reader->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_EQ(CanariesOverwritten(dest, slices), 0u);
  const ReaderStats st = reader->stats();
  uint64_t requested = 0;
  for (const auto& s : slices) requested += s.len;
  EXPECT_EQ(st.bytes_delivered, requested);
  EXPECT_LT(st.reads_issued, slices.size());  // coalescing happened
  EXPECT_GE(st.bytes_read, requested);
}

TEST_P(RestoreTest, AlignedContiguousDestinationsAreReadDirectly) {
  // Layer-major file, destination laid out the same way and aligned: every read lands in place.
  const uint32_t layers = 4, blocks = 32;
  const uint64_t slice = 16384;
  auto dest = AllocAligned(layers * blocks * slice);
  std::vector<SliceRead> slices;
  for (uint32_t l = 0; l < layers; ++l) {
    for (uint32_t b = 0; b < blocks; ++b) {
      const uint64_t off = (l * blocks + b) * slice;
      slices.push_back(SliceRead{1, off, slice, dest.data() + off, l});
    }
  }
  std::reverse(slices.begin(), slices.end());
  auto reader = Reader(1 << 20);
  ASSERT_TRUE(reader->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  const ReaderStats st = reader->stats();
  EXPECT_GT(st.direct_reads, 0u);
  EXPECT_EQ(st.scattered_reads, 0u);
  EXPECT_EQ(st.bytes_read, layers * blocks * slice);
}

TEST_P(RestoreTest, LayersCompleteInOrderAndWindowSmallerThanALayer) {
  // 8 layers of 512 KiB each in file 0, a 64 KiB window: many window refills per layer.
  const uint32_t layers = 8, blocks = 32;
  const uint64_t slice = 16384;
  std::vector<uint8_t> dest(layers * blocks * slice + 1);
  std::vector<SliceRead> slices;
  for (uint32_t l = 0; l < layers; ++l) {
    for (uint32_t b = 0; b < blocks; ++b) {
      const uint64_t off = (l * blocks + b) * slice;
      slices.push_back(SliceRead{0, off, slice, dest.data() + 1 + off, l});  // unaligned: staged
    }
  }
  std::shuffle(slices.begin(), slices.end(), std::mt19937_64(5));
  ReaderOptions o;
  o.min_vector_entry_bytes = 0;  // vector any read that lines up
  o.window_bytes = 64 << 10;
  auto made = RestoreReader::Create(*engine_, o);
  ASSERT_TRUE(made.ok());
  auto& reader = *made.value();
  std::mutex mu;
  std::vector<uint32_t> order;
  auto h = reader.Start(slices, 0, [&](uint32_t layer, const Status& s) {
    EXPECT_TRUE(s.ok());
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(layer);
  });
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->WaitLayer(0).ok());
  ASSERT_TRUE((*h)->Wait().ok());
  EXPECT_EQ(order, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_EQ((*h)->stats().scattered_reads, (*h)->stats().reads_issued);
  EXPECT_GE((*h)->stats().reads_issued, layers * blocks * slice / (64 << 10));
  EXPECT_TRUE((*h)->WaitLayer(8).IsInvalidArgument());
}

TEST_P(RestoreTest, ReadErrorFailsItsLayerAndTheRestore) {
  FaultInjectionIoEngine fi(*engine_);
  const uint32_t layers = 6, blocks = 16;
  const uint64_t slice = 16384;
  const uint64_t layer_bytes = blocks * slice;
  std::vector<uint8_t> dest(layers * layer_bytes);
  std::vector<SliceRead> slices;
  for (uint32_t l = 0; l < layers; ++l) {
    for (uint32_t b = 0; b < blocks; ++b) {
      const uint64_t off = l * layer_bytes + b * slice;
      slices.push_back(SliceRead{0, off, slice, dest.data() + off, l});
    }
  }
  FaultSpec spec;
  spec.file = 0;
  spec.range_begin = 3 * layer_bytes + 100;  // inside layer 3
  spec.range_end = spec.range_begin + 1;
  fi.SetReadFault(spec);
  ReaderOptions o;
  o.min_vector_entry_bytes = 0;  // vector any read that lines up
  o.window_bytes = 1 << 20;
  o.coalesce.max_io = layer_bytes;  // one read per layer
  auto made = RestoreReader::Create(fi, o);
  ASSERT_TRUE(made.ok());
  std::atomic<int> failed_callbacks{0};
  auto h =
      (*made)->Start(slices, 0, [&](uint32_t, const Status& s) { failed_callbacks += !s.ok(); });
  ASSERT_TRUE(h.ok());
  Status all = (*h)->Wait();
  ASSERT_TRUE(all.IsIOError()) << all.ToString();
  EXPECT_NE(all.message().find("file 0 offset " + std::to_string(3 * layer_bytes)),
            std::string_view::npos)
      << all.ToString();
  EXPECT_TRUE((*h)->WaitLayer(0).ok());
  EXPECT_TRUE((*h)->WaitLayer(3).IsIOError());
  EXPECT_GE(failed_callbacks.load(), 1);
  EXPECT_EQ(fi.counters().read_errors, 1u);
}

TEST_P(RestoreTest, ReaderStaysUsableAfterAFailedDirectRestore) {
  FaultInjectionIoEngine fi(*engine_);
  const uint64_t bytes = 4 << 20;
  auto dest = AllocAligned(bytes);
  std::vector<SliceRead> slices;
  for (uint64_t off = 0; off < bytes; off += 65536) {
    slices.push_back(SliceRead{0, off, 65536, dest.data() + off, static_cast<uint32_t>(off >> 20)});
  }
  ReaderOptions o;
  o.min_vector_entry_bytes = 0;  // vector any read that lines up
  o.window_bytes = 256 << 10;    // most reads are still unissued when the first one fails
  auto made = RestoreReader::Create(fi, o);
  ASSERT_TRUE(made.ok());
  fi.SetReadError(EIO, /*every_nth=*/1);
  Status failed = (*made)->Restore(slices);
  EXPECT_TRUE(failed.IsIOError()) << failed.ToString();
  fi.Clear();
  std::memset(dest.data(), 0, bytes);
  ASSERT_TRUE((*made)->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_GT((*made)->stats().direct_reads, 0u);
}

TEST_P(RestoreTest, InjectedShortReadSurfacesAsEndOfFile) {
  FaultInjectionIoEngine fi(*engine_);
  FaultSpec spec;
  spec.kind = FaultSpec::Kind::kShort;
  fi.SetReadFault(spec);
  std::vector<uint8_t> dest(1 << 20);
  std::vector<SliceRead> slices = {SliceRead{1, 0, 1 << 20, dest.data(), 0}};
  auto made = RestoreReader::Create(fi, ReaderOptions{});
  ASSERT_TRUE(made.ok());
  Status s = (*made)->Restore(slices);
  EXPECT_TRUE(s.IsIOError());
  EXPECT_NE(s.message().find("unexpected end of file"), std::string_view::npos) << s.ToString();
}

TEST_P(RestoreTest, ConcurrentRestoresShareTheWindow) {
  auto reader = Reader(256 << 10);
  std::vector<std::thread> threads;
  std::atomic<uint64_t> bad{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<uint8_t> dest(2 << 20);
      std::vector<SliceRead> slices;
      for (uint64_t off = 0; off + 4096 <= dest.size(); off += 4096) {
        slices.push_back(SliceRead{static_cast<uint32_t>(t % 2), off + t * 65536, 4096,
                                   dest.data() + off, static_cast<uint32_t>(rng() % 3)});
      }
      std::shuffle(slices.begin(), slices.end(), rng);
      if (!reader->Restore(slices).ok()) ++bad;
      bad += Mismatches(slices);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0u);
}

TEST_P(RestoreTest, EmptyLayersAndBadInput) {
  auto reader = Reader(1 << 20);
  std::vector<uint8_t> dest(4096);
  std::vector<SliceRead> slices = {SliceRead{0, 0, 4096, dest.data(), 2}};
  std::vector<uint32_t> order;
  auto h = reader->Start(slices, 4, [&](uint32_t l, const Status&) { order.push_back(l); });
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->Wait().ok());
  EXPECT_EQ(order, (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(reader->Start(slices, 2).status().IsInvalidArgument());
  auto empty = reader->Start({});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE((*empty)->Wait().ok());
  EXPECT_TRUE(RestoreReader::Create(*engine_, ReaderOptions{100}).status().IsInvalidArgument());
}

TEST_P(RestoreTest, SliceCallbackRunsOnceForEveryLandedSliceAndNeverForAFailedRead) {
  // Slices split over reads (max_io smaller than a slice), staged, direct and vectored reads all
  // report each slice exactly once, with its bytes as read; a failed read's slices are never
  // reported. A slice that one staged read holds whole is handed over from the staging window
  // (and is in its destination once the restore is done); any other slice is handed over in place,
  // once all of it has landed.
  FaultInjectionIoEngine fi(*engine_);
  const uint32_t layers = 4, blocks = 8;
  const uint64_t slice = 48 << 10;
  const uint64_t layer_bytes = blocks * slice;
  std::vector<uint8_t> odd(layers * layer_bytes + 1);     // unaligned: staged and copied
  auto aligned_buf = AllocAligned(layers * layer_bytes);  // aligned: direct or vectored
  uint8_t* aligned = aligned_buf.data();
  // Round 0: staged; 1: direct or vectored, every slice split; 2: a failed read; 3: staged, every
  // slice split.
  for (int round = 0; round < 4; ++round) {
    std::vector<SliceRead> slices;
    for (uint32_t l = 0; l < layers; ++l) {
      for (uint32_t b = 0; b < blocks; ++b) {
        const uint64_t off = l * layer_bytes + b * slice;
        uint8_t* dest = round == 0 || round == 3 ? odd.data() + 1 + off : aligned + off;
        slices.push_back(SliceRead{0, off, slice, dest, l, l * blocks + b});
      }
    }
    ReaderOptions o;
    o.min_vector_entry_bytes = 0;
    o.window_bytes = 1 << 20;
    o.coalesce.max_io = round == 1 || round == 3 ? 32 << 10 : 256 << 10;
    if (round == 2) {
      FaultSpec spec;
      spec.file = 0;
      spec.range_begin = 2 * layer_bytes + 100;  // inside layer 2
      spec.range_end = spec.range_begin + 1;
      fi.SetReadFault(spec);
    } else {
      fi.ClearReads();
    }
    auto made = RestoreReader::Create(fi, o);
    ASSERT_TRUE(made.ok());
    std::vector<std::atomic<int>> calls(slices.size());
    std::atomic<uint64_t> wrong_bytes{0};
    std::atomic<int> from_window{0};
    auto h = (*made)->Start(slices, 0, nullptr,
                            [&](const SliceRead& s, const uint8_t* bytes, uint8_t* copy_to) {
                              calls[s.tag]++;
                              from_window += bytes != s.dest;
                              // From the window the callback copies; in place, there is nothing to
                              // copy.
                              EXPECT_EQ(copy_to, bytes != s.dest ? s.dest : nullptr);
                              if (copy_to != nullptr) std::memcpy(copy_to, bytes, s.len);
                              for (uint64_t i = 0; i < s.len; ++i)
                                wrong_bytes += bytes[i] != PatternByte(0, s.offset + i);
                            });
    ASSERT_TRUE(h.ok());
    const Status st = (*h)->Wait();
    EXPECT_EQ(wrong_bytes.load(), 0u) << "round " << round;
    if (round == 0) {
      EXPECT_GT(from_window.load(), 0);
    } else {
      EXPECT_EQ(from_window.load(), 0) << "round " << round;
    }
    int reported = 0;
    for (size_t k = 0; k < slices.size(); ++k) {
      EXPECT_LE(calls[k].load(), 1) << "slice " << k;
      reported += calls[k].load();
    }
    if (round != 2) {
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(reported, static_cast<int>(slices.size())) << "round " << round;
      EXPECT_EQ(Mismatches(slices), 0u) << "round " << round;
    } else {
      EXPECT_TRUE(st.IsIOError()) << st.ToString();
      EXPECT_LT(reported, static_cast<int>(slices.size()));
      EXPECT_EQ(calls[2 * blocks].load(), 0) << "the failed read's first slice was reported";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllEngines, RestoreTest, ::testing::ValuesIn(testing::kEngineKinds),
                         testing::EngineKindParamName);

}  // namespace
}  // namespace flatcake
