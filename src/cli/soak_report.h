// What `flatcake soak` measures of its daemon (docs/reliability.md): samples of the process from
// /proc, and the verdict on its RSS. Pure functions but SampleProc; thread-compatible.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "flatcake/status.h"

namespace flatcake::cli::soak {

// One look at the daemon.
struct ProcSample {
  double t_s = 0;            // since the soak started
  uint32_t daemon = 0;       // 1 before the restart, 2 after
  uint64_t rss_bytes = 0;    // VmRSS
  uint64_t anon_bytes = 0;   // RssAnon (heap, stacks): where a leak shows
  uint64_t shmem_bytes = 0;  // RssShmem (the arena's pages it touched)
  uint32_t fds = 0;          // entries of /proc/PID/fd
  uint32_t threads = 0;
};

// Reads /proc/<pid>/status (VmRSS, RssAnon, RssShmem, Threads) and counts /proc/<pid>/fd.
// NotFound when the process is gone.
Result<ProcSample> SampleProc(pid_t pid);

// "Flat RSS": the daemon's VmRSS over the run's last half, one daemon's life past its warm-up
// (the restart comes at or before the middle; by then the new daemon's arena, index and pools
// have reached their size). The least-squares slope of RSS against time, times the window's
// length, is the growth; flat when the growth is at most kFlatBoundBytes or kFlatBoundFraction of
// the window's mean RSS, whichever is more. Not judged when the window holds fewer than 10
// samples of one daemon or the run is shorter than min_judged_s.
inline constexpr uint64_t kFlatBoundBytes = 4ull << 20;
inline constexpr double kFlatBoundFraction = 0.02;

struct RssVerdict {
  bool judged = false;
  bool flat = false;
  double from_s = 0, to_s = 0;                             // the window
  uint64_t samples = 0;                                    // in the window
  uint64_t start_bytes = 0, max_bytes = 0, end_bytes = 0;  // of the whole run
  double slope_bytes_per_s = 0;                            // VmRSS, in the window
  double anon_slope_bytes_per_s = 0;                       // RssAnon, in the window
  double growth_bytes = 0;                                 // slope x window length
  double bound_bytes = 0;
};

RssVerdict JudgeRss(const std::vector<ProcSample>& samples, double run_s, double min_judged_s);

// The least-squares slope of y against x; 0 with fewer than two points or no spread in x.
double LeastSquaresSlope(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace flatcake::cli::soak
