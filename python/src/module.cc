// flatcake._core: the pybind11 binding of flatcake::Store.
//
// Thread safety: a PyStore may be used from any number of Python threads. Every data call
// converts its arguments while holding the GIL, then releases the GIL and holds `mu_` shared for
// the duration of the Store call, so I/O from several threads overlaps and never blocks the
// interpreter. close() takes `mu_` exclusively (with the GIL released), so the Store is destroyed
// only after every in-flight call has returned; calls after close() raise flatcake.Error.
//
// Pointers are raw addresses supplied by the caller (the Python layer derives them from tensors
// and checks their bounds); the store dereferences them during the call, and a restore until it
// is done (the Python handle keeps the buffers alive until then).
//
// Restores: restore() returns a RestoreHandle whose waits release the GIL. The store keeps a
// registry of its unfinished restores: close() cancels and waits for them before the Store is
// destroyed, so a handle outlives its store safely (it is done by then).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "baseline/tiered_store_adapter.h"
#include "core/build_info.h"
#include "core/option_table.h"
#include "flatcake/layout.h"
#include "flatcake/store.h"
#if FLATCAKE_HAVE_SERVE
#include "cluster/cluster_store.h"
#include "serve/remote_store.h"
#endif
#include "py_convert.h"
#include "py_gpu.h"
#include "util/thread_annotations.h"

namespace flatcake::py {
namespace {

BlockBuffers MakeBuffers(const std::string& kind, const std::vector<void*>& ptrs) {
  Result<BufferKind> parsed = ParseBufferKind(kind);
  if (!parsed.ok()) RaiseStatus(parsed.status());
  return BlockBuffers{*parsed, std::span<void* const>(ptrs.data(), ptrs.size())};
}

// The Python side of a RestoreHandle. The handle is shared with the store's registry.
class PyRestoreHandle {
 public:
  PyRestoreHandle(std::shared_ptr<RestoreHandle> handle, uint32_t layers)
      : handle_(std::move(handle)), layers_(layers) {}
  // An unfinished restore is cancelled, and its reads waited for, before its buffers may go.
  ~PyRestoreHandle() {
    if (handle_->done()) return;
    pyb::gil_scoped_release release;
    handle_->Cancel();
    (void)handle_->Wait();
  }
  PyRestoreHandle(const PyRestoreHandle&) = delete;
  PyRestoreHandle& operator=(const PyRestoreHandle&) = delete;

  bool Wait(std::optional<double> timeout_s) {
    if (timeout_s && !(*timeout_s >= 0)) throw pyb::value_error("timeout must be >= 0");
    pyb::gil_scoped_release release;
    if (!timeout_s) {
      (void)handle_->Wait();
      return true;
    }
    return handle_->WaitFor(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(std::min(*timeout_s, 1e9))));
  }
  void WaitLayer(uint32_t layer) {
    if (layer >= layers_) {
      throw pyb::index_error("layer " + std::to_string(layer) + " out of range (" +
                             std::to_string(layers_) + " layers)");
    }
    Status st;
    {
      pyb::gil_scoped_release release;
      st = handle_->WaitLayer(layer);
    }
    if (!st.ok()) RaiseStatus(st);
  }
  bool Done() const { return handle_->done(); }
  void Cancel() {
    pyb::gil_scoped_release release;
    handle_->Cancel();
  }
  GetResult FinishedResult() {
    if (!handle_->done()) {
      RaiseStatus(Status::Busy("the restore is still in progress; wait() first"));
    }
    flatcake::Result<GetResult> r = handle_->Wait();
    if (!r.ok()) RaiseStatus(r.status());
    return std::move(r).value();
  }

 private:
  const std::shared_ptr<RestoreHandle> handle_;
  const uint32_t layers_;
};

class PyStore {
 public:
  explicit PyStore(std::unique_ptr<Store> store) : store_(std::move(store)) {}

  PutResult Put(const pyb::handle& keys, const KvLayout& layout, const std::string& kind,
                const pyb::handle& ptrs, const std::string& session,
                const std::optional<std::string>& prefix_tail, uint32_t turn,
                std::optional<uint64_t> prior_reply_tokens, std::optional<uint64_t> context_tokens,
                bool shared_prefix, const std::optional<std::string>& force_medium) {
    std::vector<Key> k = KeysFromSequence(keys);
    std::vector<void*> p = PointersFromSequence(ptrs);
    BlockBuffers buffers = MakeBuffers(kind, p);
    WriteHints hints;
    hints.session = session;
    if (prefix_tail) hints.prefix_tail = KeyFromString(*prefix_tail);
    hints.turn = turn;
    hints.prior_reply_tokens = prior_reply_tokens;
    hints.context_tokens = context_tokens;
    hints.shared_prefix = shared_prefix;
    if (force_medium) hints.force_medium = MediumFromString(*force_medium);
    return Unwrap(WithStore([&](Store& s) { return s.Put(k, layout, buffers, hints); }));
  }

  GetResult Get(const pyb::handle& keys, const KvLayout& layout, const std::string& kind,
                const pyb::handle& ptrs) {
    std::vector<Key> k = KeysFromSequence(keys);
    std::vector<void*> p = PointersFromSequence(ptrs);
    BlockBuffers buffers = MakeBuffers(kind, p);
    return Unwrap(WithStore([&](Store& s) { return s.Get(k, layout, buffers); }));
  }

  std::unique_ptr<PyRestoreHandle> Restore(const pyb::handle& keys, const KvLayout& layout,
                                           const std::string& kind, const pyb::handle& ptrs,
                                           std::optional<int64_t> arrival_ns) {
    std::vector<Key> k = KeysFromSequence(keys);
    std::vector<void*> p = PointersFromSequence(ptrs);
    BlockBuffers buffers = MakeBuffers(kind, p);
    RestoreOptions o;
    if (arrival_ns) {
      if (*arrival_ns < 0) throw pyb::value_error("arrival_ns must be >= 0");
      o.arrival_ns = *arrival_ns;
    }
    std::shared_ptr<RestoreHandle> handle =
        Unwrap(WithStore([&](Store& s) -> Result<std::shared_ptr<RestoreHandle>> {
          FC_ASSIGN_OR_RETURN(std::unique_ptr<RestoreHandle> h, s.Restore(k, layout, buffers, o));
          std::shared_ptr<RestoreHandle> shared = std::move(h);
          Register(shared);  // under the store's shared lock: close() cannot miss it
          return shared;
        }));
    return std::make_unique<PyRestoreHandle>(std::move(handle), layout.num_layers);
  }

  LookupResult Lookup(const pyb::handle& keys) {
    std::vector<Key> k = KeysFromSequence(keys);
    return Unwrap(WithStore([&](Store& s) -> Result<LookupResult> { return s.Lookup(k); }));
  }

  size_t Exists(const pyb::handle& keys) {
    std::vector<Key> k = KeysFromSequence(keys);
    return Unwrap(WithStore([&](Store& s) -> Result<size_t> { return s.Exists(k); }));
  }

  uint64_t Reclaim(const std::string& medium, double target_fraction) {
    if (!(target_fraction >= 0.0 && target_fraction <= 1.0)) {
      throw pyb::value_error("target_fraction must lie in [0, 1]");
    }
    const MediaType m = MediumFromString(medium);
    return Unwrap(
        WithStore([&](Store& s) -> Result<uint64_t> { return s.Reclaim(m, target_fraction); }));
  }

  void Clear() {
    Unwrap(WithStore([](Store& s) -> Result<bool> {
      s.Clear();
      return true;
    }));
  }

  pyb::dict Stats() {
    return StatsToDict(
        Unwrap(WithStore([](Store& s) -> Result<StoreStats> { return s.GetStats(); })));
  }
  pyb::dict Info() {
    return InfoToDict(Unwrap(WithStore([](Store& s) -> Result<StoreInfo> { return s.GetInfo(); })));
  }
  pyb::dict Options() {
    return OptionsToDict(
        Unwrap(WithStore([](Store& s) -> Result<StoreOptions> { return s.options(); })));
  }

  // A GPU transfer path on this store (py_gpu.h); closed with the store.
  std::shared_ptr<PyGpuTransfer> Gpu(const std::string& mode, uint64_t slot_bytes, uint32_t slots,
                                     bool verify) EXCLUDES(mu_, restores_mu_) {
    std::optional<std::shared_ptr<PyGpuTransfer>> t;
    {
      ReaderLock lock(mu_);  // the GIL stays held: OpenGpuTransfer raises Python errors
      if (store_ != nullptr) t = OpenGpuTransfer(*store_, mode, slot_bytes, slots, verify);
    }
    if (!t) RaiseStatus(Status::Aborted("the store is closed"));
    MutexLock reg(restores_mu_);
    gpus_.push_back(*t);
    return *t;
  }

  void Close() EXCLUDES(mu_, restores_mu_) {
    // The GPU paths reference the store: they go first, each waiting for its own work.
    std::vector<std::shared_ptr<PyGpuTransfer>> gpus;
    {
      MutexLock reg(restores_mu_);
      for (auto& w : gpus_) {
        if (auto g = w.lock()) gpus.push_back(std::move(g));
      }
      gpus_.clear();
    }
    for (auto& g : gpus) g->Close();
    std::unique_ptr<Store> doomed;
    {
      pyb::gil_scoped_release release;
      WriterLock lock(mu_);
      // No restore starts now; those still running are cancelled and waited for, so their
      // handles are done (and independent of the store) before it goes.
      std::vector<std::shared_ptr<RestoreHandle>> live;
      {
        MutexLock reg(restores_mu_);
        for (auto& w : restores_) {
          if (auto h = w.lock()) live.push_back(std::move(h));
        }
        restores_.clear();
      }
      for (auto& h : live) {
        h->Cancel();
        (void)h->Wait();
      }
      doomed = std::move(store_);
      // Destroy outside the GIL too: shutting down I/O workers may take a while.
      doomed.reset();
    }
  }

  bool closed() EXCLUDES(mu_) {
    pyb::gil_scoped_release release;
    ReaderLock lock(mu_);
    return store_ == nullptr;
  }

 private:
  // Runs `fn` on the store with the GIL released and the store pinned against close().
  template <typename Fn>
  auto WithStore(Fn&& fn) -> decltype(fn(std::declval<Store&>())) {
    using R = decltype(fn(std::declval<Store&>()));
    std::optional<R> result;
    {
      pyb::gil_scoped_release release;
      ReaderLock lock(mu_);
      if (store_ != nullptr) result.emplace(fn(*store_));
    }
    if (!result) RaiseStatus(Status::Aborted("the store is closed"));
    return std::move(*result);
  }

  template <typename T>
  static T Unwrap(Result<T> r) {
    if (!r.ok()) RaiseStatus(r.status());
    return std::move(r).value();
  }

  // Remembers an unfinished restore for Close; forgets finished ones as the list grows.
  void Register(const std::shared_ptr<RestoreHandle>& h) EXCLUDES(restores_mu_) {
    MutexLock reg(restores_mu_);
    if (restores_.size() >= 2 * registry_floor_) {
      std::erase_if(restores_, [](const std::weak_ptr<RestoreHandle>& w) {
        auto p = w.lock();
        return p == nullptr || p->done();
      });
      registry_floor_ = std::max<size_t>(64, restores_.size());
    }
    restores_.push_back(h);
  }

  SharedMutex mu_ ACQUIRED_BEFORE(restores_mu_);
  std::unique_ptr<Store> store_ GUARDED_BY(mu_);  // null after Close()
  Mutex restores_mu_;
  std::vector<std::weak_ptr<RestoreHandle>> restores_ GUARDED_BY(restores_mu_);
  std::vector<std::weak_ptr<PyGpuTransfer>> gpus_ GUARDED_BY(restores_mu_);
  size_t registry_floor_ GUARDED_BY(restores_mu_) = 64;
};

// `policy`: "flat" (FlatCake) or "tiered" (the Mooncake-style baseline behind the same Store
// interface, for side-by-side runs).
std::shared_ptr<PyStore> OpenStore(const pyb::dict& config, const std::string& policy) {
  if (policy != "flat" && policy != "tiered") {
    throw pyb::value_error("unknown policy '" + policy + "' (flat or tiered)");
  }
  StoreOptions options = OptionsFromDict(config);
  Status valid = ValidateStoreOptions(options);
  if (!valid.ok()) RaiseStatus(valid);
  Result<std::unique_ptr<Store>> store = [&]() -> Result<std::unique_ptr<Store>> {
    pyb::gil_scoped_release release;  // pre-allocating pool files can take seconds
    if (policy == "flat") return Store::Open(options);
    FC_ASSIGN_OR_RETURN(auto tiered,
                        baseline::TieredStoreAdapter::Open(baseline::TieredOptionsFrom(options)));
    return std::unique_ptr<Store>(std::move(tiered));
  }();
  if (!store.ok()) RaiseStatus(store.status());
  return std::make_shared<PyStore>(std::move(store).value());
}

#if FLATCAKE_HAVE_SERVE
// flatcake.connect: a client of the node's daemon behind the same Store wrapper, so it has the
// embedded store's methods. A cluster::ClusterStore: when the daemon is a cluster member
// (`flatcake serve --etcd`), the client reads and writes the whole cluster (docs/cluster.md);
// otherwise it is the daemon's RemoteStore.
std::shared_ptr<PyStore> ConnectStore(const std::string& address, const std::string& tenant,
                                      const std::string& client_name, double timeout_s) {
  serve::ClientOptions options;
  if (!client_name.empty()) options.client_name = client_name;
  if (timeout_s > 0) {
    options.connect_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  }
  Result<std::unique_ptr<cluster::ClusterStore>> store = [&] {
    pyb::gil_scoped_release release;  // connecting maps the arena and opens the pool files
    return cluster::ClusterStore::Connect(address, tenant, options);
  }();
  if (!store.ok()) RaiseStatus(store.status());
  return std::make_shared<PyStore>(std::unique_ptr<Store>(std::move(store).value()));
}
#endif

// The module's parts, bound by PYBIND11_MODULE below.
using flatcake::GetResult;
using flatcake::KvLayout;
using flatcake::PutResult;
using pyb::arg;

// The value types: KvLayout, PutResult, GetResult.
void BindValueTypes(pyb::module_& m) {
  pyb::class_<KvLayout>(m, "KvLayout",
                        "Shape of one KV block: num_layers x num_planes slices of slice_bytes.")
      .def(pyb::init([](uint32_t num_layers, uint32_t num_planes, uint64_t slice_bytes) {
             return KvLayout{num_layers, num_planes, slice_bytes};
           }),
           arg("num_layers"), arg("num_planes"), arg("slice_bytes"))
      .def_readwrite("num_layers", &KvLayout::num_layers)
      .def_readwrite("num_planes", &KvLayout::num_planes)
      .def_readwrite("slice_bytes", &KvLayout::slice_bytes)
      .def_property_readonly("block_bytes", &KvLayout::block_bytes)
      .def("validate",
           [](const KvLayout& l) {
             flatcake::Status s = flatcake::ValidateKvLayout(l);
             if (!s.ok()) py::RaiseStatus(s);
           })
      .def("__eq__", [](const KvLayout& a, const KvLayout& b) { return a == b; })
      .def("__repr__", [](const KvLayout& l) { return "KvLayout(" + l.ToString() + ")"; });

  pyb::class_<PutResult>(m, "PutResult")
      .def_readonly("written", &PutResult::written)
      .def_readonly("already_present", &PutResult::already_present)
      .def_property_readonly(
          "medium", [](const PutResult& r) { return std::string(py::MediumName(r.medium)); })
      .def_readonly("segments", &PutResult::segments)
      .def("__repr__", [](const PutResult& r) {
        return "PutResult(written=" + std::to_string(r.written) +
               ", already_present=" + std::to_string(r.already_present) +
               ", medium=" + std::string(py::MediumName(r.medium)) +
               ", segments=" + std::to_string(r.segments) + ")";
      });

  pyb::class_<GetResult>(m, "GetResult")
      .def_property_readonly("found",
                             [](const GetResult& r) {
                               std::vector<bool> f(r.found.begin(), r.found.end());
                               return f;
                             })
      .def_readonly("hits", &GetResult::hits)
      .def_readonly("leading_hits", &GetResult::leading_hits)
      .def_readonly("corrupt", &GetResult::corrupt)
      .def_readonly("bytes_from_dram", &GetResult::bytes_from_dram)
      .def_readonly("bytes_from_ssd", &GetResult::bytes_from_ssd)
      .def_readonly("ssd_bytes_read", &GetResult::ssd_bytes_read)
      .def_readonly("ssd_reads", &GetResult::ssd_reads)
      .def_readonly("ssd_reads_in_place", &GetResult::ssd_reads_in_place)
      .def("__repr__", [](const GetResult& r) {
        return "GetResult(hits=" + std::to_string(r.hits) + "/" + std::to_string(r.found.size()) +
               ", leading_hits=" + std::to_string(r.leading_hits) +
               ", corrupt=" + std::to_string(r.corrupt) + ")";
      });
}

// Restores as requests: LookupResult and RestoreHandle.
void BindRestoreTypes(pyb::module_& m) {
  pyb::class_<flatcake::LookupResult>(m, "LookupResult")
      .def_readonly("leading_hits", &flatcake::LookupResult::leading_hits)
      .def_property_readonly("slowest_medium",
                             [](const flatcake::LookupResult& r) {
                               return r.slowest_medium == flatcake::MediaType::kSsd ? "ssd"
                                                                                    : "dram";
                             })
      .def_readonly("dram_bytes", &flatcake::LookupResult::dram_bytes)
      .def_readonly("ssd_bytes", &flatcake::LookupResult::ssd_bytes)
      .def("__repr__", [](const flatcake::LookupResult& r) {
        return "LookupResult(leading_hits=" + std::to_string(r.leading_hits) +
               ", slowest=" + (r.slowest_medium == flatcake::MediaType::kSsd ? "ssd" : "dram") +
               ", dram_bytes=" + std::to_string(r.dram_bytes) +
               ", ssd_bytes=" + std::to_string(r.ssd_bytes) + ")";
      });

  pyb::class_<py::PyRestoreHandle>(m, "RestoreHandle")
      .def("wait", &py::PyRestoreHandle::Wait, arg("timeout") = pyb::none(),
           "Blocks until the restore is done, or at most `timeout` seconds; True when done. "
           "The GIL is released while waiting.")
      .def("wait_layer", &py::PyRestoreHandle::WaitLayer, arg("layer"),
           "Blocks until layer `layer` of every block is in the buffers; raises flatcake.Error "
           "if the restore failed.")
      .def("done", &py::PyRestoreHandle::Done)
      .def("cancel", &py::PyRestoreHandle::Cancel)
      .def_property_readonly("result", &py::PyRestoreHandle::FinishedResult,
                             "The GetResult of a finished restore; raises flatcake.Error if it "
                             "failed (code 'Aborted' when cancelled) or is still running.");
}

void BindStore(pyb::module_& m) {
  pyb::class_<py::PyStore, std::shared_ptr<py::PyStore>>(m, "Store")
      .def("put", &py::PyStore::Put, arg("keys"), arg("layout"), arg("kind"), arg("ptrs"),
           pyb::kw_only(), arg("session") = std::string(), arg("prefix_tail") = pyb::none(),
           arg("turn") = 0, arg("prior_reply_tokens") = pyb::none(),
           arg("context_tokens") = pyb::none(), arg("shared_prefix") = false,
           arg("force_medium") = pyb::none(),
           "Writes blocks from caller memory. Keys already present are skipped (write-once).")
      .def("get", &py::PyStore::Get, arg("keys"), arg("layout"), arg("kind"), arg("ptrs"),
           "Copies blocks into caller memory; a missing key is a miss (found[i] False).")
      .def("exists", &py::PyStore::Exists, arg("keys"), "Number of leading keys present.")
      .def("lookup", &py::PyStore::Lookup, arg("keys"),
           "Leading hits, the slowest medium among them and their bytes per medium.")
      .def("restore", &py::PyStore::Restore, arg("keys"), arg("layout"), arg("kind"), arg("ptrs"),
           arg("arrival_ns") = pyb::none(),
           "Starts a restore scheduled by the store's FC-MAS; returns a RestoreHandle.")
      .def("reclaim", &py::PyStore::Reclaim, arg("medium"), arg("target_fraction"))
      .def("clear", &py::PyStore::Clear)
      .def("stats", &py::PyStore::Stats)
      .def("info", &py::PyStore::Info)
      .def("options", &py::PyStore::Options)
      .def("gpu", &py::PyStore::Gpu, arg("mode") = "auto", arg("slot_bytes") = 32ull << 20,
           arg("slots") = 2, arg("verify") = true,
           "A GPU transfer path on this store (docs/gpu.md); flatcake.Error without a GPU.")
      .def("close", &py::PyStore::Close)
      .def_property_readonly("closed", &py::PyStore::closed);
}

// open, the option table, and small helpers.
void BindModuleFunctions(pyb::module_& m) {
  m.def("open", &py::OpenStore, arg("config"), arg("policy") = "flat",
        "Opens a store from a dict of StoreOptions fields (sizes as integers); policy 'flat' "
        "(FlatCake) or 'tiered' (the Mooncake-style baseline).");
#if FLATCAKE_HAVE_SERVE
  m.def("connect", &py::ConnectStore, arg("address"), arg("tenant"), arg("client_name") = "",
        arg("timeout") = 0.0,
        "Connects to the node's daemon (`flatcake serve`) at address ('unix:///path' or a socket "
        "path) as tenant; the store it returns has the embedded store's methods.");
  m.attr("has_daemon_client") = true;
#else
  m.attr("has_daemon_client") = false;
#endif
  m.def("option_names", [] {
    std::vector<std::string> names;
    for (std::string_view n : py::OptionNames()) names.emplace_back(n);
    return names;
  });
  m.def("default_options", [] { return py::OptionsToDict(flatcake::StoreOptions{}); });
  m.def("option_table_json", &flatcake::RenderOptionTableJson);
  m.def("validate_options", [](const pyb::dict& config) {
    flatcake::StoreOptions options = py::OptionsFromDict(config);
    flatcake::Status s = flatcake::ValidateStoreOptions(options);
    if (!s.ok()) py::RaiseStatus(s);
    return py::OptionsToDict(options);
  });
  m.def("pointers_per_block", [](const std::string& kind, const KvLayout& layout) {
    flatcake::Result<flatcake::BufferKind> k = flatcake::ParseBufferKind(kind);
    if (!k.ok()) py::RaiseStatus(k.status());
    return flatcake::PointersPerBlock(*k, layout);
  });
  m.def(
      "build_info",
      [] {
        const flatcake::BuildInfo b = flatcake::GetBuildInfo();
        pyb::dict d;
        d["version"] = b.version;
        d["io_uring"] = b.io_uring;
        d["cuda_kernels"] = b.cuda_kernels;
        d["serve"] = b.serve;
        d["cluster"] = b.cluster;
        d["metrics"] = b.metrics;
        d["gpu_kernels"] = b.gpu_kernels;
        return d;
      },
      "What this build has: version, io_uring, cuda_kernels, serve, cluster, metrics, and the "
      "GPU kernels library a GPU would load (as `flatcake info` prints them).");
  m.def(
      "key_hex",
      [](const std::string& text) { return flatcake::KeyToHex(flatcake::KeyFromString(text)); },
      "The 128-bit store key of a string key, as 32 hex digits.");
}

}  // namespace
}  // namespace flatcake::py

PYBIND11_MODULE(_core, m) {
  namespace py = flatcake::py;
  m.doc() = "FlatCake KV-cache store (C++ core). Use the `flatcake` package, not this module.";
  py::RegisterErrorType(m);
  py::BindValueTypes(m);
  py::BindRestoreTypes(m);
  py::BindStore(m);
  py::BindGpu(m);
  py::BindModuleFunctions(m);
}
