#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
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
using testing::kPairSlice;
using testing::Mismatches;
using testing::RestoreTest;
using testing::ReversedPairs;
using testing::StagedOptions;
using testing::StagedPieces;

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
  auto first = ReversedPairs(dest.data());
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

INSTANTIATE_TEST_SUITE_P(AllEngines, RestoreTest, ::testing::ValuesIn(testing::kEngineKinds),
                         testing::EngineKindParamName);

}  // namespace
}  // namespace flatcake
