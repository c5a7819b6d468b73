// `flatcake serve`: the node daemon (docs/serve.md). Opens the store with the store flags, serves
// it on a Unix socket to the engine processes of the node (serve/daemon.h) and runs in the
// foreground, logging to stderr, until SIGTERM or SIGINT, which shut it down cleanly (exit 0).
// A second daemon on the same socket or pool is refused (exit 1, naming the holder).
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/store_flags.h"
#include "serve/daemon.h"
#include "serve/serve_log.h"

namespace flatcake::cli {
namespace {

struct ServeArgs {
  StoreOptions store;
  std::string socket;
  std::string config;
  std::string metrics_addr;
  std::string log_level = "info";
  std::string socket_mode = "0600";
  uint32_t max_clients = 256;
  std::vector<uint32_t> allow_uids;
  std::vector<uint32_t> allow_gids;
};

int RunServe(const ServeArgs& a) {
  // TODO(merge): --config and --metrics-addr are served by the configuration (serve_config.h)
  // and metrics (metrics.h) code written on another branch; until it is merged they are refused.
  if (!a.config.empty()) {
    std::fprintf(stderr, "flatcake serve: --config is not supported yet in this build\n");
    return 2;
  }
  if (!a.metrics_addr.empty()) {
    std::fprintf(stderr, "flatcake serve: --metrics-addr is not supported yet in this build\n");
    return 2;
  }
  auto level = serve::ParseLogLevel(a.log_level);
  if (!level.ok()) return ReportArgError("serve", level.status());
  if (int rc = ReportArgError("serve", ValidateStoreOptions(a.store))) return rc;

  // Blocked before any thread starts, so that every thread inherits the mask and the sigwait
  // below is the one taker of these signals.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a stderr pipe closed under us must not kill the daemon
  serve::SetLogLevel(*level);

  char* end = nullptr;
  const unsigned long mode = std::strtoul(a.socket_mode.c_str(), &end, 8);
  if (a.socket_mode.empty() || *end != '\0' || mode > 0777) {
    std::fprintf(stderr, "flatcake serve: --socket-mode %s is no octal file mode\n",
                 a.socket_mode.c_str());
    return 2;
  }
  serve::DaemonOptions o;
  o.store = a.store;
  o.socket_path = a.socket;
  o.socket_mode = static_cast<mode_t>(mode);
  o.max_clients = a.max_clients;
  if (!a.allow_uids.empty() || !a.allow_gids.empty()) {
    o.allow.uids.assign(a.allow_uids.begin(), a.allow_uids.end());
    o.allow.gids.assign(a.allow_gids.begin(), a.allow_gids.end());
  }
  auto daemon = serve::Daemon::Start(std::move(o));
  if (!daemon.ok()) return ReportOpenError("serve", daemon.status());
  int sig = 0;
  while (sigwait(&stop, &sig) != 0) {
  }
  serve::Logf(serve::LogLevel::kInfo, "%s received", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  (*daemon)->Shutdown();
  return 0;
}

}  // namespace

void RegisterServeCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Run the node daemon: one store for every engine process of the node, on a Unix socket "
      "(docs/serve.md)");
  cmd->add_option("--socket", args->socket, "The daemon's Unix socket path")->required();
  cmd->add_option("--config", args->config, "TOML configuration file (not supported yet)");
  cmd->add_option("--metrics-addr", args->metrics_addr,
                  "HOST:PORT for Prometheus metrics (not supported yet)");
  cmd->add_option("--log-level", args->log_level, "error, warning, info or debug")
      ->default_str("info");
  cmd->add_option("--socket-mode", args->socket_mode,
                  "The socket's file mode, octal (who may connect at all; the allow-list decides)")
      ->default_str("0600");
  cmd->add_option("--max-clients", args->max_clients, "Connections served at once")
      ->default_str("256")
      ->check(CLI::Range(1u, 65536u));
  cmd->add_option("--allow-uid", args->allow_uids,
                  "A uid whose processes may connect (repeatable; default: the daemon's own uid)");
  cmd->add_option("--allow-gid", args->allow_gids,
                  "A gid whose processes may connect (repeatable)");
  AddStoreFlags(cmd, &args->store);
  cmd->callback([args, exit_code] { *exit_code = RunServe(*args); });
}

}  // namespace flatcake::cli
