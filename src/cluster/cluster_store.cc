#include "cluster/cluster_store.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "cluster/peer_service.h"
#include "cluster/rendezvous.h"
#include "serve/rpc_convert.h"
#include "util/checksum.h"

namespace flatcake::cluster {

using Clock = std::chrono::steady_clock;

// The slowest a home may stream a restore's SSD layers before the restore gives up on it.
constexpr double kMinStreamBytesPerSecond = 100e6;

// A restore from a remote home, run on its own thread (Run), reported per layer.
class ClusterStore::RemoteRestore final : public RestoreHandle {
 public:
  RemoteRestore(ClusterStore* store, uint32_t node, std::vector<Key> keys, KvLayout layout,
                std::vector<void*> ptrs, BufferKind kind, RestoreOptions options)
      : store_(store),
        node_(node),
        keys_(std::move(keys)),
        layout_(layout),
        ptrs_(std::move(ptrs)),
        kind_(kind),
        options_(std::move(options)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~RemoteRestore() override {
    Cancel();
    thread_.join();
  }

  Result<GetResult> Wait() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    while (!done_) cv_.Wait(mu_);
    return result_;
  }
  bool WaitFor(std::chrono::nanoseconds timeout) override EXCLUDES(mu_) {
    const auto until = Clock::now() + timeout;
    MutexLock lock(mu_);
    while (!done_) {
      if (!cv_.WaitUntil(mu_, until)) return done_;
    }
    return true;
  }
  Status WaitLayer(uint32_t layer) override EXCLUDES(mu_) {
    if (layer >= layout_.num_layers) {
      return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range");
    }
    MutexLock lock(mu_);
    while (layers_ <= layer && !done_) cv_.Wait(mu_);
    if (layers_ > layer) return Status::OK();
    return result_.ok() ? Status::OK() : result_.status();
  }
  bool done() const override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return done_;
  }
  void Cancel() override { cancelled_.store(true); }

 private:
  BlockBuffers Buffers() const { return BlockBuffers{kind_, ptrs_}; }

  void ReportLayer(uint32_t layer) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      layers_ = layer + 1;
    }
    cv_.NotifyAll();
    if (options_.on_layer) options_.on_layer(layer);
  }

  void Finish(Result<GetResult> r) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      result_ = std::move(r);
      done_ = true;
    }
    cv_.NotifyAll();
  }

  void Run() {
    GetResult out;
    out.found.assign(keys_.size(), 0);
    if (cancelled_.load()) return Finish(Status::Aborted("restore cancelled"));
    auto peer = store_->PeerOf(node_);
    if (!peer.ok()) return Finish(std::move(out));  // every block a miss
    rpc::PeerRestore req;
    req.set_from_node(store_->local_node_id());
    req.set_tenant(store_->local_->tenant());
    req.set_keys(serve::EncodeKeys(keys_));
    *req.mutable_layout() = serve::ToRpc(layout_);
    // The window of layer requests ReadSsdLayers keeps (saying in each which layers it has): that
    // of a layer of every key (the most SSD hits there can be), unless the home answers the one
    // for the layer of the SSD hits it found, at most that of one SSD hit's layer.
    const uint64_t hit_layer = uint64_t{layout_.num_planes} * layout_.slice_bytes;
    const uint32_t window = store_->layer_window(keys_.size() * hit_layer);
    const uint32_t most = store_->layer_window(hit_layer);
    req.set_layer_window(window);
    req.set_layer_window_bytes(store_->options_.layer_window_bytes);
    req.set_layer_window_most(most);
    const auto timeout = store_->options_.timeout;
    auto reply =
        store_->ucx_->CallSync(peer->address, kPeerRestore, req.SerializeAsString(), {}, timeout);
    rpc::PeerRestoreReply pinned;
    if (!reply.ok() || !pinned.ParseFromString(reply->first) ||
        pinned.blocks_size() != static_cast<int>(keys_.size())) {
      // A layout stored otherwise is the caller's error, as the local path reports it.
      if (!reply.ok() && reply.status().code() == StatusCode::kInvalidArgument) {
        return Finish(reply.status());
      }
      return Finish(std::move(out));  // every block a miss
    }
    // DRAM hits: one-sided gets from the home's arena into the caller's slices.
    std::vector<UcxNode::GetPiece> pieces;
    std::vector<uint32_t> ssd;  // indices of the SSD hits, in key order
    for (uint32_t i = 0; i < keys_.size(); ++i) {
      const rpc::BlockLocation& b = pinned.blocks(static_cast<int>(i));
      if (!b.found()) continue;
      if (b.medium() == rpc::MEDIUM_SSD) {
        ssd.push_back(i);
        continue;
      }
      for (uint32_t l = 0; l < layout_.num_layers; ++l) {
        for (uint32_t p = 0; p < layout_.num_planes; ++p) {
          pieces.push_back(UcxNode::GetPiece{
              SliceAddress(Buffers(), layout_, i, l, p),
              peer->arena_base + b.offset() + l * b.layer_stride() + p * b.plane_stride(),
              layout_.slice_bytes});
        }
      }
    }
    Status st;
    if (!pieces.empty()) {
      st = peer->arena_base == 0
               ? Status::IOError("the home has no DRAM arena")
               : store_->ucx_->GetSync(peer->address, peer->arena_rkey, std::move(pieces), timeout);
    }
    std::vector<uint8_t> ssd_ok(ssd.size(), 0);
    std::vector<uint64_t> ssd_sums(ssd.size(), 0);  // BlockChecksum of each, summed as layers land
    if (st.ok() && !ssd.empty()) {
      // A home that does not answer sized its ring by the window sent.
      const uint32_t answered = pinned.layer_window();
      const bool keep = answered > 0 && answered <= most;
      st = ReadSsdLayers(*peer, pinned.restore_id(), keep ? answered : window, ssd, &ssd_sums);
    }
    // Layers the SSD path did not report (none of its own): report them now, in order.
    if (st.ok() && ssd.empty()) {
      for (uint32_t l = 0; l < layout_.num_layers; ++l) ReportLayer(l);
    }
    // After a failure the blocks are misses whatever the home would say, and the home may be
    // cut off: no end is sent (a new connection to an unreachable home can hold up the worker),
    // its sweeper ends the restore after its TTL.
    if (pinned.restore_id() != 0 && st.ok()) {
      rpc::PeerRestoreEnd end;
      end.set_restore_id(pinned.restore_id());
      auto ended = store_->ucx_->CallSync(peer->address, kPeerRestoreEnd, end.SerializeAsString(),
                                          {}, timeout);
      rpc::PeerRestoreEndReply found;
      if (ended.ok() && found.ParseFromString(ended->first)) {
        for (size_t j = 0; j < ssd.size() && j < found.ssd_found().size(); ++j) {
          ssd_ok[j] = found.ssd_found()[j] != 0;
        }
      }
    }
    if (!st.ok()) return Finish(std::move(out));  // the home died or timed out: all misses
    Verify(pinned, ssd_ok, ssd_sums, &out);
    Finish(std::move(out));
  }

  // Verifies every block the home found, here: what crossed the network is what was stored. The
  // SSD hits (in key order) by the home's word that each was read whole (`ssd_ok`) and the sums of
  // their slices' checksums taken as they landed (`ssd_sums`), the DRAM hits by a pass over them.
  void Verify(const rpc::PeerRestoreReply& pinned, const std::vector<uint8_t>& ssd_ok,
              const std::vector<uint64_t>& ssd_sums, GetResult* out) const {
    size_t next_ssd = 0;
    for (uint32_t i = 0; i < keys_.size(); ++i) {
      const rpc::BlockLocation& b = pinned.blocks(static_cast<int>(i));
      if (!b.found()) continue;
      bool ok = true;
      const bool from_ssd = b.medium() == rpc::MEDIUM_SSD;
      if (from_ssd) ok = ssd_ok[next_ssd] != 0;
      const uint64_t sum = from_ssd ? ssd_sums[next_ssd++] : BlockChecksum(Buffers(), layout_, i);
      if (ok && sum != b.checksum()) {
        ok = false;
        out->corrupt++;
      }
      if (!ok) continue;
      out->found[i] = 1;
      out->hits++;
      (from_ssd ? out->bytes_from_ssd : out->bytes_from_dram) += layout_.block_bytes();
    }
    while (out->leading_hits < keys_.size() && out->found[out->leading_hits]) out->leading_hits++;
  }

  // Streams the layers of the SSD hits, `most_in_flight` (at least 1) requests at a time (the
  // window the home sized its ring by), the next layer asked for as each reply arrives; each
  // request says how many leading layers have arrived, so that the home may reuse their buffers
  // (PeerRestore.layer_window). A reply lands in a buffer of the UCX node's; this thread scatters
  // it into the caller's slices, adding each slice's checksum to its hit's sum in `sums` in the
  // same pass, and gives the buffer back. So the node's progress thread only receives (while this
  // thread copies one layer, it takes in the next ones), and verifying the blocks takes no pass
  // over them after the last layer. Layers are reported in order as they are scattered. Returns at
  // the first failed layer: replies still on their way go to buffers of the node's, not the
  // caller's.
  Status ReadSsdLayers(const Peer& peer, uint64_t restore_id, uint32_t most_in_flight,
                       const std::vector<uint32_t>& ssd, std::vector<uint64_t>* sums) {
    const uint32_t layers = layout_.num_layers;
    const uint32_t window = std::min(std::max(most_in_flight, 1u), layers);
    const uint64_t run = ssd.size() * layout_.num_planes * layout_.slice_bytes;
    struct Reply {
      uint32_t layer = 0;
      Status status;
      std::string data;
    };
    struct Shared {
      Mutex mu;
      CondVar cv;
      std::vector<Reply> replies GUARDED_BY(mu);  // arrived, not yet taken
      uint32_t outstanding GUARDED_BY(mu) = 0;
    };
    auto shared = std::make_shared<Shared>();
    std::vector<uint8_t> landed(layers, 0);
    uint32_t received = 0;  // layers [0, received) have landed
    const auto issue = [&](uint32_t l) {
      rpc::PeerLayer req;
      req.set_restore_id(restore_id);
      req.set_layer(l);
      req.set_received(received);
      // Layers land in order, each after the ones before it: a later layer's deadline leaves
      // room for the bytes ahead of it at kMinStreamBytesPerSecond.
      const auto deadline =
          store_->options_.timeout +
          std::chrono::milliseconds(static_cast<int64_t>(1e3 * static_cast<double>((l + 1) * run) /
                                                         kMinStreamBytesPerSecond));
      {
        MutexLock lock(shared->mu);
        shared->outstanding++;
      }
      store_->ucx_->Call(peer.address, kPeerLayer, req.SerializeAsString(), {}, deadline,
                         [shared, l](Status st, std::string, std::string data) {
                           {
                             MutexLock lock(shared->mu);
                             shared->replies.push_back({l, std::move(st), std::move(data)});
                             shared->outstanding--;
                           }
                           shared->cv.NotifyAll();
                         });
    };
    for (uint32_t l = 0; l < window; ++l) issue(l);
    uint32_t reported = 0;  // layers reported, in order
    for (;;) {
      std::vector<Reply> got;
      uint32_t outstanding;
      {
        MutexLock lock(shared->mu);
        while (shared->replies.empty() && shared->outstanding > 0) shared->cv.Wait(shared->mu);
        got.swap(shared->replies);
        outstanding = shared->outstanding;
      }
      for (Reply& r : got) {
        if (r.status.ok() && r.data.size() != run) {
          r.status = Status::Corruption("a layer of " + std::to_string(r.data.size()) +
                                        " bytes where " + std::to_string(run) + " were due");
        }
        if (!r.status.ok()) return r.status;
        ScatterLayer(r.layer, r.data, ssd, sums);
        landed[r.layer] = 1;
        while (received < layers && landed[received]) ++received;
        store_->ucx_->Reuse(std::move(r.data));
        if (r.layer + window < layers) {
          issue(r.layer + window);
          outstanding++;
        }
      }
      for (; reported < received; ++reported) ReportLayer(reported);
      if (outstanding == 0) return Status::OK();
    }
  }

  // Copies layer `layer` of the SSD hits from `data` (the home's [plane][hit] slices) into the
  // caller's slices, adding each slice's checksum to its hit's sum.
  void ScatterLayer(uint32_t layer, const std::string& data, const std::vector<uint32_t>& ssd,
                    std::vector<uint64_t>* sums) {
    const uint32_t planes = layout_.num_planes;
    const uint64_t slice = layout_.slice_bytes;
    const char* src = data.data();
    for (uint32_t p = 0; p < planes; ++p) {
      for (size_t j = 0; j < ssd.size(); ++j, src += slice) {
        (*sums)[j] += CopySliceWithChecksum(SliceAddress(Buffers(), layout_, ssd[j], layer, p), src,
                                            slice, layer * planes + p, CopyStores::kStreaming);
      }
    }
    FenceStreamingStores();  // before the layer is reported
  }

  ClusterStore* const store_;
  const uint32_t node_;
  const std::vector<Key> keys_;
  const KvLayout layout_;
  const std::vector<void*> ptrs_;
  const BufferKind kind_;
  const RestoreOptions options_;
  std::atomic<bool> cancelled_{false};

  mutable Mutex mu_;
  CondVar cv_;
  bool done_ GUARDED_BY(mu_) = false;
  uint32_t layers_ GUARDED_BY(mu_) = 0;
  Result<GetResult> result_ GUARDED_BY(mu_) = Status::Aborted("not done");
  std::thread thread_;
};

uint32_t ClusterStore::LayerWindow(uint64_t layer_bytes, uint64_t window_bytes) {
  return PeerService::LayerWindow(layer_bytes, window_bytes, kLayerWindow);
}

ClusterStore::ClusterStore(std::unique_ptr<serve::RemoteStore> local, ClusterClientOptions options)
    : local_(std::move(local)), options_(options) {}

ClusterStore::~ClusterStore() = default;

Result<std::unique_ptr<ClusterStore>> ClusterStore::Connect(std::string address, std::string tenant,
                                                            serve::ClientOptions options,
                                                            ClusterClientOptions cluster) {
  FC_ASSIGN_OR_RETURN(std::unique_ptr<serve::RemoteStore> local,
                      serve::RemoteStore::Connect(std::move(address), std::move(tenant), options));
  FC_ASSIGN_OR_RETURN(serve::ClusterViewInfo view, local->ClusterView());
  std::unique_ptr<ClusterStore> s(new ClusterStore(std::move(local), cluster));
  FC_RETURN_IF_ERROR(s->AdoptView(std::move(view)));
  return s;
}

Status ClusterStore::AdoptView(serve::ClusterViewInfo view) {
  bool have_ucx;
  {
    MutexLock lock(mu_);
    have_ucx = ucx_ != nullptr;
  }
  // A daemon in a cluster (at Connect, or since: restarted with --etcd): this client joins it too.
  std::unique_ptr<UcxNode> made;
  if (view.enabled && !have_ucx) {
    FC_ASSIGN_OR_RETURN(made, UcxNode::Create());
  }
  MutexLock lock(mu_);
  if (made != nullptr && ucx_ == nullptr) ucx_ = std::move(made);
  view_ = std::move(view);
  view_at_ = Clock::now();
  return Status::OK();
}

void ClusterStore::RefreshView() {
  {
    MutexLock lock(mu_);
    if (Clock::now() - view_at_ < options_.view_refresh) return;
    view_at_ = Clock::now();  // one refresh at a time is enough
  }
  auto view = local_->ClusterView();
  if (!view.ok()) return;  // the daemon is away: keep the last view
  // Without a UCX worker the client stays a one-node client, tried again at the next refresh.
  (void)AdoptView(std::move(*view));
}

bool ClusterStore::clustered() const {
  MutexLock lock(mu_);
  return view_.enabled && view_.node_id != 0;
}

uint32_t ClusterStore::local_node_id() const {
  MutexLock lock(mu_);
  return view_.enabled ? view_.node_id : 0;
}

std::vector<uint32_t> ClusterStore::Placement(const Key& root) {
  RefreshView();
  MutexLock lock(mu_);
  if (!view_.enabled || view_.node_id == 0) return {};  // not joined (yet): everything is local
  std::vector<RendezvousNode> nodes;
  for (const serve::ClusterViewMember& m : view_.members) {
    if (m.healthy || m.node_id == view_.node_id) {
      nodes.push_back({m.node_id, static_cast<double>(m.capacity_bytes)});
    }
  }
  return RendezvousOrder(root, nodes);
}

Result<ClusterStore::Peer> ClusterStore::PeerOf(uint32_t node) const {
  Peer p;
  {
    MutexLock lock(mu_);
    auto known = peers_.find(node);
    std::string address;
    for (const serve::ClusterViewMember& m : view_.members) {
      if (m.node_id == node) address = m.data_address;
    }
    if (address.empty()) return Status::NotFound("node " + std::to_string(node) + " is no member");
    if (known != peers_.end() && known->second.address == address) {
      return known->second;
    }
    p.address = address;
  }
  rpc::PeerHello hello_req;
  hello_req.set_from_node(local_node_id());
  FC_ASSIGN_OR_RETURN(
      auto reply,
      ucx_->CallSync(p.address, kPeerHello, hello_req.SerializeAsString(), {}, options_.timeout));
  rpc::PeerHelloReply hello;
  if (!hello.ParseFromString(reply.first)) {
    return Status::Corruption("a PeerHello that does not parse");
  }
  if (hello.node_id() != node) {
    return Status::IOError("node " + std::to_string(node) + "'s address answers as node " +
                           std::to_string(hello.node_id()));
  }
  p.arena_base = hello.arena_base();
  p.arena_rkey = hello.arena_rkey();
  MutexLock lock(mu_);
  peers_[node] = p;
  return p;
}

namespace {

void AddMedium(MediumStats& to, const MediumStats& m) {
  to.capacity_bytes += m.capacity_bytes;
  to.used_bytes += m.used_bytes;
  to.admitted_bytes += m.admitted_bytes;
  to.written_bytes += m.written_bytes;
  to.read_bytes += m.read_bytes;
  to.delivered_bytes += m.delivered_bytes;
  to.reclaimed_bytes += m.reclaimed_bytes;
  to.scopes_live += m.scopes_live;
  to.scopes_reclaimed += m.scopes_reclaimed;
  to.blocks_live += m.blocks_live;
}

// Counters add up; a peak is the largest of the members'. (The sizes catch a field added to the
// structs but not here.)
static_assert(sizeof(MediumStats) == 10 * sizeof(uint64_t));
static_assert(sizeof(StoreStats) == 2 * sizeof(MediumStats) + 25 * sizeof(uint64_t));
void AddStats(StoreStats& to, const StoreStats& s) {
  AddMedium(to.dram, s.dram);
  AddMedium(to.ssd, s.ssd);
  to.puts += s.puts;
  to.gets += s.gets;
  to.exists_calls += s.exists_calls;
  to.restores_dram_ready += s.restores_dram_ready;
  to.restores_ssd += s.restores_ssd;
  to.restores_cancelled += s.restores_cancelled;
  to.restore_window_peak_bytes =
      std::max(to.restore_window_peak_bytes, s.restore_window_peak_bytes);
  to.blocks_written += s.blocks_written;
  to.blocks_skipped_present += s.blocks_skipped_present;
  to.hits += s.hits;
  to.misses += s.misses;
  to.checksum_mismatches += s.checksum_mismatches;
  to.io_errors += s.io_errors;
  to.index_capacity += s.index_capacity;
  to.index_size += s.index_size;
  to.index_tombstones += s.index_tombstones;
  to.index_compactions += s.index_compactions;
  to.sessions += s.sessions;
  to.journal_bytes += s.journal_bytes;
  to.journal_rewrites += s.journal_rewrites;
  to.journal_errors += s.journal_errors;
  to.syncs += s.syncs;
  to.recovered_blocks += s.recovered_blocks;
  to.recovered_segments += s.recovered_segments;
  to.skipped_records += s.skipped_records;
}

}  // namespace

StoreStats ClusterStore::GetStats() const {
  StoreStats total = local_->GetStats();
  std::vector<uint32_t> others;
  {
    MutexLock lock(mu_);
    if (ucx_ == nullptr) return total;
    for (const serve::ClusterViewMember& m : view_.members) {
      if (m.healthy && m.node_id != view_.node_id) others.push_back(m.node_id);
    }
  }
  rpc::PeerStats req;
  req.set_from_node(local_node_id());
  const std::string header = req.SerializeAsString();
  for (uint32_t node : others) {
    auto peer = PeerOf(node);
    if (!peer.ok()) continue;
    auto reply = ucx_->CallSync(peer->address, kPeerStats, header, {}, options_.timeout);
    rpc::StatsReply r;
    if (reply.ok() && r.ParseFromString(reply->first)) AddStats(total, serve::FromRpc(r));
  }
  return total;
}

LookupResult ClusterStore::Lookup(std::span<const Key> keys) {
  if (keys.empty()) return local_->Lookup(keys);
  const std::vector<uint32_t> order = Placement(keys[0]);
  if (order.empty()) return local_->Lookup(keys);
  LookupResult home = LookupAt(order[0], keys);
  if (home.leading_hits > 0) {
    ForgetRoot(keys[0]);  // found at home: a copy passed on earlier is not where it is now
    return home;
  }
  // Not even the root at the home: the session may have been passed on by a full home.
  for (size_t i = 1; i < order.size() && i <= kOverflowProbes; ++i) {
    LookupResult r = LookupAt(order[i], keys);
    if (r.leading_hits > 0) {
      Remember(&ClusterStore::roots_, keys[0], order[i]);
      return r;
    }
  }
  return home;
}

LookupResult ClusterStore::LookupAt(uint32_t node, std::span<const Key> keys) {
  return node == local_node_id() ? local_->Lookup(keys) : RemoteLookup(node, keys);
}

uint32_t ClusterStore::NodeOfRoot(const Key& root, const std::vector<uint32_t>& order) {
  MutexLock lock(mu_);
  auto it = roots_.find(root);
  if (it != roots_.end() && std::find(order.begin(), order.end(), it->second) != order.end()) {
    return it->second;
  }
  return order[0];
}

void ClusterStore::Remember(NodeOfKey ClusterStore::*cache, const Key& key, uint32_t node) {
  MutexLock lock(mu_);
  NodeOfKey& map = this->*cache;
  if (map.size() >= kMaxRemembered) map.clear();  // a cache: losing it costs lookups only
  map[key] = node;
}

void ClusterStore::ForgetRoot(const Key& root) {
  MutexLock lock(mu_);
  roots_.erase(root);
}

LookupResult ClusterStore::RemoteLookup(uint32_t node, std::span<const Key> keys) {
  auto peer = PeerOf(node);
  if (!peer.ok()) return {};
  rpc::PeerLookup req;
  req.set_from_node(local_node_id());
  req.set_tenant(local_->tenant());
  req.set_keys(serve::EncodeKeys(keys));
  auto reply =
      ucx_->CallSync(peer->address, kPeerLookup, req.SerializeAsString(), {}, options_.timeout);
  rpc::LookupReply r;
  if (!reply.ok() || !r.ParseFromString(reply->first)) return {};  // the member away: misses
  auto out = serve::FromRpc(r);
  return out.ok() ? *out : LookupResult{};
}

Result<PutResult> ClusterStore::RemotePut(uint32_t node, std::span<const Key> keys,
                                          const KvLayout& layout, const BlockBuffers& src,
                                          const WriteHints& hints) {
  FC_ASSIGN_OR_RETURN(Peer peer, PeerOf(node));
  rpc::PeerPut req;
  req.set_from_node(local_node_id());
  req.set_tenant(local_->tenant());
  req.set_keys(serve::EncodeKeys(keys));
  *req.mutable_layout() = serve::ToRpc(layout);
  *req.mutable_hints() = serve::ToRpc(hints);
  // The blocks, each contiguous [layer][plane], whatever the caller's buffers look like.
  std::string data(keys.size() * layout.block_bytes(), '\0');
  for (uint64_t b = 0; b < keys.size(); ++b) {
    GatherBlock(src, layout, b, reinterpret_cast<uint8_t*>(data.data()) + b * layout.block_bytes());
  }
  FC_ASSIGN_OR_RETURN(auto reply, ucx_->CallSync(peer.address, kPeerPut, req.SerializeAsString(),
                                                 std::move(data), options_.timeout));
  rpc::PeerPutReply r;
  if (!r.ParseFromString(reply.first)) {
    return Status::Corruption("a PeerPut reply that does not parse");
  }
  PutResult out;
  out.written = r.written();
  out.already_present = r.present();
  return out;
}

std::optional<uint32_t> ClusterStore::NodeHolding(const Key& key) {
  {
    MutexLock lock(mu_);
    auto it = tails_.find(key);
    if (it != tails_.end()) return it->second;
  }
  const uint32_t self = local_node_id();
  const Key one[1] = {key};
  if (local_->Lookup(one).leading_hits == 1) return self;
  std::vector<uint32_t> others;
  {
    MutexLock lock(mu_);
    for (const serve::ClusterViewMember& m : view_.members) {
      if (m.healthy && m.node_id != self) others.push_back(m.node_id);
    }
  }
  for (uint32_t node : others) {
    if (RemoteLookup(node, one).leading_hits == 1) return node;
  }
  return std::nullopt;
}

Result<PutResult> ClusterStore::Put(std::span<const Key> keys, const KvLayout& layout,
                                    const BlockBuffers& src, const WriteHints& hints) {
  if (keys.empty()) return local_->Put(keys, layout, src, hints);
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  FC_RETURN_IF_ERROR(ValidateBuffers(src, layout, keys.size()));
  bool etcd_down;
  uint32_t self;
  {
    MutexLock lock(mu_);
    etcd_down = view_.enabled && !view_.etcd_reachable;
    self = view_.enabled ? view_.node_id : 0;
  }
  std::vector<uint32_t> order = Placement(keys[0]);
  if (order.empty() || etcd_down) return local_->Put(keys, layout, src, hints);
  // A batch that continues a chain goes where the chain's previous block is, so that a session
  // stays on one node; a new chain goes to its rendezvous home.
  if (hints.prefix_tail) {
    if (std::optional<uint32_t> at = NodeHolding(*hints.prefix_tail)) {
      order.erase(std::remove(order.begin(), order.end(), *at), order.end());
      order.insert(order.begin(), *at);
    }
  } else if (order.size() > 1 + kOverflowProbes) {
    // Only as far as a lookup asks: a new session no lookup would find is refused (NoSpace)
    // rather than stored where it takes room and is never restored.
    order.resize(1 + kOverflowProbes);
  }
  Status last;
  for (uint32_t node : order) {
    Result<PutResult> r = node == self ? local_->Put(keys, layout, src, hints)
                                       : RemotePut(node, keys, layout, src, hints);
    if (r.ok()) {
      Remember(&ClusterStore::tails_, keys.back(), node);
      if (!hints.prefix_tail) {
        if (node != order[0]) {
          Remember(&ClusterStore::roots_, keys[0], node);  // passed on
        } else {
          ForgetRoot(keys[0]);  // (re)written at home
        }
      }
      return r;
    }
    last = r.status();
    if (last.code() != StatusCode::kNoSpace) return last;  // only a full node passes it on
  }
  return last;
}

Result<std::unique_ptr<RestoreHandle>> ClusterStore::Restore(std::span<const Key> keys,
                                                             const KvLayout& layout,
                                                             const BlockBuffers& dst,
                                                             const RestoreOptions& options) {
  if (keys.empty()) return local_->Restore(keys, layout, dst, options);
  const std::vector<uint32_t> order = Placement(keys[0]);
  const uint32_t node = order.empty() ? 0 : NodeOfRoot(keys[0], order);
  if (order.empty() || node == local_node_id()) {
    return local_->Restore(keys, layout, dst, options);
  }
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  FC_RETURN_IF_ERROR(ValidateBuffers(dst, layout, keys.size()));
  return std::unique_ptr<RestoreHandle>(std::make_unique<RemoteRestore>(
      this, node, std::vector<Key>(keys.begin(), keys.end()), layout,
      std::vector<void*>(dst.ptrs.begin(), dst.ptrs.end()), dst.kind, options));
}

}  // namespace flatcake::cluster
