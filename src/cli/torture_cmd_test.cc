// `flatcake torture` as a process, as the README test command runs it: about 10^4 injected faults
// of every kind with 0 wrong bytes and 0 unexpected errors, and a seed that replays the same
// operations and faults (the same digest), while another seed does not. Under AddressSanitizer
// (the test command's clang tree, where a fault costs about ten times as much) a quarter of the
// faults: the Release tree's run is the one of 10^4.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "testing/child_process.h"
#include "testing/sanitizers.h"
#include "util/temp_dir.h"

namespace flatcake::cli {
namespace {

constexpr uint64_t kFaults = testing::kBuiltWithAsan ? 2500 : 10000;

struct TortureRun {
  int status = -1;
  nlohmann::json report;
  std::string out;
};

TortureRun Torture(uint64_t faults, uint64_t seed, const TempDir& dir) {
  testing::Child child({FLATCAKE_BINARY, "torture", "--faults", std::to_string(faults), "--seed",
                        std::to_string(seed), "--json", "--quiet", "--dir", dir.path()},
                       dir.File("stderr.txt"));
  TortureRun r;
  r.out = child.ReadAll();
  r.status = child.Wait(std::chrono::minutes(10));
  const size_t start = r.out.find('{');
  if (start != std::string::npos) {
    r.report = nlohmann::json::parse(r.out.substr(start), nullptr, /*allow_exceptions=*/false);
  }
  return r;
}

TEST(TortureCommandTest, TenThousandFaultsServeNoWrongByte) {
  // On tmpfs where there is one (buffered I/O, about 6 s), else on the temporary directory's
  // disk, whose syncs make it about 6 times slower; the replay test below runs there.
  TempDir shm("torture-test", "/dev/shm");
  TempDir tmp("torture-test");
  const TortureRun r = Torture(kFaults, 25, shm.ok() ? shm : tmp);
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json& j = r.report;
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["seed"], 25);
  EXPECT_EQ(j["wrong_bytes"], 0) << j.dump(1);
  EXPECT_EQ(j["unexpected_errors"], 0) << j.dump(1);
  EXPECT_GE(j["faults_injected"].get<uint64_t>(), kFaults);
  uint64_t sum = 0;
  for (const char* kind : {"read_eio", "short_read", "delayed_read", "write_eio", "write_enospc",
                           "short_write", "torn_write", "torn_write_acked", "delayed_write"}) {
    ASSERT_TRUE(j["faults_by_kind"].contains(kind)) << kind;
    EXPECT_GT(j["faults_by_kind"][kind].get<uint64_t>(), 0u) << kind;
    sum += j["faults_by_kind"][kind].get<uint64_t>();
  }
  EXPECT_EQ(sum, j["faults_injected"].get<uint64_t>());
  // Not vacuous: every operation ran, faults failed puts and restores, torn blocks were caught,
  // and blocks were read back byte for byte, after reopens too.
  for (const char* op : {"put", "lookup", "restore", "reclaim", "clear", "reopen"}) {
    EXPECT_GT(j["ops_by_kind"][op].get<uint64_t>(), 0u) << op;
  }
  EXPECT_GT(j["ops"].get<uint64_t>(), 1000u);
  EXPECT_GT(j["failed_puts"].get<uint64_t>(), 0u);
  EXPECT_GT(j["failed_restores"].get<uint64_t>(), 0u);
  EXPECT_GT(j["torn_blocks_missed"].get<uint64_t>(), 0u);
  EXPECT_GT(j["blocks_verified"].get<uint64_t>(), 1000u);
  EXPECT_GT(j["blocks_recovered"].get<uint64_t>(), 0u);
}

TEST(TortureCommandTest, SameSeedReplaysTheSameOperationsAndFaults) {
  TempDir dir("torture-replay-test");
  const TortureRun a = Torture(500, 7, dir);
  const TortureRun b = Torture(500, 7, dir);
  const TortureRun c = Torture(500, 8, dir);
  ASSERT_EQ(a.status, 0) << a.out;
  ASSERT_EQ(b.status, 0) << b.out;
  ASSERT_EQ(c.status, 0) << c.out;
  for (const char* f : {"digest", "ops", "ops_by_kind", "faults_injected", "faults_by_kind",
                        "failed_puts", "failed_restores", "blocks_verified"}) {
    EXPECT_EQ(a.report[f], b.report[f]) << f;
  }
  EXPECT_NE(a.report["digest"], c.report["digest"]);
}

TEST(TortureCommandTest, RefusesZeroFaults) {
  TempDir dir("torture-args-test");
  testing::Child child({FLATCAKE_BINARY, "torture", "--faults", "0"}, dir.File("stderr.txt"));
  (void)child.ReadAll();
  EXPECT_EQ(child.Wait(), 2);
}

}  // namespace
}  // namespace flatcake::cli
