#include "flatcake/options.h"

#include <string>

namespace flatcake {

Status ValidateStoreOptions(const StoreOptions& o) {
  if (o.node_id >= 4096) return Status::InvalidArgument("node_id must be below 4096");
  if (o.dram_bytes == 0 && o.ssd_dirs.empty()) {
    return Status::InvalidArgument("both media are disabled: set dram_bytes or ssd_dirs");
  }
  if (!o.ssd_dirs.empty()) {
    if (o.ssd_file_bytes == 0 || o.ssd_file_bytes % 4096 != 0) {
      return Status::InvalidArgument("ssd_file_bytes must be a positive multiple of 4096");
    }
    if (o.ssd_bytes < o.ssd_file_bytes) {
      return Status::InvalidArgument("ssd_bytes (" + std::to_string(o.ssd_bytes) +
                                     ") is smaller than one pool file (ssd_file_bytes = " +
                                     std::to_string(o.ssd_file_bytes) + ")");
    }
  }
  if (!(o.low_watermark > 0 && o.low_watermark <= o.high_watermark && o.high_watermark <= 1)) {
    return Status::InvalidArgument("watermarks must satisfy 0 < low <= high <= 1");
  }
  if (o.tokens_per_block == 0) return Status::InvalidArgument("tokens_per_block must be > 0");
  if (o.max_scopes == 0 || o.max_scopes > (1u << 30)) {
    return Status::InvalidArgument("max_scopes must be in 1..2^30");
  }
  if (o.io_workers == 0 || o.io_workers > 64) {
    return Status::InvalidArgument("io_workers must be in 1..64");
  }
  if (o.io_queue_depth == 0 || o.io_queue_depth > 4096) {
    return Status::InvalidArgument("io_queue_depth must be in 1..4096");
  }
  if (o.read_window_bytes < 4096 || o.write_staging_bytes < 4096) {
    return Status::InvalidArgument("read_window_bytes and write_staging_bytes must be >= 4096");
  }
  if (o.max_io_bytes < 4096 || o.max_io_bytes % 4096 != 0) {
    return Status::InvalidArgument("max_io_bytes must be a multiple of 4096");
  }
  return Status::OK();
}

std::string_view HugePageModeName(HugePageMode mode) {
  switch (mode) {
    case HugePageMode::kAuto: return "auto";
    case HugePageMode::kHugeTlb: return "hugetlb";
    case HugePageMode::kTransparent: return "thp";
    case HugePageMode::kNone: return "none";
  }
  return "?";
}

Result<HugePageMode> ParseHugePageMode(std::string_view text) {
  for (HugePageMode m : {HugePageMode::kAuto, HugePageMode::kHugeTlb, HugePageMode::kTransparent,
                         HugePageMode::kNone}) {
    if (HugePageModeName(m) == text) return m;
  }
  return Status::InvalidArgument("huge page mode must be auto, hugetlb, thp or none, not '" +
                                 std::string(text) + "'");
}

std::string_view DirectIoModeName(DirectIoMode mode) {
  switch (mode) {
    case DirectIoMode::kAuto: return "auto";
    case DirectIoMode::kOn: return "on";
    case DirectIoMode::kOff: return "off";
  }
  return "?";
}

Result<DirectIoMode> ParseDirectIoMode(std::string_view text) {
  for (DirectIoMode m : {DirectIoMode::kAuto, DirectIoMode::kOn, DirectIoMode::kOff}) {
    if (DirectIoModeName(m) == text) return m;
  }
  return Status::InvalidArgument("direct I/O mode must be auto, on or off, not '" +
                                 std::string(text) + "'");
}

}  // namespace flatcake
