// Placeholder until the replay lands; registers nothing.
#include "cli/commands.h"

namespace flatcake::cli {
void RegisterReplayCommand(CLI::App& /*app*/, int* /*exit_code*/) {}
}  // namespace flatcake::cli
