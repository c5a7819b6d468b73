#include "gpu/cuda_device.h"

#include <utility>

namespace flatcake::gpu {

CudaDevice::CudaDevice(const CudaLibraries& libs, int ordinal, bool use_cufile)
    : rt_(libs.rt),
      kernels_(libs.kernels),
      cufile_(libs.cufile),
      ordinal_(ordinal),
      use_cufile_(use_cufile) {}

Result<std::unique_ptr<CudaDevice>> CudaDevice::Open(const CudaLibraries& libs, int ordinal,
                                                     bool use_cufile) {
  if (use_cufile && !libs.have_cufile) return Status::Unsupported(libs.cufile_note);
  std::unique_ptr<CudaDevice> d(new CudaDevice(libs, ordinal, use_cufile));
  int count = 0;
  if (CudaError e = d->rt_.get_device_count(&count); e != kCudaSuccess) {
    return Status::Unsupported("no CUDA device: " + CudaErrorText(d->rt_, e));
  }
  if (ordinal < 0 || ordinal >= count) {
    return Status::Unsupported("no CUDA device " + std::to_string(ordinal) + " (" +
                               std::to_string(count) + " present)");
  }
  FC_RETURN_IF_ERROR(d->Check(d->rt_.set_device(ordinal), "cudaSetDevice"));
  int runtime = 0, driver = 0;
  (void)d->rt_.runtime_get_version(&runtime);
  (void)d->rt_.driver_get_version(&driver);
  d->describe_ = "cuda:" + std::to_string(ordinal) + " (runtime " + std::to_string(runtime / 1000) +
                 "." + std::to_string(runtime % 1000 / 10) + ", driver " +
                 std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) + ")";
  if (use_cufile) {
    const CuFileError e = d->cufile_.driver_open();
    if (e.err != 0) {
      return Status::Unsupported("cuFileDriverOpen failed (error " + std::to_string(e.err) +
                                 ", CUresult " + std::to_string(e.cu_err) + ")");
    }
    d->driver_open_ = true;
  }
  return d;
}

CudaDevice::~CudaDevice() {
  UnregisterFiles();
  if (driver_open_) (void)cufile_.driver_close();
}

void CudaDevice::Bind() const { (void)rt_.set_device(ordinal_); }

Status CudaDevice::Check(CudaError err, const char* what) const {
  if (err == kCudaSuccess) return Status::OK();
  return Status::IOError(std::string(what) + ": " + CudaErrorText(rt_, err));
}

Result<void*> CudaDevice::Allocate(uint64_t bytes) {
  Bind();
  void* p = nullptr;
  if (CudaError e = rt_.malloc(&p, bytes); e != kCudaSuccess) {
    return Status::NoSpace("cudaMalloc of " + std::to_string(bytes) +
                           " bytes: " + CudaErrorText(rt_, e));
  }
  return p;
}

void CudaDevice::Free(void* ptr) {
  Bind();
  if (ptr) (void)rt_.free(ptr);
}

Result<void*> CudaDevice::AllocateHost(uint64_t bytes) {
  Bind();
  void* p = nullptr;
  if (CudaError e = rt_.malloc_host(&p, bytes); e != kCudaSuccess) {
    return Status::NoSpace("cudaMallocHost of " + std::to_string(bytes) +
                           " bytes: " + CudaErrorText(rt_, e));
  }
  return p;
}

void CudaDevice::FreeHost(void* ptr) {
  if (ptr) (void)rt_.free_host(ptr);
}

Status CudaDevice::RegisterHost(void* ptr, uint64_t bytes) {
  Bind();
  return Check(rt_.host_register(ptr, bytes, kCudaHostRegisterDefault), "cudaHostRegister");
}

void CudaDevice::UnregisterHost(void* ptr) { (void)rt_.host_unregister(ptr); }

Result<DeviceStream> CudaDevice::CreateStream() {
  Bind();
  CudaStream s = nullptr;
  FC_RETURN_IF_ERROR(
      Check(rt_.stream_create_with_flags(&s, kCudaStreamNonBlocking), "cudaStreamCreate"));
  return s;
}

void CudaDevice::DestroyStream(DeviceStream stream) { (void)rt_.stream_destroy(stream); }

Result<DeviceEvent> CudaDevice::CreateEvent() {
  Bind();
  CudaEvent e = nullptr;
  FC_RETURN_IF_ERROR(
      Check(rt_.event_create_with_flags(&e, kCudaEventDisableTiming), "cudaEventCreate"));
  return e;
}

void CudaDevice::DestroyEvent(DeviceEvent event) { (void)rt_.event_destroy(event); }

Status CudaDevice::Copy(void* dst, const void* src, uint64_t bytes, CopyKind kind,
                        DeviceStream stream) {
  const int k = kind == CopyKind::kHostToDevice   ? kCudaMemcpyHostToDevice
                : kind == CopyKind::kDeviceToHost ? kCudaMemcpyDeviceToHost
                                                  : kCudaMemcpyDeviceToDevice;
  Bind();
  return Check(rt_.memcpy_async(dst, src, bytes, k, stream), "cudaMemcpyAsync");
}

Status CudaDevice::Scatter(const void* window, void* const* table, uint64_t row_stride,
                           uint32_t rows, uint32_t cols, uint64_t slice_bytes,
                           DeviceStream stream) {
  Bind();
  return Check(kernels_.scatter(window, table, row_stride, rows, cols, slice_bytes, stream),
               "scatter kernel launch");
}

Status CudaDevice::Gather(void* window, const void* const* table, uint64_t row_stride,
                          uint32_t rows, uint32_t cols, uint64_t slice_bytes, DeviceStream stream) {
  Bind();
  return Check(kernels_.gather(window, table, row_stride, rows, cols, slice_bytes, stream),
               "gather kernel launch");
}

Status CudaDevice::Record(DeviceEvent event, DeviceStream stream) {
  return Check(rt_.event_record(event, stream), "cudaEventRecord");
}

Status CudaDevice::StreamWait(DeviceStream stream, DeviceEvent event) {
  return Check(rt_.stream_wait_event(stream, event, 0), "cudaStreamWaitEvent");
}

Result<bool> CudaDevice::Query(DeviceEvent event) {
  const CudaError e = rt_.event_query(event);
  if (e == kCudaSuccess) return true;
  if (e == kCudaErrorNotReady) return false;
  return Check(e, "cudaEventQuery");
}

Status CudaDevice::Synchronize(DeviceEvent event) {
  return Check(rt_.event_synchronize(event), "cudaEventSynchronize");
}

Status CudaDevice::SynchronizeStream(DeviceStream stream) {
  return Check(rt_.stream_synchronize(stream), "cudaStreamSynchronize");
}

Status CudaDevice::RegisterFiles(std::span<const int> fds) {
  if (!use_cufile_) return Device::RegisterFiles(fds);
  UnregisterFiles();
  std::vector<CuFileHandle> handles;
  for (int fd : fds) {
    CuFileDescr d{};
    d.type = kCuFileHandleTypeOpaqueFd;
    d.handle.fd = fd;
    CuFileHandle h = nullptr;
    const CuFileError e = cufile_.handle_register(&h, &d);
    if (e.err != 0) {
      for (CuFileHandle r : handles) cufile_.handle_deregister(r);
      return Status::IOError("cuFileHandleRegister failed (error " + std::to_string(e.err) +
                             ") for pool file " + std::to_string(handles.size()));
    }
    handles.push_back(h);
  }
  MutexLock lock(files_mu_);
  files_ = std::move(handles);
  return Status::OK();
}

void CudaDevice::UnregisterFiles() {
  MutexLock lock(files_mu_);
  for (CuFileHandle h : files_) cufile_.handle_deregister(h);
  files_.clear();
}

Status CudaDevice::RegisterBuffer(void* ptr, uint64_t bytes) {
  if (!use_cufile_) return Status::OK();
  const CuFileError e = cufile_.buf_register(ptr, bytes, 0);
  if (e.err != 0) {
    return Status::IOError("cuFileBufRegister failed (error " + std::to_string(e.err) + ")");
  }
  return Status::OK();
}

void CudaDevice::UnregisterBuffer(void* ptr) {
  if (use_cufile_) (void)cufile_.buf_deregister(ptr);
}

Status CudaDevice::ReadFile(uint32_t file, uint64_t offset, void* base, uint64_t dev_off,
                            uint64_t len) {
  CuFileHandle h = nullptr;
  {
    MutexLock lock(files_mu_);
    if (file >= files_.size()) return Status::InvalidArgument("unregistered pool file");
    h = files_[file];
  }
  Bind();
  uint64_t done = 0;
  while (done < len) {
    const ssize_t n = cufile_.read(h, base, len - done, static_cast<off_t>(offset + done),
                                   static_cast<off_t>(dev_off + done));
    if (n < 0) return Status::IOError("cuFileRead failed (" + std::to_string(n) + ")");
    if (n == 0) return Status::IOError("cuFileRead: short read at end of file");
    done += static_cast<uint64_t>(n);
  }
  return Status::OK();
}

}  // namespace flatcake::gpu
