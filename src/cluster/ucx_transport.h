// UcxNode: the cluster's data transport on UCX (Debian libucx 1.13): one UCP worker, driven by
// one progress thread that makes every UCX call (the worker runs single-threaded), offering
//   - request/reply messages: Call sends (handler id, header, data) to a peer, named by its
//     worker address, as a UCX active message; the peer's handler answers once through its
//     Responder, from any thread, by the peer's own endpoint to the caller's address (the
//     request carries it), so an answer to a caller gone meanwhile is dropped; the caller's
//     callback gets the reply, or an error when the peer is gone (UCX reports it: peer error
//     handling) or the timeout passes;
//   - one-sided reads: Register exposes a local region and packs its remote key; Get reads bytes
//     of a peer's region (its address and packed key) straight into a local buffer with UCX RMA
//     (ucp_get_nbx). UCX chooses the transport: RDMA where the fabric has it, else TCP; with
//     peer error handling on (which this node needs), UCX 1.13 takes TCP between the processes
//     of one machine too, its shared-memory transports not offering it (docs/cluster.md).
// Large messages travel by UCX rendezvous, into a string of the node's own that the callback
// gets (a call that timed out leaves the caller's memory alone whatever arrives later); Reuse
// gives it back for the next one.
//
// Thread safety: every method may be called from any thread. Callbacks and handlers run on the
// progress thread: they must not block on another Call or Get of the same node.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flatcake/status.h"

namespace flatcake::cluster {

// The data of a reply: bytes it owns, or bytes elsewhere that `keep` keeps alive until UCX has
// sent them (no copy).
struct UcxPayload {
  UcxPayload() = default;
  UcxPayload(std::string bytes) : owned(std::move(bytes)) {}  // NOLINT(google-explicit-constructor)
  UcxPayload(const char* at, size_t n, std::shared_ptr<const void> keepalive)
      : ptr(at), len(n), keep(std::move(keepalive)) {}
  const char* data() const { return ptr != nullptr ? ptr : owned.data(); }
  size_t size() const { return ptr != nullptr ? len : owned.size(); }

  std::string owned;
  const char* ptr = nullptr;
  size_t len = 0;
  std::shared_ptr<const void> keep;
};

class UcxNode {
 public:
  // Answers a request: header and data of the reply, or an error status sent back instead.
  using Responder = std::function<void(Status status, std::string header, UcxPayload data)>;
  using Handler = std::function<void(std::string header, std::string data, Responder respond)>;
  using ReplyCallback = std::function<void(Status status, std::string header, std::string data)>;

  // A context and worker with active messages, RMA and wakeup, and the progress thread. IOError
  // naming UCX's status when UCX cannot start.
  static Result<std::unique_ptr<UcxNode>> Create();
  // Stop().
  ~UcxNode();
  UcxNode(const UcxNode&) = delete;
  UcxNode& operator=(const UcxNode&) = delete;

  // Stops the progress thread (pending calls and gets fail with Aborted), closes the endpoints,
  // releases registrations, destroys the worker and context: from then on no peer reaches this
  // node's registered memory, calls and gets fail with Aborted at once, Register does too and
  // SetHandler has no effect. Idempotent; not from a handler or callback.
  void Stop();

  // This worker's address (binary), what peers pass to Call and Get.
  const std::string& address() const { return address_; }

  // Handler for requests with `id` (0..65535); replaces any earlier one. Set handlers before
  // peers call.
  void SetHandler(uint32_t id, Handler handler);
  // Returns once every handler and callback call that the progress thread had started, or had
  // queued, before this call has returned: after SetHandler replaced a handler, the old one's
  // captures may then go. At once when the node is shutting down (its progress thread then runs
  // nothing new) or when called on the progress thread itself (from a handler or a callback).
  void Quiesce();

  // Exposes [base, base + len) to peers' Gets: a handle for Unregister and the packed key peers
  // need (send it to them with the region's address). Registering a buffer that local Gets land
  // in makes them faster (UCX would otherwise register it for each get); its key is then unused.
  struct Registration {
    uint64_t handle = 0;
    std::string rkey;
  };
  Result<Registration> Register(void* base, size_t len);
  void Unregister(uint64_t handle);

  void Call(std::string_view peer, uint32_t id, std::string header, std::string data,
            std::chrono::milliseconds timeout, ReplyCallback done);
  // Gives the data string of a reply back to the node, which receives its next large message into
  // it rather than into fresh pages (faulted in page by page). Any thread.
  void Reuse(std::string buffer);
  // Call, waiting for the reply.
  Result<std::pair<std::string, std::string>> CallSync(std::string_view peer, uint32_t id,
                                                       std::string header, std::string data,
                                                       std::chrono::milliseconds timeout);

  // One piece of a Get: `len` bytes at `remote_addr` of the peer's region into `local`.
  struct GetPiece {
    void* local = nullptr;
    uint64_t remote_addr = 0;
    size_t len = 0;
  };
  // Reads every piece from `peer`'s region whose packed key is `rkey`; `done` runs once, after
  // the last piece landed or with the first error (the peer gone, the timeout passed).
  void Get(std::string_view peer, std::string rkey, std::vector<GetPiece> pieces,
           std::chrono::milliseconds timeout, std::function<void(Status)> done);
  Status GetSync(std::string_view peer, std::string rkey, std::vector<GetPiece> pieces,
                 std::chrono::milliseconds timeout);

 private:
  class Impl;
  explicit UcxNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

}  // namespace flatcake::cluster
