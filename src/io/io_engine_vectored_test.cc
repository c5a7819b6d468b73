#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "io/fault_injection_io_engine.h"
#include "io/io_engine.h"
#include "io/uring_io_engine.h"
#include "testing/engine_kinds.h"
#include "testing/io_engine_fixture.h"
#include "testing/pattern_file.h"

namespace flatcake {
namespace {

using testing::AllocAligned;
using testing::EngineTest;
using testing::FillPattern;
using testing::MakeEngine;
using testing::PatternByte;

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
    std::memset(dst.data(), 0, kBytes);
    // Two ops, each one vectored read of 64 reversed 16 KiB pieces.
    auto iov_a = ReversedIoVecs(dst.data(), kBytes / 2, kChunk);
    auto iov_b = ReversedIoVecs(dst.data() + kBytes / 2, kBytes / 2, kChunk);
    IoOp ops[] = {VectoredOp(IoOpcode::kRead, file, 0, iov_a),
                  VectoredOp(IoOpcode::kRead, file, kBytes / 2, iov_b)};
    Status st = ExecuteSync(*engine_, ops);
    ASSERT_TRUE(st.ok()) << "file " << file << ": " << st.ToString();
    EXPECT_EQ(ReversedMismatches(dst.data(), 2, 0, kBytes / 2, kChunk), 0u);
    EXPECT_EQ(ReversedMismatches(dst.data() + kBytes / 2, 2, kBytes / 2, kBytes / 2, kChunk), 0u);
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
    FillPattern(src.data() + (n - 1 - i) * kChunk, 4, i * kChunk, kChunk);
  auto iov = ReversedIoVecs(src.data(), kBytes, kChunk);
  IoOp w = VectoredOp(IoOpcode::kWrite, 0, 0, iov);
  ASSERT_TRUE(ExecuteSync(*engine_, {&w, 1}).ok());
  auto back = AllocAligned(kBytes);
  IoOp r{IoOpcode::kRead, 0, 0, back.data(), kBytes, 0};
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

INSTANTIATE_TEST_SUITE_P(AllEngines, EngineTest, ::testing::ValuesIn(testing::kEngineKinds),
                         testing::EngineKindParamName);

}  // namespace
}  // namespace flatcake
