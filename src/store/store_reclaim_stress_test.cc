// Readers, writers and reclamation running at once: no reader ever sees wrong bytes.
//
// Writers keep creating scopes on both media until the watermarks trigger reclamation; a
// reclaimer thread also reclaims aggressively; readers fetch recently written keys and compare
// every delivered byte with the key's deterministic content. Runs FLATCAKE_STRESS_SECONDS
// (default 4) seconds; part of the ThreadSanitizer run of the test command.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "store/flat_store.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake {
namespace {

double StressSeconds() {
  const char* s = std::getenv("FLATCAKE_STRESS_SECONDS");
  return s ? std::atof(s) : 4.0;
}

TEST(StoreReclaimStress, ReadersNeverSeeRecycledBytes) {
  TempDir dir;
  StoreOptions o;
  o.dram_bytes = 4 * kMiB;
  o.ssd_dirs = {dir.path()};
  o.ssd_bytes = 16 * kMiB;
  o.ssd_file_bytes = 1 * kMiB;
  o.max_scopes = 4096;
  o.index_capacity = 2048;  // small (live blocks <= 1280), so churn forces index compactions
  o.io_engine = IoEngineKind::kPosix;
  o.high_watermark = 0.8;
  o.low_watermark = 0.5;
  auto opened = FlatStore::OpenWithEngine(o, nullptr);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  FlatStore& store = **opened;
  const KvLayout layout{2, 2, 4096};  // 16 KiB blocks
  constexpr int kBlocksPerScope = 8;

  std::mutex recent_mu;
  std::vector<std::vector<Key>> recent;  // ring of recently written batches
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> wrong_bytes{0}, blocks_read{0}, hits{0}, puts{0}, put_errors{0};

  auto writer = [&](int id) {
    uint64_t n = 0;
    while (!stop.load()) {
      auto keys = MakeKeys(1000 + id, n * kBlocksPerScope, kBlocksPerScope);
      HostBlocks src(layout, keys.size());
      src.Fill(keys);
      WriteHints h;
      h.force_medium = (n % 2) ? MediaType::kDram : MediaType::kSsd;
      auto r = store.Put(keys, layout, src.buffers(), h);
      if (!r.ok()) {
        put_errors++;
      } else {
        puts++;
        std::lock_guard<std::mutex> lock(recent_mu);
        if (recent.size() < 64) {
          recent.push_back(keys);
        } else {
          recent[n % 64] = keys;
        }
      }
      ++n;
    }
  };
  auto reader = [&](int id) {
    std::mt19937_64 rng(id);
    HostBlocks dst(layout, kBlocksPerScope);
    std::vector<uint8_t> want(layout.block_bytes());
    while (!stop.load()) {
      std::vector<Key> keys;
      {
        std::lock_guard<std::mutex> lock(recent_mu);
        if (recent.empty()) continue;
        keys = recent[rng() % recent.size()];
      }
      std::memset(dst.bytes.data(), 0, dst.bytes.size());
      auto r = store.Get(keys, layout, dst.buffers());
      if (!r.ok()) continue;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!r->found[i]) continue;
        FillBlock(keys[i], want.data(), want.size());
        if (std::memcmp(want.data(), dst.block(i), want.size()) != 0) wrong_bytes++;
        hits++;
      }
      blocks_read += keys.size();
    }
  };
  auto reclaimer = [&] {
    while (!stop.load()) {
      store.Reclaim(MediaType::kDram, 0.3);
      store.Reclaim(MediaType::kSsd, 0.3);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) threads.emplace_back(writer, i);
  for (int i = 0; i < 3; ++i) threads.emplace_back(reader, i);
  threads.emplace_back(reclaimer);
  std::this_thread::sleep_for(std::chrono::duration<double>(StressSeconds()));
  stop = true;
  for (auto& t : threads) t.join();

  StoreStats s = store.GetStats();
  std::printf(
      "puts %lu (errors %lu), blocks read %lu, hits %lu, scopes reclaimed dram %lu ssd "
      "%lu, index compactions %lu, checksum mismatches %lu, wrong bytes %lu\n",
      (unsigned long)puts.load(), (unsigned long)put_errors.load(),
      (unsigned long)blocks_read.load(), (unsigned long)hits.load(),
      (unsigned long)s.dram.scopes_reclaimed, (unsigned long)s.ssd.scopes_reclaimed,
      (unsigned long)s.index_compactions, (unsigned long)s.checksum_mismatches,
      (unsigned long)wrong_bytes.load());
  EXPECT_EQ(wrong_bytes.load(), 0u);
  EXPECT_EQ(s.checksum_mismatches, 0u);
  EXPECT_EQ(put_errors.load(), 0u);
  // Not vacuous: reads hit, and reclamation really ran on both media.
  EXPECT_GT(hits.load(), 100u);
  EXPECT_GT(s.dram.scopes_reclaimed, 10u);
  EXPECT_GT(s.ssd.scopes_reclaimed, 10u);
  EXPECT_GT(s.index_compactions, 0u);
  // Sessions die with their last scope: only sessions that still own data are remembered.
  EXPECT_LE(s.sessions, s.dram.scopes_live + s.ssd.scopes_live);
  EXPECT_EQ(s.ssd.written_bytes, s.ssd.admitted_bytes);
  EXPECT_EQ(s.dram.written_bytes, s.dram.admitted_bytes);
}

}  // namespace
}  // namespace flatcake
