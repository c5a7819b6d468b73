// The GPU data path against the fake device (gpu/fake_device.h): the window, its ping-pong, the
// order of events, backpressure, the bounce and direct-file paths, verification and device puts,
// end to end through a real FlatStore. Runs everywhere (ctest label gpu-fake).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpu/fake_device.h"
#include "gpu/gpu_transfer.h"
#include "store/flat_store.h"
#include "testing/paged_pool.h"
#include "testing/store_blocks.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake::gpu {
namespace {

using testing::HostPagedPool;
using testing::ReversedPages;
using testing::SmallStoreOptions;

constexpr KvLayout kLayout{4, 2, 16 * kKiB};  // 128 KiB blocks

class GpuFakeTest : public ::testing::Test {
 protected:
  void Open(bool with_ssd) {
    StoreOptions o = SmallStoreOptions(dir_.path());
    o.dram_bytes = 16 * kMiB;
    if (!with_ssd) o.ssd_dirs.clear();
    auto s = FlatStore::OpenWithEngine(o, nullptr);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void PutHost(const std::vector<Key>& keys, MediaType medium) {
    testing::PutFilled(*store_, keys, kLayout, medium);
  }
  std::unique_ptr<GpuTransfer> Transfer(std::shared_ptr<Device> dev, uint64_t slot_bytes) {
    GpuTransferOptions to;
    to.slot_bytes = slot_bytes;
    auto t = GpuTransfer::Create(*store_, std::move(dev), GpuMode::kFake, to);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }

  TempDir dir_{"flatcake-gpu-test"};
  std::unique_ptr<FlatStore> store_;
};

TEST(FakeDeviceTest, EventsCompleteInStreamOrderAndStreamsWaitForThem) {
  FakeDevice dev;
  auto s1 = dev.CreateStream();
  auto s2 = dev.CreateStream();
  auto e = dev.CreateEvent();
  ASSERT_TRUE(s1.ok() && s2.ok() && e.ok());
  EXPECT_TRUE(*dev.Query(*e));  // never recorded: complete
  std::vector<uint8_t> a(4096, 1), b(4096, 0), c(4096, 0);
  dev.TEST_Pause();
  ASSERT_TRUE(dev.Copy(b.data(), a.data(), a.size(), CopyKind::kHostToDevice, *s1).ok());
  ASSERT_TRUE(dev.Record(*e, *s1).ok());
  ASSERT_TRUE(dev.StreamWait(*s2, *e).ok());
  ASSERT_TRUE(dev.Copy(c.data(), b.data(), b.size(), CopyKind::kDeviceToDevice, *s2).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(*dev.Query(*e));  // paused: the recording is pending
  dev.TEST_Resume();
  ASSERT_TRUE(dev.SynchronizeStream(*s2).ok());
  EXPECT_TRUE(*dev.Query(*e));
  EXPECT_EQ(c, a);  // s2's copy ran after s1's, through the event
  const auto log = dev.TEST_log();
  const std::string id = std::to_string(dev.TEST_event_id(*e));
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0], "copy");
  EXPECT_EQ(log[1], "record:" + id);
  EXPECT_EQ(log[2], "wait:" + id);
  EXPECT_EQ(log[3], "copy");
  dev.DestroyEvent(*e);
  dev.DestroyStream(*s1);
  dev.DestroyStream(*s2);
}

TEST(ResolveTargetTest, PagedAndPerSliceTargetsAndTheirErrors) {
  const KvLayout layout{2, 2, 8};
  std::vector<uint8_t> mem(1024);
  DeviceKvTarget paged;
  for (int i = 0; i < 4; ++i) paged.bases.push_back(mem.data() + i * 256);
  paged.pages = {3, 1};
  paged.page_bytes = 16;
  auto r = ResolveTarget(paged, layout, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // key 1, layer 1, plane 0: base[2] + page 1 * 16.
  EXPECT_EQ((*r)[(1 * 2 + 1) * 2 + 0], mem.data() + 2 * 256 + 16);
  EXPECT_EQ((*r)[0], mem.data() + 3 * 16);
  paged.page_bytes = 4;  // below the slice
  EXPECT_FALSE(ResolveTarget(paged, layout, 2).ok());
  paged.page_bytes = 0;
  EXPECT_FALSE(ResolveTarget(paged, layout, 3).ok());  // three keys, two pages
  DeviceKvTarget slices;
  slices.slices.assign(8, mem.data());
  EXPECT_TRUE(ResolveTarget(slices, layout, 2).ok());
  slices.slices[5] = nullptr;
  EXPECT_FALSE(ResolveTarget(slices, layout, 2).ok());
}

// DRAM hits, a slot of 4 blocks' layers: each 10-block layer goes in three chunks through the
// two slots in turn; every byte lands in its page, layer events in layer order.
TEST_F(GpuFakeTest, DramRestorePingPongsThroughTheWindowAndReportsLayersInOrder) {
  Open(false);
  const auto keys = MakeKeys(1, 0, 10);
  PutHost(keys, MediaType::kDram);
  auto dev = std::make_shared<FakeDevice>(FakeDeviceOptions{std::chrono::microseconds(200)});
  auto t = Transfer(dev, 4 * kLayout.num_planes * kLayout.slice_bytes);
  ASSERT_NE(t, nullptr);
  HostPagedPool pool(kLayout, 16);
  const auto pages = ReversedPages(keys.size(), 16);
  auto r = t->Restore(keys, kLayout, pool.Target(pages));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE((*r)->WaitLayer(0).ok());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(pool.Holds(keys[i], pages[i], 1)) << i;
  auto got = (*r)->Wait();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->hits, keys.size());
  EXPECT_EQ(got->corrupt, 0u);
  EXPECT_EQ(got->bytes_from_dram, keys.size() * kLayout.block_bytes());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_TRUE(pool.Holds(keys[i], pages[i], kLayout.num_layers)) << i;
  }
  const GpuTransferStats st = t->stats();
  EXPECT_EQ(st.chunks, 3u * kLayout.num_layers);
  EXPECT_EQ(st.dram_bytes, keys.size() * kLayout.block_bytes());
  // The layer events were recorded in layer order, each after its layer's scatters.
  std::vector<std::string> want_records;
  for (uint32_t l = 0; l < kLayout.num_layers; ++l) {
    auto e = (*r)->LayerEvent(l);
    ASSERT_TRUE(e.ok());
    want_records.push_back("record:" + std::to_string(dev->TEST_event_id(*e)));
  }
  size_t next = 0, scatters = 0;
  for (const std::string& entry : dev->TEST_log()) {
    if (entry == "scatter") ++scatters;
    if (next < want_records.size() && entry == want_records[next]) {
      EXPECT_EQ(scatters, 3 * (next + 1)) << "layer " << next << " reported before its scatters";
      ++next;
    }
  }
  EXPECT_EQ(next, want_records.size());
  // The store counted the lease's read.
  EXPECT_EQ(store_->GetStats().hits, keys.size());
}

// A stalled device: the pipeline fills both slots, then waits on their events instead of
// failing; once the device runs again every restore completes, byte-exact.
TEST_F(GpuFakeTest, FullWindowWaitsForTheDeviceAndNeverAborts) {
  Open(false);
  const auto keys = MakeKeys(2, 0, 8);
  PutHost(keys, MediaType::kDram);
  auto dev = std::make_shared<FakeDevice>();
  auto t = Transfer(dev, 2 * kLayout.num_planes * kLayout.slice_bytes);
  ASSERT_NE(t, nullptr);
  HostPagedPool pool_a(kLayout, 8), pool_b(kLayout, 8);
  const auto pages = ReversedPages(keys.size(), 8);
  dev->TEST_Pause();
  auto a = t->Restore(keys, kLayout, pool_a.Target(pages));
  auto b = t->Restore(keys, kLayout, pool_b.Target(pages));
  ASSERT_TRUE(a.ok() && b.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE((*a)->done());
  // Two slots filled (a third chunk's start found its slot busy), nothing scattered yet.
  EXPECT_LE(t->stats().chunks, 3u);
  EXPECT_EQ(dev->TEST_counters().scatters, 0u);
  dev->TEST_Resume();
  auto ra = (*a)->Wait();
  auto rb = (*b)->Wait();
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->hits, keys.size());
  EXPECT_EQ(rb->hits, keys.size());
  EXPECT_GT(t->stats().window_waits, 0u);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_TRUE(pool_a.Holds(keys[i], pages[i], kLayout.num_layers));
    EXPECT_TRUE(pool_b.Holds(keys[i], pages[i], kLayout.num_layers));
  }
}

// A caller's stream that waits for layer l runs its next work only after layer l's scatter.
TEST_F(GpuFakeTest, CallerStreamWaitsForItsLayer) {
  Open(false);
  const auto keys = MakeKeys(3, 0, 4);
  PutHost(keys, MediaType::kDram);
  auto dev = std::make_shared<FakeDevice>(FakeDeviceOptions{std::chrono::microseconds(500)});
  auto t = Transfer(dev, 32 * kMiB);
  ASSERT_NE(t, nullptr);
  HostPagedPool pool(kLayout, 4);
  const auto pages = ReversedPages(keys.size(), 4);
  auto r = t->Restore(keys, kLayout, pool.Target(pages));
  ASSERT_TRUE(r.ok());
  auto compute = dev->CreateStream();
  ASSERT_TRUE(compute.ok());
  // "Compute" on layer 2: copy its first page out once the layer is in.
  ASSERT_TRUE((*r)->StreamWaitLayer(2, *compute).ok());
  std::vector<uint8_t> seen(kLayout.slice_bytes);
  const uint8_t* page = pool.arrays[2 * kLayout.num_planes].data() + pages[0] * kLayout.slice_bytes;
  ASSERT_TRUE(dev->Copy(seen.data(), page, seen.size(), CopyKind::kDeviceToDevice, *compute).ok());
  ASSERT_TRUE(dev->SynchronizeStream(*compute).ok());
  std::vector<uint8_t> want(kLayout.block_bytes());
  FillBlock(keys[0], want.data(), want.size());
  EXPECT_EQ(0, std::memcmp(seen.data(), want.data() + 2 * kLayout.num_planes * kLayout.slice_bytes,
                           seen.size()));
  ASSERT_TRUE((*r)->Wait().ok());
  EXPECT_FALSE((*r)->LayerEvent(kLayout.num_layers).ok());
  dev->DestroyStream(*compute);
}

// SSD hits through the bounce window (the store's reader) and, with a fake device that reads
// files itself, through the direct-file (cuFile) path; mixed with DRAM hits and a miss.
void RestoreMixed(FlatStore& store, std::shared_ptr<FakeDevice> dev, uint64_t slot_bytes,
                  uint64_t ns) {
  const auto dram_keys = MakeKeys(ns, 0, 5);
  const auto ssd_keys = MakeKeys(ns, 100, 7);
  testing::PutFilled(store, dram_keys, kLayout, MediaType::kDram);
  testing::PutFilled(store, ssd_keys, kLayout, MediaType::kSsd);
  std::vector<Key> keys = ssd_keys;
  keys.insert(keys.begin() + 3, dram_keys.begin(), dram_keys.end());
  keys.push_back(KeyFromId(999, ns));  // a miss
  GpuTransferOptions to;
  to.slot_bytes = slot_bytes;
  to.max_io_bytes = 16 * kKiB;  // several cuFile reads per run
  auto t = GpuTransfer::Create(store, dev, GpuMode::kFake, to);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  HostPagedPool pool(kLayout, 32);
  const auto pages = ReversedPages(keys.size(), 32);
  auto r = (*t)->Restore(keys, kLayout, pool.Target(pages));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto got = (*r)->Wait();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->hits, keys.size() - 1);
  EXPECT_EQ(got->found.back(), 0);
  EXPECT_EQ(got->bytes_from_ssd, ssd_keys.size() * kLayout.block_bytes());
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    EXPECT_TRUE(pool.Holds(keys[i], pages[i], kLayout.num_layers)) << i;
  }
  EXPECT_EQ((*t)->stats().ssd_bytes, ssd_keys.size() * kLayout.block_bytes());
  if (dev->direct_file_io()) {
    EXPECT_FALSE((*t)->stats().file_reads == 0);
    EXPECT_EQ(dev->TEST_counters().file_reads, (*t)->stats().file_reads);
  } else {
    EXPECT_EQ(dev->TEST_counters().file_reads, 0u);
  }
}

TEST_F(GpuFakeTest, SsdAndDramHitsThroughTheBounceWindow) {
  Open(true);
  RestoreMixed(*store_, std::make_shared<FakeDevice>(),
               3 * kLayout.num_planes * kLayout.slice_bytes, 10);
}

TEST_F(GpuFakeTest, SsdAndDramHitsThroughDirectFileReads) {
  Open(true);
  FakeDeviceOptions fo;
  fo.direct_file_io = true;
  RestoreMixed(*store_, std::make_shared<FakeDevice>(fo),
               3 * kLayout.num_planes * kLayout.slice_bytes, 11);
}

// A DRAM block whose stored bytes changed is a miss, counted corrupt; the others are served.
TEST_F(GpuFakeTest, CorruptBlockIsAMiss) {
  Open(false);
  const auto keys = MakeKeys(4, 0, 3);
  PutHost(keys, MediaType::kDram);
  auto t = Transfer(std::make_shared<FakeDevice>(), 32 * kMiB);
  ASSERT_NE(t, nullptr);
  // Flip a byte of block 1 in the arena: find it by its content.
  std::vector<uint8_t> want(kLayout.block_bytes());
  FillBlock(keys[1], want.data(), want.size());
  uint8_t* arena = store_->TEST_dram_arena();
  bool flipped = false;
  for (uint64_t off = 0; off + 64 <= 16 * kMiB && !flipped; off += 8) {
    if (std::memcmp(arena + off, want.data(), 64) == 0) {
      arena[off + 7] ^= 0xFF;
      flipped = true;
    }
  }
  ASSERT_TRUE(flipped);
  HostPagedPool pool(kLayout, 3);
  auto r = t->Restore(keys, kLayout, pool.Target({0, 1, 2}));
  ASSERT_TRUE(r.ok());
  auto got = (*r)->Wait();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->corrupt, 1u);
  EXPECT_EQ(got->found, (std::vector<uint8_t>{1, 0, 1}));
}

TEST_F(GpuFakeTest, NoHitRecordsEveryLayerAndReturnsMisses) {
  Open(false);
  auto dev = std::make_shared<FakeDevice>();
  auto t = Transfer(dev, 32 * kMiB);
  ASSERT_NE(t, nullptr);
  HostPagedPool pool(kLayout, 2);
  const auto keys = MakeKeys(5, 0, 2);
  auto r = t->Restore(keys, kLayout, pool.Target({0, 1}));
  ASSERT_TRUE(r.ok());
  for (uint32_t l = 0; l < kLayout.num_layers; ++l) EXPECT_TRUE((*r)->WaitLayer(l).ok());
  auto got = (*r)->Wait();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->hits, 0u);
  EXPECT_EQ(dev->TEST_counters().scatters, 0u);
}

TEST_F(GpuFakeTest, CancelledRestoreFailsAbortedAndStillRecordsItsLayers) {
  Open(false);
  const auto keys = MakeKeys(6, 0, 8);
  PutHost(keys, MediaType::kDram);
  auto dev = std::make_shared<FakeDevice>();
  auto t = Transfer(dev, 2 * kLayout.num_planes * kLayout.slice_bytes);
  ASSERT_NE(t, nullptr);
  HostPagedPool pool(kLayout, 8);
  dev->TEST_Pause();  // the pipeline stalls on the window; the cancel lands meanwhile
  auto r = t->Restore(keys, kLayout, pool.Target(ReversedPages(8, 8)));
  ASSERT_TRUE(r.ok());
  (*r)->Cancel();
  dev->TEST_Resume();
  auto got = (*r)->Wait();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kAborted);
  for (uint32_t l = 0; l < kLayout.num_layers; ++l) EXPECT_TRUE((*r)->LayerEvent(l).ok());
}

TEST_F(GpuFakeTest, BadTargetsAndOversizedLayersAreRefused) {
  Open(false);
  auto t = Transfer(std::make_shared<FakeDevice>(), 4096);
  ASSERT_NE(t, nullptr);
  HostPagedPool pool(kLayout, 2);
  const auto keys = MakeKeys(7, 0, 2);
  // A block's layer (2 planes x 16 KiB) does not fit a 4 KiB slot.
  EXPECT_EQ(t->Restore(keys, kLayout, pool.Target({0, 1})).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(t->Restore(keys, kLayout, pool.Target({0})).ok());
  GpuTransferOptions bad;
  bad.window_slots = 1;
  EXPECT_FALSE(
      GpuTransfer::Create(*store_, std::make_shared<FakeDevice>(), GpuMode::kFake, bad).ok());
}

// A hit stored with another layout fails the restore at once (it used to wait forever for the
// handle it had made before pinning).
TEST_F(GpuFakeTest, AHitStoredWithAnotherLayoutIsRefusedAtOnce) {
  Open(false);
  const auto keys = MakeKeys(8, 0, 2);
  PutHost(keys, MediaType::kDram);
  auto t = Transfer(std::make_shared<FakeDevice>(), 1 * kMiB);
  ASSERT_NE(t, nullptr);
  const KvLayout other{kLayout.num_layers, kLayout.num_planes, kLayout.slice_bytes / 2};
  HostPagedPool pool(other, 2);
  EXPECT_EQ(t->Restore(keys, other, pool.Target({0, 1})).status().code(),
            StatusCode::kInvalidArgument);
}

// Device puts: pages gathered layer-major through a window smaller than the batch (several
// store Puts chained by prefix_tail), then read back by a host Get and by a device restore.
TEST_F(GpuFakeTest, PutFromDevicePagesReadsBackByteExact) {
  Open(true);
  const auto keys = MakeKeys(8, 0, 9);
  HostPagedPool src(kLayout, 12);
  const auto pages = ReversedPages(keys.size(), 12);
  std::vector<uint8_t> block(kLayout.block_bytes());
  const uint64_t slice = kLayout.slice_bytes;
  for (size_t i = 0; i < keys.size(); ++i) {
    FillBlock(keys[i], block.data(), block.size());
    for (uint32_t l = 0; l < kLayout.num_layers; ++l) {
      for (uint32_t p = 0; p < kLayout.num_planes; ++p) {
        std::memcpy(src.arrays[l * kLayout.num_planes + p].data() + pages[i] * slice,
                    block.data() + (uint64_t{l} * kLayout.num_planes + p) * slice, slice);
      }
    }
  }
  auto dev = std::make_shared<FakeDevice>();
  // Window: 2 slots of 2 blocks' worth = 4 blocks per store Put.
  auto t = Transfer(dev, 2 * kLayout.block_bytes());
  ASSERT_NE(t, nullptr);
  auto put = t->Put(keys, kLayout, src.Target(pages));
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->written, keys.size());
  EXPECT_EQ(dev->TEST_counters().gathers, 3u);
  EXPECT_EQ(testing::ServedBlocks(*store_, keys, kLayout), testing::AllOf(keys.size(), 1));
  auto again = t->Put(keys, kLayout, src.Target(pages));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->already_present, keys.size());
  HostPagedPool dst(kLayout, 12);
  auto r = t->Restore(keys, kLayout, dst.Target(pages));
  ASSERT_TRUE(r.ok());
  auto got = (*r)->Wait();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->hits, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(dst.Holds(keys[i], pages[i], 4));
}

TEST(GpuModeTest, NamesParseAndForcedModes) {
  for (GpuMode m : {GpuMode::kAuto, GpuMode::kGds, GpuMode::kCuFileCompat, GpuMode::kBounce,
                    GpuMode::kNone, GpuMode::kFake}) {
    auto parsed = ParseGpuMode(GpuModeName(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_FALSE(ParseGpuMode("cuda").ok());
  GpuOptions none;
  none.mode = GpuMode::kNone;
  auto opened = OpenGpu(none);
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(opened->probe.mode, GpuMode::kNone);
  EXPECT_EQ(opened->device, nullptr);
  GpuOptions fake;
  fake.mode = GpuMode::kFake;
  opened = OpenGpu(fake);
  ASSERT_TRUE(opened.ok());
  ASSERT_NE(opened->device, nullptr);
  EXPECT_TRUE(opened->device->fake());
  // Auto never fails: without a GPU it is `none` with a reason.
  const GpuProbe probe = ProbeGpu(GpuOptions{});
  if (probe.mode == GpuMode::kNone) EXPECT_FALSE(probe.reason.empty());
}

}  // namespace
}  // namespace flatcake::gpu
