// `flatcake fsck DIR...`: checks a durable SSD pool offline (store/pool_check.h), prints what a
// restart would find and every damage, and with --repair rewrites the journal without the
// damaged records. Exit 0: clean (or every damage repaired); 1: damage found (or left); 2: a
// command-line error or a pool that cannot be checked (not a pool, in use).
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/report_format.h"
#include "cli/store_flags.h"
#include "store/pool_check.h"

namespace flatcake::cli {
namespace {

struct FsckArgs {
  PoolCheckOptions options;
  bool json = false;
};

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

uint64_t Repairable(const PoolCheckReport& r) {
  uint64_t n = 0;
  for (const PoolDamage& d : r.damaged) n += d.repairable;
  return n;
}

void PrintJson(const PoolCheckReport& r) {
  nlohmann::ordered_json damaged = nlohmann::ordered_json::array();
  for (const PoolDamage& d : r.damaged) {
    nlohmann::ordered_json j = {{"what", d.what},
                                {"file", d.file},
                                {"offset", d.offset},
                                {"detail", d.detail},
                                {"repairable", d.repairable}};
    if (d.key) j["key"] = KeyToHex(*d.key);
    damaged.push_back(std::move(j));
  }
  const nlohmann::ordered_json j = {
      {"clean", r.clean()},
      {"store_id", Hex(r.store_id)},
      {"dirs", r.dirs},
      {"files", r.files},
      {"intact_superblocks", r.intact_superblocks},
      {"file_bytes", r.file_bytes},
      {"journal", r.journal_path},
      {"journal_bytes", r.journal_bytes},
      {"records", r.records},
      {"skipped_records", r.skipped_records},
      {"live_scopes", r.live_scopes},
      {"live_segments", r.live_segments},
      {"live_blocks", r.live_blocks},
      {"live_bytes", r.live_bytes},
      {"extent_bytes", r.extent_bytes},
      {"duplicate_keys", r.duplicate_keys},
      {"overlaps", r.overlaps},
      {"deep", r.deep},
      {"blocks_checked", r.blocks_checked},
      {"bad_blocks", r.bad_blocks},
      {"damaged", damaged},
      {"notes", r.notes},
      {"repaired", r.repaired},
      {"dropped", r.dropped},
      {"not_repaired", r.not_repaired.empty() ? nlohmann::ordered_json(nullptr)
                                              : nlohmann::ordered_json(r.not_repaired)}};
  // Session names are the caller's bytes: replace what is not UTF-8 rather than fail.
  std::printf("%s\n",
              j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
}

void PrintText(const PoolCheckReport& r) {
  std::printf("flatcake fsck: pool %s in %zu director%s: %u files of %s\n", Hex(r.store_id).c_str(),
              r.dirs.size(), r.dirs.size() == 1 ? "y" : "ies", r.files,
              FormatBytes(r.file_bytes).c_str());
  std::printf("  superblocks : %u of %u intact\n", r.intact_superblocks, r.files);
  if (!r.journal_path.empty()) {
    std::printf(
        "  journal     : %s, %s, %" PRIu64 " records intact, %" PRIu64 " skipped by recovery\n",
        r.journal_path.c_str(), FormatBytes(r.journal_bytes).c_str(), r.records, r.skipped_records);
    std::printf("  live        : %" PRIu64 " scopes, %" PRIu64 " segments, %" PRIu64
                " blocks (%s of payload in %s of extents)\n",
                r.live_scopes, r.live_segments, r.live_blocks, FormatBytes(r.live_bytes).c_str(),
                FormatBytes(r.extent_bytes).c_str());
    std::printf("  extents     : %" PRIu64 " overlapping\n", r.overlaps);
    if (r.deep) {
      std::printf("  data        : %" PRIu64 " blocks checked, %" PRIu64 " bad\n", r.blocks_checked,
                  r.bad_blocks);
    } else {
      std::printf("  data        : not read (--deep verifies every live block's checksum)\n");
    }
  }
  for (const std::string& n : r.notes) std::printf("  note        : %s\n", n.c_str());
  if (!r.clean()) {
    std::printf("  damage      : %zu found, %" PRIu64 " repairable\n", r.damaged.size(),
                Repairable(r));
    for (const PoolDamage& d : r.damaged) {
      std::printf("    %-10s %s @ %" PRIu64 ": %s\n", d.what.c_str(), d.file.c_str(), d.offset,
                  d.detail.c_str());
    }
  }
  if (r.repaired) {
    std::printf("  repair      : journal rewritten without %zu records:\n", r.dropped.size());
    for (const std::string& d : r.dropped) std::printf("    dropped %s\n", d.c_str());
  } else if (!r.not_repaired.empty()) {
    std::printf("  repair      : not done: %s\n", r.not_repaired.c_str());
  }
  if (r.clean()) {
    std::printf("  result      : clean%s\n", r.deep ? "" : " (data not read)");
  } else if (r.repaired) {
    std::printf("  result      : repaired\n");
  } else {
    std::printf("  result      : DAMAGED%s\n",
                Repairable(r) == r.damaged.size() && r.not_repaired.empty()
                    ? " (--repair drops the damaged records)"
                    : "");
  }
}

int RunFsck(FsckArgs& a) {
  auto report = CheckPool(a.options);
  if (!report.ok()) {
    const Status& st = report.status();
    const bool cannot_check = st.IsInvalidArgument() || st.code() == StatusCode::kBusy;
    return cannot_check ? ReportArgError("fsck", st) : ReportStatus("fsck", st);
  }
  if (a.json) {
    PrintJson(*report);
  } else {
    PrintText(*report);
  }
  if (report->clean()) return 0;
  return report->repaired && report->not_repaired.empty() ? 0 : 1;
}

}  // namespace

void RegisterFsckCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<FsckArgs>();
  CLI::App* cmd = app.add_subcommand("fsck",
                                     "Check a durable SSD pool offline, without opening a store "
                                     "(superblocks, journal, extents; --deep: block checksums)");
  cmd->footer(
      "Checks the superblocks, the journal's records, the extents of the segments a restart "
      "would serve and, with --deep, every live block's checksum; docs/format.md has the format "
      "and the rules. Exit status: 0 clean (with --repair: every damage repaired), 1 damage "
      "found (or left), 2 a command-line error or a pool that cannot be checked (no pool files, "
      "in use by a store).");
  cmd->add_option("dirs", args->options.dirs,
                  "The pool's SSD directories (its ssd_dirs), in the order the store lists them; "
                  "the journal is in the first")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--deep", args->options.deep,
                "Also read every live block and verify it against the checksum in its commit "
                "record (reads the whole live payload)");
  cmd->add_flag("--repair", args->options.repair,
                "Rewrite the journal (atomically) without the damaged records and, with --deep, "
                "without the commit records of segments holding bad blocks; their blocks are "
                "gone after it. Damage outside the journal is not repairable (wipe discards the "
                "pool)");
  cmd->add_flag("--json", args->json, "Print one JSON object instead of the text report");
  cmd->callback([args, exit_code] { *exit_code = RunFsck(*args); });
}

}  // namespace flatcake::cli
