// UcxNode's request/reply messages (ucx_node_impl.h): sending, receiving (rendezvous into kept
// buffers), and dispatching to the handlers and to the calls waiting for their replies.
#include <algorithm>

#include "cluster/ucx_node_impl.h"
#include "serve/rpc_convert.h"
#include "util/aligned_buffer.h"

namespace flatcake::cluster {

using ucx_internal::Clock;
using ucx_internal::GetU32;
using ucx_internal::GetU64;
using ucx_internal::kAmReply;
using ucx_internal::kAmRequest;
using ucx_internal::PutU32;
using ucx_internal::PutU64;
using ucx_internal::UcxError;

void UcxNode::Impl::DoCall(std::string peer, uint32_t id, std::string header, std::string data,
                           std::chrono::milliseconds timeout, PendingCall call) {
  auto ep = Endpoint(peer);
  if (!ep.ok()) {
    call.peer = peer;
    return Complete(std::move(call), ep.status(), {}, {});
  }
  const uint64_t call_id = next_id_++;
  call.peer = peer;
  call.deadline = Clock::now() + timeout;
  calls_[call_id] = std::move(call);
  // call id, handler id, this worker's address (Reply's), the caller's header.
  auto* send = new SendContext{this, call_id, {}, UcxPayload(std::move(data))};
  PutU64(&send->header, call_id);
  PutU32(&send->header, id);
  PutU32(&send->header, static_cast<uint32_t>(address_.size()));
  send->header.append(address_);
  send->header.append(header);
  Send(*ep, kAmRequest, send, address_.size());
}

void UcxNode::Impl::Send(ucp_ep_h ep, unsigned am, SendContext* send, size_t inline_extra) {
  // At most 4 KiB in the UCX header, well within the fragment it must fit.
  if (send->header.size() > kInlineHeaderMax + std::min(inline_extra, 3 * kInlineHeaderMax)) {
    std::string moved;
    moved.reserve(send->header.size() + send->data.size());
    moved.append(send->header).append(send->data.data(), send->data.size());
    send->data = UcxPayload(std::move(moved));
    std::string marker(1, '\1');
    PutU32(&marker, static_cast<uint32_t>(send->header.size()));
    send->header = std::move(marker);
  } else {
    send->header.insert(send->header.begin(), '\0');
  }
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.cb.send = &Impl::OnSendDone;
  rp.user_data = send;
  ucs_status_ptr_t r =
      ucp_am_send_nbx(ep, am, send->header.data(), send->header.size(),
                      const_cast<char*>(send->data.data()), send->data.size(), &rp);
  if (r == nullptr) {
    delete send;
  } else if (UCS_PTR_IS_ERR(r)) {
    FailCall(send->call_id, UcxError("sending", UCS_PTR_STATUS(r)));
    delete send;
  } else {
    transfers_++;
  }
}

void UcxNode::Impl::OnSendDone(void* request, ucs_status_t status, void* user_data) {
  auto* send = static_cast<SendContext*>(user_data);
  send->impl->transfers_--;
  if (status != UCS_OK) send->impl->FailCall(send->call_id, UcxError("sending", status));
  delete send;
  ucp_request_free(request);
}

void UcxNode::Impl::FailCall(uint64_t call_id, Status st) {
  auto it = calls_.find(call_id);
  if (it == calls_.end()) return;
  PendingCall call = std::move(it->second);
  calls_.erase(it);
  Complete(std::move(call), std::move(st), {}, {});
}

void UcxNode::Impl::Complete(PendingCall call, Status st, std::string header, std::string data) {
  if (call.done) call.done(std::move(st), std::move(header), std::move(data));
}

std::string UcxNode::Impl::TakeBuffer(size_t len) {
  std::string buf;
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if (it->capacity() >= len) {
      buf = std::move(*it);
      spare_.erase(it);
      break;
    }
  }
  if (buf.capacity() < len) {
    // A fresh buffer: its pages are faulted in as resize fills it, 2 MiB at a time where the
    // kernel allows. On a VM where a 4 KiB fault costs about 11 us, four 64 MiB layers in flight
    // put the first layer of bench cluster's 2 GiB session at 0.8-1.4 s; 0.5-0.6 s so. Even so
    // a fresh 64 MiB took 118-196 ms there, on this thread, while the data of the replies before
    // it waited: ClusterStore keeps fewer requests in flight when its layers are that large.
    buf.reserve(len);
    AdviseHugePages(buf.data(), len);
  }
  buf.resize(len);  // fills only what it grows by
  return buf;
}

void UcxNode::Impl::Recycle(std::string buf) {
  if (buf.capacity() < kRecycledMin) return;
  if (spare_.size() == kRecycledMax) spare_.erase(spare_.begin());
  spare_.push_back(std::move(buf));
}

ucs_status_t UcxNode::Impl::OnRequestAm(void* arg, const void* header, size_t header_len,
                                        void* data, size_t len, const ucp_am_recv_param_t* param) {
  return static_cast<Impl*>(arg)->Receive(true, header, header_len, data, len, param);
}

ucs_status_t UcxNode::Impl::OnReplyAm(void* arg, const void* header, size_t header_len, void* data,
                                      size_t len, const ucp_am_recv_param_t* param) {
  return static_cast<Impl*>(arg)->Receive(false, header, header_len, data, len, param);
}

ucs_status_t UcxNode::Impl::Receive(bool request, const void* header, size_t header_len, void* data,
                                    size_t len, const ucp_am_recv_param_t* param) {
  std::string h(static_cast<const char*>(header), header_len);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    // Into a buffer of the node's own: the call may time out before the data is in, and UCX
    // cannot be made to stop writing into a receive it has started.
    auto* rv = new RndvReceive{this, request, std::move(h), TakeBuffer(len)};
    char* dest = rv->data.data();
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.recv_am = &Impl::OnRndvDone;
    rp.user_data = rv;
    ucs_status_ptr_t r = ucp_am_recv_data_nbx(worker_, data, dest, len, &rp);
    if (r == nullptr) {
      Landed(rv);
    } else if (UCS_PTR_IS_ERR(r)) {
      FailReceive(rv, UcxError("receiving", UCS_PTR_STATUS(r)));
    } else {
      transfers_++;
    }
    return UCS_OK;
  }
  Dispatch(request, std::move(h), std::string(static_cast<const char*>(data), len));
  return UCS_OK;
}

void UcxNode::Impl::OnRndvDone(void* request, ucs_status_t status, size_t, void* user_data) {
  auto* rv = static_cast<RndvReceive*>(user_data);
  rv->impl->transfers_--;
  if (status == UCS_OK) {
    rv->impl->Landed(rv);
  } else {
    rv->impl->FailReceive(rv, UcxError("receiving", status));
  }
  ucp_request_free(request);
}

void UcxNode::Impl::Landed(RndvReceive* rv) {
  Dispatch(rv->request, std::move(rv->header), std::move(rv->data));
  delete rv;
}

void UcxNode::Impl::FailReceive(RndvReceive* rv, const Status& st) {
  const std::string& h = rv->header;
  if (!rv->request && h.size() >= 13 && h[0] == '\0') FailCall(GetU64(h.data() + 1), st);
  Recycle(std::move(rv->data));
  delete rv;
}

void UcxNode::Impl::Dispatch(bool request, std::string header, std::string data) {
  if (header.empty()) return;
  if (header[0] == '\1') {  // the header is at the start of the data (Send)
    if (header.size() < 5) return;
    const uint32_t len = GetU32(header.data() + 1);
    if (data.size() < len) return;
    header = data.substr(0, len);
    data.erase(0, len);
  } else {
    header.erase(0, 1);
  }
  if (request) {
    if (header.size() < 16) return;  // not ours: dropped
    const uint64_t call_id = GetU64(header.data());
    const uint32_t id = GetU32(header.data() + 8);
    const uint32_t address_len = GetU32(header.data() + 12);
    if (address_len == 0 || address_len > kMaxCallerAddress || header.size() - 16 < address_len) {
      return;
    }
    std::string caller = header.substr(16, address_len);
    // The caller is there: a failure of an earlier endpoint to it holds up no reply to it.
    failed_.erase(caller);
    auto ep = Endpoint(caller);
    if (!ep.ok()) return;  // no way to answer: dropped, the call ends at its deadline
    const uint64_t generation = peers_[caller].generation;
    Handler h;
    {
      MutexLock lock(mu_);
      auto it = handlers_.find(id);
      if (it != handlers_.end()) h = it->second;
    }
    Responder respond = [this, call_id, caller, generation](Status st, std::string rh,
                                                            UcxPayload rd) {
      Post([this, call_id, caller, generation, st = std::move(st), rh = std::move(rh),
            rd = std::move(rd)]() mutable {
        Reply(caller, generation, call_id, st, rh, std::move(rd));
      });
    };
    if (!h) {
      respond(Status::Unsupported("no handler for request " + std::to_string(id)), {}, {});
      return;
    }
    h(header.substr(16 + address_len), std::move(data), std::move(respond));
    return;
  }
  // call id, the length of the error (a serialized rpc::Error; 0 when the call succeeded), it.
  if (header.size() < 12) return;
  const uint64_t call_id = GetU64(header.data());
  const uint32_t err_len = GetU32(header.data() + 8);
  if (header.size() < 12 + size_t{err_len}) return;
  auto it = calls_.find(call_id);
  if (it == calls_.end()) {  // timed out meanwhile
    Recycle(std::move(data));
    return;
  }
  PendingCall call = std::move(it->second);
  calls_.erase(it);
  Status st;
  if (err_len > 0) {
    rpc::Error error;
    st = error.ParseFromArray(header.data() + 12, static_cast<int>(err_len))
             ? serve::FromRpc(error).WithContext("peer")
             : Status::Corruption("ucx: a reply whose error does not parse");
  }
  Complete(std::move(call), std::move(st), header.substr(12 + err_len), std::move(data));
}

void UcxNode::Impl::Reply(const std::string& caller, uint64_t generation, uint64_t call_id,
                          const Status& st, const std::string& header, UcxPayload data) {
  // By the endpoint the request came with: gone, or replaced, when the caller went away or the
  // connection failed meanwhile, and then the call has ended at the caller too.
  auto it = peers_.find(caller);
  if (it == peers_.end() || it->second.generation != generation || it->second.ep == nullptr) {
    return;
  }
  ucp_ep_h ep = it->second.ep;
  auto* send = new SendContext{this, 0, {}, std::move(data)};
  PutU64(&send->header, call_id);
  const std::string err = st.ok() ? std::string() : serve::ToRpc(st).SerializeAsString();
  PutU32(&send->header, static_cast<uint32_t>(err.size()));
  send->header.append(err);
  send->header.append(header);
  Send(ep, kAmReply, send, 0);
}

}  // namespace flatcake::cluster
