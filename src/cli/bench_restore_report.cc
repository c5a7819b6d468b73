// The report of `flatcake bench restore`: medians per variant, the ratios between them, and the
// same figures as JSON. A variant that did not run (or a ratio missing one of its variants) is
// absent, not 0: JSON null, "n/a" in the table, so a subset run never reads as a missed target.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/bench_restore.h"
#include "cli/bench_util.h"

namespace flatcake::cli {

void RestoreRatios::Add(const RestoreRun (&r)[kRestoreVariants],
                        const bool (&ran)[kRestoreVariants]) {
  auto ratio = [&](int a, int b, std::vector<double>* out) {
    if (ran[a] && ran[b] && r[b].gbps() > 0) out->push_back(r[a].gbps() / r[b].gbps());
  };
  ratio(kFlat, kRawSeq, &flat_vs_raw);
  ratio(kFlat, kScattered, &flat_vs_scattered);
  ratio(kFlat, kRawSlots, &flat_vs_raw_slots);
  ratio(kRawSlots, kRawSeq, &raw_slots_vs_raw);
  ratio(kRawSeq, kScattered, &raw_vs_scattered);
  ratio(kFlat, kRawWindow, &flat_vs_raw_window);
  ratio(kRawWindow, kRawSeq, &raw_window_vs_raw);
  ratio(kFlatDirect, kRawSeq, &flat_direct_vs_raw);
  ratio(kFlat, kFlatDirect, &flat_vs_flat_direct);
  ratio(kFlatDirect, kScattered, &flat_direct_vs_scattered);
}

std::optional<double> RestoreResults::Median(int v, double (*f)(const RestoreRun&)) const {
  if (!ran(v)) return std::nullopt;
  std::vector<double> x;
  for (const RestoreRun& r : runs[v]) x.push_back(f(r));
  return cli::Median(x);
}

std::optional<uint64_t> RestoreResults::Reads(int v) const {
  if (!ran(v)) return std::nullopt;
  return runs[v].front().reads;
}

std::optional<uint64_t> RestoreResults::ReadsInPlace(int v) const {
  if (!ran(v)) return std::nullopt;
  return runs[v].front().reads_in_place;
}

namespace {

std::optional<double> RatioMedian(const std::vector<double>& v) {
  if (v.empty()) return std::nullopt;
  return Median(v);
}

template <typename T>
nlohmann::json JsonOrNull(const std::optional<T>& x) {
  return x ? nlohmann::json(*x) : nlohmann::json(nullptr);
}

std::string TextOrNa(std::optional<double> x, const char* fmt) {
  if (!x) return std::string("n/a");
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, *x);
  return std::string(buf);
}

double Gbps(const RestoreRun& r) { return r.gbps(); }
double FirstLayerMs(const RestoreRun& r) { return r.first_layer_ms; }
double TotalMs(const RestoreRun& r) { return r.ms; }
// CPU-seconds per second over the timed interval (2.0 = both cores of this machine busy).
double CpuUtil(const RestoreRun& r) { return r.ms > 0 ? r.cpu_ms / r.ms : 0; }

void PrintTable(const RestoreArgs& a, const RestoreResults& res) {
  const RestoreRatios& q = res.ratios;
  const uint64_t seg_layers = uint64_t{a.turns} * a.layers;
  std::printf(
      "restore: %lu blocks of %s = %.2f GiB, %u turns (segments), engine %s, %u "
      "workers, window %lu MiB, destination pages %s, %u reps (medians)\n",
      static_cast<unsigned long>(res.blocks), res.layout.ToString().c_str(),
      static_cast<double>(res.blocks * res.layout.block_bytes()) / kGiB, a.turns,
      res.io_engine.c_str(), a.io_workers, static_cast<unsigned long>(a.window / kMiB),
      a.dest_pages.c_str(), a.reps);
  std::printf("%-17s %9s %10s %15s %10s %6s\n", "variant", "GB/s", "total ms", "first layer ms",
              "reads", "cpu%");
  for (int v = 0; v < kRestoreVariants; ++v) {
    if (!res.ran(v)) continue;
    std::printf("%-17s %9.3f %10.1f %15.1f %10lu %6.0f\n", kRestoreVariantNames[v],
                *res.Median(v, Gbps), *res.Median(v, TotalMs), *res.Median(v, FirstLayerMs),
                static_cast<unsigned long>(*res.Reads(v)), 100 * *res.Median(v, CpuUtil));
  }
  std::printf(
      "flat / raw = %s, flat / scattered = %s, flat / raw-slots = %s, raw-slots / raw = "
      "%s (medians of per-repetition ratios; n/a: a variant did not run); segments x layers = "
      "%lu\n",
      TextOrNa(RatioMedian(q.flat_vs_raw), "%.3f").c_str(),
      TextOrNa(RatioMedian(q.flat_vs_scattered), "%.2f").c_str(),
      TextOrNa(RatioMedian(q.flat_vs_raw_slots), "%.3f").c_str(),
      TextOrNa(RatioMedian(q.raw_slots_vs_raw), "%.3f").c_str(),
      static_cast<unsigned long>(seg_layers));
  std::printf("raw / scattered = %s (the ceiling of flat / scattered on this disk)\n",
              TextOrNa(RatioMedian(q.raw_vs_scattered), "%.2f").c_str());
  std::printf(
      "flat / raw-window = %s (the restore path's cost at its %lu MiB read budget), raw-window / "
      "raw = %s (the budget's cost on this disk)\n",
      TextOrNa(RatioMedian(q.flat_vs_raw_window), "%.3f").c_str(),
      static_cast<unsigned long>(a.window / kMiB),
      TextOrNa(RatioMedian(q.raw_window_vs_raw), "%.3f").c_str());
  const std::string in_place = res.ran(kFlatDirect)
                                   ? std::to_string(*res.ReadsInPlace(kFlatDirect)) + " of " +
                                         std::to_string(*res.Reads(kFlatDirect))
                                   : "n/a";
  std::printf(
      "flat-direct / raw = %s (the same restore into a destination laid out like the file: %s "
      "of its reads in place), flat-direct / scattered = %s, flat / flat-direct = %s (the cost of "
      "scattering into block-contiguous slots)\n",
      TextOrNa(RatioMedian(q.flat_direct_vs_raw), "%.3f").c_str(), in_place.c_str(),
      TextOrNa(RatioMedian(q.flat_direct_vs_scattered), "%.2f").c_str(),
      TextOrNa(RatioMedian(q.flat_vs_flat_direct), "%.3f").c_str());
  std::printf("bytes verified %lu, mismatches %lu (raw-slots layout mismatches %lu)\n",
              static_cast<unsigned long>(res.verified), static_cast<unsigned long>(res.mismatches),
              static_cast<unsigned long>(res.raw_slots_mismatches));
}

nlohmann::json ReportJson(const RestoreArgs& a, const RestoreResults& res) {
  const RestoreRatios& q = res.ratios;
  auto med = [&](int v, double (*f)(const RestoreRun&)) { return JsonOrNull(res.Median(v, f)); };
  auto ratio = [](const std::vector<double>& v) { return JsonOrNull(RatioMedian(v)); };
  auto reads = [&](int v) { return JsonOrNull(res.Reads(v)); };
  return {{"bench", "restore"},
          {"blocks", res.blocks},
          {"block_bytes", res.layout.block_bytes()},
          {"raw_seq_gbps", med(kRawSeq, Gbps)},
          {"flat_gbps", med(kFlat, Gbps)},
          {"scattered_gbps", med(kScattered, Gbps)},
          {"scattered_object_gbps", med(kScatteredObject, Gbps)},
          {"flat_vs_raw", ratio(q.flat_vs_raw)},
          {"flat_vs_scattered", ratio(q.flat_vs_scattered)},
          {"raw_vs_scattered", ratio(q.raw_vs_scattered)},
          {"raw_slots_gbps", med(kRawSlots, Gbps)},
          {"flat_vs_raw_slots", ratio(q.flat_vs_raw_slots)},
          {"raw_slots_vs_raw", ratio(q.raw_slots_vs_raw)},
          {"raw_window_gbps", med(kRawWindow, Gbps)},
          {"flat_vs_raw_window", ratio(q.flat_vs_raw_window)},
          {"raw_window_vs_raw", ratio(q.raw_window_vs_raw)},
          {"flat_direct_gbps", med(kFlatDirect, Gbps)},
          {"flat_direct_vs_raw", ratio(q.flat_direct_vs_raw)},
          {"flat_vs_flat_direct", ratio(q.flat_vs_flat_direct)},
          {"flat_direct_vs_scattered", ratio(q.flat_direct_vs_scattered)},
          {"reads_issued_flat_direct", reads(kFlatDirect)},
          {"reads_in_place_flat", JsonOrNull(res.ReadsInPlace(kFlat))},
          {"reads_in_place_flat_direct", JsonOrNull(res.ReadsInPlace(kFlatDirect))},
          {"first_layer_ms_flat_direct", med(kFlatDirect, FirstLayerMs)},
          {"window_bytes", a.window},
          {"reads_issued_raw", reads(kRawSeq)},
          {"reads_issued_flat", reads(kFlat)},
          {"reads_issued_scattered", reads(kScattered)},
          {"reads_issued_scattered_object", reads(kScatteredObject)},
          {"segments_x_layers", uint64_t{a.turns} * a.layers},
          {"first_layer_ms_flat", med(kFlat, FirstLayerMs)},
          {"raw_seq_cpu_util", med(kRawSeq, CpuUtil)},
          {"flat_cpu_util", med(kFlat, CpuUtil)},
          {"first_layer_ms_scattered", med(kScattered, FirstLayerMs)},
          {"first_layer_ms_scattered_object", med(kScatteredObject, FirstLayerMs)},
          {"bytes_verified", res.verified},
          {"mismatches", res.mismatches},
          {"raw_slots_mismatches", res.raw_slots_mismatches},
          {"verify_checksums", !a.no_verify},
          {"dest_pages", a.dest_pages}};
}

}  // namespace

void PrintRestoreReport(const RestoreArgs& a, const RestoreResults& res) {
  PrintTable(a, res);
  if (a.json) std::printf("%s\n", ReportJson(a, res).dump().c_str());
}

}  // namespace flatcake::cli
