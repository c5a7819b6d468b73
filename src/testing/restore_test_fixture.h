// The fixture of the restore reader tests: two pattern files registered with an engine of the
// parameter's kind, and the slice lists that several topics' tests share. Test-only.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "io/posix_io_engine.h"
#include "io/preadv_io_engine.h"
#include "io/restore_reader.h"
#include "io/uring_io_engine.h"
#include "store/segment_layout.h"
#include "testing/pattern_file.h"
#include "util/temp_dir.h"

namespace flatcake::testing {

inline constexpr uint64_t kFileBytes = 8 << 20;

// Two pattern files, registered with an engine of the test's kind.
class RestoreTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    for (uint32_t f = 0; f < 2; ++f) {
      const std::string path = dir_.File("f" + std::to_string(f));
      ASSERT_TRUE(WritePatternFile(path, f, kFileBytes));
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
inline uint64_t Mismatches(const std::vector<SliceRead>& slices) {
  uint64_t bad = 0;
  for (const auto& s : slices) {
    for (uint64_t i = 0; i < s.len; ++i) bad += s.dest[i] != PatternByte(s.file, s.offset + i);
  }
  return bad;
}

// Counts bytes of `buf` outside every slice's destination that no longer hold the 0xEE canary.
inline uint64_t CanariesOverwritten(const std::vector<uint8_t>& buf,
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

// A session as the store lays it out on SSD: one segment (SegmentLayout, layer-major) at
// `file_base`, restored into block-contiguous destinations [block][layer][plane].
inline std::vector<SliceRead> LayerMajorSession(uint32_t file, uint64_t file_base, uint32_t layers,
                                                uint32_t planes, uint32_t blocks, uint64_t slice,
                                                uint8_t* dest) {
  std::vector<SliceRead> slices;
  const KvLayout kv{layers, planes, slice};
  const SegmentLayout seg(kv, blocks);
  for (uint32_t l = 0; l < layers; ++l) {
    for (uint32_t p = 0; p < planes; ++p) {
      for (uint32_t b = 0; b < blocks; ++b) {
        const uint64_t off = file_base + seg.SliceOffset(l, p, b);
        uint8_t* out = dest + b * kv.block_bytes() + (uint64_t{l} * planes + p) * slice;
        slices.push_back(SliceRead{file, off, slice, out, l});
      }
    }
  }
  return slices;
}

// 16 slices of 16 KiB from the start of file 0 whose destinations in `dest` (16 slices long,
// aligned) come in pairs that continue each other, the pairs in reversed order: a vectored read
// of them has 8 iovecs.
inline constexpr uint64_t kPairSlice = 16 << 10;
inline std::vector<SliceRead> ReversedPairs(uint8_t* dest) {
  std::vector<SliceRead> slices;
  for (uint64_t i = 0; i < 16; ++i) {
    const uint64_t pair = 7 - i / 2;
    slices.push_back(
        SliceRead{0, i * kPairSlice, kPairSlice, dest + (pair * 2 + i % 2) * kPairSlice, 0});
  }
  return slices;
}

// `reads` staged reads of `piece` bytes of file 0, back to back into one buffer (a byte off, so
// nothing is read in place).
inline std::vector<SliceRead> StagedPieces(std::vector<uint8_t>* dest, uint64_t piece,
                                           uint64_t reads) {
  dest->assign(reads * piece + 1, 0xEE);
  std::vector<SliceRead> slices;
  for (uint64_t i = 0; i < reads; ++i) {
    slices.push_back(SliceRead{0, i * piece, piece, dest->data() + 1 + i * piece, 0});
  }
  return slices;
}

inline ReaderOptions StagedOptions(uint64_t piece, uint64_t window_pieces) {
  ReaderOptions o;
  o.window_bytes = window_pieces * piece;
  o.coalesce.max_io = piece;
  o.allow_vectored = false;
  return o;
}

// Waits up to `seconds` for `h` to finish. A restore that never finishes would hang the reader's
// destructor, so the test binary exits instead of hanging.
inline void FinishWithin(const std::shared_ptr<ReaderHandle>& h, int seconds, const char* what) {
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

}  // namespace flatcake::testing
