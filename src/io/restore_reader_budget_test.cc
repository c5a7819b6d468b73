#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <span>
#include <vector>

#include "io/fault_injection_io_engine.h"
#include "io/restore_reader.h"
#include "testing/engine_kinds.h"
#include "testing/pattern_file.h"
#include "testing/restore_test_fixture.h"

namespace flatcake {
namespace {

using testing::AllocAligned;
using testing::CanariesOverwritten;
using testing::FinishWithin;
using testing::LayerMajorSession;
using testing::Mismatches;
using testing::RestoreTest;
using testing::StagedOptions;
using testing::StagedPieces;

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
  auto slices = LayerMajorSession(0, 0, layers, planes, blocks, slice, dest.data());
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
  auto slices = LayerMajorSession(0, 0, layers, planes, blocks, slice, aligned.data());
  auto odd = LayerMajorSession(1, 0, layers, planes, blocks, slice, staged.data() + 1);
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

TEST_P(RestoreTest, AnInFlightBudgetBelowTheWindowBoundsTheReads) {
  // A window of 16 reads with a budget of 4: never more than 4 reads' bytes at the device, and
  // every byte lands. A budget larger than the window is the window.
  const uint64_t piece = 64 << 10, reads = 32;
  for (const uint64_t budget : {4 * piece, 64 * piece}) {
    std::vector<uint8_t> dest;
    auto slices = StagedPieces(&dest, piece, reads);
    InflightTrackingEngine tracking(*engine_);
    ReaderOptions o = StagedOptions(piece, 16);
    o.inflight_bytes = budget;
    auto made = RestoreReader::Create(tracking, o);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    ASSERT_TRUE((*made)->Restore(slices).ok());
    EXPECT_EQ(Mismatches(slices), 0u);
    EXPECT_GT(tracking.max_inflight(), 0u);
    EXPECT_LE(tracking.max_inflight(), std::min(budget, 16 * piece)) << budget;
  }
}

TEST_P(RestoreTest, AReadLargerThanTheInFlightBudgetStillGoes) {
  // 64 KiB reads under a 16 KiB budget: one read at a time, and the restore finishes.
  const uint64_t piece = 64 << 10, reads = 8;
  std::vector<uint8_t> dest;
  auto slices = StagedPieces(&dest, piece, reads);
  InflightTrackingEngine tracking(*engine_);
  ReaderOptions o = StagedOptions(piece, 4);
  o.inflight_bytes = 16 << 10;
  auto made = RestoreReader::Create(tracking, o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto h = (*made)->Start(slices);
  ASSERT_TRUE(h.ok());
  FinishWithin(*h, 10, "reads larger than the in-flight budget");
  EXPECT_TRUE((*h)->Wait().ok());
  EXPECT_EQ(Mismatches(slices), 0u);
  EXPECT_EQ(tracking.max_inflight(), piece);
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

INSTANTIATE_TEST_SUITE_P(AllEngines, RestoreTest, ::testing::ValuesIn(testing::kEngineKinds),
                         testing::EngineKindParamName);

}  // namespace
}  // namespace flatcake
