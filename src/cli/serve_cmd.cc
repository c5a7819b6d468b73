// `flatcake serve`: the node daemon (docs/serve.md). Takes its configuration from a TOML file
// (--config, serve/serve_config.h) with the given flags over it, serves the store on a Unix
// socket to the engine processes of the node (serve/daemon.h), optionally with a Prometheus
// endpoint (--metrics-addr, serve/metrics.h), and runs in the foreground, logging to stderr,
// until SIGTERM or SIGINT, which shut it down cleanly (exit 0). Started by systemd with
// Type=notify, it says READY=1 once clients can connect (serve/service_notify.h). A second
// daemon on the same socket or pool is refused (exit 1, naming the holder). `--check-config
// FILE` only checks the configuration serve would run with and exits: 0 with a summary, 2
// naming what is wrong.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/store_flags.h"
#include "cluster/cluster_node.h"
#include "serve/daemon.h"
#include "serve/metrics.h"
#include "serve/metrics_observer.h"
#include "serve/serve_config.h"
#include "serve/serve_log.h"
#include "serve/service_notify.h"

namespace flatcake::cli {
namespace {

// What the command line gave: the daemon's flags as they were typed, the store's bound to
// overrides.store. Each replaces the file's value only when given (ServeOverrides).
struct ServeArgs {
  CLI::App* cmd = nullptr;
  std::string config;
  bool print_config = false;
  std::string check_config;  // --check-config FILE: the file to check, read as --config's
  serve::ServeOverrides overrides;
  std::optional<std::string> socket_mode;
  std::optional<std::string> log_level;
  std::vector<uint32_t> allow_uids;
  std::vector<uint32_t> allow_gids;
};

// The file's configuration (or the defaults) with the given flags over it, checked as a whole.
// A Status names what is wrong; the caller's exit status is 2 for any of it.
Result<serve::ServeConfig> MergedConfig(ServeArgs& a) {
  serve::ServeConfig config;
  if (!a.config.empty()) {
    FC_ASSIGN_OR_RETURN(config, serve::LoadServeConfig(a.config));
  }
  serve::ServeOverrides& o = a.overrides;
  if (a.socket_mode) {
    const Result<mode_t> mode = serve::ParseFileMode(*a.socket_mode);
    if (!mode.ok()) return mode.status().WithContext("--socket-mode");
    o.socket_mode = *mode;
  }
  if (a.log_level) {
    const Result<serve::LogLevel> level = serve::ParseLogLevel(*a.log_level);
    if (!level.ok()) return level.status().WithContext("--log-level");
    o.log_level = *level;
  }
  if (!a.allow_uids.empty() || !a.allow_gids.empty()) {
    serve::PeerAllowList allow;
    allow.uids.assign(a.allow_uids.begin(), a.allow_uids.end());
    allow.gids.assign(a.allow_gids.begin(), a.allow_gids.end());
    o.allow = std::move(allow);
  }
  o.store_given = GivenStoreFlags(*a.cmd);
  FC_RETURN_IF_ERROR(serve::ApplyOverrides(o, &config));
  FC_RETURN_IF_ERROR(serve::ValidateServeConfig(config));
  return config;
}

serve::DaemonOptions DaemonOptionsOf(const serve::ServeConfig& c) {
  serve::DaemonOptions o;
  o.store = c.store;
  // Clients open the pool files by path: admitting anyone but this uid needs the group's access.
  const bool others =
      !c.allow.gids.empty() || std::any_of(c.allow.uids.begin(), c.allow.uids.end(),
                                           [](uid_t u) { return u != ::geteuid(); });
  if (others) o.store.group_access = true;
  o.socket_path = c.socket_path;
  o.socket_mode = c.socket_mode;
  o.allow = c.allow;
  o.max_clients = c.max_clients;
  o.tenant_quotas = c.tenants;
  o.default_quota = c.default_quota;
  return o;
}

// Where a node keeps the NodeID it had, so that it rejoins under it: next to its pool (the first
// SSD directory); none without one.
std::string NodeIdFile(const serve::ServeConfig& c) {
  return c.store.ssd_dirs.empty() ? std::string() : c.store.ssd_dirs.front() + "/cluster-node-id";
}

int RunServe(ServeArgs& a) {
  if (a.print_config) {
    std::fputs(serve::RenderServeConfigToml().c_str(), stdout);
    return 0;
  }
  const bool checking = !a.check_config.empty();
  if (checking) a.config = a.check_config;
  Result<serve::ServeConfig> config = MergedConfig(a);
  if (!config.ok()) {
    // A config file that is not there or cannot be read is a failure to serve, not a usage
    // error; to the check it is one more reason the configuration cannot be used (exit 2).
    const StatusCode code = config.status().code();
    if (!checking && (code == StatusCode::kNotFound || code == StatusCode::kIOError)) {
      return ReportStatus("serve", config.status());
    }
    return ReportArgError("serve", config.status());
  }
  if (checking) {
    // Nothing past MergedConfig, which reads the one file and touches nothing else: the socket,
    // its lock, the pool, the arena and etcd are serve's to check when it starts.
    std::printf("config ok: %s\n", serve::DescribeServeConfig(*config).c_str());
    return 0;
  }

  // Blocked before any thread starts, so that every thread inherits the mask and the sigwait
  // below is the one taker of these signals.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a stderr pipe closed under us must not kill the daemon
  serve::SetLogLevel(config->log_level);

  // The metrics and their observer outlive the daemon, whose threads call the observer.
  std::unique_ptr<serve::DaemonMetrics> metrics;
  std::unique_ptr<serve::MetricsObserver> observer;
  serve::DaemonOptions options = DaemonOptionsOf(*config);
  if (!config->metrics_addr.empty()) {
    auto created = serve::DaemonMetrics::Create(config->metrics_addr);
    if (!created.ok()) return ReportStatus("serve", created.status().WithContext("metrics_addr"));
    metrics = std::move(*created);
    observer = std::make_unique<serve::MetricsObserver>(metrics.get());
    options.observer = observer.get();
  }
  // A cluster member's UCX worker exists before the daemon starts, so that the daemon answers
  // ClusterView from its first client on (the members once it has joined). It outlives the
  // daemon, which calls it.
  std::unique_ptr<cluster::ClusterNode> node;
  if (!config->etcd.empty()) {
    auto created = cluster::ClusterNode::Create();
    if (!created.ok()) {
      return ReportStatus("serve", created.status().WithContext("cluster data path"));
    }
    node = std::move(*created);
    options.cluster_view = node->ViewSource();
  }
  auto daemon = serve::Daemon::Start(std::move(options));
  if (!daemon.ok()) return ReportOpenError("serve", daemon.status());
  if (metrics != nullptr) {
    serve::WatchDaemon(**daemon, config->tenants, metrics.get());
    const std::string host = config->metrics_addr.substr(0, config->metrics_addr.rfind(':'));
    serve::Logf(serve::LogLevel::kInfo, "metrics at http://%s:%u/metrics", host.c_str(),
                static_cast<unsigned>(metrics->port()));
  }
  if (node != nullptr) {
    cluster::ClusterNodeOptions co;
    auto etcd = cluster::ParseEtcdEndpoints(config->etcd);  // checked with the configuration
    if (etcd.ok()) co.etcd = std::move(*etcd);
    co.cluster = config->cluster;
    co.node_name = config->node_name;
    co.lease_ttl_s = config->lease_ttl_s;
    co.peer.max_staging_bytes = config->peer_staging_bytes;
    co.node_id_file = NodeIdFile(*config);
    co.version = FLATCAKE_VERSION;
    co.metrics = metrics.get();
    if (Status st = node->Join(daemon->get(), co); !st.ok()) {
      (*daemon)->Shutdown();
      return ReportStatus("serve", st.WithContext("joining cluster " + config->cluster));
    }
  }
  // Clients can connect from here on: a service manager that waits for this (systemd's
  // Type=notify) starts the units ordered after us now, not when the process started.
  const Status ready =
      serve::NotifyServiceManager("READY=1\nSTATUS=serving on " + config->socket_path);
  if (!ready.ok()) {
    serve::Logf(serve::LogLevel::kWarning, "cannot tell the service manager that we are ready: %s",
                ready.ToString().c_str());
  }
  int sig = 0;
  while (sigwait(&stop, &sig) != 0) {
  }
  serve::Logf(serve::LogLevel::kInfo, "%s received", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  // A failure to notify was logged with READY=1 already.
  (void)serve::NotifyServiceManager("STOPPING=1");
  if (node != nullptr) node->Leave();  // out of the cluster before the store closes
  if (metrics != nullptr) serve::UnwatchDaemon(metrics.get());
  (*daemon)->Shutdown();
  return 0;
}

// The flag of the daemon setting `key`, with the help the config file shows for it.
template <typename T>
CLI::Option* AddSettingFlag(CLI::App* cmd, std::string_view key, T* target) {
  const serve::ServeSettingSpec& spec = serve::ServeSetting(key);
  return cmd->add_option(std::string(spec.flag), *target,
                         std::string(spec.help) + " File: " + std::string(key) + ".");
}

}  // namespace

void RegisterServeCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Run the node daemon: one store for every engine process of the node, on a Unix socket "
      "(docs/serve.md). Flags given override the --config file's values.");
  args->cmd = cmd;
  serve::ServeOverrides& o = args->overrides;
  CLI::Option* config = cmd->add_option(
      "--config", args->config,
      "TOML configuration file (docs/serve.example.toml: every key, with its default)");
  CLI::Option* print = cmd->add_flag(
      "--print-config", args->print_config,
      "Print a configuration file of every setting with its default and help, and exit");
  cmd->add_option("--check-config", args->check_config,
                  "Check the configuration in FILE (read as --config FILE) with the other flags "
                  "given over it, merged as serve merges them, and exit: 0 printing a one-line "
                  "summary, 2 naming what is wrong (a missing or unreadable FILE too). Starts "
                  "nothing and opens nothing but FILE: the socket and its directory, the pool "
                  "directories (which need not exist yet: systemd makes RuntimeDirectory and "
                  "StateDirectory at start), disk space, huge pages, the metrics port and etcd "
                  "are checked by serve when it starts. Safe beside a running daemon.")
      ->type_name("FILE")
      ->excludes(config)
      ->excludes(print);
  AddSettingFlag(cmd, "socket", &o.socket_path);
  AddSettingFlag(cmd, "socket_mode", &args->socket_mode);
  AddSettingFlag(cmd, "metrics_addr", &o.metrics_addr);
  AddSettingFlag(cmd, "max_clients", &o.max_clients)->check(CLI::Range(1u, serve::kMaxMaxClients));
  AddSettingFlag(cmd, "log_level", &args->log_level);
  AddSettingFlag(cmd, "etcd", &o.etcd);
  AddSettingFlag(cmd, "cluster", &o.cluster);
  AddSettingFlag(cmd, "node_name", &o.node_name);
  AddSettingFlag(cmd, "lease_ttl_s", &o.lease_ttl_s)->check(CLI::Range(2u, 3600u));
  AddSettingFlag(cmd, "peer_staging_bytes", &o.peer_staging_bytes)
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--allow-uid", args->allow_uids,
                  "A uid whose processes may connect (repeatable; replaces the file's "
                  "allow.uids and allow.gids; default: the daemon's own uid)");
  cmd->add_option("--allow-gid", args->allow_gids,
                  "A gid whose processes may connect (repeatable; as --allow-uid)");
  AddStoreFlags(cmd, &o.store);
  cmd->callback([args, exit_code] { *exit_code = RunServe(*args); });
}

}  // namespace flatcake::cli
