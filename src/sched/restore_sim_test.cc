// Virtual-time tests of FC-MAS against one FCFS queue: the paper's Figure 4 timeline, starvation
// freedom of a large SSD restore, and the DRAM tail under a random mixed stream.
#include "sched/restore_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

namespace flatcake {
namespace {

constexpr Gva kDramGva = EncodeGva(MediaType::kDram, 0, 0);
constexpr Gva kSsdGva = EncodeGva(MediaType::kSsd, 0, 0);
constexpr int64_t kMs = 1'000'000;

std::vector<RestoreSimOutcome> Simulate(SchedPolicy policy, uint64_t window,
                                        const RestoreSimModel& model,
                                        const std::vector<RestoreRequest>& reqs) {
  auto r = SimulateRestores({policy, window}, model, reqs);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<RestoreSimOutcome>{};
}

// Figure 4: R1..R6 arrive 1 ms apart, odd ones on SSD (10 ms transfers), even ones in DRAM
// (1 ms copies), one consumer.
TEST(RestoreSimFigure4, DramRequestsNeverWaitBehindSsdUnderMas) {
  RestoreSimModel model;
  model.ssd_bytes_per_sec = 1e9;
  model.dram_copy_ns = 1 * kMs;
  model.consumers = 1;
  std::vector<RestoreRequest> reqs;
  for (uint64_t i = 1; i <= 6; ++i) {
    const bool ssd = (i % 2) == 1;
    reqs.push_back({i, static_cast<int64_t>(i - 1) * kMs, ssd ? kSsdGva : kDramGva,
                    ssd ? uint64_t{10'000'000} : 0});
  }
  const auto mas = Simulate(SchedPolicy::kMas, 64 << 20, model, reqs);
  const auto fcfs = Simulate(SchedPolicy::kFcfs, 64 << 20, model, reqs);
  ASSERT_EQ(mas.size(), 6u);
  ASSERT_EQ(fcfs.size(), 6u);

  // FC-MAS: each DRAM request is served on arrival, so its latency is exactly the copy time.
  for (int i : {1, 3, 5}) {
    EXPECT_EQ(mas[i].start_ns, mas[i].request.arrival_ns) << "R" << i + 1;
    EXPECT_EQ(mas[i].latency_ns(), 1 * kMs) << "R" << i + 1;
  }
  // The SSD prefetches overlap the DRAM work back to back on the device: done at 10, 20, 30 ms.
  EXPECT_EQ(mas[0].done_ns, 10 * kMs);
  EXPECT_EQ(mas[2].done_ns, 20 * kMs);
  EXPECT_EQ(mas[4].done_ns, 30 * kMs);
  EXPECT_EQ(mas[2].admitted_ns, 2 * kMs);  // admitted at arrival, in the background

  // FCFS: R2 waits for R1's whole transfer, R4 for R3's, R6 for R5's.
  EXPECT_EQ(fcfs[1].done_ns, 11 * kMs);
  EXPECT_EQ(fcfs[3].done_ns, 21 * kMs);
  EXPECT_EQ(fcfs[5].done_ns, 31 * kMs);
  for (int i : {1, 3, 5}) {
    EXPECT_GE(fcfs[i].latency_ns(), 10 * kMs) << "R" << i + 1;
    EXPECT_GE(fcfs[i].latency_ns(), 10 * mas[i].latency_ns()) << "R" << i + 1;
  }
  // SSD requests finish no later under FC-MAS.
  for (int i : {0, 2, 4}) EXPECT_LE(mas[i].done_ns, fcfs[i].done_ns) << "R" << i + 1;
  // Consumers see the arrival order among ready requests under FCFS.
  for (int i = 1; i < 6; ++i) EXPECT_LE(fcfs[i - 1].start_ns, fcfs[i].start_ns);
}

// A request larger than the whole window arrives into a continuous stream of small SSD restores:
// it needs the window to drain completely, which a policy that lets small requests backfill the
// window would never allow while the stream lasts. HRRN grows its priority until it is the best,
// then strict admission drains the window for it.
struct StarvationCase {
  double ssd_bytes_per_sec;  // the stream asks for 2 GB/s
  int64_t bound_ms;          // latency bound of the large request (derivation below)
};

class RestoreSimStarvation : public testing::TestWithParam<StarvationCase> {};

TEST_P(RestoreSimStarvation, LargeSsdRequestCompletesUnderContinuousSmallStream) {
  RestoreSimModel model;
  model.ssd_bytes_per_sec = GetParam().ssd_bytes_per_sec;
  model.dram_copy_ns = 0;
  const uint64_t small = 1'000'000;
  const uint64_t large = 8'000'000;
  const uint64_t window = 4'000'000;  // smaller than the large request
  std::vector<RestoreRequest> reqs;
  constexpr int kSmall = 10'000;  // 5 s of arrivals, one every 0.5 ms
  for (int i = 0; i < kSmall; ++i) {
    reqs.push_back({static_cast<uint64_t>(i), i * kMs / 2, kSsdGva, small});
  }
  const int64_t large_arrival = 100 * kMs;
  reqs.push_back({999'999, large_arrival, kSsdGva, large});
  const auto out = Simulate(SchedPolicy::kMas, window, model, reqs);
  ASSERT_EQ(out.size(), reqs.size());
  const RestoreSimOutcome& big = out.back();
  std::printf("large request (8 MB, window 4 MB, SSD %.1f GB/s): latency %.1f ms\n",
              GetParam().ssd_bytes_per_sec / 1e9, static_cast<double>(big.latency_ns()) / kMs);
  EXPECT_GT(big.done_ns, big.request.arrival_ns);
  EXPECT_LT(big.latency_ns(), GetParam().bound_ms * kMs)
      << "latency " << big.latency_ns() / kMs << " ms";
  // Small requests kept arriving (and being served) after it completed.
  int later_small = 0;
  for (int i = 0; i < kSmall; ++i) later_small += out[i].request.arrival_ns > big.done_ns;
  EXPECT_GT(later_small, kSmall / 2);
  // It ran alone: every earlier admission had completed before it was admitted.
  for (int i = 0; i < kSmall; ++i) {
    if (out[i].admitted_ns >= 0 && out[i].admitted_ns < big.admitted_ns) {
      ASSERT_LE(out[i].ready_ns, big.admitted_ns) << "request " << i;
    }
  }
}

// Bounds. The large request becomes the best once wait/8 MB > w/1 MB, w being the wait of the
// oldest pending small request; then it waits at most for the window (4 MB) to drain and for its
// own transfer (8 MB), about 6 ms at 2 GB/s.
//  - Stable (device at 2.2 GB/s, 91% busy): w stays at a few transfer times (~0.5 ms each), so
//    it is best after a few tens of ms; 100 ms bounds it.
//  - Overloaded by 11% (1.8 GB/s): the backlog grows and w ~= 0.1 x (time since the stream
//    began); with the large request arriving at 100 ms it is best once x/8 > 0.1 (100 ms + x),
//    i.e. x ~= 0.4 s; 1 s bounds it, still well inside the 5 s stream.
INSTANTIATE_TEST_SUITE_P(Loads, RestoreSimStarvation,
                         testing::Values(StarvationCase{2.2e9, 100}, StarvationCase{1.8e9, 1000}));

double P99(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[(v.size() * 99 + 99) / 100 - 1]);
}

TEST(RestoreSimMixed, MasCutsTheDramTailOfARandomStream) {
  std::mt19937_64 rng(7);
  std::exponential_distribution<double> gap(1.0 / 2e6);  // one arrival per 2 ms on average
  std::uniform_int_distribution<uint64_t> mib(1, 6);
  std::vector<RestoreRequest> reqs;
  double t = 0;
  for (uint64_t i = 0; i < 3000; ++i) {
    t += gap(rng);
    const bool ssd = (rng() % 2) == 0;
    reqs.push_back(
        {i, static_cast<int64_t>(t), ssd ? kSsdGva : kDramGva, ssd ? mib(rng) << 20 : 0});
  }
  RestoreSimModel model;
  model.ssd_bytes_per_sec = 3e9;  // ~3.5 MiB mean at 1.2 ms, on 50% of the requests: ~60% busy
  model.dram_copy_ns = 50'000;
  model.consumers = 2;
  const auto mas = Simulate(SchedPolicy::kMas, 64 << 20, model, reqs);
  const auto fcfs = Simulate(SchedPolicy::kFcfs, 64 << 20, model, reqs);
  ASSERT_EQ(mas.size(), reqs.size());
  std::vector<int64_t> mas_dram, fcfs_dram;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (mas[i].restore_class != RestoreClass::kDramReady) continue;
    mas_dram.push_back(mas[i].latency_ns());
    fcfs_dram.push_back(fcfs[i].latency_ns());
  }
  EXPECT_LE(P99(mas_dram) * 5, P99(fcfs_dram));
}

TEST(RestoreSim, RejectsBadInput) {
  const std::vector<RestoreRequest> dup = {{1, 0, kDramGva, 0}, {1, 5, kDramGva, 0}};
  EXPECT_FALSE(SimulateRestores({}, {}, dup).ok());
  const std::vector<RestoreRequest> neg = {{1, -4, kDramGva, 0}};
  EXPECT_FALSE(SimulateRestores({}, {}, neg).ok());
  RestoreSimModel bad;
  bad.ssd_bytes_per_sec = 0;
  EXPECT_FALSE(SimulateRestores({}, bad, {}).ok());
  bad = RestoreSimModel{};
  bad.consumers = 0;
  EXPECT_FALSE(SimulateRestores({}, bad, {}).ok());
}

}  // namespace
}  // namespace flatcake
