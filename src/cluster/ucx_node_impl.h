// UcxNode::Impl, private to the transport's sources: the worker, its progress thread and what
// that thread keeps. Its methods are defined by concern:
//   ucx_transport.cc  start, the task queue, the progress loop (deadlines), shutdown, and
//                     UcxNode's own methods;
//   ucx_messages.cc   request/reply messages: sending, receiving (rendezvous into kept buffers),
//                     dispatching to handlers and to the calls waiting for replies;
//   ucx_peers.cc      endpoints, peers UCX reports gone, one-sided gets and registrations.
// Everything below "the progress thread's" runs on the progress thread only.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cluster/ucx_transport.h"
#include "util/thread_annotations.h"

namespace flatcake::cluster {
namespace ucx_internal {

using Clock = std::chrono::steady_clock;

// Active message ids of the transport itself. Requests were message 1 before they carried the
// caller's address: a node of that build and one of this one drop each other's requests (UCX
// has no handler for them), so their calls time out as with a member that does not answer,
// rather than one reading the other's bytes as its own header.
inline constexpr unsigned kAmRequest = 3;
inline constexpr unsigned kAmReply = 2;

inline Status UcxError(const char* what, ucs_status_t st) {
  return Status::IOError(std::string("ucx: ") + what + ": " + ucs_status_string(st));
}

inline void PutU64(std::string* out, uint64_t v) {
  out->append(reinterpret_cast<const char*>(&v), 8);
}
inline void PutU32(std::string* out, uint32_t v) {
  out->append(reinterpret_cast<const char*>(&v), 4);
}
inline uint64_t GetU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t GetU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace ucx_internal

class UcxNode::Impl {
 public:
  using Clock = ucx_internal::Clock;
  // A call waiting for its reply.
  struct PendingCall {
    std::string peer;
    Clock::time_point deadline;
    ReplyCallback done;
  };
  ~Impl() { Shutdown(); }

  // --- ucx_transport.cc ---
  Status Init();
  const std::string& address() const { return address_; }
  // Runs `task` on the progress thread; false (the task dropped, not run) once the node is
  // stopping: every task taken before that runs.
  bool Post(std::function<void()> task) EXCLUDES(mu_);
  void Wake();
  // UcxNode::Reuse: the spare buffers are the progress thread's.
  void Reuse(std::string buffer) EXCLUDES(mu_);
  void SetHandler(uint32_t id, Handler h) EXCLUDES(mu_);
  // UcxNode::Quiesce: a task queued behind everything queued now; the progress thread runs
  // handlers and callbacks one at a time, so once it has run, none that started before is left.
  void Quiesce() EXCLUDES(mu_);
  void Shutdown() EXCLUDES(mu_);

  // --- on the progress thread only, from here on ---

  // ucx_messages.cc
  void DoCall(std::string peer, uint32_t id, std::string header, std::string data,
              std::chrono::milliseconds timeout, PendingCall call);
  // ucx_peers.cc
  void DoGet(std::string peer, std::string rkey_blob, std::vector<GetPiece> pieces,
             std::chrono::milliseconds timeout, std::function<void(Status)> done);
  Result<Registration> DoRegister(void* base, size_t len);
  void DoUnregister(uint64_t handle);

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
    uint64_t generation = 0;  // which endpoint to this peer this is (Endpoint numbers them)
    std::unordered_map<std::string, ucp_rkey_h> rkeys;
  };
  struct RndvReceive {
    Impl* impl;
    bool request;
    std::string header, data;
  };

  // --- ucx_transport.cc ---
  // Fails the calls and gets past their deadlines; their peers are treated as gone.
  void ExpireDeadlines();
  void Loop() EXCLUDES(mu_);

  // --- ucx_messages.cc ---
  // A UCX active message header must fit one fragment (a rendezvous RTS holds at most 8 KiB of
  // it), so a long header travels at the start of the data instead: the UCX header is then
  // [1][its length], else [0][the header].
  // `inline_extra`: bytes of the header beyond that limit that may still travel in the UCX header
  // (a request's caller address).
  static constexpr size_t kInlineHeaderMax = 1024;
  void Send(ucp_ep_h ep, unsigned am, SendContext* send, size_t inline_extra);
  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  void FailCall(uint64_t call_id, Status st);
  // Runs a call's callback with its reply.
  static void Complete(PendingCall call, Status st, std::string header, std::string data);
  // Receive buffers for large messages, kept between receives (a fresh one would be faulted in
  // page by page each time).
  static constexpr size_t kRecycledMin = 1 << 20;
  static constexpr size_t kRecycledMax = 8;
  std::string TakeBuffer(size_t len);
  void Recycle(std::string buf);
  static ucs_status_t OnRequestAm(void* arg, const void* header, size_t header_len, void* data,
                                  size_t len, const ucp_am_recv_param_t* param);
  static ucs_status_t OnReplyAm(void* arg, const void* header, size_t header_len, void* data,
                                size_t len, const ucp_am_recv_param_t* param);
  ucs_status_t Receive(bool request, const void* header, size_t header_len, void* data, size_t len,
                       const ucp_am_recv_param_t* param);
  static void OnRndvDone(void* request, ucs_status_t status, size_t, void* user_data);
  // A rendezvous message is in: dispatched; frees `rv`.
  void Landed(RndvReceive* rv);
  // A rendezvous message that did not arrive: a reply's call fails; frees `rv`.
  void FailReceive(RndvReceive* rv, const Status& st);
  // A request's header starts with its call id, handler id and the caller's worker address (at
  // most kMaxCallerAddress bytes). Its reply goes back by this node's own endpoint to that
  // address, made (or found) as the request arrives, not by UCX's reply endpoint of the request:
  // UCX destroys that one when the caller goes away, and a handler may answer long after (a
  // layer request, when its layer lands or its restore ends). A reply whose endpoint is gone by
  // then (the caller gone, or connected again since) is dropped, with no new connection.
  static constexpr size_t kMaxCallerAddress = 16 << 10;
  void Dispatch(bool request, std::string header, std::string data);
  void Reply(const std::string& caller, uint64_t generation, uint64_t call_id, const Status& st,
             const std::string& header, UcxPayload data);

  // --- ucx_peers.cc ---
  Result<ucp_ep_h> Endpoint(const std::string& peer);
  static void OnGetDone(void* request, ucs_status_t status, void* user_data);
  // Finishes `g` (runs its callback, frees it) once none of its requests is outstanding; with an
  // error, cancels those that are.
  void MaybeFinishGet(PendingGet* g);
  // Cancels g's outstanding requests (their callbacks report UCS_ERR_CANCELED), then finishes it
  // if none is left: `g` may be freed on return.
  void CancelGet(PendingGet* g);
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  void PeerFailed(ucp_ep_h ep, ucs_status_t status);
  void ClosePeer(const std::string& peer);

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
  uint64_t next_generation_ = 1;
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

}  // namespace flatcake::cluster
