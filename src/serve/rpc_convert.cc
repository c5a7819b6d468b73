#include "serve/rpc_convert.h"

#include <bit>
#include <cstring>
#include <iterator>

#include "serve/wire.h"

namespace flatcake::serve {

static_assert(std::endian::native == std::endian::little,
              "key blobs are copied as little-endian words (the project targets little-endian "
              "hosts)");
// rpc::Code numbers a StatusCode as the enum does, so a Status converts by a cast.
#define FC_SAME_CODE(rpc_code, status_code) \
  static_assert(static_cast<int>(rpc::rpc_code) == static_cast<int>(StatusCode::status_code))
FC_SAME_CODE(CODE_OK, kOk);
FC_SAME_CODE(CODE_NOT_FOUND, kNotFound);
FC_SAME_CODE(CODE_CORRUPTION, kCorruption);
FC_SAME_CODE(CODE_INVALID_ARGUMENT, kInvalidArgument);
FC_SAME_CODE(CODE_IO_ERROR, kIOError);
FC_SAME_CODE(CODE_NO_SPACE, kNoSpace);
FC_SAME_CODE(CODE_BUSY, kBusy);
FC_SAME_CODE(CODE_UNSUPPORTED, kUnsupported);
FC_SAME_CODE(CODE_ABORTED, kAborted);
FC_SAME_CODE(CODE_PERMISSION_DENIED, kPermissionDenied);
FC_SAME_CODE(CODE_DEADLINE_EXCEEDED, kDeadlineExceeded);
#undef FC_SAME_CODE

namespace {

void AppendKey(const Key& key, std::string& out) {
  char bytes[kKeyBytes];
  std::memcpy(bytes, &key.hi, sizeof(key.hi));
  std::memcpy(bytes + sizeof(key.hi), &key.lo, sizeof(key.lo));
  out.append(bytes, kKeyBytes);
}

Key LoadKey(const char* bytes) {
  Key key;
  std::memcpy(&key.hi, bytes, sizeof(key.hi));
  std::memcpy(&key.lo, bytes + sizeof(key.hi), sizeof(key.lo));
  return key;
}

// Each counter once, for both directions: the struct's field and the message's accessors.
template <typename Struct, typename Message>
struct CounterField {
  uint64_t Struct::*field;
  uint64_t (Message::*get)() const;
  void (Message::*set)(uint64_t);
};
#define FC_COUNTER(Struct, Message, name) \
  CounterField<Struct, Message> { &Struct::name, &Message::name, &Message::set_##name }
#define FC_MEDIUM_COUNTER(name) FC_COUNTER(MediumStats, rpc::MediumStats, name)
#define FC_STORE_COUNTER(name) FC_COUNTER(StoreStats, rpc::StatsReply, name)

constexpr CounterField<MediumStats, rpc::MediumStats> kMediumCounters[] = {
    FC_MEDIUM_COUNTER(capacity_bytes),   FC_MEDIUM_COUNTER(used_bytes),
    FC_MEDIUM_COUNTER(admitted_bytes),   FC_MEDIUM_COUNTER(written_bytes),
    FC_MEDIUM_COUNTER(read_bytes),       FC_MEDIUM_COUNTER(delivered_bytes),
    FC_MEDIUM_COUNTER(reclaimed_bytes),  FC_MEDIUM_COUNTER(scopes_live),
    FC_MEDIUM_COUNTER(scopes_reclaimed), FC_MEDIUM_COUNTER(blocks_live),
};
constexpr CounterField<StoreStats, rpc::StatsReply> kStoreCounters[] = {
    FC_STORE_COUNTER(puts),
    FC_STORE_COUNTER(gets),
    FC_STORE_COUNTER(exists_calls),
    FC_STORE_COUNTER(restores_dram_ready),
    FC_STORE_COUNTER(restores_ssd),
    FC_STORE_COUNTER(restores_cancelled),
    FC_STORE_COUNTER(restore_window_peak_bytes),
    FC_STORE_COUNTER(blocks_written),
    FC_STORE_COUNTER(blocks_skipped_present),
    FC_STORE_COUNTER(hits),
    FC_STORE_COUNTER(misses),
    FC_STORE_COUNTER(checksum_mismatches),
    FC_STORE_COUNTER(io_errors),
    FC_STORE_COUNTER(index_capacity),
    FC_STORE_COUNTER(index_size),
    FC_STORE_COUNTER(index_tombstones),
    FC_STORE_COUNTER(index_compactions),
    FC_STORE_COUNTER(sessions),
    FC_STORE_COUNTER(journal_bytes),
    FC_STORE_COUNTER(journal_rewrites),
    FC_STORE_COUNTER(journal_errors),
    FC_STORE_COUNTER(syncs),
    FC_STORE_COUNTER(recovered_blocks),
    FC_STORE_COUNTER(recovered_segments),
    FC_STORE_COUNTER(skipped_records),
};
#undef FC_STORE_COUNTER
#undef FC_MEDIUM_COUNTER
#undef FC_COUNTER
static_assert(std::size(kMediumCounters) * sizeof(uint64_t) == sizeof(MediumStats),
              "a MediumStats field is missing from kMediumCounters (and rpc.MediumStats)");
static_assert(std::size(kStoreCounters) * sizeof(uint64_t) + 2 * sizeof(MediumStats) ==
                  sizeof(StoreStats),
              "a StoreStats field is missing from kStoreCounters (and rpc.StatsReply)");

template <typename Struct, typename Message, size_t N>
void CopyToMessage(const Struct& in, const CounterField<Struct, Message> (&fields)[N],
                   Message& out) {
  for (const auto& f : fields) (out.*f.set)(in.*f.field);
}

template <typename Struct, typename Message, size_t N>
void CopyFromMessage(const Message& in, const CounterField<Struct, Message> (&fields)[N],
                     Struct& out) {
  for (const auto& f : fields) out.*f.field = (in.*f.get)();
}

}  // namespace

std::string EncodeKeys(std::span<const Key> keys) {
  std::string out;
  out.reserve(keys.size() * kKeyBytes);
  for (const Key& key : keys) AppendKey(key, out);
  return out;
}

Result<size_t> CountKeys(std::string_view blob, size_t max_keys) {
  if (blob.size() % kKeyBytes != 0) {
    return Status::InvalidArgument("key blob of " + std::to_string(blob.size()) +
                                   " bytes is not a whole number of 16-byte keys");
  }
  const size_t count = blob.size() / kKeyBytes;
  if (count > max_keys) {
    return Status::InvalidArgument("batch of " + std::to_string(count) +
                                   " keys exceeds the limit of " + std::to_string(max_keys));
  }
  return count;
}

Result<std::vector<Key>> DecodeKeys(std::string_view blob, size_t max_keys) {
  FC_ASSIGN_OR_RETURN(const size_t count, CountKeys(blob, max_keys));
  std::vector<Key> keys(count);
  for (size_t i = 0; i < count; ++i) keys[i] = LoadKey(blob.data() + i * kKeyBytes);
  return keys;
}

Result<Key> DecodeKey(std::string_view bytes) {
  if (bytes.size() != kKeyBytes) {
    return Status::InvalidArgument("a key is 16 bytes, not " + std::to_string(bytes.size()));
  }
  return LoadKey(bytes.data());
}

rpc::Medium ToRpc(MediaType medium) {
  return medium == MediaType::kSsd ? rpc::MEDIUM_SSD : rpc::MEDIUM_DRAM;
}

Result<MediaType> FromRpc(rpc::Medium medium) {
  switch (medium) {
    case rpc::MEDIUM_DRAM: return MediaType::kDram;
    case rpc::MEDIUM_SSD: return MediaType::kSsd;
    default: break;
  }
  return Status::InvalidArgument("unknown medium " + std::to_string(static_cast<int>(medium)));
}

rpc::KvLayout ToRpc(const KvLayout& layout) {
  rpc::KvLayout out;
  out.set_num_layers(layout.num_layers);
  out.set_num_planes(layout.num_planes);
  out.set_slice_bytes(layout.slice_bytes);
  return out;
}

KvLayout FromRpc(const rpc::KvLayout& layout) {
  return KvLayout{layout.num_layers(), layout.num_planes(), layout.slice_bytes()};
}

rpc::WriteHints ToRpc(const WriteHints& hints) {
  rpc::WriteHints out;
  out.set_session(hints.session);
  if (hints.prefix_tail) {
    const Key tail = *hints.prefix_tail;
    out.set_prefix_tail(EncodeKeys(std::span<const Key>(&tail, 1)));
  }
  out.set_turn(hints.turn);
  if (hints.prior_reply_tokens) out.set_prior_reply_tokens(*hints.prior_reply_tokens);
  if (hints.context_tokens) out.set_context_tokens(*hints.context_tokens);
  out.set_shared_prefix(hints.shared_prefix);
  if (hints.force_medium) out.set_force_medium(ToRpc(*hints.force_medium));
  return out;
}

Result<WriteHints> FromRpc(const rpc::WriteHints& hints) {
  WriteHints out;
  if (hints.session().size() > kMaxSessionBytes) {
    return Status::InvalidArgument("session name of " + std::to_string(hints.session().size()) +
                                   " bytes exceeds " + std::to_string(kMaxSessionBytes));
  }
  out.session = hints.session();
  if (hints.has_prefix_tail()) {
    Result<Key> tail = DecodeKey(hints.prefix_tail());
    if (!tail.ok()) return tail.status().WithContext("prefix_tail");
    out.prefix_tail = *tail;
  }
  out.turn = hints.turn();
  if (hints.has_prior_reply_tokens()) out.prior_reply_tokens = hints.prior_reply_tokens();
  if (hints.has_context_tokens()) out.context_tokens = hints.context_tokens();
  out.shared_prefix = hints.shared_prefix();
  if (hints.has_force_medium()) {
    Result<MediaType> medium = FromRpc(hints.force_medium());
    if (!medium.ok()) return medium.status().WithContext("force_medium");
    out.force_medium = *medium;
  }
  return out;
}

rpc::Error ToRpc(const Status& status) {
  rpc::Error out;
  // rpc::Code numbers are StatusCode's (flatcake_rpc.proto).
  out.set_code(static_cast<rpc::Code>(status.code()));
  out.set_message(std::string(status.message()));
  return out;
}

Status FromRpc(const rpc::Error& error) {
  const std::string& msg = error.message();
  switch (error.code()) {
    case rpc::CODE_NOT_FOUND: return Status::NotFound(msg);
    case rpc::CODE_CORRUPTION: return Status::Corruption(msg);
    case rpc::CODE_INVALID_ARGUMENT: return Status::InvalidArgument(msg);
    case rpc::CODE_IO_ERROR: return Status::IOError(msg);
    case rpc::CODE_NO_SPACE: return Status::NoSpace(msg);
    case rpc::CODE_BUSY: return Status::Busy(msg);
    case rpc::CODE_UNSUPPORTED: return Status::Unsupported(msg);
    case rpc::CODE_ABORTED: return Status::Aborted(msg);
    case rpc::CODE_PERMISSION_DENIED: return Status::PermissionDenied(msg);
    case rpc::CODE_DEADLINE_EXCEEDED: return Status::DeadlineExceeded(msg);
    default: break;  // CODE_OK, or a code of a newer peer
  }
  return Status::IOError("error code " + std::to_string(static_cast<int>(error.code())) + ": " +
                         msg);
}

rpc::LookupReply ToRpc(const LookupResult& result) {
  rpc::LookupReply out;
  out.set_leading_hits(result.leading_hits);
  out.set_slowest_medium(ToRpc(result.slowest_medium));
  out.set_dram_bytes(result.dram_bytes);
  out.set_ssd_bytes(result.ssd_bytes);
  return out;
}

Result<LookupResult> FromRpc(const rpc::LookupReply& reply) {
  FC_ASSIGN_OR_RETURN(const MediaType slowest, FromRpc(reply.slowest_medium()));
  LookupResult out;
  out.leading_hits = reply.leading_hits();
  out.slowest_medium = slowest;
  out.dram_bytes = reply.dram_bytes();
  out.ssd_bytes = reply.ssd_bytes();
  return out;
}

rpc::StatsReply ToRpc(const StoreStats& stats) {
  rpc::StatsReply out;
  CopyToMessage(stats.dram, kMediumCounters, *out.mutable_dram());
  CopyToMessage(stats.ssd, kMediumCounters, *out.mutable_ssd());
  CopyToMessage(stats, kStoreCounters, out);
  return out;
}

StoreStats FromRpc(const rpc::StatsReply& reply) {
  StoreStats out;
  CopyFromMessage(reply.dram(), kMediumCounters, out.dram);
  CopyFromMessage(reply.ssd(), kMediumCounters, out.ssd);
  CopyFromMessage(reply, kStoreCounters, out);
  return out;
}

rpc::ClusterViewReply ToRpc(const ClusterViewInfo& view) {
  rpc::ClusterViewReply out;
  out.set_enabled(view.enabled);
  if (!view.enabled) return out;
  out.set_node_id(view.node_id);
  out.set_etcd_reachable(view.etcd_reachable);
  for (const ClusterViewMember& m : view.members) {
    rpc::ClusterMember* r = out.add_members();
    r->set_node_id(m.node_id);
    r->set_name(m.name);
    r->set_data_address(m.data_address);
    r->set_capacity_bytes(m.capacity_bytes);
    r->set_healthy(m.healthy);
  }
  return out;
}

ClusterViewInfo FromRpc(const rpc::ClusterViewReply& reply) {
  ClusterViewInfo out;
  out.enabled = reply.enabled();
  out.node_id = reply.node_id();
  out.etcd_reachable = reply.etcd_reachable();
  for (const rpc::ClusterMember& m : reply.members()) {
    out.members.push_back(ClusterViewMember{m.node_id(), m.name(), m.data_address(),
                                            m.capacity_bytes(), m.healthy()});
  }
  return out;
}

}  // namespace flatcake::serve
