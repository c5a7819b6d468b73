// Conversions between the protocol's messages (serve/flatcake_rpc.proto) and the store's own
// types (include/flatcake/): the one place both the daemon and its clients translate keys,
// layouts, hints, statuses, lookups and statistics, so the two sides cannot drift apart.
//
// Conversions from a message take what a peer sent and check it (a FromRpc that can meet bad
// input returns a Result); conversions to a message cannot fail. Pure functions; thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flatcake/gva.h"
#include "flatcake/key.h"
#include "flatcake/layout.h"
#include "flatcake/status.h"
#include "flatcake/store.h"
#include "serve/cluster_view.h"
#include "serve/flatcake_rpc.pb.h"

namespace flatcake::serve {

// Bytes of one key in a key blob: `hi` then `lo`, each little-endian.
inline constexpr size_t kKeyBytes = 16;

// A batch of keys as one blob of kKeyBytes per key.
std::string EncodeKeys(std::span<const Key> keys);
// The keys of a blob. InvalidArgument when its length is not a multiple of kKeyBytes or it holds
// more than `max_keys` keys (checked before anything is allocated).
Result<std::vector<Key>> DecodeKeys(std::string_view blob, size_t max_keys);
// The same checks without decoding: the number of keys in the blob.
Result<size_t> CountKeys(std::string_view blob, size_t max_keys);
// One key (WriteHints.prefix_tail): InvalidArgument unless exactly kKeyBytes.
Result<Key> DecodeKey(std::string_view bytes);

rpc::Medium ToRpc(MediaType medium);
// InvalidArgument for a number that is no medium (proto3 enums carry any int).
Result<MediaType> FromRpc(rpc::Medium medium);

rpc::KvLayout ToRpc(const KvLayout& layout);
// Not validated: ValidateKvLayout is the caller's (ValidateRequest runs it on requests).
KvLayout FromRpc(const rpc::KvLayout& layout);

rpc::WriteHints ToRpc(const WriteHints& hints);
// InvalidArgument for a prefix_tail that is not one key, an unknown force_medium or a session
// longer than kMaxSessionBytes (serve/wire.h).
Result<WriteHints> FromRpc(const rpc::WriteHints& hints);

// REQUIRES: !status.ok().
rpc::Error ToRpc(const Status& status);
// Never OK: an Error with CODE_OK, or a code this build does not know, becomes IOError (the
// message names the code), since the request failed in a way the caller cannot classify.
Status FromRpc(const rpc::Error& error);

rpc::LookupReply ToRpc(const LookupResult& result);
// InvalidArgument for an unknown slowest_medium.
Result<LookupResult> FromRpc(const rpc::LookupReply& reply);

rpc::StatsReply ToRpc(const StoreStats& stats);
StoreStats FromRpc(const rpc::StatsReply& reply);

// The cluster view a daemon answers ClusterView with, and back.
rpc::ClusterViewReply ToRpc(const ClusterViewInfo& view);
ClusterViewInfo FromRpc(const rpc::ClusterViewReply& reply);

}  // namespace flatcake::serve
