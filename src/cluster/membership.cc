#include "cluster/membership.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <nlohmann/json.hpp>

#include "serve/serve_log.h"

namespace flatcake::cluster {
namespace {

using nlohmann::json;

std::string IdText(uint32_t id) { return std::to_string(id); }

Result<uint32_t> IdOfKey(std::string_view key, std::string_view dir) {
  const size_t at = key.rfind('/');
  const std::string_view tail = at == std::string_view::npos ? key : key.substr(at + 1);
  uint32_t id = 0;
  const auto r = std::from_chars(tail.data(), tail.data() + tail.size(), id);
  if (tail.empty() || r.ec != std::errc() || r.ptr != tail.data() + tail.size() || id == 0 ||
      id > kMaxNodeId) {
    return Status::Corruption("etcd key '" + std::string(key) + "' under " + std::string(dir) +
                              " names no NodeID");
  }
  return id;
}

void SortById(std::vector<MemberInfo>* members) {
  std::sort(members->begin(), members->end(),
            [](const MemberInfo& a, const MemberInfo& b) { return a.node_id < b.node_id; });
}

}  // namespace

int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string EncodeMember(const MemberInfo& m) {
  return json{{"node_id", m.node_id},
              {"name", m.name},
              {"socket", m.socket},
              {"data_address", m.data_address},
              {"dram_capacity_bytes", m.dram_capacity_bytes},
              {"ssd_capacity_bytes", m.ssd_capacity_bytes},
              {"dram_used_bytes", m.dram_used_bytes},
              {"ssd_used_bytes", m.ssd_used_bytes},
              {"pid", m.pid},
              {"started_unix_ms", m.started_unix_ms},
              {"updated_unix_ms", m.updated_unix_ms},
              {"lease_ttl_s", m.lease_ttl_s},
              {"version", m.version}}
      .dump();
}

Result<MemberInfo> DecodeMember(std::string_view json_text) {
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption("member record is not a JSON object");
  }
  MemberInfo m;
  try {
    m.node_id = j.at("node_id").get<uint32_t>();
    m.name = j.value("name", std::string());
    m.socket = j.value("socket", std::string());
    m.data_address = j.value("data_address", std::string());
    m.dram_capacity_bytes = j.value("dram_capacity_bytes", uint64_t{0});
    m.ssd_capacity_bytes = j.value("ssd_capacity_bytes", uint64_t{0});
    m.dram_used_bytes = j.value("dram_used_bytes", uint64_t{0});
    m.ssd_used_bytes = j.value("ssd_used_bytes", uint64_t{0});
    m.pid = j.value("pid", int64_t{0});
    m.started_unix_ms = j.value("started_unix_ms", int64_t{0});
    m.updated_unix_ms = j.value("updated_unix_ms", int64_t{0});
    m.lease_ttl_s = j.value("lease_ttl_s", int64_t{0});
    m.version = j.value("version", std::string());
  } catch (const json::exception& e) {
    return Status::Corruption(std::string("member record: ") + e.what());
  }
  if (m.node_id == 0 || m.node_id > kMaxNodeId) {
    return Status::Corruption("member record with NodeID " + std::to_string(m.node_id) + " (1.." +
                              std::to_string(kMaxNodeId) + ")");
  }
  return m;
}

std::string ClusterPrefix(std::string_view name) { return "/flatcake/" + std::string(name) + "/"; }

Status ValidateClusterName(std::string_view name) {
  const bool ok =
      !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
      });
  if (ok) return Status::OK();
  return Status::InvalidArgument("cluster name '" + std::string(name) +
                                 "' must be 1 to 64 of A-Z a-z 0-9 . _ -");
}

Result<std::vector<MemberInfo>> ListMembers(EtcdClient& etcd, std::string_view cluster) {
  FC_RETURN_IF_ERROR(ValidateClusterName(cluster));
  const std::string dir = ClusterPrefix(cluster) + "members/";
  FC_ASSIGN_OR_RETURN(EtcdClient::Range range, etcd.GetPrefix(dir));
  std::vector<MemberInfo> out;
  for (const EtcdKeyValue& kv : range.kvs) {
    auto m = DecodeMember(kv.value);
    if (!m.ok()) {
      serve::Logf(serve::LogLevel::kWarning, "cluster: skipping %s: %s", kv.key.c_str(),
                  std::string(m.status().message()).c_str());
      continue;
    }
    out.push_back(std::move(*m));
  }
  SortById(&out);
  return out;
}

Membership::Membership(MembershipOptions options)
    : options_(std::move(options)),
      etcd_(options_.etcd, options_.etcd_timeout),
      prefix_(ClusterPrefix(options_.cluster)) {}

Result<std::unique_ptr<Membership>> Membership::Join(MembershipOptions options) {
  FC_RETURN_IF_ERROR(ValidateClusterName(options.cluster));
  if (options.etcd.empty()) return Status::InvalidArgument("cluster: no etcd endpoints");
  if (options.lease_ttl_s < 2 || options.lease_ttl_s > 3600) {
    return Status::InvalidArgument("cluster: lease_ttl_s = " + std::to_string(options.lease_ttl_s) +
                                   " is out of range (2..3600)");
  }
  if (options.preferred_node_id > kMaxNodeId) {
    return Status::InvalidArgument("cluster: NodeID " + std::to_string(options.preferred_node_id) +
                                   " is out of range (1.." + std::to_string(kMaxNodeId) + ")");
  }
  std::unique_ptr<Membership> m(new Membership(std::move(options)));
  {
    MutexLock lock(m->mu_);
    m->self_ = m->options_.self;
    m->self_.started_unix_ms = UnixNowMs();
    m->self_.lease_ttl_s = m->options_.lease_ttl_s;
  }
  FC_RETURN_IF_ERROR(m->Register(m->options_.preferred_node_id));
  // The first view of the members, before anyone asks.
  auto listed = ListMembers(m->etcd_, m->options_.cluster);
  if (listed.ok()) m->SetMembers(std::move(*listed));
  m->keeper_ = std::thread([p = m.get()] { p->KeeperLoop(); });
  m->watcher_ = std::thread([p = m.get()] { p->WatcherLoop(); });
  return m;
}

Membership::~Membership() { Leave(); }

Status Membership::Register(uint32_t preferred) {
  FC_ASSIGN_OR_RETURN(const int64_t lease, etcd_.GrantLease(options_.lease_ttl_s));
  std::string name;
  {
    MutexLock lock(mu_);
    name = self_.name;
  }
  uint32_t taken = 0;
  if (preferred != 0) {
    FC_ASSIGN_OR_RETURN(const bool created,
                        etcd_.CreateIfAbsent(prefix_ + "ids/" + IdText(preferred), name, lease));
    if (created) {
      taken = preferred;
    } else {
      serve::Logf(serve::LogLevel::kWarning,
                  "cluster %s: NodeID %u is held by a live node; taking another",
                  options_.cluster.c_str(), preferred);
    }
  }
  while (taken == 0) {
    FC_ASSIGN_OR_RETURN(EtcdClient::Range ids, etcd_.GetPrefix(prefix_ + "ids/"));
    std::vector<bool> used(kMaxNodeId + 1, false);
    for (const EtcdKeyValue& kv : ids.kvs) {
      auto id = IdOfKey(kv.key, prefix_ + "ids/");
      if (id.ok()) used[*id] = true;
    }
    uint32_t candidate = 0;
    for (uint32_t id = 1; id <= kMaxNodeId; ++id) {
      if (!used[id]) {
        candidate = id;
        break;
      }
    }
    if (candidate == 0) {
      (void)etcd_.RevokeLease(lease);
      return Status::NoSpace("cluster " + options_.cluster + ": every NodeID (1.." +
                             std::to_string(kMaxNodeId) + ") is taken");
    }
    FC_ASSIGN_OR_RETURN(const bool created,
                        etcd_.CreateIfAbsent(prefix_ + "ids/" + IdText(candidate), name, lease));
    if (created) taken = candidate;  // else another node took it first: list again
  }
  lease_.store(lease);
  node_id_.store(taken);
  {
    MutexLock lock(mu_);
    self_.node_id = taken;
  }
  FC_RETURN_IF_ERROR(Publish());
  reachable_.store(true);
  serve::Logf(serve::LogLevel::kInfo, "cluster %s: joined as NodeID %u (lease %lld s)",
              options_.cluster.c_str(), taken, static_cast<long long>(options_.lease_ttl_s));
  return Status::OK();
}

Status Membership::Publish() {
  MemberInfo record;
  {
    MutexLock lock(mu_);
    if (options_.refresh) options_.refresh(&self_);
    self_.node_id = node_id_.load();
    self_.updated_unix_ms = UnixNowMs();
    record = self_;
  }
  return etcd_.Put(prefix_ + "members/" + IdText(record.node_id), EncodeMember(record),
                   lease_.load());
}

bool Membership::SleepFor(std::chrono::milliseconds d) {
  MutexLock lock(mu_);
  const auto until = std::chrono::steady_clock::now() + d;
  while (!stop_.load()) {
    if (!cv_.WaitUntil(mu_, until)) break;  // timed out
  }
  return !stop_.load();
}

void Membership::KeeperLoop() {
  const auto period = std::chrono::milliseconds(options_.lease_ttl_s * 1000 / 3);
  while (SleepFor(period)) {
    auto ttl = etcd_.KeepAlive(lease_.load());
    if (!ttl.ok()) {
      if (reachable_.exchange(false)) {
        serve::Logf(serve::LogLevel::kWarning,
                    "cluster %s: etcd unreachable (%s); serving on with the last member view",
                    options_.cluster.c_str(), std::string(ttl.status().message()).c_str());
      }
      continue;
    }
    if (*ttl == 0) {
      // The lease expired while etcd could not be reached: join again, under the same NodeID
      // when it is still free.
      serve::Logf(serve::LogLevel::kWarning, "cluster %s: lease expired; joining again",
                  options_.cluster.c_str());
      const Status st = Register(node_id_.load());
      if (!st.ok()) {
        reachable_.store(false);
        serve::Logf(serve::LogLevel::kWarning, "cluster %s: rejoining failed: %s",
                    options_.cluster.c_str(), std::string(st.message()).c_str());
      }
      continue;
    }
    const Status st = Publish();
    if (!reachable_.exchange(st.ok()) && st.ok()) {
      serve::Logf(serve::LogLevel::kInfo, "cluster %s: etcd reachable again",
                  options_.cluster.c_str());
    }
  }
}

void Membership::WatcherLoop() {
  const std::string dir = prefix_ + "members/";
  while (!stop_.load()) {
    auto range = etcd_.GetPrefix(dir);
    if (!range.ok()) {
      if (!SleepFor(std::chrono::milliseconds(500))) return;
      continue;
    }
    std::vector<MemberInfo> members;
    for (const EtcdKeyValue& kv : range->kvs) {
      auto m = DecodeMember(kv.value);
      if (m.ok()) members.push_back(std::move(*m));
    }
    SetMembers(std::move(members));
    const Status st = etcd_.Watch(dir, range->revision + 1, stop_,
                                  [this](const std::vector<EtcdEvent>& ev) { ApplyEvents(ev); });
    if (stop_.load()) return;
    serve::Logf(serve::LogLevel::kDebug, "cluster %s: member watch ended: %s; listing again",
                options_.cluster.c_str(), std::string(st.message()).c_str());
    if (!SleepFor(std::chrono::milliseconds(200))) return;
  }
}

void Membership::SetMembers(std::vector<MemberInfo> members) {
  SortById(&members);
  {
    MutexLock lock(mu_);
    members_ = std::move(members);
    generation_.fetch_add(1);
  }
  cv_.NotifyAll();
}

void Membership::ApplyEvents(const std::vector<EtcdEvent>& events) {
  {
    MutexLock lock(mu_);
    for (const EtcdEvent& ev : events) {
      auto id = IdOfKey(ev.kv.key, prefix_ + "members/");
      if (!id.ok()) continue;
      auto it = std::find_if(members_.begin(), members_.end(),
                             [&](const MemberInfo& m) { return m.node_id == *id; });
      if (ev.type == EtcdEvent::Type::kDelete) {
        if (it != members_.end()) members_.erase(it);
        continue;
      }
      auto m = DecodeMember(ev.kv.value);
      if (!m.ok()) continue;
      if (it != members_.end()) {
        *it = std::move(*m);
      } else {
        members_.push_back(std::move(*m));
      }
    }
    SortById(&members_);
    generation_.fetch_add(1);
  }
  cv_.NotifyAll();
}

std::vector<MemberInfo> Membership::Members() const {
  MutexLock lock(mu_);
  return members_;
}

bool Membership::WaitFor(const std::function<bool(const std::vector<MemberInfo>&)>& pred,
                         std::chrono::milliseconds timeout) const {
  const auto until = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mu_);
  while (!pred(members_)) {
    if (!cv_.WaitUntil(mu_, until)) return pred(members_);
  }
  return true;
}

void Membership::Leave() {
  {
    MutexLock lock(mu_);
    if (left_) return;
    left_ = true;
    stop_.store(true);
  }
  cv_.NotifyAll();
  if (keeper_.joinable()) keeper_.join();
  if (watcher_.joinable()) watcher_.join();
  if (lease_.load() != 0) {
    const Status st = etcd_.RevokeLease(lease_.load());
    if (!st.ok()) {
      serve::Logf(serve::LogLevel::kWarning,
                  "cluster %s: could not revoke the lease (%s); NodeID %u stays taken until it "
                  "expires",
                  options_.cluster.c_str(), std::string(st.message()).c_str(), node_id_.load());
    }
  }
}

}  // namespace flatcake::cluster
