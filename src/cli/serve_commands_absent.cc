// The daemon's commands in a build without the serve library (CMake found no protobuf, toml++ or
// UCX), and `bench daemon` and `bench cluster`: each is still listed, and says why it cannot run.
#include <cstdio>

#include "cli/commands.h"

namespace flatcake::cli {
namespace {

// `command` is how the error names it: the subcommand with its parents ("bench daemon").
void RegisterAbsent(CLI::App& app, const char* name, const char* command, const char* description,
                    int* exit_code) {
  CLI::App* cmd = app.add_subcommand(name, description);
  cmd->allow_extras();
  cmd->callback([command, exit_code] {
    std::fprintf(
        stderr,
        "flatcake %s: not built: this flatcake was built without the daemon "
        "(install libprotobuf-dev, protobuf-compiler, libtomlplusplus-dev and libucx-dev, and "
        "rebuild)\n",
        command);
    *exit_code = 1;
  });
}

}  // namespace

void RegisterServeCommand(CLI::App& app, int* exit_code) {
  RegisterAbsent(app, "serve", "serve", "Run the node daemon (not built)", exit_code);
}

void RegisterStatsCommand(CLI::App& app, int* exit_code) {
  RegisterAbsent(app, "stats", "stats", "Print a running daemon's metrics (not built)", exit_code);
}

void RegisterClusterCommand(CLI::App& app, int* exit_code) {
  RegisterAbsent(app, "cluster", "cluster", "Show a FlatCake cluster's members (not built)",
                 exit_code);
}

void RegisterSoakCommand(CLI::App& app, int* exit_code) {
  RegisterAbsent(app, "soak", "soak", "Soak a daemon with traffic, kills and a restart (not built)",
                 exit_code);
}

void RegisterDaemonBench(CLI::App& bench, int* exit_code) {
  RegisterAbsent(bench, "daemon", "bench daemon",
                 "Restore and lookup through the node daemon (not built)", exit_code);
}

void RegisterClusterBench(CLI::App& bench, int* exit_code) {
  RegisterAbsent(bench, "cluster", "bench cluster",
                 "Remote restores against UCX's own bandwidth (not built)", exit_code);
}

}  // namespace flatcake::cli
