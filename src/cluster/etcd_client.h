// EtcdClient: the few etcd v3 calls the cluster needs (leases, puts, ranges, a create-if-absent
// transaction, deletes, watches), through etcd's JSON gateway (POST /v3/...: the gRPC API's
// messages as JSON, keys and values in base64, 64-bit integers as strings), on the small HTTP
// client of serve/http_get.h. Debian's etcd-server 3.4 serves the gateway on its client URLs.
//
// A client holds a list of endpoints (the members of one etcd cluster) and tries them in turn,
// starting with the one that answered last: a member that is down costs one connect attempt.
//
// Errors: IOError "etcd unreachable (<endpoints>): <last reason>" when no endpoint answers,
// DeadlineExceeded past the timeout, IOError "etcd: <message>" for an error etcd reports,
// Corruption for an answer that is not the JSON expected.
//
// Thread safety: every call may be made from any thread at once (each is its own connection).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flatcake/status.h"
#include "serve/http_get.h"
#include "util/thread_annotations.h"

namespace flatcake::cluster {

// "http://HOST:PORT[,http://HOST:PORT...]" (a bare HOST:PORT is taken as http). InvalidArgument
// naming the bad entry otherwise; https is refused (the gateway client speaks plain HTTP).
Result<std::vector<serve::HostPort>> ParseEtcdEndpoints(std::string_view urls);

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;  // 0: none
};

struct EtcdEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  EtcdKeyValue kv;  // a delete carries the key and its mod_revision only
};

class EtcdClient {
 public:
  EtcdClient(std::vector<serve::HostPort> endpoints, std::chrono::milliseconds timeout);

  const std::vector<serve::HostPort>& endpoints() const { return endpoints_; }
  std::string EndpointsText() const;

  // A lease of `ttl_s` seconds: its ID.
  Result<int64_t> GrantLease(int64_t ttl_s);
  // Renews `lease` once: the TTL it has now, 0 when it is gone (expired or revoked).
  Result<int64_t> KeepAlive(int64_t lease);
  Status RevokeLease(int64_t lease);

  // Puts `key` = `value`, attached to `lease` when it is not 0.
  Status Put(std::string_view key, std::string_view value, int64_t lease = 0);
  // Puts `key` only when it does not exist: true when this call created it.
  Result<bool> CreateIfAbsent(std::string_view key, std::string_view value, int64_t lease = 0);
  // The key's value, nullopt when there is none.
  Result<std::optional<EtcdKeyValue>> Get(std::string_view key);
  struct Range {
    std::vector<EtcdKeyValue> kvs;  // in key order
    int64_t revision = 0;           // the store's revision the range was read at
  };
  // Every key that starts with `prefix`.
  Result<Range> GetPrefix(std::string_view prefix);
  Status Delete(std::string_view key);

  // Watches every key under `prefix` from revision `start_revision` (0: from now), handing each
  // batch of events to `on_events` (on the calling thread), until `stop` turns true (OK; looked
  // at every 100 ms) or the watch breaks (the error: etcd went away, or compacted past
  // start_revision). Connects to one endpoint; the caller re-lists and watches again.
  Status Watch(std::string_view prefix, int64_t start_revision, const std::atomic<bool>& stop,
               const std::function<void(const std::vector<EtcdEvent>&)>& on_events);

 private:
  // POSTs `body` (JSON) to `path` on the endpoints in turn: the answer's body.
  Result<std::string> Call(std::string_view path, const std::string& body);

  const std::vector<serve::HostPort> endpoints_;
  const std::chrono::milliseconds timeout_;
  Mutex mu_;
  size_t preferred_ GUARDED_BY(mu_) = 0;  // the endpoint that answered last
};

// The smallest key greater than every key with `prefix` (etcd's range_end for a prefix).
std::string PrefixEnd(std::string_view prefix);

}  // namespace flatcake::cluster
