#include "serve/daemon_session.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "flatcake/clock.h"
#include "serve/poll_wait.h"
#include "serve/rpc_convert.h"
#include "serve/serve_log.h"
#include "serve/unix_socket.h"
#include "serve/wire.h"
#include "store/flat_store.h"

namespace flatcake::serve {
namespace {

using Clock = std::chrono::steady_clock;

// Which protocol error a frame that RecvFrame or ParseRequest refused is (serve/wire.h says
// what each code means there).
ProtocolError FrameErrorOf(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument: return ProtocolError::kFrameTooLarge;
    case StatusCode::kUnsupported: return ProtocolError::kBadVersion;
    case StatusCode::kDeadlineExceeded: return ProtocolError::kTimeout;
    default: return ProtocolError::kBadFrame;
  }
}

// A peer's bytes as they may stand in a log line: printable ASCII, the rest as '?'.
std::string Printable(std::string_view text) {
  std::string out(text.substr(0, 256));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return out;
}

// Where a segment or block at pool offset `offset` of `medium` lies for a client: the file and
// the position in it (superblock included), or the arena offset.
void Locate(MediaType medium, uint64_t offset, const SsdPoolGeometry& geometry, uint32_t* file,
            uint64_t* at) {
  if (medium == MediaType::kSsd) {
    *file = geometry.FileOf(offset);
    *at = geometry.FileOffset(offset);
  } else {
    *file = 0;
    *at = offset;
  }
}

}  // namespace

ClientSession::ClientSession(DaemonContext& ctx, UniqueFd fd, uint64_t token)
    : ctx_(ctx), store_(*ctx.store), fd_(std::move(fd)), token_(token) {
  id_.session_token = token;
}

ClientSession::~ClientSession() {
  if (writer_.joinable()) writer_.join();  // (Run joined it; for a session that never ran)
}

std::string ClientSession::Who() const {
  std::string who = "client " + std::to_string(token_) + " (pid " + std::to_string(id_.peer.pid) +
                    ", uid " + std::to_string(id_.peer.uid);
  if (!id_.tenant.empty()) who += ", tenant " + id_.tenant;
  return who + ")";
}

void ClientSession::Run() {
  reader_thread_ = std::this_thread::get_id();
  std::optional<ProtocolError> error;
  const Status hello = Handshake(&error);
  std::string reason;
  if (hello.ok()) {
    writer_ = std::thread([this] { WriterLoop(); });
    ctx_.observer->OnClientConnected(id_);
    ctx_.observer->OnRequest(id_, RequestType::kHello, true);
    Logf(LogLevel::kInfo, "%s: connected, name '%s', protocol %u", Who().c_str(),
         Printable(id_.name).c_str(), version_);
    reason = Serve(&error);
  } else {
    reason = hello.ToString();
  }
  Close(reason, error, hello.ok());
  finished_.store(true, std::memory_order_release);
}

Status ClientSession::Handshake(std::optional<ProtocolError>* error) {
  FC_ASSIGN_OR_RETURN(id_.peer, GetPeerCredentials(fd_.get()));
  version_ = kProtocolVersion;  // for an Error before the versions are settled
  auto frame = RecvFrame(fd_.get(), kHelloFrameLimits, ctx_.options->hello_timeout);
  if (!frame.ok()) {
    // A client that closes before Hello merely went away.
    if (frame.status().code() != StatusCode::kAborted) *error = FrameErrorOf(frame.status());
    return frame.status().WithContext("before Hello");
  }
  version_ = std::clamp(frame->header.version, kMinProtocolVersion, kProtocolVersion);
  auto request = ParseRequest(frame->payload);
  if (!request.ok()) {
    *error = ProtocolError::kBadFrame;
    return request.status().WithContext("before Hello");
  }
  const uint64_t rid = request->id();
  if (request->body_case() != rpc::Request::kHello) {
    *error = ProtocolError::kNoHello;
    const Status st = Status::InvalidArgument("the first request must be Hello");
    SendError(rid, st);
    return st;
  }
  if (Status valid = ValidateRequest(*request); !valid.ok()) {
    *error = valid.code() == StatusCode::kUnsupported ? ProtocolError::kUnknownRequest
                                                      : ProtocolError::kInvalidRequest;
    SendError(rid, valid);
    return valid;
  }
  const rpc::Hello& hello = request->hello();
  id_.name = hello.client_name();
  Status allowed = CheckPeer(id_.peer, ctx_.options->allow);
  if (allowed.ok() && ctx_.options->only_listed_tenants &&
      !ctx_.options->tenant_quotas.contains(hello.tenant())) {
    allowed = Status::PermissionDenied("tenant '" + hello.tenant() + "' is not configured");
  }
  if (!allowed.ok()) {
    Logf(LogLevel::kWarning, "%s: refused: %s", Who().c_str(), allowed.ToString().c_str());
    *error = ProtocolError::kPeerRefused;
    SendError(rid, allowed);
    return allowed;
  }
  // Docs/protocol.md, versioning: the lower of the two highest versions, if both speak it.
  const uint32_t v = std::min<uint32_t>(hello.protocol_version(), kProtocolVersion);
  if (v < hello.min_protocol_version() || v < kMinProtocolVersion) {
    const Status st = Status::Unsupported(
        "client speaks protocol " + std::to_string(hello.min_protocol_version()) + ".." +
        std::to_string(hello.protocol_version()) + ", this daemon " +
        std::to_string(kMinProtocolVersion) + ".." + std::to_string(kProtocolVersion));
    Logf(LogLevel::kWarning, "%s: refused: %s", Who().c_str(), st.ToString().c_str());
    *error = ProtocolError::kBadVersion;
    SendError(rid, st);
    return st;
  }
  version_ = static_cast<uint16_t>(v);
  id_.tenant = hello.tenant();
  ns_ = std::make_unique<TenantNamespace>(id_.tenant);

  rpc::Response reply;
  reply.set_id(rid);
  rpc::HelloReply* h = reply.mutable_hello();
  *h = ctx_.media;
  h->set_protocol_version(version_);
  h->set_min_protocol_version(kMinProtocolVersion);
  h->set_session_token(token_);
  const int arena[1] = {ctx_.arena_fd};
  return Send(reply, ctx_.arena_fd >= 0 ? std::span<const int>(arena) : std::span<const int>());
}

std::string ClientSession::Serve(std::optional<ProtocolError>* error) {
  const FrameLimits limits{version_, version_, kMaxRequestPayloadBytes};
  for (;;) {
    // Idle between frames for as long as the client likes; once a frame starts, it must be
    // whole within frame_timeout.
    Status ready = WaitReady(fd_.get(), POLLIN, Deadline(kNoTimeout), "waiting for a request");
    auto frame = ready.ok() ? RecvFrame(fd_.get(), limits, ctx_.options->frame_timeout)
                            : Result<ReceivedFrame>(ready);
    if (!frame.ok()) {
      const Status& st = frame.status();
      if (stop_reading_.load()) return "daemon shutting down";
      if (broken_.load()) return "the client does not take its replies";
      if (st.code() == StatusCode::kAborted) return "closed by the client";
      *error = FrameErrorOf(st);
      // A frame of another version was whole as far as its header goes; its id is unknown.
      if (st.code() == StatusCode::kUnsupported) SendError(0, st);
      return "bad frame: " + st.ToString();
    }
    auto request = ParseRequest(frame->payload);
    if (!request.ok()) {
      *error = ProtocolError::kBadFrame;
      return "bad frame: " + request.status().ToString();
    }
    if (!frame->fds.empty()) {
      Logf(LogLevel::kDebug, "%s: %zu descriptors sent with request %lu, closed", Who().c_str(),
           frame->fds.size(), static_cast<unsigned long>(request->id()));
    }
    Status valid =
        request->id() == 0
            ? Status::InvalidArgument("request id 0: ids start at 1 (0 names no request)")
            : ValidateRequest(*request);
    if (!valid.ok()) {
      ctx_.observer->OnRequest(id_, RequestTypeOf(*request), false);
      ctx_.observer->OnProtocolError(id_,
                                     valid.code() == StatusCode::kUnsupported
                                         ? ProtocolError::kUnknownRequest
                                         : ProtocolError::kInvalidRequest,
                                     valid.message());
      SendError(request->id(), valid);
    } else {
      Dispatch(*request);
    }
    if (broken_.load()) return "the client does not take its replies";
  }
}

void ClientSession::Dispatch(const rpc::Request& request) {
  rpc::Response out;
  out.set_id(request.id());
  bool deferred = false;
  Status st;
  switch (request.body_case()) {
    case rpc::Request::kLookup: st = HandleLookup(request.lookup(), &out); break;
    case rpc::Request::kExists: st = HandleExists(request.exists(), &out); break;
    case rpc::Request::kReserveWrite: st = HandleReserveWrite(request.reserve_write(), &out); break;
    case rpc::Request::kPublishWrite: st = HandlePublishWrite(request.publish_write(), &out); break;
    case rpc::Request::kAbortWrite: st = HandleAbortWrite(request.abort_write(), &out); break;
    case rpc::Request::kPinRead: st = HandlePinRead(request, &out, &deferred); break;
    case rpc::Request::kUnpin: st = HandleUnpin(request.unpin(), &out); break;
    case rpc::Request::kStats: *out.mutable_stats() = ToRpc(store_.GetStats()); break;
    case rpc::Request::kClusterView:
      *out.mutable_cluster_view() =
          ToRpc(ctx_.options->cluster_view ? ctx_.options->cluster_view() : ClusterViewInfo{});
      break;
    case rpc::Request::kHello:
      st = Status::InvalidArgument("Hello was sent already");
      ctx_.observer->OnProtocolError(id_, ProtocolError::kNoHello, st.message());
      break;
    case rpc::Request::BODY_NOT_SET: st = Status::Unsupported("no body"); break;
  }
  ctx_.observer->OnRequest(id_, RequestTypeOf(request), st.ok());
  if (!st.ok()) {
    SendError(request.id(), st);
  } else if (!deferred) {
    (void)Send(out);
  }
}

Result<std::vector<Key>> ClientSession::StoredKeys(const std::string& blob) const {
  FC_ASSIGN_OR_RETURN(std::vector<Key> keys, DecodeKeys(blob, kMaxBatchKeys));
  return ns_->StoredKeys(keys);
}

Status ClientSession::HandleLookup(const rpc::Lookup& req, rpc::Response* out) {
  FC_ASSIGN_OR_RETURN(const std::vector<Key> keys, StoredKeys(req.keys()));
  *out->mutable_lookup() = ToRpc(store_.Lookup(keys));
  return Status::OK();
}

Status ClientSession::HandleExists(const rpc::Exists& req, rpc::Response* out) {
  FC_ASSIGN_OR_RETURN(const std::vector<Key> keys, StoredKeys(req.keys()));
  out->mutable_exists()->set_leading_hits(store_.Lookup(keys).leading_hits);
  return Status::OK();
}

Status ClientSession::HandleReserveWrite(const rpc::ReserveWrite& req, rpc::Response* out) {
  const uint32_t limit = ctx_.options->max_reservations_per_client;
  {
    MutexLock lock(mu_);
    if (limit != 0 && reservations_.size() >= limit) {
      return Status::Busy("this connection holds " + std::to_string(limit) +
                          " unpublished reservations, its limit");
    }
  }
  FC_ASSIGN_OR_RETURN(const std::vector<Key> keys, StoredKeys(req.keys()));
  FC_ASSIGN_OR_RETURN(const WriteHints hints, FromRpc(req.hints()));
  const KvLayout layout = FromRpc(req.layout());
  FC_ASSIGN_OR_RETURN(WriteReservation r,
                      store_.ReserveWrite(token_, keys, layout, ns_->StoredHints(hints)));
  Reservation held{r.medium, r.bytes(), r.scope_id, r.scope_gen, r.blocks};
  if (r.id != 0) {
    if (Status quota = ctx_.ledger->Reserve(id_.tenant, r.medium, held.bytes); !quota.ok()) {
      (void)store_.AbortWrite(token_, r.id);
      return quota;
    }
  }
  rpc::ReserveWriteReply* reply = out->mutable_reserve_write();
  reply->set_reservation_id(r.id);
  for (size_t i = 0; i < keys.size(); ++i) reply->add_keys()->set_already_present(r.present[i]);
  for (size_t s = 0; s < r.segments.size(); ++s) {
    const ReservedSegment& seg = r.segments[s];
    rpc::Segment* m = reply->add_segments();
    uint32_t file = 0;
    uint64_t at = 0;
    Locate(seg.medium, seg.base, ctx_.geometry, &file, &at);
    m->set_medium(ToRpc(seg.medium));
    m->set_file_index(file);
    m->set_offset(at);
    m->set_blocks(seg.num_blocks);
    m->set_plane_stride(seg.plane_stride);
    m->set_layer_stride(seg.layer_stride);
    m->set_block_stride(layout.slice_bytes);
    m->set_bytes(seg.bytes);
    for (uint32_t b = 0; b < seg.num_blocks; ++b) {
      rpc::ReservedKey* k = reply->mutable_keys(static_cast<int>(r.blocks[seg.first_block + b]));
      k->set_segment(static_cast<uint32_t>(s));
      k->set_block(b);
    }
  }
  if (r.id != 0) {
    MutexLock lock(mu_);
    reservations_.emplace(r.id, std::move(held));
  }
  return Status::OK();
}

Result<ClientSession::Reservation> ClientSession::TakeReservation(uint64_t id,
                                                                  std::optional<size_t> checksums) {
  MutexLock lock(mu_);
  auto it = reservations_.find(id);
  if (it == reservations_.end()) {
    return Status::NotFound("write reservation " + std::to_string(id) +
                            " is not in force on this connection");
  }
  if (checksums && *checksums != it->second.blocks.size()) {
    return Status::InvalidArgument(std::to_string(*checksums) + " checksums for the " +
                                   std::to_string(it->second.blocks.size()) +
                                   " reserved blocks of reservation " + std::to_string(id));
  }
  Reservation res = std::move(it->second);
  reservations_.erase(it);
  return res;
}

Status ClientSession::HandlePublishWrite(const rpc::PublishWrite& req, rpc::Response* out) {
  const uint64_t id = req.reservation_id();
  FC_ASSIGN_OR_RETURN(const Reservation res,
                      TakeReservation(id, static_cast<size_t>(req.checksums_size())));
  // The checksums come in request order; the store takes them in its order (res.blocks).
  std::vector<uint32_t> ascending = res.blocks;
  std::sort(ascending.begin(), ascending.end());
  std::vector<uint64_t> sums(res.blocks.size());
  for (size_t j = 0; j < res.blocks.size(); ++j) {
    const auto k = std::lower_bound(ascending.begin(), ascending.end(), res.blocks[j]);
    sums[j] = req.checksums(static_cast<int>(k - ascending.begin()));
  }
  // Charged before the store publishes: until then the reservation pins its scope, which could
  // otherwise be freed (and its release missed) between the publish and the charge. A publish
  // that fails stays charged until that scope goes.
  ctx_.ledger->Publish(id_.tenant, res.medium, res.bytes, res.scope_id, res.scope_gen);
  FC_RETURN_IF_ERROR(store_.PublishWrite(token_, id, sums));
  out->mutable_publish_write()->set_published(static_cast<uint32_t>(sums.size()));
  return Status::OK();
}

Status ClientSession::HandleAbortWrite(const rpc::AbortWrite& req, rpc::Response* out) {
  const uint64_t id = req.reservation_id();
  FC_ASSIGN_OR_RETURN(const Reservation res, TakeReservation(id, std::nullopt));
  Status st = store_.AbortWrite(token_, id);
  ctx_.ledger->Unreserve(id_.tenant, res.medium, res.bytes);
  FC_RETURN_IF_ERROR(st);
  out->mutable_abort_write();
  return Status::OK();
}

Status ClientSession::HandlePinRead(const rpc::Request& request, rpc::Response* out,
                                    bool* deferred) {
  const rpc::PinRead& req = request.pin_read();
  const Clock::time_point start = Clock::now();
  const int64_t arrival = req.has_arrival_ns() ? req.arrival_ns() : SteadyNowNs();
  const uint32_t limit = ctx_.options->max_pins_per_client;
  {
    MutexLock lock(mu_);
    if (limit != 0 && pins_.size() >= limit) {
      return Status::Busy("this connection holds " + std::to_string(limit) + " pins, its limit");
    }
  }
  FC_ASSIGN_OR_RETURN(const std::vector<Key> keys, StoredKeys(req.keys()));
  const KvLayout layout = FromRpc(req.layout());
  FC_ASSIGN_OR_RETURN(const ReadPin pin, store_.PinRead(token_, keys, layout));
  rpc::PinReadReply* reply = out->mutable_pin_read();
  reply->set_pin_id(pin.id);
  reply->set_hits(static_cast<uint32_t>(pin.hits.size()));
  for (size_t i = 0; i < keys.size(); ++i) reply->add_blocks();
  uint32_t leading = 0;
  for (const PinnedHit& h : pin.hits) {
    rpc::BlockLocation* b = reply->mutable_blocks(static_cast<int>(h.key));
    uint32_t file = 0;
    uint64_t at = 0;
    Locate(h.medium, h.offset, ctx_.geometry, &file, &at);
    b->set_found(true);
    b->set_medium(ToRpc(h.medium));
    b->set_file_index(file);
    b->set_offset(at);
    b->set_plane_stride(h.layer_stride / layout.num_planes);
    b->set_layer_stride(h.layer_stride);
    b->set_checksum(h.checksum);
    if (h.key == leading) ++leading;  // hits come in key order
  }
  reply->set_leading_hits(leading);
  uint64_t hits_on[2] = {0, 0};  // by MediaType's number
  for (const PinnedHit& h : pin.hits) ++hits_on[h.medium == MediaType::kSsd ? 1 : 0];
  ctx_.observer->OnPinRead(hits_on[0], hits_on[1], keys.size() - pin.hits.size());
  if (pin.id == 0) return Status::OK();

  const MediaType slowest = pin.ssd_bytes > 0 ? MediaType::kSsd : MediaType::kDram;
  {
    MutexLock lock(mu_);
    pins_.emplace(pin.id, Pin{static_cast<uint32_t>(keys.size()),
                              static_cast<uint32_t>(pin.hits.size()), slowest, start});
    ++admissions_pending_;
  }
  auto response = std::make_shared<rpc::Response>(std::move(*out));
  const uint64_t pin_id = pin.id;
  auto on_admitted = [self = shared_from_this(), response, pin_id, arrival,
                      slowest](Status admitted) {
    Outgoing o;
    if (admitted.ok()) {
      o.response = std::move(*response);
      // Only SSD reads wait for the window; DRAM-ready pins are admitted as they arrive.
      const int64_t queued =
          slowest == MediaType::kSsd ? std::max<int64_t>(0, SteadyNowNs() - arrival) : 0;
      o.response.mutable_pin_read()->set_queued_ns(queued);
      if (slowest == MediaType::kSsd) {
        self->ctx_.observer->ObserveQueueWait(static_cast<double>(queued) * 1e-9);
      }
    } else {
      o.response.set_id(response->id());
      *o.response.mutable_error() = ToRpc(admitted.WithContext("pin read"));
      o.unpin = pin_id;
    }
    self->Admitted(std::move(o));
  };
  admitting_ = true;
  const Status st = store_.AdmitRead(token_, pin_id, arrival, std::move(on_admitted));
  admitting_ = false;
  if (!st.ok()) {
    {
      MutexLock lock(mu_);
      --admissions_pending_;
      pins_.erase(pin_id);
    }
    (void)store_.Unpin(token_, pin_id);
  } else {
    *deferred = true;
  }
  SendInlineReplies();
  return st;
}

void ClientSession::SendInlineReplies() {
  std::vector<Outgoing> told;
  told.swap(inline_replies_);
  for (Outgoing& o : told) {
    if (o.unpin != 0) {
      (void)store_.Unpin(token_, o.unpin);
      MutexLock lock(mu_);
      pins_.erase(o.unpin);
    }
    (void)Send(o.response);
  }
}

Status ClientSession::HandleUnpin(const rpc::Unpin& req, rpc::Response* out) {
  const uint64_t id = req.pin_id();
  Pin pin;
  {
    MutexLock lock(mu_);
    auto it = pins_.find(id);
    if (it == pins_.end()) {
      return Status::NotFound("read pin " + std::to_string(id) +
                              " is not in force on this connection");
    }
    pin = it->second;
    pins_.erase(it);
  }
  // Gives the read window back; InvalidArgument for a pin whose read is not admitted yet, whose
  // Unpin below ends its request all the same.
  (void)store_.FinishRead(token_, id);
  // What the client's reads found, for the store's counters (capped by what it was handed).
  GetResult found;
  found.hits = std::min(req.delivered(), pin.hits);
  found.corrupt = std::min(req.corrupt(), pin.hits);
  found.bytes_from_dram = req.bytes_from_dram();
  found.bytes_from_ssd = req.bytes_from_ssd();
  found.ssd_bytes_read = req.ssd_bytes_read();
  found.ssd_reads = req.ssd_reads();
  store_.RecordLeaseRead(pin.num_keys, found);
  FC_RETURN_IF_ERROR(store_.Unpin(token_, id));
  ctx_.observer->ObserveRestore(pin.slowest,
                                std::chrono::duration<double>(Clock::now() - pin.start).count());
  out->mutable_unpin();
  return Status::OK();
}

void ClientSession::Admitted(Outgoing out) {
  if (std::this_thread::get_id() == reader_thread_ && admitting_) {
    inline_replies_.push_back(std::move(out));
    MutexLock lock(mu_);
    --admissions_pending_;
    return;
  }
  {
    MutexLock lock(mu_);
    --admissions_pending_;
    if (!writer_stop_) queue_.push_back(std::move(out));
  }
  cv_.NotifyAll();
}

void ClientSession::WriterLoop() {
  MutexLock lock(mu_);
  for (;;) {
    while (queue_.empty() && !writer_stop_) cv_.Wait(mu_);
    if (queue_.empty()) return;  // stopped, and everything queued went out
    Outgoing o = std::move(queue_.front());
    queue_.pop_front();
    if (o.unpin != 0) pins_.erase(o.unpin);
    lock.Unlock();
    if (o.unpin != 0) (void)store_.Unpin(token_, o.unpin);
    if (!broken_.load()) (void)Send(o.response);
    lock.Lock();
  }
}

Status ClientSession::Send(const rpc::Response& response, std::span<const int> fds) {
  auto frame = EncodeFrame(response, static_cast<uint32_t>(fds.size()), version_);
  if (!frame.ok()) {
    Logf(LogLevel::kError, "%s: reply %lu not sent: %s", Who().c_str(),
         static_cast<unsigned long>(response.id()), frame.status().ToString().c_str());
    return frame.status();
  }
  Status st;
  {
    MutexLock lock(send_mu_);
    st = SendFrame(fd_.get(), *frame, fds, ctx_.options->send_timeout);
  }
  if (!st.ok()) Break();
  return st;
}

void ClientSession::SendError(uint64_t id, const Status& status) {
  rpc::Response out;
  out.set_id(id);
  *out.mutable_error() = ToRpc(status);
  (void)Send(out);
}

void ClientSession::Break() {
  broken_.store(true);
  ::shutdown(fd_.get(), SHUT_RDWR);
}

void ClientSession::StopReading(Clock::time_point deadline) {
  {
    MutexLock lock(mu_);
    shutdown_deadline_ = deadline;
  }
  stop_reading_.store(true);
  // What the client sent already is still read; it can send no more (the peer's side is shut).
  ::shutdown(fd_.get(), SHUT_RD);
}

void ClientSession::Close(const std::string& reason, std::optional<ProtocolError> error,
                          bool greeted) {
  if (stop_reading_.load()) {
    // Shutdown: PinReads that wait for FC-MAS get until the deadline to be admitted and answered.
    MutexLock lock(mu_);
    while (admissions_pending_ > 0 && Clock::now() < shutdown_deadline_) {
      cv_.WaitUntil(mu_, shutdown_deadline_);
    }
  }
  std::vector<uint64_t> pin_ids;
  bool had_writes = false;
  {
    MutexLock lock(mu_);
    had_writes = !reservations_.empty();
    for (const auto& [pin, unused] : pins_) pin_ids.push_back(pin);
  }
  if (had_writes && !stop_reading_.load() && ctx_.options->write_quarantine.count() > 0) {
    // DaemonOptions::write_quarantine: the pins go now, the extents after the late writes.
    for (uint64_t pin : pin_ids) (void)store_.Unpin(token_, pin);
    std::this_thread::sleep_for(ctx_.options->write_quarantine);
  }
  const FlatStore::ReleasedLeases released = store_.ReleaseOwner(token_);
  std::unordered_map<uint64_t, Reservation> unpublished;
  {
    MutexLock lock(mu_);
    unpublished.swap(reservations_);
    pins_.clear();
    writer_stop_ = true;
  }
  cv_.NotifyAll();
  for (const auto& [id, r] : unpublished) ctx_.ledger->Unreserve(id_.tenant, r.medium, r.bytes);
  if (writer_.joinable()) writer_.join();  // after sending what was queued
  ::shutdown(fd_.get(), SHUT_RDWR);
  const LogLevel level = error ? LogLevel::kWarning : LogLevel::kInfo;
  if (greeted || error || LogEnabled(LogLevel::kDebug)) {
    Logf(level, "%s: closed: %s; released %u reservations, %u pins", Who().c_str(), reason.c_str(),
         released.writes, released.pins);
  }
  if (error) ctx_.observer->OnProtocolError(id_, *error, reason);
  ctx_.observer->OnClientClosed(id_, reason);
}

}  // namespace flatcake::serve
