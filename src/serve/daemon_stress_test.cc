// The daemon under load in this process: client threads, each with a connection of its own
// (RemoteStore), putting, looking up and restoring batches of keys they share on both media with
// every byte verified; raw clients that reserve or pin and go away in the middle; restores
// cancelled in flight; reclamation of the whole store now and then. No one ever reads a wrong
// byte, no call fails but for a full store, and once every client is gone nothing is reserved
// any more. Runs FLATCAKE_STRESS_SECONDS (default 3) seconds; part of the ThreadSanitizer run of
// the test command.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "serve/daemon.h"
#include "serve/daemon_connection.h"
#include "serve/remote_store.h"
#include "serve/rpc_convert.h"
#include "serve/serve_log.h"
#include "store/flat_store.h"
#include "testing/daemon_fixture.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake::serve {
namespace {

using testing::kServeLayout;

double StressSeconds() {
  const char* s = std::getenv("FLATCAKE_STRESS_SECONDS");
  return s ? std::atof(s) : 3.0;
}

TEST(DaemonStress, ClientsLeasesAndReclamationShareTheDaemonSafely) {
  SetLogLevel(LogLevel::kWarning);  // a line per connection would drown the output
  TempDir dir;
  DaemonOptions o = testing::SmallDaemonOptions(dir.path());
  o.store.dram_bytes = 2 * kMiB;
  o.store.ssd_bytes = 8 * kMiB;
  o.store.ssd_file_bytes = 1 * kMiB;
  o.store.read_window_bytes = 512 * kKiB;
  auto daemon = testing::StartDaemon(o);
  ASSERT_NE(daemon, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> restores{0}, hits{0}, full{0}, cancelled{0}, dropped{0}, failures{0};

  auto client = [&](uint64_t seed) {
    auto c = testing::ConnectClient(o.socket_path, seed % 2 ? "odd" : "even");
    if (c == nullptr) return;
    std::mt19937_64 rng(seed);
    while (!stop.load()) {
      const std::vector<Key> keys = MakeKeys(seed % 2, rng() % 128, 1 + rng() % 8);
      auto put = testing::PutBlocks(*c, keys, rng() % 2 ? MediaType::kDram : MediaType::kSsd);
      if (!put.ok()) {
        (put.status().IsNoSpace() ? full : failures)++;
        if (!put.status().IsNoSpace()) ADD_FAILURE() << put.status().ToString();
      }
      (void)c->Lookup(keys);
      HostBlocks dst(kServeLayout, keys.size());
      auto h = c->Restore(keys, kServeLayout, dst.buffers());
      ASSERT_TRUE(h.ok());
      if (rng() % 8 == 0) {  // cancelled in flight, or done already
        (*h)->Cancel();
        auto r = (*h)->Wait();
        if (!r.ok()) {
          cancelled++;
          continue;
        }
      }
      auto r = (*h)->Wait();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      testing::ExpectFoundBlocksExact(keys, r->found, dst);
      restores++;
      hits += r->hits;
    }
  };
  // Reserves or pins through a connection of its own, then drops it in the middle.
  auto leaver = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    while (!stop.load()) {
      auto c = DaemonConnection::Open(o.socket_path, "odd", testing::SmallClientOptions());
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      const std::vector<Key> keys = MakeKeys(1, rng() % 128, 4);
      rpc::Request r;
      if (rng() % 2) {
        r.mutable_reserve_write()->set_keys(EncodeKeys(keys));
        *r.mutable_reserve_write()->mutable_layout() = ToRpc(kServeLayout);
        (void)(*c)->Call(std::move(r), rpc::Response::kReserveWrite);
      } else {
        r.mutable_pin_read()->set_keys(EncodeKeys(keys));
        *r.mutable_pin_read()->mutable_layout() = ToRpc(kServeLayout);
        (void)(*c)->Call(std::move(r), rpc::Response::kPinRead);
      }
      dropped++;
    }
  };
  std::vector<std::thread> threads;
  for (uint64_t i = 0; i < 4; ++i) threads.emplace_back(client, i + 1);
  threads.emplace_back(leaver, 99);
  threads.emplace_back([&] {
    while (!stop.load()) {
      (void)daemon->store().Reclaim(MediaType::kDram, 0.3);
      (void)daemon->store().Reclaim(MediaType::kSsd, 0.3);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::this_thread::sleep_for(std::chrono::duration<double>(StressSeconds()));
  stop.store(true);
  for (auto& t : threads) t.join();

  EXPECT_EQ(failures.load(), 0u);
  EXPECT_GT(restores.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
  EXPECT_GT(dropped.load(), 0u);
  ASSERT_TRUE(testing::Eventually([&] { return daemon->num_clients() == 0; }));
  for (const TenantUsage& u : daemon->TenantUsages()) {
    EXPECT_EQ(u.reserved_bytes[0], 0u) << u.tenant;
    EXPECT_EQ(u.reserved_bytes[1], 0u) << u.tenant;
  }
  // Everything reclaimable once no one pins anything: what the tenants are charged goes too.
  daemon->store().Reclaim(MediaType::kDram, 0);
  daemon->store().Reclaim(MediaType::kSsd, 0);
  EXPECT_EQ(daemon->store().GetStats().dram.used_bytes, 0u);
  EXPECT_EQ(daemon->store().GetStats().ssd.used_bytes, 0u);
  for (const TenantUsage& u : daemon->TenantUsages()) {
    EXPECT_EQ(u.used_bytes[0], 0u) << u.tenant;
    EXPECT_EQ(u.used_bytes[1], 0u) << u.tenant;
  }
  std::printf("restores %lu, hits %lu, full %lu, cancelled %lu, clients gone mid-lease %lu\n",
              static_cast<unsigned long>(restores.load()), static_cast<unsigned long>(hits.load()),
              static_cast<unsigned long>(full.load()), static_cast<unsigned long>(cancelled.load()),
              static_cast<unsigned long>(dropped.load()));
}

}  // namespace
}  // namespace flatcake::serve
