// Restores as requests through the public Store API: Lookup, Restore handles, and FC-MAS inside
// the store (the paper's Figure 4, HRRN admission, no starvation, cancellation).
//
// Deterministic tests hold the SSD reads in a gated engine: a restore's reads reach the disk only
// when the test opens the gate, so "served before the SSD restore ahead of it finished" is an
// exact, timing-free statement.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "io/posix_io_engine.h"
#include "io/preadv_io_engine.h"
#include "store/flat_store.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake {
namespace {

constexpr KvLayout kLayout{4, 2, 16 * 1024};  // 128 KiB blocks

// Holds every read batch until Release; writes pass straight through. Completions run on the
// releasing thread (the base engine completes inline).
class GatedEngine final : public IoEngine {
 public:
  GatedEngine() : base_(std::make_unique<PosixIoEngine>()) {}
  Status RegisterFiles(std::span<const int> fds) override { return base_->RegisterFiles(fds); }
  std::string_view name() const override { return "gated"; }
  void Submit(std::span<const IoOp> ops, IoCompletionSink* sink) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_ && !ops.empty() && ops[0].opcode == IoOpcode::kRead) {
        held_.push_back(Batch{std::vector<IoOp>(ops.begin(), ops.end()), sink});
        return;
      }
    }
    base_->Submit(ops, sink);
  }
  // Submits the batches held now (not those their completions submit); returns how many.
  size_t Release() {
    std::deque<Batch> batches;
    {
      std::lock_guard<std::mutex> lock(mu_);
      batches.swap(held_);
    }
    for (Batch& b : batches) base_->Submit(b.ops, b.sink);
    return batches.size();
  }
  // Opens the gate for good and releases what is held.
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = false;
    }
    Release();
  }
  size_t held() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }
  // The restore reader issues from its own thread: waits until `n` batches are held, then a
  // little longer, and returns how many are held (so a test sees one too many, too).
  size_t Settle(size_t n) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (held() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return held();
  }

 private:
  struct Batch {
    std::vector<IoOp> ops;
    IoCompletionSink* sink;
  };
  std::unique_ptr<IoEngine> base_;
  mutable std::mutex mu_;
  bool closed_ = true;
  std::deque<Batch> held_;
};

StoreOptions Options(const std::string& dir, RestoreScheduler scheduler, uint64_t window) {
  StoreOptions o;
  o.dram_bytes = 16 * kMiB;
  o.ssd_dirs = {dir};
  o.ssd_bytes = 64 * kMiB;
  o.ssd_file_bytes = 8 * kMiB;
  o.max_scopes = 256;
  o.read_window_bytes = window;
  o.scheduler = scheduler;
  return o;
}

// A restore destination for `n` blocks, pre-filled with a pattern no block has.
struct Dest {
  explicit Dest(size_t n) : blocks(kLayout, n) {
    std::memset(blocks.bytes.data(), 0xEE, blocks.bytes.size());
  }
  HostBlocks blocks;
};

class StoreRestoreTest : public ::testing::Test {
 protected:
  void Open(RestoreScheduler scheduler, uint64_t window = 1 * kMiB, bool gated = true) {
    std::unique_ptr<IoEngine> engine;
    if (gated) {
      auto g = std::make_unique<GatedEngine>();
      gate_ = g.get();
      engine = std::move(g);
    } else {
      engine = std::make_unique<PreadvIoEngine>(2);
    }
    auto r = FlatStore::OpenWithEngine(Options(dir_.path(), scheduler, window), std::move(engine));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    store_ = std::move(*r);
  }
  void TearDown() override {
    if (gate_ != nullptr) gate_->Open();  // nothing may stay held while the store closes
  }
  std::vector<Key> PutSession(uint64_t ns, size_t n, MediaType medium) {
    std::vector<Key> keys = MakeKeys(ns, 0, n);
    HostBlocks src(kLayout, n);
    src.Fill(keys);
    WriteHints h;
    h.session = "s" + std::to_string(ns);
    h.force_medium = medium;
    auto r = store_->Put(keys, kLayout, src.buffers(), h);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return keys;
  }
  std::unique_ptr<RestoreHandle> Start(const std::vector<Key>& keys, Dest& dst,
                                       RestoreOptions o = {}) {
    auto r = store_->Restore(keys, kLayout, dst.blocks.buffers(), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }
  // Every block of `keys` landed in `dst` byte for byte.
  static void ExpectDelivered(const std::vector<Key>& keys, Dest& dst, const GetResult& r) {
    EXPECT_EQ(r.hits, keys.size());
    std::vector<uint8_t> want(kLayout.block_bytes());
    for (size_t i = 0; i < keys.size(); ++i) {
      FillBlock(keys[i], want.data(), want.size());
      EXPECT_EQ(0, std::memcmp(want.data(), dst.blocks.block(i), want.size())) << "block " << i;
    }
  }

  TempDir dir_;
  GatedEngine* gate_ = nullptr;
  std::unique_ptr<FlatStore> store_;
};

TEST_F(StoreRestoreTest, LookupReportsLeadingHitsSlowestMediumAndBytes) {
  Open(RestoreScheduler::kMas);
  const auto dram = PutSession(1, 3, MediaType::kDram);
  const auto ssd = PutSession(2, 2, MediaType::kSsd);
  const uint64_t bb = kLayout.block_bytes();

  LookupResult d = store_->Lookup(dram);
  EXPECT_EQ(d.leading_hits, 3u);
  EXPECT_EQ(d.slowest_medium, MediaType::kDram);
  EXPECT_EQ(d.dram_bytes, 3 * bb);
  EXPECT_EQ(d.ssd_bytes, 0u);

  // A DRAM prefix followed by SSD blocks: the slowest is SSD; a missing key ends the prefix.
  std::vector<Key> mixed = {dram[0], dram[1], ssd[0], ssd[1], MakeKeys(9, 0, 1)[0], dram[2]};
  LookupResult m = store_->Lookup(mixed);
  EXPECT_EQ(m.leading_hits, 4u);
  EXPECT_EQ(m.slowest_medium, MediaType::kSsd);
  EXPECT_EQ(m.dram_bytes, 2 * bb);
  EXPECT_EQ(m.ssd_bytes, 2 * bb);
  EXPECT_EQ(store_->Exists(mixed), 4u);

  LookupResult none = store_->Lookup(MakeKeys(9, 0, 2));
  EXPECT_EQ(none.leading_hits, 0u);
  EXPECT_EQ(none.slowest_medium, MediaType::kDram);
  EXPECT_EQ(none.dram_bytes + none.ssd_bytes, 0u);

  // Past 64 keys (the lookup's chunk) the counts still add up.
  const auto many = PutSession(3, 100, MediaType::kSsd);
  LookupResult l = store_->Lookup(many);
  EXPECT_EQ(l.leading_hits, 100u);
  EXPECT_EQ(l.ssd_bytes, 100 * bb);
}

TEST_F(StoreRestoreTest, DramReadyRestoreIsServedBeforeRestoreReturns) {
  Open(RestoreScheduler::kMas);
  const auto keys = PutSession(1, 4, MediaType::kDram);
  Dest dst(keys.size());
  std::vector<uint32_t> layers;
  RestoreOptions o;
  o.on_layer = [&](uint32_t l) { layers.push_back(l); };
  auto h = Start(keys, dst, o);
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(h->done());
  EXPECT_EQ(layers, (std::vector<uint32_t>{0, 1, 2, 3}));
  for (uint32_t l = 0; l < kLayout.num_layers; ++l) EXPECT_TRUE(h->WaitLayer(l).ok());
  EXPECT_TRUE(h->WaitLayer(kLayout.num_layers).IsInvalidArgument());
  auto r = h->Wait();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectDelivered(keys, dst, *r);
  EXPECT_EQ(r->bytes_from_dram, keys.size() * kLayout.block_bytes());
  EXPECT_EQ(r->queued_ns, 0);
  EXPECT_EQ(gate_->held(), 0u);
}

// The paper's Figure 4: R1..R6 arrive in turn, odd ones need SSD, even ones are DRAM-ready. Under
// FC-MAS every DRAM request is served while the SSD restores ahead of it are still reading; under
// one FCFS queue each waits for the SSD restore before it.
TEST_F(StoreRestoreTest, Figure4DramHitsNeverWaitBehindSsdRestoresUnderMas) {
  for (RestoreScheduler policy : {RestoreScheduler::kMas, RestoreScheduler::kFcfs}) {
    SCOPED_TRACE(policy == RestoreScheduler::kMas ? "mas" : "fcfs");
    store_.reset();
    Open(policy, 64 * kMiB);
    std::vector<std::vector<Key>> keys;
    for (uint64_t i = 1; i <= 6; ++i) {
      keys.push_back(PutSession(i, 2, i % 2 == 1 ? MediaType::kSsd : MediaType::kDram));
    }
    std::vector<std::unique_ptr<Dest>> dst;
    std::vector<std::unique_ptr<RestoreHandle>> h;
    for (size_t i = 0; i < 6; ++i) {
      dst.push_back(std::make_unique<Dest>(2));
      h.push_back(Start(keys[i], *dst[i]));
      ASSERT_NE(h.back(), nullptr);
    }
    for (size_t i = 0; i < 6; ++i) {
      const bool dram = i % 2 == 1;
      // Nothing has been read from SSD yet.
      EXPECT_FALSE(h[i]->done() && !dram) << "R" << i + 1;
      if (policy == RestoreScheduler::kMas) {
        EXPECT_EQ(h[i]->done(), dram) << "R" << i + 1;
      } else {
        EXPECT_FALSE(h[i]->done()) << "R" << i + 1 << " must wait for R1's reads";
      }
    }
    // Under FC-MAS every SSD restore was admitted at once (the window holds them all); under FCFS
    // only the head reads. Each SSD restore here is one read (checked below).
    ASSERT_EQ(gate_->Settle(policy == RestoreScheduler::kMas ? 3 : 1),
              policy == RestoreScheduler::kMas ? 3u : 1u);
    if (policy == RestoreScheduler::kFcfs) {
      // Each SSD head's read releases the DRAM request behind it, and only that one.
      for (size_t i = 0; i < 6; i += 2) {
        ASSERT_EQ(gate_->Release(), 1u);
        ASSERT_TRUE(h[i]->WaitFor(std::chrono::seconds(10))) << "R" << i + 1;
        ASSERT_TRUE(h[i + 1]->WaitFor(std::chrono::seconds(10))) << "R" << i + 2;
        if (i + 2 < 6) {
          ASSERT_EQ(gate_->Settle(1), 1u) << "R" << i + 3 << " is the head now";
          EXPECT_FALSE(h[i + 2]->done()) << "R" << i + 3;
          EXPECT_FALSE(h[i + 3]->done()) << "R" << i + 4;
        }
      }
    }
    gate_->Open();
    for (size_t i = 0; i < 6; ++i) {
      auto r = h[i]->Wait();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ExpectDelivered(keys[i], *dst[i], *r);
      EXPECT_EQ(r->ssd_reads, i % 2 == 0 ? 1u : 0u) << "R" << i + 1;
    }
    const StoreStats s = store_->GetStats();
    EXPECT_EQ(s.restores_dram_ready, 3u);
    EXPECT_EQ(s.restores_ssd, 3u);
  }
}

// A mixed request (a DRAM prefix, an SSD history) is SSD-preparing: it waits for its reads.
TEST_F(StoreRestoreTest, MixedRequestIsSsdPreparingAndDeliversBothMedia) {
  Open(RestoreScheduler::kMas);
  const auto dram = PutSession(1, 2, MediaType::kDram);
  const auto ssd = PutSession(2, 2, MediaType::kSsd);
  std::vector<Key> keys = {dram[0], dram[1], ssd[0], ssd[1]};
  Dest dst(keys.size());
  auto h = Start(keys, dst);
  ASSERT_NE(h, nullptr);
  EXPECT_FALSE(h->done());
  EXPECT_FALSE(h->WaitFor(std::chrono::milliseconds(20)));
  gate_->Open();
  auto r = h->Wait();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectDelivered(keys, dst, *r);
  EXPECT_EQ(r->bytes_from_dram, 2 * kLayout.block_bytes());
  EXPECT_EQ(r->bytes_from_ssd, 2 * kLayout.block_bytes());
  EXPECT_GT(r->ssd_reads, 0u);
}

// With room for one request in the window, HRRN admits the smaller of two that waited equally
// long, and a request ready before an earlier-arrived one is not held back for it.
TEST_F(StoreRestoreTest, WindowAdmitsByResponseRatio) {
  const uint64_t bb = kLayout.block_bytes();
  Open(RestoreScheduler::kMas, 8 * bb);
  const auto a = PutSession(1, 8, MediaType::kSsd);
  const auto big = PutSession(2, 8, MediaType::kSsd);
  const auto small = PutSession(3, 2, MediaType::kSsd);
  Dest da(8), db(8), ds(2);
  // One arrival time for the two queued ones: equal waits, so the ratio favours the smaller.
  RestoreOptions o;
  o.arrival_ns = SteadyNowNs();
  auto ha = Start(a, da);
  auto hb = Start(big, db, o);
  auto hs = Start(small, ds, o);
  ASSERT_TRUE(ha && hb && hs);
  ASSERT_EQ(gate_->Settle(1), 1u);  // only A fits
  ASSERT_EQ(gate_->Release(), 1u);
  ASSERT_TRUE(ha->WaitFor(std::chrono::seconds(10)));
  // A's read freed the window: the small one is admitted, and the big one no longer fits.
  ASSERT_EQ(gate_->Settle(1), 1u);
  ASSERT_EQ(gate_->Release(), 1u);
  ASSERT_TRUE(hs->WaitFor(std::chrono::seconds(10)));
  EXPECT_FALSE(hb->done());
  gate_->Open();
  ASSERT_TRUE(hb->Wait().ok());
  EXPECT_TRUE(hs->Wait().ok());
  EXPECT_GT(hb->Wait()->queued_ns, 0);
}

TEST_F(StoreRestoreTest, CancelDropsAQueuedRequestAndStopsOneInFlight) {
  const uint64_t bb = kLayout.block_bytes();
  Open(RestoreScheduler::kMas, 4 * bb);
  const auto a = PutSession(1, 4, MediaType::kSsd);
  const auto b = PutSession(2, 4, MediaType::kSsd);
  Dest da(4), db(4);
  auto ha = Start(a, da);
  auto hb = Start(b, db);  // queued behind A: the window holds one
  ASSERT_TRUE(ha && hb);
  EXPECT_EQ(gate_->Settle(1), 1u);
  hb->Cancel();
  ASSERT_TRUE(hb->WaitFor(std::chrono::seconds(10))) << "a queued request is dropped at once";
  EXPECT_EQ(hb->Wait().status().code(), StatusCode::kAborted);
  EXPECT_TRUE(hb->WaitLayer(0).code() == StatusCode::kAborted);
  // In flight: its held reads land, nothing more is issued, and it fails with Aborted.
  ha->Cancel();
  gate_->Open();
  EXPECT_EQ(ha->Wait().status().code(), StatusCode::kAborted);
  ha->Cancel();  // a no-op once done
  EXPECT_EQ(store_->GetStats().restores_cancelled, 2u);
  // The pins are gone: both scopes can be reclaimed, and the store serves what is left.
  Dest again(4);
  auto r = store_->Get(a, kLayout, again.blocks.buffers());
  ASSERT_TRUE(r.ok());
  ExpectDelivered(a, again, *r);
  EXPECT_GT(store_->Reclaim(MediaType::kSsd, 0.0), 0u);
  EXPECT_EQ(store_->Exists(b), 0u);
}

TEST_F(StoreRestoreTest, DestroyingAnUnfinishedHandleCancelsAndWaits) {
  Open(RestoreScheduler::kMas);
  const auto a = PutSession(1, 4, MediaType::kSsd);
  {
    Dest da(4);
    auto ha = Start(a, da);
    ASSERT_NE(ha, nullptr);
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      gate_->Open();
    });
    ha.reset();  // returns once the reads into `da` are back
    opener.join();
  }
  EXPECT_EQ(store_->GetStats().restores_cancelled, 1u);
  EXPECT_EQ(store_->Reclaim(MediaType::kSsd, 0.0) > 0, true);  // unpinned
}

TEST_F(StoreRestoreTest, BadBuffersAndLayoutFailBeforeAnythingIsRead) {
  Open(RestoreScheduler::kMas);
  const auto keys = PutSession(1, 2, MediaType::kSsd);
  Dest dst(2);
  KvLayout other = kLayout;
  other.num_layers = 2;
  HostBlocks small(other, 2);
  auto r = store_->Restore(keys, other, small.buffers());
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  std::vector<void*> nulls(2, nullptr);
  auto n = store_->Restore(
      keys, kLayout, BlockBuffers{BufferKind::kBlockContiguous, std::span<void* const>(nulls)});
  EXPECT_TRUE(n.status().IsInvalidArgument());
  EXPECT_EQ(gate_->held(), 0u);
  // Nothing stayed pinned.
  EXPECT_GT(store_->Reclaim(MediaType::kSsd, 0.0), 0u);
}

// A request larger than the window under a continuous stream of small SSD restores from other
// threads still completes: its response ratio grows until it is the best, then the window drains
// for it (real reads, real time).
TEST_F(StoreRestoreTest, LargeRestoreIsNotStarvedByAStreamOfSmallOnes) {
  const uint64_t bb = kLayout.block_bytes();
  Open(RestoreScheduler::kMas, 4 * bb, /*gated=*/false);
  const auto large = PutSession(1, 16, MediaType::kSsd);  // 4x the window
  std::vector<std::vector<Key>> smalls;
  for (uint64_t i = 0; i < 8; ++i) smalls.push_back(PutSession(10 + i, 1, MediaType::kSsd));

  std::atomic<bool> large_done{false};
  std::atomic<uint64_t> small_done{0}, small_after{0};
  std::atomic<bool> failed{false};
  constexpr uint64_t kMaxSmall = 50000;  // the stream ends by itself if the large one never does
  auto stream = [&](int t) {
    // At most 5 restores of this thread in flight, each into a destination of its own.
    std::vector<std::unique_ptr<Dest>> d;
    for (int k = 0; k < 5; ++k) d.push_back(std::make_unique<Dest>(1));
    std::deque<std::unique_ptr<RestoreHandle>> inflight;
    for (uint64_t i = 0; small_done.load() < kMaxSmall && small_after.load() < 200; ++i) {
      auto r =
          store_->Restore(smalls[(i + t) % smalls.size()], kLayout, d[i % 5]->blocks.buffers());
      if (!r.ok()) {
        failed = true;
        return;
      }
      inflight.push_back(std::move(*r));
      while (inflight.size() > 4) {
        if (!inflight.front()->Wait().ok()) failed = true;
        inflight.pop_front();
        small_done++;
        if (large_done) small_after++;
      }
    }
    for (auto& h : inflight) (void)h->Wait();
  };
  std::thread s1(stream, 0), s2(stream, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the stream fills the window
  Dest dl(large.size());
  const uint64_t at_arrival = small_done.load();
  auto r = store_->Get(large, kLayout, dl.blocks.buffers());
  large_done = true;
  const uint64_t before = small_done.load();
  const uint64_t overtook = before - at_arrival;
  s1.join();
  s2.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectDelivered(large, dl, *r);
  EXPECT_FALSE(failed);
  EXPECT_LT(before, kMaxSmall) << "the large restore finished only once the stream ended";
  // HRRN makes it the best once its wait is 16x (its size over a small one's) the oldest small
  // one's, a few queue lengths of small restores (about 200 here); a scheduler that lets small
  // requests backfill the window it waits for lets tens of thousands pass (measured: 26886).
  EXPECT_LT(overtook, 2000u) << "small restores served while the large one waited";
  EXPECT_GT(small_after.load(), 0u) << "the stream went on after the large restore";
  EXPECT_GT(r->queued_ns, 0);
  std::printf(
      "large restore (4x the window) waited %.2f ms for the window; %llu small restores "
      "were served while it waited\n",
      r->queued_ns / 1e6, static_cast<unsigned long long>(overtook));
}

// Any number of threads submit mixed restores at once; every byte arrives.
TEST_F(StoreRestoreTest, ConcurrentSubmittersGetTheirOwnBytes) {
  Open(RestoreScheduler::kMas, 1 * kMiB, /*gated=*/false);
  std::vector<std::vector<Key>> sessions;
  for (uint64_t i = 0; i < 8; ++i) {
    sessions.push_back(PutSession(i + 1, 3, i % 2 ? MediaType::kSsd : MediaType::kDram));
  }
  std::atomic<int> bad{0};
  auto worker = [&](int t) {
    for (int i = 0; i < 60; ++i) {
      const auto& keys = sessions[(i * 3 + t) % sessions.size()];
      Dest d(keys.size());
      auto h = store_->Restore(keys, kLayout, d.blocks.buffers());
      if (!h.ok()) {
        bad++;
        continue;
      }
      for (uint32_t l = 0; l < kLayout.num_layers; ++l) {
        if (!(*h)->WaitLayer(l).ok()) bad++;
      }
      auto r = (*h)->Wait();
      if (!r.ok() || r->hits != keys.size()) {
        bad++;
        continue;
      }
      std::vector<uint8_t> want(kLayout.block_bytes());
      for (size_t b = 0; b < keys.size(); ++b) {
        FillBlock(keys[b], want.data(), want.size());
        if (std::memcmp(want.data(), d.blocks.block(b), want.size()) != 0) bad++;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace flatcake
