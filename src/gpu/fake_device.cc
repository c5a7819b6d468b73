#include "gpu/fake_device.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace flatcake::gpu {

FakeDevice::FakeDevice(const FakeDeviceOptions& options) : options_(options) {}

FakeDevice::~FakeDevice() {
  std::vector<std::unique_ptr<Stream>> streams;
  {
    MutexLock lock(mu_);
    paused_ = false;
    for (auto& s : streams_) s->stop = true;
    streams.swap(streams_);
  }
  cv_.NotifyAll();
  for (auto& s : streams) s->worker.join();
  MutexLock lock(mu_);
  for (auto& [p, n] : allocations_) std::free(p);
}

Result<void*> FakeDevice::Allocate(uint64_t bytes) {
  void* p = std::aligned_alloc(4096, std::max<uint64_t>(4096, (bytes + 4095) / 4096 * 4096));
  if (p == nullptr) return Status::NoSpace("fake device: out of memory");
  MutexLock lock(mu_);
  allocations_.emplace_back(p, bytes);
  counters_.allocated_bytes += bytes;
  return p;
}

void FakeDevice::Free(void* ptr) {
  if (ptr == nullptr) return;
  MutexLock lock(mu_);
  auto it = std::find_if(allocations_.begin(), allocations_.end(),
                         [ptr](const auto& a) { return a.first == ptr; });
  if (it == allocations_.end()) return;
  counters_.allocated_bytes -= it->second;
  allocations_.erase(it);
  std::free(ptr);
}

Status FakeDevice::RegisterHost(void* ptr, uint64_t bytes) {
  MutexLock lock(mu_);
  for (const auto& [p, n] : registered_) {
    if (p == ptr) return Status::InvalidArgument("host memory registered twice");
  }
  registered_.emplace_back(ptr, bytes);
  counters_.host_registered_bytes += bytes;
  return Status::OK();
}

void FakeDevice::UnregisterHost(void* ptr) {
  MutexLock lock(mu_);
  auto it = std::find_if(registered_.begin(), registered_.end(),
                         [ptr](const auto& a) { return a.first == ptr; });
  if (it == registered_.end()) return;
  counters_.host_registered_bytes -= it->second;
  registered_.erase(it);
}

Result<DeviceStream> FakeDevice::CreateStream() {
  auto s = std::make_unique<Stream>();
  Stream* raw = s.get();
  {
    MutexLock lock(mu_);
    streams_.push_back(std::move(s));
  }
  raw->worker = std::thread([this, raw] { Run(raw); });
  return static_cast<DeviceStream>(raw);
}

void FakeDevice::DestroyStream(DeviceStream stream) {
  std::unique_ptr<Stream> s;
  {
    MutexLock lock(mu_);
    auto it = std::find_if(streams_.begin(), streams_.end(),
                           [stream](const auto& p) { return p.get() == stream; });
    if (it == streams_.end()) return;
    (*it)->stop = true;
    s = std::move(*it);
    streams_.erase(it);
  }
  cv_.NotifyAll();
  s->worker.join();
}

void FakeDevice::Run(Stream* s) {
  MutexLock lock(mu_);
  for (;;) {
    while (!(s->stop && s->ops.empty()) && (s->ops.empty() || paused_)) cv_.Wait(mu_);
    if (s->ops.empty()) return;  // stopping, nothing left
    std::function<void()> op = std::move(s->ops.front());
    s->ops.pop_front();
    lock.Unlock();
    if (options_.op_delay.count() > 0) std::this_thread::sleep_for(options_.op_delay);
    op();
    lock.Lock();
    ++s->done;
    cv_.NotifyAll();
  }
}

void FakeDevice::Enqueue(DeviceStream stream, std::function<void()> op) {
  auto* s = static_cast<Stream*>(stream);
  {
    MutexLock lock(mu_);
    s->ops.push_back(std::move(op));
    ++s->queued;
  }
  cv_.NotifyAll();
}

void FakeDevice::Log(std::string entry) {
  MutexLock lock(mu_);
  log_.push_back(std::move(entry));
}

Result<DeviceEvent> FakeDevice::CreateEvent() {
  auto* e = new Event();
  MutexLock lock(mu_);
  e->id = next_event_id_++;
  return static_cast<DeviceEvent>(e);
}

void FakeDevice::DestroyEvent(DeviceEvent event) { delete static_cast<Event*>(event); }

Status FakeDevice::Copy(void* dst, const void* src, uint64_t bytes, CopyKind kind,
                        DeviceStream stream) {
  Enqueue(stream, [this, dst, src, bytes] {
    std::memcpy(dst, src, bytes);
    MutexLock lock(mu_);
    ++counters_.copies;
    log_.emplace_back("copy");
  });
  return Status::OK();
}

Status FakeDevice::Scatter(const void* window, void* const* table, uint64_t row_stride,
                           uint32_t rows, uint32_t cols, uint64_t slice_bytes,
                           DeviceStream stream) {
  Enqueue(stream, [=, this] {
    for (uint32_t r = 0; r < rows; ++r) {
      for (uint32_t c = 0; c < cols; ++c) {
        std::memcpy(table[r * row_stride + c],
                    static_cast<const uint8_t*>(window) + (uint64_t{r} * cols + c) * slice_bytes,
                    slice_bytes);
      }
    }
    MutexLock lock(mu_);
    ++counters_.scatters;
    log_.emplace_back("scatter");
  });
  return Status::OK();
}

Status FakeDevice::Gather(void* window, const void* const* table, uint64_t row_stride,
                          uint32_t rows, uint32_t cols, uint64_t slice_bytes, DeviceStream stream) {
  Enqueue(stream, [=, this] {
    for (uint32_t r = 0; r < rows; ++r) {
      for (uint32_t c = 0; c < cols; ++c) {
        std::memcpy(static_cast<uint8_t*>(window) + (uint64_t{r} * cols + c) * slice_bytes,
                    table[r * row_stride + c], slice_bytes);
      }
    }
    MutexLock lock(mu_);
    ++counters_.gathers;
    log_.emplace_back("gather");
  });
  return Status::OK();
}

Status FakeDevice::Record(DeviceEvent event, DeviceStream stream) {
  auto* e = static_cast<Event*>(event);
  uint64_t target;
  {
    MutexLock lock(mu_);
    target = ++e->recorded;
  }
  Enqueue(stream, [this, e, target] {
    {
      MutexLock lock(mu_);
      e->completed = std::max(e->completed, target);
      ++counters_.records;
      log_.push_back("record:" + std::to_string(e->id));
    }
    cv_.NotifyAll();
  });
  return Status::OK();
}

Status FakeDevice::StreamWait(DeviceStream stream, DeviceEvent event) {
  auto* e = static_cast<Event*>(event);
  uint64_t target;
  {
    MutexLock lock(mu_);
    target = e->recorded;
  }
  Enqueue(stream, [this, e, target] {
    MutexLock lock(mu_);
    while (e->completed < target) cv_.Wait(mu_);
    log_.push_back("wait:" + std::to_string(e->id));
  });
  return Status::OK();
}

Result<bool> FakeDevice::Query(DeviceEvent event) {
  auto* e = static_cast<Event*>(event);
  MutexLock lock(mu_);
  return e->completed >= e->recorded;
}

Status FakeDevice::Synchronize(DeviceEvent event) {
  auto* e = static_cast<Event*>(event);
  MutexLock lock(mu_);
  const uint64_t target = e->recorded;
  while (e->completed < target) cv_.Wait(mu_);
  return Status::OK();
}

Status FakeDevice::SynchronizeStream(DeviceStream stream) {
  auto* s = static_cast<Stream*>(stream);
  MutexLock lock(mu_);
  const uint64_t target = s->queued;
  while (s->done < target) cv_.Wait(mu_);
  return Status::OK();
}

Status FakeDevice::RegisterFiles(std::span<const int> fds) {
  if (!options_.direct_file_io) return Device::RegisterFiles(fds);
  MutexLock lock(mu_);
  fds_.assign(fds.begin(), fds.end());
  return Status::OK();
}

void FakeDevice::UnregisterFiles() {
  MutexLock lock(mu_);
  fds_.clear();
}

Status FakeDevice::ReadFile(uint32_t file, uint64_t offset, void* base, uint64_t dev_off,
                            uint64_t len) {
  int fd;
  {
    MutexLock lock(mu_);
    if (file >= fds_.size()) return Status::InvalidArgument("unregistered pool file");
    fd = fds_[file];
    ++counters_.file_reads;
  }
  uint8_t* dst = static_cast<uint8_t*>(base) + dev_off;
  uint64_t done = 0;
  while (done < len) {
    const ssize_t n = pread(fd, dst + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "fake device: pread");
    if (n == 0) return Status::IOError("fake device: short read at end of file");
    done += static_cast<uint64_t>(n);
  }
  return Status::OK();
}

void FakeDevice::TEST_Pause() {
  MutexLock lock(mu_);
  paused_ = true;
}

void FakeDevice::TEST_Resume() {
  {
    MutexLock lock(mu_);
    paused_ = false;
  }
  cv_.NotifyAll();
}

FakeDevice::Counters FakeDevice::TEST_counters() const {
  MutexLock lock(mu_);
  return counters_;
}

std::vector<std::string> FakeDevice::TEST_log() const {
  MutexLock lock(mu_);
  return log_;
}

uint64_t FakeDevice::TEST_event_id(DeviceEvent event) const {
  return static_cast<const Event*>(event)->id;
}

}  // namespace flatcake::gpu
