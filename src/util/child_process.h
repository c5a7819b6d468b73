// Child: a child process (fork and exec), its stdout read line by line, its stderr appended to a
// file; killed (SIGKILL) and reaped on destruction, and by the kernel when the forking thread
// exits (PR_SET_PDEATHSIG). Used by the tests that run the real `flatcake` binary
// (serve_process_test, cluster_process_test) and by `flatcake soak` for its daemon and client
// processes. Only async-signal-safe calls run between fork and exec, so a multithreaded parent
// may use it. Not thread-safe; one owner.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace flatcake {

// A child process, its stdout read line by line, its stderr appended to a file.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& stderr_path) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return;
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    pid_ = ::fork();
    if (pid_ == 0) {                       // only async-signal-safe calls until exec
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test killed leaves no daemon behind
      ::dup2(out[1], STDOUT_FILENO);
      if (err >= 0) ::dup2(err, STDERR_FILENO);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out[1]);
    if (err >= 0) ::close(err);
    out_ = out[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) ::close(out_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // The next line of its stdout, waiting at most `timeout`; empty at the end or on timeout.
  std::string ReadLine(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      if (std::optional<std::string> line = PollLine(static_cast<int>(left.count()))) return *line;
      if (ended_) return "";
    }
  }
  // The rest of its stdout, up to its end.
  std::string ReadAll() {
    char chunk[4096];
    for (ssize_t n; (n = ::read(out_, chunk, sizeof(chunk))) != 0;) {
      if (n < 0 && errno != EINTR) break;
      if (n > 0) buf_.append(chunk, static_cast<size_t>(n));
    }
    return std::exchange(buf_, {});
  }
  // The next whole line of its stdout when one is there or arrives within `timeout_ms` (0: only
  // what can be read now); nullopt otherwise, and at its end, where a last line that has no
  // newline (a process killed mid-write) is dropped.
  std::optional<std::string> PollLine(int timeout_ms = 0) {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      if (out_ < 0 || ended_) return std::nullopt;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) return std::nullopt;
      char chunk[4096];
      const ssize_t n = ::read(out_, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ended_ = true;
        return std::nullopt;
      }
      buf_.append(chunk, static_cast<size_t>(n));
      timeout_ms = 0;
    }
  }
  void Kill(int sig) { ::kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  // Its stdout's read end (-1 when the pipe could not be made), for a caller's own poll.
  int stdout_fd() const { return out_; }
  // Its exit status as Wait gives it when it has exited (reaping it), nullopt while it runs.
  std::optional<int> TryWait() {
    if (reaped_) return exit_status_;
    int status = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
    reaped_ = true;
    exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_status_;
  }
  // Its exit status, waiting at most `timeout` (then it is killed: -1).
  int Wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (std::optional<int> status = TryWait()) return *status;
      if (pid_ <= 0) return -1;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        reaped_ = true;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  bool reaped_ = false;
  bool ended_ = false;  // its stdout reached its end (or failed)
  int exit_status_ = -1;
  std::string buf_;
};

}  // namespace flatcake
