// UcxNode (ucx_transport.h): start, the task queue, the progress loop and shutdown of its Impl
// (ucx_node_impl.h), and UcxNode's own methods, which post their work to the progress thread.
#include "cluster/ucx_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <future>

#include "cluster/ucx_node_impl.h"

namespace flatcake::cluster {

using ucx_internal::Clock;
using ucx_internal::kAmReply;
using ucx_internal::kAmRequest;
using ucx_internal::UcxError;

Status UcxNode::Impl::Init() {
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

bool UcxNode::Impl::Post(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    if (stopping_) return false;
    tasks_.push_back(std::move(task));
  }
  Wake();
  return true;
}

void UcxNode::Impl::Wake() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void UcxNode::Impl::Reuse(std::string buffer) {
  Post([this, b = std::move(buffer)]() mutable { Recycle(std::move(b)); });
}

void UcxNode::Impl::SetHandler(uint32_t id, Handler h) {
  MutexLock lock(mu_);
  handlers_[id] = std::move(h);
}

void UcxNode::Impl::Quiesce() {
  if (!thread_.joinable() || std::this_thread::get_id() == thread_.get_id()) return;
  auto ran = std::make_shared<std::promise<void>>();
  std::future<void> done = ran->get_future();
  if (!Post([ran] { ran->set_value(); })) return;
  while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    MutexLock lock(mu_);
    if (stopping_) return;  // tasks posted now may never run; the shutdown joins the thread
  }
}

void UcxNode::Impl::Shutdown() {
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

void UcxNode::Impl::ExpireDeadlines() {
  const auto now = Clock::now();
  // Peers gone longer ago than the backoff hold nothing up (Endpoint tries them again), and a
  // daemon sees many callers go: they are forgotten, and so are endpoint closes UCX completed.
  std::erase_if(failed_, [&](const auto& f) { return now - f.second >= kReconnectAfter; });
  std::erase_if(closing_, [](void* r) {
    if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
    ucp_request_free(r);
    return true;
  });
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

void UcxNode::Impl::Loop() {
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
  // Sends and rendezvous receives still going, replies to peers' requests among them: UCX must
  // find none of their transfers left when it destroys the worker (it asserts so). They end once
  // the peer has taken or given the data, or is found gone; the endpoints are closed after.
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
