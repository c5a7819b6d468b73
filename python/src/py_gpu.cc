#include "py_gpu.h"

#include <pybind11/stl.h>

#include <utility>
#include <vector>

#include "py_convert.h"
#include "store/flat_store.h"
#if FLATCAKE_HAVE_SERVE
#include "cluster/cluster_store.h"
#include "serve/remote_store.h"
#endif

namespace flatcake::py {
namespace {

template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) RaiseStatus(r.status());
  return std::move(r).value();
}

gpu::DeviceKvTarget TargetOf(const pyb::handle& bases, const pyb::handle& pages,
                             uint64_t page_bytes, const pyb::handle& slices) {
  gpu::DeviceKvTarget t;
  if (!slices.is_none()) t.slices = PointersFromSequence(slices);
  if (!bases.is_none()) t.bases = PointersFromSequence(bases);
  if (!pages.is_none()) {
    for (const pyb::handle& p : pages) t.pages.push_back(p.cast<uint64_t>());
  }
  t.page_bytes = page_bytes;
  return t;
}

}  // namespace

GetResult PyGpuRestore::Wait() {
  Result<GetResult> r = [&] {
    pyb::gil_scoped_release release;
    return restore_->Wait();
  }();
  return Unwrap(std::move(r));
}

void PyGpuRestore::WaitLayer(uint32_t layer) {
  Status st;
  {
    pyb::gil_scoped_release release;
    st = restore_->WaitLayer(layer);
  }
  if (!st.ok()) RaiseStatus(st);
}

void PyGpuRestore::StreamWaitLayer(uint32_t layer, uintptr_t stream) {
  Status st;
  {
    pyb::gil_scoped_release release;
    st = restore_->StreamWaitLayer(layer, reinterpret_cast<gpu::DeviceStream>(stream));
  }
  if (!st.ok()) RaiseStatus(st);
}

uintptr_t PyGpuRestore::LayerEvent(uint32_t layer) {
  Result<gpu::DeviceEvent> e = [&] {
    pyb::gil_scoped_release release;
    return restore_->LayerEvent(layer);
  }();
  return reinterpret_cast<uintptr_t>(Unwrap(std::move(e)));
}

template <typename Fn>
auto PyGpuTransfer::WithTransfer(Fn&& fn) -> decltype(fn(std::declval<gpu::GpuTransfer&>())) {
  using R = decltype(fn(std::declval<gpu::GpuTransfer&>()));
  std::optional<R> result;
  {
    pyb::gil_scoped_release release;
    ReaderLock lock(mu_);
    if (transfer_ != nullptr) result.emplace(fn(*transfer_));
  }
  if (!result) RaiseStatus(Status::Aborted("the GPU transfer path is closed"));
  return std::move(*result);
}

std::unique_ptr<PyGpuRestore> PyGpuTransfer::Restore(const pyb::handle& keys,
                                                     const KvLayout& layout,
                                                     const pyb::handle& bases,
                                                     const pyb::handle& pages, uint64_t page_bytes,
                                                     const pyb::handle& slices,
                                                     std::optional<int64_t> arrival_ns) {
  std::vector<Key> k = KeysFromSequence(keys);
  gpu::DeviceKvTarget target = TargetOf(bases, pages, page_bytes, slices);
  RestoreOptions o;
  if (arrival_ns) {
    if (*arrival_ns < 0) throw pyb::value_error("arrival_ns must be >= 0");
    o.arrival_ns = *arrival_ns;
  }
  auto r =
      Unwrap(WithTransfer([&](gpu::GpuTransfer& t) { return t.Restore(k, layout, target, o); }));
  return std::make_unique<PyGpuRestore>(std::move(r));
}

PutResult PyGpuTransfer::Put(const pyb::handle& keys, const KvLayout& layout,
                             const pyb::handle& bases, const pyb::handle& pages,
                             uint64_t page_bytes, const pyb::handle& slices,
                             const std::optional<std::string>& prefix_tail,
                             const std::optional<std::string>& force_medium) {
  std::vector<Key> k = KeysFromSequence(keys);
  gpu::DeviceKvTarget target = TargetOf(bases, pages, page_bytes, slices);
  WriteHints hints;
  if (prefix_tail) hints.prefix_tail = KeyFromString(*prefix_tail);
  if (force_medium) hints.force_medium = MediumFromString(*force_medium);
  return Unwrap(WithTransfer([&](gpu::GpuTransfer& t) { return t.Put(k, layout, target, hints); }));
}

pyb::dict PyGpuTransfer::Info() {
  struct Facts {
    std::string device;
    uint64_t window_bytes, slot_bytes;
    uintptr_t stream;
    bool verifies, direct;
  };
  Facts f = Unwrap(WithTransfer([](gpu::GpuTransfer& t) -> Result<Facts> {
    return Facts{t.device().Describe(), t.window_bytes(),
                 t.slot_bytes(),        reinterpret_cast<uintptr_t>(t.stream()),
                 t.verifies(),          t.direct_file_io()};
  }));
  pyb::dict d;
  d["mode"] = std::string(gpu::GpuModeName(probe_.mode));
  d["reason"] = probe_.reason;
  d["device"] = f.device;
  d["window_bytes"] = f.window_bytes;
  d["slot_bytes"] = f.slot_bytes;
  d["stream"] = f.stream;
  d["verifies"] = f.verifies;
  d["direct_file_io"] = f.direct;
  return d;
}

pyb::dict PyGpuTransfer::Stats() {
  const gpu::GpuTransferStats s = Unwrap(
      WithTransfer([](gpu::GpuTransfer& t) -> Result<gpu::GpuTransferStats> { return t.stats(); }));
  pyb::dict d;
  d["restores"] = s.restores;
  d["puts"] = s.puts;
  d["chunks"] = s.chunks;
  d["window_waits"] = s.window_waits;
  d["ssd_bytes"] = s.ssd_bytes;
  d["dram_bytes"] = s.dram_bytes;
  d["file_reads"] = s.file_reads;
  d["host_copies"] = s.host_copies;
  return d;
}

void PyGpuTransfer::Close() {
  std::unique_ptr<gpu::GpuTransfer> doomed;
  pyb::gil_scoped_release release;
  WriterLock lock(mu_);
  doomed = std::move(transfer_);
  doomed.reset();  // waits for its restores and puts
}

namespace {

// The read leases of the embedded flat store, or of the node daemon's client (unclustered: the
// GPU path reads this node's media only).
Result<std::unique_ptr<ReadLeases>> ReadLeasesOf(Store& store) {
  if (auto* flat = dynamic_cast<FlatStore*>(&store)) {
    return std::unique_ptr<ReadLeases>(std::make_unique<FlatStoreLeases>(*flat));
  }
#if FLATCAKE_HAVE_SERVE
  serve::RemoteStore* remote = dynamic_cast<serve::RemoteStore*>(&store);
  if (auto* cs = dynamic_cast<cluster::ClusterStore*>(&store)) {
    if (cs->clustered()) {
      return Status::Unsupported(
          "the GPU path reads this node's media only; a cluster member's client restores "
          "through host memory");
    }
    remote = &cs->local();
  }
  if (remote != nullptr) return remote->OpenReadLeases();
#endif
  return Status::Unsupported(
      "the GPU path needs an embedded flat store (flatcake.open) or the node daemon's "
      "(flatcake.connect)");
}

}  // namespace

std::shared_ptr<PyGpuTransfer> OpenGpuTransfer(Store& store, const std::string& mode,
                                               uint64_t slot_bytes, uint32_t slots, bool verify) {
  std::unique_ptr<ReadLeases> leases = Unwrap(ReadLeasesOf(store));
  gpu::GpuOptions go;
  go.mode = Unwrap(gpu::ParseGpuMode(mode));
  gpu::OpenedDevice opened = Unwrap(gpu::OpenGpu(go));
  if (opened.device == nullptr) RaiseStatus(Status::Unsupported("no GPU: " + opened.probe.reason));
  gpu::GpuTransferOptions to;
  to.slot_bytes = slot_bytes;
  to.window_slots = slots;
  to.verify = verify;
  auto t =
      Unwrap(gpu::GpuTransfer::Create(std::move(leases), opened.device, opened.probe.mode, to));
  return std::make_shared<PyGpuTransfer>(std::move(t), std::move(opened.probe));
}

void BindGpu(pyb::module_& m) {
  using pyb::arg;
  pyb::class_<PyGpuRestore>(m, "GpuRestore",
                            "A restore into device memory; per-layer events for caller streams.")
      .def("wait", &PyGpuRestore::Wait, "Blocks until every layer is in its pages; the result.")
      .def("wait_layer", &PyGpuRestore::WaitLayer, arg("layer"),
           "Blocks the host until layer `layer` is in its pages.")
      .def("stream_wait_layer", &PyGpuRestore::StreamWaitLayer, arg("layer"), arg("stream"),
           "Makes CUDA stream `stream` (an int cudaStream_t) wait for layer `layer`.")
      .def("layer_event", &PyGpuRestore::LayerEvent, arg("layer"),
           "Layer `layer`'s cudaEvent_t as an int, once recorded.")
      .def("done", &PyGpuRestore::Done)
      .def("cancel", &PyGpuRestore::Cancel)
      .def_property_readonly("num_layers", &PyGpuRestore::num_layers);
  pyb::class_<PyGpuTransfer, std::shared_ptr<PyGpuTransfer>>(m, "GpuTransfer")
      .def("restore", &PyGpuTransfer::Restore, arg("keys"), arg("layout"),
           arg("bases") = pyb::none(), arg("pages") = pyb::none(), arg("page_bytes") = 0,
           arg("slices") = pyb::none(), arg("arrival_ns") = pyb::none())
      .def("put", &PyGpuTransfer::Put, arg("keys"), arg("layout"), arg("bases") = pyb::none(),
           arg("pages") = pyb::none(), arg("page_bytes") = 0, arg("slices") = pyb::none(),
           arg("prefix_tail") = pyb::none(), arg("force_medium") = pyb::none())
      .def("info", &PyGpuTransfer::Info)
      .def("stats", &PyGpuTransfer::Stats)
      .def("close", &PyGpuTransfer::Close);
  m.def(
      "gpu_probe",
      [](const std::string& mode) {
        gpu::GpuOptions go;
        go.mode = Unwrap(gpu::ParseGpuMode(mode));
        const gpu::GpuProbe p = gpu::ProbeGpu(go);
        pyb::dict d;
        d["mode"] = std::string(gpu::GpuModeName(p.mode));
        d["reason"] = p.reason;
        d["device"] = p.device;
        return d;
      },
      arg("mode") = "auto", "The GPU mode this machine runs in, and why.");
}

}  // namespace flatcake::py
