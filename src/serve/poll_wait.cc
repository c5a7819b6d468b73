#include "serve/poll_wait.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>

namespace flatcake::serve {

Deadline::Deadline(std::chrono::milliseconds timeout) {
  if (timeout.count() >= 0) at_ = std::chrono::steady_clock::now() + timeout;
}

int Deadline::PollMs() const {
  if (!at_) return -1;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(*at_ - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT32_MAX));
}

Status WaitReady(int fd, short events, const Deadline& deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, deadline.PollMs());
    if (n > 0) return Status::OK();
    if (n == 0) return Status::DeadlineExceeded(std::string("timed out ") + what);
    if (errno != EINTR) return Status::FromErrno(errno, std::string("poll ") + what);
  }
}

}  // namespace flatcake::serve
