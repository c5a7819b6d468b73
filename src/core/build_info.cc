#include "core/build_info.h"

#include "gpu/cuda_api.h"

#ifndef FLATCAKE_VERSION
#error "FLATCAKE_VERSION is set by src/core/CMakeLists.txt"
#endif

namespace flatcake {

BuildInfo GetBuildInfo() {
  BuildInfo b{};
  b.version = FLATCAKE_VERSION;
  b.io_uring = FLATCAKE_BUILT_URING;
  b.cuda_kernels = gpu::BuiltWithCudaKernels();
  b.serve = FLATCAKE_BUILT_SERVE;
  b.cluster = FLATCAKE_BUILT_SERVE;  // the daemon and the cluster are built together
  b.metrics = FLATCAKE_BUILT_METRICS;
  if (b.cuda_kernels) b.gpu_kernels = gpu::KernelsLibraryPath();
  return b;
}

}  // namespace flatcake
