// Tests of the deterministic FC-MAS core: classification, HRRN ordering, window accounting,
// arrival-ordered re-admission and the FCFS policy.
#include "sched/restore_queue.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace flatcake {
namespace {

constexpr Gva kDramGva = EncodeGva(MediaType::kDram, 0, 4096);
constexpr Gva kSsdGva = EncodeGva(MediaType::kSsd, 0, 4096);

RestoreRequest Ssd(uint64_t id, int64_t arrival, uint64_t bytes) {
  return RestoreRequest{id, arrival, kSsdGva, bytes};
}
RestoreRequest Dram(uint64_t id, int64_t arrival) {
  return RestoreRequest{id, arrival, kDramGva, 0};
}
std::vector<uint64_t> Ids(const std::vector<RestoreRequest>& rs) {
  std::vector<uint64_t> ids;
  for (const auto& r : rs) ids.push_back(r.id);
  return ids;
}
std::vector<uint64_t> PopAll(RestoreQueue& q) {
  std::vector<uint64_t> ids;
  while (auto r = q.PopReady()) ids.push_back(r->request.id);
  return ids;
}

TEST(RestoreClassify, OneComparisonAtTheSsdBoundary) {
  EXPECT_EQ(ClassifyRestore(0), RestoreClass::kDramReady);
  EXPECT_EQ(ClassifyRestore(kGvaSsdBoundary - 1), RestoreClass::kDramReady);
  EXPECT_EQ(ClassifyRestore(kGvaSsdBoundary), RestoreClass::kSsdPreparing);
  EXPECT_EQ(ClassifyRestore(EncodeGva(MediaType::kSsd, 7, 0)), RestoreClass::kSsdPreparing);
  // A hybrid request (DRAM-pinned prefix + SSD history) is SSD-preparing.
  const std::vector<Gva> hybrid = {kDramGva, EncodeGva(MediaType::kDram, 3, 1 << 20), kSsdGva};
  RestoreRequest r = MakeRestoreRequest(9, hybrid, 1 << 20, 5);
  EXPECT_EQ(r.slowest_gva, kSsdGva);
  EXPECT_EQ(ClassifyRestore(r.slowest_gva), RestoreClass::kSsdPreparing);
  EXPECT_EQ(r.arrival_ns, 5);
  const std::vector<Gva> dram_only = {kDramGva, EncodeGva(MediaType::kDram, 4095, kGvaMaxOffset)};
  EXPECT_EQ(ClassifyRestore(SlowestGva(dram_only)), RestoreClass::kDramReady);
  EXPECT_EQ(SlowestGva({}), Gva{0});
}

TEST(RestoreHrrn, SmallerFirstAtEqualWaitThenLargeOvertakes) {
  const RestoreRequest small = Ssd(1, 0, 10);
  const RestoreRequest large = Ssd(2, 0, 50);
  EXPECT_TRUE(HrrnBefore(small, large, 0));  // both ratios 1: the tie goes to the smaller
  EXPECT_TRUE(HrrnBefore(small, large, 10));
  EXPECT_DOUBLE_EQ(ResponseRatio(small, 10), 2.0);
  EXPECT_DOUBLE_EQ(ResponseRatio(large, 10), 1.2);
  // The large request arrived at 0; a small one arrives at 100. At 105 the large one has
  // 1 + 105/50 = 3.1 against 1 + 5/10 = 1.5.
  const RestoreRequest late_small = Ssd(3, 100, 10);
  EXPECT_FALSE(HrrnBefore(late_small, large, 100));
  EXPECT_TRUE(HrrnBefore(large, late_small, 105));
  // The small one's ratio grows five times faster: 1 + t/50 == 1 + (t-100)/10 at t = 125, a
  // tie that goes to the smaller request, which leads from then on.
  EXPECT_TRUE(HrrnBefore(large, late_small, 124));
  EXPECT_TRUE(HrrnBefore(late_small, large, 125));
  EXPECT_TRUE(HrrnBefore(late_small, large, 126));
  // Huge values do not overflow the comparison.
  const RestoreRequest huge = Ssd(4, 0, uint64_t{1} << 45);
  EXPECT_TRUE(HrrnBefore(Ssd(5, 0, 1), huge, int64_t{1} << 62));
}

TEST(RestoreQueueMas, DramReadyAtOnceSsdWaitsForAdmission) {
  RestoreQueue q({SchedPolicy::kMas, 100});
  ASSERT_TRUE(q.Submit(Ssd(1, 0, 40), 0).ok());
  ASSERT_TRUE(q.Submit(Dram(2, 1), 1).ok());
  EXPECT_EQ(q.pending_ssd(), 1u);
  ASSERT_TRUE(q.ReadyAvailable());
  auto r = q.PopReady();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->request.id, 2u);  // the DRAM request does not wait behind the SSD one
  EXPECT_EQ(r->restore_class, RestoreClass::kDramReady);
  EXPECT_FALSE(q.PopReady().has_value());
  EXPECT_EQ(Ids(q.TakeAdmissions(2)), std::vector<uint64_t>{1});
  EXPECT_EQ(q.in_flight_bytes(), 40u);
  EXPECT_FALSE(q.ReadyAvailable());
  ASSERT_TRUE(q.CompletePrefetch(1, Status::OK(), 9).ok());
  EXPECT_EQ(q.in_flight_bytes(), 0u);
  r = q.PopReady();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->request.id, 1u);
  EXPECT_EQ(r->admitted_ns, 2);
  EXPECT_EQ(r->ready_ns, 9);
  EXPECT_TRUE(r->prefetch_status.ok());
  EXPECT_EQ(q.live(), 0u);
}

TEST(RestoreQueueMas, HrrnAdmissionOrderUnderWindowPressure) {
  // Window 55: a 55-byte blocker is in flight; A (10 B) and B (50 B) wait from t=0. When the
  // blocker completes at t=10 only one more fits after the best one: A wins at equal wait.
  {
    RestoreQueue q({SchedPolicy::kMas, 55});
    ASSERT_TRUE(q.Submit(Ssd(100, 0, 55), 0).ok());
    EXPECT_EQ(Ids(q.TakeAdmissions(0)), std::vector<uint64_t>{100});
    ASSERT_TRUE(q.Submit(Ssd(1, 0, 50), 0).ok());
    ASSERT_TRUE(q.Submit(Ssd(2, 0, 10), 0).ok());
    EXPECT_TRUE(q.TakeAdmissions(5).empty());  // window full: backpressure waits
    ASSERT_TRUE(q.CompletePrefetch(100, Status::OK(), 10).ok());
    EXPECT_EQ(Ids(q.TakeAdmissions(10)), std::vector<uint64_t>{2});
    EXPECT_EQ(q.pending_ssd(), 1u);
  }
  // Now B (50 B) arrived at 0 and A (10 B) at 100; at t=105 B's ratio 3.1 beats A's 1.5, and
  // A cannot slip in beside it (60 > 55).
  {
    RestoreQueue q({SchedPolicy::kMas, 55});
    ASSERT_TRUE(q.Submit(Ssd(100, 0, 55), 0).ok());
    EXPECT_EQ(q.TakeAdmissions(0).size(), 1u);
    ASSERT_TRUE(q.Submit(Ssd(1, 0, 50), 0).ok());
    ASSERT_TRUE(q.Submit(Ssd(2, 100, 10), 100).ok());
    ASSERT_TRUE(q.CompletePrefetch(100, Status::OK(), 105).ok());
    EXPECT_EQ(Ids(q.TakeAdmissions(105)), std::vector<uint64_t>{1});
    // Strict HRRN: A stays queued even though 5 bytes of window are free.
    EXPECT_EQ(q.in_flight_bytes(), 50u);
    EXPECT_TRUE(q.TakeAdmissions(106).empty());
    ASSERT_TRUE(q.CompletePrefetch(1, Status::OK(), 150).ok());
    EXPECT_EQ(Ids(q.TakeAdmissions(150)), std::vector<uint64_t>{2});
  }
}

TEST(RestoreQueueMas, PromotedRequestsReadmittedByOriginalArrival) {
  RestoreQueue q({SchedPolicy::kMas, 1000});
  ASSERT_TRUE(q.Submit(Ssd(1, 0, 100), 0).ok());
  ASSERT_TRUE(q.Submit(Dram(2, 1), 1).ok());
  ASSERT_TRUE(q.Submit(Ssd(3, 2, 10), 2).ok());
  ASSERT_TRUE(q.Submit(Dram(4, 3), 3).ok());
  EXPECT_EQ(q.TakeAdmissions(3).size(), 2u);
  // Prefetches complete out of order; the ready order is the original arrival order, so both
  // promoted requests go ahead of DRAM request 4 and request 1 goes ahead of request 2.
  ASSERT_TRUE(q.CompletePrefetch(3, Status::OK(), 4).ok());
  ASSERT_TRUE(q.CompletePrefetch(1, Status::OK(), 5).ok());
  EXPECT_EQ(PopAll(q), (std::vector<uint64_t>{1, 2, 3, 4}));

  // Interleaved with consumption: DRAM 6 is served before SSD 5 completes; once 5 is resident
  // it goes ahead of DRAM 8, which arrived after it.
  ASSERT_TRUE(q.Submit(Ssd(5, 10, 100), 10).ok());
  ASSERT_TRUE(q.Submit(Dram(6, 11), 11).ok());
  EXPECT_EQ(q.TakeAdmissions(11).size(), 1u);
  EXPECT_EQ(PopAll(q), std::vector<uint64_t>{6});
  ASSERT_TRUE(q.Submit(Dram(8, 13), 13).ok());
  ASSERT_TRUE(q.CompletePrefetch(5, Status::IOError("injected"), 14).ok());
  auto r = q.PopReady();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->request.id, 5u);
  EXPECT_TRUE(r->prefetch_status.IsIOError());  // handed out, not dropped
  EXPECT_EQ(PopAll(q), std::vector<uint64_t>{8});
}

TEST(RestoreQueueMas, WindowNeverExceededExceptSingleOversized) {
  const uint64_t window = 1000;
  RestoreQueue q({SchedPolicy::kMas, window});
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<uint64_t> size(1, 400);
  std::vector<uint64_t> in_flight;
  uint64_t next_id = 0;
  int64_t now = 0;
  for (int step = 0; step < 20000; ++step) {
    ++now;
    const int action = static_cast<int>(rng() % 3);
    if (action == 0) {
      // Occasionally a request larger than the whole window.
      const uint64_t bytes = (rng() % 50 == 0) ? window * 3 : size(rng);
      ASSERT_TRUE(q.Submit(Ssd(next_id++, now, bytes), now).ok());
    } else if (action == 1 && !in_flight.empty()) {
      const size_t i = rng() % in_flight.size();
      ASSERT_TRUE(q.CompletePrefetch(in_flight[i], Status::OK(), now).ok());
      in_flight[i] = in_flight.back();
      in_flight.pop_back();
    }
    for (const RestoreRequest& r : q.TakeAdmissions(now)) in_flight.push_back(r.id);
    if (q.in_flight() > 1) {
      ASSERT_LE(q.in_flight_bytes(), window) << "step " << step;
    }
    while (q.PopReady()) {
    }
  }
  EXPECT_GT(q.peak_in_flight_bytes(), window);  // the oversized requests did run (alone)
}

TEST(RestoreQueueMas, OversizedRequestAdmittedAloneWhenWindowEmpty) {
  RestoreQueue q({SchedPolicy::kMas, 100});
  ASSERT_TRUE(q.Submit(Ssd(1, 0, 60), 0).ok());
  EXPECT_EQ(q.TakeAdmissions(0).size(), 1u);
  ASSERT_TRUE(q.Submit(Ssd(2, 1, 500), 1).ok());
  ASSERT_TRUE(q.Submit(Ssd(3, 1, 50), 1).ok());
  // At t=1 both ratios are 1, so the smaller request 3 is best; it does not fit beside 1.
  EXPECT_EQ(q.TakeAdmissions(1).size(), 0u);
  ASSERT_TRUE(q.CompletePrefetch(1, Status::OK(), 2).ok());
  EXPECT_EQ(Ids(q.TakeAdmissions(2)), std::vector<uint64_t>{3});
  EXPECT_TRUE(q.TakeAdmissions(3).empty());  // 2 waits: the window is not empty
  ASSERT_TRUE(q.CompletePrefetch(3, Status::OK(), 4).ok());
  EXPECT_EQ(Ids(q.TakeAdmissions(4)), std::vector<uint64_t>{2});
  EXPECT_EQ(q.in_flight_bytes(), 500u);
  ASSERT_TRUE(q.Submit(Ssd(4, 5, 1), 5).ok());
  EXPECT_TRUE(q.TakeAdmissions(5).empty());  // nothing joins an oversized request
  ASSERT_TRUE(q.CompletePrefetch(2, Status::OK(), 6).ok());
  EXPECT_EQ(Ids(q.TakeAdmissions(6)), std::vector<uint64_t>{4});
}

TEST(RestoreQueueFcfs, DramWaitsBehindSsdHead) {
  RestoreQueue q({SchedPolicy::kFcfs, 1000});
  ASSERT_TRUE(q.Submit(Ssd(1, 0, 100), 0).ok());
  ASSERT_TRUE(q.Submit(Dram(2, 1), 1).ok());
  ASSERT_TRUE(q.Submit(Ssd(3, 2, 10), 2).ok());
  EXPECT_EQ(q.pending_ssd(), 2u);
  EXPECT_FALSE(q.ReadyAvailable());  // DRAM request 2 is blocked by the SSD head
  EXPECT_EQ(Ids(q.TakeAdmissions(2)), std::vector<uint64_t>{1});  // only the head prefetches
  EXPECT_TRUE(q.TakeAdmissions(3).empty());
  ASSERT_TRUE(q.CompletePrefetch(1, Status::OK(), 10).ok());
  EXPECT_EQ(q.PopReady()->request.id, 1u);
  EXPECT_EQ(q.PopReady()->request.id, 2u);
  EXPECT_FALSE(q.PopReady().has_value());
  EXPECT_EQ(Ids(q.TakeAdmissions(11)), std::vector<uint64_t>{3});
  ASSERT_TRUE(q.CompletePrefetch(3, Status::OK(), 12).ok());
  EXPECT_EQ(q.PopReady()->request.id, 3u);
}

TEST(RestoreQueue, RejectsBadInput) {
  RestoreQueue q({SchedPolicy::kMas, 100});
  EXPECT_TRUE(q.Submit(Ssd(1, -1, 10), 0).IsInvalidArgument());
  ASSERT_TRUE(q.Submit(Ssd(1, 0, 10), 0).ok());
  EXPECT_TRUE(q.Submit(Dram(1, 0), 0).IsInvalidArgument());          // duplicate live id
  EXPECT_TRUE(q.CompletePrefetch(1, Status::OK(), 1).IsNotFound());  // not admitted yet
  EXPECT_TRUE(q.CompletePrefetch(77, Status::OK(), 1).IsNotFound());
  EXPECT_TRUE((SchedOptions{SchedPolicy::kMas, 0}).Validate().IsInvalidArgument());
  EXPECT_FALSE(ParseSchedPolicy("lifo").ok());
  EXPECT_EQ(*ParseSchedPolicy("fcfs"), SchedPolicy::kFcfs);
  EXPECT_EQ(*ParseSchedPolicy("fc-mas"), SchedPolicy::kMas);
}

TEST(RestoreQueue, DrainUnservedKeepsInFlight) {
  RestoreQueue q({SchedPolicy::kMas, 100});
  ASSERT_TRUE(q.Submit(Ssd(1, 0, 50), 0).ok());
  EXPECT_EQ(q.TakeAdmissions(0).size(), 1u);
  ASSERT_TRUE(q.Submit(Ssd(2, 1, 80), 1).ok());
  ASSERT_TRUE(q.Submit(Dram(3, 2), 2).ok());
  EXPECT_EQ(Ids(q.DrainUnserved()), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(q.live(), 1u);
  EXPECT_EQ(q.pending_ssd(), 0u);
  ASSERT_TRUE(q.CompletePrefetch(1, Status::OK(), 3).ok());
  EXPECT_EQ(Ids(q.DrainUnserved()), std::vector<uint64_t>{1});
  EXPECT_EQ(q.live(), 0u);
}

}  // namespace
}  // namespace flatcake
