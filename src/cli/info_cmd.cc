// `flatcake info`: opens a store with the given options and prints its configuration, media and
// capacities.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/report_format.h"
#include "cli/store_flags.h"
#include "core/build_info.h"
#include "flatcake/store.h"
#include "gpu/device.h"

namespace flatcake::cli {
namespace {

struct InfoArgs {
  StoreOptions options;
  std::string gpu_mode = "auto";
  bool json = false;
};

nlohmann::json BuildJson(const BuildInfo& b) {
  return {{"version", b.version},           {"io_uring", b.io_uring},
          {"cuda_kernels", b.cuda_kernels}, {"serve", b.serve},
          {"cluster", b.cluster},           {"metrics", b.metrics},
          {"gpu_kernels", b.gpu_kernels}};
}

// "io_uring, daemon, ...; without CUDA kernels" style: what the build has and lacks.
std::string BuildParts(const BuildInfo& b) {
  const std::pair<bool, const char*> parts[] = {{b.io_uring, "io_uring"},
                                                {b.cuda_kernels, "CUDA kernels"},
                                                {b.serve, "daemon"},
                                                {b.cluster, "cluster (UCX)"},
                                                {b.metrics, "Prometheus endpoint"}};
  std::string has, lacks;
  for (const auto& [built, name] : parts) {
    std::string& list = built ? has : lacks;
    list += list.empty() ? name : std::string(", ") + name;
  }
  if (has.empty()) return "without " + lacks;
  return lacks.empty() ? has : has + "; without " + lacks;
}

void PrintJson(const StoreInfo& info, const StoreStats& st, const gpu::GpuProbe& gpu) {
  std::printf(
      "{\"dram_capacity_bytes\": %lu, \"ssd_capacity_bytes\": %lu, \"ssd_files\": %u, "
      "\"ssd_durable\": %s, \"journal_path\": \"%s\", \"sync\": \"%s\", "
      "\"recovered\": %s, \"recovered_scopes\": %lu, \"recovered_segments\": %lu, "
      "\"recovered_blocks\": %lu, \"recovered_bytes\": %lu, \"skipped_records\": %lu, "
      "\"recovery_read_bytes\": %lu, \"recovery_s\": %.6f, \"journal_bytes\": %lu, "
      "\"io_engine\": \"%s\", \"dram_page_mode\": \"%s\", \"dram_backing\": \"%s\", "
      "\"gpu_mode\": \"%s\", \"gpu_reason\": %s, \"gpu_device\": %s, \"build\": %s}\n",
      static_cast<unsigned long>(st.dram.capacity_bytes),
      static_cast<unsigned long>(st.ssd.capacity_bytes), info.ssd_files,
      info.ssd_durable ? "true" : "false", info.journal_path.c_str(), info.sync_mode.c_str(),
      info.recovered ? "true" : "false", static_cast<unsigned long>(info.recovered_scopes),
      static_cast<unsigned long>(info.recovered_segments),
      static_cast<unsigned long>(info.recovered_blocks),
      static_cast<unsigned long>(info.recovered_bytes),
      static_cast<unsigned long>(info.skipped_records),
      static_cast<unsigned long>(info.recovery_read_bytes), info.recovery_seconds,
      static_cast<unsigned long>(st.journal_bytes), info.io_engine.c_str(),
      info.dram_page_mode.c_str(), info.dram_backing.c_str(),
      std::string(gpu::GpuModeName(gpu.mode)).c_str(), nlohmann::json(gpu.reason).dump().c_str(),
      nlohmann::json(gpu.device).dump().c_str(), BuildJson(GetBuildInfo()).dump().c_str());
}

int RunInfo(InfoArgs& a) {
  if (int rc = ReportArgError("info", ValidateStoreOptions(a.options))) return rc;
  gpu::GpuOptions go;
  auto mode = gpu::ParseGpuMode(a.gpu_mode);
  if (int rc = ReportArgError("info", mode.status())) return rc;
  go.mode = *mode;
  auto opened = Store::Open(a.options);
  if (!opened.ok()) return ReportOpenError("info", opened.status());
  const Store& store = **opened;
  const StoreOptions& o = store.options();
  const StoreInfo info = store.GetInfo();
  const StoreStats st = store.GetStats();
  // A forced mode the machine cannot run is reported as `none`, with what is missing.
  const gpu::GpuProbe gpu = gpu::ProbeGpu(go);
  if (a.json) {
    PrintJson(info, st, gpu);
    return 0;
  }
  const BuildInfo build = GetBuildInfo();
  std::printf("FlatCake %s store, node %u\n", build.version, o.node_id);
  std::printf("build         : %s\n", BuildParts(build).c_str());
  if (build.cuda_kernels) std::printf("  GPU kernels : %s\n", build.gpu_kernels.c_str());
  std::printf("DRAM medium   : %s, pages: %s, backing: %s\n",
              st.dram.capacity_bytes ? FormatBytes(st.dram.capacity_bytes).c_str() : "disabled",
              info.dram_page_mode.c_str(), info.dram_backing.c_str());
  if (st.ssd.capacity_bytes) {
    std::printf("SSD medium    : %s in %u files of %s, %s\n",
                FormatBytes(st.ssd.capacity_bytes).c_str(), info.ssd_files,
                FormatBytes(o.ssd_file_bytes).c_str(),
                info.ssd_direct_io ? "O_DIRECT" : "buffered I/O");
    for (const std::string& d : info.ssd_dirs) std::printf("  directory   : %s\n", d.c_str());
    if (!info.ssd_note.empty()) std::printf("  note        : %s\n", info.ssd_note.c_str());
    std::printf("  writes      : %s each, %u in flight\n",
                FormatBytes(info.ssd_write_io_bytes).c_str(), info.ssd_writes_in_flight);
    std::printf("  durability  : journal %s, sync %s\n", info.journal_path.c_str(),
                info.sync_mode.c_str());
    if (info.recovered) {
      std::printf(
          "  recovered   : %lu scopes, %lu segments, %lu blocks (%s) in %.3f s, read %s; "
          "%lu records skipped\n",
          static_cast<unsigned long>(info.recovered_scopes),
          static_cast<unsigned long>(info.recovered_segments),
          static_cast<unsigned long>(info.recovered_blocks),
          FormatBytes(info.recovered_bytes).c_str(), info.recovery_seconds,
          FormatBytes(info.recovery_read_bytes).c_str(),
          static_cast<unsigned long>(info.skipped_records));
    } else {
      std::printf("  recovered   : nothing (a new pool)\n");
    }
  } else {
    std::printf("SSD medium    : disabled (no --ssd-dir)\n");
  }
  std::printf("GVA layout    : media[63:60] node[59:48] offset[47:0]; SSD >= 2^60\n");
  std::printf("index         : %lu slots (128-bit keys, lock-free)\n",
              static_cast<unsigned long>(st.index_capacity));
  std::printf("scopes        : %u slots\n", o.max_scopes);
  std::printf("placement     : tau %lu tokens, L_agent %lu tokens, %u tokens/block\n",
              static_cast<unsigned long>(o.tau_tokens),
              static_cast<unsigned long>(o.l_agent_tokens), o.tokens_per_block);
  std::printf("watermarks    : high %.2f, low %.2f\n", o.high_watermark, o.low_watermark);
  std::printf("I/O engine    : %s, %u workers, queue depth %u\n", info.io_engine.c_str(),
              o.io_workers, o.io_queue_depth);
  if (!info.io_note.empty()) std::printf("  note        : %s\n", info.io_note.c_str());
  std::printf("restore       : window %s, gap %s, max I/O %s, checksums %s\n",
              FormatBytes(o.read_window_bytes).c_str(), FormatBytes(o.max_gap_bytes).c_str(),
              FormatBytes(o.max_io_bytes).c_str(),
              o.verify_checksums ? "verified" : "not verified");
  std::printf("GPU mode      : %s", std::string(gpu::GpuModeName(gpu.mode)).c_str());
  if (!gpu.device.empty()) std::printf(", %s", gpu.device.c_str());
  if (!gpu.reason.empty()) std::printf(" (%s)", gpu.reason.c_str());
  std::printf("\n");
  return 0;
}

}  // namespace

void RegisterInfoCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* cmd = app.add_subcommand("info",
                                     "Open a store and print its configuration, media "
                                     "and capacities");
  AddStoreFlags(cmd, &args->options);
  cmd->add_option("--gpu-mode", args->gpu_mode,
                  "GPU data path mode to probe: auto, gds, cufile-compat, bounce, none or fake "
                  "(auto reads FLATCAKE_GPU_MODE)")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print one JSON object instead of the text report");
  cmd->callback([args, exit_code] { *exit_code = RunInfo(*args); });
}

}  // namespace flatcake::cli
