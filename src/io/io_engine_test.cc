#include "io/io_engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
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
using testing::FillPattern;
using testing::PatternByte;
using testing::TempDir;

// Builds an engine of the given kind; `max_chunk` > 0 caps each system call / SQE, forcing short
// transfers that the engine must continue.
std::unique_ptr<IoEngine> MakeEngine(IoEngineKind kind, uint64_t max_chunk = 0) {
  switch (kind) {
    case IoEngineKind::kPosix: return std::make_unique<PosixIoEngine>(max_chunk);
    case IoEngineKind::kPreadv: return std::make_unique<PreadvIoEngine>(3, max_chunk);
    default: {
      auto e = UringIoEngine::Create({2, 16, max_chunk});
      return e.ok() ? std::move(e).value() : nullptr;
    }
  }
}

class EngineTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    engine_ = MakeEngine(GetParam());
    if (engine_ == nullptr) GTEST_SKIP() << "io_uring unavailable";
  }
  // Opens (creating) file `name`; returns -1 and skips when O_DIRECT is refused.
  int Open(const std::string& name, bool direct) {
    int flags = O_CREAT | O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0);
    int fd = ::open(dir_.File(name).c_str(), flags, 0644);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }

  TempDir dir_;
  std::unique_ptr<IoEngine> engine_;
  std::vector<int> fds_;
};

// Writes `bytes` of pattern with `chunk`-sized ops, then reads them back with ops of other sizes.
void RoundTrip(IoEngine& engine, uint32_t file, uint64_t bytes, uint64_t wchunk, uint64_t rchunk) {
  auto src = AllocAligned(bytes);
  auto dst = AllocAligned(bytes);
  FillPattern(src.get(), file, 0, bytes);
  std::memset(dst.get(), 0, bytes);
  std::vector<IoOp> writes, reads;
  for (uint64_t off = 0; off < bytes; off += wchunk) {
    writes.push_back(
        IoOp{IoOpcode::kWrite, file, off, src.get() + off, std::min(wchunk, bytes - off), off});
  }
  ASSERT_TRUE(ExecuteSync(engine, writes).ok());
  for (uint64_t off = 0; off < bytes; off += rchunk) {
    reads.push_back(
        IoOp{IoOpcode::kRead, file, off, dst.get() + off, std::min(rchunk, bytes - off), off});
  }
  ASSERT_TRUE(ExecuteSync(engine, reads).ok());
  ASSERT_EQ(0, std::memcmp(src.get(), dst.get(), bytes));
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
      for (int i = 0; i < 200; ++i) {
        uint64_t off = rng() % (kBytes - 8192);
        uint64_t len = 1 + rng() % 8192;
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

INSTANTIATE_TEST_SUITE_P(AllEngines, EngineTest,
                         ::testing::Values(IoEngineKind::kPosix, IoEngineKind::kPreadv,
                                           IoEngineKind::kUring),
                         [](const auto& info) {
                           return std::string(IoEngineKindName(info.param));
                         });

TEST(UringEngine, RegisteredBuffersUseFixedOps) {
  auto made = UringIoEngine::Create({2, 8, 0});
  if (!made.ok()) GTEST_SKIP() << made.status().ToString();
  auto& engine = *made.value();
  TempDir dir;
  ASSERT_TRUE(testing::WritePatternFile(dir.File("f"), 3, 1 << 20));
  int fd = ::open(dir.File("f").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_TRUE(engine.RegisterFiles({&fd, 1}).ok());
  EXPECT_TRUE(engine.files_registered());
  auto window = AllocAligned(1 << 20);
  IoBufferRegion region{window.get(), 1 << 20};
  Status reg = engine.RegisterBuffers({&region, 1});
  if (!reg.ok()) {
    ::close(fd);
    GTEST_SKIP() << reg.ToString();
  }
  std::vector<IoOp> ops;
  for (uint64_t off = 0; off < (1 << 20); off += 65536) {
    ops.push_back(IoOp{IoOpcode::kRead, 0, off, window.get() + off, 65536, 0});
  }
  ASSERT_TRUE(ExecuteSync(engine, ops).ok());
  for (uint64_t i = 0; i < (1 << 20); i += 333) ASSERT_EQ(window[i], PatternByte(3, i));
  EXPECT_EQ(engine.stats().fixed_buffer_sqes, ops.size());
  engine.UnregisterBuffers({&region, 1});
  std::vector<uint8_t> plain(4096);
  IoOp op{IoOpcode::kRead, 0, 0, plain.data(), 4096, 0};
  ASSERT_TRUE(ExecuteSync(engine, {&op, 1}).ok());
  EXPECT_EQ(engine.stats().fixed_buffer_sqes, ops.size());
  ::close(fd);
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
