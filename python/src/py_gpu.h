// flatcake._core's GPU data path (src/gpu/gpu_transfer.h): GpuTransfer, one per CUDA stream of
// the caller's, opened from a Store (PyStore::Gpu), and its restore handles, whose per-layer
// events a caller's stream can wait on.
//
// Thread safety: a PyGpuTransfer may be used from any number of Python threads; every call
// releases the GIL and holds `mu_` shared; Close() takes it exclusively, so the transfer (which
// references the store) goes only after every call returned. The store closes its transfers before
// it goes. Device pointers are raw addresses the caller supplies (the Python layer takes them from
// CUDA tensors); they must stay valid until a restore is done.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>

#include "gpu/gpu_transfer.h"
#include "util/thread_annotations.h"

namespace flatcake::py {

namespace pyb = pybind11;

class PyGpuRestore {
 public:
  explicit PyGpuRestore(std::shared_ptr<gpu::GpuRestore> restore) : restore_(std::move(restore)) {}
  GetResult Wait();
  void WaitLayer(uint32_t layer);
  // `stream`: a cudaStream_t as an integer (torch.cuda.Stream.cuda_stream); 0 is the legacy
  // default stream.
  void StreamWaitLayer(uint32_t layer, uintptr_t stream);
  uintptr_t LayerEvent(uint32_t layer);
  bool Done() const { return restore_->done(); }
  void Cancel() { restore_->Cancel(); }
  uint32_t num_layers() const { return restore_->num_layers(); }

 private:
  const std::shared_ptr<gpu::GpuRestore> restore_;
};

class PyGpuTransfer {
 public:
  PyGpuTransfer(std::unique_ptr<gpu::GpuTransfer> transfer, gpu::GpuProbe probe)
      : transfer_(std::move(transfer)), probe_(std::move(probe)) {}

  // `bases`: one device address per (layer, plane), [l * planes + p]; `pages`: one page index
  // per key; or `slices`: one address per (key, layer, plane).
  std::unique_ptr<PyGpuRestore> Restore(const pyb::handle& keys, const KvLayout& layout,
                                        const pyb::handle& bases, const pyb::handle& pages,
                                        uint64_t page_bytes, const pyb::handle& slices,
                                        std::optional<int64_t> arrival_ns) EXCLUDES(mu_);
  PutResult Put(const pyb::handle& keys, const KvLayout& layout, const pyb::handle& bases,
                const pyb::handle& pages, uint64_t page_bytes, const pyb::handle& slices,
                const std::optional<std::string>& prefix_tail,
                const std::optional<std::string>& force_medium) EXCLUDES(mu_);
  pyb::dict Info() EXCLUDES(mu_);
  pyb::dict Stats() EXCLUDES(mu_);
  void Close() EXCLUDES(mu_);

 private:
  template <typename Fn>
  auto WithTransfer(Fn&& fn) -> decltype(fn(std::declval<gpu::GpuTransfer&>()));

  SharedMutex mu_;
  std::unique_ptr<gpu::GpuTransfer> transfer_ GUARDED_BY(mu_);  // null after Close()
  const gpu::GpuProbe probe_;
};

// Opens a transfer path on `store` (which must be an embedded flat store) in mode `mode`
// ("auto", ..., "fake"); raises flatcake.Error (code Unsupported, with the reason) without a GPU.
std::shared_ptr<PyGpuTransfer> OpenGpuTransfer(Store& store, const std::string& mode,
                                               uint64_t slot_bytes, uint32_t slots, bool verify);

void BindGpu(pyb::module_& m);

}  // namespace flatcake::py
