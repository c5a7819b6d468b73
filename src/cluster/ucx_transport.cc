#include "cluster/ucx_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <thread>
#include <unordered_map>

#include "serve/rpc_convert.h"
#include "util/thread_annotations.h"

namespace flatcake::cluster {
namespace {

using Clock = std::chrono::steady_clock;

// Active message ids of the transport itself.
constexpr unsigned kAmRequest = 1;
constexpr unsigned kAmReply = 2;

Status UcxError(const char* what, ucs_status_t st) {
  return Status::IOError(std::string("ucx: ") + what + ": " + ucs_status_string(st));
}

void PutU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }
void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
uint64_t GetU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t GetU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

class UcxNode::Impl {
 public:
  // A call waiting for its reply.
  struct PendingCall {
    std::string peer;
    Clock::time_point deadline;
    ReplyCallback done;
  };
  ~Impl() { Shutdown(); }

  Status Init() {
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) return UcxError("reading the configuration", st);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    st = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (st != UCS_OK) return UcxError("ucp_init", st);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(context_, &wp, &worker_);
    if (st != UCS_OK) return UcxError("ucp_worker_create", st);
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    st = ucp_worker_get_address(worker_, &addr, &len);
    if (st != UCS_OK) return UcxError("ucp_worker_get_address", st);
    address_.assign(reinterpret_cast<const char*>(addr), len);
    ucp_worker_release_address(worker_, addr);
    st = ucp_worker_get_efd(worker_, &worker_fd_);
    if (st != UCS_OK) return UcxError("ucp_worker_get_efd", st);
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return Status::FromErrno(errno, "eventfd");
    for (unsigned id : {kAmRequest, kAmReply}) {
      ucp_am_handler_param_t hp{};
      hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG;
      hp.id = id;
      hp.cb = id == kAmRequest ? &Impl::OnRequestAm : &Impl::OnReplyAm;
      hp.arg = this;
      st = ucp_worker_set_am_recv_handler(worker_, &hp);
      if (st != UCS_OK) return UcxError("ucp_worker_set_am_recv_handler", st);
    }
    thread_ = std::thread([this] { Loop(); });
    return Status::OK();
  }

  const std::string& address() const { return address_; }

  // Runs `task` on the progress thread; false (the task dropped, not run) once the node is
  // stopping: every task taken before that runs.
  bool Post(std::function<void()> task) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      if (stopping_) return false;
      tasks_.push_back(std::move(task));
    }
    Wake();
    return true;
  }
  void Wake() {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }

  // UcxNode::Reuse: the spare buffers are the progress thread's.
  void Reuse(std::string buffer) EXCLUDES(mu_) {
    Post([this, b = std::move(buffer)]() mutable { Recycle(std::move(b)); });
  }

  void SetHandler(uint32_t id, Handler h) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    handlers_[id] = std::move(h);
  }

  // UcxNode::Quiesce: a task queued behind everything queued now; the progress thread runs
  // handlers and callbacks one at a time, so once it has run, none that started before is left.
  void Quiesce() EXCLUDES(mu_) {
    if (!thread_.joinable() || std::this_thread::get_id() == thread_.get_id()) return;
    auto ran = std::make_shared<std::promise<void>>();
    std::future<void> done = ran->get_future();
    if (!Post([ran] { ran->set_value(); })) return;
    while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      MutexLock lock(mu_);
      if (stopping_) return;  // tasks posted now may never run; the shutdown joins the thread
    }
  }

  void Shutdown() EXCLUDES(mu_) {
    if (thread_.joinable()) {
      {
        MutexLock lock(mu_);
        stopping_ = true;
      }
      Wake();
      thread_.join();
    }
    if (worker_ != nullptr) {
      ucp_worker_destroy(worker_);
      worker_ = nullptr;
    }
    if (context_ != nullptr) {
      ucp_cleanup(context_);
      context_ = nullptr;
    }
    if (wake_fd_ >= 0) ::close(wake_fd_);
    wake_fd_ = -1;
  }

  // --- on the progress thread only, from here on ---

  void DoCall(std::string peer, uint32_t id, std::string header, std::string data,
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
    auto* send = new SendContext{this, call_id, {}, UcxPayload(std::move(data))};
    PutU64(&send->header, call_id);
    PutU32(&send->header, id);
    send->header.append(header);
    Send(*ep, kAmRequest, send, UCP_AM_SEND_FLAG_REPLY);
  }

  void DoGet(std::string peer, std::string rkey_blob, std::vector<GetPiece> pieces,
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

  Result<Registration> DoRegister(void* base, size_t len) {
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

  void DoUnregister(uint64_t handle) {
    auto it = regs_.find(handle);
    if (it == regs_.end()) return;
    ucp_mem_unmap(context_, it->second);
    regs_.erase(it);
  }

 private:
  struct PendingGet {
    Impl* impl = nullptr;
    uint64_t id = 0;
    std::string peer;
    Clock::time_point deadline;
    std::function<void(Status)> done;
    std::vector<void*> outstanding;  // requests not completed yet
    Status status;                   // the first error
    bool cancelled = false;
    bool in_cancel = false;  // CancelGet is walking `outstanding`: not finished under it
  };
  struct SendContext {
    Impl* impl;
    uint64_t call_id;  // 0: a reply (no call to fail)
    std::string header;
    UcxPayload data;
  };
  struct Peer {
    ucp_ep_h ep = nullptr;
    std::unordered_map<std::string, ucp_rkey_h> rkeys;
  };
  struct RndvReceive {
    Impl* impl;
    bool request;
    std::string header, data;
    ucp_ep_h reply_ep;
  };

  Result<ucp_ep_h> Endpoint(const std::string& peer) {
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
    peers_[peer].ep = h;
    return h;
  }

  // A UCX active message header must fit one fragment (a rendezvous RTS holds at most 8 KiB of
  // it), so a long header travels at the start of the data instead: the UCX header is then
  // [1][its length], else [0][the header].
  static constexpr size_t kInlineHeaderMax = 1024;

  void Send(ucp_ep_h ep, unsigned am, SendContext* send, uint32_t flags) {
    if (send->header.size() > kInlineHeaderMax) {
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
    rp.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    rp.cb.send = &Impl::OnSendDone;
    rp.user_data = send;
    rp.flags = flags;
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

  static void OnSendDone(void* request, ucs_status_t status, void* user_data) {
    auto* send = static_cast<SendContext*>(user_data);
    send->impl->transfers_--;
    if (status != UCS_OK) send->impl->FailCall(send->call_id, UcxError("sending", status));
    delete send;
    ucp_request_free(request);
  }

  void FailCall(uint64_t call_id, Status st) {
    auto it = calls_.find(call_id);
    if (it == calls_.end()) return;
    PendingCall call = std::move(it->second);
    calls_.erase(it);
    Complete(std::move(call), std::move(st), {}, {});
  }

  // Runs a call's callback with its reply.
  static void Complete(PendingCall call, Status st, std::string header, std::string data) {
    if (call.done) call.done(std::move(st), std::move(header), std::move(data));
  }

  // Receive buffers for large messages, kept between receives (a fresh one would be faulted in
  // page by page each time). Progress thread only.
  static constexpr size_t kRecycledMin = 1 << 20;
  static constexpr size_t kRecycledMax = 8;
  std::string TakeBuffer(size_t len) {
    std::string buf;
    for (auto it = spare_.begin(); it != spare_.end(); ++it) {
      if (it->capacity() >= len) {
        buf = std::move(*it);
        spare_.erase(it);
        break;
      }
    }
    buf.resize(len);  // fills only what it grows by
    return buf;
  }
  void Recycle(std::string buf) {
    if (buf.capacity() < kRecycledMin) return;
    if (spare_.size() == kRecycledMax) spare_.erase(spare_.begin());
    spare_.push_back(std::move(buf));
  }

  static void OnGetDone(void* request, ucs_status_t status, void* user_data) {
    auto* g = static_cast<PendingGet*>(user_data);
    if (status != UCS_OK && g->status.ok()) g->status = UcxError("get", status);
    // (A request ucp_get_nbx returned is listed before any progress can complete it.)
    auto it = std::find(g->outstanding.begin(), g->outstanding.end(), request);
    if (it != g->outstanding.end()) g->outstanding.erase(it);
    ucp_request_free(request);
    g->impl->MaybeFinishGet(g);
  }

  // Finishes `g` (runs its callback, frees it) once none of its requests is outstanding; with an
  // error, cancels those that are.
  void MaybeFinishGet(PendingGet* g) {
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

  // Cancels g's outstanding requests (their callbacks report UCS_ERR_CANCELED), then finishes it
  // if none is left: `g` may be freed on return.
  void CancelGet(PendingGet* g) {
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

  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
    static_cast<Impl*>(arg)->PeerFailed(ep, status);
  }

  void PeerFailed(ucp_ep_h ep, ucs_status_t status) {
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

  void ClosePeer(const std::string& peer) {
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

  static ucs_status_t OnRequestAm(void* arg, const void* header, size_t header_len, void* data,
                                  size_t len, const ucp_am_recv_param_t* param) {
    return static_cast<Impl*>(arg)->Receive(true, header, header_len, data, len, param);
  }
  static ucs_status_t OnReplyAm(void* arg, const void* header, size_t header_len, void* data,
                                size_t len, const ucp_am_recv_param_t* param) {
    return static_cast<Impl*>(arg)->Receive(false, header, header_len, data, len, param);
  }

  ucs_status_t Receive(bool request, const void* header, size_t header_len, void* data, size_t len,
                       const ucp_am_recv_param_t* param) {
    ucp_ep_h reply_ep =
        (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0 ? param->reply_ep : nullptr;
    std::string h(static_cast<const char*>(header), header_len);
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
      // Into a buffer of the node's own: the call may time out before the data is in, and UCX
      // cannot be made to stop writing into a receive it has started.
      auto* rv = new RndvReceive{this, request, std::move(h), TakeBuffer(len), reply_ep};
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
    Dispatch(request, std::move(h), std::string(static_cast<const char*>(data), len), reply_ep);
    return UCS_OK;
  }

  static void OnRndvDone(void* request, ucs_status_t status, size_t, void* user_data) {
    auto* rv = static_cast<RndvReceive*>(user_data);
    rv->impl->transfers_--;
    if (status == UCS_OK) {
      rv->impl->Landed(rv);
    } else {
      rv->impl->FailReceive(rv, UcxError("receiving", status));
    }
    ucp_request_free(request);
  }

  // A rendezvous message is in: dispatched; frees `rv`.
  void Landed(RndvReceive* rv) {
    Dispatch(rv->request, std::move(rv->header), std::move(rv->data), rv->reply_ep);
    delete rv;
  }

  // A rendezvous message that did not arrive: a reply's call fails; frees `rv`.
  void FailReceive(RndvReceive* rv, const Status& st) {
    const std::string& h = rv->header;
    if (!rv->request && h.size() >= 13 && h[0] == '\0') FailCall(GetU64(h.data() + 1), st);
    Recycle(std::move(rv->data));
    delete rv;
  }

  void Dispatch(bool request, std::string header, std::string data, ucp_ep_h reply_ep) {
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
      if (header.size() < 12 || reply_ep == nullptr) return;  // not ours: dropped
      const uint64_t call_id = GetU64(header.data());
      const uint32_t id = GetU32(header.data() + 8);
      Handler h;
      {
        MutexLock lock(mu_);
        auto it = handlers_.find(id);
        if (it != handlers_.end()) h = it->second;
      }
      Responder respond = [this, call_id, reply_ep](Status st, std::string rh, UcxPayload rd) {
        Post([this, call_id, reply_ep, st = std::move(st), rh = std::move(rh),
              rd = std::move(rd)]() mutable { Reply(reply_ep, call_id, st, rh, std::move(rd)); });
      };
      if (!h) {
        respond(Status::Unsupported("no handler for request " + std::to_string(id)), {}, {});
        return;
      }
      h(header.substr(12), std::move(data), std::move(respond));
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

  void Reply(ucp_ep_h reply_ep, uint64_t call_id, const Status& st, const std::string& header,
             UcxPayload data) {
    auto* send = new SendContext{this, 0, {}, std::move(data)};
    PutU64(&send->header, call_id);
    const std::string err = st.ok() ? std::string() : serve::ToRpc(st).SerializeAsString();
    PutU32(&send->header, static_cast<uint32_t>(err.size()));
    send->header.append(err);
    send->header.append(header);
    Send(reply_ep, kAmReply, send, 0);
  }

  void ExpireDeadlines() {
    const auto now = Clock::now();
    std::vector<uint64_t> late;
    std::vector<std::string> silent;  // peers of calls past their deadline
    for (auto& [id, c] : calls_) {
      if (c.deadline <= now) {
        late.push_back(id);
        if (std::find(silent.begin(), silent.end(), c.peer) == silent.end()) {
          silent.push_back(c.peer);
        }
      }
    }
    for (uint64_t id : late) FailCall(id, Status::DeadlineExceeded("ucx: no reply in time"));
    // A peer that let a call run out is treated as gone: its endpoint is closed (what is still
    // in flight on it fails now rather than at its own deadline), and the next request connects
    // again, so a link that comes back is used afresh instead of through a connection stuck
    // behind what the outage left in it.
    for (const std::string& peer : silent) ClosePeer(peer);
    std::vector<PendingGet*> late_gets;
    std::vector<uint64_t> late_ids;
    std::vector<std::string> late_peers;
    for (auto& [id, g] : gets_) {
      if (g->deadline <= now && !g->cancelled) late_gets.push_back(g.get());
    }
    for (PendingGet* g : late_gets) {
      if (g->status.ok()) g->status = Status::DeadlineExceeded("ucx: get not done in time");
      late_ids.push_back(g->id);
      late_peers.push_back(g->peer);
    }
    for (size_t i = 0; i < late_ids.size(); ++i) {
      // UCX cancels some kinds of requests only (not gets over every transport): the ones left
      // are ended by closing the endpoint, which completes them with an error. A peer that did
      // not answer in time is treated as gone; the next request connects again.
      auto it = gets_.find(late_ids[i]);
      if (it == gets_.end()) continue;
      CancelGet(it->second.get());
      it = gets_.find(late_ids[i]);
      if (it != gets_.end() && !it->second->outstanding.empty()) ClosePeer(late_peers[i]);
    }
  }

  void Loop() EXCLUDES(mu_) {
    for (;;) {
      std::deque<std::function<void()>> tasks;
      bool stopping;
      {
        MutexLock lock(mu_);
        tasks.swap(tasks_);
        stopping = stopping_;
      }
      for (auto& t : tasks) t();
      while (ucp_worker_progress(worker_) != 0) {
      }
      ExpireDeadlines();
      if (stopping) break;
      if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
      pollfd fds[2] = {{worker_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      (void)::poll(fds, 2, 10);
      uint64_t n;
      while (::read(wake_fd_, &n, sizeof(n)) > 0) {
      }
    }
    // Fail what is left, close the endpoints and wait (briefly) for the closes.
    std::vector<uint64_t> left;
    for (auto& [id, c] : calls_) left.push_back(id);
    for (uint64_t id : left) FailCall(id, Status::Aborted("ucx: node shutting down"));
    for (auto& [id, g] : gets_) {
      if (g->status.ok()) g->status = Status::Aborted("ucx: node shutting down");
    }
    std::vector<PendingGet*> pending;
    for (auto& [id, g] : gets_) pending.push_back(g.get());
    for (PendingGet* g : pending) CancelGet(g);
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (!gets_.empty() && Clock::now() < until) ucp_worker_progress(worker_);
    // Sends and rendezvous receives still going, replies to peers' requests among them (on
    // endpoints UCX made for those peers, which this node does not close): UCX destroys such
    // endpoints with the worker and must find none of their transfers left (it asserts so). They
    // end once the peer has taken or given the data, or is found gone.
    const auto drained = Clock::now() + std::chrono::seconds(5);
    while (transfers_ > 0 && Clock::now() < drained) ucp_worker_progress(worker_);
    std::vector<std::string> peers;
    for (auto& [addr, p] : peers_) peers.push_back(addr);
    for (const std::string& p : peers) ClosePeer(p);
    for (void* r : closing_) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < until) {
        ucp_worker_progress(worker_);
      }
      ucp_request_free(r);
    }
    closing_.clear();
    for (auto& [h, memh] : regs_) ucp_mem_unmap(context_, memh);
    regs_.clear();
  }

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int worker_fd_ = -1, wake_fd_ = -1;
  std::string address_;
  std::thread thread_;

  Mutex mu_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::unordered_map<uint32_t, Handler> handlers_ GUARDED_BY(mu_);

  // The progress thread's.
  uint64_t next_id_ = 1;
  std::unordered_map<std::string, Peer> peers_;
  std::unordered_map<uint64_t, PendingCall> calls_;
  std::unordered_map<uint64_t, std::unique_ptr<PendingGet>> gets_;
  std::unordered_map<uint64_t, ucp_mem_h> regs_;
  std::vector<void*> closing_;
  std::vector<std::string> spare_;  // TakeBuffer, Recycle
  uint64_t transfers_ = 0;          // sends and rendezvous receives UCX has not completed
  // Peers UCX reported gone (peer error handling), and when: Endpoint refuses them for
  // kReconnectAfter.
  static constexpr std::chrono::milliseconds kReconnectAfter{500};
  std::unordered_map<std::string, Clock::time_point> failed_;
};

UcxNode::UcxNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  address_ = impl_->address();
}

UcxNode::~UcxNode() { impl_->Shutdown(); }

Result<std::unique_ptr<UcxNode>> UcxNode::Create() {
  auto impl = std::make_unique<Impl>();
  FC_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<UcxNode>(new UcxNode(std::move(impl)));
}

void UcxNode::SetHandler(uint32_t id, Handler handler) {
  impl_->SetHandler(id, std::move(handler));
}

void UcxNode::Quiesce() { impl_->Quiesce(); }

void UcxNode::Stop() { impl_->Shutdown(); }

namespace {
Status Stopped() { return Status::Aborted("ucx: node stopped"); }
}  // namespace

Result<UcxNode::Registration> UcxNode::Register(void* base, size_t len) {
  std::promise<Result<Registration>> p;
  auto f = p.get_future();
  if (!impl_->Post([&] { p.set_value(impl_->DoRegister(base, len)); })) return Stopped();
  return f.get();
}

void UcxNode::Unregister(uint64_t handle) {
  std::promise<void> p;
  auto f = p.get_future();
  const bool posted = impl_->Post([&] {
    impl_->DoUnregister(handle);
    p.set_value();
  });
  if (posted) f.get();  // else the stop released every registration
}

void UcxNode::Call(std::string_view peer, uint32_t id, std::string header, std::string data,
                   std::chrono::milliseconds timeout, ReplyCallback done) {
  // Shared with the task, so that a task the stopped node drops still leaves it to be called.
  auto cb = std::make_shared<ReplyCallback>(std::move(done));
  const bool posted = impl_->Post([impl = impl_.get(), peer = std::string(peer), id,
                                   header = std::move(header), data = std::move(data), timeout,
                                   cb]() mutable {
    Impl::PendingCall call;
    call.done = std::move(*cb);
    impl->DoCall(std::move(peer), id, std::move(header), std::move(data), timeout, std::move(call));
  });
  if (!posted && *cb) (*cb)(Stopped(), {}, {});
}

void UcxNode::Reuse(std::string buffer) { impl_->Reuse(std::move(buffer)); }

Result<std::pair<std::string, std::string>> UcxNode::CallSync(std::string_view peer, uint32_t id,
                                                              std::string header, std::string data,
                                                              std::chrono::milliseconds timeout) {
  std::promise<Result<std::pair<std::string, std::string>>> p;
  auto f = p.get_future();
  Call(peer, id, std::move(header), std::move(data), timeout,
       [&p](Status st, std::string h, std::string d) {
         if (st.ok()) {
           p.set_value(std::make_pair(std::move(h), std::move(d)));
         } else {
           p.set_value(std::move(st));
         }
       });
  return f.get();
}

void UcxNode::Get(std::string_view peer, std::string rkey, std::vector<GetPiece> pieces,
                  std::chrono::milliseconds timeout, std::function<void(Status)> done) {
  auto cb = std::make_shared<std::function<void(Status)>>(std::move(done));
  const bool posted =
      impl_->Post([impl = impl_.get(), peer = std::string(peer), rkey = std::move(rkey),
                   pieces = std::move(pieces), timeout, cb]() mutable {
        impl->DoGet(std::move(peer), std::move(rkey), std::move(pieces), timeout, std::move(*cb));
      });
  if (!posted && *cb) (*cb)(Stopped());
}

Status UcxNode::GetSync(std::string_view peer, std::string rkey, std::vector<GetPiece> pieces,
                        std::chrono::milliseconds timeout) {
  std::promise<Status> p;
  auto f = p.get_future();
  Get(peer, std::move(rkey), std::move(pieces), timeout,
      [&p](Status st) { p.set_value(std::move(st)); });
  return f.get();
}

}  // namespace flatcake::cluster
