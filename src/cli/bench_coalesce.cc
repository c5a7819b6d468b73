// `flatcake bench coalesce`: how long read planning (sort + merge + align + split) takes for
// realistic restore requests: the slices of a few sessions' layer-major segments, with a few
// missing blocks (partial prefix hits) leaving gaps, shuffled as a radix-tree walk would hand them
// over. Reports, for a small and a large request, one cold run (fresh memory) and the median of
// warm runs that reuse the plan's memory, as a long-lived reader does.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "cli/commands.h"
#include "io/coalesce.h"

namespace flatcake::cli {
namespace {

struct CoalesceBenchArgs {
  uint64_t descs = 1000000;
  uint64_t descs_small = 100000;
  uint32_t sessions = 4;
  uint32_t layers = 32;
  uint32_t planes = 2;
  uint64_t slice_bytes = 16384;
  uint32_t blocks_per_segment = 256;
  double hole_pct = 1.0;
  uint64_t max_gap = 64 << 10;
  uint64_t max_io = 4 << 20;
  uint64_t alignment = 4096;
  int repeat = 5;
  uint64_t seed = 1;
  bool json = false;
};

struct Figures {
  uint64_t descs = 0;
  double plan_ms = 0;  // median
  double plan_ms_min = 0;
  double plan_ms_cold = 0;  // first run, fresh memory
  double sort_ms = 0;       // median of the sort step alone
  CoalescePlan plan;
};

// Slices of `sessions` session files, each a run of segments (turns) laid out layer-major:
// [layer][plane][block] slices of slice_bytes. Blocks are dropped at random (hole_pct) so the
// request has gaps, then everything is shuffled.
std::vector<SliceRead> MakeDescriptors(const CoalesceBenchArgs& a, uint64_t count, uint8_t* dest) {
  std::mt19937_64 rng(a.seed + count);
  std::bernoulli_distribution hole(a.hole_pct / 100.0);
  std::vector<SliceRead> out;
  out.reserve(count);
  const uint64_t per_block = uint64_t{a.layers} * a.planes;
  const uint64_t segment_bytes = per_block * a.blocks_per_segment * a.slice_bytes;
  std::vector<uint64_t> segments(a.sessions, 0);
  uint32_t session = 0;
  while (out.size() < count) {
    // One segment of `session`; segments of different sessions are generated round-robin.
    const uint64_t base = segments[session]++ * segment_bytes;
    for (uint32_t b = 0; b < a.blocks_per_segment && out.size() < count; ++b) {
      if (hole(rng)) continue;
      for (uint32_t l = 0; l < a.layers && out.size() < count; ++l) {
        for (uint32_t p = 0; p < a.planes && out.size() < count; ++p) {
          const uint64_t off =
              base + ((uint64_t{l} * a.planes + p) * a.blocks_per_segment + b) * a.slice_bytes;
          out.push_back(SliceRead{session, off, a.slice_bytes, dest, l});
        }
      }
    }
    session = (session + 1) % a.sessions;
  }
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Result<Figures> Measure(const CoalesceBenchArgs& a, uint64_t count) {
  uint8_t sink_byte = 0;  // destinations are never written: planning only
  const std::vector<SliceRead> descs = MakeDescriptors(a, count, &sink_byte);
  const CoalesceOptions opts{a.max_gap, a.max_io, a.alignment};
  Figures f;
  f.descs = descs.size();
  std::vector<double> plan_ms, sort_ms;
  // Run 0 is the cold run (fresh memory for the plan); the median is over the warm runs that
  // follow, which reuse the plan's memory as a long-running reader would.
  HugeVector<uint32_t> order;
  for (int r = 0; r <= std::max(1, a.repeat); ++r) {
    auto t0 = std::chrono::steady_clock::now();
    SortSliceOrder(descs, &order);
    auto t1 = std::chrono::steady_clock::now();
    Status st = PlanReads(descs, opts, &f.plan);
    auto t2 = std::chrono::steady_clock::now();
    if (!st.ok()) return st;
    if (order.size() != descs.size()) return Status::Corruption("sort lost descriptors");
    const double sort = std::chrono::duration<double, std::milli>(t1 - t0).count();
    const double plan = std::chrono::duration<double, std::milli>(t2 - t1).count();
    if (r == 0) {
      f.plan_ms_cold = plan;
    } else {
      sort_ms.push_back(sort);
      plan_ms.push_back(plan);
    }
  }
  f.plan_ms = Median(plan_ms);
  f.plan_ms_min = *std::min_element(plan_ms.begin(), plan_ms.end());
  f.sort_ms = Median(sort_ms);
  return f;
}

int Run(const CoalesceBenchArgs& a) {
  if (a.sessions == 0 || a.layers == 0 || a.planes == 0 || a.slice_bytes == 0 ||
      a.blocks_per_segment == 0 || a.descs == 0 || a.descs_small == 0) {
    std::fprintf(stderr, "flatcake bench coalesce: %s\n",
                 Status::InvalidArgument("sizes and counts must be positive").ToString().c_str());
    return 2;
  }
  std::vector<Figures> rows;
  for (uint64_t count : {a.descs_small, a.descs}) {
    auto f = Measure(a, count);
    if (!f.ok()) {
      std::fprintf(stderr, "flatcake bench coalesce: %s\n", f.status().ToString().c_str());
      return 1;
    }
    rows.push_back(std::move(f).value());
  }
  std::printf(
      "coalesce: %u sessions, %u layers x %u planes, %llu B slices, %u blocks/segment, "
      "%.1f%% holes; max_gap %llu, max_io %llu, alignment %llu; median of %d warm runs\n",
      a.sessions, a.layers, a.planes, static_cast<unsigned long long>(a.slice_bytes),
      a.blocks_per_segment, a.hole_pct, static_cast<unsigned long long>(a.max_gap),
      static_cast<unsigned long long>(a.max_io), static_cast<unsigned long long>(a.alignment),
      a.repeat);
  std::printf("%10s %10s %10s %10s %10s %10s %12s %12s %10s\n", "descs", "plan_ms", "min_ms",
              "cold_ms", "sort_ms", "reads_out", "MiB_request", "MiB_read", "KiB_gap");
  for (const auto& f : rows) {
    std::printf("%10llu %10.2f %10.2f %10.2f %10.2f %10zu %12.1f %12.1f %10.1f\n",
                static_cast<unsigned long long>(f.descs), f.plan_ms, f.plan_ms_min, f.plan_ms_cold,
                f.sort_ms, f.plan.reads.size(), f.plan.bytes_requested / 1048576.0,
                f.plan.bytes_read / 1048576.0, f.plan.bytes_gap / 1024.0);
  }
  const Figures& small = rows[0];
  const Figures& big = rows[1];
  std::printf("1M-scale target: plan <= 100 ms -> %s (%.2f ms)\n",
              big.plan_ms <= 100.0 ? "met" : "MISSED", big.plan_ms);
  if (a.json) {
    nlohmann::json j = {
        {"bench", "coalesce"},
        {"descs", big.descs},
        {"plan_ms", big.plan_ms},
        {"plan_ms_min", big.plan_ms_min},
        {"plan_ms_cold", big.plan_ms_cold},
        {"sort_ms", big.sort_ms},
        {"reads_out", big.plan.reads.size()},
        {"bytes_requested", big.plan.bytes_requested},
        {"bytes_read", big.plan.bytes_read},
        {"bytes_gap", big.plan.bytes_gap},
        {"descs_small", small.descs},
        {"plan_ms_small", small.plan_ms},
        {"plan_ms_cold_small", small.plan_ms_cold},
        {"sort_ms_small", small.sort_ms},
        {"reads_out_small", small.plan.reads.size()},
        {"max_gap", a.max_gap},
        {"max_io", a.max_io},
        {"alignment", a.alignment},
        {"repeat", a.repeat},
        {"target_plan_ms", 100},
        {"meets_target", big.plan_ms <= 100.0},
    };
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace

void RegisterCoalesceBench(CLI::App& bench, int* exit_code) {
  auto args = std::make_shared<CoalesceBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "coalesce",
      "Read-planning time (sort by file/offset, merge with gap bridging, align, split at max_io) "
      "for a small and a large shuffled restore request");
  cmd->add_option("--descs", args->descs, "Descriptors in the large request")
      ->capture_default_str();
  cmd->add_option("--descs-small", args->descs_small, "Descriptors in the small request")
      ->capture_default_str();
  cmd->add_option("--sessions", args->sessions, "Sessions (one file each) the slices come from")
      ->capture_default_str();
  cmd->add_option("--layers", args->layers, "Model layers")->capture_default_str();
  cmd->add_option("--planes", args->planes, "Planes per layer (e.g. K and V)")
      ->capture_default_str();
  cmd->add_option("--slice-bytes", args->slice_bytes, "Bytes per slice (one block, layer, plane)")
      ->capture_default_str();
  cmd->add_option("--blocks-per-segment", args->blocks_per_segment,
                  "Blocks per layer-major segment (one turn's write batch)")
      ->capture_default_str();
  cmd->add_option("--hole-pct", args->hole_pct, "Percent of blocks missing from the request")
      ->capture_default_str();
  cmd->add_option("--max-gap", args->max_gap, "Largest gap bridged inside one read (bytes)")
      ->capture_default_str();
  cmd->add_option("--max-io", args->max_io, "Largest read (bytes, multiple of --alignment)")
      ->capture_default_str();
  cmd->add_option("--alignment", args->alignment, "Read alignment (bytes, power of two)")
      ->capture_default_str();
  cmd->add_option("--repeat", args->repeat,
                  "Warm repetitions after one cold run; the median is reported")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Random seed")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print one JSON object on the last line");
  cmd->callback([args, exit_code] { *exit_code = Run(*args); });
}

}  // namespace flatcake::cli
