// flatcake: command-line front end of the FlatCake KV-cache store.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "FlatCake: a flat KV-cache store for LLM serving (host DRAM and NVMe SSD as peer media)"};
  app.require_subcommand(1);
  int exit_code = 0;
  flatcake::cli::RegisterInfoCommand(app, &exit_code);
  flatcake::cli::RegisterOptionsCommand(app, &exit_code);
  flatcake::cli::RegisterTraceCommands(app, &exit_code);
  flatcake::cli::RegisterReplayCommand(app, &exit_code);
  flatcake::cli::RegisterFsckCommand(app, &exit_code);
  flatcake::cli::RegisterSimulateCommand(app, &exit_code);
  flatcake::cli::RegisterTortureCommand(app, &exit_code);
  flatcake::cli::RegisterStatsCommand(app, &exit_code);
  flatcake::cli::RegisterServeCommand(app, &exit_code);
  flatcake::cli::RegisterClusterCommand(app, &exit_code);
  flatcake::cli::RegisterSoakCommand(app, &exit_code);
  CLI::App* bench = app.add_subcommand("bench",
                                       "Benchmarks; each prints a table, --json adds one "
                                       "JSON object on the last line");
  bench->require_subcommand(1);
  flatcake::cli::RegisterRestoreBench(*bench, &exit_code);
  flatcake::cli::RegisterIndexBench(*bench, &exit_code);
  flatcake::cli::RegisterCoalesceBench(*bench, &exit_code);
  flatcake::cli::RegisterSchedBench(*bench, &exit_code);
  flatcake::cli::RegisterRoundTripBench(*bench, &exit_code);
  flatcake::cli::RegisterRecoverBench(*bench, &exit_code);
  flatcake::cli::RegisterPathsBench(*bench, &exit_code);
  flatcake::cli::RegisterGpuBench(*bench, &exit_code);
  flatcake::cli::RegisterVllmBench(*bench, &exit_code);
  flatcake::cli::RegisterDaemonBench(*bench, &exit_code);
  flatcake::cli::RegisterClusterBench(*bench, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Prints the help (exit 0) or the error; a command-line error exits 2, as the subcommands'
    // own range checks do, rather than with CLI11's per-error-kind codes.
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return exit_code;
}
