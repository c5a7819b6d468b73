#include "cli/store_flags.h"

#include <cstdio>

namespace flatcake::cli {

void AddStoreFlags(CLI::App* app, StoreOptions* o, StoreFlagText* text) {
  const auto size = CLI::AsSizeValue(false);
  app->add_option("--node-id", o->node_id, "This node's id in the GVA NodeID field (0-4095)")
      ->capture_default_str();
  app->add_option("--dram-bytes", o->dram_bytes, "DRAM arena capacity; 0 disables DRAM")
      ->transform(size)
      ->capture_default_str();
  app->add_option("--huge-pages", text->huge_pages,
                  "DRAM page backing: auto (hugetlb if reserved, else THP, else plain), hugetlb, "
                  "thp, none")
      ->capture_default_str();
  app->add_option("--ssd-dir", o->ssd_dirs,
                  "SSD pool directory (repeat for several drives); none disables SSD");
  app->add_option("--ssd-bytes", o->ssd_bytes, "SSD pool capacity over all directories")
      ->transform(size)
      ->capture_default_str();
  app->add_option(
         "--ssd-file-bytes", o->ssd_file_bytes,
         "Size of each pre-allocated pool file (sessions share files; a segment never spans two)")
      ->transform(size)
      ->capture_default_str();
  app->add_option("--direct-io", text->direct_io,
                  "O_DIRECT for pool files: auto (buffered where refused), on, off")
      ->capture_default_str();
  app->add_option("--tau-tokens", o->tau_tokens,
                  "Placement τ: a prior reply shorter than this keeps a chat turn in DRAM")
      ->capture_default_str();
  app->add_option("--l-agent-tokens", o->l_agent_tokens,
                  "Placement L_agent: contexts at least this long go to SSD")
      ->capture_default_str();
  app->add_option("--tokens-per-block", o->tokens_per_block, "Tokens per block (page size)")
      ->capture_default_str();
  app->add_option("--high-watermark", o->high_watermark,
                  "Reclaim a medium when its usage reaches this fraction")
      ->capture_default_str();
  app->add_option("--low-watermark", o->low_watermark, "... down to this fraction")
      ->capture_default_str();
  app->add_option("--index-capacity", o->index_capacity,
                  "Level-1 index slots; 0 sizes it from the capacities")
      ->capture_default_str();
  app->add_option("--max-scopes", o->max_scopes, "Scope slots")->capture_default_str();
  app->add_option("--io-engine", o->io_engine,
                  "auto (io_uring, else preadv pool), uring, "
                  "preadv, posix")
      ->capture_default_str();
  app->add_option("--io-workers", o->io_workers, "I/O worker threads (one io_uring ring each)")
      ->capture_default_str();
  app->add_option("--io-queue-depth", o->io_queue_depth, "Queue depth per worker")
      ->capture_default_str();
  app->add_option("--read-window-bytes", o->read_window_bytes,
                  "Bounded staging window for SSD restores")
      ->transform(size)
      ->capture_default_str();
  app->add_option("--write-staging-bytes", o->write_staging_bytes,
                  "Gather buffer for SSD segment writes")
      ->transform(size)
      ->capture_default_str();
  app->add_option("--max-gap-bytes", o->max_gap_bytes,
                  "Δgap: bridge holes up to this size when coalescing reads")
      ->transform(size)
      ->capture_default_str();
  app->add_option("--max-io-bytes", o->max_io_bytes, "Split merged reads at this size")
      ->transform(size)
      ->capture_default_str();
  app->add_flag("!--no-verify", o->verify_checksums, "Skip checksum verification on reads");
}

Status FinishStoreFlags(const StoreFlagText& text, StoreOptions* o) {
  FC_ASSIGN_OR_RETURN(o->huge_pages, ParseHugePageMode(text.huge_pages));
  FC_ASSIGN_OR_RETURN(o->direct_io, ParseDirectIoMode(text.direct_io));
  return ValidateStoreOptions(*o);
}

int ReportStatus(std::string_view command, const Status& status) {
  if (status.ok()) return 0;
  std::fprintf(stderr, "flatcake %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               status.ToString().c_str());
  return 1;
}

int ReportArgError(std::string_view command, const Status& status) {
  return ReportStatus(command, status) == 0 ? 0 : 2;
}

int ReportOpenError(std::string_view command, const Status& status) {
  return status.code() == StatusCode::kInvalidArgument ? ReportArgError(command, status)
                                                       : ReportStatus(command, status);
}

}  // namespace flatcake::cli
