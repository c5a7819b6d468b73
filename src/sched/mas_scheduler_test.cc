// Tests of the threaded FC-MAS scheduler: concurrency, window backpressure with a real executor
// thread, inline completions, FCFS ordering, failed prefetches and shutdown.
#include "sched/mas_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace flatcake {
namespace {

constexpr Gva kDramGva = EncodeGva(MediaType::kDram, 0, 0);
constexpr Gva kSsdGva = EncodeGva(MediaType::kSsd, 0, 0);

// Completes prefetches on its own thread, in FIFO order, after an optional hold. Tracks the
// bytes it has in flight so tests can check the window from the executor's side.
class ThreadedExecutor : public PrefetchExecutor {
 public:
  explicit ThreadedExecutor(std::chrono::microseconds delay = std::chrono::microseconds(0))
      : delay_(delay), worker_([this] { Run(); }) {}
  ~ThreadedExecutor() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      held_ = false;
    }
    cv_.notify_all();
    worker_.join();
  }
  void Prefetch(const RestoreRequest& r, std::function<void(Status)> done) override {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back({r, std::move(done)});
      in_flight_bytes_ += r.kv_bytes;
      ++in_flight_;
      if (in_flight_ > 1) max_multi_bytes_ = std::max(max_multi_bytes_, in_flight_bytes_);
      ++started_;
    }
    cv_.notify_all();
  }
  void Hold() {
    std::lock_guard lock(mu_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  void FailId(uint64_t id) {
    std::lock_guard lock(mu_);
    fail_id_ = id;
  }
  uint64_t max_multi_bytes() {
    std::lock_guard lock(mu_);
    return max_multi_bytes_;
  }
  uint64_t started() {
    std::lock_guard lock(mu_);
    return started_;
  }

 private:
  struct Job {
    RestoreRequest r;
    std::function<void(Status)> done;
  };
  void Run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || (!held_ && !jobs_.empty()); });
      if (jobs_.empty()) return;
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
      lock.lock();
      in_flight_bytes_ -= job.r.kv_bytes;
      --in_flight_;
      const Status s = job.r.id == fail_id_ ? Status::IOError("injected") : Status::OK();
      lock.unlock();
      job.done(s);  // outside our lock: the scheduler may call Prefetch again from here
      lock.lock();
    }
  }

  std::chrono::microseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  bool held_ = false;
  uint64_t fail_id_ = UINT64_MAX;
  uint64_t in_flight_bytes_ = 0;
  uint64_t in_flight_ = 0;
  uint64_t max_multi_bytes_ = 0;
  uint64_t started_ = 0;
  std::thread worker_;  // last: starts after the members it uses
};

// Calls `done` before returning, on the dispatching thread.
class InlineExecutor : public PrefetchExecutor {
 public:
  void Prefetch(const RestoreRequest& r, std::function<void(Status)> done) override {
    ++calls;
    done(Status::OK());
  }
  int calls = 0;
};

std::unique_ptr<MasScheduler> Make(SchedPolicy policy, uint64_t window, PrefetchExecutor* ex,
                                   std::function<int64_t()> clock = {}) {
  MasSchedulerOptions o;
  o.sched = {policy, window};
  o.clock = std::move(clock);
  auto r = MasScheduler::Create(o, ex);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : nullptr;
}

TEST(MasScheduler, CreateRejectsBadOptions) {
  InlineExecutor ex;
  MasSchedulerOptions o;
  o.sched.window_bytes = 0;
  EXPECT_TRUE(MasScheduler::Create(o, &ex).status().IsInvalidArgument());
  o.sched.window_bytes = 1;
  EXPECT_TRUE(MasScheduler::Create(o, nullptr).status().IsInvalidArgument());
}

TEST(MasScheduler, StampsArrivalAndServesDramAtOnce) {
  ThreadedExecutor ex;
  ex.Hold();  // SSD prefetches stay in flight
  std::atomic<int64_t> now{1000};
  auto s = Make(SchedPolicy::kMas, 1 << 20, &ex, [&] { return now.load(); });
  ASSERT_TRUE(s->Submit({1, kStampOnSubmit, kSsdGva, 4096}).ok());
  now = 2000;
  ASSERT_TRUE(s->Submit({2, kStampOnSubmit, kDramGva, 0}).ok());
  ASSERT_TRUE(s->Submit({3, 1500, kDramGva, 0}).ok());  // supplied stamp is kept
  auto a = s->PopReady();
  auto b = s->PopReady();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->request.id, 3u);  // arrival 1500 before 2000
  EXPECT_EQ(b->request.id, 2u);
  EXPECT_EQ(b->request.arrival_ns, 2000);
  EXPECT_FALSE(s->TryPop().has_value());  // the SSD request is still prefetching
  ex.Release();
  auto c = s->PopReady();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->request.id, 1u);
  EXPECT_EQ(c->request.arrival_ns, 1000);
  EXPECT_EQ(c->restore_class, RestoreClass::kSsdPreparing);
  EXPECT_TRUE(s->Submit({2, kStampOnSubmit, kDramGva, 0}).ok());  // popped ids may be reused
  EXPECT_TRUE(s->Submit({2, kStampOnSubmit, kDramGva, 0}).IsInvalidArgument());
}

// Many submitters and consumers against a completion thread: every request is served exactly
// once and the executor never has more than the window in flight (except one oversized alone).
TEST(MasScheduler, ConcurrentSubmittersConsumersAndCompletions) {
  for (SchedPolicy policy : {SchedPolicy::kMas, SchedPolicy::kFcfs}) {
    const uint64_t window = 1 << 20;
    ThreadedExecutor ex(std::chrono::microseconds(20));
    auto s = Make(policy, window, &ex);
    constexpr int kThreads = 3, kPerThread = 400;
    std::vector<std::thread> submitters;
    for (int t = 0; t < kThreads; ++t) {
      submitters.emplace_back([&, t] {
        std::mt19937_64 rng(t);
        for (int i = 0; i < kPerThread; ++i) {
          const uint64_t id = static_cast<uint64_t>(t) * kPerThread + i;
          const bool ssd = rng() % 2 == 0;
          const uint64_t bytes = rng() % 64 == 0 ? 3 * window : (rng() % 256 + 1) << 10;
          EXPECT_TRUE(
              s->Submit({id, kStampOnSubmit, ssd ? kSsdGva : kDramGva, ssd ? bytes : 0}).ok());
        }
      });
    }
    std::mutex seen_mu;
    std::set<uint64_t> seen;
    std::atomic<int> popped{0};
    std::vector<std::thread> consumers;
    for (int c = 0; c < 2; ++c) {
      consumers.emplace_back([&] {
        while (auto r = s->PopReady()) {
          std::lock_guard lock(seen_mu);
          EXPECT_TRUE(seen.insert(r->request.id).second) << "served twice: " << r->request.id;
          EXPECT_TRUE(r->prefetch_status.ok());
          ++popped;
        }
      });
    }
    for (auto& t : submitters) t.join();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (popped.load() < kThreads * kPerThread && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(s->Shutdown().empty());
    for (auto& t : consumers) t.join();
    EXPECT_EQ(popped.load(), kThreads * kPerThread) << SchedPolicyName(policy);
    EXPECT_LE(ex.max_multi_bytes(), window) << SchedPolicyName(policy);
    const MasSchedulerStats st = s->stats();
    EXPECT_EQ(st.submitted, static_cast<uint64_t>(kThreads * kPerThread));
    EXPECT_EQ(st.prefetches_started, st.ssd_preparing);
    EXPECT_EQ(st.popped, st.submitted);
  }
}

TEST(MasScheduler, InlineCompletionsDoNotRecurseOrDeadlock) {
  InlineExecutor ex;
  auto s = Make(SchedPolicy::kMas, 100, &ex);
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_TRUE(s->Submit({i, kStampOnSubmit, kSsdGva, 60}).ok());
  int n = 0;
  while (s->TryPop()) ++n;
  EXPECT_EQ(n, 1000);
  EXPECT_EQ(ex.calls, 1000);
  EXPECT_LE(s->stats().peak_in_flight_bytes, 100u);
}

TEST(MasScheduler, FcfsServesStrictlyInArrivalOrder) {
  ThreadedExecutor ex(std::chrono::microseconds(200));
  auto s = Make(SchedPolicy::kFcfs, 1 << 30, &ex);
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < 50; ++i) {
    const bool ssd = i % 3 == 0;
    ASSERT_TRUE(s->Submit({i, kStampOnSubmit, ssd ? kSsdGva : kDramGva, ssd ? 4096u : 0u}).ok());
  }
  for (int i = 0; i < 50; ++i) {
    auto r = s->PopReady();
    ASSERT_TRUE(r);
    order.push_back(r->request.id);
  }
  for (uint64_t i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(MasScheduler, FailedPrefetchIsHandedOutWithItsStatus) {
  ThreadedExecutor ex;
  ex.FailId(7);
  auto s = Make(SchedPolicy::kMas, 1 << 20, &ex);
  ASSERT_TRUE(s->Submit({7, kStampOnSubmit, kSsdGva, 4096}).ok());
  auto r = s->PopReady();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->request.id, 7u);
  EXPECT_TRUE(r->prefetch_status.IsIOError());
  EXPECT_EQ(s->stats().prefetches_failed, 1u);
}

TEST(MasScheduler, ShutdownWithPendingRequests) {
  ThreadedExecutor ex;
  ex.Hold();
  auto s = Make(SchedPolicy::kMas, 10'000, &ex);
  // 1 and 2 go in flight (held), 3 waits for the window, 4 is DRAM-ready but never popped.
  ASSERT_TRUE(s->Submit({1, kStampOnSubmit, kSsdGva, 5000}).ok());
  ASSERT_TRUE(s->Submit({2, kStampOnSubmit, kSsdGva, 5000}).ok());
  ASSERT_TRUE(s->Submit({3, kStampOnSubmit, kSsdGva, 5000}).ok());
  ASSERT_TRUE(s->Submit({4, kStampOnSubmit, kDramGva, 0}).ok());
  EXPECT_EQ(s->PopReady()->request.id, 4u);
  ASSERT_TRUE(s->Submit({5, kStampOnSubmit, kDramGva, 0}).ok());
  EXPECT_EQ(s->PopReady()->request.id, 5u);
  // A consumer blocks on the now empty ready queue.
  std::atomic<bool> consumer_returned{false};
  std::thread consumer([&] {
    EXPECT_FALSE(s->PopReady().has_value());
    consumer_returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(consumer_returned.load());
  // Shutdown waits for the held prefetches; another thread releases them once Shutdown has
  // begun (the blocked consumer returning shows that).
  std::thread releaser([&] {
    while (!consumer_returned.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ex.Release();
  });
  std::vector<RestoreRequest> unserved = s->Shutdown();
  releaser.join();
  consumer.join();
  EXPECT_TRUE(consumer_returned.load());
  std::vector<uint64_t> ids;
  for (const auto& r : unserved) ids.push_back(r.id);
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3}));  // every submitted, never popped request
  EXPECT_EQ(ex.started(), 2u);                       // 3 never started: no admission after shutdown
  EXPECT_TRUE(s->Submit({9, kStampOnSubmit, kDramGva, 0}).code() == StatusCode::kAborted);
  EXPECT_FALSE(s->PopReady().has_value());
  EXPECT_FALSE(s->TryPop().has_value());
  EXPECT_TRUE(s->Shutdown().empty());
}

}  // namespace
}  // namespace flatcake
