// `flatcake info`: opens a store with the given options and prints its configuration, media and
// capacities.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/store_flags.h"
#include "flatcake/store.h"

namespace flatcake::cli {
namespace {

struct InfoArgs {
  StoreOptions options;
};

std::string Bytes(uint64_t b) {
  char buf[64];
  if (b >= kGiB) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(b) / kGiB);
  } else if (b >= kMiB) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(b) / kMiB);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f KiB", static_cast<double>(b) / kKiB);
  }
  return buf;
}

int RunInfo(InfoArgs& a) {
  if (int rc = ReportArgError("info", ValidateStoreOptions(a.options))) return rc;
  auto opened = Store::Open(a.options);
  if (!opened.ok()) return ReportOpenError("info", opened.status());
  const Store& store = **opened;
  const StoreOptions& o = store.options();
  const StoreInfo info = store.GetInfo();
  const StoreStats st = store.GetStats();
  std::printf("FlatCake store, node %u\n", o.node_id);
  std::printf("DRAM medium   : %s, pages: %s\n",
              st.dram.capacity_bytes ? Bytes(st.dram.capacity_bytes).c_str() : "disabled",
              info.dram_page_mode.c_str());
  if (st.ssd.capacity_bytes) {
    std::printf("SSD medium    : %s in %u files of %s, %s\n", Bytes(st.ssd.capacity_bytes).c_str(),
                info.ssd_files, Bytes(o.ssd_file_bytes).c_str(),
                info.ssd_direct_io ? "O_DIRECT" : "buffered I/O");
    for (const std::string& d : info.ssd_dirs) std::printf("  directory   : %s\n", d.c_str());
    if (!info.ssd_note.empty()) std::printf("  note        : %s\n", info.ssd_note.c_str());
    std::printf("  writes      : %s each, %u in flight\n", Bytes(info.ssd_write_io_bytes).c_str(),
                info.ssd_writes_in_flight);
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
              Bytes(o.read_window_bytes).c_str(), Bytes(o.max_gap_bytes).c_str(),
              Bytes(o.max_io_bytes).c_str(), o.verify_checksums ? "verified" : "not verified");
  return 0;
}

}  // namespace

void RegisterInfoCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* cmd = app.add_subcommand("info",
                                     "Open a store and print its configuration, media "
                                     "and capacities");
  AddStoreFlags(cmd, &args->options);
  cmd->callback([args, exit_code] { *exit_code = RunInfo(*args); });
}

}  // namespace flatcake::cli
