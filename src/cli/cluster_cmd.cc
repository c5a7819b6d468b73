// `flatcake cluster status --etcd URL[,URL...] [--cluster NAME] [--json]`: the members of a
// FlatCake cluster as etcd holds them (docs/cluster.md): NodeID, name, health, capacities and
// use. Exit 0 with the list (possibly empty), 1 when etcd cannot be reached, 2 for bad flags.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/report_format.h"
#include "cli/store_flags.h"
#include "cluster/membership.h"

namespace flatcake::cli {
namespace {

using nlohmann::json;

struct ClusterArgs {
  std::string etcd;
  std::string cluster = "default";
  bool json = false;
  int timeout_ms = 3000;
};

int RunStatus(const ClusterArgs& a) {
  auto endpoints = cluster::ParseEtcdEndpoints(a.etcd);
  if (!endpoints.ok()) return ReportArgError("cluster status", endpoints.status());
  const Status name_ok = cluster::ValidateClusterName(a.cluster);
  if (!name_ok.ok()) return ReportArgError("cluster status", name_ok);
  cluster::EtcdClient etcd(*endpoints, std::chrono::milliseconds(a.timeout_ms));
  auto members = cluster::ListMembers(etcd, a.cluster);
  if (!members.ok()) return ReportStatus("cluster status", members.status());
  const int64_t now = cluster::UnixNowMs();
  if (a.json) {
    json rows = json::array();
    for (const cluster::MemberInfo& m : *members) {
      rows.push_back({{"node_id", m.node_id},
                      {"name", m.name},
                      {"healthy", m.healthy(now)},
                      {"socket", m.socket},
                      {"data_address", m.data_address},
                      {"dram_capacity_bytes", m.dram_capacity_bytes},
                      {"dram_used_bytes", m.dram_used_bytes},
                      {"ssd_capacity_bytes", m.ssd_capacity_bytes},
                      {"ssd_used_bytes", m.ssd_used_bytes},
                      {"pid", m.pid},
                      {"version", m.version},
                      {"lease_ttl_s", m.lease_ttl_s},
                      {"last_renewal_age_s", (now - m.updated_unix_ms) / 1e3},
                      {"uptime_s", (now - m.started_unix_ms) / 1e3}});
    }
    const json out = {{"cluster", a.cluster},
                      {"etcd", etcd.EndpointsText()},
                      {"members", rows},
                      {"healthy", std::count_if(members->begin(), members->end(),
                                                [&](const auto& m) { return m.healthy(now); })}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("cluster %s (etcd %s): %zu member(s)\n", a.cluster.c_str(),
              etcd.EndpointsText().c_str(), members->size());
  std::printf("%7s  %-20s  %-7s  %-21s  %-21s  %s\n", "node_id", "name", "health",
              "dram used/capacity", "ssd used/capacity", "renewed");
  for (const cluster::MemberInfo& m : *members) {
    const std::string dram =
        FormatBytes(m.dram_used_bytes) + "/" + FormatBytes(m.dram_capacity_bytes);
    const std::string ssd = FormatBytes(m.ssd_used_bytes) + "/" + FormatBytes(m.ssd_capacity_bytes);
    std::printf("%7u  %-20s  %-7s  %-21s  %-21s  %.1f s ago\n", m.node_id, m.name.c_str(),
                m.healthy(now) ? "healthy" : "stale", dram.c_str(), ssd.c_str(),
                (now - m.updated_unix_ms) / 1e3);
  }
  return 0;
}

}  // namespace

void RegisterClusterCommand(CLI::App& app, int* exit_code) {
  CLI::App* cluster =
      app.add_subcommand("cluster", "A FlatCake cluster of node daemons on etcd (docs/cluster.md)");
  cluster->require_subcommand(1);
  auto args = std::make_shared<ClusterArgs>();
  CLI::App* status = cluster->add_subcommand(
      "status",
      "List the cluster's members from etcd: NodeID, name, health (renewed within its lease), "
      "capacities and use; exits 1 when etcd cannot be reached");
  status->add_option("--etcd", args->etcd, "etcd client URLs, http://HOST:PORT[,...]")->required();
  status->add_option("--cluster", args->cluster, "The cluster's name")->capture_default_str();
  status->add_option("--timeout-ms", args->timeout_ms, "Per-call timeout talking to etcd")
      ->capture_default_str()
      ->check(CLI::Range(1, 600000));
  status->add_flag("--json", args->json, "Print one JSON object");
  status->callback([args, exit_code] { *exit_code = RunStatus(*args); });
}

}  // namespace flatcake::cli
