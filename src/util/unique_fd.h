// UniqueFd: sole ownership of a file descriptor, closed on destruction. For code that opens,
// accepts or receives descriptors and hands them on (the daemon's sockets, descriptors passed with
// SCM_RIGHTS), so that every early return closes what it held.
//
// Move-only; not thread-safe (one owner). close() errors are ignored: the descriptor is gone
// either way, and a caller that must see a write's failure syncs before letting go.
#pragma once

#include <unistd.h>

#include <utility>

namespace flatcake {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership: the caller closes the returned descriptor.
  int release() { return std::exchange(fd_, -1); }
  // Closes the held descriptor (if any) and takes `fd`.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace flatcake
