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
#include <vector>

#include "flatcake/status.h"

namespace flatcake::gpu {

// --- CUDA runtime (cuda_runtime_api.h) ---
using CudaError = int;
using CudaStream = void*;
using CudaEvent = void*;
inline constexpr CudaError kCudaSuccess = 0;
inline constexpr CudaError kCudaErrorNotReady = 600;
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
  CudaError (*get_device_count)(int*);
  CudaError (*set_device)(int);
  CudaError (*runtime_get_version)(int*);
  CudaError (*driver_get_version)(int*);
  const char* (*get_error_string)(CudaError);
  CudaError (*malloc)(void**, size_t);
  CudaError (*free)(void*);
  CudaError (*malloc_host)(void**, size_t);
  CudaError (*free_host)(void*);
  CudaError (*host_register)(void*, size_t, unsigned);
  CudaError (*host_unregister)(void*);
  CudaError (*memcpy)(void*, const void*, size_t, int);
  CudaError (*memcpy_async)(void*, const void*, size_t, int, CudaStream);
  CudaError (*memset)(void*, int, size_t);
  CudaError (*stream_create_with_flags)(CudaStream*, unsigned);
  CudaError (*stream_destroy)(CudaStream);
  CudaError (*stream_synchronize)(CudaStream);
  CudaError (*stream_wait_event)(CudaStream, CudaEvent, unsigned);
  CudaError (*event_create_with_flags)(CudaEvent*, unsigned);
  CudaError (*event_destroy)(CudaEvent);
  CudaError (*event_record)(CudaEvent, CudaStream);
  CudaError (*event_query)(CudaEvent);
  CudaError (*event_synchronize)(CudaEvent);
  CudaError (*event_elapsed_time)(float*, CudaEvent, CudaEvent);
  CudaError (*device_synchronize)();
};

// --- the kernels library (kernels/kv_kernels.cu) ---
struct KvKernelsApi {
  int (*abi)();
  int (*scatter)(const void* window, void* const* table, uint64_t row_stride, uint32_t rows,
                 uint32_t cols, uint64_t slice_bytes, void* stream);
  int (*gather)(void* window, const void* const* table, uint64_t row_stride, uint32_t rows,
                uint32_t cols, uint64_t slice_bytes, void* stream);
};
inline constexpr int kKvKernelsAbi = 1;

// --- cuFile (cufile.h) ---
using CuFileHandle = void*;
struct CuFileError {
  int err;     // CUfileOpError; 0 = CU_FILE_SUCCESS
  int cu_err;  // CUresult
};
inline constexpr int kCuFileHandleTypeOpaqueFd = 1;
struct CuFileDescr {
  int type;  // CUfileFileHandleType
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};

struct CuFileApi {
  CuFileError (*driver_open)();
  CuFileError (*driver_close)();
  CuFileError (*handle_register)(CuFileHandle*, CuFileDescr*);
  void (*handle_deregister)(CuFileHandle);
  CuFileError (*buf_register)(const void*, size_t, int);
  CuFileError (*buf_deregister)(const void*);
  ssize_t (*read)(CuFileHandle, void*, size_t, off_t, off_t);
  ssize_t (*write)(CuFileHandle, const void*, size_t, off_t, off_t);
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

// Where the kernels library is looked for, when the build has the CUDA part: beside the binary or
// shared object this code is linked into (the build tree; the Python package, next to its
// extension), in flatcake/ below it (libflatcake.so in an install's library directory), in
// lib/flatcake/ of the prefix above it (an install's or a wheel's bin/), then
// at the build tree's path compiled in. In that order, each once; directories the loader cannot
// name are left out. Empty when the build has no CUDA part.
std::vector<std::string> KernelsLibraryCandidates();
// The kernels library to load: FLATCAKE_GPU_KERNELS when set, else the first of the candidates
// that exists, else the last candidate (so that the error names where it was expected). Empty
// when the build has no CUDA part and the variable is unset.
std::string KernelsLibraryPath();
// Whether this build compiled the kernels (FLATCAKE_CUDA found nvcc).
bool BuiltWithCudaKernels();

// Loads (once per process; later calls return the same tables or the same error) the kernels
// library, the runtime through it, and cuFile (libcufile.so.0) when present. FailedPrecondition
// naming what is missing when the kernels library or the runtime cannot be loaded.
Result<const CudaLibraries*> LoadCudaLibraries();

// "cudaErrorMemoryAllocation (2): out of memory" style text for a runtime error.
std::string CudaErrorText(const CudaRuntimeApi& rt, CudaError err);

}  // namespace flatcake::gpu
