// FakeDevice: a Device (gpu/device.h) in host memory, for tests and for `bench gpu --fake`.
// "Device memory" is host memory; each stream is a worker thread that runs its queued operations
// in order, after an optional delay each, so that work completes asynchronously to the host as on
// a GPU; events complete when their stream reaches them. ReadFile is a pread into the "device"
// buffer (what cuFile does in compatibility mode), so the direct-I/O path runs on it too.
//
// Test hooks: Pause holds every stream before its next operation until Resume (work queues up,
// events stay pending: a full window is observable); the counters and the log record what ran.
//
// Thread safety: every method from any thread. Destruction waits for the queued work.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu/device.h"
#include "util/thread_annotations.h"

namespace flatcake::gpu {

struct FakeDeviceOptions {
  std::chrono::microseconds op_delay{0};  // each queued operation takes at least this long
  bool direct_file_io = false;            // acts as cuFile (gds/cufile-compat paths)
};

class FakeDevice final : public Device {
 public:
  explicit FakeDevice(const FakeDeviceOptions& options = {});
  ~FakeDevice() override;

  std::string Describe() const override { return "fake (host memory)"; }
  bool fake() const override { return true; }
  Result<void*> Allocate(uint64_t bytes) override;
  void Free(void* ptr) override;
  Result<void*> AllocateHost(uint64_t bytes) override { return Allocate(bytes); }
  void FreeHost(void* ptr) override { Free(ptr); }
  Status RegisterHost(void* ptr, uint64_t bytes) override;
  void UnregisterHost(void* ptr) override;
  Result<DeviceStream> CreateStream() override;
  void DestroyStream(DeviceStream stream) override;
  Result<DeviceEvent> CreateEvent() override;
  void DestroyEvent(DeviceEvent event) override;
  Status Copy(void* dst, const void* src, uint64_t bytes, CopyKind kind,
              DeviceStream stream) override;
  Status Scatter(const void* window, void* const* table, uint64_t row_stride, uint32_t rows,
                 uint32_t cols, uint64_t slice_bytes, DeviceStream stream) override;
  Status Gather(void* window, const void* const* table, uint64_t row_stride, uint32_t rows,
                uint32_t cols, uint64_t slice_bytes, DeviceStream stream) override;
  Status Record(DeviceEvent event, DeviceStream stream) override;
  Status StreamWait(DeviceStream stream, DeviceEvent event) override;
  Result<bool> Query(DeviceEvent event) override;
  Status Synchronize(DeviceEvent event) override;
  Status SynchronizeStream(DeviceStream stream) override;

  bool direct_file_io() const override { return options_.direct_file_io; }
  Status RegisterFiles(std::span<const int> fds) override;
  void UnregisterFiles() override;
  Status ReadFile(uint32_t file, uint64_t offset, void* base, uint64_t dev_off,
                  uint64_t len) override;

  // --- test hooks ---
  void TEST_Pause() EXCLUDES(mu_);
  void TEST_Resume() EXCLUDES(mu_);
  struct Counters {
    uint64_t copies = 0, scatters = 0, gathers = 0, records = 0, file_reads = 0;
    uint64_t host_registered_bytes = 0;  // currently registered
    uint64_t allocated_bytes = 0;        // device memory currently allocated
  };
  Counters TEST_counters() const EXCLUDES(mu_);
  // Every completed operation, in completion order: "copy", "scatter", "gather", "record:<id>"
  // (id: the event's creation number, from 1), "wait:<id>".
  std::vector<std::string> TEST_log() const EXCLUDES(mu_);
  // The creation number of `event` (as TEST_log names it).
  uint64_t TEST_event_id(DeviceEvent event) const;

 private:
  struct Event {
    uint64_t id = 0;
    uint64_t recorded = 0;   // recordings queued
    uint64_t completed = 0;  // recordings reached by their stream
  };
  struct Stream {
    std::deque<std::function<void()>> ops;
    uint64_t queued = 0, done = 0;
    bool stop = false;
    std::thread worker;
  };
  void Enqueue(DeviceStream stream, std::function<void()> op) EXCLUDES(mu_);
  void Run(Stream* s) EXCLUDES(mu_);
  void Log(std::string entry) EXCLUDES(mu_);

  const FakeDeviceOptions options_;
  mutable Mutex mu_;
  CondVar cv_;
  bool paused_ GUARDED_BY(mu_) = false;
  uint64_t next_event_id_ GUARDED_BY(mu_) = 1;
  Counters counters_ GUARDED_BY(mu_);
  std::vector<std::string> log_ GUARDED_BY(mu_);
  std::vector<std::pair<void*, uint64_t>> allocations_ GUARDED_BY(mu_);
  std::vector<std::pair<void*, uint64_t>> registered_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Stream>> streams_ GUARDED_BY(mu_);
  std::vector<int> fds_ GUARDED_BY(mu_);
};

}  // namespace flatcake::gpu
