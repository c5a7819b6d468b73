// `flatcake serve`: the node daemon (docs/serve.md). Takes its configuration from a TOML file
// (--config, serve/serve_config.h) with the given flags over it, serves the store on a Unix
// socket to the engine processes of the node (serve/daemon.h), optionally with a Prometheus
// endpoint (--metrics-addr, serve/metrics.h), and runs in the foreground, logging to stderr,
// until SIGTERM or SIGINT, which shut it down cleanly (exit 0). A second daemon on the same
// socket or pool is refused (exit 1, naming the holder).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/store_flags.h"
#include "cluster/membership.h"
#include "serve/daemon.h"
#include "serve/metrics.h"
#include "serve/metrics_observer.h"
#include "serve/serve_config.h"
#include "serve/serve_log.h"
#include "store/flat_store.h"

namespace flatcake::cli {
namespace {

// What the command line gave: the daemon's flags as they were typed, the store's bound to
// overrides.store. Each replaces the file's value only when given (ServeOverrides).
struct ServeArgs {
  CLI::App* cmd = nullptr;
  std::string config;
  bool print_config = false;
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

// The NodeID saved for cluster `name`, 0 when none is.
uint32_t SavedNodeId(const std::string& file, const std::string& name) {
  if (file.empty()) return 0;
  std::ifstream in(file);
  std::string cluster;
  uint32_t id = 0;
  if (in >> cluster >> id && cluster == name && id <= cluster::kMaxNodeId) return id;
  return 0;
}

// Joins the cluster the configuration names, describing this daemon; its use is refreshed from
// the store at each renewal.
Result<std::unique_ptr<cluster::Membership>> JoinCluster(const serve::ServeConfig& c,
                                                         serve::Daemon* daemon) {
  FC_ASSIGN_OR_RETURN(std::vector<serve::HostPort> etcd, cluster::ParseEtcdEndpoints(c.etcd));
  cluster::MembershipOptions o;
  o.etcd = std::move(etcd);
  o.cluster = c.cluster;
  o.lease_ttl_s = c.lease_ttl_s;
  const std::string id_file = NodeIdFile(c);
  o.preferred_node_id = SavedNodeId(id_file, c.cluster);
  o.self.name = c.node_name;
  if (o.self.name.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) == 0) o.self.name = host;
  }
  o.self.socket = daemon->socket_path();
  o.self.dram_capacity_bytes = c.store.dram_bytes;
  o.self.ssd_capacity_bytes = c.store.ssd_dirs.empty() ? 0 : c.store.ssd_bytes;
  o.self.pid = ::getpid();
  o.self.version = FLATCAKE_VERSION;
  o.refresh = [daemon](cluster::MemberInfo* m) {
    const StoreStats s = daemon->store().GetStats();
    m->dram_used_bytes = s.dram.used_bytes;
    m->ssd_used_bytes = s.ssd.used_bytes;
  };
  FC_ASSIGN_OR_RETURN(std::unique_ptr<cluster::Membership> m,
                      cluster::Membership::Join(std::move(o)));
  if (!id_file.empty()) {
    std::ofstream out(id_file, std::ios::trunc);
    out << c.cluster << " " << m->node_id() << "\n";
    if (!out.flush()) {
      serve::Logf(serve::LogLevel::kWarning, "cannot save the NodeID in %s", id_file.c_str());
    }
  }
  return m;
}

int RunServe(ServeArgs& a) {
  if (a.print_config) {
    std::fputs(serve::RenderServeConfigToml().c_str(), stdout);
    return 0;
  }
  Result<serve::ServeConfig> config = MergedConfig(a);
  if (!config.ok()) {
    // A config file that is not there or cannot be read is a failure, not a usage error.
    const StatusCode code = config.status().code();
    if (code == StatusCode::kNotFound || code == StatusCode::kIOError) {
      return ReportStatus("serve", config.status());
    }
    return ReportArgError("serve", config.status());
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
  auto daemon = serve::Daemon::Start(std::move(options));
  if (!daemon.ok()) return ReportOpenError("serve", daemon.status());
  if (metrics != nullptr) {
    serve::WatchDaemon(**daemon, config->tenants, metrics.get());
    const std::string host = config->metrics_addr.substr(0, config->metrics_addr.rfind(':'));
    serve::Logf(serve::LogLevel::kInfo, "metrics at http://%s:%u/metrics", host.c_str(),
                static_cast<unsigned>(metrics->port()));
  }
  std::unique_ptr<cluster::Membership> membership;
  if (!config->etcd.empty()) {
    auto joined = JoinCluster(*config, daemon->get());
    if (!joined.ok()) {
      (*daemon)->Shutdown();
      return ReportStatus("serve",
                          joined.status().WithContext("joining cluster " + config->cluster));
    }
    membership = std::move(*joined);
  }
  int sig = 0;
  while (sigwait(&stop, &sig) != 0) {
  }
  serve::Logf(serve::LogLevel::kInfo, "%s received", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  if (membership != nullptr) membership->Leave();  // out of the cluster before the store closes
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
  cmd->add_option("--config", args->config,
                  "TOML configuration file (docs/serve.example.toml: every key, with its default)");
  cmd->add_flag("--print-config", args->print_config,
                "Print a configuration file of every setting with its default and help, and exit");
  AddSettingFlag(cmd, "socket", &o.socket_path);
  AddSettingFlag(cmd, "socket_mode", &args->socket_mode);
  AddSettingFlag(cmd, "metrics_addr", &o.metrics_addr);
  AddSettingFlag(cmd, "max_clients", &o.max_clients)->check(CLI::Range(1u, serve::kMaxMaxClients));
  AddSettingFlag(cmd, "log_level", &args->log_level);
  AddSettingFlag(cmd, "etcd", &o.etcd);
  AddSettingFlag(cmd, "cluster", &o.cluster);
  AddSettingFlag(cmd, "node_name", &o.node_name);
  AddSettingFlag(cmd, "lease_ttl_s", &o.lease_ttl_s)->check(CLI::Range(2u, 3600u));
  cmd->add_option("--allow-uid", args->allow_uids,
                  "A uid whose processes may connect (repeatable; replaces the file's "
                  "allow.uids and allow.gids; default: the daemon's own uid)");
  cmd->add_option("--allow-gid", args->allow_gids,
                  "A gid whose processes may connect (repeatable; as --allow-uid)");
  AddStoreFlags(cmd, &o.store);
  cmd->callback([args, exit_code] { *exit_code = RunServe(*args); });
}

}  // namespace flatcake::cli
