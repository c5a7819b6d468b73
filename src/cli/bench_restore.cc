// Placeholder until this subcommand lands; registers nothing.
#include "cli/commands.h"

namespace flatcake::cli {
void RegisterRestoreBench(CLI::App& /*app*/, int* /*exit_code*/) {}
}  // namespace flatcake::cli
