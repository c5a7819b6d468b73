// `flatcake serve` in a build without the daemon (protobuf was not found): says so.
#include <cstdio>
#include <memory>

#include "cli/commands.h"

namespace flatcake::cli {

void RegisterServeCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("serve", "Run the node daemon (not in this build)");
  cmd->allow_extras();
  cmd->callback([exit_code] {
    std::fprintf(stderr,
                 "flatcake serve: this build has no daemon (install libprotobuf-dev and "
                 "protobuf-compiler, and build again)\n");
    *exit_code = 1;
  });
}

}  // namespace flatcake::cli
