#include "cluster/cluster_node.h"

#include <unistd.h>

#include <fstream>

#include "serve/serve_log.h"
#include "store/flat_store.h"

namespace flatcake::cluster {
namespace {

// The NodeID saved for cluster `name` in `file`, 0 when none is.
uint32_t SavedNodeId(const std::string& file, const std::string& name) {
  if (file.empty()) return 0;
  std::ifstream in(file);
  std::string cluster;
  uint32_t id = 0;
  if (in >> cluster >> id && cluster == name && id <= kMaxNodeId) return id;
  return 0;
}

}  // namespace

std::string HexEncode(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    out.push_back(kDigits[static_cast<uint8_t>(c) >> 4]);
    out.push_back(kDigits[static_cast<uint8_t>(c) & 15]);
  }
  return out;
}

std::string HexDecode(std::string_view hex) {
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return {};
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return {};
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

Result<std::unique_ptr<ClusterNode>> ClusterNode::Create() {
  FC_ASSIGN_OR_RETURN(std::unique_ptr<UcxNode> ucx, UcxNode::Create());
  return std::unique_ptr<ClusterNode>(new ClusterNode(std::move(ucx)));
}

ClusterNode::~ClusterNode() { Leave(); }

std::function<serve::ClusterViewInfo()> ClusterNode::ViewSource() {
  return [this] { return View(); };
}

serve::ClusterViewInfo ClusterNode::View() const {
  // Enabled from the start (the daemon is configured for a cluster): a client that connects before
  // the node has joined gets its UCX worker ready, and no members yet.
  serve::ClusterViewInfo v;
  v.enabled = true;
  MutexLock lock(mu_);
  if (membership_ == nullptr) return v;
  v.node_id = membership_->node_id();
  v.etcd_reachable = membership_->etcd_reachable();
  const int64_t now = UnixNowMs();
  for (const MemberInfo& m : membership_->Members()) {
    v.members.push_back(serve::ClusterViewMember{m.node_id, m.name, HexDecode(m.data_address),
                                                 m.dram_capacity_bytes + m.ssd_capacity_bytes,
                                                 m.healthy(now)});
  }
  return v;
}

bool ClusterNode::peer_staging_warm() const {
  MutexLock lock(mu_);
  return peers_ != nullptr && peers_->staging_warm();
}

size_t ClusterNode::peer_restores_in_flight() const {
  MutexLock lock(mu_);
  return peers_ != nullptr ? peers_->restores_in_flight() : 0;
}

uint32_t ClusterNode::node_id() const {
  MutexLock lock(mu_);
  return membership_ ? membership_->node_id() : 0;
}

Status ClusterNode::Join(serve::Daemon* daemon, const ClusterNodeOptions& options) {
  {
    MutexLock lock(mu_);
    if (left_) return Status::Aborted("this node left its cluster: its data path is shut");
  }
  MembershipOptions o;
  o.etcd = options.etcd;
  o.cluster = options.cluster;
  o.lease_ttl_s = options.lease_ttl_s;
  o.preferred_node_id = SavedNodeId(options.node_id_file, options.cluster);
  o.self.name = options.node_name;
  if (o.self.name.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) == 0) o.self.name = host;
  }
  o.self.socket = daemon->socket_path();
  const StoreOptions& so = daemon->store().options();
  o.self.dram_capacity_bytes = so.dram_bytes;
  o.self.ssd_capacity_bytes = so.ssd_dirs.empty() ? 0 : so.ssd_bytes;
  o.self.pid = ::getpid();
  o.self.version = options.version;
  o.self.data_address = HexEncode(ucx_->address());
  o.refresh = [daemon](MemberInfo* m) {
    const StoreStats s = daemon->store().GetStats();
    m->dram_used_bytes = s.dram.used_bytes;
    m->ssd_used_bytes = s.ssd.used_bytes;
  };
  FC_ASSIGN_OR_RETURN(std::unique_ptr<Membership> m, Membership::Join(std::move(o)));
  auto peers = std::make_unique<PeerService>(&daemon->store(), ucx_.get(), m->node_id(),
                                             &daemon->ledger(), options.metrics, options.peer);
  FC_RETURN_IF_ERROR(peers->Start());
  if (!options.node_id_file.empty()) {
    std::ofstream out(options.node_id_file, std::ios::trunc);
    out << options.cluster << " " << m->node_id() << "\n";
    if (!out.flush()) {
      serve::Logf(serve::LogLevel::kWarning, "cannot save the NodeID in %s",
                  options.node_id_file.c_str());
    }
  }
  MutexLock lock(mu_);
  membership_ = std::move(m);
  peers_ = std::move(peers);
  return Status::OK();
}

void ClusterNode::Leave() {
  std::unique_ptr<Membership> m;
  std::unique_ptr<PeerService> p;
  {
    MutexLock lock(mu_);
    m = std::move(membership_);
    p = std::move(peers_);
    left_ = true;
  }
  if (m != nullptr) m->Leave();  // out of the cluster first: no new peer requests
  if (p != nullptr) p->Stop();
  // Clients with an older view can still reach the worker, and its one-sided gets read the DRAM
  // arena without this node's code: the worker goes before the daemon closes the store.
  ucx_->Stop();
}

}  // namespace flatcake::cluster
