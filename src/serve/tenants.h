// Tenants of the node daemon: every connection names one (Hello.tenant), and the daemon keeps
// tenants apart in two ways.
//
// Namespaces. The daemon never stores a client's key as it is: the stored key is a hash keyed by
// the tenant, XXH3-128 (seeded with a fixed domain constant) over the tenant's name, a separator
// byte no name holds and the key's 16 bytes. Two tenants' stored keys are as unlikely to meet as
// two random 128-bit keys, so no Lookup, PinRead or ReserveWrite of one tenant ever finds,
// pins or skips another tenant's block, and a tenant's keys mean the same after a daemon restart
// (the derivation has no state). WriteHints.prefix_tail is a key and is mapped the same way; a
// named session becomes "t/<tenant>/<session>", which no other tenant's session and no
// anonymous session ("anon-N") can be. The hash is no protection against a tenant that crafts
// keys to meet another's (XXH3 is not a cryptographic hash); nothing in this design is, since a
// client can write the arena anyway (docs/serve.md, the threat model).
//
// Quotas. TenantLedger counts, per tenant and medium, the bytes of its reservations in force and
// of its published segments (segment footprints, padding included) until the scope holding
// them is freed (FlatStore::SetScopeReleaseListener), and refuses a reservation that would take
// the tenant past its quota. Blocks recovered from a durable pool at start belong to no tenant
// (the pool does not record tenants): they count against no quota.
//
// Thread safety: TenantNamespace is immutable; TenantLedger is internally synchronised, and its
// OnScopeReleased may run under the store's placement lock (it never calls the store).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flatcake/gva.h"
#include "flatcake/key.h"
#include "flatcake/status.h"
#include "flatcake/store.h"
#include "util/thread_annotations.h"

namespace flatcake::serve {

class TenantNamespace {
 public:
  // REQUIRES: ValidateTenantName(tenant) (serve/wire.h) is OK.
  explicit TenantNamespace(std::string tenant);

  const std::string& tenant() const { return tenant_; }
  // The key the store holds for this tenant's `key`.
  Key StoredKey(const Key& key) const;
  std::vector<Key> StoredKeys(std::span<const Key> keys) const;
  // `hints` with its session and prefix_tail in this tenant's namespace.
  WriteHints StoredHints(WriteHints hints) const;

 private:
  std::string tenant_;
};

// Bytes a tenant may occupy per medium; 0: no limit.
// A tenant's capacity on each medium, in bytes of segment footprint; 0 is no limit beyond the
// medium's own. (The daemon's configuration, serve_config.h, names them per tenant.)
struct TenantQuota {
  uint64_t dram_bytes = 0;
  uint64_t ssd_bytes = 0;

  uint64_t bytes(MediaType medium) const {
    return medium == MediaType::kSsd ? ssd_bytes : dram_bytes;
  }
  bool operator==(const TenantQuota&) const = default;
};

struct TenantUsage {
  std::string tenant;
  TenantQuota quota;
  // Per medium (MediaType's number): published bytes whose scope is not freed yet, and bytes of
  // reservations neither published nor aborted.
  uint64_t used_bytes[2] = {0, 0};
  uint64_t reserved_bytes[2] = {0, 0};
};

class TenantLedger {
 public:
  // `quotas` by tenant name; a tenant not listed gets `default_quota`.
  TenantLedger(std::map<std::string, TenantQuota, std::less<>> quotas, TenantQuota default_quota);

  // Counts a reservation of `bytes` on `medium` for `tenant`. NoSpace, counting nothing, when the
  // tenant's used and reserved bytes there plus `bytes` would exceed its quota (the message names
  // the quota, the use and the request).
  Status Reserve(std::string_view tenant, MediaType medium, uint64_t bytes) EXCLUDES(mu_);
  // A reservation counted by Reserve ended unpublished.
  void Unreserve(std::string_view tenant, MediaType medium, uint64_t bytes) EXCLUDES(mu_);
  // A reservation counted by Reserve was published into scope (scope_id, scope_gen): its bytes
  // count as used until that scope is freed.
  void Publish(std::string_view tenant, MediaType medium, uint64_t bytes, uint32_t scope_id,
               uint32_t scope_gen) EXCLUDES(mu_);
  // Scope (id, gen) was freed: what was published into it no longer counts.
  void OnScopeReleased(uint32_t id, uint32_t gen) EXCLUDES(mu_);

  // Every tenant that has reserved anything since the start, by name.
  std::vector<TenantUsage> Usage() const EXCLUDES(mu_);
  TenantUsage UsageOf(std::string_view tenant) const EXCLUDES(mu_);

 private:
  struct Account {
    TenantQuota quota;
    uint64_t used[2] = {0, 0};
    uint64_t reserved[2] = {0, 0};
  };
  // What one reservation published into a scope.
  struct Charge {
    Account* account;
    int medium;
    uint64_t bytes;
  };
  Account& AccountOf(std::string_view tenant) REQUIRES(mu_);
  static TenantUsage UsageOfAccount(const std::string& name, const Account& a);
  static uint64_t ScopeKey(uint32_t id, uint32_t gen) { return (uint64_t{id} << 32) | gen; }

  const std::map<std::string, TenantQuota, std::less<>> quotas_;
  const TenantQuota default_quota_;
  mutable Mutex mu_;
  // Node-based: an Account's address is stable, so Charges point at it.
  std::map<std::string, Account, std::less<>> accounts_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, std::vector<Charge>> scopes_ GUARDED_BY(mu_);
};

}  // namespace flatcake::serve
