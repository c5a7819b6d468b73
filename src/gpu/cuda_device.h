// CudaDevice: Device (gpu/device.h) over the CUDA runtime, the kernels library and, in gds and
// cufile-compat modes, cuFile, all loaded with dlopen (gpu/cuda_api.h).
#pragma once

#include <memory>
#include <vector>

#include "gpu/cuda_api.h"
#include "gpu/device.h"
#include "util/thread_annotations.h"

namespace flatcake::gpu {

class CudaDevice final : public Device {
 public:
  // Selects device `ordinal`; with `use_cufile`, opens cuFile's driver (an error when it fails).
  static Result<std::unique_ptr<CudaDevice>> Open(const CudaLibraries& libs, int ordinal,
                                                  bool use_cufile);
  ~CudaDevice() override;

  std::string Describe() const override { return describe_; }
  bool fake() const override { return false; }
  Result<void*> Allocate(uint64_t bytes) override;
  void Free(void* ptr) override;
  Result<void*> AllocateHost(uint64_t bytes) override;
  void FreeHost(void* ptr) override;
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

  bool direct_file_io() const override { return use_cufile_; }
  Status RegisterFiles(std::span<const int> fds) override;
  void UnregisterFiles() override;
  Status RegisterBuffer(void* ptr, uint64_t bytes) override;
  void UnregisterBuffer(void* ptr) override;
  Status ReadFile(uint32_t file, uint64_t offset, void* base, uint64_t dev_off,
                  uint64_t len) override;

  const CudaRuntimeApi& runtime() const { return rt_; }

 private:
  CudaDevice(const CudaLibraries& libs, int ordinal, bool use_cufile);
  // OK, or the error naming `what`. Sets the device on this thread first (the runtime's current
  // device is per thread).
  Status Check(CudaError err, const char* what) const;
  void Bind() const;

  const CudaRuntimeApi& rt_;
  const KvKernelsApi& kernels_;
  const CuFileApi& cufile_;
  const int ordinal_;
  const bool use_cufile_;
  bool driver_open_ = false;
  std::string describe_;
  Mutex files_mu_;
  std::vector<CuFileHandle> files_ GUARDED_BY(files_mu_);
};

}  // namespace flatcake::gpu
