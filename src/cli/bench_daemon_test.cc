// `flatcake bench daemon` at tiny sizes, as a process: its table, its JSON line's fields, every
// restored byte verified and both sides measured. No figure is held to a target here (a timed
// test on a shared machine is noise); the figures go in docs/performance.md.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "testing/command_run.h"
#include "util/temp_dir.h"

namespace flatcake::cli {
namespace {

using flatcake::testing::CommandRun;
using flatcake::testing::LastLine;
using flatcake::testing::RunCommand;

TEST(BenchDaemonTest, JsonLineCarriesBothSidesAndEveryByteIsVerified) {
  TempDir dir("bench-daemon-test");
  const CommandRun r = RunCommand(std::string(FLATCAKE_BINARY) +
                                  " bench daemon --bytes 4M --layers 4 --slice-bytes 16K --reps 2"
                                  " --clients 2 --keys 16 --duration-ms 100 --json --ssd-dir " +
                                  dir.path());
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string line = LastLine(r.out);
  ASSERT_FALSE(line.empty()) << "a table comes before the JSON line";
  const auto j = nlohmann::json::parse(line);
  for (const char* f :
       {"daemon_vs_embedded", "embedded_gbps", "daemon_gbps", "dram_daemon_vs_embedded",
        "dram_embedded_gbps", "dram_daemon_gbps", "lookup_p50_us", "lookup_p99_us"}) {
    ASSERT_TRUE(j.contains(f)) << f;
    EXPECT_GT(j[f].get<double>(), 0) << f;
  }
  EXPECT_LE(j["lookup_p50_us"].get<double>(), j["lookup_p99_us"].get<double>());
  EXPECT_EQ(j["clients"], 2);
  EXPECT_EQ(j["keys_per_lookup"], 16);
  EXPECT_GT(j["lookup_calls"].get<uint64_t>(), 0u);
  // 4 MiB of 128 KiB blocks (4 layers x 2 planes x 16 KiB) on each medium.
  EXPECT_EQ(j["blocks"], 32);
  EXPECT_EQ(j["block_bytes"], 128 * 1024);
  // Two rounds of two restores (embedded, daemon) on each of the two media, every byte compared.
  EXPECT_EQ(j["bytes_verified"].get<uint64_t>(), 2u * 2 * 2 * 4 * 1024 * 1024);
  EXPECT_EQ(j["mismatches"], 0);
  EXPECT_EQ(j["misses"], 0);
}

TEST(BenchDaemonTest, BadFlagsExitTwo) {
  EXPECT_EQ(RunCommand(std::string(FLATCAKE_BINARY) + " bench daemon --clients 0 2>&1").status, 2);
  EXPECT_EQ(RunCommand(std::string(FLATCAKE_BINARY) + " bench daemon --bytes 0 2>&1").status, 2);
}

}  // namespace
}  // namespace flatcake::cli
