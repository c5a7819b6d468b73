// Device: the narrow interface the GPU data path (gpu/gpu_transfer.h) drives, and how one is
// chosen. Two implementations: CudaDevice (gpu/cuda_device.cc: the CUDA runtime, the kernels
// library and cuFile, loaded with dlopen) and FakeDevice (gpu/fake_device.h: host memory and
// worker threads that complete the same operations asynchronously, in stream order), so that the
// window, ping-pong, event ordering and backpressure logic is tested on machines without a GPU.
//
// The model is CUDA's: operations queued on a stream run in order, asynchronously to the host;
// an event recorded on a stream completes when everything queued before it has; a stream may wait
// for an event, and the host may query or wait for one. "Device memory" is whatever the device
// addresses (host memory for the fake one); a caller never dereferences it on the host.
//
// Modes (GpuMode), chosen by ProbeGpu and reported by `flatcake info`:
//   gds            cuFile with its kernel driver (nvidia-fs): SSD reads land in device memory
//   cufile-compat  cuFile in compatibility mode (no nvidia-fs): cuFile's own POSIX bounce
//   bounce         no cuFile: O_DIRECT reads into a pinned host window, then cudaMemcpyAsync
//   none           no usable GPU (the reason says why): the device path is off
// FLATCAKE_GPU_MODE (auto, gds, cufile-compat, bounce, none, fake) or GpuOptions::mode forces one;
// forcing a mode the machine cannot run is an error naming what is missing. `fake` selects the
// fake device (tests, and `bench gpu --fake`, whose figures are labelled as such).
//
// Thread safety: every Device method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "flatcake/status.h"

namespace flatcake::gpu {

enum class GpuMode : uint8_t { kAuto, kGds, kCuFileCompat, kBounce, kNone, kFake };
std::string_view GpuModeName(GpuMode mode);  // "auto", "gds", "cufile-compat", ...
Result<GpuMode> ParseGpuMode(std::string_view text);

using DeviceStream = void*;
using DeviceEvent = void*;

enum class CopyKind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };

class Device {
 public:
  virtual ~Device() = default;
  // "cuda:0 (runtime 13.0, driver 13.0)", "fake".
  virtual std::string Describe() const = 0;
  virtual bool fake() const = 0;

  // Device memory. Freed memory must not be in use by queued work.
  virtual Result<void*> Allocate(uint64_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  // Pinned (page-locked) host memory, and pinning of existing host memory (the DRAM arena) so
  // that asynchronous copies from it run at full speed.
  virtual Result<void*> AllocateHost(uint64_t bytes) = 0;
  virtual void FreeHost(void* ptr) = 0;
  virtual Status RegisterHost(void* ptr, uint64_t bytes) = 0;
  virtual void UnregisterHost(void* ptr) = 0;

  virtual Result<DeviceStream> CreateStream() = 0;
  // REQUIRES: nothing queued on it is pending (SynchronizeStream first).
  virtual void DestroyStream(DeviceStream stream) = 0;
  virtual Result<DeviceEvent> CreateEvent() = 0;
  virtual void DestroyEvent(DeviceEvent event) = 0;

  // --- queued on `stream`, asynchronous to the host ---
  // The memory must stay valid until the work completes.
  virtual Status Copy(void* dst, const void* src, uint64_t bytes, CopyKind kind,
                      DeviceStream stream) = 0;
  // Slice (r, c) (r < rows, c < cols) lies at window + (r * cols + c) * slice_bytes and at
  // table[r * row_stride + c]; `table` is in device memory. Scatter: window -> table slots.
  // Gather: table slots -> window.
  virtual Status Scatter(const void* window, void* const* table, uint64_t row_stride, uint32_t rows,
                         uint32_t cols, uint64_t slice_bytes, DeviceStream stream) = 0;
  virtual Status Gather(void* window, const void* const* table, uint64_t row_stride, uint32_t rows,
                        uint32_t cols, uint64_t slice_bytes, DeviceStream stream) = 0;
  virtual Status Record(DeviceEvent event, DeviceStream stream) = 0;
  // `stream`'s later work waits for `event`'s last recording to complete.
  virtual Status StreamWait(DeviceStream stream, DeviceEvent event) = 0;

  // --- host side ---
  // Whether `event`'s last recording completed (true for an event never recorded).
  virtual Result<bool> Query(DeviceEvent event) = 0;
  virtual Status Synchronize(DeviceEvent event) = 0;
  virtual Status SynchronizeStream(DeviceStream stream) = 0;

  // --- file I/O straight into device memory (cuFile in gds and cufile-compat modes) ---
  virtual bool direct_file_io() const { return false; }
  // Registers the pool files (descriptors in pool order) for ReadFile/WriteFile.
  virtual Status RegisterFiles(std::span<const int> fds) {
    return Status::Unsupported("this device reads no files");
  }
  virtual void UnregisterFiles() {}
  // Registers device memory as an I/O buffer (cuFileBufRegister); best effort.
  virtual Status RegisterBuffer(void* ptr, uint64_t bytes) { return Status::OK(); }
  virtual void UnregisterBuffer(void* ptr) {}
  // Reads `len` bytes at `offset` of registered file `file` into device memory at base + dev_off,
  // synchronously (on the calling thread). IOError on a short read.
  virtual Status ReadFile(uint32_t file, uint64_t offset, void* base, uint64_t dev_off,
                          uint64_t len) {
    return Status::Unsupported("this device reads no files");
  }
};

struct GpuOptions {
  GpuMode mode = GpuMode::kAuto;  // FLATCAKE_GPU_MODE, when set, overrides kAuto
  int device = 0;                 // CUDA device ordinal
};

// What ProbeGpu found: the mode to run in, and why (always set for `none`, and for a fallback).
struct GpuProbe {
  GpuMode mode = GpuMode::kNone;
  std::string reason;
  std::string device;  // Device::Describe() when a device was opened
};

// Chooses the mode (see the header comment) and opens the device for it: null for `none`.
// An error only when a forced mode cannot run (or FLATCAKE_GPU_MODE is not a mode name).
struct OpenedDevice {
  GpuProbe probe;
  std::shared_ptr<Device> device;
};
Result<OpenedDevice> OpenGpu(const GpuOptions& options);

// The mode OpenGpu would choose, without keeping a device: `flatcake info`.
GpuProbe ProbeGpu(const GpuOptions& options);

}  // namespace flatcake::gpu
