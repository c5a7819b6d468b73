#include "serve/unix_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

namespace flatcake::serve {

namespace {

using Clock = std::chrono::steady_clock;

// When a call's timeout runs out; none for kNoTimeout (any negative timeout).
class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds timeout) {
    if (timeout.count() >= 0) at_ = Clock::now() + timeout;
  }

  // The wait poll() may make now: -1 for no deadline, else the milliseconds left, rounded up so
  // that a wait never ends just short of the deadline and spins.
  int PollMs() const {
    if (!at_) return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*at_ - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, INT32_MAX));
  }

 private:
  std::optional<Clock::time_point> at_;
};

// Waits until `fd` is ready for `events` (or has hung up: the next call reports that).
Status WaitReady(int fd, short events, const Deadline& deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, deadline.PollMs());
    if (n > 0) return Status::OK();
    if (n == 0) return Status::DeadlineExceeded(std::string("timed out ") + what);
    if (errno != EINTR) return Status::FromErrno(errno, std::string("poll ") + what);
  }
}

Result<sockaddr_un> SocketAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path) ||
      path.find('\0') != std::string::npos) {
    return Status::InvalidArgument("socket path '" + path + "' must have 1 to " +
                                   std::to_string(sizeof(addr.sun_path) - 1) + " bytes, no NUL");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

Result<UniqueFd> NewSocket(int extra_flags) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | extra_flags, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket(AF_UNIX)");
  return fd;
}

// connect(), retried when a signal interrupts it; 0 or the errno it failed with.
int ConnectTo(int fd, const sockaddr_un& addr) {
  for (;;) {
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) return 0;
    if (errno != EINTR) return errno;
  }
}

// Whether a server accepts connections on the socket at `addr`: true when the probe connects
// (or the backlog is full, which a live server's is), false when the connection is refused (no
// one listens: a stale socket) or the file vanished.
Result<bool> SocketIsLive(const sockaddr_un& addr, const std::string& path) {
  FC_ASSIGN_OR_RETURN(UniqueFd probe, NewSocket(SOCK_NONBLOCK));
  const int err = ConnectTo(probe.get(), addr);
  if (err == 0 || err == EAGAIN) return true;
  if (err == ECONNREFUSED || err == ENOENT) return false;
  return Status::FromErrno(err, "probing the socket at " + path);
}

// After sendmsg or recvmsg failed with `err`: OK to try again (a signal interrupted it, or the
// socket became ready for `events` within the deadline), else the error that ends the call.
Status RetryAfter(int err, int fd, short events, const Deadline& deadline, const char* call) {
  if (err == EINTR) return Status::OK();
  if (err == EAGAIN || err == EWOULDBLOCK) {
    return WaitReady(fd, events, deadline,
                     events == POLLIN ? "receiving a frame" : "sending a frame");
  }
  if (err == EPIPE || err == ECONNRESET) {
    return Status::Aborted(std::string("peer closed the connection (") + std::strerror(err) + ")");
  }
  return Status::FromErrno(err, call);
}

// Sends all of `bytes`, the descriptors `fds` with the first of them.
Status SendBytes(int fd, std::span<const uint8_t> bytes, std::span<const int> fds,
                 std::chrono::milliseconds timeout) {
  if (fds.size() > kMaxFrameFds || (bytes.empty() && !fds.empty())) {
    return Status::InvalidArgument(std::to_string(fds.size()) + " descriptors with " +
                                   std::to_string(bytes.size()) + " bytes");
  }
  const Deadline deadline(timeout);
  size_t sent = 0;
  while (sent < bytes.size()) {
    iovec iov{const_cast<uint8_t*>(bytes.data() + sent), bytes.size() - sent};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFrameFds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    // The descriptors travel with the first byte: the first sendmsg that sends any.
    if (sent == 0 && !fds.empty()) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Status::IOError("sendmsg sent nothing");
    FC_RETURN_IF_ERROR(RetryAfter(errno, fd, POLLOUT, deadline, "sendmsg"));
  }
  return Status::OK();
}

// Reads exactly `out.size()` bytes, collecting the descriptors that arrive with them into `fds`
// (at most `max_fds` in all). `frame_bytes_before`: bytes of this frame read before, for the
// messages; 0 means a clean end of stream here is the peer closing between frames.
Status RecvExactly(int fd, std::span<uint8_t> out, std::vector<UniqueFd>& fds, size_t max_fds,
                   size_t frame_bytes_before, const Deadline& deadline) {
  size_t got = 0;
  while (got < out.size()) {
    iovec iov{out.data() + got, out.size() - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFrameFds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      FC_RETURN_IF_ERROR(RetryAfter(errno, fd, POLLIN, deadline, "recvmsg"));
      continue;
    }
    // Take ownership of every descriptor that arrived before judging them.
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.emplace_back(received);
      }
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0 || fds.size() > max_fds) {
      return Status::Corruption("peer sent more descriptors with a frame than it announces (" +
                                std::to_string(max_fds) + ")");
    }
    if (n == 0) {
      const size_t read = frame_bytes_before + got;
      if (read == 0) return Status::Aborted("peer closed the connection");
      return Status::Corruption("connection closed inside a frame, after " + std::to_string(read) +
                                " bytes");
    }
    got += static_cast<size_t>(n);
  }
  return Status::OK();
}

}  // namespace

UnixListener::UnixListener(UniqueFd fd, std::string path, dev_t dev, ino_t ino)
    : fd_(std::move(fd)), path_(std::move(path)), dev_(dev), ino_(ino) {}

UnixListener::UnixListener(UnixListener&& other) noexcept
    : fd_(std::move(other.fd_)),
      path_(std::exchange(other.path_, {})),
      dev_(other.dev_),
      ino_(other.ino_) {}

UnixListener& UnixListener::operator=(UnixListener&& other) noexcept {
  if (this != &other) {
    Remove();
    fd_ = std::move(other.fd_);
    path_ = std::exchange(other.path_, {});
    dev_ = other.dev_;
    ino_ = other.ino_;
  }
  return *this;
}

UnixListener::~UnixListener() { Remove(); }

void UnixListener::Remove() {
  fd_.reset();
  if (path_.empty()) return;
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
    ::unlink(path_.c_str());
  }
  path_.clear();
}

Result<UnixListener> UnixListener::Listen(const std::string& path, mode_t mode, int backlog) {
  FC_ASSIGN_OR_RETURN(const sockaddr_un addr, SocketAddress(path));
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Status::InvalidArgument(path + " exists and is not a socket; not replacing it");
    }
    FC_ASSIGN_OR_RETURN(const bool live, SocketIsLive(addr, path));
    if (live) return Status::Busy("a server is already listening on " + path);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Status::FromErrno(errno, "removing the stale socket " + path);
    }
  } else if (errno != ENOENT) {
    return Status::FromErrno(errno, "stat " + path);
  }

  // Non-blocking, so that Accept never blocks in accept() when another thread took the
  // connection poll() announced.
  FC_ASSIGN_OR_RETURN(UniqueFd fd, NewSocket(SOCK_NONBLOCK));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    // Another server bound the path since the probe.
    if (errno == EADDRINUSE) return Status::Busy("a server is already listening on " + path);
    return Status::FromErrno(errno, "bind " + path);
  }
  Status failed;
  if (::chmod(path.c_str(), mode) != 0) {
    failed = Status::FromErrno(errno, "chmod " + path);
  } else if (::listen(fd.get(), backlog) != 0) {
    failed = Status::FromErrno(errno, "listen " + path);
  } else if (::lstat(path.c_str(), &st) != 0) {
    failed = Status::FromErrno(errno, "stat " + path);
  }
  if (!failed.ok()) {
    ::unlink(path.c_str());
    return failed;
  }
  return UnixListener(std::move(fd), path, st.st_dev, st.st_ino);
}

Result<UniqueFd> UnixListener::Accept(std::chrono::milliseconds timeout) const {
  const Deadline deadline(timeout);
  for (;;) {
    UniqueFd conn(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.valid()) return conn;
    // A connection that failed between poll() and accept() is not this listener's failure.
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status::FromErrno(errno, "accept on " + path_);
    }
    FC_RETURN_IF_ERROR(WaitReady(fd_.get(), POLLIN, deadline, "waiting for a connection"));
  }
}

Result<UniqueFd> ConnectUnix(const std::string& path, std::chrono::milliseconds timeout) {
  FC_ASSIGN_OR_RETURN(const sockaddr_un addr, SocketAddress(path));
  FC_ASSIGN_OR_RETURN(UniqueFd fd, NewSocket(0));
  // A blocking connect waits while the server's backlog is full, up to SO_SNDTIMEO.
  if (timeout.count() >= 0) {
    const auto ms = std::max<int64_t>(timeout.count(), 1);  // 0 would mean no limit
    timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
      return Status::FromErrno(errno, "setsockopt(SO_SNDTIMEO)");
    }
  }
  const int err = ConnectTo(fd.get(), addr);
  if (err == EAGAIN || err == EINPROGRESS) {
    return Status::DeadlineExceeded("timed out connecting to " + path);
  }
  if (err != 0) return Status::FromErrno(err, "connect to " + path);
  if (timeout.count() >= 0) {
    const timeval none{};
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none)) != 0) {
      return Status::FromErrno(errno, "setsockopt(SO_SNDTIMEO)");
    }
  }
  return fd;
}

Status SendFrame(int fd, std::span<const uint8_t> frame, std::span<const int> fds,
                 std::chrono::milliseconds timeout) {
  // The header must announce exactly the descriptors sent, or the peer refuses the frame.
  constexpr FrameLimits kAnyFrame{0, UINT16_MAX, UINT32_MAX};
  FC_ASSIGN_OR_RETURN(const FrameHeader header, DecodeFrameHeader(frame, kAnyFrame));
  if (header.fd_count() != fds.size()) {
    return Status::InvalidArgument("frame announces " + std::to_string(header.fd_count()) +
                                   " descriptors but " + std::to_string(fds.size()) + " are sent");
  }
  return SendBytes(fd, frame, fds, timeout);
}

Status TEST_SendBytes(int fd, std::span<const uint8_t> bytes, std::span<const int> fds,
                      std::chrono::milliseconds timeout) {
  return SendBytes(fd, bytes, fds, timeout);
}

Result<ReceivedFrame> RecvFrame(int fd, const FrameLimits& limits,
                                std::chrono::milliseconds timeout) {
  const Deadline deadline(timeout);
  ReceivedFrame out;
  uint8_t header[kFrameHeaderBytes];
  // Until the header says how many descriptors to expect, any up to the format's limit.
  FC_RETURN_IF_ERROR(RecvExactly(fd, header, out.fds, kMaxFrameFds, 0, deadline));
  FC_ASSIGN_OR_RETURN(out.header, DecodeFrameHeader(header, limits));
  const size_t expected = out.header.fd_count();
  out.payload.resize(out.header.payload_bytes);
  FC_RETURN_IF_ERROR(RecvExactly(fd, out.payload, out.fds, expected, kFrameHeaderBytes, deadline));
  if (out.fds.size() != expected) {
    return Status::Corruption("frame announces " + std::to_string(expected) + " descriptors but " +
                              std::to_string(out.fds.size()) + " came");
  }
  return out;
}

Result<PeerCredentials> GetPeerCredentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Status::FromErrno(errno, "getsockopt(SO_PEERCRED)");
  }
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

PeerAllowList PeerAllowList::OwnUid() { return PeerAllowList{{::geteuid()}, {}}; }

Status CheckPeer(const PeerCredentials& peer, const PeerAllowList& allow) {
  const bool uid_ok = std::find(allow.uids.begin(), allow.uids.end(), peer.uid) != allow.uids.end();
  const bool gid_ok = std::find(allow.gids.begin(), allow.gids.end(), peer.gid) != allow.gids.end();
  if (uid_ok || gid_ok) return Status::OK();
  return Status::PermissionDenied("peer pid " + std::to_string(peer.pid) + " (uid " +
                                  std::to_string(peer.uid) + ", gid " + std::to_string(peer.gid) +
                                  ") is not in the allow-list");
}

}  // namespace flatcake::serve
