// Leases under load: clients that write through reservations and read through pins admitted by
// FC-MAS, each with its own data half (testing/media_client.h), beside embedded puts, restores
// and reclamation, with owners released in the middle of their writes and reads. No one ever
// sees wrong bytes, nothing aborted becomes visible, and every admission is told once. Runs
// FLATCAKE_STRESS_SECONDS (default 4) seconds; part of the ThreadSanitizer run of the test
// command.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "store/flat_store.h"
#include "testing/media_client.h"
#include "testing/store_blocks.h"
#include "util/block_content.h"
#include "util/temp_dir.h"
#include "util/thread_annotations.h"

namespace flatcake {
namespace {

constexpr KvLayout kLayout{2, 2, 4096};  // 16 KiB blocks
constexpr uint64_t kKeySpace = 512;      // keys every thread draws from
constexpr uint64_t kBatch = 8;

double StressSeconds() {
  const char* s = std::getenv("FLATCAKE_STRESS_SECONDS");
  return s ? std::atof(s) : 4.0;
}

// A batch of consecutive keys of the shared key space, from a random start.
std::vector<Key> Batch(std::mt19937_64& rng) {
  return MakeKeys(77, rng() % (kKeySpace - kBatch), kBatch);
}

// One admission's outcome, waited for by the client thread that asked.
struct Admission {
  Mutex mu;
  CondVar cv;
  int told GUARDED_BY(mu) = 0;
  Status status GUARDED_BY(mu);
};

TEST(StoreLeaseStress, ClientsAndTheEmbeddedStoreShareTheMediaSafely) {
  TempDir dir;
  StoreOptions o = testing::SmallStoreOptions(dir.path());
  o.dram_bytes = 2 * kMiB;
  o.ssd_bytes = 8 * kMiB;
  o.ssd_file_bytes = 1 * kMiB;
  o.index_capacity = 2048;  // small, so that churn compacts it with reservations in force
  o.read_window_bytes = 4 * kBatch * kLayout.block_bytes();
  o.high_watermark = 0.8;
  o.low_watermark = 0.5;
  auto opened = FlatStore::OpenShared(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  FlatStore& store = **opened;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> published{0}, aborted{0}, released{0}, reads{0}, hits{0}, told_twice{0},
      errors{0};

  auto writer = [&](uint64_t id) {
    testing::MediaClient client(store.shared_media());
    std::mt19937_64 rng(id);
    uint64_t fresh = 0;
    for (uint64_t owner = id << 32; !stop.load(); ++owner) {
      // Half the batches are keys never written before: their tombstones pile up until the
      // index is compacted, with other reservations in force.
      const std::vector<Key> keys =
          rng() % 2 ? Batch(rng) : MakeKeys(1000 + id, kBatch * fresh++, kBatch);
      WriteHints h;
      h.force_medium = rng() % 2 ? MediaType::kDram : MediaType::kSsd;
      auto r = store.ReserveWrite(owner, keys, kLayout, h);
      if (!r.ok()) {  // no space: every scope pinned at the moment
        errors++;
        continue;
      }
      if (r->id == 0) continue;
      const std::vector<uint64_t> sums = client.Write(*r, keys);
      switch (rng() % 4) {
        case 0:
          ASSERT_TRUE(store.AbortWrite(owner, r->id).ok());
          aborted++;
          break;
        case 1:
          EXPECT_EQ(store.ReleaseOwner(owner).writes, 1u);
          released++;
          break;
        default: ASSERT_TRUE(store.PublishWrite(owner, r->id, sums).ok()); published++;
      }
    }
  };
  auto reader = [&](uint64_t id) {
    testing::MediaClient client(store.shared_media());
    std::mt19937_64 rng(id);
    for (uint64_t owner = id << 32; !stop.load(); ++owner) {
      const std::vector<Key> keys = Batch(rng);
      auto pin = store.PinRead(owner, keys, kLayout);
      ASSERT_TRUE(pin.ok()) << pin.status().ToString();
      Admission adm;
      ASSERT_TRUE(store
                      .AdmitRead(owner, pin->id, kArrivalNow,
                                 [&adm, &told_twice](Status st) {
                                   MutexLock lock(adm.mu);
                                   if (adm.told++ > 0) told_twice++;
                                   adm.status = st;
                                   adm.cv.NotifyAll();
                                 })
                      .ok());
      Status st;
      {
        MutexLock lock(adm.mu);
        while (adm.told == 0) adm.cv.Wait(adm.mu);
        st = adm.status;
      }
      ASSERT_TRUE(st.ok()) << st.ToString();
      if (rng() % 8 == 0) {  // the client dies with its read admitted
        store.ReleaseOwner(owner);
        continue;
      }
      const GetResult r = client.Read(*pin, keys);  // every block found is byte-exact
      reads++;
      hits += r.hits;
      EXPECT_EQ(r.corrupt, 0u);
      if (pin->id != 0) {
        ASSERT_TRUE(store.FinishRead(owner, pin->id).ok());
        ASSERT_TRUE(store.Unpin(owner, pin->id).ok());
      }
    }
  };
  auto embedded = [&] {
    std::mt19937_64 rng(99);
    while (!stop.load()) {
      const std::vector<Key> keys = Batch(rng);
      HostBlocks src(kLayout, keys.size());
      src.Fill(keys);
      WriteHints h;
      h.force_medium = rng() % 2 ? MediaType::kDram : MediaType::kSsd;
      if (!store.Put(keys, kLayout, src.buffers(), h).ok()) errors++;
      testing::ServedBlocks(store, Batch(rng), kLayout);  // byte-exact or missing
      if (rng() % 16 == 0) store.Reclaim(rng() % 2 ? MediaType::kDram : MediaType::kSsd, 0.3);
    }
  };

  std::vector<std::thread> threads;
  for (uint64_t i = 1; i <= 2; ++i) threads.emplace_back(writer, i);
  for (uint64_t i = 3; i <= 4; ++i) threads.emplace_back(reader, i);
  threads.emplace_back(embedded);
  std::this_thread::sleep_for(std::chrono::duration<double>(StressSeconds()));
  stop = true;
  for (auto& t : threads) t.join();

  EXPECT_EQ(told_twice.load(), 0u);
  EXPECT_GT(published.load(), 0u);
  EXPECT_GT(aborted.load() + released.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
  const StoreStats st = store.GetStats();
  EXPECT_EQ(st.checksum_mismatches, 0u);
  EXPECT_GT(st.index_compactions, 0u);
  // Every lease ended: nothing is pinned, so everything can be reclaimed.
  store.Reclaim(MediaType::kDram, 0.0);
  store.Reclaim(MediaType::kSsd, 0.0);
  EXPECT_EQ(store.GetStats().dram.used_bytes, 0u);
  EXPECT_EQ(store.GetStats().ssd.used_bytes, 0u);
  std::printf(
      "published %llu, aborted %llu, released %llu, client reads %llu (%llu hits), "
      "index compactions %llu, put errors %llu\n",
      static_cast<unsigned long long>(published.load()),
      static_cast<unsigned long long>(aborted.load()),
      static_cast<unsigned long long>(released.load()),
      static_cast<unsigned long long>(reads.load()), static_cast<unsigned long long>(hits.load()),
      static_cast<unsigned long long>(st.index_compactions),
      static_cast<unsigned long long>(errors.load()));
}

}  // namespace
}  // namespace flatcake
