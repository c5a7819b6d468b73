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

// Why MakeEngine(kUring) returned nullptr: a build without the engine, or a kernel refusing rings.
std::string UringSkipReason() {
  auto e = UringIoEngine::Create({2, 16, 0});
  return e.ok() ? "io_uring unavailable" : e.status().ToString();
}

class EngineTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    engine_ = MakeEngine(GetParam());
    if (engine_ == nullptr) GTEST_SKIP() << UringSkipReason();
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

// Builds iovecs over `buf` that take the file's `chunk`-sized pieces in reverse order: piece i of
// the file lands at the buffer's piece (n - 1 - i), so a misplaced or skipped entry shows.
std::vector<iovec> ReversedIoVecs(uint8_t* buf, uint64_t bytes, uint64_t chunk) {
  std::vector<iovec> iov;
  const uint64_t n = bytes / chunk;
  for (uint64_t i = 0; i < n; ++i) iov.push_back(iovec{buf + (n - 1 - i) * chunk, chunk});
  return iov;
}

uint64_t ReversedMismatches(const uint8_t* buf, uint32_t file, uint64_t file_off, uint64_t bytes,
                            uint64_t chunk) {
  uint64_t bad = 0;
  const uint64_t n = bytes / chunk;
  for (uint64_t i = 0; i < n; ++i) {
    for (uint64_t j = 0; j < chunk; ++j) {
      bad += buf[(n - 1 - i) * chunk + j] != PatternByte(file, file_off + i * chunk + j);
    }
  }
  return bad;
}

IoOp VectoredOp(IoOpcode opcode, uint32_t file, uint64_t offset, const std::vector<iovec>& iov) {
  IoOp op{opcode, file, offset, iov.empty() ? nullptr : iov[0].iov_base, 0, 0};
  for (const iovec& v : iov) op.len += v.iov_len;
  op.iov = iov.data();
  op.iovcnt = static_cast<uint32_t>(iov.size());
  return op;
}

TEST_P(EngineTest, VectoredReadBufferedAndDirect) {
  constexpr uint64_t kBytes = 2 << 20, kChunk = 16384;
  ASSERT_TRUE(testing::WritePatternFile(dir_.File("v"), 2, kBytes));
  int buffered = Open("v", false);
  ASSERT_GE(buffered, 0);
  int direct = Open("v", true);
  const bool have_direct = direct >= 0;
  const int fds[] = {buffered, have_direct ? direct : buffered};
  ASSERT_TRUE(engine_->RegisterFiles(fds).ok());
  for (uint32_t file : {0u, 1u}) {
    auto dst = AllocAligned(kBytes);
    std::memset(dst.get(), 0, kBytes);
    // Two ops, each one vectored read of 64 reversed 16 KiB pieces.
    auto iov_a = ReversedIoVecs(dst.get(), kBytes / 2, kChunk);
    auto iov_b = ReversedIoVecs(dst.get() + kBytes / 2, kBytes / 2, kChunk);
    IoOp ops[] = {VectoredOp(IoOpcode::kRead, file, 0, iov_a),
                  VectoredOp(IoOpcode::kRead, file, kBytes / 2, iov_b)};
    Status st = ExecuteSync(*engine_, ops);
    ASSERT_TRUE(st.ok()) << "file " << file << ": " << st.ToString();
    EXPECT_EQ(ReversedMismatches(dst.get(), 2, 0, kBytes / 2, kChunk), 0u);
    EXPECT_EQ(ReversedMismatches(dst.get() + kBytes / 2, 2, kBytes / 2, kBytes / 2, kChunk), 0u);
  }
  if (auto* uring = dynamic_cast<UringIoEngine*>(engine_.get())) {
    EXPECT_GE(uring->stats().vectored_sqes, 4u);
  }
  if (!have_direct) GTEST_SKIP() << "O_DIRECT refused; buffered part passed";
}

TEST_P(EngineTest, VectoredWriteGathersInListOrder) {
  int fd = Open("w", true);
  if (fd < 0) fd = Open("w", false);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(engine_->RegisterFiles({&fd, 1}).ok());
  constexpr uint64_t kBytes = 1 << 20, kChunk = 8192;
  auto src = AllocAligned(kBytes);
  // Piece i of the file comes from the buffer's piece (n - 1 - i): fill the buffer accordingly.
  const uint64_t n = kBytes / kChunk;
  for (uint64_t i = 0; i < n; ++i)
    FillPattern(src.get() + (n - 1 - i) * kChunk, 4, i * kChunk, kChunk);
  auto iov = ReversedIoVecs(src.get(), kBytes, kChunk);
  IoOp w = VectoredOp(IoOpcode::kWrite, 0, 0, iov);
  ASSERT_TRUE(ExecuteSync(*engine_, {&w, 1}).ok());
  auto back = AllocAligned(kBytes);
  IoOp r{IoOpcode::kRead, 0, 0, back.get(), kBytes, 0};
  ASSERT_TRUE(ExecuteSync(*engine_, {&r, 1}).ok());
  uint64_t bad = 0;
  for (uint64_t i = 0; i < kBytes; ++i) bad += back[i] != PatternByte(4, i);
  EXPECT_EQ(bad, 0u);
}

TEST_P(EngineTest, VectoredShortTransfersContinueAcrossIovecBoundaries) {
  // Every system call / SQE moves at most 4.5 KiB, and the iovecs have odd sizes, so transfers
  // stop mid-entry and on entry boundaries alike.
  auto engine = MakeEngine(GetParam(), /*max_chunk=*/4096 + 512);
  ASSERT_NE(engine, nullptr);
  constexpr uint64_t kBytes = 300000;
  ASSERT_TRUE(testing::WritePatternFile(dir_.File("s"), 5, kBytes + 4096));
  int fd = Open("s", false);
  ASSERT_TRUE(engine->RegisterFiles({&fd, 1}).ok());
  std::vector<uint8_t> dst(kBytes * 2, 0xEE);
  std::vector<iovec> iov;
  std::vector<uint64_t> at;  // destination offset of each entry
  std::mt19937_64 rng(3);
  uint64_t total = 0, dpos = 1;
  while (total < kBytes) {
    const uint64_t len = std::min<uint64_t>(1 + rng() % 9000, kBytes - total);
    iov.push_back(iovec{dst.data() + dpos, len});
    at.push_back(dpos);
    total += len;
    dpos += len + 2;  // 2 canary bytes between entries
  }
  ASSERT_LT(dpos, dst.size());
  IoOp op = VectoredOp(IoOpcode::kRead, 0, 777, iov);
  ASSERT_TRUE(ExecuteSync(*engine, {&op, 1}).ok());
  uint64_t bad = 0, file_off = 777;
  for (size_t i = 0; i < iov.size(); ++i) {
    for (uint64_t j = 0; j < iov[i].iov_len; ++j) {
      bad += dst[at[i] + j] != PatternByte(5, file_off + j);
    }
    file_off += iov[i].iov_len;
    bad += dst[at[i] + iov[i].iov_len] != 0xEE;  // canary after each entry
  }
  EXPECT_EQ(bad, 0u);
  if (auto* uring = dynamic_cast<UringIoEngine*>(engine.get())) {
    EXPECT_GT(uring->stats().resubmissions, kBytes / (4096 + 512) - 2);
  }
}

TEST_P(EngineTest, VectoredOpLongerThanIovMax) {
  // 3000 entries: more than one system call or SQE may take; the engine continues past each
  // kMaxIoVecs batch.
  constexpr uint64_t kChunk = 512, kCount = 3000, kBytes = kChunk * kCount;
  ASSERT_TRUE(testing::WritePatternFile(dir_.File("m"), 6, kBytes));
  int fd = Open("m", false);
  ASSERT_TRUE(engine_->RegisterFiles({&fd, 1}).ok());
  std::vector<uint8_t> dst(kBytes, 0);
  auto iov = ReversedIoVecs(dst.data(), kBytes, kChunk);
  ASSERT_GT(iov.size(), kMaxIoVecs);
  IoOp op = VectoredOp(IoOpcode::kRead, 0, 0, iov);
  ASSERT_TRUE(ExecuteSync(*engine_, {&op, 1}).ok());
  EXPECT_EQ(ReversedMismatches(dst.data(), 6, 0, kBytes, kChunk), 0u);
}

TEST_P(EngineTest, VectoredOpWithWrongLengthIsInvalidArgument) {
  int fd = Open("x", false);
  ASSERT_TRUE(engine_->RegisterFiles({&fd, 1}).ok());
  std::vector<uint8_t> buf(8192);
  std::vector<iovec> iov = {{buf.data(), 4096}, {buf.data() + 4096, 4096}};
  IoOp op = VectoredOp(IoOpcode::kRead, 0, 0, iov);
  op.len = 4096 * 3;
  Status s = ExecuteSync(*engine_, {&op, 1});
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("iovec"), std::string_view::npos) << s.ToString();
}

TEST_P(EngineTest, VectoredShortReadAndTornWriteInjection) {
  ASSERT_TRUE(testing::WritePatternFile(dir_.File("t"), 7, 1 << 16));
  int fd = Open("t", false);
  FaultInjectionIoEngine fi(*engine_);
  ASSERT_TRUE(fi.RegisterFiles({&fd, 1}).ok());
  // Short read of 12 KiB over 8 KiB entries: entry 0 whole, half of entry 1, nothing after.
  std::vector<uint8_t> dst(4 * 8192, 0x11);
  std::vector<iovec> iov;
  for (int i = 3; i >= 0; --i) iov.push_back(iovec{dst.data() + i * 8192, 8192});
  FaultSpec shortr;
  shortr.kind = FaultSpec::Kind::kShort;
  shortr.prefix_bytes = 12288;
  fi.SetReadFault(shortr);
  IoOp r = VectoredOp(IoOpcode::kRead, 0, 4096, iov);
  Status rs = ExecuteSync(fi, {&r, 1});
  EXPECT_TRUE(rs.IsIOError()) << rs.ToString();
  EXPECT_NE(rs.message().find("offset " + std::to_string(4096 + 12288)), std::string_view::npos)
      << rs.ToString();
  uint64_t bad = 0;
  for (uint64_t j = 0; j < 8192; ++j) bad += dst[3 * 8192 + j] != PatternByte(7, 4096 + j);
  for (uint64_t j = 0; j < 4096; ++j) bad += dst[2 * 8192 + j] != PatternByte(7, 4096 + 8192 + j);
  for (uint64_t j = 4096; j < 8192; ++j) bad += dst[2 * 8192 + j] != 0x11;  // past the prefix
  for (uint64_t j = 0; j < 2 * 8192; ++j) bad += dst[j] != 0x11;            // entries 2 and 3
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(fi.counters().short_reads, 1u);

  // Torn vectored write: only the first 8 KiB + 4 KiB of the gathered 24 KiB land.
  std::vector<uint8_t> a(8192, 0xA1), b(8192, 0xB2), c(8192, 0xC3);
  std::vector<iovec> wv = {{a.data(), 8192}, {b.data(), 8192}, {c.data(), 8192}};
  FaultSpec torn;
  torn.kind = FaultSpec::Kind::kShort;
  torn.prefix_bytes = 12288;
  fi.SetWriteFault(torn);
  IoOp w = VectoredOp(IoOpcode::kWrite, 0, 0, wv);
  Status ws = ExecuteSync(fi, {&w, 1});
  EXPECT_TRUE(ws.IsIOError()) << ws.ToString();
  fi.Clear();
  std::vector<uint8_t> back(24576);
  IoOp rb{IoOpcode::kRead, 0, 0, back.data(), back.size(), 0};
  ASSERT_TRUE(ExecuteSync(fi, {&rb, 1}).ok());
  EXPECT_EQ(back[0], 0xA1);
  EXPECT_EQ(back[8191], 0xA1);
  EXPECT_EQ(back[8192], 0xB2);
  EXPECT_EQ(back[12287], 0xB2);
  EXPECT_EQ(back[12288], PatternByte(7, 12288));  // untouched
  EXPECT_EQ(fi.counters().torn_writes, 1u);

  // An injected error on a vectored op reads like any other.
  fi.SetReadError(EIO);
  Status es = ExecuteSync(fi, {&r, 1});
  EXPECT_TRUE(es.IsIOError());
  EXPECT_NE(es.message().find("read file 0 offset 4096"), std::string_view::npos) << es.ToString();
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
    std::memset(dst.get(), 0, kBytes);
    std::vector<IoOp> ops;
    for (uint64_t off = 0; off < kBytes; off += 65536) {
      ops.push_back(
          IoOp{IoOpcode::kRead, 0, off, dst.get() + off, std::min<uint64_t>(65536, kBytes - off)});
    }
    Status s = ExecuteSyncBounded(*engine_, ops, budget);
    ASSERT_TRUE(s.ok()) << s.ToString();
    uint64_t bad = 0;
    for (uint64_t i = 0; i < kBytes; ++i) bad += dst[i] != PatternByte(4, i);
    EXPECT_EQ(bad, 0u) << "budget " << budget;
  }
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

// One Submit of 64 small reads to one worker whose queue holds them all goes to the kernel as one
// batch (two at most, should the worker's wake-up read be submitted on its own), and their
// completions are reaped in bulk. With a queue depth of 8 the same reads need at least 8 batches,
// which shows the counter counts what it claims.
TEST(UringEngine, OneSubmitIsOneSubmissionBatch) {
  TempDir dir;
  constexpr uint32_t kReads = 64;
  constexpr uint64_t kLen = 512, kStride = 4096;
  ASSERT_TRUE(testing::WritePatternFile(dir.File("b"), 8, kReads * kStride));
  int fd = ::open(dir.File("b").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  for (uint32_t depth : {kReads, 128u, 8u}) {
    SCOPED_TRACE("queue depth " + std::to_string(depth));
    auto made = UringIoEngine::Create({1, depth, 0});
    if (!made.ok()) {
      ::close(fd);
      GTEST_SKIP() << made.status().ToString();
    }
    auto& engine = *made.value();
    ASSERT_TRUE(engine.RegisterFiles({&fd, 1}).ok());
    // A first read settles the worker (ring armed, files registered) before counting.
    std::vector<uint8_t> warm(kLen);
    IoOp first{IoOpcode::kRead, 0, 0, warm.data(), kLen, 0};
    ASSERT_TRUE(ExecuteSync(engine, {&first, 1}).ok());

    std::vector<uint8_t> dst(kReads * kLen, 0);
    std::vector<IoOp> ops;
    for (uint32_t i = 0; i < kReads; ++i) {  // every other 4 KiB page, backwards: nothing merges
      const uint64_t off = (kReads - 1 - i) * kStride + 100;
      ops.push_back(IoOp{IoOpcode::kRead, 0, off, dst.data() + i * kLen, kLen, i});
    }
    const UringIoEngine::Stats before = engine.stats();
    ASSERT_TRUE(ExecuteSync(engine, ops).ok());
    const UringIoEngine::Stats after = engine.stats();
    uint64_t bad = 0;
    for (uint32_t i = 0; i < kReads; ++i) {
      for (uint64_t j = 0; j < kLen; ++j) {
        bad += dst[i * kLen + j] != PatternByte(8, ops[i].offset + j);
      }
    }
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(after.ops - before.ops, kReads);
    EXPECT_EQ(after.sqes - before.sqes, kReads);
    EXPECT_EQ(after.cqes_reaped - before.cqes_reaped, kReads);
    const uint64_t batches = after.submit_batches - before.submit_batches;
    const uint64_t passes = after.reap_passes - before.reap_passes;
    EXPECT_GE(passes, 1u);
    if (depth >= kReads) {
      EXPECT_GE(batches, 1u);
      EXPECT_LE(batches, 2u);
      // Bulk reaping: some pass took more than one completion.
      EXPECT_LT(passes, kReads);
    } else {
      EXPECT_GE(batches, kReads / depth);
    }
    // Every batch went out through the worker loop; GetSqe's safety net never had to submit.
    EXPECT_LE(after.submit_batches, after.submit_calls);
  }
  ::close(fd);
}

// Ops queued from inside a completion callback (a restore's freed window space becoming the next
// read) reach the kernel before the worker hands out the rest of that reaping pass, not after it:
// a pass of slow callbacks (a restore copying megabytes out) must not leave the device idle.
TEST(UringEngine, OpsQueuedByACompletionGoOutBeforeItsPassEnds) {
  TempDir dir;
  constexpr uint32_t kReads = 8;
  constexpr uint64_t kLen = 512;
  ASSERT_TRUE(testing::WritePatternFile(dir.File("q"), 9, 64 << 10));
  int fd = ::open(dir.File("q").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto made = UringIoEngine::Create({1, 64, 0});
  if (!made.ok()) {
    ::close(fd);
    GTEST_SKIP() << made.status().ToString();
  }
  UringIoEngine& engine = *made.value();
  ASSERT_TRUE(engine.RegisterFiles({&fd, 1}).ok());

  // Completion 1 sleeps, so the other reads have all completed by the next reaping pass and
  // completions 2.. are normally handed out in one pass. Completion 2 queues one more read (tag
  // kReads); completion 3 looks at the counters.
  struct Sink : IoCompletionSink {
    UringIoEngine* engine = nullptr;
    IoOp extra{};
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
    std::vector<Status> errors;
    UringIoEngine::Stats at_second, at_third;
    void OnIoComplete(uint64_t tag, const Status& st) override {
      if (tag != kReads) {
        int n;
        {
          std::lock_guard<std::mutex> lock(mu);
          n = done + 1;
        }
        if (n == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (n == 2) {
          engine->Submit({&extra, 1}, this);
          at_second = engine->stats();
        }
        if (n == 3) at_third = engine->stats();
      }
      // Last: once `done` is counted the test may end and destroy this sink.
      std::lock_guard<std::mutex> lock(mu);
      if (!st.ok()) errors.push_back(st);
      ++done;
      cv.notify_all();
    }
  };
  // Where reads go to the kernel's async workers, the first pass may end right after completion
  // 2; then the scenario is run again (a few tries), since only a shared pass tells anything.
  bool shared_pass = false;
  for (int attempt = 0; attempt < 5 && !shared_pass; ++attempt) {
    Sink sink;
    std::vector<uint8_t> dst((kReads + 1) * kLen, 0);
    std::vector<IoOp> ops;
    for (uint32_t i = 0; i < kReads; ++i) {
      ops.push_back(IoOp{IoOpcode::kRead, 0, i * 4096ull + 7, dst.data() + i * kLen, kLen, i});
    }
    sink.engine = &engine;
    sink.extra = IoOp{IoOpcode::kRead, 0, 40000, dst.data() + kReads * kLen, kLen, kReads};
    engine.Submit(ops, &sink);
    {
      std::unique_lock<std::mutex> lock(sink.mu);
      const bool all = sink.cv.wait_for(lock, std::chrono::seconds(30),
                                        [&] { return sink.done == static_cast<int>(kReads) + 1; });
      if (!all) {
        ADD_FAILURE() << "reads did not complete";
        std::_Exit(1);  // the engine would hand completions to a destroyed sink
      }
    }
    EXPECT_TRUE(sink.errors.empty()) << sink.errors.front().ToString();
    uint64_t bad = 0;
    for (uint32_t i = 0; i <= kReads; ++i) {
      const IoOp& op = i < kReads ? ops[i] : sink.extra;
      for (uint64_t j = 0; j < kLen; ++j) {
        bad += dst[i * kLen + j] != PatternByte(9, op.offset + j);
      }
    }
    EXPECT_EQ(bad, 0u);
    shared_pass = sink.at_third.reap_passes == sink.at_second.reap_passes;
    if (!shared_pass) continue;
    // Between completions 2 and 3 of one pass, the queued read was prepared and submitted.
    EXPECT_EQ(sink.at_third.sqes, sink.at_second.sqes + 1);
    EXPECT_EQ(sink.at_third.submit_batches, sink.at_second.submit_batches + 1);
  }
  ::close(fd);
  if (!shared_pass) GTEST_SKIP() << "completions 2 and 3 never shared a reaping pass in 5 tries";
}

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
