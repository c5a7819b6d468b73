// `flatcake bench restore`, shared between its two files: bench_restore.cc runs the variants,
// bench_restore_report.cc prints what they measured (a table, and JSON with --json). See
// bench_restore.cc for what each variant is.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flatcake/layout.h"
#include "flatcake/options.h"

namespace flatcake::cli {

struct RestoreArgs {
  uint32_t layers = 32;
  uint32_t planes = 2;
  uint64_t slice_bytes = 16 * kKiB;
  uint64_t bytes = 2 * kGiB;
  uint32_t turns = 16;
  uint32_t other_sessions = 3;
  uint32_t reps = 3;
  std::string dir;
  IoEngineKind io_engine = IoEngineKind::kAuto;
  uint32_t io_workers = 2;
  uint32_t queue_depth = 64;
  uint64_t window = 128 * kMiB;
  uint64_t max_io = 4 * kMiB;
  bool json = false;
  bool no_verify = false;
  std::string dest_pages = "thp";
  std::string variants = "raw-seq,flat,scattered,scattered-object,raw-slots,raw-window,flat-direct";
};

// The variants, by index in the order of --variants' default.
enum RestoreVariant : int {
  kRawSeq,
  kFlat,
  kScattered,
  kScatteredObject,
  kRawSlots,
  kRawWindow,
  kFlatDirect,
  kRestoreVariants
};
inline constexpr const char* kRestoreVariantNames[kRestoreVariants] = {
    "raw-seq", "flat", "scattered", "scattered-object", "raw-slots", "raw-window", "flat-direct"};

// One timed restore of one variant.
struct RestoreRun {
  double ms = 0;
  double cpu_ms = 0;  // process CPU time over the same interval
  double first_layer_ms = 0;
  uint64_t reads = 0;
  uint64_t reads_in_place = 0;  // store restores: reads that landed in the destination, not staged
  uint64_t bytes = 0;           // bytes delivered
  double gbps() const { return ms > 0 ? bytes / (ms * 1e6) : 0; }
};

// Ratios of GB/s between variants, one per repetition in which both ran.
struct RestoreRatios {
  std::vector<double> flat_vs_raw, flat_vs_scattered, flat_vs_raw_slots, raw_slots_vs_raw,
      flat_vs_raw_window, raw_window_vs_raw, flat_direct_vs_raw, flat_vs_flat_direct,
      flat_direct_vs_scattered;
  // raw / scattered bounds flat / scattered from above: flat reads the same bytes as raw and
  // cannot beat the disk's sequential limit, so this is the best flat / scattered this disk allows.
  std::vector<double> raw_vs_scattered;

  // Adds the ratios of one repetition's runs `r`; ran[v]: variant v ran in it.
  void Add(const RestoreRun (&r)[kRestoreVariants], const bool (&ran)[kRestoreVariants]);
};

// What a bench restore measured, for the report.
struct RestoreResults {
  KvLayout layout;
  uint64_t blocks = 0;
  std::string io_engine;  // the engine the store chose
  std::vector<RestoreRun> runs[kRestoreVariants];
  RestoreRatios ratios;
  uint64_t verified = 0, mismatches = 0, raw_slots_mismatches = 0;

  bool ran(int v) const { return !runs[v].empty(); }
  // Median over the repetitions of f(run) for variant v; nullopt when it did not run.
  std::optional<double> Median(int v, double (*f)(const RestoreRun&)) const;
  // Reads (and reads landed in place) of variant v's first run; nullopt when it did not run.
  std::optional<uint64_t> Reads(int v) const;
  std::optional<uint64_t> ReadsInPlace(int v) const;
};

// Prints the table and, with a.json, one JSON object on the last line.
void PrintRestoreReport(const RestoreArgs& a, const RestoreResults& res);

}  // namespace flatcake::cli
