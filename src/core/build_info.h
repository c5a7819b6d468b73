// What this build of FlatCake has: the optional parts CMake found at configure time (io_uring,
// the CUDA kernels, the daemon and cluster, the Prometheus endpoint) and its version. `flatcake
// info` and `flatcake.build_info()` print it, so that an installed binary or wheel says what it
// was built with. Constant for the life of the process; safe to call from any thread.
#pragma once

#include <string>

namespace flatcake {

struct BuildInfo {
  const char* version;      // the CMake project version
  bool io_uring;            // the io_uring I/O engine (FLATCAKE_WITH_URING, liburing)
  bool cuda_kernels;        // the GPU data path's kernels (FLATCAKE_CUDA, nvcc)
  bool serve;               // the node daemon and its client (protobuf, toml++)
  bool cluster;             // the cluster's etcd membership and UCX data path (libucx)
  bool metrics;             // the daemon's Prometheus endpoint (prometheus-cpp)
  std::string gpu_kernels;  // the kernels library a GPU would load; empty without the kernels
};

BuildInfo GetBuildInfo();

}  // namespace flatcake
