#include "cli/soak_report.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

namespace flatcake::cli::soak {

Result<ProcSample> SampleProc(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  std::FILE* f = std::fopen((dir + "/status").c_str(), "r");
  if (f == nullptr) return Status::NotFound("process " + std::to_string(pid) + " is gone");
  ProcSample s;
  char line[256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long long v = 0;
    if (std::sscanf(line, "VmRSS: %llu kB", &v) == 1) s.rss_bytes = v * 1024;
    if (std::sscanf(line, "RssAnon: %llu kB", &v) == 1) s.anon_bytes = v * 1024;
    if (std::sscanf(line, "RssShmem: %llu kB", &v) == 1) s.shmem_bytes = v * 1024;
    if (std::sscanf(line, "Threads: %llu", &v) == 1) s.threads = static_cast<uint32_t>(v);
  }
  std::fclose(f);
  DIR* d = ::opendir((dir + "/fd").c_str());
  if (d == nullptr) return Status::NotFound("process " + std::to_string(pid) + " is gone");
  for (dirent* e; (e = ::readdir(d)) != nullptr;) {
    if (e->d_name[0] != '.') ++s.fds;
  }
  ::closedir(d);
  return s;
}

double LeastSquaresSlope(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = std::min(x.size(), y.size());
  if (n < 2) return 0;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < n; ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
  }
  return sxx > 0 ? sxy / sxx : 0;
}

RssVerdict JudgeRss(const std::vector<ProcSample>& samples, double run_s, double min_judged_s) {
  RssVerdict v;
  if (samples.empty()) return v;
  v.start_bytes = samples.front().rss_bytes;
  v.end_bytes = samples.back().rss_bytes;
  for (const ProcSample& s : samples) v.max_bytes = std::max(v.max_bytes, s.rss_bytes);
  v.from_s = run_s / 2;
  v.to_s = run_s;
  const uint32_t last = samples.back().daemon;
  std::vector<double> t, rss, anon;
  bool one_daemon = true;
  for (const ProcSample& s : samples) {
    if (s.t_s < v.from_s) continue;
    one_daemon = one_daemon && s.daemon == last;
    t.push_back(s.t_s);
    rss.push_back(static_cast<double>(s.rss_bytes));
    anon.push_back(static_cast<double>(s.anon_bytes));
  }
  v.samples = t.size();
  if (t.empty()) return v;
  v.slope_bytes_per_s = LeastSquaresSlope(t, rss);
  v.anon_slope_bytes_per_s = LeastSquaresSlope(t, anon);
  v.growth_bytes = v.slope_bytes_per_s * (t.back() - t.front());
  double mean = 0;
  for (double r : rss) mean += r;
  mean /= static_cast<double>(rss.size());
  v.bound_bytes = std::max(static_cast<double>(kFlatBoundBytes), kFlatBoundFraction * mean);
  v.judged = one_daemon && t.size() >= 10 && run_s >= min_judged_s;
  v.flat = v.judged && v.growth_bytes <= v.bound_bytes;
  return v;
}

}  // namespace flatcake::cli::soak
