#include "cli/bench_util.h"

#include <algorithm>

#include "cli/store_flags.h"
#include "util/physical_memory.h"

namespace flatcake::cli {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Result<AlignedBuffer> AllocateHostMemory(uint64_t bytes, bool huge) {
  return AlignedBuffer::Allocate(
      bytes, {.alignment = AlignedBuffer::kHugePageBytes,
              .backing = huge ? PageBacking::kTransparentHuge : PageBacking::kSmallPages,
              .prefault = true});
}

Status CheckHostMemory(uint64_t need, const std::string& who, const std::string& for_what) {
  const uint64_t phys = PhysicalMemoryBytes();
  if (need > phys / 4 * 3) {
    return Status::InvalidArgument(
        who + " needs " + std::to_string(need >> 20) + " MiB of host memory for " + for_what +
        ", more than 3/4 of this machine's " + std::to_string(phys >> 20) + " MiB");
  }
  return Status::OK();
}

void AddBenchIoFlags(CLI::App* cmd, IoEngineKind* engine, uint32_t* workers, uint32_t* depth) {
  AddStoreFlag(cmd, "io_engine", engine);
  cmd->add_option("--io-workers", *workers, "I/O worker threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--io-queue-depth", *depth, "Queue depth per worker")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
}

void AddDestPagesFlag(CLI::App* cmd, std::string* pages, const std::string& what) {
  cmd->add_option("--dest-pages", *pages,
                  "Pages of " + what +
                      ": thp (transparent huge pages, as a serving engine's host KV pool) or 4k")
      ->check(CLI::IsMember({"thp", "4k"}))
      ->capture_default_str();
}

}  // namespace flatcake::cli
