#include "gpu/cuda_api.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>

namespace flatcake::gpu {
namespace {

// Resolves `name` in `handle` (and the libraries it depends on) into `*fn`.
template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn, std::string* missing) {
  void* sym = dlsym(handle, name);
  if (sym == nullptr) {
    if (!missing->empty()) *missing += ", ";
    *missing += name;
    return false;
  }
  *fn = reinterpret_cast<Fn>(sym);
  return true;
}

Status LoadRuntime(void* h, CudaRuntimeApi* rt) {
  std::string missing;
  Resolve(h, "cudaGetDeviceCount", &rt->get_device_count, &missing);
  Resolve(h, "cudaSetDevice", &rt->set_device, &missing);
  Resolve(h, "cudaRuntimeGetVersion", &rt->runtime_get_version, &missing);
  Resolve(h, "cudaDriverGetVersion", &rt->driver_get_version, &missing);
  Resolve(h, "cudaGetErrorString", &rt->get_error_string, &missing);
  Resolve(h, "cudaMalloc", &rt->malloc, &missing);
  Resolve(h, "cudaFree", &rt->free, &missing);
  Resolve(h, "cudaMallocHost", &rt->malloc_host, &missing);
  Resolve(h, "cudaFreeHost", &rt->free_host, &missing);
  Resolve(h, "cudaHostRegister", &rt->host_register, &missing);
  Resolve(h, "cudaHostUnregister", &rt->host_unregister, &missing);
  Resolve(h, "cudaMemcpy", &rt->memcpy, &missing);
  Resolve(h, "cudaMemcpyAsync", &rt->memcpy_async, &missing);
  Resolve(h, "cudaMemset", &rt->memset, &missing);
  Resolve(h, "cudaStreamCreateWithFlags", &rt->stream_create_with_flags, &missing);
  Resolve(h, "cudaStreamDestroy", &rt->stream_destroy, &missing);
  Resolve(h, "cudaStreamSynchronize", &rt->stream_synchronize, &missing);
  Resolve(h, "cudaStreamWaitEvent", &rt->stream_wait_event, &missing);
  Resolve(h, "cudaEventCreateWithFlags", &rt->event_create_with_flags, &missing);
  Resolve(h, "cudaEventDestroy", &rt->event_destroy, &missing);
  Resolve(h, "cudaEventRecord", &rt->event_record, &missing);
  Resolve(h, "cudaEventQuery", &rt->event_query, &missing);
  Resolve(h, "cudaEventSynchronize", &rt->event_synchronize, &missing);
  Resolve(h, "cudaEventElapsedTime", &rt->event_elapsed_time, &missing);
  Resolve(h, "cudaDeviceSynchronize", &rt->device_synchronize, &missing);
  if (!missing.empty()) return Status::Unsupported("the CUDA runtime lacks " + missing);
  return Status::OK();
}

Status LoadKernels(void* h, KvKernelsApi* k) {
  std::string missing;
  Resolve(h, "flatcake_kv_kernels_abi", &k->abi, &missing);
  Resolve(h, "flatcake_kv_scatter", &k->scatter, &missing);
  Resolve(h, "flatcake_kv_gather", &k->gather, &missing);
  if (!missing.empty()) return Status::Unsupported("the kernels library lacks " + missing);
  if (k->abi() != kKvKernelsAbi) {
    return Status::Unsupported("the kernels library has ABI " + std::to_string(k->abi()) +
                               ", this build wants " + std::to_string(kKvKernelsAbi));
  }
  return Status::OK();
}

// cuFile is optional: its absence is a note, not an error.
void LoadCuFile(CudaLibraries* libs) {
  void* h = dlopen("libcufile.so.0", RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) h = dlopen("libcufile.so", RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    const char* err = dlerror();
    libs->cufile_note = std::string("libcufile not found: ") + (err ? err : "dlopen failed");
    return;
  }
  CuFileApi& f = libs->cufile;
  std::string missing;
  Resolve(h, "cuFileDriverOpen", &f.driver_open, &missing);
  Resolve(h, "cuFileDriverClose", &f.driver_close, &missing);
  Resolve(h, "cuFileHandleRegister", &f.handle_register, &missing);
  Resolve(h, "cuFileHandleDeregister", &f.handle_deregister, &missing);
  Resolve(h, "cuFileBufRegister", &f.buf_register, &missing);
  Resolve(h, "cuFileBufDeregister", &f.buf_deregister, &missing);
  Resolve(h, "cuFileRead", &f.read, &missing);
  Resolve(h, "cuFileWrite", &f.write, &missing);
  if (!missing.empty()) {
    libs->cufile_note = "libcufile lacks " + missing;
    return;
  }
  libs->have_cufile = true;
}

}  // namespace

bool BuiltWithCudaKernels() {
#ifdef FLATCAKE_GPU_KERNELS_PATH
  return true;
#else
  return false;
#endif
}

#ifdef FLATCAKE_GPU_KERNELS_PATH
namespace {

constexpr const char* kKernelsFile = "libflatcake_gpu_kernels.so";

// The directories of the images that may carry the kernels beside them: the one this code is
// linked into (dladdr: the Python extension, libflatcake.so, or the executable) and the
// executable itself.
std::vector<std::filesystem::path> ImageDirectories() {
  std::vector<std::filesystem::path> dirs;
  std::error_code ec;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&KernelsLibraryCandidates), &info) != 0 &&
      info.dli_fname != nullptr && info.dli_fname[0] == '/') {
    const auto image = std::filesystem::canonical(info.dli_fname, ec);
    if (!ec) dirs.push_back(image.parent_path());
  }
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path());
  return dirs;
}

}  // namespace
#endif

std::vector<std::string> KernelsLibraryCandidates() {
  std::vector<std::string> out;
#ifdef FLATCAKE_GPU_KERNELS_PATH
  auto add = [&out](const std::filesystem::path& p) {
    std::string s = p.lexically_normal().string();
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
  };
  for (const auto& dir : ImageDirectories()) {
    add(dir / kKernelsFile);
    add(dir / "flatcake" / kKernelsFile);  // libflatcake.so in an install's library directory
    add(dir.parent_path() / "lib" / "flatcake" / kKernelsFile);
#ifdef FLATCAKE_INSTALL_LIBDIR
    add(dir.parent_path() / FLATCAKE_INSTALL_LIBDIR / "flatcake" / kKernelsFile);
#endif
  }
  add(FLATCAKE_GPU_KERNELS_PATH);
#endif
  return out;
}

std::string KernelsLibraryPath() {
  if (const char* env = std::getenv("FLATCAKE_GPU_KERNELS"); env != nullptr && *env != '\0') {
    return env;
  }
  const std::vector<std::string> candidates = KernelsLibraryCandidates();
  for (const std::string& c : candidates) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(c, ec)) return c;
  }
  return candidates.empty() ? std::string() : candidates.back();
}

Result<const CudaLibraries*> LoadCudaLibraries() {
  static std::once_flag once;
  static CudaLibraries* libs = nullptr;
  static Status* error = nullptr;
  std::call_once(once, [] {
    auto fail = [](std::string msg) { error = new Status(Status::Unsupported(msg)); };
    const std::string path = KernelsLibraryPath();
    if (path.empty()) {
      return fail("this build has no CUDA kernels (configured without nvcc or FLATCAKE_CUDA=OFF)");
    }
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) {
      const char* err = dlerror();
      return fail("cannot load the kernels library " + path + ": " + (err ? err : "?"));
    }
    auto* l = new CudaLibraries();
    l->kernels_path = path;
    if (Status st = LoadRuntime(h, &l->rt); !st.ok()) return fail(std::string(st.message()));
    if (Status st = LoadKernels(h, &l->kernels); !st.ok()) return fail(std::string(st.message()));
    LoadCuFile(l);
    libs = l;
  });
  if (error != nullptr) return *error;
  return static_cast<const CudaLibraries*>(libs);
}

std::string CudaErrorText(const CudaRuntimeApi& rt, CudaError err) {
  const char* s = rt.get_error_string ? rt.get_error_string(err) : nullptr;
  return "CUDA error " + std::to_string(err) + (s ? std::string(": ") + s : std::string());
}

}  // namespace flatcake::gpu
