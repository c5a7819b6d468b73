#include "cluster/etcd_client.h"

#include <charconv>
#include <nlohmann/json.hpp>

namespace flatcake::cluster {
namespace {

using nlohmann::json;

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = uint32_t{static_cast<uint8_t>(in[i])} << 16 |
                       uint32_t{static_cast<uint8_t>(in[i + 1])} << 8 |
                       static_cast<uint8_t>(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kBase64[(v >> s) & 63]);
  }
  if (i < in.size()) {
    uint32_t v = uint32_t{static_cast<uint8_t>(in[i])} << 16;
    if (i + 1 < in.size()) v |= uint32_t{static_cast<uint8_t>(in[i + 1])} << 8;
    out.push_back(kBase64[(v >> 18) & 63]);
    out.push_back(kBase64[(v >> 12) & 63]);
    out.push_back(i + 1 < in.size() ? kBase64[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

Result<std::string> Unbase64(std::string_view in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : in) {
    if (c == '=') break;
    const char* p = std::char_traits<char>::find(kBase64, 64, c);
    if (p == nullptr) return Status::Corruption("etcd: bad base64 in an answer");
    acc = acc << 6 | static_cast<uint32_t>(p - kBase64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

// The gateway writes 64-bit integers as strings, and leaves out fields that are 0.
Result<int64_t> Int(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end()) return int64_t{0};
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    int64_t v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec == std::errc() && r.ptr == s.data() + s.size()) return v;
  }
  return Status::Corruption(std::string("etcd: field '") + field + "' is not an integer");
}

Result<json> ParseJson(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption("etcd: an answer that is not a JSON object: '" + body.substr(0, 120) +
                              "'");
  }
  return j;
}

Result<EtcdKeyValue> KeyValueOf(const json& j) {
  EtcdKeyValue kv;
  if (!j.is_object()) return Status::Corruption("etcd: a key-value that is not an object");
  FC_ASSIGN_OR_RETURN(kv.key, Unbase64(j.value("key", std::string())));
  FC_ASSIGN_OR_RETURN(kv.value, Unbase64(j.value("value", std::string())));
  FC_ASSIGN_OR_RETURN(kv.create_revision, Int(j, "create_revision"));
  FC_ASSIGN_OR_RETURN(kv.mod_revision, Int(j, "mod_revision"));
  FC_ASSIGN_OR_RETURN(kv.lease, Int(j, "lease"));
  return kv;
}

// An error etcd or its gateway reports in the answer: {"error": ..., "message": ..., "code": N}.
Status ErrorIn(const json& j) {
  auto it = j.find("error");
  if (it == j.end()) return Status::OK();
  std::string message = j.value("message", std::string());
  if (message.empty() && it->is_string()) message = it->get<std::string>();
  if (message.empty()) message = it->dump();
  return Status::IOError("etcd: " + message);
}

}  // namespace

Result<std::vector<serve::HostPort>> ParseEtcdEndpoints(std::string_view urls) {
  std::vector<serve::HostPort> out;
  size_t start = 0;
  while (start <= urls.size()) {
    size_t comma = urls.find(',', start);
    if (comma == std::string_view::npos) comma = urls.size();
    std::string_view url = urls.substr(start, comma - start);
    start = comma + 1;
    while (!url.empty() && url.front() == ' ') url.remove_prefix(1);
    while (!url.empty() && url.back() == ' ') url.remove_suffix(1);
    if (url.empty()) {
      return Status::InvalidArgument("etcd endpoints '" + std::string(urls) +
                                     "': an empty entry (give http://HOST:PORT[,...])");
    }
    const std::string entry(url);
    if (url.starts_with("https://")) {
      return Status::Unsupported("etcd endpoint '" + entry +
                                 "': https is not supported; give the client URL over http");
    }
    if (url.starts_with("http://")) url.remove_prefix(7);
    if (url.ends_with('/')) url.remove_suffix(1);
    auto hp = serve::ParseHostPort(url);
    if (!hp.ok()) return hp.status().WithContext("etcd endpoint '" + entry + "'");
    if (hp->port == 0) {
      return Status::InvalidArgument("etcd endpoint '" + entry + "': port 0");
    }
    out.push_back(*hp);
  }
  return out;
}

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<uint8_t>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

EtcdClient::EtcdClient(std::vector<serve::HostPort> endpoints, std::chrono::milliseconds timeout)
    : endpoints_(std::move(endpoints)), timeout_(timeout) {}

std::string EtcdClient::EndpointsText() const {
  std::string out;
  for (const serve::HostPort& e : endpoints_) {
    if (!out.empty()) out += ",";
    out += "http://" + e.ToString();
  }
  return out;
}

Result<std::string> EtcdClient::Call(std::string_view path, const std::string& body) {
  if (endpoints_.empty()) return Status::InvalidArgument("etcd: no endpoints");
  size_t first;
  {
    MutexLock lock(mu_);
    first = preferred_;
  }
  Status last;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t e = (first + i) % endpoints_.size();
    auto r = serve::HttpPost(endpoints_[e], path, body, "application/json", timeout_);
    if (!r.ok()) {
      last = r.status();
      continue;  // this member is down or slow: the next one
    }
    {
      MutexLock lock(mu_);
      preferred_ = e;
    }
    if (r->status != 200) {
      auto j = ParseJson(r->body);
      if (j.ok() && !ErrorIn(*j).ok()) return ErrorIn(*j);
      return Status::IOError("etcd: HTTP " + std::to_string(r->status) + " for " +
                             std::string(path) + ": " + r->body.substr(0, 200));
    }
    return std::move(r->body);
  }
  if (last.code() == StatusCode::kDeadlineExceeded) {
    return Status::DeadlineExceeded("etcd (" + EndpointsText() +
                                    "): " + std::string(last.message()));
  }
  return Status::IOError("etcd unreachable (" + EndpointsText() +
                         "): " + std::string(last.message()));
}

Result<int64_t> EtcdClient::GrantLease(int64_t ttl_s) {
  FC_ASSIGN_OR_RETURN(std::string body, Call("/v3/lease/grant", json{{"TTL", ttl_s}}.dump()));
  FC_ASSIGN_OR_RETURN(json j, ParseJson(body));
  FC_RETURN_IF_ERROR(ErrorIn(j));
  FC_ASSIGN_OR_RETURN(int64_t id, Int(j, "ID"));
  if (id == 0) return Status::Corruption("etcd: a lease grant without an ID");
  return id;
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  FC_ASSIGN_OR_RETURN(std::string body,
                      Call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump()));
  // A stream of one answer: {"result": {..., "TTL": "5"}}, without TTL when the lease is gone.
  FC_ASSIGN_OR_RETURN(json j, ParseJson(body.substr(0, body.find('\n'))));
  FC_RETURN_IF_ERROR(ErrorIn(j));
  auto result = j.find("result");
  if (result == j.end()) {
    auto err = j.find("error");
    if (err != j.end() && err->is_object()) FC_RETURN_IF_ERROR(ErrorIn(*err));
    return Status::Corruption("etcd: a keep-alive answer without a result");
  }
  FC_ASSIGN_OR_RETURN(int64_t ttl, Int(*result, "TTL"));
  return std::max<int64_t>(0, ttl);
}

Status EtcdClient::RevokeLease(int64_t lease) {
  FC_ASSIGN_OR_RETURN(std::string body,
                      Call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump()));
  FC_ASSIGN_OR_RETURN(json j, ParseJson(body));
  return ErrorIn(j);
}

Status EtcdClient::Put(std::string_view key, std::string_view value, int64_t lease) {
  json req{{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease != 0) req["lease"] = std::to_string(lease);
  FC_ASSIGN_OR_RETURN(std::string body, Call("/v3/kv/put", req.dump()));
  FC_ASSIGN_OR_RETURN(json j, ParseJson(body));
  return ErrorIn(j);
}

Result<bool> EtcdClient::CreateIfAbsent(std::string_view key, std::string_view value,
                                        int64_t lease) {
  json put{{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  const json req{{"compare", json::array({json{{"key", Base64(key)},
                                               {"target", "CREATE"},
                                               {"result", "EQUAL"},
                                               {"create_revision", "0"}}})},
                 {"success", json::array({json{{"request_put", put}}})}};
  FC_ASSIGN_OR_RETURN(std::string body, Call("/v3/kv/txn", req.dump()));
  FC_ASSIGN_OR_RETURN(json j, ParseJson(body));
  FC_RETURN_IF_ERROR(ErrorIn(j));
  return j.value("succeeded", false);
}

Result<std::optional<EtcdKeyValue>> EtcdClient::Get(std::string_view key) {
  FC_ASSIGN_OR_RETURN(std::string body, Call("/v3/kv/range", json{{"key", Base64(key)}}.dump()));
  FC_ASSIGN_OR_RETURN(json j, ParseJson(body));
  FC_RETURN_IF_ERROR(ErrorIn(j));
  auto kvs = j.find("kvs");
  if (kvs == j.end() || !kvs->is_array() || kvs->empty()) return std::optional<EtcdKeyValue>();
  FC_ASSIGN_OR_RETURN(EtcdKeyValue kv, KeyValueOf(kvs->front()));
  return std::optional<EtcdKeyValue>(std::move(kv));
}

Result<EtcdClient::Range> EtcdClient::GetPrefix(std::string_view prefix) {
  FC_ASSIGN_OR_RETURN(
      std::string body,
      Call("/v3/kv/range",
           json{{"key", Base64(prefix)}, {"range_end", Base64(PrefixEnd(prefix))}}.dump()));
  FC_ASSIGN_OR_RETURN(json j, ParseJson(body));
  FC_RETURN_IF_ERROR(ErrorIn(j));
  Range out;
  auto header = j.find("header");
  if (header != j.end()) {
    FC_ASSIGN_OR_RETURN(out.revision, Int(*header, "revision"));
  }
  auto kvs = j.find("kvs");
  if (kvs != j.end() && kvs->is_array()) {
    for (const json& e : *kvs) {
      FC_ASSIGN_OR_RETURN(EtcdKeyValue kv, KeyValueOf(e));
      out.kvs.push_back(std::move(kv));
    }
  }
  return out;
}

Status EtcdClient::Delete(std::string_view key) {
  FC_ASSIGN_OR_RETURN(std::string body,
                      Call("/v3/kv/deleterange", json{{"key", Base64(key)}}.dump()));
  FC_ASSIGN_OR_RETURN(json j, ParseJson(body));
  return ErrorIn(j);
}

Status EtcdClient::Watch(std::string_view prefix, int64_t start_revision,
                         const std::atomic<bool>& stop,
                         const std::function<void(const std::vector<EtcdEvent>&)>& on_events) {
  if (endpoints_.empty()) return Status::InvalidArgument("etcd: no endpoints");
  json create{{"key", Base64(prefix)}, {"range_end", Base64(PrefixEnd(prefix))}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  const std::string req = json{{"create_request", create}}.dump();
  size_t e;
  {
    MutexLock lock(mu_);
    e = preferred_;
  }
  std::string pending;  // the stream is one JSON object per line
  Status broken;
  Status st = serve::HttpPostStream(
      endpoints_[e], "/v3/watch", req, "application/json", timeout_, stop,
      [&](std::string_view data) {
        pending.append(data);
        size_t eol;
        while ((eol = pending.find('\n')) != std::string::npos) {
          const std::string line = pending.substr(0, eol);
          pending.erase(0, eol + 1);
          if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
          auto j = ParseJson(line);
          if (!j.ok()) {
            broken = j.status();
            return false;
          }
          auto result = j->find("result");
          if (result == j->end()) {
            auto err = j->find("error");
            broken = err != j->end() && err->is_object() && !ErrorIn(*err).ok()
                         ? ErrorIn(*err)
                         : Status::IOError("etcd: watch answered '" + line.substr(0, 120) + "'");
            return false;
          }
          if (result->value("canceled", false) || result->contains("compact_revision")) {
            broken =
                Status::IOError("etcd: watch cancelled (" +
                                result->value("cancel_reason", std::string("compacted")) + ")");
            return false;
          }
          std::vector<EtcdEvent> events;
          auto evs = result->find("events");
          if (evs != result->end() && evs->is_array()) {
            for (const json& ev : *evs) {
              EtcdEvent out;
              out.type = ev.value("type", std::string("PUT")) == "DELETE" ? EtcdEvent::Type::kDelete
                                                                          : EtcdEvent::Type::kPut;
              auto kv = ev.find("kv");
              if (kv == ev.end()) continue;
              auto parsed = KeyValueOf(*kv);
              if (!parsed.ok()) {
                broken = parsed.status();
                return false;
              }
              out.kv = std::move(*parsed);
              events.push_back(std::move(out));
            }
          }
          if (!events.empty()) on_events(events);
        }
        return true;
      });
  if (!broken.ok()) return broken;
  if (!st.ok()) return st;
  if (stop.load()) return Status::OK();
  return Status::IOError("etcd: the watch stream from " + endpoints_[e].ToString() + " ended");
}

}  // namespace flatcake::cluster
