#include "cluster/peer_service.h"

#include <cstring>

#include "serve/rpc_convert.h"
#include "serve/tenants.h"
#include "serve/wire.h"
#include "util/aligned_buffer.h"
#include "util/physical_memory.h"

namespace flatcake::cluster {

using Clock = std::chrono::steady_clock;

// The restores' staging: at most `limit` bytes held, lent or kept. Buffers given back are kept for
// the next restores (up to kSpareBytes, and dropped when a fresh one needs their room): a fresh
// allocation of a restore's size is fresh pages, which the kernel zeroes as they are first
// touched, at a fraction of the disk's rate on a fresh VM (docs/cluster.md). Thread-safe.
class PeerService::StagingPool {
 public:
  // Aligned like the engine's reads (huge pages from 2 MiB), so the owner's restore reads a layer
  // extent that lines up with its run in the staging straight into it, with no copy.
  using Buffer = AlignedBuffer;
  explicit StagingPool(uint64_t limit) : limit_(limit) {}
  uint64_t limit() const { return limit_; }
  // Bytes a Take could lend now.
  uint64_t available() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return limit_ - lent_;
  }
  // A buffer of at least `bytes` (the smallest spare that fits and is within the bound, else a
  // fresh one); an empty one when that is more than available() or memory is exhausted.
  Buffer Take(size_t bytes) EXCLUDES(mu_) {
    std::vector<Buffer> dropped;  // freed outside the lock
    Buffer b;
    {
      MutexLock lock(mu_);
      if (bytes > limit_ - lent_) return {};
      auto best = spare_.end();
      for (auto it = spare_.begin(); it != spare_.end(); ++it) {
        if (it->size() >= bytes && it->size() <= limit_ - lent_ &&
            (best == spare_.end() || it->size() < best->size())) {
          best = it;
        }
      }
      if (best != spare_.end()) {
        b = std::move(*best);
        spare_bytes_ -= b.size();
        spare_.erase(best);
        lent_ += b.size();
        return b;
      }
      // A fresh buffer: spares give up their room until it fits within the bound.
      while (lent_ + spare_bytes_ + bytes > limit_ && !spare_.empty()) {
        spare_bytes_ -= spare_.back().size();
        dropped.push_back(std::move(spare_.back()));
        spare_.pop_back();
      }
      lent_ += bytes;
    }
    dropped.clear();
    auto fresh = AlignedBuffer::Allocate(bytes, AlignedBuffer::HugePagesWhenLarge(bytes, 4096));
    if (!fresh.ok()) {
      MutexLock lock(mu_);
      lent_ -= bytes;
      return {};
    }
    return std::move(*fresh);
  }
  // Allocates a buffer of `bytes` and touches its pages while `stop` stays false, then keeps it
  // for the restores.
  void Warm(uint64_t bytes, const std::atomic<bool>& stop) EXCLUDES(mu_) {
    Buffer b = Take(bytes);
    const size_t step = size_t{2} << 20;
    for (size_t at = 0; at < b.size() && !stop.load(std::memory_order_relaxed); at += step) {
      std::memset(b.data() + at, 0, std::min(step, b.size() - at));
    }
    Give(std::move(b));
  }
  void Give(Buffer b) EXCLUDES(mu_) {
    if (b.empty()) return;
    MutexLock lock(mu_);
    lent_ -= b.size();
    if (spare_bytes_ + b.size() > kSpareBytes) return;  // freed
    spare_bytes_ += b.size();
    spare_.push_back(std::move(b));
  }

 private:
  static constexpr size_t kSpareBytes = size_t{1} << 30;
  const uint64_t limit_;
  mutable Mutex mu_;
  uint64_t lent_ GUARDED_BY(mu_) = 0;
  std::vector<Buffer> spare_ GUARDED_BY(mu_);
  size_t spare_bytes_ GUARDED_BY(mu_) = 0;  // lent_ + spare_bytes_ <= limit_ after each Take
};

// One client's restore from this node: its pin, and the SSD hits being read into `staging`.
struct PeerService::Restore {
  ~Restore() {
    if (pool != nullptr) pool->Give(std::move(staging));
  }
  uint64_t id = 0;
  uint64_t pin = 0;
  uint32_t from_node = 0;  // the client's node, for the metrics
  KvLayout layout;
  std::vector<Key> ssd_keys;  // the stored keys of the SSD hits, in key order
  // Their slices, `slots` layers of them, layer l in slot l % slots, each slot laid out as the
  // pool lays out a segment's layer, [plane][hit]: a layer is one run to send, and each (layer,
  // plane) run of a segment is read straight into its place. slots == layout.num_layers: every
  // layer has its own, filled by one store restore. Fewer: a ring, filled `chunk` layers at a
  // time (FlatStore::RestoreLayers), a chunk once the client has the layers that held its slots
  // (PeerLayer.received).
  uint32_t slots = 0;
  uint32_t chunk = 0;
  bool ring() const { return slots < layout.num_layers; }
  StagingPool::Buffer staging;
  std::shared_ptr<StagingPool> pool;
  std::vector<void*> ptrs;  // kSlicePointers into `staging` (layers of one slot share theirs)
  Clock::time_point expires;
  // Guarded by the service's mu_:
  std::vector<std::unique_ptr<RestoreHandle>> handles;  // the store restores started
  uint32_t started = 0;                                 // layers [0, started) have one
  uint32_t received = 0;                                // the client has layers [0, received)
  std::vector<uint8_t> landed;                          // per layer
  uint32_t layers_landed = 0;
  bool queued = false;    // in the starter's queue
  bool starting = false;  // StartChunks is starting a store restore (Finish waits for it)
  Status failed;          // a store restore's error, once known
  std::unordered_map<uint32_t, std::vector<UcxNode::Responder>> waiting;  // by layer
  bool ended = false;
};

namespace {

template <typename Message>
Result<Message> Parse(const std::string& header, const char* what) {
  Message m;
  if (!m.ParseFromString(header)) {
    return Status::InvalidArgument(std::string("peer request ") + what + " does not parse");
  }
  return m;
}

// A request's tenant namespace, and its keys as the client named them and as the store holds them.
struct TenantKeys {
  serve::TenantNamespace ns;
  std::vector<Key> keys, stored;
};

template <typename Message>
Result<TenantKeys> KeysOf(const Message& m) {
  FC_RETURN_IF_ERROR(serve::ValidateTenantName(m.tenant()));
  TenantKeys out{serve::TenantNamespace(m.tenant()), {}, {}};
  FC_ASSIGN_OR_RETURN(out.keys, serve::DecodeKeys(m.keys(), serve::kMaxBatchKeys));
  out.stored = out.ns.StoredKeys(out.keys);
  return out;
}

void Fail(const UcxNode::Responder& respond, const Status& st) { respond(st, {}, {}); }

// Fails every request a restore has waiting for its layers.
void FailWaiting(const std::unordered_map<uint32_t, std::vector<UcxNode::Responder>>& waiting,
                 const Status& st) {
  for (const auto& [layer, rs] : waiting) {
    for (const auto& respond : rs) Fail(respond, st);
  }
}

}  // namespace

UcxPayload PeerService::LayerBytes(const std::shared_ptr<Restore>& r, uint32_t layer) {
  const uint64_t per = uint64_t{r->layout.num_planes} * r->layout.slice_bytes;
  const uint64_t run = r->ssd_keys.size() * per;
  return UcxPayload(reinterpret_cast<const char*>(r->staging.data()) + (layer % r->slots) * run,
                    run, r);
}

PeerService::PeerService(FlatStore* store, UcxNode* ucx, uint32_t node_id,
                         serve::TenantLedger* ledger, serve::DaemonMetrics* metrics,
                         const PeerServiceOptions& options)
    : store_(store),
      ucx_(ucx),
      node_id_(node_id),
      ledger_(ledger),
      metrics_(metrics),
      options_(options),
      owner_(0xFCC1'0000'0000'0000ull | node_id),
      staging_(std::make_shared<StagingPool>(
          options.max_staging_bytes != 0 ? options.max_staging_bytes : PhysicalMemoryBytes() / 4)) {
}

PeerService::~PeerService() { Stop(); }

Status PeerService::Start() {
  const uint8_t* base = store_->dram_arena_base();
  if (base != nullptr) {
    arena_bytes_ = store_->shared_media().dram_bytes;
    FC_ASSIGN_OR_RETURN(arena_, ucx_->Register(const_cast<uint8_t*>(base), arena_bytes_));
    arena_base_ = reinterpret_cast<uint64_t>(base);
  }
  ucx_->SetHandler(kPeerHello, [this](std::string h, std::string, UcxNode::Responder r) {
    OnHello(h, std::move(r));
  });
  ucx_->SetHandler(kPeerLookup, [this](std::string h, std::string, UcxNode::Responder r) {
    OnLookup(h, std::move(r));
  });
  ucx_->SetHandler(kPeerPut, [this](std::string h, std::string d, UcxNode::Responder r) {
    OnPut(h, std::move(d), std::move(r));
  });
  ucx_->SetHandler(kPeerRestore, [this](std::string h, std::string, UcxNode::Responder r) {
    OnRestore(h, std::move(r));
  });
  ucx_->SetHandler(kPeerLayer, [this](std::string h, std::string, UcxNode::Responder r) {
    OnLayer(h, std::move(r));
  });
  ucx_->SetHandler(kPeerRestoreEnd, [this](std::string h, std::string, UcxNode::Responder r) {
    OnRestoreEnd(h, std::move(r));
  });
  ucx_->SetHandler(kPeerStats, [this](std::string h, std::string, UcxNode::Responder r) {
    OnStats(h, std::move(r));
  });
  sweeper_ = std::thread([this] { SweepLoop(); });
  starter_ = std::thread([this] { StartLoop(); });
  started_ = true;
  return Status::OK();
}

void PeerService::Stop() {
  {
    MutexLock lock(mu_);
    if (stopped_) return;
  }
  // The handlers capture this service: they are replaced by ones that capture nothing, and the
  // calls of theirs already running on the progress thread are waited for, before anything here
  // goes (a request from a client with an older view of the cluster can come at any time).
  if (started_) {
    for (uint32_t id = kPeerHello; id <= kPeerStats; ++id) {
      ucx_->SetHandler(id, [](std::string, std::string, UcxNode::Responder respond) {
        respond(Status::Aborted("the node's peer service has stopped (it left the cluster)"), {},
                {});
      });
    }
    ucx_->Quiesce();
  }
  std::vector<std::shared_ptr<Restore>> left;
  {
    MutexLock lock(mu_);
    stopped_ = true;
    for (auto& [id, r] : restores_) left.push_back(r);
    restores_.clear();
    to_start_.clear();
  }
  stop_warming_.store(true);
  cv_.NotifyAll();
  start_cv_.NotifyAll();
  if (sweeper_.joinable()) sweeper_.join();
  if (starter_.joinable()) starter_.join();
  for (const auto& r : left) Finish(r);
  if (started_ && arena_.handle != 0) ucx_->Unregister(arena_.handle);
}

size_t PeerService::restores_in_flight() const {
  MutexLock lock(mu_);
  return restores_.size();
}

UcxNode::Responder PeerService::Counted(UcxNode::Responder respond, uint32_t peer,
                                        serve::PeerRequestType type, uint64_t bytes_in) {
  if (metrics_ == nullptr) return respond;
  return [this, respond = std::move(respond), peer, type, bytes_in](Status st, std::string header,
                                                                    UcxPayload data) {
    metrics_->OnPeerRequest(peer, type, bytes_in, st.ok() ? data.size() : 0, !st.ok());
    respond(std::move(st), std::move(header), std::move(data));
  };
}

void PeerService::OnHello(const std::string& header, UcxNode::Responder respond) {
  rpc::PeerHello req;
  (void)req.ParseFromString(header);  // its only field is for the metrics
  respond = Counted(std::move(respond), req.from_node(), serve::PeerRequestType::kHello, 0);
  rpc::PeerHelloReply reply;
  reply.set_node_id(node_id_);
  reply.set_arena_base(arena_base_);
  reply.set_arena_bytes(arena_bytes_);
  reply.set_arena_rkey(arena_.rkey);
  respond(Status::OK(), reply.SerializeAsString(), {});
}

void PeerService::OnStats(const std::string& header, UcxNode::Responder respond) {
  rpc::PeerStats req;
  (void)req.ParseFromString(header);  // its only field is for the metrics
  respond = Counted(std::move(respond), req.from_node(), serve::PeerRequestType::kStats, 0);
  respond(Status::OK(), serve::ToRpc(store_->GetStats()).SerializeAsString(), {});
}

void PeerService::OnLookup(const std::string& header, UcxNode::Responder respond) {
  auto req = Parse<rpc::PeerLookup>(header, "PeerLookup");
  respond = Counted(std::move(respond), req.ok() ? req->from_node() : 0,
                    serve::PeerRequestType::kLookup, 0);
  if (!req.ok()) return Fail(respond, req.status());
  auto tk = KeysOf(*req);
  if (!tk.ok()) return Fail(respond, tk.status());
  respond(Status::OK(), serve::ToRpc(store_->Lookup(tk->stored)).SerializeAsString(), {});
}

void PeerService::OnPut(const std::string& header, std::string data, UcxNode::Responder respond) {
  auto req = Parse<rpc::PeerPut>(header, "PeerPut");
  respond = Counted(std::move(respond), req.ok() ? req->from_node() : 0,
                    serve::PeerRequestType::kPut, data.size());
  if (!req.ok()) return Fail(respond, req.status());
  auto tk = KeysOf(*req);
  if (!tk.ok()) return Fail(respond, tk.status());
  const std::vector<Key>* keys = &tk->keys;
  const KvLayout layout = serve::FromRpc(req->layout());
  if (Status v = ValidateKvLayout(layout); !v.ok()) return Fail(respond, v);
  if (data.size() != keys->size() * layout.block_bytes()) {
    return Fail(respond,
                Status::InvalidArgument("PeerPut carries " + std::to_string(data.size()) +
                                        " bytes for " + std::to_string(keys->size()) +
                                        " blocks of " + std::to_string(layout.block_bytes())));
  }
  auto hints = serve::FromRpc(req->hints());
  if (!hints.ok()) return Fail(respond, hints.status());
  std::vector<void*> ptrs(keys->size());
  for (size_t i = 0; i < keys->size(); ++i) ptrs[i] = data.data() + i * layout.block_bytes();
  auto put =
      ChargedPut(tk->ns.tenant(), tk->stored, layout,
                 BlockBuffers{BufferKind::kBlockContiguous, ptrs}, tk->ns.StoredHints(*hints));
  if (!put.ok()) return Fail(respond, put.status());
  rpc::PeerPutReply reply;
  reply.set_written(put->written);
  reply.set_present(put->already_present);
  respond(Status::OK(), reply.SerializeAsString(), {});
}

Result<PutResult> PeerService::ChargedPut(const std::string& tenant, std::span<const Key> keys,
                                          const KvLayout& layout, const BlockBuffers& src,
                                          const WriteHints& hints) {
  if (ledger_ == nullptr) return store_->Put(keys, layout, src, hints);
  // The halves of a local client's put (serve/daemon_session.cc), the data half in this process.
  FC_ASSIGN_OR_RETURN(const WriteReservation r, store_->ReserveWrite(owner_, keys, layout, hints));
  PutResult out;
  out.already_present = r.already_present;
  if (r.id == 0) return out;
  const uint64_t bytes = r.bytes();
  if (Status quota = ledger_->Reserve(tenant, r.medium, bytes); !quota.ok()) {
    (void)store_->AbortWrite(owner_, r.id);
    return quota;
  }
  std::vector<uint64_t> sums;
  if (Status st = store_->WriteReserved(r, src, &sums); !st.ok()) {
    (void)store_->AbortWrite(owner_, r.id);
    ledger_->Unreserve(tenant, r.medium, bytes);
    return st.WithContext("peer put");
  }
  // Charged before the publish, as the daemon does: a publish that fails stays charged until
  // its scope goes.
  ledger_->Publish(tenant, r.medium, bytes, r.scope_id, r.scope_gen);
  FC_RETURN_IF_ERROR(store_->PublishWrite(owner_, r.id, sums));
  out.written = static_cast<uint32_t>(r.blocks.size());
  out.medium = r.medium;
  out.segments = static_cast<uint32_t>(r.segments.size());
  return out;
}

void PeerService::OnRestore(const std::string& header, UcxNode::Responder respond) {
  auto req = Parse<rpc::PeerRestore>(header, "PeerRestore");
  respond = Counted(std::move(respond), req.ok() ? req->from_node() : 0,
                    serve::PeerRequestType::kRestore, 0);
  if (!req.ok()) return Fail(respond, req.status());
  auto tk = KeysOf(*req);
  if (!tk.ok()) return Fail(respond, tk.status());
  const std::vector<Key>* keys = &tk->keys;
  const std::vector<Key>& stored = tk->stored;
  const KvLayout layout = serve::FromRpc(req->layout());
  if (Status v = ValidateKvLayout(layout); !v.ok()) return Fail(respond, v);
  auto pin = store_->PinRead(owner_, stored, layout);
  if (!pin.ok()) return Fail(respond, pin.status());
  rpc::PeerRestoreReply reply;
  for (size_t i = 0; i < keys->size(); ++i) reply.add_blocks();
  auto r = std::make_shared<Restore>();
  r->pin = pin->id;
  r->from_node = req->from_node();
  r->layout = layout;
  size_t ssd_hits = 0;
  for (const PinnedHit& h : pin->hits) ssd_hits += h.medium == MediaType::kSsd ? 1 : 0;
  reply.set_layer_window(SizeStaging(*req, ssd_hits, r.get()));
  // The SSD hits the staging can take: the leading ones, in key order; the rest are misses.
  const uint64_t per_hit = uint64_t{r->slots} * layout.num_planes * layout.slice_bytes;
  size_t ssd_room = 0;
  if (pin->id != 0) ssd_room = static_cast<size_t>(staging_->available() / per_hit);
  for (const PinnedHit& h : pin->hits) {
    if (h.medium == MediaType::kSsd) {
      if (ssd_room == 0) continue;
      --ssd_room;
    }
    rpc::BlockLocation* b = reply.mutable_blocks(static_cast<int>(h.key));
    b->set_found(true);
    b->set_medium(serve::ToRpc(h.medium));
    b->set_offset(h.offset);
    b->set_plane_stride(h.layer_stride / layout.num_planes);
    b->set_layer_stride(h.layer_stride);
    b->set_checksum(h.checksum);
    if (h.medium == MediaType::kSsd) r->ssd_keys.push_back(stored[h.key]);
  }
  if (pin->id == 0) return respond(Status::OK(), reply.SerializeAsString(), {});
  {
    MutexLock lock(mu_);
    if (stopped_) {
      (void)store_->Unpin(owner_, pin->id);
      return Fail(respond, Status::Aborted("peer service stopping"));
    }
    r->id = next_restore_++;
    r->expires = Clock::now() + options_.restore_ttl;
    restores_[r->id] = r;
  }
  reply.set_restore_id(r->id);
  if (!r->ssd_keys.empty()) {
    r->staging = staging_->Take(r->ssd_keys.size() * per_hit);
    if (r->staging.empty()) {
      // Taken by a restore since, or memory exhausted: these hits are misses.
      for (const PinnedHit& h : pin->hits) {
        if (h.medium == MediaType::kSsd) reply.mutable_blocks(static_cast<int>(h.key))->Clear();
      }
      r->ssd_keys.clear();
    }
  }
  if (!r->ssd_keys.empty()) {
    const size_t n = r->ssd_keys.size();
    r->pool = staging_;
    r->landed.assign(layout.num_layers, 0);
    r->ptrs.resize(n * layout.num_layers * layout.num_planes);
    for (size_t j = 0; j < n; ++j) {
      for (uint32_t l = 0; l < layout.num_layers; ++l) {
        for (uint32_t p = 0; p < layout.num_planes; ++p) {
          r->ptrs[(j * layout.num_layers + l) * layout.num_planes + p] =
              r->staging.data() +
              (((l % r->slots) * layout.num_planes + p) * n + j) * layout.slice_bytes;
        }
      }
    }
    MutexLock lock(mu_);
    QueueStart(r);
  }
  respond(Status::OK(), reply.SerializeAsString(), {});
}

uint32_t PeerService::SizeStaging(const rpc::PeerRestore& req, size_t ssd_hits, Restore* r) const {
  // A slot per layer, or a ring of a few chunks' layers for a client that says which layers it
  // has (a short restore fits whole either way). The ring holds the chunks reading and the
  // client's window beyond them: the client asks for layer l once it has l - window, saying it
  // has the layers below l - window + 1, and the chunk holding l may start only once the client
  // has the layers its slots held. With fewer slots than a chunk and the window, a restore could
  // wait for itself.
  const KvLayout& layout = r->layout;
  const uint32_t layers = layout.num_layers;
  r->chunk = layers;
  r->slots = layers;
  if (req.layer_window() == 0 || ssd_hits == 0) return 0;
  const uint64_t run = ssd_hits * layout.num_planes * layout.slice_bytes;
  r->chunk =
      static_cast<uint32_t>(std::clamp<uint64_t>(options_.ring_chunk_bytes / run, 1, layers));
  // The client's window for the layer of the hits found here, where it says how (not for its
  // keys, the most SSD hits there could be): a batch of mostly DRAM hits or misses streams its
  // few SSD hits' small layers with the whole window.
  uint32_t window = std::min(req.layer_window(), kMaxLayerWindow);
  if (req.layer_window_bytes() > 0 && req.layer_window_most() > 0) {
    window = LayerWindow(run, req.layer_window_bytes(),
                         std::min(req.layer_window_most(), kMaxLayerWindow));
  }
  const uint64_t least = uint64_t{kChunksReading} * r->chunk + window - 1;
  r->slots =
      static_cast<uint32_t>(std::min<uint64_t>(layers, std::max(options_.ring_bytes / run, least)));
  if (!r->ring()) r->chunk = layers;  // it all fits: one restore
  return window;
}

uint32_t PeerService::LayerWindow(uint64_t layer_bytes, uint64_t window_bytes, uint32_t most) {
  if (layer_bytes == 0 || most < 2) return most;
  return static_cast<uint32_t>(std::clamp<uint64_t>(window_bytes / layer_bytes, 2, most));
}

void PeerService::QueueStart(const std::shared_ptr<Restore>& r) {
  if (r->queued || r->ended || stopped_) return;
  r->queued = true;
  to_start_.push_back(r);
  start_cv_.NotifyAll();
}

void PeerService::StartLoop() {
  for (;;) {
    std::shared_ptr<Restore> r;
    {
      MutexLock lock(mu_);
      while (!stopped_ && to_start_.empty()) start_cv_.Wait(mu_);
      if (stopped_) return;
      r = std::move(to_start_.front());
      to_start_.pop_front();
      r->queued = false;
    }
    StartChunks(r);
  }
}

void PeerService::StartChunks(const std::shared_ptr<Restore>& r) {
  const uint32_t layers = r->layout.num_layers;
  const BlockBuffers dst{BufferKind::kSlicePointers, r->ptrs};
  for (;;) {
    uint32_t first, end;
    {
      MutexLock lock(mu_);
      if (r->ended || !r->failed.ok() || r->started == layers) return;
      first = r->started;
      end = std::min(layers, first + r->chunk);
      // Layer l takes slot l % slots, which held layer l - slots: the client must have it.
      if (end > r->slots && r->received < end - r->slots) return;
      // A chunk reading behind the one reading now keeps the disk busy; more would share it, and
      // hold the next layer back.
      if (r->started - r->layers_landed >= kChunksReading * r->chunk) return;
      r->started = end;
      r->starting = true;
    }
    RestoreOptions ro;
    std::weak_ptr<Restore> weak = r;
    ro.on_layer = [this, weak](uint32_t l) {
      if (auto s = weak.lock()) LayerLanded(s, l);
    };
    // Without a ring, one restore of every layer, whose blocks the store also verifies.
    auto handle = r->ring() ? store_->RestoreLayers(r->ssd_keys, r->layout, dst, first, end, ro)
                            : store_->Restore(r->ssd_keys, r->layout, dst, ro);
    std::unordered_map<uint32_t, std::vector<UcxNode::Responder>> waiting;
    {
      MutexLock lock(mu_);
      r->starting = false;
      if (handle.ok()) {
        r->handles.push_back(std::move(*handle));
      } else {
        r->failed = handle.status();
        waiting = std::move(r->waiting);
      }
    }
    cv_.NotifyAll();
    if (!handle.ok()) {
      FailWaiting(waiting, handle.status());
      return;
    }
  }
}

void PeerService::LayerLanded(const std::shared_ptr<Restore>& r, uint32_t layer) {
  std::vector<UcxNode::Responder> ready;
  {
    MutexLock lock(mu_);
    r->landed[layer] = 1;
    r->layers_landed++;
    if (r->ring() && r->started < r->layout.num_layers) QueueStart(r);
    auto it = r->waiting.find(layer);
    if (it != r->waiting.end()) {
      ready = std::move(it->second);
      r->waiting.erase(it);
    }
  }
  if (ready.empty()) return;
  for (auto& respond : ready) respond(Status::OK(), {}, LayerBytes(r, layer));
}

uint32_t PeerService::FromNodeOf(uint64_t restore_id) const {
  MutexLock lock(mu_);
  auto it = restores_.find(restore_id);
  return it == restores_.end() ? 0 : it->second->from_node;
}

void PeerService::OnLayer(const std::string& header, UcxNode::Responder respond) {
  auto req = Parse<rpc::PeerLayer>(header, "PeerLayer");
  respond = Counted(std::move(respond), req.ok() ? FromNodeOf(req->restore_id()) : 0,
                    serve::PeerRequestType::kLayer, 0);
  if (!req.ok()) return Fail(respond, req.status());
  std::shared_ptr<Restore> r;
  const uint32_t layer = req->layer();
  {
    MutexLock lock(mu_);
    auto it = restores_.find(req->restore_id());
    if (it == restores_.end()) {
      return Fail(respond, Status::NotFound("no restore " + std::to_string(req->restore_id())));
    }
    r = it->second;
    const uint32_t layers = r->layout.num_layers;
    if (layer >= layers) {
      return Fail(respond,
                  Status::InvalidArgument("layer " + std::to_string(layer) + " out of range"));
    }
    if (!r->failed.ok()) return Fail(respond, r->failed);
    if (r->ssd_keys.empty()) {
      return Fail(respond, Status::InvalidArgument("restore " + std::to_string(r->id) +
                                                   " has no SSD hits to stream"));
    }
    if (r->ring() && req->received() > r->received) {
      r->received = std::min(req->received(), layers);
      if (r->started < layers) QueueStart(r);  // their buffers may take the next chunks
    }
    if (layer + r->slots < r->started) {
      return Fail(respond, Status::InvalidArgument(
                               "layer " + std::to_string(layer) +
                               " asked for again after the client said it had it (its buffer "
                               "holds a later layer now)"));
    }
    if (layer >= r->started || r->landed[layer] == 0) {
      r->waiting[layer].push_back(std::move(respond));
      return;  // answered as it lands (LayerLanded)
    }
  }
  respond(Status::OK(), {}, LayerBytes(r, layer));
}

void PeerService::OnRestoreEnd(const std::string& header, UcxNode::Responder respond) {
  auto req = Parse<rpc::PeerRestoreEnd>(header, "PeerRestoreEnd");
  respond = Counted(std::move(respond), req.ok() ? FromNodeOf(req->restore_id()) : 0,
                    serve::PeerRequestType::kRestoreEnd, 0);
  if (!req.ok()) return Fail(respond, req.status());
  std::shared_ptr<Restore> r;
  {
    MutexLock lock(mu_);
    auto it = restores_.find(req->restore_id());
    if (it == restores_.end()) {
      return Fail(respond, Status::NotFound("no restore " + std::to_string(req->restore_id())));
    }
    r = it->second;
    restores_.erase(it);
  }
  rpc::PeerRestoreEndReply reply;
  // A hit was read when every store restore of it found it (the ones of a ring: its ranges).
  // Every layer was asked for and answered, so the reads are done or about to be: the wait is
  // the checksum verification's. r is out of restores_: its handles stay until Finish, below.
  std::vector<RestoreHandle*> handles;
  bool all_started;
  {
    MutexLock lock(mu_);
    for (const auto& h : r->handles) handles.push_back(h.get());
    all_started = r->started == r->layout.num_layers;
  }
  std::string found(r->ssd_keys.size(), all_started && !handles.empty() ? '\1' : '\0');
  for (RestoreHandle* h : handles) {
    auto result = h->Wait();
    for (size_t i = 0; i < found.size(); ++i) {
      if (!result.ok() || i >= result->found.size() || result->found[i] == 0) found[i] = '\0';
    }
  }
  reply.set_ssd_found(found);
  Finish(r);
  respond(Status::OK(), reply.SerializeAsString(), {});
}

void PeerService::Finish(const std::shared_ptr<Restore>& r) {
  std::unordered_map<uint32_t, std::vector<UcxNode::Responder>> waiting;
  std::vector<std::unique_ptr<RestoreHandle>> handles;
  {
    MutexLock lock(mu_);
    if (r->ended) return;
    r->ended = true;  // StartChunks starts no more
    while (r->starting) cv_.Wait(mu_);
    waiting = std::move(r->waiting);
    handles = std::move(r->handles);
  }
  FailWaiting(waiting, Status::Aborted("restore ended"));
  // Every read into the staging is over before the restore lets it go.
  for (auto& h : handles) h->Cancel();
  for (auto& h : handles) (void)h->Wait();
  handles.clear();
  (void)store_->Unpin(owner_, r->pin);
}

void PeerService::SweepLoop() {
  // First the staging's warming: nothing is due for a sweep before a restore's TTL.
  const uint64_t limit = staging_->limit();
  const uint64_t warm = std::min(options_.warm_staging_bytes,
                                 std::max(limit / 8, std::min(options_.ring_bytes, limit / 2)));
  staging_->Warm(warm, stop_warming_);
  staging_warm_.store(true);
  for (;;) {
    std::vector<std::shared_ptr<Restore>> expired;
    {
      MutexLock lock(mu_);
      if (stopped_) return;
      (void)cv_.WaitFor(mu_, std::chrono::milliseconds(500));
      if (stopped_) return;
      const auto now = Clock::now();
      for (auto it = restores_.begin(); it != restores_.end();) {
        if (it->second->expires <= now) {
          expired.push_back(it->second);
          it = restores_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const auto& r : expired) Finish(r);
  }
}

}  // namespace flatcake::cluster
