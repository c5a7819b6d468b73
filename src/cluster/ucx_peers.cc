// UcxNode's peers (ucx_node_impl.h): endpoints, peers UCX reports gone, one-sided gets and
// registrations.
#include <algorithm>

#include "cluster/ucx_node_impl.h"

namespace flatcake::cluster {

using ucx_internal::Clock;
using ucx_internal::UcxError;

Result<ucp_ep_h> UcxNode::Impl::Endpoint(const std::string& peer) {
  auto it = peers_.find(peer);
  if (it != peers_.end() && it->second.ep != nullptr) return it->second.ep;
  // A peer UCX found gone is not connected to again for a while: each attempt at a dead
  // address costs a connection and a UCX error line, and every request of the clients' until
  // their view drops the member would make one.
  if (auto f = failed_.find(peer); f != failed_.end()) {
    const auto since = Clock::now() - f->second;
    if (since < kReconnectAfter) {
      return Status::IOError(
          "ucx: peer unreachable (gone " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(since).count()) +
          " ms ago; it is tried again " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(kReconnectAfter).count()) +
          " ms after)");
    }
    failed_.erase(f);
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(peer.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &Impl::OnEpError;
  ep.err_handler.arg = this;
  ucp_ep_h h = nullptr;
  const ucs_status_t st = ucp_ep_create(worker_, &ep, &h);
  if (st != UCS_OK) return UcxError("connecting to a peer", st);
  Peer& p = peers_[peer];
  p.ep = h;
  p.generation = next_generation_++;
  return h;
}

void UcxNode::Impl::OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  static_cast<Impl*>(arg)->PeerFailed(ep, status);
}

void UcxNode::Impl::PeerFailed(ucp_ep_h ep, ucs_status_t status) {
  std::string peer;
  for (auto& [addr, p] : peers_) {
    if (p.ep == ep) peer = addr;
  }
  if (peer.empty()) return;
  failed_[peer] = Clock::now();
  const Status err = Status::IOError(std::string("ucx: peer gone: ") + ucs_status_string(status));
  std::vector<uint64_t> failed;
  for (auto& [id, c] : calls_) {
    if (c.peer == peer) failed.push_back(id);
  }
  for (uint64_t id : failed) FailCall(id, err);
  for (auto& [id, g] : gets_) {
    if (g->peer == peer && g->status.ok()) g->status = err;
  }
  ClosePeer(peer);
}

void UcxNode::Impl::ClosePeer(const std::string& peer) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return;
  Peer p = std::move(it->second);
  peers_.erase(it);
  // Closed before its rkeys go: a forced close completes the requests still using them.
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &rp);
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing_.push_back(r);
  for (auto& [blob, rkey] : p.rkeys) ucp_rkey_destroy(rkey);
}

void UcxNode::Impl::DoGet(std::string peer, std::string rkey_blob, std::vector<GetPiece> pieces,
                          std::chrono::milliseconds timeout, std::function<void(Status)> done) {
  auto ep = Endpoint(peer);
  if (!ep.ok()) return done(ep.status());
  Peer& p = peers_[peer];
  ucp_rkey_h rkey = nullptr;
  auto cached = p.rkeys.find(rkey_blob);
  if (cached != p.rkeys.end()) {
    rkey = cached->second;
  } else {
    const ucs_status_t st = ucp_ep_rkey_unpack(*ep, rkey_blob.data(), &rkey);
    if (st != UCS_OK) return done(UcxError("unpacking a remote key", st));
    p.rkeys.emplace(rkey_blob, rkey);
  }
  const uint64_t get_id = next_id_++;
  auto g = std::make_unique<PendingGet>();
  g->impl = this;
  g->id = get_id;
  g->peer = peer;
  g->deadline = Clock::now() + timeout;
  g->done = std::move(done);
  PendingGet* raw = g.get();
  gets_[get_id] = std::move(g);
  for (const GetPiece& piece : pieces) {
    if (piece.len == 0) continue;
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.send = &Impl::OnGetDone;
    rp.user_data = raw;
    ucs_status_ptr_t r = ucp_get_nbx(*ep, piece.local, piece.len, piece.remote_addr, rkey, &rp);
    if (r == nullptr) continue;
    if (UCS_PTR_IS_ERR(r)) {
      if (raw->status.ok()) raw->status = UcxError("ucp_get_nbx", UCS_PTR_STATUS(r));
      break;
    }
    raw->outstanding.push_back(r);
  }
  MaybeFinishGet(raw);
}

void UcxNode::Impl::OnGetDone(void* request, ucs_status_t status, void* user_data) {
  auto* g = static_cast<PendingGet*>(user_data);
  if (status != UCS_OK && g->status.ok()) g->status = UcxError("get", status);
  // (A request ucp_get_nbx returned is listed before any progress can complete it.)
  auto it = std::find(g->outstanding.begin(), g->outstanding.end(), request);
  if (it != g->outstanding.end()) g->outstanding.erase(it);
  ucp_request_free(request);
  g->impl->MaybeFinishGet(g);
}

void UcxNode::Impl::MaybeFinishGet(PendingGet* g) {
  if (g->in_cancel) return;
  if (!g->outstanding.empty()) {
    if (!g->status.ok() && !g->cancelled) CancelGet(g);
    return;
  }
  std::function<void(Status)> done = std::move(g->done);
  Status st = g->status;
  gets_.erase(g->id);  // frees g
  if (done) done(std::move(st));
}

void UcxNode::Impl::CancelGet(PendingGet* g) {
  g->cancelled = true;
  g->in_cancel = true;
  const std::vector<void*> reqs = g->outstanding;
  for (void* r : reqs) {
    if (std::find(g->outstanding.begin(), g->outstanding.end(), r) != g->outstanding.end()) {
      ucp_request_cancel(worker_, r);
    }
  }
  g->in_cancel = false;
  MaybeFinishGet(g);
}

Result<UcxNode::Registration> UcxNode::Impl::DoRegister(void* base, size_t len) {
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = base;
  mp.length = len;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(context_, &mp, &memh);
  if (st != UCS_OK) return UcxError("ucp_mem_map", st);
  void* packed = nullptr;
  size_t packed_len = 0;
  st = ucp_rkey_pack(context_, memh, &packed, &packed_len);
  if (st != UCS_OK) {
    ucp_mem_unmap(context_, memh);
    return UcxError("ucp_rkey_pack", st);
  }
  Registration out;
  out.handle = next_id_++;
  out.rkey.assign(static_cast<const char*>(packed), packed_len);
  ucp_rkey_buffer_release(packed);
  regs_[out.handle] = memh;
  return out;
}

void UcxNode::Impl::DoUnregister(uint64_t handle) {
  auto it = regs_.find(handle);
  if (it == regs_.end()) return;
  ucp_mem_unmap(context_, it->second);
  regs_.erase(it);
}

}  // namespace flatcake::cluster
