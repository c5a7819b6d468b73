#include "gpu/cuda_api.h"

#include <dlfcn.h>

#include <cstdlib>
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
  Resolve(h, "cudaGetDeviceCount", &rt->GetDeviceCount, &missing);
  Resolve(h, "cudaSetDevice", &rt->SetDevice, &missing);
  Resolve(h, "cudaRuntimeGetVersion", &rt->RuntimeGetVersion, &missing);
  Resolve(h, "cudaDriverGetVersion", &rt->DriverGetVersion, &missing);
  Resolve(h, "cudaGetErrorString", &rt->GetErrorString, &missing);
  Resolve(h, "cudaMalloc", &rt->Malloc, &missing);
  Resolve(h, "cudaFree", &rt->Free, &missing);
  Resolve(h, "cudaMallocHost", &rt->MallocHost, &missing);
  Resolve(h, "cudaFreeHost", &rt->FreeHost, &missing);
  Resolve(h, "cudaHostRegister", &rt->HostRegister, &missing);
  Resolve(h, "cudaHostUnregister", &rt->HostUnregister, &missing);
  Resolve(h, "cudaMemcpy", &rt->Memcpy, &missing);
  Resolve(h, "cudaMemcpyAsync", &rt->MemcpyAsync, &missing);
  Resolve(h, "cudaMemset", &rt->Memset, &missing);
  Resolve(h, "cudaStreamCreateWithFlags", &rt->StreamCreateWithFlags, &missing);
  Resolve(h, "cudaStreamDestroy", &rt->StreamDestroy, &missing);
  Resolve(h, "cudaStreamSynchronize", &rt->StreamSynchronize, &missing);
  Resolve(h, "cudaStreamWaitEvent", &rt->StreamWaitEvent, &missing);
  Resolve(h, "cudaEventCreateWithFlags", &rt->EventCreateWithFlags, &missing);
  Resolve(h, "cudaEventDestroy", &rt->EventDestroy, &missing);
  Resolve(h, "cudaEventRecord", &rt->EventRecord, &missing);
  Resolve(h, "cudaEventQuery", &rt->EventQuery, &missing);
  Resolve(h, "cudaEventSynchronize", &rt->EventSynchronize, &missing);
  Resolve(h, "cudaEventElapsedTime", &rt->EventElapsedTime, &missing);
  Resolve(h, "cudaDeviceSynchronize", &rt->DeviceSynchronize, &missing);
  if (!missing.empty()) return Status::Unsupported("the CUDA runtime lacks " + missing);
  return Status::OK();
}

Status LoadKernels(void* h, KvKernelsApi* k) {
  std::string missing;
  Resolve(h, "flatcake_kv_kernels_abi", &k->Abi, &missing);
  Resolve(h, "flatcake_kv_scatter", &k->Scatter, &missing);
  Resolve(h, "flatcake_kv_gather", &k->Gather, &missing);
  if (!missing.empty()) return Status::Unsupported("the kernels library lacks " + missing);
  if (k->Abi() != kKvKernelsAbi) {
    return Status::Unsupported("the kernels library has ABI " + std::to_string(k->Abi()) +
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
  Resolve(h, "cuFileDriverOpen", &f.DriverOpen, &missing);
  Resolve(h, "cuFileDriverClose", &f.DriverClose, &missing);
  Resolve(h, "cuFileHandleRegister", &f.HandleRegister, &missing);
  Resolve(h, "cuFileHandleDeregister", &f.HandleDeregister, &missing);
  Resolve(h, "cuFileBufRegister", &f.BufRegister, &missing);
  Resolve(h, "cuFileBufDeregister", &f.BufDeregister, &missing);
  Resolve(h, "cuFileRead", &f.Read, &missing);
  Resolve(h, "cuFileWrite", &f.Write, &missing);
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

std::string KernelsLibraryPath() {
  if (const char* env = std::getenv("FLATCAKE_GPU_KERNELS"); env != nullptr && *env != '\0') {
    return env;
  }
#ifdef FLATCAKE_GPU_KERNELS_PATH
  return FLATCAKE_GPU_KERNELS_PATH;
#else
  return "";
#endif
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

std::string CudaErrorText(const CudaRuntimeApi& rt, cudaError_t err) {
  const char* s = rt.GetErrorString ? rt.GetErrorString(err) : nullptr;
  return "CUDA error " + std::to_string(err) + (s ? std::string(": ") + s : std::string());
}

}  // namespace flatcake::gpu
