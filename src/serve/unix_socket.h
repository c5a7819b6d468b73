// The daemon's Unix domain stream sockets: listening on a path, accepting, connecting, whole
// frames (serve/wire.h) sent and received with their file descriptors (SCM_RIGHTS), and the
// peer's credentials (SO_PEERCRED) checked against an allow-list.
//
// Every call blocks at most its timeout (kNoTimeout: without limit), retries what a signal
// interrupted (EINTR), and works on blocking and non-blocking descriptors alike: it waits with
// poll() and never blocks in send or recv. Descriptors are created close-on-exec, received ones
// included. Sends never raise SIGPIPE (MSG_NOSIGNAL).
//
// Status codes, so that a server or client can tell what happened to a connection:
//  - Aborted: the peer closed the connection (end of stream between frames, EPIPE, ECONNRESET);
//  - Corruption / InvalidArgument / Unsupported: what DecodeFrameHeader says of a bad header;
//    Corruption also for a stream that ends inside a frame and for descriptors that do not match
//    the header's count (those received are closed);
//  - DeadlineExceeded: the timeout ran out (a frame may then be partly sent or read: the
//    connection is no longer in step and must be closed);
//  - PermissionDenied: CheckPeer refused the peer;
//  - IOError and the others of Status::FromErrno for what the system reports.
//
// Thread safety: functions over descriptors; one frame at a time per direction of a socket
// (two threads sending on one socket interleave their frames' bytes).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "flatcake/status.h"
#include "serve/wire.h"
#include "util/unique_fd.h"

namespace flatcake::serve {

// A timeout that never runs out.
inline constexpr std::chrono::milliseconds kNoTimeout{-1};

// A listening socket bound to a path. Destroying it closes the socket and removes the path,
// unless the path no longer is this socket (another server reclaimed it as stale meanwhile).
class UnixListener {
 public:
  // Binds and listens on `path` with file mode `mode` (who may connect: the peer check is still
  // CheckPeer's). A socket already at `path` is probed by connecting to it: a live one (someone
  // accepts) is refused with Busy; a stale one (connection refused: its server died) is removed
  // and replaced. Anything else at `path` is refused with InvalidArgument and left alone, as is
  // a path too long for sun_path (107 bytes).
  static Result<UnixListener> Listen(const std::string& path, mode_t mode = 0600,
                                     int backlog = 128);

  UnixListener(UnixListener&& other) noexcept;
  UnixListener& operator=(UnixListener&& other) noexcept;
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;
  ~UnixListener();

  // The next connection, within `timeout` (DeadlineExceeded otherwise).
  Result<UniqueFd> Accept(std::chrono::milliseconds timeout = kNoTimeout) const;

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

 private:
  UnixListener(UniqueFd fd, std::string path, dev_t dev, ino_t ino);
  void Remove();

  UniqueFd fd_;
  std::string path_;
  // Identity of the socket file this listener created, so that Remove only unlinks its own. A
  // moved-from listener has an empty path and removes nothing.
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

// Connects to the socket at `path`: NotFound when there is none, IOError (connection refused)
// when nobody listens on it, DeadlineExceeded when its server's backlog stays full for
// `timeout`.
Result<UniqueFd> ConnectUnix(const std::string& path,
                             std::chrono::milliseconds timeout = kNoTimeout);

// Sends one whole frame (EncodeFrame's bytes) and, with its first byte, the descriptors `fds`
// (which stay open here: the peer receives duplicates). REQUIRES: fds.size() equals the count
// the frame's header announces.
Status SendFrame(int fd, std::span<const uint8_t> frame, std::span<const int> fds = {},
                 std::chrono::milliseconds timeout = kNoTimeout);

// Sends `bytes` as they are, `fds` with the first of them, unchecked: for tests that play a
// peer which breaks the rules (descriptors its header does not announce).
Status TEST_SendBytes(int fd, std::span<const uint8_t> bytes, std::span<const int> fds,
                      std::chrono::milliseconds timeout = kNoTimeout);

struct ReceivedFrame {
  FrameHeader header;
  std::vector<uint8_t> payload;  // header.payload_bytes long
  std::vector<UniqueFd> fds;     // header.fd_count() descriptors, in the sender's order
};

// Receives one whole frame: reads the header, checks it against `limits` (DecodeFrameHeader)
// before allocating the payload, reads the payload, and collects the descriptors that came with
// it. Parsing the payload is the caller's (ParseRequest / ParseResponse).
Result<ReceivedFrame> RecvFrame(int fd, const FrameLimits& limits = {},
                                std::chrono::milliseconds timeout = kNoTimeout);

// The process at the other end, as the kernel recorded it when the connection was made.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
Result<PeerCredentials> GetPeerCredentials(int fd);

// Who may talk to the daemon: a peer whose uid is in `uids` or whose gid (its effective group
// at connect time; supplementary groups are not seen by SO_PEERCRED) is in `gids`. Root is not
// admitted unless listed.
struct PeerAllowList {
  std::vector<uid_t> uids;
  std::vector<gid_t> gids;

  // The default: this process's effective uid only.
  static PeerAllowList OwnUid();
};
// OK when `allow` admits `peer`; PermissionDenied naming its pid, uid and gid otherwise.
Status CheckPeer(const PeerCredentials& peer, const PeerAllowList& allow);

}  // namespace flatcake::serve
