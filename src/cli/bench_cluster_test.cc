// `flatcake bench cluster` at tiny sizes, as a process: two daemons and a private etcd, its table
// and its JSON line's fields, every restored byte verified. No figure is held to a target here (a
// timed test on a shared machine is noise); the figures go in docs/cluster.md.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "util/temp_dir.h"

namespace flatcake::cli {
namespace {

TEST(BenchClusterTest, JsonLineCarriesTheRatiosAndEveryByteIsVerified) {
  TempDir dir("bench-cluster-test");
  const std::string cmd = std::string(FLATCAKE_BINARY) +
                          " bench cluster --bytes 8M --pd-bytes 8M --layers 4 --slice-bytes 16K"
                          " --reps 2 --lookups 50 --json --ssd-dir " +
                          dir.path();
  std::FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int w = pclose(p);
  ASSERT_TRUE(WIFEXITED(w) && WEXITSTATUS(w) == 0) << out;
  const size_t last = out.rfind('\n', out.size() - 2);
  ASSERT_NE(last, std::string::npos) << "a table comes before the JSON line";
  const auto j = nlohmann::json::parse(out.substr(last + 1));
  for (const char* f : {"remote_dram_vs_ucx", "remote_ssd_vs_ucx", "lookup_p99_us", "lookup_p50_us",
                        "remote_dram_gbps", "ucx_dram_gbps", "remote_ssd_gbps", "ucx_ssd_gbps",
                        "local_ssd_gbps", "pd_first_layer_ms", "pd_total_ms"}) {
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
