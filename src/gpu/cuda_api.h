// The CUDA runtime, cuFile and the kernels library, loaded at run time with dlopen into typed
// function tables: FlatCake never links them, so a build without CUDA and a machine without a GPU
// behave as before, and no CUDA header is needed anywhere in the host code. The few types and
// signatures used here are declared from NVIDIA's public API documentation (CUDA Runtime API,
// cuFile API reference); only the values this code passes or tests are named.
//
// Loading order matters: the kernels library (flatcake_gpu_kernels, built by nvcc) links the CUDA
// runtime, so the runtime's table is resolved through the kernels library's handle. Both then use
// one runtime instance, whichever libcudart the dynamic linker found for it.
//
// Thread safety: the tables are immutable once loaded; the functions they point to are the
// libraries' own (the CUDA runtime and cuFile are thread-safe).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "flatcake/status.h"

namespace flatcake::gpu {

// --- CUDA runtime (cuda_runtime_api.h) ---
using cudaError_t = int;
using cudaStream_t = void*;
using cudaEvent_t = void*;
inline constexpr cudaError_t kCudaSuccess = 0;
inline constexpr cudaError_t kCudaErrorNotReady = 600;
enum CudaMemcpyKind : int {
  kCudaMemcpyHostToDevice = 1,
  kCudaMemcpyDeviceToHost = 2,
  kCudaMemcpyDeviceToDevice = 3,
};
inline constexpr unsigned kCudaStreamNonBlocking = 0x01;
inline constexpr unsigned kCudaEventDefault = 0x00;
inline constexpr unsigned kCudaEventDisableTiming = 0x02;
inline constexpr unsigned kCudaHostRegisterDefault = 0x00;

struct CudaRuntimeApi {
  cudaError_t (*GetDeviceCount)(int*);
  cudaError_t (*SetDevice)(int);
  cudaError_t (*RuntimeGetVersion)(int*);
  cudaError_t (*DriverGetVersion)(int*);
  const char* (*GetErrorString)(cudaError_t);
  cudaError_t (*Malloc)(void**, size_t);
  cudaError_t (*Free)(void*);
  cudaError_t (*MallocHost)(void**, size_t);
  cudaError_t (*FreeHost)(void*);
  cudaError_t (*HostRegister)(void*, size_t, unsigned);
  cudaError_t (*HostUnregister)(void*);
  cudaError_t (*Memcpy)(void*, const void*, size_t, int);
  cudaError_t (*MemcpyAsync)(void*, const void*, size_t, int, cudaStream_t);
  cudaError_t (*Memset)(void*, int, size_t);
  cudaError_t (*StreamCreateWithFlags)(cudaStream_t*, unsigned);
  cudaError_t (*StreamDestroy)(cudaStream_t);
  cudaError_t (*StreamSynchronize)(cudaStream_t);
  cudaError_t (*StreamWaitEvent)(cudaStream_t, cudaEvent_t, unsigned);
  cudaError_t (*EventCreateWithFlags)(cudaEvent_t*, unsigned);
  cudaError_t (*EventDestroy)(cudaEvent_t);
  cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
  cudaError_t (*EventQuery)(cudaEvent_t);
  cudaError_t (*EventSynchronize)(cudaEvent_t);
  cudaError_t (*EventElapsedTime)(float*, cudaEvent_t, cudaEvent_t);
  cudaError_t (*DeviceSynchronize)();
};

// --- the kernels library (kernels/kv_kernels.cu) ---
struct KvKernelsApi {
  int (*Abi)();
  int (*Scatter)(const void* window, void* const* table, uint64_t row_stride, uint32_t rows,
                 uint32_t cols, uint64_t slice_bytes, void* stream);
  int (*Gather)(void* window, const void* const* table, uint64_t row_stride, uint32_t rows,
                uint32_t cols, uint64_t slice_bytes, void* stream);
};
inline constexpr int kKvKernelsAbi = 1;

// --- cuFile (cufile.h) ---
using CUfileHandle_t = void*;
struct CUfileError_t {
  int err;     // CUfileOpError; 0 = CU_FILE_SUCCESS
  int cu_err;  // CUresult
};
inline constexpr int kCuFileHandleTypeOpaqueFd = 1;
struct CUfileDescr_t {
  int type;  // CUfileFileHandleType
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};

struct CuFileApi {
  CUfileError_t (*DriverOpen)();
  CUfileError_t (*DriverClose)();
  CUfileError_t (*HandleRegister)(CUfileHandle_t*, CUfileDescr_t*);
  void (*HandleDeregister)(CUfileHandle_t);
  CUfileError_t (*BufRegister)(const void*, size_t, int);
  CUfileError_t (*BufDeregister)(const void*);
  ssize_t (*Read)(CUfileHandle_t, void*, size_t, off_t, off_t);
  ssize_t (*Write)(CUfileHandle_t, const void*, size_t, off_t, off_t);
};

// The loaded libraries: the kernels library (and through it the runtime), and cuFile when found.
// Kept loaded for the life of the process once loaded (unloading a CUDA runtime is unsafe while
// any of its objects live).
struct CudaLibraries {
  std::string kernels_path;  // the kernels library loaded
  CudaRuntimeApi rt{};
  KvKernelsApi kernels{};
  bool have_cufile = false;
  std::string cufile_note;  // why cuFile is not loaded
  CuFileApi cufile{};
};

// Where the kernels library is looked for: FLATCAKE_GPU_KERNELS, else the build tree's path
// compiled in (when the build has the CUDA part), else "libflatcake_gpu_kernels.so" on the
// loader's search path. Empty when the build has no CUDA part and the variable is unset.
std::string KernelsLibraryPath();
// Whether this build compiled the kernels (FLATCAKE_CUDA found nvcc).
bool BuiltWithCudaKernels();

// Loads (once per process; later calls return the same tables or the same error) the kernels
// library, the runtime through it, and cuFile (libcufile.so.0) when present. FailedPrecondition
// naming what is missing when the kernels library or the runtime cannot be loaded.
Result<const CudaLibraries*> LoadCudaLibraries();

// "cudaErrorMemoryAllocation (2): out of memory" style text for a runtime error.
std::string CudaErrorText(const CudaRuntimeApi& rt, cudaError_t err);

}  // namespace flatcake::gpu
