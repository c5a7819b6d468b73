// `flatcake torture --faults N [--seed S] [--json]`: the fault campaign (eval/torture.h). Prints
// the seed first, so that a run that fails can be replayed, then the operations, the faults by
// kind, wrong bytes and unexpected errors (the first few described). Exit 0 when no wrong byte
// was served and nothing unexpected happened, 1 otherwise, 2 for a command-line error.
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>

#include "cli/commands.h"
#include "cli/store_flags.h"
#include "eval/torture.h"

namespace flatcake::cli {
namespace {

struct TortureArgs {
  eval::TortureOptions options;
  std::optional<uint64_t> seed;
  bool json = false;
  bool quiet = false;
};

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

void PrintJson(const eval::TortureReport& r) {
  nlohmann::ordered_json by_kind = nlohmann::ordered_json::object();
  for (size_t k = 0; k < kNumFaultKinds; ++k) {
    by_kind[std::string(FaultKindName(static_cast<FaultKind>(k)))] = r.faults_by_kind[k];
  }
  nlohmann::ordered_json ops = nlohmann::ordered_json::object();
  for (size_t k = 0; k < eval::kNumTortureOps; ++k) {
    ops[std::string(eval::TortureOpName(static_cast<eval::TortureOp>(k)))] = r.ops_by_kind[k];
  }
  const nlohmann::ordered_json j = {{"seed", r.seed},
                                    {"ops", r.ops},
                                    {"ops_by_kind", ops},
                                    {"faults_injected", r.faults_injected},
                                    {"faults_by_kind", by_kind},
                                    {"wrong_bytes", r.wrong_bytes},
                                    {"unexpected_errors", r.unexpected_errors},
                                    {"failures", r.failures},
                                    {"failed_puts", r.failed_puts},
                                    {"failed_restores", r.failed_restores},
                                    {"blocks_verified", r.blocks_verified},
                                    {"torn_blocks_missed", r.torn_blocks_missed},
                                    {"blocks_reclaimed", r.blocks_reclaimed},
                                    {"blocks_recovered", r.blocks_recovered},
                                    {"digest", Hex(r.digest)},
                                    {"seconds", r.seconds}};
  std::printf("%s\n", j.dump().c_str());
}

void PrintText(const eval::TortureReport& r) {
  std::printf("operations        : %" PRIu64, r.ops);
  for (size_t k = 0; k < eval::kNumTortureOps; ++k) {
    std::printf("%s %s %" PRIu64, k == 0 ? " (" : ",",
                std::string(eval::TortureOpName(static_cast<eval::TortureOp>(k))).c_str(),
                r.ops_by_kind[k]);
  }
  std::printf(")\nfaults injected   : %" PRIu64 "\n", r.faults_injected);
  for (size_t k = 0; k < kNumFaultKinds; ++k) {
    std::printf("  %-16s: %" PRIu64 "\n",
                std::string(FaultKindName(static_cast<FaultKind>(k))).c_str(), r.faults_by_kind[k]);
  }
  std::printf("failed puts       : %" PRIu64 "\nfailed restores   : %" PRIu64 "\n", r.failed_puts,
              r.failed_restores);
  std::printf("blocks verified   : %" PRIu64 " (torn blocks missed %" PRIu64 ", reclaimed %" PRIu64
              ", recovered after reopens %" PRIu64 ")\n",
              r.blocks_verified, r.torn_blocks_missed, r.blocks_reclaimed, r.blocks_recovered);
  std::printf("wrong bytes       : %" PRIu64 "\nunexpected errors : %" PRIu64 "\n", r.wrong_bytes,
              r.unexpected_errors);
  for (const std::string& f : r.failures) std::printf("  %s\n", f.c_str());
  std::printf("digest            : %s\ntime              : %.1f s\nresult            : %s\n",
              Hex(r.digest).c_str(), r.seconds,
              r.wrong_bytes == 0 && r.unexpected_errors == 0 ? "PASS" : "FAIL");
}

int RunTortureCommand(TortureArgs& a) {
  a.options.seed = a.seed ? *a.seed : std::random_device{}() * uint64_t{0x100000001};
  // The seed before anything else: a run that crashes can still be replayed.
  std::fprintf(stderr,
               "flatcake torture: seed %" PRIu64 " (replay: flatcake torture --faults %" PRIu64
               " --seed %" PRIu64 ")\n",
               a.options.seed, a.options.faults, a.options.seed);
  if (!a.quiet) {
    a.options.progress = [](uint64_t ops, uint64_t faults) {
      std::fprintf(stderr, "  %" PRIu64 " operations, %" PRIu64 " faults\n", ops, faults);
    };
  }
  auto report = eval::RunTorture(a.options);
  if (!report.ok()) {
    return report.status().IsInvalidArgument() ? ReportArgError("torture", report.status())
                                               : ReportStatus("torture", report.status());
  }
  if (a.json) {
    PrintJson(*report);
  } else {
    PrintText(*report);
  }
  return report->wrong_bytes == 0 && report->unexpected_errors == 0 ? 0 : 1;
}

}  // namespace

void RegisterTortureCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<TortureArgs>();
  CLI::App* cmd = app.add_subcommand(
      "torture", "Fault campaign: random operations against a store whose I/O fails at random");
  cmd->footer(
      "Runs put, lookup, restore, reclaim, clear and close/reopen against a store over a small "
      "durable pool (4 MiB SSD, 2 MiB DRAM) in a fresh temporary directory, while the fault-"
      "injecting I/O engine fails reads and writes with EIO and ENOSPC, cuts them short, tears "
      "writes (reported, or acknowledged as if they had succeeded) and delays completions, at "
      "rates that change every 48 operations. Every served byte and every status is checked "
      "against a model of what the store must hold (docs/reliability.md). The seed is printed "
      "first; the same seed replays the same operations and faults (the digest shows it). Exit "
      "status: 0 no wrong byte and no unexpected error, 1 otherwise, 2 a command-line error.");
  cmd->add_option("--faults", args->options.faults, "Run until this many faults have been injected")
      ->required()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  cmd->add_option("--seed", args->seed, "Seed of the operations and faults (default: random)");
  cmd->add_option("--dir", args->options.dir,
                  "Directory to create the temporary pool directory in (default: $TMPDIR or "
                  "/tmp)")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--json", args->json,
                "Print one JSON object (ops, faults_injected, faults_by_kind, wrong_bytes, "
                "unexpected_errors, seed, and more) instead of the text report");
  cmd->add_flag("--quiet", args->quiet, "No progress lines on stderr (the seed line stays)");
  cmd->callback([args, exit_code] { *exit_code = RunTortureCommand(*args); });
}

}  // namespace flatcake::cli
