#include "io/restore_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "io/fault_injection_io_engine.h"
#include "io/io_test_util.h"
#include "io/posix_io_engine.h"
#include "io/preadv_io_engine.h"
#include "io/uring_io_engine.h"

namespace flatcake {
namespace {

using testing::AllocAligned;
using testing::PatternByte;
using testing::TempDir;

constexpr uint64_t kFileBytes = 8 << 20;

// Two pattern files, registered with an engine of the test's kind.
class RestoreTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    for (uint32_t f = 0; f < 2; ++f) {
      const std::string path = dir_.File("f" + std::to_string(f));
      ASSERT_TRUE(testing::WritePatternFile(path, f, kFileBytes));
      // O_DIRECT where the filesystem allows it: the planner's alignment is what makes it work.
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0);
      fds_.push_back(fd);
    }
    switch (GetParam()) {
      case IoEngineKind::kPosix: engine_ = std::make_unique<PosixIoEngine>(); break;
      case IoEngineKind::kPreadv: engine_ = std::make_unique<PreadvIoEngine>(4); break;
      default: {
        auto e = UringIoEngine::Create({2, 16, 0});
        if (!e.ok()) GTEST_SKIP() << e.status().ToString();
        engine_ = std::move(e).value();
      }
    }
    ASSERT_TRUE(engine_->RegisterFiles(fds_).ok());
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }

  std::unique_ptr<RestoreReader> Reader(uint64_t window, IoEngine* engine = nullptr) {
    ReaderOptions o;
    o.min_vector_entry_bytes = 0;  // vector any read that lines up
    o.window_bytes = window;
    auto r = RestoreReader::Create(engine ? *engine : *engine_, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }

  TempDir dir_;
  std::vector<int> fds_;
  std::unique_ptr<IoEngine> engine_;
};

// Counts bytes of each slice that differ from the file pattern.
uint64_t Mismatches(const std::vector<SliceRead>& slices) {
  uint64_t bad = 0;
  for (const auto& s : slices) {
    for (uint64_t i = 0; i < s.len; ++i) bad += s.dest[i] != PatternByte(s.file, s.offset + i);
  }
  return bad;
}

// Counts bytes of `buf` outside every slice's destination that no longer hold the 0xEE canary.
uint64_t CanariesOverwritten(const std::vector<uint8_t>& buf,
                             const std::vector<SliceRead>& slices) {
  std::vector<bool> inside(buf.size(), false);
  for (const auto& s : slices) {
    std::fill(inside.begin() + (s.dest - buf.data()),
              inside.begin() + (s.dest - buf.data()) + s.len, true);
  }
  uint64_t bad = 0;
  for (size_t i = 0; i < buf.size(); ++i) bad += !inside[i] && buf[i] != 0xEE;
  return bad;
}

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
      slices.push_back(SliceRead{1, off, slice, dest.get() + off, l});
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
    slices.push_back(SliceRead{0, off, 65536, dest.get() + off, static_cast<uint32_t>(off >> 20)});
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
  std::memset(dest.get(), 0, bytes);
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

// A session as the store lays it out on SSD: file offset ((l * planes + p) * blocks + b) * slice
// (layer-major), restored into block-contiguous destinations [block][layer][plane].
std::vector<SliceRead> LayerMajorSession(uint32_t file, uint64_t file_base, uint32_t layers,
                                         uint32_t planes, uint32_t blocks, uint64_t slice,
                                         uint8_t* dest) {
  std::vector<SliceRead> slices;
  const uint64_t block_bytes = uint64_t{layers} * planes * slice;
  for (uint32_t l = 0; l < layers; ++l) {
    for (uint32_t p = 0; p < planes; ++p) {
      for (uint32_t b = 0; b < blocks; ++b) {
        const uint64_t off = file_base + ((uint64_t{l} * planes + p) * blocks + b) * slice;
        uint8_t* out = dest + b * block_bytes + (uint64_t{l} * planes + p) * slice;
        slices.push_back(SliceRead{file, off, slice, out, l});
      }
    }
  }
  return slices;
}

TEST_P(RestoreTest, BlockContiguousDestinationsOfLayerMajorFileAreReadVectored) {
  const uint32_t layers = 4, planes = 2, blocks = 32;
  const uint64_t slice = 16384, total = uint64_t{layers} * planes * blocks * slice;
  auto dest = AllocAligned(total);
  std::memset(dest.get(), 0, total);
  auto slices = LayerMajorSession(1, 0, layers, planes, blocks, slice, dest.get());
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
  std::memset(dest.get(), 0, total);
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
    std::memset(dest.get(), 0, total);
    auto slices = LayerMajorSession(1, 0, layers, planes, blocks, slice, dest.get());
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
    slices.push_back(SliceRead{0, i * slice, slice, dest.get() + (n - 1 - i) * slice, 0});
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
  std::memset(dest.get(), 0, kFileBytes);
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

// 16 slices of 16 KiB from the start of file 0 whose destinations in `dest` (16 slices long,
// aligned) come in pairs that continue each other, the pairs in reversed order: a vectored read
// of them has 8 iovecs.
constexpr uint64_t kPairSlice = 16 << 10;
std::vector<SliceRead> ReversedPairs(uint8_t* dest) {
  std::vector<SliceRead> slices;
  for (uint64_t i = 0; i < 16; ++i) {
    const uint64_t pair = 7 - i / 2;
    slices.push_back(
        SliceRead{0, i * kPairSlice, kPairSlice, dest + (pair * 2 + i % 2) * kPairSlice, 0});
  }
  return slices;
}

TEST_P(RestoreTest, ContinuingDestinationsShareOneIovec) {
  // 8 iovecs, so a cap of 4 per op makes 2 ops (16 entries would make 4).
  auto dest = AllocAligned(16 * kPairSlice);
  auto slices = ReversedPairs(dest.get());
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

// Wraps an engine and records the most bytes it ever had in flight, and how many ops were submitted
// from inside one of its completion callbacks.
class InflightTrackingEngine : public IoEngine {
 public:
  explicit InflightTrackingEngine(IoEngine& base) : base_(base) {}
  Status RegisterFiles(std::span<const int> fds) override { return base_.RegisterFiles(fds); }
  std::string_view name() const override { return base_.name(); }
  void Submit(std::span<const IoOp> ops, IoCompletionSink* sink) override {
    for (const IoOp& op : ops) {
      const uint64_t now = inflight_.fetch_add(op.len) + op.len;
      uint64_t seen = max_.load();
      while (now > seen && !max_.compare_exchange_weak(seen, now)) {
      }
      vectored_ops_ += op.vectored();
      from_completion_ += in_completion_ > 0;
      ++ops_;
      base_.Submit({&op, 1}, new Tracker(this, sink, op.len));
    }
  }
  uint64_t max_inflight() const { return max_.load(); }
  uint64_t vectored_ops() const { return vectored_ops_.load(); }
  uint64_t ops_from_completions() const { return from_completion_.load(); }
  uint64_t ops() const { return ops_.load(); }

 private:
  struct Tracker : IoCompletionSink {
    Tracker(InflightTrackingEngine* e, IoCompletionSink* s, uint64_t n) : e(e), s(s), n(n) {}
    void OnIoComplete(uint64_t tag, const Status& st) override {
      e->inflight_ -= n;
      IoCompletionSink* user = s;
      delete this;
      ++in_completion_;
      user->OnIoComplete(tag, st);
      --in_completion_;
    }
    InflightTrackingEngine* e;
    IoCompletionSink* s;
    uint64_t n;
  };
  IoEngine& base_;
  std::atomic<uint64_t> inflight_{0}, max_{0}, vectored_ops_{0}, from_completion_{0}, ops_{0};
  static thread_local int in_completion_;
};
thread_local int InflightTrackingEngine::in_completion_ = 0;

TEST_P(RestoreTest, VectoredReadsStayWithinTheInFlightBudget) {
  const uint32_t layers = 8, planes = 2, blocks = 16;
  const uint64_t slice = 16384, total = uint64_t{layers} * planes * blocks * slice;  // 4 MiB
  auto dest = AllocAligned(total);
  auto slices = LayerMajorSession(0, 0, layers, planes, blocks, slice, dest.get());
  InflightTrackingEngine tracking(*engine_);
  const uint64_t window = 256 << 10;
  auto reader = Reader(window, &tracking);
  ASSERT_TRUE(reader->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_EQ(reader->stats().vectored_reads, total / window);
  EXPECT_EQ(tracking.vectored_ops(), total / window);
  EXPECT_GT(tracking.max_inflight(), 0u);
  EXPECT_LE(tracking.max_inflight(), window);
}

TEST_P(RestoreTest, StagedAndVectoredReadsShareOneInFlightBudget) {
  // One restore whose reads are vectored (file 0, block-aligned destinations) and staged (file
  // 1, destinations one byte off), interleaved layer by layer: together they stay within the
  // window, not a window each.
  const uint32_t layers = 8, planes = 2, blocks = 16;
  const uint64_t slice = 16384, total = uint64_t{layers} * planes * blocks * slice;  // 4 MiB
  auto aligned = AllocAligned(total);
  auto staged = AllocAligned(total + 4096);
  auto slices = LayerMajorSession(0, 0, layers, planes, blocks, slice, aligned.get());
  auto odd = LayerMajorSession(1, 0, layers, planes, blocks, slice, staged.get() + 1);
  slices.insert(slices.end(), odd.begin(), odd.end());
  InflightTrackingEngine tracking(*engine_);
  const uint64_t window = 256 << 10;
  auto reader = Reader(window, &tracking);
  ASSERT_TRUE(reader->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_GT(reader->stats().vectored_reads, 0u);
  EXPECT_GT(reader->stats().scattered_reads, 0u);
  EXPECT_LE(tracking.max_inflight(), window);
}

// `reads` staged reads of `piece` bytes of file 0, back to back into one buffer (a byte off, so
// nothing is read in place).
std::vector<SliceRead> StagedPieces(std::vector<uint8_t>* dest, uint64_t piece, uint64_t reads) {
  dest->assign(reads * piece + 1, 0xEE);
  std::vector<SliceRead> slices;
  for (uint64_t i = 0; i < reads; ++i) {
    slices.push_back(SliceRead{0, i * piece, piece, dest->data() + 1 + i * piece, 0});
  }
  return slices;
}

ReaderOptions StagedOptions(uint64_t piece, uint64_t window_pieces) {
  ReaderOptions o;
  o.window_bytes = window_pieces * piece;
  o.coalesce.max_io = piece;
  o.allow_vectored = false;
  return o;
}

TEST_P(RestoreTest, TheCompletionThatFreesWindowSpaceIssuesTheNextReads) {
  // 32 staged reads of 64 KiB through a window of two: the issuer thread sends the first two, and
  // from then on each landed read's thread submits the next one itself, without a hand-off to the
  // issuer. (An engine that completes inside Submit, posix, does it for one level only, so about
  // every other read; the issuer thread takes the rest.)
  const uint64_t piece = 64 << 10, reads = 32;
  std::vector<uint8_t> dest;
  auto slices = StagedPieces(&dest, piece, reads);
  InflightTrackingEngine tracking(*engine_);
  auto made = RestoreReader::Create(tracking, StagedOptions(piece, 2));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ASSERT_TRUE((*made)->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_EQ((*made)->stats().scattered_reads, reads);
  EXPECT_LE(tracking.max_inflight(), 2 * piece);
  if (GetParam() == IoEngineKind::kPosix) {
    EXPECT_GE(tracking.ops_from_completions(), reads / 2 - 2);
  } else {
    EXPECT_GE(tracking.ops_from_completions(), reads - 4);
  }
}

TEST_P(RestoreTest, AFailedReadIssuesNothingMoreOfItsRestore) {
  // Every read fails. The window holds 4 reads: the first 4 go out together, and the failure of
  // each is recorded before its window space is handed on, so no further read of the restore is
  // ever issued (the remaining 28 fail without I/O).
  const uint64_t piece = 64 << 10, reads = 32;
  std::vector<uint8_t> dest;
  auto slices = StagedPieces(&dest, piece, reads);
  FaultInjectionIoEngine fi(*engine_);
  fi.SetReadError(EIO);
  InflightTrackingEngine tracking(fi);
  auto made = RestoreReader::Create(tracking, StagedOptions(piece, 4));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const Status st = (*made)->Restore(slices);
  EXPECT_TRUE(st.IsIOError()) << st.ToString();
  EXPECT_GE(tracking.ops(), 1u);
  EXPECT_LE(tracking.ops(), 4u);
}

// Holds submitted ops until Go(), then passes them (and every later op) to the base engine.
class HoldingEngine : public IoEngine {
 public:
  explicit HoldingEngine(IoEngine& base) : base_(base) {}
  Status RegisterFiles(std::span<const int> fds) override { return base_.RegisterFiles(fds); }
  std::string_view name() const override { return base_.name(); }
  void Submit(std::span<const IoOp> ops, IoCompletionSink* sink) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      submitted_ += ops.size();
      if (!go_) {
        for (const IoOp& op : ops) held_.emplace_back(op, sink);
        return;
      }
    }
    base_.Submit(ops, sink);
  }
  size_t submitted() {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  // Passes on the oldest held op only.
  void ReleaseOne() {
    std::pair<IoOp, IoCompletionSink*> op;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ASSERT_FALSE(held_.empty());
      op = held_.front();
      held_.erase(held_.begin());
    }
    base_.Submit({&op.first, 1}, op.second);
  }
  void Go() {
    std::vector<std::pair<IoOp, IoCompletionSink*>> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      go_ = true;
      held.swap(held_);
    }
    for (auto& [op, sink] : held) base_.Submit({&op, 1}, sink);
  }

 private:
  IoEngine& base_;
  std::mutex mu_;
  bool go_ = false;
  size_t submitted_ = 0;
  std::vector<std::pair<IoOp, IoCompletionSink*>> held_;
};

TEST_P(RestoreTest, CancelStopsIssuingAndWaitReturnsTheReason) {
  // Two reads are in flight (held by the engine) when the restore is cancelled: they land, and
  // nothing more is issued; Wait returns the cancel status and every layer completes.
  const uint64_t piece = 64 << 10, reads = 32;
  std::vector<uint8_t> dest;
  auto slices = StagedPieces(&dest, piece, reads);
  for (uint64_t i = 0; i < reads; ++i) slices[i].layer = static_cast<uint32_t>(i / 8);
  HoldingEngine holding(*engine_);
  auto made = RestoreReader::Create(holding, StagedOptions(piece, 2));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto h = (*made)->Start(slices);
  ASSERT_TRUE(h.ok());
  for (int i = 0; i < 3000 && holding.submitted() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(holding.submitted(), 2u);
  (*h)->Cancel(Status::Aborted("restore no longer wanted"));
  holding.Go();
  const Status st = (*h)->Wait();
  EXPECT_EQ(st.code(), StatusCode::kAborted) << st.ToString();
  EXPECT_EQ(holding.submitted(), 2u);
  for (uint32_t l = 0; l < 4; ++l) EXPECT_FALSE((*h)->WaitLayer(l).ok()) << l;
  EXPECT_EQ(Mismatches({slices[0], slices[1]}), 0u);  // the two reads in flight landed
  (*h)->Cancel(Status::Aborted("again"));             // a no-op once done
  EXPECT_EQ((*h)->Wait().message(), st.message());
}

// Waits up to `seconds` for `h` to finish. A restore that never finishes would hang the reader's
// destructor, so the test binary exits instead of hanging.
void FinishWithin(const std::shared_ptr<ReaderHandle>& h, int seconds, const char* what) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([h, done] {
    (void)h->Wait();
    done->store(true);
  }).detach();
  for (int i = 0; i < seconds * 100 && !done->load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!done->load()) {
    ADD_FAILURE() << what << " never completed";
    std::_Exit(1);
  }
}

// Polls until `engine` has seen `n` ops (or 3 s passed), then gives the issuer 50 ms to send more
// than it should.
void SettleAt(HoldingEngine& engine, size_t n) {
  for (int i = 0; i < 3000 && engine.submitted() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// Six staged 64 KiB pieces of file 0: the first two as one restore, the other four as a second
// started after it, through a window that holds all six and an engine that holds reads until Go().
// StartAndSettle returns once the first's two reads reached the engine and the issuer had time to
// send more (which it must not). Members are destroyed in reverse order: the handles, then the
// reader, then the engine.
struct TwoRestores {
  std::vector<uint8_t> dest;
  std::vector<SliceRead> slices;
  std::unique_ptr<HoldingEngine> holding;
  std::unique_ptr<RestoreReader> reader;
  std::shared_ptr<ReaderHandle> h1, h2;  // h2 stays null if anything failed

  void StartAndSettle(IoEngine& base) {
    const uint64_t piece = 64 << 10;
    slices = StagedPieces(&dest, piece, 6);
    holding = std::make_unique<HoldingEngine>(base);
    auto made = RestoreReader::Create(*holding, StagedOptions(piece, 16));
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    reader = std::move(made).value();
    auto first = reader->Start(std::span(slices).first(2));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    h1 = *first;
    auto rest = reader->Start(std::span(slices).subspan(2), 0, nullptr, nullptr, h1);
    ASSERT_TRUE(rest.ok()) << rest.status().ToString();
    h2 = *rest;
    SettleAt(*holding, 2);
  }
};

TEST_P(RestoreTest, ARestoreStartedAfterAnotherWaitsUntilItsReadsAreBack) {
  // The window holds both restores, but the second, started after the first, issues nothing while
  // the first's two reads are held in the engine; once they land, it goes out and completes.
  TwoRestores t;
  t.StartAndSettle(*engine_);  // without the wait, the second's reads go out within microseconds
  ASSERT_TRUE(t.h2 != nullptr);
  EXPECT_EQ(t.holding->submitted(), 2u);
  t.holding->Go();
  FinishWithin(t.h2, 10, "the restore started after another");
  EXPECT_TRUE(t.h1->Wait().ok());
  EXPECT_TRUE(t.h2->Wait().ok());
  EXPECT_EQ(t.holding->submitted(), 6u);
  EXPECT_EQ(Mismatches(t.slices), 0u);
  EXPECT_EQ(CanariesOverwritten(t.dest, t.slices), 0u);
}

TEST_P(RestoreTest, ARestoreStartedAfterAFailedOneStillRuns) {
  // The first restore's reads of file 0 all fail: with a window of one read, the first fails and
  // the other three are never issued. Those count as back too, so the second restore, of file 1,
  // still goes out (it is not cancelled: only the caller decides that) and lands every byte.
  const uint64_t piece = 64 << 10;
  FaultInjectionIoEngine fi(*engine_);
  FaultSpec spec;
  spec.file = 0;
  fi.SetReadFault(spec);
  auto made = RestoreReader::Create(fi, StagedOptions(piece, 1));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::vector<uint8_t> dest0, dest1;
  auto first = StagedPieces(&dest0, piece, 4);
  auto rest = StagedPieces(&dest1, piece, 4);
  for (auto& s : rest) s.file = 1;
  auto h1 = (*made)->Start(first);
  ASSERT_TRUE(h1.ok());
  auto h2 = (*made)->Start(rest, 0, nullptr, nullptr, *h1);
  ASSERT_TRUE(h2.ok()) << h2.status().ToString();
  FinishWithin(*h2, 10, "the restore started after a failed one");
  EXPECT_TRUE((*h1)->Wait().IsIOError());
  EXPECT_TRUE((*h2)->Wait().ok()) << (*h2)->Wait().ToString();
  EXPECT_EQ(Mismatches(rest), 0u);
}

TEST_P(RestoreTest, ACancelledRestoreWaitingOnAnotherFinishesWithoutIt) {
  // The second restore is cancelled while the first one's reads are held: it fails at once with
  // the reason, issues nothing, and the first one still lands.
  TwoRestores t;
  t.StartAndSettle(*engine_);
  ASSERT_TRUE(t.h2 != nullptr);
  ASSERT_EQ(t.holding->submitted(), 2u);
  t.h2->Cancel(Status::Aborted("prefix no longer wanted"));
  FinishWithin(t.h2, 10, "a cancelled restore waiting on another");
  EXPECT_EQ(t.h2->Wait().code(), StatusCode::kAborted);
  EXPECT_FALSE(t.h1->done());
  t.holding->Go();
  EXPECT_TRUE(t.h1->Wait().ok());
  EXPECT_EQ(t.holding->submitted(), 2u);
  EXPECT_EQ(Mismatches({t.slices[0], t.slices[1]}), 0u);
}

TEST_P(RestoreTest, ARestoreAfterAnEmptyOrFinishedOneRunsAtOnce) {
  const uint64_t piece = 64 << 10;
  std::vector<uint8_t> dest;
  auto slices = StagedPieces(&dest, piece, 4);
  auto made = RestoreReader::Create(*engine_, StagedOptions(piece, 2));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto empty = (*made)->Start({});
  ASSERT_TRUE(empty.ok());
  auto h1 = (*made)->Start(slices, 0, nullptr, nullptr, *empty);
  ASSERT_TRUE(h1.ok());
  FinishWithin(*h1, 10, "a restore after an empty one");
  auto h2 = (*made)->Start(slices, 0, nullptr, nullptr, *h1);
  ASSERT_TRUE(h2.ok());
  FinishWithin(*h2, 10, "a restore after a finished one");
  EXPECT_TRUE((*h2)->Wait().ok());
  EXPECT_EQ(Mismatches(slices), 0u);
}

TEST_P(RestoreTest, ARestoreAfterASplitVectoredReadWaitsForEveryOp) {
  // The first restore is one vectored read of 16 slices, 8 iovecs in 2 ops of 4; the second
  // waits until both ops are back.
  auto dest = AllocAligned(16 * kPairSlice);
  auto first = ReversedPairs(dest.get());
  ReaderOptions o;
  o.min_vector_entry_bytes = 0;
  o.window_bytes = 4 << 20;
  o.max_iovecs = 4;
  HoldingEngine holding(*engine_);
  auto made = RestoreReader::Create(holding, o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::vector<uint8_t> dest1;
  auto rest = StagedPieces(&dest1, 64 << 10, 4);
  for (auto& s : rest) s.file = 1;
  auto h1 = (*made)->Start(first);
  ASSERT_TRUE(h1.ok());
  auto h2 = (*made)->Start(rest, 0, nullptr, nullptr, *h1);
  ASSERT_TRUE(h2.ok());
  SettleAt(holding, 2);
  ASSERT_EQ(holding.submitted(), 2u);
  holding.ReleaseOne();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // it lands, and nothing follows
  EXPECT_EQ(holding.submitted(), 2u) << "issued after one op of the split read";
  holding.Go();
  FinishWithin(*h2, 10, "a restore after a split vectored read");
  EXPECT_TRUE((*h1)->Wait().ok());
  EXPECT_TRUE((*h2)->Wait().ok());
  EXPECT_GT(holding.submitted(), 2u);
  EXPECT_EQ((*made)->stats().vectored_ops, 2u);
  EXPECT_EQ(Mismatches(first), 0u);
  EXPECT_EQ(Mismatches(rest), 0u);
}

TEST_P(RestoreTest, TheFirstRestoresLayerIsReportedBeforeTheRestLands) {
  // One read, then 64 reads of 8 later layers started after it: the first restore's layer is
  // reported before the rest's land, not after a window of them.
  if (GetParam() == IoEngineKind::kPosix) {
    GTEST_SKIP() << "posix reads inside Submit: reads issued by a completion run before it "
                    "reports its layer (see the header)";
  }
  const uint64_t piece = 64 << 10;
  std::vector<uint8_t> dest0, dest1;
  auto first = StagedPieces(&dest0, piece, 1);
  auto rest = StagedPieces(&dest1, piece, 64);
  for (size_t i = 0; i < rest.size(); ++i) {
    rest[i].file = 1;
    rest[i].layer = static_cast<uint32_t>(1 + i / 8);
  }
  HoldingEngine holding(*engine_);
  auto made = RestoreReader::Create(holding, StagedOptions(piece, 128));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::mutex mu;
  std::vector<uint32_t> order;  // layers as reported: 0 is the first restore's
  auto h1 = (*made)->Start(first, 1, [&](uint32_t l, const Status&) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(l);
  });
  ASSERT_TRUE(h1.ok());
  auto h2 = (*made)->Start(
      rest, 9,
      [&](uint32_t l, const Status&) {
        if (l == 0) return;  // the rest has no layer 0
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(l);
      },
      nullptr, *h1);
  ASSERT_TRUE(h2.ok());
  SettleAt(holding, 1);
  holding.Go();
  FinishWithin(*h2, 10, "the rest");
  EXPECT_TRUE((*h1)->Wait().ok());
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(order.size(), 9u);
  // Before the rest's last layer at the latest (the thread that lands the first layer's read
  // issues the rest and then reports; the rest's first reads could land in between on a loaded
  // machine, but not a window of them).
  const auto first_at = std::find(order.begin(), order.end(), 0u) - order.begin();
  EXPECT_LT(first_at, 8);
}

struct LocksTheReaderWhenDestroyed {
  // A constructor, not aggregate init: clang 14 has no parenthesised aggregate init (make_shared).
  explicit LocksTheReaderWhenDestroyed(RestoreReader* r) : reader(r) {}
  RestoreReader* reader;
  ~LocksTheReaderWhenDestroyed() { (void)reader->stats(); }
};

TEST_P(RestoreTest, TheRestoreWaitedOnIsNotReleasedUnderTheReadersLock) {
  // The caller hands over its last reference to a finished restore whose callback holds an object
  // that takes the reader's lock when destroyed: releasing it under that lock would deadlock.
  const uint64_t piece = 64 << 10;
  std::vector<uint8_t> dest0, dest1;
  auto first = StagedPieces(&dest0, piece, 1);
  auto rest = StagedPieces(&dest1, piece, 2);
  for (auto& s : rest) s.file = 1;
  auto made = RestoreReader::Create(*engine_, StagedOptions(piece, 4));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto probe = std::make_shared<LocksTheReaderWhenDestroyed>(made->get());
  auto h1 = (*made)->Start(first, 0, [probe](uint32_t, const Status&) {});
  probe.reset();
  ASSERT_TRUE(h1.ok());
  ASSERT_TRUE((*h1)->Wait().ok());
  auto h2 = (*made)->Start(rest, 0, nullptr, nullptr, std::move(*h1));
  ASSERT_TRUE(h2.ok());
  FinishWithin(*h2, 10, "a restore after one released by the reader");
  EXPECT_TRUE((*h2)->Wait().ok());
  EXPECT_EQ(Mismatches(rest), 0u);
}

TEST_P(RestoreTest, AfterMustBeARestoreOfTheSameReader) {
  auto a = Reader(1 << 20);
  auto b = Reader(1 << 20);
  std::vector<uint8_t> dest;
  auto slices = StagedPieces(&dest, 64 << 10, 2);
  auto h = a->Start(slices);
  ASSERT_TRUE(h.ok());
  auto other = b->Start(slices, 0, nullptr, nullptr, *h);
  EXPECT_TRUE(other.status().IsInvalidArgument()) << other.status().ToString();
  EXPECT_TRUE((*h)->Wait().ok());
}

TEST_P(RestoreTest, StagedReadAsLargeAsTheWindowAfterASmallOne) {
  // The first restore leaves the staging ring's position at 16 KiB; the second needs the whole
  // 64 KiB window, which fits only if the emptied ring starts over at the window's start.
  auto reader = Reader(64 << 10);
  std::vector<uint8_t> dest((64 << 10) + 2, 0xEE);
  std::vector<SliceRead> small{SliceRead{0, 0, 16 << 10, dest.data() + 1, 0}};
  ASSERT_TRUE(reader->Restore(small).ok());
  EXPECT_EQ(Mismatches(small), 0u);
  std::vector<SliceRead> whole{SliceRead{1, 64 << 10, 64 << 10, dest.data() + 1, 0}};
  auto h = reader->Start(whole);
  ASSERT_TRUE(h.ok());
  // Before the fix this restore never finished.
  FinishWithin(*h, 10, "a staged read as large as the window");
  EXPECT_TRUE((*h)->Wait().ok());
  EXPECT_EQ(Mismatches(whole), 0u);
  EXPECT_EQ(CanariesOverwritten(dest, whole), 0u);
}

TEST_P(RestoreTest, FailedOpOfASplitVectoredReadFailsTheRestore) {
  // One 8 MiB read of 2048 entries split into two ops; only the second op fails.
  FaultInjectionIoEngine fi(*engine_);
  const uint64_t slice = 4096, n = kFileBytes / slice;
  auto dest = AllocAligned(kFileBytes);
  std::vector<SliceRead> slices;
  for (uint64_t i = 0; i < n; ++i) {
    slices.push_back(SliceRead{0, i * slice, slice, dest.get() + (n - 1 - i) * slice, 0});
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
  std::memset(dest.get(), 0, kFileBytes);
  ASSERT_TRUE((*made)->Restore(slices).ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_EQ((*made)->stats().vectored_reads, 3u);
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
  uint8_t* aligned = aligned_buf.get();
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
    auto h = (*made)->Start(slices, 0, nullptr, [&](const SliceRead& s, const uint8_t* bytes) {
      calls[s.tag]++;
      from_window += bytes != s.dest;
      for (uint64_t i = 0; i < s.len; ++i) wrong_bytes += bytes[i] != PatternByte(0, s.offset + i);
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

INSTANTIATE_TEST_SUITE_P(AllEngines, RestoreTest,
                         ::testing::Values(IoEngineKind::kPosix, IoEngineKind::kPreadv,
                                           IoEngineKind::kUring),
                         [](const auto& info) {
                           return std::string(IoEngineKindName(info.param));
                         });

}  // namespace
}  // namespace flatcake
