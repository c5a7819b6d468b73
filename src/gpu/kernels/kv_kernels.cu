// The GPU data path's kernels (docs/gpu.md), built by nvcc into flatcake_gpu_kernels, a shared
// library the store loads with dlopen only when a GPU is present (gpu/cuda_device.cc). Its ABI is
// the C functions below; the store resolves them, and the CUDA runtime this library links, with
// dlsym.
//
// Both kernels move a table of equal slices between a contiguous window and scattered places:
// slice (r, c), r < rows, c < cols, lies at window + (r * cols + c) * slice_bytes and at
// table[r * row_stride + c]. Scatter copies window -> table (a restore: a layer's slices into the
// engine's page slots); gather copies table -> window (a put: pages packed layer-major). Grid x
// runs over the rows * cols slices (r = x / cols, c = x % cols), grid y over `splits` parts of a
// slice, so that large slices keep every multiprocessor busy; y stays within its 65535 limit.
// Copies are 16 bytes wide where the slice's two addresses and length allow, else byte by byte.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

__device__ void CopySlice(uint8_t* dst, const uint8_t* src, uint64_t len, uint32_t part,
                          uint32_t parts) {
  const bool wide =
      ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | len) & 15) == 0;
  if (wide) {
    const uint64_t n = len / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (uint64_t i = uint64_t{part} * kThreads + threadIdx.x; i < n;
         i += uint64_t{parts} * kThreads) {
      d[i] = s[i];
    }
    return;
  }
  for (uint64_t i = uint64_t{part} * kThreads + threadIdx.x; i < len;
       i += uint64_t{parts} * kThreads) {
    dst[i] = src[i];
  }
}

__global__ void ScatterKernel(const uint8_t* window, uint8_t* const* table, uint64_t row_stride,
                              uint32_t cols, uint64_t slice_bytes) {
  const uint64_t i = blockIdx.x;  // slice index: window order
  const uint64_t r = i / cols, c = i % cols;
  CopySlice(table[r * row_stride + c], window + i * slice_bytes, slice_bytes, blockIdx.y,
            gridDim.y);
}

__global__ void GatherKernel(uint8_t* window, const uint8_t* const* table, uint64_t row_stride,
                             uint32_t cols, uint64_t slice_bytes) {
  const uint64_t i = blockIdx.x;
  const uint64_t r = i / cols, c = i % cols;
  CopySlice(window + i * slice_bytes, table[r * row_stride + c], slice_bytes, blockIdx.y,
            gridDim.y);
}

constexpr uint64_t kMaxGridX = (uint64_t{1} << 31) - 1;

// Blocks per slice: about 16 KiB of each slice per block, at most 64.
dim3 GridOf(uint32_t rows, uint32_t cols, uint64_t slice_bytes) {
  uint64_t splits = (slice_bytes + (16u << 10) - 1) / (16u << 10);
  if (splits < 1) splits = 1;
  if (splits > 64) splits = 64;
  return dim3(static_cast<unsigned>(uint64_t{rows} * cols), static_cast<unsigned>(splits), 1);
}

}  // namespace

extern "C" {

// The ABI version of this library; gpu/cuda_device.cc refuses another.
__attribute__((visibility("default"))) int flatcake_kv_kernels_abi() { return 1; }

// Returns the cudaError_t of the launch (0: launched).
__attribute__((visibility("default"))) int flatcake_kv_scatter(const void* window,
                                                               void* const* table,
                                                               uint64_t row_stride, uint32_t rows,
                                                               uint32_t cols, uint64_t slice_bytes,
                                                               void* stream) {
  if (rows == 0 || cols == 0 || slice_bytes == 0) return 0;
  if (uint64_t{rows} * cols > kMaxGridX) return static_cast<int>(cudaErrorInvalidValue);
  ScatterKernel<<<GridOf(rows, cols, slice_bytes), kThreads, 0,
                  static_cast<cudaStream_t>(stream)>>>(static_cast<const uint8_t*>(window),
                                                       reinterpret_cast<uint8_t* const*>(table),
                                                       row_stride, cols, slice_bytes);
  return static_cast<int>(cudaGetLastError());
}

__attribute__((visibility("default"))) int flatcake_kv_gather(void* window,
                                                              const void* const* table,
                                                              uint64_t row_stride, uint32_t rows,
                                                              uint32_t cols, uint64_t slice_bytes,
                                                              void* stream) {
  if (rows == 0 || cols == 0 || slice_bytes == 0) return 0;
  if (uint64_t{rows} * cols > kMaxGridX) return static_cast<int>(cudaErrorInvalidValue);
  GatherKernel<<<GridOf(rows, cols, slice_bytes), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<uint8_t*>(window), reinterpret_cast<const uint8_t* const*>(table), row_stride,
      cols, slice_bytes);
  return static_cast<int>(cudaGetLastError());
}

}  // extern "C"
