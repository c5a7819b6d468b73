#include "serve/remote_store.h"

#include <algorithm>
#include <set>
#include <thread>
#include <utility>

#include "serve/remote_restore.h"
#include "serve/rpc_convert.h"
#include "serve/wire.h"
#include "store/ready_restore_handle.h"

namespace flatcake::serve {
namespace {

constexpr std::string_view kUnixScheme = "unix://";

Result<std::string> SocketPathOf(const std::string& address) {
  if (address.starts_with(kUnixScheme)) return address.substr(kUnixScheme.size());
  if (address.find("://") != std::string::npos) {
    return Status::InvalidArgument("daemon address '" + address +
                                   "': only unix:// addresses (or a socket path) are supported");
  }
  if (address.empty()) return Status::InvalidArgument("empty daemon address");
  return address;
}

// A reservation as the daemon's reply describes it, in this process's view of the media (as
// PinnedHitsOf in remote_restore.cc: SSD offsets within the files back to back). `blocks` lists the
// reserved keys' batch indices segment after segment, block after block, as SegmentWriter and
// the checksums want them.
Result<WriteReservation> ReservationOf(const rpc::ReserveWriteReply& reply, const KvLayout& layout,
                                       size_t num_keys, const SsdPoolGeometry& geo) {
  if (static_cast<size_t>(reply.keys_size()) != num_keys) {
    return Status::InvalidArgument("the daemon answered " + std::to_string(reply.keys_size()) +
                                   " of " + std::to_string(num_keys) + " keys");
  }
  WriteReservation r;
  r.id = reply.reservation_id();
  r.layout = layout;
  r.present.assign(num_keys, 1);
  // slot[s][b]: the batch index written as block b of segment s.
  std::vector<std::vector<int64_t>> slot(static_cast<size_t>(reply.segments_size()));
  for (int s = 0; s < reply.segments_size(); ++s) {
    const rpc::Segment& seg = reply.segments(s);
    ReservedSegment out;
    FC_ASSIGN_OR_RETURN(out.medium, FromRpc(seg.medium()));
    if (s == 0) r.medium = out.medium;
    if (out.medium != r.medium || seg.block_stride() != layout.slice_bytes || seg.blocks() == 0 ||
        seg.blocks() > num_keys) {
      return Status::InvalidArgument("the daemon reserved segments this client cannot write");
    }
    if (out.medium == MediaType::kSsd) {
      FC_ASSIGN_OR_RETURN(out.base, ClientPoolOffset(geo, seg.file_index(), seg.offset()));
    } else {
      out.base = seg.offset();
    }
    out.num_blocks = seg.blocks();
    out.plane_stride = seg.plane_stride();
    out.layer_stride = seg.layer_stride();
    out.bytes = seg.bytes();
    r.segments.push_back(out);
    slot[static_cast<size_t>(s)].assign(seg.blocks(), -1);
  }
  for (int i = 0; i < reply.keys_size(); ++i) {
    const rpc::ReservedKey& k = reply.keys(i);
    if (k.already_present()) {
      ++r.already_present;
      continue;
    }
    int64_t& at = slot[k.segment()][k.block()];  // in range: ValidateResponse checked it
    if (at >= 0) return Status::InvalidArgument("the daemon reserved one block for two keys");
    at = i;
    r.present[static_cast<size_t>(i)] = 0;
  }
  for (size_t s = 0; s < slot.size(); ++s) {
    r.segments[s].first_block = static_cast<uint32_t>(r.blocks.size());
    for (int64_t i : slot[s]) {
      if (i < 0) return Status::InvalidArgument("the daemon reserved a block for no key");
      r.blocks.push_back(static_cast<uint32_t>(i));
    }
  }
  return r;
}

// Puts and restores go as one request each: past the protocol's batch limit they are refused.
Status CheckBatch(size_t keys, std::string_view what) {
  if (keys <= kMaxBatchKeys) return Status::OK();
  return Status::InvalidArgument(std::string(what) + " of " + std::to_string(keys) +
                                 " keys exceeds the daemon's batch limit of " +
                                 std::to_string(kMaxBatchKeys));
}

// The daemon's read leases over one connection (RemoteStore::OpenReadLeases).
class RemoteReadLeases final : public ReadLeases {
 public:
  RemoteReadLeases(Store& store, DaemonConnection::Use conn)
      : store_(store), conn_(std::move(conn)) {}
  ~RemoteReadLeases() override = default;

  Store& store() override { return store_; }
  const uint8_t* dram_arena() const override { return conn_->media().access().dram; }
  uint64_t dram_bytes() const override { return conn_->media().access().dram_bytes; }
  const SsdPoolGeometry& ssd_geometry() const override { return conn_->media().geometry(); }

  Result<ReadPin> Pin(std::span<const Key> keys, const KvLayout& layout,
                      int64_t arrival_ns) override {
    FC_RETURN_IF_ERROR(CheckBatch(keys.size(), "a device restore"));
    FC_RETURN_IF_ERROR(Connected());
    rpc::Request request;
    rpc::PinRead* p = request.mutable_pin_read();
    p->set_keys(EncodeKeys(keys));
    *p->mutable_layout() = ToRpc(layout);
    p->set_arrival_ns(arrival_ns);
    FC_ASSIGN_OR_RETURN(rpc::Response reply,
                        conn_->Call(std::move(request), rpc::Response::kPinRead));
    ReadPin pin;
    pin.id = reply.pin_read().pin_id();
    pin.layout = layout;
    Result<std::vector<PinnedHit>> hits =
        PinnedHitsOf(reply.pin_read(), keys.size(), layout, conn_->media().geometry());
    if (!hits.ok()) {
      (void)Unpin(pin.id, keys.size(), nullptr);
      return hits.status();
    }
    pin.hits = std::move(*hits);
    for (const PinnedHit& h : pin.hits) {
      if (h.medium == MediaType::kSsd) pin.ssd_bytes += layout.block_bytes();
    }
    return pin;
  }

  // The daemon admitted the pin before answering it.
  Status Admit(uint64_t, int64_t, std::function<void(Status)> on_admitted) override {
    on_admitted(Status::OK());
    return Status::OK();
  }
  // The daemon gives the window share back at the Unpin.
  void ReadsDone(uint64_t) override {}

  Status Unpin(uint64_t pin, size_t, const GetResult* delivered) override {
    if (pin == 0) return Status::OK();
    FC_RETURN_IF_ERROR(Connected());
    // Its reply tells nothing; the daemon serves the connection's requests in order.
    conn_->CallAsync(
        UnpinRequest(pin, delivered != nullptr, delivered != nullptr ? *delivered : GetResult{}),
        [](Result<rpc::Response>) {});
    return Status::OK();
  }

 private:
  Status Connected() const {
    if (!conn_->broken()) return Status::OK();
    return Status::IOError(
        "the connection to the daemon these read leases were opened on broke (its pins went "
        "with it): open them again");
  }

  Store& store_;
  DaemonConnection::Use conn_;
};

}  // namespace

RemoteStore::RemoteStore(std::string path, std::string tenant, ClientOptions options)
    : path_(std::move(path)), tenant_(std::move(tenant)), client_options_(std::move(options)) {}

Result<std::unique_ptr<RemoteStore>> RemoteStore::Connect(std::string address, std::string tenant,
                                                          ClientOptions options) {
  FC_ASSIGN_OR_RETURN(std::string path, SocketPathOf(address));
  FC_RETURN_IF_ERROR(ValidateTenantName(tenant));
  std::unique_ptr<RemoteStore> store(
      new RemoteStore(std::move(path), std::move(tenant), std::move(options)));
  FC_ASSIGN_OR_RETURN(std::unique_ptr<DaemonConnection> c,
                      DaemonConnection::Open(store->path_, store->tenant_, store->client_options_));
  store->Describe(*c);
  MutexLock lock(store->mu_);
  store->current_ = std::move(c);
  return store;
}

RemoteStore::~RemoteStore() {
  std::vector<std::unique_ptr<DaemonConnection>> all;
  {
    MutexLock lock(mu_);
    all.swap(retired_);
    if (current_) all.push_back(std::move(current_));
  }
  // Restores still waiting for their pins fail now; those reading finish their reads.
  for (auto& c : all) c->Break(Status::Aborted("the client store is closing"));
  for (auto& c : all) {
    while (c->users() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void RemoteStore::Describe(const DaemonConnection& c) {
  const rpc::HelloReply& h = c.hello();
  const AttachedMedia& m = c.media();
  const ClientOptions& co = client_options_;
  options_.node_id = h.node_id();
  options_.dram_bytes = h.dram_arena().bytes();
  std::set<std::string> dirs;
  for (const rpc::SsdFile& f : h.ssd_files()) {
    const size_t slash = f.path().rfind('/');
    dirs.insert(slash == std::string::npos ? "." : f.path().substr(0, slash));
  }
  options_.ssd_dirs.assign(dirs.begin(), dirs.end());
  options_.ssd_file_bytes = m.geometry().file_bytes;
  options_.ssd_bytes = m.geometry().capacity();
  options_.direct_io = h.ssd_direct_io() ? DirectIoMode::kOn : DirectIoMode::kOff;
  SetMediaOptions(co.media, &options_);
  options_.verify_checksums = co.verify_checksums;

  info_.dram_page_mode = h.dram_arena().bytes() > 0 ? h.dram_arena().page_mode() : "none";
  info_.dram_backing = "daemon " + path_ + " (shared arena)";
  info_.io_engine = std::string(m.engine_name());
  info_.io_note = m.engine_note();
  info_.ssd_direct_io = h.ssd_direct_io();
  info_.ssd_files = static_cast<uint32_t>(h.ssd_files_size());
  info_.ssd_dirs = options_.ssd_dirs;
}

bool RemoteStore::connected() const {
  MutexLock lock(mu_);
  return current_ && !current_->broken();
}

uint64_t RemoteStore::reconnects() const {
  MutexLock lock(mu_);
  return reconnects_;
}

Result<std::unique_ptr<ReadLeases>> RemoteStore::OpenReadLeases() {
  FC_ASSIGN_OR_RETURN(DaemonConnection::Use c, Acquire());
  return std::unique_ptr<ReadLeases>(new RemoteReadLeases(*this, std::move(c)));
}

Result<DaemonConnection::Use> RemoteStore::Acquire() const {
  std::vector<std::unique_ptr<DaemonConnection>> gone;  // destroyed outside the lock
  MutexLock lock(mu_);
  if (current_ && !current_->broken()) return DaemonConnection::Use(current_.get());
  const auto now = std::chrono::steady_clock::now();
  if (now < next_attempt_) {
    return Status::IOError("the daemon at " + path_ + " is unreachable: " + last_error_.ToString());
  }
  auto opened = DaemonConnection::Open(path_, tenant_, client_options_);
  if (!opened.ok()) {
    next_attempt_ = now + client_options_.reconnect_interval;
    last_error_ = opened.status();
    return Status::IOError("the daemon at " + path_ + " is unreachable: " + last_error_.ToString());
  }
  if (current_) retired_.push_back(std::move(current_));
  current_ = std::move(*opened);
  ++reconnects_;
  for (auto it = retired_.begin(); it != retired_.end();) {
    if ((*it)->users() == 0) {
      gone.push_back(std::move(*it));
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
  DaemonConnection::Use use(current_.get());
  lock.Unlock();
  gone.clear();
  return use;
}

Result<PutResult> RemoteStore::Put(std::span<const Key> keys, const KvLayout& layout,
                                   const BlockBuffers& src, const WriteHints& hints) {
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  FC_RETURN_IF_ERROR(ValidateBuffers(src, layout, keys.size()));
  FC_RETURN_IF_ERROR(CheckBatch(keys.size(), "put"));
  PutResult out;
  if (keys.empty()) return out;
  FC_ASSIGN_OR_RETURN(DaemonConnection::Use c, Acquire());
  rpc::Request request;
  rpc::ReserveWrite* w = request.mutable_reserve_write();
  w->set_keys(EncodeKeys(keys));
  *w->mutable_layout() = ToRpc(layout);
  *w->mutable_hints() = ToRpc(hints);
  FC_ASSIGN_OR_RETURN(const rpc::Response reply,
                      c->Call(std::move(request), rpc::Response::kReserveWrite));
  FC_ASSIGN_OR_RETURN(const WriteReservation r, ReservationOf(reply.reserve_write(), layout,
                                                              keys.size(), c->media().geometry()));
  out.already_present = r.already_present;
  if (r.id == 0) return out;
  std::vector<uint64_t> sums;
  if (Status st = c->media().writer().WriteAll(r, src, &sums); !st.ok()) {
    rpc::Request abort;
    abort.mutable_abort_write()->set_reservation_id(r.id);
    (void)c->Call(std::move(abort), rpc::Response::kAbortWrite);
    return st.WithContext("put");
  }
  // The daemon takes the checksums in request order; WriteAll gives them in segment order.
  std::vector<std::pair<uint32_t, uint64_t>> by_key(r.blocks.size());
  for (size_t j = 0; j < r.blocks.size(); ++j) by_key[j] = {r.blocks[j], sums[j]};
  std::sort(by_key.begin(), by_key.end());
  rpc::Request publish;
  rpc::PublishWrite* p = publish.mutable_publish_write();
  p->set_reservation_id(r.id);
  for (const auto& [key, sum] : by_key) p->add_checksums(sum);
  FC_ASSIGN_OR_RETURN(const rpc::Response published,
                      c->Call(std::move(publish), rpc::Response::kPublishWrite));
  out.written = published.publish_write().published();
  out.medium = r.medium;
  out.segments = static_cast<uint32_t>(r.segments.size());
  return out;
}

LookupResult RemoteStore::Lookup(std::span<const Key> keys) {
  LookupResult total;
  if (keys.empty()) return total;
  Result<DaemonConnection::Use> c = Acquire();
  if (!c.ok()) return total;  // the daemon is away: misses
  // Batches past the protocol's limit go as several lookups, while every key so far was found.
  for (size_t first = 0; first < keys.size(); first += kMaxBatchKeys) {
    const std::span<const Key> part =
        keys.subspan(first, std::min<size_t>(kMaxBatchKeys, keys.size() - first));
    rpc::Request request;
    request.mutable_lookup()->set_keys(EncodeKeys(part));
    auto reply = (*c)->Call(std::move(request), rpc::Response::kLookup);
    if (!reply.ok()) return first == 0 ? LookupResult{} : total;
    Result<LookupResult> r = FromRpc(reply->lookup());
    if (!r.ok()) return first == 0 ? LookupResult{} : total;
    total.leading_hits += r->leading_hits;
    total.dram_bytes += r->dram_bytes;
    total.ssd_bytes += r->ssd_bytes;
    if (r->slowest_medium == MediaType::kSsd) total.slowest_medium = MediaType::kSsd;
    if (r->leading_hits < part.size()) break;
  }
  return total;
}

Result<std::unique_ptr<RestoreHandle>> RemoteStore::Restore(std::span<const Key> keys,
                                                            const KvLayout& layout,
                                                            const BlockBuffers& dst,
                                                            const RestoreOptions& options) {
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  FC_RETURN_IF_ERROR(ValidateBuffers(dst, layout, keys.size()));
  FC_RETURN_IF_ERROR(CheckBatch(keys.size(), "restore"));
  Result<DaemonConnection::Use> c = Acquire();
  if (!c.ok()) {  // the daemon is away: every key is a miss
    GetResult missed;
    missed.found.assign(keys.size(), 0);
    for (uint32_t l = 0; options.on_layer && l < layout.num_layers; ++l) options.on_layer(l);
    return std::unique_ptr<RestoreHandle>(
        std::make_unique<ReadyRestoreHandle>(std::move(missed), layout.num_layers));
  }
  auto r = RemoteRestore::Start(std::move(*c), &runner_, keys, layout, dst, options,
                                client_options_.verify_checksums);
  return std::unique_ptr<RestoreHandle>(std::make_unique<RemoteRestoreHandle>(std::move(r)));
}

StoreStats RemoteStore::GetStats() const {
  Result<DaemonConnection::Use> c = Acquire();
  if (!c.ok()) return {};
  rpc::Request request;
  request.mutable_stats();
  auto reply = (*c)->Call(std::move(request), rpc::Response::kStats);
  if (!reply.ok()) return {};
  return FromRpc(reply->stats());
}

Result<ClusterViewInfo> RemoteStore::ClusterView() const {
  FC_ASSIGN_OR_RETURN(DaemonConnection::Use c, Acquire());
  rpc::Request request;
  request.mutable_cluster_view();
  FC_ASSIGN_OR_RETURN(rpc::Response reply,
                      c->Call(std::move(request), rpc::Response::kClusterView));
  return FromRpc(reply.cluster_view());
}

}  // namespace flatcake::serve
