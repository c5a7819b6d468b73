// Waiting on a socket within a deadline: the one poll() loop of the daemon's sockets, shared by
// the Unix socket helpers (unix_socket.cc) and the HTTP client that reads a metrics endpoint
// (http_get.cc). Functions over descriptors and values; thread-safe.
#pragma once

#include <chrono>
#include <optional>

#include "flatcake/status.h"

namespace flatcake::serve {

// When a call's timeout runs out: a negative timeout (kNoTimeout) never does.
class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds timeout);

  // The wait poll() may make now: -1 for no deadline, else the milliseconds left, rounded up so
  // that a wait never ends just short of the deadline and spins.
  int PollMs() const;

 private:
  std::optional<std::chrono::steady_clock::time_point> at_;
};

// Waits until `fd` is ready for `events` (or has hung up: the next call on it reports that),
// retrying what a signal interrupted. DeadlineExceeded "timed out <what>" when the deadline
// passes first.
Status WaitReady(int fd, short events, const Deadline& deadline, const char* what);

}  // namespace flatcake::serve
