// The GPU data path on a real device: the kernels, restores in the mode the machine offers and in
// bounce mode, and device puts. Every test skips, saying why, where no GPU can be opened (no
// device, no driver, or a build without the CUDA part); scripts/device-check.sh runs them on one.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "gpu/device.h"
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

constexpr KvLayout kLayout{8, 2, 16 * kKiB};

// A paged pool in device memory, and its copy back to the host for checking.
class DevicePool {
 public:
  DevicePool(Device& dev, const KvLayout& layout, uint64_t pages)
      : dev_(dev), host_(layout, pages) {
    for (auto& a : host_.arrays) {
      auto p = dev_.Allocate(a.size());
      EXPECT_TRUE(p.ok());
      arrays_.push_back(p.ok() ? *p : nullptr);
    }
  }
  ~DevicePool() {
    for (void* p : arrays_) dev_.Free(p);
  }
  DeviceKvTarget Target(const std::vector<uint64_t>& pages) const {
    DeviceKvTarget t;
    t.bases = arrays_;
    t.pages = pages;
    return t;
  }
  // Copies the device pool into host_ (synchronously) and returns it.
  const HostPagedPool& Fetch(DeviceStream s) {
    for (size_t i = 0; i < arrays_.size(); ++i) {
      EXPECT_TRUE(dev_.Copy(host_.arrays[i].data(), arrays_[i], host_.arrays[i].size(),
                            CopyKind::kDeviceToHost, s)
                      .ok());
    }
    EXPECT_TRUE(dev_.SynchronizeStream(s).ok());
    return host_;
  }
  // Uploads host_ (after the test filled it).
  HostPagedPool& host() { return host_; }
  void Upload(DeviceStream s) {
    for (size_t i = 0; i < arrays_.size(); ++i) {
      EXPECT_TRUE(dev_.Copy(arrays_[i], host_.arrays[i].data(), host_.arrays[i].size(),
                            CopyKind::kHostToDevice, s)
                      .ok());
    }
    EXPECT_TRUE(dev_.SynchronizeStream(s).ok());
  }

 private:
  Device& dev_;
  HostPagedPool host_;
  std::vector<void*> arrays_;
};

class GpuDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = OpenGpu(GpuOptions{});
    if (!opened.ok()) GTEST_SKIP() << "no GPU: " << opened.status().ToString();
    if (opened->device == nullptr || opened->device->fake()) {
      GTEST_SKIP() << "no GPU: " << opened->probe.reason;
    }
    opened_ = std::move(*opened);
    auto s = opened_.device->CreateStream();
    ASSERT_TRUE(s.ok());
    stream_ = *s;
  }
  void TearDown() override {
    if (stream_) opened_.device->DestroyStream(stream_);
  }
  void OpenStore() {
    StoreOptions o = testing::SmallStoreOptions(dir_.path());
    o.dram_bytes = 32 * kMiB;
    o.ssd_bytes = 64 * kMiB;
    auto s = FlatStore::OpenWithEngine(o, nullptr);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void Put(const std::vector<Key>& keys, MediaType medium) {
    testing::PutFilled(*store_, keys, kLayout, medium);
  }
  void RestoreInMode(GpuMode mode, std::shared_ptr<Device> dev, uint64_t ns);

  OpenedDevice opened_;
  DeviceStream stream_ = nullptr;
  TempDir dir_{"flatcake-gpu-device-test"};
  std::unique_ptr<FlatStore> store_;
};

// Scatter then gather of 3 x 5 slices of an odd size (the byte path) and of 16 KiB (the wide one).
TEST_F(GpuDeviceTest, ScatterAndGatherKernelsMoveEverySlice) {
  Device& dev = *opened_.device;
  for (uint64_t slice : {uint64_t{1000}, uint64_t{16 * kKiB}}) {
    const uint32_t rows = 3, cols = 5;
    const uint64_t n = uint64_t{rows} * cols;
    std::vector<uint8_t> host(n * slice);
    std::iota(host.begin(), host.end(), uint8_t{7});
    auto window = dev.Allocate(n * slice);
    auto slots = dev.Allocate(n * slice * 2);
    auto back = dev.Allocate(n * slice);
    auto table = dev.Allocate(n * sizeof(void*));
    ASSERT_TRUE(window.ok() && slots.ok() && back.ok() && table.ok());
    // Slice (r, c) goes to slot (n - 1 - (r * cols + c)) * 2 of the slot array.
    std::vector<void*> tbl(n);
    for (uint64_t i = 0; i < n; ++i)
      tbl[i] = static_cast<uint8_t*>(*slots) + (n - 1 - i) * 2 * slice;
    ASSERT_TRUE(
        dev.Copy(*table, tbl.data(), n * sizeof(void*), CopyKind::kHostToDevice, stream_).ok());
    ASSERT_TRUE(dev.Copy(*window, host.data(), host.size(), CopyKind::kHostToDevice, stream_).ok());
    ASSERT_TRUE(
        dev.Scatter(*window, static_cast<void* const*>(*table), cols, rows, cols, slice, stream_)
            .ok());
    ASSERT_TRUE(
        dev.Gather(*back, static_cast<const void* const*>(*table), cols, rows, cols, slice, stream_)
            .ok());
    std::vector<uint8_t> got(n * slice), slot(slice);
    ASSERT_TRUE(dev.Copy(got.data(), *back, got.size(), CopyKind::kDeviceToHost, stream_).ok());
    ASSERT_TRUE(dev.Copy(slot.data(), tbl[4], slice, CopyKind::kDeviceToHost, stream_).ok());
    ASSERT_TRUE(dev.SynchronizeStream(stream_).ok());
    EXPECT_EQ(got, host) << "slice " << slice;
    EXPECT_EQ(0, std::memcmp(slot.data(), host.data() + 4 * slice, slice)) << "slice " << slice;
    for (void* p : {*window, *slots, *back, *table}) dev.Free(p);
  }
}

void GpuDeviceTest::RestoreInMode(GpuMode mode, std::shared_ptr<Device> dev, uint64_t ns) {
  const auto dram_keys = MakeKeys(ns, 0, 6);
  const auto ssd_keys = MakeKeys(ns, 100, 10);
  Put(dram_keys, MediaType::kDram);
  Put(ssd_keys, MediaType::kSsd);
  std::vector<Key> keys = ssd_keys;
  keys.insert(keys.begin() + 4, dram_keys.begin(), dram_keys.end());
  GpuTransferOptions to;
  to.slot_bytes = 4 * kLayout.num_planes * kLayout.slice_bytes;  // several chunks per layer
  auto t = GpuTransfer::Create(*store_, dev, mode, to);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  DevicePool pool(*dev, kLayout, 32);
  const auto pages = ReversedPages(keys.size(), 32);
  auto r = (*t)->Restore(keys, kLayout, pool.Target(pages));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE((*r)->StreamWaitLayer(kLayout.num_layers - 1, stream_).ok());
  auto got = (*r)->Wait();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->hits, keys.size());
  EXPECT_EQ(got->corrupt, 0u);
  const HostPagedPool& host = pool.Fetch(stream_);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_TRUE(host.Holds(keys[i], pages[i], kLayout.num_layers)) << GpuModeName(mode) << " " << i;
  }
}

TEST_F(GpuDeviceTest, RestoreInTheMachinesMode) {
  OpenStore();
  RestoreInMode(opened_.probe.mode, opened_.device, 1);
}

TEST_F(GpuDeviceTest, RestoreThroughTheBounceWindow) {
  OpenStore();
  GpuOptions bounce;
  bounce.mode = GpuMode::kBounce;
  auto opened = OpenGpu(bounce);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  RestoreInMode(GpuMode::kBounce, opened->device, 2);
}

TEST_F(GpuDeviceTest, PutFromDevicePagesReadsBack) {
  OpenStore();
  const auto keys = MakeKeys(3, 0, 12);
  DevicePool src(*opened_.device, kLayout, 16);
  const auto pages = ReversedPages(keys.size(), 16);
  std::vector<uint8_t> block(kLayout.block_bytes());
  const uint64_t slice = kLayout.slice_bytes;
  for (size_t i = 0; i < keys.size(); ++i) {
    FillBlock(keys[i], block.data(), block.size());
    for (uint32_t l = 0; l < kLayout.num_layers; ++l) {
      for (uint32_t p = 0; p < kLayout.num_planes; ++p) {
        std::memcpy(src.host().arrays[l * kLayout.num_planes + p].data() + pages[i] * slice,
                    block.data() + (uint64_t{l} * kLayout.num_planes + p) * slice, slice);
      }
    }
  }
  src.Upload(stream_);
  GpuTransferOptions to;
  to.slot_bytes = 2 * kLayout.block_bytes();
  auto t = GpuTransfer::Create(*store_, opened_.device, opened_.probe.mode, to);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto put = (*t)->Put(keys, kLayout, src.Target(pages));
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->written, keys.size());
  EXPECT_EQ(testing::ServedBlocks(*store_, keys, kLayout), testing::AllOf(keys.size(), 1));
}

}  // namespace
}  // namespace flatcake::gpu
