#include "io/io_engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "io/fault_injection_io_engine.h"
#include "io/uring_io_engine.h"
#include "testing/engine_kinds.h"
#include "testing/io_engine_fixture.h"
#include "testing/pattern_file.h"
#include "util/temp_dir.h"

namespace flatcake {
namespace {

using testing::AllocAligned;
using testing::EngineTest;
using testing::FillPattern;
using testing::MakeEngine;
using testing::PatternByte;

// Writes `bytes` of pattern with `chunk`-sized ops, then reads them back with ops of other sizes.
void RoundTrip(IoEngine& engine, uint32_t file, uint64_t bytes, uint64_t wchunk, uint64_t rchunk) {
  auto src = AllocAligned(bytes);
  auto dst = AllocAligned(bytes);
  FillPattern(src.data(), file, 0, bytes);
  std::memset(dst.data(), 0, bytes);
  std::vector<IoOp> writes, reads;
  for (uint64_t off = 0; off < bytes; off += wchunk) {
    writes.push_back(
        IoOp{IoOpcode::kWrite, file, off, src.data() + off, std::min(wchunk, bytes - off), off});
  }
  ASSERT_TRUE(ExecuteSync(engine, writes).ok());
  for (uint64_t off = 0; off < bytes; off += rchunk) {
    reads.push_back(
        IoOp{IoOpcode::kRead, file, off, dst.data() + off, std::min(rchunk, bytes - off), off});
  }
  ASSERT_TRUE(ExecuteSync(engine, reads).ok());
  ASSERT_EQ(0, std::memcmp(src.data(), dst.data(), bytes));
}

TEST_P(EngineTest, BufferedRoundTripTwoFiles) {
  int a = Open("a", false), b = Open("b", false);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  const int fds[] = {a, b};
  ASSERT_TRUE(engine_->RegisterFiles(fds).ok());
  RoundTrip(*engine_, 0, (3 << 20) + 123, 1 << 20, 12345);
  RoundTrip(*engine_, 1, 1 << 20, 4096, 65536);
}

TEST_P(EngineTest, DirectRoundTrip) {
  int fd = Open("d", true);
  if (fd < 0) GTEST_SKIP() << "O_DIRECT refused: " << std::strerror(errno);
  ASSERT_TRUE(engine_->RegisterFiles({&fd, 1}).ok());
  RoundTrip(*engine_, 0, 16 << 20, 1 << 20, 256 << 10);
}

TEST_P(EngineTest, ReadPastEndIsIOErrorWithFileAndOffset) {
  int fd = Open("short", false);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(testing::WritePatternFile(dir_.File("short"), 0, 10000));
  ASSERT_TRUE(engine_->RegisterFiles({&fd, 1}).ok());
  std::vector<uint8_t> buf(8192);
  IoOp op{IoOpcode::kRead, 0, 4096, buf.data(), 8192, 7};
  Status s = ExecuteSync(*engine_, {&op, 1});
  ASSERT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(s.message().find("unexpected end of file"), std::string_view::npos) << s.ToString();
  EXPECT_NE(s.message().find("file 0 offset 10000"), std::string_view::npos) << s.ToString();
  // The bytes before the end did arrive.
  EXPECT_EQ(buf[0], PatternByte(0, 4096));
  EXPECT_EQ(buf[10000 - 4096 - 1], PatternByte(0, 9999));
}

TEST_P(EngineTest, UnregisteredFileIndexIsInvalidArgument) {
  int fd = Open("x", false);
  ASSERT_TRUE(engine_->RegisterFiles({&fd, 1}).ok());
  std::vector<uint8_t> buf(4096);
  IoOp op{IoOpcode::kRead, 5, 0, buf.data(), 4096, 0};
  Status s = ExecuteSync(*engine_, {&op, 1});
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("file 5"), std::string_view::npos) << s.ToString();
}

TEST_P(EngineTest, ShortTransfersAreContinued) {
  auto engine = MakeEngine(GetParam(), /*max_chunk=*/4096 + 512);
  int fd = Open("s", false);
  ASSERT_TRUE(engine->RegisterFiles({&fd, 1}).ok());
  RoundTrip(*engine, 0, (1 << 20) + 7, 300000, 1 << 20);
  if (auto* uring = dynamic_cast<UringIoEngine*>(engine.get())) {
    EXPECT_GT(uring->stats().resubmissions, 200u);
  }
}

TEST_P(EngineTest, ConcurrentSubmitters) {
  int fd = Open("c", false);
  constexpr uint64_t kBytes = 4 << 20;
  ASSERT_TRUE(testing::WritePatternFile(dir_.File("c"), 0, kBytes));
  ASSERT_TRUE(engine_->RegisterFiles({&fd, 1}).ok());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<uint8_t> buf(kBytes);
      std::vector<IoOp> ops;
      // 200 reads at random places, each in its own 8 KiB slot of the buffer: ops of one batch
      // run on different engine threads, so they must not write the same bytes.
      std::vector<uint64_t> slots(kBytes / 8192);
      for (uint64_t k = 0; k < slots.size(); ++k) slots[k] = k;
      std::shuffle(slots.begin(), slots.end(), rng);
      for (int i = 0; i < 200; ++i) {
        uint64_t off = slots[i] * 8192 + rng() % 4096;
        uint64_t len = 1 + rng() % 4096;
        ops.push_back(IoOp{IoOpcode::kRead, 0, off, buf.data() + off, len, 0});
      }
      if (!ExecuteSync(*engine_, ops).ok()) ++bad;
      for (const auto& op : ops) {
        for (uint64_t i = 0; i < op.len; i += 97) {
          if (buf[op.offset + i] != PatternByte(0, op.offset + i)) ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_P(EngineTest, InjectedErrorsCarryFileAndOffset) {
  int a = Open("a", false), b = Open("b", false);
  const int fds[] = {a, b};
  FaultInjectionIoEngine fi(*engine_);
  ASSERT_TRUE(fi.RegisterFiles(fds).ok());
  std::vector<uint8_t> buf(1 << 16, 1);

  FaultSpec spec;
  spec.err = ENOSPC;
  spec.file = 1;
  fi.SetWriteFault(spec);
  IoOp w0{IoOpcode::kWrite, 0, 0, buf.data(), 65536, 0};
  IoOp w1{IoOpcode::kWrite, 1, 8192, buf.data(), 4096, 1};
  EXPECT_TRUE(ExecuteSync(fi, {&w0, 1}).ok());  // other file: untouched
  Status s = ExecuteSync(fi, {&w1, 1});
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  EXPECT_NE(s.message().find("write file 1 offset 8192"), std::string_view::npos) << s.ToString();

  fi.SetReadError(EIO, /*every_nth=*/2);
  IoOp r{IoOpcode::kRead, 0, 4096, buf.data(), 4096, 0};
  int failures = 0;
  for (int i = 0; i < 6; ++i) {
    Status rs = ExecuteSync(fi, {&r, 1});
    if (!rs.ok()) {
      ++failures;
      EXPECT_TRUE(rs.IsIOError());
      EXPECT_NE(rs.message().find("read file 0 offset 4096"), std::string_view::npos);
    }
  }
  EXPECT_EQ(failures, 3);
  EXPECT_EQ(fi.counters().read_errors, 3u);
  EXPECT_EQ(fi.counters().write_errors, 1u);
  fi.Clear();
  EXPECT_TRUE(ExecuteSync(fi, {&r, 1}).ok());
}

TEST_P(EngineTest, ShortReadAndTornWriteInjection) {
  int fd = Open("t", false);
  FaultInjectionIoEngine fi(*engine_);
  ASSERT_TRUE(fi.RegisterFiles({&fd, 1}).ok());
  std::vector<uint8_t> zeros(65536, 0);
  IoOp init{IoOpcode::kWrite, 0, 0, zeros.data(), zeros.size(), 0};
  ASSERT_TRUE(ExecuteSync(fi, {&init, 1}).ok());

  // Torn write: only the first 8 KiB of the 32 KiB land.
  std::vector<uint8_t> data(32768, 0xAB);
  FaultSpec torn;
  torn.kind = FaultSpec::Kind::kShort;
  torn.prefix_bytes = 8192;
  fi.SetWriteFault(torn);
  IoOp w{IoOpcode::kWrite, 0, 16384, data.data(), data.size(), 0};
  Status ws = ExecuteSync(fi, {&w, 1});
  EXPECT_TRUE(ws.IsIOError()) << ws.ToString();
  EXPECT_NE(ws.message().find("offset 24576"), std::string_view::npos) << ws.ToString();
  fi.Clear();
  std::vector<uint8_t> back(65536, 0xFF);
  IoOp rall{IoOpcode::kRead, 0, 0, back.data(), back.size(), 0};
  ASSERT_TRUE(ExecuteSync(fi, {&rall, 1}).ok());
  EXPECT_EQ(back[16384], 0xAB);
  EXPECT_EQ(back[16384 + 8191], 0xAB);
  EXPECT_EQ(back[16384 + 8192], 0);

  // Short read: the default prefix (half, 4 KiB-aligned) arrives, then end of file is reported.
  FaultSpec shortr;
  shortr.kind = FaultSpec::Kind::kShort;
  fi.SetReadFault(shortr);
  std::vector<uint8_t> rb(32768, 0x11);
  IoOp r{IoOpcode::kRead, 0, 16384, rb.data(), rb.size(), 0};
  Status rs = ExecuteSync(fi, {&r, 1});
  EXPECT_TRUE(rs.IsIOError());
  EXPECT_NE(rs.message().find("unexpected end of file"), std::string_view::npos);
  EXPECT_EQ(rb[0], 0xAB);
  EXPECT_EQ(rb[16383], 0);     // file bytes 32767: zeros from init
  EXPECT_EQ(rb[16384], 0x11);  // never transferred
  EXPECT_EQ(fi.counters().torn_writes, 1u);
  EXPECT_EQ(fi.counters().short_reads, 1u);
}

// The write log holds each write that reached the file (a torn one's landed part), with the bytes
// it overwrote, until the file is forgotten as synced.
TEST_P(EngineTest, WriteLogRecordsUnsyncedWritesWithTheirOldBytes) {
  int fds[2] = {Open("log0", false), Open("log1", false)};
  FaultInjectionIoEngine fi(*engine_);
  ASSERT_TRUE(fi.RegisterFiles(fds).ok());
  std::vector<uint8_t> old(16384, 0x11), fresh(16384, 0x22);
  IoOp init[2] = {{IoOpcode::kWrite, 0, 0, old.data(), old.size(), 0},
                  {IoOpcode::kWrite, 1, 0, old.data(), old.size(), 1}};
  ASSERT_TRUE(ExecuteSync(fi, init).ok());  // before the log starts: not logged
  fi.StartWriteLog();
  IoOp w0{IoOpcode::kWrite, 0, 4096, fresh.data(), 8192, 0};
  ASSERT_TRUE(ExecuteSync(fi, {&w0, 1}).ok());
  FaultSpec torn;
  torn.kind = FaultSpec::Kind::kShort;
  torn.prefix_bytes = 4096;
  fi.SetWriteFault(torn);
  IoOp w1{IoOpcode::kWrite, 1, 0, fresh.data(), 12288, 1};
  EXPECT_FALSE(ExecuteSync(fi, {&w1, 1}).ok());
  fi.ClearWrites();

  std::vector<LoggedWrite> log = fi.UnsyncedWrites();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].file, 0u);
  EXPECT_EQ(log[0].offset, 4096u);
  EXPECT_EQ(log[0].before, std::vector<uint8_t>(8192, 0x11));
  EXPECT_EQ(log[0].after, std::vector<uint8_t>(8192, 0x22));
  EXPECT_EQ(log[1].file, 1u);
  EXPECT_EQ(log[1].after.size(), 4096u);  // only the part that landed
  EXPECT_EQ(log[1].before, std::vector<uint8_t>(4096, 0x11));

  fi.ForgetWrites(0);
  log = fi.UnsyncedWrites();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].file, 1u);
  fi.ForgetWrites();
  EXPECT_TRUE(fi.UnsyncedWrites().empty());
  fi.StopWriteLog();
  ASSERT_TRUE(ExecuteSync(fi, {&w0, 1}).ok());
  EXPECT_TRUE(fi.UnsyncedWrites().empty());
}

TEST_P(EngineTest, FaultByRangeOnlyHitsOverlappingOps) {
  int fd = Open("r", false);
  ASSERT_TRUE(testing::WritePatternFile(dir_.File("r"), 0, 1 << 20));
  FaultInjectionIoEngine fi(*engine_);
  ASSERT_TRUE(fi.RegisterFiles({&fd, 1}).ok());
  FaultSpec spec;
  spec.range_begin = 100000;
  spec.range_end = 100001;
  fi.SetReadFault(spec);
  std::vector<uint8_t> buf(1 << 20);
  std::vector<IoOp> ops;
  for (uint64_t off = 0; off < (1 << 20); off += 65536) {
    ops.push_back(IoOp{IoOpcode::kRead, 0, off, buf.data() + off, 65536, off});
  }
  Status s = ExecuteSync(fi, ops);
  EXPECT_TRUE(s.IsIOError());
  EXPECT_NE(s.message().find("offset 65536"), std::string_view::npos) << s.ToString();
  EXPECT_EQ(fi.counters().read_errors, 1u);
}

// A bounded run lands every byte with every engine, whether the budget holds several ops, less
// than one (each op then goes out alone), or all of them.
TEST_P(EngineTest, BoundedReadsLandEveryByte) {
  int fd = Open("bounded", false);
  ASSERT_GE(fd, 0);
  constexpr uint64_t kBytes = (2 << 20) + 4096 * 3 + 17;
  ASSERT_TRUE(testing::WritePatternFile(dir_.File("bounded"), 4, kBytes));
  ASSERT_TRUE(engine_->RegisterFiles({&fd, 1}).ok());
  for (uint64_t budget : {uint64_t{3 * 65536}, uint64_t{1000}, uint64_t{1} << 30}) {
    auto dst = AllocAligned(kBytes);
    std::memset(dst.data(), 0, kBytes);
    std::vector<IoOp> ops;
    for (uint64_t off = 0; off < kBytes; off += 65536) {
      ops.push_back(
          IoOp{IoOpcode::kRead, 0, off, dst.data() + off, std::min<uint64_t>(65536, kBytes - off)});
    }
    Status s = ExecuteSyncBounded(*engine_, ops, budget);
    ASSERT_TRUE(s.ok()) << s.ToString();
    uint64_t bad = 0;
    for (uint64_t i = 0; i < kBytes; ++i) bad += dst[i] != PatternByte(4, i);
    EXPECT_EQ(bad, 0u) << "budget " << budget;
  }
}

INSTANTIATE_TEST_SUITE_P(AllEngines, EngineTest, ::testing::ValuesIn(testing::kEngineKinds),
                         testing::EngineKindParamName);

// An engine that completes ops later, on its own thread, in a scrambled order, and records how
// many bytes were in flight at most: for checking ExecuteSyncBounded's budget and error handling.
class DeferredEngine : public IoEngine {
 public:
  explicit DeferredEngine(uint64_t fail_index = ~0ull) : fail_index_(fail_index) {
    worker_ = std::thread([this] { Loop(); });
  }
  ~DeferredEngine() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  Status RegisterFiles(std::span<const int>) override { return Status::OK(); }
  std::string_view name() const override { return "deferred"; }
  void Submit(std::span<const IoOp> ops, IoCompletionSink* sink) override {
    std::lock_guard<std::mutex> lock(mu_);
    submits_while_busy_ += inflight_ > 0;
    for (const IoOp& op : ops) {
      pending_.push_back({op, sink, submitted_++});
      inflight_ += op.len;
      max_inflight_ = std::max(max_inflight_, inflight_);
    }
    cv_.notify_all();
  }
  uint64_t max_inflight() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_inflight_;
  }
  uint64_t submitted() {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  // Submit calls made while earlier ops were still in flight.
  uint64_t submits_while_busy() {
    std::lock_guard<std::mutex> lock(mu_);
    return submits_while_busy_;
  }

 private:
  struct Pending {
    IoOp op;
    IoCompletionSink* sink;
    uint64_t index;  // submission order
  };
  void Loop() {
    std::mt19937 rng(7);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;
      // Let a few ops gather, then complete a random one of them.
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lock.lock();
      const size_t pick = rng() % pending_.size();
      Pending p = pending_[pick];
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(pick));
      inflight_ -= p.op.len;
      lock.unlock();
      p.sink->OnIoComplete(
          p.op.tag, p.index == fail_index_ ? Status::IOError("injected failure") : Status::OK());
      lock.lock();
    }
  }

  const uint64_t fail_index_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> pending_;
  uint64_t inflight_ = 0, max_inflight_ = 0, submitted_ = 0, submits_while_busy_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

std::vector<IoOp> OpsOfLengths(std::initializer_list<uint64_t> lens, int copies) {
  std::vector<IoOp> ops;
  for (int c = 0; c < copies; ++c) {
    for (uint64_t len : lens) ops.push_back(IoOp{IoOpcode::kRead, 0, 0, nullptr, len});
  }
  return ops;
}

// The budget bounds the bytes in flight and is used: completions (out of order, on another
// thread) let the next ops out at once, so the run reaches the budget rather than draining.
TEST(ExecuteSyncBounded, KeepsInFlightBytesWithinTheBudget) {
  const auto ops = OpsOfLengths({4096, 8192, 4096, 12288}, 40);
  for (uint64_t budget : {uint64_t{16384}, uint64_t{40960}}) {
    DeferredEngine engine;
    ASSERT_TRUE(ExecuteSyncBounded(engine, ops, budget).ok());
    EXPECT_EQ(engine.submitted(), ops.size());
    EXPECT_LE(engine.max_inflight(), budget);
    EXPECT_GE(engine.max_inflight(), budget - 8192) << "the window never filled";
    // A sliding window, not waves: most ops went out while others were still in flight.
    EXPECT_GT(engine.submits_while_busy(), ops.size() / 2);
  }
  // An op larger than the budget goes out alone instead of never.
  DeferredEngine engine;
  ASSERT_TRUE(ExecuteSyncBounded(engine, ops, 1000).ok());
  EXPECT_EQ(engine.submitted(), ops.size());
  EXPECT_EQ(engine.max_inflight(), 12288u);
}

// After the first error nothing more is submitted; the error comes back once the ops in flight
// are back.
TEST(ExecuteSyncBounded, StopsSubmittingAfterTheFirstError) {
  const auto ops = OpsOfLengths({4096}, 200);
  DeferredEngine engine(/*fail_index=*/10);
  Status s = ExecuteSyncBounded(engine, ops, 4 * 4096);
  ASSERT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(s.message().find("injected failure"), std::string_view::npos) << s.ToString();
  EXPECT_LT(engine.submitted(), 10u + 4u + 1u);  // the failed op's window, at most
  EXPECT_TRUE(ExecuteSyncBounded(engine, {}, 4096).ok());
}

// kAuto falls back to the preadv pool when io_uring ring setup fails. Here setup is made to fail
// for real: a queue depth of 65536 needs a ring of 65537 entries, beyond the 32768 the kernel
// grants without IORING_SETUP_CLAMP (which the engine does not ask for), so io_uring_queue_init
// returns EINVAL. An explicit kUring request with the same settings is an error, not a fallback.
TEST(MakeIoEngine, AutoFallsBackToPreadvWhenRingSetupFails) {
  constexpr uint32_t kTooDeep = 65536;
  const bool uring_works = UringIoEngine::Create({1, 8, 0}).ok();
  auto direct = UringIoEngine::Create({1, kTooDeep, 0});
  ASSERT_FALSE(direct.ok()) << "the kernel accepted a ring of " << kTooDeep + 1 << " entries";
  if (uring_works) {
    EXPECT_TRUE(direct.status().IsInvalidArgument()) << direct.status().ToString();
    EXPECT_NE(direct.status().message().find("io_uring_queue_init"), std::string_view::npos)
        << direct.status().ToString();
    EXPECT_NE(direct.status().message().find("queue depth must be at most 32767"),
              std::string_view::npos)
        << direct.status().ToString();
  }

  std::string note;
  auto made = MakeIoEngine({IoEngineKind::kAuto, 1, kTooDeep}, &note);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  IoEngine& engine = **made;
  EXPECT_EQ(engine.name(), "preadv");
  EXPECT_FALSE(note.empty());
  EXPECT_NE(note.find("preadv"), std::string::npos) << note;
  if (uring_works) EXPECT_NE(note.find("io_uring_queue_init"), std::string::npos) << note;

  // The fallback engine works: write, then read back.
  TempDir dir;
  int fd = ::open(dir.File("fb").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(engine.RegisterFiles({&fd, 1}).ok());
  RoundTrip(engine, 0, (256 << 10) + 77, 65536, 10000);
  ::close(fd);

  std::string uring_note;
  auto uring = MakeIoEngine({IoEngineKind::kUring, 1, kTooDeep}, &uring_note);
  ASSERT_FALSE(uring.ok());
  if (uring_works) {
    EXPECT_TRUE(uring.status().IsInvalidArgument()) << uring.status().ToString();
    EXPECT_NE(uring.status().message().find("queue depth"), std::string_view::npos)
        << uring.status().ToString();
  }
  EXPECT_TRUE(uring_note.empty()) << uring_note;  // no silent fallback
}

// In a build without io_uring (FLATCAKE_WITH_URING=OFF) `uring` is refused with a message that
// says so, and `auto` falls back to the preadv pool with a note that says why.
TEST(MakeIoEngine, BuildWithoutUringRefusesUringAndAutoSaysWhy) {
  if (UringIoEngine::CompiledIn()) GTEST_SKIP() << "this build has the io_uring engine";
  std::string note;
  auto uring = MakeIoEngine({IoEngineKind::kUring, 2, 32}, &note);
  ASSERT_FALSE(uring.ok());
  EXPECT_EQ(uring.status().code(), StatusCode::kUnsupported) << uring.status().ToString();
  EXPECT_NE(uring.status().message().find("no io_uring"), std::string_view::npos)
      << uring.status().ToString();
  EXPECT_TRUE(note.empty()) << note;
  auto any = MakeIoEngine({IoEngineKind::kAuto, 2, 32}, &note);
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ((*any)->name(), "preadv");
  EXPECT_NE(note.find("no io_uring"), std::string::npos) << note;
}

TEST(MakeIoEngine, KindsAndNames) {
  for (auto kind :
       {IoEngineKind::kAuto, IoEngineKind::kUring, IoEngineKind::kPreadv, IoEngineKind::kPosix}) {
    auto parsed = ParseIoEngineKind(IoEngineKindName(kind));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_TRUE(ParseIoEngineKind("spdk").status().IsInvalidArgument());
  std::string note;
  auto preadv = MakeIoEngine({IoEngineKind::kPreadv, 2, 4}, &note);
  ASSERT_TRUE(preadv.ok());
  EXPECT_EQ((*preadv)->name(), "preadv");
  auto posix = MakeIoEngine({IoEngineKind::kPosix, 1, 1});
  ASSERT_TRUE(posix.ok());
  EXPECT_EQ((*posix)->name(), "posix");
  auto any = MakeIoEngine({IoEngineKind::kAuto, 2, 32}, &note);
  ASSERT_TRUE(any.ok());
  // Auto picks io_uring when it works and says why when it does not.
  if ((*any)->name() == "preadv") EXPECT_FALSE(note.empty());
  EXPECT_TRUE(MakeIoEngine({IoEngineKind::kUring, 0, 4}).status().IsInvalidArgument());
}

}  // namespace
}  // namespace flatcake
