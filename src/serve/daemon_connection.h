// DaemonConnection: one client connection to the node daemon (docs/protocol.md): the socket,
// Hello, this process's data half over the daemon's media (store/attached_media.h: the arena
// mapped from the descriptor of the HelloReply, the pool files opened here), and pipelined calls
// (requests go out as they are made; a reader thread pairs the replies with their calls by id).
// RemoteStore (serve/remote_store.h) is built on it; tests use it to speak the protocol directly.
//
// A broken connection stays broken: once the socket fails (the daemon went away, a reply did
// not come within request_timeout, a frame made no sense), every call in flight and every later
// call fails with IOError (DeadlineExceeded for the timeout) naming why. A new connection is the
// caller's to make (RemoteStore does, by itself).
//
// Lifetime: whoever makes calls on a connection, or reads through its media, holds a Use, which
// counts them; the owner destroys the connection only once none is left (RemoteStore keeps
// replaced connections until then), and never on the connection's reader thread (no callback
// may destroy it).
//
// Thread safety: Call and CallAsync from any number of threads; callbacks run on the reader
// thread (or, for a call that could not be sent, on the caller's), must be short and must not
// wait for other replies.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "flatcake/status.h"
#include "serve/flatcake_rpc.pb.h"
#include "store/attached_media.h"
#include "util/thread_annotations.h"
#include "util/unique_fd.h"

namespace flatcake::serve {

struct ClientOptions {
  std::string client_name = "flatcake client";  // in the daemon's log
  // Connecting and Hello, each attempt.
  std::chrono::milliseconds connect_timeout{5000};
  // A reply that takes longer breaks the connection (the daemon then releases what it held for
  // it). PinRead replies wait for FC-MAS's admission and have no limit.
  std::chrono::milliseconds request_timeout{60000};
  // After a failed attempt to reconnect, calls fail (or miss) without trying again for this long.
  std::chrono::milliseconds reconnect_interval{200};
  bool verify_checksums = true;  // verify every block read against its stored checksum
  AttachedMediaOptions media;    // this process's engine, window and staging
};

// The pool offset, in this process's view of the pool (DaemonConnection's media: the files back
// to back from their first byte), of the SSD location a reply names as file `file_index`,
// position `offset` (superblock included). InvalidArgument outside the files.
Result<uint64_t> ClientPoolOffset(const SsdPoolGeometry& geometry, uint32_t file_index,
                                  uint64_t offset);

class DaemonConnection {
 public:
  // Connects to the daemon's socket at `socket_path`, says Hello as `tenant` and attaches its
  // media. The daemon's refusals come back as they are (PermissionDenied for a peer outside its
  // allow-list, Busy past its client limit, Unsupported for no common protocol version);
  // NotFound or IOError when nothing listens at the path.
  static Result<std::unique_ptr<DaemonConnection>> Open(const std::string& socket_path,
                                                        const std::string& tenant,
                                                        const ClientOptions& options);
  ~DaemonConnection();
  DaemonConnection(const DaemonConnection&) = delete;
  DaemonConnection& operator=(const DaemonConnection&) = delete;

  // The outcome of a call: the reply, or what failed it (the daemon's Error as a Status, or the
  // connection's failure).
  using Callback = std::function<void(Result<rpc::Response>)>;
  // Sends `request` (its id is set here) and runs `done` once with the outcome.
  void CallAsync(rpc::Request request, Callback done);
  // Sends `request` and waits for the outcome, at most request_timeout (then the connection is
  // broken: DeadlineExceeded). A reply whose body is not `expect` is InvalidArgument.
  Result<rpc::Response> Call(rpc::Request request, rpc::Response::BodyCase expect);

  // Breaks the connection with `why` (idempotent): the socket is shut, the calls in flight fail.
  void Break(const Status& why) EXCLUDES(mu_);
  bool broken() const { return broken_.load(std::memory_order_acquire); }

  const rpc::HelloReply& hello() const { return hello_; }
  const AttachedMedia& media() const { return *media_; }
  const std::string& socket_path() const { return path_; }

  // Counts a user of the connection (see Lifetime above); movable, released on destruction.
  class Use {
   public:
    Use() = default;
    explicit Use(DaemonConnection* c) : c_(c) {
      if (c_) c_->users_.fetch_add(1, std::memory_order_relaxed);
    }
    Use(Use&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
    Use& operator=(Use&& o) noexcept {
      if (this != &o) {
        Release();
        c_ = std::exchange(o.c_, nullptr);
      }
      return *this;
    }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    ~Use() { Release(); }
    // After this the connection must not be touched through this Use.
    void Release() {
      if (c_) c_->users_.fetch_sub(1, std::memory_order_release);
      c_ = nullptr;
    }
    DaemonConnection* operator->() const { return c_; }
    DaemonConnection& operator*() const { return *c_; }
    explicit operator bool() const { return c_ != nullptr; }

   private:
    DaemonConnection* c_ = nullptr;
  };
  // Users holding a Use now.
  uint64_t users() const { return users_.load(std::memory_order_acquire); }

 private:
  DaemonConnection(std::string path, UniqueFd fd, const ClientOptions& options);
  // Says Hello and attaches the media the reply describes.
  Status Handshake(const std::string& tenant);
  void ReaderLoop();

  const std::string path_;
  const UniqueFd fd_;
  const ClientOptions options_;
  rpc::HelloReply hello_;  // fixed after Open
  uint16_t version_ = 0;   // fixed after Open
  std::unique_ptr<AttachedMedia> media_;
  std::thread reader_;
  std::atomic<uint64_t> next_id_{2};  // 1 was Hello's
  std::atomic<uint64_t> users_{0};
  std::atomic<bool> broken_{false};

  Mutex send_mu_;  // one frame at a time; never held with mu_
  Mutex mu_;
  std::unordered_map<uint64_t, Callback> pending_ GUARDED_BY(mu_);
  Status why_broken_ GUARDED_BY(mu_);
};

}  // namespace flatcake::serve
