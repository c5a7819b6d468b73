// `flatcake bench cluster` at tiny sizes, as a process: two daemons and a private etcd, its table
// and its JSON line's fields, every restored byte verified. No figure is held to a target here (a
// timed test on a shared machine is noise); the figures go in docs/cluster.md.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "testing/command_run.h"
#include "util/temp_dir.h"

namespace flatcake::cli {
namespace {

using flatcake::testing::CommandRun;
using flatcake::testing::LastLine;
using flatcake::testing::RunCommand;

TEST(BenchClusterTest, JsonLineCarriesTheRatiosAndEveryByteIsVerified) {
  TempDir dir("bench-cluster-test");
  // UCX on loopback only: cluster_process_test, run beside this one, adds and removes a bridge
  // that a worker's address would otherwise name.
  const std::string cmd = "UCX_TLS=tcp UCX_NET_DEVICES=lo " + std::string(FLATCAKE_BINARY) +
                          " bench cluster --bytes 8M --pd-bytes 8M --layers 4 --slice-bytes 16K"
                          " --reps 2 --lookups 50 --json --ssd-dir " +
                          dir.path();
  const CommandRun r = RunCommand(cmd);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string line = LastLine(r.out);
  ASSERT_FALSE(line.empty()) << "a table comes before the JSON line";
  const auto j = nlohmann::json::parse(line);
  for (const char* f :
       {"remote_dram_vs_ucx", "remote_ssd_vs_ucx", "lookup_p99_us", "lookup_p50_us",
        "remote_dram_gbps", "ucx_dram_gbps", "remote_ssd_gbps", "ucx_ssd_gbps", "ucx_ssd_get_gbps",
        "local_ssd_gbps", "pd_first_layer_ms", "pd_total_ms", "ucx_dram_same_ep_gbps",
        "remote_dram_vs_ucx_same_ep", "ucx_ssd_same_ep_gbps", "remote_ssd_vs_ucx_same_ep",
        "ucx_ssd_beside_disk_gbps", "remote_ssd_vs_ucx_beside_disk"}) {
    ASSERT_TRUE(j.contains(f)) << f;
    EXPECT_GT(j[f].get<double>(), 0) << f;
  }
  EXPECT_LE(j["lookup_p50_us"].get<double>(), j["lookup_p99_us"].get<double>());
  EXPECT_LE(j["pd_first_layer_ms"].get<double>(), j["pd_total_ms"].get<double>());
  EXPECT_EQ(j["session_bytes"], 8 * 1024 * 1024);
  EXPECT_EQ(j["mismatches"], 0);
  EXPECT_EQ(j["misses"], 0);
}

}  // namespace
}  // namespace flatcake::cli
