#include "serve/tenants.h"

#include <xxhash.h>

#include <cstring>
#include <utility>

#include "serve/wire.h"

namespace flatcake::serve {
namespace {

// The hash's seed: names this derivation, so that no other use of XXH3 in the tree (KeyFromId,
// KeyFromString, checksums) produces the same keys from the same bytes.
constexpr uint64_t kNamespaceSeed = 0x666c6174'74656e74;  // "flattent"
// Between the tenant and the key: a byte no tenant name holds ([A-Za-z0-9._-]).
constexpr char kSeparator = '\xff';

std::string_view MediumName(int m) { return m == 0 ? "DRAM" : "SSD"; }

}  // namespace

TenantNamespace::TenantNamespace(std::string tenant) : tenant_(std::move(tenant)) {}

Key TenantNamespace::StoredKey(const Key& key) const {
  char buf[kMaxTenantBytes + 1 + 2 * sizeof(uint64_t)];
  const size_t n = std::min(tenant_.size(), kMaxTenantBytes);
  std::memcpy(buf, tenant_.data(), n);
  buf[n] = kSeparator;
  std::memcpy(buf + n + 1, &key.hi, sizeof(key.hi));
  std::memcpy(buf + n + 1 + sizeof(key.hi), &key.lo, sizeof(key.lo));
  const XXH128_hash_t h = XXH3_128bits_withSeed(buf, n + 1 + 2 * sizeof(uint64_t), kNamespaceSeed);
  return Key{h.high64, h.low64};
}

std::vector<Key> TenantNamespace::StoredKeys(std::span<const Key> keys) const {
  std::vector<Key> out;
  out.reserve(keys.size());
  for (const Key& k : keys) out.push_back(StoredKey(k));
  return out;
}

WriteHints TenantNamespace::StoredHints(WriteHints hints) const {
  if (!hints.session.empty()) hints.session = "t/" + tenant_ + "/" + hints.session;
  if (hints.prefix_tail) hints.prefix_tail = StoredKey(*hints.prefix_tail);
  return hints;
}

TenantLedger::TenantLedger(std::map<std::string, TenantQuota, std::less<>> quotas,
                           TenantQuota default_quota)
    : quotas_(std::move(quotas)), default_quota_(default_quota) {}

TenantLedger::Account& TenantLedger::AccountOf(std::string_view tenant) {
  auto it = accounts_.find(tenant);
  if (it != accounts_.end()) return it->second;
  Account a;
  auto q = quotas_.find(tenant);
  a.quota = q != quotas_.end() ? q->second : default_quota_;
  return accounts_.emplace(std::string(tenant), a).first->second;
}

Status TenantLedger::Reserve(std::string_view tenant, MediaType medium, uint64_t bytes) {
  const int m = static_cast<int>(medium);
  MutexLock lock(mu_);
  Account& a = AccountOf(tenant);
  const uint64_t quota = a.quota.bytes(medium);
  const uint64_t held = a.used[m] + a.reserved[m];
  if (quota != 0 && (held > quota || bytes > quota - held)) {
    return Status::NoSpace("tenant '" + std::string(tenant) + "' would exceed its " +
                           std::string(MediumName(m)) + " quota of " + std::to_string(quota) +
                           " bytes: " + std::to_string(a.used[m]) + " in use, " +
                           std::to_string(a.reserved[m]) + " reserved, " + std::to_string(bytes) +
                           " requested");
  }
  a.reserved[m] += bytes;
  return Status::OK();
}

void TenantLedger::Unreserve(std::string_view tenant, MediaType medium, uint64_t bytes) {
  const int m = static_cast<int>(medium);
  MutexLock lock(mu_);
  Account& a = AccountOf(tenant);
  a.reserved[m] -= std::min(a.reserved[m], bytes);
}

void TenantLedger::Publish(std::string_view tenant, MediaType medium, uint64_t bytes,
                           uint32_t scope_id, uint32_t scope_gen) {
  const int m = static_cast<int>(medium);
  MutexLock lock(mu_);
  Account& a = AccountOf(tenant);
  a.reserved[m] -= std::min(a.reserved[m], bytes);
  a.used[m] += bytes;
  scopes_[ScopeKey(scope_id, scope_gen)].push_back(Charge{&a, m, bytes});
}

void TenantLedger::OnScopeReleased(uint32_t id, uint32_t gen) {
  MutexLock lock(mu_);
  auto it = scopes_.find(ScopeKey(id, gen));
  if (it == scopes_.end()) return;
  for (const Charge& c : it->second) {
    c.account->used[c.medium] -= std::min(c.account->used[c.medium], c.bytes);
  }
  scopes_.erase(it);
}

TenantUsage TenantLedger::UsageOfAccount(const std::string& name, const Account& a) {
  TenantUsage u;
  u.tenant = name;
  u.quota = a.quota;
  for (int m = 0; m < 2; ++m) {
    u.used_bytes[m] = a.used[m];
    u.reserved_bytes[m] = a.reserved[m];
  }
  return u;
}

std::vector<TenantUsage> TenantLedger::Usage() const {
  MutexLock lock(mu_);
  std::vector<TenantUsage> out;
  out.reserve(accounts_.size());
  for (const auto& [name, a] : accounts_) out.push_back(UsageOfAccount(name, a));
  return out;
}

TenantUsage TenantLedger::UsageOf(std::string_view tenant) const {
  MutexLock lock(mu_);
  auto it = accounts_.find(tenant);
  if (it != accounts_.end()) return UsageOfAccount(it->first, it->second);
  TenantUsage u;
  u.tenant = std::string(tenant);
  auto q = quotas_.find(tenant);
  u.quota = q != quotas_.end() ? q->second : default_quota_;
  return u;
}

}  // namespace flatcake::serve
