// ClientSession: one connection of the node daemon (serve/daemon.h), from the peer check and
// Hello to the release of its leases. Internal to the daemon.
//
// The reader thread (Run) serves the connection's requests in order and sends their replies
// itself; the writer thread sends what comes later: a PinRead's reply once FC-MAS admits it
// (FlatStore::AdmitRead's callback, which may run on a store thread and must not block). Both
// send under send_mu_, one whole frame at a time. The connection's id is its session token and
// its lease owner in the store.
//
// Thread safety: Run on one thread; StopReading and finished from any. `mu_` guards the leases
// the session holds and the writer's queue; it is never held while calling the store or
// sending.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "flatcake/gva.h"
#include "media/ssd_file_pool.h"
#include "serve/daemon.h"
#include "serve/flatcake_rpc.pb.h"
#include "serve/tenants.h"
#include "util/thread_annotations.h"
#include "util/unique_fd.h"

namespace flatcake {
class FlatStore;
}

namespace flatcake::serve {

// What every connection of one daemon shares; owned by the daemon, outlives its sessions.
struct DaemonContext {
  FlatStore* store = nullptr;
  TenantLedger* ledger = nullptr;
  const DaemonOptions* options = nullptr;
  DaemonObserver* observer = nullptr;  // never null: a no-op one stands in
  // The HelloReply fields that describe the store (node, arena, files, direct I/O, limits).
  rpc::HelloReply media;
  int arena_fd = -1;         // the descriptor sent with every HelloReply; -1 without DRAM
  SsdPoolGeometry geometry;  // the store's pool: turns pool offsets into (file, offset in file)
  std::atomic<bool> stopping{false};
};

class ClientSession : public std::enable_shared_from_this<ClientSession> {
 public:
  ClientSession(DaemonContext& ctx, UniqueFd fd, uint64_t token);
  ~ClientSession();
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;

  // The connection's whole life, on the calling thread: returns once it is closed, its leases
  // released and its writer stopped.
  void Run();
  // Shutdown: no request is read after those the client has sent already (they are served);
  // PinReads waiting for admission get until `deadline`, then the connection ends.
  void StopReading(std::chrono::steady_clock::time_point deadline);
  bool finished() const { return finished_.load(std::memory_order_acquire); }

 private:
  struct Reservation {
    MediaType medium = MediaType::kDram;
    uint64_t bytes = 0;  // its segments' footprint, counted against the tenant's quota
    uint32_t scope_id = 0;
    uint32_t scope_gen = 0;
    // Batch indices of the reserved keys in the store's order (WriteReservation::blocks), and
    // where each stands in request order: the checksums arrive in request order.
    std::vector<uint32_t> blocks;
  };
  struct Pin {
    uint32_t num_keys = 0;
    uint32_t hits = 0;
    MediaType slowest = MediaType::kDram;
    std::chrono::steady_clock::time_point start;
  };
  // A reply the writer sends; `unpin` (non-zero) is a pin whose admission failed, dropped first.
  struct Outgoing {
    rpc::Response response;
    uint64_t unpin = 0;
  };

  // Peer check and Hello. OK once the connection speaks version_; else the reason to close it
  // (the refusal sent). *error: set when the peer broke the protocol or was refused (not when it
  // merely went away).
  Status Handshake(std::optional<ProtocolError>* error);
  // The request loop; returns the reason it ended, *error set when a broken frame ended it.
  std::string Serve(std::optional<ProtocolError>* error);
  // Ends the connection: waits for admissions in flight (shutdown only), releases the leases,
  // stops the writer, logs and tells the observer. `greeted`: Hello was accepted.
  void Close(const std::string& reason, std::optional<ProtocolError> error, bool greeted);

  // The handlers: each fills `out` (its reply) or returns the Error to send.
  Status HandleLookup(const rpc::Lookup& req, rpc::Response* out);
  Status HandleExists(const rpc::Exists& req, rpc::Response* out);
  Status HandleReserveWrite(const rpc::ReserveWrite& req, rpc::Response* out);
  Status HandlePublishWrite(const rpc::PublishWrite& req, rpc::Response* out);
  Status HandleAbortWrite(const rpc::AbortWrite& req, rpc::Response* out);
  // *deferred: the reply is sent by the admission callback, not now.
  Status HandlePinRead(const rpc::Request& req, rpc::Response* out, bool* deferred);
  Status HandleUnpin(const rpc::Unpin& req, rpc::Response* out);
  // Serves one validated request: its reply or Error is sent (or, for a PinRead, will be).
  void Dispatch(const rpc::Request& request);
  // Takes reservation `id` out of the connection's leases: NotFound when it holds none such;
  // with `checksums`, InvalidArgument (leaving it in force) unless that many were reserved.
  Result<Reservation> TakeReservation(uint64_t id, std::optional<size_t> checksums) EXCLUDES(mu_);
  // A key blob of a request, in the tenant's namespace.
  Result<std::vector<Key>> StoredKeys(const std::string& blob) const;
  std::string Who() const;  // "client 7 (pid 123, uid 1000, tenant a)" for the log

  Status Send(const rpc::Response& response, std::span<const int> fds = {}) EXCLUDES(send_mu_);
  void SendError(uint64_t id, const Status& status);
  // An admission's outcome (the PinRead's reply or Error): sent by the reader when it comes inside
  // its AdmitRead call, else queued for the writer (dropped once the writer stopped). Never
  // blocks.
  void Admitted(Outgoing out) EXCLUDES(mu_);
  // Sends what Admitted kept for this thread during its AdmitRead (reader thread).
  void SendInlineReplies() EXCLUDES(mu_);
  void WriterLoop() EXCLUDES(mu_);
  // The socket is dead or out of step: both directions shut, so that the reader wakes.
  void Break();

  DaemonContext& ctx_;
  FlatStore& store_;
  const UniqueFd fd_;
  const uint64_t token_;  // also the lease owner
  ClientIdentity id_;
  std::unique_ptr<TenantNamespace> ns_;  // set by Hello
  uint16_t version_ = 0;                 // set by Hello
  std::thread writer_;
  std::atomic<bool> stop_reading_{false};
  std::atomic<bool> finished_{false};
  std::atomic<bool> broken_{false};

  // Set by Run before any request is served; read by the admission callback to tell whether it
  // runs inside this thread's AdmitRead, whose reply the reader then sends itself.
  std::thread::id reader_thread_;
  bool admitting_ = false;  // reader thread only
  // Admissions told inside this thread's AdmitRead: its own, and any other of this connection's
  // that the scheduler served meanwhile. Reader thread only.
  std::vector<Outgoing> inline_replies_;

  Mutex send_mu_;  // one frame at a time on the socket; never held with mu_
  Mutex mu_;
  CondVar cv_;
  std::deque<Outgoing> queue_ GUARDED_BY(mu_);
  bool writer_stop_ GUARDED_BY(mu_) = false;
  uint32_t admissions_pending_ GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point shutdown_deadline_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Reservation> reservations_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Pin> pins_ GUARDED_BY(mu_);
};

}  // namespace flatcake::serve
