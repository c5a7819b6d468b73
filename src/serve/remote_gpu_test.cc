// The GPU data path (gpu/gpu_transfer.h) in a client of the node daemon, over the daemon's read
// leases (RemoteStore::OpenReadLeases), against the fake device: the client's own mapping of the
// arena and its own reads of the pool files land every byte in the paged pool, the daemon counts
// the reads, device puts go through the daemon, and leases whose connection broke fail rather
// than trust recycled bytes.
#include <gtest/gtest.h>

#include <vector>

#include "gpu/fake_device.h"
#include "gpu/gpu_transfer.h"
#include "serve/remote_store.h"
#include "store/flat_store.h"
#include "testing/daemon_fixture.h"
#include "testing/paged_pool.h"
#include "util/temp_dir.h"

namespace flatcake::serve {
namespace {

using testing::HostPagedPool;
using testing::kServeLayout;
using testing::PutBlocks;
using testing::ReversedPages;

class RemoteGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    daemon_ = testing::StartDaemon(testing::SmallDaemonOptions(dir_.path()));
    ASSERT_NE(daemon_, nullptr);
    client_ = testing::ConnectClient(dir_.path() + "/sock", "t");
    ASSERT_NE(client_, nullptr);
  }
  std::unique_ptr<gpu::GpuTransfer> Transfer() {
    auto leases = client_->OpenReadLeases();
    EXPECT_TRUE(leases.ok()) << leases.status().ToString();
    if (!leases.ok()) return nullptr;
    gpu::GpuTransferOptions to;
    to.slot_bytes = 2 * kServeLayout.block_bytes();  // several chunks per layer
    auto t = gpu::GpuTransfer::Create(std::move(*leases), std::make_shared<gpu::FakeDevice>(),
                                      gpu::GpuMode::kFake, to);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }

  TempDir dir_{"flatcake-remote-gpu"};
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<RemoteStore> client_;
};

TEST_F(RemoteGpuTest, RestoresBothMediaIntoPagesThroughTheClientsOwnMapping) {
  const std::vector<Key> dram = MakeKeys(1, 0, 5), ssd = MakeKeys(2, 0, 6);
  ASSERT_TRUE(PutBlocks(*client_, dram, MediaType::kDram).ok());
  ASSERT_TRUE(PutBlocks(*client_, ssd, MediaType::kSsd).ok());
  std::vector<Key> keys = dram;
  keys.insert(keys.end(), ssd.begin(), ssd.end());
  keys.push_back(MakeKeys(3, 0, 1)[0]);  // a miss
  auto t = Transfer();
  ASSERT_NE(t, nullptr);
  HostPagedPool pool(kServeLayout, 16);
  const auto pages = ReversedPages(keys.size(), 16);
  const uint64_t hits_before = daemon_->store().GetStats().hits;
  auto r = t->Restore(keys, kServeLayout, pool.Target(pages));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (uint32_t l = 0; l < kServeLayout.num_layers; ++l) ASSERT_TRUE((*r)->WaitLayer(l).ok());
  auto got = (*r)->Wait();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->hits, dram.size() + ssd.size());
  EXPECT_EQ(got->leading_hits, dram.size() + ssd.size());
  EXPECT_EQ(got->corrupt, 0u);
  EXPECT_EQ(got->bytes_from_dram, dram.size() * kServeLayout.block_bytes());
  EXPECT_EQ(got->bytes_from_ssd, ssd.size() * kServeLayout.block_bytes());
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    EXPECT_TRUE(pool.Holds(keys[i], pages[i], kServeLayout.num_layers)) << i;
  }
  EXPECT_FALSE(pool.Holds(keys.back(), pages.back(), 1));
  EXPECT_GT(t->stats().chunks, kServeLayout.num_layers);
  // The Unpin told the daemon what was delivered: its store counts the hits.
  EXPECT_TRUE(testing::Eventually(
      [&] { return daemon_->store().GetStats().hits == hits_before + dram.size() + ssd.size(); }));
}

TEST_F(RemoteGpuTest, DevicePutsGoThroughTheDaemonAndReadBackWhole) {
  const std::vector<Key> keys = MakeKeys(4, 0, 4);
  HostPagedPool src(kServeLayout, 8);
  const std::vector<uint64_t> pages = {7, 2, 5, 0};
  for (size_t i = 0; i < keys.size(); ++i) {  // key i's content in page pages[i]
    std::vector<uint8_t> block(kServeLayout.block_bytes());
    FillBlock(keys[i], block.data(), block.size());
    for (uint32_t s = 0; s < kServeLayout.num_layers * kServeLayout.num_planes; ++s) {
      std::memcpy(src.arrays[s].data() + pages[i] * kServeLayout.slice_bytes,
                  block.data() + s * kServeLayout.slice_bytes, kServeLayout.slice_bytes);
    }
  }
  auto t = Transfer();
  ASSERT_NE(t, nullptr);
  auto put = t->Put(keys, kServeLayout, src.Target(pages));
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(client_->Exists(keys), keys.size());
  EXPECT_EQ(testing::ServedBlocks(*client_, keys, kServeLayout), testing::AllOf(keys.size(), 1));
}

TEST_F(RemoteGpuTest, LeasesWhoseConnectionBrokeRefuseToPin) {
  const std::vector<Key> keys = MakeKeys(5, 0, 3);
  ASSERT_TRUE(PutBlocks(*client_, keys, MediaType::kSsd).ok());
  auto t = Transfer();
  ASSERT_NE(t, nullptr);
  daemon_->Shutdown();
  daemon_.reset();
  HostPagedPool pool(kServeLayout, 4);
  auto r = t->Restore(keys, kServeLayout, pool.Target({0, 1, 2}));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsIOError()) << r.status().ToString();
}

TEST(RemoteGpuLeasesTest, OpeningLeasesNeedsTheDaemon) {
  TempDir dir("flatcake-remote-gpu");
  ASSERT_TRUE(dir.ok());
  auto daemon = testing::StartDaemon(testing::SmallDaemonOptions(dir.path()));
  ASSERT_NE(daemon, nullptr);
  auto client = testing::ConnectClient(dir.path() + "/sock", "t");
  ASSERT_NE(client, nullptr);
  daemon->Shutdown();
  daemon.reset();
  auto leases = client->OpenReadLeases();
  ASSERT_FALSE(leases.ok());
  EXPECT_TRUE(leases.status().IsIOError()) << leases.status().ToString();
}

}  // namespace
}  // namespace flatcake::serve
