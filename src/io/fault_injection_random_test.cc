// FaultInjectionIoEngine's random faults (the fault campaign's): the choice depends on the seed,
// the epoch and the op, not on the order ops are submitted in; an acknowledged torn write reports
// success and leaves old, new and garbage sectors; delayed ops land whole, late.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "io/fault_injection_io_engine.h"
#include "io/posix_io_engine.h"
#include "util/aligned_buffer.h"
#include "util/temp_dir.h"

namespace flatcake {
namespace {

constexpr uint64_t kSector = 4096;

class RandomFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    fd_ = ::open(dir_.File("f").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    ASSERT_GE(fd_, 0);
    ASSERT_EQ(::ftruncate(fd_, 1 << 20), 0);
    ASSERT_TRUE(engine_.RegisterFiles({&fd_, 1}).ok());
    auto buf = AlignedBuffer::Allocate(64 * kSector);
    ASSERT_TRUE(buf.ok());
    buf_ = std::move(buf).value();
  }
  void TearDown() override { ::close(fd_); }

  IoOp Op(IoOpcode opcode, uint64_t offset, uint64_t len) {
    IoOp op;
    op.opcode = opcode;
    op.offset = offset;
    op.len = len;
    op.buf = buf_.data();
    return op;
  }

  TempDir dir_;
  int fd_ = -1;
  FaultInjectionIoEngine engine_{std::make_unique<PosixIoEngine>()};
  AlignedBuffer buf_;
};

RandomFaults Rates(uint64_t seed, FaultKind kind, double rate) {
  RandomFaults f;
  f.seed = seed;
  f.rate[static_cast<size_t>(kind)] = rate;
  return f;
}

// (kind, offset) of every fault injected while reading `offsets` one by one.
std::map<uint64_t, FaultKind> FaultsOf(FaultInjectionIoEngine& engine, std::vector<IoOp> ops) {
  for (const IoOp& op : ops) (void)ExecuteSync(engine, {&op, 1});
  std::map<uint64_t, FaultKind> out;
  for (const InjectedFault& f : engine.TakeInjected()) out[f.offset] = f.kind;
  return out;
}

TEST_F(RandomFaultTest, ChoiceDependsOnSeedEpochAndOpNotOnOrder) {
  RandomFaults f = Rates(3, FaultKind::kReadEio, 0.3);
  f.rate[static_cast<size_t>(FaultKind::kShortRead)] = 0.3;
  engine_.SetRandomFaults(f);
  std::vector<IoOp> ops;
  for (uint64_t i = 0; i < 64; ++i) ops.push_back(Op(IoOpcode::kRead, i * kSector, kSector));
  engine_.SetEpoch(1);
  const auto forward = FaultsOf(engine_, ops);
  std::reverse(ops.begin(), ops.end());
  engine_.SetEpoch(1);
  const auto backward = FaultsOf(engine_, ops);
  EXPECT_EQ(forward, backward);
  EXPECT_GT(forward.size(), 16u);  // about 38 of 64
  EXPECT_LT(forward.size(), 56u);
  engine_.SetEpoch(2);
  EXPECT_NE(FaultsOf(engine_, ops), forward);
  // The same op again in one epoch is another draw.
  engine_.SetEpoch(1);
  (void)FaultsOf(engine_, ops);
  EXPECT_NE(FaultsOf(engine_, ops), forward);
  const auto counts = engine_.injected_by_kind();
  EXPECT_GT(counts[static_cast<size_t>(FaultKind::kReadEio)], 0u);
  EXPECT_GT(counts[static_cast<size_t>(FaultKind::kShortRead)], 0u);
  EXPECT_EQ(counts[static_cast<size_t>(FaultKind::kWriteEio)], 0u);
}

TEST_F(RandomFaultTest, ErrorsCarryTheirErrno) {
  engine_.SetRandomFaults(Rates(1, FaultKind::kWriteEnospc, 1));
  IoOp w = Op(IoOpcode::kWrite, 0, kSector);
  Status st = ExecuteSync(engine_, {&w, 1});
  EXPECT_EQ(st.code(), StatusCode::kNoSpace) << st.ToString();
  engine_.SetRandomFaults(Rates(1, FaultKind::kReadEio, 1));
  IoOp r = Op(IoOpcode::kRead, 0, kSector);
  EXPECT_FALSE(ExecuteSync(engine_, {&r, 1}).ok());
  engine_.ClearRandomFaults();
  EXPECT_TRUE(ExecuteSync(engine_, {&r, 1}).ok());
}

TEST_F(RandomFaultTest, AcknowledgedTornWriteLeavesOldNewAndGarbageSectors) {
  constexpr uint64_t kSectors = 32;
  std::vector<uint8_t> old(kSectors * kSector, 0x11);
  ASSERT_EQ(::pwrite(fd_, old.data(), old.size(), 0), static_cast<ssize_t>(old.size()));
  std::memset(buf_.data(), 0x22, kSectors * kSector);
  engine_.SetRandomFaults(Rates(9, FaultKind::kTornWriteAcked, 1));
  IoOp w = Op(IoOpcode::kWrite, 0, kSectors * kSector);
  EXPECT_TRUE(ExecuteSync(engine_, {&w, 1}).ok());
  std::vector<uint8_t> now(kSectors * kSector);
  ASSERT_EQ(::pread(fd_, now.data(), now.size(), 0), static_cast<ssize_t>(now.size()));
  uint64_t olds = 0, news = 0, garbage = 0;
  for (uint64_t s = 0; s < kSectors; ++s) {
    const uint8_t* p = now.data() + s * kSector;
    if (std::all_of(p, p + kSector, [](uint8_t b) { return b == 0x11; })) {
      olds++;
    } else if (std::all_of(p, p + kSector, [](uint8_t b) { return b == 0x22; })) {
      news++;
    } else {
      garbage++;
    }
  }
  EXPECT_EQ(garbage, 1u);
  EXPECT_GT(olds, 0u);
  EXPECT_GT(news, 0u);
  // Reported torn: the same damage, and an error.
  engine_.SetRandomFaults(Rates(9, FaultKind::kTornWrite, 1));
  EXPECT_FALSE(ExecuteSync(engine_, {&w, 1}).ok());
}

TEST_F(RandomFaultTest, DelayedOpsLandWholeAndLate) {
  engine_.SetRandomFaults(Rates(5, FaultKind::kDelayedWrite, 1));
  std::vector<IoOp> ops;
  for (uint64_t i = 0; i < 16; ++i) {
    std::memset(buf_.data() + i * kSector, static_cast<int>(i + 1), kSector);
    IoOp op = Op(IoOpcode::kWrite, i * kSector, kSector);
    op.buf = buf_.data() + i * kSector;
    ops.push_back(op);
  }
  EXPECT_TRUE(ExecuteSync(engine_, ops).ok());
  engine_.DrainDelayed();
  EXPECT_EQ(engine_.injected_by_kind()[static_cast<size_t>(FaultKind::kDelayedWrite)], 16u);
  std::vector<uint8_t> now(16 * kSector);
  ASSERT_EQ(::pread(fd_, now.data(), now.size(), 0), static_cast<ssize_t>(now.size()));
  for (uint64_t i = 0; i < 16; ++i) EXPECT_EQ(now[i * kSector + 7], i + 1) << i;
}

}  // namespace
}  // namespace flatcake
